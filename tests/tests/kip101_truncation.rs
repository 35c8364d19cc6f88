//! The two "HW defect" timelines of seed 004 (KIP-101) on the real binaries, with process
//! kills, pauses and restarts: no acknowledged (acks=all) record is lost, and after healing
//! every replica holds the same batches (per-batch CRC sequences read from disk).
//!
//! Two brokers A = 1 (first leader) and B = 2, replication factor 2, min.insync.replicas 1.

use std::time::Duration;

use keel_proto::ErrorCode;
use keel_proto::broker::ReplicaRole;
use keel_tests::Endpoints;
use keel_tests::data::assigned_topic;
use keel_tests::data::{code, values};
use keel_tests::process::{Cluster, Options};

const WAIT: Duration = Duration::from_secs(20);

async fn two_brokers(topic: &str) -> Cluster {
    let c = Cluster::start_opts(
        3,
        2,
        Options {
            broker_metrics: true,
            ..Options::default()
        },
    );
    c.wait_unfenced(&[1, 2], WAIT).await;
    c.create_topic(assigned_topic(topic, &[&[1, 2]]), WAIT)
        .await;
    c.wait_leader_isr(1, topic, &[1, 2], WAIT).await;
    c
}

async fn broker_epoch(c: &Cluster, id: i32) -> i64 {
    let r = c.wait_unfenced(&[id], WAIT).await;
    r.brokers
        .iter()
        .find(|b| b.broker_id == id)
        .unwrap()
        .broker_epoch
}

async fn wait_leader(c: &Cluster, id: i32, topic: &str) -> i32 {
    c.wait_for(&format!("broker {id} leads {topic}-0"), WAIT, || async {
        let r = c.replica(id, topic, 0).await?;
        (r.role == ReplicaRole::Leader as i32).then_some(r.leader_epoch)
    })
    .await
}

/// Defect 1 (data loss): B holds m2 but its HW (in memory and in its checkpoint) may still be
/// below it when it is killed and restarted. The old rule truncated B to its HW; if A then
/// died, B led without the acknowledged m2. With leader epochs B keeps its log, and m2
/// survives A's death.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hw_defect_1_restarted_follower_keeps_acknowledged_records() {
    let mut c = two_brokers("d1").await;
    let m1 = values("m1", 0..1);
    let m2 = values("m2", 0..1);
    assert_eq!(code(&c.produce(1, "d1", -1, &m1).await), ErrorCode::None);
    assert_eq!(code(&c.produce(1, "d1", -1, &m2).await), ErrorCode::None);
    let old_epoch = broker_epoch(&c, 2).await;
    // B is killed right after m2 was acknowledged (its HW checkpoint is at most 5 s old).
    c.kill_broker(2);
    c.start_broker(2);
    // B recovered m1 and m2 from its own disk and did not truncate them.
    c.wait_for("B hosts d1-0 again with both records", WAIT, || async {
        let r = c.replica(2, "d1", 0).await?;
        (r.role == ReplicaRole::Follower as i32).then_some(())
    })
    .await;
    let b = c.replica(2, "d1", 0).await.unwrap();
    assert_eq!(b.log_end_offset, 2, "B kept its log: {b:?}");
    // B's restart is a new incarnation with a new broker epoch; wait until that incarnation
    // is back in the ISR (the old one is fenced when its session expires).
    let new_epoch = c
        .wait_cluster("B re-registered and unfenced", WAIT, |r| {
            r.brokers
                .iter()
                .any(|b| b.broker_id == 2 && !b.fenced && b.broker_epoch != old_epoch)
        })
        .await
        .brokers
        .iter()
        .find(|b| b.broker_id == 2)
        .unwrap()
        .broker_epoch;
    c.wait_for("B's new incarnation in the ISR", WAIT, || async {
        let r = c.wait_leader_isr(1, "d1", &[1, 2], WAIT).await;
        r.followers
            .iter()
            .any(|f| f.broker_id == 2 && f.in_isr && f.broker_epoch == new_epoch)
            .then_some(())
    })
    .await;
    // A dies; B (in the ISR) becomes leader and still has m2.
    c.kill_broker(1);
    wait_leader(&c, 2, "d1").await;
    let (recs, _, _) = c.consume(2, "d1", 0, 0).await;
    let got: Vec<String> = recs.into_iter().map(|(_, v)| v).collect();
    assert_eq!(got, [m1.clone(), m2.clone()].concat());
    // A comes back and follows; a new write reaches both.
    c.start_broker(1);
    c.wait_leader_isr(2, "d1", &[1, 2], WAIT).await;
    let m3 = values("m3", 0..1);
    assert_eq!(code(&c.produce(2, "d1", -1, &m3).await), ErrorCode::None);
    c.kill_broker(1);
    c.kill_broker(2);
    let (a_recs, a_crcs) = c.read_log_on_disk(1, "d1", 0);
    let (b_recs, b_crcs) = c.read_log_on_disk(2, "d1", 0);
    assert_eq!(a_crcs, b_crcs, "both replicas hold the same batches");
    assert_eq!(a_recs, b_recs);
    let vals: Vec<String> = a_recs.into_iter().map(|(_, v)| v).collect();
    assert_eq!(vals, [m1, m2, m3].concat());
}

/// Defect 2 (inconsistency): A leads with m1 committed and m2 written but not replicated
/// (B paused, acks=1). A pauses; the controller fences it and elects B, which takes m3 at
/// the same offset as m2. When A returns it must not keep m2 (the old rule compared only
/// HWs): it truncates to the divergence point B reports, then copies m3. Afterwards both
/// logs are identical batch by batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hw_defect_2_returning_leader_truncates_to_the_divergence_point() {
    let mut c = two_brokers("d2").await;
    let m1 = values("m1", 0..1);
    assert_eq!(code(&c.produce(1, "d2", -1, &m1).await), ErrorCode::None);
    c.signal_broker(2, "STOP");
    // A fetch B sent before it stopped may still be waiting on A (long poll), and its answer
    // would carry m2 into B's socket. Wait until A has no follower fetch in flight (B is its
    // only follower) and has served none from B for longer than the fetch wait (500 ms).
    // (Time alone was not enough: on a loaded machine a long poll's deadline fires late.)
    let metrics = std::net::SocketAddr::from(([127, 0, 0, 1], c.broker_metrics_ports[0]));
    c.wait_for("B's last fetch answered", WAIT, || async {
        let r = c.replica(1, "d2", 0).await?;
        let f = r.followers.iter().find(|f| f.broker_id == 2)?;
        let (_, body) = keel_tests::http::http_get(metrics, "/metrics").await?;
        let in_flight = keel_tests::http::sample(
            &body,
            "keel_broker_fetch_requests_in_flight{source=\"follower\"}",
        )?;
        (keel_tests::data::now_ms() - f.last_fetch_time_ms > 700 && in_flight == 0.0).then_some(())
    })
    .await;
    let m2 = values("m2", 0..1);
    assert_eq!(code(&c.produce(1, "d2", 1, &m2).await), ErrorCode::None);
    c.signal_broker(1, "STOP");
    c.signal_broker(2, "CONT");
    let epoch = wait_leader(&c, 2, "d2").await;
    assert!(epoch > 0);
    let m3 = values("m3", 0..1);
    let r = c.produce(2, "d2", -1, &m3).await;
    assert_eq!(code(&r), ErrorCode::None);
    assert_eq!(r.base_offset, 1, "m3 takes m2's offset on the new leader");
    c.signal_broker(1, "CONT");
    c.wait_leader_isr(2, "d2", &[1, 2], WAIT).await;
    assert!(
        c.broker_log(1).contains("Truncating d2-0 from LEO 2 to 1"),
        "{}",
        c.broker_log(1)
    );
    c.kill_broker(1);
    c.kill_broker(2);
    let (a_recs, a_crcs) = c.read_log_on_disk(1, "d2", 0);
    let (b_recs, b_crcs) = c.read_log_on_disk(2, "d2", 0);
    assert_eq!(a_crcs, b_crcs, "both replicas hold the same batches");
    assert_eq!(a_recs, b_recs);
    let vals: Vec<String> = a_recs.into_iter().map(|(_, v)| v).collect();
    assert_eq!(
        vals,
        [m1, m3].concat(),
        "m2 (acks=1, never committed) is gone everywhere"
    );
}
