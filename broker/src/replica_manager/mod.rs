//! The replica manager (DESIGN §5; Kafka `ReplicaManager`, `ReplicaFetcherManager`,
//! `AlterPartitionManager`): the thin async layer that owns the partition logs of this broker
//! and drives the pure replication rules of [`crate::replica`] with them.
//!
//! Data flows one way: metadata log -> image -> local changes ([`ReplicaManager::apply`]) ->
//! partitions (leader / follower / deleted) -> fetchers and request handlers.
//!
//! What it owns:
//! - one [`HostedPartition`] per partition this broker hosts: a mutex over the pair
//!   ([`PartitionState`], [`Log`]) plus the acks=all waiters' reply channels. The pair changes
//!   together under the lock, so the state's LEO always equals the log's;
//! - the data directory ([`LogManager`]: checkpoints, clean-shutdown marker) — only the first
//!   of `log_dirs` holds partitions today;
//! - the follower fetchers, one task per source broker ([`fetcher`]);
//! - the AlterPartition sender, one task batching the leaders' ISR changes ([`alter_isr`]);
//! - the producer-id block for InitProducerId ([`producer_ids`]);
//! - a ticker: ISR shrink checks every half `replica.lag.time.max.ms`, waiter expiry and
//!   AlterPartition retries at [`PartitionState::next_timer_ms`], checkpoints every 5 s,
//!   retention every 30 s.
//!
//! Invariants: a partition is in `partitions` iff its log is open; no lock is held across an
//! `.await`; every queue is bounded (waiters by `ReplicaConfig::max_waiters`, the
//! AlterPartition channel by [`ALTER_QUEUE`], fetch replies by `max_bytes`).
//!
//! Time: every rule gets `now_ms` from [`MonotonicClock`] (ms since the manager started).

pub mod alter_isr;
pub mod cleaning;
pub mod delete_records;
pub mod fetch;
pub mod fetch_session;
pub mod fetcher;
pub mod metrics;
pub mod partition_map;
pub mod produce;
pub mod producer_ids;
pub mod throttle;
pub mod topic_config;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use keel_metadata_log::{MetadataImage, PartitionRegistration};
use keel_proto::ErrorCode;
use tokio::sync::{Notify, mpsc, oneshot, watch};
use uuid::Uuid;

use crate::lifecycle::{ControllerChannels, LifecycleStatus};
use crate::log::epoch_journal::{self, EpochJournal, JournalEntry};
use crate::log::{
    CleanerConfig, DeletedSegments, Log, LogConfig, LogError, LogManager, SystemClock,
    TopicPartition,
};
use crate::metadata::{LocalChangesEvent, TopicIdPartition};
use crate::replica::{
    AlterPartitionRequest, Effects, LocalLog, PartitionState, ReplicaConfig, Role, TransitionError,
};
use partition_map::PartitionMap;

/// One partition transition's log line, at INFO when `$at_info` else at DEBUG (tracing's
/// macros take the level as a constant).
macro_rules! transition_line {
    ($at_info:expr, $($arg:tt)+) => {
        if $at_info {
            tracing::info!($($arg)+)
        } else {
            tracing::debug!($($arg)+)
        }
    };
}

/// Bound of the queue of AlterPartition requests waiting for the sender task (one per
/// partition at most is outstanding, so this only absorbs bursts).
pub const ALTER_QUEUE: usize = 4096;

/// How often checkpoints (HW, recovery points) are written, ms.
pub const CHECKPOINT_INTERVAL_MS: u64 = 5_000;

/// How often retention runs, ms (Kafka `log.retention.check.interval.ms` is 5 min).
pub const RETENTION_INTERVAL_MS: u64 = 30_000;

/// Ticker period with few partitions, ms: the resolution of acks=all timeouts and
/// AlterPartition retries. Each tick visits every hosted partition, so the period grows with
/// their number ([`tick_period_ms`]).
pub const TICK_MS: u64 = 10;

/// Longest ticker period, ms (reached at 100,000 partitions).
pub const MAX_TICK_MS: u64 = 100;

/// Hosted partitions per millisecond of ticker period beyond [`TICK_MS`].
const PARTITIONS_PER_TICK_MS: usize = 1_000;

/// The pause between two ticks for `partitions` hosted partitions, ms: [`TICK_MS`] up to
/// 10,000 partitions, then one ms per 1,000 partitions up to [`MAX_TICK_MS`]. A tick visits
/// every partition (timers, ISR shrink checks, flushes, gauges): at 100,000 partitions a
/// 10 ms period kept a quarter of a core busy per broker doing nothing (measured by
/// `perf` during the partitions bench), so large brokers trade timeout resolution (acks=all
/// timeouts answered up to 100 ms late, far below `request.timeout.ms`) for it.
pub fn tick_period_ms(partitions: usize) -> u64 {
    ((partitions / PARTITIONS_PER_TICK_MS) as u64).clamp(TICK_MS, MAX_TICK_MS)
}

/// The name-keyed form of `tip` (fetchers and the partition map are keyed by name).
fn topic_partition(tip: &TopicIdPartition) -> TopicPartition {
    TopicPartition::new(tip.topic.clone(), tip.partition)
}

/// Milliseconds since the replica manager started (monotonic).
#[derive(Debug, Clone, Copy)]
pub struct MonotonicClock(Instant);

impl MonotonicClock {
    /// A clock starting now.
    pub fn new() -> Self {
        Self(Instant::now())
    }

    /// Milliseconds since start.
    pub fn now_ms(&self) -> u64 {
        self.0.elapsed().as_millis() as u64
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        Self::new()
    }
}

/// Broker-wide replication settings (the cluster defaults; topics override
/// `min.insync.replicas`).
#[derive(Debug, Clone)]
pub struct ReplicaManagerConfig {
    /// How channels to other brokers are opened (follower fetches, lag sampling): TLS when
    /// the broker has it.
    pub dialer: keel_runtime::tls::Dialer,
    /// This broker.
    pub broker_id: i32,
    /// Data directory holding the partitions.
    pub data_dir: std::path::PathBuf,
    /// `replica.lag.time.max.ms`.
    pub replica_lag_time_max_ms: u64,
    /// Optional offset-lag bound (`replica.lag.max.messages`; off by default).
    pub replica_lag_max_messages: Option<u64>,
    /// Cluster default `min.insync.replicas`.
    pub min_insync_replicas: u32,
    /// Default log settings (`log.segment.bytes`, `log.flush.interval.messages`, ...).
    pub log_defaults: LogConfig,
    /// Follower fetch long-poll wait, ms (Kafka `replica.fetch.wait.max.ms`, 500).
    pub replica_fetch_wait_max_ms: u64,
    /// Backoff after a failed follower fetch, ms (Kafka `replica.fetch.backoff.ms`, 1000;
    /// Keel uses less on loopback).
    pub replica_fetch_backoff_ms: u64,
    /// Log cleaner settings (`log.cleaner.dedupe.buffer.size`).
    pub cleaner: CleanerConfig,
    /// How often the ticker looks for a log to clean, ms (`log.cleaner.backoff.ms`,
    /// [`cleaning::CLEANER_BACKOFF_MS`] by default).
    pub cleaner_backoff_ms: u64,
    /// Threads opening the partition logs at start (`num.recovery.threads.per.data.dir`).
    pub recovery_threads: usize,
    /// Incremental fetch sessions kept for followers (`max.incremental.fetch.session.cache.slots`,
    /// [`fetch_session::MAX_SESSIONS`] by default; 0 = none).
    pub fetch_session_slots: usize,
}

/// One hosted partition: the replication state and the log under one lock.
#[derive(Debug)]
pub struct HostedPartition {
    /// Partition (name form, also its directory name).
    pub tp: TopicPartition,
    /// Topic id from metadata (a re-created topic has a new id); nil for a log found on disk
    /// until metadata names it.
    topic_id: Mutex<Uuid>,
    inner: Mutex<PartitionInner>,
}

/// What the lock of a [`HostedPartition`] protects.
#[derive(Debug)]
pub struct PartitionInner {
    /// Replication rules' state. Invariant: its LEO and log start equal the log's.
    pub state: PartitionState,
    /// The partition log.
    pub log: Log,
    /// Reply channels of acks=all waiters, by waiter token (bounded like the waiters).
    waiters: HashMap<u64, oneshot::Sender<ErrorCode>>,
    /// Next time `maybe_shrink_isr` is due (leader only).
    next_shrink_check_ms: u64,
    /// Follower: the leader's HW in its last fetch answer (-1 = none yet), for the fetcher
    /// lag gauge.
    last_leader_hw: i64,
    /// A leader epoch whose start offset was staged in the epoch cache (in memory, journaled
    /// unless the append failed) for a leadership about to be taken
    /// (`ReplicaManager::stage_leader_epochs`).
    /// While set, the fetcher drops this partition's answers, so the log end offset the entry
    /// records stays the log's until the leadership is taken, which clears it (as does a
    /// follower transition).
    staged_epoch: Option<i32>,
}

impl HostedPartition {
    /// Topic id (nil while unknown).
    pub fn topic_id(&self) -> Uuid {
        *self.topic_id.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Locks the partition. A poisoned lock (a panic while holding it) is a bug; the data
    /// is still consistent with the log, so the guard is recovered.
    pub fn lock(&self) -> std::sync::MutexGuard<'_, PartitionInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Shared state of the replica manager.
#[derive(Debug)]
pub struct Shared {
    config: ReplicaManagerConfig,
    clock: MonotonicClock,
    partitions: RwLock<PartitionMap<Arc<HostedPartition>>>,
    logs: Mutex<Option<LogManager>>,
    image: RwLock<MetadataImage>,
    status: watch::Receiver<LifecycleStatus>,
    /// Woken on every append, truncation and HW change (fetch long polls).
    data_changed: Notify,
    alter_tx: mpsc::Sender<(Arc<HostedPartition>, AlterPartitionRequest)>,
    fetchers: Mutex<fetcher::FetcherManager>,
    /// Followers' incremental fetch sessions (KIP-227; bounded, see [`fetch_session`]).
    fetch_sessions: Mutex<fetch_session::SessionCache>,
    next_token: AtomicU64,
    producer_ids: producer_ids::ProducerIdManager,
    /// Permits for validating a compressed produced batch ([`produce::MAX_CONCURRENT_DECOMPRESSIONS`]).
    decompressions: tokio::sync::Semaphore,
    /// [`MonotonicClock`] reading when the last log cleaner pass completed (0 = none yet).
    cleaner_last_run_ms: AtomicU64,
    /// The data directory's leader epoch journal ([`epoch_journal`]): appended to by
    /// [`ReplicaManager::stage_leader_epochs`] and compacted by the apply loop only. `None`
    /// after a failed compaction: new leaderships then sync their checkpoints one by one.
    epoch_journal: Mutex<Option<EpochJournal>>,
    /// Set by an apply that changed partition roles or hosted partitions: the next tick
    /// samples the gauges whatever [`metrics::GAUGE_INTERVAL_MS`] says, so the leader and
    /// partition counts show a failover one tick after it is applied (up to
    /// [`MAX_TICK_MS`]), not up to a gauge interval later. Kafka computes `LeaderCount` and
    /// `PartitionCount` when they are read (`ReplicaManager` gauges).
    roles_changed: AtomicBool,
    /// The replication throttles' measured quotas (KIP-73).
    throttles: throttle::Throttles,
    /// Set once the log directory failed (a partition's files could not be created or
    /// opened): the broker stops (Kafka: `LogDirFailureChannel`; a broker whose last log
    /// directory is offline shuts down). Never unset.
    dir_failed: watch::Sender<Option<String>>,
    /// What the tick loop's deletion service still has to delete: directories of deleted
    /// logs, renamed under the logs lock ([`LogManager::delete_detached_log`]). The tick
    /// loop moves them to its own list each pass; retention's `.deleted` files join there.
    doomed: Mutex<DeletedSegments>,
}

/// The replica manager handle (cheap to clone).
#[derive(Debug, Clone)]
pub struct ReplicaManager {
    shared: Arc<Shared>,
}

/// Background tasks of a running replica manager.
#[derive(Debug)]
pub struct ReplicaManagerTasks {
    apply: tokio::task::JoinHandle<()>,
    ticker: tokio::task::JoinHandle<()>,
    alter: tokio::task::JoinHandle<()>,
    stop: watch::Sender<bool>,
}

impl ReplicaManager {
    /// Opens the data directory (recovering every log found there), and starts the tasks:
    /// applying `events` from the metadata tailer, the ticker and the AlterPartition sender.
    ///
    /// `dir_failed` is set (once, with the reason) when the log directory fails later: a
    /// partition's files cannot be created or opened; the caller stops the broker.
    ///
    /// Errors: the directory or a log cannot be opened or recovered (`KAFKA_STORAGE_ERROR`
    /// class: the broker must not start).
    pub fn start(
        config: ReplicaManagerConfig,
        channels: ControllerChannels,
        status: watch::Receiver<LifecycleStatus>,
        events: mpsc::Receiver<LocalChangesEvent>,
        dir_failed: watch::Sender<Option<String>>,
    ) -> Result<(ReplicaManager, ReplicaManagerTasks), LogError> {
        let opening = std::time::Instant::now();
        let mut manager = LogManager::open_parallel(
            &config.data_dir,
            config.log_defaults.clone(),
            &BTreeMap::new(),
            Arc::new(SystemClock),
            config.recovery_threads,
        )?;
        tracing::info!(
            partitions = manager.len(),
            threads = config.recovery_threads,
            "partition logs opened in {} ms",
            opening.elapsed().as_millis()
        );
        let found = manager.take_logs();
        let pending_deletions = manager.take_pending_deletions();
        let hws = manager.read_high_watermarks().unwrap_or_else(|e| {
            tracing::warn!("ignoring the high-watermark checkpoint: {e}");
            BTreeMap::new()
        });
        let (alter_tx, alter_rx) = mpsc::channel(ALTER_QUEUE);
        let request_timeout = Duration::from_secs(2);
        let fetch_sessions = fetch_session::SessionCache::new(config.fetch_session_slots);
        let shared = Arc::new(Shared {
            clock: MonotonicClock::new(),
            partitions: RwLock::new(PartitionMap::default()),
            logs: Mutex::new(Some(manager)),
            image: RwLock::new(MetadataImage::empty()),
            status: status.clone(),
            data_changed: Notify::new(),
            alter_tx,
            fetchers: Mutex::new(fetcher::FetcherManager::default()),
            fetch_sessions: Mutex::new(fetch_sessions),
            next_token: AtomicU64::new(1),
            decompressions: tokio::sync::Semaphore::new(produce::MAX_CONCURRENT_DECOMPRESSIONS),
            cleaner_last_run_ms: AtomicU64::new(0),
            roles_changed: AtomicBool::new(false),
            epoch_journal: Mutex::new(None),
            throttles: throttle::Throttles::default(),
            dir_failed,
            doomed: Mutex::new(pending_deletions),
            producer_ids: producer_ids::ProducerIdManager::new(
                config.broker_id,
                channels.clone(),
                request_timeout,
            ),
            config,
        });
        let rm = ReplicaManager { shared };
        // Logs found on disk wait for metadata: those not assigned to this broker any more
        // are deleted when the first image says so; until then they are kept with no role.
        {
            let mut parts = rm
                .shared
                .partitions
                .write()
                .unwrap_or_else(|e| e.into_inner());
            for (tp, log) in found {
                let hw = hws.get(&tp).copied().unwrap_or(0);
                let id = read_partition_metadata(log.dir()).unwrap_or(Uuid::nil());
                let hp = rm.hosted(tp.clone(), id, log, hw);
                parts.insert(tp, hp);
            }
        }
        let journal = rm.replay_epoch_journal()?;
        *rm.epoch_journal() = Some(journal);
        let (stop, stop_rx) = watch::channel(false);
        let apply = tokio::spawn(rm.clone().apply_loop(events, stop_rx.clone()));
        let ticker = tokio::spawn(rm.clone().tick_loop(stop_rx.clone()));
        let alter = tokio::spawn(alter_isr::run(
            rm.clone(),
            channels,
            request_timeout,
            alter_rx,
            stop_rx,
        ));
        Ok((
            rm,
            ReplicaManagerTasks {
                apply,
                ticker,
                alter,
                stop,
            },
        ))
    }

    /// This broker's id.
    pub fn broker_id(&self) -> i32 {
        self.shared.config.broker_id
    }

    /// The latest image the manager applied.
    pub fn image(&self) -> MetadataImage {
        self.shared
            .image
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The hosted partition `topic`-`partition`, if any.
    pub fn partition(&self, topic: &str, partition: i32) -> Option<Arc<HostedPartition>> {
        self.shared
            .partitions
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(topic, partition)
            .cloned()
    }

    /// Every hosted partition.
    pub fn partitions(&self) -> Vec<Arc<HostedPartition>> {
        self.shared
            .partitions
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// InitProducerId (see [`producer_ids`]): a fresh producer id from this broker's block,
    /// or for a re-initialising producer (KIP-360) its id with the epoch bumped, decided by
    /// [`producer_ids::decide`] from the largest epoch of that id in the hosted partitions'
    /// producer state. `req` passed [`crate::bounds::init_producer_id`].
    pub async fn init_producer_id(
        &self,
        req: &keel_proto::broker::InitProducerIdRequest,
        broker_epoch: i64,
    ) -> keel_proto::broker::InitProducerIdReply {
        let known_epoch = if req.producer_id >= 0 {
            self.partitions()
                .iter()
                .filter_map(|hp| {
                    hp.lock()
                        .log
                        .producer_entry(req.producer_id)
                        .map(|e| e.producer_epoch)
                })
                .max()
        } else {
            None
        };
        let next_unallocated = self.image().next_producer_id();
        match producer_ids::decide(req, known_epoch, next_unallocated) {
            producer_ids::InitDecision::NewId => {
                self.shared
                    .producer_ids
                    .init_producer_id(broker_epoch)
                    .await
            }
            producer_ids::InitDecision::Bump {
                producer_id,
                producer_epoch,
            } => keel_proto::broker::InitProducerIdReply {
                error: None,
                producer_id,
                producer_epoch: i32::from(producer_epoch),
            },
            producer_ids::InitDecision::Refuse(code, message) => {
                keel_proto::broker::InitProducerIdReply {
                    error: Some(code.to_proto(message)),
                    producer_id: -1,
                    producer_epoch: -1,
                }
            }
        }
    }

    /// Milliseconds on the manager's monotonic clock.
    pub fn now_ms(&self) -> u64 {
        self.shared.clock.now_ms()
    }

    /// The current broker epoch (-1 before registration).
    pub fn broker_epoch(&self) -> i64 {
        self.shared.status.borrow().broker_epoch
    }

    /// A future that resolves at the next data change (append, truncation, HW change).
    /// Create it before checking the condition it waits for.
    pub fn data_changed(&self) -> tokio::sync::futures::Notified<'_> {
        self.shared.data_changed.notified()
    }

    fn next_token(&self) -> u64 {
        self.shared.next_token.fetch_add(1, Ordering::Relaxed)
    }

    /// Replication settings of `topic` from `image`.
    fn replica_config(&self, image: &MetadataImage, topic: &str) -> ReplicaConfig {
        let c = &self.shared.config;
        ReplicaConfig {
            replica_lag_time_max_ms: c.replica_lag_time_max_ms,
            min_insync_replicas: crate::metadata::describe::min_insync_replicas(
                image,
                topic,
                c.broker_id,
                c.min_insync_replicas,
            )
            .max(1) as usize,
            replica_lag_max_messages: c.replica_lag_max_messages,
            ..ReplicaConfig::default()
        }
    }

    /// How channels to other brokers are opened.
    pub fn dialer(&self) -> &keel_runtime::tls::Dialer {
        &self.shared.config.dialer
    }

    /// Log settings of `topic` ([`topic_config::log_config`] over the dynamic configs: the
    /// topic's, else this broker's, else the cluster-wide ones, KIP-226). Re-applied to every
    /// hosted partition on each image, so a change takes effect without a restart.
    fn log_config(&self, image: &MetadataImage, topic: &str) -> LogConfig {
        let broker_id = self.shared.config.broker_id;
        topic_config::log_config(&self.shared.config.log_defaults, topic, |key| {
            keel_metadata_log::configs::dynamic_topic_value(image, topic, broker_id, key)
        })
    }

    fn hosted(
        &self,
        tp: TopicPartition,
        topic_id: Uuid,
        log: Log,
        hw: i64,
    ) -> Arc<HostedPartition> {
        let state = PartitionState::new(
            tp.clone(),
            self.shared.config.broker_id,
            self.broker_epoch(),
            ReplicaConfig {
                replica_lag_time_max_ms: self.shared.config.replica_lag_time_max_ms,
                min_insync_replicas: self.shared.config.min_insync_replicas.max(1) as usize,
                replica_lag_max_messages: self.shared.config.replica_lag_max_messages,
                ..ReplicaConfig::default()
            },
            LocalLog {
                log_start_offset: log.log_start_offset(),
                log_end_offset: log.log_end_offset(),
                high_watermark: hw,
            },
        );
        Arc::new(HostedPartition {
            tp,
            topic_id: Mutex::new(topic_id),
            inner: Mutex::new(PartitionInner {
                state,
                log,
                waiters: HashMap::new(),
                next_shrink_check_ms: 0,
                last_leader_hw: -1,
                staged_epoch: None,
            }),
        })
    }

    /// Carries out `effects` of a rule call on `hp` (whose lock the caller holds as `inner`):
    /// answers finished acks=all waiters, queues an AlterPartition, logs ISR events, wakes
    /// fetch long polls on a HW change.
    fn execute(&self, hp: &Arc<HostedPartition>, inner: &mut PartitionInner, effects: Effects) {
        if effects.is_empty() {
            return;
        }
        for c in effects.completed {
            if let Some(tx) = inner.waiters.remove(&c.token) {
                let _ = tx.send(c.error);
            }
        }
        for e in &effects.isr_events {
            metrics::record_isr_event(e);
            tracing::info!(
                partition = %hp.tp,
                kind = ?e.kind,
                from = ?e.from,
                to = ?e.to,
                "{e}"
            );
        }
        if let Some(req) = effects.alter_partition
            && let Err(e) = self.shared.alter_tx.try_send((hp.clone(), req))
        {
            // The queue is full or closed: the state keeps the change pending and the tick
            // resends it after the backoff.
            let (hp2, req) = match e {
                mpsc::error::TrySendError::Full(x) | mpsc::error::TrySendError::Closed(x) => x,
            };
            let eff = inner.state.handle_alter_partition_response(
                req.request_id,
                crate::replica::AlterPartitionResponse::Transport,
                self.now_ms(),
            );
            debug_assert!(Arc::ptr_eq(&hp2, hp));
            self.execute(hp, inner, eff);
        }
        if effects.high_watermark.is_some() {
            self.shared.data_changed.notify_waiters();
        }
    }

    /// Registers the reply channel of an acks=all waiter.
    fn add_waiter(inner: &mut PartitionInner, token: u64) -> oneshot::Receiver<ErrorCode> {
        let (tx, rx) = oneshot::channel();
        inner.waiters.insert(token, tx);
        rx
    }

    /// Applies published images. Until the broker has caught up with the metadata log once
    /// (registered and unfenced: the controller unfences a broker whose applied offset
    /// reached its registration), images are only kept, not acted on: a local snapshot or a
    /// partial catch-up may still name this broker leader in an epoch the controller has
    /// ended (a restart within the session timeout), and leading from it would accept writes
    /// that diverge at the same epoch (Kafka's broker likewise starts its replicas only after
    /// the initial catch-up). Changes are computed here from the last image acted on, so the
    /// first one covers everything that happened meanwhile.
    async fn apply_loop(
        self,
        mut events: mpsc::Receiver<LocalChangesEvent>,
        mut stop: watch::Receiver<bool>,
    ) {
        let mut status = self.shared.status.clone();
        let mut acted_on = MetadataImage::empty();
        let mut pending: Option<MetadataImage> = None;
        let mut caught_up = false;
        loop {
            tokio::select! {
                _ = stop.wait_for(|s| *s) => return,
                ev = events.recv() => {
                    let Some(ev) = ev else { return };
                    *self.shared.image.write().unwrap_or_else(|e| e.into_inner()) =
                        ev.image.clone();
                    if caught_up {
                        blocking(|| self.act_on(&mut acted_on, ev.image));
                    } else {
                        pending = Some(ev.image);
                    }
                    if let Some(tx) = ev.applied {
                        let _ = tx.send(());
                    }
                }
                changed = status.changed(), if !caught_up => {
                    if changed.is_err() {
                        return;
                    }
                    let s = status.borrow_and_update().clone();
                    if s.broker_epoch >= 0 && !s.fenced {
                        caught_up = true;
                        tracing::info!(
                            broker_epoch = s.broker_epoch,
                            "caught up with the metadata log: starting replicas"
                        );
                        if let Some(image) = pending.take() {
                            blocking(|| self.act_on(&mut acted_on, image));
                        }
                    }
                }
            }
        }
    }

    fn act_on(&self, acted_on: &mut MetadataImage, image: MetadataImage) {
        let diffing = std::time::Instant::now();
        let changes = crate::metadata::local_changes(acted_on, &image, self.broker_id());
        let diffed = diffing.elapsed();
        // The sweep over every hosted partition is needed when settings may have changed
        // (the configs part of the image is shared between images until a config record
        // changes it) and on the first image acted on (strays); not for a delta of
        // partition changes only (a broker failure at 100,000 partitions is tens of such
        // deltas, each costing a visit of every partition).
        let sweep =
            !std::ptr::eq(acted_on.configs(), image.configs()) || acted_on.provenance().offset == 0;
        self.apply_changes(&image, &changes, sweep, diffed);
        *acted_on = image;
    }

    /// Applies one image and its local changes, in the order deleted, became leader, became
    /// follower (DESIGN §5), then refreshes every partition's settings from the image's
    /// configs.
    pub fn apply(&self, image: &MetadataImage, changes: &crate::metadata::LocalChanges) {
        self.apply_changes(image, changes, true, std::time::Duration::ZERO);
    }

    /// [`Self::apply`]; the settings refresh and stray check over every hosted partition
    /// only when `sweep`. `diffed`: how long finding `changes` took (logged with the phases).
    fn apply_changes(
        &self,
        image: &MetadataImage,
        changes: &crate::metadata::LocalChanges,
        sweep: bool,
        diffed: std::time::Duration,
    ) {
        let image = image.clone();
        let now = self.now_ms();
        let started = std::time::Instant::now();
        self.delete_partitions(&changes.deleted);
        self.create_new_logs(&image, changes);
        let created = started.elapsed();
        // Each new leadership waits for its leader epoch checkpoint's fsyncs (KIP-101: the
        // epoch is durable before the leader accepts a write in it); partitions are
        // independent, so a broker taking over thousands of leaderships does them
        // LOG_FSYNC_THREADS at a time (one at a time, a broker failure at 100,000 partitions
        // left 16,700 partitions leaderless on their new leader for 44 s after the commit).
        // From PARALLEL_TRANSITIONS_FROM new leaderships on, their epoch checkpoints are
        // staged (written without fsync) and made durable by one file-system sync first.
        // No fetcher may append to a new leadership's log once its epoch is recorded: every
        // new leader leaves the fetchers first, in one pass over each fetcher.
        let leader_tps: Vec<TopicPartition> = changes
            .became_leader
            .iter()
            .map(|(tip, _)| topic_partition(tip))
            .collect();
        self.fetchers().remove_all(&leader_tps);
        let leaders: Vec<_> = changes.became_leader.iter().collect();
        let (threads, epochs_synced) = if leaders.len() >= PARALLEL_TRANSITIONS_FROM {
            (
                LOG_FSYNC_THREADS,
                self.stage_leader_epochs(&changes.became_leader),
            )
        } else {
            (1, false)
        };
        let staged = started.elapsed();
        let each_at_info =
            changes.became_leader.len() + changes.became_follower.len() <= TRANSITION_LINES_UP_TO;
        let _ = crate::log::manager::in_parallel(leaders, threads, |(tip, reg)| {
            self.make_leader(&image, tip, reg, now, epochs_synced, each_at_info);
            Ok::<(), std::convert::Infallible>(())
        });
        self.compact_epoch_journal_if_due();
        let led = started.elapsed();
        // Followers whose leader changed move between fetchers after the loop, each fetcher's
        // map locked once for all of them (see `FetcherManager::remove_all`).
        let mut refetch = Vec::new();
        for (tip, reg) in &changes.became_follower {
            if let Some(moved) = self.make_follower(&image, tip, reg, each_at_info) {
                refetch.push(moved);
            }
        }
        if !refetch.is_empty() {
            let tps: Vec<TopicPartition> = refetch.iter().map(|(hp, _)| hp.tp.clone()).collect();
            let mut fetchers = self.fetchers();
            fetchers.remove_all(&tps);
            fetchers.add_all(self, refetch.into_iter().filter(|(_, leader)| *leader >= 0));
        }
        if !changes.is_empty() {
            // Kafka logs each transition batch with its duration (`ReplicaManager`
            // "Finished ... in N ms"); the phases show where a large delta spends its time.
            tracing::info!(
                metadata_offset = image.provenance().offset,
                deleted = changes.deleted.len(),
                leaders = changes.became_leader.len(),
                followers = changes.became_follower.len(),
                "applied local changes in {} ms (found in {} ms; deletes and new logs {} ms, \
                 leader epochs staged {} ms, leaders {} ms, followers {} ms){}",
                started.elapsed().as_millis(),
                diffed.as_millis(),
                created.as_millis(),
                (staged - created).as_millis(),
                (led - staged).as_millis(),
                (started.elapsed() - led).as_millis(),
                if each_at_info {
                    ""
                } else {
                    "; each partition's transition logged at DEBUG"
                },
            );
        }
        if !changes.is_empty() {
            self.shared.roles_changed.store(true, Ordering::Relaxed);
        }
        if !sweep {
            // Long polls read every partition of their fetch again when woken: an image that
            // changed nothing here (the active controller's NoOp every 500 ms, other brokers'
            // registrations) wakes none (at 100,000 partitions each NoOp had every follower's
            // session of 33,000 partitions read again on both sides).
            if !changes.is_empty() {
                self.shared.data_changed.notify_waiters();
            }
            return;
        }
        // Logs found on disk for partitions this broker does not host any more: deleted after
        // the loop, which holds every partition (a delete waits for the last holder).
        let mut strays = Vec::new();
        // Settings per topic, not per partition: this loop visits every hosted partition on
        // every delta (100,000 partitions made each delta cost a config build per partition).
        let mut settings: HashMap<String, (ReplicaConfig, LogConfig)> = HashMap::new();
        for hp in self.partitions() {
            let assigned = image
                .topics()
                .get_by_name(&hp.tp.topic)
                .and_then(|t| t.partitions.get(&hp.tp.partition))
                .is_some_and(|r| r.replicas.contains(&self.broker_id()));
            if !assigned {
                // A stray log (found on disk, never assigned by this image). Images are acted
                // on only after the initial catch-up (see `apply_loop`), so the topic really
                // is gone or assigned elsewhere.
                if hp.lock().state.applied_epochs().is_none() {
                    strays.push(TopicIdPartition {
                        topic_id: hp.topic_id(),
                        topic: hp.tp.topic.clone(),
                        partition: hp.tp.partition,
                    });
                }
                continue;
            }
            if !settings.contains_key(&hp.tp.topic) {
                let both = (
                    self.replica_config(&image, &hp.tp.topic),
                    self.log_config(&image, &hp.tp.topic),
                );
                settings.insert(hp.tp.topic.clone(), both);
            }
            let (config, log_config) = &settings[&hp.tp.topic];
            let mut inner = hp.lock();
            if inner.log.config() != log_config
                && let Err(e) = inner.log.set_config(log_config.clone())
            {
                tracing::warn!(partition = %hp.tp, "keeping the previous log settings: {e}");
            }
            if inner.state.config() != config {
                tracing::info!(partition = %hp.tp, min_insync_replicas = config.min_insync_replicas, "replication settings changed");
                let eff = inner.state.set_config(*config, now);
                self.execute(&hp, &mut inner, eff);
            }
        }
        self.delete_partitions(&strays);
        self.shared.data_changed.notify_waiters();
    }

    fn get_or_create(
        &self,
        image: &MetadataImage,
        tip: &TopicIdPartition,
    ) -> Result<Arc<HostedPartition>, String> {
        // The common case (a hosted partition whose leadership or ISR changed) under the read
        // lock: a broker failure at 100,000 partitions is tens of thousands of these calls,
        // on several threads, while the fetch paths read the map.
        if let Some(hp) = self.partition(&tip.topic, tip.partition)
            && *hp.topic_id.lock().unwrap_or_else(|e| e.into_inner()) == tip.topic_id
        {
            return Ok(hp);
        }
        let tp = topic_partition(tip);
        let mut parts = self
            .shared
            .partitions
            .write()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(hp) = parts.get(&tp.topic, tp.partition) {
            let mut id = hp.topic_id.lock().unwrap_or_else(|e| e.into_inner());
            if id.is_nil() {
                // A log found on disk without a recorded topic id (written before
                // `partition.metadata` existed): adopt it under the id metadata names.
                *id = tip.topic_id;
                drop(id);
                let mut inner = hp.lock();
                if let Err(e) = write_partition_metadata(inner.log.dir(), tip.topic_id) {
                    tracing::warn!(partition = %tp, "cannot record the topic id: {e}");
                }
                let _ = inner
                    .state
                    .set_config(self.replica_config(image, &tp.topic), 0);
                if let Err(e) = inner.log.set_config(self.log_config(image, &tp.topic)) {
                    tracing::warn!(partition = %tp, "keeping the default log settings: {e}");
                }
                return Ok(hp.clone());
            }
            if *id == tip.topic_id {
                return Ok(hp.clone());
            }
        }
        if let Some(reason) = self.shared.dir_failed.borrow().as_ref() {
            return Err(reason.clone());
        }
        let logs = self.shared.logs.lock().unwrap_or_else(|e| e.into_inner());
        let Some(manager) = logs.as_ref() else {
            return Err("the replica manager is shut down".into());
        };
        if let Some(stale) = parts.remove(&tp.topic, tp.partition) {
            // Same name, other topic id: the topic was deleted and re-created (possibly while
            // this broker was down: the log on disk records the old id).
            tracing::info!(partition = %tp, old_topic_id = %stale.topic_id(), topic_id = %tip.topic_id, "deleting the log of a previous topic with the same name");
            // The partitions map stays locked meanwhile, so no new holder can appear.
            let Some(log) = sole_log(stale) else {
                return Err(format!("the log of the deleted topic {tp} is still in use"));
            };
            self.delete_log(manager, &tp, log);
        }
        let log = self
            .open_new_log(manager, image, tip)
            .map_err(|e| self.fail_log_dir(&tp, e))?;
        let hp = self.host_new_log(image, tip, log);
        parts.insert(tp, hp.clone());
        Ok(hp)
    }

    /// Opens (creating it) the log of `tip` and records its topic id.
    fn open_new_log(
        &self,
        manager: &LogManager,
        image: &MetadataImage,
        tip: &TopicIdPartition,
    ) -> Result<Log, String> {
        self.open_new_log_with(manager, image, tip, true)
    }

    /// [`Self::open_new_log`]; unless `durable`, nothing is fsynced (the directory entry,
    /// `partition.metadata` written in place): the caller syncs the file system before the
    /// log is hosted, or calls [`Self::make_new_log_durable`]. A crash before that sync can
    /// leave an empty log without (or with a torn) `partition.metadata`, which a restart
    /// adopts under the topic id its metadata names (the log never held a record).
    fn open_new_log_with(
        &self,
        manager: &LogManager,
        image: &MetadataImage,
        tip: &TopicIdPartition,
        durable: bool,
    ) -> Result<Log, String> {
        let tp = topic_partition(tip);
        let log = manager
            .open_detached_log_with(&tp, self.log_config(image, &tp.topic), durable)
            .map_err(|e| e.to_string())?;
        if durable {
            write_partition_metadata(log.dir(), tip.topic_id).map_err(|e| e.to_string())?;
        } else {
            stage_partition_metadata(log.dir(), tip.topic_id).map_err(|e| e.to_string())?;
        }
        Ok(log)
    }

    /// The durable steps [`Self::open_new_log_with`] skipped, for a log whose file-system
    /// sync failed: `partition.metadata` rewritten atomically and the data directory fsynced.
    fn make_new_log_durable(
        manager: &LogManager,
        tip: &TopicIdPartition,
        log: &Log,
    ) -> Result<(), String> {
        write_partition_metadata(log.dir(), tip.topic_id).map_err(|e| e.to_string())?;
        manager.sync_dir().map_err(|e| e.to_string())
    }

    /// A hosted partition for a log just opened by [`Self::open_new_log`].
    fn host_new_log(
        &self,
        image: &MetadataImage,
        tip: &TopicIdPartition,
        log: Log,
    ) -> Arc<HostedPartition> {
        let tp = topic_partition(tip);
        let hp = self.hosted(tp.clone(), tip.topic_id, log, 0);
        let _ = hp
            .lock()
            .state
            .set_config(self.replica_config(image, &tp.topic), 0);
        hp
    }

    /// Creates the logs of the partitions `changes` assigns here that this broker hosts
    /// under no name yet, [`LOG_FSYNC_THREADS`] at a time (creating a log's files costs
    /// ~0.3 ms per file on ext4: one at a time, a 10,000-partition topic took 25 s to be
    /// hosted). The transitions then find them hosted. Partitions hosted already, or under
    /// another topic id, are left to [`Self::get_or_create`]; a failure marks the log
    /// directory failed.
    ///
    /// The partitions map is not locked while the files are created (tens of seconds for
    /// 100,000 partitions), so produce and fetch of the hosted partitions go on meanwhile;
    /// the new ones are inserted together at the end. Only the apply loop adds partitions,
    /// so none of them can appear in the map meanwhile.
    fn create_new_logs(&self, image: &MetadataImage, changes: &crate::metadata::LocalChanges) {
        if self.shared.dir_failed.borrow().is_some() {
            return;
        }
        let new: Vec<&TopicIdPartition> = {
            let parts = self
                .shared
                .partitions
                .read()
                .unwrap_or_else(|e| e.into_inner());
            changes
                .became_leader
                .iter()
                .chain(&changes.became_follower)
                .map(|(tip, _)| tip)
                .filter(|tip| !parts.contains(&tip.topic, tip.partition))
                .collect()
        };
        if new.len() < 2 {
            return;
        }
        let logs = self.shared.logs.lock().unwrap_or_else(|e| e.into_inner());
        let Some(manager) = logs.as_ref() else {
            return;
        };
        // Created without any fsync, then made durable by one file-system sync: creating
        // 100,000 partitions waited for two fsyncs each (the data directory's entry, all of
        // one directory, and `partition.metadata`), ~1 ms per partition with 8 threads.
        let threads = LOG_FSYNC_THREADS.min(new.len());
        let next = std::sync::atomic::AtomicUsize::new(0);
        let mut opened: Vec<(&TopicIdPartition, Result<Log, String>)> =
            std::thread::scope(|scope| {
                let workers: Vec<_> = (0..threads)
                    .map(|_| {
                        scope.spawn(|| {
                            let mut out = Vec::new();
                            loop {
                                let i = next.fetch_add(1, Ordering::Relaxed);
                                let Some(tip) = new.get(i) else { break };
                                let log = self.open_new_log_with(manager, image, tip, false);
                                let failed = log.is_err();
                                out.push((*tip, log));
                                if failed {
                                    break;
                                }
                            }
                            out
                        })
                    })
                    .collect();
                workers
                    .into_iter()
                    .flat_map(|w| w.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                    .collect()
            });
        let any_opened = opened.iter().any(|(_, log)| log.is_ok());
        if any_opened
            && let Err(e) = crate::log::checkpoint::sync_file_system(&self.shared.config.data_dir)
        {
            tracing::warn!(
                partitions = opened.len(),
                "cannot sync the file system ({e}); syncing each new log"
            );
            for (tip, log) in &mut opened {
                if let Ok(l) = log
                    && let Err(e) = Self::make_new_log_durable(manager, tip, l)
                {
                    *log = Err(e);
                }
            }
        }
        let mut parts = self
            .shared
            .partitions
            .write()
            .unwrap_or_else(|e| e.into_inner());
        for (tip, log) in opened {
            match log {
                Ok(log) => {
                    let hp = self.host_new_log(image, tip, log);
                    debug_assert!(!parts.contains(&tip.topic, tip.partition));
                    parts.insert(hp.tp.clone(), hp);
                }
                Err(e) => {
                    let tp = topic_partition(tip);
                    self.fail_log_dir(&tp, e);
                }
            }
        }
    }

    /// Marks the log directory failed because `tp`'s files could not be created or opened
    /// (`EMFILE` once the open-files limit is reached, a full or read-only disk): a replica
    /// this broker cannot host must not stay assigned to a broker that looks healthy. The
    /// first reason is kept; returns the message.
    fn fail_log_dir(&self, tp: &TopicPartition, error: String) -> String {
        let reason = format!(
            "log directory {} failed: cannot open partition {tp}: {error}",
            self.shared.config.data_dir.display()
        );
        self.shared.dir_failed.send_if_modified(|f| {
            if f.is_some() {
                return false;
            }
            tracing::error!("{reason}; stopping the broker (controlled shutdown)");
            *f = Some(reason.clone());
            true
        });
        reason
    }

    /// Logs a partition that could not be opened, unless the log directory failure that
    /// stops the broker was already reported (one line, not one per partition).
    fn report_open_failure(&self, tip: &TopicIdPartition, error: &str) {
        if self.shared.dir_failed.borrow().is_none() {
            tracing::error!(partition = %tip, "cannot open the log: {error}");
        }
    }

    /// Stages the leader epoch start offsets of the hosted partitions, followers until now,
    /// that `leaders` makes this broker lead in a newer epoch
    /// ([`Log::stage_epoch_start_offset`], in memory, marking them
    /// [`PartitionInner::staged_epoch`]), then appends them to the leader epoch journal in
    /// one batch ([`epoch_journal`], one write and one `fdatasync`). Returns whether that
    /// append succeeded: then every staged entry is durable and [`Self::make_leader`] uses it
    /// as is; otherwise each is synced on its own there. A broker taking over 11,700
    /// leaderships at 100,000 partitions spent 0.6-0.9 s writing that many checkpoint files
    /// in place and syncing the file system (partitions bench, two kill -9 runs). The caller
    /// took `leaders` out of every fetcher first.
    fn stage_leader_epochs(
        &self,
        leaders: &[(TopicIdPartition, Arc<PartitionRegistration>)],
    ) -> bool {
        let started = std::time::Instant::now();
        let hosted: Vec<_> = leaders
            .iter()
            // A partition not hosted yet is created by its transition, which records its
            // epoch itself.
            .filter_map(|(tip, reg)| Some((self.partition(&tip.topic, tip.partition)?, reg)))
            .collect();
        // The caller took every one of them out of the fetchers: no fetcher appends below the
        // epoch start once it is recorded.
        // In memory only: one partition lock at a time, microseconds each.
        let mut staged = Vec::new();
        for (hp, reg) in hosted {
            let mut inner = hp.lock();
            // A leader moving to a newer epoch of its own keeps appending produced batches
            // until the transition: its epoch is recorded there, at the LEO of that moment.
            if inner.state.is_leader()
                || inner
                    .state
                    .leader_epoch()
                    .is_some_and(|e| e >= reg.leader_epoch)
            {
                continue;
            }
            match inner.log.stage_epoch_start_offset(reg.leader_epoch) {
                Ok(Some(start_offset)) => {
                    inner.staged_epoch = Some(reg.leader_epoch);
                    staged.push(JournalEntry {
                        tp: hp.tp.clone(),
                        epoch: reg.leader_epoch,
                        start_offset,
                    });
                }
                // The cache knew the epoch already: make_leader's assign leaves it.
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(partition = %hp.tp, "cannot stage the leader epoch: {e}");
                }
            }
        }
        if staged.is_empty() {
            return false;
        }
        let written = started.elapsed();
        let mut journal = self.epoch_journal();
        let Some(journal) = journal.as_mut() else {
            return false;
        };
        match journal.append(&staged) {
            Ok(()) => {
                tracing::info!(
                    partitions = staged.len(),
                    "leader epochs staged in {} ms, journaled in {} ms",
                    written.as_millis(),
                    (started.elapsed() - written).as_millis()
                );
                true
            }
            Err(e) => {
                tracing::warn!(
                    partitions = staged.len(),
                    "cannot append to the leader epoch journal ({e}); syncing each leader \
                     epoch checkpoint"
                );
                false
            }
        }
    }

    /// The leader epoch journal, locked.
    fn epoch_journal(&self) -> std::sync::MutexGuard<'_, Option<EpochJournal>> {
        self.shared
            .epoch_journal
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Opens the data directory's leader epoch journal and replays its entries into the
    /// hosted logs (only what their batches prove, [`Log::replay_journaled_epoch`]), writes
    /// the checkpoints that changed, syncs the file system once and empties the journal.
    /// Called at start, before any transition.
    ///
    /// Errors: the journal cannot be read or is damaged (`MalformedFile` naming it), or a
    /// checkpoint cannot be written or synced (the journal is kept for the next start).
    fn replay_epoch_journal(&self) -> Result<EpochJournal, LogError> {
        let data_dir = &self.shared.config.data_dir;
        let (mut journal, entries) = EpochJournal::open(data_dir)?;
        if entries.is_empty() {
            return Ok(journal);
        }
        let mut replayed = Vec::new();
        for e in &entries {
            let Some(hp) = self.partition(&e.tp.topic, e.tp.partition) else {
                continue;
            };
            if hp
                .lock()
                .log
                .replay_journaled_epoch(e.epoch, e.start_offset)?
            {
                replayed.push(hp);
            }
        }
        journal.compact(data_dir, || {
            for hp in &replayed {
                hp.lock().log.write_staged_epochs()?;
            }
            Ok(replayed.len())
        })?;
        tracing::info!(
            entries = entries.len(),
            replayed = replayed.len(),
            "leader epoch journal replayed (entries not proven by the logs' batches are dropped)"
        );
        Ok(journal)
    }

    /// Once the leader epoch journal reaches [`epoch_journal::COMPACT_AT_BYTES`]: writes
    /// every checkpoint that lacks a staged entry (in place, [`LOG_FSYNC_THREADS`] at a
    /// time), syncs the file system once and empties the journal. Runs on the apply loop,
    /// the journal's one writer, so no entry is appended meanwhile. On failure the journal is
    /// kept on disk (the next start replays it) and no longer used.
    fn compact_epoch_journal_if_due(&self) {
        let mut journal = self.epoch_journal();
        let Some(j) = journal.as_mut() else {
            return;
        };
        if j.len_bytes() < epoch_journal::COMPACT_AT_BYTES {
            return;
        }
        let started = std::time::Instant::now();
        let bytes = j.len_bytes();
        let result = j.compact(&self.shared.config.data_dir, || {
            let written =
                crate::log::manager::in_parallel(self.partitions(), LOG_FSYNC_THREADS, |hp| {
                    hp.lock().log.write_staged_epochs()
                })?;
            Ok(written.into_iter().filter(|w| *w).count())
        });
        match result {
            Ok(checkpoints) => tracing::info!(
                journal_bytes = bytes,
                checkpoints,
                "leader epoch journal compacted in {} ms",
                started.elapsed().as_millis()
            ),
            Err(e) => {
                tracing::warn!(
                    "cannot compact the leader epoch journal ({e}); new leader epochs are \
                     synced one by one from now on"
                );
                *journal = None;
            }
        }
    }

    /// Takes or updates the leadership `reg` gives this broker; the caller took the partition
    /// out of every fetcher first ([`fetcher::FetcherManager::remove_all`]). `epochs_synced`: the epochs
    /// staged by [`Self::stage_leader_epochs`] for this delta are durable (journaled).
    /// `at_info`: the transition is logged at INFO, else DEBUG ([`TRANSITION_LINES_UP_TO`]).
    fn make_leader(
        &self,
        image: &MetadataImage,
        tip: &TopicIdPartition,
        reg: &PartitionRegistration,
        now: u64,
        epochs_synced: bool,
        at_info: bool,
    ) {
        let hp = match self.get_or_create(image, tip) {
            Ok(hp) => hp,
            Err(e) => {
                self.report_open_failure(tip, &e);
                return;
            }
        };
        let mut inner = hp.lock();
        let newer_epoch = inner
            .state
            .leader_epoch()
            .is_none_or(|e| reg.leader_epoch > e);
        let staged = inner.staged_epoch.take();
        if newer_epoch {
            let recorded = if staged == Some(reg.leader_epoch) {
                // Staged at this LEO (nothing appended since: the fetcher skipped the
                // partition and it led nothing); journaled unless the append failed.
                debug_assert_eq!(
                    inner
                        .log
                        .epoch_cache()
                        .entries()
                        .last()
                        .map(|e| (e.epoch, e.start_offset)),
                    Some((reg.leader_epoch, inner.log.log_end_offset()))
                );
                if epochs_synced {
                    Ok(())
                } else {
                    inner.log.sync_epoch_checkpoint()
                }
            } else {
                inner.log.assign_epoch_start_offset(reg.leader_epoch)
            };
            if let Err(e) = recorded {
                tracing::error!(partition = %tip, "cannot record the leader epoch: {e}");
                return;
            }
        }
        let leo = inner.log.log_end_offset();
        let epoch_start = inner
            .log
            .epoch_cache()
            .entries()
            .iter()
            .find(|e| e.epoch == reg.leader_epoch)
            .map_or(leo, |e| e.start_offset);
        let old = inner.state.applied_epochs();
        match inner.state.become_leader(reg, leo, epoch_start, now) {
            Ok(t) => {
                inner.next_shrink_check_ms =
                    now.saturating_add(inner.state.config().isr_check_interval_ms());
                transition_line!(
                    at_info,
                    partition = %tip,
                    leader_epoch = reg.leader_epoch,
                    partition_epoch = reg.partition_epoch,
                    previous_epochs = ?old,
                    isr = ?reg.isr,
                    log_end_offset = leo,
                    high_watermark = inner.state.high_watermark(),
                    "{}",
                    if t.leader_changed { "became leader" } else { "leader: partition updated" }
                );
                self.execute(&hp, &mut inner, t.effects);
            }
            Err(TransitionError::Stale { .. }) => {
                tracing::debug!(partition = %tip, "ignoring a stale leader registration");
            }
            Err(e) => tracing::error!(partition = %tip, "cannot become leader: {e}"),
        }
    }

    /// Makes this broker a follower as `reg` says. Returns the partition and its new leader
    /// (-1: none) when the leader changed: the caller moves it to that leader's fetcher (or
    /// stops fetching it), [`fetcher::FetcherManager::remove_all`] then `add_all`.
    fn make_follower(
        &self,
        image: &MetadataImage,
        tip: &TopicIdPartition,
        reg: &PartitionRegistration,
        at_info: bool,
    ) -> Option<(Arc<HostedPartition>, i32)> {
        let hp = match self.get_or_create(image, tip) {
            Ok(hp) => hp,
            Err(e) => {
                self.report_open_failure(tip, &e);
                return None;
            }
        };
        let mut inner = hp.lock();
        inner.staged_epoch = None;
        let leo = inner.log.log_end_offset();
        match inner.state.become_follower(reg, leo) {
            Ok(t) => {
                if t.leader_changed {
                    transition_line!(
                        at_info,
                        partition = %tip,
                        leader = reg.leader,
                        leader_epoch = reg.leader_epoch,
                        partition_epoch = reg.partition_epoch,
                        log_end_offset = leo,
                        high_watermark = inner.state.high_watermark(),
                        "became follower"
                    );
                }
                self.execute(&hp, &mut inner, t.effects);
                drop(inner);
                t.leader_changed.then(|| (hp.clone(), reg.leader))
            }
            Err(TransitionError::Stale { .. }) => {
                tracing::debug!(partition = %tip, "ignoring a stale follower registration");
                None
            }
            Err(e) => {
                tracing::error!(partition = %tip, "cannot become follower: {e}");
                None
            }
        }
    }

    /// Stops and deletes each partition of `tips`: they leave the fetchers first, in one pass
    /// over each fetcher (see `FetcherManager::remove_all`).
    fn delete_partitions(&self, tips: &[TopicIdPartition]) {
        if tips.is_empty() {
            return;
        }
        let tps: Vec<TopicPartition> = tips.iter().map(topic_partition).collect();
        self.fetchers().remove_all(&tps);
        for tp in tps {
            self.delete_partition(tp);
        }
    }

    /// Stops and deletes `tp`, which no fetcher fetches any more.
    fn delete_partition(&self, tp: TopicPartition) {
        let removed = self
            .shared
            .partitions
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&tp.topic, tp.partition);
        let Some(hp) = removed else { return };
        {
            let mut inner = hp.lock();
            let eff = inner.state.stop();
            self.execute(&hp, &mut inner, eff);
        }
        // Wait for the last holder before taking the logs lock: the checkpoint writer and
        // the other partitions' creations need it meanwhile.
        let Some(log) = sole_log(hp) else { return };
        let logs = self.shared.logs.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(manager) = logs.as_ref() {
            tracing::info!(partition = %tp, "local replica {tp}: deleted");
            self.delete_log(manager, &tp, log);
        }
    }

    /// Removes `log` (of partition `tp`): its directory is renamed for deletion at once
    /// and deleted by the tick loop's deletion service, off every lock; an I/O error is
    /// logged (the log then stays on disk, and the next start sees it again).
    fn delete_log(&self, manager: &LogManager, tp: &TopicPartition, log: Log) {
        match manager.delete_detached_log(log) {
            Ok(doomed) => self
                .shared
                .doomed
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .append(doomed),
            Err(e) => tracing::error!(partition = %tp, "cannot delete the log: {e}"),
        }
    }

    fn fetchers(&self) -> std::sync::MutexGuard<'_, fetcher::FetcherManager> {
        self.shared
            .fetchers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    async fn tick_loop(self, mut stop: watch::Receiver<bool>) {
        let mut period = TICK_MS;
        let mut next_checkpoint = CHECKPOINT_INTERVAL_MS;
        let mut next_retention = RETENTION_INTERVAL_MS;
        let mut next_gauges = 0;
        let mut broker_epoch = self.broker_epoch();
        // The broker's one deletion service: files of segments removed by retention
        // (renamed to `.deleted` under the partition locks) and directories of deleted logs
        // (renamed to `-delete`, from `Shared::doomed`), deleted by one blocking task at a
        // time, off the runtime and outside every lock, large files in steps: freeing blocks
        // can wait for the file system's journal and the device's discard. Not awaited;
        // while a deletion runs, newly removed files wait for the next tick.
        let mut doomed_files = DeletedSegments::default();
        let mut deleter: Option<tokio::task::JoinHandle<()>> = None;
        // One log cleaner pass at a time, on a blocking thread (see `cleaning`).
        let cleaner_backoff_ms = self.shared.config.cleaner_backoff_ms;
        let mut next_clean = cleaner_backoff_ms;
        let mut cleaner: Option<tokio::task::JoinHandle<()>> = None;
        loop {
            tokio::select! {
                _ = stop.wait_for(|s| *s) => return,
                _ = tokio::time::sleep(Duration::from_millis(period)) => {}
            }
            let now = self.now_ms();
            let epoch = self.broker_epoch();
            let epoch_changed = epoch != broker_epoch;
            broker_epoch = epoch;
            // Swapped first so that an apply finishing during this pass is sampled by the next.
            let roles_changed = self.shared.roles_changed.swap(false, Ordering::Relaxed);
            let sample = roles_changed || now >= next_gauges;
            let mut roles = Vec::new();
            // Flushes after a roll and `flush.ms` flushes: taken under each partition lock,
            // synced after the loop without any lock (produce and fetch go on meanwhile),
            // then completed.
            let mut flushes = Vec::new();
            let partitions = self.partitions();
            period = tick_period_ms(partitions.len());
            for hp in partitions {
                let mut inner = hp.lock();
                if sample {
                    roles.push(Self::gauge_role(&inner));
                }
                if epoch_changed {
                    inner.state.set_local_broker_epoch(epoch);
                }
                if inner.state.is_leader() && now >= inner.next_shrink_check_ms {
                    inner.next_shrink_check_ms =
                        now.saturating_add(inner.state.config().isr_check_interval_ms());
                    let eff = inner.state.maybe_shrink_isr(now);
                    self.execute(&hp, &mut inner, eff);
                }
                if inner.state.next_timer_ms().is_some_and(|t| now >= t) {
                    let eff = inner.state.tick(now);
                    self.execute(&hp, &mut inner, eff);
                }
                if let Some(job) = inner.log.begin_flush_if_due() {
                    flushes.push((hp.clone(), job));
                }
                if now >= next_retention {
                    let hw = inner.state.high_watermark();
                    match inner.log.delete_old_segments(hw) {
                        Ok(deleted) if deleted.is_empty() => {}
                        Ok(deleted) => {
                            let start = inner.log.log_start_offset();
                            inner.state.set_log_start_offset(start);
                            tracing::info!(partition = %hp.tp, segments = deleted.segment_count(), log_start_offset = start, "retention deleted old segments");
                            doomed_files.append(deleted);
                        }
                        Err(e) => {
                            // Part of the segments may have gone: keep the state's log start
                            // in line with the log's.
                            let start = inner.log.log_start_offset();
                            inner.state.set_log_start_offset(start);
                            tracing::error!(partition = %hp.tp, "retention failed: {e}");
                        }
                    }
                }
            }
            if now >= next_retention {
                next_retention = now + RETENTION_INTERVAL_MS;
            }
            if !flushes.is_empty() {
                Self::run_flushes(flushes).await;
            }
            doomed_files.append(std::mem::take(
                &mut *self.shared.doomed.lock().unwrap_or_else(|e| e.into_inner()),
            ));
            if !doomed_files.is_empty() && deleter.as_ref().is_none_or(|d| d.is_finished()) {
                let files = std::mem::take(&mut doomed_files);
                let stop = stop.clone();
                deleter = Some(tokio::task::spawn_blocking(move || {
                    // Failures are logged with their paths, and what a shutdown leaves is
                    // deleted by the next open (the process exit does not wait for it).
                    let _ = files.delete_files_while(|| !*stop.borrow());
                }));
            }
            if now >= next_clean && cleaner.as_ref().is_none_or(|c| c.is_finished()) {
                next_clean = now + cleaner_backoff_ms;
                cleaner = self.start_cleaner_pass(now);
            }
            if sample {
                next_gauges = now + metrics::GAUGE_INTERVAL_MS;
                metrics::PartitionGauges::from_roles(roles).record();
            }
            if now >= next_checkpoint {
                next_checkpoint = now + CHECKPOINT_INTERVAL_MS;
                // fsyncs can wait for the file system's whole journal: off the runtime.
                let rm = self.clone();
                let _ = tokio::task::spawn_blocking(move || rm.write_checkpoints()).await;
            }
        }
    }

    /// Measures the compacted logs (the cleaner gauges) and starts a pass on the filthiest
    /// one due, if any (see [`cleaning`]).
    fn start_cleaner_pass(&self, now: u64) -> Option<tokio::task::JoinHandle<()>> {
        let partitions = self.partitions();
        let (target, max_ratio) = cleaning::filthiest(&partitions);
        drop(partitions);
        let last = self.shared.cleaner_last_run_ms.load(Ordering::Relaxed);
        metrics::record_cleaner_gauges(max_ratio, now.saturating_sub(last));
        let hp = target?;
        let weak = Arc::downgrade(&hp);
        drop(hp);
        let config = self.shared.config.cleaner;
        let rm = self.clone();
        Some(tokio::task::spawn_blocking(
            move || match cleaning::run_pass(&weak, config) {
                Ok(Some(_)) => rm
                    .shared
                    .cleaner_last_run_ms
                    .store(rm.now_ms(), Ordering::Relaxed),
                Ok(None) => {}
                Err(e) => tracing::error!("log cleaner pass failed: {e}"),
            },
        ))
    }

    /// Runs the periodic flushes (after a roll, `flush.ms`; from
    /// [`crate::log::Log::begin_flush_if_due`]) on one
    /// blocking thread, off the runtime and outside every partition lock, then completes
    /// each under its partition's lock. Bounded by the number of hosted partitions.
    async fn run_flushes(flushes: Vec<(Arc<HostedPartition>, crate::log::LogFlush)>) {
        let ran = tokio::task::spawn_blocking(move || {
            flushes
                .into_iter()
                .map(|(hp, job)| {
                    let start = Instant::now();
                    let result = job.run();
                    (hp, job, result, start.elapsed())
                })
                .collect::<Vec<_>>()
        })
        .await;
        let Ok(ran) = ran else {
            tracing::error!("flush task panicked");
            return;
        };
        for (hp, job, result, took) in ran {
            match hp.lock().log.finish_flush(job, result) {
                Ok(()) => metrics::record_flush(took),
                Err(e) => tracing::error!(partition = %hp.tp, "flush failed: {e}"),
            }
        }
    }

    /// How the gauges see a partition.
    fn gauge_role(inner: &PartitionInner) -> metrics::PartitionRole {
        match inner.state.role() {
            Role::Leader(l) => metrics::PartitionRole::Leader {
                isr: l.isr.isr().len(),
                replicas: inner.state.replicas().len(),
                min_insync: inner.state.config().effective_min_insync(),
            },
            Role::Follower(_) => metrics::PartitionRole::Follower {
                lag: (inner.last_leader_hw - inner.log.log_end_offset()).max(0),
            },
            Role::None => metrics::PartitionRole::None,
        }
    }

    /// Writes the HW and recovery-point checkpoints of every hosted partition.
    pub fn write_checkpoints(&self) {
        let mut hws = BTreeMap::new();
        let mut points = BTreeMap::new();
        for hp in self.partitions() {
            let inner = hp.lock();
            hws.insert(hp.tp.clone(), inner.state.high_watermark());
            points.insert(hp.tp.clone(), inner.log.recovery_point());
        }
        let logs = self.shared.logs.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(m) = logs.as_ref() {
            if let Err(e) = m.write_high_watermarks(&hws) {
                tracing::error!("cannot write the high-watermark checkpoint: {e}");
            }
            if let Err(e) = m.write_recovery_points(&points) {
                tracing::error!("cannot write the recovery-point checkpoint: {e}");
            }
        }
    }

    /// Role of a hosted partition as (is leader, leader id, leader epoch).
    pub fn role_of(inner: &PartitionInner) -> (bool, i32, i32) {
        match inner.state.role() {
            Role::Leader(l) => (true, -1, l.leader_epoch),
            Role::Follower(f) => (false, f.leader_id, f.leader_epoch),
            Role::None => (false, -1, -1),
        }
    }
}

impl ReplicaManagerTasks {
    /// Stops the tasks and the fetchers, fails every waiter, then closes every log cleanly
    /// (flush, checkpoints, clean-shutdown marker).
    pub async fn shutdown(self, rm: &ReplicaManager) {
        self.stop.send_replace(true);
        let _ = self.apply.await;
        let _ = self.ticker.await;
        let _ = self.alter.await;
        rm.fetchers().stop_all();
        let parts = std::mem::take(
            &mut *rm
                .shared
                .partitions
                .write()
                .unwrap_or_else(|e| e.into_inner()),
        );
        let mut logs = Vec::new();
        let mut hws = BTreeMap::new();
        for (tp, hp) in parts {
            {
                let mut inner = hp.lock();
                let eff = inner.state.stop();
                rm.execute(&hp, &mut inner, eff);
                hws.insert(tp.clone(), inner.state.high_watermark());
            }
            match Arc::try_unwrap(hp) {
                Ok(hp) => {
                    let inner = hp.inner.into_inner().unwrap_or_else(|e| e.into_inner());
                    logs.push((tp, inner.log));
                }
                Err(_) => {
                    tracing::warn!(partition = %tp, "log still in use at shutdown; it will be recovered on the next start")
                }
            }
        }
        let manager = rm
            .shared
            .logs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(m) = manager {
            let closing = std::time::Instant::now();
            let count = logs.len();
            match m.close_detached(logs, &hws, LOG_FSYNC_THREADS) {
                Ok(()) => tracing::info!(
                    partitions = count,
                    "logs closed cleanly in {} ms",
                    closing.elapsed().as_millis()
                ),
                Err(e) => tracing::error!(
                    "closing the logs failed (recovery runs on the next start): {e}"
                ),
            }
        }
    }
}

/// Runs `f`, which blocks (opens, truncates and deletes partition files, and may wait up to
/// [`DELETE_WAIT_MS`] for a deleted partition's last holder), without stalling the other
/// tasks of the runtime's worker: on a multi-thread runtime through
/// [`tokio::task::block_in_place`]; on a current-thread runtime (nothing else to run there
/// meanwhile anyway) inline.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(f),
        _ => f(),
    }
}

/// The log of a partition removed from the map, once no one else holds the partition.
/// Request handlers hold a partition only for the duration of one lock (never across an
/// await), so the last other holder lets go within microseconds; this waits for that at most
/// [`DELETE_WAIT_MS`] (polling every ms; call it off the async workers, see [`blocking`]) and
/// otherwise returns `None` (logged): the directory is then left for the next start.
fn sole_log(mut hp: Arc<HostedPartition>) -> Option<Log> {
    let tp = hp.tp.clone();
    for _ in 0..DELETE_WAIT_MS {
        match Arc::try_unwrap(hp) {
            Ok(owned) => {
                return Some(
                    owned
                        .inner
                        .into_inner()
                        .unwrap_or_else(|e| e.into_inner())
                        .log,
                );
            }
            Err(shared) => {
                hp = shared;
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
    tracing::error!(partition = %tp, "log still in use after {DELETE_WAIT_MS} ms; not deleted");
    None
}

/// Name of the file in a partition directory that records the topic id the log belongs to
/// (Kafka's `partition.metadata`, KIP-516), so a log of a deleted topic is never adopted by a
/// re-created topic of the same name.
pub const PARTITION_METADATA_FILE: &str = "partition.metadata";

/// The topic id recorded in `dir`'s [`PARTITION_METADATA_FILE`]; `None` when the file is
/// missing or unreadable (a log written before the file existed).
pub fn read_partition_metadata(dir: &std::path::Path) -> Option<Uuid> {
    let text = std::fs::read_to_string(dir.join(PARTITION_METADATA_FILE)).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("topic_id: "))
        .and_then(|id| Uuid::parse_str(id.trim()).ok())
}

/// Records `topic_id` in `dir`'s [`PARTITION_METADATA_FILE`] (atomically, fsynced).
pub fn write_partition_metadata(dir: &std::path::Path, topic_id: Uuid) -> Result<(), LogError> {
    crate::log::checkpoint::write_atomically(
        &dir.join(PARTITION_METADATA_FILE),
        partition_metadata(topic_id).as_bytes(),
    )
}

/// The contents of [`PARTITION_METADATA_FILE`] (Kafka's `PartitionMetadataFile`, version 0).
fn partition_metadata(topic_id: Uuid) -> String {
    format!("version: 0\ntopic_id: {topic_id}\n")
}

/// [`write_partition_metadata`] in place and without fsync
/// ([`crate::log::checkpoint::overwrite_in_place`]): for new logs made durable by a
/// file-system sync before they are hosted.
fn stage_partition_metadata(dir: &std::path::Path, topic_id: Uuid) -> Result<(), LogError> {
    crate::log::checkpoint::overwrite_in_place(
        &dir.join(PARTITION_METADATA_FILE),
        partition_metadata(topic_id).as_bytes(),
    )
}

/// Threads creating the logs of one metadata delta's new partitions, and closing every log
/// at shutdown: the work waits on fsyncs, not on the CPU, so more threads than cores help.
pub const LOG_FSYNC_THREADS: usize = 8;

/// New leaderships in one metadata delta from which [`LOG_FSYNC_THREADS`] threads make them
/// (below it the thread start costs more than the overlapped fsyncs save).
const PARALLEL_TRANSITIONS_FROM: usize = 32;
/// Transitions (new leaderships and followerships) of one delta that are each logged at INFO;
/// a larger delta logs them at DEBUG and only its summary line at INFO ("applied local
/// changes ..."). A broker failure at 100,000 partitions gave each survivor ~68,000
/// per-partition lines, formatted and written on the apply path while the failover was
/// pending (the controller likewise lists a few changes and counts the rest).
const TRANSITION_LINES_UP_TO: usize = 1_000;

/// Longest wait for a deleted partition's last holder, ms.
pub const DELETE_WAIT_MS: u64 = 200;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tick_period_grows_with_the_partitions() {
        assert_eq!(tick_period_ms(0), TICK_MS);
        assert_eq!(tick_period_ms(10_999), TICK_MS);
        assert_eq!(tick_period_ms(25_000), 25);
        assert_eq!(tick_period_ms(100_000), MAX_TICK_MS);
        assert_eq!(tick_period_ms(1_000_000), MAX_TICK_MS);
    }
}
