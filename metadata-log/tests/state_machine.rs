//! The metadata state machine: atomic entries (a rejected batch leaves no record behind, on
//! every node alike), snapshot build/install/reload, and the published image.

mod common;

use common::*;
use keel_metadata_log::raft_types::{Entry, LogId, MetadataRecords};
use keel_metadata_log::records::MetadataRecord;
use keel_metadata_log::store::{self, StateMachineStore};
use keel_metadata_log::{MetadataImage, Provenance};
use openraft::storage::{RaftSnapshotBuilder, RaftStateMachine};
use openraft::{CommittedLeaderId, EntryPayload};

fn entry(index: u64, records: Vec<MetadataRecord>) -> Entry {
    Entry {
        log_id: LogId::new(CommittedLeaderId::new(2, 1), index),
        payload: EntryPayload::Normal(MetadataRecords::new(records)),
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn a_failing_record_rejects_its_whole_entry_and_nothing_else() {
    rt().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let (_, mut sm) = store::open(dir.path()).unwrap();
        let t = topic_id(1);
        let good1 = vec![register(1), register(2)];
        // First record valid, second refers to an unknown topic: the entry must vanish whole.
        let bad = vec![topic("half", t), change_isr(topic_id(9), 0, &[1])];
        let good2 = vec![topic("orders", t), partition(t, 0, &[1, 2], &[1, 2], 1)];
        let out = sm
            .apply([
                entry(1, good1.clone()),
                entry(2, bad),
                entry(3, good2.clone()),
            ])
            .await
            .unwrap();
        assert_eq!(out.len(), 3);
        assert!(out[0].rejected.is_none() && out[2].rejected.is_none());
        assert!(
            out[1]
                .rejected
                .as_deref()
                .unwrap()
                .starts_with("record 1: unknown topic id")
        );

        let expected = MetadataImage::empty()
            .with_records(Provenance { offset: 1, term: 2 }, &good1)
            .unwrap()
            .with_records(Provenance { offset: 3, term: 2 }, &good2)
            .unwrap();
        assert_eq!(sm.image(), &expected);
        assert!(sm.image().topics().get_by_name("half").is_none());
        let (last, _) = sm.applied_state().await.unwrap();
        assert_eq!(last.unwrap().index, 3);
        // Registrations in entry 1 got epoch 1 (their offset).
        assert_eq!(sm.image().broker(2).unwrap().epoch, 1);
        assert_eq!(sm.subscribe().borrow().provenance().offset, 3);
    });
}

#[test]
fn snapshot_builds_installs_on_another_node_and_reloads_on_open() {
    rt().block_on(async {
        let a_dir = tempfile::tempdir().unwrap();
        let b_dir = tempfile::tempdir().unwrap();
        let (_, mut a) = store::open(a_dir.path()).unwrap();
        let t = topic_id(1);
        a.apply([
            entry(1, vec![register(1), register(2), register(3)]),
            entry(
                2,
                vec![
                    topic("orders", t),
                    partition(t, 0, &[1, 2, 3], &[1, 2, 3], 1),
                ],
            ),
            entry(3, vec![change_leader(t, 0, 2, Some(&[2, 3]))]),
        ])
        .await
        .unwrap();
        let snap = a
            .get_snapshot_builder()
            .await
            .build_snapshot()
            .await
            .unwrap();
        assert_eq!(snap.meta.last_log_id.unwrap().index, 3);

        let (_, mut b) = store::open(b_dir.path()).unwrap();
        let mut data = b.begin_receiving_snapshot().await.unwrap();
        data.get_mut().extend_from_slice(snap.snapshot.get_ref());
        b.install_snapshot(&snap.meta, data).await.unwrap();
        assert_eq!(b.image(), a.image());
        assert_eq!(b.image().digest(), a.image().digest());

        // A restart of b loads the installed snapshot, and deletes what a crash left of an
        // interrupted snapshot write (a temp file never renamed into place).
        drop(b);
        let snapshots = b_dir.path().join("snapshots");
        let unfinished = snapshots.join(format!("snapshot-{:020}-{:020}.snap.tmp", 9, 2));
        std::fs::write(&unfinished, b"").unwrap();
        let b2 = StateMachineStore::open(&snapshots).unwrap();
        assert_eq!(b2.image(), a.image());
        assert!(!unfinished.exists(), "{} left behind", unfinished.display());

        // A damaged snapshot is refused and leaves the receiver unchanged.
        let (_, mut c) = store::open(tempfile::tempdir().unwrap().path()).unwrap();
        let mut bad = snap.snapshot.get_ref().clone();
        let mid = bad.len() / 2;
        bad[mid] ^= 0x40;
        let mut data = c.begin_receiving_snapshot().await.unwrap();
        data.get_mut().extend_from_slice(&bad);
        let err = c.install_snapshot(&snap.meta, data).await.unwrap_err();
        assert!(err.to_string().contains("checksum mismatch"), "{err}");
        assert!(c.image().is_empty());
    });
}

/// openraft 0.9 purges the log up to a received snapshot without waiting for the state
/// machine to write it (`following_handler::install_full_snapshot`). The purge waits until a
/// durable snapshot covers it, so a kill -9 between the two leaves a directory that opens:
/// every index is in the log or in a snapshot file. A purge never covered fails, naming it.
#[test]
fn a_purge_waits_for_a_durable_snapshot_covering_it() {
    use keel_metadata_log::store::DiskOptions;
    use openraft::storage::{RaftLogReader, RaftLogStorage, RaftLogStorageExt};
    use std::time::Duration;
    let dir = tempfile::tempdir().unwrap();
    let id = |i: u64| LogId::new(CommittedLeaderId::new(2, 1), i);
    rt().block_on(async {
        let (log, mut sm) = store::open(dir.path()).unwrap();
        let mut log = log.with_purge_wait(Duration::from_millis(200));
        log.save_vote(&openraft::Vote::new(2, 1)).await.unwrap();
        let entries: Vec<Entry> = (1..=20)
            .map(|i| entry(i, vec![register(i as i32)]))
            .collect();
        log.blocking_append(entries.clone()).await.unwrap();
        // No snapshot: the purge gives up after its wait, and nothing is purged.
        let err = log.purge(id(15)).await.unwrap_err().to_string();
        assert!(
            err.contains("through offset 15") && err.contains("ends at none"),
            "{err}"
        );
        assert_eq!(log.get_log_state().await.unwrap().last_purged_log_id, None);
        // A snapshot through 10 does not cover a purge through 15 either.
        sm.apply(entries[..10].to_vec()).await.unwrap();
        sm.get_snapshot_builder()
            .await
            .build_snapshot()
            .await
            .unwrap();
        let mut purging = log.clone().with_purge_wait(Duration::from_secs(30));
        let purge = tokio::spawn(async move { purging.purge(id(15)).await });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!purge.is_finished());
        assert_eq!(log.try_get_log_entries(0..100).await.unwrap().len(), 20);
        // The snapshot through 15 is written: the purge goes on.
        sm.apply(entries[10..15].to_vec()).await.unwrap();
        sm.get_snapshot_builder()
            .await
            .build_snapshot()
            .await
            .unwrap();
        purge.await.unwrap().unwrap();
    });
    let (mut log, _) = store::open_checked(dir.path(), DiskOptions::default()).unwrap();
    rt().block_on(async {
        let state = log.get_log_state().await.unwrap();
        assert_eq!(state.last_purged_log_id, Some(id(15)));
        let left = log.try_get_log_entries(0..100).await.unwrap();
        assert_eq!(left.first().map(|e| e.log_id.index), Some(16));
    });
}

/// A tail lost after it was flushed and its commit recorded (the disk lost writes it had
/// acknowledged, or a segment was truncated by hand) looks like a torn tail to the segment
/// files, but the recorded commit index tells it apart: the directory is refused.
#[test]
fn a_log_cut_below_its_recorded_commit_index_is_refused() {
    use keel_metadata_log::store::{DiskOptions, OpenError};
    use openraft::storage::{RaftLogStorage, RaftLogStorageExt};
    let dir = tempfile::tempdir().unwrap();
    rt().block_on(async {
        let (mut log, _sm) = store::open(dir.path()).unwrap();
        let entries: Vec<Entry> = (1..=10)
            .map(|i| entry(i, vec![register(i as i32)]))
            .collect();
        log.blocking_append(entries).await.unwrap();
        log.save_committed(Some(LogId::new(CommittedLeaderId::new(2, 1), 8)))
            .await
            .unwrap();
        log.save_vote(&openraft::Vote::new(2, 1)).await.unwrap();
    });
    let raft = dir.path().join("raft");
    let segment = std::fs::read_dir(&raft)
        .unwrap()
        .map(|d| d.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "log"))
        .unwrap();
    let len = std::fs::metadata(&segment).unwrap().len();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&segment)
        .unwrap();
    f.set_len(len * 3 / 10).unwrap();
    drop(f);
    let err = match store::open_checked(dir.path(), DiskOptions::default()) {
        Err(e @ OpenError::Inconsistent { .. }) => e.to_string(),
        Err(e) => panic!("refused for another reason: {e}"),
        Ok(_) => panic!("opened a log cut below its commit index"),
    };
    assert!(
        err.contains("offset 8 was committed") && err.contains("restore raft/ from a backup"),
        "{err}"
    );
}
