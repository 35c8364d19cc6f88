//! [`Consumer`]: reads partitions from their leaders (Kafka's `KafkaConsumer`), either
//! assigned by the application ([`Consumer::assign`]) or shared with the other members of a
//! consumer group ([`Consumer::subscribe`], [`group`] and [`assignor`]).
//!
//! - With a group, the poll joins the group when needed (the first poll, a rebalance),
//!   takes the partitions the group's leader assigned, starts each at the group's committed
//!   offset (else as `auto_offset_reset` says), and commits the positions every
//!   `auto_commit_interval_ms` and before each rebalance when `enable_auto_commit` is on
//!   (the default, as Kafka's); [`Consumer::commit_sync`] commits now. Close with
//!   [`Consumer::close`] to commit and leave the group at once (else the group waits
//!   `session_timeout_ms` before giving the partitions to others).
//!
//! - Positions are set by [`Consumer::seek`] (an offset, EARLIEST, LATEST or a timestamp via
//!   ListOffsets) or, when configured, by `auto_offset_reset`. Without either, polling a
//!   partition fails with [`ConsumeError::NoPosition`]; OFFSET_OUT_OF_RANGE is reported as
//!   [`ConsumeError::OffsetOutOfRange`] unless `auto_offset_reset` is set (like Kafka's
//!   `auto.offset.reset=none`).
//! - Fetches go to the leader named by the metadata with its leader epoch; stale-leader
//!   errors and transport errors refresh the metadata and the next poll follows the new
//!   leader. The consumer never steps back to an older leader epoch than one it has seen
//!   (in metadata, fetched batches or offset answers; KIP-320), so a resumed ex-leader is
//!   asked with the newer epoch and answers UNKNOWN_LEADER_EPOCH instead of stale data
//!   ([`crate::leader_epochs`]).
//! - [`Consumer::poll`] never fails on a retriable condition (leader moved or unreachable,
//!   position validation impossible for now): the partition yields nothing in that poll and
//!   the next poll tries again, so a consumer that keeps polling rides through leader
//!   failures. Offset lookups ([`Consumer::seek`], [`Consumer::end_offset`]) retry for up to
//!   `default_api_timeout_ms` with jittered exponential backoff.
//! - KIP-320: when the leader epoch changed since the position was last validated, the
//!   consumer asks the new leader (OffsetsForLeaderEpoch) where the epoch of the last
//!   consumed record ends; if that is below the position, records already returned were
//!   truncated and [`ConsumeError::LogTruncation`] is reported instead of silently
//!   continuing.
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use keel_client::consumer::{Consumer, ConsumerConfig, SeekTo};
//!
//! # async fn run() -> Result<(), keel_client::consumer::ConsumeError> {
//! let mut consumer = Consumer::new(ConsumerConfig::new(vec!["127.0.0.1:9192".into()]))?;
//! let tp = ("events".to_string(), 0);
//! consumer.assign([tp.clone()]);
//! consumer.seek(&tp, SeekTo::Earliest).await?;
//! loop {
//!     // Records below the high watermark only; an empty poll is normal (long poll timeout,
//!     // or a leader change in progress).
//!     for r in consumer.poll(Duration::from_millis(500)).await? {
//!         println!("{}-{}@{}: {:?}", r.topic, r.partition, r.offset, r.value);
//!     }
//! }
//! # }
//! ```

pub mod assignor;
mod error;
mod group;

use keel_runtime::backoff::pause_within;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{StreamExt, stream};
use keel_proto::ErrorCode;
use keel_proto::broker::{
    DeleteRecordsPartition, DeleteRecordsRequest, DeleteRecordsTopic, EpochEndOffsetResult,
    FetchPartition, FetchReply, FetchRequest, FetchTopic, ListOffsetsPartition, ListOffsetsRequest,
    ListOffsetsTopic, OffsetForLeaderPartition, OffsetForLeaderTopic, OffsetsForLeaderEpochRequest,
};
use keel_record::BatchIter;
use tokio::task::JoinSet;

pub use assignor::Assignor;
pub use error::ConsumeError;

use crate::brokers::Brokers;
use crate::leader_epochs::{Failure, Reaction, no_leader, react};
pub use crate::producer::TopicPartition;
use crate::rpc_error::{Api, status_line};

/// What to do when a partition has no valid position (Kafka `auto.offset.reset`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetReset {
    /// The log start offset.
    Earliest,
    /// The high watermark (only records produced from now on).
    Latest,
}

/// A target for [`Consumer::seek`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeekTo {
    /// This offset (checked by the next fetch: OFFSET_OUT_OF_RANGE if outside the log).
    Offset(i64),
    /// The log start offset (ListOffsets EARLIEST).
    Earliest,
    /// The high watermark (ListOffsets LATEST).
    Latest,
    /// The first record with a timestamp >= this, ms since the Unix epoch; the HW if none.
    Timestamp(i64),
}

/// Settings of a [`Consumer`].
#[derive(Debug, Clone)]
pub struct ConsumerConfig {
    /// `host:port` of one or more brokers.
    pub bootstrap_brokers: Vec<String>,
    /// Reset policy for partitions without a valid position; default `None` (report errors).
    pub auto_offset_reset: Option<OffsetReset>,
    /// Soft cap of record bytes per partition per fetch; default 1 MiB.
    pub max_partition_fetch_bytes: i32,
    /// Soft cap of record bytes per fetch reply; default 50 MiB.
    pub fetch_max_bytes: i32,
    /// Deadline of one RPC (on top of the long-poll wait), ms; default 30000.
    pub request_timeout_ms: u64,
    /// Budget of one offset lookup (ListOffsets for a seek or an end offset) across leader
    /// changes, retries included, ms; default 60000 (Kafka `default.api.timeout.ms`); values
    /// above [`MAX_API_TIMEOUT_MS`] (one day) count as that.
    pub default_api_timeout_ms: u64,
    /// First backoff between retries, ms, doubled up to `retry_backoff_max_ms`, with ±20%
    /// jitter; default 100 (Kafka `retry.backoff.ms`); 0 counts as 1, values above
    /// [`MAX_RETRY_BACKOFF_MS`] (one hour) as that.
    pub retry_backoff_ms: u64,
    /// Longest backoff between retries, ms; default 1000 (Kafka `retry.backoff.max.ms`);
    /// bounded like `retry_backoff_ms`.
    pub retry_backoff_max_ms: u64,
    /// `client.id`, shown by `keelctl group describe`; default `keel-consumer`.
    pub client_id: String,
    /// Static membership id of a group member (Kafka `group.instance.id`, KIP-345): a member
    /// that restarts with it within `session_timeout_ms` gets its partitions back without a
    /// rebalance, and does not leave the group on close. Default none (dynamic member).
    pub group_instance_id: Option<String>,
    /// A group member that sends no heartbeat for this long is removed, ms; default 45000
    /// (Kafka `session.timeout.ms`); the brokers accept 6000 to 1800000 by default.
    pub session_timeout_ms: i32,
    /// Between heartbeats, ms; default 3000 (Kafka `heartbeat.interval.ms`), below a third
    /// of the session timeout.
    pub heartbeat_interval_ms: u64,
    /// The longest time between polls of a group member, ms, also its rebalance timeout:
    /// past it the member leaves the group; default 300000 (Kafka `max.poll.interval.ms`).
    pub max_poll_interval_ms: i32,
    /// Commit the positions every `auto_commit_interval_ms` (during polls), before each
    /// rebalance and on close; default true (Kafka `enable.auto.commit`).
    pub enable_auto_commit: bool,
    /// ms; default 5000 (Kafka `auto.commit.interval.ms`).
    pub auto_commit_interval_ms: u64,
    /// The assignors offered, in preference order; default range then roundrobin (Kafka
    /// `partition.assignment.strategy`).
    pub partition_assignment_strategy: Vec<Assignor>,
    /// Opens the channels to the brokers: plaintext (the default) or TLS
    /// (`Dialer::new(Some(context))`).
    pub dialer: keel_runtime::tls::Dialer,
}

/// Largest effective `default_api_timeout_ms`: one day.
pub const MAX_API_TIMEOUT_MS: u64 = 24 * 3600 * 1000;

/// Largest effective `retry_backoff_ms` / `retry_backoff_max_ms`: one hour.
pub const MAX_RETRY_BACKOFF_MS: u64 = 3600 * 1000;

/// Offset lookups (ListOffsets, one partition each) [`Consumer::seek_all`] and
/// [`Consumer::end_offsets`] keep in flight at once.
pub const MAX_CONCURRENT_LOOKUPS: usize = 32;

impl ConsumerConfig {
    /// Defaults for `bootstrap_brokers`.
    pub fn new(bootstrap_brokers: Vec<String>) -> Self {
        ConsumerConfig {
            bootstrap_brokers,
            auto_offset_reset: None,
            max_partition_fetch_bytes: 1024 * 1024,
            fetch_max_bytes: 50 * 1024 * 1024,
            request_timeout_ms: 30_000,
            default_api_timeout_ms: 60_000,
            retry_backoff_ms: 100,
            retry_backoff_max_ms: 1000,
            client_id: "keel-consumer".into(),
            group_instance_id: None,
            session_timeout_ms: 45_000,
            heartbeat_interval_ms: 3000,
            max_poll_interval_ms: 300_000,
            enable_auto_commit: true,
            auto_commit_interval_ms: 5000,
            partition_assignment_strategy: vec![Assignor::Range, Assignor::RoundRobin],
            dialer: Default::default(),
        }
    }
}

/// One record read from a partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerRecord {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// Offset.
    pub offset: i64,
    /// Timestamp, ms since the Unix epoch (create time, or log append time when the topic
    /// uses it).
    pub timestamp_ms: i64,
    /// `timestamp_ms` is the leader's append time (`message.timestamp.type=LogAppendTime`),
    /// not the producer's create time.
    pub log_append_time: bool,
    /// Leader epoch of the batch holding the record.
    pub leader_epoch: i32,
    /// Key, `None` = null.
    pub key: Option<Bytes>,
    /// Value, `None` = null.
    pub value: Option<Bytes>,
}

/// Position of one assigned partition.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct PartitionState {
    /// Next offset to read; `None` = unknown.
    position: Option<i64>,
    /// Leader epoch of the last consumed record's batch (or from ListOffsets); `None` = none.
    last_epoch: Option<i32>,
    /// Leader epoch under which the position was last fetched or validated.
    validated_epoch: Option<i32>,
}

/// A consumer of explicitly assigned partitions; see the [module documentation](self).
#[derive(Debug)]
pub struct Consumer {
    config: ConsumerConfig,
    brokers: Arc<Brokers>,
    partitions: BTreeMap<TopicPartition, PartitionState>,
    /// Consecutive polls that returned nothing because some partition needed a retry (the
    /// exponent of the next pause).
    failed_polls: u32,
    /// The group membership after [`Consumer::subscribe`].
    group: Option<group::Membership>,
    /// Fetches sent and not answered yet, at most one per leader (Kafka's `Fetcher` keeps one
    /// in flight per node). A poll returns once one of them answers; the others stay in
    /// flight for the next poll, so a long poll on an idle leader never holds back records
    /// from another. Dropping the consumer aborts them.
    in_flight: JoinSet<FetchOutcome>,
    /// The leader address of each fetch in `in_flight`, by task id (removed, without an
    /// await in between, when its answer or failure is taken).
    fetching: HashMap<tokio::task::Id, String>,
    /// Partitions whose position reset could not be made (their leader did not answer): the
    /// failed attempts and when the next may be made (Kafka retries a reset after
    /// `retry.backoff.ms`, exponential to `retry.backoff.max.ms`). Cleared by a reset.
    resets: HashMap<TopicPartition, (u32, tokio::time::Instant)>,
}

/// A fetch's answer: the leader address, the partitions with the position and leader epoch
/// fetched at, and the reply.
type FetchOutcome = (
    String,
    Vec<Target>,
    Result<tonic::Response<FetchReply>, tonic::Status>,
);

/// The outcome of asking the new leader where an epoch ends (KIP-320), pure.
///
/// `position` is the next offset to read, `reply` the leader's (epoch, exclusive end offset)
/// for the epoch of the last consumed record. Truncation when the leader does not know the
/// epoch (-1) or its end is below the position, as Kafka's `SubscriptionState
/// .maybeCompleteValidation`.
pub fn truncation_detected(position: i64, end_epoch: i32, end_offset: i64) -> bool {
    end_epoch < 0 || end_offset < 0 || end_offset < position
}

impl Consumer {
    /// A consumer for `config` with nothing assigned. Connects lazily.
    pub fn new(config: ConsumerConfig) -> Result<Consumer, ConsumeError> {
        let timeout = Duration::from_millis(config.request_timeout_ms.max(1));
        let brokers = Arc::new(
            Brokers::new(config.bootstrap_brokers.clone(), timeout)
                .with_dialer(config.dialer.clone()),
        );
        Consumer::with_brokers(config, brokers)
    }

    /// A consumer that shares `brokers` (connections, leader cache and the leader epochs
    /// seen) with others, e.g. the [`Producer`](crate::producer::Producer) whose records it
    /// reads back: an epoch learnt while producing then counts for reading (KIP-320).
    /// `config.bootstrap_brokers` must not be empty; `brokers` keeps its own bootstrap list
    /// and request timeout.
    pub fn with_brokers(
        config: ConsumerConfig,
        brokers: Arc<Brokers>,
    ) -> Result<Consumer, ConsumeError> {
        if config.bootstrap_brokers.is_empty() {
            return Err(ConsumeError::Unreachable(
                "no bootstrap broker addresses given".into(),
            ));
        }
        Ok(Consumer {
            brokers,
            config,
            partitions: BTreeMap::new(),
            failed_polls: 0,
            group: None,
            in_flight: JoinSet::new(),
            fetching: HashMap::new(),
            resets: HashMap::new(),
        })
    }

    /// The backoff before retry number `attempt` ([`keel_runtime::Backoff`]).
    fn backoff(&self, attempt: u32) -> Duration {
        keel_runtime::Backoff::from_millis(
            self.config.retry_backoff_ms.clamp(1, MAX_RETRY_BACKOFF_MS),
            self.config
                .retry_backoff_max_ms
                .clamp(1, MAX_RETRY_BACKOFF_MS),
        )
        .next(attempt)
    }

    /// Joins consumer group `group_id` as a member reading `topics` (Kafka's `subscribe`):
    /// the partitions of those topics are shared among the group's members, Kafka clients
    /// included. Nothing is sent yet: the next [`poll`](Self::poll) joins. A consumer in
    /// another group leaves it first (committing with auto commit). A partition without a
    /// committed offset starts where `auto_offset_reset` says, the latest offset when it is
    /// unset (Kafka's default `auto.offset.reset=latest`). Errors: [`ConsumeError::Group`]
    /// with INVALID_GROUP_ID for an empty group id, INVALID_REQUEST for no topic or an empty
    /// topic name.
    pub async fn subscribe(
        &mut self,
        group_id: &str,
        topics: &[String],
    ) -> Result<(), ConsumeError> {
        let invalid = |code: ErrorCode, message: &str| ConsumeError::Group {
            group: group_id.to_string(),
            code,
            message: message.to_string(),
        };
        if group_id.is_empty() {
            return Err(invalid(ErrorCode::InvalidGroupId, "the group id is empty"));
        }
        if topics.is_empty() || topics.iter().any(|t| t.is_empty()) {
            return Err(invalid(
                ErrorCode::InvalidRequest,
                "subscribe needs at least one topic, none empty",
            ));
        }
        self.close().await?;
        let c = &self.config;
        let settings = group::GroupSettings {
            group_id: group_id.to_string(),
            instance_id: c.group_instance_id.clone(),
            client_id: c.client_id.clone(),
            session_timeout_ms: c.session_timeout_ms,
            heartbeat_interval: Duration::from_millis(c.heartbeat_interval_ms.max(1)),
            rebalance_timeout_ms: c.max_poll_interval_ms,
            assignors: c.partition_assignment_strategy.clone(),
            request_timeout: Duration::from_millis(c.request_timeout_ms.max(1)),
            api_timeout: Duration::from_millis(c.default_api_timeout_ms.min(MAX_API_TIMEOUT_MS)),
            backoff: keel_runtime::Backoff::from_millis(
                c.retry_backoff_ms.clamp(1, MAX_RETRY_BACKOFF_MS),
                c.retry_backoff_max_ms.clamp(1, MAX_RETRY_BACKOFF_MS),
            ),
            bootstrap: c.bootstrap_brokers.clone(),
        };
        let mut topics = topics.to_vec();
        topics.sort();
        topics.dedup();
        self.group = Some(group::Membership::new(
            settings,
            topics,
            self.brokers.clone(),
        ));
        Ok(())
    }

    /// The group and this member's (member id, generation), while it is in a generation.
    pub fn group_member(&self) -> Option<(String, String, i32)> {
        let g = self.group.as_ref()?;
        let (member, generation) = g.generation()?;
        Some((g.group_id().to_string(), member, generation))
    }

    /// The positions of the assigned partitions, as a commit carries them: (partition, next
    /// offset, leader epoch of the last record read or -1).
    fn positions(&self) -> Vec<(TopicPartition, i64, i32)> {
        self.partitions
            .iter()
            .filter_map(|(tp, s)| Some((tp.clone(), s.position?, s.last_epoch.unwrap_or(-1))))
            .collect()
    }

    /// Commits the positions of every assigned partition to the group now (Kafka's
    /// `commitSync()`): after it, a member that takes these partitions starts where this one
    /// is. Errors: [`ConsumeError::NotSubscribed`], [`ConsumeError::CommitFailed`] when the
    /// group rebalanced, [`ConsumeError::Unreachable`] when no coordinator acknowledged it
    /// within `default_api_timeout_ms`.
    pub async fn commit_sync(&mut self) -> Result<(), ConsumeError> {
        let g = self.group.as_ref().ok_or(ConsumeError::NotSubscribed)?;
        g.commit(&self.positions()).await
    }

    /// Commits `offsets` ((partition, next offset to read)) to the group (Kafka's
    /// `commitSync(Map)`), errors as [`commit_sync`](Self::commit_sync); a negative offset is
    /// refused by the broker (INVALID_REQUEST) and nothing is committed.
    pub async fn commit_offsets(
        &mut self,
        offsets: &[(TopicPartition, i64)],
    ) -> Result<(), ConsumeError> {
        let g = self.group.as_ref().ok_or(ConsumeError::NotSubscribed)?;
        let with_epochs: Vec<_> = offsets
            .iter()
            .map(|(tp, o)| {
                let epoch = self
                    .partitions
                    .get(tp)
                    .filter(|s| s.position == Some(*o))
                    .and_then(|s| s.last_epoch)
                    .unwrap_or(-1);
                (tp.clone(), *o, epoch)
            })
            .collect();
        g.commit(&with_epochs).await
    }

    /// The group's committed offsets (next offset to read) of `tps`; partitions without one
    /// are absent. Errors: [`ConsumeError::NotSubscribed`], [`ConsumeError::Unreachable`].
    pub async fn committed(
        &self,
        tps: &[TopicPartition],
    ) -> Result<BTreeMap<TopicPartition, i64>, ConsumeError> {
        let g = self.group.as_ref().ok_or(ConsumeError::NotSubscribed)?;
        Ok(g.committed(tps)
            .await?
            .into_iter()
            .map(|(tp, (o, _))| (tp, o))
            .collect())
    }

    /// Ends the group membership, if any: commits the positions (with auto commit), leaves
    /// the group (a static member stays for `session_timeout_ms`, KIP-345) and unassigns
    /// every partition. A failed commit is returned after the member has left.
    pub async fn close(&mut self) -> Result<(), ConsumeError> {
        let Some(g) = self.group.as_ref() else {
            return Ok(());
        };
        let committed = if self.config.enable_auto_commit && g.generation().is_some() {
            g.commit(&self.positions()).await
        } else {
            Ok(())
        };
        g.leave().await;
        self.group = None;
        self.partitions.clear();
        committed
    }

    /// Before a poll of a group member: rejoins when due (committing first with auto
    /// commit), then auto-commits when the interval has passed. Joining takes the new
    /// assignment, positioned at the committed offsets.
    async fn group_poll(&mut self) -> Result<(), ConsumeError> {
        let Some(g) = self.group.as_ref() else {
            return Ok(());
        };
        g.polled();
        let auto = self.config.enable_auto_commit;
        if g.needs_join() {
            if auto && !self.partitions.is_empty() {
                // Before giving the partitions up (eager protocol): commit what was read.
                // The group may have moved on already (CommitFailed); then the next
                // member re-reads from the last commit, as with Kafka.
                if let Err(e) = g.commit(&self.positions()).await {
                    tracing::warn!("group {}: commit before rejoining: {e}", g.group_id());
                }
            }
            self.partitions.clear();
            let parts = g.join().await?;
            let committed = g.committed(&parts).await?;
            let mut next = BTreeMap::new();
            for tp in parts {
                let state = match committed.get(&tp) {
                    Some(&(offset, epoch)) => {
                        if epoch >= 0 {
                            self.brokers.observe_epoch(&tp.0, tp.1, epoch);
                        }
                        PartitionState {
                            position: Some(offset),
                            last_epoch: (epoch >= 0).then_some(epoch),
                            validated_epoch: None,
                        }
                    }
                    None => PartitionState::default(),
                };
                next.insert(tp, state);
            }
            self.partitions = next;
            if let Some(g) = self.group.as_mut() {
                g.last_commit = std::time::Instant::now();
            }
            return Ok(());
        }
        let interval = Duration::from_millis(self.config.auto_commit_interval_ms);
        if auto && g.last_commit.elapsed() >= interval {
            if let Err(e) = g.commit(&self.positions()).await {
                tracing::warn!("group {}: auto commit: {e}", g.group_id());
            }
            if let Some(g) = self.group.as_mut() {
                g.last_commit = std::time::Instant::now();
            }
        }
        Ok(())
    }

    /// Replaces the assignment by `partitions`; partitions kept keep their positions. Not for
    /// a group member: its assignment is the group's (the next rebalance replaces this).
    pub fn assign(&mut self, partitions: impl IntoIterator<Item = TopicPartition>) {
        let mut next = BTreeMap::new();
        for tp in partitions {
            let state = self.partitions.remove(&tp).unwrap_or_default();
            next.insert(tp, state);
        }
        self.partitions = next;
    }

    /// Every partition of `topic`, from the metadata (for "consume the whole topic").
    pub async fn partitions_of(&self, topic: &str) -> Result<Vec<TopicPartition>, ConsumeError> {
        let meta = self.brokers.refresh(topic).await?;
        Ok((0..meta.partitions.len() as i32)
            .map(|p| (topic.to_string(), p))
            .collect())
    }

    /// The assigned partitions.
    pub fn assignment(&self) -> Vec<TopicPartition> {
        self.partitions.keys().cloned().collect()
    }

    /// The next offset to read from `tp`, if known.
    pub fn position(&self, tp: &TopicPartition) -> Option<i64> {
        self.partitions.get(tp).and_then(|s| s.position)
    }

    /// Moves the position of `tp` (EARLIEST, LATEST and timestamps are looked up now with
    /// ListOffsets on the leader).
    pub async fn seek(&mut self, tp: &TopicPartition, to: SeekTo) -> Result<i64, ConsumeError> {
        let state = self.seek_state(tp, to).await?;
        let position = state.position.unwrap_or(-1);
        self.partitions.insert(tp.clone(), state);
        Ok(position)
    }

    /// [`Self::seek`] of every partition of `tps`, the lookups made concurrently (at most
    /// [`MAX_CONCURRENT_LOOKUPS`] at once): a partition whose leader does not answer costs
    /// `default_api_timeout_ms` once, not once for every partition after it (Kafka's
    /// consumer looks offsets up for all partitions of a leader at once). One result per
    /// partition of `tps`, in order; a failed one leaves that position as it was.
    pub async fn seek_all(
        &mut self,
        tps: &[TopicPartition],
        to: SeekTo,
    ) -> Vec<Result<i64, ConsumeError>> {
        let states: Vec<_> = stream::iter(tps)
            .map(|tp| self.seek_state(tp, to))
            .buffered(MAX_CONCURRENT_LOOKUPS)
            .collect()
            .await;
        tps.iter()
            .zip(states)
            .map(|(tp, state)| {
                let state = state?;
                let position = state.position.unwrap_or(-1);
                self.partitions.insert(tp.clone(), state);
                Ok(position)
            })
            .collect()
    }

    /// The state a seek of `tp` to `to` sets (looked up on the leader, without changing
    /// anything). [`ConsumeError::NotAssigned`] for a partition not assigned.
    async fn seek_state(
        &self,
        tp: &TopicPartition,
        to: SeekTo,
    ) -> Result<PartitionState, ConsumeError> {
        if !self.partitions.contains_key(tp) {
            return Err(ConsumeError::NotAssigned {
                topic: tp.0.clone(),
                partition: tp.1,
            });
        }
        Ok(match to {
            SeekTo::Offset(o) => PartitionState {
                position: Some(o),
                last_epoch: None,
                validated_epoch: None,
            },
            SeekTo::Earliest => self.list_offset(tp, -2).await?,
            SeekTo::Latest => self.list_offset(tp, -1).await?,
            SeekTo::Timestamp(ts) => {
                let s = self.list_offset(tp, ts.max(0)).await?;
                if s.position.is_some() {
                    s
                } else {
                    self.list_offset(tp, -1).await?
                }
            }
        })
    }

    /// The high watermark of `tp` now (ListOffsets LATEST: the offset after the last
    /// committed record, exclusive), without moving the position.
    pub async fn end_offset(&self, tp: &TopicPartition) -> Result<i64, ConsumeError> {
        Ok(self.list_offset(tp, -1).await?.position.unwrap_or(0))
    }

    /// [`Self::end_offset`] of every partition of `tps`, looked up concurrently as in
    /// [`Self::seek_all`] (Kafka: `Consumer.endOffsets`); one result per partition, in order.
    pub async fn end_offsets(&self, tps: &[TopicPartition]) -> Vec<Result<i64, ConsumeError>> {
        stream::iter(tps)
            .map(|tp| self.end_offset(tp))
            .buffered(MAX_CONCURRENT_LOOKUPS)
            .collect()
            .await
    }

    /// The log start offset of `tp` now (ListOffsets EARLIEST, inclusive).
    pub async fn beginning_offset(&self, tp: &TopicPartition) -> Result<i64, ConsumeError> {
        Ok(self.list_offset(tp, -2).await?.position.unwrap_or(0))
    }

    /// Deletes the records of `tp` below `offset` (-1: the high watermark) on its leader and
    /// waits up to `timeout_ms` (0..=300000) for the in-sync replicas (BrokerService
    /// DeleteRecords; Kafka `Admin.deleteRecords`, KIP-107); returns the partition's low
    /// watermark (its new log start). Sent again after a leader change (metadata refreshed),
    /// within `default_api_timeout_ms`; deleting is idempotent. The call's deadline is the
    /// consumer's `request_timeout_ms`: give it `timeout_ms` plus a few seconds.
    ///
    /// Errors: [`ConsumeError::Refused`] with the broker's reason for OFFSET_OUT_OF_RANGE
    /// (negative, or above the high watermark), POLICY_VIOLATION (a compact-only topic),
    /// REQUEST_TIMED_OUT (the leader's start moved, a follower had not followed within
    /// `timeout_ms`) and authorization failures; [`ConsumeError::Unreachable`] when no leader
    /// answered in time.
    pub async fn delete_records(
        &self,
        tp: &TopicPartition,
        offset: i64,
        timeout_ms: i32,
    ) -> Result<i64, ConsumeError> {
        self.retried(tp, "DeleteRecords", || {
            self.try_delete_records(tp, offset, timeout_ms)
        })
        .await
    }

    /// Runs `attempt` on `tp`'s leader until it succeeds or fails for good, again after each
    /// retriable failure (metadata refreshed by the attempt) with backoff, for up to
    /// `default_api_timeout_ms`; then [`ConsumeError::Unreachable`] naming `what` and the last
    /// failure.
    async fn retried<T, Fut>(
        &self,
        tp: &TopicPartition,
        what: &str,
        mut attempt: impl FnMut() -> Fut,
    ) -> Result<T, ConsumeError>
    where
        Fut: std::future::Future<Output = Result<T, Lookup>>,
    {
        let budget =
            Duration::from_millis(self.config.default_api_timeout_ms.min(MAX_API_TIMEOUT_MS));
        let deadline = tokio::time::Instant::now() + budget;
        let mut last = String::new();
        for n in 0u32.. {
            match attempt().await {
                Ok(v) => return Ok(v),
                Err(Lookup::Fatal(e)) => return Err(e),
                Err(Lookup::Retry(msg)) => last = msg,
            }
            let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
            let Some(pause) = pause_within(self.backoff(n), remaining) else {
                break;
            };
            tokio::time::sleep(pause).await;
        }
        Err(ConsumeError::Unreachable(format!(
            "{}-{}: {what} failed within {} ms: {last}",
            tp.0,
            tp.1,
            budget.as_millis()
        )))
    }

    async fn try_delete_records(
        &self,
        tp: &TopicPartition,
        offset: i64,
        timeout_ms: i32,
    ) -> Result<i64, Lookup> {
        let (addr, mut client, _) = self.leader(tp).await?;
        let reply = client
            .delete_records(DeleteRecordsRequest {
                topics: vec![DeleteRecordsTopic {
                    name: tp.0.clone(),
                    partitions: vec![DeleteRecordsPartition {
                        partition_index: tp.1,
                        offset,
                    }],
                }],
                timeout_ms,
            })
            .await
            .map_err(|s| self.transport(tp, &addr, &s))?
            .into_inner();
        let refused = |error: &keel_proto::common::Error| {
            Lookup::Fatal(ConsumeError::Refused {
                topic: tp.0.clone(),
                partition: tp.1,
                code: ErrorCode::from_proto(Some(error)).unwrap_or(ErrorCode::UnknownServerError),
                message: error.message.clone(),
            })
        };
        if let Some(e) = reply.error.as_ref() {
            return Err(refused(e));
        }
        let p = reply
            .topics
            .iter()
            .filter(|t| t.name == tp.0)
            .flat_map(|t| &t.partitions)
            .find(|p| p.partition_index == tp.1)
            .ok_or_else(|| {
                Lookup::Fatal(ConsumeError::Protocol(format!(
                    "DeleteRecords: no answer for {}-{}",
                    tp.0, tp.1
                )))
            })?;
        match ErrorCode::from_proto(p.error.as_ref()) {
            Ok(ErrorCode::None) => Ok(p.low_watermark),
            // Retriable in Kafka, but the wait already took `timeout_ms`: say so.
            Ok(ErrorCode::RequestTimedOut | ErrorCode::OffsetOutOfRange) => {
                Err(refused(p.error.as_ref().expect("an error code")))
            }
            Ok(_) => match self.check(tp, p.error.as_ref()) {
                Err(Lookup::Fatal(ConsumeError::Kafka { .. })) => {
                    Err(refused(p.error.as_ref().expect("an error code")))
                }
                other => other.map(|()| p.low_watermark),
            },
            Err(e) => Err(Lookup::Fatal(ConsumeError::Protocol(e.to_string()))),
        }
    }

    /// ListOffsets for `tp` at `timestamp` (-2 earliest, -1 latest, >= 0 a time) on the
    /// leader, retried across leader changes (metadata refreshed) for up to
    /// `default_api_timeout_ms`.
    async fn list_offset(
        &self,
        tp: &TopicPartition,
        timestamp: i64,
    ) -> Result<PartitionState, ConsumeError> {
        self.retried(tp, "offset lookup", || self.try_list_offset(tp, timestamp))
            .await
    }

    async fn try_list_offset(
        &self,
        tp: &TopicPartition,
        timestamp: i64,
    ) -> Result<PartitionState, Lookup> {
        let (addr, mut client, epoch) = self.leader(tp).await?;
        let reply = client
            .list_offsets(ListOffsetsRequest {
                replica_id: -1,
                isolation_level: 0,
                topics: vec![ListOffsetsTopic {
                    name: tp.0.clone(),
                    partitions: vec![ListOffsetsPartition {
                        partition_index: tp.1,
                        current_leader_epoch: Some(epoch),
                        timestamp,
                    }],
                }],
            })
            .await
            .map_err(|s| self.transport(tp, &addr, &s))?
            .into_inner();
        let p = reply
            .topics
            .iter()
            .filter(|t| t.name == tp.0)
            .flat_map(|t| &t.partitions)
            .find(|p| p.partition_index == tp.1)
            .ok_or_else(|| {
                Lookup::Fatal(ConsumeError::Protocol(format!(
                    "ListOffsets: no answer for {}-{}",
                    tp.0, tp.1
                )))
            })?;
        self.check(tp, p.error.as_ref())?;
        self.brokers.observe_epoch(&tp.0, tp.1, p.leader_epoch);
        Ok(PartitionState {
            position: (p.offset >= 0).then_some(p.offset),
            last_epoch: (p.leader_epoch >= 0).then_some(p.leader_epoch),
            validated_epoch: Some(epoch),
        })
    }

    /// The leader of `tp`: address, client, leader epoch.
    async fn leader(&self, tp: &TopicPartition) -> Result<(String, Clients, i32), Lookup> {
        let meta = match self.brokers.topic(&tp.0).await {
            Ok(m) => m,
            Err(crate::brokers::MetadataError::Topic { code, .. }) if code.retriable() => {
                return Err(Lookup::Retry(code.to_string()));
            }
            Err(
                e @ (crate::brokers::MetadataError::Topic { .. }
                | crate::brokers::MetadataError::NotABroker { .. }),
            ) => {
                return Err(Lookup::Fatal(e.into()));
            }
            Err(e) => return Err(Lookup::Retry(e.to_string())),
        };
        let Some(p) = meta.partitions.get(tp.1 as usize).copied() else {
            return Err(Lookup::Fatal(ConsumeError::Kafka {
                topic: tp.0.clone(),
                partition: tp.1,
                code: ErrorCode::UnknownTopicOrPartition,
            }));
        };
        match (p.leader_id >= 0)
            .then(|| self.brokers.client(p.leader_id))
            .flatten()
        {
            Some((addr, c)) => Ok((addr, c, p.leader_epoch)),
            None => {
                self.brokers.invalidate(&tp.0);
                let known = self.brokers.known_epoch(&tp.0, tp.1);
                Err(Lookup::Retry(no_leader(&tp.0, tp.1, p, known)))
            }
        }
    }

    fn transport(&self, tp: &TopicPartition, addr: &str, status: &tonic::Status) -> Lookup {
        self.brokers.forget(addr);
        self.brokers.invalidate(&tp.0);
        Lookup::Retry(status_line(addr, Api::Broker, status))
    }

    fn check(
        &self,
        tp: &TopicPartition,
        error: Option<&keel_proto::common::Error>,
    ) -> Result<(), Lookup> {
        match ErrorCode::from_proto(error) {
            Ok(ErrorCode::None) => Ok(()),
            Ok(code) => match react(Failure::Kafka(code)) {
                Reaction::RefreshAndRetry => {
                    self.brokers.invalidate(&tp.0);
                    Err(Lookup::Retry(code.to_string()))
                }
                Reaction::Retry => Err(Lookup::Retry(code.to_string())),
                Reaction::Fatal => Err(Lookup::Fatal(ConsumeError::Kafka {
                    topic: tp.0.clone(),
                    partition: tp.1,
                    code,
                })),
            },
            Err(e) => Err(Lookup::Fatal(ConsumeError::Protocol(e.to_string()))),
        }
    }

    /// KIP-320 validation of `tp`'s position against its current leader, if the leader
    /// epoch changed since the position was last validated. One attempt: `Ok(false)` when it
    /// could not be done now (leader unknown, unreachable, or moved again: the metadata is
    /// refreshed) and the partition must wait for the next poll, as Kafka's consumer keeps a
    /// partition "awaiting validation" and retries from its poll loop
    /// (`OffsetsForLeaderEpochUtils`, `SubscriptionState.awaitingValidation`).
    async fn validate(&mut self, tp: &TopicPartition) -> Result<bool, ConsumeError> {
        let state = self.partitions.get(tp).cloned().unwrap_or_default();
        let (Some(position), Some(last_epoch)) = (state.position, state.last_epoch) else {
            return Ok(true);
        };
        match self
            .try_epoch_end(tp, last_epoch, state.validated_epoch)
            .await
        {
            Ok(None) => Ok(true),
            Ok(Some((leader_epoch, r))) => {
                if truncation_detected(position, r.leader_epoch, r.end_offset) {
                    return Err(ConsumeError::LogTruncation {
                        topic: tp.0.clone(),
                        partition: tp.1,
                        position,
                        epoch: last_epoch,
                        end_epoch: r.leader_epoch,
                        end_offset: r.end_offset,
                    });
                }
                if let Some(s) = self.partitions.get_mut(tp) {
                    s.validated_epoch = Some(leader_epoch);
                }
                Ok(true)
            }
            Err(Lookup::Fatal(e)) => Err(e),
            Err(Lookup::Retry(_)) => Ok(false),
        }
    }

    /// `Ok(None)` when the leader epoch is the validated one (nothing to check), else the
    /// current leader epoch and the leader's answer for `last_epoch`.
    async fn try_epoch_end(
        &self,
        tp: &TopicPartition,
        last_epoch: i32,
        validated: Option<i32>,
    ) -> Result<Option<(i32, EpochEndOffsetResult)>, Lookup> {
        let (addr, mut client, epoch) = self.leader(tp).await?;
        if validated == Some(epoch) {
            return Ok(None);
        }
        let reply = client
            .offsets_for_leader_epoch(OffsetsForLeaderEpochRequest {
                replica_id: -1,
                topics: vec![OffsetForLeaderTopic {
                    topic: tp.0.clone(),
                    partitions: vec![OffsetForLeaderPartition {
                        partition: tp.1,
                        current_leader_epoch: Some(epoch),
                        leader_epoch: last_epoch,
                    }],
                }],
            })
            .await
            .map_err(|s| self.transport(tp, &addr, &s))?
            .into_inner();
        let r = reply
            .topics
            .iter()
            .filter(|t| t.topic == tp.0)
            .flat_map(|t| &t.partitions)
            .find(|p| p.partition == tp.1)
            .cloned()
            .ok_or_else(|| {
                Lookup::Fatal(ConsumeError::Protocol(format!(
                    "OffsetsForLeaderEpoch: no answer for {}-{}",
                    tp.0, tp.1
                )))
            })?;
        self.check(tp, r.error.as_ref())?;
        Ok(Some((epoch, r)))
    }

    /// Fetches from the leaders of every assigned partition, each leader's fetch waiting up
    /// to `max_wait` for data, and returns the records of the first answer and of any other
    /// already in (possibly none), in offset order per partition. A fetch not answered yet
    /// stays in flight for the next poll (one per leader, as Kafka's `Fetcher`), so an idle
    /// leader's long poll never holds back another leader's records; its records count only
    /// for partitions still assigned at the position it was sent from.
    /// Retriable errors (leader moved, broker down, position validation not possible yet)
    /// refresh the metadata and yield no records for that partition in this poll; call
    /// `poll` again. A group member first joins or rejoins when due and auto-commits (see the
    /// [module documentation](self)). Errors: [`ConsumeError::NoPosition`],
    /// [`ConsumeError::OffsetOutOfRange`], [`ConsumeError::LogTruncation`], non-retriable
    /// Kafka codes, corrupt batches; for a group member [`ConsumeError::Group`] and
    /// [`ConsumeError::Unreachable`] when joining failed (the next poll tries again).
    ///
    /// Cancel safety: positions move only when `poll` returns the records, so a poll
    /// dropped unfinished (e.g. in a `tokio::select!` with a shutdown signal) skips nothing;
    /// the next poll reads those records again.
    pub async fn poll(&mut self, max_wait: Duration) -> Result<Vec<ConsumerRecord>, ConsumeError> {
        self.group_poll().await?;
        let tps = self.assignment();
        if tps.is_empty() && self.group.is_some() {
            // A member without partitions (more members than partitions) waits like a
            // long poll with nothing to read, instead of spinning.
            tokio::time::sleep(max_wait).await;
            return Ok(Vec::new());
        }
        // Positions first: reset policy or error. A reset whose leader cannot answer now (an
        // offline partition) stays pending and the others are fetched (Kafka's consumer
        // resets in the background, per partition).
        let mut pending = false;
        let mut ready = Vec::with_capacity(tps.len());
        for tp in tps {
            if self.position(&tp).is_none() {
                let now = tokio::time::Instant::now();
                if self.resets.get(&tp).is_some_and(|(_, at)| now < *at) {
                    pending = true;
                    continue;
                }
                match self.reset_position(&tp).await? {
                    Reset::Done => {
                        self.resets.remove(&tp);
                    }
                    Reset::Pending => {
                        let failed = self.resets.get(&tp).map_or(0, |r| r.0);
                        let at = tokio::time::Instant::now() + self.backoff(failed);
                        self.resets.insert(tp, (failed.saturating_add(1), at));
                        pending = true;
                        continue;
                    }
                    Reset::NoPolicy => {
                        return Err(ConsumeError::NoPosition {
                            topic: tp.0.clone(),
                            partition: tp.1,
                        });
                    }
                }
            }
            ready.push(tp);
        }
        // A pending reset is retried on its own schedule: it does not make the poll pause
        // (which would hold back the other partitions' records).
        let (by_leader, mut retry) = self.fetch_targets(&ready).await?;
        let max_wait_ms = max_wait.as_millis().min(i32::MAX as u128) as i32;
        for (addr, (mut client, parts)) in by_leader {
            if self.fetching.values().any(|a| *a == addr) {
                continue; // its partitions come with the fetch in flight
            }
            let request = self.fetch_request(&parts, max_wait_ms);
            let task = self.in_flight.spawn({
                let addr = addr.clone();
                async move {
                    let r = client.fetch(request).await;
                    (addr, parts, r)
                }
            });
            self.fetching.insert(task.id(), addr);
        }
        if pending && self.in_flight.is_empty() {
            // Nothing to wait on: wait for the first reset due (at most `max_wait`).
            let due = self.resets.values().map(|r| r.1).min();
            let pause = due.map_or(max_wait, |at| {
                at.saturating_duration_since(tokio::time::Instant::now())
            });
            tokio::time::sleep(pause.min(max_wait)).await;
        }
        // The first answer, then every other one already in.
        let mut answers = Vec::new();
        if let Some(first) = self.in_flight.join_next_with_id().await {
            answers.push(first);
            while let Some(more) = self.in_flight.try_join_next_with_id() {
                answers.push(more);
            }
        }
        let mut done = Vec::with_capacity(answers.len());
        let mut failed = None;
        for joined in answers {
            match joined {
                Ok((id, outcome)) => {
                    self.fetching.remove(&id);
                    done.push(outcome);
                }
                Err(e) => {
                    self.fetching.remove(&e.id());
                    failed.get_or_insert(e);
                }
            }
        }
        if let Some(e) = failed {
            return Err(ConsumeError::Protocol(format!("fetch task: {e}")));
        }
        let mut out = Vec::new();
        let mut advances = Vec::new();
        for (addr, parts, reply) in done {
            // Sent in an earlier poll: only partitions still assigned and still at the
            // position fetched from (no seek, reset or rebalance since) take its records.
            let parts: Vec<Target> = parts
                .into_iter()
                .filter(|(tp, position, _)| self.position(tp) == Some(*position))
                .collect();
            if parts.is_empty() {
                continue;
            }
            match reply {
                Err(_status) => {
                    self.brokers.forget(&addr);
                    for (tp, _, _) in &parts {
                        self.brokers.invalidate(&tp.0);
                    }
                    retry = true;
                }
                Ok(reply) => {
                    let reply = reply.into_inner();
                    retry |= self
                        .take_fetch(reply, &parts, &mut out, &mut advances)
                        .await?;
                }
            }
        }
        self.pause_if_fruitless(out.is_empty() && retry, max_wait)
            .await;
        // After the last await: a poll dropped before returning (a `select!` that took
        // another branch) moves no position, so no record it read is skipped.
        for (tp, position, epoch, next, last_epoch) in advances {
            if let Some(s) = self.partitions.get_mut(&tp) {
                // Only if nobody seeked meanwhile (positions are per poll).
                if s.position == Some(position) {
                    s.validated_epoch = Some(epoch);
                    if let Some(next) = next {
                        s.position = Some(next);
                        s.last_epoch = last_epoch;
                    }
                }
            }
        }
        Ok(out)
    }

    /// Moves `tp` to where `auto_offset_reset` says, with one ListOffsets to its leader
    /// ([`Reset`]): a retriable failure leaves the reset to a later poll instead of
    /// retrying for the API timeout while the other partitions wait. Errors: non-retriable
    /// ListOffsets answers.
    async fn reset_position(&mut self, tp: &TopicPartition) -> Result<Reset, ConsumeError> {
        let timestamp = match self.config.auto_offset_reset {
            Some(OffsetReset::Earliest) => -2,
            Some(OffsetReset::Latest) => -1,
            // A group member resets like Kafka's consumer by default (latest).
            None if self.group.is_some() => -1,
            None => return Ok(Reset::NoPolicy),
        };
        match self.try_list_offset(tp, timestamp).await {
            Ok(state) => {
                self.partitions.insert(tp.clone(), state);
                Ok(Reset::Done)
            }
            Err(Lookup::Retry(_)) => Ok(Reset::Pending),
            Err(Lookup::Fatal(e)) => Err(e),
        }
    }

    /// The partitions of `tps` to fetch now, grouped by leader address (client and targets),
    /// validating positions after leader changes; the flag is true when some partition must
    /// wait for a later poll (validation not possible yet, leader unknown or unreachable).
    async fn fetch_targets(
        &mut self,
        tps: &[TopicPartition],
    ) -> Result<(HashMap<String, (Clients, Vec<Target>)>, bool), ConsumeError> {
        let mut by_leader: HashMap<String, (Clients, Vec<Target>)> = HashMap::new();
        let mut retry = false;
        for tp in tps {
            if !self.validate(tp).await? {
                retry = true;
                continue;
            }
            match self.leader(tp).await {
                Ok((addr, client, epoch)) => {
                    let position = self.position(tp).unwrap_or(0);
                    by_leader
                        .entry(addr)
                        .or_insert_with(|| (client, Vec::new()))
                        .1
                        .push((tp.clone(), position, epoch));
                }
                Err(Lookup::Retry(_)) => retry = true,
                Err(Lookup::Fatal(e)) => return Err(e),
            }
        }
        Ok((by_leader, retry))
    }

    /// The Fetch request for `parts` (one leader's partitions), waiting up to `max_wait_ms`
    /// for data, with the configured byte caps (pure).
    fn fetch_request(&self, parts: &[Target], max_wait_ms: i32) -> FetchRequest {
        let mut topics: BTreeMap<String, Vec<FetchPartition>> = BTreeMap::new();
        for (tp, position, epoch) in parts {
            topics
                .entry(tp.0.clone())
                .or_default()
                .push(FetchPartition {
                    partition: tp.1,
                    fetch_offset: *position,
                    current_leader_epoch: Some(*epoch),
                    last_fetched_epoch: -1,
                    log_start_offset: -1,
                    partition_max_bytes: self.config.max_partition_fetch_bytes,
                });
        }
        FetchRequest {
            session: None,
            replica_id: -1,
            broker_epoch: -1,
            max_wait_ms,
            min_bytes: 1,
            max_bytes: self.config.fetch_max_bytes,
            isolation_level: 0,
            topics: topics
                .into_iter()
                .map(|(topic, partitions)| FetchTopic {
                    topic,
                    topic_id: Bytes::new(),
                    partitions,
                })
                .collect(),
        }
    }

    /// After a poll: when it was `fruitless` (nothing read and some partition needs a retry),
    /// gives the cluster a moment (a leader election) before the caller polls again, else
    /// resets the count of fruitless polls.
    async fn pause_if_fruitless(&mut self, fruitless: bool, max_wait: Duration) {
        if fruitless {
            // Exponential over consecutive fruitless polls (each refreshes the metadata) and
            // jittered so consumers that failed together do not retry in lockstep; never
            // longer than `max_wait`.
            let pause = max_wait.min(self.backoff(self.failed_polls));
            self.failed_polls = self.failed_polls.saturating_add(1);
            tokio::time::sleep(pause).await;
        } else {
            self.failed_polls = 0;
        }
    }

    /// Takes one fetch reply: records into `out`, the position moves into `advances` (applied
    /// by the poll once it returns), errors handled. Returns true when some partition needs a
    /// retry.
    async fn take_fetch(
        &mut self,
        reply: FetchReply,
        parts: &[Target],
        out: &mut Vec<ConsumerRecord>,
        advances: &mut Vec<Advance>,
    ) -> Result<bool, ConsumeError> {
        // A whole-request error (e.g. TOPIC_AUTHORIZATION_FAILED, #23) answers every
        // partition of the request: fatal ones end the poll, naming the first partition;
        // retriable ones retry them all. Without this check they would read as partitions
        // missing from the reply and be retried forever.
        match ErrorCode::from_proto(reply.error.as_ref()) {
            Ok(ErrorCode::None) => {}
            Ok(code) => match react(Failure::Kafka(code)) {
                Reaction::Fatal => {
                    let (tp, _, _) = parts.first().expect("a fetch names some partition");
                    return Err(ConsumeError::Kafka {
                        topic: tp.0.clone(),
                        partition: tp.1,
                        code,
                    });
                }
                Reaction::RefreshAndRetry => {
                    for (tp, _, _) in parts {
                        self.brokers.invalidate(&tp.0);
                    }
                    return Ok(true);
                }
                Reaction::Retry => return Ok(true),
            },
            Err(e) => return Err(ConsumeError::Protocol(e.to_string())),
        }
        let mut retry = false;
        for (tp, position, epoch) in parts {
            let Some(p) = reply
                .responses
                .iter()
                .filter(|t| t.topic == tp.0)
                .flat_map(|t| &t.partitions)
                .find(|p| p.partition_index == tp.1)
            else {
                retry = true;
                continue;
            };
            match ErrorCode::from_proto(p.error.as_ref()) {
                Ok(ErrorCode::None) => {}
                Ok(ErrorCode::OffsetOutOfRange) => match self.reset_position(tp).await? {
                    Reset::Done => continue,
                    Reset::Pending => {
                        retry = true;
                        continue;
                    }
                    Reset::NoPolicy => {
                        return Err(ConsumeError::OffsetOutOfRange {
                            topic: tp.0.clone(),
                            partition: tp.1,
                            offset: *position,
                        });
                    }
                },
                Ok(code) if react(Failure::Kafka(code)) != Reaction::Fatal => {
                    if react(Failure::Kafka(code)) == Reaction::RefreshAndRetry {
                        self.brokers.invalidate(&tp.0);
                    }
                    retry = true;
                    continue;
                }
                Ok(code) => {
                    return Err(ConsumeError::Kafka {
                        topic: tp.0.clone(),
                        partition: tp.1,
                        code,
                    });
                }
                Err(e) => return Err(ConsumeError::Protocol(e.to_string())),
            }
            let Decoded {
                records,
                next,
                last_epoch,
            } = decode(tp, &p.records, *position)?;
            out.extend(records);
            if let Some(e) = last_epoch {
                // The epoch of a fetched batch counts as seen. Kafka keeps it in the position
                // (`FetchCollector`, `SubscriptionState.FetchPosition`) and raises the known
                // epoch from seeks and committed offsets (`Metadata.updateLastSeenEpochIfNewer`);
                // a batch's epoch never exceeds the leader's, so counting it is safe.
                self.brokers.observe_epoch(&tp.0, tp.1, e);
            }
            advances.push((tp.clone(), *position, *epoch, next, last_epoch));
        }
        Ok(retry)
    }
}

/// Tonic client type.
type Clients = crate::grpc::BrokerClient;

/// A partition in a fetch: its position and the leader epoch it is fetched under.
type Target = (TopicPartition, i64, i32);

/// A position move a fetch earned: (partition, position fetched from, leader epoch fetched
/// under, next position if records were read, leader epoch of the last record read).
type Advance = (TopicPartition, i64, i32, Option<i64>, Option<i32>);

/// What [`Consumer::reset_position`] did.
enum Reset {
    /// The position is set.
    Done,
    /// The leader could not answer now (retriable): a later poll tries again.
    Pending,
    /// No reset policy: the caller must seek.
    NoPolicy,
}

/// A failed lookup step.
enum Lookup {
    Retry(String),
    Fatal(ConsumeError),
}

/// What [`decode`] found in a fetch reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decoded {
    /// Records at offsets >= the position, in offset order.
    pub records: Vec<ConsumerRecord>,
    /// The next position: after the last batch that reaches the position; `None` if none
    /// did.
    pub next: Option<i64>,
    /// Leader epoch of that batch.
    pub last_epoch: Option<i32>,
}

/// Decodes the batches of a fetch for `tp` from `position` (see [`Decoded`]). CRCs are
/// checked (Kafka `check.crcs`); compressed batches (gzip, snappy, lz4, zstd) are
/// decompressed, their records checked as the broker checks them.
pub fn decode(tp: &TopicPartition, data: &Bytes, position: i64) -> Result<Decoded, ConsumeError> {
    let corrupt = |reason: String| ConsumeError::Corrupt {
        topic: tp.0.clone(),
        partition: tp.1,
        reason,
    };
    let mut out = Vec::new();
    let mut next = None;
    let mut epoch = None;
    for batch in BatchIter::new(data.clone()) {
        let batch = batch.map_err(|e| corrupt(e.to_string()))?;
        let h = *batch.header();
        if h.next_offset() <= position {
            // Still checked: a corrupt batch is reported even when it is skipped.
            batch
                .validate_replicated()
                .map_err(|e| corrupt(e.to_string()))?;
            continue;
        }
        // CRC and records checked, a compressed batch decompressed once (bounded by
        // keel_record::MAX_DECOMPRESSED_BYTES). The records of a compacted topic's batch may
        // have offset gaps and a batch may have none (the log cleaner keeps a producer's last
        // batch empty): the next position is the batch's end either way, as Kafka consumers
        // do.
        let records = batch
            .validated_replicated_records()
            .map_err(|e| corrupt(e.to_string()))?;
        for r in records {
            let r = r.map_err(|e| corrupt(e.to_string()))?;
            let offset = h.base_offset + r.offset_delta as i64;
            if offset < position {
                continue;
            }
            out.push(ConsumerRecord {
                topic: tp.0.clone(),
                partition: tp.1,
                offset,
                timestamp_ms: h.record_timestamp(r.timestamp_delta),
                log_append_time: h.is_log_append_time(),
                leader_epoch: h.partition_leader_epoch,
                key: r.key,
                value: r.value,
            });
        }
        next = Some(h.next_offset());
        epoch = Some(h.partition_leader_epoch);
    }
    Ok(Decoded {
        records: out,
        next,
        last_epoch: epoch,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_record::RecordBatchBuilder;

    fn batch(base: i64, epoch: i32, values: &[&str]) -> Bytes {
        let mut b = RecordBatchBuilder::new(base).partition_leader_epoch(epoch);
        for (i, v) in values.iter().enumerate() {
            b.append(1000 + i as i64, Some(b"k"), Some(v.as_bytes()), &[]);
        }
        b.build().into_bytes()
    }

    #[test]
    fn decode_skips_records_below_the_position_and_advances() {
        let tp = ("t".to_string(), 0);
        let mut data = batch(10, 3, &["a", "b", "c"]).to_vec();
        data.extend_from_slice(&batch(13, 4, &["d"]));
        let d = decode(&tp, &Bytes::from(data), 11).unwrap();
        let got: Vec<(i64, &[u8], i64, i32)> = d
            .records
            .iter()
            .map(|r| {
                (
                    r.offset,
                    r.value.as_deref().unwrap(),
                    r.timestamp_ms,
                    r.leader_epoch,
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (11, &b"b"[..], 1001, 3),
                (12, &b"c"[..], 1002, 3),
                (13, &b"d"[..], 1000, 4)
            ]
        );
        assert_eq!(d.next, Some(14));
        assert_eq!(d.last_epoch, Some(4));
        // Nothing at or after the position: no move.
        let d = decode(&tp, &batch(10, 3, &["a"]), 11).unwrap();
        assert!(d.records.is_empty());
        assert_eq!(d.next, None);
    }

    #[test]
    fn decode_reads_compressed_batches_from_the_position() {
        let tp = ("t".to_string(), 0);
        for codec in keel_record::CompressionType::ALL {
            let mut b = RecordBatchBuilder::new(20).compression(codec);
            for v in ["a", "b", "c"] {
                b.append(1000, None, Some(v.as_bytes()), &[]);
            }
            let d = decode(&tp, b.build().as_bytes(), 21).unwrap();
            let got: Vec<(i64, &[u8])> = d
                .records
                .iter()
                .map(|r| (r.offset, r.value.as_deref().unwrap()))
                .collect();
            assert_eq!(got, vec![(21, &b"b"[..]), (22, &b"c"[..])], "{codec}");
            assert_eq!(d.next, Some(23));
        }
    }

    /// A compacted topic's batches (rewritten by the log cleaner): records with offset gaps,
    /// and an emptied batch kept for its producer; the position moves past both.
    #[test]
    fn decode_reads_compacted_batches() {
        let tp = ("t".to_string(), 0);
        let full =
            keel_record::RecordBatch::from_bytes(batch(10, 3, &["a", "b", "c", "d"])).unwrap();
        let records: Vec<_> = full.records().map(|r| r.unwrap()).collect();
        let gapped = full.rebuilt_with(&[records[1].clone(), records[3].clone()], None);
        let emptied = keel_record::RecordBatch::from_bytes(batch(14, 3, &["e", "f"]))
            .unwrap()
            .rebuilt_with(&[], None);
        let mut data = gapped.as_bytes().to_vec();
        data.extend_from_slice(emptied.as_bytes());
        let d = decode(&tp, &Bytes::from(data.clone()), 10).unwrap();
        let got: Vec<(i64, &[u8])> = d
            .records
            .iter()
            .map(|r| (r.offset, r.value.as_deref().unwrap()))
            .collect();
        assert_eq!(got, vec![(11, &b"b"[..]), (13, &b"d"[..])]);
        assert_eq!(d.next, Some(16));
        // From inside the gap of the first batch.
        let d = decode(&tp, &Bytes::from(data), 12).unwrap();
        assert_eq!(d.records.len(), 1);
        assert_eq!(d.next, Some(16));
    }

    #[test]
    fn decode_rejects_a_corrupt_batch() {
        let tp = ("t".to_string(), 0);
        let mut data = batch(0, 0, &["hello"]).to_vec();
        let last = data.len() - 2;
        data[last] ^= 0xff;
        let err = decode(&tp, &Bytes::from(data), 0).unwrap_err();
        assert!(matches!(err, ConsumeError::Corrupt { .. }), "{err}");
    }

    #[test]
    fn truncation_is_an_epoch_ending_below_the_position() {
        // The leader's epoch 3 ends at 120 and we read up to 100: fine.
        assert!(!truncation_detected(100, 3, 120));
        assert!(!truncation_detected(100, 3, 100));
        // It ends at 90: offsets 90..100 we returned are gone.
        assert!(truncation_detected(100, 3, 90));
        // The leader does not know the epoch at all.
        assert!(truncation_detected(100, -1, -1));
    }
}
