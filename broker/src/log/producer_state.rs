//! Idempotent-producer state of one partition (Kafka `ProducerStateManager`, KIP-98,
//! KIP-360): per producer id its epoch and the metadata of its last
//! [`MAX_RETAINED_BATCHES`] batches, so a retried batch is answered with its original offsets
//! instead of being written twice (DESIGN §5, "Idempotent producer").
//!
//! The decision is the pure function [`check_append`]; [`ProducerStateManager`] holds the
//! map, applies appended batches ([`ProducerStateManager::update`]) and persists snapshots
//! `{offset:020}.snapshot` meaning "state after every batch below `offset`". The log rebuilds
//! the map on load from the newest readable snapshot plus a scan of the batches after it.
//!
//! Invariants: every entry keeps at most [`MAX_RETAINED_BATCHES`] batches, ordered by offset,
//! all with the entry's epoch; `map_end_offset` only covers batches actually applied.

use std::collections::{HashMap, VecDeque};
use std::fs;
use std::path::{Path, PathBuf};

use super::checkpoint::write_replaceable;
use super::error::{LogError, LogResult, io_err};
use super::segment::{DELETED_SUFFIX, deleted_path, parse_offset_file_name};
use keel_record::{BatchHeader, NO_PRODUCER_EPOCH, NO_SEQUENCE};

/// Batches retained per producer (Kafka `ProducerStateEntry.NUM_BATCHES_TO_RETAIN`, equal to
/// the producer's `max.in.flight.requests.per.connection` limit with idempotence).
pub const MAX_RETAINED_BATCHES: usize = 5;
/// File suffix of producer-state snapshots.
pub const SNAPSHOT_SUFFIX: &str = ".snapshot";
const SNAPSHOT_VERSION: u16 = 1;

/// Metadata of one appended batch of a producer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchMetadata {
    /// Sequence of the first record.
    pub first_sequence: i32,
    /// Sequence of the last record (wraps at `i32::MAX`).
    pub last_sequence: i32,
    /// Offset of the first record.
    pub first_offset: i64,
    /// Offset of the last record (inclusive).
    pub last_offset: i64,
    /// Max timestamp of the batch (ms).
    pub timestamp_ms: i64,
}

/// State of one producer id.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProducerEntry {
    /// Current producer epoch.
    pub producer_epoch: i16,
    /// Last batches, oldest first; at most [`MAX_RETAINED_BATCHES`].
    pub batches: VecDeque<BatchMetadata>,
}

impl ProducerEntry {
    /// Last sequence written by the current epoch, or [`NO_SEQUENCE`].
    pub fn last_sequence(&self) -> i32 {
        self.batches.back().map_or(NO_SEQUENCE, |b| b.last_sequence)
    }
}

/// Outcome of [`check_append`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppendCheck {
    /// New data: append it.
    Append,
    /// A retry of a batch already in the log: do not write, answer with these offsets.
    Duplicate {
        /// Offset the original batch got for its first record.
        first_offset: i64,
        /// Offset of its last record.
        last_offset: i64,
    },
}

/// `next == last + 1`, or the wrap from `i32::MAX` to 0 (Kafka `ProducerAppendInfo.inSequence`).
pub fn in_sequence(last_sequence: i32, next_sequence: i32) -> bool {
    next_sequence as i64 == last_sequence as i64 + 1
        || (next_sequence == 0 && last_sequence == i32::MAX)
}

/// The idempotence rules for a client (leader) append, in Kafka's order
/// (`UnifiedLog.analyzeAndValidateProducerState`, then `ProducerAppendInfo.checkProducerEpoch`
/// and `checkSequence`):
/// 1. same epoch and the same first/last sequence as a retained batch -> `Duplicate`;
/// 2. epoch lower than the current one -> `InvalidProducerEpoch`;
/// 3. a higher epoch must start at sequence 0 -> else `OutOfOrderSequence`;
/// 4. same epoch must continue the last sequence (`in_sequence`) -> else `OutOfOrderSequence`;
/// 5. an unknown producer id (no entry, e.g. its state expired with retention) is accepted
///    at any sequence, as Kafka does since KIP-360.
pub fn check_append(
    entry: Option<&ProducerEntry>,
    producer_id: i64,
    producer_epoch: i16,
    first_sequence: i32,
    last_sequence: i32,
) -> Result<AppendCheck, LogError> {
    let Some(entry) = entry else {
        return Ok(AppendCheck::Append);
    };
    if entry.producer_epoch == producer_epoch
        && let Some(b) = entry
            .batches
            .iter()
            .find(|b| b.first_sequence == first_sequence && b.last_sequence == last_sequence)
    {
        return Ok(AppendCheck::Duplicate {
            first_offset: b.first_offset,
            last_offset: b.last_offset,
        });
    }
    if producer_epoch < entry.producer_epoch {
        return Err(LogError::InvalidProducerEpoch {
            producer_id,
            producer_epoch,
            current_epoch: entry.producer_epoch,
        });
    }
    let out_of_order = LogError::OutOfOrderSequence {
        producer_id,
        producer_epoch,
        first_sequence,
        last_sequence: entry.last_sequence(),
    };
    if producer_epoch != entry.producer_epoch {
        if first_sequence != 0 && entry.producer_epoch != NO_PRODUCER_EPOCH {
            return Err(out_of_order);
        }
    } else if entry.producer_epoch != NO_PRODUCER_EPOCH
        && !in_sequence(entry.last_sequence(), first_sequence)
    {
        return Err(out_of_order);
    }
    Ok(AppendCheck::Append)
}

/// Owner of the producer map of one partition and of its snapshot files.
#[derive(Debug)]
pub struct ProducerStateManager {
    dir: PathBuf,
    producers: HashMap<i64, ProducerEntry>,
    /// The map reflects every producer batch with an offset below this (exclusive).
    map_end_offset: i64,
    /// `Some(o)` when reopening the log would rebuild exactly this state at offset `o` with
    /// nothing to replay: a snapshot at `o` was written or loaded and is still on disk, or
    /// the state was reset to `o` (no snapshot needed for an empty prefix). A snapshot at
    /// `map_end_offset == o` then adds nothing and [`ProducerStateManager::take_snapshot`]
    /// skips it (Kafka `ProducerStateManager.takeSnapshot`: "if not a new offset, then it is
    /// not worth taking another snapshot"). `None` after any change that a snapshot on disk
    /// does not hold (producers expired or dropped, that snapshot deleted).
    saved_at: Option<i64>,
}

/// Whether `name` is `{offset:020}.snapshot.deleted`: a snapshot below the log start that
/// [`ProducerStateManager::truncate_head`] renamed and a crash or shutdown kept from being
/// deleted.
pub fn is_deleted_snapshot_file_name(name: &str) -> bool {
    name.strip_suffix(DELETED_SUFFIX)
        .and_then(|target| parse_offset_file_name(target, SNAPSHOT_SUFFIX))
        .is_some()
}

/// Path of the snapshot for `offset` in `dir`.
pub fn snapshot_path(dir: &Path, offset: i64) -> PathBuf {
    dir.join(format!("{offset:020}{SNAPSHOT_SUFFIX}"))
}

impl ProducerStateManager {
    /// An empty state for the partition directory `dir`, covering nothing yet.
    pub fn new(dir: &Path) -> Self {
        Self {
            dir: dir.to_path_buf(),
            producers: HashMap::new(),
            map_end_offset: 0,
            saved_at: None,
        }
    }

    /// The entry of `producer_id`.
    pub fn entry(&self, producer_id: i64) -> Option<&ProducerEntry> {
        self.producers.get(&producer_id)
    }

    /// Last offset of each producer's newest batch: the batches the log cleaner keeps even
    /// when all their records are removed (Kafka `LogCleaner` keeps the last batch of every
    /// active producer so its sequence and epoch survive compaction).
    pub fn last_batch_offsets(&self) -> std::collections::HashMap<i64, i64> {
        self.producers
            .iter()
            .filter_map(|(id, e)| e.batches.back().map(|b| (*id, b.last_offset)))
            .collect()
    }

    /// Number of producers tracked.
    pub fn len(&self) -> usize {
        self.producers.len()
    }

    /// Whether no producer is tracked.
    pub fn is_empty(&self) -> bool {
        self.producers.is_empty()
    }

    /// Offset up to which (exclusive) the state has applied batches.
    pub fn map_end_offset(&self) -> i64 {
        self.map_end_offset
    }

    /// Runs [`check_append`] for a batch header against the current state.
    pub fn check(&self, h: &BatchHeader) -> Result<AppendCheck, LogError> {
        check_append(
            self.producers.get(&h.producer_id),
            h.producer_id,
            h.producer_epoch,
            h.base_sequence,
            h.last_sequence(),
        )
    }

    /// Applies a batch that is now in the log (leader or follower append, or a load scan).
    /// Non-idempotent batches only move `map_end_offset`. A higher epoch clears the retained
    /// batches (Kafka `ProducerStateEntry.update` / `maybeUpdateProducerEpoch`).
    pub fn update(&mut self, h: &BatchHeader) {
        debug_assert!(
            h.base_offset >= self.map_end_offset,
            "batches applied in offset order"
        );
        self.map_end_offset = h.next_offset();
        if !h.has_producer_id() {
            return;
        }
        let entry = self
            .producers
            .entry(h.producer_id)
            .or_insert_with(|| ProducerEntry {
                producer_epoch: h.producer_epoch,
                batches: VecDeque::new(),
            });
        if h.producer_epoch != entry.producer_epoch {
            entry.producer_epoch = h.producer_epoch;
            entry.batches.clear();
        }
        if entry.batches.len() == MAX_RETAINED_BATCHES {
            entry.batches.pop_front();
        }
        entry.batches.push_back(BatchMetadata {
            first_sequence: h.base_sequence,
            last_sequence: h.last_sequence(),
            first_offset: h.base_offset,
            last_offset: h.last_offset(),
            timestamp_ms: h.max_timestamp,
        });
        debug_assert!(entry.batches.len() <= MAX_RETAINED_BATCHES);
    }

    /// Forgets everything and covers nothing below `offset` (used when the log is truncated
    /// fully or the state is rebuilt from the log start).
    pub fn reset(&mut self, offset: i64) {
        self.producers.clear();
        self.map_end_offset = offset;
        self.saved_at = Some(offset);
    }

    /// Moves `map_end_offset` forward to `offset` after a replay that found no batch there.
    pub fn reset_end_if_behind(&mut self, offset: i64) {
        debug_assert!(self.map_end_offset <= offset);
        self.map_end_offset = self.map_end_offset.max(offset);
    }

    /// Forgets producers whose newest batch timestamp is at least `expiration_ms` older than
    /// `now_ms` (Kafka `ProducerStateManager.removeExpiredProducers`, KIP-854). Their next
    /// batch is then treated as from an unknown producer. Returns how many were removed.
    pub fn remove_expired(&mut self, now_ms: i64, expiration_ms: i64) -> usize {
        let before = self.producers.len();
        self.producers.retain(|_, e| {
            let last_ts = e.batches.back().map_or(i64::MIN, |b| b.timestamp_ms);
            now_ms.saturating_sub(last_ts) < expiration_ms
        });
        let removed = before - self.producers.len();
        if removed > 0 {
            self.saved_at = None;
        }
        removed
    }

    /// Drops producers whose last batch ends before `log_start_offset` (their data is gone;
    /// Kafka `ProducerStateManager.truncateHead`) and marks the snapshots below it for
    /// deletion: each is renamed to `<name>.deleted` (Kafka
    /// `ProducerStateManager.removeAndMarkSnapshotForDeletion`) and the renamed paths are
    /// returned, for the caller to unlink off the partition lock with the segment files it
    /// removed ([`crate::log::DeletedSegments::delete_files`]). An unlink frees the file's
    /// blocks, which on a file system mounted with `discard` waits for the device: measured
    /// 50-65 ms of unlinks under the partition lock during a 100 MiB/s produce run, which
    /// every request to the partition waited behind. [`crate::log::Log::open`] deletes
    /// `.deleted` snapshots a crash left behind ([`is_deleted_snapshot_file_name`]).
    ///
    /// Errors: `Io` naming the snapshot a listing or rename failed on; snapshots renamed
    /// before it stay `.deleted` until the next open.
    pub fn truncate_head(&mut self, log_start_offset: i64) -> LogResult<Vec<PathBuf>> {
        let before = self.producers.len();
        self.producers.retain(|_, e| {
            e.batches
                .back()
                .is_some_and(|b| b.last_offset >= log_start_offset)
        });
        if self.producers.len() != before || self.saved_at.is_some_and(|o| o < log_start_offset) {
            self.saved_at = None;
        }
        let mut renamed = Vec::new();
        for off in self.list_snapshots()? {
            if off < log_start_offset {
                let p = snapshot_path(&self.dir, off);
                let target = deleted_path(&p);
                fs::rename(&p, &target).map_err(io_err(&p))?;
                renamed.push(target);
            }
        }
        Ok(renamed)
    }

    /// Offsets of the snapshot files present, ascending. Only canonical
    /// `{offset:020}.snapshot` names count (`parse_offset_file_name`); other files are not
    /// the log's and are never read or deleted here (the log warns about them on open).
    pub fn list_snapshots(&self) -> LogResult<Vec<i64>> {
        let mut out = Vec::new();
        for e in fs::read_dir(&self.dir).map_err(io_err(&self.dir))? {
            let e = e.map_err(io_err(&self.dir))?;
            let name = e.file_name();
            if let Some(off) = name
                .to_str()
                .and_then(|n| parse_offset_file_name(n, SNAPSHOT_SUFFIX))
            {
                out.push(off);
            }
        }
        out.sort_unstable();
        Ok(out)
    }

    /// Writes `{map_end_offset:020}.snapshot` (CRC-protected) by rename, without fsync: a
    /// snapshot lost or torn by a crash fails its CRC on load and is replaced by an older
    /// one or a scan of the log ([`ProducerStateManager::load_snapshot`]).
    ///
    /// Skipped when nothing changed since the state was last saved or loaded at this offset
    /// (`saved_at`, Kafka `ProducerStateManager.takeSnapshot`): a clean shutdown of a broker
    /// with 100,000 idle partitions would otherwise create and rename 100,000 files. Returns
    /// whether a file was written.
    ///
    /// Errors: `Io` naming the file (the state is then not marked saved).
    pub fn take_snapshot(&mut self) -> LogResult<bool> {
        if self.saved_at == Some(self.map_end_offset) {
            return Ok(false);
        }
        let path = snapshot_path(&self.dir, self.map_end_offset);
        write_replaceable(&path, &self.encode())?;
        self.saved_at = Some(self.map_end_offset);
        Ok(true)
    }

    /// Deletes snapshot files with an offset above `offset` (after a truncation).
    pub fn delete_snapshots_above(&mut self, offset: i64) -> LogResult<()> {
        if self.saved_at.is_some_and(|o| o > offset) {
            self.saved_at = None;
        }
        for off in self.list_snapshots()? {
            if off > offset {
                let p = snapshot_path(&self.dir, off);
                fs::remove_file(&p).map_err(io_err(&p))?;
            }
        }
        Ok(())
    }

    /// Replaces the state with the newest readable snapshot at or below `max_offset` and at
    /// or above `min_offset`; unreadable (corrupt) snapshots are deleted with a warning.
    /// Without one, the state is reset to cover nothing below `min_offset`. Returns the
    /// offset from which the caller must replay batches (the new `map_end_offset`).
    pub fn load_snapshot(&mut self, min_offset: i64, max_offset: i64) -> LogResult<i64> {
        let snapshots = self.list_snapshots()?;
        for &off in snapshots.iter().rev() {
            if off > max_offset || off < min_offset {
                continue;
            }
            let path = snapshot_path(&self.dir, off);
            let data = fs::read(&path).map_err(io_err(&path))?;
            match decode_snapshot(&data) {
                Some((end, producers)) if end == off => {
                    self.producers = producers;
                    self.map_end_offset = off;
                    self.saved_at = Some(off);
                    return Ok(off);
                }
                _ => {
                    tracing::warn!(path = %path.display(), "deleting corrupt producer snapshot");
                    fs::remove_file(&path).map_err(io_err(&path))?;
                }
            }
        }
        self.reset(min_offset);
        Ok(min_offset)
    }

    fn encode(&self) -> Vec<u8> {
        let mut body = Vec::with_capacity(16 + self.producers.len() * 64);
        body.extend_from_slice(&self.map_end_offset.to_be_bytes());
        body.extend_from_slice(&(self.producers.len() as u32).to_be_bytes());
        let mut ids: Vec<&i64> = self.producers.keys().collect();
        ids.sort_unstable();
        for id in ids {
            let e = &self.producers[id];
            body.extend_from_slice(&id.to_be_bytes());
            body.extend_from_slice(&e.producer_epoch.to_be_bytes());
            body.push(e.batches.len() as u8);
            for b in &e.batches {
                body.extend_from_slice(&b.first_sequence.to_be_bytes());
                body.extend_from_slice(&b.last_sequence.to_be_bytes());
                body.extend_from_slice(&b.first_offset.to_be_bytes());
                body.extend_from_slice(&b.last_offset.to_be_bytes());
                body.extend_from_slice(&b.timestamp_ms.to_be_bytes());
            }
        }
        let mut out = Vec::with_capacity(body.len() + 6);
        out.extend_from_slice(&SNAPSHOT_VERSION.to_be_bytes());
        out.extend_from_slice(&crc32c::crc32c(&body).to_be_bytes());
        out.extend_from_slice(&body);
        out
    }
}

/// Bounds-checked big-endian reader for snapshot decoding.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.0.split_at_checked(N)?;
        self.0 = rest;
        head.try_into().ok()
    }
}

type SnapshotContents = (i64, HashMap<i64, ProducerEntry>);

fn decode_snapshot(data: &[u8]) -> Option<SnapshotContents> {
    let mut r = Reader(data);
    if u16::from_be_bytes(r.take()?) != SNAPSHOT_VERSION {
        return None;
    }
    let crc = u32::from_be_bytes(r.take()?);
    if crc32c::crc32c(r.0) != crc {
        return None;
    }
    let end = i64::from_be_bytes(r.take()?);
    let count = u32::from_be_bytes(r.take()?) as usize;
    // Each producer takes at least 11 bytes: bounds the loop and the allocation.
    if count > r.0.len() / 11 {
        return None;
    }
    let mut producers = HashMap::with_capacity(count);
    for _ in 0..count {
        let id = i64::from_be_bytes(r.take()?);
        let producer_epoch = i16::from_be_bytes(r.take()?);
        let n = r.take::<1>()?[0] as usize;
        if n > MAX_RETAINED_BATCHES {
            return None;
        }
        let mut batches = VecDeque::with_capacity(n);
        for _ in 0..n {
            batches.push_back(BatchMetadata {
                first_sequence: i32::from_be_bytes(r.take()?),
                last_sequence: i32::from_be_bytes(r.take()?),
                first_offset: i64::from_be_bytes(r.take()?),
                last_offset: i64::from_be_bytes(r.take()?),
                timestamp_ms: i64::from_be_bytes(r.take()?),
            });
        }
        producers.insert(
            id,
            ProducerEntry {
                producer_epoch,
                batches,
            },
        );
    }
    if !r.0.is_empty() {
        return None;
    }
    Some((end, producers))
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_record::RecordBatchBuilder;

    fn entry(epoch: i16, batches: &[(i32, i32, i64)]) -> ProducerEntry {
        ProducerEntry {
            producer_epoch: epoch,
            batches: batches
                .iter()
                .map(|&(f, l, off)| BatchMetadata {
                    first_sequence: f,
                    last_sequence: l,
                    first_offset: off,
                    last_offset: off + (l - f) as i64,
                    timestamp_ms: 0,
                })
                .collect(),
        }
    }

    /// The idempotence table of DESIGN §5 (one row per rule).
    #[test]
    fn idempotence_table() {
        let e = entry(2, &[(0, 4, 100), (5, 9, 105)]);
        let check = |ent: Option<&ProducerEntry>, epoch, first, last| {
            check_append(ent, 7, epoch, first, last).map_err(|e| e.kafka_name())
        };
        // Duplicate of a retained batch -> original offsets.
        assert_eq!(
            check(Some(&e), 2, 0, 4),
            Ok(AppendCheck::Duplicate {
                first_offset: 100,
                last_offset: 104
            })
        );
        assert_eq!(
            check(Some(&e), 2, 5, 9),
            Ok(AppendCheck::Duplicate {
                first_offset: 105,
                last_offset: 109
            })
        );
        // Next in sequence.
        assert_eq!(check(Some(&e), 2, 10, 12), Ok(AppendCheck::Append));
        // Gap and older sequence.
        assert_eq!(
            check(Some(&e), 2, 11, 12),
            Err("OUT_OF_ORDER_SEQUENCE_NUMBER")
        );
        assert_eq!(
            check(Some(&e), 2, 3, 6),
            Err("OUT_OF_ORDER_SEQUENCE_NUMBER")
        );
        // Lower epoch.
        assert_eq!(check(Some(&e), 1, 10, 12), Err("INVALID_PRODUCER_EPOCH"));
        assert_eq!(check(Some(&e), 1, 0, 4), Err("INVALID_PRODUCER_EPOCH"));
        // New epoch must start at 0.
        assert_eq!(check(Some(&e), 3, 0, 2), Ok(AppendCheck::Append));
        assert_eq!(
            check(Some(&e), 3, 10, 12),
            Err("OUT_OF_ORDER_SEQUENCE_NUMBER")
        );
        // Unknown producer: any sequence.
        assert_eq!(check(None, 0, 42, 43), Ok(AppendCheck::Append));
        // Wrap at i32::MAX.
        let w = entry(0, &[(i32::MAX - 1, i32::MAX, 10)]);
        assert_eq!(check(Some(&w), 0, 0, 3), Ok(AppendCheck::Append));
        assert_eq!(
            check(Some(&w), 0, 1, 3),
            Err("OUT_OF_ORDER_SEQUENCE_NUMBER")
        );
    }

    #[test]
    fn expired_producers_are_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let mut m = ProducerStateManager::new(dir.path());
        for (pid, ts, off) in [(1, 1_000, 0), (2, 5_000, 1)] {
            let mut b = RecordBatchBuilder::new(off).producer(pid, 0, 0);
            b.append(ts, None, Some(b"v"), &[]);
            m.update(b.build().header());
        }
        assert_eq!(m.remove_expired(10_999, 10_000), 0);
        assert_eq!(m.remove_expired(11_000, 10_000), 1);
        assert!(m.entry(1).is_none() && m.entry(2).is_some());
    }

    #[test]
    fn retains_last_five_and_snapshot_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let mut m = ProducerStateManager::new(dir.path());
        let mut offset = 0;
        for seq in 0..8 {
            let mut b = RecordBatchBuilder::new(offset).producer(7, 1, seq * 2);
            b.append(1, None, Some(b"a"), &[]);
            b.append(2, None, Some(b"b"), &[]);
            let batch = b.build();
            assert_eq!(m.check(batch.header()).unwrap(), AppendCheck::Append);
            m.update(batch.header());
            offset += 2;
        }
        let e = m.entry(7).unwrap();
        assert_eq!(e.batches.len(), MAX_RETAINED_BATCHES);
        assert_eq!(e.batches.front().unwrap().first_sequence, 6);
        assert_eq!(e.last_sequence(), 15);
        m.take_snapshot().unwrap();
        let mut loaded = ProducerStateManager::new(dir.path());
        assert_eq!(loaded.load_snapshot(0, 100).unwrap(), 16);
        assert_eq!(loaded.entry(7), m.entry(7));
        // A corrupt snapshot is deleted and ignored.
        let p = snapshot_path(dir.path(), 16);
        let mut bytes = fs::read(&p).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        fs::write(&p, bytes).unwrap();
        assert_eq!(loaded.load_snapshot(0, 100).unwrap(), 0);
        assert!(loaded.is_empty());
        assert!(!p.exists());
    }

    /// A snapshot is written only when the state moved since it was last saved or loaded
    /// (Kafka `ProducerStateManager.takeSnapshot`), and any change a snapshot on disk does
    /// not hold makes the next one write again.
    #[test]
    fn snapshot_is_skipped_only_while_the_saved_state_is_current() {
        let dir = tempfile::tempdir().unwrap();
        let files = |m: &ProducerStateManager| m.list_snapshots().unwrap();
        let mut m = ProducerStateManager::new(dir.path());
        // An empty log: loading finds nothing, and a replay from 0 rebuilds it.
        assert_eq!(m.load_snapshot(0, 0).unwrap(), 0);
        assert!(!m.take_snapshot().unwrap());
        assert!(files(&m).is_empty());
        let batch = |pid: i64, off: i64, ts: i64| {
            let mut b = RecordBatchBuilder::new(off).producer(pid, 0, off as i32);
            b.append(ts, None, Some(b"v"), &[]);
            b.build()
        };
        m.update(batch(1, 0, 1_000).header());
        m.update(batch(2, 1, 9_000).header());
        assert!(m.take_snapshot().unwrap());
        assert!(!m.take_snapshot().unwrap());
        assert_eq!(files(&m), vec![2]);
        // Reloaded at the same offset: nothing new to save.
        let mut loaded = ProducerStateManager::new(dir.path());
        assert_eq!(loaded.load_snapshot(0, 10).unwrap(), 2);
        assert!(!loaded.take_snapshot().unwrap());
        // An expired producer is a change at the same offset.
        assert_eq!(loaded.remove_expired(11_000, 10_000), 1);
        assert!(loaded.take_snapshot().unwrap());
        assert!(!loaded.take_snapshot().unwrap());
        // The saved snapshot deleted by a truncation below it: written again.
        loaded.delete_snapshots_above(1).unwrap();
        assert!(files(&loaded).is_empty());
        assert!(loaded.take_snapshot().unwrap());
        assert_eq!(files(&loaded), vec![2]);
        // A dropped producer (log start moved past its data) is a change too.
        loaded.update(batch(2, 2, 9_500).header());
        assert!(loaded.take_snapshot().unwrap());
        let renamed = loaded.truncate_head(3).unwrap();
        assert!(loaded.entry(1).is_none());
        // The snapshot below the new start is renamed, not unlinked (that is the caller's,
        // off the partition lock).
        assert_eq!(renamed, vec![deleted_path(&snapshot_path(dir.path(), 2))]);
        assert!(renamed[0].exists());
        assert!(is_deleted_snapshot_file_name(
            renamed[0].file_name().unwrap().to_str().unwrap()
        ));
        assert!(!is_deleted_snapshot_file_name(
            "00000000000000000002.snapshot"
        ));
        assert!(!is_deleted_snapshot_file_name("2.snapshot.deleted"));
        assert!(loaded.take_snapshot().unwrap());
        assert_eq!(files(&loaded), vec![3]);
    }
}
