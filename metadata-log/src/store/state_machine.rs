//! `StateMachineStore`: openraft's `RaftStateMachine` for `__cluster_metadata`.
//!
//! The state machine is the [`MetadataImage`] in memory plus snapshot files on disk
//! (`<dir>/snapshot-<index:020>-<term:020>.snap`, the format of [`crate::snapshot`]). Applying
//! an entry replays its records into a delta; a batch that fails replay is rejected as a whole
//! (identically on every node) and reported in [`ApplyOutcome::rejected`]. On open the newest
//! snapshot file is loaded; openraft then re-applies the log above it.
//!
//! Every applied image is published on a `tokio::sync::watch` channel, which is how the
//! controller's write path and metadata readers see committed state.
//!
//! Invariant: `image.provenance().offset == last_applied.index` (0 when nothing applied).

use std::io::Cursor;
use std::path::{Path, PathBuf};

use openraft::storage::{RaftSnapshotBuilder, RaftStateMachine, Snapshot};
use openraft::{EntryPayload, OptionalSend, StorageIOError};
use tokio::sync::watch;

use crate::delta::MetadataDelta;
use crate::image::{MetadataImage, Provenance};
use crate::raft_types::{
    ApplyOutcome, Entry, LogId, SnapshotMeta, StorageError, StoredMembership, TypeConfig,
};
use crate::snapshot;
use crate::store::DurableSnapshot;

const SNAPSHOT_PREFIX: &str = "snapshot-";
const SNAPSHOT_SUFFIX: &str = ".snap";

/// The metadata state machine. See the module doc.
#[derive(Debug)]
pub struct StateMachineStore {
    dir: PathBuf,
    last_applied: Option<LogId>,
    membership: StoredMembership,
    image: MetadataImage,
    image_tx: watch::Sender<MetadataImage>,
    /// Counter making snapshot ids unique within this process.
    snapshots_built: u64,
    /// Raised after each snapshot file is durable; read by the log store's purge.
    durable: DurableSnapshot,
}

impl StateMachineStore {
    /// Opens the state machine whose snapshots live in `dir`, loading the newest snapshot.
    ///
    /// Errors: `dir` cannot be created or listed; the newest snapshot file is unreadable or
    /// corrupt (the error names the file and byte offset).
    pub fn open(dir: &Path) -> Result<Self, StorageError> {
        std::fs::create_dir_all(dir).map_err(|e| StorageIOError::read_state_machine(&e))?;
        let mut sm = Self {
            dir: dir.to_path_buf(),
            last_applied: None,
            membership: StoredMembership::default(),
            image: MetadataImage::empty(),
            image_tx: watch::channel(MetadataImage::empty()).0,
            snapshots_built: 0,
            durable: DurableSnapshot::default(),
        };
        remove_unfinished_snapshots(dir)?;
        if let Some(path) = newest_snapshot(dir)? {
            let snap =
                snapshot::read_file(&path).map_err(|e| StorageIOError::read_snapshot(None, &e))?;
            let meta: SnapshotMeta = postcard::from_bytes(&snap.header.raft_meta)
                .map_err(|e| StorageIOError::read_snapshot(None, &e))?;
            sm.image = snap
                .to_image(&path)
                .map_err(|e| StorageIOError::read_snapshot(None, &e))?;
            sm.last_applied = meta.last_log_id;
            sm.membership = meta.last_membership;
            if let Some(last) = sm.last_applied {
                sm.durable.raise(last.index);
            }
            tracing::info!(path = %path.display(), offset = sm.image.provenance().offset, "loaded metadata snapshot");
        }
        sm.image_tx.send_replace(sm.image.clone());
        Ok(sm)
    }

    /// The image after the last applied entry.
    pub fn image(&self) -> &MetadataImage {
        &self.image
    }

    /// A receiver that sees every newly applied image.
    pub fn subscribe(&self) -> watch::Receiver<MetadataImage> {
        self.image_tx.subscribe()
    }

    /// The newest snapshot made durable by this state machine (see [`DurableSnapshot`]); the
    /// log store must be given this handle.
    pub fn durable_snapshot(&self) -> DurableSnapshot {
        self.durable.clone()
    }

    /// The last applied log id: right after [`open`](Self::open), that of the newest
    /// snapshot (`None` when there is none).
    pub fn last_applied(&self) -> Option<LogId> {
        self.last_applied
    }

    fn check_invariant(&self) {
        debug_assert_eq!(
            self.image.provenance().offset,
            self.last_applied.map_or(0, |l| l.index),
            "image provenance and last applied diverged"
        );
    }
}

fn provenance(log_id: LogId) -> Provenance {
    Provenance {
        offset: log_id.index,
        term: log_id.leader_id.term,
    }
}

/// Reads the newest snapshot in a state machine's snapshot directory (for serving brokers
/// and tools while the state machine runs). `None` when there is none yet.
///
/// Errors: the directory cannot be listed, or the file is unreadable or corrupt.
pub fn read_newest_snapshot(dir: &Path) -> Result<Option<snapshot::Snapshot>, StorageError> {
    // The state machine may replace the newest file between listing and reading (a newer
    // snapshot is written, older ones removed): list again, a bounded number of times.
    const ATTEMPTS: usize = 3;
    for attempt in 1..=ATTEMPTS {
        let Some(path) = newest_snapshot(dir)? else {
            return Ok(None);
        };
        match snapshot::read_file(&path) {
            Ok(s) => return Ok(Some(s)),
            Err(snapshot::SnapshotError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound && attempt < ATTEMPTS => {}
            Err(e) => return Err(StorageIOError::read_snapshot(None, &e).into()),
        }
    }
    unreachable!("the last attempt returns")
}

/// The index of the newest snapshot file in `dir`; `None` when `dir` is missing or holds none.
///
/// Errors: `dir` exists but cannot be listed.
pub(crate) fn newest_snapshot_index(dir: &Path) -> Result<Option<u64>, StorageError> {
    if !dir.exists() {
        return Ok(None);
    }
    Ok(snapshot_files(dir)?.into_iter().map(|(i, _)| i).max())
}

/// Deletes the temp files of snapshot writes that a crash interrupted (`<snapshot>.tmp`,
/// see [`snapshot::write_atomic`]): never renamed into place, so never read. A file that
/// cannot be deleted is logged and left (harmless clutter).
///
/// Errors: `dir` cannot be listed.
fn remove_unfinished_snapshots(dir: &Path) -> Result<(), StorageError> {
    let rd = std::fs::read_dir(dir).map_err(|e| StorageIOError::read_snapshot(None, &e))?;
    for ent in rd {
        let ent = ent.map_err(|e| StorageIOError::read_snapshot(None, &e))?;
        let name = ent.file_name();
        let Some(name) = name.to_str() else { continue };
        let unfinished = name.starts_with(SNAPSHOT_PREFIX)
            && name
                .strip_suffix(".tmp")
                .is_some_and(|n| n.ends_with(SNAPSHOT_SUFFIX));
        if !unfinished {
            continue;
        }
        let path = ent.path();
        match std::fs::remove_file(&path) {
            Ok(()) => {
                tracing::info!(path = %path.display(), "removed an unfinished snapshot write")
            }
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "could not remove an unfinished snapshot write")
            }
        }
    }
    Ok(())
}

/// The newest snapshot file in `dir`, by index.
fn newest_snapshot(dir: &Path) -> Result<Option<PathBuf>, StorageError> {
    Ok(snapshot_files(dir)?
        .into_iter()
        .max_by_key(|(i, _)| *i)
        .map(|(_, p)| p))
}

/// Snapshot files in `dir` with the index their name carries.
pub(super) fn snapshot_files(dir: &Path) -> Result<Vec<(u64, PathBuf)>, StorageError> {
    let mut out = Vec::new();
    let rd = std::fs::read_dir(dir).map_err(|e| StorageIOError::read_snapshot(None, &e))?;
    for ent in rd {
        let ent = ent.map_err(|e| StorageIOError::read_snapshot(None, &e))?;
        let name = ent.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(rest) = name
            .strip_prefix(SNAPSHOT_PREFIX)
            .and_then(|r| r.strip_suffix(SNAPSHOT_SUFFIX))
        else {
            continue;
        };
        if let Some(index) = rest.split('-').next().and_then(|i| i.parse::<u64>().ok()) {
            out.push((index, ent.path()));
        }
    }
    Ok(out)
}

fn snapshot_path(dir: &Path, last: Option<LogId>) -> PathBuf {
    let (index, term) = last.map_or((0, 0), |l| (l.index, l.leader_id.term));
    dir.join(format!(
        "{SNAPSHOT_PREFIX}{index:020}-{term:020}{SNAPSHOT_SUFFIX}"
    ))
}

/// Writes `bytes` durably as the snapshot for `last`, raises `durable` to it, and removes
/// older snapshot files.
fn store_snapshot(
    dir: &Path,
    durable: &DurableSnapshot,
    last: Option<LogId>,
    bytes: &[u8],
) -> Result<PathBuf, StorageError> {
    let path = snapshot_path(dir, last);
    let sig = None;
    snapshot::write_atomic(&path, bytes)
        .map_err(|e| StorageIOError::write_snapshot(sig.clone(), &e))?;
    if let Some(last) = last {
        durable.raise(last.index);
    }
    let keep = last.map_or(0, |l| l.index);
    for (index, old) in snapshot_files(dir)? {
        if index < keep {
            // A leftover older file is harmless (the newest is loaded), so log and go on.
            if let Err(e) = std::fs::remove_file(&old) {
                tracing::warn!(path = %old.display(), error = %e, "could not remove old snapshot");
            }
        }
    }
    Ok(path)
}

/// Builds snapshots from a frozen copy of the state (cheap: the image is `Arc`-shared).
#[derive(Debug)]
pub struct SnapshotBuilder {
    dir: PathBuf,
    durable: DurableSnapshot,
    image: MetadataImage,
    meta: SnapshotMeta,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError> {
        let started = std::time::Instant::now();
        let raft_meta = postcard::to_stdvec(&self.meta)
            .map_err(|e| StorageIOError::write_snapshot(None, &e))?;
        // Encoding a large image and writing it with fsync takes a while: off the async
        // workers, which must keep answering Raft RPCs and heartbeats meanwhile.
        let (dir, durable, image) = (self.dir.clone(), self.durable.clone(), self.image.clone());
        let last = self.meta.last_log_id;
        let (path, bytes) = tokio::task::spawn_blocking(move || {
            let bytes = snapshot::encode(&image, &raft_meta);
            store_snapshot(&dir, &durable, last, &bytes).map(|path| (path, bytes))
        })
        .await
        .map_err(|e| StorageIOError::write_snapshot(None, &std::io::Error::other(e)))??;
        tracing::info!(
            path = %path.display(),
            offset = self.image.provenance().offset,
            bytes = bytes.len(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "built metadata snapshot"
        );
        Ok(Snapshot {
            meta: self.meta.clone(),
            snapshot: Box::new(Cursor::new(bytes)),
        })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachineStore {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), StorageError> {
        Ok((self.last_applied, self.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<ApplyOutcome>, StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        // One delta for all entries of this call (one `apply()` of the image, not one per
        // entry). Entries are atomic: when a record fails, the delta is rebuilt from the
        // entries before it, so none of the failing entry's records remain.
        let entries: Vec<Entry> = entries.into_iter().collect();
        let mut out = Vec::with_capacity(entries.len());
        let mut delta = MetadataDelta::new(self.image.clone());
        let mut accepted: Vec<usize> = Vec::with_capacity(entries.len());
        for (i, entry) in entries.iter().enumerate() {
            let log_id = entry.log_id;
            delta.set_provenance(provenance(log_id));
            let mut outcome = ApplyOutcome {
                offset: log_id.index,
                rejected: None,
            };
            let records: &[_] = match &entry.payload {
                EntryPayload::Normal(batch) => &batch.records,
                EntryPayload::Blank => &[],
                EntryPayload::Membership(m) => {
                    self.membership = StoredMembership::new(Some(log_id), m.clone());
                    &[]
                }
            };
            if let Some((index, e)) = records
                .iter()
                .enumerate()
                .find_map(|(k, r)| delta.replay(r).err().map(|e| (k, e)))
            {
                tracing::error!(offset = log_id.index, record = index, error = %e, "rejected metadata batch");
                outcome.rejected = Some(format!("record {index}: {e}"));
                delta = MetadataDelta::new(self.image.clone());
                for &j in &accepted {
                    let prev = &entries[j];
                    delta.set_provenance(provenance(prev.log_id));
                    if let EntryPayload::Normal(batch) = &prev.payload {
                        for r in &batch.records {
                            delta.replay(r).expect("replayed once already");
                        }
                    }
                }
                // The entry still counts as applied; only its records are dropped.
                delta.set_provenance(provenance(log_id));
            } else {
                accepted.push(i);
            }
            self.last_applied = Some(log_id);
            out.push(outcome);
        }
        self.image = delta.apply();
        self.check_invariant();
        self.image_tx.send_replace(self.image.clone());
        Ok(out)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.snapshots_built += 1;
        let snapshot_id = match self.last_applied {
            Some(l) => format!("{}-{}-{}", l.leader_id.term, l.index, self.snapshots_built),
            None => format!("0-0-{}", self.snapshots_built),
        };
        SnapshotBuilder {
            dir: self.dir.clone(),
            durable: self.durable.clone(),
            image: self.image.clone(),
            meta: SnapshotMeta {
                last_log_id: self.last_applied,
                last_membership: self.membership.clone(),
                snapshot_id,
            },
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError> {
        let started = std::time::Instant::now();
        let bytes = snapshot.into_inner();
        let size = bytes.len();
        let sig = Some(meta.signature());
        let expected = meta.last_log_id.map_or(0, |l| l.index);
        let (dir, durable, last) = (self.dir.clone(), self.durable.clone(), meta.last_log_id);
        // Decoding, building the image and the fsync'd write take a while for a large image:
        // off the async workers (see `build_snapshot`).
        let job_sig = sig.clone();
        let (image, path) = tokio::task::spawn_blocking(move || {
            let label = Path::new("<received snapshot>");
            let snap = snapshot::decode(label, &bytes)
                .map_err(|e| StorageIOError::read_snapshot(job_sig.clone(), &e))?;
            if snap.header.provenance.offset != expected {
                let e = std::io::Error::other(format!(
                    "snapshot header offset {} does not match meta last log id {expected}",
                    snap.header.provenance.offset
                ));
                return Err(StorageIOError::read_snapshot(job_sig, &e).into());
            }
            let image = snap
                .to_image(label)
                .map_err(|e| StorageIOError::read_snapshot(job_sig.clone(), &e))?;
            let path = store_snapshot(&dir, &durable, last, &bytes)?;
            Ok::<_, StorageError>((image, path))
        })
        .await
        .map_err(|e| StorageIOError::read_snapshot(sig, &std::io::Error::other(e)))??;
        tracing::info!(
            path = %path.display(),
            offset = expected,
            bytes = size,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "installed metadata snapshot from the leader"
        );
        self.image = image;
        self.last_applied = meta.last_log_id;
        self.membership = meta.last_membership.clone();
        self.check_invariant();
        self.image_tx.send_replace(self.image.clone());
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError> {
        let dir = self.dir.clone();
        // Reads and checks the whole file: off the async workers (see `build_snapshot`).
        tokio::task::spawn_blocking(move || {
            let Some(path) = newest_snapshot(&dir)? else {
                return Ok(None);
            };
            let bytes =
                std::fs::read(&path).map_err(|e| StorageIOError::read_snapshot(None, &e))?;
            let snap = snapshot::decode(&path, &bytes)
                .map_err(|e| StorageIOError::read_snapshot(None, &e))?;
            let meta: SnapshotMeta = postcard::from_bytes(&snap.header.raft_meta)
                .map_err(|e| StorageIOError::read_snapshot(None, &e))?;
            Ok(Some(Snapshot {
                meta,
                snapshot: Box::new(Cursor::new(bytes)),
            }))
        })
        .await
        .map_err(|e| StorageIOError::read_snapshot(None, &std::io::Error::other(e)))?
    }
}
