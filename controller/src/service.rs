//! `ControllerService` over gRPC: a thin layer that turns each write RPC into an operation on
//! the write task ([`crate::write_path`]) calling the pure decision in [`crate::logic`], and
//! each read RPC into a read of the applied state ([`crate::reads`]).
//!
//! Every reply carries the `ControllerLeader` hint. A write that reaches a controller that is
//! not active, or whose leadership ends before commit, answers NOT_CONTROLLER.

use std::collections::BTreeMap;

use keel_metadata_log::records::{ClusterIdRecord, MetadataRecord, metadata_record::Record};
use keel_metadata_log::{DigestMemo, MetadataImage};
use keel_proto::ErrorCode;
use keel_proto::controller::controller_service_server::ControllerService;
use keel_proto::controller::*;
use tonic::{Request, Response, Status};

use crate::access;
use crate::bounds;
use crate::logic::{self, BrokerHeartbeatManager, HeartbeatTracker, TopicDefaults};
use crate::node::RaftNode;
use crate::reads;
use crate::write_path::{ControllerState, WriteContext, WriteHandle};
use keel_metadata_log::acl::Operation;
use keel_metadata_log::authz::{Authz, Caller, Denied};

/// In-memory state of the active controller, owned by the write task.
#[derive(Debug)]
pub struct QuorumState {
    /// Broker heartbeat sessions (not replicated; reset on leadership change).
    pub sessions: BrokerHeartbeatManager,
    /// Heartbeat arrivals recorded by the RPC handlers, taken into `sessions` before each
    /// session-expiry check.
    tracker: HeartbeatTracker,
    /// `broker.session.timeout.ms`.
    pub session_timeout_ms: u64,
    /// Defaults for CreateTopics.
    pub topic_defaults: TopicDefaults,
    /// Rotates the first broker of replica placement between CreateTopics calls.
    placement_start: usize,
    /// Interval of the preferred-leader rebalance check, ms (Kafka:
    /// `leader.imbalance.check.interval.seconds`); `None` = disabled (Kafka:
    /// `auto.leader.rebalance.enable = false`).
    rebalance_interval_ms: Option<u64>,
    /// Write-task time (ms) of the next rebalance check; set one interval after this node
    /// becomes active, so returning brokers are not moved onto right at a failover.
    next_rebalance_ms: u64,
    /// What the active controller knows of each broker's session, published for
    /// DescribeCluster (empty when this node is not active).
    session_views: tokio::sync::watch::Sender<BTreeMap<i32, SessionView>>,
    /// Milliseconds this process has stalled so far (never decreasing;
    /// [`keel_runtime::clock::StallMeter`]).
    stalled_ms: fn() -> u64,
    /// `stalled_ms` as of the last session-expiry check: the stall since then is forgiven to
    /// every broker session before the next check.
    stall_seen_ms: u64,
}

pub use crate::reads::SessionView;

/// The process's stall meter as a plain function ([`QuorumState::stalled_ms`]).
fn process_stalled_ms() -> u64 {
    keel_runtime::clock::StallMeter::process().stalled_ms()
}

impl QuorumState {
    /// Fresh state, with the preferred-leader rebalance off ([`Self::with_leader_rebalance`]).
    pub fn new(session_timeout_ms: u64) -> Self {
        Self {
            sessions: BrokerHeartbeatManager::new(),
            tracker: HeartbeatTracker::default(),
            session_timeout_ms,
            topic_defaults: TopicDefaults::default(),
            placement_start: 0,
            rebalance_interval_ms: None,
            next_rebalance_ms: 0,
            session_views: tokio::sync::watch::channel(BTreeMap::new()).0,
            stalled_ms: process_stalled_ms,
            stall_seen_ms: 0,
        }
    }

    /// Reads this process's stalls from `stalled_ms` (a never-decreasing count of ms) instead
    /// of the process's meter (tests).
    pub fn with_stall_source(mut self, stalled_ms: fn() -> u64) -> Self {
        self.stalled_ms = stalled_ms;
        self
    }

    /// Enables the automatic preferred-leader rebalance every `interval_ms` (Kafka:
    /// `auto.leader.rebalance.enable` with `leader.imbalance.check.interval.seconds`); `None`
    /// disables it.
    pub fn with_leader_rebalance(mut self, interval_ms: Option<u64>) -> Self {
        self.rebalance_interval_ms = interval_ms;
        self
    }

    /// The tracker the BrokerHeartbeat handler records arrivals in.
    pub fn heartbeat_tracker(&self) -> HeartbeatTracker {
        self.tracker.clone()
    }

    /// A receiver of the published session views.
    pub fn session_views(&self) -> tokio::sync::watch::Receiver<BTreeMap<i32, SessionView>> {
        self.session_views.subscribe()
    }

    /// Publishes the sessions of `image`'s brokers (`now_ms` is the write task's clock).
    fn publish_sessions(&self, image: &MetadataImage, now_ms: u64) {
        let wall_now = keel_runtime::clock::wall_clock_ms();
        let views = image
            .brokers()
            .keys()
            .filter_map(|id| {
                let s = self.sessions.session(*id)?;
                let age = now_ms.saturating_sub(s.last_contact_ms) as i64;
                Some((
                    *id,
                    SessionView {
                        metadata_offset: s.metadata_offset,
                        last_heartbeat_timestamp_ms: wall_now - age,
                    },
                ))
            })
            .collect();
        self.session_views.send_replace(views);
    }
}

impl ControllerState for QuorumState {
    fn on_become_leader(&mut self, image: &MetadataImage, now_ms: u64) -> Vec<MetadataRecord> {
        self.sessions.reset_all(image, now_ms);
        self.stall_seen_ms = (self.stalled_ms)();
        self.publish_sessions(image, now_ms);
        if let Some(interval) = self.rebalance_interval_ms {
            self.next_rebalance_ms = now_ms.saturating_add(interval);
        }
        // Bootstrap: the first active controller of a new quorum names the cluster.
        if image.cluster_id().is_some() {
            return Vec::new();
        }
        let id = uuid::Uuid::new_v4().to_string();
        tracing::info!(cluster_id = %id, "bootstrapping a new cluster");
        vec![MetadataRecord {
            record: Some(Record::ClusterId(ClusterIdRecord { cluster_id: id })),
        }]
    }

    fn tick(&mut self, image: &MetadataImage, now_ms: u64) -> Vec<MetadataRecord> {
        let mut records = Vec::new();
        // Heartbeats that arrived while the write task was busy count before any expiry.
        self.sessions
            .note_contacts(self.tracker.take_contacts(image));
        // Time this controller did not run is not the brokers' silence: after a pause
        // (SIGSTOP, a frozen VM) every session would look expired, and a deposed active
        // controller that resumes fenced every broker in its log before it learned of its
        // successor (nothing committed, but misleading lines).
        let stalled = (self.stalled_ms)();
        let stall = stalled.saturating_sub(self.stall_seen_ms);
        self.stall_seen_ms = stalled;
        if stall > 0 {
            tracing::warn!(
                stall_ms = stall,
                "this controller did not run for {stall} ms (paused, or starved of CPU); \
                 while it stays active, the broker sessions it tracks are extended by as \
                 much, so that its own pause fences no broker"
            );
            self.sessions.forgive_stall(stall, now_ms);
        }
        // Fence every broker whose session expired (DESIGN §4), composing the changes so
        // that later fences (and the rebalance) see earlier ones. The last fence that nothing
        // here reads after is not replayed on `view`: the write task replays every record on
        // its working image as it proposes them (and stops at one that does not replay), and
        // a second replay of the 100,001 records of a broker failure at 100,000 partitions
        // took 200 ms before the first of them was proposed.
        let mut view = image.clone();
        let expired = self.sessions.expired(now_ms, self.session_timeout_ms);
        let rebalance_due = self
            .rebalance_interval_ms
            .is_some_and(|_| now_ms >= self.next_rebalance_ms);
        for (k, &broker) in expired.iter().enumerate() {
            if view.broker(broker).is_none_or(|b| b.fenced) {
                continue;
            }
            let r = logic::fence_broker(&view, broker);
            tracing::info!(
                broker,
                records = r.records.len(),
                "broker session expired: fencing"
            );
            let read_after = k + 1 < expired.len() || rebalance_due;
            if read_after {
                match view.with_records(view.provenance(), &r.records) {
                    Ok(next) => view = next,
                    Err((i, e)) => {
                        tracing::error!(broker, record = i, error = %e, "fence records do not replay");
                        continue;
                    }
                }
            } else {
                debug_assert!(
                    view.with_records(view.provenance(), &r.records).is_ok(),
                    "the fence records of broker {broker} do not replay"
                );
            }
            self.sessions.set_state(broker, true, false);
            metrics::counter!(crate::metrics::TIMED_OUT_BROKER_HEARTBEATS).increment(1);
            records.extend(r.records);
        }
        if let Some(interval) = self.rebalance_interval_ms
            && now_ms >= self.next_rebalance_ms
        {
            let run = logic::preferred_leader_rebalance(&view, logic::MAX_ELECTIONS_PER_IMBALANCE);
            // More balanceable partitions than one run may move: the next run at the next
            // tick, as Kafka reschedules its imbalance check immediately.
            self.next_rebalance_ms = if run.deferred > 0 {
                now_ms
            } else {
                now_ms.saturating_add(interval)
            };
            if !run.records.is_empty() {
                tracing::info!(
                    partitions = run.records.len(),
                    deferred = run.deferred,
                    not_balanceable = run.blocked,
                    "preferred leader rebalance: moving leadership back to preferred replicas"
                );
                records.extend(run.records);
            }
        }
        records
    }
}

/// True when `records` put `broker` into controlled shutdown.
fn starts_controlled_shutdown(records: &[MetadataRecord], broker: i32) -> bool {
    records.iter().any(|r| {
        matches!(&r.record, Some(Record::BrokerRegistrationChange(c))
            if c.broker_id == broker
                && c.in_controlled_shutdown == keel_proto::metadata::ShutdownChange::InControlledShutdown as i32)
    })
}

/// The gRPC service.
#[derive(Debug, Clone)]
pub struct ControllerGrpc {
    node: RaftNode,
    sessions: tokio::sync::watch::Receiver<BTreeMap<i32, SessionView>>,
    tracker: HeartbeatTracker,
    writer: WriteHandle<QuorumState>,
    snapshot_dir: std::path::PathBuf,
    /// DescribeCluster's image digests, computed only on request ([`DigestMemo`]).
    digests: std::sync::Arc<DigestMemo>,
    /// Request authorization (`authorizer`; [`access`]).
    authz: Authz,
    /// Held through one AddRaftVoter / RemoveRaftVoter, so membership changes run one at a
    /// time.
    membership_change: std::sync::Arc<tokio::sync::Mutex<()>>,
}

impl ControllerGrpc {
    /// Serves `node`, sending writes to `writer`; heartbeat arrivals go to `tracker` (the
    /// write task's [`QuorumState::heartbeat_tracker`]).
    pub fn new(
        node: RaftNode,
        writer: WriteHandle<QuorumState>,
        sessions: tokio::sync::watch::Receiver<BTreeMap<i32, SessionView>>,
        tracker: HeartbeatTracker,
        snapshot_dir: std::path::PathBuf,
    ) -> Self {
        Self {
            node,
            sessions,
            tracker,
            writer,
            snapshot_dir,
            digests: Default::default(),
            authz: Authz::disabled(),
            membership_change: Default::default(),
        }
    }

    /// Checks every request with `authz` (default: everything allowed).
    pub fn with_authz(mut self, authz: Authz) -> Self {
        self.authz = authz;
        self
    }

    /// `operation` on the cluster for `request`'s caller.
    fn authorize_cluster<T>(
        &self,
        request: &Request<T>,
        operation: Operation,
    ) -> Result<(), Denied> {
        let caller = self.authz.caller_of(request);
        self.authorize(&caller, |a, c, img| access::cluster(a, c, img, operation))
    }

    /// SECURITY_DISABLED for the ACL RPCs of a controller without an authorizer (Kafka's
    /// `SecurityDisabledException`).
    fn security_disabled(&self) -> Option<keel_proto::common::Error> {
        (!self.authz.enabled()).then(|| {
            ErrorCode::SecurityDisabled.to_proto(
                "no authorizer is configured on this controller (authorizer = \"none\"); ACLs need authorizer = \"standard\" on every node",
            )
        })
    }

    /// Runs an [`access`] check against the ACLs of the applied image; always `Ok` without
    /// an authorizer.
    fn authorize(
        &self,
        caller: &Caller,
        check: impl FnOnce(&Authz, &Caller, &MetadataImage) -> Result<(), Denied>,
    ) -> Result<(), Denied> {
        if !self.authz.enabled() {
            return Ok(());
        }
        let image = self.node.images.borrow().clone();
        check(&self.authz, caller, &image)
    }

    fn cluster_id(&self) -> String {
        self.node
            .images
            .borrow()
            .cluster_id()
            .unwrap_or_default()
            .to_string()
    }

    /// AddRaftVoter (KIP-853): validate, add as an observer (openraft learner) and wait until
    /// it has caught up, then make it a voter. An observer that does not catch up in time is
    /// removed again.
    async fn add_raft_voter_inner(
        &self,
        request: Request<AddRaftVoterRequest>,
    ) -> Result<(), keel_proto::common::Error> {
        use crate::membership;
        self.authorize_cluster(&request, Operation::Alter)
            .map_err(|d| d.to_proto())?;
        let r = request.into_inner();
        let invalid = |m: String| ErrorCode::InvalidRequest.to_proto(m);
        let id = u64::try_from(r.voter_id)
            .map_err(|_| invalid(format!("voter_id {} is negative", r.voter_id)))?;
        let dir = keel_metadata_log::raft_types::parse_directory_id(&r.voter_directory_id)
            .map_err(|e| invalid(format!("voter_directory_id: {e}")))?;
        let timeout_ms = match r.timeout_ms {
            0 => 60_000,
            t @ 1_000..=600_000 => t as u64,
            t => return Err(invalid(format!("timeout_ms {t} is outside 1000..=600000"))),
        };
        let _one_at_a_time = self.membership_change.try_lock().map_err(|_| {
            ErrorCode::InvalidRequest
                .to_proto("another membership change is in progress; retry when it has finished")
        })?;
        self.require_active()?;
        let node = membership::check_add(
            &self.node.members(),
            id,
            dir,
            &r.endpoint,
            self.node.node_id,
            |p| self.peer_in_contact(p),
        )
        .map_err(|(code, m)| code.to_proto(m))?;
        let raft = &self.node.raft;
        let deadline = std::time::Duration::from_millis(timeout_ms);
        tracing::info!(id, endpoint = %node.addr, "adding a controller: catching it up as an observer");
        // openraft's own blocking wait counts a learner that has acknowledged nothing as caught
        // up while the log is shorter than `replication_lag_threshold` (5000 entries), and a
        // node presenting another directory id acknowledges nothing: wait here for an
        // acknowledged index instead.
        let caught_up = async {
            let added = self
                .writer
                .change_membership(openraft::ChangeMembers::AddNodes(
                    [(id, node.clone())].into(),
                ))
                .await
                .ok_or_else(|| self.membership_timeout(id))?
                .map_err(|e| self.membership_error(&e))?;
            let target = raft
                .metrics()
                .borrow()
                .last_log_index
                .unwrap_or(0)
                .max(added.log_id.index);
            let mut metrics = raft.metrics();
            let _ = metrics
                .wait_for(|m| {
                    m.replication
                        .as_ref()
                        .and_then(|r| r.get(&id))
                        .and_then(|matched| matched.map(|l| l.index))
                        .is_some_and(|i| i >= target)
                        || m.replication.is_none()
                })
                .await;
            Ok::<(), keel_proto::common::Error>(())
        };
        match tokio::time::timeout(deadline, caught_up).await {
            // Caught up, or leadership lost meanwhile (then NOT_CONTROLLER).
            Ok(Ok(())) => self.require_active()?,
            Ok(Err(e)) => return Err(e),
            Err(_) => {
                // Not caught up: take the observer out again (bounded), so the leader stops
                // replicating to it.
                let _ = self
                    .writer
                    .change_membership(openraft::ChangeMembers::RemoveNodes([id].into()))
                    .await;
                return Err(ErrorCode::RequestTimedOut.to_proto(format!(
                    "controller {id} did not catch up within {timeout_ms} ms: is it running at \
                     {} with directory id {}? (it was removed again as an observer)",
                    node.addr,
                    keel_metadata_log::raft_types::directory_id_text(dir)
                )));
            }
        }
        self.change_voters(
            id,
            openraft::ChangeMembers::AddVoterIds([id].into()),
            "controller added to the voters",
        )
        .await
    }

    /// RemoveRaftVoter (KIP-853).
    async fn remove_raft_voter_inner(
        &self,
        request: Request<RemoveRaftVoterRequest>,
    ) -> Result<(), keel_proto::common::Error> {
        use crate::membership;
        self.authorize_cluster(&request, Operation::Alter)
            .map_err(|d| d.to_proto())?;
        let r = request.into_inner();
        let invalid = |m: String| ErrorCode::InvalidRequest.to_proto(m);
        let id = u64::try_from(r.voter_id)
            .ok()
            .filter(|id| (1..=membership::MAX_NODE_ID).contains(id))
            .ok_or_else(|| invalid(format!("voter_id {} is outside 1..=2147483647", r.voter_id)))?;
        let dir = match r.voter_directory_id.as_str() {
            "" => None,
            d => Some(
                keel_metadata_log::raft_types::parse_directory_id(d)
                    .map_err(|e| invalid(format!("voter_directory_id: {e}")))?,
            ),
        };
        let _one_at_a_time = self.membership_change.try_lock().map_err(|_| {
            ErrorCode::InvalidRequest
                .to_proto("another membership change is in progress; retry when it has finished")
        })?;
        self.require_active()?;
        membership::check_remove(&self.node.members(), id, dir, self.node.node_id, |p| {
            self.peer_in_contact(p)
        })
        .map_err(|(code, m)| code.to_proto(m))?;
        self.change_voters(
            id,
            openraft::ChangeMembers::RemoveVoters([id].into()),
            "controller removed from the voters",
        )
        .await
    }

    /// Runs the voter change `changes` about controller `id` on the write task; logs `done`
    /// once it has committed.
    async fn change_voters(
        &self,
        id: u64,
        changes: openraft::ChangeMembers<u64, keel_metadata_log::raft_types::ControllerNode>,
        done: &str,
    ) -> Result<(), keel_proto::common::Error> {
        match self.writer.change_membership(changes).await {
            Some(Ok(_)) => {
                tracing::info!(id, "{done}");
                Ok(())
            }
            Some(Err(e)) => Err(self.membership_error(&e)),
            None => Err(self.membership_timeout(id)),
        }
    }

    /// REQUEST_TIMED_OUT for a membership change about controller `id` that did not commit
    /// within [`crate::write_path::MEMBERSHIP_CHANGE_TIMEOUT`] (or the write task is gone).
    fn membership_timeout(&self, id: u64) -> keel_proto::common::Error {
        ErrorCode::RequestTimedOut.to_proto(format!(
            "the membership change for controller {id} did not commit (not within {} s, or \
             this controller stopped being the active one)",
            crate::write_path::MEMBERSHIP_CHANGE_TIMEOUT.as_secs()
        ))
    }

    /// Whether peer `p` answered this (active) controller's replication within the
    /// check-quorum window (`election_timeout_max_ms`).
    fn peer_in_contact(&self, p: u64) -> bool {
        let now = crate::peer_acks::monotonic_ms();
        let window = self.node.raft.config().election_timeout_max as i64;
        self.node
            .peer_acks
            .contact_at(p, now, window)
            .is_some_and(|t| now.saturating_sub(t) <= window)
    }

    /// NOT_CONTROLLER unless this node is the active controller and a voter of its own
    /// membership: a leader that has just removed itself still answers as leader for a moment,
    /// and openraft 0.9 must not be asked for another membership change then (its engine
    /// asserts the leader state and the Raft core stops).
    fn require_active(&self) -> Result<(), keel_proto::common::Error> {
        if self.node.is_active() && self.node.members().voters.contains_key(&self.node.node_id) {
            return Ok(());
        }
        let hint = reads::leader_hint(&self.node);
        Err(ErrorCode::NotController.to_proto(format!(
            "node {} is not the active controller; {}",
            self.node.node_id,
            reads::whom_to_ask(&hint)
        )))
    }

    /// Kafka's code for an openraft membership-change failure.
    fn membership_error(
        &self,
        e: &openraft::error::RaftError<
            u64,
            openraft::error::ClientWriteError<u64, keel_metadata_log::raft_types::ControllerNode>,
        >,
    ) -> keel_proto::common::Error {
        use openraft::error::{ClientWriteError, RaftError};
        match e {
            RaftError::APIError(ClientWriteError::ForwardToLeader(_)) => ErrorCode::NotController
                .to_proto(format!(
                    "node {} lost leadership during the membership change",
                    self.node.node_id
                )),
            RaftError::APIError(ClientWriteError::ChangeMembershipError(c)) => {
                ErrorCode::InvalidRequest.to_proto(c.to_string())
            }
            RaftError::Fatal(f) => ErrorCode::UnknownServerError.to_proto(f.to_string()),
        }
    }

    fn hint(&self) -> Option<ControllerLeader> {
        Some(reads::leader_hint(&self.node))
    }

    /// The whole-request error for a write the write path refused or could not commit.
    fn not_controller(&self, code: ErrorCode) -> Option<keel_proto::common::Error> {
        match code {
            ErrorCode::PolicyViolation => {
                return Some(code.to_proto(crate::logic::result::operation_limits_message()));
            }
            ErrorCode::UnknownServerError => {
                return Some(
                    code.to_proto("the controller could not apply the request (see its log)"),
                );
            }
            _ => {}
        }
        let h = reads::leader_hint(&self.node);
        if h.leader_id == self.node.node_id as i32 {
            // We were the leader when asked but lost it before the commit.
            return Some(code.to_proto(format!(
                "node {} lost controller leadership before the request committed; retry",
                self.node.node_id
            )));
        }
        Some(code.to_proto(if h.leader_id > 0 {
            format!(
                "node {} is not the active controller; the active controller is node {} at {}",
                self.node.node_id, h.leader_id, h.leader_address
            )
        } else {
            "no active controller is known (election in progress)".to_string()
        }))
    }
}

/// The whole-request INVALID_REQUEST for a field outside its bound ([`bounds`]).
fn invalid_request(e: &keel_proto::limits::FieldError) -> keel_proto::common::Error {
    ErrorCode::InvalidRequest.to_proto(e.to_string())
}

/// Checks the caller's authorization ([`access`]; a refusal is the default reply carrying the
/// *_AUTHORIZATION_FAILED error), the request's field bounds ([`bounds`]; a violation is
/// answered with the default reply carrying INVALID_REQUEST), then runs a logic function on the write task and turns
/// its outcome into a reply: the reply after commit (with `fill` applied), or the default
/// reply carrying the write-path error.
macro_rules! write_rpc {
    ($self:ident, $req:ident, $reply:ty, $access:expr, $bounds:path, |$ctx:ident, $r:ident| $decide:expr, |$rep:ident, $committed:ident| $fill:expr) => {{
        let caller = $self.authz.caller_of(&$req);
        let $r = $req.into_inner();
        if let Err(denied) = $self.authorize(&caller, |a, c, img| $access(a, c, img, &$r)) {
            let mut reply = <$reply>::default_with_error(Some(denied.to_proto()));
            reply.leader = $self.hint();
            return Ok(Response::new(reply));
        }
        if let Err(e) = $bounds(&$r) {
            let mut reply = <$reply>::default_with_error(Some(invalid_request(&e)));
            reply.leader = $self.hint();
            return Ok(Response::new(reply));
        }
        let res = $self
            .writer
            .submit(move |$ctx: WriteContext<'_, QuorumState>| $decide)
            .await;
        let mut reply: $reply = match res {
            Ok((mut $rep, $committed)) => {
                #[allow(clippy::unused_unit)]
                let () = $fill;
                $rep
            }
            Err(code) => <$reply>::default_with_error($self.not_controller(code)),
        };
        reply.leader = $self.hint();
        Ok(Response::new(reply))
    }};
}

/// Replies that can carry a whole-request error.
trait WithError: Default {
    fn set_error(&mut self, e: Option<keel_proto::common::Error>);
    fn default_with_error(e: Option<keel_proto::common::Error>) -> Self {
        let mut r = Self::default();
        r.set_error(e);
        r
    }
}

macro_rules! with_error {
    ($($t:ty),*) => {$(
        impl WithError for $t {
            fn set_error(&mut self, e: Option<keel_proto::common::Error>) {
                self.error = e;
            }
        }
    )*};
}

impl WithError for RegisterBrokerReply {
    fn set_error(&mut self, e: Option<keel_proto::common::Error>) {
        self.error = e;
        // The proto: "-1 on error".
        self.broker_epoch = -1;
    }
}

with_error!(
    BrokerHeartbeatReply,
    UnregisterBrokerReply,
    CreateTopicsReply,
    DeleteTopicsReply,
    CreatePartitionsReply,
    AlterPartitionReply,
    ElectLeadersReply,
    AlterPartitionReassignmentsReply,
    AlterConfigsReply,
    AllocateProducerIdsReply,
    CreateAclsReply,
    DeleteAclsReply,
    AlterUserScramCredentialsReply
);

#[tonic::async_trait]
impl ControllerService for ControllerGrpc {
    async fn register_broker(
        &self,
        request: Request<RegisterBrokerRequest>,
    ) -> Result<Response<RegisterBrokerReply>, Status> {
        write_rpc!(
            self,
            request,
            RegisterBrokerReply,
            |a, c, img, r: &RegisterBrokerRequest| access::broker(a, c, img, r.broker_id),
            bounds::register_broker,
            |ctx, req| {
                let now = ctx.now_ms;
                let timeout = ctx.state.session_timeout_ms;
                let sessions = &ctx.state.sessions;
                let cluster_id = ctx.image.cluster_id().unwrap_or_default();
                logic::register_broker(ctx.image, &req, cluster_id, |id| {
                    sessions.has_valid_session(id, now, timeout)
                })
            },
            |reply, committed| {
                if reply.error.is_none() {
                    // broker epoch = offset of the committed RegisterBrokerRecord.
                    reply.broker_epoch = committed.offset as i64;
                }
            }
        )
    }

    async fn broker_heartbeat(
        &self,
        request: Request<BrokerHeartbeatRequest>,
    ) -> Result<Response<BrokerHeartbeatReply>, Status> {
        // Record the arrival first, so that a busy write task cannot let the session expire
        // while this heartbeat waits in its queue (Kafka: `trackBrokerHeartbeat`).
        let (id, epoch) = (request.get_ref().broker_id, request.get_ref().broker_epoch);
        // Only the broker itself keeps its session alive.
        let caller = self.authz.caller_of(&request);
        if let Err(denied) = self.authorize(&caller, |a, c, img| access::broker(a, c, img, id)) {
            return Ok(Response::new(BrokerHeartbeatReply {
                error: Some(denied.to_proto()),
                leader: self.hint(),
                ..Default::default()
            }));
        }
        self.tracker.update_contact(
            &self.node.images.borrow(),
            id,
            epoch,
            keel_runtime::clock::monotonic_ms(),
        );
        let raft = self.node.raft.clone();
        write_rpc!(
            self,
            request,
            BrokerHeartbeatReply,
            |a, c, img, r: &BrokerHeartbeatRequest| access::broker(a, c, img, r.broker_id),
            bounds::broker_heartbeat,
            |ctx, req| {
                // Every offset the broker can have applied was committed before it sent this,
                // so it is in the active controller's (this node's) log.
                let log_end = raft.metrics().borrow().last_log_index.unwrap_or(0);
                let r = logic::heartbeat(
                    ctx.image,
                    &req,
                    &mut ctx.state.sessions,
                    ctx.now_ms,
                    log_end,
                );
                ctx.state.publish_sessions(ctx.image, ctx.now_ms);
                if starts_controlled_shutdown(&r.records, req.broker_id) {
                    // Grant the shutdown only once every active broker has applied this batch
                    // (Kafka: BrokerHeartbeatManager.maybeUpdateControlledShutdownOffset).
                    let broker = req.broker_id;
                    ctx.after_commit
                        .push(Box::new(move |state: &mut QuorumState, offset| {
                            state
                                .sessions
                                .set_controlled_shutdown_offset(broker, offset);
                        }));
                }
                r
            },
            |_reply, _committed| ()
        )
    }

    async fn unregister_broker(
        &self,
        request: Request<UnregisterBrokerRequest>,
    ) -> Result<Response<UnregisterBrokerReply>, Status> {
        write_rpc!(
            self,
            request,
            UnregisterBrokerReply,
            |a, c, img, _: &UnregisterBrokerRequest| access::cluster(a, c, img, Operation::Alter),
            bounds::unregister_broker,
            |ctx, req| logic::unregister_broker(ctx.image, &req),
            |_reply, _committed| ()
        )
    }

    async fn create_topics(
        &self,
        request: Request<CreateTopicsRequest>,
    ) -> Result<Response<CreateTopicsReply>, Status> {
        let validate_only = request.get_ref().validate_only;
        write_rpc!(
            self,
            request,
            CreateTopicsReply,
            access::create_topics,
            bounds::create_topics,
            |ctx, req| {
                let start = ctx.state.placement_start;
                ctx.state.placement_start = ctx.state.placement_start.wrapping_add(1);
                let defaults = ctx.state.topic_defaults;
                logic::create_topics(ctx.image, &req, &defaults, &mut uuid::Uuid::new_v4, start)
            },
            |reply, committed| logic::topics::set_created_offsets(
                &mut reply,
                validate_only,
                committed.offset
            )
        )
    }

    async fn delete_topics(
        &self,
        request: Request<DeleteTopicsRequest>,
    ) -> Result<Response<DeleteTopicsReply>, Status> {
        write_rpc!(
            self,
            request,
            DeleteTopicsReply,
            access::delete_topics,
            bounds::delete_topics,
            |ctx, req| logic::delete_topics(ctx.image, &req),
            |_reply, _committed| ()
        )
    }

    async fn create_partitions(
        &self,
        request: Request<CreatePartitionsRequest>,
    ) -> Result<Response<CreatePartitionsReply>, Status> {
        let validate_only = request.get_ref().validate_only;
        write_rpc!(
            self,
            request,
            CreatePartitionsReply,
            access::create_partitions,
            bounds::create_partitions,
            |ctx, req| {
                let start = ctx.state.placement_start;
                ctx.state.placement_start = ctx.state.placement_start.wrapping_add(1);
                logic::create_partitions(ctx.image, &req, start)
            },
            |reply, committed| logic::create_partitions::set_added_offsets(
                &mut reply,
                validate_only,
                committed.offset
            )
        )
    }

    async fn alter_partition(
        &self,
        request: Request<AlterPartitionRequest>,
    ) -> Result<Response<AlterPartitionReply>, Status> {
        write_rpc!(
            self,
            request,
            AlterPartitionReply,
            access::alter_partition,
            bounds::alter_partition,
            |ctx, req| logic::alter_partition(ctx.image, &req),
            |_reply, _committed| ()
        )
    }

    async fn elect_leaders(
        &self,
        request: Request<ElectLeadersRequest>,
    ) -> Result<Response<ElectLeadersReply>, Status> {
        write_rpc!(
            self,
            request,
            ElectLeadersReply,
            |a, c, img, _: &ElectLeadersRequest| access::cluster(a, c, img, Operation::Alter),
            bounds::elect_leaders,
            |ctx, req| logic::elect_leaders(ctx.image, &req),
            |_reply, _committed| ()
        )
    }

    async fn alter_partition_reassignments(
        &self,
        request: Request<AlterPartitionReassignmentsRequest>,
    ) -> Result<Response<AlterPartitionReassignmentsReply>, Status> {
        write_rpc!(
            self,
            request,
            AlterPartitionReassignmentsReply,
            |a, c, img, _: &AlterPartitionReassignmentsRequest| access::cluster(
                a,
                c,
                img,
                Operation::Alter
            ),
            bounds::alter_partition_reassignments,
            |ctx, req| logic::alter_partition_reassignments(ctx.image, &req),
            |_reply, _committed| ()
        )
    }

    async fn list_partition_reassignments(
        &self,
        request: Request<ListPartitionReassignmentsRequest>,
    ) -> Result<Response<ListPartitionReassignmentsReply>, Status> {
        let refused = |e| {
            Ok(Response::new(ListPartitionReassignmentsReply {
                error: Some(e),
                leader: self.hint(),
                ..Default::default()
            }))
        };
        if let Err(d) = self.authorize_cluster(&request, Operation::Describe) {
            return refused(d.to_proto());
        }
        if let Err(e) = bounds::list_partition_reassignments(request.get_ref()) {
            return refused(ErrorCode::InvalidRequest.to_proto(e.to_string()));
        }
        let image = self.node.images.borrow().clone();
        let hint = reads::leader_hint(&self.node);
        let mut reply = logic::list_partition_reassignments(&image, request.get_ref());
        reply.source = Some(reads::read_source(
            self.node.node_id,
            &hint,
            image.provenance().offset,
        ));
        reply.leader = Some(hint);
        Ok(Response::new(reply))
    }

    async fn alter_configs(
        &self,
        request: Request<AlterConfigsRequest>,
    ) -> Result<Response<AlterConfigsReply>, Status> {
        write_rpc!(
            self,
            request,
            AlterConfigsReply,
            access::alter_configs,
            bounds::alter_configs,
            |ctx, req| logic::alter_configs(ctx.image, &req),
            |_reply, _committed| ()
        )
    }

    async fn describe_configs(
        &self,
        request: Request<DescribeConfigsRequest>,
    ) -> Result<Response<DescribeConfigsReply>, Status> {
        let caller = self.authz.caller_of(&request);
        if let Err(d) = self.authorize(&caller, |a, c, img| {
            access::describe_configs(a, c, img, request.get_ref())
        }) {
            return Ok(Response::new(DescribeConfigsReply {
                error: Some(d.to_proto()),
                leader: self.hint(),
                ..Default::default()
            }));
        }
        if let Err(e) = bounds::describe_configs(request.get_ref()) {
            return Ok(Response::new(DescribeConfigsReply {
                error: Some(invalid_request(&e)),
                leader: self.hint(),
                ..Default::default()
            }));
        }
        let image = self.node.images.borrow().clone();
        let mut reply = logic::describe_configs(&image, request.get_ref());
        let hint = reads::leader_hint(&self.node);
        reply.metadata_offset = image.provenance().offset as i64;
        reply.source = Some(reads::read_source(
            self.node.node_id,
            &hint,
            image.provenance().offset,
        ));
        reply.leader = Some(hint);
        Ok(Response::new(reply))
    }

    async fn allocate_producer_ids(
        &self,
        request: Request<AllocateProducerIdsRequest>,
    ) -> Result<Response<AllocateProducerIdsReply>, Status> {
        write_rpc!(
            self,
            request,
            AllocateProducerIdsReply,
            |a, c, img, r: &AllocateProducerIdsRequest| access::broker(a, c, img, r.broker_id),
            bounds::allocate_producer_ids,
            |ctx, req| logic::allocate_producer_ids(ctx.image, &req),
            |_reply, _committed| ()
        )
    }

    async fn describe_cluster(
        &self,
        request: Request<DescribeClusterRequest>,
    ) -> Result<Response<DescribeClusterReply>, Status> {
        let caller = self.authz.caller_of(&request);
        if let Err(d) = self.authorize(&caller, access::describe_cluster) {
            return Ok(Response::new(DescribeClusterReply {
                error: Some(d.to_proto()),
                leader: self.hint(),
                ..Default::default()
            }));
        }
        let image = self.node.images.borrow().clone();
        let hint = reads::leader_hint(&self.node);
        let include_fenced = request.get_ref().include_fenced_brokers;
        // Heartbeat state lives on the active controller only.
        let sessions = if self.node.is_active() {
            self.sessions.borrow().clone()
        } else {
            BTreeMap::new()
        };
        let brokers = image
            .brokers()
            .values()
            .filter(|b| include_fenced || !b.fenced)
            .map(|b| DescribedBroker {
                broker_id: b.id,
                broker_epoch: b.epoch,
                incarnation_id: bytes::Bytes::copy_from_slice(b.incarnation_id.as_bytes()),
                endpoints: b.endpoints.clone(),
                rack: b.rack.clone().unwrap_or_default(),
                fenced: b.fenced,
                in_controlled_shutdown: b.in_controlled_shutdown,
                last_applied_metadata_offset: sessions.get(&b.id).map_or(-1, |s| s.metadata_offset),
                last_heartbeat_timestamp_ms: sessions
                    .get(&b.id)
                    .map_or(-1, |s| s.last_heartbeat_timestamp_ms),
            })
            .collect();
        Ok(Response::new(DescribeClusterReply {
            error: None,
            cluster_id: image.cluster_id().unwrap_or_default().to_string(),
            controller_id: hint.leader_id,
            brokers,
            replying_node_id: self.node.node_id as i32,
            metadata_offset: image.provenance().offset as i64,
            commit_index: reads::applied_offset(&self.node) as i64,
            source: Some(reads::read_source(
                self.node.node_id,
                &hint,
                image.provenance().offset,
            )),
            leader: Some(hint),
            image_digest: if request.get_ref().include_image_digest {
                self.digests.digest(&image).await.to_string()
            } else {
                String::new()
            },
        }))
    }

    async fn add_raft_voter(
        &self,
        request: Request<AddRaftVoterRequest>,
    ) -> Result<Response<AddRaftVoterReply>, Status> {
        let error = self.add_raft_voter_inner(request).await.err();
        Ok(Response::new(AddRaftVoterReply {
            error,
            leader: self.hint(),
        }))
    }

    async fn remove_raft_voter(
        &self,
        request: Request<RemoveRaftVoterRequest>,
    ) -> Result<Response<RemoveRaftVoterReply>, Status> {
        let error = self.remove_raft_voter_inner(request).await.err();
        Ok(Response::new(RemoveRaftVoterReply {
            error,
            leader: self.hint(),
        }))
    }

    async fn describe_quorum(
        &self,
        request: Request<DescribeQuorumRequest>,
    ) -> Result<Response<DescribeQuorumReply>, Status> {
        if let Err(d) = self.authorize_cluster(&request, Operation::Describe) {
            return Ok(Response::new(DescribeQuorumReply {
                error: Some(d.to_proto()),
                ..Default::default()
            }));
        }
        let sessions = self.sessions.borrow().clone();
        Ok(Response::new(reads::describe_quorum(
            &self.node,
            &self.cluster_id(),
            &sessions,
        )))
    }

    type FetchMetadataStream = reads::FetchStream;

    async fn fetch_metadata(
        &self,
        request: Request<FetchMetadataRequest>,
    ) -> Result<Response<Self::FetchMetadataStream>, Status> {
        // A broker following the log is that broker (CLUSTER_ACTION); a tool needs DESCRIBE.
        let caller = self.authz.caller_of(&request);
        let check = |a: &Authz, c: &Caller, img: &MetadataImage| match request.get_ref().broker_id {
            Some(id) => access::broker(a, c, img, id),
            None => access::cluster(a, c, img, Operation::Describe),
        };
        if let Err(d) = self.authorize(&caller, check) {
            // A stream has no reply envelope: Kafka's code goes in the status text, as
            // keelctl prints it for every other refusal (`NAME (code): message`).
            return Err(Status::permission_denied(format!(
                "{} ({}): {}",
                d.code,
                d.code.code(),
                d.message
            )));
        }
        if let Err(e) = bounds::fetch_metadata(request.get_ref()) {
            return Err(Status::invalid_argument(format!("INVALID_REQUEST: {e}")));
        }
        Ok(Response::new(reads::fetch_metadata(
            self.node.clone(),
            self.snapshot_dir.clone(),
            request.into_inner(),
        )))
    }

    async fn read_metadata_log(
        &self,
        request: Request<ReadMetadataLogRequest>,
    ) -> Result<Response<ReadMetadataLogReply>, Status> {
        if let Err(d) = self.authorize_cluster(&request, Operation::Describe) {
            return Ok(Response::new(ReadMetadataLogReply {
                error: Some(d.to_proto()),
                ..Default::default()
            }));
        }
        if let Err(e) = bounds::read_metadata_log(request.get_ref()) {
            return Ok(Response::new(ReadMetadataLogReply {
                error: Some(invalid_request(&e)),
                ..Default::default()
            }));
        }
        Ok(Response::new(
            reads::read_metadata_log(&self.node, &self.snapshot_dir, request.into_inner()).await,
        ))
    }

    async fn create_acls(
        &self,
        request: Request<CreateAclsRequest>,
    ) -> Result<Response<CreateAclsReply>, Status> {
        if let Some(e) = self.security_disabled() {
            return Ok(Response::new(CreateAclsReply {
                error: Some(e),
                leader: self.hint(),
                ..Default::default()
            }));
        }
        write_rpc!(
            self,
            request,
            CreateAclsReply,
            |a, c, img, _: &CreateAclsRequest| access::cluster(a, c, img, Operation::Alter),
            bounds::create_acls,
            |ctx, req| logic::acls::create_acls(ctx.image, &req, &mut uuid::Uuid::new_v4),
            |_reply, _committed| ()
        )
    }

    async fn describe_acls(
        &self,
        request: Request<DescribeAclsRequest>,
    ) -> Result<Response<DescribeAclsReply>, Status> {
        let refused = |e| {
            Ok(Response::new(DescribeAclsReply {
                error: Some(e),
                leader: self.hint(),
                ..Default::default()
            }))
        };
        if let Some(e) = self.security_disabled() {
            return refused(e);
        }
        if let Err(d) = self.authorize_cluster(&request, Operation::Describe) {
            return refused(d.to_proto());
        }
        let image = self.node.images.borrow().clone();
        let acls = match logic::acls::describe_acls(&image, request.get_ref().filter.as_ref()) {
            Ok(acls) => acls,
            Err(e) => return refused(ErrorCode::InvalidRequest.to_proto(e.to_string())),
        };
        let hint = reads::leader_hint(&self.node);
        Ok(Response::new(DescribeAclsReply {
            error: None,
            acls,
            source: Some(reads::read_source(
                self.node.node_id,
                &hint,
                image.provenance().offset,
            )),
            leader: Some(hint),
        }))
    }

    async fn delete_acls(
        &self,
        request: Request<DeleteAclsRequest>,
    ) -> Result<Response<DeleteAclsReply>, Status> {
        if let Some(e) = self.security_disabled() {
            return Ok(Response::new(DeleteAclsReply {
                error: Some(e),
                leader: self.hint(),
                ..Default::default()
            }));
        }
        write_rpc!(
            self,
            request,
            DeleteAclsReply,
            |a, c, img, _: &DeleteAclsRequest| access::cluster(a, c, img, Operation::Alter),
            bounds::delete_acls,
            |ctx, req| logic::acls::delete_acls(ctx.image, &req),
            |_reply, _committed| ()
        )
    }

    async fn alter_user_scram_credentials(
        &self,
        request: Request<AlterUserScramCredentialsRequest>,
    ) -> Result<Response<AlterUserScramCredentialsReply>, Status> {
        write_rpc!(
            self,
            request,
            AlterUserScramCredentialsReply,
            |a, c, img, _: &AlterUserScramCredentialsRequest| access::cluster(
                a,
                c,
                img,
                Operation::Alter
            ),
            bounds::alter_user_scram_credentials,
            |ctx, req| logic::scram::alter_user_scram_credentials(ctx.image, &req),
            |_reply, _committed| ()
        )
    }

    async fn scram_authenticate(
        &self,
        request: Request<ScramAuthenticateRequest>,
    ) -> Result<Response<ScramAuthenticateReply>, Status> {
        use keel_metadata_log::scram::{self, Mechanism, ScramError};
        let peer = keel_runtime::tls::peer_info(&request).and_then(|p| p.remote_addr);
        let req = request.into_inner();
        let refused = |code: ErrorCode, message: String| {
            Ok(Response::new(ScramAuthenticateReply {
                error: Some(code.to_proto(message)),
                ..Default::default()
            }))
        };
        if let Err(e) = bounds::scram_authenticate(&req) {
            return refused(ErrorCode::InvalidRequest, e.to_string());
        }
        let Some(m) = Mechanism::from_proto(req.mechanism) else {
            return refused(
                ErrorCode::UnsupportedSaslMechanism,
                format!(
                    "mechanism {} is not SCRAM-SHA-256 (1) or SCRAM-SHA-512 (2)",
                    req.mechanism
                ),
            );
        };
        let image = self.node.images.borrow().clone();
        let lookup = |u: &str| image.scram_credential(u, m);
        let now = u64::try_from(keel_runtime::clock::wall_clock_ms()).unwrap_or(0);
        let failed = |e: ScramError| {
            let message = match e {
                ScramError::BadCredentials(_) => e.to_string(),
                other => format!("Authentication failed: {other}"),
            };
            tracing::info!(?peer, "gRPC SCRAM authentication failed: {message}");
            refused(ErrorCode::SaslAuthenticationFailed, message)
        };
        if req.client_final.is_empty() {
            let random = uuid::Uuid::new_v4().simple().to_string();
            match scram::grpc_step1(m, &req.client_first, lookup, &random, now) {
                Ok(s1) => Ok(Response::new(ScramAuthenticateReply {
                    server_first: s1.server_first.into(),
                    server_nonce: s1.server_nonce,
                    exchange_mac: s1.exchange_mac.into(),
                    ..Default::default()
                })),
                Err(e) => failed(e),
            }
        } else {
            match scram::grpc_step2(
                m,
                &req.client_first,
                &req.server_nonce,
                &req.exchange_mac,
                &req.client_final,
                lookup,
                now,
            ) {
                Ok((_user, server_final, token)) => Ok(Response::new(ScramAuthenticateReply {
                    server_final: server_final.into(),
                    token,
                    token_expires_ms: i64::try_from(now + scram::TOKEN_LIFETIME_MS)
                        .unwrap_or(i64::MAX),
                    ..Default::default()
                })),
                Err(e) => failed(e),
            }
        }
    }

    async fn describe_user_scram_credentials(
        &self,
        request: Request<DescribeUserScramCredentialsRequest>,
    ) -> Result<Response<DescribeUserScramCredentialsReply>, Status> {
        let refused = |e| {
            Ok(Response::new(DescribeUserScramCredentialsReply {
                error: Some(e),
                leader: self.hint(),
                ..Default::default()
            }))
        };
        if let Err(d) = self.authorize_cluster(&request, Operation::Describe) {
            return refused(d.to_proto());
        }
        if let Err(e) = bounds::describe_user_scram_credentials(request.get_ref()) {
            return refused(invalid_request(&e));
        }
        let image = self.node.images.borrow().clone();
        let reply = logic::scram::describe_user_scram_credentials(&image, request.get_ref());
        let hint = reads::leader_hint(&self.node);
        Ok(Response::new(DescribeUserScramCredentialsReply {
            source: Some(reads::read_source(
                self.node.node_id,
                &hint,
                image.provenance().offset,
            )),
            leader: Some(hint),
            ..reply
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logic::tests::common::Cluster;

    /// Brokers whose sessions expire in one tick are fenced in turn, each fence computed on
    /// the image the earlier ones left (the last one is replayed by the write task, not in
    /// the tick): the tick's records replay in order, the expired brokers end fenced, and no
    /// partition is led by a fenced broker.
    #[test]
    fn brokers_expiring_in_one_tick_are_fenced_each_on_the_others_changes() {
        let mut c = Cluster::new();
        for b in 1..=3 {
            c.add_broker(b, None);
        }
        c.create_topic("t", &[&[1, 2, 3], &[2, 3, 1], &[3, 1, 2], &[1, 2, 3]]);
        let mut state = QuorumState::new(1_000);
        state.on_become_leader(&c.image, 0);
        // Broker 3 keeps its session; 1 and 2 expire in the same tick.
        state.sessions.touch(3, c.epoch(3), 1_500);
        let records = state.tick(&c.image, 2_000);
        let after = c
            .image
            .with_records(c.image.provenance(), &records)
            .expect("the tick's records replay in order");
        for b in [1, 2] {
            assert!(
                after.broker(b).is_some_and(|r| r.fenced),
                "broker {b} fenced"
            );
        }
        assert!(
            after.broker(3).is_some_and(|r| !r.fenced),
            "broker 3 keeps its session"
        );
        let id = c.topic_id("t");
        for p in 0..4 {
            let reg = after.partition(id, p).expect("partition");
            assert_eq!(reg.leader, 3, "t-{p}: the one live broker leads");
            assert_eq!(reg.isr, vec![3], "t-{p}: ISR of the live broker only");
        }
        // Nothing expires at the next tick: both are fenced in the sessions too.
        assert!(state.tick(&after, 2_100).is_empty());
    }

    static STALLED_MS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

    /// An active controller that did not run for longer than the session timeout (SIGSTOP)
    /// fences nobody at its next tick: the stall is forgiven to every session. Brokers that
    /// stay silent after it are fenced a whole timeout later.
    #[test]
    fn a_stalled_active_controller_fences_nobody_for_its_own_stall() {
        use std::sync::atomic::Ordering;
        let mut c = Cluster::new();
        for b in 1..=2 {
            c.add_broker(b, None);
        }
        c.create_topic("t", &[&[1, 2]]);
        STALLED_MS.store(500, Ordering::Relaxed);
        let mut state =
            QuorumState::new(1_000).with_stall_source(|| STALLED_MS.load(Ordering::Relaxed));
        // The stall before leadership is not forgiven again.
        state.on_become_leader(&c.image, 0);
        state.sessions.touch(1, c.epoch(1), 900);
        state.sessions.touch(2, c.epoch(2), 900);
        assert!(state.tick(&c.image, 950).is_empty());
        // Paused from 950 to 20,950.
        STALLED_MS.fetch_add(20_000, Ordering::Relaxed);
        assert!(
            state.tick(&c.image, 20_950).is_empty(),
            "nobody fenced for the controller's own stall"
        );
        // Broker 2 heartbeats after the resume, broker 1 stays silent.
        state.sessions.touch(2, c.epoch(2), 21_500);
        assert!(state.tick(&c.image, 21_800).is_empty());
        let records = state.tick(&c.image, 21_901);
        let after = c
            .image
            .with_records(c.image.provenance(), &records)
            .expect("the fence replays");
        assert!(after.broker(1).is_some_and(|b| b.fenced), "broker 1 fenced");
        assert!(after.broker(2).is_some_and(|b| !b.fenced), "broker 2 live");
    }
}
