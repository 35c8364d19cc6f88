//! Produce decisions of a leader (DESIGN §5 "Produce"; Kafka `Partition.appendRecordsToLeader`
//! and `DelayedProduce`; seed 000's two acks=all failure windows; seed 004's acks ×
//! min.insync.replicas × ISR matrix).
//!
//! The async layer calls, holding the partition:
//! 1. [`Acks::from_wire`] (INVALID_REQUIRED_ACKS for anything but 0, 1, -1);
//! 2. [`PartitionState::check_produce`] — before touching the log;
//! 3. the log append ([`crate::log::Log::append_as_leader`] with the leader epoch);
//! 4. [`PartitionState::on_produce_appended`] — what to answer, now or later.

use keel_proto::ErrorCode;

use super::partition::{Effects, PartitionState, Role};
use super::waiters::WaiterError;

/// The producer's `acks`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acks {
    /// `acks=0`: no response at all.
    Zero,
    /// `acks=1`: answer after the leader's append.
    Leader,
    /// `acks=all` (-1): answer once the HW covers the batch.
    All,
}

impl Acks {
    /// Kafka's wire value: 0, 1 or -1; anything else is INVALID_REQUIRED_ACKS.
    pub fn from_wire(acks: i32) -> Result<Acks, ErrorCode> {
        match acks {
            0 => Ok(Acks::Zero),
            1 => Ok(Acks::Leader),
            -1 => Ok(Acks::All),
            _ => Err(ErrorCode::InvalidRequiredAcks),
        }
    }
}

/// What to do with a produce request after the append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProduceReply {
    /// acks=0: send nothing.
    NoResponse,
    /// Answer now with this code (NONE = success).
    Respond(ErrorCode),
    /// acks=all: the answer comes later as a [`crate::replica::WaiterCompletion`] with the
    /// request's token, from a later call's [`Effects`].
    Wait,
}

impl PartitionState {
    /// Admission before the append (nothing is written when this fails):
    /// - request leader epoch fencing, then leadership: FENCED_LEADER_EPOCH,
    ///   UNKNOWN_LEADER_EPOCH, NOT_LEADER_OR_FOLLOWER;
    /// - acks=all with committed ISR < min.insync.replicas: NOT_ENOUGH_REPLICAS (seed 000's
    ///   first window: "追加前失败，leader 日志尚未改变");
    /// - acks=all with the waiter set full: REQUEST_TIMED_OUT (bounded purgatory).
    ///
    /// acks=0 and acks=1 are not gated by min.insync.replicas (seed 004: "acks=1 任意").
    pub fn check_produce(
        &self,
        acks: Acks,
        request_leader_epoch: Option<i32>,
    ) -> Result<(), ErrorCode> {
        self.check_leader_request(request_leader_epoch)?;
        let Role::Leader(l) = &self.role else {
            return Err(ErrorCode::NotLeaderOrFollower);
        };
        if acks == Acks::All {
            if l.isr.isr().len() < self.config.effective_min_insync() {
                return Err(ErrorCode::NotEnoughReplicas);
            }
            if !l.waiters.has_room() {
                return Err(ErrorCode::RequestTimedOut);
            }
        }
        Ok(())
    }

    /// After the leader appended a batch ending at `batch_last_offset` (inclusive), the log
    /// now ending at `log_end_offset`: advances the HW if it can and decides the answer.
    /// acks=all registers a waiter `token` (unique among this partition's waiters) that must
    /// see HW >= `batch_last_offset + 1` before `deadline_ms`; if it is already satisfied the
    /// answer is immediate. The returned [`Effects`] may complete other waiters.
    #[allow(clippy::too_many_arguments)]
    pub fn on_produce_appended(
        &mut self,
        acks: Acks,
        batch_last_offset: i64,
        log_end_offset: i64,
        token: u64,
        deadline_ms: u64,
        now_ms: u64,
    ) -> (ProduceReply, Effects) {
        if !self.is_leader() {
            return (
                ProduceReply::Respond(ErrorCode::NotLeaderOrFollower),
                Effects::default(),
            );
        }
        debug_assert!(batch_last_offset < log_end_offset);
        let mut reply = match acks {
            Acks::Zero => ProduceReply::NoResponse,
            Acks::Leader => ProduceReply::Respond(ErrorCode::None),
            Acks::All => ProduceReply::Wait,
        };
        if acks == Acks::All
            && let Role::Leader(l) = &mut self.role
        {
            match l
                .waiters
                .add(token, batch_last_offset.saturating_add(1), deadline_ms)
            {
                Ok(()) => {}
                Err(WaiterError::Full(_)) => {
                    reply = ProduceReply::Respond(ErrorCode::RequestTimedOut)
                }
                Err(WaiterError::DuplicateToken(_)) => {
                    debug_assert!(false, "duplicate waiter token {token}");
                    reply = ProduceReply::Respond(ErrorCode::UnknownServerError);
                }
            }
        }
        let mut effects = self.on_leader_append(log_end_offset, now_ms);
        if reply == ProduceReply::Wait
            && let Some(i) = effects.completed.iter().position(|c| c.token == token)
        {
            reply = ProduceReply::Respond(effects.completed.remove(i).error);
        }
        (reply, effects)
    }
}
