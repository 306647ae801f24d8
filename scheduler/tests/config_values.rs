//! The configuration file has one source of truth, its Rust types:
//!
//! * the chart's `scheduler.config` in `helm/gputopo/values.schema.json` is
//!   exactly the schema those types generate (less `schedulerNames`, which
//!   the chart sets from `scheduler.schedulerName`); a changed field fails
//!   here until the file is regenerated with
//!   `GPUTOPO_BLESS=1 cargo test -p gputopo-scheduler --test config_values`;
//! * every key of the file can be set through the chart's values, and what
//!   the chart renders is read by the scheduler's own parser as the same
//!   settings (the example in docs/scheduler.md, which must set every key
//!   the schema has);
//! * the chart refuses unknown keys and values the parser refuses, naming
//!   them, and durations as the parser reads them;
//! * `scheduler.existingConfigMap` mounts an operator's own file instead,
//!   and values that cannot work together fail the render naming both.
//!
//! The chart tests need helm (`scripts/control-plane-binaries`).

use gputopo_scheduler::Settings;
use gputopo_testenv::binaries;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

const SCHEMA: &str = "helm/gputopo/values.schema.json";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The chart's `scheduler.config`: the file's schema less `schedulerNames`.
fn chart_schema() -> Value {
    let mut schema = Settings::file_schema();
    let object = schema.as_object_mut().expect("an object schema");
    object["properties"]
        .as_object_mut()
        .expect("properties")
        .remove("schedulerNames")
        .expect("the file has schedulerNames");
    object.insert(
        "description".into(),
        json!("The scheduler's configuration file (docs/scheduler.md), generated from its Rust types (scheduler/tests/config_values.rs); schedulerNames comes from scheduler.schedulerName. Empty: the scheduler's defaults."),
    );
    schema
}

/// `text` (values.schema.json, as Python's and serde_json's pretty printers
/// write it) with the value of `scheduler.config` replaced by `schema`.
fn spliced(text: &str, schema: &Value) -> String {
    // Two spaces a level: properties.scheduler.properties.config is at 8.
    const KEY: &str = "\n        \"config\": ";
    const END: &str = "\n        }";
    assert_eq!(
        text.matches(KEY).count(),
        1,
        "{SCHEMA}: one key \"config\" at the depth of scheduler.config"
    );
    let start = text.find(KEY).expect("the key") + KEY.len();
    let end = start + text[start..].find(END).expect("the end of its value") + END.len();
    let body = serde_json::to_string_pretty(schema)
        .expect("a schema serializes")
        .replace('\n', "\n        ");
    let out = format!("{}{body}{}", &text[..start], &text[end..]);
    let parsed: Value = serde_json::from_str(&out).expect("still JSON");
    assert_eq!(
        &parsed["properties"]["scheduler"]["properties"]["config"], schema,
        "{SCHEMA}: the splice missed scheduler.config"
    );
    out
}

#[test]
fn the_charts_config_schema_is_the_one_the_types_generate() {
    let path = root().join(SCHEMA);
    let committed = std::fs::read_to_string(&path).expect(SCHEMA);
    let generated = spliced(&committed, &chart_schema());
    if std::env::var_os("GPUTOPO_BLESS").is_some() && committed != generated {
        std::fs::write(&path, &generated).expect(SCHEMA);
        return;
    }
    assert!(
        committed == generated,
        "{SCHEMA}: scheduler.config has drifted from the configuration file's Rust types (scheduler/src/config/); regenerate it with\n  GPUTOPO_BLESS=1 cargo test -p gputopo-scheduler --test config_values"
    );
}

/// The example in docs/scheduler.md: the first YAML block that starts with
/// `schedulerNames:`.
fn documented_example() -> String {
    let doc = std::fs::read_to_string(root().join("docs/scheduler.md")).expect("docs/scheduler.md");
    doc.split("```yaml not-a-manifest\n")
        .skip(1)
        .filter_map(|block| block.split_once("\n```").map(|(b, _)| b))
        .find(|b| b.starts_with("schedulerNames:"))
        .expect("docs/scheduler.md: the configuration file's example")
        .to_owned()
}

fn settings(yaml: &str, name: &str) -> Settings {
    Settings::from_yaml(yaml, Path::new(name)).unwrap_or_else(|e| panic!("{e}\n{yaml}"))
}

/// Why helm gave no output: its stderr.
#[derive(Debug)]
struct Refused(String);

/// `helm template` of the chart with `values` (a values file's text).
fn render(values: &str) -> Result<Vec<Value>, Refused> {
    let bin = binaries::locate(binaries::HELM, "helm").unwrap_or_else(|e| panic!("{e:#}"));
    let home = tempfile::tempdir().expect("a temp dir for helm");
    let file = home.path().join("values.yaml");
    std::fs::write(&file, values).expect("values written");
    let out = Command::new(bin)
        .args(["template", "gputopo", "--namespace", "gputopo-system"])
        .args(["--kube-version", gputopo_testenv::kubernetes_version()])
        .arg(root().join("helm/gputopo"))
        .arg("--values")
        .arg(&file)
        .env("HELM_CACHE_HOME", home.path().join("cache"))
        .env("HELM_CONFIG_HOME", home.path().join("config"))
        .env("HELM_DATA_HOME", home.path().join("data"))
        .output()
        .expect("helm runs");
    if !out.status.success() {
        return Err(Refused(String::from_utf8_lossy(&out.stderr).into_owned()));
    }
    let text = String::from_utf8(out.stdout).expect("UTF-8");
    Ok(serde_yaml::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).expect("YAML"))
        .filter(|d: &Value| !d.is_null())
        .collect())
}

fn render_ok(values: &str) -> Vec<Value> {
    render(values).unwrap_or_else(|Refused(e)| panic!("{values}: {e}"))
}

fn refused(values: &str) -> String {
    match render(values) {
        Err(Refused(stderr)) => stderr,
        Ok(_) => panic!("helm rendered, expected a refusal:\n{values}"),
    }
}

fn object<'a>(docs: &'a [Value], kind: &str, name: &str) -> Option<&'a Value> {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
}

/// The configuration file the chart rendered.
fn rendered_file(docs: &[Value]) -> String {
    let map = object(docs, "ConfigMap", "gputopo-scheduler-config").expect("the ConfigMap");
    map["data"]["config.yaml"]
        .as_str()
        .expect("config.yaml")
        .to_owned()
}

#[test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
fn every_key_set_through_values_reaches_the_scheduler_as_set() {
    let example = documented_example();
    let example_value: Value = serde_yaml::from_str(&example).expect("the example is YAML");
    let keys = |v: &Value| -> BTreeSet<String> {
        v.as_object().expect("a mapping").keys().cloned().collect()
    };
    let schema_keys = keys(&Settings::file_schema()["properties"]);
    assert_eq!(
        keys(&example_value),
        schema_keys,
        "docs/scheduler.md's example must set every key of the configuration file"
    );
    let mut config = example_value.clone();
    config
        .as_object_mut()
        .expect("a mapping")
        .remove("schedulerNames");
    // As JSON (which is YAML): every string quoted, since Helm reads YAML 1.1,
    // where a bare `off` (gpuGeneration) is false.
    let values = json!({"scheduler": {"config": config}}).to_string();
    let file = rendered_file(&render_ok(&values));
    assert_eq!(
        settings(&file, "rendered config.yaml"),
        settings(&example, "docs/scheduler.md"),
        "the chart rendered:\n{file}"
    );
    // Nothing set: the scheduler's own defaults, not a copy of them.
    let file = rendered_file(&render_ok(""));
    assert_eq!(file.trim(), "schedulerNames:\n- gputopo-scheduler");
    assert_eq!(settings(&file, "default config.yaml"), Settings::default());
}

#[test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
fn the_chart_refuses_what_the_scheduler_refuses_naming_it() {
    let cases = [
        ("preemtion: {enabled: false}", "'preemtion' not allowed"),
        (
            "gangs: {reservations: {ttl: 15m, max: 2}}",
            "'max' not allowed",
        ),
        // A profile overrides scoring only; the tiers are the cluster's.
        (
            "profiles: [{schedulerName: gputopo-cost, networkTiers: {preset: aws}}]",
            "'networkTiers' not allowed",
        ),
        ("profiles: [{weights: {cost: 60}}]", "schedulerName"),
        ("gpuGeneration: latest", "/scheduler/config/gpuGeneration"),
        (
            "networkTiers: {preset: gputopo+clique}",
            "/scheduler/config/networkTiers/preset",
        ),
        (
            "memoryTarget: {low: 0.7, high: 1}",
            "/scheduler/config/memoryTarget/high",
        ),
        (
            "topologySpreadDefaults: {defaultingType: Lists}",
            "/scheduler/config/topologySpreadDefaults/defaultingType",
        ),
        ("schedulerNames: [a]", "'schedulerNames' not allowed"),
    ];
    for (config, expected) in cases {
        let values = format!("scheduler:\n  config:\n    {config}\n");
        let stderr = refused(&values);
        assert!(stderr.contains(expected), "{values}: {stderr}");
        if !config.starts_with("schedulerNames") {
            assert!(
                Settings::from_yaml(config, Path::new("config.yaml")).is_err(),
                "the scheduler takes what the chart refuses: {config}"
            );
        }
    }
    // Durations: the chart takes what the parser takes.
    for duration in [
        "90s", "1h30m", "1h 30m", "500ms", "2 days", "1.5h", "90", "1x", "-1s", "s",
    ] {
        let config = format!("preemption: {{checkpointMaxAge: \"{duration}\"}}");
        let parser = Settings::from_yaml(&config, Path::new("config.yaml")).is_ok();
        let chart = render(&format!("scheduler:\n  config:\n    {config}\n")).is_ok();
        assert_eq!(
            chart, parser,
            "{duration:?}: the chart and the scheduler disagree"
        );
    }
}

#[test]
#[ignore = "needs the control-plane binaries: scripts/test, or cargo test -- --include-ignored"]
fn an_operators_config_map_replaces_the_charts() {
    let docs = render_ok("scheduler:\n  existingConfigMap: my-scheduler-config\n");
    assert!(
        object(&docs, "ConfigMap", "gputopo-scheduler-config").is_none(),
        "the chart's own ConfigMap is not rendered"
    );
    let deployment = object(&docs, "Deployment", "gputopo-scheduler").expect("the Deployment");
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(
        pod["volumes"][0],
        json!({"name": "config", "configMap": {"name": "my-scheduler-config"}})
    );
    // No checksum follows a map the chart does not render.
    assert!(
        deployment["spec"]["template"]["metadata"]["annotations"]
            .get("checksum/config")
            .is_none(),
        "{deployment}"
    );
    // scheduler.schedulerName still names what is served, whatever the file says.
    let env = &pod["containers"][0]["env"];
    assert!(
        env.as_array()
            .expect("env")
            .contains(&json!({"name": "GPUTOPO_SCHEDULER_NAME", "value": "gputopo-scheduler"})),
        "{env}"
    );

    let both = refused(
        "scheduler:\n  existingConfigMap: my-scheduler-config\n  config:\n    weights: {gpuSet: 60}\n",
    );
    assert!(
        both.contains("scheduler.existingConfigMap (my-scheduler-config)")
            && both.contains("scheduler.config"),
        "{both}"
    );
    let tiers = refused(
        "scheduler:\n  config:\n    networkTiers: {preset: aws, keys: [example.com/rack]}\n",
    );
    assert!(
        tiers.contains("scheduler.config.networkTiers.preset")
            && tiers.contains("scheduler.config.networkTiers.keys"),
        "{tiers}"
    );
}
