//! Controller metrics (issue #7) and readiness, served on `metrics_listener` by
//! `keel-runtime`.
//!
//! Names mirror Kafka's KRaft controller metrics in Prometheus form (`keel_controller_`
//! prefix, unit suffix, `_total` counters); [`DEFS`] names each Kafka counterpart. A
//! sampler task ([`spawn_sampler`]) sets the gauges from openraft's `RaftMetrics` and the
//! applied `MetadataImage`; the write path records the event queue histograms and the
//! unclean election counter, the session logic the heartbeat timeout counter.
//!
//! The cluster-state gauges (brokers, topics, partitions, offline, imbalance) are computed by
//! every controller from its applied image, so they agree across the quorum at equal applied
//! offset: aggregate them with `max`, not `sum`. Only `active_controller_count` sums to 1.

use std::time::Duration;

use keel_metadata_log::MetadataImage;
use keel_metadata_log::raft_types::ControllerNode;
use keel_metadata_log::raft_types::TypeConfig;
use keel_runtime::{MetricDef, MetricKind, Readiness};
use metrics::Unit;
use openraft::storage::RaftLogReader;
use openraft::{EntryPayload, RaftMetrics};
use tokio::sync::watch;

use crate::node::RaftNode;

/// 1 on the active controller, 0 elsewhere.
pub const ACTIVE_CONTROLLER_COUNT: &str = "keel_controller_active_controller_count";
/// Node id of the Raft leader this node knows, -1 when none.
pub const RAFT_CURRENT_LEADER: &str = "keel_controller_raft_current_leader";
/// Current Raft term.
pub const RAFT_TERM: &str = "keel_controller_raft_term";
/// Index of the last entry in this node's Raft log.
pub const RAFT_LOG_END_OFFSET: &str = "keel_controller_raft_log_end_offset";
/// Offset of the last applied (hence committed) metadata entry.
pub const LAST_APPLIED_RECORD_OFFSET: &str = "keel_controller_last_applied_record_offset";
/// Append time of the last applied entry.
pub const LAST_APPLIED_RECORD_TIMESTAMP: &str = "keel_controller_last_applied_record_timestamp_ms";
/// Now minus the append time of the last applied entry.
pub const LAST_APPLIED_RECORD_LAG: &str = "keel_controller_last_applied_record_lag_ms";
/// Registered, unfenced brokers.
pub const ACTIVE_BROKER_COUNT: &str = "keel_controller_active_broker_count";
/// Registered, fenced brokers.
pub const FENCED_BROKER_COUNT: &str = "keel_controller_fenced_broker_count";
/// Topics.
pub const GLOBAL_TOPIC_COUNT: &str = "keel_controller_global_topic_count";
/// Partitions.
pub const GLOBAL_PARTITION_COUNT: &str = "keel_controller_global_partition_count";
/// Partitions without a leader.
pub const OFFLINE_PARTITIONS_COUNT: &str = "keel_controller_offline_partitions_count";
/// Partitions whose leader is not their preferred (first) replica.
pub const PREFERRED_REPLICA_IMBALANCE_COUNT: &str =
    "keel_controller_preferred_replica_imbalance_count";
/// Unclean leader elections committed by this node as active controller.
pub const UNCLEAN_LEADER_ELECTIONS: &str = "keel_controller_unclean_leader_elections_total";
/// Broker sessions that expired (heartbeat timeouts) and were fenced by this node.
pub const TIMED_OUT_BROKER_HEARTBEATS: &str = "keel_controller_timed_out_broker_heartbeats_total";
/// Time a write operation waited in the write task's queue.
pub const EVENT_QUEUE_TIME: &str = "keel_controller_event_queue_time_seconds";
/// Time the write task spent deciding one operation.
pub const EVENT_QUEUE_PROCESSING_TIME: &str = "keel_controller_event_queue_processing_time_seconds";

/// Time from the active controller's append of an entry (its proposal to Raft) to the entry
/// being committed and applied on the active controller.
pub const COMMIT_LATENCY: &str = "keel_controller_raft_commit_latency_seconds";

/// Every controller metric.
pub const DEFS: &[MetricDef] = &[
    MetricDef::new(
        ACTIVE_CONTROLLER_COUNT,
        MetricKind::Gauge,
        None,
        "1 when this controller is the active controller (Raft leader with a confirmed quorum), else 0; sums to 1 over a healthy quorum",
        "kafka.controller:type=KafkaController,name=ActiveControllerCount",
    ),
    MetricDef::new(
        RAFT_CURRENT_LEADER,
        MetricKind::Gauge,
        None,
        "Node id of the Raft leader this controller knows, -1 when none",
        "kafka.server:type=raft-metrics,name=current-leader",
    ),
    MetricDef::new(
        RAFT_TERM,
        MetricKind::Gauge,
        None,
        "Current Raft term (Kafka: quorum epoch)",
        "kafka.server:type=raft-metrics,name=current-epoch",
    ),
    MetricDef::new(
        RAFT_LOG_END_OFFSET,
        MetricKind::Gauge,
        None,
        "Index of the last entry in this controller's Raft log (may be uncommitted)",
        "kafka.server:type=raft-metrics,name=log-end-offset",
    ),
    MetricDef::new(
        LAST_APPLIED_RECORD_OFFSET,
        MetricKind::Gauge,
        None,
        "Metadata offset (Raft index) of the last entry applied to the state machine; applied implies committed",
        "kafka.server:type=KafkaController,name=LastAppliedRecordOffset",
    ),
    MetricDef::new(
        LAST_APPLIED_RECORD_TIMESTAMP,
        MetricKind::Gauge,
        Some(Unit::Milliseconds),
        "Append (proposal) wall-clock time of the last applied entry, ms since the Unix epoch",
        "kafka.server:type=KafkaController,name=LastAppliedRecordTimestamp",
    ),
    MetricDef::new(
        LAST_APPLIED_RECORD_LAG,
        MetricKind::Gauge,
        Some(Unit::Milliseconds),
        "Now minus the append time of the last applied entry, ms; the active controller writes a NoOpRecord every metadata_max_idle_interval_ms, so this stays below about that interval when healthy",
        "kafka.server:type=KafkaController,name=LastAppliedRecordLagMs",
    ),
    MetricDef::new(
        ACTIVE_BROKER_COUNT,
        MetricKind::Gauge,
        None,
        "Registered brokers that are not fenced",
        "kafka.controller:type=KafkaController,name=ActiveBrokerCount",
    ),
    MetricDef::new(
        FENCED_BROKER_COUNT,
        MetricKind::Gauge,
        None,
        "Registered brokers that are fenced",
        "kafka.controller:type=KafkaController,name=FencedBrokerCount",
    ),
    MetricDef::new(
        GLOBAL_TOPIC_COUNT,
        MetricKind::Gauge,
        None,
        "Topics in the cluster",
        "kafka.controller:type=KafkaController,name=GlobalTopicCount",
    ),
    MetricDef::new(
        GLOBAL_PARTITION_COUNT,
        MetricKind::Gauge,
        None,
        "Partitions in the cluster",
        "kafka.controller:type=KafkaController,name=GlobalPartitionCount",
    ),
    MetricDef::new(
        OFFLINE_PARTITIONS_COUNT,
        MetricKind::Gauge,
        None,
        "Partitions without a leader (not writable or readable)",
        "kafka.controller:type=KafkaController,name=OfflinePartitionsCount",
    ),
    MetricDef::new(
        PREFERRED_REPLICA_IMBALANCE_COUNT,
        MetricKind::Gauge,
        None,
        "Partitions whose leader is not the preferred (first assigned) replica, offline ones included",
        "kafka.controller:type=KafkaController,name=PreferredReplicaImbalanceCount",
    ),
    MetricDef::new(
        UNCLEAN_LEADER_ELECTIONS,
        MetricKind::Counter,
        None,
        "Unclean leader elections (leader chosen outside the ISR) committed while this controller was active",
        "kafka.controller:type=ControllerStats,name=UncleanLeaderElectionsPerSec",
    ),
    MetricDef::new(
        TIMED_OUT_BROKER_HEARTBEATS,
        MetricKind::Counter,
        None,
        "Brokers fenced by this controller because no heartbeat arrived within broker_session_timeout_ms",
        "kafka.controller:type=KafkaController,name=TimedOutBrokerHeartbeatCount",
    ),
    MetricDef::new(
        EVENT_QUEUE_TIME,
        MetricKind::Histogram,
        Some(Unit::Seconds),
        "Time a write request waited in the write task's queue before being decided",
        "kafka.controller:type=ControllerEventManager,name=EventQueueTimeMs",
    ),
    MetricDef::new(
        EVENT_QUEUE_PROCESSING_TIME,
        MetricKind::Histogram,
        Some(Unit::Seconds),
        "Time the write task spent deciding one write request (validation + records, before Raft)",
        "kafka.controller:type=ControllerEventManager,name=EventQueueProcessingTimeMs",
    ),
    MetricDef::new(
        COMMIT_LATENCY,
        MetricKind::Histogram,
        Some(Unit::Seconds),
        "Time from the active controller's append of an entry to its commit (a quorum wrote it) and apply on the active controller; a burst of entries (a fenced broker's thousands of partition changes) queues, so later entries of the burst wait for earlier ones",
        "kafka.server:type=raft-metrics,name=commit-latency-avg / commit-latency-max",
    ),
];

/// Counts derived from an applied image (see the module doc on aggregation).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClusterCounts {
    /// Unfenced registered brokers.
    pub active_brokers: usize,
    /// Fenced registered brokers.
    pub fenced_brokers: usize,
    /// Topics.
    pub topics: usize,
    /// Partitions.
    pub partitions: usize,
    /// Partitions with leader -1.
    pub offline_partitions: usize,
    /// Partitions whose leader is not `replicas[0]`.
    pub preferred_replica_imbalance: usize,
}

/// Counts brokers and partitions of `image`. Cost: one pass over all partitions.
pub fn cluster_counts(image: &MetadataImage) -> ClusterCounts {
    let mut c = ClusterCounts::default();
    for b in image.brokers().values() {
        if b.fenced {
            c.fenced_brokers += 1;
        } else {
            c.active_brokers += 1;
        }
    }
    c.topics = image.topics().by_id.len();
    for topic in image.topics().by_id.values() {
        for p in topic.partitions.values() {
            c.partitions += 1;
            if !p.has_leader() {
                c.offline_partitions += 1;
            }
            // Kafka (ControllerMetadataMetricsPublisher): offline partitions count as
            // imbalanced too.
            if p.replicas.first() != Some(&p.leader) {
                c.preferred_replica_imbalance += 1;
            }
        }
    }
    c
}

/// Controller readiness: a voter of the quorum that knows a leader (and, when it is the
/// leader, has confirmed quorum contact).
pub fn readiness(
    m: &RaftMetrics<u64, ControllerNode>,
    node_id: u64,
    quorum_confirmed: bool,
) -> Readiness {
    if let Err(e) = &m.running_state {
        return Readiness::not_ready(format!("raft stopped: {e}"));
    }
    let is_voter = m
        .membership_config
        .membership()
        .voter_ids()
        .any(|id| id == node_id);
    if !is_voter {
        return Readiness::not_ready(format!(
            "node {node_id} is not (yet) a voter of the metadata quorum"
        ));
    }
    let applied = m.last_applied.map_or(0, |l| l.index);
    match m.current_leader {
        None => Readiness::not_ready(format!("no known quorum leader (term {})", m.current_term)),
        Some(l) if l == node_id && !quorum_confirmed => Readiness::not_ready(format!(
            "leader of term {} without confirmed quorum contact",
            m.current_term
        )),
        Some(l) => Readiness::ready(format!(
            "voter of the quorum; leader {l}, term {}, applied offset {applied}",
            m.current_term
        )),
    }
}

/// Starts the task that refreshes the gauges and the readiness every `interval`. Returns the
/// readiness for `/health/ready`. The task ends when Raft shuts down.
pub fn spawn_sampler(
    node: RaftNode,
    interval: Duration,
) -> (watch::Receiver<Readiness>, tokio::task::JoinHandle<()>) {
    let (tx, rx) = watch::channel(Readiness::not_ready("starting"));
    let task = tokio::spawn(async move {
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut counted_offset = None;
        let mut applied_timestamp: Option<(u64, i64)> = None;
        loop {
            ticker.tick().await;
            let mut m = node.raft.metrics().borrow().clone();
            m.current_leader = node.known_leader(&m);
            if m.running_state.is_err() {
                tx.send_replace(readiness(&m, node.node_id, false));
                break;
            }
            let confirmed = *node.quorum_confirmed.borrow();
            tx.send_if_modified(|r| {
                let next = readiness(&m, node.node_id, confirmed);
                let changed = *r != next;
                *r = next;
                changed
            });
            metrics::gauge!(ACTIVE_CONTROLLER_COUNT).set(if node.is_active() { 1.0 } else { 0.0 });
            metrics::gauge!(RAFT_CURRENT_LEADER).set(m.current_leader.map_or(-1.0, |l| l as f64));
            metrics::gauge!(RAFT_TERM).set(m.current_term as f64);
            metrics::gauge!(RAFT_LOG_END_OFFSET).set(m.last_log_index.unwrap_or(0) as f64);
            let applied = m.last_applied.map_or(0, |l| l.index);
            metrics::gauge!(LAST_APPLIED_RECORD_OFFSET).set(applied as f64);
            if applied > 0
                && applied_timestamp.is_none_or(|(i, _)| i != applied)
                && let Some(ts) = append_timestamp_ms(&node, applied).await
            {
                applied_timestamp = Some((applied, ts));
            }
            if let Some((_, ts)) = applied_timestamp {
                let lag = keel_runtime::clock::wall_clock_ms()
                    .saturating_sub(ts)
                    .max(0);
                metrics::gauge!(LAST_APPLIED_RECORD_TIMESTAMP).set(ts as f64);
                metrics::gauge!(LAST_APPLIED_RECORD_LAG).set(lag as f64);
            }
            let image = node.images.borrow().clone();
            let offset = image.provenance().offset;
            if counted_offset != Some(offset) {
                counted_offset = Some(offset);
                set_cluster_gauges(cluster_counts(&image));
            }
        }
    });
    (rx, task)
}

fn set_cluster_gauges(c: ClusterCounts) {
    metrics::gauge!(ACTIVE_BROKER_COUNT).set(c.active_brokers as f64);
    metrics::gauge!(FENCED_BROKER_COUNT).set(c.fenced_brokers as f64);
    metrics::gauge!(GLOBAL_TOPIC_COUNT).set(c.topics as f64);
    metrics::gauge!(GLOBAL_PARTITION_COUNT).set(c.partitions as f64);
    metrics::gauge!(OFFLINE_PARTITIONS_COUNT).set(c.offline_partitions as f64);
    metrics::gauge!(PREFERRED_REPLICA_IMBALANCE_COUNT).set(c.preferred_replica_imbalance as f64);
}

/// The append timestamp of entry `index` (`None` when it is purged, carries no timestamp, or
/// cannot be read).
async fn append_timestamp_ms(node: &RaftNode, index: u64) -> Option<i64> {
    let mut log = node.log.clone();
    let entries: Vec<openraft::Entry<TypeConfig>> =
        log.try_get_log_entries(index..=index).await.ok()?;
    match &entries.first()?.payload {
        EntryPayload::Normal(batch) if batch.append_timestamp_ms > 0 => {
            Some(batch.append_timestamp_ms)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_metadata_log::Provenance;
    use keel_metadata_log::records::metadata_record::Record;
    use keel_metadata_log::records::{
        MetadataRecord, PartitionRecord, RegisterBrokerRecord, TopicRecord,
    };
    use std::collections::BTreeMap;

    fn rec(r: Record) -> MetadataRecord {
        MetadataRecord { record: Some(r) }
    }

    fn partition(topic: &[u8], id: i32, replicas: Vec<i32>, leader: i32) -> MetadataRecord {
        rec(Record::Partition(PartitionRecord {
            topic_id: bytes::Bytes::copy_from_slice(topic),
            partition_id: id,
            isr: if leader >= 0 {
                vec![leader]
            } else {
                vec![replicas[0]]
            },
            replicas,
            leader,
            ..Default::default()
        }))
    }

    #[test]
    fn names_follow_the_rules() {
        keel_runtime::describe::check_names(DEFS, "keel_controller_").unwrap();
    }

    #[test]
    fn counts_brokers_partitions_offline_and_imbalance() {
        let topic = uuid::Uuid::from_u128(7);
        let tid = topic.as_bytes();
        let mut records = Vec::new();
        for (id, fenced) in [(1, false), (2, false), (3, true)] {
            records.push(rec(Record::RegisterBroker(RegisterBrokerRecord {
                broker_id: id,
                incarnation_id: bytes::Bytes::copy_from_slice(
                    uuid::Uuid::from_u128(100 + id as u128).as_bytes(),
                ),
                broker_epoch: id as i64,
                fenced,
                ..Default::default()
            })));
        }
        records.push(rec(Record::Topic(TopicRecord {
            name: "t".into(),
            topic_id: bytes::Bytes::copy_from_slice(tid),
        })));
        records.push(partition(tid, 0, vec![1, 2], 1)); // balanced
        records.push(partition(tid, 1, vec![1, 2], 2)); // imbalanced
        records.push(partition(tid, 2, vec![3, 2], -1)); // offline (and imbalanced)
        let image = MetadataImage::empty()
            .with_records(Provenance { offset: 1, term: 1 }, &records)
            .unwrap_or_else(|(i, e)| panic!("record {i}: {e}"));
        assert_eq!(
            cluster_counts(&image),
            ClusterCounts {
                active_brokers: 2,
                fenced_brokers: 1,
                topics: 1,
                partitions: 3,
                offline_partitions: 1,
                preferred_replica_imbalance: 2,
            }
        );
        assert_eq!(
            cluster_counts(&MetadataImage::empty()),
            ClusterCounts::default()
        );
    }

    fn metrics_with(leader: Option<u64>, voters: &[u64]) -> RaftMetrics<u64, ControllerNode> {
        let mut m = RaftMetrics::new_initial(1);
        m.current_term = 4;
        m.current_leader = leader;
        let nodes: BTreeMap<u64, ControllerNode> = voters
            .iter()
            .map(|id| (*id, ControllerNode::new(&format!("h:{id}"), None).unwrap()))
            .collect();
        let membership = openraft::Membership::new(vec![voters.iter().copied().collect()], nodes);
        m.membership_config =
            std::sync::Arc::new(openraft::StoredMembership::new(None, membership));
        m
    }

    #[test]
    fn readiness_needs_membership_a_leader_and_quorum_contact() {
        let r = readiness(&metrics_with(Some(2), &[2, 3, 4]), 1, true);
        assert!(!r.ready && r.detail.contains("not (yet) a voter"), "{r:?}");
        let r = readiness(&metrics_with(None, &[1, 2, 3]), 1, true);
        assert!(
            !r.ready && r.detail.contains("no known quorum leader (term 4)"),
            "{r:?}"
        );
        let r = readiness(&metrics_with(Some(1), &[1, 2, 3]), 1, false);
        assert!(
            !r.ready && r.detail.contains("without confirmed quorum"),
            "{r:?}"
        );
        let r = readiness(&metrics_with(Some(1), &[1, 2, 3]), 1, true);
        assert!(r.ready && r.detail.contains("leader 1, term 4"), "{r:?}");
        let r = readiness(&metrics_with(Some(2), &[1, 2, 3]), 1, false);
        assert!(
            r.ready,
            "a follower does not need its own quorum check: {r:?}"
        );
    }
}
