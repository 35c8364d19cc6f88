//! What each ControllerService RPC needs (#23; the table is in `controller.proto`, "
//! Authorization"): pure functions from a request to the checks of [`Authz`], run by the
//! service before the request's bounds and before anything is decided. Kafka's counterparts
//! are the `authorize*` calls of `ControllerApis`.

use keel_metadata_log::MetadataImage;
use keel_metadata_log::acl::{Action, Operation};
use keel_metadata_log::authz::{Authz, Caller, Denied};
use keel_proto::controller::{
    AlterConfigsRequest, AlterPartitionRequest, CreatePartitionsRequest, CreateTopicsRequest,
    DeleteTopicsRequest, DescribeConfigsRequest,
};
use keel_runtime::principal::NodeRole;

/// A broker RPC claiming broker `id` (RegisterBroker, BrokerHeartbeat, AllocateProducerIds,
/// FetchMetadata with a broker id).
pub fn broker(a: &Authz, c: &Caller, img: &MetadataImage, id: i32) -> Result<(), Denied> {
    a.check_node(img.acls(), c, NodeRole::Broker, id as i64)
}

/// `operation` on the cluster.
pub fn cluster(a: &Authz, c: &Caller, img: &MetadataImage, op: Operation) -> Result<(), Denied> {
    a.check(img.acls(), c, Action::cluster(op))
}

/// DescribeCluster: DESCRIBE on the cluster, or CLUSTER_ACTION (a node: a broker asks it for
/// the cluster id before it registers, and Kafka's nodes need CLUSTER_ACTION only). A refusal
/// names DESCRIBE.
pub fn describe_cluster(a: &Authz, c: &Caller, img: &MetadataImage) -> Result<(), Denied> {
    cluster(a, c, img, Operation::Describe)
        .or_else(|d| cluster(a, c, img, Operation::ClusterAction).map_err(|_| d))
}

/// CreateTopics: CREATE on the cluster, or on every topic named.
pub fn create_topics(
    a: &Authz,
    c: &Caller,
    img: &MetadataImage,
    req: &CreateTopicsRequest,
) -> Result<(), Denied> {
    keel_metadata_log::authz::check_create_topics(
        a,
        c,
        img.acls(),
        req.topics.iter().map(|t| t.name.as_str()),
    )
}

/// DeleteTopics: DELETE on every topic named (by name, or by a known id).
pub fn delete_topics(
    a: &Authz,
    c: &Caller,
    img: &MetadataImage,
    req: &DeleteTopicsRequest,
) -> Result<(), Denied> {
    for t in &req.topics {
        let name = match keel_metadata_log::image::uuid_from_bytes(&t.topic_id) {
            Some(id) if !t.topic_id.is_empty() => match img.topics().by_id.get(&id) {
                Some(topic) => topic.name.clone(),
                // Unknown id: answered UNKNOWN_TOPIC_ID by the decision.
                None => continue,
            },
            _ => t.name.clone(),
        };
        a.check(img.acls(), c, Action::topic(Operation::Delete, &name))?;
    }
    Ok(())
}

/// CreatePartitions: ALTER on every topic named.
pub fn create_partitions(
    a: &Authz,
    c: &Caller,
    img: &MetadataImage,
    req: &CreatePartitionsRequest,
) -> Result<(), Denied> {
    req.topics
        .iter()
        .try_for_each(|t| a.check(img.acls(), c, Action::topic(Operation::Alter, &t.name)))
}

/// AlterPartition: from a partition leader (broker_id >= 0) the broker's own principal with
/// CLUSTER_ACTION; from an operator (-1) ALTER on the cluster.
pub fn alter_partition(
    a: &Authz,
    c: &Caller,
    img: &MetadataImage,
    req: &AlterPartitionRequest,
) -> Result<(), Denied> {
    if req.broker_id >= 0 {
        broker(a, c, img, req.broker_id)
    } else {
        cluster(a, c, img, Operation::Alter)
    }
}

/// AlterConfigs: ALTER_CONFIGS on each topic, or on the cluster for broker and cluster
/// resources.
pub fn alter_configs(
    a: &Authz,
    c: &Caller,
    img: &MetadataImage,
    req: &AlterConfigsRequest,
) -> Result<(), Denied> {
    keel_metadata_log::authz::check_config_resources(
        a,
        c,
        img.acls(),
        Operation::AlterConfigs,
        req.resources
            .iter()
            .map(|r| (r.resource_type, r.resource_name.as_str())),
    )
}

/// DescribeConfigs: DESCRIBE_CONFIGS likewise.
pub fn describe_configs(
    a: &Authz,
    c: &Caller,
    img: &MetadataImage,
    req: &DescribeConfigsRequest,
) -> Result<(), Denied> {
    keel_metadata_log::authz::check_config_resources(
        a,
        c,
        img.acls(),
        Operation::DescribeConfigs,
        req.resources
            .iter()
            .map(|r| (r.resource_type, r.resource_name.as_str())),
    )
}
