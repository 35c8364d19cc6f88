//! `keel-controller`: one voter of the metadata quorum.
//!
//! `keel-controller --config controller.toml` (every key also as `--flag` and `KEEL_*` env
//! var; flag > env > file > default). Prints one line and exits 1 on a bad config, a
//! start-up failure (port in use, unreadable log dir, a `metadata_log_dir` that belongs to
//! another node or voter set, or holds only part of a node's state), or when Raft stops on a
//! fatal error while running. SIGTERM/SIGINT shut down cleanly.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use keel_controller::config::{ControllerConfig, RawConfig};
use keel_controller::server;

/// mimalloc instead of glibc malloc: under metadata write load glibc's malloc and free were
/// 15-20% of the controller's CPU; with mimalloc the active controller used ~25% less CPU per
/// AlterPartition request (`cargo bench -p keel-controller --bench quorum`, column CPU us/req).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Command line of `keel-controller`.
#[derive(Debug, Parser)]
#[command(
    name = "keel-controller",
    version,
    about = "Keel controller: one voter of the metadata quorum"
)]
struct Args {
    /// TOML configuration file (keys: see the README's configuration table).
    #[arg(long, value_name = "FILE", env = "KEEL_CONFIG")]
    config: Option<PathBuf>,
    /// This controller's id (Kafka: node.id).
    #[arg(long, env = "KEEL_NODE_ID")]
    node_id: Option<u64>,
    /// Static voters, `1@host:port,2@host:port,3@host:port` (Kafka: controller.quorum.voters).
    #[arg(long, env = "KEEL_CONTROLLER_QUORUM_VOTERS")]
    controller_quorum_voters: Option<String>,
    /// Bind address `ip:port` (Kafka: listeners).
    #[arg(long, env = "KEEL_LISTENERS")]
    listeners: Option<String>,
    /// Address peers and clients use, `host:port` (Kafka: advertised.listeners).
    #[arg(long, env = "KEEL_ADVERTISED_LISTENERS")]
    advertised_listeners: Option<String>,
    /// Raft log and snapshot directory (Kafka: metadata.log.dir).
    #[arg(long, env = "KEEL_METADATA_LOG_DIR")]
    metadata_log_dir: Option<PathBuf>,
    /// Expected broker heartbeat interval, ms (Kafka: broker.heartbeat.interval.ms).
    #[arg(long, env = "KEEL_BROKER_HEARTBEAT_INTERVAL_MS")]
    broker_heartbeat_interval_ms: Option<u64>,
    /// Broker session timeout, ms (Kafka: broker.session.timeout.ms).
    #[arg(long, env = "KEEL_BROKER_SESSION_TIMEOUT_MS")]
    broker_session_timeout_ms: Option<u64>,
    /// Minimum Raft election timeout, ms.
    #[arg(long, env = "KEEL_ELECTION_TIMEOUT_MIN_MS")]
    election_timeout_min_ms: Option<u64>,
    /// Maximum Raft election timeout, ms.
    #[arg(long, env = "KEEL_ELECTION_TIMEOUT_MAX_MS")]
    election_timeout_max_ms: Option<u64>,
    /// Raft leader heartbeat interval, ms.
    #[arg(long, env = "KEEL_RAFT_HEARTBEAT_INTERVAL_MS")]
    raft_heartbeat_interval_ms: Option<u64>,
    /// Snapshot after this many entries.
    #[arg(long, env = "KEEL_METADATA_SNAPSHOT_MAX_ENTRIES")]
    metadata_snapshot_max_entries: Option<u64>,
    /// Raft log segment size, bytes (Kafka: metadata.log.segment.bytes).
    #[arg(long, env = "KEEL_METADATA_LOG_SEGMENT_BYTES")]
    metadata_log_segment_bytes: Option<u64>,
    /// NoOpRecord interval, ms (Kafka: metadata.max.idle.interval.ms).
    #[arg(long, env = "KEEL_METADATA_MAX_IDLE_INTERVAL_MS")]
    metadata_max_idle_interval_ms: Option<u64>,
    /// Move leadership back to preferred replicas (Kafka: auto.leader.rebalance.enable).
    #[arg(long, env = "KEEL_AUTO_LEADER_REBALANCE_ENABLE")]
    auto_leader_rebalance_enable: Option<bool>,
    /// Rebalance check interval, seconds (Kafka: leader.imbalance.check.interval.seconds).
    #[arg(long, env = "KEEL_LEADER_IMBALANCE_CHECK_INTERVAL_SECONDS")]
    leader_imbalance_check_interval_seconds: Option<u64>,
    /// Partitions of a topic created without a count (Kafka: num.partitions).
    #[arg(long, env = "KEEL_NUM_PARTITIONS", allow_negative_numbers = true)]
    num_partitions: Option<i32>,
    /// Replication factor of a topic created without one (Kafka: default.replication.factor).
    #[arg(
        long,
        env = "KEEL_DEFAULT_REPLICATION_FACTOR",
        allow_negative_numbers = true
    )]
    default_replication_factor: Option<i32>,
    /// HTTP listener for /metrics and /health, `ip:port` (unset = none).
    #[arg(long, env = "KEEL_METRICS_LISTENER")]
    metrics_listener: Option<String>,
    /// Log format: `text` (default) or `json`. The filter comes from `KEEL_LOG`.
    #[arg(long, env = "KEEL_LOG_FORMAT")]
    log_format: Option<String>,
}

impl Args {
    fn into_config(self) -> Result<ControllerConfig, keel_controller::config::ConfigError> {
        let mut raw = match &self.config {
            Some(path) => RawConfig::from_file(path)?,
            None => RawConfig::default(),
        };
        raw.overlay(RawConfig {
            node_id: self.node_id,
            controller_quorum_voters: self.controller_quorum_voters,
            listeners: self.listeners,
            advertised_listeners: self.advertised_listeners,
            metadata_log_dir: self.metadata_log_dir,
            broker_heartbeat_interval_ms: self.broker_heartbeat_interval_ms,
            broker_session_timeout_ms: self.broker_session_timeout_ms,
            election_timeout_min_ms: self.election_timeout_min_ms,
            election_timeout_max_ms: self.election_timeout_max_ms,
            raft_heartbeat_interval_ms: self.raft_heartbeat_interval_ms,
            metadata_snapshot_max_entries: self.metadata_snapshot_max_entries,
            metadata_log_segment_bytes: self.metadata_log_segment_bytes,
            metadata_max_idle_interval_ms: self.metadata_max_idle_interval_ms,
            auto_leader_rebalance_enable: self.auto_leader_rebalance_enable,
            leader_imbalance_check_interval_seconds: self.leader_imbalance_check_interval_seconds,
            num_partitions: self.num_partitions,
            default_replication_factor: self.default_replication_factor,
            metrics_listener: self.metrics_listener,
            log_format: self.log_format,
        });
        raw.resolve()
    }
}

fn main() -> ExitCode {
    let config =
        match keel_observability::cli::parse_or_exit::<Args>("keel-controller").into_config() {
            Ok(c) => c,
            Err(e) => {
                eprintln!("keel-controller: {e}");
                return ExitCode::FAILURE;
            }
        };
    if let Err(e) = keel_observability::init_logging(config.log_format, "info,openraft=warn") {
        eprintln!("keel-controller: {e}");
        return ExitCode::FAILURE;
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("keel-controller: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(server::run(config, shutdown_signal())) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("keel-controller: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Resolves on SIGTERM or SIGINT.
async fn shutdown_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "cannot listen for SIGTERM; use SIGINT");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: shutting down"),
    }
}
