//! Issue #18 on the real binaries, from the BrokerService's side: requests an outside client
//! can send (generated from `broker.proto`, nothing of Keel's client) that must be refused or
//! bounded before they change anything — follower impostors (item 3), Fetch `max_bytes`
//! (item 2), Produce `timeout_ms` (item 4), InitProducerId (item 5), echoed input (item 6)
//! and field bounds.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use keel_proto::ErrorCode;
use keel_proto::broker::{
    FetchPartition, FetchPartitionData, FetchReply, FetchRequest, FetchSessionRequest, FetchTopic,
    InitProducerIdReply, InitProducerIdRequest, MetadataRequest, ProducePartitionData,
    ProduceReply, ProduceRequest, ProduceTopicData, ReplicaDescription,
};
use keel_tests::Endpoints;
use keel_tests::data::assigned_topic;
use keel_tests::data::{batch, code, decode, idempotent_batch, values};
use keel_tests::process::{Cluster, Options};

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

fn message_of(e: &Option<keel_proto::common::Error>) -> String {
    e.as_ref().map(|e| e.message.clone()).unwrap_or_default()
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
            session: None,
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

async fn produce_request(c: &Cluster, req: ProduceRequest) -> ProduceReply {
    c.broker_client(1).produce(req).await.unwrap().into_inner()
}

fn produce_to(
    topic: &str,
    acks: i32,
    timeout_ms: i32,
    transactional_id: &str,
    records: Bytes,
) -> ProduceRequest {
    ProduceRequest {
        acks,
        timeout_ms,
        transactional_id: transactional_id.into(),
        topics: vec![ProduceTopicData {
            name: topic.into(),
            topic_id: Bytes::new(),
            partitions: vec![ProducePartitionData {
                index: 0,
                records,
                current_leader_epoch: None,
            }],
        }],
    }
}

async fn init_producer_id(c: &Cluster, req: InitProducerIdRequest) -> InitProducerIdReply {
    c.broker_client(1)
        .init_producer_id(req)
        .await
        .unwrap()
        .into_inner()
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
/// whole 1 MiB as before the fix; 2.5 batches' worth returns two; negative limits are
/// refused whole with INVALID_REQUEST.
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
    // Negative limits are refused whole.
    let reply = raw_fetch(&c, "tb", -1, -1, 0, None, -5, 1 << 20).await;
    assert_eq!(code_of(&reply.error), ErrorCode::InvalidRequest);
    assert!(
        message_of(&reply.error).starts_with("max_bytes:"),
        "{reply:?}"
    );
    assert!(reply.responses.is_empty());
}

/// Item 4: a negative `timeout_ms` is refused with INVALID_REQUEST before the append (before
/// the fix it was appended, committed and answered REQUEST_TIMED_OUT); `timeout_ms` 0 with
/// acks=all appends as Kafka does and its REQUEST_TIMED_OUT says where the batch is and that
/// it may still be committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_timeout_is_checked_before_the_append() {
    let c = cluster();
    c.wait_unfenced(&[1, 2], WAIT).await;
    c.create_topic(assigned_topic("tb", &[&[1, 2]]), WAIT).await;
    c.wait_leader_isr(1, "tb", &[1, 2], WAIT).await;

    // Item 4: a negative timeout is refused before the append; the log does not change.
    let r = c.produce(1, "tb", -1, &values("first", 0..3)).await;
    assert_eq!(code(&r), ErrorCode::None, "{r:?}");
    let leo = leader_view(&c, "tb").await.log_end_offset;
    for timeout in [-1, i32::MIN] {
        let reply = produce_request(
            &c,
            produce_to("tb", -1, timeout, "", batch(&values("neg", 0..1))),
        )
        .await;
        assert_eq!(
            code_of(&reply.error),
            ErrorCode::InvalidRequest,
            "{reply:?}"
        );
        assert!(message_of(&reply.error).starts_with("timeout_ms:"));
        assert!(reply.responses.is_empty());
    }
    // timeout 0 with acks=all and a follower that cannot fetch (stopped): appended, as in
    // Kafka, and the REQUEST_TIMED_OUT says where and that it may still be committed.
    c.signal_broker(2, "STOP");
    let reply = produce_request(
        &c,
        produce_to("tb", -1, 0, "", batch(&values("zero", 0..1))),
    )
    .await;
    c.signal_broker(2, "CONT");
    let p = &reply.responses[0].partitions[0];
    assert_eq!(code_of(&p.error), ErrorCode::RequestTimedOut, "{p:?}");
    assert_eq!(
        p.base_offset, leo,
        "nothing was appended by the refused requests"
    );
    let m = message_of(&p.error);
    assert!(
        m.contains(&format!("offset {leo}")) && m.contains("may still be committed"),
        "{m}"
    );
}

/// Item 5: InitProducerId as KIP-360 (a re-initialising producer gets its epoch bumped and
/// Produce accepts it; the old epoch is then stale), int16 epochs, and transactional ids
/// refused with UNSUPPORTED_VERSION in InitProducerId and Produce (nothing appended). Before
/// the fix every InitProducerId got a new id with epoch 0 and transactional ids were
/// accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_producer_id_bumps_epochs_and_refuses_transactions() {
    let c = cluster();
    c.wait_unfenced(&[1, 2], WAIT).await;
    c.create_topic(assigned_topic("tb", &[&[1, 2]]), WAIT).await;
    c.wait_leader_isr(1, "tb", &[1, 2], WAIT).await;

    // Item 5: KIP-360. A new producer gets (id, 0); re-initialising with (id, 0) bumps to
    // (id, 1), which Produce accepts from sequence 0; (id, 0) is then stale.
    let new = init_producer_id(
        &c,
        InitProducerIdRequest {
            producer_id: -1,
            producer_epoch: -1,
            ..Default::default()
        },
    )
    .await;
    assert_eq!(code_of(&new.error), ErrorCode::None, "{new:?}");
    assert_eq!(new.producer_epoch, 0);
    let pid = new.producer_id;
    let r = c
        .produce_raw(
            1,
            "tb",
            0,
            -1,
            5000,
            idempotent_batch(pid, 0, 0, &values("p0", 0..2)),
            None,
        )
        .await
        .unwrap();
    assert_eq!(code(&r), ErrorCode::None, "{r:?}");
    let bumped = init_producer_id(
        &c,
        InitProducerIdRequest {
            producer_id: pid,
            producer_epoch: 0,
            ..Default::default()
        },
    )
    .await;
    assert_eq!(
        (
            code_of(&bumped.error),
            bumped.producer_id,
            bumped.producer_epoch
        ),
        (ErrorCode::None, pid, 1),
        "{bumped:?}"
    );
    let r = c
        .produce_raw(
            1,
            "tb",
            0,
            -1,
            5000,
            idempotent_batch(pid, 1, 0, &values("p1", 0..2)),
            None,
        )
        .await
        .unwrap();
    assert_eq!(
        code(&r),
        ErrorCode::None,
        "the bumped epoch is accepted: {r:?}"
    );
    let stale = init_producer_id(
        &c,
        InitProducerIdRequest {
            producer_id: pid,
            producer_epoch: 0,
            ..Default::default()
        },
    )
    .await;
    assert_eq!(
        (
            code_of(&stale.error),
            stale.producer_id,
            stale.producer_epoch
        ),
        (ErrorCode::InvalidProducerEpoch, -1, -1),
        "{stale:?}"
    );
    let out_of_range = init_producer_id(
        &c,
        InitProducerIdRequest {
            producer_id: pid,
            producer_epoch: 40_000,
            ..Default::default()
        },
    )
    .await;
    assert_eq!(code_of(&out_of_range.error), ErrorCode::InvalidRequest);
    assert!(message_of(&out_of_range.error).starts_with("producer_epoch:"));
    // Transactional ids: Kafka's "not supported" code, in InitProducerId and in Produce
    // (nothing appended).
    let tx = init_producer_id(
        &c,
        InitProducerIdRequest {
            transactional_id: "tx-1".into(),
            producer_id: -1,
            producer_epoch: -1,
            ..Default::default()
        },
    )
    .await;
    assert_eq!(
        (code_of(&tx.error), tx.producer_id),
        (ErrorCode::UnsupportedVersion, -1)
    );
    let leo = leader_view(&c, "tb").await.log_end_offset;
    let reply = produce_request(
        &c,
        produce_to("tb", -1, 5000, "tx-1", batch(&values("tx", 0..1))),
    )
    .await;
    assert_eq!(
        code_of(&reply.responses[0].partitions[0].error),
        ErrorCode::UnsupportedVersion
    );
    assert_eq!(leader_view(&c, "tb").await.log_end_offset, leo);
}

/// Item 6: a 1 MB topic name is refused with a short INVALID_REQUEST instead of coming back
/// twice in the Metadata reply; over-long names in Produce are refused the same way and
/// append nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_topic_names_are_refused_without_echo() {
    let c = cluster();
    c.wait_unfenced(&[1, 2], WAIT).await;
    c.create_topic(assigned_topic("tb", &[&[1, 2]]), WAIT).await;
    c.wait_leader_isr(1, "tb", &[1, 2], WAIT).await;

    // Item 6: a 1 MB topic name is refused with a short message, not echoed back.
    let huge = "n".repeat(1 << 20);
    let reply = c
        .broker_client(1)
        .metadata(MetadataRequest {
            topics: vec![huge.clone()],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(code_of(&reply.error), ErrorCode::InvalidRequest);
    assert!(reply.topics.is_empty());
    let m = message_of(&reply.error);
    assert!(m.starts_with("topics[0]:") && m.len() < 300, "{m}");
    // Over-long names in data-plane requests too.
    let mut long = BytesMut::new();
    long.extend_from_slice(&batch(&values("long", 0..1)));
    let reply = produce_request(&c, produce_to(&huge, 1, 5000, "", long.freeze())).await;
    assert_eq!(code_of(&reply.error), ErrorCode::InvalidRequest);
    assert!(message_of(&reply.error).len() < 300);
    assert_eq!(leader_view(&c, "tb").await.log_end_offset, 0);
}

/// A follower fetch in an incremental fetch session (KIP-227) with `session` =
/// (session_id, epoch); `from` lists `topic`-0 at that fetch offset, or nothing.
async fn session_fetch(
    c: &Cluster,
    topic: &str,
    (replica_id, broker_epoch): (i32, i64),
    (session_id, epoch): (i32, i32),
    from: Option<(i64, i32)>,
) -> FetchReply {
    let topics = from
        .map(|(fetch_offset, leader_epoch)| FetchTopic {
            topic: topic.into(),
            topic_id: Bytes::new(),
            partitions: vec![FetchPartition {
                partition: 0,
                fetch_offset,
                current_leader_epoch: Some(leader_epoch),
                last_fetched_epoch: -1,
                log_start_offset: 0,
                partition_max_bytes: 1 << 20,
            }],
        })
        .into_iter()
        .collect();
    c.broker_client(1)
        .fetch(FetchRequest {
            replica_id,
            broker_epoch,
            max_wait_ms: 0,
            min_bytes: 0,
            max_bytes: 1 << 20,
            isolation_level: 0,
            topics,
            session: Some(FetchSessionRequest {
                session_id,
                epoch,
                forgotten: Vec::new(),
            }),
        })
        .await
        .unwrap()
        .into_inner()
}

/// KIP-227 on the wire: a session is for followers only; the leader keeps the partitions a
/// session lists and answers only what changed; a wrong epoch closes the session and an
/// unknown one is refused at the top level with nothing read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_sessions_answer_only_changes_and_refuse_bad_epochs() {
    let c = cluster();
    c.wait_unfenced(&[1, 2], WAIT).await;
    c.create_topic(assigned_topic("ses", &[&[1, 2]]), WAIT)
        .await;
    c.wait_leader_isr(1, "ses", &[1, 2], WAIT).await;
    let r = c.produce(1, "ses", -1, &values("v", 0..25)).await;
    assert_eq!(code(&r), ErrorCode::None, "{r:?}");
    let view = c
        .wait_for("follower 2 at LEO 25 on the leader", WAIT, || async {
            let v = c.replica(1, "ses", 0).await?;
            (follower_leo(&v, 2) == 25).then_some(v)
        })
        .await;
    let me = (2, c.try_describe_replicas(2).await.unwrap().broker_epoch);
    let epoch = view.leader_epoch;
    // The real follower stays out of the way (10 s session timeout).
    c.signal_broker(2, "STOP");

    // Consumers have no sessions.
    let reply = session_fetch(&c, "ses", (-1, -1), (0, 0), Some((0, epoch))).await;
    assert_eq!(
        code_of(&reply.error),
        ErrorCode::InvalidRequest,
        "{reply:?}"
    );
    assert!(message_of(&reply.error).contains("replica_id"), "{reply:?}");
    assert!(reply.responses.is_empty());

    // Open: the full answer and a session id.
    let reply = session_fetch(&c, "ses", me, (0, 0), Some((25, epoch))).await;
    assert_eq!(code_of(&reply.error), ErrorCode::None, "{reply:?}");
    let id = reply.session.expect("a session").session_id;
    assert!(id > 0);
    assert_eq!(partition(&reply).high_watermark, 25);
    // Nothing listed, nothing changed: nothing answered.
    let reply = session_fetch(&c, "ses", me, (id, 1), None).await;
    assert_eq!(code_of(&reply.error), ErrorCode::None, "{reply:?}");
    assert!(reply.responses.is_empty(), "{reply:?}");
    assert_eq!(reply.session.unwrap().session_id, id);
    // New records: the leader reads the partition from the offset it keeps for the session.
    let r = c.produce(1, "ses", 1, &values("w", 0..5)).await;
    assert_eq!(code(&r), ErrorCode::None, "{r:?}");
    let reply = session_fetch(&c, "ses", me, (id, 2), None).await;
    let p = partition(&reply);
    assert_eq!(code_of(&p.error), ErrorCode::None, "{p:?}");
    assert_eq!(decode(&p.records).0.first().map(|r| r.0), Some(25), "{p:?}");

    // The same epoch again (a resent request): refused, nothing read, the session closed.
    let reply = session_fetch(&c, "ses", me, (id, 2), None).await;
    assert_eq!(
        code_of(&reply.error),
        ErrorCode::InvalidFetchSessionEpoch,
        "{reply:?}"
    );
    assert!(reply.responses.is_empty() && reply.session.is_none());
    let reply = session_fetch(&c, "ses", me, (id, 3), None).await;
    assert_eq!(
        code_of(&reply.error),
        ErrorCode::FetchSessionIdNotFound,
        "{reply:?}"
    );
    // Another replica cannot use a session it did not open.
    let reply = session_fetch(&c, "ses", me, (0, 0), Some((25, epoch))).await;
    let id = reply.session.unwrap().session_id;
    let reply = session_fetch(&c, "ses", (3, me.1), (id, 1), None).await;
    assert_eq!(
        code_of(&reply.error),
        ErrorCode::FetchSessionIdNotFound,
        "{reply:?}"
    );
    assert!(reply.responses.is_empty());
    c.signal_broker(2, "CONT");
}

/// `max_incremental_fetch_session_cache_slots = 0` (Kafka's way to turn sessions off): a
/// follower's opening request is answered in full with session id 0, and replication runs on
/// full fetches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_session_slots_followers_replicate_on_full_fetches() {
    let c = Cluster::start_opts(
        3,
        2,
        Options {
            session_timeout_ms: 10_000,
            broker_args: vec![
                "--max-incremental-fetch-session-cache-slots".into(),
                "0".into(),
            ],
            ..Options::default()
        },
    );
    c.wait_unfenced(&[1, 2], WAIT).await;
    c.create_topic(assigned_topic("full", &[&[1, 2]]), WAIT)
        .await;
    c.wait_leader_isr(1, "full", &[1, 2], WAIT).await;
    for round in 0..3 {
        let r = c
            .produce(1, "full", -1, &values(&format!("r{round}"), 0..10))
            .await;
        assert_eq!(code(&r), ErrorCode::None, "{r:?}");
    }
    let view = c
        .wait_for("follower 2 at LEO 30 on the leader", WAIT, || async {
            let v = c.replica(1, "full", 0).await?;
            (follower_leo(&v, 2) == 30).then_some(v)
        })
        .await;
    let me = (2, c.try_describe_replicas(2).await.unwrap().broker_epoch);
    let reply = session_fetch(&c, "full", me, (0, 0), Some((30, view.leader_epoch))).await;
    assert_eq!(code_of(&reply.error), ErrorCode::None, "{reply:?}");
    assert_eq!(
        reply.session.map(|s| s.session_id),
        Some(0),
        "no session made"
    );
    assert_eq!(partition(&reply).high_watermark, 30);
}
