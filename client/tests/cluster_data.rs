//! The data plane end to end against real processes (3 controllers + 3 brokers from
//! `keelctl cluster up`): keelctl produce / consume / verify, and the `Producer` /
//! `Consumer` API across a `kill -9` of a partition leader.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use common::Fixture;
use keel_client::brokers::Brokers;
use keel_client::consumer::{ConsumeError, Consumer, ConsumerConfig, ConsumerRecord, SeekTo};
use keel_client::producer::partitioner::key_partition;
use keel_client::producer::{Producer, ProducerConfig, RecordMetadata};
use serde_json::Value;

fn lines(out: &std::process::Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

#[test]
fn keelctl_produce_consume_verify_round_trip() {
    let f = Fixture::fresh();
    f.cluster("up", &["--timeout-secs", "120"]);
    f.json(&[
        "--json",
        "topic",
        "create",
        "events",
        "--partitions",
        "3",
        "--replication-factor",
        "3",
    ]);

    // 300 keyed lines through stdin.
    let input: String = (0..300).map(|i| format!("k{i}:v{i}\n")).collect();
    let out = f.run_with_stdin(
        &[
            "--json",
            "produce",
            "--topic",
            "events",
            "--key-separator",
            ":",
        ],
        &input,
    );
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        f.logs()
    );
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["records"], 300, "{summary}");
    // The segments on disk, read offline (`keelctl log dump`, like kafka-dump-log): every
    // record of the 3 partitions on broker 1 (a replica of each; acks=all), CRCs valid.
    let mut dumped = std::collections::BTreeSet::new();
    for p in 0..3 {
        let dir = format!("{}/broker-1/events-{p}", f.data_dir());
        let out = f.run(&["--json", "log", "dump", "--dir", &dir, "--deep"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        for batch in lines(&out) {
            assert_eq!(batch["crc_valid"], true, "{batch}");
            for r in batch["records"].as_array().unwrap() {
                dumped.insert(r["value"].as_str().unwrap().to_string());
            }
        }
    }
    let want: std::collections::BTreeSet<String> = (0..300).map(|i| format!("v{i}")).collect();
    assert_eq!(dumped, want);
    let out = f.run(&["log", "dump", "--dir", "/nonexistent/events-0"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "a missing path is a usage error"
    );
    // A topic that does not exist: one error naming it and what to do, within the delivery
    // timeout given (not the producer's 10 s max_block_ms), before any input is read.
    let started = Instant::now();
    let out = f.run_with_stdin(
        &[
            "produce",
            "--topic",
            "no-such-topic",
            "--delivery-timeout-ms",
            "1500",
            "--request-timeout-ms",
            "1000",
        ],
        "a\nb\n",
    );
    let took = started.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("topic \"no-such-topic\" is not known to the brokers after 1.5 s")
            && stderr.contains("create it first (keelctl topic create)"),
        "{stderr}"
    );
    assert!(took < Duration::from_secs(6), "{took:?}");
    assert!(out.stdout.is_empty(), "no summary for nothing sent");
    assert_eq!(summary["failed"], 0, "{summary}");
    assert_eq!(
        summary["partitions"],
        serde_json::json!([0, 1, 2]),
        "{summary}"
    );
    let bytes: u64 = (0..300).map(|i| format!("k{i}v{i}").len() as u64).sum();
    assert_eq!(summary["bytes"], bytes);

    // Everything back, each key on Kafka's murmur2 partition, in send order per partition
    // and at consecutive offsets from 0.
    let out = f.run(&["--json", "consume", "--topic", "events", "--from-beginning"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let recs = lines(&out);
    assert_eq!(recs.len(), 300);
    let mut per_partition: BTreeMap<i64, Vec<(i64, u64)>> = BTreeMap::new();
    for r in &recs {
        let key = r["key"].as_str().unwrap();
        let i: u64 = key[1..].parse().unwrap();
        assert_eq!(r["value"], format!("v{i}"));
        let p = r["partition"].as_i64().unwrap();
        assert_eq!(p, key_partition(key.as_bytes(), 3) as i64, "{r}");
        per_partition
            .entry(p)
            .or_default()
            .push((r["offset"].as_i64().unwrap(), i));
    }
    assert_eq!(per_partition.len(), 3);
    for (p, rs) in &per_partition {
        let offsets: Vec<i64> = rs.iter().map(|r| r.0).collect();
        assert_eq!(
            offsets,
            (0..rs.len() as i64).collect::<Vec<_>>(),
            "partition {p}"
        );
        assert!(
            rs.windows(2).all(|w| w[0].1 < w[1].1),
            "order in {p}: {rs:?}"
        );
    }

    // One partition from an offset, text output with offset and key.
    let (p, rs) = per_partition.iter().next().unwrap();
    let out = f.run(&[
        "consume",
        "--topic",
        "events",
        "--partition",
        &p.to_string(),
        "--offset",
        "2",
        "--max-records",
        "1",
        "--print-offset",
        "--print-key",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let i = rs[2].1;
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("Partition:{p}\tOffset:2\tk{i}\tv{i}\n")
    );
    // An offset past the end is a typed one-line error, not an empty success.
    let err = f.fails(&["consume", "--topic", "events", "--offset", "100000"]);
    assert!(
        err.starts_with(&format!(
            "keelctl: events-0: offset 100000 is out of range (OFFSET_OUT_OF_RANGE (1)): valid \
             offsets are 0 (the log start offset) to {} (the high watermark",
            per_partition.get(&0).map_or(0, Vec::len)
        )),
        "{err}"
    );
    // So is a negative one (not clap's "unexpected argument").
    let err = f.fails(&["consume", "--topic", "events", "--offset", "-5"]);
    assert!(
        err.starts_with("keelctl: events-0: offset -5 is out of range (OFFSET_OUT_OF_RANGE (1))"),
        "{err}"
    );
    // --latest without --follow: nothing new.
    let out = f.run(&["--json", "consume", "--topic", "events", "--latest"]);
    assert!(out.status.success());
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );

    // A file with a progress bar (stderr is not a terminal: the bar stays hidden).
    let file = f.dir.path().join("lines.txt");
    std::fs::write(&file, "a\nb\nc\n").unwrap();
    let out = f.run(&[
        "--json",
        "produce",
        "--topic",
        "events",
        "--file",
        file.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["records"], 3, "{summary}");

    // verify on a healthy cluster.
    let report = f.json(&["--json", "verify", "--topic", "events", "--records", "500"]);
    assert_eq!(report["produced"], 500, "{report}");
    assert_eq!(report["acknowledged"], 500, "{report}");
    assert_eq!(report["read"], 500, "{report}");
    assert_eq!(report["lost"], 0, "{report}");
    assert_eq!(report["duplicated"], 0, "{report}");
    assert_eq!(report["reordered"], 0, "{report}");

    // One-line errors: unknown topic, missing separator.
    let err = f.fails(&["consume", "--topic", "nope"]);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("UNKNOWN_TOPIC_OR_PARTITION"), "{err}");
    let out = f.run_with_stdin(
        &["produce", "--topic", "events", "--key-separator", ":"],
        "ok:1\nno-separator\n",
    );
    assert!(!out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "keelctl: line 2: no key separator \":\"\n"
    );
    // A record over max.message.bytes: the broker's reason, with both sizes, reaches the user.
    let big = "x".repeat(2 << 20) + "\n";
    let out = f.run_with_stdin(&["produce", "--topic", "events"], big);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("MESSAGE_TOO_LARGE (10): record batch of ")
            && err.contains("exceeds max.message.bytes "),
        "{err}"
    );
    // An empty separator is a usage error (exit 2), before anything is read.
    let out = f.run_with_stdin(
        &["produce", "--topic", "events", "--key-separator", ""],
        "a:b\n",
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("the key separator must not be empty"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Lines are bytes: not-UTF-8 keys and values arrive byte for byte; `--acks -1` is
    // Kafka's synonym of `all`.
    f.json(&["--json", "topic", "create", "bytes", "--partitions", "1"]);
    let out = f.run_with_stdin(
        &[
            "--json",
            "produce",
            "--topic",
            "bytes",
            "--acks",
            "-1",
            "--key-separator",
            ":",
        ],
        b"k\xff:v\xfe\x00x\r\nplain:text\n".as_slice(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["records"], 2, "{summary}");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let recs = runtime.block_on(async {
        let mut consumer = Consumer::new(ConsumerConfig::new(f.brokers())).unwrap();
        read_all(&mut consumer, "bytes").await
    });
    let got: Vec<_> = recs
        .iter()
        .map(|r| (r.key.as_deref(), r.value.as_deref()))
        .collect();
    assert_eq!(
        got,
        vec![
            (Some(&b"k\xff"[..]), Some(&b"v\xfe\x00x"[..])),
            (Some(&b"plain"[..]), Some(&b"text"[..])),
        ]
    );

    // A poll returns the first leader's records without waiting out the long polls of idle
    // leaders (one fetch in flight per leader, as Kafka's Fetcher): six partitions on
    // three brokers, one record in one of them. Polls waited for every leader, so each took
    // the whole max wait (found by the fresh-user trial: 11.7 s to read 100 records from
    // three partitions that each read in 0.05 s).
    f.json(&[
        "--json",
        "topic",
        "create",
        "spread",
        "--partitions",
        "6",
        "--replication-factor",
        "1",
    ]);
    let out = f.run_with_stdin(&["produce", "--topic", "spread"], "only\n");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (records, took) = runtime.block_on(async {
        let mut consumer = Consumer::new(ConsumerConfig::new(f.brokers())).unwrap();
        let tps = consumer.partitions_of("spread").await.unwrap();
        consumer.assign(tps.clone());
        for tp in &tps {
            consumer.seek(tp, SeekTo::Earliest).await.unwrap();
        }
        let started = Instant::now();
        let records = consumer.poll(Duration::from_secs(20)).await.unwrap();
        (records, started.elapsed())
    });
    let values: Vec<_> = records.iter().map(|r| r.value.as_deref()).collect();
    assert_eq!(values, [Some(&b"only"[..])]);
    assert!(
        took < Duration::from_secs(10),
        "the poll waited {took:?} for idle leaders' long polls of 20 s"
    );

    // An offline partition does not stop the others (Kafka's console consumer reads what it
    // can): keyed records in every partition, the broker holding partition 0 (and one other,
    // RF 1) killed, then `keelctl consume` reads the other four and warns about the two (it
    // exited 1 after the API timeout with nothing printed, found by the fresh-user trial).
    // Their lookups run at once: one API timeout (5 s), not one per offline partition.
    let input: String = (0..30).map(|i| format!("k{i}:v{i}\n")).collect();
    let out = f.run_with_stdin(
        &["produce", "--topic", "spread", "--key-separator", ":"],
        &input,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let p0 = f.wait_partition("spread", "a leader", |p| p["leader"].as_i64() >= Some(0));
    let victim = p0["leader"].as_i64().unwrap();
    let described = f.json(&["--json", "topic", "describe", "spread"]);
    let offline: Vec<i32> = described[0]["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["leader"].as_i64() == Some(victim))
        .map(|p| p["partition"].as_i64().unwrap() as i32)
        .collect();
    assert_eq!(offline.len(), 2, "{described}");
    f.kill9_broker(victim as i32);
    f.wait_partition("spread", "offline", |p| p["leader"].as_i64() == Some(-1));
    let started = Instant::now();
    let out = f.run(&[
        "consume",
        "--topic",
        "spread",
        "--api-timeout-ms",
        "5000",
        "--request-timeout-ms",
        "1000",
    ]);
    let took = started.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    for p in &offline {
        assert!(
            stderr.contains(&format!("spread-{p}")) && stderr.contains("offline"),
            "{stderr}"
        );
    }
    assert!(
        took < Duration::from_secs(9),
        "the offline partitions' lookups ran one after the other: {took:?}"
    );
    let mut read: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(String::from)
        .collect();
    read.sort();
    let mut want: Vec<String> = (0..30)
        .filter(|i| !offline.contains(&key_partition(format!("k{i}").as_bytes(), 6)))
        .map(|i| format!("v{i}"))
        .collect();
    if !offline.contains(&records[0].partition) {
        want.push("only".into());
    }
    want.sort();
    assert_eq!(read, want);
}

/// Sends `count` values `{prefix}-{i}` one after another in the background of the returned
/// deliveries (unkeyed: sticky partitioning spreads them).
async fn send_all(
    producer: &Producer,
    topic: &str,
    prefix: &str,
    range: std::ops::Range<u64>,
) -> Vec<(u64, keel_client::producer::Delivery)> {
    let mut out = Vec::new();
    for i in range {
        let d = producer
            .send(topic, None, format!("{prefix}-{i}").as_bytes())
            .await
            .unwrap();
        out.push((i, d));
    }
    out
}

/// Reads every record of `topic` (all partitions) from the beginning to the current HW.
async fn read_all(consumer: &mut Consumer, topic: &str) -> Vec<ConsumerRecord> {
    let tps = consumer.partitions_of(topic).await.unwrap();
    consumer.assign(tps.clone());
    let mut ends = HashMap::new();
    for tp in &tps {
        consumer.seek(tp, SeekTo::Earliest).await.unwrap();
        ends.insert(tp.clone(), consumer.end_offset(tp).await.unwrap());
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut out = Vec::new();
    while tps
        .iter()
        .any(|tp| consumer.position(tp).unwrap() < ends[tp])
    {
        assert!(Instant::now() < deadline, "reading {topic} took too long");
        out.extend(consumer.poll(Duration::from_millis(200)).await.unwrap());
    }
    out
}

#[test]
fn producer_stream_survives_kill9_of_a_partition_leader() {
    let f = Fixture::fresh();
    f.cluster("up", &["--timeout-secs", "120"]);
    f.json(&[
        "--json",
        "topic",
        "create",
        "stream",
        "--partitions",
        "2",
        "--replication-factor",
        "3",
        "--config",
        "min.insync.replicas=2",
    ]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut cfg = ProducerConfig::new(f.brokers());
        cfg.batch_size_bytes = 512;
        let producer = Producer::new(cfg).unwrap();
        let brokers = Brokers::new(f.brokers(), Duration::from_secs(5));

        // Phase 1: a first part of the stream, acknowledged.
        let mut acked: Vec<(u64, RecordMetadata)> = Vec::new();
        for (i, d) in send_all(&producer, "stream", "r", 0..300).await {
            let m = d
                .await
                .unwrap_or_else(|e| panic!("record {i} not delivered: {e}\n{}", f.logs()));
            acked.push((i, m));
        }
        // kill -9 the leader of partition 0 while the next part is in flight.
        let before = brokers.refresh("stream").await.unwrap().partitions[0];
        let pending = send_all(&producer, "stream", "r", 300..600).await;
        f.kill9_broker(before.leader_id);
        let more = send_all(&producer, "stream", "r", 600..900).await;
        for (i, d) in pending.into_iter().chain(more) {
            let m = d
                .await
                .unwrap_or_else(|e| panic!("record {i} not delivered: {e}\n{}", f.logs()));
            acked.push((i, m));
        }
        producer.flush().await;
        assert!(
            producer.retries() > 0,
            "the stream went through the retry path"
        );
        let after = brokers.refresh("stream").await.unwrap().partitions[0];
        assert_ne!(after.leader_id, before.leader_id, "leader moved");
        assert!(after.leader_epoch > before.leader_epoch);

        // Every acknowledged record exactly once, at its acknowledged offset, in send order
        // per partition.
        let mut consumer = Consumer::new(ConsumerConfig::new(f.brokers())).unwrap();
        let records = read_all(&mut consumer, "stream").await;
        let mut by_value: HashMap<String, Vec<(i32, i64)>> = HashMap::new();
        for r in &records {
            let v = String::from_utf8(r.value.clone().unwrap().to_vec()).unwrap();
            by_value.entry(v).or_default().push((r.partition, r.offset));
        }
        assert_eq!(acked.len(), 900);
        for (i, m) in &acked {
            let got = by_value.get(&format!("r-{i}")).map(Vec::as_slice);
            assert_eq!(got, Some(&[(m.partition, m.offset)][..]), "record {i}");
        }
        assert_eq!(records.len(), 900, "no extra records");
        let mut last: HashMap<i32, u64> = HashMap::new();
        for r in &records {
            let v = String::from_utf8(r.value.clone().unwrap().to_vec()).unwrap();
            let i: u64 = v[2..].parse().unwrap();
            if let Some(prev) = last.insert(r.partition, i) {
                assert!(prev < i, "partition {}: {prev} before {i}", r.partition);
            }
        }

        // Seeks on the surviving cluster: earliest, latest, an offset, a timestamp, and an
        // out-of-range offset reported as a typed error.
        let tp = ("stream".to_string(), 0);
        let in_p0: Vec<&ConsumerRecord> = records.iter().filter(|r| r.partition == 0).collect();
        assert!(in_p0.len() > 10);
        consumer.assign([tp.clone()]);
        assert_eq!(consumer.seek(&tp, SeekTo::Earliest).await.unwrap(), 0);
        let hw = consumer.seek(&tp, SeekTo::Latest).await.unwrap();
        assert_eq!(hw, in_p0.len() as i64);
        assert!(
            consumer
                .poll(Duration::from_millis(100))
                .await
                .unwrap()
                .is_empty()
        );
        consumer.seek(&tp, SeekTo::Offset(5)).await.unwrap();
        let got = consumer.poll(Duration::from_millis(100)).await.unwrap();
        assert_eq!(got[0].offset, 5);
        assert_eq!(got[0].value, in_p0[5].value);
        let ts = in_p0[7].timestamp_ms;
        let at = consumer.seek(&tp, SeekTo::Timestamp(ts)).await.unwrap();
        assert!(at <= 7, "first offset with timestamp >= {ts} is {at}");
        assert!(in_p0[at as usize].timestamp_ms >= ts);
        consumer.seek(&tp, SeekTo::Offset(hw + 100)).await.unwrap();
        let err = consumer.poll(Duration::from_millis(100)).await.unwrap_err();
        assert_eq!(
            err,
            ConsumeError::OffsetOutOfRange {
                topic: "stream".into(),
                partition: 0,
                offset: hw + 100
            }
        );
    });
}

/// KIP-320 on real processes: a consumer that read records which an unclean election then
/// threw away gets `LogTruncation` from its next poll instead of silently reading on.
#[test]
fn consumer_reports_log_truncation_after_an_unclean_election() {
    let f = Fixture::fresh();
    f.cluster("up", &["--timeout-secs", "120"]);
    f.json(&[
        "--json",
        "topic",
        "create",
        "trunc",
        "--partitions",
        "1",
        "--replication-factor",
        "2",
    ]);
    let p = f.wait_partition("trunc", "a leader", |p| p["leader"].as_i64() >= Some(1));
    let leader = p["leader"].as_i64().unwrap() as i32;
    let follower = p["replicas"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_i64().unwrap() as i32)
        .find(|r| *r != leader)
        .unwrap();

    // The follower dies first: the ISR shrinks to the leader alone, and 10 records are
    // committed (HW 10) that only the leader holds.
    f.kill9_broker(follower);
    f.wait_partition("trunc", "ISR = [leader]", |p| {
        p["isr"] == serde_json::json!([leader])
    });
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut consumer = Consumer::new(ConsumerConfig::new(f.brokers())).unwrap();
    let tp = ("trunc".to_string(), 0);
    let epoch = rt.block_on(async {
        let producer = Producer::new(ProducerConfig::new(f.brokers())).unwrap();
        for (_, d) in send_all(&producer, "trunc", "t", 0..10).await {
            d.await.unwrap();
        }
        consumer.assign([tp.clone()]);
        consumer.seek(&tp, SeekTo::Earliest).await.unwrap();
        let mut got = Vec::new();
        while got.len() < 10 {
            got.extend(consumer.poll(Duration::from_millis(500)).await.unwrap());
        }
        assert_eq!(consumer.position(&tp), Some(10));
        got[9].leader_epoch
    });

    // The leader dies, the empty follower comes back alone and is elected uncleanly.
    f.kill9_broker(leader);
    f.wait_partition("trunc", "offline", |p| p["leader"] == -1);
    let layout =
        keel_client::local_cluster::Layout::new(f.dir.path().join("keel-data"), f.base).unwrap();
    let spec = layout
        .processes()
        .into_iter()
        .find(|s| s.name() == format!("broker-{follower}"))
        .unwrap();
    let bin = common::sibling_binary("keel-broker");
    let mut restarted = keel_client::local_cluster::spawn(&layout, &spec, &bin).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = f.run(&["partition", "elect", "--topic", "trunc", "--unclean"]);
        let p = f.wait_partition("trunc", "described", |_| true);
        if p["leader"] == follower {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "unclean election did not happen: {p} {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            f.logs()
        );
        std::thread::sleep(Duration::from_millis(300));
    }

    // The next polls follow the leader change and detect the truncation.
    let err = rt.block_on(async {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match consumer.poll(Duration::from_millis(200)).await {
                Ok(recs) => assert!(recs.is_empty(), "read past a truncation: {recs:?}"),
                Err(e) => return e,
            }
            assert!(Instant::now() < deadline, "no truncation reported");
        }
    });
    match &err {
        ConsumeError::LogTruncation {
            topic,
            partition,
            position,
            epoch: e,
            end_offset,
            ..
        } => {
            assert_eq!((topic.as_str(), *partition), ("trunc", 0));
            assert_eq!(*position, 10);
            assert_eq!(*e, epoch);
            assert!(*end_offset < 10, "{err}");
        }
        other => panic!("expected LogTruncation, got {other}"),
    }
    // It stays reported until the consumer seeks.
    let again = rt.block_on(consumer.poll(Duration::from_millis(100)));
    assert_eq!(again.unwrap_err(), err);
    rt.block_on(async {
        assert_eq!(consumer.seek(&tp, SeekTo::Earliest).await.unwrap(), 0);
        assert!(
            consumer
                .poll(Duration::from_millis(100))
                .await
                .unwrap()
                .is_empty()
        );
    });
    // Stop the cluster and reap the broker this test spawned itself.
    f.cluster("down", &[]);
    restarted.wait().unwrap();
}

/// `keelctl topic alter --partitions` under a running producer (KIP-195): the producer finds
/// the new partitions at its next metadata refresh (`metadata_max_age_ms`), keyed records go
/// to them (murmur2(key) % the new count), they have leaders and hold data, and every
/// acknowledged record is read back once, at its acknowledged partition and offset. Also the
/// command's refusals: not an increase (INVALID_PARTITIONS, exit 1), a malformed assignment
/// (usage, exit 2).
#[test]
fn adding_partitions_under_a_running_producer_loses_nothing() {
    let f = Fixture::fresh();
    f.cluster("up", &["--timeout-secs", "120"]);
    f.json(&[
        "--json",
        "topic",
        "create",
        "grow",
        "--partitions",
        "1",
        "--replication-factor",
        "3",
    ]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut cfg = ProducerConfig::new(f.brokers());
        cfg.batch_size_bytes = 512;
        cfg.metadata_max_age_ms = 300;
        let producer = Producer::new(cfg).unwrap();
        let mut acked: Vec<(u64, RecordMetadata)> = Vec::new();
        let mut next = 0u64;
        let mut grown = false;
        // Keep producing until records reach the new partitions (bounded: 60 rounds).
        for _ in 0..60 {
            let mut pending = Vec::new();
            for i in next..next + 50 {
                let key = format!("k{i}");
                let d = producer
                    .send("grow", Some(key.as_bytes()), format!("g-{i}").as_bytes())
                    .await
                    .unwrap();
                pending.push((i, d));
            }
            next += 50;
            for (i, d) in pending {
                let m = d
                    .await
                    .unwrap_or_else(|e| panic!("record {i} not delivered: {e}\n{}", f.logs()));
                acked.push((i, m));
            }
            if !grown {
                let out = f.json(&["--json", "topic", "alter", "grow", "--partitions", "3"]);
                assert_eq!(out["partitions"], 3, "{out}");
                grown = true;
            }
            let used: std::collections::BTreeSet<i32> =
                acked.iter().map(|(_, m)| m.partition).collect();
            if used.len() == 3 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        producer.flush().await;
        let used: std::collections::BTreeSet<i32> =
            acked.iter().map(|(_, m)| m.partition).collect();
        assert_eq!(
            used.into_iter().collect::<Vec<_>>(),
            [0, 1, 2],
            "{}",
            f.logs()
        );
        let after_growth: Vec<_> = acked.iter().filter(|(_, m)| m.partition > 0).collect();
        for (i, m) in &after_growth {
            assert_eq!(
                key_partition(format!("k{i}").as_bytes(), 3),
                m.partition,
                "record {i}: murmur2(key) % 3"
            );
        }

        let mut consumer = Consumer::new(ConsumerConfig::new(f.brokers())).unwrap();
        let records = read_all(&mut consumer, "grow").await;
        let mut by_value: HashMap<String, Vec<(i32, i64)>> = HashMap::new();
        for r in &records {
            let v = String::from_utf8(r.value.clone().unwrap().to_vec()).unwrap();
            by_value.entry(v).or_default().push((r.partition, r.offset));
        }
        for (i, m) in &acked {
            let got = by_value.get(&format!("g-{i}")).map(Vec::as_slice);
            assert_eq!(got, Some(&[(m.partition, m.offset)][..]), "record {i}");
        }
        assert_eq!(records.len(), acked.len(), "no extra records");
        producer.close().await;
    });

    let e = f.fails(&["topic", "alter", "grow", "--partitions", "2"]);
    assert!(
        e.contains("INVALID_PARTITIONS") && e.contains("can only be added"),
        "{e}"
    );
    let out = f.run(&[
        "topic",
        "alter",
        "grow",
        "--partitions",
        "4",
        "--replica-assignment",
        "1:x",
    ]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let out = f.run(&[
        "topic",
        "alter",
        "grow",
        "--partitions",
        "5",
        "--replica-assignment",
        "101:102",
    ]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("give the 2 new one(s), or all 5"),
        "{stderr}"
    );
}
