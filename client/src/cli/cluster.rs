//! `keelctl cluster up|down|status` and `keelctl broker shutdown`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use clap::Subcommand;
use serde::Serialize;

use super::{BrokerShutdownArgs, CliError, CliResult, Ctx};
use crate::format::cluster::{
    BrokerRow, QuorumStatus, broker_rows, brokers_text, quorum_status, quorum_status_text,
};
use crate::format::table_of;
use crate::local_cluster::{
    DEFAULT_BASE_PORT, LAYOUT_FILE, Layout, LayoutSource, ProcessSpec, Role, StopOutcome,
    find_binary, format_new_quorum, log_tail, pid_exists, read_pid, resolve, running_pid,
    running_settings, setting_names, settings_conflicts, settings_from_env, spawn, stop,
};

/// `keelctl cluster ...`
#[derive(Debug, Subcommand)]
pub enum ClusterCommand {
    /// Start 3 controllers and 3 brokers (with --combined: 3 keel-server processes, each a
    /// controller and a broker) in the background and wait until the quorum has a leader
    /// and every broker is registered and unfenced. Restarting keeps the data.
    Up(UpArgs),
    /// Stop the local cluster: SIGTERM (brokers first), SIGKILL after a timeout.
    Down(DownArgs),
    /// Each process (pid, alive?) and the cluster's quorum and broker summary.
    Status(LayoutArgs),
}

/// Where the local cluster lives.
#[derive(Debug, Clone, clap::Args)]
pub struct LayoutArgs {
    /// Data directory: per-process data, log files and pid files.
    #[arg(long, default_value = "./keel-data")]
    pub data_dir: PathBuf,
    /// Base port of a new cluster (default 9092): controllers listen on base+1..base+3,
    /// brokers on base+100..base+102. The first `up` records it in DIR/cluster.toml; later
    /// commands on DIR use the recorded one and refuse a different one. 1024 to 65222 (a
    /// value outside is a usage error, exit status 2).
    #[arg(long, value_parser = clap::value_parser!(u16).range(
        i64::from(crate::local_cluster::MIN_BASE_PORT)..=i64::from(crate::local_cluster::MAX_BASE_PORT)
    ))]
    pub base_port: Option<u16>,
}

/// Arguments of `cluster up`.
#[derive(Debug, clap::Args)]
pub struct UpArgs {
    #[command(flatten)]
    pub layout: LayoutArgs,
    /// How long to wait for the cluster to become healthy, seconds.
    #[arg(long, default_value_t = 60)]
    pub timeout_secs: u64,
    /// Run with TLS on every gRPC connection: makes a development CA and certificates in
    /// `<data dir>/tls/` (once; a data dir with them always runs with TLS) and starts every
    /// process with its certificate and `ssl_client_auth = required`. Other keelctl
    /// commands then need the KEEL_TLS_* variables `up` prints.
    #[arg(long)]
    pub tls: bool,
    /// With --tls: run Kafka's StandardAuthorizer on every process (once; a data dir with it
    /// always runs with it). Principals are the certificates' CNs; the processes and keelctl
    /// are super users; any other certificate (`keelctl tls dev-certs --dir <data dir>/tls
    /// NAME`) needs ACLs (`keelctl acl add`).
    #[arg(long, requires = "tls")]
    pub authorizer: bool,
    /// Kafka clients authenticate with SASL/SCRAM (SCRAM-SHA-256 or -512): the brokers'
    /// Kafka listeners are SASL_SSL with --tls, else SASL_PLAINTEXT (once; a data dir with it
    /// always runs with it). Users come from `keelctl user scram set`; with --authorizer
    /// they are User:NAME and need ACLs.
    #[arg(long)]
    pub sasl: bool,
    /// Kafka's combined mode (KIP-833), for development only: 3 `keel-server` processes,
    /// each running controller N and broker N on the same ports as the split cluster (once;
    /// a data dir keeps the mode it was created with). Not with --authorizer.
    #[arg(long, conflicts_with = "authorizer")]
    pub combined: bool,
}

/// Arguments of `cluster down`.
#[derive(Debug, clap::Args)]
pub struct DownArgs {
    #[command(flatten)]
    pub layout: LayoutArgs,
    /// How long to wait for each process after SIGTERM before SIGKILL, seconds.
    #[arg(long, default_value_t = 30)]
    pub timeout_secs: u64,
}

/// The cluster's layout: recorded in the data dir, else of its running processes, else
/// `--base-port` or the default (see [`resolve`]).
fn layout(a: &LayoutArgs) -> Result<(Layout, LayoutSource), CliError> {
    resolve(&a.data_dir, a.base_port).map_err(CliError::new)
}

pub(super) async fn run(c: ClusterCommand, ctx: &Ctx) -> CliResult {
    match c {
        ClusterCommand::Up(a) => up(a, ctx).await,
        ClusterCommand::Down(a) => down(a, ctx),
        ClusterCommand::Status(a) => status(a, ctx).await,
    }
}

/// Output of `cluster up`.
#[derive(Debug, Serialize)]
struct UpReport {
    /// The certificates' directory when the cluster runs with TLS.
    tls_dir: Option<String>,
    /// Whether the processes run the standard authorizer (`--authorizer`).
    authorizer: bool,
    already_running: bool,
    base_port: u16,
    started: Vec<String>,
    bootstrap_controllers: String,
    bootstrap_brokers: String,
    /// The brokers' Kafka-protocol listeners: `bootstrap.servers` of a Kafka client.
    kafka_bootstrap_servers: String,
    /// Kafka's `security.protocol` of those listeners: `SSL` in a TLS cluster (client
    /// certificates of `tls_dir`), `SASL_SSL` / `SASL_PLAINTEXT` with `--sasl`, else
    /// `PLAINTEXT`.
    kafka_security_protocol: &'static str,
    processes: Vec<ProcessRow>,
}

/// One process in `up` / `status` output.
#[derive(Debug, Serialize)]
struct ProcessRow {
    name: String,
    role: Role,
    id: u16,
    address: String,
    /// A broker's Kafka-protocol listener.
    kafka: Option<String>,
    /// `/metrics` and `/health/ready` of the process.
    metrics: String,
    pid: Option<i32>,
    alive: bool,
    log_file: String,
}

fn process_row(p: &ProcessSpec) -> ProcessRow {
    let pid = running_pid(p).or_else(|| crate::local_cluster::read_pid(&p.pid_file));
    ProcessRow {
        name: p.name(),
        role: p.role,
        id: p.id,
        address: p.address.clone(),
        kafka: p.kafka_address.clone(),
        metrics: format!("http://{}/metrics", p.metrics_address),
        pid,
        alive: running_pid(p).is_some(),
        log_file: p.log_file.display().to_string(),
    }
}

fn processes_text(rows: &[ProcessRow]) -> String {
    table_of(
        &[
            "PROCESS", "ADDRESS", "KAFKA", "METRICS", "PID", "ALIVE", "LOG",
        ],
        rows,
        |r| {
            vec![
                r.name.clone(),
                r.address.clone(),
                r.kafka.clone().unwrap_or_else(|| "-".into()),
                r.metrics.clone(),
                r.pid.map_or("-".into(), |p| p.to_string()),
                if r.alive { "yes" } else { "no" }.into(),
                r.log_file.clone(),
            ]
        },
    )
}

/// How long `up` waits for a process of the cluster that is still exiting (killed a moment
/// ago) to release its ports.
const EXIT_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// The first address of `procs` that another program holds. An address held while the pid
/// recorded for that process still exists (a kill -9 a moment ago: the process is exiting
/// and its sockets are not closed yet) is checked again every 50 ms for up to [`EXIT_WAIT`].
async fn taken_address_after_exits<'a>(
    procs: &[&'a ProcessSpec],
) -> Option<(&'a ProcessSpec, (String, std::io::Error))> {
    let deadline = std::time::Instant::now() + EXIT_WAIT;
    loop {
        let taken = procs
            .iter()
            .find_map(|p| p.taken_address().map(|t| (*p, t)));
        match &taken {
            Some((p, _))
                if std::time::Instant::now() < deadline
                    && read_pid(&p.pid_file).is_some_and(pid_exists) =>
            {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            _ => return taken,
        }
    }
}

/// `cluster up`: starts the processes of the local cluster that are not running, waits until
/// the cluster is healthy and prints its processes and bootstrap addresses. A failed start
/// stops what it started.
async fn up(a: UpArgs, ctx: &Ctx) -> CliResult {
    let (mut layout, source) = layout(&a.layout)?;
    if a.combined && !layout.combined {
        if source != LayoutSource::Given {
            return Err(CliError::new(format!(
                "the cluster in {} runs 3 controllers and 3 brokers: `cluster up --combined` \
                 needs a new data dir (--data-dir), or stop this one and remove it first",
                layout.data_dir.display()
            )));
        }
        layout.combined = true;
    }
    if layout.combined && (a.authorizer || layout.authorizer_on()) {
        return Err(CliError::new(
            "a combined cluster runs without --authorizer (its processes would need a \
             principal per role)",
        ));
    }
    create_data_dir(&layout)?;
    let procs = layout.processes();
    let missing: Vec<&ProcessSpec> = procs.iter().filter(|p| running_pid(p).is_none()).collect();
    let already_running = missing.is_empty();
    let mut children: Vec<(ProcessSpec, Child)> = Vec::new();
    // Ports held by another program (often another local cluster on the same base port): its
    // answers would pass the health check while our processes die. Checked before the layout
    // is recorded, so a refused directory keeps no port choice.
    refuse_taken_ports(&missing).await?;
    if a.tls && !layout.tls_on() {
        if missing.len() != procs.len() {
            return Err(CliError::new(format!(
                "the cluster in {} runs without TLS: stop it (`keelctl cluster down`) before \
                 `cluster up --tls`",
                layout.data_dir.display()
            )));
        }
        layout.enable_tls().map_err(CliError::new)?;
    }
    if a.authorizer && !layout.authorizer_on() {
        if missing.len() != procs.len() {
            return Err(CliError::new(format!(
                "the cluster in {} runs without the authorizer: stop it (`keelctl cluster \
                 down`) before `cluster up --tls --authorizer`",
                layout.data_dir.display()
            )));
        }
        layout.enable_authorizer().map_err(CliError::new)?;
    }
    if a.sasl && !layout.sasl_on() {
        if missing.len() != procs.len() {
            return Err(CliError::new(format!(
                "the cluster in {} runs without SASL: stop it (`keelctl cluster down`) before \
                 `cluster up --sasl`",
                layout.data_dir.display()
            )));
        }
        layout.enable_sasl().map_err(CliError::new)?;
    }
    let binaries = Binaries::find(&layout)?;
    settle_settings(&mut layout, source, &procs)?;
    // A combined cluster's controllers start unformatted on their static voters, as a
    // `keel-controller` may (keel-server has no `format` yet).
    if !already_running && !layout.combined {
        let controllers: Vec<&ProcessSpec> = procs
            .iter()
            .filter(|p| p.role == Role::Controller)
            .collect();
        if let Err(e) = format_new_quorum(&layout, &controllers, binaries.of(Role::Controller)) {
            // As for a failed start: a first `up` takes back its record.
            if source != LayoutSource::Recorded && missing.len() == procs.len() {
                let _ = std::fs::remove_file(Layout::file(&layout.data_dir));
            }
            return Err(CliError::new(format!("{e}; nothing was started")));
        }
    }
    if !already_running {
        let timeout = Duration::from_secs(a.timeout_secs);
        let started = start_and_wait(&layout, &missing, &binaries, ctx, timeout, &mut children);
        if let Err(f) = started.await {
            // Never leave a half-started cluster behind: stop what this call started. A first
            // `up` that failed also takes back its record, so a retry may choose other ports
            // or settings (a bad setting is the usual reason for the failure).
            let stopped = stop_started(&mut children);
            if source != LayoutSource::Recorded && missing.len() == procs.len() {
                let _ = std::fs::remove_file(Layout::file(&layout.data_dir));
            }
            return Err(CliError::new(start_failure_message(f, &stopped)));
        }
    }
    let report = UpReport {
        tls_dir: layout
            .tls_on()
            .then(|| layout.tls_dir().display().to_string()),
        authorizer: layout.authorizer_on(),
        already_running,
        base_port: layout.base_port,
        started: children.iter().map(|(p, _)| p.name()).collect(),
        bootstrap_controllers: layout.controller_addresses().join(","),
        bootstrap_brokers: layout.broker_addresses().join(","),
        kafka_bootstrap_servers: layout.kafka_addresses().join(","),
        kafka_security_protocol: layout.kafka_security_protocol(),
        processes: procs.iter().map(process_row).collect(),
    };
    if ctx.json {
        return ctx.print_json(&report);
    }
    out!("{}", up_text(&report, &layout.data_dir));
    Ok(())
}

/// Creates the data dir of `layout` (and its parents) if missing; errors name the dir.
fn create_data_dir(layout: &Layout) -> CliResult {
    std::fs::create_dir_all(&layout.data_dir).map_err(|e| {
        CliError::new(format!(
            "cannot create data dir {}: {e}",
            layout.data_dir.display()
        ))
    })
}

/// Fails when another program holds an address of a process `up` is about to start (after
/// giving an exiting process of the cluster [`EXIT_WAIT`] to release it).
async fn refuse_taken_ports(missing: &[&ProcessSpec]) -> CliResult {
    match taken_address_after_exits(missing).await {
        Some((p, (addr, e))) => Err(CliError::new(format!(
            "cannot start {}: {addr} is already in use ({e}); another cluster or program \
             listens there: stop it, or use another --data-dir with another --base-port",
            p.name()
        ))),
        None => Ok(()),
    }
}

/// The executables of the cluster's processes, found next to keelctl or on the PATH.
struct Binaries {
    /// By role: only those the layout runs.
    found: Vec<(Role, PathBuf)>,
}

impl Binaries {
    /// Finds the executables of `layout`'s processes ([`find_binary`]): `keel-controller`
    /// and `keel-broker`, or `keel-server` for a combined cluster; an error names the one
    /// not found.
    fn find(layout: &Layout) -> Result<Binaries, CliError> {
        let roles: &[Role] = if layout.combined {
            &[Role::Combined]
        } else {
            &[Role::Controller, Role::Broker]
        };
        let found = roles
            .iter()
            .map(|r| Ok((*r, find_binary(r.binary()).map_err(CliError::new)?)))
            .collect::<Result<_, CliError>>()?;
        Ok(Binaries { found })
    }

    /// The executable of processes of `role` (found by [`Self::find`] for the layout).
    fn of(&self, role: Role) -> &Path {
        self.found
            .iter()
            .find(|(r, _)| *r == role)
            .map(|(_, p)| p.as_path())
            .expect("Binaries::find looked for every role of the layout")
    }
}

/// Settles the cluster's settings (the KEEL_* variables of this environment that the binaries
/// read): recorded by the first `up`; a later `up` applies the recorded ones and refuses a
/// different value rather than start processes with settings that differ from the running
/// ones. Records `layout` unless it was read from its file. Errors: a recorded name that is
/// no setting, a conflicting variable, a cluster.toml that cannot be written.
fn settle_settings(layout: &mut Layout, source: LayoutSource, procs: &[ProcessSpec]) -> CliResult {
    let names = recordable_settings(layout, procs);
    if let Some(unknown) = layout.settings.keys().find(|k| !names.contains(*k)) {
        return Err(CliError::new(format!(
            "[settings] in {} names {unknown}, which is not a setting keel-controller or \
             keel-broker reads (see the README's configuration tables) or one `cluster up` passes as a flag: fix \
             or remove it",
            Layout::file(&layout.data_dir).display()
        )));
    }
    // `vars_os`: `vars` panics on a variable that is not UTF-8 (anywhere in the environment).
    let vars = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)));
    let ambient = settings_from_env(&names, vars);
    // The cluster's settings: recorded, else (cluster.toml gone while processes run) those
    // the running processes have, else this environment's (a first `up`).
    let established = match source {
        LayoutSource::Recorded => Some(layout.settings.clone()),
        LayoutSource::Running => running_settings(layout, &names),
        LayoutSource::Given => None,
    };
    if let Some(established) = &established {
        let conflicts = settings_conflicts(established, &ambient);
        if !conflicts.is_empty() {
            return Err(CliError::new(settings_conflict_message(
                layout, source, &conflicts,
            )));
        }
    }
    if source != LayoutSource::Recorded {
        layout.settings = established.unwrap_or(ambient);
        layout.record().map_err(|e| {
            CliError::new(format!(
                "cannot write {}: {e}",
                Layout::file(&layout.data_dir).display()
            ))
        })?;
    }
    Ok(())
}

/// The setting variables `up` records and compares (pure): every `KEEL_*` setting of the
/// binaries except those for the per-process keys `up` always passes as flags (node id,
/// listeners, data dir, ...), on which a variable would have no effect.
fn recordable_settings(layout: &Layout, procs: &[ProcessSpec]) -> BTreeSet<String> {
    let mut names = setting_names();
    // A local cluster's TLS is `--tls` (per-process certificates), never the environment:
    // keelctl's own KEEL_TLS_* variables must not reach the processes.
    for key in crate::local_cluster::TLS_ENV {
        names.remove(key);
    }
    for p in procs {
        for flag in layout
            .flag_args(p)
            .iter()
            .filter_map(|a| a.strip_prefix("--"))
        {
            names.remove(&format!("KEEL_{}", flag.to_uppercase().replace('-', "_")));
        }
    }
    names
}

/// The error message for settings of this environment (`conflicts`, one entry each) that
/// differ from the cluster's, with what to do: edit the recorded file, or (no file: it is
/// rebuilt from the running processes) restart the cluster with the new values (pure).
fn settings_conflict_message(
    layout: &Layout,
    source: LayoutSource,
    conflicts: &[String],
) -> String {
    let (whose, or_else) = if source == LayoutSource::Recorded {
        (
            format!(
                "the [settings] recorded in {} by the first `cluster up`",
                Layout::file(&layout.data_dir).display()
            ),
            "edit that file and restart (`keelctl cluster down`, then `keelctl cluster \
             up`)",
        )
    } else {
        (
            format!(
                "those of the processes running from {}",
                layout.data_dir.display()
            ),
            "stop the cluster (`keelctl cluster down`) and start it with them \
             (`keelctl cluster up`)",
        )
    };
    format!(
        "settings differ from {whose}: {}; unset them, or {or_else}",
        conflicts.join(", ")
    )
}

/// Spawns the `missing` processes (pushing each onto `children`) and waits up to `timeout`
/// for the cluster to become healthy; stops at the first process that cannot be spawned.
async fn start_and_wait(
    layout: &Layout,
    missing: &[&ProcessSpec],
    binaries: &Binaries,
    ctx: &Ctx,
    timeout: Duration,
    children: &mut Vec<(ProcessSpec, Child)>,
) -> Result<(), StartFailure> {
    for p in missing {
        match spawn(layout, p, binaries.of(p.role)) {
            Ok(child) => children.push(((*p).clone(), child)),
            Err(e) => {
                return Err(StartFailure {
                    summary: format!("cannot start {}: {e}", p.name()),
                    detail: None,
                });
            }
        }
    }
    wait_healthy(layout, ctx, children, timeout).await
}

/// The error message of a failed `up` (pure): the failure, what was stopped (`stopped`:
/// process names), then the failure's detail if any.
fn start_failure_message(f: StartFailure, stopped: &[String]) -> String {
    let stopped = if stopped.is_empty() {
        "nothing was started".to_string()
    } else {
        format!("stopped what this call started: {}", stopped.join(", "))
    };
    match f.detail {
        Some(d) => format!("{}; {stopped}; {d}", f.summary),
        None => format!("{}; {stopped}", f.summary),
    }
}

/// The text output of `cluster up` (pure): what happened, the process table and the
/// `export` lines of the bootstrap addresses.
fn up_text(report: &UpReport, data_dir: &Path) -> String {
    let headline = if report.already_running {
        format!(
            "The local cluster in {} is already running.",
            data_dir.display()
        )
    } else {
        format!(
            "Local cluster is up (started {}).",
            report.started.join(", ")
        )
    };
    let tls = match &report.tls_dir {
        Some(dir) => {
            format!(
                "# TLS on every gRPC connection (certificates in {dir}):\n\
             export KEEL_TLS_CA_FILE={dir}/ca.pem\n\
             export KEEL_TLS_CERT_FILE={dir}/{cert}.pem\n\
             export KEEL_TLS_KEY_FILE={dir}/{cert}-key.pem\n",
                cert = crate::local_cluster::KEELCTL_CERT
            ) + if report.authorizer {
                "# Authorizer on: keelctl's certificate is a super user; certificates for others \
             (keelctl tls dev-certs --dir <that dir> NAME) are User:NAME and need ACLs \
             (keelctl acl add)\n"
            } else {
                ""
            }
        }
        None => String::new(),
    };
    // A TLS cluster's Kafka listeners are SSL (librdkafka's property names; the Java client
    // takes PEM files as ssl.truststore.type/ssl.keystore.type=PEM).
    let sasl = report.kafka_security_protocol.starts_with("SASL_");
    let kafka_tls = match &report.tls_dir {
        // SASL_SSL asks for no client certificate (KIP-684): SASL says who the client is.
        Some(dir) if sasl => format!(
            " security.protocol=SASL_SSL ssl.ca.location={dir}/ca.pem \
             sasl.mechanism=SCRAM-SHA-256 sasl.username=NAME sasl.password=PASSWORD"
        ),
        Some(dir) => format!(
            " security.protocol=SSL ssl.ca.location={dir}/ca.pem \
             ssl.certificate.location={dir}/{cert}.pem ssl.key.location={dir}/{cert}-key.pem",
            cert = crate::local_cluster::KEELCTL_CERT
        ),
        None if sasl => " security.protocol=SASL_PLAINTEXT sasl.mechanism=SCRAM-SHA-256 \
                         sasl.username=NAME sasl.password=PASSWORD"
            .to_string(),
        None => String::new(),
    } + if sasl {
        "\n# SASL/SCRAM users: keelctl user scram set --user NAME --password PASSWORD"
    } else {
        ""
    };
    format!(
        "{headline}\n{}\nexport KEEL_BOOTSTRAP_CONTROLLERS={}\nexport KEEL_BOOTSTRAP_BROKERS={}\n\
         {tls}# Kafka clients (kcat, librdkafka, the Java and Python clients): bootstrap.servers={}{kafka_tls}\n",
        processes_text(&report.processes),
        report.bootstrap_controllers,
        report.bootstrap_brokers,
        report.kafka_bootstrap_servers
    )
}

/// Why `up` gave up: a one-line summary and more lines (a log tail) to print after it.
struct StartFailure {
    summary: String,
    detail: Option<String>,
}

/// Stops the processes this `up` started (brokers first, SIGKILL after 15 s) and reaps them;
/// returns their names.
fn stop_started(children: &mut [(ProcessSpec, Child)]) -> Vec<String> {
    children.sort_by_key(|(p, _)| p.role == Role::Controller);
    children
        .iter_mut()
        .map(|(p, child)| {
            stop(p, Duration::from_secs(15));
            let _ = child.kill();
            let _ = child.wait();
            p.name()
        })
        .collect()
}

/// Polls until the quorum has a leader and all brokers are registered and unfenced, failing
/// early when a started process exits.
async fn wait_healthy(
    layout: &Layout,
    ctx: &Ctx,
    children: &mut [(ProcessSpec, Child)],
    timeout: Duration,
) -> Result<(), StartFailure> {
    let mut cfg = crate::admin::AdminConfig::new(layout.controller_addresses());
    cfg.request_timeout = Duration::from_secs(2).min(ctx.request_timeout);
    cfg.max_attempts = 3;
    cfg.dialer = layout.dialer().map_err(|summary| StartFailure {
        summary,
        detail: None,
    })?;
    let admin = crate::admin::Admin::new(cfg).map_err(|e| StartFailure {
        summary: e.to_string(),
        detail: None,
    })?;
    let start = Instant::now();
    loop {
        for (p, child) in children.iter_mut() {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(StartFailure {
                    summary: format!("{} exited during startup ({status})", p.name()),
                    detail: Some(format!(
                        "last log lines of {}:\n{}",
                        p.log_file.display(),
                        log_tail(&p.log_file, 10)
                    )),
                });
            }
        }
        let last = match health(&admin, children).await {
            // Healthy, and every process this call started is still the one answering (none
            // exited meanwhile: their ports were free when they started).
            Ok(())
                if children
                    .iter_mut()
                    .all(|(_, c)| matches!(c.try_wait(), Ok(None))) =>
            {
                return Ok(());
            }
            Ok(()) => "a started process exited".to_string(),
            Err(e) => e,
        };
        if start.elapsed() >= timeout {
            return Err(StartFailure {
                summary: format!("the cluster did not become healthy within {timeout:?}: {last}"),
                detail: Some(format!("logs in {}", layout.data_dir.display())),
            });
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Healthy: the quorum has a leader and every controller is caught up, all brokers are
/// registered and unfenced, and each broker this `up` started says so itself on
/// `/health/ready`. The last check matters after a kill -9: the dead incarnation's
/// registration stays unfenced until its session expires (`broker_session_timeout_ms`), and
/// the new process is refused (DUPLICATE_BROKER_REGISTRATION) until then.
async fn health(
    admin: &crate::admin::Admin,
    started: &[(ProcessSpec, Child)],
) -> Result<(), String> {
    let q = admin.describe_quorum().await.map_err(|e| e.to_string())?;
    if q.leader_id < 0 {
        return Err("the quorum has no leader".into());
    }
    // Every controller caught up: reads go to any controller, and a restarted one must not
    // answer with a metadata image older than writes already acknowledged.
    if let Some(v) = q.voters.iter().find(|v| v.lag != 0) {
        return Err(format!(
            "controller {} is catching up (lag {} entries)",
            v.replica_id, v.lag
        ));
    }
    let c = admin.describe_cluster().await.map_err(|e| e.to_string())?;
    let ready: Vec<i32> = c
        .brokers
        .iter()
        .filter(|b| !b.fenced && !b.in_controlled_shutdown)
        .map(|b| b.broker_id)
        .collect();
    let want: Vec<i32> = (1..=i32::from(crate::local_cluster::NODES)).collect();
    if !want.iter().all(|id| ready.contains(id)) {
        return Err(format!("unfenced brokers so far: {ready:?}"));
    }
    for (p, _) in started.iter().filter(|(p, _)| p.role.has_broker()) {
        probe_ready(&p.metrics_address)
            .await
            .map_err(|why| format!("{} not ready yet: {why}", p.name()))?;
    }
    Ok(())
}

/// `GET /health/ready` on a process's metrics listener (HTTP/1.0, 2 s bound): Ok on 200,
/// else the status line and body, or the connection error.
async fn probe_ready(addr: &str) -> Result<(), String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let exchange = async {
        let mut s = tokio::net::TcpStream::connect(addr).await?;
        s.write_all(b"GET /health/ready HTTP/1.0\r\nHost: keelctl\r\n\r\n")
            .await?;
        let mut reply = Vec::new();
        // The endpoint's replies are one short line; 4 KiB bounds a misbehaving peer.
        s.take(4096).read_to_end(&mut reply).await?;
        Ok::<_, std::io::Error>(String::from_utf8_lossy(&reply).into_owned())
    };
    let reply = tokio::time::timeout(Duration::from_secs(2), exchange)
        .await
        .map_err(|_| format!("{addr}: no answer within 2 s"))?
        .map_err(|e| format!("{addr}: {e}"))?;
    let status = reply.lines().next().unwrap_or("");
    if status.split_whitespace().nth(1) == Some("200") {
        Ok(())
    } else {
        let body = reply.split("\r\n\r\n").nth(1).unwrap_or("").trim();
        Err(format!("{status} {body}").trim().to_string())
    }
}

/// Output of `cluster down`.
#[derive(Debug, Serialize)]
struct DownRow {
    name: String,
    outcome: StopOutcome,
}

fn down(a: DownArgs, ctx: &Ctx) -> CliResult {
    // `down` needs only the pid files, named alike for every base port: an unreadable or
    // invalid cluster.toml (say, a [settings] edit gone wrong) must not keep the cluster up.
    let layout = match Layout::read_recorded(&a.layout.data_dir) {
        Err(e) => {
            eprintln!("keelctl: warning: {e}; stopping the processes by their pid files");
            Layout::new(a.layout.data_dir.clone(), DEFAULT_BASE_PORT).map_err(CliError::new)?
        }
        Ok(_) => {
            let (layout, source) = layout(&a.layout)?;
            if source == LayoutSource::Given {
                return Err(no_cluster_in(
                    "cluster down",
                    &a.layout.data_dir,
                    "nothing to stop",
                ));
            }
            layout
        }
    };
    let timeout = Duration::from_secs(a.timeout_secs);
    // Brokers first: their controlled shutdown needs the controllers.
    let mut procs = layout.processes();
    procs.sort_by_key(|p| p.role == Role::Controller);
    let rows: Vec<DownRow> = procs
        .iter()
        .map(|p| DownRow {
            name: p.name(),
            outcome: stop(p, timeout),
        })
        .collect();
    if ctx.json {
        return ctx.print_json(&rows);
    }
    let text = table_of(&["PROCESS", "RESULT"], &rows, |r| {
        vec![
            r.name.clone(),
            match r.outcome {
                StopOutcome::NotRunning => "not running",
                StopOutcome::Terminated => "stopped (SIGTERM)",
                StopOutcome::Killed => "killed (SIGKILL after timeout)",
            }
            .into(),
        ]
    });
    out!("{text}");
    Ok(())
}

/// The error of `command` on a data dir that holds no cluster (no layout file, no process
/// running from it), saying why and `then` what to do (exit 1).
fn no_cluster_in(command: &str, data_dir: &std::path::Path, then: &str) -> CliError {
    let why = if data_dir.is_dir() {
        format!("no {LAYOUT_FILE} in it and no process running from it")
    } else {
        "no such directory".into()
    };
    CliError::new(format!(
        "{command}: no local cluster in {} ({why}); {then}",
        data_dir.display()
    ))
}

/// Output of `cluster status`.
#[derive(Debug, Serialize)]
struct StatusReport {
    base_port: u16,
    processes: Vec<ProcessRow>,
    quorum: Option<QuorumStatus>,
    brokers: Option<Vec<BrokerRow>>,
    error: Option<String>,
}

/// `cluster status`: prints what it finds, and fails (exit 1, one line on stderr) when the
/// data dir holds no cluster, a process is down or the quorum is unreachable or leaderless.
async fn status(a: LayoutArgs, ctx: &Ctx) -> CliResult {
    let (layout, source) = layout(&a)?;
    if source == LayoutSource::Given {
        let dir = a.data_dir.display();
        return Err(no_cluster_in(
            "cluster status",
            &a.data_dir,
            &format!("start one with `keelctl cluster up --data-dir {dir}`"),
        ));
    }
    let processes: Vec<ProcessRow> = layout.processes().iter().map(process_row).collect();
    let mut problems: Vec<String> = Vec::new();
    let down: Vec<&str> = processes
        .iter()
        .filter(|p| !p.alive)
        .map(|p| p.name.as_str())
        .collect();
    let (quorum, brokers) = if down.len() == processes.len() {
        problems.push(format!(
            "no process of the local cluster in {} is running",
            layout.data_dir.display()
        ));
        (None, None)
    } else {
        if !down.is_empty() {
            problems.push(format!("not running: {}", down.join(", ")));
        }
        let mut cfg = crate::admin::AdminConfig::new(layout.controller_addresses());
        cfg.request_timeout = Duration::from_secs(2).min(ctx.request_timeout);
        cfg.max_attempts = 4;
        cfg.dialer = layout.dialer().map_err(CliError::new)?;
        let admin = crate::admin::Admin::new(cfg)?;
        let q = admin.describe_quorum().await;
        let c = admin.describe_cluster().await;
        match (q, c) {
            (Ok(q), Ok(c)) => {
                if q.leader_id < 0 {
                    problems.push("the quorum has no leader".into());
                }
                (Some(quorum_status(&q)), Some(broker_rows(&c)))
            }
            (Err(e), _) | (_, Err(e)) => {
                problems.push(e.to_string());
                (None, None)
            }
        }
    };
    let error = (!problems.is_empty()).then(|| problems.join("; "));
    let report = StatusReport {
        base_port: layout.base_port,
        processes,
        quorum,
        brokers,
        error,
    };
    if ctx.json {
        ctx.print_json(&report)?;
    } else {
        out!("{}", processes_text(&report.processes));
        if let Some(q) = &report.quorum {
            outln!();
            out!("{}", quorum_status_text(q));
        }
        if let Some(b) = &report.brokers {
            outln!();
            out!("{}", brokers_text(b));
        }
    }
    match report.error {
        Some(e) => Err(CliError::new(format!("cluster status: {e}"))),
        None => Ok(()),
    }
}

/// `broker shutdown ID`: the controller API has no operator RPC for a controlled shutdown
/// (only the broker's own heartbeat can ask for one), so this signals the local cluster's
/// broker process, whose SIGTERM handler runs the controlled shutdown.
pub(super) async fn shutdown_broker(a: BrokerShutdownArgs, ctx: &Ctx) -> CliResult {
    let (layout, _) = resolve(&a.data_dir, None).map_err(CliError::new)?;
    let p = layout
        .processes()
        .into_iter()
        .find(|p| p.role.has_broker() && p.id == a.id)
        .ok_or_else(|| {
            CliError::new(format!(
                "broker {} is not part of the local cluster (ids 1..={}); the controller API has no operator RPC for a controlled shutdown",
                a.id,
                crate::local_cluster::NODES
            ))
        })?;
    if running_pid(&p).is_none() {
        return Err(CliError::new(format!(
            "broker {} is not running from {} (no live pid in {}); the controller API has no operator RPC for a controlled shutdown of other brokers",
            a.id,
            a.data_dir.display(),
            p.pid_file.display()
        )));
    }
    let outcome = stop(&p, Duration::from_secs(a.timeout_secs));
    if ctx.json {
        return ctx.print_json(&serde_json::json!({"broker": a.id, "outcome": outcome}));
    }
    match outcome {
        StopOutcome::Terminated if p.role == Role::Combined => outln!(
            "broker {} completed a controlled shutdown and exited, and so did controller {} \
             (the same process: combined mode)",
            a.id,
            a.id
        ),
        StopOutcome::Terminated => {
            outln!("broker {} completed a controlled shutdown and exited", a.id)
        }
        StopOutcome::Killed => outln!(
            "broker {} did not finish its controlled shutdown within {}s and was killed",
            a.id,
            a.timeout_secs
        ),
        StopOutcome::NotRunning => outln!("broker {} was not running", a.id),
    }
    Ok(())
}
