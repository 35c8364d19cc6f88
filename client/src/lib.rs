//! `keel-client`: the client library of Keel and the `keelctl` CLI (DESIGN §1).
//!
//! - [`admin`]: [`admin::Admin`], the operator client of the controller API;
//! - [`producer`]: [`producer::Producer`], batching idempotent producer (broker Produce API);
//! - [`consumer`]: [`consumer::Consumer`], reads assigned partitions (Fetch, ListOffsets,
//!   OffsetsForLeaderEpoch) or, with `subscribe`, those a consumer group gives it (the
//!   classic group protocol, Kafka's assignor bytes);
//! - [`groups`]: [`groups::GroupAdmin`], consumer-group administration (`keelctl group`);
//! - [`brokers`]: broker connections and the partition leader cache both share;
//! - [`leader_epochs`]: the highest leader epoch seen per partition and the reactions to
//!   leader errors (pure);
//! - [`rpc_error`]: one human line for a failed gRPC call or connection;
//! - [`kafka_probe`]: whether an address that dropped a gRPC connection is a Kafka listener;
//! - [`verify`]: the lost/duplicated/reordered judgement of `keelctl verify`;
//! - [`format`](mod@format): pure formatting of results as text tables and JSON rows;
//! - [`local_cluster`]: the process and file layout of `keelctl cluster up|down|status`;
//! - [`log_dump`]: partition segment files read offline (`keelctl log dump`);
//! - [`cli`]: the `keelctl` command line (the binary only calls [`cli::main`]).
//!
//! Record batches are built and parsed with `keel_record` (Kafka v2 format), so client and
//! broker share one implementation of the format; the client depends on neither the broker
//! nor the controller crate (checked by `scripts/check-deps`).

pub mod admin;
pub mod brokers;
pub mod cli;
pub mod client_properties;
pub mod consumer;
pub mod dev_certs;
pub mod format;
pub mod groups;
pub mod grpc;
pub mod kafka_probe;
pub mod leader_epochs;
pub mod local_cluster;
pub mod log_dump;
pub mod metadata_dump;
pub mod producer;
pub mod rpc_error;
pub mod verify;
