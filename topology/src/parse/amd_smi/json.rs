//! `amd-smi topology --json`, both shapes the tool has printed.

use super::{PairCells, answers, bandwidth, link_type};
use crate::backend::amd_smi::AmdSmiAnswers;
use crate::parse::amd_text_error::{AmdTextError, at};
use serde_json::Value;
use std::collections::BTreeMap;

const SHAPE: &str = "a list of {\"gpu\": <id>, \"bdf\": ..., \"links\": [{\"gpu\": <id>, \"link_type\": \"XGMI\"|\"PCIE\"|\"SELF\", \"num_hops\": <n>, \"weight\": <n>, \"bandwidth\": \"<min>-<max>\"|\"N/A\"}]} \
                     or the older {\"gpu\": <id>, \"weight\": {\"gpu_<id>\": <n>}, \"hops\": {...}, \"link_type\": {...}, \"numa_bandwidth\": {...}}";

/// A JSON error at a path; JSON errors carry no useful column, so line 1.
fn bad(path: &str, what: &str) -> AmdTextError {
    at(1, 1, format!("{path}: {what}; expected {SHAPE}"))
}

fn gpu_id(v: &Value, path: &str) -> Result<u32, AmdTextError> {
    v.as_u64()
        .and_then(|g| u32::try_from(g).ok())
        .ok_or_else(|| bad(path, "expected a GPU id (a whole number)"))
}

/// One cell: a number, a link type or a bandwidth range (`N/A`: not said).
fn put(cells: &mut PairCells, field: &str, v: &Value, path: &str) -> Result<(), AmdTextError> {
    let text = v.as_str();
    if text == Some("N/A") {
        return Ok(());
    }
    match field {
        "weight" => cells.weight = Some(v.as_u64().ok_or_else(|| bad(path, "expected a weight"))?),
        "num_hops" | "hops" => {
            cells.hops = Some(
                v.as_u64()
                    .and_then(|h| u32::try_from(h).ok())
                    .ok_or_else(|| bad(path, "expected a hop count"))?,
            )
        }
        "link_type" => {
            cells.link_type = Some(
                text.and_then(link_type)
                    .ok_or_else(|| bad(path, "expected XGMI or PCIE"))?,
            )
        }
        "bandwidth" | "numa_bandwidth" => {
            let b = text
                .and_then(bandwidth)
                .and_then(Result::ok)
                .ok_or_else(|| bad(path, "expected \"<min>-<max>\" MB/s or \"N/A\""))?;
            cells.bandwidth = Some(b);
        }
        _ => {}
    }
    Ok(())
}

/// Records one direction of a pair, checking it against the other.
fn merge(
    pairs: &mut BTreeMap<(u32, u32), PairCells>,
    src: u32,
    dst: u32,
    cells: PairCells,
    path: &str,
) -> Result<(), AmdTextError> {
    let key = (src.min(dst), src.max(dst));
    match pairs.get(&key) {
        None => {
            pairs.insert(key, cells);
            Ok(())
        }
        Some(old) => {
            let same = old.weight == cells.weight
                && old.hops == cells.hops
                && old.link_type == cells.link_type
                && old.bandwidth == cells.bandwidth;
            if same {
                Ok(())
            } else {
                Err(bad(
                    path,
                    &format!("GPU {src}→{dst} disagrees with GPU {dst}→{src}"),
                ))
            }
        }
    }
}

/// Reads `amd-smi topology --json`.
pub fn parse_json(text: &str) -> Result<AmdSmiAnswers, AmdTextError> {
    let doc: Value = serde_json::from_str(text).map_err(|e| {
        at(
            e.line(),
            e.column(),
            format!("not JSON: {e}; expected {SHAPE}"),
        )
    })?;
    let list = doc.as_array().ok_or_else(|| bad("$", "expected a list"))?;
    let mut gpus: Vec<(u32, Option<String>)> = Vec::new();
    let mut pairs: BTreeMap<(u32, u32), PairCells> = BTreeMap::new();
    for (i, entry) in list.iter().enumerate() {
        let path = format!("$[{i}]");
        let obj = entry
            .as_object()
            .ok_or_else(|| bad(&path, "expected an object"))?;
        let src = gpu_id(
            obj.get("gpu").unwrap_or(&Value::Null),
            &format!("{path}.gpu"),
        )?;
        if gpus.iter().any(|(g, _)| *g == src) {
            return Err(bad(&path, &format!("GPU {src} is listed twice")));
        }
        gpus.push((
            src,
            obj.get("bdf").and_then(Value::as_str).map(str::to_string),
        ));
        if let Some(links) = obj.get("links") {
            let links = links
                .as_array()
                .ok_or_else(|| bad(&format!("{path}.links"), "expected a list"))?;
            for (j, link) in links.iter().enumerate() {
                let lpath = format!("{path}.links[{j}]");
                let l = link
                    .as_object()
                    .ok_or_else(|| bad(&lpath, "expected an object"))?;
                let dst = gpu_id(
                    l.get("gpu").unwrap_or(&Value::Null),
                    &format!("{lpath}.gpu"),
                )?;
                if dst == src {
                    continue;
                }
                let mut cells = PairCells::default();
                for (k, v) in l {
                    put(&mut cells, k, v, &format!("{lpath}.{k}"))?;
                }
                merge(&mut pairs, src, dst, cells, &lpath)?;
            }
        } else {
            // The older shape: one map per field, keyed `gpu_<id>`.
            let mut by_dst: BTreeMap<u32, PairCells> = BTreeMap::new();
            for field in ["weight", "hops", "link_type", "numa_bandwidth"] {
                let Some(map) = obj.get(field) else { continue };
                let fpath = format!("{path}.{field}");
                let map = map
                    .as_object()
                    .ok_or_else(|| bad(&fpath, "expected a map of gpu_<id>"))?;
                for (k, v) in map {
                    let dst = k
                        .strip_prefix("gpu_")
                        .and_then(|d| d.parse::<u32>().ok())
                        .ok_or_else(|| bad(&format!("{fpath}.{k}"), "expected a key gpu_<id>"))?;
                    if dst != src {
                        put(
                            by_dst.entry(dst).or_default(),
                            field,
                            v,
                            &format!("{fpath}.{k}"),
                        )?;
                    }
                }
            }
            for (dst, cells) in by_dst {
                merge(&mut pairs, src, dst, cells, &path)?;
            }
        }
    }
    for &(a, b) in pairs.keys() {
        for g in [a, b] {
            if !gpus.iter().any(|(x, _)| *x == g) {
                return Err(bad(
                    "$",
                    &format!("a link names GPU {g}, which has no entry"),
                ));
            }
        }
    }
    gpus.sort_by_key(|g| g.0);
    Ok(answers(&gpus, &pairs))
}
