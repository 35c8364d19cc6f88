//! Log compaction (Kafka `LogCleaner`, `Cleaner`, `LogCleanerManager`; KIP-58
//! `min.compaction.lag.ms`, KIP-354 `max.compaction.lag.ms`, KIP-534 tombstone delete
//! horizon). Issue #22: `__consumer_offsets` is a compacted topic.
//!
//! A pass over one log, in three parts so that the partition lock is held only for the cheap
//! steps (Kafka likewise reads and writes without `UnifiedLog.lock` and takes it only for
//! `replaceSegments`):
//! 1. under the lock, [`Log::plan_clean`] decides what to clean ([`Cleanable`], Kafka
//!    `LogToClean` / `cleanableOffsets`) and snapshots the immutable segments involved (open
//!    file handles and sizes) into a [`CleanPlan`];
//! 2. without the lock, [`CleanPlan::run`] builds the [`OffsetMap`] of the dirty section and
//!    writes one `{base}.log.cleaned` file per segment ([`CleanedLog`]);
//! 3. under the lock, one segment at a time in ascending offset order,
//!    [`Log::install_cleaned`] checks the segment is still the one that was read (no
//!    truncation, retention or append touched it) and swaps the cleaned file in; then
//!    [`Log::finish_clean`] writes the cleaner checkpoint.
//!
//! **What is cleaned.** Only whole segments strictly before the first uncleanable offset:
//! the active segment's base offset, the caller's upper bound (the high watermark: data not
//! yet committed may still be truncated), and the first segment whose largest timestamp is
//! within `min.compaction.lag.ms` of now. The dirty section starts at the cleaner checkpoint
//! (`cleaner-offset-checkpoint`, see below) and ends there, or earlier where the offset map
//! filled up (as Kafka: `endOffset = offsetMap.latestOffset + 1`). The segments from the log
//! start up to the end of the dirty section are rewritten, keeping a record when its offset
//! is past the end of the dirty section, or it has a key whose latest offset (per the map) is
//! not above its own and it is not an expired tombstone. Keyless records below the end are
//! dropped (Kafka counts them as invalid; the leader refuses them on a compacted topic, see
//! [`Log::append_as_leader`], so they only exist from before a policy change).
//!
//! **When.** [`Cleanable::due`]: dirty bytes / (clean + dirty bytes) >=
//! `min.cleanable.dirty.ratio`, or the oldest dirty segment's first batch is older than
//! `max.compaction.lag.ms`, or a tombstone kept by an earlier pass has reached its delete
//! horizon (tracked in memory like Kafka's `UnifiedLog.latestDeleteHorizon`, but the
//! earliest horizon rather than the latest, so tombstones go as soon as the first is due;
//! after a restart the next ratio-driven pass finds them).
//!
//! **Batches** keep their base offset, last offset delta, producer id/epoch and base
//! sequence ([`keel_record::RecordBatch::rebuilt_with`], Kafka `MemoryRecords.filterTo`), so
//! follower fetches, producer state and sequence checks see the same batch boundaries; a
//! batch whose records all go is dropped unless it is the newest batch of its producer, which
//! stays as an empty batch (Kafka `BatchRetention.RETAIN_EMPTY`).
//!
//! **Tombstones** (KIP-534, Kafka 3.1+ semantics): when a pass keeps a tombstone in a batch
//! without a delete horizon, it rewrites the batch with horizon = now +
//! `delete.retention.ms` stored as the batch's base timestamp plus attribute bit 6; a later
//! pass removes tombstones of batches whose horizon has passed. The horizon is therefore
//! measured from the first cleaning that saw the tombstone, on each replica independently,
//! with the injected clock (never a file's mtime).
//!
//! **Offset map bound.** [`OffsetMap`] maps a 128-bit digest of the key (two SipHash-1-3
//! runs with different prefixes, `std::hash::DefaultHasher`) to the latest offset, at most
//! [`CleanerConfig::offset_map_max_entries`] entries, derived from
//! `log.cleaner.dedupe.buffer.size` as Kafka's `SkimpyOffsetMap` does (24 bytes per entry,
//! load factor 0.9). Digests are not verified against the key, like Kafka's MD5 map: two keys
//! sharing a 128-bit digest (probability about n² / 2^129) would make the older one's latest
//! record look superseded.
//!
//! **Checkpoint.** Per partition: `<partition dir>/cleaner-offset-checkpoint` (Kafka keeps one
//! per log dir, `topic partition offset` lines): the end of the last completed pass's dirty
//! section, written atomically after every segment of the pass is installed. Per partition
//! means no cross-partition file or lock, and the file moves and disappears with its
//! partition. A missing, garbled or out-of-range checkpoint restarts at the log start (the
//! next pass reads more, nothing else changes).
//!
//! **Crash safety** (Kafka `LocalLog.replaceSegments` / `LogLoader`): a cleaned segment is
//! written as `{base}.log.cleaned` (deleted on open: incomplete), fdatasynced, renamed to
//! `{base}.log.swap` and the directory fsynced (from here the swap is completed on open,
//! [`super::segment::complete_swap_file`]), then the old `{base}.index` / `.timeindex` are
//! deleted and the swap file renamed over `{base}.log`. One segment's swap is durable before
//! the next one starts, so after a crash the swapped segments are a prefix of the pass: a
//! record is only ever removed because of a newer record (or a tombstone) at a higher offset,
//! which is in the same or a later segment, so every prefix reads as a valid compaction of the
//! log. The checkpoint advances only after the whole pass. The old segment's file is replaced
//! by the rename; its data blocks are freed when the retired [`Segment`] (returned to the
//! caller) is dropped, off the lock.
//!
//! **Grouping** (Kafka `Cleaner.groupSegmentsBySize`): consecutive segments whose sizes add
//! up to at most `segment.bytes` (and whose offsets fit one segment's relative offsets) are
//! cleaned into one segment with the first one's base offset, so a compacted log does not
//! keep one small file per segment ever rolled. Installing a group: the `.swap` becomes
//! durable, then the group's other segments are renamed to `.deleted` and the directory
//! fsynced, then the swap replaces the first segment's file. On open a `.swap` of base `b`
//! whose last batch ends at `L` replaces every segment with a base in `[b, L]` (all of them
//! are group members: their offsets are inside the swap's); a group member after `L` (all its
//! records were removed) may survive a crash and is read as before (its records are
//! superseded by ones at higher offsets that are still there, so the latest value per key is
//! the same) until the next pass.

use std::collections::HashSet;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use keel_record::{BatchHeader, HEADER_SIZE, RecordBatch};

use super::checkpoint::{fsync_dir, read_checkpoint_lines, write_atomically};
use super::error::{LogError, LogResult, io_err};
use super::partition_log::Log;
use super::segment::Segment;

mod filter;
mod offset_map;

use filter::{batch_has_tombstone, filter_batch};
pub use offset_map::{OffsetMap, key_digest};

pub use super::checkpoint::CLEANER_CHECKPOINT;

/// Bytes per offset map entry in Kafka's accounting (16-byte digest + 8-byte offset).
pub const OFFSET_MAP_ENTRY_BYTES: u64 = 24;

/// Kafka `log.cleaner.io.buffer.load.factor`.
const LOAD_FACTOR: f64 = 0.9;

/// Read chunk of the cleaner's segment scans (bytes); a larger batch is read whole.
const READ_CHUNK_BYTES: usize = 1 << 20;

/// Broker-wide cleaner settings (not topic configs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CleanerConfig {
    /// `log.cleaner.dedupe.buffer.size`: memory for the offset map, bytes. Kafka default
    /// 128 MiB (shared by its cleaner threads; Keel runs one pass at a time).
    pub dedupe_buffer_bytes: u64,
}

impl Default for CleanerConfig {
    fn default() -> Self {
        Self {
            dedupe_buffer_bytes: 128 << 20,
        }
    }
}

impl CleanerConfig {
    /// A config whose offset map holds exactly `entries` keys (tests).
    pub fn with_max_entries(entries: usize) -> Self {
        Self {
            dedupe_buffer_bytes: (entries as f64 / LOAD_FACTOR).ceil() as u64
                * OFFSET_MAP_ENTRY_BYTES,
        }
    }

    /// Keys the offset map holds: buffer / 24 bytes * 0.9 (Kafka `SkimpyOffsetMap`), at
    /// least 1.
    pub fn offset_map_max_entries(&self) -> usize {
        let slots = self.dedupe_buffer_bytes / OFFSET_MAP_ENTRY_BYTES;
        ((slots as f64 * LOAD_FACTOR) as usize).max(1)
    }
}

/// How dirty a compacted log is (Kafka `LogToClean`); from [`Log::cleanable`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cleanable {
    /// Start of the dirty section (the checkpoint, clamped to the log).
    pub first_dirty: i64,
    /// Base offset of the first segment that may not be cleaned.
    pub first_uncleanable: i64,
    /// Bytes of the cleanable segments wholly below `first_dirty`.
    pub clean_bytes: u64,
    /// Bytes of the cleanable segments holding dirty data.
    pub dirty_bytes: u64,
    /// `max.compaction.lag.ms` has passed for the oldest dirty data (KIP-354).
    pub lag_forced: bool,
    /// A tombstone kept by an earlier pass has reached its delete horizon.
    pub horizon_due: bool,
}

impl Cleanable {
    /// `dirty / (clean + dirty)`, 0 for an empty range.
    pub fn dirty_ratio(&self) -> f64 {
        let total = self.clean_bytes + self.dirty_bytes;
        if total == 0 {
            0.0
        } else {
            self.dirty_bytes as f64 / total as f64
        }
    }

    /// Whether a pass is due (Kafka `LogCleanerManager.grabFilthiestCompactedLog`).
    pub fn due(&self, min_cleanable_dirty_ratio: f64) -> bool {
        let dirty = self.dirty_bytes > 0;
        (dirty && (self.lag_forced || self.dirty_ratio() >= min_cleanable_dirty_ratio))
            || (self.horizon_due && self.clean_bytes + self.dirty_bytes > 0)
    }
}

/// A segment as the cleaner read it: the handle of its data file (immutable while below the
/// active segment) and what identifies it at install time.
#[derive(Debug, Clone)]
pub struct SegmentSnapshot {
    /// Base offset.
    pub base_offset: i64,
    /// Size when planned.
    pub size_bytes: u64,
    /// Offset after its last batch when planned.
    pub next_offset: i64,
    /// Kept on the cleaned segment.
    pub created_ms: i64,
    /// The segment's [`super::open_files::LazyFile`]: the same one at install time means the
    /// same segment.
    identity: Arc<super::open_files::LazyFile>,
    file: Arc<File>,
    path: PathBuf,
}

/// What one pass will clean, taken under the lock by [`Log::plan_clean`].
#[derive(Debug)]
pub struct CleanPlan {
    dir: PathBuf,
    /// The measurements that made the pass due.
    pub cleanable: Cleanable,
    /// Cleanable segments from the log start, ascending.
    segments: Vec<SegmentSnapshot>,
    /// The log's truncation count when planned (a truncation voids the pass).
    truncations: u64,
    delete_retention_ms: i64,
    index_interval_bytes: u64,
    /// `segment.bytes`: the bound of a group of segments cleaned into one.
    segment_bytes: u64,
    /// Last offset of each producer's newest batch (kept, possibly empty).
    producer_last_offsets: HashSet<i64>,
}

/// Counters of one pass (Kafka `CleanerStats`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CleanerStats {
    /// Bytes read (map building and rewriting).
    pub bytes_read: u64,
    /// Bytes written to cleaned segments.
    pub bytes_written: u64,
    /// Records removed.
    pub records_removed: u64,
    /// Records kept in the rewritten segments.
    pub records_retained: u64,
    /// Batches dropped whole.
    pub batches_removed: u64,
    /// Keys in the offset map.
    pub map_entries: u64,
}

/// A point in a pass where a test may stop it (simulating a crash there); production passes
/// never stop ([`never_stop`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CleanStep {
    /// A batch was appended to the `.cleaned` file of the segment at this base offset.
    BatchWritten(i64),
    /// The `.cleaned` file of this segment is complete (not yet synced or renamed).
    CleanedWritten(i64),
    /// This group's `.swap` file is durable; the old files are still in place.
    SwapDurable(i64),
    /// The group's segments after its first were renamed to `.deleted` (durably); the
    /// first segment's file is still the old one.
    GroupRetired(i64),
    /// This segment was swapped in.
    Installed(i64),
}

/// The hook of a production pass: never stops.
pub fn never_stop(_: CleanStep) -> bool {
    true
}

/// What [`Log::install_cleaned`] did with one cleaned segment.
#[derive(Debug)]
pub enum Install {
    /// Swapped in. The retired segment whose file the cleaned one replaced (drop it off the
    /// lock: that frees its blocks) and the `.deleted` files of the other segments of the
    /// group (delete them off the lock; the next open deletes what is left).
    Installed(Segment, Vec<PathBuf>),
    /// The log changed since the plan: the cleaned file was deleted; give the pass up
    /// ([`CleanedLog::discard`] the rest).
    LogChanged,
    /// The step hook stopped after the swap became durable (tests: a crash there).
    Stopped,
}

/// The output of [`CleanPlan::run`]: cleaned segments waiting to be installed.
#[derive(Debug)]
pub struct CleanedLog {
    /// (group of consecutive segments read, their cleaned replacement as one `.cleaned`
    /// file with the first one's base offset), ascending.
    pub segments: Vec<(Vec<SegmentSnapshot>, Segment)>,
    /// End of the dirty section cleaned: the next checkpoint.
    pub cleaned_upto: i64,
    /// Earliest delete horizon of a tombstone kept, if any.
    pub earliest_horizon_ms: Option<i64>,
    /// Counters.
    pub stats: CleanerStats,
    /// The log's truncation count when planned: pass it to [`Log::install_cleaned`].
    pub truncations: u64,
}

impl CleanedLog {
    /// Deletes every `.cleaned` file not installed (a pass given up).
    pub fn discard(self) {
        for (_, seg) in self.segments {
            if let Err(e) = seg.discard_cleaned() {
                tracing::warn!("could not delete a cleaned segment file: {e}");
            }
        }
    }
}

/// Reads the checkpoint of `dir`, `None` if missing or unreadable (logged).
fn read_cleaner_checkpoint(dir: &Path) -> Option<i64> {
    let path = dir.join(CLEANER_CHECKPOINT);
    match read_checkpoint_lines(&path) {
        Ok(Some(lines)) if lines.len() == 1 => lines[0].trim().parse().ok(),
        Ok(_) => None,
        Err(e) => {
            tracing::warn!(file = %path.display(), "ignoring the cleaner checkpoint: {e}");
            None
        }
    }
}

impl Log {
    /// How dirty the log is for the cleaner, with `upper_bound` the offset below which data
    /// may be cleaned (the high watermark) and `now_ms` the clock. `None` unless the policy
    /// includes `compact`.
    pub fn cleanable(&self, upper_bound: i64, now_ms: i64) -> Option<Cleanable> {
        let config = self.config();
        if !config.cleanup_policy.compact {
            return None;
        }
        let segments = self.segment_list();
        let active_base = segments.last().map_or(0, |s| s.base_offset());
        let lag_limit = now_ms.saturating_sub(config.min_compaction_lag_ms);
        let mut first_uncleanable = active_base;
        for s in &segments {
            let too_new = config.min_compaction_lag_ms > 0 && s.max_timestamp() > lag_limit;
            if s.base_offset() == active_base || s.next_offset() > upper_bound || too_new {
                first_uncleanable = s.base_offset();
                break;
            }
        }
        let first_dirty = match self.cleaner_checkpoint() {
            Some(o) if o >= self.log_start_offset() && o <= self.log_end_offset() => o,
            _ => self.log_start_offset(),
        };
        let (mut clean_bytes, mut dirty_bytes) = (0, 0);
        let mut oldest_dirty_ms: Option<i64> = None;
        for s in segments
            .iter()
            .take_while(|s| s.base_offset() < first_uncleanable)
        {
            if s.next_offset() <= first_dirty {
                clean_bytes += s.size_bytes();
            } else {
                dirty_bytes += s.size_bytes();
                oldest_dirty_ms.get_or_insert(match s.first_batch_timestamp() {
                    Some(t) if t >= 0 => t,
                    _ => s.created_ms(),
                });
            }
        }
        let lag_forced = oldest_dirty_ms
            .is_some_and(|t| now_ms.saturating_sub(t) > config.max_compaction_lag_ms);
        let horizon_due = self
            .earliest_delete_horizon_ms()
            .is_some_and(|h| h <= now_ms);
        Some(Cleanable {
            first_dirty,
            first_uncleanable,
            clean_bytes,
            dirty_bytes,
            lag_forced,
            horizon_due,
        })
    }

    /// Under the partition lock: the plan of a pass if one is due (see [`Cleanable::due`]),
    /// or always when `force` and something is cleanable.
    pub fn plan_clean(&self, upper_bound: i64, now_ms: i64, force: bool) -> Option<CleanPlan> {
        let cleanable = self.cleanable(upper_bound, now_ms)?;
        let any = cleanable.clean_bytes + cleanable.dirty_bytes > 0;
        if !(cleanable.due(self.config().min_cleanable_dirty_ratio) || (force && any)) {
            return None;
        }
        let segments = self
            .segment_list()
            .into_iter()
            .take_while(|s| s.base_offset() < cleanable.first_uncleanable)
            .map(|s| {
                let (file, path) = s.sync_handle()?;
                Ok(SegmentSnapshot {
                    base_offset: s.base_offset(),
                    size_bytes: s.size_bytes(),
                    next_offset: s.next_offset(),
                    created_ms: s.created_ms(),
                    identity: s.file_identity(),
                    file,
                    path,
                })
            })
            .collect::<LogResult<Vec<_>>>();
        let segments = match segments {
            Ok(s) => s,
            Err(e) => {
                // A closed segment file that cannot be opened again: no pass this time.
                tracing::warn!(dir = %self.dir().display(), "log cleaning skipped: {e}");
                return None;
            }
        };
        Some(CleanPlan {
            dir: self.dir().to_path_buf(),
            cleanable,
            segments,
            truncations: self.truncation_count(),
            delete_retention_ms: self.config().delete_retention_ms,
            index_interval_bytes: self.config().index_interval_bytes,
            segment_bytes: self.config().segment_bytes,
            producer_last_offsets: self.producer_last_offsets().into_values().collect(),
        })
    }

    /// Under the partition lock: swaps one cleaned group in if the segments it was cleaned
    /// from are unchanged (same files, sizes, none the active segment, no truncation since
    /// the plan), see [`Install`] and the module doc for the steps. `step` may stop after
    /// each durable step (tests); the files are then left as a crash there would.
    ///
    /// Errors: I/O. An error once the swap is durable leaves it for the next open to
    /// complete (never deleted: it may hold the only copy of retired members' records);
    /// until then the group's members already retired are missing from reads of this log.
    pub fn install_cleaned(
        &mut self,
        group: &[SegmentSnapshot],
        mut cleaned: Segment,
        truncations: u64,
        step: &mut dyn FnMut(CleanStep) -> bool,
    ) -> LogResult<Install> {
        let active = self.segment_list().last().map(|s| s.base_offset());
        let unchanged = truncations == self.truncation_count()
            && !group.is_empty()
            && group.iter().all(|old| {
                active != Some(old.base_offset)
                    && self.segment(old.base_offset).is_some_and(|s| {
                        s.same_file(&old.identity) && s.size_bytes() == old.size_bytes
                    })
            });
        if !unchanged {
            tracing::info!(dir = %self.dir().display(), base = cleaned.base_offset(), "log changed during cleaning: cleaned segment discarded");
            cleaned.discard_cleaned()?;
            return Ok(Install::LogChanged);
        }
        let base = group[0].base_offset;
        self.mark_offset_gaps()?;
        cleaned.cleaned_to_swap()?;
        fsync_dir(self.dir())?;
        if !step(CleanStep::SwapDurable(base)) {
            // Left on disk as a crash here would.
            drop(cleaned);
            return Ok(Install::Stopped);
        }
        let mut deleted = Vec::new();
        if group.len() > 1 {
            for old in &group[1..] {
                deleted.extend(self.retire_segment(old.base_offset)?);
            }
            // Durable before the swap replaces the first file: a crash must never find the
            // new first segment next to an old member it overlaps.
            fsync_dir(self.dir())?;
            if !step(CleanStep::GroupRetired(base)) {
                drop(cleaned);
                return Ok(Install::Stopped);
            }
        }
        cleaned.complete_swap()?;
        let retired = self.replace_segment(cleaned);
        Ok(Install::Installed(retired, deleted))
    }

    /// Under the partition lock, after every segment of `cleaned` was installed: writes the
    /// cleaner checkpoint and remembers the earliest tombstone delete horizon.
    pub fn finish_clean(
        &mut self,
        cleaned_upto: i64,
        earliest_horizon_ms: Option<i64>,
    ) -> LogResult<()> {
        let path = self.dir().join(CLEANER_CHECKPOINT);
        write_atomically(&path, format!("0\n1\n{cleaned_upto}\n").as_bytes())?;
        self.set_cleaner_state(Some(cleaned_upto), earliest_horizon_ms);
        Ok(())
    }

    /// A whole pass under one `&mut` (tests and tools; the replica manager runs the parts
    /// with the lock released in between): plan (forced if `force`), run, install, finish.
    /// `step` may stop the pass at any [`CleanStep`], leaving the files as a crash there
    /// would. Returns the stats of a completed pass.
    pub fn clean(
        &mut self,
        upper_bound: i64,
        now_ms: i64,
        config: &CleanerConfig,
        force: bool,
        step: &mut dyn FnMut(CleanStep) -> bool,
    ) -> LogResult<Option<CleanerStats>> {
        let Some(plan) = self.plan_clean(upper_bound, now_ms, force) else {
            return Ok(None);
        };
        let Some(cleaned) = plan.run(now_ms, config, step)? else {
            return Ok(None);
        };
        let CleanedLog {
            segments,
            cleaned_upto,
            earliest_horizon_ms,
            stats,
            truncations,
        } = cleaned;
        let mut pending = segments.into_iter();
        while let Some((group, new)) = pending.next() {
            let base = group[0].base_offset;
            match self.install_cleaned(&group, new, truncations, step)? {
                Install::Installed(_retired, deleted) => {
                    for path in deleted {
                        super::segment::remove_if_exists(&path)?;
                    }
                }
                Install::LogChanged => {
                    for (_, seg) in pending {
                        seg.discard_cleaned()?;
                    }
                    return Ok(None);
                }
                // Everything left on disk as a crash here would.
                Install::Stopped => return Ok(None),
            }
            if !step(CleanStep::Installed(base)) {
                return Ok(None);
            }
        }
        self.finish_clean(cleaned_upto, earliest_horizon_ms)?;
        Ok(Some(stats))
    }

    pub(super) fn load_cleaner_checkpoint(dir: &Path) -> Option<i64> {
        read_cleaner_checkpoint(dir)
    }
}

impl CleanPlan {
    /// The segments the pass will read.
    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    /// Without the partition lock: builds the offset map of the dirty section and writes the
    /// cleaned segments as `.cleaned` files (fdatasynced). `None` if `step` stopped it (the
    /// partial files stay, as after a crash). Errors: I/O, or a batch that no longer parses
    /// (the log changed under the pass; the caller drops the pass and its files).
    pub fn run(
        self,
        now_ms: i64,
        config: &CleanerConfig,
        step: &mut dyn FnMut(CleanStep) -> bool,
    ) -> LogResult<Option<CleanedLog>> {
        let mut stats = CleanerStats::default();
        let first_dirty = self.cleanable.first_dirty;
        let mut map = OffsetMap::new(config.offset_map_max_entries());
        let mut cleaned_upto = self.cleanable.first_uncleanable;
        'segments: for seg in self.segments.iter().filter(|s| s.next_offset > first_dirty) {
            let mut full_at = None;
            stats.bytes_read += for_each_batch(seg, |batch| {
                if batch.last_offset() < first_dirty {
                    return Ok(true);
                }
                for r in batch.records() {
                    let r = r?;
                    let offset = batch.base_offset() + i64::from(r.offset_delta);
                    if offset < first_dirty {
                        continue;
                    }
                    if let Some(key) = &r.key
                        && !map.put(key, offset)
                    {
                        full_at = Some(offset);
                        return Ok(false);
                    }
                }
                Ok(true)
            })?;
            if let Some(offset) = full_at {
                cleaned_upto = offset;
                break 'segments;
            }
        }
        stats.map_entries = map.len() as u64;
        let horizon = now_ms.saturating_add(self.delete_retention_ms);
        let mut earliest_horizon_ms: Option<i64> = None;
        let mut out = Vec::new();
        let to_clean: Vec<&SegmentSnapshot> = self
            .segments
            .iter()
            .filter(|s| s.base_offset < cleaned_upto)
            .collect();
        for group in group_by_size(&to_clean, self.segment_bytes) {
            let base = group[0].base_offset;
            let created_ms = group.iter().map(|s| s.created_ms).max().unwrap_or(0);
            let mut cleaned = Segment::create_cleaned(&self.dir, base, created_ms)?;
            let mut stopped = false;
            let mut rewrite = Ok(0);
            for seg in &group {
                let read = for_each_batch(seg, |batch| {
                    let kept = filter_batch(
                        &batch,
                        &map,
                        cleaned_upto,
                        now_ms,
                        horizon,
                        &self.producer_last_offsets,
                        &mut stats,
                    )?;
                    if let Some(b) = kept {
                        if let Some(h) = b.header().delete_horizon_ms()
                            && batch_has_tombstone(&b)
                        {
                            earliest_horizon_ms = Some(earliest_horizon_ms.map_or(h, |e| e.min(h)));
                        }
                        stats.bytes_written += b.size_bytes() as u64;
                        cleaned.append(
                            None,
                            b.as_bytes(),
                            b.header(),
                            self.index_interval_bytes,
                        )?;
                        if !step(CleanStep::BatchWritten(base)) {
                            stopped = true;
                            return Ok(false);
                        }
                    }
                    Ok(true)
                });
                match read {
                    Ok(n) => rewrite = rewrite.map(|total| total + n),
                    Err(e) => rewrite = Err(e),
                }
                if stopped || rewrite.is_err() {
                    break;
                }
            }
            if stopped {
                // Left on disk as a crash here would.
                drop(cleaned);
                return Ok(None);
            }
            let rewrite = rewrite.map(|read| stats.bytes_read += read);
            if let Err(e) = rewrite {
                let _ = cleaned.discard_cleaned();
                CleanedLog {
                    segments: out,
                    cleaned_upto,
                    earliest_horizon_ms,
                    stats,
                    truncations: self.truncations,
                }
                .discard();
                return Err(e);
            }
            if !step(CleanStep::CleanedWritten(base)) {
                return Ok(None);
            }
            cleaned.sync()?;
            out.push((group.into_iter().cloned().collect(), cleaned));
        }
        Ok(Some(CleanedLog {
            segments: out,
            cleaned_upto,
            earliest_horizon_ms,
            stats,
            truncations: self.truncations,
        }))
    }
}

/// Consecutive runs of `segments` (Kafka `Cleaner.groupSegmentsBySize`): a run's sizes add
/// up to at most `max_bytes` and its offsets stay within one segment's relative offsets
/// (`i32::MAX` past its base, as rolling keeps them); a segment larger than `max_bytes` is a
/// run of its own.
fn group_by_size<'a>(
    segments: &[&'a SegmentSnapshot],
    max_bytes: u64,
) -> Vec<Vec<&'a SegmentSnapshot>> {
    let mut groups: Vec<Vec<&SegmentSnapshot>> = Vec::new();
    let mut size = 0u64;
    for seg in segments {
        let fits = groups.last().is_some_and(|g| {
            size + seg.size_bytes <= max_bytes
                && seg.next_offset - g[0].base_offset <= i64::from(i32::MAX)
        });
        if fits {
            size += seg.size_bytes;
            groups.last_mut().expect("fits implies a group").push(seg);
        } else {
            size = seg.size_bytes;
            groups.push(vec![seg]);
        }
    }
    groups
}

/// Calls `f` with every batch of `seg` (as planned: up to its planned size) in order, until
/// it returns `false`. Reads in chunks of [`READ_CHUNK_BYTES`] (a larger batch whole).
/// Returns the bytes of the batches passed to `f`.
fn for_each_batch(
    seg: &SegmentSnapshot,
    mut f: impl FnMut(RecordBatch) -> LogResult<bool>,
) -> LogResult<u64> {
    let mut bytes_read = 0u64;
    let path = &seg.path;
    let mut pos = 0u64;
    // Each iteration consumes at least one batch (or fails): bounded by the size.
    while pos < seg.size_bytes {
        let mut head = [0u8; HEADER_SIZE];
        seg.file
            .read_exact_at(&mut head, pos)
            .map_err(io_err(path))?;
        let first = BatchHeader::parse(&head, pos)?;
        let len = (seg.size_bytes - pos).min(READ_CHUNK_BYTES.max(first.size_bytes()) as u64);
        let mut buf = vec![0u8; len as usize];
        seg.file
            .read_exact_at(&mut buf, pos)
            .map_err(io_err(path))?;
        let chunk = Bytes::from(buf);
        let mut off = 0usize;
        // Each iteration consumes one batch of the chunk.
        while off + HEADER_SIZE <= chunk.len() {
            let h = BatchHeader::parse(&chunk[off..], pos + off as u64)?;
            if off + h.size_bytes() > chunk.len() {
                break;
            }
            let batch = RecordBatch::from_bytes(chunk.slice(off..off + h.size_bytes()))?;
            off += h.size_bytes();
            bytes_read += h.size_bytes() as u64;
            if !f(batch)? {
                return Ok(bytes_read);
            }
        }
        if off == 0 {
            return Err(LogError::MalformedFile {
                path: path.clone(),
                reason: format!("batch at byte {pos} is torn"),
            });
        }
        pos += off as u64;
    }
    Ok(bytes_read)
}

#[cfg(test)]
mod tests;
