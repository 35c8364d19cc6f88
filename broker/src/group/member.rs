//! The membership calls of Keel's gRPC broker API (`BrokerService` JoinGroup, SyncGroup,
//! Heartbeat, LeaveGroup): Keel's wire messages to [`GroupCoordinator`] calls and back, the
//! same coordinator and rules as the Kafka listener's (`crate::kafka::groups`), so Keel's
//! consumers and Kafka clients can share a group. Bounds are checked before
//! ([`crate::bounds`]).

use std::net::SocketAddr;

use keel_proto::ErrorCode;
use keel_proto::broker::{
    HeartbeatReply, HeartbeatRequest, JoinGroupMember, JoinGroupReply, JoinGroupRequest,
    LeaveGroupReply, LeaveGroupRequest, LeftMember, SyncGroupReply, SyncGroupRequest,
};
use keel_proto::common::Error as WireError;
use keel_proto::limits::clip;

use super::GroupCoordinator;
use super::state::{JoinRequest, SyncRequest};

fn err(code: ErrorCode, message: impl Into<String>) -> Option<WireError> {
    (code != ErrorCode::None).then(|| code.to_proto(message))
}

fn code_of(raw: i16) -> ErrorCode {
    ErrorCode::from_code(raw).unwrap_or(ErrorCode::UnknownServerError)
}

/// JoinGroup from a client at `peer` (shown by DescribeGroups as `/ip`, as Kafka does).
/// Always requires a known member id (KIP-394), as JoinGroup v4+ does.
pub async fn join_group(
    groups: &GroupCoordinator,
    req: JoinGroupRequest,
    peer: Option<SocketAddr>,
) -> JoinGroupReply {
    let join = JoinRequest {
        member_id: req.member_id,
        instance_id: req.group_instance_id,
        protocol_type: req.protocol_type,
        protocols: req
            .protocols
            .into_iter()
            .map(|p| (p.name, p.metadata))
            .collect(),
        session_timeout_ms: req.session_timeout_ms,
        rebalance_timeout_ms: req.rebalance_timeout_ms,
        client_id: req.client_id,
        client_host: peer.map_or_else(String::new, |p| format!("/{}", p.ip())),
        require_known_member_id: true,
    };
    let session_timeout_ms = req.session_timeout_ms;
    let r = groups.join(&req.group_id, join).await;
    let code = code_of(r.error);
    let message = if code == ErrorCode::InvalidSessionTimeout {
        let g = &groups.config().group;
        format!(
            "group {}: session_timeout_ms {session_timeout_ms} is outside this broker's \
             group_min_session_timeout_ms..=group_max_session_timeout_ms ({}..={})",
            clip(&req.group_id),
            g.min_session_timeout_ms,
            g.max_session_timeout_ms
        )
    } else {
        format!("group {}", clip(&req.group_id))
    };
    JoinGroupReply {
        error: err(code, message),
        generation_id: r.generation,
        protocol_type: r.protocol_type.unwrap_or_default(),
        protocol_name: r.protocol_name.unwrap_or_default(),
        leader: r.leader,
        member_id: r.member_id,
        members: r
            .members
            .into_iter()
            .map(|(member_id, group_instance_id, metadata)| JoinGroupMember {
                member_id,
                group_instance_id,
                metadata,
            })
            .collect(),
    }
}

/// SyncGroup.
pub async fn sync_group(groups: &GroupCoordinator, req: SyncGroupRequest) -> SyncGroupReply {
    let sync = SyncRequest {
        member_id: req.member_id,
        instance_id: req.group_instance_id,
        generation: req.generation_id,
        protocol_type: req.protocol_type,
        protocol_name: req.protocol_name,
        assignments: req
            .assignments
            .into_iter()
            .map(|a| (a.member_id, a.assignment))
            .collect(),
    };
    let r = groups.sync(&req.group_id, sync).await;
    SyncGroupReply {
        error: err(code_of(r.error), format!("group {}", clip(&req.group_id))),
        protocol_type: r.protocol_type.unwrap_or_default(),
        protocol_name: r.protocol_name.unwrap_or_default(),
        assignment: r.assignment,
    }
}

/// Heartbeat.
pub fn heartbeat(groups: &GroupCoordinator, req: &HeartbeatRequest) -> HeartbeatReply {
    let code = groups.heartbeat(
        &req.group_id,
        &req.member_id,
        req.group_instance_id.as_deref(),
        req.generation_id,
    );
    HeartbeatReply {
        error: err(code, format!("group {}", clip(&req.group_id))),
    }
}

/// LeaveGroup.
pub async fn leave_group(groups: &GroupCoordinator, req: LeaveGroupRequest) -> LeaveGroupReply {
    let members: Vec<(String, Option<String>)> = req
        .members
        .into_iter()
        .map(|m| (m.member_id, m.group_instance_id))
        .collect();
    match groups.leave(&req.group_id, &members).await {
        Err(code) => LeaveGroupReply {
            error: err(code, format!("group {}", clip(&req.group_id))),
            members: Vec::new(),
        },
        Ok(codes) => LeaveGroupReply {
            error: None,
            members: members
                .into_iter()
                .zip(codes)
                .map(|((member_id, group_instance_id), code)| LeftMember {
                    error: err(code, format!("member {}", clip(&member_id))),
                    member_id,
                    group_instance_id,
                })
                .collect(),
        },
    }
}
