//! Shared fixture of the multi-process client tests: a local cluster started with
//! `keelctl cluster up` in a temp dir on free ports, stopped on drop.
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

pub const KEELCTL: &str = env!("CARGO_BIN_EXE_keelctl");

/// kcat with `args` and `stdin`, killed past 30 s (a hang is the calling test's failure);
/// (success, stdout, stderr). kcat must be installed (`scripts/test` does it).
pub fn kcat(args: &[String], stdin: &str) -> (bool, String, String) {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = Command::new("kcat")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect(
            "kcat is not installed, and the Kafka-client tests need it (#23): `apt-get install \
             kcat` (scripts/test installs it)",
        );
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin.as_bytes()).unwrap();
    drop(input);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("kcat {args:?} hung past 30 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let o = child.wait_with_output().unwrap();
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// The Python of `scripts/kafka-clients-venv` (or `KEEL_KAFKA_PYTHON`); panics naming the
/// script when it is missing.
pub fn kafka_python() -> PathBuf {
    let python = std::env::var_os("KEEL_KAFKA_PYTHON").map_or_else(
        || {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../target/kafka-clients-venv/bin/python")
        },
        PathBuf::from,
    );
    assert!(
        python.exists(),
        "{} is missing: run scripts/kafka-clients-venv (scripts/test does)",
        python.display()
    );
    python
}

/// `target/<profile>/<name>` next to keelctl, where `cargo build` puts the workspace
/// binaries. Tests never build: `./scripts/test` builds every binary first
/// (`cargo build --workspace --bins`); a missing one fails here with that command.
pub fn sibling_binary(name: &str) -> PathBuf {
    let profile_dir = Path::new(KEELCTL)
        .parent()
        .expect("keelctl in target/<profile>");
    let bin = profile_dir.join(name);
    assert!(
        bin.exists(),
        "{} is missing: build the binaries first (`cargo build --workspace --bins`, as ./scripts/test does)",
        bin.display()
    );
    bin
}

/// A base port whose controller (base+1..=3), broker (base+100..=102) and metrics
/// (base+301..=303, base+311..=313) ports are all free. Chosen at random below 32768, out of
/// Linux's ephemeral range (32768..=60999 by default), where an outgoing connection can take
/// a port between this check and the process start (README, "Local cluster").
pub fn free_base_port() -> u16 {
    use std::hash::BuildHasher;
    const LOW: u64 = 10_000;
    const HIGH: u64 = 32_768 - 314;
    let seed = std::collections::hash_map::RandomState::new().hash_one(std::process::id());
    for i in 0..200u64 {
        let base = (LOW + seed.wrapping_add(i.wrapping_mul(7_919)) % (HIGH - LOW)) as u16;
        let ports = [
            1u16, 2, 3, 100, 101, 102, 201, 202, 203, 301, 302, 303, 311, 312, 313,
        ]
        .map(|o| base + o);
        if ports
            .iter()
            .all(|p| TcpListener::bind(("127.0.0.1", *p)).is_ok())
        {
            return base;
        }
    }
    panic!("no free base port found");
}

/// A local cluster under a temp dir; stopped on drop even when the test fails.
pub struct Fixture {
    /// Temp dir holding the data dir.
    pub dir: tempfile::TempDir,
    /// Base port.
    pub base: u16,
}

impl Fixture {
    pub fn data_dir(&self) -> String {
        self.dir.path().join("keel-data").display().to_string()
    }

    pub fn controllers(&self) -> String {
        (1..=3)
            .map(|i| format!("127.0.0.1:{}", self.base + i))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Runs keelctl with the cluster's controllers as bootstrap.
    pub fn run(&self, args: &[&str]) -> Output {
        Command::new(KEELCTL)
            .args(args)
            .env("KEEL_BOOTSTRAP_CONTROLLERS", self.controllers())
            .env_remove("KEEL_BOOTSTRAP_BROKERS")
            .output()
            .expect("run keelctl")
    }

    /// Runs keelctl, requires success, parses stdout as JSON.
    pub fn json(&self, args: &[&str]) -> Value {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "keelctl {args:?} failed: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            self.logs()
        );
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "keelctl {args:?}: not JSON ({e}): {}",
                String::from_utf8_lossy(&out.stdout)
            )
        })
    }

    /// Runs keelctl, requires failure, returns stderr.
    pub fn fails(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            !out.status.success(),
            "keelctl {args:?} should fail: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    }

    pub fn cluster(&self, verb: &str, extra: &[&str]) -> Value {
        let base = self.base.to_string();
        let data = self.data_dir();
        let mut args = vec!["--json", "cluster", verb, "--data-dir", &data];
        if verb != "down" {
            args.extend(["--base-port", &base]);
        } else {
            args.extend(["--base-port", &base, "--timeout-secs", "20"]);
        }
        args.extend(extra);
        self.json(&args)
    }

    pub fn logs(&self) -> String {
        let mut s = String::new();
        for name in [
            "controller-1",
            "controller-2",
            "controller-3",
            "broker-1",
            "broker-2",
            "broker-3",
        ] {
            let path = self
                .dir
                .path()
                .join("keel-data")
                .join(format!("{name}.log"));
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(15).collect();
            s.push_str(&format!("--- {name}\n"));
            for l in tail.into_iter().rev() {
                s.push_str(l);
                s.push('\n');
            }
        }
        s
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = Command::new(KEELCTL)
            .args(["cluster", "down", "--data-dir", &self.data_dir()])
            .args(["--base-port", &self.base.to_string(), "--timeout-secs", "5"])
            .output();
    }
}

impl Fixture {
    /// A fresh fixture on free ports (nothing started yet).
    pub fn fresh() -> Fixture {
        sibling_binary("keel-controller");
        sibling_binary("keel-broker");
        Fixture {
            dir: tempfile::tempdir().unwrap(),
            base: free_base_port(),
        }
    }

    /// Broker addresses of the cluster.
    pub fn brokers(&self) -> Vec<String> {
        (100..=102)
            .map(|o| format!("127.0.0.1:{}", self.base + o))
            .collect()
    }

    /// Runs keelctl with `stdin` (text or bytes) as its standard input.
    pub fn run_with_stdin(&self, args: &[&str], stdin: impl AsRef<[u8]>) -> Output {
        use std::io::Write;
        use std::process::Stdio;
        let mut child = Command::new(KEELCTL)
            .args(args)
            .env("KEEL_BOOTSTRAP_CONTROLLERS", self.controllers())
            .env_remove("KEEL_BOOTSTRAP_BROKERS")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run keelctl");
        // keelctl may exit before it reads its input (a usage error is found first), so a
        // broken pipe is not a failure: its exit code and output are what tests check.
        match child.stdin.take().unwrap().write_all(stdin.as_ref()) {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
            r => r.unwrap(),
        }
        child.wait_with_output().unwrap()
    }

    /// SIGKILL to broker `id` (kill -9).
    pub fn kill9_broker(&self, id: i32) {
        self.kill9(&format!("broker-{id}"));
    }

    /// SIGKILL to controller `id` (kill -9).
    pub fn kill9_controller(&self, id: i64) {
        self.kill9(&format!("controller-{id}"));
    }

    /// SIGKILL to the process `name` (`broker-2`, `controller-1`) of the local cluster.
    pub fn kill9(&self, name: &str) {
        let pid_file = self
            .dir
            .path()
            .join("keel-data")
            .join(format!("{name}.pid"));
        let pid = std::fs::read_to_string(&pid_file)
            .unwrap_or_else(|e| panic!("{}: {e}", pid_file.display()));
        let status = Command::new("kill")
            .args(["-9", pid.trim()])
            .status()
            .unwrap();
        assert!(status.success(), "kill -9 {pid}");
    }
}

impl Fixture {
    /// The pid of `name` (`broker-2`, `controller-1`) from its pid file.
    pub fn pid(&self, name: &str) -> String {
        let pid_file = self
            .dir
            .path()
            .join("keel-data")
            .join(format!("{name}.pid"));
        std::fs::read_to_string(&pid_file)
            .unwrap_or_else(|e| panic!("{}: {e}", pid_file.display()))
            .trim()
            .to_string()
    }

    /// Sends `signal` (`STOP`, `CONT`) to the process `name` of the local cluster.
    pub fn signal(&self, name: &str, signal: &str) {
        let pid = self.pid(name);
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &pid])
            .status()
            .unwrap();
        assert!(status.success(), "kill -{signal} {pid} ({name})");
    }

    /// Starts broker `id` again (after a kill -9) with the layout of `cluster up`; the child
    /// is stopped by `cluster down` (the fixture's drop) and reaped by the caller.
    pub fn restart_broker(&self, id: i32) -> std::process::Child {
        let layout =
            keel_client::local_cluster::Layout::new(self.dir.path().join("keel-data"), self.base)
                .unwrap();
        let spec = layout
            .processes()
            .into_iter()
            .find(|s| s.name() == format!("broker-{id}"))
            .unwrap();
        let bin = sibling_binary("keel-broker");
        keel_client::local_cluster::spawn(&layout, &spec, &bin).unwrap()
    }

    /// Runs keelctl with the cluster's controllers and `brokers` (comma separated) as
    /// bootstrap.
    pub fn run_with_brokers(&self, brokers: &str, args: &[&str]) -> Output {
        Command::new(KEELCTL)
            .args(args)
            .env("KEEL_BOOTSTRAP_CONTROLLERS", self.controllers())
            .env("KEEL_BOOTSTRAP_BROKERS", brokers)
            .output()
            .expect("run keelctl")
    }

    /// Polls `topic describe` of `topic` partition 0 until `pred` holds (deadline 60 s).
    pub fn wait_partition(&self, topic: &str, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let out = self.run(&["--json", "topic", "describe", topic]);
            if out.status.success() {
                let v: Value = serde_json::from_slice(&out.stdout).unwrap();
                let p = v[0]["partitions"][0].clone();
                if pred(&p) {
                    return p;
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "{topic}-0: {what} not reached: {p}\n{}",
                    self.logs()
                );
            }
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    }
}

impl Fixture {
    /// `cluster up` with extra `KEEL_*` settings in its environment (recorded for the
    /// processes it starts).
    pub fn cluster_up_env(&self, env: &[(&str, &str)]) {
        let base = self.base.to_string();
        let data = self.data_dir();
        let out = Command::new(KEELCTL)
            .args(["--json", "cluster", "up", "--data-dir", &data])
            .args(["--base-port", &base, "--timeout-secs", "120"])
            .env("KEEL_BOOTSTRAP_CONTROLLERS", self.controllers())
            .env_remove("KEEL_BOOTSTRAP_BROKERS")
            .envs(env.iter().copied())
            .output()
            .expect("run keelctl");
        assert!(
            out.status.success(),
            "cluster up failed: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            self.logs()
        );
    }
}
