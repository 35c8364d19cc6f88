//! The partition segment recovery scan: `keel_broker::log::fuzz::partition_segment`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let dir = tempfile::tempdir().expect("temp dir");
    keel_broker::log::fuzz::partition_segment(dir.path(), data);
});
