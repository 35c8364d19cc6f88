//! Metadata tailer (DESIGN §5; Kafka: `MetadataLoader`, `BrokerMetadataPublisher`,
//! `TopicsDelta.localChanges`): committed records from any controller (`FetchMetadata`) ->
//! local `MetadataImage` -> local changes (deleted / became leader / became follower) for the
//! replica manager, plus a local snapshot for fast restarts.
//!
//! - [`replayer`]: stream items -> images (pure);
//! - [`local_changes`]: image pair -> what changes for this broker (pure);
//! - [`describe`]: `Metadata` / `DescribeReplicas` replies from an image (pure);
//! - [`local_snapshot`]: load and save `<first log dir>/__cluster_metadata/metadata.snap`;
//! - [`sink`]: the bounded channel to the replica manager;
//! - [`tailer`]: the tasks (stream following, snapshot writing).

pub mod describe;
pub mod local_changes;
pub mod local_snapshot;
pub mod replayer;
pub mod sink;
pub mod tailer;

pub use local_changes::{LocalChanges, TopicIdPartition, local_changes};
pub use sink::{LocalChangesEvent, LocalChangesSink};
pub use tailer::{TailerConfig, TailerHandle};
