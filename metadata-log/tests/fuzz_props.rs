//! Short proptest versions of the metadata log's fuzz targets
//! (`fuzz/fuzz_targets/snapshot_reader.rs`, `raft_segment.rs`; entry points in
//! `keel_metadata_log::fuzz`), run in the normal test suite: every committed seed of
//! `fuzz/corpus/<target>/`, then random bytes and random mutations of valid inputs.

mod common;

use std::path::PathBuf;

use common::*;
use keel_metadata_log::fuzz;
use keel_metadata_log::{MetadataImage, Provenance, snapshot};
use proptest::prelude::*;

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
    snapshot::encode(&image, b"raft-meta")
}

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
    for seed in seeds("snapshot_reader") {
        fuzz::snapshot_bytes(&seed);
    }
    for seed in seeds("raft_segment") {
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
