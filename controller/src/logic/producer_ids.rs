//! AllocateProducerIds: blocks of producer ids for brokers (Kafka:
//! `ProducerIdControlManager.generateNextProducerId`, KIP-730).
//!
//! The image keeps the next unallocated id (`MetadataImage::next_producer_id`, 0 before the
//! first block). A block is `[next, next + PRODUCER_ID_BLOCK_SIZE)`; the `ProducerIdsRecord`
//! carries the new `next`, so replay moves it forward and a block is never handed out twice,
//! even across controller failover.

use keel_metadata_log::MetadataImage;
use keel_proto::ErrorCode;
use keel_proto::controller::{AllocateProducerIdsReply, AllocateProducerIdsRequest};
use keel_proto::metadata::{ProducerIdsRecord, metadata_record::Record};

use super::{ControllerResult, error, record};

/// Producer ids per block (Kafka: `ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE`, KIP-730).
pub const PRODUCER_ID_BLOCK_SIZE: i32 = 1000;

/// AllocateProducerIds (Kafka v0). Unknown broker -> BROKER_ID_NOT_REGISTERED; a broker epoch
/// other than the registration's -> STALE_BROKER_EPOCH; no block left below `i64::MAX` ->
/// UNKNOWN_SERVER_ERROR (Kafka: "exhausted all producer ids"). Errors answer start -1, length
/// 0 and write nothing. Success writes one `ProducerIdsRecord` (next = start + 1000) and
/// answers the block's start and length.
pub fn allocate_producer_ids(
    image: &MetadataImage,
    req: &AllocateProducerIdsRequest,
) -> ControllerResult<AllocateProducerIdsReply> {
    let refuse = |code: ErrorCode, msg: String| {
        ControllerResult::response_only(AllocateProducerIdsReply {
            error: error(code, msg),
            producer_id_start: -1,
            producer_id_len: 0,
            leader: None,
        })
    };
    let Some(b) = image.broker(req.broker_id) else {
        return refuse(
            ErrorCode::BrokerIdNotRegistered,
            format!("broker {} is not registered", req.broker_id),
        );
    };
    if b.epoch != req.broker_epoch {
        return refuse(
            ErrorCode::StaleBrokerEpoch,
            format!(
                "broker {} has epoch {}, request carries {}",
                req.broker_id, b.epoch, req.broker_epoch
            ),
        );
    }
    let start = image.next_producer_id();
    let Some(next) = start.checked_add(i64::from(PRODUCER_ID_BLOCK_SIZE)) else {
        return refuse(
            ErrorCode::UnknownServerError,
            format!("producer ids exhausted at {start}"),
        );
    };
    ControllerResult::new(
        vec![record(Record::ProducerIds(ProducerIdsRecord {
            broker_id: req.broker_id,
            broker_epoch: b.epoch,
            next_producer_id: next,
        }))],
        AllocateProducerIdsReply {
            error: None,
            producer_id_start: start,
            producer_id_len: PRODUCER_ID_BLOCK_SIZE,
            leader: None,
        },
    )
}
