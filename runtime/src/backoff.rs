//! Retry backoff with jitter, the one used by every retry loop of the brokers and the clients
//! (Kafka `org.apache.kafka.common.utils.ExponentialBackoff`, KIP-580: `retry.backoff.ms`
//! doubled per attempt up to `retry.backoff.max.ms`, then scaled by a random factor in
//! [1 - jitter, 1 + jitter) with jitter 0.2, so clients that failed together do not retry in
//! lockstep).
//!
//! [`Backoff::delay`] is pure (the random number is an argument, so tests state exact
//! delays: `random` 0.5 gives the un-jittered value); [`Backoff::next`] draws it from
//! [`jitter`].

use std::time::Duration;

/// Kafka's default jitter of retry backoffs (`CommonClientConfigs.RETRY_BACKOFF_JITTER`).
pub const DEFAULT_JITTER: f64 = 0.2;

/// Exponential backoff with jitter. Invariant: `initial <= max` is not required (the cap
/// wins), `jitter` is in 0.0..=1.0 (clamped on use).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    /// Delay before the first retry (attempt 0), before jitter.
    pub initial: Duration,
    /// Largest delay before jitter.
    pub max: Duration,
    /// Relative jitter: the delay is scaled by a factor in [1 - jitter, 1 + jitter).
    pub jitter: f64,
}

impl Backoff {
    /// `initial` doubling up to `max`, with Kafka's jitter 0.2.
    pub const fn new(initial: Duration, max: Duration) -> Self {
        Self {
            initial,
            max,
            jitter: DEFAULT_JITTER,
        }
    }

    /// The same from milliseconds.
    pub const fn from_millis(initial_ms: u64, max_ms: u64) -> Self {
        Self::new(
            Duration::from_millis(initial_ms),
            Duration::from_millis(max_ms),
        )
    }

    /// The delay before retry number `attempt` (0 = the first retry), with `random` in
    /// [0, 1) (clamped): `min(initial * 2^attempt, max) * (1 - jitter + 2 * jitter * random)`.
    /// Never panics: the doubling saturates and stops at 2^20.
    pub fn delay(&self, attempt: u32, random: f64) -> Duration {
        let exp = self
            .initial
            .saturating_mul(1u32 << attempt.min(20))
            .min(self.max);
        let jitter = self.jitter.clamp(0.0, 1.0);
        exp.mul_f64(1.0 - jitter + 2.0 * jitter * random.clamp(0.0, 1.0))
    }

    /// [`Backoff::delay`] with a random number from [`jitter`].
    pub fn next(&self, attempt: u32) -> Duration {
        self.delay(attempt, jitter())
    }
}

/// The pause before one more attempt of an operation bounded by a deadline, with `remaining`
/// time left before it: `pause` cut to `remaining`, so the last attempt runs at the deadline
/// instead of the operation giving up as much as one backoff early (Kafka's
/// `delivery.timeout.ms` and `default.api.timeout.ms` bound the whole operation, not the
/// attempts before it). `None` when no time remains: give up now.
pub fn pause_within(pause: Duration, remaining: Duration) -> Option<Duration> {
    (!remaining.is_zero()).then(|| pause.min(remaining))
}

/// A number in [0, 1) that differs between calls and processes; not for cryptography.
pub fn jitter() -> f64 {
    use std::hash::BuildHasher;
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let h = std::collections::hash_map::RandomState::new().hash_one(n);
    (h >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_pause_ends_at_the_deadline() {
        let ms = Duration::from_millis;
        assert_eq!(pause_within(ms(800), ms(5000)), Some(ms(800)));
        assert_eq!(pause_within(ms(800), ms(300)), Some(ms(300)));
        assert_eq!(pause_within(ms(800), Duration::ZERO), None);
    }

    #[test]
    fn doubles_up_to_the_cap_and_jitters_within_twenty_percent() {
        let b = Backoff::from_millis(100, 1000);
        let ms = |a, r| b.delay(a, r).as_millis();
        assert_eq!(
            [ms(0, 0.5), ms(1, 0.5), ms(3, 0.5), ms(4, 0.5)],
            [100, 200, 800, 1000]
        );
        assert_eq!(ms(u32::MAX, 0.5), 1000);
        assert_eq!(ms(0, 0.0), 80);
        assert!(ms(0, 0.999_999) < 120 && ms(0, 0.999_999) >= 119);
        assert_eq!(ms(0, -3.0), 80, "random is clamped");
        let none = Backoff { jitter: 0.0, ..b };
        assert_eq!(none.delay(2, 0.9), Duration::from_millis(400));
    }

    #[test]
    fn jitter_is_in_the_unit_interval_and_varies() {
        let draws: Vec<f64> = (0..100).map(|_| jitter()).collect();
        assert!(draws.iter().all(|r| (0.0..1.0).contains(r)));
        assert!(draws.windows(2).any(|w| w[0] != w[1]));
    }
}
