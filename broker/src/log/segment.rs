//! One segment of a partition log: `{base_offset:020}.log` holding whole batches back to back,
//! with its sparse `.index` and `.timeindex` (Kafka `LogSegment`).
//!
//! Invariants (checked with `debug_assert!` on every change): `size_bytes` is the file length
//! and the end of the last whole batch; batch offsets increase from `base_offset` on, with
//! no gaps as appended and with gaps once the log cleaner rewrote the segment (Kafka allows
//! the same: compaction keeps offsets), and `next_offset` is the end of the last batch (==
//! `base_offset` if empty);
//! relative offsets fit in u32 and positions in u32 (segments are < 4 GiB).

use std::fs::{self, File, OpenOptions};
use std::io::{IoSlice, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;

use super::cache_behind::CacheBehind;
use super::error::{LogError, LogResult, io_err};
use super::index::{OffsetIndex, TimeIndex};
use super::open_files::LazyFile;
use keel_record::{BatchHeader, HEADER_SIZE, MAX_LOG_END_OFFSET, NO_TIMESTAMP};

/// Suffix of segment data files.
pub const LOG_SUFFIX: &str = ".log";
/// Suffix of offset index files.
pub const INDEX_SUFFIX: &str = ".index";
/// Suffix of time index files.
pub const TIME_INDEX_SUFFIX: &str = ".timeindex";
/// Suffix appended to the files of a segment that retention removed from the log, until
/// they are deleted off the partition lock (Kafka `LogFileUtils.DELETED_FILE_SUFFIX`): e.g.
/// `00000000000000000000.log.deleted`. See [`Segment::rename_to_deleted`].
pub const DELETED_SUFFIX: &str = ".deleted";

/// Suffix of a segment file the log cleaner is writing (Kafka `LogFileUtils.CLEANED_FILE_SUFFIX`):
/// `{base:020}.log.cleaned`. Incomplete by definition: [`crate::log::Log::open`] deletes it.
pub const CLEANED_SUFFIX: &str = ".cleaned";
/// Suffix of a complete, fsynced cleaned segment about to replace `{base:020}.log` (Kafka
/// `LogFileUtils.SWAP_FILE_SUFFIX`): `{base:020}.log.swap`. [`crate::log::Log::open`]
/// completes the swap ([`complete_swap_file`]).
pub const SWAP_SUFFIX: &str = ".swap";

/// `<path><suffix>`.
fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// Finishes an interrupted swap found on open (Kafka `LogLoader`: `.swap` files are complete
/// and replace the segment they were cleaned from): deletes `{base}.index` and
/// `{base}.timeindex` (they describe the old file; the next open rebuilds them by a scan)
/// and renames `{base}.log.swap` over `{base}.log`. The caller fsyncs the directory.
pub fn complete_swap_file(dir: &Path, base_offset: i64) -> LogResult<()> {
    for suffix in [INDEX_SUFFIX, TIME_INDEX_SUFFIX] {
        remove_if_exists(&segment_file(dir, base_offset, suffix))?;
    }
    let target = segment_file(dir, base_offset, LOG_SUFFIX);
    let swap = with_suffix(&target, SWAP_SUFFIX);
    fs::rename(&swap, &target).map_err(io_err(&swap))
}

/// The offset after the last whole batch of `{base}.log.swap` (its headers read in order,
/// stopping at the first that does not parse or does not fit): the end of the range the swap
/// replaces on open. `base` for an empty file.
pub fn swap_file_end(dir: &Path, base_offset: i64) -> LogResult<i64> {
    let path = with_suffix(&segment_file(dir, base_offset, LOG_SUFFIX), SWAP_SUFFIX);
    let file = File::open(&path).map_err(io_err(&path))?;
    let len = file.metadata().map_err(io_err(&path))?.len();
    let mut end = base_offset;
    let mut pos = 0u64;
    let mut head = [0u8; HEADER_SIZE];
    // Each iteration moves past one batch: bounded by the file size.
    while pos + HEADER_SIZE as u64 <= len {
        file.read_exact_at(&mut head, pos).map_err(io_err(&path))?;
        let Ok(h) = BatchHeader::parse(&head, pos) else {
            break;
        };
        if pos + h.size_bytes() as u64 > len || h.base_offset < end {
            break;
        }
        end = h.next_offset();
        pos += h.size_bytes() as u64;
    }
    Ok(end)
}

/// Whether `name` is `{offset:020}{suffix}` + [`DELETED_SUFFIX`] for a segment, offset index
/// or time index `suffix`: a file of a segment that was removed from its log and still
/// waits for deletion (left over by a crash or a shutdown before the deletion ran).
pub fn is_deleted_segment_file_name(name: &str) -> bool {
    name.strip_suffix(DELETED_SUFFIX).is_some_and(|target| {
        [LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX]
            .iter()
            .any(|suffix| parse_offset_file_name(target, suffix).is_some())
    })
}

/// `<path>.deleted`.
pub fn deleted_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(DELETED_SUFFIX);
    PathBuf::from(s)
}

/// Recovery scans read the file in chunks of this size (bytes).
const SCAN_CHUNK_BYTES: usize = 4 << 20;

/// Path of `{base_offset:020}{suffix}` in `dir`.
pub fn segment_file(dir: &Path, base_offset: i64, suffix: &str) -> PathBuf {
    dir.join(format!("{base_offset:020}{suffix}"))
}

/// Parses the name of a file the log owns, `{offset:020}{suffix}` (segment, index, time
/// index, producer snapshot): exactly 20 ASCII digits, then `suffix`, naming an offset <=
/// [`MAX_LOG_END_OFFSET`]. Any other name (`0.log`, `+0000000000000000000.log`,
/// `-0000000000000000001.log`, 21 digits, ...) is not one of the log's files: `None`. Only a
/// canonical name maps back to the same path by [`segment_file`], so no stray file can
/// stand in for (and cause the deletion of) a real one.
pub fn parse_offset_file_name(name: &str, suffix: &str) -> Option<i64> {
    let stem = name.strip_suffix(suffix)?;
    if stem.len() != 20 || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let offset: i64 = stem.parse().ok()?;
    (offset <= MAX_LOG_END_OFFSET).then_some(offset)
}

/// What a scan of a segment file found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScanOutcome {
    /// Bytes cut off the end because they did not form a valid batch (0 if clean).
    pub truncated_bytes: u64,
}

/// One segment; see the module doc for its invariants.
#[derive(Debug)]
pub struct Segment {
    base_offset: i64,
    log_path: PathBuf,
    /// Opened on demand within the process's budget of open segment files
    /// ([`super::open_files`]); a handle is shared only with a flush or a cleaning pass
    /// running outside the partition lock ([`Segment::sync_handle`]).
    file: Arc<LazyFile>,
    size_bytes: u64,
    next_offset: i64,
    index: OffsetIndex,
    time_index: TimeIndex,
    /// Largest batch max timestamp in the segment, `NO_TIMESTAMP` if none.
    max_timestamp: i64,
    /// Max timestamp of the first batch (basis of `segment.ms` rolling, like Kafka's
    /// `rollingBasedTimestamp`), `None` if the segment is empty.
    first_batch_timestamp: Option<i64>,
    /// Clock reading when the segment was created or loaded (ms).
    created_ms: i64,
    bytes_since_index_entry: u64,
    /// The in-memory indexes differ from the files.
    index_dirty: bool,
    /// Page-cache drop-behind of this file (see [`CacheBehind`]).
    cache_behind: CacheBehind,
}

impl Segment {
    /// Creates an empty segment file (replacing a stale one with the same name).
    pub fn create(dir: &Path, base_offset: i64, now_ms: i64) -> LogResult<Segment> {
        let log_path = segment_file(dir, base_offset, LOG_SUFFIX);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&log_path)
            .map_err(io_err(&log_path))?;
        for suffix in [INDEX_SUFFIX, TIME_INDEX_SUFFIX] {
            remove_if_exists(&segment_file(dir, base_offset, suffix))?;
        }
        Ok(Segment {
            base_offset,
            log_path,
            file: LazyFile::new(file),
            size_bytes: 0,
            next_offset: base_offset,
            index: OffsetIndex::default(),
            time_index: TimeIndex::default(),
            max_timestamp: NO_TIMESTAMP,
            first_batch_timestamp: None,
            created_ms: now_ms,
            bytes_since_index_entry: 0,
            // Empty indexes and no index files (removed above): a reopen loads the same
            // empty indexes (`load_indexes` accepts missing ones for an empty segment), so
            // there is nothing to write until the first entry. Closing a broker with 100,000
            // never-written partitions wrote 200,000 empty index files (tmp + rename each),
            // 23.6-25.0 s of its 'logs closed' time.
            index_dirty: false,
            cache_behind: CacheBehind::default(),
        })
    }

    /// Creates `{base_offset:020}.log.cleaned` for the log cleaner to fill with
    /// [`Segment::append`] (Kafka `LogCleaner.createNewCleanedSegment`). `created_ms` is kept
    /// from the segment it replaces (the basis of time retention without timestamps).
    pub fn create_cleaned(dir: &Path, base_offset: i64, created_ms: i64) -> LogResult<Segment> {
        let final_path = segment_file(dir, base_offset, LOG_SUFFIX);
        let log_path = with_suffix(&final_path, CLEANED_SUFFIX);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&log_path)
            .map_err(io_err(&log_path))?;
        Ok(Segment {
            base_offset,
            log_path,
            file: LazyFile::new(file),
            size_bytes: 0,
            next_offset: base_offset,
            index: OffsetIndex::default(),
            time_index: TimeIndex::default(),
            max_timestamp: NO_TIMESTAMP,
            first_batch_timestamp: None,
            created_ms,
            bytes_since_index_entry: 0,
            index_dirty: true,
            cache_behind: CacheBehind::default(),
        })
    }

    /// Cleaner step 2: fdatasync the `.cleaned` file and rename it to `.log.swap`; from here
    /// a crash completes the swap on the next open. The caller fsyncs the directory.
    pub fn cleaned_to_swap(&mut self) -> LogResult<()> {
        self.handle()?.sync_data().map_err(io_err(&self.log_path))?;
        // Renamed below: a handle opened again must name the new path.
        self.file.close();
        let dir = self.dir();
        let swap = with_suffix(
            &segment_file(&dir, self.base_offset, LOG_SUFFIX),
            SWAP_SUFFIX,
        );
        fs::rename(&self.log_path, &swap).map_err(io_err(&self.log_path))?;
        self.log_path = swap;
        Ok(())
    }

    /// Cleaner step 3 ([`complete_swap_file`] for this segment): the `.swap` file becomes
    /// `{base}.log`, replacing the old segment's file (whose open handle, held by the old
    /// [`Segment`], keeps its data readable until dropped). The new indexes are written
    /// later (roll, close); a crash before that rebuilds them on open.
    pub fn complete_swap(&mut self) -> LogResult<()> {
        let dir = self.dir();
        self.file.close();
        complete_swap_file(&dir, self.base_offset)?;
        self.log_path = segment_file(&dir, self.base_offset, LOG_SUFFIX);
        self.index_dirty = true;
        self.seek_to_end()?;
        Ok(())
    }

    /// Deletes a `.cleaned` or `.swap` file that will not be installed.
    pub fn discard_cleaned(self) -> LogResult<()> {
        let path = self.log_path.clone();
        drop(self);
        remove_if_exists(&path)
    }

    fn dir(&self) -> PathBuf {
        self.log_path
            .parent()
            .unwrap_or(Path::new("."))
            .to_path_buf()
    }

    /// Opens an existing segment. With `recover`, every batch is read and its CRC checked,
    /// the indexes are rebuilt and an invalid tail is cut off (reported in the outcome).
    /// Without it, the index files are trusted if they pass validation (else rebuilt by the
    /// same full scan) and only the batches after the last index entry are read and checked.
    /// A batch whose length field exceeds `max_batch_bytes` (the log's `max.message.bytes`,
    /// which every append enforces) counts as corrupt: the scan never reads or buffers more
    /// than that for one batch. A batch whose base offset is not the previous batch's next
    /// offset counts as corrupt too (the base offset is outside the CRC) unless
    /// `allow_offset_gaps` (a log that may have been compacted, here or by the leader it
    /// copies): then only decreasing offsets do.
    pub fn open(
        dir: &Path,
        base_offset: i64,
        recover: bool,
        index_interval_bytes: u64,
        max_batch_bytes: usize,
        now_ms: i64,
        allow_offset_gaps: bool,
    ) -> LogResult<(Segment, ScanOutcome)> {
        let log_path = segment_file(dir, base_offset, LOG_SUFFIX);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&log_path)
            .map_err(io_err(&log_path))?;
        let size_bytes = file.metadata().map_err(io_err(&log_path))?.len();
        let mut seg = Segment {
            base_offset,
            log_path,
            file: LazyFile::new(file),
            size_bytes,
            next_offset: base_offset,
            index: OffsetIndex::default(),
            time_index: TimeIndex::default(),
            max_timestamp: NO_TIMESTAMP,
            first_batch_timestamp: None,
            created_ms: now_ms,
            bytes_since_index_entry: 0,
            index_dirty: false,
            cache_behind: CacheBehind::done_at(size_bytes),
        };
        let gaps = allow_offset_gaps;
        let outcome = if recover {
            seg.scan_from_start(index_interval_bytes, max_batch_bytes, gaps)?
        } else if seg.load_indexes(dir)? {
            seg.scan_tail(index_interval_bytes, max_batch_bytes, gaps)?
        } else {
            tracing::info!(segment = %seg.log_path.display(), "rebuilding missing or invalid index");
            seg.scan_from_start(index_interval_bytes, max_batch_bytes, gaps)?
        };
        if seg.size_bytes > 0 {
            let h = seg.read_header(0)?;
            seg.first_batch_timestamp = Some(h.max_timestamp);
        }
        seg.seek_to_end()?;
        seg.check_invariants();
        Ok((seg, outcome))
    }

    fn check_invariants(&self) {
        debug_assert!(self.next_offset >= self.base_offset);
        debug_assert!(self.size_bytes <= u32::MAX as u64 + 1);
        debug_assert!((self.next_offset - self.base_offset) <= u32::MAX as i64 + 1);
        debug_assert!(
            self.index
                .last()
                .is_none_or(|e| (e.position as u64) < self.size_bytes)
        );
        debug_assert_eq!(self.size_bytes == 0, self.next_offset == self.base_offset);
    }

    /// Loads and validates the index files; false if they must be rebuilt.
    fn load_indexes(&mut self, dir: &Path) -> LogResult<bool> {
        let idx_path = segment_file(dir, self.base_offset, INDEX_SUFFIX);
        let Some(index) = OffsetIndex::read(&idx_path, self.size_bytes)? else {
            return Ok(self.size_bytes == 0);
        };
        // The last entry must point at a batch with the offset it names.
        if let Some(last) = index.last() {
            match self.read_header(last.position as u64) {
                Ok(h) if h.base_offset == self.base_offset + last.relative_offset as i64 => {}
                _ => return Ok(false),
            }
        } else if self.size_bytes > 0 {
            return Ok(false);
        }
        let max_rel = index.last().map_or(0, |e| e.relative_offset as u64 + 1);
        let tidx_path = segment_file(dir, self.base_offset, TIME_INDEX_SUFFIX);
        let Some(time_index) = TimeIndex::read(&tidx_path, max_rel)? else {
            return Ok(false);
        };
        self.index = index;
        self.time_index = time_index;
        Ok(true)
    }

    /// Scans from the last index entry to the end (headers and CRCs) to find `next_offset`
    /// and the max timestamp. An invalid batch here means the file changed behind the index:
    /// fall back to a full recovery scan.
    fn scan_tail(
        &mut self,
        index_interval_bytes: u64,
        max_batch_bytes: usize,
        allow_offset_gaps: bool,
    ) -> LogResult<ScanOutcome> {
        let (mut pos, mut expected) = match self.index.last() {
            Some(e) => (
                e.position as u64,
                self.base_offset + e.relative_offset as i64,
            ),
            None => (0, self.base_offset),
        };
        self.max_timestamp = self
            .time_index
            .last()
            .map_or(NO_TIMESTAMP, |e| e.timestamp_ms);
        self.next_offset = expected;
        // Each iteration consumes at least one header: bounded by the file size.
        while pos < self.size_bytes {
            let h = match self.read_header(pos) {
                Ok(h) => h,
                Err(_) => {
                    return self.scan_from_start(
                        index_interval_bytes,
                        max_batch_bytes,
                        allow_offset_gaps,
                    );
                }
            };
            let misplaced = if allow_offset_gaps {
                h.base_offset < expected
            } else {
                h.base_offset != expected
            };
            if misplaced
                || h.size_bytes() > max_batch_bytes
                || pos + h.size_bytes() as u64 > self.size_bytes
            {
                return self.scan_from_start(
                    index_interval_bytes,
                    max_batch_bytes,
                    allow_offset_gaps,
                );
            }
            // The tail is at most one index interval plus one batch: check its CRCs too, so
            // a stale recovery point cannot hide a torn or garbage tail.
            let data = self.read_bytes(pos, h.size_bytes())?;
            if crc32c::crc32c(&data[21..]) != h.crc {
                return self.scan_from_start(
                    index_interval_bytes,
                    max_batch_bytes,
                    allow_offset_gaps,
                );
            }
            self.max_timestamp = self.max_timestamp.max(h.max_timestamp);
            expected = h.next_offset();
            pos += h.size_bytes() as u64;
        }
        self.next_offset = expected;
        self.bytes_since_index_entry =
            self.size_bytes - self.index.last().map_or(0, |e| e.position as u64);
        Ok(ScanOutcome { truncated_bytes: 0 })
    }

    /// Reads the whole file, rebuilding the indexes; stops at the first batch that is torn,
    /// not contiguous, longer than `max_batch_bytes`, or fails its CRC, and truncates the
    /// file there. The read buffer holds at most `max(SCAN_CHUNK_BYTES, max_batch_bytes)`.
    fn scan_from_start(
        &mut self,
        index_interval_bytes: u64,
        max_batch_bytes: usize,
        allow_offset_gaps: bool,
    ) -> LogResult<ScanOutcome> {
        self.index = OffsetIndex::default();
        self.time_index = TimeIndex::default();
        self.index_dirty = true;
        self.max_timestamp = NO_TIMESTAMP;
        self.bytes_since_index_entry = 0;
        let file_len = self.size_bytes;
        let mut buf: Vec<u8> = Vec::new();
        let mut buf_start: u64 = 0; // file position of buf[0]
        let mut pos: u64 = 0;
        let mut expected = self.base_offset;
        let mut reason: Option<String> = None;
        // Each iteration consumes one batch or stops: bounded by the file size.
        while pos < file_len {
            // Make sure the header is in the buffer.
            let rel = (pos - buf_start) as usize;
            if rel + HEADER_SIZE > buf.len() {
                let want = SCAN_CHUNK_BYTES.max(HEADER_SIZE);
                self.fill(&mut buf, &mut buf_start, pos, want, file_len)?;
            }
            let rel = (pos - buf_start) as usize;
            let h = match BatchHeader::parse(&buf[rel..], pos) {
                Ok(h) => h,
                Err(e) => {
                    reason = Some(e.to_string());
                    break;
                }
            };
            let size = h.size_bytes();
            if size > max_batch_bytes {
                // A corrupt length field: never buffer (or trust) more than a batch can be.
                reason = Some(format!(
                    "batch at byte {pos} has length {size} which exceeds the max batch size \
                     (max.message.bytes {max_batch_bytes})"
                ));
                break;
            }
            if pos + size as u64 > file_len {
                reason = Some(format!("batch at byte {pos} is torn"));
                break;
            }
            let misplaced = if allow_offset_gaps {
                h.base_offset < expected
            } else {
                h.base_offset != expected
            };
            if misplaced
                || h.last_offset() - self.base_offset > u32::MAX as i64
                || pos + size as u64 > u32::MAX as u64 + 1
            {
                reason = Some(format!(
                    "batch at byte {pos} has base offset {}, expected {expected}",
                    h.base_offset
                ));
                break;
            }
            if rel + size > buf.len() {
                self.fill(
                    &mut buf,
                    &mut buf_start,
                    pos,
                    SCAN_CHUNK_BYTES.max(size),
                    file_len,
                )?;
            }
            let rel = (pos - buf_start) as usize;
            if crc32c::crc32c(&buf[rel + 21..rel + size]) != h.crc {
                reason = Some(format!(
                    "CRC mismatch in batch at byte {pos} (offset {expected})"
                ));
                break;
            }
            self.index_batch(&h, pos, index_interval_bytes);
            expected = h.next_offset();
            pos += size as u64;
        }
        self.next_offset = expected;
        let truncated_bytes = file_len - pos;
        if truncated_bytes > 0 {
            tracing::warn!(
                segment = %self.log_path.display(),
                truncated_bytes,
                valid_bytes = pos,
                reason = reason.as_deref().unwrap_or(""),
                "truncating invalid tail of segment"
            );
            self.handle()?
                .set_len(pos)
                .map_err(io_err(&self.log_path))?;
        }
        self.size_bytes = pos;
        Ok(ScanOutcome { truncated_bytes })
    }

    /// Refills `buf` with up to `want` bytes of the file starting at `pos`.
    fn fill(
        &self,
        buf: &mut Vec<u8>,
        buf_start: &mut u64,
        pos: u64,
        want: usize,
        file_len: u64,
    ) -> LogResult<()> {
        let len = want.min((file_len - pos) as usize);
        buf.clear();
        buf.resize(len, 0);
        self.handle()?
            .read_exact_at(buf, pos)
            .map_err(io_err(&self.log_path))?;
        *buf_start = pos;
        Ok(())
    }

    /// Index bookkeeping for a batch that starts at `position` (Kafka adds an entry once
    /// `index.interval.bytes` accumulated; we also index the first batch).
    fn index_batch(&mut self, h: &BatchHeader, position: u64, index_interval_bytes: u64) {
        self.max_timestamp = self.max_timestamp.max(h.max_timestamp);
        if self.index.is_empty() || self.bytes_since_index_entry >= index_interval_bytes {
            let rel = (h.base_offset - self.base_offset) as u32;
            self.index.append(rel, position as u32);
            self.time_index.maybe_append(self.max_timestamp, rel);
            self.bytes_since_index_entry = 0;
            self.index_dirty = true;
        }
        self.bytes_since_index_entry += h.size_bytes() as u64;
    }

    /// The open data file (opened again if it was closed; [`super::open_files`]).
    fn handle(&self) -> LogResult<Arc<File>> {
        self.file
            .get(&self.log_path)
            .map_err(io_err(&self.log_path))
    }

    /// Puts the file cursor (used by appends) at `size_bytes`.
    fn seek_to_end(&mut self) -> LogResult<()> {
        (&*self.handle()?)
            .seek(SeekFrom::Start(self.size_bytes))
            .map_err(io_err(&self.log_path))?;
        Ok(())
    }

    /// Reads and parses the batch header at `position`.
    pub fn read_header(&self, position: u64) -> LogResult<BatchHeader> {
        let mut h = [0u8; HEADER_SIZE];
        if position + HEADER_SIZE as u64 > self.size_bytes {
            return Err(LogError::CorruptMessage(keel_record::CorruptBatch {
                position,
                base_offset: -1,
                reason: "header beyond segment end".into(),
                record_level: false,
            }));
        }
        self.handle()?
            .read_exact_at(&mut h, position)
            .map_err(io_err(&self.log_path))?;
        Ok(BatchHeader::parse(&h, position)?)
    }

    /// Appends one batch: `prefix` (if any) replaces the first 16 bytes of `batch` (the
    /// stamped base offset and leader epoch). `header` describes the batch as written. On
    /// failure the file is cut back, leaving the segment unchanged.
    pub fn append(
        &mut self,
        prefix: Option<&[u8; 16]>,
        batch: &[u8],
        header: &BatchHeader,
        index_interval_bytes: u64,
    ) -> LogResult<()> {
        debug_assert!(header.base_offset >= self.next_offset, "increasing offsets");
        debug_assert_eq!(header.size_bytes(), batch.len());
        let pos = self.size_bytes;
        // One writev at the file cursor (kept at `size_bytes`): the stamped prefix and the
        // untouched body go out in one syscall without copying the body.
        let file = self.handle()?;
        let result = match prefix {
            Some(p) => {
                write_all_vectored(&file, &mut [IoSlice::new(p), IoSlice::new(&batch[16..])])
            }
            None => write_all_vectored(&file, &mut [IoSlice::new(batch)]),
        };
        if let Err(e) = result {
            // Best effort: the error already says the disk is in trouble.
            let _ = file.set_len(pos);
            let _ = (&*file).seek(SeekFrom::Start(pos));
            return Err(io_err(&self.log_path)(e));
        }
        self.index_batch(header, pos, index_interval_bytes);
        if self.first_batch_timestamp.is_none() {
            self.first_batch_timestamp = Some(header.max_timestamp);
        }
        self.size_bytes += batch.len() as u64;
        self.next_offset = header.next_offset();
        self.check_invariants();
        Ok(())
    }

    /// Page-cache drop-behind ([`CacheBehind::advise`]): queues `fadvise(DONTNEED)` of the
    /// ranges due (to drop what lies more than `keep_cached` bytes before this file's end, and
    /// to start the write-back of what lies more than `keep_dirty`) for the background thread.
    ///
    /// `allocate` = `(max_ahead, limit)` for the active segment: also queues the allocation of
    /// the blocks ahead of the writer ([`CacheBehind::allocate_ahead`]).
    pub fn drop_cache_behind(
        &mut self,
        keep_cached: u64,
        keep_dirty: u64,
        step: u64,
        allocate: Option<(u64, u64)>,
    ) {
        use super::cache_behind::{Advice, in_background};
        let size = self.size_bytes;
        let ranges = self
            .cache_behind
            .advise(size, keep_cached, keep_dirty, step);
        let ahead = allocate.and_then(|(max_ahead, limit)| {
            self.cache_behind.allocate_ahead(size, max_ahead, limit)
        });
        if ranges.is_empty() && ahead.is_none() {
            return;
        }
        // Advice only: a file that cannot be opened now is skipped.
        let Ok(file) = self.handle() else {
            return;
        };
        if let Some(range) = ahead {
            in_background(&file, Advice::Allocate, range, &self.log_path);
        }
        for range in ranges {
            in_background(&file, Advice::DontNeed, range, &self.log_path);
        }
    }

    /// Gives back the blocks allocated past the end of the file ([`Advice::Allocate`]) when
    /// the segment stops being the active one (ext4 frees blocks past the size on a
    /// truncation to the same size); Kafka's `LogSegment.onBecomeInactiveSegment` trims a
    /// preallocated segment likewise. Best effort: a failure only keeps the blocks until the
    /// segment is deleted.
    ///
    /// Only a tail over [`MIN_RELEASE_BYTES`] is given back: freeing blocks on a file system
    /// mounted with `discard` waits for the device, and this runs under the partition lock
    /// in the roll. A roll by size leaves less than one batch allocated past the end (the
    /// allocation stops at `segment.bytes`), which then stays with the segment until it is
    /// deleted (the file's size does not include it, so nothing reads it). Measured in the
    /// replication bench at 100 MiB/s (perf sched): the cut of such a tail held a partition
    /// lock for 13 ms waiting for `blkdev_issue_discard`.
    ///
    /// [`Advice::Allocate`]: super::cache_behind::Advice::Allocate
    pub fn release_allocated_past_end(&mut self) {
        if self.cache_behind.allocated_past(self.size_bytes) <= MIN_RELEASE_BYTES {
            return;
        }
        if let Ok(file) = self.handle()
            && let Err(e) = file.set_len(self.size_bytes)
        {
            tracing::debug!(segment = %self.log_path.display(), error = %e, "cannot free the blocks past the end");
        }
    }

    /// Whether drop-behind has nothing left to advise in this file until it grows.
    pub fn drop_cache_behind_done(&self) -> bool {
        self.cache_behind.is_done(self.size_bytes)
    }

    /// Position and header of the first batch whose last offset is >= `offset`, if any.
    pub fn find_batch(&self, offset: i64) -> LogResult<Option<(u64, BatchHeader)>> {
        if offset >= self.next_offset {
            return Ok(None);
        }
        let rel = (offset.max(self.base_offset) - self.base_offset).min(u32::MAX as i64) as u32;
        let mut pos = self.index.lookup(rel).map_or(0, |e| e.position as u64);
        // Each iteration moves past one batch: bounded by the segment size.
        while pos < self.size_bytes {
            let h = self.read_header(pos)?;
            if h.last_offset() >= offset {
                return Ok(Some((pos, h)));
            }
            pos += h.size_bytes() as u64;
        }
        Ok(None)
    }

    /// Reads whole batches starting with the one containing `offset` (or the next one):
    /// at most `max_bytes` bytes except that the first batch is always returned whole;
    /// batches whose last offset is >= `upper_bound_exclusive` are left out. The bytes are
    /// read with one positioned read into a fresh buffer and trimmed to whole batches (the
    /// over-read is less than one batch). `None` if no batch qualifies.
    pub fn read(
        &self,
        offset: i64,
        max_bytes: usize,
        upper_bound_exclusive: i64,
    ) -> LogResult<Option<(Bytes, i64)>> {
        let Some((pos, first)) = self.find_batch(offset)? else {
            return Ok(None);
        };
        if first.last_offset() >= upper_bound_exclusive {
            return Ok(None);
        }
        let available = (self.size_bytes - pos) as usize;
        let len = available.min(max_bytes.max(first.size_bytes()));
        let buf = read_at(&*self.handle()?, pos, len).map_err(io_err(&self.log_path))?;
        // Keep whole batches below the upper bound.
        let mut end = first.size_bytes();
        let mut next_offset = first.next_offset();
        // Each iteration consumes one batch: bounded by len.
        while end + HEADER_SIZE <= len {
            let h = BatchHeader::parse(&buf[end..], pos + end as u64)?;
            if end + h.size_bytes() > len || h.last_offset() >= upper_bound_exclusive {
                break;
            }
            end += h.size_bytes();
            next_offset = h.next_offset();
        }
        let mut buf = Bytes::from(buf);
        buf.truncate(end);
        Ok(Some((buf, next_offset)))
    }

    /// Removes every batch whose last offset is >= `offset` (so a batch containing `offset`
    /// goes entirely, like Kafka's `LogSegment.truncateTo`). Returns the bytes removed.
    pub fn truncate_to(&mut self, offset: i64, index_interval_bytes: u64) -> LogResult<u64> {
        let Some((pos, h)) = self.find_batch(offset)? else {
            return Ok(0);
        };
        let removed = self.size_bytes - pos;
        self.handle()?
            .set_len(pos)
            .map_err(io_err(&self.log_path))?;
        self.size_bytes = pos;
        let rel = (h.base_offset - self.base_offset) as u32;
        self.index.truncate_to(rel);
        self.time_index.truncate_to(rel);
        self.index_dirty = true;
        if pos == 0 {
            self.first_batch_timestamp = None;
        }
        // Recompute next offset, max timestamp and the index cursor from the last entry. The
        // batches before `pos` were all accepted by this log: no size cap applies to them.
        self.scan_tail(index_interval_bytes, usize::MAX, true)?;
        self.seek_to_end()?;
        self.check_invariants();
        debug_assert!(self.next_offset <= h.base_offset);
        Ok(removed)
    }

    /// First offset >= whose batch has a max timestamp >= `timestamp_ms`, with the batch
    /// position, using the time index to skip ahead.
    pub fn find_timestamp(&self, timestamp_ms: i64) -> LogResult<Option<(u64, BatchHeader)>> {
        if self.max_timestamp < timestamp_ms {
            return Ok(None);
        }
        let start_rel = self
            .time_index
            .lookup_before(timestamp_ms)
            .map_or(0, |e| e.relative_offset);
        let mut pos = self
            .index
            .lookup(start_rel)
            .map_or(0, |e| e.position as u64);
        // Each iteration moves past one batch: bounded by the segment size.
        while pos < self.size_bytes {
            let h = self.read_header(pos)?;
            if h.max_timestamp >= timestamp_ms {
                return Ok(Some((pos, h)));
            }
            pos += h.size_bytes() as u64;
        }
        Ok(None)
    }

    /// Reads `len` bytes at `position`.
    pub fn read_bytes(&self, position: u64, len: usize) -> LogResult<Bytes> {
        let buf = read_at(&*self.handle()?, position, len).map_err(io_err(&self.log_path))?;
        Ok(Bytes::from(buf))
    }

    /// fdatasync of the data file.
    pub fn sync(&self) -> LogResult<()> {
        self.handle()?.sync_data().map_err(io_err(&self.log_path))
    }

    /// The file and its path, for an fdatasync or a read outside the partition lock (see
    /// [`super::partition_log::LogFlush`]); the handle stays valid while held. Errors: the
    /// file was closed and cannot be opened again.
    pub fn sync_handle(&self) -> LogResult<(Arc<File>, PathBuf)> {
        Ok((self.handle()?, self.log_path.clone()))
    }

    /// Whether `other` is this segment's file (the same [`LazyFile`], whether open or not).
    pub fn same_file(&self, other: &Arc<LazyFile>) -> bool {
        Arc::ptr_eq(&self.file, other)
    }

    /// This segment's file, for [`Segment::same_file`].
    pub fn file_identity(&self) -> Arc<LazyFile> {
        self.file.clone()
    }

    /// Writes the index files if they changed, without fsync (tmp + rename each, see
    /// [`OffsetIndex::write`]); the caller must fsync them (with the directory) before it
    /// counts them durable. Returns whether it wrote.
    ///
    /// Errors: `Io` naming the file (the indexes then stay dirty).
    pub fn write_indexes(&mut self) -> LogResult<bool> {
        if !self.index_dirty {
            return Ok(false);
        }
        let dir = self.log_path.parent().unwrap_or(Path::new("."));
        self.index
            .write(&segment_file(dir, self.base_offset, INDEX_SUFFIX))?;
        self.time_index
            .write(&segment_file(dir, self.base_offset, TIME_INDEX_SUFFIX))?;
        self.index_dirty = false;
        Ok(true)
    }

    /// Deletes the data and index files.
    pub fn delete(self) -> LogResult<()> {
        let dir = self
            .log_path
            .parent()
            .unwrap_or(Path::new("."))
            .to_path_buf();
        self.file.close();
        fs::remove_file(&self.log_path).map_err(io_err(&self.log_path))?;
        for suffix in [INDEX_SUFFIX, TIME_INDEX_SUFFIX] {
            remove_if_exists(&segment_file(&dir, self.base_offset, suffix))?;
        }
        Ok(())
    }

    /// Detaches the segment from the file system's view of the log cheaply, for retention
    /// under the partition lock (Kafka `LocalLog.deleteSegmentFiles`, whose renames happen
    /// under `UnifiedLog.lock` while the deletion is scheduled for later): closes the file
    /// and renames `{base:020}.log`, `.index` and `.timeindex` to `<name>.deleted` (index
    /// files that were never written are skipped). Nothing is fsynced and nothing is
    /// unlinked: unlinking a large file and fsyncs can wait for the file system's journal.
    /// Returns the `.deleted` paths; the caller deletes them later, off the lock
    /// ([`remove_if_exists`]). After a crash before that, [`crate::log::Log::open`] deletes
    /// leftover `.deleted` files, and a rename that did not reach the disk leaves the
    /// segment in the log (retention deletes it again).
    ///
    /// The data file goes first: once it is renamed the segment is no longer part of the
    /// log. An error renaming it leaves the files unchanged and returns the segment, so the
    /// caller can keep it; an error renaming an index file afterwards is logged and the stale
    /// index is left in place (a later segment with this base offset replaces it).
    pub fn rename_to_deleted(self) -> Result<Vec<PathBuf>, Box<(Segment, LogError)>> {
        let dir = self
            .log_path
            .parent()
            .unwrap_or(Path::new("."))
            .to_path_buf();
        let log_target = deleted_path(&self.log_path);
        if let Err(e) = fs::rename(&self.log_path, &log_target) {
            let err = io_err(&self.log_path)(e);
            return Err(Box::new((self, err)));
        }
        let base_offset = self.base_offset;
        drop(self);
        let mut renamed = vec![log_target];
        for suffix in [INDEX_SUFFIX, TIME_INDEX_SUFFIX] {
            let path = segment_file(&dir, base_offset, suffix);
            let target = deleted_path(&path);
            match fs::rename(&path, &target) {
                Ok(()) => renamed.push(target),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => tracing::warn!(
                    file = %path.display(),
                    "could not rename the index of a deleted segment (left in place): {e}"
                ),
            }
        }
        Ok(renamed)
    }

    /// First offset of the segment.
    pub fn base_offset(&self) -> i64 {
        self.base_offset
    }
    /// Offset after the last batch.
    pub fn next_offset(&self) -> i64 {
        self.next_offset
    }
    /// Bytes of whole batches.
    pub fn size_bytes(&self) -> u64 {
        self.size_bytes
    }
    /// Largest batch max timestamp (ms), `NO_TIMESTAMP` if none.
    pub fn max_timestamp(&self) -> i64 {
        self.max_timestamp
    }
    /// Max timestamp of the first batch, if any.
    pub fn first_batch_timestamp(&self) -> Option<i64> {
        self.first_batch_timestamp
    }
    /// Clock reading at creation or load (ms).
    pub fn created_ms(&self) -> i64 {
        self.created_ms
    }
    /// Path of the data file.
    pub fn path(&self) -> &Path {
        &self.log_path
    }
}

/// `writev` until every byte of `bufs` is written (each iteration writes at least one byte).
fn write_all_vectored(mut file: &File, mut bufs: &mut [IoSlice<'_>]) -> std::io::Result<()> {
    while !bufs.is_empty() {
        let n = file.write_vectored(bufs)?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        IoSlice::advance_slices(&mut bufs, n);
    }
    Ok(())
}

/// Bytes freed per step by [`delete_in_steps`].
pub const DELETE_STEP_BYTES: u64 = 4 << 20;

/// Longest pause between two steps of [`delete_in_steps`].
pub const MAX_DELETE_PAUSE: std::time::Duration = std::time::Duration::from_millis(50);

/// The lengths a file of `len` bytes is cut to, one per step, before its unlink: each
/// `step` bytes shorter, down to the last length at or below `step` (the unlink frees that
/// rest). Empty when `len <= step`. `step` must be > 0.
pub fn shrink_steps(len: u64, step: u64) -> impl Iterator<Item = u64> {
    assert!(step > 0, "a delete step frees at least one byte");
    let steps = len.saturating_sub(1) / step;
    (1..=steps).map(move |i| len - i * step)
}

/// Deletes a file that may be large without holding the file system for the whole of it
/// (what RocksDB's `DeleteScheduler` does with `bytes_max_delete_chunk`): cuts it from the
/// end [`DELETE_STEP_BYTES`] at a time ([`shrink_steps`]), pausing after each cut as long as
/// the cut took (at most [`MAX_DELETE_PAUSE`]), then unlinks it. A missing file counts as
/// deleted.
///
/// Why: freeing blocks on ext4 locks the block group's bitmap and, on a file system mounted
/// with `discard`, waits for the device to discard them. Measured in the replication bench
/// at 100 MiB/s (perf sched, all three brokers deleting a retired 128 MiB segment at once):
/// the three unlinks ran 480 ms, meanwhile the drop-behind thread's `fallocate` on an
/// active segment waited for a block bitmap while holding that segment's inode lock, and
/// the append's `writev` waited 376 ms for the inode lock: one all-partition produce stall
/// of 200-450 ms per retired segment. In steps, a writer waits for one step at most, and
/// the pause bounds deletion to half the device's discard rate only where discards are
/// slow.
///
/// Blocking (sleeps between steps): call it off the async runtime, outside any lock.
///
/// Errors: `Io` naming the file (its open, a cut or the unlink failed); the file then
/// stays, possibly shorter (it is a `.deleted` file nobody reads).
pub fn delete_in_steps(path: &Path) -> LogResult<()> {
    let file = match fs::OpenOptions::new().write(true).open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_err(path)(e)),
    };
    let len = file.metadata().map_err(io_err(path))?.len();
    for cut in shrink_steps(len, DELETE_STEP_BYTES) {
        let started = std::time::Instant::now();
        file.set_len(cut).map_err(io_err(path))?;
        std::thread::sleep(started.elapsed().min(MAX_DELETE_PAUSE));
    }
    drop(file);
    remove_if_exists(path)
}

/// Smallest tail of blocks allocated past a segment's end that a roll gives back (see
/// [`Segment::release_allocated_past_end`]): 4 MiB, four times Kafka's default
/// `max.message.bytes`, so a roll by size (which leaves less than one batch) never pays a
/// discard under the partition lock, while a roll by time or offsets with up to the
/// drop-behind lag allocated ahead still returns its space.
pub const MIN_RELEASE_BYTES: u64 = 4 << 20;

/// Removes a file, ignoring "not found".
pub fn remove_if_exists(path: &Path) -> LogResult<()> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_err(path)(e)),
    }
}

/// Reads exactly `len` bytes of `file` at `position` into a new buffer, without filling the
/// buffer with zeros first (`pread` into the vector's spare capacity): on the Fetch path
/// this buffer is the page-cache copy of every byte a follower or consumer reads, and the
/// fill was one more pass over it. Errors: the file's read error, or `UnexpectedEof` when
/// the file ends before `len` bytes.
fn read_at(file: &File, position: u64, len: usize) -> std::io::Result<Vec<u8>> {
    let mut buf = Vec::with_capacity(len);
    // Each iteration reads at least one byte or ends the loop: bounded by `len`.
    while buf.len() < len {
        let at = position + buf.len() as u64;
        match rustix::io::pread(file, rustix::buffer::spare_capacity(&mut buf), at) {
            Ok(0) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!("the file ends before byte {at} (read at {position}, {len} bytes)"),
                ));
            }
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    // The allocator may give more capacity than asked; a read into it goes past `len`.
    buf.truncate(len);
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_at_reads_exactly_the_range_or_names_the_end() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let bytes: Vec<u8> = (0..=255u8).cycle().take(100_000).collect();
        std::fs::write(&path, &bytes).unwrap();
        let f = File::open(&path).unwrap();
        assert_eq!(read_at(&f, 0, 100_000).unwrap(), bytes);
        assert_eq!(read_at(&f, 1_000, 70_000).unwrap(), bytes[1_000..71_000]);
        assert_eq!(read_at(&f, 99_999, 1).unwrap(), [bytes[99_999]]);
        assert!(read_at(&f, 5, 0).unwrap().is_empty());
        let e = read_at(&f, 99_000, 2_000).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof);
        assert!(e.to_string().contains("before byte 100000"), "{e}");
    }

    #[test]
    fn shrink_steps_cut_a_step_at_a_time_and_leave_the_rest_to_the_unlink() {
        let steps = |len: u64| shrink_steps(len, 4).collect::<Vec<_>>();
        assert!(steps(0).is_empty());
        assert!(steps(4).is_empty());
        assert_eq!(steps(5), vec![1]);
        assert_eq!(steps(8), vec![4]);
        assert_eq!(steps(13), vec![9, 5, 1]);
        // A 128 MiB segment: 31 cuts, the last leaves 4 MiB for the unlink.
        let cuts: Vec<u64> = shrink_steps(128 << 20, DELETE_STEP_BYTES).collect();
        assert_eq!(cuts.len(), 31);
        assert_eq!(cuts.last(), Some(&DELETE_STEP_BYTES));
        assert!(cuts.windows(2).all(|w| w[0] - w[1] == DELETE_STEP_BYTES));
    }

    #[test]
    fn delete_in_steps_removes_the_file_and_ignores_a_missing_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000000000000000000.log.deleted");
        let f = fs::File::create(&path).unwrap();
        f.set_len(3 * DELETE_STEP_BYTES + 17).unwrap();
        drop(f);
        delete_in_steps(&path).unwrap();
        assert!(!path.exists());
        delete_in_steps(&path).unwrap();
    }

    #[test]
    fn only_canonical_offset_file_names_parse() {
        let ok = format!("{:020}.log", 42);
        assert_eq!(parse_offset_file_name(&ok, LOG_SUFFIX), Some(42));
        assert_eq!(parse_offset_file_name(&ok, INDEX_SUFFIX), None);
        let max = format!("{MAX_LOG_END_OFFSET:020}.index");
        assert_eq!(
            parse_offset_file_name(&max, INDEX_SUFFIX),
            Some(MAX_LOG_END_OFFSET)
        );
        for bad in [
            "0.log",
            "+0000000000000000000.log",
            "-0000000000000000001.log",
            " 0000000000000000000.log",
            "000000000000000000000.log",
            "0000000000000000000.log",
            "09223372036854775807.log",
            "99999999999999999999.log",
            "0000000000000000000\u{0663}.log",
            ".log",
            "00000000000000000000.log.log",
        ] {
            assert_eq!(parse_offset_file_name(bad, LOG_SUFFIX), None, "{bad}");
        }
        // `.timeindex` is not an `.index`.
        let t = format!("{:020}.timeindex", 0);
        assert_eq!(parse_offset_file_name(&t, INDEX_SUFFIX), None);
        assert_eq!(parse_offset_file_name(&t, TIME_INDEX_SUFFIX), Some(0));
    }
}
