//! Topic auto-creation on the Kafka listener (#21, Kafka's `auto.create.topics.enable`):
//! off by default, a kcat producer to an unknown topic fails and no topic appears; with
//! `auto_create_topics_enable = true` the same producer's Metadata request creates the topic
//! with the controllers' defaults and its records are delivered. Real binaries, kcat.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use keel_tests::Endpoints;
use keel_tests::process::{Cluster, Options};

const WAIT: Duration = Duration::from_secs(30);

/// `kcat -P` of three lines to `topic`; returns (success, stderr).
fn kcat_produce(bootstrap: &str, topic: &str) -> (bool, String) {
    let mut child = Command::new("kcat")
        .args([
            "-P",
            "-b",
            bootstrap,
            "-t",
            topic,
            "-X",
            "message.timeout.ms=10000",
        ])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kcat is needed (apt-get install kcat; scripts/test installs it)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"one\ntwo\nthree\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    (
        out.status.success() && !stderr.contains("Delivery failed"),
        stderr,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_auto_create_is_off_by_default() {
    let c = Cluster::start(1, 1);
    c.wait_unfenced(&[1], WAIT).await;
    let (ok, stderr) = kcat_produce(&c.kafka_bootstrap(), "typo-topic");
    assert!(!ok, "a produce to an unknown topic succeeded: {stderr}");
    let m = c.try_metadata(1, &["typo-topic"]).await.unwrap();
    assert!(
        m.topics.iter().all(|t| t.partitions.is_empty()),
        "the topic was created: {m:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_auto_create_on_creates_the_topic_a_producer_names() {
    let c = Cluster::start_opts(
        1,
        1,
        Options {
            broker_args: vec!["--auto-create-topics-enable".into(), "true".into()],
            ..Options::default()
        },
    );
    c.wait_unfenced(&[1], WAIT).await;
    let (ok, stderr) = kcat_produce(&c.kafka_bootstrap(), "auto-topic");
    assert!(ok, "kcat produce failed: {stderr}");
    let r = c
        .replica(1, "auto-topic", 0)
        .await
        .expect("auto-topic-0 on broker 1");
    assert_eq!(r.log_end_offset, 3, "{r:?}");
}
