//! Kafka request structs to Keel's request messages and Keel's replies back (pure). Keel's
//! broker protocol mirrors Kafka's (same fields, same error numbers), so each conversion is a
//! field mapping plus the version rules of the Kafka message: a field that does not exist at
//! the request's version has the value Kafka's schema gives it (`-1` epochs, `-1` log start
//! offsets), and a response field the version lacks is simply not encoded by the codec.
//!
//! Endpoints: every broker address in a Kafka response is the broker's endpoint registered
//! under the listener name the request came in on (Kafka: `KRaftMetadataCache` looks up
//! `listenerName`); Keel's gRPC replies carry the first (gRPC) endpoint instead, so those are
//! rebuilt from the image here.

use bytes::Bytes;
use kafka_protocol::messages::fetch_request::FetchRequest as KFetchRequest;
use kafka_protocol::messages::fetch_response::{
    EpochEndOffset as KEpochEndOffset, FetchResponse, FetchableTopicResponse,
    LeaderIdAndEpoch as KFetchLeader, PartitionData,
};
use kafka_protocol::messages::init_producer_id_request::InitProducerIdRequest as KInitRequest;
use kafka_protocol::messages::init_producer_id_response::InitProducerIdResponse;
use kafka_protocol::messages::list_offsets_request::ListOffsetsRequest as KListOffsetsRequest;
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse as KListOffsetsPartition, ListOffsetsResponse,
    ListOffsetsTopicResponse as KListOffsetsTopic,
};
use kafka_protocol::messages::metadata_request::MetadataRequest as KMetadataRequest;
use kafka_protocol::messages::metadata_response::{
    MetadataResponse, MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::offset_for_leader_epoch_request::OffsetForLeaderEpochRequest as KOffsetsForLeaderEpochRequest;
use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset as KEpochEndOffsetResult, OffsetForLeaderEpochResponse,
    OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::produce_request::ProduceRequest as KProduceRequest;
use kafka_protocol::messages::produce_response::{
    LeaderIdAndEpoch as KProduceLeader, NodeEndpoint as KProduceNode, PartitionProduceResponse,
    ProduceResponse, TopicProduceResponse,
};
use kafka_protocol::messages::{BrokerId, ProducerId, TopicName};
use kafka_protocol::protocol::StrBytes;
use keel_metadata_log::{BrokerRegistration, MetadataImage};
use keel_proto::ErrorCode;
use keel_proto::broker as keel;

pub mod admin;

/// Kafka's "not requested" value of an authorized-operations field (`Integer.MIN_VALUE`).
const AUTHORIZED_OPERATIONS_OMITTED: i32 = i32::MIN;

fn str_bytes(s: impl Into<String>) -> StrBytes {
    StrBytes::from_string(s.into())
}

fn topic_name(s: impl Into<String>) -> TopicName {
    TopicName(str_bytes(s))
}

/// Kafka's error code of an optional Keel error (`None` = NONE).
fn code(e: Option<&keel_proto::common::Error>) -> i16 {
    e.map_or(0, |e| {
        i16::try_from(e.code).unwrap_or(ErrorCode::UnknownServerError.code())
    })
}

/// A Kafka epoch field where `-1` means "not given" (KIP-320's `current_leader_epoch`).
fn optional_epoch(epoch: i32) -> Option<i32> {
    (epoch >= 0).then_some(epoch)
}

fn uuid_of(bytes: &[u8]) -> uuid::Uuid {
    uuid::Uuid::from_slice(bytes).unwrap_or(uuid::Uuid::nil())
}

/// `broker`'s endpoint on `listener`, if it registered one.
pub fn endpoint_on<'a>(
    broker: &'a BrokerRegistration,
    listener: &str,
) -> Option<&'a keel_proto::metadata::BrokerEndpoint> {
    broker.endpoints.iter().find(|e| e.name == listener)
}

// ---------------------------------------------------------------------------------------------
// Produce
// ---------------------------------------------------------------------------------------------

/// Keel's Produce from Kafka's (v3+). A null `records` is an empty one (refused by the
/// replica manager as not exactly one batch, INVALID_RECORD).
pub fn produce_request(req: KProduceRequest) -> keel::ProduceRequest {
    keel::ProduceRequest {
        acks: i32::from(req.acks),
        timeout_ms: req.timeout_ms,
        transactional_id: req
            .transactional_id
            .map(|t| t.0.to_string())
            .unwrap_or_default(),
        topics: req
            .topic_data
            .into_iter()
            .map(|t| keel::ProduceTopicData {
                name: t.name.0.to_string(),
                topic_id: Bytes::new(),
                partitions: t
                    .partition_data
                    .into_iter()
                    .map(|p| keel::ProducePartitionData {
                        index: p.index,
                        records: p.records.unwrap_or_default(),
                        current_leader_epoch: None,
                    })
                    .collect(),
            })
            .collect(),
    }
}

/// Kafka's Produce response from Keel's reply; leaders named in `current_leader` get their
/// endpoint on `listener` in `node_endpoints` (v10+). A top-level error (a refused request)
/// is given to every partition of `req_shape` (topic names and partition indexes, in request
/// order), as Kafka answers a whole-request failure per partition.
pub fn produce_response(
    reply: keel::ProduceReply,
    req_shape: &[(String, Vec<i32>)],
    image: &MetadataImage,
    listener: &str,
) -> ProduceResponse {
    if let Some(err) = reply.error.as_ref().filter(|e| e.code != 0) {
        return produce_error_response(req_shape, err.code as i16, Some(&err.message));
    }
    let mut leaders = std::collections::BTreeSet::new();
    let responses = reply
        .responses
        .into_iter()
        .map(|t| {
            let partitions = t
                .partitions
                .into_iter()
                .map(|p| {
                    let mut out = PartitionProduceResponse::default()
                        .with_index(p.index)
                        .with_error_code(code(p.error.as_ref()))
                        .with_base_offset(p.base_offset)
                        .with_log_append_time_ms(p.log_append_time_ms)
                        .with_log_start_offset(p.log_start_offset)
                        .with_error_message(
                            p.error
                                .as_ref()
                                .filter(|e| e.code != 0)
                                .map(|e| str_bytes(e.message.clone())),
                        );
                    if let Some(l) = p.current_leader {
                        leaders.insert(l.leader_id);
                        out = out.with_current_leader(
                            KProduceLeader::default()
                                .with_leader_id(BrokerId(l.leader_id))
                                .with_leader_epoch(l.leader_epoch),
                        );
                    } else {
                        out = out.with_current_leader(
                            KProduceLeader::default()
                                .with_leader_id(BrokerId(-1))
                                .with_leader_epoch(-1),
                        );
                    }
                    out
                })
                .collect();
            TopicProduceResponse::default()
                .with_name(topic_name(t.name))
                .with_partition_responses(partitions)
        })
        .collect();
    let node_endpoints = leaders
        .into_iter()
        .filter_map(|id| {
            let b = image.broker(id)?;
            let ep = endpoint_on(b, listener)?;
            Some(
                KProduceNode::default()
                    .with_node_id(BrokerId(id))
                    .with_host(str_bytes(ep.host.clone()))
                    .with_port(ep.port as i32)
                    .with_rack(b.rack.clone().map(str_bytes)),
            )
        })
        .collect();
    ProduceResponse::default()
        .with_responses(responses)
        .with_node_endpoints(node_endpoints)
}

/// A Produce response giving `error_code` to every partition of `req_shape`.
pub fn produce_error_response(
    req_shape: &[(String, Vec<i32>)],
    error_code: i16,
    message: Option<&str>,
) -> ProduceResponse {
    let responses = req_shape
        .iter()
        .map(|(name, partitions)| {
            TopicProduceResponse::default()
                .with_name(topic_name(name.clone()))
                .with_partition_responses(
                    partitions
                        .iter()
                        .map(|p| {
                            PartitionProduceResponse::default()
                                .with_index(*p)
                                .with_error_code(error_code)
                                .with_base_offset(-1)
                                .with_error_message(message.map(|m| str_bytes(m.to_string())))
                                .with_current_leader(
                                    KProduceLeader::default()
                                        .with_leader_id(BrokerId(-1))
                                        .with_leader_epoch(-1),
                                )
                        })
                        .collect(),
                )
        })
        .collect();
    ProduceResponse::default().with_responses(responses)
}

/// The topics and partitions of a Produce, in request order.
pub fn produce_shape(req: &KProduceRequest) -> Vec<(String, Vec<i32>)> {
    req.topic_data
        .iter()
        .map(|t| {
            (
                t.name.0.to_string(),
                t.partition_data.iter().map(|p| p.index).collect(),
            )
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Fetch
// ---------------------------------------------------------------------------------------------

/// What a Kafka Fetch asks that Keel's Fetch cannot carry: fetch sessions (KIP-227) and
/// replica fetches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FetchRefusal {
    /// `session_id` names a session (Keel creates none): FETCH_SESSION_ID_NOT_FOUND (70).
    UnknownSession,
    /// An incremental epoch without a session: INVALID_FETCH_SESSION_EPOCH (71).
    SessionEpoch,
    /// `replica_id` >= 0: replication between Keel brokers is gRPC only (INVALID_REQUEST).
    ReplicaFetch,
}

impl FetchRefusal {
    /// Kafka's code.
    pub fn code(self) -> i16 {
        match self {
            FetchRefusal::UnknownSession => ErrorCode::FetchSessionIdNotFound.code(),
            FetchRefusal::SessionEpoch => ErrorCode::InvalidFetchSessionEpoch.code(),
            FetchRefusal::ReplicaFetch => ErrorCode::InvalidRequest.code(),
        }
    }
}

/// Keel's Fetch from Kafka's (v4-12), or why it cannot be served. Every Kafka fetch is a
/// full, sessionless one: session id 0 with epoch -1 (no session wanted) or 0 (a session
/// asked for; the answer's session id 0 says none was created, which clients accept,
/// `FetchSessionHandler`).
pub fn fetch_request(req: KFetchRequest) -> Result<keel::FetchRequest, FetchRefusal> {
    if req.replica_id.0 >= 0 {
        return Err(FetchRefusal::ReplicaFetch);
    }
    if req.session_id != 0 {
        return Err(FetchRefusal::UnknownSession);
    }
    if req.session_epoch > 0 {
        return Err(FetchRefusal::SessionEpoch);
    }
    Ok(keel::FetchRequest {
        session: None,
        replica_id: -1,
        broker_epoch: -1,
        max_wait_ms: req.max_wait_ms,
        min_bytes: req.min_bytes,
        max_bytes: req.max_bytes,
        isolation_level: i32::from(req.isolation_level),
        topics: req
            .topics
            .into_iter()
            .map(|t| keel::FetchTopic {
                topic: t.topic.0.to_string(),
                topic_id: Bytes::new(),
                partitions: t
                    .partitions
                    .into_iter()
                    .map(|p| keel::FetchPartition {
                        partition: p.partition,
                        fetch_offset: p.fetch_offset,
                        current_leader_epoch: optional_epoch(p.current_leader_epoch),
                        last_fetched_epoch: -1,
                        log_start_offset: -1,
                        partition_max_bytes: p.partition_max_bytes,
                    })
                    .collect(),
            })
            .collect(),
    })
}

/// A Fetch response refusing the whole request: `error_code` at the top (v7+) and on every
/// partition (what v4-6 clients read).
pub fn fetch_error_response(req: &KFetchRequest, error_code: i16) -> FetchResponse {
    let responses = req
        .topics
        .iter()
        .map(|t| {
            FetchableTopicResponse::default()
                .with_topic(t.topic.clone())
                .with_partitions(
                    t.partitions
                        .iter()
                        .map(|p| fetch_partition_error(p.partition, error_code))
                        .collect(),
                )
        })
        .collect();
    FetchResponse::default()
        .with_error_code(error_code)
        .with_session_id(0)
        .with_responses(responses)
}

fn fetch_partition_error(partition: i32, error_code: i16) -> PartitionData {
    PartitionData::default()
        .with_partition_index(partition)
        .with_error_code(error_code)
        .with_high_watermark(-1)
        .with_last_stable_offset(-1)
        .with_log_start_offset(-1)
        .with_records(Some(Bytes::new()))
}

/// Kafka's Fetch response from Keel's reply. Records are never null (an empty partition has
/// empty bytes: some clients treat null as a protocol error); no aborted transactions (null:
/// Keel has no transactions); no preferred read replica (-1, KIP-392).
pub fn fetch_response(reply: keel::FetchReply, req: &KFetchRequest) -> FetchResponse {
    if let Some(err) = reply.error.as_ref().filter(|e| e.code != 0) {
        return fetch_error_response(req, err.code as i16);
    }
    let responses = reply
        .responses
        .into_iter()
        .map(|t| {
            let partitions = t
                .partitions
                .into_iter()
                .map(|p| {
                    let mut out = PartitionData::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(code(p.error.as_ref()))
                        .with_high_watermark(p.high_watermark)
                        .with_last_stable_offset(p.last_stable_offset)
                        .with_log_start_offset(p.log_start_offset)
                        .with_preferred_read_replica(BrokerId(-1))
                        .with_records(Some(p.records));
                    if let Some(d) = p.diverging_epoch {
                        out = out.with_diverging_epoch(
                            KEpochEndOffset::default()
                                .with_epoch(d.epoch)
                                .with_end_offset(d.end_offset),
                        );
                    }
                    if let Some(l) = p.current_leader {
                        out = out.with_current_leader(
                            KFetchLeader::default()
                                .with_leader_id(BrokerId(l.leader_id))
                                .with_leader_epoch(l.leader_epoch),
                        );
                    }
                    out
                })
                .collect();
            FetchableTopicResponse::default()
                .with_topic(topic_name(t.topic))
                .with_partitions(partitions)
        })
        .collect();
    FetchResponse::default()
        .with_session_id(0)
        .with_responses(responses)
}

// ---------------------------------------------------------------------------------------------
// ListOffsets, OffsetForLeaderEpoch, InitProducerId
// ---------------------------------------------------------------------------------------------

/// Keel's ListOffsets from Kafka's (v1-10). The timestamp specs pass through (-1 LATEST,
/// -2 EARLIEST, >= 0 by time); `timeout_ms` (v10, for tiered storage) is not needed.
pub fn list_offsets_request(req: KListOffsetsRequest) -> keel::ListOffsetsRequest {
    keel::ListOffsetsRequest {
        replica_id: req.replica_id.0,
        isolation_level: i32::from(req.isolation_level),
        topics: req
            .topics
            .into_iter()
            .map(|t| keel::ListOffsetsTopic {
                name: t.name.0.to_string(),
                partitions: t
                    .partitions
                    .into_iter()
                    .map(|p| keel::ListOffsetsPartition {
                        partition_index: p.partition_index,
                        current_leader_epoch: optional_epoch(p.current_leader_epoch),
                        timestamp: p.timestamp,
                    })
                    .collect(),
            })
            .collect(),
    }
}

/// Kafka's ListOffsets response at `version` from Keel's reply; a top-level error goes to
/// every partition of `req`. `leader_epoch` exists from v4 (KIP-320); the codec refuses to
/// encode a set one below.
pub fn list_offsets_response(
    reply: keel::ListOffsetsReply,
    req: &KListOffsetsRequest,
    version: i16,
) -> ListOffsetsResponse {
    let part = |index: i32, error_code: i16, timestamp: i64, offset: i64, epoch: i32| {
        KListOffsetsPartition::default()
            .with_partition_index(index)
            .with_error_code(error_code)
            .with_timestamp(timestamp)
            .with_offset(offset)
            .with_leader_epoch(if version >= 4 { epoch } else { -1 })
    };
    let topics = if let Some(err) = reply.error.as_ref().filter(|e| e.code != 0) {
        req.topics
            .iter()
            .map(|t| {
                KListOffsetsTopic::default()
                    .with_name(t.name.clone())
                    .with_partitions(
                        t.partitions
                            .iter()
                            .map(|p| part(p.partition_index, err.code as i16, -1, -1, -1))
                            .collect(),
                    )
            })
            .collect()
    } else {
        reply
            .topics
            .into_iter()
            .map(|t| {
                KListOffsetsTopic::default()
                    .with_name(topic_name(t.name))
                    .with_partitions(
                        t.partitions
                            .into_iter()
                            .map(|p| {
                                part(
                                    p.partition_index,
                                    code(p.error.as_ref()),
                                    p.timestamp,
                                    p.offset,
                                    p.leader_epoch,
                                )
                            })
                            .collect(),
                    )
            })
            .collect()
    };
    ListOffsetsResponse::default().with_topics(topics)
}

/// Keel's OffsetsForLeaderEpoch from Kafka's (v2-4; `replica_id` is v3+, -1 before).
pub fn offsets_for_leader_epoch_request(
    req: KOffsetsForLeaderEpochRequest,
) -> keel::OffsetsForLeaderEpochRequest {
    keel::OffsetsForLeaderEpochRequest {
        replica_id: req.replica_id.0,
        topics: req
            .topics
            .into_iter()
            .map(|t| keel::OffsetForLeaderTopic {
                topic: t.topic.0.to_string(),
                partitions: t
                    .partitions
                    .into_iter()
                    .map(|p| keel::OffsetForLeaderPartition {
                        partition: p.partition,
                        current_leader_epoch: optional_epoch(p.current_leader_epoch),
                        leader_epoch: p.leader_epoch,
                    })
                    .collect(),
            })
            .collect(),
    }
}

/// Kafka's OffsetForLeaderEpoch response from Keel's reply; a top-level error goes to every
/// partition of `req`.
pub fn offsets_for_leader_epoch_response(
    reply: keel::OffsetsForLeaderEpochReply,
    req: &KOffsetsForLeaderEpochRequest,
) -> OffsetForLeaderEpochResponse {
    let part = |partition: i32, error_code: i16, epoch: i32, end: i64| {
        KEpochEndOffsetResult::default()
            .with_partition(partition)
            .with_error_code(error_code)
            .with_leader_epoch(epoch)
            .with_end_offset(end)
    };
    let topics = if let Some(err) = reply.error.as_ref().filter(|e| e.code != 0) {
        req.topics
            .iter()
            .map(|t| {
                OffsetForLeaderTopicResult::default()
                    .with_topic(t.topic.clone())
                    .with_partitions(
                        t.partitions
                            .iter()
                            .map(|p| part(p.partition, err.code as i16, -1, -1))
                            .collect(),
                    )
            })
            .collect()
    } else {
        reply
            .topics
            .into_iter()
            .map(|t| {
                OffsetForLeaderTopicResult::default()
                    .with_topic(topic_name(t.topic))
                    .with_partitions(
                        t.partitions
                            .into_iter()
                            .map(|p| {
                                part(
                                    p.partition,
                                    code(p.error.as_ref()),
                                    p.leader_epoch,
                                    p.end_offset,
                                )
                            })
                            .collect(),
                    )
            })
            .collect()
    };
    OffsetForLeaderEpochResponse::default().with_topics(topics)
}

/// Keel's InitProducerId from Kafka's (v0-5; `producer_id`/`producer_epoch` are v3+, -1
/// before).
pub fn init_producer_id_request(req: KInitRequest) -> keel::InitProducerIdRequest {
    keel::InitProducerIdRequest {
        transactional_id: req
            .transactional_id
            .map(|t| t.0.to_string())
            .unwrap_or_default(),
        transaction_timeout_ms: req.transaction_timeout_ms,
        producer_id: req.producer_id.0,
        producer_epoch: i32::from(req.producer_epoch),
    }
}

/// Kafka's InitProducerId response from Keel's reply.
pub fn init_producer_id_response(reply: keel::InitProducerIdReply) -> InitProducerIdResponse {
    InitProducerIdResponse::default()
        .with_error_code(code(reply.error.as_ref()))
        .with_producer_id(ProducerId(reply.producer_id))
        .with_producer_epoch(i16::try_from(reply.producer_epoch).unwrap_or(-1))
}

// ---------------------------------------------------------------------------------------------
// Metadata
// ---------------------------------------------------------------------------------------------

/// What a Kafka Metadata request asks for, as Keel's request: `None` = no topics at all
/// (v1+ with an empty list). v0's empty list and v1+'s null both mean every topic. Topics
/// named by id (v10+ with a null name) are looked up in `image`; an unknown id is answered
/// UNKNOWN_TOPIC_ID by [`metadata_response`].
pub fn metadata_request(
    req: &KMetadataRequest,
    version: i16,
    image: &MetadataImage,
) -> Option<keel::MetadataRequest> {
    match &req.topics {
        None => Some(keel::MetadataRequest { topics: Vec::new() }),
        Some(t) if t.is_empty() && version == 0 => {
            Some(keel::MetadataRequest { topics: Vec::new() })
        }
        Some(t) if t.is_empty() => None,
        Some(t) => Some(keel::MetadataRequest {
            topics: t
                .iter()
                .filter_map(|t| match &t.name {
                    Some(n) => Some(n.0.to_string()),
                    None => image
                        .topics()
                        .by_id
                        .get(&t.topic_id)
                        .map(|ti| ti.name.clone()),
                })
                .collect(),
        }),
    }
}

/// Kafka's Metadata response. Brokers: the registered, unfenced brokers with an endpoint on
/// `listener`. `controller_id`: Kafka clients cannot reach KRaft controllers, so (like
/// Kafka 3.3+ in KRaft mode) a live broker is named: `self_id` when it is listed, else the
/// lowest listed id, else -1. A partition whose leader has no endpoint on `listener` is
/// LEADER_NOT_AVAILABLE with leader -1 (Kafka: `KRaftMetadataCache`, LISTENER_NOT_FOUND
/// only when asked to error on unavailable listeners). Topics asked by an unknown id are
/// UNKNOWN_TOPIC_ID.
pub fn metadata_response(
    reply: Option<keel::MetadataReply>,
    req: &KMetadataRequest,
    image: &MetadataImage,
    listener: &str,
    self_id: i32,
) -> MetadataResponse {
    let brokers: Vec<MetadataResponseBroker> = image
        .brokers()
        .values()
        .filter(|b| !b.fenced)
        .filter_map(|b| {
            let ep = endpoint_on(b, listener)?;
            Some(
                MetadataResponseBroker::default()
                    .with_node_id(BrokerId(b.id))
                    .with_host(str_bytes(ep.host.clone()))
                    .with_port(ep.port as i32)
                    .with_rack(b.rack.clone().map(str_bytes)),
            )
        })
        .collect();
    let listed = |id: i32| brokers.iter().any(|b| b.node_id.0 == id);
    let controller_id = if listed(self_id) {
        self_id
    } else {
        brokers.first().map_or(-1, |b| b.node_id.0)
    };
    let mut topics: Vec<MetadataResponseTopic> = reply
        .map(|r| r.topics)
        .unwrap_or_default()
        .into_iter()
        .map(|t| {
            let partitions = t
                .partitions
                .into_iter()
                .map(|p| {
                    let reachable = p.leader_id >= 0 && listed(p.leader_id);
                    let (error_code, leader) = if p.leader_id >= 0 && !reachable {
                        (ErrorCode::LeaderNotAvailable.code(), -1)
                    } else {
                        (code(p.error.as_ref()), p.leader_id)
                    };
                    MetadataResponsePartition::default()
                        .with_error_code(error_code)
                        .with_partition_index(p.partition_index)
                        .with_leader_id(BrokerId(leader))
                        .with_leader_epoch(p.leader_epoch)
                        .with_replica_nodes(p.replica_nodes.into_iter().map(BrokerId).collect())
                        .with_isr_nodes(p.isr_nodes.into_iter().map(BrokerId).collect())
                        .with_offline_replicas(
                            p.offline_replicas.into_iter().map(BrokerId).collect(),
                        )
                })
                .collect();
            MetadataResponseTopic::default()
                .with_error_code(code(t.error.as_ref()))
                .with_name(Some(topic_name(t.name)))
                .with_topic_id(uuid_of(&t.topic_id))
                .with_is_internal(t.is_internal)
                .with_partitions(partitions)
                .with_topic_authorized_operations(AUTHORIZED_OPERATIONS_OMITTED)
        })
        .collect();
    if let Some(asked) = &req.topics {
        for t in asked.iter().filter(|t| t.name.is_none()) {
            if !image.topics().by_id.contains_key(&t.topic_id) {
                topics.push(
                    MetadataResponseTopic::default()
                        .with_error_code(ErrorCode::UnknownTopicId.code())
                        .with_name(None)
                        .with_topic_id(t.topic_id)
                        .with_topic_authorized_operations(AUTHORIZED_OPERATIONS_OMITTED),
                );
            }
        }
    }
    MetadataResponse::default()
        .with_brokers(brokers)
        .with_cluster_id(image.cluster_id().map(|c| str_bytes(c.to_string())))
        .with_controller_id(BrokerId(controller_id))
        .with_topics(topics)
        .with_cluster_authorized_operations(AUTHORIZED_OPERATIONS_OMITTED)
}
