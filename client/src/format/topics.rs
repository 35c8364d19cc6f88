//! `keelctl topic list|describe`: topic and partition rows built from a metadata image, the
//! `--under-replicated` / `--under-min-isr` / `--unavailable` filters, and their text form
//! (`kafka-topics --describe` layout).

use std::collections::BTreeMap;

use keel_metadata_log::records::LeaderRecoveryState;
use keel_metadata_log::{ConfigResource, MetadataImage, NO_LEADER, TopicImage};
use serde::Serialize;

use super::{ids, table};

/// One partition's replica state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PartitionRow {
    /// Partition id.
    pub partition: i32,
    /// Leader broker id, -1 = none (offline).
    pub leader: i32,
    /// Assignment, preferred leader first.
    pub replicas: Vec<i32>,
    /// In-sync replicas.
    pub isr: Vec<i32>,
    /// Leader epoch.
    pub leader_epoch: i32,
    /// Partition epoch (KIP-497).
    pub partition_epoch: i32,
    /// `RECOVERED`, or `RECOVERING` after an unclean election.
    pub leader_recovery_state: String,
    /// Replicas on fenced or unregistered brokers.
    pub offline_replicas: Vec<i32>,
    /// Replicas a reassignment in progress adds (KIP-455; empty when none moves; left out of
    /// the JSON then).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub adding_replicas: Vec<i32>,
    /// Replicas a reassignment in progress removes (likewise).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub removing_replicas: Vec<i32>,
    /// The leader's high watermark, when the leader broker answered DescribeReplicas.
    pub high_watermark: Option<i64>,
    /// The `min.insync.replicas` the leader enforces (topic override, else the cluster
    /// default, else its own static `min_insync_replicas`), when it answered DescribeReplicas.
    /// The controllers do not know the brokers' static settings; the leader's answer is what
    /// acks=all writes meet (Kafka serves DescribeConfigs from a broker for this reason).
    pub min_insync_replicas: Option<i32>,
}

/// One topic with its partitions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TopicDescription {
    /// Topic name.
    pub name: String,
    /// Topic id (UUID).
    pub topic_id: String,
    /// Number of partitions.
    pub partition_count: usize,
    /// Replication factor (replicas of partition 0).
    pub replication_factor: usize,
    /// Topic config overrides.
    pub configs: BTreeMap<String, String>,
    /// Effective `min.insync.replicas`, when known.
    pub min_insync_replicas: Option<i32>,
    /// Partitions in id order (after filters).
    pub partitions: Vec<PartitionRow>,
}

/// Which partitions `topic describe` shows; none set = all. Several set = any of them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PartitionFilter {
    /// ISR smaller than the replica set.
    pub under_replicated: bool,
    /// ISR smaller than `min.insync.replicas`.
    pub under_min_isr: bool,
    /// No leader, or the leader's broker is fenced or unregistered.
    pub unavailable: bool,
}

impl PartitionFilter {
    /// True when no filter is set.
    pub fn is_empty(&self) -> bool {
        !(self.under_replicated || self.under_min_isr || self.unavailable)
    }

    /// Whether `row` passes, given the topic's effective `min.insync.replicas` (the row's
    /// leader-reported value wins when known).
    pub fn keep(&self, row: &PartitionRow, min_isr: Option<i32>) -> bool {
        if self.is_empty() {
            return true;
        }
        let min_isr = row.min_insync_replicas.or(min_isr);
        (self.under_replicated && row.isr.len() < row.replicas.len())
            || (self.under_min_isr && min_isr.is_some_and(|m| (row.isr.len() as i32) < m))
            || (self.unavailable
                && (row.leader == NO_LEADER || row.offline_replicas.contains(&row.leader)))
    }
}

/// The rows of `topic` from `image` (all partitions, no high watermarks yet).
pub fn describe_topic(image: &MetadataImage, topic: &TopicImage) -> TopicDescription {
    let offline = |b: &i32| image.broker(*b).is_none_or(|r| r.fenced);
    let partitions: Vec<PartitionRow> = topic
        .partitions
        .iter()
        .map(|(id, p)| PartitionRow {
            partition: *id,
            leader: p.leader,
            replicas: p.replicas.clone(),
            isr: p.isr.clone(),
            leader_epoch: p.leader_epoch,
            partition_epoch: p.partition_epoch,
            leader_recovery_state: match p.leader_recovery_state {
                LeaderRecoveryState::Recovered => "RECOVERED".into(),
                LeaderRecoveryState::Recovering => "RECOVERING".into(),
            },
            offline_replicas: p.replicas.iter().copied().filter(|b| offline(b)).collect(),
            adding_replicas: p.adding_replicas.clone(),
            removing_replicas: p.removing_replicas.clone(),
            high_watermark: None,
            min_insync_replicas: None,
        })
        .collect();
    let configs = image
        .configs()
        .get(&ConfigResource::Topic(topic.name.clone()))
        .map(|m| (**m).clone())
        .unwrap_or_default();
    TopicDescription {
        name: topic.name.clone(),
        topic_id: topic.id.to_string(),
        partition_count: partitions.len(),
        replication_factor: partitions.first().map_or(0, |p| p.replicas.len()),
        configs,
        min_insync_replicas: None,
        partitions,
    }
}

/// Applies `filter` to every topic's partitions; topics left without partitions are dropped
/// when a filter is set.
pub fn filter_topics(
    topics: Vec<TopicDescription>,
    filter: PartitionFilter,
) -> Vec<TopicDescription> {
    topics
        .into_iter()
        .filter_map(|mut t| {
            let min_isr = t.min_insync_replicas;
            t.partitions.retain(|p| filter.keep(p, min_isr));
            (filter.is_empty() || !t.partitions.is_empty()).then_some(t)
        })
        .collect()
}

/// `kafka-topics --describe` layout: a topic line, then one tab-indented line per partition.
/// With a filter set only partition lines are printed, like Kafka.
pub fn describe_text(topics: &[TopicDescription], filtered: bool) -> String {
    let mut out = String::new();
    for t in topics {
        if !filtered {
            let configs = t
                .configs
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(",");
            out.push_str(&format!(
                "Topic: {}\tTopicId: {}\tPartitionCount: {}\tReplicationFactor: {}\tConfigs: {}\n",
                t.name, t.topic_id, t.partition_count, t.replication_factor, configs
            ));
        }
        for p in &t.partitions {
            let leader = if p.leader == NO_LEADER {
                "none".to_string()
            } else {
                p.leader.to_string()
            };
            let hw = p.high_watermark.map_or("-".to_string(), |h| h.to_string());
            out.push_str(&format!(
                "\tTopic: {}\tPartition: {}\tLeader: {}\tReplicas: {}\tIsr: {}\tLeaderEpoch: {}\tPartitionEpoch: {}\tHW: {}",
                t.name,
                p.partition,
                leader,
                ids(&p.replicas),
                ids(&p.isr),
                p.leader_epoch,
                p.partition_epoch,
                hw
            ));
            // kafka-topics --describe's columns of a partition being moved (KIP-455).
            if !p.adding_replicas.is_empty() || !p.removing_replicas.is_empty() {
                out.push_str(&format!(
                    "\tAdding Replicas: {}\tRemoving Replicas: {}",
                    ids(&p.adding_replicas),
                    ids(&p.removing_replicas)
                ));
            }
            if !p.offline_replicas.is_empty() {
                out.push_str(&format!("\tOffline: {}", ids(&p.offline_replicas)));
            }
            if p.leader_recovery_state != "RECOVERED" {
                out.push_str(&format!(
                    "\tLeaderRecoveryState: {}",
                    p.leader_recovery_state
                ));
            }
            out.push('\n');
        }
    }
    out
}

/// `topic list` table: name, id, partitions, replication factor.
pub fn list_text(topics: &[TopicDescription]) -> String {
    let rows: Vec<Vec<String>> = topics
        .iter()
        .map(|t| {
            vec![
                t.name.clone(),
                t.topic_id.clone(),
                t.partition_count.to_string(),
                t.replication_factor.to_string(),
            ]
        })
        .collect();
    table(
        &["TOPIC", "TOPIC_ID", "PARTITIONS", "REPLICATION_FACTOR"],
        &rows,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(partition: i32, leader: i32, replicas: &[i32], isr: &[i32]) -> PartitionRow {
        PartitionRow {
            partition,
            leader,
            replicas: replicas.to_vec(),
            isr: isr.to_vec(),
            leader_epoch: 2,
            partition_epoch: 5,
            leader_recovery_state: "RECOVERED".into(),
            offline_replicas: vec![],
            adding_replicas: vec![],
            removing_replicas: vec![],
            high_watermark: None,
            min_insync_replicas: None,
        }
    }

    fn topic(partitions: Vec<PartitionRow>) -> TopicDescription {
        TopicDescription {
            name: "orders".into(),
            topic_id: "00000000-0000-0000-0000-000000000001".into(),
            partition_count: partitions.len(),
            replication_factor: 3,
            configs: [("min.insync.replicas".to_string(), "2".to_string())].into(),
            min_insync_replicas: Some(2),
            partitions,
        }
    }

    #[test]
    fn describe_matches_kafka_topics_layout() {
        let mut p1 = row(1, -1, &[2, 3, 1], &[2]);
        p1.offline_replicas = vec![2, 3];
        p1.high_watermark = Some(42);
        let mut p2 = row(2, 4, &[4, 1, 2], &[1, 2, 4]);
        p2.adding_replicas = vec![4];
        p2.removing_replicas = vec![2];
        let text = describe_text(
            &[topic(vec![row(0, 1, &[1, 2, 3], &[1, 2]), p1, p2])],
            false,
        );
        assert_eq!(
            text,
            "Topic: orders\tTopicId: 00000000-0000-0000-0000-000000000001\tPartitionCount: 3\tReplicationFactor: 3\tConfigs: min.insync.replicas=2\n\
             \tTopic: orders\tPartition: 0\tLeader: 1\tReplicas: 1,2,3\tIsr: 1,2\tLeaderEpoch: 2\tPartitionEpoch: 5\tHW: -\n\
             \tTopic: orders\tPartition: 1\tLeader: none\tReplicas: 2,3,1\tIsr: 2\tLeaderEpoch: 2\tPartitionEpoch: 5\tHW: 42\tOffline: 2,3\n\
             \tTopic: orders\tPartition: 2\tLeader: 4\tReplicas: 4,1,2\tIsr: 1,2,4\tLeaderEpoch: 2\tPartitionEpoch: 5\tHW: -\tAdding Replicas: 4\tRemoving Replicas: 2\n"
        );
    }

    #[test]
    fn filters_select_partitions_and_drop_empty_topics() {
        let healthy = row(0, 1, &[1, 2, 3], &[1, 2, 3]);
        let under_replicated = row(1, 1, &[1, 2, 3], &[1, 2]);
        let under_min_isr = row(2, 1, &[1, 2, 3], &[1]);
        let mut fenced_leader = row(3, 2, &[2, 3, 1], &[2, 3, 1]);
        fenced_leader.offline_replicas = vec![2];
        let leaderless = row(4, -1, &[3, 1, 2], &[3]);
        let all = vec![
            healthy,
            under_replicated,
            under_min_isr,
            fenced_leader,
            leaderless,
        ];
        let pick = |f: PartitionFilter| -> Vec<i32> {
            filter_topics(vec![topic(all.clone())], f)
                .into_iter()
                .flat_map(|t| t.partitions)
                .map(|p| p.partition)
                .collect()
        };
        assert_eq!(pick(PartitionFilter::default()), vec![0, 1, 2, 3, 4]);
        let ur = PartitionFilter {
            under_replicated: true,
            ..Default::default()
        };
        assert_eq!(pick(ur), vec![1, 2, 4]);
        let umi = PartitionFilter {
            under_min_isr: true,
            ..Default::default()
        };
        assert_eq!(pick(umi), vec![2, 4]);
        let un = PartitionFilter {
            unavailable: true,
            ..Default::default()
        };
        assert_eq!(pick(un), vec![3, 4]);
        // The leader's reported min.insync.replicas wins over the controllers' value: a
        // broker whose static default is 3 enforces 3 on a topic without an override.
        let mut stricter = row(5, 1, &[1, 2, 3], &[1, 2]);
        stricter.min_insync_replicas = Some(3);
        let mut looser = row(6, 1, &[1, 2, 3], &[1]);
        looser.min_insync_replicas = Some(1);
        let t = topic(vec![stricter, looser]);
        let picked: Vec<i32> = filter_topics(vec![t], umi)
            .into_iter()
            .flat_map(|t| t.partitions)
            .map(|p| p.partition)
            .collect();
        assert_eq!(picked, vec![5]);
        // A topic with nothing matching disappears under a filter.
        let t = topic(vec![row(0, 1, &[1, 2, 3], &[1, 2, 3])]);
        assert!(filter_topics(vec![t], ur).is_empty());
    }

    #[test]
    fn list_is_a_table() {
        let text = list_text(&[topic(vec![row(0, 1, &[1, 2, 3], &[1, 2, 3])])]);
        assert_eq!(
            text,
            "TOPIC   TOPIC_ID                              PARTITIONS  REPLICATION_FACTOR\n\
             orders  00000000-0000-0000-0000-000000000001  1           3\n"
        );
    }
}
