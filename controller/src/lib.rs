//! `keel-controller`: the Raft node, the quorum controller logic and its gRPC services
//! (DESIGN §4).
//!
//! Data flows one way: a write RPC ([`service`]) becomes an operation on the single write
//! task ([`write_path`]), which decides with the pure functions of [`logic`] against the
//! working image, proposes the records through Raft ([`node`], [`raft_network`]), and answers
//! after the records are committed and applied by the state machine (metadata-log crate).
//!
//! - [`bounds`]: field bounds of every ControllerService request, checked before anything else;
//! - [`config`]: TOML/env/flag configuration;
//! - [`fuzz`]: entry point of the request-validation fuzz target and its proptest version;
//! - [`logic`]: pure decisions: request + image -> records + response (no I/O, no clock);
//! - [`write_path`]: the one task that batches, proposes and answers writes;
//! - [`raft_network`]: openraft transport over gRPC (client and server);
//! - [`node`]: start-up of the Raft node and listener;
//! - [`meta_properties`]: the identity file of the metadata log directory;
//! - [`peer_acks`]: when each peer last answered replication (DescribeQuorum);
//! - [`metrics`]: Prometheus metrics and readiness (served on `metrics_listener`).

pub mod access;
pub mod append_budget;
pub mod bounds;
pub mod config;
pub mod format;
pub mod fuzz;
pub mod logic;
pub mod membership;
pub mod meta_properties;
pub mod metrics;
pub mod node;
pub mod peer_acks;
pub mod pending_append;
pub mod pre_vote;
pub mod raft_network;
pub mod reads;
pub mod server;
pub mod service;
pub mod write_path;
