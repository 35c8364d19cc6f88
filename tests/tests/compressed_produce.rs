//! Keel's own producer with each compression codec (#21) against an in-process cluster (3
//! controllers, 3 brokers, replication factor 3, acks=all, idempotent): the leader validates
//! the compressed batches and stores them as sent (the codec bits are still set on what a
//! fetch returns), the followers replicate them, and Keel's consumer reads back exactly the
//! keys and values sent, at offsets 0..n. A gzip bomb is refused and appends nothing.

use std::time::{Duration, Instant};

use bytes::Bytes;
use keel_client::consumer::{Consumer, ConsumerConfig, SeekTo};
use keel_client::producer::{Producer, ProducerConfig};
use keel_proto::ErrorCode;
use keel_record::{BatchIter, CompressionType};
use keel_tests::data::{assigned_topic, code, gzip_bomb, values};
use keel_tests::{Endpoints, InProcessCluster};

const WAIT: Duration = Duration::from_secs(20);
const RECORDS: usize = 1_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_codec_round_trips_through_a_real_broker() {
    let c = InProcessCluster::start(3, 3);
    c.wait_unfenced(&[1, 2, 3], WAIT).await;
    let addr = c.broker_addr(1);
    for codec in CompressionType::ALL {
        let topic = format!("compressed-{codec}");
        c.create_topic(assigned_topic(&topic, &[&[1, 2, 3]]), WAIT)
            .await;
        c.wait_leader_isr(1, &topic, &[1, 2, 3], WAIT).await;

        let mut config = ProducerConfig::new(vec![addr.clone()]);
        config.compression = codec;
        config.linger_ms = 20;
        let producer = Producer::new(config).unwrap();
        let sent: Vec<(Option<Vec<u8>>, Vec<u8>)> = (0..RECORDS)
            .map(|i| {
                let key = (i % 10 != 0).then(|| format!("user-{}", i % 17).into_bytes());
                let value = format!("{codec} event {i} {}", "payload ".repeat(i % 20));
                (key, value.into_bytes())
            })
            .collect();
        let mut deliveries = Vec::new();
        for (k, v) in &sent {
            deliveries.push(producer.send(&topic, k.as_deref(), v).await.unwrap());
        }
        producer.flush().await;
        let mut offsets = Vec::new();
        for d in deliveries {
            offsets.push(d.await.unwrap_or_else(|e| panic!("{codec}: {e}")).offset);
        }
        assert_eq!(offsets, (0..RECORDS as i64).collect::<Vec<_>>(), "{codec}");
        producer.close().await;

        // Stored as sent: the leader serves the batches with their codec bits, compressed.
        let fetched = c.fetch_once(1, &topic, 0, 0).await.unwrap();
        let mut batches = 0;
        for b in BatchIter::new(fetched.records.clone()) {
            let b = b.unwrap();
            assert_eq!(b.compression(), Ok(codec), "{codec}: a batch as stored");
            b.validate().unwrap();
            batches += 1;
        }
        assert!(batches >= 1, "{codec}: the fetch returned batches");
        // The followers hold every record too (acks=all with the full ISR).
        for follower in [2, 3] {
            let r = c.replica(follower, &topic, 0).await.unwrap();
            assert_eq!(
                r.log_end_offset, RECORDS as i64,
                "{codec}: broker {follower}"
            );
        }

        // Keel's consumer reads back exactly what was sent.
        let mut consumer = Consumer::new(ConsumerConfig::new(vec![addr.clone()])).unwrap();
        let tp = (topic.clone(), 0);
        consumer.assign([tp.clone()]);
        consumer.seek(&tp, SeekTo::Earliest).await.unwrap();
        let mut got = Vec::new();
        let deadline = Instant::now() + WAIT;
        while got.len() < RECORDS {
            assert!(
                Instant::now() < deadline,
                "{codec}: {} records read",
                got.len()
            );
            got.extend(consumer.poll(Duration::from_millis(200)).await.unwrap());
        }
        assert_eq!(got.len(), RECORDS, "{codec}");
        for (i, (r, (k, v))) in got.iter().zip(&sent).enumerate() {
            assert_eq!(r.offset, i as i64, "{codec}");
            assert_eq!(r.key.as_deref(), k.as_deref(), "{codec} record {i}");
            assert_eq!(r.value, Some(Bytes::from(v.clone())), "{codec} record {i}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gzip_bomb_is_refused_and_nothing_is_appended() {
    let c = InProcessCluster::start(3, 3);
    c.wait_unfenced(&[1, 2, 3], WAIT).await;
    c.create_topic(assigned_topic("bomb", &[&[1, 2, 3]]), WAIT)
        .await;
    c.wait_leader_isr(1, "bomb", &[1, 2, 3], WAIT).await;
    assert_eq!(
        code(&c.produce(1, "bomb", -1, &values("ok", 0..2)).await),
        ErrorCode::None
    );

    let bomb = gzip_bomb();
    let refused = c
        .produce_raw(1, "bomb", 0, -1, 5000, bomb, None)
        .await
        .unwrap();
    // INVALID_RECORD: the CRC matched, the records are what is refused (Kafka's
    // LogValidator); CORRUPT_MESSAGE is for damaged bytes.
    assert_eq!(code(&refused), ErrorCode::InvalidRecord, "{refused:?}");
    let message = refused
        .error
        .as_ref()
        .map(|e| e.message.clone())
        .unwrap_or_default();
    assert!(message.contains("decompressed size exceeds"), "{message}");
    assert_eq!(
        c.replica(1, "bomb", 0).await.unwrap().log_end_offset,
        2,
        "nothing appended"
    );
    // Still serving.
    assert_eq!(
        code(&c.produce(1, "bomb", -1, &values("after", 0..1)).await),
        ErrorCode::None
    );
}
