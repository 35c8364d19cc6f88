//! `SledDisk`: the Raft log of `__cluster_metadata` in a sled 0.34 database, the second engine
//! (`metadata_log_engine = "sled"`; the default is `super::disk::SegmentDisk`, whose module
//! doc says why).
//!
//! It offers the same operations with the same meaning as the segment files (see
//! [`super::raft_disk::RaftDisk`]): entries (opaque bytes keyed by Raft index), named values
//! and a purge point, in the directory `raft/` of a controller's `metadata_log_dir`.
//!
//! ## Layout
//! One sled tree (the default one) holds every key:
//!
//! ```text
//! "f"                    format marker: "keel-raft-sled 1"
//! "e" | index u64 BE     entry bytes (big-endian, so key order is index order)
//! "m" | name             a named value (vote, committed log id, ...)
//! "p"                    purge point u64 BE: entries <= it are no longer part of the log
//!                        (never read; each later write deletes up to 512 of them)
//! ```
//!
//! A database without the marker that holds keys was written by a Keel build before the segment
//! files (another layout) and is refused; an empty one gets the marker.
//!
//! ## Durability (DESIGN §1)
//! sled writes to its own buffers and syncs them only in the background, every 500 ms by
//! default: [`SledDisk::flush`] (sled's `flush`) is what makes a write durable, and the log
//! store calls it before it reports a vote saved, an append flushed (openraft's `LogFlushed`),
//! a truncation or a purge. Each operation is one sled batch, applied atomically and recovered
//! atomically after a crash: a reopened log holds the state after some prefix of the
//! operations, at least every flushed one. A failed flush poisons the store (as the segment
//! engine: the data it was to sync may be lost, so a retry could report it durable).
//!
//! The directory is locked with `flock` on its descriptor, like the segment engine's, so a
//! second process gets the same "locked by another process" error (sled's own lock on its `db`
//! file would say less).

use std::fs::{self, File};
use std::io;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use super::engine_files::{MAX_ENTRY_BYTES, segment_files};

/// Value of the format marker key.
const FORMAT_MARKER: &[u8] = b"keel-raft-sled 1";
const FORMAT_KEY: &[u8] = b"f";
const PURGED_KEY: &[u8] = b"p";
const ENTRY_PREFIX: u8 = b'e';
const META_PREFIX: u8 = b'm';
/// Entries below the purge point deleted per write at most (see `drop_purged_into`).
const PURGE_CHUNK: usize = 512;
/// sled's page cache, bytes. The metadata log is purged behind each snapshot, so it stays
/// small; sled's default (1 GiB) would only hold memory.
const CACHE_BYTES: u64 = 64 << 20;
/// sled's background sync interval, ms (its default). Durability never depends on it: every
/// acknowledged write was flushed explicitly.
const BACKGROUND_FLUSH_MS: u64 = 500;

/// The Raft log in a sled database. Cheap to clone: clones share one open database.
#[derive(Clone)]
pub struct SledDisk {
    db: sled::Db,
    dir: PathBuf,
    /// Serializes the read-modify-write operations (cuts, purges, appends that cut); openraft
    /// has one writer, this keeps it so for any caller.
    write: Arc<Mutex<()>>,
    /// Set when a flush failed; every later call fails with it.
    failed: Arc<Mutex<Option<String>>>,
    /// The directory, held with an exclusive lock while any clone is open.
    _lock: Arc<File>,
}

impl std::fmt::Debug for SledDisk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SledDisk").field("dir", &self.dir).finish()
    }
}

fn entry_key(index: u64) -> [u8; 9] {
    let mut k = [ENTRY_PREFIX; 9];
    k[1..].copy_from_slice(&index.to_be_bytes());
    k
}

fn meta_key(name: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(1 + name.len());
    k.push(META_PREFIX);
    k.extend_from_slice(name.as_bytes());
    k
}

/// The index of an entry key, `None` for any other key.
fn index_of(key: &[u8]) -> Option<u64> {
    match key {
        [ENTRY_PREFIX, rest @ ..] => Some(u64::from_be_bytes(rest.try_into().ok()?)),
        _ => None,
    }
}

/// The key range of entries with index in `range`.
fn key_range(range: (Bound<u64>, Bound<u64>)) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    let map = |b: Bound<u64>| match b {
        Bound::Included(i) => Bound::Included(entry_key(i).to_vec()),
        Bound::Excluded(i) => Bound::Excluded(entry_key(i).to_vec()),
        Bound::Unbounded => Bound::Unbounded,
    };
    let start = match map(range.0) {
        Bound::Unbounded => Bound::Included(vec![ENTRY_PREFIX]),
        b => b,
    };
    let end = match map(range.1) {
        Bound::Unbounded => Bound::Excluded(vec![ENTRY_PREFIX + 1]),
        b => b,
    };
    (start, end)
}

fn sled_err(dir: &Path, e: sled::Error) -> io::Error {
    let kind = match &e {
        sled::Error::Io(io) => io.kind(),
        sled::Error::Corruption { .. } | sled::Error::Unsupported(_) => io::ErrorKind::InvalidData,
        _ => io::ErrorKind::Other,
    };
    let advice = if kind == io::ErrorKind::InvalidData {
        "; restore this controller's raft/ from a backup taken while it was stopped (see the README)"
    } else {
        ""
    };
    io::Error::new(kind, format!("{} (sled): {e}{advice}", dir.display()))
}

fn decode_u64(dir: &Path, what: &str, bytes: &[u8]) -> io::Result<u64> {
    let arr: [u8; 8] = bytes.try_into().map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{} (sled): {what} is {} bytes, not 8",
                dir.display(),
                bytes.len()
            ),
        )
    })?;
    Ok(u64::from_be_bytes(arr))
}

impl SledDisk {
    /// Opens (creating if needed) the sled log in `dir`.
    ///
    /// Errors (each naming the directory): it cannot be created or read; another process
    /// holds it (`WouldBlock`); it holds the segment files of `metadata_log_engine =
    /// "segments"` or a sled database of an earlier Keel layout (`InvalidData`, there is no
    /// converter); sled reports corruption (`InvalidData`).
    pub fn open(dir: &Path) -> io::Result<Self> {
        fs::create_dir_all(dir)?;
        if let Some(what) = segment_files(dir)? {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{} holds the segment files of metadata_log_engine = \"segments\" ({what}), \
                     but this controller is configured with metadata_log_engine = \"sled\", \
                     which cannot read them (there is no converter): set \
                     metadata_log_engine = \"segments\" (see the README)",
                    dir.display()
                ),
            ));
        }
        let lock = super::engine_files::lock_log_dir(dir)?;
        let db = open_db(dir)?;
        match db.get(FORMAT_KEY).map_err(|e| sled_err(dir, e))? {
            Some(v) if v.as_ref() == FORMAT_MARKER => {}
            Some(v) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "{} (sled) has format {:?}; this build reads {:?}",
                        dir.display(),
                        String::from_utf8_lossy(&v),
                        String::from_utf8_lossy(FORMAT_MARKER)
                    ),
                ));
            }
            None if db.first().map_err(|e| sled_err(dir, e))?.is_some() => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "{} holds a sled database of an earlier Keel build (another layout), \
                         which this build cannot read (there is no converter): run the earlier \
                         build on it (see the README)",
                        dir.display()
                    ),
                ));
            }
            None => {
                db.insert(FORMAT_KEY, FORMAT_MARKER)
                    .map_err(|e| sled_err(dir, e))?;
                db.flush().map_err(|e| sled_err(dir, e))?;
            }
        }
        Ok(Self {
            db,
            dir: dir.to_path_buf(),
            write: Arc::new(Mutex::new(())),
            failed: Arc::new(Mutex::new(None)),
            _lock: Arc::new(lock),
        })
    }

    /// Fails when an earlier flush failed; otherwise the writer lock.
    fn writer(&self) -> io::Result<MutexGuard<'_, ()>> {
        self.check_failed()?;
        self.write
            .lock()
            .map_err(|_| io::Error::other("Raft log lock poisoned by a panic"))
    }

    fn check_failed(&self) -> io::Result<()> {
        let failed = self.failed.lock().unwrap_or_else(|p| p.into_inner());
        match &*failed {
            Some(e) => Err(io::Error::other(format!(
                "an earlier flush of the Raft log in {} failed ({e}); restart the controller",
                self.dir.display()
            ))),
            None => Ok(()),
        }
    }

    fn err(&self, e: sled::Error) -> io::Error {
        sled_err(&self.dir, e)
    }

    fn purged_through(&self) -> io::Result<Option<u64>> {
        match self.db.get(PURGED_KEY).map_err(|e| self.err(e))? {
            Some(v) => Ok(Some(decode_u64(&self.dir, "the purge point", &v)?)),
            None => Ok(None),
        }
    }

    /// `range` without the entries at or below the purge point, which stay in the tree until
    /// later writes drop them ([`Self::drop_purged_into`]); `None` when nothing is left of it.
    fn live(
        &self,
        range: (Bound<u64>, Bound<u64>),
    ) -> io::Result<Option<(Bound<u64>, Bound<u64>)>> {
        let Some(p) = self.purged_through()? else {
            return Ok(Some(range));
        };
        let start = match range.0 {
            Bound::Included(s) if s > p => Bound::Included(s),
            Bound::Excluded(s) if s >= p => Bound::Excluded(s),
            _ => Bound::Excluded(p),
        };
        let empty = match (start, range.1) {
            (Bound::Included(s), Bound::Included(e)) => s > e,
            (Bound::Included(s), Bound::Excluded(e)) | (Bound::Excluded(s), Bound::Included(e)) => {
                s >= e
            }
            (Bound::Excluded(s), Bound::Excluded(e)) => s.saturating_add(1) >= e,
            _ => false,
        };
        Ok((!empty).then_some((start, range.1)))
    }

    fn last_index(&self) -> io::Result<Option<u64>> {
        Ok(self.last_entry_raw()?.map(|(i, _)| i))
    }

    fn last_entry_raw(&self) -> io::Result<Option<(u64, sled::IVec)>> {
        let Some(range) = self.live((Bound::Unbounded, Bound::Unbounded))? else {
            return Ok(None);
        };
        match self.db.range(key_range(range)).next_back() {
            None => Ok(None),
            Some(kv) => {
                let (k, v) = kv.map_err(|e| self.err(e))?;
                let i = index_of(&k).expect("entry range holds entry keys");
                Ok(Some((i, v)))
            }
        }
    }

    /// Adds the removal of every live entry with index >= `from` to `batch`.
    fn cut_into(&self, batch: &mut sled::Batch, from: u64) -> io::Result<()> {
        let Some(range) = self.live((Bound::Included(from), Bound::Unbounded))? else {
            return Ok(());
        };
        for k in self.db.range(key_range(range)).keys() {
            batch.remove(k.map_err(|e| self.err(e))?);
        }
        Ok(())
    }

    /// Adds the removal of at most [`PURGE_CHUNK`] entries at or below the purge point to
    /// `batch`. A purge only records its point: deleting a snapshot's worth of entries (20,000
    /// by default) in one batch stalled the Raft core for longer than an election timeout
    /// (the quorum bench lost its leader at each snapshot), so every later write takes a
    /// bounded share.
    fn drop_purged_into(&self, batch: &mut sled::Batch, purged: Option<u64>) -> io::Result<()> {
        let Some(p) = purged else {
            return Ok(());
        };
        for k in self
            .db
            .range(key_range((Bound::Unbounded, Bound::Included(p))))
            .keys()
            .take(PURGE_CHUNK)
        {
            batch.remove(k.map_err(|e| self.err(e))?);
        }
        Ok(())
    }

    /// As [`super::raft_disk::RaftDisk::put_entries`]: contiguous ascending entries, an index
    /// at or below the last stored one cuts the log there first, entries at or below the
    /// purge point are skipped; one atomic batch, durable after [`flush`](Self::flush).
    ///
    /// Errors: indexes not contiguous, or an entry larger than [`MAX_ENTRY_BYTES`]
    /// (`InvalidInput`, nothing written); sled errors (nothing written).
    pub fn put_entries(&self, entries: impl IntoIterator<Item = (u64, Vec<u8>)>) -> io::Result<()> {
        let _w = self.writer()?;
        let purged = self.purged_through()?;
        let mut entries = entries
            .into_iter()
            .skip_while(|(i, _)| purged.is_some_and(|p| *i <= p))
            .peekable();
        let Some(&(first, _)) = entries.peek() else {
            return Ok(());
        };
        let mut batch = sled::Batch::default();
        self.drop_purged_into(&mut batch, purged)?;
        if self.last_index()?.is_some_and(|l| first <= l) {
            self.cut_into(&mut batch, first)?;
        }
        for (next, (index, bytes)) in (first..).zip(entries) {
            if index != next {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("entries not contiguous: {index} follows {}", next - 1),
                ));
            }
            if bytes.len() > MAX_ENTRY_BYTES {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "entry {index} is {} bytes, more than {MAX_ENTRY_BYTES}",
                        bytes.len()
                    ),
                ));
            }
            batch.insert(&entry_key(index)[..], bytes);
        }
        self.db.apply_batch(batch).map_err(|e| self.err(e))
    }

    /// Entries with index in `range`, in index order, at most `max` of them.
    ///
    /// Errors: sled errors.
    pub fn entries(
        &self,
        range: (Bound<u64>, Bound<u64>),
        max: usize,
    ) -> io::Result<Vec<(u64, Vec<u8>)>> {
        self.check_failed()?;
        let Some(range) = self.live(range)? else {
            return Ok(Vec::new());
        };
        self.db
            .range(key_range(range))
            .take(max)
            .map(|kv| {
                let (k, v) = kv.map_err(|e| self.err(e))?;
                Ok((
                    index_of(&k).expect("entry range holds entry keys"),
                    v.to_vec(),
                ))
            })
            .collect()
    }

    /// The entry with the highest index.
    pub fn last_entry(&self) -> io::Result<Option<(u64, Vec<u8>)>> {
        self.check_failed()?;
        Ok(self.last_entry_raw()?.map(|(i, v)| (i, v.to_vec())))
    }

    /// Removes every entry with index >= `from`; durable after [`flush`](Self::flush).
    pub fn remove_from(&self, from: u64) -> io::Result<()> {
        let _w = self.writer()?;
        let mut batch = sled::Batch::default();
        self.drop_purged_into(&mut batch, self.purged_through()?)?;
        self.cut_into(&mut batch, from)?;
        self.db.apply_batch(batch).map_err(|e| self.err(e))
    }

    /// Removes every entry with index <= `through` (the purge point only moves forward):
    /// records the purge point, after which those entries are no longer read; they are
    /// deleted by later writes, at most 512 each. Durable after
    /// [`flush`](Self::flush).
    pub fn remove_through(&self, through: u64) -> io::Result<()> {
        let _w = self.writer()?;
        let purged = self.purged_through()?;
        if purged.is_some_and(|p| p >= through) {
            return Ok(());
        }
        let mut batch = sled::Batch::default();
        self.drop_purged_into(&mut batch, purged)?;
        batch.insert(PURGED_KEY, &through.to_be_bytes()[..]);
        self.db.apply_batch(batch).map_err(|e| self.err(e))
    }

    /// Stores a named value, durable after the next [`flush`](Self::flush).
    pub fn put_meta(&self, key: &str, value: &[u8]) -> io::Result<()> {
        let _w = self.writer()?;
        self.db
            .insert(meta_key(key), value)
            .map(drop)
            .map_err(|e| self.err(e))
    }

    /// Reads a named value.
    pub fn get_meta(&self, key: &str) -> io::Result<Option<Vec<u8>>> {
        self.check_failed()?;
        Ok(self
            .db
            .get(meta_key(key))
            .map_err(|e| self.err(e))?
            .map(|v| v.to_vec()))
    }

    /// Makes every earlier write durable: sled's `flush` (its buffers written and fsynced) on
    /// a blocking thread. (`flush_async` does the same on sled's own thread pool, whose task
    /// can outlive the await by a moment and hold the database open.)
    ///
    /// Errors: sled's flush failed; the store is then poisoned.
    pub async fn flush(&self) -> io::Result<()> {
        self.check_failed()?;
        let db = self.db.clone();
        let flushed = tokio::task::spawn_blocking(move || db.flush())
            .await
            .unwrap_or_else(|e| {
                Err(sled::Error::Io(io::Error::other(format!(
                    "flush task failed: {e}"
                ))))
            });
        match flushed {
            Ok(_) => Ok(()),
            Err(e) => {
                let e = self.err(e);
                *self.failed.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.to_string());
                Err(e)
            }
        }
    }

    /// The purge point and named values, for offline reading.
    pub(super) fn purge_point(&self) -> io::Result<Option<u64>> {
        self.purged_through()
    }

    /// Every named value, for offline reading.
    pub(super) fn meta_values(&self) -> io::Result<Vec<(String, Vec<u8>)>> {
        self.db
            .scan_prefix([META_PREFIX])
            .map(|kv| {
                let (k, v) = kv.map_err(|e| self.err(e))?;
                Ok((String::from_utf8_lossy(&k[1..]).into_owned(), v.to_vec()))
            })
            .collect()
    }
}

/// Opens sled's database in `dir`, whose directory lock the caller holds.
///
/// sled also locks its `db` file, and a handle of this process that was just dropped can keep
/// that lock for a moment (sled's thread pool drops its last reference asynchronously). Since
/// the caller holds the directory lock, no other process can hold sled's: a refusal is retried
/// for at most [`LOCK_RETRY`].
fn open_db(dir: &Path) -> io::Result<sled::Db> {
    let deadline = std::time::Instant::now() + LOCK_RETRY;
    loop {
        let opened = sled::Config::new()
            .path(dir)
            .cache_capacity(CACHE_BYTES)
            .flush_every_ms(Some(BACKGROUND_FLUSH_MS))
            .mode(sled::Mode::HighThroughput)
            .open();
        match opened {
            // sled reports it as an `Other` error with this text.
            Err(sled::Error::Io(e))
                if e.to_string().contains("could not acquire lock")
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            other => return other.map_err(|e| sled_err(dir, e)),
        }
    }
}

/// How long [`open_db`] waits for this process's previous handle to release sled's lock.
const LOCK_RETRY: std::time::Duration = std::time::Duration::from_secs(2);

#[cfg(test)]
mod tests {
    use super::*;

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    fn all(d: &SledDisk) -> Vec<u64> {
        d.entries((Bound::Unbounded, Bound::Unbounded), usize::MAX)
            .unwrap()
            .into_iter()
            .map(|(i, _)| i)
            .collect()
    }

    #[test]
    fn keys_sort_by_index_and_decode() {
        assert!(entry_key(255) < entry_key(256));
        assert_eq!(index_of(&entry_key(u64::MAX)), Some(u64::MAX));
        assert_eq!(index_of(b"mvote"), None);
        assert_eq!(index_of(b"e123"), None);
    }

    #[test]
    fn appends_cuts_purges_and_values_survive_a_reopen() {
        let rt = rt();
        let dir = tempfile::tempdir().unwrap();
        let d = SledDisk::open(dir.path()).unwrap();
        d.put_entries((1..=10).map(|i| (i, vec![i as u8; 3])))
            .unwrap();
        // An overlapping append cuts first.
        d.put_entries((8..=9).map(|i| (i, vec![100 + i as u8])))
            .unwrap();
        assert_eq!(all(&d), (1..=9).collect::<Vec<_>>());
        assert_eq!(d.last_entry().unwrap(), Some((9, vec![109])));
        d.remove_from(7).unwrap();
        d.remove_through(3).unwrap();
        d.remove_through(2).unwrap(); // never moves back
        // Entries at or below the purge point are skipped.
        d.put_entries((3..=8).map(|i| (i, vec![i as u8]))).unwrap();
        d.put_meta("vote", b"v1").unwrap();
        rt.block_on(d.flush()).unwrap();
        drop(d);
        let d = SledDisk::open(dir.path()).unwrap();
        assert_eq!(all(&d), (4..=8).collect::<Vec<_>>());
        assert_eq!(d.purge_point().unwrap(), Some(3));
        assert_eq!(d.get_meta("vote").unwrap(), Some(b"v1".to_vec()));
        assert_eq!(d.get_meta("other").unwrap(), None);
        assert_eq!(
            d.entries((Bound::Excluded(4), Bound::Included(6)), 10)
                .unwrap()
                .len(),
            2
        );
        assert_eq!(
            d.meta_values().unwrap(),
            vec![("vote".into(), b"v1".to_vec())]
        );
    }

    #[test]
    fn a_purge_hides_its_entries_at_once_and_later_writes_delete_them_in_chunks() {
        let dir = tempfile::tempdir().unwrap();
        let d = SledDisk::open(dir.path()).unwrap();
        let n = PURGE_CHUNK as u64 * 2 + 10;
        d.put_entries((1..=n).map(|i| (i, vec![1]))).unwrap();
        let stored = |d: &SledDisk| d.db.scan_prefix([ENTRY_PREFIX]).count() as u64;
        d.remove_through(n - 5).unwrap();
        // Nothing below the purge point is read, whatever the range asks for.
        assert_eq!(all(&d), (n - 4..=n).collect::<Vec<_>>());
        assert!(
            d.entries((Bound::Included(1), Bound::Included(n - 5)), 9)
                .unwrap()
                .is_empty()
        );
        assert!(
            d.entries((Bound::Excluded(n - 6), Bound::Excluded(n - 4)), 9)
                .unwrap()
                .is_empty()
        );
        assert_eq!(d.last_entry().unwrap().map(|e| e.0), Some(n));
        assert_eq!(stored(&d), n, "the purge itself deletes nothing");
        // A cut below the purge point leaves the purged entries alone.
        d.remove_from(2).unwrap();
        assert_eq!(
            stored(&d),
            n - PURGE_CHUNK as u64 - 5,
            "a chunk and the 5 live ones"
        );
        assert!(all(&d).is_empty());
        assert_eq!(d.last_entry().unwrap(), None);
        d.put_entries([(n - 4, vec![2])]).unwrap();
        d.put_entries([(n - 3, vec![2])]).unwrap();
        assert_eq!(stored(&d), 2, "three writes dropped every purged entry");
        assert_eq!(all(&d), vec![n - 4, n - 3]);
    }

    #[test]
    fn bad_batches_write_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let d = SledDisk::open(dir.path()).unwrap();
        d.put_entries([(1, vec![1])]).unwrap();
        let e = d.put_entries([(2, vec![2]), (4, vec![4])]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert!(e.to_string().contains("not contiguous: 4 follows 2"), "{e}");
        let e = d
            .put_entries([(2, vec![0; MAX_ENTRY_BYTES + 1])])
            .unwrap_err();
        assert!(e.to_string().contains("more than"), "{e}");
        assert_eq!(all(&d), vec![1]);
    }

    #[test]
    fn a_second_open_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let _d = SledDisk::open(dir.path()).unwrap();
        let e = SledDisk::open(dir.path()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
    }

    #[test]
    fn a_sled_database_of_another_layout_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        {
            let db = sled::open(dir.path()).unwrap();
            db.insert(b"log/1", b"x").unwrap();
            db.flush().unwrap();
        }
        let e = SledDisk::open(dir.path()).unwrap_err();
        assert!(e.to_string().contains("earlier Keel build"), "{e}");
    }
}
