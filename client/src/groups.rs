//! [`GroupAdmin`]: consumer-group administration over Keel's broker API, the calls behind
//! `keelctl group` (Kafka's `kafka-consumer-groups`): list the groups of every broker, find
//! a group's coordinator, describe its members and committed offsets, reset its offsets
//! (only while it has no members), delete it.
//!
//! Retries: NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE and
//! transport errors make the call find the coordinator again and retry, with jittered
//! backoff, until `api_timeout` has passed (Kafka's `default.api.timeout.ms`).

use std::time::Duration;

use keel_proto::ErrorCode;
use keel_proto::broker::{
    DeleteGroupsRequest, DescribeGroupsRequest, DescribedGroup, FindCoordinatorRequest,
    GroupOffset, ListGroupsRequest, ListedGroup, OffsetCommitEntry, OffsetCommitRequest,
    OffsetFetchRequest,
};

use crate::brokers::Brokers;

/// Why a group call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GroupError {
    /// The coordinator (or every broker) answered this error; shown as keelctl shows every
    /// Kafka error, `NAME (code): message` (`GROUP_ID_NOT_FOUND (69): group g`).
    #[error("{code} ({}){}", .code.code(), if .message.is_empty() { String::new() } else { format!(": {}", .message) })]
    Refused {
        /// Kafka's code.
        code: ErrorCode,
        /// What the broker said.
        message: String,
    },
    /// No broker answered within the budget.
    #[error("{0}")]
    Unreachable(String),
}

/// Consumer-group administration against the brokers at `addresses`.
#[derive(Debug)]
pub struct GroupAdmin {
    brokers: Brokers,
    addresses: Vec<String>,
    api_timeout: Duration,
}

fn refused(e: &keel_proto::common::Error) -> GroupError {
    GroupError::Refused {
        code: ErrorCode::from_code(e.code as i16).unwrap_or(ErrorCode::UnknownServerError),
        message: e.message.clone(),
    }
}

/// Whether a group error means "find the coordinator again and retry".
fn retriable(e: &GroupError) -> bool {
    match e {
        GroupError::Unreachable(_) => true,
        GroupError::Refused { code, .. } => matches!(
            code,
            ErrorCode::NotCoordinator
                | ErrorCode::CoordinatorLoadInProgress
                | ErrorCode::CoordinatorNotAvailable
        ),
    }
}

impl GroupAdmin {
    /// An admin over the brokers at `addresses` (any will do to find coordinators; listing
    /// asks each), each RPC bounded by `request_timeout`, each operation by `api_timeout`.
    pub fn new(addresses: Vec<String>, request_timeout: Duration, api_timeout: Duration) -> Self {
        Self {
            brokers: Brokers::new(addresses.clone(), request_timeout),
            addresses,
            api_timeout,
        }
    }

    /// The same, opening channels with `dialer` (TLS when it has a context).
    pub fn with_dialer(mut self, dialer: keel_runtime::tls::Dialer) -> Self {
        self.brokers = self.brokers.with_dialer(dialer);
        self
    }

    fn client(&self, addr: &str) -> Result<crate::grpc::BrokerClient, GroupError> {
        self.brokers
            .client_for(addr)
            .map_err(|e| GroupError::Unreachable(format!("{addr}: {e}")))
    }

    /// Runs `op` against the coordinator of `group`, retrying as the module doc says.
    /// Returns the answer and the id of the coordinator that gave it.
    async fn with_coordinator<T, F, Fut>(&self, group: &str, op: F) -> Result<(T, i32), GroupError>
    where
        F: Fn(crate::grpc::BrokerClient) -> Fut,
        Fut: std::future::Future<Output = Result<T, GroupError>>,
    {
        let deadline = tokio::time::Instant::now() + self.api_timeout;
        let backoff = keel_runtime::Backoff::from_millis(100, 1000);
        let mut last = GroupError::Unreachable("no broker was asked".into());
        for attempt in 0u32.. {
            let outcome = match self.coordinator(group).await {
                Ok((id, addr)) => match self.client(&addr) {
                    Ok(c) => op(c).await.map(|v| (v, id)),
                    Err(e) => Err(e),
                },
                Err(e) => Err(e),
            };
            match outcome {
                Ok(v) => return Ok(v),
                Err(e) if retriable(&e) => last = e,
                Err(e) => return Err(e),
            }
            let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
            let Some(pause) = keel_runtime::backoff::pause_within(backoff.next(attempt), remaining)
            else {
                break;
            };
            tokio::time::sleep(pause).await;
        }
        Err(last)
    }

    /// The coordinator of `group`: (broker id, `host:port`), asked of the first broker that
    /// answers.
    pub async fn coordinator(&self, group: &str) -> Result<(i32, String), GroupError> {
        let mut errors = Vec::new();
        for addr in &self.addresses {
            let mut c = match self.client(addr) {
                Ok(c) => c,
                Err(e) => {
                    errors.push(e.to_string());
                    continue;
                }
            };
            match c
                .find_coordinator(FindCoordinatorRequest {
                    group_id: group.to_string(),
                })
                .await
            {
                Ok(r) => {
                    let r = r.into_inner();
                    return match &r.error {
                        Some(e) => Err(refused(e)),
                        None => Ok((r.node_id, format!("{}:{}", r.host, r.port))),
                    };
                }
                Err(s) => errors.push(format!("{addr}: {}", s.message())),
            }
        }
        Err(GroupError::Unreachable(format!(
            "no broker answered FindCoordinator: {}",
            errors.join("; ")
        )))
    }

    /// Every group of every broker that answers, sorted by id (Kafka's `--list`),
    /// optionally only those in `states`, and the brokers that did not answer (`addr:
    /// error`; their groups are missing). Fails only if no broker answered.
    pub async fn list(
        &self,
        states: &[String],
    ) -> Result<(Vec<ListedGroup>, Vec<String>), GroupError> {
        let mut all = Vec::new();
        let mut missing = Vec::new();
        let mut answered = 0;
        for addr in &self.addresses {
            let reply = match self.client(addr) {
                Ok(mut c) => c
                    .list_groups(ListGroupsRequest {
                        states_filter: states.to_vec(),
                    })
                    .await
                    .map(|r| r.into_inner())
                    .map_err(|s| format!("{addr}: {}", s.message())),
                Err(e) => Err(e.to_string()),
            };
            match reply {
                Ok(r) => match &r.error {
                    Some(e) => missing.push(format!("{addr}: {}", refused(e))),
                    None => {
                        answered += 1;
                        all.extend(r.groups);
                    }
                },
                Err(e) => missing.push(e),
            }
        }
        if answered == 0 {
            return Err(GroupError::Unreachable(format!(
                "no broker listed its groups: {}",
                missing.join("; ")
            )));
        }
        all.sort_by(|a, b| a.group_id.cmp(&b.group_id));
        all.dedup_by(|a, b| a.group_id == b.group_id);
        Ok((all, missing))
    }

    /// State and members of `group`, and the id of the coordinator that answered.
    pub async fn describe(&self, group: &str) -> Result<(DescribedGroup, i32), GroupError> {
        self.with_coordinator(group, |mut c| async move {
            let reply = c
                .describe_groups(DescribeGroupsRequest {
                    group_ids: vec![group.to_string()],
                })
                .await
                .map_err(|s| GroupError::Unreachable(s.message().to_string()))?
                .into_inner();
            let g =
                reply.groups.into_iter().next().ok_or_else(|| {
                    GroupError::Unreachable("an empty DescribeGroups reply".into())
                })?;
            match &g.error {
                Some(e) => Err(refused(e)),
                None => Ok(g),
            }
        })
        .await
    }

    /// Every committed offset of `group`.
    pub async fn offsets(&self, group: &str) -> Result<Vec<GroupOffset>, GroupError> {
        let (offsets, _) = self
            .with_coordinator(group, |mut c| async move {
                let reply = c
                    .offset_fetch(OffsetFetchRequest {
                        group_id: group.to_string(),
                        topics: Vec::new(),
                    })
                    .await
                    .map_err(|s| GroupError::Unreachable(s.message().to_string()))?
                    .into_inner();
                match &reply.error {
                    Some(e) => Err(refused(e)),
                    None => Ok(reply.offsets),
                }
            })
            .await?;
        Ok(offsets)
    }

    /// Commits `offsets` ((topic, partition, offset)) as an administrator: refused with
    /// UNKNOWN_MEMBER_ID while the group has members.
    pub async fn reset(
        &self,
        group: &str,
        offsets: &[(String, i32, i64)],
    ) -> Result<(), GroupError> {
        self.with_coordinator(group, |mut c| async move {
            let reply = c
                .offset_commit(OffsetCommitRequest {
                    group_id: group.to_string(),
                    generation_id: -1,
                    member_id: String::new(),
                    group_instance_id: None,
                    offsets: offsets
                        .iter()
                        .map(|(topic, partition, offset)| OffsetCommitEntry {
                            topic: topic.clone(),
                            partition: *partition,
                            offset: *offset,
                            leader_epoch: -1,
                            metadata: None,
                        })
                        .collect(),
                })
                .await
                .map_err(|s| GroupError::Unreachable(s.message().to_string()))?
                .into_inner();
            if let Some(e) = &reply.error {
                return Err(refused(e));
            }
            match reply.results.iter().find_map(|r| r.error.as_ref()) {
                Some(e) => Err(refused(e)),
                None => Ok(()),
            }
        })
        .await
        .map(|_| ())
    }

    /// Deletes `group` (refused with NON_EMPTY_GROUP while it has members).
    pub async fn delete(&self, group: &str) -> Result<(), GroupError> {
        self.with_coordinator(group, |mut c| async move {
            let reply = c
                .delete_groups(DeleteGroupsRequest {
                    group_ids: vec![group.to_string()],
                })
                .await
                .map_err(|s| GroupError::Unreachable(s.message().to_string()))?
                .into_inner();
            match reply.results.first().and_then(|r| r.error.as_ref()) {
                Some(e) => Err(refused(e)),
                None => Ok(()),
            }
        })
        .await
        .map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_print_the_name_and_the_numeric_code() {
        let e = GroupError::Refused {
            code: ErrorCode::GroupIdNotFound,
            message: "group nosuch".into(),
        };
        assert_eq!(e.to_string(), "GROUP_ID_NOT_FOUND (69): group nosuch");
        let e = GroupError::Refused {
            code: ErrorCode::NonEmptyGroup,
            message: String::new(),
        };
        assert_eq!(e.to_string(), "NON_EMPTY_GROUP (68)");
    }
}
