//! The judgement of `keelctl verify`, pure: given which numbered records were acknowledged
//! and what was read back (partition, number, in offset order per partition), count the
//! lost, duplicated and reordered records (DESIGN §7, invariants 1 and 4).

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::Serialize;

/// Outcome of a verify run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct VerifyReport {
    /// Records sent.
    pub produced: u64,
    /// Records the cluster acknowledged (acks=all).
    pub acknowledged: u64,
    /// Records of this run read back (duplicates included).
    pub read: u64,
    /// Acknowledged records never read back.
    pub lost: u64,
    /// Extra copies read (a record read 3 times counts 2).
    pub duplicated: u64,
    /// Records read after a higher-numbered record of the same partition (send order broken
    /// within a partition).
    pub reordered: u64,
    /// Partitions the run's records were read from.
    pub partitions: u64,
}

impl VerifyReport {
    /// Counts for `produced` records of which `acknowledged` (numbers) were acknowledged;
    /// `read` lists (partition, number) in offset order within each partition.
    pub fn compute(produced: u64, acknowledged: &[u64], read: &[(i32, u64)]) -> VerifyReport {
        let mut seen: HashMap<u64, u64> = HashMap::new();
        let mut max_per_partition: BTreeMap<i32, u64> = BTreeMap::new();
        let mut reordered = 0;
        for (partition, n) in read {
            *seen.entry(*n).or_default() += 1;
            match max_per_partition.get_mut(partition) {
                Some(max) if *n < *max => reordered += 1,
                Some(max) => *max = *n,
                None => {
                    max_per_partition.insert(*partition, *n);
                }
            }
        }
        let acked: HashSet<u64> = acknowledged.iter().copied().collect();
        VerifyReport {
            produced,
            acknowledged: acked.len() as u64,
            read: read.len() as u64,
            lost: acked.iter().filter(|n| !seen.contains_key(n)).count() as u64,
            duplicated: seen.values().map(|c| c - 1).sum(),
            reordered,
            partitions: max_per_partition.len() as u64,
        }
    }

    /// True when nothing was lost, duplicated or reordered and every record was acknowledged.
    pub fn healthy(&self) -> bool {
        self.lost == 0
            && self.duplicated == 0
            && self.reordered == 0
            && self.acknowledged == self.produced
    }
}

/// The value of record `n` of verify run `run`: `keel-verify <run> <n>`.
pub fn value(run: &str, n: u64) -> String {
    format!("keel-verify {run} {n}")
}

/// The number of a record of run `run`, or `None` for other records.
pub fn parse_value(run: &str, value: &[u8]) -> Option<u64> {
    let s = std::str::from_utf8(value).ok()?;
    let rest = s.strip_prefix("keel-verify ")?.strip_prefix(run)?;
    rest.strip_prefix(' ')?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clean_run_is_healthy() {
        let read = [(0, 0), (1, 1), (0, 2), (1, 3)];
        let r = VerifyReport::compute(4, &[0, 1, 2, 3], &read);
        assert_eq!(
            r,
            VerifyReport {
                produced: 4,
                acknowledged: 4,
                read: 4,
                lost: 0,
                duplicated: 0,
                reordered: 0,
                partitions: 2,
            }
        );
        assert!(r.healthy());
    }

    #[test]
    fn lost_duplicated_and_reordered_are_counted() {
        // 2 acknowledged but missing; 1 read three times; partition 0 goes 3 then 1.
        let read = [(0, 0), (0, 3), (0, 1), (1, 1), (1, 1), (1, 4)];
        let r = VerifyReport::compute(5, &[0, 1, 2, 3, 4], &read);
        assert_eq!(r.lost, 1);
        assert_eq!(r.duplicated, 2);
        // (0,1) after (0,3); (1,1) twice is not a reorder (equal, counted as duplicate).
        assert_eq!(r.reordered, 1);
        assert!(!r.healthy());
        // An unacknowledged record that is missing is not "lost", but the run is unhealthy.
        let r = VerifyReport::compute(2, &[0], &[(0, 0)]);
        assert_eq!(r.lost, 0);
        assert!(!r.healthy());
    }

    #[test]
    fn values_round_trip_and_other_runs_are_ignored() {
        let v = value("r1", 42);
        assert_eq!(parse_value("r1", v.as_bytes()), Some(42));
        assert_eq!(parse_value("r2", v.as_bytes()), None);
        assert_eq!(parse_value("r1", b"keel-verify r1x 3"), None);
        assert_eq!(parse_value("r1", b"hello"), None);
    }
}
