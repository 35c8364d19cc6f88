//! DeleteRecords (KIP-107) on the Kafka listener, against three in-process brokers with
//! real logs: the leader moves the log start and answers once every ISR member took it
//! (low watermark), followers take it from their fetches, reads below it are out of range,
//! the refusals carry Kafka's codes, and the start survives a restart of the leader.

use std::net::SocketAddr;
use std::time::Duration;

use kafka_protocol::messages::delete_records_request::{
    DeleteRecordsPartition, DeleteRecordsTopic,
};
use kafka_protocol::messages::{ApiKey, DeleteRecordsRequest, DeleteRecordsResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use keel_proto::ErrorCode;
use keel_tests::data::{assigned_topic, code, values};
use keel_tests::kafka::call;
use keel_tests::{Endpoints, InProcessCluster};

const WAIT: Duration = Duration::from_secs(20);
const TOPIC: &str = "dr";

/// One DeleteRecords v2 on a fresh connection to `addr`: `(topic, partition, offset)` each;
/// the answers as `(partition, low watermark, error code)` in request order.
async fn delete_records(
    addr: SocketAddr,
    asked: &[(&str, i32, i64)],
    timeout_ms: i32,
) -> Vec<(i32, i64, i16)> {
    let req = DeleteRecordsRequest::default()
        .with_timeout_ms(timeout_ms)
        .with_topics(
            asked
                .iter()
                .map(|(t, p, o)| {
                    DeleteRecordsTopic::default()
                        .with_name(TopicName(StrBytes::from_string(t.to_string())))
                        .with_partitions(vec![
                            DeleteRecordsPartition::default()
                                .with_partition_index(*p)
                                .with_offset(*o),
                        ])
                })
                .collect(),
        );
    let resp: DeleteRecordsResponse = call(addr, ApiKey::DeleteRecords, 2, &req).await;
    resp.topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| (p.partition_index, p.low_watermark, p.error_code))
        })
        .collect()
}

/// The log start offset of `TOPIC`-0 on each of brokers 1-3.
async fn starts(c: &InProcessCluster) -> Vec<i64> {
    let mut out = Vec::new();
    for id in 1..=3 {
        let r = c.replica(id, TOPIC, 0).await.expect("hosted");
        out.push(r.log_start_offset);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_records_moves_every_replicas_log_start_and_survives_a_restart() {
    let mut c = InProcessCluster::start(1, 3);
    c.wait_unfenced(&[1, 2, 3], WAIT).await;
    c.create_topic(assigned_topic(TOPIC, &[&[1, 2, 3]]), WAIT)
        .await;
    c.wait_leader_isr(1, TOPIC, &[1, 2, 3], WAIT).await;
    for i in 0..10 {
        let r = c
            .produce(1, TOPIC, -1, &values(&format!("b{i}"), 0..10))
            .await;
        assert_eq!(code(&r), ErrorCode::None);
    }
    let leader = c.kafka_addr(1);
    // The leader moves its start to 35 (inside a batch) and answers once the ISR took it.
    assert_eq!(
        delete_records(leader, &[(TOPIC, 0, 35)], 10_000).await,
        [(0, 35, 0)]
    );
    assert_eq!(starts(&c).await, [35, 35, 35], "every ISR member took it");
    let r = c
        .fetch_once(1, TOPIC, 0, 34)
        .await
        .expect("the broker answers");
    assert_eq!(
        ErrorCode::from_proto(r.error.as_ref()).unwrap(),
        ErrorCode::OffsetOutOfRange,
        "{r:?}"
    );
    // Refusals, each with Kafka's code; nothing moves.
    assert_eq!(
        delete_records(
            leader,
            &[
                (TOPIC, 0, 101),
                (TOPIC, 0, -2),
                (TOPIC, 7, 1),
                ("no-such-topic", 0, 1),
            ],
            1_000
        )
        .await,
        [
            (0, -1, ErrorCode::OffsetOutOfRange.code()),
            (0, -1, ErrorCode::OffsetOutOfRange.code()),
            (7, -1, ErrorCode::UnknownTopicOrPartition.code()),
            (0, -1, ErrorCode::UnknownTopicOrPartition.code()),
        ]
    );
    assert_eq!(
        delete_records(c.kafka_addr(2), &[(TOPIC, 0, 50)], 1_000).await,
        [(0, -1, ErrorCode::NotLeaderOrFollower.code())],
        "a follower refuses"
    );
    // Below the start: nothing to do, the low watermark as it is.
    assert_eq!(
        delete_records(leader, &[(TOPIC, 0, 20)], 1_000).await,
        [(0, 35, 0)]
    );
    // -1: up to the high watermark.
    assert_eq!(
        delete_records(leader, &[(TOPIC, 0, -1)], 10_000).await,
        [(0, 100, 0)]
    );
    assert_eq!(starts(&c).await, [100, 100, 100]);
    // New records after it are read from the start on.
    let r = c.produce(1, TOPIC, -1, &values("after", 0..5)).await;
    assert_eq!((code(&r), r.base_offset), (ErrorCode::None, 100));
    // The start survives a crash of the leader (kill, restart from its files).
    c.kill_broker(1);
    c.start_broker(1);
    c.wait_unfenced(&[1, 2, 3], WAIT).await;
    c.wait_for("broker 1 to host the partition again", WAIT, || async {
        c.replica(1, TOPIC, 0)
            .await
            .filter(|r| r.log_end_offset == 105)
            .map(|r| r.log_start_offset)
    })
    .await;
    assert_eq!(starts(&c).await, [100, 100, 100]);

    // A compacted topic's records are not deleted (its cleanup.policy lacks delete).
    let mut compacted = assigned_topic("dr-compacted", &[&[2, 3, 1]]);
    compacted.configs.push(keel_proto::controller::ConfigEntry {
        name: "cleanup.policy".into(),
        value: Some("compact".into()),
    });
    c.create_topic(compacted, WAIT).await;
    c.wait_leader_isr(2, "dr-compacted", &[2, 3, 1], WAIT).await;
    assert_eq!(
        delete_records(c.kafka_addr(2), &[("dr-compacted", 0, -1)], 1_000).await,
        [(0, -1, ErrorCode::PolicyViolation.code())]
    );
}

/// A replica that comes back after the records were deleted in the middle of a batch: the
/// leader's log start is inside its first batch, so the replica's empty log restarts at the
/// batch's base, takes the batch and moves its start up to the leader's (KAFKA-6975). The
/// fresh-user trial saw such a replica fail every append ("expected base offset 60, got
/// 10") and never rejoin the ISR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_back_after_a_delete_inside_a_batch_catches_up() {
    let mut c = InProcessCluster::start(1, 3);
    c.wait_unfenced(&[1, 2, 3], WAIT).await;
    c.create_topic(assigned_topic(TOPIC, &[&[1, 2, 3]]), WAIT)
        .await;
    c.wait_leader_isr(1, TOPIC, &[1, 2, 3], WAIT).await;
    c.kill_broker(3);
    c.wait_leader_isr(1, TOPIC, &[1, 2], WAIT).await;
    // 10 records (one batch), then 100 in one batch: the start goes inside the second.
    for (prefix, n) in [("a", 10), ("b", 100)] {
        let r = c.produce(1, TOPIC, -1, &values(prefix, 0..n)).await;
        assert_eq!(code(&r), ErrorCode::None);
    }
    assert_eq!(
        delete_records(c.kafka_addr(1), &[(TOPIC, 0, 60)], 10_000).await,
        [(0, 60, 0)]
    );
    c.start_broker(3);
    c.wait_leader_isr(1, TOPIC, &[1, 2, 3], WAIT).await;
    let r = c.replica(3, TOPIC, 0).await.expect("hosted");
    assert_eq!((r.log_start_offset, r.log_end_offset), (60, 110), "{r:?}");
}
