//! The fields every controller reply shares: the request-level error and the leader hint,
//! and for reads where the answer came from ([`ReadSource`]).

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
    /// Where a read's answer came from; `None` for writes (and from older controllers).
    fn source(&self) -> Option<&ReadSource> {
        None
    }
}

/// Whether a reply came from a controller in contact with no active controller: its
/// [`ReadSource`] says so, or (from a controller that sends none) its leader hint names no
/// leader.
pub fn out_of_contact(source: Option<&ReadSource>, leader: Option<&ControllerLeader>) -> bool {
    match source.map(|s| s.role()) {
        Some(ReadSourceRole::Unspecified) | None => leader.is_some_and(|l| l.leader_id < 0),
        Some(role) => role == ReadSourceRole::OutOfContact,
    }
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
    (read $refuse:expr; $($ty:ty),* $(,)?) => {$(
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
            fn source(&self) -> Option<&ReadSource> {
                self.source.as_ref()
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
    AlterPartitionReassignmentsReply,
    AlterConfigsReply,
    CreateAclsReply,
    DeleteAclsReply,
    AlterUserScramCredentialsReply,
    AddRaftVoterReply,
    RemoveRaftVoterReply,
    UnregisterBrokerReply,
);

// Reads of the metadata image: out of date on a controller out of contact.
controller_reply!(
    read true;
    DescribeConfigsReply,
    DescribeClusterReply,
    DescribeAclsReply,
    DescribeUserScramCredentialsReply,
    ListPartitionReassignmentsReply
);

// Quorum state is diagnostic: a leader without a quorum reports that itself (leader -1).
// Committed records are never wrong, only possibly not the newest: a `metadata log --follow`
// reader is told when the quorum has no leader instead.
controller_reply!(read false; DescribeQuorumReply, ReadMetadataLogReply);

// The authentication exchange is served by any controller from its image; it carries no
// leader hint.
impl ControllerReply for ScramAuthenticateReply {
    fn error(&self) -> Option<&Error> {
        self.error.as_ref()
    }
    fn leader(&self) -> Option<&ControllerLeader> {
        None
    }
    fn refuse_when_stale(&self) -> bool {
        false
    }
}
