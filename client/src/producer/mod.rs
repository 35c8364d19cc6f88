//! [`Producer`]: an asynchronous, batching, idempotent producer (Kafka's `KafkaProducer`
//! without transactions).
//!
//! - **Metadata**: partition leaders from the broker `Metadata` RPC, refreshed after
//!   NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH and transport errors
//!   (see [`crate::brokers`]); a NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH that names a
//!   newer leader (`current_leader`, KIP-951) is followed at once, without backoff or
//!   refresh. Each Produce carries the leader epoch it was routed by (KIP-320 fencing).
//! - **Partitioning**: [`partitioner`]: murmur2 of the key like Kafka, sticky without a key.
//! - **Batching**: [`accumulator`]: one open batch per partition, sent when `batch_size_bytes`
//!   is reached or after `linger_ms`; compressed with `compression` (Kafka
//!   `compression.type`) when sealed.
//! - **Idempotence** (default on, KIP-98): one InitProducerId, a sequence per partition, and
//!   retries that resend the same bytes so the broker deduplicates them. Up to
//!   `max_in_flight_requests_per_connection` (default 5, as Kafka) batches of a partition are
//!   in flight at once; [`pipeline`] keeps their order across retries and leader changes
//!   (a batch is resent only after every earlier one of its partition is resolved). When a
//!   batch finally fails, the later ones of its partition fail too and the next batches use a
//!   fresh producer id (their sequences restart at 0), as Kafka bumps the epoch (KIP-360).
//!   Without idempotence one batch per partition is in flight: nothing else would keep the
//!   order (gRPC may run two requests in either order).
//! - **Retries**: retriable errors (Kafka's classification, [`ErrorCode::retriable`]) and
//!   transport errors are retried with exponential backoff until `delivery_timeout_ms` after
//!   the record was handed to [`Producer::send`].
//! - **Memory bound**: at most `buffer_memory_bytes` of records wait or are in flight;
//!   `send` waits for room (up to `max_block_ms`).
//!
//! ```no_run
//! use keel_client::producer::{Acks, Producer, ProducerConfig};
//!
//! # async fn run() -> Result<(), keel_client::producer::ProduceError> {
//! let mut config = ProducerConfig::new(vec!["127.0.0.1:9192".into()]);
//! config.acks = Acks::All; // the default: wait for the ISR (min.insync.replicas applies)
//! let producer = Producer::new(config)?;
//! // `send` returns once the record is batched; awaiting the delivery waits for the ack.
//! let delivery = producer.send("events", Some(b"user-1"), b"clicked").await?;
//! let meta = delivery.await?;
//! println!("{}-{} at offset {}", meta.topic, meta.partition, meta.offset);
//! producer.close().await;
//! # Ok(())
//! # }
//! ```

pub mod accumulator;
mod error;
pub mod partitioner;
pub mod pipeline;

use keel_runtime::backoff::pause_within;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use keel_proto::ErrorCode;
use keel_proto::broker::{
    InitProducerIdRequest, ProducePartitionData, ProduceRequest, ProduceTopicData,
};
use keel_record::{CompressionType, RecordBatchBuilder};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, oneshot};

pub use accumulator::TopicPartition;
use accumulator::{Accumulator, Batch, PendingRecord, Sequences, record_size_bytes};
pub use error::ProduceError;
use partitioner::{StickyPartitioner, key_partition};
use pipeline::{Pipelines, Position};

use crate::brokers::{Brokers, MetadataError, PartitionLeader, now_ms};
use crate::leader_epochs::{Failure, Reaction, no_leader, react};
use crate::rpc_error::{Api, status_line};

/// Acknowledgement level (Kafka `acks`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acks {
    /// `acks=0`: the broker does not answer with an offset; nothing is known about delivery.
    None,
    /// `acks=1`: the leader appended the batch.
    Leader,
    /// `acks=all` (-1): every member of the ISR has the batch and the ISR has at least
    /// `min.insync.replicas` members.
    All,
}

impl Acks {
    /// The wire value: 0, 1 or -1.
    pub fn wire(self) -> i32 {
        match self {
            Acks::None => 0,
            Acks::Leader => 1,
            Acks::All => -1,
        }
    }
}

/// Settings of a [`Producer`]; [`ProducerConfig::new`] gives Kafka's defaults.
#[derive(Debug, Clone)]
pub struct ProducerConfig {
    /// `host:port` of one or more brokers.
    pub bootstrap_brokers: Vec<String>,
    /// Acknowledgement level; default [`Acks::All`].
    pub acks: Acks,
    /// Idempotent delivery (requires `acks` = all); default true.
    pub enable_idempotence: bool,
    /// How long a batch waits for more records before it is sent, ms; default 5.
    pub linger_ms: u64,
    /// Target batch size per partition, bytes; default 16384. Counted before compression.
    pub batch_size_bytes: usize,
    /// Codec of every batch sent (Kafka `compression.type`: none, gzip, snappy, lz4, zstd);
    /// default none. Batches are compressed once, when sealed, and retries resend the same
    /// bytes. Framing as Kafka's Java producer writes it (`keel_record::compression`).
    pub compression: CompressionType,
    /// Upper bound from `send` to success or failure, retries included, ms; default 120000.
    pub delivery_timeout_ms: u64,
    /// Deadline of one RPC, ms; also the broker's acks=all wait (`timeout_ms`); default 30000.
    pub request_timeout_ms: u64,
    /// First backoff between retries, ms (doubled up to `retry_backoff_max_ms`, ±20% jitter as
    /// Kafka's KIP-580); default 100.
    pub retry_backoff_ms: u64,
    /// Longest backoff between retries, ms; default 1000.
    pub retry_backoff_max_ms: u64,
    /// Bytes of records that may wait or be in flight; default 32 MiB.
    pub buffer_memory_bytes: usize,
    /// Most batches of one partition in flight at once with idempotence, 1..=5; default 5
    /// (Kafka's `max.in.flight.requests.per.connection`, which must be at most 5 with
    /// idempotence: the broker deduplicates against the last 5 batches of a producer).
    /// Keel counts per partition, the unit whose order it keeps. Without idempotence the
    /// producer keeps 1 whatever this says (see the module documentation).
    pub max_in_flight_requests_per_connection: usize,
    /// How long `send` may wait for metadata of the topic or for buffer room, ms; default
    /// 10000 (Kafka: 60000; shorter so a CLI fails fast on an unknown topic).
    pub max_block_ms: u64,
    /// A topic's partition list is asked again once it is this old, ms (Kafka:
    /// `metadata.max.age.ms`); default 300000. Partitions added to a topic are used from then
    /// on: keyed records go to `murmur2(key) % partitions`, so a key's partition changes with
    /// the count, as in Kafka.
    pub metadata_max_age_ms: u64,
    /// Opens the channels to the brokers: plaintext (the default) or TLS
    /// (`Dialer::new(Some(context))`).
    pub dialer: keel_runtime::tls::Dialer,
}

impl ProducerConfig {
    /// Defaults for `bootstrap_brokers`.
    pub fn new(bootstrap_brokers: Vec<String>) -> Self {
        ProducerConfig {
            bootstrap_brokers,
            acks: Acks::All,
            enable_idempotence: true,
            linger_ms: 5,
            batch_size_bytes: 16 * 1024,
            compression: CompressionType::None,
            delivery_timeout_ms: 120_000,
            request_timeout_ms: 30_000,
            retry_backoff_ms: 100,
            retry_backoff_max_ms: 1000,
            buffer_memory_bytes: 32 * 1024 * 1024,
            max_in_flight_requests_per_connection: MAX_IN_FLIGHT_IDEMPOTENT,
            max_block_ms: 10_000,
            metadata_max_age_ms: 300_000,
            dialer: Default::default(),
        }
    }
}

/// Highest `max_in_flight_requests_per_connection` with idempotence (Kafka's
/// `KafkaProducer.configureInflightRequests`; the broker keeps 5 batches per producer).
pub const MAX_IN_FLIGHT_IDEMPOTENT: usize = 5;

/// Where an acknowledged record was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordMetadata {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// Offset of the record; -1 with acks=0 (unknown).
    pub offset: i64,
    /// The record's create time, ms since the Unix epoch.
    pub timestamp_ms: i64,
}

type DeliveryResult = Result<RecordMetadata, ProduceError>;

/// The outcome of one [`Producer::send`]: resolves once the record is acknowledged or failed.
#[derive(Debug)]
pub struct Delivery {
    rx: oneshot::Receiver<DeliveryResult>,
}

impl Future for Delivery {
    type Output = DeliveryResult;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<DeliveryResult> {
        Pin::new(&mut self.rx)
            .poll(cx)
            .map(|r| r.unwrap_or(Err(ProduceError::Closed)))
    }
}

#[derive(Debug)]
struct Handle {
    tx: oneshot::Sender<DeliveryResult>,
    /// Released (buffer room returned) when the record completes.
    _permit: OwnedSemaphorePermit,
}

#[derive(Debug)]
struct State {
    acc: Accumulator<Handle>,
    pipelines: Pipelines,
    sticky: HashMap<String, StickyPartitioner>,
    /// `None` until the first InitProducerId, and again after a batch failed (a fresh id).
    sequences: Option<Sequences>,
    /// Number of `flush` calls in progress: while > 0 every batch is ready.
    flushing: usize,
    closed: bool,
}

#[derive(Debug)]
struct Inner {
    config: ProducerConfig,
    brokers: Arc<Brokers>,
    state: Mutex<State>,
    /// Wakes the sender loop (records appended, batch done, flush, close).
    wake: Notify,
    /// Signalled to every waiter when a batch completes.
    progress: Notify,
    memory: Arc<Semaphore>,
    /// Send attempts that were retried (Kafka metric `record-retry-total`, per batch).
    retries: AtomicU64,
    /// The most batches of one partition seen in flight at once.
    max_in_flight_seen: AtomicUsize,
}

/// An asynchronous producer; see the [module documentation](self). `send` takes `&self`:
/// share one producer (e.g. in an `Arc`) between tasks. Dropping it fails records not yet
/// sent with [`ProduceError::Closed`]; call [`Producer::close`] to deliver them first.
#[derive(Debug)]
pub struct Producer {
    inner: Arc<Inner>,
}

impl Producer {
    /// A producer for `config`; starts its sender task, so it must be called inside a Tokio
    /// runtime. Connects lazily.
    ///
    /// Errors ([`ProduceError::InvalidArgument`], nothing started): no bootstrap address,
    /// idempotence without acks=all, `max_in_flight_requests_per_connection` 0 or above 5
    /// with idempotence, or `delivery_timeout_ms` below `linger_ms + request_timeout_ms`
    /// (Kafka's ConfigException for the same).
    pub fn new(config: ProducerConfig) -> Result<Producer, ProduceError> {
        let brokers = Arc::new(
            Brokers::new(
                config.bootstrap_brokers.clone(),
                Duration::from_millis(config.request_timeout_ms.max(1)),
            )
            .with_max_age(Duration::from_millis(config.metadata_max_age_ms))
            .with_dialer(config.dialer.clone()),
        );
        Producer::with_brokers(config, brokers)
    }

    /// A producer that shares `brokers` (connections, leader cache and the leader epochs
    /// seen) with others, e.g. a [`Consumer`](crate::consumer::Consumer) that reads its
    /// records back (KIP-320: the epoch learnt while producing counts for reading).
    /// `brokers` keeps its own bootstrap list and request timeout.
    pub fn with_brokers(
        config: ProducerConfig,
        brokers: Arc<Brokers>,
    ) -> Result<Producer, ProduceError> {
        if config.bootstrap_brokers.is_empty() {
            return Err(ProduceError::InvalidArgument(
                "no bootstrap broker addresses given".into(),
            ));
        }
        // KafkaProducer.configureDeliveryTimeout: a ConfigException when delivery.timeout.ms
        // < linger.ms + request.timeout.ms (a batch could use up its budget lingering and
        // then have a request with no time left).
        let floor_ms = config.linger_ms.saturating_add(config.request_timeout_ms);
        if config.delivery_timeout_ms < floor_ms {
            return Err(ProduceError::InvalidArgument(format!(
                "delivery_timeout_ms {} must be at least linger_ms {} + request_timeout_ms {} \
                 (Kafka: delivery.timeout.ms >= linger.ms + request.timeout.ms)",
                config.delivery_timeout_ms, config.linger_ms, config.request_timeout_ms
            )));
        }
        if config.enable_idempotence && config.acks != Acks::All {
            return Err(ProduceError::InvalidArgument(
                "idempotence requires acks=all (disable idempotence for acks 0 or 1)".into(),
            ));
        }
        let in_flight = config.max_in_flight_requests_per_connection;
        if in_flight == 0 || (config.enable_idempotence && in_flight > MAX_IN_FLIGHT_IDEMPOTENT) {
            return Err(ProduceError::InvalidArgument(format!(
                "max_in_flight_requests_per_connection {in_flight} must be 1-\
                 {MAX_IN_FLIGHT_IDEMPOTENT} with idempotence (Kafka: \
                 max.in.flight.requests.per.connection <= 5 for the idempotent producer), \
                 at least 1 without"
            )));
        }
        let in_flight = if config.enable_idempotence {
            in_flight
        } else {
            1
        };
        let permits = config.buffer_memory_bytes.clamp(1, Semaphore::MAX_PERMITS);
        let inner = Arc::new(Inner {
            brokers,
            state: Mutex::new(State {
                acc: Accumulator::new(
                    config.batch_size_bytes,
                    Duration::from_millis(config.linger_ms),
                ),
                pipelines: Pipelines::new(in_flight),
                sticky: HashMap::new(),
                sequences: None,
                flushing: 0,
                closed: false,
            }),
            wake: Notify::new(),
            progress: Notify::new(),
            memory: Arc::new(Semaphore::new(permits)),
            retries: AtomicU64::new(0),
            max_in_flight_seen: AtomicUsize::new(0),
            config,
        });
        tokio::spawn(sender_loop(inner.clone()));
        Ok(Producer { inner })
    }

    /// Queues one record for `topic`. Returns once the record is in a batch (after waiting
    /// for the topic's metadata and buffer room, up to `max_block_ms`); the returned
    /// [`Delivery`] resolves when the record is acknowledged (or failed).
    pub async fn send(
        &self,
        topic: &str,
        key: Option<&[u8]>,
        value: &[u8],
    ) -> Result<Delivery, ProduceError> {
        let cfg = &self.inner.config;
        let block_deadline = Instant::now() + Duration::from_millis(cfg.max_block_ms);
        let size = record_size_bytes(key, value);
        let permits = size.clamp(1, cfg.buffer_memory_bytes.max(1)) as u32;
        let permit = tokio::time::timeout_at(
            block_deadline.into(),
            self.inner.memory.clone().acquire_many_owned(permits),
        )
        .await
        .map_err(|_| {
            ProduceError::InvalidArgument(format!(
                "no buffer room for the record within max_block_ms ({} ms)",
                cfg.max_block_ms
            ))
        })?
        .map_err(|_| ProduceError::Closed)?;
        let meta = self.topic_metadata(topic, block_deadline).await?;
        let partitions = meta.partitions.len();
        let (tx, rx) = oneshot::channel();
        let mut s = self.inner.state.lock().unwrap();
        if s.closed {
            return Err(ProduceError::Closed);
        }
        let partition = match key {
            Some(k) => key_partition(k, partitions),
            None => {
                let start = self.sticky_start();
                s.sticky
                    .entry(topic.to_string())
                    .or_insert_with(|| StickyPartitioner::new(start))
                    .next(partitions, size, cfg.batch_size_bytes, |p| {
                        meta.partitions[p].leader_id >= 0
                    })
            }
        };
        s.acc.append(
            (topic.to_string(), partition),
            PendingRecord {
                key: key.map(<[u8]>::to_vec),
                value: value.to_vec(),
                timestamp_ms: now_ms(),
                handle: Handle {
                    tx,
                    _permit: permit,
                },
            },
            Instant::now(),
        );
        drop(s);
        self.inner.wake.notify_one();
        Ok(Delivery { rx })
    }

    /// Sends every queued record now and waits until all of them (and any sent meanwhile)
    /// are acknowledged or failed.
    pub async fn flush(&self) {
        self.inner.state.lock().unwrap().flushing += 1;
        self.inner.wake.notify_one();
        loop {
            let progress = self.inner.progress.notified();
            tokio::pin!(progress);
            progress.as_mut().enable();
            {
                let s = self.inner.state.lock().unwrap();
                if s.acc.is_empty() && s.pipelines.is_idle() {
                    break;
                }
            }
            progress.await;
        }
        self.inner.state.lock().unwrap().flushing -= 1;
    }

    /// Delivers every queued record ([`Producer::flush`]), then stops the sender task.
    pub async fn close(self) {
        self.flush().await;
    }

    /// The producer id and epoch in use, once the first batch was sent with idempotence.
    pub fn producer_id(&self) -> Option<(i64, i16)> {
        let s = self.inner.state.lock().unwrap();
        s.sequences
            .as_ref()
            .map(|q| (q.producer_id, q.producer_epoch))
    }

    /// How many times a batch send was retried (after a retriable error or a transport
    /// failure) since the producer started.
    pub fn retries(&self) -> u64 {
        self.inner.retries.load(Ordering::Relaxed)
    }

    /// The most batches of one partition that were in flight at once since the producer
    /// started (1..=`max_in_flight_requests_per_connection` once anything was sent).
    pub fn max_in_flight_seen(&self) -> usize {
        self.inner.max_in_flight_seen.load(Ordering::Relaxed)
    }

    /// A start partition for the sticky partitioner that differs between producers.
    fn sticky_start(&self) -> usize {
        (now_ms() as usize) ^ (Arc::as_ptr(&self.inner) as usize >> 4)
    }

    /// The partitions of `topic` and their leaders, retrying while the brokers do not know it
    /// yet (a topic just created) or cannot be reached, until `deadline`.
    async fn topic_metadata(
        &self,
        topic: &str,
        deadline: Instant,
    ) -> Result<crate::brokers::TopicMetadata, ProduceError> {
        let backoff = retry_backoff(&self.inner.config);
        let mut attempt = 0u32;
        loop {
            let err = match self.inner.brokers.topic(topic).await {
                Ok(t) if !t.partitions.is_empty() => return Ok(t),
                Ok(_) => MetadataError::Topic {
                    topic: topic.to_string(),
                    code: ErrorCode::UnknownTopicOrPartition,
                },
                Err(e) => e,
            };
            let retriable = match &err {
                MetadataError::Topic { code, .. } => code.retriable(),
                MetadataError::Unreachable { .. } => true,
                MetadataError::NotABroker { .. } => false,
            };
            let remaining = deadline.saturating_duration_since(Instant::now());
            let pause = pause_within(backoff.next(attempt), remaining);
            attempt = attempt.saturating_add(1);
            let (true, Some(pause)) = (retriable, pause) else {
                return Err(err.into());
            };
            tokio::time::sleep(pause).await;
        }
    }
}

impl Drop for Producer {
    fn drop(&mut self) {
        let batches = {
            let mut s = self.inner.state.lock().unwrap();
            s.closed = true;
            s.acc.take_all()
        };
        for b in batches {
            for r in b.records {
                let _ = r.handle.tx.send(Err(ProduceError::Closed));
            }
        }
        self.inner.wake.notify_one();
    }
}

/// The producer id new batches are sealed with: the current one, [`NO_ID_YET`] while a fresh
/// one is to be asked for, -1 without idempotence.
fn sealing_id(inner: &Inner, s: &State) -> i64 {
    match &s.sequences {
        _ if !inner.config.enable_idempotence => -1,
        Some(q) => q.producer_id,
        None => NO_ID_YET,
    }
}

/// Stands for the producer id InitProducerId will give: differs from every id in flight, so
/// a partition with batches of the old id waits for them ([`Pipelines::sendable`]).
const NO_ID_YET: i64 = i64::MIN;

/// Seals ready batches and starts one send task per batch, until closed and idle.
async fn sender_loop(inner: Arc<Inner>) {
    loop {
        let (ready, deadline, need_id) = {
            let s = inner.state.lock().unwrap();
            if s.closed && s.acc.is_empty() && s.pipelines.is_idle() {
                return;
            }
            let id = sealing_id(&inner, &s);
            let sendable = |tp: &TopicPartition| s.pipelines.sendable(tp, id);
            let ready = s
                .acc
                .ready(Instant::now(), sendable, s.flushing > 0 || s.closed);
            let need_id = inner.config.enable_idempotence && s.sequences.is_none();
            (ready, s.acc.next_linger_deadline(sendable), need_id)
        };
        if !ready.is_empty() {
            if need_id {
                match init_producer_id(&inner).await {
                    Ok((id, epoch)) => {
                        inner.state.lock().unwrap().sequences = Some(Sequences::new(id, epoch));
                    }
                    Err(e) => {
                        fail_batches(&inner, &ready, e);
                        continue;
                    }
                }
            }
            let mut s = inner.state.lock().unwrap();
            let id = sealing_id(&inner, &s);
            for tp in ready {
                // Checked again: the producer id may have changed since `ready`.
                if !s.pipelines.sendable(&tp, id) {
                    continue;
                }
                let Some(batch) = s.acc.take(&tp) else {
                    continue;
                };
                let identity = match s.sequences.as_mut() {
                    Some(q) if inner.config.enable_idempotence => {
                        let seq = q.assign(&tp, batch.records.len() as i32);
                        Some((q.producer_id, q.producer_epoch, seq))
                    }
                    _ => None,
                };
                let opens = identity.is_some_and(|(_, _, seq)| seq == 0);
                let ticket = s.pipelines.start(&tp, id, opens);
                inner
                    .max_in_flight_seen
                    .fetch_max(s.pipelines.in_flight(&tp), Ordering::Relaxed);
                tokio::spawn(send_batch(inner.clone(), tp, batch, identity, ticket));
            }
            continue;
        }
        let woken = inner.wake.notified();
        match deadline {
            Some(d) => {
                tokio::select! {
                    _ = woken => {}
                    _ = tokio::time::sleep_until(d.into()) => {}
                }
            }
            None => woken.await,
        }
    }
}

/// Fails the first batch of each of `tps` with `error` (the producer id could not be had).
fn fail_batches(inner: &Inner, tps: &[TopicPartition], error: ProduceError) {
    let batches: Vec<_> = {
        let mut s = inner.state.lock().unwrap();
        tps.iter().filter_map(|tp| s.acc.take(tp)).collect()
    };
    for b in batches {
        for r in b.records {
            let _ = r.handle.tx.send(Err(error.clone()));
        }
    }
    inner.progress.notify_waiters();
}

/// InitProducerId from any broker, retried until the delivery timeout.
async fn init_producer_id(inner: &Inner) -> Result<(i64, i16), ProduceError> {
    let cfg = &inner.config;
    let deadline = Instant::now() + Duration::from_millis(cfg.delivery_timeout_ms);
    let backoff = retry_backoff(cfg);
    let mut attempts = 0;
    loop {
        attempts += 1;
        let mut last_error = String::new();
        for addr in &cfg.bootstrap_brokers {
            let mut c = match inner.brokers.client_for(addr) {
                Ok(c) => c,
                Err(e) => {
                    last_error = e;
                    continue;
                }
            };
            match c
                .init_producer_id(InitProducerIdRequest {
                    transactional_id: String::new(),
                    transaction_timeout_ms: 0,
                    producer_id: -1,
                    producer_epoch: -1,
                })
                .await
            {
                Err(status) => {
                    inner.brokers.forget(addr);
                    last_error = status_line(addr, Api::Broker, &status);
                }
                Ok(r) => {
                    let r = r.into_inner();
                    match ErrorCode::from_proto(r.error.as_ref()) {
                        Ok(ErrorCode::None) => {
                            return Ok((r.producer_id, r.producer_epoch as i16));
                        }
                        Ok(code) if code.retriable() => {
                            last_error = format!("{addr}: InitProducerId: {code}");
                        }
                        Ok(code) => {
                            return Err(ProduceError::InitProducerId {
                                code,
                                message: r.error.map(|e| e.message).unwrap_or_default(),
                            });
                        }
                        Err(e) => return Err(ProduceError::Protocol(e.to_string())),
                    }
                }
            }
        }
        let remaining = deadline.saturating_duration_since(Instant::now());
        let Some(pause) = pause_within(backoff.next(attempts - 1), remaining) else {
            return Err(ProduceError::Timeout {
                topic: String::new(),
                partition: -1,
                attempts,
                last_error,
            });
        };
        tokio::time::sleep(pause).await;
    }
}

/// What a retriable produce error means for the person waiting, for the retry WARN line.
fn retry_hint(code: ErrorCode) -> &'static str {
    match code {
        ErrorCode::NotEnoughReplicas | ErrorCode::NotEnoughReplicasAfterAppend => {
            " (the ISR is smaller than min.insync.replicas: a replica is down or behind)"
        }
        ErrorCode::NotLeaderOrFollower | ErrorCode::FencedLeaderEpoch => {
            " (the partition's leader moved)"
        }
        ErrorCode::LeaderNotAvailable => " (the partition has no leader right now)",
        _ => "",
    }
}

/// Encodes `batch` once (v2, with producer id/epoch/sequence when idempotent, compressed
/// with `compression`).
fn encode(
    batch: &Batch<Handle>,
    identity: Option<(i64, i16, i32)>,
    compression: CompressionType,
) -> Bytes {
    let mut b = RecordBatchBuilder::new(0)
        .with_capacity(batch.size_bytes)
        .compression(compression);
    if let Some((id, epoch, seq)) = identity {
        b = b.producer(id, epoch, seq);
    }
    for r in &batch.records {
        b.append(r.timestamp_ms, r.key.as_deref(), Some(&r.value), &[]);
    }
    b.build().into_bytes()
}

/// One attempt's outcome.
enum Attempt {
    /// The base offset (-1 with acks=0).
    Done(i64),
    /// Retry after backoff; the Kafka code if the broker answered with one.
    Retry(Option<ErrorCode>, String),
    /// The leader moved and the answer named the new one (KIP-951), now cached: retry at
    /// once.
    Redirected(ErrorCode),
    /// Give up now.
    Fail(ProduceError),
}

/// Waits until every batch of `tp` sent before `ticket` is resolved (or `deadline`):
/// returns the position then (`Behind` only when the deadline came first) and whether it
/// had to wait.
async fn wait_for_head(
    inner: &Inner,
    tp: &TopicPartition,
    ticket: u64,
    deadline: Instant,
) -> (Position, bool) {
    let mut waited = false;
    loop {
        let progress = inner.progress.notified();
        tokio::pin!(progress);
        progress.as_mut().enable();
        let position = inner.state.lock().unwrap().pipelines.position(tp, ticket);
        if position != Position::Behind {
            return (position, waited);
        }
        waited = true;
        if tokio::time::timeout_at(deadline.into(), progress)
            .await
            .is_err()
        {
            return (Position::Behind, waited);
        }
    }
}

/// Sends one sealed batch (`ticket` in its partition's [`pipeline`]) until it succeeds, fails
/// for good, or the delivery timeout ends.
async fn send_batch(
    inner: Arc<Inner>,
    tp: TopicPartition,
    batch: Batch<Handle>,
    identity: Option<(i64, i16, i32)>,
    ticket: u64,
) {
    let cfg = &inner.config;
    let records = encode(&batch, identity, cfg.compression);
    let deadline = batch.created + Duration::from_millis(cfg.delivery_timeout_ms);
    let backoff = retry_backoff(cfg);
    let mut attempts = 0u32;
    let mut warned: Option<ErrorCode> = None;
    let outcome = loop {
        attempts += 1;
        let head_at_send =
            inner.state.lock().unwrap().pipelines.position(&tp, ticket) == Position::Head;
        let mut redirected = false;
        let (code, last_error) = match attempt(&inner, &tp, records.clone()).await {
            Attempt::Done(base) => break Ok(base),
            Attempt::Redirected(code) => {
                redirected = true;
                (Some(code), code.to_string())
            }
            // Sent while an earlier batch was unresolved: that one may simply not be written
            // yet (gRPC runs requests in any order, or it is being retried). Not the broker's
            // last word: resend once it is resolved (pipeline rule 1).
            Attempt::Fail(e)
                if !head_at_send && e.code() == Some(ErrorCode::OutOfOrderSequenceNumber) =>
            {
                (e.code(), e.to_string())
            }
            Attempt::Fail(e) => break Err(e),
            Attempt::Retry(code, msg) => (code, msg),
        };
        inner.state.lock().unwrap().pipelines.retrying(&tp, ticket);
        match wait_for_head(&inner, &tp, ticket, deadline).await {
            (Position::Doomed, _) => {
                break Err(ProduceError::EarlierBatchFailed {
                    topic: tp.0.clone(),
                    partition: tp.1,
                });
            }
            (Position::Behind, _) => {
                break Err(ProduceError::Timeout {
                    topic: tp.0.clone(),
                    partition: tp.1,
                    attempts,
                    last_error,
                });
            }
            // An earlier batch went through meanwhile, this one was refused only for coming
            // first, or the answer named the new leader: resend at once, without a backoff.
            (Position::Head, waited)
                if waited || redirected || code == Some(ErrorCode::OutOfOrderSequenceNumber) =>
            {
                inner.retries.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            (Position::Head, _) => {}
        }
        if let Some(c) = code
            && warned != Some(c)
        {
            // One line per batch and error (Kafka's producer logs each retry at WARN): a
            // produce that waits for the ISR should say so, not stay silent for the whole
            // delivery timeout.
            warned = Some(c);
            tracing::warn!(
                "{}-{}: {c}{}; retrying until the delivery timeout ({} ms after send)",
                tp.0,
                tp.1,
                retry_hint(c),
                cfg.delivery_timeout_ms
            );
        }
        let remaining = deadline.saturating_duration_since(Instant::now());
        let Some(pause) = pause_within(backoff.next(attempts - 1), remaining) else {
            break Err(match code {
                Some(code) => ProduceError::Kafka {
                    topic: tp.0.clone(),
                    partition: tp.1,
                    code,
                    message: String::new(),
                    timed_out: true,
                },
                None => ProduceError::Timeout {
                    topic: tp.0.clone(),
                    partition: tp.1,
                    attempts,
                    last_error,
                },
            });
        };
        inner.retries.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(pause).await;
    };
    let failed = outcome.is_err();
    for (i, r) in batch.records.into_iter().enumerate() {
        let result = match &outcome {
            Ok(base) => Ok(RecordMetadata {
                topic: tp.0.clone(),
                partition: tp.1,
                offset: if *base < 0 { -1 } else { base + i as i64 },
                timestamp_ms: r.timestamp_ms,
            }),
            Err(e) => Err(e.clone()),
        };
        let _ = r.handle.tx.send(result);
    }
    {
        let mut s = inner.state.lock().unwrap();
        s.pipelines.finish(&tp, ticket, !failed);
        if let (true, Some((id, _, _))) = (failed, identity)
            && s.sequences.as_ref().is_some_and(|q| q.producer_id == id)
        {
            // The outcome of this batch is unknown: later batches of this partition would
            // leave a sequence gap. Start over with a fresh producer id (KIP-360), once.
            s.sequences = None;
        }
    }
    inner.wake.notify_one();
    inner.progress.notify_waiters();
}

/// One Produce of `records` to the current leader of `tp`.
async fn attempt(inner: &Inner, tp: &TopicPartition, records: Bytes) -> Attempt {
    let (topic, partition) = (tp.0.as_str(), tp.1);
    let meta = match inner.brokers.topic(topic).await {
        Ok(m) => m,
        Err(MetadataError::Topic { code, .. }) if !code.retriable() => {
            return Attempt::Fail(ProduceError::Kafka {
                topic: topic.into(),
                partition,
                code,
                message: String::new(),
                timed_out: false,
            });
        }
        Err(MetadataError::Topic { code, .. }) => {
            return Attempt::Retry(Some(code), code.to_string());
        }
        Err(e) => return Attempt::Retry(None, e.to_string()),
    };
    let Some(leader) = meta.partitions.get(partition as usize).copied() else {
        inner.brokers.invalidate(topic);
        return Attempt::Retry(
            Some(ErrorCode::UnknownTopicOrPartition),
            "partition not in metadata".into(),
        );
    };
    let Some((addr, mut client)) = (leader.leader_id >= 0)
        .then(|| inner.brokers.client(leader.leader_id))
        .flatten()
    else {
        inner.brokers.invalidate(topic);
        let known = inner.brokers.known_epoch(topic, partition);
        return Attempt::Retry(
            Some(ErrorCode::LeaderNotAvailable),
            no_leader(topic, partition, leader, known),
        );
    };
    let request = ProduceRequest {
        acks: inner.config.acks.wire(),
        timeout_ms: inner.config.request_timeout_ms.min(i32::MAX as u64) as i32,
        transactional_id: String::new(),
        topics: vec![ProduceTopicData {
            name: topic.into(),
            topic_id: Bytes::new(),
            partitions: vec![ProducePartitionData {
                index: partition,
                records,
                current_leader_epoch: Some(leader.leader_epoch),
            }],
        }],
    };
    let reply = match client.produce(request).await {
        Ok(r) => r.into_inner(),
        Err(status) => {
            inner.brokers.forget(&addr);
            inner.brokers.invalidate(topic);
            return Attempt::Retry(None, status_line(&addr, Api::Broker, &status));
        }
    };
    let p = reply
        .responses
        .iter()
        .filter(|t| t.name == topic)
        .flat_map(|t| &t.partitions)
        .find(|p| p.index == partition);
    let (code, base, message) = match p {
        Some(p) => (
            ErrorCode::from_proto(p.error.as_ref()),
            p.base_offset,
            p.error.as_ref().map(|e| e.message.clone()),
        ),
        None => (
            ErrorCode::from_proto(reply.error.as_ref()),
            -1,
            reply.error.as_ref().map(|e| e.message.clone()),
        ),
    };
    let named_leader = p.and_then(|p| p.current_leader).map(|l| PartitionLeader {
        leader_id: l.leader_id,
        leader_epoch: l.leader_epoch,
    });
    match code {
        Ok(ErrorCode::None) if p.is_some() => Attempt::Done(base),
        Ok(code @ (ErrorCode::NotLeaderOrFollower | ErrorCode::FencedLeaderEpoch))
            if named_leader.is_some_and(|l| inner.brokers.redirect(topic, partition, l)) =>
        {
            Attempt::Redirected(code)
        }
        Ok(ErrorCode::None) => Attempt::Fail(ProduceError::Protocol(format!(
            "no answer for {topic}-{partition}"
        ))),
        Ok(code) if react(Failure::Kafka(code)) != Reaction::Fatal => {
            if react(Failure::Kafka(code)) == Reaction::RefreshAndRetry {
                inner.brokers.invalidate(topic);
            }
            Attempt::Retry(Some(code), code.to_string())
        }
        Ok(code) => Attempt::Fail(ProduceError::Kafka {
            topic: topic.into(),
            partition,
            code,
            message: message.unwrap_or_default(),
            timed_out: false,
        }),
        Err(e) => Attempt::Fail(ProduceError::Protocol(e.to_string())),
    }
}

/// The producer's retry backoff: `retry_backoff_ms` doubling up to `retry_backoff_max_ms`,
/// with ±20% jitter (Kafka's producer, KIP-580).
fn retry_backoff(cfg: &ProducerConfig) -> keel_runtime::Backoff {
    keel_runtime::Backoff::from_millis(cfg.retry_backoff_ms.max(1), cfg.retry_backoff_max_ms.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn delivery_timeout_below_linger_plus_request_is_refused() {
        let mut cfg = ProducerConfig::new(vec!["127.0.0.1:1".into()]);
        cfg.linger_ms = 120_000;
        cfg.request_timeout_ms = 10_000;
        cfg.delivery_timeout_ms = 120_000;
        let e = Producer::new(cfg.clone()).unwrap_err();
        assert_eq!(
            e,
            ProduceError::InvalidArgument(
                "delivery_timeout_ms 120000 must be at least linger_ms 120000 + \
                 request_timeout_ms 10000 (Kafka: delivery.timeout.ms >= linger.ms + \
                 request.timeout.ms)"
                    .into()
            )
        );
        cfg.delivery_timeout_ms = 130_000;
        let p = Producer::new(cfg).expect("exactly linger + request is accepted");
        drop(p);
        assert!(Producer::new(ProducerConfig::new(vec!["127.0.0.1:1".into()])).is_ok());
    }
}
