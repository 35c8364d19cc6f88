//! DeleteRecords v0-2 on the Kafka listener (KIP-107; `kafka-delete-records`,
//! confluent-kafka's and kafka-python's `delete_records`): each partition needs DELETE on its
//! topic (TOPIC_AUTHORIZATION_FAILED otherwise, Kafka `KafkaApis.handleDeleteRecordsRequest`),
//! then this broker, as its leader, moves the log start and waits for the in-sync replicas
//! ([`crate::replica_manager::delete_records`]). Clients send each partition to its leader;
//! another broker's partition is NOT_LEADER_OR_FOLLOWER, and the client asks again after a
//! Metadata refresh.

use std::time::Duration;

use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::{DeleteRecordsRequest, DeleteRecordsResponse};
use keel_metadata_log::acl::Operation;
use keel_proto::ErrorCode;

use super::context::KafkaContext;
use crate::replica_manager::delete_records::DeleteRecordsOutcome;

/// The longest a DeleteRecords waits for the replicas: the request's `timeout_ms` is clamped
/// into `0..=` this (Kafka holds it for `timeout_ms` in its purgatory; an unbounded wait would
/// pin the connection, which answers in order).
pub const MAX_WAIT: Duration = Duration::from_secs(300);

/// Answers a DeleteRecords request: one result per partition, in request order.
pub async fn delete_records(
    ctx: &KafkaContext,
    req: &DeleteRecordsRequest,
) -> DeleteRecordsResponse {
    let asked: Vec<(String, i32, i64)> = req
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| (t.name.as_str().to_string(), p.partition_index, p.offset))
        })
        .collect();
    let mut outcomes: Vec<Option<DeleteRecordsOutcome>> = asked
        .iter()
        .map(|(topic, _, _)| {
            ctx.check(|a, c, img| crate::access::topic(a, c, img, Operation::Delete, topic))
                .err()
                .map(|d| DeleteRecordsOutcome {
                    low_watermark: -1,
                    error: d.code,
                    message: d.message,
                })
        })
        .collect();
    let allowed: Vec<(usize, (String, i32, i64))> = asked
        .into_iter()
        .enumerate()
        .filter(|(i, _)| outcomes[*i].is_none())
        .collect();
    let wait = u64::try_from(req.timeout_ms)
        .map_or(Duration::ZERO, Duration::from_millis)
        .min(MAX_WAIT);
    let entries: Vec<(String, i32, i64)> = allowed.iter().map(|(_, e)| e.clone()).collect();
    let answers = ctx.replicas.delete_records(&entries, wait).await;
    for ((i, _), answer) in allowed.iter().zip(answers) {
        if answer.error != ErrorCode::None {
            tracing::debug!(code = %answer.error, "DeleteRecords: {}", answer.message);
        }
        outcomes[*i] = Some(answer);
    }
    let mut outcomes = outcomes.into_iter();
    DeleteRecordsResponse::default().with_topics(
        req.topics
            .iter()
            .map(|t| {
                DeleteRecordsTopicResult::default()
                    .with_name(t.name.clone())
                    .with_partitions(
                        t.partitions
                            .iter()
                            .map(|p| {
                                let o = outcomes.next().flatten().unwrap_or(DeleteRecordsOutcome {
                                    low_watermark: -1,
                                    error: ErrorCode::UnknownServerError,
                                    message: String::new(),
                                });
                                DeleteRecordsPartitionResult::default()
                                    .with_partition_index(p.partition_index)
                                    .with_low_watermark(o.low_watermark)
                                    .with_error_code(o.error.code())
                            })
                            .collect(),
                    )
            })
            .collect(),
    )
}
