//! [`ControllerResult`]: what a controller decision produces (Kafka:
//! `org.apache.kafka.controller.ControllerResult`).

use keel_proto::metadata::MetadataRecord;

/// The outcome of one controller operation: the records to propose (as one batch, in order)
/// and the reply to send once they are committed.
///
/// `records` is empty when the request was refused or changes nothing; the reply then may be
/// sent as soon as every earlier proposal is committed (the reply may describe state that
/// earlier, still uncommitted records produce).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ControllerResult<R> {
    /// Records to append to `__cluster_metadata`, applied atomically in this order.
    pub records: Vec<MetadataRecord>,
    /// The reply for the requester.
    pub response: R,
}

impl<R> ControllerResult<R> {
    /// A result with records.
    pub fn new(records: Vec<MetadataRecord>, response: R) -> Self {
        Self { records, response }
    }

    /// A result that writes nothing.
    pub fn response_only(response: R) -> Self {
        Self {
            records: Vec::new(),
            response,
        }
    }
}
