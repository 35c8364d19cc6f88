//! Multi-process: three real controllers and three real brokers on loopback.
//!
//! - every broker registers and is unfenced within seconds, and follows the metadata log
//!   exactly (its image digest equals the active controller's at the same offset);
//! - kill -9 of the active controller: brokers keep heartbeating to the new one (they stay
//!   unfenced past a session timeout) and keep following metadata (a topic created after the
//!   failover reaches every broker);
//! - kill -9 and restart of a broker: it re-registers with a new broker epoch and resumes
//!   from its local metadata snapshot;
//! - SIGTERM of a broker: controlled shutdown (leadership moves away first), exit 0, and the
//!   controller shows it fenced and in controlled shutdown;
//! - SIGTERM of a controller with brokers connected and a peer dead: exit 0 within about a
//!   second (tonic's graceful shutdown alone waited 8.7 s for the brokers' metadata streams).

use std::time::{Duration, Instant};

use keel_proto::controller::DescribeClusterReply;
use keel_tests::Endpoints;
use keel_tests::data::*;
use keel_tests::process::*;

const START: Duration = Duration::from_secs(20);
const STEP: Duration = Duration::from_secs(15);

fn epoch_of(r: &DescribeClusterReply, id: i32) -> Option<i64> {
    r.brokers
        .iter()
        .find(|b| b.broker_id == id)
        .map(|b| b.broker_epoch)
}

/// Waits until every running broker's Metadata reply lists `topic` with a leader.
async fn wait_topic_everywhere(c: &Cluster, brokers: &[i32], topic: &str) {
    for &id in brokers {
        c.wait_for(
            &format!("{topic} in broker {id}'s Metadata"),
            STEP,
            || async {
                let r = c.try_metadata(id, &[topic]).await?;
                let t = r.topics.first()?;
                (ok(&t.error) && t.partitions.iter().all(|p| p.leader_id >= 0)).then_some(())
            },
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn brokers_register_follow_metadata_and_survive_controller_failover() {
    let mut c = Cluster::start(3, 3);
    let brokers = c.broker_ids();
    let t0 = Instant::now();
    c.wait_unfenced(&brokers, START).await;
    eprintln!("3 brokers registered and unfenced in {:?}", t0.elapsed());
    c.create_topic(
        assigned_topic("before", &[&[1, 2, 3], &[2, 3, 1], &[3, 1, 2]]),
        STEP,
    )
    .await;
    wait_topic_everywhere(&c, &brokers, "before").await;
    for &id in &brokers {
        let offset = c.assert_digest_matches(id, STEP).await;
        eprintln!("broker {id}: digest equal to the active controller's at offset {offset}");
    }
    // The Metadata reply carries what the controller decided.
    let m = c.try_metadata(1, &["before"]).await.unwrap();
    let p = &m.topics[0].partitions;
    assert_eq!(
        p.iter().map(|p| p.leader_id).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
    assert_eq!(p[0].replica_nodes, vec![1, 2, 3]);
    assert_eq!(p[0].isr_nodes, vec![1, 2, 3]);
    assert_eq!(m.brokers.len(), 3);
    assert!(!m.cluster_id.is_empty());

    // kill -9 of the active controller.
    let old = c.active_controller(STEP).await;
    let epochs_before = c.try_describe_cluster().await.unwrap();
    c.kill_controller(old);
    let failover = Instant::now();
    let new = c.active_controller(STEP).await;
    assert_ne!(new, old);
    eprintln!(
        "controller {old} killed; {new} active after {:?}",
        failover.elapsed()
    );
    // A new active controller gives every broker a fresh session: brokers that do not
    // heartbeat to it are fenced one session timeout later. Watch for twice that long.
    let watch_until = Instant::now() + Duration::from_millis(2 * SESSION_TIMEOUT_MS);
    while Instant::now() < watch_until {
        let r = c.wait_unfenced(&brokers, STEP).await;
        for &id in &brokers {
            assert_eq!(
                epoch_of(&r, id),
                epoch_of(&epochs_before, id),
                "broker {id} kept its registration across the failover"
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    c.create_topic(assigned_topic("after", &[&[2, 1, 3], &[3, 2, 1]]), STEP)
        .await;
    wait_topic_everywhere(&c, &brokers, "after").await;
    for &id in &brokers {
        c.assert_digest_matches(id, STEP).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_restart_reregisters_from_its_local_snapshot_and_sigterm_shuts_down_cleanly() {
    let mut c = Cluster::start(3, 3);
    let brokers = c.broker_ids();
    c.wait_unfenced(&brokers, START).await;
    c.create_topic(assigned_topic("t", &[&[1, 2, 3], &[2, 1, 3]]), STEP)
        .await;
    wait_topic_everywhere(&c, &brokers, "t").await;
    // Wait for broker 1's local snapshot to hold the topic.
    let snap = c
        .broker_data_dir(1)
        .join("__cluster_metadata")
        .join("metadata.snap");
    c.wait_for("broker 1's local snapshot", STEP, || async {
        let s = keel_metadata_log::snapshot::read_file(&snap).ok()?;
        let img = s.to_image(&snap).ok()?;
        img.topics().get_by_name("t").map(|_| ())
    })
    .await;
    let before = c.try_describe_cluster().await.unwrap();
    let old_epoch = epoch_of(&before, 1).unwrap();

    // kill -9 and restart of broker 1.
    c.kill_broker(1);
    c.start_broker(1);
    let r = c
        .wait_cluster("broker 1 re-registered and unfenced", STEP, |r| {
            r.brokers
                .iter()
                .any(|b| b.broker_id == 1 && b.broker_epoch > old_epoch && !b.fenced)
        })
        .await;
    let new_epoch = epoch_of(&r, 1).unwrap();
    eprintln!("broker 1: epoch {old_epoch} -> {new_epoch}");
    let log = c.broker_log(1);
    let loaded = log
        .lines()
        .find(|l| l.contains("loaded local metadata snapshot at offset"))
        .unwrap_or_else(|| panic!("no snapshot load logged:\n{log}"));
    let loaded_offset: i64 = loaded
        .split("loaded local metadata snapshot at offset ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("offset in {loaded:?}"));
    assert!(loaded_offset > 0, "{loaded}");
    // The first stream after the load starts right after the snapshot's offset.
    let after_load = &log[log.find(loaded).unwrap()..];
    let resumed = after_load
        .lines()
        .find(|l| l.contains("following the metadata log from controller"))
        .unwrap_or_else(|| panic!("no stream after the load:\n{after_load}"));
    assert!(
        resumed.contains(&format!("at offset {}", loaded_offset + 1)),
        "{resumed}"
    );
    let d = c.try_describe_replicas(1).await.unwrap();
    assert_eq!(
        d.broker_epoch, new_epoch,
        "the broker reports its new epoch"
    );
    c.assert_digest_matches(1, STEP).await;

    // SIGTERM of broker 2, which leads t-1: controlled shutdown, exit 0.
    let status = c
        .terminate_broker(2, Duration::from_millis(SESSION_TIMEOUT_MS) + STEP)
        .await;
    assert!(
        status.success(),
        "broker 2 exit status {status:?}\n{}",
        c.logs()
    );
    let log2 = c.broker_log(2);
    assert!(
        log2.contains("controlled shutdown granted"),
        "broker 2 did not log the granted shutdown:\n{log2}"
    );
    let r = c.try_describe_cluster().await.unwrap();
    let b2 = r.brokers.iter().find(|b| b.broker_id == 2).unwrap();
    assert!(b2.fenced && b2.in_controlled_shutdown, "{b2:?}");
    // Leadership moved away before it stopped: the remaining brokers see new leaders.
    for id in [1, 3] {
        let m = c.try_metadata(id, &["t"]).await.unwrap();
        for p in &m.topics[0].partitions {
            assert_ne!(p.leader_id, 2, "broker {id} sees {p:?}");
            assert!(!p.isr_nodes.contains(&2), "broker {id} sees {p:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controllers_stop_within_a_second_of_sigterm_with_brokers_connected_and_a_peer_dead() {
    let mut c = Cluster::start(3, 3);
    c.wait_unfenced(&c.broker_ids(), START).await;
    c.kill_controller(3);
    for id in [1, 2] {
        let t0 = Instant::now();
        // Issue #24: under a second. SHUTDOWN_GRACE (400 ms) for open requests and streams,
        // at most as much for Raft (measured: 0.42 s for the first, 0.02 s for the second).
        // Without the grace: 2.0 s here (the brokers' metadata streams held the graceful
        // shutdown), 8.7 s under `cluster up`. Cluster tests run one at a time (nextest group).
        let status = c.terminate_controller(id, Duration::from_secs(1)).await;
        eprintln!(
            "controller {id} exited {status} {:?} after SIGTERM",
            t0.elapsed()
        );
        assert!(status.success(), "controller {id}: {status}\n{}", c.logs());
    }
}
