//! [`PartitionChangeBuilder`]: current partition state + targets -> at most one
//! `PartitionChangeRecord` (Kafka: `org.apache.kafka.controller.PartitionChangeBuilder`), and
//! [`merge`], the state that record produces on replay (Kafka: `PartitionRegistration.merge`).
//!
//! Rules (DESIGN §4):
//! - the record sets `leader` only when the leader changes (replay then bumps the leader
//!   epoch), `isr` only when the ISR changes, `leader_recovery_state` only when it changes;
//!   a builder that changes nothing yields `None` (no record, no partition-epoch bump);
//! - the ISR is never empty: an empty target ISR leaves the ISR as it is, so removing the
//!   last member keeps it (the partition goes offline with leader -1 instead);
//! - an election runs only when needed: the current leader left the target ISR, is no longer
//!   eligible, or a PREFERRED election wants `replicas[0]` (Kafka: `shouldTryElection`); the
//!   candidates are chosen by [`choose_leader`];
//! - an unclean election shrinks the ISR to the new leader and sets the recovery state to
//!   RECOVERING (KIP-704);
//! - a reassignment (KIP-455) is started with [`PartitionChangeBuilder::set_target_assignment`]
//!   (replicas = target + removing, with `adding` and `removing`), and any change completes an
//!   ongoing one once every target replica is in the ISR the change leaves
//!   ([`complete_reassignment`], Kafka: `PartitionReassignmentReplicas.maybeCompleteReassignment`):
//!   replicas become the target, the ISR loses the removed replicas (never empty: it must
//!   still hold a target replica), adding/removing are cleared, and a leader that was removed
//!   is replaced by an election among the new ISR in the target's order.
//!
//! The leader choice itself ([`choose_leader`], with its rules in the doc of
//! [`super::election`]) lives here, with the builder that runs it, as in Kafka.

use keel_metadata_log::image::uuid_bytes;
use keel_metadata_log::{NO_LEADER, PartitionRegistration};
use keel_proto::metadata::{LeaderRecoveryState, PartitionChangeRecord, ReplicaList};
use uuid::Uuid;

/// Which election a [`PartitionChangeBuilder`] may run (Kafka:
/// `PartitionChangeBuilder.Election`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Election {
    /// Only ISR members may lead (Kafka: ONLINE).
    #[default]
    Clean,
    /// Like `Clean`, but prefer `replicas[0]` even over a valid current leader.
    Preferred,
    /// Like `Clean`, then fall back to any eligible replica (data may be lost).
    Unclean,
}

/// The leader chosen by [`choose_leader`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ElectionResult {
    /// The new leader, or [`NO_LEADER`].
    pub leader: i32,
    /// True when the leader is not in the ISR (an unclean election).
    pub unclean: bool,
}

/// Chooses a leader for `partition` given the ISR it will have (`isr`), following the rules
/// of the module doc. `is_eligible` tells which brokers may lead.
pub fn choose_leader(
    partition: &PartitionRegistration,
    isr: &[i32],
    election: Election,
    is_eligible: &dyn Fn(i32) -> bool,
) -> ElectionResult {
    let valid = |b: i32| b != NO_LEADER && isr.contains(&b) && is_eligible(b);
    let clean = |leader| ElectionResult {
        leader,
        unclean: false,
    };
    if election == Election::Preferred
        && let Some(&preferred) = partition.replicas.first()
        && valid(preferred)
    {
        return clean(preferred);
    }
    if valid(partition.leader) {
        return clean(partition.leader);
    }
    if let Some(&b) = partition.replicas.iter().find(|&&b| valid(b)) {
        return clean(b);
    }
    if election == Election::Unclean
        && let Some(&b) = partition.replicas.iter().find(|&&b| is_eligible(b))
    {
        return ElectionResult {
            leader: b,
            unclean: true,
        };
    }
    clean(NO_LEADER)
}

/// Builds the change record for one partition. See the module doc.
///
/// `is_eligible(broker_id)` says whether a broker may lead or be in the ISR *in the state the
/// caller is deciding for* (e.g. excluding a broker being fenced, or including one being
/// unfenced); it is usually [`is_eligible`](super::is_eligible) on the image plus one override.
pub struct PartitionChangeBuilder<'a> {
    current: &'a PartitionRegistration,
    topic_id: Uuid,
    partition_id: i32,
    is_eligible: &'a dyn Fn(i32) -> bool,
    target_isr: Option<Vec<i32>>,
    target_recovery: Option<LeaderRecoveryState>,
    target_assignment: Option<Assignment>,
    election: Election,
}

/// A partition's replica assignment during a reassignment (KIP-455): `replicas` is the target
/// followed by the replicas being removed; `adding` are target replicas not yet in the old
/// assignment. Both empty = no reassignment.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Assignment {
    /// All replicas: the target's, in its order, then the ones being removed.
    pub replicas: Vec<i32>,
    /// Replicas of the target that the old assignment lacks.
    pub adding: Vec<i32>,
    /// Replicas of the old assignment that the target lacks.
    pub removing: Vec<i32>,
}

impl Assignment {
    /// The assignment of `p` as it stands.
    pub fn of(p: &PartitionRegistration) -> Self {
        Self {
            replicas: p.replicas.clone(),
            adding: p.adding_replicas.clone(),
            removing: p.removing_replicas.clone(),
        }
    }

    /// The target replicas: `replicas` without `removing`, in order.
    pub fn target(&self) -> Vec<i32> {
        self.replicas
            .iter()
            .copied()
            .filter(|r| !self.removing.contains(r))
            .collect()
    }

    /// True while a reassignment is in progress.
    pub fn is_moving(&self) -> bool {
        !self.adding.is_empty() || !self.removing.is_empty()
    }
}

/// The replicas and ISR that complete `a`'s reassignment given the ISR `isr` (pure; Kafka:
/// `PartitionReassignmentReplicas.maybeCompleteReassignment`): `None` when no reassignment is
/// in progress, when some target replica is not in the ISR yet, or when the ISR without the
/// removed replicas would be empty.
pub fn complete_reassignment(a: &Assignment, isr: &[i32]) -> Option<(Vec<i32>, Vec<i32>)> {
    if !a.is_moving() {
        return None;
    }
    let target = a.target();
    let new_isr: Vec<i32> = isr
        .iter()
        .copied()
        .filter(|r| !a.removing.contains(r))
        .collect();
    (!new_isr.is_empty() && target.iter().all(|r| new_isr.contains(r))).then_some((target, new_isr))
}

impl std::fmt::Debug for PartitionChangeBuilder<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PartitionChangeBuilder")
            .field("topic_id", &self.topic_id)
            .field("partition_id", &self.partition_id)
            .field("current", self.current)
            .field("target_isr", &self.target_isr)
            .field("target_recovery", &self.target_recovery)
            .field("election", &self.election)
            .finish()
    }
}

impl<'a> PartitionChangeBuilder<'a> {
    /// A builder with no targets: ISR and recovery state unchanged, clean election.
    pub fn new(
        current: &'a PartitionRegistration,
        topic_id: Uuid,
        partition_id: i32,
        is_eligible: &'a dyn Fn(i32) -> bool,
    ) -> Self {
        Self {
            current,
            topic_id,
            partition_id,
            is_eligible,
            target_isr: None,
            target_recovery: None,
            target_assignment: None,
            election: Election::Clean,
        }
    }

    /// Starts, changes or reverts a reassignment (KIP-455): the assignment after the change.
    /// Precondition: `a.replicas` holds every current ISR member that stays (callers build it
    /// from the current state); the ISR is cut to `a.replicas` before the completion check.
    pub fn set_target_assignment(mut self, a: Assignment) -> Self {
        self.target_assignment = Some(a);
        self
    }

    /// The ISR wanted after the change. Precondition: a duplicate-free subset of the
    /// replicas (callers validate requests first). Empty = keep the current ISR.
    pub fn set_target_isr(mut self, isr: Vec<i32>) -> Self {
        debug_assert!(
            isr.iter().all(|b| self.current.replicas.contains(b)),
            "target ISR {isr:?} not within replicas {:?}",
            self.current.replicas
        );
        self.target_isr = Some(isr);
        self
    }

    /// The election to run if one is needed (default [`Election::Clean`]).
    pub fn set_election(mut self, election: Election) -> Self {
        self.election = election;
        self
    }

    /// The leader recovery state wanted after the change (KIP-704).
    pub fn set_target_leader_recovery_state(mut self, state: LeaderRecoveryState) -> Self {
        self.target_recovery = Some(state);
        self
    }

    /// The change record, or `None` when the targets change nothing.
    pub fn build(&self) -> Option<PartitionChangeRecord> {
        let current = self.current;
        let mut isr = match &self.target_isr {
            Some(t) if !t.is_empty() => t.clone(),
            // Never write an empty ISR (DESIGN §4): the last member stays.
            _ => current.isr.clone(),
        };
        // The assignment after the change: a new target, else the current one, completed
        // when the ISR allows (KIP-455).
        let mut assignment = self
            .target_assignment
            .clone()
            .unwrap_or_else(|| Assignment::of(current));
        if self.target_assignment.is_some() {
            // A reverted reassignment drops replicas that may be in the ISR.
            let kept: Vec<i32> = isr
                .iter()
                .copied()
                .filter(|r| assignment.replicas.contains(r))
                .collect();
            if !kept.is_empty() {
                isr = kept;
            }
        }
        if let Some((replicas, new_isr)) = complete_reassignment(&assignment, &isr) {
            assignment = Assignment {
                replicas,
                ..Assignment::default()
            };
            isr = new_isr;
        }
        // Elections below read the replica order of the assignment after the change.
        let moved;
        let cur = if assignment == Assignment::of(current) {
            current
        } else {
            moved = PartitionRegistration {
                replicas: assignment.replicas.clone(),
                adding_replicas: assignment.adding.clone(),
                removing_replicas: assignment.removing.clone(),
                ..current.clone()
            };
            &moved
        };
        let mut recovery = self.target_recovery.unwrap_or(cur.leader_recovery_state);
        let eligible = self.is_eligible;
        let leader_ok =
            cur.leader != NO_LEADER && isr.contains(&cur.leader) && eligible(cur.leader);
        let wants_preferred = self.election == Election::Preferred
            && cur.replicas.first().is_some_and(|&p| p != cur.leader);
        let mut leader = cur.leader;
        if !leader_ok || wants_preferred {
            let chosen = choose_leader(cur, &isr, self.election, eligible);
            leader = chosen.leader;
            if chosen.unclean {
                isr = vec![leader];
                recovery = LeaderRecoveryState::Recovering;
            }
        }
        debug_assert!(!isr.is_empty());
        debug_assert!(leader == NO_LEADER || isr.contains(&leader));
        debug_assert!(isr.iter().all(|r| assignment.replicas.contains(r)));
        let mut rec = PartitionChangeRecord {
            topic_id: uuid_bytes(self.topic_id),
            partition_id: self.partition_id,
            ..Default::default()
        };
        let mut changed = false;
        let cur = current;
        if assignment.replicas != cur.replicas {
            rec.replicas = Some(ReplicaList {
                ids: assignment.replicas.clone(),
            });
            changed = true;
        }
        if assignment.adding != cur.adding_replicas {
            rec.adding_replicas = Some(ReplicaList {
                ids: assignment.adding.clone(),
            });
            changed = true;
        }
        if assignment.removing != cur.removing_replicas {
            rec.removing_replicas = Some(ReplicaList {
                ids: assignment.removing.clone(),
            });
            changed = true;
        }
        if isr != cur.isr {
            rec.isr = Some(ReplicaList { ids: isr });
            changed = true;
        }
        if leader != cur.leader {
            rec.leader = Some(leader);
            changed = true;
        }
        if recovery != cur.leader_recovery_state {
            rec.leader_recovery_state = Some(recovery as i32);
            changed = true;
        }
        changed.then_some(rec)
    }
}

/// The partition state after replaying `change` on `current`
/// ([`PartitionRegistration::merge`], the derivation replay uses), to answer requests with
/// the state "as it will be after replay". A change this module built never fails to merge
/// (it carries a known recovery state, and the write path refuses epochs at `i32::MAX` when
/// it replays the records before proposing them); if one did, the current state is answered.
pub fn merge(
    current: &PartitionRegistration,
    change: &PartitionChangeRecord,
) -> PartitionRegistration {
    current.merge(change).unwrap_or_else(|e| {
        debug_assert!(false, "a built PartitionChangeRecord does not merge: {e}");
        current.clone()
    })
}
