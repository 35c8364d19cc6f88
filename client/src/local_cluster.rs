//! A local cluster of 3 controllers and 3 brokers as background processes (`keelctl cluster
//! up|down|status`): the port and file layout, starting, finding and stopping the processes.
//!
//! Layout under the data dir: `controller-<id>/` and `broker-<id>/` data directories,
//! `<name>.log` (stdout and stderr of the process) and `<name>.pid`. Ports are fixed offsets of
//! a base port: controllers `base + id` (9093..9095 for the default 9092), brokers
//! `base + 99 + id` (9192..9194), all on 127.0.0.1. Every process also serves `/metrics` and
//! `/health/*` over HTTP (`--metrics-listener`): controllers on `base + 300 + id`
//! (9393..9395), brokers on `base + 310 + id` (9403..9405).
//!
//! The first `cluster up` on a data dir records the base port in `<data dir>/cluster.toml`
//! ([`LAYOUT_FILE`]); every later command on that dir uses it (see [`resolve`]), so a cluster
//! started on other ports is never looked for, or restarted, on the default ones. It also
//! records, under `[settings]`, the `KEEL_*` environment variables the controller and broker
//! binaries read ([`setting_names`]) that were set at that first `up` (e.g. `KEEL_NUM_PARTITIONS`); every process
//! a later `up` (re)starts gets them, so a restarted process keeps the cluster's settings.
//!
//! Combined mode (`cluster up --combined`, issue #25; Kafka's `process.roles=broker,controller`,
//! KIP-833; for development only): 3 `keel-server` processes `server-<id>`, each a controller
//! and a broker with the same ports as above (controller `base + id`, broker `base + 99 + id`,
//! Kafka `base + 200 + id`) and one metrics listener, the controller's (`base + 300 + id`).
//! Each reads `<data dir>/server-<id>.toml`, written at every start from the same values the
//! split cluster passes as flags ([`Layout::server_config`]); its data is under
//! `server-<id>/` (`controller/` and `broker/`). The first `up` records `combined = true`;
//! a data dir keeps the mode it was created with.
//!
//! TLS (`cluster up --tls`, issue #23): `<data dir>/tls/` holds a development CA and a
//! certificate per process and one for keelctl (`keelctl`), made by [`crate::dev_certs`];
//! while `tls/ca.pem` exists every process is started with its certificate and
//! `ssl_client_auth = required`, and `cluster up|status` connect with keelctl's certificate.
//! With `--authorizer` as well (`tls/authorizer` exists, [`AUTHORIZER_MARKER`]) every process
//! runs Kafka's StandardAuthorizer: principals are the certificates' CNs
//! (`ssl_principal_mapping_rules = RULE:^CN=([^,]+)$/$1/,DEFAULT`), the processes and keelctl
//! are the super users, every other principal needs ACLs (`keelctl acl`).

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use keel_runtime::settings::Binary;
use rustix::process::{Pid, Signal, kill_process, test_kill_process};
use serde::{Deserialize, Serialize};

/// Default base port: controllers listen on 9093..9095, brokers on 9192..9194.
pub const DEFAULT_BASE_PORT: u16 = 9092;
/// Lowest base port: the ports below 1024 are privileged (binding them needs root or
/// CAP_NET_BIND_SERVICE, and `--base-port 0` put controllers on ports 1-3).
pub const MIN_BASE_PORT: u16 = 1024;
/// Number of controllers and of brokers.
pub const NODES: u16 = 3;
/// Highest base port: the local cluster uses ports up to base + 313 (the metrics listeners).
pub const MAX_BASE_PORT: u16 = u16::MAX - 310 - NODES;
/// File in the data dir recording the layout chosen by the first `cluster up`.
pub const LAYOUT_FILE: &str = "cluster.toml";
/// File in a TLS cluster's `tls/` directory whose presence turns the authorizer on.
pub const AUTHORIZER_MARKER: &str = "authorizer";
/// File in the data dir whose presence makes the brokers' Kafka listeners SASL ones
/// (`cluster up --sasl`): `SASL_SSL` in a TLS cluster, `SASL_PLAINTEXT` otherwise.
pub const SASL_MARKER: &str = "sasl";
/// The principal mapping of a local cluster with an authorizer: a certificate whose subject
/// is just `CN=<name>` (as [`crate::dev_certs`] makes them) is `User:<name>`.
pub const LOCAL_PRINCIPAL_RULES: &str = "RULE:^CN=([^,]+)$/$1/,DEFAULT";
/// Name of keelctl's certificate in a TLS cluster's `tls/` directory.
pub const KEELCTL_CERT: &str = "keelctl";
/// The environment variables of the TLS settings, which a local cluster never takes from the
/// environment (its TLS is `cluster up --tls`).
pub const TLS_ENV: [&str; 4] = [
    "KEEL_TLS_CERT_FILE",
    "KEEL_TLS_KEY_FILE",
    "KEEL_TLS_CA_FILE",
    "KEEL_SSL_CLIENT_AUTH",
];

/// Controller, broker, or both in one process (combined mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// A `keel-controller` process.
    Controller,
    /// A `keel-broker` process.
    Broker,
    /// A `keel-server` process running a controller and a broker (combined mode, KIP-833).
    Combined,
}

impl Role {
    /// The binary's file name.
    pub fn binary(self) -> &'static str {
        match self {
            Role::Controller => "keel-controller",
            Role::Broker => "keel-broker",
            Role::Combined => "keel-server",
        }
    }

    /// Whether processes of this role run a broker (and serve Kafka clients).
    pub fn has_broker(self) -> bool {
        matches!(self, Role::Broker | Role::Combined)
    }
}

/// One process of the local cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProcessSpec {
    /// Controller or broker.
    pub role: Role,
    /// Node id (1..=3).
    pub id: u16,
    /// `host:port` it listens on (a combined process's controller listener).
    pub address: String,
    /// A combined process's broker (gRPC) listener, `host:port`; `None` otherwise.
    pub broker_address: Option<String>,
    /// `host:port` of its HTTP `/metrics` and `/health` listener.
    pub metrics_address: String,
    /// A broker's Kafka-protocol (`PLAINTEXT`) listener, `host:port`; `None` for controllers.
    pub kafka_address: Option<String>,
    /// Its data directory.
    pub data_dir: PathBuf,
    /// Its log file (stdout + stderr).
    pub log_file: PathBuf,
    /// Its pid file.
    pub pid_file: PathBuf,
}

impl ProcessSpec {
    /// `controller-1`, `broker-2`, ...
    pub fn name(&self) -> String {
        let role = match self.role {
            Role::Controller => "controller",
            Role::Broker => "broker",
            Role::Combined => "server",
        };
        format!("{role}-{}", self.id)
    }
}

impl ProcessSpec {
    /// The first of its addresses (gRPC listener, metrics listener, Kafka listener) that another program
    /// already listens on, with the OS error; `None` when both are free. A probe bind on
    /// loopback, released at once: a process started next may still lose a race, which the
    /// startup wait catches.
    pub fn taken_address(&self) -> Option<(String, io::Error)> {
        [&self.address, &self.metrics_address]
            .into_iter()
            .chain(&self.broker_address)
            .chain(&self.kafka_address)
            .find_map(|a| match std::net::TcpListener::bind(a.as_str()) {
                Ok(_) => None,
                Err(e) => Some((a.clone(), e)),
            })
    }
}

/// The local cluster's layout: where each process listens and keeps its files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// Root data directory.
    pub data_dir: PathBuf,
    /// Base port.
    pub base_port: u16,
    /// `KEEL_*` environment variables given to every process started (recorded by the first
    /// `cluster up`; see the module doc). A combined process gets them in its config file.
    pub settings: BTreeMap<String, String>,
    /// Combined mode: 3 `keel-server` processes instead of 3 controllers and 3 brokers
    /// (`cluster up --combined`, recorded as `combined = true`).
    pub combined: bool,
}

impl Layout {
    /// The layout for `data_dir` and `base_port`. Fails when the ports would overflow.
    pub fn new(data_dir: PathBuf, base_port: u16) -> Result<Self, String> {
        if base_port < MIN_BASE_PORT {
            return Err(format!(
                "--base-port {base_port} is too low: the local cluster's ports (base + 1 to \
                 base + {}) must not be privileged ports (below {MIN_BASE_PORT})",
                310 + NODES
            ));
        }
        if base_port > MAX_BASE_PORT {
            return Err(format!(
                "--base-port {base_port} is too high: the local cluster uses ports up to base + {}",
                310 + NODES
            ));
        }
        Ok(Layout {
            data_dir,
            base_port,
            settings: BTreeMap::new(),
            combined: false,
        })
    }

    /// `<data_dir>/cluster.toml`.
    pub fn file(data_dir: &Path) -> PathBuf {
        data_dir.join(LAYOUT_FILE)
    }

    /// The layout recorded in `data_dir`, `Ok(None)` when there is no layout file. An
    /// unreadable or invalid file is an error naming it.
    pub fn read_recorded(data_dir: &Path) -> Result<Option<Layout>, String> {
        let file = Self::file(data_dir);
        let text = match fs::read_to_string(&file) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("cannot read {}: {e}", file.display())),
        };
        let rec: LayoutToml = toml::from_str(&text).map_err(|e| {
            let line = e
                .span()
                .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
            let at = line.map(|l| format!(" (line {l})")).unwrap_or_default();
            let msg = e.message().replace('\n', " ");
            format!("invalid {}{at}: {}", file.display(), msg.trim())
        })?;
        let mut layout = Layout::new(data_dir.to_path_buf(), rec.base_port)
            .map_err(|e| format!("invalid {}: {e}", file.display()))?;
        if let Some(bad) = rec.settings.keys().find(|k| !is_env_name(k)) {
            return Err(format!(
                "invalid {}: [settings] key {bad:?} is not a KEEL_* environment variable name",
                file.display()
            ));
        }
        layout.settings = rec.settings;
        layout.combined = rec.combined;
        Ok(Some(layout))
    }

    /// Records this layout in `<data_dir>/cluster.toml`, atomically: a temp file in the same
    /// directory, fsync, rename, fsync of the directory.
    pub fn record(&self) -> io::Result<()> {
        let file = Self::file(&self.data_dir);
        #[derive(Serialize)]
        struct BasePort {
            base_port: u16,
            #[serde(skip_serializing_if = "std::ops::Not::not")]
            combined: bool,
        }
        #[derive(Serialize)]
        struct Settings<'a> {
            settings: &'a BTreeMap<String, String>,
        }
        let mut text = String::from(
            "# Written by the first `keelctl cluster up` on this directory; `cluster up|status|down`\n\
             # and `broker shutdown` use it. Controllers listen on base_port+1..+3, brokers on\n\
             # base_port+100..+102 (gRPC) and base_port+201..+203 (Kafka protocol). To use other\n\
             # ports, stop the cluster and remove this directory.\n",
        );
        text.push_str(
            &toml::to_string(&BasePort {
                base_port: self.base_port,
                combined: self.combined,
            })
            .map_err(io::Error::other)?,
        );
        text.push_str(
            "\n# KEEL_* environment variables of keel-controller/keel-broker set at the first\n\
             # `cluster up`, given to every process `cluster up` starts. To change one: edit it\n\
             # here, then `keelctl cluster down` and `keelctl cluster up`.\n",
        );
        text.push_str(
            &toml::to_string(&Settings {
                settings: &self.settings,
            })
            .map_err(io::Error::other)?,
        );
        Ok(keel_runtime::fs::write_atomic(&file, text.as_bytes())?)
    }

    /// Directory of the cluster's TLS certificates (`<data dir>/tls`).
    pub fn tls_dir(&self) -> PathBuf {
        self.data_dir.join("tls")
    }

    /// Whether the cluster runs with TLS: its CA exists ([`Self::enable_tls`] made it).
    pub fn tls_on(&self) -> bool {
        self.tls_dir().join(crate::dev_certs::CA_FILE).exists()
    }

    /// Makes the development CA and the certificates of every process and of keelctl in
    /// [`Self::tls_dir`] (valid for 127.0.0.1 and localhost), turning TLS on for the
    /// processes started from now on.
    ///
    /// Errors: a file that cannot be written (named).
    pub fn enable_tls(&self) -> Result<(), String> {
        let hosts = vec!["127.0.0.1".to_string(), "localhost".to_string()];
        let dir = self.tls_dir();
        for name in self
            .processes()
            .iter()
            .map(ProcessSpec::name)
            .chain([KEELCTL_CERT.to_string()])
        {
            crate::dev_certs::issue(&dir, &name, &hosts)?;
        }
        Ok(())
    }

    /// Whether the cluster runs with the authorizer ([`Self::enable_authorizer`] made its
    /// marker).
    pub fn authorizer_on(&self) -> bool {
        self.tls_on() && self.tls_dir().join(AUTHORIZER_MARKER).exists()
    }

    /// Turns the authorizer on for the processes started from now on (needs TLS: principals
    /// come from certificates).
    ///
    /// Errors: the marker cannot be written.
    pub fn enable_authorizer(&self) -> Result<(), String> {
        let path = self.tls_dir().join(AUTHORIZER_MARKER);
        fs::write(
            &path,
            "processes of this cluster run with authorizer = \"standard\"\n",
        )
        .map_err(|e| format!("writing {}: {e}", path.display()))
    }

    /// Whether the brokers' Kafka listeners use SASL/SCRAM ([`Self::enable_sasl`] made its
    /// marker).
    pub fn sasl_on(&self) -> bool {
        self.data_dir.join(SASL_MARKER).exists()
    }

    /// Makes the brokers started from now on serve Kafka clients with SASL/SCRAM.
    ///
    /// Errors: the marker cannot be written.
    pub fn enable_sasl(&self) -> Result<(), String> {
        let path = self.data_dir.join(SASL_MARKER);
        fs::write(
            &path,
            "the brokers' Kafka listeners of this cluster authenticate with SASL/SCRAM\n",
        )
        .map_err(|e| format!("writing {}: {e}", path.display()))
    }

    /// The security protocol (and listener name) of the brokers' Kafka listeners:
    /// `PLAINTEXT`, `SSL` (a TLS cluster), `SASL_PLAINTEXT` or `SASL_SSL` (with SASL).
    pub fn kafka_security_protocol(&self) -> &'static str {
        use keel_runtime::settings::listeners::{PLAINTEXT, SASL_PLAINTEXT, SASL_SSL, SSL};
        match (self.tls_on(), self.sasl_on()) {
            (false, false) => PLAINTEXT,
            (true, false) => SSL,
            (false, true) => SASL_PLAINTEXT,
            (true, true) => SASL_SSL,
        }
    }

    /// The super users of a local cluster with an authorizer: every process and keelctl.
    pub fn super_users(&self) -> String {
        self.processes()
            .iter()
            .map(ProcessSpec::name)
            .chain([KEELCTL_CERT.to_string()])
            .map(|n| format!("User:{n}"))
            .collect::<Vec<_>>()
            .join(";")
    }

    /// The dialer keelctl uses for this cluster: TLS with keelctl's certificate when
    /// [`Self::tls_on`], else plaintext.
    ///
    /// Errors: a certificate file cannot be read (named).
    pub fn dialer(&self) -> Result<keel_runtime::tls::Dialer, String> {
        use keel_runtime::tls::{ClientAuth, Dialer, TlsContext, TlsFiles};
        if !self.tls_on() {
            return Ok(Dialer::default());
        }
        let dir = self.tls_dir();
        let files = TlsFiles {
            ca: dir.join(crate::dev_certs::CA_FILE),
            identity: Some((
                crate::dev_certs::cert_path(&dir, KEELCTL_CERT),
                crate::dev_certs::key_path(&dir, KEELCTL_CERT),
            )),
        };
        let ctx = TlsContext::load(files, ClientAuth::None).map_err(|e| e.to_string())?;
        Ok(Dialer::new(Some(ctx)))
    }

    /// `host:port` of controller `id`.
    pub fn controller_address(&self, id: u16) -> String {
        format!("127.0.0.1:{}", self.base_port + id)
    }

    /// `host:port` of broker `id`.
    pub fn broker_address(&self, id: u16) -> String {
        format!("127.0.0.1:{}", self.base_port + 99 + id)
    }

    /// `controller_quorum_voters` of this cluster.
    pub fn voters(&self) -> String {
        (1..=NODES)
            .map(|id| format!("{id}@{}", self.controller_address(id)))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// `host:port` of broker `id`'s Kafka-protocol listener (base_port + 200 + id).
    pub fn kafka_address(&self, id: u16) -> String {
        format!("127.0.0.1:{}", self.base_port + 200 + id)
    }

    /// Kafka listener addresses, a Kafka client's `bootstrap.servers`.
    pub fn kafka_addresses(&self) -> Vec<String> {
        (1..=NODES).map(|id| self.kafka_address(id)).collect()
    }

    /// Controller addresses, for `--bootstrap-controllers`.
    pub fn controller_addresses(&self) -> Vec<String> {
        (1..=NODES).map(|id| self.controller_address(id)).collect()
    }

    /// Broker addresses, for `--bootstrap-brokers`.
    pub fn broker_addresses(&self) -> Vec<String> {
        (1..=NODES).map(|id| self.broker_address(id)).collect()
    }

    /// Every process, controllers first (in combined mode, the 3 `keel-server` processes).
    pub fn processes(&self) -> Vec<ProcessSpec> {
        if self.combined {
            return (1..=NODES)
                .map(|id| self.spec(Role::Combined, id))
                .collect();
        }
        (1..=NODES)
            .map(|id| self.spec(Role::Controller, id))
            .chain((1..=NODES).map(|id| self.spec(Role::Broker, id)))
            .collect()
    }

    /// Process `id` of `role`: a combined one has the controller's address and metrics
    /// port, and the broker's listeners.
    fn spec(&self, role: Role, id: u16) -> ProcessSpec {
        let name = match role {
            Role::Controller => format!("controller-{id}"),
            Role::Broker => format!("broker-{id}"),
            Role::Combined => format!("server-{id}"),
        };
        ProcessSpec {
            role,
            id,
            address: match role {
                Role::Controller | Role::Combined => self.controller_address(id),
                Role::Broker => self.broker_address(id),
            },
            broker_address: (role == Role::Combined).then(|| self.broker_address(id)),
            metrics_address: match role {
                Role::Controller | Role::Combined => {
                    format!("127.0.0.1:{}", self.base_port + 300 + id)
                }
                Role::Broker => format!("127.0.0.1:{}", self.base_port + 310 + id),
            },
            kafka_address: role.has_broker().then(|| self.kafka_address(id)),
            data_dir: self.data_dir.join(&name),
            log_file: self.data_dir.join(format!("{name}.log")),
            pid_file: self.data_dir.join(format!("{name}.pid")),
        }
    }

    /// The config file of combined process `p`: `<data dir>/server-<id>.toml`.
    pub fn server_config_path(&self, p: &ProcessSpec) -> PathBuf {
        self.data_dir.join(format!("{}.toml", p.name()))
    }

    /// The command line of one process (a combined one: `--config` its file, which
    /// [`spawn`] writes first).
    pub fn args(&self, p: &ProcessSpec) -> Vec<String> {
        match p.role {
            Role::Combined => vec![
                "--config".into(),
                self.server_config_path(p).display().to_string(),
            ],
            Role::Controller | Role::Broker => self.flags(p, &p.name()),
        }
    }

    /// The per-process values `up` sets for `p`, as `--key value` flags: its command line,
    /// or for a combined process those its config file holds (both roles').
    pub fn flag_args(&self, p: &ProcessSpec) -> Vec<String> {
        match p.role {
            Role::Combined => [Role::Controller, Role::Broker]
                .into_iter()
                .flat_map(|r| self.flags(&self.spec(r, p.id), &p.name()))
                .collect(),
            Role::Controller | Role::Broker => self.args(p),
        }
    }

    /// The flags (`--key value` pairs) of a controller or broker `p` whose certificate is
    /// `cert` (in combined mode the process's, shared by its roles).
    fn flags(&self, p: &ProcessSpec, cert: &str) -> Vec<String> {
        let data_flag = match p.role {
            Role::Controller | Role::Combined => "--metadata-log-dir",
            Role::Broker => "--log-dirs",
        };
        let listeners = match &p.kafka_address {
            // A TLS cluster is TLS on every listener: Kafka clients use SSL or SASL_SSL (#23).
            Some(kafka) => format!(
                "GRPC://{},{}://{kafka}",
                p.address,
                self.kafka_security_protocol()
            ),
            None => p.address.clone(),
        };
        let mut args = vec![
            "--node-id".into(),
            p.id.to_string(),
            "--controller-quorum-voters".into(),
            self.voters(),
            "--listeners".into(),
            listeners,
            data_flag.into(),
            p.data_dir.display().to_string(),
            "--metrics-listener".into(),
            p.metrics_address.clone(),
        ];
        if self.tls_on() {
            let dir = self.tls_dir();
            let path = |f: PathBuf| f.display().to_string();
            args.extend([
                "--tls-cert-file".into(),
                path(crate::dev_certs::cert_path(&dir, cert)),
                "--tls-key-file".into(),
                path(crate::dev_certs::key_path(&dir, cert)),
                "--tls-ca-file".into(),
                path(dir.join(crate::dev_certs::CA_FILE)),
                "--ssl-client-auth".into(),
                "required".into(),
            ]);
        }
        if self.authorizer_on() {
            args.extend([
                "--authorizer".into(),
                "standard".into(),
                "--super-users".into(),
                self.super_users(),
                "--ssl-principal-mapping-rules".into(),
                LOCAL_PRINCIPAL_RULES.into(),
            ]);
        }
        args
    }

    /// The config file of combined process `p` (`keel-server`'s format, README "Combined
    /// mode"): the values a split cluster passes its controller and broker as flags
    /// ([`Self::args`]), with the keys both roles share (node id, voters, the metrics
    /// listener: the controller's port) at the top level, `data_dir` = `p.data_dir`, and the
    /// recorded settings ([`Self::settings`]) in the table of each role that reads them.
    pub fn server_config(&self, p: &ProcessSpec) -> String {
        use keel_runtime::settings::{SETTINGS, UsedBy};
        const SHARED: [&str; 5] = [
            "node_id",
            "controller_quorum_voters",
            "controller_quorum_bootstrap_servers",
            "log_format",
            "metrics_listener",
        ];
        let mut top = vec![
            "process_roles = [\"broker\", \"controller\"]".to_string(),
            toml_line("data_dir", &p.data_dir.display().to_string()),
        ];
        let mut tables: [(Role, Vec<String>); 2] =
            [(Role::Controller, Vec::new()), (Role::Broker, Vec::new())];
        for (role, lines) in &mut tables {
            let mut spec = self.spec(*role, p.id);
            spec.data_dir = p.data_dir.clone();
            let flags = self.flags(&spec, &p.name());
            for pair in flags.chunks(2) {
                let [flag, value] = pair else { continue };
                let key = flag.trim_start_matches('-').replace('-', "_");
                if matches!(key.as_str(), "metadata_log_dir" | "log_dirs") {
                    continue; // Under data_dir by default.
                }
                if key == "metrics_listener" && *role == Role::Broker {
                    continue; // One listener per process: the controller's port.
                }
                let line = toml_line(&key, value);
                if SHARED.contains(&key.as_str()) {
                    if !top.contains(&line) {
                        top.push(line);
                    }
                } else {
                    lines.push(line);
                }
            }
        }
        for (env, value) in &self.settings {
            let Some(s) = SETTINGS.iter().find(|s| s.env() == *env) else {
                continue;
            };
            let line = toml_line(s.name, value);
            if SHARED.contains(&s.name) {
                top.push(line);
                continue;
            }
            for (role, lines) in &mut tables {
                let reads = match s.used_by {
                    UsedBy::Both => true,
                    UsedBy::Controller => *role == Role::Controller,
                    UsedBy::Broker => *role == Role::Broker,
                };
                if reads {
                    lines.push(line.clone());
                }
            }
        }
        let mut text = format!(
            "# Written by `keelctl cluster up --combined` at every start of {}; edits are \
             overwritten (README \"Combined mode\").\n",
            p.name()
        );
        text.push_str(&top.join("\n"));
        for (role, lines) in &tables {
            let name = if *role == Role::Controller {
                "controller"
            } else {
                "broker"
            };
            text.push_str(&format!("\n\n[{name}]\n{}", lines.join("\n")));
        }
        text.push('\n');
        text
    }
}

/// `key = value` with the value typed as the setting `key` declares it: an integer or a
/// boolean when it is one, else a TOML string.
fn toml_line(key: &str, value: &str) -> String {
    use keel_runtime::settings::{Kind, SETTINGS};
    let kind = SETTINGS.iter().find(|s| s.name == key).map(|s| s.kind);
    let typed = match kind {
        Some(Kind::Duration(_) | Kind::Int { .. }) if value.parse::<i64>().is_ok() => {
            value.to_string()
        }
        Some(Kind::Bool) if matches!(value, "true" | "false") => value.to_string(),
        _ => toml::Value::String(value.to_string()).to_string(),
    };
    format!("{key} = {typed}")
}

/// The contents of [`LAYOUT_FILE`].
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LayoutToml {
    base_port: u16,
    #[serde(default)]
    combined: bool,
    #[serde(default)]
    settings: BTreeMap<String, String>,
}

/// `KEEL_` followed by upper-case letters, digits and underscores.
fn is_env_name(k: &str) -> bool {
    k.strip_prefix("KEEL_").is_some_and(|rest| {
        !rest.is_empty()
            && rest
                .bytes()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
    })
}

/// The `KEEL_*` environment variables `keel-controller` or `keel-broker` read, from their
/// settings' declaration ([`keel_runtime::settings::env_names`]). `KEEL_LOG`, the log
/// filter, is not a setting and so is never recorded.
pub fn setting_names() -> BTreeSet<String> {
    Binary::ALL
        .into_iter()
        .flat_map(keel_runtime::settings::env_names)
        .collect()
}

/// The variables of `env` whose names are in `names` (what the first `up` records).
pub fn settings_from_env(
    names: &BTreeSet<String>,
    env: impl IntoIterator<Item = (String, String)>,
) -> BTreeMap<String, String> {
    env.into_iter().filter(|(k, _)| names.contains(k)).collect()
}

/// The settings (`names`) in the environment of a live process of `layout`
/// (`/proc/<pid>/environ`), for a data dir whose cluster.toml is gone while its processes
/// run; `None` when none runs or none can be read.
pub fn running_settings(
    layout: &Layout,
    names: &BTreeSet<String>,
) -> Option<BTreeMap<String, String>> {
    layout.processes().iter().find_map(|p| {
        let pid = running_pid(p)?;
        let environ = fs::read(format!("/proc/{pid}/environ")).ok()?;
        let vars = environ.split(|b| *b == 0).filter_map(|kv| {
            let kv = String::from_utf8_lossy(kv);
            let (k, v) = kv.split_once('=')?;
            Some((k.to_string(), v.to_string()))
        });
        Some(settings_from_env(names, vars))
    })
}

/// The settings in `ambient` (this `up`'s environment) that differ from the recorded ones,
/// one line each (`KEEL_X=5 (recorded: 3)` or `KEEL_X=5 (not recorded)`); empty when they
/// agree. Recorded settings missing from `ambient` are fine: they still apply.
pub fn settings_conflicts(
    recorded: &BTreeMap<String, String>,
    ambient: &BTreeMap<String, String>,
) -> Vec<String> {
    ambient
        .iter()
        .filter(|(k, v)| recorded.get(*k) != Some(*v))
        .map(|(k, v)| match recorded.get(k) {
            Some(r) => format!("{k}={v} (recorded: {r})"),
            None => format!("{k}={v} (not recorded)"),
        })
        .collect()
}

/// Where [`resolve`] found the base port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayoutSource {
    /// `<data dir>/cluster.toml`.
    Recorded,
    /// The command line of processes running from the data dir, which has no layout file
    /// (started by a keelctl that did not record it).
    Running,
    /// Nothing recorded nor running: `--base-port`, or the default.
    Given,
}

/// The layout of the local cluster in `data_dir`: the recorded one, else the one of the
/// processes running from it, else `base_port` (default [`DEFAULT_BASE_PORT`]). A `base_port`
/// that differs from a recorded or running one is refused with one line naming both.
pub fn resolve(data_dir: &Path, base_port: Option<u16>) -> Result<(Layout, LayoutSource), String> {
    if let Some(layout) = Layout::read_recorded(data_dir)? {
        if let Some(given) = base_port.filter(|p| *p != layout.base_port) {
            return Err(format!(
                "--base-port {given} differs from base_port {} recorded in {}: omit --base-port to use {}, or stop the cluster and remove {} to start a new one on other ports",
                layout.base_port,
                Layout::file(data_dir).display(),
                layout.base_port,
                data_dir.display()
            ));
        }
        return Ok((layout, LayoutSource::Recorded));
    }
    if let Some(running) = running_base_port(data_dir) {
        if let Some(given) = base_port.filter(|p| *p != running) {
            return Err(format!(
                "--base-port {given} differs from base port {running} of the processes running from {} (it has no {LAYOUT_FILE}): omit --base-port, or stop them first with `keelctl cluster down --data-dir {}`",
                data_dir.display(),
                data_dir.display()
            ));
        }
        return Ok((
            Layout::new(data_dir.to_path_buf(), running)?,
            LayoutSource::Running,
        ));
    }
    Ok((
        Layout::new(
            data_dir.to_path_buf(),
            base_port.unwrap_or(DEFAULT_BASE_PORT),
        )?,
        LayoutSource::Given,
    ))
}

/// The base port of the live processes of `data_dir`, from the `--listeners` argument on
/// their command line (`/proc/<pid>/cmdline`); `None` when none runs or none tells.
pub fn running_base_port(data_dir: &Path) -> Option<u16> {
    // Pid files and names do not depend on the base port.
    let split = Layout {
        data_dir: data_dir.to_path_buf(),
        base_port: DEFAULT_BASE_PORT,
        settings: BTreeMap::new(),
        combined: false,
    };
    let combined = Layout {
        combined: true,
        ..split.clone()
    };
    let procs = split.processes().into_iter().chain(combined.processes());
    procs.into_iter().find_map(|p| {
        let pid = running_pid(&p)?;
        if p.role == Role::Combined {
            // Its controller listener, from the config file it was started with.
            let text = fs::read_to_string(combined.server_config_path(&p)).ok()?;
            let table: toml::Table = toml::from_str(&text).ok()?;
            let listeners = table.get("controller")?.get("listeners")?.as_str()?;
            let port: u16 = listeners.rsplit_once(':')?.1.parse().ok()?;
            return port.checked_sub(p.id);
        }
        let cmdline = fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let args: Vec<String> = cmdline
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let listener = args
            .iter()
            .position(|a| a == "--listeners")
            .and_then(|i| args.get(i + 1))?;
        // A broker's first entry is its gRPC listener (`GRPC://ip:port,PLAINTEXT://...`).
        let grpc = listener.split(',').next()?;
        let port: u16 = grpc.rsplit_once(':')?.1.parse().ok()?;
        match p.role {
            Role::Controller | Role::Combined => port.checked_sub(p.id),
            Role::Broker => port.checked_sub(99 + p.id),
        }
    })
}

/// Finds `name` next to the running executable, else on `PATH`.
pub fn find_binary(name: &str) -> Result<PathBuf, String> {
    if let Ok(exe) = std::env::current_exe()
        && let Some(dir) = exe.parent()
    {
        let candidate = dir.join(name);
        if candidate.is_file() {
            return Ok(candidate);
        }
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return Ok(candidate);
            }
        }
    }
    Err(format!(
        "{name} not found next to keelctl nor on PATH (build it with `cargo build --bins`)"
    ))
}

/// The pid recorded in `pid_file`, if the file exists and holds a number.
pub fn read_pid(pid_file: &Path) -> Option<i32> {
    fs::read_to_string(pid_file).ok()?.trim().parse().ok()
}

/// True when a process with `pid` exists and (where `/proc` tells) runs a Keel binary, so a
/// recycled pid is not mistaken for ours.
pub fn is_alive(pid: i32, role: Role) -> bool {
    let Some(p) = Pid::from_raw(pid) else {
        return false;
    };
    if test_kill_process(p).is_err() {
        return false;
    }
    match fs::read(format!("/proc/{pid}/cmdline")) {
        Ok(cmd) => {
            let cmd = String::from_utf8_lossy(&cmd);
            cmd.contains(role.binary())
        }
        Err(_) => !Path::new("/proc/self").exists(),
    }
}

/// True when a process with `pid` exists in any state, including one that is exiting after
/// a kill -9 (it may still hold its ports for a moment) or a zombie.
pub fn pid_exists(pid: i32) -> bool {
    Pid::from_raw(pid).is_some_and(|p| test_kill_process(p).is_ok())
}

/// The pid of the running process for `p`, if any.
pub fn running_pid(p: &ProcessSpec) -> Option<i32> {
    read_pid(&p.pid_file).filter(|pid| is_alive(*pid, p.role))
}

/// Formats the metadata log directories of a new quorum (`keel-controller format
/// --initial-controllers`, KIP-853) when none of `controllers` has been started or formatted
/// yet (no `meta.properties`): every controller gets the same list of voters with a new
/// directory id each, so the quorum's first membership records every replica key. Returns
/// whether it formatted; a cluster some of whose directories exist is left to its
/// directories (a controller whose directory was emptied starts on its own and is refused
/// by the others as a replaced disk, see the README).
///
/// Errors: a `format` that could not run or failed (its output).
pub fn format_new_quorum(
    layout: &Layout,
    controllers: &[&ProcessSpec],
    binary: &Path,
) -> Result<bool, String> {
    if controllers
        .iter()
        .any(|p| p.data_dir.join("meta.properties").exists())
    {
        return Ok(false);
    }
    let list: Vec<String> = controllers
        .iter()
        .map(|p| {
            format!(
                "{}@{}:{}",
                p.id,
                p.address,
                keel_metadata_log::raft_types::directory_id_text(uuid::Uuid::new_v4())
            )
        })
        .collect();
    let list = list.join(",");
    // A failure takes back the files written so far: the directories were empty.
    let undo = |formatted: usize| {
        for p in &controllers[..formatted] {
            let _ = fs::remove_file(p.data_dir.join("meta.properties"));
        }
    };
    for (i, p) in controllers.iter().enumerate() {
        fs::create_dir_all(&p.data_dir).map_err(|e| format!("{}: {e}", p.data_dir.display()))?;
        let mut cmd = Command::new(binary);
        for key in TLS_ENV {
            cmd.env_remove(key);
        }
        let out = cmd
            .arg("format")
            .args(layout.args(p))
            .args(["--initial-controllers", &list])
            .envs(&layout.settings)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| {
                undo(i);
                format!("cannot run {} format: {e}", binary.display())
            })?;
        if !out.status.success() {
            undo(i);
            return Err(format!(
                "formatting {} failed: {}",
                p.name(),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
    }
    Ok(true)
}

/// Starts `p` in the background (its own process group, so a Ctrl-C on keelctl's terminal
/// does not reach it), logging to its log file, and writes its pid file.
pub fn spawn(layout: &Layout, p: &ProcessSpec, binary: &Path) -> io::Result<Child> {
    fs::create_dir_all(&p.data_dir)?;
    if p.role == Role::Combined {
        keel_runtime::fs::write_atomic(
            &layout.server_config_path(p),
            layout.server_config(p).as_bytes(),
        )?;
    }
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&p.log_file)?;
    let mut cmd = Command::new(binary);
    // The TLS of a local cluster is `--tls` only: keelctl's own KEEL_TLS_* (its client
    // certificate) would otherwise reach every process as its settings.
    for key in TLS_ENV {
        cmd.env_remove(key);
    }
    let child = cmd
        .args(layout.args(p))
        .envs(&layout.settings)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .process_group(0)
        .spawn()?;
    let mut f = File::create(&p.pid_file)?;
    io::Write::write_all(&mut f, format!("{}\n", child.id()).as_bytes())?;
    Ok(child)
}

/// The last `n` lines of a log file (for error messages).
pub fn log_tail(path: &Path, n: usize) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// How a process was stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StopOutcome {
    /// It was not running.
    NotRunning,
    /// It exited after SIGTERM.
    Terminated,
    /// It ignored SIGTERM until the timeout and was killed with SIGKILL.
    Killed,
}

/// Sends SIGTERM to `p`, waits up to `timeout` for it to exit, then SIGKILL. Removes the pid
/// file.
pub fn stop(p: &ProcessSpec, timeout: Duration) -> StopOutcome {
    let outcome = match running_pid(p).and_then(Pid::from_raw) {
        None => StopOutcome::NotRunning,
        Some(pid) => {
            let _ = kill_process(pid, Signal::TERM);
            if wait_exit(pid.as_raw_nonzero().get(), p.role, timeout) {
                StopOutcome::Terminated
            } else {
                let _ = kill_process(pid, Signal::KILL);
                wait_exit(pid.as_raw_nonzero().get(), p.role, Duration::from_secs(5));
                StopOutcome::Killed
            }
        }
    };
    let _ = fs::remove_file(&p.pid_file);
    outcome
}

/// Polls until the process is gone; true if it exited within `timeout`.
pub fn wait_exit(pid: i32, role: Role, timeout: Duration) -> bool {
    let start = Instant::now();
    while is_alive(pid, role) {
        if start.elapsed() >= timeout {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_combined_layout_runs_three_servers_on_the_split_ports() {
        let mut l = Layout::new(PathBuf::from("/d"), DEFAULT_BASE_PORT).unwrap();
        l.combined = true;
        l.settings.insert("KEEL_NUM_PARTITIONS".into(), "3".into());
        l.settings
            .insert("KEEL_REPLICA_LAG_TIME_MAX_MS".into(), "5000".into());
        let procs = l.processes();
        assert_eq!(
            procs.iter().map(ProcessSpec::name).collect::<Vec<_>>(),
            ["server-1", "server-2", "server-3"]
        );
        let p = &procs[1];
        assert_eq!(p.address, "127.0.0.1:9094");
        assert_eq!(p.broker_address.as_deref(), Some("127.0.0.1:9193"));
        assert_eq!(p.kafka_address.as_deref(), Some("127.0.0.1:9294"));
        assert_eq!(p.metrics_address, "127.0.0.1:9394");
        assert_eq!(l.args(p), ["--config", "/d/server-2.toml"]);
        let text = l.server_config(p);
        let t: toml::Table = toml::from_str(&text).unwrap();
        assert_eq!(t["node_id"].as_integer(), Some(2));
        assert_eq!(t["data_dir"].as_str(), Some("/d/server-2"));
        assert_eq!(t["metrics_listener"].as_str(), Some("127.0.0.1:9394"));
        assert_eq!(
            t["controller"]["listeners"].as_str(),
            Some("127.0.0.1:9094")
        );
        assert_eq!(t["controller"]["num_partitions"].as_integer(), Some(3));
        assert_eq!(
            t["broker"]["listeners"].as_str(),
            Some("GRPC://127.0.0.1:9193,PLAINTEXT://127.0.0.1:9294")
        );
        assert_eq!(
            t["broker"]["replica_lag_time_max_ms"].as_integer(),
            Some(5000)
        );
        assert!(t["broker"].get("num_partitions").is_none(), "{text}");
        assert!(t["broker"].get("metrics_listener").is_none(), "{text}");
    }

    #[test]
    fn default_layout_matches_the_readme_ports() {
        let l = Layout::new(PathBuf::from("/d"), DEFAULT_BASE_PORT).unwrap();
        assert_eq!(
            l.voters(),
            "1@127.0.0.1:9093,2@127.0.0.1:9094,3@127.0.0.1:9095"
        );
        assert_eq!(
            l.broker_addresses(),
            vec!["127.0.0.1:9192", "127.0.0.1:9193", "127.0.0.1:9194"]
        );
        assert_eq!(
            l.kafka_addresses(),
            vec!["127.0.0.1:9293", "127.0.0.1:9294", "127.0.0.1:9295"]
        );
        let ps = l.processes();
        assert_eq!(ps.len(), 6);
        assert_eq!(ps[0].kafka_address, None);
        assert_eq!(ps[3].name(), "broker-1");
        assert_eq!(ps[3].pid_file, PathBuf::from("/d/broker-1.pid"));
        assert_eq!(
            l.args(&ps[3]),
            vec![
                "--node-id",
                "1",
                "--controller-quorum-voters",
                "1@127.0.0.1:9093,2@127.0.0.1:9094,3@127.0.0.1:9095",
                "--listeners",
                "GRPC://127.0.0.1:9192,PLAINTEXT://127.0.0.1:9293",
                "--log-dirs",
                "/d/broker-1",
                "--metrics-listener",
                "127.0.0.1:9403"
            ]
        );
        assert!(Layout::new(PathBuf::from("/d"), 65500).is_err());
        let low = Layout::new(PathBuf::from("/d"), 0).unwrap_err();
        assert!(low.contains("--base-port 0 is too low"), "{low}");
        assert!(Layout::new(PathBuf::from("/d"), 1023).is_err());
        assert!(Layout::new(PathBuf::from("/d"), 1024).is_ok());
    }

    #[test]
    fn the_first_layout_is_recorded_and_a_different_base_port_refused() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("keel-data");
        // Nothing recorded nor running: the given port, else the default.
        assert_eq!(Layout::read_recorded(&d).unwrap(), None);
        let (l, src) = resolve(&d, None).unwrap();
        assert_eq!((l.base_port, src), (DEFAULT_BASE_PORT, LayoutSource::Given));
        let (l, src) = resolve(&d, Some(21500)).unwrap();
        assert_eq!((l.base_port, src), (21500, LayoutSource::Given));

        fs::create_dir_all(&d).unwrap();
        l.record().unwrap();
        assert!(!d.join("cluster.toml.tmp").exists());
        assert_eq!(Layout::read_recorded(&d).unwrap(), Some(l.clone()));
        let (r, src) = resolve(&d, None).unwrap();
        assert_eq!((r, src), (l.clone(), LayoutSource::Recorded));
        assert_eq!(resolve(&d, Some(21500)).unwrap().0, l);
        let file = d.join("cluster.toml");
        assert_eq!(
            resolve(&d, Some(21700)).unwrap_err(),
            format!(
                "--base-port 21700 differs from base_port 21500 recorded in {}: omit --base-port to use 21500, or stop the cluster and remove {} to start a new one on other ports",
                file.display(),
                d.display()
            )
        );

        fs::write(&file, "# comment\nbase_port = \"x\"\n").unwrap();
        assert_eq!(
            resolve(&d, None).unwrap_err(),
            format!(
                "invalid {} (line 2): invalid type: string \"x\", expected u16",
                file.display()
            )
        );
        fs::write(&file, "base_port = 65500\n").unwrap();
        let err = resolve(&d, None).unwrap_err();
        assert!(err.contains("too high"), "{err}");
    }

    #[test]
    fn settings_are_the_binaries_env_vars_recorded_once() {
        let names = setting_names();
        // Each binary's keys, the config file variable, and nothing else.
        for name in [
            "KEEL_NUM_PARTITIONS",
            "KEEL_LOG_SEGMENT_BYTES",
            "KEEL_BROKER_SESSION_TIMEOUT_MS",
            "KEEL_CONFIG",
        ] {
            assert!(names.contains(name), "{name}: {names:?}");
        }
        assert!(!names.contains("KEEL_LOG"), "{names:?}");
        assert!(!names.contains("KEEL_BOOTSTRAP_BROKERS"), "{names:?}");
        let env = [
            ("KEEL_LOG_SEGMENT_BYTES", "1048576"),
            ("KEEL_BOOTSTRAP_BROKERS", "h:1"),
            ("PATH", "/bin"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()));
        let recorded = settings_from_env(&names, env);
        assert_eq!(
            recorded,
            BTreeMap::from([("KEEL_LOG_SEGMENT_BYTES".into(), "1048576".into())])
        );
        let ambient = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        assert!(settings_conflicts(&recorded, &ambient(&[])).is_empty());
        assert!(
            settings_conflicts(
                &recorded,
                &ambient(&[("KEEL_LOG_SEGMENT_BYTES", "1048576")])
            )
            .is_empty()
        );
        assert_eq!(
            settings_conflicts(
                &recorded,
                &ambient(&[("KEEL_LOG_SEGMENT_BYTES", "2"), ("KEEL_NODE_ID", "7")])
            ),
            [
                "KEEL_LOG_SEGMENT_BYTES=2 (recorded: 1048576)",
                "KEEL_NODE_ID=7 (not recorded)"
            ]
        );

        // Round trip through cluster.toml, with characters TOML must escape.
        let dir = tempfile::tempdir().unwrap();
        let mut l = Layout::new(dir.path().to_path_buf(), 21500).unwrap();
        l.settings = ambient(&[
            ("KEEL_NUM_PARTITIONS", "3"),
            ("KEEL_RACK", "a \"b\" \\ c\td"),
        ]);
        l.record().unwrap();
        assert_eq!(Layout::read_recorded(dir.path()).unwrap(), Some(l));
        let file = dir.path().join("cluster.toml");
        fs::write(&file, "base_port = 21500\n[settings]\nPATH = \"/x\"\n").unwrap();
        let err = Layout::read_recorded(dir.path()).unwrap_err();
        assert!(err.contains("\"PATH\" is not a KEEL_*"), "{err}");
        // A file written before settings were recorded still reads (no settings).
        fs::write(&file, "base_port = 21500\n").unwrap();
        let l = Layout::read_recorded(dir.path()).unwrap().unwrap();
        assert!(l.settings.is_empty());
    }

    #[test]
    fn liveness_checks_pid_and_binary() {
        // This test process is alive but is not a Keel binary: not "ours".
        let me = std::process::id() as i32;
        assert!(!is_alive(me, Role::Broker));
        assert!(!is_alive(i32::MAX, Role::Broker));
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("x.pid");
        assert_eq!(read_pid(&pid_file), None);
        fs::write(&pid_file, "1234\n").unwrap();
        assert_eq!(read_pid(&pid_file), Some(1234));
    }
}
