//! Simulation inputs: the Alibaba openb CSVs (node list, pod list) read
//! directly, the project's cluster YAML (via [`crate::cluster`]) and the
//! workload YAML format of `gputopo simulate`.
//!
//! Every error names the file, the line and the column, and what is accepted,
//! so a bad row in a 10,000-line trace is found without a debugger.

use super::{Models, SimNode, SimPod, Workload};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// An input file that could not be used.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error("{path}: cannot read: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: line {line}: {source}")]
    Csv {
        path: PathBuf,
        line: u64,
        source: csv::Error,
    },
    #[error("{path}: the header lacks column {column:?} (found: {found}); accepted: {accepted}")]
    MissingColumn {
        path: PathBuf,
        column: &'static str,
        found: String,
        accepted: &'static str,
    },
    #[error("{path}: line {line}, column {column:?}: {value:?} is not valid; accepted: {accepted}")]
    Field {
        path: PathBuf,
        line: u64,
        column: String,
        value: String,
        accepted: &'static str,
    },
    #[error("{path}: {at}: {message}")]
    Yaml {
        path: PathBuf,
        at: String,
        message: String,
    },
    #[error("{path}: more than 64 distinct GPU models ({model:?} is the 65th)")]
    TooManyModels { path: PathBuf, model: String },
    #[error("{path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

/// The most pods a workload file may expand to (`count`s and gang
/// `members` together): over a hundred times the largest openb pod list,
/// so that a slip in a count is an error rather than memory run out.
pub const MAX_WORKLOAD_PODS: u64 = 1_000_000;

const NODE_COLUMNS: &str = "sn,cpu_milli,memory_mib,gpu,model (openb node list)";
const POD_COLUMNS: &str = "name,cpu_milli,memory_mib,num_gpu,gpu_milli and optionally gpu_spec, creation_time, deletion_time (openb pod list)";

/// Whether a path names a CSV file (by extension).
pub fn is_csv(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case("csv"))
}

struct Table {
    path: PathBuf,
    reader: csv::Reader<std::fs::File>,
    header: Vec<String>,
}

impl Table {
    fn open(path: &Path) -> Result<Table, InputError> {
        let file = std::fs::File::open(path).map_err(|source| InputError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let mut reader = csv::ReaderBuilder::new().flexible(false).from_reader(file);
        let header = reader
            .headers()
            .map_err(|source| InputError::Csv {
                path: path.to_path_buf(),
                line: 1,
                source,
            })?
            .iter()
            .map(|h| h.trim().to_string())
            .collect();
        Ok(Table {
            path: path.to_path_buf(),
            reader,
            header,
        })
    }

    fn column(&self, name: &'static str, accepted: &'static str) -> Result<usize, InputError> {
        self.header
            .iter()
            .position(|h| h == name)
            .ok_or_else(|| InputError::MissingColumn {
                path: self.path.clone(),
                column: name,
                found: self.header.join(","),
                accepted,
            })
    }

    fn optional(&self, name: &str) -> Option<usize> {
        self.header.iter().position(|h| h == name)
    }
}

/// One row being read, for errors that name the line and column.
struct Row<'a> {
    path: &'a Path,
    header: &'a [String],
    record: &'a csv::StringRecord,
    line: u64,
}

impl Row<'_> {
    fn text(&self, column: usize) -> &str {
        self.record.get(column).unwrap_or("").trim()
    }

    fn error(&self, column: usize, accepted: &'static str) -> InputError {
        InputError::Field {
            path: self.path.to_path_buf(),
            line: self.line,
            column: self.header.get(column).cloned().unwrap_or_default(),
            value: self.text(column).to_string(),
            accepted,
        }
    }

    fn uint(&self, column: usize, accepted: &'static str) -> Result<u64, InputError> {
        self.text(column)
            .parse::<u64>()
            .map_err(|_| self.error(column, accepted))
    }

    fn optional_time(&self, column: Option<usize>) -> Result<Option<f64>, InputError> {
        let Some(column) = column else {
            return Ok(None);
        };
        let text = self.text(column);
        if text.is_empty() {
            return Ok(None);
        }
        text.parse::<f64>()
            .ok()
            .filter(|t| t.is_finite() && *t >= 0.0)
            .map(Some)
            .ok_or_else(|| {
                self.error(
                    column,
                    "seconds from the start of the trace, >= 0, or empty",
                )
            })
    }
}

fn rows(
    table: &mut Table,
    mut each: impl FnMut(&Row<'_>) -> Result<(), InputError>,
) -> Result<(), InputError> {
    let mut record = csv::StringRecord::new();
    loop {
        let more = table
            .reader
            .read_record(&mut record)
            .map_err(|source| InputError::Csv {
                path: table.path.clone(),
                line: source.position().map_or(0, |p| p.line()),
                source,
            })?;
        if !more {
            return Ok(());
        }
        let line = record.position().map_or(0, |p| p.line());
        each(&Row {
            path: &table.path,
            header: &table.header,
            record: &record,
            line,
        })?;
    }
}

/// Reads an openb node list (`sn,cpu_milli,memory_mib,gpu,model`). CPU-only
/// rows (gpu 0, empty model) are kept: they take CPU-only pods.
pub fn read_node_csv(path: &Path, models: &mut Models) -> Result<Vec<SimNode>, InputError> {
    let mut table = Table::open(path)?;
    let sn = table.column("sn", NODE_COLUMNS)?;
    let cpu = table.column("cpu_milli", NODE_COLUMNS)?;
    let mem = table.column("memory_mib", NODE_COLUMNS)?;
    let gpu = table.column("gpu", NODE_COLUMNS)?;
    let model = table.column("model", NODE_COLUMNS)?;
    let mut nodes = Vec::new();
    rows(&mut table, |row| {
        let gpus = row.uint(gpu, "a GPU count 0..=32")?;
        if gpus > 32 {
            return Err(row.error(gpu, "a GPU count 0..=32"));
        }
        let name = row.text(sn);
        if name.is_empty() {
            return Err(row.error(sn, "a non-empty node name"));
        }
        let model_name = row.text(model);
        let model_id = if model_name.is_empty() {
            None
        } else {
            Some(
                models
                    .id(model_name)
                    .ok_or_else(|| InputError::TooManyModels {
                        path: path.to_path_buf(),
                        model: model_name.to_string(),
                    })?,
            )
        };
        nodes.push(SimNode {
            name: name.to_string(),
            cpu_milli: row.uint(cpu, "millicores, a non-negative integer")?,
            memory_mib: row.uint(mem, "MiB, a non-negative integer")?,
            gpus: gpus as u32,
            model: model_id,
            model_name: model_name.to_string(),
        });
        Ok(())
    })?;
    Ok(nodes)
}

/// Reads an openb pod list. `gpu_milli < 1000` with `num_gpu == 1` is a
/// share of one GPU; `num_gpu > 1` takes whole GPUs; `gpu_spec` lists the
/// allowed models separated by `|` (empty: any). Times are kept but the FGD
/// protocol ignores them (pods never end).
pub fn read_pod_csv(path: &Path, models: &mut Models) -> Result<Vec<SimPod>, InputError> {
    let mut table = Table::open(path)?;
    let name = table.column("name", POD_COLUMNS)?;
    let cpu = table.column("cpu_milli", POD_COLUMNS)?;
    let mem = table.column("memory_mib", POD_COLUMNS)?;
    let num_gpu = table.column("num_gpu", POD_COLUMNS)?;
    let gpu_milli = table.column("gpu_milli", POD_COLUMNS)?;
    let spec = table.optional("gpu_spec");
    let created = table.optional("creation_time");
    let deleted = table.optional("deletion_time");
    let mut pods = Vec::new();
    rows(&mut table, |row| {
        let n = row.uint(num_gpu, "a GPU count 0..=32")?;
        if n > 32 {
            return Err(row.error(num_gpu, "a GPU count 0..=32"));
        }
        let milli = if n == 0 {
            0
        } else {
            let m = row.uint(gpu_milli, "milli-GPU per GPU, 1..=1000")?;
            if !(1..=1000).contains(&m) || (n > 1 && m != 1000) {
                return Err(row.error(
                    gpu_milli,
                    "milli-GPU per GPU, 1..=1000 (1000 when num_gpu > 1)",
                ));
            }
            m as u32
        };
        let mut allowed = 0u64;
        if let Some(spec) = spec {
            for model in row.text(spec).split('|').map(str::trim) {
                if model.is_empty() {
                    continue;
                }
                let id = models.id(model).ok_or_else(|| InputError::TooManyModels {
                    path: path.to_path_buf(),
                    model: model.to_string(),
                })?;
                allowed |= 1 << id;
            }
        }
        let arrival = row.optional_time(created)?;
        let end = row.optional_time(deleted)?;
        pods.push(SimPod {
            name: row.text(name).to_string(),
            cpu_milli: row.uint(cpu, "millicores, a non-negative integer")?,
            memory_mib: row.uint(mem, "MiB, a non-negative integer")?,
            num_gpu: n as u32,
            gpu_milli: milli,
            models: allowed,
            arrival: arrival.unwrap_or(0.0),
            duration: match (arrival, end) {
                (Some(a), Some(e)) if e > a => Some(e - a),
                _ => None,
            },
            gang: None,
        });
        Ok(())
    })?;
    Ok(pods)
}

/// The workload YAML format (see the "Simulation" section of docs/cli.md).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct WorkloadFile {
    #[serde(default)]
    pods: Vec<PodEntry>,
    #[serde(default)]
    gangs: Vec<GangEntry>,
}

#[derive(Deserialize, Clone)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct PodEntry {
    name: String,
    #[serde(default)]
    count: Option<u32>,
    #[serde(default)]
    gpus: u32,
    /// A share of one GPU: `0.25`, or milli as `250m`.
    #[serde(default)]
    share: Option<String>,
    #[serde(default)]
    cpu_milli: u64,
    #[serde(default, rename = "memoryMiB")]
    memory_mib: u64,
    #[serde(default)]
    models: Vec<String>,
    /// Seconds from the start; pods arrive in this order (file order on ties).
    #[serde(default)]
    arrival: f64,
    /// Seconds the pod runs once placed; absent: it never ends.
    #[serde(default)]
    duration: Option<f64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct GangEntry {
    name: String,
    /// Members, each like a pod entry (count expands).
    members: u32,
    #[serde(flatten)]
    pod: GangPod,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct GangPod {
    #[serde(default)]
    gpus: u32,
    #[serde(default)]
    cpu_milli: u64,
    #[serde(default, rename = "memoryMiB")]
    memory_mib: u64,
    #[serde(default)]
    models: Vec<String>,
    #[serde(default)]
    arrival: f64,
    #[serde(default)]
    duration: Option<f64>,
}

fn parse_share(text: &str) -> Option<u32> {
    let milli = if let Some(m) = text.strip_suffix('m') {
        m.trim().parse::<u32>().ok()?
    } else {
        let f = text.trim().parse::<f64>().ok()?;
        (f * 1000.0).round() as u32
    };
    (1..1000).contains(&milli).then_some(milli)
}

/// At most [`MAX_WORKLOAD_PODS`] pods once counts and gangs are expanded.
fn check_size(file: &WorkloadFile, path: &Path) -> Result<(), InputError> {
    let copies = file
        .pods
        .iter()
        .map(|p| u64::from(p.count.unwrap_or(1)))
        .chain(file.gangs.iter().map(|g| u64::from(g.members)));
    let mut total = 0u64;
    for n in copies {
        total += n;
        if total > MAX_WORKLOAD_PODS {
            return Err(InputError::Invalid {
                path: path.to_path_buf(),
                message: format!(
                    "pods' counts and gangs' members add up to more than {MAX_WORKLOAD_PODS} pods; \
                     accepted: at most {MAX_WORKLOAD_PODS} pods in all"
                ),
            });
        }
    }
    Ok(())
}

/// A pod entry's GPUs and thousandths of each: a share of one GPU, or whole
/// GPUs.
fn gpu_demand(entry: &PodEntry, at: &str, path: &Path) -> Result<(u32, u32), InputError> {
    let invalid = |message: String| InputError::Invalid {
        path: path.to_path_buf(),
        message,
    };
    Ok(match (&entry.share, entry.gpus) {
        (Some(s), 0) => (
            1,
            parse_share(s).ok_or_else(|| {
                invalid(format!(
                    "{at}.share: {s:?} is not valid; accepted: a fraction in (0, 1) such as 0.25, or milli such as 250m"
                ))
            })?,
        ),
        (Some(_), _) => {
            return Err(invalid(format!(
                "{at}: share and gpus are both set; a pod shares one GPU or takes whole GPUs"
            )));
        }
        (None, g) if g > 32 => return Err(invalid(format!("{at}.gpus: {g}; accepted: 0..=32"))),
        (None, 0) => (0, 0),
        (None, g) => (g, 1000),
    })
}

/// Reads a workload YAML file.
pub fn read_workload_yaml(path: &Path, models: &mut Models) -> Result<Workload, InputError> {
    let text = std::fs::read_to_string(path).map_err(|source| InputError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let file: WorkloadFile = serde_path_to_error::deserialize(serde_yaml::Deserializer::from_str(
        &text,
    ))
    .map_err(|e| InputError::Yaml {
        path: path.to_path_buf(),
        at: e.path().to_string(),
        message: e.inner().to_string(),
    })?;
    let invalid = |message: String| InputError::Invalid {
        path: path.to_path_buf(),
        message,
    };
    let mut model_mask = |list: &[String]| -> Result<u64, InputError> {
        let mut mask = 0u64;
        for m in list {
            let id = models.id(m).ok_or_else(|| InputError::TooManyModels {
                path: path.to_path_buf(),
                model: m.clone(),
            })?;
            mask |= 1 << id;
        }
        Ok(mask)
    };
    let check_time = |what: &str, t: f64| {
        if t.is_finite() && t >= 0.0 {
            Ok(())
        } else {
            Err(invalid(format!(
                "{what}: {t} is not valid; accepted: seconds >= 0"
            )))
        }
    };
    check_size(&file, path)?;
    let mut pods = Vec::new();
    for (i, entry) in file.pods.iter().enumerate() {
        let at = format!("pods[{i}] ({})", entry.name);
        check_time(&format!("{at}.arrival"), entry.arrival)?;
        if let Some(d) = entry.duration {
            check_time(&format!("{at}.duration"), d)?;
        }
        let (num_gpu, gpu_milli) = gpu_demand(entry, &at, path)?;
        let mask = model_mask(&entry.models)?;
        let count = entry.count.unwrap_or(1);
        for k in 1..=count {
            pods.push(SimPod {
                name: expand(&entry.name, k, count),
                cpu_milli: entry.cpu_milli,
                memory_mib: entry.memory_mib,
                num_gpu,
                gpu_milli,
                models: mask,
                arrival: entry.arrival,
                duration: entry.duration,
                gang: None,
            });
        }
    }
    let mut gangs = Vec::new();
    for (g, gang) in file.gangs.iter().enumerate() {
        let at = format!("gangs[{g}] ({})", gang.name);
        check_time(&format!("{at}.arrival"), gang.pod.arrival)?;
        if gang.members == 0 || gang.pod.gpus == 0 || gang.pod.gpus > 32 {
            return Err(invalid(format!(
                "{at}: members {} gpus {}; accepted: members >= 1, gpus 1..=32 per member",
                gang.members, gang.pod.gpus
            )));
        }
        let mask = model_mask(&gang.pod.models)?;
        let id = gangs.len() as u32;
        gangs.push(gang.name.clone());
        for k in 0..gang.members {
            pods.push(SimPod {
                name: format!("{}-{k}", gang.name),
                cpu_milli: gang.pod.cpu_milli,
                memory_mib: gang.pod.memory_mib,
                num_gpu: gang.pod.gpus,
                gpu_milli: 1000,
                models: mask,
                arrival: gang.pod.arrival,
                duration: gang.pod.duration,
                gang: Some(id),
            });
        }
    }
    let mut names = BTreeMap::new();
    for p in &pods {
        if names.insert(p.name.clone(), ()).is_some() {
            return Err(invalid(format!("pod name {:?} appears twice", p.name)));
        }
    }
    Ok(Workload { pods, gangs })
}

/// `train-{i}` with k; `{i:02}` pads. A name without `{i}` gets `-k` when count > 1.
fn expand(name: &str, k: u32, count: u32) -> String {
    if name.contains("{i:02}") {
        name.replace("{i:02}", &format!("{k:02}"))
    } else if name.contains("{i}") {
        name.replace("{i}", &k.to_string())
    } else if count > 1 {
        format!("{name}-{k}")
    } else {
        name.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by fuzzing (scripts/fuzz): a count of 2^32 - 1 expanded pods
    /// until memory ran out.
    #[test]
    fn counts_are_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let read = |text: &str| {
            let path = dir.path().join("workload.yaml");
            std::fs::write(&path, text).unwrap();
            read_workload_yaml(&path, &mut Models::default()).map(|w| w.pods.len())
        };
        for text in [
            "pods: [{name: p, count: 4294967295}]\n",
            "gangs: [{name: g, members: 4294967295, gpus: 1}]\n",
            "pods: [{name: p, count: 999999}]\ngangs: [{name: g, members: 2, gpus: 1}]\n",
        ] {
            let e = read(text).unwrap_err().to_string();
            assert!(e.contains("at most 1000000 pods"), "{text}: {e}");
        }
        assert_eq!(
            read("pods: [{name: p, count: 999999}]\ngangs: [{name: g, members: 1, gpus: 1}]\n")
                .unwrap(),
            1_000_000
        );
    }
}
