use super::*;
use crate::group::records::CommittedOffset;

fn cfg() -> GroupConfig {
    GroupConfig {
        initial_rebalance_delay_ms: 3_000,
        ..GroupConfig::default()
    }
}

fn join_req(member: &str, instance: Option<&str>, protocols: &[&str]) -> JoinRequest {
    JoinRequest {
        member_id: member.to_string(),
        instance_id: instance.map(str::to_string),
        protocol_type: "consumer".into(),
        protocols: protocols
            .iter()
            .map(|p| (p.to_string(), Bytes::from(format!("meta-{p}"))))
            .collect(),
        session_timeout_ms: 10_000,
        rebalance_timeout_ms: 30_000,
        client_id: "c".into(),
        client_host: "/127.0.0.1".into(),
        require_known_member_id: true,
    }
}

fn now_result(j: Joined) -> JoinResult {
    match j {
        Joined::Now(r) => r,
        Joined::Waiting => panic!("expected an answer now"),
    }
}

/// Joins a new member with the KIP-394 round trip; returns its id (the join waits).
fn join_new(g: &mut Group, token: u64, now: u64) -> (String, Effects) {
    let (j, _) = g.join(
        join_req("", None, &["range", "roundrobin"]),
        token,
        now,
        0,
        &cfg(),
    );
    let r = now_result(j);
    assert_eq!(r.error, ErrorCode::MemberIdRequired.code());
    let id = r.member_id;
    let (j, fx) = g.join(
        join_req(&id, None, &["range", "roundrobin"]),
        token,
        now,
        0,
        &cfg(),
    );
    assert!(matches!(j, Joined::Waiting));
    (id, fx)
}

/// Two members through the initial delay, the leader's sync: a Stable generation 1.
fn stable_pair() -> (Group, String, String) {
    let mut g = Group::new("g");
    let (a, fx) = join_new(&mut g, 1, 0);
    assert!(
        fx.joins.is_empty(),
        "the initial delay holds the first join"
    );
    assert_eq!(g.state, GroupState::PreparingRebalance);
    let (b, fx) = join_new(&mut g, 2, 100);
    assert!(fx.joins.is_empty());
    // The delay (3 s) is extended once because b joined during it.
    assert!(g.tick(3_000, 0, &cfg()).joins.is_empty());
    let fx = g.tick(6_000, 0, &cfg());
    assert_eq!(fx.joins.len(), 2);
    assert_eq!(g.state, GroupState::CompletingRebalance);
    assert_eq!(g.generation, 1);
    assert_eq!(g.protocol.as_deref(), Some("range"));
    let leader = g.leader.clone().unwrap();
    for (_, r) in &fx.joins {
        assert_eq!(r.error, 0);
        assert_eq!(r.generation, 1);
        assert_eq!(r.leader, leader);
        let expect = if r.member_id == leader { 2 } else { 0 };
        assert_eq!(r.members.len(), expect, "only the leader gets the members");
    }
    let follower = if leader == a { b.clone() } else { a.clone() };
    let (s, fx) = g.sync(sync_req(&follower, 1, vec![]), 10, 6_100, 0);
    assert!(matches!(s, Synced::Waiting));
    assert!(fx.syncs.is_empty());
    let assignments = vec![
        (a.clone(), Bytes::from_static(b"A")),
        (b.clone(), Bytes::from_static(b"B")),
    ];
    let (s, fx) = g.sync(sync_req(&leader, 1, assignments), 11, 6_200, 0);
    assert!(matches!(s, Synced::Waiting));
    assert!(fx.store, "an assignment is stored before it is given");
    assert_eq!(fx.syncs.len(), 2);
    for (t, r) in &fx.syncs {
        let want = if (*t == 10) == (follower == a) {
            "A"
        } else {
            "B"
        };
        assert_eq!(r.assignment, Bytes::from(want), "token {t}");
    }
    assert_eq!(g.state, GroupState::Stable);
    (g, a, b)
}

fn sync_req(member: &str, generation: i32, assignments: Vec<(String, Bytes)>) -> SyncRequest {
    SyncRequest {
        member_id: member.to_string(),
        instance_id: None,
        generation,
        protocol_type: Some("consumer".into()),
        protocol_name: Some("range".into()),
        assignments,
    }
}

#[test]
fn two_members_join_sync_and_become_stable() {
    let (g, _, _) = stable_pair();
    g.check();
}

#[test]
fn a_leaving_member_triggers_a_rebalance_the_other_completes() {
    let (mut g, a, b) = stable_pair();
    let (code, _) = g.leave(&a, None, 7_000, 0, &cfg());
    assert_eq!(code, ErrorCode::None);
    assert_eq!(g.state, GroupState::PreparingRebalance);
    assert_eq!(
        g.heartbeat(&b, None, 1, 7_100),
        ErrorCode::RebalanceInProgress
    );
    let (j, fx) = g.join(join_req(&b, None, &["range"]), 20, 7_200, 0, &cfg());
    assert!(matches!(j, Joined::Waiting));
    assert_eq!(
        fx.joins.len(),
        1,
        "every remaining member rejoined: done at once"
    );
    let r = &fx.joins[0].1;
    assert_eq!((r.generation, r.leader.as_str()), (2, b.as_str()));
    assert_eq!(r.members.len(), 1);
    assert_eq!(
        g.leave(&a, None, 7_300, 0, &cfg()).0,
        ErrorCode::UnknownMemberId
    );
}

#[test]
fn an_expired_session_removes_the_member() {
    let (mut g, a, b) = stable_pair();
    // b keeps heartbeating; a goes silent.
    assert_eq!(g.heartbeat(&b, None, 1, 12_000), ErrorCode::None);
    g.tick(16_300, 0, &cfg());
    assert!(!g.members.contains_key(&a), "a's session (10 s) expired");
    assert!(g.members.contains_key(&b));
    assert_eq!(g.state, GroupState::PreparingRebalance);
}

#[test]
fn members_that_do_not_rejoin_are_removed_at_the_rebalance_deadline() {
    let (mut g, a, b) = stable_pair();
    let (j, _) = g.join(join_req(&a, None, &["roundrobin"]), 30, 7_000, 0, &cfg());
    assert!(matches!(j, Joined::Waiting), "new protocols: a rebalance");
    // b keeps heartbeating (its session stays alive) but never rejoins; the rebalance
    // timeout is 30 s.
    for at in [8_000, 17_000, 26_000, 35_000] {
        assert_eq!(g.heartbeat(&b, None, 1, at), ErrorCode::RebalanceInProgress);
        assert!(g.tick(at + 1_000, 0, &cfg()).joins.is_empty());
    }
    let fx = g.tick(37_000, 0, &cfg());
    assert_eq!(fx.joins.len(), 1);
    assert!(!g.members.contains_key(&b));
    assert_eq!(g.protocol.as_deref(), Some("roundrobin"));
}

#[test]
fn bad_requests_get_kafkas_codes_and_change_nothing() {
    let (mut g, a, _) = stable_pair();
    let before = (g.generation, g.state, g.members.len());
    // SyncGroup from a stale generation.
    let (s, _) = g.sync(sync_req(&a, 0, vec![]), 40, 7_000, 0);
    assert!(matches!(s, Synced::Now(r) if r.error == ErrorCode::IllegalGeneration.code()));
    // Unknown protocol type.
    let mut other = join_req(&a, None, &["range"]);
    other.protocol_type = "connect".into();
    let (j, _) = g.join(other, 41, 7_000, 0, &cfg());
    assert_eq!(
        now_result(j).error,
        ErrorCode::InconsistentGroupProtocol.code()
    );
    // No shared protocol.
    let (j, _) = g.join(join_req("", None, &["sticky-only"]), 42, 7_000, 0, &cfg());
    assert_eq!(
        now_result(j).error,
        ErrorCode::InconsistentGroupProtocol.code()
    );
    // Commits from a non-member and from a stale generation.
    assert_eq!(
        g.validate_commit("nobody", None, 1, 7_000),
        ErrorCode::UnknownMemberId
    );
    assert_eq!(
        g.validate_commit(&a, None, 0, 7_000),
        ErrorCode::IllegalGeneration
    );
    assert_eq!(
        g.validate_commit("", None, -1, 7_000),
        ErrorCode::UnknownMemberId
    );
    assert_eq!(g.validate_commit(&a, None, 1, 7_000), ErrorCode::None);
    // Heartbeat with a wrong generation.
    assert_eq!(
        g.heartbeat(&a, None, 5, 7_000),
        ErrorCode::IllegalGeneration
    );
    assert_eq!(before, (g.generation, g.state, g.members.len()));
}

#[test]
fn admin_commits_only_into_an_empty_group() {
    let mut g = Group::new("g");
    assert_eq!(g.validate_commit("", None, -1, 0), ErrorCode::None);
    assert_eq!(
        g.validate_commit("", None, 3, 0),
        ErrorCode::IllegalGeneration
    );
}

#[test]
fn the_group_max_size_is_enforced() {
    let mut g = Group::new("g");
    let small = GroupConfig {
        max_size: 1,
        ..cfg()
    };
    let (j, _) = g.join(join_req("", None, &["range"]), 1, 0, 0, &small);
    assert_eq!(now_result(j).error, ErrorCode::MemberIdRequired.code());
    let (j, _) = g.join(join_req("", None, &["range"]), 2, 0, 0, &small);
    assert_eq!(now_result(j).error, ErrorCode::GroupMaxSizeReached.code());
}

#[test]
fn a_restarted_static_member_keeps_its_assignment_without_a_rebalance() {
    let mut g = Group::new("g");
    let cfg = GroupConfig {
        initial_rebalance_delay_ms: 0,
        ..cfg()
    };
    let (j, fx) = g.join(join_req("", Some("i1"), &["range"]), 1, 0, 0, &cfg);
    assert!(matches!(j, Joined::Waiting));
    assert!(fx.joins.is_empty());
    let fx = g.tick(1, 0, &cfg);
    let old = fx.joins[0].1.member_id.clone();
    let (_, fx) = g.sync(
        sync_req(&old, 1, vec![(old.clone(), Bytes::from_static(b"X"))]),
        2,
        2,
        0,
    );
    assert_eq!(fx.syncs[0].1.assignment, Bytes::from_static(b"X"));
    // The process restarts: same instance id, no member id.
    let (j, _) = g.join(join_req("", Some("i1"), &["range"]), 3, 100, 0, &cfg);
    let r = now_result(j);
    assert_eq!(
        (r.error, r.generation),
        (0, 1),
        "answered at once, same generation"
    );
    assert_ne!(r.member_id, old);
    assert_eq!(g.state, GroupState::Stable);
    assert_eq!(g.members[&r.member_id].assignment, Bytes::from_static(b"X"));
    // The old id is fenced.
    assert_eq!(
        g.heartbeat(&old, Some("i1"), 1, 200),
        ErrorCode::FencedInstanceId
    );
    g.check();
}

#[test]
fn the_stored_form_restores_a_stable_group() {
    let (g, a, b) = stable_pair();
    let restored = Group::from_stored("g", g.to_stored(), 50_000);
    assert_eq!(restored.state, GroupState::Stable);
    assert_eq!(restored.generation, 1);
    assert_eq!(restored.leader, g.leader);
    assert_eq!(restored.members[&a].assignment, g.members[&a].assignment);
    assert_eq!(restored.members[&b].session_deadline_ms, 60_000);
    let mut restored = restored;
    assert_eq!(restored.heartbeat(&a, None, 1, 50_100), ErrorCode::None);
}

#[test]
fn the_last_member_leaving_empties_the_group_and_stores_it() {
    let (mut g, a, b) = stable_pair();
    g.leave(&a, None, 7_000, 0, &cfg());
    let (_, fx) = g.leave(&b, None, 7_100, 0, &cfg());
    assert!(fx.store);
    assert_eq!(g.state, GroupState::Empty);
    assert_eq!(g.generation, 2);
    assert!(g.leader.is_none());
}

#[test]
fn a_handed_out_member_id_keeps_the_group_until_it_expires() {
    let mut g = Group::new("g");
    let (j, _) = g.join(join_req("", None, &["range"]), 1, 0, 0, &cfg());
    assert_eq!(now_result(j).error, ErrorCode::MemberIdRequired.code());
    assert!(!g.is_removable(), "the member comes back with its id");
    g.tick(10_001, 0, &cfg());
    assert!(g.is_removable(), "its id expired after the session timeout");
}

#[test]
fn offsets_expire_only_from_empty_groups_after_the_retention() {
    let commit = |ts| CommittedOffset {
        offset: 1,
        leader_epoch: -1,
        metadata: String::new(),
        commit_timestamp_ms: ts,
    };
    let (mut g, a, b) = stable_pair();
    g.offsets.insert(("t".into(), 0), commit(0));
    assert!(
        g.expired_offsets(i64::MAX / 2, 10).is_empty(),
        "a group with members keeps them"
    );
    g.leave(&a, None, 7_000, 1_000, &cfg());
    g.leave(&b, None, 7_000, 1_000, &cfg());
    assert_eq!(g.state, GroupState::Empty);
    assert_eq!(g.state_timestamp_ms, 1_000, "became empty at wall 1000");
    assert!(g.expired_offsets(1_009, 10).is_empty());
    assert_eq!(g.expired_offsets(1_010, 10), vec![("t".to_string(), 0)]);
    // A commit-only group: per offset, from its commit time.
    let mut simple = Group::new("s");
    simple.offsets.insert(("t".into(), 0), commit(100));
    simple.offsets.insert(("t".into(), 1), commit(200));
    assert_eq!(simple.expired_offsets(150, 50), vec![("t".to_string(), 0)]);
    assert_eq!(simple.expired_offsets(250, 50).len(), 2);
}

/// A `ConsumerProtocolSubscription` of `version` naming `topics` (Kafka's encoding: int16
/// version, int32 count, int16-length names, nullable user data; v1+ owned partitions, v2+
/// generation id, v3+ rack id).
fn subscription(version: i16, topics: &[&str]) -> Bytes {
    let mut b = Vec::new();
    b.extend_from_slice(&version.to_be_bytes());
    b.extend_from_slice(&(topics.len() as i32).to_be_bytes());
    for t in topics {
        b.extend_from_slice(&(t.len() as i16).to_be_bytes());
        b.extend_from_slice(t.as_bytes());
    }
    b.extend_from_slice(&(-1i32).to_be_bytes()); // user data: null
    if version >= 1 {
        b.extend_from_slice(&0i32.to_be_bytes()); // owned partitions: none
    }
    if version >= 2 {
        b.extend_from_slice(&(-1i32).to_be_bytes()); // generation id
    }
    if version >= 3 {
        b.extend_from_slice(&(-1i16).to_be_bytes()); // rack id: null
    }
    Bytes::from(b)
}

#[test]
fn subscriptions_are_read_at_every_version_and_damage_is_none() {
    for v in 0..=3 {
        assert_eq!(
            subscription_topics(&subscription(v, &["a", "b"])),
            Some(vec!["a".to_string(), "b".to_string()]),
            "v{v}"
        );
    }
    // A newer version than kafka-protocol knows is read as the newest it knows (fields a
    // later version appends are left unread).
    let mut newer = subscription(3, &["a"]).to_vec();
    newer[..2].copy_from_slice(&9i16.to_be_bytes());
    newer.extend_from_slice(&[1, 2, 3]);
    assert_eq!(subscription_topics(&Bytes::from(newer)).unwrap(), ["a"]);
    assert_eq!(
        subscription_topics(&Bytes::from_static(b"meta-range")),
        None
    );
    assert_eq!(subscription_topics(&Bytes::new()), None);
    assert_eq!(
        subscription_topics(&Bytes::from_static(&[0xff, 0xff])),
        None
    );
}

#[test]
fn offset_delete_refuses_subscribed_topics_and_groups_outside_the_consumer_protocol() {
    let mut g = Group::new("g");
    assert_eq!(g.check_offset_delete(), Ok(()));
    assert!(!g.subscribes_to("a"), "no members: nothing is subscribed");
    let mut req = join_req("", None, &["range"]);
    req.protocols = vec![("range".into(), subscription(1, &["a"]))];
    req.require_known_member_id = false;
    g.join(req.clone(), 1, 0, 0, &cfg());
    assert_eq!(g.members.len(), 1);
    assert_eq!(g.check_offset_delete(), Ok(()));
    assert!(g.subscribes_to("a"));
    assert!(!g.subscribes_to("b"));
    // Metadata that is not a subscription: every topic counts as subscribed.
    let mut other = Group::new("h");
    g.members.values_mut().for_each(|m| {
        m.protocols = vec![("range".into(), Bytes::from_static(b"??"))];
    });
    assert!(g.subscribes_to("b"));
    // A group with members of another protocol type (Connect): NON_EMPTY_GROUP.
    req.protocol_type = "connect".into();
    other.join(req, 1, 0, 0, &cfg());
    assert_eq!(other.check_offset_delete(), Err(ErrorCode::NonEmptyGroup));
}
