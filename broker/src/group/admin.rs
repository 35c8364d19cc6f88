//! The consumer-group administration calls of Keel's gRPC broker API (`BrokerService`
//! FindCoordinator, ListGroups, DescribeGroups, OffsetFetch, OffsetCommit, DeleteGroups):
//! Keel's wire messages to [`GroupCoordinator`] calls and back. The bounds of the requests
//! are checked before ([`crate::bounds`]); the rules are the coordinator's, the same as for
//! Kafka clients on the Kafka listener.

use keel_metadata_log::MetadataImage;
use keel_proto::ErrorCode;
use keel_proto::broker::{
    DeleteGroupsReply, DeleteGroupsRequest, DeletedGroup, DescribeGroupsReply,
    DescribeGroupsRequest, DescribedGroup, FindCoordinatorReply, FindCoordinatorRequest,
    GroupMember, GroupOffset, ListGroupsReply, ListGroupsRequest, ListedGroup, OffsetCommitReply,
    OffsetCommitRequest, OffsetCommitResult, OffsetFetchReply, OffsetFetchRequest,
};
use keel_proto::common::Error as WireError;
use keel_proto::limits::clip;

use super::records::OFFSETS_TOPIC;
use super::{CommitEntry, GroupCoordinator};

fn err(code: ErrorCode, message: impl Into<String>) -> Option<WireError> {
    (code != ErrorCode::None).then(|| code.to_proto(message))
}

/// FindCoordinator: the leader of the group's `__consumer_offsets` partition, at its first
/// (gRPC) endpoint.
pub fn find_coordinator(
    groups: &GroupCoordinator,
    image: &MetadataImage,
    req: &FindCoordinatorRequest,
) -> FindCoordinatorReply {
    let fail = |code: ErrorCode, msg: String| FindCoordinatorReply {
        error: err(code, msg),
        node_id: -1,
        host: String::new(),
        port: -1,
    };
    if req.group_id.is_empty() {
        return fail(ErrorCode::InvalidGroupId, "the group id is empty".into());
    }
    let Some(topic) = image.topics().get_by_name(OFFSETS_TOPIC) else {
        return fail(
            ErrorCode::CoordinatorNotAvailable,
            format!("{OFFSETS_TOPIC} is being created"),
        );
    };
    let p = groups.partition_for(&req.group_id);
    let leader = topic.partitions.get(&p).map_or(-1, |r| r.leader);
    match image
        .broker(leader)
        .filter(|b| !b.fenced)
        .and_then(|b| b.endpoints.first())
    {
        Some(ep) => FindCoordinatorReply {
            error: None,
            node_id: leader,
            host: ep.host.clone(),
            port: ep.port as i32,
        },
        None => fail(
            ErrorCode::CoordinatorNotAvailable,
            format!("{OFFSETS_TOPIC}-{p} has no leader"),
        ),
    }
}

/// ListGroups.
pub fn list_groups(groups: &GroupCoordinator, req: &ListGroupsRequest) -> ListGroupsReply {
    match groups.list(&req.states_filter) {
        Err(code) => ListGroupsReply {
            error: err(code, "retry"),
            groups: Vec::new(),
        },
        Ok(list) => ListGroupsReply {
            error: None,
            groups: list
                .into_iter()
                .map(|g| ListedGroup {
                    group_id: g.group_id,
                    protocol_type: g.protocol_type,
                    state: g.state.to_string(),
                })
                .collect(),
        },
    }
}

/// DescribeGroups.
pub fn describe_groups(
    groups: &GroupCoordinator,
    req: &DescribeGroupsRequest,
) -> DescribeGroupsReply {
    DescribeGroupsReply {
        groups: req
            .group_ids
            .iter()
            .map(|id| match groups.describe(id) {
                Err(code) => DescribedGroup {
                    error: err(code, format!("group {}", clip(id))),
                    group_id: id.clone(),
                    ..Default::default()
                },
                Ok(d) => DescribedGroup {
                    error: None,
                    group_id: id.clone(),
                    state: d.state,
                    protocol_type: d.protocol_type,
                    protocol: d.protocol,
                    members: d
                        .members
                        .into_iter()
                        .map(
                            |(
                                member_id,
                                instance,
                                client_id,
                                client_host,
                                metadata,
                                assignment,
                            )| GroupMember {
                                member_id,
                                group_instance_id: instance,
                                client_id,
                                client_host,
                                metadata,
                                assignment,
                            },
                        )
                        .collect(),
                },
            })
            .collect(),
    }
}

/// OffsetFetch.
pub fn offset_fetch(groups: &GroupCoordinator, req: &OffsetFetchRequest) -> OffsetFetchReply {
    if req.group_id.is_empty() {
        return OffsetFetchReply {
            error: err(ErrorCode::InvalidGroupId, "the group id is empty"),
            offsets: Vec::new(),
        };
    }
    let wanted = (!req.topics.is_empty()).then(|| {
        req.topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(move |p| (t.name.clone(), *p)))
            .collect()
    });
    match groups.fetch_offsets(&req.group_id, wanted) {
        Err(code) => OffsetFetchReply {
            error: err(code, format!("group {}", clip(&req.group_id))),
            offsets: Vec::new(),
        },
        Ok(rows) => OffsetFetchReply {
            error: None,
            offsets: rows
                .into_iter()
                .map(|(topic, partition, c)| match c {
                    Some(c) => GroupOffset {
                        topic,
                        partition,
                        offset: c.offset,
                        leader_epoch: c.leader_epoch,
                        metadata: c.metadata,
                    },
                    None => GroupOffset {
                        topic,
                        partition,
                        offset: -1,
                        leader_epoch: -1,
                        metadata: String::new(),
                    },
                })
                .collect(),
        },
    }
}

/// OffsetCommit.
pub async fn offset_commit(
    groups: &GroupCoordinator,
    req: OffsetCommitRequest,
) -> OffsetCommitReply {
    let keys: Vec<(String, i32)> = req
        .offsets
        .iter()
        .map(|o| (o.topic.clone(), o.partition))
        .collect();
    let entries = req
        .offsets
        .into_iter()
        .map(|o| CommitEntry {
            topic: o.topic,
            partition: o.partition,
            offset: o.offset,
            leader_epoch: o.leader_epoch,
            metadata: o.metadata,
        })
        .collect();
    match groups
        .commit(
            &req.group_id,
            &req.member_id,
            req.group_instance_id.as_deref(),
            req.generation_id,
            entries,
        )
        .await
    {
        Err(code) => OffsetCommitReply {
            error: err(
                code,
                format!("group {}: nothing committed", clip(&req.group_id)),
            ),
            results: Vec::new(),
        },
        Ok(codes) => OffsetCommitReply {
            error: None,
            results: keys
                .into_iter()
                .zip(codes)
                .map(|((topic, partition), code)| OffsetCommitResult {
                    error: err(code, format!("{topic}-{partition}")),
                    topic,
                    partition,
                })
                .collect(),
        },
    }
}

/// DeleteGroups.
pub async fn delete_groups(
    groups: &GroupCoordinator,
    req: &DeleteGroupsRequest,
) -> DeleteGroupsReply {
    let mut results = Vec::with_capacity(req.group_ids.len());
    for id in &req.group_ids {
        let code = groups.delete(id).await;
        results.push(DeletedGroup {
            group_id: id.clone(),
            error: err(code, format!("group {}", clip(id))),
        });
    }
    DeleteGroupsReply { results }
}
