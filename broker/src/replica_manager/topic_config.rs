//! Topic configs (from the metadata image) -> a partition's [`LogConfig`]: the broker defaults
//! overridden by the topic's `segment.bytes`, `retention.ms`, `retention.bytes`,
//! `max.message.bytes`, `cleanup.policy`, `min.cleanable.dirty.ratio`,
//! `min.compaction.lag.ms`, `max.compaction.lag.ms`, `delete.retention.ms`,
//! `compression.type` and `message.timestamp.type`. The
//! controller validated the values with the same rules (`keel_controller::logic::configs`);
//! an unparsable one keeps the default and is logged.

use keel_record::compression::CompressionType;

use crate::log::{CleanupPolicy, LogConfig};

/// The log settings of `topic` whose topic-level configs `get` returns (Kafka's key names).
///
/// When the result fails [`LogConfig::validate`] (a value the controller accepts but the log
/// does not, e.g. `segment.bytes` below 1 KiB), the broker defaults apply, except the
/// cleanup policy: a compacted topic must never fall back to time retention, which would
/// delete the latest value of its keys.
pub fn log_config<'a>(
    defaults: &LogConfig,
    topic: &str,
    get: impl Fn(&str) -> Option<&'a str>,
) -> LogConfig {
    let mut c = defaults.clone();
    let long = |key: &str| -> Option<i64> {
        let v = get(key)?;
        match v.trim().parse::<i64>() {
            Ok(n) => Some(n),
            Err(_) => {
                tracing::warn!(topic, key, value = v, "ignoring an unparsable topic config");
                None
            }
        }
    };
    if let Some(n) = long("segment.bytes").filter(|n| *n > 0) {
        c.segment_bytes = n as u64;
    }
    if let Some(n) = long("retention.ms") {
        c.retention_ms = (n >= 0).then_some(n);
    }
    if let Some(n) = long("retention.bytes") {
        c.retention_bytes = (n >= 0).then_some(n as u64);
    }
    if let Some(n) = long("max.message.bytes").filter(|n| *n > 0) {
        c.max_message_bytes = n as usize;
    }
    if let Some(v) = get("cleanup.policy") {
        match CleanupPolicy::parse(v) {
            Ok(p) => c.cleanup_policy = p,
            Err(e) => tracing::warn!(
                topic,
                key = "cleanup.policy",
                value = v,
                "ignoring an unparsable topic config: {e}"
            ),
        }
    }
    if let Some(v) = get("min.cleanable.dirty.ratio") {
        match v.trim().parse::<f64>() {
            Ok(r) if (0.0..=1.0).contains(&r) => c.min_cleanable_dirty_ratio = r,
            _ => tracing::warn!(
                topic,
                key = "min.cleanable.dirty.ratio",
                value = v,
                "ignoring an unparsable topic config"
            ),
        }
    }
    if let Some(n) = long("min.compaction.lag.ms") {
        c.min_compaction_lag_ms = n;
    }
    if let Some(n) = long("max.compaction.lag.ms") {
        c.max_compaction_lag_ms = n;
    }
    if let Some(n) = long("delete.retention.ms") {
        c.delete_retention_ms = n;
    }
    if let Some(v) = get("compression.type") {
        match compression_type(v.trim()) {
            Some(codec) => c.compression = codec,
            None => tracing::warn!(
                topic,
                key = "compression.type",
                value = v,
                "ignoring an unparsable topic config"
            ),
        }
    }
    if let Some(v) = get("message.timestamp.type") {
        match v.trim() {
            "CreateTime" => c.log_append_time = false,
            "LogAppendTime" => c.log_append_time = true,
            _ => tracing::warn!(
                topic,
                key = "message.timestamp.type",
                value = v,
                "ignoring an unparsable topic config"
            ),
        }
    }
    match c.validate() {
        Ok(()) => c,
        Err(e) => {
            tracing::warn!(
                topic,
                "topic configs rejected, using the broker defaults (keeping cleanup.policy {}): {e}",
                c.cleanup_policy
            );
            LogConfig {
                cleanup_policy: c.cleanup_policy,
                ..defaults.clone()
            }
        }
    }
}

/// A `compression.type` value (Kafka `BrokerCompressionType`): `Some(None)` for `producer`
/// (keep each batch's codec), `Some(Some(codec))` for a codec, `None` for anything else.
pub fn compression_type(value: &str) -> Option<Option<CompressionType>> {
    Some(match value {
        "producer" => None,
        "uncompressed" => Some(CompressionType::None),
        "gzip" => Some(CompressionType::Gzip),
        "snappy" => Some(CompressionType::Snappy),
        "lz4" => Some(CompressionType::Lz4),
        "zstd" => Some(CompressionType::Zstd),
        _ => return None,
    })
}

/// The `compression.type` value naming `codec` (the inverse of [`compression_type`]).
pub fn compression_type_name(codec: Option<CompressionType>) -> &'static str {
    match codec {
        None => "producer",
        Some(CompressionType::None) => "uncompressed",
        Some(CompressionType::Gzip) => "gzip",
        Some(CompressionType::Snappy) => "snappy",
        Some(CompressionType::Lz4) => "lz4",
        Some(CompressionType::Zstd) => "zstd",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn map(pairs: &[(&'static str, &'static str)]) -> HashMap<&'static str, &'static str> {
        pairs.iter().copied().collect()
    }

    #[test]
    fn compaction_configs_reach_the_log() {
        let defaults = LogConfig::default();
        let topic = map(&[
            ("cleanup.policy", "compact,delete"),
            ("min.cleanable.dirty.ratio", "0.25"),
            ("min.compaction.lag.ms", "10"),
            ("max.compaction.lag.ms", "20"),
            ("delete.retention.ms", "0"),
            ("retention.ms", "-1"),
        ]);
        let c = log_config(&defaults, "t", |k| topic.get(k).copied());
        assert!(c.cleanup_policy.compact && c.cleanup_policy.delete);
        assert_eq!(c.min_cleanable_dirty_ratio, 0.25);
        assert_eq!((c.min_compaction_lag_ms, c.max_compaction_lag_ms), (10, 20));
        assert_eq!(c.delete_retention_ms, 0);
        assert_eq!(c.retention_ms, None);
        // Nothing set: the defaults.
        assert_eq!(log_config(&defaults, "t", |_| None), defaults);
    }

    #[test]
    fn compression_and_timestamp_type_reach_the_log() {
        let defaults = LogConfig::default();
        assert_eq!(
            (defaults.compression, defaults.log_append_time),
            (None, false)
        );
        for (value, want) in [
            ("producer", None),
            ("uncompressed", Some(CompressionType::None)),
            ("gzip", Some(CompressionType::Gzip)),
            ("snappy", Some(CompressionType::Snappy)),
            ("lz4", Some(CompressionType::Lz4)),
            ("zstd", Some(CompressionType::Zstd)),
        ] {
            let topic = map(&[("compression.type", value)]);
            let c = log_config(&defaults, "t", |k| topic.get(k).copied());
            assert_eq!(c.compression, want, "{value}");
            assert_eq!(compression_type_name(want), value);
        }
        let topic = map(&[("message.timestamp.type", "LogAppendTime")]);
        assert!(log_config(&defaults, "t", |k| topic.get(k).copied()).log_append_time);
        // Kafka's names are exact: anything else keeps the default.
        let topic = map(&[
            ("compression.type", "ZSTD"),
            ("message.timestamp.type", "logappendtime"),
        ]);
        let c = log_config(&defaults, "t", |k| topic.get(k).copied());
        assert_eq!((c.compression, c.log_append_time), (None, false));
    }

    #[test]
    fn unparsable_values_keep_defaults_and_compaction_survives_a_rejected_config() {
        let defaults = LogConfig::default();
        let topic = map(&[
            ("cleanup.policy", "compact"),
            ("min.cleanable.dirty.ratio", "lots"),
            ("delete.retention.ms", "soon"),
        ]);
        let c = log_config(&defaults, "t", |k| topic.get(k).copied());
        assert_eq!(c.cleanup_policy, CleanupPolicy::COMPACT);
        assert_eq!(c.min_cleanable_dirty_ratio, 0.5);
        assert_eq!(c.delete_retention_ms, defaults.delete_retention_ms);
        // segment.bytes the controller accepts (>= 14) but the log does not (< 1 KiB): the
        // defaults, but still compacted (never time retention on a compacted topic).
        let topic = map(&[("cleanup.policy", "compact"), ("segment.bytes", "100")]);
        let c = log_config(&defaults, "t", |k| topic.get(k).copied());
        assert_eq!(c.segment_bytes, defaults.segment_bytes);
        assert_eq!(c.cleanup_policy, CleanupPolicy::COMPACT);
        // An unknown policy keeps the default (delete).
        let topic = map(&[("cleanup.policy", "shred")]);
        let c = log_config(&defaults, "t", |k| topic.get(k).copied());
        assert_eq!(c.cleanup_policy, CleanupPolicy::DELETE);
    }
}
