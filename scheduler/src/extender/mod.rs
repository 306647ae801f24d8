//! `gputopo-scheduler extender`: the kube-scheduler extender mode. The stock
//! kube-scheduler keeps the queue, its own filters and scores, preemption and
//! the events, and calls gputopo over HTTP (`k8s.io/kube-scheduler/extender/v1`)
//! to filter the nodes by GPU topology, to score them, and to bind: the bind
//! chooses the exact GPUs on the node kube-scheduler picked and writes them
//! on the pod, as the secondary scheduler does. See
//! docs/extender.md.
//!
//! - [`protocol`]: the JSON types and the pure translation to and from
//!   scheduler-core (unit-tested with literal JSON);
//! - [`backend`]: what the routes read and write through, and its errors;
//! - [`http`]: the routes, status codes, limits and metrics over a
//!   [`Backend`];
//! - [`tls`]: the serving certificate, client-certificate authentication
//!   and the listener that runs the handshakes;
//! - [`server`]: the backend with its watches and API writes, and [`run`];
//! - [`dra`]: what a pod's DRA claims are judged by, and the review of
//!   kube-scheduler's allocation after a bind;
//! - [`metrics`]: what `/metrics` says in this mode.

pub mod backend;
pub mod dra;
pub mod http;
pub mod metrics;
pub mod protocol;
pub mod server;
pub mod tls;

pub use backend::{Backend, BindError};
pub use http::Limits;
pub use server::{Addresses, Extender, ExtenderError, ServeOptions, run};
pub use tls::{TlsError, TlsFiles, TlsServing, TransportError, transport};
