//! Short proptest versions of the broker's fuzz targets (`fuzz/fuzz_targets/record_batch.rs`,
//! `partition_segment.rs`; entry points in `keel_broker::log::fuzz`), run in the normal test
//! suite: every committed seed of `fuzz/corpus/<target>/`, then random bytes and random
//! mutations (byte changes and cuts) of valid batches.

use keel_broker::log::batch::RecordBatchBuilder;
use keel_broker::log::fuzz;
use keel_metadata_log::fuzz::{corpus_seeds, mutate};
use proptest::prelude::*;

/// Valid concatenated batches: `shape` gives, per batch, its record count and value size.
/// The first byte is the targets' mode byte: odd = fix the CRCs up after mutating.
fn valid_batches(shape: &[(u8, u8)]) -> Vec<u8> {
    let mut out = vec![shape.len() as u8];
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

#[test]
fn committed_seeds_pass() {
    for seed in corpus_seeds("record_batch") {
        fuzz::record_batches(&seed);
    }
    for seed in corpus_seeds("partition_segment") {
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
