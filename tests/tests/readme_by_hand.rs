//! README "Run a cluster by hand", followed literally: the sample files shipped in
//! `deploy/by-hand/` (the ones the README shows, byte for byte), the start commands of its
//! shell block (controllers, then brokers, from a directory holding `deploy/by-hand/`), its
//! `keelctl` lines, the documented stop order (brokers one at a time, then controllers, the
//! active one last, each exiting 0 on SIGTERM) and a restart in the same order that keeps the
//! data; the brokers' Kafka listeners its kcat lines use answer the Kafka protocol. It runs on
//! the README's fixed ports (9093-9095, 9192-9194, 9293-9295, 9401-9413) and fails at once,
//! naming the port, when one is taken.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use keel_tests::Endpoints;
use keel_tests::node::NodeProcess;
use keel_tests::process::binary;

const WAIT: Duration = Duration::from_secs(60);

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The README section from `## Run a cluster by hand` to the next `## `.
fn section() -> String {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let start = readme
        .find("## Run a cluster by hand\n")
        .expect("README has a \"Run a cluster by hand\" section");
    let rest = &readme[start + 3..];
    rest[..rest.find("\n## ").unwrap_or(rest.len())].to_string()
}

/// The fenced code blocks of `text` with the given info string, in order.
fn blocks(text: &str, lang: &str) -> Vec<String> {
    let fence = format!("```{lang}\n");
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find(&fence) {
        let body = &rest[i + fence.len()..];
        let end = body.find("```").expect("closed block");
        out.push(body[..end].to_string());
        rest = &body[end..];
    }
    out
}

/// The cluster of the sample files: controllers 1-3 and brokers 101-103 on fixed ports.
struct ByHand {
    dir: tempfile::TempDir,
    controllers: Vec<NodeProcess>,
    brokers: Vec<NodeProcess>,
}

impl Endpoints for ByHand {
    fn live_controllers(&self) -> Vec<(u64, String)> {
        (1..=3u64)
            .filter(|id| self.controllers[*id as usize - 1].running())
            .map(|id| (id, format!("127.0.0.1:{}", 9092 + id)))
            .collect()
    }

    fn broker_addr(&self, id: i32) -> String {
        format!("127.0.0.1:{}", 9091 + id - 100)
    }

    fn diagnostics(&self) -> String {
        self.controllers
            .iter()
            .chain(&self.brokers)
            .map(|n| n.log_tail(20))
            .collect()
    }
}

impl ByHand {
    /// Runs one start line of the README (`./target/release/keel-<role> --config FILE`),
    /// with this build's binary, from the test's directory.
    fn start(&mut self, line: &str) {
        let mut words = line.split_whitespace();
        let program = words.next().unwrap();
        let role = program
            .strip_prefix("./target/release/")
            .unwrap_or_else(|| panic!("unexpected program in {line:?}"));
        let args: Vec<&str> = words.collect();
        assert_eq!(args.len(), 2, "{line:?}");
        assert_eq!(args[0], "--config", "{line:?}");
        let file = args[1];
        let n: usize = file
            .trim_end_matches(".toml")
            .rsplit('-')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        let mut cmd = Command::new(binary(role));
        cmd.args(&args).current_dir(self.dir.path());
        let node = match role {
            "keel-controller" => &mut self.controllers[n - 1],
            "keel-broker" => &mut self.brokers[n - 1],
            _ => panic!("unexpected program in {line:?}"),
        };
        node.start(cmd);
    }

    /// Every start line of the README's shell block, `for id in 1 2 3` loops expanded, in
    /// order.
    fn start_lines(sh: &str) -> Vec<String> {
        let mut out = Vec::new();
        for line in sh.lines() {
            if let Some(body) = line
                .strip_prefix("for id in 1 2 3; do ")
                .and_then(|l| l.strip_suffix(" & done"))
            {
                for id in 1..=3 {
                    out.push(body.replace("$id", &id.to_string()));
                }
            }
        }
        out
    }

    /// Runs a `keelctl` line of the README from the test's directory; asserts exit 0 and
    /// returns stdout.
    fn keelctl(&self, line: &str) -> String {
        let mut parts = line.splitn(2, " | ");
        let (stdin, cmd) = match (parts.next(), parts.next()) {
            (Some(echo), Some(cmd)) => (
                Some(echo.strip_prefix("echo ").expect("echo ... |").to_string()),
                cmd,
            ),
            (Some(cmd), None) => (None, cmd),
            _ => unreachable!(),
        };
        let cmd = cmd.split("  #").next().unwrap().trim();
        let mut words = cmd.split_whitespace();
        assert_eq!(words.next(), Some("./target/release/keelctl"), "{line:?}");
        let mut child = Command::new(binary("keelctl"))
            .args(words)
            .current_dir(self.dir.path())
            .env_remove("KEEL_BOOTSTRAP_CONTROLLERS")
            .env_remove("KEEL_BOOTSTRAP_BROKERS")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        {
            use std::io::Write;
            let mut input = child.stdin.take().unwrap();
            if let Some(text) = stdin {
                writeln!(input, "{text}").unwrap();
            }
        }
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{line:?}: {}\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr),
            self.diagnostics()
        );
        String::from_utf8(out.stdout).unwrap()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_by_hand_section_works_as_written() {
    let text = section();
    // The files the README shows are the files shipped.
    let shown = blocks(&text, "toml");
    let shipped = |name: &str| {
        std::fs::read_to_string(repo_root().join("deploy/by-hand").join(name)).unwrap()
    };
    assert_eq!(
        shown,
        [shipped("controller-1.toml"), shipped("broker-1.toml")]
    );

    for port in [
        9093, 9094, 9095, 9192, 9193, 9194, 9293, 9294, 9295, 9401, 9402, 9403, 9411, 9412, 9413,
    ] {
        assert!(
            std::net::TcpListener::bind(("127.0.0.1", port)).is_ok(),
            "port {port} is taken (a local cluster running?): this test runs the README's \
             cluster on its fixed ports"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let by_hand = dir.path().join("deploy/by-hand");
    std::fs::create_dir_all(&by_hand).unwrap();
    for f in std::fs::read_dir(repo_root().join("deploy/by-hand")).unwrap() {
        let f = f.unwrap();
        std::fs::copy(f.path(), by_hand.join(f.file_name())).unwrap();
    }
    let node =
        |name: String| NodeProcess::new(name.clone(), dir.path().join(format!("{name}.log")));
    let mut c = ByHand {
        controllers: (1..=3).map(|i| node(format!("controller-{i}"))).collect(),
        brokers: (101..=103).map(|i| node(format!("broker-{i}"))).collect(),
        dir,
    };

    let sh = blocks(&text, "sh");
    let start_block = sh
        .iter()
        .find(|b| b.contains("--config deploy/by-hand/"))
        .expect("a shell block with the start commands");
    let starts = ByHand::start_lines(start_block);
    assert_eq!(starts.len(), 6, "{start_block}");
    assert!(
        starts[..3].iter().all(|l| l.contains("keel-controller")),
        "controllers first"
    );
    for line in &starts {
        c.start(line);
    }
    c.wait_unfenced(&[101, 102, 103], WAIT).await;

    let keelctl_block = sh
        .iter()
        .find(|b| b.contains("keelctl produce") || b.contains("keelctl broker list"))
        .expect("a shell block with keelctl lines");
    let mut consumed = String::new();
    for line in keelctl_block.lines() {
        let out = c.keelctl(line);
        if line.contains("keelctl consume") {
            consumed = out;
        }
    }
    assert!(consumed.contains("hello"), "{consumed:?}");
    // The kcat lines' listener, and every broker's, speaks the Kafka protocol.
    let kcat_block = sh
        .iter()
        .find(|b| b.contains("kcat "))
        .expect("a shell block with kcat lines");
    assert!(kcat_block.contains("-b 127.0.0.1:9293"), "{kcat_block}");
    for port in [9293, 9294, 9295] {
        assert!(
            keel_client::kafka_probe::speaks_kafka(&format!("127.0.0.1:{port}")).await,
            "no Kafka listener on port {port}:\n{}",
            c.diagnostics()
        );
    }

    // The documented stop order: brokers one at a time, then controllers, the active last.
    for b in &mut c.brokers {
        let status = b.terminate(WAIT).expect("a broker exits on SIGTERM");
        assert!(status.success(), "{status}\n{}", b.log_tail(30));
    }
    let active = c.wait_unfenced(&[], WAIT).await.controller_id as usize;
    let order: Vec<usize> = (1..=3).filter(|i| *i != active).chain([active]).collect();
    for i in order {
        let n = &mut c.controllers[i - 1];
        let status = n.terminate(WAIT).expect("a controller exits on SIGTERM");
        assert!(
            status.success(),
            "controller {i}: {status}\n{}",
            n.log_tail(30)
        );
    }

    // Start again in the same order: the record is still there.
    for line in &starts {
        c.start(line);
    }
    c.wait_unfenced(&[101, 102, 103], WAIT).await;
    let again = c.keelctl("./target/release/keelctl consume --topic t");
    assert!(again.contains("hello"), "{again:?}");
}
