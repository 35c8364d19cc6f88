//! [`Admin`]: the operator client of the controller API (`proto/controller.proto`).
//!
//! Writes are served by the active controller only; any other controller answers
//! NOT_CONTROLLER with a hint naming the active one. `Admin` starts from a list of bootstrap
//! controller addresses, follows those hints, and retries a bounded number of times with
//! exponential backoff while an election is in progress or a controller is unreachable.
//! Kafka-level refusals come back as [`AdminError::Kafka`] carrying the [`ErrorCode`].

mod error;
mod reply;

use std::collections::HashMap;
use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use keel_metadata_log::{MetadataDelta, MetadataImage, Provenance};
use keel_proto::ErrorCode;
use keel_proto::controller::controller_service_client::ControllerServiceClient;
use keel_proto::controller::fetch_metadata_item::Item;
use keel_proto::controller::*;
use keel_proto::metadata::ConfigResourceType;
use tonic::transport::{Channel, Endpoint};

pub use error::{AdminError, Result};
pub use reply::ControllerReply;

/// Largest reply the admin client accepts (metadata log pages and image streams).
const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

/// How [`Admin`] reaches the controllers.
#[derive(Debug, Clone)]
pub struct AdminConfig {
    /// `host:port` of one or more controllers; any of them will do.
    pub bootstrap_controllers: Vec<String>,
    /// Deadline of one RPC (connect + request).
    pub request_timeout: Duration,
    /// Attempts per operation, redirects included.
    pub max_attempts: u32,
    /// First backoff after a round of failures; doubled each time up to `backoff_max`.
    pub backoff_initial: Duration,
    /// Longest backoff.
    pub backoff_max: Duration,
}

impl AdminConfig {
    /// Defaults for `addresses`: 10 s per request, 10 attempts, backoff 100 ms .. 1 s.
    pub fn new(addresses: Vec<String>) -> Self {
        AdminConfig {
            bootstrap_controllers: addresses,
            request_timeout: Duration::from_secs(10),
            max_attempts: 10,
            backoff_initial: Duration::from_millis(100),
            backoff_max: Duration::from_secs(1),
        }
    }
}

/// A topic to create.
#[derive(Debug, Clone, Default)]
pub struct NewTopic {
    /// Topic name.
    pub name: String,
    /// Number of partitions; `None` = the cluster default.
    pub partitions: Option<i32>,
    /// Replication factor; `None` = the cluster default.
    pub replication_factor: Option<i32>,
    /// Topic config overrides (Kafka names).
    pub configs: Vec<(String, String)>,
}

/// The resource a config change applies to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigTarget {
    /// A topic, by name.
    Topic(String),
    /// One broker, by id.
    Broker(i32),
    /// Cluster-wide defaults.
    Cluster,
}

impl ConfigTarget {
    fn wire(&self) -> (ConfigResourceType, String) {
        match self {
            ConfigTarget::Topic(t) => (ConfigResourceType::Topic, t.clone()),
            ConfigTarget::Broker(b) => (ConfigResourceType::Broker, b.to_string()),
            ConfigTarget::Cluster => (ConfigResourceType::Cluster, String::new()),
        }
    }

    fn describe(&self) -> String {
        match self {
            ConfigTarget::Topic(t) => format!("topic {t:?}"),
            ConfigTarget::Broker(b) => format!("broker {b}"),
            ConfigTarget::Cluster => "cluster".to_string(),
        }
    }
}

/// Operator client of the controller quorum. Cheap to share by reference; remembers the
/// active controller between calls.
#[derive(Debug)]
pub struct Admin {
    config: AdminConfig,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Address of the active controller, as last hinted.
    active: Option<String>,
    /// Next bootstrap address to try when no active controller is known.
    next_bootstrap: usize,
    channels: HashMap<String, Channel>,
}

/// Why one attempt failed.
enum AttemptError {
    /// Could not connect, or the RPC failed at the transport level.
    Transport(String),
    /// A controller answered NOT_CONTROLLER without a usable hint.
    NoLeader(String),
}

impl Admin {
    /// An admin client for `config`. Connects lazily on first use.
    pub fn new(config: AdminConfig) -> Result<Self> {
        if config.bootstrap_controllers.is_empty() {
            return Err(AdminError::InvalidArgument(
                "no bootstrap controller addresses given".into(),
            ));
        }
        if config.max_attempts == 0 {
            return Err(AdminError::InvalidArgument(
                "max_attempts must be at least 1".into(),
            ));
        }
        Ok(Admin {
            config,
            state: Mutex::new(State::default()),
        })
    }

    /// The active controller's address, once a reply has named it.
    pub fn active_controller(&self) -> Option<String> {
        self.state.lock().unwrap().active.clone()
    }

    fn pick_address(&self) -> String {
        let mut s = self.state.lock().unwrap();
        if let Some(a) = &s.active {
            return a.clone();
        }
        let list = &self.config.bootstrap_controllers;
        let a = list[s.next_bootstrap % list.len()].clone();
        s.next_bootstrap += 1;
        a
    }

    fn set_active(&self, addr: Option<String>) {
        self.state.lock().unwrap().active = addr;
    }

    fn forget(&self, addr: &str) {
        let mut s = self.state.lock().unwrap();
        s.channels.remove(addr);
        if s.active.as_deref() == Some(addr) {
            s.active = None;
        }
    }

    async fn client(&self, addr: &str) -> Result<ControllerServiceClient<Channel>, String> {
        let cached = self.state.lock().unwrap().channels.get(addr).cloned();
        let channel = match cached {
            Some(c) => c,
            None => {
                let endpoint = Endpoint::from_shared(format!("http://{addr}"))
                    .map_err(|e| format!("{addr}: bad address: {e}"))?
                    .connect_timeout(self.config.request_timeout.min(Duration::from_secs(2)))
                    .timeout(self.config.request_timeout);
                let c = endpoint
                    .connect()
                    .await
                    .map_err(|e| format!("{addr}: {}", error_chain(&e)))?;
                self.state
                    .lock()
                    .unwrap()
                    .channels
                    .insert(addr.to_string(), c.clone());
                c
            }
        };
        Ok(ControllerServiceClient::new(channel)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES))
    }

    /// Runs `rpc` against the active controller (or any controller for reads when
    /// `need_active` is false), following NOT_CONTROLLER hints with bounded retries.
    async fn call<R, F, Fut>(&self, need_active: bool, mut rpc: F) -> Result<R>
    where
        R: ControllerReply,
        F: FnMut(ControllerServiceClient<Channel>) -> Fut,
        Fut: Future<Output = std::result::Result<tonic::Response<R>, tonic::Status>>,
    {
        let mut backoff = self.config.backoff_initial;
        let mut last: Option<AttemptError> = None;
        let mut transport_failures_in_row = 0usize;
        let mut only_transport = true;
        for _ in 0..self.config.max_attempts {
            let addr = self.pick_address();
            let outcome = match self.client(&addr).await {
                Err(e) => Err(AttemptError::Transport(e)),
                Ok(client) => {
                    match tokio::time::timeout(self.config.request_timeout, rpc(client)).await {
                        Err(_) => Err(AttemptError::Transport(format!(
                            "{addr}: no answer within {:?}",
                            self.config.request_timeout
                        ))),
                        Ok(Err(status)) => Err(AttemptError::Transport(format!(
                            "{addr}: {}",
                            status.message()
                        ))),
                        Ok(Ok(resp)) => Ok(resp.into_inner()),
                    }
                }
            };
            match outcome {
                Ok(reply) => {
                    transport_failures_in_row = 0;
                    let hinted = reply
                        .leader()
                        .filter(|h| h.leader_id >= 0 && !h.leader_address.is_empty())
                        .map(|h| h.leader_address.clone());
                    let not_controller =
                        ErrorCode::from_proto(reply.error()) == Ok(ErrorCode::NotController);
                    let elsewhere = hinted.as_deref().is_some_and(|h| h != addr);
                    if not_controller || (need_active && elsewhere) {
                        if elsewhere {
                            // Redirect right away: the hint names the active controller.
                            self.set_active(hinted);
                            continue;
                        }
                        self.set_active(None);
                        only_transport = false;
                        last = Some(AttemptError::NoLeader(format!(
                            "{addr} answered NOT_CONTROLLER{}",
                            reply
                                .error()
                                .filter(|e| !e.message.is_empty())
                                .map(|e| format!(": {}", e.message))
                                .unwrap_or_default()
                        )));
                    } else {
                        if hinted.is_some() {
                            self.set_active(hinted);
                        }
                        return Ok(reply);
                    }
                }
                Err(e) => {
                    self.forget(&addr);
                    transport_failures_in_row += 1;
                    last = Some(e);
                    // Try every bootstrap address once before backing off.
                    if !transport_failures_in_row
                        .is_multiple_of(self.config.bootstrap_controllers.len())
                    {
                        continue;
                    }
                }
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(self.config.backoff_max);
        }
        let attempts = self.config.max_attempts;
        Err(match last {
            Some(AttemptError::Transport(e)) if only_transport => AdminError::Unreachable {
                addresses: self.config.bootstrap_controllers.join(","),
                last_error: e,
            },
            Some(AttemptError::Transport(e)) | Some(AttemptError::NoLeader(e)) => {
                AdminError::NoActiveController {
                    attempts,
                    last_error: e,
                }
            }
            None => AdminError::NoActiveController {
                attempts,
                last_error: "redirected on every attempt".into(),
            },
        })
    }

    /// Creates one topic; returns the controller's result (id, effective partitions,
    /// replication factor and configs).
    pub async fn create_topic(&self, topic: NewTopic) -> Result<CreatableTopicResult> {
        let req = CreateTopicsRequest {
            topics: vec![CreatableTopic {
                name: topic.name.clone(),
                num_partitions: topic.partitions.unwrap_or(-1),
                replication_factor: topic.replication_factor.unwrap_or(-1),
                assignments: vec![],
                configs: topic
                    .configs
                    .iter()
                    .map(|(k, v)| ConfigEntry {
                        name: k.clone(),
                        value: Some(v.clone()),
                    })
                    .collect(),
            }],
            validate_only: false,
        };
        let reply = self
            .call(true, |mut c| {
                let req = req.clone();
                async move { c.create_topics(req).await }
            })
            .await?;
        let ctx = || format!("create topic {:?}", topic.name);
        AdminError::check(reply.error.as_ref(), ctx)?;
        let result = reply
            .topics
            .into_iter()
            .find(|t| t.name == topic.name)
            .ok_or_else(|| AdminError::Protocol(format!("{}: no result for the topic", ctx())))?;
        AdminError::check(result.error.as_ref(), ctx)?;
        Ok(result)
    }

    /// Deletes one topic by name.
    pub async fn delete_topic(&self, name: &str) -> Result<DeletableTopicResult> {
        let req = DeleteTopicsRequest {
            topics: vec![DeleteTopicState {
                name: name.to_string(),
                topic_id: Default::default(),
            }],
        };
        let reply = self
            .call(true, |mut c| {
                let req = req.clone();
                async move { c.delete_topics(req).await }
            })
            .await?;
        let ctx = || format!("delete topic {name:?}");
        AdminError::check(reply.error.as_ref(), ctx)?;
        let result = reply
            .topics
            .into_iter()
            .next()
            .ok_or_else(|| AdminError::Protocol(format!("{}: no result", ctx())))?;
        AdminError::check(result.error.as_ref(), ctx)?;
        Ok(result)
    }

    /// Sets and deletes config keys of one resource (IncrementalAlterConfigs semantics).
    pub async fn alter_configs(
        &self,
        target: &ConfigTarget,
        set: &[(String, String)],
        delete: &[String],
        validate_only: bool,
    ) -> Result<()> {
        let (resource_type, resource_name) = target.wire();
        let configs = set
            .iter()
            .map(|(k, v)| AlterableConfig {
                name: k.clone(),
                op: AlterConfigOp::Set as i32,
                value: Some(v.clone()),
            })
            .chain(delete.iter().map(|k| AlterableConfig {
                name: k.clone(),
                op: AlterConfigOp::Delete as i32,
                value: None,
            }))
            .collect();
        let req = AlterConfigsRequest {
            resources: vec![AlterConfigsResource {
                resource_type: resource_type as i32,
                resource_name,
                configs,
            }],
            validate_only,
        };
        let reply = self
            .call(true, |mut c| {
                let req = req.clone();
                async move { c.alter_configs(req).await }
            })
            .await?;
        let ctx = || format!("alter configs of {}", target.describe());
        AdminError::check(reply.error.as_ref(), ctx)?;
        for r in &reply.results {
            AdminError::check(r.error.as_ref(), ctx)?;
        }
        Ok(())
    }

    /// Effective configs of resources (all keys when `keys` is empty). Fails on the first
    /// resource the controller refused (e.g. an unknown topic).
    pub async fn describe_configs(
        &self,
        targets: &[ConfigTarget],
        keys: &[String],
    ) -> Result<Vec<DescribeConfigsResult>> {
        let req = DescribeConfigsRequest {
            resources: targets
                .iter()
                .map(|t| {
                    let (ty, name) = t.wire();
                    DescribeConfigsResource {
                        resource_type: ty as i32,
                        resource_name: name,
                        configuration_keys: keys.to_vec(),
                    }
                })
                .collect(),
            include_synonyms: false,
            include_documentation: false,
        };
        let reply = self
            .call(false, |mut c| {
                let req = req.clone();
                async move { c.describe_configs(req).await }
            })
            .await?;
        AdminError::check(reply.error.as_ref(), || "describe configs".into())?;
        for (r, t) in reply.results.iter().zip(targets) {
            AdminError::check(r.error.as_ref(), || {
                format!("describe configs of {}", t.describe())
            })?;
        }
        Ok(reply.results)
    }

    /// Operator ISR change of one partition (AlterPartition with broker id -1). With
    /// `expected_partition_epoch` the change is a compare-and-set on the partition epoch
    /// (INVALID_UPDATE_VERSION when it differs).
    pub async fn alter_isr(
        &self,
        topic: &str,
        partition: i32,
        isr: &[i32],
        expected_partition_epoch: Option<i32>,
    ) -> Result<AlterPartitionPartitionResult> {
        let req = AlterPartitionRequest {
            broker_id: -1,
            broker_epoch: -1,
            topics: vec![AlterPartitionTopic {
                topic_id: Default::default(),
                topic_name: topic.to_string(),
                partitions: vec![AlterPartitionPartition {
                    partition_index: partition,
                    leader_epoch: -1,
                    new_isr_with_epochs: isr
                        .iter()
                        .map(|b| BrokerState {
                            broker_id: *b,
                            broker_epoch: -1,
                        })
                        .collect(),
                    leader_recovery_state: 0,
                    partition_epoch: -1,
                    expected_partition_epoch,
                }],
            }],
        };
        let reply = self
            .call(true, |mut c| {
                let req = req.clone();
                async move { c.alter_partition(req).await }
            })
            .await?;
        let ctx = || format!("alter ISR of {topic}-{partition}");
        AdminError::check(reply.error.as_ref(), ctx)?;
        let result = reply
            .topics
            .into_iter()
            .flat_map(|t| t.partitions)
            .find(|p| p.partition_index == partition)
            .ok_or_else(|| AdminError::Protocol(format!("{}: no result", ctx())))?;
        match ErrorCode::from_proto(result.error.as_ref()) {
            // The change committed but also moved leadership: still a success for operators.
            Ok(ErrorCode::NewLeaderElected) => Ok(result),
            _ => {
                AdminError::check(result.error.as_ref(), ctx)?;
                Ok(result)
            }
        }
    }

    /// Leader election for a topic's partitions (all of them when `partitions` is empty).
    /// Returns each partition's result; per-partition errors (ELECTION_NOT_NEEDED, ...) are
    /// left in the results for the caller to show.
    pub async fn elect_leaders(
        &self,
        election_type: ElectionType,
        topic: &str,
        partitions: &[i32],
    ) -> Result<Vec<ElectPartitionResult>> {
        let req = ElectLeadersRequest {
            election_type: election_type as i32,
            all_partitions: false,
            topic_partitions: vec![ElectTopicPartitions {
                topic: topic.to_string(),
                partitions: partitions.to_vec(),
            }],
        };
        let reply = self
            .call(true, |mut c| {
                let req = req.clone();
                async move { c.elect_leaders(req).await }
            })
            .await?;
        AdminError::check(reply.error.as_ref(), || {
            format!("elect leaders of {topic:?}")
        })?;
        Ok(reply
            .results
            .into_iter()
            .filter(|r| r.topic == topic)
            .flat_map(|r| r.partitions)
            .collect())
    }

    /// Brokers and their state, from the active controller (heartbeat-derived fields such as
    /// the metadata lag are known only there).
    pub async fn describe_cluster(&self) -> Result<DescribeClusterReply> {
        let reply = self
            .call(true, |mut c| async move {
                c.describe_cluster(DescribeClusterRequest {
                    include_fenced_brokers: true,
                })
                .await
            })
            .await?;
        AdminError::check(reply.error.as_ref(), || "describe cluster".into())?;
        Ok(reply)
    }

    /// Raft quorum state and replication progress, from the active controller.
    pub async fn describe_quorum(&self) -> Result<DescribeQuorumReply> {
        let reply = self
            .call(true, |mut c| async move {
                c.describe_quorum(DescribeQuorumRequest {}).await
            })
            .await?;
        AdminError::check(reply.error.as_ref(), || "describe quorum".into())?;
        Ok(reply)
    }

    /// One page of decoded committed records (any controller may answer).
    pub async fn read_metadata_log(
        &self,
        req: ReadMetadataLogRequest,
    ) -> Result<ReadMetadataLogReply> {
        let reply = self
            .call(false, |mut c| {
                let req = req.clone();
                async move { c.read_metadata_log(req).await }
            })
            .await?;
        AdminError::check(reply.error.as_ref(), || "read metadata log".into())?;
        Ok(reply)
    }

    /// The newest metadata snapshot of a controller, as `(last included offset, records)`, or
    /// `None` when the log was never compacted (it still starts at its first entry).
    pub async fn latest_snapshot(
        &self,
    ) -> Result<Option<(i64, Vec<keel_proto::metadata::MetadataRecord>)>> {
        let mut last_error = String::new();
        for _ in 0..self.config.max_attempts {
            let addr = self.pick_address();
            let mut client = match self.client(&addr).await {
                Ok(c) => c,
                Err(e) => {
                    self.forget(&addr);
                    last_error = e;
                    continue;
                }
            };
            let read = async {
                let mut stream = client
                    .fetch_metadata(FetchMetadataRequest {
                        from_offset: 0,
                        broker_id: None,
                        max_bytes_per_item: 0,
                    })
                    .await?
                    .into_inner();
                let mut snapshot: Option<(i64, Vec<_>)> = None;
                while let Some(item) = stream.message().await? {
                    match item.item {
                        Some(Item::SnapshotHeader(h)) => {
                            snapshot = Some((h.last_included_offset, Vec::new()));
                        }
                        Some(Item::SnapshotChunk(c)) => {
                            if let Some((_, records)) = snapshot.as_mut() {
                                records.extend(c.records);
                            }
                            if c.last {
                                return Ok(snapshot);
                            }
                        }
                        // Batches before any snapshot header: there is no snapshot.
                        Some(Item::Batch(_)) => return Ok(None),
                        None => {}
                    }
                }
                Ok::<_, tonic::Status>(None)
            };
            match tokio::time::timeout(self.config.request_timeout, read).await {
                Ok(Ok(snapshot)) => return Ok(snapshot),
                Ok(Err(status)) => {
                    self.forget(&addr);
                    last_error = format!("{addr}: {}", status.message());
                }
                Err(_) => {
                    self.forget(&addr);
                    last_error = format!(
                        "{addr}: snapshot not complete within {:?}",
                        self.config.request_timeout
                    );
                }
            }
        }
        Err(AdminError::Unreachable {
            addresses: self.config.bootstrap_controllers.join(","),
            last_error,
        })
    }

    /// The current metadata image: the newest snapshot plus every committed batch up to the
    /// serving controller's commit index, replayed locally (like a broker's metadata tailer).
    pub async fn metadata_image(&self) -> Result<MetadataImage> {
        let mut last_error = String::new();
        for _ in 0..self.config.max_attempts {
            let addr = self.pick_address();
            let mut client = match self.client(&addr).await {
                Ok(c) => c,
                Err(e) => {
                    self.forget(&addr);
                    last_error = e;
                    continue;
                }
            };
            let fetched =
                tokio::time::timeout(self.config.request_timeout, fetch_image(&mut client, &addr))
                    .await;
            match fetched {
                Ok(Ok(image)) => return Ok(image),
                Ok(Err(FetchError::Transport(e))) => {
                    self.forget(&addr);
                    last_error = e;
                }
                Ok(Err(FetchError::Fatal(e))) => return Err(e),
                Err(_) => {
                    self.forget(&addr);
                    last_error = format!(
                        "{addr}: image not complete within {:?}",
                        self.config.request_timeout
                    );
                }
            }
        }
        Err(AdminError::Unreachable {
            addresses: self.config.bootstrap_controllers.join(","),
            last_error,
        })
    }
}

/// `error: cause: cause...` (tonic's transport errors say little at the top level).
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !s.contains(&text) {
            s.push_str(": ");
            s.push_str(&text);
        }
        source = cause.source();
    }
    s
}

enum FetchError {
    Transport(String),
    Fatal(AdminError),
}

async fn fetch_image(
    client: &mut ControllerServiceClient<Channel>,
    addr: &str,
) -> std::result::Result<MetadataImage, FetchError> {
    let transport = |s: tonic::Status| FetchError::Transport(format!("{addr}: {}", s.message()));
    let replay_failed =
        |e: keel_metadata_log::ReplayError| FetchError::Fatal(AdminError::Protocol(e.to_string()));
    let mut stream = client
        .fetch_metadata(FetchMetadataRequest {
            from_offset: 0,
            broker_id: None,
            max_bytes_per_item: 0,
        })
        .await
        .map_err(transport)?
        .into_inner();
    let mut delta = MetadataDelta::new(MetadataImage::empty());
    // The commit index when the stream started: the image is complete once it is applied.
    let mut target: Option<i64> = None;
    let mut applied: i64 = 0;
    // Offset of a snapshot whose chunks are still arriving.
    let mut snapshot_at: Option<i64> = None;
    loop {
        if let Some(t) = target
            && snapshot_at.is_none()
            && applied >= t
        {
            return Ok(delta.apply());
        }
        let Some(item) = stream.message().await.map_err(transport)? else {
            return Err(FetchError::Transport(format!(
                "{addr}: metadata stream ended at offset {applied}"
            )));
        };
        target.get_or_insert(item.commit_index);
        match item.item {
            Some(Item::SnapshotHeader(h)) => {
                delta = MetadataDelta::new(MetadataImage::empty());
                delta.set_provenance(Provenance {
                    offset: h.last_included_offset.max(0) as u64,
                    term: h.last_included_term.max(0) as u64,
                });
                snapshot_at = Some(h.last_included_offset);
            }
            Some(Item::SnapshotChunk(c)) => {
                for r in &c.records {
                    delta.replay(r).map_err(replay_failed)?;
                }
                if c.last
                    && let Some(at) = snapshot_at.take()
                {
                    applied = at;
                }
            }
            Some(Item::Batch(b)) => {
                delta.set_provenance(Provenance {
                    offset: b.offset.max(0) as u64,
                    term: b.term.max(0) as u64,
                });
                if let Some(batch) = &b.batch {
                    for r in &batch.records {
                        delta.replay(r).map_err(replay_failed)?;
                    }
                }
                applied = b.offset;
            }
            None => {}
        }
    }
}
