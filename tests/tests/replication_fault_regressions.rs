//! Break-it review scenarios on the real binaries (fresh-eyes review of the broker data
//! plane). Each test asserts Kafka semantics; a failing test is a defect.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use keel_proto::ErrorCode;
use keel_proto::broker::{
    FetchPartition, FetchRequest, FetchTopic, ListOffsetsPartition, ListOffsetsRequest,
    ListOffsetsTopic,
};
use keel_proto::controller::{DeleteTopicState, DeleteTopicsRequest};
use keel_record::RecordBatchBuilder;
use keel_tests::Endpoints;
use keel_tests::data::{assigned_topic, ok};
use keel_tests::data::{batch, code, idempotent_batch, now_ms, values};
use keel_tests::process::{Cluster, Options};

const WAIT: Duration = Duration::from_secs(20);

fn concat(parts: &[Bytes]) -> Bytes {
    let mut b = BytesMut::new();
    for p in parts {
        b.extend_from_slice(p);
    }
    b.freeze()
}

/// `batch` with one byte of the last record flipped: the CRC no longer matches.
fn corrupt(b: Bytes) -> Bytes {
    let mut v = b.to_vec();
    let n = v.len();
    v[n - 1] ^= 0xff;
    Bytes::from(v)
}

fn batch_at(ts: i64, values: &[String]) -> Bytes {
    let mut b = RecordBatchBuilder::new(0);
    for v in values {
        b.append(ts, None, Some(v.as_bytes()), &[]);
    }
    b.build().as_bytes().clone()
}

async fn consumer_fetch(
    c: &Cluster,
    id: i32,
    topic: &str,
    offset: i64,
) -> Result<keel_proto::broker::FetchPartitionData, tonic::Status> {
    let mut cl = c.broker_client(id);
    let r = cl
        .fetch(FetchRequest {
            session: None,
            replica_id: -1,
            broker_epoch: -1,
            max_wait_ms: 0,
            min_bytes: 0,
            max_bytes: 0,
            isolation_level: 0,
            topics: vec![FetchTopic {
                topic: topic.into(),
                topic_id: Bytes::new(),
                partitions: vec![FetchPartition {
                    partition: 0,
                    fetch_offset: offset,
                    current_leader_epoch: None,
                    last_fetched_epoch: -1,
                    log_start_offset: -1,
                    partition_max_bytes: 0,
                }],
            }],
        })
        .await?
        .into_inner();
    Ok(r.responses[0].partitions[0].clone())
}

async fn list_offset(
    c: &Cluster,
    id: i32,
    topic: &str,
    ts: i64,
) -> Option<keel_proto::broker::ListOffsetsPartitionResponse> {
    let mut cl = c.broker_client(id);
    let r = cl
        .list_offsets(ListOffsetsRequest {
            replica_id: -1,
            isolation_level: 0,
            topics: vec![ListOffsetsTopic {
                name: topic.into(),
                partitions: vec![ListOffsetsPartition {
                    partition_index: 0,
                    current_leader_epoch: None,
                    timestamp: ts,
                }],
            }],
        })
        .await
        .ok()?
        .into_inner();
    Some(r.topics[0].partitions[0].clone())
}

/// A Produce whose records hold a valid batch followed by an invalid one (corrupt CRC,
/// sequence gap). Kafka refuses a produce request with more than one batch per partition
/// (`ProduceRequest.validateRecords`, v3+: INVALID_RECORD) so nothing is appended; a NONE
/// answer would mean the producer believes its second batch was written although it was
/// dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn breakit_partial_append_is_not_acknowledged_as_success() {
    let c = Cluster::start(3, 1);
    c.wait_unfenced(&[1], WAIT).await;
    c.create_topic(assigned_topic("p", &[&[1]]), WAIT).await;
    c.wait_leader_isr(1, "p", &[1], WAIT).await;

    let mut failures = Vec::new();
    for acks in [1, -1] {
        let leo0 = c.replica(1, "p", 0).await.unwrap().log_end_offset;
        let records = concat(&[
            batch(&values("good", 0..2)),
            corrupt(batch(&values("bad", 0..2))),
        ]);
        let r = c
            .produce_raw(1, "p", 0, acks, 5000, records, None)
            .await
            .unwrap();
        let leo1 = c.replica(1, "p", 0).await.unwrap().log_end_offset;
        if code(&r) != ErrorCode::InvalidRecord || leo1 != leo0 {
            failures.push(format!(
                "acks={acks} [good][corrupt CRC]: answer {:?} base_offset {}, LEO {leo0} -> {leo1}",
                code(&r),
                r.base_offset
            ));
        }
    }
    // Idempotent: seq 0..1 then a gap (seq 5).
    let leo0 = c.replica(1, "p", 0).await.unwrap().log_end_offset;
    let records = concat(&[
        idempotent_batch(4242, 0, 0, &values("s", 0..2)),
        idempotent_batch(4242, 0, 5, &values("gap", 0..1)),
    ]);
    let r = c
        .produce_raw(1, "p", 0, -1, 5000, records, None)
        .await
        .unwrap();
    let leo1 = c.replica(1, "p", 0).await.unwrap().log_end_offset;
    if code(&r) != ErrorCode::InvalidRecord || leo1 != leo0 {
        failures.push(format!(
            "idempotent [seq 0][seq 5]: answer {:?} base_offset {}, LEO {leo0} -> {leo1}",
            code(&r),
            r.base_offset
        ));
    }

    // ListOffsets MAX_TIMESTAMP (-3, KIP-734) must give the offset of the record with the
    // largest timestamp — never the HW.
    c.create_topic(assigned_topic("ts", &[&[1]]), WAIT).await;
    c.wait_leader_isr(1, "ts", &[1], WAIT).await;
    let now = now_ms();
    for (ts, v) in [
        (now, "newest"),
        (now - 3_600_000, "old1"),
        (now - 7_200_000, "old2"),
    ] {
        let r = c
            .produce_raw(1, "ts", 0, 1, 5000, batch_at(ts, &[v.to_string()]), None)
            .await
            .unwrap();
        assert_eq!(code(&r), ErrorCode::None, "{r:?}");
    }
    c.wait_for("HW 3 on ts-0", WAIT, || async {
        (c.replica(1, "ts", 0).await?.high_watermark == 3).then_some(())
    })
    .await;
    let m = list_offset(&c, 1, "ts", -3).await.unwrap();
    let answered = ErrorCode::from_proto(m.error.as_ref()).unwrap() == ErrorCode::None;
    if !answered || m.offset != 0 || m.timestamp != now {
        failures.push(format!(
            "ListOffsets MAX_TIMESTAMP: want offset 0 timestamp {now}, got offset {} timestamp {}",
            m.offset, m.timestamp
        ));
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// A broker down while its topic is deleted and re-created under the same name (same
/// assignment) must not bring the old topic's data back: Kafka keeps the topic id in each
/// partition directory (`partition.metadata`) and deletes a log whose id is stale. Here the
/// broker's local metadata snapshot predates the old topic (snapshot interval 60 s by default;
/// a long one in this test), so on restart it catches up in one image that only has the new
/// topic and adopts the old log found on disk.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn breakit_recreated_topic_does_not_resurrect_old_data() {
    let mut c = Cluster::start_opts(
        3,
        3,
        Options {
            snapshot_interval_ms: 600_000,
            ..Options::default()
        },
    );
    c.wait_unfenced(&[1, 2, 3], WAIT).await;
    c.create_topic(assigned_topic("t", &[&[1, 2, 3]]), WAIT)
        .await;
    c.wait_leader_isr(1, "t", &[1, 2, 3], WAIT).await;
    let old = values("old", 0..3);
    assert_eq!(code(&c.produce(1, "t", -1, &old).await), ErrorCode::None);
    c.wait_for("broker 3 holds the old data", WAIT, || async {
        (c.replica(3, "t", 0).await?.log_end_offset == 3).then_some(())
    })
    .await;
    c.kill_broker(3);

    let mut client = c.controller_client(c.active_controller(WAIT).await);
    let r = client
        .delete_topics(DeleteTopicsRequest {
            topics: vec![DeleteTopicState {
                name: "t".into(),
                topic_id: Default::default(),
            }],
        })
        .await
        .unwrap()
        .into_inner();
    assert!(ok(&r.error) && ok(&r.topics[0].error), "{r:?}");
    c.wait_for("t deleted on broker 1", WAIT, || async {
        c.replica(1, "t", 0).await.is_none().then_some(())
    })
    .await;
    c.create_topic(assigned_topic("t", &[&[1, 2, 3]]), WAIT)
        .await;
    c.wait_for("new t led by 1", WAIT, || async {
        let r = c.replica(1, "t", 0).await?;
        (r.role == keel_proto::broker::ReplicaRole::Leader as i32).then_some(())
    })
    .await;
    let new = values("new", 0..6);
    for v in new.chunks(3) {
        assert_eq!(code(&c.produce(1, "t", 1, v).await), ErrorCode::None);
    }

    c.start_broker(3);
    c.wait_unfenced(&[1, 2, 3], WAIT).await;
    // Let broker 3 catch up (or diverge).
    let _ = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            if let Some(r) = c.replica(3, "t", 0).await
                && r.log_end_offset == 6
                && r.high_watermark == 6
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    let r3 = c.replica(3, "t", 0).await;
    let r1 = c.replica(1, "t", 0).await;
    for id in [1, 2, 3] {
        c.kill_broker(id);
    }
    let (recs1, crcs1) = c.read_log_on_disk(1, "t", 0);
    let (recs3, crcs3) = c.read_log_on_disk(3, "t", 0);
    let want: Vec<(i64, String)> = new
        .iter()
        .enumerate()
        .map(|(i, v)| (i as i64, v.clone()))
        .collect();
    assert_eq!(recs1, want, "leader");
    assert!(
        recs3 == want && crcs3 == crcs1,
        "broker 3 (restarted) holds {recs3:?} ({crcs3:?}); the leader holds {recs1:?} ({crcs1:?}).\n\
         broker 3: {r3:?}\nbroker 1: {r1:?}"
    );
}

/// Kill -9 of the leader while an acks=all stream runs and a consumer tails it; then read the
/// new leader at the position the consumer reached. Kafka: a fetch at an offset <= the new
/// leader's LEO is never OFFSET_OUT_OF_RANGE, and the HW a client sees never goes back (DESIGN
/// §7 invariant 3): until the new leader's HW reaches its epoch start, a fetch above that HW
/// is answered OFFSET_NOT_AVAILABLE (retriable), never with an HW below the position.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn breakit_consumer_position_valid_after_failover() {
    let mut cluster = Cluster::start(3, 3);
    cluster.wait_unfenced(&[1, 2, 3], WAIT).await;
    cluster
        .create_topic(assigned_topic("f", &[&[1, 2, 3]]), WAIT)
        .await;
    cluster.wait_leader_isr(1, "f", &[1, 2, 3], WAIT).await;
    let mut problems = Vec::new();
    let mut leader = 1;
    let rounds: usize = std::env::var("BREAKIT_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    for round in 0..rounds {
        let c = Arc::new(cluster);
        let stop = Arc::new(AtomicBool::new(false));
        let max_hw = Arc::new(AtomicI64::new(0));
        let prod = {
            let (c, stop) = (c.clone(), stop.clone());
            tokio::spawn(async move {
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    let _ = c
                        .produce_raw(
                            leader,
                            "f",
                            0,
                            -1,
                            2000,
                            batch(&values(&format!("r{round}"), i..i + 1)),
                            None,
                        )
                        .await;
                    i += 1;
                }
            })
        };
        let cons = {
            let (c, stop, max_hw) = (c.clone(), stop.clone(), max_hw.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let pos = max_hw.load(Ordering::Relaxed);
                    if let Ok(p) = consumer_fetch(&c, leader, "f", pos).await
                        && p.error.as_ref().is_none_or(|e| e.code == 0)
                    {
                        max_hw.fetch_max(p.high_watermark, Ordering::Relaxed);
                    }
                }
            })
        };
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let seen = max_hw.load(Ordering::Relaxed);
        c.signal_broker(leader, "KILL");
        stop.store(true, Ordering::Relaxed);
        let _ = prod.await;
        let _ = cons.await;
        // Probe the survivors at `seen` as fast as possible until the new leader serves it.
        let start = Instant::now();
        let mut new_leader = None;
        let mut resolved = false;
        let mut bad = 0;
        while start.elapsed() < Duration::from_secs(15) && !resolved {
            for id in [1, 2, 3].into_iter().filter(|i| *i != leader) {
                let Ok(p) = consumer_fetch(&c, id, "f", seen).await else {
                    continue;
                };
                let code = ErrorCode::from_proto(p.error.as_ref()).unwrap();
                match code {
                    // Not the leader yet, or the new leader's HW has not reached its epoch
                    // start: it may still trail `seen`, so it is not reported (retriable).
                    ErrorCode::NotLeaderOrFollower | ErrorCode::OffsetNotAvailable => {}
                    ErrorCode::None => {
                        new_leader = Some(id);
                        if p.high_watermark < seen {
                            problems.push(format!(
                                "round {round}: new leader {id} answered HW {} < {seen} seen",
                                p.high_watermark
                            ));
                        }
                        resolved = true;
                    }
                    other => {
                        new_leader = Some(id);
                        bad += 1;
                        if bad <= 3 {
                            problems.push(format!(
                                "round {round}: new leader {id} fetch at offset {seen} (the HW the consumer saw on {leader}): {other:?}, reported HW {} (+{:?} after the kill)",
                                p.high_watermark,
                                start.elapsed()
                            ));
                        }
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        eprintln!(
            "round {round}: killed {leader}, seen HW {seen}, new leader {new_leader:?}, {bad} bad answers"
        );
        let Some(nl) = new_leader else {
            panic!("no new leader\n{}", c.logs());
        };
        cluster = Arc::try_unwrap(c).expect("tasks joined");
        cluster.kill_broker(leader); // reap the process killed above
        cluster.start_broker(leader);
        let mut isr = vec![1, 2, 3];
        isr.sort();
        cluster.wait_leader_isr(nl, "f", &isr, WAIT).await;
        leader = nl;
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

/// A consumer fetch asking for more bytes than the broker can send (max_bytes and
/// partition_max_bytes = i32::MAX) over a partition holding more than the gRPC message limit
/// (64 MiB). Kafka caps the answer with the broker's `fetch.max.bytes` (and
/// `message.max.bytes`), so the consumer still makes progress; it must not fail the whole call
/// (or read the whole partition into memory).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn breakit_huge_fetch_is_capped() {
    let c = Cluster::start(3, 1);
    c.wait_unfenced(&[1], WAIT).await;
    c.create_topic(assigned_topic("big", &[&[1]]), WAIT).await;
    c.wait_leader_isr(1, "big", &[1], WAIT).await;
    let payload = "x".repeat(1_000_000);
    for i in 0..70 {
        let r = c
            .produce_raw(
                1,
                "big",
                0,
                1,
                5000,
                batch(&[format!("{i}{payload}")]),
                None,
            )
            .await
            .unwrap();
        assert_eq!(code(&r), ErrorCode::None, "{r:?}");
    }
    let ch = tonic::transport::Endpoint::from_shared(format!("http://{}", c.broker_addr(1)))
        .unwrap()
        .connect_lazy();
    let mut cl = keel_proto::broker::broker_service_client::BrokerServiceClient::new(ch)
        .max_decoding_message_size(usize::MAX);
    let r = cl
        .fetch(FetchRequest {
            session: None,
            replica_id: -1,
            broker_epoch: -1,
            max_wait_ms: 0,
            min_bytes: 0,
            max_bytes: i32::MAX,
            isolation_level: 0,
            topics: vec![FetchTopic {
                topic: "big".into(),
                topic_id: Bytes::new(),
                partitions: vec![FetchPartition {
                    partition: 0,
                    fetch_offset: 0,
                    current_leader_epoch: None,
                    last_fetched_epoch: -1,
                    log_start_offset: -1,
                    partition_max_bytes: i32::MAX,
                }],
            }],
        })
        .await;
    match r {
        Ok(r) => {
            let r = r.into_inner();
            let p = &r.responses[0].partitions[0];
            assert!(
                p.error.as_ref().is_none_or(|e| e.code == 0),
                "{:?}",
                p.error
            );
            assert!(!p.records.is_empty());
        }
        Err(s) => panic!(
            "fetch with max_bytes i32::MAX failed as a whole: {:?}: {}",
            s.code(),
            s.message()
        ),
    }
    // The broker keeps serving.
    let (recs, _, hw) = c.consume(1, "big", 0, 69).await;
    assert_eq!(hw, 70);
    assert_eq!(recs.len(), 1);
}

async fn wait_new_leader(c: &Cluster, topic: &str, not: i32) -> i32 {
    c.wait_for("a new leader", WAIT, || async {
        for id in [1, 2, 3].into_iter().filter(|i| *i != not) {
            if let Some(r) = c.replica(id, topic, 0).await
                && r.role == keel_proto::broker::ReplicaRole::Leader as i32
            {
                return Some(id);
            }
        }
        None
    })
    .await
}

async fn wait_converged(c: &Cluster, topic: &str, ids: &[i32]) -> i64 {
    c.wait_for("replicas converged (same LEO = HW)", WAIT, || async {
        let mut leo = None;
        for id in ids {
            let r = c.replica(*id, topic, 0).await?;
            if r.log_end_offset != r.high_watermark || leo.is_some_and(|l| l != r.log_end_offset) {
                return None;
            }
            leo = Some(r.log_end_offset);
        }
        leo
    })
    .await
}

/// A leader paused (SIGSTOP) past its session: the others elect a new leader and take acks=all
/// writes. The old leader resumes and is written to at once. Its acks=all answer must not be
/// NONE; its acks=1 write is truncated once it follows; every acked write survives; replicas
/// converge to identical batches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn breakit_zombie_leader_after_sigcont() {
    let mut c = Cluster::start(3, 3);
    c.wait_unfenced(&[1, 2, 3], WAIT).await;
    c.create_topic(assigned_topic("z", &[&[1, 2, 3]]), WAIT)
        .await;
    c.set_topic_config("z", "min.insync.replicas", "2", WAIT)
        .await;
    c.wait_leader_isr(1, "z", &[1, 2, 3], WAIT).await;
    c.wait_for("min.insync 2 applied", WAIT, || async {
        (c.replica(1, "z", 0).await?.min_insync_replicas == 2).then_some(())
    })
    .await;
    let mut acked = values("a", 0..3);
    assert_eq!(code(&c.produce(1, "z", -1, &acked).await), ErrorCode::None);

    c.signal_broker(1, "STOP");
    let nl = wait_new_leader(&c, "z", 1).await;
    let b = values("b", 0..3);
    let r = c.produce(nl, "z", -1, &b).await;
    assert_eq!(code(&r), ErrorCode::None, "{r:?}");
    acked.extend(b);

    c.signal_broker(1, "CONT");
    // Race the metadata: write to the zombie right away.
    let z1 = c.produce_raw(1, "z", 0, 1, 3000, batch(&values("zombie1", 0..1)), None);
    let zall = c.produce_raw(1, "z", 0, -1, 3000, batch(&values("zombieall", 0..1)), None);
    let (z1, zall) = tokio::join!(z1, zall);
    eprintln!("zombie acks=1: {z1:?}\nzombie acks=all: {zall:?}");
    let zall = zall.unwrap();
    assert_ne!(
        code(&zall),
        ErrorCode::None,
        "zombie acked acks=all: {zall:?}"
    );
    let more = values("c", 0..3);
    let nl = wait_new_leader(&c, "z", 0).await;
    let r = c.produce(nl, "z", -1, &more).await;
    assert_eq!(code(&r), ErrorCode::None, "{r:?}");
    acked.extend(more);
    c.wait_leader_isr(nl, "z", &[1, 2, 3], WAIT).await;
    let leo = wait_converged(&c, "z", &[1, 2, 3]).await;
    let (recs, _, hw) = c.consume(nl, "z", 0, 0).await;
    assert_eq!(hw, leo);
    for id in [1, 2, 3] {
        c.kill_broker(id);
    }
    let (r1, c1) = c.read_log_on_disk(1, "z", 0);
    let (r2, c2) = c.read_log_on_disk(2, "z", 0);
    let (r3, c3) = c.read_log_on_disk(3, "z", 0);
    assert!(
        c1 == c2 && c2 == c3,
        "CRCs differ:\n1 {r1:?}\n2 {r2:?}\n3 {r3:?}"
    );
    let got: Vec<String> = recs.iter().map(|(_, v)| v.clone()).collect();
    for v in &acked {
        assert_eq!(got.iter().filter(|g| *g == v).count(), 1, "{v} in {got:?}");
    }
    assert!(
        !got.iter().any(|v| v.starts_with("zombieall")),
        "zombie acks=all record survived: {got:?}"
    );
}

/// A follower killed -9 whose segment tail is then damaged (cut mid-batch + garbage) restarts,
/// recovers, catches up and ends with the leader's batches; the cluster keeps every acked write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn breakit_torn_tail_on_restart_converges() {
    let mut c = Cluster::start(3, 3);
    c.wait_unfenced(&[1, 2, 3], WAIT).await;
    c.create_topic(assigned_topic("tt", &[&[1, 2, 3]]), WAIT)
        .await;
    c.wait_leader_isr(1, "tt", &[1, 2, 3], WAIT).await;
    let mut acked = Vec::new();
    for i in 0..10 {
        let v = values(&format!("x{i}"), 0..5);
        assert_eq!(code(&c.produce(1, "tt", -1, &v).await), ErrorCode::None);
        acked.extend(v);
    }
    for victim in [3, 1] {
        c.kill_broker(victim);
        let dir = c.broker_data_dir(victim).join("tt-0");
        let mut segs: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "log"))
            .collect();
        segs.sort();
        let seg = segs.last().unwrap();
        let mut data = std::fs::read(seg).unwrap();
        let n = data.len();
        data.truncate(n - 30);
        data.extend_from_slice(&[0xAB; 100]);
        std::fs::write(seg, &data).unwrap();
        c.start_broker(victim);
        let nl = wait_new_leader(&c, "tt", 0).await;
        let v = values(&format!("after{victim}"), 0..5);
        let r = c.produce(nl, "tt", -1, &v).await;
        assert_eq!(code(&r), ErrorCode::None, "{r:?}");
        acked.extend(v);
        c.wait_leader_isr(nl, "tt", &[1, 2, 3], WAIT).await;
        wait_converged(&c, "tt", &[1, 2, 3]).await;
    }
    let nl = wait_new_leader(&c, "tt", 0).await;
    let (recs, _, _) = c.consume(nl, "tt", 0, 0).await;
    for id in [1, 2, 3] {
        c.kill_broker(id);
    }
    let (r1, c1) = c.read_log_on_disk(1, "tt", 0);
    let (r2, c2) = c.read_log_on_disk(2, "tt", 0);
    let (r3, c3) = c.read_log_on_disk(3, "tt", 0);
    assert!(
        c1 == c2 && c2 == c3,
        "CRCs differ:\n1 {r1:?}\n2 {r2:?}\n3 {r3:?}"
    );
    let got: Vec<String> = recs.iter().map(|(_, v)| v.clone()).collect();
    for v in &acked {
        assert_eq!(got.iter().filter(|g| *g == v).count(), 1, "{v} in {got:?}");
    }
}

/// A leader killed -9 stays down until the controllers moved leadership (new leader epoch)
/// and more acks=all writes landed; then it restarts. Until it has caught up with metadata it
/// must not act on its stale local snapshot: a Produce to it must not be answered NONE (Kafka
/// answers NOT_LEADER_OR_FOLLOWER; a restarted Kafka broker serves nothing before it caught up
/// with the metadata log).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn breakit_restarted_old_leader_does_not_lead_from_stale_snapshot() {
    let mut c = Cluster::start(3, 3);
    c.wait_unfenced(&[1, 2, 3], WAIT).await;
    c.create_topic(assigned_topic("s", &[&[1, 2, 3]]), WAIT)
        .await;
    c.wait_leader_isr(1, "s", &[1, 2, 3], WAIT).await;
    assert_eq!(
        code(&c.produce(1, "s", -1, &values("a", 0..3)).await),
        ErrorCode::None
    );
    // Broker 1's local metadata snapshot must record its leadership before the kill.
    let snapshot = keel_broker::metadata::local_snapshot::path_in(
        &c.broker_data_dir(1).join("__cluster_metadata"),
    );
    c.wait_for(
        "broker 1's local snapshot names it leader of s-0",
        WAIT,
        || async {
            let image = keel_broker::metadata::local_snapshot::load(&snapshot).ok()??;
            let topic = image.topics().get_by_name("s")?;
            (topic.partitions.get(&0)?.leader == 1).then_some(())
        },
    )
    .await;
    c.kill_broker(1);
    let nl = wait_new_leader(&c, "s", 1).await;
    assert_eq!(
        code(&c.produce(nl, "s", -1, &values("b", 0..3)).await),
        ErrorCode::None
    );
    c.start_broker(1);
    let start = Instant::now();
    let mut accepted = Vec::new();
    let mut i = 0;
    while start.elapsed() < Duration::from_secs(5) {
        if let Ok(r) = c
            .produce_raw(1, "s", 0, 1, 1000, batch(&values("stale", i..i + 1)), None)
            .await
            && code(&r) == ErrorCode::None
        {
            accepted.push((i, r.base_offset, start.elapsed()));
        }
        i += 1;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(
        accepted.is_empty(),
        "the restarted old leader accepted {} acks=1 writes while another broker led the \
         partition (first: {:?})",
        accepted.len(),
        accepted.first()
    );
}

/// The leader is killed -9 and restarted at once (within its session: the controllers keep it
/// as leader in the same epoch). The HW and the LATEST offset that clients saw before must not
/// go backwards (DESIGN §7 invariant 3): a fetch at the HW seen before is not
/// OFFSET_OUT_OF_RANGE and ListOffsets LATEST is not lower.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn breakit_fast_leader_restart_keeps_hw() {
    let mut c = Cluster::start(3, 3);
    c.wait_unfenced(&[1, 2, 3], WAIT).await;
    c.create_topic(assigned_topic("h", &[&[1, 2, 3]]), WAIT)
        .await;
    c.wait_leader_isr(1, "h", &[1, 2, 3], WAIT).await;
    for i in 0..5 {
        let v = values(&format!("h{i}"), 0..4);
        assert_eq!(code(&c.produce(1, "h", -1, &v).await), ErrorCode::None);
    }
    let seen = c
        .wait_for("HW 20 on broker 1", WAIT, || async {
            let r = c.replica(1, "h", 0).await?;
            (r.high_watermark == 20).then_some(20)
        })
        .await;
    let latest = list_offset(&c, 1, "h", -1).await.unwrap();
    assert_eq!(latest.offset, seen);
    c.kill_broker(1);
    c.start_broker(1);
    let start = Instant::now();
    let mut problems = Vec::new();
    while start.elapsed() < Duration::from_secs(5) {
        if let Some(l) = list_offset(&c, 1, "h", -1).await
            && l.error.is_none()
            && l.offset < seen
        {
            problems.push(format!(
                "+{:?} ListOffsets LATEST {} < {seen}",
                start.elapsed(),
                l.offset
            ));
        }
        if let Ok(p) = consumer_fetch(&c, 1, "h", seen).await {
            let code = ErrorCode::from_proto(p.error.as_ref()).unwrap();
            if code == ErrorCode::OffsetOutOfRange
                || (code == ErrorCode::None && p.high_watermark < seen)
            {
                problems.push(format!(
                    "+{:?} fetch at {seen}: {code:?}, HW {}",
                    start.elapsed(),
                    p.high_watermark
                ));
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let n = problems.len();
    let last = problems.last().cloned();
    problems.truncate(3);
    assert!(
        n == 0,
        "{n} bad answers in 5 s after the restart; first: {problems:#?}; last: {last:?}"
    );
}

fn check(f: &mut Vec<String>, what: &str, got: ErrorCode, want: &[ErrorCode]) {
    if !want.contains(&got) {
        f.push(format!("{what}: got {got:?}, want {want:?}"));
    }
}

/// Bad input sweep: exact error codes, nothing appended, the broker keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn breakit_bad_input_sweep() {
    let c = Cluster::start(3, 2);
    c.wait_unfenced(&[1, 2], WAIT).await;
    c.create_topic(assigned_topic("bi", &[&[1, 2]]), WAIT).await;
    c.wait_leader_isr(1, "bi", &[1, 2], WAIT).await;
    assert_eq!(
        code(&c.produce(1, "bi", -1, &values("ok", 0..2)).await),
        ErrorCode::None
    );
    let good = || batch(&values("g", 0..1));
    let mut failures = Vec::new();
    let leo = || async { c.replica(1, "bi", 0).await.unwrap().log_end_offset };
    let leo0 = leo().await;
    let p = |acks, t: i32, recs: Bytes| c.produce_raw(1, "bi", 0, acks, t, recs, None);
    check(
        &mut failures,
        "acks=2",
        code(&p(2, 1000, good()).await.unwrap()),
        &[ErrorCode::InvalidRequiredAcks],
    );
    check(
        &mut failures,
        "acks=-2",
        code(&p(-2, 1000, good()).await.unwrap()),
        &[ErrorCode::InvalidRequiredAcks],
    );
    check(
        &mut failures,
        "unknown topic",
        code(
            &c.produce_raw(1, "nope", 0, 1, 1000, good(), None)
                .await
                .unwrap(),
        ),
        &[ErrorCode::UnknownTopicOrPartition],
    );
    check(
        &mut failures,
        "unknown partition",
        code(
            &c.produce_raw(1, "bi", 7, 1, 1000, good(), None)
                .await
                .unwrap(),
        ),
        &[ErrorCode::UnknownTopicOrPartition],
    );
    check(
        &mut failures,
        "produce to follower",
        code(
            &c.produce_raw(2, "bi", 0, 1, 1000, good(), None)
                .await
                .unwrap(),
        ),
        &[ErrorCode::NotLeaderOrFollower],
    );
    check(
        &mut failures,
        "empty records",
        code(&p(1, 1000, Bytes::new()).await.unwrap()),
        &[ErrorCode::CorruptMessage],
    );
    check(
        &mut failures,
        "12 bytes",
        code(&p(1, 1000, Bytes::from(vec![0u8; 12])).await.unwrap()),
        &[ErrorCode::CorruptMessage],
    );
    check(
        &mut failures,
        "corrupt CRC",
        code(&p(1, 1000, corrupt(good())).await.unwrap()),
        &[ErrorCode::CorruptMessage],
    );
    let g = good();
    check(
        &mut failures,
        "truncated batch",
        code(&p(1, 1000, g.slice(..g.len() - 3)).await.unwrap()),
        &[ErrorCode::CorruptMessage],
    );
    let big = batch(&["y".repeat(2_000_000)]);
    check(
        &mut failures,
        "2 MB batch",
        code(&p(1, 1000, big).await.unwrap()),
        &[ErrorCode::MessageTooLarge],
    );
    check(
        &mut failures,
        "producer id without epoch",
        code(
            &p(1, 1000, idempotent_batch(77, -1, 0, &values("e", 0..1)))
                .await
                .unwrap(),
        ),
        &[ErrorCode::InvalidRecord, ErrorCode::InvalidProducerEpoch],
    );
    check(
        &mut failures,
        "stale leader epoch",
        code(
            &c.produce_raw(1, "bi", 0, 1, 1000, good(), Some(-5 + 4))
                .await
                .unwrap(),
        ),
        &[ErrorCode::None, ErrorCode::FencedLeaderEpoch],
    );
    check(
        &mut failures,
        "future leader epoch",
        code(
            &c.produce_raw(1, "bi", 0, 1, 1000, good(), Some(99))
                .await
                .unwrap(),
        ),
        &[ErrorCode::UnknownLeaderEpoch],
    );
    let leo1 = leo().await;
    if leo1 != leo0 + 1 {
        failures.push(format!(
            "LEO {leo0} -> {leo1}: only the epoch -1 (no check) write should land"
        ));
    }
    // Reads.
    // Beyond the LEO, not just the HW: right after the acks=1 write above the HW may still
    // trail the LEO, and a fetch between them is valid and empty (Kafka `UnifiedLog.read`).
    let r = c.replica(1, "bi", 0).await.unwrap();
    let (hw, leo) = (r.high_watermark, r.log_end_offset);
    for (what, off, want) in [
        ("fetch at HW", hw, ErrorCode::None),
        ("fetch beyond the LEO", leo + 1, ErrorCode::OffsetOutOfRange),
        ("fetch at -1", -1, ErrorCode::OffsetOutOfRange),
        ("fetch at i64::MAX", i64::MAX, ErrorCode::OffsetOutOfRange),
    ] {
        let d = consumer_fetch(&c, 1, "bi", off).await.unwrap();
        check(
            &mut failures,
            what,
            ErrorCode::from_proto(d.error.as_ref()).unwrap(),
            &[want],
        );
    }
    let d = consumer_fetch(&c, 2, "bi", 0).await.unwrap();
    check(
        &mut failures,
        "consumer fetch on follower",
        ErrorCode::from_proto(d.error.as_ref()).unwrap(),
        &[ErrorCode::NotLeaderOrFollower],
    );
    let l = list_offset(&c, 1, "bi", -7).await.unwrap();
    check(
        &mut failures,
        "ListOffsets -7",
        ErrorCode::from_proto(l.error.as_ref()).unwrap(),
        &[ErrorCode::InvalidRequest],
    );
    // Long poll at HW with a huge and a negative max_wait answers (capped / immediately).
    let mut cl = c.broker_client(1);
    for wait in [i32::MIN, -1] {
        let t = Instant::now();
        let _ = cl
            .fetch(FetchRequest {
                session: None,
                replica_id: -1,
                broker_epoch: -1,
                max_wait_ms: wait,
                min_bytes: i32::MAX,
                max_bytes: -5,
                isolation_level: 7,
                topics: vec![FetchTopic {
                    topic: "bi".into(),
                    topic_id: Bytes::new(),
                    partitions: vec![FetchPartition {
                        partition: 0,
                        fetch_offset: 0,
                        current_leader_epoch: Some(-9),
                        last_fetched_epoch: -1,
                        log_start_offset: -1,
                        partition_max_bytes: -1,
                    }],
                }],
            })
            .await
            .unwrap();
        if t.elapsed() > Duration::from_secs(2) {
            failures.push(format!("fetch max_wait {wait} took {:?}", t.elapsed()));
        }
    }
    // A follower-style fetch from a broker id that is not a replica.
    let r = cl
        .fetch(FetchRequest {
            session: None,
            replica_id: 9,
            broker_epoch: 1,
            max_wait_ms: 0,
            min_bytes: 0,
            max_bytes: 0,
            isolation_level: 0,
            topics: vec![FetchTopic {
                topic: "bi".into(),
                topic_id: Bytes::new(),
                partitions: vec![FetchPartition {
                    partition: 0,
                    fetch_offset: 0,
                    current_leader_epoch: None,
                    last_fetched_epoch: -1,
                    log_start_offset: -1,
                    partition_max_bytes: 0,
                }],
            }],
        })
        .await
        .unwrap()
        .into_inner();
    let d = &r.responses[0].partitions[0];
    check(
        &mut failures,
        "follower fetch from non-replica 9",
        ErrorCode::from_proto(d.error.as_ref()).unwrap(),
        &[ErrorCode::NotLeaderOrFollower],
    );
    // Still serving.
    assert_eq!(
        code(&c.produce(1, "bi", -1, &values("after", 0..1)).await),
        ErrorCode::None
    );
    assert!(failures.is_empty(), "{failures:#?}");
}

/// Eight idempotent producers (acks=all, retries of the same sequence after any error, and a
/// deliberate duplicate re-send after every third success) against a partition whose leader is
/// killed -9 and restarted mid-stream. Every acknowledged batch is read back exactly once and
/// each producer's batches are in sequence order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn breakit_concurrent_idempotent_producers_with_failover() {
    let cluster = Cluster::start(3, 3);
    cluster.wait_unfenced(&[1, 2, 3], WAIT).await;
    cluster
        .create_topic(assigned_topic("ip", &[&[1, 2, 3]]), WAIT)
        .await;
    cluster.wait_leader_isr(1, "ip", &[1, 2, 3], WAIT).await;
    let c = Arc::new(cluster);
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for k in 0..8i64 {
        let (c, stop) = (c.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let pid = 5000 + k;
            let mut leader = 1;
            let mut acked = Vec::new();
            let mut anomalies = Vec::new();
            let mut seq = 0i32;
            let mut attempts = 0;
            while !stop.load(Ordering::Relaxed) || attempts > 0 {
                if attempts > 200 {
                    anomalies.push(format!("p{k} seq {seq}: gave up"));
                    break;
                }
                let v = vec![format!("p{k}-{seq}")];
                let r = c
                    .produce_raw(
                        leader,
                        "ip",
                        0,
                        -1,
                        3000,
                        idempotent_batch(pid, 0, seq, &v),
                        None,
                    )
                    .await;
                attempts += 1;
                let Ok(r) = r else {
                    leader = leader % 3 + 1;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                };
                match code(&r) {
                    ErrorCode::None => {
                        acked.push((seq, r.base_offset));
                        if seq % 3 == 0 {
                            let d = c
                                .produce_raw(
                                    leader,
                                    "ip",
                                    0,
                                    -1,
                                    3000,
                                    idempotent_batch(pid, 0, seq, &v),
                                    None,
                                )
                                .await;
                            if let Ok(d) = d
                                && code(&d) == ErrorCode::None
                                && d.base_offset != r.base_offset
                            {
                                anomalies.push(format!(
                                    "p{k} seq {seq}: duplicate got offset {} != {}",
                                    d.base_offset, r.base_offset
                                ));
                            }
                        }
                        seq += 1;
                        attempts = 0;
                    }
                    ErrorCode::NotLeaderOrFollower | ErrorCode::FencedLeaderEpoch => {
                        if let Some(l) = r.current_leader.filter(|l| l.leader_id > 0) {
                            leader = l.leader_id;
                        } else {
                            leader = leader % 3 + 1;
                        }
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    ErrorCode::OutOfOrderSequenceNumber | ErrorCode::UnknownProducerId => {
                        anomalies.push(format!("p{k} seq {seq}: {:?} from {leader}", code(&r)));
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    _ => tokio::time::sleep(Duration::from_millis(20)).await,
                }
            }
            (k, acked, anomalies)
        }));
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    c.signal_broker(1, "KILL");
    tokio::time::sleep(Duration::from_millis(3000)).await;
    stop.store(true, Ordering::Relaxed);
    let mut results = Vec::new();
    for t in tasks {
        results.push(t.await.unwrap());
    }
    let mut cluster = Arc::try_unwrap(c).expect("joined");
    cluster.kill_broker(1);
    cluster.start_broker(1);
    let nl = wait_new_leader(&cluster, "ip", 0).await;
    cluster.wait_leader_isr(nl, "ip", &[1, 2, 3], WAIT).await;
    wait_converged(&cluster, "ip", &[1, 2, 3]).await;
    let (recs, _, _) = cluster.consume(nl, "ip", 0, 0).await;
    eprintln!(
        "read back {} records; leader after restart {nl}",
        recs.len()
    );
    let mut problems = Vec::new();
    for (k, acked, anomalies) in results {
        problems.extend(anomalies);
        let mine: Vec<i32> = recs
            .iter()
            .filter_map(|(_, v)| v.strip_prefix(&format!("p{k}-")))
            .map(|s| s.parse().unwrap())
            .collect();
        let want: Vec<i32> = (0..mine.len() as i32).collect();
        if mine != want {
            problems.push(format!("p{k}: read back {mine:?}"));
        }
        if let Some((s, _)) = acked.last()
            && (*s as usize) >= mine.len()
        {
            problems.push(format!("p{k}: acked seq {s} missing (read {})", mine.len()));
        }
    }
    for id in [1, 2, 3] {
        cluster.kill_broker(id);
    }
    let (_, c1) = cluster.read_log_on_disk(1, "ip", 0);
    let (_, c2) = cluster.read_log_on_disk(2, "ip", 0);
    let (_, c3) = cluster.read_log_on_disk(3, "ip", 0);
    if !(c1 == c2 && c2 == c3) {
        problems.push("replica CRCs differ".into());
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

/// A follower down while retention deletes the leader's old segments restarts below the
/// leader's log start: it must restart its log at the leader's log start, catch up, rejoin
/// the ISR, and hold the leader's batches; consumers below the log start get
/// OFFSET_OUT_OF_RANGE, at it the data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn breakit_follower_restarts_below_leader_log_start() {
    let mut c = Cluster::start(3, 3);
    c.wait_unfenced(&[1, 2, 3], WAIT).await;
    c.create_topic(assigned_topic("rt", &[&[1, 2, 3]]), WAIT)
        .await;
    c.set_topic_config("rt", "segment.bytes", "1024", WAIT)
        .await;
    c.set_topic_config("rt", "retention.ms", "1000", WAIT).await;
    c.wait_leader_isr(1, "rt", &[1, 2, 3], WAIT).await;
    assert_eq!(
        code(&c.produce(1, "rt", -1, &values("first", 0..5)).await),
        ErrorCode::None
    );
    c.wait_for("follower 3 has the first batch", WAIT, || async {
        (c.replica(3, "rt", 0).await?.log_end_offset == 5).then_some(())
    })
    .await;
    c.kill_broker(3);
    for i in 0..40 {
        let r = c.produce(1, "rt", 1, &values(&format!("v{i}"), 0..5)).await;
        assert_eq!(code(&r), ErrorCode::None, "{r:?}");
    }
    let start = c
        .wait_for(
            "retention on the leader",
            Duration::from_secs(70),
            || async {
                let r = c.replica(1, "rt", 0).await?;
                (r.log_start_offset > 5).then_some(r.log_start_offset)
            },
        )
        .await;
    c.start_broker(3);
    c.wait_leader_isr(1, "rt", &[1, 2, 3], Duration::from_secs(40))
        .await;
    wait_converged(&c, "rt", &[1, 2, 3]).await;
    let d = consumer_fetch(&c, 1, "rt", 0).await.unwrap();
    assert_eq!(
        ErrorCode::from_proto(d.error.as_ref()).unwrap(),
        ErrorCode::OffsetOutOfRange
    );
    let r1 = c.replica(1, "rt", 0).await.unwrap();
    let r3 = c.replica(3, "rt", 0).await.unwrap();
    eprintln!(
        "leader start {start} -> {}, follower 3 start {}",
        r1.log_start_offset, r3.log_start_offset
    );
    for id in [1, 2, 3] {
        c.kill_broker(id);
    }
    let (rec1, c1) = c.read_log_on_disk(1, "rt", 0);
    let (rec3, c3) = c.read_log_on_disk(3, "rt", 0);
    // Follower 3 may hold a suffix of the leader's (its own retention), never other data.
    let first3 = c3.first().map(|x| x.0).unwrap_or(i64::MAX);
    let tail1: Vec<_> = c1.iter().filter(|x| x.0 >= first3).cloned().collect();
    assert_eq!(c3, tail1, "\n1 {rec1:?}\n3 {rec3:?}");
    assert_eq!(rec1.last(), rec3.last());
}

/// All controllers down: InitProducerId answers (a pid from the broker's block or a retriable
/// REQUEST_TIMED_OUT) within a bound, and produce/fetch keep working on the last metadata.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn breakit_controllers_down_data_plane_keeps_serving() {
    let mut c = Cluster::start(3, 2);
    c.wait_unfenced(&[1, 2], WAIT).await;
    c.create_topic(assigned_topic("cd", &[&[1, 2]]), WAIT).await;
    c.wait_leader_isr(1, "cd", &[1, 2], WAIT).await;
    let mut cl = c.broker_client(1);
    let first = cl
        .init_producer_id(keel_proto::broker::InitProducerIdRequest {
            transactional_id: String::new(),
            transaction_timeout_ms: 0,
            producer_id: -1,
            producer_epoch: -1,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(
        first.error.as_ref().is_none_or(|e| e.code == 0),
        "{first:?}"
    );
    for id in [1, 2, 3] {
        c.kill_controller(id);
    }
    let t = Instant::now();
    let second = tokio::time::timeout(
        Duration::from_secs(10),
        cl.init_producer_id(keel_proto::broker::InitProducerIdRequest {
            transactional_id: String::new(),
            transaction_timeout_ms: 0,
            producer_id: -1,
            producer_epoch: -1,
        }),
    )
    .await
    .expect("InitProducerId hangs with the controllers down")
    .unwrap()
    .into_inner();
    eprintln!(
        "InitProducerId with controllers down after {:?}: {second:?}",
        t.elapsed()
    );
    let code2 = ErrorCode::from_proto(second.error.as_ref()).unwrap();
    assert!(
        (code2 == ErrorCode::None && second.producer_id > first.producer_id)
            || code2 == ErrorCode::RequestTimedOut,
        "{second:?}"
    );
    for i in 0..5 {
        let r = c
            .produce(1, "cd", -1, &values(&format!("cd{i}"), 0..2))
            .await;
        assert_eq!(code(&r), ErrorCode::None, "{r:?}");
    }
    let (recs, _, hw) = c.consume(1, "cd", 0, 0).await;
    assert_eq!(recs.len(), 10);
    assert_eq!(hw, 10);
}
