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
