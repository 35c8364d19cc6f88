//! Broker metrics and readiness (issue #7), served on `metrics_listener` by
//! `keel-runtime`.
//!
//! Wiring: `main` calls [`start`] before the broker runs (so a taken port fails start-up);
//! the server hands its metadata image and lifecycle status to [`publish`]; a sampler then
//! sets the metadata gauges and the readiness every [`SAMPLE_INTERVAL`].
//!
//! Readiness: registered with the quorum, unfenced (the controller unfences a broker once
//! its applied metadata reached its registration, so unfenced implies caught up) and not in
//! a controlled shutdown.
//!
//! Data-plane metrics ([`RESERVED`]) are named and described here; the replica manager
//! records them ([`crate::replica_manager::metrics`]).

use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use keel_metadata_log::MetadataImage;
use keel_runtime::{EndpointError, MetricDef, MetricKind, MetricsServer, Readiness};
use metrics::Unit;
use tokio::sync::watch;

use crate::lifecycle::LifecycleStatus;

/// How often the gauges and readiness are refreshed.
pub const SAMPLE_INTERVAL: Duration = Duration::from_millis(500);

/// Offset of the last metadata entry applied to the local image.
pub const METADATA_LAST_APPLIED_OFFSET: &str = "keel_broker_metadata_last_applied_offset";
/// Time since the local image last advanced.
pub const METADATA_LAST_APPLIED_AGE: &str = "keel_broker_metadata_last_applied_age_ms";
/// 1 while the controller reports this broker fenced (or it is not registered).
pub const FENCED: &str = "keel_broker_fenced";
/// Metadata propagation: from an entry's append by the active controller to its changes
/// applied here.
pub const METADATA_APPLY_LAG: &str = "keel_broker_metadata_apply_lag_seconds";
/// Metadata propagation from the commit: from the active controller's commit of an entry to
/// its changes applied here.
pub const METADATA_COMMIT_LAG: &str = "keel_broker_metadata_commit_lag_seconds";

/// Metrics this module records.
pub const DEFS: &[MetricDef] = &[
    MetricDef::new(
        METADATA_LAST_APPLIED_OFFSET,
        MetricKind::Gauge,
        None,
        "Metadata offset of the last entry applied to this broker's image",
        "kafka.server:type=broker-metadata-metrics,name=last-applied-record-offset",
    ),
    MetricDef::new(
        METADATA_LAST_APPLIED_AGE,
        MetricKind::Gauge,
        Some(Unit::Milliseconds),
        "Time since this broker's metadata image last advanced, ms; the active controller writes a NoOpRecord every metadata_max_idle_interval_ms (500), so a connected broker stays near that (an upper bound of Kafka's lag, which uses record timestamps)",
        "kafka.server:type=broker-metadata-metrics,name=last-applied-record-lag-ms",
    ),
    MetricDef::new(
        METADATA_COMMIT_LAG,
        MetricKind::Histogram,
        Some(Unit::Seconds),
        "Metadata propagation from the commit, s: from the active controller learning that an entry is committed (a majority of the controllers hold it) until this broker built the image holding it and its replica manager applied the local changes; one sample per image built while following the log live from the active controller (a follower controller does not send the commit time), none while catching up. The append-to-applied lag minus the controllers' replication and commit. Compares two machines' clocks when controller and broker run apart",
        "kafka.server:type=broker-metadata-metrics,name=last-applied-record-lag-ms",
    ),
    MetricDef::new(
        METADATA_APPLY_LAG,
        MetricKind::Histogram,
        Some(Unit::Seconds),
        "Metadata propagation, s: from the active controller's append of an entry (its wall clock when it proposed the entry, before the commit) until this broker built the image holding it and its replica manager applied the local changes (leadership, ISR, new partitions); one sample per image built while following the log live (caught up to the commit index), none while catching up. Compares two machines' clocks when controller and broker run apart",
        "kafka.server:type=broker-metadata-metrics,name=last-applied-record-lag-ms",
    ),
    MetricDef::new(
        FENCED,
        MetricKind::Gauge,
        None,
        "1 while this broker is unregistered or fenced by the controller, 0 when unfenced",
        "",
    ),
];

/// Data-plane metrics, recorded by the replica manager and its request handlers
/// ([`crate::replica_manager::metrics`]).
pub const RESERVED: &[MetricDef] = &[
    MetricDef::new(
        "keel_broker_under_replicated_partitions",
        MetricKind::Gauge,
        None,
        "Partitions led here whose ISR is smaller than their replica set",
        "kafka.server:type=ReplicaManager,name=UnderReplicatedPartitions",
    ),
    MetricDef::new(
        "keel_broker_under_min_isr_partitions",
        MetricKind::Gauge,
        None,
        "Partitions led here whose ISR is smaller than min.insync.replicas",
        "kafka.server:type=ReplicaManager,name=UnderMinIsrPartitionCount",
    ),
    MetricDef::new(
        "keel_broker_at_min_isr_partitions",
        MetricKind::Gauge,
        None,
        "Partitions led here whose ISR size equals min.insync.replicas",
        "kafka.server:type=ReplicaManager,name=AtMinIsrPartitionCount",
    ),
    MetricDef::new(
        "keel_broker_isr_shrinks_total",
        MetricKind::Counter,
        None,
        "ISR shrinks started by the leader for partitions led here",
        "kafka.server:type=ReplicaManager,name=IsrShrinksPerSec",
    ),
    MetricDef::new(
        "keel_broker_isr_expands_total",
        MetricKind::Counter,
        None,
        "ISR expansions started by the leader for partitions led here",
        "kafka.server:type=ReplicaManager,name=IsrExpandsPerSec",
    ),
    MetricDef::new(
        "keel_broker_failed_isr_updates_total",
        MetricKind::Counter,
        None,
        "AlterPartition requests refused by the controller",
        "kafka.server:type=ReplicaManager,name=FailedIsrUpdatesPerSec",
    ),
    MetricDef::new(
        "keel_broker_leader_count",
        MetricKind::Gauge,
        None,
        "Partitions this broker leads",
        "kafka.server:type=ReplicaManager,name=LeaderCount",
    ),
    MetricDef::new(
        "keel_broker_partition_count",
        MetricKind::Gauge,
        None,
        "Partitions with a replica on this broker",
        "kafka.server:type=ReplicaManager,name=PartitionCount",
    ),
    MetricDef::new(
        "keel_broker_produce_requests_total",
        MetricKind::Counter,
        None,
        "Produce requests received",
        "kafka.network:type=RequestMetrics,name=RequestsPerSec,request=Produce",
    ),
    MetricDef::new(
        "keel_broker_fetch_requests_total",
        MetricKind::Counter,
        None,
        "Fetch requests received (label `source` = consumer or follower)",
        "kafka.network:type=RequestMetrics,name=RequestsPerSec,request=Fetch|FetchFollower",
    ),
    MetricDef::new(
        crate::replica_manager::metrics::FETCH_REQUESTS_IN_FLIGHT,
        MetricKind::Gauge,
        None,
        "Fetch requests received and not yet answered, long polls waiting for data included (label `source`)",
        "kafka.server:type=DelayedOperationPurgatory,name=PurgatorySize,delayedOperation=Fetch",
    ),
    MetricDef::new(
        "keel_broker_produce_request_duration_seconds",
        MetricKind::Histogram,
        Some(Unit::Seconds),
        "Produce request time from receipt to response (acks wait included)",
        "kafka.network:type=RequestMetrics,name=TotalTimeMs,request=Produce",
    ),
    MetricDef::new(
        "keel_broker_fetch_request_duration_seconds",
        MetricKind::Histogram,
        Some(Unit::Seconds),
        "Fetch request time from receipt to response (label `source`)",
        "kafka.network:type=RequestMetrics,name=TotalTimeMs,request=Fetch|FetchFollower",
    ),
    MetricDef::new(
        "keel_broker_bytes_in_total",
        MetricKind::Counter,
        Some(Unit::Bytes),
        "Record batch bytes appended from producers",
        "kafka.server:type=BrokerTopicMetrics,name=BytesInPerSec",
    ),
    MetricDef::new(
        "keel_broker_bytes_out_total",
        MetricKind::Counter,
        Some(Unit::Bytes),
        "Record batch bytes sent to consumers and followers",
        "kafka.server:type=BrokerTopicMetrics,name=BytesOutPerSec",
    ),
    MetricDef::new(
        "keel_broker_replica_fetcher_max_lag",
        MetricKind::Gauge,
        None,
        "Largest lag, in messages (offsets), of this broker's follower replicas behind their leaders",
        "kafka.server:type=ReplicaFetcherManager,name=MaxLag,clientId=Replica",
    ),
    MetricDef::new(
        "keel_broker_log_flush_duration_seconds",
        MetricKind::Histogram,
        Some(Unit::Seconds),
        "Time of one partition log flush (fsync)",
        "kafka.log:type=LogFlushStats,name=LogFlushRateAndTimeMs",
    ),
    MetricDef::new(
        "keel_broker_group_coordinator_groups",
        MetricKind::Gauge,
        None,
        "Consumer groups this broker coordinates, by `state` (Empty, PreparingRebalance, CompletingRebalance, Stable)",
        "kafka.coordinator.group:type=GroupMetadataManager,name=NumGroups{state}",
    ),
    MetricDef::new(
        "keel_broker_group_coordinator_offsets",
        MetricKind::Gauge,
        None,
        "Committed offsets held by the groups this broker coordinates",
        "kafka.coordinator.group:type=GroupMetadataManager,name=NumOffsets",
    ),
    MetricDef::new(
        "keel_broker_group_coordinator_rebalances_total",
        MetricKind::Counter,
        None,
        "Completed joins (generations started) of the groups coordinated here",
        "group-coordinator-metrics:group-completed-rebalance-count",
    ),
    MetricDef::new(
        "keel_broker_group_coordinator_offset_commits_total",
        MetricKind::Counter,
        None,
        "Offsets committed (acknowledged by the ISR of `__consumer_offsets`) through this coordinator",
        "group-coordinator-metrics:offset-commit-count",
    ),
    MetricDef::new(
        crate::group::lag::CONSUMER_LAG,
        MetricKind::Gauge,
        None,
        "Per group coordinated here (label `group`, at most 1000 groups): the sum over its committed partitions of high watermark minus committed offset, sampled every 10 s; 0 once the group is coordinated elsewhere",
        "kafka_exporter: kafka_consumergroup_lag_sum",
    ),
    MetricDef::new(
        "keel_broker_log_cleaner_runs_total",
        MetricKind::Counter,
        None,
        "Completed log cleaner (compaction) passes",
        "",
    ),
    MetricDef::new(
        "keel_broker_log_cleaner_bytes_read_total",
        MetricKind::Counter,
        Some(Unit::Bytes),
        "Segment bytes the log cleaner read (offset map and rewrite)",
        "kafka.log:type=LogCleaner,name=cleaner-recopy-percent (with bytes written)",
    ),
    MetricDef::new(
        "keel_broker_log_cleaner_bytes_written_total",
        MetricKind::Counter,
        Some(Unit::Bytes),
        "Bytes the log cleaner wrote to cleaned segments",
        "kafka.log:type=LogCleaner,name=cleaner-recopy-percent (with bytes read)",
    ),
    MetricDef::new(
        "keel_broker_log_cleaner_records_removed_total",
        MetricKind::Counter,
        None,
        "Records the log cleaner removed (superseded values, expired tombstones)",
        "",
    ),
    MetricDef::new(
        "keel_broker_log_cleaner_pass_duration_seconds",
        MetricKind::Histogram,
        Some(Unit::Seconds),
        "Time of one log cleaner pass",
        "kafka.log:type=LogCleaner,name=max-clean-time-secs",
    ),
    MetricDef::new(
        "keel_broker_log_cleaner_max_dirty_percent",
        MetricKind::Gauge,
        None,
        "Highest dirty ratio of a compacted log here, percent",
        "kafka.log:type=LogCleanerManager,name=max-dirty-percent",
    ),
    MetricDef::new(
        "keel_broker_log_cleaner_time_since_last_run_ms",
        MetricKind::Gauge,
        Some(Unit::Milliseconds),
        "Time since the last completed log cleaner pass (since start before the first), ms",
        "kafka.log:type=LogCleanerManager,name=time-since-last-run-ms",
    ),
];

/// The broker state the sampler reads.
#[derive(Debug, Clone)]
struct Sources {
    images: watch::Receiver<MetadataImage>,
    status: watch::Receiver<LifecycleStatus>,
}

/// Filled by [`publish`] once the server has its image and status; read by the sampler.
static SOURCES: OnceLock<watch::Sender<Option<Sources>>> = OnceLock::new();

fn sources() -> &'static watch::Sender<Option<Sources>> {
    SOURCES.get_or_init(|| watch::channel(None).0)
}

/// Called by the broker server once: the local metadata image and the lifecycle status that
/// metrics and readiness are computed from. Without [`start`] it only stores the receivers.
pub fn publish(images: watch::Receiver<MetadataImage>, status: watch::Receiver<LifecycleStatus>) {
    sources().send_replace(Some(Sources { images, status }));
}

/// Broker readiness from its lifecycle status and local image (see the module doc).
pub fn readiness(broker_id: i32, status: &LifecycleStatus, image: &MetadataImage) -> Readiness {
    let applied = image.provenance().offset;
    if status.broker_epoch < 0 {
        return Readiness::not_ready(format!(
            "broker {broker_id} is not registered with the controller quorum (metadata offset {applied})"
        ));
    }
    if status.in_controlled_shutdown {
        return Readiness::not_ready(format!("broker {broker_id} is in a controlled shutdown"));
    }
    if status.fenced {
        return Readiness::not_ready(format!(
            "broker {broker_id} is fenced: catching up with metadata (applied offset {applied}, registration at {})",
            status.broker_epoch
        ));
    }
    Readiness::ready(format!(
        "broker {broker_id} registered and unfenced; broker epoch {}, metadata offset {applied}, controller {}",
        status.broker_epoch, status.controller_id
    ))
}

/// Binds `metrics_listener`, installs the recorder, describes [`DEFS`] and [`RESERVED`] and
/// starts serving and sampling on the current runtime (for the life of the process).
///
/// Errors: the port cannot be bound (one line naming `metrics_listener`), or another
/// recorder is installed.
pub async fn start(addr: SocketAddr, broker_id: i32) -> Result<SocketAddr, EndpointError> {
    let server = MetricsServer::bind(addr).await?;
    let bound = server.local_addr().unwrap_or(addr);
    let handle = keel_runtime::install_prometheus_recorder()?;
    let ready_rx = start_sampling(broker_id)?;
    server.spawn(handle, ready_rx, std::future::pending());
    tracing::info!(metrics_listener = %bound, "serving /metrics and /health");
    Ok(bound)
}

/// [`start`] without a listener, for a process that serves the metrics of several roles on
/// one listener (the combined `keel-server`, KIP-833): installs the recorder (once per
/// process), describes [`DEFS`] and [`RESERVED`] and starts sampling on the current runtime.
/// Returns the broker's readiness ([`readiness`]), `starting` until [`publish`] is called.
///
/// Errors: another recorder is installed.
pub fn start_sampling(broker_id: i32) -> Result<watch::Receiver<Readiness>, EndpointError> {
    keel_runtime::install_prometheus_recorder()?;
    keel_runtime::describe_all(DEFS);
    keel_runtime::describe_all(RESERVED);
    keel_runtime::zero_counters(DEFS, &[]);
    keel_runtime::zero_counters(RESERVED, &["keel_broker_fetch_requests_total"]);
    for source in ["consumer", "follower"] {
        metrics::counter!("keel_broker_fetch_requests_total", "source" => source).increment(0);
        metrics::gauge!(crate::replica_manager::metrics::FETCH_REQUESTS_IN_FLIGHT, "source" => source)
            .increment(0.0);
    }
    let (ready_tx, ready_rx) = watch::channel(Readiness::not_ready("starting"));
    tokio::spawn(sample(broker_id, ready_tx));
    Ok(ready_rx)
}

/// Refreshes gauges and readiness every [`SAMPLE_INTERVAL`] once [`publish`] was called.
async fn sample(broker_id: i32, ready: watch::Sender<Readiness>) {
    let mut published = sources().subscribe();
    // (The watch guard is a temporary: dropped before the next await.)
    let src = match published.wait_for(Option::is_some).await {
        Ok(guard) => guard.clone(),
        Err(_) => return,
    };
    let Some(src) = src else { return };
    let mut ticker = tokio::time::interval(SAMPLE_INTERVAL);
    let mut last_offset = None;
    let mut advanced_at = Instant::now();
    loop {
        ticker.tick().await;
        let image = src.images.borrow().clone();
        let status = src.status.borrow().clone();
        let offset = image.provenance().offset;
        if last_offset != Some(offset) {
            last_offset = Some(offset);
            advanced_at = Instant::now();
        }
        metrics::gauge!(METADATA_LAST_APPLIED_OFFSET).set(offset as f64);
        metrics::gauge!(METADATA_LAST_APPLIED_AGE).set(advanced_at.elapsed().as_millis() as f64);
        let fenced = status.broker_epoch < 0 || status.fenced;
        metrics::gauge!(FENCED).set(if fenced { 1.0 } else { 0.0 });
        let next = readiness(broker_id, &status, &image);
        ready.send_if_modified(|r| {
            let changed = *r != next;
            *r = next;
            changed
        });
    }
}

/// Records the metadata propagation samples of an entry applied now: [`METADATA_APPLY_LAG`]
/// from `appended_ms`, when the active controller proposed it, and [`METADATA_COMMIT_LAG`]
/// from `committed_ms`, when it learned it committed (both its wall clock, ms since the Unix
/// epoch; `None`: not known, no sample). A negative difference (clocks of two machines
/// apart) counts as 0.
pub fn record_metadata_lags(appended_ms: Option<i64>, committed_ms: Option<i64>) {
    let now_ms = keel_runtime::clock::wall_clock_ms();
    let secs_since = |at_ms: i64| now_ms.saturating_sub(at_ms).max(0) as f64 / 1e3;
    if let Some(at) = appended_ms {
        metrics::histogram!(METADATA_APPLY_LAG).record(secs_since(at));
    }
    if let Some(at) = committed_ms {
        metrics::histogram!(METADATA_COMMIT_LAG).record(secs_since(at));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_rules() {
        let all: Vec<MetricDef> = DEFS.iter().chain(RESERVED).copied().collect();
        keel_runtime::describe::check_names(&all, "keel_broker_").unwrap();
    }

    #[test]
    fn ready_only_when_registered_unfenced_and_not_shutting_down() {
        let image = MetadataImage::empty();
        let mut s = LifecycleStatus::default();
        let r = readiness(4, &s, &image);
        assert!(!r.ready && r.detail.contains("not registered"), "{r:?}");
        s.broker_epoch = 17;
        let r = readiness(4, &s, &image);
        assert!(!r.ready && r.detail.contains("fenced"), "{r:?}");
        s.fenced = false;
        s.controller_id = 2;
        let r = readiness(4, &s, &image);
        assert!(r.ready && r.detail.contains("broker epoch 17"), "{r:?}");
        s.in_controlled_shutdown = true;
        let r = readiness(4, &s, &image);
        assert!(
            !r.ready && r.detail.contains("controlled shutdown"),
            "{r:?}"
        );
    }
}
