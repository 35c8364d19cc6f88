//! Keel's system tests: multi-process cluster harness, fault injection and the durability
//! checker of DESIGN §7. The harness arrives with the controller and broker processes; for now
//! this crate only proves that every library crate links together.

pub use keel_metadata_log as metadata_log;
pub use keel_proto as proto;
