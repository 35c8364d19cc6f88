//! The ControllerService's one validation place for field bounds (issue #18): every request
//! is checked here, before it reaches the write task or a read, against the limits of
//! [`keel_proto::limits`]. A field outside its bound refuses the whole request with
//! INVALID_REQUEST (42) and a message `field: problem` naming the field and its limit; the
//! request changes nothing.
//!
//! These are sizes and ranges only. The meaning of each field (does the broker exist, is
//! the epoch current, is the ISR legal) is decided by [`crate::logic`] against the image,
//! and the write path bounds what an operation may write
//! ([`keel_metadata_log::limits`]) as a second line of defence.
//!
//! Transport bound: the service decodes at most
//! [`MAX_CONTROLLER_REQUEST_BYTES`](keel_proto::limits::MAX_CONTROLLER_REQUEST_BYTES) per
//! request (above it tonic answers gRPC OUT_OF_RANGE, "decoded message length too large").

use keel_proto::controller::*;
use keel_proto::limits::{
    FieldError, MAX_CLUSTER_ID_LEN, MAX_CONFIG_NAME_LEN, MAX_CONFIG_RESOURCES,
    MAX_CONFIG_VALUE_LEN, MAX_CONFIGS_PER_RESOURCE, MAX_FEATURE_NAME_LEN, MAX_FEATURES,
    MAX_HOST_LEN, MAX_LISTENER_NAME_LEN, MAX_LISTENERS, MAX_PARTITIONS_PER_REQUEST, MAX_RACK_LEN,
    MAX_REPLICAS, MAX_TOPIC_NAME_LEN, MAX_TOPICS_PER_REQUEST, check_count, check_len, check_range,
    check_topic_id,
};

/// Longest `max_wait_ms` of a ReadMetadataLog long poll, ms (5 minutes).
pub const MAX_READ_WAIT_MS: u32 = 300_000;
/// Range of FetchMetadata's `max_bytes_per_item` when not 0 (server default), bytes.
pub const FETCH_METADATA_ITEM_BYTES: std::ops::RangeInclusive<u32> = 1024..=(16 << 20);
/// Most record type names in a ReadMetadataLog filter (there are fewer than 20 types).
pub const MAX_RECORD_TYPES: usize = 64;

/// Longest resource name in a config request: a topic name, a broker id in decimal, or
/// empty for the cluster.
const MAX_RESOURCE_NAME_LEN: usize = MAX_TOPIC_NAME_LEN;

/// Bounds of a RegisterBroker request: `broker_id` >= 0, `cluster_id` at most
/// [`MAX_CLUSTER_ID_LEN`], `incarnation_id` at most 16 bytes (logic wants exactly 16),
/// 1..=[`MAX_LISTENERS`] listeners with a name of at most [`MAX_LISTENER_NAME_LEN`] bytes of
/// `[A-Za-z0-9_-]`, a host of at most [`MAX_HOST_LEN`] bytes of printable ASCII without
/// spaces, a port in 1..=65535 and a security protocol of at most [`MAX_LISTENER_NAME_LEN`];
/// `rack` at most [`MAX_RACK_LEN`]; at most [`MAX_FEATURES`] features with names of at most
/// [`MAX_FEATURE_NAME_LEN`]. Security protocol, rack and feature names are printable ASCII
/// (they are shown by keelctl and in logs: no control characters or escape sequences).
pub fn register_broker(req: &RegisterBrokerRequest) -> Result<(), FieldError> {
    check_range(|| "broker_id".into(), req.broker_id, 0..=i32::MAX)?;
    check_len(|| "cluster_id".into(), &req.cluster_id, MAX_CLUSTER_ID_LEN)?;
    check_count(|| "incarnation_id".into(), req.incarnation_id.len(), 16)?;
    if req.listeners.is_empty() {
        return Err(FieldError::new(
            "listeners",
            "at least one listener is needed",
        ));
    }
    check_count(|| "listeners".into(), req.listeners.len(), MAX_LISTENERS)?;
    for (i, l) in req.listeners.iter().enumerate() {
        check_len(
            || format!("listeners[{i}].name"),
            &l.name,
            MAX_LISTENER_NAME_LEN,
        )?;
        if let Some(c) = l
            .name
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-')))
        {
            return Err(FieldError::new(
                format!("listeners[{i}].name"),
                format!("contains {c:?}; legal characters are [A-Za-z0-9_-]"),
            ));
        }
        check_len(|| format!("listeners[{i}].host"), &l.host, MAX_HOST_LEN)?;
        if let Some(c) = l.host.chars().find(|c| !c.is_ascii_graphic()) {
            return Err(FieldError::new(
                format!("listeners[{i}].host"),
                format!("contains {c:?}; a host name or address is printable ASCII without spaces"),
            ));
        }
        check_range(|| format!("listeners[{i}].port"), l.port, 1..=65_535)?;
        check_len(
            || format!("listeners[{i}].security_protocol"),
            &l.security_protocol,
            MAX_LISTENER_NAME_LEN,
        )?;
        printable(
            || format!("listeners[{i}].security_protocol"),
            &l.security_protocol,
        )?;
    }
    check_len(|| "rack".into(), &req.rack, MAX_RACK_LEN)?;
    printable(|| "rack".into(), &req.rack)?;
    check_count(|| "features".into(), req.features.len(), MAX_FEATURES)?;
    for (i, f) in req.features.iter().enumerate() {
        check_len(
            || format!("features[{i}].name"),
            &f.name,
            MAX_FEATURE_NAME_LEN,
        )?;
        printable(|| format!("features[{i}].name"), &f.name)?;
    }
    Ok(())
}

/// `s` is printable ASCII (spaces allowed): stored strings are shown by `keelctl` and in
/// logs, where control characters or escape sequences could forge lines.
fn printable(field: impl FnOnce() -> String, s: &str) -> Result<(), FieldError> {
    match s.chars().find(|c| !(c.is_ascii_graphic() || *c == ' ')) {
        Some(c) => Err(FieldError::new(
            field(),
            format!("contains {c:?}; only printable ASCII is allowed"),
        )),
        None => Ok(()),
    }
}

/// Bounds of a BrokerHeartbeat: `broker_id` >= 0 (epochs and offsets are judged by logic).
pub fn broker_heartbeat(req: &BrokerHeartbeatRequest) -> Result<(), FieldError> {
    check_range(|| "broker_id".into(), req.broker_id, 0..=i32::MAX)
}

/// Bounds of an UnregisterBroker: `broker_id` >= 0.
pub fn unregister_broker(req: &UnregisterBrokerRequest) -> Result<(), FieldError> {
    check_range(|| "broker_id".into(), req.broker_id, 0..=i32::MAX)
}

/// Bounds of a CreateTopics: at most [`MAX_TOPICS_PER_REQUEST`] topics and
/// [`MAX_PARTITIONS_PER_REQUEST`] explicit assignments over all of them, each of at most
/// [`MAX_REPLICAS`] brokers; per topic at most [`MAX_CONFIGS_PER_RESOURCE`] configs (name at
/// most [`MAX_CONFIG_NAME_LEN`], value at most [`MAX_CONFIG_VALUE_LEN`]). Topic names are
/// judged per topic by logic (INVALID_TOPIC_EXCEPTION, Kafka's code).
pub fn create_topics(req: &CreateTopicsRequest) -> Result<(), FieldError> {
    check_count(|| "topics".into(), req.topics.len(), MAX_TOPICS_PER_REQUEST)?;
    let mut partitions = 0usize;
    for (t, topic) in req.topics.iter().enumerate() {
        partitions += topic.assignments.len();
        check_count(
            || format!("topics[{t}].assignments (over all topics)"),
            partitions,
            MAX_PARTITIONS_PER_REQUEST,
        )?;
        for (a, assignment) in topic.assignments.iter().enumerate() {
            check_count(
                || format!("topics[{t}].assignments[{a}].broker_ids"),
                assignment.broker_ids.len(),
                MAX_REPLICAS,
            )?;
        }
        config_entries(
            || format!("topics[{t}].configs"),
            topic
                .configs
                .iter()
                .map(|c| (c.name.as_str(), c.value.as_deref())),
            topic.configs.len(),
        )?;
    }
    Ok(())
}

/// Bounds of a CreatePartitions: at most [`MAX_TOPICS_PER_REQUEST`] topics, at most
/// [`MAX_PARTITIONS_PER_REQUEST`] assignments over all topics, each of at most
/// [`MAX_REPLICAS`] brokers. Counts are judged per topic by logic (INVALID_PARTITIONS,
/// Kafka's code), and so are names: one that cannot exist (over [`MAX_TOPIC_NAME_LEN`]) is
/// that topic's UNKNOWN_TOPIC_OR_PARTITION, as in Kafka, not a refusal of the whole request
/// (the request's size bounds it).
pub fn create_partitions(req: &CreatePartitionsRequest) -> Result<(), FieldError> {
    check_count(|| "topics".into(), req.topics.len(), MAX_TOPICS_PER_REQUEST)?;
    let mut partitions = 0usize;
    for (t, topic) in req.topics.iter().enumerate() {
        partitions += topic.assignments.len();
        check_count(
            || format!("topics[{t}].assignments (over all topics)"),
            partitions,
            MAX_PARTITIONS_PER_REQUEST,
        )?;
        for (a, assignment) in topic.assignments.iter().enumerate() {
            check_count(
                || format!("topics[{t}].assignments[{a}].broker_ids"),
                assignment.broker_ids.len(),
                MAX_REPLICAS,
            )?;
        }
    }
    Ok(())
}

/// Bounds of a DeleteTopics: at most [`MAX_TOPICS_PER_REQUEST`] topics, topic ids empty or
/// 16 bytes. A name that cannot exist (over [`MAX_TOPIC_NAME_LEN`]) is judged per topic by
/// logic (UNKNOWN_TOPIC_OR_PARTITION, Kafka's answer for a name it does not know; the
/// request's size bounds it), not a refusal of the whole request.
pub fn delete_topics(req: &DeleteTopicsRequest) -> Result<(), FieldError> {
    check_count(|| "topics".into(), req.topics.len(), MAX_TOPICS_PER_REQUEST)?;
    for (t, topic) in req.topics.iter().enumerate() {
        check_topic_id(|| format!("topics[{t}].topic_id"), &topic.topic_id)?;
    }
    Ok(())
}

/// Bounds of an AlterPartition: `broker_id` >= -1 (-1 = operator), at most
/// [`MAX_TOPICS_PER_REQUEST`] topics (id empty or 16 bytes, name at most
/// [`MAX_TOPIC_NAME_LEN`]), at most [`MAX_PARTITIONS_PER_REQUEST`] partitions over all of
/// them, each proposed ISR at most [`MAX_REPLICAS`] members.
pub fn alter_partition(req: &AlterPartitionRequest) -> Result<(), FieldError> {
    check_range(|| "broker_id".into(), req.broker_id, -1..=i32::MAX)?;
    check_count(|| "topics".into(), req.topics.len(), MAX_TOPICS_PER_REQUEST)?;
    let mut partitions = 0usize;
    for (t, topic) in req.topics.iter().enumerate() {
        check_topic_id(|| format!("topics[{t}].topic_id"), &topic.topic_id)?;
        check_len(
            || format!("topics[{t}].topic_name"),
            &topic.topic_name,
            MAX_TOPIC_NAME_LEN,
        )?;
        partitions += topic.partitions.len();
        check_count(
            || format!("topics[{t}].partitions (over all topics)"),
            partitions,
            MAX_PARTITIONS_PER_REQUEST,
        )?;
        for (p, part) in topic.partitions.iter().enumerate() {
            check_count(
                || format!("topics[{t}].partitions[{p}].new_isr_with_epochs"),
                part.new_isr_with_epochs.len(),
                MAX_REPLICAS,
            )?;
        }
    }
    Ok(())
}

/// The bound shared by requests that name topics and partitions of them: at most
/// [`MAX_TOPICS_PER_REQUEST`] topics in `list`, each name (field `name_field`) at most
/// [`MAX_TOPIC_NAME_LEN`] bytes, and [`MAX_PARTITIONS_PER_REQUEST`] partitions (field
/// `parts_field`) over all of them. `topics` gives each topic's name and partition count.
fn topics_and_partitions<'a>(
    list: &str,
    name_field: &str,
    parts_field: &str,
    topics: impl ExactSizeIterator<Item = (&'a str, usize)>,
) -> Result<(), FieldError> {
    check_count(|| list.into(), topics.len(), MAX_TOPICS_PER_REQUEST)?;
    let mut partitions = 0usize;
    for (t, (name, count)) in topics.enumerate() {
        check_len(
            || format!("{list}[{t}].{name_field}"),
            name,
            MAX_TOPIC_NAME_LEN,
        )?;
        partitions += count;
        check_count(
            || format!("{list}[{t}].{parts_field} (over all topics)"),
            partitions,
            MAX_PARTITIONS_PER_REQUEST,
        )?;
    }
    Ok(())
}

/// Bounds of an ElectLeaders: at most [`MAX_TOPICS_PER_REQUEST`] topics (names at most
/// [`MAX_TOPIC_NAME_LEN`]) and [`MAX_PARTITIONS_PER_REQUEST`] partitions over all of them.
pub fn elect_leaders(req: &ElectLeadersRequest) -> Result<(), FieldError> {
    topics_and_partitions(
        "topic_partitions",
        "topic",
        "partitions",
        req.topic_partitions
            .iter()
            .map(|t| (t.topic.as_str(), t.partitions.len())),
    )
}

/// Bounds of an AlterPartitionReassignments: at most [`MAX_TOPICS_PER_REQUEST`] topics (names
/// at most [`MAX_TOPIC_NAME_LEN`]) and [`MAX_PARTITIONS_PER_REQUEST`] partitions over all of
/// them, each target at most [`MAX_REPLICAS`] brokers.
pub fn alter_partition_reassignments(
    req: &AlterPartitionReassignmentsRequest,
) -> Result<(), FieldError> {
    topics_and_partitions(
        "topics",
        "name",
        "partitions",
        req.topics
            .iter()
            .map(|t| (t.name.as_str(), t.partitions.len())),
    )?;
    for (t, topic) in req.topics.iter().enumerate() {
        for (p, part) in topic.partitions.iter().enumerate() {
            if let Some(r) = &part.replicas {
                check_count(
                    || format!("topics[{t}].partitions[{p}].replicas"),
                    r.ids.len(),
                    MAX_REPLICAS,
                )?;
            }
        }
    }
    Ok(())
}

/// Bounds of a ListPartitionReassignments: at most [`MAX_TOPICS_PER_REQUEST`] topics (names at
/// most [`MAX_TOPIC_NAME_LEN`]) and [`MAX_PARTITIONS_PER_REQUEST`] partitions over all.
pub fn list_partition_reassignments(
    req: &ListPartitionReassignmentsRequest,
) -> Result<(), FieldError> {
    topics_and_partitions(
        "topics",
        "name",
        "partition_indexes",
        req.topics
            .iter()
            .map(|t| (t.name.as_str(), t.partition_indexes.len())),
    )
}

/// Bounds of an AlterConfigs: at most [`MAX_CONFIG_RESOURCES`] resources (names at most
/// [`MAX_TOPIC_NAME_LEN`]), each with at most [`MAX_CONFIGS_PER_RESOURCE`] entries (name at
/// most [`MAX_CONFIG_NAME_LEN`], value at most [`MAX_CONFIG_VALUE_LEN`]).
pub fn alter_configs(req: &AlterConfigsRequest) -> Result<(), FieldError> {
    check_count(
        || "resources".into(),
        req.resources.len(),
        MAX_CONFIG_RESOURCES,
    )?;
    for (r, res) in req.resources.iter().enumerate() {
        check_len(
            || format!("resources[{r}].resource_name"),
            &res.resource_name,
            MAX_RESOURCE_NAME_LEN,
        )?;
        config_entries(
            || format!("resources[{r}].configs"),
            res.configs
                .iter()
                .map(|c| (c.name.as_str(), c.value.as_deref())),
            res.configs.len(),
        )?;
    }
    Ok(())
}

/// Bounds of a DescribeConfigs: at most [`MAX_CONFIG_RESOURCES`] resources (names at most
/// [`MAX_TOPIC_NAME_LEN`]), each naming at most [`MAX_CONFIGS_PER_RESOURCE`] keys of at most
/// [`MAX_CONFIG_NAME_LEN`]; `answering_broker`, when set, at least 0.
pub fn describe_configs(req: &DescribeConfigsRequest) -> Result<(), FieldError> {
    if let Some(id) = req.answering_broker {
        check_range(|| "answering_broker".into(), id, 0..=i32::MAX)?;
    }
    check_count(
        || "resources".into(),
        req.resources.len(),
        MAX_CONFIG_RESOURCES,
    )?;
    for (r, res) in req.resources.iter().enumerate() {
        check_len(
            || format!("resources[{r}].resource_name"),
            &res.resource_name,
            MAX_RESOURCE_NAME_LEN,
        )?;
        config_entries(
            || format!("resources[{r}].configuration_keys"),
            res.configuration_keys.iter().map(|k| (k.as_str(), None)),
            res.configuration_keys.len(),
        )?;
    }
    Ok(())
}

/// Bounds of an AllocateProducerIds: `broker_id` >= 0.
pub fn allocate_producer_ids(req: &AllocateProducerIdsRequest) -> Result<(), FieldError> {
    check_range(|| "broker_id".into(), req.broker_id, 0..=i32::MAX)
}

/// Bounds of a FetchMetadata: `from_offset` >= 0, `max_bytes_per_item` 0 (default) or in
/// [`FETCH_METADATA_ITEM_BYTES`].
pub fn fetch_metadata(req: &FetchMetadataRequest) -> Result<(), FieldError> {
    check_range(|| "from_offset".into(), req.from_offset, 0..=i64::MAX)?;
    if req.max_bytes_per_item != 0 {
        check_range(
            || "max_bytes_per_item".into(),
            req.max_bytes_per_item,
            FETCH_METADATA_ITEM_BYTES,
        )?;
    }
    Ok(())
}

/// Bounds of a ReadMetadataLog: at most [`MAX_RECORD_TYPES`] type names (each at most 64
/// bytes), `topic_name` at most [`MAX_TOPIC_NAME_LEN`], `max_wait_ms` at most
/// [`MAX_READ_WAIT_MS`]. Offsets are judged by the read (OFFSET_OUT_OF_RANGE).
pub fn read_metadata_log(req: &ReadMetadataLogRequest) -> Result<(), FieldError> {
    check_count(
        || "record_types".into(),
        req.record_types.len(),
        MAX_RECORD_TYPES,
    )?;
    for (i, t) in req.record_types.iter().enumerate() {
        check_len(|| format!("record_types[{i}]"), t, 64)?;
    }
    check_len(|| "topic_name".into(), &req.topic_name, MAX_TOPIC_NAME_LEN)?;
    check_range(
        || "max_wait_ms".into(),
        req.max_wait_ms,
        0..=MAX_READ_WAIT_MS,
    )?;
    Ok(())
}

/// At most [`MAX_CONFIGS_PER_RESOURCE`] entries, names at most [`MAX_CONFIG_NAME_LEN`],
/// values at most [`MAX_CONFIG_VALUE_LEN`].
fn config_entries<'a>(
    field: impl Fn() -> String,
    entries: impl Iterator<Item = (&'a str, Option<&'a str>)>,
    count: usize,
) -> Result<(), FieldError> {
    check_count(&field, count, MAX_CONFIGS_PER_RESOURCE)?;
    for (i, (name, value)) in entries.enumerate() {
        check_len(
            || format!("{}[{i}].name", field()),
            name,
            MAX_CONFIG_NAME_LEN,
        )?;
        if let Some(v) = value {
            check_len(
                || format!("{}[{i}].value", field()),
                v,
                MAX_CONFIG_VALUE_LEN,
            )?;
        }
    }
    Ok(())
}

/// Bounds of a CreateAcls: 1..=[`MAX_ACLS_PER_REQUEST`](crate::logic::acls::MAX_ACLS_PER_REQUEST)
/// creations; each binding is judged by logic (INVALID_REQUEST per creation).
pub fn create_acls(req: &CreateAclsRequest) -> Result<(), FieldError> {
    check_range(
        || "creations (count)".into(),
        req.creations.len(),
        1..=crate::logic::acls::MAX_ACLS_PER_REQUEST,
    )
}

/// Bounds of a DeleteAcls: 1..=[`MAX_ACLS_PER_REQUEST`](crate::logic::acls::MAX_ACLS_PER_REQUEST)
/// filters.
pub fn delete_acls(req: &DeleteAclsRequest) -> Result<(), FieldError> {
    check_range(
        || "filters (count)".into(),
        req.filters.len(),
        1..=crate::logic::acls::MAX_ACLS_PER_REQUEST,
    )
}

/// Longest user name AlterUserScramCredentials and DescribeUserScramCredentials take before
/// logic judges it (a longer one is refused whole instead of echoed back in a result).
pub const MAX_SCRAM_USER_FIELD_BYTES: usize = 1024;
/// Longest salt or salted password taken before logic checks its exact length, bytes.
pub const MAX_SCRAM_BYTES_FIELD: usize = 1024;

/// Bounds of an AlterUserScramCredentials: 1..=[`MAX_SCRAM_CHANGES_PER_REQUEST`] deletions
/// plus upsertions; names at most [`MAX_SCRAM_USER_FIELD_BYTES`], salts and salted passwords
/// at most [`MAX_SCRAM_BYTES_FIELD`] bytes. Credential rules are logic's (per user).
///
/// [`MAX_SCRAM_CHANGES_PER_REQUEST`]: crate::logic::scram::MAX_SCRAM_CHANGES_PER_REQUEST
pub fn alter_user_scram_credentials(
    req: &AlterUserScramCredentialsRequest,
) -> Result<(), FieldError> {
    check_range(
        || "deletions + upsertions (count)".into(),
        req.deletions.len() + req.upsertions.len(),
        1..=crate::logic::scram::MAX_SCRAM_CHANGES_PER_REQUEST,
    )?;
    for (i, d) in req.deletions.iter().enumerate() {
        check_len(
            || format!("deletions[{i}].name"),
            &d.name,
            MAX_SCRAM_USER_FIELD_BYTES,
        )?;
    }
    for (i, u) in req.upsertions.iter().enumerate() {
        check_len(
            || format!("upsertions[{i}].name"),
            &u.name,
            MAX_SCRAM_USER_FIELD_BYTES,
        )?;
        check_range(
            || format!("upsertions[{i}].salt (bytes)"),
            u.salt.len(),
            0..=MAX_SCRAM_BYTES_FIELD,
        )?;
        check_range(
            || format!("upsertions[{i}].salted_password (bytes)"),
            u.salted_password.len(),
            0..=MAX_SCRAM_BYTES_FIELD,
        )?;
    }
    Ok(())
}

/// Bounds of a DescribeUserScramCredentials: at most
/// [`MAX_SCRAM_CHANGES_PER_REQUEST`](crate::logic::scram::MAX_SCRAM_CHANGES_PER_REQUEST)
/// users of at most [`MAX_SCRAM_USER_FIELD_BYTES`] each.
pub fn describe_user_scram_credentials(
    req: &DescribeUserScramCredentialsRequest,
) -> Result<(), FieldError> {
    check_range(
        || "users (count)".into(),
        req.users.len(),
        0..=crate::logic::scram::MAX_SCRAM_CHANGES_PER_REQUEST,
    )?;
    for (i, u) in req.users.iter().enumerate() {
        check_len(|| format!("users[{i}]"), u, MAX_SCRAM_USER_FIELD_BYTES)?;
    }
    Ok(())
}

/// Bounds of a ScramAuthenticate: each SCRAM message at most
/// [`MAX_CLIENT_MESSAGE_BYTES`](keel_metadata_log::scram::MAX_CLIENT_MESSAGE_BYTES), the
/// server nonce at most 256 bytes and the MAC at most 64.
pub fn scram_authenticate(req: &ScramAuthenticateRequest) -> Result<(), FieldError> {
    let max = keel_metadata_log::scram::MAX_CLIENT_MESSAGE_BYTES;
    check_range(
        || "client_first (bytes)".into(),
        req.client_first.len(),
        0..=max,
    )?;
    check_range(
        || "client_final (bytes)".into(),
        req.client_final.len(),
        0..=max,
    )?;
    check_len(|| "server_nonce".into(), &req.server_nonce, 256)?;
    check_range(
        || "exchange_mac (bytes)".into(),
        req.exchange_mac.len(),
        0..=64,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_proto::metadata::BrokerEndpoint;

    fn registration() -> RegisterBrokerRequest {
        RegisterBrokerRequest {
            broker_id: 1,
            incarnation_id: vec![7; 16].into(),
            listeners: vec![BrokerEndpoint {
                name: "PLAINTEXT".into(),
                host: "broker-1.example".into(),
                port: 9092,
                security_protocol: "PLAINTEXT".into(),
            }],
            rack: "r1".into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_normal_registration_passes() {
        register_broker(&registration()).unwrap();
    }

    #[test]
    fn every_bounded_registration_field_names_itself() {
        type Mutation = Box<dyn Fn(&mut RegisterBrokerRequest)>;
        let cases: Vec<(&str, Mutation)> = vec![
            ("broker_id", Box::new(|r| r.broker_id = -5)),
            ("cluster_id", Box::new(|r| r.cluster_id = "c".repeat(65))),
            (
                "incarnation_id",
                Box::new(|r| r.incarnation_id = vec![1; 17].into()),
            ),
            ("listeners", Box::new(|r| r.listeners.clear())),
            (
                "listeners",
                Box::new(|r| r.listeners = vec![r.listeners[0].clone(); 17]),
            ),
            (
                "listeners[0].host",
                Box::new(|r| r.listeners[0].host = "h".repeat(20 << 20)),
            ),
            (
                "listeners[0].host",
                Box::new(|r| r.listeners[0].host = "a b".into()),
            ),
            (
                "listeners[0].name",
                Box::new(|r| r.listeners[0].name = "n".repeat(256)),
            ),
            (
                "listeners[0].name",
                Box::new(|r| r.listeners[0].name = "PLAIN TEXT".into()),
            ),
            ("listeners[0].port", Box::new(|r| r.listeners[0].port = 0)),
            (
                "listeners[0].port",
                Box::new(|r| r.listeners[0].port = 70_000),
            ),
            (
                "listeners[0].security_protocol",
                Box::new(|r| r.listeners[0].security_protocol = "s".repeat(256)),
            ),
            ("rack", Box::new(|r| r.rack = "r".repeat(4 << 20))),
            (
                "rack",
                Box::new(|r| r.rack = "r1\nERROR forged\x1b[31m".into()),
            ),
            (
                "listeners[0].host",
                Box::new(|r| r.listeners[0].host = "h\u{202e}ost".into()),
            ),
            (
                "listeners[0].security_protocol",
                Box::new(|r| r.listeners[0].security_protocol = "PLAIN\nTEXT\x07".into()),
            ),
            (
                "features",
                Box::new(|r| r.features = vec![SupportedFeature::default(); 65]),
            ),
            (
                "features[0].name",
                Box::new(|r| {
                    r.features = vec![SupportedFeature {
                        name: "f".repeat(256),
                        ..Default::default()
                    }]
                }),
            ),
        ];
        for (field, mutate) in cases {
            let mut req = registration();
            mutate(&mut req);
            let e = register_broker(&req).unwrap_err();
            assert_eq!(e.field, field, "{e}");
            // Echoed input is clipped.
            assert!(e.to_string().len() < 300, "{e}");
        }
    }

    #[test]
    fn hosts_and_racks_at_the_limit_pass() {
        let mut req = registration();
        req.listeners[0].host = "h".repeat(MAX_HOST_LEN);
        req.rack = "r".repeat(MAX_RACK_LEN);
        register_broker(&req).unwrap();
    }

    #[test]
    fn config_values_and_counts_are_bounded() {
        let mut req = AlterConfigsRequest {
            resources: vec![AlterConfigsResource {
                resource_name: "t".into(),
                configs: vec![AlterableConfig {
                    name: "retention.ms".into(),
                    value: Some("v".repeat(MAX_CONFIG_VALUE_LEN + 1)),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            validate_only: false,
        };
        assert_eq!(
            alter_configs(&req).unwrap_err().field,
            "resources[0].configs[0].value"
        );
        req.resources[0].configs[0].value = Some("1000".into());
        alter_configs(&req).unwrap();
        req.resources[0].configs = vec![AlterableConfig::default(); MAX_CONFIGS_PER_RESOURCE + 1];
        assert_eq!(
            alter_configs(&req).unwrap_err().field,
            "resources[0].configs"
        );
    }

    #[test]
    fn partition_counts_add_up_over_topics() {
        let topic = |n: usize| ElectTopicPartitions {
            topic: "t".into(),
            partitions: vec![0; n],
        };
        let mut req = ElectLeadersRequest {
            topic_partitions: vec![topic(MAX_PARTITIONS_PER_REQUEST / 2); 2],
            ..Default::default()
        };
        elect_leaders(&req).unwrap();
        req.topic_partitions.push(topic(1));
        assert_eq!(
            elect_leaders(&req).unwrap_err().field,
            "topic_partitions[2].partitions (over all topics)"
        );
    }

    #[test]
    fn reassignment_requests_are_bounded() {
        let part = |n: usize| ReassignablePartition {
            partition_index: 0,
            replicas: Some(keel_proto::metadata::ReplicaList { ids: vec![1; n] }),
        };
        let mut req = AlterPartitionReassignmentsRequest {
            topics: vec![ReassignableTopic {
                name: "t".into(),
                partitions: vec![part(MAX_REPLICAS)],
            }],
        };
        alter_partition_reassignments(&req).unwrap();
        req.topics[0].partitions.push(part(MAX_REPLICAS + 1));
        assert_eq!(
            alter_partition_reassignments(&req).unwrap_err().field,
            "topics[0].partitions[1].replicas"
        );
        req.topics[0].name = "x".repeat(MAX_TOPIC_NAME_LEN + 1);
        assert_eq!(
            alter_partition_reassignments(&req).unwrap_err().field,
            "topics[0].name"
        );
        let list = ListPartitionReassignmentsRequest {
            topics: vec![
                ListPartitionReassignmentsTopics {
                    name: "t".into(),
                    partition_indexes: vec![0; MAX_PARTITIONS_PER_REQUEST],
                },
                ListPartitionReassignmentsTopics {
                    name: "u".into(),
                    partition_indexes: vec![0],
                },
            ],
        };
        assert_eq!(
            list_partition_reassignments(&list).unwrap_err().field,
            "topics[1].partition_indexes (over all topics)"
        );
    }

    #[test]
    fn reads_are_bounded() {
        let mut req = ReadMetadataLogRequest {
            max_wait_ms: MAX_READ_WAIT_MS + 1,
            ..Default::default()
        };
        assert_eq!(read_metadata_log(&req).unwrap_err().field, "max_wait_ms");
        req.max_wait_ms = 1000;
        read_metadata_log(&req).unwrap();
        let fetch = FetchMetadataRequest {
            max_bytes_per_item: 1,
            ..Default::default()
        };
        assert_eq!(
            fetch_metadata(&fetch).unwrap_err().field,
            "max_bytes_per_item"
        );
    }
}
