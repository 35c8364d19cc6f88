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
//! What stays cached: the newest `lag` bytes of the active segment (where followers and
//! tail consumers read) and the tail of each rolled segment. Older data is read from disk by
//! the rare reader that wants it (a consumer catching up), with the kernel's readahead.
//!
//! Each range is advised twice: once when it falls `lag` behind the end (which starts its
//! write-back; dirty pages are not dropped), and again with the next range, by when it is
//! normally clean and is dropped. Pages still dirty after that stay cached until the kernel
//! reclaims them: a cost in memory, never in correctness.
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

/// Drop-behind advances in steps of at least this many bytes (one `fadvise` per step).
pub const STEP_BYTES: u64 = 4 << 20;

/// Smallest lag accepted (bytes): data just written is still dirty, so advising it would
/// only start write-back early without dropping anything.
pub const MIN_LAG_BYTES: u64 = 1 << 20;

/// Drop-behind state of one segment file.
///
/// Invariant: `prev_start <= advised_to`; both are byte positions in the segment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CacheBehind {
    /// Start of the range advised last time (advised again with the next range).
    prev_start: u64,
    /// End (exclusive) of everything advised so far.
    advised_to: u64,
}

impl CacheBehind {
    /// The segment now holds `size` bytes; with `lag` = bytes to keep cached behind the end
    /// (at least [`MIN_LAG_BYTES`]), returns the byte range (end exclusive) to advise
    /// `DONTNEED`, if the end has moved at least [`STEP_BYTES`] past what was advised. A
    /// segment truncated below what was advised restarts from its new size.
    pub fn on_grow(&mut self, size: u64, lag: u64) -> Option<Range<u64>> {
        debug_assert!(lag >= MIN_LAG_BYTES);
        if size < self.advised_to {
            // Truncated (a follower cut a diverging tail): the cut pages are gone already.
            self.prev_start = self.prev_start.min(size);
            self.advised_to = size;
        }
        let to = size.saturating_sub(lag);
        if to < self.advised_to + STEP_BYTES {
            return None;
        }
        let range = self.prev_start..to;
        self.prev_start = self.advised_to;
        self.advised_to = to;
        debug_assert!(self.prev_start <= self.advised_to);
        Some(range)
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
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn nothing_until_the_end_is_a_step_past_the_lag() {
        let mut c = CacheBehind::default();
        assert_eq!(c.on_grow(0, 16 * MIB), None);
        assert_eq!(c.on_grow(16 * MIB, 16 * MIB), None);
        assert_eq!(c.on_grow(20 * MIB - 1, 16 * MIB), None);
        assert_eq!(c.on_grow(20 * MIB, 16 * MIB), Some(0..4 * MIB));
    }

    #[test]
    fn every_range_is_advised_twice_then_left_alone() {
        let mut c = CacheBehind::default();
        let lag = 8 * MIB;
        assert_eq!(c.on_grow(12 * MIB, lag), Some(0..4 * MIB));
        // Not a whole step further yet.
        assert_eq!(c.on_grow(15 * MIB, lag), None);
        // The first range again (now written back, so dropped), plus the new one.
        assert_eq!(c.on_grow(17 * MIB, lag), Some(0..9 * MIB));
        assert_eq!(c.on_grow(30 * MIB, lag), Some(4 * MIB..22 * MIB));
        assert_eq!(c.on_grow(34 * MIB, lag), Some(9 * MIB..26 * MIB));
    }

    #[test]
    fn a_truncated_segment_restarts_from_its_new_size() {
        let mut c = CacheBehind::default();
        let lag = 4 * MIB;
        assert_eq!(c.on_grow(10 * MIB, lag), Some(0..6 * MIB));
        assert_eq!(c.on_grow(20 * MIB, lag), Some(0..16 * MIB));
        // Cut back to 5 MiB: nothing to advise until 5 + lag + step.
        assert_eq!(c.on_grow(5 * MIB, lag), None);
        assert_eq!(c.on_grow(12 * MIB, lag), None);
        assert_eq!(c.on_grow(13 * MIB, lag), Some(5 * MIB..9 * MIB));
        // Truncated to empty.
        assert_eq!(c.on_grow(0, lag), None);
        assert_eq!(c.on_grow(8 * MIB, lag), Some(0..4 * MIB));
    }
}
