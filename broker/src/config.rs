//! Broker configuration: the typed form of the broker's settings.
//!
//! Every key is declared once in [`keel_runtime::settings::SETTINGS`] (name, Kafka name,
//! type, range, default, doc), read from a TOML file, a `KEEL_`-prefixed environment variable
//! or a command-line flag (flag > env > file > default) and checked there by kind;
//! [`BrokerConfig::from_settings`] types the result and checks the rules that tie several
//! keys together or belong to the log. Bad configs fail at start with one line naming the key
//! ([`ConfigError`]).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use keel_runtime::LogFormat;
pub use keel_runtime::settings::ConfigError;
use keel_runtime::settings::listeners::{self, Listener};
use keel_runtime::settings::{QuorumContact, Settings, parse_host_port};

/// The broker's settings, after merging file, environment and flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerConfig {
    /// This broker's id (Kafka: `node.id`), >= 0.
    pub node_id: i32,
    /// How to reach the controllers: the static voters (Kafka: `controller.quorum.voters`), by
    /// node id, or bootstrap servers to ask for them (`controller.quorum.bootstrap.servers`,
    /// KIP-853; see [`crate::lifecycle::bootstrap`]).
    pub controller_quorum: QuorumContact,
    /// Address the broker's gRPC listener binds (the `GRPC` entry of Kafka's `listeners`, or
    /// its bare `ip:port` form), `ip:port`. Default `0.0.0.0:9092`.
    pub listeners: SocketAddr,
    /// Address clients and other brokers use to reach the gRPC listener (Kafka:
    /// `advertised.listeners`), `host:port`. Defaults to the bind address unless that binds
    /// every interface (then it is required).
    pub advertised_listeners: String,
    /// The Kafka-protocol listener (the `PLAINTEXT`, `SSL`, `SASL_PLAINTEXT` or `SASL_SSL`
    /// entry of `listeners`), if
    /// configured.
    pub kafka_listener: Option<KafkaListener>,
    /// Metadata requests on the Kafka listener create unknown topics (Kafka:
    /// `auto.create.topics.enable`, default true there; false here, so a typo in a topic
    /// name does not create a topic).
    pub auto_create_topics_enable: bool,
    /// The group coordinator's settings (`offsets_topic_*`, `group_*`,
    /// `offset_metadata_max_bytes`; Kafka's `offsets.*` and `group.*`).
    pub group_coordinator: crate::group::CoordinatorConfig,
    /// The data directory (config key `log_dirs`, Kafka: `log.dirs`): every partition and
    /// the local metadata snapshot (`<dir>/__cluster_metadata/metadata.snap`) live here.
    /// Exactly one directory: several (Kafka's JBOD) are refused at start rather than
    /// silently left unused.
    pub log_dir: PathBuf,
    /// Rack of this broker (Kafka: `broker.rack`), if any.
    pub rack: Option<String>,
    /// Interval between heartbeats to the active controller, ms (Kafka:
    /// `broker.heartbeat.interval.ms`, 2000).
    pub broker_heartbeat_interval_ms: u64,
    /// The controller fences a broker silent for this long, ms (Kafka:
    /// `broker.session.timeout.ms`, 9000). The broker also uses it to bound a controlled
    /// shutdown, like Kafka's `BrokerServer.shutdown`.
    pub broker_session_timeout_ms: u64,
    /// A follower not caught up for this long leaves the ISR, ms (Kafka:
    /// `replica.lag.time.max.ms`, 30000).
    pub replica_lag_time_max_ms: u64,
    /// Cluster default of `min.insync.replicas` (Kafka: `min.insync.replicas`, 1); topic
    /// configs override it.
    pub min_insync_replicas: u32,
    /// Interval between writes of the local metadata snapshot, ms (Kafka:
    /// `metadata.log.max.snapshot.interval.ms`, which is 1 h; Keel defaults to 60000 so a
    /// restart replays at most a minute of metadata). Written only when the image changed,
    /// and always on shutdown.
    pub metadata_snapshot_interval_ms: u64,
    /// Default `segment.bytes` of partition logs, bytes (Kafka: `log.segment.bytes`, 1 GiB);
    /// topics override it.
    pub log_segment_bytes: u64,
    /// Default `retention.ms`, ms; `None` = keep forever (Kafka: `log.retention.ms`, 7 days;
    /// -1 = forever).
    pub log_retention_ms: Option<i64>,
    /// Default `retention.bytes` per partition, bytes; `None` = unbounded (Kafka:
    /// `log.retention.bytes`, -1).
    pub log_retention_bytes: Option<u64>,
    /// Default `compression.type` (Kafka: `compression.type`, `producer`): `None` keeps each
    /// batch's codec, a codec makes leaders recompress batches sent with another.
    pub compression_type: Option<keel_record::compression::CompressionType>,
    /// Default `message.timestamp.type` is `LogAppendTime` (Kafka:
    /// `log.message.timestamp.type`, `CreateTime`).
    pub log_append_time: bool,
    /// fdatasync after this many records; `None` = never force, rely on replication and the
    /// page cache (Kafka: `log.flush.interval.messages`, Long.MAX_VALUE). 1 = every append.
    pub log_flush_interval_messages: Option<u64>,
    /// fdatasync a partition log whose last flush is this old, ms, checked every 10 ms and on
    /// append; `None` = never (Kafka: `log.flush.interval.ms`, unset).
    pub log_flush_interval_ms: Option<u64>,
    /// Bytes of each partition's newest data kept in the page cache; older written data is
    /// written back and dropped from it ([`crate::log::cache_behind`]); `None` (0 in the
    /// file) = keep every written page, as Kafka does. Default 32 MiB, at least 1 MiB.
    pub log_drop_cache_behind_bytes: Option<u64>,
    /// How often the log cleaner looks for a compacted log to clean, ms (Kafka:
    /// `log.cleaner.backoff.ms`, 15000).
    pub log_cleaner_backoff_ms: u64,
    /// Memory of the log cleaner's offset map, bytes (Kafka:
    /// `log.cleaner.dedupe.buffer.size`, 128 MiB).
    pub log_cleaner_dedupe_buffer_size: u64,
    /// Threads opening the partition logs at start, 1..=256 (Kafka:
    /// `num.recovery.threads.per.data.dir`, 2).
    pub num_recovery_threads_per_data_dir: u32,
    /// Optional offset-lag bound of ISR membership (Kafka's removed
    /// `replica.lag.max.messages`); `None` (default) = the time rule only. For deterministic
    /// experiments like seed 000's lab.
    pub replica_lag_max_messages: Option<u64>,
    /// Follower fetch long-poll wait, ms (Kafka: `replica.fetch.wait.max.ms`, 500).
    pub replica_fetch_wait_max_ms: u64,
    /// Incremental fetch sessions this broker keeps as a leader, 0..=100,000 (Kafka:
    /// `max.incremental.fetch.session.cache.slots`, 1000; KIP-227); 0 = sessionless fetches.
    pub max_incremental_fetch_session_cache_slots: u32,
    /// Address of the HTTP listener serving `/metrics`, `/health/live` and `/health/ready`,
    /// `ip:port`; `None` (unset) = no such listener.
    pub metrics_listener: Option<SocketAddr>,
    /// Log line format (`text` or `json`).
    pub log_format: LogFormat,
    /// TLS on the gRPC listener and on every connection this node opens (`tls_cert_file`,
    /// `tls_key_file`, `tls_ca_file`, `ssl_client_auth`); `None` = plaintext.
    pub tls: Option<keel_runtime::tls::NodeTls>,
    /// Request authorization (`authorizer`, `super_users`, `allow_everyone_if_no_acl_found`,
    /// `ssl_principal_mapping_rules`, `node_principal_format`; [`crate::access`]).
    pub authz: keel_metadata_log::authz::Authz,
}

/// The Kafka wire-protocol listener ([`crate::kafka`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaListener {
    /// Listener name, registered with the controllers and matched by Metadata requests
    /// arriving on it (`PLAINTEXT`).
    pub name: String,
    /// Address to bind, `ip:port`.
    pub bind: SocketAddr,
    /// Host clients connect to (advertised).
    pub advertised_host: String,
    /// Port clients connect to (advertised), 1..=65535.
    pub advertised_port: u16,
    /// An `SSL` or `SASL_SSL` listener (Kafka's wire protocol over TLS with the node's
    /// certificate and `ssl_client_auth`).
    pub tls: bool,
    /// A `SASL_PLAINTEXT` or `SASL_SSL` listener: every connection authenticates with
    /// SASL/SCRAM first ([`crate::kafka::sasl`]).
    pub sasl: bool,
}

/// The listeners (bind list, advertised list) as the broker uses them: the gRPC bind address,
/// its advertised `host:port`, and the Kafka listener if any. Advertised entries must name a
/// bound listener; a listener without one advertises its bind address, which must then not
/// be a wildcard (Kafka: `KafkaConfig.effectiveAdvertisedBrokerListeners`).
fn resolve_listeners(
    binds: Option<&str>,
    advertised: Option<&str>,
) -> Result<(SocketAddr, String, Option<KafkaListener>), ConfigError> {
    let invalid = |key: &'static str| move |reason: String| ConfigError::Invalid { key, reason };
    let binds = match binds {
        Some(b) => listeners::parse_listeners(b, true).map_err(invalid("listeners"))?,
        None => listeners::parse_listeners("0.0.0.0:9092", true).map_err(invalid("listeners"))?,
    };
    let advertised = match advertised {
        Some(a) => listeners::parse_listeners(a, false).map_err(invalid("advertised_listeners"))?,
        None => Vec::new(),
    };
    if let Some(a) = advertised
        .iter()
        .find(|a| listeners::find(&binds, &a.name).is_none())
    {
        return Err(ConfigError::Invalid {
            key: "advertised_listeners",
            reason: format!("{a} names a listener that listeners does not bind"),
        });
    }
    let advertised_of = |l: &Listener| -> Result<(SocketAddr, String, u16), ConfigError> {
        let bind = l.bind_addr().map_err(invalid("listeners"))?;
        match listeners::find(&advertised, &l.name) {
            Some(a) => Ok((bind, a.host.clone(), a.port)),
            None if bind.ip().is_unspecified() => Err(ConfigError::Invalid {
                key: "advertised_listeners",
                reason: format!(
                    "required for the {} listener, which binds every interface ({bind})",
                    l.name
                ),
            }),
            None => Ok((bind, bind.ip().to_string(), bind.port())),
        }
    };
    let Some(grpc) = listeners::find(&binds, listeners::GRPC) else {
        return Err(ConfigError::Invalid {
            key: "listeners",
            reason: "a broker needs a GRPC listener (Keel's clients and the replication \
                     between brokers use it)"
                .into(),
        });
    };
    let (grpc_bind, host, port) = advertised_of(grpc)?;
    let grpc_advertised = Listener {
        name: grpc.name.clone(),
        host,
        port,
    }
    .host_port();
    let kafka_binds: Vec<&Listener> = listeners::KAFKA
        .iter()
        .filter_map(|n| listeners::find(&binds, n))
        .collect();
    if kafka_binds.len() > 1 {
        let names: Vec<&str> = kafka_binds.iter().map(|l| l.name.as_str()).collect();
        return Err(ConfigError::Invalid {
            key: "listeners",
            reason: format!(
                "one Kafka listener per broker, PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL \
                 (several at once, here {}, are not supported yet)",
                names.join(" and ")
            ),
        });
    }
    let kafka = match kafka_binds.first() {
        Some(l) => {
            let (bind, advertised_host, advertised_port) = advertised_of(l)?;
            Some(KafkaListener {
                name: l.name.clone(),
                bind,
                advertised_host,
                advertised_port,
                tls: l.name == listeners::SSL || l.name == listeners::SASL_SSL,
                sasl: l.name == listeners::SASL_PLAINTEXT || l.name == listeners::SASL_SSL,
            })
        }
        None => None,
    };
    Ok((grpc_bind, grpc_advertised, kafka))
}

impl BrokerConfig {
    /// Types the validated settings and checks the rules between keys. `advertised_listeners`
    /// defaults to `listeners` unless that binds every interface.
    pub fn from_settings(s: &Settings) -> Result<Self, ConfigError> {
        let node_id: i32 = s.require("node_id");
        let controller_quorum = QuorumContact::from_settings(s)?;
        let dirs_str: String = s.require("log_dirs");
        let log_dirs: Vec<PathBuf> = dirs_str
            .split(',')
            .map(str::trim)
            .filter(|d| !d.is_empty())
            .map(PathBuf::from)
            .collect();
        let log_dir = match <[PathBuf; 1]>::try_from(log_dirs) {
            Ok([dir]) => dir,
            Err(dirs) if dirs.is_empty() => {
                return Err(ConfigError::Invalid {
                    key: "log_dirs",
                    reason: "no directory given".into(),
                });
            }
            Err(dirs) => {
                return Err(ConfigError::Invalid {
                    key: "log_dirs",
                    reason: format!(
                        "{} directories given; Keel keeps all partitions in one directory \
                         (several log dirs, Kafka's JBOD, are not supported): give exactly one",
                        dirs.len()
                    ),
                });
            }
        };
        let (listeners, advertised_listeners, kafka_listener) = resolve_listeners(
            s.get::<String>("listeners").as_deref(),
            s.get::<String>("advertised_listeners").as_deref(),
        )?;
        let cfg = BrokerConfig {
            node_id,
            controller_quorum,
            listeners,
            advertised_listeners,
            kafka_listener,
            auto_create_topics_enable: s.require("auto_create_topics_enable"),
            group_coordinator: crate::group::CoordinatorConfig {
                offsets_topic_num_partitions: s.require("offsets_topic_num_partitions"),
                offsets_topic_replication_factor: s
                    .require::<i32>("offsets_topic_replication_factor")
                    .clamp(1, i16::MAX.into())
                    as i16,
                offsets_topic_segment_bytes: s.require("offsets_topic_segment_bytes"),
                offsets_retention_ms: i64::from(s.require::<i32>("offsets_retention_minutes"))
                    * 60_000,
                offsets_retention_check_interval_ms: s
                    .require("offsets_retention_check_interval_ms"),
                offset_metadata_max_bytes: s.require::<i32>("offset_metadata_max_bytes").max(0)
                    as usize,
                group: crate::group::state::GroupConfig {
                    min_session_timeout_ms: s.require("group_min_session_timeout_ms"),
                    max_session_timeout_ms: s.require("group_max_session_timeout_ms"),
                    initial_rebalance_delay_ms: s.require("group_initial_rebalance_delay_ms"),
                    max_size: s.require::<i32>("group_max_size").max(1) as usize,
                },
                ..Default::default()
            },
            log_dir,
            rack: s.get::<String>("rack").filter(|r| !r.is_empty()),
            broker_heartbeat_interval_ms: s.require("broker_heartbeat_interval_ms"),
            broker_session_timeout_ms: s.require("broker_session_timeout_ms"),
            replica_lag_time_max_ms: s.require("replica_lag_time_max_ms"),
            min_insync_replicas: s.require("min_insync_replicas"),
            metadata_snapshot_interval_ms: s.require("metadata_snapshot_interval_ms"),
            log_segment_bytes: s.require("log_segment_bytes"),
            // -1 = forever / unbounded.
            log_retention_ms: Some(s.require::<i64>("log_retention_ms")).filter(|v| *v >= 0),
            log_retention_bytes: u64::try_from(s.require::<i64>("log_retention_bytes")).ok(),
            // The settings layer checked the value against the same choices.
            compression_type: crate::replica_manager::topic_config::compression_type(
                &s.require::<String>("compression_type"),
            )
            .flatten(),
            log_append_time: s.require::<String>("log_message_timestamp_type") == "LogAppendTime",
            log_flush_interval_messages: s.get("log_flush_interval_messages"),
            log_flush_interval_ms: s.get("log_flush_interval_ms"),
            // 0 = keep every written page.
            log_drop_cache_behind_bytes: Some(s.require::<u64>("log_drop_cache_behind_bytes"))
                .filter(|b| *b > 0),
            log_cleaner_backoff_ms: s.require("log_cleaner_backoff_ms"),
            log_cleaner_dedupe_buffer_size: s.require("log_cleaner_dedupe_buffer_size"),
            num_recovery_threads_per_data_dir: s.require("num_recovery_threads_per_data_dir"),
            replica_lag_max_messages: s.get("replica_lag_max_messages"),
            replica_fetch_wait_max_ms: s.require("replica_fetch_wait_max_ms"),
            max_incremental_fetch_session_cache_slots: s
                .require("max_incremental_fetch_session_cache_slots"),
            metrics_listener: s.get("metrics_listener"),
            log_format: s.require("log_format"),
            tls: keel_runtime::tls::NodeTls::of(s)?,
            authz: keel_metadata_log::authz::Authz::from_settings(s)?,
        };
        if let Some(k) = cfg.kafka_listener.as_ref().filter(|k| k.tls)
            && cfg.tls.is_none()
        {
            return Err(ConfigError::Invalid {
                key: "listeners",
                reason: format!(
                    "the {} listener needs tls_cert_file, tls_key_file and tls_ca_file",
                    k.name
                ),
            });
        }
        cfg.validate()?;
        Ok(cfg)
    }

    /// The rules between keys and those of the log's own validation (each key's own range
    /// is checked by the settings layer).
    fn validate(&self) -> Result<(), ConfigError> {
        if self.replica_fetch_wait_max_ms >= self.replica_lag_time_max_ms {
            return Err(ConfigError::Invalid {
                key: "replica_fetch_wait_max_ms",
                reason: format!(
                    "{} must be below replica_lag_time_max_ms ({}), or idle followers drop \
                     out of the ISR",
                    self.replica_fetch_wait_max_ms, self.replica_lag_time_max_ms
                ),
            });
        }
        if let Err(e) = self.log_config().validate() {
            // Name the broker key that set the log default Kafka's key names.
            let (key, reason) = match e {
                crate::log::LogError::InvalidConfig { key, reason } => {
                    let key = match key {
                        "segment.bytes" => "log_segment_bytes",
                        "retention.ms" => "log_retention_ms",
                        "retention.bytes" => "log_retention_bytes",
                        "flush.messages" => "log_flush_interval_messages",
                        "flush.ms" => "log_flush_interval_ms",
                        other => other,
                    };
                    (key, reason)
                }
                other => ("log_segment_bytes", other.to_string()),
            };
            return Err(ConfigError::Invalid { key, reason });
        }
        if self.broker_session_timeout_ms <= self.broker_heartbeat_interval_ms {
            return Err(ConfigError::Invalid {
                key: "broker_session_timeout_ms",
                reason: format!(
                    "{} must exceed broker_heartbeat_interval_ms ({})",
                    self.broker_session_timeout_ms, self.broker_heartbeat_interval_ms
                ),
            });
        }
        Ok(())
    }

    /// Default settings of partition logs (topics override them).
    pub fn log_config(&self) -> crate::log::LogConfig {
        crate::log::LogConfig {
            segment_bytes: self.log_segment_bytes,
            retention_ms: self.log_retention_ms,
            retention_bytes: self.log_retention_bytes,
            flush_interval_messages: self.log_flush_interval_messages,
            flush_interval_ms: self
                .log_flush_interval_ms
                .map(|ms| ms.min(i64::MAX as u64) as i64),
            drop_cache_behind_bytes: self.log_drop_cache_behind_bytes,
            compression: self.compression_type,
            log_append_time: self.log_append_time,
            ..crate::log::LogConfig::default()
        }
    }

    /// The advertised listener as `(host, port)`.
    pub fn advertised_host_port(&self) -> (String, u16) {
        parse_host_port(&self.advertised_listeners).expect("validated in resolve")
    }

    /// Directory of the local metadata snapshot: `<log dir>/__cluster_metadata`. The
    /// name has no `-<partition>` suffix, so the log manager's directory scan never takes it
    /// for a partition.
    pub fn metadata_dir(&self) -> PathBuf {
        self.log_dir.join("__cluster_metadata")
    }
}

/// Parses `controller_quorum_voters` ([`keel_proto::voters::parse_voters`]); errors name
/// the key.
pub fn parse_voters(s: &str) -> Result<BTreeMap<u64, String>, ConfigError> {
    keel_proto::voters::parse_voters(s).map_err(|reason| ConfigError::Invalid {
        key: "controller_quorum_voters",
        reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    use keel_runtime::settings::{Binary, DefaultValue, Layer, SETTINGS, Schema};

    fn schema() -> Schema {
        Schema::of(Binary::Broker)
    }

    fn raw(toml_text: &str) -> Layer {
        schema().parse_toml(toml_text).unwrap()
    }

    trait Resolve {
        fn resolve(self) -> Result<BrokerConfig, ConfigError>;
    }

    impl Resolve for Layer {
        fn resolve(self) -> Result<BrokerConfig, ConfigError> {
            BrokerConfig::from_settings(&schema().resolve(self)?)
        }
    }

    /// A config with only the required keys (and a listener on one interface).
    const MINIMAL: &str = "node_id = 4\ncontroller_quorum_voters = \"1@127.0.0.1:9093\"\n\
                           log_dirs = \"/tmp/a\"\nlisteners = \"127.0.0.1:9092\"\n";

    #[test]
    fn every_declared_key_is_read() {
        let settings = schema().resolve(raw(MINIMAL)).unwrap();
        BrokerConfig::from_settings(&settings).unwrap();
        assert_eq!(
            settings.unread(),
            Vec::<&str>::new(),
            "keys declared for this binary (runtime/src/settings/keys.rs) but never read by \
             from_settings"
        );
    }

    #[test]
    fn declared_defaults_match_the_code_they_configure() {
        let declared = |name: &str| SETTINGS.iter().find(|s| s.name == name).unwrap().default;
        let log = crate::log::LogConfig::default();
        assert_eq!(
            declared("log_drop_cache_behind_bytes"),
            DefaultValue::Int(log.drop_cache_behind_bytes.unwrap().into())
        );
        assert_eq!(
            declared("num_recovery_threads_per_data_dir"),
            DefaultValue::Int(crate::log::DEFAULT_RECOVERY_THREADS.into())
        );
        assert_eq!(
            declared("max_incremental_fetch_session_cache_slots"),
            DefaultValue::Int(crate::replica_manager::fetch_session::MAX_SESSIONS as i128)
        );
        assert_eq!(
            declared("log_cleaner_backoff_ms"),
            DefaultValue::Int(crate::replica_manager::cleaning::CLEANER_BACKOFF_MS.into())
        );
        assert_eq!(
            declared("log_cleaner_dedupe_buffer_size"),
            DefaultValue::Int(
                crate::log::CleanerConfig::default()
                    .dedupe_buffer_bytes
                    .into()
            )
        );
    }

    const BASE: &str =
        "node_id = 4\ncontroller_quorum_voters = \"1@127.0.0.1:9093\"\nlog_dirs = \"/tmp/a\"\n";

    #[test]
    fn named_listeners_give_the_grpc_and_kafka_listeners() {
        let c = raw(&format!(
            "{BASE}listeners = \"GRPC://127.0.0.1:9192,PLAINTEXT://:9092\"\n\
             advertised_listeners = \"PLAINTEXT://broker-4:9092\"\n"
        ))
        .resolve()
        .unwrap();
        assert_eq!(c.listeners.to_string(), "127.0.0.1:9192");
        assert_eq!(c.advertised_listeners, "127.0.0.1:9192");
        let k = c.kafka_listener.unwrap();
        assert_eq!(
            (
                k.name.as_str(),
                k.bind.to_string(),
                k.advertised_host.as_str(),
                k.advertised_port
            ),
            ("PLAINTEXT", "0.0.0.0:9092".to_string(), "broker-4", 9092)
        );
        // The bare form is the gRPC listener alone.
        let c = raw(&format!("{BASE}listeners = \"127.0.0.1:9092\"\n"))
            .resolve()
            .unwrap();
        assert_eq!(c.kafka_listener, None);
        for (toml, needle) in [
            (
                "listeners = \"PLAINTEXT://127.0.0.1:9092\"",
                "invalid value for listeners: a broker needs a GRPC listener",
            ),
            (
                "listeners = \"GRPC://127.0.0.1:1,PLAINTEXT://:2\"",
                "invalid value for advertised_listeners: required for the PLAINTEXT listener",
            ),
            (
                "listeners = \"GRPC://127.0.0.1:1\"\nadvertised_listeners = \"PLAINTEXT://h:2\"",
                "invalid value for advertised_listeners: PLAINTEXT://h:2 names a listener",
            ),
            (
                "listeners = \"GRPC://127.0.0.1:1,SASL_GSSAPI://127.0.0.1:2\"",
                "invalid value for listeners: unknown listener name \"SASL_GSSAPI\"",
            ),
            (
                "listeners = \"GRPC://127.0.0.1:1,SASL_SSL://127.0.0.1:2\"",
                "invalid value for listeners: the SASL_SSL listener needs tls_cert_file",
            ),
            (
                "listeners = \"GRPC://127.0.0.1:1,SASL_PLAINTEXT://127.0.0.1:2,SSL://127.0.0.1:3\"",
                "invalid value for listeners: one Kafka listener per broker",
            ),
            (
                "listeners = \"GRPC://127.0.0.1:1,SSL://127.0.0.1:2\"",
                "invalid value for listeners: the SSL listener needs tls_cert_file",
            ),
            (
                "listeners = \"GRPC://127.0.0.1:1,SSL://127.0.0.1:2,PLAINTEXT://127.0.0.1:3\"",
                "invalid value for listeners: one Kafka listener per broker",
            ),
        ] {
            let e = raw(&format!("{BASE}{toml}\n"))
                .resolve()
                .unwrap_err()
                .to_string();
            assert!(e.starts_with(needle), "{toml}: {e}");
        }
    }

    #[test]
    fn resolves_with_defaults_and_overlays_in_order() {
        let mut r = raw(&format!("{BASE}listeners = \"127.0.0.1:9092\"\n"));
        r.overlay(raw("broker_session_timeout_ms = 3000\nrack = \"r1\""));
        let c = r.resolve().unwrap();
        assert_eq!(c.node_id, 4);
        assert_eq!(c.advertised_listeners, "127.0.0.1:9092");
        assert_eq!(c.advertised_host_port(), ("127.0.0.1".to_string(), 9092u16));
        assert_eq!(c.log_dir, PathBuf::from("/tmp/a"));
        assert_eq!(c.metadata_dir(), PathBuf::from("/tmp/a/__cluster_metadata"));
        assert_eq!(c.broker_session_timeout_ms, 3000);
        assert_eq!(c.broker_heartbeat_interval_ms, 2000);
        assert_eq!(c.replica_lag_time_max_ms, 30_000);
        assert_eq!(c.min_insync_replicas, 1);
        assert_eq!(c.rack.as_deref(), Some("r1"));
        assert_eq!(c.log_segment_bytes, 1 << 30);
        assert_eq!(c.log_retention_ms, Some(604_800_000));
        assert_eq!(c.log_retention_bytes, None);
        assert_eq!(c.log_flush_interval_messages, None);
        assert_eq!(c.replica_fetch_wait_max_ms, 500);
        let forever = raw(&format!(
            "{BASE}listeners = \"127.0.0.1:9092\"\nlog_retention_ms = -1\nlog_retention_bytes = 1000000"
        ))
        .resolve()
        .unwrap();
        assert_eq!(forever.log_config().retention_ms, None);
        assert_eq!(forever.log_config().retention_bytes, Some(1_000_000));
    }

    #[test]
    fn drop_cache_behind_defaults_to_32_mib_and_0_turns_it_off() {
        let base = format!("{BASE}listeners = \"127.0.0.1:9092\"\n");
        let c = raw(&base).resolve().unwrap();
        assert_eq!(c.log_config().drop_cache_behind_bytes, Some(32 << 20));
        let c = raw(&format!("{base}log_drop_cache_behind_bytes = 0\n"))
            .resolve()
            .unwrap();
        assert_eq!(c.log_config().drop_cache_behind_bytes, None);
        let c = raw(&format!("{base}log_drop_cache_behind_bytes = 8388608\n"))
            .resolve()
            .unwrap();
        assert_eq!(c.log_config().drop_cache_behind_bytes, Some(8 << 20));
        let e = raw(&format!("{base}log_drop_cache_behind_bytes = 4096\n"))
            .resolve()
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("invalid value for log_drop_cache_behind_bytes: must be at least")
                && e.contains("1 MiB"),
            "{e}"
        );
    }

    /// Kafka's static `compression.type` and `log.message.timestamp.type`: the log default
    /// every topic without an override (topic or dynamic) gets, and DescribeConfigs' static
    /// value.
    #[test]
    fn compression_and_timestamp_type_defaults() {
        use keel_record::compression::CompressionType;
        let base = format!("{BASE}listeners = \"127.0.0.1:9092\"\n");
        let c = raw(&base).resolve().unwrap();
        assert_eq!(
            (c.log_config().compression, c.log_config().log_append_time),
            (None, false)
        );
        let c = raw(&format!(
            "{base}compression_type = \"zstd\"\nlog_message_timestamp_type = \"LogAppendTime\"\n"
        ))
        .resolve()
        .unwrap();
        assert_eq!(c.log_config().compression, Some(CompressionType::Zstd));
        assert!(c.log_config().log_append_time);
        let statics = crate::kafka::admin::static_broker_configs(&c);
        let value = |name: &str| {
            statics
                .iter()
                .find(|e| e.broker_name == name)
                .map(|e| e.value.clone())
        };
        assert_eq!(value("compression.type").as_deref(), Some("zstd"));
        assert_eq!(
            value("log.message.timestamp.type").as_deref(),
            Some("LogAppendTime")
        );
        for (extra, key) in [
            ("compression_type = \"ZSTD\"", "compression_type"),
            (
                "log_message_timestamp_type = \"createtime\"",
                "log_message_timestamp_type",
            ),
        ] {
            let e = raw(&format!("{base}{extra}\n")).resolve().unwrap_err();
            assert!(
                e.to_string()
                    .starts_with(&format!("invalid value for {key}: ")),
                "{e}"
            );
        }
    }

    #[test]
    fn metrics_listener_and_log_format() {
        let base = format!("{BASE}listeners = \"127.0.0.1:9092\"\n");
        let c = raw(&base).resolve().unwrap();
        assert_eq!((c.metrics_listener, c.log_format), (None, LogFormat::Text));
        let c = raw(&format!(
            "{base}metrics_listener = \"0.0.0.0:9404\"\nlog_format = \"json\"\n"
        ))
        .resolve()
        .unwrap();
        assert_eq!(c.metrics_listener, Some("0.0.0.0:9404".parse().unwrap()));
        assert_eq!(c.log_format, LogFormat::Json);
        for (extra, key) in [
            ("metrics_listener = \"9404\"", "metrics_listener"),
            ("log_format = \"yaml\"", "log_format"),
        ] {
            let e = raw(&format!("{base}{extra}\n")).resolve().unwrap_err();
            assert!(
                e.to_string()
                    .starts_with(&format!("invalid value for {key}: ")),
                "{e}"
            );
        }
    }

    #[test]
    fn bad_configs_name_the_key() {
        let err = schema().parse_toml("node_idd = 1").unwrap_err();
        assert!(err.contains("node_idd"), "{err}");
        for (voters, needle) in [
            ("1@host", "has no :port"),
            ("x@h:1", "is not a node id"),
            ("1@h:99999", "is not host:port"),
            ("1@h:1,1@h:2", "appears twice"),
            ("", "no voters"),
        ] {
            let e = parse_voters(voters).unwrap_err().to_string();
            assert!(
                e.starts_with("invalid value for controller_quorum_voters: "),
                "{e}"
            );
            assert!(e.contains(needle), "{voters:?}: {e}");
        }
        let cases = [
            (
                format!("{BASE}listeners = \"nope\""),
                "invalid value for listeners: ",
            ),
            (
                BASE.to_string(),
                "invalid value for advertised_listeners: required",
            ),
            (
                format!("{BASE}advertised_listeners = \"h\""),
                "invalid value for advertised_listeners: ",
            ),
            (
                "node_id = -1\ncontroller_quorum_voters = \"1@h:1\"\nlog_dirs = \"d\"".into(),
                "invalid value for node_id: ",
            ),
            (
                format!(
                    "{BASE}listeners = \"127.0.0.1:1\"\nbroker_heartbeat_interval_ms = 10\nbroker_session_timeout_ms = 10"
                ),
                "invalid value for broker_session_timeout_ms: ",
            ),
            (
                format!("{BASE}listeners = \"127.0.0.1:1\"\nmin_insync_replicas = 0"),
                "invalid value for min_insync_replicas: ",
            ),
            (
                format!("{BASE}listeners = \"127.0.0.1:1\"\nlog_retention_ms = -5"),
                "invalid value for log_retention_ms: ",
            ),
            (
                format!("{BASE}listeners = \"127.0.0.1:1\"\nlog_flush_interval_messages = 0"),
                "invalid value for log_flush_interval_messages: ",
            ),
            (
                format!("{BASE}listeners = \"127.0.0.1:1\"\nlog_flush_interval_ms = 0"),
                "invalid value for log_flush_interval_ms: ",
            ),
            (
                format!("{BASE}listeners = \"127.0.0.1:1\"\nlog_segment_bytes = 10"),
                "invalid value for log_segment_bytes: ",
            ),
            (
                format!("{BASE}listeners = \"127.0.0.1:1\"\nreplica_fetch_wait_max_ms = 40000"),
                "invalid value for replica_fetch_wait_max_ms: ",
            ),
            (
                "node_id = 1\ncontroller_quorum_voters = \"1@h:1\"\nlog_dirs = \" , \"".into(),
                "invalid value for log_dirs: no directory given",
            ),
            (
                "node_id = 1\ncontroller_quorum_voters = \"1@h:1\"\nlog_dirs = \"/a,/b\"".into(),
                "invalid value for log_dirs: 2 directories given",
            ),
            (
                "node_id = 1\ncontroller_quorum_voters = \"1@h:1\"".into(),
                "missing required config log_dirs",
            ),
            ("log_dirs = \"d\"".into(), "missing required config node_id"),
        ];
        for (text, prefix) in cases {
            let e = raw(&text).resolve().unwrap_err().to_string();
            assert!(e.starts_with(prefix), "{text:?}: {e}");
            assert!(!e.contains('\n'), "one line: {e}");
        }
    }

    #[test]
    fn unknown_key_in_a_file_names_the_key_and_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("b.toml");
        std::fs::write(&p, format!("{BASE}bogus_key = 1\n")).unwrap();
        let e = schema().read_file(&p).unwrap_err().to_string();
        assert!(e.contains("bogus_key") && e.contains("b.toml"), "{e}");
        assert!(!e.contains('\n'), "{e}");
    }

    #[test]
    fn kafka_dotted_key_in_a_file_names_the_keel_key() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("b.toml");
        std::fs::write(&p, format!("{BASE}log.retention.bytes = 1000\n")).unwrap();
        let e = schema().read_file(&p).unwrap_err().to_string();
        assert!(
            e.contains("\"log.retention.bytes\"") && e.contains("use log_retention_bytes"),
            "{e}"
        );
        assert!(e.contains("b.toml") && !e.contains('\n'), "{e}");
    }
}
