//! Atomic small-file writes and Kafka's text checkpoint format
//! (`org.apache.kafka.server.common.CheckpointFile`): a version line, a count line, then one
//! entry per line. Used for `replication-offset-checkpoint`, `recovery-point-offset-checkpoint`
//! and (with `epoch offset` entries) `leader-epoch-checkpoint`.
//!
//! Durability: a checkpoint is written to `<name>.tmp`, fsynced, renamed over `<name>`, and the
//! directory is fsynced, so after a crash either the old or the new file is present, whole.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use super::error::{LogError, LogResult, io_err};

/// Per-partition cleaner checkpoint file (Kafka's per-log-dir `cleaner-offset-checkpoint`):
/// written by the log cleaner, read by the log at open (it marks a log that may have offset
/// gaps).
pub const CLEANER_CHECKPOINT: &str = "cleaner-offset-checkpoint";

/// Per-partition log start offset file (Kafka's per-log-dir `log-start-offset-checkpoint`):
/// written, fsynced, when the log start offset moves inside the first segment (DeleteRecords,
/// KIP-107, or a follower taking its leader's start); read at open, where the start is the
/// larger of it and the first segment's base offset.
pub const LOG_START_OFFSET_CHECKPOINT: &str = "log-start-offset-checkpoint";

/// Version written in the first line of every checkpoint file.
pub const CHECKPOINT_VERSION: u32 = 0;

/// A topic partition: topic name and partition index.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TopicPartition {
    /// Topic name (no whitespace; Kafka topic names are `[a-zA-Z0-9._-]`).
    pub topic: String,
    /// Partition index.
    pub partition: i32,
}

impl std::fmt::Display for TopicPartition {
    /// `<topic>-<partition>`, Kafka's notation.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

impl TopicPartition {
    /// Builds a topic partition.
    pub fn new(topic: impl Into<String>, partition: i32) -> Self {
        Self {
            topic: topic.into(),
            partition,
        }
    }

    /// The directory name `<topic>-<partition>`.
    pub fn dir_name(&self) -> String {
        format!("{}-{}", self.topic, self.partition)
    }

    /// Parses a directory name `<topic>-<partition>` (split at the last `-`).
    pub fn from_dir_name(name: &str) -> Option<Self> {
        let (topic, partition) = name.rsplit_once('-')?;
        if topic.is_empty() {
            return None;
        }
        Some(Self::new(topic, partition.parse().ok()?))
    }
}

/// fsyncs a directory so a rename or create/delete inside it is durable
/// ([`keel_runtime::fs::fsync_dir`]).
pub fn fsync_dir(dir: &Path) -> LogResult<()> {
    Ok(keel_runtime::fs::fsync_dir(dir)?)
}

/// Makes every write of the file system holding `dir` durable (Linux `syncfs(2)`): one call
/// for what would otherwise be thousands of file and directory fsyncs (the leader epoch
/// checkpoints of a broker taking over many leaderships at once). It also writes back every
/// other dirty page of that file system, so it is used for batches only.
pub fn sync_file_system(dir: &Path) -> LogResult<()> {
    let f = std::fs::File::open(dir).map_err(io_err(dir))?;
    rustix::fs::syncfs(&f).map_err(|e| io_err(dir)(std::io::Error::from(e)))
}

/// Writes `contents` to `path` atomically ([`keel_runtime::fs::write_atomic`]: temp file,
/// fsync, rename, fsync of the directory).
pub fn write_atomically(path: &Path, contents: &[u8]) -> LogResult<()> {
    Ok(keel_runtime::fs::write_atomic(path, contents)?)
}

/// Writes `contents` to `path` through `<path>.tmp` and a rename, without any fsync
/// ([`keel_runtime::fs::write_replaceable`]): for files whose loss or corruption after a crash
/// is detected and tolerated by their reader (the CRC-checked producer-state snapshots: a bad
/// one is deleted and the state rebuilt from an older snapshot or the log).
pub fn write_replaceable(path: &Path, contents: &[u8]) -> LogResult<()> {
    Ok(keel_runtime::fs::write_replaceable(path, contents)?)
}

/// Overwrites `path` with `contents` in place, without any fsync
/// ([`keel_runtime::fs::overwrite_in_place`]): for files whose reader detects a torn file and
/// rebuilds it, and whose contents a later sync makes durable before they matter (the leader
/// epoch checkpoint's staged and retention rewrites).
pub fn overwrite_in_place(path: &Path, contents: &[u8]) -> LogResult<()> {
    Ok(keel_runtime::fs::overwrite_in_place(path, contents)?)
}

pub use keel_runtime::fs::tmp_path;

/// Line number (1-based) in the file of entry `index` returned by
/// [`read_checkpoint_lines`] (entries follow the version and count lines).
pub fn entry_line_number(index: usize) -> usize {
    index + 3
}

/// Reads a checkpoint file's entry lines after checking the version and count lines.
/// Returns `Ok(None)` if the file does not exist. Bytes that are not UTF-8 make the file
/// malformed (`MalformedFile` naming the line), not an I/O error.
pub fn read_checkpoint_lines(path: &Path) -> LogResult<Option<Vec<String>>> {
    let data = match fs::read(path) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err(path)(e)),
    };
    let bad = |reason: String| LogError::MalformedFile {
        path: path.to_path_buf(),
        reason,
    };
    let text = std::str::from_utf8(&data).map_err(|e| {
        let line = 1 + data[..e.valid_up_to()]
            .iter()
            .filter(|b| **b == b'\n')
            .count();
        bad(format!("line {line} is not valid UTF-8"))
    })?;
    let mut lines = text.lines();
    let version = lines
        .next()
        .ok_or_else(|| bad("missing version line".into()))?;
    if version.trim().parse::<u32>().ok() != Some(CHECKPOINT_VERSION) {
        return Err(bad(format!("unsupported version {version:?}")));
    }
    let count: usize = lines
        .next()
        .and_then(|l| l.trim().parse().ok())
        .ok_or_else(|| bad("missing or bad count line".into()))?;
    let entries: Vec<String> = lines.map(str::to_owned).collect();
    if entries.len() != count {
        return Err(bad(format!(
            "count line says {count}, found {} entries",
            entries.len()
        )));
    }
    Ok(Some(entries))
}

/// Formats a checkpoint file from entry lines.
pub fn format_checkpoint(entries: &[String]) -> String {
    let mut s = format!("{CHECKPOINT_VERSION}\n{}\n", entries.len());
    for e in entries {
        s.push_str(e);
        s.push('\n');
    }
    s
}

/// A per-data-dir offset checkpoint: `topic partition offset` lines (Kafka
/// `OffsetCheckpointFile`), used for the HW (`replication-offset-checkpoint`) and the
/// recovery point (`recovery-point-offset-checkpoint`).
#[derive(Debug, Clone)]
pub struct OffsetCheckpointFile {
    path: PathBuf,
}

impl OffsetCheckpointFile {
    /// The checkpoint at `path` (not read until [`OffsetCheckpointFile::read`]).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }

    /// The file path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes all offsets atomically, replacing the previous file.
    pub fn write(&self, offsets: &BTreeMap<TopicPartition, i64>) -> LogResult<()> {
        let entries: Vec<String> = offsets
            .iter()
            .map(|(tp, off)| format!("{} {} {}", tp.topic, tp.partition, off))
            .collect();
        write_atomically(&self.path, format_checkpoint(&entries).as_bytes())
    }

    /// Reads the offsets; a missing file is an empty map, a malformed one an error.
    pub fn read(&self) -> LogResult<BTreeMap<TopicPartition, i64>> {
        let Some(lines) = read_checkpoint_lines(&self.path)? else {
            return Ok(BTreeMap::new());
        };
        let mut out = BTreeMap::new();
        for (i, line) in lines.into_iter().enumerate() {
            let bad = || LogError::MalformedFile {
                path: self.path.clone(),
                reason: format!("line {}: bad entry {line:?}", entry_line_number(i)),
            };
            let mut parts = line.split_whitespace();
            let (Some(topic), Some(p), Some(o), None) =
                (parts.next(), parts.next(), parts.next(), parts.next())
            else {
                return Err(bad());
            };
            let partition = p.parse().map_err(|_| bad())?;
            let offset = o.parse().map_err(|_| bad())?;
            out.insert(TopicPartition::new(topic, partition), offset);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_checkpoint_round_trip_and_format() {
        let dir = tempfile::tempdir().unwrap();
        let f = OffsetCheckpointFile::new(dir.path().join("replication-offset-checkpoint"));
        assert!(f.read().unwrap().is_empty());
        let mut m = BTreeMap::new();
        m.insert(TopicPartition::new("orders", 0), 42);
        m.insert(TopicPartition::new("a-b", 3), 7);
        f.write(&m).unwrap();
        assert_eq!(f.read().unwrap(), m);
        let text = fs::read_to_string(f.path()).unwrap();
        assert_eq!(text, "0\n2\na-b 3 7\norders 0 42\n");
        assert!(!tmp_path(f.path()).exists());
        fs::write(f.path(), "0\n3\na 1 2\n").unwrap();
        assert!(matches!(f.read(), Err(LogError::MalformedFile { .. })));
    }

    #[test]
    fn dir_names() {
        let tp = TopicPartition::from_dir_name("my-topic-12").unwrap();
        assert_eq!(tp, TopicPartition::new("my-topic", 12));
        assert_eq!(tp.dir_name(), "my-topic-12");
        assert!(TopicPartition::from_dir_name("nodash").is_none());
        assert!(TopicPartition::from_dir_name("-1").is_none());
    }
}
