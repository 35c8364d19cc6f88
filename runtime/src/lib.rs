//! `keel-runtime`: the process plumbing shared by `keel-controller` and `keel-broker` (and,
//! for the settings declaration and the backoff, `keel-client`); named for what it holds
//! since issue #19 (it began as `keel-observability`, issue #7):
//!
//! - [`backoff`]: the one retry backoff with jitter (Kafka `ExponentialBackoff`, KIP-580);
//! - [`settings`]: every configuration key of both binaries, declared once, and the loader
//!   (file -> `KEEL_*` env -> flag) with one set of validation rules;
//! - [`config_file`]: reading the TOML config file, with one-line errors that name the key;
//! - [`cli`]: command-line parsing with one-line errors;
//! - [`process`]: the `main` of both binaries (runtime, logging, exit codes, shutdown signal);
//! - [`logging`]: the `tracing` subscriber (filter from `KEEL_LOG`, text or JSON lines);
//! - [`metrics_endpoint`]: the Prometheus recorder and the HTTP listener configured by
//!   `metrics_listener`, serving `/metrics`, `/health/live` and `/health/ready`;
//! - [`fs`]: durable replacement of a small file (temp file, fsync, rename, directory fsync);
//! - [`clock`]: the monotonic clock decisions are timed by and the wall clock shown to people;
//! - [`status`]: one line for a failed RPC, with the causes tonic keeps out of the message;
//! - [`tls`]: TLS on gRPC listeners and channels (rustls), reloadable certificates;
//! - [`principal`]: principals of client certificates (Kafka's mapping rules) and node identity;
//! - [`describe`]: metric definitions (name, kind, unit, help, Kafka counterpart) that each
//!   process registers at start-up.
//!
//! Metric names follow Prometheus conventions (`snake_case`, unit suffix, `_total` for
//! counters) with the prefix `keel_controller_` or `keel_broker_`; each definition names the
//! Kafka JMX metric it corresponds to.

pub mod backoff;
pub mod cli;
pub mod clock;
pub mod config_file;
pub mod describe;
pub mod fs;
pub mod logging;
pub mod metrics_endpoint;
pub mod principal;
pub mod process;
pub mod settings;
pub mod status;
pub mod tls;

pub use backoff::Backoff;
pub use describe::{MetricDef, MetricKind, describe_all, zero_counters};
pub use logging::{LogFormat, LoggingError, init_logging};
pub use metrics_endpoint::{EndpointError, MetricsServer, Readiness, install_prometheus_recorder};
