//! Multi-process harness: real `keel-controller` processes on loopback, each with its own
//! data directory under one temp dir, killed on drop. Waits poll a condition with a deadline.
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use keel_proto::controller::controller_service_client::ControllerServiceClient;
use keel_proto::controller::{DescribeQuorumRequest, ReadMetadataLogRequest};
use tonic::transport::Channel;

/// Path of the controller binary cargo built for these tests.
pub const BIN: &str = env!("CARGO_BIN_EXE_keel-controller");

/// Reserves `n` free loopback ports (bound then released; the window for a collision is
/// short and the harness reports it as a start failure).
pub fn free_ports(n: usize) -> Vec<u16> {
    let listeners: Vec<_> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    listeners
        .iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect()
}

/// A quorum of controller processes.
pub struct Quorum {
    pub dir: tempfile::TempDir,
    pub ports: Vec<u16>,
    procs: Vec<Option<Child>>,
    pub extra_args: Vec<String>,
}

impl Quorum {
    /// Starts `n` controllers (ids 1..=n) with test-friendly timeouts.
    pub fn start(n: usize) -> Self {
        let mut q = Quorum {
            dir: tempfile::tempdir().unwrap(),
            ports: free_ports(n),
            procs: (0..n).map(|_| None).collect(),
            extra_args: Vec::new(),
        };
        for id in 1..=n as u64 {
            q.start_node(id);
        }
        q
    }

    pub fn voters(&self) -> String {
        self.ports
            .iter()
            .enumerate()
            .map(|(i, p)| format!("{}@127.0.0.1:{p}", i + 1))
            .collect::<Vec<_>>()
            .join(",")
    }

    pub fn addr(&self, id: u64) -> String {
        format!("127.0.0.1:{}", self.ports[id as usize - 1])
    }

    pub fn data_dir(&self, id: u64) -> PathBuf {
        self.dir.path().join(format!("controller-{id}"))
    }

    /// Starts (or restarts) node `id`; its log goes to `<dir>/controller-<id>.log`.
    pub fn start_node(&mut self, id: u64) {
        assert!(
            self.procs[id as usize - 1].is_none(),
            "node {id} already running"
        );
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join(format!("controller-{id}.log")))
            .unwrap();
        let child = Command::new(BIN)
            .arg("--node-id")
            .arg(id.to_string())
            .arg("--controller-quorum-voters")
            .arg(self.voters())
            .arg("--listeners")
            .arg(self.addr(id))
            .arg("--metadata-log-dir")
            .arg(self.data_dir(id))
            .arg("--broker-heartbeat-interval-ms")
            .arg("200")
            .arg("--broker-session-timeout-ms")
            .arg("1000")
            .args(&self.extra_args)
            .env("KEEL_LOG", "info,openraft=warn")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.procs[id as usize - 1] = Some(child);
    }

    /// SIGKILL of node `id`.
    pub fn kill(&mut self, id: u64) {
        if let Some(mut c) = self.procs[id as usize - 1].take() {
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }

    /// SIGTERM of node `id` and wait for its exit; returns its exit status.
    pub fn terminate(&mut self, id: u64) -> std::process::ExitStatus {
        let mut c = self.procs[id as usize - 1].take().expect("running");
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(c.id().to_string())
            .status();
        c.wait().unwrap()
    }

    pub fn is_running(&self, id: u64) -> bool {
        self.procs[id as usize - 1].is_some()
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

    /// Concatenated stderr logs (for failure messages).
    pub fn logs(&self) -> String {
        let mut s = String::new();
        for id in self.ids() {
            let p = self.dir.path().join(format!("controller-{id}.log"));
            let text = std::fs::read_to_string(&p).unwrap_or_default();
            let tail: Vec<_> = text.lines().rev().take(30).collect();
            s += &format!("--- controller {id} (last lines) ---\n");
            for l in tail.into_iter().rev() {
                s += l;
                s += "\n";
            }
        }
        s
    }
}

impl Drop for Quorum {
    fn drop(&mut self) {
        for c in self.procs.iter_mut().flatten() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
