//! Automatic preferred-leader rebalance on the real binaries (issue #3, Kafka
//! `auto.leader.rebalance.enable`): a partition whose preferred replica lost leadership gets it
//! back once that replica is again in the ISR, with leader epoch + 1, and no acknowledged
//! record is lost across the move.

use std::time::Duration;

use keel_proto::ErrorCode;
use keel_tests::Endpoints;
use keel_tests::data::assigned_topic;
use keel_tests::data::{code, values};
use keel_tests::process::{Cluster, Options};

const WAIT: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leadership_returns_to_the_preferred_replica_once_it_is_back_in_the_isr() {
    let mut c = Cluster::start_opts(
        3,
        3,
        Options {
            controller_args: vec![
                "--leader-imbalance-check-interval-seconds".into(),
                "1".into(),
            ],
            ..Options::default()
        },
    );
    c.wait_unfenced(&[1, 2, 3], WAIT).await;
    c.create_topic(assigned_topic("rb", &[&[1, 2, 3]]), WAIT)
        .await;
    c.set_topic_config("rb", "min.insync.replicas", "2", WAIT)
        .await;
    let first = c.wait_leader_isr(1, "rb", &[1, 2, 3], WAIT).await;
    let mut acked = values("a", 0..5);
    assert_eq!(code(&c.produce(1, "rb", -1, &acked).await), ErrorCode::None);

    // The preferred replica dies: broker 2 (next in replica order) leads.
    c.kill_broker(1);
    let moved = c.wait_leader_isr(2, "rb", &[2, 3], WAIT).await;
    assert!(moved.leader_epoch > first.leader_epoch);
    let more = values("b", 0..5);
    assert_eq!(code(&c.produce(2, "rb", -1, &more).await), ErrorCode::None);
    acked.extend(more);

    // It returns, catches up and rejoins the ISR; the next rebalance check (1 s) hands it
    // leadership back with a new leader epoch. (The rejoin and the move are two changes: the
    // leader must not move to a replica outside the ISR.)
    c.start_broker(1);
    let back = c.wait_leader_isr(1, "rb", &[1, 2, 3], WAIT).await;
    assert!(back.leader_epoch > moved.leader_epoch, "{back:?} {moved:?}");
    let last = values("c", 0..5);
    assert_eq!(code(&c.produce(1, "rb", -1, &last).await), ErrorCode::None);
    acked.extend(last);

    // Nothing acknowledged was lost across the two leader changes.
    let (records, _, hw) = c.consume(1, "rb", 0, 0).await;
    let read: Vec<String> = records.into_iter().map(|(_, v)| v).collect();
    assert_eq!(read, acked, "hw {hw}");
    // The active controller said why leadership moved.
    let controller_logs: String = c
        .controller_ids()
        .iter()
        .map(|i| {
            std::fs::read_to_string(c.dir.path().join(format!("controller-{i}.log")))
                .unwrap_or_default()
        })
        .collect();
    assert!(
        controller_logs.contains("preferred leader rebalance")
            && controller_logs.contains("Leader of rb-0: 2 -> 1"),
        "no rebalance lines in the controller logs:\n{}",
        c.logs()
    );
}
