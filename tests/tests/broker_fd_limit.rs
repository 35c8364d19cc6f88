//! A broker and its open files on the real binaries (#26): under an open-files limit far below
//! its partitions (1,500 descriptors, 2,200 partitions) a broker keeps serving every one of
//! them, closing the segment files used least recently and opening them again on use, with
//! its descriptors staying under the limit, also after a restart; a limit that leaves too few
//! is refused at start naming what to raise; and a partition whose files cannot be created
//! (its directory name taken by a file) stops the broker with a controlled shutdown naming the
//! failed log directory, instead of leaving it unfenced with a replica it does not host
//! (Kafka: a broker whose last log directory is offline shuts down).

use std::time::{Duration, Instant};

use keel_proto::ErrorCode;
use keel_tests::Endpoints;
use keel_tests::data::{assigned_topic, batch, code, values};
use keel_tests::process::{Cluster, Options};

const WAIT: Duration = Duration::from_secs(90);
const SESSION_MS: u64 = 10_000;
const LIMIT: u64 = 1500;

/// Open descriptors of broker `id`.
fn fds(c: &Cluster, id: i32) -> usize {
    let pid = c.broker_pid(id).expect("running");
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

/// Produces one record to each of `partitions` of `topic` on broker 1 (acks=1).
async fn produce_each(c: &Cluster, topic: &str, partitions: impl Iterator<Item = i32>) {
    for p in partitions {
        c.wait_for(&format!("{topic}-{p} takes a record"), WAIT, || async {
            let r = c
                .produce_raw(1, topic, p, 1, 1000, batch(&values("r", 0..1)), None)
                .await
                .ok()?;
            (code(&r) == ErrorCode::None).then_some(())
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_hosts_more_partitions_than_its_open_files_limit_and_stops_on_a_failed_dir() {
    let mut c = Cluster::start_opts(
        3,
        1,
        Options {
            broker_nofile: Some(LIMIT),
            session_timeout_ms: SESSION_MS,
            ..Options::default()
        },
    );
    c.wait_unfenced(&[1], WAIT).await;
    let one: Vec<&[i32]> = vec![&[1]; 200];
    c.create_topic(assigned_topic("few", &one), WAIT).await;
    let many: Vec<&[i32]> = vec![&[1]; 2000];
    c.create_topic(assigned_topic("many", &many), WAIT).await;
    // Every partition written (each write opens its segment file again if it was closed).
    produce_each(&c, "few", 0..200).await;
    produce_each(&c, "many", (0..2000).step_by(7)).await;
    produce_each(&c, "few", 0..200).await;
    assert!(c.broker_running(1), "{}", c.broker_log(1));
    let open = fds(&c, 1);
    assert!(open < LIMIT as usize, "{open} descriptors open");
    let (recs, _, _) = c.consume(1, "few", 0, 0).await;
    assert_eq!(recs.len(), 2, "both records of few-0 read back");

    // Restarted under the same limit: every log opens, every partition is served.
    let status = c.terminate_broker(1, WAIT).await;
    assert!(status.success(), "{}", c.broker_log(1));
    c.start_broker(1);
    c.wait_unfenced(&[1], WAIT).await;
    produce_each(&c, "many", (1..2000).step_by(97)).await;
    assert!(fds(&c, 1) < LIMIT as usize);
    let log = c.broker_log(1);
    assert!(
        log.contains("segment files, at most 476 open at once"),
        "{log}"
    );

    // A limit leaving fewer than 256 segment files: refused at start, naming what to raise.
    c.terminate_broker(1, WAIT).await;
    c.broker_nofile = Some(1200);
    c.start_broker(1);
    let status = c
        .wait_broker_exit(1, WAIT)
        .unwrap_or_else(|| panic!("broker 1 started under a limit too low\n{}", c.logs()));
    assert_eq!(status.code(), Some(1));
    let refusal = c
        .broker_log(1)
        .lines()
        .find(|l| l.contains("leaves fewer than 256 open segment files"))
        .map(str::to_string)
        .unwrap_or_else(|| panic!("no refusal line\n{}", c.broker_log(1)));
    assert!(
        refusal.contains("the open-files limit is 1200 (also the hard limit)")
            && refusal.contains("to at least 1280")
            && refusal.contains("ulimit -n"),
        "{refusal}"
    );

    // A partition directory that cannot be created: the log directory fails, the broker
    // stops with its controlled shutdown and says why.
    c.broker_nofile = Some(LIMIT);
    c.start_broker(1);
    c.wait_unfenced(&[1], WAIT).await;
    std::fs::write(c.broker_data_dir(1).join("blocked-0"), b"not a directory").unwrap();
    c.create_topic(assigned_topic("blocked", &[&[1]]), WAIT)
        .await;
    let status = c
        .wait_broker_exit(1, WAIT)
        .unwrap_or_else(|| panic!("broker 1 kept running\n{}", c.logs()));
    let exited = Instant::now();
    assert_eq!(status.code(), Some(1), "{}", c.broker_log(1));
    let log = c.broker_log(1);
    assert!(
        log.contains("failed: cannot open partition blocked-0")
            && log.contains("stopping the broker (controlled shutdown)"),
        "{log}"
    );
    // Fenced by its controlled shutdown, not after the 10 s session timeout.
    let r = c
        .try_describe_cluster()
        .await
        .expect("an active controller");
    let b = r.brokers.iter().find(|b| b.broker_id == 1).unwrap();
    assert!(
        b.fenced || b.in_controlled_shutdown,
        "broker 1 is neither fenced nor shutting down {:?} after its exit: {r:?}",
        exited.elapsed()
    );
}
