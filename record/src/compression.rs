//! The compression codecs of a v2 batch's records section (attribute bits 0-2, Kafka
//! `CompressionType`), each framed as Kafka's Java client and librdkafka write it, and the
//! hard bound on decompressed bytes that keeps a broker's memory bounded whatever a producer
//! sends.
//!
//! | id | codec | framing (written as Kafka's Java client does; read also as librdkafka writes) |
//! |---:|-------|---------|
//! | 0 | none | records as they are |
//! | 1 | gzip | one gzip stream (RFC 1952; `GZIPOutputStream`); concatenated members are read too |
//! | 2 | snappy | xerial framing (`SnappyOutputStream` of snappy-java): the 8-byte magic `82 'SNAPPY' 00`, version and compatible version (i32 BE, both 1), then blocks of an i32 BE length + one raw snappy block of at most 32 KiB of input. Read: that, or one raw snappy block (librdkafka may send it) |
//! | 3 | lz4 | the LZ4 frame format (`KafkaLZ4BlockOutputStream`: 64 KiB independent blocks, no checksums); read: any LZ4 frame, linked blocks and content checksum included (librdkafka's lz4f) |
//! | 4 | zstd | zstd frames (zstd-jni `ZstdOutputStream`); read with ruzstd, concatenated frames too, content checksum verified when present; skippable frames are refused |
//! | 5-7 | — | refused: [`CompressionError::UnknownCodec`] |
//!
//! Decompression is streaming into a buffer that never holds more than the caller's bound
//! (normally [`MAX_DECOMPRESSED_BYTES`]): a "bomb" (a small batch that inflates to gigabytes)
//! fails with [`CompressionError::TooLarge`] once the bound is passed, having allocated at most
//! the bound. Kafka itself has no such bound (it decompresses lazily, record by record);
//! Keel's validation reads the whole records section, so it needs one.

use std::fmt;
use std::io::{self, Read, Write};
use std::str::FromStr;

use crate::COMPRESSION_CODEC_MASK;

/// Largest decompressed records section of one batch, bytes (64 MiB). A compressed batch
/// that inflates beyond it is refused by [`crate::RecordBatch::validate`] and not decoded by
/// [`crate::RecordBatch::records`]. Kafka's default `max.message.bytes` (1 MiB of
/// compressed batch) is far below it; so are the 100 MiB of `socket.request.max.bytes` divided
/// by the compression ratios of real data (JSON logs compress 5-20x).
pub const MAX_DECOMPRESSED_BYTES: usize = 64 * 1024 * 1024;

/// Input bytes per xerial snappy block, as snappy-java's `SnappyOutputStream` writes them
/// (its default block size, 32 KiB).
const XERIAL_BLOCK_BYTES: usize = 32 * 1024;

/// The xerial header's magic (snappy-java `SnappyCodec.MAGIC_HEADER`).
const XERIAL_MAGIC: [u8; 8] = [0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0];

/// Upper bound of a raw snappy block's expansion: its densest element (a 3-byte copy of 64
/// bytes) expands 21.3 times; 32 leaves room for the length preamble of tiny blocks.
const SNAPPY_MAX_RATIO: usize = 32;

/// Xerial header length: magic, version (i32), compatible version (i32).
const XERIAL_HEADER_BYTES: usize = 16;

/// Smallest zstd window Keel accepts as a bound, bytes: a bound below it (tests use small
/// ones) still decodes frames whose declared window exceeds their content.
const ZSTD_MIN_WINDOW_BYTES: usize = 1 << 20;

/// Bytes read from a decoder per step of [`read_bounded`].
const READ_CHUNK_BYTES: usize = 16 * 1024;

/// The compression codec of a batch (attribute bits 0-2; Kafka `CompressionType`, whose
/// names are those of the producer's `compression.type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum CompressionType {
    /// 0: records stored as they are.
    #[default]
    None,
    /// 1: gzip (deflate in a gzip stream).
    Gzip,
    /// 2: snappy (xerial framing, or one raw block).
    Snappy,
    /// 3: LZ4 frame format.
    Lz4,
    /// 4: Zstandard.
    Zstd,
}

/// Why a records section could not be decompressed, or its codec is unknown.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompressionError {
    /// Attribute bits 0-2 hold 5, 6 or 7, which no Kafka version defines.
    #[error(
        "unknown compression codec id {0} (attribute bits 0-2 must be 0-4: none, gzip, snappy, lz4, zstd)"
    )]
    UnknownCodec(i16),
    /// The records inflate beyond the bound (a decompression bomb, or a batch too large).
    #[error("{codec}: decompressed size exceeds {limit_bytes} bytes")]
    TooLarge {
        /// The codec of the batch.
        codec: CompressionType,
        /// The bound passed, bytes.
        limit_bytes: usize,
    },
    /// The compressed bytes are not a valid stream of the codec (truncated, corrupt, bad
    /// checksum, unsupported frame).
    #[error("{codec}: malformed compressed data: {detail}")]
    Malformed {
        /// The codec of the batch.
        codec: CompressionType,
        /// What the decoder reported.
        detail: String,
    },
}

impl CompressionType {
    /// Every codec, by id.
    pub const ALL: [CompressionType; 5] = [
        CompressionType::None,
        CompressionType::Gzip,
        CompressionType::Snappy,
        CompressionType::Lz4,
        CompressionType::Zstd,
    ];

    /// The codec of a batch's `attributes` (bits 0-2); 5-7 are
    /// [`CompressionError::UnknownCodec`].
    pub fn from_attributes(attributes: i16) -> Result<CompressionType, CompressionError> {
        let id = attributes & COMPRESSION_CODEC_MASK;
        CompressionType::ALL
            .get(id as usize)
            .copied()
            .ok_or(CompressionError::UnknownCodec(id))
    }

    /// The codec id (attribute bits 0-2): 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd.
    pub fn id(self) -> i16 {
        match self {
            CompressionType::None => 0,
            CompressionType::Gzip => 1,
            CompressionType::Snappy => 2,
            CompressionType::Lz4 => 3,
            CompressionType::Zstd => 4,
        }
    }

    /// Kafka's name (`compression.type`): none, gzip, snappy, lz4, zstd.
    pub fn name(self) -> &'static str {
        match self {
            CompressionType::None => "none",
            CompressionType::Gzip => "gzip",
            CompressionType::Snappy => "snappy",
            CompressionType::Lz4 => "lz4",
            CompressionType::Zstd => "zstd",
        }
    }
}

impl fmt::Display for CompressionType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for CompressionType {
    type Err = String;

    /// Parses Kafka's `compression.type` names (ASCII case-insensitive).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        CompressionType::ALL
            .into_iter()
            .find(|c| c.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                format!("unknown compression type {s:?} (none, gzip, snappy, lz4, zstd)")
            })
    }
}

/// Decompresses a records section compressed with `codec`, refusing (with
/// [`CompressionError::TooLarge`]) output beyond `limit_bytes` without ever holding more than
/// `limit_bytes` of it. `CompressionType::None` returns a copy of `data` under the same bound.
pub fn decompress(
    codec: CompressionType,
    data: &[u8],
    limit_bytes: usize,
) -> Result<Vec<u8>, CompressionError> {
    let malformed = |e: &dyn fmt::Display| CompressionError::Malformed {
        codec,
        detail: e.to_string(),
    };
    let mut out = Vec::new();
    let read = |r: &mut dyn Read, out: &mut Vec<u8>| match read_bounded(r, out, limit_bytes) {
        Ok(()) => Ok(()),
        Err(Bounded::TooLarge) => Err(CompressionError::TooLarge { codec, limit_bytes }),
        Err(Bounded::Io(e)) => Err(malformed(&e)),
    };
    match codec {
        CompressionType::None => read(&mut &data[..], &mut out)?,
        CompressionType::Gzip => read(&mut flate2::read::MultiGzDecoder::new(data), &mut out)?,
        CompressionType::Snappy => snappy_decompress(data, &mut out, limit_bytes)?,
        CompressionType::Lz4 => {
            lz4_frames_complete(data).map_err(|e| malformed(&e))?;
            read(&mut lz4_flex::frame::FrameDecoder::new(data), &mut out)?
        }
        CompressionType::Zstd => {
            let max_window = limit_bytes.max(ZSTD_MIN_WINDOW_BYTES) as u64;
            let mut input = data;
            // Each frame consumes at least its 4-byte magic: bounded by the input length.
            while !input.is_empty() {
                let mut frame = ruzstd::decoding::StreamingDecoder::new_with_max_window_size(
                    &mut input, max_window,
                )
                .map_err(|e| malformed(&e))?;
                read(&mut frame, &mut out)?;
                let d = &frame.decoder;
                if let (Some(stored), Some(computed)) =
                    (d.get_checksum_from_data(), d.get_calculated_checksum())
                    && stored != computed
                {
                    return Err(malformed(&"content checksum mismatch"));
                }
            }
        }
    }
    Ok(out)
}

/// Compresses a records section with `codec`, framed as Kafka's Java producer writes it (see
/// the module table); `CompressionType::None` returns a copy.
pub fn compress(codec: CompressionType, data: &[u8]) -> Vec<u8> {
    // Writes into a Vec cannot fail: the encoders' io::Results only carry the writer's errors.
    const VEC_WRITE: &str = "writing to a Vec cannot fail";
    match codec {
        CompressionType::None => data.to_vec(),
        CompressionType::Gzip => {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            e.write_all(data).expect(VEC_WRITE);
            e.finish().expect(VEC_WRITE)
        }
        CompressionType::Snappy => snappy_xerial_compress(data),
        CompressionType::Lz4 => {
            let info = lz4_flex::frame::FrameInfo::new()
                .block_size(lz4_flex::frame::BlockSize::Max64KB)
                .block_mode(lz4_flex::frame::BlockMode::Independent);
            let mut e = lz4_flex::frame::FrameEncoder::with_frame_info(info, Vec::new());
            e.write_all(data).expect(VEC_WRITE);
            e.finish().expect(VEC_WRITE)
        }
        CompressionType::Zstd => {
            ruzstd::encoding::compress_to_vec(data, ruzstd::encoding::CompressionLevel::Fastest)
        }
    }
}

/// Why [`read_bounded`] stopped early.
enum Bounded {
    TooLarge,
    Io(io::Error),
}

/// Appends everything `r` yields to `out`, failing once `out` would pass `limit_bytes`;
/// `out`'s capacity never exceeds `limit_bytes` (it grows by doubling, capped at the limit).
/// Each step either ends or adds at least one byte: at most `limit_bytes + 1` steps.
fn read_bounded(r: &mut dyn Read, out: &mut Vec<u8>, limit_bytes: usize) -> Result<(), Bounded> {
    let mut chunk = vec![0u8; READ_CHUNK_BYTES];
    loop {
        let n = match r.read(&mut chunk) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Bounded::Io(e)),
        };
        if n > limit_bytes - out.len() {
            return Err(Bounded::TooLarge);
        }
        if out.capacity() - out.len() < n {
            let target = (out.capacity() * 2)
                .max(out.len() + n)
                .max(4096)
                .min(limit_bytes);
            out.reserve_exact(target - out.len());
        }
        out.extend_from_slice(&chunk[..n]);
    }
}

/// Decodes xerial-framed snappy (detected by its magic) or one raw snappy block, checking
/// every block's declared length against the bound before allocating for it.
fn snappy_decompress(
    data: &[u8],
    out: &mut Vec<u8>,
    limit_bytes: usize,
) -> Result<(), CompressionError> {
    let codec = CompressionType::Snappy;
    let malformed = |detail: String| CompressionError::Malformed { codec, detail };
    let block = |raw: &[u8], out: &mut Vec<u8>| -> Result<(), CompressionError> {
        let n = snap::raw::decompress_len(raw).map_err(|e| malformed(e.to_string()))?;
        if n > limit_bytes - out.len() {
            return Err(CompressionError::TooLarge { codec, limit_bytes });
        }
        // The declared length is checked against what the block can hold before the output
        // is allocated, so a few bytes cannot make the broker allocate the whole bound.
        if n > raw.len().saturating_mul(SNAPPY_MAX_RATIO) {
            return Err(malformed(format!(
                "a snappy block of {} bytes declares {n} bytes of output",
                raw.len()
            )));
        }
        let start = out.len();
        out.resize(start + n, 0);
        let written = snap::raw::Decoder::new()
            .decompress(raw, &mut out[start..])
            .map_err(|e| malformed(e.to_string()))?;
        out.truncate(start + written);
        Ok(())
    };
    if !data.starts_with(&XERIAL_MAGIC) {
        return block(data, out);
    }
    if data.len() < XERIAL_HEADER_BYTES {
        return Err(malformed("truncated xerial header".into()));
    }
    let mut pos = XERIAL_HEADER_BYTES;
    // Each step consumes at least 5 bytes (length + a non-empty block): bounded.
    while pos < data.len() {
        let Some(len) = data.get(pos..pos + 4) else {
            return Err(malformed(format!(
                "truncated xerial block length at byte {pos}"
            )));
        };
        let len = i32::from_be_bytes([len[0], len[1], len[2], len[3]]);
        pos += 4;
        let Some(raw) = usize::try_from(len)
            .ok()
            .filter(|&l| l > 0)
            .and_then(|l| data.get(pos..pos + l))
        else {
            return Err(malformed(format!(
                "xerial block length {len} at byte {} does not fit the {} bytes left",
                pos - 4,
                data.len() - pos
            )));
        };
        block(raw, out)?;
        pos += raw.len();
    }
    Ok(())
}

/// Magic number of an LZ4 frame (little-endian on the wire).
const LZ4_FRAME_MAGIC: u32 = 0x184D_2204;

/// Walks the structure of the LZ4 frames in `data` without decompressing: each starts with
/// the frame magic and a frame descriptor, and ends with its end mark (and content checksum
/// when flagged), with nothing after the last frame. lz4_flex's decoder takes input that ends
/// at a block boundary as complete; Kafka's `KafkaLZ4BlockInputStream` does not, so neither
/// does Keel (a batch the broker accepts must be readable by every client). Legacy and
/// skippable frames are refused (no Kafka client writes them).
fn lz4_frames_complete(data: &[u8]) -> Result<(), String> {
    let le_u32 = |at: usize| -> Result<u32, String> {
        data.get(at..at + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .ok_or_else(|| format!("truncated LZ4 frame at byte {at}"))
    };
    let mut pos = 0;
    // Each frame takes at least 7 bytes (magic, descriptor, end mark): bounded.
    while pos < data.len() {
        let magic = le_u32(pos)?;
        if magic != LZ4_FRAME_MAGIC {
            return Err(format!(
                "not an LZ4 frame at byte {pos} (magic {magic:#010x})"
            ));
        }
        let flg = *data
            .get(pos + 4)
            .ok_or_else(|| format!("truncated LZ4 frame descriptor at byte {pos}"))?;
        let block_checksums = flg & 0x10 != 0;
        let content_size = flg & 0x08 != 0;
        let content_checksum = flg & 0x04 != 0;
        let dict_id = flg & 0x01 != 0;
        // Magic, FLG, BD, optional content size and dictionary id, header checksum.
        pos += 4 + 2 + if content_size { 8 } else { 0 } + if dict_id { 4 } else { 0 } + 1;
        // Each block takes at least 4 bytes: bounded.
        loop {
            let size = le_u32(pos)?;
            pos += 4;
            if size == 0 {
                break;
            }
            pos += (size & 0x7FFF_FFFF) as usize + if block_checksums { 4 } else { 0 };
        }
        if content_checksum {
            pos += 4;
        }
        if pos > data.len() {
            return Err(format!(
                "truncated LZ4 frame: it ends at byte {pos} of {}",
                data.len()
            ));
        }
    }
    Ok(())
}

/// Writes xerial framing as snappy-java's `SnappyOutputStream` does: header (magic, version
/// 1, compatible version 1), then one length-prefixed raw block per 32 KiB of input.
fn snappy_xerial_compress(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(XERIAL_HEADER_BYTES + snap::raw::max_compress_len(data.len()));
    out.extend_from_slice(&XERIAL_MAGIC);
    out.extend_from_slice(&1i32.to_be_bytes());
    out.extend_from_slice(&1i32.to_be_bytes());
    let mut encoder = snap::raw::Encoder::new();
    for chunk in data.chunks(XERIAL_BLOCK_BYTES) {
        let block = encoder
            .compress_vec(chunk)
            .expect("a 32 KiB block is below snappy's input limit");
        out.extend_from_slice(&(block.len() as i32).to_be_bytes());
        out.extend_from_slice(&block);
    }
    out
}

/// One raw snappy block (no framing), as librdkafka may send it. For tests and tools.
pub fn snappy_raw_compress(data: &[u8]) -> Vec<u8> {
    snap::raw::Encoder::new()
        .compress_vec(data)
        .expect("input below snappy's 4 GiB limit")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that never ends, counting the bytes it hands out.
    struct Endless {
        handed_out: usize,
    }

    impl Read for Endless {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            buf.fill(0);
            self.handed_out += buf.len();
            Ok(buf.len())
        }
    }

    #[test]
    fn bounded_read_stops_an_endless_stream_at_the_limit() {
        let mut r = Endless { handed_out: 0 };
        let mut out = Vec::new();
        let limit = 100_000;
        assert!(matches!(
            read_bounded(&mut r, &mut out, limit),
            Err(Bounded::TooLarge)
        ));
        assert!(out.capacity() <= limit, "capacity {}", out.capacity());
        assert!(r.handed_out <= limit + READ_CHUNK_BYTES);
    }

    #[test]
    fn bounded_read_accepts_exactly_the_limit() {
        let data = vec![7u8; 50_000];
        let mut out = Vec::new();
        assert!(read_bounded(&mut &data[..], &mut out, 50_000).is_ok());
        assert_eq!(out, data);
        let mut out = Vec::new();
        assert!(read_bounded(&mut &data[..], &mut out, 49_999).is_err());
    }

    /// A raw snappy block is a varint of the output length, then elements.
    fn raw_snappy_declaring(len: u64) -> Vec<u8> {
        let mut out = Vec::new();
        let mut v = len;
        while v >= 0x80 {
            out.push(v as u8 | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
        out.extend_from_slice(&[0x00, b'x']); // a 1-byte literal
        out
    }

    #[test]
    fn a_snappy_length_beyond_what_the_block_holds_is_refused_before_allocating() {
        let e = decompress(
            CompressionType::Snappy,
            &raw_snappy_declaring(60 << 20),
            MAX_DECOMPRESSED_BYTES,
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("declares 62914560 bytes of output"),
            "{e}"
        );
        let e = decompress(
            CompressionType::Snappy,
            &raw_snappy_declaring(100 << 20),
            MAX_DECOMPRESSED_BYTES,
        )
        .unwrap_err();
        assert!(matches!(e, CompressionError::TooLarge { .. }), "{e}");
        assert_eq!(
            decompress(CompressionType::Snappy, &raw_snappy_declaring(1), 10),
            Ok(b"x".to_vec())
        );
    }

    #[test]
    fn codec_ids_and_names() {
        for (id, c) in CompressionType::ALL.into_iter().enumerate() {
            assert_eq!(c.id() as usize, id);
            assert_eq!(CompressionType::from_attributes(id as i16 | 0x18), Ok(c));
            assert_eq!(c.name().parse::<CompressionType>(), Ok(c));
        }
        for id in 5..=7 {
            let e = CompressionType::from_attributes(id).unwrap_err();
            assert_eq!(e, CompressionError::UnknownCodec(id));
            assert!(e.to_string().contains(&format!("codec id {id}")), "{e}");
        }
        assert!("brotli".parse::<CompressionType>().is_err());
    }
}
