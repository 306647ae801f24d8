//! The configuration file's JSON Schema, generated from the types that
//! parse it (as the CRD is from `GpuTopology`), so that the Helm chart's
//! `scheduler.config` refuses at install what the scheduler would refuse at
//! start. Checks across fields (`backoff.initial` at most `max`, `preset`
//! or `keys`) stay the parser's own.

use super::*;
use schemars::generate::SchemaSettings;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use std::borrow::Cow;

/// humantime's grammar, as far as a pattern can follow it: numbers (a
/// fraction allowed) each with a unit, spaces between allowed.
const DURATION_PATTERN: &str = r"^\s*([0-9]+(\.[0-9]+)?\s*(nanos|nsec|ns|usec|us|µs|millis|msec|ms|seconds|second|secs|sec|s|minutes|minute|mins|min|m|hours|hour|hrs|hr|h|days|day|d|weeks|week|wks|wk|w|months|month|M|years|year|yrs|yr|y)\s*)+$";

/// What `networkTiers.preset` accepts: each preset (`default` is
/// `gputopo`), optionally with GFD's clique as the innermost tier, or the
/// clique alone.
fn presets() -> Vec<String> {
    let bases = ["gputopo", "default", "topograph", "aws"];
    let mut all: Vec<String> = bases.iter().map(|b| b.to_string()).collect();
    all.extend(bases.iter().map(|b| format!("{b}+gpu-clique")));
    all.push("gpu-clique".into());
    all
}

const POLICIES: [&str; 4] = ["none", "best-effort", "restricted", "single-numa-node"];
const GENERATIONS: [&str; 3] = ["off", "newest", "oldest"];

impl JsonSchema for PresetFile {
    fn schema_name() -> Cow<'static, str> {
        "NetworkTierPreset".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "A preset: gputopo (gputopo.dev/spine, gputopo.dev/leaf), topograph, aws, each optionally +gpu-clique; or gpu-clique alone.",
            "enum": presets(),
        })
    }
}

impl JsonSchema for PolicyFile {
    fn schema_name() -> Cow<'static, str> {
        "TopologyManagerPolicy".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({ "enum": POLICIES })
    }
}

impl JsonSchema for GenerationFile {
    fn schema_name() -> Cow<'static, str> {
        "GenerationPreference".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({ "enum": GENERATIONS })
    }
}

impl JsonSchema for MemoryTargetFile {
    fn schema_name() -> Cow<'static, str> {
        "MemoryTarget".into()
    }
    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        RawTarget::json_schema(generator)
    }
}

impl JsonSchema for DurationFile {
    fn schema_name() -> Cow<'static, str> {
        "Duration".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "A duration with its unit: 500ms, 30s, 10m, 1h30m, 2 days.",
            "type": "string",
            "pattern": DURATION_PATTERN,
        })
    }
}

impl Settings {
    /// The configuration file's JSON Schema (draft-07, no references, so
    /// that it can sit inside another schema): unknown keys refused
    /// (`additionalProperties: false`), enumerations as `enum`, durations
    /// with their pattern.
    pub fn file_schema() -> serde_json::Value {
        let generator = SchemaSettings::draft07()
            .with(|s| {
                s.inline_subschemas = true;
                s.meta_schema = None;
            })
            .into_generator();
        let mut schema = generator.into_root_schema_for::<FileConfig>().to_value();
        if let Some(root) = schema.as_object_mut() {
            root.remove("title");
        }
        tidy(&mut schema);
        schema
    }
}

/// Every subschema: without `null` (an `Option` field takes `null` in YAML
/// as "not set"; a schema saying so only adds noise, and Helm drops null
/// values before it checks them), and 32-bit integers with the bounds the
/// parser has (a `format` alone is checked by no validator Helm runs).
fn tidy(value: &mut serde_json::Value) {
    use serde_json::Value;
    let Some(map) = value.as_object_mut() else {
        if let Some(items) = value.as_array_mut() {
            items.iter_mut().for_each(tidy);
        }
        return;
    };
    let bounds = match map.get("format").and_then(Value::as_str) {
        Some("uint32") => Some((0, i64::from(u32::MAX))),
        Some("int32") => Some((i64::from(i32::MIN), i64::from(i32::MAX))),
        _ => None,
    };
    if let Some((min, max)) = bounds {
        map.entry("minimum").or_insert(min.into());
        map.entry("maximum").or_insert(max.into());
    }
    if let Some(Value::Array(types)) = map.get_mut("type") {
        types.retain(|t| t != "null");
        if let [only] = types.as_slice() {
            let only = only.clone();
            map.insert("type".into(), only);
        }
    }
    if let Some(Value::Array(alternatives)) = map.get("anyOf") {
        let kept: Vec<Value> = alternatives
            .iter()
            .filter(|a| a.get("type").is_none_or(|t| t != "null"))
            .cloned()
            .collect();
        if let [Value::Object(only)] = kept.as_slice() {
            map.remove("anyOf");
            for (k, v) in only {
                map.entry(k.clone()).or_insert_with(|| v.clone());
            }
        }
    }
    if let Some(Value::Array(values)) = map.get_mut("enum") {
        values.retain(|v| !v.is_null());
    }
    map.values_mut().for_each(tidy);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parses(yaml: &str) -> bool {
        Settings::from_yaml(yaml, Path::new("config.yaml")).is_ok()
    }

    #[test]
    fn every_enumerated_value_is_one_the_parser_takes() {
        for preset in presets() {
            assert!(
                parses(&format!("networkTiers: {{preset: {preset}}}")),
                "{preset}"
            );
        }
        assert!(!parses("networkTiers: {preset: gpu-clique+gpu-clique}"));
        for policy in POLICIES {
            assert!(
                parses(&format!("defaultTopologyManagerPolicy: {policy}")),
                "{policy}"
            );
        }
        for generation in GENERATIONS {
            assert!(
                parses(&format!("gpuGeneration: {generation}")),
                "{generation}"
            );
        }
    }

    #[test]
    fn the_schema_refuses_unknown_keys_and_says_no_null() {
        let schema = Settings::file_schema();
        let text = schema.to_string();
        assert!(!text.contains("null"), "{text}");
        assert!(!text.contains("$ref"), "{text}");
        assert_eq!(schema["additionalProperties"], false);
        let weights = &schema["properties"]["weights"];
        assert_eq!(weights["additionalProperties"], false);
        assert_eq!(weights["type"], "object");
        let profile = &schema["properties"]["profiles"]["items"];
        assert_eq!(profile["additionalProperties"], false);
        assert_eq!(profile["required"], serde_json::json!(["schedulerName"]));
        assert_eq!(
            schema["properties"]["backoff"]["properties"]["max"]["pattern"],
            DURATION_PATTERN
        );
    }
}
