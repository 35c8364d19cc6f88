//! The Raft log segment reader and recovery: `keel_metadata_log::fuzz::raft_segment`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let dir = tempfile::tempdir().expect("temp dir");
    keel_metadata_log::fuzz::raft_segment(dir.path(), data);
});
