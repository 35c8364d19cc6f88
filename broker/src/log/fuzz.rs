//! Entry points shared by the cargo-fuzz targets (`fuzz/fuzz_targets/`, libFuzzer) and their
//! short proptest versions in the normal test run (`broker/tests/fuzz_props.rs`). Each takes
//! arbitrary bytes and must neither panic nor loop nor allocate much beyond the input's size;
//! the properties it asserts on what it accepts are stated per function (a failed assertion
//! is a finding, like a panic).

use std::path::Path;

use bytes::Bytes;

use super::batch::{BatchHeader, BatchIter, RecordBatch};
use super::segment::{LOG_SUFFIX, Segment, segment_file};

/// Largest batch the segment target's scan accepts, bytes (a small `max.message.bytes`, so
/// the fuzzer also reaches the "length over the limit" branch).
const FUZZ_MAX_BATCH_BYTES: usize = 64 << 10;

/// Byte offset of a batch's CRC and of the first byte it covers (Kafka's v2 batch layout).
const CRC_POS: usize = 17;
const CRC_FROM: usize = 21;

/// The input after the first (mode) byte; with an odd mode byte every batch's CRC is
/// recomputed first, so mutations reach the code behind the CRC check.
fn input(data: &[u8]) -> Option<Vec<u8>> {
    let (&mode, body) = data.split_first()?;
    let mut body = body.to_vec();
    if mode % 2 == 1 {
        let mut pos = 0usize;
        // Each step moves past one batch of at least a header's length: bounded.
        while let Ok(h) = BatchHeader::parse(&body[pos..], pos as u64) {
            let end = pos + h.size_bytes();
            if end > body.len() || h.size_bytes() < CRC_FROM {
                break;
            }
            let crc = crc32c::crc32c(&body[pos + CRC_FROM..end]);
            body[pos + CRC_POS..pos + CRC_POS + 4].copy_from_slice(&crc.to_be_bytes());
            pos = end;
        }
    }
    Some(body)
}

/// The record-batch parser on `data` (after its first byte, the mode: odd = recompute the
/// CRCs first; then concatenated v2 batches, as in a produce request, a fetch reply or a
/// follower append): splits it with [`BatchIter`], checks each batch's CRC
/// and decodes every record. Properties: the iterator stops (at most one batch per 61-byte
/// header), a batch whose CRC and records are valid keeps a valid CRC when its offsets and
/// epoch are rewritten ([`RecordBatch::with_offset_and_epoch`], what the leader does on
/// append), and no batch decodes more records than its header counts.
pub fn record_batches(data: &[u8]) {
    let Some(data) = input(data) else { return };
    let data = Bytes::from(data);
    let mut batches = 0usize;
    for batch in BatchIter::new(data.clone()) {
        batches += 1;
        assert!(
            batches <= data.len() / 61 + 1,
            "more batches than the input holds"
        );
        let Ok(batch) = batch else { break };
        let crc_ok = batch.validate().is_ok();
        let count = batch.header().record_count;
        let mut decoded = 0i64;
        let mut records_ok = true;
        for r in batch.records() {
            match r {
                Ok(_) => decoded += 1,
                Err(_) => {
                    records_ok = false;
                    break;
                }
            }
        }
        assert!(
            decoded <= i64::from(count),
            "{decoded} records decoded, the header counts {count}"
        );
        if crc_ok && records_ok {
            let moved = batch.with_offset_and_epoch(1_000, 7);
            assert!(moved.is_crc_valid(), "rewritten batch lost its CRC");
            assert_eq!(moved.base_offset(), 1_000);
            assert_eq!(moved.records().count(), batch.records().count());
        }
        // A single batch is re-read on its own the same way.
        let alone = RecordBatch::from_bytes(batch.as_bytes().clone());
        assert!(
            alone.is_ok(),
            "a batch split off by BatchIter does not parse alone"
        );
    }
}

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
    let opened = Segment::open(dir, 0, true, 4096, FUZZ_MAX_BATCH_BYTES, 0);
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
    let (again, outcome) = Segment::open(dir, 0, true, 4096, FUZZ_MAX_BATCH_BYTES, 0)
        .expect("a recovered segment opens again");
    assert_eq!(outcome.truncated_bytes, 0, "a second recovery cut more");
    assert_eq!(again.size_bytes(), size);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::batch::RecordBatchBuilder;

    #[test]
    fn valid_batches_pass_both_targets() {
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
        record_batches(&input);
        let dir = tempfile::tempdir().unwrap();
        partition_segment(dir.path(), &input);
        // And with a torn tail.
        let dir = tempfile::tempdir().unwrap();
        partition_segment(dir.path(), &input[..input.len() - 5]);
        // A damaged value with its CRC fixed up reaches the record decoder.
        let mut damaged = input.clone();
        damaged[0] = 1;
        let last = damaged.len() - 1;
        damaged[last] ^= 0x55;
        record_batches(&damaged);
    }
}
