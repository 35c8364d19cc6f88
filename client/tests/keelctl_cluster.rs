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

    // One-line errors for an unknown topic and a bad --isr list.
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
    let status = f.cluster("status", &[]);
    assert!(
        status["processes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p["alive"] == false),
        "{status}"
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
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
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
