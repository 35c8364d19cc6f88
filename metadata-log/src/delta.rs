//! `MetadataDelta`: a base image plus the records replayed since (Kafka: `MetadataDelta`).
//!
//! `replay` validates one record against the current view (base + changes so far) and only
//! then records its effect; a record that fails validation returns a [`ReplayError`] and
//! leaves the delta exactly as it was. `apply` builds the next [`MetadataImage`], reusing every
//! part of the base that no record touched.
//!
//! Epochs are derived here, on the same path on every node (DESIGN §3):
//! - `PartitionChangeRecord`: `partition_epoch + 1` always; `leader_epoch + 1` iff the record
//!   carries a leader (the controller sets it only when the leader changes; Kafka:
//!   `PartitionRegistration.merge`).
//! - `RegisterBrokerRecord` with `broker_epoch == 0`: the broker epoch is the metadata offset
//!   of the entry holding the record (set with [`MetadataDelta::set_provenance`]); snapshots
//!   write the epoch explicitly.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use keel_proto::metadata::{
    BrokerRegistrationChangeRecord, ConfigRecord, FencingChange, LeaderRecoveryState,
    MetadataRecord, PartitionChangeRecord, PartitionRecord, RegisterBrokerRecord, ShutdownChange,
    metadata_record::Record,
};
use uuid::Uuid;

use crate::image::{
    BrokerRegistration, ConfigResource, MergeError, MetadataImage, PartitionRegistration,
    Provenance, TopicImage, TopicsImage, uuid_from_bytes,
};

/// Why a record could not be replayed. The delta is unchanged when `replay` returns one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplayError {
    /// The record's `oneof` is unset: written by a newer version or corrupt.
    #[error("record has no known type")]
    EmptyRecord,
    /// A 16-byte UUID field had another length.
    #[error("{field} must be a 16-byte UUID, got {len} bytes")]
    InvalidUuid {
        /// Field name.
        field: &'static str,
        /// Length found.
        len: usize,
    },
    /// A record names a topic id that does not exist.
    #[error("unknown topic id {topic_id}")]
    UnknownTopicId {
        /// The topic id.
        topic_id: Uuid,
    },
    /// A config record names a topic that does not exist.
    #[error("unknown topic {name:?}")]
    UnknownTopicName {
        /// The topic name.
        name: String,
    },
    /// `TopicRecord` for a name already in use.
    #[error("topic name {name:?} already exists")]
    DuplicateTopicName {
        /// The topic name.
        name: String,
    },
    /// `TopicRecord` for an id already in use.
    #[error("topic id {topic_id} already exists")]
    DuplicateTopicId {
        /// The topic id.
        topic_id: Uuid,
    },
    /// A change for a partition that does not exist.
    #[error("unknown partition {topic}-{partition}")]
    UnknownPartition {
        /// Topic name.
        topic: String,
        /// Partition id.
        partition: i32,
    },
    /// The resulting partition state breaks an invariant (ISR not in replicas, ...).
    #[error("invalid state for partition {topic}-{partition}: {reason}")]
    InvalidPartition {
        /// Topic name.
        topic: String,
        /// Partition id.
        partition: i32,
        /// Which invariant broke.
        reason: String,
    },
    /// A `TopicRecord` with an empty name or a nil id.
    #[error("invalid topic {name:?}: {reason}")]
    InvalidTopic {
        /// The name.
        name: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// A registration with a negative broker id or epoch.
    #[error("invalid registration of broker {broker_id} with epoch {epoch}")]
    InvalidRegistration {
        /// Broker id.
        broker_id: i32,
        /// Epoch in the record.
        epoch: i64,
    },
    /// A record names a broker that is not registered.
    #[error("broker {broker_id} is not registered")]
    UnknownBroker {
        /// Broker id.
        broker_id: i32,
    },
    /// A record's broker epoch does not match the registration.
    #[error("broker {broker_id} has epoch {current}, record carries {record}")]
    BrokerEpochMismatch {
        /// Broker id.
        broker_id: i32,
        /// Epoch of the current registration.
        current: i64,
        /// Epoch in the record.
        record: i64,
    },
    /// A registration asks for its epoch to be assigned on replay (`broker_epoch == 0`) but
    /// no offset was set with `set_provenance`.
    #[error("broker {broker_id} registration needs an offset to derive its epoch")]
    NoOffsetForBrokerEpoch {
        /// Broker id.
        broker_id: i32,
    },
    /// A registration's epoch would be assigned from an offset beyond the int64 range of
    /// broker epochs (a damaged snapshot header; Raft indexes never get there).
    #[error("broker {broker_id} registration at offset {offset}: beyond the int64 broker epochs")]
    OffsetBeyondBrokerEpochs {
        /// Broker id.
        broker_id: i32,
        /// The offset.
        offset: u64,
    },
    /// A config record's resource is not usable.
    #[error("invalid config resource: {reason}")]
    InvalidConfigResource {
        /// What was wrong.
        reason: String,
    },
    /// `ProducerIdsRecord` does not move the next producer id forward.
    #[error("next producer id {record} does not exceed current {current}")]
    ProducerIdNotIncreasing {
        /// Current next producer id.
        current: i64,
        /// Value in the record.
        record: i64,
    },
    /// A `ClusterIdRecord` would change (or empty) the cluster id: ids are set once.
    #[error("cluster id is {current:?}; a record tries to set {record:?}")]
    ClusterIdChange {
        /// Current id ("" = none).
        current: String,
        /// Id in the record.
        record: String,
    },
    /// An ACL record is invalid, reuses an id, or removes an unknown id.
    #[error("ACL record: {reason}")]
    InvalidAcl {
        /// What was wrong.
        reason: String,
    },
    /// A SCRAM credential record is invalid, or removes a credential that does not exist.
    #[error("SCRAM credential record: {reason}")]
    InvalidScramCredential {
        /// What was wrong.
        reason: String,
    },
    /// An enum field holds a value this build does not know.
    #[error("{field} has unknown value {value}")]
    UnknownEnumValue {
        /// Field name.
        field: &'static str,
        /// Raw value.
        value: i32,
    },
}

/// The changes to one topic. Partitions are tracked one by one so that a change costs one
/// registration, not a copy of the topic.
#[derive(Debug, Clone)]
struct TopicDelta {
    name: String,
    /// Created by this delta: base partitions (if any, from an earlier incarnation of the
    /// same id) do not show through.
    fresh: bool,
    /// Removed by this delta.
    removed: bool,
    /// New or changed partitions.
    partitions: BTreeMap<i32, PartitionRegistration>,
}

/// A base image plus replayed records. See the module doc.
#[derive(Debug, Clone)]
pub struct MetadataDelta {
    base: MetadataImage,
    provenance: Provenance,
    /// Whole feature map once any feature changed (it is tiny).
    features: Option<BTreeMap<String, i32>>,
    /// Changed brokers; `None` = unregistered.
    brokers: BTreeMap<i32, Option<BrokerRegistration>>,
    /// Changed topics: created, removed, or with changed partitions.
    topics: HashMap<Uuid, TopicDelta>,
    /// Name index changes; `None` = name freed.
    names: HashMap<String, Option<Uuid>>,
    /// Changed config maps (whole map per resource); `None` = all configs removed.
    configs: BTreeMap<ConfigResource, Option<BTreeMap<String, String>>>,
    next_producer_id: Option<i64>,
    cluster_id: Option<std::sync::Arc<str>>,
    /// Changed ACLs; `None` = removed.
    acls: BTreeMap<Uuid, Option<Arc<crate::acl::AclBinding>>>,
    /// Changed SCRAM credentials; `None` = removed.
    scram: BTreeMap<(String, crate::scram::Mechanism), Option<Arc<crate::scram::ScramCredential>>>,
}

impl MetadataDelta {
    /// A delta with no changes on top of `base`.
    pub fn new(base: MetadataImage) -> Self {
        Self {
            provenance: base.provenance(),
            base,
            features: None,
            brokers: BTreeMap::new(),
            topics: HashMap::new(),
            names: HashMap::new(),
            configs: BTreeMap::new(),
            next_producer_id: None,
            cluster_id: None,
            acls: BTreeMap::new(),
            scram: BTreeMap::new(),
        }
    }

    /// The image this delta started from.
    pub fn base(&self) -> &MetadataImage {
        &self.base
    }

    /// Sets the metadata offset and term of the entry whose records are replayed next. The
    /// applied image carries the last value set. Offsets never go backwards.
    pub fn set_provenance(&mut self, provenance: Provenance) {
        debug_assert!(
            provenance >= self.provenance,
            "provenance went backwards: {:?} -> {provenance:?}",
            self.provenance
        );
        self.provenance = provenance;
    }

    /// Replays one record. On error nothing changed.
    pub fn replay(&mut self, record: &MetadataRecord) -> Result<(), ReplayError> {
        match record.record.as_ref().ok_or(ReplayError::EmptyRecord)? {
            Record::RegisterBroker(r) => self.replay_register_broker(r),
            Record::UnregisterBroker(r) => {
                self.check_broker_epoch(r.broker_id, r.broker_epoch)?;
                self.brokers.insert(r.broker_id, None);
                Ok(())
            }
            Record::BrokerRegistrationChange(r) => self.replay_broker_change(r),
            Record::Topic(r) => {
                let id = parse_uuid("topic_id", &r.topic_id)?;
                if id.is_nil() || r.name.is_empty() {
                    return Err(ReplayError::InvalidTopic {
                        name: r.name.clone(),
                        reason: "topic name must not be empty and topic id not nil",
                    });
                }
                if self.topic_id(&r.name).is_some() {
                    return Err(ReplayError::DuplicateTopicName {
                        name: r.name.clone(),
                    });
                }
                if self.topic_name(id).is_some() {
                    return Err(ReplayError::DuplicateTopicId { topic_id: id });
                }
                let t = TopicDelta {
                    name: r.name.clone(),
                    fresh: true,
                    removed: false,
                    partitions: BTreeMap::new(),
                };
                self.topics.insert(id, t);
                self.names.insert(r.name.clone(), Some(id));
                Ok(())
            }
            Record::Partition(r) => self.replay_partition(r),
            Record::PartitionChange(r) => self.replay_partition_change(r),
            Record::RemoveTopic(r) => {
                let id = parse_uuid("topic_id", &r.topic_id)?;
                let name = self
                    .topic_name(id)
                    .ok_or(ReplayError::UnknownTopicId { topic_id: id })?
                    .to_string();
                // Kafka drops a deleted topic's configs with it (MetadataDelta.replay).
                let res = ConfigResource::Topic(name.clone());
                if self.config_map(&res).is_some() {
                    self.configs.insert(res, None);
                }
                let t = self.topic_delta(id);
                t.removed = true;
                t.partitions.clear();
                self.names.insert(name, None);
                Ok(())
            }
            Record::Config(r) => self.replay_config(r),
            Record::ProducerIds(r) => {
                let current = self.next_producer_id.unwrap_or(self.base.next_producer_id);
                if r.next_producer_id <= current {
                    return Err(ReplayError::ProducerIdNotIncreasing {
                        current,
                        record: r.next_producer_id,
                    });
                }
                self.next_producer_id = Some(r.next_producer_id);
                Ok(())
            }
            Record::FeatureLevel(r) => {
                let f = self
                    .features
                    .get_or_insert_with(|| (*self.base.features).clone());
                // Kafka: level 0 removes the feature.
                if r.feature_level == 0 {
                    f.remove(&r.name);
                } else {
                    f.insert(r.name.clone(), r.feature_level);
                }
                Ok(())
            }
            Record::NoOp(_) => Ok(()),
            Record::ClusterId(r) => {
                let current = self.cluster_id.as_deref().or(self.base.cluster_id());
                match current {
                    Some(c) if c != r.cluster_id => Err(ReplayError::ClusterIdChange {
                        current: c.to_string(),
                        record: r.cluster_id.clone(),
                    }),
                    _ if r.cluster_id.is_empty() => Err(ReplayError::ClusterIdChange {
                        current: current.unwrap_or_default().to_string(),
                        record: String::new(),
                    }),
                    _ => {
                        self.cluster_id = Some(r.cluster_id.as_str().into());
                        Ok(())
                    }
                }
            }
            Record::AccessControlEntry(r) => {
                let bad = |reason: String| ReplayError::InvalidAcl { reason };
                let id = crate::acl::acl_id(&r.id)
                    .ok_or_else(|| bad(format!("id is {} bytes, not 16", r.id.len())))?;
                let binding =
                    crate::acl::AclBinding::from_record(r).map_err(|e| bad(e.to_string()))?;
                if self.acl(id).is_some() {
                    return Err(bad(format!("id {id} is in use")));
                }
                self.acls.insert(id, Some(Arc::new(binding)));
                Ok(())
            }
            Record::RemoveAccessControlEntry(r) => {
                let bad = |reason: String| ReplayError::InvalidAcl { reason };
                let id = crate::acl::acl_id(&r.id)
                    .ok_or_else(|| bad(format!("id is {} bytes, not 16", r.id.len())))?;
                if self.acl(id).is_none() {
                    return Err(bad(format!("no ACL has id {id}")));
                }
                self.acls.insert(id, None);
                Ok(())
            }
            Record::UserScramCredential(r) => {
                let c = crate::scram::ScramCredential::from_record(r).map_err(|e| {
                    ReplayError::InvalidScramCredential {
                        reason: e.to_string(),
                    }
                })?;
                self.scram
                    .insert((r.name.clone(), c.mechanism), Some(Arc::new(c)));
                Ok(())
            }
            Record::RemoveUserScramCredential(r) => {
                let bad = |reason: String| ReplayError::InvalidScramCredential { reason };
                let m = crate::scram::Mechanism::from_proto(r.mechanism)
                    .ok_or_else(|| bad(format!("mechanism {} is unknown", r.mechanism)))?;
                let key = (r.name.clone(), m);
                let exists = match self.scram.get(&key) {
                    Some(c) => c.is_some(),
                    None => self.base.scram.contains_key(&key),
                };
                if !exists {
                    return Err(bad(format!("user {:?} has no {m} credential", r.name)));
                }
                self.scram.insert(key, None);
                Ok(())
            }
        }
    }

    /// The ACL with `id` as of the records replayed so far.
    fn acl(&self, id: Uuid) -> Option<&crate::acl::AclBinding> {
        match self.acls.get(&id) {
            Some(changed) => changed.as_deref(),
            None => self.base.acls.by_id().get(&id).map(|b| b.as_ref()),
        }
    }

    fn replay_register_broker(&mut self, r: &RegisterBrokerRecord) -> Result<(), ReplayError> {
        let incarnation_id = parse_uuid("incarnation_id", &r.incarnation_id)?;
        if r.broker_id < 0 || r.broker_epoch < 0 {
            return Err(ReplayError::InvalidRegistration {
                broker_id: r.broker_id,
                epoch: r.broker_epoch,
            });
        }
        let epoch = match r.broker_epoch {
            0 if self.provenance.offset == 0 => {
                return Err(ReplayError::NoOffsetForBrokerEpoch {
                    broker_id: r.broker_id,
                });
            }
            0 => i64::try_from(self.provenance.offset).map_err(|_| {
                ReplayError::OffsetBeyondBrokerEpochs {
                    broker_id: r.broker_id,
                    offset: self.provenance.offset,
                }
            })?,
            e => e,
        };
        let reg = BrokerRegistration {
            id: r.broker_id,
            incarnation_id,
            epoch,
            endpoints: r.endpoints.clone(),
            rack: (!r.rack.is_empty()).then(|| r.rack.clone()),
            fenced: r.fenced,
            in_controlled_shutdown: r.in_controlled_shutdown,
        };
        self.brokers.insert(r.broker_id, Some(reg));
        Ok(())
    }

    fn replay_broker_change(
        &mut self,
        r: &BrokerRegistrationChangeRecord,
    ) -> Result<(), ReplayError> {
        self.check_broker_epoch(r.broker_id, r.broker_epoch)?;
        let fencing =
            FencingChange::try_from(r.fenced).map_err(|_| ReplayError::UnknownEnumValue {
                field: "fenced",
                value: r.fenced,
            })?;
        let shutdown = ShutdownChange::try_from(r.in_controlled_shutdown).map_err(|_| {
            ReplayError::UnknownEnumValue {
                field: "in_controlled_shutdown",
                value: r.in_controlled_shutdown,
            }
        })?;
        let mut reg = self.broker(r.broker_id).expect("epoch checked").clone();
        match fencing {
            FencingChange::None => {}
            FencingChange::Fence => reg.fenced = true,
            FencingChange::Unfence => reg.fenced = false,
        }
        if shutdown == ShutdownChange::InControlledShutdown {
            reg.in_controlled_shutdown = true;
        }
        self.brokers.insert(r.broker_id, Some(reg));
        Ok(())
    }

    fn replay_partition(&mut self, r: &PartitionRecord) -> Result<(), ReplayError> {
        let id = parse_uuid("topic_id", &r.topic_id)?;
        let topic = self
            .topic_name(id)
            .ok_or(ReplayError::UnknownTopicId { topic_id: id })?;
        let invalid = |reason: &str| ReplayError::InvalidPartition {
            topic: topic.to_string(),
            partition: r.partition_id,
            reason: reason.to_string(),
        };
        if r.partition_id < 0 {
            return Err(invalid("negative partition id"));
        }
        // A PartitionRecord creates a partition; replacing one would reset its epochs, which
        // only ever increase (DESIGN §7 invariant 5). Changes use PartitionChangeRecord.
        if self.partition(id, r.partition_id).is_some() {
            return Err(invalid("partition already exists"));
        }
        let reg = PartitionRegistration {
            replicas: r.replicas.clone(),
            isr: r.isr.clone(),
            removing_replicas: r.removing_replicas.clone(),
            adding_replicas: r.adding_replicas.clone(),
            leader: r.leader,
            leader_recovery_state: recovery_state(r.leader_recovery_state)?,
            leader_epoch: r.leader_epoch,
            partition_epoch: r.partition_epoch,
            elr: r.eligible_leader_replicas.clone(),
            last_known_elr: r.last_known_elr.clone(),
        };
        reg.validate()
            .map_err(|reason| ReplayError::InvalidPartition {
                topic: topic.to_string(),
                partition: r.partition_id,
                reason,
            })?;
        self.topic_delta(id).partitions.insert(r.partition_id, reg);
        Ok(())
    }

    fn replay_partition_change(&mut self, r: &PartitionChangeRecord) -> Result<(), ReplayError> {
        let id = parse_uuid("topic_id", &r.topic_id)?;
        let topic = self
            .topic_name(id)
            .ok_or(ReplayError::UnknownTopicId { topic_id: id })?;
        let old =
            self.partition(id, r.partition_id)
                .ok_or_else(|| ReplayError::UnknownPartition {
                    topic: topic.to_string(),
                    partition: r.partition_id,
                })?;
        let reg = old.merge(r).map_err(|e| match e {
            MergeError::UnknownLeaderRecoveryState(value) => ReplayError::UnknownEnumValue {
                field: "leader_recovery_state",
                value,
            },
            MergeError::EpochOverflow(_) => ReplayError::InvalidPartition {
                topic: topic.to_string(),
                partition: r.partition_id,
                reason: e.to_string(),
            },
        })?;
        reg.validate()
            .map_err(|reason| ReplayError::InvalidPartition {
                topic: topic.to_string(),
                partition: r.partition_id,
                reason,
            })?;
        self.topic_delta(id).partitions.insert(r.partition_id, reg);
        Ok(())
    }

    fn replay_config(&mut self, r: &ConfigRecord) -> Result<(), ReplayError> {
        let res = ConfigResource::from_record(r)
            .map_err(|reason| ReplayError::InvalidConfigResource { reason })?;
        if let ConfigResource::Topic(name) = &res
            && self.topic_id(name).is_none()
        {
            return Err(ReplayError::UnknownTopicName { name: name.clone() });
        }
        let mut map = self.config_map(&res).cloned().unwrap_or_default();
        match &r.value {
            Some(v) => map.insert(r.name.clone(), v.clone()),
            None => map.remove(&r.name),
        };
        self.configs.insert(res, (!map.is_empty()).then_some(map));
        Ok(())
    }

    fn check_broker_epoch(&self, broker_id: i32, epoch: i64) -> Result<(), ReplayError> {
        let b = self
            .broker(broker_id)
            .ok_or(ReplayError::UnknownBroker { broker_id })?;
        if b.epoch != epoch {
            return Err(ReplayError::BrokerEpochMismatch {
                broker_id,
                current: b.epoch,
                record: epoch,
            });
        }
        Ok(())
    }

    /// The current view of one broker (base + changes).
    pub fn broker(&self, id: i32) -> Option<&BrokerRegistration> {
        match self.brokers.get(&id) {
            Some(changed) => changed.as_ref(),
            None => self.base.broker(id),
        }
    }

    /// The current name of a topic id, if the topic exists.
    pub fn topic_name(&self, id: Uuid) -> Option<&str> {
        match self.topics.get(&id) {
            Some(t) if t.removed => None,
            Some(t) => Some(&t.name),
            None => self.base.topics.by_id.get(&id).map(|t| t.name.as_str()),
        }
    }

    /// The current view of one partition.
    pub fn partition(&self, id: Uuid, partition: i32) -> Option<&PartitionRegistration> {
        if let Some(t) = self.topics.get(&id) {
            if t.removed {
                return None;
            }
            if let Some(p) = t.partitions.get(&partition) {
                return Some(p);
            }
            if t.fresh {
                return None;
            }
        }
        self.base.partition(id, partition)
    }

    /// The current id of a topic name.
    pub fn topic_id(&self, name: &str) -> Option<Uuid> {
        match self.names.get(name) {
            Some(changed) => *changed,
            None => self.base.topics.by_name.get(name).copied(),
        }
    }

    fn config_map(&self, res: &ConfigResource) -> Option<&BTreeMap<String, String>> {
        match self.configs.get(res) {
            Some(changed) => changed.as_ref(),
            None => self.base.configs.get(res).map(|m| m.as_ref()),
        }
    }

    /// The change entry of an existing topic. Precondition: `self.topic_name(id)` is `Some`.
    fn topic_delta(&mut self, id: Uuid) -> &mut TopicDelta {
        let base = &self.base;
        self.topics.entry(id).or_insert_with(|| TopicDelta {
            name: base.topics.by_id[&id].name.clone(),
            fresh: false,
            removed: false,
            partitions: BTreeMap::new(),
        })
    }

    /// True when no record changed anything (provenance aside).
    pub fn is_empty(&self) -> bool {
        self.features.is_none()
            && self.brokers.is_empty()
            && self.topics.is_empty()
            && self.configs.is_empty()
            && self.next_producer_id.is_none()
            && self.cluster_id.is_none()
    }

    /// Builds the next image. Parts no record touched are shared with the base.
    pub fn apply(self) -> MetadataImage {
        let base = self.base;
        let features = match self.features {
            Some(f) => Arc::new(f),
            None => base.features,
        };
        let brokers = if self.brokers.is_empty() {
            base.brokers
        } else {
            let mut m = (*base.brokers).clone();
            for (id, reg) in self.brokers {
                match reg {
                    Some(r) => m.insert(id, Arc::new(r)),
                    None => m.remove(&id),
                };
            }
            Arc::new(m)
        };
        let topics = if self.topics.is_empty() {
            base.topics
        } else {
            let mut by_id = base.topics.by_id.clone();
            for (id, change) in self.topics {
                if change.removed {
                    by_id.remove(&id);
                    continue;
                }
                let mut partitions = match base.topics.by_id.get(&id) {
                    Some(t) if !change.fresh => t.partitions.clone(),
                    _ => imbl::OrdMap::new(),
                };
                for (p, reg) in change.partitions {
                    debug_assert!(
                        reg.validate().is_ok(),
                        "invalid partition {}-{p}",
                        change.name
                    );
                    partitions.insert(p, Arc::new(reg));
                }
                by_id.insert(
                    id,
                    Arc::new(TopicImage {
                        name: change.name,
                        id,
                        partitions,
                    }),
                );
            }
            let by_name = if self.names.is_empty() {
                base.topics.by_name.clone()
            } else {
                let mut by_name = base.topics.by_name.clone();
                for (name, id) in self.names {
                    match id {
                        Some(id) => by_name.insert(name, id),
                        None => by_name.remove(&name),
                    };
                }
                by_name
            };
            debug_assert_eq!(by_id.len(), by_name.len(), "topic indexes diverged");
            Arc::new(TopicsImage { by_id, by_name })
        };
        let configs = if self.configs.is_empty() {
            base.configs
        } else {
            let mut c = (*base.configs).clone();
            for (res, map) in self.configs {
                match map {
                    Some(m) => c.insert(res, Arc::new(m)),
                    None => c.remove(&res),
                };
            }
            Arc::new(c)
        };
        MetadataImage {
            provenance: self.provenance,
            features,
            brokers,
            topics,
            configs,
            next_producer_id: self.next_producer_id.unwrap_or(base.next_producer_id),
            cluster_id: self.cluster_id.or(base.cluster_id),
            acls: if self.acls.is_empty() {
                base.acls
            } else {
                let mut m = base.acls.by_id().clone();
                for (id, acl) in self.acls {
                    match acl {
                        Some(b) => m.insert(id, b),
                        None => m.remove(&id),
                    };
                }
                Arc::new(crate::acl::AclsImage::from_map(m))
            },
            scram: if self.scram.is_empty() {
                base.scram
            } else {
                let mut m = (*base.scram).clone();
                for (key, c) in self.scram {
                    match c {
                        Some(c) => m.insert(key, c),
                        None => m.remove(&key),
                    };
                }
                Arc::new(m)
            },
        }
    }
}

impl MetadataImage {
    /// Replays `records` on top of this image and applies them, stamping `provenance`.
    /// Atomic: on error the first failing record's index and error are returned and no image
    /// is built.
    pub fn with_records<'a>(
        &self,
        provenance: Provenance,
        records: impl IntoIterator<Item = &'a MetadataRecord>,
    ) -> Result<MetadataImage, (usize, ReplayError)> {
        let mut delta = MetadataDelta::new(self.clone());
        delta.set_provenance(provenance);
        for (i, r) in records.into_iter().enumerate() {
            delta.replay(r).map_err(|e| (i, e))?;
        }
        Ok(delta.apply())
    }
}

fn parse_uuid(field: &'static str, b: &[u8]) -> Result<Uuid, ReplayError> {
    uuid_from_bytes(b).ok_or(ReplayError::InvalidUuid {
        field,
        len: b.len(),
    })
}

fn recovery_state(v: i32) -> Result<LeaderRecoveryState, ReplayError> {
    LeaderRecoveryState::try_from(v).map_err(|_| ReplayError::UnknownEnumValue {
        field: "leader_recovery_state",
        value: v,
    })
}
