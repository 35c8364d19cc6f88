//! Short proptest versions of the broker's fuzz target `fuzz/fuzz_targets/partition_segment.rs`
//! (entry point in `keel_broker::log::fuzz`), run in the normal test suite: every committed
//! seed of `fuzz/corpus/partition_segment/`, then random mutations (byte changes and cuts)
//! of valid batches. The record-batch parser's versions are in `record/tests/fuzz_props.rs`.

use keel_broker::log::fuzz;
use keel_record::fuzz::{corpus_seeds, mutate, valid_batches};
use proptest::prelude::*;

#[test]
fn committed_seeds_pass() {
    for seed in corpus_seeds("partition_segment") {
        let dir = tempfile::tempdir().unwrap();
        fuzz::partition_segment(dir.path(), &seed);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

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
