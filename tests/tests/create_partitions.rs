//! CreatePartitions (KIP-195) on a running cluster (in-process, real gRPC, data on disk): a
//! topic grown from one partition to three keeps its data in partition 0, and every broker
//! of the new partitions hosts them with a leader, so they take writes and serve them back.

use std::time::Duration;

use keel_proto::ErrorCode;
use keel_tests::data::{assigned_topic, code, values};
use keel_tests::{Endpoints, InProcessCluster};

const WAIT: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grown_topics_get_led_partitions_that_take_writes() {
    let c = InProcessCluster::start(3, 3);
    c.wait_unfenced(&[1, 2, 3], WAIT).await;
    c.create_topic(assigned_topic("grow", &[&[1, 2, 3]]), WAIT)
        .await;
    c.wait_leader_isr(1, "grow", &[1, 2, 3], WAIT).await;
    assert_eq!(
        code(&c.produce(1, "grow", -1, &values("a", 0..5)).await),
        ErrorCode::None
    );

    c.create_partitions("grow", 3, WAIT).await;
    for p in 1..3 {
        // Every replica (RF 3 on 3 brokers: all of them) hosts the new partition, agreeing
        // on one leader with the full ISR.
        let leader = c
            .wait_for(&format!("grow-{p} led with ISR 1,2,3"), WAIT, || async {
                let mut leaders = Vec::new();
                for b in 1..=3 {
                    let r = c.replica(b, "grow", p).await?;
                    let mut isr = r.isr.clone();
                    isr.sort();
                    (isr == [1, 2, 3] && r.leader_id > 0).then_some(())?;
                    leaders.push(r.leader_id);
                }
                leaders.dedup();
                (leaders.len() == 1).then(|| leaders[0])
            })
            .await;
        let r = c
            .produce_raw(
                leader,
                "grow",
                p,
                -1,
                5000,
                keel_tests::data::batch(&values(&format!("p{p}-"), 0..3)),
                None,
            )
            .await
            .unwrap();
        assert_eq!(code(&r), ErrorCode::None, "grow-{p} on {leader}: {r:?}");
        let (recs, _, hw) = c.consume(leader, "grow", p, 0).await;
        assert_eq!(hw, 3);
        assert_eq!(
            recs.into_iter().map(|(_, v)| v).collect::<Vec<_>>(),
            values(&format!("p{p}-"), 0..3)
        );
    }
    let (recs, _, _) = c.consume(1, "grow", 0, 0).await;
    assert_eq!(recs.len(), 5, "partition 0 keeps its records");
}
