//! CreatePartitions (KIP-195): growth only, placement after the existing partitions,
//! explicit assignments checked like CreateTopics', one refused topic never stops another,
//! validate_only writes nothing; what is written replays into the image.

use keel_proto::ErrorCode;
use keel_proto::controller::{
    CreatePartitionsAssignment, CreatePartitionsReply, CreatePartitionsRequest,
    CreatePartitionsTopic, UnregisterBrokerRequest,
};

use super::common::{Cluster, code};
use crate::logic::ControllerResult;
use crate::logic::create_partitions::{MAX_PARTITION_COUNT, create_partitions, set_added_offsets};

fn grow(name: &str, count: i32, assignments: &[&[i32]]) -> CreatePartitionsTopic {
    CreatePartitionsTopic {
        name: name.into(),
        count,
        assignments: assignments
            .iter()
            .map(|a| CreatePartitionsAssignment {
                broker_ids: a.to_vec(),
            })
            .collect(),
    }
}

fn request(
    c: &Cluster,
    topics: Vec<CreatePartitionsTopic>,
    validate_only: bool,
) -> ControllerResult<CreatePartitionsReply> {
    create_partitions(
        &c.image,
        &CreatePartitionsRequest {
            topics,
            validate_only,
        },
        0,
    )
}

/// Three brokers and topic "t" with one partition on brokers 1 and 2.
fn cluster() -> Cluster {
    let mut c = Cluster::new();
    for id in 1..=3 {
        c.add_broker(id, None);
    }
    c.create_topic("t", &[&[1, 2]]);
    c
}

#[test]
fn adds_placed_partitions_after_the_existing_ones() {
    let mut c = cluster();
    let before = c.partition("t", 0);
    let r = request(&c, vec![grow("t", 4, &[])], false);
    assert_eq!(r.records.len(), 3, "one PartitionRecord per new partition");
    let mut reply = c.commit(r);
    assert_eq!(code(&reply.results[0].error), ErrorCode::None, "{reply:?}");
    set_added_offsets(&mut reply, false, c.offset);
    assert_eq!(reply.results[0].metadata_offset, c.offset as i64);
    assert_eq!(
        c.partition("t", 0),
        before,
        "existing partitions do not change"
    );
    let mut leaders = Vec::new();
    for p in 1..4 {
        let reg = c.partition("t", p);
        assert_eq!(reg.replicas.len(), 2, "the topic's replication factor");
        assert_eq!(reg.isr, reg.replicas);
        assert_eq!(reg.leader, reg.replicas[0]);
        assert_eq!((reg.leader_epoch, reg.partition_epoch), (0, 0));
        leaders.push(reg.leader);
    }
    leaders.sort();
    assert_eq!(leaders, [1, 2, 3], "leaders spread over the brokers");
}

#[test]
fn explicit_assignments_are_checked_like_create_topics() {
    let mut c = cluster();
    let cases: [(&[&[i32]], &str); 5] = [
        (
            &[&[3, 1]],
            "2 partition(s) would be added, but 1 assignment(s)",
        ),
        (&[&[3, 1], &[2]], "has 1 replicas, partition 0 has 2"),
        (&[&[3, 3], &[2, 1]], "lists a broker twice"),
        (&[&[3, 9], &[2, 1]], "broker 9 is not registered"),
        (&[&[], &[2, 1]], "has no replicas"),
    ];
    for (assignments, why) in cases {
        let r = request(&c, vec![grow("t", 3, assignments)], false);
        let e = r.response.results[0].error.as_ref().expect("refused");
        assert_eq!(
            ErrorCode::from_proto(Some(e)).unwrap(),
            ErrorCode::InvalidReplicaAssignment
        );
        assert!(e.message.contains(why), "{assignments:?}: {}", e.message);
        assert!(r.records.is_empty());
    }
    let reply = c.commit(request(&c, vec![grow("t", 3, &[&[3, 1], &[2, 3]])], false));
    assert_eq!(code(&reply.results[0].error), ErrorCode::None);
    assert_eq!(c.partition("t", 1).replicas, [3, 1]);
    assert_eq!(c.partition("t", 2).replicas, [2, 3]);
    assert_eq!(c.partition("t", 2).leader, 2);
}

#[test]
fn counts_only_grow_and_each_topic_is_judged_alone() {
    let mut c = cluster();
    c.create_topic("u", &[&[1], &[2]]);
    // A name given twice: refused for each mention, nothing written.
    let r = request(&c, vec![grow("u", 3, &[]), grow("u", 4, &[])], false);
    let codes: Vec<_> = r.response.results.iter().map(|t| code(&t.error)).collect();
    assert_eq!(
        codes,
        [ErrorCode::InvalidRequest, ErrorCode::InvalidRequest]
    );
    assert!(r.records.is_empty());
    let r = request(
        &c,
        vec![
            grow("t", 1, &[]),
            grow("u", 1, &[]),
            grow("missing", 5, &[]),
        ],
        false,
    );
    let msgs: Vec<_> = r
        .response
        .results
        .iter()
        .map(|t| {
            t.error
                .as_ref()
                .map(|e| e.message.clone())
                .unwrap_or_default()
        })
        .collect();
    assert_eq!(
        code(&r.response.results[0].error),
        ErrorCode::InvalidPartitions
    );
    assert!(msgs[0].contains("already has 1 partitions"), "{msgs:?}");
    assert_eq!(
        code(&r.response.results[1].error),
        ErrorCode::InvalidPartitions
    );
    assert!(msgs[1].contains("can only be added"), "{msgs:?}");
    assert_eq!(
        code(&r.response.results[2].error),
        ErrorCode::UnknownTopicOrPartition
    );
    assert!(r.records.is_empty());
    let r = request(
        &c,
        vec![grow("t", MAX_PARTITION_COUNT + 1, &[]), grow("u", 3, &[])],
        false,
    );
    assert_eq!(
        code(&r.response.results[0].error),
        ErrorCode::InvalidPartitions
    );
    assert_eq!(code(&r.response.results[1].error), ErrorCode::None);
    assert_eq!(r.records.len(), 1, "only u's new partition");
    c.commit(r);
    assert_eq!(
        c.image.topics().get_by_name("u").unwrap().partitions.len(),
        3
    );
    assert_eq!(
        c.image.topics().get_by_name("t").unwrap().partitions.len(),
        1
    );
}

#[test]
fn validate_only_writes_nothing_and_placement_needs_enough_brokers() {
    let mut c = cluster();
    let r = request(&c, vec![grow("t", 3, &[])], true);
    assert!(r.records.is_empty());
    let mut reply = r.response;
    assert_eq!(code(&reply.results[0].error), ErrorCode::None);
    set_added_offsets(&mut reply, true, 7);
    assert_eq!(reply.results[0].metadata_offset, -1);
    // Two of three brokers gone: a factor-2 topic cannot be placed automatically.
    for id in [2, 3] {
        c.commit(crate::logic::unregister_broker(
            &c.image,
            &UnregisterBrokerRequest { broker_id: id },
        ));
    }
    let r = request(&c, vec![grow("t", 2, &[])], false);
    assert_eq!(
        code(&r.response.results[0].error),
        ErrorCode::InvalidReplicationFactor
    );
    // An explicit assignment on registered brokers only.
    let r = request(&c, vec![grow("t", 2, &[&[1, 2]])], false);
    assert_eq!(
        code(&r.response.results[0].error),
        ErrorCode::InvalidReplicaAssignment
    );
}
