//! openraft storage for `__cluster_metadata` (storage-v2 API of openraft 0.9).
//!
//! - [`raft_disk`]: the Raft log's bytes in the engine `metadata_log_engine` names
//!   ([`RaftDisk`]): [`disk`] (segment files, the default) or [`sled_disk`] (sled);
//! - [`log_store`]: the Raft log and vote ([`LogStore`]);
//! - [`state_machine`]: the metadata image and snapshot files ([`StateMachineStore`]);
//! - [`offline`]: read-only access to both for offline tools ([`offline::OfflineLog`]).
//!
//! Layout under the controller's `metadata_log_dir`: `raft/` (Raft log segments and `meta`, or
//! the sled database) and `snapshots/` (snapshot files).

// openraft's traits fix the error type to its 200-byte `StorageError`; boxing it in our
// helpers would only add conversions at every trait boundary.
#![allow(clippy::result_large_err)]

pub mod commit_times;
pub mod disk;
pub mod engine_files;
pub mod log_store;
pub mod offline;
pub mod raft_disk;
pub mod sled_disk;
pub mod state_machine;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

pub use disk::SegmentDisk;
pub use log_store::LogStore;
pub use raft_disk::{DiskOptions, LogEngine, RaftDisk};
pub use sled_disk::SledDisk;
pub use state_machine::StateMachineStore;

use crate::raft_types::StorageError;

/// Opens (creating if needed) the Raft log (segment files) and the state machine under `dir`.
///
/// Errors: see [`open_with`].
pub fn open(dir: &Path) -> Result<(LogStore, StateMachineStore), StorageError> {
    open_with(dir, DiskOptions::default())
}

/// Opens (creating if needed) the Raft log in `options.engine` and the state machine under
/// `dir`, without the consistency checks of [`open_checked`].
///
/// Errors: the Raft log cannot be opened (corrupt, locked by another process, or the other
/// engine's), or the newest snapshot is corrupt.
pub fn open_with(
    dir: &Path,
    options: DiskOptions,
) -> Result<(LogStore, StateMachineStore), StorageError> {
    let disk = RaftDisk::open_with(&dir.join("raft"), options)
        .map_err(|e| openraft::StorageIOError::read_logs(&e))?;
    let sm = StateMachineStore::open(&dir.join("snapshots"))?;
    let log = LogStore::new(disk, sm.durable_snapshot());
    Ok((log, sm))
}

/// The log index (inclusive) of the newest snapshot that is durable in `snapshots/`: its file
/// fsynced, renamed into place and the directory fsynced. `None` while there is none.
///
/// Shared by the state machine, which raises it after writing a snapshot (built or received),
/// and the log store, whose purges wait for it. openraft 0.9 does not order the two: on a
/// received snapshot it hands the install to the state-machine task and at once runs the
/// purge of the log up to the snapshot's last index
/// (`engine/handler/following_handler::install_full_snapshot`). A purge that ran ahead of the
/// snapshot file, and a kill -9 in between, would leave entries that neither the log nor any
/// snapshot holds. Cheap to clone; clones share the value.
#[derive(Debug, Clone)]
pub struct DurableSnapshot(Arc<watch::Sender<u64>>);

impl Default for DurableSnapshot {
    fn default() -> Self {
        Self(Arc::new(watch::channel(Self::NONE).0))
    }
}

impl DurableSnapshot {
    /// Stored as `index + 1`, so that 0 means "no snapshot".
    const NONE: u64 = 0;

    /// A watermark that covers every index, for storage tests that purge without building
    /// snapshots (openraft's storage `Suite`).
    pub fn unbounded() -> Self {
        Self(Arc::new(watch::channel(u64::MAX).0))
    }

    /// The newest durable snapshot's last log index, `None` when there is none.
    pub fn index(&self) -> Option<u64> {
        match *self.0.borrow() {
            Self::NONE => None,
            plus_one => Some(plus_one - 1),
        }
    }

    /// Records that a snapshot through `index` is durable. Never lowers the watermark.
    pub(crate) fn raise(&self, index: u64) {
        let new = index.saturating_add(1);
        self.0.send_if_modified(|v| {
            let higher = new > *v;
            if higher {
                *v = new;
            }
            higher
        });
    }

    /// Waits until a snapshot through `index` or later is durable, at most `timeout`.
    /// Returns whether it is.
    pub async fn wait_for(&self, index: u64, timeout: Duration) -> bool {
        let mut rx = self.0.subscribe();
        let covered = rx.wait_for(|v| *v > index);
        matches!(tokio::time::timeout(timeout, covered).await, Ok(Ok(_)))
    }
}

/// Why [`open_checked`] refused a metadata log directory.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The directory holds only part of a node's state (for example `raft/` was deleted but
    /// `snapshots/` kept). Starting on it would re-initialize the quorum or forget the vote
    /// (a node could vote twice in one term), so it is refused.
    #[error("{path} is inconsistent: {problem}")]
    Inconsistent {
        /// The file or directory at fault.
        path: PathBuf,
        /// What is missing, in one line.
        problem: String,
    },
    /// The Raft log could not be opened: locked by another process, corrupt (the message
    /// names the file and byte offset), or written by an earlier build (see
    /// [`RaftDisk::open`]).
    #[error("{0}")]
    Log(std::io::Error),
    /// The state machine could not be opened (see [`open`]).
    #[error("{0}")]
    Storage(Box<StorageError>),
}

/// Like [`open`], but first refuses a directory that holds a partial state:
///
/// - `raft/` missing while `snapshots/` holds a snapshot (checked before anything is
///   created);
/// - no vote in `raft/` while a snapshot exists, the log was purged, or the log holds an
///   entry of a term above 0 (openraft saves the vote before it accepts or builds any of
///   these, so a missing vote means the Raft state was lost);
/// - the log purged through an offset that no snapshot covers (`snapshots/` deleted: the
///   state machine could not be rebuilt).
///
/// Errors: [`OpenError::Inconsistent`] naming the path and what is missing,
/// [`OpenError::Log`] or [`OpenError::Storage`].
pub fn open_checked(
    dir: &Path,
    options: DiskOptions,
) -> Result<(LogStore, StateMachineStore), OpenError> {
    check_before_open(dir)?;
    let raft_dir = dir.join("raft");
    let disk = RaftDisk::open_with(&raft_dir, options).map_err(OpenError::Log)?;
    let sm = StateMachineStore::open(&dir.join("snapshots"))
        .map_err(|e| OpenError::Storage(Box::new(e)))?;
    let log = LogStore::new(disk, sm.durable_snapshot());
    let state = log
        .stored_state()
        .map_err(|e| OpenError::Storage(Box::new(e)))?;
    let snapshot_index = sm.last_applied().map(|l| l.index);
    if let Some(problem) = inconsistency(&state, snapshot_index) {
        return Err(OpenError::Inconsistent {
            path: raft_dir,
            problem,
        });
    }
    Ok((log, sm))
}

/// The check [`open_checked`] makes before it creates anything: `raft/` missing while
/// `snapshots/` holds a snapshot. Reads only.
///
/// Errors: [`OpenError::Inconsistent`] naming `raft/`, or [`OpenError::Storage`] when
/// `snapshots/` cannot be listed.
pub fn check_before_open(dir: &Path) -> Result<(), OpenError> {
    let raft_dir = dir.join("raft");
    let snap_dir = dir.join("snapshots");
    if !raft_dir.exists()
        && let Some(index) = state_machine::newest_snapshot_index(&snap_dir)
            .map_err(|e| OpenError::Storage(Box::new(e)))?
    {
        return Err(OpenError::Inconsistent {
            path: raft_dir,
            problem: format!(
                "missing (no Raft log and no vote), but {} holds a snapshot at offset {index}; \
                 restore it from a backup (emptying a voter's directory is unsafe, see the README)",
                snap_dir.display()
            ),
        });
    }
    Ok(())
}

fn offset_or_none(offset: Option<u64>) -> String {
    offset.map_or("none".to_string(), |o| format!("offset {o}"))
}

/// The pure part of [`open_checked`]: what is wrong with `raft` given the newest snapshot's
/// offset, or `None` when the two agree.
pub fn inconsistency(raft: &log_store::StoredState, snapshot_index: Option<u64>) -> Option<String> {
    if !raft.has_vote {
        if let Some(index) = snapshot_index {
            return Some(format!(
                "no vote, but snapshots/ holds a snapshot at offset {index} (was raft/ deleted?); \
                 restore it from a backup (emptying a voter's directory is unsafe, see the README)"
            ));
        }
        if let Some(purged) = raft.last_purged_index {
            return Some(format!(
                "no vote, but the log was purged through offset {purged}"
            ));
        }
        if raft.last_entry_term > 0 {
            return Some(format!(
                "no vote, but the log holds entries of term {}",
                raft.last_entry_term
            ));
        }
    }
    // A purge point without the snapshot that covers it first: the more specific cause
    // (snapshots/ deleted) when the log also ends below its committed offset.
    let purge_problem = match (raft.last_purged_index, snapshot_index) {
        (Some(purged), None) => Some(format!(
            "the log was purged through offset {purged} but snapshots/ holds no snapshot \
             (was snapshots/ deleted?)"
        )),
        (Some(purged), Some(index)) if index < purged => Some(format!(
            "the log was purged through offset {purged} but the newest snapshot in snapshots/ \
             ends at offset {index}"
        )),
        _ => None,
    };
    if purge_problem.is_some() {
        return purge_problem;
    }
    // The committed index reaches disk only after the entries up to it were flushed, so a
    // log (and snapshot) ending below it lost flushed entries: a deleted or cut segment.
    if let Some(committed) = raft.committed_index {
        let held = raft.last_entry_index.max(snapshot_index);
        if held.is_none_or(|h| h < committed) {
            return Some(format!(
                "offset {committed} was committed, but the log ends at {} and the newest \
                 snapshot at {} (a segment was deleted or cut); restore raft/ from a backup",
                offset_or_none(raft.last_entry_index),
                offset_or_none(snapshot_index),
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::inconsistency;
    use super::log_store::StoredState;

    fn state(has_vote: bool, last_purged_index: Option<u64>, last_entry_term: u64) -> StoredState {
        StoredState {
            has_vote,
            last_purged_index,
            last_entry_term,
            last_entry_index: None,
            committed_index: None,
        }
    }

    #[test]
    fn a_log_ending_below_its_committed_index_is_refused() {
        let with = |last: Option<u64>, committed: Option<u64>| StoredState {
            last_entry_index: last,
            committed_index: committed,
            ..state(true, None, 3)
        };
        assert_eq!(inconsistency(&with(Some(10), Some(10)), None), None);
        assert_eq!(inconsistency(&with(Some(10), Some(7)), None), None);
        assert_eq!(inconsistency(&with(None, None), None), None);
        // A snapshot may hold what the log no longer does.
        assert_eq!(inconsistency(&with(Some(5), Some(9)), Some(9)), None);
        let p = inconsistency(&with(Some(5), Some(9)), Some(3)).unwrap();
        assert!(
            p.contains("offset 9 was committed")
                && p.contains("log ends at offset 5")
                && p.contains("snapshot at offset 3")
                && p.contains("backup"),
            "{p}"
        );
        let p = inconsistency(&with(None, Some(9)), None).unwrap();
        assert!(p.contains("log ends at none"), "{p}");
    }

    #[test]
    fn a_fresh_or_consistent_directory_passes() {
        assert_eq!(inconsistency(&state(false, None, 0), None), None);
        assert_eq!(inconsistency(&state(true, None, 3), None), None);
        assert_eq!(inconsistency(&state(true, None, 3), Some(10)), None);
        assert_eq!(inconsistency(&state(true, Some(10), 3), Some(10)), None);
        assert_eq!(inconsistency(&state(true, Some(5), 3), Some(10)), None);
    }

    #[test]
    fn a_snapshot_without_a_vote_is_refused() {
        let p = inconsistency(&state(false, None, 0), Some(42)).unwrap();
        assert!(p.contains("no vote") && p.contains("offset 42"), "{p}");
    }

    #[test]
    fn a_log_of_a_real_term_without_a_vote_is_refused() {
        // Term 0 is the initial membership entry, written before the first vote.
        assert_eq!(inconsistency(&state(false, None, 0), None), None);
        assert!(inconsistency(&state(false, None, 2), None).is_some());
        assert!(inconsistency(&state(false, Some(7), 0), None).is_some());
    }

    #[test]
    fn a_purged_log_without_a_covering_snapshot_is_refused() {
        let p = inconsistency(&state(true, Some(10), 3), None).unwrap();
        assert!(p.contains("purged through offset 10"), "{p}");
        assert!(inconsistency(&state(true, Some(10), 3), Some(9)).is_some());
    }
}
