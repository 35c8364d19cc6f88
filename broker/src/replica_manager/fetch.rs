//! Reads: Fetch for consumers and followers (long poll), ListOffsets, OffsetsForLeaderEpoch
//! and the log part of DescribeReplicas (DESIGN §5; Kafka `ReplicaManager.fetchMessages` +
//! `DelayedFetch`, `Partition.fetchOffsetForTimestamp`, `Partition.lastOffsetForLeaderEpoch`).
//!
//! A fetch reads every partition once under its lock; when fewer than `min_bytes` came back
//! and no partition failed or diverged, it waits for the next data change (append,
//! truncation, HW change) or `max_wait_ms`, then reads again. A follower fetch is handled by
//! [`crate::replica::PartitionState::handle_follower_fetch`] on every read, so the follower's
//! LEO and caught-up time are those of its latest request. A follower fetch in an incremental
//! fetch session (KIP-227, [`super::fetch_session`]) reads every partition of the session
//! the same way and answers only those with something new. A follower fetch of a throttled
//! replica may get no records while the leader's replication quota is exceeded
//! ([`super::throttle`], KIP-73).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use keel_metadata_log::MetadataImage;
use keel_metadata_log::configs::ThrottledReplicas;
use keel_proto::ErrorCode;
use keel_proto::broker::{
    DescribeReplicasReply, EpochEndOffset, EpochEndOffsetResult, EpochStartOffset, FetchPartition,
    FetchPartitionData, FetchReply, FetchRequest, FetchSessionReply, FetchTopic,
    FetchableTopicResponse, FollowerState, LeaderIdAndEpoch, ListOffsetsPartitionResponse,
    ListOffsetsReply, ListOffsetsRequest, ListOffsetsTopicResponse, OffsetForLeaderTopicResult,
    OffsetsForLeaderEpochReply, OffsetsForLeaderEpochRequest, ReplicaRole,
};
use keel_proto::limits::clip;

use super::fetch_session::{Begin, SessionCache};
use super::produce::{check_topic_id, log_error_code};
use super::throttle::{Side, Throttles, Verdict};
use super::{HostedPartition, PartitionInner, ReplicaManager};
use crate::replica::{
    FollowerFetchRequest, IsrEligibility, LeaderFetchDecision, ListOffsetsAnswer, OffsetSpec,
    OneBroker, Role, epoch_from_wire,
};

/// Longest long poll accepted, ms (a larger `max_wait_ms` is capped).
pub const MAX_WAIT_MS: u64 = 30_000;
/// Cap of a whole fetch reply's records, bytes, whatever the request asks (Kafka's broker
/// `fetch.max.bytes`, 55 MiB; Keel stays below the gRPC message limit
/// [`keel_proto::limits::MAX_BROKER_MESSAGE_BYTES`]).
pub const FETCH_MAX_BYTES_CAP: usize = 32 << 20;
/// Cap of one partition's records in a reply, bytes (a single larger batch is still
/// returned whole; batches are bounded by `max.message.bytes`).
pub const PARTITION_MAX_BYTES_CAP: usize = 16 << 20;

/// The byte budget of one fetch reply (KIP-74; Kafka `ReplicaManager.readFromLocalLog`):
/// partitions are read in request order, each up to `min(partition_max_bytes, what is left
/// of max_bytes)`. Until a partition returned records, the first batch is returned whole
/// even when it is larger than that (Kafka's `minOneMessage`), so a consumer always makes
/// progress; that is the only way a reply exceeds `max_bytes`. Later partitions never take
/// more than is left: a batch that does not fit is not returned (it comes first in a later
/// fetch). Where Kafka also holds later partitions to `partition_max_bytes` for a first batch
/// larger than it, Keel returns it if it fits what is left of `max_bytes`: Keel's fetchers
/// do not rotate partitions (Kafka's fetch sessions do), and a partition whose next batch
/// exceeds `partition_max_bytes` must not starve behind partitions that always have data.
///
/// `max_bytes` and `partition_max_bytes` are capped at [`FETCH_MAX_BYTES_CAP`] and
/// [`PARTITION_MAX_BYTES_CAP`]; 0 means "only the first batch of the first non-empty
/// partition" (Kafka: the limits are taken as sent; negative values are refused by
/// [`crate::bounds::fetch`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchBudget {
    /// Bytes of `max_bytes` not used yet.
    left: usize,
    /// No partition returned records yet (the first batch is owed for progress).
    first: bool,
}

impl FetchBudget {
    /// The budget of a reply with `max_bytes` (capped at [`FETCH_MAX_BYTES_CAP`]).
    pub fn new(max_bytes: usize) -> Self {
        Self {
            left: max_bytes.min(FETCH_MAX_BYTES_CAP),
            first: true,
        }
    }

    /// The `max_bytes` to pass to [`crate::log::Log::read`] for the next partition, or `None`
    /// when nothing may be read from it (the budget is spent after a non-empty partition).
    pub fn limit(&self, partition_max_bytes: usize) -> Option<usize> {
        if !self.first && self.left == 0 {
            return None;
        }
        Some(
            partition_max_bytes
                .min(PARTITION_MAX_BYTES_CAP)
                .min(self.left),
        )
    }

    /// Accounts for `records` read with [`FetchBudget::limit`] and returns what the reply may
    /// carry: all of them, or nothing when a later partition's first batch exceeds what is
    /// left (the log returns a first batch whole whatever the limit).
    pub fn take(&mut self, records: Bytes) -> Bytes {
        if records.is_empty() {
            return records;
        }
        if !self.first && records.len() > self.left {
            return Bytes::new();
        }
        self.first = false;
        self.left = self.left.saturating_sub(records.len());
        records
    }
}

fn error_data(partition: i32, code: ErrorCode, message: String) -> FetchPartitionData {
    FetchPartitionData {
        partition_index: partition,
        error: Some(code.to_proto(message)),
        high_watermark: -1,
        last_stable_offset: -1,
        log_start_offset: -1,
        ..Default::default()
    }
}

/// A fetch partition answer with no records yet: the HW (also the LSO: Keel has no
/// transactions) and the log start offset.
fn offsets_data(partition: i32, high_watermark: i64, log_start_offset: i64) -> FetchPartitionData {
    FetchPartitionData {
        partition_index: partition,
        high_watermark,
        last_stable_offset: high_watermark,
        log_start_offset,
        ..Default::default()
    }
}

/// What the fetch rules decided for one partition, under its lock.
enum PartitionRead {
    /// Read whole batches from `from` below `upper` (exclusive) and answer with these offsets.
    Read {
        from: i64,
        upper: i64,
        high_watermark: i64,
        log_start_offset: i64,
    },
    /// Answer the follower now with where its log diverges (KIP-320); nothing is read.
    Diverging {
        diverging: EpochEndOffset,
        high_watermark: i64,
        log_start_offset: i64,
    },
    /// Answer this error now ([`ReplicaManager::fetch_error`]).
    Refused(ErrorCode),
}

/// The replication rules' view of a follower's fetch of partition `p` (`current_leader_epoch`
/// already decoded as `epoch`); -1 on the wire means "not sent".
fn follower_fetch_request(
    req: &FetchRequest,
    p: &FetchPartition,
    epoch: Option<i32>,
) -> FollowerFetchRequest {
    FollowerFetchRequest {
        replica_id: req.replica_id,
        broker_epoch: (req.broker_epoch >= 0).then_some(req.broker_epoch),
        fetch_offset: p.fetch_offset,
        last_fetched_epoch: epoch_from_wire(p.last_fetched_epoch),
        current_leader_epoch: epoch,
        log_start_offset: (p.log_start_offset >= 0).then_some(p.log_start_offset),
    }
}

/// A consumer's read per [`crate::replica::PartitionState::check_consumer_fetch`] (from the
/// leader only, below the HW).
fn plan_consumer_read(
    state: &crate::replica::PartitionState,
    fetch_offset: i64,
    epoch: Option<i32>,
) -> PartitionRead {
    match state.check_consumer_fetch(fetch_offset, epoch) {
        Ok(r) => PartitionRead::Read {
            from: r.fetch_offset,
            upper: r.upper_bound_exclusive,
            high_watermark: r.high_watermark,
            log_start_offset: r.log_start_offset,
        },
        Err(code) => PartitionRead::Refused(code),
    }
}

/// What a follower's fetch reads each partition of one topic with: the latest metadata, the
/// follower's registration looked up once ([`OneBroker`]) and the topic's leader-side
/// throttled replicas (KIP-73), looked up once per topic.
#[derive(Clone, Copy)]
struct FollowerView<'a> {
    image: &'a MetadataImage,
    eligibility: &'a OneBroker<'a>,
    throttles: Option<&'a ThrottledReplicas>,
}

/// A session taken from the cache by a fetch in progress: put back by
/// [`BusySession::finish`], or dropped from the cache when the fetch ends without a reply
/// (the client went away; its follower opens a new session).
struct BusySession<'a> {
    cache: &'a std::sync::Mutex<SessionCache>,
    /// Cleared by `finish`.
    id: Option<i32>,
}

impl BusySession<'_> {
    fn finish(mut self, session: Box<super::fetch_session::Session>) {
        self.id = None;
        self.cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .finish(session);
    }
}

impl Drop for BusySession<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.id {
            self.cache
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .release(id);
        }
    }
}

impl ReplicaManager {
    /// Serves a Fetch (see the module doc).
    pub async fn fetch(&self, req: FetchRequest) -> FetchReply {
        let started = std::time::Instant::now();
        let _in_flight = super::metrics::InFlightFetch::enter(req.replica_id >= 0);
        let reply = self.fetch_inner(&req).await;
        super::metrics::record_fetch(
            req.replica_id >= 0,
            started.elapsed(),
            reply_bytes(&reply) as u64,
        );
        reply
    }

    /// Serves `req` sessionless or in its fetch session ([`super::fetch_session`], KIP-227).
    async fn fetch_inner(&self, req: &FetchRequest) -> FetchReply {
        let begin = self
            .shared
            .fetch_sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .begin(req);
        match begin {
            Begin::Sessionless => self.long_poll(req, &req.topics).await,
            Begin::Full => {
                let mut reply = self.long_poll(req, &req.topics).await;
                reply.session = Some(FetchSessionReply { session_id: 0 });
                reply
            }
            Begin::Refuse(code, message) => FetchReply {
                error: Some(code.to_proto(message)),
                ..Default::default()
            },
            Begin::Session(mut session) => {
                let busy = BusySession {
                    cache: &self.shared.fetch_sessions,
                    id: Some(session.id()),
                };
                let mut reply = self.long_poll(req, session.topics()).await;
                session.answer(&mut reply);
                busy.finish(session);
                reply
            }
        }
    }

    /// Reads `topics` (the request's, or its session's) until `min_bytes` of records, an
    /// error or a divergence, or `max_wait_ms`. Reading again needs a data change (append,
    /// truncation, HW or role change: [`ReplicaManager::data_changed`]): when `max_wait_ms`
    /// passes without one, the last read is the answer, as it would be read again. A
    /// follower's fetch state (LEO, caught-up time) is thus taken when the request arrives and
    /// at each change, as Kafka updates it once per request (`ReplicaManager.fetchMessages`);
    /// reading 30,000 idle partitions again at every expiry doubled the leader's idle work.
    async fn long_poll(&self, req: &FetchRequest, topics: &[FetchTopic]) -> FetchReply {
        let max_wait = u64::try_from(req.max_wait_ms).unwrap_or(0).min(MAX_WAIT_MS);
        let deadline = tokio::time::Instant::now() + Duration::from_millis(max_wait);
        let min_bytes = usize::try_from(req.min_bytes).unwrap_or(0).max(1);
        loop {
            let changed = self.data_changed();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let (reply, bytes, done) = self.read_once(req, topics);
            if done || bytes >= min_bytes || tokio::time::Instant::now() >= deadline {
                return reply;
            }
            tokio::select! {
                _ = changed => {}
                _ = tokio::time::sleep_until(deadline) => return reply,
            }
        }
    }

    /// Reads every partition of `topics` once, for `req`. Returns the reply (one answer per
    /// partition, in order), the record bytes in it, and whether it must be answered now (an
    /// error or a divergence).
    fn read_once(&self, req: &FetchRequest, topics: &[FetchTopic]) -> (FetchReply, usize, bool) {
        let follower = req.replica_id >= 0;
        let mut budget = FetchBudget::new(usize::try_from(req.max_bytes).unwrap_or(0));
        let mut total = 0usize;
        let mut done = false;
        let image = follower.then(|| self.image());
        let eligibility = image
            .as_ref()
            .map(|img| OneBroker::new(img, req.replica_id));
        let mut responses = Vec::with_capacity(topics.len());
        for t in topics {
            let mut partitions = Vec::with_capacity(t.partitions.len());
            let throttles = image.as_ref().and_then(|img| {
                Throttles::topic_list(img, Side::Leader, &t.topic, self.broker_id())
            });
            let follower_view =
                image
                    .as_ref()
                    .zip(eligibility.as_ref())
                    .map(|(image, eligibility)| FollowerView {
                        image,
                        eligibility,
                        throttles: throttles.as_ref(),
                    });
            for p in &t.partitions {
                let (data, answer_now) = self.read_partition(req, t, p, follower_view, &mut budget);
                total += data.records.len();
                done |= answer_now;
                partitions.push(data);
            }
            responses.push(FetchableTopicResponse {
                topic: t.topic.clone(),
                topic_id: t.topic_id.clone(),
                partitions,
            });
        }
        (
            FetchReply {
                responses,
                ..Default::default()
            },
            total,
            done,
        )
    }

    /// Reads partition `p` of `t` once under its lock, within `budget`: a follower's fetch
    /// when `follower` is given, else a consumer's. Returns its answer and whether the fetch
    /// must be answered now (an error or a divergence).
    fn read_partition(
        &self,
        req: &FetchRequest,
        t: &FetchTopic,
        p: &FetchPartition,
        follower: Option<FollowerView<'_>>,
        budget: &mut FetchBudget,
    ) -> (FetchPartitionData, bool) {
        let Some(hp) = self.partition(&t.topic, p.partition) else {
            let message = format!("{}-{} is not hosted here", clip(&t.topic), p.partition);
            let code = ErrorCode::UnknownTopicOrPartition;
            return (error_data(p.partition, code, message), true);
        };
        if let Some(code) = check_topic_id(&t.topic_id, hp.topic_id()) {
            let message = format!("topic id of {}", clip(&t.topic));
            return (error_data(p.partition, code, message), true);
        }
        let mut part_max = usize::try_from(p.partition_max_bytes).unwrap_or(0);
        let now = self.now_ms();
        let mut inner = hp.lock();
        let inner = &mut *inner;
        let epoch = p.current_leader_epoch.and_then(epoch_from_wire);
        let plan = match follower {
            Some(view) => {
                let fr = follower_fetch_request(req, p, epoch);
                self.plan_follower_read(&hp, inner, &fr, view.eligibility, now)
            }
            None => plan_consumer_read(&inner.state, p.fetch_offset, epoch),
        };
        let (from, upper, mut data) = match plan {
            PartitionRead::Refused(code) => {
                return (self.fetch_error(inner, p.partition, code), true);
            }
            PartitionRead::Diverging {
                diverging,
                high_watermark,
                log_start_offset,
            } => {
                let mut data = offsets_data(p.partition, high_watermark, log_start_offset);
                data.diverging_epoch = Some(diverging);
                return (data, true);
            }
            PartitionRead::Read {
                from,
                upper,
                high_watermark,
                log_start_offset,
            } => (
                from,
                upper,
                offsets_data(p.partition, high_watermark, log_start_offset),
            ),
        };
        // KIP-73: a throttled replica's follower outside the ISR waits while the leader quota
        // is exceeded; every throttled replica's bytes count.
        let throttled = follower
            .and_then(|v| v.throttles)
            .is_some_and(|l| l.throttles(p.partition, self.broker_id()));
        if let Some(img) = follower.map(|v| v.image).filter(|_| throttled) {
            // In sync: in the maximal ISR (the HW may wait for it, KIP-497), or caught up
            // to the HW (about to join it).
            let in_sync = inner
                .state
                .maximal_isr()
                .is_some_and(|isr| isr.contains(&req.replica_id))
                || p.fetch_offset >= inner.state.high_watermark();
            let th = &self.shared.throttles;
            match th.verdict(img, Side::Leader, self.broker_id(), true, in_sync, now) {
                Verdict::Hold => return (data, false),
                Verdict::Cap(cap) => part_max = part_max.min(cap),
                Verdict::Free => {}
            }
        }
        let Some(max) = budget.limit(part_max) else {
            return (data, false);
        };
        match inner.log.read(from, max, upper) {
            Ok(info) => {
                data.records = budget.take(info.records);
                if throttled {
                    let th = &self.shared.throttles;
                    th.record(Side::Leader, now, data.records.len());
                }
                (data, false)
            }
            Err(e) => (
                error_data(p.partition, log_error_code(&e), e.to_string()),
                true,
            ),
        }
    }

    /// Applies a follower's fetch to the leader's replication state
    /// ([`crate::replica::PartitionState::handle_follower_fetch`]: KIP-320 divergence check,
    /// follower LEO, HW, ISR expansion) and carries out its effects; `now` in ms.
    fn plan_follower_read(
        &self,
        hp: &Arc<HostedPartition>,
        inner: &mut PartitionInner,
        fr: &FollowerFetchRequest,
        eligibility: &dyn IsrEligibility,
        now: u64,
    ) -> PartitionRead {
        let log = &inner.log;
        match inner.state.handle_follower_fetch(
            fr,
            |e| log.end_offset_for_epoch(e),
            eligibility,
            now,
        ) {
            Ok(LeaderFetchDecision::Diverging {
                epoch,
                end_offset,
                high_watermark,
            }) => PartitionRead::Diverging {
                diverging: EpochEndOffset { epoch, end_offset },
                high_watermark,
                log_start_offset: inner.log.log_start_offset(),
            },
            Ok(LeaderFetchDecision::Read {
                fetch_offset,
                upper_bound_exclusive,
                high_watermark,
                log_start_offset,
                effects,
            }) => {
                self.execute(hp, inner, effects);
                PartitionRead::Read {
                    from: fetch_offset,
                    upper: upper_bound_exclusive,
                    high_watermark,
                    log_start_offset,
                }
            }
            Err(code) => PartitionRead::Refused(code),
        }
    }

    /// The error answer of a fetch; OFFSET_OUT_OF_RANGE carries the log start offset and the
    /// HW so the reader can reset; leadership errors carry the current leader.
    fn fetch_error(
        &self,
        inner: &super::PartitionInner,
        partition: i32,
        code: ErrorCode,
    ) -> FetchPartitionData {
        let mut data = error_data(partition, code, code.to_string());
        match code {
            ErrorCode::OffsetOutOfRange => {
                data.log_start_offset = inner.log.log_start_offset();
                data.high_watermark = inner.state.high_watermark();
                data.last_stable_offset = data.high_watermark;
            }
            ErrorCode::NotLeaderOrFollower | ErrorCode::FencedLeaderEpoch => {
                let (is_leader, leader, epoch) = Self::role_of(inner);
                data.current_leader = Some(LeaderIdAndEpoch {
                    leader_id: if is_leader { self.broker_id() } else { leader },
                    leader_epoch: epoch,
                });
            }
            _ => {}
        }
        data
    }

    /// Serves ListOffsets from the leader: EARLIEST (-2), LATEST (-1, the HW), MAX_TIMESTAMP
    /// (-3, KIP-734: the record with the largest timestamp below the HW) or a timestamp;
    /// other negative values (-4 EARLIEST_LOCAL, -5 LATEST_TIERED: tiered storage, which
    /// Keel does not have) are INVALID_REQUEST.
    pub fn list_offsets(&self, req: ListOffsetsRequest) -> ListOffsetsReply {
        let mut topics = Vec::with_capacity(req.topics.len());
        for t in req.topics {
            let mut partitions = Vec::with_capacity(t.partitions.len());
            for p in t.partitions {
                let mut out = ListOffsetsPartitionResponse {
                    partition_index: p.partition_index,
                    error: None,
                    timestamp: -1,
                    offset: -1,
                    leader_epoch: -1,
                };
                let spec = match p.timestamp {
                    -3 => Some(OffsetSpec::MaxTimestamp),
                    -2 => Some(OffsetSpec::Earliest),
                    -1 => Some(OffsetSpec::Latest),
                    ts if ts >= 0 => Some(OffsetSpec::Timestamp(ts)),
                    _ => None,
                };
                let Some(spec) = spec else {
                    out.error = Some(ErrorCode::InvalidRequest.to_proto(format!(
                        "timestamp {} is not -1 (LATEST), -2 (EARLIEST), -3 (MAX_TIMESTAMP) \
                         or >= 0",
                        p.timestamp
                    )));
                    partitions.push(out);
                    continue;
                };
                let Some(hp) = self.partition(&t.name, p.partition_index) else {
                    out.error = Some(ErrorCode::UnknownTopicOrPartition.to_proto(format!(
                        "{}-{} is not hosted here",
                        clip(&t.name),
                        p.partition_index
                    )));
                    partitions.push(out);
                    continue;
                };
                let inner = hp.lock();
                let epoch = p.current_leader_epoch.and_then(epoch_from_wire);
                let answer = inner.state.list_offsets(spec, epoch);
                let result = answer.and_then(|a| match a {
                    ListOffsetsAnswer::Offset(o) => Ok((o, -1)),
                    ListOffsetsAnswer::LookupTimestamp {
                        timestamp_ms,
                        max_offset_exclusive,
                    } => match inner.log.offset_for_timestamp(timestamp_ms) {
                        Ok(Some((o, ts))) if o < max_offset_exclusive => Ok((o, ts)),
                        Ok(_) => Ok((-1, -1)),
                        Err(e) => Err(log_error_code(&e)),
                    },
                    ListOffsetsAnswer::LookupMaxTimestamp {
                        max_offset_exclusive,
                    } => match inner.log.offset_of_max_timestamp() {
                        Ok(Some((o, ts))) if o < max_offset_exclusive => Ok((o, ts)),
                        Ok(_) => Ok((-1, -1)),
                        Err(e) => Err(log_error_code(&e)),
                    },
                });
                match result {
                    Ok((offset, ts)) => {
                        out.offset = offset;
                        out.timestamp = ts;
                        if offset >= 0 {
                            out.leader_epoch = epoch_of_offset(&inner.log, offset);
                        }
                    }
                    Err(code) => out.error = Some(code.to_proto(code.to_string())),
                }
                partitions.push(out);
            }
            topics.push(ListOffsetsTopicResponse {
                name: t.name,
                partitions,
            });
        }
        ListOffsetsReply {
            error: None,
            topics,
        }
    }

    /// Serves OffsetsForLeaderEpoch from the leader (KIP-101/279): the largest epoch <= the
    /// requested one and its end offset (exclusive), or -1/-1 when unknown.
    pub fn offsets_for_leader_epoch(
        &self,
        req: OffsetsForLeaderEpochRequest,
    ) -> OffsetsForLeaderEpochReply {
        let mut topics = Vec::with_capacity(req.topics.len());
        for t in req.topics {
            let mut partitions = Vec::with_capacity(t.partitions.len());
            for p in t.partitions {
                let mut out = EpochEndOffsetResult {
                    partition: p.partition,
                    error: None,
                    leader_epoch: -1,
                    end_offset: -1,
                };
                match self.partition(&t.topic, p.partition) {
                    None => {
                        out.error = Some(ErrorCode::UnknownTopicOrPartition.to_proto(format!(
                            "{}-{} is not hosted here",
                            clip(&t.topic),
                            p.partition
                        )))
                    }
                    Some(hp) => {
                        let inner = hp.lock();
                        let epoch = p.current_leader_epoch.and_then(epoch_from_wire);
                        match inner.state.check_leader_request(epoch) {
                            Ok(()) => {
                                let (e, end) = inner.log.end_offset_for_epoch(p.leader_epoch);
                                out.leader_epoch = e;
                                out.end_offset = end;
                            }
                            Err(code) => out.error = Some(code.to_proto(code.to_string())),
                        }
                    }
                }
                partitions.push(out);
            }
            topics.push(OffsetForLeaderTopicResult {
                topic: t.topic,
                partitions,
            });
        }
        OffsetsForLeaderEpochReply {
            error: None,
            topics,
        }
    }

    /// Fills the log and leader fields of a metadata-only DescribeReplicas reply
    /// ([`crate::metadata::describe::describe_replicas_reply`]) from the hosted partitions.
    pub fn fill_describe_replicas(&self, reply: &mut DescribeReplicasReply) {
        for d in &mut reply.partitions {
            if d.error.is_some() {
                continue;
            }
            let Some(hp) = self.partition(&d.topic, d.partition) else {
                continue;
            };
            let inner = hp.lock();
            d.log_end_offset = inner.log.log_end_offset();
            d.high_watermark = inner.state.high_watermark();
            d.log_start_offset = inner.log.log_start_offset();
            d.size_bytes = inner.log.size_bytes() as i64;
            d.leader_epoch_cache = inner
                .log
                .epoch_cache()
                .entries()
                .iter()
                .map(|e| EpochStartOffset {
                    epoch: e.epoch,
                    start_offset: e.start_offset,
                })
                .collect();
            match inner.state.role() {
                Role::Leader(l) => {
                    d.role = ReplicaRole::Leader as i32;
                    d.leader_id = self.broker_id();
                    d.leader_epoch = l.leader_epoch;
                    d.partition_epoch = l.partition_epoch;
                    d.isr = l.isr.isr().to_vec();
                    d.maximal_isr = l.isr.maximal_isr();
                    d.pending_isr_change = l.isr.pending_request().is_some();
                    d.followers = l
                        .followers
                        .values()
                        .map(|f| FollowerState {
                            broker_id: f.broker_id,
                            log_end_offset: f.log_end_offset.unwrap_or(-1),
                            last_caught_up_time_ms: self.wall_time_ms(f.last_caught_up_time_ms),
                            last_fetch_time_ms: self.wall_time_ms(f.last_fetch_time_ms),
                            broker_epoch: f.broker_epoch.unwrap_or(-1),
                            in_isr: l.isr.isr().contains(&f.broker_id),
                        })
                        .collect();
                }
                Role::Follower(f) => {
                    d.role = ReplicaRole::Follower as i32;
                    d.leader_id = f.leader_id;
                    d.leader_epoch = f.leader_epoch;
                    d.partition_epoch = f.partition_epoch;
                }
                Role::None => d.role = ReplicaRole::None as i32,
            }
            d.min_insync_replicas = inner.state.config().effective_min_insync() as i32;
        }
    }

    /// Converts a monotonic time of this manager into wall-clock ms since the Unix epoch
    /// (-1 for 0 = never).
    fn wall_time_ms(&self, mono_ms: u64) -> i64 {
        if mono_ms == 0 {
            return -1;
        }
        let now_wall = keel_runtime::clock::wall_clock_ms();
        now_wall - (self.now_ms().saturating_sub(mono_ms)) as i64
    }
}

/// Leader epoch of the batch holding `offset` per the epoch cache (-1 when unknown). For an
/// offset at the LEO (LATEST on an idle log) it is the epoch of the last batch below it.
fn epoch_of_offset(log: &crate::log::Log, offset: i64) -> i32 {
    let target = if offset >= log.log_end_offset() {
        offset - 1
    } else {
        offset
    };
    log.epoch_cache()
        .entries()
        .iter()
        .rev()
        .find(|e| e.start_offset <= target)
        .map_or(-1, |e| e.epoch)
}

/// Record bytes of a reply (for tests and metrics).
pub fn reply_bytes(reply: &FetchReply) -> usize {
    reply
        .responses
        .iter()
        .flat_map(|t| t.partitions.iter())
        .map(|p| Bytes::len(&p.records))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(n: usize) -> Bytes {
        Bytes::from(vec![0u8; n])
    }

    #[test]
    fn the_first_partition_exceeds_max_bytes_by_its_first_batch_only() {
        for max_bytes in [0, 1, 1000] {
            let mut b = FetchBudget::new(max_bytes);
            // The log gets the small limit and returns its first batch whole (2000 bytes).
            assert_eq!(b.limit(1 << 20), Some(max_bytes));
            assert_eq!(b.take(bytes(2000)).len(), 2000, "progress");
            // Nothing more: later partitions read nothing.
            assert_eq!(b.limit(1 << 20), None, "max_bytes {max_bytes}");
        }
    }

    #[test]
    fn later_partitions_stay_within_what_is_left() {
        let mut b = FetchBudget::new(5000);
        assert_eq!(
            b.take(Bytes::new()).len(),
            0,
            "an empty partition owes nothing"
        );
        assert_eq!(b.limit(1 << 20), Some(5000));
        assert_eq!(b.take(bytes(3000)).len(), 3000);
        assert_eq!(b.limit(1 << 20), Some(2000));
        // A first batch larger than what is left is not returned (it comes in a later fetch).
        assert_eq!(b.take(bytes(2500)).len(), 0);
        assert_eq!(b.limit(1000), Some(1000));
        // One larger than partition_max_bytes but within what is left is (no starvation).
        assert_eq!(b.take(bytes(1500)).len(), 1500);
        assert_eq!(b.limit(1 << 20), Some(500));
        assert_eq!(b.take(bytes(500)).len(), 500);
        assert_eq!(b.limit(1 << 20), None);
    }

    #[test]
    fn limits_are_capped() {
        let b = FetchBudget::new(usize::MAX);
        assert_eq!(b.limit(usize::MAX), Some(PARTITION_MAX_BYTES_CAP));
        let b = FetchBudget::new(usize::MAX);
        assert_eq!(b.left, FETCH_MAX_BYTES_CAP);
    }
}
