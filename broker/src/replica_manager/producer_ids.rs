//! InitProducerId for idempotent producers (Kafka `ProducerIdManager`, KIP-730): producer
//! ids come from blocks of 1000 the active controller allocates to this broker
//! (AllocateProducerIds -> ProducerIdsRecord). Without a transactional id Kafka hands out a
//! fresh producer id with epoch 0 on every InitProducerId, and so does Keel.

use std::time::Duration;

use keel_proto::ErrorCode;
use keel_proto::broker::InitProducerIdReply;
use keel_proto::controller::AllocateProducerIdsRequest;

use crate::lifecycle::{ActiveControllerClient, ControllerChannels};

/// The current block `[next, end)` and the client to get the next one.
#[derive(Debug)]
pub struct ProducerIdManager {
    broker_id: i32,
    state: tokio::sync::Mutex<(i64, i64, ActiveControllerClient)>,
}

impl ProducerIdManager {
    /// A manager with no block yet.
    pub fn new(broker_id: i32, channels: ControllerChannels, request_timeout: Duration) -> Self {
        Self {
            broker_id,
            state: tokio::sync::Mutex::new((
                0,
                0,
                ActiveControllerClient::new(channels, request_timeout),
            )),
        }
    }

    /// A new producer id with epoch 0; REQUEST_TIMED_OUT (retriable) when no block could be
    /// obtained (the message carries the controller's answer).
    pub async fn init_producer_id(&self, broker_epoch: i64) -> InitProducerIdReply {
        let mut guard = self.state.lock().await;
        let (next, end, client) = &mut *guard;
        if *next >= *end {
            if broker_epoch < 0 {
                return error(
                    ErrorCode::RequestTimedOut,
                    "this broker is not registered yet",
                );
            }
            let req = AllocateProducerIdsRequest {
                broker_id: self.broker_id,
                broker_epoch,
            };
            match client
                .call(|mut c| async move { c.allocate_producer_ids(req).await })
                .await
            {
                Err(e) => return error(ErrorCode::RequestTimedOut, &e.to_string()),
                Ok(reply) => {
                    let code = ErrorCode::from_proto(reply.error.as_ref())
                        .unwrap_or(ErrorCode::UnknownServerError);
                    if code != ErrorCode::None || reply.producer_id_len <= 0 {
                        // Retriable for the producer whatever the controller said (e.g.
                        // STALE_BROKER_EPOCH while this broker re-registers).
                        let detail = reply.error.as_ref().map_or("", |e| e.message.as_str());
                        return error(
                            ErrorCode::RequestTimedOut,
                            &format!(
                                "no producer id block: AllocateProducerIds answered {code} \
                                 (block length {}): {detail}",
                                reply.producer_id_len
                            ),
                        );
                    }
                    *next = reply.producer_id_start;
                    *end = reply.producer_id_start + i64::from(reply.producer_id_len);
                    tracing::info!(start = *next, end = *end, "allocated producer id block");
                }
            }
        }
        let id = *next;
        *next += 1;
        InitProducerIdReply {
            error: None,
            producer_id: id,
            producer_epoch: 0,
        }
    }
}

fn error(code: ErrorCode, message: &str) -> InitProducerIdReply {
    let code = if code == ErrorCode::None {
        ErrorCode::UnknownServerError
    } else {
        code
    };
    InitProducerIdReply {
        error: Some(code.to_proto(message.to_string())),
        producer_id: -1,
        producer_epoch: -1,
    }
}
