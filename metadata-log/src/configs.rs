//! The config keys Keel knows, with Kafka's names, defaults, types and ranges
//! ([`CONFIG_DEFS`]; Kafka: `LogConfig`'s `ConfigDef` and the broker-level synonyms of
//! `ServerLogConfigs`), and the value a broker applies to a topic ([`dynamic_topic_value`]).
//!
//! Shared by the controller, which validates AlterConfigs and answers DescribeConfigs
//! (`keel_controller::logic::configs`), and the brokers, which apply the values to their logs
//! without a restart (dynamic configs, KIP-226).

use crate::{ConfigResource, MetadataImage};

/// The type and range of a config value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ConfigKind {
    /// A 32-bit integer in `[min, i32::MAX]`.
    Int {
        /// Smallest accepted value.
        min: i32,
    },
    /// A 64-bit integer in `[min, i64::MAX]`.
    Long {
        /// Smallest accepted value.
        min: i64,
    },
    /// `true` or `false`, case-insensitive (Kafka: `ConfigDef.Type.BOOLEAN`).
    Bool,
    /// A 64-bit float in `[min, max]` (Kafka: `ConfigDef.Type.DOUBLE` with a range).
    Double {
        /// Smallest accepted value.
        min: f64,
        /// Largest accepted value.
        max: f64,
    },
    /// `cleanup.policy`: a non-empty comma-separated list of `delete` and `compact` (Kafka's
    /// `ValidList`; the same rule as the broker's `keel_broker::log::CleanupPolicy::parse`).
    CleanupPolicy,
}

/// One known config key (Kafka: a `ConfigDef` entry of `LogConfig`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ConfigDef {
    /// The topic-level name, e.g. `retention.ms`.
    pub name: &'static str,
    /// The broker/cluster-level name, e.g. `log.retention.ms`.
    pub broker_name: &'static str,
    /// Kafka's default, as a string.
    pub default: &'static str,
    /// Type and range.
    pub kind: ConfigKind,
    /// One-line documentation (DescribeConfigs `include_documentation`).
    pub doc: &'static str,
}

/// Every config key Keel knows, with Kafka's defaults.
pub const CONFIG_DEFS: &[ConfigDef] = &[
    ConfigDef {
        name: "min.insync.replicas",
        broker_name: "min.insync.replicas",
        default: "1",
        kind: ConfigKind::Int { min: 1 },
        doc: "Minimum ISR size for acks=all writes to succeed; must not exceed the topic's \
              replication factor.",
    },
    ConfigDef {
        name: "unclean.leader.election.enable",
        broker_name: "unclean.leader.election.enable",
        default: "false",
        kind: ConfigKind::Bool,
        doc: "Allow a replica outside the ISR to become leader when no ISR member is live \
              (may lose acknowledged data).",
    },
    ConfigDef {
        name: "retention.ms",
        broker_name: "log.retention.ms",
        default: "604800000",
        kind: ConfigKind::Long { min: -1 },
        doc: "Delete segments older than this many milliseconds; -1 = no time limit.",
    },
    ConfigDef {
        name: "retention.bytes",
        broker_name: "log.retention.bytes",
        default: "-1",
        // Kafka accepts any long; values below -1 mean nothing, so Keel refuses them.
        kind: ConfigKind::Long { min: -1 },
        doc: "Delete old segments while a partition is larger than this many bytes; -1 = no \
              size limit.",
    },
    ConfigDef {
        name: "segment.bytes",
        broker_name: "log.segment.bytes",
        default: "1073741824",
        // Kafka 3.x: at least LegacyRecord.RECORD_OVERHEAD_V0 (14); 4.0 raised it to 1 MiB.
        kind: ConfigKind::Int { min: 14 },
        doc: "Segment file size in bytes at which the log rolls a new segment.",
    },
    ConfigDef {
        name: "segment.ms",
        broker_name: "log.roll.ms",
        default: "604800000",
        kind: ConfigKind::Long { min: 1 },
        doc: "Roll a new segment after this many milliseconds even if it is not full.",
    },
    ConfigDef {
        name: "cleanup.policy",
        broker_name: "log.cleanup.policy",
        default: "delete",
        kind: ConfigKind::CleanupPolicy,
        doc: "Retention policy for old segments: `delete` (time/size retention), `compact` \
              (keep the latest record per key), or both.",
    },
    ConfigDef {
        name: "min.cleanable.dirty.ratio",
        broker_name: "log.cleaner.min.cleanable.ratio",
        default: "0.5",
        kind: ConfigKind::Double { min: 0.0, max: 1.0 },
        doc: "Compact a log when its uncleaned share of bytes reaches this ratio.",
    },
    ConfigDef {
        name: "min.compaction.lag.ms",
        broker_name: "log.cleaner.min.compaction.lag.ms",
        default: "0",
        kind: ConfigKind::Long { min: 0 },
        doc: "Records stay uncompacted for at least this many milliseconds; must not exceed \
              max.compaction.lag.ms.",
    },
    ConfigDef {
        name: "max.compaction.lag.ms",
        broker_name: "log.cleaner.max.compaction.lag.ms",
        default: "9223372036854775807",
        kind: ConfigKind::Long { min: 1 },
        doc: "Compact records at most this many milliseconds after they were written, \
              whatever the dirty ratio.",
    },
    ConfigDef {
        name: "delete.retention.ms",
        broker_name: "log.cleaner.delete.retention.ms",
        default: "86400000",
        kind: ConfigKind::Long { min: 0 },
        doc: "How long a tombstone stays in a compacted log after the cleaner first kept it.",
    },
    ConfigDef {
        name: "max.message.bytes",
        broker_name: "message.max.bytes",
        default: "1048588",
        kind: ConfigKind::Int { min: 0 },
        doc: "Largest record batch the topic accepts, in bytes.",
    },
    ConfigDef {
        name: "flush.messages",
        broker_name: "log.flush.interval.messages",
        default: "9223372036854775807",
        kind: ConfigKind::Long { min: 1 },
        doc: "fsync the log after this many messages; 1 = before every acknowledgement.",
    },
];

/// The definition of a topic-level key.
pub fn topic_config_def(name: &str) -> Option<&'static ConfigDef> {
    CONFIG_DEFS.iter().find(|d| d.name == name)
}

/// The definition of a broker/cluster-level key.
pub fn broker_config_def(name: &str) -> Option<&'static ConfigDef> {
    CONFIG_DEFS.iter().find(|d| d.broker_name == name)
}

/// Checks `value` against the key's type and range. `Err` says why, in words.
pub fn validate_value(def: &ConfigDef, value: &str) -> Result<(), String> {
    let v = value.trim();
    match def.kind {
        ConfigKind::Int { min } => match v.parse::<i32>() {
            Ok(n) if n >= min => Ok(()),
            Ok(_) => Err(format!("value must be at least {min}")),
            Err(_) => Err("value must be a 32-bit integer".into()),
        },
        ConfigKind::Long { min } => match v.parse::<i64>() {
            Ok(n) if n >= min => Ok(()),
            Ok(_) => Err(format!("value must be at least {min}")),
            Err(_) => Err("value must be a 64-bit integer".into()),
        },
        ConfigKind::Bool => parse_bool(v)
            .map(|_| ())
            .ok_or_else(|| "value must be true or false".into()),
        ConfigKind::Double { min, max } => match v.parse::<f64>() {
            Ok(x) if (min..=max).contains(&x) => Ok(()),
            Ok(_) => Err(format!("value must be in [{min}, {max}]")),
            Err(_) => Err("value must be a number".into()),
        },
        ConfigKind::CleanupPolicy => {
            if v.split(',')
                .all(|p| matches!(p.trim(), "delete" | "compact"))
            {
                Ok(())
            } else {
                Err("value must be a list of `delete` and `compact` (e.g. `compact,delete`)".into())
            }
        }
    }
}

/// `true` / `false`, case-insensitive, surrounding spaces ignored (Kafka: `ConfigDef.Type.BOOLEAN`).
pub fn parse_bool(v: &str) -> Option<bool> {
    let v = v.trim();
    if v.eq_ignore_ascii_case("true") {
        Some(true)
    } else if v.eq_ignore_ascii_case("false") {
        Some(false)
    } else {
        None
    }
}

/// The dynamic value of topic key `name` (e.g. `retention.ms`) for `topic` on broker
/// `broker_id`, with Kafka's precedence (KIP-226, `DynamicBrokerConfig` / `LogConfig`): the
/// topic's own ConfigRecord, else the broker-level synonym (e.g. `log.retention.ms`) set on
/// this broker (BROKER resource `broker_id`), else the same set cluster-wide (the BROKER
/// default, stored as CLUSTER). `None`: the broker's static config file or Kafka's default
/// applies. A key Keel does not know has no broker-level synonym: only the topic's value.
pub fn dynamic_topic_value<'a>(
    image: &'a MetadataImage,
    topic: &str,
    broker_id: i32,
    name: &str,
) -> Option<&'a str> {
    if let Some(v) = image.config(&ConfigResource::Topic(topic.to_string()), name) {
        return Some(v);
    }
    let broker_name = topic_config_def(name)?.broker_name;
    image
        .config(&ConfigResource::Broker(broker_id), broker_name)
        .or_else(|| image.config(&ConfigResource::Cluster, broker_name))
}

#[cfg(test)]
mod tests {
    use keel_proto::metadata::{
        ConfigRecord, ConfigResourceType, MetadataRecord, TopicRecord, metadata_record::Record,
    };

    use super::*;
    use crate::Provenance;

    fn config(ty: ConfigResourceType, resource: &str, name: &str, value: &str) -> MetadataRecord {
        MetadataRecord {
            record: Some(Record::Config(ConfigRecord {
                resource_type: ty as i32,
                resource_name: resource.into(),
                name: name.into(),
                value: Some(value.into()),
            })),
        }
    }

    #[test]
    fn a_topic_value_beats_this_brokers_which_beats_the_cluster_default() {
        use ConfigResourceType::*;
        let image = |records: Vec<MetadataRecord>| {
            MetadataImage::empty()
                .with_records(Provenance { offset: 1, term: 1 }, &records)
                .unwrap()
        };
        let none = image(vec![]);
        assert_eq!(dynamic_topic_value(&none, "t", 1, "retention.ms"), None);
        let cluster = image(vec![config(Cluster, "", "log.retention.ms", "100")]);
        assert_eq!(
            dynamic_topic_value(&cluster, "t", 1, "retention.ms"),
            Some("100")
        );
        let broker = image(vec![
            config(Cluster, "", "log.retention.ms", "100"),
            config(Broker, "1", "log.retention.ms", "200"),
        ]);
        assert_eq!(
            dynamic_topic_value(&broker, "t", 1, "retention.ms"),
            Some("200")
        );
        assert_eq!(
            dynamic_topic_value(&broker, "t", 2, "retention.ms"),
            Some("100"),
            "another broker's value is not this one's"
        );
        let topic = image(vec![
            MetadataRecord {
                record: Some(Record::Topic(TopicRecord {
                    name: "t".into(),
                    topic_id: bytes::Bytes::copy_from_slice(&[7; 16]),
                })),
            },
            config(Cluster, "", "log.retention.ms", "100"),
            config(Broker, "1", "log.retention.ms", "200"),
            config(Topic, "t", "retention.ms", "300"),
        ]);
        assert_eq!(
            dynamic_topic_value(&topic, "t", 1, "retention.ms"),
            Some("300")
        );
        assert_eq!(
            dynamic_topic_value(&topic, "u", 1, "retention.ms"),
            Some("200")
        );
        // Synonyms that differ from the topic name.
        let size = image(vec![config(Cluster, "", "message.max.bytes", "5000")]);
        assert_eq!(
            dynamic_topic_value(&size, "t", 1, "max.message.bytes"),
            Some("5000")
        );
    }
}
