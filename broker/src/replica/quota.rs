//! Replication throttles (KIP-73; Kafka `ReplicationQuotaManager`,
//! `ReplicaManager.shouldLeaderThrottle`, `ReplicaFetcherThread.shouldFollowerThrottle`): the
//! bytes a broker moves for throttled replicas, measured over a sliding window, and the rule
//! that decides when a replica waits. Pure: every time is a `now_ms` of the caller's monotonic
//! clock.
//!
//! A replica is throttled on a broker when the topic's `leader.replication.throttled.replicas`
//! (on the leader) or `follower.replication.throttled.replicas` (on the follower) lists
//! `partition:this broker` or is `*`. The bytes of every throttled replica are recorded
//! ([`ReplicationQuota::record`]); a throttled replica OUTSIDE the ISR gets no data while the
//! measured rate exceeds the broker's `*.replication.throttled.rate`
//! ([`should_throttle`]): replicas in the ISR are never held back, so a throttle slows
//! catching up (a reassignment) and never acks=all produce.

/// Samples kept (Kafka `replication.quota.window.num`, 11).
pub const SAMPLES: usize = 11;
/// Length of one sample, ms (Kafka `replication.quota.window.size.seconds`, 1 s).
pub const SAMPLE_MS: u64 = 1_000;

/// Bytes moved for throttled replicas over the last [`SAMPLES`] samples of [`SAMPLE_MS`].
///
/// The rate is the bytes of the retained samples divided by the time since the oldest of
/// them started, and by at least one sample. Kafka's `Rate` divides by at least
/// `SAMPLES - 1` samples, which lets a fresh throttle pass ten seconds' worth of bytes at
/// once; Keel holds a fresh throttle to about one second's worth, so a move takes the time its
/// rate implies from the start.
#[derive(Debug, Clone, Default)]
pub struct ReplicationQuota {
    /// `(start ms, bytes)` of each retained sample, oldest first; at most [`SAMPLES`], starts
    /// increasing.
    samples: std::collections::VecDeque<(u64, u64)>,
}

impl ReplicationQuota {
    /// Records `bytes` moved at `now_ms`.
    pub fn record(&mut self, now_ms: u64, bytes: u64) {
        match self.samples.back_mut() {
            Some((start, b)) if now_ms < start.saturating_add(SAMPLE_MS) => *b += bytes,
            _ => {
                self.samples.push_back((now_ms, bytes));
                if self.samples.len() > SAMPLES {
                    self.samples.pop_front();
                }
            }
        }
        debug_assert!(self.samples.len() <= SAMPLES);
    }

    /// Bytes per second over the window ending at `now_ms` (0 with nothing recorded in it).
    pub fn rate(&self, now_ms: u64) -> f64 {
        let horizon = now_ms.saturating_sub(SAMPLES as u64 * SAMPLE_MS);
        let mut retained = self.samples.iter().filter(|(start, _)| *start >= horizon);
        let Some(&(oldest, first)) = retained.next() else {
            return 0.0;
        };
        let bytes = first + retained.map(|(_, b)| b).sum::<u64>();
        let elapsed_ms = now_ms.saturating_sub(oldest).max(SAMPLE_MS);
        bytes as f64 * 1_000.0 / elapsed_ms as f64
    }

    /// Whether the rate at `now_ms` is above `bound` bytes/s (Kafka `isQuotaExceeded`).
    pub fn is_exceeded(&self, now_ms: u64, bound: u64) -> bool {
        self.rate(now_ms) > bound as f64
    }
}

/// Whether a replica gets no data this round (Kafka `shouldLeaderThrottle` /
/// `shouldFollowerThrottle`): it is throttled, outside the ISR, and the quota is exceeded.
pub fn should_throttle(throttled: bool, in_isr: bool, exceeded: bool) -> bool {
    throttled && !in_isr && exceeded
}

/// The bound of a `*.replication.throttled.rate` value: `None` (no throttle) when unset,
/// unparsable or Kafka's default `Long.MAX_VALUE`.
pub fn rate_bound(value: Option<&str>) -> Option<u64> {
    value
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|b| *b < i64::MAX as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_is_bytes_over_the_window_and_at_least_one_sample() {
        let mut q = ReplicationQuota::default();
        assert_eq!(q.rate(5_000), 0.0);
        q.record(10_000, 1_000);
        // Fresh: divided by one sample, not by the few ms since.
        assert_eq!(q.rate(10_010), 1_000.0);
        q.record(10_500, 1_000);
        q.record(11_200, 2_000);
        assert_eq!(q.samples.len(), 2, "one sample per second");
        assert_eq!(q.rate(12_000), 2_000.0, "4000 bytes over 2 s");
        // Samples older than the window drop out.
        assert_eq!(q.rate(21_000), 4_000_000.0 / 11_000.0);
        assert_eq!(q.rate(22_000), 2_000_000.0 / 10_800.0);
        assert_eq!(q.rate(11_200 + 11_001), 0.0);
    }

    #[test]
    fn a_steady_stream_held_to_the_bound_moves_about_the_bound() {
        // A fetcher that sends 100 KiB whenever the quota allows it, every 10 ms for 60 s.
        let bound = 1_000_000;
        let mut q = ReplicationQuota::default();
        let mut moved = 0u64;
        for step in 0..6_000u64 {
            let now = step * 10;
            if !should_throttle(true, false, q.is_exceeded(now, bound)) {
                q.record(now, 100 * 1024);
                moved += 100 * 1024;
            }
        }
        let per_s = moved as f64 / 60.0;
        assert!(
            (0.95..=1.1).contains(&(per_s / bound as f64)),
            "moved {per_s} bytes/s for a bound of {bound}"
        );
        // The retained samples stay bounded.
        assert!(q.samples.len() <= SAMPLES);
    }

    #[test]
    fn only_throttled_replicas_outside_the_isr_wait() {
        assert!(should_throttle(true, false, true));
        assert!(
            !should_throttle(true, true, true),
            "an ISR member is never held back"
        );
        assert!(!should_throttle(false, false, true), "not throttled");
        assert!(!should_throttle(true, false, false), "quota not exceeded");
    }

    #[test]
    fn rate_values() {
        assert_eq!(rate_bound(None), None);
        assert_eq!(rate_bound(Some("10485760")), Some(10_485_760));
        assert_eq!(rate_bound(Some("9223372036854775807")), None);
        assert_eq!(rate_bound(Some("x")), None);
        assert_eq!(rate_bound(Some("0")), Some(0));
    }
}
