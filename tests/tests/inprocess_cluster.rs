//! The in-process cluster fixture itself: a killed active controller is replaced and writes
//! go on; a broker stopped gracefully returns Ok, and started again on its old address and
//! data it registers and is unfenced again, holding what it had.

use std::time::Duration;

use keel_proto::ErrorCode;
use keel_tests::data::{assigned_topic, code, values};
use keel_tests::{Endpoints, InProcessCluster};

const WAIT: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_controllers_are_replaced_and_stopped_brokers_come_back() {
    let mut c = InProcessCluster::start(3, 3);
    let first = c.wait_unfenced(&[1, 2, 3], WAIT).await.controller_id as u64;

    c.kill_controller(first);
    assert!(!c.controller_running(first));
    c.create_topic(assigned_topic("after-kill", &[&[1, 2, 3]]), WAIT)
        .await;
    let second = c.wait_unfenced(&[1, 2, 3], WAIT).await.controller_id as u64;
    assert_ne!(second, first, "the killed controller cannot be active");
    c.start_controller(first);

    c.wait_leader_isr(1, "after-kill", &[1, 2, 3], WAIT).await;
    let acked = c.produce(1, "after-kill", -1, &values("v", 0..3)).await;
    assert_eq!(code(&acked), ErrorCode::None);

    c.stop_broker(3, WAIT).await.expect("a clean broker stop");
    assert!(!c.broker_running(3));
    c.wait_leader_isr(1, "after-kill", &[1, 2], WAIT).await;
    c.start_broker(3);
    c.wait_unfenced(&[3], WAIT).await;
    c.wait_leader_isr(1, "after-kill", &[1, 2, 3], WAIT).await;
    let back = c
        .replica(3, "after-kill", 0)
        .await
        .expect("broker 3 hosts the partition");
    assert_eq!(back.log_end_offset, 3, "{back:?}");
    let (recs, _, hw) = c.consume(1, "after-kill", 0, 0).await;
    assert_eq!(hw, 3);
    assert_eq!(
        recs.into_iter().map(|(_, v)| v).collect::<Vec<_>>(),
        values("v", 0..3)
    );
}
