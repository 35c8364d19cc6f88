//! The two fields every controller reply shares: the request-level error and the leader hint.

use keel_proto::common::Error;
use keel_proto::controller::*;

/// A controller reply that may say NOT_CONTROLLER and point at the active controller.
pub trait ControllerReply {
    /// The request-level error, if any.
    fn error(&self) -> Option<&Error>;
    /// The leader hint, if the controller sent one.
    fn leader(&self) -> Option<&ControllerLeader>;
    /// Whether a successful reply from a controller in contact with no active controller is
    /// refused (unless `allow_stale`): a read of state that may be out of date.
    fn refuse_when_stale(&self) -> bool;
}

macro_rules! controller_reply {
    ($refuse:expr; $($ty:ty),* $(,)?) => {$(
        impl ControllerReply for $ty {
            fn error(&self) -> Option<&Error> {
                self.error.as_ref()
            }
            fn leader(&self) -> Option<&ControllerLeader> {
                self.leader.as_ref()
            }
            fn refuse_when_stale(&self) -> bool {
                $refuse
            }
        }
    )*};
}

// Writes: a successful reply comes from the controller that committed it, whatever its hint
// says a moment later (refusing it would send the write again).
controller_reply!(
    false;
    CreateTopicsReply,
    DeleteTopicsReply,
    CreatePartitionsReply,
    AlterPartitionReply,
    ElectLeadersReply,
    AlterConfigsReply,
);

// Reads of the metadata image: out of date on a controller out of contact.
controller_reply!(true; DescribeConfigsReply, DescribeClusterReply);

// Quorum state is diagnostic: a leader without a quorum reports that itself (leader -1).
controller_reply!(false; DescribeQuorumReply);

impl ControllerReply for ReadMetadataLogReply {
    fn error(&self) -> Option<&Error> {
        self.error.as_ref()
    }
    fn leader(&self) -> Option<&ControllerLeader> {
        self.leader.as_ref()
    }
    /// Committed records are never wrong, only possibly not the newest: a `--follow` reader
    /// is told when the quorum has no leader instead.
    fn refuse_when_stale(&self) -> bool {
        false
    }
}
