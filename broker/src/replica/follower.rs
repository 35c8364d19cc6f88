//! [`FollowerState`]: what a partition leader knows about one follower (Kafka `Replica.scala`
//! `ReplicaState`), learnt only from that follower's fetches.
//!
//! Caught-up time (Kafka `Replica.updateFetchStateOrThrow`): a fetch at `fetch_offset >=`
//! the leader LEO proves the follower was caught up *now*; a fetch at an offset >= the leader
//! LEO seen at the follower's *previous* fetch proves it was caught up at that previous
//! fetch time. This second rule keeps a follower that fetches continuously under steady
//! produce load in the ISR although it never sees the moving LEO exactly.

use keel_proto::ErrorCode;

/// Leader-side view of one follower. Offsets are Kafka offsets (`i64`), times are
/// milliseconds of the caller's clock (`0` = never).
///
/// Invariants: `last_caught_up_time_ms <= max(last_fetch_time_ms, time of the last reset)`;
/// `log_end_offset`, once known, only changes through a fetch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FollowerState {
    /// Broker id of the follower.
    pub broker_id: i32,
    /// The follower's LEO = its last accepted fetch offset; `None` until it fetches in this
    /// leader epoch (Kafka `UnknownOffset`).
    pub log_end_offset: Option<i64>,
    /// The follower's log start offset as it reported it (0 if the request did not say).
    pub log_start_offset: Option<i64>,
    /// Leader LEO at the follower's last fetch (Kafka `lastFetchLeaderLogEndOffset`).
    pub last_fetch_leader_leo: Option<i64>,
    /// Time of the follower's last accepted fetch (ms; 0 = none in this leader epoch).
    pub last_fetch_time_ms: u64,
    /// Last time the follower was known to be caught up to the leader's LEO (ms).
    pub last_caught_up_time_ms: u64,
    /// Broker epoch the follower sent in its last fetch (KIP-903); `None` = not seen.
    pub broker_epoch: Option<i64>,
}

impl FollowerState {
    /// A follower nothing is known about (caught-up time 0).
    pub fn new(broker_id: i32) -> Self {
        Self {
            broker_id,
            log_end_offset: None,
            log_start_offset: None,
            last_fetch_leader_leo: None,
            last_fetch_time_ms: 0,
            last_caught_up_time_ms: 0,
            broker_epoch: None,
        }
    }

    /// Resets the state when this broker becomes (or stays) leader (Kafka
    /// `Replica.resetReplicaState` from `Partition.makeLeader`):
    /// - the caught-up time becomes `now_ms` for ISR members (so the new leader does not
    ///   shrink them before they had a chance to fetch) and 0 for the others (so an
    ///   out-of-sync follower does not look caught up);
    /// - on a new leader epoch, everything learnt from fetches is forgotten (the follower's
    ///   LEO is unknown until it fetches from this leader epoch); otherwise offsets are kept
    ///   and the last fetch is treated as happening now against the current leader LEO.
    pub fn reset(&mut self, now_ms: u64, leader_leo: i64, new_leader_epoch: bool, in_isr: bool) {
        self.last_caught_up_time_ms = if in_isr { now_ms } else { 0 };
        if new_leader_epoch {
            self.log_end_offset = None;
            self.log_start_offset = None;
            self.last_fetch_leader_leo = None;
            self.last_fetch_time_ms = 0;
            self.broker_epoch = None;
        } else {
            self.last_fetch_leader_leo = Some(leader_leo);
            self.last_fetch_time_ms = now_ms;
        }
    }

    /// Records an accepted (non-diverging) fetch at `fetch_offset` at `now_ms`, with the
    /// leader's LEO `leader_leo` at that moment and the follower's `broker_epoch`.
    ///
    /// Errors: STALE_BROKER_EPOCH if `broker_epoch` is older than the one this follower
    /// already fetched with (a request from a previous incarnation, KIP-903; Kafka
    /// `Replica.updateFetchStateOrThrow` answers NOT_LEADER_OR_FOLLOWER, the proto documents
    /// STALE_BROKER_EPOCH). Nothing changes then.
    pub fn on_fetch(
        &mut self,
        fetch_offset: i64,
        follower_log_start_offset: Option<i64>,
        broker_epoch: Option<i64>,
        leader_leo: i64,
        now_ms: u64,
    ) -> Result<(), ErrorCode> {
        if let (Some(stored), Some(sent)) = (self.broker_epoch, broker_epoch)
            && sent < stored
        {
            return Err(ErrorCode::StaleBrokerEpoch);
        }
        if fetch_offset >= leader_leo {
            self.last_caught_up_time_ms = self.last_caught_up_time_ms.max(now_ms);
        } else if self
            .last_fetch_leader_leo
            .is_some_and(|prev| fetch_offset >= prev)
        {
            self.last_caught_up_time_ms = self.last_caught_up_time_ms.max(self.last_fetch_time_ms);
        }
        self.log_end_offset = Some(fetch_offset);
        if follower_log_start_offset.is_some() {
            self.log_start_offset = follower_log_start_offset;
        }
        self.last_fetch_leader_leo = Some(
            self.last_fetch_leader_leo
                .map_or(leader_leo, |prev| prev.max(leader_leo)),
        );
        self.last_fetch_time_ms = self.last_fetch_time_ms.max(now_ms);
        if broker_epoch.is_some() {
            self.broker_epoch = broker_epoch;
        }
        Ok(())
    }

    /// Kafka `ReplicaState.isCaughtUp`: the follower's LEO equals the leader's, or it was
    /// caught up within the last `lag_time_max_ms`. With `lag_max_messages = Some(n)` it
    /// must also be at most `n` offsets behind (MiniKafka's offset predicate).
    pub fn is_caught_up(
        &self,
        leader_leo: i64,
        now_ms: u64,
        lag_time_max_ms: u64,
        lag_max_messages: Option<u64>,
    ) -> bool {
        if let Some(max) = lag_max_messages {
            let within = self.log_end_offset.is_some_and(|leo| {
                u64::try_from(leader_leo.saturating_sub(leo)).map_or(true, |lag| lag <= max)
            });
            if !within {
                return false;
            }
        }
        self.log_end_offset == Some(leader_leo)
            || now_ms.saturating_sub(self.last_caught_up_time_ms) <= lag_time_max_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caught_up_time_rules() {
        // (previous fetch leader LEO, fetch offset, leader LEO now) -> caught up time.
        let mut f = FollowerState::new(2);
        f.reset(1_000, 10, true, true);
        assert_eq!(f.last_caught_up_time_ms, 1_000);
        assert_eq!(f.log_end_offset, None);

        // Behind the leader LEO, no previous fetch: caught-up time unchanged.
        f.on_fetch(5, None, Some(7), 10, 2_000).unwrap();
        assert_eq!(
            (f.log_end_offset, f.last_caught_up_time_ms),
            (Some(5), 1_000)
        );
        // Reaches the LEO seen at the previous fetch (10) while the leader moved to 12:
        // caught up as of the previous fetch time.
        f.on_fetch(10, None, Some(7), 12, 3_000).unwrap();
        assert_eq!(f.last_caught_up_time_ms, 2_000);
        // At the leader LEO: caught up now.
        f.on_fetch(12, None, Some(7), 12, 4_000).unwrap();
        assert_eq!(f.last_caught_up_time_ms, 4_000);
        // Stale broker epoch: rejected, nothing changes.
        let before = f.clone();
        assert_eq!(
            f.on_fetch(12, None, Some(6), 12, 5_000),
            Err(ErrorCode::StaleBrokerEpoch)
        );
        assert_eq!(f, before);
    }

    #[test]
    fn reset_out_of_isr_has_no_caught_up_time() {
        let mut f = FollowerState::new(3);
        f.on_fetch(4, Some(0), Some(1), 4, 500).unwrap();
        f.reset(1_000, 9, false, false);
        assert_eq!(f.last_caught_up_time_ms, 0);
        assert_eq!(f.log_end_offset, Some(4), "same leader epoch keeps offsets");
        assert_eq!(f.last_fetch_leader_leo, Some(9));
    }

    #[test]
    fn is_caught_up_table() {
        let mut f = FollowerState::new(2);
        f.reset(0, 0, true, true);
        f.on_fetch(10, None, Some(1), 10, 1_000).unwrap();
        // (leader LEO, now, lag max messages) -> caught up
        let cases = [
            (10, 100_000, None, true),   // equal LEO: always
            (11, 31_000, None, true),    // 30 s since caught up: still in
            (11, 31_001, None, false),   // just over
            (11, 2_000, Some(0), false), // offset lag 1 > 0
            (11, 2_000, Some(1), true),
        ];
        for (leo, now, msgs, want) in cases {
            assert_eq!(
                f.is_caught_up(leo, now, 30_000, msgs),
                want,
                "{leo} {now} {msgs:?}"
            );
        }
        assert!(!FollowerState::new(9).is_caught_up(0, 40_000, 30_000, Some(5)));
    }
}
