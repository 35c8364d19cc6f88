//! Replication rules of one partition on a broker (DESIGN §5 "ISR on the leader", "HW",
//! "Produce", "Becoming leader/follower"; issue 5 items 3–6): pure logic, no I/O, no async,
//! no wall clock — every time is a `now_ms: u64` argument of the caller's monotonic clock.
//! The async layer owns the logs, the network and the timers; it calls these functions and
//! executes what they return ([`Effects`], [`LeaderFetchDecision`], [`FollowerAction`],
//! [`ProduceReply`]). Modelled on Kafka's `Partition.scala` / `Replica.scala` /
//! `ReplicaManager` / `AbstractFetcherThread` (semantics only; the KIP or Kafka class is
//! cited at each rule).
//!
//! One concept per file:
//! - [`config`]: `replica.lag.time.max.ms`, `min.insync.replicas`, the optional offset-lag
//!   bound, bounds;
//! - [`epoch`]: leader-epoch fencing of requests;
//! - [`follower`]: what a leader knows about one follower (LEO, caught-up time);
//! - [`high_watermark`]: the leader and follower HW rules;
//! - [`isr`]: the leader's ISR state (committed / pending / awaiting metadata), the
//!   AlterPartition request and answers, ISR events (log lines);
//! - [`eligibility`]: may a broker join an ISR (from the metadata image);
//! - [`waiters`]: bounded acks=all waiters;
//! - [`quota`]: replication throttles (KIP-73): the measured rate and who waits;
//! - [`partition`]: [`PartitionState`], roles and transitions from metadata;
//! - [`leader_fetch`], [`isr_change`], [`produce`], [`consumer`], [`follower_fetch`]: the
//!   operations, as `impl PartitionState` blocks.
//!
//! Invariants (asserted in debug builds after every mutation, and by the property test in
//! `broker/tests/replica_props.rs`):
//! 1. `0 <= log start <= HW <= LEO` (HW exclusive; consumers read `< HW`);
//! 2. on a leader the HW never decreases, and it never exceeds the LEO of any maximal-ISR
//!    member (leader included) — it is the minimum over them; it does not move while a
//!    member's LEO is unknown (no fetch yet in this leader epoch) or while the committed
//!    ISR is smaller than min.insync.replicas (KAFKA-15583);
//! 3. the leader is in its committed ISR; committed ISR ⊆ maximal ISR ⊆ replicas; at most
//!    one AlterPartition is outstanding (KIP-497);
//! 4. a follower's LEO on the leader only comes from an accepted, non-diverging fetch
//!    (KAFKA-13141); an ISR expansion requires LEO >= HW and >= the leader epoch's start
//!    offset (KAFKA-7128) and an eligible broker (KIP-841/903);
//! 5. a follower truncates only to a divergence point the leader reported (never to its
//!    HW: KIP-101/279) and adopts the leader's HW only after truncating (KAFKA-14704);
//! 6. acks=all is rejected before the append when ISR < min.insync (NOT_ENOUGH_REPLICAS),
//!    and a waiter completes only when HW >= its batch end; it fails with
//!    NOT_ENOUGH_REPLICAS_AFTER_APPEND, REQUEST_TIMED_OUT or on leadership loss; waiters,
//!    followers and events are bounded.
//!
//! How the async layer drives a partition (one task or lock per partition):
//! - metadata delta: leader -> `Log::assign_epoch_start_offset(epoch)` then
//!   [`PartitionState::become_leader`]; follower -> [`PartitionState::become_follower`]
//!   then (re)start fetching when `leader_changed`; removed -> [`PartitionState::stop`];
//! - produce: [`Acks::from_wire`], [`PartitionState::check_produce`], `Log::append_as_leader`,
//!   [`PartitionState::on_produce_appended`];
//! - follower fetch on the leader: [`PartitionState::handle_follower_fetch`], then
//!   `Log::read(fetch_offset, max_bytes, upper_bound)` for `Read`;
//! - consumer fetch / ListOffsets: [`PartitionState::check_consumer_fetch`] /
//!   [`PartitionState::list_offsets`];
//! - timers: [`PartitionState::maybe_shrink_isr`] every `isr_check_interval_ms`,
//!   [`PartitionState::tick`] at [`PartitionState::next_timer_ms`];
//! - controller answers: [`PartitionState::handle_alter_partition_response`];
//! - follower side: [`PartitionState::follower_fetch_request`], [`plan_follower_response`],
//!   then [`PartitionState::on_follower_truncated`] / [`PartitionState::on_follower_appended`];
//! - after each call: publish `effects.high_watermark` (and checkpoint it), answer
//!   `effects.completed`, send `effects.alter_partition`, log `effects.isr_events`.

#![warn(missing_docs)]

pub mod config;
pub mod consumer;
pub mod eligibility;
pub mod epoch;
pub mod follower;
pub mod follower_fetch;
pub mod high_watermark;
pub mod isr;
pub mod isr_change;
pub mod leader_fetch;
pub mod partition;
pub mod produce;
pub mod quota;
pub mod waiters;

pub use config::ReplicaConfig;
pub use consumer::{ConsumerRead, ListOffsetsAnswer, OffsetSpec};
pub use eligibility::{EligibleBrokers, IsrEligibility, OneBroker};
pub use epoch::{check_leader_epoch, epoch_from_wire};
pub use follower::FollowerState;
pub use follower_fetch::{FollowerAction, FollowerFetchResponse, plan_follower_response};
pub use isr::{
    AlterPartitionRequest, AlterPartitionResponse, IsrEvent, IsrEventKind, IsrMember, IsrState,
};
pub use leader_fetch::{FollowerFetchRequest, LeaderFetchDecision};
pub use partition::{
    Effects, FollowerRole, LeaderState, LocalLog, PartitionState, Role, Transition, TransitionError,
};
pub use produce::{Acks, ProduceReply};
pub use waiters::{ProduceWaiters, WaiterCompletion};
