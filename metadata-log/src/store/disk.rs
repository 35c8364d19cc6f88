//! `RaftDisk`: the key-value engine under the Raft log, behind Keel's own type.
//!
//! sled (0.34) today; nothing outside this file names sled, so another engine can replace it.
//! Two trees: `log` (entry index as big-endian u64 -> encoded entry, so key order is index
//! order) and `meta` (vote, committed, last purged).
//!
//! Durability: sled only syncs in the background (every 500 ms by default). Every write that
//! Raft relies on must be followed by [`RaftDisk::flush`] before it is reported done
//! (DESIGN §1); the callers in `log_store.rs` do that.

use std::io;
use std::ops::Bound;
use std::path::Path;

/// The Raft log's key-value storage. Cheap to clone (shared handles).
#[derive(Clone)]
pub struct RaftDisk {
    db: sled::Db,
    log: sled::Tree,
    meta: sled::Tree,
}

impl std::fmt::Debug for RaftDisk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RaftDisk")
            .field("entries", &self.log.len())
            .finish()
    }
}

impl RaftDisk {
    /// Opens (creating if needed) the database in `dir`.
    ///
    /// Errors: the directory cannot be created, or the database is corrupt or locked by
    /// another process.
    pub fn open(dir: &Path) -> io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let db = sled::Config::new().path(dir).open().map_err(to_io)?;
        let log = db.open_tree("log").map_err(to_io)?;
        let meta = db.open_tree("meta").map_err(to_io)?;
        Ok(Self { db, log, meta })
    }

    /// Writes entries `(index, bytes)` atomically (all or none become visible). Not durable
    /// until [`flush`](Self::flush).
    pub fn put_entries(&self, entries: impl IntoIterator<Item = (u64, Vec<u8>)>) -> io::Result<()> {
        let mut batch = sled::Batch::default();
        for (index, bytes) in entries {
            batch.insert(&index.to_be_bytes(), bytes);
        }
        self.log.apply_batch(batch).map_err(to_io)
    }

    /// Entries with index in `range`, in index order. At most `max` entries are returned.
    pub fn entries(
        &self,
        range: (Bound<u64>, Bound<u64>),
        max: usize,
    ) -> io::Result<Vec<(u64, Vec<u8>)>> {
        let key = |b: Bound<u64>| b.map(|i| i.to_be_bytes());
        let mut out = Vec::new();
        for item in self.log.range((key(range.0), key(range.1))).take(max) {
            let (k, v) = item.map_err(to_io)?;
            out.push((index_of(&k)?, v.to_vec()));
        }
        Ok(out)
    }

    /// The entry with the highest index.
    pub fn last_entry(&self) -> io::Result<Option<(u64, Vec<u8>)>> {
        match self.log.last().map_err(to_io)? {
            Some((k, v)) => Ok(Some((index_of(&k)?, v.to_vec()))),
            None => Ok(None),
        }
    }

    /// Removes every entry with index >= `from`. Not durable until `flush`. Bounded by the
    /// number of entries present.
    pub fn remove_from(&self, from: u64) -> io::Result<()> {
        self.remove_range((Bound::Included(from), Bound::Unbounded))
    }

    /// Removes every entry with index <= `through`. Not durable until `flush`.
    pub fn remove_through(&self, through: u64) -> io::Result<()> {
        self.remove_range((Bound::Unbounded, Bound::Included(through)))
    }

    fn remove_range(&self, range: (Bound<u64>, Bound<u64>)) -> io::Result<()> {
        let key = |b: Bound<u64>| b.map(|i| i.to_be_bytes());
        let mut batch = sled::Batch::default();
        for item in self.log.range((key(range.0), key(range.1))) {
            let (k, _) = item.map_err(to_io)?;
            batch.remove(k);
        }
        self.log.apply_batch(batch).map_err(to_io)
    }

    /// Stores a metadata value. Not durable until `flush`.
    pub fn put_meta(&self, key: &str, value: &[u8]) -> io::Result<()> {
        self.meta.insert(key, value).map(|_| ()).map_err(to_io)
    }

    /// Reads a metadata value.
    pub fn get_meta(&self, key: &str) -> io::Result<Option<Vec<u8>>> {
        Ok(self.meta.get(key).map_err(to_io)?.map(|v| v.to_vec()))
    }

    /// Makes every write so far durable (fsync). Returns after the data is on disk.
    pub async fn flush(&self) -> io::Result<()> {
        self.db.flush_async().await.map(|_| ()).map_err(to_io)
    }
}

fn index_of(key: &[u8]) -> io::Result<u64> {
    key.try_into().map(u64::from_be_bytes).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("log key of {} bytes", key.len()),
        )
    })
}

fn to_io(e: sled::Error) -> io::Error {
    e.into()
}
