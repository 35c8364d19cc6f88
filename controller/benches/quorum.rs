//! Controller quorum benchmark on three real `keel-controller` processes (release build).
//!
//! Run: `cargo bench -p keel-controller --bench quorum`. Prints a table:
//! - commit throughput (committed records/s) and latency p50/p99 of metadata writes at 1, 16
//!   and 64 concurrent clients, in two request shapes: operator AlterPartition requests of
//!   [`BATCH_PARTITIONS`] partitions (one PartitionChangeRecord each; the shape of the ISR
//!   traffic of brokers that lead many partitions), and of one partition (one record per
//!   request). Each is answered after commit; latency is per request;
//! - open loop: 64 clients offering 20,000 records/s together (the throughput target as a
//!   load), as 10-record and as 1-record requests, latency counted from each request's
//!   scheduled time;
//! - failover time (kill -9 of the active controller to the first accepted write) p50/p99
//!   over `KEEL_BENCH_KILLS` kills (default 20).
//!
//! `KEEL_BENCH_LOG` sets the controllers' `KEEL_LOG` filter (default `info,openraft=warn`).
//! `KEEL_BENCH_QUICK=1` runs only the 64-client rows (no failover), for profiling.
//! `KEEL_BENCH_ENGINES` lists the Raft log engines to run every table on, in order (default
//! `segments,sled`: the two `metadata_log_engine` values, one quorum each).
//!
//! Column `CPU us/req L/F/C`: CPU time (user + system, from `/proc`) per request of the active
//! controller, of both followers together, and of this benchmark's own clients. Throughput on
//! this 2-core machine swings ±15% between runs with neighbours' load; CPU per request is the
//! steadier figure to compare changes by.
//!
//! Targets (issue #3, 2-core machine): >= 20,000 records/s at 64 clients with p99 < 20 ms;
//! single-client p50 < 2 ms; failover p99 < 2 s. Records/s is read on the multi-record rows
//! (the controller's write traffic comes in multi-record requests: AlterPartition batches,
//! CreateTopics); the 1-record rows are bounded by one unary RPC per record, which the RPC
//! ceiling row measures.

use std::time::{Duration, Instant};

use keel_proto::controller::{
    AlterPartitionPartition, AlterPartitionRequest, AlterPartitionTopic, BrokerState,
    CreatableReplicaAssignment, CreatableTopic, CreateTopicsRequest, DescribeConfigsRequest,
};
use keel_tests::quorum::*;
use keel_tests::stats::{cpu_time, percentile};

const RUN_SECS: u64 = 5;
/// Partitions per request in the batched rows (a broker's AlterPartition sender puts every
/// pending ISR change of its partitions in one request, up to 256, as Kafka's
/// `DefaultAlterPartitionManager` does).
const BATCH_PARTITIONS: i32 = 10;
/// Records per second the open-loop rows offer (the throughput target of issue #3).
const OFFERED_RECORDS_PER_SEC: f64 = 20_000.0;

/// An operator AlterPartition setting the ISR of partitions `0..partitions` of `topic`.
fn alter(topic: &str, partitions: i32, isr: &[i32]) -> AlterPartitionRequest {
    AlterPartitionRequest {
        broker_id: -1,
        broker_epoch: -1,
        topics: vec![AlterPartitionTopic {
            topic_name: topic.into(),
            partitions: (0..partitions)
                .map(|p| AlterPartitionPartition {
                    partition_index: p,
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
                })
                .collect(),
            ..Default::default()
        }],
    }
}

/// Topics `{prefix}-0 .. {prefix}-{n-1}`, each with `partitions` partitions on brokers 1-3.
async fn create_topics(clients: &Clients, prefix: &str, n: usize, partitions: i32) {
    for i in 0..n {
        let topic = CreatableTopic {
            name: format!("{prefix}-{i}"),
            num_partitions: -1,
            replication_factor: -1,
            assignments: (0..partitions)
                .map(|p| CreatableReplicaAssignment {
                    partition_index: p,
                    broker_ids: vec![1, 2, 3],
                })
                .collect(),
            configs: vec![],
        };
        clients
            .on_leader(Duration::from_secs(10), |mut c| {
                let req = CreateTopicsRequest {
                    topics: vec![topic.clone()],
                    validate_only: false,
                };
                async move {
                    let r = c.create_topics(req).await.ok()?.into_inner();
                    let t = r.topics.first()?;
                    (ok(&t.error) || t.error.as_ref().unwrap().name == "TOPIC_ALREADY_EXISTS")
                        .then_some(())
                }
            })
            .await
            .expect("topic created");
    }
}

/// CPU time of the leader, the two followers (together) and this benchmark process, as a
/// snapshot to subtract.
fn cpu_snapshot(q: &Quorum, leader: u64) -> [Duration; 3] {
    let of = |id: u64| {
        q.pid(id)
            .map_or(Duration::ZERO, |p| cpu_time(&p.to_string()))
    };
    let followers = (1..=3).filter(|&id| id != leader).map(of).sum();
    [of(leader), followers, cpu_time("self")]
}

/// What one row of writes measured.
struct Load {
    /// Committed records per second.
    records_per_sec: f64,
    /// Request latencies, sorted.
    latencies: Vec<Duration>,
    /// Requests per Raft entry (group commit).
    per_entry: f64,
    /// CPU µs per request: leader, both followers together, benchmark client.
    cpu_us_per_request: [f64; 3],
}

/// `concurrency` writers for RUN_SECS, writer `i` altering partitions `0..partitions` of
/// topic `{prefix}-{i}` in each request (one PartitionChangeRecord per partition); returns
/// what it measured.
///
/// Closed loop when `offered` is `None` (each writer sends its next request when the last is
/// answered: the saturation rate). Open loop with `Some(records_per_sec)`: together the
/// writers offer that rate, each request at a fixed scheduled time, and a request's latency
/// counts from its scheduled time, so a writer that falls behind charges the delay to every
/// request behind it (no coordinated omission).
async fn load(
    q: &Quorum,
    concurrency: usize,
    prefix: &str,
    partitions: i32,
    offered: Option<f64>,
) -> Load {
    let leader = q.wait_leader(Duration::from_secs(10)).await;
    let addr = q.addr(leader);
    let first_index = commit_index(&addr).await;
    let cpu_before = cpu_snapshot(q, leader);
    let start = Instant::now();
    let end = start + Duration::from_secs(RUN_SECS);
    let mut tasks = Vec::new();
    for i in 0..concurrency {
        let addr = addr.clone();
        let prefix = prefix.to_string();
        tasks.push(tokio::spawn(async move {
            let mut c = connect(&addr).await;
            let topic = format!("{prefix}-{i}");
            let mut lat = Vec::new();
            // Open loop: this writer's share of the offered rate, its start staggered.
            let interval = offered.map(|rate| {
                Duration::from_secs_f64(concurrency as f64 * f64::from(partitions) / rate)
            });
            let mut k: u32 = 0;
            loop {
                let t = match interval {
                    Some(every) => {
                        let at = start + every.mul_f64(i as f64 / concurrency as f64) + every * k;
                        if at >= end {
                            break;
                        }
                        tokio::time::sleep_until(at.into()).await;
                        at
                    }
                    None if Instant::now() >= end => break,
                    None => Instant::now(),
                };
                let isr: &[i32] = if k.is_multiple_of(2) {
                    &[1, 2]
                } else {
                    &[1, 2, 3]
                };
                k += 1;
                let r = c
                    .alter_partition(alter(&topic, partitions, isr))
                    .await
                    .unwrap()
                    .into_inner();
                // A request-level error (NOT_CONTROLLER after a leader change) has no topics.
                assert!(ok(&r.error), "AlterPartition refused: {:?}", r.error);
                assert_eq!(r.topics[0].partitions.len(), partitions as usize);
                for p in &r.topics[0].partitions {
                    assert!(ok(&p.error), "{:?}", p.error);
                }
                lat.push(t.elapsed());
            }
            lat
        }));
    }
    let all = gather(tasks).await;
    let secs = start.elapsed().as_secs_f64();
    let cpu_after = cpu_snapshot(q, leader);
    // Entries include the NoOpRecords of the period (2/s), a negligible share.
    let entries = commit_index(&addr).await - first_index;
    let requests = all.len().max(1) as f64;
    Load {
        records_per_sec: all.len() as f64 * f64::from(partitions) / secs,
        per_entry: all.len() as f64 / entries.max(1) as f64,
        cpu_us_per_request: std::array::from_fn(|i| {
            (cpu_after[i] - cpu_before[i]).as_secs_f64() * 1e6 / requests
        }),
        latencies: all,
    }
}

/// A client of the controller at `addr` (its own connection).
async fn connect(
    addr: &str,
) -> keel_proto::controller::controller_service_client::ControllerServiceClient<
    tonic::transport::Channel,
> {
    let ch = tonic::transport::Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    keel_proto::controller::controller_service_client::ControllerServiceClient::new(ch)
}

/// Every task's latencies, sorted.
async fn gather(tasks: Vec<tokio::task::JoinHandle<Vec<Duration>>>) -> Vec<Duration> {
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    all.sort();
    all
}

/// The commit index (Raft entries) the controller at `addr` reports.
async fn commit_index(addr: &str) -> i64 {
    let r = connect(addr)
        .await
        .describe_quorum(keel_proto::controller::DescribeQuorumRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(ok(&r.error), "{:?}", r.error);
    r.commit_index
}

/// `concurrency` readers for RUN_SECS sending empty DescribeConfigs requests to the active
/// controller: a unary gRPC round trip to the same process with no Raft, no disk and no
/// decision behind it. The ceiling any single-RPC metadata write can reach on this machine
/// (client and server share the two cores); returns (requests/s, latencies sorted).
async fn rpc_ceiling(q: &Quorum, concurrency: usize) -> (f64, Vec<Duration>) {
    let leader = q.wait_leader(Duration::from_secs(10)).await;
    let addr = q.addr(leader);
    let start = Instant::now();
    let end = start + Duration::from_secs(RUN_SECS);
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let addr = addr.clone();
        tasks.push(tokio::spawn(async move {
            let mut c = connect(&addr).await;
            let mut lat = Vec::new();
            while Instant::now() < end {
                let t = Instant::now();
                let r = c
                    .describe_configs(DescribeConfigsRequest::default())
                    .await
                    .unwrap()
                    .into_inner();
                assert!(r.results.is_empty(), "{r:?}");
                lat.push(t.elapsed());
            }
            lat
        }));
    }
    let all = gather(tasks).await;
    let secs = start.elapsed().as_secs_f64();
    (all.len() as f64 / secs, all)
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let quick = std::env::var("KEEL_BENCH_QUICK").is_ok_and(|v| v == "1");
        let kills: usize =
            keel_tests::env::parsed_or("KEEL_BENCH_KILLS", 0..=1_000, if quick { 0 } else { 20 });
        let client_counts: &[usize] = if quick { &[64] } else { &[1, 64] };
        let engines = std::env::var("KEEL_BENCH_ENGINES").unwrap_or("segments,sled".into());
        for (i, engine) in engines.split(',').enumerate() {
            if i > 0 {
                println!();
            }
            run(engine.trim(), quick, kills, client_counts).await;
        }
    });
}

/// Every table on a new quorum of three controllers with `metadata_log_engine = engine`.
async fn run(engine: &str, quick: bool, kills: usize, client_counts: &[usize]) {
    let mut q = Quorum::start_with(3, &["--metadata-log-engine", engine]);
    let hb = Duration::from_millis(200);
    let _brokers = [
        FakeBroker::start(&q, 1, "", hb).await,
        FakeBroker::start(&q, 2, "", hb).await,
        FakeBroker::start(&q, 3, "", hb).await,
    ];
    let clients = Clients::new(&q);
    // Wait for the brokers to be unfenced, then make one topic per writer.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let leader = q.wait_leader(Duration::from_secs(5)).await;
        if fetch_image(&q, leader)
            .await
            .unwrap()
            .brokers()
            .values()
            .filter(|b| !b.fenced)
            .count()
            == 3
        {
            break;
        }
        assert!(Instant::now() < deadline, "brokers not unfenced");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    create_topics(&clients, "bench", 64, 1).await;
    create_topics(&clients, "bench-batch", 64, BATCH_PARTITIONS).await;

    println!(
        "keel-controller quorum benchmark: 3 controllers on loopback, Raft log engine \
         {engine}, {RUN_SECS} s per row"
    );
    println!();
    let header = |what: &str, count: &str, target: &str| {
        println!(
            "{what:<44} {count:>14} {:>10} {:>10} {:>10} {:>16}   {target}",
            "p50 ms", "p99 ms", "req/entry", "CPU us/req L/F/C"
        );
    };
    // One table row; `per_entry` = requests per Raft entry (group commit) and `cpu` =
    // CPU µs per request of the leader, both followers and this client, if measured.
    let row = |label: String,
               rate: f64,
               lat: &[Duration],
               per_entry: Option<f64>,
               cpu: Option<[f64; 3]>,
               target| {
        let per_entry = per_entry.map_or("-".to_string(), |n| format!("{n:.1}"));
        let cpu = cpu.map_or("-".to_string(), |[l, f, c]| format!("{l:.0}/{f:.0}/{c:.0}"));
        println!(
            "{label:<44} {rate:>14.0} {:>10.2} {:>10.2} {per_entry:>10} {cpu:>16}   {target}",
            percentile(lat, 0.50).as_secs_f64() * 1e3,
            percentile(lat, 0.99).as_secs_f64() * 1e3,
        );
    };
    let load_row = |label: String, l: &Load, target| {
        let cpu = Some(l.cpu_us_per_request);
        row(
            label,
            l.records_per_sec,
            &l.latencies,
            Some(l.per_entry),
            cpu,
            target,
        );
    };
    // Issue #3's targets are in committed records/s. The active controller's write
    // traffic arrives as multi-record requests (a broker's AlterPartition carries every
    // pending ISR change of its partitions, Kafka's `DefaultAlterPartitionManager`; a
    // CreateTopics writes a record per partition), so the targets are read on the
    // 10-record rows. The 1-record rows show what one unary RPC per record allows here
    // (compare the RPC ceiling below).
    for (records, prefix, shape, targets) in [
        (
            BATCH_PARTITIONS,
            "bench-batch",
            format!(
                "AlterPartition of {BATCH_PARTITIONS} partitions ({BATCH_PARTITIONS} records each)"
            ),
            ["p50 < 2 ms", "", ">= 20000 records/s (saturation)"],
        ),
        (
            1,
            "bench",
            "metadata writes of 1 record each".to_string(),
            ["p50 < 2 ms", "", "(not a target: one RPC per record)"],
        ),
    ] {
        header(&shape, "records/s", "targets");
        for (concurrency, target) in [1, 16, 64].into_iter().zip(targets) {
            if quick && concurrency != 64 {
                continue;
            }
            let l = load(&q, concurrency, prefix, records, None).await;
            load_row(format!("{concurrency} concurrent clients"), &l, target);
        }
        println!();
    }

    // The target as an offered load: 64 clients writing 20,000 records/s together, each
    // request on schedule (latency from its scheduled time). The closed-loop rows above
    // give the saturation rate, where latency is mostly queueing; the p99 target is read
    // here, at the target rate.
    header(
        "open loop: 64 clients offering 20,000 records/s",
        "records/s",
        "",
    );
    for (records, label, target) in [
        (
            BATCH_PARTITIONS,
            format!("AlterPartition of {BATCH_PARTITIONS} partitions"),
            "p99 < 20 ms at 20000 records/s",
        ),
        (
            1,
            "1 record per request".to_string(),
            "(not a target: one RPC per record)",
        ),
    ] {
        let prefix = if records == 1 { "bench" } else { "bench-batch" };
        let l = load(&q, 64, prefix, records, Some(OFFERED_RECORDS_PER_SEC)).await;
        load_row(label, &l, target);
    }

    println!();
    header(
        "RPC ceiling: empty DescribeConfigs (no Raft)",
        "requests/s",
        "(not a target)",
    );
    for &concurrency in client_counts {
        let (rate, lat) = rpc_ceiling(&q, concurrency).await;
        row(
            format!("{concurrency} concurrent clients"),
            rate,
            &lat,
            None,
            None,
            "",
        );
    }

    // Failover: kill -9 the active controller, time to the first accepted write.
    let mut times = Vec::new();
    let mut rejoin = Vec::new();
    for k in 0..kills {
        let leader = q.wait_leader(Duration::from_secs(10)).await;
        q.kill(leader);
        let killed = Instant::now();
        let topic = format!("bench-{}", k % 64);
        let isr: Vec<i32> = if k % 2 == 0 {
            vec![1, 2]
        } else {
            vec![1, 2, 3]
        };
        clients
            .on_leader(Duration::from_secs(10), |mut c| {
                let req = alter(&topic, 1, &isr);
                async move {
                    let r = c.alter_partition(req).await.ok()?.into_inner();
                    let p = r.topics.first()?.partitions.first()?.clone();
                    ok(&p.error).then_some(())
                }
            })
            .await
            .expect("a new leader accepted a write");
        times.push(killed.elapsed());
        q.start_node(leader);
        // The next kill must hit a healthy quorum: wait until the restarted node is back
        // in the voter set, caught up and acknowledging (otherwise the kill leaves a single
        // live voter and the "failover" also waits for a process to start).
        let restarted = Instant::now();
        wait_all_voters_caught_up(&clients, Duration::from_secs(20)).await;
        rejoin.push(restarted.elapsed());
    }
    if kills == 0 {
        return;
    }
    times.sort();
    rejoin.sort();
    println!();
    header(
        "failover (kill -9 leader -> write accepted)",
        "kills",
        "target",
    );
    println!(
        "{:<44} {:>14} {:>10.0} {:>10.0} {:>10} {:>16}   p99 < 2000 ms",
        "",
        times.len(),
        percentile(&times, 0.50).as_secs_f64() * 1e3,
        percentile(&times, 0.99).as_secs_f64() * 1e3,
        "",
        "",
    );
    println!(
        "{:<44} {:>14} {:>10.0} {:>10.0} {:>10} {:>16}   (not a target)",
        "restart of killed node -> caught-up voter",
        rejoin.len(),
        percentile(&rejoin, 0.50).as_secs_f64() * 1e3,
        percentile(&rejoin, 0.99).as_secs_f64() * 1e3,
        "",
        "",
    );
}

/// Waits until the active controller reports every voter with lag 0 and an acknowledgement
/// within the last 300 ms (`DescribeQuorum`), i.e. a full, healthy quorum.
async fn wait_all_voters_caught_up(clients: &Clients, deadline: Duration) {
    clients
        .on_leader(deadline, |mut c| async move {
            let r = c
                .describe_quorum(keel_proto::controller::DescribeQuorumRequest {})
                .await
                .ok()?
                .into_inner();
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .ok()?
                .as_millis() as i64;
            let healthy = ok(&r.error)
                && r.voters.len() == 3
                && r.voters
                    .iter()
                    .all(|v| v.lag == 0 && now - v.last_fetch_timestamp_ms < 300);
            if healthy {
                Some(())
            } else {
                tokio::time::sleep(Duration::from_millis(20)).await;
                None
            }
        })
        .await
        .expect("all three voters caught up");
}
