//! Log cleaner tests: the issue #22 acceptance test (latest value per live key, tombstones
//! gone after `delete.retention.ms`), a stop at every step of a pass followed by a reopen
//! (a crash there), reads, follower appends and producer state over offset gaps, the
//! scheduling rules, and a model-based proptest.

use std::collections::BTreeMap;
use std::path::Path;

use bytes::Bytes;
use proptest::prelude::*;

use super::*;
use crate::log::config::{CleanupPolicy, Clock, LogConfig, ManualClock};
use crate::log::partition_log::LogOpenOptions;
use keel_record::{BatchIter, RecordBatchBuilder};

const DAY_MS: i64 = 24 * 3600 * 1000;

fn compact_config(segment_bytes: u64) -> LogConfig {
    LogConfig {
        segment_bytes,
        index_interval_bytes: 4096,
        retention_ms: Some(1),
        retention_bytes: Some(1),
        cleanup_policy: CleanupPolicy::COMPACT,
        min_cleanable_dirty_ratio: 0.5,
        delete_retention_ms: DAY_MS,
        drop_cache_behind_bytes: None,
        ..LogConfig::default()
    }
}

fn open_log(dir: &Path, config: LogConfig, clock: &ManualClock) -> Log {
    Log::open(
        dir,
        config,
        Arc::new(clock.clone()),
        LogOpenOptions::default(),
    )
    .unwrap()
}

/// One record: key, value (`None` = tombstone).
type Rec = (Vec<u8>, Option<Vec<u8>>);

/// A record read back: offset, key, value.
type LogRecord = (i64, Vec<u8>, Option<Vec<u8>>);

fn batch_of(records: &[Rec], ts: i64) -> Bytes {
    let mut b = RecordBatchBuilder::new(0);
    for (k, v) in records {
        b.append(ts, Some(k), v.as_deref(), &[]);
    }
    b.build().into_bytes()
}

/// Every record of the log as (offset, key, value), reading from the log start with small
/// reads (so reads start inside gaps too).
fn read_all(log: &Log) -> Vec<LogRecord> {
    let leo = log.log_end_offset();
    let mut next = log.log_start_offset();
    let mut out = Vec::new();
    // Each read returns at least one batch or ends the log.
    while next < leo {
        let r = log.read(next, 1, leo).unwrap();
        if r.records.is_empty() {
            break;
        }
        for b in BatchIter::new(r.records.clone()) {
            let b = b.unwrap();
            b.validate_replicated().unwrap();
            for rec in b.records() {
                let rec = rec.unwrap();
                let offset = b.base_offset() + i64::from(rec.offset_delta);
                if offset >= next {
                    out.push((
                        offset,
                        rec.key.map(|k| k.to_vec()).unwrap_or_default(),
                        rec.value.map(|v| v.to_vec()),
                    ));
                }
            }
        }
        assert!(r.next_offset > next);
        next = r.next_offset;
    }
    out
}

/// The live content: key -> latest value (tombstoned keys absent).
fn live(records: &[LogRecord]) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut m = BTreeMap::new();
    for (_, k, v) in records {
        match v {
            Some(v) => m.insert(k.clone(), v.clone()),
            None => m.remove(k),
        };
    }
    m
}

fn files_with_suffix(dir: &Path, suffix: &str) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(suffix))
        .collect()
}

/// Writes `total` records over `keys` keys in batches of `per_batch`; every 10th record of
/// a key after its first write deletes it. Returns the model (key -> latest value).
fn write_workload(
    log: &mut Log,
    total: usize,
    keys: usize,
    per_batch: usize,
    ts: i64,
) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut model = BTreeMap::new();
    let mut batch: Vec<Rec> = Vec::with_capacity(per_batch);
    // A deterministic spread of keys (a multiplicative step coprime to `keys`).
    for i in 0..total {
        let k = (i * 7919) % keys;
        let key = format!("key-{k:05}").into_bytes();
        let value = if i % 10 == 3 {
            None
        } else {
            Some(format!("v{i}").into_bytes())
        };
        match &value {
            Some(v) => model.insert(key.clone(), v.clone()),
            None => model.remove(&key),
        };
        batch.push((key, value));
        if batch.len() == per_batch || i + 1 == total {
            log.append_as_leader(batch_of(&batch, ts), 1).unwrap();
            batch.clear();
        }
    }
    model
}

/// Issue #22's acceptance test, scaled by `total`: after cleaning exactly the latest value
/// per live key remains (plus tombstones younger than `delete.retention.ms`), and after the
/// horizon passes no tombstone remains.
fn acceptance(total: usize, keys: usize) {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000_000);
    let mut log = open_log(dir.path(), compact_config(1 << 20), &clock);
    let model = write_workload(&mut log, total, keys, 1000, 1_000_000);
    log.roll().unwrap();
    let leo = log.log_end_offset();
    let size_before = log.size_bytes();
    let config = CleanerConfig::default();
    let stats = log
        .clean(leo, clock.now_ms(), &config, false, &mut never_stop)
        .unwrap()
        .expect("dirty ratio 1.0: a pass runs");
    assert_eq!(stats.records_retained as usize, keys, "{stats:?}");
    assert_eq!(log.cleaner_checkpoint(), Some(leo));
    let records = read_all(&log);
    // One record per key: its latest, a value or a tombstone.
    assert_eq!(records.len(), keys);
    assert_eq!(live(&records), model);
    let tombstones = records.iter().filter(|r| r.2.is_none()).count();
    assert_eq!(tombstones, keys - model.len());
    assert!(tombstones > 0);
    assert!(
        log.size_bytes() < size_before / 10,
        "{} vs {size_before}",
        log.size_bytes()
    );
    assert_eq!(log.log_end_offset(), leo);
    assert_eq!(log.log_start_offset(), 0);

    // Before the horizon nothing is due; after it the tombstones go.
    assert_eq!(
        log.earliest_delete_horizon_ms(),
        Some(clock.now_ms() + DAY_MS)
    );
    clock.advance(DAY_MS - 1);
    assert!(log.plan_clean(leo, clock.now_ms(), false).is_none());
    clock.advance(1);
    let stats = log
        .clean(leo, clock.now_ms(), &config, false, &mut never_stop)
        .unwrap()
        .expect("the horizon passed: a pass runs");
    assert_eq!(stats.records_removed as usize, tombstones);
    let records = read_all(&log);
    assert_eq!(records.len(), model.len());
    assert!(records.iter().all(|r| r.2.is_some()));
    assert_eq!(live(&records), model);
    assert_eq!(log.earliest_delete_horizon_ms(), None);

    // Reopened (indexes rebuilt from the cleaned files): the same records.
    drop(log);
    let log = open_log(dir.path(), compact_config(1 << 20), &clock);
    assert_eq!(live(&read_all(&log)), model);
    assert_eq!(log.log_end_offset(), leo);
}

#[test]
fn acceptance_latest_value_per_live_key_and_no_expired_tombstones() {
    acceptance(1_000_000, 10_000);
}

#[test]
fn offset_map_fills_and_later_passes_finish() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000);
    let mut log = open_log(dir.path(), compact_config(16 << 10), &clock);
    let model = write_workload(&mut log, 20_000, 500, 100, 1_000);
    log.roll().unwrap();
    let leo = log.log_end_offset();
    let config = CleanerConfig::with_max_entries(200);
    assert_eq!(config.offset_map_max_entries(), 200);
    let mut passes = 0;
    // Each pass maps 200 new keys at least: bounded.
    while log.cleaner_checkpoint() != Some(leo) {
        let stats = log
            .clean(leo, clock.now_ms(), &config, true, &mut never_stop)
            .unwrap()
            .unwrap();
        assert!(stats.map_entries <= 200);
        passes += 1;
        assert!(passes < 200);
        // Every intermediate state reads as the same live content.
        assert_eq!(live(&read_all(&log)), model);
    }
    assert!(passes > 1, "the map filled: {passes}");
    let records = read_all(&log);
    assert_eq!(live(&records), model);
    assert_eq!(records.len(), 500);
}

/// A stop at every step of a pass (as a kill -9 there), then a reopen: the log recovers
/// (no `.cleaned` or `.swap` file left, same LEO) and reads the same live content; a full
/// pass afterwards gives the result of an uninterrupted one.
#[test]
fn crash_at_every_step_recovers_the_same_records() {
    let build = |dir: &Path, clock: &ManualClock| {
        let mut log = open_log(dir, compact_config(4 << 10), clock);
        let model = write_workload(&mut log, 1_500, 50, 50, clock.now_ms());
        log.roll().unwrap();
        (log, model)
    };
    let clock = ManualClock::new(1_000);
    let config = CleanerConfig::default();
    // Reference: an uninterrupted pass.
    let reference_dir = tempfile::tempdir().unwrap();
    let (mut reference, model) = build(reference_dir.path(), &clock);
    let leo = reference.log_end_offset();
    let mut steps = Vec::new();
    reference
        .clean(leo, clock.now_ms(), &config, true, &mut |s| {
            steps.push(s);
            true
        })
        .unwrap()
        .unwrap();
    let reference_records = read_all(&reference);
    assert!(steps.len() > 10, "{steps:?}");
    for kind in ["batch", "cleaned", "swap", "installed"] {
        assert!(
            steps.iter().any(|s| match s {
                CleanStep::BatchWritten(_) => kind == "batch",
                CleanStep::CleanedWritten(_) => kind == "cleaned",
                CleanStep::SwapDurable(_) => kind == "swap",
                CleanStep::GroupRetired(_) => kind == "retired",
                CleanStep::Installed(_) => kind == "installed",
            }),
            "{kind}"
        );
    }
    // Every step but the batch appends, of which every 7th (each fsync-heavy run reopens).
    let stops = steps
        .iter()
        .enumerate()
        .filter(|(i, s)| !matches!(s, CleanStep::BatchWritten(_)) || i % 7 == 0);
    for (stop_at, stop_step) in stops {
        let dir = tempfile::tempdir().unwrap();
        let (mut log, _) = build(dir.path(), &clock);
        let mut n = 0;
        let done = log
            .clean(leo, clock.now_ms(), &config, true, &mut |_| {
                n += 1;
                n <= stop_at
            })
            .unwrap();
        assert!(done.is_none(), "stopped at step {stop_at}: {:?}", stop_step);
        drop(log); // no close: a crash
        let mut log = open_log(dir.path(), compact_config(4 << 10), &clock);
        assert!(files_with_suffix(dir.path(), ".cleaned").is_empty());
        assert!(files_with_suffix(dir.path(), ".swap").is_empty());
        assert_eq!(log.log_end_offset(), leo, "step {stop_at}");
        assert_eq!(
            live(&read_all(&log)),
            model,
            "step {stop_at}: {:?}",
            stop_step
        );
        log.clean(leo, clock.now_ms(), &config, true, &mut never_stop)
            .unwrap()
            .unwrap();
        assert_eq!(read_all(&log), reference_records, "step {stop_at}");
    }
}

/// The second pass over a compacted log cleans groups of small segments into one (Kafka
/// `groupSegmentsBySize`): the segment count falls, and a stop at every step of that pass
/// (between the durable swap, the group's other segments renamed away and the final rename)
/// followed by a reopen reads the same live content, and a full pass afterwards gives the
/// result of an uninterrupted one.
#[test]
fn grouping_small_segments_survives_a_crash_at_every_step() {
    let clock = ManualClock::new(1_000);
    let config = CleanerConfig::default();
    let build = |dir: &Path| {
        let mut log = open_log(dir, compact_config(4 << 10), &clock);
        let model = write_workload(&mut log, 3_000, 50, 50, 1_000);
        log.roll().unwrap();
        let leo = log.log_end_offset();
        log.clean(leo, clock.now_ms(), &config, true, &mut never_stop)
            .unwrap()
            .unwrap();
        (log, model, leo)
    };
    let reference_dir = tempfile::tempdir().unwrap();
    let (mut reference, model, leo) = build(reference_dir.path());
    let segments_before = reference.segment_count();
    let mut steps = Vec::new();
    reference
        .clean(leo, clock.now_ms(), &config, true, &mut |s| {
            steps.push(s);
            true
        })
        .unwrap()
        .unwrap();
    let reference_records = read_all(&reference);
    assert_eq!(live(&reference_records), model);
    assert!(
        reference.segment_count() * 4 < segments_before,
        "{} segments grouped into {}",
        segments_before,
        reference.segment_count()
    );
    assert!(
        steps
            .iter()
            .any(|s| matches!(s, CleanStep::GroupRetired(_)))
    );
    // Offsets and reads still work over the grouped segments, and after a reopen.
    drop(reference);
    let reference = open_log(reference_dir.path(), compact_config(4 << 10), &clock);
    assert_eq!(read_all(&reference), reference_records);
    let stops = steps
        .iter()
        .enumerate()
        .filter(|(i, s)| !matches!(s, CleanStep::BatchWritten(_)) || i % 7 == 0);
    for (stop_at, stop_step) in stops {
        let dir = tempfile::tempdir().unwrap();
        let (mut log, _, _) = build(dir.path());
        let mut n = 0;
        let done = log
            .clean(leo, clock.now_ms(), &config, true, &mut |_| {
                n += 1;
                n <= stop_at
            })
            .unwrap();
        assert!(done.is_none(), "{stop_step:?}");
        drop(log);
        let mut log = open_log(dir.path(), compact_config(4 << 10), &clock);
        assert!(files_with_suffix(dir.path(), ".cleaned").is_empty());
        assert!(files_with_suffix(dir.path(), ".swap").is_empty());
        assert!(files_with_suffix(dir.path(), ".deleted").is_empty());
        assert_eq!(log.log_end_offset(), leo, "{stop_step:?}");
        assert_eq!(live(&read_all(&log)), model, "{stop_step:?}");
        log.clean(leo, clock.now_ms(), &config, true, &mut never_stop)
            .unwrap()
            .unwrap();
        assert_eq!(live(&read_all(&log)), model, "{stop_step:?}");
        assert_eq!(log.log_end_offset(), leo);
    }
}

/// A pass planned before a truncation (or with the segment changed) installs nothing.
#[test]
fn a_truncation_during_a_pass_voids_it() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000);
    let mut log = open_log(dir.path(), compact_config(4 << 10), &clock);
    let model_before = write_workload(&mut log, 2_000, 50, 50, 1_000);
    let before = read_all(&log);
    let leo = log.log_end_offset();
    let plan = log.plan_clean(leo, clock.now_ms(), true).unwrap();
    let cleaned = plan
        .run(clock.now_ms(), &CleanerConfig::default(), &mut never_stop)
        .unwrap()
        .unwrap();
    let cut = log.segment_base_offsets()[2] + 3;
    log.truncate_to(cut).unwrap();
    let truncations = cleaned.truncations;
    let mut segments = cleaned.segments.into_iter();
    let (old, new) = segments.next().unwrap();
    assert!(matches!(
        log.install_cleaned(&old, new, truncations, &mut never_stop)
            .unwrap(),
        Install::LogChanged
    ));
    for (_, seg) in segments {
        seg.discard_cleaned().unwrap();
    }
    assert!(files_with_suffix(dir.path(), ".cleaned").is_empty());
    assert!(files_with_suffix(dir.path(), ".swap").is_empty());
    let after: Vec<_> = before
        .into_iter()
        .filter(|r| r.0 < log.log_end_offset())
        .collect();
    assert_eq!(read_all(&log), after);
    let _ = model_before;
}

/// Reads, timestamp lookups, follower appends (a far-behind follower copies the leader's
/// compacted log through `read` + `append_as_follower`) and producer state over gaps.
#[test]
fn reads_follower_appends_and_producer_state_over_gaps() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000);
    let mut log = open_log(dir.path(), compact_config(4 << 10), &clock);
    // An idempotent producer whose every record is superseded later by another producer.
    for seq in 0..20 {
        let mut b = RecordBatchBuilder::new(0).producer(7, 0, seq * 2);
        b.append(1_000 + i64::from(seq), Some(b"a"), Some(b"pa"), &[]);
        b.append(1_000 + i64::from(seq), Some(b"b"), Some(b"pb"), &[]);
        log.append_as_leader(b.build().into_bytes(), 3).unwrap();
    }
    let last_of_7 = log.log_end_offset() - 1;
    for i in 0..200i64 {
        let key = format!("k{}", i % 10);
        let recs = vec![
            (key.into_bytes(), Some(format!("{i}").into_bytes())),
            (b"a".to_vec(), Some(b"x".to_vec())),
            (b"b".to_vec(), Some(b"y".to_vec())),
        ];
        log.append_as_leader(batch_of(&recs, 2_000 + i), 4).unwrap();
    }
    log.roll().unwrap();
    let leo = log.log_end_offset();
    let model = live(&read_all(&log));
    log.clean(
        leo,
        clock.now_ms(),
        &CleanerConfig::default(),
        true,
        &mut never_stop,
    )
    .unwrap()
    .unwrap();
    let records = read_all(&log);
    assert_eq!(live(&records), model);
    assert_eq!(records.len(), 12);
    // The producer's last batch stays, empty, so its sequence survives.
    assert_eq!(
        log.producer_entry(7).unwrap().last_sequence(),
        39,
        "producer state"
    );
    let r = log.read(last_of_7 - 1, 1 << 20, leo).unwrap();
    let first = BatchIter::new(r.records).next().unwrap().unwrap();
    assert_eq!(first.last_offset(), last_of_7);
    assert_eq!(first.header().record_count, 0);
    assert_eq!(first.header().base_sequence, 38);
    // Reads starting in any gap return the next batch.
    for offset in 0..leo {
        let r = log.read(offset, 1, leo).unwrap();
        assert!(r.next_offset > offset, "{offset}");
    }
    // Timestamp lookups skip removed records.
    let (offset, ts) = log.offset_for_timestamp(0).unwrap().unwrap();
    assert!(ts >= 1_000);
    assert!(records.iter().any(|r| r.0 >= offset));
    assert_eq!(log.offset_for_timestamp(2_199).unwrap().unwrap().1, 2_199);

    // A far-behind follower copies the compacted log; its own policy is `delete`, so only
    // the gap marker (the cleaner checkpoint file written at the first gap) makes the
    // unclean reopen below keep the gaps instead of cutting the log at the first one.
    let fdir = tempfile::tempdir().unwrap();
    let follower_config = LogConfig {
        cleanup_policy: CleanupPolicy::DELETE,
        retention_ms: None,
        retention_bytes: None,
        ..compact_config(4 << 10)
    };
    let mut follower = open_log(fdir.path(), follower_config.clone(), &clock);
    let mut next = 0;
    while next < leo {
        let r = log.read(next, 1000, leo).unwrap();
        follower.append_as_follower(r.records.clone()).unwrap();
        next = r.next_offset;
        assert_eq!(follower.log_end_offset(), next);
    }
    assert_eq!(read_all(&follower), records);
    assert_eq!(follower.producer_entry(7).unwrap().last_sequence(), 39);
    assert_eq!(follower.latest_epoch(), Some(4));
    // A new leader write continues after the follower's LEO; a reopen reads the same.
    follower
        .append_as_leader(batch_of(&[(b"z".to_vec(), Some(b"1".to_vec()))], 3_000), 5)
        .unwrap();
    let copied = read_all(&follower);
    drop(follower);
    assert!(fdir.path().join(CLEANER_CHECKPOINT).exists());
    let follower = open_log(fdir.path(), follower_config, &clock);
    assert_eq!(read_all(&follower), copied);
    // Backwards offsets are still refused.
    let odir = tempfile::tempdir().unwrap();
    let mut other = open_log(odir.path(), compact_config(4 << 10), &clock);
    let r = log.read(0, 1 << 20, leo).unwrap();
    other.append_as_follower(r.records.clone()).unwrap();
    assert!(matches!(
        other.append_as_follower(r.records),
        Err(LogError::UnexpectedAppendOffset { .. })
    ));
}

/// A follower batch after an offset gap wider than a segment's relative offsets (a leader
/// whose cleaner removed over 2^31 offsets) starts its own segment: appends, reads and a
/// reopen work, and the LEO follows the leader's.
#[test]
fn a_follower_appends_across_a_gap_wider_than_a_segment() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000);
    let config = LogConfig {
        cleanup_policy: CleanupPolicy::DELETE,
        retention_ms: None,
        retention_bytes: None,
        ..compact_config(4 << 10)
    };
    let mut log = open_log(dir.path(), config.clone(), &clock);
    let at = |base: i64, n: usize| {
        let mut b = RecordBatchBuilder::new(base).partition_leader_epoch(2);
        for i in 0..n {
            b.append(1_000, Some(format!("k{i}").as_bytes()), Some(b"v"), &[]);
        }
        b.build().into_bytes()
    };
    log.append_as_follower(at(0, 3)).unwrap();
    let far = 3 + (1i64 << 32) + 5;
    log.append_as_follower(at(far, 2)).unwrap();
    assert_eq!(log.log_end_offset(), far + 2);
    assert_eq!(log.segment_base_offsets(), vec![0, far]);
    // And again from an empty active segment.
    log.roll().unwrap();
    let farther = far + 2 + (3i64 << 31);
    log.append_as_follower(at(farther, 1)).unwrap();
    assert_eq!(log.log_end_offset(), farther + 1);
    let offsets: Vec<i64> = read_all(&log).iter().map(|r| r.0).collect();
    assert_eq!(offsets, vec![0, 1, 2, far, far + 1, farther]);
    drop(log);
    let log = open_log(dir.path(), config, &clock);
    assert_eq!(log.log_end_offset(), farther + 1);
    let again: Vec<i64> = read_all(&log).iter().map(|r| r.0).collect();
    assert_eq!(again, offsets);
}

#[test]
fn compacted_topics_refuse_keyless_records_and_skip_retention() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000);
    let mut log = open_log(dir.path(), compact_config(4 << 10), &clock);
    let mut b = RecordBatchBuilder::new(0);
    b.append(1_000, Some(b"k"), Some(b"v"), &[]);
    b.append(1_000, None, Some(b"v"), &[]);
    assert!(matches!(
        log.append_as_leader(b.build().into_bytes(), 1),
        Err(LogError::InvalidRecord { .. })
    ));
    assert_eq!(log.log_end_offset(), 0);
    write_workload(&mut log, 2_000, 50, 50, 1_000);
    clock.advance(10 * DAY_MS);
    let segments = log.segment_count();
    // compact only: retention.ms = retention.bytes = 1 delete nothing.
    assert!(
        log.delete_old_segments(log.log_end_offset())
            .unwrap()
            .is_empty()
    );
    assert_eq!(log.segment_count(), segments);
    // compact,delete: both apply.
    let both = LogConfig {
        cleanup_policy: CleanupPolicy {
            delete: true,
            compact: true,
        },
        ..compact_config(4 << 10)
    };
    log.set_config(both).unwrap();
    let deleted = log.delete_old_segments(log.log_end_offset()).unwrap();
    assert_eq!(deleted.segment_count(), segments - 1);
    let _ = deleted.delete_files();
    // delete only: keyless records are fine.
    log.set_config(LogConfig {
        cleanup_policy: CleanupPolicy::DELETE,
        ..compact_config(4 << 10)
    })
    .unwrap();
    let mut b = RecordBatchBuilder::new(0);
    b.append(1_000, None, Some(b"v"), &[]);
    log.append_as_leader(b.build().into_bytes(), 1).unwrap();
    assert!(
        log.cleanable(log.log_end_offset(), clock.now_ms())
            .is_none()
    );
}

/// Kafka's scheduling rules: only below the active segment and the upper bound, not within
/// `min.compaction.lag.ms`, only at `min.cleanable.dirty.ratio` unless
/// `max.compaction.lag.ms` forces it.
#[test]
fn cleanable_range_and_due_rules() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(100_000);
    let mut log = open_log(dir.path(), compact_config(4 << 10), &clock);
    write_workload(&mut log, 2_000, 50, 50, 50_000);
    let bases = log.segment_base_offsets();
    let active = *bases.last().unwrap();
    let leo = log.log_end_offset();
    let c = log.cleanable(leo, clock.now_ms()).unwrap();
    assert_eq!(c.first_uncleanable, active);
    assert_eq!(c.first_dirty, 0);
    assert_eq!(c.clean_bytes, 0);
    assert!(c.due(0.5));
    // The upper bound (HW) inside segment 3: segments 0..=2 only.
    let c = log.cleanable(bases[3] + 1, clock.now_ms()).unwrap();
    assert_eq!(c.first_uncleanable, bases[3]);
    // min.compaction.lag.ms: every record is 50 s old.
    log.set_config(LogConfig {
        min_compaction_lag_ms: 60_000,
        ..compact_config(4 << 10)
    })
    .unwrap();
    let c = log.cleanable(leo, clock.now_ms()).unwrap();
    assert_eq!(c.first_uncleanable, 0);
    assert!(!c.due(0.0));
    log.set_config(compact_config(4 << 10)).unwrap();
    log.clean(
        leo,
        clock.now_ms(),
        &CleanerConfig::default(),
        false,
        &mut never_stop,
    )
    .unwrap()
    .unwrap();
    // A little new dirty data: below the ratio, unless max.compaction.lag.ms forces it.
    write_workload(&mut log, 60, 50, 50, 60_000);
    log.roll().unwrap();
    let leo = log.log_end_offset();
    let c = log.cleanable(leo, clock.now_ms()).unwrap();
    assert!(c.dirty_bytes > 0 && c.clean_bytes > 0, "{c:?}");
    assert!(!c.lag_forced);
    let ratio = c.dirty_ratio();
    assert!(!c.due(ratio + 0.01) && c.due(ratio));
    log.set_config(LogConfig {
        max_compaction_lag_ms: 30_000,
        min_cleanable_dirty_ratio: 0.99,
        ..compact_config(4 << 10)
    })
    .unwrap();
    let c = log.cleanable(leo, clock.now_ms()).unwrap();
    assert!(c.lag_forced && c.due(0.99));
}

#[test]
fn a_crash_leftover_swap_without_its_segment_is_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000);
    let mut log = open_log(dir.path(), compact_config(4 << 10), &clock);
    write_workload(&mut log, 500, 20, 50, 1_000);
    let leo = log.log_end_offset();
    drop(log);
    let stray = dir.path().join(format!("{:020}.log.swap", 999_999));
    std::fs::write(&stray, b"garbage").unwrap();
    let log = open_log(dir.path(), compact_config(4 << 10), &clock);
    assert!(!stray.exists());
    assert_eq!(log.log_end_offset(), leo);
}

#[test]
fn offset_map_is_bounded() {
    let mut m = OffsetMap::new(3);
    assert!(m.put(b"a", 1) && m.put(b"b", 2) && m.put(b"c", 3));
    assert!(!m.put(b"d", 4), "full");
    assert!(m.put(b"a", 9), "an update of a mapped key fits");
    assert_eq!(m.get(b"a"), Some(9));
    assert_eq!(m.get(b"d"), None);
    assert_eq!(m.len(), 3);
    assert_ne!(key_digest(b"a"), key_digest(b"b"));
    assert_eq!(
        CleanerConfig::default().offset_map_max_entries(),
        (((128u64 << 20) / 24) as f64 * 0.9) as usize
    );
}

#[derive(Debug, Clone)]
enum Op {
    Put(u8, u8),
    Delete(u8),
    Clean {
        advance_ms: i64,
    },
    /// A pass stopped at its `stop_at`-th step (a crash), then the log reopened.
    CrashInClean {
        advance_ms: i64,
        stop_at: usize,
    },
    Roll,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0u8..12, any::<u8>()).prop_map(|(k, v)| Op::Put(k, v)),
        2 => (0u8..12).prop_map(Op::Delete),
        1 => (0i64..3).prop_map(|d| Op::Clean { advance_ms: d * 600 }),
        1 => (0i64..3, 0usize..12)
            .prop_map(|(d, stop_at)| Op::CrashInClean { advance_ms: d * 600, stop_at }),
        1 => Just(Op::Roll),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// Random appends, deletes, rolls, passes and passes cut by a crash at a random step
    /// (then a reopen), with a small offset map and a short `delete.retention.ms`, keep
    /// "latest value per key" equal to a model; tombstones older than the retention are
    /// gone after a pass; a reopen reads the same.
    #[test]
    fn cleaning_keeps_the_latest_value_per_key(ops in proptest::collection::vec(op(), 1..80)) {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(10_000);
        let config = LogConfig { delete_retention_ms: 1_000, ..compact_config(1024) };
        let mut log = open_log(dir.path(), config.clone(), &clock);
        let cleaner = CleanerConfig::with_max_entries(4);
        let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        for op in ops {
            match op {
                Op::Put(k, v) => {
                    let rec = (vec![k], Some(vec![v; 40]));
                    log.append_as_leader(batch_of(&[rec], clock.now_ms()), 1).unwrap();
                    model.insert(vec![k], vec![v; 40]);
                }
                Op::Delete(k) => {
                    log.append_as_leader(batch_of(&[(vec![k], None)], clock.now_ms()), 1).unwrap();
                    model.remove(&vec![k]);
                }
                Op::Roll => log.roll().unwrap(),
                Op::CrashInClean { advance_ms, stop_at } => {
                    clock.advance(advance_ms);
                    let leo = log.log_end_offset();
                    let mut n = 0;
                    log.clean(leo, clock.now_ms(), &cleaner, true, &mut |_| {
                        n += 1;
                        n <= stop_at
                    })
                    .unwrap();
                    drop(log);
                    log = open_log(dir.path(), config.clone(), &clock);
                    prop_assert_eq!(log.log_end_offset(), leo);
                }
                Op::Clean { advance_ms } => {
                    clock.advance(advance_ms);
                    let leo = log.log_end_offset();
                    log.clean(leo, clock.now_ms(), &cleaner, true, &mut never_stop).unwrap();
                }
            }
            let records = read_all(&log);
            prop_assert_eq!(&live(&records), &model);
            // Keys are unique below the checkpoint, but for the (few) keys mapped past a
            // full map: at most one record per key in the cleaned part.
            if let Some(cp) = log.cleaner_checkpoint() {
                let mut seen = std::collections::HashSet::new();
                for r in records.iter().filter(|r| r.0 < cp) {
                    prop_assert!(seen.insert(r.1.clone()), "duplicate key below the checkpoint");
                }
            }
        }
        let leo = log.log_end_offset();
        log.roll().unwrap();
        // Passes until the whole log is clean (each maps at least one new key), then two
        // more after the horizon of every tombstone kept.
        let mut passes = 0;
        while log.cleaner_checkpoint() != Some(leo) {
            if log.clean(leo, clock.now_ms(), &cleaner, true, &mut never_stop).unwrap().is_none() {
                break; // nothing cleanable (an empty log)
            }
            passes += 1;
            prop_assert!(passes < 200);
        }
        for _ in 0..2 {
            clock.advance(1_000);
            log.clean(leo, clock.now_ms(), &cleaner, true, &mut never_stop).unwrap();
        }
        let records = read_all(&log);
        prop_assert_eq!(&live(&records), &model);
        prop_assert!(records.iter().all(|r| r.2.is_some()), "no tombstone after its horizon");
        drop(log);
        let log = open_log(dir.path(), config, &clock);
        prop_assert_eq!(&live(&read_all(&log)), &model);
    }
}
