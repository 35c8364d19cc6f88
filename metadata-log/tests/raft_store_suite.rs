//! openraft's storage conformance suite on Keel's Raft log store and state machine.

use keel_metadata_log::raft_types::{StorageError, TypeConfig};
use keel_metadata_log::store::{self, LogStore, StateMachineStore};
use openraft::testing::{StoreBuilder, Suite};

struct Builder;

impl StoreBuilder<TypeConfig, LogStore, StateMachineStore, tempfile::TempDir> for Builder {
    async fn build(
        &self,
    ) -> Result<(tempfile::TempDir, LogStore, StateMachineStore), StorageError> {
        let dir = tempfile::tempdir().expect("tempdir");
        let (log, sm) = store::open(dir.path())?;
        Ok((dir, log, sm))
    }
}

#[test]
fn openraft_storage_suite_passes_on_keel_store() {
    if let Err(e) = Suite::test_all(Builder) {
        panic!("openraft storage suite failed: {e}");
    }
}
