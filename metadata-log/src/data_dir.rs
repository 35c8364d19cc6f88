//! Pieces shared by the data directories of controllers and brokers: the exclusive lock a
//! process holds on its directory, and the `key=value` format of `meta.properties`.
//!
//! Kafka has one `MetaProperties` class for every log directory and `LogManager` locks each
//! directory (`.lock`, `FileLock.tryLock`). Keel's controller (`keel-controller`'s
//! `meta_properties` and the Raft log's `raft/` directory) and broker (`keel-broker`'s
//! `log_dir`) keep different keys in the file, so each crate owns its keys and checks; the
//! file syntax and the lock live here, below both crates (DESIGN §1).

use std::collections::BTreeMap;
use std::fs::{File, TryLockError};
use std::io;
use std::path::Path;

/// Takes the exclusive lock of directory `dir` (`flock(LOCK_EX | LOCK_NB)` on a descriptor of
/// the directory itself, [`File::try_lock`]); held until the returned [`File`] is dropped,
/// i.e. for the life of the process when the caller keeps it. The directory is locked rather
/// than a `.lock` file inside it (Kafka's way) because a directory cannot be deleted from
/// under its holder the way a lock file can.
///
/// Returns `Ok(None)` when another open descriptor holds the lock (another process, or the
/// same process through another descriptor).
///
/// Errors: `dir` cannot be opened (missing, not a directory, no permission) or the lock call
/// fails for another reason than contention.
pub fn try_lock_dir(dir: &Path) -> io::Result<Option<File>> {
    let file = File::open(dir)?;
    match file.try_lock() {
        Ok(()) => Ok(Some(file)),
        Err(TryLockError::WouldBlock) => Ok(None),
        Err(TryLockError::Error(e)) => Err(e),
    }
}

/// Parses the subset of Java properties `meta.properties` uses: one `key=value` per line,
/// blank lines and lines starting with `#` ignored, whitespace around keys and values
/// trimmed. Keys are returned in a map; unknown keys are kept for the caller to ignore
/// (Kafka's `MetaProperties` keeps them too, for forward compatibility).
///
/// Errors (the problem in words; the caller adds the path): a non-comment line without `=`
/// (the line is cut to 64 characters with [`keel_proto::limits::clip`]), or a key that
/// appears twice.
pub fn parse_properties(text: &str) -> Result<BTreeMap<String, String>, String> {
    let mut kv = BTreeMap::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (k, v) = line
            .split_once('=')
            .ok_or_else(|| format!("line `{}` is not key=value", keel_proto::limits::clip(line)))?;
        let k = k.trim();
        if kv.insert(k.to_string(), v.trim().to_string()).is_some() {
            return Err(format!("key {} appears twice", keel_proto::limits::clip(k)));
        }
    }
    Ok(kv)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_parse_skips_comments_and_trims() {
        let kv = parse_properties("# c\n\n version = 1 \nnode.id=3\nempty=\n").unwrap();
        assert_eq!(kv.len(), 3);
        assert_eq!(kv["version"], "1");
        assert_eq!(kv["node.id"], "3");
        assert_eq!(kv["empty"], "");
    }

    #[test]
    fn properties_parse_refuses_lines_without_equals_and_repeated_keys() {
        let e = parse_properties("version=1\nnode_id\n").unwrap_err();
        assert!(e.contains("line `node_id` is not key=value"), "{e}");
        let e = parse_properties("a=1\n a =2\n").unwrap_err();
        assert_eq!(e, "key a appears twice");
        let long = "x".repeat(10_000);
        let e = parse_properties(&long).unwrap_err();
        assert!(e.len() < 200, "echoed input is clipped: {} chars", e.len());
    }

    #[test]
    fn a_locked_dir_cannot_be_locked_again_until_released() {
        let dir = tempfile::tempdir().unwrap();
        let held = try_lock_dir(dir.path()).unwrap().expect("free");
        // flock conflicts between two descriptors even in one process.
        assert!(try_lock_dir(dir.path()).unwrap().is_none());
        drop(held);
        assert!(try_lock_dir(dir.path()).unwrap().is_some());
        assert!(try_lock_dir(&dir.path().join("missing")).is_err());
    }
}
