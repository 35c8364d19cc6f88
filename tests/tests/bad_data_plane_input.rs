//! Bad produce and fetch input on an in-process cluster (3 controllers, 3 brokers, real gRPC):
//! exact codes, nothing appended, the broker keeps serving. It was a multi-process test next
//! to the acks × min.insync matrix (`acks_min_insync_matrix.rs`): the same checks without
//! starting processes (0.17 s in a debug build; the multi-process version took 0.19 s).

use std::time::{Duration, Instant};

use keel_proto::ErrorCode;
use keel_tests::data::{assigned_topic, batch, code, values};
use keel_tests::{Endpoints, InProcessCluster};

const WAIT: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_produce_and_fetch_input_gets_exact_codes_and_appends_nothing() {
    let started = Instant::now();
    let c = InProcessCluster::start(3, 3);
    c.wait_unfenced(&[1, 2, 3], WAIT).await;
    c.create_topic(assigned_topic("bad", &[&[1, 2, 3]]), WAIT)
        .await;
    c.wait_leader_isr(1, "bad", &[1, 2, 3], WAIT).await;
    eprintln!("cluster serving the topic after {:?}", started.elapsed());

    let ok = c.produce(1, "bad", -1, &values("ok", 0..2)).await;
    assert_eq!(code(&ok), ErrorCode::None);
    let leo = c.replica(1, "bad", 0).await.unwrap().log_end_offset;

    let unknown_topic = c
        .produce_raw(1, "nope", 0, -1, 1000, batch(&values("x", 0..1)), None)
        .await
        .unwrap();
    assert_eq!(code(&unknown_topic), ErrorCode::UnknownTopicOrPartition);
    let unknown_partition = c
        .produce_raw(1, "bad", 7, -1, 1000, batch(&values("x", 0..1)), None)
        .await
        .unwrap();
    assert_eq!(code(&unknown_partition), ErrorCode::UnknownTopicOrPartition);
    let acks2 = c
        .produce_raw(1, "bad", 0, 2, 1000, batch(&values("x", 0..1)), None)
        .await
        .unwrap();
    assert_eq!(code(&acks2), ErrorCode::InvalidRequiredAcks);
    let mut corrupt = batch(&values("x", 0..3)).to_vec();
    let last = corrupt.len() - 1;
    corrupt[last] ^= 0xff;
    let corrupt = c
        .produce_raw(1, "bad", 0, -1, 1000, corrupt.into(), None)
        .await
        .unwrap();
    assert_eq!(code(&corrupt), ErrorCode::CorruptMessage);
    let big = vec!["x".repeat(2 << 20)];
    let too_large = c
        .produce_raw(1, "bad", 0, -1, 1000, batch(&big), None)
        .await
        .unwrap();
    assert_eq!(code(&too_large), ErrorCode::MessageTooLarge);
    // Over the 48 MiB a batch may have to be replicated, whatever max.message.bytes allows.
    c.set_topic_config("bad", "max.message.bytes", "60000000", WAIT)
        .await;
    let huge = vec!["x".repeat(49 << 20)];
    let over_replication = c
        .produce_raw(1, "bad", 0, -1, 1000, batch(&huge), None)
        .await
        .unwrap();
    assert_eq!(code(&over_replication), ErrorCode::MessageTooLarge);
    let follower = c
        .produce_raw(2, "bad", 0, 1, 1000, batch(&values("x", 0..1)), None)
        .await
        .unwrap();
    assert_eq!(code(&follower), ErrorCode::NotLeaderOrFollower);
    // (FENCED_LEADER_EPOCH needs a leader change first: see the seed-000 lab test.)
    let epoch = c.replica(1, "bad", 0).await.unwrap().leader_epoch;
    let unknown_epoch = c
        .produce_raw(
            1,
            "bad",
            0,
            1,
            1000,
            batch(&values("x", 0..1)),
            Some(epoch + 1),
        )
        .await
        .unwrap();
    assert_eq!(code(&unknown_epoch), ErrorCode::UnknownLeaderEpoch);
    assert_eq!(
        c.replica(1, "bad", 0).await.unwrap().log_end_offset,
        leo,
        "nothing appended by bad requests"
    );

    // Fetch beyond the HW and below the log start: OFFSET_OUT_OF_RANGE.
    for offset in [leo + 1, -1] {
        let p = c.fetch_once(1, "bad", 0, offset).await.unwrap();
        assert_eq!(
            ErrorCode::from_proto(p.error.as_ref()).unwrap(),
            ErrorCode::OffsetOutOfRange,
            "fetch at {offset}"
        );
    }
    // Still serving.
    let again = c.produce(1, "bad", -1, &values("after", 0..2)).await;
    assert_eq!(code(&again), ErrorCode::None);
    let (recs, _, _) = c.consume(1, "bad", 0, 0).await;
    let got: Vec<String> = recs.into_iter().map(|(_, v)| v).collect();
    assert_eq!(got, [values("ok", 0..2), values("after", 0..2)].concat());

    // A batch near MAX_BATCH_BYTES reaches the followers: a fetch reply holds its first batch
    // whole, beyond the fetcher's 16 MiB max_bytes. Followers refused replies over 17 MiB
    // ("decoded message length too large") and stopped replicating every partition of that
    // leader (found by the fresh-user trial with a 30 MiB record).
    let near_limit = vec!["y".repeat(40 << 20)];
    let acked = c
        .produce_raw(1, "bad", 0, -1, 20_000, batch(&near_limit), None)
        .await
        .unwrap();
    assert_eq!(code(&acked), ErrorCode::None, "acks=all of a 40 MiB batch");
    let end = c.replica(1, "bad", 0).await.unwrap().log_end_offset;
    for follower in [2, 3] {
        // acks=all may have been answered by a shrunk ISR (the harness's short lag time).
        c.wait_for(
            &format!("broker {follower} has the 40 MiB batch"),
            WAIT,
            || async {
                let leo = c.replica(follower, "bad", 0).await?.log_end_offset;
                (leo == end).then_some(())
            },
        )
        .await;
    }
    let after_big = c.produce(1, "bad", -1, &values("later", 0..2)).await;
    assert_eq!(code(&after_big), ErrorCode::None);
    eprintln!("done after {:?}", started.elapsed());
}
