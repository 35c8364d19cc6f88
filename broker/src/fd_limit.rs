//! The open-files limit (`RLIMIT_NOFILE`) of the broker process.
//!
//! Every segment of every partition replica keeps its `.log` file open (the indexes are read
//! into memory, DESIGN §5), so a broker hosting many partitions needs many descriptors. At
//! start the broker raises its soft limit to the hard one, as the JVM does for Kafka
//! (`-XX:+MaxFDLimit`, on by default), and refuses to start when the segment files found in
//! its log directory plus [`RESERVED_DESCRIPTORS`] do not fit: a clear error then, instead of
//! `Too many open files` from some partition later (Kafka's operations guide: raise
//! `nofile` to at least 100,000 for brokers with many partitions). A partition that cannot be
//! opened at run time stops the broker (see `ReplicaManager`'s log-directory failure).

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

/// Whether `segment_files` open at once fit under `limit` with [`RESERVED_DESCRIPTORS`] to
/// spare; the error says what to raise (pure).
pub fn check(segment_files: u64, limit: FdLimit, log_dir: &Path) -> Result<(), String> {
    let Some(soft) = limit.soft else {
        return Ok(());
    };
    let needed = segment_files.saturating_add(RESERVED_DESCRIPTORS);
    if needed <= soft {
        return Ok(());
    }
    Err(format!(
        "log_dirs {}: {segment_files} segment files need {needed} open files (1 per segment + \
         {RESERVED_DESCRIPTORS} for connections), but the open-files limit is {soft}{}: raise \
         it (ulimit -n, systemd LimitNOFILE=, docker --ulimit nofile=, compose `ulimits: \
         nofile:`) to at least {needed}; Kafka's guide asks for 100000 or more",
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
    fn the_check_leaves_room_for_connections() {
        let dir = Path::new("/data");
        let limit = |soft| FdLimit {
            soft: Some(soft),
            hard: Some(soft),
        };
        assert!(check(1000, limit(2024), dir).is_ok());
        let e = check(1001, limit(2024), dir).unwrap_err();
        assert!(
            e.contains("1001 segment files need 2025 open files")
                && e.contains("limit is 2024 (also the hard limit)")
                && e.contains("at least 2025"),
            "{e}"
        );
        let unlimited = FdLimit {
            soft: None,
            hard: None,
        };
        assert!(check(u64::MAX, unlimited, dir).is_ok());
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
