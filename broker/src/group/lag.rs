//! Consumer lag of the groups a broker coordinates (issue #22 metrics), sampled every
//! [`LAG_INTERVAL`]: for each group, the sum over its committed partitions of
//! `max(0, high watermark - committed offset)`, exported as
//! `keel_broker_group_consumer_lag{group}` (the name kafka_exporter gives the same sum is
//! `kafka_consumergroup_lag_sum`; Kafka's brokers export none, its consumers a per-client
//! `records-lag-max`).
//!
//! High watermarks come from the partitions' leaders: ListOffsets LATEST (the HW, what a
//! consumer can read up to), answered by the local replica manager for partitions led here
//! and by one gRPC ListOffsets per other leader, each bounded by [`LAG_REQUEST_TIMEOUT`]. A
//! partition whose leader is unknown or does not answer is left out of that sample (its
//! group's lag is then a lower bound; the log says so at debug level).
//!
//! Bounds: at most [`MAX_LAG_GROUPS`] groups per broker are exported (the first by id), so
//! the metric's series stay bounded; a group that is no longer coordinated here is set to 0
//! once (the Prometheus exporter cannot drop a series), so summing over brokers stays right
//! after the group moves.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use keel_metadata_log::MetadataImage;
use keel_proto::broker::broker_service_client::BrokerServiceClient;
use keel_proto::broker::{
    ListOffsetsPartition, ListOffsetsReply, ListOffsetsRequest, ListOffsetsTopic,
};
use tonic::transport::Channel;

use crate::replica_manager::ReplicaManager;

/// Between two lag samples.
pub const LAG_INTERVAL: Duration = Duration::from_secs(10);

/// Deadline of one ListOffsets to another broker.
pub const LAG_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Most groups whose lag one broker exports.
pub const MAX_LAG_GROUPS: usize = 1000;

/// The gauge's name.
pub const CONSUMER_LAG: &str = "keel_broker_group_consumer_lag";

/// One committed offset: (group, topic, partition, offset).
pub type Committed = (String, String, i32, i64);

/// Lag per group from `committed` and the known high watermarks (pure): partitions without
/// a known HW are left out; a committed offset above the HW (a truncated log) counts 0.
pub fn lag_by_group(
    committed: &[Committed],
    hws: &HashMap<(String, i32), i64>,
) -> BTreeMap<String, i64> {
    let mut out: BTreeMap<String, i64> = BTreeMap::new();
    for (group, topic, partition, offset) in committed {
        let entry = out.entry(group.clone()).or_default();
        if let Some(hw) = hws.get(&(topic.clone(), *partition)) {
            *entry += (hw - offset).max(0);
        }
    }
    out
}

/// The request for the HWs of `partitions` (pure).
fn latest_request(partitions: &[(String, i32)]) -> ListOffsetsRequest {
    let mut topics: BTreeMap<&str, Vec<ListOffsetsPartition>> = BTreeMap::new();
    for (t, p) in partitions {
        topics.entry(t).or_default().push(ListOffsetsPartition {
            partition_index: *p,
            current_leader_epoch: None,
            timestamp: -1,
        });
    }
    ListOffsetsRequest {
        replica_id: -1,
        isolation_level: 0,
        topics: topics
            .into_iter()
            .map(|(name, partitions)| ListOffsetsTopic {
                name: name.to_string(),
                partitions,
            })
            .collect(),
    }
}

/// The HWs a reply gives (partitions answered without error).
fn hws_of(reply: ListOffsetsReply, into: &mut HashMap<(String, i32), i64>) {
    for t in reply.topics {
        for p in t.partitions {
            if p.error.as_ref().is_none_or(|e| e.code == 0) && p.offset >= 0 {
                into.insert((t.name.clone(), p.partition_index), p.offset);
            }
        }
    }
}

/// Samples high watermarks; keeps a connection per other broker.
#[derive(Debug, Default)]
pub struct LagSampler {
    /// Broker id -> (address, client).
    clients: HashMap<i32, (String, BrokerServiceClient<Channel>)>,
    /// Groups exported by the previous sample (set to 0 when they go).
    exported: BTreeSet<String>,
}

impl LagSampler {
    /// The HWs of `partitions` from their leaders in `image`.
    pub async fn high_watermarks(
        &mut self,
        partitions: &BTreeSet<(String, i32)>,
        image: &MetadataImage,
        rm: &ReplicaManager,
    ) -> HashMap<(String, i32), i64> {
        let mut by_leader: BTreeMap<i32, Vec<(String, i32)>> = BTreeMap::new();
        for (t, p) in partitions {
            let leader = image
                .topics()
                .get_by_name(t)
                .and_then(|topic| topic.partitions.get(p))
                .map_or(-1, |r| r.leader);
            if leader >= 0 {
                by_leader.entry(leader).or_default().push((t.clone(), *p));
            }
        }
        let mut hws = HashMap::new();
        for (leader, parts) in by_leader {
            let request = latest_request(&parts);
            if leader == rm.broker_id() {
                hws_of(rm.list_offsets(request), &mut hws);
                continue;
            }
            let Some(mut client) = self.client(leader, image, rm.dialer()) else {
                tracing::debug!("consumer lag: no endpoint for broker {leader}");
                continue;
            };
            match tokio::time::timeout(LAG_REQUEST_TIMEOUT, client.list_offsets(request)).await {
                Ok(Ok(reply)) => hws_of(reply.into_inner(), &mut hws),
                Ok(Err(e)) => {
                    tracing::debug!("consumer lag: broker {leader}: {}", e.message());
                    self.clients.remove(&leader);
                }
                Err(_) => tracing::debug!("consumer lag: broker {leader} did not answer"),
            }
        }
        hws
    }

    fn client(
        &mut self,
        id: i32,
        image: &MetadataImage,
        dialer: &keel_runtime::tls::Dialer,
    ) -> Option<BrokerServiceClient<Channel>> {
        let ep = image.broker(id)?.endpoints.first()?;
        let addr = format!("{}:{}", ep.host, ep.port);
        if let Some((known, c)) = self.clients.get(&id)
            && *known == addr
        {
            return Some(c.clone());
        }
        let endpoint = keel_runtime::tls::Dialer::broker_endpoint(&addr)
            .ok()?
            .connect_timeout(LAG_REQUEST_TIMEOUT)
            .timeout(LAG_REQUEST_TIMEOUT);
        let channel = dialer.connect_lazy(&endpoint);
        let c = BrokerServiceClient::new(channel);
        self.clients.insert(id, (addr, c.clone()));
        Some(c)
    }

    /// Sets the gauge of every group in `lags` and 0 for groups exported before and gone.
    pub fn export(&mut self, lags: &BTreeMap<String, i64>) {
        for (group, lag) in lags {
            metrics::gauge!(CONSUMER_LAG, "group" => group.clone()).set(*lag as f64);
        }
        let now: BTreeSet<String> = lags.keys().cloned().collect();
        for gone in self.exported.difference(&now) {
            metrics::gauge!(CONSUMER_LAG, "group" => gone.clone()).set(0.0);
        }
        self.exported = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lag_sums_per_group_and_skips_unknown_high_watermarks() {
        let committed: Vec<Committed> = vec![
            ("a".into(), "t".into(), 0, 10),
            ("a".into(), "t".into(), 1, 5),
            ("a".into(), "u".into(), 0, 3),
            ("b".into(), "t".into(), 0, 12),
        ];
        let hws: HashMap<(String, i32), i64> =
            [(("t".to_string(), 0), 11), (("t".to_string(), 1), 9)]
                .into_iter()
                .collect();
        let lags = lag_by_group(&committed, &hws);
        // a: (11 - 10) + (9 - 5), u-0 unknown; b: committed above the HW counts 0.
        assert_eq!(lags["a"], 5);
        assert_eq!(lags["b"], 0);
    }

    #[test]
    fn one_latest_lookup_per_partition() {
        let r = latest_request(&[("t".into(), 0), ("u".into(), 2), ("t".into(), 1)]);
        assert_eq!(r.topics.len(), 2);
        assert_eq!(r.topics[0].name, "t");
        assert_eq!(r.topics[0].partitions.len(), 2);
        assert!(
            r.topics
                .iter()
                .flat_map(|t| &t.partitions)
                .all(|p| p.timestamp == -1)
        );
    }
}
