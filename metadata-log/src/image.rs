//! `MetadataImage`: the immutable state of the cluster at one metadata offset.
//!
//! Mirrors Kafka's `org.apache.kafka.image.MetadataImage`: one image per domain (features,
//! cluster, topics, configs, producer ids), each behind an `Arc` so that a new image built by
//! [`MetadataDelta::apply`](crate::MetadataDelta::apply) shares every part it did not change.
//! Cloning an image is a handful of reference-count increments. Topics and partitions sit in
//! persistent maps (`imbl::OrdMap`, like Kafka's `ImmutableMap`): changing one partition of a
//! 100,000-partition image copies a few tree nodes, not the map.
//!
//! Invariants (checked by `MetadataDelta::replay` before anything enters an image, and by
//! [`MetadataImage::check_invariants`] in debug builds):
//! - topic names and topic ids are unique and `topics.by_name` is the inverse of `by_id`;
//! - every partition has non-empty, duplicate-free replicas; its ISR is non-empty,
//!   duplicate-free and a subset of the replicas; the leader is `-1` or an ISR member;
//! - a topic config exists only for an existing topic.
//!
//! An image can be written back as records ([`MetadataImage::to_records`]); replaying those
//! records on an empty image gives the same image. That list is what a snapshot holds.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use imbl::OrdMap;
use keel_proto::metadata::{
    BrokerEndpoint, ClusterIdRecord, ConfigRecord, ConfigResourceType, FeatureLevelRecord,
    LeaderRecoveryState, MetadataRecord, PartitionChangeRecord, PartitionRecord, ProducerIdsRecord,
    RegisterBrokerRecord, TopicRecord, metadata_record::Record,
};
use prost::Message;
use sha2::{Digest, Sha256};
use uuid::Uuid;

/// Broker id sentinel for "no leader" (Kafka: `LeaderConstants.NO_LEADER`).
pub const NO_LEADER: i32 = -1;

/// Where an image stands in the metadata log.
///
/// `offset` is the Raft log index of the last entry applied (inclusive; 0 = nothing applied)
/// and `term` that entry's Raft term. Keel's metadata offsets are Raft log indexes: every
/// record of one entry shares its entry's offset.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Provenance {
    /// Last applied metadata offset (Raft log index), inclusive.
    pub offset: u64,
    /// Raft term of that entry.
    pub term: u64,
}

/// One registered broker (Kafka: `BrokerRegistration`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerRegistration {
    /// Broker id (`node.id`).
    pub id: i32,
    /// UUID of the broker process start that registered.
    pub incarnation_id: Uuid,
    /// Broker epoch: metadata offset of the `RegisterBrokerRecord` (> 0).
    pub epoch: i64,
    /// Listeners, in registration order.
    pub endpoints: Vec<BrokerEndpoint>,
    /// Rack, if configured.
    pub rack: Option<String>,
    /// Fenced brokers lead nothing and are in no ISR.
    pub fenced: bool,
    /// Set once the broker asked for a controlled shutdown.
    pub in_controlled_shutdown: bool,
}

impl BrokerRegistration {
    /// True when the broker may lead or join an ISR: registered, unfenced and not shutting
    /// down (KIP-841).
    pub fn is_eligible(&self) -> bool {
        !self.fenced && !self.in_controlled_shutdown
    }

    pub(crate) fn to_record(&self) -> RegisterBrokerRecord {
        RegisterBrokerRecord {
            broker_id: self.id,
            incarnation_id: bytes::Bytes::copy_from_slice(self.incarnation_id.as_bytes()),
            broker_epoch: self.epoch,
            endpoints: self.endpoints.clone(),
            rack: self.rack.clone().unwrap_or_default(),
            fenced: self.fenced,
            in_controlled_shutdown: self.in_controlled_shutdown,
        }
    }
}

/// The replica state of one partition (Kafka: `PartitionRegistration`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionRegistration {
    /// Assignment (AR) in preference order; `replicas[0]` is the preferred leader.
    pub replicas: Vec<i32>,
    /// In-sync replicas; never empty, a subset of `replicas`.
    pub isr: Vec<i32>,
    /// Reassignment: replicas being removed / added (subset of `replicas`).
    pub removing_replicas: Vec<i32>,
    /// Replicas being added by a reassignment.
    pub adding_replicas: Vec<i32>,
    /// Leader broker id or [`NO_LEADER`]; when set it is an ISR member.
    pub leader: i32,
    /// `Recovering` after an unclean election until the leader has recovered.
    pub leader_recovery_state: LeaderRecoveryState,
    /// Bumped on every leader change.
    pub leader_epoch: i32,
    /// Bumped on every change record (KIP-497).
    pub partition_epoch: i32,
    /// Eligible leader replicas (KIP-966; empty until ELR is implemented).
    pub elr: Vec<i32>,
    /// Last known ELR (KIP-966).
    pub last_known_elr: Vec<i32>,
}

/// Why a `PartitionChangeRecord` cannot apply to a registration ([`PartitionRegistration::merge`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MergeError {
    /// `leader_recovery_state` is not a `LeaderRecoveryState` value.
    #[error("unknown leader_recovery_state {0}")]
    UnknownLeaderRecoveryState(i32),
    /// The named epoch is at `i32::MAX` and cannot go up.
    #[error("{0} would overflow")]
    EpochOverflow(&'static str),
}

impl PartitionRegistration {
    /// True when the partition has a leader.
    pub fn has_leader(&self) -> bool {
        self.leader != NO_LEADER
    }

    /// The registration after `change` (Kafka: `PartitionRegistration.merge`): each list or
    /// value the record carries replaces the current one; the leader epoch goes up by one iff
    /// the record names a leader (even the same one: KIP-841), the partition epoch by one
    /// always. The one derivation of a partition's next state, used by replay
    /// ([`MetadataDelta::replay`](crate::MetadataDelta::replay)) and by the controller to
    /// answer with the state "as it will be after replay".
    ///
    /// # Errors
    /// [`MergeError`] for a leader recovery state outside the enum or an epoch at `i32::MAX`.
    /// The result is not validated: callers check [`PartitionRegistration::validate`].
    pub fn merge(&self, change: &PartitionChangeRecord) -> Result<Self, MergeError> {
        let mut next = self.clone();
        if let Some(isr) = &change.isr {
            next.isr = isr.ids.clone();
        }
        if let Some(r) = &change.replicas {
            next.replicas = r.ids.clone();
        }
        if let Some(l) = &change.removing_replicas {
            next.removing_replicas = l.ids.clone();
        }
        if let Some(l) = &change.adding_replicas {
            next.adding_replicas = l.ids.clone();
        }
        if let Some(l) = &change.eligible_leader_replicas {
            next.elr = l.ids.clone();
        }
        if let Some(l) = &change.last_known_elr {
            next.last_known_elr = l.ids.clone();
        }
        if let Some(s) = change.leader_recovery_state {
            next.leader_recovery_state = LeaderRecoveryState::try_from(s)
                .map_err(|_| MergeError::UnknownLeaderRecoveryState(s))?;
        }
        if let Some(leader) = change.leader {
            next.leader = leader;
            next.leader_epoch = next
                .leader_epoch
                .checked_add(1)
                .ok_or(MergeError::EpochOverflow("leader epoch"))?;
        }
        next.partition_epoch = next
            .partition_epoch
            .checked_add(1)
            .ok_or(MergeError::EpochOverflow("partition epoch"))?;
        Ok(next)
    }

    /// Checks the structural invariants listed in the module doc. Returns a description of
    /// the first violation.
    pub fn validate(&self) -> Result<(), String> {
        if self.replicas.is_empty() {
            return Err("replicas is empty".into());
        }
        if has_duplicates(&self.replicas) {
            return Err(format!("replicas {:?} has duplicates", self.replicas));
        }
        if self.isr.is_empty() {
            return Err("ISR is empty".into());
        }
        if has_duplicates(&self.isr) {
            return Err(format!("ISR {:?} has duplicates", self.isr));
        }
        if let Some(b) = self.isr.iter().find(|b| !self.replicas.contains(b)) {
            return Err(format!(
                "ISR {:?} contains {b}, which is not in replicas {:?}",
                self.isr, self.replicas
            ));
        }
        if self.leader != NO_LEADER && !self.isr.contains(&self.leader) {
            return Err(format!(
                "leader {} is not in ISR {:?}",
                self.leader, self.isr
            ));
        }
        if self.leader_epoch < 0 || self.partition_epoch < 0 {
            return Err("negative epoch".into());
        }
        if let Some(b) = self.replicas.iter().find(|b| **b < 0) {
            return Err(format!(
                "replicas {:?} contains the invalid broker id {b}",
                self.replicas
            ));
        }
        for (name, list) in [
            ("removing", &self.removing_replicas),
            ("adding", &self.adding_replicas),
        ] {
            if let Some(b) = list.iter().find(|b| !self.replicas.contains(b)) {
                return Err(format!(
                    "{name} replica {b} is not in replicas {:?}",
                    self.replicas
                ));
            }
        }
        Ok(())
    }

    pub(crate) fn to_record(&self, topic_id: Uuid, partition_id: i32) -> PartitionRecord {
        PartitionRecord {
            topic_id: uuid_bytes(topic_id),
            partition_id,
            replicas: self.replicas.clone(),
            isr: self.isr.clone(),
            removing_replicas: self.removing_replicas.clone(),
            adding_replicas: self.adding_replicas.clone(),
            leader: self.leader,
            leader_recovery_state: self.leader_recovery_state as i32,
            leader_epoch: self.leader_epoch,
            partition_epoch: self.partition_epoch,
            eligible_leader_replicas: self.elr.clone(),
            last_known_elr: self.last_known_elr.clone(),
        }
    }
}

fn has_duplicates(ids: &[i32]) -> bool {
    ids.iter().enumerate().any(|(i, a)| ids[..i].contains(a))
}

/// One topic and its partitions (Kafka: `TopicImage`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicImage {
    /// Topic name (unique).
    pub name: String,
    /// Topic id (unique).
    pub id: Uuid,
    /// Partitions by partition id: a persistent map, so a change to one partition copies a
    /// path of pointers, not the topic.
    pub partitions: OrdMap<i32, Arc<PartitionRegistration>>,
}

/// All topics, by id and by name (Kafka: `TopicsImage`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TopicsImage {
    /// Topics by id (persistent map).
    pub by_id: OrdMap<Uuid, Arc<TopicImage>>,
    /// Topic id by name; the inverse of `by_id`.
    pub by_name: OrdMap<String, Uuid>,
}

impl TopicsImage {
    /// The topic with this name.
    pub fn get_by_name(&self, name: &str) -> Option<&Arc<TopicImage>> {
        self.by_name.get(name).and_then(|id| self.by_id.get(id))
    }

    /// Number of partitions over all topics.
    pub fn partition_count(&self) -> usize {
        self.by_id.values().map(|t| t.partitions.len()).sum()
    }
}

/// The resource a config applies to (Kafka: `ConfigResource`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ConfigResource {
    /// Cluster-wide defaults.
    Cluster,
    /// One broker, by id.
    Broker(i32),
    /// One topic, by name.
    Topic(String),
}

impl ConfigResource {
    /// Builds the resource named by a `ConfigRecord`.
    pub fn from_record(r: &ConfigRecord) -> Result<Self, String> {
        match ConfigResourceType::try_from(r.resource_type) {
            Ok(ConfigResourceType::Cluster) => Ok(ConfigResource::Cluster),
            Ok(ConfigResourceType::Topic) if !r.resource_name.is_empty() => {
                Ok(ConfigResource::Topic(r.resource_name.clone()))
            }
            Ok(ConfigResourceType::Broker) if r.resource_name.is_empty() => {
                Ok(ConfigResource::Cluster)
            }
            Ok(ConfigResourceType::Broker) => r
                .resource_name
                .parse()
                .map(ConfigResource::Broker)
                .map_err(|_| {
                    format!(
                        "broker config resource {:?} is not a broker id",
                        r.resource_name
                    )
                }),
            _ => Err(format!(
                "config resource type {} with name {:?} is not supported",
                r.resource_type, r.resource_name
            )),
        }
    }

    fn type_and_name(&self) -> (ConfigResourceType, String) {
        match self {
            ConfigResource::Cluster => (ConfigResourceType::Cluster, String::new()),
            ConfigResource::Broker(id) => (ConfigResourceType::Broker, id.to_string()),
            ConfigResource::Topic(t) => (ConfigResourceType::Topic, t.clone()),
        }
    }
}

/// Configs per resource (Kafka: `ConfigurationsImage`). Keys use Kafka's names.
pub type ConfigsImage = BTreeMap<ConfigResource, Arc<BTreeMap<String, String>>>;

/// The immutable cluster state at one metadata offset. See the module doc.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetadataImage {
    pub(crate) provenance: Provenance,
    pub(crate) features: Arc<BTreeMap<String, i32>>,
    pub(crate) brokers: Arc<BTreeMap<i32, Arc<BrokerRegistration>>>,
    pub(crate) topics: Arc<TopicsImage>,
    pub(crate) configs: Arc<ConfigsImage>,
    /// Next producer id the controller will hand out (KIP-730); 0 before the first block.
    pub(crate) next_producer_id: i64,
    /// The cluster id, once the bootstrap record is committed.
    pub(crate) cluster_id: Option<Arc<str>>,
    /// The ACLs (#23).
    pub(crate) acls: Arc<crate::acl::AclsImage>,
    /// The SASL/SCRAM credentials (#23), by user and mechanism.
    pub(crate) scram: Arc<crate::scram::ScramCredentialsImage>,
}

impl MetadataImage {
    /// The empty image (offset 0).
    pub fn empty() -> Self {
        Self::default()
    }

    /// Where this image stands in the metadata log.
    pub fn provenance(&self) -> Provenance {
        self.provenance
    }

    /// Feature levels by name (e.g. `metadata.version`).
    pub fn features(&self) -> &BTreeMap<String, i32> {
        &self.features
    }

    /// Registered brokers by id.
    pub fn brokers(&self) -> &BTreeMap<i32, Arc<BrokerRegistration>> {
        &self.brokers
    }

    /// One broker's registration.
    pub fn broker(&self, id: i32) -> Option<&BrokerRegistration> {
        self.brokers.get(&id).map(|b| b.as_ref())
    }

    /// All topics.
    pub fn topics(&self) -> &TopicsImage {
        &self.topics
    }

    /// One partition, by topic id and partition id.
    pub fn partition(&self, topic_id: Uuid, partition: i32) -> Option<&PartitionRegistration> {
        self.topics
            .by_id
            .get(&topic_id)?
            .partitions
            .get(&partition)
            .map(|p| p.as_ref())
    }

    /// Configs by resource.
    pub fn configs(&self) -> &ConfigsImage {
        &self.configs
    }

    /// One config value (explicitly set on that resource; no defaults applied).
    pub fn config(&self, resource: &ConfigResource, key: &str) -> Option<&str> {
        self.configs.get(resource)?.get(key).map(String::as_str)
    }

    /// The cluster id (`None` until the first active controller wrote it).
    pub fn cluster_id(&self) -> Option<&str> {
        self.cluster_id.as_deref()
    }

    /// The ACLs ([`crate::acl`]).
    pub fn acls(&self) -> &crate::acl::AclsImage {
        &self.acls
    }

    /// The SASL/SCRAM credentials ([`crate::scram`]).
    pub fn scram_credentials(&self) -> &crate::scram::ScramCredentialsImage {
        &self.scram
    }

    /// `user`'s credential for `mechanism`, if any.
    pub fn scram_credential(
        &self,
        user: &str,
        mechanism: crate::scram::Mechanism,
    ) -> Option<Arc<crate::scram::ScramCredential>> {
        self.scram.get(&(user.to_owned(), mechanism)).cloned()
    }

    /// Next producer id to allocate (exclusive end of the last block handed out).
    pub fn next_producer_id(&self) -> i64 {
        self.next_producer_id
    }

    /// True when nothing was ever applied.
    pub fn is_empty(&self) -> bool {
        self.features.is_empty()
            && self.brokers.is_empty()
            && self.topics.by_id.is_empty()
            && self.configs.is_empty()
            && self.next_producer_id == 0
            && self.cluster_id.is_none()
            && self.acls.is_empty()
            && self.scram.is_empty()
    }

    /// Writes the image as the records that rebuild it from the empty image: the cluster id,
    /// feature levels,
    /// broker registrations, then per topic its `TopicRecord`, `ConfigRecord`s and
    /// `PartitionRecord`s, then cluster and broker configs, then the producer-id block, then
    /// the ACLs by id, then the SCRAM credentials by user and mechanism.
    /// Provenance is not a record: snapshots carry it in their header.
    pub fn to_records(&self) -> Vec<MetadataRecord> {
        let mut out = Vec::with_capacity(
            self.features.len()
                + self.brokers.len()
                + self.topics.by_id.len() * 2
                + self.topics.partition_count()
                + 1,
        );
        let mut push = |r: Record| out.push(MetadataRecord { record: Some(r) });
        if let Some(id) = &self.cluster_id {
            push(Record::ClusterId(ClusterIdRecord {
                cluster_id: id.to_string(),
            }));
        }
        for (name, level) in self.features.iter() {
            push(Record::FeatureLevel(FeatureLevelRecord {
                name: name.clone(),
                feature_level: *level,
            }));
        }
        for b in self.brokers.values() {
            push(Record::RegisterBroker(b.to_record()));
        }
        // Topics in name order so the output does not depend on random ids.
        for id in self.topics.by_name.values() {
            let t = &self.topics.by_id[id];
            push(Record::Topic(TopicRecord {
                name: t.name.clone(),
                topic_id: uuid_bytes(t.id),
            }));
            if let Some(cfg) = self.configs.get(&ConfigResource::Topic(t.name.clone())) {
                for (k, v) in cfg.iter() {
                    push(config_record(&ConfigResource::Topic(t.name.clone()), k, v));
                }
            }
            for (p, reg) in &t.partitions {
                push(Record::Partition(reg.to_record(t.id, *p)));
            }
        }
        for (res, cfg) in self.configs.iter() {
            if matches!(res, ConfigResource::Topic(_)) {
                continue;
            }
            for (k, v) in cfg.iter() {
                push(config_record(res, k, v));
            }
        }
        if self.next_producer_id != 0 {
            push(Record::ProducerIds(ProducerIdsRecord {
                broker_id: -1,
                broker_epoch: -1,
                next_producer_id: self.next_producer_id,
            }));
        }
        for (id, acl) in self.acls.by_id() {
            push(Record::AccessControlEntry(acl.to_record(*id)));
        }
        for ((user, _), c) in self.scram.iter() {
            push(Record::UserScramCredential(c.to_record(user)));
        }
        out
    }

    /// A deterministic SHA-256 digest of the image's content (not its provenance): equal
    /// images give equal digests on every node and build. Computed over the protobuf encoding
    /// of [`to_records`](Self::to_records), each record length-prefixed.
    pub fn digest(&self) -> ImageDigest {
        let mut h = Sha256::new();
        let mut buf = Vec::with_capacity(256);
        for r in self.to_records() {
            buf.clear();
            r.encode_length_delimited(&mut buf).expect("Vec grows");
            h.update(&buf);
        }
        ImageDigest(h.finalize().into())
    }

    /// Asserts the invariants of the module doc. Cost O(size of image): call from debug
    /// assertions and tests.
    pub fn check_invariants(&self) -> Result<(), String> {
        if self.topics.by_id.len() != self.topics.by_name.len() {
            return Err("topics by id and by name differ in size".into());
        }
        for (name, id) in self.topics.by_name.iter() {
            let t = self
                .topics
                .by_id
                .get(id)
                .ok_or(format!("topic {name} missing by id"))?;
            if &t.name != name || t.id != *id {
                return Err(format!("topic {name} indexed inconsistently"));
            }
            for (p, reg) in &t.partitions {
                reg.validate()
                    .map_err(|e| format!("partition {name}-{p}: {e}"))?;
            }
        }
        for res in self.configs.keys() {
            if let ConfigResource::Topic(t) = res
                && !self.topics.by_name.contains_key(t)
            {
                return Err(format!("config for missing topic {t}"));
            }
        }
        Ok(())
    }
}

fn config_record(res: &ConfigResource, key: &str, value: &str) -> Record {
    let (ty, name) = res.type_and_name();
    Record::Config(ConfigRecord {
        resource_type: ty as i32,
        resource_name: name,
        name: key.to_string(),
        value: Some(value.to_string()),
    })
}

/// A SHA-256 digest of an image's content; prints as 64 hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ImageDigest(pub [u8; 32]);

impl fmt::Display for ImageDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for ImageDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ImageDigest({self})")
    }
}

/// A topic id as the 16 bytes the records carry.
pub fn uuid_bytes(id: Uuid) -> bytes::Bytes {
    bytes::Bytes::copy_from_slice(id.as_bytes())
}

/// Parses the 16-byte topic or incarnation id of a record.
pub fn uuid_from_bytes(b: &[u8]) -> Option<Uuid> {
    Uuid::from_slice(b).ok()
}

/// The message name of a record's type, e.g. `"PartitionChangeRecord"` (the names used by
/// `ReadMetadataLog` filters and `keelctl metadata log`); `"UnknownRecord"` when unset.
pub fn record_type_name(record: &MetadataRecord) -> &'static str {
    match &record.record {
        Some(Record::RegisterBroker(_)) => "RegisterBrokerRecord",
        Some(Record::UnregisterBroker(_)) => "UnregisterBrokerRecord",
        Some(Record::BrokerRegistrationChange(_)) => "BrokerRegistrationChangeRecord",
        Some(Record::Topic(_)) => "TopicRecord",
        Some(Record::Partition(_)) => "PartitionRecord",
        Some(Record::PartitionChange(_)) => "PartitionChangeRecord",
        Some(Record::RemoveTopic(_)) => "RemoveTopicRecord",
        Some(Record::Config(_)) => "ConfigRecord",
        Some(Record::ProducerIds(_)) => "ProducerIdsRecord",
        Some(Record::FeatureLevel(_)) => "FeatureLevelRecord",
        Some(Record::NoOp(_)) => "NoOpRecord",
        Some(Record::ClusterId(_)) => "ClusterIdRecord",
        Some(Record::AccessControlEntry(_)) => "AccessControlEntryRecord",
        Some(Record::RemoveAccessControlEntry(_)) => "RemoveAccessControlEntryRecord",
        Some(Record::UserScramCredential(_)) => "UserScramCredentialRecord",
        Some(Record::RemoveUserScramCredential(_)) => "RemoveUserScramCredentialRecord",
        None => "UnknownRecord",
    }
}

/// Every name [`record_type_name`] returns for a known record.
pub const RECORD_TYPE_NAMES: &[&str] = &[
    "RegisterBrokerRecord",
    "UnregisterBrokerRecord",
    "BrokerRegistrationChangeRecord",
    "TopicRecord",
    "PartitionRecord",
    "PartitionChangeRecord",
    "RemoveTopicRecord",
    "ConfigRecord",
    "ProducerIdsRecord",
    "FeatureLevelRecord",
    "NoOpRecord",
    "ClusterIdRecord",
    "AccessControlEntryRecord",
    "RemoveAccessControlEntryRecord",
    "UserScramCredentialRecord",
    "RemoveUserScramCredentialRecord",
];

/// The topic id a record is about, if any (topic, partition and removal records).
pub fn record_topic_id(record: &MetadataRecord) -> Option<Uuid> {
    let bytes = match &record.record {
        Some(Record::Topic(r)) => &r.topic_id,
        Some(Record::Partition(r)) => &r.topic_id,
        Some(Record::PartitionChange(r)) => &r.topic_id,
        Some(Record::RemoveTopic(r)) => &r.topic_id,
        _ => return None,
    };
    uuid_from_bytes(bytes)
}
