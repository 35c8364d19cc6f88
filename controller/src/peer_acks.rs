//! When each peer last answered this node's replication RPCs, for `DescribeQuorum`'s
//! per-voter `last_fetch_timestamp_ms` / `last_caught_up_timestamp_ms` (Kafka:
//! `kafka-metadata-quorum describe --replication` LastFetchTimestamp and
//! LastCaughtUpTimestamp, `LeaderState.ReplicaState` in KIP-836).
//!
//! openraft 0.9's metrics carry only each follower's matched log id, not when it was
//! acknowledged, so the Raft client ([`crate::raft_network`]) records every AppendEntries
//! reply here. Times are the leader's wall clock in ms since the Unix epoch.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};

use openraft::{BasicNode, RaftMetrics};
use tokio::sync::watch;

/// Check-quorum (Raft thesis §6.2; Kafka `LeaderState.timeUntilCheckQuorumExpires` with
/// `controller.quorum.fetch.timeout.ms`): whether a majority of `voters`, the leader
/// `self_id` included, was in contact within the last `timeout_ms` before `now_ms`. A peer's
/// contact is its last AppendEntries reply (`last_fetch`, heartbeats included) or, if later,
/// the moment this node became the leader (`leader_since_ms`), so a new leader gets a whole
/// timeout before it judges. All times are wall-clock ms of this node.
///
/// A missed heartbeat or two (a slow follower) does not count against the leader: only
/// `timeout_ms` of silence from too many peers does.
pub fn quorum_in_contact(
    now_ms: i64,
    leader_since_ms: i64,
    timeout_ms: i64,
    self_id: u64,
    voters: impl IntoIterator<Item = u64>,
    last_fetch: impl Fn(u64) -> Option<i64>,
) -> bool {
    let (mut total, mut in_contact) = (0usize, 0usize);
    for v in voters {
        total += 1;
        let contact = if v == self_id {
            now_ms
        } else {
            last_fetch(v).unwrap_or(i64::MIN).max(leader_since_ms)
        };
        if now_ms.saturating_sub(contact) <= timeout_ms {
            in_contact += 1;
        }
    }
    in_contact * 2 > total
}

/// What the leader knows about one peer's replication replies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerAck {
    /// Wall clock (ms) of the last AppendEntries reply (any reply from the peer's Raft:
    /// success, partial success or conflict). Kafka: LastFetchTimestamp.
    pub last_fetch_ms: i64,
    /// Wall clock (ms) of the last successful reply whose entries reached the leader's last
    /// log index at the time of the reply; -1 never. Kafka: LastCaughtUpTimestamp.
    pub last_caught_up_ms: i64,
}

/// The outcome of one AppendEntries round trip, as far as [`next_ack`] cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppendOutcome {
    /// The peer holds the log up to `matched` (inclusive; `None` = empty log).
    Accepted {
        /// Last index the peer now matches.
        matched: Option<u64>,
    },
    /// The peer answered but its log diverges or is behind (openraft `Conflict`).
    Rejected,
}

/// The pure step: the record after a reply at `now_ms`, given the previous record and the
/// leader's last log index when the reply arrived.
pub fn next_ack(
    prev: Option<PeerAck>,
    now_ms: i64,
    outcome: AppendOutcome,
    leader_last_index: Option<u64>,
) -> PeerAck {
    let prev_caught_up = prev.map_or(-1, |p| p.last_caught_up_ms);
    let caught_up = match outcome {
        AppendOutcome::Accepted { matched } if matched >= leader_last_index => now_ms,
        _ => prev_caught_up,
    };
    PeerAck {
        last_fetch_ms: now_ms,
        last_caught_up_ms: caught_up,
    }
}

/// Shared per-peer records; cheap to clone (one shared map).
#[derive(Debug, Clone, Default)]
pub struct PeerAcks {
    peers: Arc<Mutex<BTreeMap<u64, PeerAck>>>,
    /// This node's Raft metrics, attached once the node exists (the network is built first).
    metrics: Arc<OnceLock<watch::Receiver<RaftMetrics<u64, BasicNode>>>>,
}

impl PeerAcks {
    /// Lets the records see this node's last log index. Later calls are ignored.
    pub fn attach(&self, metrics: watch::Receiver<RaftMetrics<u64, BasicNode>>) {
        let _ = self.metrics.set(metrics);
    }

    /// Records a reply from `peer` now.
    pub fn record(&self, peer: u64, outcome: AppendOutcome) {
        let leader_last = self.metrics.get().and_then(|m| m.borrow().last_log_index);
        let now_ms = crate::write_path::wall_clock_ms();
        let mut peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        let prev = peers.get(&peer).copied();
        peers.insert(peer, next_ack(prev, now_ms, outcome, leader_last));
    }

    /// The record of `peer`, if it ever answered.
    pub fn get(&self, peer: u64) -> Option<PeerAck> {
        let peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        peers.get(&peer).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_quorum_needs_a_majority_heard_from_within_the_timeout() {
        let fetched = |at: &'static [(u64, i64)]| {
            move |id: u64| at.iter().find(|(p, _)| *p == id).map(|(_, t)| *t)
        };
        // Leader 1 of {1, 2, 3} since t=0, timeout 600.
        let check = |now, at| quorum_in_contact(now, 0, 600, 1, [1, 2, 3], fetched(at));
        // A new leader has a whole timeout before it judges, even with no reply at all.
        assert!(check(600, &[]));
        assert!(!check(601, &[]));
        // One peer heard from within the timeout is enough (2 of 3); a late one is not.
        assert!(check(1000, &[(2, 400)]));
        assert!(!check(1000, &[(2, 399), (3, 100)]));
        assert!(check(1000, &[(2, 399), (3, 990)]));
        // Five voters need two peers.
        let five = |at| quorum_in_contact(2000, 0, 600, 1, 1..=5, fetched(at));
        assert!(!five(&[(2, 1900)]));
        assert!(five(&[(2, 1900), (4, 1500)]));
        // A single voter is its own quorum.
        assert!(quorum_in_contact(10_000, 0, 600, 1, [1], |_| None));
    }

    #[test]
    fn every_reply_is_a_fetch_and_only_a_full_match_is_caught_up() {
        let a = next_ack(
            None,
            100,
            AppendOutcome::Accepted { matched: Some(5) },
            Some(7),
        );
        assert_eq!(
            a,
            PeerAck {
                last_fetch_ms: 100,
                last_caught_up_ms: -1
            }
        );
        let b = next_ack(
            Some(a),
            200,
            AppendOutcome::Accepted { matched: Some(7) },
            Some(7),
        );
        assert_eq!(
            b,
            PeerAck {
                last_fetch_ms: 200,
                last_caught_up_ms: 200
            }
        );
        // Behind again (the leader appended meanwhile): fetch advances, caught-up stays.
        let c = next_ack(
            Some(b),
            300,
            AppendOutcome::Accepted { matched: Some(7) },
            Some(9),
        );
        assert_eq!(
            c,
            PeerAck {
                last_fetch_ms: 300,
                last_caught_up_ms: 200
            }
        );
        let d = next_ack(Some(c), 400, AppendOutcome::Rejected, Some(9));
        assert_eq!(
            d,
            PeerAck {
                last_fetch_ms: 400,
                last_caught_up_ms: 200
            }
        );
        // Both logs empty: caught up.
        let e = next_ack(None, 1, AppendOutcome::Accepted { matched: None }, None);
        assert_eq!(e.last_caught_up_ms, 1);
    }
}
