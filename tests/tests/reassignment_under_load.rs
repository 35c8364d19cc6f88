//! Moving data on the real binaries (#25 acceptance): a 4th broker is added and a 12-partition
//! RF 3 topic moves from brokers 1,2,3 onto 2,3,4 with `keelctl partition reassign --execute
//! --throttle` while three idempotent acks=all producers write and a consumer reads; the active
//! controller and then broker 1 (a source of every partition) are killed with SIGKILL in the
//! middle of the move. The move completes; every acknowledged record is read back exactly once;
//! no partition's ISR is ever seen below min.insync.replicas (2); `--verify` removes the
//! throttles; broker 1, restarted, deletes its copies; `keelctl broker decommission 1` moves its
//! last replicas (another topic) away and, once it is stopped, it is unregistered with its data
//! directory emptied of partitions.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use keel_client::admin::{Admin, AdminConfig};
use keel_client::consumer::{Consumer, ConsumerConfig, OffsetReset};
use keel_client::producer::{Producer, ProducerConfig};
use keel_metadata_log::ConfigResource;
use keel_tests::Endpoints;
use keel_tests::data::assigned_topic;
use keel_tests::process::{Cluster, keelctl};

const WAIT: Duration = Duration::from_secs(60);
const TOPIC: &str = "moving";
const PARTITIONS: i32 = 12;
/// Bytes written before the move (the move copies them to broker 4 under the throttle).
const PRELOAD_VALUE_BYTES: usize = 16 * 1024;
const PRELOAD_RECORDS: usize = 1_536; // 24 MiB
/// The throttle of the move, bytes/s: 24 MiB at 4 MiB/s take about 6 s, the time the kills
/// need to land in the middle of the move.
const THROTTLE: u64 = 4 << 20;

fn admin(c: &Cluster) -> Admin {
    let addrs = c.live_controllers().into_iter().map(|(_, a)| a).collect();
    Admin::new(AdminConfig::new(addrs)).unwrap()
}

/// Writes `{prefix}-{n}` values (the value is also the key) until `stop`, at most 64 records
/// unacknowledged; returns the acknowledged values.
async fn produce_until(
    bootstrap: Vec<String>,
    prefix: String,
    stop: Arc<AtomicBool>,
) -> Vec<String> {
    let producer = Producer::new(ProducerConfig::new(bootstrap)).unwrap();
    let mut pending = std::collections::VecDeque::new();
    let mut acked = Vec::new();
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let v = format!("{prefix}-{n:07}");
        n += 1;
        let d = producer.send(TOPIC, Some(v.as_bytes()), v.as_bytes()).await;
        pending.push_back((v, d.expect("queued")));
        if pending.len() >= 64 {
            let (v, d) = pending.pop_front().unwrap();
            match d.await {
                Ok(_) => acked.push(v),
                Err(e) => panic!("{v} failed: {e}"),
            }
        }
        if n.is_multiple_of(16) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    for (v, d) in pending {
        match d.await {
            Ok(_) => acked.push(v),
            Err(e) => eprintln!("{v} failed: {e}"),
        }
    }
    producer.close().await;
    acked
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_topic_moves_onto_a_new_broker_under_load_through_controller_and_broker_kills() {
    let mut c = Cluster::start(3, 3);
    c.wait_unfenced(&[1, 2, 3], WAIT).await;
    let rotations: Vec<Vec<i32>> = (0..PARTITIONS)
        .map(|p| (0..3).map(|i| 1 + (p + i) % 3).collect())
        .collect();
    let refs: Vec<&[i32]> = rotations.iter().map(Vec::as_slice).collect();
    c.create_topic(assigned_topic(TOPIC, &refs), WAIT).await;
    c.set_topic_config(TOPIC, "min.insync.replicas", "2", WAIT)
        .await;
    // A second topic keeps replicas on broker 1 for the decommission at the end.
    c.create_topic(assigned_topic("other", &[&[1, 2], &[3, 1]]), WAIT)
        .await;
    let a = admin(&c);
    c.wait_for("every partition has its full ISR", WAIT, || async {
        let image = a.metadata_image().await.ok()?;
        let t = image.topics().get_by_name(TOPIC)?;
        (t.partitions.len() == PARTITIONS as usize
            && t.partitions
                .values()
                .all(|r| r.isr.len() == 3 && r.leader > 0))
        .then_some(())
    })
    .await;
    let grpc: Vec<String> = (1..=3).map(|b| c.broker_addr(b)).collect();

    // Preload, so that the move has something to copy under the throttle.
    {
        let producer = Producer::new(ProducerConfig::new(grpc.clone())).unwrap();
        let big = vec![b'x'; PRELOAD_VALUE_BYTES];
        let mut ds = Vec::new();
        for i in 0..PRELOAD_RECORDS {
            ds.push(producer.send(TOPIC, None, &big).await.unwrap());
            if i % 64 == 63 {
                for d in ds.drain(..) {
                    d.await.expect("preload acknowledged");
                }
            }
        }
        for d in ds {
            d.await.expect("preload acknowledged");
        }
        producer.close().await;
    }

    // The 4th broker.
    let four = c.add_broker();
    assert_eq!(four, 4);
    c.wait_unfenced(&[1, 2, 3, 4], WAIT).await;

    // Load: three producers, one consumer of every partition from the start, and a watcher of
    // every partition's ISR in the active controller's image.
    let stop = Arc::new(AtomicBool::new(false));
    let producers: Vec<_> = (0..3)
        .map(|k| {
            let (grpc, stop) = (grpc.clone(), stop.clone());
            tokio::spawn(produce_until(grpc, format!("p{k}"), stop))
        })
        .collect();
    let consumed = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let stop_consumer = Arc::new(AtomicBool::new(false));
    let consumer = {
        let (consumed, stop) = (consumed.clone(), stop_consumer.clone());
        let bootstrap = grpc.clone();
        tokio::spawn(async move {
            let mut config = ConsumerConfig::new(bootstrap);
            config.auto_offset_reset = Some(OffsetReset::Earliest);
            let mut cons = Consumer::new(config).unwrap();
            let tps = cons.partitions_of(TOPIC).await.unwrap();
            cons.assign(tps);
            while !stop.load(Ordering::Relaxed) {
                match cons.poll(Duration::from_millis(200)).await {
                    Ok(records) => consumed.lock().unwrap().extend(
                        records
                            .into_iter()
                            .filter_map(|r| r.value)
                            .filter(|v| v.first() == Some(&b'p'))
                            .map(|v| String::from_utf8(v.to_vec()).unwrap()),
                    ),
                    Err(e) => eprintln!("consumer: {e} (retrying)"),
                }
            }
        })
    };
    let lowest_isr = Arc::new(std::sync::Mutex::new(BTreeMap::<i32, usize>::new()));
    let stop_watch = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (lowest, stop) = (lowest_isr.clone(), stop_watch.clone());
        let addrs: Vec<String> = c.live_controllers().into_iter().map(|(_, a)| a).collect();
        tokio::spawn(async move {
            let mut cfg = AdminConfig::new(addrs);
            cfg.request_timeout = Duration::from_secs(2);
            let a = Admin::new(cfg).unwrap();
            while !stop.load(Ordering::Relaxed) {
                if let Ok(image) = a.metadata_image().await
                    && let Some(t) = image.topics().get_by_name(TOPIC)
                {
                    let mut lowest = lowest.lock().unwrap();
                    for (p, reg) in &t.partitions {
                        let e = lowest.entry(*p).or_insert(usize::MAX);
                        *e = (*e).min(reg.isr.len());
                    }
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;

    // The move, throttled.
    let controllers: Vec<String> = c.live_controllers().into_iter().map(|(_, a)| a).collect();
    let bootstrap = controllers.join(",");
    let plan = serde_json::json!({
        "version": 1,
        "partitions": (0..PARTITIONS).map(|p| {
            // Keep the partition's order where it can: its replicas 2 and 3, then 4.
            let mut r: Vec<i32> = rotations[p as usize].iter().copied().filter(|b| *b != 1).collect();
            r.push(4);
            serde_json::json!({"topic": TOPIC, "partition": p, "replicas": r})
        }).collect::<Vec<_>>(),
    });
    let plan_path = c.dir.path().join("plan.json");
    std::fs::write(&plan_path, plan.to_string()).unwrap();
    let plan_arg = plan_path.to_str().unwrap();
    let (ok, out) = keelctl(
        &bootstrap,
        &[
            "partition",
            "reassign",
            "--execute",
            plan_arg,
            "--throttle",
            &THROTTLE.to_string(),
        ],
    );
    assert!(ok, "{out}");
    assert!(
        out.contains("Successfully started reassignment of 12 partition(s)")
            && out.contains("The inter-broker throttle limit was set to 4194304 B/s"),
        "{out}"
    );
    let a = admin(&c);
    let image = a.metadata_image().await.unwrap();
    let res = ConfigResource::Topic(TOPIC.into());
    assert!(
        image
            .config(&res, "follower.replication.throttled.replicas")
            .is_some_and(|v| v.contains(":4")),
        "the added replicas are throttled"
    );
    assert_eq!(
        image.config(
            &ConfigResource::Broker(4),
            "follower.replication.throttled.rate"
        ),
        Some("4194304")
    );

    // Mid-move: SIGKILL the active controller, then broker 1 (a source of every partition).
    tokio::time::sleep(Duration::from_secs(1)).await;
    let moving = a.list_partition_reassignments(&[]).await.unwrap();
    assert!(
        !moving.is_empty(),
        "the throttled move is still in progress after 1 s"
    );
    let active = c.active_controller(WAIT).await;
    c.kill_controller(active);
    let new_active = c.active_controller(WAIT).await;
    assert_ne!(new_active, active);
    tokio::time::sleep(Duration::from_secs(1)).await;
    c.kill_broker(1);

    // The move completes on brokers 2,3,4 without broker 1.
    let live: Vec<String> = c.live_controllers().into_iter().map(|(_, a)| a).collect();
    let bootstrap = live.join(",");
    let started = std::time::Instant::now();
    c.wait_for(
        "the reassignment completed",
        Duration::from_secs(180),
        || {
            let bootstrap = bootstrap.clone();
            async move {
                let (ok, out) =
                    keelctl(&bootstrap, &["partition", "reassign", "--verify", plan_arg]);
                ok.then_some(out)
            }
        },
    )
    .await;
    eprintln!("the move completed {:?} after the kills", started.elapsed());
    let a = admin(&c);
    let image = a.metadata_image().await.unwrap();
    for (p, reg) in &image.topics().get_by_name(TOPIC).unwrap().partitions {
        let want: BTreeSet<i32> = [2, 3, 4].into();
        assert_eq!(
            reg.replicas.iter().copied().collect::<BTreeSet<_>>(),
            want,
            "{p}"
        );
        assert!(reg.adding_replicas.is_empty() && reg.removing_replicas.is_empty());
    }
    // --verify removed the throttles. The removal is committed when keelctl returns, but
    // this fresh admin client reads the image from the first live controller, which may be
    // a follower that learns the commit with the leader's next append (up to one heartbeat
    // later): wait a bounded time for it to show, as any reader of a follower does.
    c.wait_for(
        "the throttles removed by --verify show in the image",
        Duration::from_secs(10),
        || {
            let a = &a;
            let res = &res;
            async move {
                let image = a.metadata_image().await.ok()?;
                let topic = image.config(res, "follower.replication.throttled.replicas");
                let rate = image.config(
                    &ConfigResource::Broker(4),
                    "follower.replication.throttled.rate",
                );
                (topic.is_none() && rate.is_none()).then_some(())
            }
        },
    )
    .await;

    // Stop the load; everything acknowledged is read back exactly once.
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::Relaxed);
    let mut acked = Vec::new();
    for p in producers {
        acked.extend(p.await.unwrap());
    }
    assert!(
        acked.len() > 1_000,
        "only {} records acknowledged",
        acked.len()
    );
    let want: BTreeSet<String> = acked.iter().cloned().collect();
    c.wait_for("the consumer read every acknowledged record", WAIT, || {
        let consumed = consumed.clone();
        let want = want.clone();
        async move {
            let got: BTreeSet<String> = consumed.lock().unwrap().iter().cloned().collect();
            want.is_subset(&got).then_some(())
        }
    })
    .await;
    stop_consumer.store(true, Ordering::Relaxed);
    consumer.await.unwrap();
    stop_watch.store(true, Ordering::Relaxed);
    watcher.await.unwrap();
    let consumed = consumed.lock().unwrap().clone();
    let mut seen = BTreeSet::new();
    let twice: Vec<&String> = consumed.iter().filter(|v| !seen.insert(*v)).collect();
    assert!(
        twice.is_empty(),
        "read twice: {:?}",
        &twice[..twice.len().min(10)]
    );
    let lowest = lowest_isr.lock().unwrap().clone();
    assert_eq!(lowest.len(), PARTITIONS as usize, "{lowest:?}");
    assert!(
        lowest.values().all(|n| *n >= 2),
        "an ISR below min.insync.replicas: {lowest:?}"
    );
    eprintln!(
        "{} records acknowledged, {} read; lowest ISR sizes {lowest:?}",
        acked.len(),
        consumed.len()
    );

    // Broker 1 comes back and deletes its copies of the moved partitions.
    c.start_broker(1);
    c.wait_unfenced(&[1, 2, 3, 4], WAIT).await;
    let dir = c.broker_data_dir(1);
    c.wait_for("broker 1 deleted its copies", WAIT, || async {
        (0..PARTITIONS)
            .all(|p| !dir.join(format!("{TOPIC}-{p}")).exists())
            .then_some(())
    })
    .await;

    // Decommission broker 1: its last replicas (of `other`) move away; stopped, it is
    // unregistered and holds no partition.
    let (ok, out) = keelctl(
        &bootstrap,
        &["broker", "decommission", "1", "--timeout-secs", "60"],
    );
    assert!(ok, "{out}");
    assert!(
        out.contains("moving 2 partition(s) off broker 1")
            && out.contains("then run `keelctl broker unregister 1`"),
        "{out}"
    );
    c.wait_for("broker 1 deleted every copy", WAIT, || async {
        let partitions = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(Result::ok)
            .filter(|e| e.path().is_dir())
            .filter(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                name.rsplit_once('-')
                    .is_some_and(|(_, n)| n.parse::<u32>().is_ok())
            })
            .count();
        (partitions == 0).then_some(())
    })
    .await;
    c.kill_broker(1);
    let (ok, out) = keelctl(&bootstrap, &["broker", "unregister", "1"]);
    assert!(ok && out.contains("broker 1 unregistered"), "{out}");
}
