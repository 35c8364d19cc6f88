use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::create_topics_request::{
    CreatableReplicaAssignment, CreatableTopic, CreatableTopicConfig,
};
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::{ApiKey, TopicName};
use kafka_protocol::protocol::{Decodable, Encodable};
use keel_proto::metadata::BrokerEndpoint;

use super::*;
use crate::kafka::versions;

const ID: [u8; 16] = [7; 16];

fn err(code: ErrorCode, msg: &str) -> Option<keel_proto::common::Error> {
    Some(code.to_proto(msg.to_string()))
}

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

fn range(key: ApiKey) -> std::ops::RangeInclusive<i16> {
    let r = versions::served(key).expect("served");
    r.served_min..=r.max
}

/// Encodes `msg` at `version` and decodes it back (the client's view).
fn round_trip<T: Encodable + Decodable>(msg: &T, version: i16) -> T {
    let mut buf = BytesMut::new();
    msg.encode(&mut buf, version)
        .unwrap_or_else(|e| panic!("v{version}: cannot encode: {e}"));
    let mut bytes = buf.freeze();
    let back =
        T::decode(&mut bytes, version).unwrap_or_else(|e| panic!("v{version}: cannot decode: {e}"));
    assert!(bytes.is_empty(), "v{version}: {} bytes left", bytes.len());
    back
}

// ---------------------------------------------------------------------------------------------
// CreateTopics
// ---------------------------------------------------------------------------------------------

fn create_req() -> KCreateTopicsRequest {
    KCreateTopicsRequest::default()
        .with_timeout_ms(5000)
        .with_validate_only(true)
        .with_topics(vec![
            CreatableTopic::default()
                .with_name(name("a"))
                .with_num_partitions(-1)
                .with_replication_factor(-1)
                .with_configs(vec![
                    CreatableTopicConfig::default()
                        .with_name(s("retention.ms"))
                        .with_value(Some(s("1000"))),
                    CreatableTopicConfig::default()
                        .with_name(s("cleanup.policy"))
                        .with_value(None),
                ]),
            CreatableTopic::default()
                .with_name(name("b"))
                .with_num_partitions(-1)
                .with_replication_factor(-1)
                .with_assignments(vec![
                    CreatableReplicaAssignment::default()
                        .with_partition_index(0)
                        .with_broker_ids(vec![BrokerId(2), BrokerId(1)]),
                ]),
        ])
}

fn create_reply() -> ctl::CreateTopicsReply {
    ctl::CreateTopicsReply {
        error: None,
        topics: vec![
            ctl::CreatableTopicResult {
                name: "a".into(),
                topic_id: Bytes::from_static(&ID),
                error: None,
                num_partitions: 3,
                replication_factor: 2,
                configs: vec![
                    ctl::ConfigEntry {
                        name: "retention.ms".into(),
                        value: Some("1000".into()),
                    },
                    ctl::ConfigEntry {
                        name: "segment.bytes".into(),
                        value: Some("1073741824".into()),
                    },
                ],
                metadata_offset: 12,
            },
            ctl::CreatableTopicResult {
                name: "b".into(),
                topic_id: Bytes::new(),
                error: err(ErrorCode::TopicAlreadyExists, "topic \"b\" already exists"),
                num_partitions: -1,
                replication_factor: -1,
                configs: Vec::new(),
                metadata_offset: -1,
            },
        ],
        leader: None,
    }
}

#[test]
fn create_topics_request_maps_every_field() {
    let keel = create_topics_request(&create_req());
    assert!(keel.validate_only);
    assert_eq!(keel.topics.len(), 2);
    let a = &keel.topics[0];
    assert_eq!(
        (a.name.as_str(), a.num_partitions, a.replication_factor),
        ("a", -1, -1)
    );
    assert_eq!(a.configs[0].name, "retention.ms");
    assert_eq!(a.configs[0].value.as_deref(), Some("1000"));
    assert_eq!(
        a.configs[1].value, None,
        "a null value stays null (INVALID_CONFIG)"
    );
    let b = &keel.topics[1];
    assert_eq!(b.assignments.len(), 1);
    assert_eq!(b.assignments[0].partition_index, 0);
    assert_eq!(b.assignments[0].broker_ids, vec![2, 1]);
}

#[test]
fn create_topics_response_per_topic_results() {
    let out = create_topics_response(Ok(create_reply()), &create_req(), 7);
    let a = &out.topics[0];
    assert_eq!(a.name.0.as_str(), "a");
    assert_eq!(a.error_code, 0);
    assert_eq!(a.error_message, None);
    assert_eq!(a.topic_id, uuid::Uuid::from_bytes(ID));
    assert_eq!((a.num_partitions, a.replication_factor), (3, 2));
    let configs = a.configs.as_ref().expect("configs at v5+");
    assert_eq!(configs[0].config_source, CONFIG_SOURCE_TOPIC);
    assert_eq!(configs[1].config_source, CONFIG_SOURCE_DEFAULT);
    assert_eq!(configs[1].value.as_deref(), Some("1073741824"));
    let b = &out.topics[1];
    assert_eq!(b.error_code, ErrorCode::TopicAlreadyExists.code());
    assert_eq!(
        b.error_message.as_deref(),
        Some("topic \"b\" already exists")
    );
    assert_eq!((b.num_partitions, b.replication_factor), (-1, -1));
    assert!(b.topic_id.is_nil());
    assert_eq!(b.configs, None);
}

#[test]
fn create_topics_whole_request_failures_go_to_every_topic() {
    let mut reply = create_reply();
    reply.error = err(ErrorCode::InvalidRequest, "topics: 10001 entries");
    for reply in [
        Ok(reply),
        Err(Failure::new(
            ErrorCode::InvalidRequest,
            "topics: 10001 entries",
        )),
    ] {
        let out = create_topics_response(reply, &create_req(), 6);
        assert_eq!(out.topics.len(), 2);
        for (t, asked) in out.topics.iter().zip(["a", "b"]) {
            assert_eq!(t.name.0.as_str(), asked);
            assert_eq!(t.error_code, ErrorCode::InvalidRequest.code());
            assert_eq!(t.error_message.as_deref(), Some("topics: 10001 entries"));
            assert_eq!(t.num_partitions, -1);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// DeleteTopics
// ---------------------------------------------------------------------------------------------

fn delete_req_v6() -> KDeleteTopicsRequest {
    let id = uuid::Uuid::from_bytes(ID);
    KDeleteTopicsRequest::default().with_topics(vec![
        DeleteTopicState::default().with_name(Some(name("a"))),
        DeleteTopicState::default()
            .with_name(None)
            .with_topic_id(id),
        DeleteTopicState::default()
            .with_name(Some(name("c")))
            .with_topic_id(id),
        DeleteTopicState::default().with_name(None),
    ])
}

#[test]
fn delete_topics_v6_by_name_and_id_malformed_entries_refused_locally() {
    let plan = delete_topics_plan(&delete_req_v6(), 6);
    assert_eq!(
        plan.forward.topics.len(),
        2,
        "only well-formed entries go out"
    );
    assert_eq!(plan.forward.topics[0].name, "a");
    assert!(plan.forward.topics[0].topic_id.is_empty());
    assert_eq!(plan.forward.topics[1].name, "");
    assert_eq!(&plan.forward.topics[1].topic_id[..], &ID);
    let reply = ctl::DeleteTopicsReply {
        error: None,
        topics: vec![
            ctl::DeletableTopicResult {
                name: "a".into(),
                topic_id: Bytes::from_static(&[1; 16]),
                error: None,
            },
            ctl::DeletableTopicResult {
                name: String::new(),
                topic_id: Bytes::from_static(&ID),
                error: err(ErrorCode::UnknownTopicId, "unknown topic id"),
            },
        ],
        leader: None,
    };
    let out = delete_topics_response(&plan, Ok(reply), 6);
    let r = &out.responses;
    assert_eq!(r.len(), 4, "one result per requested topic, in order");
    assert_eq!(r[0].name.as_ref().map(|n| n.0.as_str()), Some("a"));
    assert_eq!(r[0].topic_id, uuid::Uuid::from_bytes([1; 16]));
    assert_eq!((r[0].error_code, r[0].error_message.as_deref()), (0, None));
    assert_eq!(r[1].name, None, "an unknown id has no name");
    assert_eq!(r[1].error_code, ErrorCode::UnknownTopicId.code());
    assert_eq!(r[2].error_code, ErrorCode::InvalidRequest.code());
    assert_eq!(r[2].name.as_ref().map(|n| n.0.as_str()), Some("c"));
    assert!(r[2].error_message.as_deref().unwrap().contains("both"));
    assert_eq!(r[3].error_code, ErrorCode::InvalidRequest.code());
}

#[test]
fn delete_topics_v1_to_5_by_name_and_whole_request_failure() {
    let req = KDeleteTopicsRequest::default().with_topic_names(vec![name("x"), name("y")]);
    let plan = delete_topics_plan(&req, 4);
    assert_eq!(
        plan.forward
            .topics
            .iter()
            .map(|t| t.name.as_str())
            .collect::<Vec<_>>(),
        ["x", "y"]
    );
    let out = delete_topics_response(&plan, Err(timed_out("no controller")), 4);
    for (t, asked) in out.responses.iter().zip(["x", "y"]) {
        assert_eq!(t.name.as_ref().map(|n| n.0.as_str()), Some(asked));
        assert_eq!(t.error_code, ErrorCode::RequestTimedOut.code());
    }
}

// ---------------------------------------------------------------------------------------------
// DescribeConfigs
// ---------------------------------------------------------------------------------------------

fn statics() -> Vec<StaticBrokerConfig> {
    vec![
        StaticBrokerConfig {
            topic_name: "retention.ms",
            broker_name: "log.retention.ms",
            value: "-1".into(),
        },
        StaticBrokerConfig {
            topic_name: "segment.bytes",
            broker_name: "log.segment.bytes",
            value: "1073741824".into(),
        },
        StaticBrokerConfig {
            topic_name: "",
            broker_name: "authorizer.class.name",
            value: "org.apache.kafka.metadata.authorizer.StandardAuthorizer".into(),
        },
    ]
}

#[test]
fn describe_configs_adds_broker_only_keys_to_this_brokers_resource_only() {
    let res = |t: i8, n: &str, keys: Option<Vec<&str>>| {
        DescribeConfigsResource::default()
            .with_resource_type(t)
            .with_resource_name(s(n))
            .with_configuration_keys(keys.map(|k| k.into_iter().map(s).collect()))
    };
    let req = KDescribeConfigsRequest::default().with_resources(vec![
        res(RESOURCE_TOPIC, "t", None),
        res(RESOURCE_BROKER, "1", None),
        res(RESOURCE_BROKER, "1", Some(vec!["authorizer.class.name"])),
        res(RESOURCE_BROKER, "1", Some(vec!["log.retention.ms"])),
    ]);
    let plan = describe_configs_plan(&req, 4, 1);
    let mut reply = describe_configs_reply();
    reply.results.push(reply.results[1].clone());
    let out = describe_configs_response(&plan, &req, Ok(reply), 4, 1, &statics());
    let names = |i: usize| -> Vec<String> {
        out.results[i]
            .configs
            .iter()
            .map(|c| c.name.to_string())
            .collect()
    };
    assert!(!names(0).contains(&"authorizer.class.name".to_string()));
    assert_eq!(names(1), ["log.retention.ms", "authorizer.class.name"]);
    let a = &out.results[1].configs[1];
    assert!(a.read_only);
    assert_eq!(a.config_source, CONFIG_SOURCE_STATIC_BROKER);
    assert_eq!(
        a.value.as_deref(),
        Some("org.apache.kafka.metadata.authorizer.StandardAuthorizer")
    );
    assert_eq!(names(2), ["authorizer.class.name"]);
    assert_eq!(names(3), ["log.retention.ms"]);
    // The gRPC path (BrokerService.DescribeConfigs) adds them the same way, to its own
    // resource only.
    let resource = |ty: i32, name: &str, keys: Vec<&str>| ctl::DescribeConfigsResource {
        resource_type: ty,
        resource_name: name.into(),
        configuration_keys: keys.into_iter().map(String::from).collect(),
    };
    let req = ctl::DescribeConfigsRequest {
        resources: vec![
            resource(2, "t", vec![]),
            resource(4, "1", vec![]),
            resource(2, "t", vec![]),
        ],
        include_synonyms: false,
        include_documentation: false,
        answering_broker: Some(1),
    };
    let mut reply = describe_configs_reply();
    overlay_static_configs(&req, &mut reply, 1, &statics());
    let grpc_names = |i: usize| -> Vec<&str> {
        reply.results[i]
            .configs
            .iter()
            .map(|c| c.name.as_str())
            .collect()
    };
    assert_eq!(grpc_names(1), ["log.retention.ms", "authorizer.class.name"]);
    assert!(!grpc_names(0).contains(&"authorizer.class.name"));
    let req = ctl::DescribeConfigsRequest {
        resources: vec![
            resource(2, "t", vec![]),
            resource(4, "1", vec!["log.retention.ms"]),
            resource(2, "t", vec![]),
        ],
        ..req
    };
    let mut reply = describe_configs_reply();
    overlay_static_configs(&req, &mut reply, 1, &statics());
    assert_eq!(
        reply.results[1].configs.len(),
        1,
        "filtered by the asked keys"
    );
}

fn describe_configs_req() -> KDescribeConfigsRequest {
    let res = |t: i8, n: &str, keys: Option<Vec<&str>>| {
        DescribeConfigsResource::default()
            .with_resource_type(t)
            .with_resource_name(s(n))
            .with_configuration_keys(keys.map(|k| k.into_iter().map(s).collect()))
    };
    KDescribeConfigsRequest::default()
        .with_include_synonyms(true)
        .with_include_documentation(true)
        .with_resources(vec![
            res(RESOURCE_TOPIC, "t", None),
            res(RESOURCE_BROKER, "1", Some(vec!["log.retention.ms"])),
            res(RESOURCE_BROKER, "2", None),
            res(16, "", None),
            res(RESOURCE_TOPIC, "t", Some(vec![])),
        ])
}

fn entry(name: &str, value: &str, source: ctl::ConfigSource) -> ctl::DescribeConfigsEntry {
    ctl::DescribeConfigsEntry {
        name: name.into(),
        value: Some(value.into()),
        read_only: false,
        config_source: source as i32,
        is_sensitive: false,
        synonyms: vec![ctl::DescribeConfigsSynonym {
            name: format!("log.{name}"),
            value: Some("7".into()),
            source: ctl::ConfigSource::DefaultConfig as i32,
        }],
        documentation: format!("doc of {name}"),
    }
}

fn describe_configs_reply() -> ctl::DescribeConfigsReply {
    let topic = ctl::DescribeConfigsResult {
        error: None,
        resource_type: 2,
        resource_name: "t".into(),
        configs: vec![
            entry(
                "retention.ms",
                "604800000",
                ctl::ConfigSource::DefaultConfig,
            ),
            entry("segment.bytes", "1000", ctl::ConfigSource::TopicConfig),
            entry("cleanup.policy", "delete", ctl::ConfigSource::DefaultConfig),
        ],
    };
    ctl::DescribeConfigsReply {
        error: None,
        results: vec![
            topic.clone(),
            ctl::DescribeConfigsResult {
                error: None,
                resource_type: 4,
                resource_name: "1".into(),
                configs: vec![entry(
                    "log.retention.ms",
                    "604800000",
                    ctl::ConfigSource::DefaultConfig,
                )],
            },
            topic,
        ],
        metadata_offset: 3,
        leader: None,
        source: None,
    }
}

#[test]
fn describe_configs_plan_forwards_topics_and_own_broker_only() {
    let plan = describe_configs_plan(&describe_configs_req(), 4, 1);
    let f = &plan.forward;
    assert!(f.include_synonyms && f.include_documentation);
    assert_eq!(
        f.answering_broker,
        Some(1),
        "topics as this broker applies them"
    );
    assert_eq!(f.resources.len(), 3);
    assert_eq!(f.resources[0].resource_type, 2);
    assert!(
        f.resources[0].configuration_keys.is_empty(),
        "null = all keys"
    );
    assert_eq!(f.resources[1].resource_type, 4);
    assert_eq!(f.resources[1].configuration_keys, vec!["log.retention.ms"]);
    assert_eq!(f.resources[2].resource_name, "t");
    assert!(
        !describe_configs_plan(&describe_configs_req(), 2, 1)
            .forward
            .include_documentation,
        "documentation is v3+"
    );
}

#[test]
fn describe_configs_response_errors_filters_and_static_values() {
    let req = describe_configs_req();
    let plan = describe_configs_plan(&req, 4, 1);
    let out =
        describe_configs_response(&plan, &req, Ok(describe_configs_reply()), 4, 1, &statics());
    let r = &out.results;
    assert_eq!(r.len(), 5);
    // The topic: a default replaced by this broker's static value, with the default as the
    // second synonym; a topic override untouched even though a static value exists.
    let t = &r[0];
    assert_eq!((t.error_code, t.error_message.as_deref()), (0, None));
    assert_eq!(t.resource_type, RESOURCE_TOPIC);
    let retention = &t.configs[0];
    assert_eq!(retention.value.as_deref(), Some("-1"));
    assert_eq!(retention.config_source, CONFIG_SOURCE_STATIC_BROKER);
    assert_eq!(retention.config_type, 5);
    assert_eq!(
        retention.documentation.as_deref(),
        Some("doc of retention.ms")
    );
    let syn: Vec<(&str, Option<&str>, i8)> = retention
        .synonyms
        .iter()
        .map(|s| (s.name.as_str(), s.value.as_deref(), s.source))
        .collect();
    assert_eq!(
        syn,
        [
            ("log.retention.ms", Some("-1"), CONFIG_SOURCE_STATIC_BROKER),
            ("log.retention.ms", Some("604800000"), CONFIG_SOURCE_DEFAULT),
            ("log.retention.ms", Some("7"), CONFIG_SOURCE_DEFAULT),
        ]
    );
    let segment = &t.configs[1];
    assert_eq!(segment.value.as_deref(), Some("1000"));
    assert_eq!(segment.config_source, CONFIG_SOURCE_TOPIC);
    assert_eq!(segment.synonyms[0].name.as_str(), "segment.bytes");
    assert_eq!(t.configs[2].config_type, 7, "cleanup.policy is a LIST");
    // A topic key's default is named with the broker key it comes from (Kafka's
    // `ConfigHelper`), a topic override with the topic key.
    assert_eq!(t.configs[2].synonyms[0].name.as_str(), "log.cleanup.policy");
    // This broker: filtered to the asked key, static value applied.
    assert_eq!(r[1].configs.len(), 1);
    assert_eq!(r[1].configs[0].value.as_deref(), Some("-1"));
    // Another broker and Kafka's type 16 (CLIENT_METRICS, not Keel's CLUSTER): refused.
    assert_eq!(r[2].error_code, ErrorCode::InvalidRequest.code());
    assert_eq!(r[2].resource_name.as_str(), "2");
    assert_eq!(r[3].error_code, ErrorCode::InvalidRequest.code());
    assert_eq!(r[3].resource_type, 16);
    // An empty key list asks for every key, like a null one (Kafka `ConfigHelper`).
    assert_eq!(r[4].error_code, 0);
    assert!(!r[4].configs.is_empty());
    assert_eq!(
        r[4].configs
            .iter()
            .map(|c| c.name.as_str())
            .collect::<Vec<_>>(),
        r[0].configs
            .iter()
            .map(|c| c.name.as_str())
            .collect::<Vec<_>>()
    );
}

#[test]
fn describe_configs_resource_errors_and_whole_request_failures() {
    let req = describe_configs_req();
    let plan = describe_configs_plan(&req, 1, 1);
    let mut reply = describe_configs_reply();
    reply.results[0].error = err(ErrorCode::UnknownTopicOrPartition, "unknown topic \"t\"");
    reply.results[0].configs.clear();
    let out = describe_configs_response(&plan, &req, Ok(reply), 1, 1, &statics());
    assert_eq!(
        out.results[0].error_code,
        ErrorCode::UnknownTopicOrPartition.code()
    );
    assert_eq!(
        out.results[0].error_message.as_deref(),
        Some("unknown topic \"t\"")
    );
    assert_eq!(out.results[1].error_code, 0);
    let out = describe_configs_response(&plan, &req, Err(timed_out("down")), 1, 1, &statics());
    let codes: Vec<i16> = out.results.iter().map(|r| r.error_code).collect();
    let (timed, invalid) = (
        ErrorCode::RequestTimedOut.code(),
        ErrorCode::InvalidRequest.code(),
    );
    assert_eq!(codes, [timed, timed, invalid, invalid, timed]);
}

// ---------------------------------------------------------------------------------------------
// DescribeCluster
// ---------------------------------------------------------------------------------------------

fn described(id: i32, fenced: bool, kafka: bool) -> ctl::DescribedBroker {
    let mut endpoints = vec![BrokerEndpoint {
        name: "GRPC".into(),
        host: "h".into(),
        port: 9000 + id as u32,
        security_protocol: "PLAINTEXT".into(),
    }];
    if kafka {
        endpoints.push(BrokerEndpoint {
            name: "PLAINTEXT".into(),
            host: format!("k{id}"),
            port: 19000 + id as u32,
            security_protocol: "PLAINTEXT".into(),
        });
    }
    ctl::DescribedBroker {
        broker_id: id,
        broker_epoch: 5,
        incarnation_id: Bytes::from_static(&ID),
        endpoints,
        rack: if id == 1 { "r1".into() } else { String::new() },
        fenced,
        in_controlled_shutdown: false,
        last_applied_metadata_offset: 9,
        last_heartbeat_timestamp_ms: 10,
    }
}

fn cluster_reply() -> ctl::DescribeClusterReply {
    ctl::DescribeClusterReply {
        error: None,
        cluster_id: "cid".into(),
        controller_id: 3000,
        brokers: vec![
            described(3, false, true),
            described(1, true, true),
            described(2, false, true),
            described(4, false, false),
        ],
        replying_node_id: 3000,
        metadata_offset: 8,
        commit_index: 8,
        leader: None,
        image_digest: "d".into(),
        source: None,
    }
}

#[test]
fn describe_cluster_lists_brokers_on_the_listener() {
    let req = KDescribeClusterRequest::default();
    let out = describe_cluster_response(Ok(cluster_reply()), &req, 1, "PLAINTEXT", 1);
    let ids: Vec<i32> = out.brokers.iter().map(|b| b.broker_id.0).collect();
    assert_eq!(
        ids,
        [2, 3],
        "no fenced broker, none without a PLAINTEXT endpoint"
    );
    assert_eq!(out.brokers[0].host.as_str(), "k2");
    assert_eq!(out.brokers[0].port, 19002);
    assert_eq!(out.cluster_id.as_str(), "cid");
    assert_eq!(
        out.controller_id.0, 2,
        "self is fenced: the lowest live broker"
    );
    assert_eq!(out.cluster_authorized_operations, i32::MIN);
    assert_eq!(out.endpoint_type, ENDPOINT_TYPE_BROKER);
    assert_eq!((out.error_code, out.error_message), (0, None));
    let out = describe_cluster_response(Ok(cluster_reply()), &req, 1, "PLAINTEXT", 3);
    assert_eq!(out.controller_id.0, 3, "self when live");
    // v2 with fenced brokers.
    let req = KDescribeClusterRequest::default()
        .with_include_fenced_brokers(true)
        .with_include_cluster_authorized_operations(true);
    let out = describe_cluster_response(Ok(cluster_reply()), &req, 2, "PLAINTEXT", 1);
    let ids: Vec<(i32, bool)> = out
        .brokers
        .iter()
        .map(|b| (b.broker_id.0, b.is_fenced))
        .collect();
    assert_eq!(ids, [(1, true), (2, false), (3, false)]);
    assert_eq!(out.brokers[0].rack.as_deref(), Some("r1"));
    assert_eq!(out.brokers[1].rack, None);
    assert_eq!(out.controller_id.0, 2);
    assert_eq!(
        out.cluster_authorized_operations,
        CLUSTER_AUTHORIZED_OPERATIONS
    );
    // The same request at v1 has no fenced brokers.
    let out = describe_cluster_response(Ok(cluster_reply()), &req, 1, "PLAINTEXT", 1);
    assert!(
        out.brokers
            .iter()
            .all(|b| !b.is_fenced && b.broker_id.0 != 1)
    );
}

#[test]
fn describe_cluster_endpoint_types_and_failures() {
    let req = |t: i8| KDescribeClusterRequest::default().with_endpoint_type(t);
    let ok = describe_cluster_request(&req(1).with_include_fenced_brokers(true), 2).unwrap();
    assert!(ok.include_fenced_brokers);
    assert!(
        !describe_cluster_request(&req(1).with_include_fenced_brokers(true), 1)
            .unwrap()
            .include_fenced_brokers
    );
    assert_eq!(describe_cluster_request(&req(2), 1).unwrap_err().code, 114);
    assert_eq!(describe_cluster_request(&req(0), 1).unwrap_err().code, 115);
    assert_eq!(describe_cluster_request(&req(7), 2).unwrap_err().code, 115);
    // v0 has no endpoint type: always brokers.
    assert!(describe_cluster_request(&req(2), 0).is_ok());
    let failure = describe_cluster_request(&req(2), 1).unwrap_err();
    let out = describe_cluster_response(Err(failure), &req(2), 1, "PLAINTEXT", 1);
    assert_eq!(out.error_code, 114);
    assert!(out.brokers.is_empty());
    assert!(out.error_message.is_some());
}

// ---------------------------------------------------------------------------------------------
// Every response encodes (and decodes back) at every served version
// ---------------------------------------------------------------------------------------------

/// kafka-protocol refuses to encode a field the version lacks when it is not at its default:
/// every response built here, from fully populated replies and failures, encodes and
/// decodes at every served version with the fields of that version intact.
#[test]
fn every_admin_response_encodes_at_every_served_version() {
    for v in range(ApiKey::CreateTopics) {
        for reply in [
            Ok(create_reply()),
            Err(Failure::new(ErrorCode::RequestTimedOut, "x")),
        ] {
            let ok = reply.is_ok();
            let out = create_topics_response(reply, &create_req(), v);
            let back = round_trip(&out, v);
            assert_eq!(back.topics.len(), 2, "v{v}");
            if ok {
                assert_eq!(back.topics[1].error_code, 36, "v{v}");
                assert_eq!(back.topics[0].num_partitions, if v >= 5 { 3 } else { -1 });
                assert_eq!(back.topics[0].topic_id.is_nil(), v < 7, "v{v}");
            }
        }
    }
    for v in range(ApiKey::DeleteTopics) {
        let req = if v >= 6 {
            delete_req_v6()
        } else {
            KDeleteTopicsRequest::default().with_topic_names(vec![name("a"), name("b")])
        };
        let plan = delete_topics_plan(&req, v);
        let reply = ctl::DeleteTopicsReply {
            topics: plan
                .forward
                .topics
                .iter()
                .map(|t| ctl::DeletableTopicResult {
                    name: t.name.clone(),
                    topic_id: Bytes::from_static(&ID),
                    error: err(ErrorCode::UnknownTopicOrPartition, "unknown"),
                })
                .collect(),
            ..Default::default()
        };
        for reply in [Ok(reply), Err(timed_out("x"))] {
            let back = round_trip(&delete_topics_response(&plan, reply, v), v);
            assert_eq!(
                back.responses.len(),
                req.topic_names.len() + req.topics.len()
            );
            assert_eq!(back.responses[0].error_message.is_some(), v >= 5, "v{v}");
            assert!(back.responses[0].error_code != 0);
        }
    }
    let req = describe_configs_req();
    for v in range(ApiKey::DescribeConfigs) {
        let plan = describe_configs_plan(&req, v, 1);
        for reply in [Ok(describe_configs_reply()), Err(timed_out("x"))] {
            let ok = reply.is_ok();
            let out = describe_configs_response(&plan, &req, reply, v, 1, &statics());
            let back = round_trip(&out, v);
            assert_eq!(back.results.len(), 5, "v{v}");
            if ok {
                let c = &back.results[0].configs[0];
                assert_eq!(c.config_source, CONFIG_SOURCE_STATIC_BROKER, "v{v}");
                assert_eq!(c.synonyms.len(), 3, "v{v}");
                assert_eq!(c.config_type, if v >= 3 { 5 } else { 0 }, "v{v}");
            }
        }
    }
    for v in range(ApiKey::DescribeCluster) {
        let req = KDescribeClusterRequest::default()
            .with_include_cluster_authorized_operations(true)
            .with_include_fenced_brokers(v >= 2);
        for reply in [Ok(cluster_reply()), Err(timed_out("x"))] {
            let ok = reply.is_ok();
            let out = describe_cluster_response(reply, &req, v, "PLAINTEXT", 1);
            let back = round_trip(&out, v);
            if ok {
                assert_eq!(back.brokers.len(), if v >= 2 { 3 } else { 2 }, "v{v}");
                assert_eq!(back.cluster_id.as_str(), "cid");
            } else {
                assert_eq!(back.error_code, ErrorCode::RequestTimedOut.code());
            }
        }
    }
}

#[test]
fn grpc_describe_configs_puts_in_the_broker_file_values_for_topics_and_itself_only() {
    let statics = vec![StaticBrokerConfig {
        topic_name: "retention.ms",
        broker_name: "log.retention.ms",
        value: "1000".into(),
    }];
    let resource = |ty: i32, name: &str| ctl::DescribeConfigsResource {
        resource_type: ty,
        resource_name: name.into(),
        configuration_keys: vec![],
    };
    let mut req = ctl::DescribeConfigsRequest {
        resources: vec![resource(2, "t"), resource(4, "1"), resource(2, "t")],
        include_synonyms: true,
        include_documentation: false,
        answering_broker: Some(1),
    };
    let mut reply = describe_configs_reply();
    reply.results[2].error = Some(ErrorCode::UnknownTopicOrPartition.to_proto("gone"));
    overlay_static_configs(&req, &mut reply, 1, &statics);
    // The topic: the default retention.ms becomes the file's value, the default a synonym;
    // a topic override (segment.bytes) and keys the file does not set are untouched.
    let t = &reply.results[0].configs;
    assert_eq!(t[0].value.as_deref(), Some("1000"));
    assert_eq!(
        t[0].config_source,
        ctl::ConfigSource::StaticBrokerConfig as i32
    );
    assert_eq!(t[0].synonyms[0].value.as_deref(), Some("604800000"));
    assert_eq!(
        t[0].synonyms[0].source,
        ctl::ConfigSource::DefaultConfig as i32
    );
    assert_eq!(t[1].value.as_deref(), Some("1000"));
    assert_eq!(t[1].config_source, ctl::ConfigSource::TopicConfig as i32);
    assert_eq!(t[2].config_source, ctl::ConfigSource::DefaultConfig as i32);
    // This broker's own resource, by its broker-level key.
    let b = &reply.results[1].configs[0];
    assert_eq!(b.value.as_deref(), Some("1000"));
    assert_eq!(
        b.config_source,
        ctl::ConfigSource::StaticBrokerConfig as i32
    );
    // A result with an error is left alone.
    assert_eq!(
        reply.results[2].configs[0].config_source,
        ctl::ConfigSource::DefaultConfig as i32
    );
    // Another broker's resource: the controller's answer as it is.
    req.resources[1].resource_name = "2".into();
    let mut reply = describe_configs_reply();
    overlay_static_configs(&req, &mut reply, 1, &statics);
    assert_eq!(
        reply.results[1].configs[0].value.as_deref(),
        Some("604800000")
    );
    // Without include_synonyms no synonym is added.
    req.include_synonyms = false;
    let mut reply = describe_configs_reply();
    overlay_static_configs(&req, &mut reply, 1, &statics);
    assert_eq!(reply.results[0].configs[0].synonyms.len(), 1);

    // A topic value in effect over a file value: the file's value is a STATIC_BROKER_CONFIG
    // synonym between it and the default, on both paths (found by the fresh-user trial:
    // kafka-python showed only the dynamic and default synonyms).
    let statics = vec![StaticBrokerConfig {
        topic_name: "segment.bytes",
        broker_name: "log.segment.bytes",
        value: "2000".into(),
    }];
    req.include_synonyms = true;
    let mut reply = describe_configs_reply();
    overlay_static_configs(&req, &mut reply, 1, &statics);
    let seg = &reply.results[0].configs[1];
    assert_eq!(seg.value.as_deref(), Some("1000"));
    let listed: Vec<(&str, Option<&str>, i32)> = seg
        .synonyms
        .iter()
        .map(|y| (y.name.as_str(), y.value.as_deref(), y.source))
        .collect();
    assert_eq!(
        listed,
        [
            (
                "log.segment.bytes",
                Some("2000"),
                ctl::ConfigSource::StaticBrokerConfig as i32
            ),
            (
                "log.segment.bytes",
                Some("7"),
                ctl::ConfigSource::DefaultConfig as i32
            ),
        ]
    );
    let kreq = KDescribeConfigsRequest::default()
        .with_include_synonyms(true)
        .with_resources(vec![
            DescribeConfigsResource::default()
                .with_resource_type(RESOURCE_TOPIC)
                .with_resource_name(s("t")),
        ]);
    let plan = describe_configs_plan(&kreq, 4, 1);
    let out = describe_configs_response(&plan, &kreq, Ok(describe_configs_reply()), 4, 1, &statics);
    let seg = &out.results[0].configs[1];
    let sources: Vec<i8> = seg.synonyms.iter().map(|y| y.source).collect();
    assert_eq!(
        sources,
        [
            ctl::ConfigSource::TopicConfig as i8,
            CONFIG_SOURCE_STATIC_BROKER,
            CONFIG_SOURCE_DEFAULT
        ]
    );
    assert_eq!(seg.synonyms[1].value.as_deref(), Some("2000"));
}

fn create_partitions_req() -> KCreatePartitionsRequest {
    use kafka_protocol::messages::create_partitions_request::{
        CreatePartitionsAssignment, CreatePartitionsTopic,
    };
    KCreatePartitionsRequest::default()
        .with_timeout_ms(5_000)
        .with_validate_only(true)
        .with_topics(vec![
            CreatePartitionsTopic::default()
                .with_name(name("placed"))
                .with_count(3)
                .with_assignments(Some(vec![
                    CreatePartitionsAssignment::default().with_broker_ids(vec![
                        kafka_protocol::messages::BrokerId(2),
                        kafka_protocol::messages::BrokerId(1),
                    ]),
                ])),
            CreatePartitionsTopic::default()
                .with_name(name("auto"))
                .with_count(6)
                .with_assignments(None),
        ])
}

#[test]
fn create_partitions_request_maps_every_field() {
    let forward = create_partitions_request(&create_partitions_req());
    assert!(forward.validate_only);
    assert_eq!(forward.topics.len(), 2);
    assert_eq!(forward.topics[0].name, "placed");
    assert_eq!(forward.topics[0].count, 3);
    assert_eq!(forward.topics[0].assignments.len(), 1);
    assert_eq!(forward.topics[0].assignments[0].broker_ids, vec![2, 1]);
    assert_eq!(forward.topics[1].name, "auto");
    assert_eq!(forward.topics[1].count, 6);
    assert!(forward.topics[1].assignments.is_empty());
}

#[test]
fn create_partitions_response_per_topic_and_whole_request_failures() {
    let req = create_partitions_req();
    let reply = ctl::CreatePartitionsReply {
        results: vec![
            ctl::CreatePartitionsTopicResult {
                name: "placed".into(),
                error: None,
                metadata_offset: -1,
            },
            ctl::CreatePartitionsTopicResult {
                name: "auto".into(),
                error: err(
                    ErrorCode::InvalidPartitions,
                    "topic \"auto\" has 8 partitions",
                ),
                metadata_offset: -1,
            },
        ],
        ..Default::default()
    };
    for v in range(ApiKey::CreatePartitions) {
        let resp = round_trip(&create_partitions_response(Ok(reply.clone()), &req), v);
        assert_eq!(resp.results.len(), 2, "v{v}");
        assert_eq!(resp.results[0].name, name("placed"));
        assert_eq!(resp.results[0].error_code, 0);
        assert_eq!(resp.results[0].error_message, None);
        assert_eq!(
            resp.results[1].error_code,
            ErrorCode::InvalidPartitions.code()
        );
        assert_eq!(
            resp.results[1].error_message.as_deref(),
            Some("topic \"auto\" has 8 partitions")
        );
    }
    // A request-level error of the reply, and a controller that could not be asked: every
    // topic carries it.
    let refused = ctl::CreatePartitionsReply {
        error: err(ErrorCode::InvalidRequest, "topics: 10001 entries"),
        ..Default::default()
    };
    for reply in [Ok(refused), Err(timed_out("no controller answered"))] {
        let resp = create_partitions_response(reply, &req);
        assert_eq!(resp.results.len(), 2);
        assert!(resp.results.iter().all(|r| r.error_code != 0));
    }
}

fn alter_configs_req() -> KIncrementalAlterConfigsRequest {
    use kafka_protocol::messages::incremental_alter_configs_request::{
        AlterConfigsResource, AlterableConfig,
    };
    let config = |n: &str, op: i8, v: Option<&str>| {
        AlterableConfig::default()
            .with_name(s(n))
            .with_config_operation(op)
            .with_value(v.map(s))
    };
    KIncrementalAlterConfigsRequest::default().with_resources(vec![
        AlterConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(s("orders"))
            .with_configs(vec![
                config("retention.ms", 0, Some("60000")),
                config("cleanup.policy", 1, None),
            ]),
        // BROKER_LOGGER: not supported.
        AlterConfigsResource::default()
            .with_resource_type(8)
            .with_resource_name(s("1")),
        // The cluster-wide default.
        AlterConfigsResource::default()
            .with_resource_type(4)
            .with_resource_name(s(""))
            .with_configs(vec![config("log.retention.ms", 0, Some("1000"))]),
        // An operation Kafka does not define.
        AlterConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(s("x"))
            .with_configs(vec![config("retention.ms", 9, Some("1"))]),
    ])
}

#[test]
fn incremental_alter_configs_forwards_topics_and_brokers_and_refuses_the_rest_locally() {
    let plan = alter_configs_plan(&alter_configs_req());
    assert_eq!(plan.forward.resources.len(), 2);
    let topic = &plan.forward.resources[0];
    assert_eq!(
        topic.resource_type,
        keel_proto::metadata::ConfigResourceType::Topic as i32
    );
    assert_eq!(topic.resource_name, "orders");
    assert_eq!(topic.configs.len(), 2);
    assert_eq!(topic.configs[0].op, ctl::AlterConfigOp::Set as i32);
    assert_eq!(topic.configs[0].value.as_deref(), Some("60000"));
    assert_eq!(topic.configs[1].op, ctl::AlterConfigOp::Delete as i32);
    assert_eq!(topic.configs[1].value, None);
    let cluster = &plan.forward.resources[1];
    assert_eq!(
        cluster.resource_type,
        keel_proto::metadata::ConfigResourceType::Broker as i32
    );
    assert_eq!(cluster.resource_name, "");
    assert_eq!(plan.slots[0], Ok(0));
    assert_eq!(plan.slots[2], Ok(1));
    let logger = plan.slots[1].as_ref().unwrap_err();
    assert_eq!(logger.code, ErrorCode::InvalidRequest.code());
    assert!(
        logger.message.contains("config resource type 8"),
        "{logger:?}"
    );
    let op = plan.slots[3].as_ref().unwrap_err();
    assert!(op.message.contains("unknown operation 9"), "{op:?}");
}

#[test]
fn incremental_alter_configs_response_in_request_order() {
    let req = alter_configs_req();
    let plan = alter_configs_plan(&req);
    let reply = ctl::AlterConfigsReply {
        results: vec![
            ctl::AlterConfigsResourceResult {
                error: err(ErrorCode::InvalidConfig, "retention.ms: not a number"),
                resource_type: keel_proto::metadata::ConfigResourceType::Topic as i32,
                resource_name: "orders".into(),
            },
            ctl::AlterConfigsResourceResult {
                error: None,
                resource_type: keel_proto::metadata::ConfigResourceType::Cluster as i32,
                resource_name: String::new(),
            },
        ],
        ..Default::default()
    };
    for v in range(ApiKey::IncrementalAlterConfigs) {
        let resp = round_trip(&alter_configs_response(&plan, &req, Ok(reply.clone())), v);
        let got: Vec<(i8, &str, i16)> = resp
            .responses
            .iter()
            .map(|r| (r.resource_type, r.resource_name.as_str(), r.error_code))
            .collect();
        assert_eq!(
            got,
            vec![
                (2, "orders", ErrorCode::InvalidConfig.code()),
                (8, "1", ErrorCode::InvalidRequest.code()),
                (4, "", 0),
                (2, "x", ErrorCode::InvalidRequest.code()),
            ],
            "v{v}"
        );
        assert_eq!(resp.responses[2].error_message, None);
    }
    let resp = alter_configs_response(&plan, &req, Err(timed_out("no controller answered")));
    assert!(
        resp.responses
            .iter()
            .all(|r| r.error_code == ErrorCode::RequestTimedOut.code()
                || r.error_code == ErrorCode::InvalidRequest.code())
    );
    assert_eq!(
        resp.responses[0].error_code,
        ErrorCode::RequestTimedOut.code()
    );
}

fn elect_req(partitions: Option<Vec<(&str, Vec<i32>)>>) -> KElectLeadersRequest {
    use kafka_protocol::messages::elect_leaders_request::TopicPartitions;
    KElectLeadersRequest::default()
        .with_election_type(1)
        .with_timeout_ms(1_000)
        .with_topic_partitions(partitions.map(|ts| {
            ts.into_iter()
                .map(|(t, ps)| {
                    TopicPartitions::default()
                        .with_topic(name(t))
                        .with_partitions(ps)
                })
                .collect()
        }))
}

#[test]
fn elect_leaders_request_null_is_every_partition_and_empty_lists_ask_for_none() {
    let all = elect_leaders_request(&elect_req(None));
    assert!(all.all_partitions);
    assert!(all.topic_partitions.is_empty());
    assert_eq!(all.election_type, ctl::ElectionType::Unclean as i32);
    let some = elect_leaders_request(&elect_req(Some(vec![("a", vec![0, 2]), ("b", vec![])])));
    assert!(!some.all_partitions);
    assert_eq!(some.topic_partitions.len(), 1);
    assert_eq!(some.topic_partitions[0].topic, "a");
    assert_eq!(some.topic_partitions[0].partitions, vec![0, 2]);
}

#[test]
fn elect_leaders_response_per_partition_and_whole_request_failures() {
    let req = elect_req(Some(vec![("a", vec![0, 2])]));
    let reply = ctl::ElectLeadersReply {
        results: vec![ctl::ElectTopicResult {
            topic: "a".into(),
            partitions: vec![
                ctl::ElectPartitionResult {
                    partition_id: 0,
                    error: None,
                    leader_id: 2,
                    leader_epoch: 3,
                },
                ctl::ElectPartitionResult {
                    partition_id: 2,
                    error: err(ErrorCode::ElectionNotNeeded, "partition a-2 has a leader"),
                    leader_id: 1,
                    leader_epoch: 0,
                },
            ],
        }],
        ..Default::default()
    };
    for v in range(ApiKey::ElectLeaders) {
        let resp = round_trip(&elect_leaders_response(Ok(reply.clone()), &req, v), v);
        assert_eq!(resp.error_code, 0);
        let t = &resp.replica_election_results[0];
        assert_eq!(t.topic, name("a"));
        let got: Vec<(i32, i16)> = t
            .partition_result
            .iter()
            .map(|p| (p.partition_id, p.error_code))
            .collect();
        assert_eq!(got, vec![(0, 0), (2, ErrorCode::ElectionNotNeeded.code())]);
        assert_eq!(t.partition_result[0].error_message, None);
    }
    for v in range(ApiKey::ElectLeaders) {
        let failure = Failure::new(ErrorCode::ClusterAuthorizationFailed, "no ALTER");
        let resp = round_trip(&elect_leaders_response(Err(failure), &req, v), v);
        let top = if v >= 1 {
            ErrorCode::ClusterAuthorizationFailed.code()
        } else {
            0
        };
        assert_eq!(resp.error_code, top, "v{v}");
        let codes: Vec<i16> = resp.replica_election_results[0]
            .partition_result
            .iter()
            .map(|p| p.error_code)
            .collect();
        assert_eq!(codes, vec![ErrorCode::ClusterAuthorizationFailed.code(); 2]);
    }
}

#[test]
fn reassignments_map_targets_cancellations_and_results() {
    use kafka_protocol::messages::alter_partition_reassignments_request::{
        ReassignablePartition, ReassignableTopic,
    };
    use kafka_protocol::messages::list_partition_reassignments_request::ListPartitionReassignmentsTopics;
    let req = KAlterPartitionReassignmentsRequest::default().with_topics(vec![
        ReassignableTopic::default()
            .with_name(name("a"))
            .with_partitions(vec![
                ReassignablePartition::default()
                    .with_partition_index(0)
                    .with_replicas(Some(vec![BrokerId(3), BrokerId(1)])),
                ReassignablePartition::default()
                    .with_partition_index(1)
                    .with_replicas(None),
            ]),
    ]);
    let forward = alter_reassignments_request(&req);
    let parts = &forward.topics[0].partitions;
    assert_eq!(parts[0].replicas.as_ref().unwrap().ids, vec![3, 1]);
    assert_eq!(parts[1].replicas, None, "null cancels");
    let reply = ctl::AlterPartitionReassignmentsReply {
        responses: vec![ctl::ReassignableTopicResult {
            name: "a".into(),
            partitions: vec![
                ctl::ReassignablePartitionResult {
                    partition_index: 0,
                    error: None,
                },
                ctl::ReassignablePartitionResult {
                    partition_index: 1,
                    error: err(ErrorCode::NoReassignmentInProgress, "a-1 is not moving"),
                },
            ],
        }],
        ..Default::default()
    };
    for v in range(ApiKey::AlterPartitionReassignments) {
        let resp = round_trip(&alter_reassignments_response(Ok(reply.clone()), &req), v);
        assert_eq!(resp.error_code, 0);
        let codes: Vec<(i32, i16)> = resp.responses[0]
            .partitions
            .iter()
            .map(|p| (p.partition_index, p.error_code))
            .collect();
        assert_eq!(
            codes,
            vec![(0, 0), (1, ErrorCode::NoReassignmentInProgress.code())]
        );
    }
    let denied = alter_reassignments_response(
        Err(Failure::new(
            ErrorCode::ClusterAuthorizationFailed,
            "no ALTER",
        )),
        &req,
    );
    assert_eq!(
        denied.error_code,
        ErrorCode::ClusterAuthorizationFailed.code()
    );
    assert!(denied.responses.is_empty());

    // List: null = every moving partition; a topic with no partitions asks for none.
    let list = |topics: Option<Vec<(&str, Vec<i32>)>>| {
        KListPartitionReassignmentsRequest::default().with_topics(topics.map(|ts| {
            ts.into_iter()
                .map(|(t, ps)| {
                    ListPartitionReassignmentsTopics::default()
                        .with_name(name(t))
                        .with_partition_indexes(ps)
                })
                .collect()
        }))
    };
    assert_eq!(
        list_reassignments_request(&list(None)).unwrap().topics,
        vec![]
    );
    assert_eq!(
        list_reassignments_request(&list(Some(vec![("a", vec![])]))),
        None
    );
    let some =
        list_reassignments_request(&list(Some(vec![("a", vec![0]), ("b", vec![])]))).unwrap();
    assert_eq!(some.topics.len(), 1);
    assert_eq!(some.topics[0].partition_indexes, vec![0]);
    let ongoing = ctl::ListPartitionReassignmentsReply {
        topics: vec![ctl::OngoingTopicReassignment {
            name: "a".into(),
            partitions: vec![ctl::OngoingPartitionReassignment {
                partition_index: 0,
                replicas: vec![3, 1, 2],
                adding_replicas: vec![3],
                removing_replicas: vec![2],
            }],
        }],
        ..Default::default()
    };
    for v in range(ApiKey::ListPartitionReassignments) {
        let resp = round_trip(&list_reassignments_response(Ok(ongoing.clone())), v);
        let p = &resp.topics[0].partitions[0];
        assert_eq!(p.replicas, vec![BrokerId(3), BrokerId(1), BrokerId(2)]);
        assert_eq!(p.adding_replicas, vec![BrokerId(3)]);
        assert_eq!(p.removing_replicas, vec![BrokerId(2)]);
    }
}

fn binding(ty: i32, name: &str, pattern: i32, principal: &str, op: i32) -> ctl::AclBinding {
    ctl::AclBinding {
        resource_type: ty,
        resource_name: name.into(),
        pattern_type: pattern,
        principal: principal.into(),
        host: "*".into(),
        operation: op,
        permission_type: 3,
    }
}

#[test]
fn acl_filters_and_creations_keep_kafka_codes_and_null_is_any() {
    let f = acl_filter(KafkaAclFilter {
        resource_type: 2,
        resource_name: None,
        pattern_type: 2,
        principal: Some("User:alice"),
        host: None,
        operation: 1,
        permission_type: 3,
    });
    assert_eq!(
        f,
        ctl::AclBinding {
            resource_type: 2,
            resource_name: String::new(),
            pattern_type: 2,
            principal: "User:alice".into(),
            host: String::new(),
            operation: 1,
            permission_type: 3,
        }
    );
    let c = acl_creation(
        &KAclCreation::default()
            .with_resource_type(3)
            .with_resource_name(s("billing-"))
            .with_resource_pattern_type(4)
            .with_principal(s("User:bob"))
            .with_host(s("10.0.0.1"))
            .with_operation(3)
            .with_permission_type(2),
    );
    assert_eq!(
        (
            c.resource_type,
            c.pattern_type,
            c.operation,
            c.permission_type
        ),
        (3, 4, 3, 2)
    );
    assert_eq!(
        (
            c.resource_name.as_str(),
            c.principal.as_str(),
            c.host.as_str()
        ),
        ("billing-", "User:bob", "10.0.0.1")
    );
}

#[test]
fn described_acls_are_grouped_by_resource() {
    let reply = ctl::DescribeAclsReply {
        acls: vec![
            binding(2, "orders", 3, "User:alice", 3),
            binding(2, "orders", 3, "User:bob", 4),
            binding(2, "orders", 4, "User:carol", 3),
            binding(4, "kafka-cluster", 3, "User:ops", 7),
        ],
        ..Default::default()
    };
    for v in range(ApiKey::DescribeAcls) {
        let resp = round_trip(&describe_acls_response(Ok(reply.clone())), v);
        assert_eq!(resp.error_code, 0);
        let groups: Vec<(i8, &str, i8, usize)> = resp
            .resources
            .iter()
            .map(|r| {
                (
                    r.resource_type,
                    r.resource_name.as_str(),
                    r.pattern_type,
                    r.acls.len(),
                )
            })
            .collect();
        assert_eq!(
            groups,
            vec![
                (2, "orders", 3, 2),
                (2, "orders", 4, 1),
                (4, "kafka-cluster", 3, 1)
            ],
            "v{v}"
        );
        assert_eq!(resp.resources[0].acls[1].principal.as_str(), "User:bob");
        assert_eq!(resp.resources[0].acls[1].operation, 4);
    }
    let disabled = describe_acls_response(Ok(ctl::DescribeAclsReply {
        error: err(ErrorCode::SecurityDisabled, "no authorizer is configured"),
        ..Default::default()
    }));
    assert_eq!(disabled.error_code, ErrorCode::SecurityDisabled.code());
    assert!(disabled.resources.is_empty());
}

#[test]
fn created_and_deleted_acls_answer_in_request_order() {
    use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
    let create = KCreateAclsRequest::default()
        .with_creations(vec![KAclCreation::default(), KAclCreation::default()]);
    let reply = ctl::CreateAclsReply {
        results: vec![
            ctl::AclCreationResult { error: None },
            ctl::AclCreationResult {
                error: err(ErrorCode::InvalidRequest, "creations[1].host: not an IP"),
            },
        ],
        ..Default::default()
    };
    for v in range(ApiKey::CreateAcls) {
        let resp = round_trip(&create_acls_response(Ok(reply.clone()), &create), v);
        let codes: Vec<i16> = resp.results.iter().map(|r| r.error_code).collect();
        assert_eq!(codes, vec![0, ErrorCode::InvalidRequest.code()]);
        assert_eq!(resp.results[0].error_message, None);
    }
    let failed = create_acls_response(Err(timed_out("no controller answered")), &create);
    assert!(
        failed
            .results
            .iter()
            .all(|r| r.error_code == ErrorCode::RequestTimedOut.code())
    );

    let delete = KDeleteAclsRequest::default().with_filters(vec![DeleteAclsFilter::default()]);
    let reply = ctl::DeleteAclsReply {
        results: vec![ctl::DeleteAclsFilterResult {
            error: None,
            matching_acls: vec![binding(3, "g", 3, "User:alice", 3)],
        }],
        ..Default::default()
    };
    for v in range(ApiKey::DeleteAcls) {
        let resp = round_trip(&delete_acls_response(Ok(reply.clone()), &delete), v);
        let r = &resp.filter_results[0];
        assert_eq!(r.error_code, 0);
        assert_eq!(r.matching_acls.len(), 1);
        let m = &r.matching_acls[0];
        assert_eq!(
            (
                m.resource_type,
                m.resource_name.as_str(),
                m.principal.as_str()
            ),
            (3, "g", "User:alice")
        );
    }
}

#[test]
fn scram_credentials_map_field_for_field_and_answer_per_user() {
    use kafka_protocol::messages::alter_user_scram_credentials_request::{
        ScramCredentialDeletion, ScramCredentialUpsertion,
    };
    let req = KAlterUserScramCredentialsRequest::default()
        .with_deletions(vec![
            ScramCredentialDeletion::default()
                .with_name(s("bob"))
                .with_mechanism(2),
        ])
        .with_upsertions(vec![
            ScramCredentialUpsertion::default()
                .with_name(s("alice"))
                .with_mechanism(1)
                .with_iterations(8192)
                .with_salt(Bytes::from_static(b"salt"))
                .with_salted_password(Bytes::from_static(&[9; 32])),
            ScramCredentialUpsertion::default()
                .with_name(s("bob"))
                .with_mechanism(1)
                .with_iterations(4096),
        ]);
    let forward = alter_scram_request(&req);
    assert_eq!(forward.deletions[0].name, "bob");
    assert_eq!(
        forward.deletions[0].mechanism,
        keel_proto::metadata::ScramMechanism::ScramSha512 as i32
    );
    let a = &forward.upsertions[0];
    assert_eq!(
        (a.name.as_str(), a.mechanism, a.iterations),
        ("alice", 1, 8192)
    );
    assert_eq!(a.salt.as_ref(), b"salt");
    assert_eq!(a.salted_password.as_ref(), &[9; 32]);
    // A whole-request failure answers each user once, in order of first appearance.
    let failed = alter_scram_response(
        Err(Failure::new(
            ErrorCode::ClusterAuthorizationFailed,
            "no ALTER",
        )),
        &req,
    );
    let users: Vec<(&str, i16)> = failed
        .results
        .iter()
        .map(|r| (r.user.as_str(), r.error_code))
        .collect();
    assert_eq!(users, vec![("bob", 31), ("alice", 31)]);
    let described = describe_scram_response(Ok(ctl::DescribeUserScramCredentialsReply {
        results: vec![
            ctl::DescribeUserScramCredentialsResult {
                user: "alice".into(),
                error: None,
                credential_infos: vec![ctl::ScramCredentialInfo {
                    mechanism: 1,
                    iterations: 8192,
                }],
            },
            ctl::DescribeUserScramCredentialsResult {
                user: "nobody".into(),
                error: err(ErrorCode::ResourceNotFound, "no credential"),
                credential_infos: vec![],
            },
        ],
        ..Default::default()
    }));
    for v in range(ApiKey::DescribeUserScramCredentials) {
        let d = round_trip(&described, v);
        assert_eq!(d.results[0].credential_infos[0].mechanism, 1);
        assert_eq!(d.results[0].credential_infos[0].iterations, 8192);
        assert_eq!(d.results[1].error_code, ErrorCode::ResourceNotFound.code());
    }
}

#[test]
fn log_dirs_list_hosted_partitions_by_topic_with_sizes_and_space() {
    use keel_proto::broker::{DescribeReplicasReply, ReplicaDescription};
    let replica = |topic: &str, partition: i32, size: i64, error| ReplicaDescription {
        topic: topic.into(),
        partition,
        size_bytes: size,
        error,
        ..Default::default()
    };
    let replicas = DescribeReplicasReply {
        partitions: vec![
            replica("b", 0, 10, None),
            replica("a", 1, 2048, None),
            replica("a", 0, 0, None),
            replica(
                "gone",
                0,
                -1,
                err(ErrorCode::UnknownTopicOrPartition, "not here"),
            ),
        ],
        ..Default::default()
    };
    let space = Some(DirSpace {
        total_bytes: 1 << 30,
        usable_bytes: 1 << 29,
    });
    for v in range(ApiKey::DescribeLogDirs) {
        let resp = round_trip(&describe_log_dirs_response("/d", &replicas, space), v);
        let dir = &resp.results[0];
        assert_eq!((dir.error_code, dir.log_dir.as_str()), (0, "/d"));
        let got: Vec<(&str, i32, i64)> = dir
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(move |p| (t.name.0.as_str(), p.partition_index, p.partition_size))
            })
            .collect();
        assert_eq!(got, vec![("a", 1, 2048), ("a", 0, 0), ("b", 0, 10)], "v{v}");
        if v >= 4 {
            assert_eq!((dir.total_bytes, dir.usable_bytes), (1 << 30, 1 << 29));
        }
    }
    let failed = DescribeReplicasReply {
        partitions: vec![replica(
            "a",
            0,
            -1,
            err(ErrorCode::KafkaStorageError, "offline"),
        )],
        ..Default::default()
    };
    let resp = describe_log_dirs_response("/d", &failed, None);
    assert_eq!(
        resp.results[0].error_code,
        ErrorCode::KafkaStorageError.code()
    );
    assert_eq!(resp.results[0].total_bytes, -1);
    // Null topics ask for everything; a topic with no partitions for none.
    use kafka_protocol::messages::describe_log_dirs_request::DescribableLogDirTopic;
    assert!(
        log_dirs_request(&KDescribeLogDirsRequest::default().with_topics(None))
            .unwrap()
            .topics
            .is_empty()
    );
    let none = KDescribeLogDirsRequest::default().with_topics(Some(vec![
        DescribableLogDirTopic::default().with_topic(name("a")),
    ]));
    assert_eq!(log_dirs_request(&none), None);
    let refused = describe_log_dirs_refused(
        Failure::new(ErrorCode::ClusterAuthorizationFailed, "no DESCRIBE"),
        4,
    );
    assert_eq!(
        refused.error_code,
        ErrorCode::ClusterAuthorizationFailed.code()
    );
    assert!(refused.results.is_empty());
}

#[test]
fn legacy_alter_configs_replaces_the_whole_set_and_answers_in_request_order() {
    use kafka_protocol::messages::alter_configs_request::{AlterConfigsResource, AlterableConfig};
    let resource = |t: i8, n: &str, configs: Vec<(&str, Option<&str>)>| {
        AlterConfigsResource::default()
            .with_resource_type(t)
            .with_resource_name(s(n))
            .with_configs(
                configs
                    .into_iter()
                    .map(|(k, v)| {
                        AlterableConfig::default()
                            .with_name(s(k))
                            .with_value(v.map(s))
                    })
                    .collect(),
            )
    };
    let req = KLegacyAlterConfigsRequest::default()
        .with_validate_only(true)
        .with_resources(vec![
            resource(
                RESOURCE_TOPIC,
                "t",
                vec![("retention.ms", Some("1000")), ("segment.bytes", None)],
            ),
            resource(8, "x", vec![]),
            resource(RESOURCE_BROKER, "", vec![]),
        ]);
    let plan = legacy_alter_configs_plan(&req);
    let f = &plan.forward;
    assert!(f.validate_only);
    assert_eq!(f.resources.len(), 2, "BROKER_LOGGER is refused here");
    let t = &f.resources[0];
    assert!(t.replace_unlisted && f.resources[1].replace_unlisted);
    assert_eq!(
        t.configs
            .iter()
            .map(|c| (c.name.as_str(), c.op, c.value.as_deref()))
            .collect::<Vec<_>>(),
        [
            ("retention.ms", ctl::AlterConfigOp::Set as i32, Some("1000")),
            ("segment.bytes", ctl::AlterConfigOp::Delete as i32, None),
        ]
    );
    assert_eq!(
        f.resources[1].resource_type,
        keel_proto::metadata::ConfigResourceType::Broker as i32
    );
    let reply = ctl::AlterConfigsReply {
        results: vec![
            ctl::AlterConfigsResourceResult {
                error: err(ErrorCode::InvalidConfig, "bad retention.ms"),
                resource_type: 2,
                resource_name: "t".into(),
            },
            ctl::AlterConfigsResourceResult::default(),
        ],
        ..Default::default()
    };
    for v in range(ApiKey::AlterConfigs) {
        let out = round_trip(
            &legacy_alter_configs_response(&plan, &req, Ok(reply.clone())),
            v,
        );
        let got: Vec<(i8, &str, i16)> = out
            .responses
            .iter()
            .map(|r| (r.resource_type, r.resource_name.as_str(), r.error_code))
            .collect();
        assert_eq!(
            got,
            [
                (RESOURCE_TOPIC, "t", ErrorCode::InvalidConfig.code()),
                (8, "x", ErrorCode::InvalidRequest.code()),
                (RESOURCE_BROKER, "", 0),
            ],
            "v{v}"
        );
        assert_eq!(
            out.responses[0].error_message.as_deref(),
            Some("bad retention.ms")
        );
        // A failure of the whole request reaches every forwarded resource.
        let out = legacy_alter_configs_response(&plan, &req, Err(timed_out("x")));
        assert_eq!(
            out.responses[2].error_code,
            ErrorCode::RequestTimedOut.code()
        );
    }
}
