//! gRPC over unix sockets, the only transport the kubelet uses for these APIs.

use hyper_util::rt::TokioIo;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::net::{UnixListener, UnixStream};
use tokio_stream::wrappers::UnixListenerStream;
use tonic::transport::{Channel, Endpoint, Server};

/// Why a unix socket could not be dialed.
#[derive(Debug, thiserror::Error)]
pub enum DialError {
    #[error("no socket at {path} (is the kubelet running, and is the directory mounted?)")]
    Missing { path: PathBuf },
    #[error("cannot connect to {path}: {source}")]
    Connect {
        path: PathBuf,
        #[source]
        source: tonic::transport::Error,
    },
}

/// Why a gRPC server could not be started or stopped serving.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot listen on {path}: {source}")]
    Bind {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("serving on {path} failed: {source}")]
    Serve {
        path: PathBuf,
        #[source]
        source: tonic::transport::Error,
    },
}

/// A channel to the gRPC server on the unix socket `path`, connected now
/// (so a missing or refusing socket is an error here, not on the first call).
/// `timeout` bounds the connection and every call on the channel.
pub async fn connect_unix(path: &Path, timeout: Duration) -> Result<Channel, DialError> {
    if !path.exists() {
        return Err(DialError::Missing {
            path: path.to_path_buf(),
        });
    }
    let socket = path.to_path_buf();
    // The URI is required by tonic but unused: the connector dials the socket.
    Endpoint::from_static("http://[::]:0")
        .connect_timeout(timeout)
        .timeout(timeout)
        .connect_with_connector(tower::service_fn(move |_: tonic::transport::Uri| {
            let socket = socket.clone();
            async move { UnixStream::connect(socket).await.map(TokioIo::new) }
        }))
        .await
        .map_err(|source| DialError::Connect {
            path: path.to_path_buf(),
            source,
        })
}

/// Binds `path` (removing a stale socket file first, as the kubelet and
/// device plugins do) and serves `router` until `shutdown` completes.
pub async fn serve_unix(
    path: &Path,
    router: tonic::transport::server::Router,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> Result<(), ServeError> {
    let listener = bind(path)?;
    router
        .serve_with_incoming_shutdown(UnixListenerStream::new(listener), shutdown)
        .await
        .map_err(|source| ServeError::Serve {
            path: path.to_path_buf(),
            source,
        })
}

/// A listener on `path`, after removing whatever socket file was left there.
pub fn bind(path: &Path) -> Result<UnixListener, ServeError> {
    let err = |source| ServeError::Bind {
        path: path.to_path_buf(),
        source,
    };
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(err(e)),
    }
    UnixListener::bind(path).map_err(err)
}

/// A server builder with the settings every gputopo gRPC server uses.
pub fn server() -> Server {
    Server::builder()
}
