//! Produce decisions of the replica rules: the acks × min.insync.replicas × ISR matrix of
//! seed 004, seed 000's two acks=all failure windows and its lab, waiter timeout and
//! leadership loss, epoch fencing.

mod replica_common;

use keel_broker::replica::{
    Acks, AlterPartitionResponse, Effects, ProduceReply, ReplicaConfig, WaiterCompletion,
};
use keel_proto::ErrorCode;
use replica_common::*;

/// How a produce ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// Answered with this code.
    Answered(ErrorCode),
    /// acks=0: no answer.
    NoResponse,
}

fn completion_for(effects: &Effects, token: u64) -> Option<WaiterCompletion> {
    effects.completed.iter().copied().find(|c| c.token == token)
}

/// Runs one produce of a one-record batch against broker 1 leading replicas [1, 2, 3] with
/// `isr`, then lets every ISR follower fetch up to the leader's LEO. `log` is the leader's
/// in-memory log (one entry per offset).
fn produce_once(acks: i32, min: usize, isr: &[i32], log: &mut Vec<&'static str>) -> Outcome {
    let mut p = leader(&[1, 2, 3], isr, min, log.len() as i64, 0);
    let acks = match Acks::from_wire(acks) {
        Ok(a) => a,
        Err(e) => return Outcome::Answered(e),
    };
    if let Err(e) = p.check_produce(acks, Some(1)) {
        return Outcome::Answered(e);
    }
    log.push("m");
    let leo = log.len() as i64;
    let (reply, _) = p.on_produce_appended(acks, leo - 1, leo, 7, 30_000, 0);
    match reply {
        ProduceReply::NoResponse => Outcome::NoResponse,
        ProduceReply::Respond(e) => Outcome::Answered(e),
        ProduceReply::Wait => {
            let mut done = None;
            for f in isr.iter().filter(|b| **b != 1) {
                let effects = read_effects(fetch(&mut p, *f, leo, 10));
                done = done.or(completion_for(&effects, 7));
            }
            Outcome::Answered(
                done.expect("waiter must complete once the ISR fetched")
                    .error,
            )
        }
    }
}

#[test]
fn acks_min_insync_isr_matrix_of_seed_004() {
    use ErrorCode::*;
    use Outcome::*;
    // (acks, min.insync.replicas, ISR, outcome, log grows)
    let cases: &[(i32, usize, &[i32], Outcome, bool)] = &[
        (-1, 2, &[1, 2, 3], Answered(None), true),
        (-1, 2, &[1, 2], Answered(None), true),
        (-1, 2, &[1], Answered(NotEnoughReplicas), false),
        (-1, 1, &[1], Answered(None), true),
        (1, 2, &[1], Answered(None), true),
        (1, 2, &[1, 2, 3], Answered(None), true),
        (1, 3, &[1, 2], Answered(None), true),
        (0, 2, &[1], NoResponse, true),
        (0, 1, &[1, 2, 3], NoResponse, true),
        (2, 1, &[1, 2, 3], Answered(InvalidRequiredAcks), false),
        (-2, 1, &[1], Answered(InvalidRequiredAcks), false),
    ];
    for &(acks, min, isr, want, grows) in cases {
        let mut log = vec!["m0", "m1"];
        let got = produce_once(acks, min, isr, &mut log);
        assert_eq!(got, want, "acks={acks} min={min} isr={isr:?}");
        assert_eq!(
            log.len(),
            if grows { 3 } else { 2 },
            "log for acks={acks} min={min} isr={isr:?}"
        );
    }
}

#[test]
fn not_enough_replicas_after_append_window() {
    // ISR {1,2}, min 2: an acks=all batch waits; follower 2 stops; the shrink is proposed
    // (HW held: pessimistic) and, once committed, the waiter fails with
    // NOT_ENOUGH_REPLICAS_AFTER_APPEND; the next acks=all fails before the append.
    let mut p = leader(&[1, 2], &[1, 2], 2, 0, 0);
    p.check_produce(Acks::All, None).unwrap();
    let (reply, _) = p.on_produce_appended(Acks::All, 0, 1, 1, 60_000, 0);
    assert_eq!(reply, ProduceReply::Wait);

    assert!(p.maybe_shrink_isr(15_000).is_empty(), "within the lag time");
    let shrink = p.maybe_shrink_isr(30_001);
    let req = shrink.alter_partition.clone().expect("shrink proposed");
    assert_eq!(req.new_isr_ids(), vec![1]);
    assert!(
        shrink.completed.is_empty(),
        "shrink is pessimistic: waiter still waits"
    );
    assert_eq!(p.high_watermark(), 0);

    let effects = p.handle_alter_partition_response(
        req.request_id,
        AlterPartitionResponse::Committed {
            leader_epoch: 1,
            partition_epoch: 2,
            isr: vec![1],
        },
        30_010,
    );
    assert_eq!(
        completion_for(&effects, 1).map(|c| c.error),
        Some(ErrorCode::NotEnoughReplicasAfterAppend)
    );
    assert_eq!(
        p.high_watermark(),
        0,
        "KAFKA-15583: no advance below min.insync"
    );
    assert_eq!(
        p.check_produce(Acks::All, None),
        Err(ErrorCode::NotEnoughReplicas)
    );
    assert_eq!(p.check_produce(Acks::Leader, None), Ok(()));
}

#[test]
fn waiter_times_out_at_its_deadline() {
    let mut p = leader(&[1, 2], &[1, 2], 2, 0, 0);
    let (reply, _) = p.on_produce_appended(Acks::All, 0, 1, 9, 5_000, 0);
    assert_eq!(reply, ProduceReply::Wait);
    assert_eq!(p.next_timer_ms(), Some(5_000));
    assert!(p.tick(4_999).completed.is_empty());
    let effects = p.tick(5_000);
    assert_eq!(
        completion_for(&effects, 9).map(|c| c.error),
        Some(ErrorCode::RequestTimedOut)
    );
    assert_eq!(p.next_timer_ms(), None);
}

#[test]
fn leadership_loss_fails_waiters() {
    // Another broker becomes leader: NOT_LEADER_OR_FOLLOWER.
    let mut p = leader(&[1, 2], &[1, 2], 1, 0, 0);
    p.on_produce_appended(Acks::All, 0, 1, 1, 60_000, 0);
    p.on_produce_appended(Acks::All, 1, 2, 2, 60_000, 0);
    let t = p
        .become_follower(&reg(&[1, 2], &[1, 2], 2, 2, 2), 2)
        .unwrap();
    assert!(t.leader_changed);
    let errors: Vec<_> = t
        .effects
        .completed
        .iter()
        .map(|c| (c.token, c.error))
        .collect();
    assert_eq!(
        errors,
        vec![
            (1, ErrorCode::NotLeaderOrFollower),
            (2, ErrorCode::NotLeaderOrFollower)
        ]
    );
    assert_eq!(
        p.check_produce(Acks::Leader, Some(2)),
        Err(ErrorCode::NotLeaderOrFollower)
    );

    // Re-elected with a new leader epoch: the old epoch's waiters are fenced.
    let mut p = leader(&[1, 2], &[1, 2], 1, 0, 0);
    p.on_produce_appended(Acks::All, 0, 1, 3, 60_000, 0);
    let t = p
        .become_leader(&reg(&[1, 2], &[1, 2], 1, 2, 2), 1, 1, 10)
        .unwrap();
    assert_eq!(
        t.effects.completed.first().map(|c| c.error),
        Some(ErrorCode::FencedLeaderEpoch)
    );

    // Partition removed.
    let mut p = leader(&[1, 2], &[1, 2], 1, 0, 0);
    p.on_produce_appended(Acks::All, 0, 1, 4, 60_000, 0);
    assert_eq!(
        p.stop().completed.first().map(|c| c.error),
        Some(ErrorCode::NotLeaderOrFollower)
    );
}

#[test]
fn produce_epoch_fencing_table() {
    let p = leader(&[1, 2], &[1, 2], 1, 0, 0); // leader epoch 1
    let cases = [
        (Some(1), Ok(())),
        (None, Ok(())),
        (Some(0), Err(ErrorCode::FencedLeaderEpoch)),
        (Some(2), Err(ErrorCode::UnknownLeaderEpoch)),
    ];
    for (epoch, want) in cases {
        assert_eq!(p.check_produce(Acks::Leader, epoch), want, "{epoch:?}");
    }
    let mut f = hosted(2, cfg(1), 0, 0);
    assert_eq!(
        f.check_produce(Acks::Leader, None),
        Err(ErrorCode::NotLeaderOrFollower)
    );
    f.become_follower(&reg(&[1, 2], &[1, 2], 1, 1, 1), 0)
        .unwrap();
    assert_eq!(
        f.check_produce(Acks::Leader, Some(1)),
        Err(ErrorCode::NotLeaderOrFollower)
    );
    assert_eq!(
        f.check_produce(Acks::Leader, Some(0)),
        Err(ErrorCode::FencedLeaderEpoch)
    );
}

#[test]
fn waiter_bound_rejects_before_append() {
    let mut p = hosted(
        1,
        ReplicaConfig {
            max_waiters: 1,
            ..cfg(1)
        },
        0,
        0,
    );
    p.become_leader(&reg(&[1, 2], &[1, 2], 1, 1, 1), 0, 0, 0)
        .unwrap();
    p.check_produce(Acks::All, None).unwrap();
    assert_eq!(
        p.on_produce_appended(Acks::All, 0, 1, 1, 1_000, 0).0,
        ProduceReply::Wait
    );
    assert_eq!(
        p.check_produce(Acks::All, None),
        Err(ErrorCode::RequestTimedOut)
    );
    assert_eq!(p.check_produce(Acks::Leader, None), Ok(()));
}

/// Seed 000's lab ("收缩、恢复与栅栏") as pure calls: brokers 1 and 2, min.insync 2, offset
/// lag bound 0. Expected output of the seed: initial ISR [1, 2]; after a leader-only append
/// [1]; acks=all precheck NOT_ENOUGH_REPLICAS; after catch-up [1, 2] with HW 1; promoted
/// leader 2 at a new epoch; a request with the old epoch gets FENCED_LEADER_EPOCH.
#[test]
fn seed_000_lab() {
    let config = ReplicaConfig {
        replica_lag_max_messages: Some(0),
        ..cfg(2)
    };
    let mut b1 = hosted(1, config, 0, 0);
    b1.become_leader(&reg(&[1, 2], &[1, 2], 1, 0, 0), 0, 0, 0)
        .unwrap();
    assert_eq!(b1.isr(), Some(&[1, 2][..]), "initial ISR");
    // Follower 2 is at the (empty) log end.
    read_effects(fetch(&mut b1, 2, 0, 1));

    // acks=1 append of "one"; follower 2 is now 1 offset behind > 0.
    b1.check_produce(Acks::Leader, Some(0)).unwrap();
    let (reply, _) = b1.on_produce_appended(Acks::Leader, 0, 1, 1, 0, 2);
    assert_eq!(reply, ProduceReply::Respond(ErrorCode::None));
    let shrink = b1.maybe_shrink_isr(3);
    let req = shrink.alter_partition.expect("shrink");
    assert!(
        shrink.isr_events[0]
            .to_string()
            .starts_with("Shrinking ISR for partition events-0 from [1, 2] to [1]")
    );
    b1.handle_alter_partition_response(
        req.request_id,
        AlterPartitionResponse::Committed {
            leader_epoch: 0,
            partition_epoch: 1,
            isr: vec![1],
        },
        4,
    );
    assert_eq!(b1.isr(), Some(&[1][..]), "after leader-only append");
    assert_eq!(
        b1.check_produce(Acks::All, Some(0)),
        Err(ErrorCode::NotEnoughReplicas)
    );

    // Follower catches up: expansion proposed, committed; HW 1.
    let effects = read_effects(fetch(&mut b1, 2, 1, 5));
    let req = effects.alter_partition.expect("expansion");
    assert_eq!(req.new_isr_ids(), vec![1, 2]);
    assert!(
        effects.isr_events[0]
            .to_string()
            .starts_with("Expanding ISR for partition events-0 from [1] to [1, 2]")
    );
    b1.handle_alter_partition_response(
        req.request_id,
        AlterPartitionResponse::Committed {
            leader_epoch: 0,
            partition_epoch: 2,
            isr: vec![1, 2],
        },
        6,
    );
    assert_eq!(b1.isr(), Some(&[1, 2][..]));
    assert_eq!(b1.high_watermark(), 1, "after follower catch-up: HW 1");

    // Promotion of broker 2: leader epoch 1. A request carrying epoch 0 is fenced.
    let mut b2 = hosted(2, config, 1, 1);
    b2.become_leader(&reg(&[1, 2], &[1, 2], 2, 1, 3), 1, 1, 7)
        .unwrap();
    b1.become_follower(&reg(&[1, 2], &[1, 2], 2, 1, 3), 1)
        .unwrap();
    assert_eq!(b2.leader_epoch(), Some(1));
    assert_eq!(
        b2.check_produce(Acks::Leader, Some(0)),
        Err(ErrorCode::FencedLeaderEpoch)
    );
    assert_eq!(
        b1.check_produce(Acks::Leader, Some(1)),
        Err(ErrorCode::NotLeaderOrFollower)
    );
}
