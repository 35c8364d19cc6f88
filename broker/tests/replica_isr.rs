//! Leader-side rules through `PartitionState`: HW over the maximal ISR, KAFKA-7128
//! expansion gating, lag-time shrink with injected time, one AlterPartition in flight, the
//! AlterPartition answer table, KAFKA-13141 (a diverging fetch does not move the follower's
//! LEO), role transitions, consumer reads.

mod replica_common;

use keel_broker::replica::{
    AlterPartitionResponse, EligibleBrokers, IsrState, LeaderFetchDecision, ListOffsetsAnswer,
    OffsetSpec, TransitionError,
};
use keel_proto::ErrorCode;
use replica_common::*;

fn follower_leo(p: &keel_broker::replica::PartitionState, id: i32) -> Option<i64> {
    p.leader_state().unwrap().followers[&id].log_end_offset
}

#[test]
fn hw_is_min_leo_over_maximal_isr() {
    // Seed 004's figure: leader LEO 11, B2 at 10, B3 at 8 -> HW 8.
    let mut p = leader(&[1, 2, 3], &[1, 2, 3], 1, 0, 0);
    p.on_leader_append(11, 1);
    assert_eq!(p.high_watermark(), 0, "followers' LEOs unknown: no advance");
    fetch(&mut p, 2, 10, 2);
    assert_eq!(p.high_watermark(), 0, "B3 still unknown");
    let effects = read_effects(fetch(&mut p, 3, 8, 3));
    assert_eq!(effects.high_watermark, Some(8));
    assert_eq!(p.high_watermark(), 8);
    fetch(&mut p, 3, 11, 4);
    assert_eq!(p.high_watermark(), 10, "now bounded by B2");
    fetch(&mut p, 2, 11, 5);
    assert_eq!(p.high_watermark(), 11, "bounded by the leader's LEO");
}

#[test]
fn hw_frozen_below_min_insync_and_released_by_config() {
    let mut p = leader(&[1, 2], &[1], 2, 0, 0);
    p.on_leader_append(5, 1);
    assert_eq!(p.high_watermark(), 0, "KAFKA-15583: ISR 1 < min 2");
    let effects = p.set_config(cfg(1), 2);
    assert_eq!(effects.high_watermark, Some(5));
}

#[test]
fn committed_shrink_releases_hw_and_never_lowers_it() {
    let mut p = leader(&[1, 2, 3], &[1, 2, 3], 1, 0, 0);
    p.on_leader_append(10, 0);
    fetch(&mut p, 2, 10, 1);
    fetch(&mut p, 3, 4, 1);
    assert_eq!(p.high_watermark(), 4);
    let shrink = p.maybe_shrink_isr(30_001);
    let req = shrink.alter_partition.unwrap();
    assert_eq!(req.new_isr_ids(), vec![1, 2]);
    assert_eq!(
        p.high_watermark(),
        4,
        "pending shrink keeps 3 in the maximal ISR"
    );
    let effects = p.handle_alter_partition_response(
        req.request_id,
        AlterPartitionResponse::Committed {
            leader_epoch: 1,
            partition_epoch: 2,
            isr: vec![1, 2],
        },
        30_002,
    );
    assert_eq!(effects.high_watermark, Some(10));
    // Broker 3 fetching an old offset cannot lower the HW.
    fetch(&mut p, 3, 5, 30_003);
    assert_eq!(p.high_watermark(), 10);
}

#[test]
fn kafka_7128_expansion_needs_epoch_start_offset() {
    // New leader (epoch 2) with LEO 10 and a lagging HW of 5; ISR {1, 2}; broker 3 outside.
    let mut p = hosted(1, cfg(1), 10, 5);
    p.become_leader(&reg(&[1, 2, 3], &[1, 2], 1, 2, 4), 10, 10, 0)
        .unwrap();
    let effects = read_effects(fetch(&mut p, 3, 6, 1));
    assert!(
        effects.alter_partition.is_none(),
        "LEO 6 >= HW 5 but < epoch start 10"
    );
    let effects = read_effects(fetch(&mut p, 3, 9, 2));
    assert!(effects.alter_partition.is_none());
    let effects = read_effects(fetch(&mut p, 3, 10, 3));
    let req = effects
        .alter_partition
        .expect("caught up to the epoch start");
    assert_eq!(req.new_isr_ids(), vec![1, 2, 3]);
    assert_eq!((req.leader_epoch, req.partition_epoch), (2, 4));
    // Broker epochs: the leader's own, the fetched one for 3, -1 (unknown) for 2, which has
    // not fetched from this leader epoch yet (KIP-903).
    let epochs: Vec<i64> = req.new_isr.iter().map(|m| m.broker_epoch).collect();
    assert_eq!(epochs, vec![BROKER_EPOCH, -1, BROKER_EPOCH]);
    assert_eq!(p.maximal_isr(), Some(vec![1, 2, 3]), "optimistic expansion");
    assert_eq!(p.isr(), Some(&[1, 2][..]));
}

#[test]
fn expansion_needs_hw_and_eligibility() {
    let mut p = leader(&[1, 2, 3], &[1, 2], 1, 0, 0);
    p.on_leader_append(8, 0);
    fetch(&mut p, 2, 8, 1);
    assert_eq!(p.high_watermark(), 8);
    assert!(
        read_effects(fetch(&mut p, 3, 7, 2))
            .alter_partition
            .is_none(),
        "below HW"
    );
    // Fenced broker 3 (registered, not eligible): served but not added.
    let fenced = EligibleBrokers::all(&[1, 2, 3], BROKER_EPOCH).with_ineligible(&[3], BROKER_EPOCH);
    let req = fetch_req(&p, 3, 8);
    let d = p
        .handle_follower_fetch(&req, |e| (e, i64::MAX), &fenced, 3)
        .unwrap();
    assert!(read_effects(d).alter_partition.is_none(), "fenced");
    // Registered with another broker epoch: refused outright (issue #18), not added.
    let other_epoch = EligibleBrokers::all(&[1, 2, 3], BROKER_EPOCH + 1);
    assert_eq!(
        p.handle_follower_fetch(&req, |e| (e, i64::MAX), &other_epoch, 4),
        Err(ErrorCode::StaleBrokerEpoch),
        "broker epoch mismatch"
    );
    assert!(
        read_effects(fetch(&mut p, 3, 8, 5))
            .alter_partition
            .is_some()
    );
}

#[test]
fn lag_time_shrink_with_injected_time() {
    let mut p = leader(&[1, 2, 3], &[1, 2, 3], 1, 0, 0);
    // t=0: both followers at the LEO.
    fetch(&mut p, 2, 0, 0);
    fetch(&mut p, 3, 0, 0);
    // Steady load: the leader appends each second; follower 2 fetches what it saw last
    // time (never exactly the moving LEO), follower 3 stops.
    for t in 1..=40u64 {
        p.on_leader_append(t as i64, t * 1_000);
        fetch(&mut p, 2, t as i64 - 1, t * 1_000);
        let effects = p.maybe_shrink_isr(t * 1_000);
        if t * 1_000 <= 30_000 {
            assert!(
                effects.alter_partition.is_none(),
                "t={t}s: within the lag time"
            );
        } else {
            let req = effects
                .alter_partition
                .expect("broker 3 out of sync after 30 s");
            assert_eq!(
                req.new_isr_ids(),
                vec![1, 2],
                "follower 2 stays (lastFetchLeaderLogEndOffset rule)"
            );
            assert!(effects.isr_events[0].to_string().contains("broker 3"));
            return;
        }
    }
    panic!("no shrink");
}

#[test]
fn new_leader_does_not_shrink_isr_members_immediately() {
    let mut p = hosted(1, cfg(1), 5, 5);
    p.become_leader(&reg(&[1, 2, 3], &[1, 2], 1, 3, 3), 5, 5, 100_000)
        .unwrap();
    assert!(
        p.maybe_shrink_isr(100_000 + 30_000)
            .alter_partition
            .is_none()
    );
    let req = p
        .maybe_shrink_isr(100_000 + 30_001)
        .alter_partition
        .unwrap();
    assert_eq!(req.new_isr_ids(), vec![1]);
}

#[test]
fn one_alter_partition_in_flight() {
    let mut p = leader(&[1, 2, 3], &[1, 2], 1, 0, 0);
    let shrink = p.maybe_shrink_isr(30_001);
    assert!(shrink.alter_partition.is_some());
    // Broker 3 catches up meanwhile: no second proposal; no second shrink either.
    assert!(
        read_effects(fetch(&mut p, 3, 0, 30_002))
            .alter_partition
            .is_none()
    );
    assert!(p.maybe_shrink_isr(60_000).alter_partition.is_none());
    assert!(
        p.tick(60_000).alter_partition.is_none(),
        "in flight: no resend"
    );
}

fn pending_shrink() -> (keel_broker::replica::PartitionState, u64) {
    let mut p = leader(&[1, 2, 3], &[1, 2, 3], 1, 0, 0);
    fetch(&mut p, 2, 0, 0);
    let req = p.maybe_shrink_isr(30_001).alter_partition.unwrap();
    assert_eq!(req.new_isr_ids(), vec![1, 2]);
    (p, req.request_id)
}

#[test]
fn alter_partition_response_table() {
    // Success: adopt ISR and partition epoch.
    let (mut p, id) = pending_shrink();
    let committed = |pe, isr: Vec<i32>| AlterPartitionResponse::Committed {
        leader_epoch: 1,
        partition_epoch: pe,
        isr,
    };
    let e = p.handle_alter_partition_response(id, committed(2, vec![1, 2]), 30_002);
    assert_eq!(p.isr(), Some(&[1, 2][..]));
    assert_eq!(p.applied_epochs(), Some((1, 2)));
    assert!(e.isr_events[0].to_string().starts_with("ISR updated"));

    // A stale answer (other request id) is ignored.
    let (mut p, id) = pending_shrink();
    assert!(
        p.handle_alter_partition_response(id + 99, committed(2, vec![1, 2]), 30_002)
            .is_empty()
    );
    assert!(p.leader_state().unwrap().isr.pending_request().is_some());

    // Retriable: NOT_CONTROLLER and transport failures resend after the backoff (100 ms).
    for resp in [
        AlterPartitionResponse::Error(ErrorCode::NotController),
        AlterPartitionResponse::Transport,
    ] {
        let (mut p, id) = pending_shrink();
        p.handle_alter_partition_response(id, resp.clone(), 30_010);
        assert_eq!(p.next_timer_ms(), Some(30_110), "{resp:?}");
        assert!(p.tick(30_109).alter_partition.is_none());
        let again = p.tick(30_110).alter_partition.expect("resent");
        assert_eq!(again.request_id, id, "same request");
        assert!(p.tick(40_000).alter_partition.is_none(), "in flight again");
    }

    // Stale view: wait for metadata; nothing is proposed until newer metadata arrives.
    for code in [
        ErrorCode::InvalidUpdateVersion,
        ErrorCode::FencedLeaderEpoch,
    ] {
        let (mut p, id) = pending_shrink();
        p.handle_alter_partition_response(id, AlterPartitionResponse::Error(code), 30_010);
        assert!(matches!(
            p.leader_state().unwrap().isr,
            IsrState::AwaitingMetadata { .. }
        ));
        assert!(
            p.maybe_shrink_isr(90_000).alter_partition.is_none(),
            "{code}"
        );
        assert!(p.tick(90_000).alter_partition.is_none());
        // Metadata with a newer partition epoch resets the ISR state.
        p.become_leader(&reg(&[1, 2, 3], &[1, 2, 3], 1, 1, 5), 0, 0, 90_000)
            .unwrap();
        assert!(p.leader_state().unwrap().isr.can_propose(90_000));
    }

    // A committed answer for an older partition epoch: wait for metadata.
    let (mut p, id) = pending_shrink();
    p.handle_alter_partition_response(id, committed(0, vec![1, 2]), 30_010);
    assert!(matches!(
        p.leader_state().unwrap().isr,
        IsrState::AwaitingMetadata { .. }
    ));
    assert_eq!(p.isr(), Some(&[1, 2, 3][..]));

    // INELIGIBLE_REPLICA: back to the committed ISR, propose again after the backoff.
    let (mut p, id) = pending_shrink();
    p.handle_alter_partition_response(
        id,
        AlterPartitionResponse::Error(ErrorCode::IneligibleReplica),
        30_010,
    );
    assert_eq!(p.maximal_isr(), Some(vec![1, 2, 3]));
    assert!(
        p.maybe_shrink_isr(30_050).alter_partition.is_none(),
        "backoff"
    );
    assert!(p.maybe_shrink_isr(30_110).alter_partition.is_some());
}

#[test]
fn diverging_fetch_does_not_update_follower_leo() {
    // Leader epoch cache [(0, 0), (2, 10)], LEO 15. Follower 2 last fetched epoch 1 at 12.
    let mut p = hosted(1, cfg(1), 15, 0);
    p.become_leader(&reg(&[1, 2], &[1, 2], 1, 2, 2), 15, 10, 0)
        .unwrap();
    let cache = |e: i32| if e >= 2 { (2, 15) } else { (0, 10) };
    let mut req = fetch_req(&p, 2, 12);
    req.last_fetched_epoch = Some(1);
    let d = p
        .handle_follower_fetch(&req, cache, &eligible(), 1)
        .unwrap();
    assert_eq!(
        d,
        LeaderFetchDecision::Diverging {
            epoch: 0,
            end_offset: 10,
            high_watermark: 0
        }
    );
    assert_eq!(follower_leo(&p, 2), None, "KAFKA-13141");
    assert_eq!(p.high_watermark(), 0);
    // After truncating to 10 it fetches with epoch 0 and is accepted.
    let mut req = fetch_req(&p, 2, 10);
    req.last_fetched_epoch = Some(0);
    let d = p
        .handle_follower_fetch(&req, cache, &eligible(), 2)
        .unwrap();
    assert!(matches!(
        d,
        LeaderFetchDecision::Read {
            upper_bound_exclusive: 15,
            ..
        }
    ));
    assert_eq!(follower_leo(&p, 2), Some(10));
    assert_eq!(p.high_watermark(), 10);
}

#[test]
fn follower_fetch_errors() {
    let mut p = leader(&[1, 2], &[1, 2], 1, 5, 0);
    let ok = |e: i32| (e, 5);
    let mut req = fetch_req(&p, 2, 3);
    req.current_leader_epoch = Some(0);
    assert_eq!(
        p.handle_follower_fetch(&req, ok, &eligible(), 1),
        Err(ErrorCode::FencedLeaderEpoch)
    );
    req.current_leader_epoch = Some(2);
    assert_eq!(
        p.handle_follower_fetch(&req, ok, &eligible(), 1),
        Err(ErrorCode::UnknownLeaderEpoch)
    );
    let req = fetch_req(&p, 4, 3);
    assert_eq!(
        p.handle_follower_fetch(&req, ok, &eligible(), 1),
        Err(ErrorCode::NotLeaderOrFollower),
        "not a replica"
    );
    let req = fetch_req(&p, 2, 6);
    assert_eq!(
        p.handle_follower_fetch(&req, ok, &eligible(), 1),
        Err(ErrorCode::OffsetOutOfRange)
    );
    assert_eq!(follower_leo(&p, 2), None);
    let mut req = fetch_req(&p, 2, 3);
    fetch(&mut p, 2, 3, 2);
    req.broker_epoch = Some(BROKER_EPOCH - 1);
    assert_eq!(
        p.handle_follower_fetch(&req, ok, &eligible(), 3),
        Err(ErrorCode::StaleBrokerEpoch),
        "stale broker epoch (KIP-903; the code the proto documents, issue #18)"
    );
    let mut f = hosted(2, cfg(1), 0, 0);
    f.become_follower(&reg(&[1, 2], &[1, 2], 1, 1, 1), 0)
        .unwrap();
    let req = fetch_req(&f, 1, 0);
    assert_eq!(
        f.handle_follower_fetch(&req, ok, &eligible(), 1),
        Err(ErrorCode::NotLeaderOrFollower)
    );
}

#[test]
fn role_transitions_ignore_stale_metadata() {
    let mut p = leader(&[1, 2], &[1, 2], 1, 0, 0); // epochs (1, 1)
    let stale = [(1, 1), (0, 9), (1, 0)];
    for (le, pe) in stale {
        assert!(matches!(
            p.become_leader(&reg(&[1, 2], &[1, 2], 1, le, pe), 0, 0, 1),
            Err(TransitionError::Stale { .. })
        ));
        assert!(matches!(
            p.become_follower(&reg(&[1, 2], &[1, 2], 2, le, pe), 0),
            Err(TransitionError::Stale { .. })
        ));
    }
    assert!(matches!(
        p.become_leader(&reg(&[2, 3], &[2, 3], 1, 5, 5), 0, 0, 1),
        Err(TransitionError::Invalid(_))
    ));
    // Partition-epoch-only update keeps what the leader learnt from fetches.
    fetch(&mut p, 2, 0, 1);
    let t = p
        .become_leader(&reg(&[1, 2], &[1, 2], 1, 1, 2), 0, 0, 2)
        .unwrap();
    assert!(!t.leader_changed);
    assert_eq!(follower_leo(&p, 2), Some(0));
    // New leader epoch forgets it.
    let t = p
        .become_leader(&reg(&[1, 2], &[1, 2], 1, 2, 3), 0, 0, 3)
        .unwrap();
    assert!(t.leader_changed);
    assert_eq!(follower_leo(&p, 2), None);
}

#[test]
fn consumer_reads_below_hw_only() {
    let mut p = leader(&[1, 2], &[1, 2], 1, 0, 0);
    p.on_leader_append(10, 0);
    fetch(&mut p, 2, 6, 1);
    assert_eq!(p.high_watermark(), 6);
    let r = p.check_consumer_fetch(2, Some(1)).unwrap();
    assert_eq!((r.upper_bound_exclusive, r.high_watermark), (6, 6));
    assert!(
        p.check_consumer_fetch(6, None).is_ok(),
        "at the HW: empty read"
    );
    // Above the HW but not past the LEO (10): valid, nothing to read yet (Kafka
    // `UnifiedLog.read`); a new leader's HW may trail what consumers saw on the old one.
    let r = p.check_consumer_fetch(7, None).unwrap();
    assert_eq!((r.fetch_offset, r.upper_bound_exclusive), (7, 6));
    assert!(p.check_consumer_fetch(10, None).is_ok(), "at the LEO");
    assert_eq!(
        p.check_consumer_fetch(11, None),
        Err(ErrorCode::OffsetOutOfRange)
    );
    assert_eq!(
        p.check_consumer_fetch(-1, None),
        Err(ErrorCode::OffsetOutOfRange)
    );
    assert_eq!(
        p.check_consumer_fetch(0, Some(0)),
        Err(ErrorCode::FencedLeaderEpoch)
    );
    assert_eq!(
        p.list_offsets(OffsetSpec::Latest, None),
        Ok(ListOffsetsAnswer::Offset(6))
    );
    assert_eq!(
        p.list_offsets(OffsetSpec::Earliest, None),
        Ok(ListOffsetsAnswer::Offset(0))
    );
    assert_eq!(
        p.list_offsets(OffsetSpec::Timestamp(5), None),
        Ok(ListOffsetsAnswer::LookupTimestamp {
            timestamp_ms: 5,
            max_offset_exclusive: 6
        })
    );
    // A new leader whose HW lags its epoch start answers OFFSET_NOT_AVAILABLE.
    let mut q = hosted(2, cfg(1), 10, 6);
    q.become_leader(&reg(&[1, 2], &[1, 2], 2, 2, 2), 10, 10, 0)
        .unwrap();
    assert_eq!(
        q.list_offsets(OffsetSpec::Latest, Some(2)),
        Err(ErrorCode::OffsetNotAvailable)
    );
    // Its consumer fetches: above its HW (6), where a consumer may have read on the old
    // leader, OFFSET_NOT_AVAILABLE rather than an HW below the consumer's position; at or
    // below it, served (lagging consumers keep reading).
    for at in [7, 10] {
        assert_eq!(
            q.check_consumer_fetch(at, Some(2)),
            Err(ErrorCode::OffsetNotAvailable),
            "at {at}"
        );
    }
    for at in [3, 6] {
        let r = q.check_consumer_fetch(at, Some(2)).unwrap();
        assert_eq!((r.fetch_offset, r.high_watermark), (at, 6));
    }
    assert_eq!(
        q.check_consumer_fetch(11, Some(2)),
        Err(ErrorCode::OffsetOutOfRange)
    );
    // Once the follower reaches the epoch start the HW is there, and so are the answers.
    fetch(&mut q, 1, 10, 1);
    assert_eq!(q.high_watermark(), 10);
    let r = q.check_consumer_fetch(7, Some(2)).unwrap();
    assert_eq!((r.fetch_offset, r.high_watermark), (7, 10));
    assert_eq!(
        q.list_offsets(OffsetSpec::Latest, Some(2)),
        Ok(ListOffsetsAnswer::Offset(10))
    );
}

/// Issue #18 item 3: a fetch posing as follower 2 without a broker epoch (-1 on the wire) or
/// with an epoch other than the registered one is refused with STALE_BROKER_EPOCH and
/// changes nothing the leader knows about follower 2 (LEO, fetch times, HW).
#[test]
fn follower_fetch_needs_the_registered_broker_epoch() {
    let mut p = leader(&[1, 2, 3], &[1, 2, 3], 1, 0, 0);
    p.on_leader_append(25, 1);
    fetch(&mut p, 2, 25, 2);
    fetch(&mut p, 3, 25, 2);
    assert_eq!(p.high_watermark(), 25);
    let before = p.leader_state().unwrap().followers[&2].clone();
    for epoch in [None, Some(BROKER_EPOCH - 1), Some(BROKER_EPOCH + 1)] {
        let mut req = fetch_req(&p, 2, 0);
        req.broker_epoch = epoch;
        assert_eq!(
            p.handle_follower_fetch(&req, |e| (e, i64::MAX), &eligible(), 3),
            Err(ErrorCode::StaleBrokerEpoch),
            "broker epoch {epoch:?}"
        );
        assert_eq!(p.leader_state().unwrap().followers[&2], before);
        assert_eq!(follower_leo(&p, 2), Some(25));
        assert_eq!(p.high_watermark(), 25);
    }
    // A replica the leader does not know as registered cannot fetch either.
    let unregistered = EligibleBrokers::all(&[1, 3], BROKER_EPOCH);
    let req = fetch_req(&p, 2, 0);
    assert_eq!(
        p.handle_follower_fetch(&req, |e| (e, i64::MAX), &unregistered, 3),
        Err(ErrorCode::StaleBrokerEpoch)
    );
    assert_eq!(follower_leo(&p, 2), Some(25));
}

/// A reassignment completed by the leader's own ISR expansion (KIP-455): the leader learns
/// the new partition epoch from the AlterPartition answer, then the record of that epoch
/// with the removed replica gone. Applying it (same epochs, other replicas) drops the removed
/// broker from the followers, so a proposal to add it back (rejected by the controller) no
/// longer holds the HW, which it did for as long as no newer metadata came: acks=all produce
/// stalled after `keelctl partition reassign` in the bench.
#[test]
fn a_registration_of_the_applied_epoch_with_other_replicas_is_applied() {
    // Moving 1,2,3 -> 1,2,4: replicas 1,2,4,3 with 4 adding, ISR 1,2,3.
    let mut p = hosted(1, cfg(1), 10, 0);
    p.become_leader(&reg(&[1, 2, 4, 3], &[1, 2, 3], 1, 1, 1), 10, 10, 0)
        .unwrap();
    fetch(&mut p, 2, 10, 1);
    fetch(&mut p, 3, 10, 1);
    assert_eq!(p.high_watermark(), 10);
    // Broker 4 catches up: expansion proposed; the controller completes the move in the
    // same change (ISR 1,2,4, replica 3 removed).
    let req = read_effects(fetch(&mut p, 4, 10, 2))
        .alter_partition
        .expect("expansion proposed");
    assert_eq!(req.new_isr_ids(), vec![1, 2, 3, 4]);
    p.handle_alter_partition_response(
        req.request_id,
        AlterPartitionResponse::Committed {
            leader_epoch: 1,
            partition_epoch: 2,
            isr: vec![1, 2, 4],
        },
        3,
    );
    // Broker 3 (still a follower in the leader's view) fetches: an expansion to add it back is
    // proposed and rejected, which keeps the maximal ISR with 3 until metadata.
    let req = read_effects(fetch(&mut p, 3, 10, 4))
        .alter_partition
        .expect("3 looks caught up");
    assert_eq!(req.new_isr_ids(), vec![1, 2, 4, 3]);
    p.handle_alter_partition_response(
        req.request_id,
        AlterPartitionResponse::Error(ErrorCode::InvalidRequest),
        5,
    );
    assert_eq!(p.maximal_isr().unwrap(), vec![1, 2, 4, 3]);
    // The record of partition epoch 2 arrives: replicas 1,2,4. Applied though its epochs
    // equal the applied ones.
    let t = p
        .become_leader(&reg(&[1, 2, 4], &[1, 2, 4], 1, 1, 2), 10, 10, 6)
        .expect("same epochs, other replicas: applied");
    assert!(!t.leader_changed);
    assert_eq!(p.replicas(), &[1, 2, 4]);
    assert_eq!(p.maximal_isr().unwrap(), vec![1, 2, 4]);
    assert!(!p.leader_state().unwrap().followers.contains_key(&3));
    // The HW moves with 2 and 4 alone.
    p.on_leader_append(20, 7);
    fetch(&mut p, 2, 20, 8);
    fetch(&mut p, 4, 20, 8);
    assert_eq!(p.high_watermark(), 20);
    // The same registration again changes nothing (stale).
    assert!(matches!(
        p.become_leader(&reg(&[1, 2, 4], &[1, 2, 4], 1, 1, 2), 20, 10, 9),
        Err(TransitionError::Stale { .. })
    ));
}

/// DeleteRecords' low watermark (Kafka `Partition.lowWatermarkIfLeader`): the smallest log
/// start of the leader and of each other ISR member as its fetches reported it (-1 before
/// its first fetch in this leader epoch); a follower outside the ISR does not hold it back.
#[test]
fn low_watermark_is_the_smallest_isr_log_start() {
    let mut p = leader(&[1, 2, 3], &[1, 2], 1, 0, 0);
    p.on_leader_append(50, 1);
    assert_eq!(
        p.low_watermark(),
        Some(-1),
        "follower 2 has not fetched yet"
    );
    let mut req = fetch_req(&p, 2, 50);
    req.log_start_offset = Some(0);
    p.handle_follower_fetch(&req, |e| (e, i64::MAX), &eligible(), 2)
        .unwrap();
    assert_eq!(p.low_watermark(), Some(0));
    p.set_log_start_offset(30);
    assert_eq!(p.log_start_offset(), 30);
    assert_eq!(p.low_watermark(), Some(0), "follower 2 is still at 0");
    req.log_start_offset = Some(30);
    p.handle_follower_fetch(&req, |e| (e, i64::MAX), &eligible(), 3)
        .unwrap();
    assert_eq!(p.low_watermark(), Some(30));
    // Follower 3 (outside the ISR) at 0 does not count.
    let mut req3 = fetch_req(&p, 3, 40);
    req3.log_start_offset = Some(0);
    p.handle_follower_fetch(&req3, |e| (e, i64::MAX), &eligible(), 4)
        .unwrap();
    assert_eq!(p.low_watermark(), Some(30));
    // Not the leader: none.
    let f = hosted(2, cfg(1), 0, 0);
    assert_eq!(f.low_watermark(), None);
}
