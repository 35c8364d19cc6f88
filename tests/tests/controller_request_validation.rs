//! Malformed requests against a real controller process get the exact Kafka error code, and
//! nothing is written: heartbeats claiming offsets the controller does not have, reads from
//! beyond the log end or with an inverted range, and `validate_only` topic creation.

use std::time::Duration;

use keel_proto::ErrorCode;
use keel_proto::controller::{
    BrokerHeartbeatRequest, CreatableReplicaAssignment, CreatableTopic, CreateTopicsRequest,
    DescribeClusterRequest, FetchMetadataRequest, ReadMetadataLogRequest, RegisterBrokerRequest,
};
use keel_tests::quorum::*;

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
            ..Default::default()
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

/// Highest offset of a finished snapshot file in controller `id`'s data dir (0 = none).
fn newest_snapshot_offset(q: &Quorum, id: u64) -> u64 {
    std::fs::read_dir(q.data_dir(id).join("snapshots"))
        .map(|rd| {
            rd.filter_map(|e| {
                let name = e.ok()?.file_name().to_string_lossy().into_owned();
                let rest = name.strip_prefix("snapshot-")?.strip_suffix(".snap")?;
                rest.split('-').next()?.parse::<u64>().ok()
            })
            .max()
            .unwrap_or(0)
        })
        .unwrap_or(0)
}

fn registration(id: i32, host: String, rack: String) -> RegisterBrokerRequest {
    RegisterBrokerRequest {
        broker_id: id,
        incarnation_id: bytes::Bytes::copy_from_slice(uuid::Uuid::new_v4().as_bytes()),
        listeners: vec![keel_proto::metadata::BrokerEndpoint {
            name: "PLAINTEXT".into(),
            host,
            port: 29092,
            security_protocol: "PLAINTEXT".into(),
        }],
        rack,
        ..Default::default()
    }
}

/// Issue #18, item 1: one RegisterBroker with a 20 MiB host used to be committed, after which
/// every controller panicked at its next snapshot ("record of 20971573 bytes exceeds the
/// snapshot limit") and crashed again on every restart. Oversized fields are now refused
/// before anything is decided (the transport refuses requests over 8 MiB with gRPC OUT_OF_RANGE, the bounds any
/// field over its limit), and the quorum keeps committing and taking snapshots.
#[tokio::test]
async fn oversized_registrations_are_refused_and_the_quorum_keeps_snapshotting() {
    let q = Quorum::start_with(
        3,
        &[
            "--metadata-snapshot-max-entries",
            "20",
            "--metadata-max-idle-interval-ms",
            "20",
        ],
    );
    q.wait_leader(Duration::from_secs(20)).await;

    // 20 MiB host: over the ControllerService's request limit, refused by the transport.
    let host_20mib = "h".repeat(20 << 20);
    let status = on_leader(&q, Duration::from_secs(20), |mut c| {
        let req = registration(1, host_20mib.clone(), String::new());
        async move {
            match c.register_broker(req).await {
                // tonic's code for a message over the decoding limit.
                Err(s) if s.code() == tonic::Code::OutOfRange => Some(Ok(s)),
                Err(_) => None,
                Ok(r) if is_not_controller(&r.get_ref().error) => None,
                Ok(r) => Some(Err(r.into_inner())),
            }
        }
    })
    .await;
    let status = status.expect("a 20 MiB request is refused by the transport");
    assert!(
        status.message().contains("the limit is: 8388608 bytes"),
        "{status:?}"
    );

    // Fields under the transport limit but over their own bounds: INVALID_REQUEST naming the
    // field and its limit, with the input clipped in the message.
    let cases = [
        (
            "h".repeat(1 << 20),
            String::new(),
            "listeners[0].host: 1048576 bytes, the limit is 255",
        ),
        (
            "h".repeat(256),
            String::new(),
            "listeners[0].host: 256 bytes, the limit is 255",
        ),
        (
            "127.0.0.1".to_string(),
            "r".repeat(4 << 20),
            "rack: 4194304 bytes, the limit is 255",
        ),
    ];
    for (host, rack, expected) in cases {
        let reply = on_leader(&q, Duration::from_secs(20), |mut c| {
            let req = registration(1, host.clone(), rack.clone());
            async move {
                let r = c.register_broker(req).await.ok()?.into_inner();
                (!is_not_controller(&r.error)).then_some(r)
            }
        })
        .await;
        let e = reply.error.as_ref().expect("refused");
        assert_eq!(code_of(&reply.error), ErrorCode::InvalidRequest, "{e:?}");
        assert!(e.message.starts_with(expected), "{}", e.message);
        assert!(
            e.message.len() < 300,
            "input echoed unclipped: {} bytes",
            e.message.len()
        );
    }

    // The largest allowed host and rack commit, and snapshots keep being taken after it on
    // every controller (NoOpRecords every 20 ms, a snapshot every 20 entries).
    let registered = on_leader(&q, Duration::from_secs(20), |mut c| {
        let req = registration(1, "h".repeat(255), "r".repeat(255));
        async move {
            let r = c.register_broker(req).await.ok()?.into_inner();
            (!is_not_controller(&r.error)).then_some(r)
        }
    })
    .await;
    assert!(ok(&registered.error), "{registered:?}");
    let after = registered.broker_epoch as u64 + 40;
    let start = std::time::Instant::now();
    while !q
        .ids()
        .into_iter()
        .all(|id| newest_snapshot_offset(&q, id) >= after)
    {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "snapshots past offset {after} on every controller: {:?}\n{}",
            q.ids()
                .into_iter()
                .map(|id| newest_snapshot_offset(&q, id))
                .collect::<Vec<_>>(),
            q.logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for id in q.ids() {
        assert!(q.is_running(id), "controller {id} stopped\n{}", q.logs());
    }
    // Nothing of the refused requests was written (the log is purged into snapshots by now,
    // so ask the image): one broker, with the allowed registration.
    let mut c = q.client(q.wait_leader(Duration::from_secs(5)).await).await;
    let cluster = c
        .describe_cluster(DescribeClusterRequest {
            include_fenced_brokers: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(cluster.brokers.len(), 1, "{cluster:?}");
    assert_eq!(cluster.brokers[0].broker_epoch, registered.broker_epoch);
    assert_eq!(cluster.brokers[0].endpoints[0].host.len(), 255);
}
