//! `keelctl group list|describe|reset-offsets|delete`: Kafka's `kafka-consumer-groups` over
//! Keel's broker API ([`crate::groups::GroupAdmin`]).

use std::collections::BTreeMap;

use clap::Subcommand;
use keel_proto::ErrorCode;
use serde::Serialize;

use super::{CliError, CliResult, Ctx};
use crate::consumer::assignor::decode_assignment;
use crate::consumer::{Consumer, SeekTo};
use crate::format::table_of;
use crate::groups::{GroupAdmin, GroupError};

/// Kafka's classic group states (`--state` values, compared case-insensitively).
const STATES: &[&str] = &[
    "Empty",
    "PreparingRebalance",
    "CompletingRebalance",
    "Stable",
];

/// `keelctl group ...`
#[derive(Debug, Subcommand)]
pub enum GroupCommand {
    /// List consumer groups of every broker (like `kafka-consumer-groups --list --state`).
    List {
        /// Only groups in these states (Empty, PreparingRebalance, CompletingRebalance,
        /// Stable), comma separated.
        #[arg(long, value_delimiter = ',')]
        state: Vec<String>,
    },
    /// A group's state, members and, per partition, committed offset, log end offset and
    /// lag (like `kafka-consumer-groups --describe`).
    Describe {
        /// Group id.
        group: String,
    },
    /// Reset a group's committed offsets (like `kafka-consumer-groups --reset-offsets`).
    /// Prints the plan; commits it only with --execute, and only while the group has no
    /// members (Kafka refuses to reset an active group).
    ResetOffsets(ResetArgs),
    /// Delete a group without members, with its committed offsets.
    Delete {
        /// Group id.
        group: String,
    },
}

/// Arguments of `group reset-offsets`.
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("to").required(true)))]
pub struct ResetArgs {
    /// Group id.
    pub group: String,
    /// Topic whose partitions are reset.
    #[arg(long)]
    pub topic: String,
    /// Only this partition (default: every partition of the topic).
    #[arg(long)]
    pub partition: Option<i32>,
    /// To the log start offset.
    #[arg(long, group = "to")]
    pub to_earliest: bool,
    /// To the high watermark (the end).
    #[arg(long, group = "to")]
    pub to_latest: bool,
    /// To this offset, clamped to [log start, high watermark] as Kafka's tool does.
    #[arg(long, group = "to")]
    pub to_offset: Option<i64>,
    /// To the first record at or after this time (RFC 3339, e.g.
    /// `2026-12-02T10:00:00Z`); the end if none is that new.
    #[arg(long, group = "to")]
    pub to_datetime: Option<String>,
    /// Commit the plan (without it, only print it, as Kafka's `--dry-run`).
    #[arg(long)]
    pub execute: bool,
}

/// One row of `group describe`.
#[derive(Debug, Serialize)]
struct OffsetRow {
    topic: String,
    partition: i32,
    /// -1 = none committed.
    current_offset: i64,
    /// -1 = unknown.
    log_end_offset: i64,
    /// The log end offset minus the committed offset (Kafka `ConsumerGroupCommand.getLag`):
    /// negative for a commit above the log end (offsets are not checked against it when
    /// committed, nor after a DeleteRecords or truncation); `null` when either is unknown.
    lag: Option<i64>,
    consumer_id: String,
    host: String,
    client_id: String,
}

/// `group describe` as JSON.
#[derive(Debug, Serialize)]
struct Description {
    group: String,
    state: String,
    coordinator: i32,
    protocol_type: String,
    protocol: String,
    members: usize,
    partitions: Vec<OffsetRow>,
}

/// `e` after what keelctl was doing (`delete group g: GROUP_ID_NOT_FOUND (69): ...`), the
/// form of keelctl's other errors.
fn group_error(what: impl std::fmt::Display) -> impl FnOnce(GroupError) -> CliError {
    move |e| CliError::new(format!("{what}: {e}"))
}

/// Runs a `group` command.
pub async fn run(command: GroupCommand, ctx: &Ctx) -> CliResult {
    let addresses = ctx.broker_addresses().await;
    if addresses.is_empty() {
        return Err(CliError::new(
            "no broker address: give --bootstrap-brokers or reach a controller",
        ));
    }
    let admin = GroupAdmin::new(addresses.clone(), ctx.request_timeout, ctx.api_timeout)
        .with_dialer(ctx.dialer.clone());
    match command {
        GroupCommand::List { state } => {
            if let Some(bad) = state
                .iter()
                .find(|s| !STATES.iter().any(|k| k.eq_ignore_ascii_case(s)))
            {
                return Err(CliError::usage(format!(
                    "--state {bad:?} is not a group state; valid: {}",
                    STATES.join(", ")
                )));
            }
            let (groups, missing) = admin
                .list(&state)
                .await
                .map_err(group_error("list groups"))?;
            for m in &missing {
                eprintln!("keelctl: warning: groups of a broker are missing: {m}");
            }
            if ctx.json {
                let rows: Vec<_> = groups
                    .iter()
                    .map(|g| {
                        serde_json::json!({
                            "group": g.group_id,
                            "state": g.state,
                            "protocol_type": g.protocol_type,
                        })
                    })
                    .collect();
                return ctx.print_json(&rows);
            }
            out!(
                "{}",
                table_of(&["GROUP", "STATE", "PROTOCOL-TYPE"], &groups, |g| vec![
                    g.group_id.clone(),
                    g.state.clone(),
                    g.protocol_type.clone(),
                ])
            );
            Ok(())
        }
        GroupCommand::Describe { group } => describe(&admin, &addresses, &group, ctx).await,
        GroupCommand::ResetOffsets(a) => reset(&admin, &addresses, a, ctx).await,
        GroupCommand::Delete { group } => {
            admin.delete(&group).await.map_err(|e| match &e {
                GroupError::Refused {
                    code: ErrorCode::NonEmptyGroup,
                    ..
                } => CliError::new(format!(
                    "group {group} has members: stop its consumers first ({e})"
                )),
                _ => group_error(format!("delete group {group}"))(e),
            })?;
            if ctx.json {
                ctx.print_json(&serde_json::json!({ "deleted": group }))
            } else {
                outln!("Deleted group {group}");
                Ok(())
            }
        }
    }
}

fn consumer(addresses: &[String], ctx: &Ctx) -> Result<Consumer, CliError> {
    let mut cfg = ctx.consumer_config(addresses.to_vec());
    cfg.request_timeout_ms = ctx.request_timeout.as_millis() as u64;
    cfg.default_api_timeout_ms = ctx.api_timeout.as_millis() as u64;
    Ok(Consumer::new(cfg)?)
}

async fn describe(admin: &GroupAdmin, addresses: &[String], group: &str, ctx: &Ctx) -> CliResult {
    let what = format!("describe group {group}");
    let (d, coordinator) = admin.describe(group).await.map_err(group_error(&what))?;
    let committed = admin.offsets(group).await.map_err(group_error(&what))?;
    if d.state == "Dead" && committed.is_empty() {
        // Kafka 4's kafka-consumer-groups fails the same way (DescribeGroups v6 answers
        // GROUP_ID_NOT_FOUND for an unknown group, KIP-1043) instead of describing a Dead one.
        return Err(CliError::new(format!(
            "{what}: {} ({}): consumer group '{group}' does not exist",
            ErrorCode::GroupIdNotFound,
            ErrorCode::GroupIdNotFound.code()
        )));
    }
    // (topic, partition) -> (committed, member id, host, client id)
    let mut rows: BTreeMap<(String, i32), (i64, String, String, String)> = BTreeMap::new();
    for o in committed {
        rows.insert(
            (o.topic, o.partition),
            (o.offset, "-".into(), "-".into(), "-".into()),
        );
    }
    for m in &d.members {
        for (topic, parts) in decode_assignment(&m.assignment).unwrap_or_default() {
            for p in parts {
                let row = rows.entry((topic.clone(), p)).or_insert((
                    -1,
                    String::new(),
                    String::new(),
                    String::new(),
                ));
                row.1 = m.member_id.clone();
                row.2 = m.client_host.clone();
                row.3 = m.client_id.clone();
            }
        }
    }
    let c = consumer(addresses, ctx)?;
    let mut out = Vec::with_capacity(rows.len());
    for ((topic, partition), (current, member, host, client)) in rows {
        let end = c
            .end_offset(&(topic.clone(), partition))
            .await
            .unwrap_or(-1);
        let lag = lag(current, end);
        out.push(OffsetRow {
            topic,
            partition,
            current_offset: current,
            log_end_offset: end,
            lag,
            consumer_id: member,
            host,
            client_id: client,
        });
    }
    let desc = Description {
        group: group.to_string(),
        state: d.state.clone(),
        coordinator,
        protocol_type: d.protocol_type.clone(),
        protocol: d.protocol.clone(),
        members: d.members.len(),
        partitions: out,
    };
    if ctx.json {
        return ctx.print_json(&desc);
    }
    outln!(
        "Group {group}: state {}, coordinator broker {coordinator}, {} member(s){}",
        desc.state,
        desc.members,
        if desc.protocol.is_empty() {
            String::new()
        } else {
            format!(", assignor {}", desc.protocol)
        }
    );
    let dash = |n: i64| {
        if n < 0 {
            "-".to_string()
        } else {
            n.to_string()
        }
    };
    out!(
        "{}",
        table_of(
            &[
                "TOPIC",
                "PARTITION",
                "CURRENT-OFFSET",
                "LOG-END-OFFSET",
                "LAG",
                "CONSUMER-ID",
                "HOST",
                "CLIENT-ID"
            ],
            &desc.partitions,
            |r| vec![
                r.topic.clone(),
                r.partition.to_string(),
                dash(r.current_offset),
                dash(r.log_end_offset),
                r.lag.map_or_else(|| "-".to_string(), |l| l.to_string()),
                r.consumer_id.clone(),
                r.host.clone(),
                r.client_id.clone(),
            ]
        )
    );
    Ok(())
}

async fn reset(admin: &GroupAdmin, addresses: &[String], a: ResetArgs, ctx: &Ctx) -> CliResult {
    let to = if a.to_earliest {
        SeekTo::Earliest
    } else if a.to_latest {
        SeekTo::Latest
    } else if let Some(o) = a.to_offset {
        SeekTo::Offset(o)
    } else if let Some(t) = &a.to_datetime {
        let ts = chrono::DateTime::parse_from_rfc3339(t).map_err(|e| {
            CliError::usage(format!(
                "--to-datetime {t:?}: {e} (RFC 3339, e.g. 2026-12-02T10:00:00Z)"
            ))
        })?;
        SeekTo::Timestamp(ts.timestamp_millis())
    } else {
        return Err(CliError::usage(
            "one of --to-earliest, --to-latest, --to-offset, --to-datetime is required",
        ));
    };
    let (d, _) = admin
        .describe(&a.group)
        .await
        .map_err(group_error(format!("describe group {}", a.group)))?;
    if !d.members.is_empty() {
        return Err(CliError::new(format!(
            "Assignments can only be reset if the group '{}' is inactive, but the current \
             state is {} ({} member(s))",
            a.group,
            d.state,
            d.members.len()
        )));
    }
    let mut c = consumer(addresses, ctx)?;
    let partitions: Vec<i32> = match a.partition {
        Some(p) => vec![p],
        None => {
            let meta = ctx.brokers(addresses.to_vec()).topic(&a.topic).await?;
            (0..meta.partitions.len() as i32).collect()
        }
    };
    c.assign(partitions.iter().map(|p| (a.topic.clone(), *p)));
    let mut plan = Vec::with_capacity(partitions.len());
    for p in partitions {
        let tp = (a.topic.clone(), p);
        let target = match to {
            SeekTo::Offset(o) => {
                let start = c.beginning_offset(&tp).await?;
                let end = c.end_offset(&tp).await?.max(start);
                let target = o.clamp(start, end);
                if target != o {
                    // Kafka's tool warns the same way and uses the bound.
                    eprintln!(
                        "keelctl: warning: new offset ({o}) of {}-{p} is outside [{start}, \
                         {end}] (log start, high watermark); it will be set to {target}",
                        a.topic
                    );
                }
                target
            }
            other => c.seek(&tp, other).await?,
        };
        plan.push((a.topic.clone(), p, target));
    }
    if a.execute {
        admin.reset(&a.group, &plan).await.map_err(|e| match &e {
            GroupError::Refused {
                code: ErrorCode::UnknownMemberId,
                ..
            } => CliError::new(format!(
                "group {} became active: stop its consumers and retry ({e})",
                a.group
            )),
            _ => group_error(format!("reset the offsets of group {}", a.group))(e),
        })?;
    }
    if ctx.json {
        let rows: Vec<_> = plan
            .iter()
            .map(|(t, p, o)| serde_json::json!({"topic": t, "partition": p, "new_offset": o}))
            .collect();
        return ctx.print_json(&serde_json::json!({
            "group": a.group,
            "executed": a.execute,
            "offsets": rows,
        }));
    }
    out!(
        "{}",
        table_of(
            &["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
            &plan,
            |(t, p, o)| vec![a.group.clone(), t.clone(), p.to_string(), o.to_string(),]
        )
    );
    if !a.execute {
        outln!("(dry run: nothing committed; add --execute to commit these offsets)");
    }
    Ok(())
}

/// A partition's lag in `group describe`: `log_end_offset - committed`, negative when the
/// commit is above the log end, as Kafka's `ConsumerGroupCommand.getLag`; `None` when either
/// offset is unknown (-1: nothing committed, or the end offset could not be read).
fn lag(committed: i64, log_end_offset: i64) -> Option<i64> {
    (committed >= 0 && log_end_offset >= 0).then(|| log_end_offset - committed)
}

#[cfg(test)]
mod tests {
    use super::lag;

    #[test]
    fn lag_is_the_end_minus_the_commit_negative_above_the_end_and_unknown_without_either() {
        assert_eq!(lag(7, 10), Some(3));
        assert_eq!(lag(10, 10), Some(0));
        // A commit of 3 on an empty log (the trial's row): Kafka prints -3, not 0.
        assert_eq!(lag(3, 0), Some(-3));
        assert_eq!(lag(-1, 10), None, "nothing committed");
        assert_eq!(lag(5, -1), None, "end offset unknown");
    }
}
