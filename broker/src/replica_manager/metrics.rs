//! Data-plane metrics of the replica manager (issue #7), recorded under the names reserved and
//! described in [`crate::observe::RESERVED`] (Kafka counterparts there and in the README).
//!
//! - gauges (sampled by the ticker every [`GAUGE_INTERVAL_MS`]): under-replicated,
//!   under-min-ISR and at-min-ISR partitions led here, leader and partition counts, the
//!   largest follower lag behind its leader's HW ([`PartitionGauges::from_roles`] is pure);
//! - counters: ISR shrinks and expands the leaders here start, failed ISR updates
//!   (AlterPartition answers other than the change), produce and fetch requests, bytes in
//!   and out;
//! - histograms: produce and fetch request time (`source` = consumer or follower), log
//!   flush time of the periodic flusher.
//!
//! Without a recorder (no `metrics_listener`) every call is a no-op.

use std::time::Duration;

use crate::replica::{IsrEvent, IsrEventKind};

/// Gauge sampling period, ms.
pub const GAUGE_INTERVAL_MS: u64 = 500;

/// One partition as the gauges see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartitionRole {
    /// Led here: committed ISR size, replica count, effective min.insync.replicas.
    Leader {
        /// Committed ISR size.
        isr: usize,
        /// Replication factor.
        replicas: usize,
        /// Effective `min.insync.replicas`.
        min_insync: usize,
    },
    /// Followed here: offsets behind the leader's last reported HW (0 when unknown).
    Follower {
        /// Lag in offsets.
        lag: i64,
    },
    /// Hosted with no role yet.
    None,
}

/// The sampled gauge values.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PartitionGauges {
    /// Led partitions with ISR < replicas (Kafka `UnderReplicatedPartitions`).
    pub under_replicated: u64,
    /// Led partitions with ISR < min.insync.replicas (`UnderMinIsrPartitionCount`).
    pub under_min_isr: u64,
    /// Led partitions with ISR = min.insync.replicas (`AtMinIsrPartitionCount`).
    pub at_min_isr: u64,
    /// Partitions led here (`LeaderCount`).
    pub leaders: u64,
    /// Partitions hosted here (`PartitionCount`).
    pub partitions: u64,
    /// Largest follower lag in offsets (`ReplicaFetcherManager MaxLag`).
    pub fetcher_max_lag: i64,
}

impl PartitionGauges {
    /// Folds the roles of every hosted partition.
    pub fn from_roles(roles: impl IntoIterator<Item = PartitionRole>) -> Self {
        let mut g = PartitionGauges::default();
        for r in roles {
            g.partitions += 1;
            match r {
                PartitionRole::Leader {
                    isr,
                    replicas,
                    min_insync,
                } => {
                    g.leaders += 1;
                    g.under_replicated += u64::from(isr < replicas);
                    g.under_min_isr += u64::from(isr < min_insync);
                    g.at_min_isr += u64::from(isr == min_insync);
                }
                PartitionRole::Follower { lag } => g.fetcher_max_lag = g.fetcher_max_lag.max(lag),
                PartitionRole::None => {}
            }
        }
        g
    }

    /// Sets the gauges.
    pub fn record(&self) {
        metrics::gauge!("keel_broker_under_replicated_partitions")
            .set(self.under_replicated as f64);
        metrics::gauge!("keel_broker_under_min_isr_partitions").set(self.under_min_isr as f64);
        metrics::gauge!("keel_broker_at_min_isr_partitions").set(self.at_min_isr as f64);
        metrics::gauge!("keel_broker_leader_count").set(self.leaders as f64);
        metrics::gauge!("keel_broker_partition_count").set(self.partitions as f64);
        metrics::gauge!("keel_broker_replica_fetcher_max_lag").set(self.fetcher_max_lag as f64);
    }
}

/// Counts an ISR event: a shrink or an expansion the leader starts (like Kafka's
/// `IsrShrinksPerSec` / `IsrExpandsPerSec`, marked when the leader decides; the commit may
/// reach it as an AlterPartition answer or as newer metadata), and a `Rejected` answer as a
/// failed update.
pub fn record_isr_event(e: &IsrEvent) {
    match e.kind {
        IsrEventKind::Shrinking => metrics::counter!("keel_broker_isr_shrinks_total").increment(1),
        IsrEventKind::Expanding => metrics::counter!("keel_broker_isr_expands_total").increment(1),
        IsrEventKind::Rejected => {
            metrics::counter!("keel_broker_failed_isr_updates_total").increment(1)
        }
        IsrEventKind::Updated => {}
    }
}

/// A served Produce: its time and the bytes appended.
pub fn record_produce(elapsed: Duration, bytes_in: u64) {
    metrics::counter!("keel_broker_produce_requests_total").increment(1);
    metrics::histogram!("keel_broker_produce_request_duration_seconds")
        .record(elapsed.as_secs_f64());
    if bytes_in > 0 {
        metrics::counter!("keel_broker_bytes_in_total").increment(bytes_in);
    }
}

/// A served Fetch from a consumer or a follower: its time and the record bytes sent.
pub fn record_fetch(follower: bool, elapsed: Duration, bytes_out: u64) {
    let source = if follower { "follower" } else { "consumer" };
    metrics::counter!("keel_broker_fetch_requests_total", "source" => source).increment(1);
    metrics::histogram!("keel_broker_fetch_request_duration_seconds", "source" => source)
        .record(elapsed.as_secs_f64());
    if bytes_out > 0 {
        metrics::counter!("keel_broker_bytes_out_total").increment(bytes_out);
    }
}

/// Name of the gauge of Fetch requests received and not yet answered.
pub const FETCH_REQUESTS_IN_FLIGHT: &str = "keel_broker_fetch_requests_in_flight";

/// One Fetch counted in [`FETCH_REQUESTS_IN_FLIGHT`] from [`InFlightFetch::enter`] until it is
/// dropped: answered, or cancelled because the client went away.
#[derive(Debug)]
pub struct InFlightFetch {
    source: &'static str,
}

impl InFlightFetch {
    /// Counts a Fetch from a follower (`true`) or a consumer.
    pub fn enter(follower: bool) -> Self {
        let source = if follower { "follower" } else { "consumer" };
        metrics::gauge!(FETCH_REQUESTS_IN_FLIGHT, "source" => source).increment(1.0);
        Self { source }
    }
}

impl Drop for InFlightFetch {
    fn drop(&mut self) {
        metrics::gauge!(FETCH_REQUESTS_IN_FLIGHT, "source" => self.source).decrement(1.0);
    }
}

/// One log flush by the periodic flusher.
pub fn record_flush(elapsed: Duration) {
    metrics::histogram!("keel_broker_log_flush_duration_seconds").record(elapsed.as_secs_f64());
}

/// A completed log cleaner pass (Kafka `LogCleaner` metrics: `cleaner-recopy-percent` and
/// `max-clean-time-secs` come from these counters and the histogram).
pub fn record_cleaner_pass(stats: &crate::log::CleanerStats, elapsed: Duration) {
    metrics::counter!("keel_broker_log_cleaner_runs_total").increment(1);
    metrics::counter!("keel_broker_log_cleaner_bytes_read_total").increment(stats.bytes_read);
    metrics::counter!("keel_broker_log_cleaner_bytes_written_total").increment(stats.bytes_written);
    metrics::counter!("keel_broker_log_cleaner_records_removed_total")
        .increment(stats.records_removed);
    metrics::histogram!("keel_broker_log_cleaner_pass_duration_seconds")
        .record(elapsed.as_secs_f64());
}

/// The cleaner gauges, set every time the ticker looks for a log to clean: the highest dirty
/// ratio of a compacted log here, in percent (Kafka `LogCleanerManager.max-dirty-percent`),
/// and the time since the last completed pass, ms (`time-since-last-run-ms`; since start
/// before the first pass).
pub fn record_cleaner_gauges(max_dirty_ratio: f64, since_last_run_ms: u64) {
    metrics::gauge!("keel_broker_log_cleaner_max_dirty_percent").set(max_dirty_ratio * 100.0);
    metrics::gauge!("keel_broker_log_cleaner_time_since_last_run_ms").set(since_last_run_ms as f64);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gauges_fold_roles_like_kafka() {
        let g = PartitionGauges::from_roles([
            PartitionRole::Leader {
                isr: 3,
                replicas: 3,
                min_insync: 2,
            },
            PartitionRole::Leader {
                isr: 2,
                replicas: 3,
                min_insync: 2,
            },
            PartitionRole::Leader {
                isr: 1,
                replicas: 3,
                min_insync: 2,
            },
            PartitionRole::Follower { lag: 7 },
            PartitionRole::Follower { lag: 2 },
            PartitionRole::None,
        ]);
        assert_eq!(
            g,
            PartitionGauges {
                under_replicated: 2,
                under_min_isr: 1,
                at_min_isr: 1,
                leaders: 3,
                partitions: 6,
                fetcher_max_lag: 7,
            }
        );
        assert_eq!(PartitionGauges::from_roles([]), PartitionGauges::default());
    }
}
