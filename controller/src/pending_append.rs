//! An AppendEntries that outlives openraft's deadline for it.
//!
//! openraft gives every AppendEntries one heartbeat interval (100 ms by default) and drops the
//! request future when that passes (`ReplicationCore::send_log_entries`). Dropping the future
//! used to cancel the RPC: a follower that needed 150 ms to receive, fsync and answer 500 KB of
//! entries had done the work for nothing, and the leader sent the same entries again, into the
//! same deadline. After a broker failure at 100,000 partitions (100,001 fence records, ~3 MB)
//! the followers of a busy 2-core machine missed deadline after deadline and the fence took
//! 1.3-2 s to commit.
//!
//! So the client runs each AppendEntries in its own task ([`PendingAppend`], bounded by
//! [`APPEND_RPC_DEADLINE`]) and keeps it when openraft gives up waiting. openraft's next request
//! to that peer, sent after the timeout from the same match point, takes its answer from the
//! pending one instead of sending the entries again ([`reuse`], [`answer_for`]): one more
//! heartbeat interval of waiting rather than one more transfer. The Raft rules this relies on:
//! - within one leadership (same vote) the leader never rewrites an entry, so entries with the
//!   same log ids are the same entries, and a follower that accepted `(prev, last]` holds every
//!   shorter range `(prev, x]`, `x <= last`;
//! - a follower's answer about the entry `prev` (Conflict) or about the vote (HigherVote) does
//!   not depend on how many entries followed `prev`;
//! - openraft accepts `PartialSuccess(m)` for any `m` in `[prev, last]` of the range it sent
//!   and sends the rest next.
//!
//! A request the pending one cannot answer (another leadership, another match point, or a
//! pending heartbeat with nothing to contribute) aborts it: openraft has moved on from it.
//!
//! Pure except [`PendingAppend`], which only owns the task.

use std::time::Duration;

use openraft::LogId;
use openraft::Vote;
use openraft::raft::{AppendEntriesRequest, AppendEntriesResponse};

use keel_metadata_log::raft_types::TypeConfig;

/// Longest one AppendEntries RPC may take, reply included, before it counts as unanswered.
/// The same bound as a KRaft follower's fetch (Kafka `controller.quorum.fetch.timeout.ms`,
/// 2,000 ms by default). Longer than openraft's per-request deadline on purpose: openraft
/// stops waiting at one heartbeat interval, the RPC carries on and answers the next request
/// ([`reuse`]). A peer that does not answer at all is given up on after this.
pub const APPEND_RPC_DEADLINE: Duration = Duration::from_secs(2);

/// Which log range one AppendEntries covers, under which leadership.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppendRange {
    /// The sender's vote (leader id and term).
    pub vote: Vote<u64>,
    /// The entry the request's entries follow (`None`: they start the log).
    pub prev: Option<LogId<u64>>,
    /// The last entry sent, or `prev` for a heartbeat (no entries).
    pub last: Option<LogId<u64>>,
}

impl AppendRange {
    /// The range `rpc` covers.
    pub fn of(rpc: &AppendEntriesRequest<TypeConfig>) -> Self {
        Self {
            vote: rpc.vote,
            prev: rpc.prev_log_id,
            last: rpc.entries.last().map(|e| e.log_id).or(rpc.prev_log_id),
        }
    }
}

/// How a new request relates to the one still pending to the same peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reuse {
    /// The pending request covers the new one: its reply answers it whole.
    Answers,
    /// The pending request covers a non-empty prefix of the new one's entries: its success
    /// answers that prefix (`PartialSuccess`), and openraft sends the rest next.
    AnswersPart,
    /// Nothing in common (another leadership or match point), or the pending request adds no
    /// entry the new one carries (a heartbeat): abort it and send the new one.
    Unrelated,
}

/// How `req` relates to `pending` (see [`Reuse`]).
pub fn reuse(pending: &AppendRange, req: &AppendRange) -> Reuse {
    if pending.vote != req.vote || pending.prev != req.prev {
        Reuse::Unrelated
    } else if pending.last >= req.last {
        Reuse::Answers
    } else if pending.last > req.prev {
        Reuse::AnswersPart
    } else {
        Reuse::Unrelated
    }
}

/// The reply to `req` given the reply of `pending`, a request [`reuse`] did not call
/// [`Reuse::Unrelated`]. Success of a longer range is success of the shorter one; success of
/// a shorter range is partial success of the longer one up to `pending.last`; a partial
/// success is capped at `req.last`; a conflict (about `prev`) and a higher vote answer any
/// request from the same match point and leadership.
pub fn answer_for(
    reply: AppendEntriesResponse<u64>,
    pending: &AppendRange,
    req: &AppendRange,
) -> AppendEntriesResponse<u64> {
    debug_assert_ne!(reuse(pending, req), Reuse::Unrelated, "{pending:?} {req:?}");
    match reply {
        AppendEntriesResponse::Success if pending.last >= req.last => {
            AppendEntriesResponse::Success
        }
        AppendEntriesResponse::Success => AppendEntriesResponse::PartialSuccess(pending.last),
        AppendEntriesResponse::PartialSuccess(m) => {
            AppendEntriesResponse::PartialSuccess(m.min(req.last))
        }
        other => other,
    }
}

/// One AppendEntries RPC running in its own task, with the range it covers. Dropping it aborts
/// the task (openraft moved on, or the replication stream to the peer ended).
///
/// Invariant: `task` is polled to completion at most once; the owner takes the value out of
/// its `Option` slot before awaiting it a second time (a `JoinHandle` panics when polled again
/// after it returned).
#[derive(Debug)]
pub struct PendingAppend<T> {
    /// The range the RPC carries.
    pub range: AppendRange,
    /// The RPC, answering with the peer's reply.
    pub task: tokio::task::JoinHandle<T>,
}

impl<T> Drop for PendingAppend<T> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::{AppendRange, Reuse, answer_for, reuse};
    use openraft::raft::AppendEntriesResponse;
    use openraft::{CommittedLeaderId, LogId, Vote};

    fn id(index: u64) -> Option<LogId<u64>> {
        Some(LogId::new(CommittedLeaderId::new(3, 1), index))
    }

    fn range(term: u64, prev: Option<u64>, last: Option<u64>) -> AppendRange {
        let mut vote = Vote::new(term, 1);
        vote.commit();
        AppendRange {
            vote,
            prev: prev.and_then(id),
            last: last.and_then(id),
        }
    }

    #[test]
    fn a_request_from_the_same_match_point_takes_the_pending_answer() {
        let pending = range(3, Some(10), Some(25));
        // The retry after openraft's timeout, and a shorter one (entries hint).
        assert_eq!(
            reuse(&pending, &range(3, Some(10), Some(25))),
            Reuse::Answers
        );
        assert_eq!(
            reuse(&pending, &range(3, Some(10), Some(15))),
            Reuse::Answers
        );
        // A heartbeat from the same match point.
        assert_eq!(
            reuse(&pending, &range(3, Some(10), Some(10))),
            Reuse::Answers
        );
        // More entries than were pending: the prefix is answered.
        assert_eq!(
            reuse(&pending, &range(3, Some(10), Some(40))),
            Reuse::AnswersPart
        );
        // Starting from an empty log.
        assert_eq!(
            reuse(&range(3, None, Some(5)), &range(3, None, Some(5))),
            Reuse::Answers
        );
    }

    #[test]
    fn another_leadership_or_match_point_or_a_pending_heartbeat_is_unrelated() {
        let pending = range(3, Some(10), Some(25));
        assert_eq!(
            reuse(&pending, &range(4, Some(10), Some(25))),
            Reuse::Unrelated
        );
        // openraft moved the match point back (a conflict) or forward (a success it saw).
        assert_eq!(
            reuse(&pending, &range(3, Some(5), Some(25))),
            Reuse::Unrelated
        );
        assert_eq!(
            reuse(&pending, &range(3, Some(25), Some(30))),
            Reuse::Unrelated
        );
        // A pending heartbeat carries none of the new request's entries.
        let heartbeat = range(3, Some(10), Some(10));
        assert_eq!(
            reuse(&heartbeat, &range(3, Some(10), Some(20))),
            Reuse::Unrelated
        );
        let mut uncommitted = range(3, Some(10), Some(25));
        uncommitted.vote = Vote::new(3, 1);
        assert_eq!(reuse(&uncommitted, &pending), Reuse::Unrelated);
    }

    #[test]
    fn replies_are_mapped_onto_the_new_range() {
        let pending = range(3, Some(10), Some(25));
        let shorter = range(3, Some(10), Some(15));
        let longer = range(3, Some(10), Some(40));
        let ok = || AppendEntriesResponse::<u64>::Success;
        assert_eq!(
            answer_for(ok(), &pending, &shorter),
            AppendEntriesResponse::Success
        );
        assert_eq!(
            answer_for(ok(), &pending, &pending),
            AppendEntriesResponse::Success
        );
        assert_eq!(
            answer_for(ok(), &pending, &longer),
            AppendEntriesResponse::PartialSuccess(id(25))
        );
        // A partial success never reports beyond what the new request sent.
        let partial = || AppendEntriesResponse::PartialSuccess(id(20));
        assert_eq!(
            answer_for(partial(), &pending, &shorter),
            AppendEntriesResponse::PartialSuccess(id(15))
        );
        assert_eq!(answer_for(partial(), &pending, &longer), partial());
        assert_eq!(
            answer_for(AppendEntriesResponse::Conflict, &pending, &shorter),
            AppendEntriesResponse::Conflict
        );
        let higher = || AppendEntriesResponse::HigherVote(Vote::new(4, 2));
        assert_eq!(answer_for(higher(), &pending, &longer), higher());
    }

    #[tokio::test]
    async fn dropping_a_pending_append_aborts_its_task() {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let _keep = tx;
            std::future::pending::<()>().await
        });
        drop(super::PendingAppend {
            range: range(3, Some(1), Some(2)),
            task,
        });
        // The task's captured sender is dropped when the abort completes.
        assert!(rx.await.is_err(), "the task was aborted");
    }
}
