//! Dynamic controller membership (KIP-853) on real `keel-controller` processes: growing a
//! one-voter quorum to three and shrinking it back while metadata is written, replacing a
//! controller's disk (a new directory id) and then losing the old leader, and the refusals of
//! bad AddRaftVoter / RemoveRaftVoter requests with the membership left as it was.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use keel_client::admin::{Admin, AdminConfig};
use keel_proto::ErrorCode;
use keel_proto::controller::{DescribeClusterRequest, DescribeQuorumReply, RegisterBrokerRequest};
use keel_tests::quorum::{Clients, Quorum, is_not_controller, ok};

fn admin(q: &Quorum) -> Admin {
    let addrs = q.ids().into_iter().map(|i| q.addr(i)).collect();
    Admin::new(AdminConfig {
        request_timeout: Duration::from_secs(40),
        api_timeout: Duration::from_secs(60),
        ..AdminConfig::new(addrs)
    })
    .unwrap()
}

/// The active controller's DescribeQuorum.
async fn quorum_of(q: &Quorum) -> DescribeQuorumReply {
    admin(q).describe_quorum().await.unwrap_or_else(|e| {
        panic!("describe quorum: {e}\n{}", q.logs());
    })
}

/// Voter ids and their directory ids, from the active controller.
async fn voters(q: &Quorum) -> Vec<(i32, String)> {
    quorum_of(q)
        .await
        .voters
        .into_iter()
        .map(|v| (v.replica_id, v.directory_id))
        .collect()
}

/// Waits until the active controller reports exactly `want` as voters.
async fn wait_voters(q: &Quorum, want: &[(i32, &str)], deadline: Duration) {
    let start = Instant::now();
    loop {
        let got = voters(q).await;
        let want: Vec<(i32, String)> = want.iter().map(|(i, d)| (*i, d.to_string())).collect();
        if got == want {
            return;
        }
        assert!(
            start.elapsed() < deadline,
            "voters {got:?}, want {want:?}\n{}",
            q.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn add(
    a: &Admin,
    id: i32,
    dir: &str,
    addr: &str,
    secs: u64,
) -> keel_client::admin::Result<()> {
    a.add_raft_voter(id, dir, addr, Duration::from_secs(secs))
        .await
}

/// Starts each of `ids` as an observer and adds it as a voter (30 s each).
async fn add_observers(q: &mut Quorum, a: &Admin, ids: &[u64]) {
    for &id in ids {
        q.start_observer(id);
        add(a, id as i32, &q.directory_id(id), &q.addr(id), 30)
            .await
            .unwrap_or_else(|e| panic!("add controller {id}: {e}\n{}", q.logs()));
    }
}

/// Waits up to 10 s for `leader`'s log to show a refused voter key (a replaced node).
async fn wait_refused(q: &Quorum, leader: u64) {
    let start = Instant::now();
    while !q.log_of(leader).contains("INVALID_VOTER_KEY") {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the replaced node was not refused\n{}",
            q.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn register_request(broker_id: i32) -> RegisterBrokerRequest {
    keel_tests::quorum::register_request(broker_id, 40000 + broker_id as u32)
}

/// Registers broker ids 1, 2, ... one after the other through whichever controller is active
/// until `stop`; returns the ids whose registration was acknowledged.
fn spawn_writer(clients: Clients, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<Vec<i32>> {
    tokio::spawn(async move {
        let mut acked = Vec::new();
        let mut id = 1;
        while !stop.load(Ordering::SeqCst) {
            let req = register_request(id);
            let done = clients
                .on_leader(Duration::from_secs(20), |mut c| {
                    let req = req.clone();
                    async move {
                        let r = c.register_broker(req).await.ok()?.into_inner();
                        assert!(
                            ok(&r.error) || is_not_controller(&r.error),
                            "register {id}: {:?}",
                            r.error
                        );
                        ok(&r.error).then_some(())
                    }
                })
                .await;
            assert!(
                done.is_some(),
                "no controller registered broker {id} in 20 s"
            );
            acked.push(id);
            id += 1;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        acked
    })
}

/// The broker ids node `id`'s image has registered.
async fn registered_on(q: &Quorum, id: u64) -> BTreeSet<i32> {
    let r = q
        .client(id)
        .await
        .describe_cluster(DescribeClusterRequest {
            include_fenced_brokers: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    r.brokers.iter().map(|b| b.broker_id).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_single_voter_grows_to_three_and_shrinks_back_under_metadata_writes() {
    let mut q = Quorum::start_single_voter(3);
    assert_eq!(q.wait_leader(Duration::from_secs(20)).await, 1);
    let d1 = q.directory_id(1);
    // The active controller records its own directory id in the membership.
    wait_voters(&q, &[(1, &d1)], Duration::from_secs(10)).await;

    let stop = Arc::new(AtomicBool::new(false));
    let writer = spawn_writer(Clients::new(&q), stop.clone());
    tokio::time::sleep(Duration::from_millis(300)).await;

    let a = admin(&q);
    for id in [2u64, 3] {
        q.start_observer(id);
        let dir = q.directory_id(id);
        a.add_raft_voter(id as i32, &dir, &q.addr(id), Duration::from_secs(30))
            .await
            .unwrap_or_else(|e| panic!("add controller {id}: {e}\n{}", q.logs()));
    }
    let (d2, d3) = (q.directory_id(2), q.directory_id(3));
    wait_voters(&q, &[(1, &d1), (2, &d2), (3, &d3)], Duration::from_secs(10)).await;
    // Every voter's log end and lag are known to the active controller.
    let start = Instant::now();
    loop {
        let status = quorum_of(&q).await;
        if status
            .voters
            .iter()
            .all(|v| v.lag >= 0 && v.last_fetch_timestamp_ms > 0)
        {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(5), "{status:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Three voters now: one of them may be lost without stopping writes.
    tokio::time::sleep(Duration::from_millis(300)).await;

    a.remove_raft_voter(3, &d3).await.unwrap();
    wait_voters(&q, &[(1, &d1), (2, &d2)], Duration::from_secs(10)).await;
    a.remove_raft_voter(2, &d2).await.unwrap();
    wait_voters(&q, &[(1, &d1)], Duration::from_secs(10)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    stop.store(true, Ordering::SeqCst);
    let acked = writer.await.unwrap();
    assert!(acked.len() > 10, "only {} writes acknowledged", acked.len());
    let on_1 = registered_on(&q, 1).await;
    let lost: Vec<i32> = acked
        .iter()
        .filter(|id| !on_1.contains(id))
        .copied()
        .collect();
    assert!(
        lost.is_empty(),
        "acknowledged registrations lost: {lost:?}; node 1 has {on_1:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replaced_disk_is_refused_until_the_membership_changes_then_the_old_leader_dies() {
    // Three static voters: the active controller learns and records their directory ids.
    let mut q = Quorum::start(3);
    let leader = q.wait_leader(Duration::from_secs(20)).await;
    let dirs: Vec<String> = q.ids().iter().map(|i| q.directory_id(*i)).collect();
    let want: Vec<(i32, &str)> = (1..=3)
        .map(|i| (i, dirs[i as usize - 1].as_str()))
        .collect();
    wait_voters(&q, &want, Duration::from_secs(15)).await;

    let stop = Arc::new(AtomicBool::new(false));
    let writer = spawn_writer(Clients::new(&q), stop.clone());
    tokio::time::sleep(Duration::from_millis(300)).await;

    // A follower's disk is replaced: it comes back empty, with a new directory id.
    let replaced = q.ids().into_iter().find(|i| *i != leader).unwrap();
    let old_dir = q.directory_id(replaced);
    q.kill(replaced);
    std::fs::remove_dir_all(q.data_dir(replaced)).unwrap();
    q.start_node(replaced);
    let new_dir = q.directory_id(replaced);
    assert_ne!(new_dir, old_dir);
    // The others refuse it as that voter; the membership still names the old directory.
    wait_refused(&q, leader).await;
    wait_voters(&q, &want, Duration::from_secs(1)).await;

    let a = admin(&q);
    a.remove_raft_voter(replaced as i32, &old_dir)
        .await
        .unwrap();
    a.add_raft_voter(
        replaced as i32,
        &new_dir,
        &q.addr(replaced),
        Duration::from_secs(30),
    )
    .await
    .unwrap_or_else(|e| panic!("add the replaced controller: {e}\n{}", q.logs()));
    let mut now: Vec<(i32, &str)> = want.clone();
    now[replaced as usize - 1].1 = &new_dir;
    wait_voters(&q, &now, Duration::from_secs(10)).await;

    // The old leader dies: the other two (one of them the replaced node) elect a leader.
    q.kill(leader);
    let new_leader = q.wait_leader(Duration::from_secs(20)).await;
    assert_ne!(new_leader, leader);
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::SeqCst);
    let acked = writer.await.unwrap();
    for id in q.ids().into_iter().filter(|i| *i != leader) {
        let start = Instant::now();
        loop {
            let seen = registered_on(&q, id).await;
            let lost: Vec<i32> = acked
                .iter()
                .filter(|b| !seen.contains(b))
                .copied()
                .collect();
            if lost.is_empty() {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "controller {id} lacks acknowledged registrations {lost:?}\n{}",
                q.logs()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_membership_changes_get_kafkas_codes_and_change_nothing() {
    let mut q = Quorum::start_single_voter(3);
    q.wait_leader(Duration::from_secs(20)).await;
    let d1 = q.directory_id(1);
    wait_voters(&q, &[(1, &d1)], Duration::from_secs(10)).await;
    q.start_observer(2);
    let d2 = q.directory_id(2);
    let a = admin(&q);
    let code = |r: keel_client::admin::Result<()>| {
        let e = r.unwrap_err();
        eprintln!("refused: {e}");
        e.code()
    };

    // Duplicate node id, duplicate directory id.
    assert_eq!(
        code(add(&a, 1, &d2, &q.addr(2), 5).await),
        Some(ErrorCode::DuplicateVoter)
    );
    assert_eq!(
        code(add(&a, 2, &d1, &q.addr(2), 5).await),
        Some(ErrorCode::DuplicateVoter)
    );
    // Bad directory id, bad endpoint, bad timeout.
    assert_eq!(
        code(add(&a, 2, "not-an-id", &q.addr(2), 5).await),
        Some(ErrorCode::InvalidRequest)
    );
    assert_eq!(
        code(add(&a, 2, &d2, "no port here#", 5).await),
        Some(ErrorCode::InvalidRequest)
    );
    // A directory id the node at that address does not have: it never catches up.
    let wrong = uuid::Uuid::new_v4().to_string();
    assert_eq!(
        code(add(&a, 2, &wrong, &q.addr(2), 2).await),
        Some(ErrorCode::RequestTimedOut)
    );
    // The last voter, a node that is not a voter, a directory id mismatch.
    assert_eq!(
        code(a.remove_raft_voter(1, &d1).await),
        Some(ErrorCode::InvalidRequest)
    );
    assert_eq!(
        code(a.remove_raft_voter(2, &d2).await),
        Some(ErrorCode::VoterNotFound)
    );
    assert_eq!(
        code(a.remove_raft_voter(1, &d2).await),
        Some(ErrorCode::VoterNotFound)
    );
    let status = quorum_of(&q).await;
    assert_eq!(
        status
            .voters
            .iter()
            .map(|v| (v.replica_id, v.directory_id.clone()))
            .collect::<Vec<_>>(),
        vec![(1, d1.clone())]
    );
    assert!(
        !status.observers.iter().any(|o| o.replica_id == 2),
        "the timed-out observer stays: {status:?}"
    );

    // Three voters with one down: removing a live one would leave no majority in contact.
    add(&a, 2, &d2, &q.addr(2), 30).await.unwrap();
    q.start_observer(3);
    let d3 = q.directory_id(3);
    add(&a, 3, &d3, &q.addr(3), 30).await.unwrap();
    wait_voters(&q, &[(1, &d1), (2, &d2), (3, &d3)], Duration::from_secs(10)).await;
    q.kill(3);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let e = a.remove_raft_voter(2, &d2).await.unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::InvalidRequest), "{e}");
    assert!(e.to_string().contains("quorum would stop"), "{e}");
    wait_voters(&q, &[(1, &d1), (2, &d2), (3, &d3)], Duration::from_secs(1)).await;
    // Removing the dead one is what the operator can do.
    a.remove_raft_voter(3, &d3).await.unwrap();
    wait_voters(&q, &[(1, &d1), (2, &d2)], Duration::from_secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_quorum_formatted_with_initial_controllers_knows_every_voter_key_from_its_first_entry() {
    let (mut q, dirs) = Quorum::start_formatted(3);
    let leader = q.wait_leader(Duration::from_secs(20)).await;
    let want: Vec<(i32, &str)> = (1..=3)
        .map(|i| (i, dirs[i as usize - 1].as_str()))
        .collect();
    wait_voters(&q, &want, Duration::from_secs(10)).await;
    // Recorded by the first membership entry, not learned: the log holds no later change.
    assert!(
        !q.log_of(leader)
            .contains("recorded the directory ids of controllers"),
        "{}",
        q.logs()
    );
    // Formatting again is refused, or accepted as it is with --ignore-formatted.
    let again = q.format(1, &["--standalone"]);
    assert_eq!(again.status.code(), Some(1), "{again:?}");
    let line = String::from_utf8_lossy(&again.stderr);
    assert!(
        line.starts_with("keel-controller format: ")
            && line.contains("is already formatted")
            && line.trim_end().lines().count() == 1,
        "{line}"
    );
    let ignored = q.format(1, &["--standalone", "--ignore-formatted"]);
    assert!(ignored.status.success(), "{ignored:?}");

    // A replaced disk on a formatted quorum: refused until the membership changes.
    let replaced = q.ids().into_iter().find(|i| *i != leader).unwrap();
    q.kill(replaced);
    std::fs::remove_dir_all(q.data_dir(replaced)).unwrap();
    let out = q.format(replaced, &["--no-initial-controllers"]);
    assert!(out.status.success(), "{out:?}");
    q.start_node(replaced);
    let new_dir = q.directory_id(replaced);
    wait_refused(&q, leader).await;
    let a = admin(&q);
    let old = dirs[replaced as usize - 1].clone();
    a.remove_raft_voter(replaced as i32, &old).await.unwrap();
    add(&a, replaced as i32, &new_dir, &q.addr(replaced), 30)
        .await
        .unwrap_or_else(|e| panic!("add the replaced controller: {e}\n{}", q.logs()));
    let mut now = want.clone();
    now[replaced as usize - 1].1 = &new_dir;
    wait_voters(&q, &now, Duration::from_secs(10)).await;
}

#[test]
fn format_refuses_lists_without_this_node_and_bad_entries_and_writes_nothing() {
    // Node 2 is only formatted (node 1 runs as the single voter it would join).
    let mut q = Quorum::start_single_voter(2);
    let addr = q.addr(2);
    q.node_args
        .insert(2, vec!["--advertised-listeners".into(), addr]);
    let d = uuid::Uuid::new_v4().simple().to_string();
    for (args, want) in [
        (
            vec![
                "--initial-controllers".to_string(),
                format!("1@127.0.0.1:1:{d}"),
            ],
            "does not list this node (node_id 2)",
        ),
        (
            vec!["--initial-controllers".to_string(), "2@nowhere".to_string()],
            "is not id@host:port:directory-id",
        ),
        (
            vec![
                "--standalone".to_string(),
                "--no-initial-controllers".to_string(),
            ],
            "cannot be used with",
        ),
    ] {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = q.format(2, &args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_ne!(out.status.code(), Some(0), "{args:?}: {out:?}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(!q.data_dir(2).join("meta.properties").exists());
    }
}

/// Whether controller `id` reports broker 1 registered and unfenced.
async fn broker_unfenced_at(q: &Quorum, id: u64) -> bool {
    let Ok(r) = q
        .client(id)
        .await
        .describe_cluster(DescribeClusterRequest {
            include_fenced_brokers: true,
            ..Default::default()
        })
        .await
    else {
        return false;
    };
    r.into_inner()
        .brokers
        .iter()
        .any(|b| b.broker_id == 1 && !b.fenced)
}

/// Starts broker 1 with the harness's session timings and `contact` (its
/// `--controller-quorum-voters` or `--controller-quorum-bootstrap-servers` flag), and waits up
/// to 20 s until controller 1 reports it unfenced.
async fn start_broker(q: &Quorum, contact: &[&str]) -> keel_tests::node::NodeProcess {
    let ports = keel_tests::quorum::free_ports(2);
    let mut broker =
        keel_tests::node::NodeProcess::new("broker 1".into(), q.dir.path().join("broker-1.log"));
    let mut cmd = std::process::Command::new(keel_tests::process::broker_bin());
    cmd.args(["--node-id", "1"])
        .args(contact)
        .arg("--listeners")
        .arg(format!(
            "GRPC://127.0.0.1:{},PLAINTEXT://127.0.0.1:{}",
            ports[0], ports[1]
        ))
        .arg("--log-dirs")
        .arg(q.dir.path().join("broker-1"))
        .args(["--broker-heartbeat-interval-ms", "200"])
        .args(["--broker-session-timeout-ms", "1000"])
        .env("KEEL_LOG", "info");
    broker.start(cmd);
    let start = Instant::now();
    while !broker_unfenced_at(q, 1).await {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "broker 1 not unfenced\n{}\n{}",
            q.logs(),
            broker.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    broker
}

/// A dynamic quorum (KIP-853) whose nodes know only `controller_quorum_bootstrap_servers`:
/// the first controller formatted `--standalone`, the others `--no-initial-controllers`,
/// which wait as observers (logging the add-controller command) and are added; a broker
/// given only the first controller's address, started before the others were added, learns
/// the new voters from the active controller, so it keeps its session and its metadata keeps
/// following the log when the first controller is killed (found by the fresh-user trial: it
/// was fenced, or served stale metadata); the killed controller rejoins on restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dynamic_quorum_from_bootstrap_servers_grows_and_brokers_find_its_voters() {
    let mut q = Quorum::start_dynamic(3);
    assert_eq!(q.wait_leader(Duration::from_secs(20)).await, 1);
    let a = admin(&q);
    // A broker that starts while controller 1 is the only one, knowing only its address.
    let first = q.addr(1);
    let mut broker = start_broker(&q, &["--controller-quorum-bootstrap-servers", &first]).await;
    assert!(
        broker
            .log()
            .contains("learned the controller voters from controller_quorum_bootstrap_servers"),
        "{}",
        broker.log()
    );
    q.start_observer(2);
    let hint = format!(
        "quorum add-controller --controller-id 2 --directory-id {} --endpoint {}",
        q.directory_id(2),
        q.addr(2)
    );
    let start = Instant::now();
    while !q.log_of(2).contains(&hint) {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "observer 2 did not log {hint:?}\n{}",
            q.logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    add(&a, 2, &q.directory_id(2), &q.addr(2), 30)
        .await
        .unwrap_or_else(|e| panic!("add 2: {e}\n{}", q.logs()));
    add_observers(&mut q, &a, &[3]).await;
    let (d1, d2, d3) = (q.directory_id(1), q.directory_id(2), q.directory_id(3));
    wait_voters(
        &q,
        &[(1, d1.as_str()), (2, d2.as_str()), (3, d3.as_str())],
        Duration::from_secs(10),
    )
    .await;

    // The broker learns the new voters from the active controller (within about 6 s), so it
    // does not depend on controller 1 any more.
    let start = Instant::now();
    loop {
        let log = broker.log();
        let learned = log
            .lines()
            .filter(|l| l.contains("the controller voters changed"))
            .any(|l| l.contains(&q.addr(2)) && l.contains(&q.addr(3)));
        if learned {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the broker did not learn voters 2 and 3\n{log}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    q.kill(1);
    let start = Instant::now();
    let leader = loop {
        match q.leader_seen_by(2).await {
            Some(l) if l != 1 => break l,
            _ => {}
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no new leader\n{}",
            q.logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // Longer than a session: the broker heartbeats to the new active controller, and its
    // metadata keeps following the log (a registration written now reaches it).
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(broker_unfenced_at(&q, leader).await, "{}", broker.log());
    let r = q
        .client(leader)
        .await
        .register_broker(register_request(50))
        .await
        .unwrap()
        .into_inner();
    assert!(ok(&r.error), "{:?}", r.error);
    let start = Instant::now();
    loop {
        let applied = q
            .client(leader)
            .await
            .describe_cluster(DescribeClusterRequest {
                include_fenced_brokers: true,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .brokers
            .iter()
            .find(|b| b.broker_id == 1)
            .map_or(-1, |b| b.last_applied_metadata_offset);
        if applied >= r.broker_epoch {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "broker 1 applied {applied}, not {}\n{}",
            r.broker_epoch,
            broker.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    q.start_node(1);
    let start = Instant::now();
    while q.leader_seen_by(1).await != Some(leader) {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "controller 1 did not rejoin\n{}",
            q.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    broker.kill();
}

/// The refusals around `controller_quorum_bootstrap_servers`: both quorum keys set (either
/// binary), a controller of a dynamic quorum on an unformatted directory, and formatting one
/// without --standalone / --initial-controllers / --no-initial-controllers. Each is one line
/// naming what to do, and nothing is written.
#[test]
fn dynamic_quorum_configs_are_refused_with_one_line_naming_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("c1");
    let d = d.to_str().unwrap();
    let run = |bin: std::path::PathBuf, args: &[&str]| {
        let out = std::process::Command::new(bin).args(args).output().unwrap();
        assert!(!out.status.success(), "{args:?} succeeded");
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err.lines().count(), 1, "not one line: {err}");
        err
    };
    let controller = keel_tests::process::controller_bin;
    let both = [
        "--node-id",
        "1",
        "--controller-quorum-voters",
        "1@127.0.0.1:1",
        "--controller-quorum-bootstrap-servers",
        "127.0.0.1:1",
    ];
    let e = run(
        controller(),
        &[&both[..], &["--metadata-log-dir", d]].concat(),
    );
    assert!(e.contains("not both"), "{e}");
    let e = run(
        keel_tests::process::broker_bin(),
        &[&both[..], &["--log-dirs", d]].concat(),
    );
    assert!(e.contains("not both"), "{e}");
    let e = run(
        keel_tests::process::broker_bin(),
        &["--node-id", "1", "--log-dirs", d],
    );
    assert!(
        e.contains("controller_quorum_voters (or controller_quorum_bootstrap_servers)"),
        "{e}"
    );
    let e = run(
        keel_tests::process::broker_bin(),
        &[
            "--node-id",
            "1",
            "--log-dirs",
            d,
            "--controller-quorum-bootstrap-servers",
            "127.0.0.1:1,,x",
        ],
    );
    assert!(e.contains("controller_quorum_bootstrap_servers"), "{e}");
    let port = keel_tests::quorum::free_ports(1)[0];
    let dynamic = [
        "--node-id".to_string(),
        "1".into(),
        "--controller-quorum-bootstrap-servers".into(),
        "127.0.0.1:1".into(),
        "--metadata-log-dir".into(),
        d.into(),
        "--listeners".into(),
        format!("127.0.0.1:{port}"),
        "--advertised-listeners".into(),
        format!("127.0.0.1:{port}"),
    ];
    let dynamic: Vec<&str> = dynamic.iter().map(String::as_str).collect();
    let e = run(controller(), &dynamic);
    assert!(
        e.contains("is not formatted") && e.contains("--standalone"),
        "{e}"
    );
    let e = run(controller(), &[&["format"], &dynamic[..]].concat());
    assert!(e.contains("--no-initial-controllers"), "{e}");
    assert!(!dir.path().join("c1/meta.properties").exists());
    // Without listeners there is no address to advertise.
    let e = run(controller(), &dynamic[..6]);
    assert!(e.contains("listeners and advertised_listeners"), "{e}");
}

/// A broker whose `controller_quorum_voters` lists controllers 1 and 2 keeps its session when
/// controller 3, added later and unknown to it, becomes the active controller: it follows the
/// hint's address (as a Kafka broker follows the leader endpoint a controller returns).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_broker_follows_an_added_controller_it_was_not_configured_with() {
    let mut q = Quorum::start_single_voter(3);
    assert_eq!(q.wait_leader(Duration::from_secs(20)).await, 1);
    let a = admin(&q);
    add_observers(&mut q, &a, &[2, 3]).await;
    let voters = format!("1@{},2@{}", q.addr(1), q.addr(2));
    let mut broker = start_broker(&q, &["--controller-quorum-voters", &voters]).await;

    // Controller 3 must win the next election: controller 2 misses some entries (paused),
    // then the leader dies, so only 3's log is up to date enough for the other's vote.
    q.pause(2);
    let mut c1 = q.client(1).await;
    for id in 100..110 {
        let r = c1
            .register_broker(register_request(id))
            .await
            .unwrap()
            .into_inner();
        assert!(ok(&r.error), "{:?}", r.error);
    }
    q.kill(1);
    q.resume(2);
    let start = Instant::now();
    while q.leader_seen_by(3).await != Some(3) {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "controller 3 did not become active\n{}",
            q.logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Longer than a session: the broker heartbeats to controller 3 all along.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(broker_unfenced_at(&q, 3).await, "{}", broker.log());
    // It reached controller 3 through a NOT_CONTROLLER hint, or through the voter set the
    // active controller reports (whichever came first).
    let log = broker.log();
    assert!(
        log.contains("which this broker's controller list does not have")
            || log.contains("the controller voters changed"),
        "{log}"
    );
    broker.kill();
}

/// A new controller catches up from an active controller that was itself re-added with a
/// new directory id: the entries it copies first record that controller's old directory id,
/// which must not make it refuse the leader (a trial left such a node at its first 512
/// entries, and the add timed out).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_controller_catches_up_from_a_leader_whose_disk_was_replaced() {
    let mut q = Quorum::start_single_voter(4);
    assert_eq!(q.wait_leader(Duration::from_secs(20)).await, 1);
    let a = admin(&q);
    add_observers(&mut q, &a, &[2, 3]).await;
    // Controller 2's disk is replaced and it is swapped in under its new directory id.
    let old2 = q.directory_id(2);
    q.kill(2);
    std::fs::remove_dir_all(q.data_dir(2)).unwrap();
    q.start_observer(2);
    let new2 = q.directory_id(2);
    a.remove_raft_voter(2, &old2).await.unwrap();
    add(&a, 2, &new2, &q.addr(2), 30)
        .await
        .unwrap_or_else(|e| panic!("re-add controller 2: {e}\n{}", q.logs()));
    // Controllers 1 and 3 leave: 2 leads alone (1's directory id, a static voter's, is
    // recorded by the active controller once no change is pending).
    let (d1, d3) = (q.directory_id(1), q.directory_id(3));
    wait_voters(
        &q,
        &[(1, &d1), (2, &new2), (3, &d3)],
        Duration::from_secs(10),
    )
    .await;
    a.remove_raft_voter(1, &d1).await.unwrap();
    a.remove_raft_voter(3, &d3).await.unwrap();
    wait_voters(&q, &[(2, &new2)], Duration::from_secs(10)).await;
    // A fourth controller catches up from 2 through the whole log, whose first entries
    // record 2's old directory id.
    q.start_observer(4);
    let d4 = q.directory_id(4);
    add(&a, 4, &d4, &q.addr(4), 20)
        .await
        .unwrap_or_else(|e| panic!("add controller 4: {e}\n{}", q.logs()));
    wait_voters(&q, &[(2, &new2), (4, &d4)], Duration::from_secs(10)).await;
}
