//! A controller node: the Raft node on the metadata-log store, the write path, and the gRPC server
//! (RaftService + ControllerService) on one listener.
//!
//! Start-up: open the metadata log directory (recovering the newest snapshot and the Raft
//! log), start openraft with the configured timeouts, and on first start initialize the
//! static voter set (every voter does this with the same membership; openraft refuses it on
//! a node that already has state, which is the restart case).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use keel_metadata_log::MetadataImage;
use keel_metadata_log::raft_types::ControllerNode;
use keel_metadata_log::raft_types::TypeConfig;
use keel_metadata_log::store::{self, LogStore};
use openraft::{Raft, SnapshotPolicy};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::config::ControllerConfig;
use crate::meta_properties::{self, MetaProperties};
use crate::peer_acks::{PeerAcks, quorum_in_contact};
use crate::pre_vote::ElectionGate;
use crate::raft_network::{Identity, MAX_RAFT_MESSAGE_BYTES, NetworkFactory, RaftServer};
use keel_runtime::tls::Dialer;

/// Why a controller could not start, or had to stop. `Display` is one line naming the cause.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The metadata log directory holds a partial state (see
    /// [`keel_metadata_log::store::open_checked`]).
    #[error("metadata_log_dir {0}")]
    Inconsistent(String),
    /// A controller of a dynamic quorum (`controller_quorum_bootstrap_servers`) started on a
    /// directory `keel-controller format` has not prepared (Kafka refuses an unformatted
    /// directory too): nothing says which voters to start or join with.
    #[error(
        "metadata_log_dir {0} is not formatted: with controller_quorum_bootstrap_servers (a dynamic quorum, KIP-853) run `keel-controller format` first with --standalone (the first controller), --initial-controllers, or --no-initial-controllers (to be added with keelctl quorum add-controller)"
    )]
    NotFormatted(String),
    /// `meta.properties` disagrees with the configuration, or cannot be read or written.
    #[error("metadata_log_dir {0}")]
    Identity(#[from] crate::meta_properties::IdentityError),
    /// openraft stopped with a fatal error (a storage failure or a panicked task) while the
    /// controller ran: the process must not keep serving the state it had.
    #[error("raft stopped: {0}")]
    RaftStopped(String),
    /// The metadata log directory could not be opened.
    #[error("metadata_log_dir {dir}: {source}")]
    Storage {
        /// The directory.
        dir: String,
        /// The storage error.
        source: Box<keel_metadata_log::raft_types::StorageError>,
    },
    /// The Raft log could not be opened: locked by another process, corrupt, or written by
    /// an earlier build (the message names the path).
    #[error("metadata_log_dir {0}")]
    RaftLog(std::io::Error),
    /// openraft refused the configuration or failed to start.
    #[error("raft: {0}")]
    Raft(String),
    /// A TLS file could not be read or rustls refused it (the message names the key and file).
    #[error("{0}")]
    Tls(#[from] keel_runtime::tls::TlsError),
    /// The `metrics_listener` could not be bound or the recorder installed.
    #[error("{0}")]
    Metrics(#[from] keel_runtime::EndpointError),
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
    /// `controller_quorum_voters`: the addresses this node uses for the controllers it lists
    /// (the membership's own addresses serve the others, see [`Self::address_of`]).
    pub configured_voters: Arc<BTreeMap<u64, String>>,
    /// This node's id.
    pub node_id: u64,
    /// This node's metadata log directory id (`meta.properties`).
    pub directory_id: uuid::Uuid,
    /// False while this node is the Raft leader but could not confirm a quorum recently
    /// (see [`spawn_check_quorum`]).
    pub quorum_confirmed: watch::Receiver<bool>,
    /// When each peer last answered this node's AppendEntries (meaningful while leader).
    pub peer_acks: PeerAcks,
    /// Node id and cluster id presented on and checked against Raft RPCs.
    pub identity: Identity,
    /// openraft's election switch ([`crate::pre_vote`]).
    pub gate: Arc<ElectionGate>,
    /// The pre-vote task, aborted with the last clone.
    _pre_vote: Arc<AbortOnDrop>,
    /// The directory ids peers presented in their Raft replies.
    pub learned: crate::raft_network::LearnedDirectories,
}

impl RaftNode {
    /// The leader this node may name, from its Raft metrics `m`: openraft's current leader,
    /// unless that is another node not heard from for the maximum election timeout
    /// ([`crate::pre_vote::leader_in_contact`]). Whether this node, as leader, still has a
    /// quorum is [`Self::is_active`]'s business.
    pub fn known_leader(&self, m: &openraft::RaftMetrics<u64, ControllerNode>) -> Option<u64> {
        crate::pre_vote::leader_in_contact(
            m.current_leader,
            self.node_id,
            self.gate.since_leader_contact(),
            std::time::Duration::from_millis(self.raft.config().election_timeout_max),
        )
    }

    /// The membership this node sees now (voters, observers, whether a change is pending).
    pub fn members(&self) -> crate::membership::Members {
        let m = self.raft.metrics();
        let m = m.borrow();
        members_of(&m)
    }

    /// `host:port` of controller `id`: from `controller_quorum_voters`, else the membership;
    /// empty when neither knows it.
    pub fn address_of(&self, id: u64) -> String {
        if let Some(a) = self.configured_voters.get(&id) {
            return a.clone();
        }
        self.raft
            .metrics()
            .borrow()
            .membership_config
            .membership()
            .get_node(&id)
            .map(|n| n.addr.clone())
            .unwrap_or_default()
    }

    /// True when this node is the active controller: the Raft leader with a confirmed quorum.
    pub fn is_active(&self) -> bool {
        let m = self.raft.metrics();
        let m = m.borrow();
        m.state.is_leader()
            && m.current_leader == Some(self.node_id)
            && *self.quorum_confirmed.borrow()
    }
}

/// The membership of Raft metrics `m`; a change counts as pending until its entry is applied.
pub fn members_of(m: &openraft::RaftMetrics<u64, ControllerNode>) -> crate::membership::Members {
    let config = &m.membership_config;
    let applied = m.last_applied.map(|l| l.index);
    let pending = config.log_id().map(|l| l.index) > applied;
    crate::membership::Members::of(config.membership(), pending)
}

/// The voter ids of Raft metrics `m`'s membership.
fn voter_ids(m: &openraft::RaftMetrics<u64, ControllerNode>) -> BTreeSet<u64> {
    m.membership_config.membership().voter_ids().collect()
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
        // The log starts right after the newest snapshot once it is durable, as Kafka's
        // KRaft log does (KafkaMetadataLog.deleteBeforeSnapshot moves the log start offset to
        // the latest snapshot's end): every record still in the log then follows the
        // snapshot, so a reader (`keelctl metadata log`) seeds its state from that snapshot
        // and derives the exact state after each record. With half an interval kept (as
        // before), records between the log start and the snapshot had no state to start
        // from. A follower that is behind still catches up from the log while a replication
        // stream reads it (openraft keeps logs in use by replication); one further behind gets
        // the snapshot, as a Kafka follower fetches one (FetchSnapshot).
        max_in_snapshot_log_to_keep: 0,
        snapshot_max_chunk_size: 4 * 1024 * 1024,
        max_payload_entries: 256,
        install_snapshot_timeout: 2000,
        ..Default::default()
    }
}

/// Turns a committed vote for this node (it was the leader when it stopped) into a plain vote
/// for itself in the same term, so it starts as a follower instead of resuming leadership.
///
/// openraft 0.9 lets a restarted leader lead again in its old term. If the process lost the
/// unsynced tail of its log (power loss, a torn write) after sending those entries to the
/// followers, it would then write different entries at the same (term, index) as theirs and
/// the logs would diverge for good (seen in a break-it run). A new term rules that out: the
/// node keeps its vote in its term and becomes leader again only through an election, which
/// the followers grant only to a log as up to date as theirs. Kafka's KRaft likewise never
/// resumes leadership after a restart (the leader epoch is bumped by a new election).
///
/// Errors: the vote cannot be read or written.
async fn never_resume_leadership(
    log: &mut store::LogStore,
    node_id: u64,
) -> Result<(), keel_metadata_log::raft_types::StorageError> {
    use openraft::storage::RaftLogStorage;
    if let Some(vote) = log.read_vote().await?
        && vote.is_committed()
        && vote.leader_id().voted_for() == Some(node_id)
    {
        let plain = openraft::Vote::new(vote.leader_id().term, node_id);
        log.save_vote(&plain).await?;
        tracing::info!(
            node_id,
            term = vote.leader_id().term,
            "was the leader when it stopped: starts as a follower (a new election decides)"
        );
    }
    Ok(())
}

/// Opens storage and starts the Raft node (initializing the voter set on first start).
///
/// Before openraft sees the directory: `meta.properties` must match `node_id` and the voter
/// ids (it is written on first start), and the directory must not hold a partial state
/// (`raft/` lost while `snapshots/` or `meta.properties` remain, and the other cases of
/// [`store::open_checked`]). Starting on such a directory would re-initialize the quorum on
/// top of old state or forget this node's vote.
///
/// `dialer` opens the channels to the peers (TLS when the controller has it).
pub async fn start_raft(c: &ControllerConfig, dialer: Dialer) -> Result<RaftNode, StartError> {
    let (log, sm, props) = open_metadata_log_dir(c).await?;
    let directory_id = props
        .directory_id
        .expect("open_metadata_log_dir records a directory id");
    let images = sm.subscribe();
    let config = raft_config(c)
        .validate()
        .map_err(|e| StartError::Raft(e.to_string()))?;
    let voters = Arc::new(c.controller_quorum_voters.clone());
    let peer_acks = PeerAcks::default();
    let identity = Identity::new(
        c.node_id,
        directory_id,
        images.clone(),
        props.cluster_id.clone(),
    );
    let network = NetworkFactory::new(voters.clone(), peer_acks.clone(), identity.clone(), dialer);
    let learned = network.learned();
    let raft = Raft::new(
        c.node_id,
        Arc::new(config),
        network.clone(),
        log.clone(),
        sm,
    )
    .await
    .map_err(|e| StartError::Raft(e.to_string()))?;
    let gate = Arc::new(ElectionGate::new(raft.clone()));
    let pre_vote = spawn_pre_vote(
        raft.clone(),
        gate.clone(),
        c.node_id,
        network,
        log.clone(),
        std::time::Duration::from_millis((c.election_timeout_min_ms / 4).max(10)),
        std::time::Duration::from_millis(c.election_timeout_min_ms),
    );
    peer_acks.attach(raft.metrics());
    initialize_if_new(&raft, c, props.initial_controllers.as_deref(), directory_id).await?;
    let (quorum_confirmed, _check_quorum) = spawn_check_quorum(
        raft.clone(),
        c.node_id,
        peer_acks.clone(),
        std::time::Duration::from_millis(c.election_timeout_min_ms / 2),
        std::time::Duration::from_millis(c.election_timeout_max_ms),
    );
    Ok(RaftNode {
        raft,
        images,
        log,
        configured_voters: voters,
        node_id: c.node_id,
        directory_id,
        quorum_confirmed,
        peer_acks,
        identity,
        gate,
        learned,
        _pre_vote: Arc::new(AbortOnDrop(pre_vote)),
    })
}

/// How often a voter that finds no quorum says so ([`spawn_pre_vote`]): a WARN line every 30 s
/// while its pre-vote rounds fail.
const NO_QUORUM_REPORT: std::time::Duration = std::time::Duration::from_secs(30);

/// Runs pre-vote rounds ([`crate::pre_vote`]) for `node_id` until the task is aborted: every `interval`, a node
/// that is a voter, not the leader, and has heard from no leader for `lease` asks every other
/// voter of its current membership (concurrently, each bounded by `interval`) and records the
/// outcome in `gate`.
pub fn spawn_pre_vote(
    raft: Raft<TypeConfig>,
    gate: Arc<ElectionGate>,
    node_id: u64,
    mut network: NetworkFactory,
    log: LogStore,
    interval: std::time::Duration,
    lease: std::time::Duration,
) -> tokio::task::JoinHandle<()> {
    use openraft::network::RaftNetworkFactory;
    tokio::spawn(async move {
        // The voters the clients in `peers` were made for (rebuilt when the membership
        // changes).
        let mut peers_of: BTreeMap<u64, ControllerNode> = BTreeMap::new();
        // Whether this node was a voter at the last round (changes are logged once).
        let mut was_voter: Option<bool> = None;
        let mut peers = Vec::new();
        // Since when the pre-vote rounds fail in a row, and when that was last said.
        let mut lost_since: Option<tokio::time::Instant> = None;
        let mut last_said: Option<tokio::time::Instant> = None;
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let (term, leader, voters) = {
                let m = raft.metrics();
                let m = m.borrow();
                (m.current_term, m.state.is_leader(), members_of(&m).voters)
            };
            let is_voter = voters.contains_key(&node_id);
            // Before the quorum is initialized (or this observer added) there is no membership
            // to be out of.
            if was_voter != Some(is_voter) && !voters.is_empty() {
                match (was_voter, is_voter) {
                    (Some(true), false) => tracing::warn!(
                        node_id,
                        "this controller is no longer a voter (removed with keelctl quorum \
                         remove-controller?): it will not vote or campaign; stop it, or add it \
                         again"
                    ),
                    (_, false) => tracing::info!(node_id, "this controller is not a voter"),
                    (Some(false), true) => tracing::info!(node_id, "this controller is a voter"),
                    _ => {}
                }
                was_voter = Some(is_voter);
            }
            if !is_voter {
                // An observer (or a removed voter) never campaigns.
                gate.pre_vote_result(false);
                continue;
            }
            if leader || gate.since_leader_contact().is_some_and(|d| d < lease) {
                lost_since = None;
                continue;
            }
            let others: BTreeMap<u64, ControllerNode> = voters
                .iter()
                .filter(|(id, _)| **id != node_id)
                .map(|(id, n)| (*id, n.clone()))
                .collect();
            let mut log = log.clone();
            let Ok(state) = openraft::storage::RaftLogStorage::get_log_state(&mut log).await else {
                continue;
            };
            let req = crate::pre_vote::PreVoteRequest {
                candidate: node_id,
                next_term: term + 1,
                last_log_id: state.last_log_id,
            };
            if peers.len() != others.len() || peers_of != others {
                // First round, a membership change, or a client lost to a panicked task:
                // (re)connect all.
                peers.clear();
                for (id, node) in &others {
                    peers.push(network.new_client(*id, node).await);
                }
                peers_of = others;
            }
            let mut asks = tokio::task::JoinSet::new();
            for mut p in peers.drain(..) {
                let req = req.clone();
                asks.spawn(async move {
                    let answer = p.pre_vote(&req, interval).await;
                    (p, answer)
                });
            }
            let mut granted = 0;
            let mut reached = 0;
            while let Some(done) = asks.join_next().await {
                if let Ok((p, answer)) = done {
                    peers.push(p);
                    granted += usize::from(answer == Some(true));
                    reached += usize::from(answer.is_some());
                }
            }
            let won = crate::pre_vote::won(granted, voters.len());
            if won != gate.elections_enabled() {
                tracing::debug!(granted, voters = voters.len(), won, "pre-vote round");
            }
            // Without a quorum nothing else is logged at INFO or WARN (elections are not
            // even started): say so every NO_QUORUM_REPORT, as Kafka's controllers keep
            // logging their failed elections.
            let now = tokio::time::Instant::now();
            if won {
                lost_since = None;
            } else {
                let since = *lost_since.get_or_insert(now);
                if now - since >= NO_QUORUM_REPORT
                    && last_said.is_none_or(|t| now - t >= NO_QUORUM_REPORT)
                {
                    last_said = Some(now);
                    tracing::warn!(
                        node_id,
                        reached,
                        granted,
                        voters = voters.len(),
                        "no active controller for {} s: this controller reaches {reached} of \
                         the {} other voters and {granted} would vote for it, short of a \
                         majority of {} voters; are the others running and reachable \
                         (controller_quorum_voters)?",
                        (now - since).as_secs(),
                        voters.len().saturating_sub(1),
                        voters.len()
                    );
                }
            }
            gate.pre_vote_result(won);
        }
    })
}

/// Aborts a background task when the last clone of the owning [`RaftNode`] is dropped.
#[derive(Debug)]
pub struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Opens the metadata log directory after checking it belongs to this node and is whole:
/// `meta.properties` matches `node_id` and the voters, `raft/` exists and holds a vote when a
/// cluster id is recorded, the Raft log was not copied from another node; the node never
/// resumes a leadership it held before the restart. Writes `meta.properties` on first start
/// (with a new directory id; one is added to a file of an earlier build). Returns the log, the
/// state machine and the directory's `meta.properties` as on disk (with a directory id).
/// The voter ids are checked once Raft has loaded the membership (in [`start_raft`]).
async fn open_metadata_log_dir(
    c: &ControllerConfig,
) -> Result<(LogStore, store::StateMachineStore, MetaProperties), StartError> {
    let dir = c.metadata_log_dir.display().to_string();
    let voter_ids: BTreeSet<u64> = c.controller_quorum_voters.keys().copied().collect();
    let props_path = meta_properties::path_in(&c.metadata_log_dir);
    let stored = meta_properties::read(&c.metadata_log_dir)?;
    let inconsistent = |e: store::OpenError| match e {
        store::OpenError::Inconsistent { .. } => StartError::Inconsistent(e.to_string()),
        store::OpenError::Log(e) => StartError::RaftLog(e),
        store::OpenError::Storage(source) => StartError::Storage {
            dir: dir.clone(),
            source,
        },
    };
    let dynamic = !c.controller_quorum_bootstrap_servers.is_empty();
    if dynamic && stored.is_none() {
        return Err(StartError::NotFormatted(dir.clone()));
    }
    if let Some(p) = &stored {
        p.check(&props_path, c.node_id)?;
        store::check_before_open(&c.metadata_log_dir).map_err(inconsistent)?;
        let raft_dir = c.metadata_log_dir.join("raft");
        // `keel-controller format` writes only meta.properties: such a directory has no
        // raft/ yet, no snapshots and no cluster id.
        let freshly_formatted =
            p.cluster_id.is_none() && !c.metadata_log_dir.join("snapshots").exists();
        if !raft_dir.exists() && !freshly_formatted {
            return Err(StartError::Inconsistent(format!(
                "{} is inconsistent: missing (no Raft log and no vote), but {} exists; \
                 restore it from a backup (emptying a voter's directory is unsafe, see the README)",
                raft_dir.display(),
                props_path.display()
            )));
        }
    }
    let disk_options = store::DiskOptions {
        engine: c.metadata_log_engine,
        segment_bytes: c.metadata_log_segment_bytes,
    };
    let (mut log, mut sm) =
        store::open_checked(&c.metadata_log_dir, disk_options).map_err(inconsistent)?;
    let storage_err = |e: keel_metadata_log::raft_types::StorageError| StartError::Storage {
        dir: dir.clone(),
        source: Box::new(e),
    };
    // A configured voter set other than the one this directory was formatted or first
    // started with: refused while the directory holds no membership (the start would
    // initialize another quorum); once it does, the membership in the log decides who votes
    // (KIP-853: voters are added and removed there, and a node that was down missed some
    // changes), and the list only says where to reach controllers.
    if let Some(p) = &stored
        && !dynamic
        && p.voter_ids != voter_ids
    {
        match membership_voters_on_disk(&mut log, &mut sm)
            .await
            .map_err(storage_err)?
        {
            None => p.check_voters(&props_path, &voter_ids)?,
            Some(in_log) if in_log != voter_ids => {
                let ids =
                    |s: &BTreeSet<u64>| s.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
                tracing::warn!(
                    "controller_quorum_voters lists voter ids {} but the metadata log's voters \
                     are {} (this node may have missed a membership change; it catches up \
                     from the active controller): the log decides who votes, the list is \
                     where to reach controllers",
                    ids(&voter_ids),
                    ids(&in_log)
                );
            }
            Some(_) => {}
        }
    }
    // A node that knows the cluster id has voted (a follower stores its leader's vote before
    // it accepts entries): no vote means `raft/` was emptied (rebuilt from nothing, it would
    // forget its vote and the log it acknowledged).
    if let Some(id) = stored.as_ref().and_then(|p| p.cluster_id.as_deref())
        && !log.stored_state().map_err(storage_err)?.has_vote
    {
        return Err(StartError::Inconsistent(format!(
            "{} is inconsistent: it holds no vote, but {} records cluster_id {id} (was raft/ \
             emptied?); restore it from a backup (emptying a voter's directory is unsafe, see \
             the README)",
            c.metadata_log_dir.join("raft").display(),
            props_path.display()
        )));
    }
    if let Some(owner) = log.claim_for_node(c.node_id).await.map_err(storage_err)? {
        return Err(StartError::Inconsistent(format!(
            "{} is inconsistent: it belongs to node {owner}, not node_id {} (was it copied from \
             another controller?), so its vote and log are that node's; restore this node's own \
             raft/ from a backup",
            c.metadata_log_dir.join("raft").display(),
            c.node_id
        )));
    }
    never_resume_leadership(&mut log, c.node_id)
        .await
        .map_err(storage_err)?;
    let image_cluster_id = sm.image().cluster_id().map(str::to_string);
    let props = match stored {
        Some(mut p) => {
            p.check_cluster_id(&props_path, image_cluster_id.as_deref())?;
            if p.directory_id.is_none() {
                p.directory_id = Some(uuid::Uuid::new_v4());
                meta_properties::write(&c.metadata_log_dir, &p)?;
                tracing::info!(
                    directory_id = %keel_metadata_log::raft_types::directory_id_text(
                        p.directory_id.unwrap_or_default()
                    ),
                    "recorded a directory id for this metadata log directory"
                );
            }
            p
        }
        None => {
            let p = MetaProperties {
                node_id: c.node_id,
                voter_ids,
                cluster_id: image_cluster_id,
                directory_id: Some(uuid::Uuid::new_v4()),
                initial_controllers: None,
            };
            meta_properties::write(&c.metadata_log_dir, &p)?;
            p
        }
    };
    Ok((log, sm, props))
}

/// The voter ids of the newest membership in the Raft log `log` (scanned backwards in steps
/// of 512 entries, only down to the last purged entry), else of the state machine `sm`'s
/// snapshot; `None` for a directory without any membership.
///
/// Errors: the log or the state machine cannot be read.
async fn membership_voters_on_disk(
    log: &mut LogStore,
    sm: &mut store::StateMachineStore,
) -> Result<Option<BTreeSet<u64>>, keel_metadata_log::raft_types::StorageError> {
    use openraft::storage::{RaftLogReader, RaftLogStorage, RaftStateMachine};
    let state = log.get_log_state().await?;
    if let Some(last) = state.last_log_id {
        let first = state.last_purged_log_id.map_or(0, |l| l.index + 1);
        let mut end = last.index + 1;
        while end > first {
            let start = end.saturating_sub(512).max(first);
            let entries = log.try_get_log_entries(start..end).await?;
            if let Some(m) = entries.iter().rev().find_map(|e| match &e.payload {
                openraft::EntryPayload::Membership(m) => Some(m.voter_ids().collect()),
                _ => None,
            }) {
                return Ok(Some(m));
            }
            end = start;
        }
    }
    let (_, membership) = sm.applied_state().await?;
    Ok(membership
        .log_id()
        .is_some()
        .then(|| membership.membership().voter_ids().collect()))
}

/// Initializes the quorum with the configured voters on a node that has never been part of
/// one; another voter's initialization reaching it first is the same membership.
async fn initialize_if_new(
    raft: &Raft<TypeConfig>,
    c: &ControllerConfig,
    formatted_with: Option<&[crate::membership::InitialController]>,
    directory_id: uuid::Uuid,
) -> Result<(), StartError> {
    let initialized = raft
        .is_initialized()
        .await
        .map_err(|e| StartError::Raft(e.to_string()))?;
    if initialized {
        // The restart case: the log holds the membership.
        return Ok(());
    }
    let observer = match formatted_with {
        Some(list) => list.is_empty(),
        None => !c.controller_quorum_voters.contains_key(&c.node_id),
    };
    if observer {
        // An observer: it receives the log once a voter adds it (`keelctl quorum
        // add-controller`), and never starts a quorum of its own.
        let bootstrap = if c.controller_quorum_bootstrap_servers.is_empty() {
            c.controller_quorum_voters
                .values()
                .cloned()
                .collect::<Vec<_>>()
                .join(",")
        } else {
            c.controller_quorum_bootstrap_servers.join(",")
        };
        tracing::info!(
            node_id = c.node_id,
            "not an initial voter: starting as an observer, waiting to be added: keelctl \
             --bootstrap-controllers {bootstrap} quorum add-controller --controller-id {} \
             --directory-id {} --endpoint {}",
            c.node_id,
            keel_metadata_log::raft_types::directory_id_text(directory_id),
            c.advertised_listeners
        );
        return Ok(());
    }
    // Formatted with --standalone / --initial-controllers: those voters with their
    // directory ids (KIP-853); else the static voters, whose directory ids the active
    // controller records once they answer.
    let members: BTreeMap<u64, ControllerNode> = match formatted_with {
        Some(list) => list
            .iter()
            .map(|v| {
                (
                    v.id,
                    ControllerNode {
                        addr: v.endpoint.clone(),
                        directory_id: Some(v.directory_id),
                    },
                )
            })
            .collect(),
        None => c
            .controller_quorum_voters
            .iter()
            .map(|(id, addr)| {
                (
                    *id,
                    ControllerNode {
                        addr: addr.clone(),
                        directory_id: None,
                    },
                )
            })
            .collect(),
    };
    match raft.initialize(members).await {
        Ok(()) => tracing::info!(node_id = c.node_id, "initialized a new metadata quorum"),
        // Another voter's initialization reached us first: that is the same membership.
        Err(e) => tracing::info!(node_id = c.node_id, error = %e, "quorum already initialized"),
    }
    Ok(())
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
    authz: keel_metadata_log::authz::Authz,
) -> keel_proto::raft::raft_service_server::RaftServiceServer<RaftServer> {
    // Session tokens (#23) are checked against this node's SCRAM credentials; every clone of
    // `authz` (the controller service's too) shares it.
    authz.attach_images(node.images.clone());
    keel_proto::raft::raft_service_server::RaftServiceServer::new(
        RaftServer::new(
            node.raft.clone(),
            node.identity.clone(),
            node.gate.clone(),
            node.log.clone(),
        )
        .with_authz(authz, node.images.clone()),
    )
    .max_decoding_message_size(MAX_RAFT_MESSAGE_BYTES)
    .max_encoding_message_size(MAX_RAFT_MESSAGE_BYTES)
}

/// Check-quorum (Raft thesis §6.2; Kafka: `controller.quorum.fetch.timeout.ms`): every
/// `interval`, an active controller checks that a majority of its membership's voters answered its
/// replication within `timeout` ([`quorum_in_contact`] over `acks`). If not, it must stop
/// acting as the active controller: the returned flag turns false, the write path then answers
/// NOT_CONTROLLER and leader hints say "unknown" until contact is back (or the node learns of
/// a newer leader and becomes a follower). openraft 0.9 keeps such a node in its Leader state
/// (it cannot commit, so nothing is acknowledged either way) and ignores an election trigger
/// on a leader, hence this application-level flag.
///
/// An earlier version asked openraft for one heartbeat round (`ensure_linearizable`), which
/// fails as soon as the replies are in without a quorum: with one voter down, a single
/// heartbeat that missed its deadline on a busy follower stepped the leader down.
pub fn spawn_check_quorum(
    raft: Raft<TypeConfig>,
    node_id: u64,
    acks: PeerAcks,
    interval: std::time::Duration,
    timeout: std::time::Duration,
) -> (watch::Receiver<bool>, tokio::task::JoinHandle<()>) {
    let (tx, rx) = watch::channel(true);
    let timeout_ms = timeout.as_millis() as i64;
    let task = tokio::spawn(async move {
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Monotonic ms (`peer_acks::monotonic_ms`) at which this node was first seen leading
        // in its current term.
        let mut leading_since: Option<(u64, i64)> = None;
        let meter = keel_runtime::clock::StallMeter::process();
        // The stall meter's count at the previous check: a step-down right after a stall
        // names it (a pause of this process, not the network, lost the contact).
        let mut stall_seen = meter.stalled_ms();
        // Since when this leader has had no quorum contact, and when that was last said: the
        // pre-vote task, which says so for other voters, skips a node openraft still counts
        // as its leader (seen by the fresh-user trial: 70 s without a line).
        let mut lost_since: Option<std::time::Instant> = None;
        let mut last_said: Option<std::time::Instant> = None;
        loop {
            ticker.tick().await;
            let stalled = meter.stalled_ms();
            let stall = stalled.saturating_sub(stall_seen);
            stall_seen = stalled;
            let (is_leader, term, voters) = {
                let m = raft.metrics();
                let m = m.borrow();
                (
                    m.state.is_leader() && m.current_leader == Some(node_id),
                    m.current_term,
                    voter_ids(&m),
                )
            };
            if !is_leader {
                leading_since = None;
                lost_since = None;
                tx.send_if_modified(|ok| !std::mem::replace(ok, true));
                continue;
            }
            let now = crate::peer_acks::monotonic_ms();
            let since = match leading_since {
                Some((t, since)) if t == term => since,
                _ => {
                    leading_since = Some((term, now));
                    now
                }
            };
            let confirmed = quorum_in_contact(
                now,
                since,
                timeout_ms,
                node_id,
                voters.iter().copied(),
                |peer| acks.contact_at(peer, now, timeout_ms),
            );
            let changed = tx.send_if_modified(|ok| std::mem::replace(ok, confirmed) != confirmed);
            if changed && !confirmed {
                if stall > 0 {
                    tracing::warn!(
                        node_id,
                        timeout_ms,
                        stall_ms = stall,
                        "this controller did not run for {stall} ms (paused, or starved of \
                         CPU) and has no contact with a quorum of controllers since: no longer \
                         acting as the active controller (another one is likely elected)"
                    );
                } else {
                    tracing::warn!(
                        node_id,
                        timeout_ms,
                        "lost contact with a quorum of controllers: no longer acting as the active controller"
                    );
                }
            } else if changed {
                tracing::info!(node_id, "quorum contact restored");
            }
            let now_i = std::time::Instant::now();
            if confirmed {
                lost_since = None;
            } else {
                let since = *lost_since.get_or_insert(now_i);
                if now_i - since >= NO_QUORUM_REPORT
                    && last_said.is_none_or(|t| now_i - t >= NO_QUORUM_REPORT)
                {
                    last_said = Some(now_i);
                    tracing::warn!(
                        node_id,
                        voters = voters.len(),
                        "no active controller for {} s: this controller (the last leader) \
                         has had no contact with a quorum of the {} voters; are the others \
                         running and reachable (controller_quorum_voters)?",
                        (now_i - since).as_secs(),
                        voters.len()
                    );
                }
            }
        }
    });
    (rx, task)
}

/// Resolves when openraft stops on its own: `RaftMetrics.running_state` turns `Err` (a
/// storage error or a panicked task makes the Raft core exit with a `Fatal`), or the core
/// task ends and drops its metrics channel. Returns the cause in one line.
///
/// A clean [`Raft::shutdown`] also resolves it; callers stop watching before they shut down.
pub async fn raft_stopped(raft: Raft<TypeConfig>) -> String {
    // The core records the cause in `metrics` and then ends, which closes every metrics
    // channel. Waiting on `server_metrics` (changed only with the vote, state, leader or
    // membership) instead of `metrics` (changed with every append and apply) keeps this task
    // asleep while the node works.
    let metrics = raft.metrics();
    let mut server = raft.server_metrics();
    loop {
        if let Err(fatal) = &metrics.borrow().running_state {
            return fatal.to_string();
        }
        if server.changed().await.is_err() {
            return match &metrics.borrow().running_state {
                Err(fatal) => fatal.to_string(),
                Ok(()) => "the Raft core task ended".to_string(),
            };
        }
    }
}

/// Records the cluster id in `meta.properties` once the metadata log names it (the first
/// active controller commits a `ClusterIdRecord` after the quorum forms). Ends after writing
/// it, or when the image channel closes. A failed write is logged; the next start retries.
pub fn spawn_record_cluster_id(
    dir: std::path::PathBuf,
    mut images: watch::Receiver<MetadataImage>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let cluster_id = loop {
            if let Some(id) = images.borrow_and_update().cluster_id() {
                break id.to_string();
            }
            if images.changed().await.is_err() {
                return;
            }
        };
        let result = tokio::task::spawn_blocking(move || {
            let Some(mut props) = meta_properties::read(&dir)? else {
                return Ok(());
            };
            // A different id already recorded: the directory mixes two clusters. Keep the
            // file as it is and report it (a start with a snapshot of this log refuses).
            props.check_cluster_id(&meta_properties::path_in(&dir), Some(&cluster_id))?;
            if props.cluster_id.is_some() {
                return Ok(());
            }
            props.cluster_id = Some(cluster_id);
            meta_properties::write(&dir, &props)
        })
        .await;
        match result {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::error!(error = %e, "could not record the cluster id"),
            Err(e) => tracing::warn!(error = %e, "could not record the cluster id"),
        }
    })
}
