//! Reading partition segment files offline, for `keelctl log dump` (Kafka's
//! `kafka-dump-log --files`): the batches of `{base_offset:020}.log` files as they lie on
//! disk, with their offsets, epochs, producer ids, sizes and CRC checks, and with `--deep`
//! their records.
//!
//! The reader only reads: it is safe on a stopped broker's data directory and on a running
//! one's (where the active segment's tail may be a batch still being written: reported as a
//! partial batch, which a restart's recovery would truncate). Memory is bounded by one batch
//! ([`MAX_DUMP_BATCH_BYTES`]); a length field above it, or a header that does not parse,
//! ends the file's dump with a line saying where and why (the broker's recovery would
//! truncate there too).

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};

use bytes::Bytes;
use keel_record::{
    BatchHeader, CONTROL_BIT, HEADER_SIZE, LOG_OVERHEAD, RecordBatch, TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
};

/// Largest batch the reader loads (the broker's largest accepted message plus margin).
pub const MAX_DUMP_BATCH_BYTES: usize = 128 << 20;

/// One item of a segment file.
#[derive(Debug)]
pub enum Item {
    /// A whole batch at byte `position`.
    Batch {
        /// Byte position in the file.
        position: u64,
        /// The batch.
        batch: RecordBatch,
    },
    /// The file ends inside a batch (a write in progress or a crash tail).
    Partial {
        /// Where the partial batch starts.
        position: u64,
        /// Bytes present from there.
        bytes: u64,
    },
    /// The bytes at `position` are not a batch.
    Corrupt {
        /// Where.
        position: u64,
        /// Why.
        reason: String,
    },
}

/// The segment files to dump for `path`: the file itself, or the `.log` files of a
/// partition directory in base-offset order. Errors name the path and what is wrong.
pub fn segment_files(path: &Path) -> Result<Vec<PathBuf>, String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if meta.is_file() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(|e| format!("{}: {e}", path.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.extension().is_some_and(|x| x == "log")
                && p.file_stem()
                    .and_then(|s| s.to_str())
                    .is_some_and(|s| s.len() == 20 && s.bytes().all(|b| b.is_ascii_digit()))
        })
        .collect();
    if files.is_empty() {
        return Err(format!(
            "{}: no segment files ({{base offset:020}}.log); give a partition directory such \
             as DATA_DIR/TOPIC-PARTITION or a .log file",
            path.display()
        ));
    }
    // Zero-padded names: the name order is the offset order.
    files.sort();
    Ok(files)
}

/// Reads the items of one segment file, calling `each` for every one; stops after the
/// first partial or corrupt item, or when `each` returns false.
pub fn read_segment(path: &Path, mut each: impl FnMut(Item) -> bool) -> Result<(), String> {
    let file = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    read_items(BufReader::with_capacity(1 << 20, file), &mut each)
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// [`read_segment`] over any reader (pure apart from reading).
pub fn read_items(mut r: impl Read, each: &mut impl FnMut(Item) -> bool) -> std::io::Result<()> {
    let mut position = 0u64;
    loop {
        let mut head = [0u8; HEADER_SIZE];
        let got = read_full(&mut r, &mut head)?;
        if got == 0 {
            return Ok(());
        }
        if got < LOG_OVERHEAD {
            each(Item::Partial {
                position,
                bytes: got as u64,
            });
            return Ok(());
        }
        let length = i32::from_be_bytes(head[8..12].try_into().expect("4 bytes"));
        let total = LOG_OVERHEAD as i64 + i64::from(length);
        if length < 0 || total > MAX_DUMP_BATCH_BYTES as i64 {
            each(Item::Corrupt {
                position,
                reason: format!("batch length {length} is outside 0..={MAX_DUMP_BATCH_BYTES}"),
            });
            return Ok(());
        }
        if got < HEADER_SIZE {
            each(Item::Partial {
                position,
                bytes: got as u64,
            });
            return Ok(());
        }
        if let Err(e) = BatchHeader::parse(&head, position) {
            each(Item::Corrupt {
                position,
                reason: e.to_string(),
            });
            return Ok(());
        }
        let total = total as usize;
        let mut buf = vec![0u8; total];
        buf[..HEADER_SIZE].copy_from_slice(&head);
        let rest = read_full(&mut r, &mut buf[HEADER_SIZE..])?;
        if HEADER_SIZE + rest < total {
            each(Item::Partial {
                position,
                bytes: (HEADER_SIZE + rest) as u64,
            });
            return Ok(());
        }
        match RecordBatch::from_bytes(Bytes::from(buf)) {
            Ok(batch) => {
                if !each(Item::Batch { position, batch }) {
                    return Ok(());
                }
            }
            Err(e) => {
                each(Item::Corrupt {
                    position,
                    reason: e.to_string(),
                });
                return Ok(());
            }
        }
        position += total as u64;
    }
}

/// Reads until `buf` is full or the input ends; the bytes read.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// One batch as `kafka-dump-log` prints it (text, one line).
pub fn batch_line(position: u64, b: &RecordBatch) -> String {
    let h = b.header();
    let last_sequence = if h.base_sequence < 0 {
        -1
    } else {
        h.base_sequence.wrapping_add(h.last_offset_delta)
    };
    format!(
        "baseOffset: {} lastOffset: {} count: {} baseSequence: {} lastSequence: {} producerId: {} \
         producerEpoch: {} partitionLeaderEpoch: {} isTransactional: {} isControl: {} \
         position: {position} {}: {} size: {} magic: 2 compresscodec: {} crc: {} isvalid: {}",
        h.base_offset,
        b.last_offset(),
        h.record_count,
        h.base_sequence,
        last_sequence,
        h.producer_id,
        h.producer_epoch,
        h.partition_leader_epoch,
        h.attributes & TRANSACTIONAL_BIT != 0,
        h.attributes & CONTROL_BIT != 0,
        timestamp_type(h.attributes),
        h.max_timestamp,
        b.size_bytes(),
        codec(b),
        h.crc,
        b.is_crc_valid(),
    )
}

fn timestamp_type(attributes: i16) -> &'static str {
    if attributes & TIMESTAMP_TYPE_BIT != 0 {
        "LogAppendTime"
    } else {
        "CreateTime"
    }
}

fn codec(b: &RecordBatch) -> String {
    b.compression()
        .map_or_else(|e| format!("invalid ({e})"), |c| c.name().to_string())
}

fn lossy(b: Option<&Bytes>) -> serde_json::Value {
    b.map_or(serde_json::Value::Null, |v| {
        serde_json::Value::String(String::from_utf8_lossy(v).into_owned())
    })
}

/// The records of a batch as `kafka-dump-log --deep-iteration --print-data-log` prints them
/// (`| offset: ...` lines), or one line saying why they do not decode.
pub fn record_lines(b: &RecordBatch) -> Vec<String> {
    let h = b.header();
    let mut out = Vec::new();
    for r in b.records() {
        match r {
            Ok(r) => {
                let offset = h.base_offset + i64::from(r.offset_delta);
                let seq = if h.base_sequence < 0 {
                    -1
                } else {
                    h.base_sequence.wrapping_add(r.offset_delta)
                };
                let text = |v: Option<&Bytes>| {
                    v.map_or_else(
                        || "null".to_string(),
                        |v| String::from_utf8_lossy(v).into_owned(),
                    )
                };
                out.push(format!(
                    "| offset: {offset} {}: {} keySize: {} valueSize: {} sequence: {seq} \
                     headerKeys: [{}] key: {} payload: {}",
                    timestamp_type(h.attributes),
                    h.record_timestamp(r.timestamp_delta),
                    r.key.as_ref().map_or(-1, |k| k.len() as i64),
                    r.value.as_ref().map_or(-1, |v| v.len() as i64),
                    r.headers
                        .iter()
                        .map(|x| String::from_utf8_lossy(&x.key).into_owned())
                        .collect::<Vec<_>>()
                        .join(","),
                    text(r.key.as_ref()),
                    text(r.value.as_ref()),
                ));
            }
            Err(e) => {
                out.push(format!("| records do not decode: {e}"));
                break;
            }
        }
    }
    out
}

/// One batch as JSON (with its records when `deep`).
pub fn batch_json(position: u64, b: &RecordBatch, deep: bool) -> serde_json::Value {
    let h = b.header();
    let mut v = serde_json::json!({
        "position": position,
        "base_offset": h.base_offset,
        "last_offset": b.last_offset(),
        "count": h.record_count,
        "base_sequence": h.base_sequence,
        "producer_id": h.producer_id,
        "producer_epoch": h.producer_epoch,
        "partition_leader_epoch": h.partition_leader_epoch,
        "is_transactional": h.attributes & TRANSACTIONAL_BIT != 0,
        "is_control": h.attributes & CONTROL_BIT != 0,
        "timestamp_type": timestamp_type(h.attributes),
        "first_timestamp": h.first_timestamp,
        "max_timestamp": h.max_timestamp,
        "size": b.size_bytes(),
        "compression": codec(b),
        "crc": h.crc,
        "crc_valid": b.is_crc_valid(),
    });
    if deep {
        let records: Vec<serde_json::Value> = b
            .records()
            .map(|r| match r {
                Ok(r) => serde_json::json!({
                    "offset": h.base_offset + i64::from(r.offset_delta),
                    "timestamp": h.record_timestamp(r.timestamp_delta),
                    "key": lossy(r.key.as_ref()),
                    "value": lossy(r.value.as_ref()),
                    "headers": r.headers.iter().map(|x| String::from_utf8_lossy(&x.key).into_owned()).collect::<Vec<_>>(),
                }),
                Err(e) => serde_json::json!({ "error": e.to_string() }),
            })
            .collect();
        v["records"] = serde_json::Value::Array(records);
    }
    v
}

#[cfg(test)]
mod tests {
    use keel_record::RecordBatchBuilder;

    use super::*;

    fn segment() -> Vec<u8> {
        let mut out = Vec::new();
        for (base, epoch) in [(0i64, 1i32), (2, 3)] {
            let mut b = RecordBatchBuilder::new(base);
            b.append(1000, Some(b"k"), Some(b"v1"), &[]);
            b.append(1001, None, Some(b"v2"), &[]);
            let batch = b.build().with_offset_and_epoch(base, epoch);
            out.extend_from_slice(batch.as_bytes());
        }
        out
    }

    fn items(bytes: &[u8]) -> Vec<Item> {
        let mut v = Vec::new();
        read_items(bytes, &mut |i| {
            v.push(i);
            true
        })
        .unwrap();
        v
    }

    #[test]
    fn whole_batches_are_listed_with_their_positions_and_checks() {
        let seg = segment();
        let got = items(&seg);
        assert_eq!(got.len(), 2);
        let Item::Batch { position, batch } = &got[1] else {
            panic!("{got:?}")
        };
        assert_eq!(*position as usize, seg.len() / 2);
        let line = batch_line(*position, batch);
        assert!(
            line.starts_with("baseOffset: 2 lastOffset: 3 count: 2 "),
            "{line}"
        );
        assert!(line.contains("partitionLeaderEpoch: 3"), "{line}");
        assert!(line.contains("isvalid: true"), "{line}");
        let records = record_lines(batch);
        assert_eq!(records.len(), 2);
        assert!(records[1].contains("offset: 3 "), "{}", records[1]);
        assert!(
            records[1].ends_with("key: null payload: v2"),
            "{}",
            records[1]
        );
        assert_eq!(batch_json(0, batch, true)["records"][0]["value"], "v1");
    }

    #[test]
    fn a_cut_tail_is_partial_and_damage_is_reported_where_it_is() {
        let seg = segment();
        let half = seg.len() / 2;
        for cut in [half + 5, half + HEADER_SIZE + 3, seg.len() - 1] {
            let got = items(&seg[..cut]);
            assert!(
                matches!(got.last(), Some(Item::Partial { position, .. }) if *position as usize == half),
                "cut {cut}: {got:?}"
            );
        }
        // A flipped byte in the second batch's payload: listed, with a failed CRC check.
        let mut bad = seg.clone();
        let last = bad.len() - 1;
        bad[last] ^= 0xff;
        let got = items(&bad);
        let Item::Batch { batch, .. } = &got[1] else {
            panic!("{got:?}")
        };
        assert!(!batch.is_crc_valid());
        // A length field that cannot be: the dump stops there, naming it.
        let mut bad = seg.clone();
        bad[half + 8..half + 12].copy_from_slice(&(-5i32).to_be_bytes());
        let got = items(&bad);
        assert!(
            matches!(&got[1], Item::Corrupt { position, reason } if *position as usize == half && reason.contains("-5")),
            "{got:?}"
        );
    }

    #[test]
    fn a_directory_lists_its_segments_in_offset_order() {
        let dir = tempfile::tempdir().unwrap();
        for name in [
            "00000000000000000100.log",
            "00000000000000000000.log",
            "00000000000000000000.index",
            "leader-epoch-checkpoint",
        ] {
            std::fs::write(dir.path().join(name), b"").unwrap();
        }
        let files = segment_files(dir.path()).unwrap();
        let names: Vec<String> = files
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            vec!["00000000000000000000.log", "00000000000000000100.log"]
        );
        let empty = tempfile::tempdir().unwrap();
        assert!(
            segment_files(empty.path())
                .unwrap_err()
                .contains("no segment files")
        );
        assert!(segment_files(Path::new("/nonexistent/x")).is_err());
    }
}
