//! Under a continuous stream of topic creations and ISR changes, one controller at a time is
//! SIGKILLed and restarted, ten times. Afterwards every controller has the same image digest at
//! the same applied offset, and every acknowledged write is in the metadata.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use keel_proto::controller::{
    AlterPartitionPartition, AlterPartitionRequest, AlterPartitionTopic, BrokerState,
    CreatableReplicaAssignment, CreatableTopic, CreateTopicsRequest, DescribeClusterRequest,
};
use keel_tests::quorum::*;

#[derive(Debug, Default)]
struct Acked {
    topics: Vec<String>,
    /// (topic, ISR, partition epoch) of acknowledged ISR changes.
    isr_changes: Vec<(String, Vec<i32>, i32)>,
}

async fn writer(clients: Clients, stop: Arc<AtomicBool>) -> Acked {
    let mut acked = Acked::default();
    let mut n = 0;
    while !stop.load(Ordering::SeqCst) {
        let name = format!("t{n}");
        n += 1;
        let topic = CreatableTopic {
            name: name.clone(),
            num_partitions: -1,
            replication_factor: -1,
            assignments: vec![CreatableReplicaAssignment {
                partition_index: 0,
                broker_ids: vec![1, 2, 3],
            }],
            configs: vec![],
        };
        let created = clients
            .on_leader(Duration::from_secs(5), |mut c| {
                let req = CreateTopicsRequest {
                    topics: vec![topic.clone()],
                    validate_only: false,
                };
                async move {
                    let r = c.create_topics(req).await.ok()?.into_inner();
                    let t = r.topics.first()?;
                    if ok(&t.error) {
                        Some(true)
                    } else if t.error.as_ref().unwrap().name == "TOPIC_ALREADY_EXISTS" {
                        // An earlier attempt committed but its answer was lost: not acked.
                        Some(false)
                    } else {
                        None
                    }
                }
            })
            .await;
        if created == Some(true) {
            acked.topics.push(name.clone());
        }
        // Shrink then expand the ISR (leader 1 stays: brokers keep heartbeating).
        for isr in [vec![1, 2], vec![1, 2, 3]] {
            let req = AlterPartitionRequest {
                broker_id: -1,
                broker_epoch: -1,
                topics: vec![AlterPartitionTopic {
                    topic_name: name.clone(),
                    partitions: vec![AlterPartitionPartition {
                        partition_index: 0,
                        leader_epoch: -1,
                        partition_epoch: -1,
                        new_isr_with_epochs: isr
                            .iter()
                            .map(|b| BrokerState {
                                broker_id: *b,
                                broker_epoch: -1,
                            })
                            .collect(),
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
            };
            let r = clients
                .on_leader(Duration::from_secs(5), |mut c| {
                    let req = req.clone();
                    async move {
                        let r = c.alter_partition(req).await.ok()?.into_inner();
                        let p = r.topics.first()?.partitions.first()?.clone();
                        ok(&p.error).then_some(p)
                    }
                })
                .await;
            if let Some(p) = r {
                acked
                    .isr_changes
                    .push((name.clone(), p.isr, p.partition_epoch));
            }
        }
    }
    acked
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_sigkill_restarts_under_load_keep_controllers_identical() {
    sigkill_restarts_under_load(&[]).await;
}

/// The same on the sled Raft log engine (`metadata_log_engine = "sled"`, #24).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_sigkill_restarts_under_load_keep_controllers_identical_on_sled() {
    sigkill_restarts_under_load(&["--metadata-log-engine", "sled"]).await;
}

async fn sigkill_restarts_under_load(engine: &[&str]) {
    // Snapshots every 40 entries, so restarted controllers also recover from snapshots, get
    // snapshots installed, and FetchMetadata serves a snapshot (the log below it is purged).
    let mut args = vec!["--metadata-snapshot-max-entries", "40"];
    args.extend_from_slice(engine);
    let mut q = Quorum::start_with(3, &args);
    let hb = Duration::from_millis(200);
    let _brokers = [
        FakeBroker::start(&q, 1, "", hb).await,
        FakeBroker::start(&q, 2, "", hb).await,
        FakeBroker::start(&q, 3, "", hb).await,
    ];
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let leader = q.wait_leader(Duration::from_secs(5)).await;
        if fetch_image(&q, leader)
            .await
            .unwrap()
            .brokers()
            .values()
            .all(|b| !b.fenced)
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "brokers not unfenced\n{}",
            q.logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let stop = Arc::new(AtomicBool::new(false));
    let writer = tokio::spawn(writer(Clients::new(&q), stop.clone()));
    // The fault schedule: seeded, printed, replayable with KEEL_TEST_SEED.
    let mut rng = keel_tests::rng::TestRng::from_env("kill schedule");
    for round in 0..10u64 {
        // Writes run 200-400 ms between kills; a killed node stays down 100-300 ms.
        tokio::time::sleep(
            Duration::from_millis(200) + rng.duration_up_to(Duration::from_millis(200)),
        )
        .await;
        // Every third round kills the active controller, the others a random follower.
        let leader = q.wait_leader(Duration::from_secs(10)).await;
        let followers: Vec<u64> = q.ids().into_iter().filter(|i| *i != leader).collect();
        let victim = if round % 3 == 0 {
            leader
        } else {
            *rng.pick(&followers)
        };
        q.kill(victim);
        tokio::time::sleep(
            Duration::from_millis(100) + rng.duration_up_to(Duration::from_millis(200)),
        )
        .await;
        q.start_node(victim);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::SeqCst);
    let acked = writer.await.unwrap();
    eprintln!(
        "acknowledged: {} topic creations, {} ISR changes",
        acked.topics.len(),
        acked.isr_changes.len()
    );
    assert!(
        acked.topics.len() >= 10,
        "too little load: {acked:?}\n{}",
        q.logs()
    );

    // All three reach the same offset with the same digest.
    let clients: Vec<_> = clients_of(&q).await;
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let mut seen = Vec::new();
        for c in &clients {
            let mut c = c.clone();
            if let Ok(r) = c
                .describe_cluster(DescribeClusterRequest {
                    include_image_digest: true,
                    ..Default::default()
                })
                .await
            {
                let r = r.into_inner();
                seen.push((r.metadata_offset, r.image_digest));
            }
        }
        if seen.len() == 3 && seen.iter().all(|s| s.0 == seen[0].0) {
            assert!(
                seen.iter().all(|s| s.1 == seen[0].1),
                "digests differ at offset {}: {seen:?}",
                seen[0].0
            );
            eprintln!(
                "all controllers at offset {} with digest {}",
                seen[0].0, seen[0].1
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "controllers never met at one offset: {seen:?}\n{}",
            q.logs()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    let snapshots: usize = q
        .ids()
        .into_iter()
        .map(|id| std::fs::read_dir(q.data_dir(id).join("snapshots")).map_or(0, |d| d.count()))
        .sum();
    assert!(
        snapshots >= 3,
        "expected snapshot files on every controller, found {snapshots}"
    );

    // No acknowledged write is missing.
    let leader = q.wait_leader(Duration::from_secs(5)).await;
    let image = fetch_image(&q, leader).await.unwrap();
    image.check_invariants().unwrap();
    for t in &acked.topics {
        assert!(
            image.topics().get_by_name(t).is_some(),
            "acknowledged topic {t} missing"
        );
    }
    for (t, isr, epoch) in &acked.isr_changes {
        let p = image
            .topics()
            .get_by_name(t)
            .unwrap_or_else(|| panic!("topic {t} of an acknowledged ISR change missing"));
        let p = p.partitions.get(&0).unwrap();
        assert!(
            p.partition_epoch >= *epoch,
            "{t}: acknowledged ISR {isr:?} at epoch {epoch}, image has epoch {}",
            p.partition_epoch
        );
    }
}

async fn clients_of(
    q: &Quorum,
) -> Vec<
    keel_proto::controller::controller_service_client::ControllerServiceClient<
        tonic::transport::Channel,
    >,
> {
    let mut v = Vec::new();
    for id in q.ids() {
        v.push(q.client(id).await);
    }
    v
}

/// The term a controller reports in DescribeQuorum (`None` while it has no leader).
async fn term_seen_by(q: &Quorum, id: u64) -> Option<(i32, i64)> {
    let mut c = q.client(id).await;
    let r = c
        .describe_quorum(keel_proto::controller::DescribeQuorumRequest {})
        .await
        .ok()?
        .into_inner();
    (r.error.is_none() && r.leader_id >= 0).then_some((r.leader_id, r.term))
}

/// A leader killed and started again at once does not lead again in its old term: it might
/// have lost the unsynced tail of its log after sending it to the followers, and writing
/// other entries at their (term, index) would split the logs for good (a break-it run saw
/// it with a torn tail). A new term comes from an election, which only a log as up to date
/// as the followers' wins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_restarted_at_once_does_not_resume_its_term() {
    let mut q = Quorum::start(3);
    let leader = q.wait_leader(Duration::from_secs(10)).await;
    let (_, term) = term_seen_by(&q, leader).await.expect("leader answers");
    q.kill(leader);
    q.start_node(leader);
    let start = Instant::now();
    let (new_leader, new_term) = loop {
        if let Some(seen) = term_seen_by(&q, leader).await
            && seen.1 > term
        {
            break seen;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no leader in a term after {term}\n{}",
            q.logs()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    eprintln!("leader {leader} in term {term} killed; now leader {new_leader} in term {new_term}");
    assert!(
        q.log_of(leader).contains("starts as a follower"),
        "{}",
        q.log_of(leader)
    );
}
