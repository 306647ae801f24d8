//! A small HTTP/1.1 client for the loopback ports our processes serve
//! (`/healthz`, `/readyz`, `/metrics`, the extender's API), plain or over
//! TLS with a client certificate ([`TlsClient`]): enough for tests and
//! benchmarks, without a client crate's connection pool.
//!
//! A server that answers before reading the whole body (a 413) may reset
//! the connection after its answer; what arrived before the reset counts.

use crate::pki::CertFiles;
use anyhow::Context as _;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn request_text(method: &str, path: &str, body: &str) -> String {
    format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// (status, body) from a raw answer; `None` if it is not HTTP.
fn parse(answer: &[u8]) -> Option<(u16, String)> {
    let text = String::from_utf8_lossy(answer);
    let status = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string())?;
    Some((status, body))
}

/// `method path` on 127.0.0.1:`port` with `body` (JSON when not empty):
/// the status and the body, or `None` when nothing answered within 30 s.
pub async fn request(port: u16, method: &str, path: &str, body: &str) -> Option<(u16, String)> {
    let text = request_text(method, path, body);
    tokio::task::spawn_blocking(move || {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(30))).ok()?;
        // A server that answered early may stop reading: its answer still counts.
        let _ = s.write_all(text.as_bytes());
        let mut answer = Vec::new();
        let mut chunk = [0u8; 16 * 1024];
        loop {
            match s.read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => answer.extend_from_slice(&chunk[..n]),
            }
        }
        parse(&answer)
    })
    .await
    .ok()
    .flatten()
}

/// A GET on 127.0.0.1:`port`.
pub async fn get(port: u16, path: &str) -> Option<(u16, String)> {
    request(port, "GET", path, "").await
}

/// HTTPS to 127.0.0.1, trusting one CA, with a client certificate or none.
#[derive(Clone)]
pub struct TlsClient {
    config: Arc<rustls::ClientConfig>,
}

impl TlsClient {
    /// Trusts the CA certificate(s) in `ca` (PEM) and presents `identity`
    /// when given.
    pub fn new(ca: &Path, identity: Option<&CertFiles>) -> anyhow::Result<TlsClient> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_file_iter(ca)
            .with_context(|| format!("reading {}", ca.display()))?
        {
            roots.add(cert?)?;
        }
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots);
        let config = match identity {
            None => builder.with_no_client_auth(),
            Some(files) => {
                let chain = CertificateDer::pem_file_iter(&files.cert)
                    .with_context(|| format!("reading {}", files.cert.display()))?
                    .collect::<Result<Vec<_>, _>>()?;
                let key = PrivateKeyDer::from_pem_file(&files.key)
                    .with_context(|| format!("reading {}", files.key.display()))?;
                builder.with_client_auth_cert(chain, key)?
            }
        };
        Ok(TlsClient {
            config: Arc::new(config),
        })
    }

    /// `method path` on https://127.0.0.1:`port`: the status and the body,
    /// or why none came (a refused handshake: `received fatal alert:
    /// CertificateRequired`, `... UnknownCA`; a timeout after 30 s).
    pub async fn request(
        &self,
        port: u16,
        method: &str,
        path: &str,
        body: &str,
    ) -> Result<(u16, String), RequestError> {
        let text = request_text(method, path, body);
        let connector = tokio_rustls::TlsConnector::from(self.config.clone());
        let exchange = async {
            let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .map_err(RequestError::Connect)?;
            let name = ServerName::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST).into());
            let mut tls = connector
                .connect(name, tcp)
                .await
                .map_err(RequestError::Handshake)?;
            let written = tls.write_all(text.as_bytes()).await;
            let mut answer = Vec::new();
            let read = tls.read_to_end(&mut answer).await;
            match (parse(&answer), written.and(read.map(|_| ()))) {
                (Some(answer), _) => Ok(answer),
                (None, Err(e)) => Err(RequestError::Exchange(e)),
                (None, Ok(())) => Err(RequestError::NotHttp(
                    String::from_utf8_lossy(&answer).into_owned(),
                )),
            }
        };
        tokio::time::timeout(Duration::from_secs(30), exchange)
            .await
            .unwrap_or(Err(RequestError::Timeout))
    }
}

/// Why [`TlsClient::request`] got no HTTP answer.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    #[error("connecting: {0}")]
    Connect(std::io::Error),
    #[error("TLS handshake: {0}")]
    Handshake(std::io::Error),
    /// Sending or reading failed before an answer came: a TLS alert the
    /// server sent (`received fatal alert: CertificateRequired`) or a reset.
    #[error("{0}")]
    Exchange(std::io::Error),
    #[error("not an HTTP answer: {0:?}")]
    NotHttp(String),
    #[error("no answer within 30 s")]
    Timeout,
}

impl RequestError {
    /// The TLS alert the server refused the exchange with, where that is
    /// why no answer came (a client certificate missing or from another CA).
    pub fn alert_received(&self) -> Option<rustls::AlertDescription> {
        let (RequestError::Handshake(e) | RequestError::Exchange(e)) = self else {
            return None;
        };
        match e.get_ref()?.downcast_ref::<rustls::Error>()? {
            rustls::Error::AlertReceived(alert) => Some(*alert),
            _ => None,
        }
    }
}
