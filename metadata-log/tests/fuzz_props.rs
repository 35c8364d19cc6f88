//! Short proptest versions of the metadata log's fuzz targets
//! (`fuzz/fuzz_targets/snapshot_reader.rs`, `raft_segment.rs`; entry points in
//! `keel_metadata_log::fuzz`), run in the normal test suite: every committed seed of
//! `fuzz/corpus/<target>/`, then random bytes and random mutations of valid inputs.

mod common;

use common::*;
use keel_metadata_log::fuzz;
use keel_metadata_log::{MetadataImage, Provenance, snapshot};
use keel_record::fuzz::{corpus_seeds, mutate};
use proptest::prelude::*;

fn valid_snapshot() -> Vec<u8> {
    let t = topic_id(1);
    let image = MetadataImage::empty()
        .with_records(
            Provenance { offset: 9, term: 2 },
            &[
                register(1),
                register(2),
                topic("orders", t),
                topic_config("orders", "retention.ms", Some("1000")),
                partition(t, 0, &[1, 2], &[1, 2], 1),
                producer_ids(1, 3, 1000),
            ],
        )
        .unwrap();
    // The targets' mode byte: 1 = fix the CRC up after mutating.
    let mut input = vec![1u8];
    input.extend(snapshot::encode(&image, b"raft-meta"));
    input
}

#[test]
fn committed_seeds_pass() {
    for seed in corpus_seeds("snapshot_reader") {
        fuzz::snapshot_bytes(&seed);
    }
    for seed in corpus_seeds("raft_segment") {
        let dir = tempfile::tempdir().unwrap();
        fuzz::raft_segment(dir.path(), &seed);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn snapshot_reader_survives_any_bytes(data in proptest::collection::vec(any::<u8>(), 0..256)) {
        fuzz::snapshot_bytes(&data);
    }

    #[test]
    fn snapshot_reader_survives_damaged_snapshots(
        changes in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..4),
        cut in proptest::option::of(any::<usize>()),
    ) {
        fuzz::snapshot_bytes(&mutate(valid_snapshot(), &changes, cut));
    }

    #[test]
    fn raft_segment_recovery_survives_any_segment(
        framed in any::<bool>(),
        data in proptest::collection::vec(any::<u8>(), 0..400),
    ) {
        let mut input = vec![u8::from(framed)];
        input.extend(data);
        let dir = tempfile::tempdir().unwrap();
        fuzz::raft_segment(dir.path(), &input);
    }
}
