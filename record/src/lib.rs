//! `keel-record`: the record batch wire and disk format (Kafka message format v2, `DefaultRecordBatch` /
//! `DefaultRecord`, KIP-98). The same bytes travel in produce and fetch requests and sit in
//! segment files, so a fetch is a plain byte-range copy.
//!
//! Batch header, big-endian, 61 bytes:
//!
//! | pos | field | type |
//! |----:|-------|------|
//! |  0 | base offset | i64 |
//! |  8 | batch length (bytes after this field) | i32 |
//! | 12 | partition leader epoch | i32 |
//! | 16 | magic (= 2) | i8 |
//! | 17 | CRC32C of bytes 21..end | u32 |
//! | 21 | attributes (bits 0-2 codec, 3 timestamp type, 4 transactional, 5 control) | i16 |
//! | 23 | last offset delta | i32 |
//! | 27 | first timestamp (ms) | i64 |
//! | 35 | max timestamp (ms) | i64 |
//! | 43 | producer id (-1 = none) | i64 |
//! | 51 | producer epoch (-1 = none) | i16 |
//! | 53 | base sequence (-1 = none) | i32 |
//! | 57 | record count | i32 |
//! | 61 | records | |
//!
//! The CRC does not cover the base offset nor the partition leader epoch, so the leader can
//! assign both without recomputing it (as Kafka does). Each record is: length (varint),
//! attributes (i8), timestamp delta (varlong), offset delta (varint), key length (varint, -1 =
//! null) + key, value length + value, header count (varint), then per header key length + key
//! and value length + value. Varints are zig-zag LEB128 like Kafka's `ByteUtils`.
//!
//! Invariant of [`RecordBatch`]: its buffer holds exactly one batch whose length field matches
//! the buffer length and whose header parsed (or, from [`RecordBatchBuilder::build`], was
//! written from the same fields, which may be out of range); CRC and records are checked on demand
//! ([`RecordBatch::validate`]). Every decoder here checks bounds before reading and returns
//! [`CorruptBatch`] naming the byte position and base offset instead of panicking.
//!
//! Shared by the broker (segment files, produce and fetch), Keel's own client (producer and
//! consumer) and the Kafka listener: one implementation of build and parse (DESIGN §1).
//! Depends on nothing of Keel's. Modules: [`header`] (the 61-byte header), [`batch`] (one
//! batch over shared bytes, splitting concatenated batches), [`records`] (decoding records),
//! [`builder`] (writing a batch as a producer does), [`compression`] (the codecs of
//! attribute bits 0-2 and the bound on decompressed bytes), [`fuzz`] (entry points of the
//! fuzz targets and their proptest versions).
//!
//! A compressed batch (codec bits 1-4) keeps the 61-byte header uncompressed and holds the
//! records section, compressed as one stream, after it; the CRC covers the compressed bytes
//! as stored. The broker validates it by decompressing (bounded by
//! [`MAX_DECOMPRESSED_BYTES`]) but stores and serves it as sent; readers
//! ([`RecordBatch::records`]) decompress transparently.

use std::borrow::Cow;

pub mod batch;
pub mod builder;
pub mod compression;
pub mod fuzz;
pub mod header;
pub mod records;
mod varint;

pub use batch::{BatchIter, RecordBatch, stamped_prefix};
pub use builder::RecordBatchBuilder;
pub use compression::{CompressionError, CompressionType, MAX_DECOMPRESSED_BYTES};
pub use header::{BatchHeader, increment_sequence};
pub use records::{Record, RecordHeader, RecordIter};

/// Size of the fixed batch header in bytes.
pub const HEADER_SIZE: usize = 61;
/// Bytes before the batch-length field's coverage starts: base offset (8) + length (4).
pub const LOG_OVERHEAD: usize = 12;
/// The only supported magic value.
pub const MAGIC_V2: i8 = 2;
/// Producer id of a non-idempotent batch (Kafka `RecordBatch.NO_PRODUCER_ID`).
pub const NO_PRODUCER_ID: i64 = -1;
/// Producer epoch of a non-idempotent batch (`RecordBatch.NO_PRODUCER_EPOCH`).
pub const NO_PRODUCER_EPOCH: i16 = -1;
/// Sequence of a non-idempotent batch (`RecordBatch.NO_SEQUENCE`).
pub const NO_SEQUENCE: i32 = -1;
/// Partition leader epoch of a batch not yet stamped by a leader.
pub const NO_PARTITION_LEADER_EPOCH: i32 = -1;
/// Timestamp meaning "none" (`RecordBatch.NO_TIMESTAMP`).
pub const NO_TIMESTAMP: i64 = -1;
/// Largest log end offset (exclusive end) a log may reach, and so the bound of every offset
/// in a batch: [`BatchHeader::parse`] rejects a batch whose last offset is not below it, the
/// log rejects start offsets above it and appends that would pass it, and segment file names
/// above it are not segments. The headroom (2^32) below `i64::MAX` keeps `offset + 1`, a
/// batch's `base + last_offset_delta` and a segment's relative offsets free of overflow. Kafka
/// has no explicit bound; no real log gets near it.
pub const MAX_LOG_END_OFFSET: i64 = i64::MAX - (1 << 32);

pub(crate) const LENGTH_POS: usize = 8;
pub(crate) const PARTITION_LEADER_EPOCH_POS: usize = 12;
pub(crate) const MAGIC_POS: usize = 16;
pub(crate) const CRC_POS: usize = 17;
pub(crate) const ATTRIBUTES_POS: usize = 21;
pub(crate) const LAST_OFFSET_DELTA_POS: usize = 23;
pub(crate) const FIRST_TIMESTAMP_POS: usize = 27;
pub(crate) const MAX_TIMESTAMP_POS: usize = 35;
pub(crate) const PRODUCER_ID_POS: usize = 43;
pub(crate) const PRODUCER_EPOCH_POS: usize = 51;
pub(crate) const BASE_SEQUENCE_POS: usize = 53;
pub(crate) const RECORD_COUNT_POS: usize = 57;

/// Mask of the compression codec bits in the attributes ([`CompressionType`]).
pub const COMPRESSION_CODEC_MASK: i16 = 0x07;
/// Attribute bit: timestamps are log-append time.
pub const TIMESTAMP_TYPE_BIT: i16 = 0x08;
/// Attribute bit: transactional batch (reserved; Keel has no transactions yet).
pub const TRANSACTIONAL_BIT: i16 = 0x10;
/// Attribute bit: control batch (reserved).
pub const CONTROL_BIT: i16 = 0x20;
/// Attribute bit 6: the batch's base timestamp is the delete horizon of its tombstones, set
/// by the log cleaner (KIP-534, Kafka `DefaultRecordBatch.DELETE_HORIZON_FLAG_MASK`). See
/// [`BatchHeader::delete_horizon_ms`] and [`RecordBatch::rebuilt_with`].
pub const DELETE_HORIZON_BIT: i16 = 0x40;

/// A batch or record failed a bounds, structure, CRC or decompression check.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("at byte {position} (batch base offset {base_offset}): {reason}")]
pub struct CorruptBatch {
    /// Byte position of the batch start in the buffer or segment file it was read from.
    pub position: u64,
    /// Base offset of the batch if its header could be read, else -1.
    pub base_offset: i64,
    /// What failed: a fixed text, or one naming the value found (the codec id, the record
    /// index, the decompression bound).
    pub reason: Cow<'static, str>,
    /// The batch's bytes are intact (its CRC matched) but what they say is invalid: a record
    /// count that disagrees with the offsets, an unknown codec, data that does not decompress
    /// or decompresses past the bound, records that do not parse. Kafka answers these
    /// INVALID_RECORD (87, `InvalidRecordException` from `LogValidator`) and a damaged batch
    /// (CRC, framing) CORRUPT_MESSAGE (2).
    pub record_level: bool,
}

impl CorruptBatch {
    pub(crate) fn new(
        position: u64,
        base_offset: i64,
        reason: impl Into<Cow<'static, str>>,
    ) -> Self {
        Self {
            position,
            base_offset,
            reason: reason.into(),
            record_level: false,
        }
    }

    /// The same error marked [`CorruptBatch::record_level`].
    pub fn record_level(mut self) -> Self {
        self.record_level = true;
        self
    }

    /// The same error with the position shifted by `base` (buffer -> file position).
    pub fn at(mut self, base: u64) -> Self {
        self.position += base;
        self
    }
}

#[cfg(test)]
mod tests;
