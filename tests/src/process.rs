//! Multi-process clusters: the real `keel-controller` and `keel-broker` binaries on loopback,
//! each with its own directory under one temp dir, killed on drop (the directory is kept when
//! the test panics). Waits poll a condition with a deadline; nothing sleeps to synchronise.
//! The binaries are the ones `cargo build --workspace --bins` put next to the test executable
//! (`./scripts/test` builds them first; tests never build).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::sync::Arc;
use std::time::{Duration, Instant};

use keel_proto::broker::{MetadataReply, MetadataRequest};
use keel_proto::controller::DescribeClusterReply;
use keel_proto::controller::controller_service_client::ControllerServiceClient;
use tonic::transport::Channel;

use keel_broker::log::{Log, LogConfig, LogOpenOptions, SystemClock};

use crate::Endpoints as _;
use crate::data::{Crcs, Records, decode};
use crate::node::{NodeProcess, voters};

/// Controller and broker timings used by every test cluster (ms).
pub const HEARTBEAT_INTERVAL_MS: u64 = 200;
pub const SESSION_TIMEOUT_MS: u64 = 1500;
pub const SNAPSHOT_INTERVAL_MS: u64 = 300;

/// `target/<profile>/<name>` next to this test's (or bench's) `target/<profile>/deps/`,
/// where `cargo build` puts the workspace binaries. Tests never build: `./scripts/test` builds
/// every binary first (`cargo build --workspace --bins`); a missing one fails here naming that
/// command.
pub fn binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("test executable in target/<profile>/deps");
    let bin = profile_dir.join(name);
    // Benches run from target/release (the bench profile puts them there).
    let build = if profile_dir.file_name().is_some_and(|n| n == "release") {
        "`cargo build --release --workspace --bins`"
    } else {
        "`cargo build --workspace --bins`, as ./scripts/test does"
    };
    assert!(
        bin.exists(),
        "{} is missing: build the binaries first ({build})",
        bin.display()
    );
    bin
}

/// Runs the `keelctl` binary ([`binary`]) with `--bootstrap-controllers controllers` (a
/// comma-separated list) and `args`; returns whether it exited 0 and its stdout then stderr.
pub fn keelctl(controllers: &str, args: &[&str]) -> (bool, String) {
    let out = Command::new(binary("keelctl"))
        .arg("--bootstrap-controllers")
        .arg(controllers)
        .args(args)
        .output()
        .expect("keelctl runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// The `keel-controller` binary ([`binary`]).
pub fn controller_bin() -> PathBuf {
    binary("keel-controller")
}

/// The `keel-broker` binary ([`binary`]).
pub fn broker_bin() -> PathBuf {
    binary("keel-broker")
}

/// Where [`free_ports`] looks: below Linux's default ephemeral range (32768..=60999,
/// `net.ipv4.ip_local_port_range`). A port from `bind(0)` is an ephemeral one, which any
/// outgoing connection of any test may take between the check and the process's own bind:
/// seen as a controller failing to start with "Address already in use".
const FREE_PORT_RANGE: std::ops::Range<u32> = 20_000..32_000;

/// Reserves `n` free loopback ports (bound then released) from [`FREE_PORT_RANGE`], walking
/// it from a point that differs per process (nextest runs each test in its own) and moving
/// on in this process, so concurrent tests rarely try the same ports.
pub fn free_ports(n: usize) -> Vec<u16> {
    use std::sync::atomic::{AtomicU32, Ordering};
    static CURSOR: AtomicU32 = AtomicU32::new(u32::MAX);
    let span = FREE_PORT_RANGE.end - FREE_PORT_RANGE.start;
    if CURSOR.load(Ordering::Relaxed) == u32::MAX {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let seed = std::process::id().wrapping_mul(2_654_435_761) ^ nanos;
        let _ =
            CURSOR.compare_exchange(u32::MAX, seed % span, Ordering::Relaxed, Ordering::Relaxed);
    }
    let mut held = Vec::with_capacity(n);
    let mut ports = Vec::with_capacity(n);
    let mut tries = 0;
    while ports.len() < n {
        tries += 1;
        assert!(
            tries < span,
            "no {n} free loopback ports in {FREE_PORT_RANGE:?}"
        );
        let port = (FREE_PORT_RANGE.start + CURSOR.fetch_add(1, Ordering::Relaxed) % span) as u16;
        // Held until all are found, so one call never returns a port twice.
        if let Ok(l) = TcpListener::bind(("127.0.0.1", port)) {
            held.push(l);
            ports.push(port);
        }
    }
    ports
}

/// Three (or n) controllers and m brokers.
#[derive(Debug)]
pub struct Cluster {
    pub dir: tempfile::TempDir,
    pub controller_ports: Vec<u16>,
    pub broker_ports: Vec<u16>,
    controllers: Vec<NodeProcess>,
    brokers: Vec<NodeProcess>,
    controller_args: Vec<String>,
    broker_args: Vec<String>,
    session_timeout_ms: u64,
    /// Per broker: the port of its `--metrics-listener`, when [`Options::broker_metrics`].
    pub broker_metrics_ports: Vec<u16>,
    /// Per controller: the port of its `--metrics-listener`, when
    /// [`Options::controller_metrics`].
    pub controller_metrics_ports: Vec<u16>,
    /// Per broker: the port of its Kafka-protocol (`PLAINTEXT`, or `SSL` with TLS) listener.
    pub broker_kafka_ports: Vec<u16>,
    snapshot_interval_ms: u64,
    /// How the harness connects: TLS with the `client` certificate when [`Options::tls`].
    dialer: keel_runtime::tls::Dialer,
    /// Whether the processes run with TLS ([`Options::tls`]).
    tls: bool,
    /// The open-files limit (soft and hard) brokers start with (`prlimit --nofile`); `None` =
    /// the harness's own. Read at each [`Cluster::start_broker`].
    pub broker_nofile: Option<u64>,
}

/// Settings of a test cluster beyond the process counts.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Extra flags for every controller.
    pub controller_args: Vec<String>,
    /// Extra flags for every broker.
    pub broker_args: Vec<String>,
    /// `broker_session_timeout_ms` of controllers and brokers; 0 = [`SESSION_TIMEOUT_MS`].
    pub session_timeout_ms: u64,
    /// Give every broker a `--metrics-listener` on a free loopback port.
    pub broker_metrics: bool,
    /// Give every controller a `--metrics-listener` on a free loopback port.
    pub controller_metrics: bool,
    /// `metadata_snapshot_interval_ms` of the brokers; 0 = [`SNAPSHOT_INTERVAL_MS`].
    pub snapshot_interval_ms: u64,
    /// TLS on every connection (#23): a development CA and a certificate in `<dir>/tls/`
    /// (`node` for every process, `client` for the harness), `ssl_client_auth = required`,
    /// and SSL Kafka listeners.
    pub tls: bool,
    /// [`Cluster::broker_nofile`] at start.
    pub broker_nofile: Option<u64>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for p in self.controllers.iter_mut().chain(self.brokers.iter_mut()) {
            p.kill();
        }
        if std::thread::panicking() {
            // Keep the logs and data of a failed run for diagnosis.
            let placeholder = tempfile::tempdir().unwrap();
            let dir = std::mem::replace(&mut self.dir, placeholder);
            eprintln!(
                "test failed: cluster directory kept at {}",
                dir.keep().display()
            );
        }
    }
}

impl Cluster {
    /// Starts `controllers` controllers (ids 1..) and `brokers` brokers (ids 1..).
    pub fn start(controllers: usize, brokers: usize) -> Cluster {
        Self::start_with(controllers, brokers, &[])
    }

    /// Like [`Self::start`], with extra flags for every controller.
    pub fn start_with(controllers: usize, brokers: usize, controller_args: &[&str]) -> Cluster {
        Self::start_opts(
            controllers,
            brokers,
            Options {
                controller_args: controller_args.iter().map(|s| s.to_string()).collect(),
                ..Options::default()
            },
        )
    }

    /// Like [`Self::start`], with [`Options`].
    pub fn start_opts(controllers: usize, brokers: usize, opts: Options) -> Cluster {
        let bin = controller_bin();
        // One call: ports released by one call could come back from the next.
        let metrics = if opts.broker_metrics { brokers } else { 0 };
        let controller_metrics = if opts.controller_metrics {
            controllers
        } else {
            0
        };
        let mut ports = free_ports(controllers + 2 * brokers + metrics + controller_metrics);
        let controller_metrics_ports = ports.split_off(controllers + 2 * brokers + metrics);
        let broker_metrics_ports = ports.split_off(controllers + 2 * brokers);
        let broker_kafka_ports = ports.split_off(controllers + brokers);
        let broker_ports = ports.split_off(controllers);
        let dir = tempfile::tempdir().unwrap();
        let node = |kind: &str, id: usize| {
            NodeProcess::new(
                format!("{kind} {id}"),
                dir.path().join(format!("{kind}-{id}.log")),
            )
        };
        let (mut controller_args, mut broker_args) = (opts.controller_args, opts.broker_args);
        let dialer = if opts.tls {
            let (args, dialer) = tls_files(dir.path());
            controller_args.extend(args.iter().cloned());
            broker_args.extend(args);
            dialer
        } else {
            keel_runtime::tls::Dialer::default()
        };
        let controller_nodes = (1..=controllers).map(|id| node("controller", id)).collect();
        let broker_nodes = (1..=brokers).map(|id| node("broker", id)).collect();
        let mut c = Cluster {
            dir,
            controller_ports: ports,
            broker_ports,
            controllers: controller_nodes,
            brokers: broker_nodes,
            controller_args,
            broker_args,
            dialer,
            tls: opts.tls,
            broker_nofile: opts.broker_nofile,
            session_timeout_ms: if opts.session_timeout_ms == 0 {
                SESSION_TIMEOUT_MS
            } else {
                opts.session_timeout_ms
            },
            broker_metrics_ports,
            controller_metrics_ports,
            broker_kafka_ports,
            snapshot_interval_ms: if opts.snapshot_interval_ms == 0 {
                SNAPSHOT_INTERVAL_MS
            } else {
                opts.snapshot_interval_ms
            },
        };
        for id in 1..=controllers as u64 {
            c.start_controller_with(&bin, id);
        }
        for id in 1..=brokers as i32 {
            c.start_broker(id);
        }
        c
    }

    pub fn voters(&self) -> String {
        voters(&self.controller_ports)
    }

    pub fn controller_addr(&self, id: u64) -> String {
        format!("127.0.0.1:{}", self.controller_ports[id as usize - 1])
    }

    pub fn broker_log_path(&self, id: i32) -> PathBuf {
        self.dir.path().join(format!("broker-{id}.log"))
    }

    pub fn broker_log(&self, id: i32) -> String {
        std::fs::read_to_string(self.broker_log_path(id)).unwrap_or_default()
    }

    /// Everything controller `id` logged so far.
    pub fn controller_log(&self, id: u64) -> String {
        std::fs::read_to_string(self.dir.path().join(format!("controller-{id}.log")))
            .unwrap_or_default()
    }

    pub fn broker_data_dir(&self, id: i32) -> PathBuf {
        self.dir.path().join(format!("broker-{id}"))
    }

    fn start_controller_with(&mut self, bin: &Path, id: u64) {
        let mut cmd = Command::new(bin);
        cmd.arg("--node-id")
            .arg(id.to_string())
            .arg("--controller-quorum-voters")
            .arg(self.voters())
            .arg("--listeners")
            .arg(self.controller_addr(id))
            .arg("--metadata-log-dir")
            .arg(self.dir.path().join(format!("controller-{id}")))
            .arg("--broker-heartbeat-interval-ms")
            .arg(HEARTBEAT_INTERVAL_MS.to_string())
            .arg("--broker-session-timeout-ms")
            .arg(self.session_timeout_ms.to_string())
            .args(&self.controller_args)
            .args(
                self.controller_metrics_ports
                    .get(id as usize - 1)
                    .map(|p| vec!["--metrics-listener".to_string(), format!("127.0.0.1:{p}")])
                    .unwrap_or_default(),
            )
            .env("KEEL_LOG", "info,openraft=warn");
        self.controllers[id as usize - 1].start(cmd);
    }

    /// Starts (or restarts) controller `id`.
    pub fn start_controller(&mut self, id: u64) {
        self.start_controller_with(&controller_bin(), id);
    }

    /// Starts (or restarts) broker `id`; its log is appended to `broker-<id>.log`.
    /// `127.0.0.1:port` of broker `id`'s Kafka-protocol listener.
    pub fn kafka_addr(&self, id: i32) -> String {
        format!("127.0.0.1:{}", self.broker_kafka_ports[id as usize - 1])
    }

    /// Every broker's Kafka listener, comma-separated (a Kafka client's `bootstrap.servers`).
    pub fn kafka_bootstrap(&self) -> String {
        (1..=self.brokers.len() as i32)
            .map(|id| self.kafka_addr(id))
            .collect::<Vec<_>>()
            .join(",")
    }

    pub fn start_broker(&mut self, id: i32) {
        let mut cmd = match self.broker_nofile {
            // util-linux's prlimit sets the limit and execs the broker (same pid).
            Some(n) => {
                let mut c = Command::new("prlimit");
                c.arg(format!("--nofile={n}:{n}")).arg(broker_bin());
                c
            }
            None => Command::new(broker_bin()),
        };
        cmd.arg("--node-id")
            .arg(id.to_string())
            .arg("--controller-quorum-voters")
            .arg(self.voters())
            .arg("--listeners")
            .arg(format!(
                "GRPC://{},{}://{}",
                self.broker_addr(id),
                if self.tls { "SSL" } else { "PLAINTEXT" },
                self.kafka_addr(id)
            ))
            .arg("--log-dirs")
            .arg(self.broker_data_dir(id))
            .arg("--broker-heartbeat-interval-ms")
            .arg(HEARTBEAT_INTERVAL_MS.to_string())
            .arg("--broker-session-timeout-ms")
            .arg(self.session_timeout_ms.to_string())
            .arg("--metadata-snapshot-interval-ms")
            .arg(self.snapshot_interval_ms.to_string())
            .args(&self.broker_args)
            .args(
                self.broker_metrics_ports
                    .get(id as usize - 1)
                    .map(|p| vec!["--metrics-listener".to_string(), format!("127.0.0.1:{p}")])
                    .unwrap_or_default(),
            )
            .env("KEEL_LOG", "info");
        self.brokers[id as usize - 1].start(cmd);
    }

    /// Adds a broker to the running cluster (an operator adding a machine): the next id,
    /// fresh ports and data directory, started at once. Returns its id.
    pub fn add_broker(&mut self) -> i32 {
        let id = self.brokers.len() as i32 + 1;
        let metrics = usize::from(!self.broker_metrics_ports.is_empty());
        let mut ports = free_ports(2 + metrics);
        if metrics == 1 {
            self.broker_metrics_ports
                .push(ports.pop().expect("reserved"));
        }
        self.broker_kafka_ports.push(ports.pop().expect("reserved"));
        self.broker_ports.push(ports.pop().expect("reserved"));
        self.brokers.push(NodeProcess::new(
            format!("broker {id}"),
            self.dir.path().join(format!("broker-{id}.log")),
        ));
        self.start_broker(id);
        id
    }

    pub fn controller_running(&self, id: u64) -> bool {
        self.controllers[id as usize - 1].running()
    }

    pub fn controller_ids(&self) -> Vec<u64> {
        (1..=self.controllers.len() as u64).collect()
    }

    pub fn broker_ids(&self) -> Vec<i32> {
        (1..=self.brokers.len() as i32).collect()
    }

    /// SIGKILL of controller `id`.
    pub fn kill_controller(&mut self, id: u64) {
        self.controllers[id as usize - 1].kill();
    }

    /// SIGSTOP of controller `id` (alive, frozen) until [`Self::resume_controller`].
    pub fn pause_controller(&self, id: u64) {
        self.controllers[id as usize - 1].pause();
    }

    /// SIGCONT of controller `id`.
    pub fn resume_controller(&self, id: u64) {
        self.controllers[id as usize - 1].resume();
    }

    /// Sends `signal` (e.g. "STOP", "CONT") to broker `id`.
    pub fn signal_broker(&self, id: i32, signal: &str) {
        self.brokers[id as usize - 1].signal(signal);
    }

    /// SIGSTOP of broker `id` (alive, frozen) until [`Self::resume_broker`].
    pub fn pause_broker(&self, id: i32) {
        self.brokers[id as usize - 1].pause();
    }

    /// SIGCONT of broker `id`.
    pub fn resume_broker(&self, id: i32) {
        self.brokers[id as usize - 1].resume();
    }

    /// Whether broker `id` was started and not killed.
    pub fn broker_running(&self, id: i32) -> bool {
        self.brokers[id as usize - 1].running()
    }

    /// The process id of broker `id` while it runs.
    pub fn broker_pid(&self, id: i32) -> Option<u32> {
        self.brokers[id as usize - 1].pid()
    }

    /// Waits up to `deadline` for broker `id` to exit on its own; its status, or `None`.
    pub fn wait_broker_exit(&mut self, id: i32, deadline: Duration) -> Option<ExitStatus> {
        self.brokers[id as usize - 1].wait_exit(deadline)
    }

    /// SIGKILL of broker `id`.
    pub fn kill_broker(&mut self, id: i32) {
        self.brokers[id as usize - 1].kill();
    }

    /// SIGTERM of broker `id`; waits for its exit (at most `deadline`) and returns the status.
    ///
    /// # Panics
    /// When it has not exited by then (it is then killed).
    pub async fn terminate_broker(&mut self, id: i32, deadline: Duration) -> ExitStatus {
        self.terminate(false, id as usize, deadline).await
    }

    /// SIGTERM of controller `id`; waits for its exit (at most `deadline`) and returns the
    /// status.
    ///
    /// # Panics
    /// When it has not exited by then (it is then killed).
    pub async fn terminate_controller(&mut self, id: u64, deadline: Duration) -> ExitStatus {
        self.terminate(true, id as usize, deadline).await
    }

    async fn terminate(&mut self, controller: bool, id: usize, deadline: Duration) -> ExitStatus {
        let node = if controller {
            &mut self.controllers[id - 1]
        } else {
            &mut self.brokers[id - 1]
        };
        node.signal("TERM");
        let start = Instant::now();
        loop {
            if let Some(status) = node.wait_exit(Duration::ZERO) {
                return status;
            }
            if start.elapsed() > deadline {
                node.kill();
                let name = if controller { "controller" } else { "broker" };
                panic!(
                    "{name} {id} did not exit within {deadline:?} of SIGTERM\n{}",
                    self.logs()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn controller_client(&self, id: u64) -> ControllerServiceClient<Channel> {
        ControllerServiceClient::new(self.channel(&self.controller_addr(id)))
    }

    /// Polls `f` (over the active controller's DescribeCluster) until it is true.
    pub async fn wait_cluster(
        &self,
        what: &str,
        deadline: Duration,
        mut f: impl FnMut(&DescribeClusterReply) -> bool,
    ) -> DescribeClusterReply {
        let start = Instant::now();
        let mut last = None;
        loop {
            if let Some(r) = self.try_describe_cluster().await {
                if f(&r) {
                    return r;
                }
                last = Some(r);
            }
            assert!(
                start.elapsed() < deadline,
                "{what}: not within {deadline:?}; last DescribeCluster: {last:#?}\n{}",
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// The active controller id (polls).
    pub async fn active_controller(&self, deadline: Duration) -> u64 {
        self.wait_cluster("an active controller", deadline, |_| true)
            .await
            .controller_id as u64
    }

    pub async fn try_metadata(&self, id: i32, topics: &[&str]) -> Option<MetadataReply> {
        let mut c = self.broker_client(id);
        tokio::time::timeout(
            Duration::from_millis(1000),
            c.metadata(MetadataRequest {
                topics: topics.iter().map(|t| t.to_string()).collect(),
            }),
        )
        .await
        .ok()?
        .ok()
        .map(|r| r.into_inner())
    }

    /// Waits until broker `id`'s image is at the same offset as the active controller's and
    /// asserts the digests are equal there. Returns the common offset.
    pub async fn assert_digest_matches(&self, id: i32, deadline: Duration) -> i64 {
        let start = Instant::now();
        let mut last = String::new();
        loop {
            // Controller, broker, controller: equal offsets around the broker's answer mean
            // the controller's digest is the one at that offset.
            if let Some(c1) = self.describe_cluster_with(true).await
                && let Some(b) = self.describe_replicas_with(id, true).await
                && let Some(c2) = self.describe_cluster_with(true).await
            {
                if c1.metadata_offset == b.metadata_offset
                    && c2.metadata_offset == b.metadata_offset
                {
                    assert_eq!(
                        b.image_digest, c1.image_digest,
                        "broker {id} and controller {} differ at offset {}",
                        c1.replying_node_id, b.metadata_offset
                    );
                    assert_eq!(c1.image_digest, c2.image_digest);
                    return b.metadata_offset;
                }
                last = format!(
                    "controller at {}/{}, broker at {}",
                    c1.metadata_offset, c2.metadata_offset, b.metadata_offset
                );
            }
            assert!(
                start.elapsed() < deadline,
                "broker {id}: no common offset with the active controller within {deadline:?} ({last})\n{}",
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The last lines of every process log (for failure messages).
    pub fn logs(&self) -> String {
        self.controllers
            .iter()
            .chain(&self.brokers)
            .map(|p| p.log_tail(25))
            .collect()
    }
}

impl crate::Endpoints for Cluster {
    fn live_controllers(&self) -> Vec<(u64, String)> {
        self.controller_ids()
            .into_iter()
            .filter(|id| self.controller_running(*id))
            .map(|id| (id, self.controller_addr(id)))
            .collect()
    }

    fn broker_addr(&self, id: i32) -> String {
        format!("127.0.0.1:{}", self.broker_ports[id as usize - 1])
    }

    fn diagnostics(&self) -> String {
        self.logs()
    }

    fn channel(&self, addr: &str) -> Channel {
        crate::api::dial(&self.dialer, addr)
    }
}

/// Makes `<dir>/tls/`: a development CA, the `node` certificate every process uses and the
/// harness's `client` certificate (both for 127.0.0.1); returns the processes' TLS flags and
/// the harness's dialer.
fn tls_files(dir: &Path) -> (Vec<String>, keel_runtime::tls::Dialer) {
    use keel_runtime::tls::{ClientAuth, Dialer, TlsContext, TlsFiles};
    let tls = dir.join("tls");
    let hosts = ["127.0.0.1".to_string(), "localhost".to_string()];
    let node = keel_client::dev_certs::issue(&tls, "node", &hosts).expect("node certificate");
    let client = keel_client::dev_certs::issue(&tls, "client", &hosts).expect("client certificate");
    let ca = tls.join(keel_client::dev_certs::CA_FILE);
    let path = |p: &Path| p.display().to_string();
    let args = vec![
        "--tls-cert-file".into(),
        path(&node.cert),
        "--tls-key-file".into(),
        path(&node.key),
        "--tls-ca-file".into(),
        path(&ca),
        "--ssl-client-auth".into(),
        "required".into(),
    ];
    let ctx = TlsContext::load(
        TlsFiles {
            ca,
            identity: Some((client.cert, client.key)),
        },
        ClientAuth::None,
    )
    .expect("the harness's TLS context");
    (args, Dialer::new(Some(ctx)))
}

impl Cluster {
    /// Every record and batch CRC of `topic`-`partition` in broker `id`'s data directory.
    /// The broker must be stopped (the log is opened and recovered here).
    pub fn read_log_on_disk(&self, id: i32, topic: &str, partition: i32) -> (Records, Crcs) {
        assert!(!self.broker_running(id), "broker {id} must be stopped");
        let dir = self
            .broker_data_dir(id)
            .join(format!("{topic}-{partition}"));
        let log = Log::open(
            &dir,
            LogConfig::default(),
            Arc::new(SystemClock),
            LogOpenOptions::default(),
        )
        .unwrap();
        let (mut recs, mut crcs) = (Vec::new(), Vec::new());
        let mut offset = log.log_start_offset();
        while offset < log.log_end_offset() {
            let r = log.read(offset, 1 << 20, log.log_end_offset()).unwrap();
            let (a, b) = decode(&r.records);
            recs.extend(a);
            crcs.extend(b);
            offset = r.next_offset;
        }
        (recs, crcs)
    }
}
