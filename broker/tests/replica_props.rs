//! Property: random interleavings of leader appends, follower fetches, ISR shrink checks,
//! AlterPartition answers, metadata updates and timer ticks never make a leader's HW go
//! down, never put it above the LEO of any maximal-ISR member (leader included), never move
//! it while the committed ISR is below min.insync.replicas (KAFKA-15583), and complete an
//! acks=all waiter successfully only once the HW covers its batch.

mod replica_common;

use keel_broker::replica::{Acks, AlterPartitionResponse, Effects, PartitionState};
use keel_proto::ErrorCode;
use proptest::prelude::*;
use replica_common::*;

const REPLICAS: [i32; 4] = [1, 2, 3, 4];

#[derive(Debug, Clone)]
enum Op {
    Append(i64),
    /// Follower index (0..3) advances its position by this much (capped at the leader LEO)
    /// and fetches.
    Fetch(usize, i64),
    Shrink,
    Tick,
    /// Answer the pending AlterPartition: 0 = commit, 1 = NOT_CONTROLLER, 2 =
    /// INVALID_UPDATE_VERSION, 3 = INELIGIBLE_REPLICA, 4 = transport.
    Answer(u8),
    /// The controller removes the follower at this index from the ISR (e.g. it was fenced).
    MetadataRemove(usize),
    Advance(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (1i64..5).prop_map(Op::Append),
        (0usize..3, 0i64..6).prop_map(|(f, n)| Op::Fetch(f, n)),
        Just(Op::Shrink),
        Just(Op::Tick),
        (0u8..5).prop_map(Op::Answer),
        (0usize..3).prop_map(Op::MetadataRemove),
        (1u64..20_000).prop_map(Op::Advance),
    ]
}

fn check(p: &PartitionState, hw_before: i64, effects: &Effects, min: usize, step: usize) {
    let hw = p.high_watermark();
    assert!(
        hw >= hw_before,
        "step {step}: HW went down {hw_before} -> {hw}"
    );
    if p.isr().unwrap().len() < min {
        assert_eq!(hw, hw_before, "step {step}: HW moved below min.insync");
    }
    for c in &effects.completed {
        if c.error == ErrorCode::None {
            assert!(
                c.required_offset <= hw,
                "step {step}: {c:?} acked above HW {hw}"
            );
        }
        if c.error == ErrorCode::NotEnoughReplicasAfterAppend {
            assert!(
                p.isr().unwrap().len() < min,
                "step {step}: {c:?} with ISR >= min"
            );
        }
    }
    assert!(
        hw <= p.log_end_offset(),
        "step {step}: HW above the leader LEO"
    );
    let l = p.leader_state().unwrap();
    for id in l.isr.maximal_isr().iter().filter(|id| **id != 1) {
        match l.followers[id].log_end_offset {
            Some(leo) => assert!(
                hw <= leo,
                "step {step}: HW {hw} above member {id}'s LEO {leo}"
            ),
            None => assert_eq!(hw, 0, "step {step}: HW moved with member {id} unknown"),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, .. ProptestConfig::default() })]

    #[test]
    fn leader_hw_is_monotonic_and_bounded_by_maximal_isr(
        isr_mask in 0u8..8,
        min in 1usize..4,
        ops in proptest::collection::vec(op(), 1..120),
    ) {
        let mut isr = vec![1];
        for (i, id) in REPLICAS[1..].iter().enumerate() {
            if isr_mask & (1 << i) != 0 {
                isr.push(*id);
            }
        }
        let mut p = leader(&REPLICAS, &isr, min, 0, 0);
        let mut positions = [0i64; 3];
        let mut now = 0u64;
        let mut partition_epoch = 1;
        for (step, op) in ops.into_iter().enumerate() {
            let hw_before = p.high_watermark();
            let effects = match op {
                Op::Append(n) => {
                    let leo = p.log_end_offset() + n;
                    if p.check_produce(Acks::All, None).is_ok() {
                        let deadline = now + 30_000;
                        let (_, effects) =
                            p.on_produce_appended(Acks::All, leo - 1, leo, step as u64, deadline, now);
                        effects
                    } else {
                        p.on_leader_append(leo, now)
                    }
                }
                Op::Fetch(f, n) => {
                    positions[f] = (positions[f] + n).min(p.log_end_offset());
                    read_effects(fetch(&mut p, REPLICAS[f + 1], positions[f], now))
                }
                Op::Shrink => p.maybe_shrink_isr(now),
                Op::Tick => p.tick(now),
                Op::Answer(kind) => {
                    let Some(req) = p.leader_state().unwrap().isr.pending_request().cloned()
                    else {
                        continue;
                    };
                    let response = match kind {
                        0 => {
                            partition_epoch += 1;
                            AlterPartitionResponse::Committed {
                                leader_epoch: 1,
                                partition_epoch,
                                isr: req.new_isr_ids(),
                            }
                        }
                        1 => AlterPartitionResponse::Error(ErrorCode::NotController),
                        2 => AlterPartitionResponse::Error(ErrorCode::InvalidUpdateVersion),
                        3 => AlterPartitionResponse::Error(ErrorCode::IneligibleReplica),
                        _ => AlterPartitionResponse::Transport,
                    };
                    p.handle_alter_partition_response(req.request_id, response, now)
                }
                Op::MetadataRemove(f) => {
                    let isr: Vec<i32> = p
                        .isr()
                        .unwrap()
                        .iter()
                        .copied()
                        .filter(|id| *id != REPLICAS[f + 1])
                        .collect();
                    partition_epoch += 1;
                    let leo = p.log_end_offset();
                    let start = p.leader_state().unwrap().epoch_start_offset;
                    p.become_leader(&reg(&REPLICAS, &isr, 1, 1, partition_epoch), leo, start, now)
                        .unwrap()
                        .effects
                }
                Op::Advance(ms) => {
                    now += ms;
                    Effects::default()
                }
            };
            check(&p, hw_before, &effects, min, step);
        }
    }
}
