//! openraft type configuration for `__cluster_metadata`.
//!
//! One Raft entry carries one [`MetadataRecords`] batch; its records are applied atomically.
//! Entries are stored (Raft log segments) and shipped (the Raft gRPC transport) with serde + postcard; the
//! records inside stay protobuf, so [`MetadataRecords`] serializes as the protobuf encoding of
//! a `keel.metadata.MetadataBatch`.

use std::fmt;
use std::io::Cursor;

use keel_proto::metadata::{MetadataBatch, MetadataRecord};
use prost::Message;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

openraft::declare_raft_types!(
    /// Keel's openraft types: entries carry [`MetadataRecords`], node ids are `u64`
    /// (controller `node_id`), snapshots are whole snapshot files in memory.
    pub TypeConfig:
        D = MetadataRecords,
        R = ApplyOutcome,
        NodeId = u64,
        Node = ControllerNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

/// openraft's log id with Keel's types.
pub type LogId = openraft::LogId<u64>;
/// A Raft log entry with Keel's types.
pub type Entry = openraft::Entry<TypeConfig>;
/// openraft's storage error with Keel's node id.
pub type StorageError = openraft::StorageError<u64>;
/// Snapshot meta with Keel's types.
pub type SnapshotMeta = openraft::SnapshotMeta<u64, ControllerNode>;
/// Stored membership with Keel's types.
pub type StoredMembership = openraft::StoredMembership<u64, ControllerNode>;
/// A Raft membership (voters and learners) with Keel's types.
pub type Membership = openraft::Membership<u64, ControllerNode>;

/// A member of the metadata quorum, voter or learner (observer), as the membership in the
/// metadata log records it: where to reach it and which metadata log directory it votes
/// with (KIP-853's replica key: node id + directory id; the node id is the membership's key).
///
/// `directory_id` is `None` for members written before Keel recorded directory ids (a quorum
/// initialized from `controller_quorum_voters` starts so, as Kafka's static voters carry no
/// directory id) until the active controller learns each voter's id from its replies and
/// records it. Once recorded, Raft requests to or from that node id are accepted only from a
/// node presenting the same directory id: a voter whose disk was replaced or wiped comes back
/// with a new id and is refused until `keelctl quorum remove-controller` and `add-controller`
/// change the membership.
///
/// Stored (Raft log, snapshots) as one string, `addr` or `addr#<uuid>`, so membership entries
/// written by earlier builds (openraft's `BasicNode`, a single string) read back unchanged.
/// `addr` never contains `#` ([`ControllerNode::new`] is the only way in from user input and
/// checks it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ControllerNode {
    /// `host:port` of the member's gRPC listener (Raft and the controller API).
    pub addr: String,
    /// The member's metadata log directory id (`meta.properties` `directory_id`).
    pub directory_id: Option<uuid::Uuid>,
}

impl ControllerNode {
    /// A member at `addr` (`host:port`) with `directory_id`.
    ///
    /// Errors: `addr` is empty, over 512 bytes or contains `#` or white space.
    pub fn new(addr: &str, directory_id: Option<uuid::Uuid>) -> Result<Self, String> {
        if addr.is_empty() || addr.len() > 512 {
            return Err(format!(
                "endpoint must be 1..=512 bytes (got {})",
                addr.len()
            ));
        }
        if addr.contains('#') || addr.chars().any(char::is_whitespace) {
            return Err(format!(
                "endpoint {:?} contains '#' or white space",
                keel_proto::limits::clip(addr)
            ));
        }
        Ok(Self {
            addr: addr.to_string(),
            directory_id,
        })
    }

    fn encode(&self) -> String {
        match self.directory_id {
            Some(d) => format!("{}#{}", self.addr, d.simple()),
            None => self.addr.clone(),
        }
    }

    fn decode(s: &str) -> Result<Self, String> {
        match s.rsplit_once('#') {
            None => Ok(Self {
                addr: s.to_string(),
                directory_id: None,
            }),
            Some((addr, dir)) => Ok(Self {
                addr: addr.to_string(),
                directory_id: Some(
                    uuid::Uuid::parse_str(dir)
                        .map_err(|e| format!("directory id {dir:?} of member {addr}: {e}"))?,
                ),
            }),
        }
    }
}

impl fmt::Display for ControllerNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.directory_id {
            Some(d) => write!(f, "{} (directory {})", self.addr, directory_id_text(d)),
            None => f.write_str(&self.addr),
        }
    }
}

impl Serialize for ControllerNode {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        // openraft's BasicNode was a struct of one string; postcard writes both the same way.
        s.serialize_newtype_struct("BasicNode", &self.encode())
    }
}

impl<'de> Deserialize<'de> for ControllerNode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct BasicNode {
            addr: String,
        }
        let b = BasicNode::deserialize(d)?;
        ControllerNode::decode(&b.addr).map_err(serde::de::Error::custom)
    }
}

/// A directory id as Kafka prints one (`Uuid.toString()`: URL-safe base64 of the 16 bytes,
/// no padding, 22 characters), as `meta.properties`, `keelctl quorum status` and
/// `--directory-id` use it.
pub fn directory_id_text(id: uuid::Uuid) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(id.as_bytes())
}

/// Parses a directory id: Kafka's 22-character base64 form or a hyphenated UUID.
///
/// Errors: neither form, or the nil UUID (Kafka's `Uuid.ZERO_UUID` means "none").
pub fn parse_directory_id(s: &str) -> Result<uuid::Uuid, String> {
    use base64::Engine as _;
    let id = match base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(s) {
        Ok(b) if b.len() == 16 => uuid::Uuid::from_slice(&b).map_err(|e| e.to_string())?,
        _ => uuid::Uuid::parse_str(s).map_err(|_| {
            format!(
                "directory id {:?} is neither Kafka's 22-character base64 form nor a UUID",
                keel_proto::limits::clip(s)
            )
        })?,
    };
    if id.is_nil() {
        return Err("directory id must not be the zero UUID".into());
    }
    Ok(id)
}

/// The application payload of one Raft entry: the metadata records proposed together, and
/// when (informational).
#[derive(Clone, Default, PartialEq)]
pub struct MetadataRecords {
    /// Records, applied atomically and in order.
    pub records: Vec<MetadataRecord>,
    /// Wall-clock proposal time, ms since the Unix epoch (0 = unknown). Display only.
    pub append_timestamp_ms: i64,
}

impl MetadataRecords {
    /// A batch of `records` with no timestamp.
    pub fn new(records: Vec<MetadataRecord>) -> Self {
        Self {
            records,
            append_timestamp_ms: 0,
        }
    }

    /// An upper bound of the serialized size, bytes (each record's protobuf size plus its
    /// field key and length prefix, plus the timestamp). Walks the records without encoding.
    pub fn encoded_len_bound(&self) -> usize {
        self.records
            .iter()
            .map(|r| r.encoded_len() + 5)
            .sum::<usize>()
            + 11
    }
}

impl fmt::Debug for MetadataRecords {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "MetadataRecords({} records @{})",
            self.records.len(),
            self.append_timestamp_ms
        )
    }
}

impl fmt::Display for MetadataRecords {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} metadata records", self.records.len())
    }
}

impl Serialize for MetadataRecords {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        // The protobuf encoding of a MetadataBatch, written field by field so the records
        // are not cloned into a temporary batch.
        let mut buf = Vec::with_capacity(self.encoded_len_bound());
        for r in &self.records {
            prost::encoding::message::encode(1, r, &mut buf);
        }
        if self.append_timestamp_ms != 0 {
            prost::encoding::int64::encode(2, &self.append_timestamp_ms, &mut buf);
        }
        s.serialize_bytes(&buf)
    }
}

impl<'de> Deserialize<'de> for MetadataRecords {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = MetadataRecords;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("protobuf-encoded keel.metadata.MetadataBatch bytes")
            }
            fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Self::Value, E> {
                MetadataBatch::decode(v)
                    .map(|b| MetadataRecords {
                        records: b.records,
                        append_timestamp_ms: b.append_timestamp_ms,
                    })
                    .map_err(|e| E::custom(format!("MetadataBatch does not decode: {e}")))
            }
            fn visit_byte_buf<E: serde::de::Error>(self, v: Vec<u8>) -> Result<Self::Value, E> {
                self.visit_bytes(&v)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Self::Value, A::Error> {
                let mut v = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1 << 20));
                while let Some(b) = seq.next_element::<u8>()? {
                    v.push(b);
                }
                self.visit_bytes(&v)
            }
        }
        d.deserialize_bytes(V)
    }
}

/// What applying one entry produced, returned to the proposer by `client_write`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApplyOutcome {
    /// Metadata offset of the entry (its Raft log index).
    pub offset: u64,
    /// Set when the batch was rejected by replay (a controller bug: every node rejects the
    /// same batch, so state stays identical). Holds the failing record index and error.
    pub rejected: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_proto::metadata::{NoOpRecord, TopicRecord, metadata_record::Record};

    #[test]
    fn controller_node_reads_basic_node_bytes_and_round_trips() {
        let old = postcard::to_stdvec(&openraft::BasicNode::new("h:1")).unwrap();
        let n: ControllerNode = postcard::from_bytes(&old).unwrap();
        assert_eq!(n, ControllerNode::new("h:1", None).unwrap());
        let d = uuid::Uuid::from_u128(0x1234_5678_9abc_def0_1234_5678_9abc_def0);
        let n = ControllerNode::new("h:2", Some(d)).unwrap();
        let back: ControllerNode = postcard::from_bytes(&postcard::to_stdvec(&n).unwrap()).unwrap();
        assert_eq!(back, n);
        assert!(ControllerNode::new("h#1:2", None).is_err());
        assert!(ControllerNode::new("", None).is_err());
        let text = directory_id_text(d);
        assert_eq!(text.len(), 22);
        assert_eq!(parse_directory_id(&text).unwrap(), d);
        assert_eq!(parse_directory_id(&d.to_string()).unwrap(), d);
        assert!(parse_directory_id("nope").is_err());
        assert!(parse_directory_id("AAAAAAAAAAAAAAAAAAAAAA").is_err());
    }

    #[test]
    fn payload_round_trips_through_postcard_as_protobuf_bytes() {
        let batch = MetadataRecords {
            records: vec![
                MetadataRecord {
                    record: Some(Record::NoOp(NoOpRecord {})),
                },
                MetadataRecord {
                    record: Some(Record::Topic(TopicRecord {
                        name: "t".into(),
                        topic_id: bytes::Bytes::from_static(&[7; 16]),
                    })),
                },
            ],
            append_timestamp_ms: 1_764_000_000_000,
        };
        let bytes = postcard::to_stdvec(&batch).unwrap();
        let back: MetadataRecords = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(back, batch);
        // The inner bytes are exactly a protobuf MetadataBatch.
        let (len, rest) = postcard::take_from_bytes::<u32>(&bytes).unwrap();
        let decoded = MetadataBatch::decode(&rest[..len as usize]).unwrap();
        assert_eq!(decoded.records, batch.records);
        assert_eq!(decoded.append_timestamp_ms, batch.append_timestamp_ms);
        // Garbage is an error, not a panic.
        assert!(postcard::from_bytes::<MetadataRecords>(&[3, 0xff, 0xff, 0xff]).is_err());
    }
}
