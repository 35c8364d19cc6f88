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

#[test]
fn crash_child_appends_until_killed() {
    let Ok(dir) = std::env::var(ENV_DIR) else {
        return;
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (mut log, _sm) = store::open(std::path::Path::new(&dir)).unwrap();
        log.save_vote(&Vote::new(3, 1)).await.unwrap();
        println!("vote saved");
        for i in 1..=CHILD_MAX_ENTRIES {
            log.blocking_append([entry(i)]).await.unwrap();
            println!("appended {i}");
        }
    });
}

#[test]
fn sigkill_during_appends_loses_no_acknowledged_entry_or_vote() {
    if std::env::var(ENV_DIR).is_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "crash_child_appends_until_killed",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ENV_DIR, dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
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

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (mut log, _sm) = store::open(dir.path()).unwrap();
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
        eprintln!("acknowledged {acked}, recovered {last} entries");
    });
}

/// openraft reads whole ranges (e.g. every committed-but-unapplied entry at start-up): the
/// store must return every entry asked for, however many.
#[test]
fn a_range_read_returns_every_entry_even_beyond_65536() {
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (mut log, _sm) = store::open(dir.path()).unwrap();
        const N: u64 = 70_000;
        log.blocking_append((1..=N).map(entry)).await.unwrap();
        let got = log.try_get_log_entries(1..=N).await.unwrap();
        assert_eq!(got.len() as u64, N);
        assert_eq!(got.last().unwrap().log_id.index, N);
    });
}
