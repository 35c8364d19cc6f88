//! Reading a controller's metadata log directory offline, for `keelctl metadata dump`
//! (Kafka's `kafka-dump-log --cluster-metadata-decoder` and `kafka-metadata-shell
//! --snapshot` on a stopped node): the `raft/meta` values (node id, vote, committed and purged
//! log ids), the snapshot files (offset, term, record count, checksum) and every entry of the
//! Raft log segments, with the metadata records decoded as `keelctl metadata log` prints
//! them (the same lines, the same partition states after each partition record).
//!
//! It reads only ([`keel_metadata_log::store::offline`]): safe on a stopped controller and on
//! a running one (whose last entry may be a write in progress, reported as a torn tail).
//! Partition states: when the log was purged (its first entry is not 1), the newest snapshot
//! seeds them, and entries the snapshot already covers are shown without replaying them
//! again.

use std::path::{Path, PathBuf};

use keel_metadata_log::store::offline::{
    EntryKind, OfflineLog, RaftMeta, SegmentItem, read_snapshot, snapshot_files,
};
use keel_proto::controller::MetadataLogRecord;
use keel_proto::metadata::MetadataRecord;
use serde_json::{Value, json};

use crate::format::log::{LogLine, PartitionTracker, line_text, log_line};

/// What a path given to `metadata dump` points at.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Target {
    /// A controller's `metadata_log_dir` (holding `meta.properties`, `raft/`, `snapshots/`).
    pub root: Option<PathBuf>,
    /// The Raft log directory.
    pub raft: Option<PathBuf>,
    /// Only this segment of `raft` (a `.log` file was given).
    pub segment: Option<PathBuf>,
    /// The snapshot directory.
    pub snapshots: Option<PathBuf>,
    /// Only this snapshot file (a `.snap` file was given); its records are printed.
    pub snapshot_file: Option<PathBuf>,
}

/// Works out what `path` is: a `metadata_log_dir`, its `raft/` or `snapshots/` directory, a
/// segment (`.log`) or a snapshot (`.snap`) file. Errors name the path and what was expected.
pub fn resolve(path: &Path) -> Result<Target, String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let ext = path.extension().and_then(|e| e.to_str());
    if meta.is_file() {
        return match ext {
            Some("log") => Ok(Target {
                raft: path.parent().map(Path::to_path_buf),
                segment: Some(path.to_path_buf()),
                ..Target::default()
            }),
            Some("snap") => Ok(Target {
                snapshot_file: Some(path.to_path_buf()),
                ..Target::default()
            }),
            _ => Err(format!(
                "{}: neither a Raft log segment (.log) nor a snapshot (.snap)",
                path.display()
            )),
        };
    }
    let has = |name: &str| path.join(name).exists();
    let any = |pred: fn(&str) -> bool| {
        std::fs::read_dir(path)
            .map(|rd| {
                rd.filter_map(Result::ok)
                    .any(|e| pred(&e.file_name().to_string_lossy()))
            })
            .unwrap_or(false)
    };
    // `{first index:020}.log` (not the process logs a local cluster's data dir holds).
    let segment = |name: &str| {
        name.strip_suffix(".log")
            .is_some_and(|s| s.len() == 20 && s.bytes().all(|b| b.is_ascii_digit()))
    };
    let snapshot = |name: &str| name.starts_with("snapshot-") && name.ends_with(".snap");
    let target = if has("raft") || has("snapshots") {
        Target {
            root: Some(path.to_path_buf()),
            raft: has("raft").then(|| path.join("raft")),
            snapshots: has("snapshots").then(|| path.join("snapshots")),
            ..Target::default()
        }
    } else if has("meta")
        || any(segment)
        || keel_metadata_log::store::engine_files::holds_sled(path)
    {
        Target {
            raft: Some(path.to_path_buf()),
            ..Target::default()
        }
    } else if any(snapshot) {
        Target {
            snapshots: Some(path.to_path_buf()),
            ..Target::default()
        }
    } else if path.file_name().is_some_and(|n| n == "snapshots") {
        // A controller's snapshots/ before its first snapshot: nothing to show, and that is
        // what to say (not "not a metadata log").
        return Err(format!(
            "{}: holds no snapshot yet (a controller writes its first after \
             metadata_snapshot_max_entries entries); dump its raft/ directory or the \
             metadata_log_dir for the log",
            path.display()
        ));
    } else {
        return Err(format!(
            "{}: not a controller's metadata log: give its metadata_log_dir (holding raft/ and \
             snapshots/), one of those two directories, or a .log or .snap file",
            path.display()
        ));
    };
    Ok(target)
}

/// Which records are printed.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// First offset printed (inclusive).
    pub from: u64,
    /// End offset (exclusive); `None` = to the end.
    pub to: Option<u64>,
    /// Record types printed; empty = all.
    pub types: Vec<String>,
    /// Only records about this topic (by name, deleted topics included).
    pub topic: Option<String>,
    /// Also print NoOpRecords (the active controller writes one every 500 ms).
    pub include_noop: bool,
}

impl Filter {
    fn shows_offset(&self, offset: u64) -> bool {
        offset >= self.from && self.to.is_none_or(|to| offset < to)
    }

    fn shows(&self, line: &LogLine) -> bool {
        (self.include_noop
            || line.record_type != "NoOpRecord"
            || self.types_name(&line.record_type))
            && (self.types.is_empty() || self.types_name(&line.record_type))
            && self
                .topic
                .as_ref()
                .is_none_or(|t| line.topic.as_deref() == Some(t.as_str()))
    }

    fn types_name(&self, t: &str) -> bool {
        self.types.iter().any(|x| x == t)
    }
}

/// What a dump found, for the closing line and the exit status.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    /// Entries read (including purged ones still in a file).
    pub entries: u64,
    /// First and last entry index read.
    pub range: Option<(u64, u64)>,
    /// Record lines printed.
    pub shown: u64,
    /// NoOpRecords not printed.
    pub noop_hidden: u64,
    /// Torn tails seen (a write in progress or cut by a crash; a restart cuts them).
    pub torn_tails: u64,
    /// Damage a controller would refuse to start on.
    pub damaged: u64,
}

impl Summary {
    fn saw(&mut self, index: u64) {
        self.entries += 1;
        self.range = Some(match self.range {
            None => (index, index),
            Some((a, _)) => (a, index),
        });
    }
}

/// Where output goes: stdout lines (text or JSON) and stderr warnings.
pub trait Sink {
    /// One line of output.
    fn line(&mut self, text: String);
    /// One warning line.
    fn warn(&mut self, text: String);
}

/// Dumps `target` to `sink` (text, or one JSON object per line with `json`), printing what
/// `filter` selects. Reading stops at the first damage of each segment, and at `filter.to`.
///
/// Errors: a file or directory that cannot be read, a damaged `meta` or snapshot file.
pub fn dump(
    target: &Target,
    filter: &Filter,
    json: bool,
    sink: &mut dyn Sink,
) -> Result<Summary, String> {
    let mut summary = Summary::default();
    if let Some(root) = &target.root {
        properties(root, json, sink);
    }
    if let Some(file) = &target.snapshot_file {
        let snap = read_snapshot(file)?;
        snapshot_header(file, &snap.header, json, sink);
        let mut tracker = PartitionTracker::default();
        let at = snap.header.provenance.offset;
        for (i, r) in snap.records.iter().enumerate() {
            let term = snap.header.provenance.term as i64;
            let line = log_line(&log_record(at as i64, i, term, 0, r), &mut tracker);
            emit_record(&line, filter, json, file, sink, &mut summary);
        }
        return Ok(summary);
    }
    // The newest snapshot seeds the partition states when the log does not start at 1.
    let mut newest: Option<(u64, Vec<MetadataRecord>)> = None;
    let mut newest_index: Option<u64> = None;
    if let Some(dir) = &target.snapshots {
        for (_, path) in snapshot_files(dir)? {
            let snap = read_snapshot(&path)?;
            snapshot_header(&path, &snap.header, json, sink);
            newest_index = Some(snap.header.provenance.offset);
            newest = Some((snap.header.provenance.offset, snap.records));
        }
    }
    let Some(raft) = &target.raft else {
        return Ok(summary);
    };
    let sled = keel_metadata_log::store::engine_files::holds_sled(raft);
    if !sled && let Ok(None) = keel_metadata_log::data_dir::try_lock_dir(raft) {
        sink.warn(format!(
            "{} is in use by a running controller: this is a moment's view, and its last entry \
             may be a write in progress",
            raft.display()
        ));
    }
    let log = OfflineLog::open(raft)?;
    let meta = log.meta();
    raft_meta(raft, &meta, json, sink);
    let mut replay = Replay {
        tracker: PartitionTracker::default(),
        seed: newest,
        seeded_through: None,
        started: false,
        last: None,
    };
    let mut whole = target.segment.is_none() && filter.to.is_none();
    for (base, path) in log.segments() {
        if target.segment.as_ref().is_some_and(|s| s != path) {
            continue;
        }
        if filter.to.is_some_and(|to| *base >= to) {
            break;
        }
        if !json {
            let what = if sled { "Log (sled)" } else { "Segment" };
            sink.line(format!("{what} {}", path.display()));
        }
        let mut stop = false;
        log.read_segment(*base, path, |item| {
            entry_item(
                item,
                path,
                filter,
                json,
                &mut replay,
                sink,
                &mut summary,
                &mut stop,
            );
            !stop
        })?;
        if stop {
            whole = false;
            break;
        }
    }
    // What the controller checks at start (keel_metadata_log::store::open_checked) on the
    // whole directory: a log that ends below its committed offset lost flushed entries.
    if whole && target.snapshots.is_some() {
        let state = keel_metadata_log::store::log_store::StoredState {
            has_vote: meta.vote.is_some(),
            last_purged_index: meta.last_purged.map(|(_, i)| i),
            last_entry_term: replay.last.map_or(0, |(_, t)| t),
            last_entry_index: replay.last.map(|(i, _)| i),
            committed_index: meta.committed.map(|(_, i)| i),
        };
        if let Some(problem) = keel_metadata_log::store::inconsistency(&state, newest_index) {
            summary.damaged += 1;
            sink.warn(format!(
                "{}: {problem} (the controller refuses to start on this)",
                raft.display()
            ));
        }
    }
    Ok(summary)
}

/// Partition states derived while reading. Replayed from the log when its files still hold
/// it from the start (offset 0 or 1); otherwise the newest snapshot seeds them on the first
/// entry, and entries that snapshot covers are shown without replaying.
struct Replay {
    tracker: PartitionTracker,
    /// The newest snapshot: its last offset and records.
    seed: Option<(u64, Vec<MetadataRecord>)>,
    /// The seeding snapshot's last offset, once seeded.
    seeded_through: Option<u64>,
    /// Whether an entry was seen.
    started: bool,
    /// Index and term of the last whole entry read.
    last: Option<(u64, u64)>,
}

impl Replay {
    /// The tracker for the entry at `index`.
    fn tracker_for(&mut self, index: u64) -> Tracker<'_> {
        if !self.started {
            self.started = true;
            if index > 1
                && let Some((at, records)) = self.seed.take()
            {
                self.tracker.seed(&records);
                self.seeded_through = Some(at);
            }
        }
        if self.seeded_through.is_some_and(|s| index <= s) {
            Tracker::Names(self.tracker.names_only())
        } else {
            Tracker::Live(&mut self.tracker)
        }
    }
}

/// The tracker of one entry: the live one, or one knowing only topic names.
enum Tracker<'a> {
    Live(&'a mut PartitionTracker),
    Names(PartitionTracker),
}

impl Tracker<'_> {
    fn get(&mut self) -> &mut PartitionTracker {
        match self {
            Tracker::Live(t) => t,
            Tracker::Names(t) => t,
        }
    }
}

/// Handles one item of a segment; sets `stop` once `filter.to` is reached.
#[allow(clippy::too_many_arguments)]
fn entry_item(
    item: SegmentItem,
    path: &Path,
    filter: &Filter,
    json: bool,
    replay: &mut Replay,
    sink: &mut dyn Sink,
    summary: &mut Summary,
    stop: &mut bool,
) {
    match item {
        SegmentItem::Entry {
            index,
            term,
            position,
            purged,
            kind,
        } => {
            if filter.to.is_some_and(|to| index >= to) {
                *stop = true;
                return;
            }
            summary.saw(index);
            replay.last = Some((index, term));
            let mut tracker = replay.tracker_for(index);
            let tracker = tracker.get();
            match kind {
                EntryKind::Records(batch) => {
                    for (i, r) in batch.records.iter().enumerate() {
                        let rec =
                            log_record(index as i64, i, term as i64, batch.append_timestamp_ms, r);
                        let line = log_line(&rec, tracker);
                        if filter.shows_offset(index) {
                            emit_record(&line, filter, json, path, sink, summary);
                        }
                    }
                }
                other
                    if filter.shows_offset(index)
                        && filter.types.is_empty()
                        && filter.topic.is_none() =>
                {
                    sink.line(control_entry(index, term, position, purged, &other, json));
                }
                _ => {}
            }
        }
        SegmentItem::TornTail {
            position,
            bytes,
            why,
        } => {
            summary.torn_tails += 1;
            sink.warn(format!(
                "{}: torn tail at byte {position} ({bytes} bytes to the end of the file): {why}; \
                 a write in progress, or one a crash cut short (the controller cuts it at start)",
                path.display()
            ));
        }
        SegmentItem::Damage { position, why } => {
            summary.damaged += 1;
            sink.warn(format!(
                "{}: damaged at byte {position}: {why}; the rest of the file is not read (the \
                 controller refuses to start on this)",
                path.display()
            ));
        }
    }
}

/// A record of an entry as `metadata log` has it (the topic name comes from the tracker).
fn log_record(
    offset: i64,
    index_in_batch: usize,
    term: i64,
    append_timestamp_ms: i64,
    r: &MetadataRecord,
) -> MetadataLogRecord {
    MetadataLogRecord {
        offset,
        index_in_batch: index_in_batch as u32,
        term,
        append_timestamp_ms: if append_timestamp_ms > 0 {
            append_timestamp_ms
        } else {
            -1
        },
        record_type: keel_metadata_log::record_type_name(r).to_string(),
        record: Some(r.clone()),
        topic_name: String::new(),
    }
}

fn emit_record(
    line: &LogLine,
    filter: &Filter,
    json: bool,
    file: &Path,
    sink: &mut dyn Sink,
    summary: &mut Summary,
) {
    if !filter.shows(line) {
        if line.record_type == "NoOpRecord" {
            summary.noop_hidden += 1;
        }
        return;
    }
    summary.shown += 1;
    if json {
        let mut v = serde_json::to_value(line).unwrap_or(Value::Null);
        v["kind"] = json!("record");
        v["file"] = json!(file.display().to_string());
        sink.line(v.to_string());
    } else {
        sink.line(line_text(line));
    }
}

/// The line of an entry without records: a new leader's blank entry or a membership change.
fn control_entry(
    index: u64,
    term: u64,
    position: u64,
    purged: bool,
    kind: &EntryKind,
    json: bool,
) -> String {
    let (what, detail) = match kind {
        EntryKind::Blank => ("Blank", json!({})),
        EntryKind::Membership { voters, learners } => (
            "Membership",
            json!({ "voters": voters, "learners": learners }),
        ),
        EntryKind::Records(_) => ("Records", json!({})),
    };
    if json {
        return json!({
            "kind": "entry", "offset": index, "term": term, "position": position,
            "purged": purged, "entry_type": what, "detail": detail,
        })
        .to_string();
    }
    let text = match kind {
        EntryKind::Blank => "(a new leader's first entry)".to_string(),
        EntryKind::Membership { voters, learners } => format!(
            "voters={} learners={learners:?}",
            voters
                .iter()
                .map(|v| format!("{v:?}"))
                .collect::<Vec<_>>()
                .join("+"),
        ),
        EntryKind::Records(_) => String::new(),
    };
    let purged = if purged { " (purged)" } else { "" };
    format!("{index} term={term} {what} {text}{purged}")
}

fn properties(root: &Path, json: bool, sink: &mut dyn Sink) {
    let path = root.join("meta.properties");
    let Ok(text) = std::fs::read_to_string(&path) else {
        return;
    };
    match keel_metadata_log::data_dir::parse_properties(&text) {
        Ok(kv) if json => sink.line(json!({ "kind": "meta_properties", "values": kv }).to_string()),
        Ok(kv) => sink.line(format!(
            "{}: {}",
            path.display(),
            kv.iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(" ")
        )),
        Err(e) => sink.warn(format!("{}: {e}", path.display())),
    }
}

fn snapshot_header(
    path: &Path,
    h: &keel_metadata_log::snapshot::SnapshotHeader,
    json: bool,
    sink: &mut dyn Sink,
) {
    sink.line(if json {
        json!({
            "kind": "snapshot", "file": path.display().to_string(),
            "last_offset": h.provenance.offset, "last_term": h.provenance.term,
            "records": h.record_count, "checksum_valid": true,
        })
        .to_string()
    } else {
        format!(
            "Snapshot {}: through offset {} (term {}), {} records, checksum valid",
            path.display(),
            h.provenance.offset,
            h.provenance.term,
            h.record_count
        )
    });
}

fn raft_meta(dir: &Path, m: &RaftMeta, json: bool, sink: &mut dyn Sink) {
    let log_id = |l: Option<(u64, u64)>| l.map(|(t, i)| json!({ "term": t, "index": i }));
    if json {
        sink.line(
            json!({
                "kind": "raft_meta", "dir": dir.display().to_string(),
                "node_id": m.node_id,
                "vote": m.vote.map(|(t, n, c)| json!({ "term": t, "node_id": n, "committed": c })),
                "committed": log_id(m.committed),
                "last_purged": log_id(m.last_purged),
                "purged_through": m.purged_through,
            })
            .to_string(),
        );
        return;
    }
    let opt = |v: Option<u64>| v.map_or("-".to_string(), |v| v.to_string());
    let id = |l: Option<(u64, u64)>| l.map_or("-".to_string(), |(t, i)| format!("{i} (term {t})"));
    let vote = m.vote.map_or("-".to_string(), |(t, n, c)| {
        format!(
            "term {t} for node {n}{}",
            if c { " (won: it led that term)" } else { "" }
        )
    });
    sink.line(format!(
        "Raft log {}: node_id={} vote={vote} committed={} last_purged={}",
        dir.display(),
        opt(m.node_id),
        id(m.committed),
        id(m.last_purged),
    ));
}

/// The closing line of a text dump.
pub fn summary_line(s: &Summary) -> String {
    let range = s.range.map_or("no entries".to_string(), |(a, b)| {
        format!("entries {a}..={b}")
    });
    format!(
        "{range} ({} read), {} records shown, {} NoOpRecords hidden (--include-noop shows \
         them), {} torn tail(s), {} damaged",
        s.entries, s.shown, s.noop_hidden, s.torn_tails, s.damaged
    )
}
