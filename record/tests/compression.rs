//! Compressed batches (#21): every codec round-trips build -> validate -> read, the framings
//! Kafka clients send decode (xerial and raw snappy, linked LZ4 blocks with a content
//! checksum, concatenated gzip members and zstd frames), and what a broker must refuse is
//! refused with a reason naming it: a decompression bomb, a wrong CRC, truncated compressed
//! data, a record count that does not match, codec ids 5-7.

use std::io::Write;

use bytes::Bytes;
use keel_record::compression::{compress, snappy_raw_compress};
use keel_record::{
    CompressionType, HEADER_SIZE, LOG_OVERHEAD, MAX_DECOMPRESSED_BYTES, RecordBatch,
    RecordBatchBuilder,
};

const CRC_POS: usize = 17;
const ATTRIBUTES_POS: usize = 21;

/// (timestamp, key, value, headers) of the records the tests write.
type Rec = (
    i64,
    Option<Vec<u8>>,
    Option<Vec<u8>>,
    Vec<(Vec<u8>, Option<Vec<u8>>)>,
);

/// `n` records with compressible, varied values (about 150 bytes each), a null key and a
/// tombstone among them, and headers.
fn records(n: usize) -> Vec<Rec> {
    (0..n)
        .map(|i| {
            let key = (i % 7 != 3).then(|| format!("user-{}", i % 13).into_bytes());
            let value = (i % 11 != 5).then(|| {
                format!(
                    "{{\"event\":\"click\",\"seq\":{i},\"page\":\"/items/{}\",\"pad\":\"{}\"}}",
                    i * 31 % 1000,
                    "x".repeat(i % 90)
                )
                .into_bytes()
            });
            let headers = if i % 4 == 0 {
                vec![
                    (b"trace".to_vec(), Some(format!("t{i}").into_bytes())),
                    (b"n".to_vec(), None),
                ]
            } else {
                vec![]
            };
            (
                1_700_000_000_000 + (i as i64 % 50) - 10,
                key,
                value,
                headers,
            )
        })
        .collect()
}

fn build(codec: CompressionType, recs: &[Rec]) -> RecordBatch {
    let mut b = RecordBatchBuilder::new(0)
        .producer(42, 1, 7)
        .compression(codec);
    for (ts, k, v, hs) in recs {
        let hs: Vec<(&[u8], Option<&[u8]>)> = hs
            .iter()
            .map(|(k, v)| (k.as_slice(), v.as_deref()))
            .collect();
        b.append(*ts, k.as_deref(), v.as_deref(), &hs);
    }
    b.build()
}

/// The batch's records compared with what was written, field by field.
fn assert_records(batch: &RecordBatch, recs: &[Rec]) {
    let decoded: Vec<_> = batch.records().collect::<Result<_, _>>().unwrap();
    assert_eq!(decoded.len(), recs.len());
    let first = batch.header().first_timestamp;
    for (i, (r, (ts, k, v, hs))) in decoded.iter().zip(recs).enumerate() {
        assert_eq!(r.offset_delta as usize, i);
        assert_eq!(first + r.timestamp_delta, *ts, "record {i}");
        assert_eq!(r.key.as_deref(), k.as_deref(), "record {i}");
        assert_eq!(r.value.as_deref(), v.as_deref(), "record {i}");
        let got: Vec<_> = r
            .headers
            .iter()
            .map(|h| (h.key.to_vec(), h.value.as_ref().map(|v| v.to_vec())))
            .collect();
        assert_eq!(&got, hs, "record {i}");
    }
}

/// A batch with `template`'s header but `attributes`, `section` as its records section, and
/// its length and CRC fixed up (what a producer with its own encoder would send).
fn assemble(template: &RecordBatch, attributes: i16, section: &[u8]) -> RecordBatch {
    let mut b = template.as_bytes()[..HEADER_SIZE].to_vec();
    b.extend_from_slice(section);
    let len = (b.len() - LOG_OVERHEAD) as i32;
    b[8..12].copy_from_slice(&len.to_be_bytes());
    b[ATTRIBUTES_POS..ATTRIBUTES_POS + 2].copy_from_slice(&attributes.to_be_bytes());
    fix_crc(&mut b);
    RecordBatch::from_bytes(Bytes::from(b)).unwrap()
}

fn fix_crc(b: &mut [u8]) {
    let crc = crc32c::crc32c(&b[ATTRIBUTES_POS..]);
    b[CRC_POS..CRC_POS + 4].copy_from_slice(&crc.to_be_bytes());
}

/// The uncompressed records section of `recs`.
fn plain_section(recs: &[Rec]) -> (RecordBatch, Vec<u8>) {
    let plain = build(CompressionType::None, recs);
    let section = plain.as_bytes()[HEADER_SIZE..].to_vec();
    (plain, section)
}

fn validate_err(batch: &RecordBatch) -> String {
    batch
        .validate()
        .expect_err("the batch must be refused")
        .reason
        .into_owned()
}

#[test]
fn every_codec_round_trips_through_build_validate_and_read() {
    // 2,000 records (~300 KiB): several LZ4 (64 KiB) and xerial (32 KiB) blocks.
    let recs = records(2_000);
    let (plain, section) = plain_section(&recs);
    for codec in CompressionType::ALL {
        let batch = build(codec, &recs);
        let h = *batch.header();
        assert_eq!(h.compression_codec(), codec.id(), "{codec}");
        assert_eq!(batch.compression(), Ok(codec));
        assert_eq!(h.record_count, 2_000);
        assert_eq!(
            (h.producer_id, h.producer_epoch, h.base_sequence),
            (42, 1, 7)
        );
        assert!(batch.is_crc_valid(), "{codec}: CRC over the stored bytes");
        if codec != CompressionType::None {
            assert!(
                batch.size_bytes() < plain.size_bytes() / 3,
                "{codec}: {} bytes stored for {} plain",
                batch.size_bytes(),
                plain.size_bytes()
            );
            assert_ne!(
                &batch.as_bytes()[HEADER_SIZE..],
                &section[..],
                "{codec}: stored compressed"
            );
        }
        assert_eq!(
            batch.validate_with_timestamp_deltas(),
            plain.validate_with_timestamp_deltas(),
            "{codec}"
        );
        assert_eq!(
            batch.records_section(MAX_DECOMPRESSED_BYTES).unwrap(),
            section,
            "{codec}"
        );
        // As a reader gets it: the stored bytes, split again.
        let again = RecordBatch::from_bytes(batch.as_bytes().clone()).unwrap();
        assert_records(&again, &recs);
        let validated: Vec<_> = again
            .validated_records()
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(validated.len(), recs.len());
        // The leader's stamping keeps the compressed bytes and their CRC valid.
        let moved = again.with_offset_and_epoch(1_000, 3);
        moved.validate().unwrap();
        assert_eq!(
            &moved.as_bytes()[HEADER_SIZE..],
            &batch.as_bytes()[HEADER_SIZE..]
        );
    }
}

#[test]
fn a_gzip_bomb_is_refused_naming_the_bound() {
    // 100 MiB of zeros gzip to about 100 KiB.
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let zeros = vec![0u8; 1 << 20];
    for _ in 0..100 {
        gz.write_all(&zeros).unwrap();
    }
    let bomb = gz.finish().unwrap();
    assert!(bomb.len() < 1 << 20, "bomb of {} bytes", bomb.len());
    let (template, _) = plain_section(&records(1));
    let batch = assemble(&template, CompressionType::Gzip.id(), &bomb);
    let reason = validate_err(&batch);
    assert_eq!(
        reason,
        format!("gzip: decompressed size exceeds {MAX_DECOMPRESSED_BYTES} bytes")
    );
    // Readers stop the same way: one error, then nothing.
    let mut it = batch.records();
    assert!(it.next().unwrap().unwrap_err().reason.contains("exceeds"));
    assert!(it.next().is_none());
    // A smaller bound is honoured as given.
    let e = batch.checked_records_section(1 << 20).unwrap_err();
    assert_eq!(e.reason, "gzip: decompressed size exceeds 1048576 bytes");
}

#[test]
fn every_codec_refuses_output_beyond_the_bound() {
    let recs = records(2_000);
    let (_, section) = plain_section(&recs);
    for codec in &CompressionType::ALL[1..] {
        let batch = build(*codec, &recs);
        let exact = batch.checked_records_section(section.len()).unwrap().0;
        assert_eq!(
            exact.len(),
            section.len(),
            "{codec}: exactly the bound is accepted"
        );
        let e = batch
            .checked_records_section(section.len() - 1)
            .unwrap_err();
        assert_eq!(
            e.reason,
            format!(
                "{codec}: decompressed size exceeds {} bytes",
                section.len() - 1
            )
        );
    }
}

#[test]
fn a_wrong_crc_is_refused_before_decompressing() {
    let recs = records(50);
    for codec in &CompressionType::ALL[1..] {
        let batch = build(*codec, &recs);
        let mut bytes = batch.as_bytes().to_vec();
        let last = bytes.len() - 1;
        bytes[last] ^= 0x01;
        let damaged = RecordBatch::from_bytes(Bytes::from(bytes)).unwrap();
        assert_eq!(validate_err(&damaged), "CRC32C mismatch", "{codec}");
        assert!(damaged.validated_records().is_err());
    }
}

#[test]
fn truncated_compressed_data_is_refused_even_with_a_valid_crc() {
    let recs = records(300);
    for codec in &CompressionType::ALL[1..] {
        let batch = build(*codec, &recs);
        let section = &batch.as_bytes()[HEADER_SIZE..];
        for cut in [1, 4, 9, section.len() / 2, section.len() - 20] {
            let truncated = assemble(&batch, codec.id(), &section[..section.len() - cut]);
            let reason = validate_err(&truncated);
            assert!(
                reason.starts_with(&format!("{codec}: malformed compressed data"))
                    || reason.starts_with("record count mismatch")
                    || reason.starts_with("record "),
                "{codec} cut {cut}: {reason}"
            );
            assert!(truncated.records().any(|r| r.is_err()), "{codec} cut {cut}");
        }
    }
}

#[test]
fn a_record_count_that_does_not_match_the_compressed_records_is_refused() {
    let recs = records(3);
    for codec in &CompressionType::ALL[1..] {
        let batch = build(*codec, &recs);
        for (count, expected) in [
            (
                4,
                "record count mismatch: the header counts 4 records, the batch holds 3",
            ),
            (2, "record count mismatch: "),
        ] {
            let mut b = batch.as_bytes().to_vec();
            b[23..27].copy_from_slice(&(count - 1i32).to_be_bytes());
            b[57..61].copy_from_slice(&count.to_be_bytes());
            fix_crc(&mut b);
            let edited = RecordBatch::from_bytes(Bytes::from(b)).unwrap();
            let reason = validate_err(&edited);
            assert!(
                reason.starts_with(expected),
                "{codec} count {count}: {reason}"
            );
        }
    }
}

#[test]
fn a_record_with_a_wrong_offset_delta_is_named_by_its_index() {
    // Three single-record sections joined: every record has offset delta 0, so record 1 is
    // the first wrong one.
    let recs = records(3);
    let (template, _) = plain_section(&recs);
    let mut section = Vec::new();
    for r in &recs {
        section.extend_from_slice(&plain_section(std::slice::from_ref(r)).1);
    }
    for codec in &CompressionType::ALL[1..] {
        let batch = assemble(&template, codec.id(), &compress(*codec, &section));
        assert_eq!(
            validate_err(&batch),
            "record 1: offset delta 0 (record offset deltas must be 0..count-1)",
            "{codec}"
        );
    }
}

#[test]
fn raw_and_xerial_snappy_both_decode() {
    let recs = records(1_000);
    let (plain, section) = plain_section(&recs);
    // Raw: one snappy block without framing, as librdkafka may send.
    let raw = snappy_raw_compress(&section);
    assert_ne!(&raw[..8], b"\x82SNAPPY\x00");
    let batch = assemble(&plain, CompressionType::Snappy.id(), &raw);
    batch.validate().unwrap();
    assert_records(&batch, &recs);
    // Xerial: what Keel's builder writes, as snappy-java's SnappyOutputStream does.
    let xerial = build(CompressionType::Snappy, &recs);
    let s = &xerial.as_bytes()[HEADER_SIZE..];
    assert_eq!(&s[..8], b"\x82SNAPPY\x00");
    assert_eq!(
        &s[8..16],
        &[0, 0, 0, 1, 0, 0, 0, 1],
        "version 1, compatible version 1"
    );
    let first_block = i32::from_be_bytes([s[16], s[17], s[18], s[19]]) as usize;
    assert!(first_block < s.len() - 20, "several blocks");
    assert_records(&xerial, &recs);
    // A xerial block length pointing past the end is named.
    let mut bad = s.to_vec();
    bad[16..20].copy_from_slice(&i32::MAX.to_be_bytes());
    let reason = validate_err(&assemble(&plain, CompressionType::Snappy.id(), &bad));
    assert!(
        reason.starts_with("snappy: malformed compressed data: xerial block length"),
        "{reason}"
    );
}

#[test]
fn lz4_frames_with_linked_blocks_and_a_content_checksum_decode() {
    use lz4_flex::frame::{BlockMode, BlockSize, FrameEncoder, FrameInfo};
    let recs = records(2_000);
    let (plain, section) = plain_section(&recs);
    let info = FrameInfo::new()
        .block_size(BlockSize::Max64KB)
        .block_mode(BlockMode::Linked)
        .content_checksum(true)
        .block_checksums(true);
    let mut e = FrameEncoder::with_frame_info(info, Vec::new());
    e.write_all(&section).unwrap();
    let framed = e.finish().unwrap();
    let batch = assemble(&plain, CompressionType::Lz4.id(), &framed);
    batch.validate().unwrap();
    assert_records(&batch, &recs);
    // A wrong content checksum (the frame's last 4 bytes) is refused even with a valid CRC.
    let mut bad = framed.clone();
    let last = bad.len() - 1;
    bad[last] ^= 0xff;
    let reason = validate_err(&assemble(&plain, CompressionType::Lz4.id(), &bad));
    assert!(
        reason.starts_with("lz4: malformed compressed data"),
        "{reason}"
    );
}

#[test]
fn concatenated_gzip_members_and_zstd_frames_decode() {
    let recs = records(200);
    let (plain, section) = plain_section(&recs);
    let (a, b) = section.split_at(section.len() / 3);
    for codec in [CompressionType::Gzip, CompressionType::Zstd] {
        let mut joined = compress(codec, a);
        joined.extend_from_slice(&compress(codec, b));
        let batch = assemble(&plain, codec.id(), &joined);
        batch.validate().unwrap();
        assert_records(&batch, &recs);
    }
}

#[test]
fn codec_ids_5_to_7_are_refused_naming_the_id() {
    let recs = records(3);
    let (plain, section) = plain_section(&recs);
    for id in 5..=7i16 {
        let batch = assemble(&plain, id, &section);
        let reason = validate_err(&batch);
        assert!(
            reason.starts_with(&format!("unknown compression codec id {id}")),
            "{reason}"
        );
        assert!(batch.records().next().unwrap().is_err());
        assert!(batch.compression().is_err());
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

    /// Arbitrary bytes as the compressed section of any codec, CRC fixed up: validation and
    /// reading return an error or records, never panic.
    #[test]
    fn garbage_compressed_sections_never_panic(
        codec in 1i16..=7,
        section in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512),
    ) {
        let (template, _) = plain_section(&records(2));
        let batch = assemble(&template, codec, &section);
        let _ = batch.validate();
        for r in batch.records() {
            let _ = r;
        }
    }

    /// Valid compressed sections with a few bytes changed, CRC fixed up: never a panic, and
    /// whatever validates also reads back.
    #[test]
    fn damaged_compressed_sections_never_panic(
        codec in 1usize..=4,
        changes in proptest::collection::vec((proptest::prelude::any::<usize>(), proptest::prelude::any::<u8>()), 1..4),
    ) {
        let codec = CompressionType::ALL[codec];
        let batch = build(codec, &records(20));
        let mut section = batch.as_bytes()[HEADER_SIZE..].to_vec();
        for (at, byte) in changes {
            let at = at % section.len();
            section[at] = byte;
        }
        let damaged = assemble(&batch, codec.id(), &section);
        if damaged.validate().is_ok() {
            proptest::prop_assert!(damaged.records().all(|r| r.is_ok()));
        }
    }
}
