//! [`LogManager`]: owner of one data directory and every partition log in it (Kafka
//! `LogManager`). It reads the per-directory `recovery-point-offset-checkpoint` and the
//! clean-shutdown marker on open, loads each `<topic>-<partition>` directory, and writes the
//! checkpoints (recovery points, and high watermarks handed in by the replica manager). A
//! deleted log's directory is renamed to `<topic>-<partition>.<id>-delete` and deleted later
//! by the caller (Kafka `LogManager.asyncDelete`); such directories found on open are handed
//! out by [`LogManager::take_pending_deletions`].
//!
//! The marker `.kafka_cleanshutdown` is written last on a clean close and deleted (durably)
//! first on open, so its presence proves that every log was flushed and closed.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::checkpoint::{OffsetCheckpointFile, TopicPartition, fsync_dir, write_atomically};
use super::config::{Clock, LogConfig};
use super::error::{LogResult, io_err};
use super::partition_log::{DeletedSegments, Log, LogOpenOptions, is_deletion_dir_name};
use super::segment::remove_if_exists;

/// Clean-shutdown marker file (Kafka's `.kafka_cleanshutdown`).
pub const CLEAN_SHUTDOWN_FILE: &str = ".kafka_cleanshutdown";
/// Per-directory recovery points.
pub const RECOVERY_POINT_CHECKPOINT: &str = "recovery-point-offset-checkpoint";
/// Per-directory high watermarks.
pub const REPLICATION_OFFSET_CHECKPOINT: &str = "replication-offset-checkpoint";

/// Default of [`LogManager::open_parallel`]'s threads (Kafka 4's
/// `num.recovery.threads.per.data.dir` default).
pub const DEFAULT_RECOVERY_THREADS: u32 = 2;

/// Runs `f` on every item with `threads` threads (at least 1, at most one per item); the
/// results in no particular order. The first error stops the threads from taking more items
/// and is returned; a panic in `f` is resumed here. For work that waits on fsyncs (opening,
/// closing, creating logs; leader epoch checkpoints), where threads overlap the waits.
pub(crate) fn in_parallel<T: Send, R: Send, E: Send>(
    items: Vec<T>,
    threads: usize,
    f: impl Fn(T) -> Result<R, E> + Sync,
) -> Result<Vec<R>, E> {
    let threads = threads.clamp(1, items.len().max(1));
    let queue = std::sync::Mutex::new(items.into_iter());
    let failed = AtomicBool::new(false);
    let done: Vec<Result<Vec<R>, E>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut out = Vec::new();
                    while !failed.load(Ordering::Relaxed) {
                        let next = queue.lock().unwrap_or_else(|e| e.into_inner()).next();
                        let Some(item) = next else { break };
                        match f(item) {
                            Ok(r) => out.push(r),
                            Err(e) => {
                                failed.store(true, Ordering::Relaxed);
                                return Err(e);
                            }
                        }
                    }
                    Ok(out)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    let mut all = Vec::new();
    for part in done {
        all.extend(part?);
    }
    Ok(all)
}

/// Owner of a data directory's partition logs.
#[derive(Debug)]
pub struct LogManager {
    data_dir: PathBuf,
    default_config: LogConfig,
    clock: Arc<dyn Clock>,
    logs: BTreeMap<TopicPartition, Log>,
    recovery_checkpoint: OffsetCheckpointFile,
    hw_checkpoint: OffsetCheckpointFile,
    /// Whether the previous shutdown was clean (marker found on open).
    had_clean_shutdown: bool,
    /// Directories of deleted logs found on open, until [`LogManager::take_pending_deletions`].
    pending_deletions: DeletedSegments,
}

impl LogManager {
    /// Opens `data_dir` (creating it), consumes the clean-shutdown marker and loads every
    /// partition directory with its recovery point (recovering it unless the shutdown was
    /// clean). `configs` overrides `default_config` per partition. One thread; see
    /// [`LogManager::open_parallel`].
    pub fn open(
        data_dir: &Path,
        default_config: LogConfig,
        configs: &BTreeMap<TopicPartition, LogConfig>,
        clock: Arc<dyn Clock>,
    ) -> LogResult<LogManager> {
        Self::open_parallel(data_dir, default_config, configs, clock, 1)
    }

    /// [`LogManager::open`] with the partition directories loaded by `threads` threads
    /// (Kafka's `num.recovery.threads.per.data.dir`, default 2; at least 1, at most one per
    /// partition). Each log is opened whole by one thread; the first error stops the others
    /// from starting more and is returned (the broker must not start).
    pub fn open_parallel(
        data_dir: &Path,
        default_config: LogConfig,
        configs: &BTreeMap<TopicPartition, LogConfig>,
        clock: Arc<dyn Clock>,
        threads: usize,
    ) -> LogResult<LogManager> {
        fs::create_dir_all(data_dir).map_err(io_err(data_dir))?;
        let marker = data_dir.join(CLEAN_SHUTDOWN_FILE);
        let had_clean_shutdown = marker.exists();
        if had_clean_shutdown {
            // Durably gone before any log changes, so a crash from here on is not "clean".
            remove_if_exists(&marker)?;
            fsync_dir(data_dir)?;
        }
        let recovery_checkpoint =
            OffsetCheckpointFile::new(data_dir.join(RECOVERY_POINT_CHECKPOINT));
        let hw_checkpoint = OffsetCheckpointFile::new(data_dir.join(REPLICATION_OFFSET_CHECKPOINT));
        let recovery_points = recovery_checkpoint.read()?;
        let mut dirs = Vec::new();
        let mut pending_deletions = DeletedSegments::default();
        for e in fs::read_dir(data_dir).map_err(io_err(data_dir))? {
            let e = e.map_err(io_err(data_dir))?;
            if !e.file_type().map_err(io_err(e.path()))?.is_dir() {
                continue;
            }
            let name = e.file_name();
            if name.to_str().is_some_and(is_deletion_dir_name) {
                // A deleted log whose directory's deletion a crash or shutdown cut short.
                pending_deletions.append(DeletedSegments::directory(e.path()));
                continue;
            }
            let Some(tp) = name.to_str().and_then(TopicPartition::from_dir_name) else {
                continue;
            };
            dirs.push((tp, e.path()));
        }
        let open_one = |(tp, path): (TopicPartition, PathBuf)| {
            let config = configs
                .get(&tp)
                .cloned()
                .unwrap_or_else(|| default_config.clone());
            let opts = LogOpenOptions {
                recovery_point: recovery_points.get(&tp).copied().unwrap_or(0),
                clean_shutdown: had_clean_shutdown,
            };
            Log::open(&path, config, clock.clone(), opts).map(|log| (tp, log))
        };
        let logs: BTreeMap<TopicPartition, Log> =
            in_parallel(dirs, threads, open_one)?.into_iter().collect();
        Ok(LogManager {
            data_dir: data_dir.to_path_buf(),
            default_config,
            clock,
            logs,
            recovery_checkpoint,
            hw_checkpoint,
            had_clean_shutdown,
            pending_deletions,
        })
    }

    /// The directories of deleted logs found on open (`<topic>-<partition>.<id>-delete`,
    /// see [`Log::rename_for_deletion`]), for the caller's deletion service; empty after the
    /// first call.
    pub fn take_pending_deletions(&mut self) -> DeletedSegments {
        std::mem::take(&mut self.pending_deletions)
    }

    /// Whether the previous shutdown left the clean-shutdown marker.
    pub fn had_clean_shutdown(&self) -> bool {
        self.had_clean_shutdown
    }

    /// The log of `tp`, if present.
    pub fn log(&self, tp: &TopicPartition) -> Option<&Log> {
        self.logs.get(tp)
    }

    /// The log of `tp` for writing, if present.
    pub fn log_mut(&mut self, tp: &TopicPartition) -> Option<&mut Log> {
        self.logs.get_mut(tp)
    }

    /// The log of `tp`, created empty (with `config` or the default) if absent.
    pub fn get_or_create_log(
        &mut self,
        tp: &TopicPartition,
        config: Option<LogConfig>,
    ) -> LogResult<&mut Log> {
        if !self.logs.contains_key(tp) {
            let dir = self.data_dir.join(tp.dir_name());
            let config = config.unwrap_or_else(|| self.default_config.clone());
            let log = Log::open(&dir, config, self.clock.clone(), LogOpenOptions::default())?;
            fsync_dir(&self.data_dir)?;
            self.logs.insert(tp.clone(), log);
        }
        Ok(self.logs.get_mut(tp).expect("inserted"))
    }

    /// Removes the log of `tp`: its directory is renamed for deletion (durably, see
    /// [`LogManager::delete_detached_log`]) and returned for the caller to delete; `None`
    /// when there is no such log.
    pub fn delete_log(&mut self, tp: &TopicPartition) -> LogResult<Option<DeletedSegments>> {
        let Some(log) = self.logs.remove(tp) else {
            return Ok(None);
        };
        self.delete_detached_log(log).map(Some)
    }

    /// Partitions present, sorted.
    pub fn partitions(&self) -> Vec<TopicPartition> {
        self.logs.keys().cloned().collect()
    }

    /// Writes every log's recovery point to `recovery-point-offset-checkpoint` (Kafka does
    /// this every `log.flush.offset.checkpoint.interval.ms`).
    pub fn checkpoint_recovery_points(&self) -> LogResult<()> {
        let points = self
            .logs
            .iter()
            .map(|(tp, l)| (tp.clone(), l.recovery_point()))
            .collect();
        self.recovery_checkpoint.write(&points)
    }

    /// Writes the high watermarks to `replication-offset-checkpoint`.
    pub fn write_high_watermarks(&self, hws: &BTreeMap<TopicPartition, i64>) -> LogResult<()> {
        self.hw_checkpoint.write(hws)
    }

    /// Reads `replication-offset-checkpoint` (empty if absent).
    pub fn read_high_watermarks(&self) -> LogResult<BTreeMap<TopicPartition, i64>> {
        self.hw_checkpoint.read()
    }

    /// Runs the `flush.ms` policy on every log; returns how many flushed.
    pub fn flush_due_logs(&mut self) -> LogResult<usize> {
        let mut n = 0;
        for log in self.logs.values_mut() {
            n += usize::from(log.flush_if_due()?);
        }
        Ok(n)
    }

    /// Logs held (all those found on open until [`LogManager::take_logs`]).
    pub fn len(&self) -> usize {
        self.logs.len()
    }

    /// Whether no log is held.
    pub fn is_empty(&self) -> bool {
        self.logs.is_empty()
    }

    /// Moves every loaded log out of the manager, for an owner that locks each partition on
    /// its own (the replica manager). The manager keeps the directory, the checkpoint files
    /// and [`LogManager::open_detached_log`] / [`LogManager::delete_detached_log`] /
    /// [`LogManager::close_detached`] for the logs it handed out.
    pub fn take_logs(&mut self) -> BTreeMap<TopicPartition, Log> {
        std::mem::take(&mut self.logs)
    }

    /// Opens (or creates) the log of `tp` in this directory without keeping it: the caller
    /// owns it. A new directory is made durable (parent fsync) before this returns.
    pub fn open_detached_log(&self, tp: &TopicPartition, config: LogConfig) -> LogResult<Log> {
        self.open_detached_log_with(tp, config, true)
    }

    /// [`LogManager::open_detached_log`]; a new directory is made durable only if `durable`,
    /// else the caller syncs the file system (or fsyncs this directory) before the log is
    /// used: for many partitions created at once, one sync instead of one directory fsync
    /// each (all of them of this one directory, so they queue on its inode).
    pub fn open_detached_log_with(
        &self,
        tp: &TopicPartition,
        config: LogConfig,
        durable: bool,
    ) -> LogResult<Log> {
        let dir = self.data_dir.join(tp.dir_name());
        let existed = dir.exists();
        let log = Log::open(&dir, config, self.clock.clone(), LogOpenOptions::default())?;
        if !existed && durable {
            fsync_dir(&self.data_dir)?;
        }
        Ok(log)
    }

    /// fsyncs this directory (after [`LogManager::open_detached_log_with`] without
    /// `durable`, when a file-system sync failed).
    pub fn sync_dir(&self) -> LogResult<()> {
        fsync_dir(&self.data_dir)
    }

    /// Removes a log handed out by [`LogManager::take_logs`] or
    /// [`LogManager::open_detached_log`] (Kafka `LogManager.asyncDelete`): its directory is
    /// renamed to `<topic>-<partition>.<id>-delete` ([`Log::rename_for_deletion`]) and the
    /// data directory fsynced, so the log is gone for good (a restart does not load it, a
    /// re-created partition gets a fresh directory at once); the files are deleted later by
    /// the caller, off every lock ([`DeletedSegments::delete_files`], large files in steps),
    /// or by the next open.
    ///
    /// Errors: `Io` naming the directory when the rename or the fsync failed.
    pub fn delete_detached_log(&self, log: Log) -> LogResult<DeletedSegments> {
        let renamed = log.rename_for_deletion()?;
        fsync_dir(&self.data_dir)?;
        Ok(DeletedSegments::directory(renamed))
    }

    /// Writes `recovery-point-offset-checkpoint` from the given recovery points.
    pub fn write_recovery_points(&self, points: &BTreeMap<TopicPartition, i64>) -> LogResult<()> {
        self.recovery_checkpoint.write(points)
    }

    /// Clean shutdown of detached logs: closes each (flush + indexes + producer snapshot),
    /// writes their recovery points and high watermarks, then the clean-shutdown marker.
    /// A failure leaves the marker absent, so the next start recovers.
    /// `threads` logs are closed at a time (Kafka: `num.recovery.threads.per.data.dir` is also
    /// the shutdown's flush threads); each close waits on fsyncs, so 100,000 partitions
    /// closed one by one took minutes.
    pub fn close_detached(
        self,
        logs: Vec<(TopicPartition, Log)>,
        high_watermarks: &BTreeMap<TopicPartition, i64>,
        threads: usize,
    ) -> LogResult<()> {
        let points: BTreeMap<TopicPartition, i64> = in_parallel(logs, threads, |(tp, mut log)| {
            log.flush()?;
            let point = log.recovery_point();
            log.close()?;
            LogResult::Ok((tp, point))
        })?
        .into_iter()
        .collect();
        self.write_recovery_points(&points)?;
        self.write_high_watermarks(high_watermarks)?;
        write_atomically(&self.data_dir.join(CLEAN_SHUTDOWN_FILE), b"")?;
        Ok(())
    }

    /// Clean shutdown: closes every log (flush + indexes + producer snapshot), writes the
    /// recovery points, then the clean-shutdown marker.
    pub fn close(mut self) -> LogResult<()> {
        for log in self.logs.values_mut() {
            log.flush()?;
        }
        self.checkpoint_recovery_points()?;
        let logs = std::mem::take(&mut self.logs);
        for log in logs.into_values() {
            log.close()?;
        }
        write_atomically(&self.data_dir.join(CLEAN_SHUTDOWN_FILE), b"")?;
        Ok(())
    }
}
