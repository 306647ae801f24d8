//! NodeResourcesBalancedAllocation's resources, as its
//! KubeSchedulerConfiguration args list them: whose use the balance is
//! measured over.

use super::ConfigError;

/// The most resources the balance compares (kept on the stack per node).
pub const MAX_RESOURCES: usize = 8;

/// The resources the balanced-allocation part compares (default cpu and
/// memory, as upstream). An extended resource counts only for pods that
/// request it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BalancedResources {
    names: Vec<String>,
}

impl Default for BalancedResources {
    fn default() -> BalancedResources {
        BalancedResources {
            names: vec!["cpu".into(), "memory".into()],
        }
    }
}

impl BalancedResources {
    /// Resource names, each once (upstream's validation); an empty list
    /// turns the part off, as it would score every node alike.
    pub fn new(names: Vec<String>) -> Result<BalancedResources, ConfigError> {
        if names.len() > MAX_RESOURCES {
            return Err(ConfigError::BalancedResources {
                detail: format!(
                    "{} resources; accepted: at most {MAX_RESOURCES}",
                    names.len()
                ),
            });
        }
        for (i, name) in names.iter().enumerate() {
            if name.is_empty() || names[..i].contains(name) {
                return Err(ConfigError::BalancedResources {
                    detail: format!(
                        "resources[{i}].name {name:?} is empty or repeated; accepted: each resource once"
                    ),
                });
            }
        }
        Ok(BalancedResources { names })
    }

    pub fn names(&self) -> &[String] {
        &self.names
    }
}
