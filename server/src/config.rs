//! The config file of `keel-server`: which roles the process runs (`process_roles`), the keys
//! both roles share, and one table per role holding that role's keys.
//!
//! ```toml
//! process_roles = ["broker", "controller"]   # Kafka: process.roles=broker,controller
//! node_id = 1                                # one id per process: the broker's and the controller's
//! controller_quorum_voters = "1@127.0.0.1:9093,2@127.0.0.1:9094,3@127.0.0.1:9095"
//! data_dir = "keel-data/server-1"            # controller/ and broker/ below it by default
//! metrics_listener = "127.0.0.1:9393"        # one /metrics and /health listener per process
//!
//! [controller]
//! listeners = "127.0.0.1:9093"
//!
//! [broker]
//! listeners = "GRPC://127.0.0.1:9192,PLAINTEXT://127.0.0.1:9293"
//! ```
//!
//! Rules (each refusal is one line naming the key and, for a role's key, its table):
//!
//! - `process_roles` is required: a non-empty array of distinct roles, `"broker"` and/or
//!   `"controller"` (Kafka's `process.roles`, KafkaConfig; KIP-500). Both roles is Kafka's
//!   combined mode (KIP-833), which Kafka advises for development only (README "Combined
//!   mode"); one role runs just that role, as `keel-broker` or `keel-controller` would. An
//!   empty list (Kafka's ZooKeeper mode, which Keel does not have), an unknown role or a
//!   duplicate is refused.
//! - The top level holds `process_roles`, `data_dir` and the keys both roles share,
//!   [`SHARED_KEYS`]: as in Kafka, where a combined process reads one `node.id` and one
//!   `controller.quorum.voters` for both roles, and logs and serves metrics once. A shared key
//!   inside a role's table is refused, and so is a role's key at the top level.
//! - Each role in `process_roles` needs its table (`[controller]`, `[broker]`); a table for a
//!   role the process does not run is refused. A table holds the keys of that binary's
//!   schema (README "Controller configuration" / "Broker configuration"), validated by that
//!   schema with its rules and defaults; a key of the other role is refused naming the table
//!   it belongs to.
//! - Data directories: `data_dir` is the root; the controller's `metadata_log_dir` defaults
//!   to `<data_dir>/controller` ([`CONTROLLER_DIR`]) and the broker's `log_dirs` to
//!   `<data_dir>/broker` ([`BROKER_DIR`]). Either may be set in its table instead
//!   (`data_dir` is then not needed for it). The two must not be the same directory nor one
//!   inside the other (compared as written): each role locks its directory and keeps its own
//!   `meta.properties` there. (Kafka keeps a combined node's metadata log in its first
//!   `log.dirs` entry unless `metadata.log.dir` is set; Keel's broker treats every directory
//!   in its log dir as a partition, hence separate directories.)
//! - Only the config file is read: no `KEEL_*` variable or flag per key, since the two roles
//!   share key names (`listeners`) with different values. `--config FILE` or `KEEL_CONFIG`
//!   names the file.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use keel_broker::config::BrokerConfig;
use keel_controller::config::ControllerConfig;
use keel_runtime::LogFormat;
use keel_runtime::settings::{
    Binary, Kind, Layer, QuorumContact, SETTINGS, Schema, Setting, Settings, UsedBy, Value,
};

/// The program name, which prefixes its error lines.
pub const PROGRAM: &str = "keel-server";

/// Keys set once for the whole process, at the top level of the file, and given to every
/// role that reads them: the node id (Kafka: one `node.id` per process, which is both the
/// broker id and the controller id of a combined node), how to reach the controller quorum
/// (`controller.quorum.voters` / `controller.quorum.bootstrap.servers`, one per process in
/// Kafka too), the log format (one log per process) and the metrics listener (one
/// process-wide metrics recorder, see the crate doc).
pub const SHARED_KEYS: [&str; 5] = [
    "node_id",
    "controller_quorum_voters",
    "controller_quorum_bootstrap_servers",
    "log_format",
    "metrics_listener",
];

/// Top-level keys of the file that are not settings of either binary.
pub const TOP_LEVEL_KEYS: [&str; 2] = ["process_roles", "data_dir"];

/// Subdirectory of `data_dir` holding the controller's metadata log by default.
pub const CONTROLLER_DIR: &str = "controller";
/// Subdirectory of `data_dir` holding the broker's log dir by default.
pub const BROKER_DIR: &str = "broker";

/// A role of the process (Kafka's `process.roles` values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ProcessRole {
    /// `"broker"`: partition logs, replication, the client listeners.
    Broker,
    /// `"controller"`: a voter (or observer) of the metadata quorum.
    Controller,
}

impl ProcessRole {
    /// Both roles.
    pub const ALL: [ProcessRole; 2] = [ProcessRole::Broker, ProcessRole::Controller];

    /// The role's name in `process_roles`, and its table's name.
    pub const fn name(self) -> &'static str {
        match self {
            ProcessRole::Broker => "broker",
            ProcessRole::Controller => "controller",
        }
    }

    /// The binary whose settings the role's table holds.
    pub const fn binary(self) -> Binary {
        match self {
            ProcessRole::Broker => Binary::Broker,
            ProcessRole::Controller => Binary::Controller,
        }
    }

    fn other(self) -> ProcessRole {
        match self {
            ProcessRole::Broker => ProcessRole::Controller,
            ProcessRole::Controller => ProcessRole::Broker,
        }
    }
}

/// A validated `keel-server` config: the roles to run, each with its typed config.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// The node id of every role (`node_id`, 0..=i32::MAX).
    pub node_id: i32,
    /// The log format of the process.
    pub log_format: LogFormat,
    /// The process's one `/metrics` and `/health` listener (`metrics_listener`), if any.
    pub metrics_listener: Option<SocketAddr>,
    /// The controller role, when `process_roles` has it (its `metrics_listener` is `None`:
    /// the process serves metrics).
    pub controller: Option<ControllerConfig>,
    /// The broker role, when `process_roles` has it (its `metrics_listener` is `None`).
    pub broker: Option<BrokerConfig>,
}

impl ServerConfig {
    /// The roles this process runs, in the order of [`ProcessRole`].
    pub fn roles(&self) -> Vec<ProcessRole> {
        let mut roles = Vec::new();
        if self.broker.is_some() {
            roles.push(ProcessRole::Broker);
        }
        if self.controller.is_some() {
            roles.push(ProcessRole::Controller);
        }
        roles
    }

    /// The log filter used when `KEEL_LOG` is unset: the controller's when it runs (which
    /// silences openraft's own lines), else the broker's.
    pub fn default_log_filter(&self) -> &'static str {
        match self.controller {
            Some(_) => Binary::Controller.default_log_filter(),
            None => Binary::Broker.default_log_filter(),
        }
    }
}

/// Reads and validates the config file at `path`. The error is one line, `config file PATH:
/// REASON` (see the module doc for the rules).
pub fn load(path: &Path) -> Result<ServerConfig, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("config file {}: {e}", path.display()))?;
    parse(&text).map_err(|e| format!("config file {}: {e}", path.display()))
}

/// Validates config text (the module doc's rules). The error is one line naming the key, and
/// the table for a key of a role.
pub fn parse(text: &str) -> Result<ServerConfig, String> {
    let table: toml::Table = keel_runtime::config_file::parse_toml(text)?;
    let mut roles_value = None;
    let mut data_dir = None;
    let mut sections: [Option<&toml::Table>; 2] = [None, None];
    let mut shared = Layer::default();
    for (key, value) in &table {
        match key.as_str() {
            "process_roles" => roles_value = Some(value),
            "data_dir" => match value {
                toml::Value::String(s) if !s.is_empty() => data_dir = Some(PathBuf::from(s)),
                toml::Value::String(_) => return Err("data_dir: empty path".into()),
                other => {
                    return Err(format!(
                        "data_dir: expected a string (a path), found {}",
                        other.type_str()
                    ));
                }
            },
            "broker" | "controller" => {
                let role = if key == "broker" {
                    ProcessRole::Broker
                } else {
                    ProcessRole::Controller
                };
                match value {
                    toml::Value::Table(t) => sections[role as usize] = Some(t),
                    other => {
                        return Err(format!(
                            "{key}: expected a table [{key}] of the {key}'s keys, found {}",
                            other.type_str()
                        ));
                    }
                }
            }
            k => match setting(k) {
                Some(s) if SHARED_KEYS.contains(&s.name) => {
                    shared.0.insert(s.name, to_value(s, value)?);
                }
                Some(s) => return Err(misplaced_top_level(s)),
                None => return Err(unknown_key(None, k, value)),
            },
        }
    }
    let roles = parse_roles(roles_value)?;
    for role in ProcessRole::ALL {
        let has_table = sections[role as usize].is_some();
        match (roles.contains(&role), has_table) {
            (true, false) => {
                return Err(format!(
                    "missing table [{r}]: process_roles has \"{r}\"; put the {r}'s keys in \
                     [{r}] (README \"Combined mode\")",
                    r = role.name()
                ));
            }
            (false, true) => {
                return Err(format!(
                    "table [{r}] given but process_roles has no \"{r}\": add the role or \
                     remove the table",
                    r = role.name()
                ));
            }
            _ => {}
        }
    }
    // The shared keys, validated once with their own rules (node_id's range, the voter
    // list's form, exactly one way to reach the quorum).
    let shared_schema = Schema::new(
        PROGRAM,
        "Keel combined mode",
        SETTINGS.iter().filter(|s| SHARED_KEYS.contains(&s.name)),
    );
    let shared_settings = shared_schema
        .resolve(shared.clone())
        .map_err(|e| e.to_string())?;
    QuorumContact::from_settings(&shared_settings).map_err(|e| e.to_string())?;
    let node_id: i32 = shared_settings.require("node_id");
    let log_format: LogFormat = shared_settings.require("log_format");
    let metrics_listener: Option<SocketAddr> = shared_settings.get("metrics_listener");
    // The roles get every shared key but the metrics listener (the process serves it).
    shared.0.remove("metrics_listener");

    let mut controller = None;
    let mut broker = None;
    for role in &roles {
        let section = sections[*role as usize].expect("checked above");
        let settings = role_settings(*role, section, &shared, data_dir.as_deref())?;
        let in_table = |e: keel_runtime::settings::ConfigError| format!("[{}] {e}", role.name());
        match role {
            ProcessRole::Controller => {
                controller = Some(ControllerConfig::from_settings(&settings).map_err(in_table)?)
            }
            ProcessRole::Broker => {
                broker = Some(BrokerConfig::from_settings(&settings).map_err(in_table)?)
            }
        }
    }
    if let (Some(c), Some(b)) = (&controller, &broker) {
        check_separate_dirs(&c.metadata_log_dir, &b.log_dir)?;
    }
    Ok(ServerConfig {
        node_id,
        log_format,
        metrics_listener,
        controller,
        broker,
    })
}

/// `process_roles`: a non-empty array of distinct known roles.
fn parse_roles(value: Option<&toml::Value>) -> Result<Vec<ProcessRole>, String> {
    const FORM: &str = "[\"broker\", \"controller\"] (combined mode), [\"broker\"] or \
                        [\"controller\"]; Kafka's process.roles";
    let Some(value) = value else {
        return Err(format!("missing required config process_roles: {FORM}"));
    };
    let toml::Value::Array(items) = value else {
        return Err(format!(
            "process_roles: expected an array, found {}: {FORM}",
            value.type_str()
        ));
    };
    if items.is_empty() {
        return Err(format!(
            "process_roles is empty: give {FORM} (an empty process.roles was Kafka's ZooKeeper \
             mode, which Keel does not have)"
        ));
    }
    let mut roles = Vec::new();
    for item in items {
        let role = match item.as_str() {
            Some("broker") => ProcessRole::Broker,
            Some("controller") => ProcessRole::Controller,
            Some(other) => {
                return Err(format!(
                    "process_roles: unknown role {other:?}: the roles are \"broker\" and \
                     \"controller\""
                ));
            }
            None => {
                return Err(format!(
                    "process_roles: expected role names (strings), found {}",
                    item.type_str()
                ));
            }
        };
        if roles.contains(&role) {
            return Err(format!(
                "process_roles: \"{}\" is listed twice",
                role.name()
            ));
        }
        roles.push(role);
    }
    roles.sort();
    Ok(roles)
}

/// The validated settings of `role`: the shared keys, its table's keys, and its data
/// directory defaulted under `data_dir`.
fn role_settings(
    role: ProcessRole,
    section: &toml::Table,
    shared: &Layer,
    data_dir: Option<&Path>,
) -> Result<Settings, String> {
    let name = role.name();
    let schema = Schema::of(role.binary());
    let mut layer = shared.clone();
    for (key, value) in section {
        let Some(s) = setting(key) else {
            if TOP_LEVEL_KEYS.contains(&key.as_str()) {
                return Err(format!(
                    "[{name}] {key}: a top-level key; move it above the first table"
                ));
            }
            return Err(unknown_key(Some(role), key, value));
        };
        if SHARED_KEYS.contains(&s.name) {
            return Err(format!(
                "[{name}] {key}: one per process, shared by both roles (Kafka: one {} per \
                 process, KafkaConfig process.roles); set it at the top level, not in [{name}]",
                if s.kafka.is_empty() { s.name } else { s.kafka }
            ));
        }
        if !s.used_by.includes(role.binary()) {
            return Err(format!(
                "[{name}] {key} is a {other} key: move it into [{other}]",
                other = role.other().name()
            ));
        }
        layer.0.insert(
            s.name,
            to_value(s, value).map_err(|e| format!("[{name}] {e}"))?,
        );
    }
    let dir_key = match role {
        ProcessRole::Controller => "metadata_log_dir",
        ProcessRole::Broker => "log_dirs",
    };
    if !layer.0.contains_key(dir_key) {
        let Some(root) = data_dir else {
            return Err(format!(
                "missing required config data_dir (the root of the roles' data directories) \
                 or [{name}] {dir_key}"
            ));
        };
        let sub = match role {
            ProcessRole::Controller => CONTROLLER_DIR,
            ProcessRole::Broker => BROKER_DIR,
        };
        layer.0.insert(
            dir_key,
            Value::Text(root.join(sub).to_string_lossy().into_owned()),
        );
    }
    schema.resolve(layer).map_err(|e| format!("[{name}] {e}"))
}

/// The declared setting named `key`.
fn setting(key: &str) -> Option<&'static Setting> {
    SETTINGS.iter().find(|s| s.name == key)
}

/// The refusal of a role's key at the top level, naming its table.
fn misplaced_top_level(s: &Setting) -> String {
    match s.used_by {
        UsedBy::Controller => format!("{} is a controller key: move it into [controller]", s.name),
        UsedBy::Broker => format!("{} is a broker key: move it into [broker]", s.name),
        UsedBy::Both => format!(
            "{} is set per role: put it in [controller] and/or [broker] (the top level holds \
             process_roles, data_dir and {})",
            s.name,
            SHARED_KEYS.join(", ")
        ),
    }
}

/// The refusal of a key no binary has (in `role`'s table, or at the top level). A Kafka-style
/// dotted key (`log.dirs`, which TOML reads as a table `log`) gets the key to write.
fn unknown_key(role: Option<ProcessRole>, key: &str, value: &toml::Value) -> String {
    let at = role.map_or(String::new(), |r| format!("[{}] ", r.name()));
    let mut dotted = key.to_string();
    let mut inner = value;
    while let toml::Value::Table(t) = inner
        && let Some((k, v)) = t.iter().next()
    {
        dotted.push('.');
        dotted.push_str(k);
        inner = v;
    }
    let keel = dotted.replace(['.', '-'], "_");
    if dotted.contains('.') && setting(&keel).is_some() {
        return format!(
            "{at}unknown key \"{dotted}\": Keel writes Kafka's dotted names with underscores, \
             use {keel}"
        );
    }
    format!("{at}unknown key {key}")
}

/// A file value as the setting's kind wants it; the error names the key.
fn to_value(s: &Setting, value: &toml::Value) -> Result<Value, String> {
    let numeric = matches!(s.kind, Kind::Duration(_) | Kind::Int { .. });
    match value {
        toml::Value::Integer(i) if numeric => Ok(Value::Int((*i).into())),
        toml::Value::Boolean(b) if s.kind == Kind::Bool => Ok(Value::Bool(*b)),
        toml::Value::String(t) if !numeric && s.kind != Kind::Bool => Ok(Value::Text(t.clone())),
        other => {
            let expected = if numeric {
                "an integer"
            } else if s.kind == Kind::Bool {
                "a boolean"
            } else {
                "a string"
            };
            Err(format!(
                "{}: expected {expected}, found {}",
                s.name,
                other.type_str()
            ))
        }
    }
}

/// The controller's and the broker's directories must not overlap (module doc).
fn check_separate_dirs(controller: &Path, broker: &Path) -> Result<(), String> {
    if controller.starts_with(broker) || broker.starts_with(controller) {
        return Err(format!(
            "[broker] log_dirs {} and [controller] metadata_log_dir {} overlap: each role \
             locks its own directory and keeps its meta.properties there; give them separate \
             directories (by default {BROKER_DIR}/ and {CONTROLLER_DIR}/ under data_dir)",
            broker.display(),
            controller.display()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
