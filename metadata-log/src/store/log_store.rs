//! `LogStore`: openraft's `RaftLogStorage` on [`RaftDisk`].
//!
//! Durability (DESIGN §1): `save_vote`, `save_committed`, `append` (before the `LogFlushed`
//! callback fires), `truncate` and `purge` flush to disk before they return. A vote or an entry whose append
//! callback fired survives a crash (kill -9) of the process.
//!
//! A purge waits until a durable snapshot covers what it removes ([`DurableSnapshot`]), so
//! after any crash every index is in the log or in a snapshot file. openraft runs log
//! commands in order, so entries appended after the purge wait too and the log never holds
//! a hole.

use std::fmt::Debug;
use std::io;
use std::ops::{Bound, RangeBounds};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::storage::{LogFlushed, LogState, RaftLogReader, RaftLogStorage};
use openraft::{AnyError, ErrorSubject, ErrorVerb, OptionalSend, StorageIOError, Vote};
use tokio::sync::watch;

use crate::raft_types::{Entry, LogId, StorageError, TypeConfig};
use crate::store::DurableSnapshot;
use crate::store::commit_times::CommitTimes;
use crate::store::raft_disk::RaftDisk;

pub(super) const KEY_VOTE: &str = "vote";
pub(super) const KEY_COMMITTED: &str = "committed";
pub(super) const KEY_LAST_PURGED: &str = "last_purged";
pub(super) const KEY_NODE_ID: &str = "node_id";

/// Upper bound on entries returned by one read (openraft asks for bounded ranges; this keeps
/// a bad range from loading the whole log).
const MAX_ENTRIES_PER_READ: usize = 65_536;

/// The Raft log of `__cluster_metadata`. Cheap to clone; clones share the same disk.
#[derive(Debug, Clone)]
pub struct LogStore {
    disk: RaftDisk,
    /// Purges wait for this index to cover them (see the module doc).
    durable_snapshot: DurableSnapshot,
    /// How long a purge waits for the snapshot that covers it before failing.
    purge_wait: Duration,
    /// The highest index known committed whose entry is durable here (see
    /// [`Self::committed`]). Never lowered.
    committed: Arc<watch::Sender<u64>>,
    /// When each recent rise of `committed` happened ([`Self::commit_time_ms`]).
    commit_times: Arc<Mutex<CommitTimes>>,
}

/// Default of how long a purge waits for the state machine to write the snapshot covering it.
/// The state machine writes a received snapshot right after it is handed over (decode, write,
/// two fsyncs): milliseconds at metadata sizes, so this is reached only when it failed.
pub const PURGE_WAIT: Duration = Duration::from_secs(30);

impl LogStore {
    /// Opens the log stored in `disk`; purges wait for `durable_snapshot` (the state machine's
    /// [`StateMachineStore::durable_snapshot`](crate::store::StateMachineStore::durable_snapshot),
    /// or [`DurableSnapshot::unbounded`] in storage tests that purge without snapshots) at
    /// most [`PURGE_WAIT`].
    pub fn new(disk: RaftDisk, durable_snapshot: DurableSnapshot) -> Self {
        Self {
            disk,
            durable_snapshot,
            purge_wait: PURGE_WAIT,
            committed: Arc::new(watch::channel(0).0),
            commit_times: Arc::default(),
        }
    }

    /// The highest log index (inclusive) known committed, raised once openraft's
    /// `save_committed` has made it durable here (and at start from the stored value), 0
    /// before any. Every entry up to it is final and in this log (or, below its start, in a
    /// snapshot), so it may be served before the state machine applies it (the metadata
    /// stream sends committed entries as they commit, as Kafka's Raft leader answers an
    /// observer's Fetch up to its high watermark, KIP-595). Never lowered.
    pub fn committed(&self) -> watch::Receiver<u64> {
        self.committed.subscribe()
    }

    /// When this node learned `index` committed, ms since the Unix epoch: the wall-clock time
    /// at which openraft handed a commit index covering it to `save_committed`. On the active
    /// controller that is the commit (a majority holds the entry); elsewhere it is when the
    /// leader's commit index reached this node. `None` for entries committed before this
    /// process started, not committed yet, or older than the last
    /// [`MAX_RISES`](super::commit_times::MAX_RISES) rises of the commit index.
    pub fn commit_time_ms(&self, index: u64) -> Option<i64> {
        self.commit_times
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .commit_time_ms(index)
    }

    /// Raises [`Self::committed`] to `committed`, which rose at `at_ms` (`None`: read back at
    /// start, time unknown).
    fn raise_committed(&self, committed: Option<LogId>, at_ms: Option<i64>) {
        let Some(index) = committed.map(|l| l.index) else {
            return;
        };
        {
            let mut times = self.commit_times.lock().unwrap_or_else(|e| e.into_inner());
            match at_ms {
                Some(at) => times.rise(index, at),
                None => times.forget_through(index),
            }
        }
        self.committed.send_if_modified(|v| {
            let higher = index > *v;
            if higher {
                *v = index;
            }
            higher
        });
    }

    /// Sets how long a purge waits for the snapshot covering it (default [`PURGE_WAIT`]).
    pub fn with_purge_wait(mut self, wait: Duration) -> Self {
        self.purge_wait = wait;
        self
    }

    fn get<T: serde::de::DeserializeOwned>(&self, key: &str) -> Result<Option<T>, StorageError> {
        let read_err = |e: &dyn std::error::Error| {
            StorageIOError::new(
                ErrorSubject::Store,
                ErrorVerb::Read,
                AnyError::error(e.to_string()),
            )
        };
        match self.disk.get_meta(key).map_err(|e| read_err(&e))? {
            Some(bytes) => Ok(Some(
                postcard::from_bytes(&bytes).map_err(|e| read_err(&e))?,
            )),
            None => Ok(None),
        }
    }

    fn put<T: serde::Serialize>(&self, key: &str, value: &T) -> io::Result<()> {
        let bytes = postcard::to_stdvec(value).map_err(io::Error::other)?;
        self.disk.put_meta(key, &bytes)
    }
}

/// What the Raft log directory holds, for start-up consistency checks
/// ([`super::open_checked`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredState {
    /// A vote was ever saved.
    pub has_vote: bool,
    /// The log was purged through this index (entries at or below it are gone).
    pub last_purged_index: Option<u64>,
    /// Term of the last entry in the log (0 when empty or only the initial membership entry).
    pub last_entry_term: u64,
    /// Index of the last entry in the log, `None` when it holds none.
    pub last_entry_index: Option<u64>,
    /// The committed index recorded on disk (durable before openraft applies up to it, never
    /// leading what was flushed).
    pub committed_index: Option<u64>,
}

impl LogStore {
    /// Reads [`StoredState`] from disk.
    ///
    /// Errors: a stored value or the last entry cannot be read or decoded.
    pub fn stored_state(&self) -> Result<StoredState, StorageError> {
        let has_vote = self.get::<Vote<u64>>(KEY_VOTE)?.is_some();
        let last_purged_index = self.get::<LogId>(KEY_LAST_PURGED)?.map(|l| l.index);
        let last = self
            .disk
            .last_entry()
            .map_err(|e| StorageIOError::read_logs(&e))?;
        let last_entry_term = match &last {
            Some((i, b)) => decode_entry(*i, b)?.log_id.leader_id.term,
            None => 0,
        };
        let committed_index = self
            .get::<Option<LogId>>(KEY_COMMITTED)?
            .flatten()
            .map(|l| l.index);
        Ok(StoredState {
            has_vote,
            last_purged_index,
            last_entry_term,
            last_entry_index: last.map(|(i, _)| i),
            committed_index,
        })
    }
}

impl LogStore {
    /// Records, durably, that this log and vote belong to node `node_id`, or checks that they
    /// do. Returns the other node's id when they belong to another node (its `raft/` was
    /// copied here: starting on it would vote and append as that node). A log written before
    /// this record existed is claimed by the first node that opens it.
    ///
    /// Errors: the record cannot be read, written or flushed.
    pub async fn claim_for_node(&mut self, node_id: u64) -> Result<Option<u64>, StorageError> {
        match self.get::<u64>(KEY_NODE_ID)? {
            Some(owner) if owner == node_id => Ok(None),
            Some(owner) => Ok(Some(owner)),
            None => {
                let write = |e: &io::Error| StorageIOError::write(e);
                self.put(KEY_NODE_ID, &node_id).map_err(|e| write(&e))?;
                self.disk.flush().await.map_err(|e| write(&e))?;
                Ok(None)
            }
        }
    }
}

fn decode_entry(index: u64, bytes: &[u8]) -> Result<Entry, StorageError> {
    postcard::from_bytes(bytes).map_err(|e| StorageIOError::read_log_at_index(index, &e).into())
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        let range = (range.start_bound().cloned(), range.end_bound().cloned());
        // Every entry of the range: openraft relies on getting the whole range it asks for
        // (its own callers bound the ranges: replication by max_payload_entries, apply by the
        // committed-but-unapplied window, which snapshots keep small).
        let raw = self
            .disk
            .entries(range, usize::MAX)
            .map_err(|e| StorageIOError::read_logs(&e))?;
        raw.iter().map(|(i, b)| decode_entry(*i, b)).collect()
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        let last_purged_log_id: Option<LogId> = self.get(KEY_LAST_PURGED)?;
        let last = self
            .disk
            .last_entry()
            .map_err(|e| StorageIOError::read_logs(&e))?;
        let last_log_id = match last {
            Some((i, b)) => Some(decode_entry(i, &b)?.log_id),
            None => last_purged_log_id,
        };
        Ok(LogState {
            last_purged_log_id,
            last_log_id,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<u64>) -> Result<(), StorageError> {
        self.put(KEY_VOTE, vote)
            .map_err(|e| StorageIOError::write_vote(&e))?;
        // The vote must be on disk before we answer any vote request with it.
        self.disk
            .flush()
            .await
            .map_err(|e| StorageIOError::write_vote(&e))?;
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<u64>>, StorageError> {
        self.get(KEY_VOTE)
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        // The commit was decided before this call; its time is taken before the flush.
        let decided_ms = keel_runtime::clock::wall_clock_ms();
        // Durable before it returns: openraft applies (and the controller then reports and
        // serves) entries only after this call, and at start re-applies the log up to the
        // committed log id read back. Saved lazily (as before #24), a node restarted while
        // cut off from its peers served its older snapshot state until a leader told it the
        // commit index again: its applied offset went backwards. The flush writes the log's
        // segments before `meta`, so the stored committed index never leads the log.
        self.put(KEY_COMMITTED, &committed)
            .map_err(|e| StorageIOError::write(&e))?;
        self.disk
            .flush()
            .await
            .map_err(|e| StorageIOError::write(&e))?;
        self.raise_committed(committed, Some(decided_ms));
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        let committed = self.get::<Option<LogId>>(KEY_COMMITTED)?.flatten();
        self.raise_committed(committed, None);
        Ok(committed)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut encoded = Vec::new();
        for e in entries {
            let bytes = postcard::to_stdvec(&e)
                .map_err(|err| StorageIOError::write_log_entry(e.log_id, &err))?;
            encoded.push((e.log_id.index, bytes));
        }
        debug_assert!(
            encoded.windows(2).all(|w| w[0].0 + 1 == w[1].0),
            "appended entries are not contiguous"
        );
        let res = match self.disk.put_entries(encoded) {
            // Entries must be on disk before openraft is told they are (they count toward
            // the commit quorum from that moment).
            Ok(()) => self.disk.flush().await,
            Err(e) => Err(e),
        };
        let report = res
            .as_ref()
            .map(|_| ())
            .map_err(|e| io::Error::new(e.kind(), e.to_string()));
        callback.log_io_completed(report);
        res.map_err(|e| StorageIOError::write_logs(&e).into())
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        self.disk
            .remove_from(log_id.index)
            .map_err(|e| StorageIOError::write_logs(&e))?;
        self.disk
            .flush()
            .await
            .map_err(|e| StorageIOError::write_logs(&e))?;
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        if !self
            .durable_snapshot
            .wait_for(log_id.index, self.purge_wait)
            .await
        {
            let e = io::Error::other(format!(
                "purging the log through offset {} waited {:?} for a snapshot covering it, but \
                 the newest durable snapshot ends at {}",
                log_id.index,
                self.purge_wait,
                self.durable_snapshot
                    .index()
                    .map_or("none".to_string(), |i| format!("offset {i}"))
            ));
            return Err(StorageIOError::write_logs(&e).into());
        }
        // Record the purge point first: a crash in between leaves extra entries below it,
        // which are never read, never a hole above it.
        self.put(KEY_LAST_PURGED, &log_id)
            .map_err(|e| StorageIOError::write(&e))?;
        self.disk
            .remove_through(log_id.index)
            .map_err(|e| StorageIOError::write_logs(&e))?;
        self.disk
            .flush()
            .await
            .map_err(|e| StorageIOError::write_logs(&e))?;
        Ok(())
    }
}

/// Reads entries in `[from, to)` (metadata offsets = Raft indexes) without a Raft node, e.g.
/// for `ReadMetadataLog` and tests. At most `max` entries.
pub fn read_entries(
    disk: &RaftDisk,
    from: u64,
    to: u64,
    max: usize,
) -> Result<Vec<Entry>, StorageError> {
    let raw = disk
        .entries(
            (Bound::Included(from), Bound::Excluded(to)),
            max.min(MAX_ENTRIES_PER_READ),
        )
        .map_err(|e| StorageIOError::read_logs(&e))?;
    raw.iter().map(|(i, b)| decode_entry(*i, b)).collect()
}
