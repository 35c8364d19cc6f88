//! Leader-epoch fencing of requests (Kafka `Partition.checkCurrentLeaderEpoch`, KIP-320).
//!
//! Every request that depends on who leads the partition (produce, consumer and follower
//! fetch, ListOffsets) may carry the leader epoch its sender believes in. Comparing epochs,
//! not hoping the old leader stopped, is what turns a stale sender into a detectable error
//! (seed 000: "Leader epoch 把旧权威变成可检测错误").

use keel_proto::ErrorCode;

/// Checks a request's `current_leader_epoch` against the partition's `local_epoch`:
/// - `None` (the request carries no epoch, Kafka's -1): accepted;
/// - older than ours: FENCED_LEADER_EPOCH (the sender talks to a deposed generation);
/// - newer than ours: UNKNOWN_LEADER_EPOCH (our metadata lags; the sender retries).
pub fn check_leader_epoch(request_epoch: Option<i32>, local_epoch: i32) -> Result<(), ErrorCode> {
    match request_epoch {
        None => Ok(()),
        Some(e) if e < local_epoch => Err(ErrorCode::FencedLeaderEpoch),
        Some(e) if e > local_epoch => Err(ErrorCode::UnknownLeaderEpoch),
        Some(_) => Ok(()),
    }
}

/// Maps Kafka's wire convention (-1 or any negative = no epoch) to an `Option`.
pub fn epoch_from_wire(epoch: i32) -> Option<i32> {
    (epoch >= 0).then_some(epoch)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epoch_fencing_table() {
        let cases = [
            (None, 5, Ok(())),
            (Some(5), 5, Ok(())),
            (Some(4), 5, Err(ErrorCode::FencedLeaderEpoch)),
            (Some(0), 5, Err(ErrorCode::FencedLeaderEpoch)),
            (Some(6), 5, Err(ErrorCode::UnknownLeaderEpoch)),
        ];
        for (req, local, want) in cases {
            assert_eq!(check_leader_epoch(req, local), want, "{req:?} vs {local}");
        }
        assert_eq!(epoch_from_wire(-1), None);
        assert_eq!(epoch_from_wire(0), Some(0));
    }
}
