//! `keelctl metadata log|image`.

use clap::Subcommand;
use keel_proto::ErrorCode;
use keel_proto::controller::{MetadataLogRecord, ReadMetadataLogRequest};

use super::{CliError, CliResult, Ctx};
use crate::admin::{Admin, AdminError};
use crate::format::image::{ImageFilter, image_json, image_tree, render};
use crate::format::log::{PartitionTracker, line_text, log_line};
use crate::metadata_dump;

/// `keelctl metadata ...`
#[derive(Debug, Subcommand)]
pub enum MetadataCommand {
    /// Decoded metadata records, one per line: OFFSET#INDEX, term, append time, type, fields,
    /// and for partition records the resulting leader, epochs and ISR.
    Log(LogArgs),
    /// The current metadata image as a tree (brokers, topics, partitions, configs).
    Image(ImageArgs),
    /// Read a controller's metadata log directory offline, without any controller running
    /// (like kafka-dump-log --cluster-metadata-decoder and kafka-metadata-shell --snapshot):
    /// the Raft meta (node id, vote, committed and purged offsets), the snapshot files, and
    /// every entry of the Raft log segments with its records decoded as `metadata log`
    /// prints them. Reads only: safe on a stopped controller and on a running one. Exits 1
    /// when a file is damaged where the controller would refuse to start.
    Dump(DumpArgs),
}

/// Arguments of `metadata dump`.
#[derive(Debug, clap::Args)]
pub struct DumpArgs {
    /// A controller's metadata_log_dir (holding raft/ and snapshots/), one of those two
    /// directories, a Raft log segment (.log) or a snapshot file (.snap, whose records are
    /// printed).
    #[arg(long, value_name = "PATH")]
    pub dir: std::path::PathBuf,
    /// First offset printed (inclusive).
    #[arg(long, default_value_t = 0)]
    pub from: u64,
    /// End offset (exclusive); default: the end of the log.
    #[arg(long)]
    pub to: Option<u64>,
    /// Record type to print (repeatable); other records and control entries are not.
    #[arg(long = "type", value_parser = clap::builder::PossibleValuesParser::new(keel_metadata_log::RECORD_TYPE_NAMES))]
    pub types: Vec<String>,
    /// Only records about this topic (deleted topics included).
    #[arg(long)]
    pub topic: Option<String>,
    /// Also print the NoOpRecords the active controller writes every 500 ms.
    #[arg(long)]
    pub include_noop: bool,
}

/// Arguments of `metadata image`.
#[derive(Debug, clap::Args)]
pub struct ImageArgs {
    /// Only this topic and its configs (repeatable).
    #[arg(long = "topic", value_name = "NAME")]
    pub topics: Vec<String>,
    /// Only this broker, its configs and the partitions it holds a replica of.
    #[arg(long, value_name = "ID")]
    pub broker: Option<i32>,
}

/// Arguments of `metadata log`.
#[derive(Debug, clap::Args)]
pub struct LogArgs {
    /// First offset (inclusive); default: the log start.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub from: i64,
    /// End offset (exclusive); default: the commit index (or forever with --follow).
    #[arg(long, allow_negative_numbers = true)]
    pub to: Option<i64>,
    /// Record type to keep, e.g. PartitionChangeRecord (repeatable). With
    /// PartitionChangeRecord the log is scanned from its start so every change shows the
    /// state it leads to.
    #[arg(long = "type", value_parser = clap::builder::PossibleValuesParser::new(keel_metadata_log::RECORD_TYPE_NAMES))]
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
    if let MetadataCommand::Dump(a) = c {
        return dump(a, ctx);
    }
    let admin = ctx.admin()?;
    match c {
        MetadataCommand::Dump(_) => unreachable!("handled above: needs no controller"),
        MetadataCommand::Image(a) => {
            let image = admin.metadata_image().await?;
            // A filter naming nothing that exists is an error, as `topic describe` has it.
            if let Some(t) = a
                .topics
                .iter()
                .find(|t| image.topics().get_by_name(t).is_none())
            {
                return Err(CliError::new(
                    AdminError::Kafka {
                        code: ErrorCode::UnknownTopicOrPartition,
                        message: "no such topic".into(),
                        context: format!("topic {t:?}"),
                    }
                    .to_string(),
                ));
            }
            if let Some(b) = a.broker.filter(|b| image.broker(*b).is_none()) {
                return Err(CliError::new(format!(
                    "broker {b}: not registered (keelctl broker list shows the brokers)"
                )));
            }
            let filter = ImageFilter {
                topics: a.topics,
                broker: a.broker,
            };
            if ctx.json {
                return ctx.print_json(&image_json(&image, &filter));
            }
            out!("{}", render(&image_tree(&image, &filter)));
            Ok(())
        }
        MetadataCommand::Log(a) => log(a, ctx, &admin).await,
    }
}

/// What `metadata log` reads from the controller and which of it it shows.
#[derive(Debug)]
struct LogPlan {
    /// First offset shown.
    from: i64,
    /// Record types shown; empty = all.
    shown_types: Vec<String>,
    /// Record types read: the shown ones, plus the partition history derived states need.
    read_types: Vec<String>,
    /// Whether NoOpRecords are shown.
    show_noop: bool,
    /// Whether the log is scanned from its start (for derived partition states).
    from_start: bool,
}

impl LogPlan {
    /// The plan for `a` (pure). The `=> leader=.. leader_epoch=..` state of a
    /// PartitionChangeRecord is derived from every earlier partition record. With a type
    /// filter that keeps partition changes, read those records too (shown only if asked for)
    /// and, as with a topic filter or a `--from` after the log start, scan from the start.
    fn new(a: &LogArgs) -> LogPlan {
        let mut read_types = a.types.clone();
        let derive_states = a.types.iter().any(|t| t == PARTITION_CHANGE);
        // Topic names of deleted topics come from their TopicRecords (few: read them too).
        if !read_types.is_empty() && !read_types.iter().any(|t| t == "TopicRecord") {
            read_types.push("TopicRecord".to_string());
        }
        if derive_states {
            for t in PARTITION_HISTORY {
                if !read_types.iter().any(|r| r == t) {
                    read_types.push(t.to_string());
                }
            }
        }
        LogPlan {
            from: a.from,
            shown_types: a.types.clone(),
            read_types,
            show_noop: a.include_noop || a.types.iter().any(|t| t == "NoOpRecord"),
            // Starting mid-log (`--from`) still shows every partition record's resulting
            // state: the records before it are read (not shown) to derive it.
            from_start: a.topic.is_some() || derive_states || a.from > 0,
        }
    }

    /// Whether a record at `offset` of type `record_type` is printed.
    fn shows(&self, offset: i64, record_type: &str) -> bool {
        !(offset < self.from
            || (!self.show_noop && record_type == "NoOpRecord")
            || (!self.shown_types.is_empty() && !self.shown_types.iter().any(|t| t == record_type)))
    }
}

/// `metadata log`: prints the decoded records of the range page by page, and with
/// `--follow` keeps waiting for new ones. Fails on a bad range or an unknown topic that no
/// record names.
async fn log(a: LogArgs, ctx: &Ctx, admin: &Admin) -> CliResult {
    check_range(a.from, a.to)?;
    check_topic_filter(a.topic.as_deref())?;
    let plan = LogPlan::new(&a);
    let mut tracker = PartitionTracker::default();
    let mut offset = if plan.from_start { 0 } else { a.from };
    // Records at or below this offset are already in the seeding snapshot: shown, but
    // not replayed on the tracker again.
    let mut seeded_through = -1;
    let mut first_page = true;
    let mut matched = 0usize;
    let mut quorum_watch = QuorumWatch::default();
    loop {
        let reply = admin
            .read_metadata_log(ReadMetadataLogRequest {
                from_offset: offset,
                to_offset: a.to.unwrap_or(0),
                record_types: plan.read_types.clone(),
                topic_name: a.topic.clone().unwrap_or_default(),
                max_records: 0,
                max_wait_ms: if a.follow { 5_000 } else { 0 },
            })
            .await?;
        if first_page
            && let Some(text) = compacted_range_warning(a.from, a.to, reply.log_start_offset)
        {
            tracing::warn!("{text}");
        }
        if first_page && plan.from_start && reply.log_start_offset > 1 {
            // The log was compacted: the topic's PartitionRecords may only be in the
            // snapshot, so start the partition states from it.
            if let Some((at, records)) = admin.latest_snapshot().await? {
                tracker.seed(&records);
                seeded_through = at;
            }
        }
        first_page = false;
        if a.follow {
            quorum_watch.observe(reply.leader.as_ref().map_or(-1, |l| l.leader_id));
        }
        matched += reply.records.len();
        let text = page_text(
            &reply.records,
            &plan,
            &mut tracker,
            seeded_through,
            ctx.json,
        )?;
        out!("{text}");
        let next = reply.next_offset.max(offset);
        let reached_to = a.to.is_some_and(|to| next >= to);
        let caught_up = next > reply.commit_index;
        if reached_to || (caught_up && !a.follow) {
            if a.from > reply.commit_index {
                tracing::warn!(
                    "--from {} is past the end of the metadata log (last committed offset {}): \
                     nothing to show",
                    a.from,
                    reply.commit_index
                );
            }
            return match &a.topic {
                Some(topic) if matched == 0 => check_topic_exists(admin, topic).await,
                _ => Ok(()),
            };
        }
        offset = next;
    }
}

/// The warning for a `--from`/`--to` range that reaches below `log_start` (those records
/// were compacted into the snapshot ending at `log_start - 1`), `None` when it does not
/// (pure). `from` 0 means "from the log start" and is never warned about.
fn compacted_range_warning(from: i64, to: Option<i64>, log_start: i64) -> Option<String> {
    let asked_below = (from > 0 && from < log_start) || to.is_some_and(|t| t <= log_start);
    (log_start > 1 && asked_below).then(|| {
        format!(
            "offsets below {log_start} were compacted into the snapshot ending at offset {} \
             and are not in the log{}: `keelctl metadata image` shows the state there, \
             `keelctl metadata dump --dir` reads a stopped controller's snapshot",
            log_start - 1,
            if to.is_some_and(|t| t <= log_start) {
                " (nothing of the range is left to show)"
            } else {
                ""
            }
        )
    })
}

/// Tells a `--follow` reader when the quorum has no active controller (nothing new can be
/// committed, so nothing is printed) and when it has one again: one warning per change.
#[derive(Debug, Default)]
struct QuorumWatch {
    /// Whether the last reply said the quorum had no leader.
    leaderless: bool,
}

impl QuorumWatch {
    /// Feeds the leader id of a reply (-1 = none known); warns on a change.
    fn observe(&mut self, leader_id: i32) {
        if let Some(text) = self.change(leader_id) {
            tracing::warn!("{text}");
        }
    }

    /// The warning for a reply with `leader_id`, if the state changed (pure).
    fn change(&mut self, leader_id: i32) -> Option<String> {
        match (self.leaderless, leader_id < 0) {
            (false, true) => {
                self.leaderless = true;
                Some(
                    "the controller quorum has no active controller (an election, or fewer \
                     than a majority of controllers running): nothing new is committed until \
                     one is elected; waiting"
                        .to_string(),
                )
            }
            (true, false) => {
                self.leaderless = false;
                Some(format!(
                    "controller {leader_id} is the active controller again; following"
                ))
            }
            _ => None,
        }
    }
}

/// Checks `--from` and `--to` (pure): from >= 0, and to (exclusive) beyond from.
fn check_range(from: i64, to: Option<i64>) -> CliResult {
    if from < 0 {
        return Err(CliError::usage(format!("--from {from} must be >= 0")));
    }
    if let Some(to) = to
        && to <= from
    {
        return Err(CliError::usage(format!(
            "--to {to} (exclusive) must be greater than --from {from}"
        )));
    }
    Ok(())
}

/// Checks `--topic` (pure): an empty name would match nothing, or, sent as the request's
/// empty topic filter, everything.
fn check_topic_filter(topic: Option<&str>) -> CliResult {
    match topic {
        Some(t) if t.trim().is_empty() => Err(CliError::usage(
            "--topic: empty topic name (omit --topic for every record)",
        )),
        _ => Ok(()),
    }
}

/// The lines `plan` shows of one page of records (text or JSON, each ending in `\n`),
/// feeding every record after `seeded_through` to `tracker`. Errors: JSON serialization.
fn page_text(
    records: &[MetadataLogRecord],
    plan: &LogPlan,
    tracker: &mut PartitionTracker,
    seeded_through: i64,
    json: bool,
) -> Result<String, CliError> {
    let mut text = String::new();
    for r in records {
        let line = if r.offset <= seeded_through {
            log_line(r, &mut tracker.names_only())
        } else {
            log_line(r, tracker)
        };
        if !plan.shows(r.offset, &line.record_type) {
            continue;
        }
        if json {
            text.push_str(&serde_json::to_string(&line)?);
        } else {
            text.push_str(&line_text(&line));
        }
        text.push('\n');
    }
    Ok(text)
}

/// Fails when `topic`, which no record of the log names, does not exist either: most likely
/// a typo (every other command reports the same).
async fn check_topic_exists(admin: &Admin, topic: &str) -> CliResult {
    if admin
        .metadata_image()
        .await?
        .topics()
        .get_by_name(topic)
        .is_some()
    {
        return Ok(());
    }
    Err(CliError::new(
        AdminError::Kafka {
            code: ErrorCode::UnknownTopicOrPartition,
            message: "no such topic, and no record about it in the log".into(),
            context: format!("topic {topic:?}"),
        }
        .to_string(),
    ))
}

/// Output of `metadata dump`: lines on stdout, warnings on stderr (`keelctl: warning: ...`).
struct StdSink;

impl metadata_dump::Sink for StdSink {
    fn line(&mut self, text: String) {
        outln!("{text}");
    }

    fn warn(&mut self, text: String) {
        tracing::warn!("{text}");
    }
}

/// `metadata dump`: reads the directory offline; fails on a damaged file.
fn dump(a: DumpArgs, ctx: &Ctx) -> CliResult {
    if let Some(to) = a.to
        && to <= a.from
    {
        return Err(CliError::usage(format!(
            "--to {to} (exclusive) must be greater than --from {}",
            a.from
        )));
    }
    check_topic_filter(a.topic.as_deref())?;
    let target = metadata_dump::resolve(&a.dir).map_err(CliError::usage)?;
    let filter = metadata_dump::Filter {
        from: a.from,
        to: a.to,
        types: a.types,
        topic: a.topic,
        include_noop: a.include_noop,
    };
    let summary =
        metadata_dump::dump(&target, &filter, ctx.json, &mut StdSink).map_err(CliError::new)?;
    if !ctx.json {
        outln!("{}", metadata_dump::summary_line(&summary));
    }
    if let Some(topic) = &filter.topic
        && summary.shown == 0
    {
        tracing::warn!(
            "no record in these files is about topic {topic:?} (a topic only in a snapshot has \
             no log records: `--dir` on the snapshot file prints its records)"
        );
    }
    if summary.damaged > 0 {
        return Err(CliError::new(format!(
            "{} problem(s), see above: a controller would refuse to start on this directory",
            summary.damaged
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn log_args(args: &[&str]) -> Result<LogArgs, clap::Error> {
        let mut argv = vec!["keelctl", "metadata", "log"];
        argv.extend(args);
        match crate::cli::Cli::try_parse_from(argv)?.command {
            crate::cli::Command::Metadata(MetadataCommand::Log(a)) => Ok(a),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn negative_offsets_reach_the_range_check() {
        let a = log_args(&["--from", "-1"]).unwrap();
        let e = check_range(a.from, a.to).unwrap_err();
        assert_eq!(
            (e.usage, e.message.as_str()),
            (true, "--from -1 must be >= 0")
        );
        let a = log_args(&["--from", "5", "--to", "-3"]).unwrap();
        let e = check_range(a.from, a.to).unwrap_err();
        assert_eq!(
            (e.usage, e.message.as_str()),
            (true, "--to -3 (exclusive) must be greater than --from 5")
        );
        assert!(check_range(0, Some(1)).is_ok());
    }

    #[test]
    fn an_empty_topic_filter_is_refused() {
        let a = log_args(&["--topic", ""]).unwrap();
        let e = check_topic_filter(a.topic.as_deref()).unwrap_err();
        assert!(e.usage);
        assert_eq!(
            e.message,
            "--topic: empty topic name (omit --topic for every record)"
        );
        assert!(check_topic_filter(Some("t")).is_ok());
        assert!(check_topic_filter(None).is_ok());
    }

    #[test]
    fn a_range_below_the_log_start_is_warned_about() {
        assert_eq!(compacted_range_warning(0, None, 100), None);
        assert_eq!(compacted_range_warning(100, None, 100), None);
        assert_eq!(compacted_range_warning(5, None, 1), None);
        let w = compacted_range_warning(5, None, 100).unwrap();
        assert!(
            w.starts_with("offsets below 100 were compacted into the snapshot ending at offset 99"),
            "{w}"
        );
        assert!(!w.contains("nothing of the range"), "{w}");
        let w = compacted_range_warning(5, Some(30), 100).unwrap();
        assert!(w.contains("nothing of the range is left to show"), "{w}");
    }

    #[test]
    fn a_follower_is_told_once_when_the_quorum_loses_and_regains_its_leader() {
        let mut w = QuorumWatch::default();
        assert_eq!(w.change(2), None, "a leader from the start: nothing to say");
        let lost = w.change(-1).unwrap();
        assert!(lost.contains("no active controller"), "{lost}");
        assert_eq!(w.change(-1), None, "said once");
        assert_eq!(
            w.change(3).as_deref(),
            Some("controller 3 is the active controller again; following")
        );
        assert_eq!(w.change(3), None);
    }
}
