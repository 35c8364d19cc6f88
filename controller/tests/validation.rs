//! Malformed requests against a real controller process get the exact Kafka error code, and
//! nothing is written: heartbeats claiming offsets the controller does not have, reads from
//! beyond the log end or with an inverted range, and `validate_only` topic creation.

mod common;

use std::time::Duration;

use common::*;
use keel_proto::ErrorCode;
use keel_proto::controller::{
    BrokerHeartbeatRequest, CreatableReplicaAssignment, CreatableTopic, CreateTopicsRequest,
    DescribeClusterRequest, FetchMetadataRequest, ReadMetadataLogRequest, RegisterBrokerRequest,
};

fn code_of(e: &Option<keel_proto::common::Error>) -> ErrorCode {
    ErrorCode::from_proto(e.as_ref()).expect("known error code")
}

#[tokio::test]
async fn malformed_reads_heartbeats_and_dry_runs_get_exact_codes_and_write_nothing() {
    let q = Quorum::start(1);
    q.wait_leader(Duration::from_secs(20)).await;
    let _live = FakeBroker::start(&q, 1, "", Duration::from_millis(100)).await;
    let mut c = q.client(1).await;
    // Broker 1 must be unfenced for the dry-run topic below to be placeable.
    let start = std::time::Instant::now();
    loop {
        let cluster = c
            .describe_cluster(DescribeClusterRequest::default())
            .await
            .unwrap()
            .into_inner();
        if cluster
            .brokers
            .iter()
            .any(|b| b.broker_id == 1 && !b.fenced)
        {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "broker 1 not unfenced: {cluster:?}\n{}",
            q.logs()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // A fenced broker that claims to have applied everything: refused, stays fenced.
    let reg = c
        .register_broker(RegisterBrokerRequest {
            broker_id: 2,
            incarnation_id: bytes::Bytes::copy_from_slice(uuid::Uuid::new_v4().as_bytes()),
            listeners: vec![keel_proto::metadata::BrokerEndpoint {
                name: "PLAINTEXT".into(),
                host: "127.0.0.1".into(),
                port: 29094,
                security_protocol: "PLAINTEXT".into(),
            }],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(ok(&reg.error), "{:?}", reg.error);
    for claimed in [i64::MAX, 1_000_000_000] {
        let hb = c
            .broker_heartbeat(BrokerHeartbeatRequest {
                broker_id: 2,
                broker_epoch: reg.broker_epoch,
                current_metadata_offset: claimed,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(code_of(&hb.error), ErrorCode::InvalidRequest, "{hb:?}");
        assert!(hb.is_fenced && !hb.is_caught_up, "{hb:?}");
    }

    // validate_only: an answer without a metadata offset, and no TopicRecord.
    let topic = CreatableTopic {
        name: "dry".into(),
        num_partitions: -1,
        replication_factor: -1,
        assignments: vec![CreatableReplicaAssignment {
            partition_index: 0,
            broker_ids: vec![1],
        }],
        configs: vec![],
    };
    let r = c
        .create_topics(CreateTopicsRequest {
            topics: vec![topic],
            validate_only: true,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(ok(&r.topics[0].error), "{r:?}");
    assert_eq!(r.topics[0].metadata_offset, -1, "{r:?}");

    // Inverted range and reads beyond the log end.
    let read = |from: i64, to: i64| ReadMetadataLogRequest {
        from_offset: from,
        to_offset: to,
        ..Default::default()
    };
    let r = c.read_metadata_log(read(5, 3)).await.unwrap().into_inner();
    assert_eq!(code_of(&r.error), ErrorCode::InvalidRequest, "{r:?}");
    assert!(r.records.is_empty());
    let r = c
        .read_metadata_log(read(1_000_000_000, 0))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(code_of(&r.error), ErrorCode::OffsetOutOfRange, "{r:?}");
    assert!(r.records.is_empty());
    // A long poll for offsets not there yet waits and answers empty, without an error.
    let r = c
        .read_metadata_log(ReadMetadataLogRequest {
            max_wait_ms: 100,
            ..read(1_000_000_000, 0)
        })
        .await
        .unwrap()
        .into_inner();
    assert!(r.error.is_none() && r.records.is_empty(), "{r:?}");
    let fetched = tokio::time::timeout(
        Duration::from_secs(5),
        c.fetch_metadata(FetchMetadataRequest {
            from_offset: 1_000_000_000,
            ..Default::default()
        }),
    )
    .await
    .expect("FetchMetadata beyond the log end answers at once");
    let status = match fetched {
        Err(status) => status,
        // Statuses raised after the stream opened arrive as its first message.
        Ok(stream) => tokio::time::timeout(Duration::from_secs(5), stream.into_inner().message())
            .await
            .expect("an answer at once")
            .expect_err("an error, not an item"),
    };
    assert_eq!(status.code(), tonic::Code::OutOfRange, "{status:?}");
    assert!(
        status.message().starts_with("OFFSET_OUT_OF_RANGE"),
        "{status:?}"
    );

    // Nothing of the above was written: broker 2 is still fenced, no change record for it
    // and no topic.
    let cluster = c
        .describe_cluster(DescribeClusterRequest {
            include_fenced_brokers: true,
        })
        .await
        .unwrap()
        .into_inner();
    let b2 = cluster.brokers.iter().find(|b| b.broker_id == 2).unwrap();
    assert!(b2.fenced, "{b2:?}");
    let records = q.committed_records(1).await;
    assert!(
        !records
            .iter()
            .any(|(_, _, r)| r.contains("TopicRecord") || r.contains("name: \"dry\"")),
        "{records:?}"
    );
    assert!(
        !records
            .iter()
            .any(|(_, _, r)| r.contains("BrokerRegistrationChange") && r.contains("broker_id: 2,")),
        "{records:?}"
    );
}
