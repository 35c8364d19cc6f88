//! A broker and its open-files limit on the real binaries (#26): a broker that cannot open a
//! partition's files (EMFILE once the limit is reached) stops with a controlled shutdown
//! naming the failed log directory instead of staying unfenced with replicas it does not
//! host (Kafka: a broker whose last log directory is offline shuts down); restarted with the
//! same limit it refuses to start, saying how many files its segments need; with a limit that
//! fits it serves every partition.

use std::time::{Duration, Instant};

use keel_proto::ErrorCode;
use keel_tests::Endpoints;
use keel_tests::data::{assigned_topic, code, values};
use keel_tests::process::{Cluster, Options};

const WAIT: Duration = Duration::from_secs(60);
const SESSION_MS: u64 = 10_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_out_of_file_descriptors_stops_and_says_what_to_raise() {
    let mut c = Cluster::start_opts(
        3,
        1,
        Options {
            broker_nofile: Some(1500),
            session_timeout_ms: SESSION_MS,
            ..Options::default()
        },
    );
    c.wait_unfenced(&[1], WAIT).await;
    let one: Vec<&[i32]> = vec![&[1]; 200];
    c.create_topic(assigned_topic("fits", &one), WAIT).await;
    c.wait_for(
        "the last partition of fits takes a record",
        WAIT,
        || async {
            let r = c
                .produce_raw(
                    1,
                    "fits",
                    199,
                    1,
                    1000,
                    keel_tests::data::batch(&values("f", 0..1)),
                    None,
                )
                .await
                .ok()?;
            (code(&r) == ErrorCode::None).then_some(())
        },
    )
    .await;

    // 2,000 more partitions cannot all be opened under 1,500 descriptors.
    let many: Vec<&[i32]> = vec![&[1]; 2000];
    c.create_topic(assigned_topic("too-many", &many), WAIT)
        .await;
    let status = c
        .wait_broker_exit(1, WAIT)
        .unwrap_or_else(|| panic!("broker 1 kept running\n{}", c.logs()));
    let exited = Instant::now();
    assert_eq!(status.code(), Some(1), "{}", c.broker_log(1));
    let log = c.broker_log(1);
    assert!(
        log.contains("failed: cannot open partition too-many-")
            && log.contains("Too many open files")
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

    // The same limit again: refused at start, naming the need.
    c.start_broker(1);
    let status = c
        .wait_broker_exit(1, WAIT)
        .unwrap_or_else(|| panic!("broker 1 started under a limit too low\n{}", c.logs()));
    assert_eq!(status.code(), Some(1));
    let log = c.broker_log(1);
    let refusal = log
        .lines()
        .find(|l| l.contains("segment files need"))
        .unwrap_or_else(|| panic!("no refusal line\n{log}"));
    assert!(
        refusal.contains("but the open-files limit is 1500 (also the hard limit)")
            && refusal.contains("ulimit -n"),
        "{refusal}"
    );

    // A limit that fits: every partition is served.
    c.broker_nofile = Some(8192);
    c.start_broker(1);
    c.wait_unfenced(&[1], WAIT).await;
    for (topic, last) in [("fits", 199), ("too-many", 1999)] {
        c.wait_for(&format!("{topic}-{last} takes a record"), WAIT, || async {
            let r = c
                .produce_raw(
                    1,
                    topic,
                    last,
                    1,
                    1000,
                    keel_tests::data::batch(&values("g", 0..1)),
                    None,
                )
                .await
                .ok()?;
            (code(&r) == ErrorCode::None).then_some(())
        })
        .await;
    }
}
