//! `keelctl metadata log|image`.

use clap::Subcommand;
use keel_proto::ErrorCode;
use keel_proto::controller::ReadMetadataLogRequest;

use super::{CliError, CliResult, Ctx};
use crate::admin::AdminError;
use crate::format::image::{image_json, image_tree, render};
use crate::format::log::{PartitionTracker, line_text, log_line};

/// `keelctl metadata ...`
#[derive(Debug, Subcommand)]
pub enum MetadataCommand {
    /// Decoded metadata records, one per line: OFFSET#INDEX, term, append time, type, fields,
    /// and for partition records the resulting leader, epochs and ISR.
    Log(LogArgs),
    /// The current metadata image as a tree (brokers, topics, partitions, configs).
    Image,
}

/// Arguments of `metadata log`.
#[derive(Debug, clap::Args)]
pub struct LogArgs {
    /// First offset (inclusive); default: the log start.
    #[arg(long, default_value_t = 0)]
    pub from: i64,
    /// End offset (exclusive); default: the commit index (or forever with --follow).
    #[arg(long)]
    pub to: Option<i64>,
    /// Record type to keep, e.g. PartitionChangeRecord (repeatable). With
    /// PartitionChangeRecord the log is scanned from its start so every change shows the
    /// state it leads to.
    #[arg(long = "type")]
    pub types: Vec<String>,
    /// Only records about this topic (its TopicRecord, partitions, configs, removal). The
    /// log is then scanned from its start so every partition change shows its epochs.
    #[arg(long)]
    pub topic: Option<String>,
    /// Keep waiting for new records.
    #[arg(long)]
    pub follow: bool,
    /// Also show the NoOpRecords the active controller writes every 500 ms.
    #[arg(long)]
    pub include_noop: bool,
}

/// The record type whose derived partition state `metadata log` prints.
const PARTITION_CHANGE: &str = "PartitionChangeRecord";
/// The records that derived state needs: a partition's creation, its changes, and the topic's
/// creation and removal (ids are reused by nothing, but a removed topic's partitions go).
const PARTITION_HISTORY: [&str; 4] = [
    "TopicRecord",
    "PartitionRecord",
    "PartitionChangeRecord",
    "RemoveTopicRecord",
];

pub(super) async fn run(c: MetadataCommand, ctx: &Ctx) -> CliResult {
    let admin = ctx.admin()?;
    match c {
        MetadataCommand::Image => {
            let image = admin.metadata_image().await?;
            if ctx.json {
                return ctx.print_json(&image_json(&image));
            }
            out!("{}", render(&image_tree(&image)));
            Ok(())
        }
        MetadataCommand::Log(a) => {
            if a.from < 0 {
                return Err(CliError(format!("--from {} must be >= 0", a.from)));
            }
            if let Some(to) = a.to
                && to <= a.from
            {
                return Err(CliError(format!(
                    "--to {to} must be greater than --from {}",
                    a.from
                )));
            }
            let show_noop = a.include_noop || a.types.iter().any(|t| t == "NoOpRecord");
            let mut tracker = PartitionTracker::default();
            // The `=> leader=.. leader_epoch=..` state of a PartitionChangeRecord is derived
            // from every earlier partition record. With a type filter that keeps partition
            // changes, read those records too (shown only if asked for) and, as with a topic
            // filter, scan from the start.
            let shown_types = a.types.clone();
            let mut read_types = a.types.clone();
            let derive_states = shown_types.iter().any(|t| t == PARTITION_CHANGE);
            if derive_states {
                for t in PARTITION_HISTORY {
                    if !read_types.iter().any(|r| r == t) {
                        read_types.push(t.to_string());
                    }
                }
            }
            let from_start = a.topic.is_some() || derive_states;
            let mut offset = if from_start { 0 } else { a.from };
            // Records at or below this offset are already in the seeding snapshot: shown, but
            // not replayed on the tracker again.
            let mut seeded_through = -1;
            let mut first_page = true;
            let mut matched = 0usize;
            loop {
                let reply = admin
                    .read_metadata_log(ReadMetadataLogRequest {
                        from_offset: offset,
                        to_offset: a.to.unwrap_or(0),
                        record_types: read_types.clone(),
                        topic_name: a.topic.clone().unwrap_or_default(),
                        max_records: 0,
                        max_wait_ms: if a.follow { 5_000 } else { 0 },
                    })
                    .await?;
                if first_page && from_start && reply.log_start_offset > 1 {
                    // The log was compacted: the topic's PartitionRecords may only be in the
                    // snapshot, so start the partition states from it.
                    if let Some((at, records)) = admin.latest_snapshot().await? {
                        tracker.seed(&records);
                        seeded_through = at;
                    }
                }
                first_page = false;
                let mut text = String::new();
                matched += reply.records.len();
                for r in &reply.records {
                    let line = if r.offset <= seeded_through {
                        log_line(r, &mut PartitionTracker::default())
                    } else {
                        log_line(r, &mut tracker)
                    };
                    if r.offset < a.from
                        || (!show_noop && line.record_type == "NoOpRecord")
                        || (!shown_types.is_empty() && !shown_types.contains(&line.record_type))
                    {
                        continue;
                    }
                    if ctx.json {
                        text.push_str(&serde_json::to_string(&line)?);
                    } else {
                        text.push_str(&line_text(&line));
                    }
                    text.push('\n');
                }
                out!("{text}");
                let next = reply.next_offset.max(offset);
                let reached_to = a.to.is_some_and(|to| next >= to);
                let caught_up = next > reply.commit_index;
                if reached_to || (caught_up && !a.follow) {
                    if let Some(topic) = &a.topic
                        && matched == 0
                        && admin
                            .metadata_image()
                            .await?
                            .topics()
                            .get_by_name(topic)
                            .is_none()
                    {
                        // Nothing in the log names it and it does not exist: most likely a
                        // typo (every other command reports the same).
                        return Err(CliError(
                            AdminError::Kafka {
                                code: ErrorCode::UnknownTopicOrPartition,
                                message: "no such topic, and no record about it in the log".into(),
                                context: format!("topic {topic:?}"),
                            }
                            .to_string(),
                        ));
                    }
                    return Ok(());
                }
                offset = next;
            }
        }
    }
}
