//! The admin APIs on the Kafka listener (#21), over real TCP with requests encoded by
//! `kafka-protocol`: CreateTopics, DescribeConfigs, DeleteTopics, DescribeCluster,
//! CreatePartitions, ElectLeaders, Alter/ListPartitionReassignments and
//! IncrementalAlterConfigs are forwarded to the active controller, and what they did is checked with Metadata on another
//! broker's listener; the forwarding follows a new active controller after the old one dies.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use kafka_protocol::messages::alter_partition_reassignments_request;
use kafka_protocol::messages::create_acls_request;
use kafka_protocol::messages::create_partitions_request::{
    CreatePartitionsAssignment, CreatePartitionsTopic,
};
use kafka_protocol::messages::create_topics_request::{
    CreatableReplicaAssignment, CreatableTopic, CreatableTopicConfig,
};
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::elect_leaders_request;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use keel_tests::kafka::call;
use keel_tests::{Endpoints, InProcessCluster};

const WAIT: Duration = Duration::from_secs(20);

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

fn name(v: &str) -> TopicName {
    TopicName(s(v))
}

/// ApiVersions v3 on `addr` advertises each `(key, min, max)` of `ranges`.
async fn assert_advertised(addr: SocketAddr, ranges: &[(ApiKey, i16, i16)]) {
    let versions: ApiVersionsResponse =
        call(addr, ApiKey::ApiVersions, 3, &ApiVersionsRequest::default()).await;
    for &(key, min, max) in ranges {
        let v = versions
            .api_keys
            .iter()
            .find(|v| v.api_key == key as i16)
            .unwrap_or_else(|| panic!("{key:?} not advertised"));
        assert_eq!((v.min_version, v.max_version), (min, max), "{key:?}");
    }
}

/// Metadata v12 for `topics` on `addr`.
async fn metadata(addr: SocketAddr, topics: &[&str]) -> MetadataResponse {
    let req = MetadataRequest::default().with_topics(Some(
        topics
            .iter()
            .map(|t| MetadataRequestTopic::default().with_name(Some(name(t))))
            .collect(),
    ));
    call(addr, ApiKey::Metadata, 12, &req).await
}

/// Polls Metadata on `addr` until `check` holds for `topic`'s entry.
async fn wait_topic(
    addr: SocketAddr,
    topic: &str,
    what: &str,
    check: impl Fn(&metadata_response::MetadataResponseTopic) -> bool,
) -> metadata_response::MetadataResponseTopic {
    let start = Instant::now();
    loop {
        let m = metadata(addr, &[topic]).await;
        let t = m
            .topics
            .into_iter()
            .next()
            .expect("one topic asked, one answered");
        if check(&t) {
            return t;
        }
        assert!(
            start.elapsed() < WAIT,
            "{topic}: {what} not seen in {WAIT:?}: {t:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn topic(n: &str) -> CreatableTopic {
    CreatableTopic::default()
        .with_name(name(n))
        .with_num_partitions(-1)
        .with_replication_factor(-1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_admin_create_describe_delete_topics_and_describe_cluster() {
    let c = InProcessCluster::start(3, 3);
    let cluster = c.wait_unfenced(&[1, 2, 3], WAIT).await;
    let (k1, k2, k3) = (c.kafka_addr(1), c.kafka_addr(2), c.kafka_addr(3));

    // ApiVersions advertises the admin ranges.
    assert_advertised(
        k1,
        &[
            (ApiKey::CreateTopics, 2, 7),
            (ApiKey::DeleteTopics, 1, 6),
            (ApiKey::DescribeConfigs, 1, 4),
            (ApiKey::DescribeCluster, 0, 2),
        ],
    )
    .await;

    // DescribeCluster: every broker with its Kafka endpoint, a live broker as controller.
    for version in 0..=2 {
        let d: DescribeClusterResponse = call(
            k2,
            ApiKey::DescribeCluster,
            version,
            &DescribeClusterRequest::default().with_include_fenced_brokers(version >= 2),
        )
        .await;
        assert_eq!(d.error_code, 0, "v{version}: {:?}", d.error_message);
        assert_eq!(d.cluster_id.as_str(), cluster.cluster_id);
        assert_eq!(
            d.controller_id.0, 2,
            "v{version}: the answering broker is live"
        );
        assert_eq!(d.cluster_authorized_operations, i32::MIN);
        let brokers: Vec<(i32, u16, bool)> = d
            .brokers
            .iter()
            .map(|b| (b.broker_id.0, b.port as u16, b.is_fenced))
            .collect();
        let want: Vec<(i32, u16, bool)> = [1, 2, 3]
            .into_iter()
            .map(|id| (id, c.kafka_addr(id).port(), false))
            .collect();
        assert_eq!(brokers, want, "v{version}");
    }
    let wrong: DescribeClusterResponse = call(
        k2,
        ApiKey::DescribeCluster,
        1,
        &DescribeClusterRequest::default().with_endpoint_type(2),
    )
    .await;
    assert_eq!(wrong.error_code, 114, "MISMATCHED_ENDPOINT_TYPE");

    // CreateTopics v7: defaults, configs, an explicit assignment, an invalid name.
    let create = CreateTopicsRequest::default()
        .with_timeout_ms(15_000)
        .with_topics(vec![
            topic("ka-default").with_configs(vec![
                CreatableTopicConfig::default()
                    .with_name(s("retention.ms"))
                    .with_value(Some(s("123456"))),
            ]),
            topic("ka-assigned").with_assignments(vec![
                CreatableReplicaAssignment::default()
                    .with_partition_index(0)
                    .with_broker_ids(vec![BrokerId(2), BrokerId(3)]),
                CreatableReplicaAssignment::default()
                    .with_partition_index(1)
                    .with_broker_ids(vec![BrokerId(3), BrokerId(1)]),
            ]),
            topic("bad name!"),
        ]);
    let created: CreateTopicsResponse = call(k1, ApiKey::CreateTopics, 7, &create).await;
    assert_eq!(created.topics.len(), 3);
    let (default, assigned, bad) = (&created.topics[0], &created.topics[1], &created.topics[2]);
    assert_eq!(
        (default.error_code, default.error_message.as_deref()),
        (0, None)
    );
    assert_eq!(default.name.0.as_str(), "ka-default");
    assert_eq!(
        (default.num_partitions, default.replication_factor),
        (1, 1),
        "the controller's defaults"
    );
    assert!(!default.topic_id.is_nil());
    let retention = default
        .configs
        .iter()
        .flatten()
        .find(|c| c.name.as_str() == "retention.ms")
        .expect("retention.ms in the result configs");
    assert_eq!(retention.value.as_deref(), Some("123456"));
    assert_eq!(retention.config_source, 1, "DYNAMIC_TOPIC_CONFIG");
    assert_eq!(assigned.error_code, 0, "{:?}", assigned.error_message);
    assert_eq!(
        (assigned.num_partitions, assigned.replication_factor),
        (2, 2)
    );
    assert_eq!(bad.error_code, 17, "INVALID_TOPIC_EXCEPTION");
    assert!(bad.error_message.as_deref().is_some_and(|m| !m.is_empty()));

    // The topics exist, seen through another broker's listener.
    let seen = wait_topic(k3, "ka-default", "creation", |t| t.error_code == 0).await;
    assert_eq!(seen.topic_id, default.topic_id);
    assert_eq!(seen.partitions.len(), 1);
    let seen = wait_topic(k3, "ka-assigned", "creation", |t| t.error_code == 0).await;
    let mut replicas: Vec<(i32, Vec<i32>)> = seen
        .partitions
        .iter()
        .map(|p| {
            (
                p.partition_index,
                p.replica_nodes.iter().map(|b| b.0).collect(),
            )
        })
        .collect();
    replicas.sort();
    assert_eq!(replicas, [(0, vec![2, 3]), (1, vec![3, 1])]);

    // Again: TOPIC_ALREADY_EXISTS; validate_only (v4) writes nothing.
    let again: CreateTopicsResponse = call(
        k2,
        ApiKey::CreateTopics,
        2,
        &CreateTopicsRequest::default()
            .with_timeout_ms(15_000)
            .with_topics(vec![topic("ka-default").with_num_partitions(3)]),
    )
    .await;
    assert_eq!(again.topics[0].error_code, 36, "TOPIC_ALREADY_EXISTS");
    let validated: CreateTopicsResponse = call(
        k2,
        ApiKey::CreateTopics,
        4,
        &CreateTopicsRequest::default()
            .with_timeout_ms(15_000)
            .with_validate_only(true)
            .with_topics(vec![topic("ka-validate").with_num_partitions(4)]),
    )
    .await;
    assert_eq!(validated.topics[0].error_code, 0);
    // Metadata on the broker that forwarded it: a created topic would be there by now (the
    // creations above were seen on another broker).
    wait_topic(k2, "ka-default", "creation", |t| t.error_code == 0).await;
    let m = metadata(k2, &["ka-validate"]).await;
    assert_eq!(
        m.topics[0].error_code, 3,
        "validate_only created nothing: {m:?}"
    );

    // DescribeConfigs v4: the topic's override and defaults, this broker's config, refusals.
    let res = |t: i8, n: &str, keys: Option<Vec<&str>>| {
        DescribeConfigsResource::default()
            .with_resource_type(t)
            .with_resource_name(s(n))
            .with_configuration_keys(keys.map(|k| k.into_iter().map(s).collect()))
    };
    let described: DescribeConfigsResponse = call(
        k1,
        ApiKey::DescribeConfigs,
        4,
        &DescribeConfigsRequest::default()
            .with_include_synonyms(true)
            .with_resources(vec![
                res(2, "ka-default", None),
                res(
                    4,
                    "1",
                    Some(vec!["min.insync.replicas", "log.segment.bytes"]),
                ),
                res(4, "2", None),
                res(2, "ka-missing", None),
                res(8, "1", None),
            ]),
    )
    .await;
    let r = &described.results;
    assert_eq!(r.len(), 5);
    assert_eq!(r[0].error_code, 0, "{:?}", r[0].error_message);
    let get = |i: usize, key: &str| {
        r[i].configs
            .iter()
            .find(|c| c.name.as_str() == key)
            .unwrap_or_else(|| panic!("{key} in result {i}: {:?}", r[i].configs))
            .clone()
    };
    let retention = get(0, "retention.ms");
    assert_eq!(retention.value.as_deref(), Some("123456"));
    assert_eq!(retention.config_source, 1, "DYNAMIC_TOPIC_CONFIG");
    assert_eq!(retention.config_type, 5, "LONG");
    assert_eq!(retention.synonyms[0].value.as_deref(), Some("123456"));
    assert_eq!(retention.synonyms[0].source, 1);
    let policy = get(0, "cleanup.policy");
    assert_eq!(policy.value.as_deref(), Some("delete"));
    assert_eq!(policy.config_source, 5, "DEFAULT_CONFIG");
    assert_eq!(r[1].error_code, 0, "{:?}", r[1].error_message);
    assert_eq!(
        r[1].configs.len(),
        2,
        "only the asked keys: {:?}",
        r[1].configs
    );
    let broker = c.broker_config(1);
    assert_eq!(
        get(1, "min.insync.replicas").value.as_deref(),
        Some(broker.min_insync_replicas.to_string().as_str())
    );
    assert_eq!(
        get(1, "log.segment.bytes").value.as_deref(),
        Some(broker.log_segment_bytes.to_string().as_str())
    );
    assert_eq!(
        r[2].error_code, 42,
        "another broker's configs: INVALID_REQUEST"
    );
    assert_eq!(r[3].error_code, 3, "UNKNOWN_TOPIC_OR_PARTITION");
    assert_eq!(r[4].error_code, 42, "BROKER_LOGGER: INVALID_REQUEST");
    // v1: the same topic, no config types.
    let v1: DescribeConfigsResponse = call(
        k3,
        ApiKey::DescribeConfigs,
        1,
        &DescribeConfigsRequest::default().with_resources(vec![res(
            2,
            "ka-default",
            Some(vec!["retention.ms"]),
        )]),
    )
    .await;
    assert_eq!(v1.results[0].configs.len(), 1);
    assert_eq!(v1.results[0].configs[0].value.as_deref(), Some("123456"));

    // DeleteTopics v6: by id and by name, plus an unknown name; v1 for an unknown topic.
    let deleted: DeleteTopicsResponse = call(
        k2,
        ApiKey::DeleteTopics,
        6,
        &DeleteTopicsRequest::default()
            .with_timeout_ms(15_000)
            .with_topics(vec![
                DeleteTopicState::default()
                    .with_name(None)
                    .with_topic_id(default.topic_id),
                DeleteTopicState::default().with_name(Some(name("ka-assigned"))),
                DeleteTopicState::default().with_name(Some(name("ka-nope"))),
            ]),
    )
    .await;
    let d = &deleted.responses;
    assert_eq!(d.len(), 3);
    assert_eq!((d[0].error_code, d[0].topic_id), (0, default.topic_id));
    assert_eq!(d[0].name.as_ref().map(|n| n.0.as_str()), Some("ka-default"));
    assert_eq!(d[1].error_code, 0, "{:?}", d[1].error_message);
    assert_eq!(d[2].error_code, 3, "UNKNOWN_TOPIC_OR_PARTITION");
    for t in ["ka-default", "ka-assigned"] {
        wait_topic(k1, t, "deletion", |t| t.error_code == 3).await;
    }
    let old: DeleteTopicsResponse = call(
        k3,
        ApiKey::DeleteTopics,
        1,
        &DeleteTopicsRequest::default()
            .with_timeout_ms(15_000)
            .with_topic_names(vec![name("ka-default")]),
    )
    .await;
    assert_eq!(old.responses[0].error_code, 3, "already gone");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_admin_follows_a_new_active_controller() {
    let mut c = InProcessCluster::start(3, 2);
    let first = c.wait_unfenced(&[1, 2], WAIT).await.controller_id;
    let k1 = c.kafka_addr(1);
    // A first call teaches the broker which controller is active.
    let created: CreateTopicsResponse = call(
        k1,
        ApiKey::CreateTopics,
        7,
        &CreateTopicsRequest::default()
            .with_timeout_ms(15_000)
            .with_topics(vec![topic("ka-before")]),
    )
    .await;
    assert_eq!(created.topics[0].error_code, 0);

    c.kill_controller(first as u64);
    // Retriable errors (REQUEST_TIMED_OUT, NOT_CONTROLLER) while the quorum elects a new
    // leader, as Kafka clients see them; then success.
    let start = Instant::now();
    let outcome = loop {
        let r: CreateTopicsResponse = call(
            k1,
            ApiKey::CreateTopics,
            7,
            &CreateTopicsRequest::default()
                .with_timeout_ms(5_000)
                .with_topics(vec![topic("ka-after")]),
        )
        .await;
        let t = &r.topics[0];
        match t.error_code {
            0 => break t.clone(),
            7 | 41 if start.elapsed() < WAIT => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            other => panic!("CreateTopics after the kill: {other} {:?}", t.error_message),
        }
    };
    assert!(!outcome.topic_id.is_nil());
    let m = wait_topic(c.kafka_addr(2), "ka-after", "creation", |t| {
        t.error_code == 0
    })
    .await;
    assert_eq!(m.topic_id, outcome.topic_id);
    let d: DescribeClusterResponse = call(
        k1,
        ApiKey::DescribeCluster,
        1,
        &DescribeClusterRequest::default(),
    )
    .await;
    assert_eq!(d.error_code, 0, "{:?}", d.error_message);
    assert_eq!(d.brokers.len(), 2);
}

/// The retention.ms of `topic` as DescribeConfigs on `addr` reports it: (value, source).
async fn retention_ms(addr: SocketAddr, topic: &str) -> (Option<String>, i8) {
    let d: DescribeConfigsResponse = call(
        addr,
        ApiKey::DescribeConfigs,
        4,
        &DescribeConfigsRequest::default().with_resources(vec![
            DescribeConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(s(topic))
                .with_configuration_keys(Some(vec![s("retention.ms")])),
        ]),
    )
    .await;
    let r = &d.results[0];
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
    let c = &r.configs[0];
    (c.value.as_ref().map(|v| v.to_string()), c.config_source)
}

/// CreatePartitions (KIP-195), ElectLeaders (KIP-460), Alter/ListPartitionReassignments
/// (KIP-455) and IncrementalAlterConfigs (KIP-339), as `kafka-topics.sh --alter --partitions`,
/// `kafka-leader-election.sh`, `kafka-reassign-partitions.sh` and `kafka-configs.sh --alter`
/// send them: forwarded to the active
/// controller, per-topic and per-resource errors with Kafka's codes, and the result seen in
/// Metadata and DescribeConfigs on other brokers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_admin_alters_partitions_leaders_assignments_and_configs() {
    let c = InProcessCluster::start(3, 3);
    c.wait_unfenced(&[1, 2, 3], WAIT).await;
    let (k1, k2, k3) = (c.kafka_addr(1), c.kafka_addr(2), c.kafka_addr(3));

    assert_advertised(
        k1,
        &[
            (ApiKey::CreatePartitions, 0, 3),
            (ApiKey::ElectLeaders, 0, 2),
            (ApiKey::IncrementalAlterConfigs, 0, 1),
            (ApiKey::AlterPartitionReassignments, 0, 0),
            (ApiKey::ListPartitionReassignments, 0, 0),
            (ApiKey::DescribeAcls, 1, 3),
            (ApiKey::CreateAcls, 1, 3),
            (ApiKey::DeleteAcls, 1, 3),
            (ApiKey::DescribeLogDirs, 1, 4),
        ],
    )
    .await;

    let created: CreateTopicsResponse = call(
        k1,
        ApiKey::CreateTopics,
        7,
        &CreateTopicsRequest::default()
            .with_timeout_ms(15_000)
            .with_topics(vec![
                topic("kp")
                    .with_num_partitions(2)
                    .with_replication_factor(2),
            ]),
    )
    .await;
    assert_eq!(created.topics[0].error_code, 0);
    wait_topic(k2, "kp", "creation", |t| t.partitions.len() == 2).await;

    // CreatePartitions v3: placed by the controller; an unknown topic fails alone.
    let grow = |n: &str, count: i32| {
        CreatePartitionsTopic::default()
            .with_name(name(n))
            .with_count(count)
            .with_assignments(None)
    };
    let r: CreatePartitionsResponse = call(
        k2,
        ApiKey::CreatePartitions,
        3,
        &CreatePartitionsRequest::default()
            .with_timeout_ms(15_000)
            .with_topics(vec![grow("kp", 4), grow("kp-missing", 3)]),
    )
    .await;
    let got: Vec<(&str, i16)> = r
        .results
        .iter()
        .map(|t| (t.name.0.as_str(), t.error_code))
        .collect();
    assert_eq!(got, vec![("kp", 0), ("kp-missing", 3)], "{r:?}");
    assert_eq!(r.results[0].error_message, None);
    let kp = wait_topic(k3, "kp", "4 partitions", |t| t.partitions.len() == 4).await;
    assert!(
        kp.partitions.iter().all(|p| p.replica_nodes.len() == 2),
        "new partitions keep the replication factor: {kp:?}"
    );

    // v0: a smaller count is INVALID_PARTITIONS (37); validate_only writes nothing.
    let r: CreatePartitionsResponse = call(
        k1,
        ApiKey::CreatePartitions,
        0,
        &CreatePartitionsRequest::default()
            .with_timeout_ms(15_000)
            .with_topics(vec![grow("kp", 2)]),
    )
    .await;
    assert_eq!(r.results[0].error_code, 37, "{r:?}");
    assert!(r.results[0].error_message.is_some());
    let r: CreatePartitionsResponse = call(
        k1,
        ApiKey::CreatePartitions,
        1,
        &CreatePartitionsRequest::default()
            .with_timeout_ms(15_000)
            .with_validate_only(true)
            .with_topics(vec![grow("kp", 8)]),
    )
    .await;
    assert_eq!(r.results[0].error_code, 0, "{r:?}");

    // v2: an explicit assignment of the one new partition; the count seen afterwards is 5,
    // not the validate_only request's 8.
    let r: CreatePartitionsResponse = call(
        k3,
        ApiKey::CreatePartitions,
        2,
        &CreatePartitionsRequest::default()
            .with_timeout_ms(15_000)
            .with_topics(vec![grow("kp", 5).with_assignments(Some(vec![
                    CreatePartitionsAssignment::default()
                        .with_broker_ids(vec![BrokerId(3), BrokerId(1)]),
                ]))]),
    )
    .await;
    assert_eq!(r.results[0].error_code, 0, "{r:?}");
    let kp = wait_topic(k1, "kp", "5 partitions", |t| t.partitions.len() == 5).await;
    let p4 = kp
        .partitions
        .iter()
        .find(|p| p.partition_index == 4)
        .expect("partition 4");
    assert_eq!(p4.replica_nodes, vec![BrokerId(3), BrokerId(1)]);

    // ElectLeaders (kafka-leader-election.sh): every partition of kp is led by its preferred
    // replica, so a preferred election is not needed (84); an unknown topic is 3; v2 with
    // null partitions (every partition) answers only partitions that needed an election.
    let elect = |partitions: Option<Vec<(&str, Vec<i32>)>>| {
        ElectLeadersRequest::default()
            .with_timeout_ms(15_000)
            .with_topic_partitions(partitions.map(|ts| {
                ts.into_iter()
                    .map(|(t, ps)| {
                        elect_leaders_request::TopicPartitions::default()
                            .with_topic(name(t))
                            .with_partitions(ps)
                    })
                    .collect()
            }))
    };
    wait_topic(k1, "kp", "preferred leaders", |t| {
        t.partitions
            .iter()
            .all(|p| Some(&p.leader_id) == p.replica_nodes.first())
    })
    .await;
    for version in 0..=2 {
        let r: ElectLeadersResponse = call(
            k2,
            ApiKey::ElectLeaders,
            version,
            &elect(Some(vec![("kp", vec![0, 4]), ("kp-missing", vec![0])])),
        )
        .await;
        assert_eq!(r.error_code, 0, "v{version}: {r:?}");
        let mut got: Vec<(&str, i32, i16)> = r
            .replica_election_results
            .iter()
            .flat_map(|t| {
                t.partition_result
                    .iter()
                    .map(move |p| (t.topic.0.as_str(), p.partition_id, p.error_code))
            })
            .collect();
        got.sort();
        assert_eq!(
            got,
            vec![("kp", 0, 84), ("kp", 4, 84), ("kp-missing", 0, 3)],
            "v{version}: {r:?}"
        );
    }
    let r: ElectLeadersResponse = call(k3, ApiKey::ElectLeaders, 2, &elect(None)).await;
    assert_eq!(r.error_code, 0, "{r:?}");
    assert!(
        r.replica_election_results
            .iter()
            .all(|t| t.partition_result.is_empty()),
        "{r:?}"
    );

    // AlterPartitionReassignments (kafka-reassign-partitions --execute): partition 4 moves
    // from [3, 1] to [2, 3]; cancelling a partition that is not moving is 85, an unknown
    // topic 3, a duplicate broker 39. ListPartitionReassignments answers (the move of an
    // empty partition may already be over).
    let target = |index: i32, replicas: Option<Vec<i32>>| {
        alter_partition_reassignments_request::ReassignablePartition::default()
            .with_partition_index(index)
            .with_replicas(replicas.map(|r| r.into_iter().map(BrokerId).collect()))
    };
    let reassign = |n: &str, partitions| {
        alter_partition_reassignments_request::ReassignableTopic::default()
            .with_name(name(n))
            .with_partitions(partitions)
    };
    let r: AlterPartitionReassignmentsResponse = call(
        k1,
        ApiKey::AlterPartitionReassignments,
        0,
        &AlterPartitionReassignmentsRequest::default()
            .with_timeout_ms(15_000)
            .with_topics(vec![
                reassign(
                    "kp",
                    vec![
                        target(4, Some(vec![2, 3])),
                        target(0, None),
                        target(1, Some(vec![1, 1])),
                    ],
                ),
                reassign("kp-missing", vec![target(0, Some(vec![1]))]),
            ]),
    )
    .await;
    assert_eq!(r.error_code, 0, "{r:?}");
    let mut got: Vec<(&str, i32, i16)> = r
        .responses
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(move |p| (t.name.0.as_str(), p.partition_index, p.error_code))
        })
        .collect();
    got.sort();
    assert_eq!(
        got,
        vec![
            ("kp", 0, 85),
            ("kp", 1, 39),
            ("kp", 4, 0),
            ("kp-missing", 0, 3)
        ],
        "{r:?}"
    );
    let listed: ListPartitionReassignmentsResponse = call(
        k2,
        ApiKey::ListPartitionReassignments,
        0,
        &ListPartitionReassignmentsRequest::default().with_timeout_ms(15_000),
    )
    .await;
    assert_eq!(listed.error_code, 0, "{listed:?}");
    for t in &listed.topics {
        for p in &t.partitions {
            assert_eq!(
                (t.name.0.as_str(), p.partition_index),
                ("kp", 4),
                "{listed:?}"
            );
            assert_eq!(&p.replicas[..2], &[BrokerId(2), BrokerId(3)], "{listed:?}");
        }
    }
    wait_topic(k3, "kp", "partition 4 on [2, 3]", |t| {
        t.partitions
            .iter()
            .any(|p| p.partition_index == 4 && p.replica_nodes == [BrokerId(2), BrokerId(3)])
    })
    .await;

    // DescribeLogDirs (kafka-log-dirs --describe): broker 3's one directory holds kp's
    // partitions it hosts, with their sizes, and v4 the file system's space.
    let dirs: DescribeLogDirsResponse = call(
        k3,
        ApiKey::DescribeLogDirs,
        4,
        &DescribeLogDirsRequest::default().with_topics(None),
    )
    .await;
    assert_eq!(dirs.error_code, 0, "{dirs:?}");
    assert_eq!(dirs.results.len(), 1, "{dirs:?}");
    let dir = &dirs.results[0];
    assert_eq!(dir.error_code, 0, "{dirs:?}");
    assert!(dir.total_bytes > 0 && dir.usable_bytes >= 0, "{dirs:?}");
    let hosted: Vec<i32> = dir
        .topics
        .iter()
        .filter(|t| t.name.0.as_str() == "kp")
        .flat_map(|t| t.partitions.iter().map(|p| p.partition_index))
        .collect();
    let kp = metadata(k3, &["kp"]).await;
    let mut want: Vec<i32> = kp.topics[0]
        .partitions
        .iter()
        .filter(|p| p.replica_nodes.contains(&BrokerId(3)))
        .map(|p| p.partition_index)
        .collect();
    let mut hosted_sorted = hosted.clone();
    hosted_sorted.sort();
    want.sort();
    assert_eq!(hosted_sorted, want, "{dirs:?}");

    // The ACL APIs on a cluster without an authorizer: SECURITY_DISABLED (54), as Kafka
    // answers without one.
    let listed: DescribeAclsResponse = call(
        k1,
        ApiKey::DescribeAcls,
        3,
        &DescribeAclsRequest::default()
            .with_resource_type_filter(1)
            .with_pattern_type_filter(1)
            .with_operation(1)
            .with_permission_type(1),
    )
    .await;
    assert_eq!(listed.error_code, 54, "{listed:?}");
    let created: CreateAclsResponse = call(
        k2,
        ApiKey::CreateAcls,
        1,
        &CreateAclsRequest::default().with_creations(vec![
            create_acls_request::AclCreation::default()
                .with_resource_type(2)
                .with_resource_name(s("kp"))
                .with_resource_pattern_type(3)
                .with_principal(s("User:alice"))
                .with_host(s("*"))
                .with_operation(3)
                .with_permission_type(3),
        ]),
    )
    .await;
    assert_eq!(created.results.len(), 1);
    assert_eq!(created.results[0].error_code, 54, "{created:?}");

    // IncrementalAlterConfigs v1: SET on the topic, an unsupported resource type refused
    // alone, and SET of the cluster-wide default (a BROKER resource with an empty name).
    let config = |n: &str, op: i8, v: Option<&str>| {
        AlterableConfig::default()
            .with_name(s(n))
            .with_config_operation(op)
            .with_value(v.map(s))
    };
    let resource = |t: i8, n: &str, configs: Vec<AlterableConfig>| {
        AlterConfigsResource::default()
            .with_resource_type(t)
            .with_resource_name(s(n))
            .with_configs(configs)
    };
    let r: IncrementalAlterConfigsResponse = call(
        k2,
        ApiKey::IncrementalAlterConfigs,
        1,
        &IncrementalAlterConfigsRequest::default().with_resources(vec![
            resource(2, "kp", vec![config("retention.ms", 0, Some("60000"))]),
            resource(8, "1", vec![config("kafka.server", 0, Some("DEBUG"))]),
            resource(4, "", vec![config("log.retention.ms", 0, Some("7200000"))]),
        ]),
    )
    .await;
    let got: Vec<(i8, &str, i16)> = r
        .responses
        .iter()
        .map(|x| (x.resource_type, x.resource_name.as_str(), x.error_code))
        .collect();
    assert_eq!(got, vec![(2, "kp", 0), (8, "1", 42), (4, "", 0)], "{r:?}");
    let start = Instant::now();
    while retention_ms(k3, "kp").await != (Some("60000".into()), 1) {
        assert!(
            start.elapsed() < WAIT,
            "retention.ms=60000 not seen on broker 3"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // v0: an invalid value is INVALID_CONFIG (40) and changes nothing; DELETE restores the
    // default (now the cluster-wide one set above).
    let r: IncrementalAlterConfigsResponse = call(
        k1,
        ApiKey::IncrementalAlterConfigs,
        0,
        &IncrementalAlterConfigsRequest::default().with_resources(vec![resource(
            2,
            "kp",
            vec![config("retention.ms", 0, Some("soon"))],
        )]),
    )
    .await;
    assert_eq!(r.responses[0].error_code, 40, "{r:?}");
    assert!(r.responses[0].error_message.is_some());
    assert_eq!(retention_ms(k1, "kp").await.0.as_deref(), Some("60000"));
    let r: IncrementalAlterConfigsResponse = call(
        k1,
        ApiKey::IncrementalAlterConfigs,
        0,
        &IncrementalAlterConfigsRequest::default().with_resources(vec![resource(
            2,
            "kp",
            vec![config("retention.ms", 1, None)],
        )]),
    )
    .await;
    assert_eq!(r.responses[0].error_code, 0, "{r:?}");
    let start = Instant::now();
    loop {
        let (value, source) = retention_ms(k2, "kp").await;
        if value.as_deref() == Some("7200000") {
            assert_ne!(source, 1, "no longer a topic override");
            break;
        }
        assert!(
            start.elapsed() < WAIT,
            "retention.ms still {value:?} on broker 2"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // A per-broker value (log.retention.ms on broker 2) is what broker 2 answers for the
    // topic, as DYNAMIC_BROKER_CONFIG (2): Kafka builds a topic's DescribeConfigs from the
    // answering broker's config. Broker 1 still answers the cluster-wide default (3).
    let r: IncrementalAlterConfigsResponse = call(
        k2,
        ApiKey::IncrementalAlterConfigs,
        1,
        &IncrementalAlterConfigsRequest::default().with_resources(vec![resource(
            4,
            "2",
            vec![config("log.retention.ms", 0, Some("3600000"))],
        )]),
    )
    .await;
    assert_eq!(r.responses[0].error_code, 0, "{r:?}");
    let start = Instant::now();
    while retention_ms(k2, "kp").await != (Some("3600000".into()), 2) {
        assert!(
            start.elapsed() < WAIT,
            "broker 2's own log.retention.ms not in its answer for the topic"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        retention_ms(k1, "kp").await,
        (Some("7200000".into()), 3),
        "broker 1 answers without broker 2's value"
    );
}
