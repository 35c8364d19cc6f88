//! Short proptest versions of the broker's fuzz targets (`fuzz/fuzz_targets/record_batch.rs`,
//! `partition_segment.rs`; entry points in `keel_broker::log::fuzz`), run in the normal test
//! suite: every committed seed of `fuzz/corpus/<target>/`, then random bytes and random
//! mutations (byte changes, cuts, splices) of valid batches.

use std::path::PathBuf;

use keel_broker::log::batch::RecordBatchBuilder;
use keel_broker::log::fuzz;
use proptest::prelude::*;

/// The committed seed corpus of `target`.
fn seeds(target: &str) -> Vec<Vec<u8>> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target);
    let mut out: Vec<Vec<u8>> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| std::fs::read(e.unwrap().path()).unwrap())
        .collect();
    out.sort();
    out
}

/// Valid concatenated batches: `shape` gives, per batch, its record count and value size.
fn valid_batches(shape: &[(u8, u8)]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut base = 0i64;
    for &(records, value) in shape {
        let mut b = RecordBatchBuilder::new(base).producer(9, 1, base as i32);
        let v = vec![b'v'; value as usize];
        for i in 0..records.max(1) {
            b.append(
                1_000 + i64::from(i),
                Some(b"key"),
                Some(&v),
                &[(b"h", Some(b"x"))],
            );
        }
        base += i64::from(records.max(1));
        out.extend_from_slice(b.build().as_bytes());
    }
    out
}

/// `data` with the mutations applied: (position, new byte) pairs, then a cut at `cut`.
fn mutate(mut data: Vec<u8>, changes: &[(usize, u8)], cut: Option<usize>) -> Vec<u8> {
    if !data.is_empty() {
        for &(at, byte) in changes {
            let at = at % data.len();
            data[at] = byte;
        }
    }
    if let Some(cut) = cut {
        data.truncate(cut % (data.len() + 1));
    }
    data
}

#[test]
fn committed_seeds_pass() {
    for seed in seeds("record_batch") {
        fuzz::record_batches(&seed);
    }
    for seed in seeds("partition_segment") {
        let dir = tempfile::tempdir().unwrap();
        fuzz::partition_segment(dir.path(), &seed);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn record_batch_parser_survives_any_bytes(data in proptest::collection::vec(any::<u8>(), 0..512)) {
        fuzz::record_batches(&data);
    }

    #[test]
    fn record_batch_parser_survives_damaged_batches(
        shape in proptest::collection::vec((0u8..6, 0u8..40), 1..4),
        changes in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..4),
        cut in proptest::option::of(any::<usize>()),
    ) {
        fuzz::record_batches(&mutate(valid_batches(&shape), &changes, cut));
    }

    #[test]
    fn segment_recovery_survives_damaged_segments(
        shape in proptest::collection::vec((0u8..6, 0u8..40), 1..4),
        changes in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..3),
        cut in proptest::option::of(any::<usize>()),
    ) {
        let dir = tempfile::tempdir().unwrap();
        fuzz::partition_segment(dir.path(), &mutate(valid_batches(&shape), &changes, cut));
    }
}
