//! What the Kafka listener answers from ([`KafkaContext`]): the image, the replica manager,
//! the group coordinator, the controller forwarder and the broker's own settings. Shared by
//! the connection loop and the handlers, so it sits below both.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use keel_metadata_log::MetadataImage;
use tokio::sync::watch;

use super::convert;
use super::forwarder::ControllerForwarder;
use crate::lifecycle::LifecycleStatus;
use crate::replica_manager::ReplicaManager;

/// What the listener answers from.
#[derive(Debug, Clone)]
pub struct KafkaContext {
    /// This broker's id.
    pub broker_id: i32,
    /// The listener's name (`PLAINTEXT`): the endpoint name Metadata answers with.
    pub listener: String,
    /// The broker's current metadata image.
    pub images: watch::Receiver<MetadataImage>,
    /// The broker's lifecycle (its registered epoch, for InitProducerId).
    pub status: watch::Receiver<LifecycleStatus>,
    /// Produce, Fetch, ListOffsets, OffsetForLeaderEpoch, InitProducerId.
    pub replicas: ReplicaManager,
    /// CreateTopics, DeleteTopics, DescribeConfigs, DescribeCluster: forwarded to the active
    /// controller.
    pub controller: ControllerForwarder,
    /// This broker's own config values DescribeConfigs reports as STATIC_BROKER_CONFIG
    /// ([`super::admin::static_broker_configs`]).
    pub static_configs: Vec<convert::admin::StaticBrokerConfig>,
    /// `auto_create_topics_enable`: Metadata creates unknown topics the client asks for.
    pub auto_create_topics: bool,
    /// The group coordinator (FindCoordinator and the group APIs).
    pub groups: crate::group::GroupCoordinator,
    /// Throttle of this broker's requests to create `__consumer_offsets`.
    pub offsets_topic_creation: Arc<OffsetsTopicCreation>,
}

/// When this broker last asked the controller to create `__consumer_offsets`.
#[derive(Debug, Default)]
pub struct OffsetsTopicCreation(pub(super) Mutex<Option<Instant>>);
