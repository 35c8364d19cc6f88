//! Partition reassignment (KIP-455) on a running cluster (in-process, real gRPC, data on
//! disk): a partition moved from brokers 1,2 to 2,3 keeps every acknowledged record, its
//! leader moves off the removed broker, the move completes in the metadata log once broker 3
//! is in the ISR, and broker 1 deletes its copy; bad requests get Kafka's codes and change
//! nothing; a move that cannot complete (its new broker is down) is cancelled back to the
//! original replicas.

use std::time::Duration;

use keel_client::admin::{Admin, AdminConfig};
use keel_proto::ErrorCode;
use keel_tests::data::{assigned_topic, code, values};
use keel_tests::{Endpoints, InProcessCluster};

const WAIT: Duration = Duration::from_secs(30);

fn admin(c: &InProcessCluster) -> Admin {
    let addrs = c.live_controllers().into_iter().map(|(_, a)| a).collect();
    Admin::new(AdminConfig::new(addrs)).unwrap()
}

/// `(replicas, adding, removing, partition epoch)` of `topic`-0 in the active controller's
/// image.
async fn assignment(a: &Admin, topic: &str) -> (Vec<i32>, Vec<i32>, Vec<i32>, i32) {
    let image = a.metadata_image().await.unwrap();
    let p = &image.topics().get_by_name(topic).unwrap().partitions[&0];
    (
        p.replicas.clone(),
        p.adding_replicas.clone(),
        p.removing_replicas.clone(),
        p.partition_epoch,
    )
}

/// Runs the `keelctl` binary against the cluster's controllers: (exit 0, stdout + stderr).
fn keelctl(c: &InProcessCluster, args: &[&str]) -> (bool, String) {
    let bootstrap: Vec<String> = c.live_controllers().into_iter().map(|(_, a)| a).collect();
    keel_tests::process::keelctl(&bootstrap.join(","), args)
}

/// The error code of each partition result, in request order.
fn codes(results: &[(String, i32, Option<keel_proto::common::Error>)]) -> Vec<ErrorCode> {
    results
        .iter()
        .map(|(_, _, e)| ErrorCode::from_proto(e.as_ref()).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_moves_keeps_its_records_and_the_removed_broker_deletes_its_copy() {
    let mut c = InProcessCluster::start(3, 3);
    c.wait_unfenced(&[1, 2, 3], WAIT).await;
    c.create_topic(assigned_topic("move", &[&[1, 2]]), WAIT)
        .await;
    c.wait_leader_isr(1, "move", &[1, 2], WAIT).await;
    assert_eq!(
        code(&c.produce(1, "move", -1, &values("v", 0..5)).await),
        ErrorCode::None
    );
    let a = admin(&c);
    let old_copy = c.broker_data_dir(1).join("move-0");
    assert!(old_copy.exists(), "{}", old_copy.display());

    // Bad requests: Kafka's codes, nothing changes.
    let before = assignment(&a, "move").await;
    let bad = [
        ("move".to_string(), 0, Some(vec![2, 9])),
        ("move".to_string(), 0, Some(vec![2, 2])),
        ("nope".to_string(), 0, Some(vec![2, 3])),
        ("move".to_string(), 7, Some(vec![2, 3])),
    ];
    for (m, want) in bad.iter().zip([
        ErrorCode::InvalidReplicaAssignment,
        ErrorCode::InvalidReplicaAssignment,
        ErrorCode::UnknownTopicOrPartition,
        ErrorCode::UnknownTopicOrPartition,
    ]) {
        let r = a
            .alter_partition_reassignments(std::slice::from_ref(m))
            .await
            .unwrap();
        assert_eq!(codes(&r), [want], "{m:?}: {r:?}");
    }
    let r = a
        .alter_partition_reassignments(&[
            ("move".into(), 0, Some(vec![])),
            ("move".into(), 0, None),
        ])
        .await
        .unwrap();
    assert_eq!(
        codes(&r),
        [
            ErrorCode::InvalidReplicaAssignment,
            ErrorCode::InvalidRequest
        ]
    );
    let r = a
        .alter_partition_reassignments(&[("move".into(), 0, None)])
        .await
        .unwrap();
    assert_eq!(codes(&r), [ErrorCode::NoReassignmentInProgress]);
    // A deleted topic: KRaft removes it at once (no "being deleted" state), so a move of it is
    // UNKNOWN_TOPIC_OR_PARTITION, as in Kafka's ReplicationControlManager.
    c.create_topic(assigned_topic("gone", &[&[1, 2]]), WAIT)
        .await;
    a.delete_topic("gone").await.unwrap();
    let r = a
        .alter_partition_reassignments(&[("gone".into(), 0, Some(vec![2, 3]))])
        .await
        .unwrap();
    assert_eq!(codes(&r), [ErrorCode::UnknownTopicOrPartition]);
    assert_eq!(
        assignment(&a, "move").await,
        before,
        "a refused request changed the partition"
    );

    // 1,2 -> 2,3: broker 3 catches up, joins the ISR, and the move completes with the leader
    // moved off broker 1.
    let r = a
        .alter_partition_reassignments(&[("move".into(), 0, Some(vec![2, 3]))])
        .await
        .unwrap();
    assert_eq!(codes(&r), [ErrorCode::None]);
    c.wait_for("the move of move-0 completed", WAIT, || async {
        let (replicas, adding, removing, _) = assignment(&a, "move").await;
        (replicas == [2, 3] && adding.is_empty() && removing.is_empty()).then_some(())
    })
    .await;
    assert!(
        a.list_partition_reassignments(&[])
            .await
            .unwrap()
            .is_empty()
    );
    c.wait_leader_isr(2, "move", &[2, 3], WAIT).await;
    // A new leader's HW moves once its followers fetched in its epoch (its own follower HW
    // may still be behind the old leader's): wait for it rather than read at once.
    c.wait_for("broker 2's HW reached 5", WAIT, || async {
        (c.replica(2, "move", 0).await?.high_watermark == 5).then_some(())
    })
    .await;
    let (recs, _, hw) = c.consume(2, "move", 0, 0).await;
    assert_eq!(hw, 5);
    assert_eq!(
        recs.into_iter().map(|(_, v)| v).collect::<Vec<_>>(),
        values("v", 0..5)
    );
    c.wait_for("broker 1 deleted its copy of move-0", WAIT, || async {
        (!old_copy.exists()).then_some(())
    })
    .await;

    // A move that cannot complete (broker 1 is down, so it never joins the ISR) is listed,
    // and cancelled back to the original replicas.
    c.kill_broker(1);
    let r = a
        .alter_partition_reassignments(&[("move".into(), 0, Some(vec![1, 2, 3]))])
        .await
        .unwrap();
    assert_eq!(codes(&r), [ErrorCode::None]);
    let (replicas, adding, removing, _) = assignment(&a, "move").await;
    assert_eq!(
        (replicas, adding, removing),
        (vec![1, 2, 3], vec![1], vec![])
    );
    let moving = a.list_partition_reassignments(&[]).await.unwrap();
    assert_eq!(moving.len(), 1);
    assert_eq!(moving[0].partitions[0].adding_replicas, [1]);
    // keelctl --execute of a plan naming the moving partition: refused without --additional
    // (Kafka's tool), nothing changes.
    let plan = c.broker_data_dir(2).with_file_name("again.json");
    std::fs::write(
        &plan,
        r#"{"version": 1, "partitions": [{"topic": "move", "partition": 0, "replicas": [3, 2]}]}"#,
    )
    .unwrap();
    let (ok, out) = keelctl(
        &c,
        &["partition", "reassign", "--execute", plan.to_str().unwrap()],
    );
    assert!(
        !ok && out.contains("existing reassignment of move-0") && out.contains("--additional"),
        "{out}"
    );
    let (replicas, adding, _, _) = assignment(&a, "move").await;
    assert_eq!((replicas, adding), (vec![1, 2, 3], vec![1]));
    // A plan naming an unregistered broker: refused by keelctl before anything changes, the
    // throttles included (Kafka's tool checks the broker ids first).
    let bad = c.broker_data_dir(2).with_file_name("bad.json");
    std::fs::write(
        &bad,
        r#"{"version": 1, "partitions": [{"topic": "move", "partition": 0, "replicas": [2, 9]}]}"#,
    )
    .unwrap();
    let (ok, out) = keelctl(
        &c,
        &[
            "partition",
            "reassign",
            "--execute",
            bad.to_str().unwrap(),
            "--additional",
            "--throttle",
            "1000",
        ],
    );
    assert!(!ok && out.contains("broker 9 is not registered"), "{out}");
    let image = a.metadata_image().await.unwrap();
    let topic = keel_metadata_log::ConfigResource::Topic("move".into());
    let broker2 = keel_metadata_log::ConfigResource::Broker(2);
    assert_eq!(
        image.config(&topic, "follower.replication.throttled.replicas"),
        None
    );
    assert_eq!(
        image.config(&broker2, "leader.replication.throttled.rate"),
        None
    );
    // keelctl --cancel cancels the move and removes the throttles (as Kafka's --cancel).
    let set = |k: &str, v: &str| (k.to_string(), v.to_string());
    use keel_client::admin::ConfigTarget;
    a.alter_configs(
        &ConfigTarget::Topic("move".into()),
        &[set("follower.replication.throttled.replicas", "0:1")],
        &[],
        false,
    )
    .await
    .unwrap();
    a.alter_configs(
        &ConfigTarget::Broker(2),
        &[set("leader.replication.throttled.rate", "1000")],
        &[],
        false,
    )
    .await
    .unwrap();
    let (ok, out) = keelctl(
        &c,
        &["partition", "reassign", "--cancel", plan.to_str().unwrap()],
    );
    assert!(
        ok && out.contains("Successfully started cancellation of 1 partition(s)")
            && out.contains("Clearing broker-level throttles on brokers [2]")
            && out.contains("Clearing topic-level throttles on topic move"),
        "{out}"
    );
    let image = a.metadata_image().await.unwrap();
    assert_eq!(
        image.config(&topic, "follower.replication.throttled.replicas"),
        None
    );
    assert_eq!(
        image.config(&broker2, "leader.replication.throttled.rate"),
        None
    );
    let (replicas, adding, removing, _) = assignment(&a, "move").await;
    assert_eq!((replicas, adding, removing), (vec![2, 3], vec![], vec![]));
    assert_eq!(
        code(&c.produce(2, "move", -1, &values("w", 0..2)).await),
        ErrorCode::None
    );
}

/// `keelctl broker decommission 4` on a running broker: every partition with a replica on
/// broker 4 moves off it (the replica replaced in place by the least-loaded other broker), the
/// records stay, broker 4 deletes its copies, and keelctl says to stop it before
/// unregistering; once stopped, `keelctl broker unregister 4` removes its registration.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decommissioned_broker_is_emptied_then_unregistered() {
    let mut c = InProcessCluster::start(3, 4);
    c.wait_unfenced(&[1, 2, 3, 4], WAIT).await;
    c.create_topic(assigned_topic("dec", &[&[4, 1], &[1, 2], &[2, 4]]), WAIT)
        .await;
    c.wait_leader_isr(4, "dec", &[1, 4], WAIT).await;
    assert_eq!(
        code(&c.produce(4, "dec", -1, &values("d", 0..5)).await),
        ErrorCode::None
    );
    let bootstrap: Vec<String> = c.live_controllers().into_iter().map(|(_, a)| a).collect();
    let bootstrap = bootstrap.join(",");
    let keelctl = |args: &[&str]| {
        let (ok, text) = keel_tests::process::keelctl(&bootstrap, args);
        assert!(ok, "keelctl {args:?}: {text}");
        text
    };
    let out = keelctl(&["broker", "decommission", "4", "--timeout-secs", "60"]);
    assert!(
        out.contains("moving 2 partition(s) off broker 4")
            && out.contains("stop its process, then run `keelctl broker unregister 4`"),
        "{out}"
    );
    let a = admin(&c);
    let image = a.metadata_image().await.unwrap();
    let t = image.topics().get_by_name("dec").unwrap();
    let replicas: Vec<Vec<i32>> = t.partitions.values().map(|p| p.replicas.clone()).collect();
    assert_eq!(replicas, [vec![3, 1], vec![1, 2], vec![2, 3]]);
    // The records of dec-0 are on its new leader, the first target replica in the ISR.
    c.wait_leader_isr(3, "dec", &[1, 3], WAIT).await;
    c.wait_for("broker 3's HW reached 5", WAIT, || async {
        (c.replica(3, "dec", 0).await?.high_watermark == 5).then_some(())
    })
    .await;
    let (recs, _, hw) = c.consume(3, "dec", 0, 0).await;
    assert_eq!(hw, 5);
    assert_eq!(
        recs.into_iter().map(|(_, v)| v).collect::<Vec<_>>(),
        values("d", 0..5)
    );
    let dir = c.broker_data_dir(4);
    c.wait_for("broker 4 deleted its copies", WAIT, || async {
        (!dir.join("dec-0").exists() && !dir.join("dec-2").exists()).then_some(())
    })
    .await;

    c.kill_broker(4);
    let out = keelctl(&["broker", "unregister", "4"]);
    assert!(out.contains("broker 4 unregistered"), "{out}");
    let r = c.try_describe_cluster().await.unwrap();
    assert!(r.brokers.iter().all(|b| b.broker_id != 4), "{r:?}");
}
