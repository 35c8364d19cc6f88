//! When this controller learned each log index committed: the wall-clock time of each rise of
//! the commit index, kept for the last [`MAX_RISES`] rises.
//!
//! On the active controller a rise is the commit itself: openraft hands the new commit index
//! to storage (`save_committed`) as soon as a majority holds the entries. The metadata stream
//! sends that time with each entry, so a broker measures metadata propagation from the commit
//! (issue #26: "metadata propagation p99 from commit to every broker's image"), where the
//! entry's append timestamp also counts the replication to the other controllers.
//!
//! Pure: the caller passes the time. Invariants: rises are strictly increasing in index;
//! `floor` (the highest index whose commit time is unknown) is below every kept rise.

use std::collections::VecDeque;

/// Most commit-index rises remembered (one per commit round: at least one NoOp every 500 ms
/// when idle, so at least half an hour of an idle log; a broker that far behind is catching
/// up, not measuring propagation).
pub const MAX_RISES: usize = 4096;

/// The commit times of the most recent commit-index rises. See the module doc.
#[derive(Debug, Default)]
pub struct CommitTimes {
    /// Indexes at or below this have no known commit time (committed before this process
    /// started, or their rise was dropped for the bound).
    floor: u64,
    /// `(highest index committed by the rise, wall clock ms of the rise)`, index ascending,
    /// every index above `floor`; at most [`MAX_RISES`].
    rises: VecDeque<(u64, i64)>,
}

impl CommitTimes {
    /// Indexes through `index` committed at an unknown time (read back at start).
    pub fn forget_through(&mut self, index: u64) {
        self.floor = self.floor.max(index);
        while self.rises.front().is_some_and(|&(i, _)| i <= self.floor) {
            self.rises.pop_front();
        }
    }

    /// The commit index rose to `index` at `at_ms` (ms since the Unix epoch). A rise at or
    /// below a known one changes nothing (the commit index never falls).
    pub fn rise(&mut self, index: u64, at_ms: i64) {
        let last = self.rises.back().map_or(self.floor, |&(i, _)| i);
        if index <= last {
            return;
        }
        if self.rises.len() == MAX_RISES
            && let Some((dropped, _)) = self.rises.pop_front()
        {
            self.floor = dropped;
        }
        self.rises.push_back((index, at_ms));
        debug_assert!(self.rises.len() <= MAX_RISES);
        debug_assert!(self.rises.front().is_none_or(|&(i, _)| i > self.floor));
    }

    /// When `index` became committed here (ms since the Unix epoch): the time of the first
    /// rise that covered it. `None` when that is not known (at or below `floor`) or `index` is
    /// not committed yet.
    pub fn commit_time_ms(&self, index: u64) -> Option<i64> {
        if index <= self.floor {
            return None;
        }
        let at = self.rises.partition_point(|&(i, _)| i < index);
        self.rises.get(at).map(|&(_, ms)| ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_index_takes_the_time_of_the_first_rise_covering_it() {
        let mut t = CommitTimes::default();
        t.forget_through(10);
        assert_eq!(t.commit_time_ms(10), None, "committed before the start");
        assert_eq!(t.commit_time_ms(11), None, "not committed yet");
        t.rise(12, 1_000);
        t.rise(12, 2_000); // the same index again: no rise
        t.rise(11, 2_500); // lower: ignored
        t.rise(20, 3_000);
        assert_eq!(t.commit_time_ms(10), None);
        assert_eq!(t.commit_time_ms(11), Some(1_000));
        assert_eq!(t.commit_time_ms(12), Some(1_000));
        assert_eq!(t.commit_time_ms(13), Some(3_000));
        assert_eq!(t.commit_time_ms(20), Some(3_000));
        assert_eq!(t.commit_time_ms(21), None);
        // A snapshot installed beyond: everything through it unknown.
        t.forget_through(15);
        assert_eq!(t.commit_time_ms(12), None);
        assert_eq!(t.commit_time_ms(16), Some(3_000));
    }

    #[test]
    fn the_oldest_rises_are_dropped_at_the_bound_and_become_unknown() {
        let mut t = CommitTimes::default();
        for i in 1..=(MAX_RISES as u64 + 2) {
            t.rise(i, i as i64 * 10);
        }
        assert_eq!(t.rises.len(), MAX_RISES);
        assert_eq!(t.commit_time_ms(1), None);
        assert_eq!(t.commit_time_ms(2), None);
        assert_eq!(t.commit_time_ms(3), Some(30));
        let last = MAX_RISES as u64 + 2;
        assert_eq!(t.commit_time_ms(last), Some(last as i64 * 10));
    }
}
