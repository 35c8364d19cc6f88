//! Sparse per-segment indexes (Kafka `OffsetIndex` and `TimeIndex`), held in memory and
//! written whole to `.index` / `.timeindex` files when the segment is rolled, flushed or
//! closed. On load a file is validated and, if it is missing or inconsistent, the caller
//! rebuilds it by scanning the segment. Files use Kafka's entry layouts: offset index
//! entries are (relative offset u32, position u32), time index entries are (timestamp i64,
//! relative offset u32), all big-endian.
//!
//! Invariants: offset index entries have strictly increasing relative offsets and
//! positions; each entry points at the start of a batch whose base offset it names. Time
//! index entries have strictly increasing timestamps and non-decreasing relative offsets;
//! an entry (t, o) means the batch at `o` has max timestamp t and no earlier batch of the
//! segment has a larger one.

use std::fs;
use std::path::Path;

use super::checkpoint::write_replaceable;
use super::error::{LogResult, io_err};

/// One offset index entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetEntry {
    /// Batch base offset minus the segment base offset.
    pub relative_offset: u32,
    /// Byte position of that batch in the segment file.
    pub position: u32,
}

/// Sparse map from offset to file position for one segment.
#[derive(Debug, Default, Clone)]
pub struct OffsetIndex {
    entries: Vec<OffsetEntry>,
}

impl OffsetIndex {
    /// Adds an entry for a batch starting at `relative_offset` and `position`.
    pub fn append(&mut self, relative_offset: u32, position: u32) {
        debug_assert!(
            self.entries
                .last()
                .is_none_or(|l| { l.relative_offset < relative_offset && l.position < position })
        );
        self.entries.push(OffsetEntry {
            relative_offset,
            position,
        });
    }

    /// The entry with the largest relative offset <= `relative_offset`, else None.
    pub fn lookup(&self, relative_offset: u32) -> Option<OffsetEntry> {
        let i = self
            .entries
            .partition_point(|e| e.relative_offset <= relative_offset);
        i.checked_sub(1).map(|i| self.entries[i])
    }

    /// Removes entries for batches at or after `relative_offset`.
    pub fn truncate_to(&mut self, relative_offset: u32) {
        let keep = self
            .entries
            .partition_point(|e| e.relative_offset < relative_offset);
        self.entries.truncate(keep);
    }

    /// The last entry.
    pub fn last(&self) -> Option<OffsetEntry> {
        self.entries.last().copied()
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the index is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Replaces the index file (`<path>.tmp` and a rename), without fsync: the caller makes
    /// it durable with the next flush of its log ([`crate::log::Log::begin_flush`]). A crash
    /// before that leaves the old file, none, or a shorter one, which the load validates
    /// (rebuilt when invalid).
    pub fn write(&self, path: &Path) -> LogResult<()> {
        let mut buf = Vec::with_capacity(self.entries.len() * 8);
        for e in &self.entries {
            buf.extend_from_slice(&e.relative_offset.to_be_bytes());
            buf.extend_from_slice(&e.position.to_be_bytes());
        }
        write_replaceable(path, &buf)
    }

    /// Reads an index file; `Ok(None)` if it is missing or fails the structural checks
    /// (size a multiple of 8, strictly increasing, positions < `segment_size_bytes`).
    pub fn read(path: &Path, segment_size_bytes: u64) -> LogResult<Option<OffsetIndex>> {
        let Some(data) = read_optional(path)? else {
            return Ok(None);
        };
        if data.len() % 8 != 0 {
            return Ok(None);
        }
        let mut idx = OffsetIndex {
            entries: Vec::with_capacity(data.len() / 8),
        };
        for c in data.chunks_exact(8) {
            let relative_offset = u32::from_be_bytes([c[0], c[1], c[2], c[3]]);
            let position = u32::from_be_bytes([c[4], c[5], c[6], c[7]]);
            let ordered = idx
                .entries
                .last()
                .is_none_or(|l| l.relative_offset < relative_offset && l.position < position);
            if !ordered || position as u64 >= segment_size_bytes {
                return Ok(None);
            }
            idx.entries.push(OffsetEntry {
                relative_offset,
                position,
            });
        }
        Ok(Some(idx))
    }
}

/// One time index entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeEntry {
    /// Max timestamp so far in the segment (ms).
    pub timestamp_ms: i64,
    /// Relative base offset of the batch carrying it.
    pub relative_offset: u32,
}

/// Sparse map from timestamp to offset for one segment.
#[derive(Debug, Default, Clone)]
pub struct TimeIndex {
    entries: Vec<TimeEntry>,
}

impl TimeIndex {
    /// Adds an entry if `timestamp_ms` is larger than the last one.
    pub fn maybe_append(&mut self, timestamp_ms: i64, relative_offset: u32) {
        if self
            .entries
            .last()
            .is_none_or(|l| l.timestamp_ms < timestamp_ms)
        {
            debug_assert!(
                self.entries
                    .last()
                    .is_none_or(|l| l.relative_offset <= relative_offset)
            );
            self.entries.push(TimeEntry {
                timestamp_ms,
                relative_offset,
            });
        }
    }

    /// The last entry with a timestamp < `timestamp_ms`: every batch before its offset has
    /// a max timestamp < `timestamp_ms`, so a search can start there.
    pub fn lookup_before(&self, timestamp_ms: i64) -> Option<TimeEntry> {
        let i = self
            .entries
            .partition_point(|e| e.timestamp_ms < timestamp_ms);
        i.checked_sub(1).map(|i| self.entries[i])
    }

    /// Removes entries for batches at or after `relative_offset`.
    pub fn truncate_to(&mut self, relative_offset: u32) {
        let keep = self
            .entries
            .partition_point(|e| e.relative_offset < relative_offset);
        self.entries.truncate(keep);
    }

    /// The last entry.
    pub fn last(&self) -> Option<TimeEntry> {
        self.entries.last().copied()
    }

    /// Replaces the index file (`<path>.tmp` and a rename), without fsync: the caller makes
    /// it durable with the next flush of its log ([`crate::log::Log::begin_flush`]). A crash
    /// before that leaves the old file, none, or a shorter one, which the load validates
    /// (rebuilt when invalid).
    pub fn write(&self, path: &Path) -> LogResult<()> {
        let mut buf = Vec::with_capacity(self.entries.len() * 12);
        for e in &self.entries {
            buf.extend_from_slice(&e.timestamp_ms.to_be_bytes());
            buf.extend_from_slice(&e.relative_offset.to_be_bytes());
        }
        write_replaceable(path, &buf)
    }

    /// Reads a time index file; `Ok(None)` if missing or structurally invalid (relative
    /// offsets must be < `max_relative_offset_exclusive`).
    pub fn read(path: &Path, max_relative_offset_exclusive: u64) -> LogResult<Option<TimeIndex>> {
        let Some(data) = read_optional(path)? else {
            return Ok(None);
        };
        if data.len() % 12 != 0 {
            return Ok(None);
        }
        let mut idx = TimeIndex {
            entries: Vec::with_capacity(data.len() / 12),
        };
        for c in data.chunks_exact(12) {
            let mut ts = [0u8; 8];
            ts.copy_from_slice(&c[..8]);
            let timestamp_ms = i64::from_be_bytes(ts);
            let relative_offset = u32::from_be_bytes([c[8], c[9], c[10], c[11]]);
            let ordered = idx.entries.last().is_none_or(|l| {
                l.timestamp_ms < timestamp_ms && l.relative_offset <= relative_offset
            });
            if !ordered || relative_offset as u64 >= max_relative_offset_exclusive {
                return Ok(None);
            }
            idx.entries.push(TimeEntry {
                timestamp_ms,
                relative_offset,
            });
        }
        Ok(Some(idx))
    }
}

fn read_optional(path: &Path) -> LogResult<Option<Vec<u8>>> {
    match fs::read(path) {
        Ok(d) => Ok(Some(d)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_err(path)(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_truncate_and_file_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let mut idx = OffsetIndex::default();
        idx.append(0, 0);
        idx.append(10, 4096);
        idx.append(25, 9000);
        assert_eq!(idx.lookup(9).unwrap().position, 0);
        assert_eq!(idx.lookup(10).unwrap().position, 4096);
        assert_eq!(idx.lookup(100).unwrap().position, 9000);
        let p = dir.path().join("0.index");
        idx.write(&p).unwrap();
        let back = OffsetIndex::read(&p, 10_000).unwrap().unwrap();
        assert_eq!(back.len(), 3);
        assert!(
            OffsetIndex::read(&p, 9000).unwrap().is_none(),
            "position past the end"
        );
        idx.truncate_to(10);
        assert_eq!(idx.len(), 1);
        fs::write(&p, [1, 2, 3]).unwrap();
        assert!(OffsetIndex::read(&p, 10_000).unwrap().is_none());

        let mut t = TimeIndex::default();
        t.maybe_append(100, 0);
        t.maybe_append(90, 3);
        t.maybe_append(200, 5);
        assert_eq!(t.lookup_before(150).unwrap().relative_offset, 0);
        assert_eq!(t.lookup_before(100), None);
        assert_eq!(t.lookup_before(201).unwrap().relative_offset, 5);
        let tp = dir.path().join("0.timeindex");
        t.write(&tp).unwrap();
        assert_eq!(TimeIndex::read(&tp, 6).unwrap().unwrap().last(), t.last());
        assert!(TimeIndex::read(&tp, 5).unwrap().is_none());
    }
}
