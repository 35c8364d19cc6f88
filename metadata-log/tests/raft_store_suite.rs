//! openraft's storage conformance suite on Keel's Raft log store and state machine, once per
//! Raft log engine (`metadata_log_engine`).

use keel_metadata_log::raft_types::{StorageError, TypeConfig};
use keel_metadata_log::store::{
    DiskOptions, DurableSnapshot, LogEngine, LogStore, RaftDisk, StateMachineStore,
};
use openraft::testing::{StoreBuilder, Suite};

struct Builder(LogEngine);

impl StoreBuilder<TypeConfig, LogStore, StateMachineStore, tempfile::TempDir> for Builder {
    async fn build(
        &self,
    ) -> Result<(tempfile::TempDir, LogStore, StateMachineStore), StorageError> {
        let dir = tempfile::tempdir().expect("tempdir");
        // The suite purges logs without building snapshots, so purges are not held back at
        // the newest durable snapshot here (that rule has its own test in state_machine.rs).
        let disk = RaftDisk::open_with(&dir.path().join("raft"), DiskOptions::engine(self.0))
            .map_err(|e| openraft::StorageIOError::read_logs(&e))?;
        assert_eq!(disk.engine(), self.0);
        let sm = StateMachineStore::open(&dir.path().join("snapshots"))?;
        let log = LogStore::new(disk, DurableSnapshot::unbounded());
        Ok((dir, log, sm))
    }
}

#[test]
fn openraft_storage_suite_passes_on_the_segment_engine() {
    if let Err(e) = Suite::test_all(Builder(LogEngine::Segments)) {
        panic!("openraft storage suite failed on segments: {e}");
    }
}

#[test]
fn openraft_storage_suite_passes_on_the_sled_engine() {
    if let Err(e) = Suite::test_all(Builder(LogEngine::Sled)) {
        panic!("openraft storage suite failed on sled: {e}");
    }
}

/// `LogStore::committed` follows `save_committed` once it returned (so the metadata stream
/// may serve up to it), is read back at start, and is never lowered.
#[test]
fn the_committed_watermark_follows_saved_commits_and_never_falls() {
    use openraft::storage::RaftLogStorage;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let open = || {
        let disk = RaftDisk::open_with(&dir.path().join("raft"), DiskOptions::default())
            .expect("open the log");
        LogStore::new(disk, DurableSnapshot::unbounded())
    };
    let log_id = |index| openraft::LogId::new(openraft::CommittedLeaderId::new(1, 1), index);
    rt.block_on(async {
        let mut log = open();
        let watermark = log.committed();
        assert_eq!(*watermark.borrow(), 0, "nothing committed yet");
        assert_eq!(log.commit_time_ms(1), None);
        let before = keel_runtime::clock::wall_clock_ms();
        log.save_committed(Some(log_id(7))).await.expect("save");
        let after = keel_runtime::clock::wall_clock_ms();
        assert_eq!(*watermark.borrow(), 7);
        // Every index the rise covered has its time; the next one is not committed.
        let at = log.commit_time_ms(1).expect("a commit time");
        assert!(
            (before..=after).contains(&at),
            "{before} <= {at} <= {after}"
        );
        assert_eq!(log.commit_time_ms(7), Some(at));
        assert_eq!(log.commit_time_ms(8), None);
        // A clone (the controller's read handle) sees the same watermark.
        assert_eq!(*log.clone().committed().borrow(), 7);
        log.save_committed(Some(log_id(5))).await.expect("save");
        assert_eq!(*watermark.borrow(), 7, "the watermark never falls");
        log.save_committed(None).await.expect("save");
        assert_eq!(*watermark.borrow(), 7, "the watermark never falls");
        log.save_committed(Some(log_id(9))).await.expect("save");
        drop(log);
        // Reopened: the stored committed index raises the watermark when openraft reads it.
        let mut log = open();
        assert_eq!(*log.committed().borrow(), 0, "not read back yet");
        let read = log.read_committed().await.expect("read");
        assert_eq!(read.map(|l| l.index), Some(9));
        assert_eq!(*log.committed().borrow(), 9);
        // Committed before this process: when is not known.
        assert_eq!(log.commit_time_ms(9), None);
        log.save_committed(Some(log_id(10))).await.expect("save");
        assert!(log.commit_time_ms(10).is_some());
        assert_eq!(log.commit_time_ms(9), None);
    });
}
