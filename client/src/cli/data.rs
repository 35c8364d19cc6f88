//! `keelctl produce|consume|verify`: the data plane from the command line.

use keel_runtime::backoff::pause_within;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::io::BufRead;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use keel_record::CompressionType;

use super::{CliError, CliResult, Ctx};
use crate::brokers::Brokers;
use crate::consumer::{
    ConsumeError, Consumer, ConsumerRecord, OffsetReset, SeekTo, TopicPartition,
};
use crate::format::data::{
    ProduceSummary, RecordFields, produce_summary_text, record_json, record_text, verify_text,
};
use crate::local_cluster::{DEFAULT_BASE_PORT, Layout};
use crate::producer::{Acks, Delivery, Producer, ProducerConfig};
use crate::verify::{self, VerifyReport};

/// Deliveries awaited before more records are read (bounds memory on huge inputs).
const MAX_PENDING: usize = 10_000;

/// `--acks` values (Kafka's `acks`: `all` or its synonym `-1`, `1`, `0`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AcksArg {
    /// Every ISR member has the record (idempotent); `-1` is accepted as a synonym.
    #[value(alias = "-1")]
    All,
    /// The leader appended it.
    #[value(name = "1")]
    One,
    /// No acknowledgement.
    #[value(name = "0")]
    Zero,
}

/// Arguments of `produce`.
#[derive(Debug, clap::Args)]
pub struct ProduceArgs {
    /// Topic to write to.
    #[arg(long)]
    pub topic: String,
    /// Split each line at the first occurrence of this (non-empty) string into key and value
    /// (a line without it is an error); without it lines are values with a null key.
    #[arg(long, value_parser = parse_key_separator)]
    pub key_separator: Option<String>,
    /// Acknowledgement level: `all` (or `-1`) is idempotent, `1` and `0` are not.
    #[arg(long, value_enum, default_value = "all", allow_negative_numbers = true)]
    pub acks: AcksArg,
    /// Read lines from this file (with a progress bar) instead of stdin.
    #[arg(long)]
    pub file: Option<PathBuf>,
    /// How long a batch waits for more records, ms.
    #[arg(long, default_value_t = 5, allow_negative_numbers = true)]
    pub linger_ms: u64,
    /// Target batch size per partition, bytes (before compression).
    #[arg(long, default_value_t = 16384, allow_negative_numbers = true)]
    pub batch_size: usize,
    /// Most batches of one partition in flight at once, 1-5 (Kafka
    /// `max.in.flight.requests.per.connection`; order and deduplication are kept across
    /// retries with acks all; acks 0 and 1 always use 1).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u8).range(1..=5))]
    pub max_in_flight: u8,
    /// Compression codec of the batches (Kafka `compression.type`): none, gzip, snappy
    /// (xerial framing), lz4 (frame format) or zstd.
    #[arg(long, default_value = "none")]
    pub compression: CompressionType,
    /// How long a record may wait for its acknowledgement, retries included, before it fails
    /// (Kafka `delivery.timeout.ms`), ms. With the ISR below min.insync.replicas, acks=all
    /// records retry NOT_ENOUGH_REPLICAS until then. Must be at least --linger-ms +
    /// --request-timeout-ms (as Kafka's producer requires).
    #[arg(long, default_value_t = 120_000, allow_negative_numbers = true)]
    pub delivery_timeout_ms: u64,
}

/// `--key-separator`: any non-empty string.
fn parse_key_separator(s: &str) -> Result<String, String> {
    if s.is_empty() {
        Err(
            "the key separator must not be empty (omit --key-separator for records without a key)"
                .into(),
        )
    } else {
        Ok(s.to_string())
    }
}

/// `verify --records`: a count of at least 1 (with none, verify would check nothing and
/// report OK).
fn parse_record_count(s: &str) -> Result<u64, String> {
    match s.parse::<u64>() {
        Ok(0) => Err("at least 1 record is needed (0 would check nothing)".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

/// Splits `line` at the first occurrence of `sep` into key and value.
fn split_key<'a>(line: &'a [u8], sep: &[u8]) -> Option<(&'a [u8], &'a [u8])> {
    if sep.is_empty() || sep.len() > line.len() {
        return None;
    }
    let at = line.windows(sep.len()).position(|w| w == sep)?;
    Some((&line[..at], &line[at + sep.len()..]))
}

/// Reads the next line of `reader` into `buf` without its `\n` (or `\r\n`) and returns the
/// bytes read, 0 at the end of the input. The bytes are kept as they are: lines need not be
/// UTF-8, keys and values are sent byte for byte.
fn read_line(reader: &mut dyn BufRead, buf: &mut Vec<u8>) -> std::io::Result<usize> {
    buf.clear();
    let n = reader.read_until(b'\n', buf)?;
    if buf.last() == Some(&b'\n') {
        buf.pop();
        if buf.last() == Some(&b'\r') {
            buf.pop();
        }
    }
    Ok(n)
}

/// Arguments of `consume`.
#[derive(Debug, clap::Args)]
pub struct ConsumeArgs {
    /// Topic to read.
    #[arg(long)]
    pub topic: String,
    /// Only this partition (default: all).
    #[arg(long, conflicts_with = "group")]
    pub partition: Option<i32>,
    /// Read as a member of this consumer group (like kafka-console-consumer --group): the
    /// topic's partitions are shared with the group's other members (Kafka clients
    /// included), each starts at the group's committed offset, and positions are committed
    /// every 5 s, at a rebalance and on exit (Ctrl-C included). Partitions without a
    /// committed offset start as --from-beginning/--latest say (the default as below).
    #[arg(long)]
    pub group: Option<String>,
    /// With --group: the group's `session.timeout.ms` (a member silent this long is
    /// removed and its partitions reassigned), ms; the brokers accept 6000 to 1800000.
    #[arg(long, requires = "group", default_value_t = 10_000)]
    pub session_timeout_ms: i32,
    /// Start at the log start offset (the default without --follow).
    #[arg(long, group = "start")]
    pub from_beginning: bool,
    /// Start at this offset (in every partition read). One outside [log start offset, high
    /// watermark] is refused with OFFSET_OUT_OF_RANGE, a negative one included.
    #[arg(
        long,
        group = "start",
        allow_negative_numbers = true,
        conflicts_with = "group"
    )]
    pub offset: Option<i64>,
    /// Start at the high watermark: only records produced from now on (the default with
    /// --follow, like kafka-console-consumer).
    #[arg(long, group = "start")]
    pub latest: bool,
    /// Keep waiting for new records; without it, stop at the high watermark seen at start.
    #[arg(long)]
    pub follow: bool,
    /// Stop after this many records.
    #[arg(long)]
    pub max_records: Option<u64>,
    /// Print the key before the value (tab separated; `null` when absent).
    #[arg(long)]
    pub print_key: bool,
    /// Print partition and offset.
    #[arg(long)]
    pub print_offset: bool,
    /// Print the record timestamp.
    #[arg(long)]
    pub print_timestamp: bool,
}

impl ConsumeArgs {
    /// The record fields to print.
    fn fields(&self) -> RecordFields {
        RecordFields {
            offset: self.print_offset,
            timestamp: self.print_timestamp,
            key: self.print_key,
        }
    }
}

/// Arguments of `verify`.
#[derive(Debug, clap::Args)]
pub struct VerifyArgs {
    /// Topic to write the test records to (it must exist).
    #[arg(long)]
    pub topic: String,
    /// Number of records to produce and read back, at least 1 (with none there is nothing
    /// to check).
    #[arg(long, default_value_t = 1000, value_parser = parse_record_count)]
    pub records: u64,
    /// Deadline for reading the records back once they are acknowledged, seconds, 1 to
    /// 86400 (a partition that stays unavailable fails the check instead of hanging; records
    /// not read by then are reported lost).
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub read_timeout_secs: u64,
}

impl Ctx {
    /// Broker addresses: `--bootstrap-brokers` / `KEEL_BOOTSTRAP_BROKERS`, else the unfenced
    /// brokers the controllers know (asked for at most one request timeout), else the
    /// default local cluster's brokers.
    pub async fn broker_addresses(&self) -> Vec<String> {
        if let Some(list) = &self.brokers {
            return list
                .iter()
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect();
        }
        let budget = self.api_timeout.min(self.request_timeout);
        let registered = match self.admin_within(self.controllers.clone(), budget) {
            Ok(admin) => match admin.describe_cluster().await {
                Ok(reply) => reply
                    .brokers
                    .iter()
                    .filter(|b| !b.fenced)
                    .filter_map(|b| b.endpoints.first())
                    .map(|e| format!("{}:{}", e.host, e.port))
                    .collect(),
                Err(_) => Vec::new(),
            },
            Err(_) => Vec::new(),
        };
        if !registered.is_empty() {
            return registered;
        }
        Layout::new("./keel-data".into(), DEFAULT_BASE_PORT)
            .map(|l| l.broker_addresses())
            .unwrap_or_default()
    }
}

/// Kafka's producer rule (`KafkaProducer.configureDeliveryTimeout`, a ConfigException at
/// construction): `delivery.timeout.ms` must be at least `linger.ms + request.timeout.ms`, or
/// a batch could wait out its whole delivery budget and then get a request with no time
/// left. A usage error naming the three values (pure). Kafka raises an unset
/// `delivery.timeout.ms` to the sum with a warning; keelctl refuses either way, before
/// anything is sent, so the value in effect is always the one shown in `--help` or given.
fn check_delivery_timeout(delivery_ms: u64, linger_ms: u64, request_ms: u64) -> CliResult {
    if delivery_ms >= linger_ms.saturating_add(request_ms) {
        return Ok(());
    }
    Err(CliError::usage(format!(
        "--delivery-timeout-ms {delivery_ms} must be at least --linger-ms {linger_ms} + \
         --request-timeout-ms {request_ms} = {} (Kafka: delivery.timeout.ms >= linger.ms + \
         request.timeout.ms): raise --delivery-timeout-ms or lower the others",
        linger_ms.saturating_add(request_ms)
    )))
}

/// `keelctl produce`.
pub(super) async fn produce(a: ProduceArgs, ctx: &Ctx) -> CliResult {
    let request_timeout_ms = ctx.request_timeout.as_millis() as u64;
    check_delivery_timeout(a.delivery_timeout_ms, a.linger_ms, request_timeout_ms)?;
    let addresses = ctx.broker_addresses().await;
    let mut cfg = ctx.producer_config(addresses.clone());
    // A record may wait for its topic's metadata up to max_block_ms (Kafka's max.block.ms),
    // but not past the delivery timeout the user gave. Waiting here, before reading the input,
    // gives an unknown topic one clear error (with what to do) instead of one per record.
    cfg.max_block_ms = cfg.max_block_ms.min(a.delivery_timeout_ms);
    let brokers = ctx.brokers(addresses);
    wait_for_topic(&brokers, &a.topic, Duration::from_millis(cfg.max_block_ms)).await?;
    cfg.acks = match a.acks {
        AcksArg::All => Acks::All,
        AcksArg::One => Acks::Leader,
        AcksArg::Zero => Acks::None,
    };
    cfg.enable_idempotence = a.acks == AcksArg::All;
    cfg.linger_ms = a.linger_ms;
    cfg.delivery_timeout_ms = a.delivery_timeout_ms;
    cfg.batch_size_bytes = a.batch_size;
    cfg.max_in_flight_requests_per_connection = usize::from(a.max_in_flight);
    cfg.compression = a.compression;
    // Checked above: delivery.timeout.ms >= linger.ms + request.timeout.ms.
    cfg.request_timeout_ms = request_timeout_ms;
    let producer = Producer::new(cfg)?;
    let (mut reader, bar): (Box<dyn BufRead>, Option<indicatif::ProgressBar>) = match &a.file {
        Some(path) => {
            let file = std::fs::File::open(path)
                .map_err(|e| CliError::new(format!("--file {}: {e}", path.display())))?;
            let len = file.metadata().map(|m| m.len()).unwrap_or(0);
            let bar = indicatif::ProgressBar::new(len);
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "{bar:40} {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
                )
                .map_err(|e| CliError::new(e.to_string()))?,
            );
            (Box::new(std::io::BufReader::new(file)), Some(bar))
        }
        None => (Box::new(std::io::BufReader::new(std::io::stdin())), None),
    };
    let started = Instant::now();
    let mut summary = ProduceSummary {
        topic: a.topic.clone(),
        ..Default::default()
    };
    let mut partitions = BTreeSet::new();
    let mut pending: VecDeque<(u64, Delivery)> = VecDeque::new();
    let mut line = Vec::new();
    for number in 1u64.. {
        let read = read_line(&mut reader, &mut line)
            .map_err(|e| CliError::new(format!("reading input line {number}: {e}")))?;
        if read == 0 {
            break;
        }
        if let Some(bar) = &bar {
            bar.inc(read as u64);
        }
        let (key, value) = match &a.key_separator {
            Some(sep) => match split_key(&line, sep.as_bytes()) {
                Some((k, v)) => (Some(k), v),
                None => {
                    return Err(CliError::new(format!(
                        "line {number}: no key separator {sep:?}"
                    )));
                }
            },
            None => (None, line.as_slice()),
        };
        let size = (key.map_or(0, <[u8]>::len) + value.len()) as u64;
        let d = producer.send(&a.topic, key, value).await?;
        pending.push_back((size, d));
        while pending.len() > MAX_PENDING {
            let (size, d) = pending.pop_front().expect("non-empty");
            settle(d.await, size, &mut summary, &mut partitions);
        }
    }
    producer.flush().await;
    for (size, d) in pending {
        settle(d.await, size, &mut summary, &mut partitions);
    }
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    summary.partitions = partitions.into_iter().collect();
    summary.elapsed_ms = started.elapsed().as_millis() as u64;
    if ctx.json {
        ctx.print_json(&summary)?;
    } else {
        out!("{}", produce_summary_text(&summary));
    }
    match &summary.first_error {
        Some(e) => Err(CliError::new(format!(
            "{} of {} records failed; first: {e}",
            summary.failed,
            summary.failed + summary.records
        ))),
        None => Ok(()),
    }
}

fn settle(
    r: Result<crate::producer::RecordMetadata, crate::producer::ProduceError>,
    size: u64,
    summary: &mut ProduceSummary,
    partitions: &mut BTreeSet<i32>,
) {
    match r {
        Ok(m) => {
            summary.records += 1;
            summary.bytes += size;
            partitions.insert(m.partition);
        }
        Err(e) => {
            summary.failed += 1;
            summary.first_error.get_or_insert_with(|| e.to_string());
        }
    }
}

/// A consumer of `topic` (one partition or all) for the CLI, over `brokers` (shared with a
/// producer by `verify`) or its own connections.
async fn consumer_for(
    ctx: &Ctx,
    topic: &str,
    partition: Option<i32>,
    brokers: Option<Arc<Brokers>>,
    reset: Option<OffsetReset>,
) -> Result<(Consumer, Vec<TopicPartition>), CliError> {
    let mut cfg = ctx.consumer_config(ctx.broker_addresses().await);
    cfg.request_timeout_ms = ctx.request_timeout.as_millis() as u64;
    cfg.default_api_timeout_ms = ctx.api_timeout.as_millis() as u64;
    cfg.auto_offset_reset = reset;
    let mut consumer = match brokers {
        Some(b) => Consumer::with_brokers(cfg, b)?,
        None => Consumer::new(cfg)?,
    };
    let all = consumer.partitions_of(topic).await?;
    let tps = match partition {
        Some(p) => {
            let tp = (topic.to_string(), p);
            if !all.contains(&tp) {
                return Err(CliError::new(format!(
                    "topic {topic:?} has no partition {p} (it has {})",
                    all.len()
                )));
            }
            vec![tp]
        }
        None => all,
    };
    consumer.assign(tps.clone());
    Ok((consumer, tps))
}

/// `keelctl consume`.
pub(super) async fn consume(a: ConsumeArgs, ctx: &Ctx) -> CliResult {
    if let Some(group) = a.group.clone() {
        return consume_group(a, &group, ctx).await;
    }
    let start = match (a.offset, a.latest, a.from_beginning, a.follow) {
        (Some(o), _, _, _) => SeekTo::Offset(o),
        (None, true, _, _) => SeekTo::Latest,
        (None, false, true, _) => SeekTo::Earliest,
        (None, false, false, follow) => {
            if follow {
                SeekTo::Latest
            } else {
                SeekTo::Earliest
            }
        }
    };
    // Like kafka-console-consumer (auto.offset.reset latest, or earliest with
    // --from-beginning): a partition whose position is lost later starts over there.
    let reset = match start {
        SeekTo::Earliest => Some(OffsetReset::Earliest),
        SeekTo::Latest => Some(OffsetReset::Latest),
        _ => None,
    };
    let (mut consumer, mut tps) = consumer_for(ctx, &a.topic, a.partition, None, reset).await?;
    // A partition whose leader does not answer (offline) does not stop the others, as with
    // Kafka's console consumer: without --follow it is left out (its end is unknown), with
    // --follow it is read once its leader answers (the consumer resets it then).
    // With --follow from the beginning or the end, the consumer resets every partition itself
    // in its polls, each as soon as its leader answers (seeking one after another here made
    // the partitions after an offline one start at their end after its lookup's timeout,
    // skipping what was produced meanwhile).
    // The seeks are looked up concurrently: each offline partition would otherwise cost
    // the API timeout before the next one is tried.
    let waits = a.follow && reset.is_some();
    let seeks = if waits {
        Vec::new()
    } else {
        consumer.seek_all(&tps, start).await
    };
    let mut unreachable = Vec::new();
    for (tp, seek) in tps.iter().zip(seeks) {
        match seek {
            Ok(_) => {}
            Err(ConsumeError::Unreachable(why)) if tps.len() > 1 => {
                unreachable.push((tp.clone(), why));
            }
            Err(e) => return Err(e.into()),
        }
    }
    if unreachable.len() == tps.len()
        && let Some((_, why)) = unreachable.first()
    {
        return Err(ConsumeError::Unreachable(why.clone()).into());
    }
    for (_, why) in &unreachable {
        eprintln!("keelctl: warning: {why}; reading the other partitions without it");
    }
    if !unreachable.is_empty() {
        tps.retain(|tp| !unreachable.iter().any(|(u, _)| u == tp));
        consumer.assign(tps.clone());
    }
    // Without --follow: stop at the HW of each partition as it is now.
    let mut ends: BTreeMap<TopicPartition, i64> = BTreeMap::new();
    if !a.follow {
        for (tp, end) in tps.iter().zip(consumer.end_offsets(&tps).await) {
            ends.insert(tp.clone(), end?);
        }
    }
    // An --offset outside [log start, HW] is an error (OFFSET_OUT_OF_RANGE), also when the
    // loop below would stop before fetching.
    if let Some(offset) = a.offset {
        for tp in &tps {
            let end = match ends.get(tp) {
                Some(e) => *e,
                None => consumer.end_offset(tp).await?,
            };
            let start = consumer.beginning_offset(tp).await?;
            if offset < start || offset > end {
                return Err(CliError::new(format!(
                    "{}-{}: offset {offset} is out of range (OFFSET_OUT_OF_RANGE (1)): valid \
                     offsets are {start} (the log start offset) to {end} (the high watermark, \
                     where the next record goes)",
                    tp.0, tp.1
                )));
            }
        }
    }
    let fields = a.fields();
    let max = a.max_records.unwrap_or(u64::MAX);
    let mut count = 0u64;
    'outer: while count < max {
        if !a.follow
            && tps
                .iter()
                .all(|tp| consumer.position(tp).unwrap_or(0) >= ends[tp])
        {
            break;
        }
        let records = consumer.poll(Duration::from_millis(500)).await?;
        for r in records {
            if !a.follow && r.offset >= ends[&(r.topic.clone(), r.partition)] {
                continue;
            }
            print_record(&r, fields, ctx.json);
            count += 1;
            if count >= max {
                break 'outer;
            }
        }
    }
    if !ctx.json {
        eprintln!("consumed {}", crate::format::count(count, "record"));
    }
    Ok(())
}

/// `keelctl consume --group`: a group member until --max-records, Ctrl-C/SIGTERM, or
/// (without --follow) a poll that finds every assigned partition at its high watermark.
/// On the way out the positions of the records printed are committed and the member leaves
/// the group, so another member takes over at once from there.
async fn consume_group(a: ConsumeArgs, group: &str, ctx: &Ctx) -> CliResult {
    let mut cfg = ctx.consumer_config(ctx.broker_addresses().await);
    cfg.request_timeout_ms = ctx.request_timeout.as_millis() as u64;
    cfg.default_api_timeout_ms = ctx.api_timeout.as_millis() as u64;
    cfg.client_id = "keelctl".into();
    cfg.session_timeout_ms = a.session_timeout_ms;
    cfg.heartbeat_interval_ms = (a.session_timeout_ms.max(3) / 3) as u64;
    cfg.auto_offset_reset = Some(if a.latest || (a.follow && !a.from_beginning) {
        crate::consumer::OffsetReset::Latest
    } else {
        crate::consumer::OffsetReset::Earliest
    });
    let mut consumer = Consumer::new(cfg)?;
    // An unknown topic is an error, as without --group (a member would wait for it).
    consumer.partitions_of(&a.topic).await?;
    consumer
        .subscribe(group, std::slice::from_ref(&a.topic))
        .await?;
    let fields = a.fields();
    let max = a.max_records.unwrap_or(u64::MAX);
    let mut count = 0u64;
    let mut joined = false;
    // Without --follow: where each partition ended when this member first held it.
    let mut ends: BTreeMap<TopicPartition, i64> = BTreeMap::new();
    let mut stop = std::pin::pin!(stop_signal());
    let outcome: CliResult = async {
        'outer: while count < max {
            // `poll` is cancel safe: a shutdown in the middle skips nothing.
            let records = tokio::select! {
                r = consumer.poll(Duration::from_millis(500)) => r?,
                _ = &mut stop => break,
            };
            joined |= consumer.group_member().is_some();
            // Judged after this poll's positions; its records are printed first.
            let finished = !a.follow && at_end(&consumer, &mut ends).await?;
            for (i, r) in records.iter().enumerate() {
                print_record(r, fields, ctx.json);
                count += 1;
                if count >= max {
                    // Commit only what was printed: every partition with records left in
                    // this poll goes back to its first one, for the next reader.
                    let mut unprinted: BTreeMap<TopicPartition, i64> = BTreeMap::new();
                    for r in &records[i + 1..] {
                        let first = unprinted
                            .entry((r.topic.clone(), r.partition))
                            .or_insert(r.offset);
                        *first = (*first).min(r.offset);
                    }
                    for (tp, offset) in unprinted {
                        consumer.seek(&tp, SeekTo::Offset(offset)).await?;
                    }
                    break 'outer;
                }
            }
            if finished {
                break;
            }
        }
        Ok(())
    }
    .await;
    // Commit and leave even after an error, so the group does not wait for the session
    // timeout.
    let closed = consumer.close().await;
    outcome?;
    closed?;
    if !ctx.json {
        if joined {
            eprintln!(
                "consumed {} as a member of group {group}; positions committed",
                crate::format::count(count, "record")
            );
        } else {
            eprintln!("stopped before joining group {group}: nothing consumed or committed");
        }
    }
    Ok(())
}

/// Whether every partition assigned to `consumer` reached the end it had when this member
/// first held it (`ends` keeps those; looked up on first sight): the "until the end" of
/// `consume` without --follow, which a topic being written to would otherwise never reach.
/// A member holding nothing is at its end.
async fn at_end(
    consumer: &Consumer,
    ends: &mut BTreeMap<TopicPartition, i64>,
) -> Result<bool, CliError> {
    let mut done = true;
    for tp in consumer.assignment() {
        let end = match ends.get(&tp) {
            Some(e) => *e,
            None => {
                let e = consumer.end_offset(&tp).await?;
                ends.insert(tp.clone(), e);
                e
            }
        };
        done &= consumer.position(&tp).unwrap_or(0) >= end;
    }
    Ok(done)
}

/// Ctrl-C or SIGTERM.
async fn stop_signal() {
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(t) => t,
                Err(_) => return std::future::pending().await,
            };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

fn print_record(r: &ConsumerRecord, fields: RecordFields, json: bool) {
    if json {
        outln!("{}", record_json(r));
    } else {
        let mut line = record_text(r, fields);
        line.push(b'\n');
        super::write_stdout_bytes(&line);
    }
}

/// `keelctl verify`: produces `--records` numbered records (acks=all, idempotent), then
/// reads back from where each partition ended before and judges the result
/// ([`VerifyReport`]).
///
/// The read-back never trusts one broker's end offset (issue #18, item 7): producer and
/// consumer share one [`Brokers`], so the leader epochs learnt while producing count for
/// reading (KIP-320) and a resumed ex-leader is never asked with an older epoch; and each
/// partition is read at least up to its last acknowledged offset, whatever a ListOffsets
/// answer says. Reading stops when every partition reached that end, or when
/// `--read-timeout-secs` passes: only then are missing records reported lost.
pub(super) async fn verify(a: VerifyArgs, ctx: &Ctx) -> CliResult {
    let addresses = ctx.broker_addresses().await;
    let brokers = Arc::new(ctx.brokers(addresses.clone()));
    // As `produce` does (the producer's max_block_ms): a topic just created reaches the
    // brokers' metadata a moment after the controllers'.
    let budget = Duration::from_millis(ProducerConfig::new(Vec::new()).max_block_ms);
    wait_for_topic(&brokers, &a.topic, budget).await?;
    let (mut consumer, tps) =
        consumer_for(ctx, &a.topic, None, Some(brokers.clone()), None).await?;
    let mut starts = BTreeMap::new();
    for tp in &tps {
        starts.insert(tp.clone(), consumer.end_offset(tp).await?);
    }
    let mut cfg = ctx.producer_config(addresses);
    cfg.request_timeout_ms = ctx.request_timeout.as_millis() as u64;
    // `verify` has no --delivery-timeout-ms: as Kafka does with an unset
    // delivery.timeout.ms, raise it to linger.ms + request.timeout.ms when that is longer.
    cfg.delivery_timeout_ms = cfg
        .delivery_timeout_ms
        .max(cfg.linger_ms.saturating_add(cfg.request_timeout_ms));
    let producer = Producer::with_brokers(cfg, brokers)?;
    let run = format!("{:x}", crate::brokers::now_ms());
    let acked = produce_numbered(&producer, &a.topic, &run, a.records).await?;
    // Read back everything written since the start: up to the HW now, and at least past
    // every acknowledged offset.
    let mut ends = BTreeMap::new();
    for tp in &tps {
        let latest = consumer.end_offset(tp).await?;
        ends.insert(tp.clone(), read_back_end(latest, acked.last_offset.get(tp)));
        consumer.seek(tp, SeekTo::Offset(starts[tp])).await?;
    }
    let deadline = Instant::now() + Duration::from_secs(a.read_timeout_secs);
    let (read, behind) = read_back(&mut consumer, &tps, &ends, &run, deadline).await?;
    let report = VerifyReport::compute(a.records, &acked.numbers, &read);
    if ctx.json {
        ctx.print_json(&report)?;
    } else {
        out!("{}", verify_text(&a.topic, &report));
    }
    verify_outcome(&a, &report, &behind, acked.first_error)
}

/// Waits until the brokers know `topic`, retrying retriable answers (UNKNOWN_TOPIC_OR_PARTITION
/// while a just-created topic reaches them, an unreachable broker) with backoff for at most
/// `budget`. Errors: a non-retriable answer at once; past the budget, a line saying what to do.
async fn wait_for_topic(brokers: &Brokers, topic: &str, budget: Duration) -> CliResult {
    let backoff = keel_runtime::Backoff::from_millis(50, 1000);
    let deadline = Instant::now() + budget;
    let mut attempt = 0u32;
    loop {
        let last = match brokers.refresh(topic).await {
            Ok(m) if !m.partitions.is_empty() => return Ok(()),
            Ok(_) => "no partitions".to_string(),
            Err(crate::brokers::MetadataError::Topic { code, .. }) if code.retriable() => {
                code.to_string()
            }
            Err(e @ crate::brokers::MetadataError::Unreachable { .. }) => e.to_string(),
            Err(e) => return Err(e.into()),
        };
        let remaining = deadline.saturating_duration_since(Instant::now());
        let pause = pause_within(backoff.next(attempt), remaining);
        attempt = attempt.saturating_add(1);
        let Some(pause) = pause else {
            return Err(CliError::new(format!(
                "topic {topic:?} is not known to the brokers after {:.1} s ({last}): create it \
                 first (keelctl topic create)",
                budget.as_secs_f64()
            )));
        };
        tokio::time::sleep(pause).await;
    }
}

/// Sends `count` records numbered from 0 (values of [`verify::value`] for `run`) to `topic`
/// and awaits every delivery. Errors: a record that cannot be queued; a failed delivery is
/// only noted in the returned [`Acked`].
async fn produce_numbered(
    producer: &Producer,
    topic: &str,
    run: &str,
    count: u64,
) -> Result<Acked, CliError> {
    let mut pending = VecDeque::new();
    let mut acked = Acked::default();
    for n in 0..count {
        let d = producer
            .send(topic, None, verify::value(run, n).as_bytes())
            .await?;
        pending.push_back((n, d));
        while pending.len() > MAX_PENDING {
            let (n, d) = pending.pop_front().expect("non-empty");
            acked.note(n, d.await);
        }
    }
    producer.flush().await;
    for (n, d) in pending {
        acked.note(n, d.await);
    }
    Ok(acked)
}

/// Polls `consumer` until every partition of `tps` reached its end in `ends` (exclusive) or
/// `deadline` passes. Returns (partition, number) of each record of `run` read, and for a
/// deadline hit the partitions still behind, as `TOPIC-P at POSITION of END`.
async fn read_back(
    consumer: &mut Consumer,
    tps: &[TopicPartition],
    ends: &BTreeMap<TopicPartition, i64>,
    run: &str,
    deadline: Instant,
) -> Result<(Vec<(i32, u64)>, Vec<String>), CliError> {
    let mut read = Vec::new();
    loop {
        let behind: Vec<&TopicPartition> = tps
            .iter()
            .filter(|tp| consumer.position(tp).unwrap_or(0) < ends[*tp])
            .collect();
        if behind.is_empty() {
            return Ok((read, Vec::new()));
        }
        if Instant::now() >= deadline {
            let behind = behind
                .into_iter()
                .map(|tp| {
                    format!(
                        "{}-{} at {} of {}",
                        tp.0,
                        tp.1,
                        consumer.position(tp).unwrap_or(0),
                        ends[tp]
                    )
                })
                .collect();
            return Ok((read, behind));
        }
        for r in consumer.poll(Duration::from_millis(500)).await? {
            if r.offset >= ends[&(r.topic.clone(), r.partition)] {
                continue;
            }
            if let Some(n) = r.value.as_deref().and_then(|v| verify::parse_value(run, v)) {
                read.push((r.partition, n));
            }
        }
    }
}

/// The exit status of `verify` (pure): an error when the read-back did not finish
/// (`behind`: the partitions still behind) or the report is not healthy; `first_error` is the
/// first failed delivery, for the message.
fn verify_outcome(
    a: &VerifyArgs,
    report: &VerifyReport,
    behind: &[String],
    first_error: Option<String>,
) -> CliResult {
    if !behind.is_empty() {
        return Err(CliError::new(format!(
            "verify {}: reading back did not finish within {} s ({}): {} lost so far",
            a.topic,
            a.read_timeout_secs,
            behind.join(", "),
            report.lost
        )));
    }
    if report.healthy() {
        Ok(())
    } else {
        Err(CliError::new(format!(
            "verify {}: {} lost, {} duplicated, {} reordered, {} of {} not acknowledged{}",
            a.topic,
            report.lost,
            report.duplicated,
            report.reordered,
            report.produced - report.acknowledged,
            report.produced,
            first_error
                .map(|e| format!(" (first error: {e})"))
                .unwrap_or_default()
        )))
    }
}

/// Where verify's read-back of a partition ends (exclusive): the high watermark the leader
/// reported, but never before the offset after the last acknowledged record (`last_acked`):
/// an acknowledged record is committed, so an end below it is a stale answer (a resumed
/// ex-leader's old HW), not the log's end.
fn read_back_end(latest: i64, last_acked: Option<&i64>) -> i64 {
    match last_acked {
        Some(o) => latest.max(o.saturating_add(1)),
        None => latest,
    }
}

/// What verify's producer got acknowledged.
#[derive(Debug, Default)]
struct Acked {
    /// Numbers of the acknowledged records.
    numbers: Vec<u64>,
    /// Per partition the highest acknowledged offset.
    last_offset: BTreeMap<TopicPartition, i64>,
    /// The first failure, for the message.
    first_error: Option<String>,
}

impl Acked {
    fn note(
        &mut self,
        n: u64,
        r: Result<crate::producer::RecordMetadata, crate::producer::ProduceError>,
    ) {
        match r {
            Ok(m) => {
                self.numbers.push(n);
                let last = self.last_offset.entry((m.topic, m.partition)).or_insert(-1);
                *last = (*last).max(m.offset);
            }
            Err(e) => {
                self.first_error.get_or_insert_with(|| e.to_string());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn produce_args(args: &[&str]) -> Result<ProduceArgs, clap::Error> {
        let mut argv = vec!["keelctl", "produce", "--topic", "t"];
        argv.extend(args);
        match crate::cli::Cli::try_parse_from(argv)?.command {
            crate::cli::Command::Produce(a) => Ok(a),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn verify_read_timeout_is_bounded() {
        let parse = |v: &str| {
            crate::cli::Cli::try_parse_from([
                "keelctl",
                "verify",
                "--topic",
                "t",
                "--read-timeout-secs",
                v,
            ])
            .map(|c| match c.command {
                crate::cli::Command::Verify(a) => a.read_timeout_secs,
                other => panic!("{other:?}"),
            })
        };
        assert_eq!(parse("1").unwrap(), 1);
        assert_eq!(parse("86400").unwrap(), 86_400);
        // 0 would report every record lost at once; a huge value overflowed the deadline.
        for bad in ["0", "86401", "18446744073709551615"] {
            let e = parse(bad).unwrap_err().to_string();
            assert!(e.contains("--read-timeout-secs"), "{bad}: {e}");
        }
    }

    #[test]
    fn verify_needs_at_least_one_record() {
        let parse = |v: &str| {
            crate::cli::Cli::try_parse_from(["keelctl", "verify", "--topic", "t", "--records", v])
                .map(|c| match c.command {
                    crate::cli::Command::Verify(a) => a.records,
                    other => panic!("{other:?}"),
                })
        };
        assert_eq!(parse("1").unwrap(), 1);
        let e = parse("0").unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::ValueValidation);
        assert!(
            e.to_string()
                .contains("'0' for '--records <RECORDS>': at least 1 record is needed"),
            "{e}"
        );
        assert!(parse("x").is_err());
    }

    #[test]
    fn read_back_reaches_past_every_acknowledged_offset() {
        // A resumed ex-leader said the HW is 1000, but offset 5999 was acknowledged.
        assert_eq!(read_back_end(1000, Some(&5999)), 6000);
        // The HW is past the acknowledged records (others wrote too): read to it.
        assert_eq!(read_back_end(7000, Some(&5999)), 7000);
        assert_eq!(read_back_end(40, None), 40);
        assert_eq!(read_back_end(0, Some(&i64::MAX)), i64::MAX);
    }

    #[test]
    fn acked_records_track_the_last_offset_per_partition() {
        use crate::producer::{ProduceError, RecordMetadata};
        let meta = |partition, offset| RecordMetadata {
            topic: "t".into(),
            partition,
            offset,
            timestamp_ms: 0,
        };
        let mut a = Acked::default();
        a.note(0, Ok(meta(0, 7)));
        a.note(1, Ok(meta(1, 3)));
        a.note(2, Err(ProduceError::Closed));
        a.note(3, Ok(meta(0, 5)));
        a.note(4, Err(ProduceError::InvalidArgument("x".into())));
        assert_eq!(a.numbers, vec![0, 1, 3]);
        assert_eq!(a.last_offset.get(&("t".to_string(), 0)), Some(&7));
        assert_eq!(a.last_offset.get(&("t".to_string(), 1)), Some(&3));
        assert_eq!(
            a.first_error.as_deref(),
            Some("the producer was closed before the record was sent")
        );
    }

    #[test]
    fn delivery_timeout_must_cover_linger_and_request() {
        assert!(check_delivery_timeout(120_000, 5, 10_000).is_ok());
        assert!(
            check_delivery_timeout(10_005, 5, 10_000).is_ok(),
            "equal is enough"
        );
        let e = check_delivery_timeout(120_000, 120_000, 10_000).unwrap_err();
        assert!(e.usage);
        assert_eq!(
            e.message,
            "--delivery-timeout-ms 120000 must be at least --linger-ms 120000 + \
             --request-timeout-ms 10000 = 130000 (Kafka: delivery.timeout.ms >= linger.ms + \
             request.timeout.ms): raise --delivery-timeout-ms or lower the others"
        );
        assert!(check_delivery_timeout(1500, 5, 10_000).unwrap_err().usage);
        assert!(
            check_delivery_timeout(u64::MAX - 1, u64::MAX, 1).is_err(),
            "no overflow"
        );
        assert!(
            check_delivery_timeout(u64::MAX, u64::MAX, 1).is_ok(),
            "saturates"
        );
    }

    #[test]
    fn acks_accept_kafka_spellings() {
        for (arg, want) in [
            ("all", AcksArg::All),
            ("-1", AcksArg::All),
            ("1", AcksArg::One),
            ("0", AcksArg::Zero),
        ] {
            assert_eq!(produce_args(&["--acks", arg]).unwrap().acks, want, "{arg}");
            let eq = format!("--acks={arg}");
            assert_eq!(produce_args(&[&eq]).unwrap().acks, want, "{eq}");
        }
        assert_eq!(produce_args(&[]).unwrap().acks, AcksArg::All);
        assert!(produce_args(&["--acks", "2"]).is_err());
        assert!(produce_args(&["--acks", "-2"]).is_err());
    }

    #[test]
    fn empty_key_separator_is_refused() {
        let e = produce_args(&["--key-separator", ""]).unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::ValueValidation);
        assert!(e.to_string().contains("must not be empty"), "{e}");
        assert_eq!(
            produce_args(&["--key-separator", "::"])
                .unwrap()
                .key_separator,
            Some("::".into())
        );
    }

    #[test]
    fn lines_are_bytes_split_at_the_first_separator() {
        let input: &[u8] = b"k1:v1\r\nno sep\n\xff\xfe:bin\xc3\n:empty key\nlast";
        let mut reader = std::io::BufReader::new(input);
        let mut buf = Vec::new();
        let mut lines = Vec::new();
        while read_line(&mut reader, &mut buf).unwrap() > 0 {
            lines.push(buf.clone());
        }
        assert_eq!(
            lines,
            vec![
                b"k1:v1".to_vec(),
                b"no sep".to_vec(),
                b"\xff\xfe:bin\xc3".to_vec(),
                b":empty key".to_vec(),
                b"last".to_vec(),
            ]
        );
        assert_eq!(split_key(&lines[0], b":"), Some((&b"k1"[..], &b"v1"[..])));
        assert_eq!(split_key(&lines[1], b":"), None);
        assert_eq!(
            split_key(&lines[2], b":"),
            Some((&b"\xff\xfe"[..], &b"bin\xc3"[..]))
        );
        assert_eq!(
            split_key(&lines[3], b":"),
            Some((&b""[..], &b"empty key"[..]))
        );
        assert_eq!(
            split_key(b"a::b::c", b"::"),
            Some((&b"a"[..], &b"b::c"[..]))
        );
        assert_eq!(split_key(b"a", b"::"), None);
        assert_eq!(split_key(b"a", b""), None);
    }
}
