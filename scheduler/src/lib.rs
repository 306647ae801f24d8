//! `gputopo-scheduler`: a secondary Kubernetes scheduler for pods with
//! `schedulerName: gputopo-scheduler`. It watches pods, nodes, `GpuTopology`
//! objects and PodGroups; queues pending pods by priority and age; decides
//! with `gputopo-scheduler-core`; writes the chosen GPUs on the pod, binds
//! it, and says why in an event. See docs/scheduler.md.

pub mod annotations;
pub mod assignment_record;
pub mod binding;
pub mod change_feed;
pub mod checked;
pub mod claims;
pub mod cluster;
pub mod config;
pub mod cycle;
pub mod event_queue;
pub mod extender;
pub mod gangs;
pub mod kube_writes;
pub mod leader;
pub mod live_cluster;
pub mod metrics;
pub mod scheduler;
pub mod storage_objects;
pub mod trim;
pub mod volume_writes;
pub mod watch;
pub mod workload_objects;
pub mod writer;

pub use config::{Backoff, ConfigFileError, Settings};
pub use scheduler::{BOTTLENECK_ANNOTATION, FIELD_MANAGER, RunError, Scheduler};
