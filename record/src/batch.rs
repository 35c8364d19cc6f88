//! One batch over shared bytes ([`RecordBatch`]: CRC, decompression and record checks as
//! Kafka's leader makes them) and the splitter of concatenated batches ([`BatchIter`]).

use bytes::{Bytes, BytesMut};

use crate::compression::{self, CompressionType, MAX_DECOMPRESSED_BYTES};
use crate::records::{Record, RecordIter, check_records};
use crate::*;

/// One record batch over shared bytes (zero copy: slices of one [`Bytes`]). See the module
/// doc for the invariant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordBatch {
    pub(crate) header: BatchHeader,
    pub(crate) data: Bytes,
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

    /// The codec of attribute bits 0-2; 5-7 are an error naming the id.
    pub fn compression(&self) -> Result<CompressionType, CorruptBatch> {
        CompressionType::from_attributes(self.header.attributes)
            .map_err(|e| CorruptBatch::new(0, self.base_offset(), e.to_string()))
    }

    /// The records section: the bytes after the header, decompressed (at most `limit_bytes`
    /// of output, else an error naming the bound) when the batch is compressed. Zero copy for
    /// an uncompressed batch. Does not check the CRC nor the records.
    pub fn records_section(&self, limit_bytes: usize) -> Result<Bytes, CorruptBatch> {
        let codec = self.compression()?;
        let stored = self.data.slice(HEADER_SIZE..);
        if codec == CompressionType::None {
            return Ok(stored);
        }
        compression::decompress(codec, &stored, limit_bytes)
            .map(Bytes::from)
            .map_err(|e| CorruptBatch::new(0, self.base_offset(), e.to_string()))
    }

    /// Full check as Kafka's leader does before appending (`DefaultRecordBatch.ensureValid` +
    /// `LogValidator`): CRC over the bytes as stored (compressed or not), at least one
    /// record, `record_count == last_offset_delta + 1`, a known codec (0-4), the records
    /// section decompressed within [`MAX_DECOMPRESSED_BYTES`], and every record parses with
    /// offset deltas 0..count-1 and ends exactly at the end of the (decompressed) section.
    /// The batch itself is not changed: the log stores it as sent.
    pub fn validate(&self) -> Result<(), CorruptBatch> {
        self.validate_with_timestamp_deltas().map(|_| ())
    }

    /// [`RecordBatch::validate`], also returning the smallest and largest record timestamp
    /// delta found by the same walk over the records (the leader derives the record
    /// timestamps from them instead of trusting the header's max timestamp).
    pub fn validate_with_timestamp_deltas(&self) -> Result<(i64, i64), CorruptBatch> {
        self.checked_records_section(MAX_DECOMPRESSED_BYTES)
            .map(|(_, deltas)| deltas)
    }

    /// [`RecordBatch::validate`], then an iterator over the records it checked (a compressed
    /// batch is decompressed once, not again for the iteration).
    pub fn validated_records(&self) -> Result<RecordIter, CorruptBatch> {
        let (data, _) = self.checked_records_section(MAX_DECOMPRESSED_BYTES)?;
        Ok(self.iter_over(data, None))
    }

    /// The checks of [`RecordBatch::validate`] with the decompression bound `limit_bytes`;
    /// returns the (decompressed) records section and the timestamp delta range.
    pub fn checked_records_section(
        &self,
        limit_bytes: usize,
    ) -> Result<(Bytes, (i64, i64)), CorruptBatch> {
        let err = |reason: String| CorruptBatch::new(0, self.base_offset(), reason);
        if !self.is_crc_valid() {
            return Err(err("CRC32C mismatch".into()));
        }
        // From here the bytes are intact: what fails is what they say (record level).
        let h = &self.header;
        if h.record_count == 0 || h.record_count as i64 != h.last_offset_delta as i64 + 1 {
            return Err(err(format!(
                "record count {} does not match last offset delta {}",
                h.record_count, h.last_offset_delta
            ))
            .record_level());
        }
        let data = self
            .records_section(limit_bytes)
            .map_err(CorruptBatch::record_level)?;
        let deltas = check_records(&data, h.record_count).map_err(|e| err(e).record_level())?;
        Ok((data, deltas))
    }

    /// The check a follower applies to a replicated batch (Kafka `DefaultRecordBatch.ensureValid`
    /// plus a walk over the records): like [`RecordBatch::validate`] except that the records may
    /// have gaps, as in a batch the log cleaner rewrote (Kafka `MemoryRecords.filterTo` keeps
    /// the base offset and last offset delta of a v2 batch): `record_count <=
    /// last_offset_delta + 1`, offset deltas strictly increasing within `0..=last_offset_delta`,
    /// and a batch with no records (kept to preserve a producer's last sequence) has an empty
    /// records section.
    pub fn validate_replicated(&self) -> Result<(), CorruptBatch> {
        self.checked_replicated_section().map(|_| ())
    }

    /// [`RecordBatch::validate_replicated`], then an iterator over the records it checked
    /// (what a consumer reading a possibly compacted log uses; a compressed batch is
    /// decompressed once).
    pub fn validated_replicated_records(&self) -> Result<RecordIter, CorruptBatch> {
        let data = self.checked_replicated_section()?;
        Ok(self.iter_over(data, None))
    }

    fn checked_replicated_section(&self) -> Result<Bytes, CorruptBatch> {
        let err = |reason: String| CorruptBatch::new(0, self.base_offset(), reason);
        if !self.is_crc_valid() {
            return Err(err("CRC32C mismatch".into()));
        }
        let h = &self.header;
        if h.record_count as i64 > h.last_offset_delta as i64 + 1 {
            return Err(err(format!(
                "record count {} exceeds last offset delta {} + 1",
                h.record_count, h.last_offset_delta
            ))
            .record_level());
        }
        if h.record_count == 0 {
            if self.data.len() != HEADER_SIZE {
                return Err(err("an empty batch carries a records section".into()).record_level());
            }
            return Ok(Bytes::new());
        }
        let data = self
            .records_section(MAX_DECOMPRESSED_BYTES)
            .map_err(CorruptBatch::record_level)?;
        crate::records::check_records_with(&data, h.record_count, Some(h.last_offset_delta))
            .map_err(|e| err(e).record_level())?;
        Ok(data)
    }

    /// A copy of this batch holding only `records` (decoded from it, in order), as the log
    /// cleaner writes it (Kafka `MemoryRecords.filterTo`): base offset, last offset delta,
    /// partition leader epoch, producer id, epoch and base sequence, codec and the other
    /// attribute bits are kept, so follower fetches, producer state and sequence checks see
    /// the same batch boundaries; record count, max timestamp (over `records`, the old one if
    /// none) and the CRC are recomputed. With `delete_horizon_ms` the batch's base timestamp
    /// becomes the delete horizon and [`DELETE_HORIZON_BIT`] is set (KIP-534); record
    /// timestamps are re-encoded relative to the new base so each record keeps its own
    /// timestamp. An empty `records` gives a header-only batch with no codec (Kafka
    /// `DefaultRecordBatch.writeEmptyHeader`), which keeps a producer's last sequence.
    pub fn rebuilt_with(&self, records: &[Record], delete_horizon_ms: Option<i64>) -> RecordBatch {
        let codec = CompressionType::from_attributes(self.header.attributes)
            .unwrap_or(CompressionType::None);
        self.rebuild(records, delete_horizon_ms, codec)
    }

    /// A copy of this batch with its records stored with `codec` (Kafka `LogValidator`
    /// recompressing to the topic's `compression.type`): the records are decoded (bounded by
    /// [`MAX_DECOMPRESSED_BYTES`]) and written again as they were (same offset and timestamp
    /// deltas, keys, values, headers), then compressed with `codec`; the header keeps every
    /// field but the codec bits, the length and the CRC (base offset, producer id, epoch and
    /// base sequence, record count, timestamps). The same batch when it already has `codec`.
    ///
    /// Errors: the records do not decode ([`CorruptBatch`]).
    pub fn recompressed(&self, codec: CompressionType) -> Result<RecordBatch, CorruptBatch> {
        if self.compression()? == codec {
            return Ok(self.clone());
        }
        let records = self.records().collect::<Result<Vec<_>, _>>()?;
        Ok(self.rebuild(&records, None, codec))
    }

    fn rebuild(
        &self,
        records: &[Record],
        delete_horizon_ms: Option<i64>,
        codec: CompressionType,
    ) -> RecordBatch {
        use crate::varint::{nullable_size, put_nullable, put_varlong, varlong_size};
        use bytes::BufMut;
        let h = self.header;
        let old_base = h.first_timestamp;
        let new_base = delete_horizon_ms.unwrap_or(old_base);
        let mut body = BytesMut::new();
        // A LogAppendTime batch's max timestamp is the append time, every record's timestamp.
        let mut max_timestamp = if records.is_empty() || h.is_log_append_time() {
            h.max_timestamp
        } else {
            NO_TIMESTAMP
        };
        for r in records {
            let ts = old_base.wrapping_add(r.timestamp_delta);
            if !h.is_log_append_time() {
                max_timestamp = max_timestamp.max(ts);
            }
            let ts_delta = ts.wrapping_sub(new_base);
            let key = r.key.as_deref();
            let value = r.value.as_deref();
            let mut len = 1 + varlong_size(ts_delta) + varlong_size(r.offset_delta as i64);
            len += nullable_size(key) + nullable_size(value);
            len += varlong_size(r.headers.len() as i64);
            for hd in &r.headers {
                len += nullable_size(Some(&hd.key)) + nullable_size(hd.value.as_deref());
            }
            put_varlong(&mut body, len as i64);
            body.put_i8(r.attributes);
            put_varlong(&mut body, ts_delta);
            put_varlong(&mut body, r.offset_delta as i64);
            put_nullable(&mut body, key);
            put_nullable(&mut body, value);
            put_varlong(&mut body, r.headers.len() as i64);
            for hd in &r.headers {
                put_nullable(&mut body, Some(&hd.key));
                put_nullable(&mut body, hd.value.as_deref());
            }
        }
        let mut attributes = (h.attributes & !COMPRESSION_CODEC_MASK) | codec.id();
        if delete_horizon_ms.is_some() {
            attributes |= DELETE_HORIZON_BIT;
        }
        let section: Vec<u8> = if records.is_empty() {
            attributes &= !COMPRESSION_CODEC_MASK;
            Vec::new()
        } else if codec == CompressionType::None {
            body.to_vec()
        } else {
            compression::compress(codec, &body)
        };
        let mut buf = BytesMut::with_capacity(HEADER_SIZE + section.len());
        buf.extend_from_slice(&self.data[..HEADER_SIZE]);
        buf.extend_from_slice(&section);
        let len = buf.len();
        buf[LENGTH_POS..LENGTH_POS + 4]
            .copy_from_slice(&((len - LOG_OVERHEAD) as i32).to_be_bytes());
        buf[ATTRIBUTES_POS..ATTRIBUTES_POS + 2].copy_from_slice(&attributes.to_be_bytes());
        buf[FIRST_TIMESTAMP_POS..FIRST_TIMESTAMP_POS + 8].copy_from_slice(&new_base.to_be_bytes());
        buf[MAX_TIMESTAMP_POS..MAX_TIMESTAMP_POS + 8].copy_from_slice(&max_timestamp.to_be_bytes());
        let count = records.len() as i32;
        buf[RECORD_COUNT_POS..RECORD_COUNT_POS + 4].copy_from_slice(&count.to_be_bytes());
        let crc = crc32c::crc32c(&buf[ATTRIBUTES_POS..]);
        buf[CRC_POS..CRC_POS + 4].copy_from_slice(&crc.to_be_bytes());
        let header = BatchHeader {
            batch_length: (len - LOG_OVERHEAD) as i32,
            crc,
            attributes,
            first_timestamp: new_base,
            max_timestamp,
            record_count: count,
            ..h
        };
        RecordBatch {
            header,
            data: buf.freeze(),
        }
    }

    /// Iterates the records, decompressing a compressed batch first (bounded by
    /// [`MAX_DECOMPRESSED_BYTES`]). Stops after `record_count` records; yields an error (and
    /// then stops) when the section does not decompress, at the first malformed record, or if
    /// bytes remain after the last record. Does not check the CRC (see
    /// [`RecordBatch::validated_records`]).
    pub fn records(&self) -> RecordIter {
        match self.records_section(MAX_DECOMPRESSED_BYTES) {
            Ok(data) => self.iter_over(data, None),
            Err(e) => self.iter_over(Bytes::new(), Some(e)),
        }
    }

    fn iter_over(&self, data: Bytes, error: Option<CorruptBatch>) -> RecordIter {
        RecordIter {
            data,
            pos: 0,
            remaining: self.header.record_count.max(0) as u32,
            base_offset: self.header.base_offset,
            failed: false,
            error,
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

impl RecordBatch {
    /// A copy with the header's max timestamp set to `max_timestamp` (ms) and the CRC
    /// recomputed (the max timestamp is inside the CRC'd part): what a leader stores when the
    /// producer's header disagrees with its records (Kafka `LogValidator` sets the batch's max
    /// timestamp from the records, `DefaultRecordBatch.setMaxTimestamp`).
    pub fn with_max_timestamp(&self, max_timestamp: i64) -> RecordBatch {
        let log_append_time = self.header.attributes & TIMESTAMP_TYPE_BIT != 0;
        self.with_timestamp_type(log_append_time, max_timestamp)
    }

    /// A copy with the timestamp type bit set to LogAppendTime (`log_append_time`) or
    /// CreateTime, the header's max timestamp set to `max_timestamp` (ms) and the CRC
    /// recomputed (Kafka `DefaultRecordBatch.setMaxTimestamp(TimestampType, long)`, which the
    /// leader calls with its clock for a `message.timestamp.type=LogAppendTime` topic: readers
    /// then take the max timestamp as every record's timestamp).
    pub fn with_timestamp_type(&self, log_append_time: bool, max_timestamp: i64) -> RecordBatch {
        let attributes = if log_append_time {
            self.header.attributes | TIMESTAMP_TYPE_BIT
        } else {
            self.header.attributes & !TIMESTAMP_TYPE_BIT
        };
        let mut buf = BytesMut::from(&self.data[..]);
        buf[ATTRIBUTES_POS..ATTRIBUTES_POS + 2].copy_from_slice(&attributes.to_be_bytes());
        buf[MAX_TIMESTAMP_POS..MAX_TIMESTAMP_POS + 8].copy_from_slice(&max_timestamp.to_be_bytes());
        let crc = crc32c::crc32c(&buf[ATTRIBUTES_POS..]);
        buf[CRC_POS..CRC_POS + 4].copy_from_slice(&crc.to_be_bytes());
        let mut header = self.header;
        header.attributes = attributes;
        header.max_timestamp = max_timestamp;
        header.crc = crc;
        RecordBatch {
            header,
            data: buf.freeze(),
        }
    }
}

/// The first 16 header bytes (base offset, length, partition leader epoch) with a new base
/// offset and epoch, to be written in front of `batch[16..]`.
pub fn stamped_prefix(batch: &[u8], base_offset: i64, leader_epoch: i32) -> [u8; 16] {
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
