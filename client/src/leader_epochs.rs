//! What a client knows about partition leaders, and how it reacts when a broker disagrees,
//! pure (no I/O, no clock): the decisions behind [`crate::brokers::Brokers`], the producer
//! and the consumer (issue #18, items 7 and 9).
//!
//! - [`LeaderEpochs`]: the highest leader epoch seen per partition, from any source (a
//!   metadata answer, a produce routed by it, a fetched batch, a ListOffsets answer). A
//!   client never steps back to metadata with an older epoch (KIP-320; Kafka
//!   `Metadata.updateLastSeenEpochIfNewer` and the epoch check of
//!   `Metadata.updateLatestMetadata`), so a resumed ex-leader is always asked with the newer
//!   epoch and answers UNKNOWN_LEADER_EPOCH (DESIGN §5) instead of its stale data.
//! - [`choose`]: which leader to route by when a fresh answer, the cached entry and the
//!   highest known epoch disagree.
//! - [`merge_answers`]: the metadata of several brokers, per partition the newest epoch (a
//!   read-back never trusts one broker: a broker resumed from a pause still describes the
//!   cluster as it was).
//! - [`enough_answers`]: when a metadata refresh asked of several brokers may stop waiting.
//! - [`react`]: what a failed request means: refresh the metadata and retry, retry as is, or
//!   give up.

use std::collections::HashMap;
use std::time::Duration;

use keel_proto::ErrorCode;

/// One partition as the metadata names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionLeader {
    /// Leader broker id; -1 = none (offline).
    pub leader_id: i32,
    /// Leader epoch the metadata reported.
    pub leader_epoch: i32,
}

/// Whether a per-partition error means "the metadata is stale: refresh and retry"
/// (Kafka: `InvalidMetadataException` subclasses).
pub fn needs_metadata_refresh(code: ErrorCode) -> bool {
    matches!(
        code,
        ErrorCode::NotLeaderOrFollower
            | ErrorCode::FencedLeaderEpoch
            | ErrorCode::UnknownLeaderEpoch
            | ErrorCode::UnknownTopicOrPartition
            | ErrorCode::LeaderNotAvailable
            | ErrorCode::NetworkException
    )
}

/// The highest leader epoch seen for each partition of each topic (see the module
/// documentation). Epochs are >= 0; negative values (Kafka's "unknown") are ignored.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaderEpochs {
    topics: HashMap<String, TopicEpochs>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct TopicEpochs {
    /// 16-byte topic id; empty = not known yet.
    topic_id: Vec<u8>,
    /// Partition -> highest leader epoch seen.
    epochs: HashMap<i32, i32>,
}

impl LeaderEpochs {
    /// The highest leader epoch seen for `topic`-`partition`, if any.
    pub fn known(&self, topic: &str, partition: i32) -> Option<i32> {
        self.topics.get(topic)?.epochs.get(&partition).copied()
    }

    /// Records `epoch` for `topic`-`partition` if it is newer than the known one (Kafka
    /// `Metadata.updateLastSeenEpochIfNewer`). Returns true when it raised the known epoch.
    pub fn observe(&mut self, topic: &str, partition: i32, epoch: i32) -> bool {
        if epoch < 0 {
            return false;
        }
        let known = self
            .topics
            .entry(topic.to_string())
            .or_default()
            .epochs
            .entry(partition)
            .or_insert(-1);
        if epoch > *known {
            *known = epoch;
            true
        } else {
            false
        }
    }

    /// Notes the topic id a metadata answer gave for `topic`. A different id than the known
    /// one means the topic was deleted and created again: its epochs start over, so the known
    /// ones are forgotten (Kafka `Metadata.updateLatestMetadata` accepts a changed topic id
    /// whatever the epochs). An empty id (an error answer) changes nothing.
    pub fn note_topic_id(&mut self, topic: &str, topic_id: &[u8]) {
        if topic_id.is_empty() {
            return;
        }
        let t = self.topics.entry(topic.to_string()).or_default();
        if t.topic_id != topic_id {
            if !t.topic_id.is_empty() {
                t.epochs.clear();
            }
            t.topic_id = topic_id.to_vec();
        }
    }
}

/// What to route `topic`-`partition` by, from [`choose`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    /// The fresh answer: its epoch is at least the highest known one.
    Fresh(PartitionLeader),
    /// The fresh answer is older than the cached entry, which is kept (Kafka keeps the
    /// cached partition metadata when a response carries an older leader epoch).
    Cached(PartitionLeader),
    /// Every source is older than the highest known epoch (learnt from a produce, a fetched
    /// batch or another broker): the leader is unknown until a broker that has caught up
    /// answers; refresh and retry.
    Stale {
        /// The highest epoch the answers gave.
        answered: i32,
        /// The highest epoch known.
        known: i32,
    },
}

/// Chooses between a `fresh` metadata answer for one partition, the `cached` entry and the
/// highest `known` epoch (see [`Choice`]). Equal epochs take the fresh answer (one epoch has
/// one leader; the fresh one is as new).
pub fn choose(
    fresh: PartitionLeader,
    cached: Option<PartitionLeader>,
    known: Option<i32>,
) -> Choice {
    let known = known.unwrap_or(-1);
    if fresh.leader_epoch >= known {
        return Choice::Fresh(fresh);
    }
    match cached {
        Some(c) if c.leader_epoch > fresh.leader_epoch && c.leader_epoch >= known => {
            Choice::Cached(c)
        }
        _ => Choice::Stale {
            answered: fresh
                .leader_epoch
                .max(cached.map_or(-1, |c| c.leader_epoch)),
            known,
        },
    }
}

/// Why `topic`-`partition` has no leader to send to, for an error message. `p` is the
/// partition as the metadata cache holds it (leader -1, or a leader whose address no answer
/// gave) and `known` the highest leader epoch seen. With no leader: below `known`, every
/// answer was older than an epoch seen elsewhere ([`Choice::Stale`]: the brokers have not
/// caught up); at or above it, the partition is offline (Kafka's Metadata answers
/// LEADER_NOT_AVAILABLE: no replica in its ISR is on a live broker, and unclean election is
/// off); epoch -1, no broker's metadata has the partition yet (it was just added).
pub fn no_leader(topic: &str, partition: i32, p: PartitionLeader, known: Option<i32>) -> String {
    let why = match known {
        _ if p.leader_id >= 0 => format!(
            "broker {} leads it (leader epoch {}) but no metadata answer gave its address",
            p.leader_id, p.leader_epoch
        ),
        Some(k) if k > p.leader_epoch => format!(
            "no broker has caught up with leader epoch {k} yet (the newest metadata is at \
             epoch {})",
            p.leader_epoch
        ),
        _ if p.leader_epoch < 0 => "no broker's metadata has this partition yet".to_string(),
        _ => format!(
            "the partition is offline at leader epoch {} (LEADER_NOT_AVAILABLE: no replica in \
             its ISR is on a live broker)",
            p.leader_epoch
        ),
    };
    format!("no leader for {topic}-{partition}: {why}")
}

/// Merges the partition lists of several brokers' answers for one topic: per partition id
/// the entry with the highest leader epoch (the first answer on a tie). A partition some
/// answers lack (a broker that has not seen it created yet) comes from those that have it;
/// one nobody has is `leader_id -1, leader_epoch -1`. The result has as many partitions as
/// the longest answer.
pub fn merge_answers(answers: &[Vec<PartitionLeader>]) -> Vec<PartitionLeader> {
    let len = answers.iter().map(Vec::len).max().unwrap_or(0);
    (0..len)
        .map(|i| {
            answers
                .iter()
                .filter_map(|a| a.get(i).copied())
                .reduce(|best, p| {
                    if p.leader_epoch > best.leader_epoch {
                        p
                    } else {
                        best
                    }
                })
                .unwrap_or(PartitionLeader {
                    leader_id: -1,
                    leader_epoch: -1,
                })
        })
        .collect()
}

/// After the answers of a majority arrived, how long a metadata refresh still waits for the
/// others: a healthy broker answers within milliseconds; a paused one never does.
pub const METADATA_GRACE: Duration = Duration::from_millis(200);

/// Whether a metadata refresh asked of `asked` brokers may stop waiting: when every broker
/// answered or failed, or when a majority answered and `since_majority` (time since the
/// majority-th answer) reached [`METADATA_GRACE`]. Waiting for a majority means one broker
/// that lags (resumed from a pause, or restarted from an old snapshot) cannot alone decide
/// where the client reads; the grace lets the rest be heard too. Each answer is bounded by
/// the request timeout, so the wait is too.
pub fn enough_answers(
    asked: usize,
    answered: usize,
    failed: usize,
    since_majority: Option<Duration>,
) -> bool {
    if answered + failed >= asked {
        return true;
    }
    answered > asked / 2 && since_majority.is_some_and(|d| d >= METADATA_GRACE)
}

/// How a request of a producer or consumer failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The broker answered with this Kafka error code for the partition.
    Kafka(ErrorCode),
    /// No answer: connection refused or reset, request timeout.
    Transport,
    /// The metadata named no leader, or only leaders older than the highest known epoch.
    NoLeader,
}

/// What to do after a [`Failure`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reaction {
    /// The leader moved or the answering broker lags: drop the cached metadata, ask the
    /// brokers again (others than a broker that failed), and retry after a backoff.
    RefreshAndRetry,
    /// A passing condition on the right leader (e.g. a new leader's HW not yet known,
    /// REQUEST_TIMED_OUT): retry after a backoff with the same metadata.
    Retry,
    /// Retrying cannot help: report the error.
    Fatal,
}

/// The reaction to `failure` (Kafka: `InvalidMetadataException` subclasses and transport
/// errors request a metadata update; other `RetriableException`s are retried as is; the
/// rest are thrown to the caller).
pub fn react(failure: Failure) -> Reaction {
    match failure {
        Failure::Transport | Failure::NoLeader => Reaction::RefreshAndRetry,
        Failure::Kafka(code) if needs_metadata_refresh(code) => Reaction::RefreshAndRetry,
        Failure::Kafka(code) if code.retriable() => Reaction::Retry,
        Failure::Kafka(_) => Reaction::Fatal,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pl(leader_id: i32, leader_epoch: i32) -> PartitionLeader {
        PartitionLeader {
            leader_id,
            leader_epoch,
        }
    }

    /// The trial's case: a partition whose only replica is down read "no broker has caught up
    /// with leader epoch 0 yet" (epoch 0 seen while reading, metadata at epoch 1, leaderless).
    #[test]
    fn no_leader_tells_offline_from_stale_metadata() {
        let offline = no_leader("t", 0, pl(-1, 1), Some(0));
        assert_eq!(
            offline,
            "no leader for t-0: the partition is offline at leader epoch 1 \
             (LEADER_NOT_AVAILABLE: no replica in its ISR is on a live broker)"
        );
        assert_eq!(no_leader("t", 0, pl(-1, 1), None), offline);
        assert_eq!(no_leader("t", 0, pl(-1, 1), Some(1)), offline);
        assert!(no_leader("t", 0, pl(-1, 1), Some(2)).contains("caught up with leader epoch 2"));
        assert!(
            no_leader("t", 3, pl(-1, -1), None)
                .ends_with("no broker's metadata has this partition yet")
        );
        assert!(no_leader("t", 0, pl(4, 2), Some(2)).contains("broker 4 leads it"));
    }

    #[test]
    fn known_epochs_only_grow() {
        let mut e = LeaderEpochs::default();
        assert_eq!(e.known("t", 0), None);
        assert!(e.observe("t", 0, 3));
        assert!(!e.observe("t", 0, 2), "an older epoch is not learnt");
        assert!(!e.observe("t", 0, 3));
        assert!(!e.observe("t", 0, -1), "Kafka's unknown epoch is ignored");
        assert!(e.observe("t", 0, 5));
        assert_eq!(e.known("t", 0), Some(5));
        assert_eq!(e.known("t", 1), None);
        assert_eq!(e.known("u", 0), None);
    }

    #[test]
    fn a_new_topic_id_starts_the_epochs_over() {
        let mut e = LeaderEpochs::default();
        e.note_topic_id("t", &[1; 16]);
        e.observe("t", 0, 7);
        e.note_topic_id("t", &[1; 16]);
        e.note_topic_id("t", &[]);
        assert_eq!(e.known("t", 0), Some(7));
        // Deleted and created again: epoch 0 is fresh again.
        e.note_topic_id("t", &[2; 16]);
        assert_eq!(e.known("t", 0), None);
        // Epochs learnt before the first id are kept when it arrives.
        e.observe("u", 0, 4);
        e.note_topic_id("u", &[3; 16]);
        assert_eq!(e.known("u", 0), Some(4));
    }

    #[test]
    fn choice_table() {
        // (fresh, cached, known) -> choice
        let table = [
            // Nothing known: take the answer.
            (pl(1, 3), None, None, Choice::Fresh(pl(1, 3))),
            // As new or newer than known: take it.
            (pl(2, 5), Some(pl(1, 4)), Some(4), Choice::Fresh(pl(2, 5))),
            (pl(2, 4), Some(pl(2, 4)), Some(4), Choice::Fresh(pl(2, 4))),
            // No leader is news too when its epoch is current.
            (pl(-1, 6), Some(pl(2, 5)), Some(5), Choice::Fresh(pl(-1, 6))),
            // The resumed ex-leader describes itself with epoch 4; we routed by 5: keep 5.
            (pl(1, 4), Some(pl(2, 5)), Some(5), Choice::Cached(pl(2, 5))),
            // Epoch 6 learnt from a produce or a fetched batch, cache and answer at 5 and 4:
            // the leader is unknown until some broker catches up.
            (
                pl(1, 4),
                Some(pl(2, 5)),
                Some(6),
                Choice::Stale {
                    answered: 5,
                    known: 6,
                },
            ),
            (
                pl(1, 4),
                None,
                Some(5),
                Choice::Stale {
                    answered: 4,
                    known: 5,
                },
            ),
        ];
        for (fresh, cached, known, want) in table {
            assert_eq!(
                choose(fresh, cached, known),
                want,
                "{fresh:?} {cached:?} {known:?}"
            );
        }
    }

    #[test]
    fn merged_answers_take_the_newest_epoch_per_partition() {
        let resumed = vec![pl(1, 4), pl(1, 2)];
        let caught_up = vec![pl(2, 5), pl(1, 2), pl(3, 0)];
        let other = vec![pl(2, 5), pl(3, 3)];
        assert_eq!(
            merge_answers(&[resumed.clone(), caught_up.clone(), other.clone()]),
            vec![pl(2, 5), pl(3, 3), pl(3, 0)]
        );
        // Order does not matter, except on ties (first wins).
        assert_eq!(
            merge_answers(&[other, caught_up, resumed.clone()]),
            vec![pl(2, 5), pl(3, 3), pl(3, 0)]
        );
        assert_eq!(merge_answers(std::slice::from_ref(&resumed)), resumed);
        assert_eq!(merge_answers(&[]), vec![]);
    }

    #[test]
    fn enough_answers_table() {
        let g = METADATA_GRACE;
        let ms = Duration::from_millis;
        // (asked, answered, failed, since majority) -> stop?
        let table = [
            (3, 3, 0, Some(ms(0)), true),
            (3, 1, 2, None, true),  // two refused: nothing more will come
            (3, 0, 3, None, true),  // all failed: the caller reports them
            (3, 1, 0, None, false), // one answer is not a majority
            (3, 1, 1, None, false), // nor is one answer and one failure
            (3, 2, 0, Some(ms(10)), false), // majority, within the grace
            (3, 2, 0, Some(g), true), // majority, grace over: the paused one is left
            (1, 1, 0, Some(ms(0)), true),
            (4, 2, 0, Some(g), false), // 2 of 4 is no majority
            (4, 3, 0, Some(g), true),
        ];
        for (asked, answered, failed, since, want) in table {
            assert_eq!(
                enough_answers(asked, answered, failed, since),
                want,
                "{asked} {answered} {failed} {since:?}"
            );
        }
    }

    #[test]
    fn reaction_table() {
        use ErrorCode as E;
        let table = [
            (Failure::Transport, Reaction::RefreshAndRetry),
            (Failure::NoLeader, Reaction::RefreshAndRetry),
            (
                Failure::Kafka(E::NotLeaderOrFollower),
                Reaction::RefreshAndRetry,
            ),
            (
                Failure::Kafka(E::FencedLeaderEpoch),
                Reaction::RefreshAndRetry,
            ),
            // The broker asked with a newer epoch than its own: it lags, ask the others.
            (
                Failure::Kafka(E::UnknownLeaderEpoch),
                Reaction::RefreshAndRetry,
            ),
            (
                Failure::Kafka(E::LeaderNotAvailable),
                Reaction::RefreshAndRetry,
            ),
            (
                Failure::Kafka(E::UnknownTopicOrPartition),
                Reaction::RefreshAndRetry,
            ),
            // A new leader that has not learnt the HW yet; a slow ISR.
            (Failure::Kafka(E::OffsetNotAvailable), Reaction::Retry),
            (Failure::Kafka(E::RequestTimedOut), Reaction::Retry),
            (Failure::Kafka(E::NotEnoughReplicas), Reaction::Retry),
            (Failure::Kafka(E::OffsetOutOfRange), Reaction::Fatal),
            (Failure::Kafka(E::InvalidRequest), Reaction::Fatal),
            (Failure::Kafka(E::InvalidTopicException), Reaction::Fatal),
        ];
        for (failure, want) in table {
            assert_eq!(react(failure), want, "{failure:?}");
        }
    }
}
