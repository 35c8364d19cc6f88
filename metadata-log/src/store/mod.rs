//! openraft storage for `__cluster_metadata` (storage-v2 API of openraft 0.9).
//!
//! - [`disk`]: the key-value engine (sled) behind Keel's own [`RaftDisk`] type;
//! - [`log_store`]: the Raft log and vote ([`LogStore`]);
//! - [`state_machine`]: the metadata image and snapshot files ([`StateMachineStore`]).
//!
//! Layout under the controller's `metadata_log_dir`: `raft/` (sled database) and
//! `snapshots/` (snapshot files).

// openraft's traits fix the error type to its 200-byte `StorageError`; boxing it in our
// helpers would only add conversions at every trait boundary.
#![allow(clippy::result_large_err)]

pub mod disk;
pub mod log_store;
pub mod state_machine;

use std::path::Path;

pub use disk::RaftDisk;
pub use log_store::LogStore;
pub use state_machine::StateMachineStore;

use crate::raft_types::StorageError;

/// Opens (creating if needed) the Raft log and the state machine under `dir`.
///
/// Errors: the sled database cannot be opened (corrupt, or locked by another process), or
/// the newest snapshot is corrupt.
pub fn open(dir: &Path) -> Result<(LogStore, StateMachineStore), StorageError> {
    let disk =
        RaftDisk::open(&dir.join("raft")).map_err(|e| openraft::StorageIOError::read_logs(&e))?;
    let sm = StateMachineStore::open(&dir.join("snapshots"))?;
    Ok((LogStore::new(disk), sm))
}
