//! The replica manager's log cleaner (Kafka `LogCleaner.CleanerThread` +
//! `LogCleanerManager.grabFilthiestCompactedLog`): every `log_cleaner_backoff_ms`
//! ([`CLEANER_BACKOFF_MS`] by default) the ticker
//! measures every compacted log ([`crate::log::Log::cleanable`], upper bound = the partition's
//! high watermark: uncommitted data may still be truncated) and, if no pass is running,
//! starts one on a blocking thread for the log with the highest dirty ratio among those due.
//! One log at a time, one pass at a time.
//!
//! Lock holds of a pass ([`run_pass`]): the plan (a walk over the segment list), then per
//! cleaned group of segments one install (two renames and one directory fsync, plus a rename
//! per further group member and one more fsync; an in-memory swap), then the checkpoint
//! write. Reading the dirty section, building the offset map and writing the
//! cleaned segments happen without the partition lock, from the segments' open file handles
//! (segments below the active one do not change; a truncation or retention meanwhile voids the
//! pass at install, [`crate::log::cleaner::Install::LogChanged`]). The work of a pass is
//! bounded by the offset map (`log.cleaner.dedupe.buffer.size`) for the dirty section and by
//! the partition's size below its high watermark for the rewrite. The pass holds only a
//! `Weak` reference to the partition between lock holds, so deleting the partition never
//! waits for it (the pass then fails on the missing directory and is logged).

use std::sync::{Arc, Weak};
use std::time::Instant;

use super::HostedPartition;
use super::metrics;
use crate::log::cleaner::{CleanerConfig, CleanerStats, Install, never_stop};
use crate::log::segment::remove_if_exists;
use crate::log::{Log, LogResult};

/// How often the ticker looks for a log to clean by default, ms (Kafka
/// `log.cleaner.backoff.ms`; the broker's `log_cleaner_backoff_ms`).
pub const CLEANER_BACKOFF_MS: u64 = 15_000;

/// The compacted log with the highest dirty ratio among those due for a pass (ties: the
/// first), and the highest dirty ratio over all compacted logs (the
/// `max-dirty-percent` gauge; 0 without compacted logs).
pub(super) fn filthiest(
    partitions: &[Arc<HostedPartition>],
) -> (Option<Arc<HostedPartition>>, f64) {
    let mut best: Option<(f64, &Arc<HostedPartition>)> = None;
    let mut max_ratio: f64 = 0.0;
    for hp in partitions {
        let inner = hp.lock();
        let hw = inner.state.high_watermark();
        let now_ms = inner.log.clock_now_ms();
        let Some(c) = inner.log.cleanable(hw, now_ms) else {
            continue;
        };
        let ratio = c.dirty_ratio();
        max_ratio = max_ratio.max(ratio);
        if c.due(inner.log.config().min_cleanable_dirty_ratio)
            && best.is_none_or(|(r, _)| ratio > r)
        {
            best = Some((ratio, hp));
        }
    }
    (best.map(|(_, hp)| hp.clone()), max_ratio)
}

/// What a pass works on: a log behind a lock, taken for each step and released in between.
pub(super) trait CleanTarget {
    /// Runs `f` on the log and its cleaning upper bound (the high watermark) under the
    /// lock; `None` if the partition is gone.
    fn with_log<R>(&self, f: impl FnOnce(&mut Log, i64) -> R) -> Option<R>;
    /// For log lines.
    fn name(&self) -> String;
}

impl CleanTarget for Weak<HostedPartition> {
    fn with_log<R>(&self, f: impl FnOnce(&mut Log, i64) -> R) -> Option<R> {
        let hp = self.upgrade()?;
        let mut inner = hp.lock();
        let hw = inner.state.high_watermark();
        Some(f(&mut inner.log, hw))
    }
    fn name(&self) -> String {
        self.upgrade()
            .map_or_else(|| "(removed)".into(), |hp| hp.tp.to_string())
    }
}

/// One pass over the target's log (see the module doc); `Ok(None)` when nothing was due,
/// the partition went away or the log changed under the pass. Blocking: run it on a blocking
/// thread.
pub(super) fn run_pass(
    target: &impl CleanTarget,
    config: CleanerConfig,
) -> LogResult<Option<CleanerStats>> {
    let start = Instant::now();
    let Some((plan, now_ms)) = target.with_log(|log, hw| {
        let now_ms = log.clock_now_ms();
        (log.plan_clean(hw, now_ms, false), now_ms)
    }) else {
        return Ok(None);
    };
    let Some(plan) = plan else {
        return Ok(None);
    };
    let Some(cleaned) = plan.run(now_ms, &config, &mut never_stop)? else {
        return Ok(None);
    };
    let truncations = cleaned.truncations;
    let (cleaned_upto, horizon, stats) = (
        cleaned.cleaned_upto,
        cleaned.earliest_horizon_ms,
        cleaned.stats,
    );
    let mut pending = cleaned.segments.into_iter();
    while let Some((group, new)) = pending.next() {
        // `new` moves into the closure; if the partition is gone it is dropped unused and
        // its file deleted below with the rest.
        let path = new.path().to_path_buf();
        let outcome = target
            .with_log(|log, _| log.install_cleaned(&group, new, truncations, &mut never_stop));
        let stop = match outcome {
            // The retired segment is dropped and the group's other files deleted here,
            // after the lock: closing the last handle of a replaced file and unlinking the
            // others frees their blocks (what is left, the next open deletes).
            Some(Ok(Install::Installed(retired, deleted))) => {
                drop(retired);
                for file in deleted {
                    if let Err(e) = remove_if_exists(&file) {
                        tracing::warn!("log cleaner: {e}");
                    }
                }
                None
            }
            Some(Ok(Install::LogChanged | Install::Stopped)) => Some(Ok(None)),
            Some(Err(e)) => Some(Err(e)),
            None => {
                // Removed meanwhile: only the cleaner writes `.cleaned` names, one pass at a
                // time, so deleting ours is safe.
                let _ = remove_if_exists(&path);
                tracing::info!("log cleaner: partition removed during the pass");
                Some(Ok(None))
            }
        };
        if let Some(result) = stop {
            for (_, seg) in pending {
                let _ = seg.discard_cleaned();
            }
            return result;
        }
    }
    match target.with_log(|log, _| log.finish_clean(cleaned_upto, horizon)) {
        Some(r) => r?,
        None => return Ok(None),
    }
    tracing::info!(
        partition = %target.name(),
        cleaned_upto,
        bytes_read = stats.bytes_read,
        bytes_written = stats.bytes_written,
        records_removed = stats.records_removed,
        took_ms = start.elapsed().as_millis() as u64,
        "log cleaner pass done"
    );
    metrics::record_cleaner_pass(&stats, start.elapsed());
    Ok(Some(stats))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::log::{CleanupPolicy, LogConfig, LogOpenOptions, ManualClock};
    use keel_record::{BatchIter, RecordBatchBuilder};

    /// A log behind a mutex; `hook` runs at each lock with the lock count (what other
    /// requests do between the pass's lock holds), `gone_after` makes the partition vanish.
    struct Target {
        log: Mutex<Log>,
        locks: AtomicUsize,
        hook: fn(&mut Log, usize),
        gone_after: usize,
    }

    impl CleanTarget for Target {
        fn with_log<R>(&self, f: impl FnOnce(&mut Log, i64) -> R) -> Option<R> {
            let n = self.locks.fetch_add(1, Ordering::SeqCst);
            if n >= self.gone_after {
                return None;
            }
            let mut log = self.log.lock().unwrap();
            (self.hook)(&mut log, n);
            let hw = log.log_end_offset();
            Some(f(&mut log, hw))
        }
        fn name(&self) -> String {
            "test-0".into()
        }
    }

    fn put(log: &mut Log, key: u32, value: u32) {
        let mut b = RecordBatchBuilder::new(0);
        b.append(
            1_000,
            Some(format!("k{key}").as_bytes()),
            Some(format!("{value}").as_bytes()),
            &[],
        );
        log.append_as_leader(b.build().into_bytes(), 1).unwrap();
    }

    fn target(dir: &std::path::Path, hook: fn(&mut Log, usize), gone_after: usize) -> Target {
        let config = LogConfig {
            segment_bytes: 2048,
            cleanup_policy: CleanupPolicy::COMPACT,
            drop_cache_behind_bytes: None,
            ..LogConfig::default()
        };
        let mut log = Log::open(
            dir,
            config,
            Arc::new(ManualClock::new(5_000)),
            LogOpenOptions::default(),
        )
        .unwrap();
        for i in 0..400 {
            put(&mut log, i % 20, i);
        }
        Target {
            log: Mutex::new(log),
            locks: AtomicUsize::new(0),
            hook,
            gone_after,
        }
    }

    fn live(log: &Log) -> BTreeMap<Vec<u8>, Vec<u8>> {
        let mut m = BTreeMap::new();
        let leo = log.log_end_offset();
        let mut next = log.log_start_offset();
        while next < leo {
            let r = log.read(next, 1 << 20, leo).unwrap();
            for b in BatchIter::new(r.records) {
                for rec in b.unwrap().records() {
                    let rec = rec.unwrap();
                    m.insert(rec.key.unwrap().to_vec(), rec.value.unwrap().to_vec());
                }
            }
            next = r.next_offset;
        }
        m
    }

    fn leftovers(dir: &std::path::Path) -> usize {
        std::fs::read_dir(dir)
            .unwrap()
            .filter(|e| {
                let n = e.as_ref().unwrap().file_name().into_string().unwrap();
                n.ends_with(".cleaned") || n.ends_with(".swap")
            })
            .count()
    }

    /// Appends between the pass's lock holds (producers keep writing) do not disturb it.
    #[test]
    fn a_pass_installs_while_the_log_keeps_growing() {
        let dir = tempfile::tempdir().unwrap();
        let t = target(
            dir.path(),
            |log, n| put(log, 1_000 + n as u32, 7),
            usize::MAX,
        );
        let stats = run_pass(&t, CleanerConfig::default()).unwrap().unwrap();
        assert!(stats.records_removed > 300, "{stats:?}");
        let log = t.log.lock().unwrap();
        let live = live(&log);
        assert_eq!(live.len(), 20 + t.locks.load(Ordering::SeqCst));
        assert_eq!(live[&b"k3".to_vec()], b"383".to_vec());
        assert!(
            t.locks.load(Ordering::SeqCst) > 3,
            "one lock per installed segment"
        );
        assert_eq!(leftovers(dir.path()), 0);
    }

    /// A truncation between two installs voids the rest of the pass: no checkpoint, no
    /// leftover files, the log reads as truncated.
    #[test]
    fn a_truncation_between_lock_holds_voids_the_pass() {
        let dir = tempfile::tempdir().unwrap();
        let t = target(
            dir.path(),
            |log, n| {
                if n == 2 {
                    log.truncate_to(50).unwrap();
                }
            },
            usize::MAX,
        );
        assert_eq!(run_pass(&t, CleanerConfig::default()).unwrap(), None);
        let log = t.log.lock().unwrap();
        assert!(log.log_end_offset() <= 50);
        // At most the gap marker written before the first install: nothing counts as clean.
        assert!(log.cleaner_checkpoint().is_none_or(|c| c == 0));
        assert_eq!(leftovers(dir.path()), 0);
    }

    /// A partition removed during the pass: the pass stops and deletes its files.
    #[test]
    fn a_removed_partition_stops_the_pass() {
        let dir = tempfile::tempdir().unwrap();
        let t = target(dir.path(), |_, _| {}, 2);
        assert_eq!(run_pass(&t, CleanerConfig::default()).unwrap(), None);
        assert_eq!(leftovers(dir.path()), 0);
    }
}
