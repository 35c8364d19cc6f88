//! Multi-process: a real broker's `/health/ready` and `/metrics` (issue #7). Readiness turns
//! 200 once the broker is registered and unfenced; the metadata gauges follow its image; a
//! taken `metrics_listener` port stops the start with one line naming the key.

mod common;

use std::net::SocketAddr;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// `GET path` over HTTP/1.1; `None` when the connection fails. Returns (status, body).
async fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
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

fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// A broker process with a metrics listener, killed on drop.
struct MetricsBroker(Child);

impl Drop for MetricsBroker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_readiness_and_metadata_gauges_over_http() {
    let c = Cluster::start(3, 0);
    let ports = free_ports(2);
    let metrics = SocketAddr::from(([127, 0, 0, 1], ports[1]));
    let log = std::fs::File::create(c.dir.path().join("broker-7.log")).unwrap();
    let _broker = MetricsBroker(
        Command::new(BROKER_BIN)
            .args(["--node-id", "7", "--controller-quorum-voters", &c.voters()])
            .arg("--listeners")
            .arg(format!("127.0.0.1:{}", ports[0]))
            .arg("--log-dirs")
            .arg(c.dir.path().join("broker-7"))
            .arg("--broker-heartbeat-interval-ms")
            .arg(HEARTBEAT_INTERVAL_MS.to_string())
            .arg("--broker-session-timeout-ms")
            .arg(SESSION_TIMEOUT_MS.to_string())
            .arg("--metrics-listener")
            .arg(metrics.to_string())
            .env("KEEL_LOG", "info")
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    let log_text =
        || std::fs::read_to_string(c.dir.path().join("broker-7.log")).unwrap_or_default();

    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = http_get(metrics, "/health/ready").await;
        if let Some((code, body)) = &r {
            if *code == 200 {
                assert!(body.contains("broker 7 registered and unfenced"), "{body}");
                break;
            }
            assert_eq!(*code, 503, "{body}");
        }
        assert!(
            Instant::now() < deadline,
            "never ready: {r:?}\n{}",
            log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The controllers agree: the broker is registered and unfenced.
    c.wait_unfenced(&[7], Duration::from_secs(10)).await;
    assert_eq!(
        http_get(metrics, "/health/live").await,
        Some((200, "live\n".into()))
    );

    // The gauges follow the image: NoOps keep the offset moving.
    let (_, first) = http_get(metrics, "/metrics").await.unwrap();
    let offset0 = sample(&first, "keel_broker_metadata_last_applied_offset").unwrap();
    assert!(offset0 >= 1.0, "{first}");
    assert!(
        first.contains("# HELP keel_broker_metadata_last_applied_offset"),
        "{first}"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, text) = http_get(metrics, "/metrics").await.unwrap();
        let offset = sample(&text, "keel_broker_metadata_last_applied_offset").unwrap();
        if offset > offset0 && sample(&text, "keel_broker_fenced") == Some(0.0) {
            assert!(
                sample(&text, "keel_broker_metadata_last_applied_age_ms").is_some(),
                "{text}"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "offset stuck at {offset0}: {text}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[test]
fn a_taken_metrics_listener_port_fails_start_with_one_line_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = Command::new(BROKER_BIN)
        .args([
            "--node-id",
            "1",
            "--controller-quorum-voters",
            "1@127.0.0.1:1",
        ])
        .args(["--listeners", "127.0.0.1:0", "--metrics-listener", &addr])
        .arg("--log-dirs")
        .arg(dir.path().join("data"))
        .env_remove("KEEL_LOG")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "not one line: {err}");
    assert!(
        err.starts_with(&format!("keel-broker: metrics_listener {addr}: "))
            && err.contains("in use"),
        "{err}"
    );
}
