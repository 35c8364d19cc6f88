//! `keel-broker`: one broker of a Keel cluster.
//!
//! `keel-broker --config broker.toml` (every key also as `--flag` and `KEEL_*` env var;
//! flag > env > file > default). Prints one line and exits 1 on a bad config or a start-up
//! failure (port in use, unusable log dir, a log dir locked by another process or whose
//! `meta.properties` names another node or cluster, registration refused for good).
//! SIGTERM/SIGINT run a controlled shutdown (bounded by `broker_session_timeout_ms`) and exit
//! 0.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use keel_broker::config::{BrokerConfig, ConfigError, RawConfig};
use keel_broker::{observe, server};

/// Command line of `keel-broker`.
#[derive(Debug, Parser)]
#[command(name = "keel-broker", version, about = "Keel broker")]
struct Args {
    /// TOML configuration file (keys: see the README's configuration table).
    #[arg(long, value_name = "FILE", env = "KEEL_CONFIG")]
    config: Option<PathBuf>,
    /// This broker's id (Kafka: node.id).
    #[arg(long, env = "KEEL_NODE_ID")]
    node_id: Option<i32>,
    /// Controller voters, `1@host:port,2@host:port,3@host:port` (Kafka:
    /// controller.quorum.voters).
    #[arg(long, env = "KEEL_CONTROLLER_QUORUM_VOTERS")]
    controller_quorum_voters: Option<String>,
    /// Bind address `ip:port` (Kafka: listeners).
    #[arg(long, env = "KEEL_LISTENERS")]
    listeners: Option<String>,
    /// Address clients and replicas use, `host:port` (Kafka: advertised.listeners).
    #[arg(long, env = "KEEL_ADVERTISED_LISTENERS")]
    advertised_listeners: Option<String>,
    /// The data directory (Kafka: log.dirs; exactly one, several are refused).
    #[arg(long, env = "KEEL_LOG_DIRS")]
    log_dirs: Option<String>,
    /// Rack (Kafka: broker.rack).
    #[arg(long, env = "KEEL_RACK")]
    rack: Option<String>,
    /// Heartbeat interval, ms (Kafka: broker.heartbeat.interval.ms).
    #[arg(long, env = "KEEL_BROKER_HEARTBEAT_INTERVAL_MS")]
    broker_heartbeat_interval_ms: Option<u64>,
    /// Session timeout, ms (Kafka: broker.session.timeout.ms).
    #[arg(long, env = "KEEL_BROKER_SESSION_TIMEOUT_MS")]
    broker_session_timeout_ms: Option<u64>,
    /// ISR lag bound, ms (Kafka: replica.lag.time.max.ms).
    #[arg(long, env = "KEEL_REPLICA_LAG_TIME_MAX_MS")]
    replica_lag_time_max_ms: Option<u64>,
    /// Cluster default min.insync.replicas (Kafka: min.insync.replicas).
    #[arg(long, env = "KEEL_MIN_INSYNC_REPLICAS")]
    min_insync_replicas: Option<u32>,
    /// Local metadata snapshot interval, ms.
    #[arg(long, env = "KEEL_METADATA_SNAPSHOT_INTERVAL_MS")]
    metadata_snapshot_interval_ms: Option<u64>,
    /// Default segment size, bytes (Kafka: log.segment.bytes).
    #[arg(long, env = "KEEL_LOG_SEGMENT_BYTES")]
    log_segment_bytes: Option<u64>,
    /// Default retention, ms; -1 = forever (Kafka: log.retention.ms).
    #[arg(long, env = "KEEL_LOG_RETENTION_MS", allow_hyphen_values = true)]
    log_retention_ms: Option<i64>,
    /// Default retention per partition, bytes; -1 = unbounded (Kafka: log.retention.bytes).
    #[arg(long, env = "KEEL_LOG_RETENTION_BYTES", allow_hyphen_values = true)]
    log_retention_bytes: Option<i64>,
    /// fdatasync after this many records; unset = never force (Kafka:
    /// log.flush.interval.messages).
    #[arg(long, env = "KEEL_LOG_FLUSH_INTERVAL_MESSAGES")]
    log_flush_interval_messages: Option<u64>,
    /// fdatasync a log whose last flush is this old, ms; unset = never (Kafka:
    /// log.flush.interval.ms).
    #[arg(long, env = "KEEL_LOG_FLUSH_INTERVAL_MS")]
    log_flush_interval_ms: Option<u64>,
    /// Bytes of each partition's newest data kept in the page cache; older written data is
    /// dropped from it; 0 = keep every written page (Kafka's behaviour). Default 32 MiB.
    #[arg(long, env = "KEEL_LOG_DROP_CACHE_BEHIND_BYTES")]
    log_drop_cache_behind_bytes: Option<u64>,
    /// Optional offset-lag bound of ISR membership (Kafka's removed replica.lag.max.messages).
    #[arg(long, env = "KEEL_REPLICA_LAG_MAX_MESSAGES")]
    replica_lag_max_messages: Option<u64>,
    /// Follower fetch long-poll wait, ms (Kafka: replica.fetch.wait.max.ms).
    #[arg(long, env = "KEEL_REPLICA_FETCH_WAIT_MAX_MS")]
    replica_fetch_wait_max_ms: Option<u64>,
    /// HTTP listener for /metrics and /health, `ip:port` (unset = none).
    #[arg(long, env = "KEEL_METRICS_LISTENER")]
    metrics_listener: Option<String>,
    /// Log format: `text` (default) or `json`. The filter comes from `KEEL_LOG`.
    #[arg(long, env = "KEEL_LOG_FORMAT")]
    log_format: Option<String>,
}

impl Args {
    fn into_config(self) -> Result<BrokerConfig, ConfigError> {
        let mut raw = match &self.config {
            Some(path) => RawConfig::from_file(path)?,
            None => RawConfig::default(),
        };
        raw.overlay(RawConfig {
            node_id: self.node_id,
            controller_quorum_voters: self.controller_quorum_voters,
            listeners: self.listeners,
            advertised_listeners: self.advertised_listeners,
            log_dirs: self.log_dirs,
            rack: self.rack,
            broker_heartbeat_interval_ms: self.broker_heartbeat_interval_ms,
            broker_session_timeout_ms: self.broker_session_timeout_ms,
            replica_lag_time_max_ms: self.replica_lag_time_max_ms,
            min_insync_replicas: self.min_insync_replicas,
            metadata_snapshot_interval_ms: self.metadata_snapshot_interval_ms,
            log_segment_bytes: self.log_segment_bytes,
            log_retention_ms: self.log_retention_ms,
            log_retention_bytes: self.log_retention_bytes,
            log_flush_interval_messages: self.log_flush_interval_messages,
            log_flush_interval_ms: self.log_flush_interval_ms,
            log_drop_cache_behind_bytes: self.log_drop_cache_behind_bytes,
            replica_lag_max_messages: self.replica_lag_max_messages,
            replica_fetch_wait_max_ms: self.replica_fetch_wait_max_ms,
            metrics_listener: self.metrics_listener,
            log_format: self.log_format,
        });
        raw.resolve()
    }
}

fn main() -> ExitCode {
    let config = match keel_observability::cli::parse_or_exit::<Args>("keel-broker").into_config() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("keel-broker: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Err(e) = keel_observability::init_logging(config.log_format, "info") {
        eprintln!("keel-broker: {e}");
        return ExitCode::FAILURE;
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("keel-broker: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let run = async {
        // The metrics listener is bound first: a taken port fails start-up at once.
        if let Some(addr) = config.metrics_listener {
            observe::start(addr, config.node_id)
                .await
                .map_err(|e| e.to_string())?;
        }
        server::run(config, shutdown_signal())
            .await
            .map_err(|e| e.to_string())
    };
    match rt.block_on(run) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("keel-broker: {e}");
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
        _ = term.recv() => tracing::info!("SIGTERM: controlled shutdown"),
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: controlled shutdown"),
    }
}
