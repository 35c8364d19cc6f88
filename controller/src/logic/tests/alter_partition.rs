//! AlterPartition: every rejection with its exact code (table), the validation order, and
//! success cases whose reply must equal the image after replaying the returned records.

use super::common::{Cluster, code};
use crate::logic::{alter_partition, elect_leaders, fence_broker, unregister_broker};
use keel_proto::ErrorCode;
use keel_proto::controller::{
    AlterPartitionPartition, AlterPartitionRequest, AlterPartitionTopic, BrokerState,
    ElectLeadersRequest, ElectTopicPartitions, ElectionType, UnregisterBrokerRequest,
};
use keel_proto::metadata::LeaderRecoveryState;

/// Brokers 1, 2, 3 live; 4 in controlled shutdown; 5 registered but fenced; 6 fenced and
/// re-registered (new epoch; old epoch returned); 7 unregistered. Topic `t` partition 0 with
/// replicas [1..=7], leader 1 (after a failover to 2 and a preferred election back, so the
/// leader epoch is 2), ISR [1, 2, 3].
fn setup() -> (Cluster, i64) {
    let mut c = Cluster::new();
    for b in [1, 2, 3, 4, 6, 7] {
        c.add_broker(b, None);
    }
    c.register_gen(5, None, 1);
    c.create_topic("t", &[&[1, 2, 3, 4, 5, 6, 7]]);
    assert_eq!(c.partition("t", 0).isr, vec![1, 2, 3, 4, 6, 7]);
    // 4 asks for controlled shutdown: out of the ISR.
    let r = c.heartbeat(4, false, true);
    assert!(!r.should_shut_down);
    // 6 dies, is fenced, restarts with a new incarnation and catches up.
    let old6 = c.epoch(6);
    let f = fence_broker(&c.image, 6);
    c.apply(&f.records);
    c.register_gen(6, None, 2);
    assert!(!c.heartbeat(6, false, false).is_fenced);
    assert_ne!(c.epoch(6), old6);
    // 7 unregisters.
    let u = unregister_broker(&c.image, &UnregisterBrokerRequest { broker_id: 7 });
    c.commit(u);
    assert_eq!(c.partition("t", 0).isr, vec![1, 2, 3]);
    // Failover 1 -> 2 and back (leader epoch 0 -> 1 -> 2).
    let f = fence_broker(&c.image, 1);
    c.apply(&f.records);
    assert_eq!(c.partition("t", 0).leader, 2);
    assert!(!c.heartbeat(1, false, false).is_fenced);
    let p = c.partition("t", 0);
    let expand = leader_request(&c, 2, &p, &[1, 2, 3]);
    let r = alter_partition(&c.image, &expand);
    assert_eq!(
        code(&r.response.topics[0].partitions[0].error),
        ErrorCode::None
    );
    c.commit(r);
    let el = elect_leaders(
        &c.image,
        &ElectLeadersRequest {
            election_type: ElectionType::Preferred as i32,
            all_partitions: false,
            topic_partitions: vec![ElectTopicPartitions {
                topic: "t".into(),
                partitions: vec![0],
            }],
        },
    );
    c.commit(el);
    let p = c.partition("t", 0);
    assert_eq!((p.leader, p.leader_epoch), (1, 2));
    assert_eq!(p.isr, vec![1, 2, 3]);
    (c, old6)
}

fn states(c: &Cluster, isr: &[i32]) -> Vec<BrokerState> {
    isr.iter()
        .map(|&b| BrokerState {
            broker_id: b,
            broker_epoch: c.image.broker(b).map_or(-1, |r| r.epoch),
        })
        .collect()
}

/// A well-formed request from `leader` for `t-0` based on the partition state `p`.
fn leader_request(
    c: &Cluster,
    leader: i32,
    p: &keel_metadata_log::PartitionRegistration,
    isr: &[i32],
) -> AlterPartitionRequest {
    AlterPartitionRequest {
        broker_id: leader,
        broker_epoch: c.epoch(leader),
        topics: vec![AlterPartitionTopic {
            topic_id: bytes::Bytes::copy_from_slice(c.topic_id("t").as_bytes()),
            topic_name: String::new(),
            partitions: vec![AlterPartitionPartition {
                partition_index: 0,
                leader_epoch: p.leader_epoch,
                new_isr_with_epochs: states(c, isr),
                leader_recovery_state: p.leader_recovery_state as i32,
                partition_epoch: p.partition_epoch,
                expected_partition_epoch: None,
            }],
        }],
    }
}

fn part(r: &mut AlterPartitionRequest) -> &mut AlterPartitionPartition {
    &mut r.topics[0].partitions[0]
}

type Mutate = fn(&Cluster, &mut AlterPartitionRequest, i64);

#[test]
fn every_rejection_has_its_exact_code() {
    let (c, old6) = setup();
    let p = c.partition("t", 0);
    let base = leader_request(&c, 1, &p, &[1, 2]);
    // (name, mutation, request-level code, partition code)
    let cases: Vec<(&str, Mutate, ErrorCode, ErrorCode)> = vec![
        (
            "stale sender broker epoch",
            |_, r, _| r.broker_epoch -= 1,
            ErrorCode::StaleBrokerEpoch,
            ErrorCode::None,
        ),
        (
            "newer sender broker epoch",
            |_, r, _| r.broker_epoch += 1,
            ErrorCode::StaleBrokerEpoch,
            ErrorCode::None,
        ),
        (
            "unregistered sender",
            |_, r, _| r.broker_id = 99,
            ErrorCode::StaleBrokerEpoch,
            ErrorCode::None,
        ),
        (
            "unknown topic id",
            |_, r, _| r.topics[0].topic_id = bytes::Bytes::copy_from_slice(&[9; 16]),
            ErrorCode::None,
            ErrorCode::UnknownTopicId,
        ),
        (
            "malformed topic id",
            |_, r, _| r.topics[0].topic_id = bytes::Bytes::from_static(&[1, 2, 3]),
            ErrorCode::None,
            ErrorCode::UnknownTopicId,
        ),
        (
            "unknown topic name",
            |_, r, _| {
                r.topics[0].topic_id = bytes::Bytes::new();
                r.topics[0].topic_name = "nope".into();
            },
            ErrorCode::None,
            ErrorCode::UnknownTopicOrPartition,
        ),
        (
            "unknown partition",
            |_, r, _| part(r).partition_index = 7,
            ErrorCode::None,
            ErrorCode::UnknownTopicOrPartition,
        ),
        (
            "leader epoch newer than the controller's",
            |_, r, _| part(r).leader_epoch += 1,
            ErrorCode::None,
            ErrorCode::NotController,
        ),
        (
            "partition epoch newer than the controller's",
            |_, r, _| part(r).partition_epoch += 1,
            ErrorCode::None,
            ErrorCode::NotController,
        ),
        (
            "leader epoch older than current",
            |_, r, _| part(r).leader_epoch -= 1,
            ErrorCode::None,
            ErrorCode::FencedLeaderEpoch,
        ),
        (
            "older leader epoch beats not-the-leader",
            |c, r, _| {
                r.broker_id = 2;
                r.broker_epoch = c.epoch(2);
                part(r).leader_epoch -= 1;
            },
            ErrorCode::None,
            ErrorCode::FencedLeaderEpoch,
        ),
        (
            "sender is not the leader",
            |c, r, _| {
                r.broker_id = 2;
                r.broker_epoch = c.epoch(2);
            },
            ErrorCode::None,
            ErrorCode::InvalidRequest,
        ),
        (
            "not-the-leader beats older partition epoch",
            |c, r, _| {
                r.broker_id = 2;
                r.broker_epoch = c.epoch(2);
                part(r).partition_epoch -= 1;
            },
            ErrorCode::None,
            ErrorCode::InvalidRequest,
        ),
        (
            "partition epoch older than current",
            |_, r, _| part(r).partition_epoch -= 1,
            ErrorCode::None,
            ErrorCode::InvalidUpdateVersion,
        ),
        (
            "older partition epoch beats ineligible member",
            |c, r, _| {
                part(r).partition_epoch -= 1;
                part(r).new_isr_with_epochs = states(c, &[1, 5]);
            },
            ErrorCode::None,
            ErrorCode::InvalidUpdateVersion,
        ),
        (
            "expected partition epoch differs",
            |_, r, _| part(r).expected_partition_epoch = Some(0),
            ErrorCode::None,
            ErrorCode::InvalidUpdateVersion,
        ),
        (
            "empty ISR",
            |_, r, _| part(r).new_isr_with_epochs.clear(),
            ErrorCode::None,
            ErrorCode::InvalidRequest,
        ),
        (
            "ISR with a duplicate",
            |c, r, _| part(r).new_isr_with_epochs = states(c, &[1, 2, 2]),
            ErrorCode::None,
            ErrorCode::InvalidRequest,
        ),
        (
            "ISR not a subset of the replicas",
            |c, r, _| part(r).new_isr_with_epochs = states(c, &[1, 2, 99]),
            ErrorCode::None,
            ErrorCode::InvalidRequest,
        ),
        (
            "ISR without the leader",
            |c, r, _| part(r).new_isr_with_epochs = states(c, &[2, 3]),
            ErrorCode::None,
            ErrorCode::InvalidRequest,
        ),
        (
            "missing leader beats ineligible member",
            |c, r, _| part(r).new_isr_with_epochs = states(c, &[2, 5]),
            ErrorCode::None,
            ErrorCode::InvalidRequest,
        ),
        (
            "ISR with a fenced broker",
            |c, r, _| part(r).new_isr_with_epochs = states(c, &[1, 2, 5]),
            ErrorCode::None,
            ErrorCode::IneligibleReplica,
        ),
        (
            "ISR with a broker in controlled shutdown",
            |c, r, _| part(r).new_isr_with_epochs = states(c, &[1, 2, 4]),
            ErrorCode::None,
            ErrorCode::IneligibleReplica,
        ),
        (
            "ISR with an unregistered broker",
            |c, r, _| part(r).new_isr_with_epochs = states(c, &[1, 2, 7]),
            ErrorCode::None,
            ErrorCode::IneligibleReplica,
        ),
        (
            "re-registered broker named with its old epoch",
            |c, r, old6| {
                part(r).new_isr_with_epochs = states(c, &[1, 2, 6]);
                part(r).new_isr_with_epochs[2].broker_epoch = old6;
            },
            ErrorCode::None,
            ErrorCode::IneligibleReplica,
        ),
        (
            "live broker named with a wrong epoch",
            |c, r, _| {
                part(r).new_isr_with_epochs = states(c, &[1, 2]);
                part(r).new_isr_with_epochs[1].broker_epoch += 100;
            },
            ErrorCode::None,
            ErrorCode::IneligibleReplica,
        ),
        (
            "RECOVERED to RECOVERING",
            |_, r, _| part(r).leader_recovery_state = LeaderRecoveryState::Recovering as i32,
            ErrorCode::None,
            ErrorCode::InvalidRequest,
        ),
        (
            "unknown recovery state",
            |_, r, _| part(r).leader_recovery_state = 7,
            ErrorCode::None,
            ErrorCode::InvalidRequest,
        ),
        (
            "ineligible member beats bad recovery state",
            |c, r, _| {
                part(r).leader_recovery_state = 7;
                part(r).new_isr_with_epochs = states(c, &[1, 5]);
            },
            ErrorCode::None,
            ErrorCode::IneligibleReplica,
        ),
        (
            "operator: expected partition epoch differs",
            |_, r, _| {
                r.broker_id = -1;
                r.broker_epoch = -1;
                part(r).leader_epoch = -1;
                part(r).partition_epoch = -1;
                part(r).expected_partition_epoch = Some(1);
            },
            ErrorCode::None,
            ErrorCode::InvalidUpdateVersion,
        ),
        (
            "operator: ISR without the leader",
            |c, r, _| {
                r.broker_id = -1;
                part(r).leader_epoch = -1;
                part(r).partition_epoch = -1;
                part(r).new_isr_with_epochs = states(c, &[2, 3]);
            },
            ErrorCode::None,
            ErrorCode::InvalidRequest,
        ),
        (
            "operator: fenced member",
            |c, r, _| {
                r.broker_id = -1;
                part(r).leader_epoch = -1;
                part(r).partition_epoch = -1;
                part(r).new_isr_with_epochs = states(c, &[1, 5]);
            },
            ErrorCode::None,
            ErrorCode::IneligibleReplica,
        ),
    ];
    for (name, mutate, want_top, want_part) in cases {
        let mut req = base.clone();
        mutate(&c, &mut req, old6);
        let r = alter_partition(&c.image, &req);
        assert!(r.records.is_empty(), "{name}: wrote {:?}", r.records);
        assert_eq!(
            code(&r.response.error),
            want_top,
            "{name}: {:?}",
            r.response
        );
        if want_top.is_error() {
            assert!(r.response.topics.is_empty(), "{name}");
            continue;
        }
        let pr = &r.response.topics[0].partitions[0];
        assert_eq!(code(&pr.error), want_part, "{name}: {pr:?}");
        if matches!(
            want_part,
            ErrorCode::FencedLeaderEpoch | ErrorCode::InvalidUpdateVersion
        ) {
            // The current state, so the sender can refresh.
            assert_eq!(
                (
                    pr.leader_id,
                    pr.leader_epoch,
                    pr.partition_epoch,
                    pr.isr.clone()
                ),
                (p.leader, p.leader_epoch, p.partition_epoch, p.isr.clone()),
                "{name}"
            );
        }
    }
}

/// Applies the reply's records and checks the reply equals the new image state.
fn check_success(c: &mut Cluster, req: &AlterPartitionRequest, want_isr: &[i32]) {
    let before = c.partition("t", 0);
    let r = alter_partition(&c.image, req);
    let pr = r.response.topics[0].partitions[0].clone();
    assert_eq!(code(&pr.error), ErrorCode::None, "{pr:?}");
    assert_eq!(r.records.len(), 1);
    c.commit(r);
    let after = c.partition("t", 0);
    assert_eq!(after.isr, want_isr);
    assert_eq!(
        after.leader, before.leader,
        "an ISR change keeps the leader"
    );
    assert_eq!(
        after.leader_epoch, before.leader_epoch,
        "no leader change, no epoch bump"
    );
    assert_eq!(after.partition_epoch, before.partition_epoch + 1);
    assert_eq!(
        (
            pr.leader_id,
            pr.leader_epoch,
            pr.partition_epoch,
            pr.isr.clone(),
            pr.leader_recovery_state
        ),
        (
            after.leader,
            after.leader_epoch,
            after.partition_epoch,
            after.isr.clone(),
            after.leader_recovery_state as i32
        )
    );
}

#[test]
fn shrink_then_expand_with_new_epoch_then_operator_cas() {
    let (mut c, _) = setup();
    // Shrink.
    let p = c.partition("t", 0);
    let req = leader_request(&c, 1, &p, &[1, 2]);
    check_success(&mut c, &req, &[1, 2]);
    // Expand with the re-registered broker at its current epoch.
    let p = c.partition("t", 0);
    let req = leader_request(&c, 1, &p, &[1, 2, 6]);
    check_success(&mut c, &req, &[1, 2, 6]);
    // The old request (based on the previous partition epoch) is now refused.
    let r = alter_partition(&c.image, &leader_request(&c, 1, &p, &[1]));
    assert_eq!(
        code(&r.response.topics[0].partitions[0].error),
        ErrorCode::InvalidUpdateVersion
    );
    // Operator compare-and-set, epochs unchecked except the guard; by topic name.
    let p = c.partition("t", 0);
    let mut op = leader_request(&c, 1, &p, &[1, 3]);
    op.broker_id = -1;
    op.broker_epoch = -1;
    op.topics[0].topic_id = bytes::Bytes::new();
    op.topics[0].topic_name = "t".into();
    part(&mut op).leader_epoch = -1;
    part(&mut op).partition_epoch = -1;
    part(&mut op).expected_partition_epoch = Some(p.partition_epoch);
    check_success(&mut c, &op, &[1, 3]);
}

#[test]
fn unchanged_isr_writes_nothing() {
    let (c, _) = setup();
    let p = c.partition("t", 0);
    let r = alter_partition(&c.image, &leader_request(&c, 1, &p, &[1, 2, 3]));
    assert!(r.records.is_empty());
    let pr = &r.response.topics[0].partitions[0];
    assert_eq!(code(&pr.error), ErrorCode::None);
    assert_eq!(
        (pr.leader_epoch, pr.partition_epoch),
        (p.leader_epoch, p.partition_epoch)
    );
}

#[test]
fn same_partition_twice_in_one_request_is_refused_the_second_time() {
    let (c, _) = setup();
    let p = c.partition("t", 0);
    let mut req = leader_request(&c, 1, &p, &[1, 2]);
    let dup = req.topics[0].partitions[0].clone();
    req.topics[0].partitions.push(dup);
    let r = alter_partition(&c.image, &req);
    assert_eq!(r.records.len(), 1);
    let ps = &r.response.topics[0].partitions;
    assert_eq!(code(&ps[0].error), ErrorCode::None);
    assert_eq!(code(&ps[1].error), ErrorCode::InvalidRequest);
}
