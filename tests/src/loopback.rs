//! A plain HTTP/1.1 client for the loopback ports our processes serve
//! (`/healthz`, `/readyz`, `/metrics`, the extender's API): enough for
//! tests and benchmarks, without TLS or a client crate's connection pool.

use std::io::{Read, Write};
use std::time::Duration;

/// `method path` on 127.0.0.1:`port` with `body` (JSON when not empty):
/// the status and the body, or `None` when nothing answered within 30 s.
pub async fn request(port: u16, method: &str, path: &str, body: &str) -> Option<(u16, String)> {
    let (method, path, body) = (method.to_string(), path.to_string(), body.to_string());
    tokio::task::spawn_blocking(move || {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(30))).ok()?;
        write!(
            s,
            "{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .ok()?;
        let mut text = String::new();
        s.read_to_string(&mut text).ok()?;
        let status = text.split_whitespace().nth(1)?.parse().ok()?;
        let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string())?;
        Some((status, body))
    })
    .await
    .ok()
    .flatten()
}

/// A GET on 127.0.0.1:`port`.
pub async fn get(port: u16, path: &str) -> Option<(u16, String)> {
    request(port, "GET", path, "").await
}
