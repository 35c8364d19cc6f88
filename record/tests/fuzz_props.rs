//! Short proptest versions of the record-batch fuzz target (`fuzz/fuzz_targets/record_batch.rs`,
//! entry point [`keel_record::fuzz::record_batches`]), run in the normal test suite: every
//! committed seed of `fuzz/corpus/record_batch/`, then random bytes and random mutations
//! (byte changes and cuts) of valid batches.

use keel_record::fuzz::{corpus_seeds, mutate, record_batches, valid_batches};
use proptest::prelude::*;

#[test]
fn committed_seeds_pass() {
    let seeds = corpus_seeds("record_batch");
    assert!(!seeds.is_empty(), "no committed seeds");
    for seed in seeds {
        record_batches(&seed);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn record_batch_parser_survives_any_bytes(data in proptest::collection::vec(any::<u8>(), 0..512)) {
        record_batches(&data);
    }

    #[test]
    fn record_batch_parser_survives_damaged_batches(
        shape in proptest::collection::vec((0u8..6, 0u8..40), 1..4),
        changes in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..4),
        cut in proptest::option::of(any::<usize>()),
    ) {
        record_batches(&mutate(valid_batches(&shape), &changes, cut));
    }
}
