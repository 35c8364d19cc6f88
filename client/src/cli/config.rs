//! `keelctl config describe|alter`: dynamic configs of topics, brokers and the cluster-wide
//! broker default, like Kafka's `kafka-configs --describe|--alter --entity-type
//! topics|brokers (--entity-name N | --entity-default)` (or `--topic T`, `--broker N`,
//! `--broker-defaults`).
//!
//! Topic keys use Kafka's topic names (`retention.ms`); broker and default keys the broker
//! names (`log.retention.ms`). Brokers apply a broker or default value to every topic without
//! an override of its own, without a restart (KIP-226): the topic's value, else the broker's,
//! else the default, else the broker's static config file.

use serde::Serialize;

use super::{CliError, CliResult, Ctx, parse_key_value};
use crate::admin::{Admin, ConfigTarget};
use crate::format::table_of;

/// `keelctl config ...`
#[derive(Debug, clap::Subcommand)]
pub enum ConfigCommand {
    /// The dynamic configs of a topic, a broker or the cluster-wide broker default
    /// (kafka-configs --describe); with --all every key with its effective value and source.
    Describe(DescribeArgs),
    /// Set or delete dynamic configs (kafka-configs --alter --add-config/--delete-config),
    /// then print the resulting ones. A deleted key falls back to the next source (broker ->
    /// default -> static config -> Kafka's default).
    Alter(AlterArgs),
}

/// Which resource: Kafka's `--entity-type`/`--entity-name`/`--entity-default`, or the
/// shortcuts `--topic`, `--broker`, `--broker-defaults`.
#[derive(Debug, clap::Args)]
pub struct Entity {
    /// `topics` or `brokers`.
    #[arg(long, value_parser = ["topics", "brokers"])]
    pub entity_type: Option<String>,
    /// The topic name or broker id.
    #[arg(long)]
    pub entity_name: Option<String>,
    /// The cluster-wide default of every broker (with --entity-type brokers).
    #[arg(long)]
    pub entity_default: bool,
    /// Shortcut for --entity-type topics --entity-name T.
    #[arg(long, value_name = "T")]
    pub topic: Option<String>,
    /// Shortcut for --entity-type brokers --entity-name N.
    #[arg(long, value_name = "N")]
    pub broker: Option<String>,
    /// Shortcut for --entity-type brokers --entity-default.
    #[arg(long)]
    pub broker_defaults: bool,
}

/// Arguments of `config describe`.
#[derive(Debug, clap::Args)]
pub struct DescribeArgs {
    #[command(flatten)]
    pub entity: Entity,
    /// Every known key with its effective value and where it comes from, not only the
    /// dynamic values set on this resource.
    #[arg(long)]
    pub all: bool,
}

/// Arguments of `config alter`.
#[derive(Debug, clap::Args)]
pub struct AlterArgs {
    #[command(flatten)]
    pub entity: Entity,
    /// `k1=v1,k2=v2` to set (repeatable). A value holding commas goes in square brackets,
    /// as in kafka-configs: `cleanup.policy=[compact,delete]`.
    #[arg(long, value_name = "K=V,...")]
    pub add_config: Vec<String>,
    /// `k1,k2` to delete (repeatable).
    #[arg(long, value_name = "K,...")]
    pub delete_config: Vec<String>,
    /// Only validate, change nothing.
    #[arg(long)]
    pub validate_only: bool,
}

/// One config entry as printed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
struct ConfigRow {
    name: String,
    value: Option<String>,
    source: String,
}

/// What `config describe` shows.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Selection {
    /// One resource.
    One(ConfigTarget),
    /// `--entity-type topics` without a name: every topic, internal ones included (Kafka's
    /// `ConfigCommand.describeResourceConfig` lists them with `listInternal(true)`).
    EveryTopic,
    /// `--entity-type brokers` without a name: every registered broker, then the cluster-wide
    /// default (as `ConfigCommand.describeResourceConfig` appends the default entity).
    EveryBroker,
}

impl Entity {
    /// The one resource named (pure), for `config alter`. Usage errors: as
    /// [`Entity::selection`], and an `--entity-type` without `--entity-name` or
    /// `--entity-default` (kafka-configs --alter needs one too).
    fn target(&self) -> Result<ConfigTarget, CliError> {
        match self.selection()? {
            Selection::One(t) => Ok(t),
            Selection::EveryTopic | Selection::EveryBroker => Err(CliError::usage(format!(
                "--entity-type {} needs --entity-name (or, for brokers, --entity-default)",
                self.entity_type.as_deref().unwrap_or_default()
            ))),
        }
    }

    /// What the flags name (pure): one resource, or with `--entity-type` alone every resource
    /// of that type (kafka-configs --describe does so). Usage errors: none or two given, a
    /// name with --entity-default, a broker id that is not a non-negative integer.
    fn selection(&self) -> Result<Selection, CliError> {
        let every = match (
            self.entity_type.as_deref(),
            &self.entity_name,
            self.entity_default,
        ) {
            (Some("topics"), None, false) => Some(Selection::EveryTopic),
            (Some("brokers"), None, false) => Some(Selection::EveryBroker),
            _ => None,
        };
        if let Some(every) = every {
            if self.topic.is_some() || self.broker.is_some() || self.broker_defaults {
                return Err(CliError::usage(
                    "name one resource: give only one of --topic, --broker, --broker-defaults, \
                     --entity-type",
                ));
            }
            return Ok(every);
        }
        let by_type = match (
            self.entity_type.as_deref(),
            &self.entity_name,
            self.entity_default,
        ) {
            (None, None, false) => None,
            (Some("topics"), Some(n), false) => Some(ConfigTarget::Topic(n.clone())),
            (Some("brokers"), Some(n), false) => Some(ConfigTarget::Broker(broker_id(n)?)),
            (Some("brokers"), None, true) => Some(ConfigTarget::Cluster),
            (Some("topics"), _, true) => {
                return Err(CliError::usage(
                    "--entity-default goes with --entity-type brokers (topics have no default \
                     entity: the broker default applies to them)",
                ));
            }
            (Some(_), Some(_), true) => {
                return Err(CliError::usage(
                    "give --entity-name or --entity-default, not both",
                ));
            }
            (None, _, _) => {
                return Err(CliError::usage(
                    "--entity-name and --entity-default need --entity-type topics|brokers",
                ));
            }
            (Some(t), _, _) => {
                return Err(CliError::usage(format!(
                    "--entity-type {t}: Keel has topics and brokers"
                )));
            }
        };
        let shortcuts: Vec<ConfigTarget> = [
            self.topic.clone().map(ConfigTarget::Topic),
            self.broker
                .as_deref()
                .map(broker_id)
                .transpose()?
                .map(ConfigTarget::Broker),
            self.broker_defaults.then_some(ConfigTarget::Cluster),
        ]
        .into_iter()
        .flatten()
        .chain(by_type)
        .collect();
        match shortcuts.as_slice() {
            [one] => Ok(Selection::One(one.clone())),
            [] => Err(CliError::usage(
                "name what to configure: --topic T, --broker N or --broker-defaults (or \
                 --entity-type topics|brokers with --entity-name / --entity-default)",
            )),
            _ => Err(CliError::usage(
                "name one resource: give only one of --topic, --broker, --broker-defaults, \
                 --entity-type",
            )),
        }
    }
}

fn broker_id(s: &str) -> Result<i32, CliError> {
    s.trim()
        .parse::<i32>()
        .ok()
        .filter(|id| *id >= 0)
        .ok_or_else(|| CliError::usage(format!("broker {s:?}: not a broker id (an integer >= 0)")))
}

/// The source a resource's own dynamic values have (what `describe` without `--all` shows).
fn own_source(target: &ConfigTarget) -> &'static str {
    match target {
        ConfigTarget::Topic(_) => "TOPIC_CONFIG",
        ConfigTarget::Broker(_) => "DYNAMIC_BROKER_CONFIG",
        ConfigTarget::Cluster => "DYNAMIC_DEFAULT_BROKER_CONFIG",
    }
}

/// The heading of a describe (Kafka's wording).
fn heading(target: &ConfigTarget, all: bool) -> String {
    let what = match target {
        ConfigTarget::Topic(t) => format!("topic {t}"),
        ConfigTarget::Broker(b) => format!("broker {b}"),
        ConfigTarget::Cluster => "the default broker".to_string(),
    };
    if all {
        format!("All configs for {what} are:")
    } else {
        format!("Dynamic configs for {what} are:")
    }
}

/// Splits `s` at the commas outside square brackets (pure): `a=[x,y],b=1` ->
/// `["a=[x,y]", "b=1"]`. Errors: a `]` without its `[`, or a `[` never closed.
fn split_outside_brackets(s: &str) -> Result<Vec<&str>, String> {
    let mut parts = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => {
                depth = depth
                    .checked_sub(1)
                    .ok_or_else(|| format!("']' at byte {i} closes no '['"))?;
            }
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth > 0 {
        return Err("a '[' is not closed by ']'".into());
    }
    parts.push(&s[start..]);
    Ok(parts)
}

/// Parses `--add-config` values (`k=v,k2=v2`, repeatable) (pure). As in kafka-configs, a
/// value that holds commas goes in square brackets: `cleanup.policy=[compact,delete]` sets
/// `compact,delete` (Kafka's `ConfigCommand.parseConfigsToBeAdded`). Usage errors name the
/// item.
pub(super) fn parse_add(items: &[String]) -> Result<Vec<(String, String)>, CliError> {
    let mut out = Vec::new();
    for item in items {
        let bad = |e: String| CliError::usage(format!("--add-config {item:?}: {e}"));
        for kv in split_outside_brackets(item)
            .map_err(bad)?
            .into_iter()
            .filter(|s| !s.trim().is_empty())
        {
            let (k, v) = parse_key_value(kv.trim()).map_err(bad)?;
            let v = match v.strip_prefix('[').and_then(|v| v.strip_suffix(']')) {
                Some(inner) => inner.to_string(),
                None => v,
            };
            out.push((k, v));
        }
    }
    Ok(out)
}

/// Parses `--delete-config` values (`k1,k2`, repeatable) (pure).
pub(super) fn parse_delete(items: &[String]) -> Vec<String> {
    items
        .iter()
        .flat_map(|i| i.split(','))
        .map(str::trim)
        .filter(|k| !k.is_empty())
        .map(str::to_string)
        .collect()
}

/// The effective configs of `target`, as rows (all keys). With `ask_broker` a broker is
/// asked itself (as `kafka-configs --bootstrap-server` does), so the values of its own file
/// show (STATIC_BROKER_CONFIG); when it does not answer, the controllers' view is shown with
/// a warning. Without it (right after an alter, which the broker may not have applied yet)
/// the controllers answer.
async fn rows(
    ctx: &Ctx,
    admin: &Admin,
    target: &ConfigTarget,
    ask_broker: bool,
) -> Result<Vec<ConfigRow>, CliError> {
    let asked = match target {
        ConfigTarget::Cluster => None,
        _ if !ask_broker => None,
        ConfigTarget::Broker(id) => Some(*id),
        // A topic as a broker applies it (Kafka's admin client asks any broker): its file's
        // values stand in for Kafka's defaults there.
        ConfigTarget::Topic(_) => any_broker(admin).await?,
    };
    let from = match asked {
        Some(id) => from_broker(ctx, admin, id, std::slice::from_ref(target)).await?,
        None => None,
    };
    let results = match from {
        Some(results) => results,
        None => {
            admin
                .describe_configs(std::slice::from_ref(target), &[])
                .await?
        }
    };
    Ok(results
        .iter()
        .flat_map(|r| &r.configs)
        .map(|e| ConfigRow {
            name: e.name.clone(),
            value: e.value.clone(),
            source: source_name(e.config_source),
        })
        .collect())
}

/// An unfenced registered broker to ask topic configs of (the lowest id); `None` when there
/// is none, or when the caller may not list the brokers (DESCRIBE on the cluster, #23): a
/// topic's configs need only DESCRIBE_CONFIGS on the topic, as in Kafka, so the controllers
/// are asked instead, with a warning.
async fn any_broker(admin: &Admin) -> Result<Option<i32>, CliError> {
    let cluster = match admin.describe_cluster().await {
        Err(crate::admin::AdminError::Kafka {
            code: keel_proto::ErrorCode::ClusterAuthorizationFailed,
            ..
        }) => {
            tracing::warn!(
                "not allowed to list the brokers (DESCRIBE on the cluster): showing the \
                 controllers' view, without the values of a broker's own file"
            );
            return Ok(None);
        }
        other => other?,
    };
    Ok(cluster
        .brokers
        .iter()
        .filter(|b| !b.fenced)
        .map(|b| b.broker_id)
        .min())
}

/// DescribeConfigs of `targets` asked of broker `id` (which puts in its own file's values);
/// `None` (with a warning) when it does not answer. Errors: the broker is not registered, or
/// it answered with an error.
async fn from_broker(
    ctx: &Ctx,
    admin: &Admin,
    id: i32,
    targets: &[ConfigTarget],
) -> Result<Option<Vec<keel_proto::controller::DescribeConfigsResult>>, CliError> {
    let cluster = admin.describe_cluster().await?;
    let Some(addr) = cluster
        .brokers
        .iter()
        .find(|b| b.broker_id == id)
        .and_then(|b| b.endpoints.first())
        .map(|e| format!("{}:{}", e.host, e.port))
    else {
        return Err(CliError::new(format!(
            "broker {id} is not registered (see `keelctl broker list`)"
        )));
    };
    let req = crate::admin::describe_configs_request(targets, &[]);
    let reply = match ctx.brokers(vec![addr.clone()]).client_for(&addr) {
        Ok(mut c) => c.describe_configs(req).await.map(|r| r.into_inner()),
        Err(e) => {
            tracing::warn!("{e}");
            return Ok(None);
        }
    };
    let reply = match reply {
        Ok(r) => r,
        Err(status) => {
            tracing::warn!(
                "broker {id} does not answer ({}): showing the controllers' view, without the \
                 values of the broker's own file",
                crate::rpc_error::status_line(&addr, crate::rpc_error::Api::Broker, &status)
            );
            return Ok(None);
        }
    };
    crate::admin::AdminError::check(reply.error.as_ref(), || {
        format!("describe configs of broker {id}")
    })?;
    for (r, target) in reply.results.iter().zip(targets) {
        crate::admin::AdminError::check(r.error.as_ref(), || target.describe())?;
    }
    Ok(Some(reply.results))
}

/// The table of configs (pure): name, value (`null` when unset) and source.
fn configs_text(rows: &[ConfigRow]) -> String {
    table_of(&["CONFIG", "VALUE", "SOURCE"], rows, |r| {
        vec![
            r.name.clone(),
            r.value.clone().unwrap_or_else(|| "null".into()),
            r.source.clone(),
        ]
    })
}

/// Kafka's name of a DescribeConfigs source.
fn source_name(v: i32) -> String {
    use keel_proto::controller::ConfigSource;
    match ConfigSource::try_from(v) {
        Ok(ConfigSource::TopicConfig) => "TOPIC_CONFIG",
        Ok(ConfigSource::DynamicBrokerConfig) => "DYNAMIC_BROKER_CONFIG",
        Ok(ConfigSource::DynamicDefaultBrokerConfig) => "DYNAMIC_DEFAULT_BROKER_CONFIG",
        Ok(ConfigSource::StaticBrokerConfig) => "STATIC_BROKER_CONFIG",
        Ok(ConfigSource::DefaultConfig) => "DEFAULT_CONFIG",
        _ => "UNKNOWN",
    }
    .into()
}

/// Runs `keelctl config ...`.
pub(super) async fn run(c: ConfigCommand, ctx: &Ctx) -> CliResult {
    match c {
        ConfigCommand::Describe(a) => {
            let selection = a.entity.selection()?;
            let admin = ctx.admin()?;
            let target = match selection {
                Selection::One(target) => target,
                every => return describe_every(ctx, &admin, &every, a.all).await,
            };
            let mut rows = rows(ctx, &admin, &target, true).await?;
            if !a.all {
                let own = own_source(&target);
                rows.retain(|r| r.source == own);
            }
            print(ctx, &heading(&target, a.all), &rows)
        }
        ConfigCommand::Alter(a) => {
            let target = a.entity.target()?;
            let set = parse_add(&a.add_config)?;
            let delete = parse_delete(&a.delete_config);
            alter(ctx, &target, &set, &delete, a.validate_only, false).await
        }
    }
}

/// Sets and deletes keys of `target` (or only validates), then prints its dynamic configs.
/// Fails with a usage error when there is nothing to change.
/// `all`: print every key with its source (as `topic alter-config` does), not only the
/// dynamic values of `target`.
pub(super) async fn alter(
    ctx: &Ctx,
    target: &ConfigTarget,
    set: &[(String, String)],
    delete: &[String],
    validate_only: bool,
    all: bool,
) -> CliResult {
    if set.is_empty() && delete.is_empty() {
        return Err(CliError::usage(
            "nothing to change: give --add-config k=v or --delete-config k",
        ));
    }
    let admin = ctx.admin()?;
    admin
        .alter_configs(target, set, delete, validate_only)
        .await?;
    let mut rows = rows(ctx, &admin, target, false).await?;
    if !all {
        let own = own_source(target);
        rows.retain(|r| r.source == own);
    }
    let head = if validate_only {
        format!("Validated (nothing changed). {}", heading(target, all))
    } else {
        format!("Updated. {}", heading(target, all))
    };
    print(ctx, &head, &rows)
}

/// The resources of `every` (pure): the topics by name, or the brokers by id then the
/// cluster-wide default.
fn every_target(image: &keel_metadata_log::MetadataImage, every: &Selection) -> Vec<ConfigTarget> {
    match every {
        Selection::One(t) => vec![t.clone()],
        Selection::EveryTopic => image
            .topics()
            .by_name
            .keys()
            .map(|t| ConfigTarget::Topic(t.clone()))
            .collect(),
        Selection::EveryBroker => {
            // Registered brokers, fenced ones included, in id order.
            image
                .brokers()
                .keys()
                .copied()
                .map(ConfigTarget::Broker)
                .chain([ConfigTarget::Cluster])
                .collect()
        }
    }
}

/// One resource of a describe of several, as JSON.
#[derive(Debug, Serialize)]
struct ResourceConfigs {
    /// `topic`, `broker` or `broker-default`.
    resource: &'static str,
    /// The topic name or broker id (none for the default).
    name: Option<String>,
    configs: Vec<ConfigRow>,
}

/// `config describe --entity-type topics|brokers` without a name: every resource of the
/// type, each under its heading (Kafka's `kafka-configs --describe` does the same; the
/// broker default's heading is Kafka's "Default configs for brokers in the cluster are:").
/// JSON: a list of [`ResourceConfigs`].
async fn describe_every(ctx: &Ctx, admin: &Admin, every: &Selection, all: bool) -> CliResult {
    let image = admin.metadata_image().await?;
    let targets = every_target(&image, every);
    let mut results = if targets.is_empty() {
        Vec::new()
    } else {
        admin.describe_configs(&targets, &[]).await?
    };
    // Each broker as it applies its configs (its own file's values), as `describe --broker`;
    // the topics as one broker applies them, as `describe --topic`.
    for (target, result) in targets.iter().zip(results.iter_mut()) {
        if let ConfigTarget::Broker(id) = target
            && let Some(mut own) =
                from_broker(ctx, admin, *id, std::slice::from_ref(target)).await?
            && !own.is_empty()
        {
            *result = own.swap_remove(0);
        }
    }
    let topics: Vec<(usize, ConfigTarget)> = targets
        .iter()
        .enumerate()
        .filter(|(_, t)| matches!(t, ConfigTarget::Topic(_)))
        .map(|(i, t)| (i, t.clone()))
        .collect();
    if !topics.is_empty()
        && let Some(id) = any_broker(admin).await?
    {
        let asked: Vec<ConfigTarget> = topics.iter().map(|(_, t)| t.clone()).collect();
        if let Some(answers) = from_broker(ctx, admin, id, &asked).await? {
            for ((i, _), answer) in topics.iter().zip(answers) {
                results[*i] = answer;
            }
        }
    }
    let mut out = Vec::with_capacity(targets.len());
    for (target, result) in targets.iter().zip(&results) {
        let own = own_source(target);
        let configs: Vec<ConfigRow> = result
            .configs
            .iter()
            .map(|e| ConfigRow {
                name: e.name.clone(),
                value: e.value.clone(),
                source: source_name(e.config_source),
            })
            .filter(|r| all || r.source == own)
            .collect();
        let (resource, name) = match target {
            ConfigTarget::Topic(t) => ("topic", Some(t.clone())),
            ConfigTarget::Broker(b) => ("broker", Some(b.to_string())),
            ConfigTarget::Cluster => ("broker-default", None),
        };
        out.push(ResourceConfigs {
            resource,
            name,
            configs,
        });
    }
    if ctx.json {
        return ctx.print_json(&out);
    }
    for (target, r) in targets.iter().zip(&out) {
        let head = match target {
            ConfigTarget::Cluster => "Default configs for brokers in the cluster are:".to_string(),
            t => heading(t, all),
        };
        print(ctx, &head, &r.configs)?;
    }
    Ok(())
}

fn print(ctx: &Ctx, heading: &str, rows: &[ConfigRow]) -> CliResult {
    if ctx.json {
        return ctx.print_json(&rows);
    }
    outln!("{heading}");
    if !rows.is_empty() {
        out!("{}", configs_text(rows));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entity() -> Entity {
        Entity {
            entity_type: None,
            entity_name: None,
            entity_default: false,
            topic: None,
            broker: None,
            broker_defaults: false,
        }
    }

    #[test]
    fn the_resource_comes_from_kafkas_flags_or_the_shortcuts() {
        let t = |e: Entity| e.target().map_err(|e| (e.usage, e.message));
        assert_eq!(
            t(Entity {
                entity_type: Some("topics".into()),
                entity_name: Some("orders".into()),
                ..entity()
            }),
            Ok(ConfigTarget::Topic("orders".into()))
        );
        assert_eq!(
            t(Entity {
                entity_type: Some("brokers".into()),
                entity_default: true,
                ..entity()
            }),
            Ok(ConfigTarget::Cluster)
        );
        assert_eq!(
            t(Entity {
                broker: Some("2".into()),
                ..entity()
            }),
            Ok(ConfigTarget::Broker(2))
        );
        assert_eq!(
            t(Entity {
                broker_defaults: true,
                ..entity()
            }),
            Ok(ConfigTarget::Cluster)
        );
        for bad in [
            entity(),
            Entity {
                topic: Some("a".into()),
                broker: Some("1".into()),
                ..entity()
            },
            Entity {
                broker: Some("x".into()),
                ..entity()
            },
            Entity {
                entity_type: Some("topics".into()),
                entity_default: true,
                ..entity()
            },
            Entity {
                entity_type: Some("brokers".into()),
                ..entity()
            },
            Entity {
                entity_name: Some("1".into()),
                ..entity()
            },
        ] {
            let r = t(bad);
            assert!(matches!(r, Err((true, _))), "{r:?}");
        }
    }

    #[test]
    fn an_entity_type_alone_describes_every_resource_of_it() {
        let sel = |e: Entity| e.selection().map_err(|e| (e.usage, e.message));
        assert_eq!(
            sel(Entity {
                entity_type: Some("topics".into()),
                ..entity()
            }),
            Ok(Selection::EveryTopic)
        );
        assert_eq!(
            sel(Entity {
                entity_type: Some("brokers".into()),
                ..entity()
            }),
            Ok(Selection::EveryBroker)
        );
        assert_eq!(
            sel(Entity {
                topic: Some("t".into()),
                ..entity()
            }),
            Ok(Selection::One(ConfigTarget::Topic("t".into())))
        );
        let both = Entity {
            entity_type: Some("topics".into()),
            topic: Some("t".into()),
            ..entity()
        };
        assert!(matches!(sel(both), Err((true, _))));
        // alter changes one resource: the type alone is refused.
        let e = Entity {
            entity_type: Some("topics".into()),
            ..entity()
        }
        .target()
        .unwrap_err();
        assert_eq!(
            (e.usage, e.message.as_str()),
            (
                true,
                "--entity-type topics needs --entity-name (or, for brokers, --entity-default)"
            )
        );
    }

    #[test]
    fn every_broker_is_each_registered_one_then_the_default() {
        use keel_metadata_log::{MetadataImage, Provenance};
        use keel_proto::metadata::metadata_record::Record;
        use keel_proto::metadata::{MetadataRecord, RegisterBrokerRecord, TopicRecord};
        let mut recs = Vec::new();
        for (name, id) in [("zeta", 1u8), ("__consumer_offsets", 2), ("alpha", 3)] {
            recs.push(Record::Topic(TopicRecord {
                name: name.into(),
                topic_id: vec![id; 16].into(),
            }));
        }
        for id in [3, 1] {
            recs.push(Record::RegisterBroker(RegisterBrokerRecord {
                broker_id: id,
                incarnation_id: vec![id as u8; 16].into(),
                broker_epoch: 10 + id as i64,
                ..Default::default()
            }));
        }
        let recs: Vec<_> = recs
            .into_iter()
            .map(|r| MetadataRecord { record: Some(r) })
            .collect();
        let image = MetadataImage::empty()
            .with_records(Provenance { offset: 5, term: 1 }, recs.iter())
            .unwrap();
        assert_eq!(
            every_target(&image, &Selection::EveryBroker),
            vec![
                ConfigTarget::Broker(1),
                ConfigTarget::Broker(3),
                ConfigTarget::Cluster
            ]
        );
        assert_eq!(
            every_target(&image, &Selection::EveryTopic),
            vec![
                ConfigTarget::Topic("__consumer_offsets".into()),
                ConfigTarget::Topic("alpha".into()),
                ConfigTarget::Topic("zeta".into()),
            ]
        );
        assert_eq!(
            every_target(&MetadataImage::empty(), &Selection::EveryBroker),
            vec![ConfigTarget::Cluster]
        );
    }

    #[test]
    fn add_and_delete_lists_split_on_commas() {
        assert_eq!(
            parse_add(&["a=1,b=2".into(), "c=x=y".into()]).unwrap(),
            vec![
                ("a".into(), "1".into()),
                ("b".into(), "2".into()),
                ("c".into(), "x=y".into())
            ]
        );
        assert_eq!(
            parse_add(&["cleanup.policy=[compact,delete],retention.ms=1".into()]).unwrap(),
            vec![
                ("cleanup.policy".into(), "compact,delete".into()),
                ("retention.ms".into(), "1".into())
            ]
        );
        assert_eq!(
            parse_add(&["a=[x],b=[],c=[y,z]".into()]).unwrap(),
            vec![
                ("a".into(), "x".into()),
                ("b".into(), "".into()),
                ("c".into(), "y,z".into())
            ]
        );
        for (bad, why) in [
            (
                "cleanup.policy=[compact,delete",
                "a '[' is not closed by ']'",
            ),
            ("a=x],b=1", "']' at byte 3 closes no '['"),
        ] {
            let e = parse_add(&[bad.into()]).unwrap_err();
            assert!(e.usage);
            assert_eq!(e.message, format!("--add-config {bad:?}: {why}"));
        }
        let e = parse_add(&["a".into()]).unwrap_err();
        assert!(
            e.usage && e.message.starts_with("--add-config \"a\": "),
            "{}",
            e.message
        );
        assert_eq!(
            parse_delete(&["a, b".into(), "c".into()]),
            vec!["a", "b", "c"]
        );
    }
}
