//! Test fixture for the pure controller logic: a cluster image that only changes by applying
//! the records the logic functions return (`MetadataImage::with_records`), one batch per
//! offset, with invariants checked after every batch (Kafka's equation style:
//! image + records == next image).

use crate::logic::{
    self, BrokerHeartbeatManager, ControllerResult, TopicDefaults, create_topics, register_broker,
};
use keel_metadata_log::{MetadataImage, PartitionRegistration, Provenance};
use keel_proto::ErrorCode;
use keel_proto::common;
use keel_proto::controller::{
    BrokerHeartbeatRequest, CreatableReplicaAssignment, CreatableTopic, CreateTopicsRequest,
    RegisterBrokerRequest,
};
use keel_proto::metadata::{BrokerEndpoint, MetadataRecord};
use uuid::Uuid;

pub const CLUSTER_ID: &str = "keel-test-cluster";
pub const SESSION_TIMEOUT_MS: u64 = 9000;

/// The code of an optional wire error (absent = NONE).
pub fn code(e: &Option<common::Error>) -> ErrorCode {
    ErrorCode::from_proto(e.as_ref()).expect("known code")
}

pub fn incarnation(broker: i32, generation: u32) -> Uuid {
    Uuid::from_u128((0xb0u128 << 64) | ((generation as u128) << 32) | broker as u128)
}

pub fn topic_uuid(n: u128) -> Uuid {
    Uuid::from_u128(0x7070_0000_0000_0000_0000_0000_0000_0000 | n)
}

/// A cluster image plus heartbeat sessions, driven only through the logic functions.
pub struct Cluster {
    pub image: MetadataImage,
    pub offset: u64,
    pub sessions: BrokerHeartbeatManager,
    pub now_ms: u64,
    next_topic: u128,
}

impl Cluster {
    pub fn new() -> Self {
        Self {
            image: MetadataImage::empty(),
            offset: 0,
            sessions: BrokerHeartbeatManager::new(),
            now_ms: 1_000,
            next_topic: 0,
        }
    }

    /// Applies `records` as the next batch; asserts they replay cleanly and the invariants
    /// hold. Returns the batch's offset.
    pub fn apply(&mut self, records: &[MetadataRecord]) -> u64 {
        self.offset += 1;
        let prov = Provenance {
            offset: self.offset,
            term: 1,
        };
        self.image = self
            .image
            .with_records(prov, records)
            .unwrap_or_else(|(i, e)| panic!("record {i} of {records:?} failed to replay: {e}"));
        self.image.check_invariants().expect("image invariants");
        check_isr_invariants(&self.image);
        self.offset
    }

    /// Applies a result's records and returns its response.
    pub fn commit<R>(&mut self, r: ControllerResult<R>) -> R {
        if !r.records.is_empty() {
            self.apply(&r.records);
        }
        r.response
    }

    pub fn register_request(
        &self,
        id: i32,
        rack: Option<&str>,
        generation: u32,
    ) -> RegisterBrokerRequest {
        RegisterBrokerRequest {
            broker_id: id,
            cluster_id: CLUSTER_ID.into(),
            incarnation_id: bytes::Bytes::copy_from_slice(incarnation(id, generation).as_bytes()),
            listeners: vec![BrokerEndpoint {
                name: "PLAINTEXT".into(),
                host: "127.0.0.1".into(),
                port: (9092 + id).max(1) as u32,
                security_protocol: "PLAINTEXT".into(),
            }],
            rack: rack.unwrap_or_default().into(),
            previous_broker_epoch: -1,
            features: vec![],
        }
    }

    /// Registers broker `id` (generation = incarnation) and returns its epoch.
    pub fn register_gen(&mut self, id: i32, rack: Option<&str>, generation: u32) -> i64 {
        let req = self.register_request(id, rack, generation);
        let now = self.now_ms;
        let sessions = &self.sessions;
        let r = register_broker(&self.image, &req, CLUSTER_ID, |b| {
            sessions.has_valid_session(b, now, SESSION_TIMEOUT_MS)
        });
        assert_eq!(code(&r.response.error), ErrorCode::None, "{:?}", r.response);
        let off = self.apply(&r.records);
        assert_eq!(self.image.broker(id).unwrap().epoch, off as i64);
        off as i64
    }

    /// Sends a heartbeat for `id` at its current epoch.
    pub fn heartbeat(
        &mut self,
        id: i32,
        want_fence: bool,
        want_shut_down: bool,
    ) -> keel_proto::controller::BrokerHeartbeatReply {
        let epoch = self.image.broker(id).map_or(-1, |b| b.epoch);
        let req = BrokerHeartbeatRequest {
            broker_id: id,
            broker_epoch: epoch,
            current_metadata_offset: self.offset as i64,
            want_fence,
            want_shut_down,
        };
        let r = logic::heartbeat(
            &self.image,
            &req,
            &mut self.sessions,
            self.now_ms,
            self.offset,
        );
        self.commit(r)
    }

    /// Registers and unfences broker `id`; returns its epoch.
    pub fn add_broker(&mut self, id: i32, rack: Option<&str>) -> i64 {
        let epoch = self.register_gen(id, rack, 1);
        let reply = self.heartbeat(id, false, false);
        assert!(!reply.is_fenced && reply.is_caught_up, "{reply:?}");
        assert!(!self.image.broker(id).unwrap().fenced);
        epoch
    }

    /// Creates a topic with explicit assignments; returns its id.
    pub fn create_topic(&mut self, name: &str, assignments: &[&[i32]]) -> Uuid {
        let req = CreateTopicsRequest {
            topics: vec![CreatableTopic {
                name: name.into(),
                num_partitions: -1,
                replication_factor: -1,
                assignments: assignments
                    .iter()
                    .enumerate()
                    .map(|(i, a)| CreatableReplicaAssignment {
                        partition_index: i as i32,
                        broker_ids: a.to_vec(),
                    })
                    .collect(),
                configs: vec![],
            }],
            validate_only: false,
        };
        self.next_topic += 1;
        let id = topic_uuid(self.next_topic);
        let r = create_topics(&self.image, &req, &TopicDefaults::default(), &mut || id, 0);
        assert_eq!(
            code(&r.response.topics[0].error),
            ErrorCode::None,
            "{:?}",
            r.response
        );
        self.apply(&r.records);
        id
    }

    pub fn topic_id(&self, name: &str) -> Uuid {
        *self.image.topics().by_name.get(name).expect("topic")
    }

    pub fn partition(&self, name: &str, p: i32) -> PartitionRegistration {
        self.image
            .partition(self.topic_id(name), p)
            .expect("partition")
            .clone()
    }

    pub fn epoch(&self, broker: i32) -> i64 {
        self.image.broker(broker).expect("registered").epoch
    }
}

/// DESIGN §7 invariant 5 on an image: leader ∈ ISR ⊆ replicas (checked by the image), every
/// leader is eligible, and every member of an ISR with more than one member is eligible (a
/// lone ineligible member may stay: the ISR is never emptied).
pub fn check_isr_invariants(image: &MetadataImage) {
    for t in image.topics().by_id.values() {
        for (p, reg) in t.partitions.iter() {
            if reg.leader != -1 {
                assert!(
                    logic::is_eligible(image, reg.leader),
                    "{}-{p}: leader {} is not eligible: {reg:?}",
                    t.name,
                    reg.leader
                );
            }
            if reg.isr.len() > 1 {
                for b in &reg.isr {
                    assert!(
                        logic::is_eligible(image, *b),
                        "{}-{p}: ISR member {b} is not eligible: {reg:?}",
                        t.name
                    );
                }
            }
        }
    }
}
