//! Replication on the real binaries (issue 5 acceptance): 3 controllers + 3 brokers on
//! loopback, data on disk. The acks × min.insync.replicas × ISR matrix of seed 004. (Bad
//! produce/fetch input runs on the in-process cluster: `tests/tests/bad_data_plane_input.rs`.)

use std::time::Duration;

use keel_proto::ErrorCode;
use keel_tests::Endpoints;
use keel_tests::data::assigned_topic;
use keel_tests::data::{code, values};
use keel_tests::process::{Cluster, Options};

const WAIT: Duration = Duration::from_secs(20);

/// Brokers with a short ISR lag time, so a stopped follower leaves the ISR quickly.
fn options() -> Options {
    Options {
        broker_args: vec!["--replica-lag-time-max-ms".into(), "1000".into()],
        ..Options::default()
    }
}

async fn started(topic: &str) -> Cluster {
    let c = Cluster::start_opts(3, 3, options());
    c.wait_unfenced(&[1, 2, 3], WAIT).await;
    c.create_topic(assigned_topic(topic, &[&[1, 2, 3]]), WAIT)
        .await;
    c.wait_leader_isr(1, topic, &[1, 2, 3], WAIT).await;
    c
}

/// Seed 004: acks=all/min 2/ISR 3 ok; ISR 2 ok; ISR 1 NOT_ENOUGH_REPLICAS with the log
/// unchanged; min 1/ISR 1 ok; acks=1 ok regardless; acks=0 answers without waiting. Each
/// acknowledged acks=all record is on every ISR member and readable below the HW.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acks_min_insync_isr_matrix() {
    let mut c = started("matrix").await;
    c.set_topic_config("matrix", "min.insync.replicas", "2", WAIT)
        .await;
    c.wait_for(
        "min.insync.replicas 2 applied on the leader",
        WAIT,
        || async {
            let r = c.replica(1, "matrix", 0).await?;
            (r.min_insync_replicas == 2).then_some(())
        },
    )
    .await;

    struct Row {
        acks: i32,
        isr: &'static [i32],
        min_insync: &'static str,
        expect: ErrorCode,
    }
    let rows = [
        Row {
            acks: -1,
            isr: &[1, 2, 3],
            min_insync: "2",
            expect: ErrorCode::None,
        },
        Row {
            acks: 1,
            isr: &[1, 2, 3],
            min_insync: "2",
            expect: ErrorCode::None,
        },
        Row {
            acks: 0,
            isr: &[1, 2, 3],
            min_insync: "2",
            expect: ErrorCode::None,
        },
        Row {
            acks: -1,
            isr: &[1, 2],
            min_insync: "2",
            expect: ErrorCode::None,
        },
        Row {
            acks: 1,
            isr: &[1, 2],
            min_insync: "2",
            expect: ErrorCode::None,
        },
        Row {
            acks: -1,
            isr: &[1],
            min_insync: "2",
            expect: ErrorCode::NotEnoughReplicas,
        },
        Row {
            acks: 1,
            isr: &[1],
            min_insync: "2",
            expect: ErrorCode::None,
        },
        Row {
            acks: 0,
            isr: &[1],
            min_insync: "2",
            expect: ErrorCode::None,
        },
        Row {
            acks: -1,
            isr: &[1],
            min_insync: "1",
            expect: ErrorCode::None,
        },
    ];
    let mut acked: Vec<String> = Vec::new();
    for (i, row) in rows.iter().enumerate() {
        // Bring the ISR down to the row's: brokers not in it are stopped for good.
        for b in [3, 2] {
            if !row.isr.contains(&b) && c.broker_running(b) {
                c.kill_broker(b);
            }
        }
        let before = c.wait_leader_isr(1, "matrix", row.isr, WAIT).await;
        if before.min_insync_replicas.to_string() != row.min_insync {
            c.set_topic_config("matrix", "min.insync.replicas", row.min_insync, WAIT)
                .await;
            c.wait_for("min.insync.replicas applied", WAIT, || async {
                let r = c.replica(1, "matrix", 0).await?;
                (r.min_insync_replicas.to_string() == row.min_insync).then_some(())
            })
            .await;
        }
        let before = c.replica(1, "matrix", 0).await.unwrap();
        let vals = values(&format!("row{i}"), 0..3);
        let r = c.produce(1, "matrix", row.acks, &vals).await;
        assert_eq!(
            code(&r),
            row.expect,
            "row {i}: acks={} ISR {:?} min.insync {}: {r:?}",
            row.acks,
            row.isr,
            row.min_insync
        );
        let after = c.replica(1, "matrix", 0).await.unwrap();
        if row.expect == ErrorCode::None {
            assert_eq!(
                after.log_end_offset,
                before.log_end_offset + 3,
                "row {i} appended"
            );
            if row.acks == 1 {
                assert_eq!(r.base_offset, before.log_end_offset);
            }
            if row.acks == -1 {
                assert_eq!(r.base_offset, before.log_end_offset);
                assert!(
                    after.high_watermark >= r.base_offset + 3,
                    "row {i}: HW covers the batch"
                );
            }
            acked.extend(vals);
        } else {
            assert_eq!(
                after.log_end_offset, before.log_end_offset,
                "row {i}: log unchanged"
            );
            assert_eq!(r.base_offset, -1);
        }
    }
    // Every record of a successful row is readable (all were committed by the end: the last
    // row's ISR is the leader alone with min.insync 1).
    let (recs, _, hw) = c.consume(1, "matrix", 0, 0).await;
    assert_eq!(hw, recs.len() as i64);
    let got: Vec<String> = recs.into_iter().map(|(_, v)| v).collect();
    assert_eq!(got, acked);
}
