//! `keelctl topic delete-records`: Kafka's `kafka-delete-records` (KIP-107). Moves the log
//! start offset of partitions up to an offset, on each partition's leader
//! ([`crate::consumer::Consumer::delete_records`], BrokerService.DeleteRecords), and reports
//! each partition's low watermark (its new log start) or why it failed.
//!
//! The partitions come from the flags (`TOPIC --offset O [--partition P]...`: every partition
//! of the topic when none is named) or from Kafka's `--offset-json-file`
//! (`{"partitions": [{"topic": "t", "partition": 0, "offset": 5}], "version": 1}`); both are
//! parsed and checked before anything is sent ([`parse_offset_json`]).

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::{CliError, CliResult, Ctx};
use crate::consumer::Consumer;

/// Most partitions one invocation names (the bound of one request's partitions).
const MAX_PARTITIONS: usize = keel_proto::limits::MAX_PARTITIONS_PER_REQUEST;

/// Partitions asked at once (each is one request to its leader).
const IN_FLIGHT: usize = 32;

/// Arguments of `topic delete-records`.
#[derive(Debug, clap::Args)]
pub struct DeleteRecordsArgs {
    /// The topic whose records to delete (with --offset).
    #[arg(required_unless_present = "offset_json_file")]
    pub topic: Option<String>,
    /// Delete the records below this offset: it becomes the log start. -1 = the high
    /// watermark (every committed record).
    #[arg(
        long,
        allow_negative_numbers = true,
        required_unless_present = "offset_json_file",
        value_parser = clap::value_parser!(i64).range(-1..)
    )]
    pub offset: Option<i64>,
    /// Only these partitions (repeatable); default every partition of the topic.
    #[arg(
        long = "partition",
        allow_negative_numbers = true,
        value_parser = clap::value_parser!(i32).range(0..)
    )]
    pub partitions: Vec<i32>,
    /// Kafka's JSON file instead of the flags:
    /// `{"partitions": [{"topic": "t", "partition": 0, "offset": 5}], "version": 1}`.
    #[arg(long, conflicts_with_all = ["topic", "offset", "partitions"])]
    pub offset_json_file: Option<PathBuf>,
    /// How long each leader waits for its in-sync replicas to take the new start, ms. The
    /// command may take this long plus 5 s whatever `--api-timeout-ms` says.
    #[arg(
        long,
        default_value_t = 30_000,
        allow_negative_numbers = true,
        value_parser = clap::value_parser!(i32).range(0..=300_000)
    )]
    pub timeout_ms: i32,
}

/// Kafka's offset JSON file (`kafka-delete-records --offset-json-file`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct OffsetFile {
    partitions: Vec<OffsetEntry>,
    #[serde(default = "version_one")]
    version: i32,
}

fn version_one() -> i32 {
    1
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct OffsetEntry {
    topic: String,
    partition: i32,
    offset: i64,
}

/// Parses and checks Kafka's offset JSON (pure): version 1, at least one partition, none
/// twice, partitions >= 0, offsets >= -1 (-1: the high watermark), at most
/// [`MAX_PARTITIONS`]. Returns `(topic, partition, offset)` in file order.
///
/// Errors name what is wrong (usage errors).
pub fn parse_offset_json(text: &str) -> Result<Vec<(String, i32, i64)>, String> {
    let file: OffsetFile =
        serde_json::from_str(text).map_err(|e| format!("not an offset JSON file: {e}"))?;
    if file.version != 1 {
        return Err(format!("version {} is not supported (1 is)", file.version));
    }
    if file.partitions.is_empty() {
        return Err("the file names no partition".into());
    }
    if file.partitions.len() > MAX_PARTITIONS {
        return Err(format!(
            "the file names {} partitions, more than {MAX_PARTITIONS}",
            file.partitions.len()
        ));
    }
    let mut seen = BTreeSet::new();
    let mut out = Vec::with_capacity(file.partitions.len());
    for p in file.partitions {
        let name = format!("{}-{}", p.topic, p.partition);
        if p.partition < 0 {
            return Err(format!("partition {name}: the partition must be >= 0"));
        }
        if p.offset < -1 {
            return Err(format!(
                "partition {name}: offset {} (give an offset >= 0, or -1 for the high \
                 watermark)",
                p.offset
            ));
        }
        if !seen.insert((p.topic.clone(), p.partition)) {
            return Err(format!("partition {name} appears twice"));
        }
        out.push((p.topic, p.partition, p.offset));
    }
    Ok(out)
}

/// One partition's outcome, as `--json` prints it.
#[derive(Debug, Serialize)]
struct Outcome {
    topic: String,
    partition: i32,
    /// The partition's low watermark (its new log start); `null` when it failed.
    low_watermark: Option<i64>,
    /// Why it failed; `null` on success.
    error: Option<String>,
}

pub(super) async fn run(a: DeleteRecordsArgs, ctx: &Ctx) -> CliResult {
    let mut cfg = ctx.consumer_config(ctx.broker_addresses().await);
    // A leader answers once its replicas followed or after timeout_ms: the RPC's deadline
    // leaves it that long and a few seconds more.
    let request_ms = (ctx.request_timeout.as_millis() as u64).max(a.timeout_ms as u64 + 5_000);
    cfg.request_timeout_ms = request_ms;
    cfg.default_api_timeout_ms = (ctx.api_timeout.as_millis() as u64).max(request_ms);
    let consumer = Arc::new(Consumer::new(cfg)?);
    let asked: Vec<(String, i32, i64)> = match (&a.offset_json_file, &a.topic, a.offset) {
        (Some(path), _, _) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| CliError::usage(format!("{}: {e}", path.display())))?;
            parse_offset_json(&text)
                .map_err(|e| CliError::usage(format!("{}: {e}", path.display())))?
        }
        (None, Some(topic), Some(offset)) => {
            let partitions: Vec<i32> = if a.partitions.is_empty() {
                consumer
                    .partitions_of(topic)
                    .await?
                    .into_iter()
                    .map(|(_, p)| p)
                    .collect()
            } else {
                a.partitions
                    .iter()
                    .copied()
                    .collect::<BTreeSet<_>>()
                    .into_iter()
                    .collect()
            };
            partitions
                .into_iter()
                .map(|p| (topic.clone(), p, offset))
                .collect()
        }
        _ => {
            return Err(CliError::usage(
                "give a TOPIC and --offset, or --offset-json-file",
            ));
        }
    };
    // Every topic and partition named exists, checked before anything is deleted (the
    // consumer would retry an unknown topic for its whole API timeout, as Kafka's clients do
    // while a topic is being created).
    let topics: BTreeSet<&str> = asked.iter().map(|(t, _, _)| t.as_str()).collect();
    for topic in topics {
        let count = consumer.partitions_of(topic).await?.len();
        let unknown: Vec<String> = asked
            .iter()
            .filter(|(t, p, _)| t == topic && *p as usize >= count)
            .map(|(_, p, _)| p.to_string())
            .collect();
        if !unknown.is_empty() {
            let code = keel_proto::ErrorCode::UnknownTopicOrPartition;
            return Err(CliError::new(format!(
                "topic {topic:?}: {code} ({}): no partition {} (it has {count})",
                code.code(),
                unknown.join(", "),
            )));
        }
    }
    if !ctx.json {
        outln!("Executing records delete operation");
    }
    let mut outcomes: Vec<Option<Outcome>> = (0..asked.len()).map(|_| None).collect();
    let mut tasks = tokio::task::JoinSet::new();
    let mut next = 0;
    while next < asked.len() || !tasks.is_empty() {
        while next < asked.len() && tasks.len() < IN_FLIGHT {
            let (topic, partition, offset) = asked[next].clone();
            let consumer = consumer.clone();
            let timeout_ms = a.timeout_ms;
            let i = next;
            tasks.spawn(async move {
                let r = consumer
                    .delete_records(&(topic.clone(), partition), offset, timeout_ms)
                    .await;
                (i, topic, partition, r)
            });
            next += 1;
        }
        if let Some(done) = tasks.join_next().await {
            let (i, topic, partition, r) =
                done.map_err(|e| CliError::new(format!("a delete task failed: {e}")))?;
            outcomes[i] = Some(match r {
                Ok(low) => Outcome {
                    topic,
                    partition,
                    low_watermark: Some(low),
                    error: None,
                },
                Err(e) => Outcome {
                    topic,
                    partition,
                    low_watermark: None,
                    // The row names the partition already.
                    error: Some(match e {
                        crate::consumer::ConsumeError::Refused { code, message, .. } => {
                            format!("{code} ({}): {message}", code.code())
                        }
                        other => other.to_string(),
                    }),
                },
            });
        }
    }
    let outcomes: Vec<Outcome> = outcomes.into_iter().flatten().collect();
    let failed = outcomes.iter().filter(|o| o.error.is_some()).count();
    if ctx.json {
        ctx.print_json(&outcomes)?;
    } else {
        outln!("Records delete operation completed:");
        for o in &outcomes {
            match (&o.error, o.low_watermark) {
                (Some(e), _) => outln!("partition: {}-{}\terror: {e}", o.topic, o.partition),
                (None, low) => outln!(
                    "partition: {}-{}\tlow_watermark: {}",
                    o.topic,
                    o.partition,
                    low.unwrap_or(-1)
                ),
            }
        }
    }
    if let Some(first) = outcomes.iter().find_map(|o| o.error.as_ref()) {
        return Err(CliError::new(format!(
            "{failed} of {} partitions failed (the first: {first})",
            outcomes.len()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::parse_offset_json;

    #[test]
    fn kafkas_offset_file_is_read_and_bad_ones_are_refused_naming_the_problem() {
        let ok = parse_offset_json(
            r#"{"partitions": [{"topic": "t", "partition": 0, "offset": 5},
                               {"topic": "t", "partition": 1, "offset": -1}], "version": 1}"#,
        )
        .unwrap();
        assert_eq!(ok, vec![("t".into(), 0, 5), ("t".into(), 1, -1)]);
        // Kafka's tool takes the file without "version" too.
        assert_eq!(
            parse_offset_json(r#"{"partitions": [{"topic": "t", "partition": 2, "offset": 0}]}"#)
                .unwrap(),
            vec![("t".into(), 2, 0)]
        );
        for (text, want) in [
            ("[]", "not an offset JSON file"),
            (r#"{"partitions": [], "version": 1}"#, "names no partition"),
            (
                r#"{"partitions": [{"topic": "t", "partition": 0, "offset": 1}], "version": 2}"#,
                "version 2",
            ),
            (
                r#"{"partitions": [{"topic": "t", "partition": -1, "offset": 1}]}"#,
                "must be >= 0",
            ),
            (
                r#"{"partitions": [{"topic": "t", "partition": 0, "offset": -2}]}"#,
                "offset -2",
            ),
            (
                r#"{"partitions": [{"topic": "t", "partition": 0, "offset": 1},
                                   {"topic": "t", "partition": 0, "offset": 2}]}"#,
                "t-0 appears twice",
            ),
            (
                r#"{"partitions": [{"topic": "t", "partition": 0}]}"#,
                "missing field `offset`",
            ),
            (
                r#"{"partitions": [{"topic": "t", "partition": 0, "offset": 1, "x": 1}]}"#,
                "unknown field `x`",
            ),
        ] {
            let err = parse_offset_json(text).unwrap_err();
            assert!(err.contains(want), "{text}: {err}");
        }
    }
}
