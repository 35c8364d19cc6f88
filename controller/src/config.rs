//! Controller configuration: a TOML file, every key overridable by a `KEEL_`-prefixed
//! environment variable or a command-line flag (flag > env > file > default).
//!
//! Keys are snake_case versions of Kafka's names (DESIGN §6). Bad configs fail at start with
//! one line naming the key ([`ConfigError`]).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use keel_observability::LogFormat;

use crate::logic::TopicDefaults;
use crate::logic::topics::MAX_PARTITIONS_PER_TOPIC;
use serde::Deserialize;

/// Milliseconds in a day: the largest duration setting accepted.
const MS_PER_DAY: u64 = 86_400_000;

/// Why a configuration was refused. `Display` is the one line printed at start-up.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The config file could not be read, is not valid TOML, has an unknown key or a value
    /// of the wrong type (one line naming the file, the key and the line).
    #[error(transparent)]
    File(#[from] keel_observability::config_file::ConfigFileError),
    /// A key has a value outside its domain.
    #[error("invalid value for {key}: {reason}")]
    Invalid {
        /// The key (config name).
        key: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// A required key is missing.
    #[error("missing required config {key}")]
    Missing {
        /// The key.
        key: &'static str,
    },
}

/// The controller's settings, after merging file, environment and flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerConfig {
    /// This controller's id (Kafka: `node.id`); must appear in `controller_quorum_voters`.
    pub node_id: u64,
    /// The static voter set (Kafka: `controller.quorum.voters`), by node id.
    pub controller_quorum_voters: BTreeMap<u64, String>,
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
    /// default 1). 1..=[`MAX_PARTITIONS_PER_TOPIC`].
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
}

/// The file/environment form: every key optional so that layers can be merged.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    /// See [`ControllerConfig::node_id`].
    pub node_id: Option<u64>,
    /// `1@host:port,2@host:port,...`
    pub controller_quorum_voters: Option<String>,
    /// `host:port`
    pub listeners: Option<String>,
    /// `host:port`
    pub advertised_listeners: Option<String>,
    /// Directory.
    pub metadata_log_dir: Option<PathBuf>,
    /// ms
    pub broker_heartbeat_interval_ms: Option<u64>,
    /// ms
    pub broker_session_timeout_ms: Option<u64>,
    /// ms
    pub election_timeout_min_ms: Option<u64>,
    /// ms
    pub election_timeout_max_ms: Option<u64>,
    /// ms
    pub raft_heartbeat_interval_ms: Option<u64>,
    /// entries
    pub metadata_snapshot_max_entries: Option<u64>,
    /// bytes
    pub metadata_log_segment_bytes: Option<u64>,
    /// ms
    pub metadata_max_idle_interval_ms: Option<u64>,
    /// bool
    pub auto_leader_rebalance_enable: Option<bool>,
    /// seconds
    pub leader_imbalance_check_interval_seconds: Option<u64>,
    /// partitions
    pub num_partitions: Option<i32>,
    /// replicas
    pub default_replication_factor: Option<i32>,
    /// `ip:port`
    pub metrics_listener: Option<String>,
    /// `text` or `json`
    pub log_format: Option<String>,
}

macro_rules! merge {
    ($dst:ident, $src:ident, $($field:ident),*) => {
        $( if $src.$field.is_some() { $dst.$field = $src.$field; } )*
    };
}

impl RawConfig {
    /// Reads a TOML file. Unknown keys are refused; a Kafka-style dotted key (`log.dirs`)
    /// is named with the key to write instead.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        Ok(keel_observability::config_file::read_toml(path)?)
    }

    /// Overlays every key set in `other`.
    pub fn overlay(&mut self, other: RawConfig) {
        merge!(
            self,
            other,
            node_id,
            controller_quorum_voters,
            listeners,
            advertised_listeners,
            metadata_log_dir,
            broker_heartbeat_interval_ms,
            broker_session_timeout_ms,
            election_timeout_min_ms,
            election_timeout_max_ms,
            raft_heartbeat_interval_ms,
            metadata_snapshot_max_entries,
            metadata_log_segment_bytes,
            metadata_max_idle_interval_ms,
            auto_leader_rebalance_enable,
            leader_imbalance_check_interval_seconds,
            num_partitions,
            default_replication_factor,
            metrics_listener,
            log_format
        );
    }

    /// Validates and fills defaults.
    pub fn resolve(self) -> Result<ControllerConfig, ConfigError> {
        let node_id = self
            .node_id
            .ok_or(ConfigError::Missing { key: "node_id" })?;
        let voters_str = self.controller_quorum_voters.ok_or(ConfigError::Missing {
            key: "controller_quorum_voters",
        })?;
        let controller_quorum_voters = parse_voters(&voters_str)?;
        let Some(own) = controller_quorum_voters.get(&node_id) else {
            return Err(ConfigError::Invalid {
                key: "controller_quorum_voters",
                reason: format!("node_id {node_id} is not one of the voters {voters_str:?}"),
            });
        };
        let listeners_str = self.listeners.unwrap_or_else(|| {
            // Default: listen on every interface at the voter entry's port.
            let port = own.rsplit_once(':').map_or("9093", |(_, p)| p);
            format!("0.0.0.0:{port}")
        });
        let listeners = listeners_str.parse().map_err(|e| ConfigError::Invalid {
            key: "listeners",
            reason: format!("{listeners_str:?} is not an ip:port address ({e})"),
        })?;
        let advertised_listeners = self.advertised_listeners.unwrap_or_else(|| own.clone());
        let metadata_log_dir = self.metadata_log_dir.ok_or(ConfigError::Missing {
            key: "metadata_log_dir",
        })?;
        let metrics_listener = self
            .metrics_listener
            .map(|a| {
                a.parse().map_err(|e| ConfigError::Invalid {
                    key: "metrics_listener",
                    reason: format!("{a:?} is not an ip:port address ({e})"),
                })
            })
            .transpose()?;
        let log_format = self
            .log_format
            .map(|f| {
                f.parse().map_err(|reason| ConfigError::Invalid {
                    key: "log_format",
                    reason,
                })
            })
            .transpose()?
            .unwrap_or_default();
        let cfg = ControllerConfig {
            node_id,
            controller_quorum_voters,
            listeners,
            advertised_listeners,
            metadata_log_dir,
            broker_heartbeat_interval_ms: self.broker_heartbeat_interval_ms.unwrap_or(2000),
            broker_session_timeout_ms: self.broker_session_timeout_ms.unwrap_or(9000),
            election_timeout_min_ms: self.election_timeout_min_ms.unwrap_or(300),
            election_timeout_max_ms: self.election_timeout_max_ms.unwrap_or(600),
            raft_heartbeat_interval_ms: self.raft_heartbeat_interval_ms.unwrap_or(100),
            metadata_snapshot_max_entries: self.metadata_snapshot_max_entries.unwrap_or(20_000),
            metadata_log_segment_bytes: self
                .metadata_log_segment_bytes
                .unwrap_or(keel_metadata_log::store::disk::DEFAULT_SEGMENT_BYTES),
            metadata_max_idle_interval_ms: self.metadata_max_idle_interval_ms.unwrap_or(500),
            auto_leader_rebalance_enable: self.auto_leader_rebalance_enable.unwrap_or(true),
            leader_imbalance_check_interval_seconds: self
                .leader_imbalance_check_interval_seconds
                .unwrap_or(300),
            num_partitions: self.num_partitions.unwrap_or(1),
            default_replication_factor: self.default_replication_factor.unwrap_or(1),
            metrics_listener,
            log_format,
        };
        cfg.validate()?;
        Ok(cfg)
    }
}

impl ControllerConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        let positive = |key: &'static str, v: u64| {
            if v == 0 {
                Err(ConfigError::Invalid {
                    key,
                    reason: "must be greater than 0".into(),
                })
            } else {
                Ok(())
            }
        };
        // Durations: above a day is a typo, and values near u64::MAX made timers panic at
        // start ("duration is unrealistically large") while the process kept running.
        let duration = |key: &'static str, v: u64, unit_per_day: u64| {
            positive(key, v)?;
            if v > unit_per_day {
                return Err(ConfigError::Invalid {
                    key,
                    reason: format!("{v} is more than a day ({unit_per_day})"),
                });
            }
            Ok(())
        };
        for (key, v) in [
            (
                "broker_heartbeat_interval_ms",
                self.broker_heartbeat_interval_ms,
            ),
            ("broker_session_timeout_ms", self.broker_session_timeout_ms),
            (
                "raft_heartbeat_interval_ms",
                self.raft_heartbeat_interval_ms,
            ),
            ("election_timeout_min_ms", self.election_timeout_min_ms),
            ("election_timeout_max_ms", self.election_timeout_max_ms),
            (
                "metadata_max_idle_interval_ms",
                self.metadata_max_idle_interval_ms,
            ),
        ] {
            duration(key, v, MS_PER_DAY)?;
        }
        duration(
            "leader_imbalance_check_interval_seconds",
            self.leader_imbalance_check_interval_seconds,
            MS_PER_DAY / 1000,
        )?;
        positive(
            "metadata_snapshot_max_entries",
            self.metadata_snapshot_max_entries,
        )?;
        if !(4096..=1 << 30).contains(&self.metadata_log_segment_bytes) {
            return Err(ConfigError::Invalid {
                key: "metadata_log_segment_bytes",
                reason: format!(
                    "{} is not in 4096..=1073741824",
                    self.metadata_log_segment_bytes
                ),
            });
        }
        let within = |key: &'static str, v: i32, max: i32| {
            if (1..=max).contains(&v) {
                Ok(())
            } else {
                Err(ConfigError::Invalid {
                    key,
                    reason: format!("{v} is not in 1..={max}"),
                })
            }
        };
        within(
            "num_partitions",
            self.num_partitions,
            MAX_PARTITIONS_PER_TOPIC,
        )?;
        within(
            "default_replication_factor",
            self.default_replication_factor,
            i32::from(i16::MAX),
        )?;
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

    fn raw(toml_text: &str) -> RawConfig {
        toml::from_str(toml_text).unwrap()
    }

    #[test]
    fn resolves_with_defaults_and_overlays_in_order() {
        let mut r = raw(
            "node_id = 1\ncontroller_quorum_voters = \"1@127.0.0.1:9093,2@127.0.0.1:9094\"\nmetadata_log_dir = \"/tmp/x\"\n",
        );
        r.overlay(RawConfig {
            broker_session_timeout_ms: Some(3000),
            ..Default::default()
        });
        let c = r.resolve().unwrap();
        assert_eq!(c.listeners, "0.0.0.0:9093".parse().unwrap());
        assert_eq!(c.advertised_listeners, "127.0.0.1:9093");
        assert_eq!(c.broker_session_timeout_ms, 3000);
        assert_eq!(c.broker_heartbeat_interval_ms, 2000);
    }

    #[test]
    fn bad_configs_name_the_key() {
        let err = toml::from_str::<RawConfig>("node_idd = 1").unwrap_err();
        assert!(err.message().contains("node_idd"), "{err}");
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
        let err =
            toml::from_str::<RawConfig>("auto_leader_rebalance_enable = \"yes\"").unwrap_err();
        assert!(err.message().contains("bool"), "{err}");
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
            ("num_partitions = 0", "num_partitions: 0 is not in 1..=9990"),
            (
                "num_partitions = -1",
                "num_partitions: -1 is not in 1..=9990",
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
