//! ISR shrink and expansion decisions of a leader, and its handling of AlterPartition
//! answers (Kafka `Partition.maybeShrinkIsr` / `maybeExpandIsr` / `handleAlterPartitionUpdate`
//! / `handleAlterPartitionError`; KIP-497; KAFKA-7128; KIP-903).
//!
//! - Shrink candidates: committed-ISR followers that are not caught up
//!   ([`crate::replica::FollowerState::is_caught_up`]: not at the leader LEO within
//!   `replica.lag.time.max.ms`, or beyond the optional offset-lag bound).
//! - Expansion candidate: a replica outside the ISR whose LEO is `>=` the HW **and** `>=` the
//!   start offset of the current leader epoch (KAFKA-7128: otherwise a follower holding only
//!   the previous epoch's prefix could join and, elected later, lose records the leader
//!   acknowledged in this epoch), that is eligible (unfenced, not shutting down, broker epoch
//!   matches: [`crate::replica::IsrEligibility`]) and, if configured, within the offset-lag
//!   bound. MiniKafka calls this "covers HW" (seed 000: "及时但为空的 follower 依然不安全").
//! - At most one AlterPartition is outstanding; nothing is proposed while one is pending or
//!   while waiting for metadata after a rejection.

use super::eligibility::IsrEligibility;
use super::isr::{
    AlterPartitionRequest, AlterPartitionResponse, ErrorReaction, IsrChange, IsrEvent,
    IsrEventKind, IsrMember, IsrState, SendState, classify_alter_partition_error,
};
use super::partition::{Effects, LeaderState, PartitionState, Role};

impl PartitionState {
    /// Proposes removing the committed-ISR followers that are out of sync at `now_ms`.
    /// Call every [`crate::replica::ReplicaConfig::isr_check_interval_ms`] (half the lag
    /// time, like Kafka's `isr-expiration` task). Returns the AlterPartition to send and a
    /// `Shrinking ISR ...` event, or nothing. The HW is unchanged until the controller
    /// commits the shrink (pessimistic, KIP-497).
    pub fn maybe_shrink_isr(&mut self, now_ms: u64) -> Effects {
        let mut effects = Effects::default();
        let leo = self.log_end_offset;
        let hw = self.high_watermark;
        let cfg = self.config;
        let local = self.local_broker_id;
        let Role::Leader(l) = &mut self.role else {
            return effects;
        };
        if !l.isr.can_propose(now_ms) {
            return effects;
        }
        let committed = l.isr.isr().to_vec();
        let mut out_of_sync = Vec::new();
        let mut reasons = Vec::new();
        for id in committed.iter().filter(|id| **id != local) {
            let caught_up = l.followers.get(id).is_some_and(|f| {
                f.is_caught_up(
                    leo,
                    now_ms,
                    cfg.replica_lag_time_max_ms,
                    cfg.replica_lag_max_messages,
                )
            });
            if !caught_up {
                out_of_sync.push(*id);
                let f = l.followers.get(id);
                reasons.push(format!(
                    "broker {id} (LEO {}, last caught up {} ms ago)",
                    f.and_then(|f| f.log_end_offset)
                        .map_or("unknown".to_string(), |o| o.to_string()),
                    f.map_or(now_ms, |f| now_ms.saturating_sub(f.last_caught_up_time_ms)),
                ));
            }
        }
        if out_of_sync.is_empty() {
            return effects;
        }
        let new_isr: Vec<i32> = committed
            .iter()
            .copied()
            .filter(|id| !out_of_sync.contains(id))
            .collect();
        let reason = format!(
            "leader LEO {leo}, HW {hw}; out of sync (replica.lag.time.max.ms {}{}): {}",
            cfg.replica_lag_time_max_ms,
            cfg.replica_lag_max_messages
                .map_or(String::new(), |m| format!(", replica.lag.max.messages {m}")),
            reasons.join(", ")
        );
        let request_id = self.next_request_id;
        self.next_request_id += 1;
        let request = build_request(
            request_id,
            &self.topic_partition,
            l,
            &new_isr,
            local,
            self.local_broker_epoch,
        );
        effects.isr_events.push(IsrEvent {
            kind: IsrEventKind::Shrinking,
            topic_partition: self.topic_partition.clone(),
            from: committed.clone(),
            to: new_isr,
            reason,
        });
        effects.alter_partition = Some(request.clone());
        l.isr = IsrState::Pending {
            committed,
            change: IsrChange::Shrink(out_of_sync),
            request,
            send: SendState::InFlight,
        };
        self.debug_check();
        effects
    }

    /// After a follower fetch: proposes adding `follower_id` if it qualifies (module doc).
    /// The expansion counts toward the HW at once (maximal ISR).
    pub(super) fn maybe_expand_isr(
        &mut self,
        follower_id: i32,
        eligibility: &dyn IsrEligibility,
        now_ms: u64,
        effects: &mut Effects,
    ) {
        let leo = self.log_end_offset;
        let hw = self.high_watermark;
        let cfg = self.config;
        let local = self.local_broker_id;
        let Role::Leader(l) = &mut self.role else {
            return;
        };
        if !l.isr.can_propose(now_ms)
            || l.isr.isr().contains(&follower_id)
            || !self.replicas.contains(&follower_id)
        {
            return;
        }
        let Some(f) = l.followers.get(&follower_id) else {
            return;
        };
        let Some(f_leo) = f.log_end_offset else {
            return;
        };
        let within_messages = cfg.replica_lag_max_messages.is_none_or(|max| {
            u64::try_from(leo.saturating_sub(f_leo)).map_or(true, |lag| lag <= max)
        });
        if f_leo < hw
            || f_leo < l.epoch_start_offset
            || !within_messages
            || !eligibility.is_isr_eligible(follower_id, f.broker_epoch)
        {
            return;
        }
        let committed = l.isr.isr().to_vec();
        let mut new_isr = committed.clone();
        new_isr.push(follower_id);
        let reason = format!(
            "broker {follower_id} caught up: LEO {f_leo} >= HW {hw} and >= start offset {} of \
             leader epoch {}",
            l.epoch_start_offset, l.leader_epoch
        );
        let request_id = self.next_request_id;
        self.next_request_id += 1;
        let request = build_request(
            request_id,
            &self.topic_partition,
            l,
            &new_isr,
            local,
            self.local_broker_epoch,
        );
        effects.isr_events.push(IsrEvent {
            kind: IsrEventKind::Expanding,
            topic_partition: self.topic_partition.clone(),
            from: committed.clone(),
            to: new_isr,
            reason,
        });
        effects.alter_partition = Some(request.clone());
        l.isr = IsrState::Pending {
            committed,
            change: IsrChange::Expand(follower_id),
            request,
            send: SendState::InFlight,
        };
        self.debug_check();
    }

    /// Handles the answer to the AlterPartition `request_id` (answers to other requests are
    /// stale and ignored):
    /// - committed with our leader epoch and a partition epoch not older than ours: adopt
    ///   the ISR and partition epoch; a committed shrink may release the HW, an ISR below
    ///   min.insync fails waiters with NOT_ENOUGH_REPLICAS_AFTER_APPEND;
    /// - committed with another leader epoch or an older partition epoch, or an ISR without
    ///   this broker: wait for metadata;
    /// - errors: [`classify_alter_partition_error`] — retry after the backoff
    ///   (NOT_CONTROLLER, timeouts, [`AlterPartitionResponse::Transport`]), revert to the
    ///   committed ISR (INELIGIBLE_REPLICA), or wait for metadata (INVALID_UPDATE_VERSION,
    ///   FENCED_LEADER_EPOCH, ...): new metadata ([`PartitionState::become_leader`]) resets
    ///   the ISR state.
    pub fn handle_alter_partition_response(
        &mut self,
        request_id: u64,
        response: AlterPartitionResponse,
        now_ms: u64,
    ) -> Effects {
        let mut effects = Effects::default();
        let local = self.local_broker_id;
        let backoff = self.config.alter_partition_retry_backoff_ms;
        let Role::Leader(l) = &mut self.role else {
            return effects;
        };
        let IsrState::Pending {
            committed, request, ..
        } = &l.isr
        else {
            return effects;
        };
        if request.request_id != request_id {
            return effects;
        }
        let committed = committed.clone();
        let proposed = request.new_isr_ids();
        let maximal = l.isr.maximal_isr();
        let event = |kind, to: Vec<i32>, reason: String| IsrEvent {
            kind,
            topic_partition: self.topic_partition.clone(),
            from: committed.clone(),
            to,
            reason,
        };
        let reaction = match response {
            AlterPartitionResponse::Committed {
                leader_epoch,
                partition_epoch,
                isr,
            } => {
                if leader_epoch == l.leader_epoch
                    && partition_epoch >= l.partition_epoch
                    && isr.contains(&local)
                    && isr.iter().all(|b| self.replicas.contains(b))
                {
                    effects.isr_events.push(event(
                        IsrEventKind::Updated,
                        isr.clone(),
                        format!("partition epoch {} -> {partition_epoch}", l.partition_epoch),
                    ));
                    l.partition_epoch = partition_epoch;
                    l.isr = IsrState::committed(isr);
                    None
                } else {
                    effects.isr_events.push(event(
                        IsrEventKind::Rejected,
                        committed.clone(),
                        format!(
                            "answer for leader epoch {leader_epoch}, partition epoch \
                             {partition_epoch}, ISR {isr:?} does not match leader epoch {}, \
                             partition epoch {}: waiting for metadata",
                            l.leader_epoch, l.partition_epoch
                        ),
                    ));
                    Some(ErrorReaction::AwaitMetadata)
                }
            }
            AlterPartitionResponse::Error(code) => {
                let reaction = classify_alter_partition_error(code);
                effects.isr_events.push(event(
                    IsrEventKind::Rejected,
                    proposed.clone(),
                    format!("controller answered {code}: {reaction:?}"),
                ));
                Some(reaction)
            }
            AlterPartitionResponse::Transport => Some(ErrorReaction::Retry),
        };
        match reaction {
            None => {}
            Some(ErrorReaction::Retry) => {
                if let IsrState::Pending { send, .. } = &mut l.isr {
                    *send = SendState::RetryAt(now_ms.saturating_add(backoff));
                }
            }
            Some(ErrorReaction::Revert) => {
                l.isr = IsrState::Committed {
                    isr: committed,
                    no_proposal_before_ms: now_ms.saturating_add(backoff),
                };
            }
            Some(ErrorReaction::AwaitMetadata) => {
                l.isr = IsrState::AwaitingMetadata { committed, maximal };
            }
        }
        self.update_leader_hw(now_ms, &mut effects);
        self.debug_check();
        effects
    }

    /// Resends the pending AlterPartition when its retry time has come.
    pub(super) fn poll_alter_partition_retry(&mut self, now_ms: u64, effects: &mut Effects) {
        let Role::Leader(l) = &mut self.role else {
            return;
        };
        if let IsrState::Pending { request, send, .. } = &mut l.isr
            && let SendState::RetryAt(t) = *send
            && now_ms >= t
        {
            *send = SendState::InFlight;
            effects.alter_partition = Some(request.clone());
        }
    }
}

/// The request for `new_isr`: the leader with its own broker epoch, followers with the
/// broker epoch of their last fetch (-1 if unknown; KIP-903).
fn build_request(
    request_id: u64,
    topic_partition: &crate::log::TopicPartition,
    l: &LeaderState,
    new_isr: &[i32],
    local: i32,
    local_broker_epoch: i64,
) -> AlterPartitionRequest {
    let new_isr = new_isr
        .iter()
        .map(|id| IsrMember {
            broker_id: *id,
            broker_epoch: if *id == local {
                local_broker_epoch
            } else {
                l.followers
                    .get(id)
                    .and_then(|f| f.broker_epoch)
                    .unwrap_or(-1)
            },
        })
        .collect();
    AlterPartitionRequest {
        request_id,
        topic_partition: topic_partition.clone(),
        leader_epoch: l.leader_epoch,
        partition_epoch: l.partition_epoch,
        new_isr,
    }
}
