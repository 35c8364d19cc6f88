//! [`ControllerResult`]: what a controller decision produces (Kafka:
//! `org.apache.kafka.controller.ControllerResult`).

use keel_proto::metadata::MetadataRecord;

/// Records one atomic operation may write (Kafka: `QuorumController.MAX_RECORDS_PER_USER_OP`,
/// 10,000); a larger one is refused with POLICY_VIOLATION and writes nothing, while a larger
/// non-atomic one ([`ControllerResult::non_atomic`], e.g. a broker's controlled shutdown) is
/// written as several entries. Keeps every Raft entry small enough to replicate within the
/// RPC timeout.
pub const MAX_RECORDS_PER_OPERATION: usize = 10_000;

/// Bytes `records` take in a Raft entry, or `Err(bytes)` of the first record over
/// [`MAX_PROPOSED_RECORD_BYTES`](keel_metadata_log::limits::MAX_PROPOSED_RECORD_BYTES).
pub fn operation_bytes(records: &[MetadataRecord]) -> Result<usize, usize> {
    let mut total = 0usize;
    for r in records {
        let len = keel_metadata_log::limits::record_entry_bytes(r);
        if len > keel_metadata_log::limits::MAX_PROPOSED_RECORD_BYTES {
            return Err(len);
        }
        total += len;
    }
    Ok(total)
}

/// Whether `records`, written as one atomic operation, exceed what the write path proposes:
/// more than [`MAX_RECORDS_PER_OPERATION`] records, a record over
/// [`MAX_PROPOSED_RECORD_BYTES`](keel_metadata_log::limits::MAX_PROPOSED_RECORD_BYTES) or
/// more than [`MAX_PROPOSED_ENTRY_BYTES`](keel_metadata_log::limits::MAX_PROPOSED_ENTRY_BYTES)
/// in all. The write path refuses such an operation with POLICY_VIOLATION; a `validate_only`
/// request that would write it is answered the same way.
pub fn exceeds_operation_limits(records: &[MetadataRecord]) -> bool {
    records.len() > MAX_RECORDS_PER_OPERATION
        || !operation_bytes(records)
            .is_ok_and(|bytes| bytes <= keel_metadata_log::limits::MAX_PROPOSED_ENTRY_BYTES)
}

/// The message of the POLICY_VIOLATION for an operation over the limits above.
pub fn operation_limits_message() -> String {
    format!(
        "the request would write more than {} metadata records (Kafka's per-operation limit) or {} bytes of them, or a record over {} bytes; split it",
        MAX_RECORDS_PER_OPERATION,
        keel_metadata_log::limits::MAX_PROPOSED_ENTRY_BYTES,
        keel_metadata_log::limits::MAX_PROPOSED_RECORD_BYTES,
    )
}

/// The outcome of one controller operation: the records to propose (as one batch, in order)
/// and the reply to send once they are committed.
///
/// `records` is empty when the request was refused or changes nothing; the reply then may be
/// sent as soon as every earlier proposal is committed (the reply may describe state that
/// earlier, still uncommitted records produce).
#[derive(Debug, Clone, PartialEq)]
pub struct ControllerResult<R> {
    /// Records to append to `__cluster_metadata`, in this order.
    pub records: Vec<MetadataRecord>,
    /// The reply for the requester.
    pub response: R,
    /// Whether `records` must be applied together, in one entry (Kafka:
    /// `ControllerResult.isAtomic`). An atomic result over
    /// [`MAX_RECORDS_PER_OPERATION`] records
    /// is refused; a non-atomic one is written as several entries and answered after the
    /// last.
    pub atomic: bool,
}

impl<R> ControllerResult<R> {
    /// A result whose records are applied atomically (Kafka: `ControllerResult.atomicOf`).
    pub fn new(records: Vec<MetadataRecord>, response: R) -> Self {
        Self {
            records,
            response,
            atomic: true,
        }
    }

    /// A result whose records may be applied over several entries, every prefix being a
    /// valid state (Kafka: `ControllerResult.of`), e.g. leader moves for a broker's
    /// partitions.
    pub fn non_atomic(records: Vec<MetadataRecord>, response: R) -> Self {
        Self {
            records,
            response,
            atomic: false,
        }
    }

    /// A result that writes nothing.
    pub fn response_only(response: R) -> Self {
        Self::new(Vec::new(), response)
    }
}
