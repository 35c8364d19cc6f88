//! `keel-tests`: the shared test harness of DESIGN §8 and the scenarios built on it.
//!
//! - [`inprocess`]: an in-process cluster (controllers and brokers in the test's process,
//!   over real gRPC on listeners bound to port 0, data on disk in a temp dir), for scenarios
//!   that need the real servers but not separate processes: it starts in well under a second;
//! - [`api`]: what a test does against any cluster through its addresses (create topics,
//!   wait for brokers and leaders, produce, consume, describe), as default methods of
//!   [`api::Endpoints`];
//! - [`data`]: record batches and values for produce and fetch, reply-code helpers;
//! - [`wait`]: polling a condition with a deadline (no fixed sleeps as synchronisation).
//!
//! The multi-process harnesses still live next to their crates' tests (`broker/tests/common`,
//! `controller/tests/common`, `client/tests/common`); they move here scenario by scenario.

pub mod api;
pub mod data;
pub mod inprocess;
pub mod wait;

pub use api::Endpoints;
pub use inprocess::InProcessCluster;
