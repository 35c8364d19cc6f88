//! Controller configuration: the typed form of the controller's settings.
//!
//! Every key is declared once in [`keel_runtime::settings::SETTINGS`] (name, Kafka name,
//! type, range, default, doc), read from a TOML file, a `KEEL_`-prefixed environment variable
//! or a command-line flag (flag > env > file > default) and checked there by kind;
//! [`ControllerConfig::from_settings`] types the result and checks the rules that tie several
//! keys together. Bad configs fail at start with one line naming the key ([`ConfigError`]).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use keel_runtime::LogFormat;
pub use keel_runtime::settings::ConfigError;
use keel_runtime::settings::{QuorumContact, Settings, listeners};

use crate::logic::TopicDefaults;

/// The controller's settings, after merging file, environment and flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerConfig {
    /// This controller's id (Kafka: `node.id`); a controller `controller_quorum_voters` does
    /// not list starts as an observer.
    pub node_id: u64,
    /// The static voter set (Kafka: `controller.quorum.voters`), by node id; empty when
    /// `controller_quorum_bootstrap_servers` is set instead (exactly one of the two is).
    pub controller_quorum_voters: BTreeMap<u64, String>,
    /// Controllers of a dynamic quorum (Kafka: `controller.quorum.bootstrap.servers`,
    /// KIP-853), `host:port`; empty with static voters. The voters come from the formatted
    /// directory and the metadata log; the list is what the observer line tells an operator
    /// to pass to `keelctl quorum add-controller`.
    pub controller_quorum_bootstrap_servers: Vec<String>,
    /// Address the gRPC listener binds (Kafka: `listeners`), `host:port`.
    pub listeners: SocketAddr,
    /// Address other nodes and clients use (Kafka: `advertised.listeners`); defaults to this
    /// node's entry in `controller_quorum_voters`.
    pub advertised_listeners: String,
    /// Directory of the Raft log and snapshots (Kafka: `metadata.log.dir`).
    pub metadata_log_dir: PathBuf,
    /// Expected interval of broker heartbeats, ms (Kafka: `broker.heartbeat.interval.ms`).
    pub broker_heartbeat_interval_ms: u64,
    /// A broker without heartbeat for this long is fenced, ms (Kafka:
    /// `broker.session.timeout.ms`).
    pub broker_session_timeout_ms: u64,
    /// Raft election timeout range, ms (Kafka: `controller.quorum.election.timeout.ms` 1000).
    /// Default 300..600 (3-6 Raft heartbeats). openraft also keeps a leader lease of
    /// `election_timeout_max_ms` during which followers refuse votes, so failover after a
    /// leader crash takes about `election_timeout_max_ms` + a random timeout in the range
    /// (0.9-1.2 s by default; measured p50 1.2 s, p99 1.4 s over 20 kills on loopback).
    pub election_timeout_min_ms: u64,
    /// Upper end of the randomized election timeout, ms.
    pub election_timeout_max_ms: u64,
    /// Raft leader heartbeat interval, ms.
    pub raft_heartbeat_interval_ms: u64,
    /// Build a snapshot after this many log entries since the last one (Kafka:
    /// `metadata.log.max.record.bytes.between.snapshots`, counted in entries here).
    pub metadata_snapshot_max_entries: u64,
    /// Size at which the Raft log starts a new segment file, bytes (Kafka:
    /// `metadata.log.segment.bytes`). Whole segments below the last snapshot are deleted, so
    /// this bounds the disk the log keeps beyond what the snapshot covers. In
    /// 4096..=1073741824; default 16 MiB. Small values are for tests.
    pub metadata_log_segment_bytes: u64,
    /// Where the Raft log and vote are stored (`metadata_log_engine`: `segments`, the
    /// default, or `sled`). A directory written by one engine is refused by the other.
    pub metadata_log_engine: keel_metadata_log::store::LogEngine,
    /// Interval of the active controller's NoOpRecords, ms (Kafka:
    /// `metadata.max.idle.interval.ms`, 500).
    pub metadata_max_idle_interval_ms: u64,
    /// Move leadership back to each partition's preferred (first) replica once it is in the
    /// ISR again (Kafka: `auto.leader.rebalance.enable`, default true).
    pub auto_leader_rebalance_enable: bool,
    /// Interval of that check, seconds (Kafka: `leader.imbalance.check.interval.seconds`,
    /// default 300). Must be > 0.
    pub leader_imbalance_check_interval_seconds: u64,
    /// Partitions of a topic created with `num_partitions` -1 (Kafka: `num.partitions`,
    /// default 1). 1..=[`crate::logic::topics::MAX_PARTITIONS_PER_TOPIC`].
    pub num_partitions: i32,
    /// Replication factor of a topic created with `replication_factor` -1 (Kafka:
    /// `default.replication.factor`, default 1). 1..=32767 (Kafka's replication factor is an
    /// int16); a creation that asks for more replicas than there are usable brokers still
    /// fails with INVALID_REPLICATION_FACTOR.
    pub default_replication_factor: i32,
    /// Address of the HTTP listener serving `/metrics`, `/health/live` and `/health/ready`,
    /// `ip:port`; `None` (unset) = no such listener.
    pub metrics_listener: Option<SocketAddr>,
    /// Log line format (`text` or `json`).
    pub log_format: LogFormat,
    /// TLS on the gRPC listener and on every connection this node opens (`tls_cert_file`,
    /// `tls_key_file`, `tls_ca_file`, `ssl_client_auth`); `None` = plaintext.
    pub tls: Option<keel_runtime::tls::NodeTls>,
    /// Request authorization (`authorizer`, `super_users`, `allow_everyone_if_no_acl_found`,
    /// `ssl_principal_mapping_rules`, `node_principal_format`).
    pub authz: keel_metadata_log::authz::Authz,
}

impl ControllerConfig {
    /// Types the validated settings and checks the rules between keys. `listeners` defaults to
    /// every interface at this node's voter port, `advertised_listeners` to its voter entry.
    pub fn from_settings(s: &Settings) -> Result<Self, ConfigError> {
        let node_id: u64 = s.require("node_id");
        let contact = QuorumContact::from_settings(s)?;
        let controller_quorum_voters = contact.voters();
        let controller_quorum_bootstrap_servers = match &contact {
            QuorumContact::Bootstrap(b) => b.clone(),
            QuorumContact::Voters(_) => Vec::new(),
        };
        // A node the list does not name starts as an observer, to be added as a voter with
        // `keelctl quorum add-controller` (KIP-853); it must say where it listens. So must
        // every controller of a dynamic quorum (no list to take its address from).
        let own = controller_quorum_voters.get(&node_id);
        let no_listeners = s.get::<String>("listeners").is_none()
            || s.get::<String>("advertised_listeners").is_none();
        if own.is_none() && no_listeners {
            return Err(match &contact {
                QuorumContact::Voters(_) => ConfigError::Invalid {
                    key: "controller_quorum_voters",
                    reason: format!(
                        "node_id {node_id} is not one of the voters {:?}; to start it as an \
                         observer that keelctl quorum add-controller can add, set listeners \
                         and advertised_listeners",
                        s.get::<String>("controller_quorum_voters")
                            .unwrap_or_default()
                    ),
                },
                QuorumContact::Bootstrap(_) => ConfigError::Missing {
                    key: if s.get::<String>("listeners").is_none() {
                        "listeners (a controller with controller_quorum_bootstrap_servers has \
                         no voter entry to take it from; set listeners and advertised_listeners)"
                    } else {
                        "advertised_listeners (a controller with \
                         controller_quorum_bootstrap_servers has no voter entry to take it from)"
                    },
                },
            });
        }
        let listeners = match s.get::<String>("listeners") {
            Some(l) => listeners::grpc_only(&l, true)
                .and_then(|l| l.bind_addr())
                .map_err(|reason| ConfigError::Invalid {
                    key: "listeners",
                    reason,
                })?,
            None => {
                // Every interface at the voter entry's port.
                let port = own
                    .and_then(|o| o.rsplit_once(':'))
                    .map_or("9093", |(_, p)| p);
                let l = format!("0.0.0.0:{port}");
                l.parse().map_err(|e| ConfigError::Invalid {
                    key: "listeners",
                    reason: format!("{l:?} is not an ip:port address ({e})"),
                })?
            }
        };
        let advertised_listeners = match s.get::<String>("advertised_listeners") {
            Some(a) => listeners::grpc_only(&a, false)
                .map_err(|reason| ConfigError::Invalid {
                    key: "advertised_listeners",
                    reason,
                })?
                .host_port(),
            None => own.cloned().unwrap_or_default(),
        };
        let cfg = ControllerConfig {
            node_id,
            listeners,
            advertised_listeners,
            controller_quorum_voters,
            controller_quorum_bootstrap_servers,
            metadata_log_dir: s.require("metadata_log_dir"),
            broker_heartbeat_interval_ms: s.require("broker_heartbeat_interval_ms"),
            broker_session_timeout_ms: s.require("broker_session_timeout_ms"),
            election_timeout_min_ms: s.require("election_timeout_min_ms"),
            election_timeout_max_ms: s.require("election_timeout_max_ms"),
            raft_heartbeat_interval_ms: s.require("raft_heartbeat_interval_ms"),
            metadata_snapshot_max_entries: s.require("metadata_snapshot_max_entries"),
            metadata_log_segment_bytes: s.require("metadata_log_segment_bytes"),
            metadata_log_engine: s.require("metadata_log_engine"),
            metadata_max_idle_interval_ms: s.require("metadata_max_idle_interval_ms"),
            auto_leader_rebalance_enable: s.require("auto_leader_rebalance_enable"),
            leader_imbalance_check_interval_seconds: s
                .require("leader_imbalance_check_interval_seconds"),
            num_partitions: s.require("num_partitions"),
            default_replication_factor: s.require("default_replication_factor"),
            metrics_listener: s.get("metrics_listener"),
            log_format: s.require("log_format"),
            tls: keel_runtime::tls::NodeTls::of(s)?,
            authz: keel_metadata_log::authz::Authz::from_settings(s)?,
        };
        cfg.validate()?;
        Ok(cfg)
    }

    /// The rules between keys (each key's own range is checked by the settings layer).
    fn validate(&self) -> Result<(), ConfigError> {
        if self.broker_session_timeout_ms <= self.broker_heartbeat_interval_ms {
            return Err(ConfigError::Invalid {
                key: "broker_session_timeout_ms",
                reason: format!(
                    "{} must exceed broker_heartbeat_interval_ms ({})",
                    self.broker_session_timeout_ms, self.broker_heartbeat_interval_ms
                ),
            });
        }
        if self.election_timeout_min_ms <= self.raft_heartbeat_interval_ms
            || self.election_timeout_max_ms <= self.election_timeout_min_ms
        {
            return Err(ConfigError::Invalid {
                key: "election_timeout_min_ms",
                reason: format!(
                    "need raft_heartbeat_interval_ms ({}) < election_timeout_min_ms ({}) < election_timeout_max_ms ({})",
                    self.raft_heartbeat_interval_ms,
                    self.election_timeout_min_ms,
                    self.election_timeout_max_ms
                ),
            });
        }
        Ok(())
    }

    /// What CreateTopics uses for -1 (`num_partitions`, `default_replication_factor`).
    pub fn topic_defaults(&self) -> TopicDefaults {
        TopicDefaults {
            num_partitions: self.num_partitions,
            replication_factor: self.default_replication_factor,
        }
    }

    /// This node's advertised address, `host:port`.
    pub fn own_address(&self) -> &str {
        &self.advertised_listeners
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

    use keel_runtime::settings::{Binary, Layer, Schema};

    fn schema() -> Schema {
        Schema::of(Binary::Controller)
    }

    fn raw(toml_text: &str) -> Layer {
        schema().parse_toml(toml_text).unwrap()
    }

    trait Resolve {
        fn resolve(self) -> Result<ControllerConfig, ConfigError>;
    }

    impl Resolve for Layer {
        fn resolve(self) -> Result<ControllerConfig, ConfigError> {
            ControllerConfig::from_settings(&schema().resolve(self)?)
        }
    }

    /// A config with only the required keys.
    const MINIMAL: &str = "node_id = 1\ncontroller_quorum_voters = \"1@127.0.0.1:9093\"\n\
                           metadata_log_dir = \"/tmp/x\"\n";

    #[test]
    fn every_declared_key_is_read() {
        let settings = schema().resolve(raw(MINIMAL)).unwrap();
        ControllerConfig::from_settings(&settings).unwrap();
        assert_eq!(
            settings.unread(),
            Vec::<&str>::new(),
            "keys declared for this binary (runtime/src/settings/keys.rs) but never read by \
             from_settings"
        );
    }

    #[test]
    fn declared_defaults_match_the_code_they_configure() {
        use keel_runtime::settings::{DefaultValue, Kind, SETTINGS};
        let declared = |name: &str| SETTINGS.iter().find(|s| s.name == name).unwrap();
        assert_eq!(
            declared("metadata_log_segment_bytes").default,
            DefaultValue::Int(keel_metadata_log::store::disk::DEFAULT_SEGMENT_BYTES.into())
        );
        assert_eq!(
            declared("metadata_log_engine").default,
            DefaultValue::Text(keel_metadata_log::store::LogEngine::default().as_str())
        );
        assert!(matches!(
            declared("num_partitions").kind,
            Kind::Int { max, .. } if max == crate::logic::topics::MAX_PARTITIONS_PER_TOPIC.into()
        ));
    }

    #[test]
    fn resolves_with_defaults_and_overlays_in_order() {
        let mut r = raw(
            "node_id = 1\ncontroller_quorum_voters = \"1@127.0.0.1:9093,2@127.0.0.1:9094\"\nmetadata_log_dir = \"/tmp/x\"\n",
        );
        r.overlay(raw("broker_session_timeout_ms = 3000"));
        let c = r.resolve().unwrap();
        assert_eq!(c.listeners, "0.0.0.0:9093".parse().unwrap());
        assert_eq!(c.advertised_listeners, "127.0.0.1:9093");
        assert_eq!(c.broker_session_timeout_ms, 3000);
        assert_eq!(c.broker_heartbeat_interval_ms, 2000);
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
        let e = raw("node_id = 3\ncontroller_quorum_voters = \"1@h:1\"\nmetadata_log_dir = \"d\"")
            .resolve()
            .unwrap_err();
        assert!(
            e.to_string().contains("node_id 3 is not one of the voters"),
            "{e}"
        );
        let e = raw("node_id = 1\ncontroller_quorum_voters = \"1@h:1\"\nmetadata_log_dir = \"d\"\nlisteners = \"nope\"")
            .resolve()
            .unwrap_err();
        assert!(
            e.to_string().starts_with("invalid value for listeners: "),
            "{e}"
        );
        let e = raw("node_id = 1\ncontroller_quorum_voters = \"1@h:1\"")
            .resolve()
            .unwrap_err();
        assert_eq!(e.to_string(), "missing required config metadata_log_dir");
        let base = "node_id = 1\ncontroller_quorum_voters = \"1@h:1\"\nmetadata_log_dir = \"d\"\n";
        let e = raw(&format!("{base}metrics_listener = \"localhost\""))
            .resolve()
            .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("invalid value for metrics_listener: "),
            "{e}"
        );
        let e = raw(&format!("{base}log_format = \"xml\""))
            .resolve()
            .unwrap_err();
        assert!(
            e.to_string().starts_with("invalid value for log_format: "),
            "{e}"
        );
        let c = raw(&format!(
            "{base}metrics_listener = \"127.0.0.1:9400\"\nlog_format = \"json\""
        ))
        .resolve()
        .unwrap();
        assert_eq!(c.metrics_listener, Some("127.0.0.1:9400".parse().unwrap()));
        assert_eq!(c.log_format, LogFormat::Json);
        assert_eq!(raw(base).resolve().unwrap().metrics_listener, None);
        let e = raw(&format!(
            "{base}leader_imbalance_check_interval_seconds = 0"
        ))
        .resolve()
        .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("invalid value for leader_imbalance_check_interval_seconds: "),
            "{e}"
        );
        for (key, value) in [
            ("election_timeout_max_ms", "18446744073709551615"),
            ("election_timeout_min_ms", "9223372036854775000"),
            ("broker_session_timeout_ms", "86400001"),
            ("leader_imbalance_check_interval_seconds", "86401"),
        ] {
            let e = raw(&format!("{base}{key} = {value}"))
                .resolve()
                .map(|_| ())
                .unwrap_err()
                .to_string();
            assert!(
                e.starts_with(&format!(
                    "invalid value for {key}: {value} is more than a day"
                )),
                "{key} = {value}: {e}"
            );
        }
        let err = schema()
            .parse_toml("auto_leader_rebalance_enable = \"yes\"")
            .unwrap_err();
        assert!(err.contains("bool"), "{err}");
        let c = raw(base).resolve().unwrap();
        assert!(c.auto_leader_rebalance_enable);
        assert_eq!(c.leader_imbalance_check_interval_seconds, 300);
    }

    #[test]
    fn topic_defaults_are_kafkas_and_validated() {
        let base = "node_id = 1\ncontroller_quorum_voters = \"1@h:1\"\nmetadata_log_dir = \"d\"\n";
        assert_eq!(
            raw(base).resolve().unwrap().topic_defaults(),
            TopicDefaults {
                num_partitions: 1,
                replication_factor: 1
            }
        );
        let c = raw(&format!(
            "{base}num_partitions = 6\ndefault_replication_factor = 3"
        ))
        .resolve()
        .unwrap();
        assert_eq!(
            c.topic_defaults(),
            TopicDefaults {
                num_partitions: 6,
                replication_factor: 3
            }
        );
        for (line, key) in [
            ("num_partitions = 0", "num_partitions: 0 is not in 1..=9982"),
            (
                "num_partitions = -1",
                "num_partitions: -1 is not in 1..=9982",
            ),
            ("num_partitions = 9991", "num_partitions: 9991 is not in"),
            (
                "default_replication_factor = 0",
                "default_replication_factor: 0 is not in 1..=32767",
            ),
            (
                "default_replication_factor = 40000",
                "default_replication_factor: 40000 is not in",
            ),
        ] {
            let e = raw(&format!("{base}{line}")).resolve().unwrap_err();
            assert!(
                e.to_string()
                    .starts_with(&format!("invalid value for {key}")),
                "{line}: {e}"
            );
        }
    }
}
