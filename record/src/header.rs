//! The fixed 61-byte batch header (layout in the crate doc): parsing with bounds checks, and
//! the offset and sequence arithmetic derived from it.

use crate::*;

pub(crate) fn be_i16(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}
pub(crate) fn be_i32(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
pub(crate) fn be_u32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
pub(crate) fn be_i64(b: &[u8], at: usize) -> i64 {
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

    /// The delete horizon of a batch the log cleaner rewrote while it held tombstones
    /// (KIP-534): its base timestamp when [`DELETE_HORIZON_BIT`] is set, else `None`.
    /// Tombstones in the batch may be removed once the clock passes it.
    pub fn delete_horizon_ms(&self) -> Option<i64> {
        (self.attributes & DELETE_HORIZON_BIT != 0).then_some(self.first_timestamp)
    }

    /// Whether the batch's timestamp type is LogAppendTime ([`TIMESTAMP_TYPE_BIT`]): its max
    /// timestamp, the leader's clock at the append, is then every record's timestamp.
    pub fn is_log_append_time(&self) -> bool {
        self.attributes & TIMESTAMP_TYPE_BIT != 0
    }

    /// The timestamp of a record of this batch with `timestamp_delta` (ms): the batch's max
    /// timestamp for LogAppendTime, else the base timestamp plus the delta, wrapping (Kafka
    /// `DefaultRecordBatch`, which hands records `logAppendTime` when the type says so).
    pub fn record_timestamp(&self, timestamp_delta: i64) -> i64 {
        if self.is_log_append_time() {
            self.max_timestamp
        } else {
            self.first_timestamp.wrapping_add(timestamp_delta)
        }
    }

    /// Compression codec bits (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd; 5-7 undefined): see
    /// [`crate::CompressionType::from_attributes`].
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
