//! Partition log storage engine (DESIGN §5 "Partition log storage"; Kafka's `UnifiedLog` /
//! `LocalLog` / `LogSegment` / `LogLoader`). No gRPC, controller or metadata knowledge.
//!
//! A [`Log`] owns one partition directory `<data_dir>/<topic>-<partition>/`:
//! - segment files `{base_offset:020}.log` with whole record batches ([`batch`]), each with
//!   a sparse `.index` and `.timeindex` ([`index`], [`segment`]);
//! - `leader-epoch-checkpoint` ([`epoch_cache`]);
//! - producer-state snapshots `{offset:020}.snapshot` ([`producer_state`]).
//!
//! A [`LogManager`] owns a data directory: it loads every partition log, keeps the
//! per-directory `recovery-point-offset-checkpoint` and `replication-offset-checkpoint`
//! ([`checkpoint`]) and the clean-shutdown marker.
//!
//! Invariants of a [`Log`] (asserted in debug builds after every mutation):
//! - segments are non-empty as a set, keyed by base offset, contiguous: each segment's base
//!   offset equals the previous segment's next offset; the last one is the active segment;
//! - `log_start_offset` = first segment's base offset <= `recovery_point` <= `log_end_offset`
//!   = active segment's next offset;
//! - every batch in the files passed its CRC check before it was written (append) or after
//!   it was read back (recovery);
//! - every epoch cache entry starts at or below the LEO (an entry exactly at the LEO is the
//!   one a new leader records before its first write, KAFKA-7415);
//! - a failed append or follower append leaves the LEO and the segment bytes unchanged.

#![warn(missing_docs)]

pub mod batch;
pub mod checkpoint;
pub mod config;
pub mod epoch_cache;
pub mod error;
pub mod index;
pub mod manager;
mod partition_log;
pub mod producer_state;
pub mod segment;

pub use batch::{BatchHeader, BatchIter, Record, RecordBatch, RecordBatchBuilder, RecordHeader};
pub use checkpoint::{OffsetCheckpointFile, TopicPartition};
pub use config::{Clock, LogConfig, ManualClock, SystemClock};
pub use epoch_cache::{EpochEntry, LeaderEpochCache};
pub use error::{LogError, LogResult};
pub use manager::LogManager;
pub use partition_log::{AppendInfo, Log, LogOpenOptions, ReadInfo};
pub use producer_state::{AppendCheck, ProducerEntry, check_append};
