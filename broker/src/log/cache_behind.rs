//! Drop-behind of a segment's page cache: which byte ranges of the active segment to hand
//! back to the kernel with `posix_fadvise(POSIX_FADV_DONTNEED)` as the segment grows (the
//! policy of HDFS DataNode's `dfs.datanode.drop.cache.behind.writes`; Kafka has no such
//! knob and leaves every written page in the page cache).
//!
//! Why: a log written at hundreds of MiB/s grows the page cache by as much. Every page the
//! kernel hands to it is a page of RAM touched for the first time, or for the first time since
//! it was freed. On a VM whose host reclaims free guest memory (virtio-balloon free page
//! reporting), each such page costs a fault in the host. Measured on this project's 2-vCPU
//! VM: a 4 GiB sequential write into a growing page cache ran at 378 MiB/s, CPU-bound in
//! `copy_folio_from_iter_atomic`; with the pages 8 MiB behind the writer dropped as it went,
//! 1,120 MiB/s. The same cost was 51% of all CPU in the replication benchmark's max-rate rows.
//! Dropping also keeps dirty data bounded: `DONTNEED` starts write-back of the range, so
//! write-back runs steadily behind the writer instead of in multi-GiB bursts that throttle
//! every writer at once (the multi-hundred-ms produce stalls the benchmark showed).
//!
//! What stays cached: the newest `lag` bytes of each partition log, across segment
//! boundaries (where followers and tail consumers read). Older data is read from disk by the
//! rare reader that wants it (a consumer catching up), with the kernel's readahead; those
//! reads fill the page cache again and nothing drops those pages (the kernel reclaims them
//! under memory pressure). The log drives it ([`crate::log::Log`]): every
//! [`step_bytes`]`(lag)` appended it walks its segments from the newest (at most
//! [`MAX_SEGMENTS_PER_PASS`]), asking each to advise what lies more than `lag / 2` (write-back)
//! and `lag` (drop) behind the log end, and stops at the first segment that is done.
//!
//! Each byte is advised twice: once when it falls `lag / 2` behind the log end, which starts
//! its write-back (its pages are dirty, so nothing is dropped), and once when it falls `lag`
//! behind, by when its write-back has had `lag / 2` bytes of appends (at least two steps) to
//! finish and its now-clean pages are dropped. Pages still dirty then stay cached until the kernel reclaims
//! them: a cost in memory, never in correctness. Segments loaded at open count as done
//! (their pages were not written by this process).
//!
//! The same passes keep the active segment's blocks allocated ahead of the writer
//! ([`CacheBehind::allocate_ahead`], [`Advice::Allocate`]): up to `lag` bytes past its end,
//! growing with the segment, never past the size at which it rolls. Without it, the
//! write-back each pass starts allocates the blocks and, on ext4, holds the inode's
//! `i_data_sem` meanwhile, which the next append waits for (replication bench, `KEEL_BENCH_RATES=50,100`
//! three runs each: produce p99 at 50 MiB/s on a log past its first 32 MiB 4.6-5.0 ms with
//! it, 6.6-7.7 ms without).
//!
//! [`CacheBehind`] is the pure decision. The call itself runs on one background thread
//! ([`in_background`]), never under the partition lock: `fadvise` starts the range's
//! write-back, which in ext4 allocates blocks and can wait for the journal (measured: 465
//! calls over 2 ms in one benchmark run when it ran inline in append).

use std::fs::File;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};

/// Largest drop-behind step, bytes: one pass (and at most one `fadvise` per cursor and
/// segment) per step appended. Partitions written at the same rate pass at about the same
/// moments, and each pass's write-back and page invalidation briefly slows every append of
/// the machine: with 4 MiB steps, the replication bench at 100 MiB/s (3 partitions, 3
/// brokers on 2 vCPUs) saw all partitions stall 10-20 ms every 120 ms (the time a partition
/// took to grow by 4 MiB), produce p99 9-25 ms; with 1 MiB steps, 6.7-15 ms (50 MiB/s:
/// 3.4-4.6 ms instead of 4.4-8.2), three runs each.
pub const MAX_STEP_BYTES: u64 = 1 << 20;

/// Smallest drop-behind step, bytes.
pub const MIN_STEP_BYTES: u64 = 256 << 10;

/// The step for a lag: an eighth of it within [`MIN_STEP_BYTES`, `MAX_STEP_BYTES`], so the
/// write-back and the drop of a byte (`lag / 2` apart) are at least two steps apart.
pub fn step_bytes(lag: u64) -> u64 {
    (lag / 8).clamp(MIN_STEP_BYTES, MAX_STEP_BYTES)
}

/// Smallest configured lag (bytes).
pub const MIN_LAG_BYTES: u64 = 1 << 20;

/// Segments one drop-behind pass looks at, at most: bounds the walk when segments are tiny.
/// Segments reach the end of the walk only when more than this many lie within the lag
/// (segments under about 1/60 of the lag, 512 KiB at the default); those keep their pages
/// until the kernel reclaims them.
pub const MAX_SEGMENTS_PER_PASS: usize = 64;

/// Drop-behind state of one segment file.
///
/// Invariant: `dropped_to <= written_back_to`; all three are byte positions in the segment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CacheBehind {
    /// End (exclusive) of what was advised to start its write-back.
    written_back_to: u64,
    /// End (exclusive) of what was advised to be dropped.
    dropped_to: u64,
    /// End (exclusive) of what was asked to be allocated ahead of the writer
    /// ([`CacheBehind::allocate_ahead`]); may lie past the file's end.
    allocated_to: u64,
}

impl CacheBehind {
    /// State of a file of `size` bytes whose pages are not to be advised (a segment loaded at
    /// open): done until it grows.
    pub fn done_at(size: u64) -> Self {
        Self {
            written_back_to: size,
            dropped_to: size,
            allocated_to: size,
        }
    }

    /// The file holds `size` bytes; its last `keep_cached` bytes are to stay cached and its
    /// last `keep_dirty` (<= `keep_cached`) may stay unwritten. Returns the byte ranges (end
    /// exclusive) to advise `DONTNEED` now, oldest first: the next part to drop and the next
    /// part to write back, each once it is at least `step` long or reaches the end of the
    /// file (a rolled segment the log end has moved far enough past). A file truncated below
    /// what was advised restarts from its new size.
    pub fn advise(
        &mut self,
        size: u64,
        keep_cached: u64,
        keep_dirty: u64,
        step: u64,
    ) -> Vec<Range<u64>> {
        debug_assert!(keep_dirty <= keep_cached);
        if size < self.written_back_to {
            // Truncated (a follower cut a diverging tail): the cut pages are gone already.
            self.written_back_to = size;
            self.dropped_to = self.dropped_to.min(size);
        }
        let mut ranges = Vec::new();
        let mut next = |from: &mut u64, to: u64| {
            if to > *from && (to >= *from + step || to == size) {
                ranges.push(*from..to);
                *from = to;
            }
        };
        next(&mut self.dropped_to, size.saturating_sub(keep_cached));
        next(&mut self.written_back_to, size.saturating_sub(keep_dirty));
        if self.dropped_to > self.written_back_to {
            // Never drop ahead of write-back (a jump of the log end): count it written back.
            self.written_back_to = self.dropped_to;
        }
        debug_assert!(self.dropped_to <= self.written_back_to);
        ranges
    }

    /// Whether every byte of a file of `size` bytes has been advised to be dropped.
    pub fn is_done(&self, size: u64) -> bool {
        self.dropped_to >= size
    }

    /// The range (bytes, end exclusive, past the file's end) to allocate now ahead of the
    /// writer of a file of `size` bytes, so that the write-back drop-behind starts does not
    /// allocate blocks while the writer appends (see [`Advice::Allocate`]). The file is kept
    /// allocated `min(size, max_ahead)` bytes past its end (growing with the file, so a
    /// little-written segment reserves little), up to `limit` (the size at which the segment
    /// rolls); a new range is asked for once less than half of that is left.
    pub fn allocate_ahead(&mut self, size: u64, max_ahead: u64, limit: u64) -> Option<Range<u64>> {
        let ahead = size.min(max_ahead);
        let end = size.saturating_add(ahead).min(limit);
        let from = self.allocated_to.max(size);
        if from >= end || self.allocated_to >= size.saturating_add(ahead / 2).min(limit) {
            return None;
        }
        self.allocated_to = end;
        Some(from..end)
    }

    /// Bytes of blocks asked for past `size` (0 if none), which
    /// [`Segment`](super::segment::Segment) may give back when the segment rolls.
    pub fn allocated_past(&self, size: u64) -> u64 {
        self.allocated_to.saturating_sub(size)
    }
}

/// What the background thread does with a range of a segment file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Advice {
    /// `posix_fadvise(POSIX_FADV_DONTNEED)`: starts the write-back of dirty pages, drops
    /// clean ones.
    DontNeed,
    /// `fallocate(FALLOC_FL_KEEP_SIZE)`: allocates the range's blocks (unwritten extents)
    /// without changing the file's size. On ext4 a buffered write into a hole takes the
    /// inode's `i_data_sem` to reserve a delayed block, which the write-back of the same file
    /// holds while it allocates, including while the allocator reads block bitmaps from disk:
    /// measured in the replication bench as appends blocked up to 10 ms, with the partition
    /// lock held. A write into allocated blocks finds them in the extent cache and takes no
    /// such lock. The file's size, and so what a reader or a recovery sees, is unchanged;
    /// blocks past the end are given back when the segment rolls and freed when it is
    /// deleted. Kafka's `log.preallocate` allocates the whole segment at creation instead
    /// (`FileRecords.open(preallocate)`), which at 100,000 partitions would reserve a
    /// segment's size per partition.
    Allocate,
}

/// Advice waiting for the background thread, at most. A full queue drops new advice: it is
/// only advice, and a range skipped so stays cached until the kernel reclaims it.
pub const QUEUE_CAPACITY: usize = 256;

/// One `fadvise(DONTNEED)` to make: a duplicate of the segment's descriptor (so the segment
/// may be closed, truncated or deleted meanwhile; advice on such a file is harmless), the byte
/// range, and the path for the log line if it fails.
struct Job {
    file: File,
    advice: Advice,
    range: Range<u64>,
    path: PathBuf,
}

/// Queue of the process's drop-behind thread, started on first use; `None` if the thread
/// could not be started (then no advice is given, which only costs page cache).
static QUEUE: OnceLock<Option<SyncSender<Job>>> = OnceLock::new();

/// Queues `advice` on `range` (bytes, end exclusive) of `file` for the drop-behind thread and
/// returns at once. Never blocks: when the queue is full, or the descriptor cannot be
/// duplicated, the advice is skipped (logged at debug level; it only costs page cache or an
/// allocation at write-back).
pub fn in_background(file: &File, advice: Advice, range: Range<u64>, path: &std::path::Path) {
    if range.is_empty() {
        return;
    }
    let Some(queue) = QUEUE.get_or_init(start_thread) else {
        return;
    };
    let file = match file.try_clone() {
        Ok(f) => f,
        Err(e) => {
            tracing::debug!(segment = %path.display(), error = %e, "drop-behind: dup failed");
            return;
        }
    };
    let job = Job {
        file,
        advice,
        range,
        path: path.to_path_buf(),
    };
    match queue.try_send(job) {
        Ok(()) => {}
        Err(TrySendError::Full(job)) => {
            tracing::debug!(segment = %job.path.display(), "drop-behind queue full: advice skipped");
        }
        Err(TrySendError::Disconnected(_)) => {}
    }
}

fn start_thread() -> Option<SyncSender<Job>> {
    let (tx, rx) = sync_channel(QUEUE_CAPACITY);
    match std::thread::Builder::new()
        .name("keel-drop-behind".into())
        .spawn(move || run(rx))
    {
        Ok(_) => Some(tx),
        Err(e) => {
            tracing::warn!(error = %e, "cannot start the page-cache drop-behind thread; written data stays cached");
            None
        }
    }
}

/// The thread: one call per job, in order, until every sender is gone.
fn run(rx: Receiver<Job>) {
    while let Ok(job) = rx.recv() {
        if let Err(e) = apply(&job.file, job.advice, job.range) {
            tracing::debug!(segment = %job.path.display(), advice = ?job.advice, error = %e, "drop-behind advice failed");
        }
    }
}

/// Carries out `advice` on `range` of `file` (the system call of [`Advice`]).
fn apply(file: &File, advice: Advice, range: Range<u64>) -> rustix::io::Result<()> {
    let len = range.end - range.start;
    match advice {
        Advice::DontNeed => rustix::fs::fadvise(
            file,
            range.start,
            std::num::NonZeroU64::new(len),
            rustix::fs::Advice::DontNeed,
        ),
        Advice::Allocate => rustix::fs::fallocate(
            file,
            rustix::fs::FallocateFlags::KEEP_SIZE,
            range.start,
            len,
        ),
    }
}

#[cfg(test)]
// `advise` returns a list of ranges; a one-element list is meant.
#[allow(clippy::single_range_in_vec_init)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;
    const STEP: u64 = 4 * MIB;

    #[test]
    fn the_step_is_an_eighth_of_the_lag_within_bounds() {
        assert_eq!(step_bytes(32 * MIB), MIB);
        assert_eq!(step_bytes(1 << 30), MIB);
        assert_eq!(step_bytes(8 * MIB), MIB);
        assert_eq!(step_bytes(4 * MIB), 512 << 10);
        assert_eq!(step_bytes(MIN_LAG_BYTES), 256 << 10);
    }

    #[test]
    fn write_back_starts_at_half_the_lag_and_the_drop_follows_at_the_lag() {
        let mut c = CacheBehind::default();
        let (keep, dirty) = (16 * MIB, 8 * MIB);
        assert!(c.advise(0, keep, dirty, STEP).is_empty());
        // 12 MiB written: 4 MiB are 8 MiB behind: write them back.
        assert!(c.advise(11 * MIB, keep, dirty, STEP).is_empty());
        assert_eq!(c.advise(12 * MIB, keep, dirty, STEP), [0..4 * MIB]);
        assert!(c.advise(15 * MIB, keep, dirty, STEP).is_empty());
        assert_eq!(c.advise(16 * MIB, keep, dirty, STEP), [4 * MIB..8 * MIB]);
        // 20 MiB: the first 4 MiB are 16 MiB behind: drop them; write back the next 4.
        assert_eq!(
            c.advise(20 * MIB, keep, dirty, STEP),
            [0..4 * MIB, 8 * MIB..12 * MIB]
        );
        assert!(!c.is_done(20 * MIB));
    }

    #[test]
    fn a_rolled_segment_is_written_back_then_dropped_as_the_log_moves_past_it() {
        // A 10 MiB segment just rolled; the log keeps 8 MiB cached, 4 MiB dirty.
        let mut c = CacheBehind::default();
        let size = 10 * MIB;
        assert_eq!(c.advise(size, 8 * MIB, 4 * MIB, STEP), [0..6 * MIB]);
        // 4 MiB in the newer segment: wholly behind the write-back point, and what was
        // written back a step ago is now 8 MiB behind: dropped.
        assert_eq!(
            c.advise(size, 4 * MIB, 0, STEP),
            [0..6 * MIB, 6 * MIB..size]
        );
        assert!(!c.is_done(size));
        // 6 MiB newer: less than a step more to drop.
        assert!(c.advise(size, 2 * MIB, 0, STEP).is_empty());
        // 8 MiB newer: wholly behind the lag: the rest, written back a step before.
        assert_eq!(c.advise(size, 0, 0, STEP), [6 * MIB..size]);
        assert!(c.is_done(size));
        assert!(c.advise(size, 0, 0, STEP).is_empty());
    }

    #[test]
    fn a_loaded_segment_is_done_until_it_grows() {
        let mut c = CacheBehind::done_at(50 * MIB);
        assert!(c.is_done(50 * MIB));
        assert!(c.advise(50 * MIB, 0, 0, STEP).is_empty());
        assert!(!c.is_done(51 * MIB));
        assert_eq!(
            c.advise(58 * MIB, 8 * MIB, 4 * MIB, STEP),
            [50 * MIB..54 * MIB]
        );
        assert_eq!(
            c.advise(58 * MIB, 0, 0, STEP),
            [50 * MIB..58 * MIB, 54 * MIB..58 * MIB]
        );
        assert!(c.is_done(58 * MIB));
    }

    #[test]
    fn allocation_ahead_grows_with_the_file_up_to_the_limit() {
        let mut c = CacheBehind::default();
        let (max, limit) = (32 * MIB, 100 * MIB);
        // (file size, range asked for), in MiB, as the file grows.
        let steps: [(u64, Option<(u64, u64)>); 10] = [
            // Ahead by as much as the file holds (a little-written segment reserves little).
            (4, Some((4, 8))),
            (8, Some((8, 16))),
            // 4 of the 12 MiB ahead are left, under half: allocate to 24 MiB.
            (12, Some((16, 24))),
            // 8 of 16 left: enough.
            (16, None),
            // Past `max`: at most 32 MiB ahead, renewed once 16 MiB are left.
            (40, Some((40, 72))),
            (56, None),
            (57, Some((72, 89))),
            // Never past the size at which the segment rolls.
            (80, Some((89, 100))),
            (90, None),
            (100, None),
        ];
        for (size, asked) in steps {
            let expected = asked.map(|(a, b)| a * MIB..b * MIB);
            assert_eq!(
                c.allocate_ahead(size * MIB, max, limit),
                expected,
                "at {size} MiB"
            );
        }
        assert_eq!(c.allocated_past(99 * MIB), MIB);
        assert_eq!(c.allocated_past(100 * MIB), 0);
        // An empty file, or a loaded one, asks for nothing until it grows.
        assert_eq!(CacheBehind::default().allocate_ahead(0, max, limit), None);
        let mut loaded = CacheBehind::done_at(50 * MIB);
        assert_eq!(loaded.allocated_past(50 * MIB), 0);
        assert_eq!(
            loaded.allocate_ahead(54 * MIB, max, limit),
            Some(54 * MIB..86 * MIB)
        );
    }

    /// The allocation keeps the file's size (readers and recovery see only what was written)
    /// and a truncation to that size gives the blocks back, as the roll does.
    #[test]
    fn allocation_keeps_the_size_and_a_truncation_to_it_frees_the_blocks() {
        use std::io::Write;
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000000000000000000.log");
        let mut file = File::create(&path).unwrap();
        file.write_all(&[7u8; 4096]).unwrap();
        apply(&file, Advice::Allocate, 4096..4096 + 8 * MIB).unwrap();
        let m = file.metadata().unwrap();
        assert_eq!(m.len(), 4096);
        // st_blocks counts 512-byte units.
        assert!(m.blocks() * 512 >= 8 * MIB, "{} blocks", m.blocks());
        file.set_len(4096).unwrap();
        let m = file.metadata().unwrap();
        assert_eq!(m.len(), 4096);
        assert!(m.blocks() * 512 < MIB, "{} blocks", m.blocks());
        assert_eq!(std::fs::read(&path).unwrap(), vec![7u8; 4096]);
    }

    #[test]
    fn a_truncated_segment_restarts_from_its_new_size() {
        let mut c = CacheBehind::default();
        let (keep, dirty) = (4 * MIB, 2 * MIB);
        assert_eq!(
            c.advise(10 * MIB, keep, dirty, STEP),
            [0..6 * MIB, 0..8 * MIB]
        );
        // Cut back to 5 MiB: nothing until the end is a step past it.
        assert!(c.advise(5 * MIB, keep, dirty, STEP).is_empty());
        assert!(c.advise(10 * MIB, keep, dirty, STEP).is_empty());
        assert_eq!(c.advise(11 * MIB, keep, dirty, STEP), [5 * MIB..9 * MIB]);
        // Truncated to empty.
        assert!(c.advise(0, keep, dirty, STEP).is_empty());
        assert!(c.is_done(0));
    }
}
