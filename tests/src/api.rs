//! What a test does against a running cluster, through its addresses only: the same calls
//! for an in-process cluster and for real processes. A cluster type gives its addresses
//! ([`Endpoints::live_controllers`], [`Endpoints::broker_addr`]) and what to print when a
//! wait fails; everything else is a default method.
//!
//! Every call is bounded: single requests by a 1-2 s timeout, waits by their `deadline`.

use std::time::Duration;

use bytes::Bytes;
use keel_proto::ErrorCode;
use keel_proto::broker::broker_service_client::BrokerServiceClient;
use keel_proto::broker::{
    DescribeReplicasReply, DescribeReplicasRequest, FetchPartition, FetchRequest, FetchTopic,
    ProducePartitionData, ProducePartitionResponse, ProduceRequest, ProduceTopicData,
    ReplicaDescription, ReplicaRole,
};
use keel_proto::controller::controller_service_client::ControllerServiceClient;
use keel_proto::controller::{
    AlterConfigOp, AlterConfigsRequest, AlterConfigsResource, AlterableConfig, CreatableTopic,
    CreatePartitionsRequest, CreatePartitionsTopic, CreateTopicsRequest, DescribeClusterReply,
    DescribeClusterRequest,
};
use keel_proto::metadata::ConfigResourceType;
use tonic::transport::Channel;

use crate::data::{Crcs, Records, batch, decode, is_not_controller, ok};
use crate::wait::wait_for;

/// Timeout of one request the helpers send, where a slow answer means "try another node".
const REQUEST_TIMEOUT: Duration = Duration::from_millis(1500);

/// A lazily connecting channel to `addr` (`host:port`) with the broker's HTTP/2 settings.
pub fn channel(addr: &str) -> Channel {
    dial(&keel_runtime::tls::Dialer::default(), addr)
}

/// [`channel`] through `dialer` (TLS when it has a context).
pub fn dial(dialer: &keel_runtime::tls::Dialer, addr: &str) -> Channel {
    let endpoint = keel_runtime::tls::Dialer::broker_endpoint(addr).expect("a host:port address");
    dialer.connect_lazy(&endpoint)
}

/// A cluster reachable over gRPC. Tests call the default methods on the test's own task, so
/// their futures need not be `Send`.
#[allow(async_fn_in_trait)]
pub trait Endpoints {
    /// `(node id, host:port)` of every controller currently running.
    fn live_controllers(&self) -> Vec<(u64, String)>;

    /// `host:port` of broker `id`'s gRPC listener. Panics for an unknown id.
    fn broker_addr(&self, id: i32) -> String;

    /// What to print when a wait fails (process logs, node states).
    fn diagnostics(&self) -> String {
        String::new()
    }

    /// A channel to `addr` as this cluster's clients connect (plaintext unless overridden).
    fn channel(&self, addr: &str) -> Channel {
        channel(addr)
    }

    /// A client of broker `id`.
    fn broker_client(&self, id: i32) -> BrokerServiceClient<Channel> {
        BrokerServiceClient::new(self.channel(&self.broker_addr(id)))
    }

    /// Polls `f` until it returns `Some` ([`wait_for`] with this cluster's diagnostics).
    async fn wait_for<T, Fut>(&self, what: &str, deadline: Duration, f: impl FnMut() -> Fut) -> T
    where
        Fut: Future<Output = Option<T>>,
    {
        wait_for(what, deadline, || self.diagnostics(), f).await
    }

    /// DescribeCluster (fenced brokers included, no image digest) from the active controller,
    /// if one answers.
    async fn try_describe_cluster(&self) -> Option<DescribeClusterReply> {
        self.describe_cluster_with(false).await
    }

    /// DescribeCluster (fenced brokers included; the image digest if `digest`) from the
    /// active controller, if one answers. The digest costs the controller O(image) per
    /// request: for digest comparisons only, not for polling a large cluster (the partitions
    /// bench polled with it and had the active controller hash 100,000 partitions every
    /// 20 ms during the fence it was timing).
    async fn describe_cluster_with(&self, digest: bool) -> Option<DescribeClusterReply> {
        for (_, addr) in self.live_controllers() {
            let mut c = ControllerServiceClient::new(self.channel(&addr));
            let r = tokio::time::timeout(
                REQUEST_TIMEOUT,
                c.describe_cluster(DescribeClusterRequest {
                    include_fenced_brokers: true,
                    include_image_digest: digest,
                }),
            )
            .await;
            if let Ok(Ok(r)) = r {
                let r = r.into_inner();
                if r.controller_id == r.replying_node_id {
                    return Some(r);
                }
            }
        }
        None
    }

    /// Waits until every listed broker is registered, unfenced and not shutting down;
    /// returns the active controller's DescribeCluster.
    async fn wait_unfenced(&self, brokers: &[i32], deadline: Duration) -> DescribeClusterReply {
        self.wait_for("brokers unfenced", deadline, || async {
            let r = self.try_describe_cluster().await?;
            brokers
                .iter()
                .all(|id| {
                    r.brokers
                        .iter()
                        .any(|b| b.broker_id == *id && !b.fenced && !b.in_controlled_shutdown)
                })
                .then_some(r)
        })
        .await
    }

    /// Creates `topic` through the active controller (asking each live controller until one
    /// is active); panics on any other error or after `deadline`. A request whose reply was
    /// lost (a timeout, a reset, NOT_CONTROLLER from a controller that stepped down with it in
    /// flight) may have created the topic: TOPIC_ALREADY_EXISTS after such an attempt counts as
    /// created (the scenarios create each name once).
    async fn create_topic(&self, topic: CreatableTopic, deadline: Duration) {
        let name = topic.name.clone();
        let reply_lost = std::cell::Cell::new(false);
        self.wait_for(&format!("topic {name} created"), deadline, || async {
            for (_, addr) in self.live_controllers() {
                let mut c = ControllerServiceClient::new(self.channel(&addr));
                let req = CreateTopicsRequest {
                    topics: vec![topic.clone()],
                    validate_only: false,
                };
                let Ok(Ok(r)) = tokio::time::timeout(REQUEST_TIMEOUT, c.create_topics(req)).await
                else {
                    reply_lost.set(true);
                    continue;
                };
                let r = r.into_inner();
                if is_not_controller(&r.error) {
                    // Also the answer of a controller that lost its leadership with the
                    // request in flight, which may have been committed.
                    reply_lost.set(true);
                    continue;
                }
                assert!(ok(&r.error), "create {name}: {:?}", r.error);
                let created = ok(&r.topics[0].error)
                    || (reply_lost.get()
                        && ErrorCode::from_proto(r.topics[0].error.as_ref())
                            == Ok(ErrorCode::TopicAlreadyExists));
                assert!(created, "create {name}: {:?}", r.topics[0].error);
                return Some(());
            }
            None
        })
        .await
    }

    /// Grows `topic` to `count` partitions (automatic placement) through the active
    /// controller; panics on any other error or after `deadline`. Returns the offset of the
    /// committed batch.
    async fn create_partitions(&self, topic: &str, count: i32, deadline: Duration) -> i64 {
        self.wait_for(
            &format!("{topic} grown to {count} partitions"),
            deadline,
            || async {
                for (_, addr) in self.live_controllers() {
                    let mut c = ControllerServiceClient::new(self.channel(&addr));
                    let req = CreatePartitionsRequest {
                        topics: vec![CreatePartitionsTopic {
                            name: topic.into(),
                            count,
                            assignments: vec![],
                        }],
                        validate_only: false,
                    };
                    let Ok(Ok(r)) =
                        tokio::time::timeout(REQUEST_TIMEOUT, c.create_partitions(req)).await
                    else {
                        continue;
                    };
                    let r = r.into_inner();
                    if is_not_controller(&r.error) {
                        continue;
                    }
                    assert!(ok(&r.error), "grow {topic}: {:?}", r.error);
                    assert!(ok(&r.results[0].error), "grow {topic}: {:?}", r.results[0]);
                    return Some(r.results[0].metadata_offset);
                }
                None
            },
        )
        .await
    }

    /// Sets a topic config through the active controller; panics after `deadline`.
    async fn set_topic_config(&self, topic: &str, key: &str, value: &str, deadline: Duration) {
        self.wait_for(
            &format!("{key}={value} set on {topic}"),
            deadline,
            || async {
                for (_, addr) in self.live_controllers() {
                    let mut c = ControllerServiceClient::new(self.channel(&addr));
                    let req = AlterConfigsRequest {
                        resources: vec![AlterConfigsResource {
                            resource_type: ConfigResourceType::Topic as i32,
                            resource_name: topic.into(),
                            configs: vec![AlterableConfig {
                                name: key.into(),
                                op: AlterConfigOp::Set as i32,
                                value: Some(value.into()),
                            }],
                            replace_unlisted: false,
                        }],
                        validate_only: false,
                    };
                    let Ok(Ok(r)) =
                        tokio::time::timeout(REQUEST_TIMEOUT, c.alter_configs(req)).await
                    else {
                        continue;
                    };
                    let r = r.into_inner();
                    if ok(&r.error) && r.results.iter().all(|x| ok(&x.error)) {
                        return Some(());
                    }
                }
                None
            },
        )
        .await
    }

    /// Broker `id`'s DescribeReplicas (no image digest), if it answers within the request
    /// timeout.
    async fn try_describe_replicas(&self, id: i32) -> Option<DescribeReplicasReply> {
        self.describe_replicas_with(id, false).await
    }

    /// Broker `id`'s DescribeReplicas (the image digest if `digest`, O(image) on the
    /// broker), if it answers within the request timeout.
    async fn describe_replicas_with(&self, id: i32, digest: bool) -> Option<DescribeReplicasReply> {
        let mut c = self.broker_client(id);
        tokio::time::timeout(
            REQUEST_TIMEOUT,
            c.describe_replicas(DescribeReplicasRequest {
                include_image_digest: digest,
                ..Default::default()
            }),
        )
        .await
        .ok()?
        .ok()
        .map(|r| r.into_inner())
    }

    /// Broker `id`'s description of `topic`-`partition`, if it hosts it without error.
    async fn replica(&self, id: i32, topic: &str, partition: i32) -> Option<ReplicaDescription> {
        let r = self.try_describe_replicas(id).await?;
        r.partitions
            .into_iter()
            .find(|p| p.topic == topic && p.partition == partition && p.error.is_none())
    }

    /// Waits until broker `id` leads `topic`-0 with exactly `isr` (any order) and no ISR
    /// change pending; returns its description.
    async fn wait_leader_isr(
        &self,
        id: i32,
        topic: &str,
        isr: &[i32],
        deadline: Duration,
    ) -> ReplicaDescription {
        let mut want = isr.to_vec();
        want.sort_unstable();
        self.wait_for(
            &format!("broker {id} leads {topic}-0 with ISR {want:?}"),
            deadline,
            || async {
                let r = self.replica(id, topic, 0).await?;
                let mut got = r.isr.clone();
                got.sort_unstable();
                (r.role == ReplicaRole::Leader as i32 && got == want && !r.pending_isr_change)
                    .then_some(r)
            },
        )
        .await
    }

    /// One Produce of `records` to `topic`-`partition` on broker `id`.
    #[allow(clippy::too_many_arguments)]
    async fn produce_raw(
        &self,
        id: i32,
        topic: &str,
        partition: i32,
        acks: i32,
        timeout_ms: i32,
        records: Bytes,
        leader_epoch: Option<i32>,
    ) -> Result<ProducePartitionResponse, tonic::Status> {
        let mut c = self.broker_client(id);
        let reply = c
            .produce(ProduceRequest {
                acks,
                timeout_ms,
                transactional_id: String::new(),
                topics: vec![ProduceTopicData {
                    name: topic.into(),
                    topic_id: Bytes::new(),
                    partitions: vec![ProducePartitionData {
                        index: partition,
                        records,
                        current_leader_epoch: leader_epoch,
                    }],
                }],
            })
            .await?
            .into_inner();
        Ok(reply.responses[0].partitions[0].clone())
    }

    /// Produce of `values` (one batch) to `topic`-0 on broker `id` with a 5 s timeout; panics
    /// if the broker does not answer.
    async fn produce(
        &self,
        id: i32,
        topic: &str,
        acks: i32,
        values: &[String],
    ) -> ProducePartitionResponse {
        self.produce_raw(id, topic, 0, acks, 5000, batch(values), None)
            .await
            .expect("the broker answers the produce")
    }

    /// One consumer Fetch of `topic`-`partition` at `offset` on broker `id` (no wait, Kafka's
    /// consumer byte limits).
    async fn fetch_once(
        &self,
        id: i32,
        topic: &str,
        partition: i32,
        offset: i64,
    ) -> Result<keel_proto::broker::FetchPartitionData, tonic::Status> {
        let mut c = self.broker_client(id);
        let reply = c
            .fetch(FetchRequest {
                session: None,
                replica_id: -1,
                broker_epoch: -1,
                max_wait_ms: 0,
                min_bytes: 0,
                // Kafka's consumer defaults (`fetch.max.bytes`, `max.partition.fetch.bytes`).
                max_bytes: 50 << 20,
                isolation_level: 0,
                topics: vec![FetchTopic {
                    topic: topic.into(),
                    topic_id: Bytes::new(),
                    partitions: vec![FetchPartition {
                        partition,
                        fetch_offset: offset,
                        current_leader_epoch: None,
                        last_fetched_epoch: -1,
                        log_start_offset: -1,
                        partition_max_bytes: 1 << 20,
                    }],
                }],
            })
            .await?
            .into_inner();
        Ok(reply.responses[0].partitions[0].clone())
    }

    /// Consumer fetches of everything below the HW from `from`, on broker `id`: the records,
    /// the batch CRCs and the HW. Panics on an error code. Bounded: each fetch that returns
    /// batches moves the offset forward to the end of the last one (a compacted topic's
    /// batches may end after their last record, or hold none), and one that returns none
    /// ends the loop.
    async fn consume(
        &self,
        id: i32,
        topic: &str,
        partition: i32,
        from: i64,
    ) -> (Records, Crcs, i64) {
        let mut offset = from;
        let mut all = Vec::new();
        let mut crcs = Vec::new();
        loop {
            let p = self
                .fetch_once(id, topic, partition, offset)
                .await
                .expect("the broker answers the fetch");
            let code = ErrorCode::from_proto(p.error.as_ref()).expect("a known error code");
            assert_eq!(
                code,
                ErrorCode::None,
                "consume {topic}-{partition} at {offset}: {p:?}"
            );
            let (recs, batch_crcs) = decode(&p.records);
            let batch_end = keel_record::BatchIter::new(p.records.clone())
                .filter_map(Result::ok)
                .map(|b| b.last_offset() + 1)
                .max();
            let Some(end) = batch_end.filter(|e| *e > offset) else {
                return (all, crcs, p.high_watermark);
            };
            offset = end;
            all.extend(recs.into_iter().filter(|(o, _)| *o >= from));
            crcs.extend(batch_crcs);
        }
    }
}
