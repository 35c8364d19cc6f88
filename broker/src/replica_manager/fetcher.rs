//! Follower fetchers (DESIGN §5 "Becoming follower"; Kafka `ReplicaFetcherManager` /
//! `AbstractFetcherThread`): one task per source broker, fetching every partition this
//! broker follows from it in one long-poll request.
//!
//! Each round: build the request from the partitions' states
//! ([`crate::replica::PartitionState::follower_fetch_request`]), send it, and for each
//! partition of the answer, under the partition's lock and only if the partition still
//! follows the same leader in the same epoch from the same LEO, apply
//! [`plan_follower_response`]: append then adopt the HW, truncate to the divergence point the
//! leader reported (never to the local HW: KIP-101/279), restart the log at the leader's log
//! start, or back off. A throttled partition followed from outside the ISR is left out of a
//! round while the follower quota is exceeded ([`super::throttle`], KIP-73). Partitions are
//! referred to by name only, so a fetch in flight never
//! keeps a deleted partition's log open.
//!
//! Each fetcher keeps an incremental fetch session with its leader (KIP-227,
//! [`FollowerSession`]): a request lists only the partitions whose fetch fields changed
//! since the previous one (the leader keeps the others) and the reply only partitions with
//! something new. A partition left out of a round (backing off, throttled) is forgotten by
//! the session and listed again when it is fetched again. A failed, timed-out or refused
//! request opens a new session with the next one.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use keel_metadata_log::configs::ThrottledReplicas;
use keel_proto::ErrorCode;
use keel_proto::broker::broker_service_client::BrokerServiceClient;
use keel_proto::broker::{
    EpochEndOffset, FetchPartition, FetchPartitionData, FetchRequest, FetchTopic,
};
use tokio::sync::{Notify, watch};
use tonic::transport::Channel;

use super::fetch_session::FollowerSession;
use super::throttle::{Side, Throttles, Verdict};
use super::{HostedPartition, PartitionInner, ReplicaManager};
use crate::log::TopicPartition;
use crate::replica::follower_fetch::follower_log_start;
use crate::replica::{FollowerAction, FollowerFetchResponse, Role, plan_follower_response};

/// `max_bytes` of a fetcher's requests, bytes. A reply may exceed it by a first batch up to
/// [`keel_proto::limits::MAX_BATCH_BYTES`] (KIP-74); the fetcher accepts replies up to
/// [`keel_proto::limits::MAX_BROKER_MESSAGE_BYTES`].
pub const FETCH_MAX_BYTES: usize = 16 << 20;
/// Per-partition bound sent in fetches, bytes.
pub const PARTITION_MAX_BYTES: usize = 4 << 20;
/// Longest pause after consecutive failed fetch rounds from one leader, ms (Kafka's
/// `replica.fetch.backoff.ms`, 1000, which Kafka waits after every failure; Keel starts at
/// `replica_fetch_backoff_ms` and doubles, with jitter).
pub const FAILED_FETCH_BACKOFF_MAX_MS: u64 = 1_000;
/// Delay before a partition that answered a leadership error is fetched again, ms (new
/// metadata re-adds it at once).
pub const AWAIT_METADATA_BACKOFF_MS: u64 = 200;

/// One followed partition.
#[derive(Debug, Clone, Copy)]
struct Entry {
    /// Leader epoch of the registration that added it.
    leader_epoch: i32,
    /// Not fetched before this time (ms, manager clock).
    retry_at_ms: u64,
}

type Entries = Arc<Mutex<BTreeMap<TopicPartition, Entry>>>;

#[derive(Debug)]
struct Fetcher {
    entries: Entries,
    wake: Arc<Notify>,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

/// The fetchers by source broker id.
#[derive(Debug, Default)]
pub struct FetcherManager {
    fetchers: HashMap<i32, Fetcher>,
}

impl FetcherManager {
    /// The fetcher for `leader`, spawned if there is none.
    fn fetcher(&mut self, rm: &ReplicaManager, leader: i32) -> &Fetcher {
        self.fetchers.entry(leader).or_insert_with(|| {
            let entries: Entries = Arc::default();
            let wake = Arc::new(Notify::new());
            let (stop, stop_rx) = watch::channel(false);
            let task = tokio::spawn(run(
                rm.clone(),
                leader,
                entries.clone(),
                wake.clone(),
                stop_rx,
            ));
            Fetcher {
                entries,
                wake,
                stop,
                task,
            }
        })
    }

    /// Starts fetching each partition of `moves` from its leader (at the partition's current
    /// leader epoch), spawning the fetcher of a leader that has none; each fetcher's map is
    /// locked once for all of its partitions. The caller removed them from every fetcher first.
    pub fn add_all(
        &mut self,
        rm: &ReplicaManager,
        moves: impl IntoIterator<Item = (Arc<HostedPartition>, i32)>,
    ) {
        let mut by_leader: HashMap<i32, Vec<Arc<HostedPartition>>> = HashMap::new();
        for (hp, leader) in moves {
            by_leader.entry(leader).or_default().push(hp);
        }
        for (leader, parts) in by_leader {
            // The leader epoch of each, read before the fetcher's map is locked (a partition
            // lock is never taken under it).
            let epochs: Vec<(TopicPartition, i32)> = parts
                .iter()
                .map(|hp| {
                    let epoch = hp.lock().state.leader_epoch().unwrap_or(-1);
                    (hp.tp.clone(), epoch)
                })
                .collect();
            let f = self.fetcher(rm, leader);
            let mut entries = f.entries.lock().unwrap_or_else(|e| e.into_inner());
            for (tp, leader_epoch) in epochs {
                entries.insert(
                    tp,
                    Entry {
                        leader_epoch,
                        retry_at_ms: 0,
                    },
                );
            }
            drop(entries);
            f.wake.notify_one();
        }
    }

    /// Stops fetching every partition of `tps` (from whichever broker): each fetcher's map is
    /// locked once for all of them, not once per partition (a broker taking over thousands of
    /// leaderships waited for the fetchers' own rounds, which hold the map while they build a
    /// request, once per partition). Nothing is locked for an empty `tps`.
    pub fn remove_all(&mut self, tps: &[TopicPartition]) {
        if tps.is_empty() {
            return;
        }
        for f in self.fetchers.values() {
            let mut entries = f.entries.lock().unwrap_or_else(|e| e.into_inner());
            for tp in tps {
                entries.remove(tp);
            }
        }
    }

    /// Stops every fetcher task.
    pub fn stop_all(&mut self) {
        for (_, f) in self.fetchers.drain() {
            f.stop.send_replace(true);
            f.task.abort();
        }
    }
}

/// What a request asked for one partition.
struct Sent {
    tp: TopicPartition,
    leader_epoch: i32,
    fetch_offset: i64,
    /// Throttled on the follower side (KIP-73): its appended bytes count.
    throttled: bool,
}

async fn run(
    rm: ReplicaManager,
    leader: i32,
    entries: Entries,
    wake: Arc<Notify>,
    mut stop: watch::Receiver<bool>,
) {
    let mut client: Option<(String, BrokerServiceClient<Channel>)> = None;
    let mut failures = 0u32;
    // KIP-227: the incremental fetch session with this leader.
    let mut session = FollowerSession::default();
    // The previous reply was a session error (a second one in a row backs off).
    let mut session_refused = false;
    let wait_ms = rm.shared.config.replica_fetch_wait_max_ms;
    let backoff_ms = rm.shared.config.replica_fetch_backoff_ms;
    // Consecutive failed rounds back off from `replica_fetch_backoff_ms` doubling to
    // FAILED_FETCH_BACKOFF_MAX_MS, with jitter: each round reads every followed partition to
    // build its request, and a dead leader refuses connections at once, so a fixed 100 ms
    // had each survivor of a kill -9 at 100k partitions build ~90 requests of 33,000
    // partitions before the controller moved the leaderships (perf: the CPU the fence's
    // commit waited for).
    let retry =
        keel_runtime::Backoff::from_millis(backoff_ms, FAILED_FETCH_BACKOFF_MAX_MS.max(backoff_ms));
    // Names this broker's own pause in a timeout's message (a resumed SIGSTOPped follower).
    let meter = keel_runtime::clock::StallMeter::process();
    loop {
        if *stop.borrow() {
            return;
        }
        let woken = wake.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        let (mut req, sent) = build_request(&rm, leader, &entries, wait_ms);
        if sent.is_empty() {
            tokio::select! {
                _ = stop.wait_for(|s| *s) => return,
                _ = woken => {}
                _ = tokio::time::sleep(Duration::from_millis(50)) => {}
            }
            continue;
        }
        let Some(addr) = broker_address(&rm, leader) else {
            tracing::debug!(leader, "no address for the leader broker yet");
            sleep_or_stop(&mut stop, backoff_ms).await;
            continue;
        };
        if client.as_ref().is_none_or(|(a, _)| *a != addr) {
            match keel_runtime::tls::Dialer::broker_endpoint(&addr) {
                Ok(ep) => {
                    let ep = ep.connect_timeout(Duration::from_secs(2));
                    let ch = rm.dialer().connect_lazy(&ep);
                    let c = BrokerServiceClient::new(ch)
                        // A reply holds its first batch whole, up to MAX_BATCH_BYTES (48
                        // MiB), beyond the FETCH_MAX_BYTES asked for: the leader encodes up
                        // to this limit, and a smaller one here stopped replication from
                        // that leader at the first batch over it.
                        .max_decoding_message_size(keel_proto::limits::MAX_BROKER_MESSAGE_BYTES);
                    client = Some((addr.clone(), c));
                }
                Err(e) => {
                    tracing::warn!(leader, address = %addr, "bad leader address: {e}");
                    sleep_or_stop(&mut stop, backoff_ms).await;
                    continue;
                }
            }
        }
        let mut c = client.as_ref().expect("set above").1.clone();
        let (topics, session_req) = session.build(std::mem::take(&mut req.topics));
        req.topics = topics;
        req.session = Some(session_req);
        let timeout = Duration::from_millis(wait_ms + 5_000);
        let stalled_before = meter.stalled_ms();
        let result = tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            r = tokio::time::timeout(timeout, c.fetch(req)) => r,
        };
        match result {
            Ok(Ok(reply)) => {
                let reply = reply.into_inner();
                match ErrorCode::from_proto(reply.error.as_ref()) {
                    Ok(ErrorCode::None) => {}
                    Ok(
                        code @ (ErrorCode::FetchSessionIdNotFound
                        | ErrorCode::InvalidFetchSessionEpoch),
                    ) if !session_refused => {
                        // The next request opens a new session at once.
                        tracing::debug!(leader, %code, "fetch session refused; opening a new one");
                        session.reset();
                        session_refused = true;
                        continue;
                    }
                    other => {
                        session.reset();
                        session_refused = false;
                        failures += 1;
                        if failures == 1 || failures.is_multiple_of(20) {
                            let message = reply.error.as_ref().map(|e| e.message.as_str());
                            tracing::warn!(leader, address = %addr, failures, "fetch refused: {other:?} {}", message.unwrap_or(""));
                        }
                        sleep_for_or_stop(&mut stop, retry.next(failures - 1)).await;
                        continue;
                    }
                }
                session_refused = false;
                session.on_reply(reply.session.as_ref());
                if failures > 0 {
                    tracing::info!(leader, address = %addr, "fetching from the leader again");
                }
                failures = 0;
                let mut by_tp = HashMap::new();
                for t in reply.responses {
                    for p in t.partitions {
                        by_tp.insert(TopicPartition::new(t.topic.clone(), p.partition_index), p);
                    }
                }
                // An incremental reply names only the partitions with something new.
                for s in sent {
                    if by_tp.is_empty() {
                        break;
                    }
                    if let Some(data) = by_tp.remove(&s.tp) {
                        process(&rm, leader, &entries, &s, data);
                    }
                }
            }
            Ok(Err(status)) => {
                session.reset();
                failures += 1;
                if failures == 1 || failures.is_multiple_of(20) {
                    tracing::warn!(leader, address = %addr, failures, "fetch failed: {}", keel_runtime::status::status_line(&status));
                }
                sleep_for_or_stop(&mut stop, retry.next(failures - 1)).await;
            }
            Err(_) => {
                session.reset();
                failures += 1;
                if failures == 1 || failures.is_multiple_of(20) {
                    let stall = meter.stalled_ms().saturating_sub(stalled_before);
                    let note = keel_runtime::clock::stall_note(stall);
                    tracing::warn!(leader, address = %addr, failures, "fetch timed out after {timeout:?}{note}");
                }
                sleep_for_or_stop(&mut stop, retry.next(failures - 1)).await;
            }
        }
    }
}

async fn sleep_or_stop(stop: &mut watch::Receiver<bool>, ms: u64) {
    sleep_for_or_stop(stop, Duration::from_millis(ms)).await;
}

async fn sleep_for_or_stop(stop: &mut watch::Receiver<bool>, pause: Duration) {
    tokio::select! {
        _ = stop.wait_for(|s| *s) => {}
        _ = tokio::time::sleep(pause) => {}
    }
}

/// `host:port` of `broker` from the latest image.
fn broker_address(rm: &ReplicaManager, broker: i32) -> Option<String> {
    let image = rm.image();
    let ep = image.broker(broker)?.endpoints.first()?.clone();
    Some(format!("{}:{}", ep.host, ep.port))
}

fn build_request(
    rm: &ReplicaManager,
    leader: i32,
    entries: &Entries,
    wait_ms: u64,
) -> (FetchRequest, Vec<Sent>) {
    let now = rm.now_ms();
    if rm.broker_epoch() < 0 {
        // Not registered yet: a leader serves only fetches carrying this broker's registered
        // epoch (STALE_BROKER_EPOCH otherwise), so there is nothing to send.
        return (FetchRequest::default(), Vec::new());
    }
    let due: Vec<(TopicPartition, Entry)> = entries
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter(|(_, e)| e.retry_at_ms <= now)
        .map(|(tp, e)| (tp.clone(), *e))
        .collect();
    let mut topics: BTreeMap<String, FetchTopic> = BTreeMap::new();
    let mut sent = Vec::new();
    let image = rm.image();
    let me = rm.broker_id();
    // Throttled partitions under the rate and their round's cap, shared among them below.
    let mut capped: Vec<(String, i32, usize)> = Vec::new();
    // The follower-side throttled replicas of the topic of the previous entry (entries are
    // in topic order: looked up once per topic).
    let mut topic_throttles: Option<(String, Option<ThrottledReplicas>)> = None;
    for (tp, e) in due {
        let Some(hp) = rm.partition(&tp.topic, tp.partition) else {
            continue;
        };
        let inner = hp.lock();
        // KIP-73: a throttled partition followed out of sync waits while the follower quota
        // is exceeded (the fetcher polls again within 50 ms). In sync: in the ISR, or caught
        // up to the leader's HW (its leader may be adding it to the ISR and wait for it).
        if topic_throttles.as_ref().is_none_or(|(t, _)| *t != tp.topic) {
            let list = Throttles::topic_list(&image, Side::Follower, &tp.topic, me);
            topic_throttles = Some((tp.topic.clone(), list));
        }
        let throttled = topic_throttles
            .as_ref()
            .and_then(|(_, l)| l.as_ref())
            .is_some_and(|l| l.throttles(tp.partition, me));
        if throttled {
            let in_sync = image
                .partition(hp.topic_id(), tp.partition)
                .is_some_and(|p| p.isr.contains(&me))
                || (inner.last_leader_hw >= 0
                    && inner.log.log_end_offset() >= inner.last_leader_hw);
            match rm
                .shared
                .throttles
                .verdict(&image, Side::Follower, me, true, in_sync, now)
            {
                Verdict::Hold => continue,
                Verdict::Cap(cap) => capped.push((tp.topic.clone(), tp.partition, cap)),
                Verdict::Free => {}
            }
        }
        let Some((to, fr)) = inner.state.follower_fetch_request(inner.log.latest_epoch()) else {
            continue;
        };
        if to != leader || fr.current_leader_epoch != Some(e.leader_epoch) {
            continue;
        }
        let topic = topics
            .entry(tp.topic.clone())
            .or_insert_with(|| FetchTopic {
                topic: tp.topic.clone(),
                topic_id: bytes::Bytes::copy_from_slice(hp.topic_id().as_bytes()),
                partitions: Vec::new(),
            });
        topic.partitions.push(FetchPartition {
            partition: tp.partition,
            fetch_offset: fr.fetch_offset,
            current_leader_epoch: fr.current_leader_epoch,
            last_fetched_epoch: fr.last_fetched_epoch.unwrap_or(-1),
            log_start_offset: fr.log_start_offset.unwrap_or(-1),
            partition_max_bytes: PARTITION_MAX_BYTES as i32,
        });
        sent.push(Sent {
            tp,
            leader_epoch: e.leader_epoch,
            fetch_offset: fr.fetch_offset,
            throttled,
        });
    }
    // The throttled partitions share one round's cap, so a round moves 50 ms worth of them
    // whatever their number ([`super::throttle::round_cap`]).
    let share = capped.len().max(1);
    for (topic, partition, cap) in &capped {
        if let Some(p) = topics
            .get_mut(topic)
            .and_then(|t| t.partitions.iter_mut().find(|p| p.partition == *partition))
        {
            p.partition_max_bytes = (cap / share).clamp(1, PARTITION_MAX_BYTES) as i32;
        }
    }
    let req = FetchRequest {
        replica_id: rm.broker_id(),
        broker_epoch: rm.broker_epoch(),
        max_wait_ms: wait_ms as i32,
        min_bytes: 1,
        max_bytes: FETCH_MAX_BYTES as i32,
        isolation_level: 0,
        topics: topics.into_values().collect(),
        session: None,
    };
    (req, sent)
}

fn set_retry(entries: &Entries, tp: &TopicPartition, at_ms: u64) {
    if let Some(e) = entries
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_mut(tp)
    {
        e.retry_at_ms = at_ms;
    }
}

/// Applies one partition's answer (see the module doc). A failure or an error answer
/// delays the partition's next fetch, set once its lock is released.
fn process(
    rm: &ReplicaManager,
    leader: i32,
    entries: &Entries,
    s: &Sent,
    data: FetchPartitionData,
) {
    let Some(hp) = rm.partition(&s.tp.topic, s.tp.partition) else {
        return;
    };
    let mut guard = hp.lock();
    let inner = &mut *guard;
    if !still_current(inner, leader, s) {
        return; // Metadata or the log moved on since the request: the answer is stale.
    }
    let response = follower_response(&data);
    let leo = inner.log.log_end_offset();
    let action = {
        let log = &inner.log;
        plan_follower_response(&response, leo, |e| log.end_offset_for_epoch(e))
    };
    let now = rm.now_ms();
    let mut apply = Apply {
        rm,
        leader,
        tp: &s.tp,
        inner,
        leo,
    };
    let retry = match action {
        FollowerAction::AppendThenAdoptHw {
            leader_high_watermark,
            leader_log_start_offset,
        } => {
            if s.throttled {
                rm.shared
                    .throttles
                    .record(Side::Follower, now, data.records.len());
            }
            apply
                .append_then_adopt_hw(data.records, leader_high_watermark)
                .or_else(|| {
                    apply.adopt_log_start(leader_log_start_offset);
                    None
                })
        }
        FollowerAction::Truncate { offset, complete } => {
            apply.truncate(offset, complete, data.diverging_epoch.as_ref())
        }
        FollowerAction::TruncateFullyAndStartAt { offset } => apply.restart_at(offset),
        FollowerAction::Backoff(code) => Some(Retry::Backoff(code)),
        FollowerAction::AwaitMetadata(code) => Some(Retry::AwaitMetadata(code)),
    };
    drop(guard);
    let Some(retry) = retry else {
        return;
    };
    let delay_ms = match retry {
        Retry::Failed => rm.shared.config.replica_fetch_backoff_ms,
        Retry::Backoff(code) => {
            tracing::debug!(partition = %s.tp, leader, %code, "backing off");
            rm.shared.config.replica_fetch_backoff_ms
        }
        Retry::AwaitMetadata(code) => {
            tracing::debug!(partition = %s.tp, leader, %code, "waiting for metadata");
            AWAIT_METADATA_BACKOFF_MS
        }
    };
    set_retry(entries, &s.tp, now + delay_ms);
}

/// Whether the partition still follows `leader` in the request's epoch from the LEO the
/// request was sent at (else its answer is stale and ignored).
fn still_current(inner: &PartitionInner, leader: i32, s: &Sent) -> bool {
    let current = matches!(inner.state.role(), Role::Follower(f) if f.leader_id == leader && f.leader_epoch == s.leader_epoch);
    current && inner.log.log_end_offset() == s.fetch_offset && inner.staged_epoch.is_none()
}

/// The replication rules' view of a leader's answer for one partition.
fn follower_response(data: &FetchPartitionData) -> FollowerFetchResponse {
    let code = ErrorCode::from_proto(data.error.as_ref()).unwrap_or(ErrorCode::UnknownServerError);
    match (code, &data.diverging_epoch) {
        (ErrorCode::None, Some(d)) => FollowerFetchResponse::Diverging {
            epoch: d.epoch,
            end_offset: d.end_offset,
        },
        (ErrorCode::None, None) => FollowerFetchResponse::Records {
            high_watermark: data.high_watermark,
            leader_log_start_offset: data.log_start_offset,
        },
        (ErrorCode::OffsetOutOfRange, _) => FollowerFetchResponse::OutOfRange {
            leader_log_start_offset: data.log_start_offset,
            // The leader's LEO is not in the answer; a follower ahead of its leader is
            // handled by the divergence check, so never truncate on this path.
            leader_log_end_offset: i64::MAX,
        },
        (code, _) => FollowerFetchResponse::Error(code),
    }
}

/// Why a partition's next fetch waits, decided under its lock and set after it is released.
enum Retry {
    /// The append or truncation failed (logged): `replica_fetch_backoff_ms`.
    Failed,
    /// The leader answered a transient error: `replica_fetch_backoff_ms`.
    Backoff(ErrorCode),
    /// The leader answered a leadership error: [`AWAIT_METADATA_BACKOFF_MS`].
    AwaitMetadata(ErrorCode),
}

/// One partition's answer being applied to its log and state, under its lock.
struct Apply<'a> {
    rm: &'a ReplicaManager,
    /// The leader that answered.
    leader: i32,
    tp: &'a TopicPartition,
    inner: &'a mut PartitionInner,
    /// The LEO the fetch was sent from.
    leo: i64,
}

impl Apply<'_> {
    /// Appends the leader's records, then adopts its HW (capped at the new LEO); wakes fetch
    /// long polls when the LEO or the HW moved.
    fn append_then_adopt_hw(
        &mut self,
        records: Bytes,
        leader_high_watermark: i64,
    ) -> Option<Retry> {
        let (tp, leader, inner) = (self.tp, self.leader, &mut *self.inner);
        if let Some(base) = inner.log.follower_restart_point(&records) {
            // The leader's log start is inside its first batch (DeleteRecords): start this
            // empty log at the batch's base, as Kafka does (KAFKA-6975); the leader's start
            // is taken again right after the append ([`Apply::adopt_log_start`]).
            tracing::info!(partition = %tp, leader, from = inner.log.log_end_offset(), to = base, "the leader's first batch starts below this empty log's start: restarting the log at the batch's base");
            if let Err(e) = inner.log.truncate_fully_and_start_at(base) {
                tracing::error!(partition = %tp, leader, "restarting the log at {base} failed: {e}");
                return Some(Retry::Failed);
            }
        }
        if !records.is_empty()
            && let Err(e) = inner.log.append_as_follower(records)
        {
            tracing::error!(partition = %tp, leader, "follower append failed: {e}");
            return Some(Retry::Failed);
        }
        inner.last_leader_hw = leader_high_watermark;
        let before = inner.state.high_watermark();
        let new_leo = inner.log.log_end_offset();
        let hw = inner
            .state
            .on_follower_appended(new_leo, leader_high_watermark);
        if new_leo != self.leo || hw != before {
            self.rm.shared.data_changed.notify_waiters();
        }
        None
    }

    /// Moves the log start up to the leader's (DeleteRecords or retention on the leader),
    /// within this replica's HW ([`follower_log_start`]); the whole segments below it go to
    /// the replica manager's deleter. A failure is logged and tried again with the next
    /// answer (the leader keeps sending its start).
    fn adopt_log_start(&mut self, leader_log_start_offset: i64) {
        let inner = &mut *self.inner;
        let Some(target) = follower_log_start(
            inner.log.log_start_offset(),
            leader_log_start_offset,
            inner.state.high_watermark(),
        ) else {
            return;
        };
        match inner.log.increment_log_start_offset(target) {
            Ok((moved, deleted)) => {
                let start = inner.log.log_start_offset();
                inner.state.set_log_start_offset(start);
                if moved {
                    tracing::info!(partition = %self.tp, leader = self.leader, log_start_offset = start, segments = deleted.segment_count(), "log start moved to the leader's");
                }
                if !deleted.is_empty() {
                    self.rm
                        .shared
                        .doomed
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .append(deleted);
                }
            }
            Err(e) => {
                let start = inner.log.log_start_offset();
                inner.state.set_log_start_offset(start);
                tracing::warn!(partition = %self.tp, "taking the leader's log start {target} failed: {e}");
            }
        }
    }

    /// Truncates the log to the divergence point `offset` the leader's answer led to
    /// (KIP-101/279; `complete`: the final point, else the next fetch asks again).
    fn truncate(
        &mut self,
        offset: i64,
        complete: bool,
        diverging: Option<&EpochEndOffset>,
    ) -> Option<Retry> {
        let (tp, leader, leo) = (self.tp, self.leader, self.leo);
        match self.inner.log.truncate_to(offset) {
            Ok(_) => {
                let end = self.after_truncation();
                tracing::info!(
                    partition = %tp,
                    leader,
                    from_offset = leo,
                    to_offset = end,
                    diverging_epoch = ?diverging.map(|d| (d.epoch, d.end_offset)),
                    complete,
                    "Truncating {} from LEO {leo} to {end} (divergence reported by leader {leader})",
                    tp
                );
                self.rm.shared.data_changed.notify_waiters();
                None
            }
            Err(e) => {
                tracing::error!(partition = %tp, "truncation to {offset} failed: {e}");
                Some(Retry::Failed)
            }
        }
    }

    /// Empties the log and restarts it at the leader's log start `offset` (OFFSET_OUT_OF_RANGE
    /// with this log ending below it).
    fn restart_at(&mut self, offset: i64) -> Option<Retry> {
        let (tp, leader, leo) = (self.tp, self.leader, self.leo);
        match self.inner.log.truncate_fully_and_start_at(offset) {
            Ok(()) => {
                self.after_truncation();
                tracing::info!(partition = %tp, leader, from_offset = leo, log_start_offset = offset, "Truncating {} fully: restarting at the leader's log start {offset}", tp);
                None
            }
            Err(e) => {
                tracing::error!(partition = %tp, "full truncation to {offset} failed: {e}");
                Some(Retry::Failed)
            }
        }
    }

    /// Tells the replication state the log's new bounds after a truncation; returns the LEO.
    fn after_truncation(&mut self) -> i64 {
        let log = &self.inner.log;
        let (start, end) = (log.log_start_offset(), log.log_end_offset());
        self.inner.state.on_follower_truncated(start, end);
        end
    }
}
