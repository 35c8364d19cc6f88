//! Partition log storage engine (DESIGN §5 "Partition log storage"; Kafka's `UnifiedLog` /
//! `LocalLog` / `LogSegment` / `LogLoader`). No gRPC, controller or metadata knowledge.
//!
//! A [`Log`] owns one partition directory `<data_dir>/<topic>-<partition>/`:
//! - segment files `{base_offset:020}.log` with whole record batches ([`batch`]), each with
//!   a sparse `.index` and `.timeindex` ([`index`], [`segment`]);
//! - `leader-epoch-checkpoint` ([`epoch_cache`]; new leader epochs of many partitions at once
//!   are first journaled in the data directory's `leader-epoch-journal`, [`epoch_journal`]);
//! - producer-state snapshots `{offset:020}.snapshot` ([`producer_state`]);
//! - `cleaner-offset-checkpoint`, the end of the last log-cleaner pass, which also marks a
//!   log that may hold offset gaps ([`cleaner`]).
//!
//! Only names of exactly 20 ASCII digits plus the suffix are the log's files
//! ([`segment::parse_offset_file_name`]); any other file in the directory (`0.log`,
//! `-0000000000000000001.log`, ...) is ignored with a warning and never deleted. The log's own
//! leftovers are deleted on open: `<own file>.tmp` (an interrupted atomic write) and
//! `{offset:020}.log.deleted` / `.index.deleted` / `.timeindex.deleted`, files of segments
//! that retention renamed under the partition lock and whose deletion, done later off the
//! lock ([`DeletedSegments`]), a crash or shutdown cut short. The log cleaner's
//! `{offset:020}.log.cleaned` files (incomplete) are deleted and its `{offset:020}.log.swap`
//! files (complete) replace their segment (Kafka `LogLoader`, see [`cleaner`]).
//!
//! Untrusted input: client (leader) appends are validated like Kafka's `LogValidator`
//! (CRC and records, no transactional/control bits, record timestamps >= 0 or -1, header max
//! timestamp equal to the records' maximum); follower appends keep the leader's bytes. Every
//! offset is bounded by [`keel_record::MAX_LOG_END_OFFSET`] before anything is written, and time
//! differences saturate, so no batch, offset or clock value can make the log panic.
//!
//! A [`LogManager`] owns a data directory: it loads every partition log, keeps the
//! per-directory `recovery-point-offset-checkpoint` and `replication-offset-checkpoint`
//! ([`checkpoint`]) and the clean-shutdown marker.
//!
//! Invariants of a [`Log`] (asserted in debug builds after every mutation):
//! - segments are non-empty as a set, keyed by base offset, in order: each segment's base
//!   offset is at or above the previous segment's next offset (equal unless the log cleaner
//!   removed the last batches of the previous one); the last one is the active segment;
//! - batch offsets increase; gaps between batches (and between the records of a batch) exist
//!   only in a log that was compacted, here or by the leader it copies;
//! - first segment's base offset <= `log_start_offset` <= `log_end_offset` = active segment's
//!   next offset, and first segment's base offset <= `recovery_point` <= `log_end_offset`; the
//!   log start is above the first base only after DeleteRecords (KIP-107) or a follower took
//!   its leader's start ([`Log::increment_log_start_offset`], persisted in
//!   `log-start-offset-checkpoint`), and no whole segment stays below it (but for a failed
//!   removal, retried by retention);
//! - every batch in the files passed its CRC check before it was written (append) or after
//!   it was read back (recovery);
//! - every epoch cache entry starts at or below the LEO (an entry exactly at the LEO is the
//!   one a new leader records before its first write, KAFKA-7415);
//! - a failed append or follower append leaves the LEO and the segment bytes unchanged;
//! - `0 <= log_start_offset <= log_end_offset <= MAX_LOG_END_OFFSET`; the log start offset
//!   only moves forward, except by an explicit [`Log::truncate_fully_and_start_at`];
//! - below the recovery point, segment data and the index files written for it are fsynced:
//!   a roll writes the old segment's indexes without fsync and the flush that follows every
//!   roll (Kafka's `flush-log` after `roll`) syncs them before it moves the recovery point.

#![warn(missing_docs)]

pub mod cache_behind;
pub mod checkpoint;
pub mod cleaner;
pub mod config;
pub mod epoch_cache;
pub mod epoch_journal;
pub mod error;
pub mod fuzz;
pub mod index;
pub mod manager;
pub mod open_files;
mod partition_log;
pub mod producer_state;
pub mod segment;

pub use checkpoint::{OffsetCheckpointFile, TopicPartition};
pub use cleaner::{CleanerConfig, CleanerStats};
pub use config::{CleanupPolicy, Clock, LogConfig, ManualClock, SystemClock};
pub use epoch_cache::{EpochEntry, LeaderEpochCache};
pub use error::{LogError, LogResult};
pub use manager::{DEFAULT_RECOVERY_THREADS, LogManager};
pub use partition_log::{
    AppendInfo, DELETE_DIR_SUFFIX, DeletedSegments, Log, LogFlush, LogOpenOptions, ReadInfo,
    deletion_dir_name, is_deletion_dir_name,
};
pub use producer_state::{AppendCheck, ProducerEntry, check_append};
