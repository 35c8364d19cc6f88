//! ISR behaviour and leader failover on the real binaries (issue 5 acceptance): the lab of
//! seed 000 (shrink, NOT_ENOUGH_REPLICAS, rejoin, NOT_ENOUGH_REPLICAS_AFTER_APPEND, fencing
//! of an old leader epoch) and kill -9 of a leader under a continuous idempotent acks=all
//! stream.

use std::time::{Duration, Instant};

use keel_proto::ErrorCode;
use keel_proto::broker::{InitProducerIdRequest, MetadataRequest, ReplicaRole};
use keel_tests::Endpoints;
use keel_tests::data::assigned_topic;
use keel_tests::data::{batch, code, idempotent_batch, values};
use keel_tests::process::{Cluster, Options, SESSION_TIMEOUT_MS};

const WAIT: Duration = Duration::from_secs(20);

/// Seed 000's lab: brokers with replica.lag.time.max.ms = 1000 and a session timeout long
/// enough (10 s) that a stopped follower leaves the ISR through its leader's shrink, not
/// through fencing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_000_lab_shrink_reject_rejoin_and_fencing() {
    let mut c = Cluster::start_opts(
        3,
        3,
        Options {
            broker_args: vec!["--replica-lag-time-max-ms".into(), "1000".into()],
            session_timeout_ms: 10_000,
            ..Options::default()
        },
    );
    c.wait_unfenced(&[1, 2, 3], WAIT).await;
    c.create_topic(assigned_topic("lab", &[&[1, 2, 3]]), WAIT)
        .await;
    c.set_topic_config("lab", "min.insync.replicas", "2", WAIT)
        .await;
    let start = c.wait_leader_isr(1, "lab", &[1, 2, 3], WAIT).await;
    c.wait_for("min.insync 2 applied", WAIT, || async {
        (c.replica(1, "lab", 0).await?.min_insync_replicas == 2).then_some(())
    })
    .await;
    let mut acked = values("a", 0..3);
    assert_eq!(
        code(&c.produce(1, "lab", -1, &acked).await),
        ErrorCode::None
    );

    // 1. A follower kept behind leaves the ISR; the change is committed metadata (the
    // controller's image, read by every broker, shows it with a higher partition epoch).
    // (Kafka keeps a silent follower that is at the leader's LEO in sync: it falls behind
    // only when something is written.)
    c.signal_broker(3, "STOP");
    let behind = values("behind3", 0..1);
    assert_eq!(
        code(&c.produce(1, "lab", 1, &behind).await),
        ErrorCode::None
    );
    acked.extend(behind);
    let shrunk = c.wait_leader_isr(1, "lab", &[1, 2], WAIT).await;
    assert!(shrunk.partition_epoch > start.partition_epoch);
    assert!(
        c.broker_log(1)
            .contains("Shrinking ISR for partition lab-0 from [1, 2, 3] to [1, 2]"),
        "{}",
        c.broker_log(1)
    );
    c.wait_for("broker 2's image shows ISR [1, 2]", WAIT, || async {
        let m = c.try_metadata(2, &["lab"]).await?;
        let p = &m.topics[0].partitions[0];
        (p.isr_nodes == [1, 2]).then_some(())
    })
    .await;
    let more = values("b", 0..3);
    assert_eq!(code(&c.produce(1, "lab", -1, &more).await), ErrorCode::None);
    acked.extend(more);

    // 2. ISR below min.insync: NOT_ENOUGH_REPLICAS before the append, log unchanged.
    c.signal_broker(2, "STOP");
    let behind = values("behind2", 0..1);
    assert_eq!(
        code(&c.produce(1, "lab", 1, &behind).await),
        ErrorCode::None
    );
    acked.extend(behind);
    c.wait_leader_isr(1, "lab", &[1], WAIT).await;
    let leo = c.replica(1, "lab", 0).await.unwrap().log_end_offset;
    let r = c.produce(1, "lab", -1, &values("rejected", 0..1)).await;
    assert_eq!(code(&r), ErrorCode::NotEnoughReplicas);
    assert_eq!(c.replica(1, "lab", 0).await.unwrap().log_end_offset, leo);

    // 3. After catching up, the followers rejoin.
    c.signal_broker(2, "CONT");
    c.signal_broker(3, "CONT");
    c.wait_leader_isr(1, "lab", &[1, 2, 3], WAIT).await;
    assert!(
        c.broker_log(1)
            .contains("Expanding ISR for partition lab-0")
    );

    // 4. A waiting acks=all request whose ISR drops below min.insync meanwhile fails with
    // NOT_ENOUGH_REPLICAS_AFTER_APPEND (appended on the leader; outcome unknown).
    c.signal_broker(2, "STOP");
    c.signal_broker(3, "STOP");
    let r = c
        .produce_raw(
            1,
            "lab",
            0,
            -1,
            15_000,
            keel_tests::data::batch(&values("late", 0..1)),
            None,
        )
        .await
        .unwrap();
    assert_eq!(code(&r), ErrorCode::NotEnoughReplicasAfterAppend, "{r:?}");
    c.signal_broker(2, "CONT");
    c.signal_broker(3, "CONT");
    let full = c.wait_leader_isr(1, "lab", &[1, 2, 3], WAIT).await;

    // 5. A leader change bumps the leader epoch; the old epoch is fenced.
    let old_epoch = full.leader_epoch;
    c.terminate_broker(1, WAIT).await;
    let (new_leader, new_epoch) = c
        .wait_for("a new leader", WAIT, || async {
            for id in [2, 3] {
                let r = c.replica(id, "lab", 0).await?;
                if r.role == keel_proto::broker::ReplicaRole::Leader as i32 {
                    return Some((id, r.leader_epoch));
                }
            }
            None
        })
        .await;
    assert!(new_epoch > old_epoch);
    let r = c
        .produce_raw(
            new_leader,
            "lab",
            0,
            1,
            5000,
            keel_tests::data::batch(&values("x", 0..1)),
            Some(old_epoch),
        )
        .await
        .unwrap();
    assert_eq!(code(&r), ErrorCode::FencedLeaderEpoch);
    assert_eq!(r.current_leader.unwrap().leader_epoch, new_epoch);
    // Every acknowledged record survived the change.
    let (recs, _, _) = c.consume(new_leader, "lab", 0, 0).await;
    let got: Vec<String> = recs.into_iter().map(|(_, v)| v).collect();
    for v in &acked {
        assert_eq!(got.iter().filter(|g| *g == v).count(), 1, "{v} in {got:?}");
    }
}

/// Finds the current leader of `topic`-0 from any live broker's metadata.
async fn leader(c: &Cluster, live: &[i32], topic: &str) -> Option<(i32, i32)> {
    for id in live {
        let mut b = c.broker_client(*id);
        let Ok(Ok(m)) = tokio::time::timeout(
            Duration::from_millis(500),
            b.metadata(MetadataRequest {
                topics: vec![topic.into()],
            }),
        )
        .await
        else {
            continue;
        };
        let m = m.into_inner();
        let p = m.topics.first()?.partitions.first()?;
        if p.leader_id >= 0 && live.contains(&p.leader_id) {
            return Some((p.leader_id, p.leader_epoch));
        }
    }
    None
}

/// kill -9 of the leader during a continuous idempotent acks=all stream (min.insync 2, RF 3):
/// a new leader serves within the session timeout + 2 s, the producer continues after
/// retries, and every acknowledged record is read back exactly once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_leader_under_idempotent_acks_all_stream() {
    let mut c = Cluster::start(3, 3);
    c.wait_unfenced(&[1, 2, 3], WAIT).await;
    c.create_topic(assigned_topic("stream", &[&[1, 2, 3]]), WAIT)
        .await;
    c.set_topic_config("stream", "min.insync.replicas", "2", WAIT)
        .await;
    c.wait_leader_isr(1, "stream", &[1, 2, 3], WAIT).await;
    let mut b = c.broker_client(2);
    let pid = b
        .init_producer_id(InitProducerIdRequest {
            transactional_id: String::new(),
            transaction_timeout_ms: 0,
            producer_id: -1,
            producer_epoch: -1,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(pid.error.is_none(), "{pid:?}");
    let pid = pid.producer_id;

    let mut live = vec![1, 2, 3];
    let mut acked: Vec<String> = Vec::new();
    let mut seq = 0i32;
    let mut killed_at: Option<Instant> = None;
    let mut recovered_in: Option<Duration> = None;
    let batches = 60;
    let per_batch = 5;
    let started = Instant::now();
    for i in 0..batches {
        let vals = values(&format!("b{i}"), 0..per_batch);
        if i == 20 {
            let (l, _) = leader(&c, &live, "stream").await.unwrap();
            c.kill_broker(l);
            live.retain(|b| *b != l);
            killed_at = Some(Instant::now());
        }
        let attempt_start = Instant::now();
        loop {
            assert!(
                attempt_start.elapsed() < WAIT,
                "batch {i} not acknowledged\n{}",
                c.logs()
            );
            let Some((l, _)) = leader(&c, &live, "stream").await else {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            };
            let batch = idempotent_batch(pid, 0, seq, &vals);
            match c.produce_raw(l, "stream", 0, -1, 3000, batch, None).await {
                Ok(r) if code(&r) == ErrorCode::None => {
                    if let (Some(k), None) = (killed_at, recovered_in) {
                        recovered_in = Some(k.elapsed());
                    }
                    break;
                }
                Ok(r) => {
                    let e = code(&r);
                    assert!(
                        matches!(
                            e,
                            ErrorCode::NotLeaderOrFollower
                                | ErrorCode::NotEnoughReplicas
                                | ErrorCode::NotEnoughReplicasAfterAppend
                                | ErrorCode::RequestTimedOut
                                | ErrorCode::FencedLeaderEpoch
                                | ErrorCode::UnknownTopicOrPartition
                        ),
                        "batch {i}: non-retriable {e}: {r:?}"
                    );
                }
                Err(_) => {}
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        seq += per_batch as i32;
        acked.extend(vals);
    }
    let recovered_in = recovered_in.unwrap();
    assert!(
        recovered_in < Duration::from_millis(SESSION_TIMEOUT_MS + 2000),
        "first write accepted {recovered_in:?} after the kill"
    );
    let (l, _) = leader(&c, &live, "stream").await.unwrap();
    let (recs, _, _) = c.consume(l, "stream", 0, 0).await;
    let got: Vec<String> = recs.into_iter().map(|(_, v)| v).collect();
    assert_eq!(
        got, acked,
        "every acknowledged record exactly once, in order"
    );
    eprintln!(
        "{batches} batches in {:?}; new leader accepted a write {recovered_in:?} after kill -9",
        started.elapsed()
    );
}

/// KAFKA-7128: a follower at or past the HW but short of the start offset of the current
/// leader epoch is not added to the ISR until it reaches it. Broker 3 stops at LEO 3 while
/// records 3..6 are written with acks=1 (the HW stays 3: broker 3 is still in the ISR);
/// broker 1 is killed; both are fenced and broker 2 leads epoch 1 from offset 6 with ISR [2],
/// where min.insync.replicas 2 keeps the HW at 3. When broker 3 resumes, its first fetch
/// (LEO 3 = HW) must not add it; it joins once its LEO reaches 6.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follower_joins_the_isr_only_past_the_leader_epoch_start() {
    let mut c = Cluster::start_opts(
        3,
        3,
        Options {
            session_timeout_ms: 4_000,
            ..Options::default()
        },
    );
    c.wait_unfenced(&[1, 2, 3], WAIT).await;
    c.create_topic(assigned_topic("gate", &[&[1, 2, 3]]), WAIT)
        .await;
    c.set_topic_config("gate", "min.insync.replicas", "2", WAIT)
        .await;
    c.wait_leader_isr(1, "gate", &[1, 2, 3], WAIT).await;
    c.wait_for("min.insync 2 applied", WAIT, || async {
        (c.replica(1, "gate", 0).await?.min_insync_replicas == 2).then_some(())
    })
    .await;
    assert_eq!(
        code(&c.produce(1, "gate", -1, &values("a", 0..3)).await),
        ErrorCode::None
    );
    c.signal_broker(3, "STOP");
    // Let a fetch broker 3 sent before it stopped finish (500 ms long poll), so the next
    // records cannot ride on it.
    c.wait_for("broker 3's last fetch answered", WAIT, || async {
        let r = c.replica(1, "gate", 0).await?;
        let f = r.followers.iter().find(|f| f.broker_id == 3)?;
        (keel_tests::data::now_ms() - f.last_fetch_time_ms > 700).then_some(())
    })
    .await;
    assert_eq!(
        code(&c.produce(1, "gate", 1, &values("b", 0..3)).await),
        ErrorCode::None
    );
    c.wait_for("broker 2 has all 6 records", WAIT, || async {
        (c.replica(2, "gate", 0).await?.log_end_offset == 6).then_some(())
    })
    .await;
    assert_eq!(c.replica(1, "gate", 0).await.unwrap().high_watermark, 3);
    c.kill_broker(1);
    let led = c.wait_leader_isr(2, "gate", &[2], WAIT).await;
    let epoch_start = led
        .leader_epoch_cache
        .iter()
        .find(|e| e.epoch == led.leader_epoch)
        .unwrap()
        .start_offset;
    assert_eq!(epoch_start, 6);
    assert_eq!(led.high_watermark, 3, "ISR below min.insync: the HW stays");
    c.signal_broker(3, "CONT");
    c.wait_leader_isr(2, "gate", &[2, 3], WAIT).await;
    let log = c.broker_log(2);
    assert!(
        log.contains(
            "Expanding ISR for partition gate-0 from [2] to [2, 3]: broker 3 caught up: LEO 6 \
             >= HW 3 and >= start offset 6"
        ),
        "{log}"
    );
    assert!(!log.contains("broker 3 caught up: LEO 3"), "{log}");
}

/// A broker that led an epoch without writing in it keeps that epoch's start at its LEO
/// (KAFKA-7415). When it later follows a leader that never had that epoch, the leader answers
/// its fetches (last fetched epoch = the empty epoch) with a divergence at exactly its LEO.
/// The truncation removes no batch but must drop the epoch entry (Kafka
/// `UnifiedLog.truncateTo`); otherwise every fetch gets the same answer, the follower spins
/// in no-op truncations and never rejoins the ISR. Found by deploy/smoke.sh run twice on one
/// compose cluster: disconnecting the leader's container made broker B lead an epoch with no
/// produce; disconnecting B then moved the leadership to a broker without that epoch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_of_an_empty_epoch_rejoins_the_isr_under_a_leader_without_it() {
    let c = Cluster::start(3, 3);
    c.wait_unfenced(&[1, 2, 3], WAIT).await;
    c.create_topic(assigned_topic("empty", &[&[1, 2, 3]]), WAIT)
        .await;
    c.wait_leader_isr(1, "empty", &[1, 2, 3], WAIT).await;
    let acked = values("a", 0..3);
    assert_eq!(
        code(&c.produce(1, "empty", -1, &acked).await),
        ErrorCode::None
    );
    // Broker 1 stops (fenced at session expiry): broker 2 leads a new epoch from offset 3 and
    // nothing is written in it.
    c.signal_broker(1, "STOP");
    let b = c.wait_leader_isr(2, "empty", &[2, 3], WAIT).await;
    let empty_epoch = b.leader_epoch;
    assert!(
        b.leader_epoch_cache
            .iter()
            .any(|e| e.epoch == empty_epoch && e.start_offset == 3),
        "{b:?}"
    );
    c.signal_broker(1, "CONT");
    c.wait_leader_isr(2, "empty", &[1, 2, 3], WAIT).await;
    // Broker 2 stops: the new leader never had the empty epoch.
    c.signal_broker(2, "STOP");
    let (new_leader, _) = c
        .wait_for("a leader other than 2", WAIT, || {
            leader(&c, &[1, 3], "empty")
        })
        .await;
    let l = c.wait_leader_isr(new_leader, "empty", &[1, 3], WAIT).await;
    assert!(
        l.leader_epoch_cache.iter().all(|e| e.epoch != empty_epoch),
        "{l:?}"
    );
    // Broker 2 resumes: it follows, drops the empty epoch and rejoins the ISR.
    c.signal_broker(2, "CONT");
    let full = c
        .wait_leader_isr(new_leader, "empty", &[1, 2, 3], WAIT)
        .await;
    let r2 = c.replica(2, "empty", 0).await.unwrap();
    assert_eq!(r2.log_end_offset, 3, "{r2:?}");
    assert!(
        r2.leader_epoch_cache.iter().all(|e| e.epoch != empty_epoch),
        "{r2:?}"
    );
    let truncations = c.broker_log(2).matches("Truncating empty-0").count();
    assert!(
        truncations <= 1,
        "{truncations} truncations of empty-0 on broker 2"
    );
    // Records of the new epoch reach broker 2: its epoch cache becomes the leader's.
    assert_eq!(
        code(&c.produce(new_leader, "empty", -1, &values("b", 0..2)).await),
        ErrorCode::None
    );
    c.wait_for("broker 2 has the new epoch's records", WAIT, || async {
        let r = c.replica(2, "empty", 0).await?;
        (r.log_end_offset == 5 && r.leader_epoch_cache == full.leader_epoch_cache).then_some(())
    })
    .await;
}

/// A broker taking over many leaderships in one metadata delta stages their leader epochs
/// and makes them durable with one append to its leader epoch journal (#26) instead of two
/// fsyncs each: every partition still records its new epoch at the log end offset it had
/// when it took the leadership, and serves acks=all produce and consume in it, the records of
/// the old epoch kept. The checkpoint files are not rewritten then, so a kill -9 and restart
/// of a new leader must find each epoch again from the journal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_leaderships_taken_at_once_record_each_epoch_start() {
    // Broker 1 leads them all; when it dies, brokers 2 and 3 each take 48 (from 32 new
    // leaderships in one delta on, the epochs are staged).
    const PARTITIONS: i32 = 96;
    let mut c = Cluster::start(3, 3);
    c.wait_unfenced(&[1, 2, 3], WAIT).await;
    let next = |p: i32| if p % 2 == 0 { 2 } else { 3 };
    let assignments: Vec<Vec<i32>> = (0..PARTITIONS)
        .map(|p| vec![1, next(p), 5 - next(p)])
        .collect();
    let refs: Vec<&[i32]> = assignments.iter().map(Vec::as_slice).collect();
    c.create_topic(assigned_topic("many", &refs), WAIT).await;
    for p in 0..PARTITIONS {
        let vals = values(&format!("old{p}"), 0..3);
        let r = c
            .wait_for("the first produce acknowledged", WAIT, || async {
                let r = c
                    .produce_raw(1, "many", p, -1, 5000, batch(&vals), None)
                    .await
                    .ok()?;
                (code(&r) == ErrorCode::None).then_some(r)
            })
            .await;
        assert_eq!(r.base_offset, 0, "partition {p}");
    }
    c.kill_broker(1);
    let mut taken = Vec::new();
    for p in 0..PARTITIONS {
        let leader = next(p);
        let r = c
            .wait_for("the new leader took over", WAIT, || async {
                let r = c.replica(leader, "many", p).await?;
                (r.role == ReplicaRole::Leader as i32 && r.leader_epoch >= 1).then_some(r)
            })
            .await;
        let last = r
            .leader_epoch_cache
            .last()
            .map(|e| (e.epoch, e.start_offset));
        assert_eq!(last, Some((r.leader_epoch, 3)), "partition {p}: {r:?}");
        taken.push((p, leader, r.leader_epoch));
        let vals = values(&format!("new{p}"), 0..2);
        let r = c
            .produce_raw(leader, "many", p, -1, 5000, batch(&vals), None)
            .await
            .unwrap();
        assert_eq!(
            (code(&r), r.base_offset),
            (ErrorCode::None, 3),
            "partition {p}"
        );
        let (records, _, hw) = c.consume(leader, "many", p, 0).await;
        let got: Vec<String> = records.into_iter().map(|(_, v)| v).collect();
        let mut want = values(&format!("old{p}"), 0..3);
        want.extend(values(&format!("new{p}"), 0..2));
        assert_eq!((got, hw), (want, 5), "partition {p}");
    }
    let journal = c.broker_data_dir(2).join("leader-epoch-journal");
    assert!(
        std::fs::metadata(&journal).is_ok_and(|m| m.len() > 0),
        "{journal:?} holds the epochs broker 2 took"
    );
    // kill -9 of broker 2 (broker 3 takes its partitions over) and a restart: the epochs it
    // journaled, whose records it holds, are in its caches again.
    c.kill_broker(2);
    c.start_broker(2);
    c.wait_unfenced(&[2], WAIT).await;
    for &(p, leader, epoch) in taken.iter().filter(|t| t.1 == 2) {
        let r = c
            .wait_for("broker 2 hosts the partition again", WAIT, || async {
                let r = c.replica(leader, "many", p).await?;
                (r.log_end_offset == 5).then_some(r)
            })
            .await;
        let cache: Vec<(i32, i64)> = r
            .leader_epoch_cache
            .iter()
            .map(|e| (e.epoch, e.start_offset))
            .collect();
        assert!(
            cache.contains(&(epoch, 3)),
            "partition {p}: epoch {epoch} from offset 3 lost in the restart: {cache:?}"
        );
    }
}
