//! Seeded randomness for tests: every random choice of a scenario (fault timings, delays,
//! which node to kill) comes from one [`TestRng`] whose seed is printed, so a failing run can
//! be replayed with `KEEL_TEST_SEED=<seed>`.
//!
//! SplitMix64 (Steele, Lea, Flood 2014): small, fast, and good enough for choosing test
//! inputs; not for anything secret.

use std::time::Duration;

/// Environment variable that fixes the seed of every [`TestRng::from_env`].
pub const SEED_VAR: &str = "KEEL_TEST_SEED";

/// A seeded pseudo-random generator (SplitMix64).
#[derive(Debug, Clone)]
pub struct TestRng {
    seed: u64,
    state: u64,
}

impl TestRng {
    /// A generator with this seed: the same seed gives the same sequence.
    pub fn new(seed: u64) -> TestRng {
        TestRng { seed, state: seed }
    }

    /// Seeded from `KEEL_TEST_SEED` when set (decimal), otherwise from the OS's hasher seed;
    /// prints `"<what>: seed <n> (replay with KEEL_TEST_SEED=<n>)"` to stderr, which the test
    /// runner shows when the test fails.
    ///
    /// # Panics
    /// When `KEEL_TEST_SEED` is set but is not a decimal `u64`.
    pub fn from_env(what: &str) -> TestRng {
        let seed = match std::env::var(SEED_VAR) {
            Ok(s) => s
                .trim()
                .parse()
                .unwrap_or_else(|_| panic!("{SEED_VAR}={s:?} is not a decimal u64")),
            Err(_) => {
                use std::hash::BuildHasher;
                std::collections::hash_map::RandomState::new().hash_one(std::process::id())
            }
        };
        eprintln!("{what}: seed {seed} (replay with {SEED_VAR}={seed})");
        TestRng::new(seed)
    }

    /// The seed this generator started from.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n`; `n` must be > 0 (the modulo bias is below 2^-32 for any `n` a
    /// test uses, `n < 2^32`).
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0, "below(0)");
        self.next_u64() % n
    }

    /// True with probability `p` (0.0..=1.0).
    pub fn chance(&mut self, p: f64) -> bool {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }

    /// Uniform in `0..=max`, in whole microseconds.
    pub fn duration_up_to(&mut self, max: Duration) -> Duration {
        let us = max.as_micros().min(u64::MAX as u128) as u64;
        Duration::from_micros(if us == 0 { 0 } else { self.below(us + 1) })
    }

    /// One element of a non-empty slice.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_sequence() {
        let a: Vec<u64> = {
            let mut r = TestRng::new(42);
            (0..8).map(|_| r.next_u64()).collect()
        };
        let mut r = TestRng::new(42);
        assert_eq!(a, (0..8).map(|_| r.next_u64()).collect::<Vec<_>>());
        let mut other = TestRng::new(43);
        assert_ne!(a[0], other.next_u64());
        // Reference value of SplitMix64 for seed 0 (first output).
        assert_eq!(TestRng::new(0).next_u64(), 0xE220_A839_7B1D_CDAF);
    }

    #[test]
    fn ranges_are_respected() {
        let mut r = TestRng::new(7);
        let mut seen = [false; 5];
        for _ in 0..1000 {
            let v = r.below(5);
            seen[v as usize] = true;
            let d = r.duration_up_to(Duration::from_millis(3));
            assert!(d <= Duration::from_millis(3));
        }
        assert!(seen.iter().all(|s| *s), "{seen:?}");
        assert!(!(0..100).any(|_| r.chance(0.0)));
        assert!((0..100).all(|_| r.chance(1.0)));
        assert_eq!(*r.pick(&[9]), 9);
    }
}
