//! The change lines of the active controller (issue #7 "Logs").

use super::common::Cluster;
use crate::logic::brokers::fence_broker;
use crate::logic::change_log::describe_changes;

#[test]
fn fencing_a_leader_logs_the_fence_and_the_election_with_old_and_new_leader() {
    let mut c = Cluster::new();
    for b in 1..=3 {
        c.add_broker(b, None);
    }
    c.create_topic("t", &[&[1, 2, 3]]);
    let before = c.image.clone();
    let r = fence_broker(&before, 1);
    let after = before
        .with_records(
            keel_metadata_log::Provenance {
                offset: before.provenance().offset + 1,
                term: 1,
            },
            &r.records,
        )
        .unwrap();
    let lines = describe_changes(&before, &after, &r.records);
    assert!(
        lines.iter().any(|l| l.starts_with("Broker 1 fenced")),
        "{lines:?}"
    );
    assert!(
        lines.iter().any(|l| l.starts_with(
            "Leader of t-0: 1 -> 2 (leader epoch 0 -> 1, partition epoch 1, ISR [1, 2, 3] -> [2, 3])"
        )),
        "{lines:?}"
    );
    assert!(describe_changes(&after, &after, &[]).is_empty());
}
