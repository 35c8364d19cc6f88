//! Issue #18 on the real binaries, from the BrokerService's side: requests an outside client
//! can send (generated from `broker.proto`, nothing of Keel's client) that must be refused or
//! bounded before they change anything — follower impostors (item 3), Fetch `max_bytes`
//! (item 2).

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::data::{batch, code, decode, values};
use common::{Cluster, Options, assigned_topic};
use keel_proto::ErrorCode;
use keel_proto::broker::{
    FetchPartition, FetchPartitionData, FetchReply, FetchRequest, FetchTopic, ReplicaDescription,
};

const WAIT: Duration = Duration::from_secs(30);

/// A cluster whose brokers are not fenced for 10 s without heartbeats, so a follower can be
/// SIGSTOPped for a few checks without changing the ISR.
fn cluster() -> Cluster {
    Cluster::start_opts(
        3,
        2,
        Options {
            session_timeout_ms: 10_000,
            ..Options::default()
        },
    )
}

fn code_of(e: &Option<keel_proto::common::Error>) -> ErrorCode {
    ErrorCode::from_proto(e.as_ref()).unwrap()
}

async fn leader_view(c: &Cluster, topic: &str) -> ReplicaDescription {
    c.replica(1, topic, 0).await.expect("broker 1 describes")
}

fn follower_leo(r: &ReplicaDescription, id: i32) -> i64 {
    r.followers
        .iter()
        .find(|f| f.broker_id == id)
        .expect("follower state")
        .log_end_offset
}

/// A fetch of `topic`-0 from `fetch_offset` with `replica_id`, `broker_epoch` and limits.
#[allow(clippy::too_many_arguments)]
async fn raw_fetch(
    c: &Cluster,
    topic: &str,
    replica_id: i32,
    broker_epoch: i64,
    fetch_offset: i64,
    current_leader_epoch: Option<i32>,
    max_bytes: i32,
    partition_max_bytes: i32,
) -> FetchReply {
    c.broker_client(1)
        .fetch(FetchRequest {
            replica_id,
            broker_epoch,
            max_wait_ms: 0,
            min_bytes: 0,
            max_bytes,
            isolation_level: 0,
            topics: vec![FetchTopic {
                topic: topic.into(),
                topic_id: Bytes::new(),
                partitions: vec![FetchPartition {
                    partition: 0,
                    fetch_offset,
                    current_leader_epoch,
                    last_fetched_epoch: -1,
                    log_start_offset: if replica_id >= 0 { 0 } else { -1 },
                    partition_max_bytes,
                }],
            }],
        })
        .await
        .unwrap()
        .into_inner()
}

fn partition(reply: &FetchReply) -> &FetchPartitionData {
    &reply.responses[0].partitions[0]
}

/// Item 3: a Fetch posing as follower 2 with broker epoch -1, an older or a newer epoch is
/// refused with STALE_BROKER_EPOCH and leaves the leader's view of follower 2 unchanged
/// (before the fix, epoch -1 was served as a follower fetch and reset its LEO 25 -> 0, and
/// an older epoch got NOT_LEADER_OR_FOLLOWER). The real follower is SIGSTOPped so that only
/// the impostor's fetches could move its state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follower_impostors_get_stale_broker_epoch_and_change_nothing() {
    let c = cluster();
    c.wait_unfenced(&[1, 2], WAIT).await;
    c.create_topic(assigned_topic("imp", &[&[1, 2]]), WAIT)
        .await;
    c.wait_leader_isr(1, "imp", &[1, 2], WAIT).await;
    let r = c.produce(1, "imp", -1, &values("v", 0..25)).await;
    assert_eq!(code(&r), ErrorCode::None, "{r:?}");
    let view = c
        .wait_for("follower 2 at LEO 25 on the leader", WAIT, || async {
            let v = c.replica(1, "imp", 0).await?;
            (follower_leo(&v, 2) == 25).then_some(v)
        })
        .await;
    let registered = c.try_describe_replicas(2).await.unwrap().broker_epoch;
    assert!(registered >= 0);
    let before = *view.followers.iter().find(|f| f.broker_id == 2).unwrap();
    c.signal_broker(2, "STOP");
    let epoch = Some(view.leader_epoch);
    for impostor in [-1, registered - 1, registered + 1] {
        let reply = raw_fetch(&c, "imp", 2, impostor, 0, epoch, 1 << 20, 1 << 20).await;
        let p = partition(&reply);
        assert_eq!(
            code_of(&p.error),
            ErrorCode::StaleBrokerEpoch,
            "broker_epoch {impostor} (registered {registered}): {p:?}"
        );
        assert!(p.records.is_empty());
        let now = leader_view(&c, "imp").await;
        let f = now.followers.iter().find(|f| f.broker_id == 2).unwrap();
        assert_eq!(
            (f.log_end_offset, f.broker_epoch),
            (before.log_end_offset, before.broker_epoch),
            "broker_epoch {impostor}: the leader's view of follower 2 changed"
        );
        // Times are reported as wall-clock ms converted from the leader's monotonic clock,
        // which moves them by a millisecond between two descriptions; a served fetch would
        // set the time of the fetch (this one came after the SIGSTOP).
        assert!(
            (f.last_fetch_time_ms - before.last_fetch_time_ms).abs() <= 2,
            "broker_epoch {impostor}: last fetch time {} -> {}",
            before.last_fetch_time_ms,
            f.last_fetch_time_ms
        );
        assert_eq!(now.high_watermark, 25);
    }
    // The registered epoch is what identifies the follower: it is served.
    let reply = raw_fetch(&c, "imp", 2, registered, 25, epoch, 1 << 20, 1 << 20).await;
    assert_eq!(code_of(&partition(&reply).error), ErrorCode::None);
    assert_eq!(follower_leo(&leader_view(&c, "imp").await, 2), 25);
    c.signal_broker(2, "CONT");
}

/// Item 2: six batches of ~1.2 KB; a consumer fetch with `max_bytes` 1000, 1 and 0 and
/// `partition_max_bytes` 1 MiB returns exactly the first batch (KIP-74), not the partition's
/// whole 1 MiB as before the fix; 2.5 batches' worth returns two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_max_bytes_bounds_the_whole_reply() {
    let c = cluster();
    c.wait_unfenced(&[1, 2], WAIT).await;
    c.create_topic(assigned_topic("tb", &[&[1, 2]]), WAIT).await;
    c.wait_leader_isr(1, "tb", &[1, 2], WAIT).await;

    // Item 2: six batches of ~1.2 KB; max_bytes 1000, 1 and 0 with partition_max_bytes 1 MiB
    // return exactly the first batch (KIP-74), not the partition's 1 MiB.
    let mut sizes = Vec::new();
    for b in 0..6 {
        let records = batch(&values(&format!("b{b}-{}", "x".repeat(90)), 0..10));
        sizes.push(records.len());
        let r = c
            .produce_raw(1, "tb", 0, -1, 5000, records, None)
            .await
            .unwrap();
        assert_eq!(code(&r), ErrorCode::None, "{r:?}");
    }
    for max_bytes in [1000, 1, 0] {
        let reply = raw_fetch(&c, "tb", -1, -1, 0, None, max_bytes, 1 << 20).await;
        let p = partition(&reply);
        assert_eq!(code_of(&p.error), ErrorCode::None);
        let (_, crcs) = decode(&p.records);
        assert_eq!(
            (crcs.len(), p.records.len()),
            (1, sizes[0]),
            "max_bytes {max_bytes}: only the first batch"
        );
    }
    let two_and_a_half = (sizes[0] + sizes[1] + sizes[2] / 2) as i32;
    let reply = raw_fetch(&c, "tb", -1, -1, 0, None, two_and_a_half, 1 << 20).await;
    assert_eq!(
        decode(&partition(&reply).records).1.len(),
        2,
        "max_bytes of 2.5 batches: two"
    );
}
