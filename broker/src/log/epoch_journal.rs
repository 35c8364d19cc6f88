//! The leader epoch journal: one file per data directory, `leader-epoch-journal`, that makes
//! many partitions' new leader epochs durable with one write and one `fdatasync`.
//!
//! KIP-101: a leader records where its epoch starts (its LEO when it takes the leadership)
//! durably before it accepts a write in that epoch, so that after a crash it still answers
//! OffsetsForLeaderEpoch correctly. Kafka fsyncs each partition's `leader-epoch-checkpoint`
//! (`LeaderEpochFileCache.assign`). A broker taking over 11,700 leaderships at 100,000
//! partitions spent 0.6-0.9 s writing that many checkpoints in place and syncing the file
//! system (partitions bench, two kill -9 runs), most of its time after the commit. Here the
//! apply loop stages the entries in memory ([`super::epoch_cache::LeaderEpochCache::stage`])
//! and appends them to this journal in one batch; the checkpoint files are rewritten later,
//! many at a time with one file-system sync, when the journal grows past
//! [`COMPACT_AT_BYTES`] and at the next start.
//!
//! Format: a sequence of batches, each `length: u32` (payload bytes), `crc: u32` (CRC32C of
//! the payload), then the payload: entries of `topic length: u16`, the topic (UTF-8, at most
//! [`MAX_TOPIC_BYTES`]), `partition: i32`, `epoch: i32`, `start offset: i64`, all big endian.
//! A batch is durable once [`EpochJournal::append`] returns.
//!
//! Reading ([`EpochJournal::open`]): a batch cut short at the end of the file, or the last
//! batch failing its CRC, is an append a crash interrupted (never acknowledged: its epochs
//! were not used) and is dropped; the file is truncated to the batches before it. A bad batch
//! followed by more bytes is a damaged file: an error naming it (the broker does not start,
//! as Kafka marks a log directory offline on a corrupt checkpoint).
//!
//! The entries are hints, checked against the log before use
//! ([`super::Log::replay_journaled_epoch`]): an entry is applied only when the log's own
//! batches show that epoch starting at that offset, so a stale entry (a partition truncated,
//! deleted or re-created since) can never add a false epoch.
//!
//! Only the replica manager's apply loop appends to and clears the journal (one writer).

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use super::checkpoint::TopicPartition;
use super::error::{LogError, LogResult, io_err};

/// File name of the journal inside the data directory.
pub const LEADER_EPOCH_JOURNAL: &str = "leader-epoch-journal";

/// Journal size from which the apply loop writes the staged checkpoints and clears it, bytes
/// (about 130,000 entries of 20-character topic names; a kill -9 of a broker leading 33,000
/// partitions journals about 17,000 entries per survivor).
pub const COMPACT_AT_BYTES: u64 = 4 << 20;

/// Longest topic name, bytes (Kafka `Topic.MAX_NAME_LENGTH`).
pub const MAX_TOPIC_BYTES: usize = 249;

/// Batch header: payload length and CRC32C, bytes.
const BATCH_HEADER_BYTES: usize = 8;

/// One journaled epoch start: `epoch` of `tp` starts at `start_offset`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalEntry {
    /// The partition.
    pub tp: TopicPartition,
    /// Leader epoch, >= 0.
    pub epoch: i32,
    /// First offset of the epoch (the LEO when it was staged), >= 0.
    pub start_offset: i64,
}

/// The open journal (appends go to its end).
#[derive(Debug)]
pub struct EpochJournal {
    path: PathBuf,
    file: File,
    /// Bytes of whole batches in the file (appends start here).
    len: u64,
}

impl EpochJournal {
    /// Opens (creating it) `<data_dir>/leader-epoch-journal` and returns it with its entries,
    /// oldest first. A torn last batch is dropped and cut off the file (see the module doc).
    ///
    /// Errors: the file cannot be read or written; `MalformedFile` when a batch other than
    /// the last is damaged.
    pub fn open(data_dir: &Path) -> LogResult<(Self, Vec<JournalEntry>)> {
        let path = data_dir.join(LEADER_EPOCH_JOURNAL);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io_err(&path))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(io_err(&path))?;
        let (entries, valid) = decode(&bytes).map_err(|reason| LogError::MalformedFile {
            path: path.clone(),
            reason,
        })?;
        if valid < bytes.len() {
            tracing::warn!(
                journal = %path.display(),
                dropped_bytes = bytes.len() - valid,
                "dropping the leader epoch journal's last batch, cut short by a crash"
            );
            file.set_len(valid as u64).map_err(io_err(&path))?;
            file.sync_data().map_err(io_err(&path))?;
        }
        Ok((
            Self {
                path,
                file,
                len: valid as u64,
            },
            entries,
        ))
    }

    /// Appends `entries` as one batch and makes it durable (`fdatasync`). On error the file
    /// is cut back to its previous length (best effort; a torn batch is dropped at the next
    /// open anyway) and none of the entries may be taken as durable.
    pub fn append(&mut self, entries: &[JournalEntry]) -> LogResult<()> {
        if entries.is_empty() {
            return Ok(());
        }
        let batch = encode_batch(entries);
        let written = (|| {
            use std::io::{Seek, SeekFrom};
            self.file.seek(SeekFrom::Start(self.len))?;
            self.file.write_all(&batch)?;
            self.file.sync_data()
        })();
        match written {
            Ok(()) => {
                self.len += batch.len() as u64;
                Ok(())
            }
            Err(e) => {
                let _ = self.file.set_len(self.len);
                Err(io_err(&self.path)(e))
            }
        }
    }

    /// Bytes of the journal.
    pub fn len_bytes(&self) -> u64 {
        self.len
    }

    /// Makes every journaled entry durable where it belongs and empties the journal:
    /// `write_staged` writes the checkpoints that lack a staged entry (in place, without
    /// fsync) and returns how many it wrote, then the file system of `data_dir` is synced once
    /// and the journal emptied. Returns the checkpoints written. On error the journal is left
    /// as it is (its entries are replayed at the next start).
    pub fn compact(
        &mut self,
        data_dir: &Path,
        write_staged: impl FnOnce() -> LogResult<usize>,
    ) -> LogResult<usize> {
        let written = write_staged()?;
        super::checkpoint::sync_file_system(data_dir)?;
        self.clear()?;
        Ok(written)
    }

    /// Empties the journal durably; the caller made every entry durable elsewhere first.
    pub fn clear(&mut self) -> LogResult<()> {
        self.file.set_len(0).map_err(io_err(&self.path))?;
        self.file.sync_data().map_err(io_err(&self.path))?;
        self.len = 0;
        Ok(())
    }
}

/// One batch of `entries` (header and payload).
fn encode_batch(entries: &[JournalEntry]) -> Vec<u8> {
    let mut payload = Vec::with_capacity(entries.len() * 40);
    for e in entries {
        let topic = e.tp.topic.as_bytes();
        debug_assert!(topic.len() <= MAX_TOPIC_BYTES);
        debug_assert!(e.epoch >= 0 && e.start_offset >= 0);
        payload.extend_from_slice(&(topic.len() as u16).to_be_bytes());
        payload.extend_from_slice(topic);
        payload.extend_from_slice(&e.tp.partition.to_be_bytes());
        payload.extend_from_slice(&e.epoch.to_be_bytes());
        payload.extend_from_slice(&e.start_offset.to_be_bytes());
    }
    let mut batch = Vec::with_capacity(BATCH_HEADER_BYTES + payload.len());
    batch.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    batch.extend_from_slice(&crc32c::crc32c(&payload).to_be_bytes());
    batch.extend_from_slice(&payload);
    batch
}

/// The entries of `bytes` and the length of its whole, valid batches. Errors: a damaged
/// batch that is not the last (the reason names its position).
fn decode(bytes: &[u8]) -> Result<(Vec<JournalEntry>, usize), String> {
    let mut entries = Vec::new();
    let mut pos = 0;
    // Each iteration consumes one batch or stops: bounded by the file size.
    while pos < bytes.len() {
        let Some(header) = bytes.get(pos..pos + BATCH_HEADER_BYTES) else {
            break;
        };
        let len = u32::from_be_bytes(header[..4].try_into().expect("4 bytes")) as usize;
        let crc = u32::from_be_bytes(header[4..].try_into().expect("4 bytes"));
        let start = pos + BATCH_HEADER_BYTES;
        let Some(payload) = start.checked_add(len).and_then(|end| bytes.get(start..end)) else {
            break;
        };
        let end = start + len;
        let last = end == bytes.len();
        let parsed = if crc32c::crc32c(payload) == crc {
            decode_payload(payload)
        } else {
            Err("CRC mismatch".to_string())
        };
        match parsed {
            Ok(mut batch) => entries.append(&mut batch),
            Err(_) if last => break,
            Err(reason) => {
                return Err(format!(
                    "batch at byte {pos}: {reason}, and {} bytes follow it",
                    bytes.len() - end
                ));
            }
        }
        pos = end;
    }
    Ok((entries, pos))
}

/// The entries of one batch's payload (its CRC checked).
fn decode_payload(mut p: &[u8]) -> Result<Vec<JournalEntry>, String> {
    let mut entries = Vec::new();
    // Each iteration consumes at least 18 bytes: bounded by the payload.
    while !p.is_empty() {
        let take = |p: &mut &[u8], n: usize| -> Result<Vec<u8>, String> {
            let (head, rest) = p.split_at_checked(n).ok_or("entry cut short")?;
            *p = rest;
            Ok(head.to_vec())
        };
        let topic_len = u16::from_be_bytes(take(&mut p, 2)?.try_into().expect("2 bytes")) as usize;
        if topic_len == 0 || topic_len > MAX_TOPIC_BYTES {
            return Err(format!(
                "topic length {topic_len} outside 1..={MAX_TOPIC_BYTES}"
            ));
        }
        let topic = String::from_utf8(take(&mut p, topic_len)?)
            .map_err(|_| "topic name not UTF-8".to_string())?;
        let partition = i32::from_be_bytes(take(&mut p, 4)?.try_into().expect("4 bytes"));
        let epoch = i32::from_be_bytes(take(&mut p, 4)?.try_into().expect("4 bytes"));
        let start_offset = i64::from_be_bytes(take(&mut p, 8)?.try_into().expect("8 bytes"));
        if partition < 0 || epoch < 0 || start_offset < 0 {
            return Err(format!(
                "negative partition {partition}, epoch {epoch} or start offset {start_offset}"
            ));
        }
        entries.push(JournalEntry {
            tp: TopicPartition::new(topic, partition),
            epoch,
            start_offset,
        });
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(topic: &str, partition: i32, epoch: i32, start_offset: i64) -> JournalEntry {
        JournalEntry {
            tp: TopicPartition::new(topic, partition),
            epoch,
            start_offset,
        }
    }

    #[test]
    fn appended_batches_are_read_back_in_order_and_clear_empties_it() {
        let dir = tempfile::tempdir().unwrap();
        let (mut j, read) = EpochJournal::open(dir.path()).unwrap();
        assert!(read.is_empty());
        let first = vec![entry("a", 0, 3, 100), entry("b.c-d", 7, 1, 0)];
        let second = vec![entry("a", 0, 4, 250)];
        j.append(&first).unwrap();
        j.append(&[]).unwrap();
        j.append(&second).unwrap();
        let len = j.len_bytes();
        drop(j);
        let (mut j, read) = EpochJournal::open(dir.path()).unwrap();
        assert_eq!(read, [first, second].concat());
        assert_eq!(j.len_bytes(), len);
        j.clear().unwrap();
        drop(j);
        let (_, read) = EpochJournal::open(dir.path()).unwrap();
        assert!(read.is_empty());
        assert_eq!(
            std::fs::metadata(dir.path().join(LEADER_EPOCH_JOURNAL))
                .unwrap()
                .len(),
            0
        );
    }

    #[test]
    fn compaction_writes_the_staged_checkpoints_then_empties_the_journal() {
        use crate::log::epoch_cache::LeaderEpochCache;
        let dir = tempfile::tempdir().unwrap();
        let dirs = [dir.path().join("a-0"), dir.path().join("a-1")];
        let mut caches: Vec<LeaderEpochCache> = dirs
            .iter()
            .map(|d| {
                std::fs::create_dir(d).unwrap();
                LeaderEpochCache::open(d).unwrap()
            })
            .collect();
        let (mut j, _) = EpochJournal::open(dir.path()).unwrap();
        for (p, c) in caches.iter_mut().enumerate() {
            c.assign(1, 0).unwrap();
            assert!(c.stage(4, 10 + p as i64).unwrap());
        }
        j.append(&[entry("a", 0, 4, 10), entry("a", 1, 4, 11)])
            .unwrap();
        let written = j
            .compact(dir.path(), || {
                let mut n = 0;
                for c in &mut caches {
                    n += usize::from(c.write_staged()?);
                }
                Ok(n)
            })
            .unwrap();
        assert_eq!(written, 2);
        assert_eq!(j.len_bytes(), 0);
        for (p, d) in dirs.iter().enumerate() {
            let on_disk: Vec<_> = LeaderEpochCache::open(d)
                .unwrap()
                .entries()
                .iter()
                .map(|e| (e.epoch, e.start_offset))
                .collect();
            assert_eq!(on_disk, [(1, 0), (4, 10 + p as i64)]);
        }
        drop(j);
        assert!(EpochJournal::open(dir.path()).unwrap().1.is_empty());
        // A failed write keeps the journal.
        let (mut j, _) = EpochJournal::open(dir.path()).unwrap();
        j.append(&[entry("a", 0, 5, 20)]).unwrap();
        let len = j.len_bytes();
        let failed = j.compact(dir.path(), || {
            Err(LogError::MalformedFile {
                path: dir.path().to_path_buf(),
                reason: "test".into(),
            })
        });
        assert!(failed.is_err());
        assert_eq!(j.len_bytes(), len);
        drop(j);
        assert_eq!(EpochJournal::open(dir.path()).unwrap().1.len(), 1);
    }

    #[test]
    fn a_torn_last_batch_is_dropped_and_cut_off() {
        let kept = vec![entry("t", 1, 2, 10)];
        let torn = vec![entry("t", 1, 3, 20), entry("u", 0, 1, 5)];
        let good = encode_batch(&kept);
        let last = encode_batch(&torn);
        // Cut anywhere inside the last batch (header included), or its payload damaged.
        let mut cases: Vec<Vec<u8>> = (1..last.len())
            .map(|cut| [good.clone(), last[..cut].to_vec()].concat())
            .collect();
        let mut flipped = last.clone();
        *flipped.last_mut().unwrap() ^= 1;
        cases.push([good.clone(), flipped].concat());
        for bytes in cases {
            let dir = tempfile::tempdir().unwrap();
            std::fs::write(dir.path().join(LEADER_EPOCH_JOURNAL), &bytes).unwrap();
            let (mut j, read) = EpochJournal::open(dir.path()).unwrap();
            assert_eq!(read, kept, "{} bytes", bytes.len());
            assert_eq!(j.len_bytes(), good.len() as u64);
            // Appends follow the kept batches.
            j.append(&torn).unwrap();
            drop(j);
            let (_, read) = EpochJournal::open(dir.path()).unwrap();
            assert_eq!(read, [kept.clone(), torn.clone()].concat());
        }
    }

    #[test]
    fn a_damaged_batch_followed_by_more_is_an_error_naming_the_file() {
        let mut first = encode_batch(&[entry("t", 0, 1, 1)]);
        first[BATCH_HEADER_BYTES + 1] ^= 0x40;
        let bytes = [first, encode_batch(&[entry("t", 0, 2, 9)])].concat();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(LEADER_EPOCH_JOURNAL), &bytes).unwrap();
        let e = EpochJournal::open(dir.path()).unwrap_err().to_string();
        assert!(e.contains(LEADER_EPOCH_JOURNAL), "{e}");
        assert!(e.contains("batch at byte 0: CRC mismatch"), "{e}");
        // The file is left as it was for the operator.
        assert_eq!(
            std::fs::read(dir.path().join(LEADER_EPOCH_JOURNAL)).unwrap(),
            bytes
        );
    }

    #[test]
    fn payloads_with_impossible_fields_are_refused() {
        let bad = |payload: Vec<u8>| decode_payload(&payload).unwrap_err();
        assert!(bad(vec![0, 0]).contains("topic length 0"));
        assert!(bad(vec![1, 0]).contains("topic length 256"));
        assert!(bad(vec![0, 1, b'a', 0, 0]).contains("cut short"));
        let mut negative = vec![0, 1, b'a'];
        negative.extend_from_slice(&(-1i32).to_be_bytes());
        negative.extend_from_slice(&1i32.to_be_bytes());
        negative.extend_from_slice(&1i64.to_be_bytes());
        assert!(bad(negative).contains("negative partition -1"));
    }
}
