//! Per-log configuration (Kafka topic configs and `log.*` broker defaults) and the injected
//! clock. No code in this module reads the wall clock except [`SystemClock`].

use std::fmt::Debug;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use super::error::LogError;

/// Source of "now" in milliseconds since the Unix epoch. Injected so tests and recovery
/// never depend on the wall clock.
pub trait Clock: Send + Sync + Debug {
    /// Current time in ms.
    fn now_ms(&self) -> i64;
}

/// The wall clock (production use only).
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        keel_runtime::clock::wall_clock_ms()
    }
}

/// A clock that only moves when told to (tests).
#[derive(Debug, Default, Clone)]
pub struct ManualClock(Arc<AtomicI64>);

impl ManualClock {
    /// A clock reading `now_ms`.
    pub fn new(now_ms: i64) -> Self {
        Self(Arc::new(AtomicI64::new(now_ms)))
    }
    /// Moves the clock forward by `ms`.
    pub fn advance(&self, ms: i64) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
    /// Sets the clock to `now_ms`.
    pub fn set(&self, now_ms: i64) {
        self.0.store(now_ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// `cleanup.policy` (Kafka `TopicConfig.CLEANUP_POLICY_CONFIG`): a list of `delete` and/or
/// `compact`. `delete` = time/size retention removes old segments; `compact` = the log
/// cleaner ([`crate::log::cleaner`]) keeps the latest record per key. Both may be set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CleanupPolicy {
    /// `delete`: `retention.ms` / `retention.bytes` apply.
    pub delete: bool,
    /// `compact`: the log is compacted.
    pub compact: bool,
}

impl CleanupPolicy {
    /// Kafka's default, `delete`.
    pub const DELETE: CleanupPolicy = CleanupPolicy {
        delete: true,
        compact: false,
    };
    /// `compact` only.
    pub const COMPACT: CleanupPolicy = CleanupPolicy {
        delete: false,
        compact: true,
    };

    /// Parses Kafka's list syntax: comma-separated `delete` / `compact` (any order, spaces
    /// around items allowed, case-sensitive as in Kafka's `ValidList`), at least one item.
    /// `Err` says why.
    pub fn parse(value: &str) -> Result<CleanupPolicy, String> {
        let mut p = CleanupPolicy {
            delete: false,
            compact: false,
        };
        for item in value.split(',') {
            match item.trim() {
                "delete" => p.delete = true,
                "compact" => p.compact = true,
                other => {
                    return Err(format!(
                        "{other:?} is not a cleanup policy (a list of `delete` and `compact`)"
                    ));
                }
            }
        }
        Ok(p)
    }
}

impl std::fmt::Display for CleanupPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.compact, self.delete) {
            (true, true) => f.write_str("compact,delete"),
            (true, false) => f.write_str("compact"),
            _ => f.write_str("delete"),
        }
    }
}

/// Configuration of one partition log. Names follow Kafka's topic configs (defaults from
/// Kafka's `LogConfig` / `ServerLogConfigs` unless noted).
#[derive(Debug, Clone, PartialEq)]
pub struct LogConfig {
    /// `segment.bytes`: roll when the active segment would exceed this size (bytes).
    /// Kafka default 1 GiB. Must be in [1 KiB, 2 GiB): index positions are u32 and a
    /// segment may exceed it by one batch (Kafka's minimum is 14 bytes; we are stricter).
    pub segment_bytes: u64,
    /// `segment.ms`: roll when the active segment's first batch is this old (ms). Kafka
    /// default 7 days.
    pub segment_ms: i64,
    /// `retention.ms`: delete whole segments whose newest batch is older than this (ms);
    /// `None` = keep forever (Kafka -1). Kafka default 7 days.
    pub retention_ms: Option<i64>,
    /// `retention.bytes`: delete the oldest segments while the log exceeds this size
    /// (bytes); `None` = unbounded (Kafka default -1). At most `i64::MAX` (Kafka's type is a
    /// long); larger values are rejected by [`LogConfig::validate`].
    pub retention_bytes: Option<u64>,
    /// `max.message.bytes`: largest batch accepted (bytes). Kafka default 1 MiB + 12.
    pub max_message_bytes: usize,
    /// `index.interval.bytes`: add an offset/time index entry every this many bytes.
    /// Kafka default 4096.
    pub index_interval_bytes: u64,
    /// `flush.messages` / `log.flush.interval.messages`: fdatasync after this many records;
    /// `None` = never force (Kafka default, relying on replication + page cache). `Some(1)`
    /// makes every append durable before it returns.
    pub flush_interval_messages: Option<u64>,
    /// `flush.ms` / `log.flush.interval.ms`: fdatasync when the last flush is this old (ms),
    /// checked by the periodic flusher ([`crate::log::Log::begin_flush_if_due`], every
    /// replica-manager tick), not on append (as Kafka's log flusher). `None` = never by time;
    /// a roll still flushes the log at the next tick, as Kafka's roll does.
    pub flush_interval_ms: Option<i64>,
    /// `producer.id.expiration.ms`: forget a producer whose newest batch timestamp is this
    /// old (ms), see [`crate::log::Log::remove_expired_producers`]; `None` = never. Kafka
    /// default 1 day.
    pub producer_id_expiration_ms: Option<i64>,
    /// Take a producer-state snapshot every this many bytes appended, in addition to one per
    /// segment roll and one on close (bounds the producer-state rebuild scan on load).
    /// Keel-specific: Kafka snapshots on roll and close only. Default 64 MiB.
    pub producer_snapshot_interval_bytes: u64,
    /// Bytes of the partition's newest data kept in the page cache (across segments): older
    /// data is written back and dropped from it as the log grows (see
    /// [`crate::log::cache_behind`]; HDFS `dfs.datanode.drop.cache.behind.writes`). `None` =
    /// keep every written page, Kafka's behaviour. Also how far ahead of its end the active
    /// segment's blocks are kept allocated ([`crate::log::cache_behind::Advice::Allocate`]).
    /// Broker-wide (`log_drop_cache_behind_bytes`),
    /// not a topic config. At least [`crate::log::cache_behind::MIN_LAG_BYTES`]. Default 32 MiB.
    pub drop_cache_behind_bytes: Option<u64>,
    /// `cleanup.policy`: Kafka default `delete`. With `compact` only, `retention.ms` and
    /// `retention.bytes` delete nothing.
    pub cleanup_policy: CleanupPolicy,
    /// `min.cleanable.dirty.ratio`: compact a log only when its dirty bytes are at least this
    /// share of its cleanable bytes (Kafka default 0.5), in [0, 1].
    pub min_cleanable_dirty_ratio: f64,
    /// `min.compaction.lag.ms`: records newer than this (by their segment's largest
    /// timestamp) are not compacted. Kafka default 0.
    pub min_compaction_lag_ms: i64,
    /// `max.compaction.lag.ms`: a log whose oldest dirty segment is older than this is
    /// compacted whatever its dirty ratio (KIP-354). Kafka default `Long.MAX_VALUE`; at
    /// least 1 and at least `min.compaction.lag.ms`.
    pub max_compaction_lag_ms: i64,
    /// `delete.retention.ms`: how long a tombstone stays after the cleaner first kept it
    /// (its batch's delete horizon, KIP-534). Kafka default 1 day.
    pub delete_retention_ms: i64,
    /// `compression.type`: the codec the leader stores client batches with (a batch sent
    /// with another is recompressed, Kafka `LogValidator`); `None` = `producer` (Kafka's
    /// default: kept as sent). Followers store the leader's bytes as they are.
    pub compression: Option<keel_record::compression::CompressionType>,
    /// `message.timestamp.type=LogAppendTime`: the leader stamps each client batch with its
    /// clock (the batch's max timestamp, which readers take as every record's timestamp);
    /// `false` = `CreateTime` (Kafka's default: the producer's timestamps).
    pub log_append_time: bool,
}

impl LogConfig {
    /// Checks every value's range; the error names the Kafka key.
    pub fn validate(&self) -> Result<(), LogError> {
        let bad = |key, reason: &str| {
            Err(LogError::InvalidConfig {
                key,
                reason: reason.into(),
            })
        };
        if !(1024..i32::MAX as u64).contains(&self.segment_bytes) {
            return bad("segment.bytes", "must be in [1024, 2^31 - 1)");
        }
        if self.segment_ms <= 0 {
            return bad("segment.ms", "must be > 0");
        }
        if self.retention_ms.is_some_and(|ms| ms < 0) {
            return bad("retention.ms", "must be >= 0 (None = unlimited)");
        }
        if self
            .retention_bytes
            .is_some_and(|b| i64::try_from(b).is_err())
        {
            return bad("retention.bytes", "must be <= 2^63 - 1 (None = unlimited)");
        }
        if self.max_message_bytes < 61 || self.max_message_bytes > i32::MAX as usize {
            return bad(
                "max.message.bytes",
                "must hold a batch header and fit in i32",
            );
        }
        if self.index_interval_bytes == 0 {
            return bad("index.interval.bytes", "must be > 0");
        }
        if self.flush_interval_messages == Some(0) {
            return bad("flush.messages", "must be >= 1 (None = never force)");
        }
        if self.producer_id_expiration_ms.is_some_and(|ms| ms < 1) {
            return bad("producer.id.expiration.ms", "must be >= 1 (None = never)");
        }
        if self.flush_interval_ms.is_some_and(|ms| ms < 0) {
            return bad("flush.ms", "must be >= 0 (None = never)");
        }
        if self
            .drop_cache_behind_bytes
            .is_some_and(|b| b < super::cache_behind::MIN_LAG_BYTES)
        {
            return bad(
                "log_drop_cache_behind_bytes",
                "must be at least 1048576 (1 MiB), or 0 to keep every written page cached",
            );
        }
        if !(0.0..=1.0).contains(&self.min_cleanable_dirty_ratio) {
            return bad("min.cleanable.dirty.ratio", "must be in [0, 1]");
        }
        if self.min_compaction_lag_ms < 0 {
            return bad("min.compaction.lag.ms", "must be >= 0");
        }
        if self.max_compaction_lag_ms < 1 {
            return bad("max.compaction.lag.ms", "must be >= 1");
        }
        if self.min_compaction_lag_ms > self.max_compaction_lag_ms {
            return bad(
                "min.compaction.lag.ms",
                "must not exceed max.compaction.lag.ms",
            );
        }
        if self.delete_retention_ms < 0 {
            return bad("delete.retention.ms", "must be >= 0");
        }
        Ok(())
    }
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            segment_bytes: 1 << 30,
            segment_ms: 7 * 24 * 3600 * 1000,
            retention_ms: Some(7 * 24 * 3600 * 1000),
            retention_bytes: None,
            max_message_bytes: 1024 * 1024 + 12,
            index_interval_bytes: 4096,
            flush_interval_messages: None,
            flush_interval_ms: None,
            producer_id_expiration_ms: Some(24 * 3600 * 1000),
            producer_snapshot_interval_bytes: 64 << 20,
            drop_cache_behind_bytes: Some(32 << 20),
            cleanup_policy: CleanupPolicy::DELETE,
            min_cleanable_dirty_ratio: 0.5,
            min_compaction_lag_ms: 0,
            max_compaction_lag_ms: i64::MAX,
            delete_retention_ms: 24 * 3600 * 1000,
            compression: None,
            log_append_time: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validate_names_the_key() {
        assert!(LogConfig::default().validate().is_ok());
        let c = LogConfig {
            segment_bytes: 100,
            ..LogConfig::default()
        };
        let e = c.validate().unwrap_err();
        assert!(
            matches!(
                e,
                LogError::InvalidConfig {
                    key: "segment.bytes",
                    ..
                }
            ),
            "{e}"
        );
        for bytes in [u64::MAX, i64::MAX as u64 + 1] {
            let c = LogConfig {
                retention_bytes: Some(bytes),
                ..LogConfig::default()
            };
            assert!(matches!(
                c.validate(),
                Err(LogError::InvalidConfig {
                    key: "retention.bytes",
                    ..
                })
            ));
        }
        let c = LogConfig {
            retention_bytes: Some(i64::MAX as u64),
            ..LogConfig::default()
        };
        assert!(c.validate().is_ok());
        let c = LogConfig {
            flush_interval_messages: Some(0),
            ..LogConfig::default()
        };
        assert!(matches!(
            c.validate(),
            Err(LogError::InvalidConfig {
                key: "flush.messages",
                ..
            })
        ));
    }

    #[test]
    fn cleanup_policy_parses_kafka_lists() {
        assert_eq!(CleanupPolicy::parse("delete"), Ok(CleanupPolicy::DELETE));
        assert_eq!(CleanupPolicy::parse("compact"), Ok(CleanupPolicy::COMPACT));
        let both = CleanupPolicy {
            delete: true,
            compact: true,
        };
        for v in ["compact,delete", "delete,compact", " compact , delete "] {
            assert_eq!(CleanupPolicy::parse(v), Ok(both), "{v}");
        }
        for bad in ["", "Compact", "compact,", "delete;compact", "none"] {
            assert!(CleanupPolicy::parse(bad).is_err(), "{bad:?}");
        }
        assert_eq!(both.to_string(), "compact,delete");
    }

    #[test]
    fn compaction_settings_are_validated() {
        let bad = [
            (
                "min.cleanable.dirty.ratio",
                LogConfig {
                    min_cleanable_dirty_ratio: 1.5,
                    ..LogConfig::default()
                },
            ),
            (
                "min.compaction.lag.ms",
                LogConfig {
                    min_compaction_lag_ms: -1,
                    ..LogConfig::default()
                },
            ),
            (
                "max.compaction.lag.ms",
                LogConfig {
                    max_compaction_lag_ms: 0,
                    ..LogConfig::default()
                },
            ),
            (
                "min.compaction.lag.ms",
                LogConfig {
                    min_compaction_lag_ms: 10,
                    max_compaction_lag_ms: 5,
                    ..LogConfig::default()
                },
            ),
            (
                "delete.retention.ms",
                LogConfig {
                    delete_retention_ms: -1,
                    ..LogConfig::default()
                },
            ),
        ];
        for (key, c) in bad {
            match c.validate() {
                Err(LogError::InvalidConfig { key: k, .. }) => assert_eq!(k, key),
                other => panic!("{key}: {other:?}"),
            }
        }
    }
}
