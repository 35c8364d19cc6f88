//! Entry points shared by the cargo-fuzz targets (`fuzz/fuzz_targets/`, libFuzzer) and their
//! short proptest versions in the normal test run (`record/tests/fuzz_props.rs` and the
//! other crates' `tests/fuzz_props.rs`), plus the helpers those proptests share: the
//! committed seed corpus and byte mutations. A target takes arbitrary bytes and must neither
//! panic nor loop nor allocate much beyond the input's size; the properties it asserts on
//! what it accepts are stated per function (a failed assertion is a finding, like a panic).

use std::path::Path;

use bytes::Bytes;

use crate::{ATTRIBUTES_POS, BatchHeader, BatchIter, CRC_POS, RecordBatch, RecordBatchBuilder};

/// The input after the first (mode) byte; with an odd mode byte every batch's CRC is
/// recomputed first, so mutations reach the code behind the CRC check.
pub fn input(data: &[u8]) -> Option<Vec<u8>> {
    let (&mode, body) = data.split_first()?;
    let mut body = body.to_vec();
    if mode % 2 == 1 {
        let mut pos = 0usize;
        // Each step moves past one batch of at least a header's length: bounded.
        while let Ok(h) = BatchHeader::parse(&body[pos..], pos as u64) {
            let end = pos + h.size_bytes();
            if end > body.len() || h.size_bytes() < ATTRIBUTES_POS {
                break;
            }
            let crc = crc32c::crc32c(&body[pos + ATTRIBUTES_POS..end]);
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

/// The committed seed corpus of `target` (`fuzz/corpus/<target>/` of this checkout), sorted,
/// for the proptest versions. Panics naming the directory when it cannot be read.
pub fn corpus_seeds(target: &str) -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target);
    let mut out: Vec<Vec<u8>> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| std::fs::read(e.expect("corpus entry").path()).expect("corpus file"))
        .collect();
    out.sort();
    out
}

/// `data` with the mutations of a proptest case applied: each `(position, byte)` sets the
/// byte at `position` modulo the length, then `cut` (modulo the length + 1) truncates.
pub fn mutate(mut data: Vec<u8>, changes: &[(usize, u8)], cut: Option<usize>) -> Vec<u8> {
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

/// Valid concatenated batches: `shape` gives, per batch, its record count and value size.
/// The first byte is the targets' mode byte: odd = fix the CRCs up after mutating.
pub fn valid_batches(shape: &[(u8, u8)]) -> Vec<u8> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_and_damaged_batches_pass() {
        let input = valid_batches(&[(3, 5), (3, 5)]);
        record_batches(&input);
        // A damaged value with its CRC fixed up (odd mode byte) reaches the record decoder.
        let mut damaged = input.clone();
        damaged[0] = 1;
        let last = damaged.len() - 1;
        damaged[last] ^= 0x55;
        assert!(
            BatchIter::new(Bytes::from(input[1..].to_vec()))
                .all(|b| b.is_ok_and(|b| b.validate().is_ok())),
            "the seed batches are valid"
        );
        record_batches(&damaged);
    }
}
