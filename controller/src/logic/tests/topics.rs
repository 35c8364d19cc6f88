//! CreateTopics / DeleteTopics: placement, validation codes (no records on refusal), and
//! replay of what is written.

use std::collections::{BTreeMap, BTreeSet};

use keel_metadata_log::ConfigResource;
use keel_proto::ErrorCode;
use keel_proto::controller::{
    ConfigEntry, CreatableReplicaAssignment, CreatableTopic, CreateTopicsReply,
    CreateTopicsRequest, DeleteTopicState, DeleteTopicsRequest,
};
use uuid::Uuid;

use super::common::{Cluster, code, topic_uuid};
use crate::logic::topics::{MAX_PARTITIONS_PER_TOPIC, MAX_TOPIC_NAME_LEN, place_replicas};
use crate::logic::{ControllerResult, TopicDefaults, create_topics, delete_topics};

fn topic(name: &str, partitions: i32, rf: i32) -> CreatableTopic {
    CreatableTopic {
        name: name.into(),
        num_partitions: partitions,
        replication_factor: rf,
        assignments: vec![],
        configs: vec![],
    }
}

fn create(
    c: &Cluster,
    topics: Vec<CreatableTopic>,
    validate_only: bool,
) -> ControllerResult<CreateTopicsReply> {
    let mut n = 100u128;
    create_topics(
        &c.image,
        &CreateTopicsRequest {
            topics,
            validate_only,
        },
        &TopicDefaults {
            num_partitions: 3,
            replication_factor: 2,
        },
        &mut || {
            n += 1;
            topic_uuid(n)
        },
        0,
    )
}

fn cluster(racks: &[Option<&str>]) -> Cluster {
    let mut c = Cluster::new();
    for (i, r) in racks.iter().enumerate() {
        c.add_broker(i as i32 + 1, *r);
    }
    c
}

#[test]
fn placement_matches_kafkas_round_robin() {
    // Kafka's AdminUtils example: 5 brokers, 10 partitions, rf 3, start 0.
    let brokers: Vec<(i32, Option<String>)> = (0..5).map(|b| (b, None)).collect();
    let p = place_replicas(&brokers, 10, 3, 0);
    assert_eq!(p[0], vec![0, 1, 2]);
    assert_eq!(p[4], vec![4, 0, 1]);
    assert_eq!(p[5], vec![0, 2, 3]);
    assert_eq!(p[9], vec![4, 1, 2]);
    // Leaders spread evenly, every broker holds 6 replicas, no duplicates in a list.
    let mut leaders = BTreeMap::new();
    let mut load = BTreeMap::new();
    for r in &p {
        *leaders.entry(r[0]).or_insert(0) += 1;
        for b in r {
            *load.entry(*b).or_insert(0) += 1;
        }
        assert_eq!(r.iter().collect::<BTreeSet<_>>().len(), 3);
    }
    assert!(leaders.values().all(|&n| n == 2), "{leaders:?}");
    assert!(load.values().all(|&n| n == 6), "{load:?}");
    // The start offset rotates the first leader.
    assert_eq!(place_replicas(&brokers, 1, 1, 3)[0], vec![3]);
}

#[test]
fn rack_aware_placement_spreads_over_racks() {
    let racks = ["a", "a", "b", "b", "c", "c"];
    let brokers: Vec<(i32, Option<String>)> = racks
        .iter()
        .enumerate()
        .map(|(i, r)| (i as i32 + 1, Some(r.to_string())))
        .collect();
    let rack_of: BTreeMap<i32, &str> = brokers
        .iter()
        .map(|(b, r)| (*b, r.as_deref().unwrap()))
        .collect();
    for start in 0..6 {
        let p = place_replicas(&brokers, 12, 3, start);
        let mut leaders = BTreeMap::new();
        for r in &p {
            let rs: BTreeSet<&str> = r.iter().map(|b| rack_of[b]).collect();
            assert_eq!(rs.len(), 3, "replicas {r:?} must span three racks");
            *leaders.entry(r[0]).or_insert(0) += 1;
        }
        assert!(leaders.values().all(|&n| n == 2), "{leaders:?}");
    }
    // rf 2 over 2 racks of unequal size still alternates racks.
    let b2: Vec<(i32, Option<String>)> = vec![
        (1, Some("x".into())),
        (2, Some("x".into())),
        (3, Some("y".into())),
    ];
    for r in place_replicas(&b2, 6, 2, 0) {
        assert_ne!(
            b2[(r[0] - 1) as usize].1,
            b2[(r[1] - 1) as usize].1,
            "{r:?}"
        );
    }
}

#[test]
fn create_writes_topic_configs_and_partitions_that_replay() {
    let mut c = cluster(&[Some("a"), Some("b"), Some("c")]);
    let mut t = topic("orders", 6, 3);
    t.configs = vec![ConfigEntry {
        name: "min.insync.replicas".into(),
        value: Some("2".into()),
    }];
    let r = create(&c, vec![t, topic("defaults", -1, -1)], false);
    let res = r.response.topics.clone();
    assert_eq!(code(&res[0].error), ErrorCode::None);
    assert_eq!((res[0].num_partitions, res[0].replication_factor), (6, 3));
    assert_eq!(
        (res[1].num_partitions, res[1].replication_factor),
        (3, 2),
        "cluster defaults for -1"
    );
    assert!(
        res[0]
            .configs
            .iter()
            .any(|e| e.name == "min.insync.replicas" && e.value.as_deref() == Some("2"))
    );
    assert!(
        res[0]
            .configs
            .iter()
            .any(|e| e.name == "retention.ms" && e.value.as_deref() == Some("604800000"))
    );
    assert_eq!(res[0].metadata_offset, -1);
    c.commit(r);
    let id = c.topic_id("orders");
    assert_eq!(Uuid::from_slice(&res[0].topic_id).unwrap(), id);
    assert_eq!(
        c.image.config(
            &ConfigResource::Topic("orders".into()),
            "min.insync.replicas"
        ),
        Some("2")
    );
    let t = c.image.topics().get_by_name("orders").unwrap();
    assert_eq!(t.partitions.len(), 6);
    for p in t.partitions.values() {
        assert_eq!(p.isr, p.replicas);
        assert_eq!(p.leader, p.replicas[0]);
        assert_eq!((p.leader_epoch, p.partition_epoch), (0, 0));
        assert_eq!(p.replicas.len(), 3);
        let racks: BTreeSet<_> = p
            .replicas
            .iter()
            .map(|b| c.image.broker(*b).unwrap().rack.clone())
            .collect();
        assert_eq!(racks.len(), 3, "rack-aware: one replica per rack");
    }
    // validate_only: same answer, nothing written.
    let r = create(&c, vec![topic("dry", 2, 1)], true);
    assert!(r.records.is_empty());
    assert_eq!(code(&r.response.topics[0].error), ErrorCode::None);
    assert_eq!(r.response.topics[0].topic_id.len(), 16);
}

#[test]
fn bad_requests_get_exact_codes_and_write_nothing() {
    let mut c = cluster(&[None, None, None]);
    c.add_broker(4, None);
    let f = crate::logic::fence_broker(&c.image, 4);
    c.apply(&f.records);
    c.create_topic("exists", &[&[1]]);
    c.create_topic("a.b", &[&[1]]);
    let long = "x".repeat(250);
    let ok249 = "y".repeat(249);
    let with_config = |k: &str, v: Option<&str>, rf| {
        let mut t = topic("cfg", 1, rf);
        t.configs = vec![ConfigEntry {
            name: k.into(),
            value: v.map(str::to_string),
        }];
        t
    };
    let assigned = |lists: &[(i32, &[i32])]| CreatableTopic {
        name: "assigned".into(),
        num_partitions: -1,
        replication_factor: -1,
        assignments: lists
            .iter()
            .map(|(p, b)| CreatableReplicaAssignment {
                partition_index: *p,
                broker_ids: b.to_vec(),
            })
            .collect(),
        configs: vec![],
    };
    let cases: Vec<(&str, CreatableTopic, ErrorCode)> = vec![
        (
            "empty name",
            topic("", 1, 1),
            ErrorCode::InvalidTopicException,
        ),
        ("dot", topic(".", 1, 1), ErrorCode::InvalidTopicException),
        (
            "dot dot",
            topic("..", 1, 1),
            ErrorCode::InvalidTopicException,
        ),
        (
            "slash",
            topic("a/b", 1, 1),
            ErrorCode::InvalidTopicException,
        ),
        (
            "space",
            topic("a b", 1, 1),
            ErrorCode::InvalidTopicException,
        ),
        (
            "non-ascii",
            topic("tópico", 1, 1),
            ErrorCode::InvalidTopicException,
        ),
        (
            "250 chars",
            topic(&long, 1, 1),
            ErrorCode::InvalidTopicException,
        ),
        (
            "collides with a.b",
            topic("a_b", 1, 1),
            ErrorCode::InvalidTopicException,
        ),
        (
            "exists",
            topic("exists", 1, 1),
            ErrorCode::TopicAlreadyExists,
        ),
        (
            "the metadata log's name",
            topic("__cluster_metadata", 1, 1),
            ErrorCode::InvalidRequest,
        ),
        (
            "zero partitions",
            topic("z", 0, 1),
            ErrorCode::InvalidPartitions,
        ),
        (
            "negative partitions",
            topic("z", -2, 1),
            ErrorCode::InvalidPartitions,
        ),
        (
            "too many partitions",
            topic("z", MAX_PARTITIONS_PER_TOPIC + 1, 1),
            ErrorCode::InvalidPartitions,
        ),
        (
            "rf 0",
            topic("z", 1, 0),
            ErrorCode::InvalidReplicationFactor,
        ),
        (
            "rf -2",
            topic("z", 1, -2),
            ErrorCode::InvalidReplicationFactor,
        ),
        (
            "rf above unfenced brokers",
            topic("z", 1, 4),
            ErrorCode::InvalidReplicationFactor,
        ),
        (
            "unknown config",
            with_config("no.such.key", Some("1"), 1),
            ErrorCode::InvalidConfig,
        ),
        (
            "null config value",
            with_config("retention.ms", None, 1),
            ErrorCode::InvalidConfig,
        ),
        (
            "min.insync above rf",
            with_config("min.insync.replicas", Some("3"), 2),
            ErrorCode::InvalidConfig,
        ),
        (
            "bad boolean",
            with_config("unclean.leader.election.enable", Some("yes"), 1),
            ErrorCode::InvalidConfig,
        ),
        (
            "assignment gap",
            assigned(&[(0, &[1]), (2, &[2])]),
            ErrorCode::InvalidReplicaAssignment,
        ),
        (
            "assignment duplicate partition",
            assigned(&[(0, &[1]), (0, &[2])]),
            ErrorCode::InvalidReplicaAssignment,
        ),
        (
            "assignment duplicate broker",
            assigned(&[(0, &[1, 1])]),
            ErrorCode::InvalidReplicaAssignment,
        ),
        (
            "assignment unequal lengths",
            assigned(&[(0, &[1, 2]), (1, &[2])]),
            ErrorCode::InvalidReplicaAssignment,
        ),
        (
            "assignment empty list",
            assigned(&[(0, &[])]),
            ErrorCode::InvalidReplicaAssignment,
        ),
        (
            "assignment unregistered broker",
            assigned(&[(0, &[1, 9])]),
            ErrorCode::InvalidReplicaAssignment,
        ),
        (
            "assignment all fenced",
            assigned(&[(0, &[4])]),
            ErrorCode::InvalidReplicaAssignment,
        ),
        (
            "assignment with partition count",
            CreatableTopic {
                num_partitions: 1,
                ..assigned(&[(0, &[1])])
            },
            ErrorCode::InvalidRequest,
        ),
    ];
    for (name, t, want) in cases {
        let r = create(&c, vec![t], false);
        assert!(r.records.is_empty(), "{name}: wrote {:?}", r.records);
        let res = &r.response.topics[0];
        assert_eq!(code(&res.error), want, "{name}: {res:?}");
        assert_eq!((res.num_partitions, res.replication_factor), (-1, -1));
        assert!(res.topic_id.is_empty());
    }
    // A 249-character name is legal; a name twice in a request is refused both times; the
    // good topics of a mixed request are created.
    let r = create(
        &c,
        vec![
            topic(&ok249, 1, 1),
            topic("dup", 1, 1),
            topic("dup", 1, 1),
            topic("bad/name", 1, 1),
        ],
        false,
    );
    let codes: Vec<ErrorCode> = r.response.topics.iter().map(|t| code(&t.error)).collect();
    assert_eq!(
        codes,
        vec![
            ErrorCode::None,
            ErrorCode::InvalidRequest,
            ErrorCode::InvalidRequest,
            ErrorCode::InvalidTopicException
        ]
    );
    c.commit(r);
    assert!(c.image.topics().by_name.contains_key(&ok249));
    assert!(!c.image.topics().by_name.contains_key("dup"));
    // Explicit assignment with a fenced member: ISR = eligible members, leader = first of them.
    let r = create(
        &c,
        vec![assigned(&[(0, &[4, 2, 3]), (1, &[3, 4, 1])])],
        false,
    );
    assert_eq!(code(&r.response.topics[0].error), ErrorCode::None);
    c.commit(r);
    assert_eq!(
        (
            c.partition("assigned", 0).leader,
            c.partition("assigned", 0).isr.clone()
        ),
        (2, vec![2, 3])
    );
    assert_eq!(c.partition("assigned", 1).replicas, vec![3, 4, 1]);
}

#[test]
fn topic_id_source_collisions_are_skipped() {
    let mut c = cluster(&[None]);
    let taken = c.create_topic("first", &[&[1]]);
    let mut ids = vec![Uuid::nil(), taken, topic_uuid(77)].into_iter();
    let r = create_topics(
        &c.image,
        &CreateTopicsRequest {
            topics: vec![topic("second", 1, 1)],
            validate_only: false,
        },
        &TopicDefaults::default(),
        &mut || ids.next().unwrap_or(Uuid::nil()),
        0,
    );
    assert_eq!(
        Uuid::from_slice(&r.response.topics[0].topic_id).unwrap(),
        topic_uuid(77)
    );
    c.commit(r);
    // A source that only repeats taken ids gives up after a bounded number of tries.
    let r = create_topics(
        &c.image,
        &CreateTopicsRequest {
            topics: vec![topic("third", 1, 1)],
            validate_only: false,
        },
        &TopicDefaults::default(),
        &mut || taken,
        0,
    );
    assert_eq!(
        code(&r.response.topics[0].error),
        ErrorCode::UnknownServerError
    );
    assert!(r.records.is_empty());
}

#[test]
fn delete_topics_by_name_and_id() {
    let mut c = cluster(&[None, None]);
    let a = c.create_topic("a", &[&[1, 2]]);
    c.create_topic("b", &[&[2]]);
    let r = crate::logic::alter_configs(
        &c.image,
        &keel_proto::controller::AlterConfigsRequest {
            resources: vec![keel_proto::controller::AlterConfigsResource {
                resource_type: keel_proto::metadata::ConfigResourceType::Topic as i32,
                resource_name: "b".into(),
                configs: vec![keel_proto::controller::AlterableConfig {
                    name: "retention.ms".into(),
                    op: 0,
                    value: Some("1000".into()),
                }],
                replace_unlisted: false,
            }],
            validate_only: false,
        },
    );
    c.commit(r);
    let del = |name: &str, id: Option<Uuid>| DeleteTopicState {
        name: name.into(),
        topic_id: id.map_or_else(bytes::Bytes::new, |u| {
            bytes::Bytes::copy_from_slice(u.as_bytes())
        }),
    };
    let r = delete_topics(
        &c.image,
        &DeleteTopicsRequest {
            topics: vec![
                del("", Some(a)),
                del("b", None),
                del("nope", None),
                del("", Some(topic_uuid(999))),
                // A name no topic can have (over 249): unknown, like any other (Kafka).
                del(&"n".repeat(250), None),
            ],
        },
    );
    let codes: Vec<ErrorCode> = r.response.topics.iter().map(|t| code(&t.error)).collect();
    assert_eq!(
        codes,
        vec![
            ErrorCode::None,
            ErrorCode::None,
            ErrorCode::UnknownTopicOrPartition,
            ErrorCode::UnknownTopicId,
            ErrorCode::UnknownTopicOrPartition,
        ]
    );
    assert_eq!(r.response.topics[0].name, "a");
    assert_eq!(r.response.topics[4].name, "n".repeat(250));
    assert_eq!(r.records.len(), 2);
    c.commit(r);
    assert!(c.image.topics().by_id.is_empty());
    assert!(
        c.image
            .config(&ConfigResource::Topic("b".into()), "retention.ms")
            .is_none()
    );
    // Named twice (by name and by id): refused, nothing written.
    let x = c.create_topic("x", &[&[1]]);
    let r = delete_topics(
        &c.image,
        &DeleteTopicsRequest {
            topics: vec![del("x", None), del("", Some(x))],
        },
    );
    assert!(r.records.is_empty());
    assert!(
        r.response
            .topics
            .iter()
            .all(|t| code(&t.error) == ErrorCode::InvalidRequest)
    );
}

#[test]
fn names_colliding_within_one_request_are_both_refused_and_write_nothing() {
    let c = cluster(&[None, None]);
    let r = create(
        &c,
        vec![topic("m.n", 1, 1), topic("ok", 1, 1), topic("m_n", 1, 1)],
        false,
    );
    let codes: Vec<_> = r.response.topics.iter().map(|t| code(&t.error)).collect();
    assert_eq!(
        codes,
        vec![
            ErrorCode::InvalidTopicException,
            ErrorCode::None,
            ErrorCode::InvalidTopicException
        ]
    );
    let msg = &r.response.topics[0].error.as_ref().unwrap().message;
    assert!(msg.contains("\"m_n\" in the same request"), "{msg}");
    // Only `ok` is written: one TopicRecord, one PartitionRecord.
    let after = c
        .image
        .with_records(c.image.provenance(), &r.records)
        .unwrap_or_else(|(i, e)| panic!("record {i}: {e}"));
    let names: Vec<_> = after.topics().by_name.keys().cloned().collect();
    assert_eq!(names, vec!["ok".to_string()]);
    // A name that collides with nothing else in the request, and names with '.' or '_'
    // whose collision forms differ, still pass.
    let r = create(&c, vec![topic("p.q", 1, 1), topic("p_r", 1, 1)], false);
    assert!(r.response.topics.iter().all(|t| t.error.is_none()));
}

#[test]
fn validate_only_reports_no_metadata_offset() {
    let c = cluster(&[None, None]);
    let mut dry = create(&c, vec![topic("dry", 1, 1)], true).response;
    crate::logic::topics::set_created_offsets(&mut dry, true, 42);
    assert_eq!(dry.topics[0].metadata_offset, -1);
    let mut real = create(&c, vec![topic("real", 1, 1), topic("", 1, 1)], false).response;
    crate::logic::topics::set_created_offsets(&mut real, false, 42);
    let offsets: Vec<_> = real.topics.iter().map(|t| t.metadata_offset).collect();
    assert_eq!(offsets, vec![42, -1]);
}

/// The largest topic CreateTopics accepts, with every topic config set, fits in one
/// operation's record limit (it used to be refused with POLICY_VIOLATION at 10,001 records).
#[test]
fn the_largest_topic_with_every_config_fits_in_one_operation() {
    let c = cluster(&[None]);
    let mut t = topic("widest", MAX_PARTITIONS_PER_TOPIC, 1);
    t.configs = crate::logic::configs::config_defs(false)
        .map(|d| ConfigEntry {
            name: d.name.into(),
            value: Some(d.default.into()),
        })
        .collect();
    let r = create(&c, vec![t], false);
    assert_eq!(code(&r.response.topics[0].error), ErrorCode::None);
    assert_eq!(
        r.records.len(),
        crate::logic::result::MAX_RECORDS_PER_OPERATION,
        "TopicRecord + one ConfigRecord per config + one PartitionRecord per partition"
    );
}

/// A dry run answers the per-operation limit as the real creation would (the real one is
/// refused by the write path with POLICY_VIOLATION): 5,000 + 5,001 partitions are 10,003
/// records. It used to answer NONE for both topics (issue #18, outside client).
#[test]
fn validate_only_answers_the_operation_limit_like_the_real_request() {
    let c = cluster(&[None]);
    let topics = vec![topic("pa", 5000, 1), topic("pb", 5001, 1)];
    let dry = create(&c, topics.clone(), true);
    assert!(dry.records.is_empty());
    assert_eq!(code(&dry.response.error), ErrorCode::PolicyViolation);
    assert!(
        dry.response
            .error
            .as_ref()
            .unwrap()
            .message
            .contains("10000"),
        "{:?}",
        dry.response.error
    );
    let real = create(&c, topics, false);
    assert!(crate::logic::result::exceeds_operation_limits(
        &real.records
    ));
    // Within the limit, the dry run is answered without an error and writes nothing.
    let fits = create(&c, vec![topic("pa", 5000, 1), topic("pb", 4000, 1)], true);
    assert!(fits.records.is_empty() && fits.response.error.is_none());
    assert!(fits.response.topics.iter().all(|t| t.error.is_none()));
}

/// Request strings quoted in error messages are cut to 64 characters (issue #18, item 6), but
/// a result's `name` is the name as sent, however long: clients pair results with their
/// request by name (Kafka's CreateTopicsResponse does the same; confluent-kafka failed to
/// parse a reply whose name was shortened), and the request's own size bounds the echo.
#[test]
fn long_names_are_clipped_in_messages_and_echoed_in_results() {
    let c = cluster(&[None]);
    let mut t = topic("cfg", 1, 1);
    t.configs = vec![ConfigEntry {
        name: "n".repeat(255),
        value: Some("1".into()),
    }];
    let r = create(&c, vec![t], false);
    let e = r.response.topics[0].error.as_ref().unwrap();
    assert_eq!(e.name, "INVALID_CONFIG");
    // The quoted name is cut to 64 characters; the rest of the message is Keel's own text
    // (the known keys, listed so the operator can fix the name).
    assert!(!e.message.contains(&"n".repeat(65)), "{}", e.message);
    let own_text = e.message.split("; known: ").next().unwrap();
    assert!(own_text.len() < 120, "{}", e.message);
    assert!(e.message.contains("...(255 bytes)"), "{}", e.message);
    assert!(
        e.message.contains("known: min.insync.replicas"),
        "{}",
        e.message
    );
    let huge = "c".repeat(1 << 20);
    let r = create(&c, vec![topic(&huge, 1, 1)], false);
    let result = &r.response.topics[0];
    assert_eq!(code(&result.error), ErrorCode::InvalidTopicException);
    assert!(result.name == huge, "{} bytes echoed", result.name.len());
    assert!(result.error.as_ref().unwrap().message.len() < 200);
    // One past Kafka's limit: the name comes back whole, the message says both lengths.
    let long = "d".repeat(MAX_TOPIC_NAME_LEN + 1);
    let r = create(&c, vec![topic(&long, 1, 1)], false);
    let result = &r.response.topics[0];
    assert_eq!(code(&result.error), ErrorCode::InvalidTopicException);
    assert_eq!(result.name, long);
    let msg = &result.error.as_ref().unwrap().message;
    assert!(msg.contains("250") && msg.contains("249"), "{msg}");
}
