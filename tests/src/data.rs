//! Record batches and values for produce and fetch requests, and reply-code helpers.

use bytes::Bytes;
use keel_proto::ErrorCode;
use keel_proto::broker::ProducePartitionResponse;
use keel_proto::common::Error as WireError;
use keel_proto::controller::{CreatableReplicaAssignment, CreatableTopic};
use keel_record::{BatchIter, RecordBatchBuilder};

/// `(offset, value)` per record.
pub type Records = Vec<(i64, String)>;
/// `(base offset, CRC)` per batch.
pub type Crcs = Vec<(i64, u32)>;

/// Wall clock now, ms since the Unix epoch: record timestamps, and comparisons with the
/// `append_timestamp_ms` controllers stamp on entries (same machine). Never waited on.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// One batch holding `values` (no producer id), timestamped now.
pub fn batch(values: &[String]) -> Bytes {
    let mut b = RecordBatchBuilder::new(0);
    let ts = now_ms();
    for v in values {
        b.append(ts, None, Some(v.as_bytes()), &[]);
    }
    b.build().into_bytes()
}

/// One idempotent batch of producer `pid`/`epoch` whose first record has sequence `seq`.
pub fn idempotent_batch(pid: i64, epoch: i16, seq: i32, values: &[String]) -> Bytes {
    let mut b = RecordBatchBuilder::new(0).producer(pid, epoch, seq);
    let ts = now_ms();
    for v in values {
        b.append(ts, None, Some(v.as_bytes()), &[]);
    }
    b.build().into_bytes()
}

/// `(offset, value)` of every record in `records` (UTF-8 values), plus (base offset, CRC)
/// per batch. Panics on a malformed batch: a broker never serves one.
pub fn decode(records: &Bytes) -> (Records, Crcs) {
    let mut out = Vec::new();
    let mut crcs = Vec::new();
    for b in BatchIter::new(records.clone()) {
        let b = b.expect("a served batch parses");
        let h = *b.header();
        crcs.push((h.base_offset, h.crc));
        for r in b.records() {
            let r = r.expect("a served record parses");
            let v = r.value.map(|v| String::from_utf8_lossy(&v).into_owned());
            out.push((
                h.base_offset + i64::from(r.offset_delta),
                v.unwrap_or_default(),
            ));
        }
    }
    (out, crcs)
}

/// Values `"{prefix}-{i}"` for `i` in `range`.
pub fn values(prefix: &str, range: std::ops::Range<usize>) -> Vec<String> {
    range.map(|i| format!("{prefix}-{i}")).collect()
}

/// Error code of a partition's produce response.
pub fn code(r: &ProducePartitionResponse) -> ErrorCode {
    ErrorCode::from_proto(r.error.as_ref()).expect("a known error code")
}

/// True when a reply error is absent or NONE.
pub fn ok(e: &Option<WireError>) -> bool {
    e.as_ref().is_none_or(|e| e.code == 0)
}

/// True when a reply error means "ask the active controller" (NOT_CONTROLLER).
pub fn is_not_controller(e: &Option<WireError>) -> bool {
    e.as_ref()
        .is_some_and(|e| e.code == i32::from(ErrorCode::NotController.code()))
}

/// A topic with explicit replica assignments: partition `i` on `assignments[i]` (the first
/// broker is the preferred leader).
pub fn assigned_topic(name: &str, assignments: &[&[i32]]) -> CreatableTopic {
    CreatableTopic {
        name: name.into(),
        num_partitions: -1,
        replication_factor: -1,
        assignments: assignments
            .iter()
            .enumerate()
            .map(|(i, b)| CreatableReplicaAssignment {
                partition_index: i as i32,
                broker_ids: b.to_vec(),
            })
            .collect(),
        configs: vec![],
    }
}

/// One record's batch header, then 100 MiB of zeros gzipped (about 100 KiB) as its records,
/// with a valid CRC: only decompressing it shows that it exceeds
/// [`keel_record::MAX_DECOMPRESSED_BYTES`].
pub fn gzip_bomb() -> Bytes {
    use std::io::Write;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let zeros = vec![0u8; 1 << 20];
    for _ in 0..100 {
        gz.write_all(&zeros).expect("gzip into memory");
    }
    let mut bomb = batch(&values("x", 0..1))[..keel_record::HEADER_SIZE].to_vec();
    bomb.extend_from_slice(&gz.finish().expect("gzip into memory"));
    let len = (bomb.len() - keel_record::LOG_OVERHEAD) as i32;
    bomb[8..12].copy_from_slice(&len.to_be_bytes());
    bomb[21..23].copy_from_slice(&keel_record::CompressionType::Gzip.id().to_be_bytes());
    let crc = crc32c::crc32c(&bomb[21..]);
    bomb[17..21].copy_from_slice(&crc.to_be_bytes());
    Bytes::from(bomb)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_decode_to_their_values() {
        let (recs, crcs) = decode(&batch(&values("v", 0..3)));
        assert_eq!(
            recs,
            vec![(0, "v-0".into()), (1, "v-1".into()), (2, "v-2".into())]
        );
        assert_eq!(crcs.len(), 1);
        let (recs, _) = decode(&idempotent_batch(7, 0, 5, &values("i", 0..2)));
        assert_eq!(recs.len(), 2);
    }
}
