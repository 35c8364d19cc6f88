//! Leader election requests and cascades (DESIGN §4; Kafka:
//! `ReplicationControlManager.electLeaders` / `generateLeaderAndIsrUpdates`, KIP-460). The
//! choice of one partition's leader is [`choose_leader`](super::partition_change::choose_leader)
//! (Kafka: `PartitionChangeBuilder.electLeader`); its rules, in order:
//! - a valid current leader (in the target ISR and eligible) is kept, except that a PREFERRED
//!   election moves leadership to `replicas[0]` when it is a valid candidate;
//! - otherwise the first replica, in replica order, that is in the ISR and eligible (registered,
//!   unfenced, not in controlled shutdown);
//! - otherwise, for an UNCLEAN election only, the first eligible replica in replica order even
//!   if it is not in the ISR: the ISR becomes `[it]` and the recovery state RECOVERING;
//! - otherwise no leader (-1); the ISR is left as it is (never empty).
//!
//! The cascades at the end of this file apply those rules to every partition a broker state
//! change affects (fence, controlled shutdown, unregistration: remove the broker from ISRs and
//! leadership; unfence: give leaderless partitions a leader). They use the topic's effective
//! `unclean.leader.election.enable` (Kafka does the same in `generateLeaderAndIsrUpdates`).

use std::collections::BTreeSet;

use keel_metadata_log::{MetadataImage, NO_LEADER, PartitionRegistration};
use keel_proto::ErrorCode;
use keel_proto::controller::{
    ElectLeadersReply, ElectLeadersRequest, ElectPartitionResult, ElectTopicResult, ElectionType,
};
use keel_proto::metadata::{MetadataRecord, metadata_record::Record};

use super::configs::unclean_leader_election_enabled;
use super::partition_change::{Election, PartitionChangeBuilder, merge};
use super::{ControllerResult, error, is_eligible, record};

/// ElectLeaders (Kafka: `ElectLeaders` v2, KIP-460): PREFERRED or UNCLEAN election for the
/// named partitions (or all of them).
///
/// Per partition (`ElectPartitionResult`):
/// - unknown topic or partition -> UNKNOWN_TOPIC_OR_PARTITION;
/// - PREFERRED: `replicas[0]` already leads -> ELECTION_NOT_NEEDED; `replicas[0]` in the ISR
///   and eligible -> it becomes leader; else PREFERRED_LEADER_NOT_AVAILABLE (no record);
/// - UNCLEAN: the partition has a leader -> ELECTION_NOT_NEEDED; else a clean candidate if
///   there is one, else the first eligible replica with ISR = `[it]` and RECOVERING; none ->
///   ELIGIBLE_LEADERS_NOT_AVAILABLE. The topic's `unclean.leader.election.enable` is not
///   consulted: the operator asked.
///
/// `leader_id` / `leader_epoch` are the state after the election (as replay will derive it),
/// or the current one when nothing was elected. A partition named twice is answered once.
/// With `all_partitions`, partitions answering ELECTION_NOT_NEEDED are left out of the reply
/// (as Kafka does for `TopicPartitions = null`). An unknown `election_type` -> request-level
/// INVALID_REQUEST.
pub fn elect_leaders(
    image: &MetadataImage,
    req: &ElectLeadersRequest,
) -> ControllerResult<ElectLeadersReply> {
    let election = match ElectionType::try_from(req.election_type) {
        Ok(ElectionType::Preferred) => Election::Preferred,
        Ok(ElectionType::Unclean) => Election::Unclean,
        Err(_) => {
            return ControllerResult::response_only(ElectLeadersReply {
                error: error(
                    ErrorCode::InvalidRequest,
                    format!("unknown election type {}", req.election_type),
                ),
                ..Default::default()
            });
        }
    };
    // (topic name, partitions; None = all partitions of the topic).
    let wanted: Vec<(String, Option<Vec<i32>>)> = if req.all_partitions {
        image
            .topics()
            .by_name
            .keys()
            .map(|n| (n.clone(), None))
            .collect()
    } else {
        req.topic_partitions
            .iter()
            .map(|t| {
                let ps = (!t.partitions.is_empty()).then(|| t.partitions.clone());
                (t.topic.clone(), ps)
            })
            .collect()
    };
    let mut records = Vec::new();
    let mut results: Vec<ElectTopicResult> = Vec::new();
    let mut seen: BTreeSet<(String, i32)> = BTreeSet::new();
    for (name, partitions) in wanted {
        let topic = image.topics().get_by_name(&name);
        let ids: Vec<i32> = match (&partitions, topic) {
            (Some(ps), _) => ps.clone(),
            (None, Some(t)) => t.partitions.keys().copied().collect(),
            (None, None) => vec![],
        };
        let mut out = Vec::with_capacity(ids.len());
        if topic.is_none() && ids.is_empty() {
            out.push(ElectPartitionResult {
                partition_id: -1,
                error: error(
                    ErrorCode::UnknownTopicOrPartition,
                    format!("unknown topic {:?}", keel_proto::limits::clip(&name)),
                ),
                leader_id: NO_LEADER,
                leader_epoch: -1,
            });
        }
        for p in ids {
            if !seen.insert((name.clone(), p)) {
                continue;
            }
            let Some((t, reg)) = topic.and_then(|t| t.partitions.get(&p).map(|r| (t, r))) else {
                out.push(ElectPartitionResult {
                    partition_id: p,
                    error: error(
                        ErrorCode::UnknownTopicOrPartition,
                        format!(
                            "unknown partition {p} of topic {:?}",
                            keel_proto::limits::clip(&name)
                        ),
                    ),
                    leader_id: NO_LEADER,
                    leader_epoch: -1,
                });
                continue;
            };
            let (code, msg, change) = elect_one(image, t.id, p, reg, election);
            if req.all_partitions && code == ErrorCode::ElectionNotNeeded {
                continue;
            }
            let after = change.as_ref().map(|c| merge(reg, c));
            let state = after.as_ref().unwrap_or(reg);
            out.push(ElectPartitionResult {
                partition_id: p,
                error: code.is_error().then(|| code.to_proto(msg)),
                leader_id: state.leader,
                leader_epoch: state.leader_epoch,
            });
            if let Some(c) = change {
                records.push(record(Record::PartitionChange(c)));
            }
        }
        if !out.is_empty() {
            results.push(ElectTopicResult {
                topic: name,
                partitions: out,
            });
        }
    }
    ControllerResult::new(
        records,
        ElectLeadersReply {
            results,
            ..Default::default()
        },
    )
}

/// One partition of [`elect_leaders`]: the error code, its message and the change to write.
fn elect_one(
    image: &MetadataImage,
    topic_id: uuid::Uuid,
    p: i32,
    reg: &PartitionRegistration,
    election: Election,
) -> (
    ErrorCode,
    String,
    Option<keel_proto::metadata::PartitionChangeRecord>,
) {
    let eligible = |b: i32| is_eligible(image, b);
    let builder = PartitionChangeBuilder::new(reg, topic_id, p, &eligible).set_election(election);
    match election {
        Election::Preferred => {
            let preferred = reg.replicas[0];
            if reg.leader == preferred {
                return (
                    ErrorCode::ElectionNotNeeded,
                    format!("broker {preferred} already leads"),
                    None,
                );
            }
            match builder.build() {
                Some(c) if c.leader == Some(preferred) => (ErrorCode::None, String::new(), Some(c)),
                _ => (
                    ErrorCode::PreferredLeaderNotAvailable,
                    if reg.isr.contains(&preferred) {
                        format!(
                            "preferred replica {preferred} is fenced, shutting down or not registered"
                        )
                    } else {
                        format!("preferred replica {preferred} is not in ISR {:?}", reg.isr)
                    },
                    None,
                ),
            }
        }
        Election::Unclean | Election::Clean => {
            if reg.has_leader() {
                return (
                    ErrorCode::ElectionNotNeeded,
                    format!("partition has leader {}", reg.leader),
                    None,
                );
            }
            match builder.build() {
                Some(c) if c.leader.is_some_and(|l| l != NO_LEADER) => {
                    (ErrorCode::None, String::new(), Some(c))
                }
                _ => (
                    ErrorCode::EligibleLeadersNotAvailable,
                    format!("no live replica among {:?}", reg.replicas),
                    None,
                ),
            }
        }
    }
}

/// Partition changes that take `broker` out of every ISR and off every leadership, as when it
/// is fenced, enters controlled shutdown, re-registers or unregisters (Kafka:
/// `generateLeaderAndIsrUpdates(brokerToRemove = broker)`). `broker` counts as ineligible. A
/// partition where it is the only ISR member keeps it in the ISR and gets leader -1 (or, when
/// the topic allows unclean election, the first other eligible replica). Cost: one pass over
/// every partition.
pub(crate) fn remove_broker_from_partitions(
    image: &MetadataImage,
    broker: i32,
    records: &mut Vec<MetadataRecord>,
) {
    let eligible = |b: i32| b != broker && is_eligible(image, b);
    for t in image.topics().by_id.values() {
        let unclean = unclean_leader_election_enabled(image, &t.name);
        for (&p, reg) in t.partitions.iter() {
            if !reg.isr.contains(&broker) && reg.leader != broker {
                continue;
            }
            let target: Vec<i32> = reg.isr.iter().copied().filter(|&b| b != broker).collect();
            let change = PartitionChangeBuilder::new(reg, t.id, p, &eligible)
                .set_target_isr(target)
                .set_election(if unclean {
                    Election::Unclean
                } else {
                    Election::Clean
                })
                .build();
            if let Some(c) = change {
                records.push(record(Record::PartitionChange(c)));
            }
        }
    }
}

/// Partition changes that give leaderless partitions replicated on `broker` a leader now that
/// `broker` is eligible (it is being unfenced; Kafka: `handleBrokerUnfenced`). Clean election,
/// or unclean when the topic allows it. Cost: one pass over every partition.
pub(crate) fn elect_leaderless_with(
    image: &MetadataImage,
    broker: i32,
    records: &mut Vec<MetadataRecord>,
) {
    let eligible = |b: i32| b == broker || is_eligible(image, b);
    for t in image.topics().by_id.values() {
        let unclean = unclean_leader_election_enabled(image, &t.name);
        for (&p, reg) in t.partitions.iter() {
            if reg.has_leader() || !reg.replicas.contains(&broker) {
                continue;
            }
            let change = PartitionChangeBuilder::new(reg, t.id, p, &eligible)
                .set_election(if unclean {
                    Election::Unclean
                } else {
                    Election::Clean
                })
                .build();
            if let Some(c) = change {
                records.push(record(Record::PartitionChange(c)));
            }
        }
    }
}

/// Partitions moved back to their preferred replica by one [`preferred_leader_rebalance`] run,
/// at most (Kafka: `QuorumController.maxElectionsPerImbalance`, 1,000). When more are
/// waiting the next run follows at once ([`RebalanceRun::deferred`]).
pub const MAX_ELECTIONS_PER_IMBALANCE: usize = 1_000;

/// One run of [`preferred_leader_rebalance`].
#[derive(Debug, Default)]
pub struct RebalanceRun {
    /// The PREFERRED elections to write (at most the run's `max`).
    pub records: Vec<MetadataRecord>,
    /// Imbalanced partitions whose preferred replica could take leadership but were left for
    /// the next run because the run reached its `max`: the caller runs again at once (Kafka's
    /// `QuorumController` reschedules the imbalance check immediately when
    /// `maxElectionsPerImbalance` was reached).
    pub deferred: usize,
    /// Imbalanced partitions that cannot be balanced now: the preferred replica is out of the
    /// ISR or not eligible.
    pub blocked: usize,
}

/// The automatic preferred-leader rebalance (Kafka: `auto.leader.rebalance.enable`,
/// `ReplicationControlManager.maybeBalancePartitionLeaders`): for every partition whose
/// leader is not its preferred replica (`replicas[0]`) while the preferred replica is in the
/// ISR and eligible (registered, unfenced, not shutting down), a PREFERRED election that hands
/// it leadership back with leader epoch + 1. Partitions whose preferred replica is out of the
/// ISR or ineligible are left alone (leadership never moves to a replica that could not take
/// it, and never off a valid leader otherwise). At most `max` changes, in topic-id then
/// partition order; the balanceable rest is counted as deferred. Cost: one pass over every
/// partition.
pub fn preferred_leader_rebalance(image: &MetadataImage, max: usize) -> RebalanceRun {
    let eligible = |b: i32| is_eligible(image, b);
    let mut run = RebalanceRun::default();
    for t in image.topics().by_id.values() {
        for (&p, reg) in t.partitions.iter() {
            let Some(&preferred) = reg.replicas.first() else {
                continue;
            };
            if reg.leader == preferred {
                continue;
            }
            if !reg.isr.contains(&preferred) || !eligible(preferred) {
                run.blocked += 1;
                continue;
            }
            if run.records.len() >= max {
                run.deferred += 1;
                continue;
            }
            let change = PartitionChangeBuilder::new(reg, t.id, p, &eligible)
                .set_election(Election::Preferred)
                .build();
            match change {
                Some(c) if c.leader == Some(preferred) => {
                    run.records.push(record(Record::PartitionChange(c)))
                }
                _ => run.blocked += 1,
            }
        }
    }
    run
}
