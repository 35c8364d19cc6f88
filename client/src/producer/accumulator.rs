//! Per-partition batching (Kafka: `RecordAccumulator`), pure: no I/O, time passed in.
//!
//! Records are appended to the open batch of their partition; a batch is *ready* to send
//! when it reached `batch_size_bytes`, when its first record waited `linger` or when a flush
//! is in progress. How many batches of a partition may be in flight is the caller's rule
//! ([`super::pipeline`]), passed in as a predicate.
//!
//! Sequence bookkeeping (idempotence, KIP-98): [`Sequences`] hands out the base sequence of
//! each batch when it is sealed; a retry resends the sealed bytes, so the broker sees the same
//! sequence and deduplicates.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

/// A topic partition.
pub type TopicPartition = (String, i32);

/// One record waiting in a batch.
#[derive(Debug)]
pub struct PendingRecord<T> {
    /// Key, `None` = null.
    pub key: Option<Vec<u8>>,
    /// Value.
    pub value: Vec<u8>,
    /// Create time, ms since the Unix epoch.
    pub timestamp_ms: i64,
    /// The caller's completion handle.
    pub handle: T,
}

/// Approximate encoded size of a record in a v2 batch, bytes (varints counted at their
/// maximum so the estimate never falls short by more than a few bytes per record).
pub fn record_size_bytes(key: Option<&[u8]>, value: &[u8]) -> usize {
    const OVERHEAD: usize = 5 + 1 + 10 + 5 + 5 + 5 + 1;
    OVERHEAD + key.map_or(0, <[u8]>::len) + value.len()
}

/// Records of one partition, in send order, not yet sent.
#[derive(Debug)]
pub struct Batch<T> {
    /// Records in order.
    pub records: Vec<PendingRecord<T>>,
    /// Estimated encoded size, bytes (batch header included).
    pub size_bytes: usize,
    /// When the first record was appended.
    pub created: Instant,
}

/// Bytes of a batch header (Kafka v2).
pub const BATCH_HEADER_BYTES: usize = 61;

/// The batches of every partition.
#[derive(Debug)]
pub struct Accumulator<T> {
    batch_size_bytes: usize,
    linger: Duration,
    /// Invariant: no empty queue, no empty batch.
    queues: BTreeMap<TopicPartition, VecDeque<Batch<T>>>,
    records: usize,
}

impl<T> Accumulator<T> {
    /// An empty accumulator.
    pub fn new(batch_size_bytes: usize, linger: Duration) -> Self {
        Accumulator {
            batch_size_bytes: batch_size_bytes.max(1),
            linger,
            queues: BTreeMap::new(),
            records: 0,
        }
    }

    /// Appends a record to the open batch of `tp` (or a new batch if it would overflow
    /// `batch_size_bytes`; a single larger record gets a batch of its own).
    pub fn append(&mut self, tp: TopicPartition, record: PendingRecord<T>, now: Instant) {
        let size = record_size_bytes(record.key.as_deref(), &record.value);
        let q = self.queues.entry(tp).or_default();
        match q.back_mut() {
            Some(b) if b.size_bytes + size <= self.batch_size_bytes => {
                b.size_bytes += size;
                b.records.push(record);
            }
            _ => q.push_back(Batch {
                records: vec![record],
                size_bytes: BATCH_HEADER_BYTES + size,
                created: now,
            }),
        }
        self.records += 1;
    }

    /// Number of records waiting.
    pub fn len(&self) -> usize {
        self.records
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.records == 0
    }

    /// Partitions whose first batch may be sent now: `sendable` (the caller's in-flight rule,
    /// [`super::pipeline::Pipelines::sendable`]), and full (another batch queued behind it, or
    /// at `batch_size_bytes`), lingered long enough, or `flush`.
    pub fn ready(
        &self,
        now: Instant,
        sendable: impl Fn(&TopicPartition) -> bool,
        flush: bool,
    ) -> Vec<TopicPartition> {
        self.queues
            .iter()
            .filter(|(tp, _)| sendable(tp))
            .filter(|(_, q)| {
                let b = &q[0];
                flush
                    || q.len() > 1
                    || b.size_bytes >= self.batch_size_bytes
                    || now.saturating_duration_since(b.created) >= self.linger
            })
            .map(|(tp, _)| tp.clone())
            .collect()
    }

    /// When the earliest not-yet-ready batch of a `sendable` partition becomes ready by
    /// lingering; `None` when nothing waits for that.
    pub fn next_linger_deadline(
        &self,
        sendable: impl Fn(&TopicPartition) -> bool,
    ) -> Option<Instant> {
        self.queues
            .iter()
            .filter(|(tp, _)| sendable(tp))
            .map(|(_, q)| q[0].created + self.linger)
            .min()
    }

    /// Removes and returns the first batch of `tp`.
    pub fn take(&mut self, tp: &TopicPartition) -> Option<Batch<T>> {
        let q = self.queues.get_mut(tp)?;
        let b = q.pop_front()?;
        if q.is_empty() {
            self.queues.remove(tp);
        }
        self.records -= b.records.len();
        Some(b)
    }

    /// Removes every batch (on close without flush); the caller fails their handles.
    pub fn take_all(&mut self) -> Vec<Batch<T>> {
        self.records = 0;
        std::mem::take(&mut self.queues)
            .into_values()
            .flatten()
            .collect()
    }
}

/// Producer id, epoch and the next sequence of each partition (KIP-98).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sequences {
    /// Producer id; -1 = not idempotent.
    pub producer_id: i64,
    /// Producer epoch; -1 = not idempotent.
    pub producer_epoch: i16,
    next: BTreeMap<TopicPartition, i32>,
}

impl Sequences {
    /// Bookkeeping for `producer_id`/`producer_epoch`, every partition starting at 0.
    pub fn new(producer_id: i64, producer_epoch: i16) -> Self {
        Sequences {
            producer_id,
            producer_epoch,
            next: BTreeMap::new(),
        }
    }

    /// The base sequence for a batch of `records` to `tp`; advances the partition's next
    /// sequence, wrapping at `i32::MAX` to 0 like Kafka (`DefaultRecordBatch.incrementSequence`).
    pub fn assign(&mut self, tp: &TopicPartition, records: i32) -> i32 {
        let next = self.next.entry(tp.clone()).or_insert(0);
        let base = *next;
        *next = keel_record::increment_sequence(base, records);
        base
    }

    /// The next sequence of `tp` (0 if none sent yet).
    pub fn next(&self, tp: &TopicPartition) -> i32 {
        self.next.get(tp).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(v: usize, h: u32) -> PendingRecord<u32> {
        PendingRecord {
            key: None,
            value: vec![0; v],
            timestamp_ms: 0,
            handle: h,
        }
    }

    fn tp(p: i32) -> TopicPartition {
        ("t".into(), p)
    }

    #[test]
    fn batches_fill_up_to_the_size_then_open_a_new_one() {
        let t0 = Instant::now();
        let mut a = Accumulator::new(200, Duration::from_millis(10));
        let per = record_size_bytes(None, &[0; 40]);
        let fit = (200 - BATCH_HEADER_BYTES) / per;
        for i in 0..fit + 1 {
            a.append(tp(0), rec(40, i as u32), t0);
        }
        assert_eq!(a.len(), fit + 1);
        let none = |_: &TopicPartition| true;
        // Two batches queued: the first is full and ready before the linger.
        assert_eq!(a.ready(t0, none, false), vec![tp(0)]);
        let b = a.take(&tp(0)).unwrap();
        assert_eq!(b.records.len(), fit);
        assert_eq!(
            b.records.iter().map(|r| r.handle).collect::<Vec<_>>(),
            (0..fit as u32).collect::<Vec<_>>()
        );
        // The second is not full: ready only after linger, or on flush.
        assert!(a.ready(t0, none, false).is_empty());
        assert_eq!(
            a.next_linger_deadline(none),
            Some(t0 + Duration::from_millis(10))
        );
        assert!(
            a.ready(t0 + Duration::from_millis(9), none, false)
                .is_empty()
        );
        assert_eq!(
            a.ready(t0 + Duration::from_millis(10), none, false),
            vec![tp(0)]
        );
        assert_eq!(a.ready(t0, none, true), vec![tp(0)]);
        assert_eq!(a.take(&tp(0)).unwrap().records.len(), 1);
        assert!(a.is_empty());
        assert!(a.take(&tp(0)).is_none());
    }

    #[test]
    fn in_flight_partitions_are_never_ready() {
        let t0 = Instant::now();
        let mut a = Accumulator::new(100, Duration::ZERO);
        a.append(tp(0), rec(1, 0), t0);
        a.append(tp(1), rec(1, 1), t0);
        let busy = |t: &TopicPartition| *t != tp(0);
        assert_eq!(a.ready(t0, busy, true), vec![tp(1)]);
        assert_eq!(a.next_linger_deadline(busy), Some(t0));
    }

    #[test]
    fn an_oversized_record_gets_its_own_batch() {
        let t0 = Instant::now();
        let mut a = Accumulator::new(100, Duration::from_secs(1));
        a.append(tp(0), rec(10, 0), t0);
        a.append(tp(0), rec(500, 1), t0);
        a.append(tp(0), rec(10, 2), t0);
        let sizes: Vec<usize> = std::iter::from_fn(|| a.take(&tp(0)))
            .map(|b| b.records.len())
            .collect();
        assert_eq!(sizes, vec![1, 1, 1]);
    }

    #[test]
    fn sequences_advance_per_partition_and_wrap() {
        let mut s = Sequences::new(7, 0);
        assert_eq!(s.assign(&tp(0), 3), 0);
        assert_eq!(s.assign(&tp(0), 2), 3);
        assert_eq!(s.assign(&tp(1), 1), 0);
        assert_eq!(s.next(&tp(0)), 5);
        assert_eq!(s.next(&tp(2)), 0);
        let mut s = Sequences::new(7, 0);
        s.next.insert(tp(0), i32::MAX - 1);
        assert_eq!(s.assign(&tp(0), 3), i32::MAX - 1);
        assert_eq!(s.next(&tp(0)), 1);
    }
}
