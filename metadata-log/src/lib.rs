//! `keel-metadata-log`: the `__cluster_metadata` log (DESIGN §3).
//!
//! - [`acl`]: ACL bindings, filters and the authorizer (Kafka's StandardAuthorizer);
//! - [`authz`]: a node's request authorization (caller principal, ACL and node-identity checks);
//! - [`image`]: [`MetadataImage`], the immutable cluster state at one offset, and its parts;
//! - [`delta`]: [`MetadataDelta`], replay of records on an image, with epoch derivation;
//! - [`data_dir`]: the directory lock and the `meta.properties` syntax shared by controllers
//!   and brokers;
//! - [`fuzz`]: entry points of the fuzz targets and their proptest versions;
//! - [`limits`]: size bounds from the Raft log up to what the write path proposes;
//! - [`snapshot`]: the snapshot file format (image as records + header + CRC32C);
//! - [`raft_types`]: openraft's type configuration (entries carry record batches);
//! - [`store`]: openraft log storage (Keel's own segment files) and state-machine storage.
//!
//! Data flows one way: committed records -> `MetadataDelta::replay` -> `apply` -> a new
//! `MetadataImage`, on controllers (state machine) and brokers (metadata tailer) alike.

pub mod acl;
pub mod authz;
pub mod configs;
pub mod data_dir;
pub mod delta;
pub mod digest_memo;
pub mod fuzz;
pub mod image;
pub mod limits;
pub mod raft_types;
pub mod scram;
pub mod snapshot;
pub mod store;

pub use delta::{MetadataDelta, ReplayError};
pub use digest_memo::DigestMemo;
pub use image::{
    BrokerRegistration, ConfigResource, ImageDigest, MergeError, MetadataImage, NO_LEADER,
    PartitionRegistration, Provenance, RECORD_TYPE_NAMES, TopicImage, TopicsImage, record_topic_id,
    record_type_name,
};
pub use keel_proto::metadata as records;
