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
//! not decode is a `NetworkError`; an error the remote Raft returned is a `RemoteError`. Every
//! RPC is bounded by openraft's per-RPC TTL.

use std::time::Duration;

use keel_metadata_log::raft_types::TypeConfig;
use keel_proto::raft::raft_service_client::RaftServiceClient;
use keel_proto::raft::raft_service_server::RaftService;
use keel_proto::raft::{RaftReply, RaftRequest};
use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::{BasicNode, Raft};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::peer_acks::{AppendOutcome, PeerAcks};
use tonic::transport::{Channel, Endpoint};

/// Payload format version carried in `RaftRequest.version`.
const PAYLOAD_VERSION: u32 = 1;
/// Largest Raft message accepted or sent, bytes (entries batches and snapshot chunks).
pub const MAX_RAFT_MESSAGE_BYTES: usize = 64 * 1024 * 1024;
/// Connect timeout for a peer.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);

/// Creates one [`PeerClient`] per target node.
///
/// Peer addresses come from this node's `controller_quorum_voters` (static voters, like KRaft
/// before KIP-853): each controller decides how it reaches the others (through a proxy, a NAT,
/// another interface), so the membership's stored address is only a fallback.
#[derive(Debug, Clone, Default)]
pub struct NetworkFactory {
    voters: std::sync::Arc<std::collections::BTreeMap<u64, String>>,
    acks: PeerAcks,
}

impl NetworkFactory {
    /// A factory dialing the voters at the given addresses and recording every
    /// AppendEntries reply in `acks`.
    pub fn new(
        voters: std::sync::Arc<std::collections::BTreeMap<u64, String>>,
        acks: PeerAcks,
    ) -> Self {
        Self { voters, acks }
    }
}

impl RaftNetworkFactory<TypeConfig> for NetworkFactory {
    type Network = PeerClient;

    async fn new_client(&mut self, target: u64, node: &BasicNode) -> Self::Network {
        let addr = self
            .voters
            .get(&target)
            .cloned()
            .unwrap_or_else(|| node.addr.clone());
        PeerClient {
            target,
            addr,
            client: None,
            acks: self.acks.clone(),
        }
    }
}

/// The RPC client to one peer. Connects lazily and reconnects after failures (tonic's channel
/// does the reconnecting).
#[derive(Debug)]
pub struct PeerClient {
    target: u64,
    addr: String,
    client: Option<RaftServiceClient<Channel>>,
    acks: PeerAcks,
}

type RpcErr<E = openraft::error::Infallible> = RPCError<u64, BasicNode, RaftError<u64, E>>;

fn encode<T: Serialize>(v: &T) -> Result<RaftRequest, NetworkError> {
    let payload = postcard::to_stdvec(v).map_err(|e| NetworkError::new(&e))?;
    Ok(RaftRequest {
        version: PAYLOAD_VERSION,
        payload: payload.into(),
    })
}

/// One line for an RPC that got no reply: the peer's address, the status message and its
/// distinct causes (`127.0.0.1:9094: tcp connect error: transport error: Connection refused
/// (os error 111)`).
/// openraft logs the error with its whole source chain, and tonic's chain repeats each layer
/// ("tcp connect error; source: tcp connect error; source: ..."), several times a second
/// while a peer is down; this error has no source.
fn concise(addr: &str, status: &tonic::Status) -> openraft::AnyError {
    let mut parts: Vec<String> = Vec::new();
    let mut push = |s: String| {
        if !s.is_empty() && !parts.iter().any(|p| p.contains(s.as_str())) {
            parts.push(s);
        }
    };
    push(status.message().to_string());
    let mut source = std::error::Error::source(status);
    // Bounded: a cause chain is a handful of layers.
    for _ in 0..8 {
        let Some(e) = source else { break };
        push(e.to_string());
        source = e.source();
    }
    openraft::AnyError::error(format!("{addr}: {}", parts.join(": ")))
}

impl PeerClient {
    fn client(&mut self) -> Result<RaftServiceClient<Channel>, Unreachable> {
        if let Some(c) = &self.client {
            return Ok(c.clone());
        }
        let endpoint = Endpoint::from_shared(format!("http://{}", self.addr))
            .map_err(|e| Unreachable::new(&e))?
            .connect_timeout(CONNECT_TIMEOUT)
            .tcp_nodelay(true);
        let c = RaftServiceClient::new(endpoint.connect_lazy())
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
        let mut client = self.client()?;
        let mut request = tonic::Request::new(encode(req)?);
        request.set_timeout(option.hard_ttl());
        let result = match method {
            Method::AppendEntries => client.append_entries(request).await,
            Method::Vote => client.vote(request).await,
            Method::InstallSnapshot => client.install_snapshot(request).await,
        };
        let reply = match result {
            Ok(r) => r.into_inner(),
            Err(status) => {
                // No reply from the peer's Raft (refused, reset, closed, timed out, or a
                // transport error): treat the peer as unreachable so openraft backs off
                // instead of retrying in a tight loop (a half-open link that accepts and
                // closes connections would otherwise burn a core).
                return Err(RPCError::Unreachable(Unreachable::from(concise(
                    &self.addr, &status,
                ))));
            }
        };
        if !reply.error.is_empty() {
            let err: RaftError<u64, E> =
                postcard::from_bytes(&reply.error).map_err(|e| NetworkError::new(&e))?;
            return Err(RPCError::RemoteError(RemoteError::new(self.target, err)));
        }
        Ok(postcard::from_bytes(&reply.payload).map_err(|e| NetworkError::new(&e))?)
    }
}

#[derive(Debug, Clone, Copy)]
enum Method {
    AppendEntries,
    Vote,
    InstallSnapshot,
}

impl RaftNetwork<TypeConfig> for PeerClient {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<u64>, RpcErr> {
        let end = rpc
            .entries
            .last()
            .map(|e| e.log_id.index)
            .or(rpc.prev_log_id.map(|l| l.index));
        let result = self.call(Method::AppendEntries, &rpc, &option).await;
        let outcome = match &result {
            Ok(AppendEntriesResponse::Success) => Some(AppendOutcome::Accepted { matched: end }),
            Ok(AppendEntriesResponse::PartialSuccess(m)) => Some(AppendOutcome::Accepted {
                matched: m.map(|l| l.index),
            }),
            Ok(AppendEntriesResponse::Conflict) => Some(AppendOutcome::Rejected),
            // A higher vote or an error: the peer does not follow this node.
            Ok(AppendEntriesResponse::HigherVote(_)) | Err(_) => None,
        };
        if let Some(outcome) = outcome {
            self.acks.record(self.target, outcome);
        }
        result
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<InstallSnapshotResponse<u64>, RpcErr<InstallSnapshotError>> {
        self.call(Method::InstallSnapshot, &rpc, &option).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<u64>,
        option: RPCOption,
    ) -> Result<VoteResponse<u64>, RpcErr> {
        self.call(Method::Vote, &rpc, &option).await
    }
}

/// The server side: hands RPCs from peers to the local Raft node.
#[derive(Clone)]
pub struct RaftServer {
    raft: Raft<TypeConfig>,
}

impl std::fmt::Debug for RaftServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RaftServer").finish_non_exhaustive()
    }
}

impl RaftServer {
    /// Serves `raft`.
    pub fn new(raft: Raft<TypeConfig>) -> Self {
        Self { raft }
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

fn reply<T: Serialize, E: Serialize>(
    r: Result<T, E>,
) -> Result<tonic::Response<RaftReply>, tonic::Status> {
    let internal =
        |e: postcard::Error| tonic::Status::internal(format!("encoding raft reply: {e}"));
    let reply = match r {
        Ok(v) => RaftReply {
            payload: postcard::to_stdvec(&v).map_err(internal)?.into(),
            error: Default::default(),
        },
        Err(e) => RaftReply {
            payload: Default::default(),
            error: postcard::to_stdvec(&e).map_err(internal)?.into(),
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
        let req: AppendEntriesRequest<TypeConfig> = decode(request.get_ref())?;
        reply(self.raft.append_entries(req).await)
    }

    async fn vote(
        &self,
        request: tonic::Request<RaftRequest>,
    ) -> Result<tonic::Response<RaftReply>, tonic::Status> {
        let req: VoteRequest<u64> = decode(request.get_ref())?;
        reply(self.raft.vote(req).await)
    }

    async fn install_snapshot(
        &self,
        request: tonic::Request<RaftRequest>,
    ) -> Result<tonic::Response<RaftReply>, tonic::Status> {
        let req: InstallSnapshotRequest<TypeConfig> = decode(request.get_ref())?;
        reply(self.raft.install_snapshot(req).await)
    }
}
