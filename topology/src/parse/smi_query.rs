//! Parser of `nvidia-smi -q` (text, also `-a`) and `nvidia-smi -q -x` (XML).
//!
//! Only what placement needs is read: driver and CUDA versions and, per GPU, product, UUID,
//! total framebuffer memory, PCI bus id, MIG mode, NUMA node and NVLink fabric membership. The
//! rest of the report is skipped whatever it holds, so new sections in newer drivers do not
//! break the parser; a field this parser reads but cannot understand is an error.
//!
//! Decisions:
//! - GPUs are returned in the order printed, which is nvidia-smi's index order.
//! - `N/A`, `Not Supported`, `Unknown Error` and the like read as `None`.
//! - PCI bus ids are canonicalised to `00000000:17:00.0` (lower-case hex). The old
//!   `domain:bus:device` form (`0:2:0`, drivers ~270) becomes `00000000:02:00.0`: those drivers
//!   print `Bus : 2`, `Device : 0`, `Domain : 0` beside it.
//! - A text excerpt holding only part of one GPU's section (no `GPU <bus id>` line) is read as
//!   that one GPU, with its PCI bus id taken from the `Bus Id` line if any.

use gputopo_api::GpuFabric;
use serde::Deserialize;

/// Parsed `nvidia-smi -q` report.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SmiQuery {
    pub driver_version: Option<String>,
    pub cuda_version: Option<String>,
    /// `Attached GPUs`: may exceed `gpus.len()` in excerpts or `-i` queries.
    pub attached_gpus: Option<u32>,
    /// GPUs in the order printed (nvidia-smi index order).
    pub gpus: Vec<QueryGpu>,
}

/// One GPU of the report.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueryGpu {
    pub product: Option<String>,
    pub uuid: Option<String>,
    /// Total framebuffer memory.
    pub memory_mib: Option<u64>,
    /// Canonical `00000000:17:00.0`.
    pub pci_bus_id: Option<String>,
    /// `MIG Mode` / `Current`; `None` where the GPU or driver has no MIG.
    pub mig_enabled: Option<bool>,
    pub numa_node: Option<i32>,
    /// Set when the driver reports a clique id or cluster UUID (GB200/GB300 NVL domains).
    pub fabric: Option<GpuFabric>,
}

/// A `-q` report that does not read as one.
#[derive(Debug, thiserror::Error)]
pub enum SmiQueryError {
    #[error("line {line}, column {column}: {message}")]
    Text {
        line: usize,
        column: usize,
        message: String,
    },
    #[error("nvidia-smi -q -x XML: {0}")]
    Xml(#[from] quick_xml::DeError),
    #[error("nvidia-smi -q -x XML, GPU {gpu}: {message}")]
    XmlValue { gpu: String, message: String },
}

/// Parses `nvidia-smi -q` output, text or XML (`-x`), telling them apart by the first character.
pub fn parse(text: &str) -> Result<SmiQuery, SmiQueryError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    if text.trim_start().starts_with('<') {
        parse_xml(text)
    } else {
        parse_text(text)
    }
}

/// Values nvidia-smi prints where it has none.
fn known(value: &str) -> Option<&str> {
    let v = value.trim();
    let bare = v.trim_start_matches('[').trim_end_matches(']');
    let unknown = bare.is_empty()
        || bare.eq_ignore_ascii_case("N/A")
        || bare.eq_ignore_ascii_case("Not Available")
        || bare.eq_ignore_ascii_case("Not Supported")
        || bare.eq_ignore_ascii_case("Unknown Error")
        || bare.eq_ignore_ascii_case("Insufficient Permissions")
        || bare.eq_ignore_ascii_case("Requested functionality has been deprecated");
    (!unknown).then_some(v)
}

pub use crate::pci::canonical_pci_bus_id;

/// `81559 MiB` → 81559. Old drivers print `Mb`/`MB` for the same mebibytes.
fn mebibytes(value: &str) -> Option<u64> {
    let mut words = value.split_whitespace();
    let number = words.next()?.parse::<u64>().ok()?;
    let factor = match words.next()? {
        "MiB" | "MB" | "Mb" => 1,
        "GiB" | "GB" => 1024,
        _ => return None,
    };
    if words.next().is_some() {
        return None;
    }
    number.checked_mul(factor)
}

fn mig_mode(value: &str) -> Option<Option<bool>> {
    match known(value) {
        None => Some(None),
        Some(v) if v.eq_ignore_ascii_case("Enabled") => Some(Some(true)),
        Some(v) if v.eq_ignore_ascii_case("Disabled") => Some(Some(false)),
        Some(_) => None,
    }
}

fn numa_node(value: &str) -> Option<Option<i32>> {
    match known(value) {
        None => Some(None),
        // NVML reports -1 when the platform has no NUMA information.
        Some(v) => v.parse::<i32>().ok().map(|n| (n >= 0).then_some(n)),
    }
}

fn clique_id(value: &str) -> Option<Option<u32>> {
    match known(value) {
        None => Some(None),
        Some(v) => v.parse::<u32>().ok().map(Some),
    }
}

fn fabric(clique: Option<u32>, cluster: Option<String>) -> Option<GpuFabric> {
    (clique.is_some() || cluster.is_some()).then_some(GpuFabric {
        cluster_uuid: cluster,
        clique_id: clique,
    })
}

// ---------------------------------------------------------------------------------------------
// Text

/// One `Key : Value` or section line of the text report, with its children.
#[derive(Debug)]
struct Node<'a> {
    key: &'a str,
    value: Option<&'a str>,
    line: usize,
    /// 1-based column of the value (of the key for sections).
    value_column: usize,
    children: Vec<Node<'a>>,
}

impl<'a> Node<'a> {
    /// Child by key, ignoring case and spaces (`CliqueId` = `Clique ID`).
    fn child(&self, key: &str) -> Option<&Node<'a>> {
        self.children.iter().find(|c| same_key(c.key, key))
    }
}

fn same_key(a: &str, b: &str) -> bool {
    let squash = |s: &str| {
        s.chars()
            .filter(|c| !c.is_whitespace())
            .flat_map(char::to_lowercase)
            .collect::<String>()
    };
    squash(a) == squash(b)
}

/// Builds the section tree from indentation. Lines are `Key : Value` (the separator is the first
/// colon preceded by a blank, so bus ids and times in values stay whole) or a bare section name.
fn tree(text: &str) -> Vec<Node<'_>> {
    // (indent, node) stack of open sections; closed nodes move into their parent.
    let mut roots: Vec<Node<'_>> = Vec::new();
    let mut stack: Vec<(usize, Node<'_>)> = Vec::new();
    fn close<'a>(stack: &mut Vec<(usize, Node<'a>)>, roots: &mut Vec<Node<'a>>) {
        if let Some((_, node)) = stack.pop() {
            match stack.last_mut() {
                Some((_, parent)) => parent.children.push(node),
                None => roots.push(node),
            }
        }
    }
    for (i, raw) in text.lines().enumerate() {
        let trimmed = raw.trim();
        if trimmed.is_empty() || trimmed.starts_with("==") {
            continue;
        }
        let indent = raw.chars().take_while(|c| c.is_whitespace()).count();
        let (key, value, value_column) = match split_key_value(trimmed) {
            Some((k, v, offset)) => (k, Some(v), indent + offset + 1),
            None => (trimmed, None, indent + 1),
        };
        while stack.last().is_some_and(|(d, _)| *d >= indent) {
            close(&mut stack, &mut roots);
        }
        stack.push((
            indent,
            Node {
                key,
                value,
                line: i + 1,
                value_column,
                children: Vec::new(),
            },
        ));
    }
    while !stack.is_empty() {
        close(&mut stack, &mut roots);
    }
    roots
}

/// `Bus Id : 00000000:18:00.0` → key, value and the value's character offset in `line`.
fn split_key_value(line: &str) -> Option<(&str, &str, usize)> {
    let colon = line
        .char_indices()
        .zip(line.chars().skip(1))
        .find(|((_, c), next)| c.is_whitespace() && *next == ':')
        .map(|((byte, _), _)| byte)?;
    let key = line.get(..colon)?.trim_end();
    let after = line.get(colon..)?.trim_start().strip_prefix(':')?;
    let value = after.trim();
    let value_start = line.len() - after.trim_start().len();
    let offset = line.get(..value_start)?.chars().count();
    Some((key, value, offset))
}

/// Parses the text form of `nvidia-smi -q` / `-a`.
pub fn parse_text(text: &str) -> Result<SmiQuery, SmiQueryError> {
    let roots = tree(text);
    let mut query = SmiQuery::default();
    let mut gpu_sections: Vec<&Node<'_>> = Vec::new();
    let mut loose: Vec<&Node<'_>> = Vec::new();
    for node in &roots {
        let value = node.value.and_then(known).map(str::to_string);
        if same_key(node.key, "Driver Version") || same_key(node.key, "KMD Version") {
            query.driver_version = value;
        } else if same_key(node.key, "CUDA Version") || same_key(node.key, "CUDA UMD Version") {
            query.cuda_version = value;
        } else if same_key(node.key, "Attached GPUs") {
            let parsed = value.as_deref().map(str::parse::<u32>).transpose();
            query.attached_gpus = parsed.map_err(|_| text_error(node, "a GPU count"))?;
        } else if node.value.is_none() && node.key.starts_with("GPU ") {
            gpu_sections.push(node);
        } else if !same_key(node.key, "Timestamp") {
            loose.push(node);
        }
    }
    for section in gpu_sections {
        let header_id = section.key.strip_prefix("GPU ").unwrap_or_default();
        let children: Vec<&Node<'_>> = section.children.iter().collect();
        query.gpus.push(text_gpu(&children, Some(header_id))?);
    }
    if query.gpus.is_empty() && !loose.is_empty() {
        // An excerpt of one GPU's section without its `GPU <bus id>` line.
        let gpu = text_gpu(&loose, None)?;
        if gpu != QueryGpu::default() {
            query.gpus.push(gpu);
        }
    }
    if query.gpus.is_empty() && query.driver_version.is_none() && query.attached_gpus.is_none() {
        let (line, column) = roots.first().map_or((1, 1), |n| (n.line, 1));
        return Err(SmiQueryError::Text {
            line,
            column,
            message: "expected `nvidia-smi -q` output (a `GPU <bus id>` section, `Driver \
                      Version` or `Attached GPUs`) but found none"
                .into(),
        });
    }
    Ok(query)
}

fn text_error(node: &Node<'_>, expected: &str) -> SmiQueryError {
    SmiQueryError::Text {
        line: node.line,
        column: node.value_column,
        message: format!(
            "expected {expected} for {:?} but found {:?}",
            node.key,
            node.value.unwrap_or_default()
        ),
    }
}

/// Reads one GPU from its section's nodes; `header_id` is the id on its `GPU <id>` line.
fn text_gpu<'a>(nodes: &[&Node<'a>], header_id: Option<&str>) -> Result<QueryGpu, SmiQueryError> {
    let find = |key: &str| nodes.iter().copied().find(|n| same_key(n.key, key));
    fn value<'a>(node: Option<&Node<'a>>) -> Option<&'a str> {
        node.and_then(|n| n.value).and_then(known)
    }
    let mut gpu = QueryGpu {
        product: value(find("Product Name")).map(str::to_string),
        uuid: value(find("GPU UUID")).map(str::to_string),
        ..QueryGpu::default()
    };

    let memory = find("FB Memory Usage")
        .or_else(|| find("Memory Usage"))
        .and_then(|m| m.child("Total"));
    if let Some(total) = memory
        && let Some(v) = total.value.and_then(known)
    {
        gpu.memory_mib = Some(mebibytes(v).ok_or_else(|| text_error(total, "a size in MiB"))?);
    }

    let pci = find("PCI");
    let bus_node = pci.and_then(|p| p.child("Bus Id"));
    if let Some(node) = bus_node
        && let Some(v) = node.value.and_then(known)
    {
        gpu.pci_bus_id =
            Some(canonical_pci_bus_id(v).ok_or_else(|| text_error(node, "a PCI bus id"))?);
    } else if let Some(id) = header_id.and_then(known) {
        gpu.pci_bus_id = canonical_pci_bus_id(id);
    }

    if let Some(current) = find("MIG Mode").and_then(|m| m.child("Current")) {
        gpu.mig_enabled = mig_mode(current.value.unwrap_or_default())
            .ok_or_else(|| text_error(current, "Enabled, Disabled or N/A"))?;
    }

    let numa = find("NUMA Node")
        .or_else(|| find("NUMA Node ID"))
        .or_else(|| pci.and_then(|p| p.child("NUMA Node")))
        .or_else(|| pci.and_then(|p| p.child("NUMA Node ID")));
    if let Some(node) = numa {
        gpu.numa_node = numa_node(node.value.unwrap_or_default())
            .ok_or_else(|| text_error(node, "a NUMA node number"))?;
    }

    if let Some(section) = find("Fabric") {
        let clique = match section.child("Clique ID") {
            Some(node) => clique_id(node.value.unwrap_or_default())
                .ok_or_else(|| text_error(node, "a clique id (a number)"))?,
            None => None,
        };
        let cluster = section
            .child("Cluster UUID")
            .and_then(|n| n.value)
            .and_then(known)
            .map(str::to_string);
        gpu.fabric = fabric(clique, cluster);
    }
    Ok(gpu)
}

// ---------------------------------------------------------------------------------------------
// XML

#[derive(Debug, Deserialize)]
struct XmlLog {
    driver_version: Option<String>,
    cuda_version: Option<String>,
    attached_gpus: Option<String>,
    #[serde(rename = "gpu", default)]
    gpus: Vec<XmlGpu>,
}

#[derive(Debug, Deserialize)]
struct XmlGpu {
    #[serde(rename = "@id")]
    id: Option<String>,
    product_name: Option<String>,
    uuid: Option<String>,
    #[serde(alias = "memory_usage")]
    fb_memory_usage: Option<XmlMemory>,
    mig_mode: Option<XmlMig>,
    pci: Option<XmlPci>,
    #[serde(alias = "numa_node_id")]
    numa_node: Option<String>,
    fabric: Option<XmlFabric>,
}

#[derive(Debug, Deserialize)]
struct XmlMemory {
    total: Option<String>,
}

#[derive(Debug, Deserialize)]
struct XmlMig {
    current_mig: Option<String>,
}

#[derive(Debug, Deserialize)]
struct XmlPci {
    pci_bus_id: Option<String>,
    #[serde(alias = "numa_node_id")]
    numa_node: Option<String>,
}

#[derive(Debug, Deserialize)]
struct XmlFabric {
    #[serde(rename = "cliqueId", alias = "clique_id")]
    clique_id: Option<String>,
    #[serde(rename = "clusterUuid", alias = "cluster_uuid")]
    cluster_uuid: Option<String>,
}

/// Parses `nvidia-smi -q -x` (the `nvidia_smi_log` document).
pub fn parse_xml(text: &str) -> Result<SmiQuery, SmiQueryError> {
    let log: XmlLog = quick_xml::de::from_str(text)?;
    let opt = |v: &Option<String>| v.as_deref().and_then(known).map(str::to_string);
    let attached_gpus = match opt(&log.attached_gpus) {
        Some(v) => Some(v.parse::<u32>().map_err(|_| SmiQueryError::XmlValue {
            gpu: "-".into(),
            message: format!("expected a GPU count in <attached_gpus> but found {v:?}"),
        })?),
        None => None,
    };
    let mut gpus = Vec::with_capacity(log.gpus.len());
    for (i, g) in log.gpus.iter().enumerate() {
        let name = g.id.clone().unwrap_or_else(|| format!("#{i}"));
        let bad = |element: &str, expected: &str, found: &str| SmiQueryError::XmlValue {
            gpu: name.clone(),
            message: format!("expected {expected} in <{element}> but found {found:?}"),
        };
        let memory_mib = match g.fb_memory_usage.as_ref().and_then(|m| opt(&m.total)) {
            Some(v) => Some(mebibytes(&v).ok_or_else(|| bad("total", "a size in MiB", &v))?),
            None => None,
        };
        let bus = g.pci.as_ref().and_then(|p| opt(&p.pci_bus_id));
        let pci_bus_id = match bus {
            Some(v) => Some(
                canonical_pci_bus_id(&v).ok_or_else(|| bad("pci_bus_id", "a PCI bus id", &v))?,
            ),
            None => opt(&g.id).as_deref().and_then(canonical_pci_bus_id),
        };
        let mig = g.mig_mode.as_ref().and_then(|m| m.current_mig.clone());
        let mig_enabled = match mig {
            Some(v) => {
                mig_mode(&v).ok_or_else(|| bad("current_mig", "Enabled, Disabled or N/A", &v))?
            }
            None => None,
        };
        let numa = g
            .numa_node
            .clone()
            .or_else(|| g.pci.as_ref().and_then(|p| p.numa_node.clone()));
        let numa_node = match numa {
            Some(v) => {
                self::numa_node(&v).ok_or_else(|| bad("numa_node", "a NUMA node number", &v))?
            }
            None => None,
        };
        let fabric = match &g.fabric {
            Some(f) => {
                let clique = match &f.clique_id {
                    Some(v) => clique_id(v).ok_or_else(|| bad("cliqueId", "a number", v))?,
                    None => None,
                };
                self::fabric(clique, opt(&f.cluster_uuid))
            }
            None => None,
        };
        gpus.push(QueryGpu {
            product: opt(&g.product_name),
            uuid: opt(&g.uuid),
            memory_mib,
            pci_bus_id,
            mig_enabled,
            numa_node,
            fabric,
        });
    }
    let driver_version = opt(&log.driver_version);
    if gpus.is_empty() && driver_version.is_none() && attached_gpus.is_none() {
        return Err(SmiQueryError::XmlValue {
            gpu: "-".into(),
            message: "expected an <nvidia_smi_log> with <driver_version>, <attached_gpus> or \
                      <gpu> elements but found none"
                .into(),
        });
    }
    Ok(SmiQuery {
        driver_version,
        cuda_version: opt(&log.cuda_version),
        attached_gpus,
        gpus,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_value_split_keeps_colons_in_values() {
        assert_eq!(
            split_key_value("Bus Id                            : 00000000:17:00.0"),
            Some(("Bus Id", "00000000:17:00.0", 36))
        );
        assert_eq!(split_key_value("GPU 00000000:17:00.0"), None);
    }

    #[test]
    fn fabric_section_reads_both_spellings() {
        let q = parse_text(
            "GPU 00000000:17:00.0\n    Product Name : X\n    Fabric\n        State : Completed\n        \
             CliqueId : 32766\n        Cluster UUID : 4a5e1c8b-0000-0000-0000-000000000001\n",
        )
        .unwrap();
        let f = q.gpus[0].fabric.as_ref().unwrap();
        assert_eq!(f.clique_id, Some(32766));
        assert_eq!(
            f.cluster_uuid.as_deref(),
            Some("4a5e1c8b-0000-0000-0000-000000000001")
        );
    }
}
