//! What a metadata change means for this broker's replicas (Kafka:
//! `TopicsDelta.localChanges` / `LocalReplicaChanges`).
//!
//! [`local_changes`] compares two images and lists, for one broker id, the partitions whose
//! replica must be deleted, the partitions it now leads, and the partitions it now follows.
//! The replica manager applies them in that order (DESIGN §5). The function is pure and
//! idempotent: comparing an image with itself yields nothing, and a partition appears only
//! when it is new or its partition epoch increased, so a stale or repeated registration is
//! ignored.

use std::sync::Arc;

use imbl::ordmap::DiffItem;
use keel_metadata_log::{MetadataImage, PartitionRegistration, TopicImage};
use uuid::Uuid;

/// A partition addressed by topic id (authoritative) and name (for logs and directories).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicIdPartition {
    /// Topic id; a topic deleted and re-created under the same name has a new id.
    pub topic_id: Uuid,
    /// Topic name.
    pub topic: String,
    /// Partition index.
    pub partition: i32,
}

impl std::fmt::Display for TopicIdPartition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

/// The local consequences of going from one image to the next, for one broker.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LocalChanges {
    /// Replicas to stop and delete: the topic was deleted, or this broker left the
    /// partition's assignment. Sorted.
    pub deleted: Vec<TopicIdPartition>,
    /// Partitions this broker leads in the new image and whose registration is new or has a
    /// higher partition epoch (new leadership, or an ISR/assignment change the leader must
    /// adopt). Sorted by partition.
    pub became_leader: Vec<(TopicIdPartition, Arc<PartitionRegistration>)>,
    /// Partitions this broker is a non-leader replica of (including leaderless ones) whose
    /// registration is new or has a higher partition epoch. Sorted by partition.
    pub became_follower: Vec<(TopicIdPartition, Arc<PartitionRegistration>)>,
}

impl LocalChanges {
    /// True when nothing changed for this broker.
    pub fn is_empty(&self) -> bool {
        self.deleted.is_empty() && self.became_leader.is_empty() && self.became_follower.is_empty()
    }
}

/// The local changes for `broker_id` from `old` to `new` (see the module doc).
///
/// Cost: both images' topic and partition maps are persistent B-trees, and
/// `OrdMap::diff` steps over the subtrees the two images share, so an image that changed
/// `k` partitions costs about `k` times the tree depth, not a visit of every partition of
/// each changed topic (a broker failure at 100,000 partitions is tens of images, each of a
/// few thousand partition changes spread over every topic).
pub fn local_changes(old: &MetadataImage, new: &MetadataImage, broker_id: i32) -> LocalChanges {
    let mut out = LocalChanges::default();
    let (old_topics, new_topics) = (old.topics(), new.topics());
    if std::ptr::eq(old_topics, new_topics) {
        return out;
    }
    for item in old_topics.by_id.diff(&new_topics.by_id) {
        match item {
            // A deleted topic: every partition this broker was assigned.
            DiffItem::Remove(_, t) => {
                for (p, reg) in t.partitions.iter() {
                    if reg.replicas.contains(&broker_id) {
                        out.deleted.push(tip(t, *p));
                    }
                }
            }
            DiffItem::Add(_, t) => {
                for (p, reg) in t.partitions.iter() {
                    partition_changed(&mut out, broker_id, t, *p, None, reg);
                }
            }
            DiffItem::Update {
                old: (_, before),
                new: (_, t),
            } => {
                for change in before.partitions.diff(&t.partitions) {
                    match change {
                        DiffItem::Add(p, reg) => {
                            partition_changed(&mut out, broker_id, t, *p, None, reg)
                        }
                        DiffItem::Update {
                            old: (_, b),
                            new: (p, reg),
                        } => partition_changed(&mut out, broker_id, t, *p, Some(b), reg),
                        // A partition gone from a surviving topic (not produced by the
                        // controller today, but an image allows it): delete the local replica.
                        DiffItem::Remove(p, reg) => {
                            if reg.replicas.contains(&broker_id) {
                                out.deleted.push(tip(t, *p));
                            }
                        }
                    }
                }
            }
        }
    }
    out.deleted.sort();
    out.became_leader.sort_by(|a, b| a.0.cmp(&b.0));
    out.became_follower.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// Files partition `p` of `t`, registered `before` in the old image and `reg` in the new one
/// (the two differ), under the change it means for `broker_id`.
fn partition_changed(
    out: &mut LocalChanges,
    broker_id: i32,
    t: &TopicImage,
    p: i32,
    before: Option<&Arc<PartitionRegistration>>,
    reg: &Arc<PartitionRegistration>,
) {
    let newer = before.is_none_or(|b| reg.partition_epoch > b.partition_epoch);
    if !newer {
        // Same or older partition epoch: a stale registration; ignore it.
        return;
    }
    let was_replica = before.is_some_and(|b| b.replicas.contains(&broker_id));
    if !reg.replicas.contains(&broker_id) {
        if was_replica {
            out.deleted.push(tip(t, p));
        }
        return;
    }
    let entry = (tip(t, p), Arc::clone(reg));
    if reg.leader == broker_id {
        out.became_leader.push(entry);
    } else {
        out.became_follower.push(entry);
    }
}

fn tip(t: &TopicImage, partition: i32) -> TopicIdPartition {
    TopicIdPartition {
        topic_id: t.id,
        topic: t.name.clone(),
        partition,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_metadata_log::Provenance;
    use keel_metadata_log::records::metadata_record::Record;
    use keel_metadata_log::records::{
        MetadataRecord, PartitionChangeRecord, PartitionRecord, RemoveTopicRecord, ReplicaList,
        TopicRecord,
    };

    const ME: i32 = 1;

    fn id(n: u8) -> Uuid {
        Uuid::from_bytes([n; 16])
    }

    fn topic(n: u8, name: &str) -> MetadataRecord {
        MetadataRecord {
            record: Some(Record::Topic(TopicRecord {
                name: name.into(),
                topic_id: bytes::Bytes::copy_from_slice(id(n).as_bytes()),
            })),
        }
    }

    fn partition(n: u8, p: i32, replicas: &[i32], leader: i32) -> MetadataRecord {
        MetadataRecord {
            record: Some(Record::Partition(PartitionRecord {
                topic_id: bytes::Bytes::copy_from_slice(id(n).as_bytes()),
                partition_id: p,
                replicas: replicas.to_vec(),
                isr: replicas.to_vec(),
                leader,
                ..Default::default()
            })),
        }
    }

    /// A change record; `leader` -2 = unchanged (absent on the wire).
    fn change(n: u8, p: i32, leader: i32, isr: Option<&[i32]>) -> MetadataRecord {
        MetadataRecord {
            record: Some(Record::PartitionChange(PartitionChangeRecord {
                topic_id: bytes::Bytes::copy_from_slice(id(n).as_bytes()),
                partition_id: p,
                leader: (leader != -2).then_some(leader),
                isr: isr.map(|i| ReplicaList { ids: i.to_vec() }),
                ..Default::default()
            })),
        }
    }

    fn remove(n: u8) -> MetadataRecord {
        MetadataRecord {
            record: Some(Record::RemoveTopic(RemoveTopicRecord {
                topic_id: bytes::Bytes::copy_from_slice(id(n).as_bytes()),
            })),
        }
    }

    fn apply(base: &MetadataImage, offset: u64, records: &[MetadataRecord]) -> MetadataImage {
        base.with_records(Provenance { offset, term: 1 }, records)
            .unwrap_or_else(|(i, e)| panic!("record {i}: {e}"))
    }

    fn names(v: &[(TopicIdPartition, Arc<PartitionRegistration>)]) -> Vec<String> {
        v.iter().map(|(t, _)| t.to_string()).collect()
    }

    fn summary(c: &LocalChanges) -> (Vec<String>, Vec<String>, Vec<String>) {
        (
            c.deleted.iter().map(|t| t.to_string()).collect(),
            names(&c.became_leader),
            names(&c.became_follower),
        )
    }

    fn base() -> MetadataImage {
        apply(
            &MetadataImage::empty(),
            1,
            &[
                topic(1, "a"),
                partition(1, 0, &[1, 2, 3], 1),
                partition(1, 1, &[2, 1, 3], 2),
                partition(1, 2, &[2, 3], 2),
                topic(2, "b"),
                partition(2, 0, &[3, 1], 3),
            ],
        )
    }

    /// (case, records on top of base, deleted, leader, follower)
    type Case = (
        &'static str,
        Vec<MetadataRecord>,
        Vec<String>,
        Vec<String>,
        Vec<String>,
    );

    #[test]
    fn table() {
        let b = base();
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let cases: Vec<Case> = vec![
            ("no change (noop)", vec![], s(&[]), s(&[]), s(&[])),
            (
                "lead -> follow",
                vec![change(1, 0, 2, None)],
                s(&[]),
                s(&[]),
                s(&["a-0"]),
            ),
            (
                "follow -> lead",
                vec![change(1, 1, 1, None)],
                s(&[]),
                s(&["a-1"]),
                s(&[]),
            ),
            (
                "ISR change keeps leader, new partition epoch",
                vec![change(1, 0, -2, Some(&[1, 2]))],
                s(&[]),
                s(&["a-0"]),
                s(&[]),
            ),
            (
                "deleted topic",
                vec![remove(2)],
                s(&["b-0"]),
                s(&[]),
                s(&[]),
            ),
            (
                "change on a partition not hosted here",
                vec![change(1, 2, 3, None)],
                s(&[]),
                s(&[]),
                s(&[]),
            ),
            (
                "new topic",
                vec![
                    topic(3, "c"),
                    partition(3, 0, &[1, 2], 1),
                    partition(3, 1, &[2, 1], 2),
                    partition(3, 2, &[2, 3], 2),
                ],
                s(&[]),
                s(&["c-0"]),
                s(&["c-1"]),
            ),
            (
                "leaderless partition is followed",
                vec![change(2, 0, -1, Some(&[3]))],
                s(&[]),
                s(&[]),
                s(&["b-0"]),
            ),
        ];
        for (name, records, deleted, leader, follower) in cases {
            let next = apply(&b, 2, &records);
            assert_eq!(
                summary(&local_changes(&b, &next, ME)),
                (deleted, leader, follower),
                "{name}"
            );
            // Idempotent: the same image again gives nothing.
            assert!(local_changes(&next, &next, ME).is_empty(), "{name}");
        }
    }

    #[test]
    fn replica_removed_from_assignment_is_deleted() {
        let b = base();
        // A reassignment that drops broker 1 from a-1 (leader 2 stays).
        let mut rec = change(1, 1, -2, Some(&[2, 3]));
        if let Some(Record::PartitionChange(c)) = &mut rec.record {
            c.replicas = Some(ReplicaList { ids: vec![2, 3] });
        }
        let next = apply(&b, 2, &[rec]);
        let c = local_changes(&b, &next, ME);
        assert_eq!(summary(&c), (vec!["a-1".to_string()], vec![], vec![]));
    }

    #[test]
    fn stale_partition_epoch_is_ignored() {
        let b = base();
        let moved = apply(&b, 2, &[change(1, 0, 2, None)]);
        // Going "back" to an image with an older partition epoch (e.g. a stale snapshot) must
        // not undo the newer state.
        assert!(local_changes(&moved, &b, ME).is_empty());
        // Same partition epoch, different content (cannot come from one valid log; built as
        // two independent images): ignored as well.
        let x = apply(
            &MetadataImage::empty(),
            1,
            &[topic(1, "a"), partition(1, 0, &[1, 2], 1)],
        );
        let y = apply(
            &MetadataImage::empty(),
            2,
            &[topic(1, "a"), partition(1, 0, &[1, 2], 2)],
        );
        assert!(local_changes(&x, &y, ME).is_empty());
    }

    #[test]
    fn from_empty_image_everything_hosted_is_new_and_registrations_are_carried() {
        let b = base();
        let c = local_changes(&MetadataImage::empty(), &b, ME);
        assert_eq!(
            summary(&c),
            (vec![], vec!["a-0".into()], vec!["a-1".into(), "b-0".into()])
        );
        let (tp, reg) = &c.became_leader[0];
        assert_eq!(tp.topic_id, id(1));
        assert_eq!(reg.leader, ME);
        assert_eq!(reg.replicas, vec![1, 2, 3]);
        // And the reverse: an empty image deletes everything hosted.
        let gone = local_changes(&b, &MetadataImage::empty(), ME);
        assert_eq!(
            summary(&gone),
            (
                vec!["a-0".into(), "a-1".into(), "b-0".into()],
                vec![],
                vec![]
            )
        );
    }

    #[test]
    fn topic_recreated_under_the_same_name_deletes_the_old_id() {
        let b = base();
        let next = apply(
            &b,
            2,
            &[remove(2), topic(9, "b"), partition(9, 0, &[1, 3], 1)],
        );
        let c = local_changes(&b, &next, ME);
        assert_eq!(c.deleted.len(), 1);
        assert_eq!(c.deleted[0].topic_id, id(2));
        assert_eq!(c.became_leader.len(), 1);
        assert_eq!(c.became_leader[0].0.topic_id, id(9));
    }

    /// The definition, as a visit of every partition of every topic: what [`local_changes`]
    /// must find with its diff of the shared trees.
    fn every_partition_compared(old: &MetadataImage, new: &MetadataImage) -> LocalChanges {
        let mut out = LocalChanges::default();
        for (tid, t) in old.topics().by_id.iter() {
            if !new.topics().by_id.contains_key(tid) {
                for (p, reg) in t.partitions.iter() {
                    if reg.replicas.contains(&ME) {
                        out.deleted.push(tip(t, *p));
                    }
                }
            }
        }
        for (tid, t) in new.topics().by_id.iter() {
            let prev = old.topics().by_id.get(tid);
            for (p, reg) in t.partitions.iter() {
                let before = prev.and_then(|pt| pt.partitions.get(p));
                partition_changed(&mut out, ME, t, *p, before, reg);
            }
            for (p, reg) in prev.iter().flat_map(|pt| pt.partitions.iter()) {
                if !t.partitions.contains_key(p) && reg.replicas.contains(&ME) {
                    out.deleted.push(tip(t, *p));
                }
            }
        }
        out.deleted.sort();
        out.became_leader.sort_by(|a, b| a.0.cmp(&b.0));
        out.became_follower.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    #[test]
    fn the_diff_finds_what_a_visit_of_every_partition_finds() {
        const TOPICS: u8 = 12;
        const PARTITIONS: i32 = 300;
        let mut records = Vec::new();
        for n in 1..=TOPICS {
            records.push(topic(n, &format!("t{n}")));
            for p in 0..PARTITIONS {
                let first = 1 + (p + i32::from(n)) % 4;
                let replicas = [first, 1 + first % 4, 1 + (first + 1) % 4];
                records.push(partition(n, p, &replicas, first));
            }
        }
        let mut image = apply(&MetadataImage::empty(), 1, &records);
        // A fixed pseudo-random walk (64-bit LCG): leader moves and ISR changes spread over
        // every topic, a topic deleted and one created, as a broker failure and an operator do.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = |m: u64| {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            (x >> 33) % m
        };
        for round in 0..40u64 {
            let mut batch = Vec::new();
            for _ in 0..next(400) {
                let n = 1 + next(u64::from(TOPICS)) as u8;
                if !image.topics().by_id.contains_key(&id(n)) {
                    continue;
                }
                let p = next(PARTITIONS as u64) as i32;
                let reg = image.topics().by_id[&id(n)].partitions[&p].clone();
                let leader = reg.replicas[next(reg.replicas.len() as u64) as usize];
                let isr: Vec<i32> = reg
                    .replicas
                    .iter()
                    .copied()
                    .filter(|r| *r == leader || next(2) == 0)
                    .collect();
                batch.push(change(n, p, leader, Some(&isr)));
            }
            if round == 20 {
                batch.push(remove(3));
            }
            if round == 30 {
                batch.push(topic(40, "late"));
                batch.push(partition(40, 0, &[2, 1], 2));
                batch.push(partition(40, 1, &[1, 2], 1));
            }
            let after = apply(&image, round + 2, &batch);
            assert_eq!(
                local_changes(&image, &after, ME),
                every_partition_compared(&image, &after),
                "round {round}"
            );
            image = after;
        }
    }
}
