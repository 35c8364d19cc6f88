//! Three real `keel-controller` processes on loopback: election, failover after kill -9 of
//! the leader, and durability of committed records across a restart of all three.

use std::time::{Duration, Instant};

use keel_proto::ErrorCode;
use keel_proto::controller::{RegisterBrokerReply, RegisterBrokerRequest};
use keel_tests::quorum::Quorum;

fn register_request(broker_id: i32) -> RegisterBrokerRequest {
    keel_tests::quorum::register_request(broker_id, 19092 + broker_id as u32)
}

/// Sends a RegisterBroker to running controllers, following NOT_CONTROLLER hints, until one
/// succeeds or `deadline` passes. Returns the reply and the node that accepted it.
async fn register_until_ok(
    q: &Quorum,
    broker_id: i32,
    deadline: Duration,
) -> (RegisterBrokerReply, u64) {
    let start = Instant::now();
    let req = register_request(broker_id);
    let mut last = String::new();
    while start.elapsed() < deadline {
        for id in q.ids().into_iter().filter(|i| q.is_running(*i)) {
            let mut c = q.client(id).await;
            match tokio::time::timeout(Duration::from_millis(1000), c.register_broker(req.clone()))
                .await
            {
                Ok(Ok(r)) => {
                    let r = r.into_inner();
                    match r.error.as_ref().map(|e| e.code) {
                        None | Some(0) => return (r, id),
                        Some(code) => {
                            assert_eq!(
                                code,
                                ErrorCode::NotController.code() as i32,
                                "unexpected error {:?}",
                                r.error
                            );
                            last = format!("{:?}", r.error);
                        }
                    }
                }
                Ok(Err(status)) => last = status.to_string(),
                Err(_) => last = "timeout".into(),
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!(
        "no controller accepted a write within {deadline:?}; last error: {last}\n{}",
        q.logs()
    );
}

async fn cluster_id_seen_by(q: &Quorum, id: u64) -> String {
    let reply = q
        .client(id)
        .await
        .describe_cluster(keel_proto::controller::DescribeClusterRequest::default())
        .await
        .unwrap()
        .into_inner();
    reply.cluster_id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elect_fail_over_and_keep_committed_records_across_restarts() {
    elect_fail_over_and_restart(&[]).await;
}

/// The same on the sled Raft log engine (`metadata_log_engine = "sled"`, #24).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elect_fail_over_and_keep_committed_records_across_restarts_on_sled() {
    elect_fail_over_and_restart(&["--metadata-log-engine", "sled"]).await;
}

async fn elect_fail_over_and_restart(extra: &[&str]) {
    let started = Instant::now();
    let mut q = Quorum::start_with(3, extra);
    let leader = q.wait_leader(Duration::from_secs(2)).await;
    // The engine asked for is the one on disk (sled's `conf` file, or segment files).
    let sled = extra.contains(&"sled");
    for id in q.ids() {
        let raft = q.data_dir(id).join("raft");
        assert_eq!(raft.join("conf").exists(), sled, "{}", raft.display());
    }
    eprintln!(
        "leader {leader} elected {:?} after start",
        started.elapsed()
    );

    // Writes are accepted and broker epochs are the offsets of their records.
    let (r1, at) = register_until_ok(&q, 1, Duration::from_secs(3)).await;
    assert_eq!(at, leader);
    let (r2, _) = register_until_ok(&q, 2, Duration::from_secs(3)).await;
    assert!(
        r1.broker_epoch > 0 && r2.broker_epoch > r1.broker_epoch,
        "{r1:?} {r2:?}"
    );

    // The first active controller named the cluster; every controller reports the same id,
    // and a broker presenting another cluster id is refused.
    let cluster_id = cluster_id_seen_by(&q, leader).await;
    assert_eq!(
        uuid::Uuid::parse_str(&cluster_id).unwrap().to_string(),
        cluster_id
    );
    assert_eq!(r1.cluster_id, cluster_id);
    let mut wrong = register_request(8);
    wrong.cluster_id = "not-this-cluster".into();
    let reply = q
        .client(leader)
        .await
        .register_broker(wrong)
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        reply.error.unwrap().code,
        ErrorCode::InconsistentClusterId.code() as i32
    );

    // A follower refuses writes with NOT_CONTROLLER and names the leader.
    let follower = q.ids().into_iter().find(|i| *i != leader).unwrap();
    let reply = q
        .client(follower)
        .await
        .register_broker(register_request(9))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        reply.error.as_ref().unwrap().code,
        ErrorCode::NotController.code() as i32
    );
    let hint = reply.leader.unwrap();
    assert_eq!(hint.leader_id as u64, leader);
    assert_eq!(hint.leader_address, q.addr(leader));

    // kill -9 of the leader: a new leader accepts writes within 3 s.
    q.kill(leader);
    let killed = Instant::now();
    let (r3, new_leader) = register_until_ok(&q, 3, Duration::from_secs(3)).await;
    let failover = killed.elapsed();
    eprintln!(
        "failover: node {new_leader} accepted a write {failover:?} after kill -9 of node {leader}"
    );
    assert_ne!(new_leader, leader);
    assert!(
        failover < Duration::from_secs(3),
        "failover took {failover:?}"
    );
    assert!(r3.broker_epoch > r2.broker_epoch);

    // The old leader comes back as a follower and catches up.
    q.start_node(leader);
    let before = q.committed_records(new_leader).await;
    assert!(before.len() >= 3, "{before:?}");
    let deadline = Instant::now() + Duration::from_secs(10);
    // (A restarted node refuses connections until it has bound its port.)
    while q.try_committed_records(leader).await.map_or(0, |r| r.len()) < before.len() {
        assert!(
            Instant::now() < deadline,
            "node {leader} did not catch up\n{}",
            q.logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Restart all three (kill -9): every committed record survives, identically everywhere.
    for id in q.ids() {
        q.kill(id);
    }
    for id in q.ids() {
        q.start_node(id);
    }
    let leader = q.wait_leader(Duration::from_secs(5)).await;
    // A new leader learns the commit index when the first entry of its term commits (Raft
    // §5.4.2; a restarted node's stored commit index may be older): reads stop there until
    // then.
    let deadline = Instant::now() + Duration::from_secs(5);
    let after = loop {
        let after = q.committed_records(leader).await;
        if after.len() >= before.len() || Instant::now() > deadline {
            break after;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(
        cluster_id_seen_by(&q, leader).await,
        cluster_id,
        "cluster id changed on restart"
    );
    assert!(
        after.len() >= before.len(),
        "leader {leader} reads {} of {} committed records 5 s after the restart\n{}",
        after.len(),
        before.len(),
        q.logs()
    );
    assert_eq!(
        &after[..before.len()],
        &before[..],
        "committed records changed across restart"
    );
    for id in q.ids() {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let mine = q.try_committed_records(id).await.unwrap_or_default();
            if mine.len() >= before.len() {
                assert_eq!(&mine[..before.len()], &before[..], "node {id} differs");
                break;
            }
            assert!(
                Instant::now() < deadline,
                "node {id} did not recover\n{}",
                q.logs()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

#[test]
fn bad_config_fails_at_start_with_one_line_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        let out = std::process::Command::new(keel_tests::process::controller_bin())
            .args(args)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?} started");
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err.lines().count(), 1, "not one line: {err}");
        err
    };
    let d = dir.path().to_str().unwrap();
    let cfg = dir.path().join("c.toml");
    std::fs::write(&cfg, "node_id = 1\nnode_idd = 2\n").unwrap();
    assert!(run(&["--config", cfg.to_str().unwrap()]).contains("node_idd"));
    let e = run(&[
        "--node-id",
        "1",
        "--controller-quorum-voters",
        "1@nohost",
        "--metadata-log-dir",
        d,
    ]);
    assert!(e.contains("controller_quorum_voters"), "{e}");
    // Topic defaults and the segment size out of range; a negative value after a space is the flag's value, not
    // another flag.
    for (flag, value, want) in [
        (
            "--num-partitions",
            "0",
            "num_partitions: 0 is not in 1..=9982",
        ),
        (
            "--default-replication-factor",
            "-1",
            "default_replication_factor: -1 is not in 1..=32767",
        ),
        (
            "--metadata-log-segment-bytes",
            "100",
            "metadata_log_segment_bytes: 100 is not in 4096..=1073741824",
        ),
    ] {
        let e = run(&[
            "--node-id",
            "1",
            "--controller-quorum-voters",
            "1@127.0.0.1:1",
            "--metadata-log-dir",
            d,
            flag,
            value,
        ]);
        assert!(e.contains(want), "{flag} {value}: {e}");
    }
    // Port in use.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let voters = format!("1@127.0.0.1:{port}");
    let e = run(&[
        "--node-id",
        "1",
        "--controller-quorum-voters",
        &voters,
        "--listeners",
        &format!("127.0.0.1:{port}"),
        "--metadata-log-dir",
        d,
    ]);
    assert!(e.contains("listeners") && e.contains("in use"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_log_pages_never_repeat_or_skip_records() {
    let q = Quorum::start(3);
    let hb = Duration::from_millis(200);
    let _b1 = keel_tests::quorum::FakeBroker::start(&q, 1, "", hb).await;
    // One entry with 12 PartitionRecords, then more entries.
    let create = |name: &str, partitions: i32| keel_proto::controller::CreateTopicsRequest {
        topics: vec![keel_proto::controller::CreatableTopic {
            name: name.into(),
            num_partitions: partitions,
            replication_factor: 1,
            ..Default::default()
        }],
        validate_only: false,
    };
    for (name, n) in [("wide", 12), ("a", 3), ("b", 2)] {
        keel_tests::quorum::on_leader(&q, Duration::from_secs(10), |mut c| {
            let req = create(name, n);
            async move {
                let r = c.create_topics(req).await.ok()?.into_inner();
                keel_tests::quorum::ok(&r.topics.first()?.error).then_some(())
            }
        })
        .await;
    }
    let leader = q.wait_leader(Duration::from_secs(5)).await;
    let mut c = q.client(leader).await;
    let read = |from: i64, to: i64, max: u32| keel_proto::controller::ReadMetadataLogRequest {
        from_offset: from,
        to_offset: to,
        record_types: vec!["PartitionRecord".into()],
        max_records: max,
        ..Default::default()
    };
    let all = c
        .read_metadata_log(read(0, 0, 0))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(all.records.len(), 17);
    // Page with max_records = 5: every record exactly once, in order.
    let mut paged = Vec::new();
    let mut from = 0;
    for _ in 0..100 {
        let r = c
            .read_metadata_log(read(from, all.commit_index + 1, 5))
            .await
            .unwrap()
            .into_inner();
        paged.extend(r.records.into_iter().map(|r| (r.offset, r.index_in_batch)));
        if r.next_offset > all.commit_index {
            break;
        }
        assert!(r.next_offset > from, "no progress at {from}");
        from = r.next_offset;
    }
    let expected: Vec<_> = all
        .records
        .iter()
        .map(|r| (r.offset, r.index_in_batch))
        .collect();
    assert_eq!(paged, expected);
}

/// Registrations decided into one entry get the entry's offset as their epoch, in the active
/// controller's working state too: heartbeats with the epochs from the replies are accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_registrations_get_epochs_their_heartbeats_match() {
    let q = Quorum::start(3);
    let leader = q.wait_leader(Duration::from_secs(5)).await;
    for round in 0..3 {
        let mut tasks = Vec::new();
        for b in 0..8 {
            let c = q.client(leader).await;
            let id = round * 10 + b + 1;
            tasks.push(tokio::spawn(async move {
                let mut c = c;
                let r = c
                    .register_broker(register_request(id))
                    .await
                    .unwrap()
                    .into_inner();
                assert!(r.error.is_none(), "{:?}", r.error);
                (id, r.broker_epoch)
            }));
        }
        let mut epochs = Vec::new();
        for t in tasks {
            epochs.push(t.await.unwrap());
        }
        let mut c = q.client(leader).await;
        for (id, epoch) in epochs {
            let r = c
                .broker_heartbeat(keel_proto::controller::BrokerHeartbeatRequest {
                    broker_id: id,
                    broker_epoch: epoch,
                    current_metadata_offset: epoch,
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner();
            assert!(
                keel_tests::quorum::ok(&r.error),
                "broker {id} epoch {epoch}: {:?}",
                r.error
            );
        }
    }
}

/// DescribeQuorum on the leader reports, per voter, when it last answered replication
/// (LastFetchTimestamp) and was last caught up (LastCaughtUpTimestamp): recent for live
/// followers, frozen for a killed one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_quorum_reports_when_each_voter_last_fetched_and_caught_up() {
    let mut q = Quorum::start(3);
    let leader = q.wait_leader(Duration::from_secs(20)).await;
    let describe = |q: &Quorum| {
        let q_addr = q.addr(leader);
        async move {
            let ch = tonic::transport::Channel::from_shared(format!("http://{q_addr}"))
                .unwrap()
                .connect_lazy();
            keel_proto::controller::controller_service_client::ControllerServiceClient::new(ch)
                .describe_quorum(keel_proto::controller::DescribeQuorumRequest {})
                .await
                .unwrap()
                .into_inner()
        }
    };
    // Every voter fresh (the leader commits a NoOpRecord every 500 ms, so live followers
    // answer appends at least that often).
    let start = Instant::now();
    loop {
        let r = describe(&q).await;
        assert!(r.error.is_none(), "{r:?}");
        let now = keel_tests::data::now_ms();
        let fresh = |t: i64| t > 0 && now - t < 2_000 && t <= now + 1_000;
        if r.voters.len() == 3
            && r.voters
                .iter()
                .all(|v| fresh(v.last_fetch_timestamp_ms) && fresh(v.last_caught_up_timestamp_ms))
        {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "{r:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A killed follower's times stop; the other follower's keep advancing.
    let dead = q.ids().into_iter().find(|i| *i != leader).unwrap();
    let live = q
        .ids()
        .into_iter()
        .find(|i| *i != leader && *i != dead)
        .unwrap();
    q.kill(dead);
    let killed_at = keel_tests::data::now_ms();
    let start = Instant::now();
    loop {
        let r = describe(&q).await;
        let v = |id: u64| {
            r.voters
                .iter()
                .find(|v| v.replica_id == id as i32)
                .unwrap()
                .clone()
        };
        let (d, l) = (v(dead), v(live));
        // Replies the dead node sent just before SIGKILL may still be read a moment after.
        let dead_by = killed_at + 100;
        assert!(d.last_fetch_timestamp_ms <= dead_by, "{d:?}");
        if l.last_fetch_timestamp_ms > killed_at + 1_000
            && l.last_caught_up_timestamp_ms > killed_at + 1_000
        {
            assert!(d.last_caught_up_timestamp_ms <= dead_by, "{d:?}");
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "{r:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The cluster id and term controller `id` reports once it knows both (at most 10 s).
async fn cluster_and_term(q: &Quorum, id: u64) -> (String, i64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let cluster = cluster_id_seen_by(q, id).await;
        let r = q
            .client(id)
            .await
            .describe_quorum(keel_proto::controller::DescribeQuorumRequest {})
            .await
            .unwrap()
            .into_inner();
        if !cluster.is_empty() && r.leader_id >= 0 {
            return (cluster, r.term);
        }
        assert!(Instant::now() < deadline, "no cluster id\n{}", q.logs());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A controller of another quorum that reaches this one's addresses (a stale process on a
/// reused port, a wrong voters string) is refused: requests carry the node id they are for
/// and the sender's cluster id (KIP-595's clusterId check, INCONSISTENT_CLUSTER_ID), and this
/// quorum's term and writes are untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raft_requests_from_another_quorum_are_refused() {
    let a = Quorum::start(3);
    let mut b = Quorum::start(3);
    let leader_a = a.wait_leader(Duration::from_secs(5)).await;
    b.wait_leader(Duration::from_secs(5)).await;
    let (cluster_a, term_a) = cluster_and_term(&a, leader_a).await;
    let (cluster_b, _) = cluster_and_term(&b, 1).await;
    assert_ne!(cluster_a, cluster_b);

    // b's node 1 comes back believing its node 2 lives at a's node 2 and its node 3 at a's
    // node 1; the rest of b is down, so it campaigns (in ever higher terms) at those addresses.
    for id in b.ids() {
        b.kill(id);
    }
    b.voter_overrides.insert(
        1,
        format!("1@{},2@{},3@{}", b.addr(1), a.addr(2), a.addr(1)),
    );
    b.start_node(1);
    let deadline = Instant::now() + Duration::from_secs(10);
    let wrong_cluster = format!(
        "INCONSISTENT_CLUSTER_ID: raft request from cluster {cluster_b} reached controller 2 of cluster {cluster_a}"
    );
    let wrong_node = "raft request for controller 3 reached controller 1";
    while !(a.log_of(2).contains(&wrong_cluster) && a.log_of(1).contains(wrong_node)) {
        assert!(
            Instant::now() < deadline,
            "no refusal seen\n{}\n{}",
            a.logs(),
            b.log_of(1)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Quorum a kept its leader and term, and still commits.
    let (_, term_now) = cluster_and_term(&a, leader_a).await;
    assert_eq!(term_now, term_a, "quorum a changed term\n{}", a.logs());
    let (_, at) = register_until_ok(&a, 1, Duration::from_secs(3)).await;
    assert_eq!(at, leader_a);
}

/// DescribeQuorum lists the brokers as observers (Kafka's `kafka-metadata-quorum` does) with
/// the offset they last reported and their last heartbeat; a voter that has acknowledged
/// nothing to the current leader (it was down through the election) has an unknown (-1)
/// position, not "index 0".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_quorum_lists_brokers_as_observers_and_an_unreached_voter_as_unknown() {
    let mut q = Quorum::start(3);
    let first = q.wait_leader(Duration::from_secs(20)).await;
    let broker = keel_tests::quorum::FakeBroker::start(&q, 1, "", Duration::from_millis(200)).await;
    let down = q.ids().into_iter().find(|i| *i != first).unwrap();
    q.kill(down);
    // A new leader elected while `down` is down: restart the old leader.
    q.kill(first);
    q.start_node(first);
    let leader = keel_tests::wait::wait_for(
        "a leader without the downed voter",
        Duration::from_secs(20),
        || q.logs(),
        || async {
            let l = q.wait_leader(Duration::from_secs(20)).await;
            let r = q
                .client(l)
                .await
                .describe_quorum(keel_proto::controller::DescribeQuorumRequest {})
                .await
                .ok()?
                .into_inner();
            let observed = r.observers.iter().find(|o| o.replica_id == 1)?;
            (r.error.is_none() && observed.last_log_index >= 0).then_some((l, r))
        },
    )
    .await;
    let (l, r) = leader;
    assert_ne!(l, down);
    let d = r
        .voters
        .iter()
        .find(|v| v.replica_id == down as i32)
        .unwrap();
    assert_eq!((d.last_log_index, d.lag), (-1, -1), "{r:#?}");
    assert_eq!(r.observers.len(), 1, "{r:#?}");
    let o = &r.observers[0];
    assert_eq!(o.address, "127.0.0.1:29093");
    assert!(!o.is_leader);
    assert!(o.lag >= 0 && o.last_fetch_timestamp_ms > 0, "{o:?}");
    drop(broker);
}

/// The live metadata batches (at or beyond the commit index the item reports; Raft's blank
/// and membership entries, which carry no records and no append time, left out) of
/// controller `id`'s FetchMetadata stream from offset 1, until `n` of them, each with the
/// wall-clock time it arrived (ms) and the standing the controller reported.
async fn live_batches(
    q: &Quorum,
    id: u64,
    n: usize,
) -> Vec<(keel_proto::controller::CommittedBatch, i64, i32)> {
    use keel_proto::controller::FetchMetadataRequest;
    use keel_proto::controller::fetch_metadata_item::Item;
    let mut stream = q
        .client(id)
        .await
        .fetch_metadata(FetchMetadataRequest {
            from_offset: 1,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let mut out = Vec::new();
    while out.len() < n {
        let item = tokio::time::timeout(Duration::from_secs(10), stream.message())
            .await
            .expect("an item within 10 s (NoOps every 500 ms)")
            .unwrap()
            .expect("the stream stays open");
        let arrived = keel_tests::data::now_ms();
        let role = item.source.as_ref().map_or(0, |s| s.role);
        if let Some(Item::Batch(b)) = item.item
            && b.offset >= item.commit_index
            && b.append_timestamp_ms > 0
        {
            out.push((b, arrived, role));
        }
    }
    out
}

/// FetchMetadata carries each entry's commit time from the active controller only, for the
/// entries of its own term (issue #26: brokers measure metadata propagation from the commit;
/// a follower learns of a commit a replication round later and sends -1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_active_controller_sends_the_commit_times_of_its_entries() {
    use keel_proto::controller::ReadSourceRole;
    let q = Quorum::start(3);
    let leader = q.wait_leader(Duration::from_secs(20)).await;
    let (_, term) = cluster_and_term(&q, leader).await;
    let follower = q.ids().into_iter().find(|&i| i != leader).unwrap();

    let from_leader = live_batches(&q, leader, 3).await;
    for (b, arrived, role) in &from_leader {
        assert_eq!(*role, ReadSourceRole::Active as i32, "{b:?}\n{}", q.logs());
        assert_eq!(b.term, term, "one term throughout: {b:?}");
        // Committed after its append, before it arrived here (one machine, one clock).
        assert!(
            b.append_timestamp_ms <= b.commit_timestamp_ms && b.commit_timestamp_ms <= *arrived,
            "append {} <= commit {} <= arrival {arrived}: {b:?}",
            b.append_timestamp_ms,
            b.commit_timestamp_ms
        );
    }
    for (b, _, role) in live_batches(&q, follower, 3).await {
        assert_eq!(role, ReadSourceRole::Follower as i32, "{b:?}");
        assert_eq!(b.commit_timestamp_ms, -1, "a follower sends none: {b:?}");
    }
}
