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
//! rare reader that wants it (a consumer catching up), with the kernel's readahead. The log
//! drives it ([`crate::log::Log`]): every [`STEP_BYTES`] appended it walks its segments from
//! the newest, asking each to advise what lies more than `lag` minus the bytes of the newer
//! segments before its end, and stops at the first segment that is done.
//!
//! Each byte is advised twice: once when it falls `keep / 2` behind the end, which starts its
//! write-back (its pages are dirty, so nothing is dropped), and once when it falls `keep`
//! behind, by when its write-back has had `keep / 2` bytes of appends to finish and its
//! now-clean pages are dropped. Pages still dirty then stay cached until the kernel reclaims
//! them: a cost in memory, never in correctness. Segments loaded at open count as done
//! (their pages were not written by this process).
//!
//! [`CacheBehind`] is the pure decision. The call itself runs on one background thread
//! ([`drop_in_background`]), never under the partition lock: `fadvise` starts the range's
//! write-back, which in ext4 allocates blocks and can wait for the journal (measured: 465
//! calls over 2 ms in one benchmark run when it ran inline in append).

use std::fs::File;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};

/// Drop-behind advances in steps of at least this many bytes (one `fadvise` per step and
/// segment).
pub const STEP_BYTES: u64 = 4 << 20;

/// Smallest configured lag (bytes): data just written is still dirty, so advising it would
/// only start write-back early without dropping anything.
pub const MIN_LAG_BYTES: u64 = 1 << 20;

/// Segments one drop-behind pass looks at, at most (bounds the walk when segments are tiny;
/// older segments of such a log keep their pages until the kernel reclaims them).
pub const MAX_SEGMENTS_PER_PASS: usize = 16;

/// Drop-behind state of one segment file.
///
/// Invariant: `dropped_to <= written_back_to`; both are byte positions in the segment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CacheBehind {
    /// End (exclusive) of what was advised to start its write-back.
    written_back_to: u64,
    /// End (exclusive) of what was advised to be dropped.
    dropped_to: u64,
}

impl CacheBehind {
    /// State of a file of `size` bytes whose pages are not to be advised (a segment loaded at
    /// open): done until it grows.
    pub fn done_at(size: u64) -> Self {
        Self {
            written_back_to: size,
            dropped_to: size,
        }
    }

    /// The file holds `size` bytes of which the last `keep` are to stay cached; returns the
    /// byte ranges (end exclusive) to advise `DONTNEED` now, oldest first: the next part to
    /// drop (what fell `keep` behind the end) and the next part to write back (what fell
    /// `keep / 2` behind), each once it is at least [`STEP_BYTES`] long or reaches the end
    /// of the file (`keep == 0`: a rolled segment far enough behind the log end). A file
    /// truncated below what was advised restarts from its new size.
    pub fn advise(&mut self, size: u64, keep: u64) -> Vec<Range<u64>> {
        if size < self.written_back_to {
            // Truncated (a follower cut a diverging tail): the cut pages are gone already.
            self.written_back_to = size;
            self.dropped_to = self.dropped_to.min(size);
        }
        let mut ranges = Vec::new();
        let mut next = |from: &mut u64, to: u64| {
            if to > *from && (to >= *from + STEP_BYTES || to == size) {
                ranges.push(*from..to);
                *from = to;
            }
        };
        next(&mut self.dropped_to, size.saturating_sub(keep));
        next(&mut self.written_back_to, size.saturating_sub(keep / 2));
        if self.dropped_to > self.written_back_to {
            // Never drop ahead of write-back (a big jump of `keep`): advise it as written back.
            self.written_back_to = self.dropped_to;
        }
        debug_assert!(self.dropped_to <= self.written_back_to);
        ranges
    }

    /// Whether every byte of a file of `size` bytes has been advised to be dropped.
    pub fn is_done(&self, size: u64) -> bool {
        self.dropped_to >= size
    }
}

/// Advice waiting for the background thread, at most (a full queue drops new advice: it is
/// only advice, and the range is advised again with the next one).
pub const QUEUE_CAPACITY: usize = 256;

/// One `fadvise(DONTNEED)` to make: a duplicate of the segment's descriptor (so the segment
/// may be closed, truncated or deleted meanwhile; advice on such a file is harmless), the byte
/// range, and the path for the log line if it fails.
struct Job {
    file: File,
    range: Range<u64>,
    path: PathBuf,
}

/// Queue of the process's drop-behind thread, started on first use; `None` if the thread
/// could not be started (then no advice is given, which only costs page cache).
static QUEUE: OnceLock<Option<SyncSender<Job>>> = OnceLock::new();

/// Queues `fadvise(DONTNEED)` of `range` (bytes, end exclusive) of `file` for the
/// drop-behind thread and returns at once. Never blocks: when the queue is full, or the
/// descriptor cannot be duplicated, the advice is skipped (logged at debug level).
pub fn drop_in_background(file: &File, range: Range<u64>, path: &std::path::Path) {
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

/// The thread: one `fadvise` per job, in order, until every sender is gone.
fn run(rx: Receiver<Job>) {
    while let Ok(job) = rx.recv() {
        let len = std::num::NonZeroU64::new(job.range.end - job.range.start);
        if let Err(e) = rustix::fs::fadvise(
            &job.file,
            job.range.start,
            len,
            rustix::fs::Advice::DontNeed,
        ) {
            tracing::debug!(segment = %job.path.display(), error = %e, "fadvise(DONTNEED) failed");
        }
    }
}

#[cfg(test)]
// `advise` returns a list of ranges; a one-element list is meant.
#[allow(clippy::single_range_in_vec_init)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn write_back_starts_at_half_the_lag_and_the_drop_follows_at_the_lag() {
        let mut c = CacheBehind::default();
        let keep = 16 * MIB;
        assert!(c.advise(0, keep).is_empty());
        // 12 MiB written: 4 MiB are 8 MiB (keep / 2) behind: write them back.
        assert!(c.advise(11 * MIB, keep).is_empty());
        assert_eq!(c.advise(12 * MIB, keep), [0..4 * MIB]);
        assert!(c.advise(15 * MIB, keep).is_empty());
        assert_eq!(c.advise(16 * MIB, keep), [4 * MIB..8 * MIB]);
        // 20 MiB: the first 4 MiB are 16 MiB behind: drop them; write back the next 4.
        assert_eq!(c.advise(20 * MIB, keep), [0..4 * MIB, 8 * MIB..12 * MIB]);
        assert!(!c.is_done(20 * MIB));
    }

    #[test]
    fn a_rolled_segment_is_finished_as_the_log_moves_past_it() {
        // A 10 MiB segment rolled; the log keeps 8 MiB cached.
        let mut c = CacheBehind::default();
        let size = 10 * MIB;
        assert_eq!(c.advise(size, 8 * MIB), [0..6 * MIB]);
        // 3 MiB in the next segment: keep 5 MiB of this one.
        assert_eq!(c.advise(size, 5 * MIB), [0..5 * MIB]);
        // 4 MiB in the next segment: keep 4 MiB: less than a step further.
        assert!(c.advise(size, 4 * MIB).is_empty());
        // Wholly behind the lag: the rest of both, then done.
        assert_eq!(c.advise(size, 0), [5 * MIB..size, 6 * MIB..size]);
        assert!(c.is_done(size));
        assert!(c.advise(size, 0).is_empty());
    }

    #[test]
    fn a_loaded_segment_is_done_until_it_grows() {
        let mut c = CacheBehind::done_at(50 * MIB);
        assert!(c.is_done(50 * MIB));
        assert!(c.advise(50 * MIB, 0).is_empty());
        assert!(!c.is_done(51 * MIB));
        assert_eq!(c.advise(58 * MIB, 8 * MIB), [50 * MIB..54 * MIB]);
        assert_eq!(
            c.advise(58 * MIB, 0),
            [50 * MIB..58 * MIB, 54 * MIB..58 * MIB]
        );
        assert!(c.is_done(58 * MIB));
    }

    #[test]
    fn a_truncated_segment_restarts_from_its_new_size() {
        let mut c = CacheBehind::default();
        let keep = 4 * MIB;
        assert_eq!(c.advise(10 * MIB, keep), [0..6 * MIB, 0..8 * MIB]);
        // Cut back to 5 MiB: nothing until the end is a step past it.
        assert!(c.advise(5 * MIB, keep).is_empty());
        assert!(c.advise(10 * MIB, keep).is_empty());
        assert_eq!(c.advise(11 * MIB, keep), [5 * MIB..9 * MIB]);
        // Truncated to empty.
        assert!(c.advise(0, keep).is_empty());
        assert!(c.is_done(0));
    }
}
