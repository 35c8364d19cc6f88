//! InitProducerId for idempotent producers (Kafka `ProducerIdManager`, KIP-730): producer
//! ids come from blocks of 1000 the active controller allocates to this broker
//! (AllocateProducerIds -> ProducerIdsRecord).
//!
//! What a request gets is decided by the pure [`decide`] before any id is handed out:
//! - a new producer (`producer_id`/`producer_epoch` -1/-1): a fresh id with epoch 0, as Kafka
//!   (`TransactionCoordinator.handleInitProducerId` without a transactional id);
//! - a re-initialising producer (KIP-360: it got UNKNOWN_PRODUCER_ID or
//!   OUT_OF_ORDER_SEQUENCE_NUMBER and sends its current id and epoch): the same id with the
//!   epoch bumped, so its batches are still recognised and its older in-flight batches are
//!   fenced. Kafka's brokers do this only for transactional ids (the coordinator stores the
//!   epoch) and leave idempotent producers to bump locally; Keel has no coordinator and does
//!   it from what this broker knows: the largest epoch of that id in the producer state of
//!   the partitions it hosts. A stale epoch (older than that) is INVALID_PRODUCER_EPOCH (47,
//!   the code Kafka answers InitProducerId clients before v4 for PRODUCER_FENCED); an id the
//!   cluster never allocated is INVALID_REQUEST; epoch 32767 cannot be bumped and gets a
//!   fresh id with epoch 0 (Kafka `TransactionMetadata.prepareIncrementProducerEpoch`). The
//!   bumped epoch is accepted by Produce on every partition: a higher epoch starting at
//!   sequence 0 resets the producer's sequence ([`crate::log::check_append`], KIP-360);
//! - a non-empty `transactional_id`: UNSUPPORTED_VERSION (35), see
//!   [`crate::bounds::UNSUPPORTED_TRANSACTIONS`].

use std::time::Duration;

use keel_proto::ErrorCode;
use keel_proto::broker::{InitProducerIdReply, InitProducerIdRequest};
use keel_proto::controller::AllocateProducerIdsRequest;

use crate::lifecycle::{ActiveControllerClient, ControllerChannels};

/// What an InitProducerId gets (see the module doc).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InitDecision {
    /// A fresh producer id with epoch 0.
    NewId,
    /// KIP-360: the same producer id with this (bumped) epoch.
    Bump {
        /// The producer id of the request.
        producer_id: i64,
        /// Its epoch + 1.
        producer_epoch: i16,
    },
    /// Refused with this code and message.
    Refuse(ErrorCode, String),
}

/// Decides an InitProducerId whose bounds were checked ([`crate::bounds::init_producer_id`]:
/// `producer_id` >= -1, `producer_epoch` -1 or 0..=32767, both -1 or neither).
/// `known_epoch` is the largest epoch of `req.producer_id` in the producer state of the
/// partitions this broker hosts (`None` = none knows it); `next_unallocated` the first
/// producer id the controller has not handed out yet (`MetadataImage::next_producer_id`).
pub fn decide(
    req: &InitProducerIdRequest,
    known_epoch: Option<i16>,
    next_unallocated: i64,
) -> InitDecision {
    if !req.transactional_id.is_empty() {
        return InitDecision::Refuse(
            ErrorCode::UnsupportedVersion,
            crate::bounds::UNSUPPORTED_TRANSACTIONS.into(),
        );
    }
    if req.producer_id < 0 {
        return InitDecision::NewId;
    }
    if req.producer_id >= next_unallocated {
        return InitDecision::Refuse(
            ErrorCode::InvalidRequest,
            format!(
                "producer_id {} was never allocated (ids below {next_unallocated} are)",
                req.producer_id
            ),
        );
    }
    let Ok(epoch) = i16::try_from(req.producer_epoch) else {
        return InitDecision::Refuse(
            ErrorCode::InvalidRequest,
            format!("producer_epoch {} is outside 0..=32767", req.producer_epoch),
        );
    };
    if epoch < 0 {
        return InitDecision::Refuse(
            ErrorCode::InvalidRequest,
            format!("producer_epoch {epoch} without producer_id -1"),
        );
    }
    if let Some(known) = known_epoch
        && known > epoch
    {
        return InitDecision::Refuse(
            ErrorCode::InvalidProducerEpoch,
            format!(
                "producer {} has epoch {known}; epoch {epoch} is stale (fenced)",
                req.producer_id
            ),
        );
    }
    match epoch.checked_add(1) {
        Some(next) => InitDecision::Bump {
            producer_id: req.producer_id,
            producer_epoch: next,
        },
        None => InitDecision::NewId,
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    fn req(producer_id: i64, producer_epoch: i32) -> InitProducerIdRequest {
        InitProducerIdRequest {
            producer_id,
            producer_epoch,
            ..Default::default()
        }
    }

    #[test]
    fn a_new_producer_gets_a_new_id() {
        assert_eq!(decide(&req(-1, -1), None, 1000), InitDecision::NewId);
    }

    #[test]
    fn kip_360_bumps_the_current_epoch_of_an_existing_id() {
        // Known here with that epoch, or not known on this broker's partitions at all.
        for known in [Some(3), None, Some(2)] {
            assert_eq!(
                decide(&req(7, 3), known, 1000),
                InitDecision::Bump {
                    producer_id: 7,
                    producer_epoch: 4
                },
                "known {known:?}"
            );
        }
    }

    #[test]
    fn a_stale_epoch_is_fenced_and_nothing_is_handed_out() {
        let d = decide(&req(7, 2), Some(3), 1000);
        assert!(
            matches!(d, InitDecision::Refuse(ErrorCode::InvalidProducerEpoch, ref m) if m.contains("epoch 2 is stale")),
            "{d:?}"
        );
    }

    #[test]
    fn an_exhausted_epoch_gets_a_new_id() {
        assert_eq!(
            decide(&req(7, i16::MAX as i32), Some(i16::MAX), 1000),
            InitDecision::NewId
        );
    }

    #[test]
    fn ids_never_allocated_and_transactional_ids_are_refused() {
        assert!(matches!(
            decide(&req(1000, 0), None, 1000),
            InitDecision::Refuse(ErrorCode::InvalidRequest, _)
        ));
        assert!(matches!(
            decide(&req(7, 40_000), None, 1000),
            InitDecision::Refuse(ErrorCode::InvalidRequest, _)
        ));
        let mut r = req(-1, -1);
        r.transactional_id = "tx-1".into();
        assert!(matches!(
            decide(&r, None, 1000),
            InitDecision::Refuse(ErrorCode::UnsupportedVersion, _)
        ));
    }
}
