//! [`PartitionMap`]: the replica manager's hosted partitions by topic name and partition
//! index, looked up without building a key.
//!
//! Every produced batch, every partition of every fetch (a follower's fetch names every
//! partition it follows from that leader: tens of thousands at 100,000 partitions) and every
//! fetch answer looks a partition up by `(topic, partition)`. Keyed by `TopicPartition`, each
//! lookup copied the topic name into a new key and compared names all the way down the tree
//! (measured with `perf` in the partitions bench: key allocation and name comparisons were a
//! fifth of a broker's CPU). Here the names are compared only down the topic level (a few
//! topics), then partition indexes as integers.
//!
//! Invariants: no topic entry is empty (removal drops it); `len` is the number of partitions.
//! Iteration is in `TopicPartition` order (topic name, then index).

use std::collections::BTreeMap;

use crate::log::TopicPartition;

/// Values by topic name, then partition index. See the module doc.
#[derive(Debug)]
pub struct PartitionMap<V> {
    topics: BTreeMap<String, BTreeMap<i32, V>>,
    /// Partitions held (sum of the topics' sizes).
    len: usize,
}

impl<V> Default for PartitionMap<V> {
    fn default() -> Self {
        Self {
            topics: BTreeMap::new(),
            len: 0,
        }
    }
}

impl<V> PartitionMap<V> {
    /// The value of `topic`-`partition`.
    pub fn get(&self, topic: &str, partition: i32) -> Option<&V> {
        self.topics.get(topic)?.get(&partition)
    }

    /// True when `topic`-`partition` is held.
    pub fn contains(&self, topic: &str, partition: i32) -> bool {
        self.get(topic, partition).is_some()
    }

    /// Sets the value of `tp`; returns the previous one.
    pub fn insert(&mut self, tp: TopicPartition, value: V) -> Option<V> {
        let old = self
            .topics
            .entry(tp.topic)
            .or_default()
            .insert(tp.partition, value);
        if old.is_none() {
            self.len += 1;
        }
        self.check();
        old
    }

    /// Removes `topic`-`partition`; returns its value.
    pub fn remove(&mut self, topic: &str, partition: i32) -> Option<V> {
        let parts = self.topics.get_mut(topic)?;
        let old = parts.remove(&partition)?;
        if parts.is_empty() {
            self.topics.remove(topic);
        }
        self.len -= 1;
        self.check();
        Some(old)
    }

    /// The values in `TopicPartition` order.
    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.topics.values().flat_map(|p| p.values())
    }

    /// Partitions held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn check(&self) {
        debug_assert_eq!(
            self.len,
            self.topics.values().map(BTreeMap::len).sum::<usize>(),
            "len counts every partition"
        );
        debug_assert!(
            self.topics.values().all(|p| !p.is_empty()),
            "no empty topic"
        );
    }
}

impl<V: 'static> IntoIterator for PartitionMap<V> {
    type Item = (TopicPartition, V);
    type IntoIter = Box<dyn Iterator<Item = (TopicPartition, V)>>;

    /// Every partition with its value, in `TopicPartition` order.
    fn into_iter(self) -> Self::IntoIter {
        Box::new(self.topics.into_iter().flat_map(|(topic, parts)| {
            parts
                .into_iter()
                .map(move |(p, v)| (TopicPartition::new(topic.clone(), p), v))
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_partitions_by_topic_and_index_in_order() {
        let mut m = PartitionMap::default();
        assert!(m.is_empty());
        assert_eq!(m.insert(TopicPartition::new("b", 1), 21), None);
        assert_eq!(m.insert(TopicPartition::new("a", 10), 110), None);
        assert_eq!(m.insert(TopicPartition::new("a", 2), 12), None);
        assert_eq!(m.insert(TopicPartition::new("a", 2), 13), Some(12));
        assert_eq!(m.len(), 3);
        assert_eq!(m.get("a", 2), Some(&13));
        assert!(m.contains("b", 1));
        assert!(!m.contains("b", 2));
        assert_eq!(m.get("c", 1), None);
        // TopicPartition order: name, then index (10 after 2, as integers).
        assert_eq!(m.values().copied().collect::<Vec<_>>(), vec![13, 110, 21]);
        assert_eq!(m.remove("b", 1), Some(21));
        assert_eq!(m.remove("b", 1), None);
        assert_eq!(m.len(), 2);
        let all: Vec<_> = m.into_iter().collect();
        assert_eq!(
            all,
            vec![
                (TopicPartition::new("a", 2), 13),
                (TopicPartition::new("a", 10), 110)
            ]
        );
    }
}
