//! What both Raft log engines share and neither owns: the largest entry, the directory lock,
//! and how to tell which engine wrote a `raft/` directory (each refuses the other's). A leaf:
//! it imports neither engine.

use std::fs::File;
use std::io;
use std::path::Path;

/// Largest entry accepted, bytes (payload). Larger lengths read back are corruption.
pub const MAX_ENTRY_BYTES: usize = 64 << 20;

/// The segment engine's file of named values and the purge point.
pub const SEGMENT_META_FILE: &str = "meta";

/// Whether `dir` holds a sled database (its `conf` or `db` file).
pub fn holds_sled(dir: &Path) -> bool {
    dir.join("conf").exists() || dir.join("db").exists()
}

/// What in `dir` belongs to the segment engine (`meta`, a `.log` file), if anything.
///
/// Errors: the directory cannot be listed.
pub fn segment_files(dir: &Path) -> io::Result<Option<String>> {
    if dir.join(SEGMENT_META_FILE).exists() {
        return Ok(Some(SEGMENT_META_FILE.to_string()));
    }
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name();
        let name = name.to_string_lossy();
        if name.ends_with(".log") {
            return Ok(Some(name.into_owned()));
        }
    }
    Ok(None)
}

/// Locks the Raft log directory `dir` for this process (`flock` on its descriptor,
/// [`crate::data_dir::try_lock_dir`]; unlike a lock file, it cannot be deleted from under a
/// running controller). Both engines hold it while open.
///
/// Errors: `WouldBlock` naming the directory when another process holds it; I/O errors.
pub fn lock_log_dir(dir: &Path) -> io::Result<File> {
    crate::data_dir::try_lock_dir(dir)?.ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::WouldBlock,
            format!(
                "{} is locked by another process (is another keel-controller using this \
                 metadata_log_dir?)",
                dir.display()
            ),
        )
    })
}
