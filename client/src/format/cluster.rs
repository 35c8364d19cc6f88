//! `keelctl broker list` and `keelctl quorum status|replication`: rows built from
//! DescribeCluster / DescribeQuorum replies and their text form (the quorum views follow
//! `kafka-metadata-quorum describe --status / --replication`).

use keel_proto::controller::{DescribeClusterReply, DescribeQuorumReply, QuorumReplicaState};
use serde::Serialize;

use super::{opt_num, table, timestamp_ms};

/// One registered broker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BrokerRow {
    /// Broker id.
    pub id: i32,
    /// `host:port` of its first listener (gRPC: what Keel's clients use).
    pub endpoint: String,
    /// `host:port` of its Kafka-protocol (`PLAINTEXT`) listener, if it registered one.
    pub kafka_endpoint: Option<String>,
    /// Rack, empty = none.
    pub rack: String,
    /// Broker epoch (offset of its registration record).
    pub epoch: i64,
    /// Fenced: leads nothing, in no ISR.
    pub fenced: bool,
    /// In controlled shutdown.
    pub in_controlled_shutdown: bool,
    /// `unfenced`, `fenced` (also once a controlled shutdown finished) or `shutting-down`
    /// (in controlled shutdown, leadership moving away, not fenced yet).
    pub state: String,
    /// Last metadata offset the broker reported applying; `None` when unknown.
    pub applied_metadata_offset: Option<i64>,
    /// `commit_index - applied_metadata_offset` on the active controller; `None` when unknown.
    pub metadata_lag: Option<i64>,
    /// Last heartbeat, ms since the Unix epoch; `None` when unknown.
    pub last_heartbeat_timestamp_ms: Option<i64>,
    /// Partitions with a replica on the broker, per the metadata ([`add_load`]); `None`
    /// when not computed.
    pub partitions: Option<usize>,
    /// Partitions the broker leads, per the metadata; `None` when not computed.
    pub leaders: Option<usize>,
    /// Bytes of the partition logs on the broker's disk as it reports them (DescribeReplicas
    /// `size_bytes` summed, replicas awaiting deletion included); `None` when the broker did
    /// not answer or it was not asked.
    pub size_bytes: Option<u64>,
}

/// Fills in each row's partitions and leaders from `image` and its bytes from `sizes` (by
/// broker id; a broker missing there did not answer).
pub fn add_load(
    rows: &mut [BrokerRow],
    image: &keel_metadata_log::MetadataImage,
    sizes: &std::collections::BTreeMap<i32, u64>,
) {
    for r in rows.iter_mut() {
        let (mut partitions, mut leaders) = (0, 0);
        for t in image.topics().by_id.values() {
            for p in t.partitions.values() {
                partitions += usize::from(p.replicas.contains(&r.id));
                leaders += usize::from(p.leader == r.id);
            }
        }
        r.partitions = Some(partitions);
        r.leaders = Some(leaders);
        r.size_bytes = sizes.get(&r.id).copied();
    }
}

/// Broker rows of a DescribeCluster reply, by id.
pub fn broker_rows(reply: &DescribeClusterReply) -> Vec<BrokerRow> {
    let mut rows: Vec<BrokerRow> = reply
        .brokers
        .iter()
        .map(|b| {
            let applied =
                (b.last_applied_metadata_offset >= 0).then_some(b.last_applied_metadata_offset);
            BrokerRow {
                id: b.broker_id,
                endpoint: b
                    .endpoints
                    .first()
                    .map(|e| format!("{}:{}", e.host, e.port))
                    .unwrap_or_default(),
                kafka_endpoint: b
                    .endpoints
                    .iter()
                    .skip(1)
                    .find(|e| keel_runtime::settings::listeners::KAFKA.contains(&e.name.as_str()))
                    .map(|e| format!("{}:{}", e.host, e.port)),
                rack: b.rack.clone(),
                epoch: b.broker_epoch,
                fenced: b.fenced,
                in_controlled_shutdown: b.in_controlled_shutdown,
                state: if b.fenced {
                    // A finished controlled shutdown leaves the broker fenced too.
                    "fenced"
                } else if b.in_controlled_shutdown {
                    "shutting-down"
                } else {
                    "unfenced"
                }
                .into(),
                applied_metadata_offset: applied,
                metadata_lag: applied.map(|a| (reply.commit_index - a).max(0)),
                last_heartbeat_timestamp_ms: (b.last_heartbeat_timestamp_ms >= 0)
                    .then_some(b.last_heartbeat_timestamp_ms),
                partitions: None,
                leaders: None,
                size_bytes: None,
            }
        })
        .collect();
    rows.sort_by_key(|r| r.id);
    rows
}

/// `broker list` table; the PARTITIONS, LEADERS and SIZE columns when [`add_load`] filled
/// them in.
pub fn brokers_text(rows: &[BrokerRow]) -> String {
    let load = rows.iter().any(|r| r.partitions.is_some());
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let mut row = vec![
                r.id.to_string(),
                r.endpoint.clone(),
                r.kafka_endpoint.clone().unwrap_or_else(|| "-".into()),
                if r.rack.is_empty() {
                    "-".into()
                } else {
                    r.rack.clone()
                },
                r.epoch.to_string(),
                r.state.clone(),
                r.applied_metadata_offset
                    .map_or("-".into(), |v| v.to_string()),
                r.metadata_lag.map_or("-".into(), |v| v.to_string()),
            ];
            if load {
                row.push(r.partitions.map_or("-".into(), |v| v.to_string()));
                row.push(r.leaders.map_or("-".into(), |v| v.to_string()));
                row.push(r.size_bytes.map_or("-".into(), super::data::bytes_text));
            }
            row
        })
        .collect();
    let mut header = vec![
        "ID",
        "ENDPOINT",
        "KAFKA",
        "RACK",
        "EPOCH",
        "STATE",
        "APPLIED_OFFSET",
        "METADATA_LAG",
    ];
    if load {
        header.extend(["PARTITIONS", "LEADERS", "SIZE"]);
    }
    table(&header, &rows)
}

/// `quorum status`, like `kafka-metadata-quorum describe --status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QuorumStatus {
    /// Cluster id.
    pub cluster_id: String,
    /// Active controller (Raft leader), -1 unknown.
    pub leader_id: i32,
    /// Raft term of the leader (Kafka: LeaderEpoch).
    pub leader_epoch: i64,
    /// Kafka's exclusive high watermark (commit index + 1).
    pub high_watermark: i64,
    /// Inclusive offset of the last committed entry.
    pub commit_index: i64,
    /// First offset still in the log.
    pub log_start_offset: i64,
    /// Largest follower lag in entries, -1 unknown.
    pub max_follower_lag: i64,
    /// Longest time a follower has not been caught up, ms, -1 unknown.
    pub max_follower_lag_time_ms: i64,
    /// Voter ids.
    pub current_voters: Vec<i32>,
    /// Observer ids: controllers that follow without voting, then brokers.
    pub current_observers: Vec<i32>,
    /// Each voter's replica key and endpoint (KIP-853).
    pub voters: Vec<QuorumMember>,
    /// Each observer's replica key (controllers with a directory id and endpoint; brokers
    /// with neither).
    pub observers: Vec<QuorumMember>,
}

/// One member of the quorum as `quorum status` shows it (Kafka 3.9+'s `CurrentVoters`
/// entries: id, directoryId, endpoints).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QuorumMember {
    /// Node id.
    pub id: i32,
    /// Metadata log directory id (Kafka's base64 form); empty for brokers and for a voter
    /// the quorum has not recorded one for yet.
    pub directory_id: String,
    /// Its gRPC listener, `host:port`.
    pub endpoint: String,
}

impl QuorumMember {
    fn of(v: &QuorumReplicaState) -> Self {
        Self {
            id: v.replica_id,
            directory_id: v.directory_id.clone(),
            endpoint: v.address.clone(),
        }
    }

    /// Kafka's text form: `{"id": 1, "directoryId": "...", "endpoints": ["h:p"]}`; brokers
    /// (no directory id) as `{"id": 4}`.
    fn text(&self, with_endpoint: bool) -> String {
        let mut s = format!("{{\"id\": {}", self.id);
        if !self.directory_id.is_empty() {
            s += &format!(", \"directoryId\": \"{}\"", self.directory_id);
        }
        if with_endpoint && !self.endpoint.is_empty() {
            s += &format!(", \"endpoints\": [\"{}\"]", self.endpoint);
        }
        s + "}"
    }
}

/// Builds the status summary of a DescribeQuorum reply.
pub fn quorum_status(reply: &DescribeQuorumReply) -> QuorumStatus {
    let followers: Vec<&QuorumReplicaState> =
        reply.voters.iter().filter(|v| !v.is_leader).collect();
    let leader_now = reply
        .voters
        .iter()
        .find(|v| v.is_leader)
        .map_or(-1, |l| l.last_caught_up_timestamp_ms);
    let max_lag = if followers.iter().any(|f| f.lag < 0) {
        -1
    } else {
        followers.iter().map(|f| f.lag).max().unwrap_or(0)
    };
    let max_lag_time =
        if leader_now < 0 || followers.iter().any(|f| f.last_caught_up_timestamp_ms < 0) {
            -1
        } else {
            followers
                .iter()
                .map(|f| (leader_now - f.last_caught_up_timestamp_ms).max(0))
                .max()
                .unwrap_or(0)
        };
    QuorumStatus {
        cluster_id: reply.cluster_id.clone(),
        leader_id: reply.leader_id,
        leader_epoch: reply.term,
        high_watermark: reply.high_watermark,
        commit_index: reply.commit_index,
        log_start_offset: reply.log_start_offset,
        max_follower_lag: max_lag,
        max_follower_lag_time_ms: max_lag_time,
        current_voters: reply.voters.iter().map(|v| v.replica_id).collect(),
        current_observers: reply.observers.iter().map(|v| v.replica_id).collect(),
        voters: reply.voters.iter().map(QuorumMember::of).collect(),
        observers: reply.observers.iter().map(QuorumMember::of).collect(),
    }
}

/// `quorum status` text: one `Key: value` line per field.
pub fn quorum_status_text(s: &QuorumStatus) -> String {
    let list = |v: &[QuorumMember], endpoints: bool| {
        let items: Vec<String> = v.iter().map(|m| m.text(endpoints)).collect();
        format!("[{}]", items.join(", "))
    };
    let lines = [
        ("ClusterId", s.cluster_id.clone()),
        ("LeaderId", s.leader_id.to_string()),
        ("LeaderEpoch", s.leader_epoch.to_string()),
        ("HighWatermark", s.high_watermark.to_string()),
        ("CommitIndex", s.commit_index.to_string()),
        ("LogStartOffset", s.log_start_offset.to_string()),
        ("MaxFollowerLag", opt_num(s.max_follower_lag)),
        ("MaxFollowerLagTimeMs", opt_num(s.max_follower_lag_time_ms)),
        ("CurrentVoters", list(&s.voters, true)),
        ("CurrentObservers", list(&s.observers, false)),
    ];
    let mut out = String::new();
    for (k, v) in lines {
        out.push_str(&format!("{:<22}{v}\n", format!("{k}:")));
    }
    out
}

/// One row of `quorum replication`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReplicationRow {
    /// Controller node id.
    pub node_id: i32,
    /// Its controller address.
    pub address: String,
    /// Its metadata log directory id; empty for brokers and unrecorded voters.
    pub directory_id: String,
    /// Kafka's exclusive log end offset (last log index + 1), -1 unknown.
    pub log_end_offset: i64,
    /// Entries behind the leader, -1 unknown.
    pub lag: i64,
    /// Last replication acknowledgement, ms since the Unix epoch, -1 unknown.
    pub last_fetch_timestamp_ms: i64,
    /// Last time fully caught up, ms since the Unix epoch, -1 unknown.
    pub last_caught_up_timestamp_ms: i64,
    /// `Leader`, `Follower` or `Observer`.
    pub status: String,
}

/// Rows of `quorum replication`: voters (leader first), then observers.
pub fn replication_rows(reply: &DescribeQuorumReply) -> Vec<ReplicationRow> {
    let row = |v: &QuorumReplicaState, status: &str| ReplicationRow {
        node_id: v.replica_id,
        address: v.address.clone(),
        directory_id: v.directory_id.clone(),
        log_end_offset: if v.last_log_index < 0 {
            -1
        } else {
            v.last_log_index + 1
        },
        lag: v.lag,
        last_fetch_timestamp_ms: v.last_fetch_timestamp_ms,
        last_caught_up_timestamp_ms: v.last_caught_up_timestamp_ms,
        status: status.into(),
    };
    let mut rows: Vec<ReplicationRow> = reply
        .voters
        .iter()
        .map(|v| row(v, if v.is_leader { "Leader" } else { "Follower" }))
        .collect();
    rows.sort_by_key(|r| (r.status != "Leader", r.node_id));
    rows.extend(reply.observers.iter().map(|v| row(v, "Observer")));
    rows
}

/// `quorum replication` table.
pub fn replication_text(rows: &[ReplicationRow]) -> String {
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.node_id.to_string(),
                if r.directory_id.is_empty() {
                    "-".to_string()
                } else {
                    r.directory_id.clone()
                },
                r.address.clone(),
                opt_num(r.log_end_offset),
                opt_num(r.lag),
                timestamp_ms(r.last_fetch_timestamp_ms),
                timestamp_ms(r.last_caught_up_timestamp_ms),
                r.status.clone(),
            ]
        })
        .collect();
    table(
        &[
            "NodeId",
            "DirectoryId",
            "Address",
            "LogEndOffset",
            "Lag",
            "LastFetchTimestamp",
            "LastCaughtUpTimestamp",
            "Status",
        ],
        &rows,
    )
}

#[cfg(test)]
mod tests {
    use keel_proto::controller::DescribedBroker;
    use keel_proto::metadata::BrokerEndpoint;

    use super::*;

    fn voter(id: i32, last: i64, lag: i64, caught_up: i64, leader: bool) -> QuorumReplicaState {
        QuorumReplicaState {
            replica_id: id,
            address: format!("127.0.0.1:909{id}"),
            last_log_index: last,
            lag,
            last_fetch_timestamp_ms: caught_up,
            last_caught_up_timestamp_ms: caught_up,
            is_leader: leader,
            directory_id: String::new(),
        }
    }

    fn quorum() -> DescribeQuorumReply {
        DescribeQuorumReply {
            cluster_id: "c1".into(),
            leader_id: 2,
            term: 4,
            commit_index: 99,
            high_watermark: 100,
            log_start_offset: 1,
            voters: vec![
                voter(1, 97, 3, 9_000, false),
                voter(2, 100, 0, 10_000, true),
                QuorumReplicaState {
                    directory_id: "pbvuBlaTTwKRxS5NLJwRFQ".into(),
                    ..voter(3, 100, 0, 10_000, false)
                },
            ],
            observers: vec![QuorumReplicaState {
                address: "10.0.0.4:9092".into(),
                ..voter(4, 100, 0, -1, false)
            }],
            ..Default::default()
        }
    }

    #[test]
    fn status_reports_worst_follower() {
        let s = quorum_status(&quorum());
        assert_eq!(s.max_follower_lag, 3);
        assert_eq!(s.max_follower_lag_time_ms, 1_000);
        assert_eq!(s.current_voters, vec![1, 2, 3]);
        let text = quorum_status_text(&s);
        assert!(
            text.starts_with("ClusterId:            c1\nLeaderId:             2\n"),
            "{text}"
        );
        assert!(text.contains("HighWatermark:        100\n"), "{text}");
        assert!(
            text.contains(
                "CurrentVoters:        [{\"id\": 1, \"endpoints\": [\"127.0.0.1:9091\"]}, \
                 {\"id\": 2, \"endpoints\": [\"127.0.0.1:9092\"]}, {\"id\": 3, \"directoryId\": \
                 \"pbvuBlaTTwKRxS5NLJwRFQ\", \"endpoints\": [\"127.0.0.1:9093\"]}]\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("CurrentObservers:     [{\"id\": 4}]\n"),
            "{text}"
        );
        // Unknown follower progress is reported as unknown, not as zero.
        let mut q = quorum();
        q.voters[0].lag = -1;
        q.voters[0].last_caught_up_timestamp_ms = -1;
        let s = quorum_status(&q);
        assert_eq!((s.max_follower_lag, s.max_follower_lag_time_ms), (-1, -1));
    }

    #[test]
    fn replication_lists_leader_first() {
        let rows = replication_rows(&quorum());
        assert_eq!(
            rows.iter()
                .map(|r| (r.node_id, r.status.as_str(), r.log_end_offset))
                .collect::<Vec<_>>(),
            vec![
                (2, "Leader", 101),
                (1, "Follower", 98),
                (3, "Follower", 101),
                (4, "Observer", 101)
            ]
        );
        let text = replication_text(&rows);
        let line = |n: usize| {
            text.lines()
                .nth(n)
                .unwrap()
                .split_whitespace()
                .collect::<Vec<_>>()
        };
        assert_eq!(
            line(1)[..5],
            ["2", "-", "127.0.0.1:9092", "101", "0"],
            "{text}"
        );
        assert_eq!(
            line(3)[..3],
            ["3", "pbvuBlaTTwKRxS5NLJwRFQ", "127.0.0.1:9093"],
            "{text}"
        );
    }

    #[test]
    fn the_kafka_column_shows_any_kafka_listener() {
        let endpoint = |name: &str, port| BrokerEndpoint {
            name: name.into(),
            host: "127.0.0.1".into(),
            port,
            security_protocol: String::new(),
        };
        for name in ["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] {
            let reply = DescribeClusterReply {
                brokers: vec![DescribedBroker {
                    broker_id: 1,
                    endpoints: vec![endpoint("GRPC", 9101), endpoint(name, 9201)],
                    ..Default::default()
                }],
                ..Default::default()
            };
            let rows = broker_rows(&reply);
            assert_eq!(
                rows[0].kafka_endpoint.as_deref(),
                Some("127.0.0.1:9201"),
                "{name}"
            );
        }
    }

    #[test]
    fn broker_rows_compute_lag_and_state() {
        let b = |id, fenced, shutdown, applied| DescribedBroker {
            broker_id: id,
            broker_epoch: 10 + i64::from(id),
            endpoints: vec![BrokerEndpoint {
                name: "PLAINTEXT".into(),
                host: "127.0.0.1".into(),
                port: 9190 + id as u32,
                security_protocol: String::new(),
            }],
            fenced,
            in_controlled_shutdown: shutdown,
            last_applied_metadata_offset: applied,
            last_heartbeat_timestamp_ms: -1,
            ..Default::default()
        };
        let reply = DescribeClusterReply {
            commit_index: 50,
            brokers: vec![
                b(2, true, false, -1),
                b(1, false, false, 48),
                b(3, false, true, 50),
                b(4, true, true, 50),
            ],
            ..Default::default()
        };
        let mut rows = broker_rows(&reply);
        assert!(
            rows.iter()
                .all(|r| r.partitions.is_none() && r.size_bytes.is_none())
        );
        assert_eq!(
            brokers_text(&rows),
            "ID  ENDPOINT        KAFKA  RACK  EPOCH  STATE          APPLIED_OFFSET  METADATA_LAG\n\
             1   127.0.0.1:9191  -      -     11     unfenced       48              2\n\
             2   127.0.0.1:9192  -      -     12     fenced         -               -\n\
             3   127.0.0.1:9193  -      -     13     shutting-down  50              0\n\
             4   127.0.0.1:9194  -      -     14     fenced         50              0\n"
        );
        // With the load: partitions and leaders from the image, bytes as answered.
        use keel_proto::metadata::{
            MetadataRecord, PartitionRecord, TopicRecord, metadata_record::Record,
        };
        let id = bytes::Bytes::copy_from_slice(&[7; 16]);
        let mut records = vec![MetadataRecord {
            record: Some(Record::Topic(TopicRecord {
                name: "t".into(),
                topic_id: id.clone(),
            })),
        }];
        for (p, replicas) in [(0, vec![1, 2]), (1, vec![2, 3]), (2, vec![2, 1])] {
            records.push(MetadataRecord {
                record: Some(Record::Partition(PartitionRecord {
                    topic_id: id.clone(),
                    partition_id: p,
                    leader: replicas[0],
                    isr: replicas.clone(),
                    replicas,
                    ..Default::default()
                })),
            });
        }
        let image = keel_metadata_log::MetadataImage::empty()
            .with_records(
                keel_metadata_log::Provenance { offset: 1, term: 1 },
                &records,
            )
            .unwrap();
        let sizes = [(1, 3 * 1024 * 1024), (2, 512)].into_iter().collect();
        add_load(&mut rows, &image, &sizes);
        let load: Vec<_> = rows
            .iter()
            .map(|r| (r.id, r.partitions, r.leaders, r.size_bytes))
            .collect();
        assert_eq!(
            load,
            vec![
                (1, Some(2), Some(1), Some(3 * 1024 * 1024)),
                (2, Some(3), Some(2), Some(512)),
                (3, Some(1), Some(0), None),
                (4, Some(0), Some(0), None),
            ]
        );
        let text = brokers_text(&rows);
        assert!(text.starts_with("ID  ENDPOINT"), "{text}");
        assert!(
            text.lines()
                .next()
                .unwrap()
                .ends_with("PARTITIONS  LEADERS  SIZE"),
            "{text}"
        );
        assert!(
            text.lines()
                .nth(1)
                .unwrap()
                .ends_with("2           1        3.0 MiB"),
            "{text}"
        );
        assert!(
            text.lines()
                .nth(3)
                .unwrap()
                .ends_with("1           0        -"),
            "{text}"
        );
    }
}
