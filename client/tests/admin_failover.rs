//! Admin requests across a `kill -9` of the active controller, on real processes (3
//! `keel-controller` + 3 `keel-broker` from `keelctl cluster up`): a write started right
//! after the kill must ride through the election (stale NOT_CONTROLLER hints naming the dead
//! controller, connection refused, no leader for about a second) and succeed, through
//! `keelctl` and through the library. Also: addresses of the wrong kind of server (a broker's
//! gRPC or Kafka port as a controller, a controller as a broker) give one plain line, at once.

mod common;

use std::time::{Duration, Instant};

use common::Fixture;
use keel_client::admin::{Admin, AdminConfig, ConfigTarget, NewTopic};
use serde_json::Value;

fn leader(f: &Fixture) -> i64 {
    let q = f.json(&["--json", "quorum", "status"]);
    q["leader_id"]
        .as_i64()
        .unwrap_or_else(|| panic!("no leader_id in {q}"))
}

/// Waits until every voter is caught up with the leader (a restarted controller replayed
/// the log), so that killing the leader next leaves a quorum able to elect.
fn wait_caught_up(f: &Fixture) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let rows = f.json(&["--json", "quorum", "replication"]);
        let voters: Vec<&Value> = rows
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["status"] != "Observer")
            .collect();
        if voters.len() == 3 && voters.iter().all(|r| r["lag"] == 0) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "voters not caught up: {rows}\n{}",
            f.logs()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn admin_writes_succeed_right_after_a_kill9_of_the_active_controller() {
    let f = Fixture::fresh();
    f.cluster("up", &["--timeout-secs", "120"]);

    // keelctl, started right after the kill: before, it gave up within ~10 ms ("cannot reach
    // any controller ... Connection refused") because the followers still named the dead
    // controller and each redirect burned one of 10 attempts without any backoff.
    let first = leader(&f);
    f.kill9_controller(first);
    let started = Instant::now();
    let out = f.run(&["--json", "topic", "create", "after-kill-1"]);
    let took = started.elapsed();
    assert!(
        out.status.success(),
        "topic create right after kill -9 of controller {first} failed after {took:?}: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        f.logs()
    );
    assert!(took < Duration::from_secs(10), "{took:?}");
    let created: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(created["name"], "after-kill-1", "{created}");
    let second = leader(&f);
    assert_ne!(second, first);

    // The library: restart the killed controller, kill the new leader, write at once.
    f.cluster("up", &["--timeout-secs", "60"]);
    wait_caught_up(&f);
    assert_eq!(leader(&f), second);
    let controllers: Vec<String> = f.controllers().split(',').map(String::from).collect();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let admin = Admin::new(AdminConfig::new(controllers)).unwrap();
        // Learn the active controller first, as a long-lived client would have.
        admin.describe_quorum().await.unwrap();
        f.kill9_controller(second);
        let started = Instant::now();
        let created = admin
            .create_topic(NewTopic {
                name: "after-kill-2".into(),
                partitions: Some(2),
                ..Default::default()
            })
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "create_topic after kill -9 of controller {second}: {e} ({:?})\n{}",
                    started.elapsed(),
                    f.logs()
                )
            });
        assert_eq!(created.num_partitions, 2);
        admin
            .alter_configs(
                &ConfigTarget::Topic("after-kill-2".into()),
                &[("retention.ms".into(), "3600000".into())],
                &[],
                false,
            )
            .await
            .unwrap();
        let took = started.elapsed();
        assert!(took < Duration::from_secs(10), "{took:?}");
        let q = admin.describe_quorum().await.unwrap();
        assert!(
            q.leader_id >= 1 && i64::from(q.leader_id) != second,
            "{q:?}"
        );
    });

    // Both topics are there, once.
    let list = f.json(&["--json", "topic", "list"]);
    let names: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    for t in ["after-kill-1", "after-kill-2"] {
        assert_eq!(names.iter().filter(|n| **n == t).count(), 1, "{list}");
    }

    // The wrong kind of server: one line naming what it is, without retrying for the budget.
    let broker = f.brokers()[0].clone();
    let controller = format!("127.0.0.1:{}", f.base + first as u16);
    // A broker's Kafka listener resets every gRPC connection; keelctl used to retry that for
    // the whole API timeout (fresh-user trials, sessions 34 and 35).
    let kafka = format!("127.0.0.1:{}", f.base + 201);
    // A metrics listener (plain HTTP; broker 1's, `base + 310 + id`).
    let metrics = format!("127.0.0.1:{}", f.base + 311);
    let as_controller = |addr: &str| {
        let err = f.fails(&["--bootstrap-controllers", addr, "topic", "list"]);
        let prefix = "keelctl: no controller at the bootstrap addresses: ";
        err.trim_end()
            .strip_prefix(prefix)
            .map(str::to_string)
            .unwrap_or(err)
    };
    let as_broker = |addr: &str| {
        let err = f.fails(&[
            "--bootstrap-brokers",
            addr,
            "consume",
            "--topic",
            "after-kill-1",
        ]);
        let prefix = format!("keelctl: no broker at {addr}: ");
        err.trim_end()
            .strip_prefix(&prefix)
            .map(str::to_string)
            .unwrap_or(err)
    };
    let started = Instant::now();
    let cases = [
        (
            as_controller(&broker),
            format!("{broker} does not serve the controller API (is it a broker?)"),
        ),
        (
            as_broker(&controller),
            format!("{controller} does not serve the broker API (is it a controller?)"),
        ),
        (
            as_controller(&kafka),
            format!(
                "{kafka} is a Kafka listener, not the controller API (is it a broker's Kafka port?)"
            ),
        ),
        (
            as_broker(&kafka),
            format!(
                "{kafka} is a Kafka listener, not the broker API (is it a broker's Kafka port?)"
            ),
        ),
        (
            as_controller(&metrics),
            format!(
                "{metrics} does not serve the controller API (it answered HTTP 404, not gRPC: is it a metrics port?)"
            ),
        ),
    ];
    for (got, want) in cases {
        assert_eq!(got, want);
    }
    assert!(started.elapsed() < Duration::from_secs(12));
}
