//! How many bytes of entries one AppendEntries to a peer may carry, adapted to how fast that
//! peer answers.
//!
//! openraft gives every AppendEntries one heartbeat interval (`raft_heartbeat_interval_ms`,
//! 100 ms by default) to be sent, fsynced by the follower and answered, and drops the request
//! when that deadline passes (`ReplicationCore::send_log_entries`). A fixed cap
//! ([`crate::raft_network::MAX_APPEND_ENTRIES_BYTES`], 1 MiB) fits a healthy follower, but a
//! follower on a loaded machine that needs longer for 1 MiB misses every deadline, the
//! leader retries the same 1 MiB, and the follower never catches up (seen on a 2-core machine
//! with two test suites and a compile running: a restarted controller 150 large entries
//! behind stayed behind for 20 s, and a leader with one follower down could not commit).
//!
//! The RPC itself is no longer cancelled at that deadline ([`crate::pending_append`]: a late
//! answer still answers openraft's next request), but an answer after the deadline costs up to one
//! more heartbeat interval of waiting, and heartbeats to that peer wait behind it.
//!
//! [`AppendBudget`] is the classic additive-increase/multiplicative-decrease answer: a request
//! that got no answer in time halves the budget, one answered in time grows it back by doubling
//! (the cap is a size limit, not a rate, so growing back fast costs at most one more missed
//! deadline). A single entry is always sent whole whatever the budget
//! ([`crate::raft_network::entries_within`]), so the budget never stops replication.
//!
//! Pure: the network layer reports outcomes; nothing here reads a clock.

/// Byte budget of AppendEntries to one peer.
///
/// Invariant: `MIN_BYTES <= bytes <= max` (asserted in debug after every change).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendBudget {
    bytes: usize,
    max: usize,
}

impl AppendBudget {
    /// Smallest budget, bytes (a few typical entries; a larger entry still goes alone).
    pub const MIN_BYTES: usize = 16 * 1024;

    /// A budget starting at `max` bytes (raised to [`Self::MIN_BYTES`] if below it).
    pub fn new(max: usize) -> Self {
        let max = max.max(Self::MIN_BYTES);
        Self { bytes: max, max }
    }

    /// Bytes the next request may carry.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The peer answered a request within openraft's deadline (any answer, a conflict or a
    /// higher vote too): the budget doubles, up to the maximum.
    pub fn answered(&mut self) {
        self.bytes = self.bytes.saturating_mul(2).min(self.max);
        self.check();
    }

    /// A request carrying more than one entry got no answer before openraft's deadline (it
    /// was answered later, or failed): the budget halves, down to [`Self::MIN_BYTES`].
    pub fn missed(&mut self) {
        self.bytes = (self.bytes / 2).max(Self::MIN_BYTES);
        self.check();
    }

    fn check(&self) {
        debug_assert!(
            Self::MIN_BYTES <= self.bytes && self.bytes <= self.max,
            "{self:?}"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::AppendBudget;

    #[test]
    fn halves_on_a_miss_and_doubles_back_within_bounds() {
        let mut b = AppendBudget::new(1024 * 1024);
        assert_eq!(b.bytes(), 1024 * 1024);
        b.answered();
        assert_eq!(b.bytes(), 1024 * 1024, "never above the maximum");
        b.missed();
        assert_eq!(b.bytes(), 512 * 1024);
        for _ in 0..20 {
            b.missed();
        }
        assert_eq!(
            b.bytes(),
            AppendBudget::MIN_BYTES,
            "never below the minimum"
        );
        let steps = std::iter::from_fn(|| {
            b.answered();
            Some(b.bytes())
        })
        .take_while(|bytes| *bytes < 1024 * 1024)
        .count();
        assert_eq!(steps, 5, "16 KiB back to 1 MiB in six answers");
        assert_eq!(b.bytes(), 1024 * 1024);
    }

    #[test]
    fn a_maximum_below_the_minimum_is_raised() {
        let mut b = AppendBudget::new(10);
        assert_eq!(b.bytes(), AppendBudget::MIN_BYTES);
        b.missed();
        b.answered();
        assert_eq!(b.bytes(), AppendBudget::MIN_BYTES);
    }
}
