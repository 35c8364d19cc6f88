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
//!   RECOVERING (KIP-704).
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
    election: Election,
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
            election: Election::Clean,
        }
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
        let cur = self.current;
        let mut isr = match &self.target_isr {
            Some(t) if !t.is_empty() => t.clone(),
            // Never write an empty ISR (DESIGN §4): the last member stays.
            _ => cur.isr.clone(),
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
        let mut rec = PartitionChangeRecord {
            topic_id: uuid_bytes(self.topic_id),
            partition_id: self.partition_id,
            ..Default::default()
        };
        let mut changed = false;
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
