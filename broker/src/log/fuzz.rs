//! Entry points shared by the cargo-fuzz targets (`fuzz/fuzz_targets/`, libFuzzer) and their
//! short proptest versions in the normal test run (`broker/tests/fuzz_props.rs`). Each takes
//! arbitrary bytes and must neither panic nor loop nor allocate much beyond the input's size;
//! the properties it asserts on what it accepts are stated per function (a failed assertion
//! is a finding, like a panic).

use std::path::Path;

use keel_record::BatchIter;
use keel_record::fuzz::input;

use super::segment::{LOG_SUFFIX, Segment, segment_file};

/// Largest batch the segment target's scan accepts, bytes (a small `max.message.bytes`, so
/// the fuzzer also reaches the "length over the limit" branch).
const FUZZ_MAX_BATCH_BYTES: usize = 64 << 10;

/// The partition segment recovery scan on `data` (after its first byte, the mode: odd =
/// recompute the batches' CRCs first), written as segment 0 of a log in `dir` (an empty
/// directory the caller owns): [`Segment::open`] with `recover` cuts what is not a
/// whole valid batch off the end. Properties: after recovery the segment holds exactly the
/// valid prefix (a second recovery cuts nothing), every batch read back passes CRC
/// validation, and offsets only grow.
pub fn partition_segment(dir: &Path, data: &[u8]) {
    let Some(data) = input(data) else { return };
    let path = segment_file(dir, 0, LOG_SUFFIX);
    std::fs::write(&path, &data).expect("write the segment");
    let opened = Segment::open(dir, 0, true, 4096, FUZZ_MAX_BATCH_BYTES, 0, false);
    let Ok((seg, outcome)) = opened else { return };
    assert_eq!(
        seg.size_bytes() + outcome.truncated_bytes,
        data.len() as u64,
        "recovery lost track of bytes"
    );
    let size = seg.size_bytes();
    let mut offset = seg.base_offset();
    let mut last = -1i64;
    // Each read returns at least one batch and moves `offset` past it: bounded by the size.
    while let Ok(Some((bytes, next))) = seg.read(offset, 1 << 20, i64::MAX) {
        for b in BatchIter::new(bytes) {
            let b = b.expect("a recovered batch parses");
            assert!(b.is_crc_valid(), "a recovered batch has a bad CRC");
            assert!(b.base_offset() > last, "offsets go backwards");
            last = b.last_offset();
        }
        assert!(next > offset, "read did not advance");
        offset = next;
    }
    drop(seg);
    let (again, outcome) = Segment::open(dir, 0, true, 4096, FUZZ_MAX_BATCH_BYTES, 0, false)
        .expect("a recovered segment opens again");
    assert_eq!(outcome.truncated_bytes, 0, "a second recovery cut more");
    assert_eq!(again.size_bytes(), size);
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_record::RecordBatchBuilder;

    #[test]
    fn valid_and_torn_segments_pass() {
        let mut data = Vec::new();
        for base in [0i64, 3] {
            let mut b = RecordBatchBuilder::new(base);
            for i in 0..3 {
                b.append(1_000 + i, Some(b"k"), Some(b"value"), &[]);
            }
            data.extend_from_slice(b.build().as_bytes());
        }
        let mut input = vec![0u8];
        input.extend_from_slice(&data);
        let dir = tempfile::tempdir().unwrap();
        partition_segment(dir.path(), &input);
        // And with a torn tail.
        let dir = tempfile::tempdir().unwrap();
        partition_segment(dir.path(), &input[..input.len() - 5]);
    }
}
