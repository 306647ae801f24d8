//! TLS on the extender API: the serving certificate kube-scheduler checks
//! against its `tlsConfig.caFile`, and, with a client CA, the client
//! certificate it presents (`tlsConfig.certFile`/`keyFile`) checked against
//! that CA before any HTTP is read. rustls with ring, as the kube client.
//!
//! [`TlsListener`] accepts TCP connections and runs each handshake in a task
//! of its own, bounded in time ([`HANDSHAKE_TIMEOUT`]) and in number
//! ([`MAX_HANDSHAKES`]): a peer without a certificate the CA signed never
//! gets to send a request, and a slow one holds a slot for at most the
//! timeout. axum serves HTTP/1.1 over the streams that complete.

use super::metrics::{ExtenderMetrics, HandshakeLabel};
use rustls::RootCertStore;
use rustls::ServerConfig;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tracing::{debug, warn};

/// How long a peer has to complete the TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Handshakes in progress at once; further connections wait in the
/// kernel's accept queue.
pub const MAX_HANDSHAKES: usize = 128;

/// The PEM files named on the command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    /// `--tls-cert-file`: the serving certificate, then its chain.
    pub cert: PathBuf,
    /// `--tls-key-file`: its private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// `--client-ca-file`: when given, every client must present a
    /// certificate this CA (or one of these CAs) signed.
    pub client_ca: Option<PathBuf>,
}

/// A TLS file that cannot be used; each names its flag and path.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{flag} {}: {source}", path.display())]
    Read {
        flag: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{flag} {}: no {what} in it (expected PEM: {expected})", path.display())]
    Empty {
        flag: &'static str,
        path: PathBuf,
        what: &'static str,
        expected: &'static str,
    },
    #[error("{flag} {}: {message}", path.display())]
    Invalid {
        flag: &'static str,
        path: PathBuf,
        message: String,
    },
    #[error("--tls-cert-file {} and --tls-key-file {} do not make a usable pair: {source}", cert.display(), key.display())]
    Pair {
        cert: PathBuf,
        key: PathBuf,
        source: rustls::Error,
    },
}

const CERT_FLAG: &str = "--tls-cert-file";
const KEY_FLAG: &str = "--tls-key-file";
const CA_FLAG: &str = "--client-ca-file";

fn read(flag: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        flag,
        path: path.to_owned(),
        source,
    })
}

fn certificates(flag: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read(flag, path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Invalid {
            flag,
            path: path.to_owned(),
            message: format!("not PEM certificates: {e}"),
        })?;
    if certs.is_empty() {
        return Err(TlsError::Empty {
            flag,
            path: path.to_owned(),
            what: "certificate",
            expected: "-----BEGIN CERTIFICATE-----",
        });
    }
    Ok(certs)
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The extender port's TLS, ready to serve.
#[derive(Clone, Debug)]
pub struct TlsServing {
    pub config: Arc<ServerConfig>,
    /// Whether clients must present a certificate the client CA signed.
    pub client_certificates: bool,
}

impl TlsFiles {
    /// Reads and checks the files: the server's TLS configuration (TLS 1.2
    /// and 1.3, HTTP/1.1 only).
    pub fn load(&self) -> Result<TlsServing, TlsError> {
        let chain = certificates(CERT_FLAG, &self.cert)?;
        let key_pem = read(KEY_FLAG, &self.key)?;
        let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| match e {
            rustls::pki_types::pem::Error::NoItemsFound => TlsError::Empty {
                flag: KEY_FLAG,
                path: self.key.clone(),
                what: "private key",
                expected: "-----BEGIN PRIVATE KEY----- (or RSA/EC PRIVATE KEY)",
            },
            other => TlsError::Invalid {
                flag: KEY_FLAG,
                path: self.key.clone(),
                message: format!("not a PEM private key: {other}"),
            },
        })?;
        let builder = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|source| TlsError::Pair {
                cert: self.cert.clone(),
                key: self.key.clone(),
                source,
            })?;
        let builder = match &self.client_ca {
            None => builder.with_no_client_auth(),
            Some(ca) => {
                let mut roots = RootCertStore::empty();
                for cert in certificates(CA_FLAG, ca)? {
                    roots.add(cert).map_err(|e| TlsError::Invalid {
                        flag: CA_FLAG,
                        path: ca.clone(),
                        message: format!("not a usable CA certificate: {e}"),
                    })?;
                }
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
                        .build()
                        .map_err(|e| TlsError::Invalid {
                            flag: CA_FLAG,
                            path: ca.clone(),
                            message: format!("cannot verify clients with it: {e}"),
                        })?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let mut config = builder
            .with_single_cert(chain, key)
            .map_err(|source| TlsError::Pair {
                cert: self.cert.clone(),
                key: self.key.clone(),
                source,
            })?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(TlsServing {
            config: Arc::new(config),
            client_certificates: self.client_ca.is_some(),
        })
    }
}

/// TCP connections that completed a TLS handshake, for `axum::serve`.
pub struct TlsListener {
    streams: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
    accepting: tokio::task::JoinHandle<()>,
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

impl TlsListener {
    /// Starts accepting on `tcp`; handshakes that fail or time out are
    /// counted in `metrics` and logged, and the connection is closed.
    pub fn new(
        tcp: TcpListener,
        config: Arc<ServerConfig>,
        metrics: Arc<ExtenderMetrics>,
    ) -> std::io::Result<TlsListener> {
        let local = tcp.local_addr()?;
        let (tx, streams) = mpsc::channel(16);
        let acceptor = TlsAcceptor::from(config);
        let slots = Arc::new(Semaphore::new(MAX_HANDSHAKES));
        let accepting = tokio::spawn(async move {
            loop {
                let Ok(slot) = slots.clone().acquire_owned().await else {
                    return;
                };
                let (tcp, peer) = match tcp.accept().await {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        // EMFILE and the like: give the system a moment.
                        warn!(error = %e, "accepting a connection on the extender port");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let (acceptor, tx, metrics) = (acceptor.clone(), tx.clone(), metrics.clone());
                tokio::spawn(async move {
                    let result =
                        tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await;
                    drop(slot);
                    let label = |result| HandshakeLabel { result };
                    match result {
                        Ok(Ok(stream)) => {
                            metrics.handshakes.get_or_create(&label("ok")).inc();
                            debug!(%peer, "TLS handshake done");
                            let _ = tx.send((stream, peer)).await;
                        }
                        Ok(Err(e)) => {
                            metrics.handshakes.get_or_create(&label("refused")).inc();
                            warn!(%peer, error = %e, "TLS handshake refused on the extender port");
                        }
                        Err(_) => {
                            metrics.handshakes.get_or_create(&label("timeout")).inc();
                            warn!(%peer, timeout = ?HANDSHAKE_TIMEOUT, "TLS handshake timed out on the extender port");
                        }
                    }
                });
            }
        });
        Ok(TlsListener {
            streams,
            local,
            accepting,
        })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.streams.recv().await {
            Some(accepted) => accepted,
            // The accepting task ended (the runtime is shutting down).
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}

/// The transport flags that do not fit together.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum TransportError {
    #[error(
        "the extender API needs TLS: --tls-cert-file and --tls-key-file, with --client-ca-file to require kube-scheduler's client certificate (or --insecure-plain-http, for local testing only)"
    )]
    NoTls,
    #[error("--{given} needs --{missing}")]
    Half {
        given: &'static str,
        missing: &'static str,
    },
    #[error("--insecure-plain-http and --{0} exclude each other")]
    Both(&'static str),
}

/// The extender port's transport from its flags: `Ok(None)` is plain HTTP,
/// which only `--insecure-plain-http` asks for; without it, TLS files are
/// required.
pub fn transport(
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
    client_ca: Option<PathBuf>,
    insecure_plain_http: bool,
) -> Result<Option<TlsFiles>, TransportError> {
    let half = |given, missing| TransportError::Half { given, missing };
    match (cert, key, insecure_plain_http) {
        (None, None, true) => match client_ca {
            None => Ok(None),
            Some(_) => Err(TransportError::Both("client-ca-file")),
        },
        (Some(_), _, true) => Err(TransportError::Both("tls-cert-file")),
        (None, Some(_), true) => Err(TransportError::Both("tls-key-file")),
        (Some(cert), Some(key), false) => Ok(Some(TlsFiles {
            cert,
            key,
            client_ca,
        })),
        (Some(_), None, false) => Err(half("tls-cert-file", "tls-key-file")),
        (None, Some(_), false) => Err(half("tls-key-file", "tls-cert-file")),
        (None, None, false) => match client_ca {
            None => Err(TransportError::NoTls),
            Some(_) => Err(half("client-ca-file", "tls-cert-file")),
        },
    }
}

#[cfg(test)]
mod tests;
