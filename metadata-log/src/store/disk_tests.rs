//! Tests of `SegmentDisk` on real files: round trips across segments, tail cuts, head purges,
//! gaps, torn tails, corruption, the lock, and a model-based property test.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::path::Path;

use proptest::prelude::*;

use super::{SEGMENT_HEADER_BYTES, SegmentDisk};

/// Small segments, so a few entries already span several files.
const SMALL: u64 = 256;

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn payload(index: u64, salt: u8) -> Vec<u8> {
    // Lengths vary from 0 to 60 bytes; the content depends on index and salt.
    (0..(index * 7 % 61) as usize)
        .map(|k| (index as u8) ^ (k as u8) ^ salt)
        .collect()
}

/// Appends `range` in batches of up to 5 entries (segments roll between batches).
fn put(disk: &SegmentDisk, range: std::ops::RangeInclusive<u64>, salt: u8) {
    let all: Vec<u64> = range.collect();
    for batch in all.chunks(5) {
        disk.put_entries(batch.iter().map(|&i| (i, payload(i, salt))))
            .unwrap();
    }
}

fn all(disk: &SegmentDisk) -> Vec<(u64, Vec<u8>)> {
    disk.entries((Bound::Unbounded, Bound::Unbounded), usize::MAX)
        .unwrap()
}

fn expected(range: std::ops::RangeInclusive<u64>, salt: u8) -> Vec<(u64, Vec<u8>)> {
    range.map(|i| (i, payload(i, salt))).collect()
}

fn segment_files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|d| d.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".log"))
        .collect();
    v.sort();
    v
}

/// A runtime for `flush`, a temporary directory, and a disk on it with [`SMALL`] segments.
fn small_disk() -> (tokio::runtime::Runtime, tempfile::TempDir, SegmentDisk) {
    let dir = tempfile::tempdir().unwrap();
    let disk = SegmentDisk::open_with(dir.path(), SMALL).unwrap();
    (rt(), dir, disk)
}

/// `expected(a, salt_a)` followed by `expected(b, salt_b)`.
fn two_runs(
    a: std::ops::RangeInclusive<u64>,
    salt_a: u8,
    b: std::ops::RangeInclusive<u64>,
    salt_b: u8,
) -> Vec<(u64, Vec<u8>)> {
    let mut v = expected(a, salt_a);
    v.extend(expected(b, salt_b));
    v
}

fn reopen(rt: &tokio::runtime::Runtime, disk: SegmentDisk, dir: &Path) -> SegmentDisk {
    rt.block_on(disk.flush()).unwrap();
    drop(disk);
    SegmentDisk::open_with(dir, SMALL).unwrap()
}

#[test]
fn entries_survive_a_reopen_across_segments() {
    let (rt, dir, disk) = small_disk();
    put(&disk, 0..=0, 1);
    for start in (1..100).step_by(9) {
        put(&disk, start..=start + 8, 1);
    }
    let disk = reopen(&rt, disk, dir.path());
    assert_eq!(all(&disk), expected(0..=99, 1));
    assert!(
        segment_files(dir.path()).len() > 5,
        "{:?}",
        segment_files(dir.path())
    );
    assert_eq!(disk.last_entry().unwrap(), Some((99, payload(99, 1))));
    // Bounded reads.
    let some = disk
        .entries((Bound::Included(10), Bound::Excluded(20)), 4)
        .unwrap();
    assert_eq!(some, expected(10..=13, 1));
}

#[test]
fn remove_from_cuts_the_tail_and_appends_continue_there() {
    let (rt, dir, disk) = small_disk();
    put(&disk, 1..=100, 1);
    rt.block_on(disk.flush()).unwrap();
    let before = segment_files(dir.path());
    disk.remove_from(37).unwrap();
    // Whole later segments are gone at once.
    let after = segment_files(dir.path());
    assert!(after.len() < before.len());
    assert!(
        after
            .iter()
            .all(|n| n.trim_end_matches(".log").parse::<u64>().unwrap() < 37)
    );
    let disk = reopen(&rt, disk, dir.path());
    assert_eq!(all(&disk), expected(1..=36, 1));
    put(&disk, 37..=60, 2);
    let disk = reopen(&rt, disk, dir.path());
    let want = two_runs(1..=36, 1, 37..=60, 2);
    assert_eq!(all(&disk), want);
}

#[test]
fn an_append_at_or_below_the_end_cuts_the_log_there() {
    let (rt, dir, disk) = small_disk();
    put(&disk, 1..=10, 1);
    put(&disk, 5..=6, 2);
    let want = two_runs(1..=4, 1, 5..=6, 2);
    assert_eq!(all(&disk), want);
    let disk = reopen(&rt, disk, dir.path());
    assert_eq!(all(&disk), want);
}

#[test]
fn remove_through_drops_the_head_and_its_segments_after_the_flush() {
    let (rt, dir, disk) = small_disk();
    put(&disk, 1..=100, 1);
    rt.block_on(disk.flush()).unwrap();
    let before = segment_files(dir.path());
    disk.remove_through(50).unwrap();
    assert_eq!(all(&disk), expected(51..=100, 1));
    // Files go only once the purge point is durable.
    assert_eq!(segment_files(dir.path()), before);
    rt.block_on(disk.flush()).unwrap();
    let after = segment_files(dir.path());
    assert!(after.len() < before.len(), "{after:?}");
    let disk = reopen(&rt, disk, dir.path());
    assert_eq!(all(&disk), expected(51..=100, 1));
    // The purge point never moves back.
    disk.remove_through(10).unwrap();
    assert_eq!(all(&disk), expected(51..=100, 1));
    put(&disk, 101..=101, 1);
    assert_eq!(disk.last_entry().unwrap(), Some((101, payload(101, 1))));
}

#[test]
fn purging_past_the_end_or_appending_past_it_leaves_a_gap() {
    let (rt, dir, disk) = small_disk();
    put(&disk, 1..=3, 1);
    put(&disk, 10..=12, 1);
    let want = two_runs(1..=3, 1, 10..=12, 1);
    assert_eq!(all(&disk), want);
    let disk = reopen(&rt, disk, dir.path());
    assert_eq!(all(&disk), want);

    // A snapshot installed beyond the log: purge past the end, then append after it.
    disk.remove_through(20).unwrap();
    rt.block_on(disk.flush()).unwrap();
    assert!(all(&disk).is_empty());
    put(&disk, 21..=25, 2);
    let disk = reopen(&rt, disk, dir.path());
    assert_eq!(all(&disk), expected(21..=25, 2));
}

#[test]
fn bad_batches_are_refused_and_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let disk = SegmentDisk::open_with(dir.path(), SMALL).unwrap();
    put(&disk, 1..=5, 1);
    let e = disk.put_entries([(6, vec![1]), (8, vec![2])]).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
    assert!(e.to_string().contains("not contiguous: 8 follows 6"), "{e}");
    assert_eq!(all(&disk), expected(1..=5, 1));
    // Entries at or below the purge point are skipped, the rest is stored.
    disk.remove_through(3).unwrap();
    disk.put_entries([(2, vec![1]), (3, vec![2]), (4, vec![3])])
        .unwrap();
    assert_eq!(all(&disk), vec![(4, vec![3])]);
}

fn active_segment(dir: &Path) -> std::path::PathBuf {
    dir.join(segment_files(dir).last().unwrap())
}

#[test]
fn a_torn_tail_is_cut_on_open_and_appends_continue() {
    let rt = rt();
    let dir = tempfile::tempdir().unwrap();
    let disk = SegmentDisk::open(dir.path()).unwrap();
    put(&disk, 1..=10, 1);
    rt.block_on(disk.flush()).unwrap();
    drop(disk);
    let seg = active_segment(dir.path());
    let good_len = std::fs::metadata(&seg).unwrap().len();

    // Half of a record: a header that promises 40 bytes, followed by 5.
    let mut torn = Vec::new();
    super::encode_record(&mut torn, 11, &[7; 40], true);
    torn.truncate(21);
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes.extend_from_slice(&torn);
    std::fs::write(&seg, &bytes).unwrap();

    let disk = SegmentDisk::open(dir.path()).unwrap();
    assert_eq!(all(&disk), expected(1..=10, 1));
    assert_eq!(std::fs::metadata(&seg).unwrap().len(), good_len);
    put(&disk, 11..=11, 1);
    rt.block_on(disk.flush()).unwrap();
    drop(disk);

    // Zeros past the end (a file extended but never written), then a record cut in half.
    let mut bytes = std::fs::read(&seg).unwrap();
    let cut = bytes.len() - 3;
    bytes.truncate(cut);
    std::fs::write(&seg, &bytes).unwrap();
    let disk = SegmentDisk::open(dir.path()).unwrap();
    assert_eq!(all(&disk), expected(1..=10, 1));
    drop(disk);
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes.extend_from_slice(&[0; 64]);
    std::fs::write(&seg, &bytes).unwrap();
    let disk = SegmentDisk::open(dir.path()).unwrap();
    assert_eq!(all(&disk), expected(1..=10, 1));
}

/// Byte offset of entry `index`'s record in a one-segment log of `payload(_, salt)` entries
/// starting at 1.
fn record_offset(index: u64, salt: u8) -> usize {
    SEGMENT_HEADER_BYTES as usize
        + (1..index)
            .map(|i| 16 + payload(i, salt).len())
            .sum::<usize>()
}

#[test]
fn damage_inside_the_last_batch_is_a_torn_tail_but_before_it_is_refused() {
    let rt = rt();
    let dir = tempfile::tempdir().unwrap();
    let disk = SegmentDisk::open(dir.path()).unwrap();
    // Batches 1..=5, 6..=10, 11..=15, each flushed.
    put(&disk, 1..=15, 1);
    rt.block_on(disk.flush()).unwrap();
    drop(disk);
    let seg = active_segment(dir.path());
    let pristine = std::fs::read(&seg).unwrap();

    // The last batch lost a page in its middle (entry 12) but later pages landed: a torn
    // write of the last batch, cut at entry 12.
    let mut bytes = pristine.clone();
    bytes[record_offset(12, 1) + 20] ^= 0xff;
    std::fs::write(&seg, &bytes).unwrap();
    let disk = SegmentDisk::open(dir.path()).unwrap();
    assert_eq!(all(&disk), expected(1..=11, 1));
    drop(disk);

    // Entry 7 damaged while the batch 11..=15 after it is intact: that data was on disk, so
    // this is not a torn tail; nothing is cut.
    let mut bytes = pristine.clone();
    bytes[record_offset(7, 1) + 20] ^= 0xff;
    std::fs::write(&seg, &bytes).unwrap();
    let e = SegmentDisk::open(dir.path()).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains(&format!("corrupt at byte {}", record_offset(7, 1)))
            && msg.contains("not a torn tail"),
        "{msg}"
    );
    assert_eq!(std::fs::read(&seg).unwrap(), bytes, "the file was changed");
}

#[test]
fn a_zeroed_header_with_records_after_it_is_refused_not_removed() {
    let dir = tempfile::tempdir().unwrap();
    let disk = SegmentDisk::open(dir.path()).unwrap();
    put(&disk, 1..=3, 1);
    drop(disk);
    let seg = active_segment(dir.path());
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes[..SEGMENT_HEADER_BYTES as usize].fill(0);
    std::fs::write(&seg, &bytes).unwrap();
    let e = SegmentDisk::open(dir.path()).unwrap_err();
    assert!(e.to_string().contains("bad magic"), "{e}");
    assert_eq!(std::fs::read(&seg).unwrap(), bytes, "the file was changed");
}

#[test]
fn a_segment_whose_header_never_reached_the_disk_is_removed() {
    let dir = tempfile::tempdir().unwrap();
    let disk = SegmentDisk::open(dir.path()).unwrap();
    put(&disk, 1..=3, 1);
    drop(disk);
    std::fs::write(dir.path().join(format!("{:020}.log", 4)), [0u8; 10]).unwrap();
    let disk = SegmentDisk::open(dir.path()).unwrap();
    assert_eq!(all(&disk), expected(1..=3, 1));
    assert_eq!(segment_files(dir.path()).len(), 1);
}

#[test]
fn corruption_before_the_tail_is_refused_naming_the_file_and_offset() {
    let (rt, dir, disk) = small_disk();
    put(&disk, 1..=40, 1);
    drop(reopen(&rt, disk, dir.path()));
    let first = dir.path().join(&segment_files(dir.path())[0]);
    let mut bytes = std::fs::read(&first).unwrap();
    let at = SEGMENT_HEADER_BYTES as usize + 16 + 3; // inside the first payload... or the next header
    bytes[at] ^= 0xff;
    std::fs::write(&first, &bytes).unwrap();
    let e = SegmentDisk::open_with(dir.path(), SMALL).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
    let msg = e.to_string();
    assert!(
        msg.contains(&first.display().to_string()) && msg.contains("corrupt at byte"),
        "{msg}"
    );
}

#[test]
fn a_missing_middle_segment_is_refused() {
    let (rt, dir, disk) = small_disk();
    put(&disk, 1..=60, 1);
    drop(reopen(&rt, disk, dir.path()));
    let files = segment_files(dir.path());
    assert!(files.len() >= 3, "{files:?}");
    std::fs::remove_file(dir.path().join(&files[1])).unwrap();
    let e = SegmentDisk::open_with(dir.path(), SMALL).unwrap_err();
    assert!(e.to_string().contains("a segment is missing"), "{e}");
}

#[test]
fn a_missing_first_segment_is_refused_unless_it_was_purged() {
    let (rt, dir, disk) = small_disk();
    put(&disk, 1..=60, 1);
    let disk = reopen(&rt, disk, dir.path());
    let files = segment_files(dir.path());
    assert!(files.len() >= 3, "{files:?}");
    // Purged through the end of the first segment: its deletion is expected.
    let second_base: u64 = files[1].trim_end_matches(".log").parse().unwrap();
    disk.remove_through(second_base - 1).unwrap();
    drop(reopen(&rt, disk, dir.path()));
    assert_eq!(
        all(&SegmentDisk::open_with(dir.path(), SMALL).unwrap()),
        expected(second_base..=60, 1)
    );
    // The (now) first segment deleted by hand: refused, naming the one after it.
    let files = segment_files(dir.path());
    std::fs::remove_file(dir.path().join(&files[0])).unwrap();
    let e = SegmentDisk::open_with(dir.path(), SMALL).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains(&files[1])
            && msg.contains("the segment before it is missing")
            && msg.ends_with("restore this controller's raft/ from a backup taken while it was stopped (see the README)"),
        "{msg}"
    );
}

#[test]
fn meta_values_are_durable_after_flush() {
    let rt = rt();
    let dir = tempfile::tempdir().unwrap();
    let disk = SegmentDisk::open(dir.path()).unwrap();
    disk.put_meta("vote", b"v1").unwrap();
    rt.block_on(disk.flush()).unwrap();
    disk.put_meta("committed", b"c1").unwrap();
    assert_eq!(disk.get_meta("committed").unwrap(), Some(b"c1".to_vec()));
    drop(disk);
    // Not flushed: lost.
    let disk = SegmentDisk::open(dir.path()).unwrap();
    assert_eq!(disk.get_meta("vote").unwrap(), Some(b"v1".to_vec()));
    assert_eq!(disk.get_meta("committed").unwrap(), None);
    disk.put_meta("committed", b"c2").unwrap();
    disk.put_meta("vote", b"v2").unwrap();
    rt.block_on(disk.flush()).unwrap();
    drop(disk);
    let disk = SegmentDisk::open(dir.path()).unwrap();
    assert_eq!(disk.get_meta("vote").unwrap(), Some(b"v2".to_vec()));
    assert_eq!(disk.get_meta("committed").unwrap(), Some(b"c2".to_vec()));
    assert!(!dir.path().join("meta.tmp").exists());
}

#[test]
fn a_corrupt_meta_file_is_refused() {
    let rt = rt();
    let dir = tempfile::tempdir().unwrap();
    let disk = SegmentDisk::open(dir.path()).unwrap();
    disk.put_meta("vote", b"v1").unwrap();
    rt.block_on(disk.flush()).unwrap();
    drop(disk);
    let meta = dir.path().join("meta");
    let mut bytes = std::fs::read(&meta).unwrap();
    *bytes.last_mut().unwrap() ^= 1;
    std::fs::write(&meta, &bytes).unwrap();
    let e = SegmentDisk::open(dir.path()).unwrap_err();
    assert!(
        e.to_string()
            .contains("meta is corrupt: length or crc mismatch"),
        "{e}"
    );
}

#[test]
fn a_second_open_of_the_same_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let disk = SegmentDisk::open(dir.path()).unwrap();
    let e = SegmentDisk::open(dir.path()).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock);
    assert!(e.to_string().contains("locked by another process"), "{e}");
    drop(disk);
    SegmentDisk::open(dir.path()).unwrap();
}

#[test]
fn a_sled_database_of_an_earlier_build_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("conf"), b"segment_size: 524288").unwrap();
    std::fs::write(dir.path().join("db"), b"").unwrap();
    let e = SegmentDisk::open(dir.path()).unwrap_err();
    assert!(e.to_string().contains("holds a sled database"), "{e}");
}

/// One step of the model test.
#[derive(Debug, Clone)]
enum Op {
    /// Append `count` entries starting `offset` after the last one (1 = next; 0 or less
    /// cuts the log; more leaves a gap).
    Append {
        offset: i64,
        count: u64,
        salt: u8,
    },
    RemoveFrom {
        back: u64,
    },
    RemoveThrough {
        ahead: u64,
    },
    Flush,
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (-3i64..=3, 1u64..=12, any::<u8>()).prop_map(|(offset, count, salt)| Op::Append { offset, count, salt }),
        1 => (0u64..=8).prop_map(|back| Op::RemoveFrom { back }),
        1 => (0u64..=12).prop_map(|ahead| Op::RemoveThrough { ahead }),
        1 => Just(Op::Flush),
        1 => Just(Op::Reopen),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Any sequence of appends, cuts, purges, flushes and reopens reads back exactly what a
    /// plain ordered map of the live entries says.
    #[test]
    fn the_disk_behaves_like_an_ordered_map_of_live_entries(ops in proptest::collection::vec(op(), 1..40)) {
        let rt = rt();
        let dir = tempfile::tempdir().unwrap();
        let mut disk = SegmentDisk::open_with(dir.path(), SMALL).unwrap();
        let mut model: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
        let mut purged: Option<u64> = None;
        for op in ops {
            let last = model.last_key_value().map(|(&k, _)| k).or(purged).unwrap_or(0);
            match op {
                Op::Append { offset, count, salt } => {
                    let start = (last as i64 + offset).max(0) as u64;
                    let batch: Vec<(u64, Vec<u8>)> = (start..start + count).map(|i| (i, payload(i, salt))).collect();
                    disk.put_entries(batch.clone()).unwrap();
                    let live = |i: &u64| purged.is_none_or(|p| *i > p);
                    if let Some(&(first, _)) = batch.iter().find(|(i, _)| live(i)) {
                        model.split_off(&first);
                    }
                    model.extend(batch.into_iter().filter(|(i, _)| live(i)));
                }
                Op::RemoveFrom { back } => {
                    let from = last.saturating_sub(back);
                    disk.remove_from(from).unwrap();
                    model.split_off(&from);
                }
                Op::RemoveThrough { ahead } => {
                    let first = model.first_key_value().map_or(last, |(&k, _)| k);
                    let through = first + ahead;
                    disk.remove_through(through).unwrap();
                    if purged.is_none_or(|p| through > p) {
                        model = model.split_off(&(through + 1));
                        purged = Some(through);
                    }
                }
                Op::Flush => rt.block_on(disk.flush()).unwrap(),
                Op::Reopen => disk = reopen(&rt, disk, dir.path()),
            }
            let want: Vec<(u64, Vec<u8>)> = model.clone().into_iter().collect();
            prop_assert_eq!(all(&disk), want);
        }
        let disk = reopen(&rt, disk, dir.path());
        let want: Vec<(u64, Vec<u8>)> = model.into_iter().collect();
        prop_assert_eq!(all(&disk), want);
    }
}
