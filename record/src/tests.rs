//! Round trips, corruption and layout tests of the batch format.

use super::*;
use crate::header::{be_i16, be_i32, be_i64, be_u32};
use bytes::Bytes;
use proptest::prelude::*;

type Rec = (
    i64,
    Option<Vec<u8>>,
    Option<Vec<u8>>,
    Vec<(Vec<u8>, Option<Vec<u8>>)>,
);

fn arb_record() -> impl Strategy<Value = Rec> {
    (
        0i64..1_000_000_000_000,
        proptest::option::of(proptest::collection::vec(any::<u8>(), 0..40)),
        proptest::option::of(proptest::collection::vec(any::<u8>(), 0..300)),
        proptest::collection::vec(
            (
                proptest::collection::vec(any::<u8>(), 0..10),
                proptest::option::of(proptest::collection::vec(any::<u8>(), 0..10)),
            ),
            0..3,
        ),
    )
}

fn build(base: i64, pid: i64, seq: i32, recs: &[Rec]) -> RecordBatch {
    let mut b = RecordBatchBuilder::new(base).partition_leader_epoch(7);
    if pid >= 0 {
        b = b.producer(pid, 3, seq);
    }
    for (ts, k, v, hs) in recs {
        let hs: Vec<(&[u8], Option<&[u8]>)> = hs
            .iter()
            .map(|(k, v)| (k.as_slice(), v.as_deref()))
            .collect();
        b.append(*ts, k.as_deref(), v.as_deref(), &hs);
    }
    b.build()
}

proptest! {
    #[test]
    fn encode_decode_round_trip(
        base in 0i64..i64::MAX / 2,
        pid in -1i64..1000,
        seq in 0i32..i32::MAX,
        recs in proptest::collection::vec(arb_record(), 1..20),
    ) {
        let batch = build(base, pid, seq, &recs);
        batch.validate().unwrap();
        let again = RecordBatch::from_bytes(batch.as_bytes().clone()).unwrap();
        prop_assert_eq!(&again, &batch);
        let h = again.header();
        prop_assert_eq!(h.base_offset, base);
        prop_assert_eq!(h.record_count as usize, recs.len());
        prop_assert_eq!(h.last_offset_delta as usize, recs.len() - 1);
        prop_assert_eq!(h.partition_leader_epoch, 7);
        prop_assert_eq!(h.max_timestamp, recs.iter().map(|r| r.0).max().unwrap());
        prop_assert_eq!(h.first_timestamp, recs[0].0);
        if pid >= 0 {
            prop_assert_eq!((h.producer_id, h.producer_epoch, h.base_sequence), (pid, 3, seq));
        }
        let decoded: Vec<Record> = again.records().collect::<Result<_, _>>().unwrap();
        prop_assert_eq!(decoded.len(), recs.len());
        for (i, (r, (ts, k, v, hs))) in decoded.iter().zip(&recs).enumerate() {
            prop_assert_eq!(r.offset_delta as usize, i);
            prop_assert_eq!(r.timestamp_delta + h.first_timestamp, *ts);
            prop_assert_eq!(r.key.as_deref(), k.as_deref());
            prop_assert_eq!(r.value.as_deref(), v.as_deref());
            prop_assert_eq!(r.headers.len(), hs.len());
            for (rh, (hk, hv)) in r.headers.iter().zip(hs) {
                prop_assert_eq!(&rh.key[..], &hk[..]);
                prop_assert_eq!(rh.value.as_deref(), hv.as_deref());
            }
        }
    }

    /// Any flipped byte after the CRC field or any truncation is detected, never a panic.
    #[test]
    fn corruption_is_an_error_not_a_panic(
        recs in proptest::collection::vec(arb_record(), 1..5),
        flip_at in any::<proptest::sample::Index>(),
        flip in 1u8..=255,
        cut_at in any::<proptest::sample::Index>(),
    ) {
        let batch = build(5, -1, -1, &recs);
        let bytes = batch.as_bytes().to_vec();
        let i = flip_at.index(bytes.len());
        let mut flipped = bytes.clone();
        flipped[i] ^= flip;
        match RecordBatch::from_bytes(Bytes::from(flipped)) {
            Ok(b) => {
                // Base offset and leader epoch are outside the CRC by design.
                if i >= ATTRIBUTES_POS || (CRC_POS..CRC_POS + 4).contains(&i) {
                    prop_assert!(b.validate().is_err());
                }
            }
            Err(e) => prop_assert_eq!(e.position, 0),
        }
        let cut = cut_at.index(bytes.len());
        prop_assert!(RecordBatch::from_bytes(Bytes::copy_from_slice(&bytes[..cut])).is_err());
        let mut it = BatchIter::new(Bytes::copy_from_slice(&bytes[..cut]));
        if cut > 0 {
            prop_assert!(it.next().unwrap().is_err());
        }
        prop_assert!(it.next().is_none());
    }

    /// With a recomputed CRC, a damaged record section is judged the same way by the
    /// fast `validate` walk and by the decoding iterator.
    #[test]
    fn validate_agrees_with_decoding(
        recs in proptest::collection::vec(arb_record(), 1..5),
        at in any::<proptest::sample::Index>(),
        flip in 1u8..=255,
    ) {
        let batch = build(0, -1, -1, &recs);
        let mut bytes = batch.as_bytes().to_vec();
        let i = HEADER_SIZE + at.index(bytes.len() - HEADER_SIZE);
        bytes[i] ^= flip;
        let crc = crc32c::crc32c(&bytes[ATTRIBUTES_POS..]);
        bytes[CRC_POS..CRC_POS + 4].copy_from_slice(&crc.to_be_bytes());
        let b = RecordBatch::from_bytes(Bytes::from(bytes)).unwrap();
        let decoded: Result<Vec<Record>, _> = b.records().collect();
        let decoded_ok = decoded.is_ok_and(|d| {
            d.len() == recs.len() && d.iter().enumerate().all(|(i, r)| r.offset_delta as usize == i)
        });
        prop_assert_eq!(b.validate().is_ok(), decoded_ok);
    }

    /// Arbitrary bytes never panic the decoders.
    #[test]
    fn garbage_never_panics(data in proptest::collection::vec(any::<u8>(), 0..300)) {
        for b in BatchIter::new(Bytes::from(data)).flatten() {
            let _ = b.validate();
            for r in b.records() { let _ = r; }
        }
    }
}

/// Offsets are bounded when a header is parsed, so `next_offset` cannot overflow; the
/// builder never panics on an out-of-range base offset.
#[test]
fn header_offsets_are_bounded() {
    for (base, records, ok) in [
        (MAX_LOG_END_OFFSET - 1, 1, true),
        (MAX_LOG_END_OFFSET - 1, 2, false),
        (MAX_LOG_END_OFFSET, 1, false),
        (i64::MAX, 1, false),
        (-1, 1, false),
    ] {
        let mut b = RecordBatchBuilder::new(base);
        for _ in 0..records {
            b.append(0, None, Some(b"x"), &[]);
        }
        let bytes = b.build().into_bytes();
        let parsed = RecordBatch::from_bytes(bytes.clone());
        assert_eq!(parsed.is_ok(), ok, "base {base} records {records}");
        if let Ok(p) = parsed {
            assert_eq!(p.header().next_offset(), MAX_LOG_END_OFFSET);
        }
        assert_eq!(BatchIter::new(bytes).next().unwrap().is_ok(), ok);
    }
}

#[test]
fn validate_reports_timestamp_delta_range() {
    let mut b = RecordBatchBuilder::new(0);
    for ts in [100, 90, 250, 100] {
        b.append(ts, None, None, &[]);
    }
    assert_eq!(b.build().validate_with_timestamp_deltas(), Ok((-10, 150)));
}

#[test]
fn sequence_wraps_at_i32_max() {
    assert_eq!(increment_sequence(i32::MAX, 1), 0);
    assert_eq!(increment_sequence(i32::MAX - 1, 3), 1);
    assert_eq!(increment_sequence(5, 3), 8);
    assert_eq!(increment_sequence(NO_SEQUENCE, 3), NO_SEQUENCE);
}

#[test]
fn header_layout_matches_kafka_v2() {
    let mut b = RecordBatchBuilder::new(0x0102).producer(9, 2, 40);
    b.append(1000, Some(b"k"), Some(b"v"), &[]);
    b.append(1005, None, Some(b"w"), &[]);
    let batch = b.build();
    let d = batch.as_bytes();
    assert_eq!(be_i64(d, 0), 0x0102);
    assert_eq!(be_i32(d, 8) as usize, d.len() - 12);
    assert_eq!(d[16], 2);
    assert_eq!(be_u32(d, 17), crc32c::crc32c(&d[21..]));
    assert_eq!(be_i32(d, 23), 1);
    assert_eq!(be_i64(d, 27), 1000);
    assert_eq!(be_i64(d, 35), 1005);
    assert_eq!(be_i64(d, 43), 9);
    assert_eq!(be_i16(d, 51), 2);
    assert_eq!(be_i32(d, 53), 40);
    assert_eq!(be_i32(d, 57), 2);
    assert_eq!(batch.header().last_sequence(), 41);
}

proptest! {
    /// Recompression to a topic's `compression.type` ([`RecordBatch::recompressed`]) keeps
    /// every header field but the codec bits, length and CRC, and every record, from and to
    /// every codec; the result passes the producer-side [`RecordBatch::validate`]. A
    /// LogAppendTime batch keeps its append time.
    #[test]
    fn recompressed_batches_keep_every_field_and_record(
        pid in -1i64..1000,
        recs in proptest::collection::vec(arb_record(), 1..12),
        from in 0usize..CompressionType::ALL.len(),
        to in 0usize..CompressionType::ALL.len(),
        append_time in any::<bool>(),
    ) {
        let (from, to) = (CompressionType::ALL[from], CompressionType::ALL[to]);
        let mut b = RecordBatchBuilder::new(1_000).partition_leader_epoch(7).compression(from);
        if pid >= 0 {
            b = b.producer(pid, 3, 17);
        }
        for (ts, k, v, hs) in &recs {
            let hs: Vec<(&[u8], Option<&[u8]>)> = hs
                .iter()
                .map(|(k, v)| (k.as_slice(), v.as_deref()))
                .collect();
            b.append(*ts, k.as_deref(), v.as_deref(), &hs);
        }
        let mut batch = b.build();
        if append_time {
            batch = batch.with_timestamp_type(true, 2_000_000_000_000);
        }
        let out = batch.recompressed(to).unwrap();
        let again = RecordBatch::from_bytes(out.as_bytes().clone()).unwrap();
        prop_assert_eq!(again.header(), out.header());
        again.validate().unwrap();
        prop_assert_eq!(again.compression().unwrap(), to);
        let (h, o) = (batch.header(), out.header());
        prop_assert_eq!(o.attributes & !COMPRESSION_CODEC_MASK, h.attributes & !COMPRESSION_CODEC_MASK);
        prop_assert_eq!((o.base_offset, o.last_offset_delta, o.partition_leader_epoch), (h.base_offset, h.last_offset_delta, h.partition_leader_epoch));
        prop_assert_eq!((o.producer_id, o.producer_epoch, o.base_sequence), (h.producer_id, h.producer_epoch, h.base_sequence));
        prop_assert_eq!((o.first_timestamp, o.max_timestamp, o.record_count), (h.first_timestamp, h.max_timestamp, h.record_count));
        let want: Vec<Record> = batch.records().map(|r| r.unwrap()).collect();
        let got: Vec<Record> = again.records().map(|r| r.unwrap()).collect();
        prop_assert_eq!(got, want);
    }
}

proptest! {
    /// The log cleaner's rewrite ([`RecordBatch::rebuilt_with`]) keeps the base offset, last
    /// offset delta, producer fields and every kept record's key, value, headers, offset and
    /// timestamp, with or without a delete horizon and for every codec; the result passes
    /// [`RecordBatch::validate_replicated`] (not the producer-side [`RecordBatch::validate`]
    /// once a record is gone).
    #[test]
    fn rebuilt_batches_keep_offsets_and_records(
        pid in -1i64..1000,
        recs in proptest::collection::vec(arb_record(), 1..12),
        keep_mask in any::<u16>(),
        horizon in proptest::option::of(0i64..2_000_000_000_000),
        codec in 0usize..CompressionType::ALL.len(),
    ) {
        let codec = CompressionType::ALL[codec];
        let mut b = RecordBatchBuilder::new(1_000).partition_leader_epoch(7).compression(codec);
        if pid >= 0 {
            b = b.producer(pid, 3, 17);
        }
        for (ts, k, v, hs) in &recs {
            let hs: Vec<(&[u8], Option<&[u8]>)> = hs
                .iter()
                .map(|(k, v)| (k.as_slice(), v.as_deref()))
                .collect();
            b.append(*ts, k.as_deref(), v.as_deref(), &hs);
        }
        let batch = b.build();
        let all: Vec<Record> = batch.records().map(|r| r.unwrap()).collect();
        let kept: Vec<Record> = all
            .iter()
            .enumerate()
            .filter(|(i, _)| keep_mask & (1 << i) != 0)
            .map(|(_, r)| r.clone())
            .collect();
        let out = batch.rebuilt_with(&kept, horizon);
        let again = RecordBatch::from_bytes(out.as_bytes().clone()).unwrap();
        prop_assert_eq!(again.header(), out.header());
        again.validate_replicated().unwrap();
        let (h, o) = (batch.header(), out.header());
        prop_assert_eq!(o.base_offset, h.base_offset);
        prop_assert_eq!(o.last_offset_delta, h.last_offset_delta);
        prop_assert_eq!(o.partition_leader_epoch, h.partition_leader_epoch);
        prop_assert_eq!((o.producer_id, o.producer_epoch, o.base_sequence), (h.producer_id, h.producer_epoch, h.base_sequence));
        prop_assert_eq!(o.record_count as usize, kept.len());
        prop_assert_eq!(o.delete_horizon_ms(), horizon);
        let abs = |first: i64, r: &Record| first.wrapping_add(r.timestamp_delta);
        let back: Vec<Record> = again.records().map(|r| r.unwrap()).collect();
        prop_assert_eq!(back.len(), kept.len());
        for (a, k) in back.iter().zip(&kept) {
            prop_assert_eq!(a.offset_delta, k.offset_delta);
            prop_assert_eq!(&a.key, &k.key);
            prop_assert_eq!(&a.value, &k.value);
            prop_assert_eq!(&a.headers, &k.headers);
            prop_assert_eq!(abs(o.first_timestamp, a), abs(h.first_timestamp, k));
        }
        if kept.is_empty() {
            prop_assert_eq!(out.size_bytes(), HEADER_SIZE);
            prop_assert_eq!(o.max_timestamp, h.max_timestamp);
        } else {
            let max = kept.iter().map(|r| abs(h.first_timestamp, r)).max().unwrap();
            prop_assert_eq!(o.max_timestamp, max);
        }
        if kept.len() == all.len() && horizon.is_none() {
            prop_assert_eq!(out.as_bytes(), batch.as_bytes());
        }
    }
}

#[test]
fn validate_replicated_refuses_what_a_cleaner_never_writes() {
    let mut b = RecordBatchBuilder::new(0);
    for i in 0..3 {
        b.append(i, Some(b"k"), Some(b"v"), &[]);
    }
    let batch = b.build();
    batch.validate_replicated().unwrap();
    let records: Vec<Record> = batch.records().map(|r| r.unwrap()).collect();
    // Out of order, or beyond the last offset delta.
    let swapped = batch.rebuilt_with(&[records[2].clone(), records[0].clone()], None);
    assert!(swapped.validate_replicated().is_err());
    let mut far = records[1].clone();
    far.offset_delta = 5;
    assert!(
        batch
            .rebuilt_with(&[far], None)
            .validate_replicated()
            .is_err()
    );
    // A damaged CRC.
    let mut bytes = batch.as_bytes().to_vec();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    let damaged = RecordBatch::from_bytes(Bytes::from(bytes)).unwrap();
    assert!(damaged.validate_replicated().is_err());
}
