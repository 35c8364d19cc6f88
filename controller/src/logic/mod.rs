//! Pure controller decisions (DESIGN §4; Kafka: `ReplicationControlManager`,
//! `ClusterControlManager`, `ConfigurationControlManager`, `ProducerIdControlManager`).
//!
//! Every write operation has the shape
//! `fn op(image: &MetadataImage, request: &ProtoRequest, ...) -> ControllerResult<ProtoReply>`:
//! it reads the image, decides, and returns the records to propose together with the reply to
//! send once they are committed ([`ControllerResult`]). Nothing here does I/O, awaits, reads a
//! clock (time is a `now_ms: u64` parameter) or draws random numbers (topic ids and the
//! placement start come from the caller). State changes only when the returned records are
//! committed and replayed (`MetadataDelta`), on the active controller and followers alike.
//!
//! Conventions shared by every operation:
//! - errors travel inside the reply, per topic / partition where the proto has such fields,
//!   with Kafka's exact code ([`keel_proto::ErrorCode`]); a refused request returns no records;
//! - the caller validates against an image that already contains the records it proposed but
//!   has not yet seen committed, proposes `records` as one batch, and sends `response` after
//!   commit; it fills the `ControllerLeader` hints and the fields that need the commit offset
//!   (documented on each operation);
//! - loops run over the request's items (bounded by the gRPC message limit) or over the image
//!   (bounded by its size); no loop depends on anything else.
//!
//! One concept per file:
//! - [`result`] — [`ControllerResult`];
//! - [`partition_change`] — [`PartitionChangeBuilder`] (current partition + targets -> at most
//!   one `PartitionChangeRecord`) and [`merge`](partition_change::merge) (its replay);
//! - [`election`] — leader election rules, the ElectLeaders API, and the ISR/leader cascades run
//!   when a broker is fenced, shuts down, unregisters or unfences;
//! - [`alter_partition`](mod@alter_partition) — the AlterPartition API (ISR changes, KIP-497/841/903);
//! - [`brokers`] — registration, heartbeats, the in-memory [`BrokerHeartbeatManager`], fencing
//!   on session expiry, controlled shutdown, unregistration;
//! - [`topics`] — CreateTopics (validation, replica placement) and DeleteTopics;
//! - [`configs`] — topic/broker/cluster configs: validation, AlterConfigs, DescribeConfigs,
//!   effective values;
//! - [`producer_ids`] — AllocateProducerIds (KIP-730);
//! - [`reassignment`] — AlterPartitionReassignments / ListPartitionReassignments (KIP-455).

pub mod acls;
pub mod alter_partition;
pub mod brokers;
pub mod change_log;
pub mod configs;
pub mod create_partitions;
pub mod election;
pub mod partition_change;
pub mod producer_ids;
pub mod reassignment;
pub mod result;
pub mod scram;
pub mod topics;

pub use alter_partition::alter_partition;
pub use brokers::{
    BrokerHeartbeatManager, BrokerSession, HeartbeatTracker, fence_broker, heartbeat,
    register_broker, unregister_broker,
};
pub use configs::{alter_configs, describe_configs};
pub use create_partitions::create_partitions;
pub use election::{
    MAX_ELECTIONS_PER_IMBALANCE, RebalanceRun, elect_leaders, preferred_leader_rebalance,
};
pub use partition_change::{Election, PartitionChangeBuilder};
pub use producer_ids::allocate_producer_ids;
pub use reassignment::{alter_partition_reassignments, list_partition_reassignments};
pub use result::ControllerResult;
pub use topics::{TopicDefaults, create_topics, delete_topics};

use keel_metadata_log::MetadataImage;
use keel_proto::ErrorCode;
use keel_proto::common;
use keel_proto::metadata::{MetadataRecord, metadata_record::Record};

/// Wraps one record body in a [`MetadataRecord`].
pub(crate) fn record(r: Record) -> MetadataRecord {
    MetadataRecord { record: Some(r) }
}

/// The wire error for `code` with a human-readable `message`.
pub(crate) fn error(code: ErrorCode, message: impl Into<String>) -> Option<common::Error> {
    Some(code.to_proto(message))
}

/// True when broker `id` may lead a partition or join an ISR: registered, unfenced and not in
/// controlled shutdown (Kafka: `ClusterControlManager.isActive`, KIP-841).
pub fn is_eligible(image: &MetadataImage, id: i32) -> bool {
    image.broker(id).is_some_and(|b| b.is_eligible())
}

#[cfg(test)]
pub(crate) mod tests;
