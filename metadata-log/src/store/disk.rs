//! `SegmentDisk`: the Raft log of `__cluster_metadata` in Keel's own segment files, the default
//! engine (`metadata_log_engine = "segments"`; the other is [`super::sled_disk`]).
//!
//! It owns the directory `raft/` of a controller's `metadata_log_dir`: the entries (opaque
//! bytes keyed by Raft index), a few named values (the vote, the committed log id, the last
//! purged log id) and the purge point. `log_store.rs` gives these bytes their meaning.
//!
//! ## Why Keel's own files are the default, not sled (DESIGN §1 pinned sled 0.34)
//! DESIGN §1 allows changing a pinned choice with a measured reason; this is it. Under the
//! controller bench's target load, sled's thread pool was 25% of the active controller's CPU
//! (13% condition-variable wake-ups: every flush spawns twice and each spawn wakes all 7 idle
//! pool threads; 9% its own log write). A Raft log is append, fsync, cut the tail, drop the
//! head: a key-value engine buys nothing here. A prototype of this design measured ~30% less
//! CPU per write on followers and ~15% on the leader (interleaved A/B, session 7 notes).
//! Measured again with [`super::sled_disk`] (#24: flush on a blocking thread, lazy purges),
//! sled came out ahead under the quorum bench's load (README "Benchmarks"); the likely cost
//! here is `meta`, rewritten (temporary file, rename, three syncs) whenever the committed
//! offset moved. These files stay the default for their recovery reports and offline reads.
//!
//! ## Layout of `raft/`
//! The directory is held with an exclusive lock (`flock` on its descriptor,
//! [`crate::data_dir::try_lock_dir`]) while open, so two processes never share a log.
//! - `<base>.log`: segments, named by the index of their first entry (20 digits). The last
//!   one is *active*: appends go there. Each holds one contiguous run of indexes.
//! - `meta`: the purge point and the named values; replaced atomically (`meta.tmp`, fsync,
//!   rename, fsync of the directory).
//!
//! Segment format (integers little-endian):
//!
//! ```text
//! header (32 bytes): "KEELRLOG" | version u32 | crc32c u32 | base u64 | prev_end u64
//! record:            len u32 | crc32c u32 | index u64 | payload (len bytes)
//!                    (bit 31 of len: first record of a batch)
//! ```
//!
//! The header crc covers the header with the crc field zeroed. `prev_end` is one past the
//! last index of the previous segment when this one was created (0: none), so a lost middle
//! segment is detected. A record's crc covers `len`, `index` and the payload.
//!
//! ## Durability and recovery
//! Writes go to the page cache; [`SegmentDisk::flush`] makes every earlier write durable
//! (`fdatasync` of the written segments, then the `meta` file, then the directory) and the
//! caller reports a write done only after it (DESIGN §1: before the `LogFlushed` callback).
//! An fsync that fails poisons the store: every later call fails (the kernel may have
//! dropped the unsynced pages, so a retry could report lost data as durable).
//!
//! - Cutting the tail ([`remove_from`](SegmentDisk::remove_from)) first deletes whole later
//!   segments and syncs the directory, then shortens the segment holding the cut. So a crash
//!   never brings back a stale segment after a shorter one.
//! - Dropping the head ([`remove_through`](SegmentDisk::remove_through)) records the purge
//!   point in `meta`; whole segments below it are deleted only after that is durable. Entries
//!   at or below the purge point that are still in a file are ignored on open.
//! - On open, the active segment is scanned and cut at its first incomplete or corrupt record
//!   when that is a torn tail: a write that never fully reached the disk. Every batch is
//!   flushed before the next one is written, so only the last batch can be torn; the first
//!   record of each batch is flagged, and an intact batch start after the bad record proves
//!   the damage is to data that was on disk. That, any bad record in an older segment, a bad
//!   header, an out-of-order index or a missing segment is refused with an error naming the
//!   file and byte offset: nothing is dropped silently.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::ops::Bound;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

/// Default size at which a new segment is started, bytes (one batch may overshoot it).
pub const DEFAULT_SEGMENT_BYTES: u64 = 16 << 20;
pub use super::engine_files::MAX_ENTRY_BYTES;

const SEGMENT_MAGIC: &[u8; 8] = b"KEELRLOG";
const META_MAGIC: &[u8; 8] = b"KEELMETA";
const FORMAT_VERSION: u32 = 1;
pub(super) const SEGMENT_HEADER_BYTES: u64 = 32;
const RECORD_HEADER_BYTES: usize = 16;
pub(super) const META_FILE: &str = super::engine_files::SEGMENT_META_FILE;
const META_TMP_FILE: &str = "meta.tmp";
const SEGMENT_SUFFIX: &str = ".log";

/// The Raft log in segment files (`metadata_log_engine = "segments"`). Cheap to clone: clones share one open log (reads may run from
/// any clone while one writer appends).
#[derive(Clone)]
pub struct SegmentDisk {
    inner: Arc<Mutex<Inner>>,
    /// Serializes [`SegmentDisk::flush`] calls, so `meta` is never written twice at once and
    /// an older copy never replaces a newer one.
    flush_serial: Arc<tokio::sync::Mutex<()>>,
}

impl std::fmt::Debug for SegmentDisk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        f.debug_struct("SegmentDisk")
            .field("dir", &g.dir)
            .field("entries", &g.entries.len())
            .field("segments", &g.segments.len())
            .finish()
    }
}

/// The durable part of `meta`.
#[derive(Debug, Default, Clone, serde::Serialize, serde::Deserialize)]
pub(super) struct Meta {
    /// Entries with index <= this are gone (ignored when still found in a segment).
    pub(super) purged_through: Option<u64>,
    /// Named values of the caller (vote, committed, ...).
    pub(super) values: BTreeMap<String, Vec<u8>>,
}

/// Where an entry's record is.
#[derive(Debug, Clone, Copy)]
struct Pos {
    /// Base (first index) of the segment holding it.
    segment: u64,
    /// Byte offset of the record header in the segment file.
    offset: u64,
    /// Payload bytes.
    len: u32,
}

impl Pos {
    fn end(&self) -> u64 {
        self.offset + RECORD_HEADER_BYTES as u64 + u64::from(self.len)
    }
}

#[derive(Debug)]
struct Segment {
    path: PathBuf,
    file: Arc<File>,
    /// Bytes written (header included); the next record goes here.
    len: u64,
    /// Index of its last record (`None`: header only). Records are `base..=last`, contiguous.
    last: Option<u64>,
}

#[derive(Debug)]
struct Inner {
    dir: PathBuf,
    /// A new segment starts once the active one holds at least this many bytes.
    segment_bytes: u64,
    /// Segments by base index. Invariant: for consecutive segments `a < b`, `a.last < b`
    /// (runs never overlap); every segment's `len >= SEGMENT_HEADER_BYTES`.
    segments: BTreeMap<u64, Segment>,
    /// Every live entry (index > `meta.purged_through`) by index. Invariant: each lies in
    /// the segment named by its `Pos` (`base <= index <= last`).
    entries: BTreeMap<u64, Pos>,
    meta: Meta,
    /// `meta` changed in a way the next flush must make durable.
    meta_dirty: bool,
    /// Segment files written since the last flush.
    unsynced: Vec<(Arc<File>, PathBuf)>,
    /// A segment file was created since the last flush (the directory needs an fsync).
    dir_dirty: bool,
    /// Segments wholly at or below the purge point, deleted once `meta` is durable.
    doomed: Vec<PathBuf>,
    /// Set when an fsync failed; every later call fails with it.
    failed: Option<String>,
    /// The `raft/` directory, held with an exclusive lock while open.
    _lock: File,
}

impl SegmentDisk {
    /// Opens (creating if needed) the log in `dir` with [`DEFAULT_SEGMENT_BYTES`].
    ///
    /// Errors: see [`open_with`](Self::open_with).
    pub fn open(dir: &Path) -> io::Result<Self> {
        Self::open_with(dir, DEFAULT_SEGMENT_BYTES)
    }

    /// Opens (creating if needed) the log in `dir`, recovering it: a torn tail of the
    /// active segment is cut off (and logged at WARN), fully purged segments are deleted.
    ///
    /// Errors: the directory cannot be created or read; another process holds it
    /// (`WouldBlock`); it holds a sled database of an earlier Keel; a segment or `meta` is
    /// corrupt other than at the tail (`InvalidData`, naming the file and byte offset). Every
    /// error message names the directory or file.
    /// `segment_bytes`: a new segment starts once the active one holds at least this many
    /// bytes (one batch may overshoot it).
    pub fn open_with(dir: &Path, segment_bytes: u64) -> io::Result<Self> {
        Self::open_inner(dir, segment_bytes).map_err(|e| {
            let shown = dir.display().to_string();
            if e.to_string().contains(&shown) {
                e
            } else {
                io::Error::new(e.kind(), format!("{shown}: {e}"))
            }
        })
    }

    fn open_inner(dir: &Path, segment_bytes: u64) -> io::Result<Self> {
        fs::create_dir_all(dir)?;
        refuse_sled(dir)?;
        // The directory itself is locked (flock on its descriptor): unlike a lock file, it
        // cannot be deleted from under a running controller.
        let lock = super::engine_files::lock_log_dir(dir)?;
        match fs::remove_file(dir.join(META_TMP_FILE)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        let meta = read_meta(&dir.join(META_FILE))?;
        let mut inner = Inner {
            dir: dir.to_path_buf(),
            segment_bytes,
            segments: BTreeMap::new(),
            entries: BTreeMap::new(),
            meta,
            meta_dirty: false,
            unsynced: Vec::new(),
            dir_dirty: false,
            doomed: Vec::new(),
            failed: None,
            _lock: lock,
        };
        inner.recover()?;
        inner.check_invariants();
        Ok(Self {
            inner: Arc::new(Mutex::new(inner)),
            flush_serial: Arc::new(tokio::sync::Mutex::new(())),
        })
    }

    fn lock(&self) -> io::Result<MutexGuard<'_, Inner>> {
        let g = self
            .inner
            .lock()
            .map_err(|_| io::Error::other("Raft log lock poisoned by a panic"))?;
        match &g.failed {
            Some(e) => Err(io::Error::other(format!(
                "an earlier fsync of the Raft log in {} failed ({e}); restart the controller",
                g.dir.display()
            ))),
            None => Ok(g),
        }
    }

    /// Appends entries `(index, bytes)`, which must be contiguous and ascending. An index at
    /// or below the last stored one first cuts the log there (as [`remove_from`]); an index
    /// past the end leaves a gap (a new segment starts); entries at or below the purge point
    /// are skipped (a snapshot holds them). Not durable until [`flush`](Self::flush).
    ///
    /// Errors: indexes not contiguous, or an entry larger than
    /// [`MAX_ENTRY_BYTES`] (`InvalidInput`, nothing written); I/O errors (nothing visible).
    ///
    /// [`remove_from`]: Self::remove_from
    pub fn put_entries(&self, entries: impl IntoIterator<Item = (u64, Vec<u8>)>) -> io::Result<()> {
        let mut g = self.lock()?;
        g.append(entries.into_iter())
    }

    /// Entries with index in `range`, in index order. At most `max` entries are returned.
    ///
    /// Errors: I/O, or a record that no longer matches its crc (`InvalidData`).
    pub fn entries(
        &self,
        range: (Bound<u64>, Bound<u64>),
        max: usize,
    ) -> io::Result<Vec<(u64, Vec<u8>)>> {
        let g = self.lock()?;
        let positions: Vec<(u64, Pos)> = g
            .entries
            .range(range)
            .take(max)
            .map(|(&i, &p)| (i, p))
            .collect();
        g.read(&positions)
    }

    /// The entry with the highest index.
    pub fn last_entry(&self) -> io::Result<Option<(u64, Vec<u8>)>> {
        let g = self.lock()?;
        match g.entries.last_key_value() {
            Some((&i, &p)) => Ok(g.read(&[(i, p)])?.pop()),
            None => Ok(None),
        }
    }

    /// Removes every entry with index >= `from`. Whole segments are deleted (and the
    /// directory synced) at once; the cut of the segment holding `from` is durable after
    /// `flush`.
    pub fn remove_from(&self, from: u64) -> io::Result<()> {
        self.lock()?.truncate_from(from)
    }

    /// Removes every entry with index <= `through` (the purge point only moves forward).
    /// Durable after `flush`; segments wholly below it are deleted by that flush.
    pub fn remove_through(&self, through: u64) -> io::Result<()> {
        self.lock()?.purge_through(through);
        Ok(())
    }

    /// Stores a named value, durable after the next [`flush`](Self::flush).
    pub fn put_meta(&self, key: &str, value: &[u8]) -> io::Result<()> {
        let mut g = self.lock()?;
        g.meta.values.insert(key.to_owned(), value.to_vec());
        g.meta_dirty = true;
        Ok(())
    }

    /// Reads a named value.
    pub fn get_meta(&self, key: &str) -> io::Result<Option<Vec<u8>>> {
        Ok(self.lock()?.meta.values.get(key).cloned())
    }

    /// Makes every earlier write durable: `fdatasync` of the written segments, then `meta`
    /// (when changed) and the directory, on a blocking thread. Returns after the data is on
    /// disk; then deletes segments wholly below the purge point.
    ///
    /// Errors: the first fsync, write or rename that failed; the store is then poisoned.
    pub async fn flush(&self) -> io::Result<()> {
        let _serial = self.flush_serial.lock().await;
        let job = self.lock()?.take_flush_job()?;
        if job.is_empty() {
            return Ok(());
        }
        let res = tokio::task::spawn_blocking(move || job.run())
            .await
            .unwrap_or_else(|e| Err(io::Error::other(format!("flush task failed: {e}"))));
        if let Err(e) = &res
            && let Ok(mut g) = self.inner.lock()
        {
            g.failed = Some(e.to_string());
        }
        res
    }
}

/// The I/O of one flush, taken from [`Inner`] under its lock and run without it.
struct FlushJob {
    dir: PathBuf,
    files: Vec<(Arc<File>, PathBuf)>,
    meta: Option<Vec<u8>>,
    sync_dir: bool,
    doomed: Vec<PathBuf>,
}

impl FlushJob {
    fn is_empty(&self) -> bool {
        self.files.is_empty() && self.meta.is_none() && !self.sync_dir && self.doomed.is_empty()
    }

    fn run(self) -> io::Result<()> {
        for (f, path) in &self.files {
            f.sync_data().map_err(|e| with_path(e, path))?;
        }
        if let Some(bytes) = &self.meta {
            let tmp = self.dir.join(META_TMP_FILE);
            let on_tmp = |e| with_path(e, &tmp);
            let mut f = File::create(&tmp).map_err(on_tmp)?;
            f.write_all(bytes).map_err(on_tmp)?;
            f.sync_all().map_err(on_tmp)?;
            fs::rename(&tmp, self.dir.join(META_FILE)).map_err(on_tmp)?;
        }
        if self.sync_dir || self.meta.is_some() {
            sync_dir(&self.dir).map_err(|e| with_path(e, &self.dir))?;
        }
        // The purge point is durable: the segments below it may go. A failed delete loses
        // nothing (the next open ignores and deletes them).
        for path in &self.doomed {
            if let Err(e) = fs::remove_file(path)
                && e.kind() != io::ErrorKind::NotFound
            {
                tracing::warn!(path = %path.display(), error = %e, "cannot delete a purged Raft log segment");
            }
        }
        Ok(())
    }
}

impl Inner {
    /// Debug-build check of the invariants stated on the fields.
    fn check_invariants(&self) {
        if cfg!(debug_assertions) {
            let mut prev_last: Option<u64> = None;
            for (&base, seg) in &self.segments {
                debug_assert!(seg.len >= SEGMENT_HEADER_BYTES);
                debug_assert!(
                    prev_last.is_none_or(|l| l < base),
                    "segments overlap at {base}"
                );
                debug_assert!(seg.last.is_none_or(|l| l >= base));
                prev_last = seg.last.or(prev_last);
            }
            if let (Some((&first, _)), Some(p)) =
                (self.entries.first_key_value(), self.meta.purged_through)
            {
                debug_assert!(first > p, "entry {first} at or below the purge point {p}");
            }
            for (&i, p) in self
                .entries
                .iter()
                .rev()
                .take(1)
                .chain(self.entries.iter().take(1))
            {
                let seg = &self.segments[&p.segment];
                debug_assert!(p.segment <= i && seg.last.is_some_and(|l| i <= l));
                debug_assert!(p.end() <= seg.len);
            }
        }
    }

    fn active(&self) -> Option<(u64, &Segment)> {
        self.segments.last_key_value().map(|(&b, s)| (b, s))
    }

    /// The highest index of any record in the files (purged ones included).
    fn last_written(&self) -> Option<u64> {
        self.segments.values().rev().find_map(|s| s.last)
    }

    fn append(&mut self, entries: impl Iterator<Item = (u64, Vec<u8>)>) -> io::Result<()> {
        // Entries at or below the purge point are already in a snapshot: skipped (openraft
        // never appends them in a run; its storage suite does, after moving the purge point
        // to the state machine's applied index).
        let purged = self.meta.purged_through;
        let mut entries = entries.skip_while(|(i, _)| purged.is_some_and(|p| *i <= p));
        let Some((first, first_bytes)) = entries.next() else {
            return Ok(());
        };
        // Encode first, so a bad batch writes nothing.
        let mut buf = Vec::new();
        let mut records = Vec::new(); // (index, offset in buf, len)
        let mut next = first;
        for (index, bytes) in std::iter::once((first, first_bytes)).chain(entries) {
            if index != next {
                return Err(invalid_input(format!(
                    "entries not contiguous: {index} follows {}",
                    next - 1
                )));
            }
            if bytes.len() > MAX_ENTRY_BYTES {
                return Err(invalid_input(format!(
                    "entry {index} is {} bytes, more than {MAX_ENTRY_BYTES}",
                    bytes.len()
                )));
            }
            records.push((index, buf.len() as u64, bytes.len() as u32));
            encode_record(&mut buf, index, &bytes, index == first);
            next += 1;
        }
        if self.last_written().is_some_and(|l| first <= l) {
            self.truncate_from(first)?;
        }
        let base = self.segment_for(first)?;
        let seg = self
            .segments
            .get_mut(&base)
            .expect("segment_for returns a segment");
        if let Err(e) = seg.file.write_all_at(&buf, seg.len) {
            // Take back a partial write; if that fails too, open cuts it as a torn tail.
            let _ = seg.file.set_len(seg.len);
            return Err(with_path(e, &seg.path));
        }
        let start = seg.len;
        seg.len += buf.len() as u64;
        seg.last = Some(next - 1);
        let (file, path) = (seg.file.clone(), seg.path.clone());
        self.entries
            .extend(records.into_iter().map(|(index, off, len)| {
                (
                    index,
                    Pos {
                        segment: base,
                        offset: start + off,
                        len,
                    },
                )
            }));
        self.mark_unsynced(file, &path);
        self.check_invariants();
        Ok(())
    }

    /// The base of the segment where entry `index` (> every index in the files) goes,
    /// starting a new segment when the active one is full, or `index` does not follow its
    /// last record.
    fn segment_for(&mut self, index: u64) -> io::Result<u64> {
        let prev_end = match self.active() {
            Some((base, seg)) => match seg.last {
                Some(l) if l + 1 == index && seg.len < self.segment_bytes => {
                    return Ok(base);
                }
                Some(l) => l + 1,
                None if base == index => return Ok(base),
                None => {
                    // An empty segment named for another index: replace it.
                    let seg = self.segments.remove(&base).expect("active exists");
                    fs::remove_file(&seg.path)?;
                    self.dir_dirty = true;
                    self.active().and_then(|(_, s)| s.last).map_or(0, |l| l + 1)
                }
            },
            None => 0,
        };
        let path = self.dir.join(segment_name(index));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)?;
        file.write_all_at(&segment_header(index, prev_end), 0)
            .map_err(|e| with_path(e, &path))?;
        let file = Arc::new(file);
        self.mark_unsynced(file.clone(), &path);
        self.dir_dirty = true;
        self.segments.insert(
            index,
            Segment {
                path,
                file,
                len: SEGMENT_HEADER_BYTES,
                last: None,
            },
        );
        Ok(index)
    }

    fn mark_unsynced(&mut self, file: Arc<File>, path: &Path) {
        if !self.unsynced.iter().any(|(f, _)| Arc::ptr_eq(f, &file)) {
            self.unsynced.push((file, path.to_path_buf()));
        }
    }

    fn truncate_from(&mut self, from: u64) -> io::Result<()> {
        // Entries at or below the purge point are gone already; records of them left in a
        // file stay (ignored on open), so the cut is at the first live entry at or after
        // `from`.
        let from = match self.meta.purged_through {
            Some(p) => from.max(p.saturating_add(1)),
            None => from,
        };
        let removed = self.entries.split_off(&from);
        // Later segments go first, newest first, and that is made durable before the cut
        // below: a crash must never leave a stale later segment after a shortened one.
        let later: Vec<u64> = self.segments.range(from..).map(|(&b, _)| b).collect();
        for base in later.iter().rev() {
            let seg = self.segments.remove(base).expect("listed above");
            fs::remove_file(&seg.path)?;
        }
        if !later.is_empty() {
            sync_dir(&self.dir)?;
        }
        if let Some((&cut, pos)) = removed.first_key_value()
            && let Some(seg) = self.segments.get_mut(&pos.segment)
        {
            seg.file
                .set_len(pos.offset)
                .map_err(|e| with_path(e, &seg.path))?;
            seg.len = pos.offset;
            seg.last = (cut > pos.segment).then(|| cut - 1);
            let (file, path) = (seg.file.clone(), seg.path.clone());
            self.mark_unsynced(file, &path);
        }
        self.check_invariants();
        Ok(())
    }

    fn purge_through(&mut self, through: u64) {
        if self.meta.purged_through.is_some_and(|p| p >= through) {
            return;
        }
        self.entries = match through.checked_add(1) {
            Some(keep) => self.entries.split_off(&keep),
            None => BTreeMap::new(),
        };
        self.meta.purged_through = Some(through);
        self.meta_dirty = true;
        let gone = self.take_segments_through(through);
        self.doomed.extend(gone.into_iter().map(|s| s.path));
        self.check_invariants();
    }

    /// Removes from `segments` (not from the disk) every segment wholly at or below
    /// `through`, except the active one.
    fn take_segments_through(&mut self, through: u64) -> Vec<Segment> {
        let active = self.active().map(|(b, _)| b);
        let gone: Vec<u64> = self
            .segments
            .iter()
            .filter(|&(&b, s)| Some(b) != active && s.last.is_none_or(|l| l <= through))
            .map(|(&b, _)| b)
            .collect();
        gone.iter()
            .map(|b| self.segments.remove(b).expect("listed above"))
            .collect()
    }

    fn take_flush_job(&mut self) -> io::Result<FlushJob> {
        let meta = if self.meta_dirty {
            Some(encode_meta(&self.meta)?)
        } else {
            None
        };
        debug_assert!(
            self.doomed.is_empty() || meta.is_some(),
            "segments doomed without a purge point to write"
        );
        self.meta_dirty = false;
        Ok(FlushJob {
            dir: self.dir.clone(),
            files: std::mem::take(&mut self.unsynced),
            meta,
            sync_dir: std::mem::take(&mut self.dir_dirty),
            doomed: std::mem::take(&mut self.doomed),
        })
    }

    /// Reads the records at `positions` (ascending indexes), one read per run of adjacent
    /// records in a segment.
    fn read(&self, positions: &[(u64, Pos)]) -> io::Result<Vec<(u64, Vec<u8>)>> {
        let mut out = Vec::with_capacity(positions.len());
        let mut rest = positions;
        while let Some(&(_, first)) = rest.first() {
            let run = 1 + rest
                .windows(2)
                .take_while(|w| w[1].1.segment == first.segment && w[1].1.offset == w[0].1.end())
                .count();
            let (now, later) = rest.split_at(run);
            rest = later;
            let seg = &self.segments[&first.segment];
            let end = now.last().expect("run >= 1").1.end();
            let mut buf = vec![0; (end - first.offset) as usize];
            seg.file.read_exact_at(&mut buf, first.offset)?;
            let mut at = 0;
            for &(index, pos) in now {
                let rec = match decode_record(&buf[at..]) {
                    Ok(r) if r.index == index && r.payload.len() == pos.len as usize => r,
                    Ok(r) => {
                        return Err(corrupt(
                            &seg.path,
                            pos.offset,
                            &format!("record of entry {} where {index} was written", r.index),
                        ));
                    }
                    Err(why) => return Err(corrupt(&seg.path, pos.offset, &why)),
                };
                out.push((index, rec.payload.to_vec()));
                at += rec.total;
            }
        }
        Ok(out)
    }

    /// Rebuilds `segments` and `entries` from the files (see the module doc, "recovery").
    fn recover(&mut self) -> io::Result<()> {
        let bases = segment_bases(&self.dir)?;
        let purged = self.meta.purged_through;
        let count = bases.len();
        let mut prev_last: Option<u64> = None;
        for (k, base) in bases.into_iter().enumerate() {
            let is_active = k + 1 == count;
            let path = self.dir.join(segment_name(base));
            let bytes = fs::read(&path)?;
            let file = OpenOptions::new().read(true).write(true).open(&path)?;
            match check_segment_header(&bytes, base) {
                Ok(prev_end) => check_continuity(&path, k == 0, prev_end, prev_last, purged)?,
                Err(HeaderError::Short) if is_active => {
                    // Created, but its header never reached the disk.
                    tracing::warn!(path = %path.display(), "removing a Raft log segment with a torn header");
                    fs::remove_file(&path)?;
                    sync_dir(&self.dir)?;
                    continue;
                }
                Err(e) => return Err(corrupt(&path, 0, &e.to_string())),
            }
            let (len, last) = self.index_segment(base, &path, &bytes, &file, is_active)?;
            if last.is_some() {
                prev_last = last;
            }
            self.segments.insert(
                base,
                Segment {
                    path,
                    file: Arc::new(file),
                    len,
                    last,
                },
            );
        }
        // Segments wholly at or below the purge point (a crash before the flush deleted
        // them): delete them now.
        if let Some(p) = purged {
            for seg in self.take_segments_through(p) {
                fs::remove_file(&seg.path)?;
            }
        }
        Ok(())
    }

    /// Reads segment `base`'s entries (`bytes`, the file's contents) into the entry index
    /// (those above the purge point), checking they follow each other from `base`. A torn
    /// tail of the active segment (undecodable, with no intact write after it) is cut off;
    /// anything else undecodable is corruption. Returns the valid length in bytes and the
    /// last entry's index.
    fn index_segment(
        &mut self,
        base: u64,
        path: &Path,
        bytes: &[u8],
        file: &File,
        is_active: bool,
    ) -> io::Result<(u64, Option<u64>)> {
        let purged = self.meta.purged_through;
        let mut offset = SEGMENT_HEADER_BYTES as usize;
        let mut last: Option<u64> = None;
        while offset < bytes.len() {
            let rec = match decode_record(&bytes[offset..]) {
                Ok(r) => r,
                Err(why) if is_active => {
                    if let Some(later) = later_batch(bytes, offset, last) {
                        return Err(corrupt(
                            path,
                            offset as u64,
                            &format!(
                                "{why}; a later write (byte {later}) is intact, so this is \
                                 not a torn tail"
                            ),
                        ));
                    }
                    tracing::warn!(
                        path = %path.display(),
                        offset,
                        dropped_bytes = bytes.len() - offset,
                        reason = %why,
                        "cutting a torn tail off the Raft log"
                    );
                    file.set_len(offset as u64)?;
                    file.sync_data()?;
                    break;
                }
                Err(why) => return Err(corrupt(path, offset as u64, &why)),
            };
            let want = last.map_or(base, |l| l + 1);
            if rec.index != want {
                return Err(corrupt(
                    path,
                    offset as u64,
                    &format!("entry {} where {want} was expected", rec.index),
                ));
            }
            if purged.is_none_or(|p| rec.index > p) {
                self.entries.insert(
                    rec.index,
                    Pos {
                        segment: base,
                        offset: offset as u64,
                        len: rec.payload.len() as u32,
                    },
                );
            }
            last = Some(rec.index);
            offset += rec.total;
        }
        Ok(((offset as u64).min(bytes.len() as u64), last))
    }
}

/// The base indexes of the segment files in `dir` (`<base>.log`), ascending.
pub(super) fn segment_bases(dir: &Path) -> io::Result<Vec<u64>> {
    let mut bases = Vec::new();
    for dirent in fs::read_dir(dir)? {
        let name = dirent?.file_name();
        let name = name.to_string_lossy();
        if let Some(stem) = name.strip_suffix(SEGMENT_SUFFIX) {
            let base = stem
                .parse::<u64>()
                .map_err(|_| corrupt_file(&dir.join(&*name), "segment name is not an index"))?;
            bases.push(base);
        }
    }
    bases.sort_unstable();
    Ok(bases)
}

/// A segment created after entry `prev_end - 1` must follow the previous segment's last
/// entry `prev_last`; the first segment on disk (`first`) may start later only where the log
/// was purged through (`purged`). Anything else means a segment is missing.
fn check_continuity(
    path: &Path,
    first: bool,
    prev_end: u64,
    prev_last: Option<u64>,
    purged: Option<u64>,
) -> io::Result<()> {
    // The first segment on disk: whatever came before it was purged.
    if first && prev_end != 0 && purged.is_none_or(|p| prev_end - 1 > p) {
        return Err(corrupt_file(
            path,
            &format!(
                "created after entry {}, but the log was purged only through {} \
                 (the segment before it is missing)",
                prev_end - 1,
                purged.map_or("none".to_string(), |p| p.to_string())
            ),
        ));
    }
    if let Some(l) = prev_last
        && prev_end != l + 1
    {
        return Err(corrupt_file(
            path,
            &format!(
                "created after entry {}, but the previous segment ends at {l} \
                 (a segment is missing)",
                prev_end.wrapping_sub(1)
            ),
        ));
    }
    Ok(())
}

/// The name and bytes of a segment file as [`SegmentDisk`] writes it: header (`base`,
/// `prev_end`), then one framed record per `(index, payload, first_in_batch)`. For fuzzing
/// and tests of recovery ([`crate::fuzz`]); a caller may append damage to the bytes.
pub fn segment_file_bytes<'a>(
    base: u64,
    prev_end: u64,
    records: impl IntoIterator<Item = (u64, &'a [u8], bool)>,
) -> (String, Vec<u8>) {
    let mut bytes = segment_header(base, prev_end).to_vec();
    for (index, payload, first) in records {
        encode_record(&mut bytes, index, payload, first);
    }
    (segment_name(base), bytes)
}

pub(super) fn segment_name(base: u64) -> String {
    format!("{base:020}{SEGMENT_SUFFIX}")
}

fn segment_header(base: u64, prev_end: u64) -> [u8; SEGMENT_HEADER_BYTES as usize] {
    let mut h = [0u8; SEGMENT_HEADER_BYTES as usize];
    h[0..8].copy_from_slice(SEGMENT_MAGIC);
    h[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    h[16..24].copy_from_slice(&base.to_le_bytes());
    h[24..32].copy_from_slice(&prev_end.to_le_bytes());
    let crc = crc32c::crc32c(&h);
    h[12..16].copy_from_slice(&crc.to_le_bytes());
    h
}

#[derive(Debug, thiserror::Error)]
pub(super) enum HeaderError {
    #[error("segment header incomplete")]
    Short,
    #[error("not a Keel Raft log segment (bad magic)")]
    Magic,
    #[error("segment format version {0}, this build reads {FORMAT_VERSION}")]
    Version(u32),
    #[error("segment header crc mismatch")]
    Crc,
    #[error("segment header says base {0}, the file name {1}")]
    Base(u64, u64),
}

/// Checks a segment's header; returns its `prev_end`.
pub(super) fn check_segment_header(bytes: &[u8], base: u64) -> Result<u64, HeaderError> {
    let Some(h) = bytes.get(..SEGMENT_HEADER_BYTES as usize) else {
        return Err(HeaderError::Short);
    };
    if &h[0..8] != SEGMENT_MAGIC {
        // A file of zeros is one whose bytes never reached the disk; a zeroed header with
        // data after it is damage.
        return Err(if bytes.iter().all(|&b| b == 0) {
            HeaderError::Short
        } else {
            HeaderError::Magic
        });
    }
    let version = u32::from_le_bytes(h[8..12].try_into().expect("4 bytes"));
    if version != FORMAT_VERSION {
        return Err(HeaderError::Version(version));
    }
    let mut zeroed = [0u8; SEGMENT_HEADER_BYTES as usize];
    zeroed.copy_from_slice(h);
    zeroed[12..16].fill(0);
    if crc32c::crc32c(&zeroed).to_le_bytes() != h[12..16] {
        return Err(HeaderError::Crc);
    }
    let in_header = u64::from_le_bytes(h[16..24].try_into().expect("8 bytes"));
    if in_header != base {
        return Err(HeaderError::Base(in_header, base));
    }
    Ok(u64::from_le_bytes(h[24..32].try_into().expect("8 bytes")))
}

/// Bit of a record's length word set on the first record of each [`SegmentDisk::put_entries`]
/// batch (payload lengths stay below 2^31, see [`MAX_ENTRY_BYTES`]).
const FIRST_IN_BATCH: u32 = 1 << 31;

fn encode_record(buf: &mut Vec<u8>, index: u64, payload: &[u8], first_in_batch: bool) {
    let flag = if first_in_batch { FIRST_IN_BATCH } else { 0 };
    let len = (payload.len() as u32 | flag).to_le_bytes();
    let index = index.to_le_bytes();
    let crc = crc32c::crc32c_append(crc32c::crc32c_append(crc32c::crc32c(&len), &index), payload);
    buf.extend_from_slice(&len);
    buf.extend_from_slice(&crc.to_le_bytes());
    buf.extend_from_slice(&index);
    buf.extend_from_slice(payload);
}

pub(super) struct Record<'a> {
    pub(super) index: u64,
    /// The first record of its batch.
    first_in_batch: bool,
    pub(super) payload: &'a [u8],
    /// Bytes of the whole record.
    pub(super) total: usize,
}

/// Decodes the record at the start of `bytes`. Errors say why it is not a whole, intact
/// record.
pub(super) fn decode_record(bytes: &[u8]) -> Result<Record<'_>, String> {
    let Some(h) = bytes.get(..RECORD_HEADER_BYTES) else {
        return Err(format!("record header cut after {} bytes", bytes.len()));
    };
    let word = u32::from_le_bytes(h[0..4].try_into().expect("4 bytes"));
    let len = word & !FIRST_IN_BATCH;
    let crc = u32::from_le_bytes(h[4..8].try_into().expect("4 bytes"));
    let index = u64::from_le_bytes(h[8..16].try_into().expect("8 bytes"));
    if len as usize > MAX_ENTRY_BYTES {
        return Err(format!("record length {len} is over {MAX_ENTRY_BYTES}"));
    }
    let total = RECORD_HEADER_BYTES + len as usize;
    let Some(payload) = bytes.get(RECORD_HEADER_BYTES..total) else {
        return Err(format!(
            "record of {total} bytes cut after {} bytes",
            bytes.len()
        ));
    };
    let want = crc32c::crc32c_append(
        crc32c::crc32c_append(crc32c::crc32c(&h[0..4]), &h[8..16]),
        payload,
    );
    if want != crc {
        return Err("record crc mismatch".to_owned());
    }
    Ok(Record {
        index,
        first_in_batch: word & FIRST_IN_BATCH != 0,
        payload,
        total,
    })
}

/// The offset of an intact record that starts a batch somewhere after `bad` in a segment
/// whose last good record is `last`: proof that the bad record is not part of the last,
/// possibly torn, batch. A torn write only damages the last batch, because every batch is
/// flushed before the next is written (`LogStore` does); so a later intact batch means the
/// damage is to data that was on disk. Only runs when a segment is damaged; it tries every
/// byte offset, but checks the crc only of a header that could follow `last`.
pub(super) fn later_batch(bytes: &[u8], bad: usize, last: Option<u64>) -> Option<usize> {
    let after = last.map_or(0, |l| l + 1);
    (bad + 1..bytes.len().saturating_sub(RECORD_HEADER_BYTES - 1)).find(|&at| {
        let h = &bytes[at..at + RECORD_HEADER_BYTES];
        let word = u32::from_le_bytes(h[0..4].try_into().expect("4 bytes"));
        let index = u64::from_le_bytes(h[8..16].try_into().expect("8 bytes"));
        word & FIRST_IN_BATCH != 0
            && index >= after
            && decode_record(&bytes[at..]).is_ok_and(|r| r.first_in_batch)
    })
}

fn encode_meta(meta: &Meta) -> io::Result<Vec<u8>> {
    let payload = postcard::to_stdvec(meta).map_err(io::Error::other)?;
    let mut out = Vec::with_capacity(payload.len() + 20);
    out.extend_from_slice(META_MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32c::crc32c(&payload).to_le_bytes());
    out.extend_from_slice(&payload);
    Ok(out)
}

/// Reads `meta`; a missing file is an empty `Meta` (a new log).
pub(super) fn read_meta(path: &Path) -> io::Result<Meta> {
    let bytes = match fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Meta::default()),
        Err(e) => return Err(e),
    };
    // Written whole and renamed into place: any mismatch is corruption, not a torn write.
    let bad = |why: &str| corrupt_file(path, why);
    if bytes.len() < 20 || &bytes[0..8] != META_MAGIC {
        return Err(bad("not a Keel Raft meta file"));
    }
    let version = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
    if version != FORMAT_VERSION {
        return Err(bad(&format!(
            "format version {version}, this build reads {FORMAT_VERSION}"
        )));
    }
    let len = u32::from_le_bytes(bytes[12..16].try_into().expect("4 bytes")) as usize;
    let crc = u32::from_le_bytes(bytes[16..20].try_into().expect("4 bytes"));
    let payload = &bytes[20..];
    if payload.len() != len || crc32c::crc32c(payload) != crc {
        return Err(bad("length or crc mismatch"));
    }
    postcard::from_bytes(payload).map_err(|e| bad(&format!("cannot decode: {e}")))
}

fn refuse_sled(dir: &Path) -> io::Result<()> {
    if super::engine_files::holds_sled(dir) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{} holds a sled database (a Raft log written with metadata_log_engine = \
                 \"sled\", or by a Keel build before segment files), but this controller is \
                 configured with metadata_log_engine = \"segments\", which cannot read it \
                 (there is no converter): set metadata_log_engine = \"sled\" (see the README)",
                dir.display()
            ),
        ));
    }
    Ok(())
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// `e` with the file it happened on, for one-line reports (a full disk, a failed fsync).
fn with_path(e: io::Error, path: &Path) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

fn invalid_input(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

/// What a user can do about a damaged Raft log (the README's "metadata log dir" section).
const DAMAGE_ADVICE: &str =
    "restore this controller's raft/ from a backup taken while it was stopped (see the README)";

fn corrupt(path: &Path, offset: u64, why: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!(
            "{} is corrupt at byte {offset}: {why}; {DAMAGE_ADVICE}",
            path.display()
        ),
    )
}

fn corrupt_file(path: &Path, why: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("{} is corrupt: {why}; {DAMAGE_ADVICE}", path.display()),
    )
}

#[cfg(test)]
#[path = "disk_tests.rs"]
mod tests;
