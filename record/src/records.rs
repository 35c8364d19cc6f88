//! Decoding the records of a batch (Kafka `DefaultRecord`): every read bounds-checked
//! against the record's own length, keys, values and headers as slices of the batch buffer
//! (of the decompressed records section for a compressed batch).

use std::ops::Range;

use bytes::Bytes;

use crate::CorruptBatch;

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

/// Iterator over the records of a batch; see [`crate::RecordBatch::records`].
#[derive(Debug)]
pub struct RecordIter {
    pub(crate) data: Bytes,
    pub(crate) pos: usize,
    pub(crate) remaining: u32,
    pub(crate) base_offset: i64,
    pub(crate) failed: bool,
    /// Yielded first, then the iterator ends: the records section could not be decompressed.
    pub(crate) error: Option<CorruptBatch>,
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

/// Walks the records of `records` (the records section of a batch, decompressed) without
/// decoding them into values: checks each parses, that offset deltas are 0..count-1, and that
/// the last record ends exactly at the end. Returns the smallest and largest timestamp delta,
/// or the first failure naming the record index. `count` must be >= 1.
pub(crate) fn check_records(records: &[u8], count: i32) -> Result<(i64, i64), String> {
    check_records_with(records, count, None)
}

/// [`check_records`] with the offset-delta rule chosen by `compacted_last_delta`: `None`
/// requires deltas 0..count-1 (a producer's batch); `Some(last)` requires strictly
/// increasing deltas in `0..=last` (a batch the log cleaner rewrote, whose records may have
/// gaps, Kafka `MemoryRecords.filterTo`). `count` may be 0 only in the compacted case.
pub(crate) fn check_records_with(
    records: &[u8],
    count: i32,
    compacted_last_delta: Option<i32>,
) -> Result<(i64, i64), String> {
    let mut pos = 0;
    let (mut min_delta, mut max_delta) = (i64::MAX, i64::MIN);
    let mut previous_delta: i64 = -1;
    // Bounded by `count`, which the caller checked against the batch header.
    for expected_delta in 0..count {
        if pos == records.len() {
            return Err(format!(
                "record count mismatch: the header counts {count} records, the batch holds {expected_delta}"
            ));
        }
        let r = parse_record(records, pos, |_, _| {})
            .map_err(|reason| format!("record {expected_delta}: {reason}"))?;
        match compacted_last_delta {
            None if r.offset_delta != expected_delta => {
                return Err(format!(
                    "record {expected_delta}: offset delta {} (record offset deltas must be 0..count-1)",
                    r.offset_delta
                ));
            }
            Some(last) if i64::from(r.offset_delta) <= previous_delta || r.offset_delta > last => {
                return Err(format!(
                    "record {expected_delta}: offset delta {} (deltas must increase and stay <= {last})",
                    r.offset_delta
                ));
            }
            _ => {}
        }
        previous_delta = i64::from(r.offset_delta);
        min_delta = min_delta.min(r.timestamp_delta);
        max_delta = max_delta.max(r.timestamp_delta);
        pos = r.end;
    }
    if pos != records.len() {
        return Err(format!(
            "record count mismatch: {} bytes left after the last of the {count} records the header counts",
            records.len() - pos
        ));
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
        if let Some(e) = self.error.take() {
            self.failed = true;
            return Some(Err(e));
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
