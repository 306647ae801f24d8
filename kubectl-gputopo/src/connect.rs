//! The API server's client, found as kubectl finds it: `KUBECONFIG`,
//! `~/.kube/config` or the in-cluster service account (the daemons' own
//! bootstrap), or the file and context kubectl's `--kubeconfig` and
//! `--context` name, which kubectl passes on to a plugin untouched.

use gputopo_ops::daemon::{self, BootstrapError};
use kube::config::{KubeConfigOptions, Kubeconfig, KubeconfigError};
use std::path::Path;

/// Why no client could be made.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("reading the kubeconfig {path}: {source}")]
    Kubeconfig {
        path: String,
        #[source]
        source: KubeconfigError,
    },
    #[error("the kubeconfig's context {context}: {source}")]
    Context {
        context: String,
        #[source]
        source: KubeconfigError,
    },
    #[error(transparent)]
    Bootstrap(#[from] BootstrapError),
}

/// A client for `kubeconfig` and `context` where given, else as kubectl
/// infers it.
pub async fn client(
    kubeconfig: Option<&Path>,
    context: Option<&str>,
) -> Result<kube::Client, ConnectError> {
    let options = KubeConfigOptions {
        context: context.map(str::to_string),
        ..KubeConfigOptions::default()
    };
    let config = match (kubeconfig, context) {
        (None, None) => daemon::kube_config().await?,
        (Some(path), _) => {
            let file = Kubeconfig::read_from(path).map_err(|source| ConnectError::Kubeconfig {
                path: path.display().to_string(),
                source,
            })?;
            kube::Config::from_custom_kubeconfig(file, &options)
                .await
                .map_err(|source| context_error(context, source))?
        }
        (None, Some(_)) => kube::Config::from_kubeconfig(&options)
            .await
            .map_err(|source| context_error(context, source))?,
    };
    Ok(daemon::client_of(config)?)
}

fn context_error(context: Option<&str>, source: KubeconfigError) -> ConnectError {
    ConnectError::Context {
        context: context.unwrap_or("(current)").to_string(),
        source,
    }
}
