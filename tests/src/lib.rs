//! `keel-tests`: the shared test harness of DESIGN §8 and the scenarios built on it.
//!
//! - [`inprocess`]: an in-process cluster (controllers and brokers in the test's process,
//!   over real gRPC on listeners bound to port 0, data on disk in a temp dir), for scenarios
//!   that need the real servers but not separate processes: it starts in well under a second;
//! - [`api`]: what a test does against any cluster through its addresses (create topics,
//!   wait for brokers and leaders, produce, consume, describe), as default methods of
//!   [`api::Endpoints`];
//! - [`process`]: multi-process clusters of the real binaries (kill -9, signals, restarts,
//!   logs per process), for scenarios that need separate processes;
//! - [`quorum`]: quorums of real controller processes with fake brokers, their Raft links
//!   optionally through fault proxies, for the controller's scenarios;
//! - [`node`]: one node process (start, kill, SIGTERM, pause/resume, its log), shared by
//!   [`process`] and [`quorum`];
//! - [`fault`]: TCP fault proxies per directed link that cut, drop or delay traffic;
//! - [`rng`]: seeded randomness whose seed is printed, replayable with `KEEL_TEST_SEED`;
//! - [`stats`]: percentiles and latency summaries for benches and scenarios;
//! - [`env`]: settings from environment variables, refused with a clear message when bad;
//! - [`data`]: record batches and values for produce and fetch, reply-code helpers;
//! - [`http`]: GETs of the `/metrics` and `/health` listeners;
//! - [`wait`]: polling a condition with a deadline (no fixed sleeps as synchronisation).
//!
//! The scenarios are in `tests/tests/`, named for the behaviour they check. The client's
//! multi-process harness still lives with its tests (`client/tests/common`): the client's
//! tests may not depend on this crate, which depends on the broker (`scripts/check-deps`).

pub mod api;
pub mod data;
pub mod env;
pub mod fault;
pub mod http;
pub mod inprocess;
pub mod kafka;
pub mod node;
pub mod process;
pub mod python;
pub mod quorum;
pub mod rng;
pub mod stats;
pub mod wait;

pub use api::Endpoints;
pub use inprocess::InProcessCluster;
