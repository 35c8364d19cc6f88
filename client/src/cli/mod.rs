//! The `keelctl` command line: clap definitions and dispatch. Output goes through the pure
//! functions of [`crate::format`]; errors print one line on stderr and exit with status 1.

/// `print!` to stdout; exits quietly (status 141, like SIGPIPE) when the reader went away.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::cli::write_stdout(&format!($($arg)*))
    };
}

/// `println!` through [`write_stdout`].
macro_rules! outln {
    () => {
        $crate::cli::write_stdout("\n")
    };
    ($($arg:tt)*) => {
        $crate::cli::write_stdout(&format!("{}\n", format_args!($($arg)*)))
    };
}

mod acl;
mod cluster;
mod config;
mod data;
mod delete_records;
mod group;
mod log;
mod metadata;
mod partition;
mod reassign;
mod tls;
mod topic;
mod user;

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use serde::Serialize;

use crate::admin::{Admin, AdminConfig};
use crate::format::cluster::{
    broker_rows, brokers_text, quorum_status, quorum_status_text, replication_rows,
    replication_text,
};

/// Controller addresses of the default local cluster (`keelctl cluster up`).
pub const DEFAULT_CONTROLLERS: &str = "127.0.0.1:9093,127.0.0.1:9094,127.0.0.1:9095";

/// Command line of `keelctl`.
#[derive(Debug, Parser)]
#[command(
    name = "keelctl",
    version,
    about = "Keel CLI: local cluster, topics, partitions, brokers, consumer groups, quorum, metadata log, segment dumps, produce, consume, verify",
    propagate_version = true
)]
pub struct Cli {
    /// Controller addresses (host:port, comma separated); any one will do, writes are
    /// redirected to the active controller.
    #[arg(
        long,
        global = true,
        help_heading = "Global options",
        env = "KEEL_BOOTSTRAP_CONTROLLERS",
        default_value = DEFAULT_CONTROLLERS,
        value_delimiter = ','
    )]
    pub bootstrap_controllers: Vec<String>,
    /// Broker addresses (host:port, comma separated) asked for replica state (HW); default:
    /// the endpoints the brokers registered.
    #[arg(
        long,
        global = true,
        help_heading = "Global options",
        env = "KEEL_BOOTSTRAP_BROKERS",
        value_delimiter = ','
    )]
    pub bootstrap_brokers: Option<Vec<String>>,
    /// Print JSON instead of human-readable text.
    #[arg(long, global = true, help_heading = "Global options")]
    pub json: bool,
    /// Deadline of one request to a controller or broker, ms, 1 to 3,600,000 (Kafka:
    /// request.timeout.ms).
    #[arg(
        long,
        global = true,
        help_heading = "Global options",
        default_value_t = 10_000,
        // `-5` is taken as this flag's value and refused naming the flag (not clap's
        // "unexpected argument '-5'").
        allow_negative_numbers = true,
        value_parser = clap::value_parser!(u64).range(1..=3_600_000)
    )]
    pub request_timeout_ms: u64,
    /// Budget of one admin operation, retries included, ms (Kafka: default.api.timeout.ms):
    /// unreachable controllers, NOT_CONTROLLER and elections are retried until it runs out;
    /// 1 to 86,400,000.
    #[arg(
        long,
        global = true,
        help_heading = "Global options",
        default_value_t = 60_000,
        // `-5` is taken as this flag's value and refused naming the flag (not clap's
        // "unexpected argument '-5'").
        allow_negative_numbers = true,
        value_parser = clap::value_parser!(u64).range(1..=86_400_000)
    )]
    pub api_timeout_ms: u64,
    /// Accept reads from any controller, also one in contact with no active controller (cut
    /// off from the quorum, or restarted and not caught up): its answer may be out of date,
    /// and a warning names it. Without it reads are served by the active controller, so they
    /// see every change acknowledged before them.
    #[arg(
        long,
        global = true,
        help_heading = "Global options",
        env = "KEEL_ALLOW_STALE"
    )]
    pub allow_stale: bool,
    /// PEM CA certificates the controllers' and brokers' certificates must chain to: with
    /// it every connection uses TLS (Kafka: ssl.truststore.certificates). The certificates
    /// must name the host given in the addresses (DNS or IP SAN).
    #[arg(
        long,
        global = true,
        help_heading = "Global options",
        env = "KEEL_TLS_CA_FILE",
        value_name = "PEM"
    )]
    pub tls_ca_file: Option<std::path::PathBuf>,
    /// PEM certificate chain presented to servers that ask for one (`ssl_client_auth`),
    /// with --tls-key-file (Kafka: ssl.keystore.certificate.chain).
    #[arg(
        long,
        global = true,
        help_heading = "Global options",
        env = "KEEL_TLS_CERT_FILE",
        value_name = "PEM"
    )]
    pub tls_cert_file: Option<std::path::PathBuf>,
    /// PEM private key of --tls-cert-file (Kafka: ssl.keystore.key).
    #[arg(
        long,
        global = true,
        help_heading = "Global options",
        env = "KEEL_TLS_KEY_FILE",
        value_name = "PEM"
    )]
    pub tls_key_file: Option<std::path::PathBuf>,
    /// A Kafka client properties file (as Kafka's tools take): `security.protocol`,
    /// `ssl.ca.location` / `ssl.truststore.location`, `ssl.certificate.location`,
    /// `ssl.key.location`, `ssl.keystore.location` (PEM). Flags and KEEL_TLS_* variables win
    /// over it; other keys are ignored with a note on stderr.
    #[arg(
        long,
        global = true,
        help_heading = "Global options",
        env = "KEEL_COMMAND_CONFIG",
        value_name = "FILE"
    )]
    pub command_config: Option<std::path::PathBuf>,
    /// SASL/SCRAM user for keelctl's own connections (#23): keelctl first gets a session
    /// token from the controllers (ScramAuthenticate) and sends it on every request, so the
    /// authorizer sees `User:<name>` (Kafka: sasl.username).
    #[arg(
        long,
        global = true,
        help_heading = "Global options",
        env = "KEEL_SASL_USERNAME"
    )]
    pub sasl_username: Option<String>,
    /// Password of --sasl-username (Kafka: sasl.password). Visible in the process list:
    /// prefer the variable or --command-config.
    #[arg(
        long,
        global = true,
        help_heading = "Global options",
        env = "KEEL_SASL_PASSWORD",
        hide_env_values = true
    )]
    pub sasl_password: Option<String>,
    /// SCRAM-SHA-256 (default) or SCRAM-SHA-512 (Kafka: sasl.mechanism).
    #[arg(
        long,
        global = true,
        help_heading = "Global options",
        env = "KEEL_SASL_MECHANISM"
    )]
    pub sasl_mechanism: Option<String>,
    #[command(subcommand)]
    pub command: Command,
}

impl Cli {
    /// The dialer of the TLS flags: plaintext without --tls-ca-file.
    ///
    /// Errors: a usage error (exit 2) for a certificate without its key (or the reverse) or
    /// either without --tls-ca-file; an error naming the file when one cannot be read.
    pub fn dialer(&self) -> Result<keel_runtime::tls::Dialer, CliError> {
        use keel_runtime::tls::{ClientAuth, Dialer, TlsContext, TlsFiles};
        let file = self.properties()?;
        let (tls_cert_file, tls_key_file, tls_ca_file) =
            if self.tls_cert_file.is_some() || self.tls_key_file.is_some() {
                (
                    self.tls_cert_file.clone(),
                    self.tls_key_file.clone(),
                    self.tls_ca_file.clone().or(file.tls_ca_file),
                )
            } else {
                (
                    file.tls_cert_file,
                    file.tls_key_file,
                    self.tls_ca_file.clone().or(file.tls_ca_file),
                )
            };
        let identity = match (&tls_cert_file, &tls_key_file) {
            (Some(c), Some(k)) => Some((c.clone(), k.clone())),
            (None, None) => None,
            (Some(_), None) => return Err(CliError::usage("--tls-cert-file needs --tls-key-file")),
            (None, Some(_)) => return Err(CliError::usage("--tls-key-file needs --tls-cert-file")),
        };
        let Some(ca) = tls_ca_file else {
            return match identity {
                Some(_) => Err(CliError::usage(
                    "--tls-cert-file needs --tls-ca-file (the CA the servers' certificates chain to)",
                )),
                None => Ok(Dialer::default()),
            };
        };
        let ctx = TlsContext::load(TlsFiles { ca, identity }, ClientAuth::None)?;
        Ok(Dialer::new(Some(ctx)))
    }

    /// The SASL/SCRAM user to authenticate as: the flags (or KEEL_SASL_*), else
    /// --command-config's. Errors (usage): a user without a password or the reverse, a
    /// mechanism other than SCRAM-SHA-256/512.
    pub fn sasl(&self) -> Result<Option<crate::client_properties::SaslSettings>, CliError> {
        use keel_metadata_log::scram::Mechanism;
        let mechanism = match &self.sasl_mechanism {
            None => None,
            Some(m) => Some(
                Mechanism::from_name(&m.to_ascii_uppercase()).ok_or_else(|| {
                    CliError::usage(format!(
                        "--sasl-mechanism {m:?}: Keel supports SCRAM-SHA-256 and SCRAM-SHA-512"
                    ))
                })?,
            ),
        };
        // Each setting from its flag (or KEEL_SASL_*) when given, else from the file: flags
        // win over --command-config, key by key.
        let file = if self.sasl_username.is_some() && self.sasl_password.is_some() {
            None
        } else {
            self.properties()?.sasl
        };
        let username = self
            .sasl_username
            .clone()
            .or_else(|| file.as_ref().map(|s| s.username.clone()));
        let password = self
            .sasl_password
            .clone()
            .or_else(|| file.as_ref().map(|s| s.password.clone()));
        match (username, password) {
            (Some(username), Some(password)) => Ok(Some(crate::client_properties::SaslSettings {
                mechanism: mechanism
                    .or_else(|| file.as_ref().map(|s| s.mechanism))
                    .unwrap_or(Mechanism::Sha256),
                username,
                password,
            })),
            (Some(_), None) => Err(CliError::usage("--sasl-username needs --sasl-password")),
            (None, Some(_)) => Err(CliError::usage("--sasl-password needs --sasl-username")),
            (None, None) => Ok(None),
        }
    }

    /// The settings of --command-config (empty without it). Errors: the file cannot be read,
    /// or a line is refused (usage error naming the file, line and key).
    fn properties(&self) -> Result<crate::client_properties::ClientProperties, CliError> {
        let Some(path) = &self.command_config else {
            return Ok(Default::default());
        };
        let text = std::fs::read_to_string(path)
            .map_err(|e| CliError::usage(format!("--command-config {}: {e}", path.display())))?;
        let props = crate::client_properties::parse(&text)
            .map_err(|e| CliError::usage(format!("--command-config {}: {e}", path.display())))?;
        // Said once per run (the dialer and the SASL settings both read the file).
        static SAID: std::sync::Once = std::sync::Once::new();
        if !props.ignored.is_empty() {
            SAID.call_once(|| {
                eprintln!(
                "keelctl: --command-config {}: ignoring {} (not used by keelctl's gRPC connections)",
                path.display(),
                    props.ignored.join(", ")
                )
            });
        }
        Ok(props)
    }
}

/// Top-level commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Start, stop and inspect a local cluster of 3 controllers and 3 brokers.
    #[command(subcommand)]
    Cluster(cluster::ClusterCommand),
    /// Create, list, describe, delete topics and change their configs.
    #[command(subcommand)]
    Topic(topic::TopicCommand),
    /// Dynamic configs of topics, brokers and the cluster-wide broker default (like
    /// kafka-configs): describe, alter.
    #[command(subcommand)]
    Config(config::ConfigCommand),
    /// Operator ISR changes and leader elections.
    #[command(subcommand)]
    Partition(partition::PartitionCommand),
    /// ACLs (like kafka-acls): add, list, remove. Needs `authorizer = "standard"` on the
    /// nodes.
    #[command(subcommand)]
    Acl(acl::AclCommand),
    /// Users' SASL/SCRAM credentials (like kafka-configs --entity-type users): set, delete,
    /// list.
    #[command(subcommand)]
    User(user::UserCommand),
    /// Registered brokers.
    #[command(subcommand)]
    Broker(BrokerCommand),
    /// Consumer groups: list, describe (offsets and lag), reset offsets, delete.
    #[command(subcommand)]
    Group(group::GroupCommand),
    /// The controller quorum (like kafka-metadata-quorum describe).
    #[command(subcommand)]
    Quorum(QuorumCommand),
    /// The metadata log and the metadata image.
    #[command(subcommand)]
    Metadata(metadata::MetadataCommand),
    /// Partition segment files read offline (like kafka-dump-log).
    #[command(subcommand)]
    Log(log::LogCommand),
    /// Write lines from stdin or a file to a topic (idempotent, acks=all by default).
    Produce(data::ProduceArgs),
    /// Print records of a topic (from the beginning to the current end, or --follow).
    Consume(data::ConsumeArgs),
    /// Health check: produce numbered records (acks=all, idempotent), read them back and
    /// report lost / duplicated / reordered ones; exits 1 if any.
    Verify(data::VerifyArgs),
    /// Development TLS certificates (a CA and one certificate per node or client).
    #[command(subcommand)]
    Tls(tls::TlsCommand),
}

/// `keelctl broker ...`
#[derive(Debug, Subcommand)]
pub enum BrokerCommand {
    /// List brokers: id, endpoint, rack, epoch, fenced/shutdown state, metadata lag, and
    /// each broker's partitions and leaders (from the metadata) and bytes on disk (asked of
    /// the broker; `-` when it does not answer).
    List,
    /// Controlled shutdown of a broker of the local cluster (SIGTERM to its process, which
    /// then asks the controller for a controlled shutdown and waits for it).
    Shutdown(BrokerShutdownArgs),
    /// Move every replica off a broker (one reassignment per partition, each replica to the
    /// least-loaded other broker, racks spread), wait until none is left, then unregister it
    /// if its process is stopped, else say to stop it and run `broker unregister`.
    Decommission(BrokerDecommissionArgs),
    /// Remove a stopped broker's registration (UnregisterBroker, KIP-631; kafka-cluster.sh
    /// unregister). A running broker registers again.
    Unregister(BrokerIdArg),
}

/// Arguments of `broker decommission`.
#[derive(Debug, clap::Args)]
pub struct BrokerDecommissionArgs {
    /// Broker id.
    pub id: u16,
    /// How long to wait for the moves to complete, seconds.
    #[arg(long, default_value_t = 600)]
    pub timeout_secs: u64,
}

/// A broker id argument.
#[derive(Debug, clap::Args)]
pub struct BrokerIdArg {
    /// Broker id.
    pub id: u16,
}

/// Arguments of `broker shutdown`.
#[derive(Debug, clap::Args)]
pub struct BrokerShutdownArgs {
    /// Broker id.
    pub id: u16,
    /// Data directory of the local cluster (where the broker's pid file is).
    #[arg(long, default_value = "./keel-data")]
    pub data_dir: std::path::PathBuf,
    /// How long to wait for the broker to exit before SIGKILL, seconds.
    #[arg(long, default_value_t = 30)]
    pub timeout_secs: u64,
}

/// `keelctl quorum ...`
#[derive(Debug, Subcommand)]
pub enum QuorumCommand {
    /// Leader, term, high watermark, follower lag, voters (describe --status).
    Status,
    /// Per-controller log end offset, lag and timestamps (describe --replication).
    Replication,
    /// Add a controller to the voters (KIP-853; kafka-metadata-quorum add-controller). Start
    /// the new keel-controller first, with a node_id that its controller_quorum_voters does
    /// not list, or formatted with --no-initial-controllers (it then waits as an observer and
    /// logs this command); its directory id is the directory_id line of meta.properties in
    /// its metadata_log_dir (--controller-config reads all three from its config file).
    /// Returns once it has caught up and the new voter set is committed.
    AddController(AddControllerArgs),
    /// Remove a controller from the voters (KIP-853; kafka-metadata-quorum
    /// remove-controller). Its directory id is the one quorum status shows.
    RemoveController(RemoveControllerArgs),
}

/// `keelctl quorum add-controller`
#[derive(Debug, clap::Args)]
pub struct AddControllerArgs {
    /// The new controller's config file (TOML, as keel-controller --config takes it): its
    /// node_id, its endpoint (advertised_listeners, else its controller_quorum_voters entry)
    /// and the directory_id of meta.properties in its metadata_log_dir are read from there
    /// (Kafka: kafka-metadata-quorum --command-config controller.properties add-controller).
    /// Flags given as well win.
    #[arg(long, value_name = "FILE")]
    pub controller_config: Option<std::path::PathBuf>,
    /// The new controller's node_id (1..=2147483647); required without --controller-config.
    #[arg(long, value_parser = clap::value_parser!(i32).range(1..))]
    pub controller_id: Option<i32>,
    /// Its metadata log directory id (meta.properties directory_id); required without
    /// --controller-config.
    #[arg(long)]
    pub directory_id: Option<String>,
    /// `host:port` of its gRPC listener, as the other controllers reach it; required without
    /// --controller-config.
    #[arg(long)]
    pub endpoint: Option<String>,
    /// How long the active controller waits for it to catch up, ms (1000..=600000).
    #[arg(long, default_value_t = 60_000)]
    pub timeout_ms: u64,
}

/// `keelctl quorum remove-controller`
#[derive(Debug, clap::Args)]
pub struct RemoveControllerArgs {
    /// The controller's node_id (1..=2147483647).
    #[arg(long, value_parser = clap::value_parser!(i32).range(1..))]
    pub controller_id: i32,
    /// Its directory id as quorum status shows it (omit only when it shows none).
    #[arg(long, default_value = "")]
    pub directory_id: String,
}

/// A failed command: one line for stderr, and whether it is a usage error (exit code 2, as
/// for arguments clap refuses) or a failure of the operation (exit code 1).
#[derive(Debug)]
pub struct CliError {
    /// The line printed after `keelctl: `.
    pub message: String,
    /// A usage error: the arguments cannot work, whatever the cluster says.
    pub usage: bool,
}

impl CliError {
    /// A failed operation (exit code 1).
    pub fn new(message: impl Into<String>) -> Self {
        CliError {
            message: message.into(),
            usage: false,
        }
    }

    /// A usage error (exit code 2).
    pub fn usage(message: impl Into<String>) -> Self {
        CliError {
            message: message.into(),
            usage: true,
        }
    }
}

impl<E: std::error::Error> From<E> for CliError {
    fn from(e: E) -> Self {
        CliError::new(e.to_string())
    }
}

/// Result of a command.
pub type CliResult = Result<(), CliError>;

/// Shared state of one invocation.
#[derive(Debug)]
pub struct Ctx {
    /// Parsed global flags.
    pub json: bool,
    /// Controller addresses.
    pub controllers: Vec<String>,
    /// Broker addresses, if given.
    pub brokers: Option<Vec<String>>,
    /// Per-request deadline.
    pub request_timeout: Duration,
    /// Budget of one admin operation, retries included.
    pub api_timeout: Duration,
    /// Reads from a controller out of contact with the quorum are accepted (`--allow-stale`).
    pub allow_stale: bool,
    /// Opens every channel (TLS with `--tls-ca-file`).
    pub dialer: keel_runtime::tls::Dialer,
}

impl Ctx {
    /// An admin client for the bootstrap controllers.
    pub fn admin(&self) -> Result<Admin, CliError> {
        self.admin_for(self.controllers.clone())
    }

    /// An admin client for `addresses`.
    pub fn admin_for(&self, addresses: Vec<String>) -> Result<Admin, CliError> {
        self.admin_within(addresses, self.api_timeout)
    }

    /// An admin client for the controllers with these timeouts.
    fn admin_with(&self, request_timeout: Duration, budget: Duration) -> Result<Admin, CliError> {
        let mut cfg = AdminConfig::new(self.controllers.clone());
        cfg.request_timeout = request_timeout;
        cfg.api_timeout = budget;
        cfg.allow_stale = self.allow_stale;
        cfg.dialer = self.dialer.clone();
        Ok(Admin::new(cfg)?)
    }

    /// An admin client for `addresses` whose operations give up after `budget`.
    pub fn admin_within(
        &self,
        addresses: Vec<String>,
        budget: Duration,
    ) -> Result<Admin, CliError> {
        let mut cfg = AdminConfig::new(addresses);
        cfg.request_timeout = self.request_timeout;
        cfg.api_timeout = budget;
        cfg.allow_stale = self.allow_stale;
        cfg.dialer = self.dialer.clone();
        Ok(Admin::new(cfg)?)
    }

    /// Broker connections to `addresses` with this invocation's timeout and TLS.
    pub fn brokers(&self, addresses: Vec<String>) -> crate::brokers::Brokers {
        crate::brokers::Brokers::new(addresses, self.request_timeout)
            .with_dialer(self.dialer.clone())
    }

    /// Producer defaults for `addresses` with this invocation's TLS.
    pub fn producer_config(&self, addresses: Vec<String>) -> crate::producer::ProducerConfig {
        crate::producer::ProducerConfig {
            dialer: self.dialer.clone(),
            ..crate::producer::ProducerConfig::new(addresses)
        }
    }

    /// Consumer defaults for `addresses` with this invocation's TLS.
    pub fn consumer_config(&self, addresses: Vec<String>) -> crate::consumer::ConsumerConfig {
        crate::consumer::ConsumerConfig {
            dialer: self.dialer.clone(),
            ..crate::consumer::ConsumerConfig::new(addresses)
        }
    }

    /// Prints `value` as pretty JSON.
    pub fn print_json<T: Serialize>(&self, value: &T) -> CliResult {
        outln!("{}", serde_json::to_string_pretty(value)?);
        Ok(())
    }
}

/// Entry point of the `keelctl` binary.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    // The libraries' warnings (a produce retrying NOT_ENOUGH_REPLICAS, ...) on stderr.
    if let Err(e) = keel_runtime::logging::init_cli_logging("keelctl", "warn") {
        eprintln!("keelctl: {e}");
        return ExitCode::from(2);
    }
    // `tls dev-certs` makes the files the TLS flags name: it needs none of them.
    let dialer = match cli.dialer().or_else(|e| match cli.command {
        Command::Tls(_) => Ok(Default::default()),
        _ => Err(e),
    }) {
        Ok(d) => d,
        Err(CliError { message, usage }) => {
            eprintln!("keelctl: {message}");
            return if usage {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            };
        }
    };
    let addresses = bootstrap_addresses("--bootstrap-controllers", &cli.bootstrap_controllers)
        .and_then(|controllers| {
            let brokers = cli
                .bootstrap_brokers
                .as_deref()
                .map(|b| bootstrap_addresses("--bootstrap-brokers", b))
                .transpose()?;
            Ok((controllers, brokers))
        });
    let (controllers, brokers) = match addresses {
        Ok(a) => a,
        Err(CliError { message, .. }) => {
            eprintln!("keelctl: {message}");
            return ExitCode::from(2);
        }
    };
    // SASL/SCRAM (#23): a session token from the controllers before anything else; not for
    // the local cluster's own commands (they use its certificates) nor `tls dev-certs`.
    let sasl = match &cli.command {
        Command::Cluster(_) | Command::Tls(_) => Ok(None),
        _ => cli.sasl(),
    };
    let sasl = match sasl {
        Ok(s) => s,
        Err(CliError { message, .. }) => {
            eprintln!("keelctl: {message}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("keelctl: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut ctx = Ctx {
        dialer,
        json: cli.json,
        controllers,
        brokers,
        request_timeout: Duration::from_millis(cli.request_timeout_ms),
        api_timeout: Duration::from_millis(cli.api_timeout_ms.max(1)),
        allow_stale: cli.allow_stale,
    };
    if let Some(s) = sasl {
        let token = runtime.block_on(async {
            ctx.admin()?
                .scram_authenticate(s.mechanism, &s.username, &s.password)
                .await
                .map_err(CliError::from)
        });
        match token {
            Ok((token, _expires)) => ctx.dialer = ctx.dialer.clone().with_bearer(token),
            Err(CliError { message, .. }) => {
                eprintln!("keelctl: {message}");
                return ExitCode::FAILURE;
            }
        }
    }
    match runtime.block_on(run(cli.command, &ctx)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(CliError { message, usage }) => {
            eprintln!("keelctl: {message}");
            if usage {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

async fn run(command: Command, ctx: &Ctx) -> CliResult {
    match command {
        Command::Cluster(c) => cluster::run(c, ctx).await,
        Command::Topic(c) => topic::run(c, ctx).await,
        Command::Config(c) => config::run(c, ctx).await,
        Command::Partition(c) => partition::run(c, ctx).await,
        Command::Acl(c) => acl::run(c, ctx).await,
        Command::User(c) => user::run(c, ctx).await,
        Command::Group(c) => group::run(c, ctx).await,
        Command::Broker(BrokerCommand::List) => {
            let admin = ctx.admin()?;
            let reply = admin.describe_cluster().await?;
            let mut rows = broker_rows(&reply);
            let image = admin.metadata_image().await?;
            // Each broker's bytes on disk, as it reports them (best effort).
            let addresses: Vec<(i32, String)> = rows
                .iter()
                .filter(|r| !r.endpoint.is_empty())
                .map(|r| (r.id, r.endpoint.clone()))
                .collect();
            let answers =
                topic::ask_replicas(ctx, addresses.iter().map(|(_, a)| a.clone()).collect()).await;
            let sizes: std::collections::BTreeMap<i32, u64> = addresses
                .iter()
                .zip(answers)
                .filter_map(|((id, _), (_, reply))| {
                    let bytes = reply?
                        .partitions
                        .iter()
                        .filter(|p| p.error.as_ref().is_none_or(|e| e.code == 0))
                        .map(|p| u64::try_from(p.size_bytes).unwrap_or(0))
                        .sum();
                    Some((*id, bytes))
                })
                .collect();
            crate::format::cluster::add_load(&mut rows, &image, &sizes);
            if ctx.json {
                ctx.print_json(&rows)
            } else {
                out!("{}", brokers_text(&rows));
                Ok(())
            }
        }
        Command::Broker(BrokerCommand::Shutdown(a)) => cluster::shutdown_broker(a, ctx).await,
        Command::Broker(BrokerCommand::Decommission(a)) => {
            reassign::decommission(i32::from(a.id), Duration::from_secs(a.timeout_secs), ctx).await
        }
        Command::Broker(BrokerCommand::Unregister(a)) => {
            ctx.admin()?.unregister_broker(i32::from(a.id)).await?;
            outln!("broker {} unregistered", a.id);
            Ok(())
        }
        Command::Quorum(q) => quorum(q, ctx).await,
        Command::Metadata(c) => metadata::run(c, ctx).await,
        Command::Log(c) => log::run(c, ctx),
        Command::Produce(a) => data::produce(a, ctx).await,
        Command::Consume(a) => data::consume(a, ctx).await,
        Command::Verify(a) => data::verify(a, ctx).await,
        Command::Tls(c) => tls::run(c, ctx),
    }
}

/// The controller `quorum add-controller` adds.
#[derive(Debug, PartialEq, Eq)]
struct NewVoter {
    id: i32,
    directory_id: String,
    endpoint: String,
}

/// The new voter from the flags, with what they leave out read from `--controller-config`.
///
/// Errors (usage): a value neither a flag nor the file gives; the file cannot be read or is
/// not a valid controller config; its meta.properties is missing (not formatted or never
/// started) or has no directory_id.
fn new_voter(a: &AddControllerArgs) -> Result<NewVoter, CliError> {
    let from_file = match &a.controller_config {
        Some(path) => Some(controller_identity(path).map_err(CliError::usage)?),
        None => None,
    };
    let missing = |flag: &str| {
        CliError::usage(format!(
            "{flag} is required (or --controller-config naming the controller's config file)"
        ))
    };
    let id = match (a.controller_id, &from_file) {
        (Some(id), _) => id,
        (None, Some(f)) => f.id,
        (None, None) => return Err(missing("--controller-id")),
    };
    let directory_id = match (&a.directory_id, &from_file) {
        (Some(d), _) => d.clone(),
        (None, Some(f)) => f.directory_id.clone(),
        (None, None) => return Err(missing("--directory-id")),
    };
    let endpoint = match (&a.endpoint, &from_file) {
        (Some(e), _) => e.clone(),
        (None, Some(f)) => f.endpoint.clone(),
        (None, None) => return Err(missing("--endpoint")),
    };
    Ok(NewVoter {
        id,
        directory_id,
        endpoint,
    })
}

/// node_id, endpoint and directory id of the controller whose config file is `path`.
fn controller_identity(path: &std::path::Path) -> Result<NewVoter, String> {
    use keel_runtime::settings::{Binary, Schema, listeners};
    let schema = Schema::of(Binary::Controller);
    let show = path.display();
    let settings = schema
        .read_file(path)
        .map_err(|e| e.to_string())
        .and_then(|layer| schema.resolve(layer).map_err(|e| e.to_string()))
        .map_err(|e| format!("--controller-config {show}: {e}"))?;
    let node_id: i32 = settings.require("node_id");
    let endpoint = match settings.get::<String>("advertised_listeners") {
        Some(l) => listeners::grpc_only(&l, false)
            .map(|l| l.host_port())
            .map_err(|e| format!("--controller-config {show}: advertised_listeners: {e}"))?,
        None => settings
            .get::<std::collections::BTreeMap<u64, String>>("controller_quorum_voters")
            .and_then(|v| v.get(&(node_id as u64)).cloned())
            .ok_or_else(|| {
                format!(
                    "--controller-config {show}: sets no advertised_listeners (and no \
                     controller_quorum_voters entry for node_id {node_id}): give --endpoint"
                )
            })?,
    };
    let dir: std::path::PathBuf = settings.require("metadata_log_dir");
    let props = dir.join("meta.properties");
    let text = std::fs::read_to_string(&props).map_err(|e| {
        format!(
            "{}: {e} (format the new controller's metadata_log_dir or start it once first)",
            props.display()
        )
    })?;
    let directory_id = keel_metadata_log::data_dir::parse_properties(&text)
        .map_err(|e| format!("{}: {e}", props.display()))?
        .remove("directory_id")
        .ok_or_else(|| format!("{} has no directory_id", props.display()))?;
    Ok(NewVoter {
        id: node_id,
        directory_id,
        endpoint,
    })
}

/// `keelctl quorum ...`
async fn quorum(q: QuorumCommand, ctx: &Ctx) -> Result<(), CliError> {
    match q {
        QuorumCommand::AddController(a) => {
            if !(1_000..=600_000).contains(&a.timeout_ms) {
                return Err(CliError::usage(format!(
                    "--timeout-ms {} is outside 1000..=600000",
                    a.timeout_ms
                )));
            }
            let wait = Duration::from_millis(a.timeout_ms);
            let new = new_voter(&a)?;
            // One attempt must outlive the controller's wait for the new node.
            let request_timeout = ctx.request_timeout.max(wait + Duration::from_secs(5));
            ctx.admin_with(request_timeout, ctx.api_timeout.max(request_timeout))?
                .add_raft_voter(new.id, &new.directory_id, &new.endpoint, wait)
                .await?;
            outln!("controller {} ({}) is a voter", new.id, new.endpoint);
            Ok(())
        }
        QuorumCommand::RemoveController(a) => {
            ctx.admin()?
                .remove_raft_voter(a.controller_id, &a.directory_id)
                .await?;
            outln!("controller {} is no longer a voter", a.controller_id);
            Ok(())
        }
        QuorumCommand::Status | QuorumCommand::Replication => {
            let reply = ctx.admin()?.describe_quorum().await?;
            match (q, ctx.json) {
                (QuorumCommand::Replication, true) => ctx.print_json(&replication_rows(&reply)),
                (QuorumCommand::Replication, false) => {
                    out!("{}", replication_text(&replication_rows(&reply)));
                    Ok(())
                }
                (_, true) => ctx.print_json(&quorum_status(&reply)),
                (_, false) => {
                    out!("{}", quorum_status_text(&quorum_status(&reply)));
                    Ok(())
                }
            }
        }
    }
}

/// Writes `s` to stdout and flushes. A closed pipe (`keelctl ... | head`) ends the process
/// quietly with status 141, as SIGPIPE would; other write errors end it with status 1.
pub(crate) fn write_stdout(s: &str) {
    write_stdout_bytes(s.as_bytes());
}

/// Like [`write_stdout`], for bytes that need not be UTF-8 (record keys and values).
pub(crate) fn write_stdout_bytes(b: &[u8]) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(b).and_then(|()| out.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(141);
        }
        eprintln!("keelctl: cannot write to stdout: {e}");
        std::process::exit(1);
    }
}

/// Parses a comma-separated broker id list (`1,2,3`): non-empty, numbers >= 0, no
/// duplicates. The error names the flag and the bad item.
pub fn parse_broker_ids(flag: &str, s: &str) -> Result<Vec<i32>, CliError> {
    let mut out = Vec::new();
    for item in s.split(',').map(str::trim) {
        let id: i32 =
            item.parse().ok().filter(|v| *v >= 0).ok_or_else(|| {
                CliError::usage(format!("{flag} {s:?}: {item:?} is not a broker id"))
            })?;
        if out.contains(&id) {
            return Err(CliError::usage(format!(
                "{flag} {s:?}: broker {id} appears twice"
            )));
        }
        out.push(id);
    }
    Ok(out)
}

/// Checks one bootstrap address (pure): `host:port` with a non-empty host (a name or an IPv4
/// address, or an IPv6 address in brackets, `[::1]:9093`) and a port in 1..=65535, without
/// a scheme or a path. The error says what is wrong with it. Kafka's clients refuse the same
/// at construction (`ClientUtils.parseAndValidateAddresses`: "Invalid url in
/// bootstrap.servers"), instead of retrying an address that can never connect.
pub fn check_address(addr: &str) -> Result<(), String> {
    if addr.contains("://") {
        return Err("give host:port without a scheme".into());
    }
    let Some((host, port)) = addr.rsplit_once(':') else {
        return Err("no port: give host:port".into());
    };
    if port.is_empty() {
        return Err("no port after ':'".into());
    }
    match port.parse::<u32>() {
        Ok(p) if (1..=65_535).contains(&p) => {}
        Ok(_) => return Err(format!("port {port} is not in 1..=65535")),
        Err(_) => return Err(format!("port {port:?} is not a number")),
    }
    if host.is_empty() {
        return Err("no host before ':'".into());
    }
    if let Some(inner) = host.strip_prefix('[') {
        let ip = inner
            .strip_suffix(']')
            .ok_or_else(|| "an IPv6 address needs its closing ']'".to_string())?;
        return ip
            .parse::<std::net::Ipv6Addr>()
            .map(|_| ())
            .map_err(|_| format!("{ip:?} is not an IPv6 address"));
    }
    if host.contains(':') {
        return Err("an IPv6 address goes in brackets, e.g. [::1]:9093".into());
    }
    if let Some(c) = host
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_')))
    {
        return Err(format!("{c:?} cannot be part of a host name"));
    }
    Ok(())
}

/// The addresses of a bootstrap flag (`--bootstrap-controllers`, `--bootstrap-brokers` or
/// their environment variables), trimmed and without empty items (as Kafka skips them).
/// Usage errors: an entry that is not `host:port` ([`check_address`]), naming it, or no
/// address at all.
pub fn bootstrap_addresses(flag: &str, given: &[String]) -> Result<Vec<String>, CliError> {
    let mut out = Vec::new();
    for addr in given.iter().map(|s| s.trim()).filter(|s| !s.is_empty()) {
        check_address(addr)
            .map_err(|why| CliError::usage(format!("{flag}: {addr:?} is not host:port ({why})")))?;
        out.push(addr.to_string());
    }
    if out.is_empty() {
        return Err(CliError::usage(format!(
            "{flag}: no address given (host:port, comma separated)"
        )));
    }
    Ok(out)
}

/// Parses `key=value` (a clap value parser: a malformed value is a usage error, exit 2).
pub fn parse_key_value(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.to_string())),
        _ => Err(format!("{s:?} is not key=value")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sasl_flags_win_over_the_command_config_key_by_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("client.properties");
        std::fs::write(
            &path,
            "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n\
             sasl.username=bob\nsasl.password=file-secret\n",
        )
        .unwrap();
        let cli = |extra: &[&str]| {
            let mut args = vec!["keelctl", "--command-config", path.to_str().unwrap()];
            args.extend_from_slice(extra);
            args.extend(["quorum", "status"]);
            Cli::try_parse_from(args).unwrap()
        };
        let s = cli(&[]).sasl().unwrap().unwrap();
        assert_eq!(
            (s.username.as_str(), s.password.as_str()),
            ("bob", "file-secret")
        );
        assert_eq!(s.mechanism, keel_metadata_log::scram::Mechanism::Sha512);
        let s = cli(&["--sasl-password", "flag-secret"])
            .sasl()
            .unwrap()
            .unwrap();
        assert_eq!(
            (s.username.as_str(), s.password.as_str()),
            ("bob", "flag-secret")
        );
        let s = cli(&[
            "--sasl-username",
            "carol",
            "--sasl-mechanism",
            "SCRAM-SHA-256",
        ])
        .sasl()
        .unwrap()
        .unwrap();
        assert_eq!(
            (s.username.as_str(), s.password.as_str()),
            ("carol", "file-secret")
        );
        assert_eq!(s.mechanism, keel_metadata_log::scram::Mechanism::Sha256);
        let alone = Cli::try_parse_from(["keelctl", "--sasl-username", "x", "quorum", "status"])
            .unwrap()
            .sasl()
            .unwrap_err();
        assert_eq!(alone.message, "--sasl-username needs --sasl-password");
    }

    #[test]
    fn add_controller_reads_what_the_flags_leave_out_from_the_controller_config() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("c4");
        std::fs::create_dir_all(&data).unwrap();
        std::fs::write(
            data.join("meta.properties"),
            "version=1\nnode_id=4\ncontroller_quorum_voters=1\ndirectory_id=AAAAAAAAAAAAAAAAAAAAAQ\n",
        )
        .unwrap();
        let config = dir.path().join("c4.toml");
        std::fs::write(
            &config,
            format!(
                "node_id = 4\ncontroller_quorum_bootstrap_servers = \"127.0.0.1:9093\"\n\
                 metadata_log_dir = {:?}\nlisteners = \"0.0.0.0:9096\"\n\
                 advertised_listeners = \"c4.example:9096\"\n",
                data.display().to_string()
            ),
        )
        .unwrap();
        let args = |extra: &[&str]| {
            let mut v = vec!["keelctl", "quorum", "add-controller"];
            v.extend_from_slice(extra);
            match Cli::try_parse_from(v).unwrap().command {
                Command::Quorum(QuorumCommand::AddController(a)) => a,
                other => panic!("{other:?}"),
            }
        };
        let path = config.to_str().unwrap();
        assert_eq!(
            new_voter(&args(&["--controller-config", path])).unwrap(),
            NewVoter {
                id: 4,
                directory_id: "AAAAAAAAAAAAAAAAAAAAAQ".into(),
                endpoint: "c4.example:9096".into()
            }
        );
        let v = new_voter(&args(&[
            "--controller-config",
            path,
            "--endpoint",
            "10.0.0.4:9096",
        ]))
        .unwrap();
        assert_eq!((v.id, v.endpoint.as_str()), (4, "10.0.0.4:9096"));
        let e = new_voter(&args(&["--controller-id", "4"])).unwrap_err();
        assert!(
            e.message.starts_with("--directory-id is required"),
            "{}",
            e.message
        );
        std::fs::remove_file(data.join("meta.properties")).unwrap();
        let e = new_voter(&args(&["--controller-config", path])).unwrap_err();
        assert!(
            e.message.contains("meta.properties") && e.message.contains("format"),
            "{}",
            e.message
        );
    }

    #[test]
    fn broker_id_lists_name_the_bad_item() {
        assert_eq!(parse_broker_ids("--isr", "1, 2,3").unwrap(), vec![1, 2, 3]);
        for (bad, msg) in [
            ("1,x", "--isr \"1,x\": \"x\" is not a broker id"),
            ("", "--isr \"\": \"\" is not a broker id"),
            ("1,,2", "--isr \"1,,2\": \"\" is not a broker id"),
            ("-1", "--isr \"-1\": \"-1\" is not a broker id"),
            ("2,2", "--isr \"2,2\": broker 2 appears twice"),
        ] {
            let e = parse_broker_ids("--isr", bad).unwrap_err();
            assert_eq!(e.message, msg);
            assert!(e.usage, "{bad:?}");
        }
    }

    #[test]
    fn bootstrap_addresses_are_host_port() {
        let ok = |v: &[&str]| {
            let given: Vec<String> = v.iter().map(|s| s.to_string()).collect();
            bootstrap_addresses("--bootstrap-controllers", &given)
        };
        assert_eq!(
            ok(&[
                " 127.0.0.1:9093",
                "",
                "[::1]:9093",
                "ctl-1.example:1",
                "h_2:65535"
            ])
            .unwrap(),
            vec![
                "127.0.0.1:9093",
                "[::1]:9093",
                "ctl-1.example:1",
                "h_2:65535"
            ]
        );
        for (bad, why) in [
            ("127.0.0.1:99999", "port 99999 is not in 1..=65535"),
            ("127.0.0.1:0", "port 0 is not in 1..=65535"),
            ("127.0.0.1:abc", "port \"abc\" is not a number"),
            ("127.0.0.1:", "no port after ':'"),
            ("bogus", "no port: give host:port"),
            (":9093", "no host before ':'"),
            ("http://127.0.0.1:41093", "give host:port without a scheme"),
            (
                "::1:9093",
                "an IPv6 address goes in brackets, e.g. [::1]:9093",
            ),
            ("[::1:9093", "an IPv6 address needs its closing ']'"),
            ("[zz]:9093", "\"zz\" is not an IPv6 address"),
            ("host/path:1", "'/' cannot be part of a host name"),
        ] {
            let e = ok(&["127.0.0.1:9093", bad]).unwrap_err();
            assert!(e.usage, "{bad}");
            assert_eq!(
                e.message,
                format!("--bootstrap-controllers: {bad:?} is not host:port ({why})")
            );
        }
        for empty in [&[""][..], &[" ", ""][..], &[][..]] {
            let e = ok(empty).unwrap_err();
            assert!(e.usage);
            assert_eq!(
                e.message,
                "--bootstrap-controllers: no address given (host:port, comma separated)"
            );
        }
    }

    #[test]
    fn key_values() {
        assert_eq!(
            parse_key_value("min.insync.replicas=2").unwrap(),
            ("min.insync.replicas".into(), "2".into())
        );
        assert_eq!(
            parse_key_value("nokey").unwrap_err(),
            "\"nokey\" is not key=value"
        );
        assert!(parse_key_value("=1").is_err());
    }

    #[test]
    fn every_command_has_help() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
        fn walk(c: &clap::Command) {
            assert!(c.get_about().is_some(), "{} has no help text", c.get_name());
            for s in c.get_subcommands() {
                walk(s);
            }
        }
        walk(&Cli::command());
    }
}
