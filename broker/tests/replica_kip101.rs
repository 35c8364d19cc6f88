//! The two "HW defect" timelines of seed 004 (KIP-101) as sequences of pure calls on a tiny
//! in-memory model of each broker's log (one record per offset, tagged with its leader
//! epoch) and the real in-memory leader-epoch cache. The replica rules decide; the model
//! only executes. Checked: no record acknowledged with acks=all is lost, the follower never
//! truncates to its HW (only to the divergence point the leader reports), it adopts the
//! leader's HW only after truncating (KAFKA-14704), and the logs converge (DESIGN §7
//! invariants 1 and 2).

mod replica_common;

use keel_broker::log::LeaderEpochCache;
use keel_broker::replica::{
    Acks, Effects, FollowerAction, FollowerFetchResponse, LeaderFetchDecision, LocalLog,
    PartitionState, ProduceReply, plan_follower_response,
};
use keel_proto::ErrorCode;
use replica_common::*;

/// One broker of the model.
struct Node {
    log: Vec<(i32, &'static str)>,
    cache: LeaderEpochCache,
    state: PartitionState,
    id: i32,
}

impl Node {
    fn new(id: i32) -> Self {
        Node {
            log: Vec::new(),
            cache: LeaderEpochCache::in_memory(),
            state: hosted(id, cfg(1), 0, 0),
            id,
        }
    }

    fn leo(&self) -> i64 {
        self.log.len() as i64
    }

    fn values(&self) -> Vec<&'static str> {
        self.log.iter().map(|(_, v)| *v).collect()
    }

    /// Crash and restart: only the first `flushed` records survive (page cache lost); the
    /// state is rebuilt from the log and the HW checkpoint `hw_checkpoint`.
    fn restart(&mut self, flushed: usize, hw_checkpoint: i64) {
        self.log.truncate(flushed);
        self.cache.truncate_from_end(self.leo()).unwrap();
        self.state = PartitionState::new(
            self.state.topic_partition().clone(),
            self.id,
            BROKER_EPOCH,
            cfg(1),
            LocalLog {
                log_start_offset: 0,
                log_end_offset: self.leo(),
                high_watermark: hw_checkpoint,
            },
        );
    }

    /// Metadata says this broker leads at `epoch`: record (epoch, LEO) first (KAFKA-7415).
    fn lead(&mut self, replicas: &[i32], isr: &[i32], epoch: i32, partition_epoch: i32) {
        self.cache.assign(epoch, self.leo()).unwrap();
        let leo = self.leo();
        self.state
            .become_leader(
                &reg(replicas, isr, self.id, epoch, partition_epoch),
                leo,
                leo,
                0,
            )
            .unwrap();
    }

    fn follow(&mut self, replicas: &[i32], isr: &[i32], leader: i32, epoch: i32, pe: i32) {
        let leo = self.leo();
        self.state
            .become_follower(&reg(replicas, isr, leader, epoch, pe), leo)
            .unwrap();
    }

    /// Leader append of one record; returns the produce reply and effects.
    fn produce(&mut self, acks: Acks, value: &'static str, token: u64) -> (ProduceReply, Effects) {
        self.state.check_produce(acks, None).unwrap();
        let epoch = self.state.leader_epoch().unwrap();
        self.log.push((epoch, value));
        let leo = self.leo();
        self.state
            .on_produce_appended(acks, leo - 1, leo, token, u64::MAX, 0)
    }
}

/// What one fetch round did on the follower.
#[derive(Debug, PartialEq, Eq)]
enum Round {
    Appended(usize),
    Truncated(i64),
}

/// One fetch round `follower` -> `leader`, with the response delivered unless `lose_response`.
/// Returns the leader's effects and what the follower did.
fn replicate(
    leader: &mut Node,
    follower: &mut Node,
    lose_response: bool,
) -> (Effects, Option<Round>) {
    let (to, req) = follower
        .state
        .follower_fetch_request(follower.cache.latest_epoch())
        .expect("following");
    assert_eq!(to, leader.id);
    let leader_leo = leader.leo();
    let decision = leader
        .state
        .handle_follower_fetch(
            &req,
            |e| leader.cache.end_offset_for(e, leader_leo),
            &eligible(),
            0,
        )
        .expect("fetch accepted");
    let (effects, response, records) = match decision {
        LeaderFetchDecision::Diverging {
            epoch, end_offset, ..
        } => (
            Effects::default(),
            FollowerFetchResponse::Diverging { epoch, end_offset },
            vec![],
        ),
        LeaderFetchDecision::Read {
            fetch_offset,
            upper_bound_exclusive,
            high_watermark,
            log_start_offset,
            effects,
        } => (
            effects,
            FollowerFetchResponse::Records {
                high_watermark,
                leader_log_start_offset: log_start_offset,
            },
            leader.log[fetch_offset as usize..upper_bound_exclusive as usize].to_vec(),
        ),
    };
    if lose_response {
        return (effects, None);
    }
    let follower_leo = follower.leo();
    let action = plan_follower_response(&response, follower_leo, |e| {
        follower.cache.end_offset_for(e, follower_leo)
    });
    let round = match action {
        FollowerAction::AppendThenAdoptHw {
            leader_high_watermark,
            ..
        } => {
            for (epoch, v) in &records {
                follower.cache.assign(*epoch, follower.leo()).unwrap();
                follower.log.push((*epoch, v));
            }
            let leo = follower.leo();
            follower
                .state
                .on_follower_appended(leo, leader_high_watermark);
            Round::Appended(records.len())
        }
        FollowerAction::Truncate { offset, .. } => {
            let hw_before = follower.state.high_watermark();
            follower.log.truncate(offset as usize);
            follower.cache.truncate_from_end(offset).unwrap();
            let leo = follower.leo();
            follower.state.on_follower_truncated(0, leo);
            assert!(
                follower.state.high_watermark() <= hw_before,
                "KAFKA-14704: no HW adopted from a diverging response"
            );
            Round::Truncated(offset)
        }
        other => panic!("unexpected follower action {other:?}"),
    };
    (effects, Some(round))
}

fn acked(effects: &Effects, token: u64) -> bool {
    effects
        .completed
        .iter()
        .any(|c| c.token == token && c.error == ErrorCode::None)
}

/// Defect #1 (data loss): A leads, B follows, acks=all, min.insync 1. m2 is acknowledged
/// once B fetched it, but B restarts before it learns the new HW (its checkpoint says 1).
/// Truncating to the local HW (pre-KIP-101) would drop m2 and, with A then dying and B
/// elected, lose an acknowledged record. With KIP-101 B keeps its log and m2 survives.
#[test]
fn kip_101_timeline_1_no_acked_loss_on_restart_then_failover() {
    let (mut a, mut b) = (Node::new(1), Node::new(2));
    a.lead(&[1, 2], &[1, 2], 0, 0);
    b.follow(&[1, 2], &[1, 2], 1, 0, 0);

    // t0: m1 committed on both.
    assert_eq!(a.produce(Acks::All, "m1", 1).0, ProduceReply::Wait);
    replicate(&mut a, &mut b, false);
    let (effects, _) = replicate(&mut a, &mut b, false);
    assert!(acked(&effects, 1));
    assert_eq!(b.state.high_watermark(), 1);

    // t1: m2 written on A; B fetches it (its HW stays 1), then its next fetch advances A's
    // HW to 2 and m2 is acknowledged — but that response never reaches B.
    assert_eq!(a.produce(Acks::All, "m2", 2).0, ProduceReply::Wait);
    assert_eq!(replicate(&mut a, &mut b, false).1, Some(Round::Appended(1)));
    assert_eq!((b.leo(), b.state.high_watermark()), (2, 1));
    let (effects, _) = replicate(&mut a, &mut b, true);
    assert!(acked(&effects, 2), "m2 acknowledged with acks=all");
    assert_eq!(a.state.high_watermark(), 2);

    // t2: B restarts with HW checkpoint 1 < LEO 2. It does not truncate to the HW.
    let hw_checkpoint = b.state.high_watermark();
    b.restart(2, hw_checkpoint);
    b.follow(&[1, 2], &[1, 2], 1, 0, 0);
    assert_eq!(
        b.values(),
        vec!["m1", "m2"],
        "KIP-101: no truncation to the local HW"
    );
    assert!(
        hw_checkpoint < 2,
        "the pre-KIP-101 rule would have dropped m2 here"
    );

    // t3: A dies; the controller elects B (in ISR) at epoch 1 with ISR [2].
    b.lead(&[1, 2], &[2], 1, 1);
    assert_eq!(b.values(), vec!["m1", "m2"], "acknowledged m2 survives");
    assert_eq!(b.state.high_watermark(), 2);

    // t4: A comes back as a follower; its fetch does not diverge; B writes m3 and A
    // catches up; both logs equal.
    a.restart(2, 2);
    a.follow(&[1, 2], &[2], 2, 1, 1);
    b.produce(Acks::All, "m3", 3);
    for _ in 0..3 {
        replicate(&mut b, &mut a, false);
    }
    assert_eq!(a.log, b.log);
    assert_eq!(a.values(), vec!["m1", "m2", "m3"]);
}

/// Defect #2 (divergence): A leads with [m1, m2]; B fetched m2 (A's HW is 2) but loses it
/// in a power failure of both brokers (m2 was produced with acks=1: never acknowledged as
/// committed-to-ISR by an acks=all answer). B comes back first and is elected at epoch 1;
/// it writes m3 at offset 1 (acks=all, acknowledged). A restarts with HW 2 = LEO: the
/// pre-KIP-101 rule keeps m2 at offset 1 forever (two values for one offset). With
/// KIP-101 A learns the divergence point (epoch 0 ends at 1 on B), truncates there, and
/// replicates m3.
#[test]
fn kip_101_timeline_2_divergence_is_repaired() {
    let (mut a, mut b) = (Node::new(1), Node::new(2));
    a.lead(&[1, 2], &[1, 2], 0, 0);
    b.follow(&[1, 2], &[1, 2], 1, 0, 0);
    a.produce(Acks::All, "m1", 1);
    replicate(&mut a, &mut b, false);
    replicate(&mut a, &mut b, false);
    assert_eq!(
        a.produce(Acks::Leader, "m2", 2).0,
        ProduceReply::Respond(ErrorCode::None)
    );
    replicate(&mut a, &mut b, false);
    replicate(&mut a, &mut b, true);
    assert_eq!(a.state.high_watermark(), 2);

    // Power failure: B loses unflushed m2; A keeps everything with HW checkpoint 2.
    b.restart(1, 1);
    a.restart(2, 2);

    // B elected at epoch 1 (A offline); m3 acknowledged with acks=all on ISR [2].
    b.lead(&[1, 2], &[2], 1, 1);
    let (reply, _) = b.produce(Acks::All, "m3", 3);
    assert_eq!(
        reply,
        ProduceReply::Respond(ErrorCode::None),
        "ISR [2], min 1"
    );
    assert_eq!(b.values(), vec!["m1", "m3"]);
    assert_eq!(
        a.values(),
        vec!["m1", "m2"],
        "pre-KIP-101: HW 2 = LEO, nothing truncated"
    );

    // A follows B: diverging epoch (0, 1) -> truncate to 1 (not to its HW 2), then fetch m3.
    a.follow(&[1, 2], &[2], 2, 1, 1);
    assert_eq!(
        replicate(&mut b, &mut a, false).1,
        Some(Round::Truncated(1))
    );
    assert_eq!(a.values(), vec!["m1"]);
    assert_eq!(
        a.state.high_watermark(),
        1,
        "HW clamped to the truncated log, not adopted"
    );
    assert_eq!(replicate(&mut b, &mut a, false).1, Some(Round::Appended(1)));
    assert_eq!(a.log, b.log, "one value per offset");
    assert_eq!(
        a.values(),
        vec!["m1", "m3"],
        "acknowledged m3 present on both"
    );
}
