//! Pre-vote (Raft thesis §9.6; Kafka KIP-996) on top of openraft 0.9, which has none.
//!
//! Without it, a controller cut off from its peers starts an election at every election
//! timeout, each with a higher term; when the partition heals, its first reply to the leader
//! carries that term and deposes a leader that had a quorum all along (writes paused 0.7 s on
//! every heal, issue #24). With it, a controller may campaign only after a majority of the
//! voters, itself included, said they would vote for it; the others say yes only if they
//! have not heard from a leader for an election timeout themselves, the candidate's log is
//! at least as up to date as theirs and its next term is above theirs. A node that cannot
//! reach a majority never campaigns, so its term stays where it was and it rejoins quietly.
//!
//! This module owns openraft's runtime `elect` switch ([`ElectionGate`]): elections are on
//! only while (a) the last pre-vote round of this node won and it has not heard from a leader
//! since, and (b) no snapshot install is in progress ([`crate::raft_network::RaftServer`]
//! counts them). The pre-vote RPC is `RaftService.PreVote`; its payload is a postcard
//! [`PreVoteRequest`] and the reply a postcard [`PreVoteReply`]. A pre-vote changes no state
//! on either side. The rounds run in `crate::node::spawn_pre_vote`; the answers in
//! `crate::raft_network::RaftServer`; this module holds the rules ([`grants`], [`won`],
//! [`leader_in_contact`]) and the switch.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use keel_metadata_log::raft_types::{LogId, TypeConfig};
use openraft::Raft;
use serde::{Deserialize, Serialize};

/// "Would you vote for me?" (RaftService.PreVote's payload).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreVoteRequest {
    /// The asking node.
    pub candidate: u64,
    /// The term its election would use: its current term + 1.
    pub next_term: u64,
    /// Its last log id (`None`: empty log).
    pub last_log_id: Option<LogId>,
}

/// The answer to a [`PreVoteRequest`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreVoteReply {
    /// Whether the receiver would grant the vote now.
    pub granted: bool,
}

/// What a receiver knows when it answers a pre-vote (a snapshot of its Raft state).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VoterView {
    /// Its current term.
    pub term: u64,
    /// Its last log id.
    pub last_log_id: Option<LogId>,
    /// Whether it is the leader (then it has a quorum: check-quorum steps it down otherwise).
    pub is_leader: bool,
    /// Time since it last accepted an AppendEntries or a snapshot from a leader; `None` never.
    pub since_leader_contact: Option<Duration>,
}

/// Whether a voter in state `v` grants `req` (pure): not a leader, no leader heard from for
/// `lease` (the minimum election timeout: a follower in contact with a leader refuses, as
/// Raft §4.2.3 has it for real votes), `next_term` above its own and a log at least as up to
/// date (§5.4.1: last term, then last index; `LogId`'s order).
pub fn grants(v: &VoterView, req: &PreVoteRequest, lease: Duration) -> bool {
    !v.is_leader
        && v.since_leader_contact.is_none_or(|d| d >= lease)
        && req.next_term > v.term
        && req.last_log_id >= v.last_log_id
}

/// The leader a node may name (pure): openraft's `current`, except another node this one has
/// not heard from for `max` (or ever): with pre-vote a cut-off follower no longer campaigns,
/// so openraft would go on naming a leader it lost long ago (readiness, leader hints).
pub fn leader_in_contact(
    current: Option<u64>,
    node_id: u64,
    since_contact: Option<Duration>,
    max: Duration,
) -> Option<u64> {
    match current {
        Some(l) if l != node_id && since_contact.is_none_or(|d| d > max) => None,
        other => other,
    }
}

/// Whether `granted` yes-answers from peers plus this node's own make a majority of `voters`
/// (pure).
pub fn won(granted: usize, voters: usize) -> bool {
    2 * (granted + 1) > voters
}

/// openraft's `elect` switch and what it depends on. Shared by the Raft server (leader
/// contact, snapshot installs) and the pre-vote loop.
pub struct ElectionGate {
    raft: Raft<TypeConfig>,
    state: Mutex<GateState>,
}

impl std::fmt::Debug for ElectionGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ElectionGate")
            .field("elections_enabled", &self.elections_enabled())
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Default)]
struct GateState {
    /// Snapshot installs in progress or in their grace period.
    installs: usize,
    /// The last pre-vote round won, and no leader heard from since.
    pre_vote_won: bool,
    /// When a leader's AppendEntries or snapshot was last accepted.
    leader_contact: Option<Instant>,
}

impl GateState {
    /// Invariant: openraft's `elect` switch equals this.
    fn elect(&self) -> bool {
        self.installs == 0 && self.pre_vote_won
    }
}

impl ElectionGate {
    /// The gate of `raft`, elections off until a pre-vote round is won.
    pub fn new(raft: Raft<TypeConfig>) -> Self {
        let state = GateState::default();
        raft.runtime_config().elect(state.elect());
        Self {
            raft,
            state: Mutex::new(state),
        }
    }

    fn update(&self, f: impl FnOnce(&mut GateState)) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let before = s.elect();
        f(&mut s);
        let after = s.elect();
        if before != after {
            // Under the lock: two updates never apply their switches out of order.
            self.raft.runtime_config().elect(after);
        }
    }

    /// A leader's AppendEntries or snapshot was accepted: no campaign without a new round.
    pub fn leader_contact(&self) {
        self.update(|s| {
            s.leader_contact = Some(Instant::now());
            s.pre_vote_won = false;
        });
    }

    /// Time since the last leader contact, `None` if never.
    pub fn since_leader_contact(&self) -> Option<Duration> {
        let s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.leader_contact.map(|t| t.elapsed())
    }

    /// Counts one snapshot install in (`true`) or out.
    pub fn count_install(&self, starting: bool) {
        self.update(|s| {
            s.installs = if starting {
                s.installs.saturating_add(1)
            } else {
                s.installs.saturating_sub(1)
            };
        });
    }

    /// Records the outcome of a pre-vote round.
    pub fn pre_vote_result(&self, won: bool) {
        self.update(|s| s.pre_vote_won = won);
    }

    /// Whether elections are on (for tests and metrics).
    pub fn elections_enabled(&self) -> bool {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).elect()
    }
}

#[cfg(test)]
mod tests {
    use openraft::CommittedLeaderId;

    use super::*;

    fn log_id(term: u64, index: u64) -> Option<LogId> {
        Some(LogId::new(CommittedLeaderId::new(term, 1), index))
    }

    const LEASE: Duration = Duration::from_millis(500);

    fn follower(term: u64, last: Option<LogId>, since: Option<u64>) -> VoterView {
        VoterView {
            term,
            last_log_id: last,
            is_leader: false,
            since_leader_contact: since.map(Duration::from_millis),
        }
    }

    fn req(next_term: u64, last: Option<LogId>) -> PreVoteRequest {
        PreVoteRequest {
            candidate: 3,
            next_term,
            last_log_id: last,
        }
    }

    #[test]
    fn a_voter_grants_only_without_a_leader_to_an_up_to_date_log_and_a_higher_term() {
        let v = follower(5, log_id(5, 100), None);
        assert!(grants(&v, &req(6, log_id(5, 100)), LEASE));
        assert!(grants(&v, &req(6, log_id(5, 101)), LEASE));
        assert!(
            grants(&v, &req(6, log_id(6, 1)), LEASE),
            "a later last term wins"
        );
        assert!(!grants(&v, &req(6, log_id(5, 99)), LEASE), "shorter log");
        assert!(
            !grants(&v, &req(6, log_id(4, 500)), LEASE),
            "older last term"
        );
        assert!(!grants(&v, &req(6, None), LEASE), "empty log");
        assert!(
            !grants(&v, &req(5, log_id(5, 100)), LEASE),
            "term not above"
        );
        // Heard from a leader within the lease: no.
        let in_contact = follower(5, log_id(5, 100), Some(100));
        assert!(!grants(&in_contact, &req(6, log_id(5, 100)), LEASE));
        let lost = follower(5, log_id(5, 100), Some(500));
        assert!(grants(&lost, &req(6, log_id(5, 100)), LEASE));
        let leader = VoterView {
            is_leader: true,
            ..follower(5, log_id(5, 100), None)
        };
        assert!(!grants(&leader, &req(9, log_id(9, 900)), LEASE));
        // Two empty logs (a new quorum): yes.
        assert!(grants(&follower(0, None, None), &req(1, None), LEASE));
    }

    #[test]
    fn a_leader_not_heard_from_is_not_named() {
        let max = Duration::from_millis(1000);
        let ms = |n| Some(Duration::from_millis(n));
        assert_eq!(leader_in_contact(Some(2), 1, ms(100), max), Some(2));
        assert_eq!(leader_in_contact(Some(2), 1, ms(1001), max), None);
        assert_eq!(
            leader_in_contact(Some(2), 1, None, max),
            None,
            "never heard from"
        );
        assert_eq!(leader_in_contact(Some(1), 1, None, max), Some(1), "itself");
        assert_eq!(leader_in_contact(None, 1, ms(1), max), None);
    }

    #[test]
    fn a_majority_counts_the_candidate_itself() {
        assert!(won(0, 1), "a single voter");
        assert!(!won(0, 3));
        assert!(won(1, 3));
        assert!(!won(1, 4));
        assert!(won(2, 5));
        assert!(!won(1, 5));
    }
}
