//! Consumer-facing read decisions of a leader: Fetch and ListOffsets (DESIGN §5; Kafka
//! `Partition.fetchRecords` for consumers, `Partition.fetchOffsetForTimestamp`).
//!
//! Consumers read only below the HW (seed 004: "消费者只能读 < HW"), so they never see a
//! record that a later truncation could remove (DESIGN §7 invariant 3).

use keel_proto::ErrorCode;

use super::partition::{PartitionState, Role};

/// Where a consumer fetch may read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConsumerRead {
    /// First offset to read (the request's).
    pub fetch_offset: i64,
    /// Exclusive bound = HW (pass to [`crate::log::Log::read`]).
    pub upper_bound_exclusive: i64,
    /// HW to report.
    pub high_watermark: i64,
    /// Log start offset to report.
    pub log_start_offset: i64,
}

/// A ListOffsets query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetSpec {
    /// Kafka -2: the log start offset.
    Earliest,
    /// Kafka -1: the HW.
    Latest,
    /// First offset with a timestamp >= this (ms).
    Timestamp(i64),
    /// Kafka -3 (KIP-734): the record with the largest timestamp.
    MaxTimestamp,
}

/// A ListOffsets answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListOffsetsAnswer {
    /// The offset.
    Offset(i64),
    /// Ask the log ([`crate::log::Log::offset_for_timestamp`]) and keep the result only if
    /// its offset is `< max_offset_exclusive` (the HW); otherwise answer "none".
    LookupTimestamp {
        /// The timestamp (ms).
        timestamp_ms: i64,
        /// Exclusive bound (HW).
        max_offset_exclusive: i64,
    },
    /// Ask the log for its record with the largest timestamp
    /// ([`crate::log::Log::offset_of_max_timestamp`]) and keep it only if its offset is
    /// `< max_offset_exclusive` (the HW); otherwise answer "none".
    LookupMaxTimestamp {
        /// Exclusive bound (HW).
        max_offset_exclusive: i64,
    },
}

impl PartitionState {
    /// Consumer fetch at `fetch_offset`: epoch fencing and leadership like produce, then
    /// OFFSET_OUT_OF_RANGE outside `[log start, LEO]` (Kafka `UnifiedLog.read`). Reads stop at
    /// the HW: a fetch at or above it (up to the LEO) is valid and returns nothing until the
    /// HW passes it (long poll); an error there would make the consumer reset its position.
    ///
    /// After a leader change the new leader's HW can trail the HW consumers saw on the old
    /// leader (it learnt the HW from its last fetch response) until its followers reach the
    /// start offset of its epoch. While that holds, a fetch *above* its HW is answered
    /// OFFSET_NOT_AVAILABLE (retriable; the consumer polls again) rather than with an HW below
    /// the consumer's own position, so a consumer never sees the HW go back past what it read
    /// (DESIGN §7 invariant 3; the rule KIP-207 gives ListOffsets, [`Self::list_offsets`]).
    /// A fetch at or below that HW is served, so lagging consumers keep reading meanwhile.
    pub fn check_consumer_fetch(
        &self,
        fetch_offset: i64,
        current_leader_epoch: Option<i32>,
    ) -> Result<ConsumerRead, ErrorCode> {
        self.check_leader_request(current_leader_epoch)?;
        if fetch_offset < self.log_start_offset || fetch_offset > self.log_end_offset {
            return Err(ErrorCode::OffsetOutOfRange);
        }
        if let Role::Leader(l) = &self.role
            && fetch_offset > self.high_watermark
            && l.epoch_start_offset > self.high_watermark
        {
            return Err(ErrorCode::OffsetNotAvailable);
        }
        Ok(ConsumerRead {
            fetch_offset,
            upper_bound_exclusive: self.high_watermark,
            high_watermark: self.high_watermark,
            log_start_offset: self.log_start_offset,
        })
    }

    /// ListOffsets: epoch fencing and leadership, then EARLIEST = log start, LATEST = HW,
    /// or a timestamp lookup bounded by the HW. While a new leader's HW is still below the
    /// start offset of its epoch (it has not yet learnt how far the previous leader
    /// committed) the answer is OFFSET_NOT_AVAILABLE (retriable), so clients never see the
    /// latest offset go backwards across a leader change (KIP-207; Kafka
    /// `Partition.fetchOffsetForTimestamp`).
    pub fn list_offsets(
        &self,
        spec: OffsetSpec,
        current_leader_epoch: Option<i32>,
    ) -> Result<ListOffsetsAnswer, ErrorCode> {
        self.check_leader_request(current_leader_epoch)?;
        let Role::Leader(l) = &self.role else {
            return Err(ErrorCode::NotLeaderOrFollower);
        };
        if l.epoch_start_offset > self.high_watermark {
            return Err(ErrorCode::OffsetNotAvailable);
        }
        Ok(match spec {
            OffsetSpec::Earliest => ListOffsetsAnswer::Offset(self.log_start_offset),
            OffsetSpec::Latest => ListOffsetsAnswer::Offset(self.high_watermark),
            OffsetSpec::Timestamp(timestamp_ms) => ListOffsetsAnswer::LookupTimestamp {
                timestamp_ms,
                max_offset_exclusive: self.high_watermark,
            },
            OffsetSpec::MaxTimestamp => ListOffsetsAnswer::LookupMaxTimestamp {
                max_offset_exclusive: self.high_watermark,
            },
        })
    }
}
