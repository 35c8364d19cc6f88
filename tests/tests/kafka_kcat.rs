//! A real Kafka client against Keel's Kafka listener (#21, "Acceptance"): kcat (librdkafka)
//! lists the brokers, leaders and ISR Keel itself reports; produces 1,000 lines per codec
//! (none, gzip, snappy, lz4, zstd) idempotently with `acks=all` and reads exactly those lines
//! back in order at offsets 0..999, the batches stored compressed as sent; enables MsgVer2,
//! IdempotentProducer and ZSTD from our ApiVersions; and produces keyed records to 3
//! partitions that read back complete and in per-partition order.
//!
//! Why: the listener is only as good as what an unmodified client does with it; unit tests
//! of the codec cannot show that librdkafka's feature detection, idempotent producer and
//! fetcher accept our answers. kcat is the Debian package `kcat`; a missing kcat fails these
//! tests (never a silent skip). Every kcat run has a deadline and is killed past it, so a
//! client hung on a bad answer fails the test instead of hanging the run.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use keel_proto::broker::ReplicaRole;
use keel_record::{BatchIter, CompressionType};
use keel_tests::data::assigned_topic;
use keel_tests::{Endpoints, InProcessCluster};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(20);
/// Deadline of one kcat run (each takes well under a second on an idle machine).
const KCAT_DEADLINE: Duration = Duration::from_secs(60);
const LINES: usize = 1_000;

/// What one kcat run printed.
#[derive(Debug)]
struct Run {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

/// Runs `kcat args` with `stdin` as its input, killing it past [`KCAT_DEADLINE`]. Panics if
/// kcat is not installed (saying how to install it), times out, or exits unsuccessfully.
fn kcat(args: &[&str], stdin: &[u8]) -> Run {
    let mut child = match Command::new("kcat")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
            "kcat is not installed, and these acceptance tests need it (#21): install the \
             Debian/Ubuntu package with `apt-get install kcat` (kcat 1.7, librdkafka 2.x)"
        ),
        Err(e) => panic!("cannot start kcat: {e}"),
    };
    let mut input = child.stdin.take().expect("a piped stdin");
    let stdin = stdin.to_vec();
    // Writer and readers on their own threads, so neither side blocks on a full pipe.
    let writer = std::thread::spawn(move || {
        let _ = input.write_all(&stdin);
        // Dropping `input` closes kcat's stdin (end of the lines to produce).
    });
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = Vec::new();
            let _ = r.read_to_end(&mut s);
            String::from_utf8_lossy(&s).into_owned()
        })
    };
    let stdout = drain(Box::new(child.stdout.take().expect("a piped stdout")));
    let stderr = drain(Box::new(child.stderr.take().expect("a piped stderr")));
    let deadline = Instant::now() + KCAT_DEADLINE;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for kcat") {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            let _ = writer.join();
            panic!(
                "kcat {args:?} did not finish within {KCAT_DEADLINE:?} (killed); stderr:\n{}",
                stderr.join().unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let _ = writer.join();
    let run = Run {
        status,
        stdout: stdout.join().expect("the stdout reader"),
        stderr: stderr.join().expect("the stderr reader"),
    };
    assert!(run.status.success(), "kcat {args:?} failed: {run:#?}");
    run
}

/// Fails at once, before a cluster is started, if kcat is missing (see [`kcat`]).
fn require_kcat() {
    let v = kcat(&["-V"], b"");
    assert!(v.stdout.contains("kcat"), "kcat -V: {v:?}");
}

/// [`kcat`] off the test's runtime threads.
async fn kcat_async(args: Vec<String>, stdin: Vec<u8>) -> Run {
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        kcat(&args, &stdin)
    })
    .await
    .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

/// Waits until every partition of `topic` (partition `p` led by `assignments[p][0]`) has
/// that leader with the full assignment as ISR and no ISR change pending.
async fn wait_full_isr(c: &InProcessCluster, topic: &str, assignments: &[&[i32]]) {
    for (p, replicas) in assignments.iter().enumerate() {
        let leader = replicas[0];
        let mut want = replicas.to_vec();
        want.sort_unstable();
        c.wait_for(
            &format!("broker {leader} leads {topic}-{p} with ISR {want:?}"),
            WAIT,
            || async {
                let r = c.replica(leader, topic, p as i32).await?;
                let mut got = r.isr.clone();
                got.sort_unstable();
                (r.role == ReplicaRole::Leader as i32 && got == want && !r.pending_isr_change)
                    .then_some(())
            },
        )
        .await;
    }
}

/// Ids in a kcat JSON list of `{"id": n}` objects, sorted.
fn ids(v: &Value) -> Vec<i64> {
    let mut out: Vec<i64> = v
        .as_array()
        .unwrap_or_else(|| panic!("a list of ids: {v}"))
        .iter()
        .map(|e| e["id"].as_i64().unwrap_or_else(|| panic!("an id: {e}")))
        .collect();
    out.sort_unstable();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_kcat_lists_brokers_leaders_and_isr_and_enables_features() {
    require_kcat();
    let c = InProcessCluster::start(3, 3);
    c.wait_unfenced(&[1, 2, 3], WAIT).await;
    let assignments: &[&[i32]] = &[&[1, 2, 3], &[2, 3, 1], &[3, 1, 2]];
    c.create_topic(assigned_topic("listed", assignments), WAIT)
        .await;
    wait_full_isr(&c, "listed", assignments).await;
    let bootstrap = c.kafka_bootstrap();

    let run = kcat_async(strings(&["-L", "-J", "-b", &bootstrap]), Vec::new()).await;
    let meta: Value = serde_json::from_str(run.stdout.trim())
        .unwrap_or_else(|e| panic!("kcat -L -J printed no JSON ({e}): {}", run.stdout));

    // Every broker with its Kafka listener's address (not the gRPC one).
    let mut brokers: Vec<(i64, String)> = meta["brokers"]
        .as_array()
        .unwrap_or_else(|| panic!("no brokers list: {meta}"))
        .iter()
        .map(|b| {
            (
                b["id"].as_i64().expect("a broker id"),
                b["name"].as_str().expect("a broker name").to_string(),
            )
        })
        .collect();
    brokers.sort();
    let want: Vec<(i64, String)> = (1..=3)
        .map(|id| (i64::from(id), c.kafka_addr(id).to_string()))
        .collect();
    assert_eq!(brokers, want, "kcat -L brokers: {meta}");

    // The topic's partitions: leader, replicas and ISR as Keel's own DescribeReplicas says.
    let topic = meta["topics"]
        .as_array()
        .expect("a topics list")
        .iter()
        .find(|t| t["topic"] == "listed")
        .unwrap_or_else(|| panic!("topic `listed` not listed: {meta}"));
    assert!(topic.get("error").is_none(), "{topic}");
    let partitions = topic["partitions"].as_array().expect("a partitions list");
    assert_eq!(partitions.len(), assignments.len(), "{topic}");
    for (p, replicas) in assignments.iter().enumerate() {
        let listed = partitions
            .iter()
            .find(|x| x["partition"] == p)
            .unwrap_or_else(|| panic!("partition {p} not listed: {topic}"));
        assert!(listed.get("error").is_none(), "{listed}");
        let keel = c
            .replica(replicas[0], "listed", p as i32)
            .await
            .expect("the leader describes its replica");
        assert_eq!(
            listed["leader"].as_i64(),
            Some(i64::from(keel.leader_id)),
            "partition {p}: {listed}"
        );
        let mut isr: Vec<i64> = keel.isr.iter().map(|b| i64::from(*b)).collect();
        isr.sort_unstable();
        assert_eq!(ids(&listed["isrs"]), isr, "partition {p} ISR: {listed}");
        assert_eq!(isr.len(), 3, "partition {p}: full ISR");
        let mut assigned: Vec<i64> = replicas.iter().map(|b| i64::from(*b)).collect();
        assigned.sort_unstable();
        assert_eq!(
            ids(&listed["replicas"]),
            assigned,
            "partition {p}: {listed}"
        );
    }

    // librdkafka's feature detection from our ApiVersions ranges: per broker connection,
    // "<broker>: Enabling feature X" / "Disabling feature X" lines (librdkafka 2.0.2 prints
    // its "Updated enabled protocol features" summary only for the first, ApiVersion-only
    // step before -L exits). LZ4 too: librdkafka 2.0.2 enables it only if FindCoordinator
    // v0 is advertised, and sends `-z lz4` batches uncompressed otherwise.
    let run = kcat_async(
        strings(&["-L", "-b", &bootstrap, "-d", "feature"]),
        Vec::new(),
    )
    .await;
    let mut enabled: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for l in run.stderr.lines() {
        for (marker, on) in [
            (": Enabling feature ", true),
            (": Disabling feature ", false),
        ] {
            if let Some((prefix, feature)) = l.split_once(marker) {
                let broker = prefix.rsplit("]: ").next().unwrap_or(prefix);
                let set = enabled.entry(broker).or_default();
                if on {
                    set.insert(feature.trim());
                } else {
                    set.remove(feature.trim());
                }
            }
        }
    }
    assert!(
        !enabled.is_empty(),
        "no feature decisions in kcat -d feature:\n{}",
        run.stderr
    );
    for (broker, features) in &enabled {
        for wanted in ["MsgVer2", "IdempotentProducer", "ZSTD", "LZ4"] {
            assert!(
                features.contains(wanted),
                "{broker}: {wanted} not enabled ({features:?}); kcat -d feature:\n{}",
                run.stderr
            );
        }
    }
    eprintln!("librdkafka's enabled features per connection: {enabled:#?}");
}

/// Line `i` of a codec's input: distinct, and repetitive enough that every codec shrinks a
/// batch (librdkafka sends a batch uncompressed when compressing does not pay).
fn line(codec: CompressionType, i: usize) -> String {
    format!("{codec} line {i:04} {}", "abcdefgh".repeat(1 + i % 8))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_kcat_idempotent_acks_all_round_trips_with_each_codec() {
    require_kcat();
    let c = InProcessCluster::start(3, 3);
    c.wait_unfenced(&[1, 2, 3], WAIT).await;
    let bootstrap = c.kafka_bootstrap();
    for codec in CompressionType::ALL {
        let topic = format!("kcat-{codec}");
        c.create_topic(assigned_topic(&topic, &[&[1, 2, 3]]), WAIT)
            .await;
        c.wait_leader_isr(1, &topic, &[1, 2, 3], WAIT).await;

        let lines: Vec<String> = (0..LINES).map(|i| line(codec, i)).collect();
        let input = lines.iter().map(|l| format!("{l}\n")).collect::<String>();
        let started = Instant::now();
        let produced = kcat_async(
            strings(&[
                "-P",
                "-b",
                &bootstrap,
                "-t",
                &topic,
                "-p",
                "0",
                "-X",
                "enable.idempotence=true",
                "-X",
                "acks=all",
                "-z",
                codec.name(),
            ]),
            input.into_bytes(),
        )
        .await;
        let produce_time = started.elapsed();
        assert!(
            !produced.stderr.contains("ERROR") && !produced.stderr.contains("failed"),
            "{codec}: kcat -P reported a failure:\n{}",
            produced.stderr
        );
        // acks=all with the full ISR: every replica holds every line.
        for broker in [1, 2, 3] {
            let r = c.replica(broker, &topic, 0).await.expect("a replica");
            assert_eq!(r.log_end_offset, LINES as i64, "{codec}: broker {broker}");
        }

        let started = Instant::now();
        let consumed = kcat_async(
            strings(&[
                "-C",
                "-b",
                &bootstrap,
                "-t",
                &topic,
                "-p",
                "0",
                "-e",
                "-o",
                "beginning",
                "-f",
                "%o %s\\n",
            ]),
            Vec::new(),
        )
        .await;
        let consume_time = started.elapsed();
        let got: Vec<&str> = consumed.stdout.lines().collect();
        assert_eq!(
            got.len(),
            LINES,
            "{codec}: lines read back; stderr:\n{}",
            consumed.stderr
        );
        for (i, (got, sent)) in got.iter().zip(&lines).enumerate() {
            assert_eq!(*got, format!("{i} {sent}"), "{codec}: line {i}");
        }

        // Stored as sent: every batch the leader serves carries the codec.
        let mut offset = 0;
        let mut batches = 0;
        while offset < LINES as i64 {
            let fetched = c.fetch_once(1, &topic, 0, offset).await.expect("a fetch");
            let before = offset;
            for b in BatchIter::new(fetched.records.clone()) {
                let b = b.expect("a served batch parses");
                assert_eq!(
                    b.compression(),
                    Ok(codec),
                    "{codec}: the batch at {} as stored",
                    b.header().base_offset
                );
                offset = b.header().base_offset + i64::from(b.header().last_offset_delta) + 1;
                batches += 1;
            }
            assert!(offset > before, "{codec}: the fetch at {before} moved on");
        }
        eprintln!(
            "{codec}: {LINES} lines in {batches} batches; kcat -P {produce_time:?}, \
             kcat -C {consume_time:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_kcat_keyed_records_to_three_partitions_read_back_in_order() {
    const RECORDS: usize = 3_000;
    require_kcat();
    let c = InProcessCluster::start(3, 3);
    c.wait_unfenced(&[1, 2, 3], WAIT).await;
    let assignments: &[&[i32]] = &[&[1, 2, 3], &[2, 3, 1], &[3, 1, 2]];
    c.create_topic(assigned_topic("keyed", assignments), WAIT)
        .await;
    wait_full_isr(&c, "keyed", assignments).await;
    let bootstrap = c.kafka_bootstrap();

    // key:value lines; the value carries its sequence number.
    let input: String = (0..RECORDS)
        .map(|i| format!("key-{}:value-{i}\n", i % 13))
        .collect();
    kcat_async(
        strings(&[
            "-P",
            "-b",
            &bootstrap,
            "-t",
            "keyed",
            "-K:",
            "-X",
            "enable.idempotence=true",
            "-X",
            "acks=all",
        ]),
        input.into_bytes(),
    )
    .await;

    let consumed = kcat_async(
        strings(&[
            "-C",
            "-b",
            &bootstrap,
            "-t",
            "keyed",
            "-e",
            "-o",
            "beginning",
            "-f",
            "%p %o %k %s\\n",
        ]),
        Vec::new(),
    )
    .await;
    // partition -> [(offset, key, sequence)] in the order kcat printed them.
    let mut by_partition: BTreeMap<i32, Vec<(i64, String, usize)>> = BTreeMap::new();
    for l in consumed.stdout.lines() {
        let f: Vec<&str> = l.split(' ').collect();
        assert_eq!(f.len(), 4, "a `partition offset key value` line: {l:?}");
        let seq = f[3]
            .strip_prefix("value-")
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("a value-N value: {l:?}"));
        by_partition
            .entry(f[0].parse().expect("a partition"))
            .or_default()
            .push((f[1].parse().expect("an offset"), f[2].to_string(), seq));
    }
    let total: usize = by_partition.values().map(Vec::len).sum();
    assert_eq!(
        total, RECORDS,
        "records read back; stderr:\n{}",
        consumed.stderr
    );
    assert_eq!(
        by_partition.keys().copied().collect::<Vec<_>>(),
        [0, 1, 2],
        "the 13 keys spread over all 3 partitions"
    );
    let mut seen = BTreeSet::new();
    let mut key_partition: BTreeMap<String, i32> = BTreeMap::new();
    for (p, records) in &by_partition {
        // Offsets 0..n in order, and the producer's order within the partition.
        for (i, (offset, key, seq)) in records.iter().enumerate() {
            assert_eq!(*offset, i as i64, "partition {p}: offsets in order");
            if i > 0 {
                assert!(records[i - 1].2 < *seq, "partition {p}: value order at {i}");
            }
            assert_eq!(
                *key,
                format!("key-{}", seq % 13),
                "partition {p} offset {i}"
            );
            assert!(seen.insert(*seq), "value-{seq} read twice");
            let first = *key_partition.entry(key.clone()).or_insert(*p);
            assert_eq!(first, *p, "{key} in partitions {first} and {p}");
        }
        let leader = assignments[*p as usize][0];
        let r = c.replica(leader, "keyed", *p).await.expect("a replica");
        assert_eq!(r.log_end_offset, records.len() as i64, "partition {p}: LEO");
    }
    assert_eq!(seen.len(), RECORDS, "every value read");
}
