//! An in-process cluster (DESIGN §8 layer 3): controllers and brokers run in the test's own
//! process, each on its own tokio runtime, over real gRPC on loopback listeners bound to port
//! 0, with their data on disk in one temp dir. It starts in a fraction of the time real
//! processes take (no exec, short timeouts), so scenarios that need the real servers but not
//! separate processes (request handling, replication, ISR and leader changes) belong here.
//!
//! Every listener is bound before any node starts, so the voter set is written from the bound
//! addresses and no port is reserved and released (no race with other tests). A node is
//! started with [`keel_controller::server::serve`] / [`keel_broker::server::serve`] on its
//! listener; a stop is their graceful shutdown, a kill drops the node's runtime (every task of
//! the node ends at its next await, as in a crash; files written so far stay).
//!
//! Every broker also has a Kafka-protocol listener ([`InProcessCluster::kafka_addr`],
//! [`InProcessCluster::kafka_bootstrap`]) for tests with Kafka clients.
//!
//! Node ids: controllers `1..=controllers`, brokers `1..=brokers` (separate id spaces, like
//! the multi-process harnesses).
//!
//! Limits: everything shares one process, so the process-wide metrics recorder and the
//! drop-behind thread are shared and no node has a metrics listener; a killed broker's
//! lifecycle thread (its own runtime) sees the shutdown and ends after one controlled
//! shutdown attempt rather than at once.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use tokio::sync::oneshot;

use keel_runtime::settings::{Binary, Layer, Schema, Settings, Value};

use crate::api::Endpoints;

/// Timings of an in-process cluster, ms. Shorter than the binaries' defaults so a cluster is
/// serving within about half a second; long enough for a loaded 2-core machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timings {
    /// Raft heartbeat interval of the controllers.
    pub raft_heartbeat_interval_ms: u64,
    /// Lower end of the controllers' election timeout (upper end: twice this).
    pub election_timeout_min_ms: u64,
    /// Broker heartbeat interval (controllers and brokers).
    pub broker_heartbeat_interval_ms: u64,
    /// Broker session timeout (controllers and brokers).
    pub broker_session_timeout_ms: u64,
    /// `replica_lag_time_max_ms` of the brokers.
    pub replica_lag_time_max_ms: u64,
    /// `log_cleaner_backoff_ms` of the brokers (a compacted topic is cleaned this soon).
    pub log_cleaner_backoff_ms: u64,
}

impl Default for Timings {
    fn default() -> Self {
        Self {
            raft_heartbeat_interval_ms: 50,
            election_timeout_min_ms: 200,
            broker_heartbeat_interval_ms: 100,
            broker_session_timeout_ms: 1500,
            replica_lag_time_max_ms: 1000,
            log_cleaner_backoff_ms: 200,
        }
    }
}

/// A node's address (a broker's Kafka-protocol listener too) and, while it runs, its runtime
/// and shutdown handles.
#[derive(Debug)]
struct Node {
    addr: SocketAddr,
    kafka_addr: Option<SocketAddr>,
    running: Option<Running>,
}

impl Node {
    /// A node at `listener`'s address, not started yet.
    fn stopped(listener: &std::net::TcpListener) -> Self {
        Self {
            addr: listener.local_addr().expect("a bound address"),
            kafka_addr: None,
            running: None,
        }
    }
}

/// A running node: its own runtime, the trigger of its graceful shutdown, and its outcome.
#[derive(Debug)]
struct Running {
    runtime: tokio::runtime::Runtime,
    stop: oneshot::Sender<()>,
    done: oneshot::Receiver<Result<(), String>>,
}

/// Controllers and brokers in this process (see the module doc). Dropping it kills every node.
#[derive(Debug)]
pub struct InProcessCluster {
    dir: tempfile::TempDir,
    timings: Timings,
    controllers: BTreeMap<u64, Node>,
    brokers: BTreeMap<i32, Node>,
}

/// `values` validated by `binary`'s settings declaration, defaults filled in. Panics naming
/// the key on a value the declaration refuses (a bug of this fixture).
fn load(binary: Binary, values: impl IntoIterator<Item = (&'static str, Value)>) -> Settings {
    Schema::of(binary)
        .resolve(Layer(values.into_iter().collect()))
        .unwrap_or_else(|e| panic!("in-process {binary:?} settings: {e}"))
}

/// Binds a loopback listener on port 0.
fn bind_loopback() -> std::net::TcpListener {
    std::net::TcpListener::bind("127.0.0.1:0").expect("bind a loopback listener")
}

/// Starts `serve(listeners, shutdown)` on a new runtime named `name`.
fn spawn_node<F>(
    name: &str,
    listeners: Vec<std::net::TcpListener>,
    serve: impl FnOnce(Vec<tokio::net::TcpListener>, oneshot::Receiver<()>) -> F + Send + 'static,
) -> Running
where
    F: Future<Output = Result<(), String>> + Send + 'static,
{
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name(name)
        .enable_all()
        .build()
        .expect("start a node runtime");
    let (stop, stop_rx) = oneshot::channel();
    let (done_tx, done) = oneshot::channel();
    for l in &listeners {
        l.set_nonblocking(true).expect("a non-blocking listener");
    }
    runtime.spawn(async move {
        let listeners = listeners
            .into_iter()
            .map(|l| tokio::net::TcpListener::from_std(l).expect("a tokio listener"))
            .collect();
        let _ = done_tx.send(serve(listeners, stop_rx).await);
    });
    Running {
        runtime,
        stop,
        done,
    }
}

impl InProcessCluster {
    /// Starts `controllers` controllers and `brokers` brokers with [`Timings::default`].
    pub fn start(controllers: usize, brokers: usize) -> Self {
        Self::start_with(controllers, brokers, Timings::default())
    }

    /// Starts `controllers` controllers and `brokers` brokers with `timings`. Returns at once;
    /// wait for what the test needs (e.g. [`Endpoints::wait_unfenced`]).
    pub fn start_with(controllers: usize, brokers: usize, timings: Timings) -> Self {
        let controller_listeners: Vec<_> = (0..controllers).map(|_| bind_loopback()).collect();
        let broker_listeners: Vec<_> = (0..brokers)
            .map(|_| (bind_loopback(), bind_loopback()))
            .collect();
        let mut c = Self {
            dir: tempfile::tempdir().expect("a temp dir"),
            timings,
            controllers: (1..)
                .zip(controller_listeners.iter().map(Node::stopped))
                .collect(),
            brokers: (1..)
                .zip(broker_listeners.iter().map(|(grpc, kafka)| Node {
                    kafka_addr: Some(kafka.local_addr().expect("a bound address")),
                    ..Node::stopped(grpc)
                }))
                .collect(),
        };
        for (id, l) in (1..).zip(controller_listeners) {
            c.start_controller_on(id, l);
        }
        for (id, (grpc, kafka)) in (1..).zip(broker_listeners) {
            c.start_broker_on(id, grpc, kafka);
        }
        c
    }

    /// `1@host:port,2@host:port,...` of the controllers.
    pub fn voters(&self) -> String {
        self.controllers
            .iter()
            .map(|(id, n)| format!("{id}@{}", n.addr))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The data directory of broker `id` (its `log_dirs`).
    pub fn broker_data_dir(&self, id: i32) -> PathBuf {
        self.dir.path().join(format!("broker-{id}"))
    }

    /// The metadata log directory of controller `id`.
    pub fn controller_data_dir(&self, id: u64) -> PathBuf {
        self.dir.path().join(format!("controller-{id}"))
    }

    /// The settings controllers and brokers share: the voters and the broker session timings.
    fn shared_settings(&self) -> [(&'static str, Value); 3] {
        let t = self.timings;
        [
            ("controller_quorum_voters", Value::Text(self.voters())),
            (
                "broker_heartbeat_interval_ms",
                Value::Int(t.broker_heartbeat_interval_ms.into()),
            ),
            (
                "broker_session_timeout_ms",
                Value::Int(t.broker_session_timeout_ms.into()),
            ),
        ]
    }

    /// The configuration controller `id` runs with: the binary's own settings declaration
    /// and rules (`keel_runtime::settings`), loaded from these values as from a file.
    pub fn controller_config(&self, id: u64) -> keel_controller::config::ControllerConfig {
        let t = self.timings;
        let settings = load(
            Binary::Controller,
            [
                ("node_id", Value::Int(id.into())),
                (
                    "listeners",
                    Value::Text(self.controllers[&id].addr.to_string()),
                ),
                (
                    "metadata_log_dir",
                    Value::Text(self.controller_data_dir(id).display().to_string()),
                ),
                (
                    "raft_heartbeat_interval_ms",
                    Value::Int(t.raft_heartbeat_interval_ms.into()),
                ),
                (
                    "election_timeout_min_ms",
                    Value::Int(t.election_timeout_min_ms.into()),
                ),
                (
                    "election_timeout_max_ms",
                    Value::Int((2 * t.election_timeout_min_ms).into()),
                ),
            ]
            .into_iter()
            .chain(self.shared_settings()),
        );
        keel_controller::config::ControllerConfig::from_settings(&settings)
            .expect("a valid in-process controller config")
    }

    /// The configuration broker `id` runs with (see [`Self::controller_config`]).
    pub fn broker_config(&self, id: i32) -> keel_broker::config::BrokerConfig {
        let t = self.timings;
        let settings = load(
            Binary::Broker,
            [
                ("node_id", Value::Int(id.into())),
                (
                    "listeners",
                    Value::Text(format!(
                        "GRPC://{},PLAINTEXT://{}",
                        self.brokers[&id].addr,
                        self.kafka_addr(id)
                    )),
                ),
                (
                    "log_dirs",
                    Value::Text(self.broker_data_dir(id).display().to_string()),
                ),
                (
                    "replica_lag_time_max_ms",
                    Value::Int(t.replica_lag_time_max_ms.into()),
                ),
                // Consumer groups work on clusters of any size here: `__consumer_offsets`
                // gets at most 3 replicas and 3 partitions, and a group's first rebalance
                // does not wait for more members (Kafka's test clusters set the same).
                (
                    "offsets_topic_replication_factor",
                    Value::Int(self.brokers.len().clamp(1, 3) as i128),
                ),
                ("offsets_topic_num_partitions", Value::Int(3)),
                ("group_initial_rebalance_delay_ms", Value::Int(0)),
                (
                    "log_cleaner_backoff_ms",
                    Value::Int(t.log_cleaner_backoff_ms.into()),
                ),
            ]
            .into_iter()
            .chain(self.shared_settings()),
        );
        keel_broker::config::BrokerConfig::from_settings(&settings)
            .expect("a valid in-process broker config")
    }

    fn start_controller_on(&mut self, id: u64, listener: std::net::TcpListener) {
        let config = self.controller_config(id);
        let running = spawn_node(
            &format!("controller-{id}"),
            vec![listener],
            |mut l, stop| async move {
                keel_controller::server::serve(l.remove(0), config, async {
                    let _ = stop.await;
                })
                .await
                .map_err(|e| e.to_string())
            },
        );
        self.controllers
            .get_mut(&id)
            .expect("a controller id")
            .running = Some(running);
    }

    fn start_broker_on(
        &mut self,
        id: i32,
        grpc: std::net::TcpListener,
        kafka: std::net::TcpListener,
    ) {
        let config = self.broker_config(id);
        let running = spawn_node(
            &format!("broker-{id}"),
            vec![grpc, kafka],
            |mut l, stop| async move {
                let listeners = keel_broker::server::Listeners {
                    kafka: l.pop(),
                    grpc: l.pop().expect("the gRPC listener"),
                };
                keel_broker::server::serve(listeners, config, async {
                    let _ = stop.await;
                })
                .await
                .map_err(|e| e.to_string())
            },
        );
        self.brokers.get_mut(&id).expect("a broker id").running = Some(running);
    }

    /// The address of broker `id`'s Kafka-protocol (`PLAINTEXT`) listener.
    pub fn kafka_addr(&self, id: i32) -> SocketAddr {
        self.brokers
            .get(&id)
            .and_then(|n| n.kafka_addr)
            .unwrap_or_else(|| panic!("no broker {id}"))
    }

    /// `host:port,...` of every broker's Kafka listener (a Kafka client's
    /// `bootstrap.servers`).
    pub fn kafka_bootstrap(&self) -> String {
        self.brokers
            .keys()
            .map(|id| self.kafka_addr(*id).to_string())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Starts controller `id` again (after [`Self::kill_controller`] or
    /// [`Self::stop_controller`]) on its old address. Panics if it runs.
    pub fn start_controller(&mut self, id: u64) {
        let node = &self.controllers[&id];
        assert!(node.running.is_none(), "controller {id} is running");
        let listener = rebind(node.addr).expect("rebind the controller");
        self.start_controller_on(id, listener);
    }

    /// Starts broker `id` again on its old address. Panics if it runs.
    pub fn start_broker(&mut self, id: i32) {
        let node = &self.brokers[&id];
        assert!(node.running.is_none(), "broker {id} is running");
        let grpc = rebind(node.addr).expect("rebind the broker");
        let kafka = rebind(self.kafka_addr(id)).expect("rebind the broker's Kafka listener");
        self.start_broker_on(id, grpc, kafka);
    }

    /// Kills controller `id`: its runtime is dropped, so every task of it (Raft, the write
    /// path, the gRPC server) ends at its next await, as in a crash.
    pub fn kill_controller(&mut self, id: u64) {
        let running = self.controllers.get_mut(&id).and_then(|n| n.running.take());
        let running = running.unwrap_or_else(|| panic!("controller {id} is not running"));
        running.runtime.shutdown_background();
    }

    /// Kills broker `id` like [`Self::kill_controller`]: its runtime is dropped, its
    /// connections close, nothing is flushed beyond what was written. Its lifecycle thread
    /// (its own runtime) ends after one controlled-shutdown attempt (see the module doc).
    pub fn kill_broker(&mut self, id: i32) {
        let running = self.brokers.get_mut(&id).and_then(|n| n.running.take());
        let running = running.unwrap_or_else(|| panic!("broker {id} is not running"));
        running.runtime.shutdown_background();
    }

    /// Stops controller `id` gracefully and returns what its `serve` returned (an error
    /// text), waiting at most `deadline` (then it is killed and the wait panics).
    pub async fn stop_controller(&mut self, id: u64, deadline: Duration) -> Result<(), String> {
        let running = self.controllers.get_mut(&id).and_then(|n| n.running.take());
        let running = running.unwrap_or_else(|| panic!("controller {id} is not running"));
        stop(&format!("controller {id}"), running, deadline).await
    }

    /// Stops broker `id` gracefully (its controlled shutdown included) and returns what its
    /// `serve` returned, waiting at most `deadline`.
    pub async fn stop_broker(&mut self, id: i32, deadline: Duration) -> Result<(), String> {
        let running = self.brokers.get_mut(&id).and_then(|n| n.running.take());
        let running = running.unwrap_or_else(|| panic!("broker {id} is not running"));
        stop(&format!("broker {id}"), running, deadline).await
    }

    /// Whether controller `id` runs.
    pub fn controller_running(&self, id: u64) -> bool {
        self.controllers
            .get(&id)
            .is_some_and(|n| n.running.is_some())
    }

    /// Whether broker `id` runs.
    pub fn broker_running(&self, id: i32) -> bool {
        self.brokers.get(&id).is_some_and(|n| n.running.is_some())
    }
}

/// Triggers `running`'s graceful shutdown and waits for its outcome within `deadline`.
async fn stop(name: &str, running: Running, deadline: Duration) -> Result<(), String> {
    let Running {
        runtime,
        stop,
        done,
    } = running;
    let _ = stop.send(());
    let outcome = tokio::time::timeout(deadline, done).await;
    runtime.shutdown_background();
    match outcome {
        Ok(Ok(result)) => result,
        Ok(Err(_)) => Err(format!("{name} ended without an outcome (it panicked)")),
        Err(_) => panic!("{name} did not stop within {deadline:?}"),
    }
}

impl Drop for InProcessCluster {
    fn drop(&mut self) {
        let nodes = self
            .controllers
            .values_mut()
            .chain(self.brokers.values_mut());
        for running in nodes.filter_map(|n| n.running.take()) {
            running.runtime.shutdown_background();
        }
    }
}

impl Endpoints for InProcessCluster {
    fn live_controllers(&self) -> Vec<(u64, String)> {
        self.controllers
            .iter()
            .filter(|(_, n)| n.running.is_some())
            .map(|(id, n)| (*id, n.addr.to_string()))
            .collect()
    }

    fn broker_addr(&self, id: i32) -> String {
        self.brokers
            .get(&id)
            .unwrap_or_else(|| panic!("no broker {id}"))
            .addr
            .to_string()
    }

    fn diagnostics(&self) -> String {
        let state = |running: bool| if running { "running" } else { "stopped" };
        let mut s = String::from("in-process cluster:");
        for (id, n) in &self.controllers {
            s += &format!(
                " controller {id} {} {};",
                n.addr,
                state(n.running.is_some())
            );
        }
        for (id, n) in &self.brokers {
            s += &format!(" broker {id} {} {};", n.addr, state(n.running.is_some()));
        }
        s
    }
}

/// Binds `addr` again after a kill: [`tokio::runtime::Runtime::shutdown_background`] returns
/// before the killed node's tasks, its listeners among them, are dropped, so the address may
/// still be taken for a moment (AddrInUse seen right after a kill of a broker that had served
/// Kafka connections). Tries every 20 ms for up to 5 s.
fn rebind(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        match std::net::TcpListener::bind(addr) {
            Err(e)
                if e.kind() == std::io::ErrorKind::AddrInUse
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(20));
            }
            other => return other,
        }
    }
}
