//! JSONL input as every lhc command reads it (`log import`, `log append`, `replay` of a
//! file): one record per line, as bytes.
//!
//! Invariants, shared so that a file's offsets are the same whoever reads it:
//! - a line is blank only when it holds nothing but JSON whitespace (space, tab, CR);
//!   a line of NBSP, U+3000 or form feeds is a record — an invalid one, rejected or
//!   quarantined, never silently dropped;
//! - lines are bytes: invalid UTF-8 is the record's problem (a decode error naming its
//!   line), not a read error that ends the command;
//! - line numbers are 1-based and count every line, blank ones included;
//! - a UTF-8 byte order mark at the very start (Windows PowerShell 5's `Out-File` and
//!   Notepad's "UTF-8 with BOM" write one) is not part of the first record: JSON allows a
//!   reader to ignore it (RFC 8259 §8.1), and taken as a record's bytes it made the
//!   file's first record (typically the site's configuration) invalid.

use std::io::BufRead;

/// Whether a line holds nothing but JSON whitespace.
pub fn is_blank(line: &[u8]) -> bool {
    line.iter().all(|b| matches!(b, b' ' | b'\t' | b'\r'))
}

/// Non-blank lines of a JSONL stream: (1-based line number, the line without its newline).
pub struct JsonlLines<R> {
    input: R,
    number: usize,
}

impl<R: BufRead> JsonlLines<R> {
    /// Lines of `input`.
    pub fn new(input: R) -> JsonlLines<R> {
        JsonlLines { input, number: 0 }
    }
}

impl<R: BufRead> Iterator for JsonlLines<R> {
    type Item = std::io::Result<(usize, Vec<u8>)>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let mut line = Vec::new();
            match self.input.read_until(b'\n', &mut line) {
                Ok(0) => return None,
                Ok(_) => {
                    self.number += 1;
                    if line.last() == Some(&b'\n') {
                        line.pop();
                    }
                    let bom = lhc_engine::decode::BYTE_ORDER_MARK;
                    if self.number == 1 && line.starts_with(bom) {
                        line.drain(..bom.len());
                    }
                    if is_blank(&line) {
                        continue;
                    }
                    return Some(Ok((self.number, line)));
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Some(Err(e)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blank_means_json_whitespace_only_and_bytes_survive() {
        let input: &[u8] =
            b"{\"a\":1}\n\n  \t\r\n\xc2\xa0\n\xe3\x80\x80\n\x0c\n{\"b\":\xff}\r\nlast";
        let lines: Vec<(usize, Vec<u8>)> = JsonlLines::new(input).map(Result::unwrap).collect();
        let numbers: Vec<usize> = lines.iter().map(|l| l.0).collect();
        assert_eq!(
            numbers,
            vec![1, 4, 5, 6, 7, 8],
            "NBSP, U+3000, form feed are records"
        );
        assert_eq!(
            lines[4].1,
            b"{\"b\":\xff}\r".to_vec(),
            "invalid UTF-8 kept as bytes"
        );
        assert_eq!(lines[5].1, b"last".to_vec());
    }

    #[test]
    fn a_byte_order_mark_at_the_start_only_is_not_part_of_the_record() {
        let input: &[u8] = b"\xef\xbb\xbf{\"a\":1}\r\n\xef\xbb\xbf{\"b\":2}\n";
        let lines: Vec<(usize, Vec<u8>)> = JsonlLines::new(input).map(Result::unwrap).collect();
        assert_eq!(lines[0], (1, b"{\"a\":1}\r".to_vec()));
        // Anywhere else it is the record's (an invalid one, quarantined or refused).
        assert_eq!(lines[1], (2, b"\xef\xbb\xbf{\"b\":2}".to_vec()));
        // A file of a BOM alone holds no record.
        let lines: Vec<_> = JsonlLines::new(&b"\xef\xbb\xbf\n"[..]).collect();
        assert!(lines.is_empty());
    }
}
