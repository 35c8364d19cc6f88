//! The admin APIs the Kafka listener forwards to the active controller (#21): CreateTopics
//! (v2-7), DeleteTopics (v1-6), DescribeConfigs (v1-4), DescribeCluster (v0-2),
//! CreatePartitions (v0-3), IncrementalAlterConfigs (v0-1), AlterConfigs (v0-2), ElectLeaders (v0-2),
//! AlterPartitionReassignments (v0), ListPartitionReassignments (v0),
//! Describe/Create/DeleteAcls (v1-3) and Describe/AlterUserScramCredentials (v0), as pure
//! conversions between `kafka-protocol`'s structs and Keel's controller messages
//! (`keel.controller`, whose shapes and error numbers are Kafka's). The async layer
//! ([`crate::kafka::admin`]) only sends what these functions build and hands back what the
//! controller answered.
//!
//! Kafka 4 semantics kept here (Kafka classes named per item):
//! - A broker forwards CreateTopics and DeleteTopics to the active controller and answers
//!   once the controller committed the records (`ControllerApis.createTopics`,
//!   `ForwardingManager`); it does not wait for brokers to learn the topic (clients poll
//!   Metadata, as `KafkaAdminClient` does).
//! - A request-level failure (controller unreachable, a bound exceeded) is given to every
//!   topic or resource of the request, as Kafka answers a whole-request error per item.
//! - Error codes pass through unchanged: [`keel_proto::ErrorCode`] uses Kafka's numbers.

use std::collections::BTreeSet;

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::BrokerId;
use kafka_protocol::messages::alter_configs_request::AlterConfigsRequest as KLegacyAlterConfigsRequest;
use kafka_protocol::messages::alter_configs_response::{
    AlterConfigsResourceResponse as KLegacyAlterConfigsResourceResponse,
    AlterConfigsResponse as KLegacyAlterConfigsResponse,
};
use kafka_protocol::messages::alter_partition_reassignments_request::AlterPartitionReassignmentsRequest as KAlterPartitionReassignmentsRequest;
use kafka_protocol::messages::alter_partition_reassignments_response::{
    AlterPartitionReassignmentsResponse as KAlterPartitionReassignmentsResponse,
    ReassignablePartitionResponse as KReassignablePartitionResponse,
    ReassignableTopicResponse as KReassignableTopicResponse,
};
use kafka_protocol::messages::alter_user_scram_credentials_request::AlterUserScramCredentialsRequest as KAlterUserScramCredentialsRequest;
use kafka_protocol::messages::alter_user_scram_credentials_response::{
    AlterUserScramCredentialsResponse as KAlterUserScramCredentialsResponse,
    AlterUserScramCredentialsResult as KAlterUserScramCredentialsResult,
};
use kafka_protocol::messages::create_acls_request::{
    AclCreation as KAclCreation, CreateAclsRequest as KCreateAclsRequest,
};
use kafka_protocol::messages::create_acls_response::{
    AclCreationResult as KAclCreationResult, CreateAclsResponse as KCreateAclsResponse,
};
use kafka_protocol::messages::create_partitions_request::CreatePartitionsRequest as KCreatePartitionsRequest;
use kafka_protocol::messages::create_partitions_response::{
    CreatePartitionsResponse as KCreatePartitionsResponse,
    CreatePartitionsTopicResult as KCreatePartitionsTopicResult,
};
use kafka_protocol::messages::create_topics_request::CreateTopicsRequest as KCreateTopicsRequest;
use kafka_protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult, CreateTopicsResponse,
};
use kafka_protocol::messages::delete_acls_request::DeleteAclsRequest as KDeleteAclsRequest;
use kafka_protocol::messages::delete_acls_response::{
    DeleteAclsFilterResult as KDeleteAclsFilterResult,
    DeleteAclsMatchingAcl as KDeleteAclsMatchingAcl, DeleteAclsResponse as KDeleteAclsResponse,
};
use kafka_protocol::messages::delete_topics_request::DeleteTopicsRequest as KDeleteTopicsRequest;
use kafka_protocol::messages::delete_topics_response::{
    DeletableTopicResult, DeleteTopicsResponse,
};
use kafka_protocol::messages::describe_acls_response::{
    AclDescription as KAclDescription, DescribeAclsResource as KDescribeAclsResource,
    DescribeAclsResponse as KDescribeAclsResponse,
};
use kafka_protocol::messages::describe_cluster_request::DescribeClusterRequest as KDescribeClusterRequest;
use kafka_protocol::messages::describe_cluster_response::{
    DescribeClusterBroker, DescribeClusterResponse,
};
use kafka_protocol::messages::describe_configs_request::DescribeConfigsRequest as KDescribeConfigsRequest;
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResponse, DescribeConfigsResult,
    DescribeConfigsSynonym,
};
use kafka_protocol::messages::describe_log_dirs_request::DescribeLogDirsRequest as KDescribeLogDirsRequest;
use kafka_protocol::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition as KDescribeLogDirsPartition,
    DescribeLogDirsResponse as KDescribeLogDirsResponse,
    DescribeLogDirsResult as KDescribeLogDirsResult, DescribeLogDirsTopic as KDescribeLogDirsTopic,
};
use kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo as KCredentialInfo,
    DescribeUserScramCredentialsResponse as KDescribeUserScramCredentialsResponse,
    DescribeUserScramCredentialsResult as KDescribeUserScramCredentialsResult,
};
use kafka_protocol::messages::elect_leaders_request::ElectLeadersRequest as KElectLeadersRequest;
use kafka_protocol::messages::elect_leaders_response::{
    ElectLeadersResponse as KElectLeadersResponse, PartitionResult as KElectPartitionResult,
    ReplicaElectionResult as KReplicaElectionResult,
};
use kafka_protocol::messages::incremental_alter_configs_request::IncrementalAlterConfigsRequest as KIncrementalAlterConfigsRequest;
use kafka_protocol::messages::incremental_alter_configs_response::{
    AlterConfigsResourceResponse as KAlterConfigsResourceResponse,
    IncrementalAlterConfigsResponse as KIncrementalAlterConfigsResponse,
};
use kafka_protocol::messages::list_partition_reassignments_request::ListPartitionReassignmentsRequest as KListPartitionReassignmentsRequest;
use kafka_protocol::messages::list_partition_reassignments_response::{
    ListPartitionReassignmentsResponse as KListPartitionReassignmentsResponse,
    OngoingPartitionReassignment as KOngoingPartitionReassignment,
    OngoingTopicReassignment as KOngoingTopicReassignment,
};
use kafka_protocol::protocol::StrBytes;
use keel_proto::ErrorCode;
use keel_proto::controller as ctl;

use super::{AUTHORIZED_OPERATIONS_OMITTED, code, str_bytes, topic_name, uuid_of};

/// A whole-request failure to give every item of an answer: Kafka's error code and a
/// message (e.g. REQUEST_TIMED_OUT when no controller answered).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// Kafka's error code.
    pub code: i16,
    /// Why, for the client's log (Kafka's `error_message`).
    pub message: String,
}

impl Failure {
    /// `code` with `message` (capped like every Keel error message,
    /// [`keel_proto::limits::cap_message`]).
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code: code.code(),
            message: keel_proto::limits::cap_message(message.into()),
        }
    }
}

/// The error message of a Keel error: `None` for success (Kafka's null `error_message`).
fn message(e: Option<&keel_proto::common::Error>) -> Option<StrBytes> {
    e.filter(|e| e.code != 0)
        .map(|e| str_bytes(keel_proto::limits::cap_message(e.message.clone())))
}

/// `reply`, or its request-level error as the failure of the whole request.
fn settled<R: crate::lifecycle::ControllerReply>(reply: Result<R, Failure>) -> Result<R, Failure> {
    reply.and_then(|r| match request_error(r.error()) {
        Some(f) => Err(f),
        None => Ok(r),
    })
}

/// Item `item` of a reply answered per item (a topic, a config resource, an ACL, a filter):
/// the whole request's failure, the item's result when the reply has it, else
/// UNKNOWN_SERVER_ERROR saying the reply has no result for this `what`.
fn per_item<'a, R, T>(
    reply: &'a Result<R, Failure>,
    item: impl FnOnce(&'a R) -> Option<&'a T>,
    what: &str,
) -> Result<&'a T, Failure> {
    match reply {
        Err(f) => Err(f.clone()),
        Ok(r) => item(r).ok_or_else(|| {
            Failure::new(
                ErrorCode::UnknownServerError,
                format!("the controller's reply has no result for this {what}"),
            )
        }),
    }
}

/// Kafka's error code and message of an item's outcome ([`per_item`]): its own error (a null
/// message on success, taken by `error`), or the failure.
fn item_error<T>(
    outcome: Result<&T, Failure>,
    error: impl FnOnce(&T) -> Option<&keel_proto::common::Error>,
) -> (i16, Option<StrBytes>) {
    match outcome {
        Ok(x) => {
            let e = error(x);
            (code(e), message(e))
        }
        Err(f) => (f.code, Some(str_bytes(f.message))),
    }
}

/// The request-level error of a controller reply, if it failed as a whole.
fn request_error(e: Option<&keel_proto::common::Error>) -> Option<Failure> {
    e.filter(|e| e.code != 0).map(|e| Failure {
        code: code(Some(e)),
        message: e.message.clone(),
    })
}

// ---------------------------------------------------------------------------------------------
// CreateTopics (Kafka: CreateTopicsRequest/Response v2-7)
// ---------------------------------------------------------------------------------------------

/// Kafka's `DescribeConfigsResponse.ConfigSource.DYNAMIC_TOPIC_CONFIG`.
pub const CONFIG_SOURCE_TOPIC: i8 = 1;
/// Kafka's `ConfigSource.STATIC_BROKER_CONFIG`: a value from the broker's own config file.
pub const CONFIG_SOURCE_STATIC_BROKER: i8 = 4;
/// Kafka's `ConfigSource.DEFAULT_CONFIG`.
pub const CONFIG_SOURCE_DEFAULT: i8 = 5;

/// The CreateTopics a Metadata request's auto-creation sends (Kafka
/// `AutoTopicCreationManager`): each name with the controllers' default partition count and
/// replication factor (-1), no configs, no assignment.
pub fn auto_create_request(
    names: Vec<kafka_protocol::messages::TopicName>,
) -> KCreateTopicsRequest {
    use kafka_protocol::messages::create_topics_request::CreatableTopic;
    KCreateTopicsRequest::default()
        .with_timeout_ms(30_000)
        .with_topics(
            names
                .into_iter()
                .map(|name| {
                    CreatableTopic::default()
                        .with_name(name)
                        .with_num_partitions(-1)
                        .with_replication_factor(-1)
                })
                .collect(),
        )
}

/// Keel's CreateTopics from Kafka's. Every field maps one to one: `num_partitions` and
/// `replication_factor` -1 mean the controller's defaults (KIP-464, Kafka v4+; the controller
/// also accepts them from older versions, as Kafka's `ReplicationControlManager` does),
/// `assignments` are explicit placements, `configs` the topic's overrides (a null value is
/// INVALID_CONFIG, decided by the controller), `validate_only` writes nothing.
/// `timeout_ms` is not forwarded: the broker bounds its wait with it ([`crate::kafka::admin`]).
pub fn create_topics_request(req: &KCreateTopicsRequest) -> ctl::CreateTopicsRequest {
    ctl::CreateTopicsRequest {
        validate_only: req.validate_only,
        topics: req
            .topics
            .iter()
            .map(|t| ctl::CreatableTopic {
                name: t.name.0.to_string(),
                num_partitions: t.num_partitions,
                replication_factor: i32::from(t.replication_factor),
                assignments: t
                    .assignments
                    .iter()
                    .map(|a| ctl::CreatableReplicaAssignment {
                        partition_index: a.partition_index,
                        broker_ids: a.broker_ids.iter().map(|b| b.0).collect(),
                    })
                    .collect(),
                configs: t
                    .configs
                    .iter()
                    .map(|c| ctl::ConfigEntry {
                        name: c.name.to_string(),
                        value: c.value.as_ref().map(|v| v.to_string()),
                    })
                    .collect(),
            })
            .collect(),
    }
}

/// Kafka's CreateTopics response from the controller's reply (or from `failure` when the
/// controller could not be asked), one result per requested topic in request order. v5+
/// carries the topic's partitions, replication factor and effective configs as the controller
/// answered them (also for `validate_only`); each config's source is DYNAMIC_TOPIC_CONFIG when
/// the request set it, else DEFAULT_CONFIG (the controller's reply does not say whether a
/// default is Kafka's or a cluster-wide dynamic one). v7 carries the topic id. Failed topics
/// have -1 partitions and replication factor, no configs, a nil id and the controller's
/// message; successful ones a null message.
pub fn create_topics_response(
    reply: Result<ctl::CreateTopicsReply, Failure>,
    req: &KCreateTopicsRequest,
    version: i16,
) -> CreateTopicsResponse {
    let reply = settled(reply);
    let topics = match reply {
        Err(f) => req
            .topics
            .iter()
            .map(|t| {
                CreatableTopicResult::default()
                    .with_name(t.name.clone())
                    .with_error_code(f.code)
                    .with_error_message(Some(str_bytes(f.message.clone())))
                    .with_num_partitions(-1)
                    .with_replication_factor(-1)
                    .with_configs(None)
            })
            .collect(),
        Ok(r) => r
            .topics
            .into_iter()
            .map(|t| {
                let failed = t.error.as_ref().is_some_and(|e| e.code != 0);
                let requested: BTreeSet<&str> = req
                    .topics
                    .iter()
                    .find(|k| k.name.0.as_str() == t.name)
                    .map(|k| k.configs.iter().map(|c| c.name.as_str()).collect())
                    .unwrap_or_default();
                let configs = (!failed && version >= 5).then(|| {
                    t.configs
                        .iter()
                        .map(|c| {
                            let source = if requested.contains(c.name.as_str()) {
                                CONFIG_SOURCE_TOPIC
                            } else {
                                CONFIG_SOURCE_DEFAULT
                            };
                            CreatableTopicConfigs::default()
                                .with_name(str_bytes(c.name.clone()))
                                .with_value(c.value.clone().map(str_bytes))
                                .with_config_source(source)
                        })
                        .collect()
                });
                CreatableTopicResult::default()
                    .with_name(topic_name(t.name))
                    .with_topic_id(if failed {
                        uuid::Uuid::nil()
                    } else {
                        uuid_of(&t.topic_id)
                    })
                    .with_error_code(code(t.error.as_ref()))
                    .with_error_message(message(t.error.as_ref()))
                    .with_num_partitions(if failed { -1 } else { t.num_partitions })
                    .with_replication_factor(if failed {
                        -1
                    } else {
                        i16::try_from(t.replication_factor).unwrap_or(-1)
                    })
                    .with_configs(configs)
            })
            .collect(),
    };
    CreateTopicsResponse::default().with_topics(topics)
}

// ---------------------------------------------------------------------------------------------
// DeleteTopics (Kafka: DeleteTopicsRequest/Response v1-6)
// ---------------------------------------------------------------------------------------------

/// What becomes of one topic of a Kafka DeleteTopics.
#[derive(Debug, Clone, PartialEq)]
enum DeleteSlot {
    /// Sent to the controller as entry number `.0` of [`DeletePlan::forward`].
    Forwarded(usize),
    /// Answered by the broker (a malformed v6 entry).
    Refused {
        name: Option<String>,
        topic_id: uuid::Uuid,
        failure: Failure,
    },
}

/// A Kafka DeleteTopics split into what is forwarded and what the broker refuses itself.
#[derive(Debug, Clone, PartialEq)]
pub struct DeletePlan {
    /// The controller request (may have no topics: then nothing needs sending).
    pub forward: ctl::DeleteTopicsRequest,
    slots: Vec<DeleteSlot>,
}

/// Keel's DeleteTopics from Kafka's: v1-5 name topics in `topic_names`, v6 in `topics`, each
/// by name or by id (KIP-516). A v6 entry with both a name and a non-nil id, or with
/// neither, is refused with INVALID_REQUEST and not forwarded (Kafka's
/// `DeleteTopicsRequest` handling: "You may not specify both topic name and topic id");
/// duplicates and unknown topics are the controller's to answer (INVALID_REQUEST,
/// UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_ID).
pub fn delete_topics_plan(req: &KDeleteTopicsRequest, version: i16) -> DeletePlan {
    let mut forward = ctl::DeleteTopicsRequest::default();
    let mut slots = Vec::new();
    let mut send = |state: ctl::DeleteTopicState, slots: &mut Vec<DeleteSlot>| {
        slots.push(DeleteSlot::Forwarded(forward.topics.len()));
        forward.topics.push(state);
    };
    if version < 6 {
        for name in &req.topic_names {
            send(
                ctl::DeleteTopicState {
                    name: name.0.to_string(),
                    topic_id: Bytes::new(),
                },
                &mut slots,
            );
        }
    } else {
        for t in &req.topics {
            let name = t.name.as_ref().map(|n| n.0.to_string());
            match (name, t.topic_id.is_nil()) {
                (Some(name), true) => send(
                    ctl::DeleteTopicState {
                        name,
                        topic_id: Bytes::new(),
                    },
                    &mut slots,
                ),
                (None, false) => send(
                    ctl::DeleteTopicState {
                        name: String::new(),
                        topic_id: Bytes::copy_from_slice(t.topic_id.as_bytes()),
                    },
                    &mut slots,
                ),
                (name, has_no_id) => slots.push(DeleteSlot::Refused {
                    failure: Failure::new(
                        ErrorCode::InvalidRequest,
                        if has_no_id {
                            "a topic needs a name or a topic id"
                        } else {
                            "you may not specify both topic name and topic id"
                        },
                    ),
                    name: name.map(|n| keel_proto::limits::clip(&n).into_owned()),
                    topic_id: t.topic_id,
                }),
            }
        }
    }
    DeletePlan {
        forward: std::mem::take(&mut forward),
        slots,
    }
}

/// Kafka's DeleteTopics response: one result per requested topic in request order, from the
/// controller's reply (or `failure` for every forwarded topic). v6 carries topic ids and a
/// null name where none is known (a topic asked by an unknown id); v1-5 always a name. The
/// error message is v5+ (null on success).
pub fn delete_topics_response(
    plan: &DeletePlan,
    reply: Result<ctl::DeleteTopicsReply, Failure>,
    version: i16,
) -> DeleteTopicsResponse {
    let reply = settled(reply);
    let name_of = |name: String| {
        if name.is_empty() && version >= 6 {
            None
        } else {
            Some(topic_name(name))
        }
    };
    let responses = plan
        .slots
        .iter()
        .map(|slot| {
            let (name, topic_id, error_code, error_message) = match slot {
                DeleteSlot::Refused {
                    name,
                    topic_id,
                    failure,
                } => (
                    name.clone().unwrap_or_default(),
                    *topic_id,
                    failure.code,
                    Some(failure.message.clone()),
                ),
                DeleteSlot::Forwarded(i) => {
                    let asked = &plan.forward.topics[*i];
                    let asked_id = uuid_of(&asked.topic_id);
                    match (&reply, reply.as_ref().ok().and_then(|r| r.topics.get(*i))) {
                        (Err(f), _) => (
                            asked.name.clone(),
                            asked_id,
                            f.code,
                            Some(f.message.clone()),
                        ),
                        (Ok(_), Some(t)) => (
                            if t.name.is_empty() {
                                asked.name.clone()
                            } else {
                                t.name.clone()
                            },
                            if t.topic_id.len() == 16 {
                                uuid_of(&t.topic_id)
                            } else {
                                asked_id
                            },
                            code(t.error.as_ref()),
                            message(t.error.as_ref()).map(|m| m.to_string()),
                        ),
                        (Ok(_), None) => (
                            asked.name.clone(),
                            asked_id,
                            ErrorCode::UnknownServerError.code(),
                            Some("the controller did not answer for this topic".to_string()),
                        ),
                    }
                }
            };
            DeletableTopicResult::default()
                .with_name(name_of(name))
                .with_topic_id(topic_id)
                .with_error_code(error_code)
                .with_error_message(error_message.map(str_bytes))
        })
        .collect();
    DeleteTopicsResponse::default().with_responses(responses)
}

// ---------------------------------------------------------------------------------------------
// DescribeConfigs (Kafka: DescribeConfigsRequest/Response v1-4)
// ---------------------------------------------------------------------------------------------

/// Kafka's `ConfigResource.Type.TOPIC`.
pub const RESOURCE_TOPIC: i8 = 2;
/// Kafka's `ConfigResource.Type.BROKER` (an empty name: the cluster-wide defaults).
pub const RESOURCE_BROKER: i8 = 4;

/// One value from the broker's own config file that stands in for Kafka's default of a key
/// (Kafka's `STATIC_BROKER_CONFIG` source): the replica manager applies it to topics without
/// an override, so DescribeConfigs reports it instead of Kafka's default. An entry with an
/// empty `topic_name` is a fact of this broker process the controllers do not know
/// (`authorizer.class.name`, `node.id`, ...): it is added, read-only, to this broker's own
/// BROKER resource ([`broker_only_entries`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaticBrokerConfig {
    /// The topic-level key, e.g. `retention.ms`; empty for a broker-only key.
    pub topic_name: &'static str,
    /// The broker-level key, e.g. `log.retention.ms`.
    pub broker_name: &'static str,
    /// The value, in Kafka's format (`-1` = no limit).
    pub value: String,
}

/// Kafka's `ConfigDef.Type` id of a key Keel knows (DescribeConfigs v3+ `config_type`):
/// BOOLEAN 1, STRING 2, INT 3, LONG 5, DOUBLE 6, LIST 7; 0 (UNKNOWN) for anything else.
pub fn config_type(name: &str) -> i8 {
    use keel_metadata_log::configs::{ConfigKind, broker_config_def, topic_config_def};
    match topic_config_def(name)
        .or_else(|| broker_config_def(name))
        .map(|d| d.kind)
    {
        Some(ConfigKind::Bool) => 1,
        Some(ConfigKind::Choice(_)) => 2,
        Some(ConfigKind::Int { .. }) => 3,
        Some(ConfigKind::Long { .. }) => 5,
        Some(ConfigKind::Double { .. }) => 6,
        Some(ConfigKind::CleanupPolicy | ConfigKind::ThrottledReplicas) => 7,
        None => 0,
    }
}

/// A Kafka DescribeConfigs split into the resources forwarded and those the broker refuses.
#[derive(Debug, Clone, PartialEq)]
pub struct DescribeConfigsPlan {
    /// The controller request (may have no resources: then nothing needs sending).
    pub forward: ctl::DescribeConfigsRequest,
    /// Per requested resource: its index in `forward`, or the refusal.
    slots: Vec<Result<usize, Failure>>,
}

/// Keel's DescribeConfigs from Kafka's. TOPIC (2) resources are forwarded as they are.
/// BROKER (4) resources are forwarded when the name is empty (the cluster-wide defaults) or
/// this broker's id (`self_id`); another broker's id is INVALID_REQUEST, as Kafka's
/// `ConfigHelper` answers ("Unexpected broker id"; clients send a broker's resource to that
/// broker). Any other type (BROKER_LOGGER 8, CLIENT_METRICS 16, GROUP 32, UNKNOWN 0, ...) is
/// INVALID_REQUEST for that resource; Keel's own CLUSTER type (16) is never forwarded, since
/// Kafka's 16 is CLIENT_METRICS. Null or empty `configuration_keys` asks every key (Kafka
/// `ConfigHelper`: `configurationKeys == null || isEmpty`); a non-empty list only those keys,
/// filtered again in [`describe_configs_response`]. `include_documentation` is v3+ (false before).
pub fn describe_configs_plan(
    req: &KDescribeConfigsRequest,
    version: i16,
    self_id: i32,
) -> DescribeConfigsPlan {
    let mut forward = ctl::DescribeConfigsRequest {
        resources: Vec::new(),
        include_synonyms: req.include_synonyms,
        include_documentation: version >= 3 && req.include_documentation,
        answering_broker: Some(self_id),
    };
    let slots = req
        .resources
        .iter()
        .map(|r| {
            let name = r.resource_name.as_str();
            let keel_type = match r.resource_type {
                RESOURCE_TOPIC => keel_proto::metadata::ConfigResourceType::Topic,
                RESOURCE_BROKER if name.is_empty() || name == self_id.to_string() => {
                    keel_proto::metadata::ConfigResourceType::Broker
                }
                RESOURCE_BROKER => {
                    return Err(Failure::new(
                        ErrorCode::InvalidRequest,
                        format!(
                            "unexpected broker id {:?}: this is broker {self_id}; ask that \
                             broker, or use an empty name for the cluster defaults",
                            keel_proto::limits::clip(name)
                        ),
                    ));
                }
                other => {
                    return Err(Failure::new(
                        ErrorCode::InvalidRequest,
                        format!(
                            "config resource type {other} is not supported (TOPIC 2 and \
                             BROKER 4 are)"
                        ),
                    ));
                }
            };
            forward.resources.push(ctl::DescribeConfigsResource {
                resource_type: keel_type as i32,
                resource_name: name.to_string(),
                configuration_keys: r
                    .configuration_keys
                    .iter()
                    .flatten()
                    .map(|k| k.to_string())
                    .collect(),
            });
            Ok(forward.resources.len() - 1)
        })
        .collect();
    DescribeConfigsPlan { forward, slots }
}

/// Kafka's DescribeConfigs response: one result per requested resource in request order,
/// with the controller's entries (or `failure` for every forwarded resource). For a TOPIC
/// and for this broker's own BROKER resource, a key whose value is Kafka's default while
/// `statics` has another value for it is reported with that value and source
/// STATIC_BROKER_CONFIG (what this broker applies; Kafka's broker reports its config file the
/// same way). With `include_synonyms` the synonyms list starts with the effective value, then
/// the lower-precedence ones (Kafka's `ConfigHelper` lists every source, the effective one
/// first). v3+ adds `config_type` and `documentation` (null when not asked).
pub fn describe_configs_response(
    plan: &DescribeConfigsPlan,
    req: &KDescribeConfigsRequest,
    reply: Result<ctl::DescribeConfigsReply, Failure>,
    version: i16,
    self_id: i32,
    statics: &[StaticBrokerConfig],
) -> DescribeConfigsResponse {
    let reply = settled(reply);
    let results = req
        .resources
        .iter()
        .zip(&plan.slots)
        .map(|(asked, slot)| {
            let out = DescribeConfigsResult::default()
                .with_resource_type(asked.resource_type)
                .with_resource_name(asked.resource_name.clone());
            let result = match (slot, &reply) {
                (Err(f), _) | (Ok(_), Err(f)) => Err(f.clone()),
                (Ok(i), Ok(r)) => r.results.get(*i).cloned().ok_or_else(|| {
                    Failure::new(
                        ErrorCode::UnknownServerError,
                        "the controller did not answer for this resource",
                    )
                }),
            };
            let result = match result {
                Err(f) => {
                    return out
                        .with_error_code(f.code)
                        .with_error_message(Some(str_bytes(f.message)));
                }
                Ok(r) => r,
            };
            if let Some(e) = result.error.as_ref().filter(|e| e.code != 0) {
                return out
                    .with_error_code(code(Some(e)))
                    .with_error_message(message(Some(e)));
            }
            let by_topic = asked.resource_type == RESOURCE_TOPIC;
            let overlay = by_topic || asked.resource_name.as_str() == self_id.to_string();
            let wanted: Option<BTreeSet<&str>> = asked
                .configuration_keys
                .as_ref()
                .filter(|keys| !keys.is_empty())
                .map(|keys| keys.iter().map(|k| k.as_str()).collect());
            let mut result = result;
            if !by_topic && overlay {
                let own =
                    broker_only_entries(statics, &result.configs, wanted.iter().flatten().copied());
                result.configs.extend(own);
            }
            let configs = result
                .configs
                .into_iter()
                .filter(|c| wanted.as_ref().is_none_or(|w| w.contains(c.name.as_str())))
                .map(|c| {
                    let stat = statics.iter().find(|s| {
                        c.name
                            == if by_topic {
                                s.topic_name
                            } else {
                                s.broker_name
                            }
                    });
                    config_entry(c, overlay.then_some(stat).flatten(), by_topic, req, version)
                })
                .collect();
            out.with_error_code(0)
                .with_error_message(None)
                .with_configs(configs)
        })
        .collect();
    DescribeConfigsResponse::default().with_results(results)
}

/// The controller's DescribeConfigs `reply` to `req` as broker `self_id` applies it (the
/// gRPC `BrokerService.DescribeConfigs`; [`describe_configs_response`] does the same on
/// Kafka's types for the Kafka listener): for TOPIC resources and this broker's own BROKER
/// resource, a key whose value is Kafka's default but which the broker's file sets
/// (`statics`) gets that value with source STATIC_BROKER_CONFIG, and with
/// `include_synonyms` the replaced default becomes its first lower-precedence synonym.
/// Results with an error, other brokers and the cluster default are left as they are.
pub fn overlay_static_configs(
    req: &ctl::DescribeConfigsRequest,
    reply: &mut ctl::DescribeConfigsReply,
    self_id: i32,
    statics: &[StaticBrokerConfig],
) {
    for (asked, result) in req.resources.iter().zip(reply.results.iter_mut()) {
        if result.error.as_ref().is_some_and(|e| e.code != 0) {
            continue;
        }
        let by_topic = asked.resource_type == i32::from(RESOURCE_TOPIC);
        let own = asked.resource_type == i32::from(RESOURCE_BROKER)
            && asked.resource_name == self_id.to_string();
        if !by_topic && !own {
            continue;
        }
        if own {
            let extra = broker_only_entries(
                statics,
                &result.configs,
                asked.configuration_keys.iter().map(String::as_str),
            );
            result.configs.extend(extra);
        }
        for c in &mut result.configs {
            let stat = statics.iter().find(|s| {
                c.name
                    == if by_topic {
                        s.topic_name
                    } else {
                        s.broker_name
                    }
            });
            let Some(s) = stat else { continue };
            if c.config_source != i32::from(CONFIG_SOURCE_DEFAULT) {
                if req.include_synonyms {
                    add_static_synonym(&mut c.synonyms, s);
                }
                continue;
            }
            if c.value.as_ref() == Some(&s.value) {
                continue;
            }
            let default = c.value.replace(s.value.clone());
            c.config_source = i32::from(CONFIG_SOURCE_STATIC_BROKER);
            if req.include_synonyms {
                c.synonyms.insert(
                    0,
                    ctl::DescribeConfigsSynonym {
                        name: s.broker_name.to_string(),
                        value: default,
                        source: i32::from(CONFIG_SOURCE_DEFAULT),
                    },
                );
            }
        }
    }
}

/// With a dynamic or topic value in effect, the broker file's value `s` among the
/// lower-precedence `synonyms`, before the DEFAULT_CONFIG one (Kafka's `ConfigHelper` lists
/// every source in precedence order: topic, dynamic broker, dynamic default, static, default),
/// when it differs from that default (Keel cannot tell a file that repeats the default from
/// one that leaves the key out) and is not listed yet.
fn add_static_synonym(synonyms: &mut Vec<ctl::DescribeConfigsSynonym>, s: &StaticBrokerConfig) {
    let static_source = i32::from(CONFIG_SOURCE_STATIC_BROKER);
    let at = synonyms
        .iter()
        .position(|y| y.source == i32::from(CONFIG_SOURCE_DEFAULT));
    let default = at.and_then(|i| synonyms[i].value.as_ref());
    if default == Some(&s.value) || synonyms.iter().any(|y| y.source == static_source) {
        return;
    }
    synonyms.insert(
        at.unwrap_or(synonyms.len()),
        ctl::DescribeConfigsSynonym {
            name: s.broker_name.to_string(),
            value: Some(s.value.clone()),
            source: static_source,
        },
    );
}

/// The broker-only entries of `statics` (empty `topic_name`) that `result` lacks, as
/// read-only STATIC_BROKER_CONFIG entries, filtered by the asked `keys` (empty: every key).
/// Kafka's broker describes every key of its config file; the controllers describe the
/// dynamic and cluster-wide keys, and these come from the broker answering. Clients read
/// `authorizer.class.name` to learn whether ACLs are enforced (librdkafka's `describe_acls`
/// drops SECURITY_DISABLED).
pub fn broker_only_entries<'a>(
    statics: &[StaticBrokerConfig],
    result: &[ctl::DescribeConfigsEntry],
    keys: impl Iterator<Item = &'a str> + Clone,
) -> Vec<ctl::DescribeConfigsEntry> {
    statics
        .iter()
        .filter(|s| s.topic_name.is_empty())
        .filter(|s| !result.iter().any(|c| c.name == s.broker_name))
        .filter(|s| {
            let mut keys = keys.clone().peekable();
            keys.peek().is_none() || keys.any(|k| k == s.broker_name)
        })
        .map(|s| ctl::DescribeConfigsEntry {
            name: s.broker_name.to_string(),
            value: Some(s.value.clone()),
            read_only: true,
            config_source: i32::from(CONFIG_SOURCE_STATIC_BROKER),
            is_sensitive: false,
            synonyms: Vec::new(),
            documentation: String::new(),
        })
        .collect()
}

/// One described key (see [`describe_configs_response`]). The first synonym is the
/// effective value; a topic key's value that does not come from the topic is named with the
/// broker key it comes from (`log.retention.ms` for `retention.ms`: Kafka's
/// `ConfigHelper.createTopicConfigEntry` lists the broker synonyms by their broker names).
fn config_entry(
    c: ctl::DescribeConfigsEntry,
    stat: Option<&StaticBrokerConfig>,
    by_topic: bool,
    req: &KDescribeConfigsRequest,
    version: i16,
) -> DescribeConfigsResourceResult {
    let mut value = c.value.clone();
    let mut source = i8::try_from(c.config_source).unwrap_or(0);
    let mut synonyms: Vec<DescribeConfigsSynonym> = Vec::new();
    let synonym = |name: &str, value: Option<&String>, source: i8| {
        DescribeConfigsSynonym::default()
            .with_name(str_bytes(name.to_string()))
            .with_value(value.cloned().map(str_bytes))
            .with_source(source)
    };
    let mut lower = c.synonyms.clone();
    let effective_name = match stat {
        Some(s) if source == CONFIG_SOURCE_DEFAULT && value.as_ref() != Some(&s.value) => {
            value = Some(s.value.clone());
            source = CONFIG_SOURCE_STATIC_BROKER;
            s.broker_name.to_string()
        }
        stat => {
            if let Some(s) = stat.filter(|_| source != CONFIG_SOURCE_DEFAULT) {
                add_static_synonym(&mut lower, s);
            }
            let broker_key = (by_topic && source != CONFIG_SOURCE_TOPIC)
                .then(|| keel_metadata_log::configs::topic_config_def(&c.name))
                .flatten()
                .and_then(|d| d.broker_synonym());
            broker_key.map_or_else(|| c.name.clone(), str::to_string)
        }
    };
    if req.include_synonyms {
        synonyms.push(synonym(&effective_name, value.as_ref(), source));
        if source == CONFIG_SOURCE_STATIC_BROKER {
            // The default the static value replaced.
            synonyms.push(synonym(
                &effective_name,
                c.value.as_ref(),
                CONFIG_SOURCE_DEFAULT,
            ));
        }
        synonyms.extend(lower.iter().map(|s| {
            synonym(
                &s.name,
                s.value.as_ref(),
                i8::try_from(s.source).unwrap_or(0),
            )
        }));
    }
    let mut out = DescribeConfigsResourceResult::default()
        .with_name(str_bytes(c.name.clone()))
        .with_value(value.map(str_bytes))
        .with_read_only(c.read_only)
        .with_config_source(source)
        .with_is_sensitive(c.is_sensitive)
        .with_synonyms(synonyms);
    if version >= 3 {
        out = out
            .with_config_type(config_type(&c.name))
            .with_documentation(
                (req.include_documentation && !c.documentation.is_empty())
                    .then(|| str_bytes(c.documentation)),
            );
    }
    out
}

// ---------------------------------------------------------------------------------------------
// DescribeCluster (Kafka: DescribeClusterRequest/Response v0-2, KIP-700, KIP-919, KIP-1073)
// ---------------------------------------------------------------------------------------------

/// Kafka's `EndpointType.BROKER` (DescribeCluster v1+, KIP-919).
pub const ENDPOINT_TYPE_BROKER: i8 = 1;
/// Kafka's `EndpointType.CONTROLLER`.
pub const ENDPOINT_TYPE_CONTROLLER: i8 = 2;

/// The cluster operations a client may perform, as Kafka's `authorizedOperations` bit field
/// of the CLUSTER resource when no authorizer is configured (every operation the resource
/// supports is allowed; Keel has no ACLs): CREATE 5, ALTER 7, DESCRIBE 8, CLUSTER_ACTION 9,
/// DESCRIBE_CONFIGS 10, ALTER_CONFIGS 11, IDEMPOTENT_WRITE 12 (`AclOperation` codes, Kafka's
/// `AclEntry.supportedOperations(CLUSTER)`).
pub const CLUSTER_AUTHORIZED_OPERATIONS: i32 =
    (1 << 5) | (1 << 7) | (1 << 8) | (1 << 9) | (1 << 10) | (1 << 11) | (1 << 12);

/// Keel's DescribeCluster from Kafka's, or the failure to answer at once: a broker endpoint
/// answers `endpoint_type` BROKER (1) only; CONTROLLER (2) is MISMATCHED_ENDPOINT_TYPE (114),
/// anything else UNSUPPORTED_ENDPOINT_TYPE (115) (KIP-919, Kafka's
/// `AuthHelper.computeDescribeClusterResponse`). Fenced brokers are asked for with v2's
/// `include_fenced_brokers` (KIP-1073).
pub fn describe_cluster_request(
    req: &KDescribeClusterRequest,
    version: i16,
) -> Result<ctl::DescribeClusterRequest, Failure> {
    let endpoint_type = if version >= 1 {
        req.endpoint_type
    } else {
        ENDPOINT_TYPE_BROKER
    };
    match endpoint_type {
        ENDPOINT_TYPE_BROKER => Ok(ctl::DescribeClusterRequest {
            include_fenced_brokers: version >= 2 && req.include_fenced_brokers,
            include_image_digest: false,
        }),
        ENDPOINT_TYPE_CONTROLLER => Err(Failure {
            code: ResponseError::MismatchedEndpointType.code(),
            message: "this is a broker endpoint: it describes brokers (endpoint type 1)".into(),
        }),
        other => Err(Failure {
            code: ResponseError::UnsupportedEndpointType.code(),
            message: format!("endpoint type {other} is not supported (1, brokers, is)"),
        }),
    }
}

/// Kafka's DescribeCluster response from the controller's reply (or `failure`): the brokers
/// with an endpoint on `listener` (the listener the request came in on), by id, unfenced
/// ones only unless v2's `include_fenced_brokers` asked for fenced ones too (marked
/// `is_fenced`); `controller_id` is a live listed broker, as in Metadata (Kafka clients cannot
/// reach KRaft controllers): `self_id` when it is listed and unfenced, else the lowest such
/// id, else -1. `cluster_authorized_operations` is [`CLUSTER_AUTHORIZED_OPERATIONS`] when
/// asked, else `i32::MIN` (Kafka's "not requested"). `endpoint_type` is BROKER.
pub fn describe_cluster_response(
    reply: Result<ctl::DescribeClusterReply, Failure>,
    req: &KDescribeClusterRequest,
    version: i16,
    listener: &str,
    self_id: i32,
) -> DescribeClusterResponse {
    let reply = settled(reply);
    let out = DescribeClusterResponse::default()
        .with_endpoint_type(ENDPOINT_TYPE_BROKER)
        .with_cluster_authorized_operations(if req.include_cluster_authorized_operations {
            CLUSTER_AUTHORIZED_OPERATIONS
        } else {
            AUTHORIZED_OPERATIONS_OMITTED
        });
    let reply = match reply {
        Err(f) => {
            return out
                .with_error_code(f.code)
                .with_error_message(Some(str_bytes(f.message)));
        }
        Ok(r) => r,
    };
    let with_fenced = version >= 2 && req.include_fenced_brokers;
    let mut brokers: Vec<DescribeClusterBroker> = reply
        .brokers
        .iter()
        .filter(|b| with_fenced || !b.fenced)
        .filter_map(|b| {
            let ep = b.endpoints.iter().find(|e| e.name == listener)?;
            Some(
                DescribeClusterBroker::default()
                    .with_broker_id(BrokerId(b.broker_id))
                    .with_host(str_bytes(ep.host.clone()))
                    .with_port(ep.port as i32)
                    .with_rack((!b.rack.is_empty()).then(|| str_bytes(b.rack.clone())))
                    .with_is_fenced(with_fenced && b.fenced),
            )
        })
        .collect();
    brokers.sort_by_key(|b| b.broker_id.0);
    let live = |id: i32| brokers.iter().any(|b| b.broker_id.0 == id && !b.is_fenced);
    let controller_id = if live(self_id) {
        self_id
    } else {
        brokers
            .iter()
            .find(|b| !b.is_fenced)
            .map_or(-1, |b| b.broker_id.0)
    };
    out.with_cluster_id(str_bytes(reply.cluster_id))
        .with_controller_id(BrokerId(controller_id))
        .with_brokers(brokers)
}

// ---------------------------------------------------------------------------------------------
// CreatePartitions (Kafka: CreatePartitionsRequest/Response v0-3, KIP-195)
// ---------------------------------------------------------------------------------------------

/// Keel's CreatePartitions from Kafka's, field for field: `count` is the topic's new total
/// partition count, `assignments` the replicas of each new partition in order (null = the
/// controller places them, as Kafka's `ReplicationControlManager.createPartitions` does),
/// `validate_only` writes nothing. `timeout_ms` is not forwarded: the broker bounds its wait
/// with it ([`crate::kafka::admin`]).
pub fn create_partitions_request(req: &KCreatePartitionsRequest) -> ctl::CreatePartitionsRequest {
    ctl::CreatePartitionsRequest {
        validate_only: req.validate_only,
        topics: req
            .topics
            .iter()
            .map(|t| ctl::CreatePartitionsTopic {
                name: t.name.0.to_string(),
                count: t.count,
                assignments: t
                    .assignments
                    .iter()
                    .flatten()
                    .map(|a| ctl::CreatePartitionsAssignment {
                        broker_ids: a.broker_ids.iter().map(|b| b.0).collect(),
                    })
                    .collect(),
            })
            .collect(),
    }
}

/// Kafka's CreatePartitions response: one result per requested topic in request order, with
/// the controller's error for that topic (null message on success), or `failure` (and a
/// request-level error of the reply) for every topic.
pub fn create_partitions_response(
    reply: Result<ctl::CreatePartitionsReply, Failure>,
    req: &KCreatePartitionsRequest,
) -> KCreatePartitionsResponse {
    let reply = settled(reply);
    let results = req
        .topics
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let outcome = per_item(
                &reply,
                |r| r.results.get(i).filter(|x| x.name == t.name.0.as_str()),
                "topic",
            );
            let (error_code, error_message) = item_error(outcome, |x| x.error.as_ref());
            KCreatePartitionsTopicResult::default()
                .with_name(t.name.clone())
                .with_error_code(error_code)
                .with_error_message(error_message)
        })
        .collect();
    KCreatePartitionsResponse::default().with_results(results)
}

// ---------------------------------------------------------------------------------------------
// IncrementalAlterConfigs (Kafka: IncrementalAlterConfigsRequest/Response v0-1, KIP-339)
// ---------------------------------------------------------------------------------------------

/// What an IncrementalAlterConfigs request becomes: the resources forwarded, and for each
/// requested resource either its index among them or its own refusal.
#[derive(Debug, Clone)]
pub struct AlterConfigsPlan {
    /// What goes to the controller (Keel's AlterConfigs is Kafka's IncrementalAlterConfigs).
    pub forward: ctl::AlterConfigsRequest,
    /// Per requested resource: `Ok(index into forward.resources)` or its refusal.
    pub slots: Vec<Result<usize, Failure>>,
}

/// Keel's AlterConfigs from Kafka's IncrementalAlterConfigs. TOPIC (2) and BROKER (4)
/// resources go to the controller as they are (a BROKER with an empty name is the
/// cluster-wide default, a broker id one broker; the controller validates names, keys,
/// values and operations: SET 0, DELETE 1, APPEND 2 and SUBTRACT 3 with Kafka's numbers).
/// Other types (BROKER_LOGGER 8, CLIENT_METRICS 16, GROUP 32) are refused with
/// INVALID_REQUEST for that resource only, and so is an operation outside 0..=3 (Kafka's
/// `AlterConfigOp.OpType.forId` fails the request's parsing for it).
pub fn alter_configs_plan(req: &KIncrementalAlterConfigsRequest) -> AlterConfigsPlan {
    let mut forward = ctl::AlterConfigsRequest {
        resources: Vec::new(),
        validate_only: req.validate_only,
    };
    let slots = req
        .resources
        .iter()
        .map(|r| {
            let resource_type = alterable_resource_type(r.resource_type)?;
            let configs =
                r.configs
                    .iter()
                    .map(|c| {
                        let op = ctl::AlterConfigOp::try_from(i32::from(c.config_operation))
                            .map_err(|_| {
                                Failure::new(
                                    ErrorCode::InvalidRequest,
                                    format!(
                                        "config {:?}: unknown operation {} (SET 0, DELETE 1, \
                                     APPEND 2, SUBTRACT 3)",
                                        keel_proto::limits::clip(c.name.as_str()),
                                        c.config_operation
                                    ),
                                )
                            })?;
                        Ok(ctl::AlterableConfig {
                            name: c.name.to_string(),
                            op: op as i32,
                            value: c.value.as_ref().map(|v| v.to_string()),
                        })
                    })
                    .collect::<Result<Vec<_>, Failure>>()?;
            forward.resources.push(ctl::AlterConfigsResource {
                resource_type: resource_type as i32,
                resource_name: r.resource_name.to_string(),
                configs,
                replace_unlisted: false,
            });
            Ok(forward.resources.len() - 1)
        })
        .collect();
    AlterConfigsPlan { forward, slots }
}

/// The config resource types both AlterConfigs APIs take: TOPIC (2) and BROKER (4); any
/// other is INVALID_REQUEST for that resource.
fn alterable_resource_type(t: i8) -> Result<keel_proto::metadata::ConfigResourceType, Failure> {
    match t {
        RESOURCE_TOPIC => Ok(keel_proto::metadata::ConfigResourceType::Topic),
        RESOURCE_BROKER => Ok(keel_proto::metadata::ConfigResourceType::Broker),
        other => Err(Failure::new(
            ErrorCode::InvalidRequest,
            format!("config resource type {other} is not supported (TOPIC 2 and BROKER 4 are)"),
        )),
    }
}

/// Each requested resource's outcome under `plan` (in request order): its own refusal, or
/// the controller's error for it (or the whole reply's failure).
fn alter_configs_outcomes(
    plan: &AlterConfigsPlan,
    reply: Result<ctl::AlterConfigsReply, Failure>,
) -> Vec<(i16, Option<StrBytes>)> {
    let reply = settled(reply);
    plan.slots
        .iter()
        .map(|slot| match slot {
            Err(f) => (f.code, Some(str_bytes(f.message.clone()))),
            Ok(i) => item_error(per_item(&reply, |r| r.results.get(*i), "resource"), |x| {
                x.error.as_ref()
            }),
        })
        .collect()
}

/// Keel's AlterConfigs from Kafka's legacy AlterConfigs (v0-2, API 33; confluent-kafka's
/// `alter_configs`, `kafka-configs` before KIP-339): the listed configs replace the
/// resource's whole set of dynamic configs, so the controller deletes every config set on it
/// and not listed (`replace_unlisted`; Kafka's `ConfigurationControlManager.legacyAlterConfigs`).
/// A non-null value is a SET, a null value a DELETE (Kafka drops such a key). Resource types
/// as in [`alter_configs_plan`].
pub fn legacy_alter_configs_plan(req: &KLegacyAlterConfigsRequest) -> AlterConfigsPlan {
    let mut forward = ctl::AlterConfigsRequest {
        resources: Vec::new(),
        validate_only: req.validate_only,
    };
    let slots = req
        .resources
        .iter()
        .map(|r| {
            let resource_type = alterable_resource_type(r.resource_type)?;
            forward.resources.push(ctl::AlterConfigsResource {
                resource_type: resource_type as i32,
                resource_name: r.resource_name.to_string(),
                configs: r
                    .configs
                    .iter()
                    .map(|c| ctl::AlterableConfig {
                        name: c.name.to_string(),
                        op: if c.value.is_some() {
                            ctl::AlterConfigOp::Set
                        } else {
                            ctl::AlterConfigOp::Delete
                        } as i32,
                        value: c.value.as_ref().map(|v| v.to_string()),
                    })
                    .collect(),
                replace_unlisted: true,
            });
            Ok(forward.resources.len() - 1)
        })
        .collect();
    AlterConfigsPlan { forward, slots }
}

/// Kafka's legacy AlterConfigs response, as [`alter_configs_response`].
pub fn legacy_alter_configs_response(
    plan: &AlterConfigsPlan,
    req: &KLegacyAlterConfigsRequest,
    reply: Result<ctl::AlterConfigsReply, Failure>,
) -> KLegacyAlterConfigsResponse {
    let responses = req
        .resources
        .iter()
        .zip(alter_configs_outcomes(plan, reply))
        .map(|(asked, (error_code, error_message))| {
            KLegacyAlterConfigsResourceResponse::default()
                .with_resource_type(asked.resource_type)
                .with_resource_name(asked.resource_name.clone())
                .with_error_code(error_code)
                .with_error_message(error_message)
        })
        .collect();
    KLegacyAlterConfigsResponse::default().with_responses(responses)
}

/// Kafka's IncrementalAlterConfigs response: one per requested resource in request order,
/// with its type and name as asked, and the controller's error for it, its own refusal from
/// the plan, or `failure` (and a request-level error of the reply) for every forwarded one.
pub fn alter_configs_response(
    plan: &AlterConfigsPlan,
    req: &KIncrementalAlterConfigsRequest,
    reply: Result<ctl::AlterConfigsReply, Failure>,
) -> KIncrementalAlterConfigsResponse {
    let responses = req
        .resources
        .iter()
        .zip(alter_configs_outcomes(plan, reply))
        .map(|(asked, (error_code, error_message))| {
            KAlterConfigsResourceResponse::default()
                .with_resource_type(asked.resource_type)
                .with_resource_name(asked.resource_name.clone())
                .with_error_code(error_code)
                .with_error_message(error_message)
        })
        .collect();
    KIncrementalAlterConfigsResponse::default().with_responses(responses)
}

// ---------------------------------------------------------------------------------------------
// ElectLeaders (Kafka: ElectLeadersRequest/Response v0-2, KIP-183, KIP-460)
// ---------------------------------------------------------------------------------------------

/// Keel's ElectLeaders from Kafka's: `election_type` as is (PREFERRED 0, UNCLEAN 1; v0 has
/// none and is PREFERRED), null `topic_partitions` = every partition (`all_partitions`, whose
/// answer leaves out the partitions that needed no election, as Kafka's does). A topic listed
/// with no partitions asks for none, as in Kafka, and is not forwarded (Keel's own API reads an
/// empty list as every partition of the topic). `timeout_ms` bounds the broker's wait.
pub fn elect_leaders_request(req: &KElectLeadersRequest) -> ctl::ElectLeadersRequest {
    ctl::ElectLeadersRequest {
        election_type: i32::from(req.election_type),
        all_partitions: req.topic_partitions.is_none(),
        topic_partitions: req
            .topic_partitions
            .iter()
            .flatten()
            .filter(|t| !t.partitions.is_empty())
            .map(|t| ctl::ElectTopicPartitions {
                topic: t.topic.0.to_string(),
                partitions: t.partitions.clone(),
            })
            .collect(),
    }
}

/// Kafka's ElectLeaders response: the controller's result per topic and partition (null
/// message on success; ELECTION_NOT_NEEDED 84, PREFERRED_LEADER_NOT_AVAILABLE 80,
/// ELIGIBLE_LEADERS_NOT_AVAILABLE 83, UNKNOWN_TOPIC_OR_PARTITION 3 as it decided). A failure
/// of the whole request (not authorized, no controller answered, a request-level error of
/// the reply) is the top-level `error_code` (v1+) and, as Kafka answers, the error of every
/// partition the request named.
pub fn elect_leaders_response(
    reply: Result<ctl::ElectLeadersReply, Failure>,
    req: &KElectLeadersRequest,
    version: i16,
) -> KElectLeadersResponse {
    let reply = settled(reply);
    match reply {
        Ok(r) => KElectLeadersResponse::default().with_replica_election_results(
            r.results
                .into_iter()
                .map(|t| {
                    KReplicaElectionResult::default()
                        .with_topic(topic_name(t.topic))
                        .with_partition_result(
                            t.partitions
                                .iter()
                                .map(|p| {
                                    KElectPartitionResult::default()
                                        .with_partition_id(p.partition_id)
                                        .with_error_code(code(p.error.as_ref()))
                                        .with_error_message(message(p.error.as_ref()))
                                })
                                .collect(),
                        )
                })
                .collect(),
        ),
        Err(f) => {
            let results = req
                .topic_partitions
                .iter()
                .flatten()
                .map(|t| {
                    KReplicaElectionResult::default()
                        .with_topic(t.topic.clone())
                        .with_partition_result(
                            t.partitions
                                .iter()
                                .map(|&p| {
                                    KElectPartitionResult::default()
                                        .with_partition_id(p)
                                        .with_error_code(f.code)
                                        .with_error_message(Some(str_bytes(f.message.clone())))
                                })
                                .collect(),
                        )
                })
                .collect();
            KElectLeadersResponse::default()
                .with_error_code(if version >= 1 { f.code } else { 0 })
                .with_replica_election_results(results)
        }
    }
}

// ---------------------------------------------------------------------------------------------
// AlterPartitionReassignments / ListPartitionReassignments (Kafka: v0, KIP-455)
// ---------------------------------------------------------------------------------------------

/// Keel's AlterPartitionReassignments from Kafka's: each partition's target replicas, or null
/// to cancel the move in progress (Keel's absent `replicas`). `timeout_ms` bounds the
/// broker's wait.
pub fn alter_reassignments_request(
    req: &KAlterPartitionReassignmentsRequest,
) -> ctl::AlterPartitionReassignmentsRequest {
    ctl::AlterPartitionReassignmentsRequest {
        topics: req
            .topics
            .iter()
            .map(|t| ctl::ReassignableTopic {
                name: t.name.0.to_string(),
                partitions: t
                    .partitions
                    .iter()
                    .map(|p| ctl::ReassignablePartition {
                        partition_index: p.partition_index,
                        replicas: p
                            .replicas
                            .as_ref()
                            .map(|r| keel_proto::metadata::ReplicaList {
                                ids: r.iter().map(|b| b.0).collect(),
                            }),
                    })
                    .collect(),
            })
            .collect(),
    }
}

/// Kafka's AlterPartitionReassignments response: the controller's result per topic and
/// partition (null message on success; INVALID_REPLICA_ASSIGNMENT 39,
/// NO_REASSIGNMENT_IN_PROGRESS 85, UNKNOWN_TOPIC_OR_PARTITION 3 as it decided), or a failure
/// of the whole request as the top-level error with no per-partition results (Kafka's
/// `ControllerApis` answers an unauthorized request that way).
pub fn alter_reassignments_response(
    reply: Result<ctl::AlterPartitionReassignmentsReply, Failure>,
    req: &KAlterPartitionReassignmentsRequest,
) -> KAlterPartitionReassignmentsResponse {
    let reply = settled(reply);
    match reply {
        Err(f) => KAlterPartitionReassignmentsResponse::default()
            .with_error_code(f.code)
            .with_error_message(Some(str_bytes(f.message))),
        Ok(r) if r.responses.is_empty() && !req.topics.is_empty() => {
            KAlterPartitionReassignmentsResponse::default()
                .with_error_code(ErrorCode::UnknownServerError.code())
                .with_error_message(Some(str_bytes(
                    "the controller's reply has no results for this request",
                )))
        }
        Ok(r) => KAlterPartitionReassignmentsResponse::default().with_responses(
            r.responses
                .into_iter()
                .map(|t| {
                    KReassignableTopicResponse::default()
                        .with_name(topic_name(t.name))
                        .with_partitions(
                            t.partitions
                                .iter()
                                .map(|p| {
                                    KReassignablePartitionResponse::default()
                                        .with_partition_index(p.partition_index)
                                        .with_error_code(code(p.error.as_ref()))
                                        .with_error_message(message(p.error.as_ref()))
                                })
                                .collect(),
                        )
                })
                .collect(),
        ),
    }
}

/// Keel's ListPartitionReassignments from Kafka's: null topics = every moving partition
/// (Keel's empty list). A topic listed with no partitions asks for none, as in Kafka (Keel's
/// own API reads it as every partition of the topic), so it is left out; `None` when nothing
/// is left to ask (the answer is then empty without asking the controller).
pub fn list_reassignments_request(
    req: &KListPartitionReassignmentsRequest,
) -> Option<ctl::ListPartitionReassignmentsRequest> {
    let Some(topics) = &req.topics else {
        return Some(ctl::ListPartitionReassignmentsRequest { topics: Vec::new() });
    };
    let topics: Vec<_> = topics
        .iter()
        .filter(|t| !t.partition_indexes.is_empty())
        .map(|t| ctl::ListPartitionReassignmentsTopics {
            name: t.name.0.to_string(),
            partition_indexes: t.partition_indexes.clone(),
        })
        .collect();
    (!topics.is_empty()).then_some(ctl::ListPartitionReassignmentsRequest { topics })
}

/// Kafka's ListPartitionReassignments response: every moving partition asked for, with its
/// replicas (the target followed by the replicas being removed), adding and removing
/// replicas; a whole-request failure as the top-level error.
pub fn list_reassignments_response(
    reply: Result<ctl::ListPartitionReassignmentsReply, Failure>,
) -> KListPartitionReassignmentsResponse {
    let reply = settled(reply);
    let brokers = |ids: &[i32]| ids.iter().map(|&b| BrokerId(b)).collect::<Vec<_>>();
    match reply {
        Err(f) => KListPartitionReassignmentsResponse::default()
            .with_error_code(f.code)
            .with_error_message(Some(str_bytes(f.message))),
        Ok(r) => KListPartitionReassignmentsResponse::default().with_topics(
            r.topics
                .into_iter()
                .map(|t| {
                    KOngoingTopicReassignment::default()
                        .with_name(topic_name(t.name))
                        .with_partitions(
                            t.partitions
                                .iter()
                                .map(|p| {
                                    KOngoingPartitionReassignment::default()
                                        .with_partition_index(p.partition_index)
                                        .with_replicas(brokers(&p.replicas))
                                        .with_adding_replicas(brokers(&p.adding_replicas))
                                        .with_removing_replicas(brokers(&p.removing_replicas))
                                })
                                .collect(),
                        )
                })
                .collect(),
        ),
    }
}

// ---------------------------------------------------------------------------------------------
// ACLs (Kafka: DescribeAcls / CreateAcls / DeleteAcls v1-3, KIP-140, KIP-290)
// ---------------------------------------------------------------------------------------------

/// An ACL filter as Kafka's DescribeAcls and DeleteAcls requests carry it (null strings:
/// any).
#[derive(Debug, Clone, Copy)]
pub struct KafkaAclFilter<'a> {
    /// Kafka's `ResourceType` code (ANY 1, TOPIC 2, GROUP 3, CLUSTER 4, TRANSACTIONAL_ID 5).
    pub resource_type: i8,
    /// The resource name, `None` for any.
    pub resource_name: Option<&'a str>,
    /// Kafka's `PatternType` code (ANY 1, MATCH 2, LITERAL 3, PREFIXED 4).
    pub pattern_type: i8,
    /// `User:<name>`, `None` for any.
    pub principal: Option<&'a str>,
    /// A host, `None` for any.
    pub host: Option<&'a str>,
    /// Kafka's `AclOperation` code (ANY 1, ALL 2, READ 3, ...).
    pub operation: i8,
    /// Kafka's `AclPermissionType` code (ANY 1, DENY 2, ALLOW 3).
    pub permission_type: i8,
}

/// Keel's ACL filter from Kafka's: the enums carry Kafka's numbers, so the codes pass as
/// they are, and a null string (any) is Keel's empty one. The controller validates the
/// filter (INVALID_REQUEST naming the field for an unknown code).
pub fn acl_filter(f: KafkaAclFilter<'_>) -> ctl::AclBinding {
    ctl::AclBinding {
        resource_type: i32::from(f.resource_type),
        resource_name: f.resource_name.unwrap_or_default().to_string(),
        pattern_type: i32::from(f.pattern_type),
        principal: f.principal.unwrap_or_default().to_string(),
        host: f.host.unwrap_or_default().to_string(),
        operation: i32::from(f.operation),
        permission_type: i32::from(f.permission_type),
    }
}

/// Keel's ACL from one of Kafka's CreateAcls creations, field for field (same codes).
pub fn acl_creation(c: &KAclCreation) -> ctl::AclBinding {
    ctl::AclBinding {
        resource_type: i32::from(c.resource_type),
        resource_name: c.resource_name.to_string(),
        pattern_type: i32::from(c.resource_pattern_type),
        principal: c.principal.to_string(),
        host: c.host.to_string(),
        operation: i32::from(c.operation),
        permission_type: i32::from(c.permission_type),
    }
}

/// A Keel enum value back as Kafka's `int8` code (every ACL and SCRAM enum value fits).
fn enum_code(v: i32) -> i8 {
    i8::try_from(v).unwrap_or(0)
}

/// Kafka's DescribeAcls response: the matching ACLs grouped by resource (type, name, pattern
/// type; the controller sorts them so), or the whole request's error (SECURITY_DISABLED 54
/// without an authorizer, CLUSTER_AUTHORIZATION_FAILED 31, INVALID_REQUEST 42 for a bad
/// filter).
pub fn describe_acls_response(
    reply: Result<ctl::DescribeAclsReply, Failure>,
) -> KDescribeAclsResponse {
    let r = match settled(reply) {
        Err(f) => {
            return KDescribeAclsResponse::default()
                .with_error_code(f.code)
                .with_error_message(Some(str_bytes(f.message)));
        }
        Ok(r) => r,
    };
    let mut resources: Vec<KDescribeAclsResource> = Vec::new();
    for acl in r.acls {
        let key = (
            enum_code(acl.resource_type),
            acl.resource_name.as_str(),
            enum_code(acl.pattern_type),
        );
        let description = KAclDescription::default()
            .with_principal(str_bytes(acl.principal.clone()))
            .with_host(str_bytes(acl.host.clone()))
            .with_operation(enum_code(acl.operation))
            .with_permission_type(enum_code(acl.permission_type));
        match resources.last_mut() {
            Some(last)
                if (
                    last.resource_type,
                    last.resource_name.as_str(),
                    last.pattern_type,
                ) == key =>
            {
                last.acls.push(description)
            }
            _ => resources.push(
                KDescribeAclsResource::default()
                    .with_resource_type(key.0)
                    .with_resource_name(str_bytes(acl.resource_name.clone()))
                    .with_pattern_type(key.2)
                    .with_acls(vec![description]),
            ),
        }
    }
    KDescribeAclsResponse::default().with_resources(resources)
}

/// Kafka's CreateAcls response: one result per creation in request order, the controller's
/// error for it (INVALID_REQUEST naming the field for an invalid ACL, which alone is not
/// added), or the whole request's failure for every creation.
pub fn create_acls_response(
    reply: Result<ctl::CreateAclsReply, Failure>,
    req: &KCreateAclsRequest,
) -> KCreateAclsResponse {
    let reply = settled(reply);
    let results = (0..req.creations.len())
        .map(|i| {
            let (error_code, error_message) =
                item_error(per_item(&reply, |r| r.results.get(i), "ACL"), |x| {
                    x.error.as_ref()
                });
            KAclCreationResult::default()
                .with_error_code(error_code)
                .with_error_message(error_message)
        })
        .collect();
    KCreateAclsResponse::default().with_results(results)
}

/// Kafka's DeleteAcls response: one result per filter in request order with the ACLs it
/// deleted (each with error code 0), the controller's error for that filter, or the whole
/// request's failure for every filter.
pub fn delete_acls_response(
    reply: Result<ctl::DeleteAclsReply, Failure>,
    req: &KDeleteAclsRequest,
) -> KDeleteAclsResponse {
    let reply = settled(reply);
    let results = (0..req.filters.len())
        .map(|i| {
            let outcome = per_item(&reply, |r| r.results.get(i), "filter");
            let deleted = outcome
                .as_ref()
                .map(|x| {
                    x.matching_acls
                        .iter()
                        .map(|acl| {
                            KDeleteAclsMatchingAcl::default()
                                .with_resource_type(enum_code(acl.resource_type))
                                .with_resource_name(str_bytes(acl.resource_name.clone()))
                                .with_pattern_type(enum_code(acl.pattern_type))
                                .with_principal(str_bytes(acl.principal.clone()))
                                .with_host(str_bytes(acl.host.clone()))
                                .with_operation(enum_code(acl.operation))
                                .with_permission_type(enum_code(acl.permission_type))
                        })
                        .collect()
                })
                .unwrap_or_default();
            let (error_code, error_message) = item_error(outcome, |x| x.error.as_ref());
            KDeleteAclsFilterResult::default()
                .with_error_code(error_code)
                .with_error_message(error_message)
                .with_matching_acls(deleted)
        })
        .collect();
    KDeleteAclsResponse::default().with_filter_results(results)
}

// ---------------------------------------------------------------------------------------------
// SCRAM credentials (Kafka: Describe/AlterUserScramCredentials v0, KIP-554)
// ---------------------------------------------------------------------------------------------

/// Kafka's DescribeUserScramCredentials response: per user its mechanisms (Kafka's codes:
/// SCRAM-SHA-256 1, SCRAM-SHA-512 2) and iterations, or its error (RESOURCE_NOT_FOUND 91 for
/// a user without a credential, DUPLICATE_RESOURCE 92 for a user named twice); a whole-request
/// failure as the top-level error.
pub fn describe_scram_response(
    reply: Result<ctl::DescribeUserScramCredentialsReply, Failure>,
) -> KDescribeUserScramCredentialsResponse {
    match settled(reply) {
        Err(f) => KDescribeUserScramCredentialsResponse::default()
            .with_error_code(f.code)
            .with_error_message(Some(str_bytes(f.message))),
        Ok(r) => KDescribeUserScramCredentialsResponse::default().with_results(
            r.results
                .iter()
                .map(|u| {
                    KDescribeUserScramCredentialsResult::default()
                        .with_user(str_bytes(u.user.clone()))
                        .with_error_code(code(u.error.as_ref()))
                        .with_error_message(message(u.error.as_ref()))
                        .with_credential_infos(
                            u.credential_infos
                                .iter()
                                .map(|c| {
                                    KCredentialInfo::default()
                                        .with_mechanism(enum_code(c.mechanism))
                                        .with_iterations(c.iterations)
                                })
                                .collect(),
                        )
                })
                .collect(),
        ),
    }
}

/// Keel's AlterUserScramCredentials from Kafka's, field for field (the mechanism codes are
/// the same numbers; the controller checks names, iterations and lengths).
pub fn alter_scram_request(
    req: &KAlterUserScramCredentialsRequest,
) -> ctl::AlterUserScramCredentialsRequest {
    ctl::AlterUserScramCredentialsRequest {
        deletions: req
            .deletions
            .iter()
            .map(|d| ctl::ScramCredentialDeletion {
                name: d.name.to_string(),
                mechanism: i32::from(d.mechanism),
            })
            .collect(),
        upsertions: req
            .upsertions
            .iter()
            .map(|u| ctl::ScramCredentialUpsertion {
                name: u.name.to_string(),
                mechanism: i32::from(u.mechanism),
                iterations: u.iterations,
                salt: u.salt.clone(),
                salted_password: u.salted_password.clone(),
            })
            .collect(),
    }
}

/// Kafka's AlterUserScramCredentials response: one result per user (in order of first
/// appearance, as the controller answers; UNSUPPORTED_SASL_MECHANISM 33,
/// UNACCEPTABLE_CREDENTIAL 93, DUPLICATE_RESOURCE 92, RESOURCE_NOT_FOUND 91 as it decided),
/// or the whole request's failure for every user named.
pub fn alter_scram_response(
    reply: Result<ctl::AlterUserScramCredentialsReply, Failure>,
    req: &KAlterUserScramCredentialsRequest,
) -> KAlterUserScramCredentialsResponse {
    let results = match settled(reply) {
        Ok(r) => r
            .results
            .iter()
            .map(|u| {
                KAlterUserScramCredentialsResult::default()
                    .with_user(str_bytes(u.user.clone()))
                    .with_error_code(code(u.error.as_ref()))
                    .with_error_message(message(u.error.as_ref()))
            })
            .collect(),
        Err(f) => {
            let mut users: Vec<&str> = Vec::new();
            let named = req.deletions.iter().map(|d| d.name.as_str());
            for name in named.chain(req.upsertions.iter().map(|u| u.name.as_str())) {
                if !users.contains(&name) {
                    users.push(name);
                }
            }
            users
                .into_iter()
                .map(|u| {
                    KAlterUserScramCredentialsResult::default()
                        .with_user(str_bytes(u))
                        .with_error_code(f.code)
                        .with_error_message(Some(str_bytes(f.message.clone())))
                })
                .collect()
        }
    };
    KAlterUserScramCredentialsResponse::default().with_results(results)
}

// ---------------------------------------------------------------------------------------------
// DescribeLogDirs (Kafka: DescribeLogDirsRequest/Response v1-4, KIP-113, KIP-827)
// ---------------------------------------------------------------------------------------------

/// The space of a log directory's file system, bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirSpace {
    /// Size of the file system.
    pub total_bytes: u64,
    /// Bytes an unprivileged writer may still use.
    pub usable_bytes: u64,
}

/// The replica descriptions DescribeLogDirs is built from: null topics = every hosted
/// partition (Keel's empty list); a topic listed with no partitions asks for none, as in
/// Kafka, so it is left out; `None` when nothing is left to ask (the directory is then listed
/// without partitions).
pub fn log_dirs_request(
    req: &KDescribeLogDirsRequest,
) -> Option<keel_proto::broker::DescribeReplicasRequest> {
    use keel_proto::broker::{DescribeReplicasRequest, DescribeReplicasTopic};
    let Some(topics) = &req.topics else {
        return Some(DescribeReplicasRequest::default());
    };
    let topics: Vec<DescribeReplicasTopic> = topics
        .iter()
        .filter(|t| !t.partitions.is_empty())
        .map(|t| DescribeReplicasTopic {
            name: t.topic.0.to_string(),
            partitions: t.partitions.clone(),
        })
        .collect();
    (!topics.is_empty()).then_some(DescribeReplicasRequest {
        topics,
        include_image_digest: false,
    })
}

/// Kafka's DescribeLogDirs response for this broker's one log directory `dir`: each hosted
/// partition of `replicas` (those with an error are left out, as Kafka lists only what the
/// directory holds) grouped by topic in name order, with its size and an offset lag of 0 (Keel has no
/// future replicas, KIP-113's moves between directories); KAFKA_STORAGE_ERROR (56) for the
/// directory when any of its partitions reports it. `space` fills v4's total and usable bytes
/// (-1 when unknown).
pub fn describe_log_dirs_response(
    dir: &str,
    replicas: &keel_proto::broker::DescribeReplicasReply,
    space: Option<DirSpace>,
) -> KDescribeLogDirsResponse {
    let storage_error = replicas
        .partitions
        .iter()
        .any(|p| code(p.error.as_ref()) == ErrorCode::KafkaStorageError.code());
    let mut by_topic: std::collections::BTreeMap<&str, Vec<KDescribeLogDirsPartition>> =
        Default::default();
    for p in replicas.partitions.iter().filter(|p| p.error.is_none()) {
        by_topic.entry(p.topic.as_str()).or_default().push(
            KDescribeLogDirsPartition::default()
                .with_partition_index(p.partition)
                .with_partition_size(p.size_bytes.max(0))
                .with_offset_lag(0)
                .with_is_future_key(false),
        );
    }
    let topics: Vec<KDescribeLogDirsTopic> = by_topic
        .into_iter()
        .map(|(name, partitions)| {
            KDescribeLogDirsTopic::default()
                .with_name(topic_name(name))
                .with_partitions(partitions)
        })
        .collect();
    let bytes = |v: Option<u64>| v.map_or(-1, |b| i64::try_from(b).unwrap_or(i64::MAX));
    let result = KDescribeLogDirsResult::default()
        .with_error_code(if storage_error {
            ErrorCode::KafkaStorageError.code()
        } else {
            0
        })
        .with_log_dir(str_bytes(dir))
        .with_topics(if storage_error { Vec::new() } else { topics })
        .with_total_bytes(bytes(space.map(|s| s.total_bytes)))
        .with_usable_bytes(bytes(space.map(|s| s.usable_bytes)));
    KDescribeLogDirsResponse::default().with_results(vec![result])
}

/// DescribeLogDirs refused as a whole (`failure`): the top-level error from v3, and no
/// directories (Kafka answers an unauthorized request with an empty result list).
pub fn describe_log_dirs_refused(failure: Failure, version: i16) -> KDescribeLogDirsResponse {
    KDescribeLogDirsResponse::default().with_error_code(if version >= 3 { failure.code } else { 0 })
}

#[cfg(test)]
mod tests;

/// Kafka's error code of a failed forward as a [`Failure`] with REQUEST_TIMED_OUT
/// (retriable: the client retries, possibly against another broker).
pub fn timed_out(why: impl Into<String>) -> Failure {
    Failure::new(ErrorCode::RequestTimedOut, why)
}
