//! Choosing a partition for a record, like Kafka's default partitioner (KIP-480).
//!
//! - With a key: `murmur2(key) & 0x7fffffff % partitions`, Kafka's `Utils.murmur2` with seed
//!   `0x9747b28c` (the `murmur2` crate's `KAFKA_SEED`), so a key lands on the same partition
//!   as with Kafka's Java client.
//! - Without a key: "sticky": keep one partition until about `batch_size` bytes went to it,
//!   then move to the next one round robin. Batches fill up instead of one record going to
//!   each partition. Only partitions with a leader are chosen while any has one (Kafka's
//!   `BuiltInPartitioner` picks among `Cluster.availablePartitionsForTopic`, KIP-794), so
//!   records without a key do not wait for, and time out on, an offline partition.

/// Partition of `key` among `partitions` (> 0), as Kafka's `BuiltInPartitioner`.
pub fn key_partition(key: &[u8], partitions: usize) -> i32 {
    assert!(partitions > 0, "a topic has at least one partition");
    let hash = murmur2::murmur2(key, murmur2::KAFKA_SEED) & 0x7fff_ffff;
    (hash as usize % partitions) as i32
}

/// Sticky partition choice for records without a key, per topic.
#[derive(Debug, Clone, Default)]
pub struct StickyPartitioner {
    /// Partition records currently go to.
    current: usize,
    /// Bytes sent to `current` since it was chosen.
    bytes_in_current: usize,
}

impl StickyPartitioner {
    /// A partitioner starting at partition `start` (callers pass a per-producer varying value
    /// so producers do not all start on partition 0).
    pub fn new(start: usize) -> Self {
        StickyPartitioner {
            current: start,
            bytes_in_current: 0,
        }
    }

    /// The partition for a record of `record_bytes` among `partitions` (> 0), of which
    /// `available` says which have a leader: switches to the next partition once
    /// `batch_size_bytes` went to the current one, or at once when the current one has no
    /// leader and another has. With no partition available, all are taken in turn. O(partitions)
    /// when it switches.
    pub fn next(
        &mut self,
        partitions: usize,
        record_bytes: usize,
        batch_size_bytes: usize,
        available: impl Fn(usize) -> bool,
    ) -> i32 {
        assert!(partitions > 0, "a topic has at least one partition");
        self.current %= partitions;
        let full = self.bytes_in_current >= batch_size_bytes.max(1);
        if full || !available(self.current) {
            let from = self.current + usize::from(full);
            let candidates = || (0..partitions).map(|i| (from + i) % partitions);
            let next = candidates()
                .find(|p| available(*p))
                .or(full.then(|| from % partitions));
            if let Some(next) = next {
                if next != self.current {
                    self.bytes_in_current = 0;
                }
                self.current = next;
            }
            if full {
                self.bytes_in_current = 0;
            }
        }
        self.bytes_in_current += record_bytes;
        self.current as i32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_hash_like_kafkas_java_client() {
        // Values of Kafka's `Utils.toPositive(Utils.murmur2(key)) % n` (Java client).
        assert_eq!(
            murmur2::murmur2(b"21", murmur2::KAFKA_SEED) as i32,
            -973932308
        );
        assert_eq!(murmur2::murmur2(b"kafka", murmur2::KAFKA_SEED), 0xd067cf64);
        assert_eq!(key_partition(b"21", 1), 0);
        assert_eq!(key_partition(b"21", 3), ((-973932308i32 & 0x7fffffff) % 3));
        // Stable: the same key always maps to the same partition.
        for k in [&b"a"[..], b"order-17", b""] {
            assert_eq!(key_partition(k, 7), key_partition(k, 7));
            assert!((0..7).contains(&key_partition(k, 7)));
        }
    }

    #[test]
    fn keys_spread_over_partitions() {
        let mut seen = [0usize; 3];
        for i in 0..300 {
            seen[key_partition(format!("key-{i}").as_bytes(), 3) as usize] += 1;
        }
        assert!(seen.iter().all(|n| *n > 50), "{seen:?}");
    }

    #[test]
    fn sticky_switches_after_a_batch_worth_of_bytes() {
        let mut p = StickyPartitioner::new(1);
        let got: Vec<i32> = (0..7).map(|_| p.next(3, 40, 100, |_| true)).collect();
        // 40 + 40 + 40 >= 100 after three records: then the next partition.
        assert_eq!(got, vec![1, 1, 1, 2, 2, 2, 0]);
        // A partition count that shrank below the current index wraps.
        let mut p = StickyPartitioner::new(5);
        assert_eq!(p.next(2, 1, 100, |_| true), 1);
    }

    /// KIP-794: partitions without a leader are skipped while another has one (the trial's
    /// case: a third of unkeyed records went to an offline partition and timed out).
    #[test]
    fn sticky_skips_partitions_without_a_leader() {
        let offline_1 = |p: usize| p != 1;
        let mut p = StickyPartitioner::new(1);
        let got: Vec<i32> = (0..7).map(|_| p.next(3, 40, 100, offline_1)).collect();
        assert_eq!(got, vec![2, 2, 2, 0, 0, 0, 2]);
        // The partition in use loses its leader: the next record moves on.
        let mut p = StickyPartitioner::new(0);
        assert_eq!(p.next(3, 40, 100, |_| true), 0);
        assert_eq!(p.next(3, 40, 100, |p| p != 0), 1);
        assert_eq!(p.next(3, 40, 100, |p| p != 0), 1);
        // None has a leader: round robin over all, as before.
        let mut p = StickyPartitioner::new(0);
        let got: Vec<i32> = (0..7).map(|_| p.next(3, 40, 100, |_| false)).collect();
        assert_eq!(got, vec![0, 0, 0, 1, 1, 1, 2]);
    }
}
