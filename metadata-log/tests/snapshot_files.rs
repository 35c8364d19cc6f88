//! Snapshot files: atomic write and read back, and rejection of damaged files with an error
//! that names the file and the byte offset (never a panic).

mod common;

use common::*;
use keel_metadata_log::snapshot::{self, SnapshotError};
use keel_metadata_log::{MetadataImage, Provenance};

fn sample_image() -> MetadataImage {
    let t = topic_id(1);
    let batch = vec![
        register(1),
        register(2),
        register(3),
        topic("orders", t),
        topic_config("orders", "min.insync.replicas", Some("2")),
        partition(t, 0, &[1, 2, 3], &[1, 2, 3], 1),
        partition(t, 1, &[2, 3, 1], &[2, 3], 2),
        producer_ids(1, 5, 1000),
    ];
    MetadataImage::empty()
        .with_records(Provenance { offset: 5, term: 2 }, &batch)
        .unwrap()
}

#[test]
fn write_then_read_round_trips_and_leaves_no_temp_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.snap");
    let img = sample_image();
    snapshot::write_file(&path, &img, b"raft").unwrap();
    assert!(!keel_runtime::fs::tmp_path(&path).exists());
    let snap = snapshot::read_file(&path).unwrap();
    assert_eq!(snap.header.provenance, Provenance { offset: 5, term: 2 });
    assert_eq!(snap.header.record_count, img.to_records().len() as u64);
    assert_eq!(snap.to_image(&path).unwrap(), img);
    // Overwrite atomically with a newer image.
    let newer = img
        .with_records(Provenance { offset: 6, term: 2 }, [&register(4)])
        .unwrap();
    snapshot::write_file(&path, &newer, b"").unwrap();
    assert_eq!(
        snapshot::read_file(&path).unwrap().to_image(&path).unwrap(),
        newer
    );
}

#[test]
fn every_flipped_bit_is_rejected_naming_file_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flip.snap");
    let good = snapshot::encode(&sample_image(), b"raft");
    for byte in 0..good.len() {
        for bit in 0..8 {
            let mut bad = good.clone();
            bad[byte] ^= 1 << bit;
            std::fs::write(&path, &bad).unwrap();
            let err = snapshot::read_file(&path)
                .expect_err(&format!("flip of byte {byte} bit {bit} accepted"));
            let msg = err.to_string();
            assert!(
                msg.contains("flip.snap"),
                "error does not name the file: {msg}"
            );
            assert!(msg.contains("byte"), "error does not name an offset: {msg}");
        }
    }
}

#[test]
fn every_truncation_is_rejected() {
    let good = snapshot::encode(&sample_image(), b"raft");
    for len in 0..good.len() {
        let err = snapshot::decode(std::path::Path::new("cut.snap"), &good[..len])
            .expect_err(&format!("truncation to {len} bytes accepted"));
        let msg = err.to_string();
        assert!(msg.starts_with("cut.snap: "), "{msg}");
        assert!(msg.contains("byte"), "{msg}");
        assert!(
            matches!(
                err,
                SnapshotError::Truncated { .. } | SnapshotError::ChecksumMismatch { .. }
            ),
            "len {len}: {err:?}"
        );
    }
}

#[test]
fn unknown_version_and_bad_magic_are_named() {
    let good = snapshot::encode(&sample_image(), b"");
    let mut v2 = good.clone();
    v2[9] = 2;
    let err = snapshot::decode(std::path::Path::new("v.snap"), &v2).unwrap_err();
    assert!(
        matches!(err, SnapshotError::UnsupportedVersion { version: 2, .. }),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "v.snap: unsupported snapshot format version 2 at byte 8 (this build reads 1)"
    );
    let mut magic = good;
    magic[0] = b'X';
    let err = snapshot::decode(std::path::Path::new("m.snap"), &magic).unwrap_err();
    assert!(matches!(err, SnapshotError::BadMagic { .. }), "{err:?}");
}

#[test]
fn a_missing_file_is_an_io_error_naming_it() {
    let err = snapshot::read_file(std::path::Path::new("/nonexistent/x.snap")).unwrap_err();
    assert!(matches!(err, SnapshotError::Io { .. }));
    assert!(
        err.to_string().starts_with("/nonexistent/x.snap: read: "),
        "{err}"
    );
}

/// A registration whose host makes the record exactly `bytes` long in an entry.
fn registration_of_entry_size(
    broker: i32,
    bytes: usize,
) -> keel_metadata_log::records::MetadataRecord {
    use keel_metadata_log::limits::record_entry_bytes;
    use keel_metadata_log::records::metadata_record::Record;
    let mut r = register(broker);
    let set_host = |r: &mut keel_metadata_log::records::MetadataRecord, n: usize| {
        if let Some(Record::RegisterBroker(b)) = &mut r.record {
            b.endpoints[0].host = "h".repeat(n);
        }
    };
    // Varint lengths make the size step; search the host length that lands on `bytes`.
    let mut n = bytes.saturating_sub(200);
    loop {
        set_host(&mut r, n);
        let len = record_entry_bytes(&r);
        if len >= bytes {
            assert_eq!(len, bytes, "no host length gives exactly {bytes} bytes");
            return r;
        }
        n += 1;
    }
}

/// Issue #18: whatever the write path can commit, the snapshot writer and reader accept.
/// The largest record the active controller proposes round-trips through a snapshot file,
/// and so does a record as large as a whole Raft entry (one committed before the write
/// path's bounds existed used to panic the snapshot writer: "record of 20971573 bytes
/// exceeds the snapshot limit").
#[test]
fn the_largest_committable_records_round_trip_through_a_snapshot() {
    use keel_metadata_log::limits::{MAX_PROPOSED_RECORD_BYTES, MAX_SNAPSHOT_RECORD_BYTES};
    let dir = tempfile::tempdir().unwrap();
    for (name, bytes) in [
        ("proposed.snap", MAX_PROPOSED_RECORD_BYTES),
        ("twenty-mib.snap", 20 << 20),
    ] {
        assert!(bytes < MAX_SNAPSHOT_RECORD_BYTES as usize);
        let big = registration_of_entry_size(7, bytes);
        let img = sample_image()
            .with_records(Provenance { offset: 6, term: 2 }, [&big])
            .unwrap();
        let path = dir.path().join(name);
        snapshot::write_file(&path, &img, b"raft").unwrap();
        let back = snapshot::read_file(&path).unwrap().to_image(&path).unwrap();
        assert_eq!(back, img, "{name}");
        assert_eq!(
            back.broker(7).unwrap().endpoints[0].host.len(),
            img.broker(7).unwrap().endpoints[0].host.len()
        );
    }
}
