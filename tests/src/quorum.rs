//! Controller quorums of real `keel-controller` processes on loopback, each with its own data
//! directory under one temp dir, killed on drop, with fake brokers (registration and
//! heartbeats over gRPC, no data) and a proxy that cuts links. Waits poll a condition with a
//! deadline. The binary is found as [`crate::process::controller_bin`] finds it.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use keel_proto::controller::controller_service_client::ControllerServiceClient;
use keel_proto::controller::{DescribeQuorumRequest, ReadMetadataLogRequest};
use tonic::transport::Channel;

pub use crate::data::{is_not_controller, ok};
use crate::fault::Links;
use crate::node::{NodeProcess, voters};
pub use crate::process::free_ports;
use crate::rng::TestRng;

/// A quorum of controller processes.
#[derive(Debug)]
pub struct Quorum {
    pub dir: tempfile::TempDir,
    pub ports: Vec<u16>,
    procs: Vec<NodeProcess>,
    pub extra_args: Vec<String>,
    /// Per-node `controller_quorum_voters` (default: everyone's real address).
    pub voter_overrides: std::collections::BTreeMap<u64, String>,
    /// Extra command-line flags of one node (after `extra_args`).
    pub node_args: std::collections::BTreeMap<u64, Vec<String>>,
    /// Set for a dynamic quorum: every node gets `--controller-quorum-bootstrap-servers` with
    /// this list instead of `--controller-quorum-voters` (KIP-853).
    pub bootstrap_servers: Option<String>,
}

impl Quorum {
    /// Starts `n` controllers (ids 1..=n) with test-friendly timeouts.
    pub fn start(n: usize) -> Self {
        Self::start_with(n, &[])
    }

    /// Like [`Self::start`], with extra command-line flags for every controller.
    pub fn start_with(n: usize, extra: &[&str]) -> Self {
        Self::start_with_node_args(n, extra, Default::default())
    }

    /// Like [`Self::start_with`], plus flags for single nodes (`node_args[id]`).
    pub fn start_with_node_args(
        n: usize,
        extra: &[&str],
        node_args: std::collections::BTreeMap<u64, Vec<String>>,
    ) -> Self {
        let mut q = Self::stopped(n);
        q.extra_args = extra.iter().map(|s| s.to_string()).collect();
        q.node_args = node_args;
        for id in 1..=n as u64 {
            q.start_node(id);
        }
        q
    }

    /// `n` controllers on reserved ports, none started yet.
    fn stopped(n: usize) -> Quorum {
        let dir = tempfile::tempdir().unwrap();
        let procs = (1..=n)
            .map(|id| {
                NodeProcess::new(
                    format!("controller {id}"),
                    dir.path().join(format!("controller-{id}.log")),
                )
            })
            .collect();
        Quorum {
            dir,
            ports: free_ports(n),
            procs,
            extra_args: Vec::new(),
            voter_overrides: Default::default(),
            node_args: Default::default(),
            bootstrap_servers: None,
        }
    }

    /// `n` controllers of a dynamic quorum (KIP-853): every node configured with
    /// `controller_quorum_bootstrap_servers` = node 1's address and advertising its own; node
    /// 1 formatted with `--standalone` and started (the single voter), the others formatted
    /// with `--no-initial-controllers`, not started (start them with
    /// [`Self::start_observer`] and add them with AddRaftVoter).
    pub fn start_dynamic(n: usize) -> Self {
        let mut q = Self::stopped(n);
        q.bootstrap_servers = Some(q.addr(1));
        for id in 1..=n as u64 {
            let addr = q.addr(id);
            q.node_args
                .insert(id, vec!["--advertised-listeners".to_string(), addr]);
            let flag = if id == 1 {
                "--standalone"
            } else {
                "--no-initial-controllers"
            };
            let out = q.format(id, &[flag]);
            assert!(out.status.success(), "format {id}: {out:?}");
        }
        q.start_node(1);
        q
    }

    pub fn voters(&self) -> String {
        voters(&self.ports)
    }

    /// `n` controllers on reserved ports of which only node 1 runs, as the single voter of
    /// its quorum (`controller_quorum_voters = 1@...` for every node): the others start as
    /// observers with [`Self::start_observer`], to be added with AddRaftVoter (KIP-853).
    pub fn start_single_voter(n: usize) -> Self {
        let mut q = Self::stopped(n);
        let bootstrap = format!("1@{}", q.addr(1));
        for id in 1..=n as u64 {
            q.voter_overrides.insert(id, bootstrap.clone());
        }
        q.start_node(1);
        q
    }

    /// Runs `keel-controller format` for node `id` with its start flags plus `extra`
    /// (`--standalone`, `--initial-controllers ...`, `--no-initial-controllers`,
    /// `--ignore-formatted`); returns its output.
    pub fn format(&self, id: u64, extra: &[&str]) -> std::process::Output {
        Command::new(crate::process::controller_bin())
            .arg("format")
            .args(self.node_flags(id))
            .args(self.node_args.get(&id).into_iter().flatten())
            .args(extra)
            .output()
            .expect("keel-controller format runs")
    }

    /// `n` controllers formatted with `--initial-controllers` (each with a new directory id,
    /// KIP-853), then started; returns the quorum and the directory ids by node id - 1.
    pub fn start_formatted(n: usize) -> (Quorum, Vec<String>) {
        let mut q = Self::stopped(n);
        let dirs: Vec<String> = (0..n)
            .map(|_| uuid::Uuid::new_v4().simple().to_string())
            .collect();
        let list: Vec<String> = (1..=n as u64)
            .map(|id| format!("{id}@{}:{}", q.addr(id), dirs[id as usize - 1]))
            .collect();
        let list = list.join(",");
        for id in 1..=n as u64 {
            let out = q.format(id, &["--initial-controllers", &list]);
            assert!(out.status.success(), "format {id}: {out:?}");
        }
        for id in 1..=n as u64 {
            q.start_node(id);
        }
        let dirs = (1..=n as u64).map(|id| q.directory_id(id)).collect();
        (q, dirs)
    }

    /// Starts node `id` as an observer: not in its `controller_quorum_voters`, advertising
    /// its own address.
    pub fn start_observer(&mut self, id: u64) {
        let addr = self.addr(id);
        let args = self.node_args.entry(id).or_default();
        if !args.iter().any(|a| a == "--advertised-listeners") {
            args.extend(["--advertised-listeners".to_string(), addr]);
        }
        self.start_node(id);
    }

    /// The `directory_id` of node `id`'s `meta.properties` (written at its first start);
    /// waits up to 10 s for the file.
    pub fn directory_id(&self, id: u64) -> String {
        let path = self.data_dir(id).join("meta.properties");
        let start = Instant::now();
        loop {
            if let Ok(text) = std::fs::read_to_string(&path)
                && let Some(d) = text.lines().find_map(|l| l.strip_prefix("directory_id="))
            {
                return d.to_string();
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "{} has no directory_id\n{}",
                path.display(),
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn addr(&self, id: u64) -> String {
        format!("127.0.0.1:{}", self.ports[id as usize - 1])
    }

    pub fn data_dir(&self, id: u64) -> PathBuf {
        self.dir.path().join(format!("controller-{id}"))
    }

    fn node(&self, id: u64) -> &NodeProcess {
        &self.procs[id as usize - 1]
    }

    fn node_mut(&mut self, id: u64) -> &mut NodeProcess {
        &mut self.procs[id as usize - 1]
    }

    /// Starts (or restarts) node `id`; its log goes to `<dir>/controller-<id>.log`.
    pub fn start_node(&mut self, id: u64) {
        let mut cmd = Command::new(crate::process::controller_bin());
        cmd.args(self.node_flags(id))
            .args(self.default_session_args())
            .args(&self.extra_args)
            .args(self.node_args.get(&id).into_iter().flatten())
            .env(
                "KEEL_LOG",
                std::env::var("KEEL_BENCH_LOG").unwrap_or("info,openraft=warn".into()),
            );
        self.node_mut(id).start(cmd);
    }

    /// Node `id`'s identity flags: node id, voters (its override, if any) or the bootstrap
    /// servers, listener and metadata log dir.
    fn node_flags(&self, id: u64) -> Vec<String> {
        let contact = match &self.bootstrap_servers {
            Some(list) => ["--controller-quorum-bootstrap-servers".into(), list.clone()],
            None => [
                "--controller-quorum-voters".into(),
                self.voter_overrides
                    .get(&id)
                    .cloned()
                    .unwrap_or_else(|| self.voters()),
            ],
        };
        vec![
            "--node-id".into(),
            id.to_string(),
            contact[0].clone(),
            contact[1].clone(),
            "--listeners".into(),
            self.addr(id),
            "--metadata-log-dir".into(),
            self.data_dir(id).display().to_string(),
        ]
    }

    /// The harness's broker heartbeat interval (200 ms) and session timeout (1 s), unless
    /// the quorum's extra args set them.
    fn default_session_args(&self) -> Vec<&'static str> {
        let mut args = Vec::new();
        for (flag, value) in [
            ("--broker-heartbeat-interval-ms", "200"),
            ("--broker-session-timeout-ms", "1000"),
        ] {
            if !self.extra_args.iter().any(|a| a == flag) {
                args.extend([flag, value]);
            }
        }
        args
    }

    /// Process id of node `id`, if it runs.
    pub fn pid(&self, id: u64) -> Option<u32> {
        self.node(id).pid()
    }

    /// SIGKILL of node `id`.
    pub fn kill(&mut self, id: u64) {
        self.node_mut(id).kill();
    }

    /// SIGSTOP of node `id`: alive but frozen, until [`Self::resume`].
    pub fn pause(&self, id: u64) {
        self.node(id).pause();
    }

    /// SIGCONT of node `id` after [`Self::pause`].
    pub fn resume(&self, id: u64) {
        self.node(id).resume();
    }

    /// SIGTERM of node `id` and wait for its exit; returns its exit status.
    ///
    /// # Panics
    /// When it has not exited 60 s after the signal (it is then killed).
    pub fn terminate(&mut self, id: u64) -> std::process::ExitStatus {
        self.node_mut(id)
            .terminate(Duration::from_secs(60))
            .unwrap_or_else(|| panic!("controller {id} ignored SIGTERM for 60 s"))
    }

    /// Waits up to `deadline` for node `id` to exit on its own; its exit status, or `None`
    /// (still running, left running) when the deadline passes.
    pub fn wait_exit(&mut self, id: u64, deadline: Duration) -> Option<std::process::ExitStatus> {
        self.node_mut(id).wait_exit(deadline)
    }

    /// Everything node `id` wrote to stdout/stderr so far (all its runs).
    pub fn log_of(&self, id: u64) -> String {
        self.node(id).log()
    }

    pub fn is_running(&self, id: u64) -> bool {
        self.node(id).running()
    }

    pub fn ids(&self) -> Vec<u64> {
        (1..=self.procs.len() as u64).collect()
    }

    pub async fn client(&self, id: u64) -> ControllerServiceClient<Channel> {
        let ch = Channel::from_shared(format!("http://{}", self.addr(id)))
            .unwrap()
            .connect_lazy();
        ControllerServiceClient::new(ch)
    }

    /// The leader as reported by running node `id`, if it knows one.
    pub async fn leader_seen_by(&self, id: u64) -> Option<u64> {
        let mut c = self.client(id).await;
        let r = tokio::time::timeout(
            Duration::from_millis(500),
            c.describe_quorum(DescribeQuorumRequest {}),
        )
        .await
        .ok()?
        .ok()?
        .into_inner();
        let l = r.leader?.leader_id;
        (l > 0).then_some(l as u64)
    }

    /// Waits until every running node agrees on one running leader; returns it.
    pub async fn wait_leader(&self, deadline: Duration) -> u64 {
        let start = Instant::now();
        loop {
            let mut seen = Vec::new();
            for id in self.ids().into_iter().filter(|i| self.is_running(*i)) {
                seen.push(self.leader_seen_by(id).await);
            }
            if let Some(Some(l)) = seen.first()
                && seen.iter().all(|s| *s == Some(*l))
                && self.is_running(*l)
            {
                return *l;
            }
            assert!(
                start.elapsed() < deadline,
                "no agreed leader within {deadline:?}: {seen:?}\n{}",
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Every committed record of node `id`, decoded, as `(offset, index, debug text)`.
    /// NoOpRecords are skipped (each leader writes them on its own schedule). Panics if the
    /// node does not answer; use [`Self::try_committed_records`] while it may be starting.
    pub async fn committed_records(&self, id: u64) -> Vec<(i64, u32, String)> {
        match self.try_committed_records(id).await {
            Ok(r) => r,
            Err(e) => panic!(
                "node {id} did not answer ReadMetadataLog: {e}\n{}",
                self.logs()
            ),
        }
    }

    /// Like [`Self::committed_records`], but a node that is not listening yet is an `Err`.
    pub async fn try_committed_records(
        &self,
        id: u64,
    ) -> Result<Vec<(i64, u32, String)>, tonic::Status> {
        let mut c = self.client(id).await;
        let mut out = Vec::new();
        let mut from = 0;
        loop {
            let r = c
                .read_metadata_log(ReadMetadataLogRequest {
                    from_offset: from,
                    ..Default::default()
                })
                .await?
                .into_inner();
            assert!(r.error.is_none(), "{:?}", r.error);
            let n = r.records.len();
            for rec in r.records {
                if rec.record_type != "NoOpRecord" {
                    out.push((rec.offset, rec.index_in_batch, format!("{:?}", rec.record)));
                }
            }
            if n == 0 || r.next_offset > r.commit_index {
                return Ok(out);
            }
            from = r.next_offset;
        }
    }

    /// The last lines of every node's log (for failure messages).
    pub fn logs(&self) -> String {
        self.procs.iter().map(|p| p.log_tail(30)).collect()
    }
}

impl Drop for Quorum {
    /// Kills every node. With `KEEL_TEST_KEEP_LOGS=<dir>` set, first copies each node's whole
    /// log there (`controller-<id>.log`) for debugging; failure messages show only the tails.
    fn drop(&mut self) {
        for p in &mut self.procs {
            p.kill();
        }
        if let Some(keep) = std::env::var_os("KEEL_TEST_KEEP_LOGS") {
            let keep = PathBuf::from(keep);
            let _ = std::fs::create_dir_all(&keep);
            for id in self.ids() {
                let name = format!("controller-{id}.log");
                let _ = std::fs::copy(self.dir.path().join(&name), keep.join(&name));
            }
        }
    }
}

// -------------------------------------------------------------------------------------------
// Clients that follow the active controller, fake brokers, and images built by FetchMetadata.
// -------------------------------------------------------------------------------------------

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

use keel_metadata_log::{MetadataDelta, MetadataImage, Provenance};
use keel_proto::controller::{
    BrokerHeartbeatRequest, DescribeClusterRequest, FetchMetadataRequest, RegisterBrokerRequest,
    fetch_metadata_item::Item,
};

/// Calls `f` on running controllers until it returns `Some` (it returns `None` for
/// NOT_CONTROLLER or transport errors), for at most `deadline`.
pub async fn on_leader<T, F, Fut>(q: &Quorum, deadline: Duration, mut f: F) -> T
where
    F: FnMut(ControllerServiceClient<Channel>) -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        for id in q.ids().into_iter().filter(|i| q.is_running(*i)) {
            let c = q.client(id).await;
            if let Ok(Some(v)) = tokio::time::timeout(Duration::from_millis(1500), f(c)).await {
                return v;
            }
        }
        assert!(
            start.elapsed() < deadline,
            "no active controller answered within {deadline:?}\n{}",
            q.logs()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A fake broker's RegisterBroker: broker `broker_id`, a new incarnation id, one PLAINTEXT
/// listener at 127.0.0.1:`port`.
pub fn register_request(broker_id: i32, port: u32) -> RegisterBrokerRequest {
    RegisterBrokerRequest {
        broker_id,
        incarnation_id: bytes::Bytes::copy_from_slice(uuid::Uuid::new_v4().as_bytes()),
        listeners: vec![keel_proto::metadata::BrokerEndpoint {
            name: "PLAINTEXT".into(),
            host: "127.0.0.1".into(),
            port,
            security_protocol: "PLAINTEXT".into(),
        }],
        ..Default::default()
    }
}

/// A broker that only registers and heartbeats (no data plane), in a background task.
#[derive(Debug)]
pub struct FakeBroker {
    pub id: i32,
    pub epoch: i64,
    /// Heartbeats are sent while true.
    pub alive: Arc<AtomicBool>,
    /// Last time (ms since the harness epoch) a heartbeat was acknowledged.
    pub last_heartbeat_ms: Arc<AtomicI64>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeBroker {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeBroker {
    /// Registers broker `id` (optionally in `rack`) and heartbeats every `interval`,
    /// reporting the controller's commit index as its applied metadata offset.
    pub async fn start(q: &Quorum, id: i32, rack: &str, interval: Duration) -> FakeBroker {
        let req = RegisterBrokerRequest {
            rack: rack.into(),
            ..register_request(id, 29092 + id as u32)
        };
        let epoch = on_leader(q, Duration::from_secs(10), |mut c| {
            let req = req.clone();
            async move {
                let r = c.register_broker(req).await.ok()?.into_inner();
                assert!(
                    ok(&r.error) || is_not_controller(&r.error),
                    "register {id}: {:?}",
                    r.error
                );
                ok(&r.error).then_some(r.broker_epoch)
            }
        })
        .await;
        let alive = Arc::new(AtomicBool::new(true));
        let last = Arc::new(AtomicI64::new(crate::data::now_ms()));
        let addrs: Vec<String> = q.ids().into_iter().map(|i| q.addr(i)).collect();
        let (alive2, last2) = (alive.clone(), last.clone());
        let task = tokio::spawn(async move {
            let clients: Vec<_> = addrs
                .iter()
                .map(|a| {
                    ControllerServiceClient::new(
                        Channel::from_shared(format!("http://{a}"))
                            .unwrap()
                            .connect_lazy(),
                    )
                })
                .collect();
            let mut ticker = tokio::time::interval(interval);
            loop {
                ticker.tick().await;
                if !alive2.load(Ordering::SeqCst) {
                    continue;
                }
                for c in &clients {
                    let mut c = c.clone();
                    let offset = match c.describe_cluster(DescribeClusterRequest::default()).await {
                        Ok(r) => r.into_inner().commit_index,
                        Err(_) => continue,
                    };
                    let hb = BrokerHeartbeatRequest {
                        broker_id: id,
                        broker_epoch: epoch,
                        current_metadata_offset: offset,
                        ..Default::default()
                    };
                    if let Ok(r) = c.broker_heartbeat(hb).await
                        && ok(&r.get_ref().error)
                    {
                        last2.store(crate::data::now_ms(), Ordering::SeqCst);
                        break;
                    }
                }
            }
        });
        FakeBroker {
            id,
            epoch,
            alive,
            last_heartbeat_ms: last,
            task,
        }
    }
}

/// The image of controller `id`, built like a broker builds it: FetchMetadata from offset 0
/// (snapshot first if the log was purged), replaying until the commit index seen at the
/// start of the stream.
pub async fn fetch_image(q: &Quorum, id: u64) -> Result<MetadataImage, tonic::Status> {
    let mut c = q.client(id).await;
    let mut stream = c
        .fetch_metadata(FetchMetadataRequest::default())
        .await?
        .into_inner();
    let mut image = MetadataImage::empty();
    let mut delta = MetadataDelta::new(image.clone());
    let mut target = None;
    while let Some(item) = stream.message().await? {
        let commit = *target.get_or_insert(item.commit_index as u64);
        match item.item {
            Some(Item::SnapshotHeader(h)) => {
                delta = MetadataDelta::new(MetadataImage::empty());
                delta.set_provenance(Provenance {
                    offset: h.last_included_offset as u64,
                    term: h.last_included_term as u64,
                });
            }
            Some(Item::SnapshotChunk(ch)) => {
                for r in &ch.records {
                    delta.replay(r).expect("snapshot record replays");
                }
                if ch.last {
                    image = delta.apply();
                    delta = MetadataDelta::new(image.clone());
                }
            }
            Some(Item::Batch(b)) => {
                delta.set_provenance(Provenance {
                    offset: b.offset as u64,
                    term: b.term as u64,
                });
                for r in b.batch.iter().flat_map(|b| b.records.iter()) {
                    delta.replay(r).expect("committed record replays");
                }
                if b.offset as u64 >= commit {
                    return Ok(delta.apply());
                }
            }
            None => {}
        }
        if image.provenance().offset >= commit && delta.is_empty() {
            return Ok(image);
        }
    }
    Err(tonic::Status::aborted("stream ended"))
}

/// Clients to every controller address (addresses survive restarts), usable from spawned
/// tasks while the test restarts processes.
#[derive(Debug, Clone)]
pub struct Clients {
    clients: Vec<ControllerServiceClient<Channel>>,
}

impl Clients {
    pub fn new(q: &Quorum) -> Clients {
        let clients = q
            .ids()
            .into_iter()
            .map(|i| {
                ControllerServiceClient::new(
                    Channel::from_shared(format!("http://{}", q.addr(i)))
                        .unwrap()
                        .connect_lazy(),
                )
            })
            .collect();
        Clients { clients }
    }

    /// Like [`on_leader`], over these clients; `None` if nobody answered within `deadline`.
    pub async fn on_leader<T, F, Fut>(&self, deadline: Duration, mut f: F) -> Option<T>
    where
        F: FnMut(ControllerServiceClient<Channel>) -> Fut,
        Fut: Future<Output = Option<T>>,
    {
        let start = Instant::now();
        while start.elapsed() < deadline {
            for c in &self.clients {
                if let Ok(Some(v)) =
                    tokio::time::timeout(Duration::from_millis(1500), f(c.clone())).await
                {
                    return Some(v);
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        None
    }
}

impl Quorum {
    /// Starts `n` controllers whose Raft links all go through fault proxies: node `a` reaches
    /// node `b` at `links.port(a, b)` ([`Links`]; delay jitter from a seeded [`TestRng`]).
    /// Clients still reach every node directly.
    pub async fn start_proxied(n: usize) -> (Quorum, Links) {
        Self::start_proxied_with(n, &[], Default::default()).await
    }

    /// Like [`Self::start_proxied`], with extra flags for every controller and for single
    /// nodes (`node_args[id]`).
    pub async fn start_proxied_with(
        n: usize,
        extra: &[&str],
        node_args: std::collections::BTreeMap<u64, Vec<String>>,
    ) -> (Quorum, Links) {
        let mut q = Self::stopped(n);
        q.extra_args = extra.iter().map(|s| s.to_string()).collect();
        q.node_args = node_args;
        let mut rng = TestRng::from_env("controller link proxies");
        let links = Links::start(n as u64, |b| q.addr(b), &mut rng).await;
        for a in 1..=n as u64 {
            let voters: Vec<String> = (1..=n as u64)
                .map(|b| {
                    if a == b {
                        format!("{b}@{}", q.addr(b))
                    } else {
                        format!("{b}@127.0.0.1:{}", links.port(a, b))
                    }
                })
                .collect();
            q.voter_overrides.insert(a, voters.join(","));
        }
        for id in 1..=n as u64 {
            q.start_node(id);
        }
        (q, links)
    }
}
