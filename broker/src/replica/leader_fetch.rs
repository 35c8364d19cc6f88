//! A leader serving a follower's fetch (Kafka `Partition.fetchRecords` for a follower,
//! KIP-101/KIP-279 divergence, KAFKA-13141, KIP-903).
//!
//! Order of checks:
//! 1. leader epoch fencing of `current_leader_epoch` (FENCED_LEADER_EPOCH /
//!    UNKNOWN_LEADER_EPOCH), then leadership (NOT_LEADER_OR_FOLLOWER);
//! 2. the requester must be a follower replica of the partition (NOT_LEADER_OR_FOLLOWER),
//!    and the fetch must carry the broker epoch the follower is registered with in the leader's
//!    metadata (STALE_BROKER_EPOCH otherwise, also for a missing epoch (-1) and for a broker
//!    the leader does not know as registered). Kafka (`Replica.updateFetchStateOrThrow`,
//!    KIP-903) refuses only an epoch older than the registered one, with
//!    NOT_LEADER_OR_FOLLOWER, and lets -1 through for pre-v15 fetchers; it relies on
//!    ClusterAction ACLs to keep clients from posing as followers. Keel has no ACLs, so the
//!    registered epoch is the proof of identity, and the code is the one the proto documents
//!    (issue #18). A follower whose registration the leader has not applied yet is refused
//!    until it has (its fetcher backs off and retries). Nothing changes on a refusal;
//! 3. divergence: with `last_fetched_epoch = e`, the leader's answer `(epoch, end_offset)`
//!    for `e` from its epoch cache; if `epoch < e` or `end_offset < fetch_offset` the
//!    follower's log diverges and the answer is [`LeaderFetchDecision::Diverging`] — and the
//!    follower's state is NOT updated (KAFKA-13141: its fetch offset is not a valid LEO of a
//!    log that matches ours, so counting it could advance the HW over records it lacks);
//! 4. `fetch_offset` in `[log start, LEO]` (OFFSET_OUT_OF_RANGE, state not updated);
//! 5. follower LEO = `fetch_offset`, caught-up and fetch times (an epoch older than the one
//!    of the follower's earlier fetches -> STALE_BROKER_EPOCH); then ISR expansion and HW
//!    advance.

use keel_proto::ErrorCode;

use super::eligibility::IsrEligibility;
use super::epoch::check_leader_epoch;
use super::partition::{Effects, PartitionState, Role};

/// The partition fields of a follower's fetch request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowerFetchRequest {
    /// Broker id of the follower.
    pub replica_id: i32,
    /// The follower's broker epoch (`None` = not sent).
    pub broker_epoch: Option<i64>,
    /// The follower's LEO: first offset it wants (its fetch position).
    pub fetch_offset: i64,
    /// Epoch of the last batch in the follower's log (`None` = empty log / not sent).
    pub last_fetched_epoch: Option<i32>,
    /// The leader epoch the follower believes in (`None` = not sent).
    pub current_leader_epoch: Option<i32>,
    /// The follower's log start offset, if sent.
    pub log_start_offset: Option<i64>,
}

/// What the leader answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaderFetchDecision {
    /// The follower must truncate (no records are returned; its state was not updated).
    Diverging {
        /// Largest leader epoch <= the follower's last fetched epoch known to the leader.
        epoch: i32,
        /// End offset (exclusive) of that epoch on the leader.
        end_offset: i64,
        /// The leader's HW (the follower must NOT adopt it before truncating: KAFKA-14704).
        high_watermark: i64,
    },
    /// Read whole batches from `fetch_offset` below `upper_bound_exclusive` (the leader LEO).
    Read {
        /// First offset to read.
        fetch_offset: i64,
        /// Exclusive bound: the leader's LEO.
        upper_bound_exclusive: i64,
        /// The leader's HW after this fetch.
        high_watermark: i64,
        /// The leader's log start offset.
        log_start_offset: i64,
        /// HW change, completed waiters, AlterPartition (expansion), events.
        effects: Effects,
    },
}

impl PartitionState {
    /// Checks `current_leader_epoch` then leadership, Kafka's order
    /// (`Partition.getLocalLog`): NONE, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH or
    /// NOT_LEADER_OR_FOLLOWER.
    pub fn check_leader_request(&self, current_leader_epoch: Option<i32>) -> Result<(), ErrorCode> {
        let Some(local_epoch) = self.leader_epoch() else {
            return Err(ErrorCode::NotLeaderOrFollower);
        };
        check_leader_epoch(current_leader_epoch, local_epoch)?;
        if !self.is_leader() {
            return Err(ErrorCode::NotLeaderOrFollower);
        }
        Ok(())
    }

    /// Serves a follower fetch (module doc for the order of checks). `epoch_end_offset` is
    /// the leader's OffsetsForLeaderEpoch answer for an epoch
    /// ([`crate::log::Log::end_offset_for_epoch`]); `eligibility` decides ISR expansion.
    pub fn handle_follower_fetch(
        &mut self,
        req: &FollowerFetchRequest,
        epoch_end_offset: impl FnOnce(i32) -> (i32, i64),
        eligibility: &dyn IsrEligibility,
        now_ms: u64,
    ) -> Result<LeaderFetchDecision, ErrorCode> {
        self.check_leader_request(req.current_leader_epoch)?;
        if req.replica_id == self.local_broker_id || !self.replicas.contains(&req.replica_id) {
            return Err(ErrorCode::NotLeaderOrFollower);
        }
        let registered = eligibility.registered_epoch(req.replica_id);
        if req.broker_epoch.is_none() || req.broker_epoch != registered {
            return Err(ErrorCode::StaleBrokerEpoch);
        }
        if let Some(last_epoch) = req.last_fetched_epoch {
            let (epoch, end_offset) = epoch_end_offset(last_epoch);
            if epoch < last_epoch || end_offset < req.fetch_offset {
                return Ok(LeaderFetchDecision::Diverging {
                    epoch,
                    end_offset,
                    high_watermark: self.high_watermark,
                });
            }
        }
        if req.fetch_offset < self.log_start_offset || req.fetch_offset > self.log_end_offset {
            return Err(ErrorCode::OffsetOutOfRange);
        }
        let leo = self.log_end_offset;
        let Role::Leader(l) = &mut self.role else {
            return Err(ErrorCode::NotLeaderOrFollower);
        };
        let Some(f) = l.followers.get_mut(&req.replica_id) else {
            return Err(ErrorCode::NotLeaderOrFollower);
        };
        f.on_fetch(
            req.fetch_offset,
            req.log_start_offset,
            req.broker_epoch,
            leo,
            now_ms,
        )?;
        let mut effects = Effects::default();
        self.maybe_expand_isr(req.replica_id, eligibility, now_ms, &mut effects);
        self.update_leader_hw(now_ms, &mut effects);
        self.debug_check();
        Ok(LeaderFetchDecision::Read {
            fetch_offset: req.fetch_offset,
            upper_bound_exclusive: self.log_end_offset,
            high_watermark: self.high_watermark,
            log_start_offset: self.log_start_offset,
            effects,
        })
    }
}
