//! The Kafka wire-protocol listener (#21): Kafka clients (librdkafka and what is built on
//! it, kcat, the Python and Java clients) produce, fetch and read metadata from a broker
//! through its `PLAINTEXT` listener, over the same replica manager and metadata image as
//! Keel's own gRPC `BrokerService`. Replication between brokers and the controller API stay
//! gRPC.
//!
//! What this module owns, in the order a request goes through it:
//! 1. [`frame`]: the 4-byte big-endian size prefix, bounded by [`frame::MAX_REQUEST_BYTES`]
//!    (Kafka's `socket.request.max.bytes`, 100 MiB); anything else closes the connection.
//! 2. [`versions`]: the APIs and version ranges this listener advertises in ApiVersions and
//!    serves: exactly these, each version decodable by `kafka-protocol` and answered.
//! 3. [`guard`]: a walk of the request body against the Kafka schema, before the decoder
//!    allocates anything from a count on the wire.
//! 4. Decoding with `kafka-protocol`; [`convert`] turns the request into Keel's own request
//!    type, which goes through the same bounds check ([`crate::bounds`]) and the same replica
//!    manager call as over gRPC, and turns the reply back. Error codes are Kafka's on both
//!    sides ([`keel_proto::ErrorCode`] uses Kafka's numbers), so they pass through unchanged.
//!    The admin APIs (CreateTopics, DeleteTopics, DescribeConfigs, DescribeCluster,
//!    CreatePartitions, IncrementalAlterConfigs, AlterConfigs, ElectLeaders,
//!    Alter/ListPartitionReassignments, Describe/Create/DeleteAcls,
//!    Describe/AlterUserScramCredentials) are forwarded to the active controller instead
//!    ([`admin`], [`convert::admin`]); the controller runs the same checks as for Keel's own
//!    gRPC clients. The group APIs go to the group coordinator ([`groups`]) and
//!    DeleteRecords to the replica manager as the partition's leader ([`delete_records`]).
//! 5. [`connection`]: one task per connection; it reads one request, answers it, then reads
//!    the next, so responses are in request order (Kafka mutes a channel while a request is
//!    in flight, `SocketServer`'s `Processor`). A Produce with `acks=0` gets no response.
//!
//! Invariants: nothing reaches the replica manager before the frame bound, the version check,
//! the guard, the decoder and the bounds check all passed; every request but an `acks=0`
//! Produce gets exactly one response, in order; a request this listener cannot parse closes
//! the connection (what Kafka's `SocketServer` does with an `InvalidRequestException`) and
//! changes nothing.

pub mod admin;
pub mod connection;
pub mod context;
pub mod convert;
pub mod delete_records;
pub mod forwarder;
pub mod frame;
pub mod groups;
pub mod guard;
pub mod sasl;
pub mod versions;

pub use connection::serve;
pub use context::KafkaContext;
