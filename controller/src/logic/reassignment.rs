//! Partition reassignment (KIP-455; Kafka: `ReplicationControlManager.alterPartitionReassignments`
//! / `listPartitionReassignments`, `PartitionReassignmentReplicas`,
//! `PartitionReassignmentRevert`).
//!
//! A reassignment is state in the metadata log: a partition's `replicas` (the target followed
//! by the replicas being removed), `adding_replicas` and `removing_replicas`. This module
//! starts, changes and cancels it; [`PartitionChangeBuilder`] completes it on the change that
//! brings the last target replica into the ISR (see [`super::partition_change`]).
//!
//! Per partition, in order (the first failing check answers, nothing is written for it):
//! 1. the partition appears earlier in the request -> INVALID_REQUEST;
//! 2. unknown topic or partition -> UNKNOWN_TOPIC_OR_PARTITION;
//! 3. a target: empty, a duplicate, a negative id, or an id no broker registered ->
//!    INVALID_REPLICA_ASSIGNMENT (Kafka's `validateManualPartitionAssignment`; fenced brokers
//!    are accepted, as in Kafka: they join the ISR once back);
//! 4. a cancellation (no target) of a partition that is not moving ->
//!    NO_REASSIGNMENT_IN_PROGRESS; one that would leave no in-sync replica (every ISR member
//!    is a replica being added) -> INVALID_REPLICA_ASSIGNMENT (Kafka would elect uncleanly
//!    there; Keel refuses rather than risk acknowledged records).
//!
//! A new target while a move is in progress replaces it: the old replicas are the current
//! ones without those being added (`original`), and adding/removing are recomputed against
//! them, so a replica that was being added and is not in the new target is removed again.
//! A target equal to the current replicas of a partition that is not moving writes nothing.

use std::collections::BTreeSet;

use keel_metadata_log::{MetadataImage, PartitionRegistration};
use keel_proto::ErrorCode;
use keel_proto::controller::{
    AlterPartitionReassignmentsReply, AlterPartitionReassignmentsRequest,
    ListPartitionReassignmentsReply, ListPartitionReassignmentsRequest,
    OngoingPartitionReassignment, OngoingTopicReassignment, ReassignablePartitionResult,
    ReassignableTopicResult,
};
use keel_proto::metadata::metadata_record::Record;

use super::partition_change::{Assignment, PartitionChangeBuilder};
use super::{ControllerResult, error, is_eligible, record};

/// The assignment a reassignment to `target` gives a partition whose assignment is `current`
/// (pure; Kafka: `PartitionReassignmentReplicas`): the original replicas are the current ones
/// without those being added; `removing` = original - target, `adding` = target - original,
/// `replicas` = target then removing (in the original's order).
pub fn reassign(current: &Assignment, target: &[i32]) -> Assignment {
    let original: Vec<i32> = current
        .replicas
        .iter()
        .copied()
        .filter(|r| !current.adding.contains(r))
        .collect();
    let removing: Vec<i32> = original
        .iter()
        .copied()
        .filter(|r| !target.contains(r))
        .collect();
    let adding: Vec<i32> = target
        .iter()
        .copied()
        .filter(|r| !original.contains(r))
        .collect();
    let mut replicas = target.to_vec();
    replicas.extend(&removing);
    Assignment {
        replicas,
        adding,
        removing,
    }
}

/// The assignment that cancels `current`'s reassignment (pure; Kafka:
/// `PartitionReassignmentRevert`): the replicas without those being added, in order.
pub fn revert(current: &Assignment) -> Assignment {
    Assignment {
        replicas: current
            .replicas
            .iter()
            .copied()
            .filter(|r| !current.adding.contains(r))
            .collect(),
        adding: Vec::new(),
        removing: Vec::new(),
    }
}

/// Why a target replica list is refused (check 3 of the module doc), or `None`.
fn bad_target(image: &MetadataImage, target: &[i32]) -> Option<String> {
    if target.is_empty() {
        return Some("the target replica list is empty".into());
    }
    let mut seen = BTreeSet::new();
    for &b in target {
        if b < 0 {
            return Some(format!("broker id {b} is negative"));
        }
        if !seen.insert(b) {
            return Some(format!("broker {b} appears twice in the target"));
        }
        if image.broker(b).is_none() {
            return Some(format!("broker {b} is not registered"));
        }
    }
    None
}

/// AlterPartitionReassignments (Kafka v0). See the module doc for the checks and codes. One
/// PartitionChangeRecord per partition that changes; the reply has a result per partition of
/// the request, in request order.
pub fn alter_partition_reassignments(
    image: &MetadataImage,
    req: &AlterPartitionReassignmentsRequest,
) -> ControllerResult<AlterPartitionReassignmentsReply> {
    let mut records = Vec::new();
    let mut responses = Vec::with_capacity(req.topics.len());
    let mut seen: BTreeSet<(&str, i32)> = BTreeSet::new();
    for topic in &req.topics {
        let t = image.topics().get_by_name(&topic.name);
        let mut results = Vec::with_capacity(topic.partitions.len());
        for part in &topic.partitions {
            let p = part.partition_index;
            let target = part.replicas.as_ref().map(|r| r.ids.as_slice());
            let outcome = if !seen.insert((topic.name.as_str(), p)) {
                Err((
                    ErrorCode::InvalidRequest,
                    format!(
                        "partition {p} of topic {:?} appears twice in the request",
                        keel_proto::limits::clip(&topic.name)
                    ),
                ))
            } else {
                match t.and_then(|t| t.partitions.get(&p).map(|reg| (t.id, reg))) {
                    None => Err((
                        ErrorCode::UnknownTopicOrPartition,
                        format!(
                            "unknown partition {p} of topic {:?}",
                            keel_proto::limits::clip(&topic.name)
                        ),
                    )),
                    Some((id, reg)) => change_one(image, reg, target).map(|next| {
                        PartitionChangeBuilder::new(reg, id, p, &|b| is_eligible(image, b))
                            .set_target_assignment(next)
                            .build()
                    }),
                }
            };
            let error = match outcome {
                Ok(change) => {
                    if let Some(c) = change {
                        records.push(record(Record::PartitionChange(c)));
                    }
                    None
                }
                Err((code, message)) => error(code, message),
            };
            results.push(ReassignablePartitionResult {
                partition_index: p,
                error,
            });
        }
        responses.push(ReassignableTopicResult {
            name: topic.name.clone(),
            partitions: results,
        });
    }
    ControllerResult::new(
        records,
        AlterPartitionReassignmentsReply {
            responses,
            ..Default::default()
        },
    )
}

/// The assignment after a change of one partition (checks 3 and 4 of the module doc).
fn change_one(
    image: &MetadataImage,
    reg: &PartitionRegistration,
    target: Option<&[i32]>,
) -> Result<Assignment, (ErrorCode, String)> {
    let current = Assignment::of(reg);
    match target {
        Some(target) => match bad_target(image, target) {
            Some(why) => Err((ErrorCode::InvalidReplicaAssignment, why)),
            None => Ok(reassign(&current, target)),
        },
        None if !current.is_moving() => Err((
            ErrorCode::NoReassignmentInProgress,
            "the partition has no reassignment in progress".into(),
        )),
        None => {
            let back = revert(&current);
            if reg.isr.iter().all(|r| !back.replicas.contains(r)) {
                return Err((
                    ErrorCode::InvalidReplicaAssignment,
                    format!(
                        "cancelling would leave no in-sync replica (ISR {:?} holds only \
                         replicas being added)",
                        reg.isr
                    ),
                ));
            }
            Ok(back)
        }
    }
}

/// ListPartitionReassignments (Kafka v0): the partitions of `req` (all when it names none)
/// that are moving, from `image`. Pure; the caller fills `source`.
pub fn list_partition_reassignments(
    image: &MetadataImage,
    req: &ListPartitionReassignmentsRequest,
) -> ListPartitionReassignmentsReply {
    let wanted: Option<std::collections::BTreeMap<&str, BTreeSet<i32>>> = (!req.topics.is_empty())
        .then(|| {
            let mut m: std::collections::BTreeMap<&str, BTreeSet<i32>> = Default::default();
            for t in &req.topics {
                m.entry(t.name.as_str())
                    .or_default()
                    .extend(&t.partition_indexes);
            }
            m
        });
    let mut topics = Vec::new();
    for (name, id) in image.topics().by_name.iter() {
        let filter = match &wanted {
            Some(w) => match w.get(name.as_str()) {
                Some(ps) => Some(ps),
                None => continue,
            },
            None => None,
        };
        let Some(t) = image.topics().by_id.get(id) else {
            continue;
        };
        let partitions: Vec<OngoingPartitionReassignment> = t
            .partitions
            .iter()
            .filter(|(p, _)| filter.is_none_or(|ps| ps.is_empty() || ps.contains(p)))
            .filter(|(_, reg)| Assignment::of(reg).is_moving())
            .map(|(p, reg)| OngoingPartitionReassignment {
                partition_index: *p,
                replicas: reg.replicas.clone(),
                adding_replicas: reg.adding_replicas.clone(),
                removing_replicas: reg.removing_replicas.clone(),
            })
            .collect();
        if !partitions.is_empty() {
            topics.push(OngoingTopicReassignment {
                name: name.clone(),
                partitions,
            });
        }
    }
    ListPartitionReassignmentsReply {
        topics,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::super::partition_change::complete_reassignment;
    use super::*;

    fn a(replicas: &[i32], adding: &[i32], removing: &[i32]) -> Assignment {
        Assignment {
            replicas: replicas.to_vec(),
            adding: adding.to_vec(),
            removing: removing.to_vec(),
        }
    }

    #[test]
    fn a_target_gives_adding_and_removing_against_the_original_replicas() {
        // 1,2,3 -> 2,3,4: add 4, remove 1; the target comes first.
        assert_eq!(
            reassign(&a(&[1, 2, 3], &[], &[]), &[2, 3, 4]),
            a(&[2, 3, 4, 1], &[4], &[1])
        );
        // A new target while moving: 4 was being added and is dropped again (it is not an
        // original replica, so it is neither kept nor "removed").
        assert_eq!(
            reassign(&a(&[2, 3, 4, 1], &[4], &[1]), &[1, 5]),
            a(&[1, 5, 2, 3], &[5], &[2, 3])
        );
        // The same replicas in another order: no move, only the order (preferred leader).
        assert_eq!(
            reassign(&a(&[1, 2, 3], &[], &[]), &[3, 1, 2]),
            a(&[3, 1, 2], &[], &[])
        );
        assert_eq!(
            revert(&a(&[2, 3, 4, 1], &[4], &[1])),
            a(&[2, 3, 1], &[], &[])
        );
    }

    #[test]
    fn a_move_completes_only_when_every_target_replica_is_in_the_isr() {
        let moving = a(&[2, 3, 4, 1], &[4], &[1]);
        assert_eq!(complete_reassignment(&moving, &[1, 2, 3]), None);
        assert_eq!(
            complete_reassignment(&moving, &[1, 2, 3, 4]),
            Some((vec![2, 3, 4], vec![2, 3, 4]))
        );
        // The ISR without the removed replicas must not be empty.
        let to_one = a(&[2, 1], &[2], &[1]);
        assert_eq!(complete_reassignment(&to_one, &[1]), None);
        assert_eq!(
            complete_reassignment(&to_one, &[1, 2]),
            Some((vec![2], vec![2]))
        );
        assert_eq!(complete_reassignment(&a(&[1, 2], &[], &[]), &[1, 2]), None);
    }
}
