//! The group coordinator's async layer (Kafka's `GroupCoordinator` over
//! `GroupMetadataManager`): owns the groups of the `__consumer_offsets` partitions this
//! broker leads, answers the group APIs through [`super::state`], and writes what Kafka
//! writes (offset commits, group metadata, tombstones) to those partitions as acks=all
//! appends through the replica manager.
//!
//! Flow: a scan every [`SCAN_INTERVAL`] compares the partitions this broker leads (from the
//! replica manager, at their leader epoch) with the shards it holds. A newly led partition
//! becomes a loading shard (requests get COORDINATOR_LOAD_IN_PROGRESS) and a task reads the
//! partition's log from its start to its log end offset, replaying every record into groups
//! and offsets (the leader's whole log: anything an acks=all commit acknowledged before a
//! failover is in it). A partition no longer led (or led at a new epoch) is dropped: its
//! waiting requests are answered NOT_COORDINATOR and later requests too, so clients look the
//! coordinator up again. Every write carries the shard's leader epoch as
//! `current_leader_epoch`, so a coordinator deposed mid-write is refused by the log rather
//! than writing as a stale leader.
//!
//! Invariants: a shard's groups are only served once loaded; an in-memory commit is applied
//! only after its write was acknowledged (acks=all) and only if the shard is still the one
//! it was written for; no lock is held across an `.await`; waiters are bounded by members
//! (one JoinGroup and one SyncGroup per member), members by `group_max_size`, groups by
//! [`CoordinatorConfig::max_groups`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use keel_metadata_log::MetadataImage;
use keel_proto::ErrorCode;
use keel_proto::broker::{ProducePartitionData, ProduceRequest, ProduceTopicData};
use keel_record::{BatchIter, RecordBatchBuilder};
use tokio::sync::{oneshot, watch};

use super::lag;
use super::records::{self, CommittedOffset, OFFSETS_TOPIC, OffsetsRecord};
use super::state::{
    Effects, Group, GroupConfig, GroupState, JoinRequest, JoinResult, Joined, SyncRequest,
    SyncResult, Synced,
};
use crate::replica_manager::ReplicaManager;

/// How often timers run and leadership of `__consumer_offsets` is checked.
pub const SCAN_INTERVAL: Duration = Duration::from_millis(100);

/// One group's expired offsets found by [`GroupCoordinator::expire_offsets`].
#[derive(Debug)]
struct Expiry {
    partition: i32,
    epoch: i32,
    group: String,
    expired: Vec<(String, i32)>,
    /// Nothing of the group is left once they are gone: its metadata is deleted too.
    emptied: bool,
}

/// Most groups whose expired offsets one check deletes (the rest wait for the next).
const MAX_EXPIRY_GROUPS: usize = 1000;

/// Gauges are sampled every this many scans (500 ms).
const GAUGE_TICKS: u64 = 5;

/// Bytes read per step while loading a partition.
const LOAD_CHUNK_BYTES: usize = 1 << 20;

/// Configuration of the coordinator (Kafka's `offsets.*` and `group.*` broker configs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoordinatorConfig {
    /// `offsets.topic.num.partitions` (50): partitions of `__consumer_offsets` when this
    /// broker asks for its creation; once it exists, its actual count is used.
    pub offsets_topic_num_partitions: i32,
    /// `offsets.topic.replication.factor` (3).
    pub offsets_topic_replication_factor: i16,
    /// `offsets.topic.segment.bytes` (100 MiB): the topic's `segment.bytes` at creation.
    pub offsets_topic_segment_bytes: u64,
    /// `offset.metadata.max.bytes` (4096): longer commit metadata is
    /// OFFSET_METADATA_TOO_LARGE.
    pub offset_metadata_max_bytes: usize,
    /// `offsets.commit.timeout.ms` (5000): how long a commit waits for the ISR.
    pub offsets_commit_timeout_ms: i32,
    /// Most groups this broker coordinates at once (Kafka has no bound); a JoinGroup or
    /// commit creating one more is COORDINATOR_NOT_AVAILABLE.
    pub max_groups: usize,
    /// Most bytes of protocol metadata one member may send in a JoinGroup (sum over its
    /// protocols); more is INVALID_REQUEST. Kafka has no separate bound (the group's record
    /// must fit in the topic's `max.message.bytes`).
    pub max_member_metadata_bytes: usize,
    /// `offsets.retention.minutes` as ms (7 days): see [`Group::expired_offsets`].
    pub offsets_retention_ms: i64,
    /// `offsets.retention.check.interval.ms` (600000): how often expired offsets are
    /// looked for.
    pub offsets_retention_check_interval_ms: u64,
    /// Group protocol timers and limits.
    pub group: GroupConfig,
}

impl Default for CoordinatorConfig {
    fn default() -> Self {
        Self {
            offsets_topic_num_partitions: 50,
            offsets_topic_replication_factor: 3,
            offsets_topic_segment_bytes: 100 << 20,
            offset_metadata_max_bytes: 4096,
            offsets_commit_timeout_ms: 5000,
            max_groups: 100_000,
            max_member_metadata_bytes: 1 << 20,
            offsets_retention_ms: 7 * 24 * 3_600_000,
            offsets_retention_check_interval_ms: 600_000,
            group: GroupConfig::default(),
        }
    }
}

/// The groups of one led `__consumer_offsets` partition.
#[derive(Debug)]
struct Shard {
    /// The leader epoch the shard was loaded at; writes carry it.
    epoch: i32,
    loaded: bool,
    groups: HashMap<String, Group>,
}

#[derive(Debug, Default)]
struct State {
    shards: HashMap<i32, Shard>,
    joins: HashMap<u64, oneshot::Sender<JoinResult>>,
    syncs: HashMap<u64, oneshot::Sender<SyncResult>>,
}

impl State {
    fn group_count(&self) -> usize {
        self.shards.values().map(|s| s.groups.len()).sum()
    }
}

#[derive(Debug)]
struct Inner {
    cfg: CoordinatorConfig,
    rm: ReplicaManager,
    images: watch::Receiver<MetadataImage>,
    state: Mutex<State>,
    next_token: AtomicU64,
    /// One write lock per `__consumer_offsets` partition, held from a write's snapshot of
    /// the in-memory state to its apply after the append: the log's order of a partition's
    /// records is then the order their changes reach memory, so a reload (another broker
    /// taking over) rebuilds what this one held. Never removed (at most one per partition).
    writers: Mutex<HashMap<i32, Arc<tokio::sync::Mutex<()>>>>,
}

/// A group as DescribeGroups reports it.
#[derive(Debug, Clone, Default)]
pub struct GroupDescription {
    /// Kafka's state name (`Dead` for an unknown group).
    pub state: String,
    /// Protocol type (`consumer`), empty if none.
    pub protocol_type: String,
    /// The chosen protocol when Stable, else empty (as Kafka reports it).
    pub protocol: String,
    /// (member id, instance id, client id, client host, metadata, assignment); metadata
    /// and assignment only when Stable.
    pub members: Vec<(String, Option<String>, String, String, Bytes, Bytes)>,
}

/// One group as ListGroups reports it.
#[derive(Debug, Clone)]
pub struct ListedGroup {
    /// Group id.
    pub group_id: String,
    /// Protocol type, empty for an offsets-only group.
    pub protocol_type: String,
    /// Kafka's state name.
    pub state: &'static str,
}

/// One offset to commit.
#[derive(Debug, Clone)]
pub struct CommitEntry {
    /// Topic name.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// The commit (timestamp filled in by the coordinator).
    pub offset: i64,
    /// KIP-320 leader epoch, -1 if unknown.
    pub leader_epoch: i32,
    /// Client metadata (`None` = empty).
    pub metadata: Option<String>,
}

/// The coordinator handle (cheap to clone).
#[derive(Debug, Clone)]
pub struct GroupCoordinator {
    inner: Arc<Inner>,
}

fn wall_ms() -> i64 {
    keel_runtime::clock::wall_clock_ms()
}

/// Kafka's mapping of an append error to the error a group API answers with
/// (`GroupMetadataManager.storeGroup` / `appendForGroup`).
fn append_error(code: ErrorCode, for_commit: bool) -> ErrorCode {
    match code {
        ErrorCode::UnknownTopicOrPartition
        | ErrorCode::NotEnoughReplicas
        | ErrorCode::NotEnoughReplicasAfterAppend
        | ErrorCode::RequestTimedOut => ErrorCode::CoordinatorNotAvailable,
        ErrorCode::NotLeaderOrFollower
        | ErrorCode::KafkaStorageError
        | ErrorCode::FencedLeaderEpoch
        | ErrorCode::UnknownLeaderEpoch => ErrorCode::NotCoordinator,
        ErrorCode::MessageTooLarge | ErrorCode::RecordListTooLarge if for_commit => {
            ErrorCode::InvalidCommitOffsetSize
        }
        _ => ErrorCode::UnknownServerError,
    }
}

impl GroupCoordinator {
    /// A coordinator over `rm`; call [`GroupCoordinator::run`] to serve.
    pub fn new(
        cfg: CoordinatorConfig,
        rm: ReplicaManager,
        images: watch::Receiver<MetadataImage>,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                cfg,
                rm,
                images,
                state: Mutex::new(State::default()),
                next_token: AtomicU64::new(1),
                writers: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &CoordinatorConfig {
        &self.inner.cfg
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.inner.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits for the write lock of partition `p` (see `Inner::writers`).
    async fn writer(&self, p: i32) -> tokio::sync::OwnedMutexGuard<()> {
        let lock = self
            .inner
            .writers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(p)
            .or_default()
            .clone();
        lock.lock_owned().await
    }

    fn now_ms(&self) -> u64 {
        self.inner.rm.now_ms()
    }

    /// Partitions of `__consumer_offsets`: the topic's actual count once it exists, else the
    /// configured one.
    pub fn partition_count(&self) -> i32 {
        self.inner
            .images
            .borrow()
            .topics()
            .get_by_name(OFFSETS_TOPIC)
            .map(|t| t.partitions.len() as i32)
            .filter(|n| *n > 0)
            .unwrap_or(self.inner.cfg.offsets_topic_num_partitions)
    }

    /// The `__consumer_offsets` partition coordinating `group`.
    pub fn partition_for(&self, group: &str) -> i32 {
        records::partition_for(group, self.partition_count())
    }

    /// Runs timers and the leadership scan until `stop` turns true; then answers every
    /// waiting request NOT_COORDINATOR.
    pub async fn run(self, mut stop: watch::Receiver<bool>) {
        // Consumer lag is sampled apart: its ListOffsets to other brokers must not delay
        // the group timers.
        tokio::spawn(self.clone().lag_loop(stop.clone()));
        let mut tick = tokio::time::interval(SCAN_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut ticks = 0u64;
        let mut topics = self.inner.images.clone();
        let mut topic_count = topics.borrow_and_update().topics().by_name.len();
        let mut next_expiry = self.now_ms() + self.inner.cfg.offsets_retention_check_interval_ms;
        loop {
            if *stop.borrow() {
                break;
            }
            tokio::select! {
                changed = stop.changed() => {
                    if changed.is_err() {
                        break;
                    }
                }
                _ = tick.tick() => {
                    self.scan_leadership();
                    self.run_timers().await;
                    ticks += 1;
                    if ticks.is_multiple_of(GAUGE_TICKS) {
                        self.record_gauges();
                    }
                    if topics.has_changed().unwrap_or(false) {
                        let count = topics.borrow_and_update().topics().by_name.len();
                        // Only a topic deletion lowers the count, and only a topic
                        // deletion can leave offsets without their topic.
                        if count < topic_count {
                            self.forget_deleted_topics().await;
                        }
                        topic_count = count;
                    }
                    let now = self.now_ms();
                    if now >= next_expiry {
                        next_expiry = now + self.inner.cfg.offsets_retention_check_interval_ms;
                        self.expire_offsets().await;
                        // Also catches a deletion the count missed (a topic deleted and
                        // another created between two looks) and offsets loaded from the
                        // log for topics deleted while another broker coordinated.
                        self.forget_deleted_topics().await;
                    }
                }
            }
        }
        let dropped: Vec<i32> = self.lock().shards.keys().copied().collect();
        for p in dropped {
            self.drop_shard(p);
        }
    }

    /// Samples and exports consumer lag every [`lag::LAG_INTERVAL`] until `stop`.
    async fn lag_loop(self, mut stop: watch::Receiver<bool>) {
        let mut sampler = lag::LagSampler::default();
        let mut tick = tokio::time::interval(lag::LAG_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            if *stop.borrow() {
                break;
            }
            tokio::select! {
                changed = stop.changed() => {
                    if changed.is_err() {
                        break;
                    }
                }
                _ = tick.tick() => {
                    let committed = self.committed_snapshot(lag::MAX_LAG_GROUPS);
                    let partitions = committed.iter().map(|(_, t, p, _)| (t.clone(), *p)).collect();
                    let image = self.inner.images.borrow().clone();
                    let hws = sampler.high_watermarks(&partitions, &image, &self.inner.rm).await;
                    sampler.export(&lag::lag_by_group(&committed, &hws));
                }
            }
        }
    }

    /// The committed offsets of the first `max_groups` groups (by id) held here.
    fn committed_snapshot(&self, max_groups: usize) -> Vec<lag::Committed> {
        let st = self.lock();
        let mut groups: Vec<&Group> = st
            .shards
            .values()
            .filter(|s| s.loaded)
            .flat_map(|s| s.groups.values())
            .filter(|g| !g.offsets.is_empty())
            .collect();
        groups.sort_by(|a, b| a.id.cmp(&b.id));
        groups
            .into_iter()
            .take(max_groups)
            .flat_map(|g| {
                g.offsets
                    .iter()
                    .map(|((t, p), o)| (g.id.clone(), t.clone(), *p, o.offset))
            })
            .collect()
    }

    /// Samples the group gauges (see `crate::observe::RESERVED`).
    fn record_gauges(&self) {
        let st = self.lock();
        let mut by_state = [0usize; 4];
        let mut offsets = 0usize;
        for g in st.shards.values().flat_map(|s| s.groups.values()) {
            by_state[g.state as usize] += 1;
            offsets += g.offsets.len();
        }
        for (state, n) in [
            GroupState::Empty,
            GroupState::PreparingRebalance,
            GroupState::CompletingRebalance,
            GroupState::Stable,
        ]
        .into_iter()
        .zip(by_state)
        {
            metrics::gauge!("keel_broker_group_coordinator_groups", "state" => state.as_str())
                .set(n as f64);
        }
        metrics::gauge!("keel_broker_group_coordinator_offsets").set(offsets as f64);
    }

    /// Loads newly led partitions, drops partitions no longer led.
    fn scan_leadership(&self) {
        let count = self.partition_count();
        let image_knows = self
            .inner
            .images
            .borrow()
            .topics()
            .get_by_name(OFFSETS_TOPIC)
            .is_some();
        let mut led = HashMap::new();
        if image_knows {
            for p in 0..count {
                if let Some(hp) = self.inner.rm.partition(OFFSETS_TOPIC, p) {
                    let (leader, _, epoch) = ReplicaManager::role_of(&hp.lock());
                    if leader {
                        led.insert(p, epoch);
                    }
                }
            }
        }
        let (to_drop, to_load) = {
            let st = self.lock();
            let to_drop: Vec<i32> = st
                .shards
                .iter()
                .filter(|(p, s)| led.get(p) != Some(&s.epoch))
                .map(|(p, _)| *p)
                .collect();
            let to_load: Vec<(i32, i32)> = led
                .iter()
                .filter(|(p, e)| st.shards.get(p).is_none_or(|s| s.epoch != **e))
                .map(|(p, e)| (*p, *e))
                .collect();
            (to_drop, to_load)
        };
        for p in to_drop {
            tracing::info!(
                partition = p,
                "group coordinator: no longer leader of {OFFSETS_TOPIC}-{p}; its groups are dropped"
            );
            self.drop_shard(p);
        }
        for (p, epoch) in to_load {
            self.lock().shards.insert(
                p,
                Shard {
                    epoch,
                    loaded: false,
                    groups: HashMap::new(),
                },
            );
            let me = self.clone();
            tokio::spawn(async move { me.load(p, epoch).await });
        }
    }

    fn drop_shard(&self, p: i32) {
        let mut st = self.lock();
        let Some(mut shard) = st.shards.remove(&p) else {
            return;
        };
        let mut fx = Effects::default();
        for g in shard.groups.values_mut() {
            let f = g.abandon(ErrorCode::NotCoordinator);
            fx.joins.extend(f.joins);
            fx.syncs.extend(f.syncs);
        }
        Self::send_now(&mut st, fx);
    }

    /// Reads `__consumer_offsets`-`p` from its start to its log end as leader at `epoch`
    /// (Kafka `GroupMetadataManager.loadGroupsAndOffsets`) and installs the groups.
    async fn load(&self, p: i32, epoch: i32) {
        let started = std::time::Instant::now();
        let mut groups: HashMap<String, Group> = HashMap::new();
        let mut offset = None;
        let mut records_read = 0u64;
        loop {
            let chunk = {
                let Some(hp) = self.inner.rm.partition(OFFSETS_TOPIC, p) else {
                    return;
                };
                let inner = hp.lock();
                let (leader, _, now_epoch) = ReplicaManager::role_of(&inner);
                if !leader || now_epoch != epoch {
                    return;
                }
                let from = offset.unwrap_or_else(|| inner.log.log_start_offset());
                let end = inner.log.log_end_offset();
                if from >= end {
                    break;
                }
                match inner.log.read(from, LOAD_CHUNK_BYTES, end) {
                    Ok(r) => r,
                    Err(e) => {
                        tracing::error!(
                            partition = p,
                            "group coordinator: cannot read {OFFSETS_TOPIC}-{p} at {from}: {e}"
                        );
                        return;
                    }
                }
            };
            if chunk.next_offset <= offset.unwrap_or(-1) || chunk.records.is_empty() {
                break;
            }
            let now = self.now_ms();
            for batch in BatchIter::new(chunk.records) {
                let Ok(batch) = batch else { break };
                for record in batch.records() {
                    let Ok(record) = record else { break };
                    let Some(key) = record.key else { continue };
                    records_read += 1;
                    match records::decode(key, record.value) {
                        Ok(r) => replay(&mut groups, r, now),
                        Err(e) => tracing::warn!(
                            partition = p,
                            "group coordinator: skipping a record at batch {}: {e}",
                            batch.base_offset()
                        ),
                    }
                }
            }
            offset = Some(chunk.next_offset);
            tokio::task::yield_now().await;
        }
        groups.retain(|_, g| !g.is_removable());
        let mut st = self.lock();
        if let Some(shard) = st
            .shards
            .get_mut(&p)
            .filter(|s| s.epoch == epoch && !s.loaded)
        {
            tracing::info!(
                partition = p,
                groups = groups.len(),
                records = records_read,
                elapsed_ms = started.elapsed().as_millis() as u64,
                "group coordinator: loaded {OFFSETS_TOPIC}-{p} at leader epoch {epoch}"
            );
            shard.groups = groups;
            shard.loaded = true;
        }
    }

    /// Session, rebalance and pending-member timers of every loaded group.
    async fn run_timers(&self) {
        let now = self.now_ms();
        let wall = wall_ms();
        let cfg = self.inner.cfg.group.clone();
        let mut stores = Vec::new();
        {
            let mut st = self.lock();
            let mut all = Effects::default();
            let mut pending_stores = Vec::new();
            for (p, shard) in st.shards.iter_mut().filter(|(_, s)| s.loaded) {
                for g in shard.groups.values_mut() {
                    let fx = g.tick(now, wall, &cfg);
                    if fx.store {
                        pending_stores.push((*p, g.id.clone(), fx));
                    } else {
                        all.joins.extend(fx.joins);
                        all.syncs.extend(fx.syncs);
                    }
                }
                // A group whose last member id expired holds nothing (a stored group is
                // kept until its empty state is written).
                shard.groups.retain(|id, g| {
                    !g.is_removable() || pending_stores.iter().any(|(_, s, _)| s == id)
                });
            }
            Self::send_now(&mut st, all);
            stores.extend(pending_stores);
        }
        for (p, group, fx) in stores {
            self.finish(p, &group, fx).await;
        }
    }

    /// Deletes expired offsets (Kafka `GroupMetadataManager.cleanupGroupMetadata`).
    async fn expire_offsets(&self) {
        let wall = wall_ms();
        let retention = self.inner.cfg.offsets_retention_ms;
        self.delete_offsets("expired (offsets_retention_minutes)", |g| {
            g.expired_offsets(wall, retention)
        })
        .await;
    }

    /// Deletes the committed offsets of topics (or partitions) the image no longer has
    /// (Kafka `GroupCoordinator.onPartitionsDeleted`), so a topic created again under the
    /// same name starts without the old positions.
    async fn forget_deleted_topics(&self) {
        let image = self.inner.images.borrow().clone();
        self.delete_offsets("of a deleted topic", |g| {
            g.offsets
                .keys()
                .filter(|(t, p)| {
                    image
                        .topics()
                        .get_by_name(t)
                        .is_none_or(|topic| !topic.partitions.contains_key(p))
                })
                .cloned()
                .collect()
        })
        .await;
    }

    /// Tombstones the offsets `select` picks, per group one batch, plus the group's own
    /// tombstone when nothing is left of it; applied in memory once written. At most
    /// [`MAX_EXPIRY_GROUPS`] groups per call (the rest wait for the next).
    async fn delete_offsets(&self, why: &str, select: impl Fn(&Group) -> Vec<(String, i32)>) {
        let work: Vec<Expiry> = {
            let st = self.lock();
            st.shards
                .iter()
                .filter(|(_, s)| s.loaded)
                .flat_map(|(p, s)| {
                    s.groups.values().filter_map(|g| {
                        let expired = select(g);
                        (!expired.is_empty()).then(|| {
                            let emptied = expired.len() == g.offsets.len()
                                && g.members.is_empty()
                                && g.state == GroupState::Empty;
                            Expiry {
                                partition: *p,
                                epoch: s.epoch,
                                group: g.id.clone(),
                                expired,
                                emptied,
                            }
                        })
                    })
                })
                .take(MAX_EXPIRY_GROUPS)
                .collect()
        };
        for Expiry {
            partition: p,
            epoch,
            group,
            expired,
            emptied,
        } in work
        {
            let mut tombstones: Vec<(Bytes, Option<Bytes>)> = expired
                .iter()
                .map(|(t, part)| (records::offset_key(&group, t, *part), None))
                .collect();
            if emptied {
                tombstones.push((records::group_key(&group), None));
            }
            let _writer = self.writer(p).await;
            // Picked without the write lock: if the group changed since (an offset committed
            // again, a member joined), leave it to the next check.
            let unchanged = {
                let st = self.lock();
                st.shards
                    .get(&p)
                    .filter(|s| s.epoch == epoch)
                    .and_then(|s| s.groups.get(&group))
                    .is_some_and(|g| {
                        let now_emptied = expired.len() == g.offsets.len()
                            && g.members.is_empty()
                            && g.state == GroupState::Empty;
                        select(g) == expired && now_emptied == emptied
                    })
            };
            if !unchanged {
                continue;
            }
            if let Err(code) = self.append(p, epoch, tombstones).await {
                tracing::warn!(group = %group, "deleting offsets {why} failed: {code}; retried later");
                continue;
            }
            tracing::info!(group = %group, offsets = expired.len(), "deleted committed offsets {why}");
            let mut st = self.lock();
            if let Some(shard) = st.shards.get_mut(&p).filter(|s| s.epoch == epoch) {
                if let Some(g) = shard.groups.get_mut(&group) {
                    for k in &expired {
                        g.offsets.remove(k);
                    }
                }
                if shard.groups.get(&group).is_some_and(Group::is_removable) {
                    shard.groups.remove(&group);
                }
            }
        }
    }

    /// Answers waiters without a store.
    fn send_now(st: &mut State, fx: Effects) {
        for (t, r) in fx.joins {
            if let Some(tx) = st.joins.remove(&t) {
                let _ = tx.send(r);
            }
        }
        for (t, r) in fx.syncs {
            if let Some(tx) = st.syncs.remove(&t) {
                let _ = tx.send(r);
            }
        }
    }

    /// Applies effects: join answers now; if the group's metadata must be stored, write it
    /// first and then send the sync answers (or, if the write failed, the error and a new
    /// rebalance, as Kafka does).
    async fn finish(&self, p: i32, group_id: &str, fx: Effects) {
        if !fx.store {
            Self::send_now(&mut self.lock(), fx);
            return;
        }
        let Effects { joins, syncs, .. } = fx;
        let _writer = self.writer(p).await;
        let stored = {
            let mut st = self.lock();
            Self::send_now(
                &mut st,
                Effects {
                    joins,
                    ..Default::default()
                },
            );
            st.shards.get(&p).and_then(|s| {
                s.groups
                    .get(group_id)
                    .map(|g| (s.epoch, records::group_value(&g.to_stored())))
            })
        };
        let result = match stored {
            Some((epoch, value)) => self
                .append(p, epoch, vec![(records::group_key(group_id), Some(value))])
                .await
                .map_err(|c| append_error(c, false)),
            None => Err(ErrorCode::NotCoordinator),
        };
        let mut st = self.lock();
        match result {
            Ok(()) => Self::send_now(
                &mut st,
                Effects {
                    syncs,
                    ..Default::default()
                },
            ),
            Err(code) => {
                tracing::warn!(
                    group = group_id,
                    "group coordinator: storing the group failed: {code}"
                );
                let now = self.now_ms();
                let cfg = self.inner.cfg.group.clone();
                let more = st
                    .shards
                    .get_mut(&p)
                    .and_then(|s| s.groups.get_mut(group_id))
                    .map(|g| g.store_failed(now, wall_ms(), &cfg))
                    .unwrap_or_default();
                let failed = syncs
                    .into_iter()
                    .map(|(t, _)| {
                        (
                            t,
                            SyncResult {
                                error: code.code(),
                                ..Default::default()
                            },
                        )
                    })
                    .collect();
                Self::send_now(
                    &mut st,
                    Effects {
                        syncs: failed,
                        ..Default::default()
                    },
                );
                Self::send_now(&mut st, more);
            }
        }
    }

    /// Writes records to `__consumer_offsets`-`p` as one acks=all batch fenced by `epoch`.
    async fn append(
        &self,
        p: i32,
        epoch: i32,
        entries: Vec<(Bytes, Option<Bytes>)>,
    ) -> Result<(), ErrorCode> {
        let now = wall_ms();
        let mut b = RecordBatchBuilder::new(0);
        for (k, v) in &entries {
            b.append(now, Some(k), v.as_deref(), &[]);
        }
        let batch = b.build().into_bytes();
        let reply = self
            .inner
            .rm
            .append_internal(ProduceRequest {
                acks: -1,
                timeout_ms: self.inner.cfg.offsets_commit_timeout_ms,
                transactional_id: String::new(),
                topics: vec![ProduceTopicData {
                    name: OFFSETS_TOPIC.to_string(),
                    topic_id: Default::default(),
                    partitions: vec![ProducePartitionData {
                        index: p,
                        records: batch,
                        current_leader_epoch: Some(epoch),
                    }],
                }],
            })
            .await;
        if let Some(e) = reply.error {
            return Err(
                ErrorCode::from_code(e.code as i16).unwrap_or(ErrorCode::UnknownServerError)
            );
        }
        let part = reply.responses.first().and_then(|t| t.partitions.first());
        match part.and_then(|r| r.error.as_ref()) {
            None if part.is_some() => Ok(()),
            None => Err(ErrorCode::UnknownServerError),
            Some(e) if e.code == 0 => Ok(()),
            Some(e) => {
                Err(ErrorCode::from_code(e.code as i16).unwrap_or(ErrorCode::UnknownServerError))
            }
        }
    }

    /// The loaded shard for `group`, or the error clients expect: NOT_COORDINATOR when this
    /// broker does not lead its partition, COORDINATOR_LOAD_IN_PROGRESS while loading.
    fn shard_for<'a>(
        &self,
        st: &'a mut State,
        group: &str,
    ) -> Result<(i32, &'a mut Shard), ErrorCode> {
        let p = self.partition_for(group);
        match st.shards.get_mut(&p) {
            // Led here by the image but not yet picked up by the leadership scan (every
            // 100 ms): the client found this broker through that image, so tell it to retry
            // here rather than to look elsewhere. (No path holds the image while waiting for
            // the state lock, so reading it under that lock cannot deadlock.)
            None if self.leads_in_image(p) => Err(ErrorCode::CoordinatorLoadInProgress),
            None => Err(ErrorCode::NotCoordinator),
            Some(s) if !s.loaded => Err(ErrorCode::CoordinatorLoadInProgress),
            Some(s) => Ok((p, s)),
        }
    }

    /// Whether the image names this broker leader of `__consumer_offsets` partition `p`.
    fn leads_in_image(&self, p: i32) -> bool {
        self.inner
            .images
            .borrow()
            .topics()
            .get_by_name(OFFSETS_TOPIC)
            .and_then(|t| t.partitions.get(&p))
            .is_some_and(|r| r.leader == self.inner.rm.broker_id())
    }

    /// Whether this broker coordinates `group` now.
    pub fn check_coordinator(&self, group: &str) -> Result<(), ErrorCode> {
        let mut st = self.lock();
        self.shard_for(&mut st, group).map(|_| ())
    }

    fn token(&self) -> u64 {
        self.inner.next_token.fetch_add(1, Ordering::Relaxed)
    }

    /// JoinGroup. `group_id` non-empty is checked here (INVALID_GROUP_ID), as are the session
    /// timeout bounds (INVALID_SESSION_TIMEOUT) and the metadata bound (INVALID_REQUEST).
    pub async fn join(&self, group_id: &str, req: JoinRequest) -> JoinResult {
        let fail = |code: ErrorCode| JoinResult {
            error: code.code(),
            generation: -1,
            member_id: req.member_id.clone(),
            ..Default::default()
        };
        if group_id.is_empty() {
            return fail(ErrorCode::InvalidGroupId);
        }
        let cfg = &self.inner.cfg;
        if req.session_timeout_ms < cfg.group.min_session_timeout_ms
            || req.session_timeout_ms > cfg.group.max_session_timeout_ms
        {
            return fail(ErrorCode::InvalidSessionTimeout);
        }
        let metadata: usize = req.protocols.iter().map(|(n, m)| n.len() + m.len()).sum();
        if metadata > cfg.max_member_metadata_bytes {
            return fail(ErrorCode::InvalidRequest);
        }
        let token = self.token();
        let (rx, p, fx) = {
            let mut st = self.lock();
            let groups_now = st.group_count();
            let (p, shard) = match self.shard_for(&mut st, group_id) {
                Ok(s) => s,
                Err(code) => return fail(code),
            };
            if !shard.groups.contains_key(group_id) {
                if !req.member_id.is_empty() {
                    return fail(ErrorCode::UnknownMemberId);
                }
                if groups_now >= cfg.max_groups {
                    tracing::warn!(
                        "group coordinator: {} groups held; refusing a new one",
                        cfg.max_groups
                    );
                    return fail(ErrorCode::CoordinatorNotAvailable);
                }
                shard
                    .groups
                    .insert(group_id.to_string(), Group::new(group_id));
            }
            let g = shard.groups.get_mut(group_id).expect("inserted above");
            let (joined, fx) = g.join(req.clone(), token, self.now_ms(), wall_ms(), &cfg.group);
            if g.is_removable() {
                shard.groups.remove(group_id);
            }
            match joined {
                Joined::Now(r) => (Err(r), p, fx),
                Joined::Waiting => {
                    let (tx, rx) = oneshot::channel();
                    st.joins.insert(token, tx);
                    (Ok(rx), p, fx)
                }
            }
        };
        self.finish(p, group_id, fx).await;
        let rx = match rx {
            Ok(rx) => rx,
            Err(now) => return now,
        };
        // The state machine answers every waiter (rebalance deadline, removal, lost
        // leadership); a dropped sender means the coordinator stopped.
        rx.await.unwrap_or_else(|_| fail(ErrorCode::NotCoordinator))
    }

    /// SyncGroup.
    pub async fn sync(&self, group_id: &str, req: SyncRequest) -> SyncResult {
        let fail = |code: ErrorCode| SyncResult {
            error: code.code(),
            ..Default::default()
        };
        if group_id.is_empty() {
            return fail(ErrorCode::InvalidGroupId);
        }
        let token = self.token();
        let (rx, p, fx) = {
            let mut st = self.lock();
            let (p, shard) = match self.shard_for(&mut st, group_id) {
                Ok(s) => s,
                Err(code) => return fail(code),
            };
            let Some(g) = shard.groups.get_mut(group_id) else {
                return fail(ErrorCode::UnknownMemberId);
            };
            let (synced, fx) = g.sync(req, token, self.now_ms(), wall_ms());
            match synced {
                Synced::Now(r) => (Err(r), p, fx),
                Synced::Waiting => {
                    let (tx, rx) = oneshot::channel();
                    st.syncs.insert(token, tx);
                    (Ok(rx), p, fx)
                }
            }
        };
        self.finish(p, group_id, fx).await;
        let rx = match rx {
            Ok(rx) => rx,
            Err(now) => return now,
        };
        rx.await.unwrap_or_else(|_| fail(ErrorCode::NotCoordinator))
    }

    /// Heartbeat.
    pub fn heartbeat(
        &self,
        group_id: &str,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
    ) -> ErrorCode {
        if group_id.is_empty() {
            return ErrorCode::InvalidGroupId;
        }
        let now = self.now_ms();
        let mut st = self.lock();
        match self.shard_for(&mut st, group_id) {
            Err(code) => code,
            Ok((_, shard)) => match shard.groups.get_mut(group_id) {
                None => ErrorCode::UnknownMemberId,
                Some(g) => g.heartbeat(member_id, instance_id, generation, now),
            },
        }
    }

    /// LeaveGroup: the group-level error, or one error per (member id, instance id).
    pub async fn leave(
        &self,
        group_id: &str,
        members: &[(String, Option<String>)],
    ) -> Result<Vec<ErrorCode>, ErrorCode> {
        if group_id.is_empty() {
            return Err(ErrorCode::InvalidGroupId);
        }
        let cfg = self.inner.cfg.group.clone();
        let (p, codes, fx) = {
            let mut st = self.lock();
            let now = self.now_ms();
            let (p, shard) = self.shard_for(&mut st, group_id)?;
            let Some(g) = shard.groups.get_mut(group_id) else {
                return Ok(vec![ErrorCode::UnknownMemberId; members.len()]);
            };
            let mut all = Effects::default();
            let mut codes = Vec::with_capacity(members.len());
            for (m, i) in members {
                let (code, fx) = g.leave(m, i.as_deref(), now, wall_ms(), &cfg);
                codes.push(code);
                all.joins.extend(fx.joins);
                all.syncs.extend(fx.syncs);
                all.store |= fx.store;
            }
            (p, codes, all)
        };
        self.finish(p, group_id, fx).await;
        Ok(codes)
    }

    /// OffsetCommit: the group-level error, or one error per entry (in order). Entries for
    /// topics or partitions the cluster does not have are UNKNOWN_TOPIC_OR_PARTITION,
    /// metadata over `offset_metadata_max_bytes` OFFSET_METADATA_TOO_LARGE; the rest are
    /// written as one acks=all batch and applied once acknowledged.
    pub async fn commit(
        &self,
        group_id: &str,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        entries: Vec<CommitEntry>,
    ) -> Result<Vec<ErrorCode>, ErrorCode> {
        if group_id.is_empty() {
            return Err(ErrorCode::InvalidGroupId);
        }
        let cfg = &self.inner.cfg;
        let mut codes = vec![ErrorCode::None; entries.len()];
        {
            let image = self.inner.images.borrow();
            for (i, e) in entries.iter().enumerate() {
                let exists = image
                    .topics()
                    .get_by_name(&e.topic)
                    .is_some_and(|t| t.partitions.contains_key(&e.partition));
                if !exists {
                    codes[i] = ErrorCode::UnknownTopicOrPartition;
                } else if e.metadata.as_deref().map_or(0, str::len) > cfg.offset_metadata_max_bytes
                {
                    codes[i] = ErrorCode::OffsetMetadataTooLarge;
                }
            }
        }
        let now_wall = wall_ms();
        let (p, epoch) = {
            let mut st = self.lock();
            let now = self.now_ms();
            let groups_now = st.group_count();
            let (p, shard) = self.shard_for(&mut st, group_id)?;
            match shard.groups.get_mut(group_id) {
                Some(g) => {
                    let code = g.validate_commit(member_id, instance_id, generation, now);
                    if code != ErrorCode::None {
                        return Err(code);
                    }
                }
                None if generation < 0 => {
                    if groups_now >= cfg.max_groups {
                        return Err(ErrorCode::CoordinatorNotAvailable);
                    }
                }
                None => return Err(ErrorCode::IllegalGeneration),
            }
            (p, shard.epoch)
        };
        let writes: Vec<(usize, CommittedOffset)> = entries
            .iter()
            .enumerate()
            .filter(|(i, _)| codes[*i] == ErrorCode::None)
            .map(|(i, e)| {
                (
                    i,
                    CommittedOffset {
                        offset: e.offset,
                        leader_epoch: e.leader_epoch,
                        metadata: e.metadata.clone().unwrap_or_default(),
                        commit_timestamp_ms: now_wall,
                    },
                )
            })
            .collect();
        if writes.is_empty() {
            return Ok(codes);
        }
        let records = writes
            .iter()
            .map(|(i, v)| {
                let e = &entries[*i];
                (
                    records::offset_key(group_id, &e.topic, e.partition),
                    Some(records::offset_value(v)),
                )
            })
            .collect();
        let _writer = self.writer(p).await;
        match self.append(p, epoch, records).await {
            Err(code) => {
                let code = append_error(code, true);
                for (i, _) in &writes {
                    codes[*i] = code;
                }
            }
            Ok(()) => {
                metrics::counter!("keel_broker_group_coordinator_offset_commits_total")
                    .increment(writes.len() as u64);
                let mut st = self.lock();
                match st
                    .shards
                    .get_mut(&p)
                    .filter(|s| s.epoch == epoch && s.loaded)
                {
                    Some(shard) => {
                        let g = shard
                            .groups
                            .entry(group_id.to_string())
                            .or_insert_with(|| Group::new(group_id));
                        for (i, v) in writes {
                            let e = &entries[i];
                            g.offsets.insert((e.topic.clone(), e.partition), v);
                        }
                    }
                    None => {
                        // The commit is in the log (acknowledged by the ISR); the next
                        // coordinator loads it. This one lost the partition meanwhile.
                    }
                }
            }
        }
        Ok(codes)
    }

    /// OffsetFetch: committed offsets of `group_id` for `partitions` (`None` = every
    /// committed one). A partition without a commit is answered with offset -1.
    pub fn fetch_offsets(
        &self,
        group_id: &str,
        partitions: Option<Vec<(String, i32)>>,
    ) -> Result<Vec<(String, i32, Option<CommittedOffset>)>, ErrorCode> {
        let mut st = self.lock();
        let (_, shard) = self.shard_for(&mut st, group_id)?;
        let g = shard.groups.get(group_id);
        Ok(match partitions {
            Some(list) => list
                .into_iter()
                .map(|(t, p)| {
                    let c = g.and_then(|g| g.offsets.get(&(t.clone(), p)).cloned());
                    (t, p, c)
                })
                .collect(),
            None => g
                .map(|g| {
                    g.offsets
                        .iter()
                        .map(|((t, p), c)| (t.clone(), *p, Some(c.clone())))
                        .collect()
                })
                .unwrap_or_default(),
        })
    }

    /// DescribeGroups for one group; an unknown group is `Dead` with no members (Kafka).
    pub fn describe(&self, group_id: &str) -> Result<GroupDescription, ErrorCode> {
        let mut st = self.lock();
        let (_, shard) = self.shard_for(&mut st, group_id)?;
        let Some(g) = shard.groups.get(group_id) else {
            return Ok(GroupDescription {
                state: "Dead".into(),
                ..Default::default()
            });
        };
        let stable = g.state == GroupState::Stable;
        let protocol = g.protocol.clone().unwrap_or_default();
        Ok(GroupDescription {
            state: g.state.as_str().into(),
            protocol_type: g.protocol_type.clone().unwrap_or_default(),
            protocol: if stable {
                protocol.clone()
            } else {
                String::new()
            },
            members: g
                .members
                .values()
                .map(|m| {
                    let (meta, assign) = if stable {
                        let meta = m
                            .protocols
                            .iter()
                            .find(|(n, _)| *n == protocol)
                            .map(|(_, b)| b.clone())
                            .unwrap_or_default();
                        (meta, m.assignment.clone())
                    } else {
                        (Bytes::new(), Bytes::new())
                    };
                    (
                        m.member_id.clone(),
                        m.instance_id.clone(),
                        m.client_id.clone(),
                        m.client_host.clone(),
                        meta,
                        assign,
                    )
                })
                .collect(),
        })
    }

    /// ListGroups: every group of every loaded shard, filtered by state names (empty = all;
    /// Kafka compares case-insensitively). Err(COORDINATOR_LOAD_IN_PROGRESS) while a shard
    /// loads, as Kafka answers.
    pub fn list(&self, states: &[String]) -> Result<Vec<ListedGroup>, ErrorCode> {
        let st = self.lock();
        if st.shards.values().any(|s| !s.loaded) {
            return Err(ErrorCode::CoordinatorLoadInProgress);
        }
        Ok(st
            .shards
            .values()
            .flat_map(|s| s.groups.values())
            .filter(|g| {
                states.is_empty()
                    || states
                        .iter()
                        .any(|s| s.eq_ignore_ascii_case(g.state.as_str()))
            })
            .map(|g| ListedGroup {
                group_id: g.id.clone(),
                protocol_type: g.protocol_type.clone().unwrap_or_default(),
                state: g.state.as_str(),
            })
            .collect())
    }

    /// OffsetDelete (KIP-496, `kafka-consumer-groups --delete-offsets`): removes `group_id`'s
    /// committed offsets of `partitions` (topic, partition), one error per entry in order.
    /// The whole request fails with GROUP_ID_NOT_FOUND for an unknown group, NON_EMPTY_GROUP
    /// for a group with members outside the consumer protocol ([`Group::check_offset_delete`])
    /// and the coordinator errors (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, ...). A
    /// partition of a topic a member subscribes to is GROUP_SUBSCRIBED_TO_TOPIC and kept;
    /// the others are NONE, and those with a commit are tombstoned in one acks=all batch
    /// (its failure is each such partition's error). As in Kafka, a partition without a
    /// commit is NONE too; the caller answers unknown topics before. An empty group left
    /// without offsets is deleted with them (its tombstone in the same batch), as expiry does.
    pub async fn delete_group_offsets(
        &self,
        group_id: &str,
        partitions: &[(String, i32)],
    ) -> Result<Vec<ErrorCode>, ErrorCode> {
        if group_id.is_empty() {
            return Err(ErrorCode::InvalidGroupId);
        }
        let _writer = self.writer(self.partition_for(group_id)).await;
        let mut codes = vec![ErrorCode::None; partitions.len()];
        let (p, epoch, tombstones) = {
            let mut st = self.lock();
            let (p, shard) = self.shard_for(&mut st, group_id)?;
            let g = shard
                .groups
                .get(group_id)
                .ok_or(ErrorCode::GroupIdNotFound)?;
            g.check_offset_delete()?;
            let mut t: Vec<(usize, Bytes)> = Vec::new();
            let mut gone: std::collections::BTreeSet<(&str, i32)> = Default::default();
            for (i, (topic, part)) in partitions.iter().enumerate() {
                if g.subscribes_to(topic) {
                    codes[i] = ErrorCode::GroupSubscribedToTopic;
                } else if g.offsets.contains_key(&(topic.clone(), *part))
                    && gone.insert((topic, *part))
                {
                    t.push((i, records::offset_key(group_id, topic, *part)));
                }
            }
            let emptied = !t.is_empty()
                && gone.len() == g.offsets.len()
                && g.members.is_empty()
                && g.state == GroupState::Empty;
            (p, shard.epoch, (t, emptied))
        };
        let (tombstones, emptied) = tombstones;
        if tombstones.is_empty() {
            return Ok(codes);
        }
        let mut batch: Vec<(Bytes, Option<Bytes>)> =
            tombstones.iter().map(|(_, k)| (k.clone(), None)).collect();
        if emptied {
            batch.push((records::group_key(group_id), None));
        }
        if let Err(c) = self.append(p, epoch, batch).await {
            let code = append_error(c, false);
            for (i, _) in &tombstones {
                codes[*i] = code;
            }
            return Ok(codes);
        }
        let mut st = self.lock();
        if let Some(shard) = st.shards.get_mut(&p).filter(|s| s.epoch == epoch) {
            if let Some(g) = shard.groups.get_mut(group_id) {
                for (i, _) in &tombstones {
                    let (topic, part) = &partitions[*i];
                    g.offsets.remove(&(topic.clone(), *part));
                }
            }
            if emptied && shard.groups.get(group_id).is_some_and(Group::is_removable) {
                shard.groups.remove(group_id);
            }
        }
        Ok(codes)
    }

    /// DeleteGroups for one group: only an empty group (NON_EMPTY_GROUP otherwise;
    /// GROUP_ID_NOT_FOUND if unknown); its offsets and metadata are tombstoned in one batch.
    pub async fn delete(&self, group_id: &str) -> ErrorCode {
        if group_id.is_empty() {
            return ErrorCode::InvalidGroupId;
        }
        let _writer = self.writer(self.partition_for(group_id)).await;
        let (p, epoch, tombstones) = {
            let mut st = self.lock();
            let (p, shard) = match self.shard_for(&mut st, group_id) {
                Ok(s) => s,
                Err(c) => return c,
            };
            let Some(g) = shard.groups.get(group_id) else {
                return ErrorCode::GroupIdNotFound;
            };
            if !g.members.is_empty() || g.state != GroupState::Empty {
                return ErrorCode::NonEmptyGroup;
            }
            let mut t: Vec<(Bytes, Option<Bytes>)> = g
                .offsets
                .keys()
                .map(|(topic, part)| (records::offset_key(group_id, topic, *part), None))
                .collect();
            t.push((records::group_key(group_id), None));
            (p, shard.epoch, t)
        };
        if let Err(c) = self.append(p, epoch, tombstones).await {
            return append_error(c, false);
        }
        let mut st = self.lock();
        if let Some(shard) = st.shards.get_mut(&p).filter(|s| s.epoch == epoch)
            && shard
                .groups
                .get(group_id)
                .is_some_and(|g| g.members.is_empty())
        {
            shard.groups.remove(group_id);
        }
        ErrorCode::None
    }
}

/// Applies one loaded record to the groups being rebuilt.
fn replay(groups: &mut HashMap<String, Group>, r: OffsetsRecord, now_ms: u64) {
    match r {
        OffsetsRecord::Offset {
            group,
            topic,
            partition,
            value,
        } => {
            let g = groups
                .entry(group.clone())
                .or_insert_with(|| Group::new(&group));
            match value {
                Some(v) => {
                    g.offsets.insert((topic, partition), v);
                }
                None => {
                    g.offsets.remove(&(topic, partition));
                }
            }
        }
        OffsetsRecord::Group { group, value } => {
            let offsets = groups.remove(&group).map(|g| g.offsets).unwrap_or_default();
            let mut g = match value {
                Some(v) => Group::from_stored(&group, v, now_ms),
                None => Group::new(&group),
            };
            g.offsets = offsets;
            groups.insert(group, g);
        }
    }
}
