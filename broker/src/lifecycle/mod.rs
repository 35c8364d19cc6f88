//! Broker lifecycle with the controller quorum (DESIGN §4/§5; Kafka:
//! `BrokerLifecycleManager`, KIP-631).
//!
//! A broker registers with a new incarnation id on every start and gets a broker epoch (the
//! offset of its RegisterBrokerRecord); it starts fenced and heartbeats every
//! `broker_heartbeat_interval_ms` with its applied metadata offset; the controller unfences it
//! once that offset reaches the registration. STALE_BROKER_EPOCH or an unknown broker id makes
//! it register again. On SIGTERM it heartbeats with `want_shut_down` until the controller has
//! moved leadership away and answers `should_shut_down` (bounded by the session timeout).
//!
//! - [`bootstrap`]: the voters asked from `controller_quorum_bootstrap_servers` (KIP-853);
//! - [`controllers`]: channels to the voters and the client that follows the active one;
//! - [`decision`]: pure decisions on replies, and the backoff;
//! - [`manager`]: the async loop.

pub mod bootstrap;
pub mod controllers;
pub mod decision;
pub mod manager;

pub use controllers::{
    ActiveControllerClient, ControllerChannels, ControllerReply, ControllerRouter,
};
pub use manager::{LifecycleConfig, LifecycleError, LifecycleStatus, ShutdownOutcome};
