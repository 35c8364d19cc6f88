//! [`Log`]: one partition's segments, epoch cache and producer state (Kafka `UnifiedLog`).
//! See the module doc of [`crate::log`] for the invariants.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;

use super::cache_behind;
use super::checkpoint::fsync_dir;
use super::checkpoint::{CLEANER_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT};
use super::config::{Clock, LogConfig};
use super::epoch_cache::{LEADER_EPOCH_CHECKPOINT, LeaderEpochCache};
use super::error::{LogError, LogResult, io_err};
use super::producer_state::{
    AppendCheck, ProducerEntry, ProducerStateManager, SNAPSHOT_SUFFIX,
    is_deleted_snapshot_file_name,
};
use super::segment::{
    CLEANED_SUFFIX, INDEX_SUFFIX, LOG_SUFFIX, SWAP_SUFFIX, Segment, TIME_INDEX_SUFFIX,
    complete_swap_file, delete_in_steps, is_deleted_segment_file_name, parse_offset_file_name,
    remove_if_exists, segment_file, swap_file_end,
};
use keel_record::{
    BatchHeader, BatchIter, CONTROL_BIT, MAX_LOG_END_OFFSET, NO_TIMESTAMP, RecordBatch,
    TIMESTAMP_TYPE_BIT, TRANSACTIONAL_BIT, stamped_prefix,
};

/// Suffixes of the files named `{offset:020}{suffix}` that a partition directory holds.
const OFFSET_FILE_SUFFIXES: [&str; 4] =
    [LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, SNAPSHOT_SUFFIX];

/// Whether `name` is a file this log writes atomically (so `name.tmp` is its leftover).
fn is_own_atomic_file(name: &str) -> bool {
    name == LEADER_EPOCH_CHECKPOINT
        || name == CLEANER_CHECKPOINT
        || name == LOG_START_OFFSET_CHECKPOINT
        || [INDEX_SUFFIX, TIME_INDEX_SUFFIX, SNAPSHOT_SUFFIX]
            .iter()
            .any(|suffix| parse_offset_file_name(name, suffix).is_some())
}

/// The log start stored in `dir`'s [`LOG_START_OFFSET_CHECKPOINT`], if any. A file that does
/// not hold one offset >= 0 is `MalformedFile`: it is written atomically, so that is damage,
/// and ignoring it would bring deleted records back.
fn read_log_start_checkpoint(dir: &Path) -> LogResult<Option<i64>> {
    let path = dir.join(LOG_START_OFFSET_CHECKPOINT);
    let Some(lines) = super::checkpoint::read_checkpoint_lines(&path)? else {
        return Ok(None);
    };
    match lines.as_slice() {
        [one] => match one.trim().parse::<i64>() {
            Ok(offset) if offset >= 0 => Ok(Some(offset)),
            _ => Err(LogError::MalformedFile {
                path,
                reason: format!(
                    "line 3: {:?} is not an offset >= 0",
                    keel_proto::limits::clip(one)
                ),
            }),
        },
        _ => Err(LogError::MalformedFile {
            path,
            reason: format!("{} entries, expected 1", lines.len()),
        }),
    }
}

/// Writes `offset` as `dir`'s log start ([`LOG_START_OFFSET_CHECKPOINT`], Kafka's checkpoint
/// format: version 0, one entry), atomically and fsynced.
fn write_log_start_checkpoint(dir: &Path, offset: i64) -> LogResult<()> {
    super::checkpoint::write_atomically(
        &dir.join(LOG_START_OFFSET_CHECKPOINT),
        format!("0\n1\n{offset}\n").as_bytes(),
    )
}

/// Checks the timestamps of a client batch as Kafka's `LogValidator` does for CREATE_TIME
/// v2 batches: every record timestamp (`first_timestamp + delta`, deltas `min_delta ..=
/// max_delta`) must fit in an i64 and be >= 0 or `NO_TIMESTAMP` (else INVALID_TIMESTAMP).
/// Returns the largest record timestamp: the header's max timestamp drives rolling,
/// retention and timestamp lookups, so it is never taken on trust; a header that disagrees
/// is rewritten with it (and its CRC recomputed), as Kafka's `LogValidator` does.
fn check_leader_timestamps(h: &BatchHeader, min_delta: i64, max_delta: i64) -> LogResult<i64> {
    let invalid = |timestamp, reason| LogError::InvalidTimestamp {
        base_offset: h.base_offset,
        timestamp,
        reason,
    };
    let (Some(min_ts), Some(max_ts)) = (
        h.first_timestamp.checked_add(min_delta),
        h.first_timestamp.checked_add(max_delta),
    ) else {
        return Err(invalid(
            h.first_timestamp,
            "first timestamp + record timestamp delta overflows",
        ));
    };
    for ts in [h.first_timestamp, min_ts] {
        if ts < NO_TIMESTAMP {
            return Err(invalid(
                ts,
                "negative timestamp other than NO_TIMESTAMP (-1)",
            ));
        }
    }
    Ok(max_ts)
}

/// How to open a log.
#[derive(Debug, Clone, Copy, Default)]
pub struct LogOpenOptions {
    /// Offset below which the data is known to be flushed (from the data dir's
    /// `recovery-point-offset-checkpoint`; 0 if unknown). Segments from the one containing
    /// it onward are scanned and CRC-checked unless `clean_shutdown`.
    pub recovery_point: i64,
    /// The data dir had a clean-shutdown marker: skip the recovery scan.
    pub clean_shutdown: bool,
}

/// Result of an append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendInfo {
    /// Offset of the first record (inclusive).
    pub first_offset: i64,
    /// Offset of the last record (inclusive).
    pub last_offset: i64,
    /// The batch was a retry of one already in the log: nothing was written and the
    /// offsets are the original ones (idempotent producer).
    pub duplicate: bool,
    /// The leader's clock stamped on the batch, ms, for a `message.timestamp.type =
    /// LogAppendTime` topic (the produce response's `log_append_time_ms`); -1 otherwise and
    /// for a duplicate.
    pub log_append_time_ms: i64,
}

/// Result of a read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadInfo {
    /// Whole batches, back to back (empty if nothing qualified).
    pub records: Bytes,
    /// Offset after the last returned batch (the next fetch offset); `from_offset` if empty.
    pub next_offset: i64,
}

/// What the broker's one deletion service still has to delete, off every lock: segments that
/// retention ([`Log::delete_old_segments`]) removed from a log (their files and the producer
/// snapshots below the new log start, renamed to `<name>.deleted` under the partition lock),
/// and whole partition directories renamed to `<topic>-<partition>.<id>-delete` when their
/// log was deleted ([`Log::rename_for_deletion`]: topic deletion, a stale log). Kafka
/// (`UnifiedLog.deleteSegments` / `LocalLog.deleteSegmentFiles`, `LogManager.asyncDelete`)
/// renames the same way and deletes `file.delete.delay.ms` later on its scheduler; Keel's
/// replica manager deletes them on one blocking thread right after, outside every partition
/// lock, each large file in steps ([`delete_in_steps`]).
///
/// Dropping the value without [`DeletedSegments::delete_files`] leaves the files on disk
/// until the next [`Log::open`] of the partition directory (`.deleted` files) or
/// [`crate::log::LogManager::open`] of the data directory (`-delete` directories), which
/// delete them (the same happens after a crash).
#[derive(Debug, Default)]
#[must_use = "the files stay on disk until delete_files (or the next open)"]
pub struct DeletedSegments {
    segments: usize,
    files: Vec<PathBuf>,
    /// Partition directories renamed for deletion.
    dirs: Vec<PathBuf>,
}

impl DeletedSegments {
    /// Number of segments removed.
    pub fn segment_count(&self) -> usize {
        self.segments
    }

    /// No segment was removed and no directory is to be deleted.
    pub fn is_empty(&self) -> bool {
        self.segments == 0 && self.dirs.is_empty()
    }

    /// A partition directory renamed for deletion ([`Log::rename_for_deletion`]).
    pub fn directory(dir: PathBuf) -> DeletedSegments {
        DeletedSegments {
            dirs: vec![dir],
            ..DeletedSegments::default()
        }
    }

    /// The partition directories to delete.
    pub fn dirs(&self) -> &[PathBuf] {
        &self.dirs
    }

    /// The `.deleted` files to delete (data and index files).
    pub fn files(&self) -> &[PathBuf] {
        &self.files
    }

    /// Adds `other`'s segments, files and directories (one deletion pass for many
    /// partitions).
    pub fn append(&mut self, mut other: DeletedSegments) {
        self.segments += other.segments;
        self.files.append(&mut other.files);
        self.dirs.append(&mut other.dirs);
    }

    /// Deletes the files, then each directory's files and the directory, blocking (a large
    /// file is cut a step at a time before its unlink, see [`delete_in_steps`], so that
    /// freeing its blocks never holds the file system for long): call it off the async
    /// runtime and outside any partition lock. A file or directory that is already gone
    /// counts as deleted (a reopened log or a deleted partition directory removed it). Every
    /// other failure is logged with its path and returned; what failed stays and the next
    /// open deletes it.
    pub fn delete_files(self) -> Vec<LogError> {
        self.delete_files_while(|| true)
    }

    /// [`DeletedSegments::delete_files`], stopping before the next file once `keep_going`
    /// says no (a broker shutting down: what is left is deleted by the next open, and the
    /// process exit does not wait for gigabytes of deletion steps).
    pub fn delete_files_while(self, keep_going: impl Fn() -> bool) -> Vec<LogError> {
        let mut errors = Vec::new();
        let mut note = |path: &Path, r: LogResult<()>| match r {
            Ok(()) => tracing::debug!(path = %path.display(), "deleted"),
            Err(e) => {
                tracing::error!(path = %path.display(), "could not delete: {e}");
                errors.push(e);
            }
        };
        for path in self.files {
            if !keep_going() {
                return errors;
            }
            note(&path, delete_in_steps(&path));
        }
        for dir in self.dirs {
            let entries = match fs::read_dir(&dir) {
                Ok(entries) => entries,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => {
                    note(&dir, Err(io_err(&dir)(e)));
                    continue;
                }
            };
            // The directory's own files only (a partition directory has no subdirectories;
            // anything else goes with remove_dir_all below).
            for entry in entries.flatten() {
                if !keep_going() {
                    return errors;
                }
                if entry.file_type().is_ok_and(|t| t.is_file()) {
                    let path = entry.path();
                    note(&path, delete_in_steps(&path));
                }
            }
            match fs::remove_dir_all(&dir) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    note(&dir, Err(io_err(&dir)(e)))
                }
                _ => tracing::info!(dir = %dir.display(), "deleted partition directory"),
            }
        }
        errors
    }
}

/// One partition log; see the module doc of [`crate::log`].
#[derive(Debug)]
pub struct Log {
    dir: PathBuf,
    config: LogConfig,
    clock: Arc<dyn Clock>,
    /// Keyed by base offset; never empty; contiguous; the last is the active segment.
    segments: BTreeMap<i64, Segment>,
    /// First readable offset. Invariant: first segment's base <= log_start_offset <= LEO;
    /// above the base only after [`Log::increment_log_start_offset`] (then persisted in
    /// [`LOG_START_OFFSET_CHECKPOINT`]), and no whole segment lies below it except after a
    /// failed removal, which the next [`Log::delete_old_segments`] retries.
    log_start_offset: i64,
    log_end_offset: i64,
    /// Everything below is fsynced. Invariant: first segment's base <= recovery_point <= LEO.
    recovery_point: i64,
    epoch_cache: LeaderEpochCache,
    producer_state: ProducerStateManager,
    /// Records appended since the last flush.
    unflushed_messages: u64,
    last_flush_ms: i64,
    bytes_since_snapshot: u64,
    /// A segment file was created since the directory was last fsynced: the next
    /// [`Log::flush`] fsyncs the directory too, so the recovery point covers the new file's
    /// directory entry (rolls do not fsync on the append path).
    dir_dirty: bool,
    /// Base offsets of the segments whose index files were written since the last flush
    /// took them (a roll writes the old active segment's indexes without fsync, see
    /// [`Segment::write_indexes`]): the next [`LogFlush`] fsyncs them with the segments, so
    /// the recovery point never passes a segment whose index files are not durable, as
    /// before; only the syncs left the append path. Kafka's roll likewise leaves the old
    /// segment's flush, indexes included, to an asynchronous `flush-log` task. Bounded:
    /// pruned of segments that are gone whenever a base is added or a flush takes them, so
    /// it holds at most the segments' count plus those removed since (and a roll makes the
    /// next flush due, which empties it).
    unsynced_indexes: BTreeSet<i64>,
    /// A segment was rolled since the last flush was taken: the periodic flusher flushes the
    /// log now rather than at `flush.ms` (Kafka's roll schedules `flush-log`, a flush up to
    /// the new segment's base offset, on its scheduler), so the recovery point follows the
    /// rolls and a crash recovers (CRC-scans) about one segment per partition, not every
    /// segment written since the last clean shutdown.
    rolled_since_flush: bool,
    /// Bytes appended since the last page-cache drop-behind pass.
    bytes_since_drop_behind: u64,
    /// Counts truncations (of the tail or the whole log): a [`LogFlush`] taken before one
    /// may have synced bytes that are gone, so it must not move the recovery point (nor a
    /// cleaner pass planned before one install its segments).
    truncations: u64,
    /// End of the last completed cleaner pass (`cleaner-offset-checkpoint`, see
    /// [`crate::log::cleaner`]); lowered by truncation.
    cleaner_checkpoint: Option<i64>,
    /// Earliest delete horizon of a tombstone the last cleaner pass kept (in memory only).
    earliest_delete_horizon_ms: Option<i64>,
}

/// The fsyncs of one flush: taken under the partition lock by [`Log::begin_flush`], run
/// without it ([`LogFlush::run`], it may wait for the file system's journal), then handed
/// back to [`Log::finish_flush`], which moves the recovery point. Kafka `UnifiedLog.flush`
/// likewise syncs outside the log lock and takes it only to mark the log flushed.
#[derive(Debug)]
pub struct LogFlush {
    /// Segments from the one holding the recovery point to the active one (or why one of
    /// them could not be opened: the flush then fails with it).
    files: Vec<LogResult<(Arc<std::fs::File>, PathBuf)>>,
    /// Index files written since the last flush (`Log::unsynced_indexes`), two per segment.
    indexes: Vec<PathBuf>,
    /// Their segments' base offsets, given back if the flush fails.
    index_bases: Vec<i64>,
    /// `Log::rolled_since_flush` when taken, given back if the flush fails.
    rolled: bool,
    /// The partition directory, when a segment file was created since its last fsync.
    dir: Option<PathBuf>,
    /// The LEO when taken: every offset below it is durable once `run` succeeded.
    target: i64,
    /// `unflushed_messages` when taken.
    messages: u64,
    /// [`Log`]'s `truncations` when taken.
    truncations: u64,
}

/// Suffix of a partition directory renamed for deletion (Kafka `LocalLog.DeleteDirSuffix`).
pub const DELETE_DIR_SUFFIX: &str = "-delete";

/// `<name>.<id>-delete` for partition directory `name` (Kafka `LocalLog.logDeleteDirName`:
/// `id` as 32 hex digits; the name is cut, at a character boundary, so that the result stays
/// within 255 bytes, the usual file name limit). Never a partition directory name: its part
/// after the last `-` is `delete`, not a partition number.
pub fn deletion_dir_name(name: &str, id: uuid::Uuid) -> String {
    let suffix = format!(".{}{DELETE_DIR_SUFFIX}", id.simple());
    let mut keep = name.len().min(255 - suffix.len());
    while !name.is_char_boundary(keep) {
        keep -= 1;
    }
    format!("{}{suffix}", &name[..keep])
}

/// Whether `name` is a directory name [`deletion_dir_name`] made.
pub fn is_deletion_dir_name(name: &str) -> bool {
    name.ends_with(DELETE_DIR_SUFFIX)
}

impl LogFlush {
    /// fdatasync of the segments and of the index files written since the last flush (one
    /// that is gone, its segment deleted meanwhile, is skipped), then fsync of the directory
    /// if a file was created or renamed into it.
    ///
    /// Errors: the first failed sync ([`LogError::Io`] naming the file).
    pub fn run(&self) -> LogResult<()> {
        for f in &self.files {
            match f {
                Ok((file, path)) => file.sync_data().map_err(io_err(path))?,
                Err(LogError::Io { path, source }) => {
                    return Err(LogError::Io {
                        path: path.clone(),
                        source: std::io::Error::new(source.kind(), source.to_string()),
                    });
                }
                Err(e) => {
                    return Err(LogError::Io {
                        path: self.dir.clone().unwrap_or_default(),
                        source: std::io::Error::other(e.to_string()),
                    });
                }
            }
        }
        for path in &self.indexes {
            match std::fs::File::open(path).and_then(|f| f.sync_data()) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(io_err(path)(e));
                }
                _ => {}
            }
        }
        if let Some(dir) = &self.dir {
            fsync_dir(dir)?;
        }
        Ok(())
    }
}

impl Log {
    /// Opens (or creates) the partition log in `dir` and recovers it: leftover `.tmp` files
    /// and `.deleted` files of segments removed by retention are deleted (a crash or
    /// shutdown between retention's rename and the deletion, see
    /// [`Log::delete_old_segments`]), segments after the recovery point are scanned with
    /// CRC checks and a torn or corrupt tail is cut (and every later segment deleted),
    /// indexes are rebuilt if missing or invalid, the epoch cache is truncated to the
    /// segments (from the end at the recovered LEO and from the start at the log start
    /// offset, which repairs a checkpoint whose retention rewrite was not fsynced), and
    /// producer state is rebuilt from the newest snapshot plus a scan of the batches after
    /// it (Kafka `LogLoader`).
    pub fn open(
        dir: &Path,
        config: LogConfig,
        clock: Arc<dyn Clock>,
        opts: LogOpenOptions,
    ) -> LogResult<Log> {
        config.validate()?;
        fs::create_dir_all(dir).map_err(io_err(dir))?;
        let now_ms = clock.now_ms();
        let bases = segment_bases(dir)?;
        let (mut segments, recovered_any) = load_segments(dir, &bases, &config, opts, now_ms)?;
        // A new (or emptied) log's first segment: its directory entry is fsynced by the next
        // flush (`dir_dirty`), as a rolled segment's is; nothing is durable before that
        // anyway, and creating 10,000 partitions no longer waits for 10,000 fsyncs here.
        let created = segments.is_empty();
        if created {
            let seg = Segment::create(dir, 0, now_ms)?;
            segments.insert(0, seg);
        }
        let first_base = *segments.keys().next().expect("non-empty");
        let log_end_offset = segments
            .values()
            .next_back()
            .expect("non-empty")
            .next_offset();
        // A start moved by DeleteRecords (or taken from the leader) inside the first segment;
        // whole segments below it (a crash before they were renamed) go with the next
        // retention pass.
        let stored = read_log_start_checkpoint(dir)?;
        let log_start_offset = stored.map_or(first_base, |s| s.clamp(first_base, log_end_offset));
        if stored.is_some_and(|s| s > log_end_offset) {
            // The log lost its tail in a crash (data above its fsynced part): the start is its
            // end now, and must not come back above records written from here on.
            write_log_start_checkpoint(dir, log_start_offset)?;
        }
        let (epoch_cache, rebuild_epochs) =
            open_epoch_cache(dir, log_start_offset, log_end_offset)?;
        let mut log = Log {
            dir: dir.to_path_buf(),
            config,
            clock,
            segments,
            log_start_offset,
            log_end_offset,
            recovery_point: opts.recovery_point.clamp(first_base, log_end_offset),
            epoch_cache,
            producer_state: ProducerStateManager::new(dir),
            unflushed_messages: 0,
            last_flush_ms: now_ms,
            bytes_since_snapshot: 0,
            dir_dirty: created,
            unsynced_indexes: BTreeSet::new(),
            rolled_since_flush: false,
            truncations: 0,
            bytes_since_drop_behind: 0,
            cleaner_checkpoint: Log::load_cleaner_checkpoint(dir),
            earliest_delete_horizon_ms: None,
        };
        if recovered_any {
            // Recovered bytes were read back and checked; make them durable so the recovery
            // point can move to the LEO.
            log.recovery_point = first_base;
            log.flush()?;
        }
        if rebuild_epochs {
            // Only where the epoch rises: bounded by the number of leader epochs.
            let mut headers: Vec<(i32, i64)> = Vec::new();
            log.for_each_header(log.log_start_offset, |h| {
                if headers
                    .last()
                    .is_none_or(|l| l.0 < h.partition_leader_epoch)
                {
                    // Not below the log start (a batch may straddle it).
                    headers.push((
                        h.partition_leader_epoch,
                        h.base_offset.max(log.log_start_offset),
                    ));
                }
            })?;
            log.epoch_cache = LeaderEpochCache::rebuilt(dir, headers)?;
        }
        log.rebuild_producer_state()?;
        log.check_invariants();
        Ok(log)
    }

    fn check_invariants(&self) {
        debug_assert!(!self.segments.is_empty());
        let first_base = self.first_base();
        debug_assert!(first_base <= self.log_start_offset);
        debug_assert_eq!(
            self.log_end_offset,
            self.segments
                .values()
                .next_back()
                .map_or(-1, |s| s.next_offset())
        );
        debug_assert!(self.log_start_offset <= self.log_end_offset);
        debug_assert!(first_base <= self.recovery_point);
        debug_assert!(self.recovery_point <= self.log_end_offset);
        // `<=`: the log cleaner may remove the last batches of a segment (offset gaps).
        debug_assert!(
            self.segments
                .values()
                .zip(self.segments.values().skip(1))
                .all(|(a, b)| a.next_offset() <= b.base_offset())
        );
        debug_assert!(
            self.epoch_cache
                .entries()
                .iter()
                .all(|e| e.start_offset <= self.log_end_offset)
        );
    }

    /// Deletes snapshots above the LEO, loads the newest usable one and replays the batch
    /// headers after it.
    fn rebuild_producer_state(&mut self) -> LogResult<()> {
        self.producer_state
            .delete_snapshots_above(self.log_end_offset)?;
        // From the batch holding the log start: DeleteRecords may have put the start inside
        // one, and the replay applies whole batches in offset order (a restart after a crash
        // without a snapshot tripped that check, found by the fresh-user trial).
        let first_batch = self
            .batch_header_at(self.log_start_offset)?
            .map_or(self.log_start_offset, |h| {
                h.base_offset.min(self.log_start_offset)
            });
        let from = self
            .producer_state
            .load_snapshot(first_batch, self.log_end_offset)?;
        let mut state = std::mem::replace(
            &mut self.producer_state,
            ProducerStateManager::new(&self.dir),
        );
        let r = self.for_each_header(from, |h| state.update(h));
        self.producer_state = state;
        r?;
        self.producer_state.reset_end_if_behind(self.log_end_offset);
        Ok(())
    }

    /// Calls `f` with the header of every batch whose last offset is >= `from`, in order.
    fn for_each_header(&self, from: i64, mut f: impl FnMut(&BatchHeader)) -> LogResult<()> {
        let start = self
            .segments
            .range(..=from)
            .next_back()
            .map_or(self.log_start_offset, |(b, _)| *b);
        for seg in self.segments.range(start..).map(|(_, s)| s) {
            let Some((mut pos, _)) = seg.find_batch(from)? else {
                continue;
            };
            // Each iteration consumes one batch: bounded by the segment size.
            while pos < seg.size_bytes() {
                let h = seg.read_header(pos)?;
                f(&h);
                pos += h.size_bytes() as u64;
            }
        }
        Ok(())
    }

    /// Appends a batch from a producer as the leader (Kafka `UnifiedLog.appendAsLeader`).
    /// Checks, in order: `max.message.bytes` (MESSAGE_TOO_LARGE); CRC and record structure
    /// (CORRUPT_MESSAGE); record timestamps (INVALID_TIMESTAMP, see
    /// `check_leader_timestamps`; a header max timestamp that disagrees with the records is
    /// rewritten, not refused); transactional or control attribute bits, which producers may
    /// not set (INVALID_RECORD; Keel has no transactions); on a compacted topic, a record
    /// without a key (INVALID_RECORD, Kafka `LogValidator.validateKey`); a producer id
    /// without epoch or sequence (INVALID_RECORD); the idempotence rules of [`crate::log::check_append`] (a duplicate returns the original
    /// offsets with `duplicate: true` and writes nothing; INVALID_PRODUCER_EPOCH;
    /// OUT_OF_ORDER_SEQUENCE_NUMBER). Then the topic's `compression.type` and
    /// `message.timestamp.type` (Kafka `LogValidator`): a batch sent with another codec than a
    /// configured one is recompressed (and must still fit `max.message.bytes`:
    /// MESSAGE_TOO_LARGE), and the batch's timestamp type is the topic's, with the leader's
    /// clock as its max timestamp for LogAppendTime. The new LEO must not pass
    /// [`keel_record::MAX_LOG_END_OFFSET`] (`InvalidOffset`). Then assigns base offset
    /// = LEO and partition leader epoch = `leader_epoch` (both outside the CRC) and writes;
    /// with `flush.messages = 1` the batch is fdatasynced before this returns. On any error
    /// the log is unchanged.
    pub fn append_as_leader(&mut self, batch: Bytes, leader_epoch: i32) -> LogResult<AppendInfo> {
        if batch.len() > self.config.max_message_bytes {
            return Err(LogError::MessageTooLarge {
                size_bytes: batch.len(),
                max_bytes: self.config.max_message_bytes,
            });
        }
        let batch = RecordBatch::from_bytes(batch)?;
        let (min_delta, max_delta) = batch.validate_with_timestamp_deltas()?;
        let max_timestamp = check_leader_timestamps(batch.header(), min_delta, max_delta)?;
        // A header whose max timestamp disagrees with its records is corrected, not stored
        // as sent (Kafka `LogValidator`): it drives rolling, retention and timestamp lookups.
        let batch = if batch.header().max_timestamp == max_timestamp {
            batch
        } else {
            batch.with_max_timestamp(max_timestamp)
        };
        let header = *batch.header();
        if header.attributes & (TRANSACTIONAL_BIT | CONTROL_BIT) != 0 {
            // Kafka `LogValidator`: clients may not write control batches, and transactional
            // ones need a transaction coordinator, which Keel does not have.
            return Err(LogError::InvalidRecord {
                base_offset: header.base_offset,
                reason: "transactional and control batches are not accepted from producers",
            });
        }
        if self.config.cleanup_policy.compact
            && batch.records().any(|r| r.is_ok_and(|r| r.key.is_none()))
        {
            // Kafka `LogValidator.validateKey`: "Compacted topic cannot accept message without
            // key" (INVALID_RECORD): the cleaner could not keep it.
            return Err(LogError::InvalidRecord {
                base_offset: header.base_offset,
                reason: "a compacted topic (cleanup.policy=compact) does not accept records without a key",
            });
        }
        if header.has_producer_id() && (header.producer_epoch < 0 || header.base_sequence < 0) {
            // Kafka `LogValidator`: an idempotent batch needs an epoch and a sequence.
            return Err(LogError::InvalidRecord {
                base_offset: header.base_offset,
                reason: "producer id without producer epoch or base sequence",
            });
        }
        if header.has_producer_id()
            && let AppendCheck::Duplicate {
                first_offset,
                last_offset,
            } = self.producer_state.check(&header)?
        {
            return Ok(AppendInfo {
                first_offset,
                last_offset,
                duplicate: true,
                log_append_time_ms: NO_TIMESTAMP,
            });
        }
        let (batch, log_append_time_ms) = self.to_topic_format(batch, max_timestamp)?;
        let mut header = *batch.header();
        header.base_offset = self.log_end_offset;
        header.partition_leader_epoch = leader_epoch;
        // LEO <= MAX_LOG_END_OFFSET and the delta is an i32: no overflow here.
        if header.next_offset() > MAX_LOG_END_OFFSET {
            return Err(LogError::InvalidOffset {
                offset: header.last_offset(),
                reason: "the batch would move the log end offset past the maximum offset",
            });
        }
        let prefix = stamped_prefix(batch.as_bytes(), header.base_offset, leader_epoch);
        self.append_checked(Some(&prefix), batch.as_bytes(), &header)?;
        Ok(AppendInfo {
            first_offset: header.base_offset,
            last_offset: header.last_offset(),
            duplicate: false,
            log_append_time_ms,
        })
    }

    /// A checked client batch in the topic's format (Kafka `LogValidator`): recompressed to
    /// `compression.type` unless that is `producer` or the batch's codec already (then
    /// MESSAGE_TOO_LARGE when it outgrew `max.message.bytes`), and with the topic's timestamp
    /// type: for LogAppendTime the leader's clock becomes the max timestamp (returned, for the
    /// produce response); for CreateTime a LogAppendTime bit the producer set is cleared
    /// (`max_timestamp` is the records' largest). Returns the batch and the append time (-1
    /// for CreateTime).
    fn to_topic_format(
        &self,
        batch: RecordBatch,
        max_timestamp: i64,
    ) -> LogResult<(RecordBatch, i64)> {
        let batch = match self.config.compression {
            Some(codec) if batch.compression()? != codec => {
                let b = batch.recompressed(codec)?;
                if b.size_bytes() > self.config.max_message_bytes {
                    return Err(LogError::MessageTooLarge {
                        size_bytes: b.size_bytes(),
                        max_bytes: self.config.max_message_bytes,
                    });
                }
                b
            }
            _ => batch,
        };
        let log_append_time = batch.header().attributes & TIMESTAMP_TYPE_BIT != 0;
        if self.config.log_append_time {
            let now = self.clock.now_ms().max(0);
            Ok((batch.with_timestamp_type(true, now), now))
        } else if log_append_time {
            Ok((
                batch.with_timestamp_type(false, max_timestamp),
                NO_TIMESTAMP,
            ))
        } else {
            Ok((batch, NO_TIMESTAMP))
        }
    }

    /// Appends batches fetched from the leader, keeping their offsets and epochs (Kafka
    /// `UnifiedLog.appendAsFollower`). Every batch is checked (size, CRC, records, allowing
    /// the offset gaps of a batch the leader's cleaner rewrote,
    /// [`keel_record::RecordBatch::validate_replicated`]) and its base offset must be at or
    /// above the LEO and above the previous batch's last offset (else
    /// `UnexpectedAppendOffset`) before anything is written: a compacted leader log has gaps
    /// between batches, which the follower keeps (Kafka checks only that offsets increase;
    /// the first gap writes the gap marker, `Log::mark_offset_gaps`). Producer state is
    /// updated without sequence checks, as Kafka does for replication. The leader's bytes are kept as they are: attribute bits
    /// (transactional, control) and timestamps are not re-validated, and every use of a
    /// timestamp is saturating, so no value can make the log panic. Batch offsets are bounded
    /// by [`keel_record::MAX_LOG_END_OFFSET`] when parsed. A batch whose partition
    /// leader epoch is lower than the epoch cache's latest is appended but does not change
    /// the cache (Kafka's `LeaderEpochFileCache.assign` ignores lower epochs with a warning;
    /// such a batch means the leader's log is inconsistent, but its data is valid). Returns
    /// the offsets written, `None` for empty input.
    pub fn append_as_follower(&mut self, records: Bytes) -> LogResult<Option<AppendInfo>> {
        let mut batches = Vec::new();
        let mut expected = self.log_end_offset;
        for b in BatchIter::new(records) {
            let b = b?;
            if b.size_bytes() > self.config.max_message_bytes {
                return Err(LogError::MessageTooLarge {
                    size_bytes: b.size_bytes(),
                    max_bytes: self.config.max_message_bytes,
                });
            }
            b.validate_replicated()?;
            if b.base_offset() < expected {
                return Err(LogError::UnexpectedAppendOffset {
                    expected,
                    got: b.base_offset(),
                });
            }
            expected = b.last_offset() + 1;
            batches.push(b);
        }
        let (Some(first), Some(last)) = (batches.first(), batches.last()) else {
            return Ok(None);
        };
        let mut previous_end = self.log_end_offset;
        let has_gap = batches.iter().any(|b| {
            let gap = b.base_offset() > previous_end;
            previous_end = b.last_offset() + 1;
            gap
        });
        if has_gap {
            self.mark_offset_gaps()?;
        }
        let info = AppendInfo {
            first_offset: first.base_offset(),
            last_offset: last.last_offset(),
            duplicate: false,
            log_append_time_ms: NO_TIMESTAMP,
        };
        let start_leo = self.log_end_offset;
        for b in &batches {
            if let Err(e) = self.append_checked(None, b.as_bytes(), b.header()) {
                // All or nothing: undo the batches of this call already written.
                if self.log_end_offset > start_leo {
                    self.truncate_to(start_leo)?;
                }
                return Err(e);
            }
        }
        Ok(Some(info))
    }

    /// Writes one checked batch whose `header` already carries its final offsets.
    fn append_checked(
        &mut self,
        prefix: Option<&[u8; 16]>,
        bytes: &[u8],
        header: &BatchHeader,
    ) -> LogResult<()> {
        debug_assert!(header.base_offset >= self.log_end_offset);
        self.maybe_roll(header)?;
        // The epoch entry may precede the data: an entry at the LEO without data is the
        // normal state of a new leader (KAFKA-7415), so a failed write below is harmless.
        let epoch = header.partition_leader_epoch;
        match self.epoch_cache.latest_epoch() {
            Some(latest) if epoch < latest => {
                // Kafka (`LeaderEpochFileCache.assign`): a lower epoch than the latest is not
                // recorded; the batch itself is kept. See `append_as_follower`.
                tracing::warn!(
                    dir = %self.dir.display(),
                    batch_epoch = epoch,
                    latest_epoch = latest,
                    base_offset = header.base_offset,
                    "batch partition leader epoch is lower than the latest cached epoch; \
                     epoch cache left unchanged"
                );
            }
            Some(latest) if epoch == latest => {}
            _ if epoch >= 0 => {
                self.epoch_cache.assign(epoch, header.base_offset)?;
            }
            _ => {}
        }
        let interval = self.config.index_interval_bytes;
        self.active_mut().append(prefix, bytes, header, interval)?;
        self.bytes_since_drop_behind += bytes.len() as u64;
        if let Some(lag) = self.config.drop_cache_behind_bytes
            && self.bytes_since_drop_behind >= cache_behind::step_bytes(lag)
        {
            self.bytes_since_drop_behind = 0;
            self.drop_cache_behind(lag);
        }
        self.log_end_offset = header.next_offset();
        self.producer_state.update(header);
        self.unflushed_messages += header.record_count as u64;
        self.bytes_since_snapshot += bytes.len() as u64;
        self.check_invariants();
        // Only flush.messages flushes here, as in Kafka's `UnifiedLog.append`; flush.ms is
        // the periodic flusher's ([`Log::begin_flush_if_due`]), which syncs outside the
        // partition lock.
        let by_messages = self
            .config
            .flush_interval_messages
            .is_some_and(|n| self.unflushed_messages >= n);
        if by_messages {
            // Durability point: with flush.messages=1 the batch is on disk before the caller
            // can acknowledge it.
            self.flush()?;
        }
        if self.bytes_since_snapshot >= self.config.producer_snapshot_interval_bytes {
            self.producer_state.take_snapshot()?;
            self.bytes_since_snapshot = 0;
        }
        Ok(())
    }

    fn active(&self) -> &Segment {
        self.segments
            .values()
            .next_back()
            .expect("a log always has a segment")
    }

    fn active_mut(&mut self) -> &mut Segment {
        self.segments
            .values_mut()
            .next_back()
            .expect("a log always has a segment")
    }

    /// Rolls a new active segment at the LEO if the next batch would overflow `segment.bytes`,
    /// the active segment is older than `segment.ms` (Kafka `LogSegment.shouldRoll`: by the
    /// first batch's timestamp if it has one, else by creation time), or its offsets would
    /// no longer fit in a relative u32 offset. Time differences saturate: a follower batch
    /// may carry any max timestamp.
    ///
    /// A follower batch after an offset gap (a compacted leader log) so wide that its offsets
    /// would not fit the relative offsets of a segment starting at the LEO starts a segment
    /// of its own at its base offset, and the LEO moves there: nothing lies in the gap
    /// (Kafka `LocalLog.roll(expectedNextOffset)`).
    fn maybe_roll(&mut self, next: &BatchHeader) -> LogResult<()> {
        if next.last_offset() - self.log_end_offset > i32::MAX as i64 {
            return self.roll_at(next.base_offset);
        }
        let now_ms = self.clock.now_ms();
        let active = self.active();
        if active.size_bytes() == 0 {
            return Ok(());
        }
        let waited_ms = match active.first_batch_timestamp() {
            Some(t) if t >= 0 => next.max_timestamp.saturating_sub(t),
            _ => now_ms.saturating_sub(active.created_ms()),
        };
        let full = active.size_bytes() + next.size_bytes() as u64 > self.config.segment_bytes;
        let old = waited_ms >= self.config.segment_ms;
        let offsets_overflow = next.last_offset() - active.base_offset() > i32::MAX as i64;
        if full || old || offsets_overflow {
            self.roll()?;
        }
        Ok(())
    }

    /// One drop-behind pass ([`cache_behind`]): from the newest segment back, each drops
    /// what lies more than `lag` bytes before the log end and starts the write-back of what
    /// lies more than `lag / 2`, until a segment that is done.
    fn drop_cache_behind(&mut self, lag: u64) {
        let step = cache_behind::step_bytes(lag);
        let mut after = 0u64; // bytes in the segments newer than the current one
        // The active segment is kept allocated up to `lag` ahead of the writer, never past
        // the size at which it rolls.
        let mut allocate = Some((lag, self.config.segment_bytes));
        for seg in self
            .segments
            .values_mut()
            .rev()
            .take(cache_behind::MAX_SEGMENTS_PER_PASS)
        {
            if seg.drop_cache_behind_done() && allocate.is_none() {
                break;
            }
            seg.drop_cache_behind(
                lag.saturating_sub(after),
                (lag / 2).saturating_sub(after),
                step,
                allocate.take(),
            );
            after += seg.size_bytes();
        }
    }

    /// Starts a new active segment at the LEO (Kafka `UnifiedLog.roll`): writes the old
    /// segment's indexes and a producer snapshot at the new base offset.
    pub fn roll(&mut self) -> LogResult<()> {
        self.roll_at(self.log_end_offset)
    }

    /// [`Log::roll`] with the new segment at `base` >= the LEO, which moves there (see
    /// `maybe_roll`); an empty active segment below `base` stays as an empty segment.
    fn roll_at(&mut self, base: i64) -> LogResult<()> {
        debug_assert!(base >= self.log_end_offset);
        if self.active().base_offset() == base {
            return Ok(());
        }
        if self.active_mut().write_indexes()? {
            let base = self.active().base_offset();
            self.note_unsynced_indexes(base);
        }
        self.active_mut().release_allocated_past_end();
        self.producer_state.take_snapshot()?;
        self.bytes_since_snapshot = 0;
        let seg = Segment::create(&self.dir, base, self.clock.now_ms())?;
        self.segments.insert(base, seg);
        self.log_end_offset = base;
        self.dir_dirty = true;
        self.rolled_since_flush = true;
        self.check_invariants();
        Ok(())
    }

    /// Records that [`Segment::write_indexes`] wrote segment `base`'s index files, for the
    /// next flush to fsync, and that their renames dirtied the directory. Forgets segments
    /// that are gone (retention, truncation, cleaning) on the way.
    fn note_unsynced_indexes(&mut self, base: i64) {
        let segments = &self.segments;
        self.unsynced_indexes.retain(|b| segments.contains_key(b));
        self.unsynced_indexes.insert(base);
        self.dir_dirty = true;
    }

    /// Reads whole batches from `from_offset` (Kafka `UnifiedLog.read`): the batch containing
    /// `from_offset` first, then following batches while the total stays within `max_bytes`
    /// (the first batch is returned even if larger, like Kafka), leaving out batches whose
    /// last offset is >= `upper_bound_exclusive` (pass the HW for consumers, the LEO for
    /// followers). Reads stay within one segment. `from_offset` must be in
    /// `[log_start_offset, log_end_offset]` (OFFSET_OUT_OF_RANGE otherwise).
    pub fn read(
        &self,
        from_offset: i64,
        max_bytes: usize,
        upper_bound_exclusive: i64,
    ) -> LogResult<ReadInfo> {
        if from_offset < self.log_start_offset || from_offset > self.log_end_offset {
            return Err(LogError::OffsetOutOfRange {
                offset: from_offset,
                log_start_offset: self.log_start_offset,
                log_end_offset: self.log_end_offset,
            });
        }
        let empty = ReadInfo {
            records: Bytes::new(),
            next_offset: from_offset,
        };
        let upper = upper_bound_exclusive.min(self.log_end_offset);
        if from_offset >= upper {
            return Ok(empty);
        }
        let start = self
            .segments
            .range(..=from_offset)
            .next_back()
            .map_or(self.log_start_offset, |(b, _)| *b);
        for seg in self.segments.range(start..).map(|(_, s)| s) {
            if let Some((records, next_offset)) = seg.read(from_offset, max_bytes, upper)? {
                return Ok(ReadInfo {
                    records,
                    next_offset,
                });
            }
        }
        Ok(empty)
    }

    /// First offset of the first batch with a max timestamp >= `timestamp_ms`, and the
    /// timestamp of the first record in it at or after `timestamp_ms` (ListOffsets by
    /// timestamp, Kafka `UnifiedLog.fetchOffsetByTimestamp`). The offset is that record's.
    /// Records below the log start are not answered (Kafka passes the log start to
    /// `LogSegment.findOffsetByTimestamp`): a match below it is replaced by the first record
    /// at or above the start with a timestamp >= `timestamp_ms`.
    pub fn offset_for_timestamp(&self, timestamp_ms: i64) -> LogResult<Option<(i64, i64)>> {
        for seg in self.segments.values() {
            if let Some(found) = Self::first_at_or_after(seg, timestamp_ms)? {
                if found.0 < self.log_start_offset {
                    return self.first_at_or_after_start(timestamp_ms);
                }
                return Ok(Some(found));
            }
        }
        Ok(None)
    }

    /// The first record at or above the log start with a timestamp >= `timestamp_ms` (its
    /// offset and timestamp), by the batch headers from the log start on (reads stop at the
    /// first batch holding one).
    fn first_at_or_after_start(&self, timestamp_ms: i64) -> LogResult<Option<(i64, i64)>> {
        let from = self.log_start_offset;
        let first = self
            .segments
            .range(..=from)
            .next_back()
            .map_or(self.first_base(), |(b, _)| *b);
        for seg in self.segments.range(first..).map(|(_, s)| s) {
            let Some((mut pos, _)) = seg.find_batch(from)? else {
                continue;
            };
            // Each iteration consumes one batch: bounded by the segment size.
            while pos < seg.size_bytes() {
                let h = seg.read_header(pos)?;
                if h.max_timestamp >= timestamp_ms && h.last_offset() >= from {
                    let batch = RecordBatch::from_bytes(seg.read_bytes(pos, h.size_bytes())?)?;
                    for r in batch.records() {
                        let r = r?;
                        let offset = h.base_offset.saturating_add(r.offset_delta as i64);
                        let ts = h.record_timestamp(r.timestamp_delta);
                        if offset >= from && ts >= timestamp_ms {
                            return Ok(Some((offset, ts)));
                        }
                    }
                }
                pos += h.size_bytes() as u64;
            }
        }
        Ok(None)
    }

    /// The record with the largest timestamp in the log (the first of them, by offset) and
    /// that timestamp: ListOffsets MAX_TIMESTAMP (-3, KIP-734; Kafka
    /// `UnifiedLog.fetchOffsetByTimestamp`, which also looks in the segment with the largest
    /// max timestamp and returns the first record carrying it, KAFKA-16310). `None` for a log
    /// without timestamps.
    pub fn offset_of_max_timestamp(&self) -> LogResult<Option<(i64, i64)>> {
        let mut best: Option<&Segment> = None;
        for seg in self.segments.values() {
            if seg.max_timestamp() > best.map_or(NO_TIMESTAMP, |b| b.max_timestamp()) {
                best = Some(seg);
            }
        }
        match best {
            Some(seg) => Self::first_at_or_after(seg, seg.max_timestamp()),
            None => Ok(None),
        }
    }

    /// In `seg`: the first record with a timestamp >= `timestamp_ms` (its offset and
    /// timestamp), from the first batch whose max timestamp is >= `timestamp_ms`.
    fn first_at_or_after(seg: &Segment, timestamp_ms: i64) -> LogResult<Option<(i64, i64)>> {
        let Some((pos, h)) = seg.find_timestamp(timestamp_ms)? else {
            return Ok(None);
        };
        let batch = RecordBatch::from_bytes(seg.read_bytes(pos, h.size_bytes())?)?;
        for r in batch.records() {
            let r = r?;
            let ts = h.record_timestamp(r.timestamp_delta);
            if ts >= timestamp_ms {
                let offset = h.base_offset.saturating_add(r.offset_delta as i64);
                return Ok(Some((offset, ts)));
            }
        }
        Ok(Some((h.base_offset, h.max_timestamp)))
    }

    /// Removes every batch whose last offset is >= `offset` (Kafka `UnifiedLog.truncateTo`),
    /// deleting later segments; a batch containing `offset` goes entirely, so the new LEO is
    /// <= `offset`. A negative `offset` is an error (`InvalidOffset`, nothing changes). Below
    /// the log start every batch goes but the log start offset stays: the log restarts empty
    /// at its current start ([`Log::truncate_fully_and_start_at`]`(log_start_offset)`), as
    /// the log start never moves backwards (unlike Kafka, which restarts at `offset`). The
    /// epoch cache and producer state follow. Returns whether any batch was removed.
    ///
    /// Even when no batch goes (`offset` at or past the LEO, or an empty log), epoch cache
    /// entries starting at the LEO are dropped, as Kafka does: a replica that led an epoch
    /// without writing in it holds that epoch's start at its LEO (KAFKA-7415), and when it
    /// follows a leader that never had the epoch, the leader's divergence answer is exactly
    /// this truncation. Keeping the entry would send the same last fetched epoch again and
    /// get the same answer forever.
    pub fn truncate_to(&mut self, offset: i64) -> LogResult<bool> {
        if offset < 0 {
            return Err(LogError::InvalidOffset {
                offset,
                reason: "cannot truncate to a negative offset",
            });
        }
        if offset >= self.log_end_offset {
            self.epoch_cache.truncate_from_end(self.log_end_offset)?;
            return Ok(false);
        }
        if offset < self.log_start_offset {
            if self.log_start_offset == self.log_end_offset {
                self.epoch_cache.truncate_from_end(self.log_end_offset)?;
                return Ok(false);
            }
            tracing::info!(
                dir = %self.dir.display(),
                offset,
                log_start_offset = self.log_start_offset,
                "truncation below the log start: removing every batch, keeping the log start"
            );
            self.truncate_fully_and_start_at(self.log_start_offset)?;
            return Ok(true);
        }
        let later: Vec<i64> = self.segments.range(offset + 1..).map(|(b, _)| *b).collect();
        for base in later.into_iter().rev() {
            let seg = self.segments.remove(&base).expect("listed");
            seg.delete()?;
        }
        let interval = self.config.index_interval_bytes;
        let removed = self.active_mut().truncate_to(offset, interval)?;
        self.log_end_offset = self.active().next_offset();
        tracing::info!(dir = %self.dir.display(), offset, new_leo = self.log_end_offset, removed_bytes = removed, "truncated log");
        self.epoch_cache.truncate_from_end(self.log_end_offset)?;
        self.recovery_point = self.recovery_point.min(self.log_end_offset);
        self.truncations += 1;
        self.lower_cleaner_checkpoint(self.log_end_offset)?;
        self.rebuild_producer_state()?;
        self.check_invariants();
        Ok(true)
    }

    /// Deletes all data and restarts the log empty at `offset` (Kafka
    /// `truncateFullyAndStartAt`, used when a follower is behind the leader's log start).
    /// `offset` must be in `[0, MAX_LOG_END_OFFSET]` (else `InvalidOffset`, nothing changes).
    pub fn truncate_fully_and_start_at(&mut self, offset: i64) -> LogResult<()> {
        if !(0..=MAX_LOG_END_OFFSET).contains(&offset) {
            return Err(LogError::InvalidOffset {
                offset,
                reason: "a log can only start at an offset in [0, MAX_LOG_END_OFFSET]",
            });
        }
        let segments = std::mem::take(&mut self.segments);
        for seg in segments.into_values().rev() {
            seg.delete()?;
        }
        let seg = Segment::create(&self.dir, offset, self.clock.now_ms())?;
        self.segments.insert(offset, seg);
        // The start is the new segment's base now: a stored one must not outlive it (it could
        // lie above `offset` and would be taken back at the next open).
        remove_if_exists(&self.dir.join(LOG_START_OFFSET_CHECKPOINT))?;
        fsync_dir(&self.dir)?;
        self.log_start_offset = offset;
        self.log_end_offset = offset;
        self.recovery_point = offset;
        self.truncations += 1;
        self.lower_cleaner_checkpoint(offset)?;
        self.epoch_cache.clear()?;
        self.producer_state.delete_snapshots_above(-1)?;
        self.producer_state.reset(offset);
        self.unflushed_messages = 0;
        self.check_invariants();
        Ok(())
    }

    /// Retention (Kafka `UnifiedLog.deleteOldSegments`): removes the oldest whole segments
    /// while they are entirely below `high_watermark` and either older than `retention.ms`
    /// (their newest batch timestamp, or creation time without timestamps) or not needed to
    /// stay within `retention.bytes`. The active segment is never removed. Advances the log
    /// start offset (and the recovery point with it), the epoch cache start and the producer
    /// state; reads below the new log start are OFFSET_OUT_OF_RANGE at once.
    ///
    /// Only cheap work happens here, as this runs under the partition lock (Kafka
    /// `UnifiedLog.deleteSegments` / `LocalLog.deleteSegmentFiles`): the segment files are
    /// renamed to `<name>.deleted` ([`Segment::rename_to_deleted`]), oldest segment first,
    /// and the epoch checkpoint is rewritten without fsync
    /// ([`LeaderEpochCache::truncate_from_start_without_fsync`], KAFKA-15046); nothing is
    /// fsynced or unlinked (producer snapshots below the new start, small files, are). The
    /// caller deletes the returned files off the lock with [`DeletedSegments::delete_files`].
    ///
    /// Crash behaviour: renames that reached the disk leave `.deleted` files, which the next
    /// [`Log::open`] deletes; renames that did not leave the segments in the log, whose
    /// start is then the older one until retention runs again (oldest first, so with a file
    /// system that orders metadata operations, as the ext4 and XFS journals do, the
    /// surviving segments stay contiguous). A stale epoch checkpoint is truncated to the
    /// log start by [`Log::open`].
    ///
    /// If renaming a data file fails, that segment and the later ones stay in the log, the
    /// state is advanced past the ones already renamed (whose `.deleted` files are left to
    /// the next open) and the error is returned.
    pub fn delete_old_segments(&mut self, high_watermark: i64) -> LogResult<DeletedSegments> {
        // Whole segments below the log start go whatever the policy (Kafka
        // `deleteLogStartOffsetBreachedSegments`): normally removed when the start moved, left
        // here only by a failed removal or a crash before it.
        let breached = self.segments_below_start();
        if !self.config.cleanup_policy.delete {
            // `cleanup.policy=compact` alone: the cleaner, not retention, bounds the log.
            return self.remove_oldest(&breached);
        }
        let now_ms = self.clock.now_ms();
        // Exact arithmetic: sizes and `retention.bytes` are u64, their difference may be
        // negative (nothing to delete for size) and must never wrap.
        let mut excess = self
            .config
            .retention_bytes
            .map(|max| i128::from(self.size_bytes()) - i128::from(max));
        let mut doomed = Vec::new();
        let active_base = self.active().base_offset();
        for seg in self.segments.values() {
            if breached.contains(&seg.base_offset()) {
                if let Some(x) = excess.as_mut() {
                    *x -= i128::from(seg.size_bytes());
                }
                doomed.push(seg.base_offset());
                continue;
            }
            if seg.base_offset() == active_base || seg.next_offset() > high_watermark {
                break;
            }
            let age_basis = if seg.max_timestamp() >= 0 {
                seg.max_timestamp()
            } else {
                seg.created_ms()
            };
            let expired = self
                .config
                .retention_ms
                .is_some_and(|ms| now_ms.saturating_sub(age_basis) > ms);
            let too_big = excess.is_some_and(|x| x >= i128::from(seg.size_bytes()));
            if !(expired || too_big) {
                break;
            }
            if let Some(x) = excess.as_mut() {
                *x -= i128::from(seg.size_bytes());
            }
            doomed.push(seg.base_offset());
        }
        self.remove_oldest(&doomed)
    }

    /// Base offsets of the whole segments below the log start: those whose next segment
    /// starts at or below it (never the active one). Oldest first.
    fn segments_below_start(&self) -> Vec<i64> {
        let bases: Vec<i64> = self.segments.keys().copied().collect();
        bases
            .windows(2)
            .take_while(|w| w[1] <= self.log_start_offset)
            .map(|w| w[0])
            .collect()
    }

    /// Removes the segments at `doomed` (the oldest ones, in order) as retention does (see
    /// [`Log::delete_old_segments`]): renamed to `.deleted`, then the log start is at least
    /// the new first segment's base, the recovery point too, and the epoch cache and
    /// producer state start at the log start.
    fn remove_oldest(&mut self, doomed: &[i64]) -> LogResult<DeletedSegments> {
        let mut deleted = DeletedSegments::default();
        let mut failure = None;
        // Oldest first (see the doc comment).
        for base in doomed {
            let seg = self.segments.remove(base).expect("listed");
            let (path, size_bytes) = (seg.path().to_path_buf(), seg.size_bytes());
            match seg.rename_to_deleted() {
                Ok(files) => {
                    tracing::info!(segment = %path.display(), size_bytes, "retention: deleting segment (renamed to .deleted)");
                    deleted.segments += 1;
                    deleted.files.extend(files);
                }
                Err(failed) => {
                    let (seg, e) = *failed;
                    self.segments.insert(*base, seg);
                    failure = Some(e);
                    break;
                }
            }
        }
        if !deleted.is_empty() {
            self.log_start_offset = self.log_start_offset.max(self.first_base());
            self.recovery_point = self.recovery_point.max(self.first_base());
            let advanced = self
                .epoch_cache
                .truncate_from_start_without_fsync(self.log_start_offset)
                .and_then(|()| self.producer_state.truncate_head(self.log_start_offset));
            match advanced {
                Ok(snapshots) => deleted.files.extend(snapshots),
                Err(e) => {
                    failure.get_or_insert(e);
                }
            }
        }
        self.check_invariants();
        match failure {
            None => Ok(deleted),
            Some(e) => {
                if !deleted.is_empty() {
                    tracing::warn!(
                        dir = %self.dir.display(),
                        files = ?deleted.files,
                        "retention failed part way: these .deleted files are left for the next open"
                    );
                }
                Err(e)
            }
        }
    }

    /// Moves the log start offset up to `offset` (Kafka `UnifiedLog.maybeIncrementLogStartOffset`):
    /// DeleteRecords on a leader (KIP-107), or a follower taking its leader's start. Records
    /// below it are no longer read (OFFSET_OUT_OF_RANGE; a batch holding `offset` is still
    /// returned whole, as Kafka's reads are by batch) nor counted by ListOffsets EARLIEST.
    /// The new start is made durable first ([`LOG_START_OFFSET_CHECKPOINT`], written
    /// atomically and fsynced), then the whole segments below it are removed as retention
    /// removes them (renamed to `.deleted`, the files returned for deletion off the lock),
    /// and the epoch cache and producer state start there. Returns whether the start moved:
    /// `offset` at or below it changes nothing. Errors: `offset` above the LEO
    /// (`InvalidOffset`, nothing changes; the caller bounds it by the high watermark, as
    /// Kafka refuses a start above it), or I/O (if the checkpoint was written, the start has
    /// moved and the segments left behind go with the next retention pass).
    pub fn increment_log_start_offset(
        &mut self,
        offset: i64,
    ) -> LogResult<(bool, DeletedSegments)> {
        if offset > self.log_end_offset {
            return Err(LogError::InvalidOffset {
                offset,
                reason: "the log start cannot move past the log end",
            });
        }
        if offset <= self.log_start_offset {
            return Ok((false, DeletedSegments::default()));
        }
        write_log_start_checkpoint(&self.dir, offset)?;
        self.log_start_offset = offset;
        let doomed = self.segments_below_start();
        let mut deleted = self.remove_oldest(&doomed)?;
        if doomed.is_empty() {
            // `remove_oldest` moves the epoch cache and producer state only when it removed
            // a segment.
            let snapshots = self
                .epoch_cache
                .truncate_from_start_without_fsync(offset)
                .and_then(|()| self.producer_state.truncate_head(offset))?;
            deleted.files.extend(snapshots);
        }
        self.check_invariants();
        Ok((true, deleted))
    }

    /// Where a follower's empty log restarts so that it can take the leader's first batch
    /// (Kafka `Partition.appendRecordsToFollowerOrFutureReplica`, KAFKA-6975): when the log
    /// holds nothing (start = end) and the first batch of `records` starts below its end and
    /// ends at or above it, the batch's base offset. The leader's log start is then inside
    /// that batch (DeleteRecords), and the follower asked from there after an out-of-range
    /// answer. The caller restarts the log there
    /// ([`Log::truncate_fully_and_start_at`]), appends, then moves the start up to the
    /// leader's again. `None` otherwise (and for bytes that are not a batch).
    pub fn follower_restart_point(&self, records: &Bytes) -> Option<i64> {
        if self.log_start_offset != self.log_end_offset {
            return None;
        }
        let first = BatchIter::new(records.clone()).next()?.ok()?;
        (first.base_offset() < self.log_end_offset && first.last_offset() >= self.log_end_offset)
            .then_some(first.base_offset())
    }

    /// Base offset of the first segment.
    fn first_base(&self) -> i64 {
        *self.segments.keys().next().expect("never empty")
    }

    /// Applies `producer.id.expiration.ms` with the injected clock (Kafka runs this every
    /// `producer.id.expiration.check.interval.ms`). Returns how many producers were removed.
    pub fn remove_expired_producers(&mut self) -> usize {
        match self.config.producer_id_expiration_ms {
            Some(ms) => self.producer_state.remove_expired(self.clock.now_ms(), ms),
            None => 0,
        }
    }

    /// fdatasyncs every segment holding data at or after the recovery point, then moves the
    /// recovery point to the LEO (Kafka `UnifiedLog.flush`).
    pub fn flush(&mut self) -> LogResult<()> {
        let job = self.begin_flush();
        let result = job.run();
        self.finish_flush(job, result)
    }

    /// Takes the fsyncs that make every offset below the LEO durable (none when the
    /// recovery point is the LEO), to run without the partition lock. Pass the job and its
    /// result to [`Log::finish_flush`].
    pub fn begin_flush(&mut self) -> LogFlush {
        let files = if self.recovery_point < self.log_end_offset {
            let start = self
                .segments
                .range(..=self.recovery_point)
                .next_back()
                .map_or(self.log_start_offset, |(b, _)| *b);
            self.segments
                .range(start..)
                .map(|(_, s)| s.sync_handle())
                .collect()
        } else {
            Vec::new()
        };
        // A log that never held a record (start and end at 0) loses nothing with its
        // segment's directory entry: after a crash that drops it, open creates the same empty
        // segment at 0. Its directory stays dirty until a flush has data to protect. Measured
        // at 100,000 fresh partitions per broker: the clean shutdown's flush fsynced 100,000
        // directories, SIGTERM to exit 22-25 s.
        let never_written = self.log_start_offset == 0 && self.log_end_offset == 0;
        let sync_dir = self.dir_dirty && !never_written;
        if sync_dir {
            self.dir_dirty = false;
        }
        let index_bases: Vec<i64> = std::mem::take(&mut self.unsynced_indexes)
            .into_iter()
            .filter(|b| self.segments.contains_key(b))
            .collect();
        let indexes = index_bases
            .iter()
            .flat_map(|&b| {
                [INDEX_SUFFIX, TIME_INDEX_SUFFIX].map(|suffix| segment_file(&self.dir, b, suffix))
            })
            .collect();
        LogFlush {
            files,
            indexes,
            index_bases,
            rolled: std::mem::take(&mut self.rolled_since_flush),
            dir: sync_dir.then(|| self.dir.clone()),
            target: self.log_end_offset,
            messages: self.unflushed_messages,
            truncations: self.truncations,
        }
    }

    /// Completes `job` (from [`Log::begin_flush`]) after it ran with `result`: on success,
    /// offsets below its LEO are durable (the recovery point moves there, unless the log was
    /// truncated meanwhile) and the `flush.ms` / `flush.messages` counters restart.
    ///
    /// Errors: `result`'s error (the directory is then synced again by the next flush).
    pub fn finish_flush(&mut self, job: LogFlush, result: LogResult<()>) -> LogResult<()> {
        if let Err(e) = result {
            self.dir_dirty |= job.dir.is_some();
            let segments = &self.segments;
            self.unsynced_indexes.extend(
                job.index_bases
                    .into_iter()
                    .filter(|b| segments.contains_key(b)),
            );
            self.rolled_since_flush |= job.rolled;
            return Err(e);
        }
        if job.truncations == self.truncations {
            debug_assert!(job.target <= self.log_end_offset);
            self.recovery_point = self.recovery_point.max(job.target);
        }
        self.unflushed_messages = self.unflushed_messages.saturating_sub(job.messages);
        self.last_flush_ms = self.clock.now_ms();
        self.check_invariants();
        Ok(())
    }

    /// [`Log::begin_flush`] if something is unflushed and either a segment was rolled since
    /// the last flush (Kafka's flush after a roll, see `rolled_since_flush`) or `flush.ms`
    /// has passed since the last flush (Kafka's log flusher); `None` otherwise.
    pub fn begin_flush_if_due(&mut self) -> Option<LogFlush> {
        let due = self.rolled_since_flush
            || self
                .config
                .flush_interval_ms
                .is_some_and(|ms| self.clock.now_ms().saturating_sub(self.last_flush_ms) >= ms);
        let unsynced =
            self.recovery_point < self.log_end_offset || !self.unsynced_indexes.is_empty();
        (due && unsynced).then(|| self.begin_flush())
    }

    /// Flushes if [`Log::begin_flush_if_due`] says so (a roll, or `flush.ms`), under the
    /// caller's lock. Returns whether it flushed.
    pub fn flush_if_due(&mut self) -> LogResult<bool> {
        match self.begin_flush_if_due() {
            Some(job) => {
                let result = job.run();
                self.finish_flush(job, result).map(|()| true)
            }
            None => Ok(false),
        }
    }

    /// Records that a new leader epoch starts at the LEO even before any write (Kafka
    /// `maybeAssignEpochStartOffset`, KAFKA-7415).
    pub fn assign_epoch_start_offset(&mut self, leader_epoch: i32) -> LogResult<()> {
        self.epoch_cache.assign(leader_epoch, self.log_end_offset)?;
        Ok(())
    }

    /// [`Self::assign_epoch_start_offset`] in memory only ([`LeaderEpochCache::stage`]):
    /// returns the start offset recorded (the LEO) when the cache changed, which the caller
    /// appends to the leader epoch journal, or makes durable with
    /// [`Self::sync_epoch_checkpoint`], before the epoch is used.
    pub fn stage_epoch_start_offset(&mut self, leader_epoch: i32) -> LogResult<Option<i64>> {
        let start = self.log_end_offset;
        Ok(self
            .epoch_cache
            .stage(leader_epoch, start)?
            .then_some(start))
    }

    /// Writes the leader epoch checkpoint durably.
    pub fn sync_epoch_checkpoint(&mut self) -> LogResult<()> {
        self.epoch_cache.sync()
    }

    /// Writes the leader epoch checkpoint in place without fsync if it lacks a staged entry
    /// ([`LeaderEpochCache::write_staged`]); returns whether it wrote. The caller syncs the
    /// file system before it clears the journal.
    pub fn write_staged_epochs(&mut self) -> LogResult<bool> {
        self.epoch_cache.write_staged()
    }

    /// Stages the journaled entry "`epoch` starts at `start_offset`"
    /// ([`super::epoch_journal`]) when this log's own batches prove it and the cache does not
    /// know it yet: the batch holding `start_offset` starts there and was written in `epoch`,
    /// the batch before it (if any) in an older epoch, and every cached epoch is older and
    /// starts earlier. Anything else (the log truncated or re-created since, no batch written
    /// in that epoch: [`Log::open`] drops an epoch starting at the LEO anyway) leaves the
    /// cache as it is. Returns whether it staged; the caller writes and syncs the checkpoint.
    pub fn replay_journaled_epoch(&mut self, epoch: i32, start_offset: i64) -> LogResult<bool> {
        if epoch < 0 || start_offset < self.log_start_offset || start_offset >= self.log_end_offset
        {
            return Ok(false);
        }
        if let Some(last) = self.epoch_cache.entries().last()
            && (last.epoch >= epoch || last.start_offset >= start_offset)
        {
            return Ok(false);
        }
        let Some(at) = self.batch_header_at(start_offset)? else {
            return Ok(false);
        };
        if at.base_offset != start_offset || at.partition_leader_epoch != epoch {
            return Ok(false);
        }
        if start_offset > self.log_start_offset
            && let Some(before) = self.batch_header_at(start_offset - 1)?
            && before.partition_leader_epoch >= epoch
        {
            return Ok(false);
        }
        self.epoch_cache.stage(epoch, start_offset)
    }

    /// The header of the batch holding `offset` (its last offset >= `offset`), if any.
    fn batch_header_at(&self, offset: i64) -> LogResult<Option<BatchHeader>> {
        let Some((_, seg)) = self.segments.range(..=offset).next_back() else {
            return Ok(None);
        };
        Ok(seg.find_batch(offset)?.map(|(_, h)| h))
    }

    /// OffsetsForLeaderEpoch answer `(epoch, end_offset)` for `requested_epoch`
    /// ([`LeaderEpochCache::end_offset_for`] with this log's LEO).
    pub fn end_offset_for_epoch(&self, requested_epoch: i32) -> (i32, i64) {
        self.epoch_cache
            .end_offset_for(requested_epoch, self.log_end_offset)
    }

    /// Writes the indexes that changed and a producer snapshot at the LEO unless the state
    /// there is already saved, then flushes, which fsyncs those index files with the
    /// segments (clean shutdown; an idle log writes nothing, see
    /// [`ProducerStateManager::take_snapshot`]).
    pub fn close(mut self) -> LogResult<()> {
        let mut written = Vec::new();
        for (base, seg) in self.segments.iter_mut() {
            if seg.write_indexes()? {
                written.push(*base);
            }
        }
        for base in written {
            self.note_unsynced_indexes(base);
        }
        self.producer_state.take_snapshot()?;
        self.flush()
    }

    /// Deletes the whole partition directory at once (tests and benches; the broker uses
    /// [`Log::rename_for_deletion`]).
    pub fn delete(self) -> LogResult<()> {
        let dir = self.dir.clone();
        drop(self);
        fs::remove_dir_all(&dir).map_err(io_err(&dir))
    }

    /// Closes the log and renames its directory to [`deletion_dir_name`] in the same parent,
    /// which is no longer a partition directory: what Kafka's `LogManager.asyncDelete` does
    /// before its scheduler deletes the directory `file.delete.delay.ms` later. Returns the
    /// new path, for [`DeletedSegments::directory`]. The caller fsyncs the parent; a crash
    /// before the deletion leaves the renamed directory, which
    /// [`crate::log::LogManager::open`] deletes.
    ///
    /// Errors: `Io` naming the directory (the log is then closed but still in place, and the
    /// next open loads it).
    pub fn rename_for_deletion(self) -> LogResult<PathBuf> {
        let dir = self.dir.clone();
        drop(self);
        let name = dir
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| LogError::Io {
                path: dir.clone(),
                source: std::io::Error::other("not a partition directory name"),
            })?;
        let target = dir.with_file_name(deletion_dir_name(name, uuid::Uuid::new_v4()));
        fs::rename(&dir, &target).map_err(io_err(&dir))?;
        Ok(target)
    }

    /// First offset held (inclusive).
    pub fn log_start_offset(&self) -> i64 {
        self.log_start_offset
    }
    /// LEO: the offset the next record will get (exclusive end).
    pub fn log_end_offset(&self) -> i64 {
        self.log_end_offset
    }
    /// Offset below which the data is fsynced.
    pub fn recovery_point(&self) -> i64 {
        self.recovery_point
    }
    /// Total bytes of all segments.
    pub fn size_bytes(&self) -> u64 {
        self.segments.values().map(|s| s.size_bytes()).sum()
    }
    /// Number of segments.
    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }
    /// Base offsets of the segments, ascending.
    pub fn segment_base_offsets(&self) -> Vec<i64> {
        self.segments.keys().copied().collect()
    }
    /// The leader-epoch cache.
    pub fn epoch_cache(&self) -> &LeaderEpochCache {
        &self.epoch_cache
    }
    /// Latest leader epoch in the cache.
    pub fn latest_epoch(&self) -> Option<i32> {
        self.epoch_cache.latest_epoch()
    }
    /// Producer state of `producer_id`.
    pub fn producer_entry(&self, producer_id: i64) -> Option<&ProducerEntry> {
        self.producer_state.entry(producer_id)
    }
    /// The partition directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
    /// Replaces the configuration (a topic config change, Kafka `UnifiedLog.updateConfig`);
    /// takes effect from the next append, roll, flush or retention run.
    pub fn set_config(&mut self, config: LogConfig) -> LogResult<()> {
        config.validate()?;
        self.config = config;
        Ok(())
    }

    /// The configuration.
    pub fn config(&self) -> &LogConfig {
        &self.config
    }

    /// The log's clock (ms since the epoch): the `now_ms` to give the cleaner.
    pub fn clock_now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    /// The segments, ascending (the last is the active one).
    pub(super) fn segment_list(&self) -> Vec<&Segment> {
        self.segments.values().collect()
    }

    /// The segment at `base_offset`.
    pub(super) fn segment(&self, base_offset: i64) -> Option<&Segment> {
        self.segments.get(&base_offset)
    }

    /// Truncations so far (see the field).
    pub(super) fn truncation_count(&self) -> u64 {
        self.truncations
    }

    /// Producer id -> last offset of its newest batch.
    pub(super) fn producer_last_offsets(&self) -> std::collections::HashMap<i64, i64> {
        self.producer_state.last_batch_offsets()
    }

    /// The cleaner checkpoint (end of the last completed pass), if any.
    pub fn cleaner_checkpoint(&self) -> Option<i64> {
        self.cleaner_checkpoint
    }

    /// Earliest delete horizon of a tombstone kept by the last cleaner pass.
    pub fn earliest_delete_horizon_ms(&self) -> Option<i64> {
        self.earliest_delete_horizon_ms
    }

    pub(super) fn set_cleaner_state(&mut self, checkpoint: Option<i64>, horizon_ms: Option<i64>) {
        self.cleaner_checkpoint = checkpoint;
        self.earliest_delete_horizon_ms = horizon_ms;
    }

    /// Records, before the first offset gap reaches the disk, that this log may hold gaps
    /// (see `load_segments`): writes the cleaner checkpoint file (at the log start, i.e.
    /// "nothing cleaned yet") if there is none.
    pub(super) fn mark_offset_gaps(&mut self) -> LogResult<()> {
        if self.cleaner_checkpoint.is_none() {
            let start = self.log_start_offset;
            let path = self.dir.join(CLEANER_CHECKPOINT);
            super::checkpoint::write_atomically(&path, format!("0\n1\n{start}\n").as_bytes())?;
            self.cleaner_checkpoint = Some(start);
        }
        Ok(())
    }

    /// Kafka `LogCleanerManager.maybeTruncateCheckpoint`: after a truncation to `offset`
    /// data above it is new and dirty again.
    fn lower_cleaner_checkpoint(&mut self, offset: i64) -> LogResult<()> {
        if self.cleaner_checkpoint.is_some_and(|c| c > offset) {
            self.cleaner_checkpoint = Some(offset);
            let path = self.dir.join(CLEANER_CHECKPOINT);
            super::checkpoint::write_atomically(&path, format!("0\n1\n{offset}\n").as_bytes())?;
        }
        Ok(())
    }

    /// Puts `cleaned` (the replacement of a non-active segment, or of a group starting with
    /// it whose other members [`Log::retire_segment`] removed, already renamed to its final
    /// name) in the place of the segment with its base offset and returns that one.
    pub(super) fn replace_segment(&mut self, cleaned: Segment) -> Segment {
        let base = cleaned.base_offset();
        debug_assert!(base != self.active().base_offset());
        let old = self
            .segments
            .insert(base, cleaned)
            .expect("install_cleaned checked the segment is there");
        self.check_invariants();
        old
    }

    /// Removes the non-active segment at `base` from the log and renames its files to
    /// `.deleted` ([`Segment::rename_to_deleted`]) for a cleaned group that replaces it;
    /// returns those files. The caller fsyncs the directory. On failure the segment stays.
    pub(super) fn retire_segment(&mut self, base: i64) -> LogResult<Vec<PathBuf>> {
        debug_assert!(base != self.active().base_offset());
        let seg = self
            .segments
            .remove(&base)
            .expect("install_cleaned checked the segment is there");
        match seg.rename_to_deleted() {
            Ok(files) => Ok(files),
            Err(failed) => {
                let (seg, e) = *failed;
                self.segments.insert(base, seg);
                Err(e)
            }
        }
    }
}

/// The base offsets of the segment files in `dir`, sorted. Only `{offset:020}` names are the
/// log's segment, index and snapshot files (see `parse_offset_file_name`): anything else is
/// left alone, with a warning, and never deleted, so a stray `0.log` cannot shadow or get the
/// real segment deleted. The exceptions are the log's own leftovers: `<own file>.tmp` and the
/// `.deleted` files of segments removed by retention (`{offset:020}.log.deleted` etc.),
/// deleted here.
fn segment_bases(dir: &Path) -> LogResult<Vec<i64>> {
    let mut bases = Vec::new();
    let mut swaps = Vec::new();
    for e in fs::read_dir(dir).map_err(io_err(dir))? {
        let e = e.map_err(io_err(dir))?;
        let path = e.path();
        let name = e.file_name();
        let Some(name) = name.to_str() else {
            tracing::warn!(file = %path.display(), "ignoring file with a non-UTF-8 name in log directory");
            continue;
        };
        let is_file = e.file_type().map_err(io_err(&path))?.is_file();
        if let Some(target) = name.strip_suffix(".tmp")
            && is_own_atomic_file(target)
            && is_file
        {
            // Leftover of an interrupted atomic write: the old file is still valid.
            fs::remove_file(&path).map_err(io_err(&path))?;
        } else if is_file
            && let Some(target) = name.strip_suffix(CLEANED_SUFFIX)
            && parse_offset_file_name(target, LOG_SUFFIX).is_some()
        {
            // A cleaned segment still being written when the process stopped (Kafka
            // `LogLoader`): incomplete, the segment it was cleaned from is intact.
            tracing::info!(file = %path.display(), "deleting incomplete cleaned segment");
            fs::remove_file(&path).map_err(io_err(&path))?;
        } else if is_file
            && let Some(target) = name.strip_suffix(SWAP_SUFFIX)
            && let Some(base) = parse_offset_file_name(target, LOG_SUFFIX)
        {
            swaps.push(base);
        } else if (is_deleted_segment_file_name(name) || is_deleted_snapshot_file_name(name))
            && is_file
        {
            // A segment (or a producer snapshot below the log start) that retention removed
            // from the log before a crash or shutdown (renamed under the lock, deleted later,
            // see `delete_old_segments`); never loaded.
            tracing::info!(file = %path.display(), "deleting leftover file of a segment removed by retention");
            fs::remove_file(&path).map_err(io_err(&path))?;
        } else if let Some(suffix) = OFFSET_FILE_SUFFIXES.iter().find(|s| name.ends_with(**s)) {
            match parse_offset_file_name(name, suffix) {
                Some(base) if is_file => {
                    if *suffix == LOG_SUFFIX {
                        bases.push(base);
                    }
                }
                _ => tracing::warn!(
                    file = %path.display(),
                    "ignoring file that is not a {{offset:020}}{suffix} file of the log (not deleted)"
                ),
            }
        } else if name.ends_with(".tmp") {
            tracing::warn!(file = %path.display(), "ignoring unknown temporary file (not deleted)");
        }
    }
    // Complete the cleaner's swaps (Kafka `LogLoader`): a `.log.swap` file is a complete,
    // fsynced cleaned version of the segment with its base offset, or of a group of segments
    // starting there, made durable before any old file was replaced or retired; it replaces
    // every segment whose base offset lies within its offsets (those can only be members of
    // its group). Only a segment still in the log is replaced: without its file (removed by
    // retention or truncation) the swap is stale and deleted.
    if !swaps.is_empty() {
        for base in swaps {
            let swap = dir.join(format!("{base:020}{LOG_SUFFIX}{SWAP_SUFFIX}"));
            if bases.contains(&base) {
                tracing::info!(file = %swap.display(), "completing an interrupted cleaner swap");
                let end = swap_file_end(dir, base)?;
                for member in bases.iter().filter(|b| **b > base && **b < end) {
                    tracing::info!(
                        base = member,
                        "deleting a segment the cleaner's swap replaces"
                    );
                    for suffix in [LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX] {
                        remove_if_exists(&super::segment::segment_file(dir, *member, suffix))?;
                    }
                }
                bases.retain(|b| !(*b > base && *b < end));
                complete_swap_file(dir, base)?;
            } else {
                tracing::warn!(file = %swap.display(), "deleting a cleaner swap file whose segment is gone");
                remove_if_exists(&swap)?;
            }
        }
        fsync_dir(dir)?;
    }
    bases.sort_unstable();
    Ok(bases)
}

/// Opens the segments at `bases` (sorted), recovering those at or above the recovery point
/// after an unclean shutdown, and stops at the first corrupt or non-contiguous one: the
/// segments after it cannot be trusted and are deleted (Kafka deletes them too). Returns the
/// segments by base offset and whether any was recovered.
fn load_segments(
    dir: &Path,
    bases: &[i64],
    config: &LogConfig,
    opts: LogOpenOptions,
    now_ms: i64,
) -> LogResult<(BTreeMap<i64, Segment>, bool)> {
    let recover_from = bases
        .iter()
        .rev()
        .find(|b| **b <= opts.recovery_point)
        .or(bases.first())
        .copied()
        .unwrap_or(0);
    let mut segments = BTreeMap::new();
    let mut recovered_any = false;
    let mut iter = bases.iter();
    // Offset gaps are legitimate only in a log that may have been compacted: a compacted
    // topic, or a log that ever held gaps (cleaned here, or copied from a compacted leader),
    // which `Log::mark_offset_gaps` records by the cleaner checkpoint file. Elsewhere a gap
    // means a damaged base offset (outside the CRC) and recovery cuts the log there.
    let allow_gaps = config.cleanup_policy.compact || dir.join(CLEANER_CHECKPOINT).exists();
    // One iteration per segment file.
    for &base in iter.by_ref() {
        let recover = !opts.clean_shutdown && base >= recover_from;
        recovered_any |= recover;
        let (seg, outcome) = Segment::open(
            dir,
            base,
            recover,
            config.index_interval_bytes,
            config.max_message_bytes,
            now_ms,
            allow_gaps,
        )?;
        let contiguous = segments.values().next_back().is_none_or(|prev: &Segment| {
            prev.next_offset() == base || (allow_gaps && prev.next_offset() < base)
        });
        if !contiguous {
            tracing::warn!(dir = %dir.display(), base, "segment is not contiguous with the previous one");
            seg.delete()?;
            break;
        }
        segments.insert(base, seg);
        if outcome.truncated_bytes > 0 {
            break;
        }
    }
    // Segments after a corrupt or non-contiguous one cannot be trusted (Kafka deletes
    // them too).
    for &base in iter {
        let seg_path = super::segment::segment_file(dir, base, LOG_SUFFIX);
        let size = fs::metadata(&seg_path).map(|m| m.len()).unwrap_or(0);
        tracing::warn!(
            segment = %seg_path.display(),
            size_bytes = size,
            "deleting segment after a corrupt or non-contiguous one"
        );
        for suffix in [LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX] {
            remove_if_exists(&super::segment::segment_file(dir, base, suffix))?;
        }
    }
    Ok((segments, recovered_any))
}

/// The leader-epoch cache of `dir` cut to `[log_start_offset, log_end_offset)`: the segments
/// are the truth, and the checkpoint may predate a truncation or a retention whose rewrite of
/// it was not fsynced (KAFKA-15046). A torn or garbled checkpoint yields an empty cache and
/// `true`: rebuild it from the batches once the log is assembled.
fn open_epoch_cache(
    dir: &Path,
    log_start_offset: i64,
    log_end_offset: i64,
) -> LogResult<(LeaderEpochCache, bool)> {
    match LeaderEpochCache::open(dir) {
        Ok(mut cache) => {
            cache.truncate_from_end(log_end_offset)?;
            cache.truncate_from_start(log_start_offset)?;
            Ok((cache, false))
        }
        Err(e @ LogError::MalformedFile { .. }) => {
            tracing::warn!(dir = %dir.display(), "{e}; rebuilding the leader-epoch cache from the batches' partition leader epochs");
            Ok((LeaderEpochCache::in_memory(), true))
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::config::ManualClock;
    use crate::log::segment::{DELETED_SUFFIX, segment_file};
    use keel_record::RecordBatchBuilder;

    fn config() -> LogConfig {
        LogConfig {
            segment_bytes: 1024,
            index_interval_bytes: 128,
            retention_ms: None,
            retention_bytes: None,
            ..LogConfig::default()
        }
    }

    /// A batch of two records with 200-byte values (two batches fill a 1 KiB segment).
    fn batch() -> Bytes {
        let mut b = RecordBatchBuilder::new(0);
        for i in 0..2 {
            b.append(1_000 + i, None, Some(&[7u8; 200]), &[]);
        }
        b.build().into_bytes()
    }

    fn open(dir: &Path) -> Log {
        Log::open(
            dir,
            config(),
            Arc::new(ManualClock::new(1_000)),
            LogOpenOptions::default(),
        )
        .unwrap()
    }

    /// A log of at least four segments, written in leader epochs 1, 2, 3 (epoch `1 + i /
    /// 4` for the i-th batch, so the epoch cache has entries inside the first segments).
    fn filled_log(dir: &Path) -> Log {
        let mut log = open(dir);
        for i in 0..12 {
            log.append_as_leader(batch(), 1 + i / 4).unwrap();
        }
        assert!(log.segment_count() >= 4, "{:?}", log.segment_base_offsets());
        log
    }

    /// Closing a never-written log writes nothing (no index files, no producer snapshot),
    /// and it reopens as the same empty log; once written, its close writes both.
    #[test]
    fn closing_a_never_written_log_writes_no_files() {
        let dir = tempfile::tempdir().unwrap();
        let names = || {
            let mut v: Vec<String> = fs::read_dir(dir.path())
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .filter(|n| n != LEADER_EPOCH_CHECKPOINT)
                .collect();
            v.sort();
            v
        };
        open(dir.path()).close().unwrap();
        assert_eq!(names(), vec![format!("{:020}{LOG_SUFFIX}", 0)]);
        let mut log = open(dir.path());
        assert_eq!((log.log_start_offset(), log.log_end_offset()), (0, 0));
        log.append_as_leader(batch(), 1).unwrap();
        let leo = log.log_end_offset();
        log.close().unwrap();
        let want: Vec<String> = [INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX]
            .iter()
            .map(|s| format!("{:020}{s}", 0))
            .chain([format!("{leo:020}{SNAPSHOT_SUFFIX}")])
            .collect();
        assert_eq!(names(), want);
    }

    /// A never-written log's flush leaves its directory alone (nothing to lose, see
    /// `begin_flush`) but keeps it dirty: the first flush with data fsyncs it, once.
    #[test]
    fn a_never_written_log_defers_its_directory_fsync_to_the_first_data() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = open(dir.path());
        let job = log.begin_flush();
        assert!(job.dir.is_none() && job.files.is_empty());
        let r = job.run();
        log.finish_flush(job, r).unwrap();
        assert!(log.dir_dirty);
        log.append_as_leader(batch(), 1).unwrap();
        let job = log.begin_flush();
        assert_eq!(job.dir.as_deref(), Some(dir.path()));
        let r = job.run();
        log.finish_flush(job, r).unwrap();
        assert!(!log.dir_dirty);
        assert!(log.begin_flush().dir.is_none());
    }

    /// A deletion directory name keeps within 255 bytes, is never a partition directory
    /// name, and is recognised as one.
    #[test]
    fn deletion_dir_names_fit_and_never_parse_as_a_partition() {
        use crate::log::checkpoint::TopicPartition;
        let id = uuid::Uuid::from_u128(0xabc);
        let short = deletion_dir_name("orders-3", id);
        assert_eq!(short, format!("orders-3.{}-delete", id.simple()));
        let long_topic = "t".repeat(249);
        let long = deletion_dir_name(&format!("{long_topic}-2147483647"), id);
        assert_eq!(long.len(), 255);
        for name in [&short, &long] {
            assert!(is_deletion_dir_name(name));
            assert_eq!(TopicPartition::from_dir_name(name), None, "{name}");
        }
        assert!(!is_deletion_dir_name("orders-delete-0"));
    }

    /// A roll writes the old segment's index files without fsync and makes a flush due; the
    /// flush takes them (with the directory) and moves the recovery point, a failed flush
    /// gives them back, and a segment that is gone (retention) is dropped from the list
    /// instead of being synced.
    #[test]
    fn a_roll_leaves_its_index_fsyncs_to_the_next_flush() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = open(dir.path());
        for _ in 0..3 {
            log.append_as_leader(batch(), 1).unwrap();
        }
        let bases = log.segment_base_offsets();
        assert_eq!(bases.len(), 2, "{bases:?}");
        let old = bases[0];
        let paths = [INDEX_SUFFIX, TIME_INDEX_SUFFIX].map(|s| segment_file(dir.path(), old, s));
        assert!(paths.iter().all(|p| p.exists()), "written at the roll");
        assert_eq!(log.unsynced_indexes, BTreeSet::from([old]));
        // Without `flush.ms`, the roll alone makes the flush due (Kafka's flush after a
        // roll); the flush moves the recovery point to the end.
        assert_eq!(log.config.flush_interval_ms, None);
        assert!(log.rolled_since_flush);
        assert_eq!(log.recovery_point(), 0);
        // A failed flush gives the index files and the roll back; a successful one syncs
        // them and forgets them.
        let job = log.begin_flush_if_due().expect("due after a roll");
        assert!(!log.rolled_since_flush);
        assert_eq!(job.indexes, paths.to_vec());
        assert_eq!(job.dir.as_deref(), Some(dir.path()));
        let failed = Err(LogError::Io {
            path: paths[0].clone(),
            source: std::io::Error::other("injected"),
        });
        assert!(log.finish_flush(job, failed).is_err());
        assert_eq!(log.unsynced_indexes, BTreeSet::from([old]));
        assert!(log.dir_dirty && log.rolled_since_flush);
        assert_eq!(log.recovery_point(), 0);
        let job = log.begin_flush_if_due().expect("still due");
        assert_eq!(job.indexes, paths.to_vec());
        let r = job.run();
        log.finish_flush(job, r).unwrap();
        assert!(log.unsynced_indexes.is_empty());
        assert_eq!(log.recovery_point(), log.log_end_offset());
        assert!(log.begin_flush_if_due().is_none(), "nothing new: not due");
        assert!(log.begin_flush().indexes.is_empty());
        // The next roll: its segment goes before a flush, so its files are not synced.
        log.append_as_leader(batch(), 1).unwrap();
        log.append_as_leader(batch(), 1).unwrap();
        assert_eq!(log.unsynced_indexes.len(), 1);
        let gone = *log.unsynced_indexes.first().unwrap();
        log.segments.remove(&gone);
        let job = log.begin_flush();
        assert!(job.indexes.is_empty(), "{:?}", job.indexes);
    }

    #[test]
    fn journaled_epochs_are_replayed_only_where_the_batches_prove_them() {
        let dir = tempfile::tempdir().unwrap();
        {
            // Epochs 1 and 2 recorded durably by the appends; epoch 5 staged at LEO 16 (only
            // in memory and in the journal), then written in: a crash loses the cache's entry.
            let mut log = open(dir.path());
            for i in 0..8 {
                log.append_as_leader(batch(), 1 + i / 4).unwrap();
            }
            assert_eq!(log.stage_epoch_start_offset(5).unwrap(), Some(16));
            for _ in 0..4 {
                log.append_as_leader(batch(), 5).unwrap();
            }
            assert_eq!(log.log_end_offset(), 24);
        }
        let entries = |log: &Log| {
            log.epoch_cache()
                .entries()
                .iter()
                .map(|e| (e.epoch, e.start_offset))
                .collect::<Vec<_>>()
        };
        let mut log = open(dir.path());
        assert_eq!(entries(&log), [(1, 0), (2, 8)]);
        // Not proven: inside a batch, a batch of another epoch, an epoch the batch before
        // also has, at or past the LEO, before the cached epochs, negative.
        for (epoch, start) in [(5, 17), (4, 16), (5, 18), (5, 24), (5, 30), (2, 16), (1, 4)] {
            assert!(
                !log.replay_journaled_epoch(epoch, start).unwrap(),
                "({epoch}, {start})"
            );
        }
        assert!(!log.replay_journaled_epoch(-1, 16).unwrap());
        assert_eq!(entries(&log), [(1, 0), (2, 8)]);
        // Proven: the batch at 16 starts epoch 5 and the one before is epoch 2.
        assert!(log.replay_journaled_epoch(5, 16).unwrap());
        assert_eq!(entries(&log), [(1, 0), (2, 8), (5, 16)]);
        assert!(!log.replay_journaled_epoch(5, 16).unwrap(), "known now");
        assert_eq!(log.end_offset_for_epoch(2), (2, 16));
        assert!(log.write_staged_epochs().unwrap());
        drop(log);
        assert_eq!(entries(&open(dir.path())), [(1, 0), (2, 8), (5, 16)]);
    }

    /// Sets `retention.bytes` so that exactly the `n` oldest segments are over it.
    fn retain_all_but_oldest(log: &mut Log, n: usize) {
        let sizes: Vec<u64> = log.segments.values().map(|s| s.size_bytes()).collect();
        let keep: u64 = sizes[n..].iter().sum();
        let c = LogConfig {
            retention_bytes: Some(keep),
            ..config()
        };
        log.set_config(c).unwrap();
    }

    /// Base offsets of the `{offset:020}.log` files in `dir`, ascending.
    fn log_files(dir: &Path) -> Vec<i64> {
        let mut v: Vec<i64> = fs::read_dir(dir)
            .unwrap()
            .filter_map(|e| {
                let name = e.unwrap().file_name().into_string().unwrap();
                parse_offset_file_name(&name, LOG_SUFFIX)
            })
            .collect();
        v.sort_unstable();
        v
    }

    /// Names of the files ending in `.deleted` in `dir`, sorted.
    fn deleted_files(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.ends_with(DELETED_SUFFIX))
            .collect();
        v.sort();
        v
    }

    fn epochs(log: &Log) -> Vec<(i32, i64)> {
        log.epoch_cache()
            .entries()
            .iter()
            .map(|e| (e.epoch, e.start_offset))
            .collect()
    }

    fn assert_out_of_range(log: &Log, offset: i64) {
        assert!(
            matches!(
                log.read(offset, 1 << 20, log.log_end_offset()),
                Err(LogError::OffsetOutOfRange { .. })
            ),
            "read at {offset} below the log start {}",
            log.log_start_offset()
        );
    }

    /// Retention removes the doomed segments from the log at once (segment listing, log
    /// start, reads) but only renames their files to `.deleted`; the files are gone after
    /// `delete_files`, which is what the replica manager runs off the lock.
    #[test]
    fn retention_renames_segments_to_deleted_until_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = filled_log(dir.path());
        let bases = log.segment_base_offsets();
        retain_all_but_oldest(&mut log, 2);
        // Producer snapshots below the new start (one per roll) go with the segments.
        let snapshots_below: Vec<i64> = fs::read_dir(dir.path())
            .unwrap()
            .filter_map(|e| {
                let name = e.unwrap().file_name().into_string().unwrap();
                parse_offset_file_name(&name, SNAPSHOT_SUFFIX)
            })
            .filter(|o| *o < bases[2])
            .collect();
        assert!(!snapshots_below.is_empty());
        let deleted = log.delete_old_segments(log.log_end_offset()).unwrap();

        assert_eq!(deleted.segment_count(), 2);
        assert_eq!(log.segment_base_offsets(), bases[2..].to_vec());
        assert_eq!(log.log_start_offset(), bases[2]);
        assert_eq!(log_files(dir.path()), bases[2..].to_vec());
        // The data files, the indexes written at each roll and the producer snapshots below
        // the new start wait as `.deleted`.
        let mut want: Vec<String> = bases[..2]
            .iter()
            .flat_map(|b| {
                [LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX]
                    .map(|s| format!("{b:020}{s}{DELETED_SUFFIX}"))
            })
            .chain(
                snapshots_below
                    .iter()
                    .map(|o| format!("{o:020}{SNAPSHOT_SUFFIX}{DELETED_SUFFIX}")),
            )
            .collect();
        want.sort();
        assert_eq!(deleted_files(dir.path()), want);
        let mut listed: Vec<String> = deleted
            .files()
            .iter()
            .map(|p| p.file_name().unwrap().to_str().unwrap().to_owned())
            .collect();
        listed.sort();
        assert_eq!(listed, want);
        for b in &bases[..2] {
            for s in [LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX] {
                assert!(!segment_file(dir.path(), *b, s).exists());
            }
        }

        // Reads below the new start are out of range; from it on they still work.
        for offset in [0, bases[1], bases[2] - 1] {
            assert_out_of_range(&log, offset);
        }
        let leo = log.log_end_offset();
        let mut next = bases[2];
        while next < leo {
            let r = log.read(next, 1 << 20, leo).unwrap();
            assert!(!r.records.is_empty(), "read at {next}");
            assert!(r.next_offset > next);
            next = r.next_offset;
        }
        assert_eq!(
            log.epoch_cache().earliest_entry().unwrap().start_offset,
            bases[2]
        );
        // The log keeps working: appends and another retention pass.
        log.append_as_leader(batch(), 3).unwrap();
        assert!(log.delete_old_segments(bases[2]).unwrap().is_empty());

        assert!(deleted.delete_files().is_empty());
        assert_eq!(deleted_files(dir.path()), Vec::<String>::new());
        let segments = log.segment_base_offsets();
        assert_eq!(log_files(dir.path()), segments);
        drop(log);
        let log = open(dir.path());
        assert_eq!(log.log_start_offset(), bases[2]);
        assert_eq!(log.segment_base_offsets(), segments);
    }

    /// A crash between retention's rename and the deletion (simulated by renaming by hand)
    /// leaves `.deleted` files: the next open deletes them, does not load them as segments,
    /// and starts the log at the first remaining segment. A `.deleted` file that is not one
    /// of the log's stays untouched.
    #[test]
    fn open_deletes_leftover_deleted_segment_files() {
        let dir = tempfile::tempdir().unwrap();
        let log = filled_log(dir.path());
        let bases = log.segment_base_offsets();
        let leo = log.log_end_offset();
        log.close().unwrap();
        for b in &bases[..2] {
            for s in [LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX] {
                let p = segment_file(dir.path(), *b, s);
                fs::rename(&p, super::super::segment::deleted_path(&p)).unwrap();
            }
        }
        // The producer snapshot at the second segment's base, below the new start.
        let snapshot = super::super::producer_state::snapshot_path(dir.path(), bases[1]);
        fs::rename(&snapshot, super::super::segment::deleted_path(&snapshot)).unwrap();
        let foreign = dir.path().join("notes.txt.deleted");
        fs::write(&foreign, b"not the log's").unwrap();
        assert_eq!(deleted_files(dir.path()).len(), 8);

        let log = open(dir.path());
        assert_eq!(
            deleted_files(dir.path()),
            vec!["notes.txt.deleted".to_owned()]
        );
        assert_eq!(log.segment_base_offsets(), bases[2..].to_vec());
        assert_eq!(log_files(dir.path()), bases[2..].to_vec());
        assert_eq!(log.log_start_offset(), bases[2]);
        assert_eq!(log.log_end_offset(), leo);
        assert_eq!(
            log.epoch_cache().earliest_entry().unwrap().start_offset,
            bases[2]
        );
        assert_out_of_range(&log, bases[2] - 1);
        assert!(!log.read(bases[2], 1 << 20, leo).unwrap().records.is_empty());
    }

    /// Retention rewrites the epoch checkpoint without fsync, so a crash may leave the
    /// checkpoint from before the retention (simulated by writing its old content back):
    /// the next open truncates the loaded cache to the log start, giving the same entries
    /// as the log had in memory.
    #[test]
    fn reopen_rebuilds_a_torn_epoch_checkpoint_from_the_batches() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = filled_log(dir.path());
        retain_all_but_oldest(&mut log, 2);
        let failures = log
            .delete_old_segments(log.log_end_offset())
            .unwrap()
            .delete_files();
        assert!(failures.is_empty(), "{failures:?}");
        let expected = epochs(&log);
        assert!(expected.len() > 1, "several epochs survive: {expected:?}");
        drop(log);
        let checkpoint = dir.path().join(LEADER_EPOCH_CHECKPOINT);
        for torn in [&b""[..], b"0\n3\n5 1", b"\xff\xfe garbage"] {
            fs::write(&checkpoint, torn).unwrap();
            assert!(LeaderEpochCache::open(dir.path()).is_err(), "{torn:?}");
            let log = open(dir.path());
            assert_eq!(epochs(&log), expected, "{torn:?}");
            drop(log);
            // Written back whole.
            let cache = LeaderEpochCache::open(dir.path()).unwrap();
            let on_disk: Vec<_> = cache
                .entries()
                .iter()
                .map(|e| (e.epoch, e.start_offset))
                .collect();
            assert_eq!(on_disk, expected);
        }
    }

    #[test]
    fn reopen_repairs_an_epoch_checkpoint_older_than_retention() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = filled_log(dir.path());
        let bases = log.segment_base_offsets();
        let checkpoint = dir.path().join(LEADER_EPOCH_CHECKPOINT);
        let before = fs::read(&checkpoint).unwrap();
        assert_eq!(epochs(&log)[0], (1, 0));
        retain_all_but_oldest(&mut log, 3);
        let deleted = log.delete_old_segments(log.log_end_offset()).unwrap();
        assert_eq!(deleted.segment_count(), 3);
        let start = log.log_start_offset();
        assert_eq!(start, bases[3]);
        let retained = epochs(&log);
        assert_eq!(retained[0].1, start);
        assert!(
            retained[0].0 > 1,
            "the first epochs' data is gone: {retained:?}"
        );
        // The rewrite did happen (only without fsync).
        assert_ne!(fs::read(&checkpoint).unwrap(), before);
        assert_eq!(
            LeaderEpochCache::open(dir.path()).unwrap().entries(),
            log.epoch_cache().entries()
        );

        drop(log);
        fs::write(&checkpoint, &before).unwrap();
        assert_eq!(
            LeaderEpochCache::open(dir.path())
                .unwrap()
                .earliest_entry()
                .unwrap()
                .start_offset,
            0
        );
        let log = open(dir.path());
        assert_eq!(log.log_start_offset(), start);
        assert_eq!(epochs(&log), retained);
        assert_eq!(
            log.epoch_cache().earliest_entry().unwrap().start_offset,
            start
        );
        // An epoch whose data is gone answers the log start, as before the crash.
        assert_eq!(log.end_offset_for_epoch(0), (0, start));
        // The repaired cache was written back.
        drop(log);
        assert_eq!(
            LeaderEpochCache::open(dir.path()).unwrap().entries()[0].start_offset,
            start
        );
    }

    /// With drop-behind at its smallest lag, a log written well past it reads back every
    /// batch byte for byte, from pages dropped from the page cache (read from disk) and from
    /// the cached tail alike, and again after a reopen; with one big segment and with
    /// segments smaller than a drop-behind step, whose old segments are finished.
    #[test]
    fn drop_cache_behind_loses_nothing() {
        drop_cache_behind_reads_back(1 << 30);
        drop_cache_behind_reads_back(3 << 20);
    }

    fn drop_cache_behind_reads_back(segment_bytes: u64) {
        let dir = tempfile::tempdir().unwrap();
        let c = LogConfig {
            segment_bytes,
            drop_cache_behind_bytes: Some(crate::log::cache_behind::MIN_LAG_BYTES),
            ..config()
        };
        let mut log = Log::open(
            dir.path(),
            c.clone(),
            Arc::new(ManualClock::new(1_000)),
            LogOpenOptions::default(),
        )
        .unwrap();
        let mut written = Vec::new();
        // Over 12 MiB in 64 KiB batches: several drop-behind steps of a single segment.
        for i in 0..208u8 {
            let mut b = RecordBatchBuilder::new(0);
            for r in 0..64 {
                b.append(1_000, None, Some(&[i ^ r; 1000]), &[]);
            }
            let bytes = b.build().into_bytes();
            log.append_as_leader(bytes, 1).unwrap();
            written.push(i);
        }
        assert!(log.size_bytes() > 12 << 20, "{}", log.size_bytes());
        // Blocks allocated ahead of the writer never change a file's size.
        for seg in log.segments.values() {
            let len = std::fs::metadata(seg.path()).unwrap().len();
            assert_eq!(len, seg.size_bytes(), "{}", seg.path().display());
        }
        if segment_bytes == 1 << 30 {
            assert_eq!(log.segment_count(), 1);
        } else {
            // Rolled segments far behind the log end were advised to their end (twice);
            // the active one still grows.
            assert!(log.segment_count() >= 4, "{}", log.segment_count());
            let first = log.segments.values().next().unwrap();
            assert!(first.drop_cache_behind_done());
            assert!(!log.active().drop_cache_behind_done());
        }
        let check = |log: &Log| {
            let leo = log.log_end_offset();
            let mut next = 0;
            let mut batches = 0;
            while next < leo {
                let r = log.read(next, 1, leo).unwrap();
                for batch in keel_record::BatchIter::new(r.records.clone()) {
                    let batch = batch.unwrap();
                    assert!(batch.is_crc_valid(), "batch {batches}");
                    let i = written[batches];
                    // Every record's value is the byte pattern it was written with.
                    let mut records = 0;
                    for (r, rec) in batch.records().enumerate() {
                        let value = rec.unwrap().value.unwrap();
                        assert_eq!(value.len(), 1000);
                        assert!(value.iter().all(|v| *v == i ^ r as u8), "batch {batches}");
                        records += 1;
                    }
                    assert_eq!(records, 64);
                    batches += 1;
                }
                next = r.next_offset;
            }
            assert_eq!(batches, written.len());
        };
        check(&log);
        log.close().unwrap();
        let log = Log::open(
            dir.path(),
            c,
            Arc::new(ManualClock::new(2_000)),
            LogOpenOptions::default(),
        )
        .unwrap();
        check(&log);
    }
}
