//! `keelctl metadata log|image`.

use clap::Subcommand;
use keel_proto::controller::ReadMetadataLogRequest;

use super::{CliError, CliResult, Ctx};
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
    /// Record type to keep, e.g. PartitionChangeRecord (repeatable).
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
            // With a topic filter, scan from the start so partition states are known.
            let mut offset = if a.topic.is_some() { 0 } else { a.from };
            // Records at or below this offset are already in the seeding snapshot: shown, but
            // not replayed on the tracker again.
            let mut seeded_through = -1;
            let mut first_page = true;
            loop {
                let reply = admin
                    .read_metadata_log(ReadMetadataLogRequest {
                        from_offset: offset,
                        to_offset: a.to.unwrap_or(0),
                        record_types: a.types.clone(),
                        topic_name: a.topic.clone().unwrap_or_default(),
                        max_records: 0,
                        max_wait_ms: if a.follow { 5_000 } else { 0 },
                    })
                    .await?;
                if first_page && a.topic.is_some() && reply.log_start_offset > 1 {
                    // The log was compacted: the topic's PartitionRecords may only be in the
                    // snapshot, so start the partition states from it.
                    if let Some((at, records)) = admin.latest_snapshot().await? {
                        tracker.seed(&records);
                        seeded_through = at;
                    }
                }
                first_page = false;
                let mut text = String::new();
                for r in &reply.records {
                    let line = if r.offset <= seeded_through {
                        log_line(r, &mut PartitionTracker::default())
                    } else {
                        log_line(r, &mut tracker)
                    };
                    if r.offset < a.from || (!show_noop && line.record_type == "NoOpRecord") {
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
                    return Ok(());
                }
                offset = next;
            }
        }
    }
}
