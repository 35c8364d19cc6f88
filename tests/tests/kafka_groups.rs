//! Consumer groups through Kafka's own clients on the real binaries (#22 acceptance): kcat's
//! balanced consumer (`-G`), confluent-kafka and kafka-python. Members of one group split a
//! 6-partition topic, a leaving member's partitions go to the other, and a member joining
//! after the others committed and left resumes exactly at the committed offsets: across the
//! whole run every record is read once. Also: SIGKILL of the group's coordinator in a
//! consume-and-commit loop (nothing lost, the pause measured), and `keelctl group`.
//!
//! kcat is the Debian package `kcat`; the Python clients come from the venv
//! `scripts/kafka-clients-venv` makes (see [`keel_tests::python`]). Missing tools fail the
//! tests, never skip them.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use keel_tests::Endpoints;
use keel_tests::data::assigned_topic;
use keel_tests::process::{Cluster, Options};
use keel_tests::python::{run_script, script};

const WAIT: Duration = Duration::from_secs(30);
const PARTITIONS: i32 = 6;

/// 3 controllers and 3 brokers, `__consumer_offsets` with 6 partitions (Kafka's default
/// is 50; fewer keep the test's disk work small), and `topic` with 6 partitions, RF 3.
async fn cluster_with_topic(topic: &str) -> Cluster {
    cluster_with_topic_opts(topic, Options::default()).await
}

/// [`cluster_with_topic`] with more `options`.
async fn cluster_with_topic_opts(topic: &str, options: Options) -> Cluster {
    let mut broker_args = vec!["--offsets-topic-num-partitions".into(), "6".into()];
    broker_args.extend(options.broker_args.iter().cloned());
    let c = Cluster::start_opts(
        3,
        3,
        Options {
            broker_args,
            ..options
        },
    );
    c.wait_unfenced(&[1, 2, 3], WAIT).await;
    let replicas: Vec<Vec<i32>> = (0..PARTITIONS)
        .map(|p| (0..3).map(|i| (p + i) % 3 + 1).collect())
        .collect();
    let refs: Vec<&[i32]> = replicas.iter().map(|r| r.as_slice()).collect();
    c.create_topic(assigned_topic(topic, &refs), WAIT).await;
    c.wait_leader_isr(1, topic, &[1, 2, 3], WAIT).await;
    c
}

/// Produces `count` records `v-<start + i>` keyed `k<start + i>` with kcat, acks=all. Keyed:
/// librdkafka's sticky partitioner would put a burst of keyless records into one partition.
fn kcat_produce(bootstrap: &str, topic: &str, start: usize, count: usize) {
    kcat_produce_with(bootstrap, topic, start, count, &[]);
}

/// [`kcat_produce`] with `extra` kcat arguments.
fn kcat_produce_with(bootstrap: &str, topic: &str, start: usize, count: usize, extra: &[&str]) {
    let mut child = Command::new("kcat")
        .args([
            "-P", "-b", bootstrap, "-t", topic, "-X", "acks=all", "-K", ":",
        ])
        .args(extra)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kcat is not installed: apt-get install kcat");
    {
        let mut stdin = child.stdin.take().unwrap();
        for i in start..start + count {
            writeln!(stdin, "k{i}:v-{i}").unwrap();
        }
    }
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "kcat -P: {out:?}");
}

/// Parses `r <member> <partition> <offset> <value>` lines: (member, partition, offset, value).
fn reads(out: &str) -> Vec<(String, i32, i64, String)> {
    out.lines()
        .filter_map(|l| l.strip_prefix("r "))
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (
                f[0].to_string(),
                f[1].parse().unwrap(),
                f[2].parse().unwrap(),
                f[3].to_string(),
            )
        })
        .collect()
}

/// Every value `v-0 .. v-(count-1)` read exactly once, each (partition, offset) once.
fn assert_read_once(reads: &[(String, i32, i64, String)], count: usize) {
    let mut at: BTreeSet<(i32, i64)> = BTreeSet::new();
    let mut values: BTreeSet<&str> = BTreeSet::new();
    for (m, p, o, v) in reads {
        assert!(
            at.insert((*p, *o)),
            "{p}/{o} read twice (second time by {m})"
        );
        assert!(values.insert(v), "{v} read twice");
    }
    let want: BTreeSet<String> = (0..count).map(|i| format!("v-{i}")).collect();
    let got: BTreeSet<String> = values.iter().map(|v| v.to_string()).collect();
    assert_eq!(got, want, "records read differ from those produced");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_confluent_group_members_split_take_over_and_resume() {
    split_take_over_resume("confluent_group.py", &["a", "b", "c"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_python_group_members_split_take_over_and_resume() {
    split_take_over_resume("kafka_python_group.py", &["1", "2", "3"]).await;
}

/// Runs a Python client's group scenario (`tests/kafka_clients/<script>`: two members
/// split, one leaves, a third resumes; see the scripts) over 600 records and checks it.
async fn split_take_over_resume(script_name: &str, members: &[&str]) {
    let topic = "grouped";
    let c = cluster_with_topic(topic).await;
    let records = 600;
    kcat_produce(&c.kafka_bootstrap(), topic, 0, records);
    let out = run_script(
        &[
            script(script_name).to_str().unwrap(),
            &c.kafka_bootstrap(),
            topic,
            "g-python-client",
            &PARTITIONS.to_string(),
            &records.to_string(),
        ],
        Duration::from_secs(360),
    );
    assert_split_takeover_resume(&out, records, members);
}

/// The checks shared by the Python clients' runs: a split over both first members, the
/// takeover by the one staying, every record read once, all three members reading.
fn assert_split_takeover_resume(out: &str, records: usize, members: &[&str]) {
    let line = out
        .lines()
        .find_map(|l| l.strip_prefix("split "))
        .unwrap_or_else(|| panic!("no split line in:\n{out}"));
    let split: Vec<usize> = line
        .split(' ')
        .map(|n| {
            n.parse()
                .unwrap_or_else(|e| panic!("split line {line:?}: {n:?}: {e}\n{out}"))
        })
        .collect();
    assert_eq!(split.iter().sum::<usize>(), PARTITIONS as usize);
    assert!(split.iter().all(|n| *n > 0), "{split:?}");
    assert!(out.contains(&format!("takeover {PARTITIONS}")), "{out}");
    let r = reads(out);
    assert_read_once(&r, records);
    let by: BTreeSet<&str> = r.iter().map(|(who, ..)| who.as_str()).collect();
    let want: BTreeSet<&str> = members.iter().copied().collect();
    assert_eq!(by, want, "every member read");
}

/// A kcat balanced consumer (`-G`) printing `<partition> <offset> <value>` lines.
struct KcatMember {
    child: Child,
    lines: Arc<Mutex<Vec<(i32, i64, String)>>>,
    /// Reads kcat's stdout into `lines`; ends when kcat exits.
    reader: Option<std::thread::JoinHandle<()>>,
}

impl KcatMember {
    fn start(bootstrap: &str, group: &str, topic: &str, exit_at_end: bool) -> Self {
        let mut args = vec![
            "-b",
            bootstrap,
            "-G",
            group,
            "-X",
            "auto.offset.reset=earliest",
            "-X",
            "auto.commit.interval.ms=200",
            "-X",
            "session.timeout.ms=6000",
            "-X",
            "heartbeat.interval.ms=500",
            "-f",
            "%p %o %s\n",
            "-q",
            // Unbuffered output: the test reads it while kcat runs.
            "-u",
        ];
        if exit_at_end {
            args.push("-e");
        }
        args.push(topic);
        let mut child = Command::new("kcat")
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("kcat is not installed: apt-get install kcat");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        let stdout = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let f: Vec<&str> = line.splitn(3, ' ').collect();
                if f.len() == 3 {
                    sink.lock().unwrap().push((
                        f[0].parse().unwrap(),
                        f[1].parse().unwrap(),
                        f[2].to_string(),
                    ));
                }
            }
        });
        Self {
            child,
            lines,
            reader: Some(reader),
        }
    }

    fn read(&self) -> Vec<(i32, i64, String)> {
        self.lines.lock().unwrap().clone()
    }

    /// SIGTERM: kcat closes its consumer, which commits and leaves the group. Returns
    /// everything it printed.
    fn stop(self) -> Vec<(i32, i64, String)> {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        self.finish("stop on SIGTERM")
    }

    /// Waits for kcat to exit by itself (`-e`: at the end of every assigned partition) and
    /// returns everything it printed.
    fn run_to_end(self) -> Vec<(i32, i64, String)> {
        self.finish("finish (-e)")
    }

    fn finish(mut self, what: &str) -> Vec<(i32, i64, String)> {
        let start = Instant::now();
        while self.child.try_wait().unwrap().is_none() {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "kcat did not {what}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        // Its stdout is closed: the reader has every line once it ends.
        if let Some(r) = self.reader.take() {
            r.join().unwrap();
        }
        self.read()
    }
}

impl Drop for KcatMember {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "timed out: {what}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_kcat_balanced_consumers_split_take_over_and_resume() {
    let topic = "grouped-kcat";
    let c = cluster_with_topic(topic).await;
    let bootstrap = c.kafka_bootstrap();
    kcat_produce(&bootstrap, topic, 0, 300);
    // Both start within the initial rebalance delay (3 s): one generation, split 3 + 3.
    let a = KcatMember::start(&bootstrap, "g-kcat", topic, false);
    let b = KcatMember::start(&bootstrap, "g-kcat", topic, false);
    wait_until("A and B read the first 300", || {
        a.read().len() + b.read().len() >= 300
    });
    let parts = |v: &[(i32, i64, String)]| v.iter().map(|r| r.0).collect::<BTreeSet<i32>>();
    let (pa, pb) = (parts(&a.read()), parts(&b.read()));
    assert!(
        !pa.is_empty() && !pb.is_empty(),
        "both members read: {pa:?} {pb:?}"
    );
    assert!(
        pa.is_disjoint(&pb),
        "A {pa:?} and B {pb:?} share partitions"
    );
    // B leaves; A takes its partitions and reads what is produced to them next.
    let b_read = b.stop();
    kcat_produce(&bootstrap, topic, 300, 120);
    wait_until("A reads the next 120", || {
        a.read().iter().filter(|r| r.2.as_str() >= "v-300").count() >= 120
            && a.read().len() + b_read.len() >= 420
    });
    let a_new: BTreeSet<i32> = a
        .read()
        .iter()
        .filter(|r| r.2.as_str() >= "v-300")
        .map(|r| r.0)
        .collect();
    assert!(
        pb.iter().any(|p| a_new.contains(p)),
        "A read none of B's former partitions {pb:?} (it read {a_new:?})"
    );
    let a_read = a.stop();
    // A third member resumes from what A and B committed on close: exactly the new records.
    kcat_produce(&bootstrap, topic, 420, 60);
    let c_read = KcatMember::start(&bootstrap, "g-kcat", topic, true).run_to_end();
    let all: Vec<(String, i32, i64, String)> = a_read
        .iter()
        .map(|r| ("a".to_string(), r.0, r.1, r.2.clone()))
        .chain(
            b_read
                .iter()
                .map(|r| ("b".to_string(), r.0, r.1, r.2.clone())),
        )
        .chain(
            c_read
                .iter()
                .map(|r| ("c".to_string(), r.0, r.1, r.2.clone())),
        )
        .collect();
    assert_read_once(&all, 480);
    let c_values: BTreeSet<&str> = c_read.iter().map(|r| r.2.as_str()).collect();
    let want: BTreeSet<String> = (420..480).map(|i| format!("v-{i}")).collect();
    assert_eq!(
        c_values,
        want.iter().map(String::as_str).collect(),
        "the new member must start exactly at the committed offsets"
    );
}

/// The broker coordinating `group`: the leader of its `__consumer_offsets` partition, asked
/// of broker `ask`.
async fn coordinator_of(c: &Cluster, ask: i32, group: &str) -> i32 {
    let p = keel_broker::group::records::partition_for(group, 6);
    let start = Instant::now();
    loop {
        if let Some(m) = c
            .try_metadata(ask, &[keel_broker::group::records::OFFSETS_TOPIC])
            .await
        {
            let leader = m
                .topics
                .first()
                .and_then(|t| t.partitions.iter().find(|x| x.partition_index == p))
                .map_or(-1, |x| x.leader_id);
            if leader > 0 {
                return leader;
            }
        }
        assert!(start.elapsed() < WAIT, "no coordinator for {group}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_group_survives_kill9_of_its_coordinator() {
    let topic = "committed";
    let group = "g-failover";
    let mut c = cluster_with_topic(topic).await;
    let records = 1500;
    kcat_produce(&c.kafka_bootstrap(), topic, 0, records);
    let mut consumer = Command::new(keel_tests::python::python())
        .arg(script("confluent_commit_loop.py"))
        .args([&c.kafka_bootstrap(), topic, group, &records.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the consumer");
    let stdout = consumer.stdout.take().unwrap();
    let out = std::thread::spawn(move || std::io::read_to_string(stdout).unwrap());
    let (progress_tx, progress) = std::sync::mpsc::channel();
    let stderr = consumer.stderr.take().unwrap();
    let err = std::thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = progress_tx.send(line.clone());
            all += &line;
            all.push('\n');
        }
        all
    });
    // Kill the coordinator with SIGKILL once a third is read and committed.
    let start = Instant::now();
    let mut killed = None;
    while killed.is_none() {
        assert!(start.elapsed() < Duration::from_secs(120), "no progress");
        match progress.recv_timeout(Duration::from_secs(1)) {
            Ok(line) if line.starts_with("progress ") => {
                let n: usize = line["progress ".len()..].parse().unwrap();
                if n >= records / 3 {
                    let ask = if c.broker_running(1) { 1 } else { 2 };
                    let coordinator = coordinator_of(&c, ask, group).await;
                    c.kill_broker(coordinator);
                    eprintln!(
                        "killed the coordinator, broker {coordinator} (SIGKILL), after {n} records"
                    );
                    killed = Some((coordinator, Instant::now()));
                }
            }
            Ok(_) | Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(e) => panic!("the consumer ended before the kill: {e}"),
        }
    }
    let status = loop {
        if let Some(s) = consumer.try_wait().unwrap() {
            break s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(300),
            "the consumer did not finish"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let out = out.join().unwrap();
    let err = err.join().unwrap();
    assert!(status.success(), "consumer failed ({status}):\n{err}");
    // Every record read exactly once: every commit before the kill survived it.
    let lines: Vec<(String, i32, i64, String)> = out
        .lines()
        .filter_map(|l| l.strip_prefix("r "))
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (
                f[3].to_string(),
                f[0].parse().unwrap(),
                f[1].parse().unwrap(),
                f[2].to_string(),
            )
        })
        .collect();
    assert_read_once(&lines, records);
    // The longest pause in consumption: the failover as the consumer saw it.
    let times: Vec<i64> = lines.iter().map(|l| l.0.parse().unwrap()).collect();
    let pause_ms = times.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
    eprintln!(
        "longest pause between two records read: {pause_ms} ms (consumer session timeout 6000 ms, \
         broker session timeout {} ms)",
        keel_tests::process::SESSION_TIMEOUT_MS
    );
    assert!(
        pause_ms < 6_000 + 5_000,
        "consumption paused {pause_ms} ms, more than the session timeout plus 5 s"
    );
    // A new member resumes at the end: nothing left to read.
    let (dead, _) = killed.unwrap();
    let live: Vec<String> = [1, 2, 3]
        .iter()
        .filter(|b| **b != dead)
        .map(|b| c.kafka_addr(*b))
        .collect();
    let after = KcatMember::start(&live.join(","), group, topic, true).run_to_end();
    assert!(after.is_empty(), "read again after the commits: {after:?}");
}

/// Runs `keelctl --json <args>` against `c`'s brokers; (exit success, stdout, stderr).
fn keelctl(c: &Cluster, args: &[&str]) -> (bool, String, String) {
    let brokers: Vec<String> = [1, 2, 3]
        .iter()
        .filter(|b| c.broker_running(**b))
        .map(|b| c.broker_addr(*b))
        .collect();
    let out = Command::new(keel_tests::process::binary("keelctl"))
        .args([
            "--bootstrap-controllers",
            &c.controller_ids()
                .iter()
                .map(|id| c.controller_addr(*id))
                .collect::<Vec<_>>()
                .join(","),
        ])
        .args(["--bootstrap-brokers", &brokers.join(",")])
        .args(["--api-timeout-ms", "20000"])
        .args(args)
        .output()
        .expect("run keelctl");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keelctl_group_lists_describes_resets_and_deletes_groups() {
    let topic = "managed";
    let group = "g-managed";
    let c = cluster_with_topic(topic).await;
    let bootstrap = c.kafka_bootstrap();
    kcat_produce(&bootstrap, topic, 0, 60);
    // A member reads everything and stays: the group is Stable with committed offsets.
    let member = KcatMember::start(&bootstrap, group, topic, false);
    wait_until("the member reads the 60 records", || {
        member.read().len() >= 60
    });
    // Auto-commit every 200 ms: wait until describe shows no lag.
    let start = Instant::now();
    let described = loop {
        let (ok, out, err) = keelctl(&c, &["--json", "group", "describe", group]);
        assert!(ok, "describe: {err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        // `null` while a partition has no commit yet.
        let lags: Option<Vec<i64>> = v["partitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["lag"].as_i64())
            .collect();
        if v["partitions"].as_array().unwrap().len() == PARTITIONS as usize
            && lags.is_some_and(|l| l.iter().all(|lag| *lag == 0))
        {
            break v;
        }
        assert!(start.elapsed() < WAIT, "no full, lag-free describe: {v}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(described["state"], "Stable", "{described}");
    assert_eq!(described["members"], 1);
    let committed: i64 = described["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["current_offset"].as_i64().unwrap())
        .sum();
    assert_eq!(committed, 60, "{described}");
    let (ok, out, _) = keelctl(&c, &["--json", "group", "list"]);
    assert!(ok);
    assert!(out.contains(group), "{out}");
    let (ok, _, err) = keelctl(&c, &["group", "list", "--state", "Bogus"]);
    assert!(!ok && err.contains("valid: Empty"), "{err}");
    // The internal topic is not deleted by the CLI (as Kafka's kafka-topics refuses).
    let (ok, _, err) = keelctl(&c, &["topic", "delete", "__consumer_offsets"]);
    assert!(!ok && err.contains("internal topic"), "{err}");
    // Refused while the group is active, with Kafka's message; nothing changes.
    let (ok, _, err) = keelctl(
        &c,
        &[
            "group",
            "reset-offsets",
            group,
            "--topic",
            topic,
            "--to-earliest",
            "--execute",
        ],
    );
    assert!(!ok && err.contains("inactive"), "{err}");
    let (ok, _, err) = keelctl(&c, &["group", "delete", group]);
    assert!(!ok && err.contains("has members"), "{err}");
    // Once the member is gone: reset to the beginning; a new member reads all 60 again.
    member.stop();
    let (ok, out, err) = keelctl(
        &c,
        &[
            "--json",
            "group",
            "reset-offsets",
            group,
            "--topic",
            topic,
            "--to-earliest",
            "--execute",
        ],
    );
    assert!(ok, "reset: {err}");
    assert!(out.contains("\"executed\": true"), "{out}");
    let again = KcatMember::start(&bootstrap, group, topic, true).run_to_end();
    assert_eq!(again.len(), 60, "read again from the reset offsets");
    // Delete: gone from the list; describe reports it does not exist.
    let (ok, _, err) = keelctl(&c, &["group", "delete", group]);
    assert!(ok, "delete: {err}");
    let (ok, out, _) = keelctl(&c, &["--json", "group", "list"]);
    assert!(ok && !out.contains(group), "{out}");
    let (ok, out, err) = keelctl(&c, &["group", "describe", group]);
    assert!(
        !ok && out.is_empty() && err.contains(&format!("consumer group '{group}' does not exist")),
        "describe of a deleted group: {out} / {err}"
    );
}

/// A member of a group through Keel's own client (`Consumer::subscribe` over gRPC), polling
/// in a task and keeping `(partition, offset, value)` of what it read.
struct KeelMember {
    lines: Arc<Mutex<Vec<(i32, i64, String)>>>,
    assignment: Arc<Mutex<BTreeSet<i32>>>,
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl KeelMember {
    /// Starts a member of `group` reading `topic` from `brokers` (gRPC addresses), with
    /// kcat's timers of these tests (session 6 s, heartbeat 0.5 s, auto commit 0.2 s) and
    /// `auto_offset_reset` earliest.
    fn start(brokers: Vec<String>, group: &str, topic: &str) -> Self {
        use keel_client::consumer::{Consumer, ConsumerConfig, OffsetReset};
        let mut cfg = ConsumerConfig::new(brokers);
        cfg.session_timeout_ms = 6000;
        cfg.heartbeat_interval_ms = 500;
        cfg.auto_commit_interval_ms = 200;
        cfg.auto_offset_reset = Some(OffsetReset::Earliest);
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        let lines = Arc::new(Mutex::new(Vec::new()));
        let assignment = Arc::new(Mutex::new(BTreeSet::new()));
        let (sink, assigned) = (lines.clone(), assignment.clone());
        let (group, topic) = (group.to_string(), topic.to_string());
        let task = tokio::spawn(async move {
            let mut consumer = Consumer::new(cfg).unwrap();
            consumer.subscribe(&group, &[topic]).await.unwrap();
            // Never cancel a poll (its positions would run ahead of what it returned):
            // check the stop flag between polls.
            while !*stopped.borrow_and_update() {
                let records = consumer.poll(Duration::from_millis(200)).await.unwrap();
                *assigned.lock().unwrap() = consumer.assignment().iter().map(|t| t.1).collect();
                let mut out = sink.lock().unwrap();
                for r in records {
                    let value = String::from_utf8(r.value.unwrap().to_vec()).unwrap();
                    out.push((r.partition, r.offset, value));
                }
            }
            // Commits the positions and leaves the group.
            consumer.close().await.unwrap();
        });
        Self {
            lines,
            assignment,
            stop,
            task,
        }
    }

    fn read(&self) -> Vec<(i32, i64, String)> {
        self.lines.lock().unwrap().clone()
    }

    fn assignment(&self) -> BTreeSet<i32> {
        self.assignment.lock().unwrap().clone()
    }

    /// Closes the consumer (commit, LeaveGroup) and returns everything it read.
    async fn stop(self) -> Vec<(i32, i64, String)> {
        self.stop.send_replace(true);
        tokio::time::timeout(Duration::from_secs(60), self.task)
            .await
            .expect("the Keel member did not close within 60 s")
            .expect("the Keel member's task failed");
        self.lines.lock().unwrap().clone()
    }
}

/// Waits (without blocking the runtime) until `done`, at most 60 s.
async fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "timed out: {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn grpc_brokers(c: &Cluster) -> Vec<String> {
    (1..=3).map(|b| c.broker_addr(b)).collect()
}

fn tagged(tag: &str, v: &[(i32, i64, String)]) -> Vec<(String, i32, i64, String)> {
    v.iter()
        .map(|r| (tag.to_string(), r.0, r.1, r.2.clone()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keel_consumers_split_take_over_and_resume() {
    let topic = "grouped-keel";
    let group = "g-keel";
    let c = cluster_with_topic(topic).await;
    let bootstrap = c.kafka_bootstrap();
    kcat_produce(&bootstrap, topic, 0, 300);
    let a = KeelMember::start(grpc_brokers(&c), group, topic);
    let b = KeelMember::start(grpc_brokers(&c), group, topic);
    wait_for(
        "A and B each hold 3 partitions and read the first 300",
        || {
            let (pa, pb) = (a.assignment(), b.assignment());
            pa.len() == 3
                && pb.len() == 3
                && pa.is_disjoint(&pb)
                && a.read().len() + b.read().len() >= 300
        },
    )
    .await;
    let pb = b.assignment();
    // B leaves (commit, LeaveGroup); A takes all 6 and reads what is produced next.
    let b_read = b.stop().await;
    kcat_produce(&bootstrap, topic, 300, 120);
    wait_for("A holds all 6 partitions and reads the next 120", || {
        a.assignment().len() == 6 && a.read().len() + b_read.len() >= 420
    })
    .await;
    let a_read = a.stop().await;
    let a_new: BTreeSet<i32> = a_read
        .iter()
        .filter(|r| r.2.as_str() >= "v-300")
        .map(|r| r.0)
        .collect();
    assert!(
        pb.is_subset(&a_new),
        "A read none of B's former partitions {pb:?} (it read {a_new:?})"
    );
    // A third member resumes exactly at the committed offsets.
    kcat_produce(&bootstrap, topic, 420, 60);
    let m = KeelMember::start(grpc_brokers(&c), group, topic);
    wait_for("C reads the last 60", || m.read().len() >= 60).await;
    // A moment more: nothing else may arrive.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let c_read = m.stop().await;
    let mut all = tagged("a", &a_read);
    all.extend(tagged("b", &b_read));
    all.extend(tagged("c", &c_read));
    assert_read_once(&all, 480);
    let c_values: BTreeSet<String> = c_read.iter().map(|r| r.2.clone()).collect();
    let want: BTreeSet<String> = (420..480).map(|i| format!("v-{i}")).collect();
    assert_eq!(
        c_values, want,
        "C must start exactly at the committed offsets"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keel_and_kcat_consumers_share_one_group() {
    // Keel's consumer (gRPC) and librdkafka (Kafka protocol) in one group: the same
    // coordinator, Kafka's subscription and assignment bytes, either may lead.
    let topic = "grouped-mixed";
    let group = "g-mixed";
    let c = cluster_with_topic(topic).await;
    let bootstrap = c.kafka_bootstrap();
    kcat_produce(&bootstrap, topic, 0, 300);
    let keel = KeelMember::start(grpc_brokers(&c), group, topic);
    let kcat = KcatMember::start(&bootstrap, group, topic, false);
    wait_for("both members read and together read the first 300", || {
        let pk: BTreeSet<i32> = kcat.read().iter().map(|r| r.0).collect();
        keel.assignment().len() == 3
            && !pk.is_empty()
            && keel.read().len() + kcat.read().len() >= 300
    })
    .await;
    let pk: BTreeSet<i32> = kcat.read().iter().map(|r| r.0).collect();
    assert!(
        pk.is_disjoint(&keel.assignment()),
        "kcat read {pk:?}, Keel holds {:?}",
        keel.assignment()
    );
    // kcat leaves; Keel's consumer takes its partitions.
    let kcat_read = kcat.stop();
    kcat_produce(&bootstrap, topic, 300, 60);
    wait_for("Keel's member holds all 6 and reads the next 60", || {
        keel.assignment().len() == 6 && keel.read().len() + kcat_read.len() >= 360
    })
    .await;
    let keel_read = keel.stop().await;
    let mut all = tagged("keel", &keel_read);
    all.extend(tagged("kcat", &kcat_read));
    assert_read_once(&all, 360);
}

/// `keelctl consume --group --json` against `c`; the values printed.
fn keelctl_group_consume(c: &Cluster, topic: &str, group: &str, extra: &[&str]) -> Vec<String> {
    let mut args = vec![
        "--json",
        "consume",
        "--topic",
        topic,
        "--group",
        group,
        "--from-beginning",
        "--session-timeout-ms",
        "6000",
    ];
    args.extend_from_slice(extra);
    let (ok, out, err) = keelctl(c, &args);
    assert!(ok, "keelctl {args:?}: {err}");
    out.lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["value"].as_str().unwrap().to_string()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keelctl_consume_group_resumes_at_the_committed_offsets() {
    let topic = "grouped-cli";
    let group = "g-cli";
    let c = cluster_with_topic(topic).await;
    let bootstrap = c.kafka_bootstrap();
    kcat_produce(&bootstrap, topic, 0, 100);
    // --max-records stops in the middle of a fetched batch: only what was printed counts
    // as consumed.
    let first = keelctl_group_consume(&c, topic, group, &["--max-records", "30"]);
    assert_eq!(first.len(), 30, "{first:?}");
    let second = keelctl_group_consume(&c, topic, group, &[]);
    kcat_produce(&bootstrap, topic, 100, 50);
    let third = keelctl_group_consume(&c, topic, group, &[]);
    assert_eq!(
        third.iter().cloned().collect::<BTreeSet<_>>(),
        (100..150)
            .map(|i| format!("v-{i}"))
            .collect::<BTreeSet<_>>(),
        "the third run reads exactly the new records"
    );
    let all: Vec<(String, i32, i64, String)> = first
        .iter()
        .chain(&second)
        .chain(&third)
        .enumerate()
        .map(|(i, v)| ("cli".to_string(), -1, i as i64, v.clone()))
        .collect();
    assert_read_once(&all, 150);
    // The group is known to keelctl group describe, now without members.
    let (ok, out, err) = keelctl(&c, &["group", "describe", group]);
    assert!(ok, "{err}");
    assert!(out.contains("Empty"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_lag_per_group_is_exported_by_the_coordinator() {
    use keel_tests::http::{http_get, sample};
    let topic = "lagging";
    let group = "g-lag";
    let c = cluster_with_topic_opts(
        topic,
        Options {
            broker_metrics: true,
            ..Options::default()
        },
    )
    .await;
    kcat_produce(&c.kafka_bootstrap(), topic, 0, 300);
    let read = keelctl_group_consume(&c, topic, group, &["--max-records", "100"]);
    assert_eq!(read.len(), 100);
    // Summed over the brokers: only the coordinator exports the group (the others have no
    // series or 0).
    let series = format!("keel_broker_group_consumer_lag{{group=\"{group}\"}}");
    let lag = || async {
        let mut total = 0.0;
        for port in &c.broker_metrics_ports {
            let addr = std::net::SocketAddr::from(([127, 0, 0, 1], *port));
            let (_, body) = http_get(addr, "/metrics").await.unwrap_or_default();
            total += sample(&body, &series).unwrap_or(0.0);
        }
        total
    };
    // Sampled every 10 s: wait up to 3 samples for each value.
    let wait_lag = |want: f64, what: &'static str| async move {
        let start = Instant::now();
        loop {
            let now = lag().await;
            if now == want {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(35),
                "lag of {group} is {now}, not {what}"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    };
    wait_lag(200.0, "300 - 100").await;
    kcat_produce(&c.kafka_bootstrap(), topic, 300, 50);
    wait_lag(250.0, "350 - 100").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keel_group_member_survives_kill9_of_its_coordinator() {
    use keel_client::consumer::{Consumer, ConsumerConfig, OffsetReset};
    let topic = "committed-keel";
    let group = "g-failover-keel";
    let mut c = cluster_with_topic(topic).await;
    let records = 1500;
    // One record per batch and one batch per partition per fetch: many polls, each
    // followed by a commit, so the kill lands in the middle of the loop.
    kcat_produce_with(
        &c.kafka_bootstrap(),
        topic,
        0,
        records,
        &["-X", "batch.num.messages=1"],
    );
    let mut cfg = ConsumerConfig::new(grpc_brokers(&c));
    cfg.session_timeout_ms = 6000;
    cfg.heartbeat_interval_ms = 500;
    cfg.enable_auto_commit = false;
    cfg.auto_offset_reset = Some(OffsetReset::Earliest);
    cfg.max_partition_fetch_bytes = 1;
    let mut consumer = Consumer::new(cfg).unwrap();
    consumer
        .subscribe(group, &[topic.to_string()])
        .await
        .unwrap();
    let mut read: Vec<(String, i32, i64, String)> = Vec::new();
    let mut last_record = Instant::now();
    let mut longest_pause = Duration::ZERO;
    let mut killed = None;
    let start = Instant::now();
    while read.len() < records {
        assert!(
            start.elapsed() < Duration::from_secs(240),
            "only {} records read",
            read.len()
        );
        let batch = consumer.poll(Duration::from_millis(200)).await.unwrap();
        if batch.is_empty() {
            continue;
        }
        if killed.is_some() {
            longest_pause = longest_pause.max(last_record.elapsed());
        }
        last_record = Instant::now();
        for r in batch {
            let value = String::from_utf8(r.value.unwrap().to_vec()).unwrap();
            read.push(("keel".into(), r.partition, r.offset, value));
        }
        // Commit after every poll (retried inside across the coordinator's failover).
        consumer.commit_sync().await.unwrap();
        if killed.is_none() && read.len() >= records / 3 {
            let coordinator = coordinator_of(&c, 1, group).await;
            c.kill_broker(coordinator);
            eprintln!(
                "killed the coordinator, broker {coordinator} (SIGKILL), after {} records",
                read.len()
            );
            killed = Some(coordinator);
            last_record = Instant::now();
        }
    }
    consumer.close().await.unwrap();
    assert_read_once(&read, records);
    eprintln!(
        "longest pause between two polls with records after the kill: {} ms (consumer session \
         timeout 6000 ms, broker session timeout {} ms)",
        longest_pause.as_millis(),
        keel_tests::process::SESSION_TIMEOUT_MS
    );
    assert!(
        longest_pause < Duration::from_millis(6_000 + 5_000),
        "consumption paused {longest_pause:?}, more than the session timeout plus 5 s"
    );
    // Every commit survived: a new member finds nothing left to read.
    let dead = killed.unwrap();
    let live: Vec<String> = [1, 2, 3]
        .iter()
        .filter(|b| **b != dead)
        .map(|b| c.kafka_addr(*b))
        .collect();
    let after = KcatMember::start(&live.join(","), group, topic, true).run_to_end();
    assert!(after.is_empty(), "read again after the commits: {after:?}");
}

/// A `keelctl --json consume --group G --follow` process whose printed values are kept.
struct CliMember {
    child: Child,
    values: Arc<Mutex<Vec<String>>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl CliMember {
    fn start(c: &Cluster, group: &str, topic: &str) -> Self {
        let brokers: Vec<String> = (1..=3).map(|b| c.broker_addr(b)).collect();
        let mut child = Command::new(keel_tests::process::binary("keelctl"))
            .args([
                "--bootstrap-brokers",
                &brokers.join(","),
                "--json",
                "consume",
            ])
            .args([
                "--topic",
                topic,
                "--group",
                group,
                "--follow",
                "--from-beginning",
            ])
            .args(["--session-timeout-ms", "6000"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("run keelctl");
        let values = Arc::new(Mutex::new(Vec::new()));
        let sink = values.clone();
        let stdout = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let v: serde_json::Value = serde_json::from_str(&line).unwrap();
                sink.lock()
                    .unwrap()
                    .push(v["value"].as_str().unwrap().to_string());
            }
        });
        Self {
            child,
            values,
            reader: Some(reader),
        }
    }

    /// SIGTERM, then everything it printed (it commits that and leaves).
    fn stop(mut self) -> Vec<String> {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let start = Instant::now();
        while self.child.try_wait().unwrap().is_none() {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "keelctl did not stop"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(
            self.child.wait().unwrap().success(),
            "keelctl failed on SIGTERM"
        );
        self.reader.take().unwrap().join().unwrap();
        self.values.lock().unwrap().clone()
    }
}

impl Drop for CliMember {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keelctl_group_members_stopped_by_sigterm_skip_nothing() {
    // While records keep coming, members join and are stopped with SIGTERM (each commits
    // what it printed and leaves): across all of them every record is printed, none
    // skipped (a shutdown in the middle of a poll once committed positions past records
    // it never printed).
    let topic = "grouped-sigterm";
    let group = "g-sigterm";
    let c = cluster_with_topic(topic).await;
    let bootstrap = c.kafka_bootstrap();
    // A steady trickle (one keyed record every 10 ms): the partitions' leaders answer the
    // members' long-poll fetches at different moments, which is when a stop can land
    // between two replies of one poll.
    let total = 4000;
    let producer = {
        let bootstrap = bootstrap.clone();
        std::thread::spawn(move || {
            let mut kcat = Command::new("kcat")
                .args(["-P", "-b", &bootstrap, "-t", topic, "-K", ":"])
                .args(["-X", "acks=all", "-X", "linger.ms=0"])
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("kcat is not installed: apt-get install kcat");
            let mut stdin = kcat.stdin.take().unwrap();
            for i in 0..total {
                writeln!(stdin, "k{i}:v-{i}").unwrap();
                stdin.flush().unwrap();
                std::thread::sleep(Duration::from_millis(10));
            }
            drop(stdin);
            assert!(kcat.wait().unwrap().success(), "kcat -P failed");
        })
    };
    let steady = CliMember::start(&c, group, topic);
    wait_for("the first member reads", || {
        !steady.values.lock().unwrap().is_empty()
    })
    .await;
    let mut printed = Vec::new();
    // Each joins (a rebalance: the steady member notices it at its next heartbeat), reads
    // a while, and is stopped.
    let mut stops_while_reading = 0;
    for _ in 0..10 {
        let m = CliMember::start(&c, group, topic);
        tokio::time::sleep(Duration::from_millis(3000)).await;
        let got = m.stop();
        stops_while_reading += usize::from(!got.is_empty());
        printed.extend(got);
    }
    eprintln!("{stops_while_reading} of 10 members were stopped while reading");
    tokio::task::spawn_blocking(move || producer.join().unwrap())
        .await
        .unwrap();
    // The steady member reads the rest, then stops too.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut seen: BTreeSet<String> = printed.iter().cloned().collect();
        seen.extend(steady.values.lock().unwrap().iter().cloned());
        if seen.len() >= total {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{} of {total} records printed; missing: {:?}",
            seen.len(),
            (0..total)
                .map(|i| format!("v-{i}"))
                .filter(|v| !seen.contains(v))
                .take(20)
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    printed.extend(steady.stop());
    let seen: BTreeSet<String> = printed.iter().cloned().collect();
    let want: BTreeSet<String> = (0..total).map(|i| format!("v-{i}")).collect();
    assert_eq!(seen, want, "records skipped");
    // A fresh member finds nothing left: every position was committed.
    let rest = keelctl_group_consume(&c, topic, group, &[]);
    assert!(rest.is_empty(), "read again after the commits: {rest:?}");
}
