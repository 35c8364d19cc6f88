//! [`Brokers`]: connections to the brokers and a cache of partition leaders, shared by the
//! [`Producer`](crate::producer::Producer) and the [`Consumer`](crate::consumer::Consumer).
//!
//! Leaders come from the broker `Metadata` RPC (Kafka: MetadataRequest), asked of any known
//! broker (bootstrap addresses first, then the brokers a reply listed). The cache is
//! refreshed when a caller [invalidates](Brokers::invalidate) it after
//! NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH or a transport error,
//! like Kafka's `Metadata.requestUpdate()`.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use keel_proto::ErrorCode;
use keel_proto::broker::{MetadataReply, MetadataRequest};
use keel_runtime::tls::Dialer;
use tonic::Code;
use tonic::transport::Channel;

use crate::leader_epochs::{
    Choice, LeaderEpochs, METADATA_GRACE, choose, enough_answers, merge_answers,
};
pub use crate::leader_epochs::{PartitionLeader, needs_metadata_refresh};
use crate::rpc_error::{Api, status_line};

/// Topic metadata: the leader of each partition, indexed by partition id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicMetadata {
    /// `partitions[p]` describes partition `p`.
    pub partitions: Vec<PartitionLeader>,
}

/// Why a broker could not be asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetadataError {
    /// No broker answered the Metadata RPC.
    #[error("cannot reach any broker: {errors}")]
    Unreachable {
        /// Addresses tried, comma separated.
        addresses: String,
        /// `addr: error` of each address tried, `; ` separated.
        errors: String,
    },
    /// None of the addresses serves the broker API (e.g. controller addresses given as
    /// brokers); retrying cannot help.
    #[error("no broker at {addresses}: {errors}")]
    NotABroker {
        /// Addresses tried, comma separated.
        addresses: String,
        /// What each address answered, `; ` separated.
        errors: String,
    },
    /// The brokers answered with an error for the topic (e.g. UNKNOWN_TOPIC_OR_PARTITION).
    #[error("topic {topic:?}: {code} ({})", .code.code())]
    Topic {
        /// The topic.
        topic: String,
        /// The Kafka error code.
        code: ErrorCode,
    },
}

#[derive(Debug, Default)]
struct State {
    /// Broker id -> `host:port` from the last Metadata replies.
    addresses: HashMap<i32, String>,
    topics: HashMap<String, CachedTopic>,
    channels: HashMap<String, Channel>,
    /// The highest leader epoch seen per partition (never forgotten, except when a topic id
    /// changes).
    epochs: LeaderEpochs,
}

/// A topic's cached metadata.
#[derive(Debug, Clone)]
struct CachedTopic {
    meta: TopicMetadata,
    /// Set by [`Brokers::invalidate`]: the next [`Brokers::topic`] asks the brokers again;
    /// the entry stays as the fallback for answers older than it ([`choose`]).
    stale: bool,
    /// When the brokers gave this answer: older than the max age, it is asked again (new
    /// partitions are found this way).
    fetched_at: std::time::Instant,
}

/// What one fan-out of [`Brokers::refresh`] heard.
#[derive(Default)]
struct Round {
    /// `(address, reply)` of each broker that answered.
    replies: Vec<(String, MetadataReply)>,
    /// `addr: error` of each broker that did not.
    errors: Vec<String>,
    /// How many answered UNIMPLEMENTED (not a broker).
    not_a_broker: usize,
}

/// One broker's answer for a topic in [`Brokers::refresh`].
struct Answer {
    metadata_offset: i64,
    topic_id: Vec<u8>,
    partitions: Vec<PartitionLeader>,
}

/// Broker connections and leader cache. Cheap to share by reference (or in an `Arc` between
/// a producer and a consumer, so an epoch learnt by one counts for the other); all methods
/// take `&self`.
#[derive(Debug)]
pub struct Brokers {
    bootstrap: Vec<String>,
    request_timeout: Duration,
    /// Cached topic metadata older than this is refreshed on next use (Kafka:
    /// `metadata.max.age.ms`).
    max_age: Duration,
    /// Opens the channels: plaintext, or TLS with a context.
    dialer: Dialer,
    state: Mutex<State>,
}

/// Default of [`Brokers::with_max_age`]: 5 minutes, Kafka's `metadata.max.age.ms` default.
pub const DEFAULT_METADATA_MAX_AGE: Duration = Duration::from_secs(300);

/// Most brokers one metadata refresh asks at once (bootstrap addresses first, then the
/// brokers earlier answers listed).
pub const MAX_METADATA_FANOUT: usize = 16;

impl Brokers {
    /// Connections to the cluster reachable through `bootstrap` (`host:port` list).
    /// `request_timeout` bounds each RPC, connect included.
    pub fn new(bootstrap: Vec<String>, request_timeout: Duration) -> Self {
        Brokers {
            bootstrap,
            request_timeout,
            max_age: DEFAULT_METADATA_MAX_AGE,
            dialer: Dialer::default(),
            state: Mutex::new(State::default()),
        }
    }

    /// The same, opening channels with `dialer` (TLS when it has a context; plaintext by
    /// default).
    pub fn with_dialer(mut self, dialer: Dialer) -> Self {
        self.dialer = dialer;
        self
    }

    /// How channels are opened.
    pub fn dialer(&self) -> &Dialer {
        &self.dialer
    }

    /// The same, refreshing a topic's cached metadata once it is older than `max_age` (Kafka:
    /// `metadata.max.age.ms`, default [`DEFAULT_METADATA_MAX_AGE`]): how a producer finds the
    /// partitions added to a topic (CreatePartitions) without an error to tell it.
    pub fn with_max_age(mut self, max_age: Duration) -> Self {
        self.max_age = max_age;
        self
    }

    /// A client for `addr`, connecting lazily (tonic reconnects a broken channel).
    pub fn client_for(&self, addr: &str) -> Result<crate::grpc::BrokerClient, String> {
        let cached = self.state.lock().unwrap().channels.get(addr).cloned();
        let channel = match cached {
            Some(c) => c,
            None => {
                let endpoint = Dialer::broker_endpoint(addr)
                    .map_err(|e| format!("{addr}: bad address: {e}"))?
                    .connect_timeout(self.request_timeout.min(Duration::from_secs(2)))
                    .timeout(self.request_timeout);
                let c = self.dialer.connect_lazy(&endpoint);
                self.state
                    .lock()
                    .unwrap()
                    .channels
                    .insert(addr.to_string(), c.clone());
                c
            }
        };
        Ok(crate::grpc::broker(&self.dialer, channel))
    }

    /// A client for broker `id`, if its address is known.
    pub fn client(&self, id: i32) -> Option<(String, crate::grpc::BrokerClient)> {
        let addr = self.state.lock().unwrap().addresses.get(&id).cloned()?;
        let c = self.client_for(&addr).ok()?;
        Some((addr, c))
    }

    /// Marks the cached metadata of `topic` stale so the next [`Brokers::topic`] asks again
    /// (Kafka `Metadata.requestUpdate()`).
    pub fn invalidate(&self, topic: &str) {
        if let Some(t) = self.state.lock().unwrap().topics.get_mut(topic) {
            t.stale = true;
        }
    }

    /// Drops the cached channel to `addr` (after a transport error).
    pub fn forget(&self, addr: &str) {
        self.state.lock().unwrap().channels.remove(addr);
    }

    /// The highest leader epoch seen for `topic`-`partition`, if any.
    pub fn known_epoch(&self, topic: &str, partition: i32) -> Option<i32> {
        self.state.lock().unwrap().epochs.known(topic, partition)
    }

    /// Records a leader epoch seen outside the metadata (a fetched batch, a ListOffsets or
    /// OffsetsForLeaderEpoch answer; Kafka `Metadata.updateLastSeenEpochIfNewer`). One newer
    /// than the cached metadata's marks it stale.
    pub fn observe_epoch(&self, topic: &str, partition: i32, epoch: i32) {
        let mut s = self.state.lock().unwrap();
        if s.epochs.observe(topic, partition, epoch)
            && let Some(t) = s.topics.get_mut(topic)
            && t.meta
                .partitions
                .get(partition as usize)
                .is_some_and(|p| p.leader_epoch < epoch)
        {
            t.stale = true;
        }
    }

    /// KIP-951: a NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH answer named the partition's
    /// leader (`current_leader`). When its epoch is newer than the cached one and the leader's
    /// address is known from an earlier Metadata answer, the cached entry takes it (the rest
    /// of the topic stays as cached) and the caller may retry at once; `false` otherwise
    /// (refresh as before). Only ever moves to a newer epoch, so a lagging broker naming an
    /// old leader changes nothing.
    pub fn redirect(&self, topic: &str, partition: i32, leader: PartitionLeader) -> bool {
        if leader.leader_id < 0 || leader.leader_epoch < 0 {
            return false;
        }
        let mut guard = self.state.lock().unwrap();
        let s = &mut *guard;
        if !s.addresses.contains_key(&leader.leader_id) {
            return false;
        }
        let Some(p) = s
            .topics
            .get_mut(topic)
            .and_then(|t| t.meta.partitions.get_mut(partition as usize))
        else {
            return false;
        };
        if leader.leader_epoch <= p.leader_epoch {
            return false;
        }
        *p = leader;
        s.epochs.observe(topic, partition, leader.leader_epoch);
        true
    }

    /// The cached metadata of `topic`, or a fresh one from the brokers.
    pub async fn topic(&self, topic: &str) -> Result<TopicMetadata, MetadataError> {
        if let Some(t) = self.state.lock().unwrap().topics.get(topic)
            && !t.stale
            && t.fetched_at.elapsed() < self.max_age
        {
            return Ok(t.meta.clone());
        }
        self.refresh(topic).await
    }

    /// The brokers to ask: bootstrap addresses, then those earlier answers listed, at most
    /// [`MAX_METADATA_FANOUT`].
    fn candidates(&self) -> Vec<String> {
        let mut candidates = self.bootstrap.clone();
        let s = self.state.lock().unwrap();
        let mut known: Vec<_> = s.addresses.iter().collect();
        known.sort();
        for (_, a) in known {
            if !candidates.contains(a) {
                candidates.push(a.clone());
            }
        }
        candidates.truncate(MAX_METADATA_FANOUT);
        candidates
    }

    /// Asks the brokers for `topic` and caches the result.
    ///
    /// Kafka asks one broker (`leastLoadedNode`). Keel asks every known broker at once (at
    /// most [`MAX_METADATA_FANOUT`]; on first contact also the brokers the first answers
    /// list) and waits for a majority ([`enough_answers`]), because
    /// one broker's answer may be stale: a broker resumed from a pause, or restarted from an
    /// old snapshot, still names itself leader at an old epoch (issue #18, item 7). Per
    /// partition the newest leader epoch wins ([`merge_answers`]), and an answer older than an
    /// epoch this client has already seen is ignored ([`choose`]; KIP-320, Kafka
    /// `Metadata.updateLatestMetadata`). A partition whose every answer is older than the
    /// known epoch is returned with `leader_id` -1 (callers retry).
    pub async fn refresh(&self, topic: &str) -> Result<TopicMetadata, MetadataError> {
        let candidates = self.candidates();
        let mut round = self.ask(&candidates, topic).await;
        self.note_brokers(&round.replies);
        // First contact through fewer brokers than the answers listed (one bootstrap
        // address): ask the others too, so one broker does not decide alone.
        let more: Vec<String> = self
            .candidates()
            .into_iter()
            .filter(|a| !candidates.contains(a))
            .collect();
        if !round.replies.is_empty() && !more.is_empty() {
            let extra = self.ask(&more, topic).await;
            round.replies.extend(extra.replies);
            round.errors.extend(extra.errors);
        }
        let Round {
            replies,
            mut errors,
            not_a_broker,
        } = round;
        if !replies.is_empty() {
            return self.take_answers(topic, replies, errors);
        }
        let addresses = candidates.join(",");
        if candidates.is_empty() {
            errors.push("no address given".into());
        }
        let errors = errors.join("; ");
        if not_a_broker > 0 && not_a_broker == candidates.len() {
            return Err(MetadataError::NotABroker { addresses, errors });
        }
        Err(MetadataError::Unreachable { addresses, errors })
    }

    /// Remembers the broker addresses `replies` list (the most recent image last, so its
    /// address of a broker wins).
    fn note_brokers(&self, replies: &[(String, MetadataReply)]) {
        let mut by_age: Vec<&MetadataReply> = replies.iter().map(|(_, r)| r).collect();
        by_age.sort_by_key(|r| r.metadata_offset);
        let mut s = self.state.lock().unwrap();
        for reply in by_age {
            for b in &reply.brokers {
                s.addresses
                    .insert(b.node_id, format!("{}:{}", b.host, b.port));
            }
        }
    }

    /// Asks `addrs` for `topic` at once and collects the answers until [`enough_answers`].
    async fn ask(&self, addrs: &[String], topic: &str) -> Round {
        let mut round = Round::default();
        let mut tasks = tokio::task::JoinSet::new();
        for addr in addrs {
            let mut c = match self.client_for(addr) {
                Ok(c) => c,
                Err(e) => {
                    round.errors.push(e);
                    continue;
                }
            };
            let (addr, topic) = (addr.clone(), topic.to_string());
            tasks.spawn(async move {
                let r = c
                    .metadata(MetadataRequest {
                        topics: vec![topic],
                    })
                    .await;
                (addr, r)
            });
        }
        let asked = tasks.len();
        let mut failed = 0;
        let mut majority_at: Option<tokio::time::Instant> = None;
        loop {
            let since = majority_at.map(|t| t.elapsed());
            if enough_answers(asked, round.replies.len(), failed, since) {
                break;
            }
            let next = match majority_at {
                Some(t) => {
                    match tokio::time::timeout_at(t + METADATA_GRACE, tasks.join_next()).await {
                        Ok(n) => n,
                        Err(_) => continue,
                    }
                }
                None => tasks.join_next().await,
            };
            let Some(joined) = next else { break };
            let Ok((addr, r)) = joined else {
                failed += 1;
                continue;
            };
            match r {
                Ok(r) => {
                    round.replies.push((addr, r.into_inner()));
                    if majority_at.is_none() && round.replies.len() > asked / 2 {
                        majority_at = Some(tokio::time::Instant::now());
                    }
                }
                Err(status) => {
                    self.forget(&addr);
                    let mut line = status_line(&addr, Api::Broker, &status);
                    if status.code() == Code::Unimplemented {
                        round.not_a_broker += 1;
                    } else if !self.dialer.is_tls()
                        && crate::rpc_error::connection_dropped(&line)
                        && crate::kafka_probe::speaks_kafka(&addr).await
                    {
                        // A broker's Kafka port given as a gRPC address: it drops every
                        // gRPC connection, which would be retried until the deadline.
                        round.not_a_broker += 1;
                        line = crate::rpc_error::kafka_listener_line(&addr, Api::Broker);
                    }
                    round.errors.push(line);
                    failed += 1;
                }
            }
        }
        tasks.abort_all();
        round
    }

    /// Caches what `replies` say about `topic` (see [`Brokers::refresh`]).
    fn take_answers(
        &self,
        topic: &str,
        replies: Vec<(String, MetadataReply)>,
        mut errors: Vec<String>,
    ) -> Result<TopicMetadata, MetadataError> {
        self.note_brokers(&replies);
        let mut s = self.state.lock().unwrap();
        let mut answers = Vec::new();
        let mut topic_error = None;
        for (addr, reply) in &replies {
            let Some(t) = reply.topics.iter().find(|t| t.name == topic) else {
                errors.push(format!("{addr}: no topic {topic:?} in the Metadata reply"));
                continue;
            };
            let code =
                ErrorCode::from_proto(t.error.as_ref()).unwrap_or(ErrorCode::UnknownServerError);
            if code != ErrorCode::None {
                topic_error.get_or_insert(code);
                continue;
            }
            let mut parts: Vec<_> = t.partitions.iter().collect();
            parts.sort_by_key(|p| p.partition_index);
            answers.push(Answer {
                metadata_offset: reply.metadata_offset,
                topic_id: t.topic_id.to_vec(),
                partitions: parts
                    .iter()
                    .map(|p| PartitionLeader {
                        leader_id: p.leader_id,
                        leader_epoch: p.leader_epoch,
                    })
                    .collect(),
            });
        }
        // A broker that knows the topic beats one that does not (yet); among those, the
        // topic id of the most recent image (a topic deleted and created again).
        let Some(newest) = answers.iter().max_by_key(|a| a.metadata_offset) else {
            return match topic_error {
                Some(code) => Err(MetadataError::Topic {
                    topic: topic.to_string(),
                    code,
                }),
                None => Err(MetadataError::Unreachable {
                    addresses: replies
                        .iter()
                        .map(|(a, _)| a.as_str())
                        .collect::<Vec<_>>()
                        .join(","),
                    errors: errors.join("; "),
                }),
            };
        };
        let topic_id = newest.topic_id.clone();
        let lists: Vec<Vec<PartitionLeader>> = answers
            .iter()
            .filter(|a| a.topic_id == topic_id)
            .map(|a| a.partitions.clone())
            .collect();
        s.epochs.note_topic_id(topic, &topic_id);
        let cached = s.topics.get(topic).map(|t| t.meta.clone());
        let mut partitions = Vec::new();
        for (i, fresh) in merge_answers(&lists).into_iter().enumerate() {
            let p = i as i32;
            let cached = cached.as_ref().and_then(|c| c.partitions.get(i).copied());
            let chosen = match choose(fresh, cached, s.epochs.known(topic, p)) {
                Choice::Fresh(l) | Choice::Cached(l) => l,
                // No leader, at the epoch the answers gave: below the known one, which
                // `leader_epochs::no_leader` tells from an offline partition.
                Choice::Stale { answered, .. } => PartitionLeader {
                    leader_id: -1,
                    leader_epoch: answered,
                },
            };
            if chosen.leader_id >= 0 {
                s.epochs.observe(topic, p, chosen.leader_epoch);
            }
            partitions.push(chosen);
        }
        let meta = TopicMetadata { partitions };
        let stale = meta.partitions.iter().any(|p| p.leader_id < 0);
        s.topics.insert(
            topic.to_string(),
            CachedTopic {
                meta: meta.clone(),
                stale,
                fetched_at: std::time::Instant::now(),
            },
        );
        Ok(meta)
    }
}

/// Wall clock now in ms since the Unix epoch (record timestamps).
pub fn now_ms() -> i64 {
    keel_runtime::clock::wall_clock_ms()
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_proto::broker::{MetadataPartition, MetadataTopic, NodeEndpoint};

    /// A Metadata reply for topic `t` (id `id`) at image offset `offset`, partitions as
    /// (leader, epoch).
    fn reply(offset: i64, id: u8, parts: &[(i32, i32)]) -> MetadataReply {
        MetadataReply {
            brokers: (1..=3)
                .map(|n| NodeEndpoint {
                    node_id: n,
                    host: "127.0.0.1".into(),
                    port: 9000 + n as u32,
                    rack: String::new(),
                })
                .collect(),
            topics: vec![MetadataTopic {
                name: "t".into(),
                topic_id: vec![id; 16].into(),
                partitions: parts
                    .iter()
                    .enumerate()
                    .map(|(i, (leader, epoch))| MetadataPartition {
                        partition_index: i as i32,
                        leader_id: *leader,
                        leader_epoch: *epoch,
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }],
            metadata_offset: offset,
            ..Default::default()
        }
    }

    fn leaders(m: &TopicMetadata) -> Vec<(i32, i32)> {
        m.partitions
            .iter()
            .map(|p| (p.leader_id, p.leader_epoch))
            .collect()
    }

    fn take(b: &Brokers, replies: &[(&str, MetadataReply)]) -> Vec<(i32, i32)> {
        let replies = replies
            .iter()
            .map(|(a, r)| (a.to_string(), r.clone()))
            .collect();
        leaders(&b.take_answers("t", replies, Vec::new()).unwrap())
    }

    /// Item 7 of issue #18 without processes: a resumed ex-leader (broker 1) describes the
    /// partition as it was; the client never steps back to it.
    #[test]
    fn metadata_never_steps_back_to_an_older_leader_epoch() {
        let b = Brokers::new(vec!["a".into()], Duration::from_secs(1));
        let resumed = reply(100, 1, &[(1, 4), (1, 2)]);
        let caught_up = reply(180, 1, &[(2, 5), (1, 2)]);
        // Asked together: per partition the newest epoch.
        assert_eq!(
            take(&b, &[("b1", resumed.clone()), ("b2", caught_up.clone())]),
            vec![(2, 5), (1, 2)]
        );
        assert_eq!(b.known_epoch("t", 0), Some(5));
        // Later only the resumed broker answers: its epoch 4 is ignored, the cached leader
        // at epoch 5 kept (Kafka Metadata.updateLatestMetadata).
        assert_eq!(take(&b, &[("b1", resumed.clone())]), vec![(2, 5), (1, 2)]);
        // Epoch 6 seen in a fetched batch: the cache is stale, and answers at 5 or 4 name
        // no leader until a broker has caught up.
        b.observe_epoch("t", 0, 6);
        assert!(b.state.lock().unwrap().topics["t"].stale);
        assert_eq!(
            take(&b, &[("b1", resumed.clone()), ("b2", caught_up.clone())]),
            vec![(-1, 5), (1, 2)]
        );
        assert!(b.state.lock().unwrap().topics["t"].stale, "asks again");
        let p0 = b.state.lock().unwrap().topics["t"].meta.partitions[0];
        assert_eq!(
            crate::leader_epochs::no_leader("t", 0, p0, b.known_epoch("t", 0)),
            "no leader for t-0: no broker has caught up with leader epoch 6 yet \
             (the newest metadata is at epoch 5)"
        );
        assert_eq!(
            take(&b, &[("b3", reply(200, 1, &[(3, 6), (1, 2)]))]),
            vec![(3, 6), (1, 2)]
        );
        assert!(!b.state.lock().unwrap().topics["t"].stale);
        // The topic deleted and created again (new id, newest image): epochs start over.
        assert_eq!(
            take(&b, &[("b1", resumed), ("b2", reply(300, 9, &[(1, 0)]))]),
            vec![(1, 0)]
        );
        assert_eq!(b.known_epoch("t", 0), Some(0));
    }

    /// KIP-951: a refusal naming the new leader moves the cached entry forward only.
    #[test]
    fn a_named_leader_is_taken_only_when_newer_and_known() {
        let b = Brokers::new(vec!["a".into()], Duration::from_secs(1));
        assert_eq!(
            take(&b, &[("b1", reply(10, 1, &[(1, 4), (1, 2)]))]),
            [(1, 4), (1, 2)]
        );
        let l = |leader_id, leader_epoch| PartitionLeader {
            leader_id,
            leader_epoch,
        };
        assert!(!b.redirect("t", 0, l(2, 4)), "same epoch");
        assert!(!b.redirect("t", 0, l(2, 3)), "older epoch");
        assert!(
            !b.redirect("t", 0, l(7, 5)),
            "broker 7's address is unknown"
        );
        assert!(!b.redirect("t", 0, l(-1, 5)), "no leader");
        assert!(!b.redirect("t", 5, l(2, 5)), "no such partition");
        assert!(!b.redirect("u", 0, l(2, 5)), "topic not cached");
        assert!(b.redirect("t", 0, l(2, 5)));
        let cached = b.state.lock().unwrap().topics["t"].meta.clone();
        assert_eq!(leaders(&cached), [(2, 5), (1, 2)]);
        assert_eq!(b.known_epoch("t", 0), Some(5));
    }

    #[test]
    fn a_broker_that_does_not_know_the_topic_yet_is_outvoted() {
        let b = Brokers::new(vec!["a".into()], Duration::from_secs(1));
        let mut unknown = reply(10, 0, &[]);
        unknown.topics[0].topic_id = Default::default();
        unknown.topics[0].error =
            Some(ErrorCode::UnknownTopicOrPartition.to_proto("unknown topic".to_string()));
        assert_eq!(
            take(
                &b,
                &[("b1", unknown.clone()), ("b2", reply(20, 1, &[(2, 0)]))]
            ),
            vec![(2, 0)]
        );
        // Alone, its error is the answer.
        let err = b
            .take_answers("t", vec![("b1".into(), unknown)], Vec::new())
            .unwrap_err();
        assert_eq!(
            err,
            MetadataError::Topic {
                topic: "t".into(),
                code: ErrorCode::UnknownTopicOrPartition
            }
        );
    }
}
