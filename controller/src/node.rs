//! A controller node: the Raft node on the sled store, the write path, and the gRPC server
//! (RaftService + ControllerService) on one listener.
//!
//! Start-up: open the metadata log directory (recovering the newest snapshot and the Raft
//! log), start openraft with the configured timeouts, and on first start initialize the
//! static voter set (every voter does this with the same membership; openraft refuses it on
//! a node that already has state, which is the restart case).

use std::collections::BTreeMap;
use std::sync::Arc;

use keel_metadata_log::MetadataImage;
use keel_metadata_log::raft_types::TypeConfig;
use keel_metadata_log::store::{self, LogStore};
use openraft::{BasicNode, Raft, SnapshotPolicy};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::config::ControllerConfig;
use crate::raft_network::{MAX_RAFT_MESSAGE_BYTES, NetworkFactory, RaftServer};

/// Why a controller could not start. `Display` is one line naming the cause.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The metadata log directory could not be opened.
    #[error("metadata_log_dir {dir}: {source}")]
    Storage {
        /// The directory.
        dir: String,
        /// The storage error.
        source: Box<keel_metadata_log::raft_types::StorageError>,
    },
    /// openraft refused the configuration or failed to start.
    #[error("raft: {0}")]
    Raft(String),
    /// The `metrics_listener` could not be bound or the recorder installed.
    #[error("{0}")]
    Metrics(#[from] keel_observability::EndpointError),
    /// The listener could not be bound.
    #[error("listeners {addr}: {source}")]
    Bind {
        /// The address.
        addr: String,
        /// The OS error.
        source: std::io::Error,
    },
}

/// A running Raft node with its storage handles.
#[derive(Clone)]
pub struct RaftNode {
    /// The openraft handle.
    pub raft: Raft<TypeConfig>,
    /// Every applied image.
    pub images: watch::Receiver<MetadataImage>,
    /// Read access to the Raft log (for metadata reads and streaming).
    pub log: LogStore,
    /// Voters by node id: advertised addresses.
    pub voters: Arc<BTreeMap<u64, String>>,
    /// This node's id.
    pub node_id: u64,
    /// False while this node is the Raft leader but could not confirm a quorum recently
    /// (see [`spawn_check_quorum`]).
    pub quorum_confirmed: watch::Receiver<bool>,
}

impl RaftNode {
    /// True when this node is the active controller: the Raft leader with a confirmed quorum.
    pub fn is_active(&self) -> bool {
        let m = self.raft.metrics();
        let m = m.borrow();
        m.state.is_leader()
            && m.current_leader == Some(self.node_id)
            && *self.quorum_confirmed.borrow()
    }
}

impl std::fmt::Debug for RaftNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RaftNode")
            .field("node_id", &self.node_id)
            .finish_non_exhaustive()
    }
}

/// Builds openraft's configuration from ours.
pub fn raft_config(c: &ControllerConfig) -> openraft::Config {
    openraft::Config {
        cluster_name: "keel".into(),
        heartbeat_interval: c.raft_heartbeat_interval_ms,
        election_timeout_min: c.election_timeout_min_ms,
        election_timeout_max: c.election_timeout_max_ms,
        // Heartbeats keep a follower's lease; a vote during it is refused (no disruption by
        // a partitioned node rejoining).
        snapshot_policy: SnapshotPolicy::LogsSinceLast(c.metadata_snapshot_max_entries),
        // Keep half a snapshot interval of log after each snapshot: a follower that is a
        // little behind catches up from the log; one further behind gets the snapshot.
        max_in_snapshot_log_to_keep: c.metadata_snapshot_max_entries / 2,
        snapshot_max_chunk_size: 4 * 1024 * 1024,
        max_payload_entries: 256,
        install_snapshot_timeout: 2000,
        ..Default::default()
    }
}

/// Opens storage and starts the Raft node (initializing the voter set on first start).
pub async fn start_raft(c: &ControllerConfig) -> Result<RaftNode, StartError> {
    let dir = c.metadata_log_dir.display().to_string();
    let (log, sm) = store::open(&c.metadata_log_dir).map_err(|source| StartError::Storage {
        dir: dir.clone(),
        source: Box::new(source),
    })?;
    let images = sm.subscribe();
    let config = raft_config(c)
        .validate()
        .map_err(|e| StartError::Raft(e.to_string()))?;
    let voters = Arc::new(c.controller_quorum_voters.clone());
    let network = NetworkFactory::new(voters.clone());
    let raft = Raft::new(c.node_id, Arc::new(config), network, log.clone(), sm)
        .await
        .map_err(|e| StartError::Raft(e.to_string()))?;
    let initialized = raft
        .is_initialized()
        .await
        .map_err(|e| StartError::Raft(e.to_string()))?;
    if !initialized {
        let members: BTreeMap<u64, BasicNode> = c
            .controller_quorum_voters
            .iter()
            .map(|(id, addr)| (*id, BasicNode::new(addr.clone())))
            .collect();
        match raft.initialize(members).await {
            Ok(()) => tracing::info!(node_id = c.node_id, "initialized a new metadata quorum"),
            // Another voter's initialization reached us first: that is the same membership.
            Err(e) => tracing::info!(node_id = c.node_id, error = %e, "quorum already initialized"),
        }
    }
    let (quorum_confirmed, _check_quorum) = spawn_check_quorum(
        raft.clone(),
        c.node_id,
        std::time::Duration::from_millis(c.election_timeout_min_ms / 2),
        std::time::Duration::from_millis(c.election_timeout_max_ms),
    );
    Ok(RaftNode {
        raft,
        images,
        log,
        voters,
        node_id: c.node_id,
        quorum_confirmed,
    })
}

/// Binds the listener named by `listeners` (a clear error when the port is taken).
pub async fn bind(c: &ControllerConfig) -> Result<TcpListener, StartError> {
    TcpListener::bind(c.listeners)
        .await
        .map_err(|source| StartError::Bind {
            addr: c.listeners.to_string(),
            source,
        })
}

/// The tonic server builder limits shared by both services.
pub fn raft_service(
    node: &RaftNode,
) -> keel_proto::raft::raft_service_server::RaftServiceServer<RaftServer> {
    keel_proto::raft::raft_service_server::RaftServiceServer::new(RaftServer::new(
        node.raft.clone(),
    ))
    .max_decoding_message_size(MAX_RAFT_MESSAGE_BYTES)
    .max_encoding_message_size(MAX_RAFT_MESSAGE_BYTES)
}

/// Check-quorum (Raft thesis §6.2; Kafka: `controller.quorum.fetch.timeout.ms`): every
/// `interval`, an active controller confirms with a heartbeat round that a quorum still
/// follows it. If it cannot within `timeout`, it must stop acting as the active controller:
/// the returned flag turns false, the write path then answers NOT_CONTROLLER and leader hints
/// say "unknown" until a confirmation succeeds again (or the node learns of a newer leader and
/// becomes a follower). openraft 0.9 keeps such a node in its Leader state (it cannot commit,
/// so nothing is acknowledged either way) and ignores an election trigger on a leader, hence
/// this application-level flag.
pub fn spawn_check_quorum(
    raft: Raft<TypeConfig>,
    node_id: u64,
    interval: std::time::Duration,
    timeout: std::time::Duration,
) -> (watch::Receiver<bool>, tokio::task::JoinHandle<()>) {
    let (tx, rx) = watch::channel(true);
    let task = tokio::spawn(async move {
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            let is_leader = {
                let m = raft.metrics();
                let m = m.borrow();
                m.state.is_leader() && m.current_leader == Some(node_id)
            };
            if !is_leader {
                tx.send_if_modified(|ok| !std::mem::replace(ok, true));
                continue;
            }
            let confirmed = matches!(
                tokio::time::timeout(timeout, raft.ensure_linearizable()).await,
                Ok(Ok(_))
            );
            let changed = tx.send_if_modified(|ok| std::mem::replace(ok, confirmed) != confirmed);
            if changed && !confirmed {
                tracing::warn!(
                    node_id,
                    timeout_ms = timeout.as_millis() as u64,
                    "lost contact with a quorum of controllers: no longer acting as the active controller"
                );
            } else if changed {
                tracing::info!(node_id, "quorum contact restored");
            }
        }
    });
    (rx, task)
}
