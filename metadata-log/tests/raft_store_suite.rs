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
