//! [`PartitionState`]: the replication state of one partition this broker hosts, its role
//! (leader / follower) and the role transitions driven by metadata (Kafka `Partition.scala`
//! `makeLeader` / `makeFollower`).
//!
//! The leader-side rules live in sibling files as further `impl PartitionState` blocks:
//! follower fetches ([`crate::replica::leader_fetch`]), ISR changes
//! ([`crate::replica::isr_change`]), produce ([`crate::replica::produce`]), consumer reads
//! ([`crate::replica::consumer`]) and the follower side ([`crate::replica::follower_fetch`]).

use std::collections::BTreeMap;

use keel_metadata_log::{NO_LEADER, PartitionRegistration};
use keel_proto::ErrorCode;

use super::config::{MAX_REPLICAS, ReplicaConfig};
use super::follower::FollowerState;
use super::high_watermark::leader_high_watermark;
use super::isr::{AlterPartitionRequest, IsrEvent, IsrState};
use super::waiters::{ProduceWaiters, WaiterCompletion};
use crate::log::TopicPartition;

/// What the async layer must do after a call: publish the new HW, answer finished acks=all
/// requests, send an AlterPartition, log ISR events. Bounded: at most `max_waiters`
/// completions, one request, a few events.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Effects {
    /// The HW changed to this value (leader: only upward).
    pub high_watermark: Option<i64>,
    /// acks=all requests to answer.
    pub completed: Vec<WaiterCompletion>,
    /// An AlterPartition request to send to the active controller.
    pub alter_partition: Option<AlterPartitionRequest>,
    /// ISR events to log (`Shrinking ISR ...`, `Expanding ISR ...`).
    pub isr_events: Vec<IsrEvent>,
}

impl Effects {
    /// Whether there is nothing to do.
    pub fn is_empty(&self) -> bool {
        *self == Effects::default()
    }
}

/// Where the local log stands (the caller reads it from [`crate::log::Log`]). Offsets are
/// exclusive ends except `log_start_offset` (first offset held).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalLog {
    /// First offset in the log.
    pub log_start_offset: i64,
    /// LEO: next offset to be written.
    pub log_end_offset: i64,
    /// HW from the replication-offset checkpoint (clamped into `[log start, LEO]`).
    pub high_watermark: i64,
}

/// State of a partition this broker leads.
///
/// Invariants: the local broker is in the committed and the maximal ISR; the committed
/// ISR is a subset of the maximal ISR and of the replicas; `followers` has exactly one entry
/// per replica other than the local broker; `epoch_start_offset <=` the local LEO.
#[derive(Debug, Clone)]
pub struct LeaderState {
    /// Leader epoch from metadata.
    pub leader_epoch: i32,
    /// Partition epoch from metadata or the last committed AlterPartition (KIP-497).
    pub partition_epoch: i32,
    /// Start offset of `leader_epoch` in the local log (the LEO when leadership began;
    /// KAFKA-7128 gates ISR expansion on it).
    pub epoch_start_offset: i64,
    /// Committed ISR and the pending change.
    pub isr: IsrState,
    /// Followers by broker id (bounded by [`MAX_REPLICAS`]).
    pub followers: BTreeMap<i32, FollowerState>,
    /// acks=all requests waiting for the HW (bounded).
    pub waiters: ProduceWaiters,
}

/// State of a partition this broker follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowerRole {
    /// Leader broker id, or [`NO_LEADER`] while the partition is offline.
    pub leader_id: i32,
    /// Leader epoch from metadata.
    pub leader_epoch: i32,
    /// Partition epoch from metadata.
    pub partition_epoch: i32,
}

/// The broker's role for the partition.
#[derive(Debug, Clone)]
pub enum Role {
    /// Hosted, but no metadata applied yet.
    None,
    /// This broker leads the partition.
    Leader(Box<LeaderState>),
    /// This broker follows (or waits for a leader).
    Follower(FollowerRole),
}

/// A role transition that was not applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransitionError {
    /// The registration is older than (or equal to) what is applied: ignore it (DESIGN §5:
    /// "ignoring stale partition epochs").
    #[error(
        "stale registration: leader epoch {leader_epoch}, partition epoch {partition_epoch} \
         (applied: {applied_leader_epoch}, {applied_partition_epoch})"
    )]
    Stale {
        /// Epochs of the registration.
        leader_epoch: i32,
        /// Partition epoch of the registration.
        partition_epoch: i32,
        /// Applied leader epoch.
        applied_leader_epoch: i32,
        /// Applied partition epoch.
        applied_partition_epoch: i32,
    },
    /// The registration does not fit this call or the local broker (a caller bug, or
    /// corrupt metadata).
    #[error("invalid registration: {0}")]
    Invalid(String),
}

/// An applied role transition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    /// The leader epoch (or the leader) changed: a follower must restart fetching from the
    /// (new) leader; a leader reset its follower states.
    pub leader_changed: bool,
    /// What to do now (failed waiters, HW change).
    pub effects: Effects,
}

/// Replication state of one partition on this broker; see the module doc of
/// [`crate::replica`] for the invariants.
#[derive(Debug, Clone)]
pub struct PartitionState {
    pub(super) topic_partition: TopicPartition,
    pub(super) local_broker_id: i32,
    /// The local broker's current broker epoch (sent in fetches and AlterPartition).
    pub(super) local_broker_epoch: i64,
    pub(super) config: ReplicaConfig,
    /// Assignment from metadata (AR), bounded by [`MAX_REPLICAS`].
    pub(super) replicas: Vec<i32>,
    pub(super) role: Role,
    /// Invariant: `0 <= log_start_offset <= high_watermark <= log_end_offset`.
    pub(super) log_start_offset: i64,
    pub(super) log_end_offset: i64,
    /// Exclusive. Invariant: never decreases while the role is Leader.
    pub(super) high_watermark: i64,
    /// Sequence for AlterPartition request ids.
    pub(super) next_request_id: u64,
}

impl PartitionState {
    /// A hosted partition with no role yet, over a local log in the state `log`.
    pub fn new(
        topic_partition: TopicPartition,
        local_broker_id: i32,
        local_broker_epoch: i64,
        config: ReplicaConfig,
        log: LocalLog,
    ) -> Self {
        let log_start_offset = log.log_start_offset.max(0);
        let log_end_offset = log.log_end_offset.max(log_start_offset);
        let s = Self {
            topic_partition,
            local_broker_id,
            local_broker_epoch,
            config,
            replicas: Vec::new(),
            role: Role::None,
            log_start_offset,
            log_end_offset,
            high_watermark: log.high_watermark.clamp(log_start_offset, log_end_offset),
            next_request_id: 1,
        };
        s.debug_check();
        s
    }

    /// Partition.
    pub fn topic_partition(&self) -> &TopicPartition {
        &self.topic_partition
    }

    /// Current role.
    pub fn role(&self) -> &Role {
        &self.role
    }

    /// The leader state, if this broker leads.
    pub fn leader_state(&self) -> Option<&LeaderState> {
        match &self.role {
            Role::Leader(l) => Some(l),
            _ => None,
        }
    }

    /// Whether this broker leads the partition.
    pub fn is_leader(&self) -> bool {
        matches!(self.role, Role::Leader(_))
    }

    /// Leader epoch known locally (`None` before any metadata).
    pub fn leader_epoch(&self) -> Option<i32> {
        self.applied_epochs().map(|(l, _)| l)
    }

    /// (leader epoch, partition epoch) applied, if any.
    pub fn applied_epochs(&self) -> Option<(i32, i32)> {
        match &self.role {
            Role::None => None,
            Role::Leader(l) => Some((l.leader_epoch, l.partition_epoch)),
            Role::Follower(f) => Some((f.leader_epoch, f.partition_epoch)),
        }
    }

    /// HW (exclusive).
    pub fn high_watermark(&self) -> i64 {
        self.high_watermark
    }

    /// Local LEO as last reported.
    pub fn log_end_offset(&self) -> i64 {
        self.log_end_offset
    }

    /// Local log start offset as last reported.
    pub fn log_start_offset(&self) -> i64 {
        self.log_start_offset
    }

    /// Assignment (AR).
    pub fn replicas(&self) -> &[i32] {
        &self.replicas
    }

    /// The partition's low watermark as its leader knows it (Kafka
    /// `Partition.lowWatermarkIfLeader`): the smallest log start offset of this replica and
    /// of each other ISR member, as its last fetch in this leader epoch reported it (-1 until
    /// then). DeleteRecords (KIP-107) answers once it reached the requested offset. Kafka
    /// takes every replica on a live broker; the ISR is what Keel's leader knows to be live
    /// and fetching (a follower outside it takes the leader's start with its next fetch
    /// anyway). `None` when not the leader.
    pub fn low_watermark(&self) -> Option<i64> {
        let l = self.leader_state()?;
        Some(
            l.isr
                .isr()
                .iter()
                .filter(|b| **b != self.local_broker_id)
                .map(|b| {
                    l.followers
                        .get(b)
                        .and_then(|f| f.log_start_offset)
                        .unwrap_or(-1)
                })
                .fold(self.log_start_offset, i64::min),
        )
    }

    /// Committed ISR (leader only).
    pub fn isr(&self) -> Option<&[i32]> {
        self.leader_state().map(|l| l.isr.isr())
    }

    /// Maximal ISR (leader only, KIP-497).
    pub fn maximal_isr(&self) -> Option<Vec<i32>> {
        self.leader_state().map(|l| l.isr.maximal_isr())
    }

    /// Settings.
    pub fn config(&self) -> &ReplicaConfig {
        &self.config
    }

    /// The local broker re-registered with a new broker epoch.
    pub fn set_local_broker_epoch(&mut self, broker_epoch: i64) {
        self.local_broker_epoch = broker_epoch;
    }

    /// New settings (e.g. `min.insync.replicas` changed by a ConfigRecord). On a leader the
    /// HW and waiters are re-evaluated: a lower min.insync may release the HW, a higher one
    /// fails waiters with NOT_ENOUGH_REPLICAS_AFTER_APPEND.
    pub fn set_config(&mut self, config: ReplicaConfig, now_ms: u64) -> Effects {
        self.config = config;
        let mut effects = Effects::default();
        self.update_leader_hw(now_ms, &mut effects);
        effects
    }

    /// The log start offset moved (retention, DeleteRecords, the leader's start taken by a
    /// follower, or a follower's full truncation). The HW is kept at least there.
    pub fn set_log_start_offset(&mut self, log_start_offset: i64) {
        self.log_start_offset = log_start_offset.clamp(self.log_start_offset, self.log_end_offset);
        self.high_watermark = self.high_watermark.max(self.log_start_offset);
        self.debug_check();
    }

    fn check_not_stale(&self, reg: &PartitionRegistration) -> Result<(), TransitionError> {
        let Some((le, pe)) = self.applied_epochs() else {
            return Ok(());
        };
        let newer = reg.leader_epoch > le || (reg.leader_epoch == le && reg.partition_epoch > pe);
        // The registration of the partition epoch already applied, with other replicas or ISR:
        // a leader learns the epoch of its own AlterPartition from the answer, before the
        // record, and the record may also have changed the replicas (the change that
        // completes a reassignment, KIP-455). Kafka's `Partition.makeLeader` skips only older
        // partition epochs; without this the leader kept the removed replicas as followers.
        let same_leader = match &self.role {
            Role::Leader(_) => reg.leader == self.local_broker_id,
            Role::Follower(f) => {
                f.leader_id
                    == if reg.leader < 0 {
                        NO_LEADER
                    } else {
                        reg.leader
                    }
            }
            Role::None => false,
        };
        let changed = reg.replicas != self.replicas
            || self.isr().is_some_and(|isr| isr != reg.isr.as_slice());
        let same_epoch_update =
            reg.leader_epoch == le && reg.partition_epoch == pe && same_leader && changed;
        if newer || same_epoch_update {
            Ok(())
        } else {
            Err(TransitionError::Stale {
                leader_epoch: reg.leader_epoch,
                partition_epoch: reg.partition_epoch,
                applied_leader_epoch: le,
                applied_partition_epoch: pe,
            })
        }
    }

    fn check_registration(&self, reg: &PartitionRegistration) -> Result<(), TransitionError> {
        if reg.replicas.len() > MAX_REPLICAS {
            return Err(TransitionError::Invalid(format!(
                "{} replicas, more than {MAX_REPLICAS}",
                reg.replicas.len()
            )));
        }
        if !reg.replicas.contains(&self.local_broker_id) {
            return Err(TransitionError::Invalid(format!(
                "local broker {} is not in replicas {:?}",
                self.local_broker_id, reg.replicas
            )));
        }
        if reg.isr.is_empty() || reg.isr.iter().any(|b| !reg.replicas.contains(b)) {
            return Err(TransitionError::Invalid(format!(
                "ISR {:?} is empty or not a subset of replicas {:?}",
                reg.isr, reg.replicas
            )));
        }
        Ok(())
    }

    /// Applies a registration naming this broker as leader (Kafka `Partition.makeLeader`).
    ///
    /// `log_end_offset` is the local LEO; `epoch_start_offset` the start offset of
    /// `reg.leader_epoch` in the local epoch cache. The caller first records
    /// `(leader epoch, LEO)` in the epoch cache when the epoch is new
    /// ([`crate::log::Log::assign_epoch_start_offset`], KAFKA-7415) and passes that LEO; the
    /// new leader keeps its whole log (never truncates to its HW).
    ///
    /// On a new leader epoch every follower state is reset (LEO unknown; caught-up time
    /// `now_ms` for ISR members, 0 for the others: [`FollowerState::reset`]) and waiters of a
    /// previous epoch fail with FENCED_LEADER_EPOCH (like seed 000's `promote`; Kafka would
    /// let them wait, but their request was accepted under a generation that has ended, and
    /// the answer is retriable: the idempotent producer's retry is deduplicated). On a
    /// partition-epoch-only update
    /// (same leader epoch) the ISR is replaced by the registration's and any pending
    /// AlterPartition is dropped.
    ///
    /// Errors: [`TransitionError::Stale`] if the registration is not newer than the applied
    /// one (one of the same epochs is applied when it changes the replicas or the ISR: the
    /// leader may have learnt the epoch from its AlterPartition answer first);
    /// [`TransitionError::Invalid`] if it does not name this broker as an ISR member and
    /// leader.
    pub fn become_leader(
        &mut self,
        reg: &PartitionRegistration,
        log_end_offset: i64,
        epoch_start_offset: i64,
        now_ms: u64,
    ) -> Result<Transition, TransitionError> {
        self.check_registration(reg)?;
        if reg.leader != self.local_broker_id || !reg.isr.contains(&self.local_broker_id) {
            return Err(TransitionError::Invalid(format!(
                "become_leader with leader {} and ISR {:?} on broker {}",
                reg.leader, reg.isr, self.local_broker_id
            )));
        }
        self.check_not_stale(reg)?;
        let mut effects = Effects::default();
        self.log_end_offset = log_end_offset.max(self.log_start_offset);
        self.high_watermark = self.high_watermark.min(self.log_end_offset);
        let previous = std::mem::replace(&mut self.role, Role::None);
        let (new_leader_epoch, mut followers, waiters) = match previous {
            Role::Leader(mut l) => {
                let new_epoch = reg.leader_epoch > l.leader_epoch;
                if new_epoch {
                    l.waiters
                        .fail_all(ErrorCode::FencedLeaderEpoch, &mut effects.completed);
                }
                (new_epoch, l.followers, l.waiters)
            }
            Role::None | Role::Follower(_) => (
                true,
                BTreeMap::new(),
                ProduceWaiters::new(self.config.max_waiters),
            ),
        };
        followers.retain(|id, _| reg.replicas.contains(id));
        for id in reg
            .replicas
            .iter()
            .filter(|id| **id != self.local_broker_id)
        {
            followers
                .entry(*id)
                .or_insert_with(|| FollowerState::new(*id))
                .reset(
                    now_ms,
                    self.log_end_offset,
                    new_leader_epoch,
                    reg.isr.contains(id),
                );
        }
        self.replicas = reg.replicas.clone();
        self.role = Role::Leader(Box::new(LeaderState {
            leader_epoch: reg.leader_epoch,
            partition_epoch: reg.partition_epoch,
            epoch_start_offset: epoch_start_offset.clamp(0, self.log_end_offset),
            isr: IsrState::committed(reg.isr.clone()),
            followers,
            waiters,
        }));
        self.update_leader_hw(now_ms, &mut effects);
        self.debug_check();
        Ok(Transition {
            leader_changed: new_leader_epoch,
            effects,
        })
    }

    /// Applies a registration naming another broker (or no broker) as leader (Kafka
    /// `Partition.makeFollower`). Nothing is truncated here: the follower truncates only
    /// to the divergence point its leader reports ([`crate::replica::follower_fetch`]).
    /// acks=all waiters of a previous leadership fail with NOT_LEADER_OR_FOLLOWER.
    ///
    /// Errors as [`PartitionState::become_leader`].
    pub fn become_follower(
        &mut self,
        reg: &PartitionRegistration,
        log_end_offset: i64,
    ) -> Result<Transition, TransitionError> {
        self.check_registration(reg)?;
        if reg.leader == self.local_broker_id {
            return Err(TransitionError::Invalid(format!(
                "become_follower names the local broker {} as leader",
                self.local_broker_id
            )));
        }
        self.check_not_stale(reg)?;
        let mut effects = Effects::default();
        let leader_changed = match &mut self.role {
            Role::Leader(l) => {
                l.waiters
                    .fail_all(ErrorCode::NotLeaderOrFollower, &mut effects.completed);
                true
            }
            Role::Follower(f) => f.leader_epoch != reg.leader_epoch || f.leader_id != reg.leader,
            Role::None => true,
        };
        self.replicas = reg.replicas.clone();
        self.role = Role::Follower(FollowerRole {
            leader_id: if reg.leader < 0 {
                NO_LEADER
            } else {
                reg.leader
            },
            leader_epoch: reg.leader_epoch,
            partition_epoch: reg.partition_epoch,
        });
        self.log_end_offset = log_end_offset.max(self.log_start_offset);
        self.high_watermark = self.high_watermark.min(self.log_end_offset);
        self.debug_check();
        Ok(Transition {
            leader_changed,
            effects,
        })
    }

    /// The partition is removed from this broker (deleted topic or reassigned away): fails
    /// every waiter with NOT_LEADER_OR_FOLLOWER.
    pub fn stop(&mut self) -> Effects {
        let mut effects = Effects::default();
        if let Role::Leader(l) = &mut self.role {
            l.waiters
                .fail_all(ErrorCode::NotLeaderOrFollower, &mut effects.completed);
        }
        self.role = Role::None;
        effects
    }

    /// The leader appended locally up to `log_end_offset` (exclusive). Advances the HW when
    /// the ISR allows (e.g. a single-member ISR) and resolves waiters.
    pub fn on_leader_append(&mut self, log_end_offset: i64, now_ms: u64) -> Effects {
        let mut effects = Effects::default();
        if self.is_leader() {
            debug_assert!(
                log_end_offset >= self.log_end_offset,
                "a leader LEO never goes back"
            );
            self.log_end_offset = self.log_end_offset.max(log_end_offset);
            self.update_leader_hw(now_ms, &mut effects);
        }
        self.debug_check();
        effects
    }

    /// Timer work: resends a due AlterPartition and expires acks=all waiters. Call it at
    /// least at [`PartitionState::next_timer_ms`]; ISR shrink checks are separate
    /// ([`PartitionState::maybe_shrink_isr`]).
    pub fn tick(&mut self, now_ms: u64) -> Effects {
        let mut effects = Effects::default();
        self.poll_alter_partition_retry(now_ms, &mut effects);
        self.update_leader_hw(now_ms, &mut effects);
        effects
    }

    /// Earliest time `tick` has work (waiter deadline or AlterPartition retry), if any.
    pub fn next_timer_ms(&self) -> Option<u64> {
        let l = self.leader_state()?;
        let retry = match &l.isr {
            IsrState::Pending {
                send: super::isr::SendState::RetryAt(t),
                ..
            } => Some(*t),
            _ => None,
        };
        [retry, l.waiters.next_deadline_ms()]
            .into_iter()
            .flatten()
            .min()
    }

    /// Leader: recomputes the HW over the maximal ISR and resolves waiters.
    pub(super) fn update_leader_hw(&mut self, now_ms: u64, effects: &mut Effects) {
        let Role::Leader(l) = &mut self.role else {
            return;
        };
        let min_insync = self.config.effective_min_insync();
        let maximal = l.isr.maximal_isr();
        let local = self.local_broker_id;
        let leos = maximal
            .iter()
            .filter(|id| **id != local)
            .map(|id| l.followers.get(id).and_then(|f| f.log_end_offset));
        let new_hw = leader_high_watermark(
            self.high_watermark,
            self.log_end_offset,
            leos,
            l.isr.isr().len(),
            min_insync,
        );
        debug_assert!(new_hw >= self.high_watermark, "leader HW never decreases");
        if new_hw != self.high_watermark {
            self.high_watermark = new_hw;
            effects.high_watermark = Some(new_hw);
        }
        let under_min_isr = l.isr.isr().len() < min_insync;
        l.waiters.resolve(
            self.high_watermark,
            under_min_isr,
            now_ms,
            &mut effects.completed,
        );
    }

    /// Checks the invariants (debug builds only).
    pub(super) fn debug_check(&self) {
        debug_assert!(0 <= self.log_start_offset);
        debug_assert!(self.log_start_offset <= self.high_watermark, "{self:?}");
        debug_assert!(self.high_watermark <= self.log_end_offset, "{self:?}");
        debug_assert!(self.replicas.len() <= MAX_REPLICAS);
        if let Role::Leader(l) = &self.role {
            let isr = l.isr.isr();
            let maximal = l.isr.maximal_isr();
            debug_assert!(
                isr.contains(&self.local_broker_id),
                "leader in ISR: {self:?}"
            );
            debug_assert!(
                isr.iter().all(|b| maximal.contains(b)),
                "ISR within maximal ISR"
            );
            debug_assert!(
                maximal.iter().all(|b| self.replicas.contains(b)),
                "ISR within replicas"
            );
            debug_assert!(
                l.followers.len() + 1 == self.replicas.len(),
                "one state per follower"
            );
            debug_assert!(l.epoch_start_offset <= self.log_end_offset);
        }
    }
}
