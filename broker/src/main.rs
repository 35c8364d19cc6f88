//! `keel-broker`: one broker of a Keel cluster.
//!
//! `keel-broker --config broker.toml` (every key also as `--flag` and `KEEL_*` env var;
//! flag > env > file > default). Prints one line and exits 1 on a bad config or a start-up
//! failure (port in use, unusable log dir, a log dir locked by another process or whose
//! `meta.properties` names another node or cluster, registration refused for good).
//! SIGTERM/SIGINT run a controlled shutdown (bounded by `broker_session_timeout_ms`) and exit
//! 0.
//!
//! The allocator is glibc's, not the controller's mimalloc: with mimalloc the brokers used
//! 10-20 % more CPU per MiB replicated and the produce p99 rose (`cargo bench -p keel-broker
//! --bench replication`, `KEEL_BENCH_RATES=50,100`, column CPU ms/MiB: 21.0-22.9 vs
//! 18.0-19.2 at 50 MiB/s, two runs each). Not profiled further; the data path allocates a
//! buffer of 64 KiB to MiBs per request, unlike the controller's small records.

use std::process::ExitCode;

use keel_broker::config::BrokerConfig;
use keel_broker::{observe, server};
use keel_runtime::process::shutdown_signal;
use keel_runtime::settings::Binary;

fn main() -> ExitCode {
    keel_runtime::process::main(
        Binary::Broker,
        BrokerConfig::from_settings,
        |config| config.log_format,
        |config| async move {
            // The metrics listener is bound first: a taken port fails start-up at once.
            if let Some(addr) = config.metrics_listener {
                observe::start(addr, config.node_id)
                    .await
                    .map_err(|e| e.to_string())?;
            }
            server::run(config, shutdown_signal())
                .await
                .map_err(|e| e.to_string())
        },
    )
}
