//! Crash tests of the Raft log store (the second one: appends, cuts and purges; see
//! `sigkill_during_cuts_and_purges_...`), each run on both Raft log engines (segment files and
//! sled; the child learns which from `KEEL_CRASH_ENGINE`).
//!
//! Crash test of the Raft log store: a child process writes a vote and appends entries,
//! printing each entry index after its append callback fired; the parent kills it with
//! SIGKILL mid-stream, reopens the store, and checks that the vote and every acknowledged
//! entry are on disk, intact. This is the durability contract of DESIGN §1 (the log must be
//! fsynced before the callback fires).
//!
//! The child is this same test binary re-executed with `KEEL_CRASH_CHILD_DIR` set, running
//! only `crash_child_appends_until_killed` (a no-op without the variable), so it works under
//! both `cargo test` and `cargo nextest`.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use keel_metadata_log::raft_types::{Entry, LogId, MetadataRecords};
use keel_metadata_log::records::{MetadataRecord, TopicRecord, metadata_record::Record};
use keel_metadata_log::store;
use openraft::storage::{RaftLogReader, RaftLogStorage, RaftLogStorageExt};
use openraft::{CommittedLeaderId, EntryPayload, Vote};

const ENV_DIR: &str = "KEEL_CRASH_CHILD_DIR";
/// The engine the child opens (`segments` or `sled`).
const ENV_ENGINE: &str = "KEEL_CRASH_ENGINE";

fn child_engine() -> store::LogEngine {
    std::env::var(ENV_ENGINE)
        .expect("the parent sets KEEL_CRASH_ENGINE")
        .parse()
        .unwrap()
}
/// The child stops by itself after this many entries (bound; the parent kills it long before).
const CHILD_MAX_ENTRIES: u64 = 200_000;
/// The parent kills the child once this many appends were acknowledged.
const KILL_AFTER_ACKS: u64 = 300;

fn entry(index: u64) -> Entry {
    let rec = MetadataRecord {
        record: Some(Record::Topic(TopicRecord {
            name: format!("topic-{index}"),
            topic_id: bytes::Bytes::copy_from_slice(
                &uuid::Uuid::from_u128(index as u128).into_bytes(),
            ),
        })),
    };
    Entry {
        log_id: LogId::new(CommittedLeaderId::new(3, 1), index),
        payload: EntryPayload::Normal(MetadataRecords::new(vec![rec])),
    }
}

/// Re-executes this test binary running only `test`, with `env` set to `dir` and the engine
/// in `KEEL_CRASH_ENGINE`; its stdout is piped.
fn spawn_child(
    test: &str,
    env: &str,
    dir: &std::path::Path,
    engine: store::LogEngine,
) -> std::process::Child {
    Command::new(std::env::current_exe().unwrap())
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(env, dir)
        .env(ENV_ENGINE, engine.as_str())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn crash_child_appends_until_killed() {
    let Ok(dir) = std::env::var(ENV_DIR) else {
        return;
    };
    let rt = runtime();
    rt.block_on(async {
        let options = store::DiskOptions::engine(child_engine());
        let (mut log, _sm) = store::open_with(std::path::Path::new(&dir), options).unwrap();
        log.save_vote(&Vote::new(3, 1)).await.unwrap();
        println!("vote saved");
        for i in 1..=CHILD_MAX_ENTRIES {
            log.blocking_append([entry(i)]).await.unwrap();
            println!("appended {i}");
        }
    });
}

#[test]
fn sigkill_during_appends_loses_no_acknowledged_entry_or_vote_segments() {
    sigkill_during_appends(store::LogEngine::Segments);
}

#[test]
fn sigkill_during_appends_loses_no_acknowledged_entry_or_vote_sled() {
    sigkill_during_appends(store::LogEngine::Sled);
}

fn sigkill_during_appends(engine: store::LogEngine) {
    if std::env::var(ENV_DIR).is_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut child = spawn_child(
        "crash_child_appends_until_killed",
        ENV_DIR,
        dir.path(),
        engine,
    );
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut vote_acked = false;
    let mut acked = 0u64;
    while acked < KILL_AFTER_ACKS {
        let Some(line) = lines.next() else {
            panic!("child exited early after {acked} acks")
        };
        let line = line.unwrap();
        // libtest may print its "test ... " banner on the same line as the first output.
        if line.ends_with("vote saved") {
            vote_acked = true;
        } else if let Some((_, i)) = line.rsplit_once("appended ") {
            acked = i.parse().unwrap();
        }
    }
    child.kill().unwrap(); // SIGKILL
    // Lines printed before the kill are acknowledgements too.
    for line in lines {
        // A line cut by the kill does not parse and does not count.
        if let Some(i) = line
            .unwrap()
            .rsplit_once("appended ")
            .and_then(|(_, i)| i.parse().ok())
        {
            acked = i;
        }
    }
    child.wait().unwrap();
    assert!(vote_acked);

    let rt = runtime();
    rt.block_on(async {
        let (mut log, _sm) =
            store::open_with(dir.path(), store::DiskOptions::engine(engine)).unwrap();
        assert_eq!(
            log.read_vote().await.unwrap(),
            Some(Vote::new(3, 1)),
            "vote lost"
        );
        let state = log.get_log_state().await.unwrap();
        let last = state.last_log_id.expect("log empty after crash").index;
        assert!(
            last >= acked,
            "acknowledged entry {acked} lost: log ends at {last}"
        );
        let entries = log.try_get_log_entries(1..=last).await.unwrap();
        assert_eq!(entries.len() as u64, last, "hole in the log");
        for (i, e) in entries.iter().enumerate() {
            let want = entry(i as u64 + 1);
            assert_eq!(e.log_id, want.log_id);
            assert_eq!(format!("{:?}", e.payload), format!("{:?}", want.payload));
            let (EntryPayload::Normal(got), EntryPayload::Normal(exp)) =
                (&e.payload, &want.payload)
            else {
                panic!("entry {} has the wrong payload kind", i + 1)
            };
            assert_eq!(got, exp, "entry {} corrupted", i + 1);
        }
        eprintln!("{engine}: acknowledged {acked}, recovered {last} entries");
    });
}

/// openraft reads whole ranges (e.g. every committed-but-unapplied entry at start-up): the
/// store must return every entry asked for, however many.
#[test]
fn a_range_read_returns_every_entry_even_beyond_65536() {
    let rt = runtime();
    for engine in [store::LogEngine::Segments, store::LogEngine::Sled] {
        let dir = tempfile::tempdir().unwrap();
        rt.block_on(async {
            let options = store::DiskOptions::engine(engine);
            let (mut log, _sm) = store::open_with(dir.path(), options).unwrap();
            const N: u64 = 70_000;
            log.blocking_append((1..=N).map(entry)).await.unwrap();
            let got = log.try_get_log_entries(1..=N).await.unwrap();
            assert_eq!(got.len() as u64, N, "{engine}");
            assert_eq!(got.last().unwrap().log_id.index, N);
        });
    }
}

// -------------------------------------------------------------------------------------------
// The segment files under cuts and purges: kill -9 at any point of any operation.
// -------------------------------------------------------------------------------------------

const ENV_DISK_DIR: &str = "KEEL_CRASH_DISK_CHILD_DIR";
/// Small segments, so cuts and purges cross segment boundaries and delete files (the segment
/// engine; sled ignores it).
fn small_segments(engine: store::LogEngine) -> store::DiskOptions {
    store::DiskOptions {
        engine,
        segment_bytes: 512,
    }
}
/// The child stops by itself after this many operations (bound).
const CHILD_MAX_OPS: u64 = 100_000;

/// One operation on the disk, each followed by a flush.
#[derive(Debug, Clone, Copy)]
enum DiskOp {
    Append { count: u64 },
    RemoveFrom(u64),
    RemoveThrough(u64),
}

/// The live entries and purge point the disk must hold after a sequence of operations.
#[derive(Debug, Clone, Default, PartialEq)]
struct Model {
    entries: std::collections::BTreeMap<u64, Vec<u8>>,
    purged: Option<u64>,
}

fn disk_payload(op: u64, index: u64) -> Vec<u8> {
    format!("op{op}-entry{index}-{}", "x".repeat((index % 40) as usize)).into_bytes()
}

impl Model {
    /// Operation `k` given this state (deterministic: parent and child agree).
    fn next_op(&self, k: u64) -> DiskOp {
        let r = k
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407)
            >> 33;
        let last = self.entries.last_key_value().map(|(&i, _)| i);
        let first = self.entries.first_key_value().map(|(&i, _)| i);
        match (r % 10, last, first) {
            (7, Some(l), _) => DiskOp::RemoveFrom(l.saturating_sub(r / 10 % 8)),
            (8, _, Some(f)) => DiskOp::RemoveThrough(f + r / 10 % 6),
            _ => DiskOp::Append {
                count: 1 + r / 10 % 5,
            },
        }
    }

    fn append_start(&self) -> u64 {
        self.entries
            .last_key_value()
            .map(|(&i, _)| i + 1)
            .or(self.purged.map(|p| p + 1))
            .unwrap_or(1)
    }

    fn apply(&mut self, k: u64, op: DiskOp) {
        match op {
            DiskOp::Append { count } => {
                let start = self.append_start();
                for i in start..start + count {
                    self.entries.insert(i, disk_payload(k, i));
                }
            }
            DiskOp::RemoveFrom(from) => {
                self.entries.split_off(&from);
            }
            DiskOp::RemoveThrough(through) => {
                if self.purged.is_none_or(|p| through > p) {
                    self.entries = self.entries.split_off(&(through + 1));
                    self.purged = Some(through);
                }
            }
        }
    }
}

fn run_op(disk: &store::RaftDisk, model: &Model, k: u64, op: DiskOp) {
    match op {
        DiskOp::Append { count } => {
            let start = model.append_start();
            disk.put_entries((start..start + count).map(|i| (i, disk_payload(k, i))))
                .unwrap();
        }
        DiskOp::RemoveFrom(from) => disk.remove_from(from).unwrap(),
        DiskOp::RemoveThrough(through) => disk.remove_through(through).unwrap(),
    }
}

#[test]
fn crash_child_cuts_and_purges_until_killed() {
    let Ok(dir) = std::env::var(ENV_DISK_DIR) else {
        return;
    };
    let rt = runtime();
    rt.block_on(async {
        let disk =
            store::RaftDisk::open_with(std::path::Path::new(&dir), small_segments(child_engine()))
                .unwrap();
        let mut model = Model::default();
        for k in 0..CHILD_MAX_OPS {
            let op = model.next_op(k);
            run_op(&disk, &model, k, op);
            disk.flush().await.unwrap();
            model.apply(k, op);
            println!("acked {k}");
        }
    });
}

/// kill -9 while a child appends, cuts the tail and purges the head of a log with 512-byte
/// segments (each operation flushed before it is acknowledged). The reopened log holds the
/// state after the last acknowledged operation or after the next one; an interrupted cut
/// may also leave a longer prefix of the state before it (whole later segments go first),
/// never anything else.
#[test]
fn sigkill_during_cuts_and_purges_leaves_the_state_before_or_after_the_operation_segments() {
    sigkill_during_cuts_and_purges(store::LogEngine::Segments);
}

#[test]
fn sigkill_during_cuts_and_purges_leaves_the_state_before_or_after_the_operation_sled() {
    sigkill_during_cuts_and_purges(store::LogEngine::Sled);
}

fn sigkill_during_cuts_and_purges(engine: store::LogEngine) {
    if std::env::var(ENV_DISK_DIR).is_ok() || std::env::var(ENV_DIR).is_ok() {
        return;
    }
    for round in 0..3u64 {
        let dir = tempfile::tempdir().unwrap();
        let mut child = spawn_child(
            "crash_child_cuts_and_purges_until_killed",
            ENV_DISK_DIR,
            dir.path(),
            engine,
        );
        let parse = |line: &str| {
            line.rsplit_once("acked ")
                .and_then(|(_, k)| k.parse::<u64>().ok())
        };
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let kill_after = 300 + round * 137;
        let mut acked = None;
        while acked.is_none_or(|k| k < kill_after) {
            let line = lines.next().expect("child exited early").unwrap();
            acked = parse(&line).or(acked);
        }
        child.kill().unwrap();
        for line in lines {
            if let Some(k) = parse(&line.unwrap()) {
                acked = Some(k);
            }
        }
        child.wait().unwrap();
        let acked = acked.unwrap();

        // The states before and after operation acked + 1.
        let mut before = Model::default();
        for k in 0..=acked {
            let op = before.next_op(k);
            before.apply(k, op);
        }
        let next_op = before.next_op(acked + 1);
        let mut after = before.clone();
        after.apply(acked + 1, next_op);

        let disk = store::RaftDisk::open_with(dir.path(), small_segments(engine)).unwrap();
        let got: Vec<(u64, Vec<u8>)> = disk
            .entries(
                (std::ops::Bound::Unbounded, std::ops::Bound::Unbounded),
                usize::MAX,
            )
            .unwrap();
        let as_vec = |m: &Model| m.entries.clone().into_iter().collect::<Vec<_>>();
        let (b, a) = (as_vec(&before), as_vec(&after));
        let prefix_of_before =
            matches!(next_op, DiskOp::RemoveFrom(_)) && got.len() >= a.len() && b.starts_with(&got);
        assert!(
            got == b || got == a || prefix_of_before,
            "{engine} round {round}: after op {acked} (next {next_op:?}) the log holds {:?}..{:?} ({} \
             entries); before: {} entries, after: {}",
            got.first().map(|e| e.0),
            got.last().map(|e| e.0),
            got.len(),
            b.len(),
            a.len()
        );
        eprintln!(
            "{engine} round {round}: killed after op {acked} (next {next_op:?}), recovered {} entries",
            got.len()
        );
    }
}
