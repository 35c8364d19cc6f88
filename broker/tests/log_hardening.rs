//! Regression tests for the storage-engine review findings: hostile file names in a partition
//! directory, out-of-range config values, untrusted batch timestamps, attributes and offsets,
//! negative truncation, lower follower epochs, a non-UTF-8 epoch checkpoint and a corrupt
//! batch length in a recovered segment. Each test names the finding it covers.

use std::fs;
use std::path::Path;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use keel_broker::log::{LeaderEpochCache, Log, LogConfig, LogError, LogOpenOptions, ManualClock};
use keel_record::{BatchIter, RecordBatch, RecordBatchBuilder};

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 4096,
        index_interval_bytes: 256,
        retention_ms: None,
        ..LogConfig::default()
    }
}

fn open_with(dir: &Path, config: LogConfig, opts: LogOpenOptions) -> Log {
    Log::open(dir, config, Arc::new(ManualClock::new(1_000_000)), opts).unwrap()
}

fn open(dir: &Path) -> Log {
    open_with(dir, config(), LogOpenOptions::default())
}

/// A batch of `n` records with 50-byte values and timestamps `ts, ts + 1, ...`.
fn batch(n: usize, ts: i64) -> Bytes {
    let mut b = RecordBatchBuilder::new(0);
    for i in 0..n {
        b.append(ts + i as i64, None, Some(&[i as u8; 50]), &[]);
    }
    b.build().into_bytes()
}

/// `bytes` with `edit` applied and the CRC recomputed, so only the semantic checks can catch it.
fn edited(bytes: &Bytes, edit: impl FnOnce(&mut [u8])) -> Bytes {
    let mut v = bytes.to_vec();
    edit(&mut v);
    let crc = crc32c::crc32c(&v[21..]);
    v[17..21].copy_from_slice(&crc.to_be_bytes());
    Bytes::from(v)
}

fn set_max_timestamp(ts: i64) -> impl FnOnce(&mut [u8]) {
    move |v| v[35..43].copy_from_slice(&ts.to_be_bytes())
}

fn set_first_timestamp(ts: i64) -> impl FnOnce(&mut [u8]) {
    move |v| v[27..35].copy_from_slice(&ts.to_be_bytes())
}

/// Every file of the directory with its bytes, sorted by name.
fn dir_files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().into_string().unwrap(),
                fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

/// Records the WARN events emitted on this thread while `f` runs (a minimal subscriber, so
/// the tests need no extra dependency).
fn warnings<R>(f: impl FnOnce() -> R) -> (R, Vec<String>) {
    let sub = Capture::default();
    let out = sub.0.clone();
    let r = tracing::subscriber::with_default(sub, f);
    let w = out.lock().unwrap().clone();
    (r, w)
}

#[derive(Default)]
struct Capture(Arc<Mutex<Vec<String>>>);

impl tracing::Subscriber for Capture {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        if *event.metadata().level() == tracing::Level::WARN {
            let mut s = String::new();
            event.record(&mut Fields(&mut s));
            self.0.lock().unwrap().push(s);
        }
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

struct Fields<'a>(&'a mut String);

impl tracing::field::Visit for Fields<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        use std::fmt::Write;
        let _ = write!(self.0, "{}={:?} ", field.name(), value);
    }
}

/// Finding 1: only `{:020}` names are segments, indexes and snapshots. Stray names that
/// parse as the same (or a negative) offset are ignored with a warning and never deleted;
/// the real segment keeps its data.
#[test]
fn stray_segment_index_and_snapshot_names_are_ignored_not_deleted() {
    let strays = [
        "0.log",
        "+0000000000000000000.log",
        "-0000000000000000001.log",
        "000000000000000000000.log",
        "0000000000000000000a.log",
        "99999999999999999999.log",
        "0.index",
        "+0000000000000000000.timeindex",
        "-0000000000000000001.snapshot",
        "5.snapshot",
    ];
    for clean in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let mut log = open(dir.path());
        for i in 0..30 {
            log.append_as_leader(batch(3, i), 1).unwrap();
        }
        let (lso, leo, bases) = (
            log.log_start_offset(),
            log.log_end_offset(),
            log.segment_base_offsets(),
        );
        assert!(bases.len() > 1);
        log.close().unwrap();
        for name in strays {
            fs::write(dir.path().join(name), b"stray bytes").unwrap();
        }
        let opts = LogOpenOptions {
            recovery_point: 0,
            clean_shutdown: clean,
        };
        let (log, warned) = warnings(|| open_with(dir.path(), config(), opts));
        assert_eq!(
            (log.log_start_offset(), log.log_end_offset()),
            (lso, leo),
            "clean={clean}"
        );
        assert_eq!(log.segment_base_offsets(), bases);
        for name in strays {
            assert!(dir.path().join(name).exists(), "{name} was deleted");
            assert!(
                warned.iter().any(|w| w.contains(name)),
                "no warning names {name}: {warned:?}"
            );
        }
        for suffix in ["log", "index", "timeindex"] {
            assert!(dir.path().join(format!("{:020}.{suffix}", 0)).exists());
        }
        let r = log.read(0, 1 << 20, leo).unwrap();
        assert!(!r.records.is_empty());
        // Producer-state maintenance does not trip over (or delete) stray snapshots either.
        let mut log = log;
        log.truncate_to(leo - 3).unwrap();
        assert!(dir.path().join("5.snapshot").exists());
        assert!(dir.path().join("-0000000000000000001.snapshot").exists());
    }
    // A lone negative-looking segment does not become the log: the log starts empty at 0.
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("-0000000000000000001.log"), b"").unwrap();
    let log = open(dir.path());
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (0, 0));
    assert!(dir.path().join("-0000000000000000001.log").exists());
}

/// Finding 2: `retention.bytes` above i64::MAX is rejected by name (it used to wrap to -1
/// and delete every non-active segment); i64::MAX itself means "effectively unbounded".
#[test]
fn retention_bytes_above_i64_max_is_rejected_not_wrapped() {
    for bad in [u64::MAX, i64::MAX as u64 + 1] {
        let c = LogConfig {
            retention_bytes: Some(bad),
            ..config()
        };
        let err = c.validate().unwrap_err();
        assert!(
            matches!(
                err,
                LogError::InvalidConfig {
                    key: "retention.bytes",
                    ..
                }
            ),
            "{err}"
        );
        let dir = tempfile::tempdir().unwrap();
        let e = Log::open(
            dir.path(),
            c.clone(),
            Arc::new(ManualClock::new(0)),
            LogOpenOptions::default(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("retention.bytes"), "{e}");
        let mut log = open(dir.path());
        assert!(log.set_config(c).is_err());
        assert_eq!(log.config().retention_bytes, None);
    }
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path());
    for i in 0..40 {
        log.append_as_leader(batch(3, i), 0).unwrap();
    }
    let segments = log.segment_count();
    assert!(segments > 2);
    log.set_config(LogConfig {
        retention_bytes: Some(i64::MAX as u64),
        ..config()
    })
    .unwrap();
    assert!(
        log.delete_old_segments(log.log_end_offset())
            .unwrap()
            .is_empty()
    );
    assert_eq!(log.segment_count(), segments);
}

/// Finding 3: the leader recomputes the max timestamp from the records and stores that in
/// place of a header that disagrees (as Kafka's `LogValidator` does: #21), and refuses
/// negative timestamps other than -1 (INVALID_TIMESTAMP), leaving the files unchanged; a
/// follower batch with an absurd max timestamp cannot panic rolling, retention or timestamp
/// lookups.
#[test]
fn leader_append_checks_timestamps_and_time_math_never_panics() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path());
    log.append_as_leader(batch(2, 5_000), 0).unwrap();
    let mut leo = log.log_end_offset();
    let good = batch(3, 6_000);
    let true_max = RecordBatch::from_bytes(good.clone())
        .unwrap()
        .header()
        .max_timestamp;
    for lie in [i64::MIN, i64::MAX / 2, 6_001, -1, 7_000] {
        let info = log
            .append_as_leader(edited(&good, set_max_timestamp(lie)), 0)
            .unwrap();
        assert_eq!(info.first_offset, leo, "max ts {lie}");
        // Stored with the records' max timestamp and a CRC that matches it.
        let stored = log.read(leo, 1 << 20, i64::MAX).unwrap();
        let b = BatchIter::new(stored.records).next().unwrap().unwrap();
        assert_eq!(b.header().max_timestamp, true_max, "max ts {lie}");
        b.validate().unwrap();
        leo = log.log_end_offset();
    }
    let files = dir_files(dir.path());
    // Negative record timestamps other than NO_TIMESTAMP.
    for first in [-2, -1_000, i64::MIN] {
        let mut b = RecordBatchBuilder::new(0);
        b.append(first, None, Some(b"x"), &[]);
        let bytes = edited(&b.build().into_bytes(), set_max_timestamp(first));
        let err = log.append_as_leader(bytes, 0).unwrap_err();
        assert_eq!(err.kafka_name(), "INVALID_TIMESTAMP", "{first}: {err}");
        assert!(err.to_string().contains(&first.to_string()), "{err}");
        assert_eq!(dir_files(dir.path()), files);
    }
    // A first timestamp whose deltas overflow i64.
    let mut b = RecordBatchBuilder::new(0);
    b.append(0, None, Some(b"x"), &[]);
    b.append(i64::MAX, None, Some(b"y"), &[]);
    let bytes = edited(&b.build().into_bytes(), set_first_timestamp(10));
    let err = log.append_as_leader(bytes, 0).unwrap_err();
    assert_eq!(err.kafka_name(), "INVALID_TIMESTAMP", "{err}");
    assert_eq!(dir_files(dir.path()), files);
    // NO_TIMESTAMP (-1) everywhere is fine, and so is an honest header.
    let mut b = RecordBatchBuilder::new(0);
    b.append(-1, None, Some(b"x"), &[]);
    log.append_as_leader(b.build().into_bytes(), 0).unwrap();
    log.append_as_leader(good.clone(), 0).unwrap();

    // Follower: the leader's bytes are kept as they are, but no time arithmetic may panic.
    let f = tempfile::tempdir().unwrap();
    let mut follower = open(f.path());
    let mut first = RecordBatchBuilder::new(0);
    first.append(5_000, None, Some(b"x"), &[]);
    follower
        .append_as_follower(first.build().into_bytes())
        .unwrap();
    for (i, lie) in [i64::MIN, i64::MAX, i64::MAX / 2].into_iter().enumerate() {
        let mut b = RecordBatchBuilder::new(1 + i as i64);
        b.append(6_000, None, Some(b"y"), &[]);
        let bytes = edited(&b.build().into_bytes(), set_max_timestamp(lie));
        follower.append_as_follower(bytes).unwrap();
    }
    let deleted = follower
        .delete_old_segments(follower.log_end_offset())
        .unwrap();
    assert!(deleted.delete_files().is_empty());
    follower.offset_for_timestamp(0).unwrap();
    follower.offset_for_timestamp(i64::MAX).unwrap();
    follower.flush_if_due().unwrap();
}

/// Finding 4: negative truncation offsets are rejected naming the offset and change
/// nothing; truncating below the log start empties the log without moving its start back.
#[test]
fn truncate_to_negative_is_rejected_and_log_start_never_moves_back() {
    let dir = tempfile::tempdir().unwrap();
    let c = LogConfig {
        retention_bytes: Some(1500),
        ..config()
    };
    let mut log = open_with(dir.path(), c.clone(), LogOpenOptions::default());
    for i in 0..40 {
        log.append_as_leader(batch(3, i), 2).unwrap();
    }
    let deleted = log.delete_old_segments(log.log_end_offset()).unwrap();
    assert!(deleted.segment_count() > 0);
    assert!(deleted.delete_files().is_empty());
    let (lso, leo) = (log.log_start_offset(), log.log_end_offset());
    assert!(lso > 0);
    let files = dir_files(dir.path());
    for bad in [-1, -7, i64::MIN] {
        let err = log.truncate_to(bad).unwrap_err();
        assert!(err.to_string().contains(&bad.to_string()), "{err}");
        assert_eq!((log.log_start_offset(), log.log_end_offset()), (lso, leo));
        assert_eq!(dir_files(dir.path()), files);
    }
    // Below the log start: everything goes, the start stays.
    assert!(log.truncate_to(lso - 1).unwrap());
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (lso, lso));
    assert!(log.truncate_to(0).is_ok());
    assert_eq!(log.log_start_offset(), lso);
    let info = log.append_as_leader(batch(1, 0), 3).unwrap();
    assert_eq!(info.first_offset, lso);
    drop(log);
    let log = open_with(dir.path(), c, LogOpenOptions::default());
    assert_eq!(
        (log.log_start_offset(), log.log_end_offset()),
        (lso, lso + 1)
    );
}

/// The largest log end offset.
const OFFSET_LIMIT: i64 = keel_record::MAX_LOG_END_OFFSET;

/// Finding 5: offsets near i64::MAX are bounded before anything is written: a start offset
/// or an append whose end would pass the limit is an error naming the offset, and the files
/// (segments, indexes, epoch checkpoint) are unchanged.
#[test]
fn offsets_near_i64_max_are_rejected_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path());
    log.append_as_leader(batch(2, 0), 1).unwrap();
    let files = dir_files(dir.path());
    for bad in [i64::MAX, i64::MAX - 1, i64::MAX - 10, OFFSET_LIMIT + 1] {
        let err = log.truncate_fully_and_start_at(bad).unwrap_err();
        assert!(err.to_string().contains(&bad.to_string()), "{err}");
        assert_eq!((log.log_start_offset(), log.log_end_offset()), (0, 2));
        assert_eq!(dir_files(dir.path()), files);
    }
    // Up to the limit exactly, then nothing more fits.
    log.truncate_fully_and_start_at(OFFSET_LIMIT - 3).unwrap();
    log.append_as_leader(batch(3, 0), 1).unwrap();
    assert_eq!(log.log_end_offset(), OFFSET_LIMIT);
    log.close().unwrap();
    let mut log = open(dir.path());
    assert_eq!(log.log_end_offset(), OFFSET_LIMIT);
    let files = dir_files(dir.path());
    for n in [1, 2] {
        let err = log.append_as_leader(batch(n, 0), 2).unwrap_err();
        assert!(err.to_string().contains("offset"), "{err}");
        assert_eq!(log.log_end_offset(), OFFSET_LIMIT);
        assert_eq!(dir_files(dir.path()), files, "append of {n} changed files");
    }
    let mut b = RecordBatchBuilder::new(OFFSET_LIMIT).partition_leader_epoch(3);
    b.append(0, None, Some(b"x"), &[]);
    assert!(log.append_as_follower(b.build().into_bytes()).is_err());
    assert_eq!(dir_files(dir.path()), files);
    // A follower batch claiming the very last offsets is rejected too.
    let f = tempfile::tempdir().unwrap();
    let mut follower = open(f.path());
    follower
        .truncate_fully_and_start_at(OFFSET_LIMIT - 1)
        .unwrap();
    let mut b = RecordBatchBuilder::new(OFFSET_LIMIT - 1);
    b.append(0, None, Some(b"x"), &[]);
    b.append(0, None, Some(b"y"), &[]);
    let files = dir_files(f.path());
    assert!(follower.append_as_follower(b.build().into_bytes()).is_err());
    assert_eq!(dir_files(f.path()), files);
}

/// Finding 6: producers cannot write transactional or control batches (INVALID_RECORD);
/// followers keep the leader's attribute bits.
#[test]
fn leader_append_rejects_transactional_and_control_batches() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path());
    log.append_as_leader(batch(1, 0), 0).unwrap();
    let files = dir_files(dir.path());
    for bits in [0x10i16, 0x20, 0x30] {
        let bytes = edited(&batch(2, 0), |v| {
            v[21..23].copy_from_slice(&bits.to_be_bytes());
        });
        let err = log.append_as_leader(bytes, 0).unwrap_err();
        assert_eq!(err.kafka_name(), "INVALID_RECORD", "{bits:#x}: {err}");
        assert_eq!(dir_files(dir.path()), files);
    }
    let mut b = RecordBatchBuilder::new(1).partition_leader_epoch(0);
    b.append(0, None, Some(b"x"), &[]);
    let txn = edited(&b.build().into_bytes(), |v| {
        v[21..23].copy_from_slice(&0x10i16.to_be_bytes());
    });
    assert_eq!(
        log.append_as_follower(txn).unwrap().unwrap().first_offset,
        1
    );
}

/// Finding 7a: a follower batch with a lower partition leader epoch than the cache's latest
/// is appended, the cache is left as it is (Kafka ignores lower epochs in `assign`), and a
/// warning says so.
#[test]
fn follower_batch_with_lower_epoch_is_appended_and_warned() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path());
    let epoch_of = |base: i64, epoch: i32| {
        let mut b = RecordBatchBuilder::new(base).partition_leader_epoch(epoch);
        b.append(0, None, Some(b"x"), &[]);
        b.build().into_bytes()
    };
    log.append_as_follower(epoch_of(0, 5)).unwrap();
    let entries = log.epoch_cache().entries().to_vec();
    let (r, warned) = warnings(|| log.append_as_follower(epoch_of(1, 3)));
    assert_eq!(r.unwrap().unwrap().first_offset, 1);
    assert_eq!(log.log_end_offset(), 2);
    assert_eq!(log.epoch_cache().entries(), &entries[..]);
    assert!(
        warned.iter().any(|w| w.contains("epoch")),
        "no warning: {warned:?}"
    );
    // Same epoch again: no warning.
    let (_, warned) = warnings(|| log.append_as_follower(epoch_of(2, 5)).unwrap());
    assert!(warned.is_empty(), "{warned:?}");
}

/// Finding 7b: a non-UTF-8 `leader-epoch-checkpoint` is a malformed file naming the file and
/// the line, not an I/O error; the log does not fail on it but rebuilds the cache from its
/// batches (the file only caches their partition leader epochs) and writes it back.
#[test]
fn non_utf8_epoch_checkpoint_is_a_malformed_file_naming_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path());
    log.append_as_leader(batch(2, 0), 3).unwrap();
    log.append_as_leader(batch(2, 1), 5).unwrap();
    drop(log);
    let checkpoint = dir.path().join("leader-epoch-checkpoint");
    fs::write(&checkpoint, b"0\n2\n1 0\n\xff\xfe 5\n").unwrap();
    let err = LeaderEpochCache::open(dir.path()).unwrap_err();
    assert!(
        matches!(&err, LogError::MalformedFile { path, .. } if path.ends_with("leader-epoch-checkpoint")),
        "{err:?}"
    );
    assert!(err.to_string().contains("line 4"), "{err}");
    assert_eq!(err.kafka_name(), "KAFKA_STORAGE_ERROR");

    let log = open(dir.path());
    let epochs: Vec<_> = log
        .epoch_cache()
        .entries()
        .iter()
        .map(|e| (e.epoch, e.start_offset))
        .collect();
    assert_eq!(epochs, [(3, 0), (5, 2)]);
    drop(log);
    assert_eq!(
        LeaderEpochCache::open(dir.path()).unwrap().entries().len(),
        2,
        "the rebuilt cache is written back"
    );
}

/// Finding 7c: a length field beyond the largest batch the log accepts is corruption in the
/// recovery scan (the scan does not read that far), and the tail is cut there.
#[test]
fn recovery_scan_treats_a_huge_length_as_corruption() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path());
    for i in 0..3 {
        log.append_as_leader(batch(2, i), 0).unwrap();
    }
    let leo = log.log_end_offset();
    drop(log);
    let seg = dir.path().join(format!("{:020}.log", 0));
    let valid = fs::metadata(&seg).unwrap().len();
    // A header claiming 64 MiB, and a (sparse) file long enough to hold it.
    let mut fake = batch(1, 0).to_vec();
    fake[0..8].copy_from_slice(&leo.to_be_bytes());
    fake[8..12].copy_from_slice(&(64i32 << 20).to_be_bytes());
    let mut data = fs::read(&seg).unwrap();
    data.extend_from_slice(&fake);
    fs::write(&seg, &data).unwrap();
    let f = fs::OpenOptions::new().write(true).open(&seg).unwrap();
    f.set_len(valid + (64 << 20) + 12).unwrap();
    drop(f);
    let (log, warned) = warnings(|| open(dir.path()));
    assert_eq!(log.log_end_offset(), leo);
    assert_eq!(fs::metadata(&seg).unwrap().len(), valid);
    assert!(
        warned
            .iter()
            .any(|w| w.contains("exceeds") && w.contains("max.message.bytes")),
        "{warned:?}"
    );
}
