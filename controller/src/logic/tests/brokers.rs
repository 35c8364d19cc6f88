//! Broker lifecycle: registration, heartbeats, session expiry -> fence cascade, unfence ->
//! leaders return, controlled shutdown, unregistration, producer ids.

use keel_proto::ErrorCode;
use keel_proto::controller::{
    AllocateProducerIdsRequest, AlterConfigOp, AlterConfigsRequest, AlterConfigsResource,
    AlterableConfig, BrokerHeartbeatRequest, UnregisterBrokerRequest,
};
use keel_proto::metadata::{ConfigResourceType, LeaderRecoveryState};

use super::common::{CLUSTER_ID, Cluster, SESSION_TIMEOUT_MS, code};
use crate::logic::brokers::leads_nothing_shared;
use crate::logic::{
    BrokerHeartbeatManager, HeartbeatTracker, allocate_producer_ids, alter_configs, fence_broker,
    heartbeat, register_broker, unregister_broker,
};

fn set_topic_config(c: &mut Cluster, topic: &str, key: &str, value: &str) {
    let r = alter_configs(
        &c.image,
        &AlterConfigsRequest {
            resources: vec![AlterConfigsResource {
                resource_type: ConfigResourceType::Topic as i32,
                resource_name: topic.into(),
                configs: vec![AlterableConfig {
                    name: key.into(),
                    op: AlterConfigOp::Set as i32,
                    value: Some(value.into()),
                }],
                replace_unlisted: false,
            }],
            validate_only: false,
        },
    );
    assert_eq!(code(&r.response.results[0].error), ErrorCode::None);
    c.commit(r);
}

#[test]
fn session_expiry_fences_and_cascades_then_unfence_brings_leaders_back() {
    let mut c = Cluster::new();
    for b in 1..=3 {
        c.add_broker(b, None);
    }
    c.create_topic("a", &[&[1, 2, 3], &[2, 1, 3]]);
    c.create_topic("solo", &[&[1]]);
    c.create_topic("pair", &[&[1, 2]]);
    c.create_topic("unc", &[&[1, 2]]);
    set_topic_config(&mut c, "unc", "unclean.leader.election.enable", "true");
    // `pair` and `unc` lose follower 2 from the ISR (leader shrink), so 2 is a live non-ISR
    // replica there.
    for t in ["pair", "unc"] {
        let p = c.partition(t, 0);
        let req = keel_proto::controller::AlterPartitionRequest {
            broker_id: 1,
            broker_epoch: c.epoch(1),
            topics: vec![keel_proto::controller::AlterPartitionTopic {
                topic_id: keel_metadata_log::image::uuid_bytes(c.topic_id(t)),
                topic_name: String::new(),
                partitions: vec![keel_proto::controller::AlterPartitionPartition {
                    partition_index: 0,
                    leader_epoch: p.leader_epoch,
                    new_isr_with_epochs: vec![keel_proto::controller::BrokerState {
                        broker_id: 1,
                        broker_epoch: c.epoch(1),
                    }],
                    leader_recovery_state: 0,
                    partition_epoch: p.partition_epoch,
                    expected_partition_epoch: None,
                }],
            }],
        };
        let r = crate::logic::alter_partition(&c.image, &req);
        c.commit(r);
        assert_eq!(c.partition(t, 0).isr, vec![1]);
    }
    let before: Vec<_> = [("a", 0), ("a", 1), ("solo", 0), ("pair", 0), ("unc", 0)]
        .iter()
        .map(|&(t, p)| c.partition(t, p))
        .collect();

    // Brokers 2 and 3 keep heartbeating; 1 goes silent.
    let t0 = c.now_ms;
    c.now_ms = t0 + SESSION_TIMEOUT_MS;
    c.heartbeat(2, false, false);
    c.heartbeat(3, false, false);
    assert!(
        c.sessions.expired(c.now_ms, SESSION_TIMEOUT_MS).is_empty(),
        "exactly the timeout is still alive"
    );
    c.now_ms = t0 + SESSION_TIMEOUT_MS + 1;
    assert_eq!(c.sessions.expired(c.now_ms, SESSION_TIMEOUT_MS), vec![1]);
    assert!(
        !c.sessions
            .has_valid_session(1, c.now_ms, SESSION_TIMEOUT_MS)
    );
    let f = fence_broker(&c.image, 1);
    c.apply(&f.records);
    c.sessions.set_state(1, true, false);
    assert!(c.sessions.expired(c.now_ms, SESSION_TIMEOUT_MS).is_empty());
    assert!(c.image.broker(1).unwrap().fenced);
    assert!(
        fence_broker(&c.image, 1).records.is_empty(),
        "fencing is idempotent"
    );

    // a-0: leader 1 -> 2 (first ISR member in replica order), epoch + 1, 1 out of the ISR.
    let a0 = c.partition("a", 0);
    assert_eq!(
        (a0.leader, a0.leader_epoch, a0.isr.clone()),
        (2, before[0].leader_epoch + 1, vec![2, 3])
    );
    // a-1: 1 was a follower: removed from the ISR, leader and leader epoch unchanged.
    let a1 = c.partition("a", 1);
    assert_eq!(
        (a1.leader, a1.leader_epoch, a1.isr.clone()),
        (2, before[1].leader_epoch, vec![2, 3])
    );
    assert_eq!(a1.partition_epoch, before[1].partition_epoch + 1);
    // solo / pair: 1 was the only ISR member: offline, ISR kept, leader epoch + 1.
    for (name, i) in [("solo", 2), ("pair", 3)] {
        let p = c.partition(name, 0);
        assert_eq!(
            (p.leader, p.isr.clone(), p.leader_epoch),
            (-1, vec![1], before[i].leader_epoch + 1),
            "{name}"
        );
    }
    // unc: unclean allowed -> live replica 2 leads with ISR [2], RECOVERING.
    let u = c.partition("unc", 0);
    assert_eq!(
        (u.leader, u.isr.clone(), u.leader_recovery_state),
        (2, vec![2], LeaderRecoveryState::Recovering)
    );

    // Broker 1 comes back (same process, session resumes): it is unfenced once caught up and
    // leads its offline partitions again.
    let stale = heartbeat(
        &c.image,
        &BrokerHeartbeatRequest {
            broker_id: 1,
            broker_epoch: c.epoch(1),
            current_metadata_offset: c.epoch(1) - 1,
            want_fence: false,
            want_shut_down: false,
        },
        &mut c.sessions,
        c.now_ms,
        c.offset,
    );
    assert!(stale.records.is_empty(), "not caught up: stays fenced");
    assert!(stale.response.is_fenced && !stale.response.is_caught_up);
    let r = c.heartbeat(1, false, false);
    assert!(!r.is_fenced && r.is_caught_up);
    for name in ["solo", "pair"] {
        let p = c.partition(name, 0);
        assert_eq!((p.leader, p.isr.clone()), (1, vec![1]), "{name}");
    }
    // Partitions that already have a leader are left alone.
    assert_eq!(c.partition("a", 0).leader, 2);
    assert_eq!(c.partition("unc", 0).leader, 2);
}

#[test]
fn restart_with_new_incarnation_after_fence_brings_partition_back() {
    let mut c = Cluster::new();
    c.add_broker(1, None);
    c.add_broker(2, None);
    c.create_topic("solo", &[&[1]]);
    let f = fence_broker(&c.image, 1);
    c.apply(&f.records);
    let old = c.epoch(1);
    // A fenced broker id may be taken by a new incarnation.
    let new = c.register_gen(1, None, 2);
    assert!(new > old);
    let r = c.heartbeat(1, false, false);
    assert!(!r.is_fenced);
    let p = c.partition("solo", 0);
    assert_eq!((p.leader, p.isr.clone()), (1, vec![1]));
}

#[test]
fn registration_rules() {
    let mut c = Cluster::new();
    c.add_broker(1, None);
    c.add_broker(2, None);
    c.create_topic("a", &[&[1, 2]]);
    // Another incarnation of a live broker: refused, nothing written.
    let req = c.register_request(1, None, 2);
    let (sessions, now) = (&c.sessions, c.now_ms);
    let r = register_broker(&c.image, &req, CLUSTER_ID, |b| {
        sessions.has_valid_session(b, now, SESSION_TIMEOUT_MS)
    });
    assert_eq!(
        code(&r.response.error),
        ErrorCode::DuplicateBrokerRegistration
    );
    assert!(r.records.is_empty());
    // Wrong cluster id.
    let mut bad = c.register_request(5, None, 1);
    bad.cluster_id = "other".into();
    let r = register_broker(&c.image, &bad, CLUSTER_ID, |_| false);
    assert_eq!(code(&r.response.error), ErrorCode::InconsistentClusterId);
    // Malformed incarnation id, no listener, negative id.
    let mut bad = c.register_request(5, None, 1);
    bad.incarnation_id = bytes::Bytes::from_static(b"x");
    assert_eq!(
        code(
            &register_broker(&c.image, &bad, CLUSTER_ID, |_| false)
                .response
                .error
        ),
        ErrorCode::InvalidRequest
    );
    let mut bad = c.register_request(5, None, 1);
    bad.listeners.clear();
    assert_eq!(
        code(
            &register_broker(&c.image, &bad, CLUSTER_ID, |_| false)
                .response
                .error
        ),
        ErrorCode::InvalidRequest
    );
    let bad = c.register_request(-3, None, 1);
    assert_eq!(
        code(
            &register_broker(&c.image, &bad, CLUSTER_ID, |_| false)
                .response
                .error
        ),
        ErrorCode::InvalidRequest
    );
    // Same incarnation re-registering (e.g. the reply was lost): accepted, new epoch, starts
    // fenced, and its ISR membership / leadership are moved away in the same batch.
    let old = c.epoch(1);
    let new = c.register_gen(1, None, 1);
    assert!(new > old);
    assert!(c.image.broker(1).unwrap().fenced);
    let p = c.partition("a", 0);
    assert_eq!((p.leader, p.isr.clone()), (2, vec![2]));
    // Session expired (not yet fenced by the scan): a new incarnation may take over.
    c.heartbeat(1, false, false);
    assert!(!c.image.broker(1).unwrap().fenced);
    c.now_ms += SESSION_TIMEOUT_MS + 1;
    c.register_gen(1, None, 3);
}

#[test]
fn heartbeat_errors_and_want_fence() {
    let mut c = Cluster::new();
    c.add_broker(1, None);
    let mut sessions = BrokerHeartbeatManager::new();
    let hb = |b, e| BrokerHeartbeatRequest {
        broker_id: b,
        broker_epoch: e,
        current_metadata_offset: 100,
        want_fence: false,
        want_shut_down: false,
    };
    let r = heartbeat(&c.image, &hb(9, 1), &mut sessions, 0, c.offset);
    assert_eq!(code(&r.response.error), ErrorCode::BrokerIdNotRegistered);
    assert!(r.response.is_fenced && r.records.is_empty());
    let r = heartbeat(&c.image, &hb(1, c.epoch(1) - 1), &mut sessions, 0, c.offset);
    assert_eq!(code(&r.response.error), ErrorCode::StaleBrokerEpoch);
    assert!(
        r.records.is_empty() && sessions.is_empty(),
        "no session for refused heartbeats"
    );
    // want_fence on an unfenced broker fences it.
    let r = c.heartbeat(1, true, false);
    assert!(r.is_fenced);
    assert!(c.image.broker(1).unwrap().fenced);
    // ...and it stays fenced while it wants to.
    assert!(c.heartbeat(1, true, false).is_fenced);
    assert!(!c.heartbeat(1, false, false).is_fenced);
}

#[test]
fn controlled_shutdown_moves_leadership_and_isr_then_grants() {
    let mut c = Cluster::new();
    for b in 1..=3 {
        c.add_broker(b, None);
    }
    c.create_topic("a", &[&[1, 2, 3], &[2, 1, 3]]);
    c.create_topic("solo", &[&[1]]);
    let a0 = c.partition("a", 0);
    let r = c.heartbeat(1, false, true);
    let shutdown_offset = c.offset;
    assert!(!r.should_shut_down && !r.is_fenced);
    assert!(c.image.broker(1).unwrap().in_controlled_shutdown);
    let p = c.partition("a", 0);
    assert_eq!(
        (p.leader, p.leader_epoch, p.isr.clone()),
        (2, a0.leader_epoch + 1, vec![2, 3])
    );
    assert_eq!(c.partition("a", 1).isr, vec![2, 3]);
    let s = c.partition("solo", 0);
    assert_eq!((s.leader, s.isr.clone()), (-1, vec![1]));
    assert!(leads_nothing_shared(&c.image, 1));
    // The caller records the batch offset; the grant waits until 2 and 3 applied it.
    c.sessions
        .set_controlled_shutdown_offset(1, shutdown_offset);
    let req = BrokerHeartbeatRequest {
        broker_id: 1,
        broker_epoch: c.epoch(1),
        current_metadata_offset: c.offset as i64,
        want_fence: false,
        want_shut_down: true,
    };
    c.sessions
        .set_metadata_offset(2, shutdown_offset as i64 - 1);
    let r = heartbeat(&c.image, &req, &mut c.sessions, c.now_ms, c.offset);
    assert!(r.records.is_empty() && !r.response.should_shut_down);
    c.heartbeat(2, false, false);
    c.heartbeat(3, false, false);
    let r = c.heartbeat(1, false, true);
    assert!(r.should_shut_down && r.is_fenced);
    assert!(c.image.broker(1).unwrap().fenced);
    // A fenced broker asking to shut down may do so at once.
    let r = c.heartbeat(1, false, true);
    assert!(r.should_shut_down);
}

#[test]
fn unregister_removes_from_isrs() {
    let mut c = Cluster::new();
    c.add_broker(1, None);
    c.add_broker(2, None);
    c.create_topic("a", &[&[1, 2]]);
    let r = unregister_broker(&c.image, &UnregisterBrokerRequest { broker_id: 9 });
    assert_eq!(code(&r.response.error), ErrorCode::BrokerIdNotRegistered);
    assert!(r.records.is_empty());
    let r = unregister_broker(&c.image, &UnregisterBrokerRequest { broker_id: 1 });
    assert_eq!(code(&r.response.error), ErrorCode::None);
    c.commit(r);
    c.sessions.remove(1);
    assert!(c.image.broker(1).is_none());
    let p = c.partition("a", 0);
    assert_eq!((p.leader, p.isr.clone()), (2, vec![2]));
}

#[test]
fn new_active_controller_gives_a_fresh_grace_period() {
    let mut c = Cluster::new();
    c.add_broker(1, None);
    c.add_broker(2, None);
    let mut fresh = BrokerHeartbeatManager::new();
    let later = c.now_ms + 10 * SESSION_TIMEOUT_MS;
    fresh.reset_all(&c.image, later);
    assert_eq!(fresh.len(), 2);
    assert!(
        fresh
            .expired(later + SESSION_TIMEOUT_MS, SESSION_TIMEOUT_MS)
            .is_empty()
    );
    assert_eq!(
        fresh.expired(later + SESSION_TIMEOUT_MS + 1, SESSION_TIMEOUT_MS),
        vec![1, 2]
    );
}

/// A stall of the controller itself moves every session's last contact by the stall, never
/// past now and never back: a session live before the stall is live after it, one expired
/// for longer than the stall stays expired.
#[test]
fn a_controller_stall_is_not_counted_against_the_sessions() {
    let mut c = Cluster::new();
    c.add_broker(1, None);
    c.add_broker(2, None);
    let start = c.now_ms;
    // Broker 1 was heard just before the stall; broker 2 had been silent a whole timeout.
    c.sessions.touch(1, c.epoch(1), start + SESSION_TIMEOUT_MS);
    let before_stall = start + SESSION_TIMEOUT_MS + 1;
    assert_eq!(
        c.sessions.expired(before_stall, SESSION_TIMEOUT_MS),
        vec![2]
    );
    let stall = 10 * SESSION_TIMEOUT_MS;
    let resumed = before_stall + stall;
    assert_eq!(
        c.sessions.expired(resumed, SESSION_TIMEOUT_MS),
        vec![1, 2],
        "without forgiving the stall, both look expired"
    );
    c.sessions.forgive_stall(stall, resumed);
    assert_eq!(c.sessions.expired(resumed, SESSION_TIMEOUT_MS), vec![2]);
    assert_eq!(
        c.sessions.session(1).unwrap().last_contact_ms,
        start + SESSION_TIMEOUT_MS + stall
    );
    // Never past now: a stall longer than the time since the last contact (both sessions
    // then count from the resume, as if heard then).
    c.sessions.forgive_stall(100 * stall, resumed);
    assert_eq!(c.sessions.session(1).unwrap().last_contact_ms, resumed);
    assert!(
        c.sessions
            .expired(resumed + SESSION_TIMEOUT_MS, SESSION_TIMEOUT_MS)
            .is_empty()
    );
    assert_eq!(
        c.sessions
            .expired(resumed + SESSION_TIMEOUT_MS + 1, SESSION_TIMEOUT_MS),
        vec![1, 2]
    );
}

/// Heartbeats recorded as they arrive (Kafka's `BrokerHeartbeatTracker`) keep a session alive
/// while the write task has not decided them yet; only heartbeats of the registered epoch
/// count, and they never revive another epoch's session.
#[test]
fn heartbeats_recorded_on_arrival_keep_the_session_alive() {
    let mut c = Cluster::new();
    c.add_broker(1, None);
    c.add_broker(2, None);
    let (e1, e2) = (c.epoch(1), c.epoch(2));
    let tracker = HeartbeatTracker::default();
    let start = c.now_ms;
    // Broker 1's heartbeats arrive on time but wait in the queue; broker 2 is silent.
    let later = start + SESSION_TIMEOUT_MS + 500;
    assert!(tracker.update_contact(&c.image, 1, e1, later - 100));
    // Unknown broker, wrong epoch: not recorded.
    assert!(!tracker.update_contact(&c.image, 9, 1, later));
    assert!(!tracker.update_contact(&c.image, 2, e2 + 1, later));
    assert!(!tracker.update_contact(&c.image, 2, e2 - 1, later));
    assert_eq!(c.sessions.expired(later, SESSION_TIMEOUT_MS), vec![1, 2]);
    c.sessions.note_contacts(tracker.take_contacts(&c.image));
    assert_eq!(c.sessions.expired(later, SESSION_TIMEOUT_MS), vec![2]);
    // An older arrival never moves the contact back.
    c.sessions.note_contacts([(1, e1, start)]);
    assert_eq!(c.sessions.session(1).unwrap().last_contact_ms, later - 100);
    // A contact for another epoch than the session's is ignored.
    c.sessions.note_contacts([(2, e2 + 7, later)]);
    assert_eq!(c.sessions.expired(later, SESSION_TIMEOUT_MS), vec![2]);
    // Unregistered brokers are forgotten by the tracker.
    let r = unregister_broker(&c.image, &UnregisterBrokerRequest { broker_id: 1 });
    c.commit(r);
    assert!(tracker.take_contacts(&c.image).is_empty());
}

#[test]
fn producer_id_blocks() {
    let mut c = Cluster::new();
    c.add_broker(1, None);
    let req = |e| AllocateProducerIdsRequest {
        broker_id: 1,
        broker_epoch: e,
    };
    let r = allocate_producer_ids(&c.image, &req(c.epoch(1)));
    assert_eq!(
        (r.response.producer_id_start, r.response.producer_id_len),
        (0, 1000)
    );
    c.commit(r);
    assert_eq!(c.image.next_producer_id(), 1000);
    let r = allocate_producer_ids(&c.image, &req(c.epoch(1)));
    assert_eq!(r.response.producer_id_start, 1000);
    c.commit(r);
    assert_eq!(c.image.next_producer_id(), 2000);
    let r = allocate_producer_ids(&c.image, &req(c.epoch(1) - 1));
    assert_eq!(code(&r.response.error), ErrorCode::StaleBrokerEpoch);
    assert!(r.records.is_empty());
    let r = allocate_producer_ids(
        &c.image,
        &AllocateProducerIdsRequest {
            broker_id: 7,
            broker_epoch: 1,
        },
    );
    assert_eq!(code(&r.response.error), ErrorCode::BrokerIdNotRegistered);
    assert_eq!(
        (r.response.producer_id_start, r.response.producer_id_len),
        (-1, 0)
    );
}

#[test]
fn malformed_registrations_are_invalid_requests_and_write_nothing() {
    let mut c = Cluster::new();
    c.add_broker(1, None);
    type Edit = fn(&mut keel_proto::controller::RegisterBrokerRequest);
    let cases: [(&str, Edit); 6] = [
        ("port 0", |r| r.listeners[0].port = 0),
        ("port 65536", |r| r.listeners[0].port = 65_536),
        ("empty host", |r| r.listeners[0].host = String::new()),
        ("blank host", |r| r.listeners[0].host = "  ".into()),
        ("nil incarnation", |r| {
            r.incarnation_id = bytes::Bytes::copy_from_slice(uuid::Uuid::nil().as_bytes())
        }),
        ("feature min > max", |r| {
            r.features = vec![keel_proto::controller::SupportedFeature {
                name: "metadata.version".into(),
                min_supported_version: 5,
                max_supported_version: 4,
            }]
        }),
    ];
    for (what, edit) in cases {
        // A new broker, and a re-registration of a known one: both refused.
        for id in [5, 1] {
            let mut req = c.register_request(id, None, 1);
            edit(&mut req);
            let r = register_broker(&c.image, &req, CLUSTER_ID, |_| false);
            assert_eq!(
                code(&r.response.error),
                ErrorCode::InvalidRequest,
                "{what}: {:?}",
                r.response.error
            );
            assert!(r.records.is_empty(), "{what}: {:?}", r.records);
            assert_eq!(r.response.broker_epoch, -1, "{what}");
        }
    }
    // The boundaries are accepted.
    for port in [1, 65_535] {
        let mut req = c.register_request(6, None, 1);
        req.listeners[0].port = port;
        let r = register_broker(&c.image, &req, CLUSTER_ID, |_| false);
        assert_eq!(code(&r.response.error), ErrorCode::None, "port {port}");
    }
}

#[test]
fn a_heartbeat_claiming_an_offset_beyond_the_log_end_is_refused_and_does_not_unfence() {
    let mut c = Cluster::new();
    let epoch = c.register_gen(1, None, 1);
    assert!(c.image.broker(1).unwrap().fenced);
    let log_end = c.offset;
    for claimed in [i64::MAX, log_end as i64 + 1, -2] {
        let req = BrokerHeartbeatRequest {
            broker_id: 1,
            broker_epoch: epoch,
            current_metadata_offset: claimed,
            want_fence: false,
            want_shut_down: false,
        };
        let r = heartbeat(&c.image, &req, &mut c.sessions, c.now_ms, log_end);
        assert_eq!(
            code(&r.response.error),
            ErrorCode::InvalidRequest,
            "{claimed}"
        );
        assert!(r.records.is_empty(), "{claimed}: {:?}", r.records);
        assert!(r.response.is_fenced && !r.response.is_caught_up);
        assert!(
            c.sessions
                .session(1)
                .is_none_or(|s| s.metadata_offset != claimed)
        );
    }
    // At the log end exactly: caught up, unfenced.
    let req = BrokerHeartbeatRequest {
        broker_id: 1,
        broker_epoch: epoch,
        current_metadata_offset: log_end as i64,
        want_fence: false,
        want_shut_down: false,
    };
    let r = heartbeat(&c.image, &req, &mut c.sessions, c.now_ms, log_end);
    assert_eq!(code(&r.response.error), ErrorCode::None);
    assert!(!c.commit(r).is_fenced);
    assert!(!c.image.broker(1).unwrap().fenced);
}
