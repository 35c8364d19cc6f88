//! CreateTopics and DeleteTopics: name rules, partition/replication checks, replica
//! placement (Kafka: `ReplicationControlManager.createTopic` / `deleteTopic`, `Topic.validate`,
//! and the round-robin / rack-alternating assignment of `AdminUtils.assignReplicasToBrokers`).
//!
//! Placement over the usable brokers (registered, unfenced, not in controlled shutdown),
//! sorted by id, for `n` brokers, replication factor `rf` and a caller-chosen `start`:
//! - without racks: partition `p`'s first replica is broker `(p + start) % n`; the others
//!   follow at a shift that grows by one every `n` partitions, so leaders and followers both
//!   spread evenly;
//! - with racks (every usable broker has one): the same walk over a rack-alternating broker
//!   list (first broker of each rack in rack order, then the second of each, ...), and a
//!   follower is skipped while its rack already holds a replica and some rack holds none.
//!
//! New partitions get `leader = replicas[0]`, `isr = replicas`, epochs 0 (explicit
//! assignments: ISR = the eligible members, leader = the first of them).

use std::collections::{BTreeMap, BTreeSet};

use keel_metadata_log::MetadataImage;
use keel_metadata_log::image::{uuid_bytes, uuid_from_bytes};
use keel_proto::ErrorCode;
use keel_proto::controller::{
    CreatableTopic, CreatableTopicResult, CreateTopicsReply, CreateTopicsRequest,
    DeletableTopicResult, DeleteTopicsReply, DeleteTopicsRequest,
};
use keel_proto::metadata::{
    ConfigRecord, ConfigResourceType, MetadataRecord, PartitionRecord, RemoveTopicRecord,
    TopicRecord, metadata_record::Record,
};
use uuid::Uuid;

use super::configs::{effective_configs_for_new_topic, validate_new_topic_configs};
use super::result::{exceeds_operation_limits, operation_limits_message};
use super::{ControllerResult, error, is_eligible, record};

pub use keel_proto::limits::{MAX_TOPIC_NAME_LEN, validate_topic_name};

/// Most partitions one CreateTopics topic may ask for: the topic's records (its TopicRecord, a
/// ConfigRecord per topic config, a PartitionRecord per partition) must fit in one user
/// operation of [`MAX_RECORDS_PER_OPERATION`](super::result::MAX_RECORDS_PER_OPERATION)
/// records (Kafka: `QuorumController.MAX_RECORDS_PER_USER_OP`, 10,000, KIP-868): 9,982 with
/// the 17 topic configs Keel knows (9,990 before the 4 compaction configs, 9,986 before the
/// 2 throttled-replicas lists, 9,984 before `compression.type` and
/// `message.timestamp.type`).
/// It was 10,000, which no create could reach (POLICY_VIOLATION for 10,001 records).
pub const MAX_PARTITIONS_PER_TOPIC: i32 =
    (super::result::MAX_RECORDS_PER_OPERATION - 1 - super::configs::TOPIC_CONFIG_COUNT) as i32;

/// How many topic ids the id source may propose before a creation gives up (a collision
/// with a random UUID is astronomically unlikely; this only bounds a broken source).
pub const MAX_TOPIC_ID_ATTEMPTS: usize = 16;

/// Cluster defaults for `-1` in CreateTopics (Kafka: `num.partitions`,
/// `default.replication.factor`; both 1 by default).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopicDefaults {
    /// Partitions when the request says -1.
    pub num_partitions: i32,
    /// Replication factor when the request says -1.
    pub replication_factor: i32,
}

impl Default for TopicDefaults {
    fn default() -> Self {
        Self {
            num_partitions: 1,
            replication_factor: 1,
        }
    }
}

/// The metadata log's name (Kafka: `Topic.CLUSTER_METADATA_TOPIC_NAME`); CreateTopics refuses
/// it with INVALID_REQUEST.
pub const CLUSTER_METADATA_TOPIC: &str = "__cluster_metadata";

/// Replica lists for `num_partitions` partitions of `rf` replicas over `brokers` (id, rack),
/// following the module doc. Preconditions: `brokers` sorted by id without duplicates,
/// `1 <= rf <= brokers.len()`.
pub fn place_replicas(
    brokers: &[(i32, Option<String>)],
    num_partitions: usize,
    rf: usize,
    start: usize,
) -> Vec<Vec<i32>> {
    assert!(
        rf >= 1 && rf <= brokers.len(),
        "rf {rf} over {} brokers",
        brokers.len()
    );
    let n = brokers.len();
    let rack_aware = brokers.iter().all(|(_, r)| r.is_some());
    let (arranged, num_racks) = if rack_aware {
        rack_alternated(brokers)
    } else {
        (brokers.iter().map(|(id, _)| *id).collect(), 1)
    };
    let rack_of: BTreeMap<i32, &str> = brokers
        .iter()
        .map(|(id, r)| (*id, r.as_deref().unwrap_or("")))
        .collect();
    let start_index = start % n;
    let mut shift = start % n;
    let mut out = Vec::with_capacity(num_partitions);
    for p in 0..num_partitions {
        if p > 0 && p % n == 0 {
            shift += 1;
        }
        let first = (p + start_index) % n;
        let mut replicas = Vec::with_capacity(rf);
        replicas.push(arranged[first]);
        if !rack_aware {
            for j in 0..rf - 1 {
                replicas.push(arranged[follower_index(first, shift, j, n)]);
            }
        } else {
            let mut racks: BTreeSet<&str> = BTreeSet::from([rack_of[&arranged[first]]]);
            let mut k = 0;
            // Each follower is found within n - 1 steps (module doc); bound the walk anyway.
            let max_steps = rf * n + n;
            while replicas.len() < rf && k < max_steps {
                let b = arranged[follower_index(first, shift * num_racks, k, n)];
                let rack = rack_of[&b];
                let rack_ok = !racks.contains(rack) || racks.len() == num_racks;
                if rack_ok && !replicas.contains(&b) {
                    replicas.push(b);
                    racks.insert(rack);
                }
                k += 1;
            }
            debug_assert_eq!(replicas.len(), rf, "rack-aware walk did not finish");
        }
        out.push(replicas);
    }
    out
}

/// Index of the `j`-th follower for first replica `first` at `shift` over `n` brokers: never
/// `first` itself (Kafka: `AdminUtils.replicaIndex`).
fn follower_index(first: usize, shift: usize, j: usize, n: usize) -> usize {
    (first + 1 + (shift + j) % (n - 1)) % n
}

/// The rack-alternating list: racks in name order, brokers of a rack in id order, taking one
/// broker from each rack per round. Returns the list and the number of racks.
fn rack_alternated(brokers: &[(i32, Option<String>)]) -> (Vec<i32>, usize) {
    let mut by_rack: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for (id, rack) in brokers {
        by_rack
            .entry(rack.as_deref().unwrap_or(""))
            .or_default()
            .push(*id);
    }
    let rounds = by_rack.values().map(Vec::len).max().unwrap_or(0);
    let mut out = Vec::with_capacity(brokers.len());
    for i in 0..rounds {
        for ids in by_rack.values() {
            if let Some(&b) = ids.get(i) {
                out.push(b);
            }
        }
    }
    (out, by_rack.len())
}

/// CreateTopics (Kafka v7). Per topic, in this order (`CreatableTopicResult.error`; a failed
/// topic writes nothing, the others still proceed):
/// - name given twice in the request -> INVALID_REQUEST;
/// - illegal name (see [`validate_topic_name`]), or a name that differs from an existing one
///   only by `.` vs `_` (Kafka's metric-name collision rule, `Topic.hasCollision`) ->
///   INVALID_TOPIC_EXCEPTION; two new names in one request that collide that way are both
///   refused the same way (Kafka compares only with existing topics; accepting both would
///   create exactly the collision the rule forbids);
/// - existing name -> TOPIC_ALREADY_EXISTS;
/// - `assignments` together with `num_partitions`/`replication_factor` other than -1 ->
///   INVALID_REQUEST; assignments with gaps, duplicates, empty or unequal lists, duplicate or
///   unregistered brokers, or no eligible broker in a list -> INVALID_REPLICA_ASSIGNMENT;
/// - `num_partitions` 0, below -1, or above [`MAX_PARTITIONS_PER_TOPIC`] -> INVALID_PARTITIONS
///   (-1 = `defaults.num_partitions`);
/// - `replication_factor` 0, below -1, or above the number of usable brokers ->
///   INVALID_REPLICATION_FACTOR (-1 = `defaults.replication_factor`);
/// - config overrides: unknown key, null or invalid value -> INVALID_CONFIG.
///
/// Records per created topic: `TopicRecord`, its `ConfigRecord`s, one `PartitionRecord` per
/// partition; nothing for `validate_only` (the reply is the same, including a topic id).
/// Topic ids come from `new_topic_id` (nil, existing or repeated ids are skipped, at most
/// [`MAX_TOPIC_ID_ATTEMPTS`] tries, then UNKNOWN_SERVER_ERROR). `placement_start` picks the
/// first broker of the round-robin (Kafka picks it at random; pass a random or rotating
/// value). `metadata_offset` in the reply is -1: the caller sets it with
/// [`set_created_offsets`].
pub fn create_topics(
    image: &MetadataImage,
    req: &CreateTopicsRequest,
    defaults: &TopicDefaults,
    new_topic_id: &mut dyn FnMut() -> Uuid,
    placement_start: usize,
) -> ControllerResult<CreateTopicsReply> {
    let mut name_counts: BTreeMap<&str, usize> = BTreeMap::new();
    // Distinct requested names by their collision form ('.' -> '_').
    let mut by_collision_form: BTreeMap<String, BTreeSet<&str>> = BTreeMap::new();
    for t in &req.topics {
        *name_counts.entry(t.name.as_str()).or_default() += 1;
        by_collision_form
            .entry(collision_form(&t.name))
            .or_default()
            .insert(t.name.as_str());
    }
    let usable = usable_brokers(image);
    let mut used_ids: BTreeSet<Uuid> = BTreeSet::new();
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
            let colliding = by_collision_form[&collision_form(&t.name)]
                .iter()
                .copied()
                .find(|n| *n != t.name);
            let start = placement_start.wrapping_add(i);
            create_one(image, t, colliding, defaults, &usable, start).and_then(|plan| {
                let id = fresh_topic_id(image, &used_ids, new_topic_id).ok_or((
                    ErrorCode::UnknownServerError,
                    "could not draw an unused topic id".to_string(),
                ))?;
                used_ids.insert(id);
                Ok((id, plan))
            })
        };
        match outcome {
            Ok((id, plan)) => {
                let result = CreatableTopicResult {
                    name: t.name.clone(),
                    topic_id: uuid_bytes(id),
                    error: None,
                    num_partitions: plan.partitions.len() as i32,
                    replication_factor: plan.replication_factor as i32,
                    configs: effective_configs_for_new_topic(image, &plan.configs),
                    metadata_offset: -1,
                };
                // Written for a validate_only request too, to answer the size limits as the
                // real creation would; dropped below.
                plan.write(&t.name, id, &mut records);
                results.push(result);
            }
            Err((code, msg)) => results.push(CreatableTopicResult {
                // The name as sent, however long: clients pair results with their request by
                // name (Kafka's CreateTopicsResponse); messages quote it clipped (#18 item 6).
                name: t.name.clone(),
                topic_id: bytes::Bytes::new(),
                error: error(code, msg),
                num_partitions: -1,
                replication_factor: -1,
                configs: Vec::new(),
                metadata_offset: -1,
            }),
        }
    }
    if req.validate_only {
        // What the real request would be refused for by the write path, answered without
        // writing (Kafka checks `validateOnly` creations only per topic; a dry run that
        // succeeds where the real one fails is no dry run).
        let error = exceeds_operation_limits(&records)
            .then(|| ErrorCode::PolicyViolation.to_proto(operation_limits_message()));
        return ControllerResult::new(
            Vec::new(),
            CreateTopicsReply {
                error,
                topics: results,
                ..Default::default()
            },
        );
    }
    ControllerResult::new(
        records,
        CreateTopicsReply {
            topics: results,
            ..Default::default()
        },
    )
}

/// Sets `metadata_offset` of every created topic in `reply` to `offset`, the committed entry
/// holding their records. A `validate_only` request created nothing, so its topics keep -1
/// (no offset to wait for), as do failed topics.
pub fn set_created_offsets(reply: &mut CreateTopicsReply, validate_only: bool, offset: u64) {
    if validate_only {
        return;
    }
    for t in &mut reply.topics {
        if t.error.as_ref().is_none_or(|e| e.code == 0) {
            t.metadata_offset = offset as i64;
        }
    }
}

/// A validated topic creation.
struct TopicPlan {
    /// (replicas, isr) per partition, index = partition id.
    partitions: Vec<ReplicasAndIsr>,
    replication_factor: usize,
    configs: BTreeMap<String, String>,
}

impl TopicPlan {
    fn write(&self, name: &str, id: Uuid, out: &mut Vec<MetadataRecord>) {
        out.push(record(Record::Topic(TopicRecord {
            name: name.to_string(),
            topic_id: uuid_bytes(id),
        })));
        for (k, v) in &self.configs {
            out.push(record(Record::Config(ConfigRecord {
                resource_type: ConfigResourceType::Topic as i32,
                resource_name: name.to_string(),
                name: k.clone(),
                value: Some(v.clone()),
            })));
        }
        for (p, partition) in self.partitions.iter().enumerate() {
            out.push(new_partition_record(id, p as i32, partition));
        }
    }
}

/// The PartitionRecord of a new partition: its replicas and ISR, leader = the first of the
/// ISR, epochs 0.
pub(super) fn new_partition_record(
    topic_id: Uuid,
    partition_id: i32,
    (replicas, isr): &ReplicasAndIsr,
) -> MetadataRecord {
    record(Record::Partition(PartitionRecord {
        topic_id: uuid_bytes(topic_id),
        partition_id,
        replicas: replicas.clone(),
        isr: isr.clone(),
        leader: isr[0],
        ..Default::default()
    }))
}

/// Brokers new replicas may be placed on: registered, unfenced, not in controlled shutdown;
/// (id, rack) sorted by id.
pub(super) fn usable_brokers(image: &MetadataImage) -> Vec<(i32, Option<String>)> {
    image
        .brokers()
        .values()
        .filter(|b| b.is_eligible())
        .map(|b| (b.id, b.rack.clone()))
        .collect()
}

/// Why a topic is refused: its error code and message.
pub(super) type Refusal = (ErrorCode, String);

/// (replicas, isr) of one new partition.
pub(super) type ReplicasAndIsr = (Vec<i32>, Vec<i32>);

/// Kafka's `Topic.unifyCollisionChars`: `.` and `_` map to the same metric name.
fn collision_form(name: &str) -> String {
    name.replace('.', "_")
}

/// Validates one topic and plans its partitions. `colliding_in_request` is another name in
/// the same request with the same [`collision_form`].
fn create_one(
    image: &MetadataImage,
    t: &CreatableTopic,
    colliding_in_request: Option<&str>,
    defaults: &TopicDefaults,
    usable: &[(i32, Option<String>)],
    start: usize,
) -> Result<TopicPlan, Refusal> {
    check_new_topic_name(image, &t.name, colliding_in_request)?;
    let partitions = if !t.assignments.is_empty() {
        if t.num_partitions != -1 || t.replication_factor != -1 {
            return Err((
                ErrorCode::InvalidRequest,
                "num_partitions and replication_factor must be -1 with explicit assignments".into(),
            ));
        }
        explicit_assignment(image, t)?
    } else {
        placed_assignment(t, defaults, usable, start)?
    };
    let rf = partitions[0].0.len();
    let configs = validate_new_topic_configs(&t.configs, rf)?;
    Ok(TopicPlan {
        partitions,
        replication_factor: rf,
        configs,
    })
}

/// A new topic's name: valid (Kafka's `Topic.validate`), not `__cluster_metadata`, not taken,
/// and not colliding with another topic (existing, or `colliding_in_request`) once '.' and
/// '_' are taken as equal (Kafka warns about metric-name collisions and refuses them).
fn check_new_topic_name(
    image: &MetadataImage,
    name: &str,
    colliding_in_request: Option<&str>,
) -> Result<(), Refusal> {
    validate_topic_name(name).map_err(|m| (ErrorCode::InvalidTopicException, m))?;
    if name == CLUSTER_METADATA_TOPIC {
        // Kafka: ControllerApis.createTopics refuses the name with INVALID_REQUEST.
        return Err((
            ErrorCode::InvalidRequest,
            format!("creation of internal topic {CLUSTER_METADATA_TOPIC} is prohibited"),
        ));
    }
    if image.topics().by_name.contains_key(name) {
        return Err((
            ErrorCode::TopicAlreadyExists,
            format!("topic {:?} already exists", keel_proto::limits::clip(name)),
        ));
    }
    if name.contains(['.', '_']) {
        let mine = collision_form(name);
        if let Some(other) = image
            .topics()
            .by_name
            .keys()
            .find(|n| collision_form(n) == mine)
        {
            return Err((
                ErrorCode::InvalidTopicException,
                format!(
                    "topic {:?} collides with existing topic {other:?} ('.' and '_' collide)",
                    keel_proto::limits::clip(name)
                ),
            ));
        }
        if let Some(other) = colliding_in_request {
            return Err((
                ErrorCode::InvalidTopicException,
                format!(
                    "topic {:?} collides with topic {other:?} in the same request \
                     ('.' and '_' collide)",
                    keel_proto::limits::clip(name)
                ),
            ));
        }
    }
    Ok(())
}

/// Replicas for a topic without explicit assignments: partition count and replication factor
/// from the request or `defaults` (-1), checked (1..=MAX_PARTITIONS_PER_TOPIC partitions, a
/// factor of at least 1 and at most the usable brokers), then placed rack-aware from `start`
/// ([`place_replicas`]). Each partition's ISR starts as its replicas.
fn placed_assignment(
    t: &CreatableTopic,
    defaults: &TopicDefaults,
    usable: &[(i32, Option<String>)],
    start: usize,
) -> Result<Vec<ReplicasAndIsr>, Refusal> {
    let n = if t.num_partitions == -1 {
        defaults.num_partitions
    } else {
        t.num_partitions
    };
    if n <= 0 || n > MAX_PARTITIONS_PER_TOPIC {
        return Err((
            ErrorCode::InvalidPartitions,
            format!(
                "number of partitions {} is invalid: must be -1 or 1..={MAX_PARTITIONS_PER_TOPIC}",
                t.num_partitions
            ),
        ));
    }
    let rf = if t.replication_factor == -1 {
        defaults.replication_factor
    } else {
        t.replication_factor
    };
    if rf <= 0 {
        return Err((
            ErrorCode::InvalidReplicationFactor,
            format!(
                "replication factor {} is invalid: must be -1 or at least 1",
                t.replication_factor
            ),
        ));
    }
    if rf as usize > usable.len() {
        return Err((
            ErrorCode::InvalidReplicationFactor,
            format!(
                "replication factor {rf} is larger than the {} usable (unfenced) broker(s)",
                usable.len()
            ),
        ));
    }
    Ok(place_replicas(usable, n as usize, rf as usize, start)
        .into_iter()
        .map(|r| (r.clone(), r))
        .collect())
}

/// Validates explicit assignments (see [`create_topics`]) into (replicas, isr) lists.
fn explicit_assignment(
    image: &MetadataImage,
    t: &CreatableTopic,
) -> Result<Vec<ReplicasAndIsr>, Refusal> {
    let bad = |m: String| Err((ErrorCode::InvalidReplicaAssignment, m));
    if t.assignments.len() > MAX_PARTITIONS_PER_TOPIC as usize {
        return Err((
            ErrorCode::InvalidPartitions,
            format!("more than {MAX_PARTITIONS_PER_TOPIC} partitions"),
        ));
    }
    let mut by_index: BTreeMap<i32, &Vec<i32>> = BTreeMap::new();
    for a in &t.assignments {
        if by_index.insert(a.partition_index, &a.broker_ids).is_some() {
            return bad(format!("partition {} assigned twice", a.partition_index));
        }
    }
    let rf = t.assignments[0].broker_ids.len();
    let mut out = Vec::with_capacity(by_index.len());
    for (expected, (&p, ids)) in by_index.iter().enumerate() {
        if p != expected as i32 {
            return bad(format!(
                "partitions must be 0..{} without gaps; found {p}",
                by_index.len()
            ));
        }
        out.push(check_assignment(image, p, ids, rf)?);
    }
    Ok(out)
}

/// One explicitly assigned partition `p`: `ids` non-empty, `rf` long, without duplicates,
/// every broker registered, at least one eligible (unfenced, not shutting down). Returns its
/// replicas and ISR (the eligible replicas, in order); INVALID_REPLICA_ASSIGNMENT otherwise.
pub(super) fn check_assignment(
    image: &MetadataImage,
    p: i32,
    ids: &[i32],
    rf: usize,
) -> Result<ReplicasAndIsr, Refusal> {
    let bad = |m: String| Err((ErrorCode::InvalidReplicaAssignment, m));
    if ids.is_empty() {
        return bad(format!("partition {p} has no replicas"));
    }
    if ids.len() != rf {
        return bad(format!(
            "partition {p} has {} replicas, partition 0 has {rf}",
            ids.len()
        ));
    }
    if ids.iter().enumerate().any(|(i, b)| ids[..i].contains(b)) {
        return bad(format!("partition {p} lists a broker twice: {ids:?}"));
    }
    if let Some(b) = ids.iter().find(|b| image.broker(**b).is_none()) {
        return bad(format!("partition {p}: broker {b} is not registered"));
    }
    let isr: Vec<i32> = ids
        .iter()
        .copied()
        .filter(|&b| is_eligible(image, b))
        .collect();
    if isr.is_empty() {
        return bad(format!(
            "partition {p}: every broker of {ids:?} is fenced or shutting down"
        ));
    }
    Ok((ids.to_vec(), isr))
}

/// Draws an id that is not nil, not in use and not used earlier in this request.
fn fresh_topic_id(
    image: &MetadataImage,
    used: &BTreeSet<Uuid>,
    source: &mut dyn FnMut() -> Uuid,
) -> Option<Uuid> {
    (0..MAX_TOPIC_ID_ATTEMPTS)
        .map(|_| source())
        .find(|id| !id.is_nil() && !used.contains(id) && !image.topics().by_id.contains_key(id))
}

/// DeleteTopics (Kafka v6). Each entry names a topic by id (takes precedence; unknown ->
/// UNKNOWN_TOPIC_ID) or by name (unknown -> UNKNOWN_TOPIC_OR_PARTITION); a topic named twice
/// -> INVALID_REQUEST for every mention. Each deleted topic gets one `RemoveTopicRecord`
/// (replay drops its partitions and configs).
pub fn delete_topics(
    image: &MetadataImage,
    req: &DeleteTopicsRequest,
) -> ControllerResult<DeleteTopicsReply> {
    let resolved: Vec<Result<(Uuid, String), Refusal>> = req
        .topics
        .iter()
        .map(|t| {
            if !t.topic_id.is_empty() {
                let id = uuid_from_bytes(&t.topic_id).ok_or((
                    ErrorCode::UnknownTopicId,
                    format!("topic id of {} bytes is not a UUID", t.topic_id.len()),
                ))?;
                image
                    .topics()
                    .by_id
                    .get(&id)
                    .map(|ti| (id, ti.name.clone()))
                    .ok_or((ErrorCode::UnknownTopicId, format!("unknown topic id {id}")))
            } else {
                image
                    .topics()
                    .by_name
                    .get(&t.name)
                    .map(|id| (*id, t.name.clone()))
                    .ok_or((
                        ErrorCode::UnknownTopicOrPartition,
                        format!("unknown topic {:?}", keel_proto::limits::clip(&t.name)),
                    ))
            }
        })
        .collect();
    let mut counts: BTreeMap<Uuid, usize> = BTreeMap::new();
    for (id, _) in resolved.iter().flatten() {
        *counts.entry(*id).or_default() += 1;
    }
    let mut records = Vec::new();
    let mut results = Vec::with_capacity(req.topics.len());
    for (t, r) in req.topics.iter().zip(resolved) {
        match r {
            Ok((id, name)) if counts[&id] > 1 => results.push(DeletableTopicResult {
                name,
                topic_id: uuid_bytes(id),
                error: error(
                    ErrorCode::InvalidRequest,
                    "topic named more than once".to_string(),
                ),
            }),
            Ok((id, name)) => {
                records.push(record(Record::RemoveTopic(RemoveTopicRecord {
                    topic_id: uuid_bytes(id),
                })));
                results.push(DeletableTopicResult {
                    name,
                    topic_id: uuid_bytes(id),
                    error: None,
                });
            }
            Err((code, msg)) => results.push(DeletableTopicResult {
                name: t.name.clone(),
                topic_id: t.topic_id.clone(),
                error: error(code, msg),
            }),
        }
    }
    ControllerResult::new(
        records,
        DeleteTopicsReply {
            topics: results,
            ..Default::default()
        },
    )
}
