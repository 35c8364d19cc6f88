//! What the cleaner keeps of one batch (Kafka `Cleaner.cleanInto` with
//! `MemoryRecords.filterTo`): pure, given the offset map, the end of the dirty section, the
//! clock and the producers' newest batches.

use std::collections::HashSet;

use keel_record::{Record, RecordBatch};

use super::{CleanerStats, OffsetMap};
use crate::log::error::LogResult;

/// Whether `batch` holds a tombstone (a keyed record with a null value).
pub(super) fn batch_has_tombstone(batch: &RecordBatch) -> bool {
    batch
        .records()
        .any(|r| r.is_ok_and(|r| r.key.is_some() && r.value.is_none()))
}

/// The cleaned form of one batch (Kafka `Cleaner.cleanInto` + `MemoryRecords.filterTo`):
/// `None` to drop it, else the batch to write (the original bytes when nothing changes).
pub(super) fn filter_batch(
    batch: &RecordBatch,
    map: &OffsetMap,
    cleaned_upto: i64,
    now_ms: i64,
    new_horizon_ms: i64,
    producer_last_offsets: &HashSet<i64>,
    stats: &mut CleanerStats,
) -> LogResult<Option<RecordBatch>> {
    let h = batch.header();
    if h.base_offset >= cleaned_upto {
        stats.records_retained += h.record_count.max(0) as u64;
        return Ok(Some(batch.clone()));
    }
    let horizon = h.delete_horizon_ms();
    let tombstones_expired = horizon.is_some_and(|t| t <= now_ms);
    let mut retained: Vec<Record> = Vec::new();
    let mut removed = 0u64;
    let mut tombstone_kept = false;
    for r in batch.records() {
        let r = r?;
        let offset = h.base_offset + i64::from(r.offset_delta);
        let keep = if offset >= cleaned_upto {
            true
        } else {
            match &r.key {
                Some(key) => {
                    let latest = map.get(key).is_none_or(|o| offset >= o);
                    latest && (r.value.is_some() || !tombstones_expired)
                }
                None => false,
            }
        };
        if keep {
            tombstone_kept |= r.key.is_some() && r.value.is_none();
            retained.push(r);
        } else {
            removed += 1;
        }
    }
    stats.records_removed += removed;
    stats.records_retained += retained.len() as u64;
    let set_horizon = (tombstone_kept && horizon.is_none()).then_some(new_horizon_ms);
    if removed == 0 && set_horizon.is_none() {
        return Ok(Some(batch.clone()));
    }
    if retained.is_empty() {
        if h.has_producer_id() && producer_last_offsets.contains(&h.last_offset()) {
            // Kafka `BatchRetention.RETAIN_EMPTY`: the producer's newest batch carries its
            // sequence and epoch.
            return Ok(Some(batch.rebuilt_with(&[], None)));
        }
        stats.batches_removed += 1;
        return Ok(None);
    }
    Ok(Some(batch.rebuilt_with(&retained, set_horizon)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_record::RecordBatchBuilder;

    /// A batch at offset 100 of (key, value) records, `None` key = keyless, `None` value =
    /// a tombstone; producer 7 when `idempotent`.
    fn batch(records: &[(Option<&str>, Option<&str>)], idempotent: bool) -> RecordBatch {
        let mut b = RecordBatchBuilder::new(100);
        if idempotent {
            b = b.producer(7, 0, 0);
        }
        for (k, v) in records {
            b.append(1_000, k.map(str::as_bytes), v.map(str::as_bytes), &[]);
        }
        b.build()
    }

    /// Offsets kept, and the delete horizon of the result (`None` = batch dropped).
    fn kept(b: &RecordBatch, out: Option<RecordBatch>) -> Option<(Vec<i64>, Option<i64>)> {
        let out = out?;
        assert_eq!(out.base_offset(), b.base_offset());
        assert_eq!(out.last_offset(), b.last_offset());
        let offsets = out
            .records()
            .map(|r| out.base_offset() + i64::from(r.unwrap().offset_delta))
            .collect();
        Some((offsets, out.header().delete_horizon_ms()))
    }

    /// Rows: (why, records, keys mapped (key, latest offset), end of the dirty section,
    /// producer's newest batch ends here, expected).
    #[test]
    fn what_a_batch_keeps() {
        type Row = (
            &'static str,
            Vec<(Option<&'static str>, Option<&'static str>)>,
            Vec<(&'static str, i64)>,
            i64,
            bool,
            Option<(Vec<i64>, Option<i64>)>,
        );
        let rows: Vec<Row> = vec![
            (
                "superseded values go, the latest stays",
                vec![(Some("a"), Some("1")), (Some("a"), Some("2"))],
                vec![("a", 101)],
                200,
                false,
                Some((vec![101], None)),
            ),
            (
                "a key the map does not know (clean section) stays",
                vec![(Some("b"), Some("1"))],
                vec![("a", 150)],
                200,
                false,
                Some((vec![100], None)),
            ),
            (
                "past the end of the dirty section everything stays",
                vec![(Some("a"), Some("1")), (Some("a"), Some("2"))],
                vec![("a", 150)],
                101,
                false,
                Some((vec![101], None)),
            ),
            (
                "a kept tombstone gets the delete horizon now + delete.retention.ms",
                vec![(Some("a"), Some("1")), (Some("a"), None)],
                vec![("a", 101)],
                200,
                false,
                Some((vec![101], Some(5_000 + 60_000))),
            ),
            (
                "keyless records below the end go",
                vec![(None, Some("1")), (Some("a"), Some("2"))],
                vec![("a", 101)],
                200,
                false,
                Some((vec![101], None)),
            ),
            (
                "a batch with nothing left is dropped",
                vec![(Some("a"), Some("1"))],
                vec![("a", 150)],
                200,
                false,
                None,
            ),
            (
                "unless it is its producer's newest batch: kept empty",
                vec![(Some("a"), Some("1"))],
                vec![("a", 150)],
                200,
                true,
                Some((vec![], None)),
            ),
        ];
        for (why, records, mapped, upto, producers_last, want) in rows {
            let b = batch(&records, producers_last);
            let mut map = OffsetMap::new(100);
            for (k, o) in mapped {
                map.put(k.as_bytes(), o);
            }
            let last: HashSet<i64> = producers_last
                .then_some(b.last_offset())
                .into_iter()
                .collect();
            let mut stats = CleanerStats::default();
            let out = filter_batch(&b, &map, upto, 5_000, 65_000, &last, &mut stats).unwrap();
            assert_eq!(kept(&b, out), want, "{why}");
        }
    }

    /// A tombstone whose batch's horizon has passed goes; before it, it stays.
    #[test]
    fn tombstones_go_once_the_horizon_passed() {
        let b = batch(&[(Some("a"), None)], false).rebuilt_with(
            &batch(&[(Some("a"), None)], false)
                .records()
                .map(|r| r.unwrap())
                .collect::<Vec<_>>(),
            Some(10_000),
        );
        let map = OffsetMap::new(10);
        let none = HashSet::new();
        let mut stats = CleanerStats::default();
        let before = filter_batch(&b, &map, 200, 9_999, 0, &none, &mut stats).unwrap();
        assert_eq!(kept(&b, before), Some((vec![100], Some(10_000))));
        let after = filter_batch(&b, &map, 200, 10_000, 0, &none, &mut stats).unwrap();
        assert_eq!(kept(&b, after), None);
        assert_eq!(stats.records_removed, 1);
    }
}
