//! `/metrics` and `/health/*` of real controller processes (issue #7): the active controller
//! count sums to 1 over the quorum, readiness is 200 with a leader, 503 without one, and a
//! taken `metrics_listener` port fails start-up with one line naming the key.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use keel_tests::http::{http_get, sample};
use keel_tests::quorum::{Quorum, free_ports};

struct Scrape {
    ready: BTreeMap<u64, u16>,
    active: BTreeMap<u64, f64>,
    texts: BTreeMap<u64, String>,
}

async fn scrape(metrics: &BTreeMap<u64, SocketAddr>) -> Scrape {
    let mut s = Scrape {
        ready: BTreeMap::new(),
        active: BTreeMap::new(),
        texts: BTreeMap::new(),
    };
    for (id, addr) in metrics {
        if let Some((code, _)) = http_get(*addr, "/health/ready").await {
            s.ready.insert(*id, code);
        }
        if let Some((200, text)) = http_get(*addr, "/metrics").await {
            if let Some(v) = sample(&text, "keel_controller_active_controller_count") {
                s.active.insert(*id, v);
            }
            s.texts.insert(*id, text);
        }
    }
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn active_controller_count_sums_to_one_and_readiness_follows_the_quorum() {
    let ports = free_ports(3);
    let metrics: BTreeMap<u64, SocketAddr> = (1..=3u64)
        .map(|id| {
            (
                id,
                SocketAddr::from(([127, 0, 0, 1], ports[id as usize - 1])),
            )
        })
        .collect();
    let mut node_args: BTreeMap<u64, Vec<String>> = metrics
        .iter()
        .map(|(id, a)| (*id, vec!["--metrics-listener".to_string(), a.to_string()]))
        .collect();
    // Node 1 also logs JSON lines.
    node_args
        .get_mut(&1)
        .unwrap()
        .extend(["--log-format".to_string(), "json".to_string()]);
    let mut q = Quorum::start_with_node_args(3, &[], node_args);

    // 1. All three ready, exactly one active controller, and the gauges carry real values.
    let deadline = Instant::now() + Duration::from_secs(30);
    let s = loop {
        let s = scrape(&metrics).await;
        let all_ready = s.ready.len() == 3 && s.ready.values().all(|c| *c == 200);
        // The lag gauge appears once a metadata entry (with its append time) is applied: the
        // first applied entry can be Raft's membership entry, which has none.
        let lag_known = s.texts.len() == 3
            && s.texts
                .values()
                .all(|t| sample(t, "keel_controller_last_applied_record_lag_ms").is_some());
        if all_ready && lag_known && s.active.len() == 3 && s.active.values().sum::<f64>() == 1.0 {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "no single active controller with all ready: ready {:?}, active {:?}\n{}",
            s.ready,
            s.active,
            q.logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let leader = q.wait_leader(Duration::from_secs(10)).await;
    assert_eq!(
        s.active[&leader], 1.0,
        "the Raft leader reports active: {:?}",
        s.active
    );
    for (id, text) in &s.texts {
        assert!(
            text.contains("# HELP keel_controller_active_controller_count"),
            "{id}: {text}"
        );
        assert!(
            sample(text, "keel_controller_raft_term").is_some_and(|t| t >= 1.0),
            "{text}"
        );
        assert_eq!(
            sample(text, "keel_controller_raft_current_leader"),
            Some(leader as f64),
            "{text}"
        );
        // The bootstrap ClusterIdRecord (and NoOps) are applied everywhere.
        assert!(
            sample(text, "keel_controller_last_applied_record_offset").is_some_and(|o| o >= 1.0),
            "{text}"
        );
        assert_eq!(
            sample(text, "keel_controller_global_topic_count"),
            Some(0.0),
            "{text}"
        );
        assert!(
            sample(text, "keel_controller_last_applied_record_lag_ms").is_some(),
            "{text}"
        );
    }
    let json_log = std::fs::read_to_string(q.dir.path().join("controller-1.log")).unwrap();
    let first = json_log.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("{\"timestamp\":") && first.ends_with('}'),
        "node 1 should log JSON lines: {first}"
    );
    let text_log = std::fs::read_to_string(q.dir.path().join("controller-2.log")).unwrap();
    assert!(
        text_log.lines().next().is_some_and(|l| !l.starts_with('{')),
        "node 2 logs text"
    );
    let live = http_get(metrics[&1], "/health/live").await;
    assert_eq!(live, Some((200, "live\n".to_string())));

    // 2. Without a quorum a survivor is not ready (503, saying why) and nobody is active.
    let survivor = q.ids().into_iter().find(|id| *id != leader).unwrap();
    for id in q.ids() {
        if id != survivor {
            q.kill(id);
        }
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = http_get(metrics[&survivor], "/health/ready").await;
        if let Some((503, body)) = &r {
            assert!(body.contains("no known quorum leader"), "{body}");
            break;
        }
        assert!(Instant::now() < deadline, "survivor still {r:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (_, text) = http_get(metrics[&survivor], "/metrics").await.unwrap();
    assert_eq!(
        sample(&text, "keel_controller_active_controller_count"),
        Some(0.0)
    );

    // 3. Restarted, the quorum is ready again with one active controller.
    for id in q.ids() {
        if id != survivor {
            q.start_node(id);
        }
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let s = scrape(&metrics).await;
        if s.ready.values().filter(|c| **c == 200).count() == 3
            && s.active.len() == 3
            && s.active.values().sum::<f64>() == 1.0
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not ready again: {:?} {:?}\n{}",
            s.ready,
            s.active,
            q.logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[test]
fn a_taken_metrics_listener_port_fails_start_with_one_line_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let ports = free_ports(1);
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let metrics_addr = taken.local_addr().unwrap().to_string();
    let out = std::process::Command::new(keel_tests::process::controller_bin())
        .args(["--node-id", "1", "--controller-quorum-voters"])
        .arg(format!("1@127.0.0.1:{}", ports[0]))
        .arg("--listeners")
        .arg(format!("127.0.0.1:{}", ports[0]))
        .arg("--metadata-log-dir")
        .arg(dir.path())
        .arg("--metrics-listener")
        .arg(&metrics_addr)
        .output()
        .unwrap();
    assert!(!out.status.success(), "started with a taken metrics port");
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "not one line: {err}");
    assert!(
        err.starts_with(&format!(
            "keel-controller: metrics_listener {metrics_addr}: "
        )) && err.contains("in use"),
        "{err}"
    );
    // Nothing was written to the log directory: the port is checked before storage opens.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}
