//! Parser of `nvidia-smi nvlink -s` / `nvidia-smi nvlink --status [-i N]`.
//!
//! The output is a `GPU <n>: <product> (UUID: <uuid>)` line per GPU (old drivers omit the UUID),
//! followed by one `Link <k>: <rate> GB/s` or `Link <k>: <inactive>` line per NVLink, indented by
//! a tab and a space (or the spaces a terminal made of them). A GPU whose links are all down gets
//! NVML's `Unable to retrieve NVLink information as all links are inActive` instead of link lines.
//!
//! Decisions:
//! - All-inactive GPUs are reported with no link entries and [`NvlinkGpu::all_inactive`] set: NVML
//!   does not say how many links there are, so none are invented.
//! - Pasted excerpts mark cuts with `[snip]`, `...` or `<output omitted>`. They parse; the GPU
//!   whose lines precede a marker is flagged [`NvlinkGpu::maybe_incomplete`] because its link list
//!   may have been cut.
//! - Product names and UUIDs are kept as given, including redacted ones with non-ASCII text.
//! - Any other line is an error naming it: a format this parser does not know is not guessed at.

use std::collections::HashSet;

/// A line of `nvlink -s` output that does not read as one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}, column {column}: {message}")]
pub struct NvlinkParseError {
    /// 1-based line number.
    pub line: usize,
    /// 1-based character column where the offending text starts.
    pub column: usize,
    pub message: String,
}

/// Parsed `nvidia-smi nvlink -s` output.
#[derive(Debug, Clone, PartialEq)]
pub struct NvlinkStatus {
    /// GPUs in the order printed.
    pub gpus: Vec<NvlinkGpu>,
    /// The text carried a snip marker: GPUs may be missing.
    pub snipped: bool,
}

/// One GPU's block.
#[derive(Debug, Clone, PartialEq)]
pub struct NvlinkGpu {
    /// nvidia-smi's GPU index, as in `topo -m`.
    pub index: u32,
    pub product: Option<String>,
    pub uuid: Option<String>,
    /// Links in the order printed.
    pub links: Vec<NvlinkLink>,
    /// NVML reported that all links are inactive (their count is unknown).
    pub all_inactive: bool,
    /// A snip marker follows this GPU's lines, so its link list may be cut short.
    pub maybe_incomplete: bool,
}

/// One `Link <k>:` line.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NvlinkLink {
    pub link: u32,
    pub state: LinkState,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LinkState {
    /// Up, at this per-direction rate in GB/s.
    Active {
        speed_gbps: f64,
    },
    Inactive,
}

const ALL_INACTIVE: &str = "all links are inactive";

impl NvlinkStatus {
    /// The block of GPU `index`.
    pub fn gpu(&self, index: u32) -> Option<&NvlinkGpu> {
        self.gpus.iter().find(|g| g.index == index)
    }
}

/// Parses `nvidia-smi nvlink -s` (or `nvlink --status -i N`) output.
pub fn parse(text: &str) -> Result<NvlinkStatus, NvlinkParseError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut gpus: Vec<NvlinkGpu> = Vec::new();
    let mut snipped = false;
    let mut indices = HashSet::new();
    let mut links_seen = HashSet::new();

    for (i, raw) in text.lines().enumerate() {
        let line_no = i + 1;
        let trimmed = raw.trim();
        if trimmed.is_empty() {
            continue;
        }
        let column = raw.chars().take_while(|c| c.is_whitespace()).count() + 1;
        let fail = |col: usize, message: String| NvlinkParseError {
            line: line_no,
            column: col,
            message,
        };

        if is_snip_marker(trimmed) {
            snipped = true;
            if let Some(last) = gpus.last_mut() {
                last.maybe_incomplete = true;
            }
            continue;
        }

        if let Some(rest) = trimmed.strip_prefix("GPU ") {
            let (index, tail) = rest.split_once(':').ok_or_else(|| {
                fail(
                    column,
                    format!("expected `GPU <n>: <product>` but found {trimmed:?}"),
                )
            })?;
            let index: u32 = index.trim().parse().map_err(|_| {
                fail(
                    column + 4,
                    format!(
                        "expected a GPU index after `GPU` but found {:?}",
                        index.trim()
                    ),
                )
            })?;
            if !indices.insert(index) {
                return Err(fail(column, format!("GPU {index} is listed twice")));
            }
            let (product, uuid) = product_and_uuid(tail.trim());
            links_seen.clear();
            gpus.push(NvlinkGpu {
                index,
                product,
                uuid,
                links: Vec::new(),
                all_inactive: false,
                maybe_incomplete: false,
            });
            continue;
        }

        let Some(gpu) = gpus.last_mut() else {
            return Err(fail(
                column,
                format!("expected a `GPU <n>: <product>` line first but found {trimmed:?}"),
            ));
        };

        if trimmed.to_ascii_lowercase().contains(ALL_INACTIVE) {
            gpu.all_inactive = true;
            continue;
        }

        let Some(rest) = trimmed.strip_prefix("Link ") else {
            return Err(fail(
                column,
                format!(
                    "expected `Link <k>: <rate> GB/s`, `Link <k>: <inactive>` or a `GPU <n>:` \
                     line but found {trimmed:?}"
                ),
            ));
        };
        let (link_text, value) = rest.split_once(':').ok_or_else(|| {
            fail(
                column,
                format!("expected `Link <k>: …` but found {trimmed:?}"),
            )
        })?;
        let link: u32 = link_text.trim().parse().map_err(|_| {
            fail(
                column + "Link ".len(),
                format!("expected a link number but found {:?}", link_text.trim()),
            )
        })?;
        if !links_seen.insert(link) {
            return Err(fail(
                column,
                format!("link {link} of GPU {} is listed twice", gpu.index),
            ));
        }
        let value_column = column
            + "Link ".len()
            + link_text.chars().count()
            + 1
            + value.chars().take_while(|c| c.is_whitespace()).count();
        let state = link_state(value.trim()).ok_or_else(|| {
            fail(
                value_column,
                format!(
                    "expected a rate such as `25.781 GB/s` or `<inactive>` but found {:?}",
                    value.trim()
                ),
            )
        })?;
        gpu.links.push(NvlinkLink { link, state });
    }
    Ok(NvlinkStatus { gpus, snipped })
}

/// `[snip]`, `...`, `<output omitted>`: cuts made by whoever pasted the output.
fn is_snip_marker(s: &str) -> bool {
    let lower = s.to_ascii_lowercase();
    lower.starts_with("[snip")
        || s.chars().all(|c| c == '.' || c == '…')
        || lower.contains("output omitted")
}

/// `NVIDIA H100 80GB HBM3 (UUID: GPU-…)` → product and UUID.
fn product_and_uuid(s: &str) -> (Option<String>, Option<String>) {
    let nonempty = |v: &str| (!v.is_empty()).then(|| v.to_string());
    match s.rsplit_once("(UUID:") {
        Some((product, uuid)) => {
            let uuid = uuid.trim().strip_suffix(')').unwrap_or(uuid.trim()).trim();
            (nonempty(product.trim()), nonempty(uuid))
        }
        None => (nonempty(s), None),
    }
}

fn link_state(value: &str) -> Option<LinkState> {
    let lower = value.to_ascii_lowercase();
    if lower.trim_matches(|c| c == '<' || c == '>') == "inactive" {
        return Some(LinkState::Inactive);
    }
    let rate = value.strip_suffix("GB/s")?.trim();
    let speed_gbps: f64 = rate.parse().ok()?;
    (speed_gbps.is_finite() && speed_gbps >= 0.0).then_some(LinkState::Active { speed_gbps })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_rates_inactive_and_all_inactive() {
        let s = parse(
            "GPU 0: NVIDIA RTX A6000 (UUID: GPU-1)\n\t Link 0: 14.062 GB/s\n\t Link 1: <inactive>\n\
             GPU 1: NVIDIA RTX A6000 (UUID: GPU-2)\n\
             NVML: Unable to retrieve NVLink information as all links are inActive\n",
        )
        .unwrap();
        assert_eq!(s.gpus.len(), 2);
        assert_eq!(
            s.gpus[0].links,
            [
                NvlinkLink {
                    link: 0,
                    state: LinkState::Active { speed_gbps: 14.062 }
                },
                NvlinkLink {
                    link: 1,
                    state: LinkState::Inactive
                }
            ]
        );
        assert!(s.gpus[1].all_inactive && s.gpus[1].links.is_empty());
    }

    #[test]
    fn a_bad_rate_names_its_column() {
        let e = parse("GPU 0: X\n\t Link 0: fast\n").unwrap_err();
        assert_eq!((e.line, e.column), (2, 11));
    }
}
