//! `keelctl topic create|list|describe|delete|alter|alter-config|delete-records`.

use std::collections::HashMap;
use std::time::Duration;

use clap::Subcommand;
use keel_proto::ErrorCode;
use keel_proto::broker::{DescribeReplicasRequest, ReplicaRole};

use super::{CliError, CliResult, Ctx, parse_key_value};
use crate::admin::{AdminError, ConfigTarget, NewTopic};
use crate::format::topics::{
    PartitionFilter, TopicDescription, describe_text, describe_topic, filter_topics, list_text,
};

/// The group coordinator's internal topic (Kafka `Topic.GROUP_METADATA_TOPIC_NAME`).
const INTERNAL_OFFSETS_TOPIC: &str = "__consumer_offsets";

/// `keelctl topic ...`
#[derive(Debug, Subcommand)]
pub enum TopicCommand {
    /// Create a topic.
    Create(CreateArgs),
    /// List topics.
    List,
    /// Describe topics like `kafka-topics --describe` (all topics when none is named).
    Describe(DescribeArgs),
    /// Delete a topic.
    Delete {
        /// Topic name.
        name: String,
    },
    /// Add partitions to a topic (like `kafka-topics --alter --partitions`). A keyed record's
    /// partition is murmur2(key) % partitions: once the count grows, new records with a given
    /// key may go to another partition than the earlier ones (as in Kafka); records already
    /// written stay where they are. Producers use the new partitions after their next
    /// metadata refresh (`metadata.max.age.ms`, 5 minutes by default).
    Alter(AlterArgs),
    /// Set or delete topic config overrides, then print the topic's effective configs.
    AlterConfig(AlterConfigArgs),
    /// Delete the records below an offset (like `kafka-delete-records`, KIP-107): each
    /// partition's leader moves its log start there and answers once the in-sync replicas
    /// followed; prints each partition's low watermark (its new log start).
    DeleteRecords(super::delete_records::DeleteRecordsArgs),
}

/// Arguments of `topic alter`.
#[derive(Debug, clap::Args)]
pub struct AlterArgs {
    /// Topic name.
    pub name: String,
    /// The new partition count: above the current one (partitions are never removed).
    #[arg(long, value_parser = clap::value_parser!(i32).range(1..))]
    pub partitions: i32,
    /// Replicas of the partitions, Kafka's format: partitions separated by `,`, the brokers of
    /// one by `:`, the preferred leader first (`101:102,102:103`). Either the new partitions
    /// only, or every partition (the existing ones' entries are then ignored, as
    /// `kafka-topics --alter` does). Default: placed by the controller like at creation.
    #[arg(long, value_parser = parse_replica_assignment)]
    pub replica_assignment: Option<ReplicaAssignment>,
    /// Only validate, change nothing.
    #[arg(long)]
    pub validate_only: bool,
}

/// Replicas per partition, as `--replica-assignment` gives them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaAssignment(pub Vec<Vec<i32>>);

/// `101:102,102:103` -> `[[101, 102], [102, 103]]`.
pub fn parse_replica_assignment(s: &str) -> Result<ReplicaAssignment, String> {
    s.split(',')
        .map(|partition| {
            partition
                .split(':')
                .map(|b| {
                    b.trim().parse::<i32>().map_err(|_| {
                        format!(
                            "{b:?} is not a broker id: give partitions separated by ',' and \
                             the brokers of each by ':', e.g. 101:102,102:103"
                        )
                    })
                })
                .collect()
        })
        .collect::<Result<_, _>>()
        .map(ReplicaAssignment)
}

/// Arguments of `topic create`.
#[derive(Debug, clap::Args)]
pub struct CreateArgs {
    /// Topic name.
    pub name: String,
    /// Number of partitions (unset or -1: the controllers' `num_partitions`, 1 unless
    /// configured; Kafka: `num.partitions`).
    #[arg(long, allow_negative_numbers = true)]
    pub partitions: Option<i32>,
    /// Replication factor (unset or -1: the controllers' `default_replication_factor`, 1
    /// unless configured; Kafka: `default.replication.factor`).
    #[arg(long, allow_negative_numbers = true)]
    pub replication_factor: Option<i32>,
    /// Topic config override `key=value` (repeatable), e.g. `min.insync.replicas=2`.
    #[arg(long = "config", value_parser = parse_key_value)]
    pub configs: Vec<(String, String)>,
    /// Replicas of every partition, Kafka's format: partitions separated by `,`, the brokers
    /// of one by `:`, the preferred leader first (`101:102,102:103` = 2 partitions, 2
    /// replicas each). Instead of --partitions and --replication-factor.
    #[arg(long, value_parser = parse_replica_assignment, conflicts_with_all = ["partitions", "replication_factor"])]
    pub replica_assignment: Option<ReplicaAssignment>,
}

/// Arguments of `topic describe`.
#[derive(Debug, clap::Args)]
pub struct DescribeArgs {
    /// Topics to describe; none = all.
    pub names: Vec<String>,
    /// A topic to describe (repeatable), as kafka-topics takes it; adds to the names given.
    #[arg(long = "topic", value_name = "NAME")]
    pub topics: Vec<String>,
    /// Only partitions whose ISR is smaller than the replica set.
    #[arg(long)]
    pub under_replicated: bool,
    /// Only partitions whose ISR is smaller than `min.insync.replicas`.
    #[arg(long)]
    pub under_min_isr: bool,
    /// Only partitions without a leader or whose leader is fenced.
    #[arg(long)]
    pub unavailable: bool,
}

/// Arguments of `topic alter-config`.
#[derive(Debug, clap::Args)]
pub struct AlterConfigArgs {
    /// Topic name.
    pub name: String,
    /// Set `key=value` (repeatable; the value is taken whole, commas included).
    #[arg(long = "set", value_parser = parse_key_value)]
    pub set: Vec<(String, String)>,
    /// Delete a key, falling back to the default (repeatable).
    #[arg(long = "delete")]
    pub delete: Vec<String>,
    /// `k1=v1,k2=v2` to set (repeatable), as kafka-configs and `config alter` take it: a
    /// value holding commas goes in square brackets, `cleanup.policy=[compact,delete]`.
    #[arg(long, value_name = "K=V,...")]
    pub add_config: Vec<String>,
    /// `k1,k2` to delete (repeatable), as kafka-configs and `config alter` take it.
    #[arg(long, value_name = "K,...")]
    pub delete_config: Vec<String>,
    /// Only validate, change nothing.
    #[arg(long)]
    pub validate_only: bool,
}

pub(super) async fn run(c: TopicCommand, ctx: &Ctx) -> CliResult {
    let admin = ctx.admin()?;
    match c {
        TopicCommand::Create(a) => create(a, ctx, &admin).await,
        TopicCommand::List => list(ctx, &admin).await,
        TopicCommand::Describe(a) => describe(a, ctx, &admin).await,
        TopicCommand::DeleteRecords(a) => super::delete_records::run(a, ctx).await,
        TopicCommand::Delete { name } => {
            if name == INTERNAL_OFFSETS_TOPIC {
                // Kafka's TopicCommand refuses the same: the group coordinator's topic holds
                // every consumer group's committed offsets.
                return Err(CliError::usage(format!(
                    "Topic {name} is an internal topic and is not allowed to be marked for \
                     deletion (it holds every consumer group's committed offsets)"
                )));
            }
            admin.delete_topic(&name).await?;
            if ctx.json {
                return ctx.print_json(&serde_json::json!({"deleted": name}));
            }
            outln!("Deleted topic {name}.");
            Ok(())
        }
        TopicCommand::Alter(a) => alter(a, ctx, &admin).await,
        TopicCommand::AlterConfig(a) => alter_config(a, ctx).await,
    }
}

/// `topic alter`: grows the topic to `--partitions`, then prints the new count and the
/// metadata offset that holds the new partitions.
async fn alter(a: AlterArgs, ctx: &Ctx, admin: &crate::admin::Admin) -> CliResult {
    let assignments = match &a.replica_assignment {
        None => Vec::new(),
        Some(ReplicaAssignment(all)) => {
            let image = admin.metadata_image().await?;
            let current = image
                .topics()
                .get_by_name(&a.name)
                .map_or(0, |t| t.partitions.len());
            new_partition_assignments(all, current, a.partitions)?
        }
    };
    let r = admin
        .create_partitions(&a.name, a.partitions, &assignments, a.validate_only)
        .await?;
    if ctx.json {
        return ctx.print_json(&serde_json::json!({
            "name": a.name,
            "partitions": a.partitions,
            "validate_only": a.validate_only,
            "metadata_offset": r.metadata_offset,
        }));
    }
    if a.validate_only {
        outln!(
            "Validated: {} can grow to {} (nothing changed).",
            a.name,
            crate::format::count(a.partitions, "partition")
        );
    } else {
        outln!(
            "Topic {} now has {} (metadata offset {}).",
            a.name,
            crate::format::count(a.partitions, "partition"),
            r.metadata_offset
        );
    }
    Ok(())
}

/// The assignments of the new partitions only, from `--replica-assignment` listing either
/// them or every partition (`kafka-topics --alter` drops the first `current` entries).
fn new_partition_assignments(
    given: &[Vec<i32>],
    current: usize,
    count: i32,
) -> Result<Vec<Vec<i32>>, CliError> {
    let total = usize::try_from(count).unwrap_or(0);
    let added = total.saturating_sub(current);
    if given.len() == total && total > current {
        Ok(given[current..].to_vec())
    } else if given.len() == added {
        Ok(given.to_vec())
    } else {
        Err(CliError::usage(format!(
            "--replica-assignment lists {} partition(s): give the {added} new one(s), or all {total}",
            given.len()
        )))
    }
}

/// `topic create`: creates the topic and prints what the controller made of it (id,
/// partitions, replication factor, configs, metadata offset).
async fn create(a: CreateArgs, ctx: &Ctx, admin: &crate::admin::Admin) -> CliResult {
    let r = admin
        .create_topic(NewTopic {
            name: a.name.clone(),
            partitions: a.partitions,
            replication_factor: a.replication_factor,
            configs: a.configs.clone(),
            assignments: a.replica_assignment.map(|r| r.0).unwrap_or_default(),
        })
        .await?;
    let id = keel_metadata_log::image::uuid_from_bytes(&r.topic_id)
        .map(|u| u.to_string())
        .unwrap_or_default();
    if ctx.json {
        let configs: HashMap<String, Option<String>> = r
            .configs
            .iter()
            .map(|c| (c.name.clone(), c.value.clone()))
            .collect();
        return ctx.print_json(&serde_json::json!({
            "name": r.name,
            "topic_id": id,
            "partitions": r.num_partitions,
            "replication_factor": r.replication_factor,
            "configs": configs,
            "metadata_offset": r.metadata_offset,
        }));
    }
    outln!(
        "Created topic {} (id {id}, {}, replication factor {}) at metadata offset {}.",
        r.name,
        crate::format::count(r.num_partitions, "partition"),
        r.replication_factor,
        r.metadata_offset
    );
    Ok(())
}

/// `topic list`: every topic of the metadata image with its id, partition count and
/// replication factor.
async fn list(ctx: &Ctx, admin: &crate::admin::Admin) -> CliResult {
    let image = admin.metadata_image().await?;
    let topics: Vec<TopicDescription> = image
        .topics()
        .by_name
        .values()
        .filter_map(|id| image.topics().by_id.get(id))
        .map(|t| describe_topic(&image, t))
        .collect();
    if ctx.json {
        let names: Vec<serde_json::Value> = topics
            .iter()
            .map(|t| {
                serde_json::json!({
                    "name": t.name,
                    "topic_id": t.topic_id,
                    "partitions": t.partition_count,
                    "replication_factor": t.replication_factor,
                })
            })
            .collect();
        return ctx.print_json(&names);
    }
    out!("{}", list_text(&topics));
    Ok(())
}

/// `topic alter-config`: sets and deletes overrides (or only validates them), then prints the
/// topic's effective configs (`config alter --topic` with every key). Fails when there is
/// nothing to change.
async fn alter_config(a: AlterConfigArgs, ctx: &Ctx) -> CliResult {
    let (set, delete) = alter_config_changes(&a)?;
    let target = ConfigTarget::Topic(a.name.clone());
    super::config::alter(ctx, &target, &set, &delete, a.validate_only, true).await
}

/// Keys to set (with their values) and keys to delete.
type ConfigChanges = (Vec<(String, String)>, Vec<String>);

/// The keys `topic alter-config` sets and deletes: `--set`/`--delete` and Kafka's
/// `--add-config`/`--delete-config` together (pure). Usage errors: a malformed
/// `--add-config`.
fn alter_config_changes(a: &AlterConfigArgs) -> Result<ConfigChanges, CliError> {
    let mut set = a.set.clone();
    set.extend(super::config::parse_add(&a.add_config)?);
    let mut delete = a.delete.clone();
    delete.extend(super::config::parse_delete(&a.delete_config));
    Ok((set, delete))
}

async fn describe(a: DescribeArgs, ctx: &Ctx, admin: &crate::admin::Admin) -> CliResult {
    let names: Vec<&String> = a.names.iter().chain(&a.topics).collect();
    if names.iter().any(|n| n.is_empty()) {
        return Err(CliError::usage("topic describe: empty topic name"));
    }
    let image = admin.metadata_image().await?;
    let mut topics = Vec::new();
    if names.is_empty() {
        for id in image.topics().by_name.values() {
            if let Some(t) = image.topics().by_id.get(id) {
                topics.push(describe_topic(&image, t));
            }
        }
    } else {
        let mut seen = std::collections::HashSet::new();
        for name in names.into_iter().filter(|n| seen.insert(n.as_str())) {
            let t = image.topics().get_by_name(name).ok_or_else(|| {
                CliError::new(
                    AdminError::Kafka {
                        code: ErrorCode::UnknownTopicOrPartition,
                        message: "no such topic".into(),
                        context: format!("topic {name:?}"),
                    }
                    .to_string(),
                )
            })?;
            topics.push(describe_topic(&image, t));
        }
    }
    // Effective min.insync.replicas per topic (overrides, cluster defaults, static config).
    if !topics.is_empty() {
        let targets: Vec<ConfigTarget> = topics
            .iter()
            .map(|t| ConfigTarget::Topic(t.name.clone()))
            .collect();
        let results = admin
            .describe_configs(&targets, &["min.insync.replicas".to_string()])
            .await?;
        for (t, r) in topics.iter_mut().zip(&results) {
            t.min_insync_replicas = r
                .configs
                .iter()
                .find(|e| e.name == "min.insync.replicas")
                .and_then(|e| e.value.as_deref())
                .and_then(|v| v.parse().ok());
        }
    }
    add_high_watermarks(&mut topics, &image, ctx).await;
    let filter = PartitionFilter {
        under_replicated: a.under_replicated,
        under_min_isr: a.under_min_isr,
        unavailable: a.unavailable,
    };
    let topics = filter_topics(topics, filter);
    if ctx.json {
        return ctx.print_json(&topics);
    }
    out!("{}", describe_text(&topics, !filter.is_empty()));
    Ok(())
}

/// Every hosted replica of each broker at `addresses` (DescribeReplicas), concurrently, each
/// within `min(--request-timeout, 2 s)`; `None` for a broker that did not answer in time.
/// Answers in the order of `addresses`.
pub(super) async fn ask_replicas(
    ctx: &Ctx,
    addresses: Vec<String>,
) -> Vec<(String, Option<keel_proto::broker::DescribeReplicasReply>)> {
    let timeout = ctx.request_timeout.min(Duration::from_secs(2));
    let tasks: Vec<_> = addresses
        .into_iter()
        .map(|addr| {
            let dialer = ctx.dialer.clone();
            let task = tokio::spawn({
                let addr = addr.clone();
                async move {
                    let fut = async {
                        let ep = keel_runtime::tls::Dialer::broker_endpoint(&addr)
                            .ok()?
                            .connect_timeout(timeout);
                        let ch = dialer.connect(&ep).await.ok()?;
                        crate::grpc::broker(&dialer, ch)
                            .describe_replicas(DescribeReplicasRequest::default())
                            .await
                            .ok()
                            .map(|r| r.into_inner())
                    };
                    tokio::time::timeout(timeout, fut).await.ok().flatten()
                }
            });
            (addr, task)
        })
        .collect();
    let mut out = Vec::with_capacity(tasks.len());
    for (addr, task) in tasks {
        out.push((addr, task.await.ok().flatten()));
    }
    out
}

/// Asks brokers (the `--bootstrap-brokers`, else every registered endpoint) for their replica
/// state and fills in each partition's HW and enforced `min.insync.replicas` as reported by
/// its leader (and the topic's value when its leaders agree). Best effort: brokers that do not
/// answer leave these unknown (the topic keeps the controllers' value).
async fn add_high_watermarks(
    topics: &mut [TopicDescription],
    image: &keel_metadata_log::MetadataImage,
    ctx: &Ctx,
) {
    let addresses: Vec<String> = match &ctx.brokers {
        Some(list) => list.clone(),
        None => image
            .brokers()
            .values()
            .filter(|b| !b.fenced)
            .filter_map(|b| {
                b.endpoints
                    .first()
                    .map(|e| format!("{}:{}", e.host, e.port))
            })
            .collect(),
    };
    // (high watermark, min.insync.replicas) as each partition's leader reports them.
    let mut led: HashMap<(String, i32), (i64, i32)> = HashMap::new();
    for (_, reply) in ask_replicas(ctx, addresses).await {
        if let Some(reply) = reply {
            for p in reply.partitions {
                let ok = p.error.as_ref().is_none_or(|e| e.code == 0);
                if ok && p.role == ReplicaRole::Leader as i32 && p.high_watermark >= 0 {
                    led.insert(
                        (p.topic, p.partition),
                        (p.high_watermark, p.min_insync_replicas),
                    );
                }
            }
        }
    }
    for t in topics.iter_mut() {
        for p in t.partitions.iter_mut() {
            let leader = led.get(&(t.name.clone(), p.partition));
            p.high_watermark = leader.map(|l| l.0);
            p.min_insync_replicas = leader.map(|l| l.1).filter(|m| *m > 0);
        }
        // The topic's value: what its leaders enforce when they all agree (they differ only
        // when brokers have different static defaults), else the controllers' answer.
        let mut enforced = t.partitions.iter().filter_map(|p| p.min_insync_replicas);
        if let Some(first) = enforced.next()
            && enforced.all(|m| m == first)
        {
            t.min_insync_replicas = Some(first);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn topic_command(args: &[&str]) -> Result<TopicCommand, clap::Error> {
        let mut argv = vec!["keelctl", "topic"];
        argv.extend(args);
        match crate::cli::Cli::try_parse_from(argv)?.command {
            crate::cli::Command::Topic(c) => Ok(c),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn describe_takes_kafkas_topic_flag_besides_names() {
        let TopicCommand::Describe(a) =
            topic_command(&["describe", "a", "--topic", "b", "--topic", "c"]).unwrap()
        else {
            panic!("not describe")
        };
        assert_eq!(
            (a.names, a.topics),
            (vec!["a".into()], vec!["b".into(), "c".into()])
        );
    }

    #[test]
    fn alter_config_takes_kafkas_add_and_delete_config() {
        let TopicCommand::AlterConfig(a) = topic_command(&[
            "alter-config",
            "t",
            "--set",
            "retention.ms=1",
            "--add-config",
            "cleanup.policy=[compact,delete],segment.bytes=1048576",
            "--delete-config",
            "min.insync.replicas,retention.bytes",
            "--delete",
            "max.message.bytes",
        ])
        .unwrap() else {
            panic!("not alter-config")
        };
        let (set, delete) = alter_config_changes(&a).unwrap();
        assert_eq!(
            set,
            vec![
                ("retention.ms".into(), "1".into()),
                ("cleanup.policy".into(), "compact,delete".into()),
                ("segment.bytes".into(), "1048576".into()),
            ]
        );
        assert_eq!(
            delete,
            vec![
                "max.message.bytes",
                "min.insync.replicas",
                "retention.bytes"
            ]
        );
        let TopicCommand::AlterConfig(bad) =
            topic_command(&["alter-config", "t", "--add-config", "nokey"]).unwrap()
        else {
            panic!("not alter-config")
        };
        let e = alter_config_changes(&bad).unwrap_err();
        assert!(e.usage, "{}", e.message);
        assert_eq!(
            e.message,
            "--add-config \"nokey\": \"nokey\" is not key=value"
        );
    }
}
