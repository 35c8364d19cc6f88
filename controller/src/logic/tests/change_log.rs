//! The change lines of the active controller (issue #7 "Logs").

use super::common::Cluster;
use crate::logic::brokers::fence_broker;
use crate::logic::change_log::{ChangeLevel, describe_changes};
use keel_metadata_log::MetadataImage;

/// A cluster of brokers 1-3 with topic `t` (one partition on [1, 2, 3], led by 1), and the
/// image after fencing `broker` with the records that did it.
fn fenced(
    broker: i32,
) -> (
    MetadataImage,
    MetadataImage,
    Vec<keel_metadata_log::records::MetadataRecord>,
) {
    let mut c = Cluster::new();
    for b in 1..=3 {
        c.add_broker(b, None);
    }
    c.create_topic("t", &[&[1, 2, 3]]);
    let before = c.image.clone();
    let r = fence_broker(&before, broker);
    let after = before
        .with_records(
            keel_metadata_log::Provenance {
                offset: before.provenance().offset + 1,
                term: 1,
            },
            &r.records,
        )
        .unwrap();
    (before, after, r.records)
}

#[test]
fn fencing_a_leader_logs_the_fence_and_the_election_with_old_and_new_leader() {
    let (before, after, records) = fenced(1);
    let lines = describe_changes(&before, &after, &records, false);
    assert!(
        lines
            .iter()
            .any(|(l, s)| *l == ChangeLevel::Info && s.starts_with("Broker 1 fenced")),
        "{lines:?}"
    );
    assert!(
        lines.iter().any(|(l, s)| *l == ChangeLevel::Info
            && s.starts_with(
                "Leader of t-0: 1 -> 2 (leader epoch 0 -> 1, partition epoch 1, ISR [1, 2, 3] -> [2, 3])"
            )),
        "{lines:?}"
    );
    assert!(describe_changes(&after, &after, &[], true).is_empty());
}

#[test]
fn an_isr_change_that_keeps_the_leader_is_a_debug_line_formatted_only_when_asked_for() {
    // Fencing follower 3 shrinks the ISR of t-0 and leaves 1 as its leader.
    let (before, after, records) = fenced(3);
    let epoch = before.broker(3).expect("registered").epoch;
    let with_debug = describe_changes(&before, &after, &records, true);
    assert_eq!(
        with_debug,
        vec![
            (
                ChangeLevel::Debug,
                "ISR of t-0: [1, 2, 3] -> [1, 2] (leader 1, leader epoch 0, partition epoch 0 -> 1)"
                    .to_string()
            ),
            (ChangeLevel::Info, format!("Broker 3 fenced (broker epoch {epoch})")),
        ],
        "{with_debug:?}"
    );
    let without = describe_changes(&before, &after, &records, false);
    assert_eq!(without, with_debug[1..].to_vec());
}

#[test]
fn an_offline_partition_and_an_unclean_election_are_warnings_that_say_so() {
    use keel_proto::controller::{ElectLeadersRequest, ElectTopicPartitions, ElectionType};
    let mut c = Cluster::new();
    for b in 1..=2 {
        c.add_broker(b, None);
    }
    c.create_topic("t", &[&[1, 2]]);
    // Fence 2 (ISR shrinks to [1]), then 1: t-0 has no eligible ISR member.
    c.commit(fence_broker(&c.image, 2));
    let before = c.image.clone();
    let r = fence_broker(&before, 1);
    c.apply(&r.records);
    let lines = describe_changes(&before, &c.image, &r.records, false);
    assert!(
        lines.iter().any(|(l, s)| *l == ChangeLevel::Warn
            && s.starts_with("Partition t-0 is offline: no eligible replica in ISR [1]")),
        "{lines:?}"
    );
    // 2 returns; an unclean election makes it leader from outside the ISR.
    assert!(!c.heartbeat(2, false, false).is_fenced);
    let before = c.image.clone();
    let r = crate::logic::elect_leaders(
        &before,
        &ElectLeadersRequest {
            election_type: ElectionType::Unclean as i32,
            all_partitions: false,
            topic_partitions: vec![ElectTopicPartitions {
                topic: "t".into(),
                partitions: vec![0],
            }],
        },
    );
    c.apply(&r.records);
    let lines = describe_changes(&before, &c.image, &r.records, false);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0].0, ChangeLevel::Warn);
    assert!(
        lines[0]
            .1
            .starts_with("Unclean leader election for t-0: -1 -> 2"),
        "{lines:?}"
    );
    assert!(lines[0].1.contains("may be lost"), "{lines:?}");
}
