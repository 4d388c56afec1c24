//! TLS for the node: the listener's certificate (`--tls-cert`, `--tls-key`) and the extra
//! certificate authorities its HTTP clients trust besides the system's (`--cloud-ca`).
//!
//! Invariant: everything is read and checked when the node starts, so a bad file is an
//! error naming it, never a node that serves and then fails every handshake.

use std::path::Path;
use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls;

/// A TLS file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The file cannot be read.
    #[error("cannot read {path}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The file holds no usable PEM item of the kind needed.
    #[error("{path}: {what}")]
    Content {
        /// The file.
        path: String,
        /// What is wrong, and what it should hold.
        what: String,
    },
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.display().to_string(),
        source,
    })
}

fn content(path: &Path, what: impl Into<String>) -> TlsError {
    TlsError::Content {
        path: path.display().to_string(),
        what: what.into(),
    }
}

/// The certificates of a PEM file (at least one).
fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read(path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| content(path, format!("not a PEM certificate file: {e}")))?;
    if certs.is_empty() {
        return Err(content(
            path,
            "no certificate in it (expected -----BEGIN CERTIFICATE-----)",
        ));
    }
    Ok(certs)
}

/// The listener's TLS configuration: the certificate chain in `cert` (PEM, leaf first)
/// and its private key in `key` (PEM: PKCS#8, PKCS#1 or SEC1). HTTP/1.1 only, like the
/// plain listener.
pub fn server_config(cert: &Path, key: &Path) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let chain = certificates(cert)?;
    let key_pem = read(key)?;
    if key_pem.windows(9).any(|w| w == b"ENCRYPTED") {
        return Err(content(
            key,
            "the private key is encrypted; give the node a decrypted copy (openssl pkey -in \
             FILE -out KEY), readable by the service user only",
        ));
    }
    let private = PrivateKeyDer::from_pem_slice(&key_pem)
        .map_err(|e| content(key, format!("no usable private key in it: {e}")))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| content(cert, e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(chain, private)
        .map_err(|e| {
            content(
                key,
                format!(
                    "does not go with the certificate in {}: {e}",
                    cert.display()
                ),
            )
        })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The certificate authorities in `path` (PEM), for the node's HTTP clients (health
/// checks and peer probes) to trust besides the system's roots.
pub fn ca_certificates(path: &Path) -> Result<Vec<reqwest::Certificate>, TlsError> {
    let certs = certificates(path)?;
    // Parsed as trust anchors now, so a damaged file is refused at start rather than
    // trusted as nothing.
    let mut store = rustls::RootCertStore::empty();
    for der in &certs {
        store
            .add(der.clone())
            .map_err(|e| content(path, format!("not a usable CA certificate: {e}")))?;
    }
    certs
        .into_iter()
        .map(|der| {
            reqwest::Certificate::from_der(&der)
                .map_err(|e| content(path, format!("a certificate cannot be used: {e}")))
        })
        .collect()
}
