//! The metadata snapshot reader: `keel_metadata_log::fuzz::snapshot_bytes`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| keel_metadata_log::fuzz::snapshot_bytes(data));
