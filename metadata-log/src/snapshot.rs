//! Snapshot files: a [`MetadataImage`] written as records, with a header and a checksum.
//!
//! Layout (all integers big-endian):
//!
//! ```text
//! offset  size  field
//! 0       8     magic "KEELSNAP"
//! 8       2     format version (1)
//! 10      2     flags (0)
//! 12      8     last included metadata offset (Raft log index, inclusive)
//! 20      8     last included term
//! 28      8     record count
//! 36      4     raft meta length M
//! 40      M     raft meta (opaque to this module: the controller stores openraft's
//!               snapshot meta here; brokers write nothing)
//! 40+M    ...   records: per record a u32 length L and L bytes of protobuf MetadataRecord
//! end-4   4     CRC32C (Castagnoli) of every preceding byte
//! ```
//!
//! Files are written atomically (temp file, fsync, rename, fsync of the directory), so a
//! reader sees either the old file or the whole new one. Reading checks magic, version, then
//! the checksum over the whole file before decoding anything; every error names the file and
//! the byte offset where the problem is.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use bytes::{BufMut, Bytes};
use keel_proto::metadata::MetadataRecord;
use prost::Message;

use crate::image::{MetadataImage, Provenance};

/// First bytes of every snapshot file.
pub const MAGIC: &[u8; 8] = b"KEELSNAP";
/// The format version this build writes and reads.
pub const FORMAT_VERSION: u16 = 1;
/// Bytes before the raft meta.
const FIXED_HEADER_BYTES: usize = 40;
/// Bytes of the CRC trailer.
const TRAILER_BYTES: usize = 4;
/// Upper bound on one encoded record (bytes): a record longer than this is corruption. Equal
/// to the Raft log's entry bound, so every committed record fits (see [`crate::limits`]).
pub const MAX_RECORD_BYTES: u32 = crate::limits::MAX_SNAPSHOT_RECORD_BYTES;

/// Why a snapshot could not be read or written. `path` is the file (or a label such as
/// `<received snapshot>` for bytes that came over the network); `offset` is a byte position.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// Reading or writing the file failed.
    #[error("{path}: {op}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What was being done.
        op: &'static str,
        /// The OS error.
        source: io::Error,
    },
    /// The file does not start with [`MAGIC`].
    #[error("{path}: not a Keel snapshot (bad magic at byte 0)")]
    BadMagic {
        /// The file.
        path: PathBuf,
    },
    /// Written by a format this build cannot read.
    #[error(
        "{path}: unsupported snapshot format version {version} at byte 8 (this build reads {FORMAT_VERSION})"
    )]
    UnsupportedVersion {
        /// The file.
        path: PathBuf,
        /// Version found.
        version: u16,
    },
    /// The file ends before a field it announces.
    #[error("{path}: truncated: {needed} bytes needed at byte {offset}, file has {len}")]
    Truncated {
        /// The file.
        path: PathBuf,
        /// Where the missing bytes start.
        offset: u64,
        /// Bytes needed there.
        needed: u64,
        /// File length.
        len: u64,
    },
    /// The checksum does not match: some byte changed or the file was cut.
    #[error(
        "{path}: checksum mismatch: crc32c stored at byte {offset} is {stored:#010x}, content gives {computed:#010x}"
    )]
    ChecksumMismatch {
        /// The file.
        path: PathBuf,
        /// Position of the stored CRC.
        offset: u64,
        /// Stored value.
        stored: u32,
        /// Computed value.
        computed: u32,
    },
    /// A record does not decode or is implausibly long.
    #[error("{path}: record {index} at byte {offset}: {reason}")]
    BadRecord {
        /// The file.
        path: PathBuf,
        /// Index of the record (0-based).
        index: u64,
        /// Byte position of its length prefix.
        offset: u64,
        /// What was wrong.
        reason: String,
    },
    /// The header's record count does not match the records present.
    #[error("{path}: header announces {expected} records, found {found} before byte {offset}")]
    RecordCountMismatch {
        /// The file.
        path: PathBuf,
        /// Count in the header.
        expected: u64,
        /// Records found.
        found: u64,
        /// Where the records end.
        offset: u64,
    },
    /// The records do not replay into a valid image.
    #[error("{path}: record {index} does not replay: {source}")]
    Replay {
        /// The file.
        path: PathBuf,
        /// Index of the record.
        index: u64,
        /// The replay error.
        source: crate::ReplayError,
    },
}

/// The header fields of a snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotHeader {
    /// Offset and term of the last entry the snapshot includes (inclusive).
    pub provenance: Provenance,
    /// Number of records.
    pub record_count: u64,
    /// Opaque bytes for the owner (openraft snapshot meta on controllers).
    pub raft_meta: Bytes,
}

/// A decoded snapshot.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    /// Header fields.
    pub header: SnapshotHeader,
    /// The records, in file order.
    pub records: Vec<MetadataRecord>,
}

impl Snapshot {
    /// Replays the records on the empty image. `path` only labels errors.
    pub fn to_image(&self, path: &Path) -> Result<MetadataImage, SnapshotError> {
        MetadataImage::empty()
            .with_records(self.header.provenance, &self.records)
            .map_err(|(index, source)| SnapshotError::Replay {
                path: path.to_path_buf(),
                index: index as u64,
                source,
            })
    }
}

/// Encodes `image` as a snapshot (in memory). `raft_meta` is stored verbatim.
pub fn encode(image: &MetadataImage, raft_meta: &[u8]) -> Vec<u8> {
    let records = image.to_records();
    let body: usize = records.iter().map(|r| 4 + r.encoded_len()).sum();
    let mut buf = Vec::with_capacity(FIXED_HEADER_BYTES + raft_meta.len() + body + TRAILER_BYTES);
    let p = image.provenance();
    buf.put_slice(MAGIC);
    buf.put_u16(FORMAT_VERSION);
    buf.put_u16(0);
    buf.put_u64(p.offset);
    buf.put_u64(p.term);
    buf.put_u64(records.len() as u64);
    buf.put_u32(u32::try_from(raft_meta.len()).expect("raft meta under 4 GiB"));
    buf.put_slice(raft_meta);
    for r in &records {
        let len = r.encoded_len();
        // Unreachable for committed records (crate::limits): they lie inside a Raft entry.
        assert!(
            len as u64 <= MAX_RECORD_BYTES as u64,
            "record of {len} bytes exceeds the snapshot limit"
        );
        buf.put_u32(len as u32);
        r.encode(&mut buf).expect("Vec grows");
    }
    let crc = crc32c::crc32c(&buf);
    buf.put_u32(crc);
    buf
}

/// Decodes and verifies snapshot bytes. `path` labels errors (use the file name, or a label
/// for bytes received over the network).
pub fn decode(path: &Path, data: &[u8]) -> Result<Snapshot, SnapshotError> {
    let p = || path.to_path_buf();
    let len = data.len() as u64;
    let need = |offset: usize, needed: usize| -> Result<(), SnapshotError> {
        if data.len() < offset + needed {
            return Err(SnapshotError::Truncated {
                path: p(),
                offset: offset as u64,
                needed: needed as u64,
                len,
            });
        }
        Ok(())
    };
    need(0, MAGIC.len())?;
    if &data[..8] != MAGIC {
        return Err(SnapshotError::BadMagic { path: p() });
    }
    need(8, 2)?;
    let version = u16::from_be_bytes([data[8], data[9]]);
    if version != FORMAT_VERSION {
        return Err(SnapshotError::UnsupportedVersion { path: p(), version });
    }
    need(0, FIXED_HEADER_BYTES + TRAILER_BYTES)?;
    let crc_at = data.len() - TRAILER_BYTES;
    let stored = u32::from_be_bytes(data[crc_at..].try_into().expect("4 bytes"));
    let computed = crc32c::crc32c(&data[..crc_at]);
    if stored != computed {
        return Err(SnapshotError::ChecksumMismatch {
            path: p(),
            offset: crc_at as u64,
            stored,
            computed,
        });
    }
    let body = &data[..crc_at];
    let u64_at = |o: usize| u64::from_be_bytes(body[o..o + 8].try_into().expect("8 bytes"));
    let provenance = Provenance {
        offset: u64_at(12),
        term: u64_at(20),
    };
    let record_count = u64_at(28);
    let meta_len = u32::from_be_bytes(body[36..40].try_into().expect("4 bytes")) as usize;
    if body.len() < FIXED_HEADER_BYTES + meta_len {
        return Err(SnapshotError::Truncated {
            path: p(),
            offset: FIXED_HEADER_BYTES as u64,
            needed: meta_len as u64,
            len,
        });
    }
    let raft_meta =
        Bytes::copy_from_slice(&body[FIXED_HEADER_BYTES..FIXED_HEADER_BYTES + meta_len]);
    let mut pos = FIXED_HEADER_BYTES + meta_len;
    // Each record takes at least its 4-byte prefix: bound the allocation by what is present.
    let mut records =
        Vec::with_capacity(record_count.min(((body.len() - pos) / 4) as u64) as usize);
    while pos < body.len() {
        let index = records.len() as u64;
        let bad = |reason: String| SnapshotError::BadRecord {
            path: p(),
            index,
            offset: pos as u64,
            reason,
        };
        if body.len() - pos < 4 {
            return Err(bad(format!(
                "length prefix cut: {} bytes left",
                body.len() - pos
            )));
        }
        let rlen = u32::from_be_bytes(body[pos..pos + 4].try_into().expect("4 bytes"));
        if rlen > MAX_RECORD_BYTES || (rlen as usize) > body.len() - pos - 4 {
            return Err(bad(format!(
                "record length {rlen} runs past the end of the records"
            )));
        }
        let start = pos + 4;
        let rec = MetadataRecord::decode(&body[start..start + rlen as usize])
            .map_err(|e| bad(format!("protobuf decode failed: {e}")))?;
        records.push(rec);
        pos = start + rlen as usize;
    }
    if records.len() as u64 != record_count {
        return Err(SnapshotError::RecordCountMismatch {
            path: p(),
            expected: record_count,
            found: records.len() as u64,
            offset: pos as u64,
        });
    }
    Ok(Snapshot {
        header: SnapshotHeader {
            provenance,
            record_count,
            raft_meta,
        },
        records,
    })
}

/// Writes `data` to `path` atomically ([`keel_runtime::fs::write_atomic`]: `<path>.tmp`,
/// fsync, rename over `path`, fsync of the parent directory). After an error `path` is
/// untouched.
pub fn write_atomic(path: &Path, data: &[u8]) -> Result<(), SnapshotError> {
    keel_runtime::fs::write_atomic(path, data).map_err(|e| SnapshotError::Io {
        path: e.path,
        op: e.op,
        source: e.source,
    })
}

/// Encodes `image` and writes it to `path` atomically.
pub fn write_file(
    path: &Path,
    image: &MetadataImage,
    raft_meta: &[u8],
) -> Result<(), SnapshotError> {
    write_atomic(path, &encode(image, raft_meta))
}

/// Reads, verifies and decodes the snapshot at `path`.
pub fn read_file(path: &Path) -> Result<Snapshot, SnapshotError> {
    let data = fs::read(path).map_err(|source| SnapshotError::Io {
        path: path.to_path_buf(),
        op: "read",
        source,
    })?;
    decode(path, &data)
}
