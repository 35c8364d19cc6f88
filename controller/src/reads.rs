//! Read-side RPCs served by any controller from its applied state: metadata log reads and
//! streaming, quorum and cluster descriptions.
//!
//! Only committed entries are served: an entry is readable once the local state machine has
//! applied it (applied <= committed), so a reader never sees a record that could be lost.

use std::collections::{BTreeMap, HashSet};
use std::pin::Pin;
use std::time::Duration;

use keel_metadata_log::raft_types::Entry;
use keel_metadata_log::records::MetadataBatch;
use keel_metadata_log::store::state_machine::read_newest_snapshot;
use keel_metadata_log::{MetadataImage, RECORD_TYPE_NAMES, record_topic_id, record_type_name};
use keel_proto::ErrorCode;
use keel_proto::controller::{
    CommittedBatch, ControllerLeader, DescribeQuorumReply, FetchMetadataItem, FetchMetadataRequest,
    MetadataLogRecord, QuorumReplicaState, ReadMetadataLogReply, ReadMetadataLogRequest,
    ReadSource, ReadSourceRole, SnapshotChunk, SnapshotHeader, fetch_metadata_item::Item,
};
use keel_proto::metadata::metadata_record::Record;
use openraft::EntryPayload;
use openraft::storage::RaftLogReader;
use prost::Message;
use tokio::sync::mpsc;
use tokio_stream::Stream;

use crate::node::RaftNode;

/// Default and maximum records per `ReadMetadataLog` reply.
const DEFAULT_MAX_RECORDS: usize = 10_000;
/// Entries read from the log per step when streaming or scanning.
const ENTRIES_PER_READ: u64 = 512;
/// Default snapshot chunk size, bytes.
const DEFAULT_CHUNK_BYTES: usize = 1024 * 1024;
/// Longest long-poll of `ReadMetadataLog`, ms.
const MAX_WAIT_MS: u64 = 30_000;
/// Items buffered per `FetchMetadata` stream (bounded: a slow broker slows its own stream).
const STREAM_BUFFER: usize = 64;

/// The leader hint every reply carries.
pub fn leader_hint(node: &RaftNode) -> ControllerLeader {
    // Read the two fields without cloning the whole metrics (this runs for every reply).
    let (current_leader, current_term) = {
        let m = node.raft.metrics();
        let m = m.borrow();
        (node.known_leader(&m), m.current_term)
    };
    // A leader that lost its quorum does not advertise itself (check-quorum).
    let leader = current_leader.filter(|id| *id != node.node_id || node.is_active());
    match leader {
        Some(id) => ControllerLeader {
            leader_id: id as i32,
            leader_address: node.address_of(id),
            term: current_term as i64,
        },
        None => ControllerLeader {
            leader_id: -1,
            leader_address: String::new(),
            term: current_term as i64,
        },
    }
}

/// Where a read reply's state comes from (issue #24, fresh reads): node `node_id`, at
/// `applied_offset` (the offset of the image or log position the reply was built from), in the
/// standing `hint` (this node's [`leader_hint`]) implies: the active controller names itself,
/// a follower in contact names another, a node out of contact names none.
pub fn read_source(node_id: u64, hint: &ControllerLeader, applied_offset: u64) -> ReadSource {
    let role = if hint.leader_id < 0 {
        ReadSourceRole::OutOfContact
    } else if hint.leader_id as u64 == node_id {
        ReadSourceRole::Active
    } else {
        ReadSourceRole::Follower
    };
    ReadSource {
        node_id: node_id as i32,
        applied_offset: applied_offset as i64,
        role: role as i32,
    }
}

/// Applied (hence committed) offset of this node, inclusive; 0 when nothing applied.
pub fn applied_offset(node: &RaftNode) -> u64 {
    node.images.borrow().provenance().offset
}

/// Committed offset of this node, inclusive: the highest index its log store made durable as
/// committed ([`keel_metadata_log::store::LogStore::committed`]), never below the applied
/// offset (a snapshot installed or loaded at start is applied without a commit record).
pub fn committed_offset(node: &RaftNode, committed: &tokio::sync::watch::Receiver<u64>) -> u64 {
    (*committed.borrow()).max(applied_offset(node))
}

/// First offset still in the Raft log (entries below were purged into a snapshot).
pub fn log_start_offset(node: &RaftNode) -> u64 {
    node.raft
        .metrics()
        .borrow()
        .purged
        .map_or(0, |p| p.index + 1)
}

/// The offset the next Raft entry will get on this node: its last log index + 1 (1 when the
/// log is empty, since metadata offsets start at 1). Reads from beyond it are refused
/// (Kafka's Fetch answers OFFSET_OUT_OF_RANGE above the log end offset).
///
/// Never below the applied offset + 1: right after a restart the state machine has loaded
/// its snapshot before openraft first reports `last_log_index`.
pub fn log_next_offset(node: &RaftNode) -> u64 {
    let last_log_index = node.raft.metrics().borrow().last_log_index.unwrap_or(0);
    last_log_index.max(applied_offset(node)) + 1
}

async fn read_entries(
    node: &RaftNode,
    from: u64,
    to_inclusive: u64,
) -> Result<Vec<Entry>, ErrorCode> {
    if from > to_inclusive {
        return Ok(Vec::new());
    }
    let mut log = node.log.clone();
    log.try_get_log_entries(from..=to_inclusive)
        .await
        .map_err(|e| {
            tracing::error!(error = %e, "reading metadata log");
            ErrorCode::KafkaStorageError
        })
}

/// `ReadMetadataLog`: decoded committed records in `[from, to)` with filters.
///
/// Topic names: from the current image, else (a deleted topic) from its TopicRecord in the
/// scanned range or in the newest snapshot in `snapshot_dir` (which holds every topic that
/// existed at the log start: the log starts right after it).
pub async fn read_metadata_log(
    node: &RaftNode,
    snapshot_dir: &std::path::Path,
    req: ReadMetadataLogRequest,
) -> ReadMetadataLogReply {
    let hint = leader_hint(node);
    let mut reply = ReadMetadataLogReply {
        commit_index: applied_offset(node) as i64,
        log_start_offset: log_start_offset(node) as i64,
        source: Some(read_source(node.node_id, &hint, applied_offset(node))),
        leader: Some(hint),
        ..Default::default()
    };
    let fail = |mut r: ReadMetadataLogReply, code: ErrorCode, msg: String| {
        r.error = Some(code.to_proto(msg));
        r
    };
    let from = match first_offset_to_read(&req, log_start_offset(node), log_next_offset(node)) {
        Ok(from) => from,
        Err((code, msg)) => return fail(reply, code, msg),
    };
    // Long poll: wait for something new to be committed.
    if req.max_wait_ms > 0 && applied_offset(node) < from {
        let mut images = node.images.clone();
        let wait = Duration::from_millis(u64::from(req.max_wait_ms).min(MAX_WAIT_MS));
        let _ =
            tokio::time::timeout(wait, images.wait_for(|i| i.provenance().offset >= from)).await;
        reply.commit_index = applied_offset(node) as i64;
        let hint = leader_hint(node);
        reply.source = Some(read_source(node.node_id, &hint, applied_offset(node)));
        reply.leader = Some(hint);
    }
    let committed = applied_offset(node);
    let to_inclusive = match req.to_offset {
        t if t <= 0 => committed,
        t => (t as u64 - 1).min(committed),
    };
    let max = match req.max_records as usize {
        0 => DEFAULT_MAX_RECORDS,
        n => n.min(DEFAULT_MAX_RECORDS),
    };
    let image = node.images.borrow().clone();
    // Names of topics deleted since the newest snapshot, read from it only when needed: a
    // topic filter naming no current topic, or a record about a topic the image lacks.
    let compacted = log_start_offset(node) > 1;
    let mut snapshot_names: Option<std::collections::HashMap<uuid::Uuid, String>> = None;
    if compacted
        && !req.topic_name.is_empty()
        && image.topics().get_by_name(&req.topic_name).is_none()
    {
        snapshot_names = Some(snapshot_topic_names(snapshot_dir).await);
    }
    let mut filter = RecordFilter::new(&req, &image, snapshot_names.as_ref());
    let mut offset = from;
    'scan: while offset <= to_inclusive {
        let end = (offset + ENTRIES_PER_READ - 1).min(to_inclusive);
        let entries = match read_entries(node, offset, end).await {
            Ok(e) => e,
            Err(code) => return fail(reply, code, "could not read the metadata log".into()),
        };
        if entries.is_empty() {
            break;
        }
        for e in entries {
            let index = e.log_id.index;
            // Pages end at entry boundaries (an entry is never split across replies, so
            // `next_offset` never repeats records); a reply may exceed `max` by one entry.
            if reply.records.len() >= max {
                reply.next_offset = index as i64;
                break 'scan;
            }
            if let EntryPayload::Normal(batch) = &e.payload {
                for (i, r) in batch.records.iter().enumerate() {
                    if !filter.accepts(r) {
                        continue;
                    }
                    reply.records.push(MetadataLogRecord {
                        offset: index as i64,
                        index_in_batch: i as u32,
                        term: e.log_id.leader_id.term as i64,
                        append_timestamp_ms: batch.append_timestamp_ms,
                        record_type: record_type_name(r).to_string(),
                        topic_name: topic_name_of(r, &image),
                        record: Some(r.clone()),
                    });
                }
            }
            offset = index + 1;
        }
        reply.next_offset = offset as i64;
    }
    if reply.next_offset == 0 {
        reply.next_offset = offset as i64;
    }
    let unnamed = |r: &MetadataLogRecord| {
        r.topic_name.is_empty() && r.record.as_ref().and_then(record_topic_id).is_some()
    };
    if compacted && reply.records.iter().any(unnamed) {
        let names = match snapshot_names {
            Some(n) => n,
            None => snapshot_topic_names(snapshot_dir).await,
        };
        // TopicRecords in the range name their ids too (a topic created and deleted after
        // the snapshot).
        let mut names = names;
        for r in &reply.records {
            if let Some(Record::Topic(t)) = r.record.as_ref().and_then(|m| m.record.as_ref())
                && let Some(id) = r.record.as_ref().and_then(record_topic_id)
            {
                names.insert(id, t.name.clone());
            }
        }
        for r in reply.records.iter_mut().filter(|r| unnamed(r)) {
            if let Some(name) = r
                .record
                .as_ref()
                .and_then(record_topic_id)
                .and_then(|id| names.get(&id))
            {
                r.topic_name = name.clone();
            }
        }
    }
    reply
}

/// Topic id -> name of the newest snapshot in `dir`; empty when there is none or it cannot be
/// read (logged: names then stay unknown, the records are still served).
async fn snapshot_topic_names(
    dir: &std::path::Path,
) -> std::collections::HashMap<uuid::Uuid, String> {
    let dir = dir.to_path_buf();
    let read =
        tokio::task::spawn_blocking(move || read_newest_snapshot(&dir).map_err(|e| e.to_string()))
            .await;
    let snapshot = match read {
        Ok(Ok(Some(s))) => s,
        Ok(Ok(None)) => return Default::default(),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "reading the newest snapshot for topic names");
            return Default::default();
        }
        Err(e) => {
            tracing::warn!(error = %e, "reading the newest snapshot for topic names");
            return Default::default();
        }
    };
    snapshot
        .records
        .iter()
        .filter_map(|r| match &r.record {
            Some(Record::Topic(t)) => record_topic_id(r).map(|id| (id, t.name.clone())),
            _ => None,
        })
        .collect()
}

/// Checks a ReadMetadataLog request against the log's bounds (`log_start`: first offset
/// kept, `log_next`: the offset the next entry will get) and returns the first offset to
/// read: `from_offset`, or the log start for 0. INVALID_REQUEST for unknown record types and
/// inverted or negative ranges; OFFSET_OUT_OF_RANGE for an offset compacted into a snapshot,
/// or beyond the log end without a long poll (a long poll waits for it, as `--follow` against
/// a lagging follower does).
fn first_offset_to_read(
    req: &ReadMetadataLogRequest,
    log_start: u64,
    log_next: u64,
) -> Result<u64, (ErrorCode, String)> {
    if let Some(bad) = req
        .record_types
        .iter()
        .find(|t| !RECORD_TYPE_NAMES.contains(&t.as_str()))
    {
        return Err((
            ErrorCode::InvalidRequest,
            format!("unknown record type {bad:?}"),
        ));
    }
    if req.from_offset < 0 {
        return Err((ErrorCode::InvalidRequest, "from_offset must be >= 0".into()));
    }
    if req.to_offset > 0 && req.from_offset > req.to_offset {
        return Err((
            ErrorCode::InvalidRequest,
            format!(
                "from_offset {} is after to_offset {}",
                req.from_offset, req.to_offset
            ),
        ));
    }
    if req.max_wait_ms == 0 && req.from_offset as u64 > log_next {
        return Err((
            ErrorCode::OffsetOutOfRange,
            format!(
                "from_offset {} is beyond the log end (next offset {log_next})",
                req.from_offset
            ),
        ));
    }
    let start = log_start.max(1);
    let from = if req.from_offset == 0 {
        start
    } else {
        req.from_offset as u64
    };
    if from < start {
        return Err((
            ErrorCode::OffsetOutOfRange,
            format!("offset {from} is below the log start {start} (compacted into a snapshot)"),
        ));
    }
    Ok(from)
}

/// The record-type and topic filters of a ReadMetadataLog request, applied in log order.
struct RecordFilter<'a> {
    /// Record type names asked for; empty = every type.
    types: HashSet<&'a str>,
    /// The topic asked for; empty = every record.
    topic_name: &'a str,
    /// Ids the topic name had: in the current image, and in every TopicRecord of that name
    /// seen so far in the scan (a deleted or re-created topic keeps its old records).
    topic_ids: HashSet<uuid::Uuid>,
}

impl<'a> RecordFilter<'a> {
    /// `snapshot_names`: id -> name of the newest snapshot's topics, when read (a deleted
    /// topic's id is known only there once its TopicRecord was compacted).
    fn new(
        req: &'a ReadMetadataLogRequest,
        image: &MetadataImage,
        snapshot_names: Option<&std::collections::HashMap<uuid::Uuid, String>>,
    ) -> Self {
        let mut topic_ids = HashSet::new();
        if !req.topic_name.is_empty()
            && let Some(t) = image.topics().get_by_name(&req.topic_name)
        {
            topic_ids.insert(t.id);
        }
        if !req.topic_name.is_empty() {
            topic_ids.extend(
                snapshot_names
                    .into_iter()
                    .flatten()
                    .filter(|(_, n)| **n == req.topic_name)
                    .map(|(id, _)| *id),
            );
        }
        RecordFilter {
            types: req.record_types.iter().map(String::as_str).collect(),
            topic_name: &req.topic_name,
            topic_ids,
        }
    }

    /// Whether `r` is shown; records must come in log order (a TopicRecord teaches the
    /// filter its topic's id).
    fn accepts(&mut self, r: &keel_proto::metadata::MetadataRecord) -> bool {
        if let Some(Record::Topic(t)) = &r.record
            && t.name == self.topic_name
            && let Some(id) = record_topic_id(r)
        {
            self.topic_ids.insert(id);
        }
        let type_ok = self.types.is_empty() || self.types.contains(record_type_name(r));
        type_ok
            && (self.topic_name.is_empty() || record_is_about(r, self.topic_name, &self.topic_ids))
    }
}

fn record_is_about(
    r: &keel_proto::metadata::MetadataRecord,
    topic: &str,
    ids: &HashSet<uuid::Uuid>,
) -> bool {
    match &r.record {
        Some(Record::Config(c)) => c.resource_name == topic && c.resource_type == 2,
        _ => record_topic_id(r).is_some_and(|id| ids.contains(&id)),
    }
}

fn topic_name_of(r: &keel_proto::metadata::MetadataRecord, image: &MetadataImage) -> String {
    match &r.record {
        Some(Record::Topic(t)) => t.name.clone(),
        Some(Record::Config(c)) if c.resource_type == 2 => c.resource_name.clone(),
        _ => record_topic_id(r)
            .and_then(|id| image.topics().by_id.get(&id).map(|t| t.name.clone()))
            .unwrap_or_default(),
    }
}

/// The `FetchMetadata` stream type.
pub type FetchStream = Pin<Box<dyn Stream<Item = Result<FetchMetadataItem, tonic::Status>> + Send>>;

/// `FetchMetadata`: a snapshot when `from_offset` is below the log start (or 0 and a snapshot
/// exists), then every committed entry from there on, forever (until the client goes away).
/// Entries without records (Raft blank and membership entries) are sent as empty batches so
/// the receiver's applied offset follows the log exactly.
pub fn fetch_metadata(
    node: RaftNode,
    snapshot_dir: std::path::PathBuf,
    req: FetchMetadataRequest,
) -> FetchStream {
    let (tx, rx) = mpsc::channel(STREAM_BUFFER);
    tokio::spawn(async move {
        if let Err(status) = stream_metadata(&node, &snapshot_dir, req, &tx).await {
            let _ = tx.send(Err(status)).await;
        }
    });
    Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))
}

async fn stream_metadata(
    node: &RaftNode,
    snapshot_dir: &std::path::Path,
    req: FetchMetadataRequest,
    tx: &ItemSender,
) -> Result<(), tonic::Status> {
    if req.from_offset < 0 {
        return Err(tonic::Status::invalid_argument("from_offset must be >= 0"));
    }
    let log_next = log_next_offset(node);
    if req.from_offset as u64 > log_next {
        // The client has applied entries this node does not even have (it followed another
        // controller, or its state is not from this cluster): it must go elsewhere rather
        // than wait here for offsets that may never be these.
        return Err(tonic::Status::out_of_range(format!(
            "OFFSET_OUT_OF_RANGE: from_offset {} is beyond the log end of this controller \
             (next offset {log_next})",
            req.from_offset
        )));
    }
    let chunk_bytes = match req.max_bytes_per_item as usize {
        0 => DEFAULT_CHUNK_BYTES,
        n => n,
    };
    let mut next = (req.from_offset as u64).max(1);
    if next < log_start_offset(node) {
        match send_snapshot(node, snapshot_dir, chunk_bytes, tx).await? {
            Some(after_snapshot) => next = after_snapshot,
            None => return Ok(()),
        }
    }
    stream_committed(node, next, tx).await
}

/// Where [`stream_metadata`] sends its items.
type ItemSender = mpsc::Sender<Result<FetchMetadataItem, tonic::Status>>;

/// Sends the newest snapshot: its header, then its records in chunks of about `chunk_bytes`
/// (the last one marked `last`, an empty one for an empty snapshot). Returns the offset after
/// the snapshot, or `None` when the client went away.
async fn send_snapshot(
    node: &RaftNode,
    snapshot_dir: &std::path::Path,
    chunk_bytes: usize,
    tx: &ItemSender,
) -> Result<Option<u64>, tonic::Status> {
    // Reading and decoding a large snapshot takes a while: off the async workers, which
    // also serve the Raft RPCs.
    let dir = snapshot_dir.to_path_buf();
    let snap = tokio::task::spawn_blocking(move || {
        read_newest_snapshot(&dir)
            .map_err(|e| tonic::Status::unavailable(format!("reading snapshot: {e}")))
    })
    .await
    .map_err(|e| tonic::Status::internal(format!("reading snapshot: {e}")))??
    .ok_or_else(|| tonic::Status::unavailable("log purged but no snapshot found"))?;
    let h = &snap.header;
    let commit = applied_offset(node) as i64;
    let item = |item: Item| {
        let hint = leader_hint(node);
        Ok(FetchMetadataItem {
            item: Some(item),
            commit_index: commit,
            source: Some(read_source(node.node_id, &hint, commit as u64)),
            leader: Some(hint),
        })
    };
    let header = SnapshotHeader {
        last_included_offset: h.provenance.offset as i64,
        last_included_term: h.provenance.term as i64,
        record_count: h.record_count,
    };
    if tx.send(item(Item::SnapshotHeader(header))).await.is_err() {
        return Ok(None);
    }
    let after = h.provenance.offset + 1;
    for chunk in snapshot_chunks(snap.records, chunk_bytes) {
        if tx.send(item(Item::SnapshotChunk(chunk))).await.is_err() {
            return Ok(None);
        }
    }
    Ok(Some(after))
}

/// Splits snapshot records into chunks that each close once they reach `chunk_bytes`
/// (encoded), in order; the last chunk is marked `last`. No records give one empty last
/// chunk, so a receiver always sees the end of the snapshot.
fn snapshot_chunks(
    records: Vec<keel_proto::metadata::MetadataRecord>,
    chunk_bytes: usize,
) -> Vec<SnapshotChunk> {
    let mut chunks = Vec::new();
    let mut chunk = SnapshotChunk::default();
    let mut size = 0;
    for r in records {
        size += r.encoded_len();
        chunk.records.push(r);
        if size >= chunk_bytes {
            chunks.push(std::mem::take(&mut chunk));
            size = 0;
        }
    }
    if !chunk.records.is_empty() || chunks.is_empty() {
        chunks.push(chunk);
    }
    if let Some(last) = chunks.last_mut() {
        last.last = true;
    }
    chunks
}

/// Sends every committed entry from `next` on, waiting for new commits, until the client
/// goes away. Entries without records (Raft blank and membership entries) go as empty
/// batches. OUT_OF_RANGE when `next` was purged meanwhile (the client restarts from 0).
async fn stream_committed(
    node: &RaftNode,
    mut next: u64,
    tx: &ItemSender,
) -> Result<(), tonic::Status> {
    // Entries are sent once committed, not once this node's state machine applied them: a
    // follower controller serving brokers applied a burst of large entries 60-200 ms after
    // learning of their commit, and brokers waited for that (a kill -9 at 100,000 partitions).
    let mut committed_rx = node.log.committed();
    let mut images = node.images.clone();
    loop {
        let committed = committed_offset(node, &committed_rx);
        if next > committed {
            // Wait for the next commit (or an applied snapshot beyond it, or the client to
            // leave).
            tokio::select! {
                r = committed_rx.wait_for(|c| *c >= next) => {
                    if r.is_err() { return Ok(()); }
                }
                r = images.wait_for(|i| i.provenance().offset >= next) => {
                    if r.is_err() { return Ok(()); }
                }
                _ = tx.closed() => return Ok(()),
            }
            continue;
        }
        let end = (next + ENTRIES_PER_READ - 1).min(committed);
        let entries = read_entries(node, next, end)
            .await
            .map_err(|_| tonic::Status::unavailable("could not read the metadata log"))?;
        if entries.first().is_none_or(|e| e.log_id.index != next) {
            // Purged under us: the client must restart from a snapshot.
            return Err(tonic::Status::out_of_range(format!(
                "offset {next} is no longer in the log; fetch again from 0 to get the snapshot"
            )));
        }
        // This node's term while it is the active controller: it committed the entries of
        // that term itself (earlier terms' entries it may have learned of as a follower).
        let leader_term = node
            .is_active()
            .then(|| node.raft.metrics().borrow().current_term);
        for e in entries {
            let (records, ts) = match e.payload {
                EntryPayload::Normal(b) => (b.records, b.append_timestamp_ms),
                _ => (Vec::new(), 0),
            };
            let hint = leader_hint(node);
            // Only the active controller's commit time of an entry of its own term is the
            // commit (see the proto field).
            let commit_timestamp_ms = match leader_term {
                Some(term) if e.log_id.leader_id.term == term => {
                    node.log.commit_time_ms(e.log_id.index).unwrap_or(-1)
                }
                _ => -1,
            };
            let item = FetchMetadataItem {
                item: Some(Item::Batch(CommittedBatch {
                    offset: e.log_id.index as i64,
                    term: e.log_id.leader_id.term as i64,
                    append_timestamp_ms: ts,
                    commit_timestamp_ms,
                    batch: Some(MetadataBatch {
                        records,
                        append_timestamp_ms: ts,
                    }),
                })),
                commit_index: committed as i64,
                source: Some(read_source(node.node_id, &hint, applied_offset(node))),
                leader: Some(hint),
            };
            if tx.send(Ok(item)).await.is_err() {
                return Ok(());
            }
            next = e.log_id.index + 1;
        }
    }
}

/// The end of a NOT_CONTROLLER message: which controller to ask, or that none is known yet
/// (an election, or no quorum): `ask node 2 at 127.0.0.1:9094` / `no active controller is
/// known (election in progress, or no quorum)`.
pub fn whom_to_ask(hint: &ControllerLeader) -> String {
    if hint.leader_id < 0 {
        "no active controller is known (election in progress, or no quorum)".to_string()
    } else if hint.leader_address.is_empty() {
        format!("ask node {}", hint.leader_id)
    } else {
        format!("ask node {} at {}", hint.leader_id, hint.leader_address)
    }
}

/// `DescribeQuorum`: leader, term, commit index and per-voter replication progress. Only the
/// leader knows follower progress; other nodes answer NOT_CONTROLLER with a hint.
pub fn describe_quorum(
    node: &RaftNode,
    cluster_id: &str,
    brokers: &BTreeMap<i32, SessionView>,
) -> DescribeQuorumReply {
    let m = node.raft.metrics().borrow().clone();
    let hint = leader_hint(node);
    let mut reply = DescribeQuorumReply {
        cluster_id: cluster_id.to_string(),
        leader_id: hint.leader_id,
        term: m.current_term as i64,
        commit_index: m.last_applied.map_or(0, |l| l.index) as i64,
        high_watermark: m.last_applied.map_or(0, |l| l.index) as i64 + 1,
        log_start_offset: log_start_offset(node) as i64,
        source: Some(read_source(
            node.node_id,
            &hint,
            m.last_applied.map_or(0, |l| l.index),
        )),
        leader: Some(hint.clone()),
        ..Default::default()
    };
    let Some(replication) = m.replication.as_ref().filter(|_| node.is_active()) else {
        reply.error = Some(ErrorCode::NotController.to_proto(format!(
            "node {} is not the active controller; {}",
            node.node_id,
            crate::reads::whom_to_ask(&hint)
        )));
        return reply;
    };
    let leader_last = m.last_log_index.unwrap_or(0) as i64;
    let now_ms = keel_runtime::clock::wall_clock_ms();
    let members = crate::node::members_of(&m);
    let state = |id: u64, member: &keel_metadata_log::raft_types::ControllerNode| {
        let is_leader = id == node.node_id;
        // A member that has acknowledged nothing to this leader (down, unreachable) has no
        // known position: -1, not "index 0".
        let last = if is_leader {
            Some(leader_last)
        } else {
            replication
                .get(&id)
                .copied()
                .flatten()
                .map(|l| l.index as i64)
        };
        let (fetch_ms, caught_up_ms) = if is_leader {
            (now_ms, now_ms)
        } else {
            node.peer_acks
                .get(id)
                .map_or((-1, -1), |a| (a.last_fetch_ms, a.last_caught_up_ms))
        };
        QuorumReplicaState {
            replica_id: id as i32,
            address: node
                .configured_voters
                .get(&id)
                .cloned()
                .unwrap_or_else(|| member.addr.clone()),
            last_log_index: last.unwrap_or(-1),
            lag: last.map_or(-1, |l| leader_last - l),
            last_fetch_timestamp_ms: fetch_ms,
            last_caught_up_timestamp_ms: caught_up_ms,
            is_leader,
            directory_id: member
                .directory_id
                .map(keel_metadata_log::raft_types::directory_id_text)
                .unwrap_or_default(),
        }
    };
    for (id, member) in &members.voters {
        reply.voters.push(state(*id, member));
    }
    // Controllers that follow the log without voting (added as observers, or being added),
    // then the brokers.
    for (id, member) in &members.observers {
        reply.observers.push(state(*id, member));
    }
    reply
        .observers
        .extend(observers(&node.images.borrow(), brokers, leader_last));
    reply
}

/// One broker's heartbeat session as the active controller publishes it for reads
/// (DescribeCluster, DescribeQuorum's observers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionView {
    /// Last applied metadata offset the broker reported; -1 = none yet.
    pub metadata_offset: i64,
    /// Wall-clock time of its last valid heartbeat, ms since the Unix epoch.
    pub last_heartbeat_timestamp_ms: i64,
}

/// The brokers as the quorum's observers (Kafka lists its brokers there: they fetch the
/// metadata log without voting): each registered broker with its advertised address, the
/// metadata offset it last reported applied and its last heartbeat, in id order. Brokers
/// without a session on this controller report -1s.
fn observers(
    image: &MetadataImage,
    sessions: &BTreeMap<i32, SessionView>,
    leader_last: i64,
) -> Vec<QuorumReplicaState> {
    image
        .brokers()
        .values()
        .map(|b| {
            let session = sessions.get(&b.id);
            let offset = session.map_or(-1, |s| s.metadata_offset);
            QuorumReplicaState {
                replica_id: b.id,
                address: b
                    .endpoints
                    .first()
                    .map(|e| format!("{}:{}", e.host, e.port))
                    .unwrap_or_default(),
                last_log_index: offset,
                lag: if offset < 0 {
                    -1
                } else {
                    (leader_last - offset).max(0)
                },
                last_fetch_timestamp_ms: session.map_or(-1, |s| s.last_heartbeat_timestamp_ms),
                last_caught_up_timestamp_ms: -1,
                is_leader: false,
                directory_id: String::new(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_proto::metadata::{MetadataRecord, NoOpRecord};

    fn noop() -> MetadataRecord {
        MetadataRecord {
            record: Some(Record::NoOp(NoOpRecord {})),
        }
    }

    #[test]
    fn a_read_source_names_the_standing_its_leader_hint_implies() {
        let hint = |leader_id| ControllerLeader {
            leader_id,
            leader_address: String::new(),
            term: 3,
        };
        let role = |leader_id| read_source(2, &hint(leader_id), 40).role();
        assert_eq!(role(2), ReadSourceRole::Active);
        assert_eq!(role(1), ReadSourceRole::Follower);
        assert_eq!(role(-1), ReadSourceRole::OutOfContact);
        let s = read_source(2, &hint(1), 40);
        assert_eq!((s.node_id, s.applied_offset), (2, 40));
    }

    #[test]
    fn snapshot_chunks_close_at_the_byte_budget_and_mark_the_last() {
        let one = noop().encoded_len();
        let chunks = snapshot_chunks(vec![noop(); 5], 2 * one);
        let sizes: Vec<_> = chunks.iter().map(|c| (c.records.len(), c.last)).collect();
        assert_eq!(sizes, [(2, false), (2, false), (1, true)]);
        let exact = snapshot_chunks(vec![noop(); 4], 2 * one);
        let sizes: Vec<_> = exact.iter().map(|c| (c.records.len(), c.last)).collect();
        assert_eq!(sizes, [(2, false), (2, true)]);
        let empty = snapshot_chunks(vec![], 1024);
        assert_eq!(empty.len(), 1);
        assert!(empty[0].last && empty[0].records.is_empty());
    }

    #[test]
    fn read_bounds_are_checked_before_reading() {
        let req = |from: i64, to: i64, wait: u32| ReadMetadataLogRequest {
            from_offset: from,
            to_offset: to,
            max_wait_ms: wait,
            ..Default::default()
        };
        // Log holds 5..=9 (next offset 10).
        assert_eq!(first_offset_to_read(&req(0, 0, 0), 5, 10), Ok(5));
        assert_eq!(first_offset_to_read(&req(7, 9, 0), 5, 10), Ok(7));
        let code = |r: Result<u64, (ErrorCode, String)>| r.unwrap_err().0;
        assert_eq!(
            code(first_offset_to_read(&req(-1, 0, 0), 5, 10)),
            ErrorCode::InvalidRequest
        );
        assert_eq!(
            code(first_offset_to_read(&req(8, 7, 0), 5, 10)),
            ErrorCode::InvalidRequest
        );
        assert_eq!(
            code(first_offset_to_read(&req(3, 0, 0), 5, 10)),
            ErrorCode::OffsetOutOfRange
        );
        assert_eq!(
            code(first_offset_to_read(&req(11, 0, 0), 5, 10)),
            ErrorCode::OffsetOutOfRange
        );
        // A long poll may ask past the end: it waits.
        assert_eq!(first_offset_to_read(&req(11, 0, 500), 5, 10), Ok(11));
        let mut typed = req(0, 0, 0);
        typed.record_types = vec!["PartitionChange".into()];
        let e = first_offset_to_read(&typed, 5, 10).unwrap_err();
        assert_eq!(
            e,
            (
                ErrorCode::InvalidRequest,
                "unknown record type \"PartitionChange\"".into()
            )
        );
    }
}
