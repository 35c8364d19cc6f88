//! The AlterPartition sender (Kafka `DefaultAlterPartitionManager`, KIP-497): leaders queue
//! their ISR changes ([`crate::replica::Effects::alter_partition`]); this task sends them to
//! the active controller in batches (at most [`MAX_BATCH`] partitions per request) and hands
//! each answer back to its partition
//! ([`crate::replica::PartitionState::handle_alter_partition_response`]). Transport failures
//! and NOT_CONTROLLER come back as retriable; the partition's state schedules the resend.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use keel_proto::ErrorCode;
use keel_proto::controller::{
    AlterPartitionPartition, AlterPartitionRequest as WireRequest, AlterPartitionTopic, BrokerState,
};
use keel_proto::metadata::LeaderRecoveryState;
use tokio::sync::{mpsc, watch};

use super::{HostedPartition, ReplicaManager};
use crate::lifecycle::{ActiveControllerClient, ControllerChannels};
use crate::replica::{AlterPartitionRequest, AlterPartitionResponse};

/// Most partitions in one AlterPartition request.
pub const MAX_BATCH: usize = 256;

type Item = (Arc<HostedPartition>, AlterPartitionRequest);

/// Runs the sender until `stop`.
pub async fn run(
    rm: ReplicaManager,
    channels: ControllerChannels,
    request_timeout: Duration,
    mut rx: mpsc::Receiver<Item>,
    mut stop: watch::Receiver<bool>,
) {
    let mut client = ActiveControllerClient::new(channels, request_timeout);
    loop {
        let first = tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            item = rx.recv() => match item {
                Some(i) => i,
                None => return,
            },
        };
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(i) => batch.push(i),
                Err(_) => break,
            }
        }
        let req = wire_request(&rm, &batch);
        let answers = match client
            .call(|mut c| {
                let req = req.clone();
                async move { c.alter_partition(req).await }
            })
            .await
        {
            Err(e) => {
                tracing::warn!("AlterPartition not sent: {e}");
                vec![AlterPartitionResponse::Transport; batch.len()]
            }
            Ok(reply) => decode(&batch, reply),
        };
        let now = rm.now_ms();
        for ((hp, req), answer) in batch.into_iter().zip(answers) {
            let mut inner = hp.lock();
            let eff = inner
                .state
                .handle_alter_partition_response(req.request_id, answer, now);
            rm.execute(&hp, &mut inner, eff);
        }
    }
}

fn wire_request(rm: &ReplicaManager, batch: &[Item]) -> WireRequest {
    let mut topics: BTreeMap<uuid::Uuid, AlterPartitionTopic> = BTreeMap::new();
    for (hp, req) in batch {
        let id = hp.topic_id();
        let t = topics.entry(id).or_insert_with(|| AlterPartitionTopic {
            topic_id: bytes::Bytes::copy_from_slice(id.as_bytes()),
            topic_name: hp.tp.topic.clone(),
            partitions: Vec::new(),
        });
        t.partitions.push(AlterPartitionPartition {
            partition_index: req.topic_partition.partition,
            leader_epoch: req.leader_epoch,
            new_isr_with_epochs: req
                .new_isr
                .iter()
                .map(|m| BrokerState {
                    broker_id: m.broker_id,
                    broker_epoch: m.broker_epoch,
                })
                .collect(),
            leader_recovery_state: LeaderRecoveryState::Recovered as i32,
            partition_epoch: req.partition_epoch,
            expected_partition_epoch: None,
        });
    }
    WireRequest {
        broker_id: rm.broker_id(),
        broker_epoch: rm.broker_epoch(),
        topics: topics.into_values().collect(),
    }
}

/// One answer per batch item, in order.
fn decode(
    batch: &[Item],
    reply: keel_proto::controller::AlterPartitionReply,
) -> Vec<AlterPartitionResponse> {
    let top = ErrorCode::from_proto(reply.error.as_ref()).unwrap_or(ErrorCode::UnknownServerError);
    if top != ErrorCode::None {
        return vec![AlterPartitionResponse::Error(top); batch.len()];
    }
    batch
        .iter()
        .map(|(hp, req)| {
            let id = hp.topic_id();
            let found = reply
                .topics
                .iter()
                .filter(|t| {
                    keel_metadata_log::image::uuid_from_bytes(&t.topic_id) == Some(id)
                        || (t.topic_id.is_empty() && t.topic_name == hp.tp.topic)
                })
                .flat_map(|t| t.partitions.iter())
                .find(|p| p.partition_index == req.topic_partition.partition);
            match found {
                None => AlterPartitionResponse::Error(ErrorCode::UnknownServerError),
                Some(p) => {
                    let code = ErrorCode::from_proto(p.error.as_ref())
                        .unwrap_or(ErrorCode::UnknownServerError);
                    if code == ErrorCode::None {
                        AlterPartitionResponse::Committed {
                            leader_epoch: p.leader_epoch,
                            partition_epoch: p.partition_epoch,
                            isr: p.isr.clone(),
                        }
                    } else {
                        AlterPartitionResponse::Error(code)
                    }
                }
            }
        })
        .collect()
}
