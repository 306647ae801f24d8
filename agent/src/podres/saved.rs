//! A saved answer of the kubelet (JSON), for offline runs and tests: read
//! again every reading, so replacing the file changes what the agent sees.

use super::{KubeletAnswer, PodResourcesError, PodResourcesSource, Reading};
use std::path::{Path, PathBuf};

#[derive(Debug, Clone)]
pub struct SavedAnswer {
    pub path: PathBuf,
}

impl PodResourcesSource for SavedAnswer {
    fn read(&self) -> Reading<'_> {
        let path = self.path.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || load(&path))
                .await
                .map_err(|e| PodResourcesError::ReadSaved {
                    file: self.path.display().to_string(),
                    source: std::io::Error::other(e),
                })?
        })
    }
}

/// Reads and checks a saved answer; errors name the file and the field path.
pub fn load(path: &Path) -> Result<KubeletAnswer, PodResourcesError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| PodResourcesError::ReadSaved {
        file: file.clone(),
        source,
    })?;
    parse(&text, &file)
}

/// Parses a saved answer; `file` names it in errors.
pub fn parse(text: &str, file: &str) -> Result<KubeletAnswer, PodResourcesError> {
    let mut de = serde_json::Deserializer::from_str(text);
    let answer: KubeletAnswer =
        serde_path_to_error::deserialize(&mut de).map_err(|e| PodResourcesError::ParseSaved {
            file: file.to_string(),
            path: e.path().to_string(),
            message: e.into_inner().to_string(),
        })?;
    answer.check(file)?;
    Ok(answer)
}
