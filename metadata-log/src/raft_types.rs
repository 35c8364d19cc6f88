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
        Node = openraft::BasicNode,
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
pub type SnapshotMeta = openraft::SnapshotMeta<u64, openraft::BasicNode>;
/// Stored membership with Keel's types.
pub type StoredMembership = openraft::StoredMembership<u64, openraft::BasicNode>;

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
