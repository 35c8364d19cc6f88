//! Election rules (table) through the PartitionChangeBuilder, and the ElectLeaders API.

use keel_metadata_log::image::uuid_bytes;
use keel_metadata_log::{MetadataImage, Provenance};
use keel_proto::ErrorCode;
use keel_proto::controller::{ElectLeadersRequest, ElectTopicPartitions, ElectionType};
use keel_proto::metadata::{
    BrokerRegistrationChangeRecord, FencingChange, LeaderRecoveryState, MetadataRecord,
    PartitionRecord, RegisterBrokerRecord, ShutdownChange, TopicRecord, metadata_record::Record,
};
use uuid::Uuid;

use super::common::{Cluster, code, topic_uuid};
use crate::logic::partition_change::merge;
use crate::logic::{Election, PartitionChangeBuilder, elect_leaders, fence_broker, is_eligible};

fn rec(r: Record) -> MetadataRecord {
    MetadataRecord { record: Some(r) }
}

/// Brokers 1..=5 (5 live unless fenced/shutting down) and topic `t` partition 0 in the given
/// state, built from raw records at offset 1.
fn image_with(
    fenced: &[i32],
    shutting: &[i32],
    replicas: &[i32],
    isr: &[i32],
    leader: i32,
) -> (MetadataImage, Uuid) {
    let id = topic_uuid(1);
    let mut records = Vec::new();
    for b in 1..=5 {
        records.push(rec(Record::RegisterBroker(RegisterBrokerRecord {
            broker_id: b,
            incarnation_id: uuid_bytes(Uuid::from_u128(b as u128 + 100)),
            broker_epoch: 10 + b as i64,
            endpoints: vec![],
            rack: String::new(),
            fenced: fenced.contains(&b),
            in_controlled_shutdown: false,
        })));
        if shutting.contains(&b) {
            records.push(rec(Record::BrokerRegistrationChange(
                BrokerRegistrationChangeRecord {
                    broker_id: b,
                    broker_epoch: 10 + b as i64,
                    fenced: FencingChange::None as i32,
                    in_controlled_shutdown: ShutdownChange::InControlledShutdown as i32,
                },
            )));
        }
    }
    records.push(rec(Record::Topic(TopicRecord {
        name: "t".into(),
        topic_id: uuid_bytes(id),
    })));
    records.push(rec(Record::Partition(PartitionRecord {
        topic_id: uuid_bytes(id),
        partition_id: 0,
        replicas: replicas.to_vec(),
        isr: isr.to_vec(),
        leader,
        leader_epoch: 5,
        partition_epoch: 7,
        ..Default::default()
    })));
    let image = MetadataImage::empty()
        .with_records(Provenance { offset: 1, term: 1 }, &records)
        .expect("valid setup");
    (image, id)
}

struct Row {
    name: &'static str,
    fenced: &'static [i32],
    shutting: &'static [i32],
    replicas: &'static [i32],
    isr: &'static [i32],
    leader: i32,
    target_isr: Option<&'static [i32]>,
    election: Election,
    /// None = no record expected.
    want: Option<(i32, &'static [i32], LeaderRecoveryState)>,
}

#[test]
fn election_rules_table() {
    use Election::*;
    use LeaderRecoveryState::*;
    let rows = [
        Row {
            name: "valid leader kept on shrink",
            fenced: &[],
            shutting: &[],
            replicas: &[1, 2, 3],
            isr: &[1, 2, 3],
            leader: 1,
            target_isr: Some(&[1, 2]),
            election: Clean,
            want: Some((1, &[1, 2], Recovered)),
        },
        Row {
            name: "leader left the ISR: next in replica order",
            fenced: &[],
            shutting: &[],
            replicas: &[1, 2, 3],
            isr: &[1, 2, 3],
            leader: 1,
            target_isr: Some(&[3, 2]),
            election: Clean,
            want: Some((2, &[3, 2], Recovered)),
        },
        Row {
            name: "fenced leader replaced",
            fenced: &[1],
            shutting: &[],
            replicas: &[1, 2, 3],
            isr: &[1, 2, 3],
            leader: 1,
            target_isr: Some(&[2, 3]),
            election: Clean,
            want: Some((2, &[2, 3], Recovered)),
        },
        Row {
            name: "replica order, not ISR order",
            fenced: &[],
            shutting: &[],
            replicas: &[1, 2, 3],
            isr: &[3, 2],
            leader: -1,
            target_isr: None,
            election: Clean,
            want: Some((2, &[3, 2], Recovered)),
        },
        Row {
            name: "shutting-down ISR member skipped",
            fenced: &[],
            shutting: &[2],
            replicas: &[1, 2, 3],
            isr: &[2, 3],
            leader: -1,
            target_isr: None,
            election: Clean,
            want: Some((3, &[2, 3], Recovered)),
        },
        Row {
            name: "no eligible ISR member: offline, last member kept",
            fenced: &[1],
            shutting: &[],
            replicas: &[1, 2, 3],
            isr: &[1],
            leader: 1,
            target_isr: Some(&[]),
            election: Clean,
            want: Some((-1, &[1], Recovered)),
        },
        Row {
            name: "live non-ISR replicas do not lead when clean",
            fenced: &[1],
            shutting: &[],
            replicas: &[1, 2, 3],
            isr: &[1],
            leader: -1,
            target_isr: None,
            election: Clean,
            want: None,
        },
        Row {
            name: "unclean: first live replica, ISR = [it], RECOVERING",
            fenced: &[1],
            shutting: &[],
            replicas: &[1, 2, 3],
            isr: &[1],
            leader: -1,
            target_isr: None,
            election: Unclean,
            want: Some((2, &[2], Recovering)),
        },
        Row {
            name: "unclean skips fenced and shutting down",
            fenced: &[1, 2],
            shutting: &[3],
            replicas: &[1, 2, 3, 4],
            isr: &[1],
            leader: -1,
            target_isr: None,
            election: Unclean,
            want: Some((4, &[4], Recovering)),
        },
        Row {
            name: "unclean prefers a clean candidate",
            fenced: &[1],
            shutting: &[],
            replicas: &[1, 2, 3],
            isr: &[1, 3],
            leader: 1,
            target_isr: Some(&[3]),
            election: Unclean,
            want: Some((3, &[3], Recovered)),
        },
        Row {
            name: "unclean with no live replica: offline",
            fenced: &[1, 2, 3],
            shutting: &[],
            replicas: &[1, 2, 3],
            isr: &[1],
            leader: -1,
            target_isr: None,
            election: Unclean,
            want: None,
        },
        Row {
            name: "preferred moves leadership to replicas[0]",
            fenced: &[],
            shutting: &[],
            replicas: &[1, 2, 3],
            isr: &[1, 2, 3],
            leader: 2,
            target_isr: None,
            election: Preferred,
            want: Some((1, &[1, 2, 3], Recovered)),
        },
        Row {
            name: "preferred not in ISR: leader kept",
            fenced: &[],
            shutting: &[],
            replicas: &[1, 2, 3],
            isr: &[2, 3],
            leader: 2,
            target_isr: None,
            election: Preferred,
            want: None,
        },
        Row {
            name: "preferred fenced: leader kept",
            fenced: &[1],
            shutting: &[],
            replicas: &[1, 2, 3],
            isr: &[2, 3],
            leader: 2,
            target_isr: None,
            election: Preferred,
            want: None,
        },
        Row {
            name: "clean election does not move a valid leader",
            fenced: &[],
            shutting: &[],
            replicas: &[1, 2, 3],
            isr: &[1, 2, 3],
            leader: 2,
            target_isr: None,
            election: Clean,
            want: None,
        },
        Row {
            name: "empty target ISR keeps the ISR",
            fenced: &[],
            shutting: &[],
            replicas: &[1, 2],
            isr: &[1],
            leader: 1,
            target_isr: Some(&[]),
            election: Clean,
            want: None,
        },
    ];
    for row in rows {
        let (image, id) = image_with(row.fenced, row.shutting, row.replicas, row.isr, row.leader);
        let cur = image.partition(id, 0).unwrap().clone();
        let eligible = |b: i32| is_eligible(&image, b);
        let mut builder =
            PartitionChangeBuilder::new(&cur, id, 0, &eligible).set_election(row.election);
        if let Some(t) = row.target_isr {
            builder = builder.set_target_isr(t.to_vec());
        }
        let change = builder.build();
        let Some((leader, isr, recovery)) = row.want else {
            assert_eq!(change, None, "{}", row.name);
            continue;
        };
        let change = change.unwrap_or_else(|| panic!("{}: no record", row.name));
        assert_eq!(
            change.leader.is_some(),
            leader != cur.leader,
            "{}: leader set iff changed",
            row.name
        );
        let next = image
            .with_records(
                Provenance { offset: 2, term: 1 },
                &[rec(Record::PartitionChange(change.clone()))],
            )
            .unwrap_or_else(|e| panic!("{}: {e:?}", row.name));
        next.check_invariants().unwrap();
        let after = next.partition(id, 0).unwrap();
        assert_eq!(
            after,
            &merge(&cur, &change),
            "{}: merge equals replay",
            row.name
        );
        assert_eq!(
            (
                after.leader,
                after.isr.as_slice(),
                after.leader_recovery_state
            ),
            (leader, isr, recovery),
            "{}",
            row.name
        );
        let bump = i32::from(leader != cur.leader);
        assert_eq!(after.leader_epoch, cur.leader_epoch + bump, "{}", row.name);
        assert_eq!(
            after.partition_epoch,
            cur.partition_epoch + 1,
            "{}",
            row.name
        );
    }
}

fn elect(
    c: &Cluster,
    ty: ElectionType,
    topic: &str,
    partitions: &[i32],
) -> crate::logic::ControllerResult<keel_proto::controller::ElectLeadersReply> {
    elect_leaders(
        &c.image,
        &ElectLeadersRequest {
            election_type: ty as i32,
            all_partitions: false,
            topic_partitions: vec![ElectTopicPartitions {
                topic: topic.into(),
                partitions: partitions.to_vec(),
            }],
        },
    )
}

#[test]
fn elect_leaders_preferred_and_unclean() {
    let mut c = Cluster::new();
    for b in 1..=3 {
        c.add_broker(b, None);
    }
    c.create_topic("t", &[&[1, 2], &[2, 3], &[3, 1]]);
    // Preferred already leading everywhere.
    let r = elect(&c, ElectionType::Preferred, "t", &[]);
    assert!(r.records.is_empty());
    for p in &r.response.results[0].partitions {
        assert_eq!(code(&p.error), ErrorCode::ElectionNotNeeded);
    }
    // all_partitions leaves ELECTION_NOT_NEEDED out.
    let all = elect_leaders(
        &c.image,
        &ElectLeadersRequest {
            election_type: ElectionType::Preferred as i32,
            all_partitions: true,
            topic_partitions: vec![],
        },
    );
    assert!(all.response.results.is_empty() && all.records.is_empty());
    // Fence 1: t-0 moves to 2; t-2 (ISR [3, 1]) keeps 3.
    let f = fence_broker(&c.image, 1);
    c.apply(&f.records);
    assert_eq!(c.partition("t", 0).leader, 2);
    // Preferred while 1 is fenced: not available, nothing written.
    let r = elect(&c, ElectionType::Preferred, "t", &[0]);
    assert!(r.records.is_empty());
    assert_eq!(
        code(&r.response.results[0].partitions[0].error),
        ErrorCode::PreferredLeaderNotAvailable
    );
    // 1 comes back and rejoins the ISR of t-0 through its leader.
    assert!(!c.heartbeat(1, false, false).is_fenced);
    let p = c.partition("t", 0);
    let mut isr = p.isr.clone();
    isr.push(1);
    let req = keel_proto::controller::AlterPartitionRequest {
        broker_id: 2,
        broker_epoch: c.epoch(2),
        topics: vec![keel_proto::controller::AlterPartitionTopic {
            topic_id: uuid_bytes(c.topic_id("t")),
            topic_name: String::new(),
            partitions: vec![keel_proto::controller::AlterPartitionPartition {
                partition_index: 0,
                leader_epoch: p.leader_epoch,
                new_isr_with_epochs: isr
                    .iter()
                    .map(|&b| keel_proto::controller::BrokerState {
                        broker_id: b,
                        broker_epoch: c.epoch(b),
                    })
                    .collect(),
                leader_recovery_state: 0,
                partition_epoch: p.partition_epoch,
                expected_partition_epoch: None,
            }],
        }],
    };
    let r = crate::logic::alter_partition(&c.image, &req);
    c.commit(r);
    let r = elect(&c, ElectionType::Preferred, "t", &[0, 0]);
    assert_eq!(
        r.response.results[0].partitions.len(),
        1,
        "a partition named twice is answered once"
    );
    let pr = r.response.results[0].partitions[0].clone();
    assert_eq!(code(&pr.error), ErrorCode::None);
    let before = c.partition("t", 0);
    c.commit(r);
    let after = c.partition("t", 0);
    assert_eq!(
        (after.leader, after.leader_epoch),
        (1, before.leader_epoch + 1)
    );
    assert_eq!(
        (pr.leader_id, pr.leader_epoch),
        (after.leader, after.leader_epoch)
    );

    // Unclean: t-1 (replicas [2, 3]) has a leader -> not needed.
    let r = elect(&c, ElectionType::Unclean, "t", &[1]);
    assert_eq!(
        code(&r.response.results[0].partitions[0].error),
        ErrorCode::ElectionNotNeeded
    );
    // Fence 2 then 3: t-1 offline with ISR [3].
    for b in [2, 3] {
        let f = fence_broker(&c.image, b);
        c.apply(&f.records);
    }
    let p1 = c.partition("t", 1);
    assert_eq!((p1.leader, p1.isr.clone()), (-1, vec![3]));
    let r = elect(&c, ElectionType::Unclean, "t", &[1]);
    assert_eq!(
        code(&r.response.results[0].partitions[0].error),
        ErrorCode::EligibleLeadersNotAvailable
    );
    assert!(r.records.is_empty());
    // 2 comes back (not in the ISR): clean rules keep t-1 offline, an unclean election uses it.
    assert!(!c.heartbeat(2, false, false).is_fenced);
    assert_eq!(c.partition("t", 1).leader, -1);
    let r = elect(&c, ElectionType::Unclean, "t", &[1]);
    assert_eq!(
        code(&r.response.results[0].partitions[0].error),
        ErrorCode::None
    );
    c.commit(r);
    let p1 = c.partition("t", 1);
    assert_eq!(
        (p1.leader, p1.isr.clone(), p1.leader_recovery_state),
        (2, vec![2], LeaderRecoveryState::Recovering)
    );
    // Unknown topic / partition.
    let r = elect(&c, ElectionType::Preferred, "nope", &[0]);
    assert_eq!(
        code(&r.response.results[0].partitions[0].error),
        ErrorCode::UnknownTopicOrPartition
    );
    let r = elect(&c, ElectionType::Preferred, "t", &[9]);
    assert_eq!(
        code(&r.response.results[0].partitions[0].error),
        ErrorCode::UnknownTopicOrPartition
    );
    let bad = elect_leaders(
        &c.image,
        &ElectLeadersRequest {
            election_type: 9,
            all_partitions: true,
            topic_partitions: vec![],
        },
    );
    assert_eq!(code(&bad.response.error), ErrorCode::InvalidRequest);
}

/// The automatic preferred-leader rebalance: which partitions it moves and which it leaves.
#[test]
fn preferred_leader_rebalance_moves_only_to_an_eligible_isr_member() {
    use crate::logic::preferred_leader_rebalance;
    /// (name, fenced, shutting, replicas, isr, leader, expected new leader or None)
    type Row<'a> = (
        &'a str,
        &'a [i32],
        &'a [i32],
        &'a [i32],
        &'a [i32],
        i32,
        Option<i32>,
    );
    let rows: [Row; 7] = [
        (
            "balanced: nothing",
            &[],
            &[],
            &[1, 2, 3],
            &[1, 2, 3],
            1,
            None,
        ),
        (
            "preferred back in ISR",
            &[],
            &[],
            &[1, 2, 3],
            &[1, 2, 3],
            2,
            Some(1),
        ),
        (
            "preferred out of ISR",
            &[],
            &[],
            &[1, 2, 3],
            &[2, 3],
            2,
            None,
        ),
        (
            "preferred fenced",
            &[1],
            &[],
            &[1, 2, 3],
            &[1, 2, 3],
            2,
            None,
        ),
        (
            "preferred shutting down",
            &[],
            &[1],
            &[1, 2, 3],
            &[1, 2, 3],
            2,
            None,
        ),
        (
            "offline, preferred eligible in ISR",
            &[],
            &[],
            &[1, 2],
            &[1],
            -1,
            Some(1),
        ),
        (
            "offline, preferred fenced",
            &[1],
            &[],
            &[1, 2],
            &[1],
            -1,
            None,
        ),
    ];
    for (name, fenced, shutting, replicas, isr, leader, want) in rows {
        let (image, _) = image_with(fenced, shutting, replicas, isr, leader);
        let run = preferred_leader_rebalance(&image, 10);
        let records = run.records;
        assert_eq!(run.deferred, 0, "{name}");
        match want {
            None => {
                assert!(records.is_empty(), "{name}: {records:?}");
                assert_eq!(run.blocked, usize::from(leader != replicas[0]), "{name}");
            }
            Some(l) => {
                assert_eq!(records.len(), 1, "{name}");
                assert_eq!(run.blocked, 0, "{name}");
                let Some(Record::PartitionChange(c)) = &records[0].record else {
                    panic!("{name}: {records:?}");
                };
                assert_eq!(c.leader, Some(l), "{name}");
                // Replay: epoch + 1, ISR unchanged.
                let after = image
                    .with_records(Provenance { offset: 2, term: 1 }, &records)
                    .expect("replays");
                let p = after.topics().get_by_name("t").unwrap().partitions[&0].clone();
                assert_eq!(
                    (p.leader, p.leader_epoch, p.isr.as_slice()),
                    (l, 6, isr),
                    "{name}"
                );
            }
        }
    }
}

/// At most `max` elections per run; the others are counted as deferred (the next run follows
/// at once).
#[test]
fn preferred_leader_rebalance_is_bounded_per_run() {
    use crate::logic::preferred_leader_rebalance;
    // Topic `t` from `image_with` plus four more, all led by 2 with preferred replica 1 in
    // the ISR.
    let (image, _) = image_with(&[], &[], &[1, 2, 3], &[1, 2, 3], 2);
    let mut more = Vec::new();
    for n in 2..=5u128 {
        let id = topic_uuid(n);
        more.push(rec(Record::Topic(TopicRecord {
            name: format!("t{n}"),
            topic_id: uuid_bytes(id),
        })));
        more.push(rec(Record::Partition(PartitionRecord {
            topic_id: uuid_bytes(id),
            partition_id: 0,
            replicas: vec![1, 2, 3],
            isr: vec![1, 2, 3],
            leader: 2,
            leader_epoch: 1,
            partition_epoch: 1,
            ..Default::default()
        })));
    }
    let image = image
        .with_records(Provenance { offset: 2, term: 1 }, &more)
        .expect("valid setup");
    let run = preferred_leader_rebalance(&image, 3);
    assert_eq!((run.records.len(), run.deferred, run.blocked), (3, 2, 0));
    let run = preferred_leader_rebalance(&image, 10);
    assert_eq!((run.records.len(), run.deferred, run.blocked), (5, 0, 0));
}
