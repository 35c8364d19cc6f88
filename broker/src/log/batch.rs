//! Record batch wire and disk format (Kafka message format v2, `DefaultRecordBatch` /
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

use std::ops::Range;

use bytes::{BufMut, Bytes, BytesMut};

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

const LENGTH_POS: usize = 8;
const PARTITION_LEADER_EPOCH_POS: usize = 12;
const MAGIC_POS: usize = 16;
const CRC_POS: usize = 17;
const ATTRIBUTES_POS: usize = 21;
const LAST_OFFSET_DELTA_POS: usize = 23;
const FIRST_TIMESTAMP_POS: usize = 27;
const MAX_TIMESTAMP_POS: usize = 35;
const PRODUCER_ID_POS: usize = 43;
const PRODUCER_EPOCH_POS: usize = 51;
const BASE_SEQUENCE_POS: usize = 53;
const RECORD_COUNT_POS: usize = 57;

/// Mask of the compression codec bits in the attributes.
pub const COMPRESSION_CODEC_MASK: i16 = 0x07;
/// Attribute bit: timestamps are log-append time.
pub const TIMESTAMP_TYPE_BIT: i16 = 0x08;
/// Attribute bit: transactional batch (reserved; Keel has no transactions yet).
pub const TRANSACTIONAL_BIT: i16 = 0x10;
/// Attribute bit: control batch (reserved).
pub const CONTROL_BIT: i16 = 0x20;

/// A batch or record failed a bounds, structure or CRC check.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("at byte {position} (batch base offset {base_offset}): {reason}")]
pub struct CorruptBatch {
    /// Byte position of the batch start in the buffer or segment file it was read from.
    pub position: u64,
    /// Base offset of the batch if its header could be read, else -1.
    pub base_offset: i64,
    /// What failed.
    pub reason: &'static str,
}

impl CorruptBatch {
    fn new(position: u64, base_offset: i64, reason: &'static str) -> Self {
        Self {
            position,
            base_offset,
            reason,
        }
    }

    /// The same error with the position shifted by `base` (buffer -> file position).
    pub fn at(mut self, base: u64) -> Self {
        self.position += base;
        self
    }
}

fn be_i16(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}
fn be_i32(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
fn be_u32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
fn be_i64(b: &[u8], at: usize) -> i64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    i64::from_be_bytes(a)
}

/// The parsed fixed header of a batch. Parsing checks only the header itself; the CRC and
/// the records are checked by [`RecordBatch::validate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    /// Offset of the first record.
    pub base_offset: i64,
    /// Bytes after the length field; the whole batch is `batch_length + 12` bytes.
    pub batch_length: i32,
    /// Leader epoch of the leader that appended the batch.
    pub partition_leader_epoch: i32,
    /// Stored CRC32C.
    pub crc: u32,
    /// Attribute bits (see module doc).
    pub attributes: i16,
    /// Offset of the last record minus the base offset.
    pub last_offset_delta: i32,
    /// Timestamp of the first record (ms).
    pub first_timestamp: i64,
    /// Largest record timestamp (ms).
    pub max_timestamp: i64,
    /// Producer id, or [`NO_PRODUCER_ID`].
    pub producer_id: i64,
    /// Producer epoch, or [`NO_PRODUCER_EPOCH`].
    pub producer_epoch: i16,
    /// Sequence of the first record, or [`NO_SEQUENCE`].
    pub base_sequence: i32,
    /// Number of records.
    pub record_count: i32,
}

impl BatchHeader {
    /// Parses a header from the start of `buf`. `position` is where `buf` starts in the file
    /// (for the error). Checks: 61 bytes present, magic 2, length >= 49, non-negative last
    /// offset delta and record count, base offset non-negative and last offset below
    /// [`MAX_LOG_END_OFFSET`] (so [`BatchHeader::next_offset`] cannot overflow).
    pub fn parse(buf: &[u8], position: u64) -> Result<BatchHeader, CorruptBatch> {
        if buf.len() < LOG_OVERHEAD {
            return Err(CorruptBatch::new(position, -1, "truncated batch header"));
        }
        let base_offset = be_i64(buf, 0);
        if buf.len() < HEADER_SIZE {
            return Err(CorruptBatch::new(
                position,
                base_offset,
                "truncated batch header",
            ));
        }
        let err = |reason| CorruptBatch::new(position, base_offset, reason);
        let header = BatchHeader {
            base_offset,
            batch_length: be_i32(buf, LENGTH_POS),
            partition_leader_epoch: be_i32(buf, PARTITION_LEADER_EPOCH_POS),
            crc: be_u32(buf, CRC_POS),
            attributes: be_i16(buf, ATTRIBUTES_POS),
            last_offset_delta: be_i32(buf, LAST_OFFSET_DELTA_POS),
            first_timestamp: be_i64(buf, FIRST_TIMESTAMP_POS),
            max_timestamp: be_i64(buf, MAX_TIMESTAMP_POS),
            producer_id: be_i64(buf, PRODUCER_ID_POS),
            producer_epoch: be_i16(buf, PRODUCER_EPOCH_POS),
            base_sequence: be_i32(buf, BASE_SEQUENCE_POS),
            record_count: be_i32(buf, RECORD_COUNT_POS),
        };
        if buf[MAGIC_POS] as i8 != MAGIC_V2 {
            return Err(err("unsupported magic (only v2)"));
        }
        if (header.batch_length as i64) < (HEADER_SIZE - LOG_OVERHEAD) as i64 {
            return Err(err("batch length smaller than the header"));
        }
        if header.last_offset_delta < 0 || header.record_count < 0 {
            return Err(err("negative last offset delta or record count"));
        }
        if base_offset < 0
            || base_offset
                .checked_add(header.last_offset_delta as i64)
                .is_none_or(|last| last >= MAX_LOG_END_OFFSET)
        {
            return Err(err(
                "base offset negative or last offset beyond the maximum",
            ));
        }
        Ok(header)
    }

    /// Total size of the batch in bytes (`batch_length + 12`).
    pub fn size_bytes(&self) -> usize {
        self.batch_length as usize + LOG_OVERHEAD
    }

    /// Offset of the last record (inclusive).
    pub fn last_offset(&self) -> i64 {
        self.base_offset + self.last_offset_delta as i64
    }

    /// The offset after the batch (exclusive end).
    pub fn next_offset(&self) -> i64 {
        self.last_offset() + 1
    }

    /// Sequence of the last record, wrapping at `i32::MAX` like Kafka's
    /// `DefaultRecordBatch.incrementSequence`.
    pub fn last_sequence(&self) -> i32 {
        increment_sequence(self.base_sequence, self.last_offset_delta)
    }

    /// Whether the batch carries an idempotent producer id.
    pub fn has_producer_id(&self) -> bool {
        self.producer_id >= 0
    }

    /// Compression codec bits (0 = none; 1..4 reserved for gzip/snappy/lz4/zstd).
    pub fn compression_codec(&self) -> i16 {
        self.attributes & COMPRESSION_CODEC_MASK
    }
}

/// `sequence + increment` wrapping from `i32::MAX` to 0 (Kafka
/// `DefaultRecordBatch.incrementSequence`). A negative sequence (`NO_SEQUENCE`, or garbage a
/// leader rejects separately) or increment is returned unchanged.
pub fn increment_sequence(sequence: i32, increment: i32) -> i32 {
    if sequence < 0 || increment < 0 {
        return sequence;
    }
    if sequence > i32::MAX - increment {
        increment - (i32::MAX - sequence) - 1
    } else {
        sequence + increment
    }
}

/// One record batch over shared bytes (zero copy: slices of one [`Bytes`]). See the module
/// doc for the invariant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordBatch {
    header: BatchHeader,
    data: Bytes,
}

impl RecordBatch {
    /// Wraps `data`, which must hold exactly one batch (length field == buffer length).
    /// Does not check the CRC: call [`RecordBatch::validate`].
    pub fn from_bytes(data: Bytes) -> Result<RecordBatch, CorruptBatch> {
        let header = BatchHeader::parse(&data, 0)?;
        if header.size_bytes() != data.len() {
            return Err(CorruptBatch::new(
                0,
                header.base_offset,
                "batch length does not match the buffer",
            ));
        }
        Ok(RecordBatch { header, data })
    }

    /// The parsed header.
    pub fn header(&self) -> &BatchHeader {
        &self.header
    }

    /// Base offset (first record's offset).
    pub fn base_offset(&self) -> i64 {
        self.header.base_offset
    }

    /// Last offset (inclusive).
    pub fn last_offset(&self) -> i64 {
        self.header.last_offset()
    }

    /// Whole batch size in bytes.
    pub fn size_bytes(&self) -> usize {
        self.data.len()
    }

    /// The batch bytes.
    pub fn as_bytes(&self) -> &Bytes {
        &self.data
    }

    /// Consumes the view, returning its bytes.
    pub fn into_bytes(self) -> Bytes {
        self.data
    }

    /// CRC32C of bytes 21..end as computed now.
    pub fn compute_crc(&self) -> u32 {
        crc32c::crc32c(&self.data[ATTRIBUTES_POS..])
    }

    /// Whether the stored CRC matches the contents.
    pub fn is_crc_valid(&self) -> bool {
        self.compute_crc() == self.header.crc
    }

    /// Full check as Kafka's leader does before appending (`DefaultRecordBatch.ensureValid` +
    /// `LogValidator`): CRC, at least one record, `record_count == last_offset_delta + 1`, no
    /// compression (codec bits reserved), and every record parses with offset deltas
    /// 0..count-1 and ends exactly at the batch end.
    pub fn validate(&self) -> Result<(), CorruptBatch> {
        self.validate_with_timestamp_deltas().map(|_| ())
    }

    /// [`RecordBatch::validate`], also returning the smallest and largest record timestamp
    /// delta found by the same walk over the records (the leader derives the record
    /// timestamps from them instead of trusting the header's max timestamp).
    pub fn validate_with_timestamp_deltas(&self) -> Result<(i64, i64), CorruptBatch> {
        let err = |reason| CorruptBatch::new(0, self.base_offset(), reason);
        if !self.is_crc_valid() {
            return Err(err("CRC32C mismatch"));
        }
        let h = &self.header;
        if h.record_count == 0 || h.record_count as i64 != h.last_offset_delta as i64 + 1 {
            return Err(err("record count does not match last offset delta"));
        }
        if h.compression_codec() != 0 {
            return Err(err("compressed batches are not supported yet"));
        }
        check_records(&self.data[HEADER_SIZE..], h.record_count).map_err(err)
    }

    /// Iterates the records. Stops after `record_count` records; yields an error (and then
    /// stops) at the first malformed record or if bytes remain after the last record.
    pub fn records(&self) -> RecordIter {
        RecordIter {
            data: self.data.slice(HEADER_SIZE..),
            pos: 0,
            remaining: self.header.record_count.max(0) as u32,
            base_offset: self.header.base_offset,
            failed: false,
        }
    }

    /// Returns a copy of the batch bytes with a new base offset and partition leader epoch
    /// (fields not covered by the CRC). Used by tests and tools; the log writes the stamped
    /// header without copying the body.
    pub fn with_offset_and_epoch(&self, base_offset: i64, leader_epoch: i32) -> RecordBatch {
        let mut buf = BytesMut::from(&self.data[..]);
        buf[0..8].copy_from_slice(&base_offset.to_be_bytes());
        buf[PARTITION_LEADER_EPOCH_POS..PARTITION_LEADER_EPOCH_POS + 4]
            .copy_from_slice(&leader_epoch.to_be_bytes());
        let mut header = self.header;
        header.base_offset = base_offset;
        header.partition_leader_epoch = leader_epoch;
        RecordBatch {
            header,
            data: buf.freeze(),
        }
    }
}

/// The first 16 header bytes (base offset, length, partition leader epoch) with a new base
/// offset and epoch, to be written in front of `batch[16..]`.
pub(crate) fn stamped_prefix(batch: &[u8], base_offset: i64, leader_epoch: i32) -> [u8; 16] {
    let mut p = [0u8; 16];
    p.copy_from_slice(&batch[..16]);
    p[0..8].copy_from_slice(&base_offset.to_be_bytes());
    p[12..16].copy_from_slice(&leader_epoch.to_be_bytes());
    p
}

/// Splits concatenated batches (a fetch response, a follower append, a segment slice).
/// Yields an error and stops at the first batch whose header or length is invalid or
/// truncated. Does not check CRCs.
#[derive(Debug)]
pub struct BatchIter {
    data: Bytes,
    pos: usize,
    failed: bool,
}

impl BatchIter {
    /// Iterates the batches in `data`.
    pub fn new(data: Bytes) -> Self {
        Self {
            data,
            pos: 0,
            failed: false,
        }
    }
}

impl Iterator for BatchIter {
    type Item = Result<RecordBatch, CorruptBatch>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.pos >= self.data.len() {
            return None;
        }
        let rest = &self.data[self.pos..];
        let header = match BatchHeader::parse(rest, self.pos as u64) {
            Ok(h) => h,
            Err(e) => {
                self.failed = true;
                return Some(Err(e));
            }
        };
        if header.size_bytes() > rest.len() {
            self.failed = true;
            return Some(Err(CorruptBatch::new(
                self.pos as u64,
                header.base_offset,
                "batch truncated",
            )));
        }
        let data = self.data.slice(self.pos..self.pos + header.size_bytes());
        self.pos += header.size_bytes();
        Some(Ok(RecordBatch { header, data }))
    }
}

/// One header of a record: key (UTF-8 by convention, not checked) and optional value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordHeader {
    /// Header key bytes.
    pub key: Bytes,
    /// Header value, `None` = null.
    pub value: Option<Bytes>,
}

/// One decoded record; key, value and header fields are slices of the batch buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Record attributes (unused, 0).
    pub attributes: i8,
    /// Timestamp minus the batch's first timestamp (ms).
    pub timestamp_delta: i64,
    /// Offset minus the batch's base offset.
    pub offset_delta: i32,
    /// Key, `None` = null.
    pub key: Option<Bytes>,
    /// Value, `None` = null (a tombstone).
    pub value: Option<Bytes>,
    /// Headers in order.
    pub headers: Vec<RecordHeader>,
}

/// Iterator over the records of a batch; see [`RecordBatch::records`].
#[derive(Debug)]
pub struct RecordIter {
    data: Bytes,
    pos: usize,
    remaining: u32,
    base_offset: i64,
    failed: bool,
}

/// Cursor over a record's bytes with bounds-checked reads.
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
    end: usize,
}

impl Cursor<'_> {
    fn varlong(&mut self) -> Option<i64> {
        let mut value: u64 = 0;
        // A varlong is at most 10 bytes: the bound of this loop.
        for i in 0..10 {
            if self.pos >= self.end {
                return None;
            }
            let b = self.buf[self.pos];
            self.pos += 1;
            value |= ((b & 0x7f) as u64) << (7 * i);
            if b & 0x80 == 0 {
                return Some(((value >> 1) as i64) ^ -((value & 1) as i64));
            }
        }
        None
    }

    fn varint(&mut self) -> Option<i32> {
        let v = self.varlong()?;
        i32::try_from(v).ok()
    }

    fn byte(&mut self) -> Option<i8> {
        if self.pos >= self.end {
            return None;
        }
        self.pos += 1;
        Some(self.buf[self.pos - 1] as i8)
    }

    /// Length-prefixed bytes as a range of `buf`; `Some(None)` = null (-1).
    fn nullable_range(&mut self) -> Option<Option<Range<usize>>> {
        let len = self.varint()?;
        if len == -1 {
            return Some(None);
        }
        let len = usize::try_from(len).ok()?;
        if len > self.end - self.pos {
            return None;
        }
        self.pos += len;
        Some(Some(self.pos - len..self.pos))
    }
}

/// Layout of one record as ranges of the records buffer (no copies, no refcounts).
struct RawRecord {
    attributes: i8,
    timestamp_delta: i64,
    offset_delta: i32,
    key: Option<Range<usize>>,
    value: Option<Range<usize>>,
    /// Position just after the record.
    end: usize,
}

/// Parses the record at `pos` of `buf` (the bytes after the batch header), calling
/// `on_header` for each header. Every read is bounds-checked against the record length.
fn parse_record(
    buf: &[u8],
    pos: usize,
    mut on_header: impl FnMut(Range<usize>, Option<Range<usize>>),
) -> Result<RawRecord, &'static str> {
    let mut c = Cursor {
        buf,
        pos,
        end: buf.len(),
    };
    let len = c.varint().ok_or("truncated record length")?;
    let len = usize::try_from(len).map_err(|_| "negative record length")?;
    if len > c.end - c.pos {
        return Err("record length beyond batch end");
    }
    let end = c.pos + len;
    let mut c = Cursor {
        buf,
        pos: c.pos,
        end,
    };
    const MALFORMED: &str = "malformed record";
    let attributes = c.byte().ok_or(MALFORMED)?;
    let timestamp_delta = c.varlong().ok_or(MALFORMED)?;
    let offset_delta = c.varint().ok_or(MALFORMED)?;
    let key = c.nullable_range().ok_or(MALFORMED)?;
    let value = c.nullable_range().ok_or(MALFORMED)?;
    let header_count = c.varint().ok_or(MALFORMED)?;
    let header_count = usize::try_from(header_count).map_err(|_| MALFORMED)?;
    // Each header takes at least 2 bytes: bounds the loop.
    if header_count > (end - c.pos) / 2 {
        return Err(MALFORMED);
    }
    for _ in 0..header_count {
        let key = c.nullable_range().ok_or(MALFORMED)?.ok_or(MALFORMED)?;
        let value = c.nullable_range().ok_or(MALFORMED)?;
        on_header(key, value);
    }
    if c.pos != end {
        return Err("record length does not match its fields");
    }
    Ok(RawRecord {
        attributes,
        timestamp_delta,
        offset_delta,
        key,
        value,
        end,
    })
}

/// Walks the records of `records` (the bytes after a batch header) without decoding them
/// into values: checks each parses, that offset deltas are 0..count-1, and that the last
/// record ends exactly at the end. Returns the smallest and largest timestamp delta, or the
/// reason of the first failure. `count` must be >= 1.
fn check_records(records: &[u8], count: i32) -> Result<(i64, i64), &'static str> {
    let mut pos = 0;
    let (mut min_delta, mut max_delta) = (i64::MAX, i64::MIN);
    // Bounded by `count`, which the caller checked against the batch header.
    for expected_delta in 0..count {
        let r = parse_record(records, pos, |_, _| {})?;
        if r.offset_delta != expected_delta {
            return Err("record offset deltas are not 0..count-1");
        }
        min_delta = min_delta.min(r.timestamp_delta);
        max_delta = max_delta.max(r.timestamp_delta);
        pos = r.end;
    }
    if pos != records.len() {
        return Err("bytes left after the last record");
    }
    Ok((min_delta, max_delta))
}

impl RecordIter {
    fn decode(&mut self) -> Result<Record, CorruptBatch> {
        let data = &self.data;
        let mut headers = Vec::new();
        let raw = parse_record(data, self.pos, |key, value| {
            headers.push(RecordHeader {
                key: data.slice(key),
                value: value.map(|v| data.slice(v)),
            });
        })
        .map_err(|reason| CorruptBatch::new(0, self.base_offset, reason))?;
        self.pos = raw.end;
        Ok(Record {
            attributes: raw.attributes,
            timestamp_delta: raw.timestamp_delta,
            offset_delta: raw.offset_delta,
            key: raw.key.map(|r| data.slice(r)),
            value: raw.value.map(|r| data.slice(r)),
            headers,
        })
    }
}

impl Iterator for RecordIter {
    type Item = Result<Record, CorruptBatch>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        if self.remaining == 0 {
            if self.pos != self.data.len() {
                self.failed = true;
                return Some(Err(CorruptBatch::new(
                    0,
                    self.base_offset,
                    "bytes left after the last record",
                )));
            }
            return None;
        }
        self.remaining -= 1;
        let r = self.decode();
        if r.is_err() {
            self.failed = true;
        }
        Some(r)
    }
}

fn varlong_size(v: i64) -> usize {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    let mut n = 1;
    // At most 10 iterations: z shrinks by 7 bits each time.
    while z >= 0x80 {
        z >>= 7;
        n += 1;
    }
    n
}

fn put_varlong(buf: &mut BytesMut, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    // At most 10 iterations: z shrinks by 7 bits each time.
    while z >= 0x80 {
        buf.put_u8((z as u8 & 0x7f) | 0x80);
        z >>= 7;
    }
    buf.put_u8(z as u8);
}

fn nullable_size(b: Option<&[u8]>) -> usize {
    match b {
        None => varlong_size(-1),
        Some(b) => varlong_size(b.len() as i64) + b.len(),
    }
}

fn put_nullable(buf: &mut BytesMut, b: Option<&[u8]>) {
    match b {
        None => put_varlong(buf, -1),
        Some(b) => {
            put_varlong(buf, b.len() as i64);
            buf.put_slice(b);
        }
    }
}

/// Builds one batch, as a producer does (Kafka `MemoryRecordsBuilder`). The base offset is
/// usually 0: the leader assigns the real one on append.
#[derive(Debug)]
pub struct RecordBatchBuilder {
    buf: BytesMut,
    base_offset: i64,
    partition_leader_epoch: i32,
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
    first_timestamp: Option<i64>,
    max_timestamp: i64,
    /// Invariant: equals the number of records written after the header.
    count: i32,
}

impl RecordBatchBuilder {
    /// A builder for a non-idempotent batch at `base_offset`.
    pub fn new(base_offset: i64) -> Self {
        let mut buf = BytesMut::with_capacity(1024);
        buf.put_bytes(0, HEADER_SIZE);
        Self {
            buf,
            base_offset,
            partition_leader_epoch: NO_PARTITION_LEADER_EPOCH,
            producer_id: NO_PRODUCER_ID,
            producer_epoch: NO_PRODUCER_EPOCH,
            base_sequence: NO_SEQUENCE,
            first_timestamp: None,
            max_timestamp: NO_TIMESTAMP,
            count: 0,
        }
    }

    /// Reserves capacity for `bytes` more bytes.
    pub fn with_capacity(mut self, bytes: usize) -> Self {
        self.buf.reserve(bytes);
        self
    }

    /// Marks the batch idempotent: producer id, epoch and the sequence of its first record.
    pub fn producer(mut self, producer_id: i64, producer_epoch: i16, base_sequence: i32) -> Self {
        self.producer_id = producer_id;
        self.producer_epoch = producer_epoch;
        self.base_sequence = base_sequence;
        self
    }

    /// Sets the partition leader epoch (followers receive it stamped by the leader).
    pub fn partition_leader_epoch(mut self, epoch: i32) -> Self {
        self.partition_leader_epoch = epoch;
        self
    }

    /// Appends one record with timestamp `timestamp_ms`. `headers` are (key, value) pairs.
    pub fn append(
        &mut self,
        timestamp_ms: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[(&[u8], Option<&[u8]>)],
    ) {
        let first = *self.first_timestamp.get_or_insert(timestamp_ms);
        self.max_timestamp = self.max_timestamp.max(timestamp_ms);
        // Wrapping: the decoder adds it back with wrapping, so any i64 timestamp round-trips.
        let ts_delta = timestamp_ms.wrapping_sub(first);
        let offset_delta = self.count as i64;
        let mut body = 1 + varlong_size(ts_delta) + varlong_size(offset_delta);
        body += nullable_size(key) + nullable_size(value) + varlong_size(headers.len() as i64);
        for (k, v) in headers {
            body += nullable_size(Some(k)) + nullable_size(*v);
        }
        self.buf.reserve(body + 5);
        put_varlong(&mut self.buf, body as i64);
        let start = self.buf.len();
        self.buf.put_i8(0);
        put_varlong(&mut self.buf, ts_delta);
        put_varlong(&mut self.buf, offset_delta);
        put_nullable(&mut self.buf, key);
        put_nullable(&mut self.buf, value);
        put_varlong(&mut self.buf, headers.len() as i64);
        for (k, v) in headers {
            put_nullable(&mut self.buf, Some(k));
            put_nullable(&mut self.buf, *v);
        }
        debug_assert_eq!(self.buf.len() - start, body);
        self.count += 1;
    }

    /// Number of records so far.
    pub fn record_count(&self) -> i32 {
        self.count
    }

    /// Bytes the batch would take if built now.
    pub fn size_bytes(&self) -> usize {
        self.buf.len()
    }

    /// Fills the header and CRC. An empty builder yields an empty batch (record count 0),
    /// and a base offset outside `[0, MAX_LOG_END_OFFSET)` a batch whose header does not
    /// parse; the log rejects both on append (the builder itself never panics).
    pub fn build(mut self) -> RecordBatch {
        let len = self.buf.len();
        let last_offset_delta = (self.count - 1).max(0);
        let first_timestamp = self.first_timestamp.unwrap_or(NO_TIMESTAMP);
        let h = &mut self.buf[..HEADER_SIZE];
        h[0..8].copy_from_slice(&self.base_offset.to_be_bytes());
        h[8..12].copy_from_slice(&((len - LOG_OVERHEAD) as i32).to_be_bytes());
        h[12..16].copy_from_slice(&self.partition_leader_epoch.to_be_bytes());
        h[16] = MAGIC_V2 as u8;
        h[21..23].copy_from_slice(&0i16.to_be_bytes());
        h[23..27].copy_from_slice(&last_offset_delta.to_be_bytes());
        h[27..35].copy_from_slice(&first_timestamp.to_be_bytes());
        h[35..43].copy_from_slice(&self.max_timestamp.to_be_bytes());
        h[43..51].copy_from_slice(&self.producer_id.to_be_bytes());
        h[51..53].copy_from_slice(&self.producer_epoch.to_be_bytes());
        h[53..57].copy_from_slice(&self.base_sequence.to_be_bytes());
        h[57..61].copy_from_slice(&self.count.to_be_bytes());
        let crc = crc32c::crc32c(&self.buf[ATTRIBUTES_POS..]);
        self.buf[CRC_POS..CRC_POS + 4].copy_from_slice(&crc.to_be_bytes());
        let header = BatchHeader {
            base_offset: self.base_offset,
            batch_length: (len - LOG_OVERHEAD) as i32,
            partition_leader_epoch: self.partition_leader_epoch,
            crc,
            attributes: 0,
            last_offset_delta,
            first_timestamp,
            max_timestamp: self.max_timestamp,
            producer_id: self.producer_id,
            producer_epoch: self.producer_epoch,
            base_sequence: self.base_sequence,
            record_count: self.count,
        };
        let data = self.buf.freeze();
        if cfg!(debug_assertions)
            && let Ok(parsed) = BatchHeader::parse(&data, 0)
        {
            debug_assert_eq!(parsed, header, "builder header round-trips");
        }
        RecordBatch { header, data }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
}
