//! [`ReplicaConfig`]: the knobs of the replication rules of one partition (DESIGN §6 names).

/// Largest replication factor the rules accept: bounds the follower map and every ISR list
/// (Kafka has no hard limit; 64 is far above any sane replication factor).
pub const MAX_REPLICAS: usize = 64;

/// Default bound on the acks=all waiters of one partition (see [`ReplicaConfig::max_waiters`]).
pub const DEFAULT_MAX_WAITERS: usize = 10_000;

/// Replication settings of one partition. Time values are milliseconds of the caller's
/// monotonic clock (the same clock as every `now_ms` argument).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicaConfig {
    /// `replica.lag.time.max.ms` (Kafka default 30000): a follower that has not been caught
    /// up to the leader's LEO for longer than this leaves the ISR. The caller checks every
    /// half of it ([`ReplicaConfig::isr_check_interval_ms`]).
    pub replica_lag_time_max_ms: u64,
    /// `min.insync.replicas` (Kafka default 1; topic config overrides the cluster default).
    /// Always >= 1.
    pub min_insync_replicas: usize,
    /// Optional offset-lag bound, MiniKafka's `replica_lag_max_offsets` (Kafka's removed
    /// `replica.lag.max.messages`): a follower whose LEO is more than this many offsets
    /// behind the leader's LEO is out of sync. `None` (default) = Kafka's time-only rule.
    /// Meant for deterministic experiments (seed 000's lab uses 0).
    pub replica_lag_max_messages: Option<u64>,
    /// Bound on pending acks=all waiters; a produce that would exceed it is rejected before
    /// the append with REQUEST_TIMED_OUT (log unchanged).
    pub max_waiters: usize,
    /// Delay before an AlterPartition is sent again after a retriable failure
    /// (NOT_CONTROLLER, timeouts, transport errors), and before a new proposal after
    /// INELIGIBLE_REPLICA (Kafka's AlterPartitionManager retries after a backoff too).
    pub alter_partition_retry_backoff_ms: u64,
}

impl Default for ReplicaConfig {
    fn default() -> Self {
        Self {
            replica_lag_time_max_ms: 30_000,
            min_insync_replicas: 1,
            replica_lag_max_messages: None,
            max_waiters: DEFAULT_MAX_WAITERS,
            alter_partition_retry_backoff_ms: 100,
        }
    }
}

impl ReplicaConfig {
    /// How often the caller should call `maybe_shrink_isr`: half of the lag time, at least
    /// 1 ms (Kafka `ReplicaManager.startup` schedules `isr-expiration` at `lag / 2`).
    pub fn isr_check_interval_ms(&self) -> u64 {
        (self.replica_lag_time_max_ms / 2).max(1)
    }

    /// `min_insync_replicas`, treating 0 as 1 (an ISR always holds the leader).
    pub fn effective_min_insync(&self) -> usize {
        self.min_insync_replicas.max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_follow_kafka() {
        let c = ReplicaConfig::default();
        assert_eq!(c.replica_lag_time_max_ms, 30_000);
        assert_eq!(c.min_insync_replicas, 1);
        assert_eq!(c.replica_lag_max_messages, None);
        assert_eq!(c.isr_check_interval_ms(), 15_000);
        let zero = ReplicaConfig {
            replica_lag_time_max_ms: 1,
            min_insync_replicas: 0,
            ..c
        };
        assert_eq!(zero.isr_check_interval_ms(), 1);
        assert_eq!(zero.effective_min_insync(), 1);
    }
}
