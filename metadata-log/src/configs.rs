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
    /// A throttled-replicas list (KIP-73; Kafka `ThrottledReplicaListValidator`): empty, `*`,
    /// or comma-separated `partition:broker` pairs of non-negative integers
    /// ([`ThrottledReplicas::parse`]).
    ThrottledReplicas,
    /// One of a fixed set of strings, compared exactly (Kafka: `ConfigDef.Type.STRING` with
    /// `ValidString.in`), e.g. `compression.type`.
    Choice(&'static [&'static str]),
}

/// The values of `compression.type` (Kafka `BrokerCompressionType`): `producer` keeps each
/// batch's codec, the others make the leader store every batch with that codec.
pub const COMPRESSION_TYPES: &[&str] =
    &["uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"];

/// The values of `message.timestamp.type` (Kafka `TimestampType`).
pub const TIMESTAMP_TYPES: &[&str] = &["CreateTime", "LogAppendTime"];

/// Which resources a key applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigScope {
    /// A topic key (`name`) with a broker-level synonym (`broker_name`) that BROKER and
    /// CLUSTER resources carry as the default of every topic (e.g. `retention.ms` /
    /// `log.retention.ms`).
    TopicAndBroker,
    /// A topic key only, without a broker-level default (Kafka's
    /// `*.replication.throttled.replicas`); `broker_name` equals `name` and is not used.
    Topic,
    /// A broker key only, on BROKER resources or the cluster-wide default (Kafka's
    /// `*.replication.throttled.rate`, `DynamicConfig.Broker`); `name` equals `broker_name`
    /// and is not a topic key.
    Broker,
}

/// One known config key (Kafka: a `ConfigDef` entry of `LogConfig`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ConfigDef {
    /// The topic-level name, e.g. `retention.ms`.
    pub name: &'static str,
    /// The broker/cluster-level name, e.g. `log.retention.ms`.
    pub broker_name: &'static str,
    /// Which resources take the key.
    pub scope: ConfigScope,
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
        scope: ConfigScope::TopicAndBroker,
        default: "1",
        kind: ConfigKind::Int { min: 1 },
        doc: "Minimum ISR size for acks=all writes to succeed; must not exceed the topic's \
              replication factor.",
    },
    ConfigDef {
        name: "unclean.leader.election.enable",
        broker_name: "unclean.leader.election.enable",
        scope: ConfigScope::TopicAndBroker,
        default: "false",
        kind: ConfigKind::Bool,
        doc: "Allow a replica outside the ISR to become leader when no ISR member is live \
              (may lose acknowledged data).",
    },
    ConfigDef {
        name: "retention.ms",
        broker_name: "log.retention.ms",
        scope: ConfigScope::TopicAndBroker,
        default: "604800000",
        kind: ConfigKind::Long { min: -1 },
        doc: "Delete segments older than this many milliseconds; -1 = no time limit.",
    },
    ConfigDef {
        name: "retention.bytes",
        broker_name: "log.retention.bytes",
        scope: ConfigScope::TopicAndBroker,
        default: "-1",
        // Kafka accepts any long; values below -1 mean nothing, so Keel refuses them.
        kind: ConfigKind::Long { min: -1 },
        doc: "Delete old segments while a partition is larger than this many bytes; -1 = no \
              size limit.",
    },
    ConfigDef {
        name: "segment.bytes",
        broker_name: "log.segment.bytes",
        scope: ConfigScope::TopicAndBroker,
        default: "1073741824",
        // Kafka 3.x: at least LegacyRecord.RECORD_OVERHEAD_V0 (14); 4.0 raised it to 1 MiB.
        kind: ConfigKind::Int { min: 14 },
        doc: "Segment file size in bytes at which the log rolls a new segment.",
    },
    ConfigDef {
        name: "segment.ms",
        broker_name: "log.roll.ms",
        scope: ConfigScope::TopicAndBroker,
        default: "604800000",
        kind: ConfigKind::Long { min: 1 },
        doc: "Roll a new segment after this many milliseconds even if it is not full.",
    },
    ConfigDef {
        name: "cleanup.policy",
        broker_name: "log.cleanup.policy",
        scope: ConfigScope::TopicAndBroker,
        default: "delete",
        kind: ConfigKind::CleanupPolicy,
        doc: "Retention policy for old segments: `delete` (time/size retention), `compact` \
              (keep the latest record per key), or both.",
    },
    ConfigDef {
        name: "compression.type",
        broker_name: "compression.type",
        scope: ConfigScope::TopicAndBroker,
        default: "producer",
        kind: ConfigKind::Choice(COMPRESSION_TYPES),
        doc: "The codec the leader stores batches with: `producer` keeps the producer's, \
              `uncompressed`, `gzip`, `snappy`, `lz4` or `zstd` recompresses batches sent with \
              another.",
    },
    ConfigDef {
        name: "message.timestamp.type",
        broker_name: "log.message.timestamp.type",
        scope: ConfigScope::TopicAndBroker,
        default: "CreateTime",
        kind: ConfigKind::Choice(TIMESTAMP_TYPES),
        doc: "`CreateTime` keeps the producer's record timestamps; `LogAppendTime` stamps \
              every batch with the leader's clock when it is appended.",
    },
    ConfigDef {
        name: "min.cleanable.dirty.ratio",
        broker_name: "log.cleaner.min.cleanable.ratio",
        scope: ConfigScope::TopicAndBroker,
        default: "0.5",
        kind: ConfigKind::Double { min: 0.0, max: 1.0 },
        doc: "Compact a log when its uncleaned share of bytes reaches this ratio.",
    },
    ConfigDef {
        name: "min.compaction.lag.ms",
        broker_name: "log.cleaner.min.compaction.lag.ms",
        scope: ConfigScope::TopicAndBroker,
        default: "0",
        kind: ConfigKind::Long { min: 0 },
        doc: "Records stay uncompacted for at least this many milliseconds; must not exceed \
              max.compaction.lag.ms.",
    },
    ConfigDef {
        name: "max.compaction.lag.ms",
        broker_name: "log.cleaner.max.compaction.lag.ms",
        scope: ConfigScope::TopicAndBroker,
        default: "9223372036854775807",
        kind: ConfigKind::Long { min: 1 },
        doc: "Compact records at most this many milliseconds after they were written, \
              whatever the dirty ratio.",
    },
    ConfigDef {
        name: "delete.retention.ms",
        broker_name: "log.cleaner.delete.retention.ms",
        scope: ConfigScope::TopicAndBroker,
        default: "86400000",
        kind: ConfigKind::Long { min: 0 },
        doc: "How long a tombstone stays in a compacted log after the cleaner first kept it.",
    },
    ConfigDef {
        name: "max.message.bytes",
        broker_name: "message.max.bytes",
        scope: ConfigScope::TopicAndBroker,
        default: "1048588",
        kind: ConfigKind::Int { min: 0 },
        doc: "Largest record batch the topic accepts, in bytes.",
    },
    ConfigDef {
        name: "flush.messages",
        broker_name: "log.flush.interval.messages",
        scope: ConfigScope::TopicAndBroker,
        default: "9223372036854775807",
        kind: ConfigKind::Long { min: 1 },
        doc: "fsync the log after this many messages; 1 = before every acknowledgement.",
    },
    ConfigDef {
        name: "leader.replication.throttled.replicas",
        broker_name: "leader.replication.throttled.replicas",
        scope: ConfigScope::Topic,
        default: "",
        kind: ConfigKind::ThrottledReplicas,
        doc: "Replicas throttled on the leader side while they catch up (KIP-73): \
              `partition:broker` pairs, comma separated, or `*` for every replica of the \
              topic; the leader's `leader.replication.throttled.rate` bounds what it sends \
              them while they are outside the ISR.",
    },
    ConfigDef {
        name: "follower.replication.throttled.replicas",
        broker_name: "follower.replication.throttled.replicas",
        scope: ConfigScope::Topic,
        default: "",
        kind: ConfigKind::ThrottledReplicas,
        doc: "Replicas throttled on the follower side while they catch up (KIP-73): \
              `partition:broker` pairs, comma separated, or `*`; the follower's \
              `follower.replication.throttled.rate` bounds what it fetches for them while it \
              is outside the ISR.",
    },
    ConfigDef {
        name: "leader.replication.throttled.rate",
        broker_name: "leader.replication.throttled.rate",
        scope: ConfigScope::Broker,
        default: "9223372036854775807",
        kind: ConfigKind::Long { min: 0 },
        doc: "Bytes per second a broker sends, as leader, to the throttled replicas of \
              `leader.replication.throttled.replicas` (KIP-73), measured over the last 11 s.",
    },
    ConfigDef {
        name: "follower.replication.throttled.rate",
        broker_name: "follower.replication.throttled.rate",
        scope: ConfigScope::Broker,
        default: "9223372036854775807",
        kind: ConfigKind::Long { min: 0 },
        doc: "Bytes per second a broker fetches, as follower, for the throttled replicas of \
              `follower.replication.throttled.replicas` (KIP-73), measured over the last 11 s.",
    },
];

/// Number of topic keys in [`CONFIG_DEFS`] (a topic created with every one set writes this
/// many ConfigRecords).
pub const TOPIC_CONFIG_COUNT: usize = {
    let mut n = 0;
    let mut i = 0;
    while i < CONFIG_DEFS.len() {
        if !matches!(CONFIG_DEFS[i].scope, ConfigScope::Broker) {
            n += 1;
        }
        i += 1;
    }
    n
};

impl ConfigDef {
    /// Whether TOPIC resources take the key (by [`ConfigDef::name`]).
    pub fn is_topic_key(&self) -> bool {
        self.scope != ConfigScope::Broker
    }

    /// Whether BROKER and CLUSTER resources take the key (by [`ConfigDef::broker_name`]).
    pub fn is_broker_key(&self) -> bool {
        self.scope != ConfigScope::Topic
    }

    /// The broker-level name whose BROKER / CLUSTER value is the default of this topic key,
    /// if it has one ([`ConfigScope::TopicAndBroker`]).
    pub fn broker_synonym(&self) -> Option<&'static str> {
        (self.scope == ConfigScope::TopicAndBroker).then_some(self.broker_name)
    }
}

/// The keys of one level: the topic keys, or (`broker_level`) the broker/cluster keys.
pub fn config_defs(broker_level: bool) -> impl Iterator<Item = &'static ConfigDef> {
    CONFIG_DEFS.iter().filter(move |d| {
        if broker_level {
            d.is_broker_key()
        } else {
            d.is_topic_key()
        }
    })
}

/// The definition of a topic-level key.
pub fn topic_config_def(name: &str) -> Option<&'static ConfigDef> {
    CONFIG_DEFS
        .iter()
        .find(|d| d.is_topic_key() && d.name == name)
}

/// The definition of a broker/cluster-level key.
pub fn broker_config_def(name: &str) -> Option<&'static ConfigDef> {
    CONFIG_DEFS
        .iter()
        .find(|d| d.is_broker_key() && d.broker_name == name)
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
        ConfigKind::ThrottledReplicas => ThrottledReplicas::parse(v).map(|_| ()),
        ConfigKind::Choice(values) => {
            if values.contains(&v) {
                Ok(())
            } else {
                Err(format!("value must be one of {}", values.join(", ")))
            }
        }
    }
}

/// A parsed `leader.replication.throttled.replicas` / `follower.replication.throttled.replicas`
/// value (KIP-73; Kafka `ThrottledReplicaListValidator`, `QuotaConfigHandler`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ThrottledReplicas {
    /// `*`: every replica of the topic.
    All,
    /// The listed `(partition, broker)` pairs; empty: none.
    Listed(Vec<(i32, i32)>),
}

impl ThrottledReplicas {
    /// Parses a value: empty (none), `*` (all), or `partition:broker` pairs separated by
    /// commas, each number a non-negative 32-bit integer, spaces around items ignored.
    /// `Err` names the first bad item.
    pub fn parse(value: &str) -> Result<Self, String> {
        let v = value.trim();
        if v == "*" {
            return Ok(Self::All);
        }
        let mut pairs = Vec::new();
        for item in v.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let pair = item.split_once(':').and_then(|(p, b)| {
                let p = p.trim().parse::<i32>().ok().filter(|n| *n >= 0)?;
                let b = b.trim().parse::<i32>().ok().filter(|n| *n >= 0)?;
                Some((p, b))
            });
            match pair {
                Some(pair) => pairs.push(pair),
                None => {
                    return Err(format!(
                        "value must be `*` or a comma-separated list of partition:broker pairs \
                         (e.g. `0:1,0:2`); {:?} is not one",
                        keel_proto::limits::clip(item)
                    ));
                }
            }
        }
        Ok(Self::Listed(pairs))
    }

    /// Whether the replica of `partition` on `broker` is throttled.
    pub fn throttles(&self, partition: i32, broker: i32) -> bool {
        match self {
            Self::All => true,
            Self::Listed(pairs) => pairs.contains(&(partition, broker)),
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
    let broker_name = topic_config_def(name)?.broker_synonym()?;
    image
        .config(&ConfigResource::Broker(broker_id), broker_name)
        .or_else(|| image.config(&ConfigResource::Cluster, broker_name))
}

/// The dynamic value of broker key `name` (e.g. `leader.replication.throttled.rate`) on
/// broker `broker_id` (KIP-226): set on this broker, else cluster-wide. `None`: Kafka's
/// default applies.
pub fn dynamic_broker_value<'a>(
    image: &'a MetadataImage,
    broker_id: i32,
    name: &str,
) -> Option<&'a str> {
    image
        .config(&ConfigResource::Broker(broker_id), name)
        .or_else(|| image.config(&ConfigResource::Cluster, name))
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

    #[test]
    fn throttled_replica_lists_parse_as_kafka_validates_them() {
        assert_eq!(ThrottledReplicas::parse("*"), Ok(ThrottledReplicas::All));
        assert_eq!(ThrottledReplicas::parse(" * "), Ok(ThrottledReplicas::All));
        assert_eq!(
            ThrottledReplicas::parse(""),
            Ok(ThrottledReplicas::Listed(vec![]))
        );
        let l = ThrottledReplicas::parse("0:1, 0:2,3:4").unwrap();
        assert_eq!(l, ThrottledReplicas::Listed(vec![(0, 1), (0, 2), (3, 4)]));
        assert!(l.throttles(0, 2) && l.throttles(3, 4));
        assert!(!l.throttles(0, 4) && !l.throttles(1, 1));
        assert!(ThrottledReplicas::All.throttles(9, 9));
        for bad in [
            "0", "0:", ":1", "a:1", "0:-1", "-1:0", "0:1,*", "0:1:2", "0;1",
        ] {
            let e = ThrottledReplicas::parse(bad).unwrap_err();
            assert!(e.contains("partition:broker"), "{bad}: {e}");
        }
    }

    #[test]
    fn scopes_keep_topic_only_and_broker_only_keys_apart() {
        let leader = "leader.replication.throttled.replicas";
        let rate = "leader.replication.throttled.rate";
        assert!(topic_config_def(leader).is_some());
        assert!(
            broker_config_def(leader).is_none(),
            "no broker-level synonym"
        );
        assert!(broker_config_def(rate).is_some());
        assert!(topic_config_def(rate).is_none(), "not a topic key");
        assert_eq!(
            topic_config_def("retention.ms").unwrap().broker_synonym(),
            Some("log.retention.ms")
        );
        assert_eq!(topic_config_def(leader).unwrap().broker_synonym(), None);
        assert!(config_defs(true).all(|d| d.name != leader));
        assert!(config_defs(false).all(|d| d.name != rate));
        let def = topic_config_def(leader).unwrap();
        assert!(validate_value(def, "0:1,1:2").is_ok());
        assert!(validate_value(def, "x").is_err());
        // A cluster-wide value under the topic name is not a topic's default.
        let image = MetadataImage::empty()
            .with_records(
                Provenance { offset: 1, term: 1 },
                &[config(ConfigResourceType::Cluster, "", leader, "*")],
            )
            .unwrap();
        assert_eq!(dynamic_topic_value(&image, "t", 1, leader), None);
        let image = MetadataImage::empty()
            .with_records(
                Provenance { offset: 1, term: 1 },
                &[
                    config(ConfigResourceType::Cluster, "", rate, "100"),
                    config(ConfigResourceType::Broker, "2", rate, "200"),
                ],
            )
            .unwrap();
        assert_eq!(dynamic_broker_value(&image, 1, rate), Some("100"));
        assert_eq!(dynamic_broker_value(&image, 2, rate), Some("200"));
    }
}
