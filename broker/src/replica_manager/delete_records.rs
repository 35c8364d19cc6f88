//! DeleteRecords on the leader (KIP-107; Kafka `ReplicaManager.deleteRecords`,
//! `Partition.deleteRecordsOnLeader`, `DelayedDeleteRecords`): moves a partition's log start
//! offset up, then waits until every ISR member took it (the partition's low watermark,
//! [`crate::replica::PartitionState::low_watermark`]) or the request's timeout.
//!
//! Order, per partition (validation before any change):
//! 1. not hosted: NOT_LEADER_OR_FOLLOWER when the metadata has the partition (another
//!    broker leads it), else UNKNOWN_TOPIC_OR_PARTITION; not the leader:
//!    NOT_LEADER_OR_FOLLOWER;
//! 2. a topic whose `cleanup.policy` lacks `delete` (compact only): POLICY_VIOLATION;
//! 3. the offset: -1 is the high watermark (`DeleteRecordsRequest.HIGH_WATERMARK`); any
//!    other negative value or one above the high watermark is OFFSET_OUT_OF_RANGE;
//! 4. [`crate::log::Log::increment_log_start_offset`] (fsynced before anything is removed;
//!    nothing happens when the start is already there or above);
//! 5. wait, polling every [`POLL`], until the low watermark reaches the offset (then the
//!    answer is NONE with the low watermark) or `timeout` passes (REQUEST_TIMED_OUT with the
//!    low watermark so far; the start has moved all the same, as in Kafka), or leadership
//!    is lost meanwhile (NOT_LEADER_OR_FOLLOWER).

use std::time::{Duration, Instant};

use keel_proto::ErrorCode;
use keel_proto::broker::{
    DeleteRecordsPartitionResult, DeleteRecordsReply, DeleteRecordsRequest,
    DeleteRecordsTopicResult,
};
use keel_proto::limits::clip;

use super::ReplicaManager;

/// Kafka's `DeleteRecordsRequest.HIGH_WATERMARK`: delete up to the high watermark.
pub const HIGH_WATERMARK: i64 = -1;

/// How often a waiting DeleteRecords looks at the low watermark again (it moves with the
/// followers' fetches, which carry their log start offsets).
const POLL: Duration = Duration::from_millis(10);

/// The outcome of DeleteRecords for one partition: the low watermark (-1 when unknown) and
/// the error (NONE on success).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteRecordsOutcome {
    /// The partition's low watermark when answered (-1 when it is not known).
    pub low_watermark: i64,
    /// NONE, or why the records were not (all) deleted.
    pub error: ErrorCode,
    /// The detail of `error` (empty for NONE).
    pub message: String,
}

impl DeleteRecordsOutcome {
    fn failed(error: ErrorCode, message: String) -> Self {
        Self {
            low_watermark: -1,
            error,
            message,
        }
    }
}

impl ReplicaManager {
    /// BrokerService.DeleteRecords: [`ReplicaManager::delete_records`] for every partition
    /// of `req` (bounds and authorization checked by the caller: `timeout_ms` is
    /// `0..=300000`), answered per partition in request order.
    pub async fn answer_delete_records(&self, req: &DeleteRecordsRequest) -> DeleteRecordsReply {
        let asked: Vec<(String, i32, i64)> = req
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(|p| (t.name.clone(), p.partition_index, p.offset))
            })
            .collect();
        let timeout = Duration::from_millis(u64::try_from(req.timeout_ms).unwrap_or(0));
        let mut outcomes = self.delete_records(&asked, timeout).await.into_iter();
        let topics = req
            .topics
            .iter()
            .map(|t| DeleteRecordsTopicResult {
                name: t.name.clone(),
                partitions: t
                    .partitions
                    .iter()
                    .zip(outcomes.by_ref())
                    .map(|(p, o)| DeleteRecordsPartitionResult {
                        partition_index: p.partition_index,
                        low_watermark: o.low_watermark,
                        error: (o.error != ErrorCode::None).then(|| o.error.to_proto(o.message)),
                    })
                    .collect(),
            })
            .collect();
        DeleteRecordsReply {
            error: None,
            topics,
        }
    }

    /// Deletes, on this leader, the records below each `(topic, partition, offset)` of
    /// `asked`, then waits up to `timeout` for the ISR to follow (see the module doc for the
    /// checks and codes). One outcome per entry, in order. Every log start moves first (no
    /// await in between); then one loop looks at the partitions still waiting every
    /// [`POLL`], so a request costs one task whatever its size.
    pub async fn delete_records(
        &self,
        asked: &[(String, i32, i64)],
        timeout: Duration,
    ) -> Vec<DeleteRecordsOutcome> {
        let deadline = Instant::now() + timeout;
        let mut outcomes = Vec::with_capacity(asked.len());
        let mut waiting = Vec::new();
        for (i, (topic, partition, offset)) in asked.iter().enumerate() {
            match self.move_log_start(topic, *partition, *offset) {
                Ok((hp, target)) => {
                    outcomes.push(DeleteRecordsOutcome::failed(ErrorCode::None, String::new()));
                    waiting.push((i, hp, target));
                }
                Err(failed) => outcomes.push(failed),
            }
        }
        if !waiting.is_empty() {
            self.shared.data_changed.notify_waiters();
        }
        // Bounded by `deadline`: one look every POLL; each look drops the answered ones.
        loop {
            waiting.retain(|(i, hp, target)| {
                let (topic, partition, _) = &asked[*i];
                let inner = hp.lock();
                if !inner.state.is_leader() {
                    outcomes[*i] = DeleteRecordsOutcome::failed(
                        ErrorCode::NotLeaderOrFollower,
                        format!(
                            "broker {} stopped leading {}-{partition} while waiting for its \
                             replicas",
                            self.broker_id(),
                            clip(topic)
                        ),
                    );
                    return false;
                }
                let low = inner.state.low_watermark().unwrap_or(-1);
                outcomes[*i].low_watermark = low;
                if low >= *target {
                    return false;
                }
                if Instant::now() >= deadline {
                    outcomes[*i].error = ErrorCode::RequestTimedOut;
                    outcomes[*i].message = format!(
                        "the log start of {}-{partition} moved to {target}, but its in-sync \
                         replicas did not all follow within {} ms (low watermark {low})",
                        clip(topic),
                        timeout.as_millis()
                    );
                    return false;
                }
                true
            });
            if waiting.is_empty() {
                return outcomes;
            }
            tokio::time::sleep(POLL.min(deadline.saturating_duration_since(Instant::now()))).await;
        }
    }

    /// Steps 1-4 of the module doc for one partition: the partition and the offset the log
    /// start moved to (at or below the start already: nothing moved), or the refusal.
    fn move_log_start(
        &self,
        topic: &str,
        partition: i32,
        offset: i64,
    ) -> Result<(std::sync::Arc<super::HostedPartition>, i64), DeleteRecordsOutcome> {
        let Some(hp) = self.partition(topic, partition) else {
            let known = self
                .image()
                .topics()
                .get_by_name(topic)
                .is_some_and(|t| t.partitions.contains_key(&partition));
            return Err(if known {
                DeleteRecordsOutcome::failed(
                    ErrorCode::NotLeaderOrFollower,
                    format!(
                        "broker {} does not host {}-{partition}",
                        self.broker_id(),
                        clip(topic)
                    ),
                )
            } else {
                DeleteRecordsOutcome::failed(
                    ErrorCode::UnknownTopicOrPartition,
                    format!("unknown partition {partition} of topic {:?}", clip(topic)),
                )
            });
        };
        let mut guard = hp.lock();
        let inner = &mut *guard;
        if !inner.state.is_leader() {
            return Err(DeleteRecordsOutcome::failed(
                ErrorCode::NotLeaderOrFollower,
                format!(
                    "broker {} is not the leader of {}-{partition}",
                    self.broker_id(),
                    clip(topic)
                ),
            ));
        }
        if !inner.log.config().cleanup_policy.delete {
            return Err(DeleteRecordsOutcome::failed(
                ErrorCode::PolicyViolation,
                format!(
                    "records of {}-{partition} cannot be deleted: its cleanup.policy is \
                     compact (deleting needs delete in it)",
                    clip(topic)
                ),
            ));
        }
        let hw = inner.state.high_watermark();
        let target = if offset == HIGH_WATERMARK { hw } else { offset };
        if !(0..=hw).contains(&target) {
            return Err(DeleteRecordsOutcome::failed(
                ErrorCode::OffsetOutOfRange,
                format!(
                    "cannot delete the records of {}-{partition} below offset {offset}: give \
                     an offset in [0, {hw}] (its high watermark is {hw}), or -1 for the high \
                     watermark",
                    clip(topic)
                ),
            ));
        }
        let moved = inner.log.increment_log_start_offset(target);
        let start = inner.log.log_start_offset();
        inner.state.set_log_start_offset(start);
        match moved {
            Ok((moved, deleted)) => {
                if moved {
                    tracing::info!(partition = %hp.tp, log_start_offset = start, segments = deleted.segment_count(), "DeleteRecords moved the log start");
                }
                if !deleted.is_empty() {
                    self.shared
                        .doomed
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .append(deleted);
                }
            }
            Err(e) => {
                tracing::error!(partition = %hp.tp, "DeleteRecords to {target} failed: {e}");
                return Err(DeleteRecordsOutcome::failed(
                    super::produce::log_error_code(&e),
                    format!("moving the log start of {}-{partition}: {e}", clip(topic)),
                ));
            }
        }
        drop(guard);
        Ok((hp, target))
    }
}
