//! The follower side of replication: what a follower sends and how it handles the leader's
//! answer for one partition (DESIGN §5 "Becoming follower"; Kafka `AbstractFetcherThread`,
//! `ReplicaFetcherThread`; KIP-101, KIP-279, KAFKA-14704).
//!
//! Order of operations for one partition of a fetch response
//! ([`plan_follower_response`] decides, the async layer executes):
//! 1. error: back off (or wait for metadata on epoch errors); nothing changes;
//! 2. `diverging_epoch`: truncate the log to the point computed from the follower's own
//!    epoch cache — never to the local HW — then call
//!    [`PartitionState::on_follower_truncated`]; do NOT adopt the response's HW (KAFKA-14704:
//!    adopting it before truncating could expose records about to be removed); fetch again;
//! 3. out of range below the leader's log start: restart the log empty at the leader's log
//!    start; above the leader's LEO: truncate to the leader's LEO;
//! 4. records: append them, then [`PartitionState::on_follower_appended`] with the leader's
//!    HW: HW = min(leader HW, own LEO); then move the log start up to the leader's, within
//!    that HW ([`follower_log_start`]).

use keel_proto::ErrorCode;

use super::high_watermark::follower_high_watermark;
use super::leader_fetch::FollowerFetchRequest;
use super::partition::{PartitionState, Role};

/// The leader's answer for one partition, as the follower's fetcher decoded it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FollowerFetchResponse {
    /// Records (possibly none) to append.
    Records {
        /// The leader's HW.
        high_watermark: i64,
        /// The leader's log start offset.
        leader_log_start_offset: i64,
    },
    /// The follower's log diverges: `(epoch, end_offset)` as the leader computed.
    Diverging {
        /// Epoch.
        epoch: i32,
        /// End offset (exclusive) of that epoch on the leader.
        end_offset: i64,
    },
    /// OFFSET_OUT_OF_RANGE, with the leader's log bounds.
    OutOfRange {
        /// Leader log start offset.
        leader_log_start_offset: i64,
        /// Leader LEO.
        leader_log_end_offset: i64,
    },
    /// Any other error code.
    Error(ErrorCode),
}

/// What the follower does with a response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FollowerAction {
    /// Append the records, then [`PartitionState::on_follower_appended`] with this HW.
    AppendThenAdoptHw {
        /// Leader's HW.
        leader_high_watermark: i64,
        /// Leader's log start offset: the follower's log start moves up to it, within its
        /// own HW ([`crate::log::Log::increment_log_start_offset`]; Kafka
        /// `ReplicaFetcherThread.processPartitionData`, KIP-107).
        leader_log_start_offset: i64,
    },
    /// Truncate the log to `offset` ([`crate::log::Log::truncate_to`]), then
    /// [`PartitionState::on_follower_truncated`], then fetch again. `complete = false` means
    /// the point is intermediate: the next fetch carries an older last fetched epoch and the
    /// leader answers again.
    Truncate {
        /// Offset to truncate to (new LEO <= it).
        offset: i64,
        /// Whether this is the final divergence point.
        complete: bool,
    },
    /// Empty the log and restart it at `offset` ([`crate::log::Log::truncate_fully_and_start_at`]).
    TruncateFullyAndStartAt {
        /// The leader's log start offset.
        offset: i64,
    },
    /// Back off and fetch again later (transient errors, or a divergence answer with no
    /// usable epoch: the leader has not recorded its epoch yet).
    Backoff(ErrorCode),
    /// Stop fetching this partition until newer metadata arrives (the leader's epoch differs
    /// from ours, or it is not the leader).
    AwaitMetadata(ErrorCode),
}

/// Decides what to do with `response` given the follower's LEO and its own epoch cache
/// (`local_end_offset_for(epoch)` = [`crate::log::Log::end_offset_for_epoch`]).
///
/// Divergence point (Kafka `AbstractFetcherThread.getOffsetTruncationState`): with the
/// leader's `(E, end)` and the follower's answer `(e, local_end)` for `E`:
/// - `e == E`: truncate to `min(end, local_end, LEO)` — final;
/// - `e` undefined (the follower has no epoch <= `E`): truncate to `min(end, LEO)` — final;
/// - `e < E` (the follower never saw `E`): truncate to `min(local_end, LEO)` — intermediate.
pub fn plan_follower_response(
    response: &FollowerFetchResponse,
    local_log_end_offset: i64,
    local_end_offset_for: impl FnOnce(i32) -> (i32, i64),
) -> FollowerAction {
    match *response {
        FollowerFetchResponse::Records {
            high_watermark,
            leader_log_start_offset,
        } => FollowerAction::AppendThenAdoptHw {
            leader_high_watermark: high_watermark,
            leader_log_start_offset,
        },
        FollowerFetchResponse::Diverging { epoch, end_offset } => {
            if epoch < 0 || end_offset < 0 {
                return FollowerAction::Backoff(ErrorCode::None);
            }
            let (local_epoch, local_end) = local_end_offset_for(epoch);
            if local_epoch < 0 || local_end < 0 {
                FollowerAction::Truncate {
                    offset: end_offset.min(local_log_end_offset),
                    complete: true,
                }
            } else if local_epoch == epoch {
                FollowerAction::Truncate {
                    offset: end_offset.min(local_end).min(local_log_end_offset),
                    complete: true,
                }
            } else {
                FollowerAction::Truncate {
                    offset: local_end.min(local_log_end_offset),
                    complete: false,
                }
            }
        }
        FollowerFetchResponse::OutOfRange {
            leader_log_start_offset,
            leader_log_end_offset,
        } => {
            if local_log_end_offset < leader_log_start_offset {
                FollowerAction::TruncateFullyAndStartAt {
                    offset: leader_log_start_offset,
                }
            } else if local_log_end_offset > leader_log_end_offset {
                FollowerAction::Truncate {
                    offset: leader_log_end_offset,
                    complete: true,
                }
            } else {
                FollowerAction::Backoff(ErrorCode::OffsetOutOfRange)
            }
        }
        FollowerFetchResponse::Error(code) => match code {
            ErrorCode::FencedLeaderEpoch
            | ErrorCode::UnknownLeaderEpoch
            | ErrorCode::NotLeaderOrFollower
            | ErrorCode::UnknownTopicOrPartition => FollowerAction::AwaitMetadata(code),
            _ => FollowerAction::Backoff(code),
        },
    }
}

/// Where a follower's log start moves after it appended a response and adopted its HW
/// `follower_hw`: up to the leader's log start, never past its own HW (Kafka refuses a log
/// start above the HW; after an append the follower's HW is at or above the leader's start,
/// as the leader served its fetch offset). `None` when it stays (the leader's start is not
/// above `current`).
pub fn follower_log_start(
    current: i64,
    leader_log_start_offset: i64,
    follower_hw: i64,
) -> Option<i64> {
    let target = leader_log_start_offset.min(follower_hw);
    (target > current).then_some(target)
}

impl PartitionState {
    /// The partition fields of the next fetch request to the leader, or `None` when this
    /// broker does not follow a live leader. `last_fetched_epoch` is the epoch of the last
    /// batch in the local log ([`crate::log::Log::latest_epoch`]).
    pub fn follower_fetch_request(
        &self,
        last_fetched_epoch: Option<i32>,
    ) -> Option<(i32, FollowerFetchRequest)> {
        let Role::Follower(f) = &self.role else {
            return None;
        };
        if f.leader_id < 0 {
            return None;
        }
        Some((
            f.leader_id,
            FollowerFetchRequest {
                replica_id: self.local_broker_id,
                broker_epoch: Some(self.local_broker_epoch),
                fetch_offset: self.log_end_offset,
                last_fetched_epoch,
                current_leader_epoch: Some(f.leader_epoch),
                log_start_offset: Some(self.log_start_offset),
            },
        ))
    }

    /// The follower's log was truncated (divergence, out of range) to `log_end_offset`, its
    /// start now `log_start_offset`: the HW is clamped into the new log; it is not raised.
    pub fn on_follower_truncated(&mut self, log_start_offset: i64, log_end_offset: i64) {
        self.log_end_offset = log_end_offset.max(0);
        self.log_start_offset = log_start_offset.clamp(0, self.log_end_offset);
        self.high_watermark = self
            .high_watermark
            .min(self.log_end_offset)
            .max(self.log_start_offset);
        self.debug_check();
    }

    /// The follower appended the response's records (its LEO is now `log_end_offset`) and
    /// adopts the leader's HW: HW = min(leader HW, own LEO), at least its log start. Returns
    /// the new HW. A no-op on a leader (defensive: a late response after a role change).
    pub fn on_follower_appended(&mut self, log_end_offset: i64, leader_high_watermark: i64) -> i64 {
        if matches!(self.role, Role::Leader(_)) {
            return self.high_watermark;
        }
        self.log_end_offset = log_end_offset.max(self.log_start_offset);
        self.high_watermark = follower_high_watermark(
            leader_high_watermark,
            self.log_end_offset,
            self.log_start_offset,
        );
        self.debug_check();
        self.high_watermark
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_follower_takes_the_leaders_log_start_within_its_hw() {
        // Up to the leader's start.
        assert_eq!(follower_log_start(0, 40, 100), Some(40));
        // Never past its own HW.
        assert_eq!(follower_log_start(0, 40, 25), Some(25));
        // Never back, and nothing when already there.
        assert_eq!(follower_log_start(50, 40, 100), None);
        assert_eq!(follower_log_start(40, 40, 100), None);
    }

    #[test]
    fn divergence_truncation_table() {
        // (leader answer, local LEO, local answer for that epoch) -> action
        let t = |offset, complete| FollowerAction::Truncate { offset, complete };
        let cases = [
            (
                (3, 10),
                12,
                (3, 12),
                t(10, true),
                "same epoch: leader's end",
            ),
            (
                (3, 10),
                12,
                (3, 8),
                t(8, true),
                "same epoch: our end earlier",
            ),
            (
                (3, 10),
                12,
                (2, 7),
                t(7, false),
                "we never saw epoch 3: intermediate",
            ),
            ((3, 10), 12, (-1, -1), t(10, true), "no local epoch <= 3"),
            ((3, 20), 12, (3, 12), t(12, true), "never above own LEO"),
        ];
        for ((e, end), leo, local, want, why) in cases {
            let got = plan_follower_response(
                &FollowerFetchResponse::Diverging {
                    epoch: e,
                    end_offset: end,
                },
                leo,
                |_| local,
            );
            assert_eq!(got, want, "{why}");
        }
        let undefined = plan_follower_response(
            &FollowerFetchResponse::Diverging {
                epoch: -1,
                end_offset: -1,
            },
            12,
            |_| unreachable!(),
        );
        assert_eq!(
            undefined,
            FollowerAction::Backoff(ErrorCode::None),
            "never to the HW"
        );
    }

    #[test]
    fn out_of_range_and_errors() {
        let oor = |start, end| FollowerFetchResponse::OutOfRange {
            leader_log_start_offset: start,
            leader_log_end_offset: end,
        };
        assert_eq!(
            plan_follower_response(&oor(50, 60), 10, |_| (0, 0)),
            FollowerAction::TruncateFullyAndStartAt { offset: 50 }
        );
        assert_eq!(
            plan_follower_response(&oor(0, 5), 10, |_| (0, 0)),
            FollowerAction::Truncate {
                offset: 5,
                complete: true
            }
        );
        assert_eq!(
            plan_follower_response(
                &FollowerFetchResponse::Error(ErrorCode::FencedLeaderEpoch),
                10,
                |_| (0, 0)
            ),
            FollowerAction::AwaitMetadata(ErrorCode::FencedLeaderEpoch)
        );
        assert_eq!(
            plan_follower_response(
                &FollowerFetchResponse::Error(ErrorCode::KafkaStorageError),
                10,
                |_| (0, 0)
            ),
            FollowerAction::Backoff(ErrorCode::KafkaStorageError)
        );
    }
}
