//! The broker's replication throttles (KIP-73) read from the metadata image: which replicas
//! are throttled (the topic's `leader.replication.throttled.replicas` /
//! `follower.replication.throttled.replicas`), the rates (this broker's or the cluster-wide
//! `leader.replication.throttled.rate` / `follower.replication.throttled.rate`), and the two
//! measured quotas ([`crate::replica::quota`] holds the rules). Configs apply on the next
//! fetch after the metadata that sets them, without a restart (KIP-226).
//!
//! Leader side ([`Side::Leader`], in [`super::fetch`]): a follower fetch of a throttled replica
//! whose follower is out of sync gets no records while the leader quota is exceeded; the
//! bytes sent for throttled replicas are recorded. Follower side ([`Side::Follower`], in
//! [`super::fetcher`]): a throttled partition this broker follows out of sync is left out of
//! the next fetch while the follower quota is exceeded; the bytes appended for it are
//! recorded.
//!
//! In sync means in the ISR, as in Kafka, and also (Keel) in the leader's maximal ISR or
//! caught up to the HW: a leader adding a replica to the ISR counts it for the HW before the
//! change commits (KIP-497), so holding that replica back would hold every acks=all produce
//! of the partition until the quota or the metadata let it go; a caught-up replica only
//! needs the live traffic, which the throttle is not meant to slow.

use std::sync::Mutex;

use keel_metadata_log::MetadataImage;
use keel_metadata_log::configs::{ThrottledReplicas, dynamic_broker_value, dynamic_topic_value};

use crate::replica::quota::{ReplicationQuota, rate_bound, should_throttle};

/// What a throttled replica may move now ([`Throttles::verdict`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Not throttled: the usual fetch limits.
    Free,
    /// Throttled and under the rate: at most this many bytes this round.
    Cap(usize),
    /// Throttled and over the rate: nothing this round.
    Hold,
}

/// Bytes a throttled replica may move in one fetch round at `bound` bytes/s: 50 ms worth, at
/// least 64 KiB (one batch always goes); the fetch's own limits still apply on top.
/// Kafka lets a throttled fetch take its whole size; here 16 MiB fetches moved more than a
/// second's worth at once and the burst of copying and writing it showed in produce latency
/// (`cargo bench -p keel-tests --bench reassignment`, 2 cores, 10 MiB/s throttle: produce p99
/// during the move 59.6 ms uncapped, 15.5 ms with 100 ms rounds, 6.3 ms with 50 ms rounds,
/// against 4.7 ms without a move).
pub fn round_cap(bound: u64) -> usize {
    usize::try_from(bound / 20)
        .unwrap_or(usize::MAX)
        .max(64 << 10)
}

/// Which quota.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// What this broker sends, as leader, to throttled followers.
    Leader,
    /// What this broker fetches, as follower, for throttled replicas.
    Follower,
}

impl Side {
    /// The topic key listing this side's throttled replicas.
    pub fn replicas_key(self) -> &'static str {
        match self {
            Side::Leader => "leader.replication.throttled.replicas",
            Side::Follower => "follower.replication.throttled.replicas",
        }
    }

    /// The broker key with this side's rate, bytes/s.
    pub fn rate_key(self) -> &'static str {
        match self {
            Side::Leader => "leader.replication.throttled.rate",
            Side::Follower => "follower.replication.throttled.rate",
        }
    }
}

/// The leader and follower quotas of one broker.
#[derive(Debug, Default)]
pub struct Throttles {
    leader: Mutex<ReplicationQuota>,
    follower: Mutex<ReplicationQuota>,
}

impl Throttles {
    fn quota(&self, side: Side) -> std::sync::MutexGuard<'_, ReplicationQuota> {
        match side {
            Side::Leader => &self.leader,
            Side::Follower => &self.follower,
        }
        .lock()
        .unwrap_or_else(|e| e.into_inner())
    }

    /// The throttled-replicas list of `topic` on `side` for `broker` (this broker), if any:
    /// looked up once per topic of a fetch rather than per partition (the lookup allocates
    /// and reads up to three config maps). An unparsable list (the controller validates
    /// them) is none.
    pub fn topic_list(
        image: &MetadataImage,
        side: Side,
        topic: &str,
        broker: i32,
    ) -> Option<ThrottledReplicas> {
        dynamic_topic_value(image, topic, broker, side.replicas_key())
            .and_then(|v| ThrottledReplicas::parse(v).ok())
    }

    /// What a throttled replica (`throttled`) out of sync (`in_sync` false: see the module
    /// doc) may move now on `side` of `broker`: nothing while the measured rate is above the
    /// broker's rate, else at most [`round_cap`] bytes; anything when it is not throttled, in
    /// sync, or the broker has no rate.
    pub fn verdict(
        &self,
        image: &MetadataImage,
        side: Side,
        broker: i32,
        throttled: bool,
        in_sync: bool,
        now_ms: u64,
    ) -> Verdict {
        if !throttled || in_sync {
            return Verdict::Free;
        }
        let Some(bound) = rate_bound(dynamic_broker_value(image, broker, side.rate_key())) else {
            return Verdict::Free;
        };
        if should_throttle(
            throttled,
            in_sync,
            self.quota(side).is_exceeded(now_ms, bound),
        ) {
            Verdict::Hold
        } else {
            Verdict::Cap(round_cap(bound))
        }
    }

    /// Records `bytes` moved for a throttled replica on `side` at `now_ms`.
    pub fn record(&self, side: Side, now_ms: u64, bytes: usize) {
        if bytes > 0 {
            self.quota(side).record(now_ms, bytes as u64);
        }
    }

    /// This side's measured rate at `now_ms`, bytes/s (metrics and tests).
    pub fn rate(&self, side: Side, now_ms: u64) -> f64 {
        self.quota(side).rate(now_ms)
    }
}
