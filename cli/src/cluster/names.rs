//! A node or pod entry's name template (`gpu-{i}`, `gpu-{i:03}`) in, the
//! i-th copy's name out, or what is wrong with the template.

use super::MAX_PADDING;

/// A name template that cannot number its copies.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameTemplateError {
    #[error("{template:?} has count > 1 but no {{i}} to number the copies")]
    NoPlaceholder { template: String },
    #[error("{template:?}: unclosed {{i")]
    Unclosed { template: String },
    #[error("{template:?}: accepted {{i}} or {{i:0N}} with N up to {MAX_PADDING}")]
    Padding { template: String },
    #[error("{template:?}: accepted {{i}} or {{i:0N}}")]
    Form { template: String },
}

/// `name-{i}` / `name-{i:03}` for the i-th of `count`; a name without `{i}`
/// is allowed only once.
pub(crate) fn expand(
    template: &str,
    i: u32,
    count: Option<u32>,
) -> Result<String, NameTemplateError> {
    let owned = || template.to_string();
    let Some(start) = template.find("{i") else {
        return if count.unwrap_or(1) > 1 {
            Err(NameTemplateError::NoPlaceholder { template: owned() })
        } else {
            Ok(template.to_string())
        };
    };
    let end = template[start..]
        .find('}')
        .map(|e| start + e)
        .ok_or_else(|| NameTemplateError::Unclosed { template: owned() })?;
    let spec = &template[start + 2..end];
    let number = match spec.strip_prefix(":0") {
        None if spec.is_empty() => i.to_string(),
        Some(width) => {
            let width: usize = width
                .parse()
                .ok()
                .filter(|w| *w <= MAX_PADDING)
                .ok_or_else(|| NameTemplateError::Padding { template: owned() })?;
            format!("{i:0width$}")
        }
        None => return Err(NameTemplateError::Form { template: owned() }),
    };
    Ok(format!(
        "{}{number}{}",
        &template[..start],
        &template[end + 1..]
    ))
}
