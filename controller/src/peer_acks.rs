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
