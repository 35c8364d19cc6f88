//! Multi-process: a broker log directory belongs to one broker of one cluster (issue #18,
//! item 8; Kafka: `meta.properties` and `LogManager`'s directory lock).
//!
//! - a second broker process (another node id) on broker 1's running directory exits 1 with
//!   one line naming the directory and its holder, never registers, and broker 1's partition
//!   keeps its log end offset;
//! - the same directory, broker 1 stopped, with another node id: exits 1 with one line naming
//!   `meta.properties`, `node.id` and both values; nothing on disk changes;
//! - broker 1's directory with another `cluster.id` than the controllers': exits 1 with one
//!   line naming the file, the key and both values, before registering;
//! - broker 1 restarted on its own directory still has every record.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use keel_proto::ErrorCode;
use keel_tests::Endpoints;
use keel_tests::data::*;
use keel_tests::data::{code, values};
use keel_tests::process::*;

const START: Duration = Duration::from_secs(20);
const STEP: Duration = Duration::from_secs(15);
/// A refused broker exits within this (it only waits for one DescribeCluster answer).
const EXIT: Duration = Duration::from_secs(30);

/// Runs `keel-broker` as node `node_id` on `log_dir` against the cluster's controllers; waits
/// for its exit (killing it after [`EXIT`] and failing). Returns (exit code, stderr).
async fn run_broker(c: &Cluster, node_id: i32, log_dir: &Path) -> (Option<i32>, String) {
    let port = free_ports(1)[0];
    let err_path = c.dir.path().join(format!("intruder-{node_id}-{port}.err"));
    let err = std::fs::File::create(&err_path).unwrap();
    let mut child = Command::new(broker_bin())
        .arg("--node-id")
        .arg(node_id.to_string())
        .arg("--controller-quorum-voters")
        .arg(c.voters())
        .arg("--listeners")
        .arg(format!("127.0.0.1:{port}"))
        .arg("--log-dirs")
        .arg(log_dir)
        .arg("--broker-heartbeat-interval-ms")
        .arg(HEARTBEAT_INTERVAL_MS.to_string())
        .arg("--broker-session-timeout-ms")
        .arg(SESSION_TIMEOUT_MS.to_string())
        .env("KEEL_LOG", "info")
        .stdout(Stdio::null())
        .stderr(err)
        .spawn()
        .unwrap();
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > EXIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "broker {node_id} on {} still runs after {EXIT:?} (not refused); stderr:\n{}",
                log_dir.display(),
                std::fs::read_to_string(&err_path).unwrap_or_default()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    (
        status.code(),
        std::fs::read_to_string(&err_path).unwrap_or_default(),
    )
}

/// Asserts exit 1 with exactly one stderr line, equal to `want`.
fn assert_refused(result: &(Option<i32>, String), want: &str) {
    let (code, stderr) = result;
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(*code, Some(1), "exit code; stderr:\n{stderr}");
    assert_eq!(lines, vec![want], "one line expected, stderr:\n{stderr}");
}

/// Whether the controllers have any registration of broker `id`.
async fn registered(c: &Cluster, id: i32) -> bool {
    let r = c
        .wait_for("a DescribeCluster answer", STEP, || {
            c.try_describe_cluster()
        })
        .await;
    r.brokers.iter().any(|b| b.broker_id == id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_log_dir_is_refused_to_other_processes_nodes_and_clusters() {
    let mut c = Cluster::start(3, 1);
    c.wait_unfenced(&[1], START).await;
    c.create_topic(assigned_topic("ld", &[&[1]]), STEP).await;
    c.wait_leader_isr(1, "ld", &[1], STEP).await;
    let r = c.produce(1, "ld", -1, &values("ld", 0..10)).await;
    assert_eq!(code(&r), ErrorCode::None, "{r:?}");
    let leo = c.replica(1, "ld", 0).await.unwrap().log_end_offset;
    assert_eq!(leo, 10);
    let dir = c.broker_data_dir(1);

    // A second process on the running broker's directory.
    let refused = run_broker(&c, 7, &dir).await;
    assert_refused(
        &refused,
        &format!(
            "keel-broker: log_dirs {} is locked by another process (node.id 1 in its \
             meta.properties): is another keel-broker using this directory?",
            dir.display()
        ),
    );
    assert!(!registered(&c, 7).await, "the refused broker registered");
    let after = c.replica(1, "ld", 0).await.unwrap();
    assert_eq!(after.log_end_offset, leo, "broker 1's partition changed");
    assert!(
        dir.join("ld-0").is_dir(),
        "broker 1's partition was deleted"
    );

    // Broker 1's identity file: Kafka's keys, the cluster id learned from the controllers.
    let props = dir.join("meta.properties");
    let text = std::fs::read_to_string(&props).expect("meta.properties written");
    assert!(text.lines().any(|l| l == "node.id=1"), "{text}");
    assert!(
        text.lines().any(|l| l.starts_with("directory.id=")),
        "{text}"
    );
    let cluster_id = c.try_describe_cluster().await.unwrap().cluster_id;
    assert!(
        text.lines()
            .any(|l| l == format!("cluster.id={cluster_id}")),
        "{text}"
    );

    // The stopped broker's directory with another node id.
    let status = c.terminate_broker(1, STEP).await;
    assert!(status.success(), "{status:?}\n{}", c.broker_log(1));
    let before = std::fs::read(&props).unwrap();
    let refused = run_broker(&c, 7, &dir).await;
    assert_refused(
        &refused,
        &format!(
            "keel-broker: {}: node.id is 1 in this file but node_id is 7 in the configuration \
             (the directory belongs to another broker)",
            props.display()
        ),
    );
    assert_eq!(std::fs::read(&props).unwrap(), before);
    assert!(!registered(&c, 7).await, "the refused broker registered");
    assert_eq!(c.read_log_on_disk(1, "ld", 0).0.len(), 10);

    // The right node id, but another cluster's directory.
    let other = text.replace(
        &format!("cluster.id={cluster_id}"),
        "cluster.id=another-cluster",
    );
    std::fs::write(&props, &other).unwrap();
    let epoch_before = c
        .try_describe_cluster()
        .await
        .unwrap()
        .brokers
        .iter()
        .find(|b| b.broker_id == 1)
        .map(|b| b.broker_epoch);
    let refused = run_broker(&c, 1, &dir).await;
    assert_refused(
        &refused,
        &format!(
            "keel-broker: {}: cluster.id is another-cluster in this file but {cluster_id} at \
             the controllers (the directory belongs to another cluster)",
            props.display()
        ),
    );
    let epoch_after = c
        .try_describe_cluster()
        .await
        .unwrap()
        .brokers
        .iter()
        .find(|b| b.broker_id == 1)
        .map(|b| b.broker_epoch);
    assert_eq!(
        epoch_after, epoch_before,
        "the refused broker registered again"
    );
    assert_eq!(c.read_log_on_disk(1, "ld", 0).0.len(), 10);

    // Its own directory back: broker 1 starts and has every record.
    std::fs::write(&props, &text).unwrap();
    c.start_broker(1);
    c.wait_unfenced(&[1], START).await;
    let back = c.wait_leader_isr(1, "ld", &[1], STEP).await;
    assert_eq!(back.log_end_offset, leo);
    let (recs, _, hw) = c.consume(1, "ld", 0, 0).await;
    assert_eq!((recs.len(), hw), (10, 10));
}
