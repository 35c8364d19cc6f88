//! End to end: `keelctl` drives a real local cluster (3 `keel-controller` + 3 `keel-broker`
//! processes) in a temp dir on free ports, and every step is checked on its `--json` output.
//! The binaries are the ones cargo built next to `keelctl` (see [`sibling_binary`]).

mod common;

use std::net::TcpListener;
use std::process::Command;

use common::{Fixture, KEELCTL, free_base_port, sibling_binary};
use serde_json::Value;

#[test]
fn keelctl_drives_a_local_cluster() {
    sibling_binary("keel-controller");
    sibling_binary("keel-broker");
    let f = Fixture {
        dir: tempfile::tempdir().unwrap(),
        base: free_base_port(),
    };

    // cluster up: six processes, healthy; a second `up` says it is already running.
    let up = f.cluster("up", &["--timeout-secs", "120"]);
    assert_eq!(up["already_running"], false, "{up}");
    assert_eq!(up["started"].as_array().unwrap().len(), 6, "{up}");
    assert!(
        up["processes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p["alive"] == true),
        "{up}"
    );
    assert_eq!(up["bootstrap_controllers"], f.controllers());
    let again = f.cluster("up", &[]);
    assert_eq!(again["already_running"], true, "{again}");
    assert!(again["started"].as_array().unwrap().is_empty());

    // quorum status and broker list.
    let q = f.json(&["--json", "quorum", "status"]);
    let leader = q["leader_id"].as_i64().unwrap();
    assert!((1..=3).contains(&leader), "{q}");
    assert_eq!(q["current_voters"], serde_json::json!([1, 2, 3]));
    assert!(q["high_watermark"].as_i64().unwrap() > 1, "{q}");
    // `up` formatted the controllers with --initial-controllers (KIP-853): each voter's
    // directory id is its meta.properties', known from the quorum's first entry.
    for v in q["voters"].as_array().unwrap() {
        let props = std::fs::read_to_string(format!(
            "{}/controller-{}/meta.properties",
            f.data_dir(),
            v["id"]
        ))
        .unwrap();
        let dir = props
            .lines()
            .find_map(|l| l.strip_prefix("directory_id="))
            .unwrap();
        assert_eq!(v["directory_id"], dir, "{q}");
        assert!(props.contains("initial_controllers="), "{props}");
    }
    let brokers = f.json(&["--json", "broker", "list"]);
    let brokers = brokers.as_array().unwrap();
    assert_eq!(brokers.len(), 3, "{brokers:?}");
    for (i, b) in brokers.iter().enumerate() {
        assert_eq!(b["id"], i as i64 + 1);
        assert_eq!(b["state"], "unfenced", "{b}");
        assert_eq!(
            b["endpoint"],
            format!("127.0.0.1:{}", f.base + 100 + i as u16)
        );
        assert!(b["epoch"].as_i64().unwrap() > 0);
    }

    // Writes through a follower alone are redirected to the active controller.
    let follower_addr = format!("127.0.0.1:{}", f.base + if leader == 1 { 2 } else { 1 });
    let created = f.json(&[
        "--json",
        "--bootstrap-controllers",
        &follower_addr,
        "topic",
        "create",
        "via-follower",
    ]);
    assert_eq!(created["name"], "via-follower", "{created}");

    // topic create / describe / alter-config.
    let created = f.json(&[
        "--json",
        "topic",
        "create",
        "orders",
        "--partitions",
        "2",
        "--replication-factor",
        "3",
        "--config",
        "min.insync.replicas=2",
    ]);
    assert_eq!(created["partitions"], 2, "{created}");
    assert_eq!(created["replication_factor"], 3);
    let described = f.json(&["--json", "topic", "describe", "orders"]);
    let topic = &described[0];
    assert_eq!(topic["name"], "orders");
    assert_eq!(topic["min_insync_replicas"], 2, "{topic}");
    assert_eq!(topic["configs"]["min.insync.replicas"], "2");
    let p0 = &topic["partitions"][0];
    assert_eq!(p0["partition"], 0);
    assert_eq!(p0["replicas"].as_array().unwrap().len(), 3, "{p0}");
    assert_eq!(p0["isr"], p0["replicas"], "{p0}");
    let p0_leader = p0["leader"].as_i64().unwrap();
    assert_eq!(
        p0["replicas"][0].as_i64().unwrap(),
        p0_leader,
        "preferred leader leads: {p0}"
    );
    let epoch = p0["partition_epoch"].as_i64().unwrap();
    let listed = f.json(&["--json", "topic", "list"]);
    let names: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["orders", "via-follower"], "{listed}");
    let configs = f.json(&[
        "--json",
        "topic",
        "alter-config",
        "orders",
        "--set",
        "retention.ms=60000",
    ]);
    let retention = configs
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "retention.ms")
        .unwrap_or_else(|| panic!("no retention.ms in {configs}"));
    assert_eq!(retention["value"], "60000");
    assert_eq!(retention["source"], "TOPIC_CONFIG");

    // alter-isr: a wrong expected epoch is refused exactly; the right one applies.
    let follower = p0["replicas"][1].as_i64().unwrap();
    let new_isr = format!("{p0_leader},{follower}");
    let wrong = (epoch + 5).to_string();
    let err = f.fails(&[
        "partition",
        "alter-isr",
        "--topic",
        "orders",
        "--partition",
        "0",
        "--isr",
        &new_isr,
        "--expected-partition-epoch",
        &wrong,
    ]);
    assert_eq!(
        err,
        format!(
            "keelctl: alter ISR of orders-0: INVALID_UPDATE_VERSION (95): orders-0: expected partition epoch {wrong}, current is {epoch}\n"
        )
    );
    let right = epoch.to_string();
    let altered = f.json(&[
        "--json",
        "partition",
        "alter-isr",
        "--topic",
        "orders",
        "--partition",
        "0",
        "--isr",
        &new_isr,
        "--expected-partition-epoch",
        &right,
    ]);
    assert_eq!(
        altered["isr"],
        serde_json::json!([p0_leader, follower]),
        "{altered}"
    );
    assert_eq!(
        altered["partition_epoch"].as_i64().unwrap(),
        epoch + 1,
        "{altered}"
    );
    assert_eq!(altered["leader"].as_i64().unwrap(), p0_leader);

    // The metadata log for the topic shows the change with its derived epochs.
    let out = f.run(&["--json", "metadata", "log", "--topic", "orders"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[0]["record_type"], "TopicRecord", "{lines:?}");
    assert!(lines.iter().all(|l| l["topic"] == "orders"), "{lines:?}");
    let change = lines
        .iter()
        .find(|l| {
            l["record_type"] == "PartitionChangeRecord"
                && l["fields"]["partition"] == 0
                && l["fields"]["isr"] == serde_json::json!([p0_leader, follower])
        })
        .unwrap_or_else(|| panic!("no ISR change in {lines:?}"));
    assert_eq!(
        change["partition_state"]["partition_epoch"]
            .as_i64()
            .unwrap(),
        epoch + 1
    );
    assert_eq!(
        change["partition_state"]["leader"].as_i64().unwrap(),
        p0_leader
    );

    // Starting at that change (mid-log) still shows the state it leads to.
    let at = change["offset"].as_i64().unwrap().to_string();
    let out = f.run(&["--json", "metadata", "log", "--from", &at]);
    assert!(out.status.success());
    let first: Value = serde_json::from_str(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .find(|l| l.contains("PartitionChangeRecord"))
            .expect("the change is shown"),
    )
    .unwrap();
    assert_eq!(
        first["partition_state"]["partition_epoch"].as_i64(),
        Some(epoch + 1),
        "{first}"
    );

    // Past the end: nothing on stdout, a warning naming the last committed offset, exit 0.
    let out = f.run(&["metadata", "log", "--from", "100000000"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(out.stdout.is_empty());
    assert!(
        stderr.contains(
            "keelctl: warning: --from 100000000 is past the end of the metadata log \
             (last committed offset "
        ),
        "{stderr}"
    );

    // The image filtered to one topic; an unknown topic is UNKNOWN_TOPIC_OR_PARTITION.
    let image = f.json(&["--json", "metadata", "image", "--topic", "orders"]);
    let names: Vec<&str> = image["topics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["orders"], "{image}");
    let err = f.fails(&["metadata", "image", "--topic", "nope"]);
    assert_eq!(
        err,
        "keelctl: topic \"nope\": UNKNOWN_TOPIC_OR_PARTITION (3): no such topic\n"
    );

    // A preferred election over every partition: rows (if any partition needed one) name
    // their topic; partitions already led by their preferred replica are not listed.
    let rows = f.json(&[
        "--json",
        "partition",
        "elect",
        "--all-topic-partitions",
        "--preferred",
    ]);
    for r in rows.as_array().unwrap() {
        assert!(
            ["orders", "via-follower"].contains(&r["topic"].as_str().unwrap_or("")),
            "{rows}"
        );
        assert!(r["error"].is_null(), "{rows}");
    }
    let err = f.fails(&["partition", "elect", "--preferred"]);
    assert!(err.contains("--topic"), "{err}");

    // A type filter keeps only the asked-for records, each still with its derived state.
    let out = f.run(&[
        "--json",
        "metadata",
        "log",
        "--type",
        "PartitionChangeRecord",
    ]);
    assert!(out.status.success());
    let changes: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(!changes.is_empty());
    assert!(
        changes
            .iter()
            .all(|l| l["record_type"] == "PartitionChangeRecord"
                && l["partition_state"]["partition_epoch"].is_i64()),
        "{changes:?}"
    );

    // One-line errors for an unknown topic and a bad --isr list.
    let err = f.fails(&["metadata", "log", "--topic", "nope"]);
    assert_eq!(
        err,
        "keelctl: topic \"nope\": UNKNOWN_TOPIC_OR_PARTITION (3): no such topic, and no record about it in the log\n"
    );
    let err = f.fails(&["topic", "describe", "nope"]);
    assert_eq!(
        err,
        "keelctl: topic \"nope\": UNKNOWN_TOPIC_OR_PARTITION (3): no such topic\n"
    );
    let err = f.fails(&[
        "partition",
        "alter-isr",
        "--topic",
        "orders",
        "--partition",
        "0",
        "--isr",
        "1,x",
    ]);
    assert_eq!(err, "keelctl: --isr \"1,x\": \"x\" is not a broker id\n");

    delete_records_moves_the_log_start(&f);
    dynamic_configs_apply_without_a_restart(&f);

    // cluster status, then down: every process stops on SIGTERM.
    let status = f.cluster("status", &[]);
    assert_eq!(
        status["quorum"]["leader_id"].as_i64().unwrap(),
        leader,
        "{status}"
    );
    assert_eq!(status["brokers"].as_array().unwrap().len(), 3, "{status}");
    let down = f.cluster("down", &[]);
    let down = down.as_array().unwrap();
    assert_eq!(down.len(), 6);
    assert!(
        down.iter().all(|d| d["outcome"] == "terminated"),
        "{down:?}\n{}",
        f.logs()
    );
    // status still prints what it found, and fails: nothing runs.
    let out = f.run(&["--json", "cluster", "status", "--data-dir", &f.data_dir()]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!(
            "keelctl: cluster status: no process of the local cluster in {} is running\n",
            f.data_dir()
        )
    );
    let status: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        status["processes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p["alive"] == false),
        "{status}"
    );

    metadata_dump_reads_a_stopped_controller(&f);
}

/// `metadata dump` on the stopped cluster's controller directories: the records the running
/// cluster served (topics, partitions with their states, registrations), and damage found.
fn metadata_dump_reads_a_stopped_controller(f: &Fixture) {
    let dir = format!("{}/controller-1", f.data_dir());
    let out = keelctl(&["--json", "metadata", "dump", "--dir", &dir]);
    assert!(out.status.success(), "{}", stderr(&out));
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let meta = lines.iter().find(|l| l["kind"] == "raft_meta").unwrap();
    assert_eq!(meta["node_id"], 1, "{meta}");
    assert!(meta["vote"]["term"].as_u64().unwrap() >= 1, "{meta}");
    let records: Vec<&Value> = lines.iter().filter(|l| l["kind"] == "record").collect();
    assert!(
        records
            .iter()
            .any(|r| r["record_type"] == "TopicRecord" && r["topic"] == "orders"),
        "no TopicRecord for orders in {} records",
        records.len()
    );
    // Every partition record of the replayed log shows the state it leads to.
    let partition_records: Vec<&&Value> = records
        .iter()
        .filter(|r| {
            ["PartitionRecord", "PartitionChangeRecord"]
                .contains(&r["record_type"].as_str().unwrap())
        })
        .collect();
    assert!(partition_records.len() >= 3, "{partition_records:?}");
    assert!(
        partition_records
            .iter()
            .all(|r| r["partition_state"]["leader_epoch"].is_i64()),
        "{partition_records:?}"
    );
    assert!(
        records.iter().all(|r| r["record_type"] != "NoOpRecord"),
        "NoOpRecords are hidden by default"
    );
    // Filters, and the same offsets as the live log had.
    let out = keelctl(&[
        "--json",
        "metadata",
        "dump",
        "--dir",
        &dir,
        "--type",
        "TopicRecord",
        "--topic",
        "orders",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let topics: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|l| l["kind"] == "record")
        .collect();
    assert_eq!(topics.len(), 1, "{topics:?}");
    // Text: a closing summary with nothing damaged.
    let out = keelctl(&["metadata", "dump", "--dir", &format!("{dir}/raft")]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    let last = text.lines().last().unwrap();
    assert!(last.ends_with(", 0 torn tail(s), 0 damaged"), "{last}");
    assert!(text.contains(" TopicRecord topic=orders "), "{text}");

    // A byte flipped inside an early entry, with intact entries after it: reported with the
    // file and byte, exit 1 (a controller would refuse to start on it).
    let copy = tempfile::tempdir().unwrap();
    let segment = std::fs::read_dir(format!("{dir}/raft"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .min()
        .unwrap();
    let mut bytes = std::fs::read(&segment).unwrap();
    bytes[60] ^= 0xff;
    std::fs::write(copy.path().join(segment.file_name().unwrap()), &bytes).unwrap();
    let out = keelctl(&["metadata", "dump", "--dir", copy.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains(&format!(
            "{}: damaged at byte ",
            segment.file_name().unwrap().to_string_lossy()
        )) && err.contains("a later write (byte "),
        "{err}"
    );
    // The whole directory copied with the second half of the newest segment cut: the
    // entries left read (the cut one is a torn tail), but the log now ends below the
    // committed offset the node saved, which the controller refuses at start: so does the
    // dump (exit 1), naming the cause (it reported a torn tail and exit 0 before).
    let whole = tempfile::tempdir().unwrap();
    for sub in ["raft", "snapshots"] {
        let to = whole.path().join(sub);
        std::fs::create_dir_all(&to).unwrap();
        for e in std::fs::read_dir(format!("{dir}/{sub}")).unwrap() {
            let p = e.unwrap().path();
            if p.is_file() {
                std::fs::copy(&p, to.join(p.file_name().unwrap())).unwrap();
            }
        }
    }
    let newest = std::fs::read_dir(whole.path().join("raft"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .max()
        .unwrap();
    let len = std::fs::metadata(&newest).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&newest)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let out = keelctl(&["metadata", "dump", "--dir", whole.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("was committed, but the log ends at"),
        "{}",
        stderr(&out)
    );

    // A path that is no metadata log is a usage error naming what to give.
    let out = keelctl(&["metadata", "dump", "--dir", &f.data_dir()]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("not a controller's metadata log"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn unreachable_controllers_fail_with_one_line() {
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    // Connection refused is retried (a controller may be restarting) until the budget.
    let started = std::time::Instant::now();
    let out = Command::new(KEELCTL)
        .args([
            "--bootstrap-controllers",
            &format!("127.0.0.1:{port}"),
            "--api-timeout-ms",
            "1000",
            "quorum",
            "status",
        ])
        .output()
        .unwrap();
    let took = started.elapsed();
    assert!(!out.status.success());
    assert!(
        took >= std::time::Duration::from_millis(900) && took < std::time::Duration::from_secs(5),
        "{took:?}"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    // A warning after the first round (not silence for the whole budget), then the error.
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 2, "{stderr}");
    assert!(
        lines[0].starts_with(&format!(
            "keelctl: warning: no controller answers: 127.0.0.1:{port}: connection refused; \
             retrying for up to "
        )) && lines[0].ends_with(" s (api timeout)"),
        "{stderr}"
    );
    let err = lines[1];
    assert!(
        err.starts_with("keelctl: cannot reach any controller (gave up after "),
        "{err}"
    );
    assert!(
        err.trim_end()
            .ends_with(&format!(" s): 127.0.0.1:{port}: connection refused")),
        "{err}"
    );
}

/// Runs keelctl without any bootstrap environment: the local cluster commands must find
/// everything from the data dir.
fn keelctl(args: &[&str]) -> std::process::Output {
    keelctl_with_env(args, &[])
}

/// `cluster up` with `KEEL_NUM_PARTITIONS=5` exits 1 printing exactly `want`.
fn up_refused_with_num_partitions_5(data: &str, want: String) {
    let out = keelctl_with_env(
        &["cluster", "up", "--data-dir", data],
        &[("KEEL_NUM_PARTITIONS", "5")],
    );
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(stderr(&out), want);
}

/// keelctl with extra environment variables.
fn keelctl_with_env(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    Command::new(KEELCTL)
        .args(args)
        .env_remove("KEEL_BOOTSTRAP_CONTROLLERS")
        .env_remove("KEEL_BOOTSTRAP_BROKERS")
        .envs(env.iter().copied())
        .output()
        .expect("run keelctl")
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Asserts that keelctl exited 1 with stderr starting with `prefix`.
fn refused_with(out: &std::process::Output, prefix: &str) {
    assert_eq!(out.status.code(), Some(1), "{}", stderr(out));
    assert!(stderr(out).starts_with(prefix), "{}", stderr(out));
}

/// Pids of live processes (zombies excluded) whose command line contains `needle`.
fn processes_mentioning(needle: &str) -> Vec<u32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmdline).contains(needle) {
            pids.push(pid);
        }
    }
    pids
}

#[test]
fn later_commands_use_the_recorded_base_port() {
    let f = Fixture::fresh();
    assert_ne!(f.base, 9092, "the test needs a non-default base port");
    let data = f.data_dir();
    let base = f.base;

    // The first `up` (with --base-port) records it, and the KEEL_* settings of the
    // controllers and brokers in its environment (not keelctl's own, nor unknown ones).
    let base_s = base.to_string();
    let out = keelctl_with_env(
        &[
            "--json",
            "cluster",
            "up",
            "--data-dir",
            &data,
            "--base-port",
            &base_s,
            "--timeout-secs",
            "120",
        ],
        &[("KEEL_NUM_PARTITIONS", "3"), ("KEEL_NOT_A_KEY", "x")],
    );
    assert!(out.status.success(), "{}\n{}", stderr(&out), f.logs());
    let up: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(up["base_port"], base, "{up}");
    let recorded = std::fs::read_to_string(f.dir.path().join("keel-data/cluster.toml")).unwrap();
    assert!(
        recorded.contains(&format!("\nbase_port = {base}\n")),
        "{recorded}"
    );
    assert!(
        recorded.ends_with("\n[settings]\nKEEL_NUM_PARTITIONS = \"3\"\n"),
        "{recorded}"
    );
    // The controllers use it: a topic created without a partition count gets 3.
    let created = f.json(&["--json", "topic", "create", "dflt"]);
    assert_eq!(created["partitions"], 3, "{created}");
    // Another value for a recorded setting is refused with one line, and nothing changes.
    up_refused_with_num_partitions_5(
        &data,
        format!(
            "keelctl: settings differ from the [settings] recorded in {data}/cluster.toml by the first `cluster up`: KEEL_NUM_PARTITIONS=5 (recorded: 3); unset them, or edit that file and restart (`keelctl cluster down`, then `keelctl cluster up`)\n"
        ),
    );

    // status without --base-port finds the cluster and succeeds.
    let out = keelctl(&["--json", "cluster", "status", "--data-dir", &data]);
    assert!(out.status.success(), "{}\n{}", stderr(&out), f.logs());
    let status: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(status["base_port"], base, "{status}");
    assert_eq!(
        status["processes"][0]["address"],
        format!("127.0.0.1:{}", base + 1)
    );
    assert!(
        (1..=3).contains(&status["quorum"]["leader_id"].as_i64().unwrap()),
        "{status}"
    );
    assert_eq!(status["brokers"].as_array().unwrap().len(), 3, "{status}");
    assert_eq!(status["error"], Value::Null, "{status}");

    // up with another base port is refused with one line naming both; nothing changes.
    let other = (base + 7).to_string();
    let out = keelctl(&["cluster", "up", "--data-dir", &data, "--base-port", &other]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out),
        format!(
            "keelctl: --base-port {other} differs from base_port {base} recorded in {data}/cluster.toml: omit --base-port to use {base}, or stop the cluster and remove {data} to start a new one on other ports\n"
        )
    );
    let out = keelctl(&[
        "cluster",
        "status",
        "--data-dir",
        &data,
        "--base-port",
        &other,
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).starts_with(&format!("keelctl: --base-port {other} differs")));

    // Stop broker 3; status prints it as down and fails.
    let out = keelctl(&["broker", "shutdown", "3", "--data-dir", &data]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = keelctl(&["--json", "cluster", "status", "--data-dir", &data]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out),
        "keelctl: cluster status: not running: broker-3\n"
    );
    let status: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(status["processes"][5]["name"], "broker-3");
    assert_eq!(status["processes"][5]["alive"], false, "{status}");
    assert!(
        status["quorum"]["leader_id"].as_i64().unwrap() >= 1,
        "{status}"
    );

    // A plain `up` restarts broker 3 on the recorded ports, pointed at the right quorum.
    let out = keelctl(&[
        "--json",
        "cluster",
        "up",
        "--data-dir",
        &data,
        "--timeout-secs",
        "120",
    ]);
    assert!(out.status.success(), "{}\n{}", stderr(&out), f.logs());
    let up: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(up["started"], serde_json::json!(["broker-3"]), "{up}");
    assert_eq!(up["bootstrap_controllers"], f.controllers(), "{up}");
    let b3 = &up["processes"][5];
    assert_eq!(b3["address"], format!("127.0.0.1:{}", base + 102), "{up}");
    assert_eq!(b3["alive"], true, "{up}");
    let pid = b3["pid"].as_i64().unwrap();
    // ... with the recorded settings, though this `up` did not set them.
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    assert!(
        environ
            .split(|b| *b == 0)
            .any(|kv| kv == b"KEEL_NUM_PARTITIONS=3"),
        "broker-3 was restarted without the recorded settings"
    );
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
    assert!(
        cmdline.contains(&format!(
            "--controller-quorum-voters 1@127.0.0.1:{},2@127.0.0.1:{},3@127.0.0.1:{} --listeners GRPC://127.0.0.1:{},PLAINTEXT://127.0.0.1:{}",
            base + 1,
            base + 2,
            base + 3,
            base + 102,
            base + 203
        )),
        "{cmdline}"
    );
    let brokers = f.json(&["--json", "broker", "list"]);
    assert_eq!(brokers[2]["id"], 3, "{brokers}");
    assert_eq!(brokers[2]["state"], "unfenced", "{brokers}");
    assert_eq!(brokers[2]["endpoint"], format!("127.0.0.1:{}", base + 102));
    assert_eq!(
        brokers[2]["kafka_endpoint"],
        format!("127.0.0.1:{}", base + 203)
    );
    let out = keelctl(&["cluster", "status", "--data-dir", &data]);
    assert!(out.status.success(), "{}", stderr(&out));

    // cluster.toml removed while the cluster runs: the next `up` records the running
    // processes' settings, not this (empty) environment's; another value is refused with
    // what to do (there is no file to edit).
    let toml = f.dir.path().join("keel-data/cluster.toml");
    std::fs::remove_file(&toml).unwrap();
    up_refused_with_num_partitions_5(
        &data,
        format!(
            "keelctl: settings differ from those of the processes running from {data}: KEEL_NUM_PARTITIONS=5 (recorded: 3); unset them, or stop the cluster (`keelctl cluster down`) and start it with them (`keelctl cluster up`)\n"
        ),
    );
    assert!(!toml.exists(), "a refused up wrote {}", toml.display());
    let out = keelctl(&["cluster", "up", "--data-dir", &data]);
    assert!(out.status.success(), "{}", stderr(&out));
    let rebuilt = std::fs::read_to_string(&toml).unwrap();
    assert!(
        rebuilt.ends_with("\n[settings]\nKEEL_NUM_PARTITIONS = \"3\"\n"),
        "{rebuilt}"
    );
    // A misspelt key in [settings] is refused, naming it.
    std::fs::write(&toml, format!("{rebuilt}KEEL_NUM_PARTITONS = \"5\"\n")).unwrap();
    refused_with(
        &keelctl(&["cluster", "up", "--data-dir", &data]),
        &format!(
            "keelctl: [settings] in {data}/cluster.toml names KEEL_NUM_PARTITONS, which is not a setting"
        ),
    );
    // An edit that breaks the file does not keep the cluster from stopping: down (without
    // --base-port) warns and stops every process by its pid file.
    std::fs::write(&toml, format!("{rebuilt}[settings\n")).unwrap();
    let out = keelctl(&["--json", "cluster", "down", "--data-dir", &data]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).starts_with(&format!("keelctl: warning: invalid {data}/cluster.toml")),
        "{}",
        stderr(&out)
    );
    let down: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        down.as_array()
            .unwrap()
            .iter()
            .all(|d| d["outcome"] == "terminated"),
        "{down}"
    );
    assert_eq!(processes_mentioning(&data), Vec::<u32>::new());
}

#[test]
fn status_fails_when_there_is_no_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope").display().to_string();
    for json in [false, true] {
        let mut args = vec!["cluster", "status", "--data-dir", &missing];
        if json {
            args.insert(0, "--json");
        }
        let out = keelctl(&args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?}");
        assert_eq!(
            stderr(&out),
            format!(
                "keelctl: cluster status: no local cluster in {missing} (no such directory); start one with `keelctl cluster up --data-dir {missing}`\n"
            )
        );
    }
    let empty = dir.path().display().to_string();
    refused_with(
        &keelctl(&["cluster", "status", "--data-dir", &empty]),
        &format!(
            "keelctl: cluster status: no local cluster in {empty} (no cluster.toml in it and no process running from it)"
        ),
    );
    // down says the same (as `cluster status`), with nothing to stop, and creates nothing.
    let out = keelctl(&["cluster", "down", "--data-dir", &missing]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(out.stdout.is_empty());
    assert_eq!(
        stderr(&out),
        format!(
            "keelctl: cluster down: no local cluster in {missing} (no such directory); nothing to stop\n"
        )
    );
    assert!(!std::path::Path::new(&missing).exists());
    refused_with(
        &keelctl(&["cluster", "down", "--data-dir", &empty]),
        &format!(
            "keelctl: cluster down: no local cluster in {empty} (no cluster.toml in it and no process running from it); nothing to stop"
        ),
    );
}

/// Two stand-ins for controllers 1 and 2 (their pid files point at processes named
/// `keel-controller` that do nothing), so the quorum cannot form and `up` times out: it must
/// stop the four processes it started and leave the others alone.
#[test]
fn up_that_gives_up_stops_what_it_started() {
    use std::os::unix::process::CommandExt;
    let f = Fixture::fresh();
    let data = f.data_dir();
    std::fs::create_dir_all(&data).unwrap();
    let mut stand_ins: Vec<std::process::Child> = (1..=2)
        .map(|id| {
            let child = Command::new("sleep")
                .arg0("keel-controller")
                .arg("600")
                .spawn()
                .unwrap();
            std::fs::write(
                f.dir.path().join(format!("keel-data/controller-{id}.pid")),
                format!("{}\n", child.id()),
            )
            .unwrap();
            child
        })
        .collect();

    let base = f.base.to_string();
    let out = keelctl(&[
        "cluster",
        "up",
        "--data-dir",
        &data,
        "--base-port",
        &base,
        "--timeout-secs",
        "3",
    ]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("keelctl: the cluster did not become healthy within 3s: "),
        "{err}"
    );
    assert!(
        err.ends_with(&format!(
            "; stopped what this call started: broker-1, broker-2, broker-3, controller-3; logs in {data}\n"
        )),
        "{err}"
    );
    // Nothing it started runs, and their pid files are gone; the stand-ins are untouched.
    assert_eq!(processes_mentioning(&data), Vec::<u32>::new());
    for name in ["controller-3", "broker-1", "broker-2", "broker-3"] {
        assert!(
            !f.dir.path().join(format!("keel-data/{name}.pid")).exists(),
            "{name}"
        );
    }
    for c in &mut stand_ins {
        assert!(c.try_wait().unwrap().is_none(), "a stand-in was stopped");
        let _ = c.kill();
        let _ = c.wait();
    }
}

/// A first `up` that fails (here: a setting the controllers refuse) stops what it started and
/// takes back its record, so a retry may choose other settings.
#[test]
fn a_failed_first_up_records_nothing() {
    let f = Fixture::fresh();
    let data = f.data_dir();
    let base = f.base.to_string();
    let out = keelctl_with_env(
        &[
            "cluster",
            "up",
            "--data-dir",
            &data,
            "--base-port",
            &base,
            "--timeout-secs",
            "20",
        ],
        &[("KEEL_NUM_PARTITIONS", "0")],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("invalid value for num_partitions: 0 is not in 1..=9982"),
        "{err}"
    );
    assert!(!f.dir.path().join("keel-data/cluster.toml").exists());
    assert_eq!(processes_mentioning(&data), Vec::<u32>::new());
}

/// `up` on ports another program already listens on (here: one held listener, as another
/// local cluster on the same base port would) refuses before starting anything or recording
/// the ports, instead of reporting that other program's cluster as its own.
#[test]
fn up_refuses_ports_another_program_listens_on() {
    let base = free_base_port();
    let held = TcpListener::bind(("127.0.0.1", base + 2)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("c").display().to_string();
    let out = keelctl(&[
        "cluster",
        "up",
        "--data-dir",
        &data,
        "--base-port",
        &base.to_string(),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let addr = format!("127.0.0.1:{}", base + 2);
    assert!(
        stderr(&out).starts_with(&format!(
            "keelctl: cannot start controller-2: {addr} is already in use ("
        )),
        "{}",
        stderr(&out)
    );
    let left: Vec<_> = std::fs::read_dir(&data)
        .map(|d| d.filter_map(Result::ok).map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "files left in {data}: {left:?}");
    drop(held);
}

/// After kill -9 of a broker, `cluster up` restarts it and returns only once the new process
/// is registered (a new broker epoch) and ready. The dead incarnation's registration stays
/// unfenced until its session expires, and the new process is refused
/// (DUPLICATE_BROKER_REGISTRATION) until then: "all brokers unfenced" alone was true at once.
#[test]
fn up_after_kill_9_waits_for_the_restarted_brokers_own_registration() {
    let f = Fixture::fresh();
    f.cluster("up", &["--timeout-secs", "120"]);
    let epoch_of_3 = || {
        let brokers = f.json(&["--json", "broker", "list"]);
        let b = brokers
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["id"] == 3)
            .cloned()
            .unwrap();
        (b["epoch"].as_i64().unwrap(), b["state"].clone())
    };
    let (before, _) = epoch_of_3();
    let pid_file = f.dir.path().join("keel-data/broker-3.pid");
    let pid = std::fs::read_to_string(&pid_file).unwrap();
    let killed = Command::new("kill")
        .args(["-9", pid.trim()])
        .status()
        .unwrap();
    assert!(killed.success());
    // Let the process die and its pid be reaped so `up` sees it as not running.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::path::Path::new(&format!("/proc/{}", pid.trim())).exists()
        && std::fs::read_to_string(format!("/proc/{}/stat", pid.trim()))
            .is_ok_and(|s| !s.contains(") Z "))
    {
        assert!(std::time::Instant::now() < deadline, "broker 3 did not die");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }

    let up = f.cluster("up", &["--timeout-secs", "120"]);
    assert_eq!(up["started"], serde_json::json!(["broker-3"]), "{up}");
    let (after, state) = epoch_of_3();
    assert!(
        after > before,
        "`up` returned while broker 3's registration was still the killed process's (epoch {before} -> {after})\n{}",
        f.logs()
    );
    assert_eq!(state, "unfenced");
}

/// Set in the child that [`up_waits_for_a_killed_process_to_release_its_ports`] starts.
const ENV_HOLD_PORT: &str = "KEEL_TEST_HOLD_PORT";

/// The child of [`up_waits_for_a_killed_process_to_release_its_ports`] (a no-op without
/// [`ENV_HOLD_PORT`]): holds the port, says so, and exits 700 ms later, like a controller
/// killed with -9 that has not closed its sockets yet.
#[test]
fn port_holder_child() {
    let Ok(port) = std::env::var(ENV_HOLD_PORT) else {
        return;
    };
    let held = TcpListener::bind(("127.0.0.1", port.parse::<u16>().unwrap())).unwrap();
    println!("held");
    std::thread::sleep(std::time::Duration::from_millis(700));
    drop(held);
}

/// `cluster up` right after a kill -9: the killed process may hold its port for a moment
/// while it exits. `up` waits for the port while the recorded pid still exists, instead of
/// refusing with "already in use" (a fresh-user check saw 5 of 45 `up`s fail so).
#[test]
fn up_waits_for_a_killed_process_to_release_its_ports() {
    if std::env::var(ENV_HOLD_PORT).is_ok() {
        return;
    }
    let f = Fixture::fresh();
    f.cluster("up", &["--timeout-secs", "120"]);
    f.kill9_controller(2);
    // Stand-in for the exiting process: its pid is recorded and it holds controller-2's port
    // for 700 ms more.
    let port = f.base + 2;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while TcpListener::bind(("127.0.0.1", port)).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "port {port} not released"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "port_holder_child",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ENV_HOLD_PORT, port.to_string())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    while !line.contains("held") {
        line.clear();
        assert!(
            std::io::BufRead::read_line(&mut out, &mut line).unwrap() > 0,
            "child exited early"
        );
    }
    let pid_file = std::path::Path::new(&f.data_dir()).join("controller-2.pid");
    std::fs::write(&pid_file, child.id().to_string()).unwrap();
    // `up` succeeds (the fixture asserts its exit code) once the stand-in has exited, and
    // controller-2 runs again as a voter of the quorum.
    f.cluster("up", &["--timeout-secs", "120"]);
    child.wait().unwrap();
    let restarted: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_ne!(restarted, child.id());
    let q = f.json(&["--json", "quorum", "replication"]);
    assert!(q.to_string().contains("\"node_id\":2"), "{q}");
    f.cluster("down", &[]);
}

/// `config alter|describe` on the cluster default, one broker and a topic, and the brokers
/// applying them without a restart with Kafka's precedence (topic > broker > default > static,
/// KIP-226): the largest batch a one-replica topic on broker 1 accepts follows each change.
/// `topic delete-records` (kafka-delete-records): the log start of every replica moves, a
/// consume from the beginning starts there, and bad offsets are refused naming the cause.
fn delete_records_moves_the_log_start(f: &Fixture) {
    f.json(&[
        "--json",
        "topic",
        "create",
        "trimmed",
        "--partitions",
        "1",
        "--replication-factor",
        "3",
    ]);
    f.json(&["--json", "topic", "create", "untouched"]);
    let lines: String = (0..10).map(|i| format!("k{i}:v{i}\n")).collect();
    let out = f.run_with_stdin(
        &[
            "produce",
            "--topic",
            "trimmed",
            "--key-separator",
            ":",
            "--acks",
            "all",
        ],
        &lines,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let deleted = f.json(&[
        "--json",
        "topic",
        "delete-records",
        "trimmed",
        "--partition",
        "0",
        "--offset",
        "4",
    ]);
    assert_eq!(
        deleted,
        serde_json::json!([{"topic": "trimmed", "partition": 0, "low_watermark": 4, "error": null}])
    );
    // (That every replica took the start is tests/tests/delete_records.rs's.)
    let out = f.run(&[
        "consume",
        "--topic",
        "trimmed",
        "--partition",
        "0",
        "--from-beginning",
        "--print-offset",
    ]);
    let consumed = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        consumed.starts_with("Partition:0\tOffset:4\tv4\n"),
        "{consumed}"
    );
    assert_eq!(consumed.lines().count(), 6, "{consumed}");

    // Kafka's offset file; -1 is the high watermark (an empty partition's is 0).
    let file = f.dir.path().join("offsets.json");
    std::fs::write(
        &file,
        r#"{"partitions": [{"topic": "trimmed", "partition": 0, "offset": -1},
                           {"topic": "untouched", "partition": 0, "offset": -1}], "version": 1}"#,
    )
    .unwrap();
    let deleted = f.json(&[
        "--json",
        "topic",
        "delete-records",
        "--offset-json-file",
        file.to_str().unwrap(),
    ]);
    assert_eq!(
        deleted,
        serde_json::json!([
            {"topic": "trimmed", "partition": 0, "low_watermark": 10, "error": null},
            {"topic": "untouched", "partition": 0, "low_watermark": 0, "error": null}
        ])
    );

    // Above the high watermark: the leader's reason; an unknown partition: named.
    let err = f.fails(&[
        "topic",
        "delete-records",
        "trimmed",
        "--partition",
        "0",
        "--offset",
        "11",
    ]);
    assert!(
        err.contains("1 of 1 partitions failed (the first: OFFSET_OUT_OF_RANGE (1): cannot delete the records of trimmed-0 below offset 11: give an offset in [0, 10]"),
        "{err}"
    );
    let err = f.fails(&[
        "topic",
        "delete-records",
        "trimmed",
        "--partition",
        "7",
        "--offset",
        "1",
    ]);
    assert_eq!(
        err,
        "keelctl: topic \"trimmed\": UNKNOWN_TOPIC_OR_PARTITION (3): no partition 7 (it has 1)\n"
    );
    // An unknown topic in the file is refused before anything is deleted, at once (it was
    // retried for the whole API timeout, 60 s: a fresh-user trial); trimmed-0 is untouched.
    std::fs::write(
        &file,
        r#"{"partitions": [{"topic": "trimmed", "partition": 0, "offset": 10},
                           {"topic": "nosuch", "partition": 0, "offset": 1}]}"#,
    )
    .unwrap();
    let started = std::time::Instant::now();
    let err = f.fails(&[
        "topic",
        "delete-records",
        "--offset-json-file",
        file.to_str().unwrap(),
    ]);
    assert!(
        err.contains("nosuch") && err.contains("UNKNOWN_TOPIC_OR_PARTITION (3)"),
        "{err}"
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
}

fn dynamic_configs_apply_without_a_restart(f: &Fixture) {
    f.json(&[
        "--json",
        "topic",
        "create",
        "sized",
        "--replica-assignment",
        "1",
    ]);
    let big = "x".repeat(2000) + "\n";
    // Waits until producing 2000 bytes to `sized` succeeds (`accepted`) or is refused as too
    // large: brokers apply a change once its record reaches them.
    let expect = |accepted: bool, what: &str| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
        loop {
            let out = f.run_with_stdin(
                &[
                    "produce",
                    "--topic",
                    "sized",
                    "--delivery-timeout-ms",
                    "5000",
                    "--request-timeout-ms",
                    "4000",
                ],
                &big,
            );
            let err = String::from_utf8_lossy(&out.stderr).into_owned();
            let ok = out.status.success();
            if ok == accepted && (ok || err.contains("MESSAGE_TOO_LARGE")) {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{what}: produce of 2000 bytes {} ({err})",
                if ok { "accepted" } else { "refused" }
            );
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    };
    expect(true, "static default (1 MiB)");
    // `config alter ARGS --json`: the resource's dynamic configs afterwards.
    let alter = |args: &[&str]| {
        let mut cmd = vec!["--json", "config", "alter"];
        cmd.extend_from_slice(args);
        f.json(&cmd)
    };
    let set = alter(&[
        "--entity-type",
        "brokers",
        "--entity-default",
        "--add-config",
        "message.max.bytes=1000",
    ]);
    assert_eq!(
        set,
        serde_json::json!([{"name": "message.max.bytes", "value": "1000", "source": "DYNAMIC_DEFAULT_BROKER_CONFIG"}])
    );
    expect(false, "cluster default 1000");
    alter(&["--broker", "1", "--add-config", "message.max.bytes=3000"]);
    expect(true, "broker 1's 3000 over the default 1000");
    alter(&[
        "--topic",
        "sized",
        "--add-config",
        "max.message.bytes=1500,retention.ms=3600000",
    ]);
    expect(false, "the topic's 1500 over broker 1's 3000");
    // Describe: only the dynamic values of the resource, or --all with sources.
    let out = f.run(&["config", "describe", "--broker", "1"]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "Dynamic configs for broker 1 are:\nCONFIG             VALUE  SOURCE\n\
         message.max.bytes  3000   DYNAMIC_BROKER_CONFIG\n"
    );
    let all = f.json(&["--json", "config", "describe", "--topic", "sized", "--all"]);
    let find = |name: &str| {
        all.as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .unwrap_or_else(|| panic!("{name} not in {all}"))
            .clone()
    };
    assert_eq!(find("max.message.bytes")["source"], "TOPIC_CONFIG");
    assert_eq!(find("segment.bytes")["source"], "DEFAULT_CONFIG");
    // Deleting falls back: without the topic's value, broker 1's 3000 applies again.
    alter(&["--topic", "sized", "--delete-config", "max.message.bytes"]);
    expect(true, "broker 1's 3000 once the topic's value is deleted");
    for (args, flag) in [
        (vec!["--broker", "1"], "message.max.bytes"),
        (vec!["--broker-defaults"], "message.max.bytes"),
    ] {
        let mut cmd = args;
        cmd.extend(["--delete-config", flag]);
        alter(&cmd);
    }
    let defaults = f.json(&["--json", "config", "describe", "--broker-defaults"]);
    assert_eq!(defaults, serde_json::json!([]));
    // Kafka's list syntax: brackets keep a value's commas; the controller gets compact,delete.
    let set = alter(&[
        "--topic",
        "sized",
        "--add-config",
        "cleanup.policy=[compact,delete],retention.ms=7200000",
    ]);
    let value = |rows: &Value, name: &str| {
        rows.as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .map(|c| c["value"].clone())
    };
    assert_eq!(
        value(&set, "cleanup.policy"),
        Some(serde_json::json!("compact,delete")),
        "{set}"
    );
    // A broker id that is not registered: refused by the controller, nothing written.
    for args in [
        &[
            "alter",
            "--broker",
            "999",
            "--add-config",
            "log.retention.ms=1",
        ][..],
        &["describe", "--broker", "999"][..],
    ] {
        let mut cmd = vec!["config"];
        cmd.extend(args);
        let out = f.run(&cmd);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        // alter: the controller's INVALID_REQUEST; describe: keelctl finds no broker 999 to
        // ask (it asks the broker itself) before any controller would.
        assert!(
            err.contains("INVALID_REQUEST (42): broker 999 is not registered")
                || (args[0] == "describe"
                    && err.contains("broker 999 is not registered (see `keelctl broker list`)")),
            "{err}"
        );
    }
    // --entity-type alone (kafka-configs): every broker then the default; every topic.
    let every = f.json(&["--json", "config", "describe", "--entity-type", "brokers"]);
    let names: Vec<String> = every
        .as_array()
        .unwrap()
        .iter()
        .map(|r| format!("{}:{}", r["resource"], r["name"]))
        .collect();
    assert_eq!(
        names,
        [
            r#""broker":"1""#,
            r#""broker":"2""#,
            r#""broker":"3""#,
            r#""broker-default":null"#
        ],
        "{every}"
    );
    let every = f.json(&["--json", "config", "describe", "--entity-type", "topics"]);
    let sized = every
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["resource"] == "topic" && r["name"] == "sized")
        .unwrap_or_else(|| panic!("no topic sized in {every}"));
    assert_eq!(
        value(&sized["configs"], "cleanup.policy"),
        Some(serde_json::json!("compact,delete")),
        "{every}"
    );
    let text = f.run(&["config", "describe", "--entity-type", "brokers"]);
    assert!(
        String::from_utf8_lossy(&text.stdout)
            .ends_with("Default configs for brokers in the cluster are:\n"),
        "{}",
        String::from_utf8_lossy(&text.stdout)
    );
    // Errors: an unknown key names the known ones (exit 1); no resource is a usage error.
    let out = f.run(&[
        "config",
        "alter",
        "--broker-defaults",
        "--add-config",
        "foo.bar=1",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("foo.bar") && err.contains("log.retention.ms"),
        "{err}"
    );
    let out = f.run(&["config", "describe"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let out = f.run(&["config", "alter", "--topic", "sized"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

/// `metadata log` after the controllers compacted their log into snapshots (one every 20
/// entries here; the active controller's NoOpRecords alone make one every ~10 s): every
/// partition record still in the log shows its resulting state (the log starts right after
/// the newest snapshot, which seeds the states), a topic deleted after its TopicRecord was
/// compacted into the snapshot keeps its name and can be asked for by name, and a range below the log start
/// is warned about. Found by a fresh user: records between the log start and a newer
/// snapshot printed no state, and the deleted topic showed only its id.
#[test]
fn metadata_log_after_compaction_keeps_states_and_names() {
    let f = Fixture::fresh();
    f.cluster_up_env(&[("KEEL_METADATA_SNAPSHOT_MAX_ENTRIES", "20")]);
    let ok = |args: &[&str]| {
        let out = f.run(args);
        assert!(
            out.status.success(),
            "keelctl {args:?}: {}\n{}",
            stderr(&out),
            f.logs()
        );
        out
    };
    ok(&["topic", "create", "gone", "--replication-factor", "3"]);
    ok(&[
        "topic",
        "create",
        "hist",
        "--replica-assignment",
        "1:2:3",
        "--config",
        "min.insync.replicas=1",
    ]);
    // Shrink the ISR (an operator AlterPartition); the leader adds broker 3 back once it
    // is caught up: PartitionChangeRecords.
    ok(&[
        "partition",
        "alter-isr",
        "--topic",
        "hist",
        "--partition",
        "0",
        "--isr",
        "1,2",
    ]);
    // `metadata log --json` prints one object per line.
    let records = |args: &[&str]| -> Vec<Value> {
        let out = ok(args);
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    let gone_created = records(&["--json", "metadata", "log", "--topic", "gone"])[0]["offset"]
        .as_i64()
        .unwrap();
    // Wait until the log starts past every record of both topics' creation.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
    loop {
        let q = f.json(&["--json", "quorum", "status"]);
        let start = q["log_start_offset"].as_i64().unwrap();
        if start > gone_created + 10 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no compaction past offset {gone_created}: {q}\n{}",
            f.logs()
        );
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    // Deleted once its TopicRecord is only in the snapshot.
    ok(&["topic", "delete", "gone"]);
    // More partition changes after the compaction (the leader re-adds broker 3).
    ok(&[
        "partition",
        "alter-isr",
        "--topic",
        "hist",
        "--partition",
        "0",
        "--isr",
        "1,3",
    ]);
    let changes = records(&[
        "--json",
        "metadata",
        "log",
        "--type",
        "PartitionChangeRecord",
    ]);
    assert!(!changes.is_empty());
    assert!(
        changes
            .iter()
            .all(|r| r["partition_state"]["leader_epoch"].is_i64()),
        "a change without its state: {changes:?}"
    );
    let gone = records(&["--json", "metadata", "log", "--topic", "gone"]);
    assert!(
        gone.iter()
            .any(|r| r["record_type"] == "RemoveTopicRecord" && r["topic"] == "gone"),
        "{gone:?}"
    );
    let out = f.run(&["metadata", "log", "--from", "1", "--to", "3"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("were compacted into the snapshot ending at offset"),
        "{}",
        stderr(&out)
    );
}

/// `config describe --broker N --all` asks broker N itself (as kafka-configs
/// --bootstrap-server does): a key its own settings set shows that value as
/// STATIC_BROKER_CONFIG. A fresh user read `min.insync.replicas 1 DEFAULT_CONFIG` from the
/// controllers for a broker whose file set 2 (and which enforced 2).
#[test]
fn config_describe_of_a_broker_shows_its_own_settings() {
    let f = Fixture::fresh();
    f.cluster_up_env(&[("KEEL_MIN_INSYNC_REPLICAS", "2")]);
    let rows = f.json(&["--json", "config", "describe", "--broker", "1", "--all"]);
    let min_isr = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "min.insync.replicas")
        .unwrap_or_else(|| panic!("{rows}"))
        .clone();
    assert_eq!(min_isr["value"], "2", "{min_isr}");
    assert_eq!(min_isr["source"], "STATIC_BROKER_CONFIG", "{min_isr}");
    // A topic as the brokers apply it (a broker is asked, as Kafka's admin client does).
    let out = f.run(&["topic", "create", "one", "--replication-factor", "1"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let rows = f.json(&["--json", "config", "describe", "--topic", "one", "--all"]);
    let min_isr = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "min.insync.replicas")
        .unwrap_or_else(|| panic!("{rows}"))
        .clone();
    assert_eq!(
        (min_isr["value"].as_str(), min_isr["source"].as_str()),
        (Some("2"), Some("STATIC_BROKER_CONFIG")),
        "{min_isr}"
    );
    // An unregistered broker is refused, naming it.
    let err = f.fails(&["config", "describe", "--broker", "999"]);
    assert!(err.contains("broker 999"), "{err}");
}
