//! Kafka's combined mode (KIP-833, issue #25) on the real `keel-server` binary: three
//! processes, each a controller and a broker (`process_roles = ["broker", "controller"]`),
//! serve an RF=3 topic with acks=all, survive a kill -9 of the process holding the active
//! controller and the partition's leader (a new active controller, a new leader, produce and
//! consume still work), and stop cleanly on SIGTERM (broker first, then controller).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use keel_proto::ErrorCode;
use keel_tests::Endpoints;
use keel_tests::data::{assigned_topic, code, values};
use keel_tests::http::http_get;
use keel_tests::node::NodeProcess;
use keel_tests::process::{HEARTBEAT_INTERVAL_MS, SESSION_TIMEOUT_MS, binary, free_ports};

const WAIT: Duration = Duration::from_secs(30);
const NODES: u64 = 3;

/// Three `keel-server` processes in one temp dir (kept when the test panics).
struct Combined {
    dir: tempfile::TempDir,
    /// Per node: controller, broker gRPC, Kafka, metrics port.
    ports: Vec<[u16; 4]>,
    nodes: Vec<NodeProcess>,
}

impl Combined {
    fn start() -> Combined {
        let dir = tempfile::Builder::new()
            .prefix("keel-combined-")
            .tempdir()
            .unwrap();
        let free = free_ports(4 * NODES as usize);
        let ports: Vec<[u16; 4]> = free.chunks(4).map(|c| [c[0], c[1], c[2], c[3]]).collect();
        let nodes = (1..=NODES)
            .map(|id| {
                NodeProcess::new(
                    format!("server {id}"),
                    dir.path().join(format!("server-{id}.log")),
                )
            })
            .collect();
        let mut c = Combined { dir, ports, nodes };
        for id in 1..=NODES {
            c.write_config(id);
            c.start_node(id);
        }
        c
    }

    fn voters(&self) -> String {
        (1..=NODES)
            .map(|id| format!("{id}@127.0.0.1:{}", self.ports[id as usize - 1][0]))
            .collect::<Vec<_>>()
            .join(",")
    }

    fn config_path(&self, id: u64) -> PathBuf {
        self.dir.path().join(format!("server-{id}.toml"))
    }

    fn write_config(&self, id: u64) {
        let [controller, broker, kafka, metrics] = self.ports[id as usize - 1];
        let text = format!(
            "process_roles = [\"broker\", \"controller\"]\n\
             node_id = {id}\n\
             controller_quorum_voters = \"{voters}\"\n\
             data_dir = \"{data}\"\n\
             metrics_listener = \"127.0.0.1:{metrics}\"\n\n\
             [controller]\n\
             listeners = \"127.0.0.1:{controller}\"\n\
             broker_heartbeat_interval_ms = {HEARTBEAT_INTERVAL_MS}\n\
             broker_session_timeout_ms = {SESSION_TIMEOUT_MS}\n\n\
             [broker]\n\
             listeners = \"GRPC://127.0.0.1:{broker},PLAINTEXT://127.0.0.1:{kafka}\"\n\
             broker_heartbeat_interval_ms = {HEARTBEAT_INTERVAL_MS}\n\
             broker_session_timeout_ms = {SESSION_TIMEOUT_MS}\n",
            voters = self.voters(),
            data = self.dir.path().join(format!("server-{id}")).display(),
        );
        std::fs::write(self.config_path(id), text).unwrap();
    }

    fn start_node(&mut self, id: u64) {
        let mut cmd = Command::new(binary("keel-server"));
        cmd.arg("--config")
            .arg(self.config_path(id))
            .env("KEEL_LOG", "info,openraft=warn");
        self.nodes[id as usize - 1].start(cmd);
    }

    fn node(&mut self, id: u64) -> &mut NodeProcess {
        &mut self.nodes[id as usize - 1]
    }

    fn metrics_addr(&self, id: u64) -> SocketAddr {
        format!("127.0.0.1:{}", self.ports[id as usize - 1][3])
            .parse()
            .unwrap()
    }

    /// The active controller's id, from a live controller that says it is the active one.
    async fn active_controller(&self) -> Option<u64> {
        let r = self.try_describe_cluster().await?;
        u64::try_from(r.controller_id).ok()
    }
}

impl Endpoints for Combined {
    fn live_controllers(&self) -> Vec<(u64, String)> {
        (1..=NODES)
            .filter(|id| self.nodes[*id as usize - 1].running())
            .map(|id| (id, format!("127.0.0.1:{}", self.ports[id as usize - 1][0])))
            .collect()
    }

    fn broker_addr(&self, id: i32) -> String {
        format!("127.0.0.1:{}", self.ports[id as usize - 1][1])
    }

    fn diagnostics(&self) -> String {
        self.nodes
            .iter()
            .map(|n| n.log_tail(40))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_combined_nodes_serve_acks_all_and_survive_losing_the_active_controller() {
    let mut c = Combined::start();
    c.wait_unfenced(&[1, 2, 3], WAIT).await;
    // One metrics listener per process: ready once both of its roles are, with both roles'
    // metrics on /metrics.
    for id in 1..=NODES {
        let addr = c.metrics_addr(id);
        let body = c
            .wait_for(&format!("server {id} ready"), WAIT, || async move {
                let (status, body) = http_get(addr, "/health/ready").await?;
                (status == 200).then_some(body)
            })
            .await;
        assert!(
            body.contains("controller: ") && body.contains("broker: "),
            "{body}"
        );
        let (status, metrics) = http_get(addr, "/metrics").await.unwrap();
        assert_eq!(status, 200);
        assert!(
            metrics.contains("keel_controller_") && metrics.contains("keel_broker_"),
            "server {id}'s /metrics lacks a role:\n{metrics}"
        );
    }

    // The partition's leader is on the node holding the active controller, so one kill -9
    // takes both away.
    let active = c
        .wait_for("an active controller", WAIT, || c.active_controller())
        .await;
    let others: Vec<i32> = (1..=NODES as i32)
        .filter(|id| *id != active as i32)
        .collect();
    let replicas = [active as i32, others[0], others[1]];
    c.create_topic(assigned_topic("events", &[&replicas]), WAIT)
        .await;
    c.set_topic_config("events", "min.insync.replicas", "2", WAIT)
        .await;
    let before = c
        .wait_leader_isr(replicas[0], "events", &replicas, WAIT)
        .await;
    c.wait_for("min.insync.replicas 2 applied", WAIT, || async {
        (c.replica(replicas[0], "events", 0)
            .await?
            .min_insync_replicas
            == 2)
            .then_some(())
    })
    .await;
    let first = values("first", 0..200);
    let r = c.produce(replicas[0], "events", -1, &first).await;
    assert_eq!(code(&r), ErrorCode::None, "{r:?}");
    let (got, _, hw) = c.consume(replicas[0], "events", 0, 0).await;
    assert_eq!(hw, first.len() as i64);
    let got: Vec<String> = got.into_iter().map(|(_, v)| v).collect();
    assert_eq!(got, first);

    // kill -9 of the process with the active controller and the leader.
    c.node(active).kill();
    let new_active = c
        .wait_for("a new active controller", WAIT, || async {
            c.active_controller().await.filter(|id| *id != active)
        })
        .await;
    assert_ne!(new_active, active);
    // The dead broker is fenced after its session and leaves the ISR; the next replica in
    // order leads with a higher leader epoch.
    let after = c
        .wait_leader_isr(replicas[1], "events", &replicas[1..], WAIT)
        .await;
    assert!(
        after.leader_epoch > before.leader_epoch,
        "{before:?} -> {after:?}"
    );
    let second = values("second", 0..200);
    let r = c.produce(replicas[1], "events", -1, &second).await;
    assert_eq!(code(&r), ErrorCode::None, "{r:?}");
    // acks=all was answered once the ISR had it: everything is below the HW, in order.
    let (all, _, hw) = c.consume(replicas[1], "events", 0, 0).await;
    assert_eq!(hw, (first.len() + second.len()) as i64);
    let all: Vec<String> = all.into_iter().map(|(_, v)| v).collect();
    let want: Vec<String> = first.iter().chain(&second).cloned().collect();
    assert_eq!(all, want);
    // The follower has them too (its copy, read through the leader's HW).
    c.wait_for("the follower caught up", WAIT, || async {
        let r = c.replica(replicas[2], "events", 0).await?;
        (r.log_end_offset == (first.len() + second.len()) as i64).then_some(())
    })
    .await;

    // SIGTERM: the broker's controlled shutdown, then the controller; exit 0.
    let stopping = replicas[2] as u64;
    let status = c
        .node(stopping)
        .terminate(WAIT)
        .expect("a combined node exits after SIGTERM");
    assert!(status.success(), "{status:?}\n{}", c.diagnostics());
    let log = c.nodes[stopping as usize - 1].log();
    let broker_stopped = log
        .find("broker stopped")
        .unwrap_or_else(|| panic!("no broker stop in\n{log}"));
    let controller_stopped = log
        .find("controller stopped")
        .unwrap_or_else(|| panic!("no controller stop in\n{log}"));
    assert!(
        broker_stopped < controller_stopped,
        "the controller stopped before the broker:\n{log}"
    );
    assert!(
        log.contains("controlled shutdown granted"),
        "the broker's controlled shutdown was not granted:\n{log}"
    );
}
