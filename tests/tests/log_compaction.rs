//! Log compaction on a running cluster (issue #22): a topic created with
//! `cleanup.policy=compact` refuses keyless records; every replica compacts its own log (the
//! cleaner checkpoint appears in each broker's partition directory); consumers read exactly
//! the latest value per key from the leader, and again from a follower that becomes leader
//! after the leader is killed.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use keel_proto::ErrorCode;
use keel_proto::controller::ConfigEntry;
use keel_record::{BatchIter, RecordBatchBuilder};
use keel_tests::data::{assigned_topic, code, now_ms};
use keel_tests::{Endpoints, InProcessCluster};

const WAIT: Duration = Duration::from_secs(30);
const TOPIC: &str = "compacted";
const KEYS: usize = 30;

/// One batch of (key, value) records, `None` = a tombstone.
fn keyed_batch(records: &[(String, Option<String>)]) -> Bytes {
    let mut b = RecordBatchBuilder::new(0);
    let ts = now_ms();
    for (k, v) in records {
        b.append(ts, Some(k.as_bytes()), v.as_deref().map(str::as_bytes), &[]);
    }
    b.build().into_bytes()
}

/// The cleaner checkpoint of broker `id`'s replica, if a pass completed.
fn cleaner_checkpoint(data_dir: &Path) -> Option<i64> {
    let text =
        std::fs::read_to_string(data_dir.join(format!("{TOPIC}-0/cleaner-offset-checkpoint")))
            .ok()?;
    text.lines().nth(2)?.trim().parse().ok()
}

/// Every record below the HW on broker `id` (the leader): (offset, key, value), following
/// batch ends over the offset gaps compaction leaves.
async fn read_keyed(c: &InProcessCluster, id: i32) -> Vec<(i64, String, Option<String>)> {
    let mut offset = 0;
    let mut out = Vec::new();
    // Each fetch that returns batches moves past them; an empty one ends the loop.
    loop {
        let p = c
            .fetch_once(id, TOPIC, 0, offset)
            .await
            .expect("the broker answers");
        assert_eq!(
            ErrorCode::from_proto(p.error.as_ref()).unwrap(),
            ErrorCode::None,
            "{p:?}"
        );
        let mut end = offset;
        for b in BatchIter::new(p.records.clone()) {
            let b = b.unwrap();
            b.validate_replicated().unwrap();
            for r in b.records() {
                let r = r.unwrap();
                let o = b.base_offset() + i64::from(r.offset_delta);
                if o >= offset {
                    let s = |v: Bytes| String::from_utf8(v.to_vec()).unwrap();
                    out.push((o, s(r.key.unwrap()), r.value.map(s)));
                }
            }
            end = end.max(b.last_offset() + 1);
        }
        if end == offset {
            return out;
        }
        offset = end;
    }
}

fn live(records: &[(i64, String, Option<String>)]) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    for (_, k, v) in records {
        match v {
            Some(v) => m.insert(k.clone(), v.clone()),
            None => m.remove(k),
        };
    }
    m
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compacted_topic_keeps_the_latest_value_per_key_on_every_replica() {
    let mut c = InProcessCluster::start(1, 3);
    c.wait_unfenced(&[1, 2, 3], WAIT).await;
    let mut topic = assigned_topic(TOPIC, &[&[1, 2, 3]]);
    let entry = |name: &str, value: &str| ConfigEntry {
        name: name.into(),
        value: Some(value.into()),
    };
    topic.configs = vec![
        entry("cleanup.policy", "compact"),
        entry("segment.bytes", "1024"),
        entry("min.cleanable.dirty.ratio", "0.01"),
    ];
    c.create_topic(topic, WAIT).await;
    c.wait_leader_isr(1, TOPIC, &[1, 2, 3], WAIT).await;

    // Keyless records: INVALID_RECORD, nothing written.
    let mut keyless = RecordBatchBuilder::new(0);
    keyless.append(now_ms(), None, Some(b"v"), &[]);
    let r = c
        .produce_raw(1, TOPIC, 0, -1, 5000, keyless.build().into_bytes(), None)
        .await
        .unwrap();
    assert_eq!(code(&r), ErrorCode::InvalidRecord);

    let mut model: BTreeMap<String, String> = BTreeMap::new();
    let mut produced = 0;
    for b in 0..60 {
        let recs: Vec<(String, Option<String>)> = (0..10)
            .map(|i| {
                let n = b * 10 + i;
                let key = format!("key-{}", (n * 7) % KEYS);
                let value = (n % 9 != 4).then(|| format!("v{n}"));
                (key, value)
            })
            .collect();
        for (k, v) in &recs {
            match v {
                Some(v) => model.insert(k.clone(), v.clone()),
                None => model.remove(k),
            };
        }
        produced += recs.len();
        let r = c
            .produce_raw(1, TOPIC, 0, -1, 5000, keyed_batch(&recs), None)
            .await
            .unwrap();
        assert_eq!(code(&r), ErrorCode::None, "{r:?}");
    }

    // Every replica cleans its own log, up to the segment its HW is in: 1 KiB segments
    // hold 4 batches of 10 records, so the active one and the one before hold at most 80.
    let leo = produced as i64;
    for id in [1, 2, 3] {
        let dir = c.broker_data_dir(id);
        c.wait_for(
            &format!("broker {id} compacted {TOPIC}-0 up to the last segments"),
            WAIT,
            || async { cleaner_checkpoint(&dir).filter(|o| *o >= leo - 80) },
        )
        .await;
    }
    let records = read_keyed(&c, 1).await;
    assert_eq!(live(&records), model);
    // At most one record per key below the checkpoint (tombstones stay for
    // delete.retention.ms, a day), the rest above it.
    assert!(
        records.len() <= KEYS + 80,
        "{} of {produced} records left",
        records.len()
    );

    // A follower's compacted copy serves consumers once it leads. A new leader's HW starts
    // where it knew it as a follower (one fetch behind) and reaches the LEO once the other
    // follower fetched from it: read once it did, or the last records are not served yet.
    c.kill_broker(1);
    let new_leader = c
        .wait_for("a new leader with the HW at the log end", WAIT, || async {
            for id in [2, 3] {
                let r = c.replica(id, TOPIC, 0).await?;
                if r.role == keel_proto::broker::ReplicaRole::Leader as i32
                    && r.high_watermark == leo
                {
                    return Some(id);
                }
            }
            None
        })
        .await;
    let records = read_keyed(&c, new_leader).await;
    assert_eq!(live(&records), model);
}
