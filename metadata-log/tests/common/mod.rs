//! Record constructors and a random valid-history generator shared by the metadata tests and
//! the benchmark.
#![allow(dead_code)]

use bytes::Bytes;
use keel_metadata_log::MetadataImage;
use keel_metadata_log::records::{
    BrokerRegistrationChangeRecord, ConfigRecord, ConfigResourceType, FeatureLevelRecord,
    FencingChange, MetadataRecord, PartitionChangeRecord, PartitionRecord, ProducerIdsRecord,
    RegisterBrokerRecord, RemoveTopicRecord, ReplicaList, ShutdownChange, TopicRecord,
    metadata_record::Record,
};
use uuid::Uuid;

pub fn rec(r: Record) -> MetadataRecord {
    MetadataRecord { record: Some(r) }
}

pub fn id_bytes(id: Uuid) -> Bytes {
    Bytes::copy_from_slice(id.as_bytes())
}

pub fn topic_id(n: u128) -> Uuid {
    Uuid::from_u128(0x7070_0000_0000_0000_0000_0000_0000_0000 | n)
}

/// Registration whose epoch is derived on replay (broker_epoch = 0).
pub fn register(broker: i32) -> MetadataRecord {
    rec(Record::RegisterBroker(RegisterBrokerRecord {
        broker_id: broker,
        incarnation_id: id_bytes(Uuid::from_u128(0xb0 << 64 | broker as u128)),
        broker_epoch: 0,
        endpoints: vec![keel_metadata_log::records::BrokerEndpoint {
            name: "PLAINTEXT".into(),
            host: "127.0.0.1".into(),
            port: 9092 + broker as u32,
            security_protocol: "PLAINTEXT".into(),
        }],
        rack: if broker % 2 == 0 {
            "rack-a".into()
        } else {
            String::new()
        },
        fenced: true,
        in_controlled_shutdown: false,
    }))
}

pub fn fence(broker: i32, epoch: i64, fenced: bool) -> MetadataRecord {
    rec(Record::BrokerRegistrationChange(
        BrokerRegistrationChangeRecord {
            broker_id: broker,
            broker_epoch: epoch,
            fenced: if fenced {
                FencingChange::Fence
            } else {
                FencingChange::Unfence
            } as i32,
            in_controlled_shutdown: ShutdownChange::None as i32,
        },
    ))
}

pub fn topic(name: &str, id: Uuid) -> MetadataRecord {
    rec(Record::Topic(TopicRecord {
        name: name.into(),
        topic_id: id_bytes(id),
    }))
}

pub fn partition(id: Uuid, p: i32, replicas: &[i32], isr: &[i32], leader: i32) -> MetadataRecord {
    rec(Record::Partition(PartitionRecord {
        topic_id: id_bytes(id),
        partition_id: p,
        replicas: replicas.to_vec(),
        isr: isr.to_vec(),
        leader,
        ..Default::default()
    }))
}

pub fn change_isr(id: Uuid, p: i32, isr: &[i32]) -> MetadataRecord {
    rec(Record::PartitionChange(PartitionChangeRecord {
        topic_id: id_bytes(id),
        partition_id: p,
        isr: Some(ReplicaList { ids: isr.to_vec() }),
        ..Default::default()
    }))
}

pub fn change_leader(id: Uuid, p: i32, leader: i32, isr: Option<&[i32]>) -> MetadataRecord {
    rec(Record::PartitionChange(PartitionChangeRecord {
        topic_id: id_bytes(id),
        partition_id: p,
        leader: Some(leader),
        isr: isr.map(|i| ReplicaList { ids: i.to_vec() }),
        ..Default::default()
    }))
}

pub fn remove_topic(id: Uuid) -> MetadataRecord {
    rec(Record::RemoveTopic(RemoveTopicRecord {
        topic_id: id_bytes(id),
    }))
}

pub fn topic_config(topic: &str, key: &str, value: Option<&str>) -> MetadataRecord {
    rec(Record::Config(ConfigRecord {
        resource_type: ConfigResourceType::Topic as i32,
        resource_name: topic.into(),
        name: key.into(),
        value: value.map(str::to_string),
    }))
}

pub fn cluster_config(key: &str, value: &str) -> MetadataRecord {
    rec(Record::Config(ConfigRecord {
        resource_type: ConfigResourceType::Cluster as i32,
        resource_name: String::new(),
        name: key.into(),
        value: Some(value.into()),
    }))
}

pub fn producer_ids(broker: i32, epoch: i64, next: i64) -> MetadataRecord {
    rec(Record::ProducerIds(ProducerIdsRecord {
        broker_id: broker,
        broker_epoch: epoch,
        next_producer_id: next,
    }))
}

pub fn cluster_id(id: &str) -> MetadataRecord {
    rec(Record::ClusterId(
        keel_metadata_log::records::ClusterIdRecord {
            cluster_id: id.into(),
        },
    ))
}

/// An ALLOW (or DENY) ACL for `principal` on topic `name` with id `id`.
pub fn acl(id: u128, name: &str, principal: &str, allow: bool) -> MetadataRecord {
    use keel_metadata_log::acl::{AclBinding, Operation, PatternType, Permission, ResourceType};
    let b = AclBinding::new(
        ResourceType::Topic,
        name,
        PatternType::Literal,
        principal,
        "*",
        Operation::Read,
        if allow {
            Permission::Allow
        } else {
            Permission::Deny
        },
    )
    .unwrap();
    rec(Record::AccessControlEntry(b.to_record(Uuid::from_u128(id))))
}

pub fn remove_acl(id: u128) -> MetadataRecord {
    rec(Record::RemoveAccessControlEntry(
        keel_metadata_log::records::RemoveAccessControlEntryRecord {
            id: Uuid::from_u128(id).as_bytes().to_vec().into(),
        },
    ))
}

/// A SCRAM credential record of `user` (password `pw`, 4096 iterations).
pub fn scram(user: &str, sha512: bool) -> MetadataRecord {
    use keel_metadata_log::scram::{Mechanism, ScramCredential, salted_password};
    let m = if sha512 {
        Mechanism::Sha512
    } else {
        Mechanism::Sha256
    };
    let it = std::num::NonZeroU32::new(4096).unwrap();
    let sp = salted_password(m, b"pw", user.as_bytes(), it);
    let c = ScramCredential::from_salted_password(m, &sp, user.as_bytes(), 4096).unwrap();
    rec(Record::UserScramCredential(c.to_record(user)))
}

/// The removal of `user`'s SCRAM credential.
pub fn remove_scram(user: &str, sha512: bool) -> MetadataRecord {
    use keel_metadata_log::scram::Mechanism;
    let m = if sha512 {
        Mechanism::Sha512
    } else {
        Mechanism::Sha256
    };
    rec(Record::RemoveUserScramCredential(
        keel_metadata_log::scram::removal_record(user, m),
    ))
}

pub fn feature(name: &str, level: i32) -> MetadataRecord {
    rec(Record::FeatureLevel(FeatureLevelRecord {
        name: name.into(),
        feature_level: level,
    }))
}

/// SplitMix64: a tiny seeded generator so histories are reproducible from one seed.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    pub fn chance(&mut self, pct: u64) -> bool {
        self.below(100) < pct
    }
}

/// Generates the next batch of valid records for `image` (which is at offset `offset - 1`).
/// Every kind of record appears: registrations, fencing, topics, partitions, ISR and leader
/// changes, configs, producer ids, features, topic deletion and no-ops.
pub fn random_batch(
    rng: &mut Rng,
    image: &MetadataImage,
    offset: u64,
    next_topic: &mut u128,
) -> Vec<MetadataRecord> {
    let brokers: Vec<_> = image.brokers().values().cloned().collect();
    let topics: Vec<_> = image.topics().by_id.values().cloned().collect();
    match rng.below(11) {
        0 if brokers.len() < 6 => vec![register(brokers.len() as i32 + 1)],
        1 if !brokers.is_empty() => {
            let b = &brokers[rng.below(brokers.len() as u64) as usize];
            vec![fence(b.id, b.epoch, !b.fenced)]
        }
        2 if !brokers.is_empty() => {
            // Re-registration of an existing broker (a restart): new epoch.
            let b = &brokers[rng.below(brokers.len() as u64) as usize];
            vec![register(b.id)]
        }
        3 | 4 if !brokers.is_empty() => {
            *next_topic += 1;
            let id = topic_id(*next_topic);
            let name = format!("t{}", *next_topic);
            let mut out = vec![topic(&name, id)];
            if rng.chance(50) {
                out.push(topic_config(&name, "min.insync.replicas", Some("2")));
            }
            let ids: Vec<i32> = brokers.iter().map(|b| b.id).collect();
            for p in 0..(1 + rng.below(4) as i32) {
                let rf = 1 + rng.below(ids.len().min(3) as u64) as usize;
                let start = rng.below(ids.len() as u64) as usize;
                let replicas: Vec<i32> = (0..rf).map(|i| ids[(start + i) % ids.len()]).collect();
                out.push(partition(id, p, &replicas, &replicas, replicas[0]));
            }
            out
        }
        5..=7 if !topics.is_empty() => {
            let t = &topics[rng.below(topics.len() as u64) as usize];
            let (p, reg) = t
                .partitions
                .iter()
                .nth(rng.below(t.partitions.len() as u64) as usize)
                .unwrap();
            // A random non-empty ISR subset of the replicas; leader from it or none.
            let mut isr: Vec<i32> = reg
                .replicas
                .iter()
                .copied()
                .filter(|_| rng.chance(60))
                .collect();
            if isr.is_empty() {
                isr.push(reg.replicas[rng.below(reg.replicas.len() as u64) as usize]);
            }
            if isr.contains(&reg.leader) && rng.chance(50) {
                vec![change_isr(t.id, *p, &isr)]
            } else {
                let leader = if rng.chance(80) {
                    isr[rng.below(isr.len() as u64) as usize]
                } else {
                    -1
                };
                vec![change_leader(t.id, *p, leader, Some(&isr))]
            }
        }
        8 if !topics.is_empty() && rng.chance(30) => {
            let t = &topics[rng.below(topics.len() as u64) as usize];
            vec![remove_topic(t.id)]
        }
        8 if !topics.is_empty() => {
            let t = &topics[rng.below(topics.len() as u64) as usize];
            let v = rng.chance(70).then(|| (1 + rng.below(3)).to_string());
            vec![topic_config(&t.name, "min.insync.replicas", v.as_deref())]
        }
        9 if image.cluster_id().is_none() => vec![cluster_id("c-1")],
        9 => vec![
            producer_ids(1, 1, image.next_producer_id() + 1000),
            feature("metadata.version", 1 + rng.below(20) as i32),
        ],
        _ => {
            let _ = offset;
            vec![if rng.chance(50) {
                cluster_config("min.insync.replicas", "1")
            } else {
                rec(Record::NoOp(Default::default()))
            }]
        }
    }
}
