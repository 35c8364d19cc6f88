//! Replication benchmark (issue 5): the real binaries (3 controllers + 3 brokers, release
//! build) on loopback, one topic with 3 partitions led by the 3 brokers, replication factor 3,
//! min.insync.replicas 2, acks=all, 1 KiB records. Prints one table and the target checks.
//!
//! - Baselines measured in the same run: loopback TCP bandwidth (one stream, 1 GiB) and the
//!   disk's sequential write rate (512 MiB, page cache plus a final fdatasync), once with the
//!   brokers' page-cache drop-behind and once into a page cache that only grows.
//! - Maximum rate: closed loop, [`IN_FLIGHT`] requests in flight per partition, one batch per
//!   request, for 16, 64 and 256 KiB batches: MiB/s, records/s, latency p50/p99.
//! - Latency under load: open loop with 64 KiB batches at 25%, 50% and 90% of the maximum
//!   64 KiB rate and at 50 and 100 MiB/s: produce p50/p99 (from the scheduled send time, so a stall
//!   counts against every request behind it) and end-to-end p99 (scheduled send to a
//!   consumer's fetch returning the batch; consumers read below the HW), counting the
//!   requests after a [`WARMUP`] at the row's rate. Each of these rows starts after `sync(1)`: the closed-loop rows leave gigabytes of dirty page cache whose
//!   write-back would otherwise land in whichever row comes next (measured: the same 50 MiB/s
//!   row gave p99 4.7 ms to 93 ms depending on that backlog). A row's own write-back still
//!   counts.
//!
//! - The Kafka wire protocol (#21): each closed-loop row is followed by the same row through
//!   the leaders' Kafka listeners (Produce v9 encoded with `kafka-protocol`, one TCP
//!   connection per request in flight, as a Kafka producer with
//!   `max.in.flight.requests.per.connection=1` per connection), each after `sync(1)`, and a
//!   target line gives the Kafka rate as a share of the gRPC one.
//! - Scheduling hiccups ([`HiccupMeter`]): how late a 1 ms sleep in a bench thread wakes, at
//!   idle before the cluster starts and during every row (column `hiccup p99/max`, ms). A
//!   machine that stalls runnable threads (CPU contention, a hypervisor's steal) delays every
//!   request alike, so a row's produce p99 cannot be read without its hiccups (measured on a
//!   noisy 2-vCPU VM: 10-23 ms wake-up delays at idle). Column `steal %` is the share of
//!   the machine's CPU time that the hypervisor gave to other guests during the row
//!   (`/proc/stat`, all CPUs; `-` where it cannot be read): on a VM that loses 10-20% of its
//!   CPU under load, the same code gives a slower max rate and a longer tail.
//! - CPU: column `busy %` is the share of the machine's CPU time its processes ran in the
//!   row (not idle, iowait or steal; 100 is both cores saturated, where queueing sets the
//!   tail), and `CPU ms/MiB` the three brokers' user + system CPU time per MiB produced
//!   (`/proc/<pid>/stat`, 10 ms ticks). The second is the cost of the data path: it
//!   compares two builds where the p99 of one row on a noisy machine cannot. `bench ms/MiB`
//!   is this process's own CPU per MiB (its producers, consumers and batch building, which
//!   share the machine with the cluster).
//!
//! - TLS (#23): after those rows, the 64 KiB max-rate row and the 50 MiB/s row again on a
//!   second cluster with TLS on every connection (certificates from the harness,
//!   `ssl_client_auth = required`), and a line with the cost: throughput and p99 against the
//!   plaintext rows of the same run.
//!
//! Run: `cargo bench -p keel-broker --bench replication`. `KEEL_BENCH_SECONDS` sets the
//! length of each run (default 5). `KEEL_BENCH_TRACE=DIR` writes each open-loop row's
//! requests to `DIR/row-<n>-<cluster>-<MiB/s>.csv` (`scheduled_ms,partition,latency_ms`; `n`
//! counts the open-loop rows of the run from 1, cluster is `plaintext` or `tls`) to see
//! when stalls happen and whether they hit every partition at once. `KEEL_BENCH_RATES=50,100`
//! runs only open-loop rows at those rates (MiB/s, 64 KiB batches) on the plaintext
//! cluster, for a short measure-change-measure loop on tail latency (no baselines, no
//! max-rate, Kafka or TLS rows). The cluster uses the product's 9 s broker session and 60 s
//! metadata snapshot interval. The first failed request of each row is printed to stderr; the
//! `errors` column counts them.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use keel_proto::ErrorCode;
use keel_proto::broker::broker_service_client::BrokerServiceClient;
use keel_proto::broker::{
    FetchPartition, FetchRequest, FetchTopic, ProducePartitionData, ProduceRequest,
    ProduceTopicData,
};
use keel_proto::controller::{ConfigEntry, CreatableReplicaAssignment, CreatableTopic};
use keel_record::{BatchIter, RecordBatchBuilder};
use keel_tests::Endpoints;
use keel_tests::process::{Cluster, Options};
use keel_tests::stats::{cpu_time, ms, percentile};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tonic::transport::Channel;

const MIB: f64 = 1024.0 * 1024.0;
const RECORD: usize = 1024;
const PARTITIONS: i32 = 3;
/// Requests in flight per partition in the closed-loop runs.
const IN_FLIGHT: usize = 4;
const TOPIC: &str = "bench";

/// `KEEL_BENCH_SECONDS` (default 5); a bad value ends the bench naming it.
fn seconds() -> u64 {
    keel_tests::env::parsed_or("KEEL_BENCH_SECONDS", 1..=3_600, 5)
}

/// A batch of `batch_bytes / RECORD` records; the first record's key carries `stamp_ns`
/// (ns since the run's base instant) for end-to-end latency.
fn batch(batch_bytes: usize, stamp_ns: u64) -> Bytes {
    let n = (batch_bytes / RECORD).max(1);
    let value = vec![b'x'; RECORD - 8];
    let mut b = RecordBatchBuilder::new(0).with_capacity(batch_bytes + 1024);
    let ts = keel_tests::data::now_ms();
    let key = stamp_ns.to_be_bytes();
    for _ in 0..n {
        b.append(ts, Some(&key), Some(&value), &[]);
    }
    b.build().as_bytes().clone()
}

/// Writes back every dirty page (`sync(1)`), so an open-loop row does not pay for the
/// write-back of the rows before it. A missing `sync` binary only loses that isolation.
fn settle_page_cache() {
    if let Err(e) = std::process::Command::new("sync").status() {
        eprintln!("replication bench: cannot run sync ({e}); rows are not isolated");
    }
}

/// Scheduling hiccups (like jHiccup): a plain thread sleeps 1 ms in a loop and records how
/// far each wake-up overshoots. What it measures (CPU run-queue waits, the hypervisor's
/// steal, reclaim stalls) delays every process on the machine alike, so its p99 and max are
/// a floor under the produce latencies of the same row.
struct HiccupMeter {
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<Vec<Duration>>,
    cpu: Option<CpuTimes>,
    /// The brokers' process ids and their CPU time at the start.
    brokers: Vec<(u32, Duration)>,
    /// This process's CPU time at the start.
    bench_cpu: Duration,
}

/// The machine's CPU time so far, summed over all CPUs (first line of `/proc/stat`, in
/// USER_HZ ticks).
#[derive(Clone, Copy)]
struct CpuTimes {
    /// Time a runnable vCPU waited for the hypervisor (the `steal` column).
    steal: u64,
    /// Time no process wanted the CPU (the `idle` and `iowait` columns).
    idle: u64,
    /// All columns up to and including `steal` (user, nice, system, idle, iowait, irq,
    /// softirq, steal; guest time is already inside user and nice).
    total: u64,
}

impl CpuTimes {
    /// `None` where `/proc/stat` is missing or has no steal column (pre-2.6.11 kernels).
    fn now() -> Option<CpuTimes> {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        let line = stat.lines().next()?.strip_prefix("cpu ")?;
        let ticks: Vec<u64> = line
            .split_whitespace()
            .take(8)
            .map(|t| t.parse().ok())
            .collect::<Option<_>>()?;
        (ticks.len() == 8).then(|| CpuTimes {
            steal: ticks[7],
            idle: ticks[3] + ticks[4],
            total: ticks.iter().sum(),
        })
    }

    /// Steal as a percentage of the CPU time between `self` and `later` (`None` when no
    /// tick passed).
    fn steal_pct(self, later: CpuTimes) -> Option<f64> {
        let total = later.total.checked_sub(self.total).filter(|&t| t > 0)?;
        Some(later.steal.saturating_sub(self.steal) as f64 * 100.0 / total as f64)
    }

    /// The share of the CPU time between `self` and `later` that this machine's processes
    /// ran (neither idle, iowait nor stolen), in percent (`None` when no tick passed).
    fn busy_pct(self, later: CpuTimes) -> Option<f64> {
        let total = later.total.checked_sub(self.total).filter(|&t| t > 0)?;
        let idle = later.idle.saturating_sub(self.idle);
        let steal = later.steal.saturating_sub(self.steal);
        Some(total.saturating_sub(idle + steal) as f64 * 100.0 / total as f64)
    }
}

/// A [`HiccupMeter`]'s result: sorted wake-up overshoots, the CPU steal and the machine's
/// busy share over the same period, and the CPU time the brokers used in it.
struct Hiccups {
    sorted: Vec<Duration>,
    steal_pct: Option<f64>,
    busy_pct: Option<f64>,
    /// User + system CPU time of the three broker processes together.
    broker_cpu: Duration,
    /// User + system CPU time of this benchmark process (the load it generates).
    bench_cpu: Duration,
}

impl Hiccups {
    /// The headers of [`Self::columns`].
    fn header() -> String {
        format!(
            "{:>14} {:>7} {:>6} {:>10} {:>12}",
            "hiccup p99/max", "steal %", "busy %", "CPU ms/MiB", "bench ms/MiB"
        )
    }

    /// `p99/max ms`, the steal and busy percentages and the brokers' and this process's CPU
    /// milliseconds per MiB of `bytes` produced in the row, as the tables print them. The CPU column is the
    /// cost of the data path independent of the machine's noise: it compares builds where
    /// one row's p99 cannot (the brokers also serve the consumers and followers, so it is
    /// the cost of every byte's produce, two follower fetches and one consumer fetch).
    fn columns(&self, bytes: u64) -> String {
        let per_mib = |cpu: Duration| {
            if bytes == 0 {
                "-".to_string()
            } else {
                format!("{:.2}", ms(cpu) / (bytes as f64 / MIB))
            }
        };
        format!(
            "{:>7.1}/{:<3.0} {:>7} {:>6} {:>10} {:>12}",
            ms(percentile(&self.sorted, 0.99)),
            ms(self.sorted.last().copied().unwrap_or_default()),
            self.steal(),
            self.busy_pct
                .map_or_else(|| "-".to_string(), |b| format!("{b:.0}")),
            per_mib(self.broker_cpu),
            per_mib(self.bench_cpu),
        )
    }

    /// The steal percentage with one decimal, `-` where it could not be read.
    fn steal(&self) -> String {
        self.steal_pct
            .map_or_else(|| "-".to_string(), |s| format!("{s:.1}"))
    }
}

impl HiccupMeter {
    /// Starts measuring; `brokers` are the broker processes whose CPU time is counted.
    fn start(brokers: &[u32]) -> Self {
        let cpu = CpuTimes::now();
        let brokers = brokers
            .iter()
            .map(|&pid| (pid, cpu_time(&pid.to_string())))
            .collect();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let tick = Duration::from_millis(1);
            let mut overshoots = Vec::new();
            while !flag.load(Ordering::Relaxed) {
                let t = Instant::now();
                std::thread::sleep(tick);
                overshoots.push(t.elapsed().saturating_sub(tick));
            }
            overshoots.sort();
            overshoots
        });
        Self {
            stop,
            thread,
            cpu,
            brokers,
            bench_cpu: cpu_time("self"),
        }
    }

    fn finish(self) -> Hiccups {
        self.stop.store(true, Ordering::Relaxed);
        let sorted = self.thread.join().unwrap();
        let now = CpuTimes::now();
        let steal_pct = self.cpu.zip(now).and_then(|(a, b)| a.steal_pct(b));
        let busy_pct = self.cpu.zip(now).and_then(|(a, b)| a.busy_pct(b));
        let broker_cpu = self
            .brokers
            .iter()
            .map(|&(pid, at_start)| cpu_time(&pid.to_string()).saturating_sub(at_start))
            .sum();
        Hiccups {
            sorted,
            steal_pct,
            busy_pct,
            broker_cpu,
            bench_cpu: cpu_time("self").saturating_sub(self.bench_cpu),
        }
    }
}

async fn loopback_bandwidth() -> f64 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let total: usize = 1 << 30;
    let reader = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut buf = vec![0u8; 1 << 20];
        let mut got = 0;
        while got < total {
            let n = s.read(&mut buf).await.unwrap();
            assert!(n > 0);
            got += n;
        }
    });
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let buf = vec![7u8; 1 << 20];
    let start = Instant::now();
    for _ in 0..(total >> 20) {
        s.write_all(&buf).await.unwrap();
    }
    reader.await.unwrap();
    total as f64 / MIB / start.elapsed().as_secs_f64()
}

fn disk_write_rate(dir: &std::path::Path, drop_behind: Option<u64>) -> f64 {
    use std::io::Write;
    let path = dir.join("disk-rate.tmp");
    let mut f = std::fs::File::create(&path).unwrap();
    let buf = vec![1u8; 1 << 20];
    let total = 512usize;
    let mut cache = keel_broker::log::cache_behind::CacheBehind::default();
    let start = Instant::now();
    for i in 0..total {
        f.write_all(&buf).unwrap();
        if let Some(lag) = drop_behind {
            let step = keel_broker::log::cache_behind::step_bytes(lag);
            for r in cache.advise((i as u64 + 1) << 20, lag, lag / 2, step) {
                let len = std::num::NonZeroU64::new(r.end - r.start);
                rustix::fs::fadvise(&f, r.start, len, rustix::fs::Advice::DontNeed).unwrap();
            }
        }
    }
    f.sync_data().unwrap();
    let rate = total as f64 / start.elapsed().as_secs_f64();
    drop(f);
    let _ = std::fs::remove_file(path);
    rate
}

#[derive(Clone)]
struct Clients {
    /// Client of partition p's leader (broker p + 1).
    leaders: Vec<BrokerServiceClient<Channel>>,
    /// `plaintext` or `tls`: names the cluster in trace file names.
    cluster: &'static str,
    /// The broker processes, whose CPU time the rows report.
    pids: Vec<u32>,
}

async fn produce(
    client: &mut BrokerServiceClient<Channel>,
    partition: i32,
    records: Bytes,
) -> Result<(), String> {
    let reply = client
        .produce(ProduceRequest {
            acks: -1,
            timeout_ms: 10_000,
            transactional_id: String::new(),
            topics: vec![ProduceTopicData {
                name: TOPIC.into(),
                topic_id: Bytes::new(),
                partitions: vec![ProducePartitionData {
                    index: partition,
                    records,
                    current_leader_epoch: None,
                }],
            }],
        })
        .await
        .map_err(|s| s.to_string())?
        .into_inner();
    let p = &reply.responses[0].partitions[0];
    match ErrorCode::from_proto(p.error.as_ref()) {
        Ok(ErrorCode::None) => Ok(()),
        other => Err(format!("{other:?}: {:?}", p.error)),
    }
}

/// One Kafka-protocol connection to a leader's Kafka listener (one request at a time, as the
/// broker serves a connection).
struct KafkaConn {
    stream: tokio::net::TcpStream,
    correlation_id: i32,
}

impl KafkaConn {
    async fn connect(addr: &str) -> KafkaConn {
        let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream.set_nodelay(true).unwrap();
        KafkaConn {
            stream,
            correlation_id: 0,
        }
    }

    /// Produce v9 (acks=all) of `records` to `partition`, the response read and checked.
    async fn produce(&mut self, partition: i32, records: Bytes) -> Result<(), String> {
        use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
        use kafka_protocol::messages::{
            ProduceRequest as KProduce, ProduceResponse, RequestHeader, ResponseHeader, TopicName,
        };
        use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
        const VERSION: i16 = 9;
        self.correlation_id += 1;
        let request = KProduce::default()
            .with_acks(-1)
            .with_timeout_ms(10_000)
            .with_topic_data(vec![
                TopicProduceData::default()
                    .with_name(TopicName(StrBytes::from_static_str(TOPIC)))
                    .with_partition_data(vec![
                        PartitionProduceData::default()
                            .with_index(partition)
                            .with_records(Some(records)),
                    ]),
            ]);
        let mut buf = bytes::BytesMut::new();
        buf.extend_from_slice(&[0; 4]);
        RequestHeader::default()
            .with_request_api_key(0)
            .with_request_api_version(VERSION)
            .with_correlation_id(self.correlation_id)
            .with_client_id(Some(StrBytes::from_static_str("keel-bench")))
            .encode(&mut buf, 2)
            .map_err(|e| e.to_string())?;
        request
            .encode(&mut buf, VERSION)
            .map_err(|e| e.to_string())?;
        let size = (buf.len() - 4) as i32;
        buf[..4].copy_from_slice(&size.to_be_bytes());
        self.stream
            .write_all(&buf)
            .await
            .map_err(|e| e.to_string())?;
        let mut size = [0u8; 4];
        self.stream
            .read_exact(&mut size)
            .await
            .map_err(|e| e.to_string())?;
        let mut body = vec![0u8; i32::from_be_bytes(size) as usize];
        self.stream
            .read_exact(&mut body)
            .await
            .map_err(|e| e.to_string())?;
        let mut body = Bytes::from(body);
        let header = ResponseHeader::decode(&mut body, 1).map_err(|e| e.to_string())?;
        if header.correlation_id != self.correlation_id {
            return Err(format!("correlation id {}", header.correlation_id));
        }
        let response = ProduceResponse::decode(&mut body, VERSION).map_err(|e| e.to_string())?;
        let p = &response.responses[0].partition_responses[0];
        if p.error_code == 0 {
            Ok(())
        } else {
            Err(format!("error {}: {:?}", p.error_code, p.error_message))
        }
    }
}

/// Joins closed-loop producer tasks (each returns its latencies and error count) into a row.
async fn closed_loop_result(
    tasks: Vec<tokio::task::JoinHandle<(Vec<Duration>, u64)>>,
    batch_len: usize,
    records_per_batch: u64,
    start: Instant,
    hiccups: HiccupMeter,
) -> RunResult {
    let mut latencies = Vec::new();
    let mut errors = 0;
    for t in tasks {
        let (l, e) = t.await.unwrap();
        latencies.extend(l);
        errors += e;
    }
    let elapsed = start.elapsed();
    latencies.sort();
    RunResult {
        bytes: latencies.len() as u64 * batch_len as u64,
        records: latencies.len() as u64 * records_per_batch,
        elapsed,
        latencies,
        errors,
        hiccups: hiccups.finish(),
    }
}

/// Closed loop through the Kafka listeners: like [`max_rate`], each of the `IN_FLIGHT`
/// producers per partition with its own connection to the leader's Kafka listener.
async fn max_rate_kafka(
    leaders: &[String],
    pids: &[u32],
    batch_bytes: usize,
    secs: u64,
) -> RunResult {
    let records = batch(batch_bytes, 0);
    let n = (batch_bytes / RECORD).max(1) as u64;
    let mut conns = Vec::new();
    for p in 0..PARTITIONS {
        for _ in 0..IN_FLIGHT {
            conns.push((p, KafkaConn::connect(&leaders[p as usize]).await));
        }
    }
    let deadline = Instant::now() + Duration::from_secs(secs);
    let hiccups = HiccupMeter::start(pids);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for (p, mut conn) in conns {
        let records = records.clone();
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut errors = 0u64;
            while Instant::now() < deadline {
                let t = Instant::now();
                match conn.produce(p, records.clone()).await {
                    Ok(()) => lat.push(t.elapsed()),
                    Err(e) => {
                        if errors == 0 {
                            eprintln!("replication bench: first Kafka error (partition {p}): {e}");
                        }
                        errors += 1;
                        if conn.stream.peer_addr().is_err() {
                            break;
                        }
                    }
                }
            }
            (lat, errors)
        }));
    }
    closed_loop_result(tasks, records.len(), n, start, hiccups).await
}

struct RunResult {
    bytes: u64,
    records: u64,
    elapsed: Duration,
    latencies: Vec<Duration>,
    errors: u64,
    /// Scheduling hiccups and CPU steal during the run ([`HiccupMeter`]).
    hiccups: Hiccups,
}

/// Closed loop: `IN_FLIGHT` producers per partition, each sending the same prebuilt batch.
async fn max_rate(clients: &Clients, batch_bytes: usize, secs: u64) -> RunResult {
    let records = batch(batch_bytes, 0);
    let n = (batch_bytes / RECORD).max(1) as u64;
    let deadline = Instant::now() + Duration::from_secs(secs);
    let hiccups = HiccupMeter::start(&clients.pids);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for p in 0..PARTITIONS {
        for _ in 0..IN_FLIGHT {
            let mut c = clients.leaders[p as usize].clone();
            let records = records.clone();
            tasks.push(tokio::spawn(async move {
                let mut lat = Vec::new();
                let mut errors = 0u64;
                while Instant::now() < deadline {
                    let t = Instant::now();
                    match produce(&mut c, p, records.clone()).await {
                        Ok(()) => lat.push(t.elapsed()),
                        Err(e) => {
                            if errors == 0 {
                                eprintln!("replication bench: first error (partition {p}): {e}");
                            }
                            errors += 1
                        }
                    }
                }
                (lat, errors)
            }));
        }
    }
    closed_loop_result(tasks, records.len(), n, start, hiccups).await
}

/// Unmeasured lead-in of every open-loop row at the row's rate. The row starts after
/// `sync(1)` and an idle moment, in which a VM whose host reclaims free guest memory takes
/// back what the brokers freed; the first requests then pay host faults (measured: the first
/// 60 ms of a 50 MiB/s row held 30 of its 40 slowest requests, up to 19 ms).
const WARMUP: Duration = Duration::from_secs(1);

/// Open loop at `rate_mib` MiB/s of 64 KiB batches, round-robin over the partitions, with
/// one consumer per partition measuring end-to-end latency. Runs [`WARMUP`] plus `secs`;
/// only requests scheduled after the warm-up count.
async fn at_rate(
    clients: &Clients,
    base: Instant,
    rate_mib: f64,
    secs: u64,
) -> (RunResult, Vec<Duration>) {
    let batch_bytes = 64 * 1024;
    let n = (batch_bytes / RECORD) as u64;
    let per_sec = rate_mib * MIB / batch_bytes as f64;
    let interval = Duration::from_secs_f64(1.0 / per_sec);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let measure_from = Instant::now() + WARMUP;
    // Consumers start at each partition's current HW.
    let mut consumers = Vec::new();
    for p in 0..PARTITIONS {
        let mut c = clients.leaders[p as usize].clone();
        let stop = stop.clone();
        let start_offset = fetch(&mut c, p, i64::MAX, 0).await.1;
        consumers.push(tokio::spawn(async move {
            let mut offset = start_offset;
            let mut e2e = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let (records, hw) = fetch(&mut c, p, offset, 200).await;
                let seen = Instant::now();
                for b in BatchIter::new(records) {
                    let b = b.unwrap();
                    let h = *b.header();
                    if h.base_offset < offset {
                        continue;
                    }
                    let first = b.records().next().unwrap().unwrap();
                    let key = first.key.unwrap();
                    let stamp = u64::from_be_bytes(key[..8].try_into().unwrap());
                    let sent = base + Duration::from_nanos(stamp);
                    if sent >= measure_from {
                        e2e.push(seen.saturating_duration_since(sent));
                    }
                    offset = h.next_offset();
                }
                let _ = hw;
            }
            e2e
        }));
    }
    let inflight = Arc::new(tokio::sync::Semaphore::new(256));
    let sent = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let end = measure_from + Duration::from_secs(secs);
    let mut hiccups = None;
    let mut next = start;
    let mut i = 0u64;
    let mut tasks = Vec::new();
    while next < end {
        tokio::time::sleep_until(next.into()).await;
        let scheduled = next;
        if hiccups.is_none() && scheduled >= measure_from {
            hiccups = Some(HiccupMeter::start(&clients.pids));
        }
        let p = (i % PARTITIONS as u64) as i32;
        let stamp = scheduled.duration_since(base).as_nanos() as u64;
        let records = batch(batch_bytes, stamp);
        let mut c = clients.leaders[p as usize].clone();
        let permit = inflight.clone().acquire_owned().await.unwrap();
        let sent = sent.clone();
        tasks.push(tokio::spawn(async move {
            let r = produce(&mut c, p, records).await;
            drop(permit);
            sent.fetch_add(1, Ordering::Relaxed);
            r.map(|()| (scheduled, p, scheduled.elapsed()))
        }));
        i += 1;
        next += interval;
    }
    let mut latencies = Vec::new();
    let mut errors = 0;
    let mut trace = String::from("scheduled_ms,partition,latency_ms\n");
    for t in tasks {
        match t.await.unwrap() {
            Ok((at, _, _)) if at < measure_from => {}
            Ok((at, p, l)) => {
                trace.push_str(&format!(
                    "{:.1},{p},{:.2}\n",
                    ms(at.duration_since(measure_from)),
                    ms(l)
                ));
                latencies.push(l)
            }
            Err(e) => {
                if errors == 0 {
                    eprintln!("replication bench: first error: {e}");
                }
                errors += 1
            }
        }
    }
    let elapsed = measure_from.elapsed();
    let hiccups = hiccups.expect("the measured period has requests").finish();
    if let Some(dir) = std::env::var("KEEL_BENCH_TRACE")
        .ok()
        .filter(|d| !d.is_empty())
    {
        static ROWS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let row = ROWS.fetch_add(1, Ordering::Relaxed) + 1;
        let path = format!("{dir}/row-{row:02}-{}-{rate_mib:.0}.csv", clients.cluster);
        // The wall clock of the trace's 0 ms, to line it up with the cluster's logs.
        let zero = std::time::SystemTime::now() - measure_from.elapsed();
        let zero_ms = zero
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        eprintln!("replication bench: {path}: 0 ms is {zero_ms} ms since the Unix epoch");
        if let Err(e) = std::fs::write(&path, trace) {
            eprintln!("replication bench: cannot write {path}: {e}");
        }
    }
    // Let the consumers see the last batches.
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    let mut e2e = Vec::new();
    for c in consumers {
        e2e.extend(c.await.unwrap());
    }
    latencies.sort();
    e2e.sort();
    (
        RunResult {
            bytes: latencies.len() as u64 * batch_bytes as u64,
            records: latencies.len() as u64 * n,
            elapsed,
            latencies,
            errors,
            hiccups,
        },
        e2e,
    )
}

/// One consumer fetch at `offset` (i64::MAX: only learn the HW); returns records and HW.
async fn fetch(
    c: &mut BrokerServiceClient<Channel>,
    partition: i32,
    offset: i64,
    max_wait_ms: i32,
) -> (Bytes, i64) {
    let reply = c
        .fetch(FetchRequest {
            session: None,
            replica_id: -1,
            broker_epoch: -1,
            max_wait_ms,
            min_bytes: 1,
            max_bytes: 8 << 20,
            isolation_level: 0,
            topics: vec![FetchTopic {
                topic: TOPIC.into(),
                topic_id: Bytes::new(),
                partitions: vec![FetchPartition {
                    partition,
                    fetch_offset: offset,
                    current_leader_epoch: None,
                    last_fetched_epoch: -1,
                    log_start_offset: -1,
                    partition_max_bytes: 4 << 20,
                }],
            }],
        })
        .await
        .unwrap()
        .into_inner();
    let p = &reply.responses[0].partitions[0];
    (p.records.clone(), p.high_watermark)
}

/// Starts the 3 + 3 cluster (with TLS on every connection when `tls`, #23), creates the
/// topic with partition p led by broker p + 1 and waits for full ISRs; returns the cluster
/// and a client of each leader.
async fn start_cluster(tls: bool) -> (Cluster, Clients) {
    // The product's default broker session (9 s, Kafka's broker.session.timeout.ms), not the
    // tests' 1.5 s: minutes of saturating load may delay a heartbeat past 1.5 s, and a fenced
    // leader would turn the rest of the run into NOT_LEADER_OR_FOLLOWER errors.
    let c = Cluster::start_opts(
        3,
        3,
        Options {
            session_timeout_ms: 9_000,
            // The product's default (the harness's 300 ms suits tests that restart brokers):
            // each rewrite of the local metadata snapshot is an fsync on the disk the
            // partition logs are appended to. Measured (KEEL_BENCH_RATES=50,100, 10 s, three
            // interleaved pairs): p99 at 100 MiB/s 11-28 ms with 300 ms, 9-34 ms with 60 s; no
            // difference beyond this machine's run-to-run spread.
            snapshot_interval_ms: 60_000,
            tls,
            ..Options::default()
        },
    );
    c.wait_unfenced(&[1, 2, 3], Duration::from_secs(30)).await;
    let config = |k: &str, v: &str| ConfigEntry {
        name: k.into(),
        value: Some(v.into()),
    };
    c.create_topic(
        CreatableTopic {
            name: TOPIC.into(),
            num_partitions: -1,
            replication_factor: -1,
            assignments: (0..PARTITIONS)
                .map(|p| CreatableReplicaAssignment {
                    partition_index: p,
                    broker_ids: (0..3).map(|i| (p + i) % 3 + 1).collect(),
                })
                .collect(),
            configs: vec![
                config("min.insync.replicas", "2"),
                config("segment.bytes", &(128u64 << 20).to_string()),
                config("retention.bytes", &(1u64 << 30).to_string()),
            ],
        },
        Duration::from_secs(30),
    )
    .await;
    for p in 0..PARTITIONS {
        let leader = p + 1;
        c.wait_for(
            "leaders with a full ISR",
            Duration::from_secs(30),
            || async {
                let r = c.replica(leader, TOPIC, p).await?;
                (r.role == keel_proto::broker::ReplicaRole::Leader as i32 && r.isr.len() == 3)
                    .then_some(())
            },
        )
        .await;
    }
    let leaders = (1..=3).map(|id| c.broker_client(id)).collect();
    let cluster = if tls { "tls" } else { "plaintext" };
    let pids = (1..=3).filter_map(|id| c.broker_pid(id)).collect();
    (
        c,
        Clients {
            leaders,
            cluster,
            pids,
        },
    )
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(run());
}

/// The rates of `KEEL_BENCH_RATES` (comma-separated MiB/s), if set.
fn only_rates() -> Option<Vec<f64>> {
    keel_tests::env::parsed_list("KEEL_BENCH_RATES", 0.1..=10_000.0)
}

/// The open-loop rows of `KEEL_BENCH_RATES` only (see the module doc).
async fn run_rates(rates: &[f64], secs: u64) {
    let (_c, clients) = start_cluster(false).await;
    let base = Instant::now();
    println!(
        "\nKeel replication benchmark, open-loop rows only (KEEL_BENCH_RATES): RF 3, \
         min.insync.replicas 2, acks=all, 64 KiB batches, {secs} s per row after sync(1) and a \
         1 s warm-up"
    );
    println!(
        "{:<12} {:>9} {:>9} {:>9} {:>9} {:>7} {}",
        "target",
        "MiB/s",
        "p50 ms",
        "p99 ms",
        "e2e p99",
        "errors",
        Hiccups::header()
    );
    for &rate in rates {
        settle_page_cache();
        let (r, e2e) = at_rate(&clients, base, rate, secs).await;
        println!(
            "{:<12} {:>9.1} {:>9.2} {:>9.2} {:>9.2} {:>7} {}",
            format!("{rate:.0} MiB/s"),
            r.bytes as f64 / MIB / r.elapsed.as_secs_f64(),
            ms(percentile(&r.latencies, 0.5)),
            ms(percentile(&r.latencies, 0.99)),
            ms(percentile(&e2e, 0.99)),
            r.errors,
            r.hiccups.columns(r.bytes),
        );
    }
}

/// `KEEL_BENCH_TRACE`, created if missing; a directory that cannot be created ends the
/// bench before it starts (exit code 2), rather than losing the trace after each row.
fn check_trace_dir() {
    let Some(dir) = std::env::var_os("KEEL_BENCH_TRACE").filter(|d| !d.is_empty()) else {
        return;
    };
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("error: KEEL_BENCH_TRACE={dir:?}: cannot create the directory: {e}");
        std::process::exit(2);
    }
}

async fn run() {
    // Every setting is read before anything starts: a bad one ends the bench at once.
    check_trace_dir();
    let secs = seconds();
    if let Some(rates) = only_rates() {
        return run_rates(&rates, secs).await;
    }
    let idle = HiccupMeter::start(&[]);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle = idle.finish();
    let loopback = loopback_bandwidth().await;
    let (c, clients) = start_cluster(false).await;
    // As the brokers write (drop-behind at the broker default) and into a page cache that
    // only grows (Kafka's way), which on a VM whose host reclaims free guest memory pays a
    // host fault per new page (see keel_broker::log::cache_behind).
    let drop_behind = keel_broker::log::LogConfig::default().drop_cache_behind_bytes;
    let disk = disk_write_rate(c.dir.path(), drop_behind);
    let disk_growing = disk_write_rate(c.dir.path(), None);
    let base = Instant::now();

    println!(
        "\nKeel replication benchmark: 3 brokers + 3 controllers on loopback, RF 3, \
         min.insync.replicas 2, acks=all, {RECORD} B records, {PARTITIONS} partitions \
         (one led by each broker), {secs} s per run; open-loop rows start after sync(1) and a \
         1 s warm-up"
    );
    println!(
        "loopback TCP (1 stream): {loopback:.0} MiB/s; disk sequential write: {disk:.0} MiB/s \
         with drop-behind ({disk_growing:.0} MiB/s into a growing page cache); scheduling hiccups at idle (2 s): p99 {:.1} ms, max {:.1} ms, CPU steal {}%\n",
        ms(percentile(&idle.sorted, 0.99)),
        ms(idle.sorted.last().copied().unwrap_or_default()),
        idle.steal(),
    );
    println!(
        "{:<38} {:>9} {:>11} {:>9} {:>9} {:>9} {:>7} {}",
        "run",
        "MiB/s",
        "records/s",
        "p50 ms",
        "p99 ms",
        "e2e p99",
        "errors",
        Hiccups::header()
    );
    let print = |name: &str, r: &RunResult, e2e: Option<Duration>| {
        let s = r.elapsed.as_secs_f64();
        println!(
            "{:<38} {:>9.1} {:>11.0} {:>9.2} {:>9.2} {:>9} {:>7} {}",
            name,
            r.bytes as f64 / MIB / s,
            r.records as f64 / s,
            ms(percentile(&r.latencies, 0.5)),
            ms(percentile(&r.latencies, 0.99)),
            e2e.map_or("-".to_string(), |d| format!("{:.2}", ms(d))),
            r.errors,
            r.hiccups.columns(r.bytes),
        );
    };
    // Closed loop, each batch size through gRPC and then through the Kafka listeners
    // (Produce v9), back to back, each row after sync(1) so neither pays the other's
    // write-back.
    let kafka_leaders: Vec<String> = (1..=PARTITIONS).map(|id| c.kafka_addr(id)).collect();
    let mut max64 = 0.0;
    let mut best = 0.0f64;
    let mut kafka_ratios = Vec::new();
    for kib in [16, 64, 256] {
        settle_page_cache();
        let r = max_rate(&clients, kib * 1024, secs).await;
        let grpc_rate = r.bytes as f64 / MIB / r.elapsed.as_secs_f64();
        best = best.max(grpc_rate);
        if kib == 64 {
            max64 = grpc_rate;
        }
        print(&format!("max rate, {kib} KiB batches"), &r, None);
        settle_page_cache();
        let r = max_rate_kafka(&kafka_leaders, &clients.pids, kib * 1024, secs).await;
        let rate = r.bytes as f64 / MIB / r.elapsed.as_secs_f64();
        kafka_ratios.push((kib, rate / grpc_rate));
        print(&format!("max rate, {kib} KiB, Kafka protocol"), &r, None);
    }
    let mut p99_at_50 = None;
    // (rate MiB/s, produce p99, end-to-end p99) of the fixed-rate rows (#26 targets).
    let mut fixed = Vec::new();
    for (name, rate) in [
        ("25% of max (64 KiB)", max64 * 0.25),
        ("50% of max (64 KiB)", max64 * 0.5),
        ("90% of max (64 KiB)", max64 * 0.9),
        ("50 MiB/s (64 KiB)", 50.0),
        ("100 MiB/s (64 KiB)", 100.0),
    ] {
        settle_page_cache();
        let (r, e2e) = at_rate(&clients, base, rate, secs).await;
        let label = format!("{name}: {rate:.0} MiB/s target");
        print(&label, &r, Some(percentile(&e2e, 0.99)));
        if rate == 50.0 {
            p99_at_50 = Some(percentile(&r.latencies, 0.99));
        }
        if rate == 50.0 || rate == 100.0 {
            fixed.push((rate, percentile(&r.latencies, 0.99), percentile(&e2e, 0.99)));
        }
    }
    // TLS (#23): the 64 KiB max-rate row and the 50 MiB/s row again, on a second cluster with
    // TLS on every connection (clients, replication, controllers; client certificates
    // required), started after the plaintext one is stopped so both have the machine alone.
    drop(clients);
    drop(c);
    let (tls_cluster, tls_clients) = start_cluster(true).await;
    settle_page_cache();
    let r = max_rate(&tls_clients, 64 * 1024, secs).await;
    let tls_max64 = r.bytes as f64 / MIB / r.elapsed.as_secs_f64();
    print("max rate, 64 KiB batches, TLS", &r, None);
    settle_page_cache();
    let (r, e2e) = at_rate(&tls_clients, base, 50.0, secs).await;
    print(
        "50 MiB/s (64 KiB), TLS: 50 MiB/s target",
        &r,
        Some(percentile(&e2e, 0.99)),
    );
    let tls_p99_at_50 = percentile(&r.latencies, 0.99);
    drop(tls_clients);
    drop(tls_cluster);

    println!("\ntargets:");
    println!(
        "  sustained acks=all throughput >= 150 MiB/s: {best:.0} MiB/s -> {}",
        if best >= 150.0 { "met" } else { "NOT met" }
    );
    for (kib, ratio) in &kafka_ratios {
        println!(
            "  Kafka-protocol produce within 20% of gRPC ({kib} KiB batches): {:.0}% of the gRPC rate -> {}",
            ratio * 100.0,
            if *ratio >= 0.8 { "met" } else { "NOT met" }
        );
    }
    let p = p99_at_50.unwrap();
    println!(
        "  cost of TLS (report): max rate (64 KiB) {tls_max64:.0} MiB/s vs {max64:.0} MiB/s \
         plaintext ({:+.0}%); p99 at 50 MiB/s {:.2} ms vs {:.2} ms ({:+.2} ms)",
        (tls_max64 / max64 - 1.0) * 100.0,
        ms(tls_p99_at_50),
        ms(p),
        ms(tls_p99_at_50) - ms(p),
    );
    // #26: produce p99 < 5 ms at 50 MiB/s and < 10 ms at 100 MiB/s, end to end within 2 ms
    // of it.
    for (rate, p99, e2e) in fixed {
        let limit = if rate == 50.0 { 5.0 } else { 10.0 };
        // An open loop at or above ~80% of the closed-loop maximum is a saturated queue on
        // any system (the wait grows as 1 / (1 - load)): its tail then measures the machine,
        // which the line says, without changing the verdict.
        let saturated = if rate >= 0.8 * max64 {
            format!(
                " (this machine's max 64 KiB rate is {max64:.0} MiB/s: the row runs at {:.0}% \
                 of it, a saturated queue)",
                rate / max64 * 100.0
            )
        } else {
            String::new()
        };
        println!(
            "  p99 produce latency < {limit:.0} ms at {rate:.0} MiB/s: {:.2} ms -> {}{saturated}",
            ms(p99),
            if ms(p99) < limit { "met" } else { "NOT met" }
        );
        println!(
            "  end-to-end p99 within 2 ms of produce p99 at {rate:.0} MiB/s: {:.2} ms ({:+.2} ms) -> {}",
            ms(e2e),
            ms(e2e) - ms(p99),
            if ms(e2e) - ms(p99) <= 2.0 {
                "met"
            } else {
                "NOT met"
            }
        );
    }
}
