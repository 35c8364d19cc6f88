//! Metadata log benchmark: replay throughput and snapshot size/speed at 100,000 partitions.
//!
//! Run: `cargo bench -p keel-metadata-log --bench metadata`. Prints a table; targets (issue #2,
//! this 2-core machine): replay > 1,000,000 records/s; snapshot <= 150 bytes per partition;
//! decode of the 100k-partition snapshot < 1 s.
//!
//! `KEEL_BENCH_PARTITIONS` (default 100000) and `KEEL_BENCH_CHANGES` (default 1000000) scale
//! the run.

#[path = "../tests/common/mod.rs"]
mod common;

use std::path::Path;
use std::time::Instant;

use common::*;
use keel_metadata_log::records::MetadataRecord;
use keel_metadata_log::{MetadataDelta, MetadataImage, Provenance, snapshot};

const PARTITIONS_PER_TOPIC: usize = 100;
const BROKERS: i32 = 6;
const RF: usize = 3;
/// Records per Raft entry when replaying entry by entry (a controller batch).
const RECORDS_PER_ENTRY: usize = 100;

fn env_usize(key: &str, default: usize) -> usize {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn creation_records(partitions: usize) -> Vec<MetadataRecord> {
    let mut out: Vec<MetadataRecord> = (1..=BROKERS).map(register).collect();
    let topics = partitions.div_ceil(PARTITIONS_PER_TOPIC);
    for t in 0..topics {
        let id = topic_id(t as u128);
        out.push(topic(&format!("topic-{t:05}"), id));
        for p in 0..PARTITIONS_PER_TOPIC.min(partitions - t * PARTITIONS_PER_TOPIC) {
            let replicas: Vec<i32> = (0..RF)
                .map(|i| ((t + p + i) % BROKERS as usize) as i32 + 1)
                .collect();
            out.push(partition(id, p as i32, &replicas, &replicas, replicas[0]));
        }
    }
    out
}

/// Entries per `RaftStateMachine::apply` call in the state-machine row.
const ENTRIES_PER_APPLY: usize = 64;

/// Feeds `create` (one entry) then `changes` through `StateMachineStore::apply`; returns the
/// seconds spent applying `changes`.
fn state_machine_apply(create: &[MetadataRecord], changes: &[MetadataRecord]) -> f64 {
    use keel_metadata_log::raft_types::{Entry, LogId, MetadataRecords};
    use openraft::storage::RaftStateMachine;
    use openraft::{CommittedLeaderId, EntryPayload};
    let entry = |index: u64, records: &[MetadataRecord]| Entry {
        log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
        payload: EntryPayload::Normal(MetadataRecords::new(records.to_vec())),
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (_, mut sm) = keel_metadata_log::store::open(dir.path()).unwrap();
    rt.block_on(async {
        sm.apply([entry(1, create)]).await.unwrap();
        let entries: Vec<Entry> = changes
            .chunks(RECORDS_PER_ENTRY)
            .enumerate()
            .map(|(i, c)| entry(2 + i as u64, c))
            .collect();
        let groups: Vec<Vec<Entry>> = entries
            .chunks(ENTRIES_PER_APPLY)
            .map(<[Entry]>::to_vec)
            .collect();
        let t = Instant::now();
        for group in groups {
            let out = sm.apply(group).await.unwrap();
            assert!(out.iter().all(|o| o.rejected.is_none()));
        }
        t.elapsed().as_secs_f64()
    })
}

/// ISR shrinks and expands, alternating, spread over all partitions.
fn change_records(partitions: usize, count: usize) -> Vec<MetadataRecord> {
    let mut rng = Rng(42);
    (0..count)
        .map(|i| {
            let n = rng.below(partitions as u64) as usize;
            let (t, p) = (n / PARTITIONS_PER_TOPIC, n % PARTITIONS_PER_TOPIC);
            let replicas: Vec<i32> = (0..RF)
                .map(|k| ((t + p + k) % BROKERS as usize) as i32 + 1)
                .collect();
            let isr = if i % 2 == 0 {
                &replicas[..2]
            } else {
                &replicas[..]
            };
            change_isr(topic_id(t as u128), p as i32, isr)
        })
        .collect()
}

fn rate(n: usize, secs: f64) -> String {
    format!("{:>12.0}", n as f64 / secs)
}

fn main() {
    let partitions = env_usize("KEEL_BENCH_PARTITIONS", 100_000);
    let changes = env_usize("KEEL_BENCH_CHANGES", 1_000_000);
    println!(
        "keel-metadata-log benchmark: {partitions} partitions (RF {RF}, {BROKERS} brokers), {changes} ISR changes"
    );
    println!();
    println!("{:<52} {:>14} {:>12}", "measure", "value", "target");
    let row =
        |name: &str, value: String, target: &str| println!("{name:<52} {value:>14} {target:>12}");

    // 1. Replay of the creation records into one delta.
    let create = creation_records(partitions);
    let t = Instant::now();
    let mut delta = MetadataDelta::new(MetadataImage::empty());
    delta.set_provenance(Provenance { offset: 1, term: 1 });
    for r in &create {
        delta.replay(r).unwrap();
    }
    let image = delta.apply();
    let secs = t.elapsed().as_secs_f64();
    row(
        "replay: topic+partition creation, records/s",
        rate(create.len(), secs),
        "> 1000000",
    );
    assert_eq!(image.topics().partition_count(), partitions);

    // 2. ISR changes, one delta for all (a broker catching up from a snapshot).
    let changes_recs = change_records(partitions, changes);
    let t = Instant::now();
    let mut delta = MetadataDelta::new(image.clone());
    delta.set_provenance(Provenance { offset: 2, term: 1 });
    for r in &changes_recs {
        delta.replay(r).unwrap();
    }
    let after = delta.apply();
    let secs = t.elapsed().as_secs_f64();
    row(
        "replay: ISR changes, one delta, records/s",
        rate(changes, secs),
        "> 1000000",
    );

    // 3. ISR changes entry by entry, one image per entry (worst case of the state machine:
    //    one entry per apply call).
    let t = Instant::now();
    let mut img = image.clone();
    for (i, chunk) in changes_recs.chunks(RECORDS_PER_ENTRY).enumerate() {
        let at = Provenance {
            offset: 2 + i as u64,
            term: 1,
        };
        img = img.with_records(at, chunk).unwrap();
    }
    let secs = t.elapsed().as_secs_f64();
    row(
        &format!("replay: ISR changes, 1 image per {RECORDS_PER_ENTRY}-record entry, rec/s"),
        rate(changes, secs),
        "",
    );
    assert_eq!(
        img.digest(),
        after.digest(),
        "the two replay paths disagree"
    );

    // 4. The controller state machine (openraft apply) with entries of RECORDS_PER_ENTRY
    //    records, ENTRIES_PER_APPLY entries per apply call.
    let secs = state_machine_apply(&create, &changes_recs);
    row(
        &format!("replay: state machine, {ENTRIES_PER_APPLY} entries/apply, rec/s"),
        rate(changes, secs),
        "",
    );

    // 5. Snapshot encode / decode of the 100k-partition image.
    let t = Instant::now();
    let bytes = snapshot::encode(&after, &[]);
    let encode_secs = t.elapsed().as_secs_f64();
    row("snapshot: size, bytes", format!("{}", bytes.len()), "");
    row(
        "snapshot: bytes per partition",
        format!("{:.1}", bytes.len() as f64 / partitions as f64),
        "<= 150",
    );
    row(
        "snapshot: encode, ms",
        format!("{:.1}", encode_secs * 1e3),
        "",
    );
    let t = Instant::now();
    let snap = snapshot::decode(Path::new("bench"), &bytes).unwrap();
    let decode_secs = t.elapsed().as_secs_f64();
    row(
        "snapshot: decode (CRC + protobuf), ms",
        format!("{:.1}", decode_secs * 1e3),
        "< 1000",
    );
    let t = Instant::now();
    let back = snap.to_image(Path::new("bench")).unwrap();
    let load_secs = t.elapsed().as_secs_f64();
    row(
        "snapshot: decode + rebuild image, ms",
        format!("{:.1}", (decode_secs + load_secs) * 1e3),
        "< 1000",
    );
    assert_eq!(
        back.digest(),
        after.digest(),
        "snapshot round trip changed the image"
    );
    let t = Instant::now();
    let d = after.digest();
    row(
        "image digest (SHA-256 over records), ms",
        format!("{:.1}", t.elapsed().as_secs_f64() * 1e3),
        "",
    );
    println!();
    println!("digest {d}");
}
