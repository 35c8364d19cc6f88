//! Consumer groups (issue #22; DESIGN §5): Kafka's classic group protocol with committed
//! offsets kept in the internal compacted topic `__consumer_offsets`.
//!
//! The coordinator of a group is the leader of `__consumer_offsets` partition
//! [`records::partition_for`]`(group)`; every broker leading such partitions coordinates
//! their groups. Requests flow: Kafka listener (decode, versions) -> [`GroupCoordinator`]
//! (ownership, bounds, waiters, writes) -> [`state::Group`] (the pure protocol rules) ->
//! acks=all appends of [`records`] through the replica manager. Loading on leadership and
//! dropping on its loss are in [`coordinator`].
//!
//! What is Kafka's and what is not yet: JoinGroup/SyncGroup/Heartbeat/LeaveGroup with
//! generations, rebalance and session timeouts, KIP-394 member ids, KIP-345 static members;
//! OffsetCommit/OffsetFetch; DescribeGroups/ListGroups/DeleteGroups; offset expiry of empty
//! groups (`offsets.retention.minutes`, KIP-211); all of them on both listeners (Kafka's
//! wire protocol in `crate::kafka::groups`, Keel's gRPC in [`admin`] and [`member`]). Not
//! yet: transactional offset commits, the KIP-848 consumer protocol.

pub mod admin;
pub mod coordinator;
pub mod lag;
pub mod member;
pub mod records;
pub mod state;

pub use coordinator::{CommitEntry, CoordinatorConfig, GroupCoordinator};
