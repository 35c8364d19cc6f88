//! The controller process: bind, start Raft, start the write task, serve gRPC until the
//! shutdown future resolves, then stop Raft.

use std::future::Future;

use keel_proto::controller::controller_service_server::ControllerServiceServer;
use keel_runtime::tls::Dialer;
use keel_runtime::{MetricsServer, Readiness};
use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch};

use crate::config::ControllerConfig;
use crate::node::{self, StartError};
use crate::raft_network::MAX_RAFT_MESSAGE_BYTES;
use crate::service::{ControllerGrpc, QuorumState};
use crate::write_path::{self, WritePathConfig};

/// How long in-flight requests may take to finish after the shutdown signal, and then how
/// long Raft may take to stop (so a SIGTERM ends the process within about 2x this, whatever
/// the peers and brokers do; issue #24). Raft's log and vote are durable at every step, so
/// cutting what is still in flight loses nothing.
pub const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_millis(400);

/// How often the active controller looks for expired broker sessions (and runs its other
/// periodic work), ms at most; Kafka's controller likewise checks for stale brokers far more
/// often than brokers heartbeat.
pub const SESSION_CHECK_INTERVAL_MS: u64 = 100;

/// Streams a client may reset before this server accepted them, per connection, before the
/// connection is closed (h2's guard against CVE-2023-44487's rapid reset; h2's default is
/// 20). A paused or starved controller finds, when it resumes, every Raft request its peers
/// sent meanwhile (Raft heartbeats, votes, broker heartbeats) already cancelled: with 20 it
/// dropped a healthy peer's connection (`too_many_resets`) after a pause of about 2 s. 256
/// covers the pauses of a few seconds that VMs and overloaded hosts see, and still bounds the
/// work a client can cause this way; a longer one (48 s by hand) still ends in one reconnect.
const MAX_PENDING_ACCEPT_RESETS: usize = 256;

/// Runs a controller until `shutdown` resolves: binds `config.listeners`, then [`serve`].
/// Errors are start-up failures, or [`StartError::RaftStopped`] when openraft stops on a fatal
/// error while serving (one line each); a clean shutdown returns `Ok`.
pub async fn run(
    config: ControllerConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), StartError> {
    // Bind first: a taken port fails before anything touches the log directory.
    let listener = node::bind(&config).await?;
    serve(listener, config, shutdown).await
}

/// [`run`] for a process that serves the metrics of several roles on one listener (the
/// combined `keel-server`, KIP-833): `config.metrics_listener` must be `None`; once Raft has
/// started, the controller's metrics are described and sampled into the process's global
/// recorder (installed if needed) and the receiver of its readiness (as `/health/ready`
/// would report it, [`crate::metrics::readiness`]) is sent on `readiness`. Errors as [`run`].
pub async fn run_reporting_readiness(
    config: ControllerConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
    readiness: oneshot::Sender<watch::Receiver<Readiness>>,
) -> Result<(), StartError> {
    let listener = node::bind(&config).await?;
    serve_with(listener, config, shutdown, MetricsOut::Report(readiness)).await
}

/// Where the controller's metrics and readiness go.
enum MetricsOut {
    /// Served on `metrics_listener` when it is set.
    Listener,
    /// Handed to the process that serves them ([`run_reporting_readiness`]).
    Report(oneshot::Sender<watch::Receiver<Readiness>>),
}

/// Runs a controller on an already bound `listener` (its address is the one peers and
/// clients reach, so `config.listeners` is not bound again) until `shutdown` resolves. This
/// is how a test process runs several controllers over real gRPC: bind every listener on
/// port 0 first, then write the voter set from the bound addresses. Errors as [`run`].
pub async fn serve(
    listener: TcpListener,
    config: ControllerConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), StartError> {
    serve_with(listener, config, shutdown, MetricsOut::Listener).await
}

async fn serve_with(
    listener: TcpListener,
    config: ControllerConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
    metrics_out: MetricsOut,
) -> Result<(), StartError> {
    let metrics_server = match config.metrics_listener {
        Some(addr) => Some(MetricsServer::bind(addr).await?),
        None => None,
    };
    let tls = keel_runtime::tls::start(config.tls.as_ref())?;
    let raft_node = node::start_raft(&config, Dialer::new(tls.clone())).await?;
    let metrics_guard = match (metrics_server, metrics_out) {
        (Some(server), _) => Some(start_metrics(Some(server), &raft_node)?.0),
        (None, MetricsOut::Report(to)) => {
            let (guard, readiness) = start_metrics(None, &raft_node)?;
            let _ = to.send(readiness);
            Some(guard)
        }
        (None, MetricsOut::Listener) => None,
    };
    let mut state = QuorumState::new(config.broker_session_timeout_ms).with_leader_rebalance(
        config
            .auto_leader_rebalance_enable
            .then_some(config.leader_imbalance_check_interval_seconds * 1000),
    );
    state.topic_defaults = config.topic_defaults();
    let session_views = state.session_views();
    let heartbeat_tracker = state.heartbeat_tracker();
    let (writer, write_task) = write_path::spawn(
        raft_node.raft.clone(),
        raft_node.images.clone(),
        raft_node.quorum_confirmed.clone(),
        state,
        WritePathConfig {
            node_id: config.node_id,
            noop_interval_ms: config.metadata_max_idle_interval_ms,
            // A dead broker is fenced within its session timeout + one tick (the check is a
            // walk over the broker sessions: cheap). At the heartbeat interval (2 s) a broker
            // failure waited up to 2 s more for its partitions' new leaders.
            tick_interval_ms: config
                .broker_heartbeat_interval_ms
                .min(SESSION_CHECK_INTERVAL_MS),
        },
    );
    let grpc = ControllerGrpc::new(
        raft_node.clone(),
        writer.clone(),
        session_views,
        heartbeat_tracker,
        config.metadata_log_dir.join("snapshots"),
    )
    .with_authz(config.authz.clone());
    tracing::info!(
        node_id = config.node_id,
        listeners = %config.listeners,
        voters = ?config.controller_quorum_voters,
        bootstrap_servers = ?config.controller_quorum_bootstrap_servers,
        directory_id = %keel_metadata_log::raft_types::directory_id_text(raft_node.directory_id),
        engine = %config.metadata_log_engine,
        "controller started"
    );
    let record_cluster_id =
        node::spawn_record_cluster_id(config.metadata_log_dir.clone(), raft_node.images.clone());
    let record_directory_ids = spawn_record_directory_ids(
        raft_node.clone(),
        writer.clone(),
        std::time::Duration::from_secs(1),
    );
    // The shutdown future fires `stopping`; in-flight requests then get SHUTDOWN_GRACE to
    // finish (tonic's graceful shutdown alone waits for every open stream, and a broker's
    // metadata stream stays open until the broker notices: 8.7 s seen).
    let (stopping_tx, stopping) = tokio::sync::oneshot::channel::<()>();
    let shutdown = async move {
        shutdown.await;
        let _ = stopping_tx.send(());
    };
    let serve = tonic::transport::Server::builder()
        .http2_max_pending_accept_reset_streams(Some(MAX_PENDING_ACCEPT_RESETS))
        .add_service(node::raft_service(&raft_node, config.authz.clone()))
        .add_service(
            ControllerServiceServer::new(grpc)
                // Requests are small (bounds.rs); replies (snapshot chunks, metadata log
                // reads) can be large.
                .max_decoding_message_size(keel_proto::limits::MAX_CONTROLLER_REQUEST_BYTES)
                .max_encoding_message_size(MAX_RAFT_MESSAGE_BYTES),
        )
        // TCP_NODELAY on every accepted connection (`incoming`; tonic's builder option only
        // applies to listeners it binds): without it small replies (AppendEntries acks, write
        // answers) wait for delayed ACKs of up to ~40 ms. TLS when configured.
        .serve_with_incoming_shutdown(keel_runtime::tls::incoming(listener, tls), shutdown);
    // A Raft node that stopped on a fatal error would keep answering reads from its last
    // image and NOT_CONTROLLER to writes forever: stop the process instead (exit non-zero)
    // so a supervisor restarts it or an operator looks.
    let grace_over = async {
        if stopping.await.is_err() {
            // The server ended on its own: `serve` wins the select below.
            std::future::pending::<()>().await;
        }
        tokio::time::sleep(SHUTDOWN_GRACE).await;
    };
    let served = tokio::select! {
        served = serve => served,
        cause = node::raft_stopped(raft_node.raft.clone()) => {
            write_task.abort();
            record_cluster_id.abort();
            record_directory_ids.abort();
            return Err(StartError::RaftStopped(cause));
        }
        () = grace_over => {
            tracing::info!(
                grace_ms = SHUTDOWN_GRACE.as_millis() as u64,
                "closing the connections still open after the shutdown grace (brokers' \
                 metadata streams reconnect to another controller)"
            );
            Ok(())
        }
    };
    match tokio::time::timeout(SHUTDOWN_GRACE, raft_node.raft.shutdown()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!(error = %e, "raft shutdown"),
        Err(_) => tracing::warn!("raft shutdown did not finish within the grace; exiting anyway"),
    }
    write_task.abort();
    record_cluster_id.abort();
    record_directory_ids.abort();
    drop(metrics_guard);
    served.map_err(|e| StartError::Raft(format!("gRPC server: {e}")))?;
    tracing::info!(node_id = config.node_id, "controller stopped");
    Ok(())
}

/// Installs the Prometheus recorder, describes the controller metrics and samples them with
/// the readiness of [`crate::metrics::readiness`] (every 500 ms); serves both on `server`
/// when given. Returns the readiness too. Dropping the returned guard stops the listener and
/// the sampler.
fn start_metrics(
    server: Option<MetricsServer>,
    raft_node: &node::RaftNode,
) -> Result<(MetricsGuard, watch::Receiver<Readiness>), StartError> {
    let handle = keel_runtime::install_prometheus_recorder()?;
    keel_runtime::describe_all(crate::metrics::DEFS);
    keel_runtime::zero_counters(crate::metrics::DEFS, &[]);
    let (readiness, sampler) =
        crate::metrics::spawn_sampler(raft_node.clone(), std::time::Duration::from_millis(500));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    if let Some(server) = server {
        if let Ok(addr) = server.local_addr() {
            tracing::info!(metrics_listener = %addr, "serving /metrics and /health");
        }
        server.spawn(handle, readiness.clone(), async {
            let _ = stopped.await;
        });
    }
    Ok((
        MetricsGuard {
            _stop: stop,
            sampler,
        },
        readiness,
    ))
}

/// Stops the metrics listener (its shutdown channel closes) and the sampler when dropped.
struct MetricsGuard {
    _stop: tokio::sync::oneshot::Sender<()>,
    sampler: tokio::task::JoinHandle<()>,
}

impl Drop for MetricsGuard {
    fn drop(&mut self) {
        self.sampler.abort();
    }
}

/// Records members' directory ids in the membership (KIP-853's voter keys) where it has none:
/// a quorum initialized from `controller_quorum_voters` starts without them, as Kafka's static
/// voters. Every `interval`, the active controller commits one membership change
/// (openraft `SetNodes`, same addresses) giving each such member the directory id it presented
/// in its Raft replies ([`RaftNode::learned`](crate::node::RaftNode::learned); its own from `meta.properties`), through the
/// write task (`writer`, the only proposer). From then on, a member whose directory is
/// replaced is refused as that voter ([`crate::membership::voter_key_mismatch`]). Skipped
/// while another change is pending; each attempt is bounded by
/// [`crate::write_path::MEMBERSHIP_CHANGE_TIMEOUT`].
fn spawn_record_directory_ids<S: crate::write_path::ControllerState>(
    node: crate::node::RaftNode,
    writer: crate::write_path::WriteHandle<S>,
    interval: std::time::Duration,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if !node.is_active() {
                continue;
            }
            let members = node.members();
            // A leader that removed itself must not change the membership again (see
            // ControllerGrpc::require_active).
            if members.changing || !members.voters.contains_key(&node.node_id) {
                continue;
            }
            let updates: std::collections::BTreeMap<
                u64,
                keel_metadata_log::raft_types::ControllerNode,
            > = members
                .voters
                .iter()
                .chain(members.observers.iter())
                .filter(|(_, n)| n.directory_id.is_none())
                .filter_map(|(id, n)| {
                    let dir = if *id == node.node_id {
                        Some(node.directory_id)
                    } else {
                        node.learned.get(*id)
                    }?;
                    Some((
                        *id,
                        keel_metadata_log::raft_types::ControllerNode {
                            addr: n.addr.clone(),
                            directory_id: Some(dir),
                        },
                    ))
                })
                .collect();
            if updates.is_empty() {
                continue;
            }
            let ids: Vec<u64> = updates.keys().copied().collect();
            match writer
                .change_membership(openraft::ChangeMembers::SetNodes(updates))
                .await
            {
                Some(Ok(_)) => tracing::info!(?ids, "recorded the directory ids of controllers"),
                Some(Err(e)) => tracing::debug!(error = %e, "recording directory ids"),
                None => tracing::debug!("recording directory ids did not commit in time"),
            }
        }
    })
}
