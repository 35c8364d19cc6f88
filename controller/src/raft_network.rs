//! Raft transport over gRPC: the client side (openraft's `RaftNetworkFactory`/`RaftNetwork`)
//! and the server side (`RaftService`).
//!
//! openraft's requests and responses travel as postcard bytes inside `keel.raft.RaftRequest`
//! / `RaftReply` (DESIGN §4); the metadata records inside entries stay protobuf (see
//! `keel_metadata_log::raft_types::MetadataRecords`). Snapshots are sent by openraft in chunks
//! of `snapshot_max_chunk_size` bytes through `InstallSnapshot`.
//!
//! Failure mapping (client side): no reply from the peer (connect failure, reset, closed
//! stream, deadline) is `Unreachable`, so openraft backs off before retrying; a reply that does
//! not decode is a `NetworkError`; an error the remote Raft returned is a `RemoteError`. Votes
//! and snapshot chunks are bounded by openraft's per-RPC TTL; an AppendEntries runs in its own
//! task bounded by [`APPEND_RPC_DEADLINE`], and a reply that comes after openraft stopped
//! waiting answers its next request from the same match point ([`crate::pending_append`]).
//!
//! Every request names the node it is for and the sender's cluster id ([`Identity`]); a
//! receiver refuses one meant for another node or another cluster ([`misdirected`]). It also
//! carries both replica keys (KIP-853: node id + directory id): a receiver refuses a request
//! meant for another directory id ([`crate::membership::voter_key_mismatch`]). Replies carry the
//! replier's directory id, which the active controller records for members that have none
//! yet ([`LearnedDirectories`]).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use keel_metadata_log::raft_types::ControllerNode;
use keel_metadata_log::raft_types::{Entry, TypeConfig};
use keel_proto::raft::raft_service_client::RaftServiceClient;
use keel_proto::raft::raft_service_server::RaftService;
use keel_proto::raft::{RaftReply, RaftRequest};
use openraft::Raft;
use openraft::error::{
    InstallSnapshotError, NetworkError, PayloadTooLarge, RPCError, RaftError, RemoteError,
    Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::append_budget::AppendBudget;
use crate::peer_acks::{AppendOutcome, PeerAcks};
use crate::pending_append::{
    APPEND_RPC_DEADLINE, AppendRange, PendingAppend, Reuse, answer_for, reuse,
};
use crate::pre_vote::{self, ElectionGate, PreVoteReply, PreVoteRequest, VoterView};
use keel_metadata_log::MetadataImage;
use keel_metadata_log::store::LogStore;
use keel_runtime::tls::Dialer;
use tokio::sync::watch;
use tonic::transport::Channel;

/// Payload format version carried in `RaftRequest.version`.
const PAYLOAD_VERSION: u32 = 1;
/// Largest Raft message accepted or sent, bytes (entries batches and snapshot chunks).
pub const MAX_RAFT_MESSAGE_BYTES: usize = 64 * 1024 * 1024;
/// Most bytes of entries sent in one AppendEntries (estimated before encoding, see
/// [`entries_within`]); a slow peer gets less ([`AppendBudget`]). openraft bounds a request by entry count only (`max_payload_entries`),
/// and a request should arrive, be fsynced and be answered within one heartbeat interval
/// (openraft's deadline; a later answer is still used, see [`crate::pending_append`]): 256
/// entries of a 10,000-partition topic creation are ~100 MB.
/// A single larger entry is still sent alone.
pub const MAX_APPEND_ENTRIES_BYTES: usize = 1024 * 1024;
/// Longest a snapshot install keeps this node's elections off when neither its RPC completes
/// nor the snapshot shows up as installed (`RaftServer::install_snapshot`).
const MAX_INSTALL_WAIT: Duration = Duration::from_secs(10);
/// Connect timeout for a peer.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);

/// The directory ids peers presented in their replies, by node id (bounded by the members:
/// one entry per peer ever asked).
#[derive(Debug, Clone, Default)]
pub struct LearnedDirectories(Arc<Mutex<std::collections::BTreeMap<u64, uuid::Uuid>>>);

impl LearnedDirectories {
    fn record(&self, node: u64, dir: uuid::Uuid) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(node, dir);
    }

    /// The directory id node `node` last presented, if any.
    pub fn get(&self, node: u64) -> Option<uuid::Uuid> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&node)
            .copied()
    }
}

/// Creates one [`PeerClient`] per target node.
///
/// Peer addresses come from this node's `controller_quorum_voters` when it lists the peer
/// (each controller decides how it reaches the others: through a proxy, a NAT, another
/// interface), else from the membership (a controller added with `keelctl quorum
/// add-controller`, at the endpoint given there).
#[derive(Debug, Clone)]
pub struct NetworkFactory {
    voters: Arc<std::collections::BTreeMap<u64, String>>,
    acks: PeerAcks,
    identity: Identity,
    reach: Reachability,
    dialer: Dialer,
    learned: LearnedDirectories,
}

impl NetworkFactory {
    /// A factory dialing the voters at the given addresses with `dialer` (TLS or not),
    /// presenting `identity`'s cluster id, and recording every AppendEntries reply in `acks`.
    pub fn new(
        voters: Arc<std::collections::BTreeMap<u64, String>>,
        acks: PeerAcks,
        identity: Identity,
        dialer: Dialer,
    ) -> Self {
        Self {
            voters,
            acks,
            identity,
            reach: Reachability::default(),
            dialer,
            learned: LearnedDirectories::default(),
        }
    }

    /// The directory ids peers presented in their replies.
    pub fn learned(&self) -> LearnedDirectories {
        self.learned.clone()
    }
}

/// Whether each peer answered its last Raft RPC, shared by every client of this node, so that
/// losing and regaining a peer is logged once each (WARN, then INFO) instead of every failed
/// request several times a second (openraft's own lines are off at the default log filter).
#[derive(Debug, Clone, Default)]
pub struct Reachability(Arc<Mutex<std::collections::BTreeMap<u64, u64>>>);

/// A change of a peer's reachability, from [`Reachability::record`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReachChange {
    /// The first failed request after an answer (or since start).
    Lost,
    /// The first answer after `failures` failed requests.
    Regained { failures: u64 },
}

impl Reachability {
    /// Records whether a request to `target` got an answer (any reply from its Raft, errors
    /// included); returns the change to log, if this is one. The map holds one counter per
    /// peer that is failing: bounded by the voters.
    pub fn record(&self, target: u64, answered: bool) -> Option<ReachChange> {
        let mut failing = self.0.lock().unwrap_or_else(|e| e.into_inner());
        match (answered, failing.get_mut(&target)) {
            (false, Some(n)) => {
                *n = n.saturating_add(1);
                None
            }
            (false, None) => {
                failing.insert(target, 1);
                Some(ReachChange::Lost)
            }
            (true, Some(_)) => failing
                .remove(&target)
                .map(|failures| ReachChange::Regained { failures }),
            (true, None) => None,
        }
    }
}

/// This controller's node id and its cluster id: the one the applied image names, else the
/// one `meta.properties` recorded at start (a restarted node may not have re-applied the
/// `ClusterIdRecord` yet). Cheap to clone.
#[derive(Debug, Clone)]
pub struct Identity {
    node_id: u64,
    directory_id: uuid::Uuid,
    images: watch::Receiver<MetadataImage>,
    recorded_cluster_id: Option<String>,
}

impl Identity {
    /// The identity of node `node_id` with metadata log directory `directory_id`, whose
    /// applied images are `images`, and whose `meta.properties` recorded
    /// `recorded_cluster_id`.
    pub fn new(
        node_id: u64,
        directory_id: uuid::Uuid,
        images: watch::Receiver<MetadataImage>,
        recorded_cluster_id: Option<String>,
    ) -> Self {
        Self {
            node_id,
            directory_id,
            images,
            recorded_cluster_id,
        }
    }

    /// This node's metadata log directory id.
    pub fn directory_id(&self) -> uuid::Uuid {
        self.directory_id
    }

    /// The cluster id, empty while neither the log nor `meta.properties` names it.
    fn cluster_id(&self) -> String {
        match self.images.borrow().cluster_id() {
            Some(id) => id.to_string(),
            None => self.recorded_cluster_id.clone().unwrap_or_default(),
        }
    }
}

/// Why a controller (`own_id`, `own_cluster`) refuses a Raft request meant for node `target`
/// and sent by a member of `sender_cluster`; `None` when it accepts it. An empty cluster id
/// (not known yet on one side) matches any.
pub fn misdirected(
    own_id: u64,
    own_cluster: &str,
    target: u64,
    sender_cluster: &str,
) -> Option<String> {
    if target != own_id {
        return Some(format!(
            "raft request for controller {target} reached controller {own_id}: the sender's \
             controller_quorum_voters gives this address to another node"
        ));
    }
    if !own_cluster.is_empty() && !sender_cluster.is_empty() && own_cluster != sender_cluster {
        return Some(format!(
            "INCONSISTENT_CLUSTER_ID: raft request from cluster {sender_cluster} reached \
             controller {own_id} of cluster {own_cluster}"
        ));
    }
    None
}

impl RaftNetworkFactory<TypeConfig> for NetworkFactory {
    type Network = PeerClient;

    async fn new_client(&mut self, target: u64, node: &ControllerNode) -> Self::Network {
        let addr = self
            .voters
            .get(&target)
            .cloned()
            .unwrap_or_else(|| node.addr.clone());
        PeerClient {
            target,
            target_dir: node.directory_id,
            addr,
            learned: self.learned.clone(),
            client: None,
            acks: self.acks.clone(),
            identity: self.identity.clone(),
            reach: self.reach.clone(),
            dialer: self.dialer.clone(),
            budget: Arc::new(Mutex::new(AppendBudget::new(MAX_APPEND_ENTRIES_BYTES))),
            pending: None,
        }
    }
}

/// The RPC client to one peer. Connects lazily and reconnects after failures (tonic's channel
/// does the reconnecting).
#[derive(Debug)]
pub struct PeerClient {
    target: u64,
    /// The directory id the membership records for `target`, if any.
    target_dir: Option<uuid::Uuid>,
    addr: String,
    learned: LearnedDirectories,
    client: Option<RaftServiceClient<Channel>>,
    acks: PeerAcks,
    identity: Identity,
    reach: Reachability,
    dialer: Dialer,
    /// Bytes the next AppendEntries may carry ([`AppendBudget`]); shared with the pending
    /// RPC's task, which reports its outcome.
    budget: Arc<Mutex<AppendBudget>>,
    /// The last AppendEntries RPC, while openraft has not taken its answer
    /// ([`crate::pending_append`]).
    pending: Option<PendingAppend<Result<AppendEntriesResponse<u64>, RpcErr>>>,
}

/// What an RPC needs once its request is built: cheap to clone, so that an AppendEntries can
/// run in its own task ([`crate::pending_append`]).
#[derive(Debug, Clone)]
struct Link {
    target: u64,
    addr: String,
    reach: Reachability,
    learned: LearnedDirectories,
}

type RpcErr<E = openraft::error::Infallible> = RPCError<u64, ControllerNode, RaftError<u64, E>>;

impl PeerClient {
    fn encode<T: Serialize>(&self, v: &T) -> Result<RaftRequest, NetworkError> {
        let payload = postcard::to_stdvec(v).map_err(|e| NetworkError::new(&e))?;
        Ok(RaftRequest {
            version: PAYLOAD_VERSION,
            payload: payload.into(),
            target_node_id: self.target,
            cluster_id: self.identity.cluster_id(),
            sender_node_id: self.identity.node_id,
            sender_directory_id: self.identity.directory_id.as_bytes().to_vec().into(),
            target_directory_id: self
                .target_dir
                .map(|d| d.as_bytes().to_vec().into())
                .unwrap_or_default(),
        })
    }

    fn link(&self) -> Link {
        Link {
            target: self.target,
            addr: self.addr.clone(),
            reach: self.reach.clone(),
            learned: self.learned.clone(),
        }
    }
}

/// A 16-byte directory id field; `None` when empty, nil or not 16 bytes.
fn directory_field(b: &[u8]) -> Option<uuid::Uuid> {
    uuid::Uuid::from_slice(b).ok().filter(|d| !d.is_nil())
}

/// One line for an RPC that got no reply: the peer's address, the status message and its
/// distinct causes (`127.0.0.1:9094: tcp connect error: transport error: Connection refused
/// (os error 111)`).
/// openraft logs the error with its whole source chain, and tonic's chain repeats each layer
/// ("tcp connect error; source: tcp connect error; source: ..."), several times a second
/// while a peer is down; this error has no source.
fn concise(addr: &str, status: &tonic::Status) -> openraft::AnyError {
    openraft::AnyError::error(format!(
        "{addr}: {}",
        keel_runtime::status::status_line(status)
    ))
}

/// Whether `status` is the RPC's own deadline passing (tonic's `Timeout expired`, or
/// DEADLINE_EXCEEDED), not a refusal or a broken connection.
fn timed_out(status: &tonic::Status) -> bool {
    status.code() == tonic::Code::DeadlineExceeded
        || (status.code() == tonic::Code::Cancelled
            && status.message() == tonic::TimeoutExpired(()).to_string())
}

impl PeerClient {
    /// Asks the peer for a pre-vote ([`crate::pre_vote`]); `None` when it did not answer
    /// within `timeout` or refused the request. Not counted in the reachability log: a round
    /// runs only while no leader is heard from, when the peers' state is logged already.
    pub async fn pre_vote(&mut self, req: &PreVoteRequest, timeout: Duration) -> Option<bool> {
        let mut client = self.client().ok()?;
        let mut request = tonic::Request::new(self.encode(req).ok()?);
        request.set_timeout(timeout);
        let reply = tokio::time::timeout(timeout, client.pre_vote(request))
            .await
            .ok()?
            .ok()?
            .into_inner();
        postcard::from_bytes::<PreVoteReply>(&reply.payload)
            .ok()
            .map(|r| r.granted)
    }

    fn client(&mut self) -> Result<RaftServiceClient<Channel>, Unreachable> {
        if let Some(c) = &self.client {
            return Ok(c.clone());
        }
        let endpoint = Dialer::endpoint(&self.addr)
            .map_err(|e| Unreachable::new(&e))?
            .connect_timeout(CONNECT_TIMEOUT)
            .tcp_nodelay(true);
        let c = RaftServiceClient::new(self.dialer.connect_lazy(&endpoint))
            .max_decoding_message_size(MAX_RAFT_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_RAFT_MESSAGE_BYTES);
        self.client = Some(c.clone());
        Ok(c)
    }

    async fn call<Req, Resp, E>(
        &mut self,
        method: Method,
        req: &Req,
        option: &RPCOption,
    ) -> Result<Resp, RpcErr<E>>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let client = self.client()?;
        let request = self.encode(req)?;
        self.link()
            .exchange(client, method, request, option.hard_ttl())
            .await
    }

    /// Starts the AppendEntries `rpc` (encoded as `request`) in its own task, bounded by
    /// [`APPEND_RPC_DEADLINE`]. The
    /// task records the reply in the peer's acks (contact and match, whenever it arrives) and
    /// reports the outcome to the budget: answered within `in_time` (openraft's deadline),
    /// or missed (late, or not at all) when it carried more than one entry.
    fn spawn_append(
        &self,
        client: RaftServiceClient<Channel>,
        rpc: &AppendEntriesRequest<TypeConfig>,
        request: RaftRequest,
        in_time: Duration,
    ) -> tokio::task::JoinHandle<Result<AppendEntriesResponse<u64>, RpcErr>> {
        let link = self.link();
        let (budget, acks) = (self.budget.clone(), self.acks.clone());
        let several_entries = rpc.entries.len() > 1;
        let end = rpc
            .entries
            .last()
            .map(|e| e.log_id.index)
            .or(rpc.prev_log_id.map(|l| l.index));
        tokio::spawn(async move {
            let started = std::time::Instant::now();
            let result: Result<AppendEntriesResponse<u64>, RpcErr> = link
                .exchange(client, Method::AppendEntries, request, APPEND_RPC_DEADLINE)
                .await;
            {
                let mut b = budget.lock().unwrap_or_else(|e| e.into_inner());
                if result.is_ok() && started.elapsed() <= in_time {
                    b.answered();
                } else if several_entries {
                    b.missed();
                }
            }
            let outcome = match &result {
                Ok(AppendEntriesResponse::Success) => {
                    Some(AppendOutcome::Accepted { matched: end })
                }
                Ok(AppendEntriesResponse::PartialSuccess(m)) => Some(AppendOutcome::Accepted {
                    matched: m.map(|l| l.index),
                }),
                Ok(AppendEntriesResponse::Conflict) => Some(AppendOutcome::Rejected),
                // A higher vote or an error: the peer does not follow this node.
                Ok(AppendEntriesResponse::HigherVote(_)) | Err(_) => None,
            };
            if let Some(outcome) = outcome {
                acks.record(link.target, outcome);
            }
            result
        })
    }
}

impl Link {
    /// Sends `request` and decodes the reply, within `deadline`.
    async fn exchange<Resp, E>(
        &self,
        mut client: RaftServiceClient<Channel>,
        method: Method,
        request: RaftRequest,
        deadline: Duration,
    ) -> Result<Resp, RpcErr<E>>
    where
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let mut request = tonic::Request::new(request);
        request.set_timeout(deadline);
        let meter = keel_runtime::clock::StallMeter::process();
        let stalled_before = meter.stalled_ms();
        let result = match method {
            Method::AppendEntries => client.append_entries(request).await,
            Method::Vote => client.vote(request).await,
            Method::InstallSnapshot => client.install_snapshot(request).await,
        };
        let reply = match result {
            Ok(r) => {
                if let Some(ReachChange::Regained { failures }) =
                    self.reach.record(self.target, true)
                {
                    tracing::info!(
                        "controller {} at {} answers Raft requests again (after {failures} \
                         failed)",
                        self.target,
                        self.addr
                    );
                }
                let r = r.into_inner();
                self.learn(&r);
                r
            }
            Err(status) => {
                // No reply from the peer's Raft (refused, reset, closed, timed out, or a
                // transport error): treat the peer as unreachable so openraft backs off
                // instead of retrying in a tight loop (a half-open link that accepts and
                // closes connections would otherwise burn a core).
                let cause = concise(&self.addr, &status);
                let stalled = meter.stalled_ms().saturating_sub(stalled_before);
                if stalled > 0 && timed_out(&status) {
                    // This process did not run for part of the wait (paused, or starved of
                    // CPU): the deadline passed while it stood still, which says nothing of
                    // the peer. Not counted against it (a resumed controller blamed its
                    // healthy peers, found by a fresh-user trial).
                    tracing::debug!(
                        "controller {}: {cause}{}",
                        self.target,
                        keel_runtime::clock::stall_note(stalled)
                    );
                    return Err(RPCError::Unreachable(Unreachable::from(cause)));
                }
                if self.reach.record(self.target, false) == Some(ReachChange::Lost) {
                    tracing::warn!(
                        "controller {} does not answer Raft requests ({cause}); retrying while \
                         this controller needs it (a line follows when it answers one)",
                        self.target
                    );
                }
                return Err(RPCError::Unreachable(Unreachable::from(cause)));
            }
        };
        if !reply.error.is_empty() {
            let err: RaftError<u64, E> =
                postcard::from_bytes(&reply.error).map_err(|e| NetworkError::new(&e))?;
            return Err(RPCError::RemoteError(RemoteError::new(self.target, err)));
        }
        Ok(postcard::from_bytes(&reply.payload).map_err(|e| NetworkError::new(&e))?)
    }

    /// Records the directory id a reply presented.
    fn learn(&self, reply: &RaftReply) {
        if let Ok(d) = uuid::Uuid::from_slice(&reply.directory_id)
            && !d.is_nil()
        {
            self.learned.record(self.target, d);
        }
    }
}

/// `None` when `entries` are estimated to fit in `max_bytes`; otherwise how many of the first
/// entries fit (at least 1, so an entry larger than `max_bytes` still goes alone). Stops
/// walking once over the limit, so the cost is bounded by `max_bytes`, not the request.
pub fn entries_within(entries: &[Entry], max_bytes: usize) -> Option<u64> {
    /// Log id, payload tag and lengths of one entry, bytes (generous).
    const ENTRY_OVERHEAD: usize = 32;
    let mut total = 0usize;
    for (i, e) in entries.iter().enumerate() {
        total += ENTRY_OVERHEAD
            + match &e.payload {
                openraft::EntryPayload::Normal(batch) => batch.encoded_len_bound(),
                openraft::EntryPayload::Membership(m) => 64 * m.nodes().count().max(1),
                openraft::EntryPayload::Blank => 0,
            };
        if total > max_bytes {
            return (entries.len() > 1).then_some(i.max(1) as u64);
        }
    }
    None
}

#[derive(Debug, Clone, Copy)]
enum Method {
    AppendEntries,
    Vote,
    InstallSnapshot,
}

impl RaftNetwork<TypeConfig> for PeerClient {
    /// Runs the RPC in its own task, which openraft's deadline (one heartbeat interval) does
    /// not cancel: a late reply answers openraft's next request from the same match point
    /// instead of the entries being sent again ([`crate::pending_append`]).
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<u64>, RpcErr> {
        let range = AppendRange::of(&rpc);
        if let Some(pending) = &self.pending
            && reuse(&pending.range, &range) == Reuse::Unrelated
        {
            self.pending = None;
        }
        if self.pending.is_none() {
            let budget = self
                .budget
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .bytes();
            if let Some(fit) = entries_within(&rpc.entries, budget) {
                // openraft retries at once with this many entries and keeps the hint for the
                // next few requests (`replication::update_hint`).
                return Err(RPCError::PayloadTooLarge(
                    PayloadTooLarge::new_entries_hint(fit),
                ));
            }
            let client = self.client()?;
            let request = self.encode(&rpc)?;
            let task = self.spawn_append(client, &rpc, request, option.hard_ttl());
            self.pending = Some(PendingAppend {
                range: range.clone(),
                task,
            });
        }
        let Some(pending) = self.pending.as_mut() else {
            unreachable!("set above");
        };
        let pending_range = pending.range.clone();
        // openraft's deadline drops this future here; the task stays in `self.pending`.
        let joined = (&mut pending.task).await;
        // Polled to completion: never polled again.
        self.pending = None;
        match joined {
            Ok(Ok(reply)) => Ok(answer_for(reply, &pending_range, &range)),
            Ok(Err(e)) => Err(e),
            Err(e) => Err(RPCError::Unreachable(Unreachable::new(&e))),
        }
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<InstallSnapshotResponse<u64>, RpcErr<InstallSnapshotError>> {
        // Contact while pending: the last chunk is answered only after the install (see
        // `peer_acks::contact_at`).
        let _pending = self.acks.installing(self.target);
        let result: Result<InstallSnapshotResponse<u64>, _> =
            self.call(Method::InstallSnapshot, &rpc, &option).await;
        if let Ok(resp) = &result
            && resp.vote <= rpc.vote
        {
            self.acks.record_snapshot_reply(self.target);
        }
        result
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<u64>,
        option: RPCOption,
    ) -> Result<VoteResponse<u64>, RpcErr> {
        self.call(Method::Vote, &rpc, &option).await
    }

    /// Pauses after an unreachable peer: [`backoff_ms`]. openraft's default is a constant
    /// 500 ms, so one AppendEntries that missed its heartbeat-interval deadline (a large
    /// entry on a busy follower) silenced the leader toward that follower for most of its
    /// check-quorum window (election_timeout_max_ms, 600 ms by default), and with another
    /// follower down the leader stepped down.
    fn backoff(&self) -> openraft::network::Backoff {
        openraft::network::Backoff::new((0..).map(|i| Duration::from_millis(backoff_ms(i))))
    }
}

/// The pause before retry `i` (0-based) of an unreachable peer, ms: 25, 50, 100, 200, 400,
/// then 500 for good. A retry that succeeds ends the series (openraft drops it).
pub fn backoff_ms(i: u32) -> u64 {
    (25u64 << i.min(5)).min(500)
}

/// The server side: hands RPCs from peers to the local Raft node, after checking they are
/// meant for it ([`misdirected`]).
#[derive(Clone)]
pub struct RaftServer {
    raft: Raft<TypeConfig>,
    identity: Identity,
    /// openraft's `elect` switch: leader contact and snapshot installs are reported to it.
    gate: Arc<ElectionGate>,
    /// The node's Raft log (its last log id answers pre-votes).
    log: LogStore,
    /// With an authorizer, only controllers talk Raft: the sender must be the principal of the
    /// controller id it claims (leader or candidate) and hold CLUSTER_ACTION.
    authz: keel_metadata_log::authz::Authz,
    /// The applied image (its ACLs) for `authz`.
    images: Option<tokio::sync::watch::Receiver<keel_metadata_log::MetadataImage>>,
    /// Voter-key refusals already logged.
    refused_keys: RefusedKeys,
}

impl std::fmt::Debug for RaftServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RaftServer").finish_non_exhaustive()
    }
}

impl RaftServer {
    /// Serves `raft`, the node of `identity`, whose Raft log is `log` and elections `gate`.
    pub fn new(
        raft: Raft<TypeConfig>,
        identity: Identity,
        gate: Arc<ElectionGate>,
        log: LogStore,
    ) -> Self {
        Self {
            raft,
            identity,
            gate,
            log,
            authz: Default::default(),
            images: None,
            refused_keys: RefusedKeys::default(),
        }
    }

    /// Checks every RPC's sender with `authz` against the ACLs of `images`.
    pub fn with_authz(
        mut self,
        authz: keel_metadata_log::authz::Authz,
        images: tokio::sync::watch::Receiver<keel_metadata_log::MetadataImage>,
    ) -> Self {
        self.authz = authz;
        self.images = Some(images);
        self
    }

    /// PERMISSION_DENIED unless the caller of `request` may act as controller `sender`.
    fn authorize<T>(&self, request: &tonic::Request<T>, sender: u64) -> Result<(), tonic::Status> {
        if !self.authz.enabled() {
            return Ok(());
        }
        let image = match &self.images {
            Some(i) => i.borrow().clone(),
            None => keel_metadata_log::MetadataImage::empty(),
        };
        let caller = self.authz.caller_of(request);
        self.authz
            .check_node(
                image.acls(),
                &caller,
                keel_runtime::principal::NodeRole::Controller,
                sender as i64,
            )
            .map_err(|d| {
                tonic::Status::permission_denied(format!(
                    "{} ({}): {}",
                    d.code,
                    d.code.code(),
                    d.message
                ))
            })
    }

    /// Counts one snapshot install in (`true`) or out; elections are off while any is
    /// counted ([`ElectionGate::count_install`]).
    fn count_install(&self, starting: bool) {
        self.gate.count_install(starting);
    }

    /// Refuses a request meant for another node or cluster (FAILED_PRECONDITION; the sender
    /// treats it as an unreachable peer and backs off), and decodes the rest.
    fn accept<T: DeserializeOwned>(&self, req: &RaftRequest) -> Result<T, tonic::Status> {
        let own = self.identity.cluster_id();
        if let Some(why) = misdirected(
            self.identity.node_id,
            &own,
            req.target_node_id,
            &req.cluster_id,
        ) {
            tracing::warn!("refused: {why}");
            return Err(tonic::Status::failed_precondition(why));
        }
        if let Some(why) = crate::membership::voter_key_mismatch(
            self.identity.node_id,
            self.identity.directory_id,
            directory_field(&req.target_directory_id),
            req.sender_node_id,
        ) {
            // Logged once per sender and cause change, not per request.
            if self.refused_keys.note(req.sender_node_id, &why) {
                tracing::warn!("refused: {why}");
            }
            return Err(tonic::Status::failed_precondition(why));
        }
        decode(req)
    }
}

fn decode<T: DeserializeOwned>(req: &RaftRequest) -> Result<T, tonic::Status> {
    if req.version != PAYLOAD_VERSION {
        return Err(tonic::Status::invalid_argument(format!(
            "raft payload version {} not supported (this node speaks {PAYLOAD_VERSION})",
            req.version
        )));
    }
    postcard::from_bytes(&req.payload)
        .map_err(|e| tonic::Status::invalid_argument(format!("raft payload does not decode: {e}")))
}

/// The last voter-key refusal logged per sender, so a replaced node retrying several times a
/// second logs its refusal once (bounded by the node ids that ever sent a refused request).
#[derive(Debug, Clone, Default)]
struct RefusedKeys(Arc<Mutex<std::collections::BTreeMap<u64, String>>>);

impl RefusedKeys {
    /// True when `why` is new for `sender` (log it).
    fn note(&self, sender: u64, why: &str) -> bool {
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if m.get(&sender).is_some_and(|w| w == why) {
            return false;
        }
        m.insert(sender, why.to_string());
        true
    }
}

/// The reply of `r`, presenting this node's directory id `dir`.
fn reply<T: Serialize, E: Serialize>(
    r: Result<T, E>,
    dir: uuid::Uuid,
) -> Result<tonic::Response<RaftReply>, tonic::Status> {
    let internal =
        |e: postcard::Error| tonic::Status::internal(format!("encoding raft reply: {e}"));
    let reply = match r {
        Ok(v) => RaftReply {
            payload: postcard::to_stdvec(&v).map_err(internal)?.into(),
            error: Default::default(),
            directory_id: dir.as_bytes().to_vec().into(),
        },
        Err(e) => RaftReply {
            payload: Default::default(),
            error: postcard::to_stdvec(&e).map_err(internal)?.into(),
            directory_id: dir.as_bytes().to_vec().into(),
        },
    };
    Ok(tonic::Response::new(reply))
}

#[tonic::async_trait]
impl RaftService for RaftServer {
    async fn append_entries(
        &self,
        request: tonic::Request<RaftRequest>,
    ) -> Result<tonic::Response<RaftReply>, tonic::Status> {
        let req: AppendEntriesRequest<TypeConfig> = self.accept(request.get_ref())?;
        self.authorize(&request, req.vote.leader_id().node_id)?;
        let result = self.raft.append_entries(req).await;
        // Accepted from the leader of this node's term (a higher vote means the sender is not).
        if matches!(
            result,
            Ok(AppendEntriesResponse::Success | AppendEntriesResponse::Conflict)
                | Ok(AppendEntriesResponse::PartialSuccess(_))
        ) {
            self.gate.leader_contact();
        }
        reply(result, self.identity.directory_id)
    }

    async fn pre_vote(
        &self,
        request: tonic::Request<RaftRequest>,
    ) -> Result<tonic::Response<RaftReply>, tonic::Status> {
        let req: PreVoteRequest = self.accept(request.get_ref())?;
        self.authorize(&request, req.candidate)?;
        let (term, is_leader) = {
            let m = self.raft.metrics();
            let m = m.borrow();
            (
                m.current_term,
                m.state.is_leader() && m.current_leader == Some(self.identity.node_id),
            )
        };
        let mut log = self.log.clone();
        let last_log_id = openraft::storage::RaftLogStorage::get_log_state(&mut log)
            .await
            .map_err(|e| tonic::Status::internal(format!("reading the log state: {e}")))?
            .last_log_id;
        let view = VoterView {
            term,
            last_log_id,
            is_leader,
            since_leader_contact: self.gate.since_leader_contact(),
        };
        let lease = Duration::from_millis(self.raft.config().election_timeout_min);
        let granted = pre_vote::grants(&view, &req, lease);
        tracing::debug!(candidate = req.candidate, granted, "pre-vote");
        reply::<_, ()>(Ok(PreVoteReply { granted }), self.identity.directory_id)
    }

    async fn vote(
        &self,
        request: tonic::Request<RaftRequest>,
    ) -> Result<tonic::Response<RaftReply>, tonic::Status> {
        let req: VoteRequest<u64> = self.accept(request.get_ref())?;
        self.authorize(&request, req.vote.leader_id().node_id)?;
        reply(self.raft.vote(req).await, self.identity.directory_id)
    }

    async fn install_snapshot(
        &self,
        request: tonic::Request<RaftRequest>,
    ) -> Result<tonic::Response<RaftReply>, tonic::Status> {
        let req: InstallSnapshotRequest<TypeConfig> = self.accept(request.get_ref())?;
        self.authorize(&request, req.vote.leader_id().node_id)?;
        if !req.done {
            return reply(
                self.raft.install_snapshot(req).await,
                self.identity.directory_id,
            );
        }
        // The last chunk is answered only once the snapshot is installed, and the leader sends
        // this node nothing else meanwhile: without a message, openraft's election timer
        // (leader lease + election timeout, ~0.9-1.2 s) runs out during a long install, and
        // this follower, in contact with a healthy leader all along, campaigned with a higher
        // term and deposed it (openraft 0.9 has no pre-vote). Kafka's followers likewise stay
        // followers while they fetch a snapshot (KIP-630). Elections resume the longer of the
        // maximum election timeout and the install RPC timeout (2 s) after the install: time
        // for the leader's next message, also when the leader's deadline for this RPC passed
        // before the install ended (the RPC waited in the accept queue while this node
        // started) and it must send a snapshot again (Kafka's followers campaign after
        // `controller.quorum.fetch.timeout.ms`, 2 s, without a fetch answered).
        // Counted out after the install, whether this RPC completes or is dropped (the leader's
        // deadline can pass mid-install; the install goes on in the Raft core), or after
        // MAX_INSTALL_WAIT if it never completes; then after the grace.
        self.count_install(true);
        let (answered, answer) = tokio::sync::oneshot::channel::<()>();
        let server = self.clone();
        let target = req.meta.last_log_id;
        tokio::spawn(async move {
            let mut metrics = server.raft.metrics();
            let installed = metrics.wait_for(|m| m.snapshot >= target);
            let _ = tokio::time::timeout(MAX_INSTALL_WAIT, async {
                tokio::select! {
                    _ = installed => {}
                    Ok(()) = answer => {}
                }
            })
            .await;
            let config = server.raft.config();
            tokio::time::sleep(Duration::from_millis(
                config
                    .election_timeout_max
                    .max(config.install_snapshot_timeout),
            ))
            .await;
            server.count_install(false);
        });
        let result = self.raft.install_snapshot(req).await;
        if result.is_ok() {
            self.gate.leader_contact();
        }
        let _ = answered.send(());
        reply(result, self.identity.directory_id)
    }
}

#[cfg(test)]
mod tests {
    use super::{ReachChange, Reachability, entries_within};
    use keel_metadata_log::raft_types::{Entry, LogId, MetadataRecords};
    use keel_metadata_log::records::{MetadataRecord, NoOpRecord, metadata_record::Record};
    use openraft::{CommittedLeaderId, EntryPayload};

    /// An entry of `records` no-op records (a few bytes each).
    fn entry(index: u64, records: usize) -> Entry {
        let rec = MetadataRecord {
            record: Some(Record::NoOp(NoOpRecord {})),
        };
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
            payload: EntryPayload::Normal(MetadataRecords::new(vec![rec; records])),
        }
    }

    #[test]
    fn requests_for_another_node_or_cluster_are_refused() {
        use super::misdirected;
        assert_eq!(misdirected(1, "a", 1, "a"), None);
        // Either side may not know the cluster id yet.
        assert_eq!(misdirected(1, "", 1, "b"), None);
        assert_eq!(misdirected(1, "a", 1, ""), None);
        let other_node = misdirected(1, "a", 2, "a").unwrap();
        assert!(
            other_node.contains("for controller 2 reached controller 1"),
            "{other_node}"
        );
        let other_cluster = misdirected(1, "a", 1, "b").unwrap();
        assert!(
            other_cluster.starts_with("INCONSISTENT_CLUSTER_ID")
                && other_cluster.contains("cluster b")
                && other_cluster.contains("cluster a"),
            "{other_cluster}"
        );
    }

    #[test]
    fn backoff_grows_from_25_ms_to_500_ms() {
        let got: Vec<u64> = (0..8).map(super::backoff_ms).collect();
        assert_eq!(got, [25, 50, 100, 200, 400, 500, 500, 500]);
        assert_eq!(super::backoff_ms(u32::MAX), 500);
    }

    #[test]
    fn losing_and_regaining_a_peer_is_reported_once_each() {
        let r = Reachability::default();
        assert_eq!(
            r.record(2, true),
            None,
            "answers from the start: nothing to say"
        );
        assert_eq!(r.record(2, false), Some(ReachChange::Lost));
        assert_eq!(r.record(2, false), None);
        assert_eq!(r.record(3, false), Some(ReachChange::Lost), "per peer");
        assert_eq!(r.record(2, false), None);
        assert_eq!(
            r.record(2, true),
            Some(ReachChange::Regained { failures: 3 })
        );
        assert_eq!(r.record(2, true), None);
        assert_eq!(
            r.clone().record(2, false),
            Some(ReachChange::Lost),
            "shared by clones"
        );
    }

    #[test]
    fn append_entries_are_cut_by_bytes_but_never_below_one_entry() {
        let small: Vec<Entry> = (1..=256).map(|i| entry(i, 1)).collect();
        assert_eq!(entries_within(&small, 1 << 20), None);
        assert_eq!(entries_within(&[], 1 << 20), None);
        // Each entry of 1000 records is over 2 KB: 10 KB hold only a few.
        let big: Vec<Entry> = (1..=10).map(|i| entry(i, 1000)).collect();
        let fit = entries_within(&big, 10_000).expect("over the limit");
        assert!((1..10).contains(&fit), "{fit}");
        assert_eq!(entries_within(&big[..fit as usize], 10_000), None);
        assert!(entries_within(&big[..fit as usize + 1], 10_000).is_some());
        // One entry over the limit goes alone; two get a hint of one.
        assert_eq!(entries_within(&big[..1], 100), None);
        assert_eq!(entries_within(&big[..2], 100), Some(1));
    }
}
