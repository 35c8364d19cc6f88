//! Durable file replacement, the one way every Keel process rewrites a small file in place
//! (checkpoints, `meta.properties`, metadata snapshots, `cluster.toml`): write `<path>.tmp`,
//! fsync it, rename it over `path`, fsync the directory. A crash at any point leaves either
//! the old file or the new one, never a mix (POSIX rename is atomic; the directory fsync makes
//! the rename itself durable). The same protocol as Kafka's `Utils.atomicMoveWithFallback`
//! after `FileChannel.force`.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// A step of a file write failed: which step, on which file, and the OS error.
#[derive(Debug, thiserror::Error)]
#[error("{}: {op}: {source}", path.display())]
pub struct FsError {
    /// The file (or directory) the step acted on.
    pub path: PathBuf,
    /// The step: `create`, `write`, `fsync`, `rename` or `fsync directory`.
    pub op: &'static str,
    /// The OS error.
    #[source]
    pub source: io::Error,
}

impl From<FsError> for io::Error {
    /// Keeps the OS error's kind; the message names the step and the file.
    fn from(e: FsError) -> io::Error {
        io::Error::new(e.source.kind(), e.to_string())
    }
}

fn step<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> FsError + 'a {
    move |source| FsError {
        path: path.to_path_buf(),
        op,
        source,
    }
}

/// `<path>.tmp`: the temp file [`write_atomic`] and [`write_replaceable`] write first. A
/// leftover one (a crash before the rename) is overwritten by the next write.
pub fn tmp_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".tmp");
    PathBuf::from(s)
}

/// fsyncs directory `dir`, so that a create, rename or delete inside it survives a crash.
///
/// # Errors
/// [`FsError`] with op `fsync directory`.
pub fn fsync_dir(dir: &Path) -> Result<(), FsError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(step("fsync directory", dir))
}

/// Replaces `path` with `contents` durably: `<path>.tmp`, fsync, rename over `path`, fsync of
/// the parent directory. After an error `path` is untouched (it holds the old contents or
/// does not exist).
///
/// # Errors
/// [`FsError`] naming the step that failed and its file.
pub fn write_atomic(path: &Path, contents: &[u8]) -> Result<(), FsError> {
    write_tmp_then_rename(path, contents, true)?;
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    fsync_dir(dir)
}

/// Replaces `path` with `contents` through `<path>.tmp` and a rename, without any fsync: for
/// files whose loss or corruption after a crash their reader detects and tolerates (a
/// CRC-checked snapshot that is rebuilt when bad). Keeps fsyncs, which on ext4 can wait for
/// every dirty page of the file system, off hot paths.
///
/// # Errors
/// [`FsError`] naming the step that failed and its file.
pub fn write_replaceable(path: &Path, contents: &[u8]) -> Result<(), FsError> {
    write_tmp_then_rename(path, contents, false)
}

/// Overwrites `path` with `contents` in place (created when missing), without a temporary
/// file, a rename or any fsync: the bytes are written from offset 0 and the file is cut to
/// `contents.len()` when it was longer. Not atomic: after a crash before the next sync the
/// file may hold the old bytes, the new ones or a mix, so it is only for files whose reader
/// detects a torn file and rebuilds it (the leader epoch checkpoint, rebuilt from the log's
/// batches), and whose latest contents are made durable by a later sync before they matter.
///
/// Why not [`write_replaceable`]: on ext4 a rename over an existing file (and a create)
/// costs ~0.3-0.5 ms each here (`auto_da_alloc` starts the write-out of a file replaced by
/// a rename), ~10 us for an overwrite in place; a broker staging 17,000 leader epoch
/// checkpoints at once spent seconds in those renames. (Kafka went back to fsynced atomic
/// rewrites of this checkpoint after KAFKA-16541, because a torn file failed its load; Keel's
/// load rebuilds a torn one instead, and syncs before a staged entry is used.)
///
/// # Errors
/// [`FsError`] with op `open`, `write` or `truncate`; the file may then hold a mix.
pub fn overwrite_in_place(path: &Path, contents: &[u8]) -> Result<(), FsError> {
    use std::os::unix::fs::FileExt;
    let f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(step("open", path))?;
    f.write_all_at(contents, 0).map_err(step("write", path))?;
    let len = f.metadata().map_err(step("write", path))?.len();
    if len > contents.len() as u64 {
        f.set_len(contents.len() as u64)
            .map_err(step("truncate", path))?;
    }
    Ok(())
}

fn write_tmp_then_rename(path: &Path, contents: &[u8], sync: bool) -> Result<(), FsError> {
    let tmp = tmp_path(path);
    let mut f = File::create(&tmp).map_err(step("create", &tmp))?;
    f.write_all(contents).map_err(step("write", &tmp))?;
    if sync {
        // The contents must be on disk before the rename makes them visible.
        f.sync_all().map_err(step("fsync", &tmp))?;
    }
    drop(f);
    fs::rename(&tmp, path).map_err(step("rename", path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overwrites_in_place_longer_and_shorter() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("checkpoint");
        overwrite_in_place(&path, b"0\n1\n0 0\n").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"0\n1\n0 0\n");
        overwrite_in_place(&path, b"0\n2\n0 0\n5 100\n").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"0\n2\n0 0\n5 100\n");
        overwrite_in_place(&path, b"0\n0\n").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"0\n0\n", "cut to the new length");
        assert!(!tmp_path(&path).exists());
    }

    #[test]
    fn replaces_the_file_and_leaves_no_temp() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("meta.properties");
        write_atomic(&path, b"one").unwrap();
        write_atomic(&path, b"two").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"two");
        assert!(!tmp_path(&path).exists());
        write_replaceable(&path, b"three").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"three");
        assert!(!tmp_path(&path).exists());
    }

    #[test]
    fn a_failed_write_names_the_step_and_keeps_the_old_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        write_atomic(&path, b"old").unwrap();
        // The temp file's name is taken by a directory: create fails, `path` is untouched.
        fs::create_dir(tmp_path(&path)).unwrap();
        let e = write_atomic(&path, b"new").unwrap_err();
        assert_eq!(e.op, "create");
        assert!(
            e.to_string()
                .ends_with("f.tmp: create: Is a directory (os error 21)"),
            "{e}"
        );
        assert_eq!(io::Error::from(e).kind(), io::ErrorKind::IsADirectory);
        assert_eq!(fs::read(&path).unwrap(), b"old");
        let e = fsync_dir(&dir.path().join("missing")).unwrap_err();
        assert_eq!(e.op, "fsync directory");
    }
}
