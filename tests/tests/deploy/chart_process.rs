//! Running a binary as the chart's container runs it: its args with the
//! chart's config file, on a free loopback port, probed over plain HTTP.

use super::objects::scheduler_object;
use serde_json::Value;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::time::Duration;

/// A free loopback port (a race with other processes is possible but harmless
/// here: the agent would fail to bind and the test would say so).
pub(super) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// `GET path` on 127.0.0.1:port: the status code and body.
pub(super) fn http_get(port: u16, path: &str) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let code = response
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((code, body))
}

/// The chart container's args, its config file (the chart's ConfigMap's
/// `config.yaml`) written under `dir` and named in their place.
pub(super) fn chart_args(docs: &[Value], container: &Value, dir: &Path) -> Vec<String> {
    let config = scheduler_object(docs, "ConfigMap").expect("the ConfigMap");
    let config_file = dir.join("config.yaml");
    std::fs::write(
        &config_file,
        config["data"]["config.yaml"].as_str().expect("config.yaml"),
    )
    .expect("config written");
    container["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(Value::as_str)
        .map(|a| {
            if a == "/etc/gputopo/config.yaml" {
                config_file.display().to_string()
            } else {
                a.to_owned()
            }
        })
        .collect()
}
