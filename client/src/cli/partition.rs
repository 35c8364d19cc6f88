//! `keelctl partition alter-isr|elect|reassign`.

use clap::Subcommand;
use keel_proto::ErrorCode;
use keel_proto::controller::{ElectPartitionResult, ElectionType};
use serde::Serialize;

use super::{CliError, CliResult, Ctx, parse_broker_ids};
use crate::format::{ids, table_of};

/// `keelctl partition ...`
#[derive(Debug, Subcommand)]
pub enum PartitionCommand {
    /// Set a partition's ISR (operator AlterPartition). With --expected-partition-epoch the
    /// change only applies if the partition epoch still has that value.
    AlterIsr(AlterIsrArgs),
    /// Run a preferred or unclean leader election.
    Elect(ElectArgs),
    /// Move partitions to other brokers (KIP-455; kafka-reassign-partitions): --execute a
    /// plan in Kafka's JSON format, --verify it, --cancel it, or --list the moves in progress.
    Reassign(super::reassign::ReassignArgs),
}

/// Arguments of `partition alter-isr`.
#[derive(Debug, clap::Args)]
pub struct AlterIsrArgs {
    /// Topic name.
    #[arg(long)]
    pub topic: String,
    /// Partition id.
    #[arg(long)]
    pub partition: i32,
    /// The new ISR, comma-separated broker ids; must contain the current leader.
    #[arg(long)]
    pub isr: String,
    /// Compare-and-set guard: fail with INVALID_UPDATE_VERSION unless the partition epoch is
    /// exactly this (see `topic describe`).
    #[arg(long)]
    pub expected_partition_epoch: Option<i32>,
}

/// Arguments of `partition elect`.
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("kind").required(true).args(["preferred", "unclean", "election_type"])))]
#[command(group(clap::ArgGroup::new("target").required(true).args(["topic", "all_topic_partitions"])))]
pub struct ElectArgs {
    /// Topic name.
    #[arg(long)]
    pub topic: Option<String>,
    /// Every partition of every topic (Kafka's `kafka-leader-election --all-topic-partitions`;
    /// `--all` for short); partitions that need no election are not listed.
    #[arg(long, visible_alias = "all")]
    pub all_topic_partitions: bool,
    /// Partition id (repeatable); default: every partition of the topic.
    #[arg(long, requires = "topic")]
    pub partition: Vec<i32>,
    /// Move leadership to the preferred replica (replicas[0]) if it is in the ISR.
    #[arg(long)]
    pub preferred: bool,
    /// Elect a leader for leaderless partitions, from outside the ISR if needed (may lose
    /// acknowledged data).
    #[arg(long)]
    pub unclean: bool,
    /// `preferred` or `unclean`, as kafka-leader-election takes it: the same as --preferred
    /// or --unclean.
    #[arg(long, value_enum, ignore_case = true)]
    pub election_type: Option<ElectionTypeArg>,
}

/// `--election-type` values (kafka-leader-election's `--election-type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ElectionTypeArg {
    /// As --preferred.
    Preferred,
    /// As --unclean.
    Unclean,
}

impl ElectArgs {
    /// The election asked for, by flag or by `--election-type` (pure; clap makes exactly
    /// one of them present).
    fn kind(&self) -> ElectionType {
        if self.unclean || self.election_type == Some(ElectionTypeArg::Unclean) {
            ElectionType::Unclean
        } else {
            ElectionType::Preferred
        }
    }
}

/// Result of `alter-isr`.
#[derive(Debug, Serialize)]
struct AlterIsrOutput {
    topic: String,
    partition: i32,
    leader: i32,
    leader_epoch: i32,
    partition_epoch: i32,
    isr: Vec<i32>,
    new_leader_elected: bool,
}

/// One row of `elect`.
#[derive(Debug, Serialize)]
struct ElectRow {
    topic: String,
    partition: i32,
    error: Option<String>,
    leader: i32,
    leader_epoch: i32,
}

pub(super) async fn run(c: PartitionCommand, ctx: &Ctx) -> CliResult {
    match c {
        PartitionCommand::AlterIsr(a) => alter_isr(a, ctx).await,
        PartitionCommand::Elect(a) => elect(a, ctx).await,
        PartitionCommand::Reassign(a) => super::reassign::run(a, ctx).await,
    }
}

/// `partition alter-isr`: sets the ISR and prints the partition's resulting state.
async fn alter_isr(a: AlterIsrArgs, ctx: &Ctx) -> CliResult {
    let isr = parse_broker_ids("--isr", &a.isr)?;
    let r = ctx
        .admin()?
        .alter_isr(&a.topic, a.partition, &isr, a.expected_partition_epoch)
        .await?;
    let out = AlterIsrOutput {
        topic: a.topic.clone(),
        partition: a.partition,
        leader: r.leader_id,
        leader_epoch: r.leader_epoch,
        partition_epoch: r.partition_epoch,
        isr: r.isr.clone(),
        new_leader_elected: ErrorCode::from_proto(r.error.as_ref())
            == Ok(ErrorCode::NewLeaderElected),
    };
    if ctx.json {
        return ctx.print_json(&out);
    }
    outln!("{}", alter_isr_text(&out));
    Ok(())
}

/// The one-line text output of `alter-isr` (pure, without the newline).
fn alter_isr_text(out: &AlterIsrOutput) -> String {
    format!(
        "{}-{}: Isr: {}  Leader: {}  LeaderEpoch: {}  PartitionEpoch: {}{}",
        out.topic,
        out.partition,
        ids(&out.isr),
        out.leader,
        out.leader_epoch,
        out.partition_epoch,
        if out.new_leader_elected {
            "  (a new leader was elected)"
        } else {
            ""
        }
    )
}

/// `partition elect`: runs the election, prints one row per partition, and fails when the
/// topic was refused, nothing was elected or some partition failed.
async fn elect(a: ElectArgs, ctx: &Ctx) -> CliResult {
    let kind = a.kind();
    let results = ctx
        .admin()?
        .elect_leaders(kind, a.topic.as_deref(), &a.partition)
        .await?;
    if let Some(topic) = &a.topic
        && let Some(refusal) = topic_refusal(topic, &results)
    {
        return Err(refusal);
    }
    let rows: Vec<ElectRow> = results.iter().map(|(t, r)| elect_row(t, r)).collect();
    if ctx.json {
        ctx.print_json(&rows)?;
    } else if rows.is_empty() && a.topic.is_none() {
        outln!("no partition needed an election");
    } else {
        out!("{}", elect_text(&rows));
    }
    elect_outcome(a.topic.as_deref(), &results)
}

/// A topic-level refusal (unknown topic), which comes as one result without a partition, as
/// the error to report (pure).
fn topic_refusal(topic: &str, results: &[(String, ElectPartitionResult)]) -> Option<CliError> {
    let (_, r) = results.iter().find(|(_, r)| r.partition_id < 0)?;
    Some(CliError::new(
        crate::admin::AdminError::Kafka {
            code: ErrorCode::from_proto(r.error.as_ref()).unwrap_or(ErrorCode::UnknownServerError),
            message: r
                .error
                .as_ref()
                .map(|e| e.message.clone())
                .unwrap_or_default(),
            context: format!("topic {topic:?}"),
        }
        .to_string(),
    ))
}

/// One partition's election result as a row: the error code name, none when elected (pure).
fn elect_row(topic: &str, r: &ElectPartitionResult) -> ElectRow {
    ElectRow {
        topic: topic.to_string(),
        partition: r.partition_id,
        error: match ErrorCode::from_proto(r.error.as_ref()) {
            Ok(ErrorCode::None) => None,
            Ok(c) => Some(c.name().to_string()),
            Err(e) => Some(e.to_string()),
        },
        leader: r.leader_id,
        leader_epoch: r.leader_epoch,
    }
}

/// The table of `elect` rows (pure): partition, result (`ELECTED` or the error), leader and
/// leader epoch.
fn elect_text(rows: &[ElectRow]) -> String {
    table_of(
        &["PARTITION", "RESULT", "LEADER", "LEADER_EPOCH"],
        rows,
        |r| {
            vec![
                format!("{}-{}", r.topic, r.partition),
                r.error.clone().unwrap_or_else(|| "ELECTED".into()),
                r.leader.to_string(),
                r.leader_epoch.to_string(),
            ]
        },
    )
}

/// The exit status of `elect` (pure): an error when no partition was elected or some
/// partition failed. ELECTION_NOT_NEEDED is an answer, not a failure (Kafka's tool reports
/// it too).
fn elect_outcome(topic: Option<&str>, results: &[(String, ElectPartitionResult)]) -> CliResult {
    let failed: Vec<String> = results
        .iter()
        .filter(|(_, r)| {
            !matches!(
                ErrorCode::from_proto(r.error.as_ref()),
                Ok(ErrorCode::None | ErrorCode::ElectionNotNeeded)
            )
        })
        .map(|(t, r)| {
            format!(
                "{t}-{}: {}",
                r.partition_id,
                r.error
                    .as_ref()
                    .map(ToString::to_string)
                    .unwrap_or_default()
            )
        })
        .collect();
    if let Some(topic) = topic
        && results.is_empty()
    {
        return Err(CliError::new(format!(
            "no partition of topic {topic:?} was elected"
        )));
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(CliError::new(format!(
            "election failed for {}",
            failed.join("; ")
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn elect_args(args: &[&str]) -> Result<ElectArgs, clap::Error> {
        let mut argv = vec!["keelctl", "partition", "elect"];
        argv.extend(args);
        match crate::cli::Cli::try_parse_from(argv)?.command {
            crate::cli::Command::Partition(PartitionCommand::Elect(a)) => Ok(a),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn elect_takes_kafka_leader_elections_flags() {
        let a = elect_args(&["--all", "--election-type", "preferred"]).unwrap();
        assert!(a.all_topic_partitions);
        assert_eq!(a.kind(), ElectionType::Preferred);
        let a = elect_args(&["--topic", "t", "--election-type", "UNCLEAN"]).unwrap();
        assert_eq!(
            (a.topic.as_deref(), a.kind()),
            (Some("t"), ElectionType::Unclean)
        );
        let a = elect_args(&["--all-topic-partitions", "--unclean"]).unwrap();
        assert_eq!(a.kind(), ElectionType::Unclean);
        assert_eq!(
            elect_args(&["--all", "--preferred"]).unwrap().kind(),
            ElectionType::Preferred
        );
        for bad in [
            &["--all"][..],
            &["--all", "--preferred", "--election-type", "unclean"][..],
            &["--all", "--election-type", "bogus"][..],
            &["--election-type", "preferred"][..],
        ] {
            assert!(elect_args(bad).is_err(), "{bad:?}");
        }
    }
}
