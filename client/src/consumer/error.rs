//! Errors of the consumer.

use keel_proto::ErrorCode;

use crate::brokers::MetadataError;

/// Why a poll, seek or offset lookup failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConsumeError {
    /// The fetch position is outside the partition's [log start offset, HW] and no
    /// `auto_offset_reset` is configured (Kafka: `OffsetOutOfRangeException`). Seek to recover.
    #[error(
        "{topic}-{partition}: offset {offset} is out of range (OFFSET_OUT_OF_RANGE (1)); seek to a valid offset"
    )]
    OffsetOutOfRange {
        /// Topic.
        topic: String,
        /// Partition.
        partition: i32,
        /// The position that was out of range.
        offset: i64,
    },
    /// KIP-320: after a leader change, the new leader's log ends before the consumer's
    /// position for the epoch of the last consumed record: records the consumer read were
    /// truncated (e.g. unclean leader election). Kafka: `LogTruncationException`. The position
    /// is left unchanged and every poll reports this until the caller seeks.
    #[error(
        "{topic}-{partition}: log truncation detected: position {position} (last consumed record of epoch {epoch}), but the leader's epoch {end_epoch} ends at offset {end_offset}"
    )]
    LogTruncation {
        /// Topic.
        topic: String,
        /// Partition.
        partition: i32,
        /// The consumer's position (next offset to read).
        position: i64,
        /// Leader epoch of the last consumed record.
        epoch: i32,
        /// The largest epoch <= `epoch` the leader knows (-1 = none).
        end_epoch: i32,
        /// Exclusive end offset of `end_epoch` on the leader (-1 = unknown): the first
        /// offset that diverged.
        end_offset: i64,
    },
    /// The partition has no position (no seek, no `auto_offset_reset`).
    #[error("{topic}-{partition}: no position: seek first or set auto_offset_reset")]
    NoPosition {
        /// Topic.
        topic: String,
        /// Partition.
        partition: i32,
    },
    /// A broker answered with a non-retriable Kafka error code, or a retriable one persisted
    /// past the retry budget.
    #[error("{topic}-{partition}: {code} ({})", .code.code())]
    Kafka {
        /// Topic.
        topic: String,
        /// Partition.
        partition: i32,
        /// The Kafka error code.
        code: ErrorCode,
    },
    /// A broker refused the request for this partition with a code no retry can fix, and
    /// said why (e.g. DeleteRecords: OFFSET_OUT_OF_RANGE above the high watermark).
    #[error("{topic}-{partition}: {code} ({}){}", .code.code(),
        if .message.is_empty() { String::new() } else { format!(": {}", .message) })]
    Refused {
        /// Topic.
        topic: String,
        /// Partition.
        partition: i32,
        /// The Kafka error code.
        code: ErrorCode,
        /// The broker's message (may be empty).
        message: String,
    },
    /// Metadata could not be loaded.
    #[error(transparent)]
    Metadata(#[from] MetadataError),
    /// No broker answered within the retry budget.
    #[error("{0}")]
    Unreachable(String),
    /// A fetched batch failed its CRC or framing check (Kafka: `check.crcs`).
    #[error("{topic}-{partition}: corrupt record batch: {reason}")]
    Corrupt {
        /// Topic.
        topic: String,
        /// Partition.
        partition: i32,
        /// What failed.
        reason: String,
    },
    /// A reply that breaks the API contract.
    #[error("unexpected reply from the broker: {0}")]
    Protocol(String),
    /// The group refused this member with an error no retry can fix (Kafka's code):
    /// FENCED_INSTANCE_ID (another member uses this `group_instance_id`),
    /// INVALID_SESSION_TIMEOUT, GROUP_MAX_SIZE_REACHED, INCONSISTENT_GROUP_PROTOCOL (other
    /// members use another protocol type or no common assignor), INVALID_GROUP_ID, ...
    #[error("group {group}: {code} ({}): {message}", .code.code())]
    Group {
        /// The group.
        group: String,
        /// The Kafka error code.
        code: ErrorCode,
        /// What the coordinator said.
        message: String,
    },
    /// A commit as a group member was refused because the group rebalanced (the member's
    /// generation is over, its partitions may be another's); the next poll rejoins. Kafka:
    /// `CommitFailedException`.
    #[error("commit failed: {0}")]
    CommitFailed(String),
    /// A group call on a consumer without [`subscribe`](super::Consumer::subscribe).
    #[error("the consumer is not subscribed to a group")]
    NotSubscribed,
    /// The partition is not assigned to this consumer.
    #[error("{topic}-{partition} is not assigned")]
    NotAssigned {
        /// Topic.
        topic: String,
        /// Partition.
        partition: i32,
    },
}

impl ConsumeError {
    /// The Kafka error code the error stands for, if any.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            ConsumeError::OffsetOutOfRange { .. } => Some(ErrorCode::OffsetOutOfRange),
            ConsumeError::Kafka { code, .. }
            | ConsumeError::Group { code, .. }
            | ConsumeError::Refused { code, .. } => Some(*code),
            ConsumeError::Metadata(MetadataError::Topic { code, .. }) => Some(*code),
            _ => None,
        }
    }
}
