//! Segment files opened on demand, with a process-wide bound on the descriptors they hold
//! (#26: 100,000 partitions on a broker whose open-files limit is far lower).
//!
//! Kafka keeps every segment's file open and asks operators for a large `nofile` limit. Keel
//! does that too while the segments fit in the budget ([`set_budget`], set by the broker from
//! its limit at start: the soft limit less the descriptors kept for connections), and beyond
//! it closes the files used least recently and opens them again on the next use: an idle
//! partition then costs no descriptor.
//!
//! - A [`LazyFile`] holds an open handle or none. [`LazyFile::get`] returns the handle
//!   (opening the file at the path the segment names, with the write cursor at its end, as
//!   appends expect) and marks the file used.
//! - Eviction is the CLOCK approximation of LRU: a hand sweeps the registered files; a file
//!   used since the hand last passed gets a second chance, the first one not used is closed.
//!   Only [`LazyFile::get`] that opens a file (and [`LazyFile::new`]) evicts, so the hot path
//!   (an open file) takes no process-wide lock.
//! - A handle handed out stays valid while its holder keeps it (an `Arc`): a flush or a log
//!   cleaning pass that runs outside the partition lock never sees its file closed under it;
//!   closing only drops the [`LazyFile`]'s own reference.
//!
//! Invariant: [`open_count`] = the `LazyFile`s holding a handle (each counted once).

use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

/// The registry of every [`LazyFile`] of the process.
struct Registry {
    /// Most files open at once; `usize::MAX` (the default) never closes one.
    budget: AtomicUsize,
    /// Files holding a handle.
    open: AtomicUsize,
    /// Files evicted since start (a gauge of the churn).
    evictions: AtomicUsize,
    clock: Mutex<Clock>,
}

/// The CLOCK ring: weak references (a dropped file is removed when the hand meets it).
struct Clock {
    files: Vec<Weak<LazyFile>>,
    hand: usize,
}

fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(|| Registry {
        budget: AtomicUsize::new(usize::MAX),
        open: AtomicUsize::new(0),
        evictions: AtomicUsize::new(0),
        clock: Mutex::new(Clock {
            files: Vec::new(),
            hand: 0,
        }),
    })
}

/// Sets the most segment files open at once in this process (at least 16).
pub fn set_budget(files: usize) {
    registry().budget.store(files.max(16), Ordering::Relaxed);
}

/// Segment files open now.
pub fn open_count() -> usize {
    registry().open.load(Ordering::Relaxed)
}

/// Segment files closed to stay within the budget since the process started.
pub fn eviction_count() -> usize {
    registry().evictions.load(Ordering::Relaxed)
}

/// A segment's data file, open or closed (see the module documentation).
#[derive(Debug)]
pub struct LazyFile {
    handle: Mutex<Option<Arc<File>>>,
    /// Used since the clock hand last passed.
    used: AtomicBool,
}

impl LazyFile {
    /// Registers `file`, just opened (or created) by the segment; may close others.
    pub fn new(file: File) -> Arc<LazyFile> {
        let lazy = Arc::new(LazyFile {
            handle: Mutex::new(Some(Arc::new(file))),
            used: AtomicBool::new(true),
        });
        let r = registry();
        r.open.fetch_add(1, Ordering::Relaxed);
        r.clock
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .files
            .push(Arc::downgrade(&lazy));
        evict_over_budget(&lazy);
        lazy
    }

    /// The open handle, opening `path` (read and write, cursor at the end) when it was
    /// closed. Errors: the open or the seek (e.g. EMFILE, the file gone).
    pub fn get(self: &Arc<Self>, path: &Path) -> std::io::Result<Arc<File>> {
        self.used.store(true, Ordering::Relaxed);
        let mut h = self.handle.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(f) = h.as_ref() {
            return Ok(f.clone());
        }
        let mut f = OpenOptions::new().read(true).write(true).open(path)?;
        f.seek(SeekFrom::End(0))?;
        let f = Arc::new(f);
        *h = Some(f.clone());
        registry().open.fetch_add(1, Ordering::Relaxed);
        drop(h);
        evict_over_budget(self);
        Ok(f)
    }

    /// Whether a handle is held.
    pub fn is_open(&self) -> bool {
        self.handle
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }

    /// Drops the handle (before the file is renamed or deleted); the next
    /// [`LazyFile::get`] opens the file again.
    pub fn close(&self) {
        if self
            .handle
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .is_some()
        {
            registry().open.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl Drop for LazyFile {
    fn drop(&mut self) {
        self.close();
    }
}

/// Closes files not used lately until the open count is within the budget (never `keep`,
/// never one whose handle is locked at the moment). Bounded: at most two turns of the hand
/// per file closed, and it stops when a whole sweep closes nothing.
fn evict_over_budget(keep: &Arc<LazyFile>) {
    let r = registry();
    while r.open.load(Ordering::Relaxed) > r.budget.load(Ordering::Relaxed) {
        let mut clock = r.clock.lock().unwrap_or_else(|e| e.into_inner());
        let mut closed = false;
        let mut steps = 2 * clock.files.len() + 1;
        while steps > 0 && !clock.files.is_empty() {
            steps -= 1;
            if clock.hand >= clock.files.len() {
                clock.hand = 0;
            }
            let at = clock.hand;
            let Some(file) = clock.files[at].upgrade() else {
                clock.files.swap_remove(at);
                continue;
            };
            clock.hand += 1;
            if Arc::ptr_eq(&file, keep) || file.used.swap(false, Ordering::Relaxed) {
                continue;
            }
            let Ok(mut h) = file.handle.try_lock() else {
                continue;
            };
            if h.take().is_some() {
                r.open.fetch_sub(1, Ordering::Relaxed);
                r.evictions.fetch_add(1, Ordering::Relaxed);
                closed = true;
                break;
            }
        }
        if !closed {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One test: the registry is process-wide.
    #[test]
    fn the_budget_bounds_open_files_and_closed_ones_reopen_at_their_end() {
        let d = tempfile::tempdir().unwrap();
        let path = |i: usize| d.path().join(format!("{i}.log"));
        let create = |i: usize| {
            let f = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .open(path(i))
                .unwrap();
            std::io::Write::write_all(&mut &f, format!("file {i};").as_bytes()).unwrap();
            LazyFile::new(f)
        };
        let base = open_count();
        set_budget(base + 16);
        let files: Vec<_> = (0..40).map(create).collect();
        assert!(open_count() <= base + 16, "{} open", open_count());
        assert!(files.iter().filter(|f| f.is_open()).count() <= 16);
        assert!(eviction_count() >= 24);
        // A closed file opens again, with appends going to its end.
        let closed = files.iter().position(|f| !f.is_open()).unwrap();
        let h = files[closed].get(&path(closed)).unwrap();
        std::io::Write::write_all(&mut &*h, b" more").unwrap();
        assert_eq!(
            std::fs::read_to_string(path(closed)).unwrap(),
            format!("file {closed}; more")
        );
        // A handle held by a caller stays usable after its file is evicted.
        for (i, f) in files.iter().enumerate() {
            f.get(&path(i)).unwrap();
        }
        assert!(
            !files[closed].is_open(),
            "used least recently: closed again"
        );
        assert!(open_count() <= base + 16);
        use std::os::unix::fs::FileExt;
        let mut buf = [0u8; 4];
        h.read_exact_at(&mut buf, 0).unwrap();
        assert_eq!(&buf, b"file");
        drop(files);
        assert_eq!(open_count(), base, "dropping the files closes them");
        set_budget(usize::MAX);
    }
}
