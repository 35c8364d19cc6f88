//! ISR state of a partition leader and its AlterPartition traffic (Kafka `Partition.scala`
//! `PartitionState` = `CommittedPartitionState` / `PendingExpandIsr` / `PendingShrinkIsr`,
//! KIP-497).
//!
//! The committed ISR is what the controller last committed (metadata or an AlterPartition
//! answer). At most one change is proposed at a time. The *maximal* ISR is what the HW is
//! computed over: an expansion counts as soon as it is proposed (optimistic: waiting for one
//! more replica can only hold the HW back, which is safe), a shrink only once committed
//! (pessimistic: the removed follower might still be in the ISR the controller knows, and
//! could be elected).

use std::fmt;

use keel_proto::ErrorCode;

use crate::log::TopicPartition;

/// One ISR member in an AlterPartition request (KIP-903: the leader sends the broker epoch
/// each follower fetched with, so the controller can reject a stale incarnation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IsrMember {
    /// Broker id.
    pub broker_id: i32,
    /// Broker epoch, or -1 if unknown.
    pub broker_epoch: i64,
}

/// The fields of an AlterPartition request for one partition (Kafka
/// `AlterPartitionRequestData`). The async layer adds the sender's id and broker epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlterPartitionRequest {
    /// Local sequence number; the response must name it ([`AlterPartitionResponse`]).
    pub request_id: u64,
    /// Partition.
    pub topic_partition: TopicPartition,
    /// The leader's current leader epoch.
    pub leader_epoch: i32,
    /// The partition epoch the change is based on (optimistic concurrency, KIP-497).
    pub partition_epoch: i32,
    /// Proposed ISR, in ISR order, with broker epochs.
    pub new_isr: Vec<IsrMember>,
}

impl AlterPartitionRequest {
    /// Broker ids of the proposed ISR.
    pub fn new_isr_ids(&self) -> Vec<i32> {
        self.new_isr.iter().map(|m| m.broker_id).collect()
    }
}

/// What came back for an AlterPartition request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AlterPartitionResponse {
    /// The controller committed a change: the partition's state after it.
    Committed {
        /// Leader epoch after the change.
        leader_epoch: i32,
        /// Partition epoch after the change.
        partition_epoch: i32,
        /// ISR after the change.
        isr: Vec<i32>,
    },
    /// The controller answered an error for the partition (or the whole request).
    Error(ErrorCode),
    /// No answer: connection failure or timeout at the transport level.
    Transport,
}

/// How the sending of the pending proposal stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendState {
    /// Sent; waiting for the answer.
    InFlight,
    /// A retriable failure: send it again at this time (ms).
    RetryAt(u64),
}

/// The kind of proposed change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IsrChange {
    /// Add this follower.
    Expand(i32),
    /// Remove these followers.
    Shrink(Vec<i32>),
}

/// ISR state of a leader.
///
/// Invariant: the leader is in every ISR listed here; `Pending::proposed` differs from
/// `committed` exactly by `change`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IsrState {
    /// No change pending.
    Committed {
        /// Committed ISR.
        isr: Vec<i32>,
        /// No new proposal before this time (ms): set after INELIGIBLE_REPLICA.
        no_proposal_before_ms: u64,
    },
    /// One AlterPartition outstanding.
    Pending {
        /// Committed ISR.
        committed: Vec<i32>,
        /// The change.
        change: IsrChange,
        /// The request (resent as is on retriable failures).
        request: AlterPartitionRequest,
        /// Sending state.
        send: SendState,
    },
    /// The controller rejected the proposal because our view is stale
    /// (INVALID_UPDATE_VERSION, FENCED_LEADER_EPOCH, ...): nothing is proposed until new
    /// metadata for the partition arrives (Kafka keeps the partition "in flight" then). The
    /// maximal ISR of the rejected proposal is kept: a superset only holds the HW back.
    AwaitingMetadata {
        /// Committed ISR.
        committed: Vec<i32>,
        /// Maximal ISR at the time of the rejection.
        maximal: Vec<i32>,
    },
}

impl IsrState {
    /// A committed ISR with nothing pending.
    pub fn committed(isr: Vec<i32>) -> Self {
        IsrState::Committed {
            isr,
            no_proposal_before_ms: 0,
        }
    }

    /// The committed ISR.
    pub fn isr(&self) -> &[i32] {
        match self {
            IsrState::Committed { isr, .. } => isr,
            IsrState::Pending { committed, .. } | IsrState::AwaitingMetadata { committed, .. } => {
                committed
            }
        }
    }

    /// The maximal ISR (KIP-497): committed ISR plus a pending expansion.
    pub fn maximal_isr(&self) -> Vec<i32> {
        match self {
            IsrState::Committed { isr, .. } => isr.clone(),
            IsrState::Pending {
                committed, change, ..
            } => {
                let mut m = committed.clone();
                if let IsrChange::Expand(id) = change
                    && !m.contains(id)
                {
                    m.push(*id);
                }
                m
            }
            IsrState::AwaitingMetadata { maximal, .. } => maximal.clone(),
        }
    }

    /// Whether a new change may be proposed at `now_ms`.
    pub fn can_propose(&self, now_ms: u64) -> bool {
        matches!(self, IsrState::Committed { no_proposal_before_ms, .. } if now_ms >= *no_proposal_before_ms)
    }

    /// The pending request, if any.
    pub fn pending_request(&self) -> Option<&AlterPartitionRequest> {
        match self {
            IsrState::Pending { request, .. } => Some(request),
            _ => None,
        }
    }
}

/// What an ISR event was about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IsrEventKind {
    /// A shrink was proposed.
    Shrinking,
    /// An expansion was proposed.
    Expanding,
    /// The controller committed a new ISR.
    Updated,
    /// The controller rejected the proposal.
    Rejected,
}

/// A structured ISR log event; `Display` gives the line the async layer logs
/// (`Shrinking ISR for partition T-P from [1, 2, 3] to [1, 2]: <reason>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IsrEvent {
    /// Kind.
    pub kind: IsrEventKind,
    /// Partition.
    pub topic_partition: TopicPartition,
    /// ISR before.
    pub from: Vec<i32>,
    /// ISR after (proposed, committed or kept).
    pub to: Vec<i32>,
    /// Why (out-of-sync followers with their LEO and lag, the caught-up follower, the
    /// controller's error, ...).
    pub reason: String,
}

impl fmt::Display for IsrEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verb = match self.kind {
            IsrEventKind::Shrinking => "Shrinking ISR",
            IsrEventKind::Expanding => "Expanding ISR",
            IsrEventKind::Updated => "ISR updated",
            IsrEventKind::Rejected => "ISR change rejected",
        };
        write!(
            f,
            "{verb} for partition {}-{} from {:?} to {:?}: {}",
            self.topic_partition.topic,
            self.topic_partition.partition,
            self.from,
            self.to,
            self.reason
        )
    }
}

/// How the leader reacts to an AlterPartition error (Kafka
/// `Partition.handleAlterPartitionError` and `AlterPartitionManager`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorReaction {
    /// Send the same request again after the backoff (NOT_CONTROLLER, timeouts, transport).
    Retry,
    /// The controller did not apply it and says why about a replica: back to the committed
    /// state, propose again after the backoff (INELIGIBLE_REPLICA).
    Revert,
    /// Our view is stale: wait for metadata (INVALID_UPDATE_VERSION, FENCED_LEADER_EPOCH,
    /// UNKNOWN_TOPIC_OR_PARTITION, STALE_BROKER_EPOCH, INVALID_REQUEST and anything else).
    AwaitMetadata,
}

/// Classifies an AlterPartition error.
pub fn classify_alter_partition_error(error: ErrorCode) -> ErrorReaction {
    match error {
        ErrorCode::NotController
        | ErrorCode::RequestTimedOut
        | ErrorCode::NetworkException
        | ErrorCode::UnknownServerError => ErrorReaction::Retry,
        ErrorCode::IneligibleReplica => ErrorReaction::Revert,
        _ => ErrorReaction::AwaitMetadata,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req() -> AlterPartitionRequest {
        AlterPartitionRequest {
            request_id: 1,
            topic_partition: TopicPartition::new("t", 0),
            leader_epoch: 1,
            partition_epoch: 1,
            new_isr: vec![],
        }
    }

    #[test]
    fn maximal_isr_is_optimistic_for_expand_pessimistic_for_shrink() {
        let expand = IsrState::Pending {
            committed: vec![1, 2],
            change: IsrChange::Expand(3),
            request: req(),
            send: SendState::InFlight,
        };
        assert_eq!(expand.isr(), &[1, 2]);
        assert_eq!(expand.maximal_isr(), vec![1, 2, 3]);
        let shrink = IsrState::Pending {
            committed: vec![1, 2, 3],
            change: IsrChange::Shrink(vec![3]),
            request: req(),
            send: SendState::InFlight,
        };
        assert_eq!(shrink.maximal_isr(), vec![1, 2, 3]);
        assert!(!shrink.can_propose(0));
        assert!(IsrState::committed(vec![1]).can_propose(0));
    }

    #[test]
    fn error_classification_table() {
        let cases = [
            (ErrorCode::NotController, ErrorReaction::Retry),
            (ErrorCode::RequestTimedOut, ErrorReaction::Retry),
            (ErrorCode::IneligibleReplica, ErrorReaction::Revert),
            (
                ErrorCode::InvalidUpdateVersion,
                ErrorReaction::AwaitMetadata,
            ),
            (ErrorCode::FencedLeaderEpoch, ErrorReaction::AwaitMetadata),
            (
                ErrorCode::UnknownTopicOrPartition,
                ErrorReaction::AwaitMetadata,
            ),
            (ErrorCode::StaleBrokerEpoch, ErrorReaction::AwaitMetadata),
        ];
        for (e, want) in cases {
            assert_eq!(classify_alter_partition_error(e), want, "{e}");
        }
    }

    #[test]
    fn event_line() {
        let e = IsrEvent {
            kind: IsrEventKind::Shrinking,
            topic_partition: TopicPartition::new("events", 0),
            from: vec![1, 2],
            to: vec![1],
            reason: "out of sync: broker 2".into(),
        };
        assert_eq!(
            e.to_string(),
            "Shrinking ISR for partition events-0 from [1, 2] to [1]: out of sync: broker 2"
        );
    }
}
