//! openraft's storage conformance suite on Keel's Raft log store and state machine.

use keel_metadata_log::raft_types::{StorageError, TypeConfig};
use keel_metadata_log::store::{DurableSnapshot, LogStore, RaftDisk, StateMachineStore};
use openraft::testing::{StoreBuilder, Suite};

struct Builder;

impl StoreBuilder<TypeConfig, LogStore, StateMachineStore, tempfile::TempDir> for Builder {
    async fn build(
        &self,
    ) -> Result<(tempfile::TempDir, LogStore, StateMachineStore), StorageError> {
        let dir = tempfile::tempdir().expect("tempdir");
        // The suite purges logs without building snapshots, so purges are not held back at
        // the newest durable snapshot here (that rule has its own test in state_machine.rs).
        let disk = RaftDisk::open(&dir.path().join("raft"))
            .map_err(|e| openraft::StorageIOError::read_logs(&e))?;
        let sm = StateMachineStore::open(&dir.path().join("snapshots"))?;
        let log = LogStore::new(disk, DurableSnapshot::unbounded());
        Ok((dir, log, sm))
    }
}

#[test]
fn openraft_storage_suite_passes_on_keel_store() {
    if let Err(e) = Suite::test_all(Builder) {
        panic!("openraft storage suite failed: {e}");
    }
}
