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
use keel_proto::broker::MetadataRequest;
use keel_proto::broker::broker_service_client::BrokerServiceClient;
use tonic::Code;
use tonic::transport::{Channel, Endpoint};

use crate::rpc_error::{Api, status_line};

/// Largest gRPC message the data clients send or accept (fetch replies can be large).
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

/// One partition as the metadata names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionLeader {
    /// Leader broker id; -1 = none (offline).
    pub leader_id: i32,
    /// Leader epoch the metadata reported.
    pub leader_epoch: i32,
}

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
    topics: HashMap<String, TopicMetadata>,
    channels: HashMap<String, Channel>,
}

/// Broker connections and leader cache. Cheap to share by reference; all methods take
/// `&self`.
#[derive(Debug)]
pub struct Brokers {
    bootstrap: Vec<String>,
    request_timeout: Duration,
    state: Mutex<State>,
}

impl Brokers {
    /// Connections to the cluster reachable through `bootstrap` (`host:port` list).
    /// `request_timeout` bounds each RPC, connect included.
    pub fn new(bootstrap: Vec<String>, request_timeout: Duration) -> Self {
        Brokers {
            bootstrap,
            request_timeout,
            state: Mutex::new(State::default()),
        }
    }

    /// A client for `addr`, connecting lazily (tonic reconnects a broken channel).
    pub fn client_for(&self, addr: &str) -> Result<BrokerServiceClient<Channel>, String> {
        let cached = self.state.lock().unwrap().channels.get(addr).cloned();
        let channel = match cached {
            Some(c) => c,
            None => {
                let c = Endpoint::from_shared(format!("http://{addr}"))
                    .map_err(|e| format!("{addr}: bad address: {e}"))?
                    .connect_timeout(self.request_timeout.min(Duration::from_secs(2)))
                    .timeout(self.request_timeout)
                    .tcp_nodelay(true)
                    .connect_lazy();
                self.state
                    .lock()
                    .unwrap()
                    .channels
                    .insert(addr.to_string(), c.clone());
                c
            }
        };
        Ok(BrokerServiceClient::new(channel)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES))
    }

    /// A client for broker `id`, if its address is known.
    pub fn client(&self, id: i32) -> Option<(String, BrokerServiceClient<Channel>)> {
        let addr = self.state.lock().unwrap().addresses.get(&id).cloned()?;
        let c = self.client_for(&addr).ok()?;
        Some((addr, c))
    }

    /// Drops the cached metadata of `topic` so the next [`Brokers::topic`] asks again.
    pub fn invalidate(&self, topic: &str) {
        self.state.lock().unwrap().topics.remove(topic);
    }

    /// Drops the cached channel to `addr` (after a transport error).
    pub fn forget(&self, addr: &str) {
        self.state.lock().unwrap().channels.remove(addr);
    }

    /// The cached metadata of `topic`, or a fresh one from the brokers.
    pub async fn topic(&self, topic: &str) -> Result<TopicMetadata, MetadataError> {
        if let Some(t) = self.state.lock().unwrap().topics.get(topic) {
            return Ok(t.clone());
        }
        self.refresh(topic).await
    }

    /// Asks the brokers for `topic` (one answer is enough) and caches the result.
    pub async fn refresh(&self, topic: &str) -> Result<TopicMetadata, MetadataError> {
        let mut candidates = self.bootstrap.clone();
        {
            let s = self.state.lock().unwrap();
            let mut known: Vec<_> = s.addresses.iter().collect();
            known.sort();
            for (_, a) in known {
                if !candidates.contains(a) {
                    candidates.push(a.clone());
                }
            }
        }
        let mut errors: Vec<String> = Vec::new();
        let mut not_a_broker = 0;
        for addr in &candidates {
            let mut c = match self.client_for(addr) {
                Ok(c) => c,
                Err(e) => {
                    errors.push(e);
                    continue;
                }
            };
            let reply = match c
                .metadata(MetadataRequest {
                    topics: vec![topic.to_string()],
                })
                .await
            {
                Ok(r) => r.into_inner(),
                Err(status) => {
                    self.forget(addr);
                    if status.code() == Code::Unimplemented {
                        not_a_broker += 1;
                    }
                    errors.push(status_line(addr, Api::Broker, &status));
                    continue;
                }
            };
            let mut s = self.state.lock().unwrap();
            for b in &reply.brokers {
                s.addresses
                    .insert(b.node_id, format!("{}:{}", b.host, b.port));
            }
            let Some(t) = reply.topics.iter().find(|t| t.name == topic) else {
                errors.push(format!("{addr}: no topic {topic:?} in the Metadata reply"));
                continue;
            };
            let code =
                ErrorCode::from_proto(t.error.as_ref()).unwrap_or(ErrorCode::UnknownServerError);
            if code != ErrorCode::None {
                return Err(MetadataError::Topic {
                    topic: topic.to_string(),
                    code,
                });
            }
            let mut parts: Vec<_> = t.partitions.iter().collect();
            parts.sort_by_key(|p| p.partition_index);
            let meta = TopicMetadata {
                partitions: parts
                    .iter()
                    .map(|p| PartitionLeader {
                        leader_id: p.leader_id,
                        leader_epoch: p.leader_epoch,
                    })
                    .collect(),
            };
            s.topics.insert(topic.to_string(), meta.clone());
            return Ok(meta);
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

/// Wall clock now in ms since the Unix epoch (record timestamps).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
