//! Read-backs across leader changes on real processes (issue #18, items 7 and 9):
//! `keelctl consume` / `keelctl verify` never trust the end offset of a resumed ex-leader, and
//! `keelctl consume --follow` rides through leader kills.

mod common;

use std::collections::BTreeSet;
use std::io::BufRead;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::Fixture;
use keel_client::brokers::Brokers;
use keel_client::producer::{Producer, ProducerConfig};
use keel_proto::broker::{
    InitProducerIdRequest, ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic,
};
use serde_json::Value;

/// Sends `{prefix}-{i}` for every `i` of `range` (acks=all, idempotent) and waits for every
/// acknowledgement.
async fn produce_acked(
    producer: &Producer,
    topic: &str,
    prefix: &str,
    range: std::ops::Range<u64>,
) {
    let mut pending = Vec::new();
    for i in range {
        let d = producer
            .send(topic, None, format!("{prefix}-{i}").as_bytes())
            .await
            .unwrap();
        pending.push((i, d));
    }
    for (i, d) in pending {
        d.await
            .unwrap_or_else(|e| panic!("{prefix}-{i} not acknowledged: {e}"));
    }
}

/// Sends SIGCONT to the processes it names when dropped, so a failing test does not leave
/// paused processes to `cluster down`.
struct Resume<'a> {
    f: &'a Fixture,
    names: Vec<String>,
}

impl Drop for Resume<'_> {
    fn drop(&mut self) {
        for name in &self.names {
            let _ = std::process::Command::new("kill")
                .args(["-CONT", &self.f.pid(name)])
                .status();
        }
    }
}

fn leader_of(p: &Value) -> i32 {
    p["leader"].as_i64().unwrap() as i32
}

/// Item 7. The leader of a partition is paused (SIGSTOP) past its session, a new leader
/// takes 3,000 acks=all records, and the old leader is resumed while it cannot learn the new
/// metadata (the controllers are paused too: the 40-100 ms window of the issue, held open so
/// the outcome does not depend on timing). Asked with its own old leader epoch, it still
/// answers as the leader with its old high watermark. A `keelctl consume` and a
/// `keelctl verify` whose first bootstrap broker is that ex-leader must still read every
/// committed record and report nothing lost: metadata is asked of several brokers and the
/// newest leader epoch wins, and verify reads until every acknowledged offset is read.
#[test]
fn read_back_does_not_trust_a_resumed_ex_leader() {
    let f = Fixture::fresh();
    f.cluster("up", &["--timeout-secs", "120"]);
    f.json(&[
        "--json",
        "topic",
        "create",
        "zombie",
        "--partitions",
        "1",
        "--replication-factor",
        "3",
        "--config",
        "min.insync.replicas=2",
    ]);
    let p = f.wait_partition("zombie", "full ISR", |p| {
        p["leader"].as_i64() >= Some(1) && p["isr"].as_array().map(Vec::len) == Some(3)
    });
    let old = leader_of(&p);
    let old_epoch = p["leader_epoch"].as_i64().unwrap() as i32;
    let others: Vec<String> = (1..=3)
        .filter(|b| *b != old)
        .map(|b| format!("127.0.0.1:{}", f.base + 99 + b as u16))
        .collect();
    let old_addr = format!("127.0.0.1:{}", f.base + 99 + old as u16);
    let _resume = Resume {
        f: &f,
        names: std::iter::once(format!("broker-{old}"))
            .chain((1..=3).map(|c| format!("controller-{c}")))
            .collect(),
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        // Every broker holds a block of producer ids (as after any earlier idempotent
        // producer), so InitProducerId does not need the controllers paused below.
        let brokers = Brokers::new(f.brokers(), Duration::from_secs(10));
        for addr in f.brokers() {
            let r = brokers
                .client_for(&addr)
                .unwrap()
                .init_producer_id(InitProducerIdRequest {
                    transactional_id: String::new(),
                    transaction_timeout_ms: 0,
                    producer_id: -1,
                    producer_epoch: -1,
                })
                .await
                .unwrap()
                .into_inner();
            assert!(
                r.error.is_none() || r.error.as_ref().unwrap().code == 0,
                "{r:?}"
            );
        }
        // 1,000 records committed under the first leader.
        let producer = Producer::new(ProducerConfig::new(f.brokers())).unwrap();
        produce_acked(&producer, "zombie", "a", 0..1000).await;
        producer.close().await;
    });

    f.signal(&format!("broker-{old}"), "STOP");
    let p = f.wait_partition("zombie", "a new leader", |p| {
        p["leader"].as_i64() >= Some(1) && leader_of(p) != old
    });
    let new_epoch = p["leader_epoch"].as_i64().unwrap() as i32;
    assert!(new_epoch > old_epoch, "{p}");
    rt.block_on(async {
        let producer = Producer::new(ProducerConfig::new(others.clone())).unwrap();
        produce_acked(&producer, "zombie", "b", 0..3000).await;
        producer.close().await;
    });
    for c in 1..=3 {
        f.signal(&format!("controller-{c}"), "STOP");
    }
    f.signal(&format!("broker-{old}"), "CONT");
    // The state of the issue's window: asked with its own epoch the ex-leader still answers
    // its old HW; asked with the newer epoch it answers UNKNOWN_LEADER_EPOCH (DESIGN §5).
    // Metadata already queued in its socket before the controllers were paused can close the
    // window at once (seen once in a full run: FENCED_LEADER_EPOCH at the old epoch); then
    // the reads below are still checked, but the run did not reproduce the stale window.
    rt.block_on(async {
        let brokers = Brokers::new(vec![old_addr.clone()], Duration::from_secs(10));
        let mut c = brokers.client_for(&old_addr).unwrap();
        let mut window_open = true;
        for (epoch, want) in [(old_epoch, Ok(1000)), (new_epoch, Err(75))] {
            if !window_open {
                break;
            }
            let r = c
                .list_offsets(ListOffsetsRequest {
                    replica_id: -1,
                    isolation_level: 0,
                    topics: vec![ListOffsetsTopic {
                        name: "zombie".into(),
                        partitions: vec![ListOffsetsPartition {
                            partition_index: 0,
                            current_leader_epoch: Some(epoch),
                            timestamp: -1,
                        }],
                    }],
                })
                .await
                .unwrap()
                .into_inner();
            let p = &r.topics[0].partitions[0];
            let got = match &p.error {
                Some(e) if e.code != 0 => Err(e.code),
                _ => Ok(p.offset),
            };
            if epoch == old_epoch && got == Err(74) {
                eprintln!("the ex-leader already knew the new epoch: stale window not reproduced");
                window_open = false;
                continue;
            }
            // The queued metadata can also land between the two reads (seen in CI: the
            // ex-leader became a follower at the new epoch right after answering the first):
            // then it refuses the new epoch as a follower, NOT_LEADER_OR_FOLLOWER, which is
            // the same verdict (no answer at the new epoch from the ex-leader).
            if epoch == new_epoch && got == Err(6) {
                eprintln!("the ex-leader learnt the new epoch between the two reads");
                continue;
            }
            assert_eq!(
                got,
                want,
                "ListOffsets LATEST at epoch {epoch} from the ex-leader {old}: {p:?}\n{}",
                f.logs()
            );
        }
    });
    let bootstrap = std::iter::once(old_addr.clone())
        .chain(others.iter().cloned())
        .collect::<Vec<_>>()
        .join(",");

    // Everything committed is read (the issue: 1,000 of 6,000, the old leader's HW), also
    // when the ex-leader is the only bootstrap address (the brokers it lists are asked too).
    let want: Vec<String> = (0..1000)
        .map(|i| format!("a-{i}"))
        .chain((0..3000).map(|i| format!("b-{i}")))
        .collect();
    for brokers in [bootstrap.as_str(), old_addr.as_str()] {
        let out = f.run_with_brokers(brokers, &["--json", "consume", "--topic", "zombie"]);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(
            out.status.success(),
            "consume via {brokers} failed: {stderr}"
        );
        let values: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| {
                let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
                v["value"].as_str().unwrap().to_string()
            })
            .collect();
        assert_eq!(
            values.len(),
            want.len(),
            "consume via {brokers} read {} of {} committed records: {stderr}",
            values.len(),
            want.len()
        );
        assert_eq!(values, want);
    }

    // verify: its own 500 records acknowledged and read back, nothing lost.
    let out = f.run_with_brokers(
        &bootstrap,
        &["--json", "verify", "--topic", "zombie", "--records", "500"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "verify failed: {stderr}\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["acknowledged"], 500, "{report}");
    assert_eq!(report["read"], 500, "{report}");
    assert_eq!(report["lost"], 0, "{report}");
    assert_eq!(report["duplicated"], 0, "{report}");
}

/// Item 9. `keelctl consume --follow` keeps consuming across two kill -9s of the partition
/// leader (each followed by a restart) and prints every record produced meanwhile. The
/// consumer is paused (SIGSTOP) over the first failover and resumed just after the second
/// kill, so the first leader epoch it learns after resuming names a dead broker that the
/// metadata keeps naming until its session expires (15 s here): it must keep refreshing and
/// retrying (the issue: it exited with `position validation failed: ...: connection
/// refused`).
#[test]
fn consume_follow_rides_through_leader_kills() {
    let f = Fixture::fresh();
    // A 15 s session: the dead leader stays in the metadata well past the consumer's old
    // retry budget for a position validation (10 attempts, about 7.5 s).
    f.cluster_up_env(&[("KEEL_BROKER_SESSION_TIMEOUT_MS", "15000")]);
    f.json(&[
        "--json",
        "topic",
        "create",
        "follow",
        "--partitions",
        "1",
        "--replication-factor",
        "3",
        "--config",
        "min.insync.replicas=2",
    ]);
    let full_isr =
        |p: &Value| p["leader"].as_i64() >= Some(1) && p["isr"].as_array().map(Vec::len) == Some(3);
    f.wait_partition("follow", "full ISR", full_isr);

    let mut child = std::process::Command::new(common::KEELCTL)
        .args(["--json", "consume", "--topic", "follow", "--follow"])
        .args(["--from-beginning"])
        .env("KEEL_BOOTSTRAP_CONTROLLERS", f.controllers())
        .env("KEEL_BOOTSTRAP_BROKERS", f.brokers().join(","))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let consumer_pid = child.id().to_string();
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let stdout = child.stdout.take().unwrap();
    let reader = {
        let seen = seen.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let v: Value = serde_json::from_str(&line).unwrap();
                seen.lock()
                    .unwrap()
                    .push(v["value"].as_str().unwrap().to_string());
            }
        })
    };
    let signal_consumer = |sig: &str| {
        let status = std::process::Command::new("kill")
            .args([&format!("-{sig}"), &consumer_pid])
            .status()
            .unwrap();
        assert!(status.success());
    };
    let wait_seen = |n: usize, what: &str, child: &mut std::process::Child| {
        let deadline = Instant::now() + Duration::from_secs(90);
        while seen.lock().unwrap().len() < n {
            if let Some(status) = child.try_wait().unwrap() {
                let mut err = String::new();
                std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
                panic!("consume --follow exited ({status}) {what}: {err}");
            }
            assert!(
                Instant::now() < deadline,
                "{what}: {} of {n} records seen\n{}",
                seen.lock().unwrap().len(),
                f.logs()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };

    let rt = tokio::runtime::Runtime::new().unwrap();
    let producer = rt.block_on(async { Producer::new(ProducerConfig::new(f.brokers())).unwrap() });
    let mut sent = 0u64;
    rt.block_on(produce_acked(&producer, "follow", "r", 0..200));
    sent += 200;
    wait_seen(200, "before the kills", &mut child);

    let mut restarted = Vec::new();
    for round in 0..2 {
        let leader = leader_of(&f.wait_partition("follow", "full ISR", full_isr));
        if round == 0 {
            signal_consumer("STOP");
        }
        f.kill9_broker(leader);
        if round == 1 {
            // Resumed right after the second kill: the first new leader epoch it learns
            // names this dead broker until its session expires.
            signal_consumer("CONT");
        }
        f.wait_partition("follow", "a new leader", |p| {
            p["leader"].as_i64() >= Some(1) && leader_of(p) != leader
        });
        // Records committed by the new leader while the old one is down.
        rt.block_on(produce_acked(&producer, "follow", "r", sent..sent + 200));
        sent += 200;
        restarted.push(f.restart_broker(leader));
        f.wait_partition("follow", "full ISR again", full_isr);
        rt.block_on(produce_acked(&producer, "follow", "r", sent..sent + 200));
        sent += 200;
    }
    wait_seen(sent as usize, "after two leader kills", &mut child);
    // And it keeps following once the cluster is whole again.
    f.wait_partition("follow", "full ISR after the kills", full_isr);
    rt.block_on(produce_acked(&producer, "follow", "r", sent..sent + 100));
    sent += 100;
    wait_seen(sent as usize, "after the cluster healed", &mut child);

    let got: Vec<String> = seen.lock().unwrap().clone();
    let want: Vec<String> = (0..sent).map(|i| format!("r-{i}")).collect();
    assert_eq!(
        got.iter().collect::<BTreeSet<_>>(),
        want.iter().collect::<BTreeSet<_>>(),
        "every record produced meanwhile"
    );
    assert_eq!(got, want, "in order, each once");
    child.kill().unwrap();
    child.wait().unwrap();
    reader.join().unwrap();
    drop(producer);
    f.cluster("down", &[]);
    for mut c in restarted {
        c.wait().unwrap();
    }
}
