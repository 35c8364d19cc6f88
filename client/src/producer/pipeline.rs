//! Batches in flight per partition (Kafka: the sender's partition muting in
//! `RecordAccumulator.drain` and the in-flight sequence bookkeeping of `TransactionManager`),
//! pure: no I/O, no clock.
//!
//! With idempotence up to `max_in_flight` batches of one partition are sent at once (Kafka's
//! `max.in.flight.requests.per.connection`, at most 5 = the batches a broker keeps per producer
//! for deduplication, `keel_broker::log::producer_state::MAX_RETAINED_BATCHES`). The broker
//! appends a producer's batches only in sequence order (OUT_OF_ORDER_SEQUENCE_NUMBER
//! otherwise) and answers a batch it already holds with its first offsets, so order and
//! exactly-once hold when the producer keeps three rules, which this type decides:
//!
//! 1. **Head of line**: a batch that must be sent again (a retriable error, or
//!    OUT_OF_ORDER_SEQUENCE_NUMBER while an earlier batch of the partition is unresolved) is
//!    resent only once every earlier batch of its partition is resolved
//!    ([`Position::Head`]). gRPC may run two requests of one connection in either order, so
//!    a later batch can reach the leader first; it is refused and resent after its
//!    predecessor, which costs one round trip, never the order.
//! 2. **Stall**: once a batch of a partition is being retried, no new batch of the partition
//!    is sent until its batches in flight have drained (they would be refused as out of
//!    order anyway).
//! 3. **Doom**: when a batch fails for good, the later batches of its partition in flight fail
//!    too ([`Position::Doomed`]): the broker never has the failed batch's sequences, so the
//!    later ones could only be written with a gap. The producer then takes a fresh producer
//!    id (KIP-360); a partition sends batches of a new id only once the batches of the old one
//!    have drained, so two ids never interleave in one partition.
//!
//! 4. **Opening batch**: the first batch of a producer id in a partition (sequence 0) is sent
//!    alone. A broker that does not know a producer accepts any sequence from it (KIP-360), so
//!    a later batch overtaking the first would be written before it.
//!
//! Without idempotence the broker checks no order, and gRPC does not keep it between requests:
//! the producer then uses `max_in_flight` 1.

use std::collections::{HashMap, VecDeque};

use super::accumulator::TopicPartition;

/// Where a batch in flight stands among the batches of its partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Position {
    /// Every earlier batch of the partition is resolved: it may be (re)sent.
    Head,
    /// An earlier batch is still in flight.
    Behind,
    /// An earlier batch failed for good: this one must fail too.
    Doomed,
}

/// The in-flight batches of one partition.
#[derive(Debug)]
struct Pipe {
    /// Tickets of the batches in flight, in send order (= sequence order). Invariant: strictly
    /// increasing, never empty (an idle partition has no `Pipe`).
    tickets: VecDeque<u64>,
    /// Producer id the batches in flight were sealed with (-1 without idempotence).
    producer_id: i64,
    /// A batch in flight is being retried: no new batch until the pipe drains (rule 2).
    stalled: bool,
    /// The lowest ticket that failed for good: later tickets are doomed (rule 3).
    failed_from: Option<u64>,
    /// The ticket of the producer id's first batch in the partition while it is in flight:
    /// it goes alone (rule 4).
    opening: Option<u64>,
}

/// The batches in flight of every partition.
#[derive(Debug)]
pub struct Pipelines {
    /// Most batches in flight per partition, 1..=5.
    max_in_flight: usize,
    pipes: HashMap<TopicPartition, Pipe>,
    next_ticket: u64,
}

impl Pipelines {
    /// No batch in flight; at most `max_in_flight` (clamped to 1..) per partition.
    pub fn new(max_in_flight: usize) -> Self {
        Pipelines {
            max_in_flight: max_in_flight.max(1),
            pipes: HashMap::new(),
            next_ticket: 0,
        }
    }

    /// Whether a new batch of `tp`, sealed with `producer_id`, may be sent now: fewer than
    /// `max_in_flight` in flight, none being retried or failed, all of the same producer id.
    pub fn sendable(&self, tp: &TopicPartition, producer_id: i64) -> bool {
        match self.pipes.get(tp) {
            None => true,
            Some(p) => {
                p.tickets.len() < self.max_in_flight
                    && !p.stalled
                    && p.failed_from.is_none()
                    && p.opening.is_none()
                    && p.producer_id == producer_id
            }
        }
    }

    /// Records that a batch of `tp` sealed with `producer_id` is sent; returns its ticket.
    /// `opens`: it is the id's first batch in the partition (sequence 0): nothing more is sent
    /// until it is resolved. The caller checked [`Pipelines::sendable`].
    pub fn start(&mut self, tp: &TopicPartition, producer_id: i64, opens: bool) -> u64 {
        debug_assert!(self.sendable(tp, producer_id), "{tp:?} is not sendable");
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        let pipe = self.pipes.entry(tp.clone()).or_insert_with(|| Pipe {
            tickets: VecDeque::new(),
            producer_id,
            stalled: false,
            failed_from: None,
            opening: None,
        });
        pipe.tickets.push_back(ticket);
        if opens {
            pipe.opening = Some(ticket);
        }
        ticket
    }

    /// Records that `ticket` of `tp` must be sent again: the partition stalls (rule 2).
    pub fn retrying(&mut self, tp: &TopicPartition, ticket: u64) {
        if let Some(p) = self.pipes.get_mut(tp) {
            debug_assert!(p.tickets.contains(&ticket));
            p.stalled = true;
        }
    }

    /// Where `ticket` of `tp` stands (rules 1 and 3). A ticket not in flight is `Head`.
    pub fn position(&self, tp: &TopicPartition, ticket: u64) -> Position {
        let Some(p) = self.pipes.get(tp) else {
            return Position::Head;
        };
        if p.failed_from.is_some_and(|f| f < ticket) {
            Position::Doomed
        } else if p.tickets.front().is_none_or(|t| *t >= ticket) {
            Position::Head
        } else {
            Position::Behind
        }
    }

    /// Records that `ticket` of `tp` is resolved: acknowledged (`ok`) or failed for good.
    pub fn finish(&mut self, tp: &TopicPartition, ticket: u64, ok: bool) {
        let Some(p) = self.pipes.get_mut(tp) else {
            return;
        };
        p.tickets.retain(|t| *t != ticket);
        if p.opening == Some(ticket) {
            p.opening = None;
        }
        if !ok {
            p.failed_from = Some(p.failed_from.map_or(ticket, |f| f.min(ticket)));
        }
        if p.tickets.is_empty() {
            self.pipes.remove(tp);
        }
    }

    /// Batches of `tp` in flight.
    pub fn in_flight(&self, tp: &TopicPartition) -> usize {
        self.pipes.get(tp).map_or(0, |p| p.tickets.len())
    }

    /// Whether no batch is in flight.
    pub fn is_idle(&self) -> bool {
        self.pipes.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(p: i32) -> TopicPartition {
        ("t".into(), p)
    }

    #[test]
    fn up_to_max_in_flight_per_partition() {
        let mut p = Pipelines::new(3);
        let a: Vec<u64> = (0..3).map(|_| p.start(&tp(0), 7, false)).collect();
        assert!(!p.sendable(&tp(0), 7), "three in flight");
        assert!(p.sendable(&tp(1), 7), "other partitions are independent");
        assert_eq!(p.in_flight(&tp(0)), 3);
        assert_eq!(p.position(&tp(0), a[0]), Position::Head);
        assert_eq!(p.position(&tp(0), a[2]), Position::Behind);
        p.finish(&tp(0), a[0], true);
        assert!(p.sendable(&tp(0), 7));
        assert_eq!(p.position(&tp(0), a[1]), Position::Head);
        p.finish(&tp(0), a[2], true);
        p.finish(&tp(0), a[1], true);
        assert!(p.is_idle());
    }

    #[test]
    fn a_retry_stalls_the_partition_until_it_drains() {
        let mut p = Pipelines::new(5);
        let a = p.start(&tp(0), 7, false);
        let b = p.start(&tp(0), 7, false);
        p.retrying(&tp(0), b);
        assert!(!p.sendable(&tp(0), 7), "stalled while a batch is retried");
        assert_eq!(p.position(&tp(0), b), Position::Behind, "waits for a");
        p.finish(&tp(0), a, true);
        assert_eq!(p.position(&tp(0), b), Position::Head);
        assert!(!p.sendable(&tp(0), 7), "still stalled: b is in flight");
        p.finish(&tp(0), b, true);
        assert!(p.sendable(&tp(0), 7), "drained");
    }

    #[test]
    fn a_failure_dooms_later_batches_only() {
        let mut p = Pipelines::new(5);
        let t: Vec<u64> = (0..4).map(|_| p.start(&tp(0), 7, false)).collect();
        p.finish(&tp(0), t[1], false);
        assert_eq!(
            p.position(&tp(0), t[0]),
            Position::Head,
            "earlier: unaffected"
        );
        assert_eq!(p.position(&tp(0), t[2]), Position::Doomed);
        assert_eq!(p.position(&tp(0), t[3]), Position::Doomed);
        assert!(!p.sendable(&tp(0), 7));
        p.finish(&tp(0), t[0], true);
        p.finish(&tp(0), t[2], false);
        p.finish(&tp(0), t[3], false);
        assert!(p.is_idle());
        assert!(
            p.sendable(&tp(0), 8),
            "a fresh id starts on a drained partition"
        );
    }

    #[test]
    fn producer_ids_never_interleave_in_a_partition() {
        let mut p = Pipelines::new(5);
        let a = p.start(&tp(0), 7, false);
        assert!(!p.sendable(&tp(0), 8), "old id still in flight");
        assert!(p.sendable(&tp(1), 8));
        p.finish(&tp(0), a, true);
        assert!(p.sendable(&tp(0), 8));
    }

    #[test]
    fn the_first_batch_of_a_producer_id_goes_alone() {
        let mut p = Pipelines::new(5);
        let a = p.start(&tp(0), 7, true);
        assert!(!p.sendable(&tp(0), 7), "sequence 0 unresolved");
        p.finish(&tp(0), a, true);
        let b = p.start(&tp(0), 7, false);
        assert!(p.sendable(&tp(0), 7), "pipelined after it");
        p.finish(&tp(0), b, true);
    }

    #[test]
    fn one_in_flight_is_strict_order() {
        let mut p = Pipelines::new(1);
        let a = p.start(&tp(0), -1, false);
        assert!(!p.sendable(&tp(0), -1));
        assert_eq!(p.position(&tp(0), a), Position::Head);
        p.finish(&tp(0), a, true);
        assert!(p.sendable(&tp(0), -1));
    }
}
