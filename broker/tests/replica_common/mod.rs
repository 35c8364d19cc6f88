//! Shared fixtures of the `replica_*` tests: registrations, a leader partition, follower
//! fetches without divergence.

#![allow(dead_code)]

use keel_broker::log::TopicPartition;
use keel_broker::replica::{
    EligibleBrokers, FollowerFetchRequest, LeaderFetchDecision, LocalLog, PartitionState,
    ReplicaConfig,
};
use keel_metadata_log::PartitionRegistration;
use keel_metadata_log::records::LeaderRecoveryState;

/// Broker epoch every test broker registered with.
pub const BROKER_EPOCH: i64 = 100;

/// A registration.
pub fn reg(
    replicas: &[i32],
    isr: &[i32],
    leader: i32,
    leader_epoch: i32,
    partition_epoch: i32,
) -> PartitionRegistration {
    PartitionRegistration {
        replicas: replicas.to_vec(),
        isr: isr.to_vec(),
        removing_replicas: vec![],
        adding_replicas: vec![],
        leader,
        leader_recovery_state: LeaderRecoveryState::Recovered,
        leader_epoch,
        partition_epoch,
        elr: vec![],
        last_known_elr: vec![],
    }
}

/// Config with `min.insync.replicas = min` and a 30 s lag time.
pub fn cfg(min: usize) -> ReplicaConfig {
    ReplicaConfig {
        min_insync_replicas: min,
        ..ReplicaConfig::default()
    }
}

/// A fresh partition on `local` with an empty log at `leo` (HW = `hw`).
pub fn hosted(local: i32, config: ReplicaConfig, leo: i64, hw: i64) -> PartitionState {
    PartitionState::new(
        TopicPartition::new("events", 0),
        local,
        BROKER_EPOCH,
        config,
        LocalLog {
            log_start_offset: 0,
            log_end_offset: leo,
            high_watermark: hw,
        },
    )
}

/// Broker 1 leading `replicas` with `isr` at leader epoch 1 / partition epoch 1, log at
/// `leo`, at time `now`.
pub fn leader(replicas: &[i32], isr: &[i32], min: usize, leo: i64, now: u64) -> PartitionState {
    let mut p = hosted(1, cfg(min), leo, 0);
    p.become_leader(&reg(replicas, isr, 1, 1, 1), leo, leo, now)
        .unwrap();
    p
}

/// Every broker 1..=5 eligible with [`BROKER_EPOCH`].
pub fn eligible() -> EligibleBrokers {
    EligibleBrokers::all(&[1, 2, 3, 4, 5], BROKER_EPOCH)
}

/// A follower fetch at `offset` with the current leader epoch and no last fetched epoch.
pub fn fetch_req(p: &PartitionState, follower: i32, offset: i64) -> FollowerFetchRequest {
    FollowerFetchRequest {
        replica_id: follower,
        broker_epoch: Some(BROKER_EPOCH),
        fetch_offset: offset,
        last_fetched_epoch: None,
        current_leader_epoch: p.leader_epoch(),
        log_start_offset: Some(0),
    }
}

/// Follower `follower` fetches at `offset` (no divergence possible); panics on errors.
pub fn fetch(p: &mut PartitionState, follower: i32, offset: i64, now: u64) -> LeaderFetchDecision {
    let req = fetch_req(p, follower, offset);
    p.handle_follower_fetch(&req, |e| (e, i64::MAX), &eligible(), now)
        .unwrap()
}

/// The effects of a `Read` decision.
pub fn read_effects(d: LeaderFetchDecision) -> keel_broker::replica::Effects {
    match d {
        LeaderFetchDecision::Read { effects, .. } => effects,
        other => panic!("expected Read, got {other:?}"),
    }
}
