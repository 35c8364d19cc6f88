//! The broker's local metadata snapshot (fast restart): the last image written with the
//! metadata-log crate's snapshot format to `<first log dir>/__cluster_metadata/metadata.snap`.
//!
//! It is a cache of committed metadata: a restart loads it and tails from its offset + 1
//! instead of replaying the whole log. A missing file means "start empty"; an unreadable or
//! corrupt one is reported and ignored (the controllers have the truth), never fatal.

use std::path::{Path, PathBuf};

use keel_metadata_log::MetadataImage;
use keel_metadata_log::snapshot::{self, SnapshotError};

/// File name of the local snapshot inside the metadata directory.
pub const FILE_NAME: &str = "metadata.snap";

/// The snapshot file in `metadata_dir`.
pub fn path_in(metadata_dir: &Path) -> PathBuf {
    metadata_dir.join(FILE_NAME)
}

/// Loads the snapshot at `path`. `Ok(None)` when there is none; `Err` when it exists but
/// cannot be read, fails its checksum or does not replay (the caller starts empty).
pub fn load(path: &Path) -> Result<Option<MetadataImage>, SnapshotError> {
    if !path.exists() {
        return Ok(None);
    }
    let snap = snapshot::read_file(path)?;
    let image = snap.to_image(path)?;
    Ok(Some(image))
}

/// Writes `image` to `path` atomically (temp file, fsync, rename, fsync of the directory),
/// creating the directory. Blocking: call from `spawn_blocking`.
pub fn save(path: &Path, image: &MetadataImage) -> Result<(), SnapshotError> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|source| SnapshotError::Io {
            path: dir.to_path_buf(),
            op: "create directory",
            source,
        })?;
    }
    // Brokers store no Raft meta.
    snapshot::write_file(path, image, &[])
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_metadata_log::Provenance;
    use keel_metadata_log::records::metadata_record::Record;
    use keel_metadata_log::records::{MetadataRecord, TopicRecord};

    #[test]
    fn round_trip_missing_and_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let path = path_in(&dir.path().join("__cluster_metadata"));
        assert!(load(&path).unwrap().is_none());
        let image = MetadataImage::empty()
            .with_records(
                Provenance {
                    offset: 42,
                    term: 3,
                },
                &[MetadataRecord {
                    record: Some(Record::Topic(TopicRecord {
                        name: "t".into(),
                        topic_id: bytes::Bytes::copy_from_slice(&[7; 16]),
                    })),
                }],
            )
            .unwrap();
        save(&path, &image).unwrap();
        let back = load(&path).unwrap().unwrap();
        assert_eq!(back, image);
        assert_eq!(back.provenance().offset, 42);
        // Flip one byte: the checksum catches it and the error names the file.
        let mut data = std::fs::read(&path).unwrap();
        let mid = data.len() / 2;
        data[mid] ^= 0xff;
        std::fs::write(&path, data).unwrap();
        let e = load(&path).unwrap_err().to_string();
        assert!(e.contains("metadata.snap"), "{e}");
    }
}
