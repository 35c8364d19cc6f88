//! AlterConfigs validation and DescribeConfigs sources.

use keel_metadata_log::ConfigResource;
use keel_proto::ErrorCode;
use keel_proto::controller::{
    AlterConfigOp, AlterConfigsReply, AlterConfigsRequest, AlterConfigsResource, AlterableConfig,
    ConfigSource, DescribeConfigsRequest, DescribeConfigsResource,
};
use keel_proto::metadata::ConfigResourceType;

use super::common::{Cluster, code};
use crate::logic::configs::{min_insync_replicas, unclean_leader_election_enabled};
use crate::logic::{ControllerResult, alter_configs, describe_configs};

fn set(name: &str, value: Option<&str>) -> AlterableConfig {
    AlterableConfig {
        name: name.into(),
        op: AlterConfigOp::Set as i32,
        value: value.map(str::to_string),
    }
}

fn alter(
    c: &Cluster,
    ty: ConfigResourceType,
    name: &str,
    configs: Vec<AlterableConfig>,
    validate_only: bool,
) -> ControllerResult<AlterConfigsReply> {
    alter_configs(
        &c.image,
        &AlterConfigsRequest {
            resources: vec![AlterConfigsResource {
                resource_type: ty as i32,
                resource_name: name.into(),
                configs,
                replace_unlisted: false,
            }],
            validate_only,
        },
    )
}

fn setup() -> Cluster {
    let mut c = Cluster::new();
    for b in 1..=3 {
        c.add_broker(b, None);
    }
    c.create_topic("t", &[&[1, 2, 3], &[2, 3, 1]]);
    c
}

/// (case name, resource type, resource name, configs, expected code, text the message names).
type Case = (
    &'static str,
    ConfigResourceType,
    &'static str,
    Vec<AlterableConfig>,
    ErrorCode,
    &'static str,
);

#[test]
fn alter_configs_validation_table() {
    let c = setup();
    use ConfigResourceType::*;
    let cases: Vec<Case> = vec![
        (
            "min.insync 0",
            Topic,
            "t",
            vec![set("min.insync.replicas", Some("0"))],
            ErrorCode::InvalidConfig,
            "min.insync.replicas",
        ),
        (
            "min.insync above rf",
            Topic,
            "t",
            vec![set("min.insync.replicas", Some("4"))],
            ErrorCode::InvalidConfig,
            "replication factor",
        ),
        (
            "min.insync not a number",
            Topic,
            "t",
            vec![set("min.insync.replicas", Some("two"))],
            ErrorCode::InvalidConfig,
            "integer",
        ),
        (
            "unclean not a boolean",
            Topic,
            "t",
            vec![set("unclean.leader.election.enable", Some("yes"))],
            ErrorCode::InvalidConfig,
            "true or false",
        ),
        (
            "retention.ms below -1",
            Topic,
            "t",
            vec![set("retention.ms", Some("-2"))],
            ErrorCode::InvalidConfig,
            "retention.ms",
        ),
        (
            "retention.bytes below -1",
            Topic,
            "t",
            vec![set("retention.bytes", Some("-5"))],
            ErrorCode::InvalidConfig,
            "retention.bytes",
        ),
        (
            "segment.bytes too small",
            Topic,
            "t",
            vec![set("segment.bytes", Some("10"))],
            ErrorCode::InvalidConfig,
            "at least 14",
        ),
        (
            "segment.bytes above i32",
            Topic,
            "t",
            vec![set("segment.bytes", Some("3000000000"))],
            ErrorCode::InvalidConfig,
            "32-bit",
        ),
        (
            "unknown cleanup policy",
            Topic,
            "t",
            vec![set("cleanup.policy", Some("compact,none"))],
            ErrorCode::InvalidConfig,
            "cleanup.policy",
        ),
        (
            "dirty ratio above 1",
            Topic,
            "t",
            vec![set("min.cleanable.dirty.ratio", Some("1.5"))],
            ErrorCode::InvalidConfig,
            "min.cleanable.dirty.ratio",
        ),
        (
            "dirty ratio not a number",
            Topic,
            "t",
            vec![set("min.cleanable.dirty.ratio", Some("NaN"))],
            ErrorCode::InvalidConfig,
            "min.cleanable.dirty.ratio",
        ),
        (
            "negative delete.retention.ms",
            Topic,
            "t",
            vec![set("delete.retention.ms", Some("-1"))],
            ErrorCode::InvalidConfig,
            "delete.retention.ms",
        ),
        (
            "max.compaction.lag.ms 0",
            Topic,
            "t",
            vec![set("max.compaction.lag.ms", Some("0"))],
            ErrorCode::InvalidConfig,
            "max.compaction.lag.ms",
        ),
        (
            "min compaction lag above max",
            Topic,
            "t",
            vec![
                set("min.compaction.lag.ms", Some("10")),
                set("max.compaction.lag.ms", Some("5")),
            ],
            ErrorCode::InvalidConfig,
            "min.compaction.lag.ms",
        ),
        (
            "unknown key",
            Topic,
            "t",
            vec![set("retention.hours", Some("1"))],
            ErrorCode::InvalidConfig,
            "retention.hours",
        ),
        (
            "broker name on a topic",
            Topic,
            "t",
            vec![set("log.retention.ms", Some("1"))],
            ErrorCode::InvalidConfig,
            "log.retention.ms",
        ),
        (
            "all or nothing",
            Topic,
            "t",
            vec![
                set("retention.ms", Some("1000")),
                set("segment.bytes", Some("1")),
            ],
            ErrorCode::InvalidConfig,
            "segment.bytes",
        ),
        (
            "unknown topic",
            Topic,
            "nope",
            vec![set("retention.ms", Some("1"))],
            ErrorCode::UnknownTopicOrPartition,
            "nope",
        ),
        (
            "unknown resource type",
            Unknown,
            "t",
            vec![set("retention.ms", Some("1"))],
            ErrorCode::InvalidRequest,
            "",
        ),
        (
            "bad broker id",
            Broker,
            "abc",
            vec![set("log.retention.ms", Some("1"))],
            ErrorCode::InvalidRequest,
            "abc",
        ),
        (
            "named cluster",
            Cluster,
            "x",
            vec![set("log.retention.ms", Some("1"))],
            ErrorCode::InvalidRequest,
            "",
        ),
        (
            "SET without value",
            Topic,
            "t",
            vec![set("retention.ms", None)],
            ErrorCode::InvalidRequest,
            "retention.ms",
        ),
        (
            "key twice",
            Topic,
            "t",
            vec![
                set("retention.ms", Some("1")),
                set("retention.ms", Some("2")),
            ],
            ErrorCode::InvalidRequest,
            "retention.ms",
        ),
        (
            "APPEND to a key that is not a list",
            Topic,
            "t",
            vec![AlterableConfig {
                name: "retention.ms".into(),
                op: AlterConfigOp::Append as i32,
                value: Some("1".into()),
            }],
            ErrorCode::InvalidConfig,
            "retention.ms is not a list config",
        ),
        (
            "a bad throttled-replicas list",
            Topic,
            "t",
            vec![set("leader.replication.throttled.replicas", Some("0:1,x"))],
            ErrorCode::InvalidConfig,
            "partition:broker",
        ),
        (
            "a throttled rate on a topic",
            Topic,
            "t",
            vec![set("leader.replication.throttled.rate", Some("100"))],
            ErrorCode::InvalidConfig,
            "a broker-only key",
        ),
        (
            "throttled replicas on a broker",
            Broker,
            "1",
            vec![set("follower.replication.throttled.replicas", Some("*"))],
            ErrorCode::InvalidConfig,
            "a topic-only key",
        ),
        (
            "a negative throttled rate",
            Broker,
            "1",
            vec![set("follower.replication.throttled.rate", Some("-1"))],
            ErrorCode::InvalidConfig,
            "at least 0",
        ),
        (
            "unknown op",
            Topic,
            "t",
            vec![AlterableConfig {
                name: "retention.ms".into(),
                op: 9,
                value: Some("1".into()),
            }],
            ErrorCode::InvalidRequest,
            "",
        ),
        (
            "topic name on cluster",
            Cluster,
            "",
            vec![set("retention.ms", Some("1"))],
            ErrorCode::InvalidConfig,
            "for the broker default (cluster) (brokers take the broker-level name \
             log.retention.ms)",
        ),
        (
            "topic name on a broker",
            Broker,
            "1",
            vec![set("max.message.bytes", Some("1"))],
            ErrorCode::InvalidConfig,
            "for broker 1 (brokers take the broker-level name message.max.bytes)",
        ),
        (
            "broker name on a topic",
            Topic,
            "t",
            vec![set("log.retention.ms", Some("1"))],
            ErrorCode::InvalidConfig,
            "for topic \"t\" (topics take the topic-level name retention.ms)",
        ),
        (
            "a bad value names the key as given",
            Cluster,
            "",
            vec![set("log.retention.ms", Some("abc"))],
            ErrorCode::InvalidConfig,
            "invalid value \"abc\" for config log.retention.ms: ",
        ),
    ];
    for (name, ty, res, configs, want, mention) in cases {
        let r = alter(&c, ty, res, configs, false);
        assert!(r.records.is_empty(), "{name}: wrote {:?}", r.records);
        let e = r.response.results[0].error.clone();
        assert_eq!(code(&e), want, "{name}: {e:?}");
        assert!(
            e.unwrap().message.contains(mention),
            "{name}: message should mention {mention:?}"
        );
    }
}

#[test]
fn alter_then_describe_with_sources() {
    let mut c = setup();
    // validate_only writes nothing.
    let r = alter(
        &c,
        ConfigResourceType::Topic,
        "t",
        vec![set("min.insync.replicas", Some("2"))],
        true,
    );
    assert!(r.records.is_empty());
    assert_eq!(code(&r.response.results[0].error), ErrorCode::None);
    // Topic overrides, a cluster default, a broker value.
    let r = alter(
        &c,
        ConfigResourceType::Topic,
        "t",
        vec![
            set("min.insync.replicas", Some("2")),
            set("unclean.leader.election.enable", Some("TRUE")),
        ],
        false,
    );
    assert_eq!(r.records.len(), 2);
    c.commit(r);
    let r = alter(
        &c,
        ConfigResourceType::Cluster,
        "",
        vec![
            set("log.retention.ms", Some("3600000")),
            set("min.insync.replicas", Some("3")),
        ],
        false,
    );
    c.commit(r);
    let r = alter(
        &c,
        ConfigResourceType::Broker,
        "2",
        vec![set("log.segment.bytes", Some("1048576"))],
        false,
    );
    c.commit(r);
    assert_eq!(min_insync_replicas(&c.image, "t"), 2);
    assert!(unclean_leader_election_enabled(&c.image, "t"));
    // Setting the same value again writes nothing.
    let r = alter(
        &c,
        ConfigResourceType::Topic,
        "t",
        vec![set("min.insync.replicas", Some("2"))],
        false,
    );
    assert!(r.records.is_empty());

    let d = describe_configs(
        &c.image,
        &DescribeConfigsRequest {
            resources: vec![
                DescribeConfigsResource {
                    resource_type: ConfigResourceType::Topic as i32,
                    resource_name: "t".into(),
                    configuration_keys: vec![],
                },
                DescribeConfigsResource {
                    resource_type: ConfigResourceType::Broker as i32,
                    resource_name: "2".into(),
                    configuration_keys: vec!["log.segment.bytes".into(), "bogus".into()],
                },
                DescribeConfigsResource {
                    resource_type: ConfigResourceType::Topic as i32,
                    resource_name: "nope".into(),
                    configuration_keys: vec![],
                },
            ],
            include_synonyms: true,
            include_documentation: true,
            answering_broker: None,
        },
    );
    assert_eq!(d.metadata_offset, c.offset as i64);
    let topic = &d.results[0];
    let get = |k: &str| topic.configs.iter().find(|e| e.name == k).unwrap().clone();
    let mir = get("min.insync.replicas");
    assert_eq!(
        (mir.value.as_deref(), mir.config_source),
        (Some("2"), ConfigSource::TopicConfig as i32)
    );
    let syn: Vec<(Option<&str>, i32)> = mir
        .synonyms
        .iter()
        .map(|s| (s.value.as_deref(), s.source))
        .collect();
    assert_eq!(
        syn,
        vec![
            (Some("3"), ConfigSource::DynamicDefaultBrokerConfig as i32),
            (Some("1"), ConfigSource::DefaultConfig as i32)
        ]
    );
    let ret = get("retention.ms");
    assert_eq!(
        (ret.value.as_deref(), ret.config_source),
        (
            Some("3600000"),
            ConfigSource::DynamicDefaultBrokerConfig as i32
        )
    );
    let seg = get("segment.bytes");
    assert_eq!(
        (seg.value.as_deref(), seg.config_source),
        (Some("1073741824"), ConfigSource::DefaultConfig as i32)
    );
    assert!(!seg.documentation.is_empty());
    let broker = &d.results[1];
    assert_eq!(broker.configs.len(), 1, "unknown keys are left out");
    assert_eq!(
        (
            broker.configs[0].value.as_deref(),
            broker.configs[0].config_source
        ),
        (Some("1048576"), ConfigSource::DynamicBrokerConfig as i32)
    );
    assert_eq!(
        code(&d.results[2].error),
        ErrorCode::UnknownTopicOrPartition
    );
    // Asked through broker 2, the topic's keys take broker 2's per-broker values (Kafka: the
    // answering broker's config), named with the broker key; other brokers' do not count.
    for (answering, want) in [
        (
            Some(2),
            (Some("1048576"), ConfigSource::DynamicBrokerConfig),
        ),
        (Some(1), (Some("1073741824"), ConfigSource::DefaultConfig)),
    ] {
        let d = describe_configs(
            &c.image,
            &DescribeConfigsRequest {
                resources: vec![DescribeConfigsResource {
                    resource_type: ConfigResourceType::Topic as i32,
                    resource_name: "t".into(),
                    configuration_keys: vec!["segment.bytes".into(), "retention.ms".into()],
                }],
                include_synonyms: true,
                include_documentation: false,
                answering_broker: answering,
            },
        );
        let configs = &d.results[0].configs;
        let seg = configs.iter().find(|e| e.name == "segment.bytes").unwrap();
        assert_eq!(
            (seg.value.as_deref(), seg.config_source),
            (want.0, want.1 as i32),
            "{answering:?}"
        );
        let syn: Vec<(&str, Option<&str>, i32)> = seg
            .synonyms
            .iter()
            .map(|s| (s.name.as_str(), s.value.as_deref(), s.source))
            .collect();
        let default = (
            "log.segment.bytes",
            Some("1073741824"),
            ConfigSource::DefaultConfig as i32,
        );
        assert_eq!(
            syn,
            if answering == Some(2) {
                vec![default]
            } else {
                vec![]
            }
        );
        let ret = configs.iter().find(|e| e.name == "retention.ms").unwrap();
        assert_eq!(
            ret.config_source,
            ConfigSource::DynamicDefaultBrokerConfig as i32
        );
    }

    // DELETE removes the override; the cluster default shows through.
    let r = alter(
        &c,
        ConfigResourceType::Topic,
        "t",
        vec![AlterableConfig {
            name: "min.insync.replicas".into(),
            op: AlterConfigOp::Delete as i32,
            value: None,
        }],
        false,
    );
    assert_eq!(r.records.len(), 1);
    c.commit(r);
    assert!(
        c.image
            .config(&ConfigResource::Topic("t".into()), "min.insync.replicas")
            .is_none()
    );
    assert_eq!(min_insync_replicas(&c.image, "t"), 3);
    // Deleting an absent key writes nothing.
    let r = alter(
        &c,
        ConfigResourceType::Topic,
        "t",
        vec![AlterableConfig {
            name: "min.insync.replicas".into(),
            op: AlterConfigOp::Delete as i32,
            value: None,
        }],
        false,
    );
    assert!(r.records.is_empty());
}

/// Compaction is configurable (issue #22): every Kafka spelling of `cleanup.policy` with
/// `compact`, the dirty ratio and the lags; `min.compaction.lag.ms` is checked against the
/// topic's effective `max.compaction.lag.ms`, also when only one of them changes.
#[test]
fn compaction_configs_are_accepted_and_checked_together() {
    let mut c = setup();
    for policy in ["compact", "compact,delete", "delete, compact", "delete"] {
        let r = alter(
            &c,
            ConfigResourceType::Topic,
            "t",
            vec![set("cleanup.policy", Some(policy))],
            true,
        );
        assert_eq!(
            code(&r.response.results[0].error),
            ErrorCode::None,
            "{policy}"
        );
    }
    let r = alter(
        &c,
        ConfigResourceType::Topic,
        "t",
        vec![
            set("cleanup.policy", Some("compact")),
            set("min.cleanable.dirty.ratio", Some("0.1")),
            set("max.compaction.lag.ms", Some("1000")),
            set("delete.retention.ms", Some("0")),
        ],
        false,
    );
    assert_eq!(code(&r.response.results[0].error), ErrorCode::None);
    assert_eq!(r.records.len(), 4);
    c.commit(r);
    // Above the stored max alone: refused; at it: fine.
    let r = alter(
        &c,
        ConfigResourceType::Topic,
        "t",
        vec![set("min.compaction.lag.ms", Some("1001"))],
        false,
    );
    assert_eq!(code(&r.response.results[0].error), ErrorCode::InvalidConfig);
    assert!(r.records.is_empty());
    let r = alter(
        &c,
        ConfigResourceType::Topic,
        "t",
        vec![set("min.compaction.lag.ms", Some("1000"))],
        false,
    );
    assert_eq!(code(&r.response.results[0].error), ErrorCode::None);
    c.commit(r);
    // Lowering the max below the stored min is refused too; deleting it (back to Long.MAX)
    // is fine.
    let r = alter(
        &c,
        ConfigResourceType::Topic,
        "t",
        vec![set("max.compaction.lag.ms", Some("999"))],
        false,
    );
    assert_eq!(code(&r.response.results[0].error), ErrorCode::InvalidConfig);
    let r = alter(
        &c,
        ConfigResourceType::Topic,
        "t",
        vec![AlterableConfig {
            name: "max.compaction.lag.ms".into(),
            op: AlterConfigOp::Delete as i32,
            value: None,
        }],
        false,
    );
    assert_eq!(code(&r.response.results[0].error), ErrorCode::None);
}

/// CreateTopics: the same compaction checks as AlterConfigs, against Kafka's defaults.
#[test]
fn new_topic_compaction_configs_are_checked_together() {
    use crate::logic::configs::validate_new_topic_configs;
    use keel_proto::controller::ConfigEntry;
    let entry = |name: &str, value: &str| ConfigEntry {
        name: name.into(),
        value: Some(value.into()),
    };
    let ok = validate_new_topic_configs(
        &[
            entry("cleanup.policy", "compact,delete"),
            entry("min.compaction.lag.ms", "100"),
            entry("min.cleanable.dirty.ratio", "0"),
        ],
        3,
    )
    .unwrap();
    assert_eq!(ok["cleanup.policy"], "compact,delete");
    let err = validate_new_topic_configs(
        &[
            entry("min.compaction.lag.ms", "100"),
            entry("max.compaction.lag.ms", "99"),
        ],
        3,
    )
    .unwrap_err();
    assert_eq!(err.0, ErrorCode::InvalidConfig);
    assert!(err.1.contains("min.compaction.lag.ms"), "{}", err.1);
}

/// Broker configs name a registered broker (Kafka sends them to that broker): an unknown id
/// is refused with INVALID_REQUEST naming it, and nothing is written; the cluster default
/// (a BROKER resource with an empty name) needs no broker.
#[test]
fn broker_configs_need_a_registered_broker() {
    let c = setup();
    let r = alter(
        &c,
        ConfigResourceType::Broker,
        "999",
        vec![set("log.retention.ms", Some("1"))],
        false,
    );
    assert!(r.records.is_empty());
    let err = r.response.results[0].error.clone().unwrap();
    assert_eq!(code(&Some(err.clone())), ErrorCode::InvalidRequest);
    assert!(
        err.message.starts_with("broker 999 is not registered"),
        "{}",
        err.message
    );
    let d = describe_configs(
        &c.image,
        &DescribeConfigsRequest {
            resources: vec![
                DescribeConfigsResource {
                    resource_type: ConfigResourceType::Broker as i32,
                    resource_name: "999".into(),
                    configuration_keys: vec![],
                },
                DescribeConfigsResource {
                    resource_type: ConfigResourceType::Broker as i32,
                    resource_name: "3".into(),
                    configuration_keys: vec![],
                },
            ],
            include_synonyms: false,
            include_documentation: false,
            answering_broker: None,
        },
    );
    assert_eq!(code(&d.results[0].error), ErrorCode::InvalidRequest);
    assert!(d.results[0].configs.is_empty());
    assert_eq!(code(&d.results[1].error), ErrorCode::None);
    assert!(!d.results[1].configs.is_empty());
    for (ty, name) in [
        (ConfigResourceType::Broker, "3"),
        (ConfigResourceType::Broker, ""),
        (ConfigResourceType::Cluster, ""),
    ] {
        let r = alter(
            &c,
            ty,
            name,
            vec![set("log.retention.ms", Some("1"))],
            false,
        );
        assert_eq!(
            code(&r.response.results[0].error),
            ErrorCode::None,
            "{ty:?} {name:?}"
        );
        assert_eq!(r.records.len(), 1, "{ty:?} {name:?}");
    }
}

/// The replication throttle keys (KIP-73) and APPEND / SUBTRACT of list keys (Kafka
/// IncrementalAlterConfigs on `ConfigDef.Type.LIST`).
#[test]
fn throttle_configs_and_list_operations() {
    let mut c = setup();
    let op = |name: &str, op: AlterConfigOp, value: &str| AlterableConfig {
        name: name.into(),
        op: op as i32,
        value: Some(value.into()),
    };
    let key = "leader.replication.throttled.replicas";
    let r = alter(
        &c,
        ConfigResourceType::Topic,
        "t",
        vec![set(key, Some("0:1,0:2"))],
        false,
    );
    assert_eq!(code(&r.response.results[0].error), ErrorCode::None);
    c.commit(r);
    let r = alter(
        &c,
        ConfigResourceType::Topic,
        "t",
        vec![op(key, AlterConfigOp::Append, "1:3,0:2")],
        false,
    );
    assert_eq!(code(&r.response.results[0].error), ErrorCode::None);
    c.commit(r);
    let topic = ConfigResource::Topic("t".into());
    assert_eq!(c.image.config(&topic, key), Some("0:1,0:2,1:3"));
    let r = alter(
        &c,
        ConfigResourceType::Topic,
        "t",
        vec![op(key, AlterConfigOp::Subtract, "0:1")],
        false,
    );
    c.commit(r);
    assert_eq!(c.image.config(&topic, key), Some("0:2,1:3"));
    // APPEND to cleanup.policy starts from the default `delete`.
    let r = alter(
        &c,
        ConfigResourceType::Topic,
        "t",
        vec![op("cleanup.policy", AlterConfigOp::Append, "compact")],
        false,
    );
    c.commit(r);
    assert_eq!(
        c.image.config(&topic, "cleanup.policy"),
        Some("delete,compact")
    );
    // APPEND of a bad item is refused and changes nothing.
    let r = alter(
        &c,
        ConfigResourceType::Topic,
        "t",
        vec![op(key, AlterConfigOp::Append, "nope")],
        false,
    );
    assert_eq!(code(&r.response.results[0].error), ErrorCode::InvalidConfig);
    assert!(r.records.is_empty());
    // Rates on a broker and as the cluster default; described with their sources.
    let rate = "follower.replication.throttled.rate";
    let r = alter(
        &c,
        ConfigResourceType::Broker,
        "2",
        vec![set(rate, Some("10485760"))],
        false,
    );
    assert_eq!(code(&r.response.results[0].error), ErrorCode::None);
    c.commit(r);
    let d = describe_configs(
        &c.image,
        &DescribeConfigsRequest {
            resources: vec![
                DescribeConfigsResource {
                    resource_type: ConfigResourceType::Broker as i32,
                    resource_name: "2".into(),
                    configuration_keys: vec![],
                },
                DescribeConfigsResource {
                    resource_type: ConfigResourceType::Topic as i32,
                    resource_name: "t".into(),
                    configuration_keys: vec![],
                },
            ],
            ..Default::default()
        },
    );
    let broker = &d.results[0].configs;
    let e = broker
        .iter()
        .find(|e| e.name == rate)
        .expect("rate described");
    assert_eq!(e.value.as_deref(), Some("10485760"));
    assert_eq!(e.config_source, ConfigSource::DynamicBrokerConfig as i32);
    assert!(
        broker.iter().all(|e| e.name != key),
        "topic-only key on a broker"
    );
    let topic = &d.results[1].configs;
    let e = topic
        .iter()
        .find(|e| e.name == key)
        .expect("list described");
    assert_eq!(e.value.as_deref(), Some("0:2,1:3"));
    assert!(
        topic.iter().all(|e| e.name != rate),
        "broker-only key on a topic"
    );
}

/// Kafka's legacy AlterConfigs (API 33) through `replace_unlisted`: the listed configs become
/// the resource's whole set (unlisted ones deleted in the same change), and only SET and
/// DELETE are taken.
#[test]
fn a_replacing_alter_deletes_the_unlisted_configs() {
    let mut c = setup();
    let r = alter(
        &c,
        ConfigResourceType::Topic,
        "t",
        vec![
            set("retention.ms", Some("1000")),
            set("segment.bytes", Some("1048576")),
        ],
        false,
    );
    c.commit(r);
    let topic = ConfigResource::Topic("t".into());
    let replace = |configs: Vec<AlterableConfig>| AlterConfigsRequest {
        resources: vec![AlterConfigsResource {
            resource_type: ConfigResourceType::Topic as i32,
            resource_name: "t".into(),
            configs,
            replace_unlisted: true,
        }],
        validate_only: false,
    };
    let r = alter_configs(&c.image, &replace(vec![set("retention.ms", Some("2000"))]));
    assert_eq!(code(&r.response.results[0].error), ErrorCode::None);
    c.commit(r);
    assert_eq!(c.image.config(&topic, "retention.ms"), Some("2000"));
    assert_eq!(
        c.image.config(&topic, "segment.bytes"),
        None,
        "unlisted: deleted"
    );
    // An empty list clears the resource.
    let r = alter_configs(&c.image, &replace(vec![]));
    c.commit(r);
    assert_eq!(c.image.configs().get(&topic).map_or(0, |m| m.len()), 0);
    // APPEND is not a legacy operation: refused, nothing written.
    let r = alter_configs(
        &c.image,
        &replace(vec![AlterableConfig {
            name: "cleanup.policy".into(),
            op: AlterConfigOp::Append as i32,
            value: Some("delete".into()),
        }]),
    );
    assert_eq!(
        code(&r.response.results[0].error),
        ErrorCode::InvalidRequest
    );
    assert!(r.records.is_empty());
    // A bad listed value fails the whole resource: the unlisted ones stay.
    let r = alter(
        &c,
        ConfigResourceType::Topic,
        "t",
        vec![set("retention.ms", Some("5"))],
        false,
    );
    c.commit(r);
    let r = alter_configs(
        &c.image,
        &replace(vec![set("min.insync.replicas", Some("9"))]),
    );
    assert_eq!(code(&r.response.results[0].error), ErrorCode::InvalidConfig);
    assert!(r.records.is_empty());
    assert_eq!(c.image.config(&topic, "retention.ms"), Some("5"));
}
