//! `keel-broker`: partition log storage, replica manager, ISR replication, produce/fetch and
//! the metadata tailer (DESIGN §5).
//!
//! - [`log`]: the on-disk partition log (segments, indexes, leader-epoch cache, producer state,
//!   checkpoints, recovery), with no network or metadata knowledge;
//! - [`log_dir`]: the lock and `meta.properties` of the log directory (node, directory and
//!   cluster ids), checked before any partition file is opened;
//! - [`metadata`]: the metadata tailer: committed records from the controllers -> local
//!   `MetadataImage` -> local changes (became leader / follower / deleted);
//! - [`replica`]: the pure replication rules of a partition (HW, ISR, acks × min.insync);
//! - [`replica_manager`]: the async layer that owns the partition logs and drives those rules
//!   (produce, fetch, follower fetchers, AlterPartition, InitProducerId);
//! - [`fd_limit`]: the open-files limit, raised and checked at start;
//! - [`bounds`]: field bounds of every BrokerService request, checked before anything else;
//! - [`observe`]: Prometheus metrics and readiness (served on `metrics_listener`).

pub mod access;
pub mod bounds;
pub mod config;
pub mod fd_limit;
pub mod group;
pub mod kafka;
pub mod lifecycle;
pub mod log;
pub mod log_dir;
pub mod metadata;
pub mod observe;
pub mod replica;
pub mod replica_manager;
pub mod server;
