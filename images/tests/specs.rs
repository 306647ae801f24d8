//! The engine-free images and the Dockerfiles describe the same images, the
//! Dockerfiles are what their template makes, and the tag they get is the
//! chart's default (its appVersion).

use gputopo_images::dockerfile;
use gputopo_images::spec::{self, Base, Component};
use std::path::PathBuf;

fn repo_file(path: &str) -> String {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    std::fs::read_to_string(root.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn json_array(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|i| format!("\"{i}\"")).collect();
    format!("[{}]", quoted.join(", "))
}

#[test]
fn each_spec_says_what_its_dockerfile_says() {
    for component in Component::ALL {
        let spec = component.spec();
        let dockerfile = repo_file(&format!("{}/Dockerfile", component.name()));
        let has = |text: &str| {
            assert!(
                dockerfile.contains(text),
                "{}/Dockerfile lacks {text:?}",
                component.name()
            )
        };
        has(&format!("\nUSER {}\n", spec.user));
        has(&format!(
            "\nENTRYPOINT {}\n",
            json_array(&spec.entrypoint())
        ));
        let cmd: Vec<String> = spec.cmd.iter().map(|c| c.to_string()).collect();
        if cmd.is_empty() {
            assert!(!dockerfile.contains("\nCMD "), "{}", component.name());
        } else {
            has(&format!("\nCMD {}\n", json_array(&cmd)));
        }
        let exposed: Vec<String> = dockerfile
            .lines()
            .filter_map(|l| l.strip_prefix("EXPOSE "))
            .map(str::to_string)
            .collect();
        let ports: Vec<String> = spec.exposed_ports.iter().map(u16::to_string).collect();
        assert_eq!(exposed, ports, "{}", component.name());
        for (key, value) in spec.labels("", "") {
            if key.ends_with(".version") || key.ends_with(".revision") {
                continue; // set at build time
            }
            has(&format!("{key}=\"{value}\""));
        }
        let base = match spec.base {
            Base::Glibc => "FROM gcr.io/distroless/cc-debian12",
            Base::Static => "FROM gcr.io/distroless/static-debian12",
        };
        has(base);
    }
}

#[test]
fn the_dockerfiles_are_their_template() {
    let generated = dockerfile::generated();
    // Three components, a Dockerfile and a .dockerignore each.
    assert_eq!(generated.len(), 6);
    for (path, text) in generated {
        assert!(
            repo_file(&path) == text,
            "{path} is not what images/src/dockerfile.rs makes: edit that, then run \
             `cargo run -p gputopo-images --bin gputopo-oci -- dockerfiles`"
        );
    }
}

#[test]
fn the_images_tag_is_the_charts_app_version() {
    let chart = repo_file("helm/gputopo/Chart.yaml");
    assert!(
        chart.contains(&format!("\nappVersion: \"{}\"\n", spec::VERSION)),
        "helm/gputopo/Chart.yaml's appVersion must be the workspace version {} (the images' tag)",
        spec::VERSION
    );
    let values = repo_file("helm/gputopo/values.yaml");
    for component in Component::ALL {
        let name = component.spec().name;
        assert!(
            values.contains(&format!("repository: ghcr.io/gputopo/{name}\n")),
            "values.yaml's default repository for {name}"
        );
    }
}
