//! The two fields every controller reply shares: the request-level error and the leader hint.

use keel_proto::common::Error;
use keel_proto::controller::*;

/// A controller reply that may say NOT_CONTROLLER and point at the active controller.
pub trait ControllerReply {
    /// The request-level error, if any.
    fn error(&self) -> Option<&Error>;
    /// The leader hint, if the controller sent one.
    fn leader(&self) -> Option<&ControllerLeader>;
}

macro_rules! controller_reply {
    ($($ty:ty),* $(,)?) => {$(
        impl ControllerReply for $ty {
            fn error(&self) -> Option<&Error> {
                self.error.as_ref()
            }
            fn leader(&self) -> Option<&ControllerLeader> {
                self.leader.as_ref()
            }
        }
    )*};
}

controller_reply!(
    CreateTopicsReply,
    DeleteTopicsReply,
    CreatePartitionsReply,
    AlterPartitionReply,
    ElectLeadersReply,
    AlterConfigsReply,
    DescribeConfigsReply,
    DescribeClusterReply,
    DescribeQuorumReply,
);

impl ControllerReply for ReadMetadataLogReply {
    fn error(&self) -> Option<&Error> {
        self.error.as_ref()
    }
    fn leader(&self) -> Option<&ControllerLeader> {
        // Served by any controller; the reply carries no hint.
        None
    }
}
