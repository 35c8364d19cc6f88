//! Writing one batch as a producer does (Kafka `MemoryRecordsBuilder`).

use bytes::{BufMut, BytesMut};

use crate::compression::{self, CompressionType};
use crate::varint::{nullable_size, put_nullable, put_varlong, varlong_size};
use crate::*;

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
    compression: CompressionType,
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
            compression: CompressionType::None,
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

    /// Compresses the records section with `codec` on [`RecordBatchBuilder::build`] (Kafka's
    /// producer `compression.type`); default none. The framing is Kafka's Java producer's
    /// (see [`crate::compression`]).
    pub fn compression(mut self, codec: CompressionType) -> Self {
        self.compression = codec;
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

    /// Bytes the batch would take if built now without compression (an upper bound of a
    /// compressed batch's size but for a few bytes of framing on incompressible data).
    pub fn size_bytes(&self) -> usize {
        self.buf.len()
    }

    /// Compresses the records section (if a codec was set), sets the codec bits and fills the
    /// header and the CRC (over the bytes as stored, compressed ones included, as Kafka's
    /// `DefaultRecordBatch`). An empty builder yields an empty batch (record count 0),
    /// and a base offset outside `[0, MAX_LOG_END_OFFSET)` a batch whose header does not
    /// parse; the log rejects both on append (the builder itself never panics).
    pub fn build(mut self) -> RecordBatch {
        if self.compression != CompressionType::None {
            let packed = compression::compress(self.compression, &self.buf[HEADER_SIZE..]);
            self.buf.truncate(HEADER_SIZE);
            self.buf.extend_from_slice(&packed);
        }
        let attributes = self.compression.id();
        let len = self.buf.len();
        let last_offset_delta = (self.count - 1).max(0);
        let first_timestamp = self.first_timestamp.unwrap_or(NO_TIMESTAMP);
        let h = &mut self.buf[..HEADER_SIZE];
        h[0..8].copy_from_slice(&self.base_offset.to_be_bytes());
        h[8..12].copy_from_slice(&((len - LOG_OVERHEAD) as i32).to_be_bytes());
        h[12..16].copy_from_slice(&self.partition_leader_epoch.to_be_bytes());
        h[16] = MAGIC_V2 as u8;
        h[21..23].copy_from_slice(&attributes.to_be_bytes());
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
            attributes,
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
