//! Multi-process: a real broker's `/health/ready` and `/metrics` (issue #7). Readiness turns
//! 200 once the broker is registered and unfenced; the metadata gauges follow its image; a
//! taken `metrics_listener` port stops the start with one line naming the key. The broker
//! follows the metadata log from the active controller, which sends each entry's commit time.

use std::net::SocketAddr;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use keel_tests::Endpoints;
use keel_tests::http::{histogram_buckets, http_get, quantile_bound, sample};
use keel_tests::process::*;

/// A broker process with a metrics listener, killed on drop.
struct MetricsBroker(Child);

impl Drop for MetricsBroker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts broker `id` of cluster `c` with `voters` as its controller list and a metrics
/// listener (returned), logging to `broker-<id>.log` in the cluster's directory. Its
/// `broker_session_timeout_ms` is [`SESSION_TIMEOUT_MS`] (which also bounds the silence of
/// its metadata stream, at least 2 s).
fn spawn_metrics_broker(c: &Cluster, id: i32, voters: &str) -> (MetricsBroker, SocketAddr) {
    spawn_metrics_broker_with_session(c, id, voters, SESSION_TIMEOUT_MS)
}

/// [`spawn_metrics_broker`] with `broker_session_timeout_ms = session_ms`.
fn spawn_metrics_broker_with_session(
    c: &Cluster,
    id: i32,
    voters: &str,
    session_ms: u64,
) -> (MetricsBroker, SocketAddr) {
    let ports = free_ports(2);
    let metrics = SocketAddr::from(([127, 0, 0, 1], ports[1]));
    let log = std::fs::File::create(c.dir.path().join(format!("broker-{id}.log"))).unwrap();
    let broker = MetricsBroker(
        Command::new(broker_bin())
            .args([
                "--node-id",
                &id.to_string(),
                "--controller-quorum-voters",
                voters,
            ])
            .arg("--listeners")
            .arg(format!("127.0.0.1:{}", ports[0]))
            .arg("--log-dirs")
            .arg(c.dir.path().join(format!("broker-{id}")))
            .arg("--broker-heartbeat-interval-ms")
            .arg(HEARTBEAT_INTERVAL_MS.to_string())
            .arg("--broker-session-timeout-ms")
            .arg(session_ms.to_string())
            .arg("--metrics-listener")
            .arg(metrics.to_string())
            .env("KEEL_LOG", "info")
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    (broker, metrics)
}

/// A broker started with only a follower controller in its list learns the voter set and
/// follows the metadata log from the active controller, which sends the commit times.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_knowing_only_a_follower_moves_to_the_active_controller() {
    let c = Cluster::start(3, 0);
    let active = c.active_controller(Duration::from_secs(20)).await;
    let follower = (1..=3u64).find(|&i| i != active).unwrap();
    let (_broker, metrics) = spawn_metrics_broker(
        &c,
        8,
        &format!("{follower}@{}", c.controller_addr(follower)),
    );
    wait_following_active(&c, 8, metrics).await;
    let log = c.broker_log(8);
    // It moved when it learned the voters (the active controller may have changed since).
    assert!(
        log.contains("the controller voters changed; moving the metadata stream to controller"),
        "{log}"
    );
}

/// Waits (30 s at most) until broker `id` has samples of the lag from the commit, which only
/// the active controller's stream gives: it follows the metadata log from the active one.
async fn wait_following_active(c: &Cluster, id: i32, metrics: SocketAddr) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = http_get(metrics, "/metrics").await.map(|(_, t)| t);
        let from_commit = text.as_deref().map_or_else(Vec::new, |t| {
            histogram_buckets(t, "keel_broker_metadata_commit_lag_seconds")
        });
        if quantile_bound(&from_commit, 0.5).is_some() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "broker {id} never followed the active controller:\n{}",
            c.broker_log(id)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The metadata offset broker `metrics` has applied (its gauge), if it answers.
async fn applied_offset(metrics: SocketAddr) -> Option<f64> {
    let (_, text) = http_get(metrics, "/metrics").await?;
    sample(&text, "keel_broker_metadata_last_applied_offset")
}

/// A paused (SIGSTOP) active controller does not close the streams it serves: they go
/// silent. The broker moves its stream to the controller that accepts its heartbeats once
/// the quorum elected one, instead of waiting for the silence to reach its idle timeout (the
/// broker's session timeout, 9 s here, as by default), which stalled the metadata of every
/// broker that long (found by the fresh-user trial of session 38). Kafka's observers give up
/// on a fetch after `controller.quorum.fetch.timeout.ms` and ask the leader the quorum names.
/// When the paused controller resumes, it fences nobody for its own stall.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_leaves_a_paused_active_controller_for_the_one_its_heartbeats_reach() {
    let c = Cluster::start(3, 0);
    let (_broker, metrics) = spawn_metrics_broker_with_session(&c, 9, &c.voters(), 9_000);
    wait_following_active(&c, 9, metrics).await;
    let paused = c.active_controller(Duration::from_secs(10)).await;
    c.pause_controller(paused);
    let moved = "is the active controller (it accepts this broker's heartbeats)";
    let deadline = Instant::now() + Duration::from_secs(30);
    while !c.broker_log(9).contains(moved) {
        assert!(
            Instant::now() < deadline,
            "broker 9 did not move off the paused controller {paused}:\n{}",
            c.broker_log(9)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The paused controller sends nothing: entries applied from now on come from the stream
    // the broker moved to (the new active controller's NoOps, every 500 ms).
    let at_move = applied_offset(metrics).await.expect("an applied offset");
    loop {
        if applied_offset(metrics).await.is_some_and(|o| o > at_move) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "broker 9 applied nothing after its move (offset {at_move}):\n{}",
            c.broker_log(9)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The pause outlasts the controllers' session timeout, so that the paused controller's
    // own view of broker 9's session has expired by the time it resumes.
    tokio::time::sleep(Duration::from_millis(2 * SESSION_TIMEOUT_MS)).await;
    let before_resume = c.controller_log(paused).len();
    c.resume_controller(paused);
    // It moved on the heartbeats, not after the silence reached the idle timeout.
    let log = c.broker_log(9);
    assert!(!log.contains("nothing received for"), "{log}");
    // The resumed controller, still the active one in its own view until it learns of its
    // successor, does not count its own stall against broker 9's session: it fences nobody
    // (it used to log `broker session expired: fencing`, found by the fresh-user trial).
    let stall_line = "this controller did not run for";
    let resumed = Instant::now();
    let after = loop {
        let all = c.controller_log(paused);
        let after = all.get(before_resume..).unwrap_or_default().to_string();
        if after.contains(stall_line) || resumed.elapsed() > Duration::from_secs(3) {
            break after;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(!after.contains("broker session expired"), "{after}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_readiness_and_metadata_gauges_over_http() {
    let c = Cluster::start(3, 0);
    let (_broker, metrics) = spawn_metrics_broker(&c, 7, &c.voters());
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
        // Only the active controller sends commit times: samples from the commit mean the
        // broker follows the log from it, wherever its stream started (KIP-595 observers).
        let from_commit = histogram_buckets(&text, "keel_broker_metadata_commit_lag_seconds");
        let followed_active = quantile_bound(&from_commit, 0.5).is_some();
        if offset > offset0 && sample(&text, "keel_broker_fenced") == Some(0.0) && followed_active {
            assert!(
                sample(&text, "keel_broker_metadata_last_applied_age_ms").is_some(),
                "{text}"
            );
            // Metadata propagation: the NoOps followed live are sampled, and on an idle
            // local cluster most are applied well within a second of their append.
            let lag = histogram_buckets(&text, "keel_broker_metadata_apply_lag_seconds");
            let (median, samples) = quantile_bound(&lag, 0.5).expect("propagation samples");
            assert!(samples >= 1.0 && median <= 1.0, "{lag:?}");
            let (median, _) = quantile_bound(&from_commit, 0.5).unwrap();
            assert!(median <= 1.0, "{from_commit:?}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "offset stuck at {offset0}, or no lag samples from the commit (not following \
             the active controller): {text}\n{}",
            log_text()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[test]
fn a_taken_metrics_listener_port_fails_start_with_one_line_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = Command::new(broker_bin())
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

/// The sum of `name` over the `/metrics` of brokers `ids` (`None` if one does not answer).
async fn metric_sum(ports: &[u16], ids: &[i32], name: &str) -> Option<f64> {
    let mut total = 0.0;
    for id in ids {
        let addr = SocketAddr::from(([127, 0, 0, 1], ports[*id as usize - 1]));
        let (status, body) = http_get(addr, "/metrics").await?;
        if status != 200 {
            return None;
        }
        total += sample(&body, name).unwrap_or(0.0);
    }
    Some(total)
}

/// Issue #7 acceptance: scrape `/metrics` of a running 3+3 cluster; stop one broker; the
/// leaders' `keel_broker_under_replicated_partitions` rises to the expected count and
/// `keel_broker_isr_shrinks_total` increments; after the broker is back both gauges return
/// to 0 (and the expansions are counted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_replicated_and_isr_shrinks_follow_a_stopped_broker() {
    use keel_proto::ErrorCode;
    use keel_proto::controller::{CreatableReplicaAssignment, CreatableTopic};
    use keel_tests::data::{code, values};

    let wait = Duration::from_secs(30);
    let mut c = Cluster::start_opts(
        3,
        3,
        Options {
            broker_args: vec!["--replica-lag-time-max-ms".into(), "1000".into()],
            session_timeout_ms: 4_000,
            broker_metrics: true,
            ..Options::default()
        },
    );
    let ports = c.broker_metrics_ports.clone();
    c.wait_unfenced(&[1, 2, 3], wait).await;
    // Partition p is led by broker p + 1.
    c.create_topic(
        CreatableTopic {
            name: "m".into(),
            num_partitions: -1,
            replication_factor: -1,
            assignments: (0..3)
                .map(|p| CreatableReplicaAssignment {
                    partition_index: p,
                    broker_ids: (0..3).map(|i| (p + i) % 3 + 1).collect(),
                })
                .collect(),
            configs: vec![],
        },
        wait,
    )
    .await;
    c.wait_for("all partitions fully replicated", wait, || async {
        let led = metric_sum(&ports, &[1, 2, 3], "keel_broker_leader_count").await?;
        let under = metric_sum(
            &ports,
            &[1, 2, 3],
            "keel_broker_under_replicated_partitions",
        )
        .await?;
        (led == 3.0 && under == 0.0).then_some(())
    })
    .await;
    // A consumer long poll at the log end is in flight until its wait ends.
    let consumers_in_flight = r#"keel_broker_fetch_requests_in_flight{source="consumer"}"#;
    assert_eq!(
        metric_sum(&ports, &[1], consumers_in_flight).await,
        Some(0.0)
    );
    let mut client = c.broker_client(1);
    let long_poll = tokio::spawn(async move {
        let req = keel_proto::broker::FetchRequest {
            session: None,
            replica_id: -1,
            broker_epoch: -1,
            max_wait_ms: 3_000,
            min_bytes: 1,
            topics: vec![keel_proto::broker::FetchTopic {
                topic: "m".into(),
                topic_id: Default::default(),
                partitions: vec![keel_proto::broker::FetchPartition {
                    partition: 0,
                    fetch_offset: 0,
                    current_leader_epoch: None,
                    last_fetched_epoch: -1,
                    log_start_offset: -1,
                    partition_max_bytes: 0,
                }],
            }],
            ..Default::default()
        };
        client.fetch(req).await.unwrap().into_inner()
    });
    c.wait_for("the long poll counted in flight", wait, || async {
        let n = metric_sum(&ports, &[1], consumers_in_flight).await?;
        (n == 1.0).then_some(())
    })
    .await;
    let reply = long_poll.await.unwrap();
    assert!(reply.responses[0].partitions[0].records.is_empty());
    assert_eq!(
        metric_sum(&ports, &[1], consumers_in_flight).await,
        Some(0.0)
    );

    let shrinks_before = metric_sum(&ports, &[1, 2], "keel_broker_isr_shrinks_total")
        .await
        .unwrap();

    // Broker 3 stops; writes to the partitions led by 1 and 2 leave it behind.
    c.kill_broker(3);
    for p in 0..2 {
        let r = c
            .produce_raw(
                p + 1,
                "m",
                p,
                1,
                5000,
                keel_tests::data::batch(&values("x", 0..5)),
                None,
            )
            .await
            .unwrap();
        assert_eq!(code(&r), ErrorCode::None);
    }
    // Leaders 1 and 2 shrink partitions 0 and 1; when broker 3 is fenced, partition 2 moves
    // to another leader with a shrunk ISR: 3 under-replicated partitions in all.
    c.wait_for(
        "3 under-replicated partitions on the live leaders",
        wait,
        || async {
            let under =
                metric_sum(&ports, &[1, 2], "keel_broker_under_replicated_partitions").await?;
            (under == 3.0).then_some(())
        },
    )
    .await;
    let shrinks = metric_sum(&ports, &[1, 2], "keel_broker_isr_shrinks_total")
        .await
        .unwrap();
    assert!(
        shrinks >= shrinks_before + 2.0,
        "the leaders counted their ISR shrinks: {shrinks_before} -> {shrinks}"
    );

    // Broker 3 returns and catches up: nothing is under-replicated any more.
    c.start_broker(3);
    c.wait_for("no under-replicated partition", wait, || async {
        let under = metric_sum(
            &ports,
            &[1, 2, 3],
            "keel_broker_under_replicated_partitions",
        )
        .await?;
        let under_min =
            metric_sum(&ports, &[1, 2, 3], "keel_broker_under_min_isr_partitions").await?;
        (under == 0.0 && under_min == 0.0).then_some(())
    })
    .await;
    let expands = metric_sum(&ports, &[1, 2, 3], "keel_broker_isr_expands_total")
        .await
        .unwrap();
    assert!(expands >= 3.0, "expansions counted: {expands}");
    let produced = metric_sum(&ports, &[1], "keel_broker_produce_requests_total")
        .await
        .unwrap();
    assert!(produced >= 1.0);
}
