//! The BrokerService's one validation place for field bounds (issue #18): every request is
//! checked here, in [`crate::server`], before the replica manager or the metadata image sees
//! it, against the limits of [`keel_proto::limits`]. A field outside its bound refuses the
//! whole request with INVALID_REQUEST (42) in the reply's top-level `error` and a message
//! `field: problem` naming the field and its limit ([`FieldError`]); the request changes
//! nothing (no append, no follower state, no producer id handed out).
//!
//! These are sizes and ranges only. The meaning of each field is decided where it is used,
//! with Kafka's specific codes: `acks` outside {-1, 0, 1} is INVALID_REQUIRED_ACKS (21) for
//! every partition ([`crate::replica::Acks::from_wire`]); an unknown partition is
//! UNKNOWN_TOPIC_OR_PARTITION (3); a stale epoch FENCED_LEADER_EPOCH (74) or
//! STALE_BROKER_EPOCH (77); a ListOffsets timestamp other than -3, -2, -1 or >= 0 is
//! INVALID_REQUEST per partition; an illegal (but not over-long) Metadata topic name is
//! INVALID_TOPIC_EXCEPTION (17) per topic; a transactional id is UNSUPPORTED_VERSION (35)
//! ([`UNSUPPORTED_TRANSACTIONS`]).
//!
//! Transport bound: the service decodes at most
//! [`MAX_BROKER_MESSAGE_BYTES`](keel_proto::limits::MAX_BROKER_MESSAGE_BYTES) per request (above it tonic
//! answers gRPC OUT_OF_RANGE, "decoded message length too large").

use keel_proto::broker::*;
use keel_proto::limits::{
    FieldError, MAX_PARTITIONS_PER_REQUEST, MAX_TOPIC_NAME_LEN, MAX_TOPICS_PER_REQUEST,
    MAX_TRANSACTIONAL_ID_LEN, check_count, check_len, check_range, check_topic_id,
};

/// Range of a producer epoch: Kafka's int16 `ProducerEpoch`, 0..=32767 (-1 = none, where the
/// field allows it).
pub const PRODUCER_EPOCH_RANGE: std::ops::RangeInclusive<i32> = 0..=(i16::MAX as i32);

/// Why a transactional id is refused (Keel has no transaction coordinator). Answered with
/// UNSUPPORTED_VERSION (35), Kafka's code for a feature the broker cannot serve
/// (`KafkaApis.ensureInterBrokerVersion`, which refuses EndTxn/InitProducerId on a broker
/// whose protocol predates transactions); a retriable code would make a producer retry
/// forever. A Kafka client's transactional producer never gets this far: it asks
/// FindCoordinator with key type 1 first, and that step answers
/// TRANSACTIONAL_ID_AUTHORIZATION_FAILED (53), the only code librdkafka gives up on there
/// (`kafka::groups`).
pub const UNSUPPORTED_TRANSACTIONS: &str =
    "transactions are not supported: transactional_id must be empty";

/// Bounds of a Produce: `timeout_ms` >= 0 (the proto's rule; Kafka does not check it, a
/// negative one would append and then time out at once), `transactional_id` at most
/// [`MAX_TRANSACTIONAL_ID_LEN`] bytes, at most [`MAX_TOPICS_PER_REQUEST`] topics (name at
/// most [`MAX_TOPIC_NAME_LEN`], id empty or 16 bytes) and [`MAX_PARTITIONS_PER_REQUEST`]
/// partitions over all of them. `acks` is judged by the handler (INVALID_REQUIRED_ACKS).
pub fn produce(req: &ProduceRequest) -> Result<(), FieldError> {
    check_range(|| "timeout_ms".into(), req.timeout_ms, 0..=i32::MAX)?;
    check_len(
        || "transactional_id".into(),
        &req.transactional_id,
        MAX_TRANSACTIONAL_ID_LEN,
    )?;
    check_count(|| "topics".into(), req.topics.len(), MAX_TOPICS_PER_REQUEST)?;
    let mut partitions = 0usize;
    for (t, topic) in req.topics.iter().enumerate() {
        topic_name(|| format!("topics[{t}].name"), &topic.name)?;
        check_topic_id(|| format!("topics[{t}].topic_id"), &topic.topic_id)?;
        partitions += topic.partitions.len();
        check_count(
            || format!("topics[{t}].partitions (over all topics)"),
            partitions,
            MAX_PARTITIONS_PER_REQUEST,
        )?;
    }
    Ok(())
}

/// Bounds of a Fetch: `replica_id` >= -1 (-1 consumer, >= 0 a follower), `broker_epoch` at
/// least -1, `max_bytes` >= 0, `isolation_level` 0 or 1, at most [`MAX_TOPICS_PER_REQUEST`]
/// topics (name at most [`MAX_TOPIC_NAME_LEN`], id empty or 16 bytes) and
/// [`MAX_PARTITIONS_PER_REQUEST`] partitions over all of them, each with
/// `partition_max_bytes` >= 0, `last_fetched_epoch` >= -1 and `log_start_offset` >= -1.
/// `max_wait_ms` and `min_bytes` are not refused: <= 0 means "answer at once", and
/// `max_wait_ms` is capped ([`crate::replica_manager::fetch::MAX_WAIT_MS`]), like Kafka.
/// A `session` is checked by [`fetch_session`].
pub fn fetch(req: &FetchRequest) -> Result<(), FieldError> {
    check_range(|| "replica_id".into(), req.replica_id, -1..=i32::MAX)?;
    check_range(|| "broker_epoch".into(), req.broker_epoch, -1..=i64::MAX)?;
    check_range(|| "max_bytes".into(), req.max_bytes, 0..=i32::MAX)?;
    check_range(|| "isolation_level".into(), req.isolation_level, 0..=1)?;
    check_count(|| "topics".into(), req.topics.len(), MAX_TOPICS_PER_REQUEST)?;
    let mut partitions = 0usize;
    for (t, topic) in req.topics.iter().enumerate() {
        topic_name(|| format!("topics[{t}].topic"), &topic.topic)?;
        check_topic_id(|| format!("topics[{t}].topic_id"), &topic.topic_id)?;
        partitions += topic.partitions.len();
        check_count(
            || format!("topics[{t}].partitions (over all topics)"),
            partitions,
            MAX_PARTITIONS_PER_REQUEST,
        )?;
        for (p, part) in topic.partitions.iter().enumerate() {
            check_range(
                || format!("topics[{t}].partitions[{p}].partition_max_bytes"),
                part.partition_max_bytes,
                0..=i32::MAX,
            )?;
            check_range(
                || format!("topics[{t}].partitions[{p}].last_fetched_epoch"),
                part.last_fetched_epoch,
                -1..=i32::MAX,
            )?;
            check_range(
                || format!("topics[{t}].partitions[{p}].log_start_offset"),
                part.log_start_offset,
                -1..=i64::MAX,
            )?;
        }
    }
    if let Some(session) = &req.session {
        fetch_session(req.replica_id, session)?;
    }
    Ok(())
}

/// Bounds of a fetch session (KIP-227, `broker.proto` FetchSessionRequest): follower fetches
/// only (`replica_id` >= 0), `session_id` 0..=i32::MAX, `epoch` -1..=i32::MAX, at most
/// [`MAX_TOPICS_PER_REQUEST`] forgotten topics (name at most [`MAX_TOPIC_NAME_LEN`]) and
/// [`MAX_PARTITIONS_PER_REQUEST`] forgotten partitions.
fn fetch_session(replica_id: i32, session: &FetchSessionRequest) -> Result<(), FieldError> {
    check_range(
        || "session (followers only): replica_id".into(),
        replica_id,
        0..=i32::MAX,
    )?;
    check_range(
        || "session.session_id".into(),
        session.session_id,
        0..=i32::MAX,
    )?;
    check_range(|| "session.epoch".into(), session.epoch, -1..=i32::MAX)?;
    check_count(
        || "session.forgotten".into(),
        session.forgotten.len(),
        MAX_TOPICS_PER_REQUEST,
    )?;
    let mut partitions = 0usize;
    for (t, topic) in session.forgotten.iter().enumerate() {
        topic_name(|| format!("session.forgotten[{t}].topic"), &topic.topic)?;
        partitions += topic.partitions.len();
        check_count(
            || format!("session.forgotten[{t}].partitions (over all topics)"),
            partitions,
            MAX_PARTITIONS_PER_REQUEST,
        )?;
    }
    Ok(())
}

/// Bounds of a ListOffsets: `replica_id` >= -2 (-1 consumer, -2 debugging), `isolation_level`
/// 0 or 1, at most [`MAX_TOPICS_PER_REQUEST`] topics (name at most [`MAX_TOPIC_NAME_LEN`])
/// and [`MAX_PARTITIONS_PER_REQUEST`] partitions over all of them. Timestamps are judged per
/// partition (INVALID_REQUEST for negative values other than -1 and -2).
pub fn list_offsets(req: &ListOffsetsRequest) -> Result<(), FieldError> {
    check_range(|| "replica_id".into(), req.replica_id, -2..=i32::MAX)?;
    check_range(|| "isolation_level".into(), req.isolation_level, 0..=1)?;
    named_topics(
        "name",
        req.topics
            .iter()
            .map(|t| (t.name.as_str(), t.partitions.len())),
    )
}

/// Longest DeleteRecords wait, ms (`timeout_ms`): the Kafka listener's bound
/// ([`crate::kafka::delete_records::MAX_WAIT`]), 5 minutes.
pub const MAX_DELETE_RECORDS_TIMEOUT_MS: i32 = 300_000;

/// Bounds of a DeleteRecords: `timeout_ms` in `0..=`[`MAX_DELETE_RECORDS_TIMEOUT_MS`], at most
/// [`MAX_TOPICS_PER_REQUEST`] topics (name at most [`MAX_TOPIC_NAME_LEN`]) and
/// [`MAX_PARTITIONS_PER_REQUEST`] partitions over all of them. The offsets are checked per
/// partition against its log (OFFSET_OUT_OF_RANGE).
pub fn delete_records(req: &DeleteRecordsRequest) -> Result<(), FieldError> {
    check_range(
        || "timeout_ms".into(),
        req.timeout_ms,
        0..=MAX_DELETE_RECORDS_TIMEOUT_MS,
    )?;
    named_topics(
        "name",
        req.topics
            .iter()
            .map(|t| (t.name.as_str(), t.partitions.len())),
    )
}

/// Bounds of an OffsetsForLeaderEpoch: `replica_id` >= -2, at most
/// [`MAX_TOPICS_PER_REQUEST`] topics (name at most [`MAX_TOPIC_NAME_LEN`]) and
/// [`MAX_PARTITIONS_PER_REQUEST`] partitions over all of them.
pub fn offsets_for_leader_epoch(req: &OffsetsForLeaderEpochRequest) -> Result<(), FieldError> {
    check_range(|| "replica_id".into(), req.replica_id, -2..=i32::MAX)?;
    named_topics(
        "topic",
        req.topics
            .iter()
            .map(|t| (t.topic.as_str(), t.partitions.len())),
    )
}

/// Bounds of a Metadata: at most [`MAX_TOPICS_PER_REQUEST`] names of at most
/// [`MAX_TOPIC_NAME_LEN`] (no longer name can exist). Shorter illegal names are answered per
/// topic with INVALID_TOPIC_EXCEPTION.
pub fn metadata(req: &MetadataRequest) -> Result<(), FieldError> {
    check_count(|| "topics".into(), req.topics.len(), MAX_TOPICS_PER_REQUEST)?;
    for (t, name) in req.topics.iter().enumerate() {
        topic_name(|| format!("topics[{t}]"), name)?;
    }
    Ok(())
}

/// Bounds of an InitProducerId: `transactional_id` at most [`MAX_TRANSACTIONAL_ID_LEN`]
/// bytes (a non-empty one is then refused with UNSUPPORTED_VERSION by the handler),
/// `producer_id` >= -1, `producer_epoch` -1 or in [`PRODUCER_EPOCH_RANGE`], and both -1 or
/// neither (Kafka `KafkaApis.handleInitProducerIdRequest`: one without the other is
/// INVALID_REQUEST). `transaction_timeout_ms` is ignored without transactions.
pub fn init_producer_id(req: &InitProducerIdRequest) -> Result<(), FieldError> {
    check_len(
        || "transactional_id".into(),
        &req.transactional_id,
        MAX_TRANSACTIONAL_ID_LEN,
    )?;
    check_range(|| "producer_id".into(), req.producer_id, -1..=i64::MAX)?;
    if req.producer_epoch != -1 {
        check_range(
            || "producer_epoch".into(),
            req.producer_epoch,
            PRODUCER_EPOCH_RANGE,
        )?;
    }
    if (req.producer_id == -1) != (req.producer_epoch == -1) {
        return Err(FieldError::new(
            "producer_id/producer_epoch",
            format!(
                "{}/{}: both -1 (a new producer) or both set (KIP-360 re-initialisation)",
                req.producer_id, req.producer_epoch
            ),
        ));
    }
    Ok(())
}

/// Bounds of a DescribeReplicas: at most [`MAX_TOPICS_PER_REQUEST`] topics (name at most
/// [`MAX_TOPIC_NAME_LEN`]) and [`MAX_PARTITIONS_PER_REQUEST`] partitions over all of them.
pub fn describe_replicas(req: &DescribeReplicasRequest) -> Result<(), FieldError> {
    named_topics(
        "name",
        req.topics
            .iter()
            .map(|t| (t.name.as_str(), t.partitions.len())),
    )
}

/// At most [`MAX_TOPICS_PER_REQUEST`] topics, each name (field `topics[i].<name_field>`) at
/// most [`MAX_TOPIC_NAME_LEN`], and at most [`MAX_PARTITIONS_PER_REQUEST`] partitions over
/// all of them: the shape shared by the requests naming (topic, partitions) lists.
fn named_topics<'a>(
    name_field: &str,
    topics: impl ExactSizeIterator<Item = (&'a str, usize)>,
) -> Result<(), FieldError> {
    check_count(|| "topics".into(), topics.len(), MAX_TOPICS_PER_REQUEST)?;
    let mut partitions = 0usize;
    for (t, (name, count)) in topics.enumerate() {
        topic_name(|| format!("topics[{t}].{name_field}"), name)?;
        partitions += count;
        check_count(
            || format!("topics[{t}].partitions (over all topics)"),
            partitions,
            MAX_PARTITIONS_PER_REQUEST,
        )?;
    }
    Ok(())
}

/// Longest group id, bytes: Kafka's string limit (`Short.MAX_VALUE`).
pub const MAX_GROUP_ID_LEN: usize = 32_767;

/// Most groups named in one group-administration request (the limit of topics per request).
pub const MAX_GROUPS_PER_REQUEST: usize = MAX_TOPICS_PER_REQUEST;

fn group_id(field: impl FnOnce() -> String, id: &str) -> Result<(), FieldError> {
    check_len(field, id, MAX_GROUP_ID_LEN)
}

fn group_ids(ids: &[String]) -> Result<(), FieldError> {
    check_count(|| "group_ids".into(), ids.len(), MAX_GROUPS_PER_REQUEST)?;
    for (i, id) in ids.iter().enumerate() {
        group_id(|| format!("group_ids[{i}]"), id)?;
    }
    Ok(())
}

/// Bounds of a FindCoordinator: the group id at most [`MAX_GROUP_ID_LEN`] bytes.
pub fn find_coordinator(req: &FindCoordinatorRequest) -> Result<(), FieldError> {
    group_id(|| "group_id".into(), &req.group_id)
}

/// Bounds of a ListGroups: at most 16 state names of at most 64 bytes.
pub fn list_groups(req: &ListGroupsRequest) -> Result<(), FieldError> {
    check_count(|| "states_filter".into(), req.states_filter.len(), 16)?;
    for (i, s) in req.states_filter.iter().enumerate() {
        check_len(|| format!("states_filter[{i}]"), s, 64)?;
    }
    Ok(())
}

/// Bounds of a DescribeGroups: at most [`MAX_GROUPS_PER_REQUEST`] ids.
pub fn describe_groups(req: &DescribeGroupsRequest) -> Result<(), FieldError> {
    group_ids(&req.group_ids)
}

/// Bounds of a DeleteGroups: at most [`MAX_GROUPS_PER_REQUEST`] ids.
pub fn delete_groups(req: &DeleteGroupsRequest) -> Result<(), FieldError> {
    group_ids(&req.group_ids)
}

/// Bounds of an OffsetFetch: the group id, at most [`MAX_TOPICS_PER_REQUEST`] topics and
/// [`MAX_PARTITIONS_PER_REQUEST`] partitions.
pub fn offset_fetch(req: &OffsetFetchRequest) -> Result<(), FieldError> {
    group_id(|| "group_id".into(), &req.group_id)?;
    named_topics(
        "name",
        req.topics
            .iter()
            .map(|t| (t.name.as_str(), t.partitions.len())),
    )
}

/// Bounds of an OffsetCommit: the group id, member and instance ids at most
/// [`MAX_GROUP_ID_LEN`] bytes, at most [`MAX_PARTITIONS_PER_REQUEST`] offsets, each offset
/// not negative and its topic name at most [`MAX_TOPIC_NAME_LEN`]; metadata length is the
/// coordinator's rule (OFFSET_METADATA_TOO_LARGE per offset), bounded here at 1 MiB.
pub fn offset_commit(req: &OffsetCommitRequest) -> Result<(), FieldError> {
    group_id(|| "group_id".into(), &req.group_id)?;
    member("", &req.member_id, req.group_instance_id.as_ref())?;
    check_count(
        || "offsets".into(),
        req.offsets.len(),
        MAX_PARTITIONS_PER_REQUEST,
    )?;
    for (i, o) in req.offsets.iter().enumerate() {
        topic_name(|| format!("offsets[{i}].topic"), &o.topic)?;
        check_range(|| format!("offsets[{i}].offset"), o.offset, 0..=i64::MAX)?;
        if let Some(m) = &o.metadata {
            check_len(|| format!("offsets[{i}].metadata"), m, 1 << 20)?;
        }
    }
    Ok(())
}

/// Longest protocol type, protocol name or client id of a JoinGroup, bytes.
pub const MAX_PROTOCOL_NAME_LEN: usize = 255;

/// Most protocols (assignors) one JoinGroup may offer.
pub const MAX_JOIN_PROTOCOLS: usize = 64;

/// Most bytes of protocol metadata one JoinGroup may carry over all its protocols (the
/// coordinator's `max_member_metadata_bytes` default); the coordinator applies its own bound
/// too (INVALID_REQUEST).
pub const MAX_JOIN_METADATA_BYTES: usize = 1 << 20;

/// Most members named by one SyncGroup or LeaveGroup (Kafka has no bound; a group has at
/// most `group_max_size` members).
pub const MAX_MEMBERS_PER_REQUEST: usize = 10_000;

/// A member id or static instance id: at most [`MAX_GROUP_ID_LEN`] bytes.
fn member(field: &str, member_id: &str, instance_id: Option<&String>) -> Result<(), FieldError> {
    check_len(|| format!("{field}member_id"), member_id, MAX_GROUP_ID_LEN)?;
    if let Some(i) = instance_id {
        check_len(|| format!("{field}group_instance_id"), i, MAX_GROUP_ID_LEN)?;
    }
    Ok(())
}

/// Bounds of a JoinGroup: group, member and instance ids at most [`MAX_GROUP_ID_LEN`] bytes;
/// `protocol_type`, `client_id` and each protocol name 1 (protocol type and names) to
/// [`MAX_PROTOCOL_NAME_LEN`] bytes; 1 to [`MAX_JOIN_PROTOCOLS`] protocols whose metadata
/// totals at most [`MAX_JOIN_METADATA_BYTES`]; `rebalance_timeout_ms` >= 1. The session
/// timeout's range is the coordinator's rule (INVALID_SESSION_TIMEOUT).
pub fn join_group(req: &JoinGroupRequest) -> Result<(), FieldError> {
    group_id(|| "group_id".into(), &req.group_id)?;
    member("", &req.member_id, req.group_instance_id.as_ref())?;
    check_len(|| "client_id".into(), &req.client_id, MAX_PROTOCOL_NAME_LEN)?;
    non_empty_name("protocol_type", &req.protocol_type)?;
    check_range(
        || "protocols".into(),
        req.protocols.len(),
        1..=MAX_JOIN_PROTOCOLS,
    )?;
    let mut metadata = 0;
    for (i, p) in req.protocols.iter().enumerate() {
        non_empty_name(&format!("protocols[{i}].name"), &p.name)?;
        metadata += p.metadata.len();
        check_range(
            || format!("protocols[{i}].metadata (bytes over all protocols)"),
            metadata,
            0..=MAX_JOIN_METADATA_BYTES,
        )?;
    }
    check_range(
        || "rebalance_timeout_ms".into(),
        req.rebalance_timeout_ms,
        1..=i32::MAX,
    )
}

fn non_empty_name(field: &str, name: &str) -> Result<(), FieldError> {
    check_range(
        || format!("{field} (bytes)"),
        name.len(),
        1..=MAX_PROTOCOL_NAME_LEN,
    )
}

/// Bounds of a SyncGroup: the ids as for JoinGroup, protocol type and name at most
/// [`MAX_PROTOCOL_NAME_LEN`] bytes, at most [`MAX_MEMBERS_PER_REQUEST`] assignments.
pub fn sync_group(req: &SyncGroupRequest) -> Result<(), FieldError> {
    group_id(|| "group_id".into(), &req.group_id)?;
    member("", &req.member_id, req.group_instance_id.as_ref())?;
    for (field, v) in [
        ("protocol_type", &req.protocol_type),
        ("protocol_name", &req.protocol_name),
    ] {
        if let Some(v) = v {
            check_len(|| field.into(), v, MAX_PROTOCOL_NAME_LEN)?;
        }
    }
    check_count(
        || "assignments".into(),
        req.assignments.len(),
        MAX_MEMBERS_PER_REQUEST,
    )?;
    for (i, a) in req.assignments.iter().enumerate() {
        check_len(
            || format!("assignments[{i}].member_id"),
            &a.member_id,
            MAX_GROUP_ID_LEN,
        )?;
    }
    Ok(())
}

/// Bounds of a Heartbeat: the ids as for JoinGroup.
pub fn heartbeat(req: &HeartbeatRequest) -> Result<(), FieldError> {
    group_id(|| "group_id".into(), &req.group_id)?;
    member("", &req.member_id, req.group_instance_id.as_ref())
}

/// Bounds of a LeaveGroup: the group id, 1 to [`MAX_MEMBERS_PER_REQUEST`] members with ids
/// as for JoinGroup.
pub fn leave_group(req: &LeaveGroupRequest) -> Result<(), FieldError> {
    group_id(|| "group_id".into(), &req.group_id)?;
    check_range(
        || "members".into(),
        req.members.len(),
        1..=MAX_MEMBERS_PER_REQUEST,
    )?;
    for (i, m) in req.members.iter().enumerate() {
        member(
            &format!("members[{i}]."),
            &m.member_id,
            m.group_instance_id.as_ref(),
        )?;
    }
    Ok(())
}

/// A topic name field: at most [`MAX_TOPIC_NAME_LEN`] characters (Kafka
/// `Topic.MAX_NAME_LENGTH`; legal names are ASCII, so characters are bytes). Its characters
/// are judged where it is used (an unknown or illegal name exists nowhere).
fn topic_name(field: impl FnOnce() -> String, name: &str) -> Result<(), FieldError> {
    check_len(field, name, MAX_TOPIC_NAME_LEN)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn fetch_request() -> FetchRequest {
        FetchRequest {
            replica_id: -1,
            broker_epoch: -1,
            max_wait_ms: 500,
            min_bytes: 1,
            max_bytes: 1 << 20,
            isolation_level: 0,
            topics: vec![FetchTopic {
                topic: "t".into(),
                topic_id: Bytes::new(),
                partitions: vec![FetchPartition {
                    partition: 0,
                    fetch_offset: 0,
                    current_leader_epoch: None,
                    last_fetched_epoch: -1,
                    log_start_offset: -1,
                    partition_max_bytes: 1 << 20,
                }],
            }],
            session: None,
        }
    }

    fn session_fetch(session_id: i32, epoch: i32) -> FetchRequest {
        FetchRequest {
            replica_id: 2,
            broker_epoch: 10,
            session: Some(FetchSessionRequest {
                session_id,
                epoch,
                forgotten: vec![ForgottenTopic {
                    topic: "t".into(),
                    partitions: vec![1],
                }],
            }),
            ..fetch_request()
        }
    }

    fn produce_request() -> ProduceRequest {
        ProduceRequest {
            acks: -1,
            timeout_ms: 30_000,
            transactional_id: String::new(),
            topics: vec![ProduceTopicData {
                name: "t".into(),
                topic_id: Bytes::new(),
                partitions: vec![ProducePartitionData::default()],
            }],
        }
    }

    #[test]
    fn normal_requests_pass() {
        fetch(&fetch_request()).unwrap();
        produce(&produce_request()).unwrap();
        // Kafka's lenient long-poll fields stay accepted.
        let mut f = fetch_request();
        f.max_wait_ms = i32::MIN;
        f.min_bytes = -1;
        f.max_bytes = 0;
        f.topics[0].partitions[0].partition_max_bytes = 0;
        fetch(&f).unwrap();
        init_producer_id(&InitProducerIdRequest {
            producer_id: -1,
            producer_epoch: -1,
            ..Default::default()
        })
        .unwrap();
        init_producer_id(&InitProducerIdRequest {
            producer_id: 7,
            producer_epoch: i16::MAX as i32,
            ..Default::default()
        })
        .unwrap();
        metadata(&MetadataRequest {
            topics: vec!["a".repeat(MAX_TOPIC_NAME_LEN)],
        })
        .unwrap();
    }

    #[test]
    fn every_bounded_fetch_field_names_itself() {
        type Mutation = Box<dyn Fn(&mut FetchRequest)>;
        let cases: Vec<(&str, Mutation)> = vec![
            ("replica_id", Box::new(|r| r.replica_id = -2)),
            ("broker_epoch", Box::new(|r| r.broker_epoch = -2)),
            ("max_bytes", Box::new(|r| r.max_bytes = -5)),
            ("isolation_level", Box::new(|r| r.isolation_level = 7)),
            (
                "topics",
                Box::new(|r| r.topics = vec![r.topics[0].clone(); MAX_TOPICS_PER_REQUEST + 1]),
            ),
            (
                "topics[0].topic",
                Box::new(|r| r.topics[0].topic = "x".repeat(1 << 20)),
            ),
            (
                "topics[0].topic_id",
                Box::new(|r| r.topics[0].topic_id = Bytes::from_static(&[1; 15])),
            ),
            (
                "topics[0].partitions (over all topics)",
                Box::new(|r| {
                    r.topics[0].partitions =
                        vec![r.topics[0].partitions[0]; MAX_PARTITIONS_PER_REQUEST + 1]
                }),
            ),
            (
                "topics[0].partitions[0].partition_max_bytes",
                Box::new(|r| r.topics[0].partitions[0].partition_max_bytes = -1),
            ),
            (
                "topics[0].partitions[0].last_fetched_epoch",
                Box::new(|r| r.topics[0].partitions[0].last_fetched_epoch = -3),
            ),
            (
                "topics[0].partitions[0].log_start_offset",
                Box::new(|r| r.topics[0].partitions[0].log_start_offset = -3),
            ),
            (
                "session (followers only): replica_id",
                Box::new(|r| r.replica_id = -1),
            ),
            (
                "session.session_id",
                Box::new(|r| r.session.as_mut().unwrap().session_id = -1),
            ),
            (
                "session.epoch",
                Box::new(|r| r.session.as_mut().unwrap().epoch = -2),
            ),
            (
                "session.forgotten",
                Box::new(|r| {
                    let s = r.session.as_mut().unwrap();
                    s.forgotten = vec![s.forgotten[0].clone(); MAX_TOPICS_PER_REQUEST + 1]
                }),
            ),
            (
                "session.forgotten[0].topic",
                Box::new(|r| r.session.as_mut().unwrap().forgotten[0].topic = "x".repeat(1 << 20)),
            ),
            (
                "session.forgotten[0].partitions (over all topics)",
                Box::new(|r| {
                    r.session.as_mut().unwrap().forgotten[0].partitions =
                        vec![0; MAX_PARTITIONS_PER_REQUEST + 1]
                }),
            ),
        ];
        // Sessions of each kind pass.
        for (id, epoch) in [(0, 0), (7, 3), (7, -1), (7, 0)] {
            fetch(&session_fetch(id, epoch)).unwrap();
        }
        for (field, mutate) in cases {
            let mut req = session_fetch(7, 3);
            mutate(&mut req);
            let e = fetch(&req).unwrap_err();
            assert_eq!(e.field, field, "{e}");
            assert!(e.to_string().len() < 300, "echoed input is clipped: {e}");
        }
    }

    #[test]
    fn produce_timeout_and_transactional_id_are_bounded() {
        for timeout in [-1, i32::MIN] {
            let mut req = produce_request();
            req.timeout_ms = timeout;
            assert_eq!(produce(&req).unwrap_err().field, "timeout_ms");
        }
        let mut req = produce_request();
        req.timeout_ms = 0;
        produce(&req).unwrap();
        req.transactional_id = "x".repeat(MAX_TRANSACTIONAL_ID_LEN + 1);
        assert_eq!(produce(&req).unwrap_err().field, "transactional_id");
        let mut req = produce_request();
        req.topics[0].name = "n".repeat(MAX_TOPIC_NAME_LEN + 1);
        assert_eq!(produce(&req).unwrap_err().field, "topics[0].name");
        let mut req = produce_request();
        req.topics[0].topic_id = Bytes::from_static(&[0; 17]);
        assert_eq!(produce(&req).unwrap_err().field, "topics[0].topic_id");
    }

    #[test]
    fn producer_epochs_are_int16_and_come_with_an_id() {
        let req = |producer_id, producer_epoch| InitProducerIdRequest {
            producer_id,
            producer_epoch,
            ..Default::default()
        };
        for (id, epoch, field) in [
            (7, 40_000, "producer_epoch"),
            (7, i16::MAX as i32 + 1, "producer_epoch"),
            (7, -2, "producer_epoch"),
            (-2, -1, "producer_id"),
            (7, -1, "producer_id/producer_epoch"),
            (-1, 0, "producer_id/producer_epoch"),
        ] {
            assert_eq!(
                init_producer_id(&req(id, epoch)).unwrap_err().field,
                field,
                "{id}/{epoch}"
            );
        }
        let mut long = req(-1, -1);
        long.transactional_id = "t".repeat(MAX_TRANSACTIONAL_ID_LEN + 1);
        assert_eq!(
            init_producer_id(&long).unwrap_err().field,
            "transactional_id"
        );
    }

    #[test]
    fn delete_records_bounds_its_wait_and_its_names() {
        let req = |timeout_ms: i32, name: &str| DeleteRecordsRequest {
            topics: vec![DeleteRecordsTopic {
                name: name.into(),
                partitions: vec![DeleteRecordsPartition {
                    partition_index: 0,
                    offset: 5,
                }],
            }],
            timeout_ms,
        };
        delete_records(&req(0, "t")).unwrap();
        delete_records(&req(MAX_DELETE_RECORDS_TIMEOUT_MS, "t")).unwrap();
        for bad in [-1, MAX_DELETE_RECORDS_TIMEOUT_MS + 1, i32::MAX] {
            let e = delete_records(&req(bad, "t")).unwrap_err();
            assert_eq!(e.field, "timeout_ms", "{e}");
        }
        let e = delete_records(&req(1000, &"d".repeat(1 << 20))).unwrap_err();
        assert_eq!(e.field, "topics[0].name");
        assert!(e.to_string().len() < 300, "{e}");
        let many = DeleteRecordsRequest {
            topics: vec![DeleteRecordsTopic::default(); MAX_TOPICS_PER_REQUEST + 1],
            timeout_ms: 0,
        };
        assert_eq!(delete_records(&many).unwrap_err().field, "topics");
    }

    #[test]
    fn metadata_and_reads_refuse_overlong_names_with_a_short_message() {
        let huge = "m".repeat(1 << 20);
        let e = metadata(&MetadataRequest {
            topics: vec!["ok".into(), huge.clone()],
        })
        .unwrap_err();
        assert_eq!(e.field, "topics[1]");
        assert!(e.to_string().len() < 300, "{e}");
        let e = list_offsets(&ListOffsetsRequest {
            topics: vec![ListOffsetsTopic {
                name: huge.clone(),
                partitions: vec![],
            }],
            ..Default::default()
        })
        .unwrap_err();
        assert_eq!(e.field, "topics[0].name");
        let e = offsets_for_leader_epoch(&OffsetsForLeaderEpochRequest {
            replica_id: -1,
            topics: vec![OffsetForLeaderTopic {
                topic: huge.clone(),
                partitions: vec![],
            }],
        })
        .unwrap_err();
        assert_eq!(e.field, "topics[0].topic");
        let e = describe_replicas(&DescribeReplicasRequest {
            topics: vec![DescribeReplicasTopic {
                name: huge,
                partitions: vec![],
            }],
            include_image_digest: false,
        })
        .unwrap_err();
        assert_eq!(e.field, "topics[0].name");
        let e = list_offsets(&ListOffsetsRequest {
            replica_id: -3,
            ..Default::default()
        })
        .unwrap_err();
        assert_eq!(e.field, "replica_id");
    }

    #[test]
    fn membership_requests_are_bounded_field_by_field() {
        let join = || JoinGroupRequest {
            group_id: "g".into(),
            protocol_type: "consumer".into(),
            protocols: vec![JoinGroupProtocol {
                name: "range".into(),
                metadata: vec![0; 16].into(),
            }],
            session_timeout_ms: 10_000,
            rebalance_timeout_ms: 10_000,
            ..Default::default()
        };
        assert!(join_group(&join()).is_ok());
        let field = |r: Result<(), FieldError>| r.unwrap_err().to_string();
        let mut r = join();
        r.protocols.clear();
        assert!(
            field(join_group(&r)).starts_with("protocols:"),
            "{}",
            field(join_group(&r))
        );
        let mut r = join();
        r.protocol_type.clear();
        assert!(field(join_group(&r)).starts_with("protocol_type (bytes)"));
        let mut r = join();
        r.protocols[0].metadata = vec![0; MAX_JOIN_METADATA_BYTES + 1].into();
        assert!(field(join_group(&r)).starts_with("protocols[0].metadata"));
        let mut r = join();
        r.rebalance_timeout_ms = 0;
        assert!(field(join_group(&r)).starts_with("rebalance_timeout_ms"));
        let mut r = join();
        r.group_instance_id = Some("i".repeat(MAX_GROUP_ID_LEN + 1));
        assert!(field(join_group(&r)).starts_with("group_instance_id"));

        let leave = LeaveGroupRequest {
            group_id: "g".into(),
            members: Vec::new(),
        };
        assert!(field(leave_group(&leave)).starts_with("members"));
        let sync = SyncGroupRequest {
            group_id: "g".into(),
            assignments: vec![SyncGroupAssignment::default(); MAX_MEMBERS_PER_REQUEST + 1],
            ..Default::default()
        };
        assert!(field(sync_group(&sync)).starts_with("assignments"));
        let beat = HeartbeatRequest {
            group_id: "g".repeat(MAX_GROUP_ID_LEN + 1),
            ..Default::default()
        };
        assert!(field(heartbeat(&beat)).starts_with("group_id"));
    }
}
