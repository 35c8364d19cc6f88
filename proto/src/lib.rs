//! `keel-proto`: Keel's wire contracts.
//!
//! - [`metadata`]: the `__cluster_metadata` records (DESIGN §3);
//! - [`raft`]: the Raft transport between controllers;
//! - [`controller`]: the controller API used by brokers, clients and operators;
//! - [`broker`]: the broker API (produce, fetch, replication, admin reads);
//! - [`error`]: Kafka error codes carried inside responses;
//! - [`limits`]: bounds on request fields, shared by the services that validate them.
//!
//! The message and service code is generated at build time from `proto/*.proto` by `protox`
//! (no `protoc` needed) and `tonic-prost-build`. Protobuf `bytes` fields are `bytes::Bytes`.

#![allow(missing_docs, missing_debug_implementations)]

/// Types shared by several services (`keel.common`).
pub mod common {
    tonic::include_proto!("keel.common");
}

/// Records of the cluster metadata log (`keel.metadata`).
pub mod metadata {
    tonic::include_proto!("keel.metadata");
}

/// Raft transport between controllers (`keel.raft`).
pub mod raft {
    tonic::include_proto!("keel.raft");
}

/// The controller API used by brokers, clients and operators (`keel.controller`).
pub mod controller {
    tonic::include_proto!("keel.controller");
}

/// The broker API: produce, fetch, replication and admin reads (`keel.broker`).
pub mod broker {
    tonic::include_proto!("keel.broker");
}

pub mod error;
pub mod limits;
pub mod voters;

pub use error::ErrorCode;
