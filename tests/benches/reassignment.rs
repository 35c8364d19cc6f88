//! Reassignment bench (#25, KIP-73 throttles): the real binaries (release build: `cargo build
//! --release --workspace --bins` first) on loopback, 3 controllers and 4 brokers; two topics
//! of 12 partitions, replication factor 3 on brokers 1,2,3, min.insync.replicas 2, each
//! preloaded with [`preload_mib`] MiB. Prints one table and the target checks.
//!
//! Rows, each with an open-loop idempotent acks=all producer writing [`RATE`] 1 KiB records
//! per second to the topic being moved (latency from the scheduled send time to the
//! acknowledgement, so a stall counts against every record behind it):
//! - `no move`: [`QUIET_SECONDS`] s of the load alone;
//! - `move, throttle 10 MiB/s`: `keelctl partition reassign --execute --throttle 10485760`
//!   moving the first topic onto brokers 2,3,4, the load running until the move completed;
//!   the time the throttle implies is the bytes broker 4 holds of the topic at the end divided
//!   by the rate (broker 4's follower quota is the bound: it fetches every moved byte);
//! - `move, no throttle`: the same move of the second topic without `--throttle`.
//!
//! Targets (#25): the throttled move takes the time its throttle implies (0.8x to 1.3x), and
//! produce p99 during it stays within 2x the `no move` p99, read over the whole move and over
//! its copying alone (`p99 copying`: records sent from its start to 1 s before it completed,
//! leaving out the leader changes that complete a move off a leader).
//!
//! Run: `cargo bench -p keel-tests --bench reassignment`. `KEEL_BENCH_PRELOAD_MIB` sets each
//! topic's preload (default 96).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use keel_client::admin::{Admin, AdminConfig};
use keel_client::producer::{Producer, ProducerConfig};
use keel_proto::broker::DescribeReplicasRequest;
use keel_proto::controller::{ConfigEntry, CreatableReplicaAssignment, CreatableTopic};
use keel_tests::Endpoints;
use keel_tests::process::{Cluster, Options};
use keel_tests::stats::{ms, percentile};

const PARTITIONS: i32 = 12;
/// Records per second of the load.
const RATE: u64 = 2_000;
const RECORD: usize = 1024;
const QUIET_SECONDS: u64 = 15;
const THROTTLE: u64 = 10 << 20;
const MIB: f64 = 1024.0 * 1024.0;

/// `KEEL_BENCH_PRELOAD_MIB` (default 96); a bad value ends the bench naming it.
fn preload_mib() -> u64 {
    keel_tests::env::parsed_or("KEEL_BENCH_PRELOAD_MIB", 1..=1 << 20, 96)
}

fn keelctl(controllers: &str, args: &[&str]) -> String {
    let (ok, text) = keel_tests::process::keelctl(controllers, args);
    assert!(ok, "keelctl {args:?}: {text}");
    text
}

/// Latencies of the open-loop load while it ran.
struct Load {
    stop: Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<(Vec<(Instant, Duration)>, u64)>,
}

/// Starts [`RATE`] records/s to `topic`.
fn start_load(grpc: Vec<String>, topic: &'static str) -> Load {
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = stop.clone();
    let task = tokio::spawn(async move {
        let mut config = ProducerConfig::new(grpc);
        config.linger_ms = 0;
        // A record not acknowledged within 30 s counts as an error (and ends the row sooner).
        config.request_timeout_ms = 10_000;
        config.delivery_timeout_ms = 30_000;
        let producer = Producer::new(config).unwrap();
        let latencies = Arc::new(Mutex::new(Vec::new()));
        let errors = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let value = vec![b'l'; RECORD];
        let start = Instant::now();
        let mut sent = 0u64;
        let mut acks = Vec::new();
        while !flag.load(std::sync::atomic::Ordering::Relaxed) {
            let due = start.elapsed().as_micros() as u64 * RATE / 1_000_000;
            while sent < due {
                let scheduled = start + Duration::from_micros(sent * 1_000_000 / RATE);
                sent += 1;
                let d = producer.send(topic, None, &value).await.unwrap();
                let (latencies, errors) = (latencies.clone(), errors.clone());
                acks.push(tokio::spawn(async move {
                    match d.await {
                        Ok(_) => latencies
                            .lock()
                            .unwrap()
                            .push((scheduled, scheduled.elapsed())),
                        Err(e) => {
                            let n = errors.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            if n == 0 {
                                eprintln!("{topic}: first failed record: {e}");
                            }
                        }
                    }
                }));
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        for a in acks {
            a.await.unwrap();
        }
        producer.close().await;
        let l = latencies.lock().unwrap().clone();
        (l, errors.load(std::sync::atomic::Ordering::Relaxed))
    });
    Load { stop, task }
}

impl Load {
    async fn finish(self) -> (Vec<(Instant, Duration)>, u64) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.task.await.unwrap()
    }
}

struct Row {
    name: &'static str,
    move_s: Option<f64>,
    copied_mib: Option<f64>,
    implied_s: Option<f64>,
    /// Every acknowledged record's latency, sorted.
    latencies: Vec<Duration>,
    /// Those of records sent while the move copied (from its start to 1 s before it
    /// completed: without the leader changes that complete it), sorted.
    copying: Vec<Duration>,
    errors: u64,
}

/// The sorted latencies of `samples`, and of those scheduled in `[from, to)`.
fn split(
    samples: &[(Instant, Duration)],
    from: Instant,
    to: Instant,
) -> (Vec<Duration>, Vec<Duration>) {
    let mut all: Vec<Duration> = samples.iter().map(|(_, l)| *l).collect();
    let mut within: Vec<Duration> = samples
        .iter()
        .filter(|(at, _)| *at >= from && *at < to)
        .map(|(_, l)| *l)
        .collect();
    all.sort_unstable();
    within.sort_unstable();
    (all, within)
}

/// Bytes broker `id` holds of `topic` (DescribeReplicas `size_bytes`).
async fn bytes_on(c: &Cluster, id: i32, topic: &str) -> u64 {
    let reply = c
        .broker_client(id)
        .describe_replicas(DescribeReplicasRequest::default())
        .await
        .unwrap()
        .into_inner();
    reply
        .partitions
        .iter()
        .filter(|p| p.topic == topic)
        .map(|p| p.size_bytes.max(0) as u64)
        .sum()
}

/// Moves `topic` onto brokers 2,3,4 under the load; returns the row.
async fn move_row(
    c: &Cluster,
    grpc: &[String],
    name: &'static str,
    topic: &'static str,
    throttle: Option<u64>,
) -> Row {
    let controllers: Vec<String> = c.live_controllers().into_iter().map(|(_, a)| a).collect();
    let bootstrap = controllers.join(",");
    let plan = format!(
        "{{\"version\":1,\"partitions\":[{}]}}",
        (0..PARTITIONS)
            .map(|p| {
                let mut r: Vec<i32> = (0..3)
                    .map(|i| 1 + (p + i) % 3)
                    .filter(|b| *b != 1)
                    .collect();
                r.push(4);
                format!("{{\"topic\":\"{topic}\",\"partition\":{p},\"replicas\":{r:?}}}")
            })
            .collect::<Vec<_>>()
            .join(",")
    );
    let path = c.dir.path().join(format!("{topic}.json"));
    std::fs::write(&path, plan).unwrap();
    let path = path.to_str().unwrap().to_string();
    let load = start_load(grpc.to_vec(), topic);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rate = throttle.map(|t| t.to_string());
    let mut args = vec!["partition", "reassign", "--execute", path.as_str()];
    if let Some(r) = &rate {
        args.extend(["--throttle", r.as_str()]);
    }
    let started = Instant::now();
    keelctl(&bootstrap, &args);
    let admin = Admin::new(AdminConfig::new(controllers)).unwrap();
    loop {
        let moving = admin.list_partition_reassignments(&[]).await.unwrap();
        if moving.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let move_s = started.elapsed().as_secs_f64();
    let completed = Instant::now();
    keelctl(&bootstrap, &["partition", "reassign", "--verify", &path]);
    let (samples, errors) = load.finish().await;
    let (latencies, copying) = split(
        &samples,
        started,
        completed
            .checked_sub(Duration::from_secs(1))
            .unwrap_or(started),
    );
    let copied = bytes_on(c, 4, topic).await as f64;
    Row {
        name,
        move_s: Some(move_s),
        copied_mib: Some(copied / MIB),
        implied_s: throttle.map(|t| copied / t as f64),
        latencies,
        copying,
        errors,
    }
}

async fn create(c: &Cluster, topic: &str) {
    let config = |k: &str, v: &str| ConfigEntry {
        name: k.into(),
        value: Some(v.into()),
    };
    c.create_topic(
        CreatableTopic {
            name: topic.into(),
            num_partitions: -1,
            replication_factor: -1,
            assignments: (0..PARTITIONS)
                .map(|p| CreatableReplicaAssignment {
                    partition_index: p,
                    broker_ids: (0..3).map(|i| 1 + (p + i) % 3).collect(),
                })
                .collect(),
            configs: vec![
                config("min.insync.replicas", "2"),
                config("segment.bytes", &(64u64 << 20).to_string()),
            ],
        },
        Duration::from_secs(30),
    )
    .await;
}

async fn preload(grpc: &[String], topic: &str, mib: u64) {
    let producer = Producer::new(ProducerConfig::new(grpc.to_vec())).unwrap();
    let value = vec![b'p'; 16 * 1024];
    let mut pending = Vec::new();
    for i in 0..mib * 64 {
        pending.push(producer.send(topic, None, &value).await.unwrap());
        if i % 256 == 255 {
            for d in pending.drain(..) {
                d.await.expect("preload acknowledged");
            }
        }
    }
    for d in pending {
        d.await.expect("preload acknowledged");
    }
    producer.close().await;
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(run());
}

async fn run() {
    // The product's broker session (9 s), as the replication bench.
    let c = Cluster::start_opts(
        3,
        4,
        Options {
            session_timeout_ms: 9_000,
            ..Options::default()
        },
    );
    c.wait_unfenced(&[1, 2, 3, 4], Duration::from_secs(30))
        .await;
    let grpc: Vec<String> = (1..=4).map(|b| c.broker_addr(b)).collect();
    let mib = preload_mib();
    for topic in ["throttled", "free"] {
        create(&c, topic).await;
        preload(&grpc, topic, mib).await;
    }
    let quiet = {
        let load = start_load(grpc.clone(), "throttled");
        tokio::time::sleep(Duration::from_secs(QUIET_SECONDS)).await;
        let (samples, errors) = load.finish().await;
        let (latencies, copying) = split(&samples, samples[0].0, Instant::now());
        Row {
            name: "no move",
            move_s: None,
            copied_mib: None,
            implied_s: None,
            latencies,
            copying,
            errors,
        }
    };
    let throttled = move_row(
        &c,
        &grpc,
        "move, throttle 10 MiB/s",
        "throttled",
        Some(THROTTLE),
    )
    .await;
    let free = move_row(&c, &grpc, "move, no throttle", "free", None).await;
    println!(
        "Reassignment of 12 partitions x {mib} MiB preload onto a new broker (3 controllers + 4 \
         brokers, RF 3, load {RATE} x 1 KiB records/s acks=all to the moving topic)"
    );
    println!(
        "{:<26} {:>8} {:>11} {:>10} {:>9} {:>9} {:>9} {:>13} {:>8} {:>7}",
        "row",
        "move s",
        "copied MiB",
        "implied s",
        "p50 ms",
        "p99 ms",
        "max ms",
        "p99 copying",
        "records",
        "errors"
    );
    let opt = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
    for r in [&quiet, &throttled, &free] {
        println!(
            "{:<26} {:>8} {:>11} {:>10} {:>9.2} {:>9.2} {:>9.2} {:>13.2} {:>8} {:>7}",
            r.name,
            opt(r.move_s),
            opt(r.copied_mib),
            opt(r.implied_s),
            ms(percentile(&r.latencies, 0.5)),
            ms(percentile(&r.latencies, 0.99)),
            ms(r.latencies.last().copied().unwrap_or_default()),
            ms(percentile(&r.copying, 0.99)),
            r.latencies.len(),
            r.errors
        );
    }
    let ratio = throttled.move_s.unwrap() / throttled.implied_s.unwrap();
    println!(
        "target: throttled move within 0.8x-1.3x of the time its throttle implies: {ratio:.2}x -> {}",
        if (0.8..=1.3).contains(&ratio) {
            "met"
        } else {
            "NOT met"
        }
    );
    let p99 = |l: &[Duration]| ms(percentile(l, 0.99));
    for (what, l) in [
        ("the whole move", &throttled.latencies),
        ("the copying (to 1 s before completion)", &throttled.copying),
    ] {
        let x = p99(l) / p99(&quiet.latencies);
        println!(
            "target: produce p99 during {what} of the throttled move <= 2x without a move: \
             {x:.2}x -> {}",
            if x <= 2.0 { "met" } else { "NOT met" }
        );
    }
    let errors = quiet.errors + throttled.errors + free.errors;
    if errors > 0 {
        panic!("{errors} records were not acknowledged (first errors above); logs kept below");
    }
}
