//! Reading a controller's metadata log directory offline, for `keelctl metadata dump` (Kafka's
//! `kafka-dump-log --cluster-metadata-decoder` on `__cluster_metadata-0` and
//! `kafka-metadata-shell --snapshot` on a stopped node).
//!
//! It owns nothing and changes nothing: no lock is taken, no torn tail is cut, no segment is
//! deleted, so it is safe on a stopped controller's directory and on a running one's (whose
//! active segment may end in a batch still being written: reported as a torn tail, which the
//! controller's own recovery would cut). What [`RaftDisk`](super::RaftDisk)'s recovery would
//! refuse to open (a bad header, a bad record with an intact batch after it, an out-of-order
//! index) is reported as damage at a file and byte offset, and the rest of that segment is
//! not read.
//!
//! A sled log (`metadata_log_engine = "sled"`) is read through sled itself, which takes the
//! directory's lock and runs its own recovery: only while its controller is stopped (sled has
//! no read-only mode). It is shown as one "segment", the database, with no byte offsets.
//!
//! Memory: one segment file at a time (segments roll at 16 MiB; one entry is at most
//! [`MAX_ENTRY_BYTES`](super::disk::MAX_ENTRY_BYTES)), and one snapshot file at a time.

use std::fs;
use std::ops::Bound;
use std::path::{Path, PathBuf};

use openraft::EntryPayload;

use super::disk::{self, Meta};
use super::engine_files;
use super::log_store::{KEY_COMMITTED, KEY_LAST_PURGED, KEY_NODE_ID, KEY_VOTE};
use super::sled_disk::SledDisk;
use crate::raft_types::{Entry, LogId, MetadataRecords};
use crate::snapshot::{self, Snapshot};

/// The `raft/meta` file's values, decoded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RaftMeta {
    /// Entries at or below this index were purged (covered by a snapshot).
    pub purged_through: Option<u64>,
    /// The node id the log belongs to (written at first start).
    pub node_id: Option<u64>,
    /// The saved vote: `(term, voted-for node id, committed)`; committed means the vote was
    /// granted by a quorum (the node was leader in that term).
    pub vote: Option<(u64, u64, bool)>,
    /// The last log id the node knew committed (saved before the node applied up to it; logs
    /// written by earlier builds saved it lazily, so there it may lag).
    pub committed: Option<(u64, u64)>,
    /// The last purged log id `(term, index)`.
    pub last_purged: Option<(u64, u64)>,
}

/// What one Raft entry holds.
#[derive(Debug, Clone, PartialEq)]
pub enum EntryKind {
    /// A new leader's first entry (no records).
    Blank,
    /// Metadata records, applied together.
    Records(MetadataRecords),
    /// A membership change: the voter sets (one, or two while joint) and the learners.
    Membership {
        /// Voter node ids per configuration.
        voters: Vec<Vec<u64>>,
        /// Learner (non-voting) node ids.
        learners: Vec<u64>,
    },
}

/// One item of a segment file, in file order.
#[derive(Debug, Clone, PartialEq)]
pub enum SegmentItem {
    /// An intact entry.
    Entry {
        /// Raft index (the metadata offset).
        index: u64,
        /// Raft term it was written in.
        term: u64,
        /// Byte offset of its record in the file.
        position: u64,
        /// At or below the purge point: no longer part of the log (kept in the file until
        /// the whole segment is below it).
        purged: bool,
        /// What it holds.
        kind: EntryKind,
    },
    /// The file ends in a record that is incomplete or fails its CRC, with no intact write
    /// after it: a write that never fully reached the disk (the controller cuts it at start).
    TornTail {
        /// Byte offset of the bad record.
        position: u64,
        /// Bytes from there to the end of the file.
        bytes: u64,
        /// What is wrong with it.
        why: String,
    },
    /// Damage the controller would refuse to start on; the rest of the file is not read.
    Damage {
        /// Byte offset of the damage.
        position: u64,
        /// What is wrong.
        why: String,
    },
}

/// A Raft log directory (`METADATA_LOG_DIR/raft`) opened for reading.
#[derive(Debug)]
pub struct OfflineLog {
    dir: PathBuf,
    meta: Meta,
    segments: Vec<(u64, PathBuf)>,
    /// Set for a sled log: its one "segment" is the database.
    sled: Option<SledDisk>,
}

/// Entries read from a sled log per call (bounds the memory of a dump).
const SLED_READ_CHUNK: usize = 1024;

impl OfflineLog {
    /// Reads `dir`'s `meta` file and lists its segments (no segment is read yet); a sled log
    /// is opened (see the module doc).
    ///
    /// Errors (naming the path): the directory cannot be read, a `.log` name is not an
    /// index, or `meta` is damaged; a sled log is in use by a running controller, or sled
    /// cannot open it.
    pub fn open(dir: &Path) -> Result<OfflineLog, String> {
        if engine_files::holds_sled(dir) {
            return Self::open_sled(dir);
        }
        let meta = disk::read_meta(&dir.join(disk::META_FILE)).map_err(|e| e.to_string())?;
        let segments = disk::segment_bases(dir)
            .map_err(|e| format!("{}: {e}", dir.display()))?
            .into_iter()
            .map(|b| (b, dir.join(disk::segment_name(b))))
            .collect();
        Ok(OfflineLog {
            dir: dir.to_path_buf(),
            meta,
            segments,
            sled: None,
        })
    }

    fn open_sled(dir: &Path) -> Result<OfflineLog, String> {
        let db = SledDisk::open(dir).map_err(|e| {
            if e.kind() == std::io::ErrorKind::WouldBlock {
                format!(
                    "{} is a sled Raft log (metadata_log_engine = \"sled\") in use by a running \
                     controller; sled has no read-only mode: stop the controller to read it",
                    dir.display()
                )
            } else {
                e.to_string()
            }
        })?;
        let meta = Meta {
            purged_through: db.purge_point().map_err(|e| e.to_string())?,
            values: db
                .meta_values()
                .map_err(|e| e.to_string())?
                .into_iter()
                .collect(),
        };
        let first = db
            .entries((Bound::Unbounded, Bound::Unbounded), 1)
            .map_err(|e| e.to_string())?
            .first()
            .map_or(meta.purged_through.map_or(0, |p| p + 1), |(i, _)| *i);
        Ok(OfflineLog {
            dir: dir.to_path_buf(),
            meta,
            segments: vec![(first, dir.to_path_buf())],
            sled: Some(db),
        })
    }

    /// Reads the sled log's entries from `base` on, in chunks.
    fn read_sled(
        db: &SledDisk,
        base: u64,
        mut each: impl FnMut(SegmentItem) -> bool,
    ) -> Result<(), String> {
        let mut from = Bound::Included(base);
        loop {
            let chunk = db
                .entries((from, Bound::Unbounded), SLED_READ_CHUNK)
                .map_err(|e| e.to_string())?;
            let Some(&(last, _)) = chunk.last() else {
                return Ok(());
            };
            for (index, bytes) in chunk {
                let item = match decode_entry(&bytes) {
                    Ok((term, kind)) => SegmentItem::Entry {
                        index,
                        term,
                        position: 0,
                        purged: false,
                        kind,
                    },
                    Err(why) => SegmentItem::Damage {
                        position: 0,
                        why: format!("entry {index}: {why}"),
                    },
                };
                let stop = matches!(item, SegmentItem::Damage { .. });
                if !each(item) || stop {
                    return Ok(());
                }
            }
            from = Bound::Excluded(last);
        }
    }

    /// The directory read.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The decoded values of `meta`; a value that does not decode is left out.
    pub fn meta(&self) -> RaftMeta {
        let get = |key: &str| self.meta.values.get(key).map(Vec::as_slice);
        let log_id = |l: LogId| (l.leader_id.term, l.index);
        RaftMeta {
            purged_through: self.meta.purged_through,
            node_id: get(KEY_NODE_ID).and_then(|b| postcard::from_bytes(b).ok()),
            vote: get(KEY_VOTE)
                .and_then(|b| postcard::from_bytes::<openraft::Vote<u64>>(b).ok())
                .map(|v| (v.leader_id.term, v.leader_id.node_id, v.committed)),
            committed: get(KEY_COMMITTED)
                .and_then(|b| postcard::from_bytes::<Option<LogId>>(b).ok())
                .flatten()
                .map(log_id),
            last_purged: get(KEY_LAST_PURGED)
                .and_then(|b| postcard::from_bytes::<LogId>(b).ok())
                .map(log_id),
        }
    }

    /// The segment files, base index ascending.
    pub fn segments(&self) -> &[(u64, PathBuf)] {
        &self.segments
    }

    /// Reads segment `path` (base index `base`), calling `each` per item in file order; stops
    /// after a torn tail or damage, or when `each` returns false. `last` is the index of the
    /// last entry of the previous segment, if any (to check the indexes follow on).
    ///
    /// Errors: the file cannot be read.
    pub fn read_segment(
        &self,
        base: u64,
        path: &Path,
        mut each: impl FnMut(SegmentItem) -> bool,
    ) -> Result<(), String> {
        if let Some(db) = &self.sled {
            return Self::read_sled(db, base, each);
        }
        let bytes = fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let purged = self.meta.purged_through;
        if let Err(e) = disk::check_segment_header(&bytes, base) {
            each(SegmentItem::Damage {
                position: 0,
                why: e.to_string(),
            });
            return Ok(());
        }
        let mut offset = disk::SEGMENT_HEADER_BYTES as usize;
        let mut last: Option<u64> = None;
        while offset < bytes.len() {
            let rec = match disk::decode_record(&bytes[offset..]) {
                Ok(r) => r,
                Err(why) => {
                    each(match disk::later_batch(&bytes, offset, last) {
                        Some(later) => SegmentItem::Damage {
                            position: offset as u64,
                            why: format!(
                                "{why}; a later write (byte {later}) is intact, so this is not \
                                 a torn tail"
                            ),
                        },
                        None => SegmentItem::TornTail {
                            position: offset as u64,
                            bytes: (bytes.len() - offset) as u64,
                            why,
                        },
                    });
                    return Ok(());
                }
            };
            let want = last.map_or(base, |l| l + 1);
            if rec.index != want {
                each(SegmentItem::Damage {
                    position: offset as u64,
                    why: format!("entry {} where {want} was expected", rec.index),
                });
                return Ok(());
            }
            let item = match decode_entry(rec.payload) {
                Ok((term, kind)) => SegmentItem::Entry {
                    index: rec.index,
                    term,
                    position: offset as u64,
                    purged: purged.is_some_and(|p| rec.index <= p),
                    kind,
                },
                Err(why) => SegmentItem::Damage {
                    position: offset as u64,
                    why: format!("entry {}: {why}", rec.index),
                },
            };
            let stop = matches!(item, SegmentItem::Damage { .. });
            if !each(item) || stop {
                return Ok(());
            }
            last = Some(rec.index);
            offset += rec.total;
        }
        Ok(())
    }
}

/// Decodes an entry's stored bytes into its term and contents (pure).
///
/// Errors: the bytes are not a stored entry (postcard) or its records not a protobuf
/// `MetadataBatch`.
pub fn decode_entry(bytes: &[u8]) -> Result<(u64, EntryKind), String> {
    let e: Entry = postcard::from_bytes(bytes).map_err(|e| format!("undecodable entry: {e}"))?;
    let kind = match e.payload {
        EntryPayload::Blank => EntryKind::Blank,
        EntryPayload::Normal(records) => EntryKind::Records(records),
        EntryPayload::Membership(m) => EntryKind::Membership {
            voters: m
                .get_joint_config()
                .iter()
                .map(|c| c.iter().copied().collect())
                .collect(),
            learners: m.learner_ids().collect(),
        },
    };
    Ok((e.log_id.leader_id.term, kind))
}

/// The snapshot files of a `snapshots/` directory with the index their name carries, index
/// ascending.
///
/// Errors: the directory cannot be read.
pub fn snapshot_files(dir: &Path) -> Result<Vec<(u64, PathBuf)>, String> {
    let mut files =
        super::state_machine::snapshot_files(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    files.sort();
    Ok(files)
}

/// Reads and checks one snapshot file (magic, version, CRC over the whole file, records).
///
/// Errors name the file and the byte offset of the problem.
pub fn read_snapshot(path: &Path) -> Result<Snapshot, String> {
    snapshot::read_file(path).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use keel_proto::metadata::{MetadataRecord, NoOpRecord, metadata_record::Record};
    use openraft::{CommittedLeaderId, EntryPayload, Membership};

    use super::*;
    use crate::store::SegmentDisk;
    use crate::store::disk::segment_file_bytes;

    fn entry(
        index: u64,
        term: u64,
        payload: EntryPayload<crate::raft_types::TypeConfig>,
    ) -> Vec<u8> {
        postcard::to_stdvec(&Entry {
            log_id: LogId::new(CommittedLeaderId::new(term, 1), index),
            payload,
        })
        .unwrap()
    }

    fn noop() -> EntryPayload<crate::raft_types::TypeConfig> {
        EntryPayload::Normal(MetadataRecords::new(vec![MetadataRecord {
            record: Some(Record::NoOp(NoOpRecord {})),
        }]))
    }

    /// Writes a segment of entries `base..base+n` (one batch each) to `dir`; returns its path.
    fn segment(dir: &Path, base: u64, n: u64) -> (PathBuf, Vec<u8>) {
        let payloads: Vec<Vec<u8>> = (base..base + n)
            .map(|i| match i {
                0 => entry(
                    0,
                    0,
                    EntryPayload::Membership(Membership::new(vec![[1, 2, 3].into()], None)),
                ),
                1 => entry(1, 1, EntryPayload::Blank),
                _ => entry(i, 1, noop()),
            })
            .collect();
        let (name, bytes) = segment_file_bytes(
            base,
            0,
            payloads
                .iter()
                .enumerate()
                .map(|(k, p)| (base + k as u64, p.as_slice(), true)),
        );
        let path = dir.join(name);
        fs::write(&path, &bytes).unwrap();
        (path, bytes)
    }

    fn read_all(log: &OfflineLog) -> Vec<SegmentItem> {
        let mut items = Vec::new();
        for (base, path) in log.segments() {
            log.read_segment(*base, path, |i| {
                items.push(i);
                true
            })
            .unwrap();
        }
        items
    }

    fn indexes(items: &[SegmentItem]) -> Vec<u64> {
        items
            .iter()
            .filter_map(|i| match i {
                SegmentItem::Entry { index, .. } => Some(*index),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_sled_log_is_read_in_chunks_with_its_values_and_refused_while_in_use() {
        use crate::store::SledDisk;
        let dir = tempfile::tempdir().unwrap();
        let n = SLED_READ_CHUNK as u64 * 2 + 7;
        {
            let db = SledDisk::open(dir.path()).unwrap();
            db.put_entries((0..n).map(|i| {
                let payload = if i == 0 { EntryPayload::Blank } else { noop() };
                (i, entry(i, 2, payload))
            }))
            .unwrap();
            db.remove_through(3).unwrap();
            db.put_meta(KEY_NODE_ID, &postcard::to_stdvec(&7u64).unwrap())
                .unwrap();
            // While it is open (a running controller), it cannot be read.
            let e = OfflineLog::open(dir.path()).unwrap_err();
            assert!(e.contains("in use by a running controller"), "{e}");
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(db.flush())
                .unwrap();
        }
        let log = OfflineLog::open(dir.path()).unwrap();
        let meta = log.meta();
        assert_eq!(meta.purged_through, Some(3));
        assert_eq!(meta.node_id, Some(7));
        assert_eq!(log.segments(), &[(4, dir.path().to_path_buf())]);
        let items = read_all(&log);
        assert_eq!(indexes(&items), (4..n).collect::<Vec<_>>());
        assert!(matches!(
            &items[0],
            SegmentItem::Entry {
                term: 2,
                kind: EntryKind::Records(_),
                ..
            }
        ));
    }

    #[test]
    fn entries_are_decoded_with_their_terms_and_kinds() {
        let dir = tempfile::tempdir().unwrap();
        segment(dir.path(), 0, 5);
        let log = OfflineLog::open(dir.path()).unwrap();
        assert_eq!(
            log.meta(),
            RaftMeta::default(),
            "no meta file: nothing known"
        );
        let items = read_all(&log);
        assert_eq!(indexes(&items), vec![0, 1, 2, 3, 4]);
        match &items[0] {
            SegmentItem::Entry {
                term, kind, purged, ..
            } => {
                assert_eq!(*term, 0);
                assert!(!purged);
                assert_eq!(
                    *kind,
                    EntryKind::Membership {
                        voters: vec![vec![1, 2, 3]],
                        learners: vec![]
                    }
                );
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            &items[1],
            SegmentItem::Entry {
                term: 1,
                kind: EntryKind::Blank,
                ..
            }
        ));
        assert!(
            matches!(&items[2], SegmentItem::Entry { kind: EntryKind::Records(r), .. } if r.records.len() == 1)
        );
    }

    #[test]
    fn meta_values_and_purged_entries_are_reported() {
        let dir = tempfile::tempdir().unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        {
            let disk = SegmentDisk::open(dir.path()).unwrap();
            let put = |k: &str, v: Vec<u8>| disk.put_meta(k, &v).unwrap();
            put(KEY_NODE_ID, postcard::to_stdvec(&7u64).unwrap());
            let vote = openraft::Vote::new_committed(3, 7u64);
            put(KEY_VOTE, postcard::to_stdvec(&vote).unwrap());
            let committed = Some(LogId::new(CommittedLeaderId::new(3, 7), 4));
            put(KEY_COMMITTED, postcard::to_stdvec(&committed).unwrap());
            disk.put_entries((0..6).map(|i| (i, entry(i, 3, noop()))))
                .unwrap();
            disk.remove_through(2).unwrap();
            rt.block_on(disk.flush()).unwrap();
        }
        let log = OfflineLog::open(dir.path()).unwrap();
        let meta = log.meta();
        assert_eq!(meta.node_id, Some(7));
        assert_eq!(meta.vote, Some((3, 7, true)));
        assert_eq!(meta.committed, Some((3, 4)));
        assert_eq!(meta.purged_through, Some(2));
        let purged: Vec<(u64, bool)> = read_all(&log)
            .iter()
            .filter_map(|i| match i {
                SegmentItem::Entry { index, purged, .. } => Some((*index, *purged)),
                _ => None,
            })
            .collect();
        // The segment still holds the purged entries; they are marked.
        assert_eq!(
            purged,
            vec![
                (0, true),
                (1, true),
                (2, true),
                (3, false),
                (4, false),
                (5, false)
            ]
        );
    }

    #[test]
    fn a_torn_tail_and_damage_are_told_apart_and_nothing_is_changed() {
        let dir = tempfile::tempdir().unwrap();
        let (path, bytes) = segment(dir.path(), 0, 4);
        // The last record cut short: a torn tail, the entries before it read.
        let cut = &bytes[..bytes.len() - 3];
        fs::write(&path, cut).unwrap();
        let log = OfflineLog::open(dir.path()).unwrap();
        let items = read_all(&log);
        assert_eq!(indexes(&items), vec![0, 1, 2]);
        assert!(
            matches!(items.last(), Some(SegmentItem::TornTail { .. })),
            "{items:?}"
        );
        assert_eq!(fs::read(&path).unwrap(), cut, "the reader changed the file");
        // A flipped byte in the second entry, with intact entries after it: damage, and the
        // rest of the file is not read.
        let mut bad = bytes.clone();
        fs::write(&path, &bytes).unwrap();
        let second = read_all(&log)
            .iter()
            .find_map(|i| match i {
                SegmentItem::Entry {
                    index: 1, position, ..
                } => Some(*position as usize),
                _ => None,
            })
            .unwrap();
        // The last byte of its payload (after the 16-byte record header).
        let second = second + 16 + entry(1, 1, EntryPayload::Blank).len() - 1;
        bad[second] ^= 0xff;
        fs::write(&path, &bad).unwrap();
        let items = read_all(&log);
        assert_eq!(indexes(&items), vec![0]);
        match items.last() {
            Some(SegmentItem::Damage { why, .. }) => assert!(why.contains("is intact"), "{why}"),
            other => panic!("{other:?}"),
        }
        // A bad header: damage at byte 0.
        let mut header = bytes.clone();
        header[0] = b'X';
        fs::write(&path, &header).unwrap();
        let items = read_all(&log);
        assert!(
            matches!(items.as_slice(), [SegmentItem::Damage { position: 0, .. }]),
            "{items:?}"
        );
    }

    #[test]
    fn an_index_out_of_order_is_damage() {
        let dir = tempfile::tempdir().unwrap();
        let payloads = [entry(5, 1, noop()), entry(7, 1, noop())];
        let (name, bytes) = segment_file_bytes(
            5,
            0,
            [
                (5, payloads[0].as_slice(), true),
                (7, payloads[1].as_slice(), true),
            ],
        );
        fs::write(dir.path().join(name), bytes).unwrap();
        let log = OfflineLog::open(dir.path()).unwrap();
        let items = read_all(&log);
        assert_eq!(indexes(&items), vec![5]);
        match items.last() {
            Some(SegmentItem::Damage { why, .. }) => {
                assert_eq!(why, "entry 7 where 6 was expected")
            }
            other => panic!("{other:?}"),
        }
    }
}
