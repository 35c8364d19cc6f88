//! HTTP/1.1 GETs of the `/metrics` and `/health` listeners (`metrics_listener`), for tests
//! that read them as Prometheus or a load balancer would.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// `GET path` over HTTP/1.1; `None` when the connection fails. Returns (status, body).
pub async fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut s = tokio::time::timeout(Duration::from_secs(2), tokio::net::TcpStream::connect(addr))
        .await
        .ok()?
        .ok()?;
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: keel\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await
    .ok()?;
    let mut buf = String::new();
    tokio::time::timeout(Duration::from_secs(2), s.read_to_string(&mut buf))
        .await
        .ok()?
        .ok()?;
    let status = buf.get(9..12)?.parse().ok()?;
    Some((status, buf.split_once("\r\n\r\n")?.1.to_string()))
}

/// The value of the first sample line `name value` in Prometheus text.
pub fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}
