//! [`ProduceWaiters`]: acks=all produce requests waiting for the HW (Kafka `DelayedProduce`
//! in the produce purgatory, seed 000's `AckWaiter`).
//!
//! A waiter is keyed by the offset the HW must reach (the batch's last offset + 1) and an
//! opaque caller token (the async layer maps it to its reply channel). Resolution, in this
//! order of precedence at each evaluation:
//! 1. HW >= required offset: success (committed data stays committed);
//! 2. committed ISR < min.insync.replicas: NOT_ENOUGH_REPLICAS_AFTER_APPEND (the data may be
//!    on the leader: outcome unknown, retriable; seed 000's second failure window);
//! 3. `now_ms >= deadline_ms`: REQUEST_TIMED_OUT.
//!
//! Leadership loss fails every waiter ([`ProduceWaiters::fail_all`]). Each evaluation costs
//! O(completed · log n): two ordered indexes (by offset, by deadline).

use std::collections::{BTreeMap, BTreeSet};

use keel_proto::ErrorCode;

/// A finished acks=all wait: answer `error` (NONE = success) to the request `token`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaiterCompletion {
    /// Caller token given at registration.
    pub token: u64,
    /// Offset the HW had to reach (exclusive end of the batch).
    pub required_offset: i64,
    /// NONE on success, else the produce error.
    pub error: ErrorCode,
}

/// The bounded waiter set of one partition.
///
/// Invariants: `by_offset` and `by_deadline` hold the same waiters; their size is at most
/// `capacity`; tokens are unique (a duplicate token is rejected at registration).
#[derive(Debug, Clone)]
pub struct ProduceWaiters {
    /// (required offset, token) -> deadline (ms).
    by_offset: BTreeMap<(i64, u64), u64>,
    /// (deadline, required offset, token).
    by_deadline: BTreeSet<(u64, i64, u64)>,
    /// token -> required offset.
    tokens: BTreeMap<u64, i64>,
    capacity: usize,
}

/// Why a waiter could not be registered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WaiterError {
    /// The set holds `capacity` waiters already.
    #[error("too many acks=all requests waiting ({0})")]
    Full(usize),
    /// The token is already waiting.
    #[error("token {0} is already waiting")]
    DuplicateToken(u64),
}

impl ProduceWaiters {
    /// An empty set holding at most `capacity` waiters.
    pub fn new(capacity: usize) -> Self {
        Self {
            by_offset: BTreeMap::new(),
            by_deadline: BTreeSet::new(),
            tokens: BTreeMap::new(),
            capacity,
        }
    }

    /// Number of waiters.
    pub fn len(&self) -> usize {
        self.by_offset.len()
    }

    /// Whether no request waits.
    pub fn is_empty(&self) -> bool {
        self.by_offset.is_empty()
    }

    /// Whether one more waiter fits.
    pub fn has_room(&self) -> bool {
        self.by_offset.len() < self.capacity
    }

    /// Earliest deadline (ms), for the caller's timer.
    pub fn next_deadline_ms(&self) -> Option<u64> {
        self.by_deadline.first().map(|(d, _, _)| *d)
    }

    /// Registers a waiter for `required_offset` (exclusive batch end) until `deadline_ms`.
    pub fn add(
        &mut self,
        token: u64,
        required_offset: i64,
        deadline_ms: u64,
    ) -> Result<(), WaiterError> {
        if !self.has_room() {
            return Err(WaiterError::Full(self.capacity));
        }
        if self.tokens.contains_key(&token) {
            return Err(WaiterError::DuplicateToken(token));
        }
        self.by_offset.insert((required_offset, token), deadline_ms);
        self.by_deadline
            .insert((deadline_ms, required_offset, token));
        self.tokens.insert(token, required_offset);
        self.debug_check();
        Ok(())
    }

    fn remove(&mut self, required_offset: i64, token: u64) -> Option<u64> {
        let deadline = self.by_offset.remove(&(required_offset, token))?;
        self.by_deadline.remove(&(deadline, required_offset, token));
        self.tokens.remove(&token);
        Some(deadline)
    }

    /// Resolves waiters by the rules of the module doc; `under_min_isr` = committed ISR <
    /// min.insync.replicas. Appends completions to `out`.
    pub fn resolve(
        &mut self,
        high_watermark: i64,
        under_min_isr: bool,
        now_ms: u64,
        out: &mut Vec<WaiterCompletion>,
    ) {
        let mut finish = |this: &mut Self, required_offset, token, error| {
            this.remove(required_offset, token);
            out.push(WaiterCompletion {
                token,
                required_offset,
                error,
            });
        };
        // 1. Everything the HW covers succeeded.
        while let Some((&(required_offset, token), _)) = self.by_offset.first_key_value() {
            if required_offset > high_watermark {
                break;
            }
            finish(self, required_offset, token, ErrorCode::None);
        }
        // 2. Under min ISR: every other waiter fails.
        if under_min_isr {
            while let Some((&(required_offset, token), _)) = self.by_offset.first_key_value() {
                finish(
                    self,
                    required_offset,
                    token,
                    ErrorCode::NotEnoughReplicasAfterAppend,
                );
            }
        }
        // 3. Expired ones time out.
        while let Some(&(deadline, required_offset, token)) = self.by_deadline.first() {
            if now_ms < deadline {
                break;
            }
            finish(self, required_offset, token, ErrorCode::RequestTimedOut);
        }
        self.debug_check();
    }

    /// Fails every waiter with `error` (leadership lost: NOT_LEADER_OR_FOLLOWER or
    /// FENCED_LEADER_EPOCH).
    pub fn fail_all(&mut self, error: ErrorCode, out: &mut Vec<WaiterCompletion>) {
        for ((required_offset, token), _) in std::mem::take(&mut self.by_offset) {
            out.push(WaiterCompletion {
                token,
                required_offset,
                error,
            });
        }
        self.by_deadline.clear();
        self.tokens.clear();
    }

    fn debug_check(&self) {
        debug_assert!(self.by_offset.len() <= self.capacity);
        debug_assert_eq!(self.by_offset.len(), self.by_deadline.len());
        debug_assert_eq!(self.by_offset.len(), self.tokens.len());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(out: &[WaiterCompletion]) -> Vec<(u64, ErrorCode)> {
        out.iter().map(|c| (c.token, c.error)).collect()
    }

    #[test]
    fn resolution_order_and_bounds() {
        let mut w = ProduceWaiters::new(3);
        w.add(1, 5, 100).unwrap();
        w.add(2, 8, 200).unwrap();
        w.add(3, 9, 50).unwrap();
        assert_eq!(w.add(4, 9, 50), Err(WaiterError::Full(3)));
        assert_eq!(w.next_deadline_ms(), Some(50));

        let mut out = Vec::new();
        w.resolve(5, false, 10, &mut out);
        assert_eq!(tokens(&out), vec![(1, ErrorCode::None)]);
        out.clear();
        assert_eq!(w.add(2, 1, 1), Err(WaiterError::DuplicateToken(2)));

        // Token 3 expired at 50; token 2 still within its deadline.
        w.resolve(5, false, 50, &mut out);
        assert_eq!(tokens(&out), vec![(3, ErrorCode::RequestTimedOut)]);
        out.clear();

        // Success wins over under-min-ISR when the HW already covers the batch.
        w.add(5, 9, 1_000).unwrap();
        w.resolve(8, true, 60, &mut out);
        assert_eq!(
            tokens(&out),
            vec![
                (2, ErrorCode::None),
                (5, ErrorCode::NotEnoughReplicasAfterAppend)
            ]
        );
        assert!(w.is_empty());
        assert_eq!(w.next_deadline_ms(), None);
    }

    #[test]
    fn fail_all_on_leadership_loss() {
        let mut w = ProduceWaiters::new(10);
        w.add(7, 3, 100).unwrap();
        w.add(8, 4, 100).unwrap();
        let mut out = Vec::new();
        w.fail_all(ErrorCode::NotLeaderOrFollower, &mut out);
        assert_eq!(
            tokens(&out),
            vec![
                (7, ErrorCode::NotLeaderOrFollower),
                (8, ErrorCode::NotLeaderOrFollower)
            ]
        );
        assert!(w.is_empty());
        w.add(7, 1, 1).unwrap();
    }
}
