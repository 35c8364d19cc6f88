//! The record-batch parser: `keel_record::fuzz::record_batches`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| keel_record::fuzz::record_batches(data));
