//! A [`ClusterWrites`] that records every write and fails the ones a test
//! names: the stand-in for the API server in the cycle's unit tests. (The
//! end-to-end tests in `scheduler/tests/` run the same cycle against a real
//! kube-apiserver.)

use crate::binding::{PodIdentity, pod_binding};
use crate::cluster::pod_key;
use crate::cycle::gang_status::GangStatusWrite;
use crate::cycle::node_trust::NodeConditionWrite;
use crate::cycle::{ClusterWrites, EventSpec, WriteError, WriteErrorKind, WriteOp};
use gputopo_scheduler_core::schedule::Placement;
use k8s_openapi::api::core::v1::Pod;
use std::collections::BTreeMap;
use std::sync::Mutex;

/// One write as the fake saw it (failed ones included).
#[derive(Clone, Debug, PartialEq)]
pub enum Write {
    Bind {
        pod: String,
        node: String,
        annotations: BTreeMap<String, String>,
        /// The volume writes the real binding makes first.
        volumes: gputopo_scheduler_core::volumes::VolumePlan,
        ok: bool,
    },
    Evict {
        pod: String,
        dry_run: bool,
        ok: bool,
    },
    Nominate {
        pod: String,
        node: String,
    },
    Unschedulable {
        pod: String,
        message: String,
    },
    Event {
        pod: String,
        event: EventSpec,
    },
    GangStatus(GangStatusWrite),
    NodeCondition(NodeConditionWrite),
    ReserveClaim {
        claim: String,
        pod: String,
        /// Whether it allocated (rather than only reserved).
        allocated: bool,
        ok: bool,
    },
    ReleaseClaim {
        claim: String,
        pod: String,
        deallocate: bool,
    },
    CreateClaim {
        /// `namespace/generateName`.
        claim: String,
        ok: bool,
    },
    DeleteClaim {
        claim: String,
    },
    ExtendedClaimStatus {
        pod: String,
        claim: String,
        requests: Vec<String>,
    },
}

/// A failure to inject: writes of `op` to `target` (`*`: any) fail with
/// `kind`, `times` times (`None`: until cleared).
#[derive(Clone, Debug)]
struct Failure {
    op: WriteOp,
    target: String,
    kind: WriteErrorKind,
    times: Option<u32>,
}

#[derive(Default)]
pub struct FakeWrites {
    log: Mutex<Vec<Write>>,
    failures: Mutex<Vec<Failure>>,
    /// Every write fails as if the API server were unreachable.
    down: Mutex<bool>,
    /// How many times a binding is pending before it is answered (0: at
    /// once), so that several are outstanding as over a network.
    bind_delay: Mutex<u32>,
    /// Bindings outstanding now, and the most at once.
    binds_outstanding: Mutex<(u32, u32)>,
}

/// Pending `n` times (waking itself each time), then ready.
struct PendingTimes(u32);

impl std::future::Future for PendingTimes {
    type Output = ();

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        if self.0 == 0 {
            return std::task::Poll::Ready(());
        }
        self.0 -= 1;
        cx.waker().wake_by_ref();
        std::task::Poll::Pending
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl FakeWrites {
    /// Writes of `op` to `target` (`namespace/name`, or `*`) fail with `kind`.
    pub fn fail(&self, op: WriteOp, target: &str, kind: WriteErrorKind) {
        lock(&self.failures).push(Failure {
            op,
            target: target.into(),
            kind,
            times: None,
        });
    }

    /// The next write of `op` to `target` fails with `kind`, later ones pass.
    pub fn fail_once(&self, op: WriteOp, target: &str, kind: WriteErrorKind) {
        lock(&self.failures).push(Failure {
            op,
            target: target.into(),
            kind,
            times: Some(1),
        });
    }

    /// Every binding is pending `polls` times before it is answered.
    pub fn delay_binds(&self, polls: u32) {
        *lock(&self.bind_delay) = polls;
    }

    /// The most bindings that were outstanding at once.
    pub fn most_binds_outstanding(&self) -> u32 {
        lock(&self.binds_outstanding).1
    }

    pub fn clear_failures(&self) {
        lock(&self.failures).clear();
        *lock(&self.down) = false;
    }

    /// The API server goes away: every write fails.
    pub fn api_down(&self) {
        *lock(&self.down) = true;
    }

    /// Everything written since the last call.
    pub fn take(&self) -> Vec<Write> {
        std::mem::take(&mut *lock(&self.log))
    }

    fn check(&self, op: WriteOp, target: &str) -> Result<(), WriteError> {
        let err = |kind| WriteError {
            op,
            kind,
            target: target.to_string(),
            message: format!("injected {kind:?}"),
        };
        if *lock(&self.down) {
            return Err(err(WriteErrorKind::Unavailable));
        }
        let mut failures = lock(&self.failures);
        let hit = failures
            .iter_mut()
            .find(|f| f.op == op && (f.target == "*" || f.target == target));
        let Some(f) = hit else {
            return Ok(());
        };
        let kind = f.kind;
        if let Some(t) = &mut f.times {
            *t -= 1;
        }
        failures.retain(|f| f.times != Some(0));
        Err(err(kind))
    }

    fn push(&self, w: Write) {
        lock(&self.log).push(w);
    }
}

impl ClusterWrites for FakeWrites {
    async fn bind(&self, pod: &Pod, placement: &Placement) -> Result<(), WriteError> {
        {
            let mut o = lock(&self.binds_outstanding);
            o.0 += 1;
            o.1 = o.1.max(o.0);
        }
        let delay = *lock(&self.bind_delay);
        PendingTimes(delay).await;
        lock(&self.binds_outstanding).0 -= 1;
        let key = pod_key(pod);
        let r = self.check(WriteOp::Bind, &key);
        self.push(Write::Bind {
            pod: key,
            node: placement.node.clone(),
            // What the real binding carries (`binding.rs`): none for a pod
            // that holds no GPU.
            annotations: pod_binding(&PodIdentity::of(pod), placement)
                .metadata
                .annotations
                .unwrap_or_default(),
            volumes: placement.volumes.clone(),
            ok: r.is_ok(),
        });
        r
    }

    async fn evict(&self, victim: &str, dry_run: bool) -> Result<(), WriteError> {
        let r = self.check(WriteOp::Evict { dry_run }, victim);
        self.push(Write::Evict {
            pod: victim.into(),
            dry_run,
            ok: r.is_ok(),
        });
        r
    }

    async fn nominate(&self, pod: &Pod, node: &str) -> Result<(), WriteError> {
        let key = pod_key(pod);
        self.check(WriteOp::Nominate, &key)?;
        self.push(Write::Nominate {
            pod: key,
            node: node.into(),
        });
        Ok(())
    }

    async fn set_unschedulable(&self, pod: &Pod, message: &str) -> Result<(), WriteError> {
        let key = pod_key(pod);
        self.check(WriteOp::Condition, &key)?;
        self.push(Write::Unschedulable {
            pod: key,
            message: message.into(),
        });
        Ok(())
    }

    async fn set_gang_status(&self, write: &GangStatusWrite) -> Result<(), WriteError> {
        self.check(WriteOp::GangStatus, &write.target())?;
        self.push(Write::GangStatus(write.clone()));
        Ok(())
    }

    async fn set_node_condition(&self, write: &NodeConditionWrite) -> Result<(), WriteError> {
        self.check(WriteOp::NodeCondition, &write.node)?;
        self.push(Write::NodeCondition(write.clone()));
        Ok(())
    }

    async fn reserve_claim(&self, write: &crate::claims::ClaimWrite) -> Result<(), WriteError> {
        let r = self.check(WriteOp::ClaimReserve, &write.target());
        self.push(Write::ReserveClaim {
            claim: write.target(),
            pod: write.pod_name.clone(),
            allocated: write.allocation.is_some(),
            ok: r.is_ok(),
        });
        r
    }

    async fn release_claim(
        &self,
        write: &crate::claims::ClaimWrite,
        deallocate: bool,
    ) -> Result<(), WriteError> {
        self.check(WriteOp::ClaimRelease, &write.target())?;
        self.push(Write::ReleaseClaim {
            claim: write.target(),
            pod: write.pod_name.clone(),
            deallocate,
        });
        Ok(())
    }

    async fn create_claim(
        &self,
        claim: &k8s_openapi::api::resource::v1::ResourceClaim,
    ) -> Result<k8s_openapi::api::resource::v1::ResourceClaim, WriteError> {
        let namespace = claim.metadata.namespace.clone().unwrap_or_default();
        let generate = claim.metadata.generate_name.clone().unwrap_or_default();
        let target = format!("{namespace}/{generate}");
        let r = self.check(WriteOp::ClaimCreate, &target);
        self.push(Write::CreateClaim {
            claim: target,
            ok: r.is_ok(),
        });
        r?;
        let mut created = claim.clone();
        created.metadata.name = Some(format!("{generate}x1"));
        created.metadata.uid = Some(format!("uid-{generate}x1"));
        Ok(created)
    }

    async fn delete_claim(&self, write: &crate::claims::ClaimWrite) -> Result<(), WriteError> {
        self.check(WriteOp::ClaimDelete, &write.target())?;
        self.push(Write::DeleteClaim {
            claim: write.target(),
        });
        Ok(())
    }

    async fn set_extended_claim_status(
        &self,
        pod: &Pod,
        status: &k8s_openapi::api::core::v1::PodExtendedResourceClaimStatus,
    ) -> Result<(), WriteError> {
        let key = pod_key(pod);
        self.check(WriteOp::ExtendedClaimStatus, &key)?;
        self.push(Write::ExtendedClaimStatus {
            pod: key,
            claim: status.resource_claim_name.clone(),
            requests: status
                .request_mappings
                .iter()
                .map(|m| {
                    format!(
                        "{}:{}:{}",
                        m.container_name, m.resource_name, m.request_name
                    )
                })
                .collect(),
        });
        Ok(())
    }

    fn emit_event(&self, pod: &Pod, event: EventSpec) {
        self.push(Write::Event {
            pod: pod_key(pod),
            event,
        });
    }
}
