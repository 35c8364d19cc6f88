//! Behaviour tests of the partition log (issue 4 acceptance): reads at every offset,
//! truncate-then-append equivalence, bad input leaving the log unchanged, idempotent
//! duplicates, epoch cache upkeep, retention, rolling, recovery from flipped bytes and cut
//! files, checkpoints and the clean-shutdown marker. Time comes from a `ManualClock`.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use keel_broker::log::Log;
use keel_broker::log::{
    LogConfig, LogError, LogManager, LogOpenOptions, ManualClock, TopicPartition,
};
use keel_record::{BatchIter, RecordBatchBuilder};
use proptest::prelude::*;

fn small_config() -> LogConfig {
    LogConfig {
        segment_bytes: 4096,
        index_interval_bytes: 256,
        retention_ms: None,
        ..LogConfig::default()
    }
}

/// A batch of `records` records with `value_bytes`-byte values and timestamp `ts`.
fn batch(records: usize, value_bytes: usize, ts: i64) -> Bytes {
    let mut b = RecordBatchBuilder::new(0);
    for i in 0..records {
        let v = vec![(i % 251) as u8; value_bytes];
        b.append(
            ts + i as i64,
            Some(format!("k{i}").as_bytes()),
            Some(&v),
            &[],
        );
    }
    b.build().into_bytes()
}

fn idempotent_batch(pid: i64, epoch: i16, seq: i32, records: usize) -> Bytes {
    let mut b = RecordBatchBuilder::new(0).producer(pid, epoch, seq);
    for i in 0..records {
        b.append(1000 + i as i64, None, Some(b"payload"), &[]);
    }
    b.build().into_bytes()
}

fn open(dir: &Path, config: LogConfig, clock: &ManualClock, opts: LogOpenOptions) -> Log {
    Log::open(dir, config, Arc::new(clock.clone()), opts).unwrap()
}

fn open_unclean(dir: &Path, config: LogConfig) -> Log {
    open(dir, config, &ManualClock::new(0), LogOpenOptions::default())
}

/// All segment bytes of a log directory, concatenated in offset order.
fn log_bytes(dir: &Path) -> Vec<u8> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    files.sort();
    files.iter().flat_map(|p| fs::read(p).unwrap()).collect()
}

/// Every batch of the log read back through `read`, checked: CRC valid, contiguous from the
/// log start, ending at the LEO. Returns (base offset, last offset) pairs.
fn check_whole_log(log: &Log) -> Vec<(i64, i64)> {
    let mut out = Vec::new();
    let mut next = log.log_start_offset();
    // The first batch may start below a log start that DeleteRecords moved inside it.
    let mut first = true;
    // Bounded: every read returns at least one batch or we stop.
    while next < log.log_end_offset() {
        let r = log.read(next, 1 << 20, log.log_end_offset()).unwrap();
        assert!(
            !r.records.is_empty(),
            "read at {next} below LEO returned nothing"
        );
        for b in BatchIter::new(r.records.clone()) {
            let b = b.unwrap();
            b.validate().unwrap();
            if first && b.base_offset() < next {
                assert!(
                    b.last_offset() >= next,
                    "the first batch holds the log start"
                );
            } else {
                assert_eq!(b.base_offset(), next, "contiguous batches");
            }
            first = false;
            out.push((b.base_offset(), b.last_offset()));
            next = b.last_offset() + 1;
        }
        assert_eq!(next, r.next_offset);
    }
    assert_eq!(next, log.log_end_offset());
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Reading at every offset returns whole batches starting with the batch containing it,
    /// before and after a reopen (clean and unclean).
    #[test]
    fn reads_at_every_offset_return_the_containing_batch(
        shapes in proptest::collection::vec((1usize..6, 0usize..400), 1..40),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(0);
        let mut log = open(dir.path(), small_config(), &clock, LogOpenOptions::default());
        let mut ranges = Vec::new();
        for (i, (n, size)) in shapes.iter().enumerate() {
            let info = log.append_as_leader(batch(*n, *size, i as i64), 0).unwrap();
            prop_assert_eq!(info.last_offset - info.first_offset + 1, *n as i64);
            ranges.push((info.first_offset, info.last_offset));
        }
        prop_assert!(log.segment_count() >= 1);
        for reopen in 0..3 {
            for &(first, last) in &ranges {
                for off in first..=last {
                    let r = log.read(off, 1, log.log_end_offset()).unwrap();
                    let b = BatchIter::new(r.records).next().unwrap().unwrap();
                    prop_assert_eq!((b.base_offset(), b.last_offset()), (first, last));
                    b.validate().unwrap();
                }
            }
            prop_assert_eq!(check_whole_log(&log), ranges.clone());
            // Upper bound: nothing at or past it.
            let r = log.read(0, 1 << 20, ranges[0].1).unwrap();
            prop_assert!(r.records.is_empty());
            let leo = log.log_end_offset();
            let out_of_range = matches!(log.read(leo + 1, 10, leo), Err(LogError::OffsetOutOfRange { .. }));
            prop_assert!(out_of_range);
            let clean = reopen == 0;
            if clean { log.close().unwrap(); } else { drop(log); }
            log = open(dir.path(), small_config(), &clock,
                LogOpenOptions { recovery_point: 0, clean_shutdown: clean });
            prop_assert_eq!(log.log_end_offset(), leo);
        }
    }

    /// truncate_to at a random offset and re-appending gives the same bytes as a fresh log
    /// that saw only the surviving appends and the new ones.
    #[test]
    fn truncate_then_append_equals_fresh_log(
        shapes in proptest::collection::vec((1usize..6, 0usize..300), 2..30),
        cut in any::<proptest::sample::Index>(),
        tail in proptest::collection::vec((1usize..6, 0usize..300), 0..10),
    ) {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let mut log = open_unclean(a.path(), small_config());
        let mut ranges = Vec::new();
        for (i, (n, size)) in shapes.iter().enumerate() {
            let info = log.append_as_leader(batch(*n, *size, i as i64), (i / 5) as i32).unwrap();
            ranges.push((info.first_offset, info.last_offset));
        }
        let cut_offset = cut.index(log.log_end_offset() as usize) as i64;
        log.truncate_to(cut_offset).unwrap();
        // Batches whose last offset is >= cut_offset are gone.
        let kept = ranges.iter().take_while(|r| r.1 < cut_offset).count();
        prop_assert_eq!(log.log_end_offset(), if kept == 0 { 0 } else { ranges[kept - 1].1 + 1 });
        let mut fresh = open_unclean(b.path(), small_config());
        for (i, (n, size)) in shapes.iter().enumerate().take(kept) {
            fresh.append_as_leader(batch(*n, *size, i as i64), (i / 5) as i32).unwrap();
        }
        prop_assert_eq!(log.epoch_cache().entries(), fresh.epoch_cache().entries());
        for (i, (n, size)) in tail.iter().enumerate() {
            let t = 1000 + i as i64;
            let x = log.append_as_leader(batch(*n, *size, t), 9).unwrap();
            let y = fresh.append_as_leader(batch(*n, *size, t), 9).unwrap();
            prop_assert_eq!(x, y);
        }
        prop_assert_eq!(log.log_end_offset(), fresh.log_end_offset());
        prop_assert_eq!(log_bytes(a.path()), log_bytes(b.path()));
        prop_assert_eq!(log.epoch_cache().entries(), fresh.epoch_cache().entries());
        check_whole_log(&log);
    }

    /// Flipping any byte (outside the partition leader epoch, which the CRC does not cover by
    /// design) or cutting a segment recovers to the last valid batch before the damage and
    /// drops later segments.
    #[test]
    fn flipped_byte_or_cut_recovers_to_last_valid_batch(
        shapes in proptest::collection::vec((1usize..4, 0usize..300), 2..25),
        at in any::<proptest::sample::Index>(),
        flip in 1u8..=255,
        cut_instead in any::<bool>(),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let mut log = open_unclean(dir.path(), small_config());
        for (i, (n, size)) in shapes.iter().enumerate() {
            log.append_as_leader(batch(*n, *size, i as i64), 3).unwrap();
        }
        // Map every byte of the concatenated segments to (file, position, batch base offset,
        // position within batch).
        let mut layout = Vec::new();
        for base in log.segment_base_offsets() {
            let path = dir.path().join(format!("{base:020}.log"));
            let data = fs::read(&path).unwrap();
            let mut pos = 0usize;
            for b in BatchIter::new(Bytes::from(data)) {
                let b = b.unwrap();
                for i in 0..b.size_bytes() {
                    layout.push((path.clone(), pos + i, b.base_offset(), i));
                }
                pos += b.size_bytes();
            }
        }
        log.close().unwrap();
        let (path, pos, batch_base, in_batch) = layout[at.index(layout.len())].clone();
        prop_assume!(cut_instead || !(12..16).contains(&in_batch));
        let mut data = fs::read(&path).unwrap();
        if cut_instead {
            data.truncate(pos);
        } else {
            data[pos] ^= flip;
        }
        fs::write(&path, &data).unwrap();
        // Unclean open with recovery point 0: every segment is scanned.
        let log = open_unclean(dir.path(), small_config());
        prop_assert_eq!(log.log_end_offset(), batch_base);
        let batches = check_whole_log(&log);
        prop_assert_eq!(batches.last().map_or(0, |b| b.1 + 1), batch_base);
    }
}

/// Bad CRC, too large, out-of-order sequence and an older producer epoch return the exact
/// error and leave LEO and file bytes unchanged.
#[test]
fn bad_appends_return_exact_error_and_leave_log_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        max_message_bytes: 2000,
        ..small_config()
    };
    let mut log = open_unclean(dir.path(), config);
    log.append_as_leader(batch(3, 10, 0), 1).unwrap();
    log.append_as_leader(idempotent_batch(7, 2, 0, 2), 1)
        .unwrap();
    let leo = log.log_end_offset();
    let bytes = log_bytes(dir.path());
    let unchanged = |log: &Log| {
        assert_eq!(log.log_end_offset(), leo);
        assert_eq!(log_bytes(dir.path()), bytes);
    };

    let mut corrupt = batch(2, 10, 5).to_vec();
    let last = corrupt.len() - 1;
    corrupt[last] ^= 0x40;
    let err = log.append_as_leader(Bytes::from(corrupt), 1).unwrap_err();
    assert!(matches!(err, LogError::CorruptMessage(_)), "{err}");
    assert_eq!(err.kafka_name(), "CORRUPT_MESSAGE");
    unchanged(&log);

    let big = batch(3, 1000, 5);
    let err = log.append_as_leader(big.clone(), 1).unwrap_err();
    assert!(
        matches!(err, LogError::MessageTooLarge { size_bytes, max_bytes: 2000 } if size_bytes == big.len()),
        "{err}"
    );
    assert_eq!(err.kafka_name(), "MESSAGE_TOO_LARGE");
    unchanged(&log);

    let err = log
        .append_as_leader(idempotent_batch(7, 2, 5, 1), 1)
        .unwrap_err();
    assert!(
        matches!(
            err,
            LogError::OutOfOrderSequence {
                producer_id: 7,
                producer_epoch: 2,
                first_sequence: 5,
                last_sequence: 1
            }
        ),
        "{err}"
    );
    assert_eq!(err.kafka_name(), "OUT_OF_ORDER_SEQUENCE_NUMBER");
    unchanged(&log);

    let err = log
        .append_as_leader(idempotent_batch(7, 1, 2, 1), 1)
        .unwrap_err();
    assert!(
        matches!(
            err,
            LogError::InvalidProducerEpoch {
                current_epoch: 2,
                ..
            }
        ),
        "{err}"
    );
    unchanged(&log);

    // A producer id without a sequence.
    let mut b = RecordBatchBuilder::new(0).producer(9, 0, -1);
    b.append(1, None, Some(b"x"), &[]);
    let err = log.append_as_leader(b.build().into_bytes(), 1).unwrap_err();
    assert_eq!(err.kafka_name(), "INVALID_RECORD", "{err}");
    unchanged(&log);

    // Truncated input and an empty batch.
    let err = log
        .append_as_leader(batch(2, 10, 5).slice(..30), 1)
        .unwrap_err();
    assert!(matches!(err, LogError::CorruptMessage(_)), "{err}");
    let err = log
        .append_as_leader(RecordBatchBuilder::new(0).build().into_bytes(), 1)
        .unwrap_err();
    assert!(matches!(err, LogError::CorruptMessage(_)), "{err}");
    unchanged(&log);

    // Follower appends: gap, and a bad batch after a good one (nothing written).
    let mut good = RecordBatchBuilder::new(leo);
    good.append(1, None, Some(b"x"), &[]);
    let good = good.build().into_bytes();
    let err = log.append_as_follower(batch(1, 1, 0)).unwrap_err();
    assert!(
        matches!(err, LogError::UnexpectedAppendOffset { expected, got: 0 } if expected == leo)
    );
    let mut two = good.to_vec();
    let mut bad = RecordBatchBuilder::new(leo + 1);
    bad.append(1, None, Some(b"y"), &[]);
    let mut bad = bad.build().into_bytes().to_vec();
    let last = bad.len() - 1;
    bad[last] ^= 1;
    two.extend_from_slice(&bad);
    assert!(matches!(
        log.append_as_follower(Bytes::from(two)),
        Err(LogError::CorruptMessage(_))
    ));
    unchanged(&log);
    assert_eq!(
        log.append_as_follower(good).unwrap().unwrap().first_offset,
        leo
    );
}

/// A retried idempotent batch gets its original offsets and is not written again, also after
/// a clean reopen (snapshot) and an unclean one (rebuild by scan).
#[test]
fn idempotent_duplicate_returns_original_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open_unclean(dir.path(), small_config());
    let first = log
        .append_as_leader(idempotent_batch(42, 0, 0, 3), 0)
        .unwrap();
    log.append_as_leader(batch(2, 5, 0), 0).unwrap();
    let second = log
        .append_as_leader(idempotent_batch(42, 0, 3, 2), 0)
        .unwrap();
    let leo = log.log_end_offset();
    let dup = log
        .append_as_leader(idempotent_batch(42, 0, 0, 3), 0)
        .unwrap();
    assert_eq!(
        (dup.first_offset, dup.last_offset, dup.duplicate),
        (first.first_offset, first.last_offset, true)
    );
    assert_eq!(log.log_end_offset(), leo);
    for clean in [true, false] {
        if clean {
            log.close().unwrap();
        } else {
            drop(log);
        }
        log = open(
            dir.path(),
            small_config(),
            &ManualClock::new(0),
            LogOpenOptions {
                recovery_point: 0,
                clean_shutdown: clean,
            },
        );
        let dup = log
            .append_as_leader(idempotent_batch(42, 0, 3, 2), 0)
            .unwrap();
        assert_eq!(
            (dup.first_offset, dup.duplicate),
            (second.first_offset, true)
        );
        assert_eq!(log.log_end_offset(), leo);
        assert_eq!(log.producer_entry(42).unwrap().last_sequence(), 4);
    }
    // Truncation below a producer batch rebuilds the state without it.
    log.truncate_to(second.first_offset).unwrap();
    assert_eq!(log.producer_entry(42).unwrap().last_sequence(), 2);
    let again = log
        .append_as_leader(idempotent_batch(42, 0, 3, 2), 0)
        .unwrap();
    assert!(!again.duplicate);
}

/// The log keeps the epoch cache in step with appends, truncation and retention.
#[test]
fn epoch_cache_follows_appends_truncation_and_retention() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(0);
    let config = LogConfig {
        segment_bytes: 1024,
        retention_bytes: Some(900),
        ..small_config()
    };
    let mut log = open(
        dir.path(),
        config.clone(),
        &clock,
        LogOpenOptions::default(),
    );
    for epoch in [1, 1, 2, 2, 2, 5] {
        log.append_as_leader(batch(2, 200, 0), epoch).unwrap();
    }
    let e: Vec<_> = log
        .epoch_cache()
        .entries()
        .iter()
        .map(|e| (e.epoch, e.start_offset))
        .collect();
    assert_eq!(e, vec![(1, 0), (2, 4), (5, 10)]);
    assert_eq!(log.end_offset_for_epoch(2), (2, 10));
    assert_eq!(log.end_offset_for_epoch(3), (2, 10));
    assert_eq!(log.end_offset_for_epoch(5), (5, 12));
    // A new leader records its epoch at the LEO before writing (KAFKA-7415).
    log.assign_epoch_start_offset(6).unwrap();
    assert_eq!(log.end_offset_for_epoch(5), (5, 12));
    assert_eq!(log.end_offset_for_epoch(6), (6, 12));
    log.truncate_to(9).unwrap();
    assert_eq!(log.log_end_offset(), 8);
    assert_eq!(log.latest_epoch(), Some(2));
    drop(log);
    let mut log = open(dir.path(), config, &clock, LogOpenOptions::default());
    assert_eq!(log.latest_epoch(), Some(2));
    let deleted = log.delete_old_segments(log.log_end_offset()).unwrap();
    assert!(deleted.segment_count() > 0);
    assert!(deleted.delete_files().is_empty());
    let first = log.epoch_cache().earliest_entry().unwrap();
    assert_eq!(first.start_offset, log.log_start_offset());
    assert!(log.size_bytes() <= 900 + 1024);
}

/// A replica that led an epoch without writing in it holds that epoch's start at its LEO
/// (KAFKA-7415). Following a leader that never had the epoch, it is told to truncate to its
/// own LEO: no batch goes, but the epoch entry must (Kafka `UnifiedLog.truncateTo` "always
/// truncate epoch cache"), else its next fetch sends the same last fetched epoch and the
/// leader reports the same divergence again, forever.
#[test]
fn truncation_at_the_log_end_drops_epochs_starting_there() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(0);
    let entries = |log: &Log| -> Vec<(i32, i64)> {
        log.epoch_cache()
            .entries()
            .iter()
            .map(|e| (e.epoch, e.start_offset))
            .collect()
    };
    let mut log = open(
        dir.path(),
        small_config(),
        &clock,
        LogOpenOptions::default(),
    );
    log.append_as_leader(batch(3, 10, 0), 0).unwrap();
    log.assign_epoch_start_offset(1).unwrap();
    assert_eq!(entries(&log), vec![(0, 0), (1, 3)]);
    // At the LEO and beyond it: no batch removed, the entry starting at the LEO goes.
    assert!(!log.truncate_to(3).unwrap());
    assert_eq!(log.log_end_offset(), 3);
    assert_eq!(entries(&log), vec![(0, 0)]);
    assert_eq!(log.end_offset_for_epoch(0), (0, 3));
    log.assign_epoch_start_offset(1).unwrap();
    assert!(!log.truncate_to(10).unwrap());
    assert_eq!(entries(&log), vec![(0, 0)]);
    // Entries starting below the LEO stay; the change is persisted.
    log.append_as_leader(batch(2, 10, 0), 2).unwrap();
    assert!(!log.truncate_to(5).unwrap());
    assert_eq!(entries(&log), vec![(0, 0), (2, 3)]);
    log.assign_epoch_start_offset(3).unwrap();
    assert!(!log.truncate_to(5).unwrap());
    drop(log);
    let mut log = open(
        dir.path(),
        small_config(),
        &clock,
        LogOpenOptions::default(),
    );
    assert_eq!(entries(&log), vec![(0, 0), (2, 3)]);
    // An empty log restarted at its start: a truncation below the start drops an epoch that
    // starts at the (empty) log's end too.
    log.truncate_fully_and_start_at(5).unwrap();
    log.assign_epoch_start_offset(4).unwrap();
    assert_eq!(entries(&log), vec![(4, 5)]);
    assert!(!log.truncate_to(2).unwrap());
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (5, 5));
    assert_eq!(entries(&log), Vec::<(i32, i64)>::new());
}

/// Rolling by `segment.bytes` and by `segment.ms`; retention by `retention.ms` respects the HW
/// and never deletes the active segment; reads below the new log start are out of range.
#[test]
fn roll_and_retention() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000_000);
    let config = LogConfig {
        segment_bytes: 64 * 1024,
        segment_ms: 60_000,
        retention_ms: Some(3_600_000),
        ..small_config()
    };
    let mut log = open(dir.path(), config, &clock, LogOpenOptions::default());
    // Roll by size.
    for _ in 0..10 {
        log.append_as_leader(batch(10, 1000, 1_000_000), 0).unwrap();
    }
    assert_eq!(log.segment_count(), 2);
    // Roll by time (record timestamps, Kafka's rollingBasedTimestamp).
    log.append_as_leader(batch(1, 10, 1_000_000 + 61_000), 0)
        .unwrap();
    assert_eq!(log.segment_count(), 3);
    let bases = log.segment_base_offsets();
    // Nothing is old enough yet.
    clock.advance(1000);
    assert!(
        log.delete_old_segments(log.log_end_offset())
            .unwrap()
            .is_empty()
    );
    clock.set(1_000_000 + 3_600_000 + 60_001);
    // The HW keeps segments that are not fully replicated.
    assert_eq!(
        log.delete_old_segments(bases[1]).unwrap().segment_count(),
        1
    );
    assert_eq!(log.log_start_offset(), bases[1]);
    assert_eq!(
        log.delete_old_segments(log.log_end_offset())
            .unwrap()
            .segment_count(),
        1
    );
    assert_eq!(log.segment_count(), 1, "the active segment stays");
    assert_eq!(log.log_start_offset(), bases[2]);
    assert!(matches!(
        log.read(0, 100, 1000),
        Err(LogError::OffsetOutOfRange { .. })
    ));
    check_whole_log(&log);
}

/// `flush.messages=1` moves the recovery point with every append; the default never flushes
/// on its own; `flush.ms` flushes when due on the injected clock.
#[test]
fn flush_policy_moves_recovery_point() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(0);
    let every = LogConfig {
        flush_interval_messages: Some(1),
        ..small_config()
    };
    let mut log = open(
        &dir.path().join("a-0"),
        every,
        &clock,
        LogOpenOptions::default(),
    );
    for _ in 0..3 {
        log.append_as_leader(batch(2, 10, 0), 0).unwrap();
        assert_eq!(log.recovery_point(), log.log_end_offset());
    }
    let mut never = open(
        &dir.path().join("b-0"),
        small_config(),
        &clock,
        LogOpenOptions::default(),
    );
    never.append_as_leader(batch(2, 10, 0), 0).unwrap();
    assert_eq!(never.recovery_point(), 0);
    let timed = LogConfig {
        flush_interval_ms: Some(500),
        ..small_config()
    };
    let mut log = open(
        &dir.path().join("c-0"),
        timed,
        &clock,
        LogOpenOptions::default(),
    );
    log.append_as_leader(batch(2, 10, 0), 0).unwrap();
    assert_eq!(log.recovery_point(), 0);
    assert!(!log.flush_if_due().unwrap());
    clock.advance(500);
    assert!(log.flush_if_due().unwrap());
    assert_eq!(log.recovery_point(), 2);
}

/// A flush taken under the partition lock and run outside it (`begin_flush` / `run` /
/// `finish_flush`) makes durable what was there when it was taken, no more; a truncation in
/// between keeps the recovery point where the truncation put it.
#[test]
fn a_flush_run_outside_the_lock_covers_only_what_it_took() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(0);
    let timed = LogConfig {
        flush_interval_ms: Some(500),
        ..small_config()
    };
    let mut log = open(dir.path(), timed, &clock, LogOpenOptions::default());
    log.append_as_leader(batch(2, 10, 0), 0).unwrap();
    assert!(log.begin_flush_if_due().is_none(), "not due yet");
    clock.advance(500);
    let job = log.begin_flush_if_due().expect("due");
    // Appends go on while the job runs.
    log.append_as_leader(batch(3, 10, 0), 0).unwrap();
    let result = job.run();
    log.finish_flush(job, result).unwrap();
    assert_eq!(log.recovery_point(), 2);
    assert_eq!(log.log_end_offset(), 5);
    // The timer restarted: the rest waits for the next interval.
    assert!(log.begin_flush_if_due().is_none());
    clock.advance(500);
    let job = log.begin_flush_if_due().expect("due");
    // The log is cut below the job's LEO and grows past it again before the job ends.
    log.truncate_to(2).unwrap();
    log.append_as_leader(batch(6, 10, 0), 0).unwrap();
    let result = job.run();
    log.finish_flush(job, result).unwrap();
    assert_eq!(
        log.recovery_point(),
        2,
        "offsets 2..8 were written after the flush began"
    );
    log.flush().unwrap();
    assert_eq!(log.recovery_point(), 8);
}

#[test]
fn offset_for_timestamp_finds_first_record_at_or_after() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open_unclean(dir.path(), small_config());
    for i in 0..50 {
        log.append_as_leader(batch(4, 100, i * 10), 0).unwrap();
    }
    // Batch i holds timestamps i*10 .. i*10+3 at offsets 4i .. 4i+3.
    assert_eq!(log.offset_for_timestamp(0).unwrap(), Some((0, 0)));
    assert_eq!(log.offset_for_timestamp(252).unwrap(), Some((102, 252)));
    assert_eq!(log.offset_for_timestamp(255).unwrap(), Some((104, 260)));
    assert_eq!(log.offset_for_timestamp(10_000).unwrap(), None);
}

/// ListOffsets MAX_TIMESTAMP (KIP-734): the first record carrying the log's largest timestamp,
/// across segments, even when later records have smaller timestamps.
#[test]
fn offset_of_max_timestamp_is_the_first_record_with_the_largest_timestamp() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open_unclean(dir.path(), small_config());
    assert_eq!(log.offset_of_max_timestamp().unwrap(), None);
    for i in 0..50 {
        // Batch i holds timestamps t .. t+3 at offsets 4i .. 4i+3, t = i*10 except batch 20
        // (5000..5003 at offsets 80..83: the largest, 5003 at offset 83) and batch 30
        // (4997..5000, later and smaller).
        let t = match i {
            20 => 5000,
            30 => 4997,
            _ => i * 10,
        };
        log.append_as_leader(batch(4, 100, t), 0).unwrap();
    }
    assert!(log.segment_count() > 1, "spans several segments");
    assert_eq!(log.offset_of_max_timestamp().unwrap(), Some((83, 5003)));
    let dir = tempfile::tempdir().unwrap();
    let mut log = open_unclean(dir.path(), small_config());
    log.append_as_leader(batch(4, 100, 7003), 0).unwrap();
    log.append_as_leader(batch(4, 100, 7000), 0).unwrap();
    // 7006 (offset 3) is the largest; 7003 appears twice (offsets 0 and 7).
    assert_eq!(log.offset_of_max_timestamp().unwrap(), Some((3, 7006)));
}

/// A full truncation restarts the log at a new offset; the next open sees the same start.
#[test]
fn truncate_fully_and_start_at() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open_unclean(dir.path(), small_config());
    for _ in 0..20 {
        log.append_as_leader(batch(3, 200, 0), 4).unwrap();
    }
    log.truncate_fully_and_start_at(1000).unwrap();
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (1000, 1000));
    assert!(log.epoch_cache().entries().is_empty());
    let info = log.append_as_leader(batch(1, 10, 0), 5).unwrap();
    assert_eq!(info.first_offset, 1000);
    drop(log);
    let log = open_unclean(dir.path(), small_config());
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (1000, 1001));
}

/// DeleteRecords' log start (KIP-107): it moves inside a segment (reads below it are out of
/// range, ListOffsets by timestamp does not answer below it), whole segments below it go,
/// it survives a reopen (clean or not), never moves back or past the LEO, retention and a
/// truncation below it keep it, and a full restart at another offset forgets it.
#[test]
fn the_log_start_moves_inside_a_segment_and_survives_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open_unclean(dir.path(), small_config());
    // 20 batches of 3 records, timestamps 0.. (each batch's records at ts, ts+1, ts+2).
    for i in 0..20 {
        log.append_as_leader(batch(3, 200, i * 10), 1).unwrap();
    }
    let bases = log.segment_base_offsets();
    assert!(bases.len() >= 3, "{bases:?}");
    assert_eq!(
        log.increment_log_start_offset(61).unwrap_err().to_string(),
        LogError::InvalidOffset {
            offset: 61,
            reason: "the log start cannot move past the log end"
        }
        .to_string()
    );
    // Inside the second segment: the first one goes, the second stays.
    let inside = bases[1] + 2;
    let (moved, deleted) = log.increment_log_start_offset(inside).unwrap();
    assert!(moved);
    assert_eq!(deleted.segment_count(), 1);
    deleted.delete_files();
    assert_eq!(log.log_start_offset(), inside);
    assert_eq!(log.segment_base_offsets()[0], bases[1]);
    assert!(matches!(
        log.read(inside - 1, 1000, 60),
        Err(LogError::OffsetOutOfRange { .. })
    ));
    let read = log.read(inside, 100_000, 60).unwrap();
    assert!(!read.records.is_empty());
    // A timestamp whose record lies below the start is answered with the first record at
    // or above the start.
    assert_eq!(
        log.offset_for_timestamp(0).unwrap().map(|(o, _)| o),
        Some(inside)
    );
    // Never backwards.
    assert!(!log.increment_log_start_offset(inside - 1).unwrap().0);
    assert_eq!(log.log_start_offset(), inside);
    drop(log);
    // Reopened after a crash (no clean marker, no recovery point): the start is kept.
    let mut log = open_unclean(dir.path(), small_config());
    assert_eq!(log.log_start_offset(), inside);
    assert_eq!(log.log_end_offset(), 60);
    check_whole_log(&log);
    // A truncation below the start empties the log but keeps the start.
    log.truncate_to(inside - 1).unwrap();
    assert_eq!(
        (log.log_start_offset(), log.log_end_offset()),
        (inside, inside)
    );
    for i in 0..5 {
        log.append_as_leader(batch(3, 200, 1000 + i), 2).unwrap();
    }
    // It moves again inside the new segment.
    log.increment_log_start_offset(inside + 4)
        .unwrap()
        .1
        .delete_files();
    assert_eq!(log.log_start_offset(), inside + 4);
    // A full restart elsewhere forgets the stored start, even a higher one.
    log.truncate_fully_and_start_at(inside + 1).unwrap();
    drop(log);
    let log = open_unclean(dir.path(), small_config());
    assert_eq!(
        (log.log_start_offset(), log.log_end_offset()),
        (inside + 1, inside + 1)
    );
}

/// A log whose start is inside its only batch reopens after a crash (no producer snapshot):
/// the producer state is rebuilt from that batch, whole, so a retry of it is still a
/// duplicate (a debug build panicked here, "batches applied in offset order", found by the
/// fresh-user trial).
#[test]
fn a_log_started_inside_a_batch_reopens_with_its_producer_state() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open_unclean(dir.path(), small_config());
    let batch = idempotent_batch(7, 0, 0, 100);
    log.append_as_leader(batch.clone(), 1).unwrap();
    log.increment_log_start_offset(50).unwrap().1.delete_files();
    drop(log);
    let mut log = open_unclean(dir.path(), small_config());
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (50, 100));
    let again = log.append_as_leader(batch, 1).unwrap();
    assert!(again.duplicate, "{again:?}");
    assert_eq!((again.first_offset, again.last_offset), (0, 99));
}

/// A damaged log start checkpoint stops the log from opening, naming the file: ignoring it
/// would bring deleted records back.
#[test]
fn a_damaged_log_start_checkpoint_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open_unclean(dir.path(), small_config());
    log.append_as_leader(batch(3, 10, 0), 1).unwrap();
    log.increment_log_start_offset(2).unwrap().1.delete_files();
    drop(log);
    let path = dir.path().join("log-start-offset-checkpoint");
    assert_eq!(fs::read_to_string(&path).unwrap(), "0\n1\n2\n");
    fs::write(&path, "0\n1\nbanana\n").unwrap();
    let e = Log::open(
        dir.path(),
        small_config(),
        Arc::new(ManualClock::new(0)),
        LogOpenOptions::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("log-start-offset-checkpoint") && e.contains("banana"),
        "{e}"
    );
}

/// Checkpoint files, the clean-shutdown marker (skips the CRC scan), recovery after an
/// unclean stop, and index rebuild when index files are lost.
/// A deleted log's directory is renamed to `<topic>-<partition>.<id>-delete` at once (Kafka
/// `LogManager.asyncDelete`): the partition can be created again right away, a restart does
/// not load the old log but hands the directory out for deletion, and the deletion service
/// removes it with its files.
#[test]
fn manager_deletes_a_log_by_renaming_its_directory_first() {
    let data = tempfile::tempdir().unwrap();
    let clock: Arc<ManualClock> = Arc::new(ManualClock::new(0));
    let tp = TopicPartition::new("gone", 0);
    let mut mgr =
        LogManager::open(data.path(), small_config(), &BTreeMap::new(), clock.clone()).unwrap();
    let log = mgr.get_or_create_log(&tp, None).unwrap();
    for _ in 0..30 {
        log.append_as_leader(batch(2, 300, 0), 1).unwrap();
    }
    let doomed = mgr.delete_log(&tp).unwrap().expect("the log existed");
    assert!(mgr.delete_log(&tp).unwrap().is_none());
    let renamed = doomed.dirs().to_vec();
    assert_eq!(renamed.len(), 1);
    let name = renamed[0]
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        name.starts_with("gone-0.") && name.ends_with("-delete"),
        "{name}"
    );
    assert!(!data.path().join("gone-0").exists());
    assert!(renamed[0].join("00000000000000000000.log").exists());
    // Created again at once, in a fresh directory.
    mgr.get_or_create_log(&tp, None)
        .unwrap()
        .append_as_leader(batch(1, 10, 0), 1)
        .unwrap();
    drop(doomed); // a crash before the deletion: the next open finds the directory
    mgr.close().unwrap();
    let mut mgr =
        LogManager::open(data.path(), small_config(), &BTreeMap::new(), clock.clone()).unwrap();
    assert_eq!(
        mgr.partitions(),
        vec![tp.clone()],
        "the renamed log is not loaded"
    );
    assert_eq!(mgr.log(&tp).unwrap().log_end_offset(), 1);
    let pending = mgr.take_pending_deletions();
    assert_eq!(pending.dirs(), renamed.as_slice());
    assert!(mgr.take_pending_deletions().is_empty());
    // A broker shutting down stops before the next file; the next open finds the rest.
    assert!(pending.delete_files_while(|| false).is_empty());
    assert!(renamed[0].join("00000000000000000000.log").exists());
    mgr.close().unwrap();
    let mut mgr =
        LogManager::open(data.path(), small_config(), &BTreeMap::new(), clock.clone()).unwrap();
    let pending = mgr.take_pending_deletions();
    assert_eq!(pending.dirs(), renamed.as_slice());
    assert!(pending.delete_files().is_empty());
    assert!(!renamed[0].exists());
    mgr.close().unwrap();
    let mut mgr = LogManager::open(data.path(), small_config(), &BTreeMap::new(), clock).unwrap();
    assert!(mgr.take_pending_deletions().is_empty());
}

#[test]
fn manager_checkpoints_clean_marker_and_recovery() {
    let data = tempfile::tempdir().unwrap();
    let clock: Arc<ManualClock> = Arc::new(ManualClock::new(0));
    let tp = TopicPartition::new("orders", 3);
    let mut mgr =
        LogManager::open(data.path(), small_config(), &BTreeMap::new(), clock.clone()).unwrap();
    assert!(!mgr.had_clean_shutdown());
    let log = mgr.get_or_create_log(&tp, None).unwrap();
    for _ in 0..30 {
        log.append_as_leader(batch(2, 300, 0), 1).unwrap();
    }
    let leo = log.log_end_offset();
    let mut hws = BTreeMap::new();
    hws.insert(tp.clone(), leo - 2);
    mgr.write_high_watermarks(&hws).unwrap();
    mgr.close().unwrap();
    assert!(data.path().join(".kafka_cleanshutdown").exists());
    let text = fs::read_to_string(data.path().join("recovery-point-offset-checkpoint")).unwrap();
    assert_eq!(text, format!("0\n1\norders 3 {leo}\n"));

    // Damage a payload byte in the first batch of the active segment: the clean open only
    // checks the batches after the last index entry, so it does not notice; an unclean open
    // scans the segment holding the recovery point and cuts from that batch on.
    let dir = data.path().join("orders-3");
    let last_seg = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .max()
        .unwrap();
    let active_base: i64 = last_seg
        .file_stem()
        .unwrap()
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        active_base > 0 && active_base < leo - 2,
        "active segment holds several batches"
    );
    let mut bytes = fs::read(&last_seg).unwrap();
    bytes[100] ^= 0xff;
    fs::write(&last_seg, &bytes).unwrap();
    let mgr =
        LogManager::open(data.path(), small_config(), &BTreeMap::new(), clock.clone()).unwrap();
    assert!(mgr.had_clean_shutdown());
    assert!(
        !data.path().join(".kafka_cleanshutdown").exists(),
        "marker consumed on open"
    );
    assert_eq!(mgr.log(&tp).unwrap().log_end_offset(), leo);
    assert_eq!(mgr.read_high_watermarks().unwrap(), hws);
    drop(mgr); // crash: no marker, recovery point from the checkpoint (= leo) still scans
    // the segment containing it.
    for e in fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension()
            .is_some_and(|e| e == "index" || e == "timeindex")
        {
            fs::remove_file(p).unwrap();
        }
    }
    let mgr =
        LogManager::open(data.path(), small_config(), &BTreeMap::new(), clock.clone()).unwrap();
    assert!(!mgr.had_clean_shutdown());
    let log = mgr.log(&tp).unwrap();
    assert_eq!(log.log_end_offset(), active_base);
    check_whole_log(log);
    for off in log.log_start_offset()..log.log_end_offset() {
        let r = log.read(off, 1, log.log_end_offset()).unwrap();
        let b = BatchIter::new(r.records).next().unwrap().unwrap();
        assert!(b.base_offset() <= off && off <= b.last_offset());
    }
}

/// A follower that appends the leader's batches as fetched ends with identical segment
/// bytes and the same epoch cache; its offsets and epochs are the leader's.
#[test]
fn follower_append_replicates_leader_bytes_and_epochs() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    let mut leader = open_unclean(a.path(), small_config());
    let mut follower = open_unclean(b.path(), small_config());
    for (i, epoch) in [0, 0, 1, 1, 1, 4, 4, 7].into_iter().enumerate() {
        leader
            .append_as_leader(batch(1 + i % 3, 100 * i, i as i64), epoch)
            .unwrap();
        if i % 3 == 2 {
            // Fetch everything new, like a follower fetch with a max size.
            let r = leader
                .read(follower.log_end_offset(), 1 << 20, leader.log_end_offset())
                .unwrap();
            follower.append_as_follower(r.records).unwrap();
        }
    }
    // Bounded: each fetch moves the follower forward.
    while follower.log_end_offset() < leader.log_end_offset() {
        let r = leader
            .read(follower.log_end_offset(), 300, leader.log_end_offset())
            .unwrap();
        follower.append_as_follower(r.records).unwrap();
    }
    assert_eq!(log_bytes(a.path()), log_bytes(b.path()));
    assert_eq!(
        leader.epoch_cache().entries(),
        follower.epoch_cache().entries()
    );
    assert_eq!(
        follower.end_offset_for_epoch(4),
        leader.end_offset_for_epoch(4)
    );
}

/// `compression.type` and `message.timestamp.type` (Kafka `LogValidator`): the leader stores
/// a batch sent with another codec recompressed to the topic's (same records, offsets,
/// producer fields; a duplicate is still found), stamps LogAppendTime batches with its clock
/// and clears a LogAppendTime bit a producer set on a CreateTime topic; a recompressed batch
/// that outgrows `max.message.bytes` is MESSAGE_TOO_LARGE; followers keep the leader's bytes.
#[test]
fn leaders_store_batches_in_the_topics_codec_and_timestamp_type() {
    use keel_record::TIMESTAMP_TYPE_BIT;
    use keel_record::compression::CompressionType;
    let stored = |log: &Log, offset: i64| {
        let r = log.read(offset, 1 << 20, log.log_end_offset()).unwrap();
        BatchIter::new(r.records).next().unwrap().unwrap()
    };
    let idempotent = |codec: CompressionType, seq: i32| {
        let mut b = RecordBatchBuilder::new(0)
            .producer(42, 0, seq)
            .compression(codec);
        for i in 0..20 {
            b.append(5_000 + i, Some(b"key"), Some(&[b'v'; 300]), &[]);
        }
        b.build().into_bytes()
    };
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_700_000_000_000);
    let zstd = LogConfig {
        compression: Some(CompressionType::Zstd),
        ..small_config()
    };
    let mut log = open(dir.path(), zstd.clone(), &clock, LogOpenOptions::default());
    for (i, sent) in [
        CompressionType::None,
        CompressionType::Gzip,
        CompressionType::Zstd,
    ]
    .into_iter()
    .enumerate()
    {
        let input = idempotent(sent, 20 * i as i32);
        let info = log.append_as_leader(input.clone(), 3).unwrap();
        assert_eq!(info.log_append_time_ms, -1, "CreateTime");
        let b = stored(&log, info.first_offset);
        assert_eq!(
            b.compression().unwrap(),
            CompressionType::Zstd,
            "sent {sent:?}"
        );
        assert!(b.is_crc_valid());
        let h = b.header();
        assert_eq!(
            (h.producer_id, h.base_sequence, h.record_count),
            (42, 20 * i as i32, 20)
        );
        assert_eq!(h.max_timestamp, 5_019);
        let original = keel_record::RecordBatch::from_bytes(input.clone()).unwrap();
        let want: Vec<_> = original.records().map(|r| r.unwrap()).collect();
        let got: Vec<_> = b.records().map(|r| r.unwrap()).collect();
        assert_eq!(got, want, "the records survive recompression");
        // A retry of the batch as sent is still the same batch (the sequence range decides).
        assert!(log.append_as_leader(input, 3).unwrap().duplicate);
    }
    assert!(
        stored(&log, 0).size_bytes() < 2_000,
        "zstd shrank 6 KB of repeats"
    );

    // Recompressed to a codec that does not shrink it past the limit: MESSAGE_TOO_LARGE.
    let plain = LogConfig {
        compression: Some(CompressionType::None),
        max_message_bytes: 1_000,
        ..small_config()
    };
    let tight = tempfile::tempdir().unwrap();
    let mut log = open(tight.path(), plain, &clock, LogOpenOptions::default());
    let leo = log.log_end_offset();
    let err = log
        .append_as_leader(idempotent(CompressionType::Zstd, 0), 1)
        .unwrap_err();
    assert!(matches!(err, LogError::MessageTooLarge { .. }), "{err:?}");
    assert_eq!(log.log_end_offset(), leo, "nothing written");

    // LogAppendTime: the leader's clock is the max timestamp and the answer's append time.
    let stamped = LogConfig {
        log_append_time: true,
        ..small_config()
    };
    let a = tempfile::tempdir().unwrap();
    let mut leader = open(a.path(), stamped, &clock, LogOpenOptions::default());
    let info = leader.append_as_leader(batch(3, 10, 77), 1).unwrap();
    assert_eq!(info.log_append_time_ms, 1_700_000_000_000);
    let h = *stored(&leader, 0).header();
    assert_ne!(h.attributes & TIMESTAMP_TYPE_BIT, 0);
    assert_eq!(h.max_timestamp, 1_700_000_000_000);
    assert_eq!(
        leader
            .offset_for_timestamp(1_700_000_000_000)
            .unwrap()
            .map(|(o, _)| o),
        Some(0),
        "timestamp lookups use the append time"
    );
    let b = tempfile::tempdir().unwrap();
    let mut follower = open_unclean(b.path(), small_config());
    let r = leader.read(0, 1 << 20, leader.log_end_offset()).unwrap();
    follower.append_as_follower(r.records).unwrap();
    assert_eq!(log_bytes(a.path()), log_bytes(b.path()));

    // CreateTime: a LogAppendTime bit set by the producer is cleared, the records' time kept.
    let c = tempfile::tempdir().unwrap();
    let mut log = open(c.path(), small_config(), &clock, LogOpenOptions::default());
    let sent = keel_record::RecordBatch::from_bytes(batch(2, 10, 500))
        .unwrap()
        .with_timestamp_type(true, 9_999);
    let info = log.append_as_leader(sent.into_bytes(), 1).unwrap();
    assert_eq!(info.log_append_time_ms, -1);
    let h = *stored(&log, 0).header();
    assert_eq!(
        (h.attributes & TIMESTAMP_TYPE_BIT, h.max_timestamp),
        (0, 501)
    );
}

/// A garbage or stale index file is detected on a clean open and rebuilt from the segment.
#[test]
fn corrupt_index_is_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open_unclean(dir.path(), small_config());
    for i in 0..40 {
        log.append_as_leader(batch(2, 150, i), 0).unwrap();
    }
    let leo = log.log_end_offset();
    let bases = log.segment_base_offsets();
    log.close().unwrap();
    let clean = LogOpenOptions {
        recovery_point: leo,
        clean_shutdown: true,
    };
    // Garbage in one index, a pointer into the middle of a batch in another.
    fs::write(
        dir.path().join(format!("{:020}.index", bases[0])),
        [9u8; 13],
    )
    .unwrap();
    let mut entry = Vec::new();
    entry.extend_from_slice(&1u32.to_be_bytes());
    entry.extend_from_slice(&7u32.to_be_bytes());
    fs::write(dir.path().join(format!("{:020}.index", bases[1])), entry).unwrap();
    let log = open(dir.path(), small_config(), &ManualClock::new(0), clean);
    assert_eq!(log.log_end_offset(), leo);
    for off in 0..leo {
        let r = log.read(off, 1, leo).unwrap();
        let b = BatchIter::new(r.records).next().unwrap().unwrap();
        assert!(b.base_offset() <= off && off <= b.last_offset());
    }
}

/// Producer-state snapshots are taken on roll and periodically, dropped above a truncation
/// point and below the log start; state survives an unclean reopen from a snapshot.
#[test]
fn producer_snapshots_follow_rolls_truncation_and_retention() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        producer_snapshot_interval_bytes: 2048,
        retention_bytes: Some(1024),
        ..small_config()
    };
    let snapshots = |dir: &Path| -> Vec<i64> {
        let mut v: Vec<i64> = fs::read_dir(dir)
            .unwrap()
            .filter_map(|e| {
                let name = e.unwrap().file_name().into_string().unwrap();
                name.strip_suffix(".snapshot").map(|s| s.parse().unwrap())
            })
            .collect();
        v.sort();
        v
    };
    let mut log = open_unclean(dir.path(), config.clone());
    let mut seq = 0;
    for _ in 0..200 {
        log.append_as_leader(idempotent_batch(5, 0, seq, 4), 0)
            .unwrap();
        seq += 4;
    }
    let snaps = snapshots(dir.path());
    assert!(
        snaps.len() > log.segment_count(),
        "periodic snapshots besides rolls: {snaps:?}"
    );
    assert!(snaps.iter().all(|s| *s <= log.log_end_offset()));
    let cut = snaps[snaps.len() - 2];
    log.truncate_to(cut).unwrap();
    assert!(snapshots(dir.path()).iter().all(|s| *s <= cut));
    assert_eq!(
        log.producer_entry(5).unwrap().last_sequence(),
        cut as i32 - 1
    );
    let deleted = log.delete_old_segments(log.log_end_offset()).unwrap();
    assert!(deleted.segment_count() > 0);
    assert!(deleted.delete_files().is_empty());
    let start = log.log_start_offset();
    assert!(snapshots(dir.path()).iter().all(|s| *s >= start));
    let leo = log.log_end_offset();
    drop(log);
    let mut log = open_unclean(dir.path(), config);
    assert_eq!(
        log.producer_entry(5).unwrap().last_sequence(),
        leo as i32 - 1
    );
    let dup = log
        .append_as_leader(idempotent_batch(5, 0, leo as i32 - 4, 4), 0)
        .unwrap();
    assert!(dup.duplicate);
    let err = log
        .append_as_leader(idempotent_batch(5, 0, leo as i32 + 1, 1), 0)
        .unwrap_err();
    assert_eq!(err.kafka_name(), "OUT_OF_ORDER_SEQUENCE_NUMBER");
}

#[derive(Debug, Clone)]
enum LogOp {
    /// Append a batch of n records with the epoch bumped by `bump` (0 = same leader).
    Append(usize, i32),
    /// Truncate to a fraction (per mille) of the LEO.
    Truncate(u16),
    /// Retention with a byte limit and the HW at the LEO.
    Retain(u64),
    /// Unclean reopen.
    Reopen,
}

fn log_op() -> impl Strategy<Value = LogOp> {
    prop_oneof![
        8 => (1usize..5, prop_oneof![3 => Just(0), 1 => 1i32..3]).prop_map(|(n, b)| LogOp::Append(n, b)),
        1 => (0u16..1000).prop_map(LogOp::Truncate),
        1 => (500u64..6000).prop_map(LogOp::Retain),
        1 => Just(LogOp::Reopen),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// Through the log, the epoch cache always equals the one derived from the batches that
    /// remain: an entry (epoch, base offset) wherever a batch carries a higher epoch than all
    /// before it, the first one starting at the log start offset. Histories mix appends with
    /// epoch bumps, truncation from the end, retention from the start and crashes.
    #[test]
    fn log_epoch_cache_matches_batches(ops in proptest::collection::vec(log_op(), 1..60)) {
        let dir = tempfile::tempdir().unwrap();
        let config = LogConfig { segment_bytes: 1024, ..small_config() };
        let mut log = open_unclean(dir.path(), config.clone());
        let mut epoch = 0;
        for op in &ops {
            match *op {
                LogOp::Append(n, bump) => {
                    epoch += bump;
                    log.append_as_leader(batch(n, 100, 0), epoch).unwrap();
                }
                LogOp::Truncate(permille) => {
                    let target = log.log_end_offset() * permille as i64 / 1000;
                    log.truncate_to(target.max(log.log_start_offset())).unwrap();
                }
                LogOp::Retain(bytes) => {
                    let c = LogConfig { retention_bytes: Some(bytes), ..config.clone() };
                    log.set_config(c).unwrap();
                    let deleted = log.delete_old_segments(log.log_end_offset()).unwrap();
                    assert!(deleted.delete_files().is_empty());
                    log.set_config(config.clone()).unwrap();
                }
                LogOp::Reopen => {
                    drop(log);
                    log = open_unclean(dir.path(), config.clone());
                }
            }
            // Derive the expected cache from the batches in the log.
            let mut expected: Vec<(i32, i64)> = Vec::new();
            let mut next = log.log_start_offset();
            while next < log.log_end_offset() {
                let r = log.read(next, 1 << 20, log.log_end_offset()).unwrap();
                for b in BatchIter::new(r.records) {
                    let b = b.unwrap();
                    let e = b.header().partition_leader_epoch;
                    if expected.last().is_none_or(|l| l.0 < e) {
                        expected.push((e, b.base_offset()));
                    }
                    next = b.last_offset() + 1;
                }
            }
            let got: Vec<(i32, i64)> =
                log.epoch_cache().entries().iter().map(|e| (e.epoch, e.start_offset)).collect();
            prop_assert_eq!(&got, &expected, "after {:?}", op);
            if let Some(&(latest, _)) = expected.last() {
                prop_assert_eq!(log.end_offset_for_epoch(latest), (latest, log.log_end_offset()));
            }
            // Appends after truncation continue from the latest remaining epoch.
            epoch = epoch.max(log.latest_epoch().unwrap_or(0));
        }
    }
}

/// `num.recovery.threads.per.data.dir`: several threads open the same logs as one does, and
/// a log that cannot be opened fails the whole open.
#[test]
fn manager_opens_partitions_in_parallel_and_fails_on_a_bad_one() {
    let data = tempfile::tempdir().unwrap();
    let clock: Arc<ManualClock> = Arc::new(ManualClock::new(0));
    let mut mgr =
        LogManager::open(data.path(), small_config(), &BTreeMap::new(), clock.clone()).unwrap();
    let mut ends = BTreeMap::new();
    for p in 0..40 {
        let tp = TopicPartition::new("many", p);
        let log = mgr.get_or_create_log(&tp, None).unwrap();
        for _ in 0..(p % 5) {
            log.append_as_leader(batch(2, 300, 0), 1).unwrap();
        }
        ends.insert(tp, log.log_end_offset());
    }
    mgr.close().unwrap();
    for threads in [1, 3, 64] {
        let mgr = LogManager::open_parallel(
            data.path(),
            small_config(),
            &BTreeMap::new(),
            clock.clone(),
            threads,
        )
        .unwrap();
        assert_eq!(mgr.len(), 40, "{threads} threads");
        for (tp, end) in &ends {
            assert_eq!(mgr.log(tp).unwrap().log_end_offset(), *end, "{tp:?}");
        }
        drop(mgr);
    }
    // A segment file replaced by a directory cannot be opened: the open fails.
    let bad = data.path().join("many-7").join(format!("{:020}.log", 0));
    fs::remove_file(&bad).unwrap();
    fs::create_dir(&bad).unwrap();
    assert!(
        LogManager::open_parallel(data.path(), small_config(), &BTreeMap::new(), clock, 3).is_err()
    );
}
