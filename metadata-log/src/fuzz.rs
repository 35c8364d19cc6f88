//! Entry points shared by the cargo-fuzz targets (`fuzz/fuzz_targets/`, libFuzzer) and their
//! short proptest versions in the normal test run (`metadata-log/tests/fuzz_props.rs`). Each
//! takes arbitrary bytes and must neither panic nor loop nor allocate much beyond the input's
//! size; the properties it asserts on what it accepts are stated per function (a failed
//! assertion is a finding, like a panic).

use std::ops::Bound;
use std::path::Path;

use crate::snapshot;
use crate::store::disk::{SegmentDisk, segment_file_bytes};

/// The snapshot reader on `data` (after its first byte, the mode: odd = recompute the CRC
/// trailer first): [`snapshot::decode`], then replay into an image.
/// Property: whatever decodes and replays is written again ([`snapshot::encode`]) to bytes
/// that decode to the same image and provenance (the writer accepts everything the reader
/// accepts).
pub fn snapshot_bytes(data: &[u8]) {
    let label = Path::new("<fuzz>");
    let Some((&mode, body)) = data.split_first() else {
        return;
    };
    let mut data = body.to_vec();
    if mode % 2 == 1 && data.len() >= 4 {
        // Recompute the trailer CRC, so mutations reach the header and record decoding.
        let end = data.len() - 4;
        let crc = crc32c::crc32c(&data[..end]);
        data[end..].copy_from_slice(&crc.to_be_bytes());
    }
    let Ok(snap) = snapshot::decode(label, &data) else {
        return;
    };
    let Ok(image) = snap.to_image(label) else {
        return;
    };
    let again = snapshot::encode(&image, &snap.header.raft_meta);
    let back = snapshot::decode(label, &again).expect("a re-encoded snapshot decodes");
    assert_eq!(back.header.provenance, snap.header.provenance);
    assert_eq!(
        back.to_image(label).expect("a re-encoded snapshot replays"),
        image
    );
}

/// The Raft segment reader on `data`, as the first segment of a Raft log in `dir` (an empty
/// directory the caller owns). The first byte picks the shape: even = `data[1..]` is the
/// whole file; odd = a valid header, then records framed from `data[1..]` (each a length
/// byte and that many payload bytes; indexes from 1, every fourth record starting a batch)
/// and whatever is left as a raw tail. [`SegmentDisk::open`] recovers the log (cutting a torn tail, refusing damage).
/// Properties: every entry it reports reads back, and a second open reports the same
/// entries (recovery is idempotent).
pub fn raft_segment(dir: &Path, data: &[u8]) {
    let Some((&mode, body)) = data.split_first() else {
        return;
    };
    let (name, bytes) = if mode % 2 == 0 {
        (segment_file_bytes(1, 0, []).0, body.to_vec())
    } else {
        let mut records = Vec::new();
        let mut rest = body;
        while let Some((&len, after)) = rest.split_first() {
            let len = len as usize;
            if after.len() < len || records.len() >= 64 {
                break;
            }
            let index = records.len() as u64 + 1;
            records.push((index, &after[..len], index % 4 == 1));
            rest = &after[len..];
        }
        let (name, mut bytes) = segment_file_bytes(1, 0, records);
        bytes.extend_from_slice(rest);
        (name, bytes)
    };
    std::fs::write(dir.join(&name), &bytes).expect("write the segment");
    let all = (Bound::Unbounded, Bound::Unbounded);
    let first = match SegmentDisk::open(dir) {
        Ok(disk) => disk.entries(all, usize::MAX),
        Err(_) => return,
    };
    let Ok(first) = first else { return };
    let again = SegmentDisk::open(dir)
        .expect("a recovered log opens again")
        .entries(all, usize::MAX)
        .expect("a recovered log reads again");
    assert_eq!(first, again, "a second recovery changed the entries");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::{MetadataImage, Provenance};

    #[test]
    fn valid_inputs_pass() {
        let mut input = vec![0u8];
        input.extend(snapshot::encode(
            &MetadataImage::empty()
                .with_records(Provenance { offset: 3, term: 1 }, &[])
                .unwrap(),
            b"meta",
        ));
        snapshot_bytes(&input);
        input[0] = 1;
        snapshot_bytes(&input);
        let dir = tempfile::tempdir().unwrap();
        raft_segment(dir.path(), &[1, 3, b'a', b'b', b'c', 2, b'x', b'y', 9, 9]);
        let dir = tempfile::tempdir().unwrap();
        raft_segment(dir.path(), &[0, 1, 2, 3]);
    }
}
