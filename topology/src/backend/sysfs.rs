//! What Linux sysfs says about a GPU's PCI device: its NUMA node and the CPUs
//! local to it. NVML does not answer these on every driver (the NUMA affinity
//! query is R450+, and some VMs answer nothing), so the NVML backend falls back
//! to `/sys/bus/pci/devices/<domain:bus:dev.fn>/{numa_node,local_cpulist}`.
//!
//! Also here: canonical PCI bus ids, the cpulist formatter/parser shared with
//! the NVML backend, and the host metadata a recording stores.
//!
//! [`RealSysfs`] reads plain files under a root directory (`/sys` on a node);
//! [`RecordedSysfs`] answers from a recording; both are [`SysfsSource`]s.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The largest CPU number a cpulist may hold. Linux builds with at most 8192
/// CPUs today; the cap only stops a corrupt range (`0-4294967295`) from
/// allocating gigabytes.
pub const MAX_CPU: u32 = 65_535;

/// Answers about a GPU's PCI device that sysfs holds.
pub trait SysfsSource {
    /// The NUMA node the device is attached to; `None` when unknown (sysfs `-1`,
    /// no such device, unreadable).
    fn numa_node(&self, pci_bus_id: &str) -> Option<i32>;
    /// The CPUs local to the device as a canonical cpulist (`0-31,64-95`);
    /// `None` when unknown or empty.
    fn local_cpulist(&self, pci_bus_id: &str) -> Option<String>;
    /// The device's place in the PCI tree: its path under `/sys/devices`
    /// (`pci0000:80/0000:80:01.0/…/0000:8a:00.0`); `None` when unknown.
    fn pci_path(&self, _pci_bus_id: &str) -> Option<String> {
        None
    }
    /// The RDMA devices (`/sys/class/infiniband`), by name.
    fn rdma_nics(&self) -> Vec<SysfsNic> {
        Vec::new()
    }
}

/// An RDMA device and the PCI function behind it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SysfsNic {
    /// `mlx5_0`, as `nvidia-smi topo -m`'s NIC legend names it.
    pub name: String,
    /// Canonical PCI bus id.
    pub pci_bus_id: String,
}

/// Reads a sysfs tree. `root` is `/sys` on a real node and a temporary directory
/// in tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RealSysfs {
    pub root: PathBuf,
}

impl RealSysfs {
    pub fn new(root: impl Into<PathBuf>) -> RealSysfs {
        RealSysfs { root: root.into() }
    }

    /// The machine's own `/sys`.
    pub fn system() -> RealSysfs {
        RealSysfs::new("/sys")
    }

    /// `<root>/bus/pci/devices/<0000:17:00.0>` for a bus id in any accepted form.
    pub fn device_dir(&self, pci_bus_id: &str) -> Option<PathBuf> {
        let name = sysfs_pci_name(pci_bus_id)?;
        Some(self.root.join("bus/pci/devices").join(name))
    }

    /// Canonical bus ids of the NVIDIA display/3D controllers sysfs lists
    /// (vendor `0x10de`, class `0x03xxxx`), sorted. Lets a recording capture
    /// sysfs facts even where NVML cannot be loaded.
    pub fn nvidia_gpus(&self) -> Vec<String> {
        let dir = self.root.join("bus/pci/devices");
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return Vec::new();
        };
        let mut out: Vec<String> = entries
            .filter_map(Result::ok)
            .filter_map(|entry| {
                let path = entry.path();
                let vendor = read_trimmed(&path.join("vendor"))?;
                let class = read_trimmed(&path.join("class"))?;
                let is_gpu = vendor.eq_ignore_ascii_case("0x10de") && class.starts_with("0x03");
                if !is_gpu {
                    return None;
                }
                canonical_pci_bus_id(entry.file_name().to_str()?)
            })
            .collect();
        out.sort();
        out
    }
}

impl SysfsSource for RealSysfs {
    fn numa_node(&self, pci_bus_id: &str) -> Option<i32> {
        let text = read_trimmed(&self.device_dir(pci_bus_id)?.join("numa_node"))?;
        parse_numa_node(&text)
    }

    fn local_cpulist(&self, pci_bus_id: &str) -> Option<String> {
        let text = read_trimmed(&self.device_dir(pci_bus_id)?.join("local_cpulist"))?;
        normalize_cpulist(&text)
    }

    fn pci_path(&self, pci_bus_id: &str) -> Option<String> {
        // bus/pci/devices/<id> links to ../../../devices/pci…/…/<id>.
        let device = std::fs::canonicalize(self.device_dir(pci_bus_id)?).ok()?;
        let devices = std::fs::canonicalize(self.root.join("devices")).ok()?;
        Some(device.strip_prefix(devices).ok()?.to_str()?.to_string())
    }

    fn rdma_nics(&self) -> Vec<SysfsNic> {
        let Ok(entries) = std::fs::read_dir(self.root.join("class/infiniband")) else {
            return Vec::new();
        };
        let mut out: Vec<SysfsNic> = entries
            .filter_map(Result::ok)
            .filter_map(|entry| {
                let device = std::fs::canonicalize(entry.path().join("device")).ok()?;
                Some(SysfsNic {
                    name: entry.file_name().to_str()?.to_string(),
                    pci_bus_id: canonical_pci_bus_id(device.file_name()?.to_str()?)?,
                })
            })
            .collect();
        out.sort();
        out
    }
}

/// What sysfs said about one PCI device, as a recording stores it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SysfsDevice {
    pub numa_node: Option<i32>,
    pub local_cpulist: Option<String>,
    /// Its path under `/sys/devices` (recordings before NICs were read lack it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pci_path: Option<String>,
}

/// Recorded sysfs answers keyed by canonical PCI bus id (replay and tests).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecordedSysfs {
    pub devices: BTreeMap<String, SysfsDevice>,
    pub nics: Vec<SysfsNic>,
}

impl RecordedSysfs {
    /// Builds the map; keys are canonicalized so `0000:17:00.0` and
    /// `00000000:17:00.0` find the same entry. Keys that are not bus ids are kept
    /// verbatim (they can never match, which is what a lookup should then say).
    pub fn new(devices: &BTreeMap<String, SysfsDevice>) -> RecordedSysfs {
        RecordedSysfs {
            devices: devices
                .iter()
                .map(|(k, v)| {
                    (
                        canonical_pci_bus_id(k).unwrap_or_else(|| k.clone()),
                        v.clone(),
                    )
                })
                .collect(),
            nics: Vec::new(),
        }
    }

    /// With the RDMA devices the recording lists.
    pub fn with_nics(mut self, nics: &[SysfsNic]) -> RecordedSysfs {
        self.nics = nics.to_vec();
        self
    }

    fn get(&self, pci_bus_id: &str) -> Option<&SysfsDevice> {
        self.devices.get(&canonical_pci_bus_id(pci_bus_id)?)
    }
}

impl SysfsSource for RecordedSysfs {
    fn numa_node(&self, pci_bus_id: &str) -> Option<i32> {
        self.get(pci_bus_id)?.numa_node.filter(|n| *n >= 0)
    }

    fn local_cpulist(&self, pci_bus_id: &str) -> Option<String> {
        normalize_cpulist(self.get(pci_bus_id)?.local_cpulist.as_deref()?)
    }

    fn pci_path(&self, pci_bus_id: &str) -> Option<String> {
        self.get(pci_bus_id)?.pci_path.clone()
    }

    fn rdma_nics(&self) -> Vec<SysfsNic> {
        self.nics.clone()
    }
}

/// A sysfs source that knows nothing (no sysfs, or a test that wants NVML only).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoSysfs;

impl SysfsSource for NoSysfs {
    fn numa_node(&self, _: &str) -> Option<i32> {
        None
    }
    fn local_cpulist(&self, _: &str) -> Option<String> {
        None
    }
}

fn read_trimmed(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

/// sysfs writes `-1` when the platform does not say (single-socket boxes, VMs).
fn parse_numa_node(text: &str) -> Option<i32> {
    text.trim().parse::<i32>().ok().filter(|n| *n >= 0)
}

/// A cpulist in canonical form, or `None` when it is empty or unreadable.
fn normalize_cpulist(text: &str) -> Option<String> {
    let cpus = parse_cpulist(text).ok()?;
    if cpus.is_empty() {
        None
    } else {
        Some(format_cpulist(cpus))
    }
}

// ---------------------------------------------------------------------------
// PCI bus ids

pub use crate::pci::canonical_pci_bus_id;

/// The directory name sysfs uses for a bus id: `0000:17:00.0`.
pub fn sysfs_pci_name(text: &str) -> Option<String> {
    crate::pci::PciAddress::parse(text).map(|a| a.sysfs_name())
}

// ---------------------------------------------------------------------------
// cpulists

/// A cpulist could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{input:?} is not a cpulist ({reason}); expected comma-separated CPU numbers and ranges such as 0-31,64-95"
)]
pub struct CpulistError {
    pub input: String,
    pub reason: String,
}

/// Reads a Linux cpulist (`0-31,64-95`, `0,64`, `` for none) into sorted,
/// distinct CPU numbers. Surrounding whitespace (sysfs's newline) is ignored.
pub fn parse_cpulist(text: &str) -> Result<Vec<u32>, CpulistError> {
    let err = |reason: String| CpulistError {
        input: text.to_string(),
        reason,
    };
    let number = |s: &str| -> Result<u32, CpulistError> {
        let s = s.trim();
        if s.is_empty() || !s.bytes().all(|c| c.is_ascii_digit()) {
            return Err(err(format!("{s:?} is not a CPU number")));
        }
        match s.parse::<u32>() {
            Ok(n) if n <= MAX_CPU => Ok(n),
            _ => Err(err(format!("CPU {s} is above the limit {MAX_CPU}"))),
        }
    };
    let text_trimmed = text.trim();
    let mut cpus = Vec::new();
    if text_trimmed.is_empty() {
        return Ok(cpus);
    }
    for item in text_trimmed.split(',') {
        match item.split_once('-') {
            Some((lo, hi)) => {
                let (lo, hi) = (number(lo)?, number(hi)?);
                if lo > hi {
                    return Err(err(format!("range {lo}-{hi} runs backwards")));
                }
                cpus.extend(lo..=hi);
            }
            None => cpus.push(number(item)?),
        }
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

/// Writes CPU numbers (any order, repeats allowed) as a canonical cpulist:
/// ascending, runs of two or more as `a-b`, as the kernel prints them.
pub fn format_cpulist(cpus: impl IntoIterator<Item = u32>) -> String {
    let mut cpus: Vec<u32> = cpus.into_iter().collect();
    cpus.sort_unstable();
    cpus.dedup();
    let mut out = String::new();
    let mut i = 0;
    while i < cpus.len() {
        let start = cpus[i];
        let mut end = start;
        while i + 1 < cpus.len() && cpus[i + 1] == end + 1 {
            end += 1;
            i += 1;
        }
        if !out.is_empty() {
            out.push(',');
        }
        // Writing to a String cannot fail.
        let _ = if start == end {
            write!(out, "{start}")
        } else {
            write!(out, "{start}-{end}")
        };
        i += 1;
    }
    out
}

/// The set bits of a bitmask as NVML returns it (`cpu_affinity`, memory
/// affinity): word `i` bit `j` is CPU (or node) `i * bits_per_word + j`.
/// Bits above [`MAX_CPU`] are ignored.
pub fn bits_from_mask<W: Copy + Into<u64>>(words: &[W]) -> Vec<u32> {
    let bits_per_word = u64::BITS.min((std::mem::size_of::<W>() * 8) as u32);
    let mut out = Vec::new();
    for (i, word) in words.iter().enumerate() {
        let word: u64 = (*word).into();
        let Some(base) = u32::try_from(i)
            .ok()
            .and_then(|i| i.checked_mul(bits_per_word))
            .filter(|b| *b <= MAX_CPU)
        else {
            break;
        };
        for bit in 0..bits_per_word {
            if (word >> bit) & 1 == 1 && base + bit <= MAX_CPU {
                out.push(base + bit);
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------
// Host metadata

/// Facts about the host a recording was taken on. Metadata only: nothing in
/// discovery reads them back. The agent reads them from the running machine
/// (`gputopo_topology::host::host_facts`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HostFacts {
    pub hostname: Option<String>,
    pub kernel_version: Option<String>,
    pub os_version: Option<String>,
    pub cpu_count: Option<u32>,
    #[serde(rename = "memoryMiB")]
    pub memory_mib: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn cpulist_formats_runs_and_singles() {
        assert_eq!(format_cpulist((0..32).chain(64..96)), "0-31,64-95");
        assert_eq!(format_cpulist([64, 0]), "0,64");
        assert_eq!(format_cpulist([3, 1, 2, 2, 9]), "1-3,9");
        assert_eq!(format_cpulist([0, 1]), "0-1");
        assert_eq!(format_cpulist([]), "");
    }

    #[test]
    fn cpulist_parses_what_nvidia_smi_and_sysfs_print() {
        assert_eq!(parse_cpulist("0-2,8\n").unwrap(), vec![0, 1, 2, 8]);
        assert_eq!(
            parse_cpulist("0,2,4,6,8,10").unwrap(),
            vec![0, 2, 4, 6, 8, 10]
        );
        assert_eq!(parse_cpulist("").unwrap(), Vec::<u32>::new());
        assert_eq!(parse_cpulist("5,1-2").unwrap(), vec![1, 2, 5]);
    }

    #[test]
    fn cpulist_errors_say_what_is_wrong() {
        for (bad, why) in [
            ("3-1", "backwards"),
            ("0-", "not a CPU number"),
            ("a", "not a CPU number"),
            ("0,,1", "not a CPU number"),
            ("0-4294967295", "above the limit"),
            ("0-31:2", "not a CPU number"),
        ] {
            let e = parse_cpulist(bad).unwrap_err().to_string();
            assert!(
                e.contains(why) && e.contains(&format!("{bad:?}")),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn mask_bits_follow_word_order() {
        // CPUs 0-19 and 40-59 (DGX-1 socket 0) in one 64-bit word.
        let word: u64 = ((1u64 << 20) - 1) | (((1u64 << 20) - 1) << 40);
        assert_eq!(format_cpulist(bits_from_mask(&[word, 0])), "0-19,40-59");
        // CPUs 0-55 and 112-167 (HGX H100 socket 0) across three words.
        let words: [u64; 4] = [(1u64 << 56) - 1, 0xffff_0000_0000_0000, (1u64 << 40) - 1, 0];
        assert_eq!(format_cpulist(bits_from_mask(&words)), "0-55,112-167");
        // 32-bit words (32-bit Linux c_ulong): bit 0 of word 1 is CPU 32.
        assert_eq!(bits_from_mask(&[1u32, 1u32]), vec![0, 32]);
    }

    fn write(dir: &Path, rel: &str, text: &str) {
        let path = dir.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn real_sysfs_reads_a_tree_laid_out_like_sys() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        let gpu = "bus/pci/devices/0000:18:00.0";
        write(root, &format!("{gpu}/numa_node"), "1\n");
        write(root, &format!("{gpu}/local_cpulist"), "56-111,168-223\n");
        write(root, &format!("{gpu}/vendor"), "0x10de\n");
        write(root, &format!("{gpu}/class"), "0x030200\n");
        let vm_gpu = "bus/pci/devices/0000:2a:00.0";
        write(root, &format!("{vm_gpu}/numa_node"), "-1\n");
        write(root, &format!("{vm_gpu}/local_cpulist"), "\n");
        write(root, &format!("{vm_gpu}/vendor"), "0x10de\n");
        write(root, &format!("{vm_gpu}/class"), "0x030000\n");
        let nic = "bus/pci/devices/0000:19:00.0";
        write(root, &format!("{nic}/vendor"), "0x15b3\n");
        write(root, &format!("{nic}/class"), "0x020700\n");

        let sysfs = RealSysfs::new(root);
        assert_eq!(sysfs.numa_node("00000000:18:00.0"), Some(1));
        assert_eq!(
            sysfs.local_cpulist("00000000:18:00.0").as_deref(),
            Some("56-111,168-223")
        );
        assert_eq!(sysfs.numa_node("00000000:2A:00.0"), None, "-1 is unknown");
        assert_eq!(
            sysfs.local_cpulist("00000000:2a:00.0"),
            None,
            "empty is unknown"
        );
        assert_eq!(sysfs.numa_node("00000000:99:00.0"), None, "no such device");
        assert_eq!(sysfs.numa_node("not a bus id"), None);
        assert_eq!(
            sysfs.nvidia_gpus(),
            vec![
                "00000000:18:00.0".to_string(),
                "00000000:2a:00.0".to_string()
            ]
        );
    }

    #[test]
    fn recorded_sysfs_matches_any_bus_id_form() {
        let mut map = BTreeMap::new();
        map.insert(
            "0000:06:00.0".to_string(),
            SysfsDevice {
                numa_node: Some(0),
                local_cpulist: Some("0-19,40-59".into()),
                ..SysfsDevice::default()
            },
        );
        let sysfs = RecordedSysfs::new(&map);
        assert_eq!(sysfs.numa_node("00000000:06:00.0"), Some(0));
        assert_eq!(
            sysfs.local_cpulist("06:00.0").as_deref(),
            Some("0-19,40-59")
        );
        assert_eq!(sysfs.numa_node("00000000:07:00.0"), None);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn cpulist_round_trips(cpus in proptest::collection::btree_set(0u32..600, 0..200)) {
            let text = format_cpulist(cpus.iter().copied());
            let back = parse_cpulist(&text).unwrap();
            prop_assert_eq!(back, cpus.into_iter().collect::<Vec<_>>());
            // Canonical: formatting what was parsed gives the same text.
            prop_assert_eq!(format_cpulist(parse_cpulist(&text).unwrap()), text);
        }
    }
}
