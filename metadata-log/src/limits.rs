//! Size bounds of the metadata log, from the Raft log up to what the write path may propose.
//!
//! The rule (issue #18): **no committed record can stop a controller.** Whatever the write
//! path can commit, every later stage accepts: the Raft log ([`MAX_ENTRY_BYTES`] per entry),
//! the snapshot writer and reader ([`MAX_SNAPSHOT_RECORD_BYTES`], equal to the entry bound,
//! since a record always sits inside one entry and an image record is never larger than the
//! log records it summarises), and the brokers' metadata tailers (same decoders). The write
//! path proposes far less: one record at most [`MAX_PROPOSED_RECORD_BYTES`], one operation
//! and one entry at most [`MAX_PROPOSED_ENTRY_BYTES`]; an operation above either is refused
//! before anything is proposed.
//!
//! ```
//! use keel_metadata_log::limits::*;
//! assert!(MAX_PROPOSED_RECORD_BYTES <= MAX_PROPOSED_ENTRY_BYTES);
//! assert!(MAX_PROPOSED_ENTRY_BYTES < MAX_ENTRY_BYTES);
//! assert_eq!(MAX_SNAPSHOT_RECORD_BYTES as usize, MAX_ENTRY_BYTES);
//! ```

pub use crate::store::disk::MAX_ENTRY_BYTES;

/// Largest encoded record the snapshot writer writes and the reader accepts, bytes: the Raft
/// log's entry bound, so every record the log can hold fits (a longer length prefix in a
/// snapshot file is corruption).
pub const MAX_SNAPSHOT_RECORD_BYTES: u32 = MAX_ENTRY_BYTES as u32;

/// Largest encoded record the active controller proposes, bytes (1 MiB; Kafka's
/// `max.message.bytes` default for a whole batch). The largest legitimate records, a
/// PartitionRecord of 256 replicas or a ConfigRecord of a 32 KiB value, are far smaller.
pub const MAX_PROPOSED_RECORD_BYTES: usize = 1 << 20;

/// Largest encoded size of the records of one operation, and of one Raft entry, that the
/// active controller proposes, bytes (8 MiB). A 9,982-partition topic is about 1 MB.
pub const MAX_PROPOSED_ENTRY_BYTES: usize = 8 << 20;

/// Bytes `record` takes in an entry: its protobuf encoding and the field header of the
/// `MetadataBatch.records` list it sits in.
pub fn record_entry_bytes(record: &crate::records::MetadataRecord) -> usize {
    let len = prost::Message::encoded_len(record);
    // Field tag (1 byte) + length varint (at most 5 bytes for a u32).
    len + 1 + prost::encoding::encoded_len_varint(len as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::{MetadataBatch, MetadataRecord, NoOpRecord, metadata_record::Record};

    #[test]
    fn record_entry_bytes_is_exact_for_a_batch() {
        let records: Vec<MetadataRecord> = (0..100)
            .map(|_| MetadataRecord {
                record: Some(Record::NoOp(NoOpRecord {})),
            })
            .collect();
        let batch = MetadataBatch {
            records: records.clone(),
            ..Default::default()
        };
        let sum: usize = records.iter().map(record_entry_bytes).sum();
        assert_eq!(prost::Message::encoded_len(&batch), sum);
    }
}
