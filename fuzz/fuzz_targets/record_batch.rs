//! The record-batch parser: `keel_broker::log::fuzz::record_batches`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| keel_broker::log::fuzz::record_batches(data));
