//! The open-files limit (`RLIMIT_NOFILE`) of the broker process.
//!
//! Segment files take one descriptor each while open. At start the broker raises its soft
//! limit to the hard one, as the JVM does for Kafka (`-XX:+MaxFDLimit`, on by default), and
//! gives the segment files the limit less [`RESERVED_DESCRIPTORS`]
//! ([`crate::log::open_files::set_budget`]): within it every segment stays open as in Kafka;
//! beyond it the files used least recently are closed and opened again on use, so a broker
//! hosts more partitions than its limit (#26). A limit that leaves fewer than
//! [`MIN_SEGMENT_FILES`] is refused at start with what to raise. A partition whose files
//! cannot be opened at run time stops the broker (`ReplicaManager`'s log-directory failure).

use std::path::Path;

/// Descriptors kept for everything but segment files: client and replication connections,
/// checkpoints being written, the metadata log and snapshots, listeners.
pub const RESERVED_DESCRIPTORS: u64 = 1024;

/// Soft and hard `RLIMIT_NOFILE`; `None` = unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FdLimit {
    /// The limit in effect.
    pub soft: Option<u64>,
    /// The most the soft limit may be raised to without privileges.
    pub hard: Option<u64>,
}

/// Reads the limit and raises the soft one to the hard one; returns (before, after). The
/// raise failing (a sandbox refusing it) leaves the limit as it was: the check then reads
/// the limit in effect.
pub fn raise_to_hard() -> std::io::Result<(FdLimit, FdLimit)> {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let read = || {
        let r = getrlimit(Resource::Nofile);
        FdLimit {
            soft: r.current,
            hard: r.maximum,
        }
    };
    let before = read();
    if before.soft != before.hard {
        let mut r = getrlimit(Resource::Nofile);
        r.current = r.maximum;
        setrlimit(Resource::Nofile, r).map_err(std::io::Error::from)?;
    }
    Ok((before, read()))
}

/// Segment files (`*.log`) in the partition directories directly under `log_dir`: one
/// descriptor each once the logs are open. Unreadable entries are skipped (opening the logs
/// reports them).
pub fn count_segment_files(log_dir: &Path) -> u64 {
    let Ok(dirs) = std::fs::read_dir(log_dir) else {
        return 0;
    };
    dirs.flatten()
        .filter(|d| d.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|d| std::fs::read_dir(d.path()).ok())
        .flat_map(|files| files.flatten())
        .filter(|f| f.file_name().to_str().is_some_and(|n| n.ends_with(".log")))
        .count() as u64
}

/// Fewest segment files the budget may leave (else the broker refuses to start).
pub const MIN_SEGMENT_FILES: u64 = 256;

/// How many segment files may be open at once under `limit` (`usize::MAX` when unlimited),
/// or the error saying what to raise (pure).
pub fn segment_budget(limit: FdLimit, log_dir: &Path) -> Result<usize, String> {
    let Some(soft) = limit.soft else {
        return Ok(usize::MAX);
    };
    let budget = soft.saturating_sub(RESERVED_DESCRIPTORS);
    if budget >= MIN_SEGMENT_FILES {
        return Ok(usize::try_from(budget).unwrap_or(usize::MAX));
    }
    let needed = RESERVED_DESCRIPTORS + MIN_SEGMENT_FILES;
    Err(format!(
        "log_dirs {}: the open-files limit is {soft}{}, which leaves fewer than \
         {MIN_SEGMENT_FILES} open segment files once {RESERVED_DESCRIPTORS} are kept for \
         connections: raise it (ulimit -n, systemd LimitNOFILE=, docker --ulimit nofile=, \
         compose `ulimits: nofile:`) to at least {needed}; Kafka's guide asks for 100000 or more",
        log_dir.display(),
        match limit.hard {
            Some(h) if h == soft => " (also the hard limit)".to_string(),
            Some(h) => format!(" (hard limit {h})"),
            None => String::new(),
        }
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_leaves_room_for_connections() {
        let dir = Path::new("/data");
        let limit = |soft| FdLimit {
            soft: Some(soft),
            hard: Some(soft),
        };
        assert_eq!(segment_budget(limit(20_000), dir), Ok(18_976));
        assert_eq!(segment_budget(limit(1280), dir), Ok(256));
        let e = segment_budget(limit(1279), dir).unwrap_err();
        assert!(
            e.contains("the open-files limit is 1279 (also the hard limit)")
                && e.contains("to at least 1280"),
            "{e}"
        );
        let unlimited = FdLimit {
            soft: None,
            hard: None,
        };
        assert_eq!(segment_budget(unlimited, dir), Ok(usize::MAX));
    }

    #[test]
    fn segment_files_are_counted_per_partition_directory() {
        let d = tempfile::tempdir().unwrap();
        for (p, segs) in [("a-0", 2), ("a-1", 1), ("b-0", 0)] {
            std::fs::create_dir(d.path().join(p)).unwrap();
            for s in 0..segs {
                std::fs::write(d.path().join(p).join(format!("{s:020}.log")), b"").unwrap();
                std::fs::write(d.path().join(p).join(format!("{s:020}.index")), b"").unwrap();
            }
        }
        std::fs::write(d.path().join("meta.properties"), b"").unwrap();
        assert_eq!(count_segment_files(d.path()), 3);
    }
}
