//! `keelctl metadata log`: decoded metadata records, one per line (like
//! `kafka-dump-log --cluster-metadata-decoder`), with the partition state each partition
//! record leads to, so one partition's history of leader, ISR and epochs reads top to bottom.

use std::collections::HashMap;

use keel_metadata_log::image::uuid_from_bytes;
use keel_metadata_log::records::metadata_record::Record;
use keel_metadata_log::records::{
    BrokerRegistrationChangeRecord, ConfigRecord, ConfigResourceType, FencingChange,
    LeaderRecoveryState, MetadataRecord, PartitionChangeRecord, PartitionRecord,
    RegisterBrokerRecord, ShutdownChange,
};
use keel_proto::controller::MetadataLogRecord;
use serde::Serialize;
use serde::ser::SerializeMap;
use serde_json::{Value, json};

use super::timestamp_ms;

/// Record fields in display order (serialized as a JSON object).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Fields(pub Vec<(&'static str, Value)>);

impl Serialize for Fields {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

/// A partition's state after a record, derived on replay like the controller does
/// (`leader_epoch + 1` iff the leader field is present, `partition_epoch + 1` always).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PartitionState {
    /// Leader, -1 = none.
    pub leader: i32,
    /// Leader epoch.
    pub leader_epoch: i32,
    /// Partition epoch.
    pub partition_epoch: i32,
    /// In-sync replicas.
    pub isr: Vec<i32>,
    /// Assignment.
    pub replicas: Vec<i32>,
    /// `RECOVERED` or `RECOVERING`.
    pub leader_recovery_state: String,
}

/// One decoded record.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LogLine {
    /// Offset (Raft index) of the entry holding the record.
    pub offset: i64,
    /// Position within the entry's batch.
    pub index: u32,
    /// Raft term of the entry.
    pub term: i64,
    /// Append time, ms since the Unix epoch, -1 unknown.
    pub timestamp_ms: i64,
    /// Record type, e.g. `PartitionChangeRecord`.
    pub record_type: String,
    /// The topic the record concerns, if any.
    pub topic: Option<String>,
    /// Decoded fields.
    pub fields: Fields,
    /// For partition records: the partition state after this record, when the partition's
    /// `PartitionRecord` was seen earlier in the same read (else unknown).
    pub partition_state: Option<PartitionState>,
}

/// Tracks partition state across records to annotate partition changes with their epochs.
#[derive(Debug, Default)]
pub struct PartitionTracker {
    partitions: HashMap<(Vec<u8>, i32), PartitionState>,
    /// Topic names by topic id, from every TopicRecord seen: the name of a deleted topic's
    /// records, which the controller's current image no longer has. One entry per topic
    /// created in the range read.
    names: HashMap<Vec<u8>, String>,
}

fn recovery_name(v: i32) -> String {
    match LeaderRecoveryState::try_from(v) {
        Ok(LeaderRecoveryState::Recovering) => "RECOVERING".into(),
        Ok(LeaderRecoveryState::Recovered) => "RECOVERED".into(),
        Err(_) => format!("UNKNOWN({v})"),
    }
}

impl PartitionTracker {
    /// Starts from the partition states in `snapshot` (records of a metadata snapshot, whose
    /// `PartitionRecord`s carry full states), so changes after a compacted log start still
    /// show their epochs.
    pub fn seed<'a>(&mut self, snapshot: impl IntoIterator<Item = &'a MetadataRecord>) {
        for r in snapshot {
            if matches!(r.record, Some(Record::Partition(_) | Record::Topic(_))) {
                self.observe(r);
            }
        }
    }

    /// A tracker that knows the topic names this one has seen but no partition state (for
    /// records whose starting state is unknown: they are shown, not replayed).
    pub fn names_only(&self) -> PartitionTracker {
        PartitionTracker {
            partitions: HashMap::new(),
            names: self.names.clone(),
        }
    }

    /// The name of the topic `record` is about, from the TopicRecords seen (deleted topics
    /// included).
    pub fn topic_name(&self, record: &MetadataRecord) -> Option<&str> {
        let id = keel_metadata_log::record_topic_id(record)?;
        self.names.get(id.as_bytes().as_slice()).map(String::as_str)
    }

    /// Feeds one record; returns the partition state after it for partition records.
    pub fn observe(&mut self, record: &MetadataRecord) -> Option<PartitionState> {
        match record.record.as_ref()? {
            Record::Topic(t) => {
                self.names.insert(t.topic_id.to_vec(), t.name.clone());
                None
            }
            Record::Partition(p) => {
                let s = PartitionState {
                    leader: p.leader,
                    leader_epoch: p.leader_epoch,
                    partition_epoch: p.partition_epoch,
                    isr: p.isr.clone(),
                    replicas: p.replicas.clone(),
                    leader_recovery_state: recovery_name(p.leader_recovery_state),
                };
                self.partitions
                    .insert((p.topic_id.to_vec(), p.partition_id), s.clone());
                Some(s)
            }
            Record::PartitionChange(c) => {
                let s = self
                    .partitions
                    .get_mut(&(c.topic_id.to_vec(), c.partition_id))?;
                if let Some(isr) = &c.isr {
                    s.isr = isr.ids.clone();
                }
                if let Some(replicas) = &c.replicas {
                    s.replicas = replicas.ids.clone();
                }
                if let Some(leader) = c.leader {
                    s.leader = leader;
                    s.leader_epoch += 1;
                }
                if let Some(lrs) = c.leader_recovery_state {
                    s.leader_recovery_state = recovery_name(lrs);
                }
                s.partition_epoch += 1;
                Some(s.clone())
            }
            Record::RemoveTopic(r) => {
                let id = r.topic_id.to_vec();
                self.partitions.retain(|(t, _), _| *t != id);
                None
            }
            _ => None,
        }
    }
}

fn uuid(b: &[u8]) -> Value {
    match uuid_from_bytes(b) {
        Some(u) => Value::String(u.to_string()),
        None if b.is_empty() => Value::Null,
        None => Value::String(format!("<{} bytes>", b.len())),
    }
}

/// The fields of a record, in display order.
pub fn record_fields(record: &MetadataRecord) -> Fields {
    Fields(match &record.record {
        Some(Record::RegisterBroker(r)) => register_broker_fields(r),
        Some(Record::UnregisterBroker(r)) => vec![
            ("broker_id", json!(r.broker_id)),
            ("broker_epoch", json!(r.broker_epoch)),
        ],
        Some(Record::BrokerRegistrationChange(r)) => broker_change_fields(r),
        Some(Record::Topic(r)) => vec![("name", json!(r.name)), ("topic_id", uuid(&r.topic_id))],
        Some(Record::Partition(r)) => partition_fields(r),
        Some(Record::PartitionChange(r)) => partition_change_fields(r),
        Some(Record::RemoveTopic(r)) => vec![("topic_id", uuid(&r.topic_id))],
        Some(Record::Config(r)) => config_fields(r),
        Some(Record::ProducerIds(r)) => vec![
            ("broker_id", json!(r.broker_id)),
            ("broker_epoch", json!(r.broker_epoch)),
            ("next_producer_id", json!(r.next_producer_id)),
        ],
        Some(Record::FeatureLevel(r)) => vec![
            ("name", json!(r.name)),
            ("feature_level", json!(r.feature_level)),
        ],
        Some(Record::ClusterId(r)) => vec![("cluster_id", json!(r.cluster_id))],
        Some(Record::AccessControlEntry(r)) => acl_fields(r),
        Some(Record::RemoveAccessControlEntry(r)) => vec![("id", uuid(&r.id))],
        // Never the keys or the salt: they are what a password guess is checked against.
        Some(Record::UserScramCredential(r)) => vec![
            ("name", json!(r.name)),
            ("mechanism", scram_mechanism(r.mechanism)),
            ("iterations", json!(r.iterations)),
        ],
        Some(Record::RemoveUserScramCredential(r)) => vec![
            ("name", json!(r.name)),
            ("mechanism", scram_mechanism(r.mechanism)),
        ],
        Some(Record::NoOp(_)) | None => Vec::new(),
    })
}

/// A SCRAM mechanism's name, or the raw value when unknown.
fn scram_mechanism(v: i32) -> Value {
    keel_metadata_log::scram::Mechanism::from_proto(v).map_or_else(|| json!(v), |m| json!(m.name()))
}

/// Fields of an AccessControlEntryRecord: id, then the binding with Kafka's names.
fn acl_fields(r: &keel_proto::metadata::AccessControlEntryRecord) -> Vec<(&'static str, Value)> {
    use keel_metadata_log::acl::{Operation, PatternType, Permission, ResourceType};
    let name = |v: Option<&'static str>, raw: i32| v.map_or_else(|| json!(raw), |n| json!(n));
    vec![
        ("id", uuid(&r.id)),
        (
            "resource_type",
            name(
                ResourceType::from_proto(r.resource_type).map(ResourceType::name),
                r.resource_type,
            ),
        ),
        ("resource_name", json!(r.resource_name)),
        (
            "pattern_type",
            name(
                PatternType::from_proto(r.pattern_type).map(PatternType::name),
                r.pattern_type,
            ),
        ),
        ("principal", json!(r.principal)),
        ("host", json!(r.host)),
        (
            "operation",
            name(
                Operation::from_proto(r.operation).map(Operation::name),
                r.operation,
            ),
        ),
        (
            "permission_type",
            name(
                Permission::from_proto(r.permission_type).map(Permission::name),
                r.permission_type,
            ),
        ),
    ]
}

/// Fields of a RegisterBrokerRecord: id, epoch, incarnation, endpoints as
/// `listener://host:port`, the rack if set, and the fencing and shutdown flags.
fn register_broker_fields(r: &RegisterBrokerRecord) -> Vec<(&'static str, Value)> {
    let eps: Vec<String> = r
        .endpoints
        .iter()
        .map(|e| format!("{}://{}:{}", e.name, e.host, e.port))
        .collect();
    let mut f = vec![
        ("broker_id", json!(r.broker_id)),
        ("broker_epoch", json!(r.broker_epoch)),
        ("incarnation_id", uuid(&r.incarnation_id)),
        ("endpoints", json!(eps)),
    ];
    if !r.rack.is_empty() {
        f.push(("rack", json!(r.rack)));
    }
    f.push(("fenced", json!(r.fenced)));
    f.push(("in_controlled_shutdown", json!(r.in_controlled_shutdown)));
    f
}

/// Fields of a BrokerRegistrationChangeRecord: id, epoch, and only the flags it changes.
fn broker_change_fields(r: &BrokerRegistrationChangeRecord) -> Vec<(&'static str, Value)> {
    let mut f = vec![
        ("broker_id", json!(r.broker_id)),
        ("broker_epoch", json!(r.broker_epoch)),
    ];
    match FencingChange::try_from(r.fenced) {
        Ok(FencingChange::Fence) => f.push(("fenced", json!(true))),
        Ok(FencingChange::Unfence) => f.push(("fenced", json!(false))),
        _ => {}
    }
    if matches!(
        ShutdownChange::try_from(r.in_controlled_shutdown),
        Ok(ShutdownChange::InControlledShutdown)
    ) {
        f.push(("in_controlled_shutdown", json!(true)));
    }
    f
}

/// Fields of a PartitionRecord: the full state; recovery state and reassignment lists only
/// when not the default.
fn partition_fields(r: &PartitionRecord) -> Vec<(&'static str, Value)> {
    let mut f = vec![
        ("partition", json!(r.partition_id)),
        ("replicas", json!(r.replicas)),
        ("isr", json!(r.isr)),
        ("leader", json!(r.leader)),
        ("leader_epoch", json!(r.leader_epoch)),
        ("partition_epoch", json!(r.partition_epoch)),
    ];
    if r.leader_recovery_state != 0 {
        f.push((
            "leader_recovery_state",
            json!(recovery_name(r.leader_recovery_state)),
        ));
    }
    if !r.adding_replicas.is_empty() {
        f.push(("adding_replicas", json!(r.adding_replicas)));
    }
    if !r.removing_replicas.is_empty() {
        f.push(("removing_replicas", json!(r.removing_replicas)));
    }
    f
}

/// Fields of a PartitionChangeRecord: the partition and each field the change sets.
fn partition_change_fields(r: &PartitionChangeRecord) -> Vec<(&'static str, Value)> {
    let mut f = vec![("partition", json!(r.partition_id))];
    if let Some(l) = r.leader {
        f.push(("leader", json!(l)));
    }
    if let Some(isr) = &r.isr {
        f.push(("isr", json!(isr.ids)));
    }
    if let Some(rep) = &r.replicas {
        f.push(("replicas", json!(rep.ids)));
    }
    if let Some(lrs) = r.leader_recovery_state {
        f.push(("leader_recovery_state", json!(recovery_name(lrs))));
    }
    if let Some(elr) = &r.eligible_leader_replicas {
        f.push(("eligible_leader_replicas", json!(elr.ids)));
    }
    f
}

/// Fields of a ConfigRecord: resource type and name (if any), config name and value.
fn config_fields(r: &ConfigRecord) -> Vec<(&'static str, Value)> {
    let ty = match ConfigResourceType::try_from(r.resource_type) {
        Ok(ConfigResourceType::Topic) => "TOPIC".to_string(),
        Ok(ConfigResourceType::Broker) => "BROKER".to_string(),
        Ok(ConfigResourceType::Cluster) => "CLUSTER".to_string(),
        _ => format!("UNKNOWN({})", r.resource_type),
    };
    let mut f = vec![("resource_type", json!(ty))];
    if !r.resource_name.is_empty() {
        f.push(("resource_name", json!(r.resource_name)));
    }
    f.push(("name", json!(r.name)));
    f.push(("value", json!(r.value)));
    f
}

/// Decodes one record of a ReadMetadataLog reply, feeding `tracker`.
pub fn log_line(r: &MetadataLogRecord, tracker: &mut PartitionTracker) -> LogLine {
    let (mut fields, state) = match &r.record {
        Some(rec) => (record_fields(rec), tracker.observe(rec)),
        None => (Fields::default(), None),
    };
    // The controller names topics from its current image: a deleted topic's records come
    // without a name, which the TopicRecord read earlier gives.
    let topic = if r.topic_name.is_empty() {
        r.record
            .as_ref()
            .and_then(|rec| tracker.topic_name(rec))
            .map(str::to_string)
    } else {
        Some(r.topic_name.clone())
    };
    // A registration written with broker_epoch 0 gets its record's offset as epoch on replay
    // (DESIGN §3): show the epoch the broker has, as `broker list` and later records do.
    if let Some(Record::RegisterBroker(reg)) = &r.record.as_ref().and_then(|m| m.record.as_ref())
        && reg.broker_epoch == 0
        && let Some((_, v)) = fields.0.iter_mut().find(|(k, _)| *k == "broker_epoch")
    {
        *v = json!(r.offset);
    }
    LogLine {
        offset: r.offset,
        index: r.index_in_batch,
        term: r.term,
        timestamp_ms: r.append_timestamp_ms,
        record_type: r.record_type.clone(),
        topic,
        fields,
        partition_state: state,
    }
}

fn value_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "null".into(),
        Value::Array(items) => format!(
            "[{}]",
            items.iter().map(value_text).collect::<Vec<_>>().join(",")
        ),
        other => other.to_string(),
    }
}

/// One text line: `OFFSET#INDEX term=T TIME TYPE [topic=NAME] key=value... [=> state]`.
pub fn line_text(l: &LogLine) -> String {
    let mut out = format!(
        "{}#{} term={} {} {}",
        l.offset,
        l.index,
        l.term,
        timestamp_ms(l.timestamp_ms),
        l.record_type
    );
    if let Some(t) = &l.topic {
        out.push_str(&format!(" topic={t}"));
    }
    for (k, v) in &l.fields.0 {
        out.push_str(&format!(" {k}={}", value_text(v)));
    }
    if let Some(s) = &l.partition_state {
        out.push_str(&format!(
            " => leader={} leader_epoch={} partition_epoch={} isr=[{}] replicas=[{}]",
            s.leader,
            s.leader_epoch,
            s.partition_epoch,
            super::ids(&s.isr),
            super::ids(&s.replicas)
        ));
        if s.leader_recovery_state != "RECOVERED" {
            out.push_str(&format!(
                " leader_recovery_state={}",
                s.leader_recovery_state
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use keel_metadata_log::records::{PartitionChangeRecord, PartitionRecord, ReplicaList};

    use super::*;

    const TOPIC_ID: [u8; 16] = [7; 16];

    fn wire(offset: i64, rec: Record, ty: &str) -> MetadataLogRecord {
        MetadataLogRecord {
            offset,
            index_in_batch: 0,
            term: 2,
            append_timestamp_ms: 1_700_000_000_000,
            record_type: ty.into(),
            record: Some(MetadataRecord { record: Some(rec) }),
            topic_name: "orders".into(),
        }
    }

    #[test]
    fn a_registration_shows_the_epoch_replay_gives_it() {
        let reg = |epoch| {
            Record::RegisterBroker(keel_proto::metadata::RegisterBrokerRecord {
                broker_id: 3,
                broker_epoch: epoch,
                ..Default::default()
            })
        };
        let line = log_line(
            &wire(7, reg(0), "RegisterBrokerRecord"),
            &mut PartitionTracker::default(),
        );
        assert!(
            line_text(&line).contains("broker_id=3 broker_epoch=7 "),
            "{}",
            line_text(&line)
        );
        // An explicit epoch is shown as written.
        let line = log_line(
            &wire(9, reg(5), "RegisterBrokerRecord"),
            &mut PartitionTracker::default(),
        );
        assert!(
            line_text(&line).contains("broker_epoch=5 "),
            "{}",
            line_text(&line)
        );
    }

    #[test]
    fn partition_history_derives_epochs() {
        let mut tracker = PartitionTracker::default();
        let created = wire(
            10,
            Record::Partition(PartitionRecord {
                topic_id: TOPIC_ID.to_vec().into(),
                partition_id: 0,
                replicas: vec![1, 2, 3],
                isr: vec![1, 2, 3],
                leader: 1,
                ..Default::default()
            }),
            "PartitionRecord",
        );
        let shrink = wire(
            20,
            Record::PartitionChange(PartitionChangeRecord {
                topic_id: TOPIC_ID.to_vec().into(),
                partition_id: 0,
                isr: Some(ReplicaList { ids: vec![1, 2] }),
                ..Default::default()
            }),
            "PartitionChangeRecord",
        );
        let new_leader = wire(
            30,
            Record::PartitionChange(PartitionChangeRecord {
                topic_id: TOPIC_ID.to_vec().into(),
                partition_id: 0,
                isr: Some(ReplicaList { ids: vec![2] }),
                leader: Some(2),
                ..Default::default()
            }),
            "PartitionChangeRecord",
        );
        let lines: Vec<String> = [created, shrink, new_leader]
            .iter()
            .map(|r| line_text(&log_line(r, &mut tracker)))
            .collect();
        assert_eq!(
            lines,
            vec![
                "10#0 term=2 2023-11-14T22:13:20.000Z PartitionRecord topic=orders partition=0 replicas=[1,2,3] isr=[1,2,3] leader=1 leader_epoch=0 partition_epoch=0 => leader=1 leader_epoch=0 partition_epoch=0 isr=[1,2,3] replicas=[1,2,3]",
                "20#0 term=2 2023-11-14T22:13:20.000Z PartitionChangeRecord topic=orders partition=0 isr=[1,2] => leader=1 leader_epoch=0 partition_epoch=1 isr=[1,2] replicas=[1,2,3]",
                "30#0 term=2 2023-11-14T22:13:20.000Z PartitionChangeRecord topic=orders partition=0 leader=2 isr=[2] => leader=2 leader_epoch=1 partition_epoch=2 isr=[2] replicas=[1,2,3]",
            ]
        );
    }

    #[test]
    fn seeding_from_a_snapshot_gives_later_changes_their_epochs() {
        let mut tracker = PartitionTracker::default();
        let snapshot_partition = MetadataRecord {
            record: Some(Record::Partition(PartitionRecord {
                topic_id: TOPIC_ID.to_vec().into(),
                partition_id: 0,
                replicas: vec![1, 2],
                isr: vec![1, 2],
                leader: 2,
                leader_epoch: 7,
                partition_epoch: 9,
                ..Default::default()
            })),
        };
        tracker.seed([&snapshot_partition]);
        let change = wire(
            50,
            Record::PartitionChange(PartitionChangeRecord {
                topic_id: TOPIC_ID.to_vec().into(),
                partition_id: 0,
                isr: Some(ReplicaList { ids: vec![2] }),
                ..Default::default()
            }),
            "PartitionChangeRecord",
        );
        let state = log_line(&change, &mut tracker).partition_state.unwrap();
        assert_eq!(
            (
                state.leader,
                state.leader_epoch,
                state.partition_epoch,
                state.isr
            ),
            (2, 7, 10, vec![2])
        );
    }

    #[test]
    fn a_deleted_topics_records_keep_its_name() {
        use keel_proto::metadata::{RemoveTopicRecord, TopicRecord};
        let mut tracker = PartitionTracker::default();
        log_line(
            &wire(
                3,
                Record::Topic(TopicRecord {
                    name: "gone".into(),
                    topic_id: TOPIC_ID.to_vec().into(),
                }),
                "TopicRecord",
            ),
            &mut tracker,
        );
        // The controller no longer knows the topic: it sends no name.
        let mut removal = wire(
            9,
            Record::RemoveTopic(RemoveTopicRecord {
                topic_id: TOPIC_ID.to_vec().into(),
            }),
            "RemoveTopicRecord",
        );
        removal.topic_name.clear();
        assert_eq!(
            log_line(&removal, &mut tracker).topic.as_deref(),
            Some("gone")
        );
        // Without the TopicRecord there is nothing to say.
        let mut fresh = PartitionTracker::default();
        assert_eq!(log_line(&removal, &mut fresh).topic, None);
    }

    #[test]
    fn change_without_base_has_no_state_and_json_keeps_field_order() {
        let mut tracker = PartitionTracker::default();
        let r = wire(
            5,
            Record::PartitionChange(PartitionChangeRecord {
                topic_id: TOPIC_ID.to_vec().into(),
                partition_id: 3,
                isr: Some(ReplicaList { ids: vec![1] }),
                ..Default::default()
            }),
            "PartitionChangeRecord",
        );
        let l = log_line(&r, &mut tracker);
        assert_eq!(l.partition_state, None);
        let j = serde_json::to_string(&l.fields).unwrap();
        assert_eq!(j, r#"{"partition":3,"isr":[1]}"#);
    }
}
