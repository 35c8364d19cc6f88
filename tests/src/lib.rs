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
//! - [`data`]: record batches and values for produce and fetch, reply-code helpers;
//! - [`http`]: GETs of the `/metrics` and `/health` listeners;
//! - [`wait`]: polling a condition with a deadline (no fixed sleeps as synchronisation).
//!
//! The scenarios are in `tests/tests/`, named for the behaviour they check. The controller's
//! and the client's multi-process harnesses still live next to their crates' tests
//! (`controller/tests/common`, `client/tests/common`; the client's tests may not depend on
//! this crate, which depends on the broker: `scripts/check-deps`).

pub mod api;
pub mod data;
pub mod http;
pub mod inprocess;
pub mod process;
pub mod wait;

pub use api::Endpoints;
pub use inprocess::InProcessCluster;
