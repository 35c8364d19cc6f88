//! The real `keel-controller` binary on damaged or foreign metadata log directories: a
//! partial state or an identity mismatch is refused at start with one line and exit code 1,
//! and a fatal Raft error while running ends the process instead of leaving it serving.

use std::path::Path;
use std::time::{Duration, Instant};

use keel_tests::quorum::*;

/// Flags that make a one-voter quorum write NoOpRecords quickly and snapshot every few
/// entries, so a snapshot file appears within a second.
const FAST_SNAPSHOTS: &[&str] = &[
    "--metadata-max-idle-interval-ms",
    "20",
    "--metadata-snapshot-max-entries",
    "5",
];

fn snapshot_files(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".snap"))
                .collect()
        })
        .unwrap_or_default()
}

/// Polls `cond` every 20 ms until it holds; panics with `what` and the logs after `deadline`.
fn wait_until(q: &Quorum, deadline: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < deadline,
            "{what} within {deadline:?}\n{}",
            q.logs()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until the one-voter quorum with data dir `dir` has committed its cluster id and
/// recorded it in `meta.properties` (so the node is past start-up and serving).
fn wait_until_serving(q: &Quorum, dir: &Path) {
    let props = dir.join("meta.properties");
    wait_until(
        q,
        Duration::from_secs(20),
        "no cluster_id in meta.properties",
        || std::fs::read_to_string(&props).is_ok_and(|t| t.contains("cluster_id=")),
    );
}

/// Restarts node `id` and expects it to refuse: exit code 1 and exactly one new output line,
/// which is returned.
fn restart_expecting_refusal(q: &mut Quorum, id: u64) -> String {
    let before = q.log_of(id).len();
    q.start_node(id);
    let status = q
        .wait_exit(id, Duration::from_secs(10))
        .unwrap_or_else(|| panic!("node {id} kept running\n{}", q.logs()));
    let out = q.log_of(id)[before..].to_string();
    assert_eq!(status.code(), Some(1), "{out}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 1, "expected one line, got:\n{out}");
    lines[0].to_string()
}

/// Runs the binary with `args` until it exits (at most 10 s, then it is killed and the test
/// fails); its captured output.
fn run_to_exit(args: &[String]) -> std::process::Output {
    let mut child = std::process::Command::new(keel_tests::process::controller_bin())
        .args(args)
        .env("KEEL_LOG", "info,openraft=warn")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            panic!("keel-controller {args:?} kept running");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

#[test]
fn deleting_raft_but_keeping_snapshots_is_refused_at_start() {
    let mut q = Quorum::start_with(1, FAST_SNAPSHOTS);
    let dir = q.data_dir(1);
    wait_until_serving(&q, &dir);
    wait_until(&q, Duration::from_secs(20), "no snapshot", || {
        !snapshot_files(&dir.join("snapshots")).is_empty()
    });
    assert!(q.terminate(1).success());
    std::fs::remove_dir_all(dir.join("raft")).unwrap();

    let line = restart_expecting_refusal(&mut q, 1);
    let raft = dir.join("raft");
    assert!(
        line.starts_with(&format!(
            "keel-controller: metadata_log_dir {} is inconsistent: missing",
            raft.display()
        )),
        "{line}"
    );
    assert!(line.contains("holds a snapshot at offset"), "{line}");
    // Refusing touched nothing: raft/ is still absent and the snapshot is still there.
    assert!(!raft.exists());
    assert!(!snapshot_files(&dir.join("snapshots")).is_empty());
}

#[test]
fn deleting_snapshots_of_a_purged_log_is_refused_at_start() {
    let mut q = Quorum::start_with(1, FAST_SNAPSHOTS);
    let dir = q.data_dir(1);
    wait_until_serving(&q, &dir);
    // Snapshots every 5 entries keep 2 entries of log: after a few snapshots the log has
    // been purged, so the state machine cannot be rebuilt from the log alone.
    wait_until(
        &q,
        Duration::from_secs(20),
        "no snapshot past offset 20",
        || {
            snapshot_files(&dir.join("snapshots")).iter().any(|n| {
                n.trim_start_matches("snapshot-")
                    .split('-')
                    .next()
                    .and_then(|i| i.parse::<u64>().ok())
                    .is_some_and(|i| i > 20)
            })
        },
    );
    assert!(q.terminate(1).success());
    std::fs::remove_dir_all(dir.join("snapshots")).unwrap();

    let line = restart_expecting_refusal(&mut q, 1);
    assert!(
        line.contains(&format!("{} is inconsistent", dir.join("raft").display())),
        "{line}"
    );
    assert!(
        line.contains("was purged through offset") && line.contains("no snapshot"),
        "{line}"
    );
}

/// Starts a controller as node 7 (a quorum of itself) on `dir`, expecting it to be refused:
/// exit code 1.
fn run_as_node_7(dir: &std::path::Path, port: u16) -> std::process::Output {
    let out = run_to_exit(&[
        "--node-id".into(),
        "7".into(),
        "--controller-quorum-voters".into(),
        format!("7@127.0.0.1:{port}"),
        "--listeners".into(),
        format!("127.0.0.1:{port}"),
        "--metadata-log-dir".into(),
        dir.display().to_string(),
    ]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    out
}

/// A directory formatted for one voter set and never started holds no membership yet: a
/// start with another set would initialize a quorum other than the one it was formatted for.
#[test]
fn a_formatted_directory_started_with_another_voter_set_is_refused() {
    let mut q = Quorum::start_single_voter(2);
    let (a1, a2) = (q.addr(1), q.addr(2));
    q.voter_overrides.insert(2, format!("1@{a1},2@{a2}"));
    let out = q.format(2, &[]);
    assert!(out.status.success(), "{out:?}");
    q.voter_overrides
        .insert(2, format!("1@{a1},2@{a2},3@127.0.0.1:1"));
    let line = restart_expecting_refusal(&mut q, 2);
    assert_eq!(
        line,
        format!(
            "keel-controller: metadata_log_dir {}: controller_quorum_voters is voter ids 1,2,3 \
             in the configuration but voter ids 1,2 in this directory (it belongs to another \
             node or quorum)",
            q.data_dir(2).join("meta.properties").display()
        )
    );
}

#[test]
fn meta_properties_is_written_and_a_foreign_node_id_or_voter_set_is_refused() {
    let mut q = Quorum::start(1);
    let props = q.data_dir(1).join("meta.properties");
    // The cluster id is recorded once the quorum has committed it.
    wait_until_serving(&q, &q.data_dir(1));
    let text = std::fs::read_to_string(&props).unwrap();
    for line in ["version=1", "node_id=1", "controller_quorum_voters=1"] {
        assert!(
            text.lines().any(|l| l == line),
            "{line} missing in:\n{text}"
        );
    }
    assert!(q.terminate(1).success());

    // Same directory, another voter set: the membership in the metadata log decides who
    // votes (KIP-853; the list is where to reach controllers), so the start goes on and
    // says so.
    let port = q.ports[0];
    q.voter_overrides
        .insert(1, format!("1@127.0.0.1:{port},2@127.0.0.1:1"));
    q.start_node(1);
    wait_until(
        &q,
        Duration::from_secs(20),
        "no line about the voter set",
        || {
            q.log_of(1).contains(
                "controller_quorum_voters lists voter ids 1,2 but the metadata log's voters are 1",
            ) && q.log_of(1).contains("controller started")
        },
    );
    assert!(q.is_running(1), "{}", q.logs());
    assert!(q.terminate(1).success());
    q.voter_overrides.remove(&1);

    // Same directory, another node id (and a voter set that has it).
    let out = run_as_node_7(&q.data_dir(1), port);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr.trim_end(),
        format!(
            "keel-controller: metadata_log_dir {}: node_id is 7 in the configuration but 1 in \
             this directory (it belongs to another node or quorum)",
            props.display()
        )
    );
    assert!(out.stdout.is_empty(), "{out:?}");
    // The file was not rewritten by the refused starts.
    assert_eq!(std::fs::read_to_string(&props).unwrap(), text);

    // Without meta.properties (raft/ and snapshots/ copied to another node's directory),
    // raft/ itself says whose it is.
    std::fs::remove_file(&props).unwrap();
    let out = run_as_node_7(&q.data_dir(1), port);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr.trim_end(),
        format!(
            "keel-controller: metadata_log_dir {} is inconsistent: it belongs to node 1, not \
             node_id 7 (was it copied from another controller?), so its vote and log are that \
             node's; restore this node's own raft/ from a backup",
            q.data_dir(1).join("raft").display()
        )
    );
}

#[test]
fn deleting_raft_but_keeping_meta_properties_is_refused_at_start() {
    let mut q = Quorum::start(1);
    let dir = q.data_dir(1);
    wait_until_serving(&q, &dir);
    assert!(q.terminate(1).success());
    std::fs::remove_dir_all(dir.join("raft")).unwrap();
    std::fs::remove_dir_all(dir.join("snapshots")).unwrap();

    let line = restart_expecting_refusal(&mut q, 1);
    assert!(
        line.contains(&format!(
            "{} is inconsistent: missing",
            dir.join("raft").display()
        )) && line.contains("meta.properties exists"),
        "{line}"
    );
}

#[test]
fn a_fatal_raft_storage_error_ends_the_process() {
    let mut q = Quorum::start_with(1, FAST_SNAPSHOTS);
    wait_until_serving(&q, &q.data_dir(1));
    let snapshots = q.data_dir(1).join("snapshots");
    // The next snapshot cannot be written: the state machine's storage fails, openraft stops
    // with a fatal error.
    std::fs::remove_dir_all(&snapshots).unwrap();
    std::fs::write(&snapshots, b"not a directory").unwrap();

    let status = q
        .wait_exit(1, Duration::from_secs(20))
        .unwrap_or_else(|| panic!("controller kept running after a fatal error\n{}", q.logs()));
    assert!(!status.success(), "{status:?}");
    let log = q.log_of(1);
    let last = log.lines().last().unwrap_or_default();
    assert!(last.starts_with("keel-controller: raft stopped: "), "{log}");
}

#[test]
fn a_second_controller_on_the_same_directory_is_refused_while_the_first_runs() {
    let q = Quorum::start(1);
    let dir = q.data_dir(1);
    wait_until_serving(&q, &dir);
    let port = free_ports(1)[0];
    let out = run_to_exit(&[
        "--node-id".into(),
        "1".into(),
        "--controller-quorum-voters".into(),
        format!("1@127.0.0.1:{}", q.ports[0]),
        "--listeners".into(),
        format!("127.0.0.1:{port}"),
        "--metadata-log-dir".into(),
        dir.display().to_string(),
    ]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim_end(),
        format!(
            "keel-controller: metadata_log_dir {} is locked by another process (is another \
             keel-controller using this metadata_log_dir?)",
            dir.join("raft").display()
        )
    );
    // The first one still serves.
    wait_until_serving(&q, &dir);
    assert!(q.pid(1).is_some(), "{}", q.logs());
}

/// Raft log segment files in `raft`, by base index.
fn raft_segments(raft: &Path) -> Vec<u64> {
    let mut v: Vec<u64> = std::fs::read_dir(raft)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            name.strip_suffix(".log")?.parse().ok()
        })
        .collect();
    v.sort_unstable();
    v
}

/// With small segments and frequent snapshots, the Raft log rolls and whole segments below
/// the snapshot are deleted while the controller runs (the disk it keeps is bounded), and a
/// restart recovers from what is left.
#[test]
fn old_raft_log_segments_are_deleted_after_snapshots() {
    let mut q = Quorum::start_with(
        1,
        &[FAST_SNAPSHOTS, &["--metadata-log-segment-bytes", "4096"]].concat(),
    );
    let dir = q.data_dir(1);
    wait_until_serving(&q, &dir);
    let raft = dir.join("raft");
    // NoOpRecords every 20 ms fill a 4 KiB segment in about a second.
    wait_until(&q, Duration::from_secs(30), "no segment deleted", || {
        raft_segments(&raft).first().is_some_and(|&first| first > 0)
    });
    let during = raft_segments(&raft);
    assert!(during.len() <= 4, "old segments kept: {during:?}");
    let cluster_id = std::fs::read_to_string(dir.join("meta.properties")).unwrap();
    assert!(q.terminate(1).success());
    q.start_node(1);
    // It starts from the snapshot and what is left of the log, and serves.
    wait_until(
        &q,
        Duration::from_secs(20),
        "no newer segment after restart",
        || {
            raft_segments(&raft)
                .last()
                .is_some_and(|l| l > during.last().unwrap())
        },
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("meta.properties")).unwrap(),
        cluster_id
    );
    assert!(q.pid(1).is_some(), "{}", q.logs());
}

#[test]
fn emptying_raft_but_keeping_meta_properties_is_refused_at_start() {
    let mut q = Quorum::start(1);
    let dir = q.data_dir(1);
    wait_until_serving(&q, &dir);
    assert!(q.terminate(1).success());
    let raft = dir.join("raft");
    for e in std::fs::read_dir(&raft).unwrap() {
        std::fs::remove_file(e.unwrap().path()).unwrap();
    }
    let line = restart_expecting_refusal(&mut q, 1);
    assert!(
        line.contains(&format!(
            "{} is inconsistent: it holds no vote, but {} records cluster_id",
            raft.display(),
            dir.join("meta.properties").display()
        )),
        "{line}"
    );
    assert_eq!(
        std::fs::read_dir(&raft).unwrap().count(),
        0,
        "files were created"
    );
}
