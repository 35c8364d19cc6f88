//! Errors of the partition log. Each variant maps to one Kafka error name
//! (`org.apache.kafka.common.protocol.Errors`), so the broker's single error-mapping module can
//! translate them without a catch-all.

use std::path::PathBuf;

use keel_record::CorruptBatch;

/// Result alias of the log module.
pub type LogResult<T> = Result<T, LogError>;

/// Everything that can go wrong in the partition log. A returned error from an append means
/// the log is unchanged (same LEO, same file bytes).
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// A batch failed its CRC, size or structure checks (Kafka `CORRUPT_MESSAGE`), or, when
    /// [`CorruptBatch::record_level`], its intact bytes hold invalid records (count, codec,
    /// decompression, record parse: Kafka `INVALID_RECORD`).
    #[error("corrupt record batch: {0}")]
    CorruptMessage(#[from] CorruptBatch),
    /// The batch is larger than `max.message.bytes` (Kafka `MESSAGE_TOO_LARGE`).
    #[error("record batch of {size_bytes} bytes exceeds max.message.bytes {max_bytes}")]
    MessageTooLarge {
        /// Size of the whole batch in bytes.
        size_bytes: usize,
        /// Configured limit in bytes.
        max_bytes: usize,
    },
    /// The batch's sequence does not continue the producer's last sequence
    /// (Kafka `OUT_OF_ORDER_SEQUENCE_NUMBER`, `ProducerAppendInfo.checkSequence`).
    #[error(
        "out of order sequence for producer {producer_id} epoch {producer_epoch}: \
         got {first_sequence}, last was {last_sequence}"
    )]
    OutOfOrderSequence {
        /// Producer id of the batch.
        producer_id: i64,
        /// Producer epoch of the batch.
        producer_epoch: i16,
        /// Base sequence of the rejected batch.
        first_sequence: i32,
        /// Last sequence retained for this producer and epoch (-1 if none).
        last_sequence: i32,
    },
    /// The batch's producer epoch is older than the one recorded
    /// (Kafka `INVALID_PRODUCER_EPOCH`, `ProducerAppendInfo.checkProducerEpoch`).
    #[error("producer {producer_id}: epoch {producer_epoch} is older than current {current_epoch}")]
    InvalidProducerEpoch {
        /// Producer id of the batch.
        producer_id: i64,
        /// Producer epoch of the rejected batch.
        producer_epoch: i16,
        /// Epoch the log already holds for this producer.
        current_epoch: i16,
    },
    /// A read or truncation asked for an offset outside `[log_start_offset, log_end_offset]`
    /// (Kafka `OFFSET_OUT_OF_RANGE`).
    #[error("offset {offset} is out of range [{log_start_offset}, {log_end_offset}]")]
    OffsetOutOfRange {
        /// Requested offset.
        offset: i64,
        /// First offset held by the log.
        log_start_offset: i64,
        /// LEO (exclusive end).
        log_end_offset: i64,
    },
    /// A follower append did not start at the LEO, or its batches were not contiguous
    /// (Kafka `UnexpectedAppendOffsetException` / `OffsetsOutOfOrderException`; mapped to
    /// `UNKNOWN_SERVER_ERROR` on the wire because it signals a replication bug).
    #[error("follower append expected base offset {expected}, got {got}")]
    UnexpectedAppendOffset {
        /// Offset the log expected next (the LEO, or the end of the previous batch).
        expected: i64,
        /// Base offset found in the batch.
        got: i64,
    },
    /// A record inside a batch is malformed or its offsets are not 0..count-1
    /// (Kafka `INVALID_RECORD`, `LogValidator`).
    #[error("invalid record in batch at offset {base_offset}: {reason}")]
    InvalidRecord {
        /// Base offset of the batch as sent.
        base_offset: i64,
        /// What is wrong.
        reason: &'static str,
    },
    /// A record or batch timestamp is negative (other than `NO_TIMESTAMP` = -1) or does not
    /// fit in an i64 (Kafka `INVALID_TIMESTAMP`, `LogValidator.validateTimestamp`).
    #[error("invalid timestamp {timestamp} in batch at offset {base_offset}: {reason}")]
    InvalidTimestamp {
        /// Base offset of the batch as sent.
        base_offset: i64,
        /// The offending timestamp (ms); for an overflow, the batch's first timestamp.
        timestamp: i64,
        /// What is wrong.
        reason: &'static str,
    },
    /// An offset argument or the offsets an append would assign are outside what a log can
    /// hold: negative, or beyond [`keel_record::MAX_LOG_END_OFFSET`] (Kafka
    /// `OFFSET_OUT_OF_RANGE`; Kafka itself throws `IllegalArgumentException` for a negative
    /// truncation offset). Nothing was changed.
    #[error("invalid offset {offset}: {reason}")]
    InvalidOffset {
        /// The offending offset.
        offset: i64,
        /// What is wrong.
        reason: &'static str,
    },
    /// A configuration value is out of range (Kafka `INVALID_CONFIG`).
    #[error("invalid config {key}: {reason}")]
    InvalidConfig {
        /// Kafka name of the key, e.g. `segment.bytes` (Keel's broker key for a setting Kafka
        /// lacks, e.g. `log_drop_cache_behind_bytes`).
        key: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// A checkpoint or snapshot file is malformed (Kafka `KAFKA_STORAGE_ERROR`).
    #[error("malformed file {path}: {reason}")]
    MalformedFile {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// An I/O error on a file of the log (Kafka `KAFKA_STORAGE_ERROR`).
    #[error("I/O error on {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

impl LogError {
    /// The Kafka error name this error travels as (`Errors` enum in Kafka's protocol).
    pub fn kafka_name(&self) -> &'static str {
        match self {
            LogError::CorruptMessage(e) if e.record_level => "INVALID_RECORD",
            LogError::CorruptMessage(_) => "CORRUPT_MESSAGE",
            LogError::MessageTooLarge { .. } => "MESSAGE_TOO_LARGE",
            LogError::OutOfOrderSequence { .. } => "OUT_OF_ORDER_SEQUENCE_NUMBER",
            LogError::InvalidProducerEpoch { .. } => "INVALID_PRODUCER_EPOCH",
            LogError::OffsetOutOfRange { .. } => "OFFSET_OUT_OF_RANGE",
            LogError::UnexpectedAppendOffset { .. } => "UNKNOWN_SERVER_ERROR",
            LogError::InvalidRecord { .. } => "INVALID_RECORD",
            LogError::InvalidTimestamp { .. } => "INVALID_TIMESTAMP",
            LogError::InvalidOffset { .. } => "OFFSET_OUT_OF_RANGE",
            LogError::InvalidConfig { .. } => "INVALID_CONFIG",
            LogError::MalformedFile { .. } | LogError::Io { .. } => "KAFKA_STORAGE_ERROR",
        }
    }

    /// The numeric Kafka error code of [`LogError::kafka_name`].
    pub fn kafka_code(&self) -> i16 {
        match self {
            LogError::CorruptMessage(e) if e.record_level => 87,
            LogError::CorruptMessage(_) => 2,
            LogError::MessageTooLarge { .. } => 10,
            LogError::OutOfOrderSequence { .. } => 45,
            LogError::InvalidProducerEpoch { .. } => 47,
            LogError::OffsetOutOfRange { .. } => 1,
            LogError::UnexpectedAppendOffset { .. } => -1,
            LogError::InvalidRecord { .. } => 87,
            LogError::InvalidTimestamp { .. } => 32,
            LogError::InvalidOffset { .. } => 1,
            LogError::InvalidConfig { .. } => 40,
            LogError::MalformedFile { .. } | LogError::Io { .. } => 56,
        }
    }
}

/// Wraps an `io::Error` with the path it happened on.
pub(crate) fn io_err(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> LogError {
    let path = path.into();
    move |source| LogError::Io { path, source }
}

impl From<keel_runtime::fs::FsError> for LogError {
    /// A failed durable write, as the I/O error of the file whose step failed.
    fn from(e: keel_runtime::fs::FsError) -> Self {
        LogError::Io {
            path: e.path,
            source: e.source,
        }
    }
}
