//! CreatePartitions (KIP-195; Kafka `ReplicationControlManager.createPartitions`): adds
//! partitions to existing topics, never removes or moves any.
//!
//! Per topic, in request order, each judged on its own (one refused topic does not stop the
//! others): the name is given once, the topic exists, the new count is above the current one
//! and at most [`MAX_PARTITION_COUNT`]; the new partitions' replicas are the explicit
//! assignments (checked like CreateTopics' ones, each as long as the topic's replication
//! factor) or are placed like CreateTopics places them, starting the round-robin after the
//! existing partitions. Each new partition is one PartitionRecord (ISR = the eligible
//! replicas, leader = the first of them, epochs 0). `validate_only` writes nothing and answers
//! the operation limits as the real request would be answered.

use std::collections::BTreeMap;

use keel_metadata_log::MetadataImage;
use keel_proto::ErrorCode;
use keel_proto::controller::{
    CreatePartitionsReply, CreatePartitionsRequest, CreatePartitionsTopic,
    CreatePartitionsTopicResult,
};
use keel_proto::metadata::MetadataRecord;

use super::result::{exceeds_operation_limits, operation_limits_message};
use super::topics::{
    Refusal, ReplicasAndIsr, check_assignment, new_partition_record, place_replicas, usable_brokers,
};
use super::{ControllerResult, error};

/// Most partitions a topic may reach through CreatePartitions (the scale Keel is built for,
/// issue #26: 100,000 partitions in a cluster). One request still writes at most
/// [`MAX_RECORDS_PER_OPERATION`](super::result::MAX_RECORDS_PER_OPERATION) records.
pub const MAX_PARTITION_COUNT: i32 = 100_000;

/// Decides a CreatePartitions request (see the module doc). `placement_start` rotates the
/// first broker of automatic placement between calls, as for CreateTopics.
/// `metadata_offset` in the reply is -1: the caller sets it with [`set_added_offsets`].
pub fn create_partitions(
    image: &MetadataImage,
    req: &CreatePartitionsRequest,
    placement_start: usize,
) -> ControllerResult<CreatePartitionsReply> {
    let mut name_counts: BTreeMap<&str, usize> = BTreeMap::new();
    for t in &req.topics {
        *name_counts.entry(t.name.as_str()).or_default() += 1;
    }
    let usable = usable_brokers(image);
    let mut records = Vec::new();
    let mut results = Vec::with_capacity(req.topics.len());
    for (i, t) in req.topics.iter().enumerate() {
        let outcome = if name_counts[t.name.as_str()] > 1 {
            Err((
                ErrorCode::InvalidRequest,
                format!(
                    "topic {:?} named more than once",
                    keel_proto::limits::clip(&t.name)
                ),
            ))
        } else {
            add_partitions(image, t, &usable, placement_start.wrapping_add(i))
        };
        let error = match outcome {
            Ok(new) => {
                // Written for a validate_only request too, to answer the size limits as the
                // real request would; dropped below.
                records.extend(new);
                None
            }
            Err((code, msg)) => error(code, msg),
        };
        results.push(CreatePartitionsTopicResult {
            name: t.name.clone(),
            error,
            metadata_offset: -1,
        });
    }
    if req.validate_only {
        let error = exceeds_operation_limits(&records)
            .then(|| ErrorCode::PolicyViolation.to_proto(operation_limits_message()));
        return ControllerResult::new(
            Vec::new(),
            CreatePartitionsReply {
                error,
                results,
                ..Default::default()
            },
        );
    }
    ControllerResult::new(
        records,
        CreatePartitionsReply {
            results,
            ..Default::default()
        },
    )
}

/// Sets `metadata_offset` of every topic that got partitions to `offset`, the committed entry
/// holding their records; `validate_only` requests and refused topics keep -1.
pub fn set_added_offsets(reply: &mut CreatePartitionsReply, validate_only: bool, offset: u64) {
    if validate_only {
        return;
    }
    for r in &mut reply.results {
        if r.error.is_none() {
            r.metadata_offset = offset as i64;
        }
    }
}

/// The PartitionRecords that grow topic `t.name` to `t.count` partitions.
fn add_partitions(
    image: &MetadataImage,
    t: &CreatePartitionsTopic,
    usable: &[(i32, Option<String>)],
    start: usize,
) -> Result<Vec<MetadataRecord>, Refusal> {
    let name = keel_proto::limits::clip(&t.name);
    let topic = image.topics().get_by_name(&t.name).ok_or_else(|| {
        (
            ErrorCode::UnknownTopicOrPartition,
            format!("topic {name:?} does not exist"),
        )
    })?;
    let current = topic.partitions.len() as i32;
    let invalid = |msg: String| Err((ErrorCode::InvalidPartitions, msg));
    if t.count == current {
        return invalid(format!("topic {name:?} already has {current} partitions"));
    }
    if t.count < current {
        return invalid(format!(
            "topic {name:?} has {current} partitions; {} would remove some, and partitions \
             can only be added",
            t.count
        ));
    }
    if t.count > MAX_PARTITION_COUNT {
        return invalid(format!(
            "{} partitions is more than the {MAX_PARTITION_COUNT} a topic may have",
            t.count
        ));
    }
    let added = (t.count - current) as usize;
    // The topic's replication factor: its first partition's (Kafka does the same).
    let rf = topic
        .partitions
        .values()
        .next()
        .map_or(1, |p| p.replicas.len());
    let plan: Vec<ReplicasAndIsr> = if t.assignments.is_empty() {
        if rf > usable.len() {
            return Err((
                ErrorCode::InvalidReplicationFactor,
                format!(
                    "the topic's replication factor {rf} is larger than the {} usable \
                     (unfenced) broker(s)",
                    usable.len()
                ),
            ));
        }
        place_replicas(usable, added, rf, start.wrapping_add(current as usize))
            .into_iter()
            .map(|r| (r.clone(), r))
            .collect()
    } else {
        if t.assignments.len() != added {
            return Err((
                ErrorCode::InvalidReplicaAssignment,
                format!(
                    "{added} partition(s) would be added, but {} assignment(s) were given",
                    t.assignments.len()
                ),
            ));
        }
        t.assignments
            .iter()
            .enumerate()
            .map(|(k, a)| check_assignment(image, current + k as i32, &a.broker_ids, rf))
            .collect::<Result<_, _>>()?
    };
    Ok(plan
        .iter()
        .enumerate()
        .map(|(k, p)| new_partition_record(topic.id, current + k as i32, p))
        .collect())
}
