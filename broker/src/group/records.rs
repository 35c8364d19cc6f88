//! The records of `__consumer_offsets`, in Kafka's own layout (Kafka's
//! `group-coordinator/src/main/resources/common/message/{OffsetCommitKey,OffsetCommitValue,
//! GroupMetadataKey,GroupMetadataValue}.json`), so Kafka's tools reading the topic
//! (`kafka-console-consumer --formatter ...OffsetsMessageFormatter`) and Keel's agree.
//!
//! Every record has a key; the key starts with an int16 version naming its kind:
//! - 0 or 1: an offset commit, key `group, topic, partition`; value `int16 version` then
//!   v0 `offset, metadata, commit_timestamp`, v1 `offset, metadata, commit_timestamp,
//!   expire_timestamp`, v2 `offset, metadata, commit_timestamp`, v3 `offset, leader_epoch,
//!   metadata, commit_timestamp`. Keel writes key v1 and value v3 (Kafka 4's choice for
//!   classic groups).
//! - 2: a group's metadata, key `group`; value `int16 version` then `protocol_type,
//!   generation, protocol (nullable), leader (nullable)`, v2+ `current_state_timestamp`, and
//!   the members: `member_id`, v3+ `group_instance_id (nullable)`, `client_id, client_host`,
//!   v1+ `rebalance_timeout`, `session_timeout, subscription (bytes), assignment (bytes)`.
//!   Keel writes v3.
//!
//! A null value is a tombstone: the offset (or the group) is deleted, and compaction removes
//! it after `delete.retention.ms`. Strings are int16-length UTF-8, bytes int32-length, as in
//! Kafka's non-flexible versions. Decoding is total: any malformed key or value is an error
//! naming what was wrong, never a panic (a damaged record is skipped by the loader).
//!
//! The coordinator of a group is the leader of partition [`partition_for`] of the topic.

use bytes::{Buf, BufMut, Bytes, BytesMut};

pub use crate::replica_manager::produce::OFFSETS_TOPIC;

/// The `__consumer_offsets` partition of `group` among `partitions`: Kafka's
/// `Utils.abs(groupId.hashCode) % groupMetadataTopicPartitionCount`, with Java's
/// `String.hashCode` over UTF-16 code units, so a group maps to the same partition number in
/// Keel and Kafka. `partitions` must be positive.
pub fn partition_for(group: &str, partitions: i32) -> i32 {
    debug_assert!(partitions > 0);
    let hash = group
        .encode_utf16()
        .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(i32::from(c)));
    // Kafka's Utils.abs maps i32::MIN to 0 (`n & 0x7fffffff`).
    (hash & 0x7fff_ffff) % partitions.max(1)
}

/// A committed offset (OffsetCommitValue).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedOffset {
    /// The next offset the group will read.
    pub offset: i64,
    /// The leader epoch of the last consumed record (KIP-320), -1 if unknown.
    pub leader_epoch: i32,
    /// The client's metadata string (at most `offset_metadata_max_bytes`).
    pub metadata: String,
    /// When the commit was made, ms since the epoch.
    pub commit_timestamp_ms: i64,
}

/// One member as stored in GroupMetadataValue.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StoredMember {
    /// Member id given by the coordinator.
    pub member_id: String,
    /// Static membership id (KIP-345), if any.
    pub group_instance_id: Option<String>,
    /// The client's `client.id`.
    pub client_id: String,
    /// The client's address.
    pub client_host: String,
    /// ms.
    pub rebalance_timeout_ms: i32,
    /// ms.
    pub session_timeout_ms: i32,
    /// The member's metadata for the chosen protocol.
    pub subscription: Bytes,
    /// The member's assignment from the leader.
    pub assignment: Bytes,
}

/// A group's metadata (GroupMetadataValue).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StoredGroup {
    /// `consumer` for Kafka consumers; empty for a group with offsets only.
    pub protocol_type: String,
    /// Generation id.
    pub generation: i32,
    /// Chosen protocol (assignor), if any.
    pub protocol: Option<String>,
    /// Leader member id, if any.
    pub leader: Option<String>,
    /// When the group entered its state, ms since the epoch.
    pub current_state_timestamp_ms: i64,
    /// Members with their assignments.
    pub members: Vec<StoredMember>,
}

/// A decoded `__consumer_offsets` record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OffsetsRecord {
    /// An offset commit, or its deletion (`None`).
    Offset {
        /// Group id.
        group: String,
        /// Topic name.
        topic: String,
        /// Partition.
        partition: i32,
        /// The commit; `None` = tombstone.
        value: Option<CommittedOffset>,
    },
    /// A group's metadata, or its deletion (`None`).
    Group {
        /// Group id.
        group: String,
        /// The metadata; `None` = tombstone.
        value: Option<StoredGroup>,
    },
}

/// Why a record could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("__consumer_offsets record: {0}")]
pub struct DecodeError(String);

fn put_str(out: &mut BytesMut, s: &str) {
    // Callers bound every string to at most 32767 bytes before it gets here.
    debug_assert!(s.len() <= i16::MAX as usize);
    out.put_i16(s.len() as i16);
    out.put_slice(s.as_bytes());
}

fn put_nullable_str(out: &mut BytesMut, s: Option<&str>) {
    match s {
        Some(s) => put_str(out, s),
        None => out.put_i16(-1),
    }
}

fn put_bytes(out: &mut BytesMut, b: &[u8]) {
    out.put_i32(b.len() as i32);
    out.put_slice(b);
}

/// Key of an offset commit (version 1).
pub fn offset_key(group: &str, topic: &str, partition: i32) -> Bytes {
    let mut out = BytesMut::with_capacity(10 + group.len() + topic.len());
    out.put_i16(1);
    put_str(&mut out, group);
    put_str(&mut out, topic);
    out.put_i32(partition);
    out.freeze()
}

/// Value of an offset commit (version 3).
pub fn offset_value(v: &CommittedOffset) -> Bytes {
    let mut out = BytesMut::with_capacity(26 + v.metadata.len());
    out.put_i16(3);
    out.put_i64(v.offset);
    out.put_i32(v.leader_epoch);
    put_str(&mut out, &v.metadata);
    out.put_i64(v.commit_timestamp_ms);
    out.freeze()
}

/// Key of a group's metadata (version 2).
pub fn group_key(group: &str) -> Bytes {
    let mut out = BytesMut::with_capacity(4 + group.len());
    out.put_i16(2);
    put_str(&mut out, group);
    out.freeze()
}

/// Value of a group's metadata (version 3).
pub fn group_value(g: &StoredGroup) -> Bytes {
    let mut out = BytesMut::with_capacity(64);
    out.put_i16(3);
    put_str(&mut out, &g.protocol_type);
    out.put_i32(g.generation);
    put_nullable_str(&mut out, g.protocol.as_deref());
    put_nullable_str(&mut out, g.leader.as_deref());
    out.put_i64(g.current_state_timestamp_ms);
    out.put_i32(g.members.len() as i32);
    for m in &g.members {
        put_str(&mut out, &m.member_id);
        put_nullable_str(&mut out, m.group_instance_id.as_deref());
        put_str(&mut out, &m.client_id);
        put_str(&mut out, &m.client_host);
        out.put_i32(m.rebalance_timeout_ms);
        out.put_i32(m.session_timeout_ms);
        put_bytes(&mut out, &m.subscription);
        put_bytes(&mut out, &m.assignment);
    }
    out.freeze()
}

/// A bounds-checked reader over one key or value.
struct Reader {
    buf: Bytes,
    what: &'static str,
}

impl Reader {
    fn need(&self, n: usize, field: &str) -> Result<(), DecodeError> {
        if self.buf.remaining() < n {
            return Err(DecodeError(format!("{}: truncated at {field}", self.what)));
        }
        Ok(())
    }
    fn i16(&mut self, field: &str) -> Result<i16, DecodeError> {
        self.need(2, field)?;
        Ok(self.buf.get_i16())
    }
    fn i32(&mut self, field: &str) -> Result<i32, DecodeError> {
        self.need(4, field)?;
        Ok(self.buf.get_i32())
    }
    fn i64(&mut self, field: &str) -> Result<i64, DecodeError> {
        self.need(8, field)?;
        Ok(self.buf.get_i64())
    }
    fn nullable_str(&mut self, field: &str) -> Result<Option<String>, DecodeError> {
        let len = self.i16(field)?;
        if len < 0 {
            return Ok(None);
        }
        let len = len as usize;
        self.need(len, field)?;
        let raw = self.buf.split_to(len);
        String::from_utf8(raw.to_vec())
            .map(Some)
            .map_err(|_| DecodeError(format!("{}: {field} is not UTF-8", self.what)))
    }
    fn str(&mut self, field: &str) -> Result<String, DecodeError> {
        self.nullable_str(field)?
            .ok_or_else(|| DecodeError(format!("{}: {field} is null", self.what)))
    }
    fn bytes(&mut self, field: &str) -> Result<Bytes, DecodeError> {
        let len = self.i32(field)?;
        let len = usize::try_from(len)
            .map_err(|_| DecodeError(format!("{}: {field} has length {len}", self.what)))?;
        self.need(len, field)?;
        Ok(self.buf.split_to(len))
    }
}

/// Decodes one record of `__consumer_offsets` (`value` `None` = tombstone).
pub fn decode(key: Bytes, value: Option<Bytes>) -> Result<OffsetsRecord, DecodeError> {
    let mut k = Reader {
        buf: key,
        what: "key",
    };
    match k.i16("version")? {
        0 | 1 => {
            let group = k.str("group")?;
            let topic = k.str("topic")?;
            let partition = k.i32("partition")?;
            let value = value.map(decode_offset_value).transpose()?;
            Ok(OffsetsRecord::Offset {
                group,
                topic,
                partition,
                value,
            })
        }
        2 => {
            let group = k.str("group")?;
            let value = value.map(decode_group_value).transpose()?;
            Ok(OffsetsRecord::Group { group, value })
        }
        v => Err(DecodeError(format!("unknown key version {v}"))),
    }
}

fn decode_offset_value(buf: Bytes) -> Result<CommittedOffset, DecodeError> {
    let mut r = Reader {
        buf,
        what: "offset commit value",
    };
    let version = r.i16("version")?;
    if !(0..=3).contains(&version) {
        return Err(DecodeError(format!(
            "offset commit value version {version} (0..=3 known)"
        )));
    }
    let offset = r.i64("offset")?;
    let leader_epoch = if version >= 3 {
        r.i32("leader_epoch")?
    } else {
        -1
    };
    let metadata = r.str("metadata")?;
    let commit_timestamp_ms = r.i64("commit_timestamp")?;
    if version == 1 {
        r.i64("expire_timestamp")?;
    }
    Ok(CommittedOffset {
        offset,
        leader_epoch,
        metadata,
        commit_timestamp_ms,
    })
}

fn decode_group_value(buf: Bytes) -> Result<StoredGroup, DecodeError> {
    let mut r = Reader {
        buf,
        what: "group metadata value",
    };
    let version = r.i16("version")?;
    if !(0..=3).contains(&version) {
        return Err(DecodeError(format!(
            "group metadata value version {version} (0..=3 known)"
        )));
    }
    let protocol_type = r.str("protocol_type")?;
    let generation = r.i32("generation")?;
    let protocol = r.nullable_str("protocol")?;
    let leader = r.nullable_str("leader")?;
    let current_state_timestamp_ms = if version >= 2 {
        r.i64("current_state_timestamp")?
    } else {
        -1
    };
    let count = r.i32("members")?;
    // Each member takes at least 20 bytes: a count beyond that is damage, not a size.
    if count < 0 || count as usize > r.buf.remaining() / 20 {
        return Err(DecodeError(format!(
            "group metadata value: {count} members in {} bytes",
            r.buf.remaining()
        )));
    }
    let mut members = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let member_id = r.str("member_id")?;
        let group_instance_id = if version >= 3 {
            r.nullable_str("group_instance_id")?
        } else {
            None
        };
        let client_id = r.str("client_id")?;
        let client_host = r.str("client_host")?;
        let session_timeout;
        let rebalance_timeout_ms = if version >= 1 {
            let rt = r.i32("rebalance_timeout")?;
            session_timeout = r.i32("session_timeout")?;
            rt
        } else {
            session_timeout = r.i32("session_timeout")?;
            session_timeout
        };
        let subscription = r.bytes("subscription")?;
        let assignment = r.bytes("assignment")?;
        members.push(StoredMember {
            member_id,
            group_instance_id,
            client_id,
            client_host,
            rebalance_timeout_ms,
            session_timeout_ms: session_timeout,
            subscription,
            assignment,
        });
    }
    Ok(StoredGroup {
        protocol_type,
        generation,
        protocol,
        leader,
        current_state_timestamp_ms,
        members,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_for_matches_java_string_hash_code() {
        // Java: "test-group".hashCode() == -1101064066 (checked with jshell); abs % 50.
        assert_eq!(partition_for("", 50), 0);
        assert_eq!(partition_for("a", 50), 97 % 50);
        // "ab": 97*31 + 98 = 3105.
        assert_eq!(partition_for("ab", 50), 3105 % 50);
        // A negative hash is masked, as Kafka's Utils.abs does: "polygenelubricants" hashes
        // to i32::MIN in Java.
        assert_eq!(partition_for("polygenelubricants", 50), 0);
        for g in ["x", "group-1", "très", "🦀"] {
            let p = partition_for(g, 7);
            assert!((0..7).contains(&p));
        }
    }

    #[test]
    fn offset_records_round_trip() {
        let v = CommittedOffset {
            offset: 42,
            leader_epoch: 3,
            metadata: "m".into(),
            commit_timestamp_ms: 1_700_000_000_000,
        };
        let r = decode(offset_key("g", "t", 5), Some(offset_value(&v))).unwrap();
        assert_eq!(
            r,
            OffsetsRecord::Offset {
                group: "g".into(),
                topic: "t".into(),
                partition: 5,
                value: Some(v),
            }
        );
        let tomb = decode(offset_key("g", "t", 5), None).unwrap();
        assert!(matches!(tomb, OffsetsRecord::Offset { value: None, .. }));
    }

    #[test]
    fn group_records_round_trip() {
        let g = StoredGroup {
            protocol_type: "consumer".into(),
            generation: 7,
            protocol: Some("range".into()),
            leader: Some("m1".into()),
            current_state_timestamp_ms: 5,
            members: vec![StoredMember {
                member_id: "m1".into(),
                group_instance_id: Some("i1".into()),
                client_id: "c".into(),
                client_host: "/127.0.0.1".into(),
                rebalance_timeout_ms: 300_000,
                session_timeout_ms: 45_000,
                subscription: Bytes::from_static(b"sub"),
                assignment: Bytes::from_static(b"assign"),
            }],
        };
        let r = decode(group_key("grp"), Some(group_value(&g))).unwrap();
        assert_eq!(
            r,
            OffsetsRecord::Group {
                group: "grp".into(),
                value: Some(g),
            }
        );
    }

    #[test]
    fn damaged_records_are_errors_not_panics() {
        let good = offset_value(&CommittedOffset {
            offset: 1,
            leader_epoch: -1,
            metadata: String::new(),
            commit_timestamp_ms: 0,
        });
        for cut in 0..good.len() {
            assert!(decode(offset_key("g", "t", 0), Some(good.slice(..cut))).is_err());
        }
        let key = offset_key("g", "t", 0);
        for cut in 0..key.len() {
            assert!(decode(key.slice(..cut), None).is_err());
        }
        assert!(decode(Bytes::from_static(&[0, 9]), None).is_err());
        // A member count far beyond the bytes is refused before allocating.
        let mut v = BytesMut::new();
        v.put_i16(3);
        put_str(&mut v, "consumer");
        v.put_i32(1);
        v.put_i16(-1);
        v.put_i16(-1);
        v.put_i64(0);
        v.put_i32(i32::MAX);
        assert!(decode(group_key("g"), Some(v.freeze())).is_err());
    }
}
