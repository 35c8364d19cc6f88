//! [`Replayer`]: turns the items of a `FetchMetadata` stream into complete images (pure: no
//! I/O, no clock).
//!
//! Batches are replayed into one pending [`MetadataDelta`]; an image is built when the batch
//! reaches the serving controller's commit index (the broker is caught up) or after
//! [`MAX_PENDING_BATCHES`] batches (bounded catch-up latency and memory). A snapshot replaces
//! the image once its last chunk arrived. Offsets must follow each other exactly: the stream
//! sends every Raft entry, empty ones included, so a gap is an error and the caller
//! reconnects from [`Replayer::next_offset`].

use keel_metadata_log::{MetadataDelta, MetadataImage, Provenance, ReplayError};
use keel_proto::controller::fetch_metadata_item::Item;
use keel_proto::controller::{CommittedBatch, FetchMetadataItem, SnapshotChunk, SnapshotHeader};

/// Batches replayed before an image is built even though the stream is not caught up.
pub const MAX_PENDING_BATCHES: usize = 1024;

/// Why an item could not be applied. After any error the pending (unpublished) batches and
/// any partial snapshot are dropped; the caller refetches from [`Replayer::next_offset`].
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ReplayerError {
    /// A batch skipped offsets.
    #[error("metadata batch at offset {got} does not follow offset {expected_after}")]
    Gap {
        /// Last offset replayed.
        expected_after: u64,
        /// Offset received.
        got: u64,
    },
    /// A committed record did not replay (a bug or a corrupt controller log).
    #[error("metadata record {index} at offset {offset} does not replay: {source}")]
    Replay {
        /// Offset of its batch.
        offset: u64,
        /// Index in the batch (or in the snapshot).
        index: usize,
        /// The replay error.
        source: ReplayError,
    },
    /// A snapshot chunk without a header, or a header inside a snapshot.
    #[error("malformed snapshot in the metadata stream: {0}")]
    Snapshot(String),
}

#[derive(Debug)]
struct SnapshotLoad {
    delta: MetadataDelta,
    provenance: Provenance,
    expected_records: u64,
    seen_records: u64,
}

/// Stream state of the metadata tailer. See the module doc.
#[derive(Debug)]
pub struct Replayer {
    /// The last image built.
    image: MetadataImage,
    /// Batches replayed on `image` but not yet built into an image.
    pending: Option<MetadataDelta>,
    pending_batches: usize,
    /// Offset of the last batch replayed (published or pending).
    replayed_offset: u64,
    snapshot: Option<SnapshotLoad>,
    /// Timestamps of the newest batch of `image` when `image` was built because the stream
    /// reached the commit index (live); none after a catch-up build, a snapshot or a flush.
    live: LiveTimes,
}

/// The timestamps of the newest entry of an image built live (the stream had reached the
/// serving controller's commit index): the start points of the metadata propagation lags
/// (Kafka: `last-applied-record-lag-ms`, KIP-835). Both are the active controller's wall
/// clock, ms since the Unix epoch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LiveTimes {
    /// When the active controller proposed the entry (before its replication and commit);
    /// `None` for entries without one.
    pub appended_ms: Option<i64>,
    /// When the active controller learned it committed (`CommittedBatch.commit_timestamp_ms`,
    /// sent only by the active controller); `None` when the serving controller did not say.
    pub committed_ms: Option<i64>,
}

impl LiveTimes {
    /// Neither time is known.
    pub fn is_empty(&self) -> bool {
        self.appended_ms.is_none() && self.committed_ms.is_none()
    }
}

impl Replayer {
    /// Starts from `image` (empty, or loaded from the local snapshot).
    pub fn new(image: MetadataImage) -> Self {
        Self {
            replayed_offset: image.provenance().offset,
            image,
            pending: None,
            pending_batches: 0,
            snapshot: None,
            live: LiveTimes::default(),
        }
    }

    /// The last image built.
    pub fn image(&self) -> &MetadataImage {
        &self.image
    }

    /// First offset to ask for when (re)connecting.
    pub fn next_offset(&self) -> u64 {
        self.replayed_offset + 1
    }

    /// When the last image built was live (its newest batch reached the serving controller's
    /// commit index): that batch's [`LiveTimes`]. Empty after an image built while catching
    /// up, from a snapshot or by [`Replayer::flush`].
    pub fn live_times(&self) -> LiveTimes {
        self.live
    }

    /// Whether a snapshot is being received (its header came, its last chunk not yet).
    pub fn loading_snapshot(&self) -> bool {
        self.snapshot.is_some()
    }

    /// Builds an image from the pending batches, if any (e.g. when the stream broke).
    pub fn flush(&mut self) -> Option<MetadataImage> {
        self.snapshot = None;
        self.live = LiveTimes::default();
        let delta = self.pending.take()?;
        self.pending_batches = 0;
        self.image = delta.apply();
        Some(self.image.clone())
    }

    /// Applies one stream item; returns a new image when one is complete.
    pub fn apply(
        &mut self,
        item: FetchMetadataItem,
    ) -> Result<Option<MetadataImage>, ReplayerError> {
        let result = self.apply_inner(item);
        if result.is_err() {
            self.pending = None;
            self.pending_batches = 0;
            self.snapshot = None;
            self.replayed_offset = self.image.provenance().offset;
        }
        result
    }

    /// [`Replayer::apply`] by item kind (`apply` drops the pending state after an error).
    fn apply_inner(
        &mut self,
        item: FetchMetadataItem,
    ) -> Result<Option<MetadataImage>, ReplayerError> {
        let commit_index = u64::try_from(item.commit_index).unwrap_or(0);
        match item.item {
            None => Ok(None),
            Some(Item::SnapshotHeader(h)) => self.start_snapshot(&h).map(|()| None),
            Some(Item::SnapshotChunk(chunk)) => self.apply_snapshot_chunk(&chunk),
            Some(Item::Batch(b)) => self.apply_batch(&b, commit_index),
        }
    }

    /// Starts loading the snapshot `h` announces (a new empty delta at its offset and term);
    /// an error if a snapshot is still loading.
    fn start_snapshot(&mut self, h: &SnapshotHeader) -> Result<(), ReplayerError> {
        if self.snapshot.is_some() {
            return Err(ReplayerError::Snapshot(
                "snapshot header before the previous snapshot's last chunk".into(),
            ));
        }
        let provenance = Provenance {
            offset: u64::try_from(h.last_included_offset).unwrap_or(0),
            term: u64::try_from(h.last_included_term).unwrap_or(0),
        };
        let mut delta = MetadataDelta::new(MetadataImage::empty());
        delta.set_provenance(provenance);
        self.snapshot = Some(SnapshotLoad {
            delta,
            provenance,
            expected_records: h.record_count,
            seen_records: 0,
        });
        Ok(())
    }

    /// Replays a chunk of the loading snapshot; after its last chunk the snapshot replaces the
    /// image (pending batches dropped) unless it is older than what was replayed. Errors: no
    /// snapshot loading, a record that does not replay, a record count unlike the header's.
    fn apply_snapshot_chunk(
        &mut self,
        chunk: &SnapshotChunk,
    ) -> Result<Option<MetadataImage>, ReplayerError> {
        let Some(load) = self.snapshot.as_mut() else {
            return Err(ReplayerError::Snapshot("chunk without a header".into()));
        };
        for r in &chunk.records {
            load.delta
                .replay(r)
                .map_err(|source| ReplayerError::Replay {
                    offset: load.provenance.offset,
                    index: load.seen_records as usize,
                    source,
                })?;
            load.seen_records += 1;
        }
        if !chunk.last {
            return Ok(None);
        }
        let load = self.snapshot.take().expect("checked above");
        if load.seen_records != load.expected_records {
            return Err(ReplayerError::Snapshot(format!(
                "header announced {} records, chunks carried {}",
                load.expected_records, load.seen_records
            )));
        }
        if load.provenance.offset < self.replayed_offset {
            // Older than what we hold (cannot happen when we ask from next_offset):
            // never move the image backwards.
            return Ok(None);
        }
        self.pending = None;
        self.pending_batches = 0;
        self.live = LiveTimes::default();
        self.image = load.delta.apply();
        self.replayed_offset = load.provenance.offset;
        Ok(Some(self.image.clone()))
    }

    /// Replays the batch at the next offset into the pending delta (an overlap is skipped, a
    /// gap is an error) and builds an image once the batch reaches `commit_index` or
    /// [`MAX_PENDING_BATCHES`] are pending.
    fn apply_batch(
        &mut self,
        b: &CommittedBatch,
        commit_index: u64,
    ) -> Result<Option<MetadataImage>, ReplayerError> {
        let offset = u64::try_from(b.offset).unwrap_or(0);
        if self.snapshot.is_some() {
            return Err(ReplayerError::Snapshot(
                "batch before the snapshot's last chunk".into(),
            ));
        }
        if offset <= self.replayed_offset {
            return Ok(None); // already applied (reconnect overlap)
        }
        if offset != self.replayed_offset + 1 {
            return Err(ReplayerError::Gap {
                expected_after: self.replayed_offset,
                got: offset,
            });
        }
        let delta = self
            .pending
            .get_or_insert_with(|| MetadataDelta::new(self.image.clone()));
        delta.set_provenance(Provenance {
            offset,
            term: u64::try_from(b.term).unwrap_or(0),
        });
        for (index, r) in b.batch.iter().flat_map(|b| b.records.iter()).enumerate() {
            delta.replay(r).map_err(|source| ReplayerError::Replay {
                offset,
                index,
                source,
            })?;
        }
        self.replayed_offset = offset;
        self.pending_batches += 1;
        let live = offset >= commit_index;
        if live || self.pending_batches >= MAX_PENDING_BATCHES {
            let image = self.flush();
            if live {
                self.live = LiveTimes {
                    appended_ms: (b.append_timestamp_ms > 0).then_some(b.append_timestamp_ms),
                    committed_ms: (b.commit_timestamp_ms > 0).then_some(b.commit_timestamp_ms),
                };
            }
            return Ok(image);
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_metadata_log::records::metadata_record::Record;
    use keel_metadata_log::records::{MetadataBatch, MetadataRecord, NoOpRecord, TopicRecord};

    fn topic(name: &str, n: u8) -> MetadataRecord {
        MetadataRecord {
            record: Some(Record::Topic(TopicRecord {
                name: name.into(),
                topic_id: bytes::Bytes::copy_from_slice(&[n; 16]),
            })),
        }
    }

    fn batch(offset: i64, commit: i64, records: Vec<MetadataRecord>) -> FetchMetadataItem {
        FetchMetadataItem {
            item: Some(Item::Batch(CommittedBatch {
                offset,
                term: 1,
                append_timestamp_ms: 1_000 + offset,
                commit_timestamp_ms: if offset % 2 == 0 { 2_000 + offset } else { -1 },
                batch: Some(MetadataBatch {
                    records,
                    append_timestamp_ms: 0,
                }),
            })),
            commit_index: commit,
            leader: None,
            source: None,
        }
    }

    fn noop() -> MetadataRecord {
        MetadataRecord {
            record: Some(Record::NoOp(NoOpRecord::default())),
        }
    }

    #[test]
    fn batches_build_an_image_when_caught_up() {
        let mut r = Replayer::new(MetadataImage::empty());
        assert_eq!(r.next_offset(), 1);
        assert_eq!(r.apply(batch(1, 3, vec![topic("a", 1)])).unwrap(), None);
        assert_eq!(r.apply(batch(2, 3, vec![])).unwrap(), None);
        assert_eq!(r.next_offset(), 3);
        let img = r.apply(batch(3, 3, vec![noop()])).unwrap().unwrap();
        assert_eq!(img.provenance().offset, 3);
        assert!(img.topics().get_by_name("a").is_some());
        // Live: the newest batch's append timestamp; its server sent no commit time.
        let appended_only = LiveTimes {
            appended_ms: Some(1_003),
            committed_ms: None,
        };
        assert_eq!(r.live_times(), appended_only);
        // Overlap after a reconnect is skipped.
        assert_eq!(r.apply(batch(3, 3, vec![topic("a", 1)])).unwrap(), None);
        assert_eq!(r.live_times(), appended_only);
        // From the active controller: its commit time too.
        r.apply(batch(4, 4, vec![])).unwrap().unwrap();
        assert_eq!(
            r.live_times(),
            LiveTimes {
                appended_ms: Some(1_004),
                committed_ms: Some(2_004),
            }
        );
        // A gap is an error and leaves the published image in place.
        let e = r.apply(batch(6, 6, vec![])).unwrap_err();
        assert_eq!(
            e,
            ReplayerError::Gap {
                expected_after: 4,
                got: 6
            }
        );
        assert_eq!(r.next_offset(), 5);
    }

    #[test]
    fn a_failed_replay_drops_pending_batches() {
        let mut r = Replayer::new(MetadataImage::empty());
        r.apply(batch(1, 1, vec![topic("a", 1)])).unwrap().unwrap();
        assert_eq!(r.apply(batch(2, 9, vec![topic("b", 2)])).unwrap(), None);
        // Same name again: refused by replay.
        assert!(matches!(
            r.apply(batch(3, 9, vec![topic("b", 3)])),
            Err(ReplayerError::Replay { offset: 3, .. })
        ));
        assert_eq!(r.next_offset(), 2, "pending batch 2 is refetched");
        assert!(r.image().topics().get_by_name("b").is_none());
    }

    #[test]
    fn a_snapshot_replaces_the_image() {
        let mut r = Replayer::new(MetadataImage::empty());
        r.apply(batch(1, 1, vec![topic("old", 1)]))
            .unwrap()
            .unwrap();
        let header = |offset, count| FetchMetadataItem {
            item: Some(Item::SnapshotHeader(SnapshotHeader {
                last_included_offset: offset,
                last_included_term: 2,
                record_count: count,
            })),
            commit_index: 20,
            leader: None,
            source: None,
        };
        let chunk = |records, last| FetchMetadataItem {
            item: Some(Item::SnapshotChunk(SnapshotChunk { records, last })),
            commit_index: 20,
            leader: None,
            source: None,
        };
        assert_eq!(r.apply(header(10, 2)).unwrap(), None);
        assert_eq!(r.apply(chunk(vec![topic("x", 7)], false)).unwrap(), None);
        let img = r.apply(chunk(vec![topic("y", 8)], true)).unwrap().unwrap();
        assert!(r.live_times().is_empty(), "a snapshot is not live");
        assert_eq!(
            img.provenance(),
            Provenance {
                offset: 10,
                term: 2
            }
        );
        assert!(img.topics().get_by_name("old").is_none());
        assert!(img.topics().get_by_name("y").is_some());
        assert_eq!(r.next_offset(), 11);
        // A count mismatch is refused.
        r.apply(header(12, 5)).unwrap();
        assert!(matches!(
            r.apply(chunk(vec![], true)),
            Err(ReplayerError::Snapshot(_))
        ));
        assert_eq!(r.next_offset(), 11);
        // A chunk without header is refused.
        assert!(r.apply(chunk(vec![], true)).is_err());
    }

    #[test]
    fn long_catch_up_publishes_every_max_pending_batches() {
        let mut r = Replayer::new(MetadataImage::empty());
        let far = (MAX_PENDING_BATCHES * 3) as i64;
        let mut built = 0;
        for o in 1..=far {
            if r.apply(batch(o, far, vec![])).unwrap().is_some() {
                built += 1;
                // Catch-up builds are not live; the last one reached the commit index.
                let live = if o == far {
                    LiveTimes {
                        appended_ms: Some(1_000 + far),
                        committed_ms: (far % 2 == 0).then_some(2_000 + far),
                    }
                } else {
                    LiveTimes::default()
                };
                assert_eq!(r.live_times(), live, "offset {o}");
            }
        }
        assert_eq!(built, 3);
        assert_eq!(r.image().provenance().offset, far as u64);
    }
}
