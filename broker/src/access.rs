//! What each broker request needs (#23), for the gRPC BrokerService and the Kafka listener
//! alike (the listener converts a Kafka request to Keel's form, then checks it here). Kafka's
//! counterparts are the `authorize*` calls of `KafkaApis`:
//!
//! | request | needs |
//! |---|---|
//! | Produce | WRITE on every topic |
//! | Fetch, consumer | READ on every topic |
//! | Fetch / OffsetsForLeaderEpoch / ListOffsets, follower (replica_id >= 0) | the broker's own principal with CLUSTER_ACTION |
//! | ListOffsets, OffsetsForLeaderEpoch | DESCRIBE on every topic |
//! | Metadata | DESCRIBE per topic: a named one without it is TOPIC_AUTHORIZATION_FAILED, left out when all topics are asked for |
//! | InitProducerId | IDEMPOTENT_WRITE on the cluster or WRITE on some topic (KIP-679) |
//! | DescribeConfigs | DESCRIBE_CONFIGS on each topic / the cluster |
//! | DescribeReplicas | DESCRIBE on the cluster |
//! | FindCoordinator, DescribeGroups | DESCRIBE on the group(s) |
//! | JoinGroup, SyncGroup, Heartbeat, LeaveGroup | READ on the group |
//! | OffsetCommit | READ on the group and on every topic |
//! | OffsetFetch | DESCRIBE on the group and on every topic named; offsets of topics without DESCRIBE are left out when all are asked for |
//! | DeleteGroups | DELETE on every group |
//! | ListGroups | none: groups without DESCRIBE are left out |
//!
//! Otherwise a refusal is the whole request's error: TOPIC_, GROUP_ or
//! CLUSTER_AUTHORIZATION_FAILED.

use keel_metadata_log::MetadataImage;
use keel_metadata_log::acl::{Action, Operation};
use keel_metadata_log::authz::{Authz, Caller, Denied};
use keel_proto::broker::*;
use keel_runtime::principal::NodeRole;

/// The name of a topic named by name or by a known id (an unknown id is answered by the
/// request's own checks).
fn topic_name<'a>(img: &'a MetadataImage, name: &'a str, id: &[u8]) -> Option<&'a str> {
    if id.is_empty() {
        return Some(name);
    }
    let id = keel_metadata_log::image::uuid_from_bytes(id)?;
    img.topics().by_id.get(&id).map(|t| t.name.as_str())
}

fn topics<'a>(
    a: &Authz,
    c: &Caller,
    img: &MetadataImage,
    op: Operation,
    names: impl IntoIterator<Item = &'a str>,
) -> Result<(), Denied> {
    names
        .into_iter()
        .try_for_each(|t| a.check(img.acls(), c, Action::topic(op, t)))
}

/// `op` on topic `name` (TOPIC_AUTHORIZATION_FAILED).
pub fn topic(
    a: &Authz,
    c: &Caller,
    img: &MetadataImage,
    op: Operation,
    name: &str,
) -> Result<(), Denied> {
    topics(a, c, img, op, [name])
}

/// The broker's own principal with CLUSTER_ACTION (a follower).
fn follower(a: &Authz, c: &Caller, img: &MetadataImage, replica_id: i32) -> Result<(), Denied> {
    a.check_node(img.acls(), c, NodeRole::Broker, replica_id as i64)
}

/// Produce: WRITE on every topic.
pub fn produce(
    a: &Authz,
    c: &Caller,
    img: &MetadataImage,
    r: &ProduceRequest,
) -> Result<(), Denied> {
    let names = r
        .topics
        .iter()
        .filter_map(|t| topic_name(img, &t.name, &t.topic_id));
    topics(a, c, img, Operation::Write, names)
}

/// Fetch: a follower is that broker; a consumer needs READ on every topic.
pub fn fetch(a: &Authz, c: &Caller, img: &MetadataImage, r: &FetchRequest) -> Result<(), Denied> {
    if r.replica_id >= 0 {
        return follower(a, c, img, r.replica_id);
    }
    let names = r
        .topics
        .iter()
        .filter_map(|t| topic_name(img, &t.topic, &t.topic_id));
    topics(a, c, img, Operation::Read, names)
}

/// ListOffsets: DESCRIBE on every topic (a follower: itself).
pub fn list_offsets(
    a: &Authz,
    c: &Caller,
    img: &MetadataImage,
    r: &ListOffsetsRequest,
) -> Result<(), Denied> {
    if r.replica_id >= 0 {
        return follower(a, c, img, r.replica_id);
    }
    topics(
        a,
        c,
        img,
        Operation::Describe,
        r.topics.iter().map(|t| t.name.as_str()),
    )
}

/// DeleteRecords: DELETE on every topic (Kafka `KafkaApis.handleDeleteRecordsRequest`).
pub fn delete_records(
    a: &Authz,
    c: &Caller,
    img: &MetadataImage,
    r: &DeleteRecordsRequest,
) -> Result<(), Denied> {
    topics(
        a,
        c,
        img,
        Operation::Delete,
        r.topics.iter().map(|t| t.name.as_str()),
    )
}

/// OffsetsForLeaderEpoch: a follower is that broker; a client needs DESCRIBE on every topic.
pub fn offsets_for_leader_epoch(
    a: &Authz,
    c: &Caller,
    img: &MetadataImage,
    r: &OffsetsForLeaderEpochRequest,
) -> Result<(), Denied> {
    if r.replica_id >= 0 {
        return follower(a, c, img, r.replica_id);
    }
    topics(
        a,
        c,
        img,
        Operation::Describe,
        r.topics.iter().map(|t| t.topic.as_str()),
    )
}

/// Metadata (Kafka's `KafkaApis.handleTopicMetadataRequest`): a topic the caller may not
/// DESCRIBE is TOPIC_AUTHORIZATION_FAILED when `named` (the request listed topics), left out
/// when every topic was asked for.
pub fn authorize_metadata(
    a: &Authz,
    c: &Caller,
    img: &MetadataImage,
    named: bool,
    reply: &mut MetadataReply,
) {
    if !a.enabled() {
        return;
    }
    let check = |name: &str| a.check(img.acls(), c, Action::topic(Operation::Describe, name));
    if !named {
        reply.topics.retain(|t| check(&t.name).is_ok());
        return;
    }
    for t in &mut reply.topics {
        if let Err(d) = check(&t.name) {
            *t = MetadataTopic {
                error: Some(d.to_proto()),
                name: t.name.clone(),
                ..Default::default()
            };
        }
    }
}

/// InitProducerId (KIP-679).
pub fn init_producer_id(
    a: &Authz,
    c: &Caller,
    img: &MetadataImage,
    _r: &InitProducerIdRequest,
) -> Result<(), Denied> {
    a.check_idempotent_write(img.acls(), c)
}

/// DescribeConfigs: DESCRIBE_CONFIGS on each resource.
pub fn describe_configs(
    a: &Authz,
    c: &Caller,
    img: &MetadataImage,
    r: &keel_proto::controller::DescribeConfigsRequest,
) -> Result<(), Denied> {
    keel_metadata_log::authz::check_config_resources(
        a,
        c,
        img.acls(),
        Operation::DescribeConfigs,
        r.resources
            .iter()
            .map(|res| (res.resource_type, res.resource_name.as_str())),
    )
}

/// DescribeReplicas: DESCRIBE on the cluster.
pub fn describe_replicas(
    a: &Authz,
    c: &Caller,
    img: &MetadataImage,
    _r: &DescribeReplicasRequest,
) -> Result<(), Denied> {
    a.check(img.acls(), c, Action::cluster(Operation::Describe))
}

/// `op` on group `id`.
pub fn group(
    a: &Authz,
    c: &Caller,
    img: &MetadataImage,
    op: Operation,
    id: &str,
) -> Result<(), Denied> {
    a.check(img.acls(), c, Action::group(op, id))
}

/// OffsetCommit: READ on the group and on every topic.
pub fn offset_commit(
    a: &Authz,
    c: &Caller,
    img: &MetadataImage,
    r: &OffsetCommitRequest,
) -> Result<(), Denied> {
    group(a, c, img, Operation::Read, &r.group_id)?;
    topics(
        a,
        c,
        img,
        Operation::Read,
        r.offsets.iter().map(|o| o.topic.as_str()),
    )
}

/// OffsetFetch: DESCRIBE on the group and on every topic named.
pub fn offset_fetch(
    a: &Authz,
    c: &Caller,
    img: &MetadataImage,
    r: &OffsetFetchRequest,
) -> Result<(), Denied> {
    group(a, c, img, Operation::Describe, &r.group_id)?;
    topics(
        a,
        c,
        img,
        Operation::Describe,
        r.topics.iter().map(|t| t.name.as_str()),
    )
}

/// OffsetFetch's reply: leaves out the offsets of topics the caller may not DESCRIBE (Kafka's
/// `KafkaApis.handleOffsetFetchRequest` filters an all-topics fetch the same way; the
/// topics a request names were checked by [`offset_fetch`]).
pub fn filter_offsets(a: &Authz, c: &Caller, img: &MetadataImage, reply: &mut OffsetFetchReply) {
    if a.enabled() {
        let mut visible: std::collections::HashMap<String, bool> = Default::default();
        reply.offsets.retain(|o| {
            *visible
                .entry(o.topic.clone())
                .or_insert_with(|| topic(a, c, img, Operation::Describe, &o.topic).is_ok())
        });
    }
}

/// ListGroups: leaves out the groups the caller may not DESCRIBE.
pub fn filter_groups(a: &Authz, c: &Caller, img: &MetadataImage, reply: &mut ListGroupsReply) {
    if a.enabled() {
        reply
            .groups
            .retain(|g| group(a, c, img, Operation::Describe, &g.group_id).is_ok());
    }
}
