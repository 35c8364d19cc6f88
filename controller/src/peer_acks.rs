//! When each peer last answered this node's replication RPCs, for `DescribeQuorum`'s
//! per-voter `last_fetch_timestamp_ms` / `last_caught_up_timestamp_ms` (Kafka:
//! `kafka-metadata-quorum describe --replication` LastFetchTimestamp and
//! LastCaughtUpTimestamp, `LeaderState.ReplicaState` in KIP-836).
//!
//! openraft 0.9's metrics carry only each follower's matched log id, not when it was
//! acknowledged, so the Raft client ([`crate::raft_network`]) records every AppendEntries
//! reply here, and every InstallSnapshot round trip. The reported times are the leader's wall
//! clock in ms since the Unix epoch; check-quorum reads the same contacts on a monotonic
//! clock ([`monotonic_ms`]), so a wall-clock jump cannot step a leader down.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};

use keel_metadata_log::raft_types::ControllerNode;
use openraft::RaftMetrics;
use tokio::sync::watch;

/// Check-quorum (Raft thesis §6.2; Kafka `LeaderState.timeUntilCheckQuorumExpires` with
/// `controller.quorum.fetch.timeout.ms`): whether a majority of `voters`, the leader
/// `self_id` included, was in contact within the last `timeout_ms` before `now_ms`. A peer's
/// contact is `last_contact(peer)` (its last reply, heartbeats included, or now while it
/// installs a snapshot: [`contact_at`]) or, if later,
/// the moment this node became the leader (`leader_since_ms`), so a new leader gets a whole
/// timeout before it judges. All times are [`monotonic_ms`] of this node.
///
/// A missed heartbeat or two (a slow follower) does not count against the leader: only
/// `timeout_ms` of silence from too many peers does.
pub fn quorum_in_contact(
    now_ms: i64,
    leader_since_ms: i64,
    timeout_ms: i64,
    self_id: u64,
    voters: impl IntoIterator<Item = u64>,
    last_contact: impl Fn(u64) -> Option<i64>,
) -> bool {
    let (mut total, mut in_contact) = (0usize, 0usize);
    for v in voters {
        total += 1;
        let contact = if v == self_id {
            now_ms
        } else {
            last_contact(v).unwrap_or(i64::MIN).max(leader_since_ms)
        };
        if now_ms.saturating_sub(contact) <= timeout_ms {
            in_contact += 1;
        }
    }
    in_contact * 2 > total
}

/// [`keel_runtime::clock::monotonic_ms`] as the signed ms this module computes with.
pub fn monotonic_ms() -> i64 {
    keel_runtime::clock::monotonic_ms() as i64
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
    /// [`monotonic_ms`] of the last reply of the peer's Raft that accepted this node as
    /// leader: an AppendEntries reply as above, or an InstallSnapshot reply.
    pub last_contact_ms: i64,
}

/// The peer's contact time for check-quorum at `now_ms` ([`monotonic_ms`]): its last reply
/// (`ack`), or `now_ms` while an InstallSnapshot to it is pending (started at
/// `installing_since`) that began while the peer was in contact (its last reply at most
/// `timeout_ms` before the start). A pending install keeps a contact alive; it does not make
/// one: an install to a peer that is down is pending too, until its connection fails.
///
/// openraft answers the last chunk of a snapshot only once the follower has installed it and
/// sends the follower nothing else meanwhile, so a large install is a long silence that is
/// not a lost follower (Kafka counts each FetchSnapshot request as contact,
/// `LeaderState.updateCheckQuorumForFollowingVoter`). The pending RPC is bounded by
/// `install_snapshot_timeout`; when it fails or times out the peer's silence counts again.
pub fn contact_at(
    ack: Option<PeerAck>,
    installing_since: Option<i64>,
    now_ms: i64,
    timeout_ms: i64,
) -> Option<i64> {
    let last = ack.map(|a| a.last_contact_ms);
    match (last, installing_since) {
        (Some(last), Some(since)) if since.saturating_sub(last) <= timeout_ms => Some(now_ms),
        _ => last,
    }
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

/// The pure step: the record after an AppendEntries reply at `now_ms` (wall clock) and
/// `mono_ms` ([`monotonic_ms`]), given the previous record and the leader's last log index
/// when the reply arrived.
pub fn next_ack(
    prev: Option<PeerAck>,
    now_ms: i64,
    mono_ms: i64,
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
        last_contact_ms: mono_ms,
    }
}

/// Shared per-peer records; cheap to clone (one shared map).
#[derive(Debug, Clone, Default)]
pub struct PeerAcks {
    peers: Arc<Mutex<BTreeMap<u64, PeerAck>>>,
    /// Peers with an InstallSnapshot RPC pending (see [`contact_at`]); at most one per peer,
    /// as openraft runs one replication stream per peer.
    installing: Arc<Mutex<BTreeMap<u64, i64>>>,
    /// This node's Raft metrics, attached once the node exists (the network is built first).
    metrics: Arc<OnceLock<watch::Receiver<RaftMetrics<u64, ControllerNode>>>>,
}

impl PeerAcks {
    /// Lets the records see this node's last log index. Later calls are ignored.
    pub fn attach(&self, metrics: watch::Receiver<RaftMetrics<u64, ControllerNode>>) {
        let _ = self.metrics.set(metrics);
    }

    /// Records an AppendEntries reply from `peer` now.
    pub fn record(&self, peer: u64, outcome: AppendOutcome) {
        let leader_last = self.metrics.get().and_then(|m| m.borrow().last_log_index);
        let now_ms = keel_runtime::clock::wall_clock_ms();
        let mut peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        let prev = peers.get(&peer).copied();
        peers.insert(
            peer,
            next_ack(prev, now_ms, monotonic_ms(), outcome, leader_last),
        );
    }

    /// Records an InstallSnapshot reply from `peer` now (contact only: what the peer holds
    /// is reported by the AppendEntries that follow).
    pub fn record_snapshot_reply(&self, peer: u64) {
        let mono_ms = monotonic_ms();
        let mut peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        let ack = peers.entry(peer).or_insert(PeerAck {
            last_fetch_ms: -1,
            last_caught_up_ms: -1,
            last_contact_ms: mono_ms,
        });
        ack.last_contact_ms = mono_ms;
    }

    /// Marks an InstallSnapshot RPC to `peer` pending from now until the returned guard is
    /// dropped.
    pub fn installing(&self, peer: u64) -> InstallingGuard {
        self.installing
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(peer, monotonic_ms());
        InstallingGuard {
            acks: self.clone(),
            peer,
        }
    }

    /// The record of `peer`, if it ever answered.
    pub fn get(&self, peer: u64) -> Option<PeerAck> {
        let peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        peers.get(&peer).copied()
    }

    /// The contact time of `peer` for check-quorum at `now_ms` ([`contact_at`]).
    pub fn contact_at(&self, peer: u64, now_ms: i64, timeout_ms: i64) -> Option<i64> {
        let installing = self
            .installing
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&peer)
            .copied();
        contact_at(self.get(peer), installing, now_ms, timeout_ms)
    }
}

/// An InstallSnapshot RPC in progress (see [`PeerAcks::installing`]); dropping it, when the
/// RPC ends or is abandoned, ends the pending state.
#[derive(Debug)]
pub struct InstallingGuard {
    acks: PeerAcks,
    peer: u64,
}

impl Drop for InstallingGuard {
    fn drop(&mut self) {
        self.acks
            .installing
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.peer);
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
        let accepted = |m: u64| AppendOutcome::Accepted { matched: Some(m) };
        // Wall clock and monotonic clock differ on purpose: each field takes its own.
        let a = next_ack(None, 100, 10, accepted(5), Some(7));
        let ack = |fetch, caught_up, contact| PeerAck {
            last_fetch_ms: fetch,
            last_caught_up_ms: caught_up,
            last_contact_ms: contact,
        };
        assert_eq!(a, ack(100, -1, 10));
        let b = next_ack(Some(a), 200, 20, accepted(7), Some(7));
        assert_eq!(b, ack(200, 200, 20));
        // Behind again (the leader appended meanwhile): fetch advances, caught-up stays.
        let c = next_ack(Some(b), 300, 30, accepted(7), Some(9));
        assert_eq!(c, ack(300, 200, 30));
        let d = next_ack(Some(c), 400, 40, AppendOutcome::Rejected, Some(9));
        assert_eq!(d, ack(400, 200, 40));
        // Both logs empty: caught up.
        let e = next_ack(None, 1, 1, AppendOutcome::Accepted { matched: None }, None);
        assert_eq!(e.last_caught_up_ms, 1);
    }

    #[test]
    fn a_pending_snapshot_install_keeps_a_contact_alive_until_it_ends() {
        let ack = |contact| PeerAck {
            last_fetch_ms: 5_000,
            last_caught_up_ms: 5_000,
            last_contact_ms: contact,
        };
        // Not installing: the last reply.
        assert_eq!(contact_at(Some(ack(100)), None, 2_000, 600), Some(100));
        // Installing since 700, last reply at 100 (within 600 of the start): in contact now.
        assert_eq!(
            contact_at(Some(ack(100)), Some(700), 2_000, 600),
            Some(2_000)
        );
        // An install that began after the peer fell silent (down) does not count.
        assert_eq!(contact_at(Some(ack(100)), Some(701), 2_000, 600), Some(100));
        assert_eq!(contact_at(None, Some(700), 2_000, 600), None);
        assert_eq!(contact_at(None, None, 2_000, 600), None);

        let acks = PeerAcks::default();
        assert_eq!(acks.contact_at(2, 1_000, 600), None);
        let pending = acks.installing(2);
        assert_eq!(
            acks.contact_at(2, 1_000, 600),
            None,
            "a peer never heard from stays silent"
        );
        drop(pending);
        acks.record_snapshot_reply(2);
        let got = acks.get(2).unwrap();
        assert_eq!((got.last_fetch_ms, got.last_caught_up_ms), (-1, -1));
        let now = monotonic_ms();
        let pending = acks.installing(2);
        assert_eq!(acks.contact_at(2, now + 10_000, 600), Some(now + 10_000));
        assert_eq!(
            acks.contact_at(3, now + 10_000, 600),
            None,
            "only that peer"
        );
        drop(pending);
        assert_eq!(
            acks.contact_at(2, now + 10_000, 600),
            Some(got.last_contact_ms),
            "ended (answered, failed or abandoned): its last reply again"
        );
    }
}
