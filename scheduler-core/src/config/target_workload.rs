//! The target workload: the pods the cluster is expected to run, as weighted
//! pod types, which the score's fragmentation part measures a node against
//! (`crate::fragmentation`, FGD: Weng et al., USENIX ATC'23).
//!
//! The operator describes the types with weights ([`TargetWorkload::new`]),
//! or lets them be drawn from a list of pods the way FGD draws its *typical
//! pods* ([`TargetWorkload::typical`]: identical requests counted together,
//! the most frequent kept until they cover 95 % of the pods, weights
//! renormalised). Validated here, as the rest of the configuration; the
//! types are grouped by GPU ask once, so the measure costs one binary search
//! per group.

use super::ConfigError;
use std::collections::BTreeMap;

/// The node label naming a node's GPU model (GPU Feature Discovery's).
pub const DEFAULT_MODEL_LABEL: &str = "nvidia.com/gpu.product";

/// The popularity cut of FGD's typical pods (`podPopularityThreshold`).
pub const DEFAULT_POPULARITY_PCT: f64 = 95.0;

/// One kind of pod in the target workload.
#[derive(Clone, Debug, PartialEq)]
pub struct PodType {
    pub cpu_milli: u64,
    /// GPUs: 0 for a pod without GPUs, 1 for a share.
    pub gpus: u32,
    /// Milli-GPU per GPU: 1000 for whole GPUs, 1–999 for a share of one
    /// GPU; read as 0 when `gpus` is 0.
    pub milli: u32,
    /// GPU models the type may use (values of the model label); empty: any.
    pub models: Vec<String>,
    /// How often the type occurs, relative to the others (> 0).
    pub weight: f64,
}

impl PodType {
    /// A type of weight 1.
    pub fn new(cpu_milli: u64, gpus: u32, milli: u32) -> PodType {
        PodType {
            cpu_milli,
            gpus,
            milli: if gpus == 0 { 0 } else { milli },
            models: Vec::new(),
            weight: 1.0,
        }
    }

    fn check(&self, i: usize) -> Result<(), ConfigError> {
        let bad = |detail: String| Err(ConfigError::TargetWorkload { detail });
        if !(self.weight.is_finite() && self.weight > 0.0) {
            return bad(format!(
                "type {i}: weight {}; accepted: a finite number > 0",
                self.weight
            ));
        }
        if self.gpus > 32 {
            return bad(format!("type {i}: {} GPUs; accepted: 0..=32", self.gpus));
        }
        if self.gpus > 0 && !(1..=1000).contains(&self.milli) {
            return bad(format!(
                "type {i}: {} milli-GPU per GPU; accepted: 1..=1000",
                self.milli
            ));
        }
        if self.gpus > 1 && self.milli != 1000 {
            return bad(format!(
                "type {i}: {} GPUs of {} milli; accepted: a share (< 1000) of one GPU only",
                self.gpus, self.milli
            ));
        }
        Ok(())
    }
}

/// The pods a cluster is expected to run, as weighted types (weights sum to 1).
#[derive(Clone, Debug, PartialEq)]
pub struct TargetWorkload {
    types: Vec<PodType>,
    model_label: String,
    /// Types grouped by their GPU ask (see the module docs).
    pub(crate) groups: Vec<Group>,
    /// Total weight of the types without GPUs.
    pub(crate) cpu_only: f64,
}

/// Types asking the same GPUs (count, milli, models), differing in CPU only.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Group {
    pub(crate) gpus: u32,
    pub(crate) milli: u32,
    /// Allowed models, sorted; empty: any.
    pub(crate) models: Vec<String>,
    /// CPU asks, ascending, and the weight of the types asking at most each.
    pub(crate) cpu: Vec<u64>,
    pub(crate) cum_weight: Vec<f64>,
    pub(crate) total: f64,
}

impl TargetWorkload {
    /// A workload of these types; weights are renormalised to sum to 1.
    /// Types that ask the same are merged.
    pub fn new(types: impl IntoIterator<Item = PodType>) -> Result<TargetWorkload, ConfigError> {
        let merged = merge_asks(types)?;
        let total: f64 = merged.values().sum();
        if merged.is_empty() || total <= 0.0 {
            return Err(ConfigError::TargetWorkload {
                detail: "no pod type given; name at least one".into(),
            });
        }
        let types: Vec<PodType> = merged
            .into_iter()
            .map(|((cpu_milli, gpus, milli, models), w)| PodType {
                cpu_milli,
                gpus,
                milli,
                models,
                weight: w / total,
            })
            .collect();
        // (GPUs, milli, models) -> (CPU, weight) of each type asking that.
        type Asks = BTreeMap<(u32, u32, Vec<String>), Vec<(u64, f64)>>;
        let mut by_ask: Asks = BTreeMap::new();
        let mut cpu_only = 0.0;
        for t in &types {
            if t.gpus == 0 {
                cpu_only += t.weight;
            } else {
                by_ask
                    .entry((t.gpus, t.milli, t.models.clone()))
                    .or_default()
                    .push((t.cpu_milli, t.weight));
            }
        }
        let groups = by_ask
            .into_iter()
            .map(|((gpus, milli, models), mut list)| {
                list.sort_by_key(|a| a.0);
                let mut cum = 0.0;
                let mut cpu = Vec::with_capacity(list.len());
                let mut cum_weight = Vec::with_capacity(list.len());
                for (c, w) in list {
                    cum += w;
                    cpu.push(c);
                    cum_weight.push(cum);
                }
                Group {
                    gpus,
                    milli,
                    models,
                    cpu,
                    cum_weight,
                    total: cum,
                }
            })
            .collect();
        Ok(TargetWorkload {
            types,
            model_label: DEFAULT_MODEL_LABEL.to_string(),
            groups,
            cpu_only,
        })
    }

    /// FGD's typical pods of `pods` (each pod's `weight` counts; 1 for a
    /// plain count): identical asks counted together, the most frequent kept
    /// until they cover `popularity_pct` % of the total (ties: larger CPU,
    /// then milli, GPUs first, as FGD orders them), weights renormalised.
    pub fn typical(
        pods: impl IntoIterator<Item = PodType>,
        popularity_pct: f64,
    ) -> Result<TargetWorkload, ConfigError> {
        if !(popularity_pct > 0.0 && popularity_pct <= 100.0) {
            return Err(ConfigError::TargetWorkload {
                detail: format!("popularity {popularity_pct} %; accepted: (0, 100]"),
            });
        }
        let counts = merge_asks(pods)?;
        let total: f64 = counts.values().sum();
        let mut list: Vec<_> = counts.into_iter().collect();
        list.sort_by(|a, b| {
            let key = |k: &Ask| (k.0, k.2, k.1, k.3.clone());
            b.1.total_cmp(&a.1).then_with(|| key(&b.0).cmp(&key(&a.0)))
        });
        let mut covered = 0.0;
        let mut kept = Vec::new();
        for ((cpu_milli, gpus, milli, models), weight) in list {
            if covered * 100.0 >= popularity_pct * total {
                break;
            }
            covered += weight;
            kept.push(PodType {
                cpu_milli,
                gpus,
                milli,
                models,
                weight,
            });
        }
        TargetWorkload::new(kept)
    }

    /// The same workload, reading the GPU model from `key` instead of
    /// [`DEFAULT_MODEL_LABEL`].
    pub fn with_model_label(mut self, key: impl Into<String>) -> TargetWorkload {
        self.model_label = key.into();
        self
    }

    /// The types, merged, with weights summing to 1, in (CPU, GPUs, milli,
    /// models) order.
    pub fn types(&self) -> &[PodType] {
        &self.types
    }

    /// The label key a node's GPU model is read from.
    pub fn model_label(&self) -> &str {
        &self.model_label
    }
}

/// What a pod type asks, as types are merged: `(cpu_milli, gpus, milli, models)`,
/// models sorted, a CPU-only type asking no share and no model.
type Ask = (u64, u32, u32, Vec<String>);

/// `types` checked (errors name the type's position) and merged by what they
/// ask, each ask with its summed weight.
fn merge_asks(types: impl IntoIterator<Item = PodType>) -> Result<BTreeMap<Ask, f64>, ConfigError> {
    let mut merged: BTreeMap<Ask, f64> = BTreeMap::new();
    for (i, mut t) in types.into_iter().enumerate() {
        t.check(i)?;
        if t.gpus == 0 {
            t.milli = 0;
            t.models.clear();
        }
        t.models.sort();
        t.models.dedup();
        *merged
            .entry((t.cpu_milli, t.gpus, t.milli, t.models))
            .or_default() += t.weight;
    }
    Ok(merged)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typical_keeps_the_popular_types_and_renormalises() {
        let mut pods = vec![PodType::new(1000, 1, 1000); 90];
        pods.extend(vec![PodType::new(2000, 8, 1000); 6]);
        pods.extend(vec![PodType::new(3000, 0, 0); 4]);
        let w = TargetWorkload::typical(pods.clone(), 95.0).unwrap();
        // 90 % then 96 %: the 8-GPU type is kept, the CPU-only one is not.
        assert_eq!(w.types().len(), 2);
        let sum: f64 = w.types().iter().map(|t| t.weight).sum();
        assert!((sum - 1.0).abs() < 1e-12);
        let w = TargetWorkload::typical(pods, 90.0).unwrap();
        assert_eq!(w.types().len(), 1);
    }

    #[test]
    fn bad_types_are_rejected_with_what_is_accepted() {
        let mut t = PodType::new(1000, 2, 500);
        let e = TargetWorkload::new([t.clone()]).unwrap_err();
        assert!(e.to_string().contains("share"), "{e}");
        t.gpus = 1;
        t.weight = 0.0;
        let e = TargetWorkload::new([t]).unwrap_err();
        assert!(e.to_string().contains("> 0"), "{e}");
        assert!(TargetWorkload::new([]).is_err());
    }
}
