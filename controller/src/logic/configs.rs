//! Configs: the known keys, their validation, effective values, AlterConfigs and
//! DescribeConfigs (Kafka: `ConfigurationControlManager`, `LogConfig`, `DescribeConfigs` v4,
//! `IncrementalAlterConfigs` v1).
//!
//! Keys use Kafka's names. A topic key has a broker-level synonym (e.g. `retention.ms` ->
//! `log.retention.ms`) which is what BROKER and CLUSTER resources carry. The effective value
//! of a topic key is, highest precedence first: the topic override (ConfigRecord on the
//! topic), the cluster-wide dynamic default (ConfigRecord on CLUSTER under the broker name),
//! Kafka's built-in default. Static values from a node's TOML file are not in the image and
//! are not consulted here.
//!
//! Validation follows Kafka's `ConfigDef` validators; where Keel is stricter it says so on
//! the key ([`CONFIG_DEFS`]).

use std::collections::{BTreeMap, BTreeSet};

use keel_metadata_log::{ConfigResource, MetadataImage};
use keel_proto::ErrorCode;
use keel_proto::controller::{
    AlterConfigOp, AlterConfigsReply, AlterConfigsRequest, AlterConfigsResourceResult, ConfigEntry,
    ConfigSource, DescribeConfigsEntry, DescribeConfigsReply, DescribeConfigsRequest,
    DescribeConfigsResult, DescribeConfigsSynonym,
};
use keel_proto::metadata::{
    ConfigRecord, ConfigResourceType, MetadataRecord, metadata_record::Record,
};

use super::{ControllerResult, error, record};

pub use keel_metadata_log::configs::{
    CONFIG_DEFS, ConfigDef, ConfigKind, TOPIC_CONFIG_COUNT, broker_config_def, config_defs,
    parse_bool, topic_config_def, validate_value,
};

/// The effective value of topic key `key` for topic `topic` and where it comes from (see the
/// module doc). `None` for an unknown key.
pub fn effective_topic_config(
    image: &MetadataImage,
    topic: &str,
    key: &str,
) -> Option<(String, ConfigSource)> {
    let def = topic_config_def(key)?;
    if let Some(v) = image.config(&ConfigResource::Topic(topic.to_string()), key) {
        return Some((v.to_string(), ConfigSource::TopicConfig));
    }
    if let Some(v) = def
        .broker_synonym()
        .and_then(|b| image.config(&ConfigResource::Cluster, b))
    {
        return Some((v.to_string(), ConfigSource::DynamicDefaultBrokerConfig));
    }
    Some((def.default.to_string(), ConfigSource::DefaultConfig))
}

/// The topic's effective `unclean.leader.election.enable` (default false). An unparsable
/// stored value counts as false.
pub fn unclean_leader_election_enabled(image: &MetadataImage, topic: &str) -> bool {
    effective_topic_config(image, topic, "unclean.leader.election.enable")
        .and_then(|(v, _)| parse_bool(&v))
        .unwrap_or(false)
}

/// The topic's effective `min.insync.replicas` (default 1).
pub fn min_insync_replicas(image: &MetadataImage, topic: &str) -> i32 {
    effective_topic_config(image, topic, "min.insync.replicas")
        .and_then(|(v, _)| v.trim().parse().ok())
        .unwrap_or(1)
}

/// Validates the config overrides of a topic being created with replication factor
/// `replication_factor` (Kafka: `ConfigurationControlManager.validateAlterConfig` on
/// creation). Returns the overrides in key order, or the error code and message: a null
/// value, an unknown key or an invalid value -> INVALID_CONFIG, a key given twice ->
/// INVALID_REQUEST.
pub(crate) fn validate_new_topic_configs(
    entries: &[ConfigEntry],
    replication_factor: usize,
) -> Result<BTreeMap<String, String>, (ErrorCode, String)> {
    let mut out = BTreeMap::new();
    for e in entries {
        let def = topic_config_def(&e.name).ok_or_else(|| {
            (
                ErrorCode::InvalidConfig,
                format!(
                    "unknown topic config {:?}; known: {}",
                    keel_proto::limits::clip(&e.name),
                    known_names(false)
                ),
            )
        })?;
        let value = e.value.as_deref().ok_or_else(|| {
            (
                ErrorCode::InvalidConfig,
                format!(
                    "null value for config {}",
                    keel_proto::limits::clip(&e.name)
                ),
            )
        })?;
        check_topic_value(def, &e.name, value, Some(replication_factor))?;
        if out.insert(e.name.clone(), value.to_string()).is_some() {
            return Err((
                ErrorCode::InvalidRequest,
                format!(
                    "config {} given more than once",
                    keel_proto::limits::clip(&e.name)
                ),
            ));
        }
    }
    let lag = |key: &str| {
        out.get(key)
            .map(String::as_str)
            .or_else(|| topic_config_def(key).map(|d| d.default))
            .unwrap_or_default()
            .to_string()
    };
    check_compaction_lags(&lag(COMPACTION_LAG_KEYS[0]), &lag(COMPACTION_LAG_KEYS[1]))?;
    Ok(out)
}

/// Value check for a key (`name`, as the request gave it: the topic or the broker-level
/// name), including `min.insync.replicas <= replication factor`.
fn check_topic_value(
    def: &ConfigDef,
    name: &str,
    value: &str,
    replication_factor: Option<usize>,
) -> Result<(), (ErrorCode, String)> {
    let invalid = |why: String| {
        (
            ErrorCode::InvalidConfig,
            format!(
                "invalid value {:?} for config {}: {why}",
                keel_proto::limits::clip(value),
                keel_proto::limits::clip(name)
            ),
        )
    };
    validate_value(def, value).map_err(invalid)?;
    if def.name == "min.insync.replicas"
        && let Some(rf) = replication_factor
        && let Ok(n) = value.trim().parse::<usize>()
        && n > rf
    {
        return Err(invalid(format!("larger than the replication factor {rf}")));
    }
    Ok(())
}

/// The effective topic configs (overrides over defaults) for a CreateTopics reply.
pub(crate) fn effective_configs_for_new_topic(
    image: &MetadataImage,
    overrides: &BTreeMap<String, String>,
) -> Vec<ConfigEntry> {
    config_defs(false)
        .map(|d| {
            let value = overrides
                .get(d.name)
                .cloned()
                .or_else(|| {
                    d.broker_synonym()
                        .and_then(|b| image.config(&ConfigResource::Cluster, b))
                        .map(str::to_string)
                })
                .unwrap_or_else(|| d.default.to_string());
            ConfigEntry {
                name: d.name.to_string(),
                value: Some(value),
            }
        })
        .collect()
}

/// Resolves a request's (type, name) into a resource. Errors: unknown type, a broker name
/// that is not a broker id, a broker id that is not registered, a CLUSTER name that is not
/// empty -> INVALID_REQUEST; unknown topic -> UNKNOWN_TOPIC_OR_PARTITION.
///
/// An unregistered broker: Kafka's admin client sends a broker's DescribeConfigs and
/// AlterConfigs to that broker, so an unknown id never reaches a config change; a broker asked
/// about another id answers INVALID_REQUEST (`ConfigHelper.describeConfigs`,
/// `ConfigAdminManager.preprocess`: "Unexpected broker id"). The cluster-wide default (empty
/// name) needs no broker.
fn resolve_resource(
    image: &MetadataImage,
    resource_type: i32,
    name: &str,
) -> Result<ConfigResource, (ErrorCode, String)> {
    match ConfigResourceType::try_from(resource_type) {
        Ok(ConfigResourceType::Topic) => {
            if image.topics().by_name.contains_key(name) {
                Ok(ConfigResource::Topic(name.to_string()))
            } else {
                Err((
                    ErrorCode::UnknownTopicOrPartition,
                    format!("unknown topic {:?}", keel_proto::limits::clip(name)),
                ))
            }
        }
        // Kafka: a BROKER resource with an empty name is the cluster-wide default.
        Ok(ConfigResourceType::Broker) if name.is_empty() => Ok(ConfigResource::Cluster),
        Ok(ConfigResourceType::Broker) => match name.parse::<i32>() {
            Ok(id) if id >= 0 && image.broker(id).is_some() => Ok(ConfigResource::Broker(id)),
            Ok(id) if id >= 0 => Err((
                ErrorCode::InvalidRequest,
                format!(
                    "broker {id} is not registered (the registered brokers take broker \
                     configs; the cluster-wide default has an empty name)"
                ),
            )),
            _ => Err((
                ErrorCode::InvalidRequest,
                format!("{:?} is not a broker id", keel_proto::limits::clip(name)),
            )),
        },
        Ok(ConfigResourceType::Cluster) if name.is_empty() => Ok(ConfigResource::Cluster),
        Ok(ConfigResourceType::Cluster) => Err((
            ErrorCode::InvalidRequest,
            format!(
                "the CLUSTER resource has no name, got {:?}",
                keel_proto::limits::clip(name)
            ),
        )),
        _ => Err((
            ErrorCode::InvalidRequest,
            format!("unsupported config resource type {resource_type}"),
        )),
    }
}

/// The known keys, comma separated, for an error that names a wrong one: the topic-level
/// names, or (`broker_level`) the broker/cluster-level ones.
/// A resource as the operator names it (`topic "t"`, `broker 1`, `the broker default`).
fn resource_text(res: &ConfigResource) -> String {
    match res {
        ConfigResource::Topic(t) => format!("topic {:?}", keel_proto::limits::clip(t)),
        ConfigResource::Broker(id) => format!("broker {id}"),
        ConfigResource::Cluster => "the broker default (cluster)".to_string(),
    }
}

fn known_names(broker_level: bool) -> String {
    config_defs(broker_level)
        .map(|d| if broker_level { d.broker_name } else { d.name })
        .collect::<Vec<_>>()
        .join(", ")
}

fn def_for(resource: &ConfigResource, key: &str) -> Option<&'static ConfigDef> {
    match resource {
        ConfigResource::Topic(_) => topic_config_def(key),
        ConfigResource::Broker(_) | ConfigResource::Cluster => broker_config_def(key),
    }
}

fn config_record(resource: &ConfigResource, key: &str, value: Option<String>) -> MetadataRecord {
    let (ty, name) = match resource {
        ConfigResource::Cluster => (ConfigResourceType::Cluster, String::new()),
        ConfigResource::Broker(id) => (ConfigResourceType::Broker, id.to_string()),
        ConfigResource::Topic(t) => (ConfigResourceType::Topic, t.clone()),
    };
    record(Record::Config(ConfigRecord {
        resource_type: ty as i32,
        resource_name: name,
        name: key.to_string(),
        value,
    }))
}

/// The smallest replication factor over a topic's partitions (0 for an unknown topic).
fn topic_replication_factor(image: &MetadataImage, topic: &str) -> usize {
    image
        .topics()
        .get_by_name(topic)
        .and_then(|t| t.partitions.values().map(|p| p.replicas.len()).min())
        .unwrap_or(0)
}

/// IncrementalAlterConfigs (Kafka v1): SET or DELETE keys of TOPIC, BROKER or CLUSTER
/// resources. Each resource is all-or-nothing and answered in its own
/// `AlterConfigsResourceResult`:
/// - unknown topic -> UNKNOWN_TOPIC_OR_PARTITION; unknown resource type, bad or
///   unregistered broker id, a
///   resource named twice in the request, a key named twice, an unknown op, or SET without a
///   value -> INVALID_REQUEST;
/// - unknown key, invalid value (e.g. `min.insync.replicas` < 1 or above the topic's smallest
///   replication factor, `unclean.leader.election.enable` not a boolean, `retention.ms` <
///   -1, `segment.bytes` < 14, `cleanup.policy=compact`), or APPEND/SUBTRACT (no list
///   configs) -> INVALID_CONFIG naming the key and why.
///
/// Writes one ConfigRecord per key whose value actually changes (DELETE = value absent);
/// nothing for `validate_only`.
pub fn alter_configs(
    image: &MetadataImage,
    req: &AlterConfigsRequest,
) -> ControllerResult<AlterConfigsReply> {
    let mut counts: BTreeMap<(i32, &str), usize> = BTreeMap::new();
    for r in &req.resources {
        *counts
            .entry((r.resource_type, r.resource_name.as_str()))
            .or_default() += 1;
    }
    let mut records = Vec::new();
    let mut results = Vec::with_capacity(req.resources.len());
    for r in &req.resources {
        let outcome = if counts[&(r.resource_type, r.resource_name.as_str())] > 1 {
            Err((
                ErrorCode::InvalidRequest,
                format!(
                    "resource {:?} named more than once",
                    keel_proto::limits::clip(&r.resource_name)
                ),
            ))
        } else {
            resolve_resource(image, r.resource_type, &r.resource_name).and_then(|res| {
                if r.replace_unlisted {
                    alter_one(image, &res, &replacing(image, &res, &r.configs)?)
                } else {
                    alter_one(image, &res, &r.configs)
                }
            })
        };
        let err = match outcome {
            Ok(mut recs) => {
                if !req.validate_only {
                    records.append(&mut recs);
                }
                None
            }
            Err((code, msg)) => error(code, msg),
        };
        results.push(AlterConfigsResourceResult {
            error: err,
            resource_type: r.resource_type,
            resource_name: r.resource_name.clone(),
        });
    }
    ControllerResult::new(
        records,
        AlterConfigsReply {
            results,
            ..Default::default()
        },
    )
}

/// `configs` of a `replace_unlisted` resource (Kafka's legacy AlterConfigs) with a DELETE
/// added for every config set on `res` that `configs` does not name, so that the listed ones
/// become the resource's whole set. Refuses APPEND and SUBTRACT, which the legacy API does
/// not have (INVALID_REQUEST).
fn replacing(
    image: &MetadataImage,
    res: &ConfigResource,
    configs: &[keel_proto::controller::AlterableConfig],
) -> Result<Vec<keel_proto::controller::AlterableConfig>, (ErrorCode, String)> {
    if let Some(c) = configs.iter().find(|c| {
        !matches!(
            AlterConfigOp::try_from(c.op),
            Ok(AlterConfigOp::Set | AlterConfigOp::Delete)
        )
    }) {
        return Err((
            ErrorCode::InvalidRequest,
            format!(
                "config {}: a replacing alter takes SET and DELETE only, not op {}",
                keel_proto::limits::clip(&c.name),
                c.op
            ),
        ));
    }
    let listed: BTreeSet<&str> = configs.iter().map(|c| c.name.as_str()).collect();
    let mut out = configs.to_vec();
    if let Some(current) = image.configs().get(res) {
        out.extend(
            current
                .keys()
                .filter(|k| !listed.contains(k.as_str()))
                .map(|k| keel_proto::controller::AlterableConfig {
                    name: k.clone(),
                    op: AlterConfigOp::Delete as i32,
                    value: None,
                }),
        );
    }
    Ok(out)
}

/// The records for one resource of [`alter_configs`], or its error.
fn alter_one(
    image: &MetadataImage,
    res: &ConfigResource,
    configs: &[keel_proto::controller::AlterableConfig],
) -> Result<Vec<MetadataRecord>, (ErrorCode, String)> {
    let rf = match res {
        ConfigResource::Topic(t) => Some(topic_replication_factor(image, t)),
        _ => None,
    };
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    // Topic compaction lags set or deleted here: the value after the change (`None` =
    // Kafka's default).
    let mut lags: BTreeMap<&str, Option<String>> = BTreeMap::new();
    for c in configs {
        if !seen.insert(c.name.as_str()) {
            return Err((
                ErrorCode::InvalidRequest,
                format!(
                    "config {} named more than once",
                    keel_proto::limits::clip(&c.name)
                ),
            ));
        }
        let def = def_for(res, &c.name).ok_or_else(|| {
            let broker_level = !matches!(res, ConfigResource::Topic(_));
            // The other level's name given: say which one this resource takes.
            let hint = match (
                broker_level,
                topic_config_def(&c.name),
                broker_config_def(&c.name),
            ) {
                (true, Some(d), _) => match d.broker_synonym() {
                    Some(b) => format!(" (brokers take the broker-level name {b})"),
                    None => " (a topic-only key: set it on a topic)".to_string(),
                },
                (false, _, Some(d)) if d.is_topic_key() => {
                    format!(" (topics take the topic-level name {})", d.name)
                }
                (false, _, Some(_)) => {
                    " (a broker-only key: set it on a broker or the broker default)".to_string()
                }
                _ => String::new(),
            };
            (
                ErrorCode::InvalidConfig,
                format!(
                    "unknown config {:?} for {}{hint}; known: {}",
                    keel_proto::limits::clip(&c.name),
                    resource_text(res),
                    known_names(broker_level)
                ),
            )
        })?;
        let current = image.config(res, &c.name);
        let new_value = match AlterConfigOp::try_from(c.op) {
            Ok(AlterConfigOp::Set) => {
                let v = c.value.as_deref().ok_or_else(|| {
                    (
                        ErrorCode::InvalidRequest,
                        format!(
                            "SET of {} without a value",
                            keel_proto::limits::clip(&c.name)
                        ),
                    )
                })?;
                check_topic_value(def, &c.name, v, rf)?;
                Some(v.to_string())
            }
            Ok(AlterConfigOp::Delete) => None,
            Ok(op @ (AlterConfigOp::Append | AlterConfigOp::Subtract)) => {
                if !is_list(def) {
                    return Err((
                        ErrorCode::InvalidConfig,
                        format!(
                            "{} is not a list config: APPEND/SUBTRACT do not apply",
                            keel_proto::limits::clip(&c.name)
                        ),
                    ));
                }
                let items = c.value.as_deref().unwrap_or_default();
                let v = edit_list(current.unwrap_or(def.default), items, op);
                check_topic_value(def, &c.name, &v, rf)?;
                Some(v)
            }
            Err(_) => {
                return Err((
                    ErrorCode::InvalidRequest,
                    format!(
                        "unknown config op {} for {}",
                        c.op,
                        keel_proto::limits::clip(&c.name)
                    ),
                ));
            }
        };
        if matches!(res, ConfigResource::Topic(_)) && COMPACTION_LAG_KEYS.contains(&c.name.as_str())
        {
            let effective = new_value.clone().or_else(|| {
                image
                    .config(&ConfigResource::Cluster, def.broker_name)
                    .map(str::to_string)
            });
            lags.insert(c.name.as_str(), effective);
        }
        if current != new_value.as_deref() {
            out.push(config_record(res, &c.name, new_value));
        }
    }
    if let ConfigResource::Topic(topic) = res
        && !lags.is_empty()
    {
        let value = |key: &str| match lags.get(key) {
            Some(Some(v)) => v.clone(),
            Some(None) => topic_config_def(key).map_or("", |d| d.default).to_string(),
            None => effective_topic_config(image, topic, key)
                .map(|(v, _)| v)
                .unwrap_or_default(),
        };
        check_compaction_lags(
            &value(COMPACTION_LAG_KEYS[0]),
            &value(COMPACTION_LAG_KEYS[1]),
        )?;
    }
    Ok(out)
}

/// Whether APPEND and SUBTRACT apply to the key (Kafka: `ConfigDef.Type.LIST` keys).
fn is_list(def: &ConfigDef) -> bool {
    matches!(
        def.kind,
        ConfigKind::CleanupPolicy | ConfigKind::ThrottledReplicas
    )
}

/// IncrementalAlterConfigs APPEND / SUBTRACT of a list key (Kafka
/// `ConfigurationControlManager.incrementalAlterConfigResource`): `items` (comma separated)
/// are added to `base` (the current value, else the default) where missing, in order, or
/// removed from it.
fn edit_list(base: &str, items: &str, op: AlterConfigOp) -> String {
    let split = |v: &str| -> Vec<String> {
        v.split(',')
            .map(str::trim)
            .filter(|i| !i.is_empty())
            .map(str::to_string)
            .collect()
    };
    let mut list = split(base);
    for item in split(items) {
        if op == AlterConfigOp::Append {
            if !list.contains(&item) {
                list.push(item);
            }
        } else {
            list.retain(|i| *i != item);
        }
    }
    list.join(",")
}

/// `min.compaction.lag.ms` and `max.compaction.lag.ms`, checked together.
const COMPACTION_LAG_KEYS: [&str; 2] = ["min.compaction.lag.ms", "max.compaction.lag.ms"];

/// Kafka `LogConfig.validateValues`: `min.compaction.lag.ms` must not exceed
/// `max.compaction.lag.ms` (the broker's `LogConfig::validate` refuses the same).
fn check_compaction_lags(min: &str, max: &str) -> Result<(), (ErrorCode, String)> {
    match (min.trim().parse::<i64>(), max.trim().parse::<i64>()) {
        (Ok(lo), Ok(hi)) if lo > hi => Err((
            ErrorCode::InvalidConfig,
            format!("min.compaction.lag.ms {lo} must not exceed max.compaction.lag.ms {hi}"),
        )),
        _ => Ok(()),
    }
}

/// DescribeConfigs (Kafka v4), a read: the value of each requested key (all known keys when
/// `configuration_keys` is empty; unknown keys are left out, as Kafka does) with its source:
/// TOPIC_CONFIG / DYNAMIC_BROKER_CONFIG / DYNAMIC_DEFAULT_BROKER_CONFIG / DEFAULT_CONFIG
/// (Kafka's defaults); a topic's key gets DYNAMIC_BROKER_CONFIG from the per-broker value of
/// its broker synonym on `answering_broker`, if set (the broker a client asked). `synonyms` (with `include_synonyms`) lists the lower-precedence values,
/// highest first. Per-resource errors: unknown topic -> UNKNOWN_TOPIC_OR_PARTITION; unknown
/// type, bad or unregistered broker id -> INVALID_REQUEST. `metadata_offset` is the image's offset.
pub fn describe_configs(
    image: &MetadataImage,
    req: &DescribeConfigsRequest,
) -> DescribeConfigsReply {
    let mut results = Vec::with_capacity(req.resources.len());
    for r in &req.resources {
        let mut result = DescribeConfigsResult {
            resource_type: r.resource_type,
            resource_name: r.resource_name.clone(),
            ..Default::default()
        };
        match resolve_resource(image, r.resource_type, &r.resource_name) {
            Err((code, msg)) => result.error = error(code, msg),
            Ok(res) => {
                let keys: Vec<&'static ConfigDef> = if r.configuration_keys.is_empty() {
                    config_defs(!matches!(res, ConfigResource::Topic(_))).collect()
                } else {
                    r.configuration_keys
                        .iter()
                        .filter_map(|k| def_for(&res, k))
                        .collect()
                };
                result.configs = keys
                    .into_iter()
                    .map(|d| describe_entry(image, &res, d, req))
                    .collect();
            }
        }
        results.push(result);
    }
    DescribeConfigsReply {
        results,
        metadata_offset: image.provenance().offset as i64,
        ..Default::default()
    }
}

/// One key of [`describe_configs`]: every source that has a value, highest precedence first;
/// the first is the effective one.
fn describe_entry(
    image: &MetadataImage,
    res: &ConfigResource,
    def: &ConfigDef,
    req: &DescribeConfigsRequest,
) -> DescribeConfigsEntry {
    let mut sources: Vec<(String, Option<String>, ConfigSource)> = Vec::with_capacity(4);
    let name = match res {
        ConfigResource::Topic(t) => {
            let v = image.config(&ConfigResource::Topic(t.clone()), def.name);
            if let Some(v) = v {
                sources.push((def.name.into(), Some(v.into()), ConfigSource::TopicConfig));
            }
            let on_broker = req.answering_broker.zip(def.broker_synonym());
            if let Some(v) =
                on_broker.and_then(|(id, b)| image.config(&ConfigResource::Broker(id), b))
            {
                sources.push((
                    def.broker_name.into(),
                    Some(v.into()),
                    ConfigSource::DynamicBrokerConfig,
                ));
            }
            def.name
        }
        ConfigResource::Broker(id) => {
            if let Some(v) = image.config(&ConfigResource::Broker(*id), def.broker_name) {
                sources.push((
                    def.broker_name.into(),
                    Some(v.into()),
                    ConfigSource::DynamicBrokerConfig,
                ));
            }
            def.broker_name
        }
        ConfigResource::Cluster => def.broker_name,
    };
    let default_name = match res {
        ConfigResource::Topic(_) => def.broker_synonym(),
        _ => Some(def.broker_name),
    };
    if let Some(v) = default_name.and_then(|b| image.config(&ConfigResource::Cluster, b)) {
        sources.push((
            def.broker_name.into(),
            Some(v.into()),
            ConfigSource::DynamicDefaultBrokerConfig,
        ));
    }
    sources.push((
        def.broker_name.into(),
        Some(def.default.into()),
        ConfigSource::DefaultConfig,
    ));
    let (_, value, source) = sources[0].clone();
    DescribeConfigsEntry {
        name: name.to_string(),
        value,
        read_only: false,
        config_source: source as i32,
        is_sensitive: false,
        synonyms: if req.include_synonyms {
            sources[1..]
                .iter()
                .map(|(n, v, s)| DescribeConfigsSynonym {
                    name: n.clone(),
                    value: v.clone(),
                    source: *s as i32,
                })
                .collect()
        } else {
            Vec::new()
        },
        documentation: if req.include_documentation {
            def.doc.to_string()
        } else {
            String::new()
        },
    }
}
