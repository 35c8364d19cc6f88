//! Five batches in flight per partition on the real binaries (#26 acceptance): an idempotent
//! acks=all producer (`max_in_flight_requests_per_connection` 5, small batches so that
//! several of each partition are in flight) writes a continuous stream to three partitions
//! led by one broker; that broker is killed with SIGKILL mid-stream. Every record is
//! acknowledged, and the partitions then hold each of them exactly once, at the offset its
//! acknowledgement named, in the order they were sent (no loss, no duplicate, order kept per
//! partition: Kafka's idempotent producer guarantees with 5 in flight, KIP-98 / KIP-679).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::{Duration, Instant};

use keel_client::producer::{Producer, ProducerConfig};
use keel_proto::broker::MetadataRequest;
use keel_tests::Endpoints;
use keel_tests::data::assigned_topic;
use keel_tests::process::{Cluster, SESSION_TIMEOUT_MS};

const WAIT: Duration = Duration::from_secs(30);
const TOPIC: &str = "pipelined";
const PARTITIONS: i32 = 3;
/// Records not yet acknowledged the sender allows (it then waits for the oldest).
const WINDOW: usize = 2_000;

/// The leader of each partition of [`TOPIC`] that a live broker names, if all have one
/// among `live`.
async fn leaders(c: &Cluster, live: &[i32]) -> Option<Vec<i32>> {
    for id in live {
        let mut b = c.broker_client(*id);
        let Ok(Ok(m)) = tokio::time::timeout(
            Duration::from_millis(500),
            b.metadata(MetadataRequest {
                topics: vec![TOPIC.into()],
            }),
        )
        .await
        else {
            continue;
        };
        let m = m.into_inner();
        let t = m.topics.first()?;
        let mut out = vec![-1; PARTITIONS as usize];
        for p in &t.partitions {
            if (0..PARTITIONS).contains(&p.partition_index) {
                out[p.partition_index as usize] = p.leader_id;
            }
        }
        if out.iter().all(|l| live.contains(l)) {
            return Some(out);
        }
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_of_the_leader_under_five_batches_in_flight_loses_duplicates_and_reorders_nothing() {
    let mut c = Cluster::start(3, 3);
    c.wait_unfenced(&[1, 2, 3], WAIT).await;
    c.create_topic(
        assigned_topic(TOPIC, &[&[1, 2, 3], &[1, 3, 2], &[1, 2, 3]]),
        WAIT,
    )
    .await;
    c.set_topic_config(TOPIC, "min.insync.replicas", "2", WAIT)
        .await;
    c.wait_leader_isr(1, TOPIC, &[1, 2, 3], WAIT).await;
    let grpc: Vec<String> = (1..=3).map(|b| c.broker_addr(b)).collect();

    let mut cfg = ProducerConfig::new(grpc);
    cfg.max_in_flight_requests_per_connection = 5;
    cfg.batch_size_bytes = 2048;
    cfg.linger_ms = 1;
    let producer = Producer::new(cfg).unwrap();

    // The stream: value `v{n}` with key = value (spread over the partitions by murmur2);
    // broker 1, leader of every partition, is killed 2 s in; the stream goes on until the
    // new leaders have taken SESSION_TIMEOUT + 3 s of it.
    let started = Instant::now();
    let kill_at = started + Duration::from_secs(2);
    let stop_at = kill_at + Duration::from_millis(SESSION_TIMEOUT_MS + 3_000);
    let mut killed = false;
    let mut pending = VecDeque::new();
    let mut acked: Vec<(u64, i32, i64)> = Vec::new();
    let mut failed: Vec<String> = Vec::new();
    let mut n = 0u64;
    let mut settle = |v: u64, r: Result<keel_client::producer::RecordMetadata, _>| match r {
        Ok(m) => acked.push((v, m.partition, m.offset)),
        Err(e) => failed.push(format!("v{v:08}: {e}")),
    };
    while Instant::now() < stop_at {
        if !killed && Instant::now() >= kill_at {
            c.kill_broker(1);
            killed = true;
        }
        let v = format!("v{n:08}");
        let d = producer
            .send(TOPIC, Some(v.as_bytes()), v.as_bytes())
            .await
            .expect("queued");
        pending.push_back((n, d));
        n += 1;
        if pending.len() >= WINDOW {
            let (v, d) = pending.pop_front().unwrap();
            settle(v, d.await);
        }
        if n.is_multiple_of(100) {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    for (v, d) in pending {
        settle(v, d.await);
    }
    let in_flight_seen = producer.max_in_flight_seen();
    let retries = producer.retries();
    producer.close().await;
    assert!(
        failed.is_empty(),
        "{} of {n} records failed, first: {}\n{}",
        failed.len(),
        failed[0],
        c.logs()
    );
    assert!(
        in_flight_seen >= 3,
        "the producer never had more than {in_flight_seen} batches of a partition in flight"
    );

    // Read every partition back from its new leader.
    let live = [2, 3];
    let leaders = c
        .wait_for("every partition led by a live broker", WAIT, || {
            leaders(&c, &live)
        })
        .await;
    let mut log: HashMap<u64, (i32, i64)> = HashMap::new();
    for (p, leader) in leaders.iter().enumerate() {
        let (recs, _, _) = c.consume(*leader, TOPIC, p as i32, 0).await;
        let mut last: Option<u64> = None;
        for (offset, value) in recs {
            let v: u64 = value
                .strip_prefix('v')
                .and_then(|s| s.parse().ok())
                .unwrap_or_else(|| panic!("unexpected value {value:?}"));
            assert!(
                log.insert(v, (p as i32, offset)).is_none(),
                "{value} is in the log twice"
            );
            assert!(
                last.is_none_or(|l| l < v),
                "partition {p}: {value} at offset {offset} after v{:08}: order broken",
                last.unwrap()
            );
            last = Some(v);
        }
    }
    for (v, partition, offset) in &acked {
        assert_eq!(
            log.get(v),
            Some(&(*partition, *offset)),
            "v{v:08} was acknowledged at {partition}/{offset}"
        );
    }
    assert_eq!(
        log.len(),
        acked.len(),
        "the log holds only acknowledged records"
    );
    let per_partition: BTreeMap<i32, usize> =
        acked.iter().fold(BTreeMap::new(), |mut m, (_, p, _)| {
            *m.entry(*p).or_default() += 1;
            m
        });
    eprintln!(
        "{n} records acknowledged over {:?} ({per_partition:?} per partition), \
         up to {in_flight_seen} batches of a partition in flight, {retries} resends",
        started.elapsed()
    );
}
