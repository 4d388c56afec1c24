//! JSON bodies for the errors hyper answers itself.
//!
//! A request hyper cannot parse (a malformed request line or header, a URI or a header
//! section over its limits) never reaches the API: hyper answers it with `400`, `414` or
//! `431` and an empty body, then closes the connection. Every other answer of the node is JSON
//! with a message (issue 15, item 9), so the connection's stream is wrapped: a response
//! head that is exactly hyper's error form is rewritten into the same status with a JSON
//! body saying what was wrong. The API's own responses always carry a body, so they never
//! match.
//!
//! Invariant: bytes that are not such a head pass through unchanged and in order; a
//! rewritten head is written whole before hyper is told its own bytes were written.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A connection stream whose hyper-made error answers get a JSON body.
pub(crate) struct JsonErrors<T> {
    inner: T,
    /// A replacement being written: its bytes, how many are written, and how many of
    /// hyper's bytes it stands for.
    pending: Option<(Vec<u8>, usize, usize)>,
}

impl<T> JsonErrors<T> {
    /// Wraps `inner`.
    pub(crate) fn new(inner: T) -> JsonErrors<T> {
        JsonErrors {
            inner,
            pending: None,
        }
    }
}

/// What a client did wrong, for the statuses hyper answers itself.
fn message(status: &[u8]) -> Option<&'static str> {
    Some(match status {
        b"400" => "malformed HTTP request: the request line or a header could not be parsed",
        b"414" => "request URI too long",
        b"431" => "request header section too large",
        _ => return None,
    })
}

/// The JSON-bodied replacement of `buf` when `buf` is exactly one of hyper's own error
/// heads: an HTTP/1.x status line with one of its statuses, `content-length: 0`, no
/// `content-type` (every answer of the API has one), and nothing after the head. The
/// replacement keeps the status and the other headers, and says `connection: close` (hyper
/// closes the connection after such an error, also on HTTP/1.0 where it does not say so).
pub(crate) fn rewrite(buf: &[u8]) -> Option<Vec<u8>> {
    let rest = buf
        .strip_prefix(b"HTTP/1.1 ")
        .or_else(|| buf.strip_prefix(b"HTTP/1.0 "))?;
    let text = message(rest.get(..3)?)?;
    let head = std::str::from_utf8(buf.strip_suffix(b"\r\n\r\n")?).ok()?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next()?;
    let mut kept = Vec::new();
    let mut empty_body = false;
    for line in lines {
        let (name, value) = line.split_once(':')?;
        match name.to_ascii_lowercase().as_str() {
            "content-type" => return None,
            "content-length" => empty_body = value.trim() == "0",
            "connection" => {}
            _ => kept.push(line),
        }
    }
    if !empty_body {
        return None;
    }
    let body = serde_json::json!({ "error": text }).to_string();
    let mut out =
        format!("{status_line}\r\nconnection: close\r\ncontent-type: application/json\r\n");
    out.push_str(&format!("content-length: {}\r\n", body.len()));
    for line in kept {
        out.push_str(line);
        out.push_str("\r\n");
    }
    out.push_str("\r\n");
    out.push_str(&body);
    Some(out.into_bytes())
}

impl<T: AsyncRead + Unpin> AsyncRead for JsonErrors<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for JsonErrors<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if this.pending.is_none() {
            match rewrite(buf) {
                Some(replacement) => this.pending = Some((replacement, 0, buf.len())),
                None => return Pin::new(&mut this.inner).poll_write(cx, buf),
            }
        }
        let (bytes, written, stands_for) = this.pending.as_mut().expect("set above");
        while *written < bytes.len() {
            match ready!(Pin::new(&mut this.inner).poll_write(cx, &bytes[*written..])) {
                Ok(0) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Ok(n) => *written += n,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
        let stands_for = (*stands_for).min(buf.len());
        this.pending = None;
        Poll::Ready(Ok(stands_for))
    }

    /// Not vectored, so hyper hands over a response head as one buffer that can be
    /// recognised.
    fn is_write_vectored(&self) -> bool {
        false
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::rewrite;

    #[test]
    fn hyper_error_heads_get_a_json_body_and_nothing_else_is_touched() {
        let head = b"HTTP/1.1 414 URI Too Long\r\nconnection: close\r\ncontent-length: 0\r\ndate: Tue, 01 Dec 2026 03:47:32 GMT\r\n\r\n";
        let out = String::from_utf8(rewrite(head).unwrap()).unwrap();
        let (head_out, body) = out.split_once("\r\n\r\n").unwrap();
        assert!(head_out.starts_with("HTTP/1.1 414 URI Too Long\r\n"));
        assert!(head_out.contains("content-type: application/json"));
        assert!(head_out.contains(&format!("content-length: {}", body.len())));
        assert!(head_out.contains("date: Tue, 01 Dec 2026"));
        let json: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(json["error"], "request URI too long");
        // The API's own answers: a body, no connection: close, another status, or more
        // than one head in the buffer.
        let ours = b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}";
        assert!(rewrite(ours).is_none());
        let ok = b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 0\r\n\r\n";
        assert!(rewrite(ok).is_none());
        // On a connection that spoke HTTP/1.0, hyper's head says HTTP/1.0 and nothing
        // about the connection.
        let old = b"HTTP/1.0 400 Bad Request\r\ncontent-length: 0\r\ndate: Tue, 01 Dec 2026 03:47:32 GMT\r\n\r\n";
        let out = String::from_utf8(rewrite(old).unwrap()).unwrap();
        assert!(out.starts_with("HTTP/1.0 400 Bad Request\r\nconnection: close\r\n"));
        assert!(out.ends_with("\r\n\r\n{\"error\":\"malformed HTTP request: the request line or a header could not be parsed\"}"));
        let mut two = head.to_vec();
        two.extend_from_slice(head);
        assert!(rewrite(&two).is_none());
        assert!(rewrite(&head[..head.len() - 2]).is_none());
    }
}
