//! Errors of the producer.

use keel_proto::ErrorCode;

use crate::brokers::MetadataError;

/// Why a record was not delivered (or the producer could not be used).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProduceError {
    /// The broker refused the batch with a non-retriable Kafka error code, or a retriable one
    /// was still returned when `delivery_timeout_ms` ran out.
    #[error("{topic}-{partition}: {code} ({}){}{}", .code.code(), if .message.is_empty() { String::new() } else { format!(": {}", .message) }, if *.timed_out { " (delivery timeout)" } else { "" })]
    Kafka {
        /// Topic.
        topic: String,
        /// Partition.
        partition: i32,
        /// The Kafka error code.
        code: ErrorCode,
        /// The broker's error message (Kafka's `error_message`), empty if it sent none, e.g.
        /// `record batch of 2097230 bytes exceeds max.message.bytes 1048588`.
        message: String,
        /// True when the code was retriable and the delivery timeout ended the retries.
        timed_out: bool,
    },
    /// InitProducerId (idempotence) was refused with a non-retriable code; the records of
    /// the batches waiting for a producer id fail with it.
    #[error("InitProducerId: {code} ({}){}", .code.code(), if .message.is_empty() { String::new() } else { format!(": {}", .message) })]
    InitProducerId {
        /// The Kafka error code.
        code: ErrorCode,
        /// The broker's detail (may be empty).
        message: String,
    },
    /// No broker could be reached, or the topic's metadata could not be loaded.
    #[error(transparent)]
    Metadata(#[from] MetadataError),
    /// The delivery timeout ran out while the broker could not be reached.
    #[error("{topic}-{partition}: delivery timeout after {attempts} attempts: {last_error}")]
    Timeout {
        /// Topic.
        topic: String,
        /// Partition.
        partition: i32,
        /// Send attempts made.
        attempts: u32,
        /// The last transport error.
        last_error: String,
    },
    /// An earlier batch of the same partition failed for good while this one was in flight:
    /// it was not written after it, so the partition keeps the order the records were sent
    /// in (idempotence with several batches in flight; Kafka fails such batches with
    /// OutOfOrderSequenceException). As after a timeout, the records may be in the log if
    /// the earlier batch's outcome was unknown too.
    #[error("{topic}-{partition}: not written: an earlier batch of the partition failed")]
    EarlierBatchFailed {
        /// Topic.
        topic: String,
        /// Partition.
        partition: i32,
    },
    /// A reply that breaks the API contract.
    #[error("unexpected reply from the broker: {0}")]
    Protocol(String),
    /// The producer was dropped or closed before the record was sent.
    #[error("the producer was closed before the record was sent")]
    Closed,
    /// A bad argument or configuration, found before anything was sent.
    #[error("{0}")]
    InvalidArgument(String),
}

impl ProduceError {
    /// The Kafka error code, for errors a broker answered with.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            ProduceError::Kafka { code, .. } => Some(*code),
            ProduceError::InitProducerId { code, .. } => Some(*code),
            ProduceError::Metadata(MetadataError::Topic { code, .. }) => Some(*code),
            _ => None,
        }
    }
}
