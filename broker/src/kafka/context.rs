//! What the Kafka listener answers from ([`KafkaContext`]): the image, the replica manager,
//! the group coordinator, the controller forwarder and the broker's own settings. Shared by
//! the connection loop and the handlers, so it sits below both.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use keel_metadata_log::MetadataImage;
use keel_metadata_log::acl::Operation;
use keel_metadata_log::authz::{Authz, Caller, Denied};
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
    /// Request authorization ([`crate::access`]); the listener's clients are
    /// `User:ANONYMOUS` on a `PLAINTEXT` listener, the client certificate's principal on `SSL`.
    pub authz: Authz,
    /// The connection's caller (set per connection by [`KafkaContext::for_peer`]).
    pub caller: Caller,
    /// The broker's log directory (`log_dirs`; DescribeLogDirs reports it and its space).
    pub log_dir: std::path::PathBuf,
    /// The broker's `min_insync_replicas` (the replica descriptions DescribeLogDirs reads
    /// carry it).
    pub min_insync_replicas: u32,
}

impl KafkaContext {
    /// This context for one connection: its caller is the principal of `peer`'s client
    /// certificate (an `SSL` listener), else `User:ANONYMOUS`, from `peer`'s address.
    pub fn for_peer(&self, peer: &keel_runtime::tls::PeerInfo) -> KafkaContext {
        KafkaContext {
            caller: self.authz.caller(Some(peer)),
            ..self.clone()
        }
    }

    /// Runs an [`crate::access`] check for this connection's caller against the image's ACLs;
    /// `Ok` without an authorizer.
    pub fn check(
        &self,
        f: impl FnOnce(&Authz, &Caller, &MetadataImage) -> Result<(), Denied>,
    ) -> Result<(), Denied> {
        if !self.authz.enabled() {
            return Ok(());
        }
        let image = self.images.borrow().clone();
        f(&self.authz, &self.caller, &image)
    }

    /// `op` on group `id` for this connection's caller (GROUP_AUTHORIZATION_FAILED).
    pub fn check_group(&self, op: Operation, id: &str) -> Result<(), keel_proto::ErrorCode> {
        self.check(|a, c, img| crate::access::group(a, c, img, op, id))
            .map_err(|d| d.code)
    }
}

/// When this broker last asked the controller to create `__consumer_offsets`.
#[derive(Debug, Default)]
pub struct OffsetsTopicCreation(pub(super) Mutex<Option<Instant>>);
