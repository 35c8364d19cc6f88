//! AlterPartition: ISR and leader-recovery-state changes from partition leaders and operators
//! (Kafka: `ReplicationControlManager.alterPartition` / `validateAlterPartitionData`,
//! AlterPartition v3, KIP-497, KIP-704, KIP-841, KIP-903).
//!
//! Validation order (DESIGN §4, controller.proto); the first failing check answers:
//! 1. the sender's `broker_epoch` differs from its registration (or it is not registered) ->
//!    request-level STALE_BROKER_EPOCH, nothing else is looked at;
//! 2. unknown topic id -> UNKNOWN_TOPIC_ID; unknown topic name or partition ->
//!    UNKNOWN_TOPIC_OR_PARTITION;
//! 3. `leader_epoch` or `partition_epoch` newer than the controller's -> NOT_CONTROLLER;
//! 4. `leader_epoch` older -> FENCED_LEADER_EPOCH;
//! 5. the sender is not the partition leader -> INVALID_REQUEST;
//! 6. `partition_epoch` older, or `expected_partition_epoch` present and different ->
//!    INVALID_UPDATE_VERSION;
//! 7. the new ISR is empty, has duplicates, is not a subset of the replicas, or lacks the
//!    current leader -> INVALID_REQUEST;
//! 8. a member is unregistered, in controlled shutdown, fenced, or named with a broker epoch
//!    (other than -1) that is not its registration's -> INELIGIBLE_REPLICA. This applies to
//!    every member, the leader included (as Kafka's `ineligibleReplicasForIsr`);
//! 9. leader recovery state unknown, going RECOVERED -> RECOVERING, or RECOVERING with more
//!    than one ISR member -> INVALID_REQUEST (KIP-704).
//!
//! Operator requests are recognised by `broker_id == -1` (then `broker_epoch` is ignored):
//! check 1 and 5 are skipped, `leader_epoch == -1` skips 3/4 for the leader epoch,
//! `partition_epoch == -1` skips 3/6 for the partition epoch, and `expected_partition_epoch`
//! is a compare-and-set guard. For an operator the leader check of 7 applies only when the
//! partition has a leader; on a leaderless partition the new ISR may elect one (clean
//! election among the new ISR), which is reported as success.
//!
//! On success one PartitionChangeRecord is written (none when nothing changes) and the reply
//! carries the state after replay: leader, ISR, leader epoch, partition epoch, recovery state.
//! If the change elected a leader other than the sending leader the code is
//! NEW_LEADER_ELECTED (the record is still written). FENCED_LEADER_EPOCH and
//! INVALID_UPDATE_VERSION answers carry the controller's current state so the sender can
//! refresh; other errors carry leader -1, epochs -1 and an empty ISR.

use std::collections::BTreeSet;

use keel_metadata_log::image::uuid_from_bytes;
use keel_metadata_log::{MetadataImage, NO_LEADER, PartitionRegistration, TopicImage};
use keel_proto::ErrorCode;
use keel_proto::controller::{
    AlterPartitionPartition, AlterPartitionPartitionResult, AlterPartitionReply,
    AlterPartitionRequest, AlterPartitionTopicResult,
};
use keel_proto::metadata::{LeaderRecoveryState, PartitionChangeRecord, metadata_record::Record};

use super::partition_change::Election;
use super::partition_change::{PartitionChangeBuilder, merge};
use super::{ControllerResult, error, is_eligible, record};

/// Broker id of operator (admin) AlterPartition requests.
pub const OPERATOR_BROKER_ID: i32 = -1;

/// A refused partition: code, message, and whether the reply shows the current state.
struct Refusal {
    code: ErrorCode,
    message: String,
    show_state: bool,
}

fn refuse(code: ErrorCode, message: String) -> Refusal {
    let show_state = matches!(
        code,
        ErrorCode::FencedLeaderEpoch | ErrorCode::InvalidUpdateVersion
    );
    Refusal {
        code,
        message,
        show_state,
    }
}

/// AlterPartition (Kafka v3). See the module doc for the checks, their order and codes.
pub fn alter_partition(
    image: &MetadataImage,
    req: &AlterPartitionRequest,
) -> ControllerResult<AlterPartitionReply> {
    let operator = req.broker_id == OPERATOR_BROKER_ID;
    if !operator {
        let stale = match image.broker(req.broker_id) {
            None => Some(format!("broker {} is not registered", req.broker_id)),
            Some(b) if b.epoch != req.broker_epoch => Some(format!(
                "broker {} has epoch {}, request carries {}",
                req.broker_id, b.epoch, req.broker_epoch
            )),
            Some(_) => None,
        };
        if let Some(msg) = stale {
            return ControllerResult::response_only(AlterPartitionReply {
                error: error(ErrorCode::StaleBrokerEpoch, msg),
                ..Default::default()
            });
        }
    }
    let mut records = Vec::new();
    let mut topics = Vec::with_capacity(req.topics.len());
    let mut seen: BTreeSet<(uuid::Uuid, i32)> = BTreeSet::new();
    for t in &req.topics {
        let topic = resolve_topic(image, &t.topic_id, &t.topic_name);
        let mut result = AlterPartitionTopicResult {
            topic_id: t.topic_id.clone(),
            topic_name: t.topic_name.clone(),
            partitions: Vec::with_capacity(t.partitions.len()),
        };
        if let Ok(ti) = &topic {
            result.topic_id = keel_metadata_log::image::uuid_bytes(ti.id);
            result.topic_name = ti.name.clone();
        }
        for p in &t.partitions {
            let outcome = match &topic {
                Err((code, msg)) => Err(refuse(*code, msg.clone())),
                Ok(ti) => match ti.partitions.get(&p.partition_index) {
                    None => Err(refuse(
                        ErrorCode::UnknownTopicOrPartition,
                        format!(
                            "unknown partition {} of topic {:?}",
                            p.partition_index,
                            keel_proto::limits::clip(&ti.name)
                        ),
                    )),
                    Some(_) if !seen.insert((ti.id, p.partition_index)) => Err(refuse(
                        ErrorCode::InvalidRequest,
                        format!(
                            "partition {}-{} named twice",
                            keel_proto::limits::clip(&ti.name),
                            p.partition_index
                        ),
                    )),
                    Some(reg) => alter_one(image, req.broker_id, operator, ti, reg, p)
                        .map(|change| (reg.as_ref(), change)),
                },
            };
            result.partitions.push(match outcome {
                Ok((reg, change)) => {
                    let after = change
                        .as_ref()
                        .map_or_else(|| reg.clone(), |c| merge(reg, c));
                    let elected_other = change.as_ref().is_some_and(|c| c.leader.is_some())
                        && !operator
                        && after.leader != req.broker_id;
                    if let Some(c) = change {
                        records.push(record(Record::PartitionChange(c)));
                    }
                    let mut r = state_result(p.partition_index, &after);
                    if elected_other {
                        r.error = error(
                            ErrorCode::NewLeaderElected,
                            format!("broker {} now leads", after.leader),
                        );
                    }
                    r
                }
                Err(refusal) => {
                    let current = topic
                        .as_ref()
                        .ok()
                        .and_then(|ti| ti.partitions.get(&p.partition_index));
                    let mut r = match current {
                        Some(reg) if refusal.show_state => state_result(p.partition_index, reg),
                        _ => AlterPartitionPartitionResult {
                            partition_index: p.partition_index,
                            leader_id: NO_LEADER,
                            leader_epoch: -1,
                            partition_epoch: -1,
                            ..Default::default()
                        },
                    };
                    r.error = error(refusal.code, refusal.message);
                    r
                }
            });
        }
        topics.push(result);
    }
    ControllerResult::new(
        records,
        AlterPartitionReply {
            topics,
            ..Default::default()
        },
    )
}

fn state_result(
    partition_index: i32,
    reg: &PartitionRegistration,
) -> AlterPartitionPartitionResult {
    AlterPartitionPartitionResult {
        partition_index,
        error: None,
        leader_id: reg.leader,
        leader_epoch: reg.leader_epoch,
        isr: reg.isr.clone(),
        partition_epoch: reg.partition_epoch,
        leader_recovery_state: reg.leader_recovery_state as i32,
    }
}

/// The topic a request names: by id when given (unknown -> UNKNOWN_TOPIC_ID), else by name
/// (unknown -> UNKNOWN_TOPIC_OR_PARTITION).
fn resolve_topic<'a>(
    image: &'a MetadataImage,
    topic_id: &[u8],
    name: &str,
) -> Result<&'a TopicImage, (ErrorCode, String)> {
    if !topic_id.is_empty() {
        let id = uuid_from_bytes(topic_id).ok_or_else(|| {
            (
                ErrorCode::UnknownTopicId,
                format!("topic id of {} bytes is not a UUID", topic_id.len()),
            )
        })?;
        return image
            .topics()
            .by_id
            .get(&id)
            .map(|t| t.as_ref())
            .ok_or_else(|| (ErrorCode::UnknownTopicId, format!("unknown topic id {id}")));
    }
    image
        .topics()
        .get_by_name(name)
        .map(|t| t.as_ref())
        .ok_or_else(|| {
            (
                ErrorCode::UnknownTopicOrPartition,
                format!("unknown topic {:?}", keel_proto::limits::clip(name)),
            )
        })
}

/// Checks 3 to 9 for one partition, then builds its change (None = nothing changes).
fn alter_one(
    image: &MetadataImage,
    sender: i32,
    operator: bool,
    topic: &TopicImage,
    reg: &PartitionRegistration,
    p: &AlterPartitionPartition,
) -> Result<Option<PartitionChangeRecord>, Refusal> {
    let tp = format!("{}-{}", topic.name, p.partition_index);
    check_epochs(&tp, sender, operator, reg, p)?;
    let new_isr = check_new_isr(&tp, image, reg, p)?;
    let recovery = check_recovery_state(&tp, reg, p, &new_isr)?;
    let eligible = |b: i32| is_eligible(image, b);
    Ok(
        PartitionChangeBuilder::new(reg, topic.id, p.partition_index, &eligible)
            .set_target_isr(new_isr)
            .set_target_leader_recovery_state(recovery)
            .set_election(Election::Clean)
            .build(),
    )
}

/// Steps 3-6 of [`alter_partition`]: the request's leader and partition epochs against the
/// partition's (an operator's -1 skips a check) and the sender against the leader.
fn check_epochs(
    tp: &str,
    sender: i32,
    operator: bool,
    reg: &PartitionRegistration,
    p: &AlterPartitionPartition,
) -> Result<(), Refusal> {
    let check_leader_epoch = !(operator && p.leader_epoch == -1);
    let check_partition_epoch = !(operator && p.partition_epoch == -1);
    // 3. Newer than ours: this controller's image is behind (Kafka answers NOT_CONTROLLER).
    if check_leader_epoch && p.leader_epoch > reg.leader_epoch {
        return Err(refuse(
            ErrorCode::NotController,
            format!(
                "{tp}: request leader epoch {} is newer than the controller's {}",
                p.leader_epoch, reg.leader_epoch
            ),
        ));
    }
    if check_partition_epoch && p.partition_epoch > reg.partition_epoch {
        return Err(refuse(
            ErrorCode::NotController,
            format!(
                "{tp}: request partition epoch {} is newer than the controller's {}",
                p.partition_epoch, reg.partition_epoch
            ),
        ));
    }
    // 4.
    if check_leader_epoch && p.leader_epoch < reg.leader_epoch {
        return Err(refuse(
            ErrorCode::FencedLeaderEpoch,
            format!(
                "{tp}: leader epoch {} is older than the current {}",
                p.leader_epoch, reg.leader_epoch
            ),
        ));
    }
    // 5.
    if !operator && sender != reg.leader {
        return Err(refuse(
            ErrorCode::InvalidRequest,
            format!("{tp}: broker {sender} is not the leader ({})", reg.leader),
        ));
    }
    // 6.
    if check_partition_epoch && p.partition_epoch < reg.partition_epoch {
        return Err(refuse(
            ErrorCode::InvalidUpdateVersion,
            format!(
                "{tp}: partition epoch {} is older than the current {}",
                p.partition_epoch, reg.partition_epoch
            ),
        ));
    }
    if let Some(expected) = p.expected_partition_epoch
        && expected != reg.partition_epoch
    {
        return Err(refuse(
            ErrorCode::InvalidUpdateVersion,
            format!(
                "{tp}: expected partition epoch {expected}, current is {}",
                reg.partition_epoch
            ),
        ));
    }
    Ok(())
}

/// Steps 7-8 of [`alter_partition`]: the new ISR is non-empty, without duplicates, made of
/// replicas, holds the leader, and every member is registered, unfenced, not shutting down
/// and at the broker epoch given (KIP-841, KIP-903). Returns its broker ids.
fn check_new_isr(
    tp: &str,
    image: &MetadataImage,
    reg: &PartitionRegistration,
    p: &AlterPartitionPartition,
) -> Result<Vec<i32>, Refusal> {
    // 7.
    let new_isr: Vec<i32> = p.new_isr_with_epochs.iter().map(|b| b.broker_id).collect();
    let invalid = |why: String| Err(refuse(ErrorCode::InvalidRequest, format!("{tp}: {why}")));
    if new_isr.is_empty() {
        return invalid("the new ISR is empty".into());
    }
    if new_isr
        .iter()
        .enumerate()
        .any(|(i, b)| new_isr[..i].contains(b))
    {
        return invalid(format!("the new ISR {new_isr:?} has duplicates"));
    }
    if let Some(b) = new_isr.iter().find(|b| !reg.replicas.contains(b)) {
        return invalid(format!(
            "ISR member {b} is not a replica ({:?})",
            reg.replicas
        ));
    }
    if reg.leader != NO_LEADER && !new_isr.contains(&reg.leader) {
        return invalid(format!(
            "the new ISR {new_isr:?} does not contain the leader {}",
            reg.leader
        ));
    }
    // 8. KIP-841 (fenced / shutting down) and KIP-903 (broker epoch).
    for m in &p.new_isr_with_epochs {
        let why = match image.broker(m.broker_id) {
            None => Some("not registered".to_string()),
            Some(b) if b.fenced => Some("fenced".into()),
            Some(b) if b.in_controlled_shutdown => Some("in controlled shutdown".into()),
            Some(b) if m.broker_epoch != -1 && m.broker_epoch != b.epoch => Some(format!(
                "broker epoch {} is not the registered {}",
                m.broker_epoch, b.epoch
            )),
            Some(_) => None,
        };
        if let Some(why) = why {
            return Err(refuse(
                ErrorCode::IneligibleReplica,
                format!("{tp}: ISR member {} is ineligible: {why}", m.broker_id),
            ));
        }
    }
    Ok(new_isr)
}

/// Step 9 of [`alter_partition`] (KIP-704): a known recovery state, never back from
/// RECOVERED to RECOVERING, and a RECOVERING partition's ISR is the leader alone.
fn check_recovery_state(
    tp: &str,
    reg: &PartitionRegistration,
    p: &AlterPartitionPartition,
    new_isr: &[i32],
) -> Result<LeaderRecoveryState, Refusal> {
    let invalid = |why: String| Err(refuse(ErrorCode::InvalidRequest, format!("{tp}: {why}")));
    // 9. KIP-704.
    let Ok(recovery) = LeaderRecoveryState::try_from(p.leader_recovery_state) else {
        return invalid(format!(
            "unknown leader recovery state {}",
            p.leader_recovery_state
        ));
    };
    if recovery == LeaderRecoveryState::Recovering {
        if reg.leader_recovery_state == LeaderRecoveryState::Recovered {
            return invalid("the recovery state cannot go from RECOVERED to RECOVERING".into());
        }
        if new_isr.len() > 1 {
            return invalid(format!(
                "a RECOVERING partition cannot have ISR {new_isr:?} (more than the leader)"
            ));
        }
    }
    Ok(recovery)
}
