//! `keel-controller`: the Raft node, the quorum controller logic and its gRPC services
//! (DESIGN §4).
//!
//! - [`logic`]: pure decisions: request + image -> records + response (no I/O, no clock);

pub mod logic;
