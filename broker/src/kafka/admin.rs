//! The admin APIs of the Kafka listener, forwarded to the active controller over Keel's gRPC
//! controller API (Kafka: a broker forwards CreateTopics/DeleteTopics to the controller,
//! `ForwardingManager`): CreateTopics, DeleteTopics, DescribeConfigs, DescribeCluster,
//! CreatePartitions, IncrementalAlterConfigs, AlterConfigs, ElectLeaders,
//! AlterPartitionReassignments,
//! ListPartitionReassignments, DescribeAcls, CreateAcls, DeleteAcls,
//! Describe/AlterUserScramCredentials; DescribeLogDirs, which the broker answers itself. This
//! file only sends; what is sent and how the answer reads is in [`super::convert::admin`].
//!
//! Waiting: each call follows the active controller like the broker's other controller
//! requests ([`ActiveControllerClient`]: NOT_CONTROLLER with a hint goes to the hinted voter,
//! a transport error to the next, each attempt bounded by the broker's controller request
//! timeout, at most two rounds over the voters). CreateTopics, DeleteTopics,
//! CreatePartitions, ElectLeaders and the reassignment APIs are also
//! bounded by their request's `timeout_ms` when it is positive (Kafka's controller treats it
//! as the operation's deadline, `ControllerRequestContext`); running out answers
//! REQUEST_TIMED_OUT, and the operation may still complete (as in Kafka). No controller
//! answering is REQUEST_TIMED_OUT too (retriable).

use std::future::Future;
use std::time::Duration;

use keel_proto::controller::controller_service_client::ControllerServiceClient;
use tonic::transport::Channel;

use super::context::KafkaContext;
use super::convert::admin::{self as conv, StaticBrokerConfig};
use super::forwarder::ControllerForwarder;
use crate::config::BrokerConfig;
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse, ElectLeadersRequest,
    ElectLeadersResponse, ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse,
};
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse,
};
use kafka_protocol::messages::{
    CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse,
    DescribeAclsRequest, DescribeAclsResponse,
};
use kafka_protocol::messages::{
    CreatePartitionsRequest, CreatePartitionsResponse, CreateTopicsRequest, CreateTopicsResponse,
    DeleteTopicsRequest, DeleteTopicsResponse, DescribeClusterRequest, DescribeClusterResponse,
    DescribeConfigsRequest, DescribeConfigsResponse, IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
};
use kafka_protocol::messages::{DescribeLogDirsRequest, DescribeLogDirsResponse};
use keel_metadata_log::authz::Caller;
use keel_proto::controller as ctl;

/// The bound of an operation with Kafka's `timeout_ms`: positive = that many ms, else none
/// beyond the forwarder's own retries.
fn deadline(timeout_ms: i32) -> Option<Duration> {
    u64::try_from(timeout_ms)
        .ok()
        .filter(|ms| *ms > 0)
        .map(Duration::from_millis)
}

/// The broker's own values of the keys Kafka clients read from a broker or topic
/// (`min.insync.replicas`, `log.segment.bytes`, `log.retention.ms`, `log.retention.bytes`,
/// `log.flush.interval.messages`, `compression.type`, `log.message.timestamp.type`), for
/// DescribeConfigs' STATIC_BROKER_CONFIG source: what
/// the replica manager applies to a topic without an override. `-1` = no limit (Kafka's
/// convention), `9223372036854775807` = never flush by count (Kafka's default). Also this
/// process's read-only broker-only keys (`node.id`, `broker.id`, `process.roles`,
/// `log.dirs`, `authorizer.class.name`), reported for this broker's own BROKER resource.
pub fn static_broker_configs(config: &BrokerConfig) -> Vec<StaticBrokerConfig> {
    let entry = |topic_name, broker_name, value: String| StaticBrokerConfig {
        topic_name,
        broker_name,
        value,
    };
    vec![
        entry(
            "min.insync.replicas",
            "min.insync.replicas",
            config.min_insync_replicas.to_string(),
        ),
        entry(
            "segment.bytes",
            "log.segment.bytes",
            config.log_segment_bytes.to_string(),
        ),
        entry(
            "retention.ms",
            "log.retention.ms",
            config.log_retention_ms.unwrap_or(-1).to_string(),
        ),
        entry(
            "retention.bytes",
            "log.retention.bytes",
            config
                .log_retention_bytes
                .map_or_else(|| "-1".to_string(), |b| b.to_string()),
        ),
        entry(
            "compression.type",
            "compression.type",
            crate::replica_manager::topic_config::compression_type_name(config.compression_type)
                .to_string(),
        ),
        entry(
            "message.timestamp.type",
            "log.message.timestamp.type",
            if config.log_append_time {
                "LogAppendTime"
            } else {
                "CreateTime"
            }
            .to_string(),
        ),
        entry(
            "flush.messages",
            "log.flush.interval.messages",
            config
                .log_flush_interval_messages
                .unwrap_or(i64::MAX as u64)
                .to_string(),
        ),
        // Broker-only keys (no topic-level name): facts of this process, read-only.
        entry("", "node.id", config.node_id.to_string()),
        entry("", "broker.id", config.node_id.to_string()),
        entry("", "process.roles", "broker".to_string()),
        entry("", "log.dirs", config.log_dir.display().to_string()),
        // Kafka's StandardAuthorizer class when `authorizer = "standard"`, empty (Kafka's
        // default: no authorizer) otherwise.
        entry(
            "",
            "authorizer.class.name",
            if config.authz.enabled() {
                "org.apache.kafka.metadata.authorizer.StandardAuthorizer".to_string()
            } else {
                String::new()
            },
        ),
    ]
}

/// CreateTopics (v2-7), see [`conv::create_topics_response`].
pub async fn create_topics(
    ctx: &KafkaContext,
    req: &CreateTopicsRequest,
    version: i16,
) -> CreateTopicsResponse {
    // The client is authorized here and, forwarded with its principal, by the controller.
    let forward = conv::create_topics_request(req);
    if let Err(d) = ctx.check(|a, c, img| {
        keel_metadata_log::authz::check_create_topics(
            a,
            c,
            img.acls(),
            forward.topics.iter().map(|t| t.name.as_str()),
        )
    }) {
        return conv::create_topics_response(Err(denied(d)), req, version);
    }
    forward_create_topics(&ctx.controller, Some(&ctx.caller), req, version).await
}

/// A refusal as the forwarder's failure, which the conversions answer per topic.
fn denied(d: keel_metadata_log::authz::Denied) -> conv::Failure {
    conv::Failure::new(d.code, d.message)
}

/// The controller's reply to `forward`, asked on behalf of a client: the refusal when
/// `allowed` failed, an empty reply without asking when there is nothing to ask (`None`), else
/// the call through the broker's forwarder within `bound`.
async fn forward_checked<Q, R, F, Fut>(
    ctx: &KafkaContext,
    allowed: Result<(), keel_metadata_log::authz::Denied>,
    forward: Option<Q>,
    bound: Option<Duration>,
    send: F,
) -> Result<R, conv::Failure>
where
    Q: prost::Message + Clone,
    R: crate::lifecycle::ControllerReply + Default,
    F: Fn(ControllerServiceClient<Channel>, tonic::Request<Q>) -> Fut,
    Fut: Future<Output = Result<tonic::Response<R>, tonic::Status>>,
{
    allowed.map_err(denied)?;
    match forward {
        None => Ok(R::default()),
        Some(q) => ctx.controller.call(Some(&ctx.caller), q, bound, send).await,
    }
}

/// `op` on the cluster for this connection's caller.
fn on_cluster(
    ctx: &KafkaContext,
    op: keel_metadata_log::acl::Operation,
) -> Result<(), keel_metadata_log::authz::Denied> {
    ctx.check(|a, c, img| a.check(img.acls(), c, keel_metadata_log::acl::Action::cluster(op)))
}

/// CreateTopics sent through `controller` on behalf of `client` (`None`: this broker's own,
/// how `__consumer_offsets` is created).
pub async fn forward_create_topics(
    controller: &ControllerForwarder,
    client: Option<&Caller>,
    req: &CreateTopicsRequest,
    version: i16,
) -> CreateTopicsResponse {
    let forward = conv::create_topics_request(req);
    let reply = controller
        .call(
            client,
            forward,
            deadline(req.timeout_ms),
            |mut c, r| async move { c.create_topics(r).await },
        )
        .await;
    conv::create_topics_response(reply, req, version)
}

/// DeleteTopics (v1-6), see [`conv::delete_topics_response`].
pub async fn delete_topics(
    ctx: &KafkaContext,
    req: &DeleteTopicsRequest,
    version: i16,
) -> DeleteTopicsResponse {
    let plan = conv::delete_topics_plan(req, version);
    let allowed = ctx.check(|a, c, img| {
        plan.forward.topics.iter().try_for_each(|t| {
            let name = keel_metadata_log::image::uuid_from_bytes(&t.topic_id)
                .and_then(|id| img.topics().by_id.get(&id).map(|t| t.name.clone()))
                .unwrap_or_else(|| t.name.clone());
            a.check(
                img.acls(),
                c,
                keel_metadata_log::acl::Action::topic(
                    keel_metadata_log::acl::Operation::Delete,
                    &name,
                ),
            )
        })
    });
    let forward = (!plan.forward.topics.is_empty()).then(|| plan.forward.clone());
    let reply = forward_checked(
        ctx,
        allowed,
        forward,
        deadline(req.timeout_ms),
        |mut c, r| async move { c.delete_topics(r).await },
    )
    .await;
    conv::delete_topics_response(&plan, reply, version)
}

/// DescribeConfigs (v1-4), see [`conv::describe_configs_response`].
pub async fn describe_configs(
    ctx: &KafkaContext,
    req: &DescribeConfigsRequest,
    version: i16,
) -> DescribeConfigsResponse {
    let plan = conv::describe_configs_plan(req, version, ctx.broker_id);
    let allowed = ctx.check(|a, c, img| crate::access::describe_configs(a, c, img, &plan.forward));
    let forward = (!plan.forward.resources.is_empty()).then(|| plan.forward.clone());
    let reply = forward_checked(ctx, allowed, forward, None, |mut c, r| async move {
        c.describe_configs(r).await
    })
    .await;
    conv::describe_configs_response(
        &plan,
        req,
        reply,
        version,
        ctx.broker_id,
        &ctx.static_configs,
    )
}

/// CreatePartitions (v0-3), see [`conv::create_partitions_response`]: ALTER on every topic
/// named (Kafka: `ControllerApis.createPartitions`), bounded by the request's `timeout_ms`
/// like CreateTopics.
pub async fn create_partitions(
    ctx: &KafkaContext,
    req: &CreatePartitionsRequest,
) -> CreatePartitionsResponse {
    let forward = conv::create_partitions_request(req);
    let allowed = ctx.check(|a, c, img| {
        forward.topics.iter().try_for_each(|t| {
            a.check(
                img.acls(),
                c,
                keel_metadata_log::acl::Action::topic(
                    keel_metadata_log::acl::Operation::Alter,
                    &t.name,
                ),
            )
        })
    });
    let forward = (!forward.topics.is_empty()).then_some(forward);
    let reply = forward_checked(
        ctx,
        allowed,
        forward,
        deadline(req.timeout_ms),
        |mut c, r| async move { c.create_partitions(r).await },
    )
    .await;
    conv::create_partitions_response(reply, req)
}

/// IncrementalAlterConfigs (v0-1), see [`conv::alter_configs_response`]: ALTER_CONFIGS on
/// each resource (the topic, or the cluster for broker resources; Kafka:
/// `AuthHelper.authorizeConfigResources`), forwarded to the controller (Kafka's brokers
/// forward it too, `ForwardingManager`).
pub async fn incremental_alter_configs(
    ctx: &KafkaContext,
    req: &IncrementalAlterConfigsRequest,
) -> IncrementalAlterConfigsResponse {
    let plan = conv::alter_configs_plan(req);
    let reply = forward_alter_configs(ctx, &plan).await;
    conv::alter_configs_response(&plan, req, reply)
}

/// AlterConfigs (v0-2, the legacy API 33 that replaces a resource's whole config set), see
/// [`conv::legacy_alter_configs_plan`]: ALTER_CONFIGS on each resource, as for
/// IncrementalAlterConfigs.
pub async fn legacy_alter_configs(
    ctx: &KafkaContext,
    req: &kafka_protocol::messages::AlterConfigsRequest,
) -> kafka_protocol::messages::AlterConfigsResponse {
    let plan = conv::legacy_alter_configs_plan(req);
    let reply = forward_alter_configs(ctx, &plan).await;
    conv::legacy_alter_configs_response(&plan, req, reply)
}

/// Authorizes (ALTER_CONFIGS on every forwarded resource, Kafka's
/// `AuthHelper.authorize(ALTER_CONFIGS)` per resource; a refusal fails the request) and
/// forwards `plan`'s controller request.
async fn forward_alter_configs(
    ctx: &KafkaContext,
    plan: &conv::AlterConfigsPlan,
) -> Result<ctl::AlterConfigsReply, conv::Failure> {
    let allowed = ctx.check(|a, c, img| {
        keel_metadata_log::authz::check_config_resources(
            a,
            c,
            img.acls(),
            keel_metadata_log::acl::Operation::AlterConfigs,
            plan.forward
                .resources
                .iter()
                .map(|r| (r.resource_type, r.resource_name.as_str())),
        )
    });
    let forward = (!plan.forward.resources.is_empty()).then(|| plan.forward.clone());
    forward_checked(ctx, allowed, forward, None, |mut c, r| async move {
        c.alter_configs(r).await
    })
    .await
}

/// ElectLeaders (v0-2, KIP-183/KIP-460; `kafka-leader-election.sh`), see
/// [`conv::elect_leaders_response`]: ALTER on the cluster (Kafka:
/// `KafkaApis.handleElectLeaders`), bounded by the request's `timeout_ms`.
pub async fn elect_leaders(
    ctx: &KafkaContext,
    req: &ElectLeadersRequest,
    version: i16,
) -> ElectLeadersResponse {
    let forward = conv::elect_leaders_request(req);
    let forward =
        (forward.all_partitions || !forward.topic_partitions.is_empty()).then_some(forward);
    let reply = forward_checked(
        ctx,
        on_cluster(ctx, keel_metadata_log::acl::Operation::Alter),
        forward,
        deadline(req.timeout_ms),
        |mut c, r| async move { c.elect_leaders(r).await },
    )
    .await;
    conv::elect_leaders_response(reply, req, version)
}

/// AlterPartitionReassignments (v0, KIP-455; `kafka-reassign-partitions --execute` and
/// `--cancel`), see [`conv::alter_reassignments_response`]: ALTER on the cluster (Kafka:
/// `ControllerApis.handleAlterPartitionReassignments`), bounded by `timeout_ms`.
pub async fn alter_partition_reassignments(
    ctx: &KafkaContext,
    req: &AlterPartitionReassignmentsRequest,
) -> AlterPartitionReassignmentsResponse {
    let forward = conv::alter_reassignments_request(req);
    let forward = (!forward.topics.is_empty()).then_some(forward);
    let reply = forward_checked(
        ctx,
        on_cluster(ctx, keel_metadata_log::acl::Operation::Alter),
        forward,
        deadline(req.timeout_ms),
        |mut c, r| async move { c.alter_partition_reassignments(r).await },
    )
    .await;
    conv::alter_reassignments_response(reply, req)
}

/// ListPartitionReassignments (v0, KIP-455; `kafka-reassign-partitions --verify` and
/// `--list`), see [`conv::list_reassignments_response`]: DESCRIBE on the cluster (Kafka:
/// `ControllerApis.handleListPartitionReassignments`).
pub async fn list_partition_reassignments(
    ctx: &KafkaContext,
    req: &ListPartitionReassignmentsRequest,
) -> ListPartitionReassignmentsResponse {
    let reply = forward_checked(
        ctx,
        on_cluster(ctx, keel_metadata_log::acl::Operation::Describe),
        conv::list_reassignments_request(req),
        deadline(req.timeout_ms),
        |mut c, r| async move { c.list_partition_reassignments(r).await },
    )
    .await;
    conv::list_reassignments_response(reply)
}

/// DescribeAcls (v1-3, KIP-140; `kafka-acls --list`), see [`conv::describe_acls_response`]:
/// DESCRIBE on the cluster (Kafka: `AclApis.handleDescribeAcls`).
pub async fn describe_acls(ctx: &KafkaContext, req: &DescribeAclsRequest) -> DescribeAclsResponse {
    let forward = ctl::DescribeAclsRequest {
        filter: Some(conv::acl_filter(conv::KafkaAclFilter {
            resource_type: req.resource_type_filter,
            resource_name: req.resource_name_filter.as_deref(),
            pattern_type: req.pattern_type_filter,
            principal: req.principal_filter.as_deref(),
            host: req.host_filter.as_deref(),
            operation: req.operation,
            permission_type: req.permission_type,
        })),
    };
    let reply = forward_checked(
        ctx,
        on_cluster(ctx, keel_metadata_log::acl::Operation::Describe),
        Some(forward),
        None,
        |mut c, r| async move { c.describe_acls(r).await },
    )
    .await;
    conv::describe_acls_response(reply)
}

/// CreateAcls (v1-3, KIP-140; `kafka-acls --add`), see [`conv::create_acls_response`]: ALTER
/// on the cluster (Kafka: `AclApis.handleCreateAcls`).
pub async fn create_acls(ctx: &KafkaContext, req: &CreateAclsRequest) -> CreateAclsResponse {
    let forward = ctl::CreateAclsRequest {
        creations: req.creations.iter().map(conv::acl_creation).collect(),
    };
    let forward = (!forward.creations.is_empty()).then_some(forward);
    let reply = forward_checked(
        ctx,
        on_cluster(ctx, keel_metadata_log::acl::Operation::Alter),
        forward,
        None,
        |mut c, r| async move { c.create_acls(r).await },
    )
    .await;
    conv::create_acls_response(reply, req)
}

/// DeleteAcls (v1-3, KIP-140; `kafka-acls --remove`), see [`conv::delete_acls_response`]:
/// ALTER on the cluster (Kafka: `AclApis.handleDeleteAcls`).
pub async fn delete_acls(ctx: &KafkaContext, req: &DeleteAclsRequest) -> DeleteAclsResponse {
    let forward = ctl::DeleteAclsRequest {
        filters: req
            .filters
            .iter()
            .map(|f| {
                conv::acl_filter(conv::KafkaAclFilter {
                    resource_type: f.resource_type_filter,
                    resource_name: f.resource_name_filter.as_deref(),
                    pattern_type: f.pattern_type_filter,
                    principal: f.principal_filter.as_deref(),
                    host: f.host_filter.as_deref(),
                    operation: f.operation,
                    permission_type: f.permission_type,
                })
            })
            .collect(),
    };
    let forward = (!forward.filters.is_empty()).then_some(forward);
    let reply = forward_checked(
        ctx,
        on_cluster(ctx, keel_metadata_log::acl::Operation::Alter),
        forward,
        None,
        |mut c, r| async move { c.delete_acls(r).await },
    )
    .await;
    conv::delete_acls_response(reply, req)
}

/// DescribeUserScramCredentials (v0, KIP-554; `kafka-configs --describe --entity-type
/// users`), see [`conv::describe_scram_response`]: DESCRIBE on the cluster (Kafka:
/// `ControllerApis.handleDescribeUserScramCredentials`). Users' mechanisms and iterations
/// only, never keys or salts.
pub async fn describe_user_scram_credentials(
    ctx: &KafkaContext,
    req: &DescribeUserScramCredentialsRequest,
) -> DescribeUserScramCredentialsResponse {
    let forward = ctl::DescribeUserScramCredentialsRequest {
        users: req
            .users
            .iter()
            .flatten()
            .map(|u| u.name.to_string())
            .collect(),
    };
    let reply = forward_checked(
        ctx,
        on_cluster(ctx, keel_metadata_log::acl::Operation::Describe),
        Some(forward),
        None,
        |mut c, r| async move { c.describe_user_scram_credentials(r).await },
    )
    .await;
    conv::describe_scram_response(reply)
}

/// AlterUserScramCredentials (v0, KIP-554; `kafka-configs --alter --entity-type users
/// --add-config 'SCRAM-SHA-256=[password=...]'`, whose admin client sends the salted password,
/// never the password), see [`conv::alter_scram_response`]: ALTER on the cluster (Kafka:
/// `ControllerApis.handleAlterUserScramCredentials`).
pub async fn alter_user_scram_credentials(
    ctx: &KafkaContext,
    req: &AlterUserScramCredentialsRequest,
) -> AlterUserScramCredentialsResponse {
    let forward = conv::alter_scram_request(req);
    let forward =
        (!forward.deletions.is_empty() || !forward.upsertions.is_empty()).then_some(forward);
    let reply = forward_checked(
        ctx,
        on_cluster(ctx, keel_metadata_log::acl::Operation::Alter),
        forward,
        None,
        |mut c, r| async move { c.alter_user_scram_credentials(r).await },
    )
    .await;
    conv::alter_scram_response(reply, req)
}

/// DescribeLogDirs (v1-4, KIP-113; `kafka-log-dirs --describe`), answered by this broker from
/// its own replicas (not forwarded): its one log directory with each hosted partition's size,
/// and (v4) the file system's total and usable bytes. DESCRIBE on the cluster (Kafka:
/// `KafkaApis.handleDescribeLogDirsRequest`; not authorized = CLUSTER_AUTHORIZATION_FAILED,
/// v3+ at the top level).
pub fn describe_log_dirs(
    ctx: &KafkaContext,
    req: &DescribeLogDirsRequest,
    version: i16,
) -> DescribeLogDirsResponse {
    if let Err(d) = on_cluster(ctx, keel_metadata_log::acl::Operation::Describe) {
        return conv::describe_log_dirs_refused(denied(d), version);
    }
    let image = ctx.images.borrow().clone();
    let epoch = ctx.status.borrow().broker_epoch;
    let replicas = match conv::log_dirs_request(req) {
        None => Default::default(),
        Some(asked) => {
            let mut replicas = crate::metadata::describe::describe_replicas_reply(
                &image,
                &asked,
                ctx.broker_id,
                epoch,
                ctx.min_insync_replicas,
            );
            ctx.replicas.fill_describe_replicas(&mut replicas);
            replicas
        }
    };
    let space = rustix::fs::statvfs(&ctx.log_dir)
        .ok()
        .map(|s| conv::DirSpace {
            total_bytes: s.f_blocks.saturating_mul(s.f_frsize),
            usable_bytes: s.f_bavail.saturating_mul(s.f_frsize),
        });
    conv::describe_log_dirs_response(&ctx.log_dir.display().to_string(), &replicas, space)
}

/// DescribeCluster (v0-2), see [`conv::describe_cluster_response`].
pub async fn describe_cluster(
    ctx: &KafkaContext,
    req: &DescribeClusterRequest,
    version: i16,
) -> DescribeClusterResponse {
    let reply = match conv::describe_cluster_request(req, version) {
        Err(f) => Err(f),
        Ok(forward) => {
            ctx.controller
                .call(Some(&ctx.caller), forward, None, |mut c, r| async move {
                    c.describe_cluster(r).await
                })
                .await
        }
    };
    conv::describe_cluster_response(reply, req, version, &ctx.listener, ctx.broker_id)
}
