//! One consumer group under Kafka's classic group protocol (Kafka's `ClassicGroup` and the
//! join/sync/heartbeat/leave rules of `GroupMetadataManager` / the old `GroupCoordinator`):
//! pure state, no I/O, no clock — every operation is given `now_ms` (a monotonic clock, ms)
//! and a waiter token, and returns what to answer now and which waiting requests to answer.
//!
//! States (Kafka's names, as DescribeGroups reports them):
//! - `Empty`: no members; the group may hold committed offsets.
//! - `PreparingRebalance`: a rebalance started; known members must rejoin (JoinGroup) before
//!   the rebalance deadline; the first rebalance of an empty group waits
//!   `group.initial.rebalance.delay.ms` (extended while members keep arriving) so a starting
//!   fleet joins in one generation.
//! - `CompletingRebalance`: every member got its JoinGroup answer; waiting for the leader's
//!   SyncGroup with the assignment.
//! - `Stable`: the leader's assignment is in place; members heartbeat.
//! - `Dead`: the group was deleted or its coordinator moved (never stored in a map here).
//!
//! Invariants (asserted in debug by [`Group::check`]): the leader, when set, is a member;
//! `static_members` maps each static member's instance id to its member id and nothing else;
//! a waiter token is held by at most one member; `Empty` has no members; a member awaiting
//! sync exists only in `CompletingRebalance`.

use std::collections::{BTreeMap, HashMap};

use bytes::Bytes;
use keel_proto::ErrorCode;

use super::records::{CommittedOffset, StoredGroup, StoredMember};

/// Limits and timers of the group protocol (Kafka's broker configs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupConfig {
    /// `group.min.session.timeout.ms` (6000): shorter session timeouts are
    /// INVALID_SESSION_TIMEOUT.
    pub min_session_timeout_ms: i32,
    /// `group.max.session.timeout.ms` (1800000): longer ones are INVALID_SESSION_TIMEOUT.
    pub max_session_timeout_ms: i32,
    /// `group.initial.rebalance.delay.ms` (3000): how long the first rebalance of an empty
    /// group waits for more members, ms.
    pub initial_rebalance_delay_ms: i32,
    /// `group.max.size`: most members (and members awaiting their id) per group;
    /// more is GROUP_MAX_SIZE_REACHED. Kafka's default is unbounded; Keel's is 1000.
    pub max_size: usize,
}

impl Default for GroupConfig {
    fn default() -> Self {
        Self {
            min_session_timeout_ms: 6_000,
            max_session_timeout_ms: 1_800_000,
            initial_rebalance_delay_ms: 3_000,
            max_size: 1_000,
        }
    }
}

/// A group's state (Kafka's `ClassicGroupState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupState {
    /// No members.
    Empty,
    /// Waiting for members to (re)join.
    PreparingRebalance,
    /// Waiting for the leader's assignment.
    CompletingRebalance,
    /// Assignment in place.
    Stable,
}

impl GroupState {
    /// The name Kafka reports (DescribeGroups, ListGroups).
    pub fn as_str(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
        }
    }
}

/// One member.
#[derive(Debug, Clone)]
pub struct Member {
    /// Coordinator-given id.
    pub member_id: String,
    /// Static membership id (KIP-345).
    pub instance_id: Option<String>,
    /// `client.id`.
    pub client_id: String,
    /// Client address as Kafka prints it (`/127.0.0.1`).
    pub client_host: String,
    /// ms, within the configured bounds.
    pub session_timeout_ms: i32,
    /// ms; a rebalance waits at most the largest of the members'.
    pub rebalance_timeout_ms: i32,
    /// The member's protocols (assignor name, metadata) in preference order.
    pub protocols: Vec<(String, Bytes)>,
    /// The leader's assignment for this member (empty until the first sync).
    pub assignment: Bytes,
    /// A JoinGroup waiting for the rebalance to complete.
    pub awaiting_join: Option<u64>,
    /// A SyncGroup waiting for the leader's assignment.
    pub awaiting_sync: Option<u64>,
    /// The member is removed if not heard from by then (monotonic ms).
    pub session_deadline_ms: u64,
}

impl Member {
    fn metadata_for(&self, protocol: &str) -> Bytes {
        self.protocols
            .iter()
            .find(|(n, _)| n == protocol)
            .map(|(_, m)| m.clone())
            .unwrap_or_default()
    }
}

/// A JoinGroup as the state machine sees it (already validated: group id, session timeout
/// range, coordinator ownership).
#[derive(Debug, Clone)]
pub struct JoinRequest {
    /// Empty for a new member.
    pub member_id: String,
    /// Static membership id.
    pub instance_id: Option<String>,
    /// `consumer` for consumers.
    pub protocol_type: String,
    /// (name, metadata) in preference order.
    pub protocols: Vec<(String, Bytes)>,
    /// ms.
    pub session_timeout_ms: i32,
    /// ms (v0: the session timeout).
    pub rebalance_timeout_ms: i32,
    /// `client.id`.
    pub client_id: String,
    /// The client's address.
    pub client_host: String,
    /// JoinGroup v4+: a new dynamic member first gets MEMBER_ID_REQUIRED with its id
    /// (KIP-394).
    pub require_known_member_id: bool,
}

/// The answer to a JoinGroup.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JoinResult {
    /// Kafka error code.
    pub error: i16,
    /// Generation id (-1 on error).
    pub generation: i32,
    /// The group's protocol type.
    pub protocol_type: Option<String>,
    /// The chosen protocol.
    pub protocol_name: Option<String>,
    /// Leader member id.
    pub leader: String,
    /// The member's id (also on MEMBER_ID_REQUIRED).
    pub member_id: String,
    /// For the leader: every member with its metadata for the chosen protocol.
    pub members: Vec<(String, Option<String>, Bytes)>,
}

impl JoinResult {
    fn error(code: ErrorCode, member_id: &str) -> Self {
        Self {
            error: code.code(),
            generation: -1,
            member_id: member_id.to_string(),
            ..Default::default()
        }
    }
}

/// A SyncGroup as the state machine sees it.
#[derive(Debug, Clone)]
pub struct SyncRequest {
    /// Member id.
    pub member_id: String,
    /// Static membership id.
    pub instance_id: Option<String>,
    /// The generation the member joined.
    pub generation: i32,
    /// v5+: must match the group's.
    pub protocol_type: Option<String>,
    /// v5+: must match the group's.
    pub protocol_name: Option<String>,
    /// The leader's assignment (member id, assignment); empty from followers.
    pub assignments: Vec<(String, Bytes)>,
}

/// The answer to a SyncGroup.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SyncResult {
    /// Kafka error code.
    pub error: i16,
    /// The group's protocol type.
    pub protocol_type: Option<String>,
    /// The chosen protocol.
    pub protocol_name: Option<String>,
    /// This member's assignment.
    pub assignment: Bytes,
}

impl SyncResult {
    fn error(code: ErrorCode) -> Self {
        Self {
            error: code.code(),
            ..Default::default()
        }
    }
}

/// Waiting requests to answer and whether the group's metadata must be stored first.
#[derive(Debug, Default)]
pub struct Effects {
    /// JoinGroup answers by waiter token.
    pub joins: Vec<(u64, JoinResult)>,
    /// SyncGroup answers by waiter token. When `store` is set they are sent only after the
    /// group's metadata record is written (an error replaces them if the write fails).
    pub syncs: Vec<(u64, SyncResult)>,
    /// The group's metadata changed in a way Kafka persists (an assignment, an empty group).
    pub store: bool,
}

impl Effects {
    fn merge(&mut self, other: Effects) {
        self.joins.extend(other.joins);
        self.syncs.extend(other.syncs);
        self.store |= other.store;
    }
}

/// A JoinGroup's outcome now: answered, or waiting (its answer comes through [`Effects`]).
#[derive(Debug)]
pub enum Joined {
    /// Answer now.
    Now(JoinResult),
    /// The token is held; the answer comes later.
    Waiting,
}

/// A SyncGroup's outcome now.
#[derive(Debug)]
pub enum Synced {
    /// Answer now.
    Now(SyncResult),
    /// The token is held; the answer comes later.
    Waiting,
}

/// The first rebalance of an empty group (Kafka's `InitialDelayedJoin`).
#[derive(Debug, Clone, Copy)]
struct InitialDelay {
    /// Time left to extend the wait by, ms.
    remaining_ms: i32,
    /// A member joined since the current wait started.
    member_joined: bool,
}

/// One classic group and its committed offsets.
#[derive(Debug, Clone)]
pub struct Group {
    /// Group id.
    pub id: String,
    /// Current state.
    pub state: GroupState,
    /// Generation id; bumped by every completed join.
    pub generation: i32,
    /// Protocol type of the members (`consumer`); `None` while empty.
    pub protocol_type: Option<String>,
    /// Chosen protocol of the current generation.
    pub protocol: Option<String>,
    /// Leader member id. Invariant: a member.
    pub leader: Option<String>,
    /// Members by id.
    pub members: BTreeMap<String, Member>,
    /// Member ids handed out with MEMBER_ID_REQUIRED, with their expiry (monotonic ms).
    pub pending: BTreeMap<String, u64>,
    /// Instance id -> member id of static members.
    pub static_members: HashMap<String, String>,
    /// When a PreparingRebalance ends at the latest (monotonic ms).
    rebalance_deadline_ms: u64,
    initial_delay: Option<InitialDelay>,
    /// When the group entered its state (wall ms, for GroupMetadataValue).
    pub state_timestamp_ms: i64,
    /// Committed offsets by (topic, partition).
    pub offsets: BTreeMap<(String, i32), CommittedOffset>,
}

impl Group {
    /// A new empty group.
    pub fn new(id: &str) -> Self {
        Self {
            id: id.to_string(),
            state: GroupState::Empty,
            generation: 0,
            protocol_type: None,
            protocol: None,
            leader: None,
            members: BTreeMap::new(),
            pending: BTreeMap::new(),
            static_members: HashMap::new(),
            rebalance_deadline_ms: 0,
            initial_delay: None,
            state_timestamp_ms: -1,
            offsets: BTreeMap::new(),
        }
    }

    /// The group as loaded from its GroupMetadataValue: `Stable` with its members (their
    /// sessions restart at `now_ms`, as Kafka reschedules every loaded member's heartbeat),
    /// or `Empty`.
    pub fn from_stored(id: &str, stored: StoredGroup, now_ms: u64) -> Self {
        let mut g = Group::new(id);
        g.generation = stored.generation;
        g.protocol_type = (!stored.protocol_type.is_empty()).then_some(stored.protocol_type);
        g.protocol = stored.protocol;
        g.state_timestamp_ms = stored.current_state_timestamp_ms;
        for m in stored.members {
            let protocol = g.protocol.clone().unwrap_or_default();
            if let Some(i) = &m.group_instance_id {
                g.static_members.insert(i.clone(), m.member_id.clone());
            }
            g.members.insert(
                m.member_id.clone(),
                Member {
                    member_id: m.member_id,
                    instance_id: m.group_instance_id,
                    client_id: m.client_id,
                    client_host: m.client_host,
                    session_timeout_ms: m.session_timeout_ms,
                    rebalance_timeout_ms: m.rebalance_timeout_ms,
                    protocols: vec![(protocol, m.subscription)],
                    assignment: m.assignment,
                    awaiting_join: None,
                    awaiting_sync: None,
                    session_deadline_ms: now_ms + m.session_timeout_ms.max(0) as u64,
                },
            );
        }
        if g.members.is_empty() {
            g.protocol = None;
        } else {
            g.state = GroupState::Stable;
            g.leader = stored.leader.filter(|l| g.members.contains_key(l));
            if g.leader.is_none() {
                g.leader = g.members.keys().next().cloned();
            }
        }
        g.check();
        g
    }

    /// The metadata Kafka stores for the group (GroupMetadataValue).
    pub fn to_stored(&self) -> StoredGroup {
        let protocol = self.protocol.clone().unwrap_or_default();
        StoredGroup {
            protocol_type: self.protocol_type.clone().unwrap_or_default(),
            generation: self.generation,
            protocol: self.protocol.clone(),
            leader: self.leader.clone(),
            current_state_timestamp_ms: self.state_timestamp_ms,
            members: self
                .members
                .values()
                .map(|m| StoredMember {
                    member_id: m.member_id.clone(),
                    group_instance_id: m.instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    rebalance_timeout_ms: m.rebalance_timeout_ms,
                    session_timeout_ms: m.session_timeout_ms,
                    subscription: m.metadata_for(&protocol),
                    assignment: m.assignment.clone(),
                })
                .collect(),
        }
    }

    /// True when the group holds nothing worth keeping (no members, no member id handed
    /// out, no offsets).
    pub fn is_removable(&self) -> bool {
        self.state == GroupState::Empty
            && self.members.is_empty()
            && self.pending.is_empty()
            && self.offsets.is_empty()
    }

    /// Asserts the invariants (debug builds).
    pub fn check(&self) {
        debug_assert!(
            self.leader
                .as_ref()
                .is_none_or(|l| self.members.contains_key(l)),
            "group {}: leader is not a member",
            self.id
        );
        debug_assert!(
            self.state != GroupState::Empty || self.members.is_empty(),
            "group {}: Empty with members",
            self.id
        );
        debug_assert!(
            self.static_members.iter().all(|(i, m)| self
                .members
                .get(m)
                .and_then(|m| m.instance_id.as_ref())
                == Some(i)),
            "group {}: static member map out of step",
            self.id
        );
        debug_assert!(
            self.state == GroupState::CompletingRebalance
                || self.members.values().all(|m| m.awaiting_sync.is_none()),
            "group {}: sync waiter outside CompletingRebalance",
            self.id
        );
    }

    fn set_state(&mut self, state: GroupState, wall_ms: i64) {
        self.state = state;
        self.state_timestamp_ms = wall_ms;
    }

    /// Protocols every member supports (in the first member's order).
    fn candidate_protocols(&self) -> Vec<String> {
        let mut it = self.members.values();
        let Some(first) = it.next() else {
            return Vec::new();
        };
        let mut out: Vec<String> = first.protocols.iter().map(|(n, _)| n.clone()).collect();
        for m in it {
            out.retain(|n| m.protocols.iter().any(|(p, _)| p == n));
        }
        out
    }

    /// Kafka's `ClassicGroup.supportsProtocols`: an empty group takes any non-empty type and
    /// protocol list; otherwise the type must match and one protocol be shared by all.
    fn supports(&self, protocol_type: &str, protocols: &[(String, Bytes)]) -> bool {
        if protocol_type.is_empty() || protocols.is_empty() {
            return false;
        }
        if self.members.is_empty() {
            return true;
        }
        self.protocol_type.as_deref() == Some(protocol_type)
            && self
                .candidate_protocols()
                .iter()
                .any(|c| protocols.iter().any(|(p, _)| p == c))
    }

    /// Kafka's `ClassicGroup.selectProtocol`: each member votes for its most preferred
    /// candidate; the most votes win (ties: the earlier candidate).
    fn select_protocol(&self) -> Option<String> {
        let candidates = self.candidate_protocols();
        let mut votes = vec![0usize; candidates.len()];
        for m in self.members.values() {
            if let Some(i) = m
                .protocols
                .iter()
                .find_map(|(p, _)| candidates.iter().position(|c| c == p))
            {
                votes[i] += 1;
            }
        }
        let best = votes
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(&a.0)))?;
        candidates.get(best.0).cloned()
    }

    fn new_member_id(client_id: &str) -> String {
        // Kafka: `clientId + "-" + UUID`.
        format!("{client_id}-{}", uuid::Uuid::new_v4())
    }

    fn max_rebalance_timeout_ms(&self) -> i32 {
        self.members
            .values()
            .map(|m| m.rebalance_timeout_ms)
            .max()
            .unwrap_or(0)
    }

    /// JoinGroup (Kafka `GroupCoordinator.handleJoinGroup`). `token` identifies this request
    /// if it has to wait.
    pub fn join(
        &mut self,
        req: JoinRequest,
        token: u64,
        now_ms: u64,
        wall_ms: i64,
        cfg: &GroupConfig,
    ) -> (Joined, Effects) {
        let mut fx = Effects::default();
        if !self.supports(&req.protocol_type, &req.protocols) {
            return (
                Joined::Now(JoinResult::error(
                    ErrorCode::InconsistentGroupProtocol,
                    &req.member_id,
                )),
                fx,
            );
        }
        if req.member_id.is_empty() {
            if let Some(old_id) = req
                .instance_id
                .as_ref()
                .and_then(|i| self.static_members.get(i).cloned())
            {
                return self.replace_static_member(&old_id, req, token, now_ms, wall_ms, cfg);
            }
            if self.members.len() + self.pending.len() >= cfg.max_size {
                return (
                    Joined::Now(JoinResult::error(ErrorCode::GroupMaxSizeReached, "")),
                    fx,
                );
            }
            let id = Self::new_member_id(&req.client_id);
            if req.require_known_member_id && req.instance_id.is_none() {
                // KIP-394: the member must come back with this id.
                self.pending
                    .insert(id.clone(), now_ms + req.session_timeout_ms.max(0) as u64);
                return (
                    Joined::Now(JoinResult::error(ErrorCode::MemberIdRequired, &id)),
                    fx,
                );
            }
            self.add_member(id, req, token, now_ms, wall_ms, cfg, &mut fx);
            self.check();
            return (Joined::Waiting, fx);
        }
        if self.pending.remove(&req.member_id).is_some() {
            let id = req.member_id.clone();
            self.add_member(id, req, token, now_ms, wall_ms, cfg, &mut fx);
            self.check();
            return (Joined::Waiting, fx);
        }
        if let Err(code) = self.validate_member(&req.member_id, req.instance_id.as_deref()) {
            return (Joined::Now(JoinResult::error(code, &req.member_id)), fx);
        }
        let id = req.member_id.clone();
        let changed = {
            let m = &self.members[&id];
            m.protocols != req.protocols
        };
        match self.state {
            GroupState::PreparingRebalance => {
                self.update_member(&id, req, token, now_ms, &mut fx);
                self.maybe_complete_join(now_ms, wall_ms, &mut fx);
                self.check();
                (Joined::Waiting, fx)
            }
            GroupState::CompletingRebalance | GroupState::Stable
                if !changed
                    && (self.state == GroupState::CompletingRebalance
                        || self.leader.as_deref() != Some(id.as_str())) =>
            {
                // Nothing changed: answer with the current generation (the leader, rejoining
                // while CompletingRebalance, gets the member list again).
                let m = self.members.get_mut(&id).expect("validated member");
                m.session_deadline_ms = now_ms + m.session_timeout_ms.max(0) as u64;
                (Joined::Now(self.join_result(&id)), fx)
            }
            GroupState::CompletingRebalance | GroupState::Stable => {
                self.update_member(&id, req, token, now_ms, &mut fx);
                self.prepare_rebalance(now_ms, wall_ms, cfg, &mut fx);
                self.maybe_complete_join(now_ms, wall_ms, &mut fx);
                self.check();
                (Joined::Waiting, fx)
            }
            GroupState::Empty => (
                Joined::Now(JoinResult::error(ErrorCode::UnknownMemberId, &id)),
                fx,
            ),
        }
    }

    /// KIP-345: a static member rejoining without its member id (a restarted process) takes
    /// a new id; requests with the old id are FENCED_INSTANCE_ID from now on. A stable group
    /// whose member's protocols did not change answers at once with the current generation
    /// and keeps its assignment (no rebalance); otherwise the group rebalances.
    fn replace_static_member(
        &mut self,
        old_id: &str,
        req: JoinRequest,
        token: u64,
        now_ms: u64,
        wall_ms: i64,
        cfg: &GroupConfig,
    ) -> (Joined, Effects) {
        let mut fx = Effects::default();
        let new_id = Self::new_member_id(&req.client_id);
        let mut member = self
            .members
            .remove(old_id)
            .expect("static map points to a member");
        if let Some(t) = member.awaiting_join.take() {
            fx.joins
                .push((t, JoinResult::error(ErrorCode::FencedInstanceId, old_id)));
        }
        if let Some(t) = member.awaiting_sync.take() {
            fx.syncs
                .push((t, SyncResult::error(ErrorCode::FencedInstanceId)));
        }
        let unchanged = member.protocols == req.protocols;
        member.member_id = new_id.clone();
        self.members.insert(new_id.clone(), member);
        let instance = req.instance_id.clone().expect("static join");
        self.static_members.insert(instance, new_id.clone());
        if self.leader.as_deref() == Some(old_id) {
            self.leader = Some(new_id.clone());
        }
        if self.state == GroupState::Stable && unchanged {
            let m = self.members.get_mut(&new_id).expect("just inserted");
            m.session_timeout_ms = req.session_timeout_ms;
            m.rebalance_timeout_ms = req.rebalance_timeout_ms;
            m.client_id = req.client_id;
            m.client_host = req.client_host;
            m.session_deadline_ms = now_ms + m.session_timeout_ms.max(0) as u64;
            self.check();
            return (Joined::Now(self.join_result(&new_id)), fx);
        }
        self.update_member(&new_id, req, token, now_ms, &mut fx);
        if self.state != GroupState::PreparingRebalance {
            self.prepare_rebalance(now_ms, wall_ms, cfg, &mut fx);
        }
        self.maybe_complete_join(now_ms, wall_ms, &mut fx);
        self.check();
        (Joined::Waiting, fx)
    }

    #[allow(clippy::too_many_arguments)]
    fn add_member(
        &mut self,
        id: String,
        req: JoinRequest,
        token: u64,
        now_ms: u64,
        wall_ms: i64,
        cfg: &GroupConfig,
        fx: &mut Effects,
    ) {
        if self.members.is_empty() {
            self.protocol_type = Some(req.protocol_type.clone());
        }
        if let Some(i) = &req.instance_id {
            self.static_members.insert(i.clone(), id.clone());
        }
        self.members.insert(
            id.clone(),
            Member {
                member_id: id.clone(),
                instance_id: req.instance_id,
                client_id: req.client_id,
                client_host: req.client_host,
                session_timeout_ms: req.session_timeout_ms,
                rebalance_timeout_ms: req.rebalance_timeout_ms,
                protocols: req.protocols,
                assignment: Bytes::new(),
                awaiting_join: Some(token),
                awaiting_sync: None,
                session_deadline_ms: now_ms + req.session_timeout_ms.max(0) as u64,
            },
        );
        if let Some(d) = &mut self.initial_delay {
            d.member_joined = true;
        }
        if self.state != GroupState::PreparingRebalance {
            self.prepare_rebalance(now_ms, wall_ms, cfg, fx);
        }
        self.maybe_complete_join(now_ms, wall_ms, fx);
    }

    fn update_member(
        &mut self,
        id: &str,
        req: JoinRequest,
        token: u64,
        now_ms: u64,
        fx: &mut Effects,
    ) {
        let m = self.members.get_mut(id).expect("known member");
        if let Some(old) = m.awaiting_join.replace(token) {
            // A second JoinGroup from the same member supersedes the first (Kafka replaces
            // the callback); the first is told to rejoin.
            fx.joins
                .push((old, JoinResult::error(ErrorCode::RebalanceInProgress, id)));
        }
        m.protocols = req.protocols;
        m.session_timeout_ms = req.session_timeout_ms;
        m.rebalance_timeout_ms = req.rebalance_timeout_ms;
        m.client_id = req.client_id;
        m.client_host = req.client_host;
        m.session_deadline_ms = now_ms + m.session_timeout_ms.max(0) as u64;
    }

    /// Kafka `prepareRebalance`: sync waiters are told REBALANCE_IN_PROGRESS; an empty group
    /// waits the initial delay, others up to the largest rebalance timeout.
    fn prepare_rebalance(
        &mut self,
        now_ms: u64,
        wall_ms: i64,
        cfg: &GroupConfig,
        fx: &mut Effects,
    ) {
        if self.state == GroupState::CompletingRebalance {
            for m in self.members.values_mut() {
                if let Some(t) = m.awaiting_sync.take() {
                    fx.syncs
                        .push((t, SyncResult::error(ErrorCode::RebalanceInProgress)));
                }
            }
        }
        let max_rebalance = self.max_rebalance_timeout_ms().max(0);
        tracing::info!(
            group = %self.id,
            state = self.state.as_str(),
            generation = self.generation,
            members = self.members.len(),
            "preparing to rebalance group"
        );
        if self.state == GroupState::Empty {
            let delay = cfg.initial_rebalance_delay_ms.clamp(0, max_rebalance);
            self.initial_delay = Some(InitialDelay {
                remaining_ms: max_rebalance - delay,
                member_joined: false,
            });
            self.rebalance_deadline_ms = now_ms + delay as u64;
        } else {
            self.initial_delay = None;
            self.rebalance_deadline_ms = now_ms + max_rebalance as u64;
        }
        self.set_state(GroupState::PreparingRebalance, wall_ms);
    }

    /// Completes the join once every member has rejoined and no member id is pending (not
    /// during the initial delay, which only its timer ends).
    fn maybe_complete_join(&mut self, now_ms: u64, wall_ms: i64, fx: &mut Effects) {
        if self.state == GroupState::PreparingRebalance
            && self.initial_delay.is_none()
            && self.pending.is_empty()
            && self.members.values().all(|m| m.awaiting_join.is_some())
        {
            self.complete_join(now_ms, wall_ms, fx);
        }
    }

    /// Kafka `onCompleteJoin`: members that did not rejoin are removed, the generation is
    /// bumped, the leader gets every member's metadata.
    fn complete_join(&mut self, now_ms: u64, wall_ms: i64, fx: &mut Effects) {
        let gone: Vec<String> = self
            .members
            .values()
            .filter(|m| m.awaiting_join.is_none())
            .map(|m| m.member_id.clone())
            .collect();
        for id in gone {
            self.remove_member_entry(&id);
        }
        self.initial_delay = None;
        self.generation = self.generation.wrapping_add(1).max(1);
        if self.members.is_empty() {
            // Kafka keeps the protocol type of an emptied group (DescribeGroups and
            // ListGroups still show `consumer`); a new member may bring any.
            self.protocol = None;
            self.leader = None;
            self.set_state(GroupState::Empty, wall_ms);
            fx.store = true;
            return;
        }
        self.protocol = self.select_protocol();
        metrics::counter!("keel_broker_group_coordinator_rebalances_total").increment(1);
        tracing::info!(
            group = %self.id,
            generation = self.generation,
            members = self.members.len(),
            protocol = self.protocol.as_deref().unwrap_or(""),
            "group joined: waiting for the leader's assignment"
        );
        if self
            .leader
            .as_ref()
            .is_none_or(|l| !self.members.contains_key(l))
        {
            self.leader = self.members.keys().next().cloned();
        }
        self.set_state(GroupState::CompletingRebalance, wall_ms);
        let ids: Vec<String> = self.members.keys().cloned().collect();
        for id in ids {
            let result = self.join_result(&id);
            let m = self.members.get_mut(&id).expect("member");
            m.session_deadline_ms = now_ms + m.session_timeout_ms.max(0) as u64;
            if let Some(t) = m.awaiting_join.take() {
                fx.joins.push((t, result));
            }
        }
    }

    fn join_result(&self, id: &str) -> JoinResult {
        let protocol = self.protocol.clone().unwrap_or_default();
        let leader = self.leader.clone().unwrap_or_default();
        let members = if leader == id {
            self.members
                .values()
                .map(|m| {
                    (
                        m.member_id.clone(),
                        m.instance_id.clone(),
                        m.metadata_for(&protocol),
                    )
                })
                .collect()
        } else {
            Vec::new()
        };
        JoinResult {
            error: 0,
            generation: self.generation,
            protocol_type: self.protocol_type.clone(),
            protocol_name: self.protocol.clone(),
            leader,
            member_id: id.to_string(),
            members,
        }
    }

    /// UNKNOWN_MEMBER_ID for an unknown member; FENCED_INSTANCE_ID when the instance id
    /// belongs to another member id (KIP-345).
    fn validate_member(&self, member_id: &str, instance_id: Option<&str>) -> Result<(), ErrorCode> {
        if let Some(i) = instance_id {
            match self.static_members.get(i) {
                Some(m) if m == member_id => return Ok(()),
                Some(_) => return Err(ErrorCode::FencedInstanceId),
                None => {}
            }
        }
        if self.members.contains_key(member_id) {
            Ok(())
        } else {
            Err(ErrorCode::UnknownMemberId)
        }
    }

    fn touch(&mut self, member_id: &str, now_ms: u64) {
        if let Some(m) = self.members.get_mut(member_id) {
            m.session_deadline_ms = now_ms + m.session_timeout_ms.max(0) as u64;
        }
    }

    /// SyncGroup (Kafka `handleSyncGroup`).
    pub fn sync(
        &mut self,
        req: SyncRequest,
        token: u64,
        now_ms: u64,
        wall_ms: i64,
    ) -> (Synced, Effects) {
        let mut fx = Effects::default();
        if self.state == GroupState::Empty {
            return (
                Synced::Now(SyncResult::error(ErrorCode::UnknownMemberId)),
                fx,
            );
        }
        if let Err(code) = self.validate_member(&req.member_id, req.instance_id.as_deref()) {
            return (Synced::Now(SyncResult::error(code)), fx);
        }
        if req.generation != self.generation {
            return (
                Synced::Now(SyncResult::error(ErrorCode::IllegalGeneration)),
                fx,
            );
        }
        let type_mismatch = req
            .protocol_type
            .as_ref()
            .is_some_and(|t| Some(t) != self.protocol_type.as_ref());
        let name_mismatch = req
            .protocol_name
            .as_ref()
            .is_some_and(|n| Some(n) != self.protocol.as_ref());
        if type_mismatch || name_mismatch {
            return (
                Synced::Now(SyncResult::error(ErrorCode::InconsistentGroupProtocol)),
                fx,
            );
        }
        self.touch(&req.member_id, now_ms);
        match self.state {
            GroupState::Empty | GroupState::PreparingRebalance => (
                Synced::Now(SyncResult::error(ErrorCode::RebalanceInProgress)),
                fx,
            ),
            GroupState::Stable => (Synced::Now(self.sync_result(&req.member_id)), fx),
            GroupState::CompletingRebalance => {
                let m = self.members.get_mut(&req.member_id).expect("validated");
                if let Some(old) = m.awaiting_sync.replace(token) {
                    fx.syncs
                        .push((old, SyncResult::error(ErrorCode::RebalanceInProgress)));
                }
                if self.leader.as_deref() == Some(req.member_id.as_str()) {
                    let mut given: HashMap<String, Bytes> = req.assignments.into_iter().collect();
                    for m in self.members.values_mut() {
                        m.assignment = given.remove(&m.member_id).unwrap_or_default();
                    }
                    self.set_state(GroupState::Stable, wall_ms);
                    let ids: Vec<String> = self.members.keys().cloned().collect();
                    for id in ids {
                        let result = self.sync_result(&id);
                        let m = self.members.get_mut(&id).expect("member");
                        if let Some(t) = m.awaiting_sync.take() {
                            fx.syncs.push((t, result));
                        }
                    }
                    fx.store = true;
                }
                self.check();
                (Synced::Waiting, fx)
            }
        }
    }

    fn sync_result(&self, id: &str) -> SyncResult {
        SyncResult {
            error: 0,
            protocol_type: self.protocol_type.clone(),
            protocol_name: self.protocol.clone(),
            assignment: self
                .members
                .get(id)
                .map(|m| m.assignment.clone())
                .unwrap_or_default(),
        }
    }

    /// The group's metadata store failed (Kafka: the assignment is dropped and the group
    /// rebalances); the sync answers carry `code` instead.
    pub fn store_failed(&mut self, now_ms: u64, wall_ms: i64, cfg: &GroupConfig) -> Effects {
        let mut fx = Effects::default();
        if self.state == GroupState::Stable {
            for m in self.members.values_mut() {
                m.assignment = Bytes::new();
            }
            self.prepare_rebalance(now_ms, wall_ms, cfg, &mut fx);
        }
        fx
    }

    /// Heartbeat (Kafka `handleHeartbeat`).
    pub fn heartbeat(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        now_ms: u64,
    ) -> ErrorCode {
        if self.state == GroupState::Empty {
            return ErrorCode::UnknownMemberId;
        }
        if let Err(code) = self.validate_member(member_id, instance_id) {
            return code;
        }
        if generation != self.generation {
            return ErrorCode::IllegalGeneration;
        }
        self.touch(member_id, now_ms);
        match self.state {
            GroupState::PreparingRebalance => ErrorCode::RebalanceInProgress,
            _ => ErrorCode::None,
        }
    }

    /// LeaveGroup for one member (v3+ name members by id or by instance id). Returns the
    /// member's error and the effects of its leaving.
    pub fn leave(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
        now_ms: u64,
        wall_ms: i64,
        cfg: &GroupConfig,
    ) -> (ErrorCode, Effects) {
        let mut fx = Effects::default();
        let id = match instance_id {
            Some(i) => match self.static_members.get(i) {
                Some(m) if member_id.is_empty() || m == member_id => m.clone(),
                Some(_) => return (ErrorCode::FencedInstanceId, fx),
                None => return (ErrorCode::UnknownMemberId, fx),
            },
            None => member_id.to_string(),
        };
        if self.pending.remove(&id).is_some() {
            self.maybe_complete_join(now_ms, wall_ms, &mut fx);
            return (ErrorCode::None, fx);
        }
        if !self.members.contains_key(&id) {
            return (ErrorCode::UnknownMemberId, fx);
        }
        self.remove_member(&id, now_ms, wall_ms, cfg, &mut fx);
        self.check();
        (ErrorCode::None, fx)
    }

    fn remove_member_entry(&mut self, id: &str) -> Option<Member> {
        let m = self.members.remove(id)?;
        if let Some(i) = &m.instance_id {
            self.static_members.remove(i);
        }
        if self.leader.as_deref() == Some(id) {
            self.leader = None;
        }
        Some(m)
    }

    /// Kafka `removeMemberAndUpdateGroup`.
    fn remove_member(
        &mut self,
        id: &str,
        now_ms: u64,
        wall_ms: i64,
        cfg: &GroupConfig,
        fx: &mut Effects,
    ) {
        let Some(m) = self.remove_member_entry(id) else {
            return;
        };
        if let Some(t) = m.awaiting_join {
            fx.joins
                .push((t, JoinResult::error(ErrorCode::UnknownMemberId, id)));
        }
        if let Some(t) = m.awaiting_sync {
            fx.syncs
                .push((t, SyncResult::error(ErrorCode::UnknownMemberId)));
        }
        if self.leader.is_none() {
            self.leader = self.members.keys().next().cloned();
        }
        match self.state {
            GroupState::Stable | GroupState::CompletingRebalance => {
                // Kafka's DelayedJoin is tried at once: with every remaining member already
                // waiting (none left, say) the join completes now.
                self.prepare_rebalance(now_ms, wall_ms, cfg, fx);
                self.maybe_complete_join(now_ms, wall_ms, fx);
            }
            GroupState::PreparingRebalance => {
                if self.members.is_empty() && self.initial_delay.is_none() {
                    self.complete_join(now_ms, wall_ms, fx);
                } else {
                    self.maybe_complete_join(now_ms, wall_ms, fx);
                }
            }
            GroupState::Empty => {}
        }
    }

    /// Timers: expired member ids awaiting their join, expired sessions (a member waiting in
    /// a JoinGroup during a rebalance, or in a SyncGroup, is kept alive as in Kafka), and the
    /// rebalance deadline (members that did not rejoin are removed).
    pub fn tick(&mut self, now_ms: u64, wall_ms: i64, cfg: &GroupConfig) -> Effects {
        let mut fx = Effects::default();
        let before = self.pending.len();
        self.pending.retain(|_, deadline| *deadline > now_ms);
        if self.pending.len() != before {
            self.maybe_complete_join(now_ms, wall_ms, &mut fx);
        }
        let state = self.state;
        let expired: Vec<String> = self
            .members
            .values()
            .filter(|m| m.session_deadline_ms <= now_ms)
            .filter(|m| {
                !(state == GroupState::PreparingRebalance && m.awaiting_join.is_some()
                    || state == GroupState::CompletingRebalance && m.awaiting_sync.is_some())
            })
            .map(|m| m.member_id.clone())
            .collect();
        for id in expired {
            tracing::info!(group = %self.id, member = %id, "member removed: its session timed out");
            self.remove_member(&id, now_ms, wall_ms, cfg, &mut fx);
        }
        if self.state == GroupState::PreparingRebalance && now_ms >= self.rebalance_deadline_ms {
            match self.initial_delay {
                Some(d) if d.member_joined && d.remaining_ms > 0 => {
                    let step = cfg.initial_rebalance_delay_ms.clamp(0, d.remaining_ms);
                    self.initial_delay = Some(InitialDelay {
                        remaining_ms: d.remaining_ms - step,
                        member_joined: false,
                    });
                    self.rebalance_deadline_ms = now_ms + step as u64;
                }
                _ => {
                    let mut sub = Effects::default();
                    self.complete_join(now_ms, wall_ms, &mut sub);
                    fx.merge(sub);
                }
            }
        }
        self.check();
        fx
    }

    /// Kafka's offset commit checks for a classic group (`ClassicGroup.validateOffsetCommit`):
    /// an admin commit (generation < 0, no member id) only into an empty group; otherwise a
    /// known member of the current generation, not while the group waits for its
    /// assignment. A valid commit counts as a heartbeat.
    pub fn validate_commit(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        now_ms: u64,
    ) -> ErrorCode {
        if generation < 0 && member_id.is_empty() && self.state == GroupState::Empty {
            return ErrorCode::None;
        }
        if self.state == GroupState::Empty && generation >= 0 && self.members.is_empty() {
            // Kafka: a generation the group never had.
            return if member_id.is_empty() {
                ErrorCode::IllegalGeneration
            } else {
                ErrorCode::UnknownMemberId
            };
        }
        if let Err(code) = self.validate_member(member_id, instance_id) {
            return code;
        }
        if generation != self.generation {
            return ErrorCode::IllegalGeneration;
        }
        if self.state == GroupState::CompletingRebalance {
            return ErrorCode::RebalanceInProgress;
        }
        self.touch(member_id, now_ms);
        ErrorCode::None
    }

    /// Whether OffsetDelete (KIP-496) may touch this group's offsets at all: a group with
    /// members that does not use the consumer protocol (`protocol_type` other than
    /// `consumer`: Connect, a custom one) is NON_EMPTY_GROUP, since Keel cannot tell which
    /// topics it uses (Kafka's `ClassicGroup.validateOffsetDelete`).
    pub fn check_offset_delete(&self) -> Result<(), ErrorCode> {
        if !self.members.is_empty() && self.protocol_type.as_deref() != Some("consumer") {
            return Err(ErrorCode::NonEmptyGroup);
        }
        Ok(())
    }

    /// Whether a member of this group subscribes to `topic`, so that OffsetDelete refuses
    /// that topic's partitions (GROUP_SUBSCRIBED_TO_TOPIC): false for a group without
    /// members; true when a member's subscription (any protocol it offered, read as a
    /// `ConsumerProtocolSubscription`) names the topic or cannot be read (kept on the safe
    /// side: its offsets may be in use).
    pub fn subscribes_to(&self, topic: &str) -> bool {
        self.members.values().any(|m| {
            m.protocols.iter().any(|(_, meta)| {
                subscription_topics(meta).is_none_or(|ts| ts.iter().any(|t| t == topic))
            })
        })
    }

    /// The committed offsets that expired by `wall_ms` (Kafka's `offsets.retention.minutes`,
    /// KIP-211): a consumer group's offsets only once it has been Empty for the retention
    /// (counted from when it became empty); a group that only commits (no protocol type:
    /// consumers by assignment, administrators) per offset, from its commit time. A group
    /// with members keeps all its offsets (Kafka also expires those of topics it no longer
    /// subscribes to; Keel does not read subscriptions).
    pub fn expired_offsets(&self, wall_ms: i64, retention_ms: i64) -> Vec<(String, i32)> {
        if self.state != GroupState::Empty {
            return Vec::new();
        }
        let all_from = match &self.protocol_type {
            Some(_) if self.state_timestamp_ms >= 0 => Some(self.state_timestamp_ms),
            // Emptied before a timestamp was known: the newest commit stands for it.
            Some(_) => self.offsets.values().map(|c| c.commit_timestamp_ms).max(),
            None => None,
        };
        self.offsets
            .iter()
            .filter(|(_, c)| {
                let since = all_from.unwrap_or(c.commit_timestamp_ms);
                since.saturating_add(retention_ms) <= wall_ms
            })
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Every waiting request, answered with `code` (the coordinator lost the partition).
    pub fn abandon(&mut self, code: ErrorCode) -> Effects {
        let mut fx = Effects::default();
        for m in self.members.values_mut() {
            if let Some(t) = m.awaiting_join.take() {
                fx.joins.push((t, JoinResult::error(code, &m.member_id)));
            }
            if let Some(t) = m.awaiting_sync.take() {
                fx.syncs.push((t, SyncResult::error(code)));
            }
        }
        fx
    }
}

/// The topics of a consumer-protocol member's metadata (Kafka's
/// `ConsumerProtocolSubscription`, any version: an int16 version, an int32 count, that many
/// int16-length names, then fields this does not read; Kafka's
/// `ConsumerProtocol.deserializeSubscription` likewise reads a newer version's known
/// prefix). `None` if the bytes are not one. The bytes come from a client: every length is
/// checked against what is left before anything is allocated (`kafka-protocol`'s decoder
/// reserves a claimed count up front, and 10 bytes claiming 1.9 billion topics aborted the
/// process).
pub fn subscription_topics(meta: &[u8]) -> Option<Vec<String>> {
    fn take<'a>(b: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
        let (head, rest) = (b.get(..n)?, b.get(n..)?);
        *b = rest;
        Some(head)
    }
    let mut b = meta;
    let version = i16::from_be_bytes(take(&mut b, 2)?.try_into().ok()?);
    let count = i32::from_be_bytes(take(&mut b, 4)?.try_into().ok()?);
    // Each name takes 2 bytes at least.
    let count = usize::try_from(count).ok().filter(|n| *n <= b.len() / 2)?;
    if version < 0 {
        return None;
    }
    let mut topics = Vec::with_capacity(count);
    for _ in 0..count {
        let len = i16::from_be_bytes(take(&mut b, 2)?.try_into().ok()?);
        let name = take(&mut b, usize::try_from(len).ok()?)?;
        topics.push(String::from_utf8(name.to_vec()).ok()?);
    }
    Some(topics)
}

#[cfg(test)]
mod tests;
