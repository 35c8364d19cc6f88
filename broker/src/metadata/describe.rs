//! Replies built from the broker's local image (pure): `Metadata` (Kafka: MetadataResponse
//! v12 from `KRaftMetadataCache`) and the metadata part of `DescribeReplicas`.

use keel_metadata_log::{MetadataImage, NO_LEADER, PartitionRegistration, TopicImage};
use keel_proto::ErrorCode;
use keel_proto::broker::{
    DescribeReplicasReply, DescribeReplicasRequest, MetadataPartition, MetadataReply,
    MetadataRequest, MetadataTopic, NodeEndpoint, ReplicaDescription, ReplicaRole,
};
use keel_proto::limits::clip;

/// Kafka's topic name rule: 1..=249 of `[a-zA-Z0-9._-]`, not `.` or `..`
/// ([`keel_proto::limits::validate_topic_name`]).
pub fn is_legal_topic_name(name: &str) -> bool {
    keel_proto::limits::validate_topic_name(name).is_ok()
}

/// The `Metadata` reply for `req` from `image`. `controller_id` is the active controller as
/// the broker last saw it (-1 = unknown).
pub fn metadata_reply(
    image: &MetadataImage,
    req: &MetadataRequest,
    controller_id: i32,
) -> MetadataReply {
    let brokers = image
        .brokers()
        .values()
        .filter(|b| !b.fenced)
        .filter_map(|b| {
            // The first listener is the one clients use.
            let ep = b.endpoints.first()?;
            Some(NodeEndpoint {
                node_id: b.id,
                host: ep.host.clone(),
                port: ep.port,
                rack: b.rack.clone().unwrap_or_default(),
            })
        })
        .collect();
    let topics = if req.topics.is_empty() {
        image
            .topics()
            .by_name
            .values()
            .filter_map(|id| image.topics().by_id.get(id))
            .map(|t| topic_metadata(image, t))
            .collect()
    } else {
        req.topics
            .iter()
            .map(|name| {
                if !is_legal_topic_name(name) {
                    return topic_error(
                        name,
                        ErrorCode::InvalidTopicException,
                        "illegal topic name",
                    );
                }
                match image.topics().get_by_name(name) {
                    Some(t) => topic_metadata(image, t),
                    None => topic_error(name, ErrorCode::UnknownTopicOrPartition, "unknown topic"),
                }
            })
            .collect()
    };
    MetadataReply {
        error: None,
        brokers,
        cluster_id: image.cluster_id().unwrap_or_default().to_string(),
        controller_id,
        topics,
        metadata_offset: image.provenance().offset as i64,
    }
}

fn topic_error(name: &str, code: ErrorCode, msg: &str) -> MetadataTopic {
    MetadataTopic {
        error: Some(code.to_proto(format!("{msg}: {:?}", clip(name)))),
        name: name.to_string(),
        ..Default::default()
    }
}

fn topic_metadata(image: &MetadataImage, t: &TopicImage) -> MetadataTopic {
    let partitions = t
        .partitions
        .iter()
        .map(|(p, reg)| {
            let offline_replicas = reg
                .replicas
                .iter()
                .copied()
                .filter(|r| image.broker(*r).is_none_or(|b| b.fenced))
                .collect();
            MetadataPartition {
                error: (reg.leader == NO_LEADER).then(|| {
                    ErrorCode::LeaderNotAvailable.to_proto(format!("{}-{p} has no leader", t.name))
                }),
                partition_index: *p,
                leader_id: reg.leader,
                leader_epoch: reg.leader_epoch,
                replica_nodes: reg.replicas.clone(),
                isr_nodes: reg.isr.clone(),
                offline_replicas,
                partition_epoch: reg.partition_epoch,
                leader_recovery_state: reg.leader_recovery_state as i32,
                eligible_leader_replicas: reg.elr.clone(),
            }
        })
        .collect();
    MetadataTopic {
        error: None,
        name: t.name.clone(),
        topic_id: bytes::Bytes::copy_from_slice(t.id.as_bytes()),
        // Kafka marks its internal topics (`Topic.isInternal`): here `__consumer_offsets`.
        is_internal: t.name == crate::replica_manager::produce::OFFSETS_TOPIC,
        partitions,
    }
}

/// The effective `min.insync.replicas` of `topic` on broker `broker_id`: the topic config,
/// else the broker's or the cluster-wide dynamic value
/// ([`keel_metadata_log::configs::dynamic_topic_value`]), else `default` (the static config).
pub fn min_insync_replicas(
    image: &MetadataImage,
    topic: &str,
    broker_id: i32,
    default: u32,
) -> i32 {
    keel_metadata_log::configs::dynamic_topic_value(image, topic, broker_id, "min.insync.replicas")
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default as i32)
}

/// The metadata-only `DescribeReplicas` reply: one entry per partition this broker is
/// assigned (or per requested partition), with role, leader, epochs and ISR from `image`.
/// Log fields (LEO, HW, log start, size) are -1 and follower states empty: the replica
/// manager fills them (issue 5).
pub fn describe_replicas_reply(
    image: &MetadataImage,
    req: &DescribeReplicasRequest,
    broker_id: i32,
    broker_epoch: i64,
    default_min_insync: u32,
) -> DescribeReplicasReply {
    let describe = |t: &TopicImage, p: i32, reg: &PartitionRegistration| ReplicaDescription {
        topic: t.name.clone(),
        topic_id: bytes::Bytes::copy_from_slice(t.id.as_bytes()),
        partition: p,
        error: None,
        role: if reg.leader == broker_id {
            ReplicaRole::Leader
        } else {
            ReplicaRole::Follower
        } as i32,
        leader_id: reg.leader,
        leader_epoch: reg.leader_epoch,
        partition_epoch: reg.partition_epoch,
        log_end_offset: -1,
        high_watermark: -1,
        log_start_offset: -1,
        isr: reg.isr.clone(),
        maximal_isr: reg.isr.clone(),
        pending_isr_change: false,
        min_insync_replicas: min_insync_replicas(image, &t.name, broker_id, default_min_insync),
        leader_epoch_cache: Vec::new(),
        followers: Vec::new(),
        size_bytes: -1,
    };
    let not_hosted = |topic: &str, p: i32| ReplicaDescription {
        topic: topic.to_string(),
        partition: p,
        error: Some(ErrorCode::UnknownTopicOrPartition.to_proto(format!(
            "{}-{p} is not hosted on broker {broker_id}",
            clip(topic)
        ))),
        role: ReplicaRole::None as i32,
        leader_id: NO_LEADER,
        leader_epoch: -1,
        partition_epoch: -1,
        log_end_offset: -1,
        high_watermark: -1,
        log_start_offset: -1,
        size_bytes: -1,
        ..Default::default()
    };
    let mut partitions = Vec::new();
    if req.topics.is_empty() {
        for id in image.topics().by_name.values() {
            let t = &image.topics().by_id[id];
            for (p, reg) in t.partitions.iter() {
                if reg.replicas.contains(&broker_id) {
                    partitions.push(describe(t, *p, reg));
                }
            }
        }
    } else {
        for rt in &req.topics {
            let Some(t) = image.topics().get_by_name(&rt.name) else {
                partitions.extend(rt.partitions.iter().map(|p| not_hosted(&rt.name, *p)));
                if rt.partitions.is_empty() {
                    partitions.push(not_hosted(&rt.name, -1));
                }
                continue;
            };
            if rt.partitions.is_empty() {
                for (p, reg) in t.partitions.iter() {
                    if reg.replicas.contains(&broker_id) {
                        partitions.push(describe(t, *p, reg));
                    }
                }
            } else {
                for p in &rt.partitions {
                    match t.partitions.get(p) {
                        Some(reg) if reg.replicas.contains(&broker_id) => {
                            partitions.push(describe(t, *p, reg))
                        }
                        _ => partitions.push(not_hosted(&rt.name, *p)),
                    }
                }
            }
        }
    }
    DescribeReplicasReply {
        error: None,
        broker_id,
        broker_epoch,
        metadata_offset: image.provenance().offset as i64,
        partitions,
        // Filled by the caller when requested (`include_image_digest`): it costs O(image).
        image_digest: String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_metadata_log::Provenance;
    use keel_metadata_log::records::metadata_record::Record;
    use keel_metadata_log::records::{
        BrokerEndpoint, ClusterIdRecord, ConfigRecord, ConfigResourceType, MetadataRecord,
        PartitionRecord, RegisterBrokerRecord, TopicRecord,
    };
    use keel_proto::broker::DescribeReplicasTopic;

    fn rec(r: Record) -> MetadataRecord {
        MetadataRecord { record: Some(r) }
    }

    fn image() -> MetadataImage {
        let broker = |id: i32, fenced: bool| {
            rec(Record::RegisterBroker(RegisterBrokerRecord {
                broker_id: id,
                incarnation_id: bytes::Bytes::copy_from_slice(&[id as u8; 16]),
                broker_epoch: 0,
                endpoints: vec![BrokerEndpoint {
                    name: "PLAINTEXT".into(),
                    host: "127.0.0.1".into(),
                    port: 9000 + id as u32,
                    security_protocol: "PLAINTEXT".into(),
                }],
                rack: String::new(),
                fenced,
                in_controlled_shutdown: false,
            }))
        };
        let part = |p: i32, replicas: &[i32], leader: i32| {
            rec(Record::Partition(PartitionRecord {
                topic_id: bytes::Bytes::copy_from_slice(&[1; 16]),
                partition_id: p,
                replicas: replicas.to_vec(),
                isr: if leader >= 0 {
                    replicas.to_vec()
                } else {
                    vec![replicas[0]]
                },
                leader,
                leader_epoch: 3,
                partition_epoch: 4,
                ..Default::default()
            }))
        };
        MetadataImage::empty()
            .with_records(
                Provenance { offset: 9, term: 1 },
                &[
                    rec(Record::ClusterId(ClusterIdRecord {
                        cluster_id: "c1".into(),
                    })),
                    broker(1, false),
                    broker(2, true),
                    rec(Record::Topic(TopicRecord {
                        name: "t".into(),
                        topic_id: bytes::Bytes::copy_from_slice(&[1; 16]),
                    })),
                    rec(Record::Config(ConfigRecord {
                        resource_type: ConfigResourceType::Topic as i32,
                        resource_name: "t".into(),
                        name: "min.insync.replicas".into(),
                        value: Some("2".into()),
                    })),
                    part(0, &[1, 2], 1),
                    part(1, &[2, 3], -1),
                ],
            )
            .unwrap()
    }

    #[test]
    fn metadata_from_the_image() {
        let img = image();
        let r = metadata_reply(&img, &MetadataRequest::default(), 2);
        assert_eq!(r.cluster_id, "c1");
        assert_eq!(r.controller_id, 2);
        assert_eq!(r.metadata_offset, 9);
        assert_eq!(r.brokers.len(), 1, "fenced broker 2 is not listed");
        assert_eq!((r.brokers[0].node_id, r.brokers[0].port), (1, 9001));
        let t = &r.topics[0];
        assert_eq!(t.name, "t");
        assert_eq!(t.topic_id.len(), 16);
        let p0 = &t.partitions[0];
        assert_eq!(
            (p0.leader_id, p0.leader_epoch, p0.partition_epoch),
            (1, 3, 4)
        );
        assert_eq!(p0.replica_nodes, vec![1, 2]);
        assert_eq!(p0.isr_nodes, vec![1, 2]);
        assert_eq!(p0.offline_replicas, vec![2]);
        assert!(p0.error.is_none());
        let p1 = &t.partitions[1];
        assert_eq!(
            p1.error.as_ref().unwrap().code,
            i32::from(ErrorCode::LeaderNotAvailable.code())
        );
        assert_eq!(p1.offline_replicas, vec![2, 3]);
        let named = metadata_reply(
            &img,
            &MetadataRequest {
                topics: vec!["nope".into(), "bad/name".into(), "t".into()],
            },
            -1,
        );
        let codes: Vec<i32> = named
            .topics
            .iter()
            .map(|t| t.error.as_ref().map_or(0, |e| e.code))
            .collect();
        assert_eq!(codes, vec![3, 17, 0]);
    }

    #[test]
    fn describe_replicas_lists_hosted_partitions() {
        let img = image();
        let all = describe_replicas_reply(&img, &DescribeReplicasRequest::default(), 2, 7, 1);
        assert_eq!(all.broker_epoch, 7);
        assert_eq!(all.image_digest, "", "computed only on request");
        let roles: Vec<(i32, i32)> = all
            .partitions
            .iter()
            .map(|p| (p.partition, p.role))
            .collect();
        assert_eq!(
            roles,
            vec![
                (0, ReplicaRole::Follower as i32),
                (1, ReplicaRole::Follower as i32)
            ]
        );
        assert_eq!(all.partitions[0].min_insync_replicas, 2);
        let one = describe_replicas_reply(
            &img,
            &DescribeReplicasRequest {
                topics: vec![
                    DescribeReplicasTopic {
                        name: "t".into(),
                        partitions: vec![0, 1],
                    },
                    DescribeReplicasTopic {
                        name: "x".into(),
                        partitions: vec![],
                    },
                ],
                include_image_digest: false,
            },
            1,
            5,
            1,
        );
        assert_eq!(one.partitions[0].role, ReplicaRole::Leader as i32);
        assert_eq!(
            one.partitions[1].error.as_ref().unwrap().code,
            i32::from(ErrorCode::UnknownTopicOrPartition.code())
        );
        assert_eq!(one.partitions[2].topic, "x");
        assert!(one.partitions[2].error.is_some());
    }

    #[test]
    fn topic_names() {
        for ok in ["a", "a.b_c-9", &"x".repeat(249)] {
            assert!(is_legal_topic_name(ok), "{ok}");
        }
        for bad in ["", ".", "..", "a/b", "é", &"x".repeat(250)] {
            assert!(!is_legal_topic_name(bad), "{bad}");
        }
    }
}
