//! `RaftDisk`: the Raft log's bytes on disk, in the engine `metadata_log_engine` names.
//!
//! Both engines hold the same things with the same meaning: entries (opaque bytes keyed by Raft
//! index), named values (the vote, the committed log id, ...) and a purge point; a write is
//! durable only after [`RaftDisk::flush`] returned (DESIGN §1: the log store flushes before it
//! reports a vote saved or an append done). [`super::log_store`] gives the bytes their meaning
//! and never knows which engine it runs on.
//!
//! - [`LogEngine::Segments`] (default): Keel's own segment files ([`super::disk`]).
//! - [`LogEngine::Sled`]: a sled 0.34 database ([`super::sled_disk`]).
//!
//! An engine refuses a directory the other wrote, naming the setting (there is no converter).

use std::io;
use std::ops::Bound;
use std::path::Path;

use super::disk::{DEFAULT_SEGMENT_BYTES, SegmentDisk};
use super::sled_disk::SledDisk;

/// Which storage holds the Raft log (`metadata_log_engine`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LogEngine {
    /// Keel's own segment files: append, fsync, cut the tail, drop the head (the default; the
    /// controller bench's rows compare the two).
    #[default]
    Segments,
    /// A sled 0.34.7 database (the engine the project's card names).
    Sled,
}

impl LogEngine {
    /// The setting's word for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Segments => "segments",
            Self::Sled => "sled",
        }
    }
}

impl std::fmt::Display for LogEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for LogEngine {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "segments" => Ok(Self::Segments),
            "sled" => Ok(Self::Sled),
            other => Err(format!("{other:?} is not one of \"segments\", \"sled\"")),
        }
    }
}

impl keel_runtime::settings::FromValue for LogEngine {
    fn from_value(v: &keel_runtime::settings::Value) -> Option<Self> {
        String::from_value(v)?.parse().ok()
    }
}

/// How to open a [`RaftDisk`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiskOptions {
    /// The engine (`metadata_log_engine`).
    pub engine: LogEngine,
    /// Segment engine only: a new segment starts once the active one holds at least this many
    /// bytes (`metadata_log_segment_bytes`).
    pub segment_bytes: u64,
}

impl Default for DiskOptions {
    fn default() -> Self {
        Self {
            engine: LogEngine::Segments,
            segment_bytes: DEFAULT_SEGMENT_BYTES,
        }
    }
}

impl DiskOptions {
    /// The default options with `engine`.
    pub fn engine(engine: LogEngine) -> Self {
        Self {
            engine,
            ..Self::default()
        }
    }
}

/// The Raft log's storage, in either engine. Cheap to clone: clones share one open log (reads
/// may run from any clone while one writer appends).
#[derive(Debug, Clone)]
pub enum RaftDisk {
    /// Segment files.
    Segments(SegmentDisk),
    /// A sled database.
    Sled(SledDisk),
}

impl RaftDisk {
    /// Opens (creating if needed) a segment-file log in `dir` with default options.
    ///
    /// Errors: see [`open_with`](Self::open_with).
    pub fn open(dir: &Path) -> io::Result<Self> {
        Self::open_with(dir, DiskOptions::default())
    }

    /// Opens (creating if needed) the log in `dir` with `options.engine`, recovering it.
    ///
    /// Errors (each naming the directory or file): it cannot be created or read; another
    /// process holds it (`WouldBlock`); it holds the other engine's files (`InvalidData`,
    /// naming the setting); it is corrupt (`InvalidData`). See [`SegmentDisk::open_with`] and
    /// [`SledDisk::open`].
    pub fn open_with(dir: &Path, options: DiskOptions) -> io::Result<Self> {
        Ok(match options.engine {
            LogEngine::Segments => {
                Self::Segments(SegmentDisk::open_with(dir, options.segment_bytes)?)
            }
            LogEngine::Sled => Self::Sled(SledDisk::open(dir)?),
        })
    }

    /// The engine this log is in.
    pub fn engine(&self) -> LogEngine {
        match self {
            Self::Segments(_) => LogEngine::Segments,
            Self::Sled(_) => LogEngine::Sled,
        }
    }

    /// Appends entries `(index, bytes)`, which must be contiguous and ascending. An index at
    /// or below the last stored one first cuts the log there (as [`remove_from`]); an index
    /// past the end leaves a gap; entries at or below the purge point are skipped (a snapshot
    /// holds them). Not durable until [`flush`](Self::flush).
    ///
    /// Errors: indexes not contiguous, or an entry larger than
    /// [`MAX_ENTRY_BYTES`](super::disk::MAX_ENTRY_BYTES) (`InvalidInput`, nothing written);
    /// I/O errors (nothing visible).
    ///
    /// [`remove_from`]: Self::remove_from
    pub fn put_entries(&self, entries: impl IntoIterator<Item = (u64, Vec<u8>)>) -> io::Result<()> {
        match self {
            Self::Segments(d) => d.put_entries(entries),
            Self::Sled(d) => d.put_entries(entries),
        }
    }

    /// Entries with index in `range`, in index order. At most `max` entries are returned.
    ///
    /// Errors: I/O, or a record that no longer matches its checksum (`InvalidData`).
    pub fn entries(
        &self,
        range: (Bound<u64>, Bound<u64>),
        max: usize,
    ) -> io::Result<Vec<(u64, Vec<u8>)>> {
        match self {
            Self::Segments(d) => d.entries(range, max),
            Self::Sled(d) => d.entries(range, max),
        }
    }

    /// The entry with the highest index.
    pub fn last_entry(&self) -> io::Result<Option<(u64, Vec<u8>)>> {
        match self {
            Self::Segments(d) => d.last_entry(),
            Self::Sled(d) => d.last_entry(),
        }
    }

    /// Removes every entry with index >= `from`; durable after [`flush`](Self::flush).
    pub fn remove_from(&self, from: u64) -> io::Result<()> {
        match self {
            Self::Segments(d) => d.remove_from(from),
            Self::Sled(d) => d.remove_from(from),
        }
    }

    /// Removes every entry with index <= `through` (the purge point only moves forward);
    /// durable after [`flush`](Self::flush).
    pub fn remove_through(&self, through: u64) -> io::Result<()> {
        match self {
            Self::Segments(d) => d.remove_through(through),
            Self::Sled(d) => d.remove_through(through),
        }
    }

    /// Stores a named value, durable after the next [`flush`](Self::flush).
    pub fn put_meta(&self, key: &str, value: &[u8]) -> io::Result<()> {
        match self {
            Self::Segments(d) => d.put_meta(key, value),
            Self::Sled(d) => d.put_meta(key, value),
        }
    }

    /// Reads a named value.
    pub fn get_meta(&self, key: &str) -> io::Result<Option<Vec<u8>>> {
        match self {
            Self::Segments(d) => d.get_meta(key),
            Self::Sled(d) => d.get_meta(key),
        }
    }

    /// Makes every earlier write durable; returns after the data is on disk.
    ///
    /// Errors: the first sync that failed; the store is then poisoned (every later call
    /// fails: the kernel may have dropped the unsynced pages).
    pub async fn flush(&self) -> io::Result<()> {
        match self {
            Self::Segments(d) => d.flush().await,
            Self::Sled(d) => d.flush().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_engine_refuses_the_others_directory_naming_the_setting() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let sled = tempfile::tempdir().unwrap();
        drop(SledDisk::open(sled.path()).unwrap());
        let e = SegmentDisk::open(sled.path()).unwrap_err();
        assert!(
            e.to_string().contains("set metadata_log_engine = \"sled\""),
            "{e}"
        );
        let seg = tempfile::tempdir().unwrap();
        let s = SegmentDisk::open(seg.path()).unwrap();
        s.put_entries([(1, vec![1])]).unwrap();
        rt.block_on(s.flush()).unwrap();
        drop(s);
        let e = SledDisk::open(seg.path()).unwrap_err();
        assert!(
            e.to_string()
                .contains("set metadata_log_engine = \"segments\""),
            "{e}"
        );
        for engine in [LogEngine::Segments, LogEngine::Sled] {
            assert_eq!(engine.as_str().parse::<LogEngine>(), Ok(engine));
        }
        assert!(
            "rocksdb"
                .parse::<LogEngine>()
                .unwrap_err()
                .contains("\"segments\", \"sled\"")
        );
    }
}
