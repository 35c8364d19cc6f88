//! Kafka's own Python clients against Keel's Kafka listener, on the real binaries (#21
//! acceptance): confluent-kafka (librdkafka bundled in its wheel) as an idempotent acks=all
//! producer of 100,000 records to 3 partitions while the leader of partition 0 is killed with
//! SIGKILL mid-stream, then a consumer by assignment (assign + seek + offsets_for_times); and
//! kafka-python with its default settings, producing and consuming by assignment (also with
//! gzip, lz4 and zstd batches), and its `KafkaAdminClient` creating, describing and deleting a
//! topic; both admin clients adding partitions and changing a topic config; a topic's
//! `compression.type` and `message.timestamp.type` as both clients see them.
//!
//! The interpreter is the venv `scripts/kafka-clients-venv` creates (`scripts/test` runs it),
//! or `$KEEL_KAFKA_PYTHON`; without it the tests fail and say how to make it.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use keel_tests::Endpoints;
use keel_tests::data::assigned_topic;
use keel_tests::process::Cluster;
use keel_tests::python::{python, run_script, script};

const WAIT: Duration = Duration::from_secs(30);
const RECORDS: usize = 100_000;

async fn cluster_with_topic(topic: &str) -> Cluster {
    let c = Cluster::start(3, 3);
    c.wait_unfenced(&[1, 2, 3], WAIT).await;
    c.create_topic(
        assigned_topic(topic, &[&[1, 2, 3], &[2, 3, 1], &[3, 1, 2]]),
        WAIT,
    )
    .await;
    c.set_topic_config(topic, "min.insync.replicas", "2", WAIT)
        .await;
    c.wait_leader_isr(1, topic, &[1, 2, 3], WAIT).await;
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_confluent_idempotent_stream_survives_a_leader_kill() {
    let topic = "confluent";
    let mut c = cluster_with_topic(topic).await;
    let mut producer = Command::new(python())
        .arg(script("confluent_produce.py"))
        .args([&c.kafka_bootstrap(), topic, &RECORDS.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the confluent-kafka producer");
    let stdout = producer.stdout.take().unwrap();
    let reports = std::thread::spawn(move || std::io::read_to_string(stdout).unwrap());
    let (progress_tx, progress) = std::sync::mpsc::channel();
    let stderr = producer.stderr.take().unwrap();
    let err_lines = std::thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(stderr).lines() {
            let line = line.unwrap();
            let _ = progress_tx.send(line.clone());
            all += &line;
            all.push('\n');
        }
        all
    });
    // Kill partition 0's leader (broker 1) once a fifth of the stream is acknowledged.
    let start = Instant::now();
    let mut killed = false;
    while !killed {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "the producer made no progress"
        );
        match progress.recv_timeout(Duration::from_secs(1)) {
            Ok(line) if line.starts_with("progress ") => {
                let n: usize = line["progress ".len()..].parse().unwrap();
                if n >= RECORDS / 5 {
                    c.kill_broker(1);
                    killed = true;
                    eprintln!("killed broker 1 (SIGKILL) after {n} delivery reports");
                }
            }
            Ok(_) | Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(e) => panic!("the producer ended before the kill: {e}"),
        }
    }
    let status = loop {
        if let Some(s) = producer.try_wait().unwrap() {
            break s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(300),
            "the producer did not finish"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let reports = reports.join().unwrap();
    let err = err_lines.join().unwrap();
    assert!(status.success(), "producer failed ({status}):\n{err}");

    // Every record acknowledged once, at a distinct (partition, offset).
    let mut acked: BTreeMap<(i32, i64), String> = BTreeMap::new();
    for line in reports.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        assert_eq!(f[0], "ok", "{line}");
        let key = (f[1].parse().unwrap(), f[2].parse().unwrap());
        assert!(
            acked.insert(key, f[3].to_string()).is_none(),
            "two records acknowledged at {key:?}"
        );
    }
    assert_eq!(acked.len(), RECORDS);
    let values: BTreeSet<&String> = acked.values().collect();
    assert_eq!(values.len(), RECORDS, "a value acknowledged twice");

    // A consumer by assignment reads exactly the acknowledged records back: nothing lost,
    // nothing duplicated, each at its acknowledged offset; offsets_for_times checked inside.
    let live = format!("{},{}", c.kafka_addr(2), c.kafka_addr(3));
    let consumed = run_script(
        &[
            script("confluent_consume.py").to_str().unwrap(),
            &live,
            topic,
            "3",
        ],
        Duration::from_secs(180),
    );
    let mut read: BTreeMap<(i32, i64), String> = BTreeMap::new();
    for line in consumed.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let key = (f[0].parse().unwrap(), f[1].parse().unwrap());
        assert!(
            read.insert(key, f[3].to_string()).is_none(),
            "offset {key:?} read twice"
        );
    }
    assert_eq!(read.len(), RECORDS, "records read back");
    assert!(
        read == acked,
        "the records read back differ from those acknowledged"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_python_defaults_produce_and_consume_by_assignment() {
    let topic = "kafka-python";
    let c = cluster_with_topic(topic).await;
    let out = run_script(
        &[
            script("kafka_python_basic.py").to_str().unwrap(),
            &c.kafka_bootstrap(),
            topic,
            "1000",
        ],
        Duration::from_secs(120),
    );
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("produced 1000"), "{out}");
    assert_eq!(lines.next(), Some("consumed 1000"), "{out}");
    // Each partition's offsets are 0..n, in order (per-partition order kept).
    let mut next: BTreeMap<i32, i64> = BTreeMap::new();
    for line in lines {
        let f: Vec<&str> = line.split(' ').collect();
        let (p, o): (i32, i64) = (f[0].parse().unwrap(), f[1].parse().unwrap());
        let want = next.entry(p).or_insert(0);
        assert_eq!(o, *want, "partition {p}: {line}");
        *want += 1;
    }
    assert_eq!(next.values().sum::<i64>(), 1000);
}

/// kafka-python producing gzip, lz4 and zstd batches (its `compression_type`) and reading
/// them back: the broker validates and stores each codec's batches as sent, and the client
/// decompresses what it fetches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_python_compressed_batches_round_trip() {
    let c = Cluster::start(3, 3);
    c.wait_unfenced(&[1, 2, 3], WAIT).await;
    for codec in ["gzip", "lz4", "zstd"] {
        let topic = format!("kafka-python-{codec}");
        c.create_topic(
            assigned_topic(&topic, &[&[1, 2, 3], &[2, 3, 1], &[3, 1, 2]]),
            WAIT,
        )
        .await;
        c.wait_leader_isr(1, &topic, &[1, 2, 3], WAIT).await;
        let out = run_script(
            &[
                script("kafka_python_basic.py").to_str().unwrap(),
                &c.kafka_bootstrap(),
                &topic,
                "500",
                codec,
            ],
            Duration::from_secs(120),
        );
        let mut lines = out.lines();
        assert_eq!(lines.next(), Some("produced 500"), "{codec}: {out}");
        assert_eq!(lines.next(), Some("consumed 500"), "{codec}: {out}");
    }
}

/// A topic created by confluent-kafka with `compression.type=zstd` and
/// `message.timestamp.type=LogAppendTime`: uncompressed batches with an old CreateTime are
/// read back by both clients with the broker's append time, and every replica stores them as
/// zstd batches of the LogAppendTime type (Kafka `LogValidator`); a codec Kafka does not know
/// is refused INVALID_CONFIG.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_clients_get_the_topics_codec_and_log_append_time() {
    use keel_record::{BatchIter, TIMESTAMP_TYPE_BIT, compression::CompressionType};
    let c = Cluster::start(3, 3);
    c.wait_unfenced(&[1, 2, 3], WAIT).await;
    let out = run_script(
        &[
            script("topic_format.py").to_str().unwrap(),
            &c.kafka_bootstrap(),
            "formatted",
        ],
        Duration::from_secs(180),
    );
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            "created",
            "brotli refused INVALID_CONFIG",
            "produced 200",
            "confluent-kafka: log append time on every record",
            "kafka-python: log append time on every record",
        ],
        "{out}"
    );
    // Every replica's segment files: zstd batches stamped LogAppendTime, 200 records in all
    // (a follower may still be copying the last batches).
    let stored = |id: i32| -> Vec<(i16, i32)> {
        let dir = c.broker_data_dir(id).join("formatted-0");
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "log"))
            .collect();
        files.sort();
        files
            .iter()
            .flat_map(|f| {
                BatchIter::new(std::fs::read(f).unwrap().into())
                    .map_while(Result::ok)
                    .map(|b| (b.header().attributes, b.header().record_count))
                    .collect::<Vec<_>>()
            })
            .collect()
    };
    for id in [1, 2, 3] {
        let deadline = Instant::now() + WAIT;
        let batches = loop {
            let b = stored(id);
            if b.iter().map(|(_, n)| n).sum::<i32>() == 200 || Instant::now() > deadline {
                break b;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert_eq!(
            batches.iter().map(|(_, n)| n).sum::<i32>(),
            200,
            "broker {id}: {batches:?}"
        );
        for (attributes, _) in &batches {
            assert_eq!(
                CompressionType::from_attributes(*attributes),
                Ok(CompressionType::Zstd),
                "broker {id}: {batches:?}"
            );
            assert_ne!(
                attributes & TIMESTAMP_TYPE_BIT,
                0,
                "broker {id}: {batches:?}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_python_admin_creates_describes_and_deletes_a_topic() {
    let c = Cluster::start(3, 3);
    c.wait_unfenced(&[1, 2, 3], WAIT).await;
    let out = run_script(
        &[
            script("kafka_python_admin.py").to_str().unwrap(),
            &c.kafka_bootstrap(),
            "admin-topic",
        ],
        Duration::from_secs(120),
    );
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            "created",
            "described partitions=3 replicas=3",
            "configs min.insync.replicas=2",
            "deleted"
        ],
        "{out}"
    );
    // Keel's own view agrees: the topic is gone.
    let m = c.try_metadata(1, &["admin-topic"]).await.unwrap();
    assert!(m.topics.iter().all(|t| t.partitions.is_empty()), "{m:?}");
}

/// confluent-kafka's and kafka-python's admin clients add partitions (CreatePartitions),
/// change a topic config (IncrementalAlterConfigs), ask for a leader election (ElectLeaders)
/// and reassign a partition (Alter/ListPartitionReassignments) through the Kafka listener, and
/// a shrink is refused with INVALID_PARTITIONS; Keel's own view agrees afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_clients_alter_partitions_leaders_assignments_and_configs() {
    let c = Cluster::start(3, 3);
    c.wait_unfenced(&[1, 2, 3], WAIT).await;
    let out = run_script(
        &[
            script("admin_alter.py").to_str().unwrap(),
            &c.kafka_bootstrap(),
            "alter-topic",
        ],
        Duration::from_secs(120),
    );
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            "created partitions=2",
            "confluent create_partitions 4",
            "confluent elect_leaders ELECTION_NOT_NEEDED",
            "confluent incremental_alter_configs retention.ms=60000",
            "confluent shrink refused INVALID_PARTITIONS",
            "kafka-python create_partitions 6",
            "kafka-python alter_configs retention.ms=120000",
            "kafka-python alter_partition_reassignments reversed partition 0",
            "kafka-python describe_log_dirs 6 partitions on each broker",
            "confluent alter_configs segment.bytes=1048576 retention.ms reset",
            "kafka-python legacy alter_configs retention.ms=90000 segment.bytes=1048576",
            "broker 1 authorizer.class.name=''",
            "kafka-python delete_group_offsets while subscribed GroupSubscribedToTopicError",
            "kafka-python delete_group_offsets after leaving NoError left [1, 2, 3, 4, 5]",
            "kafka-python delete_group_offsets unknown group GroupIdNotFoundError",
            "confluent delete_records low_watermark=5",
            "kafka-python delete_records low_watermark=12",
            "first record after delete_records (12, 'r12')",
        ],
        "{out}"
    );
    let m = c.try_metadata(1, &["alter-topic"]).await.unwrap();
    assert_eq!(m.topics[0].partitions.len(), 6, "{m:?}");
}

/// Refusals reach Kafka's clients as clear errors at once (fresh-user trial, session 34): a
/// topic name over 249 characters is INVALID_TOPIC_EXCEPTION for confluent-kafka's
/// AdminClient (the result echoes the name as sent; a shortened one was a `_BAD_MSG` parse
/// failure), and a transactional producer's `init_transactions()` fails with a fatal
/// TRANSACTIONAL_ID_AUTHORIZATION_FAILED in librdkafka and kafka-python (it used to retry
/// FindCoordinator every 500 ms until its timeout).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_clients_get_long_names_and_transactions_refused_at_once() {
    let c = Cluster::start(3, 3);
    c.wait_unfenced(&[1, 2, 3], WAIT).await;
    let out = run_script(
        &[
            script("refusals.py").to_str().unwrap(),
            &c.kafka_bootstrap(),
        ],
        Duration::from_secs(240),
    );
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            "create TOPIC_EXCEPTION", // librdkafka's name for INVALID_TOPIC_EXCEPTION (17)
            "txn TRANSACTIONAL_ID_AUTHORIZATION_FAILED fatal=True",
            "kp-txn TransactionalIdAuthorizationFailedError",
        ],
        "{out}"
    );
}
