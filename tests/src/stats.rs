//! Latency statistics for benches and scenarios: percentiles of measured durations, and one
//! summary row.

use std::time::Duration;

/// The `p`-quantile (0.0..=1.0) of `sorted` by the nearest-rank rule on `len - 1`
/// (`p = 0.5` of 1..=100 is 51, `p = 0.99` is 99); zero when empty.
///
/// # Panics
/// In debug builds, when `sorted` is not sorted or `p` is outside 0..=1.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    debug_assert!((0.0..=1.0).contains(&p), "percentile {p}");
    debug_assert!(sorted.is_sorted(), "percentile of unsorted samples");
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// CPU time (user + system) used so far by process `pid` ("self" = this process), from
/// `/proc/<pid>/stat` (clock ticks of 10 ms, Linux's USER_HZ). Zero when unreadable (the
/// process is gone, or no procfs).
pub fn cpu_time(pid: &str) -> Duration {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return Duration::ZERO;
    };
    // Fields after the command name (which may hold spaces) start at field 3 (state);
    // utime and stime are fields 14 and 15.
    let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
        return Duration::ZERO;
    };
    let f: Vec<u64> = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|v| v.parse().ok())
        .collect();
    Duration::from_millis(f.iter().sum::<u64>() * 10)
}

/// Milliseconds of `d` as a float, for tables.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Count, p50, p99 and max of a set of samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    pub count: usize,
    pub p50: Duration,
    pub p99: Duration,
    pub max: Duration,
}

impl Summary {
    /// Sorts `samples` in place and summarises them.
    pub fn of(samples: &mut [Duration]) -> Summary {
        samples.sort_unstable();
        Summary {
            count: samples.len(),
            p50: percentile(samples, 0.50),
            p99: percentile(samples, 0.99),
            max: samples.last().copied().unwrap_or_default(),
        }
    }
}

impl std::fmt::Display for Summary {
    /// `n=<count> p50=<ms> p99=<ms> max=<ms>` with two decimals.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "n={} p50={:.2}ms p99={:.2}ms max={:.2}ms",
            self.count,
            ms(self.p50),
            ms(self.p99),
            ms(self.max)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let mut v: Vec<Duration> = (1..=100).rev().map(Duration::from_millis).collect();
        let s = Summary::of(&mut v);
        assert_eq!(s.count, 100);
        assert_eq!(s.p50, Duration::from_millis(51));
        assert_eq!(s.p99, Duration::from_millis(99));
        assert_eq!(s.max, Duration::from_millis(100));
        assert_eq!(percentile(&[], 0.9), Duration::ZERO);
        assert_eq!(s.to_string(), "n=100 p50=51.00ms p99=99.00ms max=100.00ms");
    }
}
