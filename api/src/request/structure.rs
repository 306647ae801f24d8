//! A gang's structure as its pods state it (docs/contract/gang-structure.md):
//! where all members must or should be (one domain of a network tier), how
//! they are cut into slices each in one domain, and each member's rank.
//!
//! Two vocabularies, one meaning. Kueue's Topology Aware Scheduling
//! annotations, so that a JobSet written for Kueue TAS needs only
//! `schedulerName`: `kueue.x-k8s.io/podset-required-topology`,
//! `podset-preferred-topology`, `podset-unconstrained-topology`,
//! `podset-slice-required-topology` with `podset-slice-size`, and the
//! multi-layer `podset-slice-required-topology-constraints`. gputopo's own,
//! for what Kueue does not say (a preferred slice): `gputopo.dev/gang-required-topology`,
//! `gang-preferred-topology`, `gang-slice-size` with
//! `gang-slice-required-topology` or `gang-slice-preferred-topology`.
//! A value names a node label key (a configured network tier, or
//! `kubernetes.io/hostname`); which tier it is, the scheduler decides.
//!
//! A member's rank orders it in its gang: the Job completion index, a
//! JobSet's job index then completion index, a LeaderWorkerSet's worker
//! index. Consecutive ranks are placed next to each other.

use super::RequestError;
use crate::keys::pod as key;
use std::collections::BTreeMap;

/// Kueue TAS's pod annotations (kueue `apis/kueue/v1alpha1`, TAS).
pub mod kueue {
    pub const REQUIRED: &str = "kueue.x-k8s.io/podset-required-topology";
    pub const PREFERRED: &str = "kueue.x-k8s.io/podset-preferred-topology";
    pub const UNCONSTRAINED: &str = "kueue.x-k8s.io/podset-unconstrained-topology";
    pub const SLICE_REQUIRED: &str = "kueue.x-k8s.io/podset-slice-required-topology";
    pub const SLICE_SIZE: &str = "kueue.x-k8s.io/podset-slice-size";
    pub const SLICE_CONSTRAINTS: &str = "kueue.x-k8s.io/podset-slice-required-topology-constraints";
}

/// The labels and annotations a member's rank is read from.
pub mod rank_keys {
    /// The Job controller's completion index (label and annotation).
    pub const COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";
    /// JobSet: the index of the pod's Job within its replicated job.
    pub const JOBSET_JOB_INDEX: &str = "jobset.sigs.k8s.io/job-index";
    /// LeaderWorkerSet: 0 for the leader, 1.. for the workers.
    pub const LWS_WORKER_INDEX: &str = "leaderworkerset.sigs.k8s.io/worker-index";
}

/// At most this many slice layers (Kueue's multi-layer limit).
pub const MAX_SLICE_LAYERS: usize = 3;

const ACCEPT_KEY: &str = "a node label key such as example.com/rack or kubernetes.io/hostname (optional DNS prefix, then 1-63 characters of [A-Za-z0-9._-], alphanumeric at both ends)";
const ACCEPT_SIZE: &str = "a whole number of pods, 1..=10000";
const ACCEPT_TRUE: &str = "true";
const ACCEPT_LAYERS: &str = "a JSON list of 1 to 3 objects {\"topology\": <node label key>, \"size\": <pods>}, outermost first, each size a multiple of the next";

/// A domain constraint: one domain of the tier a node label key names.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TierKey {
    /// The node label key (`example.com/rack`).
    pub key: String,
    /// The annotation that said so, for messages.
    pub from: &'static str,
}

/// One layer of slices: members in rank order cut into slices of `size`,
/// each slice inside one domain of the tier `key` names.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SliceLayer {
    pub key: String,
    pub size: u32,
    /// Required (the gang waits rather than break it) or preferred (it
    /// falls back outward tier by tier).
    pub required: bool,
    pub from: &'static str,
}

/// What a pod says of its gang's structure. Empty: no constraint.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct GangStructure {
    /// Every member inside one domain of this tier, or the gang waits.
    pub required: Option<TierKey>,
    /// Every member inside one domain of this tier if any has room, else
    /// the next tier outward, and so on.
    pub preferred: Option<TierKey>,
    /// Slice layers, outermost (largest) first.
    pub slices: Vec<SliceLayer>,
}

impl GangStructure {
    pub fn is_empty(&self) -> bool {
        self.required.is_none() && self.preferred.is_none() && self.slices.is_empty()
    }
}

/// A member's place in its gang: compared element by element (a JobSet's
/// job index, then the completion index). Members without one come after
/// those with one, in name order.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Rank(pub Vec<u32>);

/// Reads the structure from a pod's annotations.
pub(crate) fn parse(annotations: &BTreeMap<String, String>) -> Result<GangStructure, RequestError> {
    let get = |k: &'static str| annotations.get(k).map(|v| (k, v.as_str()));
    let ours = read_side(
        get(key::GANG_REQUIRED_TOPOLOGY),
        get(key::GANG_PREFERRED_TOPOLOGY),
        None,
        slice_layer(
            get(key::GANG_SLICE_REQUIRED_TOPOLOGY),
            get(key::GANG_SLICE_PREFERRED_TOPOLOGY),
            get(key::GANG_SLICE_SIZE),
        )?,
    )?;
    let kueue_slices = match (
        get(kueue::SLICE_CONSTRAINTS),
        get(kueue::SLICE_REQUIRED).or(get(kueue::SLICE_SIZE)),
    ) {
        (Some((k, _)), Some((other, _))) => {
            return Err(inconsistent(
                k,
                format!(
                    "{other} is set too; state slices one way: {k} for several layers, {} with {} for one",
                    kueue::SLICE_REQUIRED,
                    kueue::SLICE_SIZE
                ),
            ));
        }
        (Some((k, v)), None) => layers(k, v)?,
        (None, _) => slice_layer(get(kueue::SLICE_REQUIRED), None, get(kueue::SLICE_SIZE))?,
    };
    let theirs = read_side(
        get(kueue::REQUIRED),
        get(kueue::PREFERRED),
        get(kueue::UNCONSTRAINED),
        kueue_slices,
    )?;
    merge(ours, theirs)
}

/// One vocabulary's gang-level keys and slices, checked together.
fn read_side(
    required: Option<(&'static str, &str)>,
    preferred: Option<(&'static str, &str)>,
    unconstrained: Option<(&'static str, &str)>,
    slices: Vec<SliceLayer>,
) -> Result<GangStructure, RequestError> {
    let tier = |entry: Option<(&'static str, &str)>| -> Result<Option<TierKey>, RequestError> {
        entry
            .map(|(k, v)| {
                check_key(k, v)?;
                Ok(TierKey {
                    key: v.to_string(),
                    from: k,
                })
            })
            .transpose()
    };
    let (required, preferred) = (tier(required)?, tier(preferred)?);
    if let (Some(r), Some(p)) = (&required, &preferred) {
        return Err(inconsistent(
            p.from,
            format!(
                "{} is set too; a gang's domain is either required or preferred, set one",
                r.from
            ),
        ));
    }
    if let Some((k, v)) = unconstrained {
        if v != "true" {
            return Err(RequestError::BadValue {
                key: k.to_string(),
                value: v.to_string(),
                accepted: ACCEPT_TRUE,
            });
        }
        if let Some(set) = required.as_ref().or(preferred.as_ref()) {
            return Err(inconsistent(
                k,
                format!(
                    "{} is set too; an unconstrained gang has no domain, set one of them",
                    set.from
                ),
            ));
        }
    }
    Ok(GangStructure {
        required,
        preferred,
        slices,
    })
}

/// A single slice layer from its topology key (required or preferred) and size.
fn slice_layer(
    required: Option<(&'static str, &str)>,
    preferred: Option<(&'static str, &str)>,
    size: Option<(&'static str, &str)>,
) -> Result<Vec<SliceLayer>, RequestError> {
    let topology = match (required, preferred) {
        (Some((r, _)), Some((p, _))) => {
            return Err(inconsistent(
                p,
                format!(
                    "{r} is set too; a slice's domain is either required or preferred, set one"
                ),
            ));
        }
        (Some(t), None) => Some((t, true)),
        (None, Some(t)) => Some((t, false)),
        (None, None) => None,
    };
    match (topology, size) {
        (None, None) => Ok(Vec::new()),
        (None, Some((k, _))) => Err(inconsistent(
            k,
            "the slices' topology is not set; a slice size needs the tier its slices stay in"
                .to_string(),
        )),
        (Some(((k, _), _)), None) => Err(inconsistent(
            k,
            "the slice size is not set; slices need their number of pods".to_string(),
        )),
        (Some(((k, v), required)), Some((sk, sv))) => {
            check_key(k, v)?;
            Ok(vec![SliceLayer {
                key: v.to_string(),
                size: parse_size(sk, sv)?,
                required,
                from: k,
            }])
        }
    }
}

/// Kueue's multi-layer slices: `[{"topology": ..., "size": ...}, ...]`.
fn layers(k: &'static str, v: &str) -> Result<Vec<SliceLayer>, RequestError> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Layer {
        topology: String,
        size: i64,
    }
    let bad = || RequestError::BadValue {
        key: k.to_string(),
        value: v.to_string(),
        accepted: ACCEPT_LAYERS,
    };
    let parsed: Vec<Layer> = serde_json::from_str(v).map_err(|_| bad())?;
    if parsed.is_empty() || parsed.len() > MAX_SLICE_LAYERS {
        return Err(bad());
    }
    let mut out: Vec<SliceLayer> = Vec::new();
    for layer in parsed {
        check_key(k, &layer.topology)?;
        let size = u32::try_from(layer.size)
            .ok()
            .filter(|s| (1..=10_000).contains(s))
            .ok_or_else(bad)?;
        if let Some(outer) = out.last()
            && (size > outer.size || outer.size % size != 0)
        {
            return Err(inconsistent(
                k,
                format!(
                    "a slice of {} pods cannot be cut into slices of {size}; each layer's size must divide the one outside it",
                    outer.size
                ),
            ));
        }
        out.push(SliceLayer {
            key: layer.topology,
            size,
            required: true,
            from: k,
        });
    }
    Ok(out)
}

/// gputopo's and Kueue's keys together: each part stated once, or the same twice.
fn merge(ours: GangStructure, theirs: GangStructure) -> Result<GangStructure, RequestError> {
    fn one<T: PartialEq>(
        a: Option<T>,
        b: Option<T>,
        from: impl Fn(&T) -> &'static str,
    ) -> Result<Option<T>, RequestError> {
        match (a, b) {
            (Some(a), Some(b)) if a != b => Err(inconsistent(
                from(&a),
                format!("{} says otherwise; state the structure once", from(&b)),
            )),
            (a, b) => Ok(a.or(b)),
        }
    }
    let same_tier = |a: &TierKey, b: &TierKey| a.key == b.key;
    let pick = |a: Option<TierKey>, b: Option<TierKey>| match (&a, &b) {
        (Some(x), Some(y)) if same_tier(x, y) => Ok(a),
        _ => one(a, b, |t| t.from),
    };
    let slices = match (ours.slices.is_empty(), theirs.slices.is_empty()) {
        (_, true) => ours.slices,
        (true, false) => theirs.slices,
        (false, false) => {
            let same =
                ours.slices.len() == theirs.slices.len()
                    && ours.slices.iter().zip(&theirs.slices).all(|(a, b)| {
                        a.key == b.key && a.size == b.size && a.required == b.required
                    });
            if !same {
                return Err(inconsistent(
                    ours.slices[0].from,
                    format!(
                        "{} says otherwise; state the slices once",
                        theirs.slices[0].from
                    ),
                ));
            }
            ours.slices
        }
    };
    let structure = GangStructure {
        required: pick(ours.required, theirs.required)?,
        preferred: pick(ours.preferred, theirs.preferred)?,
        slices,
    };
    if let (Some(r), Some(p)) = (&structure.required, &structure.preferred) {
        return Err(inconsistent(
            p.from,
            format!(
                "{} is set too; a gang's domain is either required or preferred, set one",
                r.from
            ),
        ));
    }
    Ok(structure)
}

/// A member's rank from its controller's labels and annotations.
pub(crate) fn rank(
    labels: &BTreeMap<String, String>,
    annotations: &BTreeMap<String, String>,
) -> Result<Option<Rank>, RequestError> {
    let index = |k: &'static str| -> Result<Option<u32>, RequestError> {
        let value = labels.get(k).or_else(|| annotations.get(k));
        value
            .map(|v| {
                v.parse::<u32>().map_err(|_| RequestError::BadValue {
                    key: k.to_string(),
                    value: v.clone(),
                    accepted: "a non-negative whole number (the controller's index)",
                })
            })
            .transpose()
    };
    let job = index(rank_keys::JOBSET_JOB_INDEX)?;
    let completion = index(rank_keys::COMPLETION_INDEX)?;
    let worker = index(rank_keys::LWS_WORKER_INDEX)?;
    let parts: Vec<u32> = match (job, completion, worker) {
        (_, _, Some(w)) => vec![w],
        (Some(j), Some(c), None) => vec![j, c],
        (Some(j), None, None) => vec![j],
        (None, Some(c), None) => vec![c],
        (None, None, None) => return Ok(None),
    };
    Ok(Some(Rank(parts)))
}

fn parse_size(k: &'static str, v: &str) -> Result<u32, RequestError> {
    v.parse::<u32>()
        .ok()
        .filter(|s| (1..=10_000).contains(s))
        .ok_or_else(|| RequestError::BadValue {
            key: k.to_string(),
            value: v.to_string(),
            accepted: ACCEPT_SIZE,
        })
}

fn check_key(k: &'static str, v: &str) -> Result<(), RequestError> {
    if is_label_key(v) {
        Ok(())
    } else {
        Err(RequestError::BadValue {
            key: k.to_string(),
            value: v.to_string(),
            accepted: ACCEPT_KEY,
        })
    }
}

fn inconsistent(k: &str, detail: String) -> RequestError {
    RequestError::Inconsistent {
        key: k.to_string(),
        detail,
    }
}

/// A Kubernetes label key: an optional DNS subdomain prefix and `/`, then a
/// name of 1-63 characters of `[A-Za-z0-9._-]`, alphanumeric at both ends.
pub(crate) fn is_label_key(key: &str) -> bool {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    let name_ok = (1..=63).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name.as_bytes()[name.len() - 1].is_ascii_alphanumeric();
    let prefix_ok = prefix.is_none_or(|p| {
        (1..=253).contains(&p.len())
            && p.split('.').all(|part| {
                !part.is_empty()
                    && part.len() <= 63
                    && part
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                    && !part.starts_with('-')
                    && !part.ends_with('-')
            })
    });
    name_ok && prefix_ok
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn kueue_annotations_read_as_kueue_means_them() {
        let s = parse(&map(&[
            (kueue::PREFERRED, "example.com/block"),
            (kueue::SLICE_REQUIRED, "example.com/rack"),
            (kueue::SLICE_SIZE, "16"),
        ]))
        .unwrap();
        assert_eq!(s.required, None);
        assert_eq!(s.preferred.unwrap().key, "example.com/block");
        assert_eq!(
            s.slices,
            vec![SliceLayer {
                key: "example.com/rack".into(),
                size: 16,
                required: true,
                from: kueue::SLICE_REQUIRED
            }]
        );
        assert!(parse(&map(&[])).unwrap().is_empty());
        assert!(
            parse(&map(&[(kueue::UNCONSTRAINED, "true")]))
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn multi_layer_slices_divide_outward() {
        let s = parse(&map(&[(
            kueue::SLICE_CONSTRAINTS,
            r#"[{"topology":"example.com/rack","size":16},{"topology":"kubernetes.io/hostname","size":4}]"#,
        )]))
        .unwrap();
        assert_eq!(s.slices.len(), 2);
        assert_eq!(
            (s.slices[1].key.as_str(), s.slices[1].size),
            ("kubernetes.io/hostname", 4)
        );
        let e = parse(&map(&[(
            kueue::SLICE_CONSTRAINTS,
            r#"[{"topology":"example.com/rack","size":16},{"topology":"kubernetes.io/hostname","size":5}]"#,
        )]))
        .unwrap_err();
        assert!(e.to_string().contains("must divide"), "{e}");
        for bad in [
            "[]",
            "{}",
            r#"[{"topology":"a b","size":1}]"#,
            r#"[{"topology":"r","size":0}]"#,
        ] {
            assert!(
                parse(&map(&[(kueue::SLICE_CONSTRAINTS, bad)])).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn contradictions_are_refused_naming_both_keys() {
        let cases: &[&[(&str, &str)]] = &[
            &[(kueue::REQUIRED, "r"), (kueue::PREFERRED, "s")],
            &[(kueue::REQUIRED, "r"), (kueue::UNCONSTRAINED, "true")],
            &[(kueue::SLICE_SIZE, "4")],
            &[(kueue::SLICE_REQUIRED, "r")],
            &[(key::GANG_REQUIRED_TOPOLOGY, "r"), (kueue::REQUIRED, "s")],
            &[(key::GANG_REQUIRED_TOPOLOGY, "r"), (kueue::PREFERRED, "s")],
            &[
                (key::GANG_SLICE_REQUIRED_TOPOLOGY, "r"),
                (key::GANG_SLICE_PREFERRED_TOPOLOGY, "r"),
                (key::GANG_SLICE_SIZE, "2"),
            ],
        ];
        for case in cases {
            let e = parse(&map(case)).unwrap_err();
            assert!(
                matches!(e, RequestError::Inconsistent { .. }),
                "{case:?}: {e}"
            );
        }
        // The same thing said in both vocabularies is one statement.
        let s = parse(&map(&[
            (key::GANG_REQUIRED_TOPOLOGY, "example.com/rack"),
            (kueue::REQUIRED, "example.com/rack"),
        ]))
        .unwrap();
        assert_eq!(s.required.unwrap().key, "example.com/rack");
    }

    #[test]
    fn bad_values_name_what_is_accepted() {
        for (k, v) in [
            (kueue::REQUIRED, "not a key"),
            (kueue::UNCONSTRAINED, "yes"),
            (key::GANG_PREFERRED_TOPOLOGY, "-rack"),
        ] {
            let e = parse(&map(&[(k, v)])).unwrap_err();
            assert!(matches!(e, RequestError::BadValue { .. }), "{k}: {e}");
        }
        let e = parse(&map(&[
            (kueue::SLICE_REQUIRED, "r"),
            (kueue::SLICE_SIZE, "0"),
        ]))
        .unwrap_err();
        assert!(e.to_string().contains("1..=10000"), "{e}");
    }

    #[test]
    fn ranks_come_from_the_controllers_indices() {
        let r = |labels: &[(&str, &str)], ann: &[(&str, &str)]| rank(&map(labels), &map(ann));
        assert_eq!(r(&[], &[]).unwrap(), None);
        assert_eq!(
            r(&[(rank_keys::COMPLETION_INDEX, "7")], &[]).unwrap(),
            Some(Rank(vec![7]))
        );
        assert_eq!(
            r(
                &[(rank_keys::JOBSET_JOB_INDEX, "2")],
                &[(rank_keys::COMPLETION_INDEX, "1")]
            )
            .unwrap(),
            Some(Rank(vec![2, 1]))
        );
        assert_eq!(
            r(&[(rank_keys::LWS_WORKER_INDEX, "3")], &[]).unwrap(),
            Some(Rank(vec![3]))
        );
        assert!(r(&[(rank_keys::COMPLETION_INDEX, "x")], &[]).is_err());
        assert!(Rank(vec![1, 9]) < Rank(vec![2, 0]));
    }

    #[test]
    fn label_keys_are_checked_as_kubernetes_does() {
        for ok in [
            "rack",
            "example.com/rack",
            "kubernetes.io/hostname",
            "a.b-c/x_y.z",
        ] {
            assert!(is_label_key(ok), "{ok}");
        }
        for bad in ["", "/rack", "Example.com/rack", "a/b/c", "rack-", "x/"] {
            assert!(!is_label_key(bad), "{bad}");
        }
    }
}
