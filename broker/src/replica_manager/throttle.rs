//! The broker's replication throttles (KIP-73) read from the metadata image: which replicas
//! are throttled (the topic's `leader.replication.throttled.replicas` /
//! `follower.replication.throttled.replicas`), the rates (this broker's or the cluster-wide
//! `leader.replication.throttled.rate` / `follower.replication.throttled.rate`), and the two
//! measured quotas ([`crate::replica::quota`] holds the rules). Configs apply on the next
//! fetch after the metadata that sets them, without a restart (KIP-226).
//!
//! Leader side ([`Side::Leader`], in [`super::fetch`]): a follower fetch of a throttled replica
//! whose follower is outside the ISR gets no records while the leader quota is exceeded; the
//! bytes sent for throttled replicas are recorded. Follower side ([`Side::Follower`], in
//! [`super::fetcher`]): a throttled partition this broker follows from outside the ISR is left
//! out of the next fetch while the follower quota is exceeded; the bytes appended for it are
//! recorded.

use std::sync::Mutex;

use keel_metadata_log::MetadataImage;
use keel_metadata_log::configs::{ThrottledReplicas, dynamic_broker_value, dynamic_topic_value};

use crate::replica::quota::{ReplicationQuota, rate_bound, should_throttle};

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

    /// Whether the replica of `topic`-`partition` on `broker` (this broker) is throttled on
    /// `side`. An unparsable list (the controller validates them) throttles nothing.
    pub fn is_throttled(
        image: &MetadataImage,
        side: Side,
        topic: &str,
        partition: i32,
        broker: i32,
    ) -> bool {
        dynamic_topic_value(image, topic, broker, side.replicas_key())
            .and_then(|v| ThrottledReplicas::parse(v).ok())
            .is_some_and(|l| l.throttles(partition, broker))
    }

    /// Whether a throttled replica (`throttled`) outside the ISR (`in_isr` false) waits now:
    /// this side's measured rate is above `broker`'s rate.
    pub fn holds_back(
        &self,
        image: &MetadataImage,
        side: Side,
        broker: i32,
        throttled: bool,
        in_isr: bool,
        now_ms: u64,
    ) -> bool {
        if !throttled || in_isr {
            return false;
        }
        let Some(bound) = rate_bound(dynamic_broker_value(image, broker, side.rate_key())) else {
            return false;
        };
        should_throttle(
            throttled,
            in_isr,
            self.quota(side).is_exceeded(now_ms, bound),
        )
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
