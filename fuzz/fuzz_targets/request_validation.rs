//! ControllerService request validation and decisions: `keel_controller::fuzz::request`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| keel_controller::fuzz::request(data));
