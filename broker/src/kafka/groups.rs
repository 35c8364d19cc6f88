//! The group APIs on the Kafka listener: FindCoordinator, JoinGroup, SyncGroup, Heartbeat,
//! LeaveGroup, OffsetCommit, OffsetFetch, OffsetDelete, DescribeGroups, ListGroups,
//! DeleteGroups. Each
//! handler maps the request of its version to a [`GroupCoordinator`] call and the answer
//! back into the response of the same version, setting only fields that version has (the
//! `kafka-protocol` encoder refuses others).
//!
//! FindCoordinator also creates `__consumer_offsets` on first use (Kafka:
//! `AutoTopicCreationManager` for internal topics): with `offsets_topic_num_partitions`
//! partitions, replication factor `offsets_topic_replication_factor`, `cleanup.policy =
//! compact` (the log cleaner keeps the latest commit per group and partition),
//! `min.insync.replicas = min(2, RF)` and `segment.bytes = offsets_topic_segment_bytes` (100
//! MiB, Kafka's `offsets.topic.segment.bytes`); until it exists and its partition has a leader the answer
//! is COORDINATOR_NOT_AVAILABLE (retriable).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use keel_metadata_log::acl::Operation;
use keel_proto::limits::clip;

use kafka_protocol::messages::create_topics_request::{
    CreatableTopic, CreatableTopicConfig, CreateTopicsRequest,
};
use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::list_groups_response::ListedGroup as KListedGroup;
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::{
    BrokerId, DeleteGroupsRequest, DeleteGroupsResponse, DescribeGroupsRequest,
    DescribeGroupsResponse, FindCoordinatorRequest, FindCoordinatorResponse, GroupId,
    HeartbeatRequest, HeartbeatResponse, JoinGroupRequest, JoinGroupResponse, LeaveGroupRequest,
    LeaveGroupResponse, ListGroupsRequest, ListGroupsResponse, OffsetCommitRequest,
    OffsetCommitResponse, OffsetFetchRequest, OffsetFetchResponse, SyncGroupRequest,
    SyncGroupResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use keel_proto::ErrorCode;

use super::admin;
use super::context::{KafkaContext, OffsetsTopicCreation};
use super::convert::endpoint_on;
use super::forwarder::ControllerForwarder;
use crate::group::records::OFFSETS_TOPIC;
use crate::group::state::{JoinRequest, SyncRequest};
use crate::group::{CommitEntry, CoordinatorConfig, GroupCoordinator};

/// At most one creation request for `__consumer_offsets` per this interval per broker.
const CREATE_RETRY: Duration = Duration::from_secs(1);

fn s(v: impl Into<String>) -> StrBytes {
    StrBytes::from_string(v.into())
}

fn opt(v: Option<&StrBytes>) -> Option<String> {
    v.map(|x| x.as_str().to_string())
}

fn coordinator(ctx: &KafkaContext) -> &GroupCoordinator {
    &ctx.groups
}

/// The client address as Kafka reports it (`/ip`).
fn client_host(peer: SocketAddr) -> String {
    format!("/{}", peer.ip())
}

/// FindCoordinator v0-4 (v4: batched keys, KIP-699).
pub async fn find_coordinator(
    ctx: &KafkaContext,
    req: &FindCoordinatorRequest,
    version: i16,
) -> FindCoordinatorResponse {
    let keys: Vec<String> = if version >= 4 {
        req.coordinator_keys
            .iter()
            .map(|k| k.as_str().to_string())
            .collect()
    } else {
        vec![req.key.as_str().to_string()]
    };
    let mut answers = Vec::with_capacity(keys.len());
    for key in keys {
        answers.push(locate(ctx, &key, req.key_type).await);
    }
    if version >= 4 {
        return FindCoordinatorResponse::default().with_coordinators(
            answers
                .into_iter()
                .map(|(key, node, host, port, code, msg)| {
                    Coordinator::default()
                        .with_key(s(key))
                        .with_node_id(BrokerId(node))
                        .with_host(s(host))
                        .with_port(port)
                        .with_error_code(code)
                        .with_error_message(msg.map(s))
                })
                .collect(),
        );
    }
    let (_, node, host, port, code, msg) = answers.pop().unwrap_or_default();
    let mut r = FindCoordinatorResponse::default()
        .with_error_code(code)
        .with_node_id(BrokerId(node))
        .with_host(s(host))
        .with_port(port);
    if version >= 1 {
        r = r.with_error_message(msg.map(s));
    }
    r
}

/// (key, node id, host, port, error code, message) for one key.
async fn locate(
    ctx: &KafkaContext,
    key: &str,
    key_type: i8,
) -> (String, i32, String, i32, i16, Option<String>) {
    let fail = |code: ErrorCode, msg: String| {
        (
            key.to_string(),
            -1,
            String::new(),
            -1,
            code.code(),
            Some(msg),
        )
    };
    if key_type == 1 {
        // A transactional producer looks for its coordinator first. Keel has none, and the
        // refusal must be one clients give up on: librdkafka retries every other code of
        // this step every 500 ms until `init_transactions()` times out (its
        // `rd_kafka_txn_handle_FindCoordinator` makes only TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        // fatal), so that is the code, with a message that says what is really missing.
        return fail(
            ErrorCode::TransactionalIdAuthorizationFailed,
            format!(
                "transactions are not supported by Keel (no transaction coordinator for transactional id {:?}); use an idempotent producer without transactional.id",
                clip(key)
            ),
        );
    }
    if key_type != 0 {
        // Kafka's key types: 0 group, 1 transaction, 2 share group. Keel coordinates
        // classic groups only.
        return fail(
            ErrorCode::InvalidRequest,
            format!(
                "coordinator key type {key_type} is not served (Keel has group coordinators only, key type 0)"
            ),
        );
    }
    if key.is_empty() {
        return fail(ErrorCode::InvalidRequest, "the group id is empty".into());
    }
    if let Err(code) = ctx.check_group(Operation::Describe, key) {
        return fail(
            code,
            format!("not authorized to DESCRIBE group {:?}", clip(key)),
        );
    }
    let image = ctx.images.borrow().clone();
    let Some(topic) = image.topics().get_by_name(OFFSETS_TOPIC) else {
        create_offsets_topic(
            &ctx.controller,
            &ctx.offsets_topic_creation,
            coordinator(ctx).config(),
        )
        .await;
        return fail(
            ErrorCode::CoordinatorNotAvailable,
            format!("{OFFSETS_TOPIC} is being created"),
        );
    };
    let partition = coordinator(ctx).partition_for(key);
    let leader = topic.partitions.get(&partition).map_or(-1, |p| p.leader);
    let endpoint = image
        .broker(leader)
        .filter(|b| !b.fenced)
        .and_then(|b| endpoint_on(b, &ctx.listener).cloned());
    match endpoint {
        Some(ep) => (
            key.to_string(),
            leader,
            ep.host.clone(),
            ep.port as i32,
            0,
            None,
        ),
        None => fail(
            ErrorCode::CoordinatorNotAvailable,
            format!("{OFFSETS_TOPIC}-{partition} has no leader reachable on this listener"),
        ),
    }
}

/// Asks the active controller through `controller` to create `__consumer_offsets` as `cfg`
/// says (at most once per [`CREATE_RETRY`] per `throttle`); the outcome shows in the image.
/// FindCoordinator calls it on both listeners when the topic does not exist, as Kafka's
/// does.
pub async fn create_offsets_topic(
    controller: &ControllerForwarder,
    throttle: &OffsetsTopicCreation,
    cfg: &CoordinatorConfig,
) {
    {
        let mut last = throttle.0.lock().unwrap_or_else(|e| e.into_inner());
        if last.is_some_and(|t| t.elapsed() < CREATE_RETRY) {
            return;
        }
        *last = Some(Instant::now());
    }
    let rf = cfg.offsets_topic_replication_factor;
    let config = |k: &str, v: String| {
        CreatableTopicConfig::default()
            .with_name(s(k))
            .with_value(Some(s(v)))
    };
    let req = CreateTopicsRequest::default()
        .with_timeout_ms(10_000)
        .with_topics(vec![
            CreatableTopic::default()
                .with_name(TopicName(s(OFFSETS_TOPIC)))
                .with_num_partitions(cfg.offsets_topic_num_partitions)
                .with_replication_factor(rf)
                .with_configs(vec![
                    config("cleanup.policy", "compact".into()),
                    config("min.insync.replicas", rf.clamp(1, 2).to_string()),
                    config("segment.bytes", cfg.offsets_topic_segment_bytes.to_string()),
                ]),
        ]);
    let reply = admin::forward_create_topics(controller, None, &req, 7).await;
    for t in reply.topics {
        match t.error_code {
            0 => tracing::info!(
                "created {OFFSETS_TOPIC} ({} partitions, RF {rf})",
                cfg.offsets_topic_num_partitions
            ),
            36 => {}
            code => tracing::warn!(
                "cannot create {OFFSETS_TOPIC} (RF {rf}, offsets_topic_replication_factor): error {code}: {}",
                t.error_message.as_ref().map_or("", |m| m.as_str())
            ),
        }
    }
}

/// JoinGroup v0-9.
pub async fn join_group(
    ctx: &KafkaContext,
    req: &JoinGroupRequest,
    version: i16,
    client_id: &str,
    peer: SocketAddr,
) -> JoinGroupResponse {
    if let Err(code) = ctx.check_group(Operation::Read, req.group_id.as_str()) {
        return JoinGroupResponse::default()
            .with_error_code(code.code())
            .with_generation_id(-1)
            .with_protocol_name((version < 7).then(|| s("")));
    }
    let rebalance_timeout_ms = if version >= 1 {
        req.rebalance_timeout_ms
    } else {
        req.session_timeout_ms
    };
    let join = JoinRequest {
        member_id: req.member_id.as_str().to_string(),
        instance_id: opt(req.group_instance_id.as_ref()),
        protocol_type: req.protocol_type.as_str().to_string(),
        protocols: req
            .protocols
            .iter()
            .map(|p| (p.name.as_str().to_string(), p.metadata.clone()))
            .collect(),
        session_timeout_ms: req.session_timeout_ms,
        rebalance_timeout_ms,
        client_id: client_id.to_string(),
        client_host: client_host(peer),
        require_known_member_id: version >= 4,
    };
    let r = coordinator(ctx).join(req.group_id.as_str(), join).await;
    let mut out = JoinGroupResponse::default()
        .with_error_code(r.error)
        .with_generation_id(r.generation)
        .with_leader(s(r.leader))
        .with_member_id(s(r.member_id))
        .with_members(
            r.members
                .into_iter()
                .map(|(id, instance, metadata)| {
                    let m = JoinGroupResponseMember::default()
                        .with_member_id(s(id))
                        .with_metadata(metadata);
                    if version >= 5 {
                        m.with_group_instance_id(instance.map(s))
                    } else {
                        m
                    }
                })
                .collect(),
        );
    if version >= 7 {
        out = out
            .with_protocol_type(r.protocol_type.map(s))
            .with_protocol_name(r.protocol_name.map(s));
    } else {
        out = out.with_protocol_name(Some(s(r.protocol_name.unwrap_or_default())));
    }
    out
}

/// SyncGroup v0-5.
pub async fn sync_group(
    ctx: &KafkaContext,
    req: &SyncGroupRequest,
    version: i16,
) -> SyncGroupResponse {
    let sync = SyncRequest {
        member_id: req.member_id.as_str().to_string(),
        instance_id: opt(req.group_instance_id.as_ref()),
        generation: req.generation_id,
        protocol_type: if version >= 5 {
            opt(req.protocol_type.as_ref())
        } else {
            None
        },
        protocol_name: if version >= 5 {
            opt(req.protocol_name.as_ref())
        } else {
            None
        },
        assignments: req
            .assignments
            .iter()
            .map(|a| (a.member_id.as_str().to_string(), a.assignment.clone()))
            .collect(),
    };
    if let Err(code) = ctx.check_group(Operation::Read, req.group_id.as_str()) {
        return SyncGroupResponse::default().with_error_code(code.code());
    }
    let r = coordinator(ctx).sync(req.group_id.as_str(), sync).await;
    let out = SyncGroupResponse::default()
        .with_error_code(r.error)
        .with_assignment(r.assignment);
    if version >= 5 {
        out.with_protocol_type(r.protocol_type.map(s))
            .with_protocol_name(r.protocol_name.map(s))
    } else {
        out
    }
}

/// Heartbeat v0-4.
pub fn heartbeat(ctx: &KafkaContext, req: &HeartbeatRequest) -> HeartbeatResponse {
    if let Err(code) = ctx.check_group(Operation::Read, req.group_id.as_str()) {
        return HeartbeatResponse::default().with_error_code(code.code());
    }
    let code = coordinator(ctx).heartbeat(
        req.group_id.as_str(),
        req.member_id.as_str(),
        req.group_instance_id.as_ref().map(|i| i.as_str()),
        req.generation_id,
    );
    HeartbeatResponse::default().with_error_code(code.code())
}

/// LeaveGroup v0-5 (v3+: a batch of members, KIP-345).
pub async fn leave_group(
    ctx: &KafkaContext,
    req: &LeaveGroupRequest,
    version: i16,
) -> LeaveGroupResponse {
    let members: Vec<(String, Option<String>)> = if version >= 3 {
        req.members
            .iter()
            .map(|m| {
                (
                    m.member_id.as_str().to_string(),
                    opt(m.group_instance_id.as_ref()),
                )
            })
            .collect()
    } else {
        vec![(req.member_id.as_str().to_string(), None)]
    };
    let left = match ctx.check_group(Operation::Read, req.group_id.as_str()) {
        Err(code) => Err(code),
        Ok(()) => {
            coordinator(ctx)
                .leave(req.group_id.as_str(), &members)
                .await
        }
    };
    match left {
        Err(code) => LeaveGroupResponse::default().with_error_code(code.code()),
        Ok(codes) if version >= 3 => LeaveGroupResponse::default().with_members(
            members
                .into_iter()
                .zip(codes)
                .map(|((m, i), c)| {
                    MemberResponse::default()
                        .with_member_id(s(m))
                        .with_group_instance_id(i.map(s))
                        .with_error_code(c.code())
                })
                .collect(),
        ),
        Ok(codes) => LeaveGroupResponse::default()
            .with_error_code(codes.first().copied().unwrap_or(ErrorCode::None).code()),
    }
}

/// OffsetCommit v2-8.
pub async fn offset_commit(
    ctx: &KafkaContext,
    req: &OffsetCommitRequest,
    version: i16,
) -> OffsetCommitResponse {
    let mut entries = Vec::new();
    for t in &req.topics {
        for p in &t.partitions {
            entries.push(CommitEntry {
                topic: t.name.as_str().to_string(),
                partition: p.partition_index,
                offset: p.committed_offset,
                leader_epoch: if version >= 6 {
                    p.committed_leader_epoch
                } else {
                    -1
                },
                metadata: opt(p.committed_metadata.as_ref()),
            });
        }
    }
    let instance = if version >= 7 {
        req.group_instance_id.as_ref().map(|i| i.as_str())
    } else {
        None
    };
    let allowed = ctx
        .check(|a, c, img| {
            let keel = keel_proto::broker::OffsetCommitRequest {
                group_id: req.group_id.as_str().to_string(),
                offsets: entries
                    .iter()
                    .map(|e| keel_proto::broker::OffsetCommitEntry {
                        topic: e.topic.clone(),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            };
            crate::access::offset_commit(a, c, img, &keel)
        })
        .map_err(|d| d.code);
    let codes = match allowed {
        Err(code) => Err(code),
        Ok(()) => {
            coordinator(ctx)
                .commit(
                    req.group_id.as_str(),
                    req.member_id.as_str(),
                    instance,
                    req.generation_id_or_member_epoch,
                    entries,
                )
                .await
        }
    };
    let mut codes = match codes {
        Ok(c) => c.into_iter(),
        Err(code) => vec![code; req.topics.iter().map(|t| t.partitions.len()).sum()].into_iter(),
    };
    OffsetCommitResponse::default().with_topics(
        req.topics
            .iter()
            .map(|t| {
                OffsetCommitResponseTopic::default()
                    .with_name(t.name.clone())
                    .with_partitions(
                        t.partitions
                            .iter()
                            .map(|p| {
                                OffsetCommitResponsePartition::default()
                                    .with_partition_index(p.partition_index)
                                    .with_error_code(codes.next().unwrap_or(ErrorCode::None).code())
                            })
                            .collect(),
                    )
            })
            .collect(),
    )
}

/// One committed offset for OffsetFetch: (partition, offset, leader epoch, metadata, error);
/// -1, -1, "" when the partition has none or the error is not NONE.
type FetchedPartition = (i32, i64, i32, String, ErrorCode);

/// One group's committed offsets by topic, or the group-level error.
type FetchedGroup = Result<Vec<(String, Vec<FetchedPartition>)>, ErrorCode>;

fn fetch_group(
    ctx: &KafkaContext,
    group: &str,
    topics: Option<Vec<(String, Vec<i32>)>>,
) -> FetchedGroup {
    let wanted = topics.map(|ts| {
        ts.into_iter()
            .flat_map(|(t, ps)| ps.into_iter().map(move |p| (t.clone(), p)))
            .collect::<Vec<_>>()
    });
    let named = wanted.is_some();
    ctx.check_group(Operation::Describe, group)?;
    let found = coordinator(ctx).fetch_offsets(group, wanted)?;
    // Kafka (`KafkaApis.handleOffsetFetchRequest`): a topic the caller may not DESCRIBE is
    // TOPIC_AUTHORIZATION_FAILED in each partition named, and left out when every
    // committed offset was asked for (clients may not see offsets of topics they may not
    // describe, nor learn their names).
    let mut visible: HashMap<String, bool> = HashMap::new();
    let mut out: Vec<(String, Vec<FetchedPartition>)> = Vec::new();
    for (t, p, c) in found {
        let allowed = *visible.entry(t.clone()).or_insert_with(|| {
            ctx.check(|a, c, img| crate::access::topic(a, c, img, Operation::Describe, &t))
                .is_ok()
        });
        let row = match c {
            _ if !allowed && !named => continue,
            _ if !allowed => (
                p,
                -1,
                -1,
                String::new(),
                ErrorCode::TopicAuthorizationFailed,
            ),
            Some(c) => (p, c.offset, c.leader_epoch, c.metadata, ErrorCode::None),
            None => (p, -1, -1, String::new(), ErrorCode::None),
        };
        match out.last_mut() {
            Some((name, rows)) if *name == t => rows.push(row),
            _ => out.push((t, vec![row])),
        }
    }
    Ok(out)
}

/// OffsetFetch v1-8 (v8: several groups, KIP-709).
pub fn offset_fetch(
    ctx: &KafkaContext,
    req: &OffsetFetchRequest,
    version: i16,
) -> OffsetFetchResponse {
    if version >= 8 {
        let groups = req
            .groups
            .iter()
            .map(|g| {
                let topics = g.topics.as_ref().map(|ts| {
                    ts.iter()
                        .map(|t| (t.name.as_str().to_string(), t.partition_indexes.clone()))
                        .collect()
                });
                let out = OffsetFetchResponseGroup::default().with_group_id(g.group_id.clone());
                match fetch_group(ctx, g.group_id.as_str(), topics) {
                    Err(code) => out.with_error_code(code.code()),
                    Ok(rows) => out.with_topics(
                        rows.into_iter()
                            .map(|(t, ps)| {
                                OffsetFetchResponseTopics::default()
                                    .with_name(TopicName(s(t)))
                                    .with_partitions(
                                        ps.into_iter()
                                            .map(|(p, o, e, m, code)| {
                                                OffsetFetchResponsePartitions::default()
                                                    .with_partition_index(p)
                                                    .with_committed_offset(o)
                                                    .with_committed_leader_epoch(e)
                                                    .with_metadata(Some(s(m)))
                                                    .with_error_code(code.code())
                                            })
                                            .collect(),
                                    )
                            })
                            .collect(),
                    ),
                }
            })
            .collect();
        return OffsetFetchResponse::default().with_groups(groups);
    }
    let topics = req.topics.as_ref().map(|ts| {
        ts.iter()
            .map(|t| (t.name.as_str().to_string(), t.partition_indexes.clone()))
            .collect()
    });
    match fetch_group(ctx, req.group_id.as_str(), topics) {
        Err(code) => {
            // Before v2 there is no top-level error: every asked partition carries it.
            let topics = if version < 2 {
                req.topics
                    .iter()
                    .flatten()
                    .map(|t| {
                        OffsetFetchResponseTopic::default()
                            .with_name(t.name.clone())
                            .with_partitions(
                                t.partition_indexes
                                    .iter()
                                    .map(|p| {
                                        OffsetFetchResponsePartition::default()
                                            .with_partition_index(*p)
                                            .with_committed_offset(-1)
                                            .with_metadata(Some(s("")))
                                            .with_error_code(code.code())
                                    })
                                    .collect(),
                            )
                    })
                    .collect()
            } else {
                Vec::new()
            };
            let out = OffsetFetchResponse::default().with_topics(topics);
            if version >= 2 {
                out.with_error_code(code.code())
            } else {
                out
            }
        }
        Ok(rows) => OffsetFetchResponse::default().with_topics(
            rows.into_iter()
                .map(|(t, ps)| {
                    OffsetFetchResponseTopic::default()
                        .with_name(TopicName(s(t)))
                        .with_partitions(
                            ps.into_iter()
                                .map(|(p, o, e, m, code)| {
                                    let r = OffsetFetchResponsePartition::default()
                                        .with_partition_index(p)
                                        .with_committed_offset(o)
                                        .with_metadata(Some(s(m)))
                                        .with_error_code(code.code());
                                    if version >= 5 {
                                        r.with_committed_leader_epoch(e)
                                    } else {
                                        r
                                    }
                                })
                                .collect(),
                        )
                })
                .collect(),
        ),
    }
}

/// DescribeGroups v0-5.
pub fn describe_groups(
    ctx: &KafkaContext,
    req: &DescribeGroupsRequest,
    version: i16,
) -> DescribeGroupsResponse {
    let groups = req
        .groups
        .iter()
        .map(|g| {
            let out = DescribedGroup::default().with_group_id(g.clone());
            let out = if version >= 3 {
                out.with_authorized_operations(i32::MIN)
            } else {
                out
            };
            let described = ctx
                .check_group(Operation::Describe, g.as_str())
                .and_then(|()| coordinator(ctx).describe(g.as_str()));
            match described {
                Err(code) => out.with_error_code(code.code()).with_group_state(s("")),
                Ok(d) => out
                    .with_group_state(s(d.state))
                    .with_protocol_type(s(d.protocol_type))
                    .with_protocol_data(s(d.protocol))
                    .with_members(
                        d.members
                            .into_iter()
                            .map(|(id, instance, client, host, meta, assign)| {
                                let m = DescribedGroupMember::default()
                                    .with_member_id(s(id))
                                    .with_client_id(s(client))
                                    .with_client_host(s(host))
                                    .with_member_metadata(meta)
                                    .with_member_assignment(assign);
                                if version >= 4 {
                                    m.with_group_instance_id(instance.map(s))
                                } else {
                                    m
                                }
                            })
                            .collect(),
                    ),
            }
        })
        .collect();
    DescribeGroupsResponse::default().with_groups(groups)
}

/// ListGroups v0-5 (v4 states filter, v5 types filter: only `classic` groups exist here).
pub fn list_groups(
    ctx: &KafkaContext,
    req: &ListGroupsRequest,
    version: i16,
) -> ListGroupsResponse {
    let states: Vec<String> = if version >= 4 {
        req.states_filter
            .iter()
            .map(|x| x.as_str().to_string())
            .collect()
    } else {
        Vec::new()
    };
    let wants_classic = version < 5
        || req.types_filter.is_empty()
        || req
            .types_filter
            .iter()
            .any(|t| t.as_str().eq_ignore_ascii_case("classic"));
    match coordinator(ctx).list(&states) {
        Err(code) => ListGroupsResponse::default().with_error_code(code.code()),
        Ok(groups) => ListGroupsResponse::default().with_groups(
            groups
                .into_iter()
                .filter(|g| {
                    wants_classic && ctx.check_group(Operation::Describe, &g.group_id).is_ok()
                })
                .map(|g| {
                    let mut out = KListedGroup::default()
                        .with_group_id(GroupId(s(g.group_id)))
                        .with_protocol_type(s(g.protocol_type));
                    if version >= 4 {
                        out = out.with_group_state(s(g.state));
                    }
                    if version >= 5 {
                        out = out.with_group_type(s("classic"));
                    }
                    out
                })
                .collect(),
        ),
    }
}

/// OffsetDelete v0 (KIP-496; `kafka-consumer-groups --delete-offsets`), as Kafka's
/// `KafkaApis.handleOffsetDeleteRequest`: DELETE on the group (else the top-level
/// GROUP_AUTHORIZATION_FAILED), then per partition READ on its topic
/// (TOPIC_AUTHORIZATION_FAILED) and a partition the cluster has (UNKNOWN_TOPIC_OR_PARTITION);
/// the rest go to [`GroupCoordinator::delete_group_offsets`]. A request-level error (not
/// authorized, unknown group, members outside the consumer protocol, not the coordinator)
/// is the top-level error with no topics, as Kafka's `OffsetDeleteRequest.getErrorResponse`
/// answers.
pub async fn offset_delete(
    ctx: &KafkaContext,
    req: &kafka_protocol::messages::OffsetDeleteRequest,
) -> kafka_protocol::messages::OffsetDeleteResponse {
    use kafka_protocol::messages::offset_delete_response::{
        OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
    };
    let group = req.group_id.as_str();
    let asked: Vec<(String, i32)> = req
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| (t.name.as_str().to_string(), p.partition_index))
        })
        .collect();
    let mut codes = vec![ErrorCode::None; asked.len()];
    let top = match ctx.check_group(Operation::Delete, group) {
        Err(code) => code,
        Ok(()) => {
            let image = ctx.images.borrow().clone();
            for (i, (topic, partition)) in asked.iter().enumerate() {
                if let Err(d) =
                    ctx.check(|a, c, img| crate::access::topic(a, c, img, Operation::Read, topic))
                {
                    codes[i] = d.code;
                } else if !image
                    .topics()
                    .get_by_name(topic)
                    .is_some_and(|t| t.partitions.contains_key(partition))
                {
                    codes[i] = ErrorCode::UnknownTopicOrPartition;
                }
            }
            let pending: Vec<usize> = (0..asked.len())
                .filter(|i| codes[*i] == ErrorCode::None)
                .collect();
            let wanted: Vec<(String, i32)> = pending.iter().map(|i| asked[*i].clone()).collect();
            match coordinator(ctx).delete_group_offsets(group, &wanted).await {
                Err(code) => code,
                Ok(answers) => {
                    for (i, code) in pending.into_iter().zip(answers) {
                        codes[i] = code;
                    }
                    ErrorCode::None
                }
            }
        }
    };
    let response = kafka_protocol::messages::OffsetDeleteResponse::default();
    if top != ErrorCode::None {
        return response.with_error_code(top.code());
    }
    let mut codes = codes.into_iter();
    response.with_topics(
        req.topics
            .iter()
            .map(|t| {
                OffsetDeleteResponseTopic::default()
                    .with_name(t.name.clone())
                    .with_partitions(
                        t.partitions
                            .iter()
                            .map(|p| {
                                OffsetDeleteResponsePartition::default()
                                    .with_partition_index(p.partition_index)
                                    .with_error_code(codes.next().unwrap_or(ErrorCode::None).code())
                            })
                            .collect(),
                    )
            })
            .collect(),
    )
}

/// DeleteGroups v0-2.
pub async fn delete_groups(ctx: &KafkaContext, req: &DeleteGroupsRequest) -> DeleteGroupsResponse {
    let mut results = Vec::with_capacity(req.groups_names.len());
    for g in &req.groups_names {
        let code = match ctx.check_group(Operation::Delete, g.as_str()) {
            Err(code) => code,
            Ok(()) => coordinator(ctx).delete(g.as_str()).await,
        };
        results.push(
            DeletableGroupResult::default()
                .with_group_id(g.clone())
                .with_error_code(code.code()),
        );
    }
    DeleteGroupsResponse::default().with_results(results)
}
