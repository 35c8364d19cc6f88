//! The two clocks of every Keel process, in one place: the monotonic clock decisions are timed
//! by (broker sessions, check-quorum, ISR lag) and the wall clock of record timestamps and of
//! what operators are shown. Pure logic never reads either: it takes `now_ms` as an argument
//! (checked by `scripts/check-deps`).

use std::time::Instant;

/// Milliseconds on this process's monotonic clock, counted from its first call: the one time
/// base of the controller's decisions (broker sessions, check-quorum), which must not move
/// with wall-clock adjustments.
pub fn monotonic_ms() -> u64 {
    static ORIGIN: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    ORIGIN.get_or_init(Instant::now).elapsed().as_millis() as u64
}

/// Wall-clock now, ms since the Unix epoch (display only).
pub fn wall_clock_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// How often the stall detector's thread wakes, ms.
const STALL_PROBE_MS: u64 = 100;
/// Lateness of one wake-up below which it is not a stall (scheduling noise, a busy machine),
/// ms.
const STALL_TOLERANCE_MS: u64 = 500;

/// The stall one wake-up of the detector reveals, ms: its lateness (`took_ms` beyond the
/// `asked_ms` it slept for) when that exceeds `tolerance_ms`, else 0 (pure).
pub fn stall_of(asked_ms: u64, took_ms: u64, tolerance_ms: u64) -> u64 {
    let late = took_ms.saturating_sub(asked_ms);
    if late > tolerance_ms { late } else { 0 }
}

/// Time this process did not run: stopped (SIGSTOP, a frozen VM) or starved of CPU for more
/// than half a second at a time. A thread of its own wakes every 100 ms on the monotonic
/// clock (which runs on while the process is stopped) and adds every wake-up late by more
/// than 500 ms to the total; a wake-up still pending counts as soon as it is that late, so a
/// reader that runs first after the process resumes already sees the stall.
///
/// Used by the active controller so that broker sessions do not expire over time in which it
/// could not receive their heartbeats (the pause of a controller is not the brokers'
/// failure).
#[derive(Debug)]
pub struct StallMeter {
    /// (total stalled ms before the current sleep, monotonic ms the current sleep began).
    state: std::sync::Mutex<(u64, u64)>,
}

impl StallMeter {
    /// The process's meter; the first call starts its thread.
    pub fn process() -> &'static StallMeter {
        static METER: std::sync::OnceLock<&'static StallMeter> = std::sync::OnceLock::new();
        METER.get_or_init(|| {
            let meter: &'static StallMeter = Box::leak(Box::new(StallMeter {
                state: std::sync::Mutex::new((0, monotonic_ms())),
            }));
            let spawned = std::thread::Builder::new()
                .name("stall-meter".into())
                .spawn(move || {
                    loop {
                        std::thread::sleep(std::time::Duration::from_millis(STALL_PROBE_MS));
                        let now = monotonic_ms();
                        let mut s = meter.state.lock().unwrap_or_else(|e| e.into_inner());
                        s.0 +=
                            stall_of(STALL_PROBE_MS, now.saturating_sub(s.1), STALL_TOLERANCE_MS);
                        s.1 = now;
                    }
                });
            if let Err(e) = spawned {
                // Without the thread nothing is ever counted: sessions behave as before.
                tracing::warn!("cannot start the stall meter thread: {e}");
            }
            meter
        })
    }

    /// Milliseconds this process stalled since its meter started (never decreases).
    pub fn stalled_ms(&self) -> u64 {
        let now = monotonic_ms();
        let s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.0 + stall_of(STALL_PROBE_MS, now.saturating_sub(s.1), STALL_TOLERANCE_MS)
    }
}

/// What a timeout message adds when this process itself stalled for `stalled_ms` while it
/// waited (pure): `""` for 0, else a clause naming the pause (no parentheses: the message
/// may sit inside another's), so that an operator reading
/// "fetch timed out" after a SIGSTOP or a frozen VM looks at this process, not at the network
/// or the peer.
pub fn stall_note(stalled_ms: u64) -> String {
    if stalled_ms == 0 {
        String::new()
    } else {
        format!(
            "; this process itself did not run for {stalled_ms} ms meanwhile, paused or starved of CPU"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeout_names_the_stall_only_when_there_was_one() {
        assert_eq!(stall_note(0), "");
        assert_eq!(
            stall_note(20_000),
            "; this process itself did not run for 20000 ms meanwhile, paused or starved of CPU"
        );
    }

    #[test]
    fn only_wake_ups_late_beyond_the_tolerance_are_stalls() {
        assert_eq!(stall_of(100, 100, 500), 0);
        assert_eq!(stall_of(100, 600, 500), 0);
        assert_eq!(stall_of(100, 601, 500), 501);
        assert_eq!(stall_of(100, 10_100, 500), 10_000);
        // A clock read before the sleep began (cannot happen; no underflow).
        assert_eq!(stall_of(100, 0, 500), 0);
    }
}
