//! Output of `keelctl produce`, `consume` and `verify`: summaries, record lines, reports.

use serde::Serialize;

use super::timestamp_ms;
use crate::consumer::ConsumerRecord;
use crate::verify::VerifyReport;

/// What `keelctl produce` did.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ProduceSummary {
    /// Topic.
    pub topic: String,
    /// Records acknowledged (acks=0: sent).
    pub records: u64,
    /// Key + value bytes of those records.
    pub bytes: u64,
    /// Records that failed.
    pub failed: u64,
    /// Partitions written, ascending.
    pub partitions: Vec<i32>,
    /// Wall time from the first send to the last acknowledgement, ms.
    pub elapsed_ms: u64,
    /// The first failure, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_error: Option<String>,
}

/// One line: `produced 1000 records (12.3 KiB) to orders partitions 0,1,2 in 0.41 s (2439
/// records/s)`; failures are the caller's error, not part of the summary.
pub fn produce_summary_text(s: &ProduceSummary) -> String {
    let secs = s.elapsed_ms as f64 / 1000.0;
    let rate = if s.elapsed_ms > 0 {
        let per_sec = s.records as f64 / secs;
        // Whole records/s, or one decimal below 10 (a few records over seconds are not 0/s).
        let digits = usize::from(per_sec < 10.0);
        format!(" ({per_sec:.digits$} records/s)")
    } else {
        String::new()
    };
    // Failures are not repeated here: keelctl reports them once, as its error on stderr
    // ("N of M records failed; first: ...", exit 1).
    format!(
        "produced {} ({}) to {} {} {} in {secs:.2} s{rate}\n",
        super::count(s.records, "record"),
        bytes_text(s.bytes),
        s.topic,
        if s.partitions.len() == 1 {
            "partition"
        } else {
            "partitions"
        },
        if s.partitions.is_empty() {
            "-".to_string()
        } else {
            super::ids(&s.partitions)
        },
    )
}

/// `512 B`, `12.3 KiB`, `4.0 MiB`.
pub fn bytes_text(n: u64) -> String {
    const KIB: f64 = 1024.0;
    let f = n as f64;
    if f < KIB {
        format!("{n} B")
    } else if f < KIB * KIB {
        format!("{:.1} KiB", f / KIB)
    } else if f < KIB * KIB * KIB {
        format!("{:.1} MiB", f / KIB / KIB)
    } else {
        format!("{:.1} GiB", f / KIB / KIB / KIB)
    }
}

/// Which fields `consume` prints before the value.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecordFields {
    /// `Partition:P<TAB>Offset:O`.
    pub offset: bool,
    /// `CreateTime:<RFC 3339>`, or `LogAppendTime:<RFC 3339>` (the labels of Kafka's console
    /// consumer, which prints ms since the epoch after them).
    pub timestamp: bool,
    /// The key (`null` when absent).
    pub key: bool,
}

fn lossy(b: Option<&[u8]>) -> Option<String> {
    b.map(|b| String::from_utf8_lossy(b).into_owned())
}

/// One record as a text line (no newline): the selected fields then the value, tab separated,
/// like `kafka-console-consumer` with `print.offset` / `print.timestamp` / `print.key`. Key and
/// value are written as their raw bytes (what `keelctl produce` sent, UTF-8 or not).
pub fn record_text(r: &ConsumerRecord, f: RecordFields) -> Vec<u8> {
    let mut out = Vec::new();
    let mut field = |bytes: &[u8]| {
        if !out.is_empty() {
            out.push(b'\t');
        }
        out.extend_from_slice(bytes);
    };
    if f.timestamp {
        let kind = if r.log_append_time {
            "LogAppendTime"
        } else {
            "CreateTime"
        };
        field(format!("{kind}:{}", timestamp_ms(r.timestamp_ms)).as_bytes());
    }
    if f.offset {
        field(format!("Partition:{}\tOffset:{}", r.partition, r.offset).as_bytes());
    }
    if f.key {
        field(r.key.as_deref().unwrap_or(b"null"));
    }
    field(r.value.as_deref().unwrap_or(b"null"));
    out
}

/// One record as a JSON object (key and value as UTF-8 text, lossy: bytes that are not UTF-8
/// become U+FFFD; null when absent). The text form keeps the raw bytes.
pub fn record_json(r: &ConsumerRecord) -> serde_json::Value {
    serde_json::json!({
        "topic": r.topic,
        "partition": r.partition,
        "offset": r.offset,
        "timestamp_ms": r.timestamp_ms,
        "timestamp_type": if r.log_append_time { "LogAppendTime" } else { "CreateTime" },
        "leader_epoch": r.leader_epoch,
        "key": lossy(r.key.as_deref()),
        "value": lossy(r.value.as_deref()),
    })
}

/// The verify report as text, ending with `OK` or `FAILED`.
pub fn verify_text(topic: &str, r: &VerifyReport) -> String {
    format!(
        "topic:        {topic}\n\
         produced:     {}\n\
         acknowledged: {}\n\
         read back:    {} (from {})\n\
         lost:         {}\n\
         duplicated:   {}\n\
         reordered:    {}\n\
         {}\n",
        r.produced,
        r.acknowledged,
        r.read,
        super::count(r.partitions, "partition"),
        r.lost,
        r.duplicated,
        r.reordered,
        if r.healthy() { "OK" } else { "FAILED" }
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn rec() -> ConsumerRecord {
        ConsumerRecord {
            topic: "t".into(),
            partition: 2,
            offset: 17,
            timestamp_ms: 1_700_000_000_123,
            log_append_time: false,
            leader_epoch: 3,
            key: Some(Bytes::from_static(b"k1")),
            value: Some(Bytes::from_static(b"hello")),
        }
    }

    #[test]
    fn record_lines() {
        assert_eq!(record_text(&rec(), RecordFields::default()), b"hello");
        let all = RecordFields {
            offset: true,
            timestamp: true,
            key: true,
        };
        assert_eq!(
            record_text(&rec(), all),
            b"CreateTime:2023-11-14T22:13:20.123Z\tPartition:2\tOffset:17\tk1\thello"
        );
        let mut r = rec();
        r.key = None;
        let key_only = RecordFields {
            key: true,
            ..Default::default()
        };
        assert_eq!(record_text(&r, key_only), b"null\thello");
        // Raw bytes, not U+FFFD replacements.
        r.value = Some(Bytes::from_static(b"c\xff\xfe"));
        assert_eq!(record_text(&r, RecordFields::default()), b"c\xff\xfe");
        let stamped = ConsumerRecord {
            log_append_time: true,
            ..rec()
        };
        let ts = RecordFields {
            timestamp: true,
            ..Default::default()
        };
        assert_eq!(
            record_text(&stamped, ts),
            b"LogAppendTime:2023-11-14T22:13:20.123Z\thello"
        );
        assert_eq!(
            record_json(&rec()).to_string(),
            r#"{"key":"k1","leader_epoch":3,"offset":17,"partition":2,"timestamp_ms":1700000000123,"timestamp_type":"CreateTime","topic":"t","value":"hello"}"#
        );
    }

    #[test]
    fn summaries() {
        let s = ProduceSummary {
            topic: "orders".into(),
            records: 1000,
            bytes: 12_600,
            failed: 0,
            partitions: vec![0, 1, 2],
            elapsed_ms: 500,
            first_error: None,
        };
        assert_eq!(
            produce_summary_text(&s),
            "produced 1000 records (12.3 KiB) to orders partitions 0,1,2 in 0.50 s (2000 records/s)\n"
        );
        let slow = ProduceSummary {
            records: 1,
            partitions: vec![0],
            elapsed_ms: 2_500,
            ..s.clone()
        };
        assert!(
            produce_summary_text(&slow).ends_with("in 2.50 s (0.4 records/s)\n"),
            "{}",
            produce_summary_text(&slow)
        );
        let f = ProduceSummary {
            failed: 2,
            first_error: Some("orders-1: NOT_ENOUGH_REPLICAS (19) (delivery timeout)".into()),
            elapsed_ms: 0,
            records: 0,
            partitions: vec![],
            ..s.clone()
        };
        assert_eq!(
            produce_summary_text(&f),
            "produced 0 records (12.3 KiB) to orders partitions - in 0.00 s\n"
        );
        let one = ProduceSummary {
            records: 1,
            failed: 1,
            partitions: vec![2],
            elapsed_ms: 0,
            first_error: Some("orders-2: REQUEST_TIMED_OUT (7)".into()),
            ..s
        };
        assert_eq!(
            produce_summary_text(&one),
            "produced 1 record (12.3 KiB) to orders partition 2 in 0.00 s\n"
        );
        assert_eq!(bytes_text(512), "512 B");
        assert_eq!(bytes_text(3 * 1024 * 1024), "3.0 MiB");
    }

    #[test]
    fn verify_report_text() {
        let r = VerifyReport::compute(2, &[0, 1], &[(0, 0), (0, 1)]);
        let t = verify_text("v", &r);
        assert!(t.ends_with("reordered:    0\nOK\n"), "{t}");
        let r = VerifyReport::compute(2, &[0, 1], &[(0, 0)]);
        assert!(verify_text("v", &r).contains("lost:         1\n"));
        assert!(verify_text("v", &r).ends_with("FAILED\n"));
    }
}
