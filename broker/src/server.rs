//! The broker process: bind, lock and check the log directory ([`crate::log_dir`]), learn the
//! cluster id from the controllers and check it against the directory, load the local
//! metadata snapshot, open the partition logs, start the metadata tailer and the lifecycle,
//! serve `BrokerService` until the lifecycle ends (shutdown requested and the controlled
//! shutdown done), then stop the tailer (final local snapshot).
//!
//! `Metadata` is answered from the local image; Produce, Fetch, ListOffsets,
//! OffsetsForLeaderEpoch, InitProducerId and DescribeReplicas by the replica manager
//! ([`crate::replica_manager`]).

use std::future::Future;
use std::time::Duration;

use keel_metadata_log::MetadataImage;
use keel_proto::ErrorCode;
use keel_proto::broker::broker_service_server::{BrokerService, BrokerServiceServer};
use keel_proto::broker::*;
use keel_proto::controller::{DescribeClusterReply, DescribeClusterRequest};
use keel_proto::limits::{
    BROKER_CONNECTION_WINDOW_BYTES, BROKER_MAX_FRAME_BYTES, BROKER_STREAM_WINDOW_BYTES,
    MAX_BROKER_MESSAGE_BYTES,
};
use keel_proto::metadata::BrokerEndpoint;
use keel_runtime::tls::Dialer;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tonic::{Request, Response, Status};

use crate::access;
use crate::bounds;
use crate::config::BrokerConfig;
use crate::lifecycle::{
    ActiveControllerClient, ControllerChannels, LifecycleConfig, LifecycleStatus, ShutdownOutcome,
    manager,
};
use crate::log_dir::LogDir;
use crate::metadata::{LocalChangesSink, TailerConfig, describe, local_snapshot, tailer};
use crate::replica_manager::{ReplicaManager, ReplicaManagerConfig};
use keel_metadata_log::acl::Operation;
use keel_runtime::Backoff;
use keel_runtime::settings::{QuorumContact, listeners};

/// Why a broker could not start or stopped with an error. `Display` is one line naming the
/// config key or cause.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The listener could not be bound (port in use, address not local).
    #[error("listeners {addr}: {source}")]
    Bind {
        /// The address.
        addr: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The log directory is locked by another process, belongs to another node or cluster,
    /// or its `meta.properties` cannot be read or written.
    #[error("{0}")]
    LogDir(#[from] crate::log_dir::LogDirError),
    /// The partition logs could not be opened or recovered.
    #[error("log_dirs: {0}")]
    Logs(#[from] crate::log::LogError),
    /// `controller_quorum_voters` names an address gRPC cannot use.
    #[error("invalid value for controller_quorum_voters: {0}")]
    Voters(String),
    /// A TLS file could not be read or rustls refused it (the message names the key and file).
    #[error("{0}")]
    Tls(#[from] keel_runtime::tls::TlsError),
    /// The controller refused this broker for good (e.g. another cluster's id).
    #[error("{0}")]
    Lifecycle(#[from] manager::LifecycleError),
    /// The gRPC server failed.
    #[error("gRPC server: {0}")]
    Serve(String),
    /// The open-files limit leaves too few descriptors for segment files
    /// ([`crate::fd_limit::segment_budget`]; the message says what to raise).
    #[error("{0}")]
    FdLimit(String),
    /// The log directory failed while the broker ran (a partition's files could not be
    /// created or opened); the broker stopped after its controlled shutdown (Kafka stops a
    /// broker whose last log directory is offline).
    #[error("{0}")]
    LogDirFailed(String),
}

/// The broker's bound listeners.
#[derive(Debug)]
pub struct Listeners {
    /// Keel's gRPC `BrokerService` (`config.listeners`).
    pub grpc: TcpListener,
    /// The Kafka-protocol listener (`config.kafka_listener`), if configured.
    pub kafka: Option<TcpListener>,
}

impl Listeners {
    /// Only a gRPC listener.
    pub fn grpc_only(grpc: TcpListener) -> Self {
        Self { grpc, kafka: None }
    }
}

/// Binds the configured listeners. A taken port fails here, before anything else starts.
pub async fn bind(config: &BrokerConfig) -> Result<Listeners, StartError> {
    let bind = |addr: std::net::SocketAddr| async move {
        TcpListener::bind(addr)
            .await
            .map_err(|source| StartError::Bind {
                addr: addr.to_string(),
                source,
            })
    };
    let grpc = bind(config.listeners).await?;
    let kafka = match &config.kafka_listener {
        Some(k) => Some(bind(k.bind).await?),
        None => None,
    };
    Ok(Listeners { grpc, kafka })
}

/// Runs a broker until `shutdown` resolves and the controlled shutdown is over: binds
/// `config.listeners`, then [`serve`]. Errors are start-up failures or a permanent
/// registration refusal; a clean stop returns `Ok` (also when the controlled shutdown timed
/// out: that is logged).
pub async fn run(
    config: BrokerConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), StartError> {
    let listeners = bind(&config).await?;
    serve(listeners, config, shutdown).await
}

/// Runs a broker on already bound `listeners` (clients reach them at the advertised
/// addresses; the configured bind addresses are not bound again) until `shutdown` resolves
/// and the controlled shutdown is over. This is how a test process runs several brokers over
/// real gRPC on listeners bound to port 0. Errors as [`run`].
pub async fn serve(
    listeners: Listeners,
    config: BrokerConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), StartError> {
    // Before anything reads or writes a partition file: the lock, and meta.properties must
    // name this node (Kafka: `LogManager` locks every log dir; `MetaProperties` check).
    let mut log_dir = LogDir::open(&config.log_dir, config.node_id)?;
    // A local check: refused at once, before any controller is contacted (it counts the
    // segment files; nothing is opened).
    check_fd_limit(&config.log_dir)?;
    let tls = keel_runtime::tls::start(config.tls.as_ref())?;
    // The Kafka listener's TLS: the node's, except that a SASL_SSL listener asks for no
    // client certificate (KIP-684: `ssl.client.auth` applies to SASL_SSL listeners only when
    // set with the listener prefix; SASL authenticates the client there).
    let kafka_tls = match &config.kafka_listener {
        Some(k) if k.tls && k.sasl => keel_runtime::tls::start(
            config
                .tls
                .as_ref()
                .map(|t| keel_runtime::tls::NodeTls {
                    client_auth: keel_runtime::tls::ClientAuth::None,
                    ..t.clone()
                })
                .as_ref(),
        )?,
        Some(k) if k.tls => tls.clone(),
        _ => None,
    };
    let dialer = Dialer::new(tls.clone());
    // A failed log directory stops the broker as a shutdown request does, and makes it exit
    // with that reason.
    let (dir_failed_tx, dir_failed) = watch::channel(None::<String>);
    let shutdown = {
        let mut failed = dir_failed.clone();
        async move {
            let failed = async move {
                if failed.wait_for(Option::is_some).await.is_err() {
                    std::future::pending::<()>().await;
                }
            };
            tokio::select! {
                _ = shutdown => {}
                _ = failed => {}
            }
        }
    };
    let mut shutdown_rx = shutdown_flag(shutdown);
    let timing = Timing::of(&config);
    let voters = match &config.controller_quorum {
        QuorumContact::Voters(v) => v.clone(),
        QuorumContact::Bootstrap(servers) => {
            let Some(voters) = crate::lifecycle::bootstrap::discover_voters(
                servers,
                &dialer,
                timing.backoff,
                timing.request_timeout,
                &mut shutdown_rx,
            )
            .await
            else {
                tracing::info!("shutdown requested before the controllers named the voters");
                return Ok(());
            };
            voters
        }
    };
    // The voter set follows the quorum (KIP-853): a refresher asks the active controller and
    // every set of channels below rebuilds itself from it.
    let (voters_tx, voters_rx) = watch::channel(voters.clone());
    let channels = ControllerChannels::new(&voters, &dialer)
        .map_err(StartError::Voters)?
        .following(voters_rx.clone());
    let snapshot_path = local_snapshot::path_in(&config.metadata_dir());
    let initial = load_local_snapshot(&snapshot_path);
    // The partition logs are opened only once the directory is known to be this cluster's
    // (Kafka's broker, too, starts its `LogManager` only once it has the quorum's metadata:
    // `BrokerMetadataPublisher.initializeManagers` on the first published image).
    let Some(cluster_id) = learn_cluster_id(
        &channels,
        timing.backoff,
        timing.request_timeout,
        &mut shutdown_rx,
    )
    .await
    else {
        tracing::info!("shutdown requested before the controllers reported the cluster id");
        return Ok(());
    };
    record_cluster_id(&mut log_dir, &cluster_id, &initial, &snapshot_path)?;
    let (status_tx, status_rx) = watch::channel(LifecycleStatus::default());
    let (sink, events) = LocalChangesSink::channel(crate::metadata::sink::DEFAULT_CAPACITY);
    let (replicas, replica_tasks) = ReplicaManager::start(
        replica_manager_config(&config, dialer.clone()),
        channels.clone(),
        status_rx.clone(),
        events,
        dir_failed_tx,
    )?;
    let tailer = tailer::spawn(
        tailer_config(&config, timing, snapshot_path),
        channels.clone(),
        initial.clone(),
        sink,
        status_rx.clone(),
    );
    crate::observe::publish(tailer.images(), status_rx.clone());
    // Stops with the shutdown flag; the task is detached.
    drop(crate::lifecycle::bootstrap::spawn_voter_refresh(
        channels.clone(),
        voters_tx,
        timing.request_timeout,
        shutdown_rx.clone(),
    ));
    let (lifecycle, lifecycle_done) = start_lifecycle(
        &config,
        voters_rx,
        &dialer,
        cluster_id,
        timing,
        tailer.images(),
        status_tx,
        shutdown_rx,
    )?;
    let groups = crate::group::GroupCoordinator::new(
        config.group_coordinator.clone(),
        replicas.clone(),
        tailer.images(),
    );
    let grpc = BrokerGrpc {
        broker_id: config.node_id,
        min_insync_replicas: config.min_insync_replicas,
        images: tailer.images(),
        status: status_rx,
        replicas: replicas.clone(),
        digests: Default::default(),
        groups: groups.clone(),
        controller: crate::kafka::forwarder::ControllerForwarder::new(
            channels.clone(),
            timing.request_timeout,
        ),
        offsets_topic_creation: Default::default(),
        static_configs: std::sync::Arc::new(crate::kafka::admin::static_broker_configs(&config)),
        authz: config.authz.clone(),
    };
    // Session tokens (#23) are checked against this broker's SCRAM credentials; every clone
    // of the authorizer shares them.
    config.authz.attach_images(grpc.images.clone());
    // Both listeners stop when the lifecycle ends (the controlled shutdown is over).
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(async move {
        let _ = lifecycle_done.await;
        stop_tx.send_replace(true);
    });
    tokio::spawn(groups.clone().run(stop_rx.clone()));
    let kafka = listeners.kafka.map(|l| {
        let ctx = crate::kafka::KafkaContext {
            broker_id: config.node_id,
            listener: config
                .kafka_listener
                .as_ref()
                .map_or_else(|| listeners::PLAINTEXT.to_string(), |k| k.name.clone()),
            images: grpc.images.clone(),
            status: grpc.status.clone(),
            replicas: replicas.clone(),
            controller: grpc.controller.clone(),
            static_configs: grpc.static_configs.as_ref().clone(),
            auto_create_topics: config.auto_create_topics_enable,
            groups,
            offsets_topic_creation: grpc.offsets_topic_creation.clone(),
            authz: config.authz.clone(),
            caller: config.authz.caller(None),
            log_dir: config.log_dir.clone(),
            min_insync_replicas: config.min_insync_replicas,
        };
        let sasl = config.kafka_listener.as_ref().is_some_and(|k| k.sasl);
        tokio::spawn(crate::kafka::serve(
            l,
            kafka_tls,
            sasl,
            ctx,
            stop_rx.clone(),
        ))
    });
    let served = serve_grpc(listeners.grpc, tls, grpc, stop_rx).await;
    if let Some(k) = kafka {
        let _ = k.await;
    }
    // Stop in the order that keeps every write accounted for: the lifecycle (controlled
    // shutdown) is over, then the tailer (final local snapshot), then the partitions.
    let outcome = lifecycle.await;
    tailer.stop().await;
    replica_tasks.shutdown(&replicas).await;
    if let Some(reason) = dir_failed.borrow().clone() {
        return Err(StartError::LogDirFailed(reason));
    }
    stopped(config.node_id, outcome, served)?;
    // The lock is released only now, after every partition log is closed.
    drop(log_dir);
    Ok(())
}

/// Raises the open-files limit to the hard limit and gives the segment files their budget
/// under it ([`crate::fd_limit`]); refuses a limit that leaves too few.
fn check_fd_limit(log_dir: &std::path::Path) -> Result<(), StartError> {
    let limit = match crate::fd_limit::raise_to_hard() {
        Ok((before, after)) => {
            if before.soft != after.soft {
                tracing::info!(
                    "open-files limit raised from {} to {} (the hard limit)",
                    fmt_limit(before.soft),
                    fmt_limit(after.soft)
                );
            }
            after
        }
        Err(e) => {
            tracing::warn!("cannot raise the open-files limit to the hard limit: {e}");
            let r = rustix::process::getrlimit(rustix::process::Resource::Nofile);
            crate::fd_limit::FdLimit {
                soft: r.current,
                hard: r.maximum,
            }
        }
    };
    let budget = crate::fd_limit::segment_budget(limit, log_dir).map_err(StartError::FdLimit)?;
    crate::log::open_files::set_budget(budget);
    let segments = crate::fd_limit::count_segment_files(log_dir);
    if u64::try_from(budget).is_ok_and(|b| segments > b) {
        tracing::info!(
            "{segments} segment files, at most {budget} open at once (open-files limit {} less \
             {} for connections): the files used least recently are closed and opened again \
             on use",
            fmt_limit(limit.soft),
            crate::fd_limit::RESERVED_DESCRIPTORS
        );
    }
    Ok(())
}

fn fmt_limit(l: Option<u64>) -> String {
    l.map_or_else(|| "unlimited".into(), |n| n.to_string())
}

/// Records the cluster id the controllers reported in the log directory's `meta.properties`
/// after checking it against the directory's and the local snapshot's (a mismatch is
/// [`StartError::LogDir`]).
fn record_cluster_id(
    log_dir: &mut LogDir,
    cluster_id: &str,
    initial: &MetadataImage,
    snapshot_path: &std::path::Path,
) -> Result<(), StartError> {
    log_dir.record_cluster_id(
        cluster_id,
        initial.cluster_id().map(|stored| (snapshot_path, stored)),
    )?;
    tracing::info!(
        log_dir = %log_dir.dir().display(),
        %cluster_id,
        directory_id = ?log_dir.meta().directory_id,
        "log directory checked"
    );
    Ok(())
}

/// Logs the start with this run's incarnation id, then spawns the lifecycle
/// ([`spawn_lifecycle`]); its thread failing to start is [`StartError::Serve`].
fn start_lifecycle(
    config: &BrokerConfig,
    voters: watch::Receiver<std::collections::BTreeMap<u64, String>>,
    dialer: &Dialer,
    cluster_id: String,
    timing: Timing,
    images: watch::Receiver<MetadataImage>,
    status: watch::Sender<LifecycleStatus>,
    shutdown: watch::Receiver<bool>,
) -> Result<
    (
        impl Future<Output = LifecycleOutcome> + use<>,
        tokio::sync::oneshot::Receiver<()>,
    ),
    StartError,
> {
    let lifecycle_cfg = lifecycle_config(config, cluster_id, timing);
    tracing::info!(
        broker_id = config.node_id,
        incarnation_id = %lifecycle_cfg.incarnation_id,
        listeners = %config.listeners,
        advertised_listeners = %config.advertised_listeners,
        kafka_listener = ?config.kafka_listener,
        voters = ?*voters.borrow(),
        "broker started"
    );
    spawn_lifecycle(
        lifecycle_cfg,
        voters,
        dialer.clone(),
        timing.request_timeout,
        images,
        status,
        shutdown,
    )
    .map_err(|e| StartError::Serve(format!("cannot start the lifecycle thread: {e}")))
}

/// How the broker ended once stopped: the lifecycle task's failure, then the gRPC server's,
/// then the lifecycle's own error, in that order; logs the outcome.
fn stopped(
    broker_id: i32,
    outcome: LifecycleOutcome,
    served: Result<(), tonic::transport::Error>,
) -> Result<(), StartError> {
    let outcome = outcome.map_err(|why| StartError::Serve(format!("lifecycle task: {why}")))?;
    served.map_err(|e| StartError::Serve(e.to_string()))?;
    let outcome = outcome?;
    tracing::info!(broker_id, ?outcome, "broker stopped");
    if outcome == ShutdownOutcome::TimedOut {
        tracing::warn!("the controlled shutdown was not confirmed by the controller");
    }
    Ok(())
}

/// A flag that turns true once `shutdown` resolves (the lifecycle and the cluster-id wait
/// watch it).
fn shutdown_flag(shutdown: impl Future<Output = ()> + Send + 'static) -> watch::Receiver<bool> {
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        shutdown_tx.send_replace(true);
        // Keep the sender alive: a dropped sender would read as a shutdown request too.
        std::future::pending::<()>().await;
    });
    shutdown_rx
}

/// The broker's timings derived from its config.
#[derive(Debug, Clone, Copy)]
struct Timing {
    /// `broker_heartbeat_interval_ms`.
    heartbeat: Duration,
    /// `broker_session_timeout_ms`: also the bound of a controlled shutdown.
    session: Duration,
    /// Retry backoff towards the controllers: 50 ms doubling up to the heartbeat interval
    /// (100 ms..2 s).
    backoff: Backoff,
    /// Timeout of one request to a controller: the heartbeat interval within 0.5..5 s.
    request_timeout: Duration,
}

impl Timing {
    fn of(config: &BrokerConfig) -> Self {
        let heartbeat = Duration::from_millis(config.broker_heartbeat_interval_ms);
        Self {
            heartbeat,
            session: Duration::from_millis(config.broker_session_timeout_ms),
            backoff: Backoff::from_millis(50, config.broker_heartbeat_interval_ms.clamp(100, 2000)),
            request_timeout: heartbeat.clamp(Duration::from_millis(500), Duration::from_secs(5)),
        }
    }
}

/// The replica manager's settings from the broker config.
fn replica_manager_config(config: &BrokerConfig, dialer: Dialer) -> ReplicaManagerConfig {
    ReplicaManagerConfig {
        recovery_threads: config.num_recovery_threads_per_data_dir as usize,
        fetch_session_slots: config.max_incremental_fetch_session_cache_slots as usize,
        dialer,
        broker_id: config.node_id,
        data_dir: config.log_dir.clone(),
        replica_lag_time_max_ms: config.replica_lag_time_max_ms,
        replica_lag_max_messages: config.replica_lag_max_messages,
        min_insync_replicas: config.min_insync_replicas,
        log_defaults: config.log_config(),
        replica_fetch_wait_max_ms: config.replica_fetch_wait_max_ms,
        replica_fetch_backoff_ms: 100,
        cleaner: crate::log::CleanerConfig {
            dedupe_buffer_bytes: config.log_cleaner_dedupe_buffer_size,
        },
        cleaner_backoff_ms: config.log_cleaner_backoff_ms,
    }
}

/// The metadata tailer's settings: the local snapshot at `snapshot_path`, a stream idle for
/// a session timeout (at least 2 s) reconnects.
fn tailer_config(
    config: &BrokerConfig,
    timing: Timing,
    snapshot_path: std::path::PathBuf,
) -> TailerConfig {
    TailerConfig {
        broker_id: config.node_id,
        snapshot_path,
        snapshot_interval: Duration::from_millis(config.metadata_snapshot_interval_ms),
        idle_timeout: timing.session.max(Duration::from_secs(2)),
        backoff: timing.backoff,
    }
}

/// The endpoints this broker registers: the gRPC listener first (its listener name
/// [`listeners::GRPC`]), then the Kafka listener if configured.
fn advertised_endpoints(config: &BrokerConfig) -> Vec<BrokerEndpoint> {
    let (host, port) = config.advertised_host_port();
    let mut endpoints = vec![BrokerEndpoint {
        name: listeners::GRPC.into(),
        host,
        port: u32::from(port),
        // Kafka's security protocol names; gRPC without TLS is plaintext.
        security_protocol: "PLAINTEXT".into(),
    }];
    if let Some(k) = &config.kafka_listener {
        endpoints.push(BrokerEndpoint {
            name: k.name.clone(),
            host: k.advertised_host.clone(),
            port: u32::from(k.advertised_port),
            // A Kafka listener's name is its security protocol.
            security_protocol: k.name.clone(),
        });
    }
    endpoints
}

/// What the lifecycle registers (a new incarnation id per start) and how it times its calls.
fn lifecycle_config(config: &BrokerConfig, cluster_id: String, timing: Timing) -> LifecycleConfig {
    LifecycleConfig {
        broker_id: config.node_id,
        incarnation_id: uuid::Uuid::new_v4(),
        endpoints: advertised_endpoints(config),
        rack: config.rack.clone().unwrap_or_default(),
        cluster_id,
        heartbeat_interval: timing.heartbeat,
        controlled_shutdown_timeout: timing.session,
        backoff: timing.backoff,
    }
}

/// Serves `grpc` on `listener` until `stop` turns true (the lifecycle ended).
async fn serve_grpc(
    listener: TcpListener,
    tls: Option<std::sync::Arc<keel_runtime::tls::TlsContext>>,
    grpc: BrokerGrpc,
    mut stop: watch::Receiver<bool>,
) -> Result<(), tonic::transport::Error> {
    tonic::transport::Server::builder()
        .initial_stream_window_size(BROKER_STREAM_WINDOW_BYTES)
        .initial_connection_window_size(BROKER_CONNECTION_WINDOW_BYTES)
        .max_frame_size(BROKER_MAX_FRAME_BYTES)
        .add_service(
            BrokerServiceServer::new(grpc)
                .max_decoding_message_size(MAX_BROKER_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_BROKER_MESSAGE_BYTES),
        )
        // Own listener (bound early so a taken port fails start-up): TCP_NODELAY must be set
        // on each accepted connection (`incoming` does); the builder's `tcp_nodelay` only
        // applies to listeners tonic binds itself. Without it small replies wait for delayed
        // ACKs (~40 ms). TLS when configured.
        .serve_with_incoming_shutdown(keel_runtime::tls::incoming(listener, tls), async move {
            let _ = stop.wait_for(|s| *s).await;
        })
        .await
}

/// The cluster id in a DescribeCluster reply, if the replying controller knows it (no error,
/// non-empty: a controller that has not applied the `ClusterIdRecord` answers empty).
pub fn reported_cluster_id(reply: &DescribeClusterReply) -> Option<&str> {
    let failed = reply.error.as_ref().is_some_and(|e| e.code != 0);
    (!failed && !reply.cluster_id.is_empty()).then_some(reply.cluster_id.as_str())
}

/// How long a broker waits for the cluster id logging at INFO; after it, at WARN with what to
/// check (the controllers may still be starting before; about the 15 s of
/// [`manager::QUIET_REGISTRATION_REFUSALS`]).
const CLUSTER_ID_QUIET_PERIOD: Duration = Duration::from_secs(15);

/// Asks the voters in turn (DescribeCluster, a read any controller serves) until one reports
/// the cluster id, backing off after each round without an answer. Returns `None` if
/// `shutdown` turns true first. Logs every failed round at most once per 10 s: at INFO
/// during [`CLUSTER_ID_QUIET_PERIOD`], then at WARN naming what to check.
async fn learn_cluster_id(
    channels: &ControllerChannels,
    backoff: Backoff,
    request_timeout: Duration,
    shutdown: &mut watch::Receiver<bool>,
) -> Option<String> {
    let mut failures = 0u32;
    let mut last_log: Option<std::time::Instant> = None;
    let started = std::time::Instant::now();
    loop {
        for index in 0..channels.len() {
            let mut client = channels.client(index);
            let ask = tokio::time::timeout(
                request_timeout,
                client.describe_cluster(DescribeClusterRequest {
                    include_fenced_brokers: false,
                    ..Default::default()
                }),
            );
            let answer = tokio::select! {
                _ = shutdown.wait_for(|s| *s) => return None,
                r = ask => r,
            };
            let why = match answer {
                Ok(Ok(reply)) => {
                    match (reported_cluster_id(reply.get_ref()), &reply.get_ref().error) {
                        (Some(id), _) => return Some(id.to_string()),
                        // A refusal (e.g. CLUSTER_AUTHORIZATION_FAILED) says what to fix.
                        (None, Some(e)) if e.code != 0 => {
                            let code = keel_proto::ErrorCode::from_proto(Some(e))
                                .map_or_else(|_| format!("error {}", e.code), |c| c.to_string());
                            format!("{code}: {}", e.message)
                        }
                        (None, _) => "no cluster id yet".to_string(),
                    }
                }
                Ok(Err(status)) => format!(
                    "{}: {}",
                    status.code(),
                    keel_runtime::status::status_line(&status)
                ),
                Err(_) => format!("no answer in {request_timeout:?}"),
            };
            if last_log.is_none_or(|t| t.elapsed() >= Duration::from_secs(10)) {
                let (voter, addr) = channels.voter(index);
                // Expected while the controllers start; past the quiet period someone should
                // look (the same period as refused registrations before their first WARN).
                if started.elapsed() >= CLUSTER_ID_QUIET_PERIOD {
                    tracing::warn!(
                        controller = voter,
                        address = %addr,
                        "no controller reported the cluster id after {:.0} s ({why}); the \
                         partition logs stay closed until one does. {}",
                        started.elapsed().as_secs_f64(),
                        manager::CONTROLLERS_UNREACHABLE_HINT
                    );
                } else {
                    tracing::info!(
                        controller = voter,
                        address = %addr,
                        "waiting for the controllers to report the cluster id before opening \
                         the partition logs ({why})"
                    );
                }
                last_log = Some(std::time::Instant::now());
            }
        }
        failures = failures.saturating_add(1);
        let delay = backoff.next(failures.saturating_sub(1));
        tokio::select! {
            _ = shutdown.wait_for(|s| *s) => return None,
            _ = tokio::time::sleep(delay) => {}
        }
    }
}

/// How the lifecycle loop ended: its own result, or why it has none (its thread panicked).
type LifecycleOutcome = Result<Result<ShutdownOutcome, manager::LifecycleError>, String>;

/// Runs the lifecycle loop ([`manager::run`]: registration, heartbeats, controlled shutdown)
/// on its own OS thread with its own single-threaded runtime and its own controller channels
/// (Kafka: `BrokerLifecycleManager` has its own event-queue thread). Produce and replica
/// fetch handlers write to the log on the main runtime's workers; when write-back pressure
/// blocks those writes (seconds on a busy ext4), a heartbeat sharing those workers would be
/// late and the controller would fence a healthy broker after `broker_session_timeout_ms`.
/// The channels are created on the lifecycle runtime because a tonic channel's connection
/// task runs on the runtime that created it. Returns the loop's outcome as a future (an error
/// text if the thread died without one, a panic) and a receiver that fires when it ends.
fn spawn_lifecycle(
    cfg: LifecycleConfig,
    voters: watch::Receiver<std::collections::BTreeMap<u64, String>>,
    dialer: Dialer,
    request_timeout: Duration,
    images: watch::Receiver<MetadataImage>,
    status: watch::Sender<LifecycleStatus>,
    shutdown: watch::Receiver<bool>,
) -> std::io::Result<(
    impl Future<Output = LifecycleOutcome>,
    tokio::sync::oneshot::Receiver<()>,
)> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("keel-lifecycle".into())
        .spawn(move || {
            let outcome = rt.block_on(async move {
                let now = voters.borrow().clone();
                let channels = ControllerChannels::new(&now, &dialer)
                    .map_err(manager::LifecycleError)?
                    .following(voters);
                let client = ActiveControllerClient::new(channels, request_timeout);
                manager::run(cfg, client, images, status, shutdown).await
            });
            let _ = tx.send(outcome);
        })?;
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let r = rx.await;
        let _ = done_tx.send(());
        r.map_err(|_| "the lifecycle thread ended without an outcome (it panicked)".to_string())
    });
    let outcome = async move { task.await.map_err(|e| e.to_string()).and_then(|r| r) };
    Ok((outcome, done_rx))
}

/// The local snapshot, or the empty image when there is none or it is unreadable.
fn load_local_snapshot(path: &std::path::Path) -> MetadataImage {
    match local_snapshot::load(path) {
        Ok(Some(image)) => {
            tracing::info!(
                path = %path.display(),
                metadata_offset = image.provenance().offset,
                "loaded local metadata snapshot at offset {}",
                image.provenance().offset
            );
            image
        }
        Ok(None) => {
            tracing::info!(path = %path.display(), "no local metadata snapshot; fetching from the controllers");
            MetadataImage::empty()
        }
        Err(e) => {
            tracing::warn!("ignoring the local metadata snapshot: {e}");
            MetadataImage::empty()
        }
    }
}

/// `BrokerService` over the local image and the replica manager.
#[derive(Debug, Clone)]
struct BrokerGrpc {
    broker_id: i32,
    min_insync_replicas: u32,
    images: watch::Receiver<MetadataImage>,
    status: watch::Receiver<LifecycleStatus>,
    replicas: ReplicaManager,
    /// DescribeReplicas' image digests, computed only on request
    /// ([`keel_metadata_log::DigestMemo`]).
    digests: std::sync::Arc<keel_metadata_log::DigestMemo>,
    /// The group coordinator (the group calls).
    groups: crate::group::GroupCoordinator,
    /// FindCoordinator creates `__consumer_offsets` when it does not exist (both listeners
    /// share the forwarder and the throttle).
    controller: crate::kafka::forwarder::ControllerForwarder,
    offsets_topic_creation: std::sync::Arc<crate::kafka::context::OffsetsTopicCreation>,
    /// This broker's file values that stand in for Kafka's defaults (DescribeConfigs).
    static_configs: std::sync::Arc<Vec<crate::kafka::convert::admin::StaticBrokerConfig>>,
    /// Request authorization ([`crate::access`]).
    authz: keel_metadata_log::authz::Authz,
}

impl BrokerGrpc {
    /// The GROUP_AUTHORIZATION_FAILED of a request naming groups, when `op` is refused on one
    /// of them (DescribeGroups, DeleteGroups: every group then carries it).
    fn group_denied<T: GroupIds>(
        &self,
        request: &Request<T>,
        op: Operation,
    ) -> Option<keel_proto::common::Error> {
        if !self.authz.enabled() {
            return None;
        }
        let caller = self.authz.caller_of(request);
        let image = self.images.borrow().clone();
        request
            .get_ref()
            .group_ids()
            .iter()
            .find_map(|g| access::group(&self.authz, &caller, &image, op, g).err())
            .map(|d| d.to_proto())
    }
}

/// Requests naming groups.
trait GroupIds {
    fn group_ids(&self) -> &[String];
}

impl GroupIds for DescribeGroupsRequest {
    fn group_ids(&self) -> &[String] {
        &self.group_ids
    }
}

impl GroupIds for DeleteGroupsRequest {
    fn group_ids(&self) -> &[String] {
        &self.group_ids
    }
}

/// INVALID_REQUEST (42) carrying the bound violation (`field: problem`).
fn invalid_request(e: &keel_proto::limits::FieldError) -> Option<keel_proto::common::Error> {
    Some(ErrorCode::InvalidRequest.to_proto(keel_proto::limits::cap_message(e.to_string())))
}

/// Checks `$req` with `bounds::$check`; on a violation answers `$reply` with only the
/// top-level error set, before anything else sees the request.
macro_rules! check_bounds {
    ($req:expr, $check:path, $reply:ty) => {
        if let Err(e) = $check($req.get_ref()) {
            return Ok(Response::new(<$reply>::default_with(invalid_request(&e))));
        }
    };
}

/// Checks `$req` with `access::$check` (with an authorizer); a refusal answers `$reply` with
/// only the top-level *_AUTHORIZATION_FAILED error.
macro_rules! check_access {
    ($self:ident, $req:expr, $check:path, $reply:ty) => {
        if $self.authz.enabled() {
            let caller = $self.authz.caller_of(&$req);
            let image = $self.images.borrow().clone();
            if let Err(d) = $check(&$self.authz, &caller, &image, $req.get_ref()) {
                return Ok(Response::new(<$reply>::default_with(Some(d.to_proto()))));
            }
        }
    };
}

/// Replies whose default plus a top-level error is the answer to a refused request.
trait RefusedReply: Default {
    fn default_with(error: Option<keel_proto::common::Error>) -> Self;
}

macro_rules! refused_reply {
    ($($t:ty),*) => {$(
        impl RefusedReply for $t {
            fn default_with(error: Option<keel_proto::common::Error>) -> Self {
                Self { error, ..Default::default() }
            }
        }
    )*};
}

refused_reply!(
    ProduceReply,
    FetchReply,
    ListOffsetsReply,
    DeleteRecordsReply,
    OffsetsForLeaderEpochReply,
    MetadataReply,
    DescribeReplicasReply,
    ListGroupsReply,
    OffsetFetchReply,
    OffsetCommitReply,
    SyncGroupReply,
    LeaveGroupReply
);

impl RefusedReply for HeartbeatReply {
    fn default_with(error: Option<keel_proto::common::Error>) -> Self {
        Self { error }
    }
}

impl RefusedReply for JoinGroupReply {
    fn default_with(error: Option<keel_proto::common::Error>) -> Self {
        Self {
            error,
            generation_id: -1,
            ..Default::default()
        }
    }
}

impl RefusedReply for FindCoordinatorReply {
    fn default_with(error: Option<keel_proto::common::Error>) -> Self {
        Self {
            error,
            node_id: -1,
            host: String::new(),
            port: -1,
        }
    }
}

/// A refused DescribeGroups/DeleteGroups has no top-level error: every named group carries
/// it (`$entry` builds one from the id and the error).
macro_rules! refused_per_group {
    ($req:expr, $check:path, $reply:ident, $field:ident, $entry:expr) => {
        if let Err(e) = $check($req.get_ref()) {
            let error = invalid_request(&e);
            let $field = $req
                .get_ref()
                .group_ids
                .iter()
                .take(1)
                .map(|id| $entry(keel_proto::limits::clip(id).to_string(), error.clone()))
                .collect();
            return Ok(Response::new($reply { $field }));
        }
    };
}

impl RefusedReply for InitProducerIdReply {
    fn default_with(error: Option<keel_proto::common::Error>) -> Self {
        Self {
            error,
            producer_id: -1,
            producer_epoch: -1,
        }
    }
}

#[tonic::async_trait]
impl BrokerService for BrokerGrpc {
    async fn produce(
        &self,
        request: Request<ProduceRequest>,
    ) -> Result<Response<ProduceReply>, Status> {
        check_access!(self, request, access::produce, ProduceReply);
        check_bounds!(request, bounds::produce, ProduceReply);
        Ok(Response::new(
            self.replicas.produce(request.into_inner()).await,
        ))
    }

    async fn fetch(&self, request: Request<FetchRequest>) -> Result<Response<FetchReply>, Status> {
        check_access!(self, request, access::fetch, FetchReply);
        check_bounds!(request, bounds::fetch, FetchReply);
        Ok(Response::new(
            self.replicas.fetch(request.into_inner()).await,
        ))
    }

    async fn list_offsets(
        &self,
        request: Request<ListOffsetsRequest>,
    ) -> Result<Response<ListOffsetsReply>, Status> {
        check_access!(self, request, access::list_offsets, ListOffsetsReply);
        check_bounds!(request, bounds::list_offsets, ListOffsetsReply);
        Ok(Response::new(
            self.replicas.list_offsets(request.into_inner()),
        ))
    }

    async fn delete_records(
        &self,
        request: Request<DeleteRecordsRequest>,
    ) -> Result<Response<DeleteRecordsReply>, Status> {
        check_access!(self, request, access::delete_records, DeleteRecordsReply);
        check_bounds!(request, bounds::delete_records, DeleteRecordsReply);
        Ok(Response::new(
            self.replicas.answer_delete_records(request.get_ref()).await,
        ))
    }

    async fn offsets_for_leader_epoch(
        &self,
        request: Request<OffsetsForLeaderEpochRequest>,
    ) -> Result<Response<OffsetsForLeaderEpochReply>, Status> {
        check_access!(
            self,
            request,
            access::offsets_for_leader_epoch,
            OffsetsForLeaderEpochReply
        );
        check_bounds!(
            request,
            bounds::offsets_for_leader_epoch,
            OffsetsForLeaderEpochReply
        );
        Ok(Response::new(
            self.replicas.offsets_for_leader_epoch(request.into_inner()),
        ))
    }

    async fn metadata(
        &self,
        request: Request<MetadataRequest>,
    ) -> Result<Response<MetadataReply>, Status> {
        check_bounds!(request, bounds::metadata, MetadataReply);
        let image = self.images.borrow().clone();
        let controller_id = self.status.borrow().controller_id;
        let mut reply = describe::metadata_reply(&image, request.get_ref(), controller_id);
        let caller = self.authz.caller_of(&request);
        let named = !request.get_ref().topics.is_empty();
        access::authorize_metadata(&self.authz, &caller, &image, named, &mut reply);
        Ok(Response::new(reply))
    }

    async fn init_producer_id(
        &self,
        request: Request<InitProducerIdRequest>,
    ) -> Result<Response<InitProducerIdReply>, Status> {
        check_access!(self, request, access::init_producer_id, InitProducerIdReply);
        check_bounds!(request, bounds::init_producer_id, InitProducerIdReply);
        let epoch = self.status.borrow().broker_epoch;
        Ok(Response::new(
            self.replicas
                .init_producer_id(request.get_ref(), epoch)
                .await,
        ))
    }

    async fn describe_configs(
        &self,
        request: Request<keel_proto::controller::DescribeConfigsRequest>,
    ) -> Result<Response<keel_proto::controller::DescribeConfigsReply>, Status> {
        let caller = self.authz.caller_of(&request);
        if self.authz.enabled() {
            let image = self.images.borrow().clone();
            if let Err(d) =
                access::describe_configs(&self.authz, &caller, &image, request.get_ref())
            {
                return Ok(Response::new(
                    keel_proto::controller::DescribeConfigsReply {
                        error: Some(d.to_proto()),
                        ..Default::default()
                    },
                ));
            }
        }
        // The controller checks the request's bounds and answers its errors; this broker
        // only puts its own file values in, and has the controller add its per-broker
        // dynamic values to the topics' (it answers as the broker the client asked).
        let mut req = request.into_inner();
        req.answering_broker = Some(self.broker_id);
        let reply = self
            .controller
            .call(Some(&caller), req.clone(), None, |mut c, r| async move {
                c.describe_configs(r).await
            })
            .await;
        Ok(Response::new(match reply {
            Ok(mut reply) => {
                crate::kafka::convert::admin::overlay_static_configs(
                    &req,
                    &mut reply,
                    self.broker_id,
                    &self.static_configs,
                );
                reply
            }
            Err(f) => keel_proto::controller::DescribeConfigsReply {
                error: Some(
                    ErrorCode::try_from(f.code)
                        .unwrap_or(ErrorCode::UnknownServerError)
                        .to_proto(f.message),
                ),
                ..Default::default()
            },
        }))
    }

    async fn describe_replicas(
        &self,
        request: Request<DescribeReplicasRequest>,
    ) -> Result<Response<DescribeReplicasReply>, Status> {
        check_access!(
            self,
            request,
            access::describe_replicas,
            DescribeReplicasReply
        );
        check_bounds!(request, bounds::describe_replicas, DescribeReplicasReply);
        let image = self.images.borrow().clone();
        let epoch = self.status.borrow().broker_epoch;
        let mut reply = describe::describe_replicas_reply(
            &image,
            request.get_ref(),
            self.broker_id,
            epoch,
            self.min_insync_replicas,
        );
        self.replicas.fill_describe_replicas(&mut reply);
        if request.get_ref().include_image_digest {
            reply.image_digest = self.digests.digest(&image).await.to_string();
        }
        Ok(Response::new(reply))
    }

    async fn find_coordinator(
        &self,
        request: Request<FindCoordinatorRequest>,
    ) -> Result<Response<FindCoordinatorReply>, Status> {
        check_bounds!(request, bounds::find_coordinator, FindCoordinatorReply);
        if self.authz.enabled() {
            let caller = self.authz.caller_of(&request);
            let image = self.images.borrow().clone();
            let group = &request.get_ref().group_id;
            if let Err(d) = access::group(&self.authz, &caller, &image, Operation::Describe, group)
            {
                return Ok(Response::new(FindCoordinatorReply::default_with(Some(
                    d.to_proto(),
                ))));
            }
        }
        let image = self.images.borrow().clone();
        if !request.get_ref().group_id.is_empty()
            && image
                .topics()
                .get_by_name(crate::group::records::OFFSETS_TOPIC)
                .is_none()
        {
            crate::kafka::groups::create_offsets_topic(
                &self.controller,
                &self.offsets_topic_creation,
                self.groups.config(),
            )
            .await;
        }
        Ok(Response::new(crate::group::admin::find_coordinator(
            &self.groups,
            &image,
            request.get_ref(),
        )))
    }

    async fn list_groups(
        &self,
        request: Request<ListGroupsRequest>,
    ) -> Result<Response<ListGroupsReply>, Status> {
        check_bounds!(request, bounds::list_groups, ListGroupsReply);
        let mut reply = crate::group::admin::list_groups(&self.groups, request.get_ref());
        let caller = self.authz.caller_of(&request);
        let image = self.images.borrow().clone();
        access::filter_groups(&self.authz, &caller, &image, &mut reply);
        Ok(Response::new(reply))
    }

    async fn describe_groups(
        &self,
        request: Request<DescribeGroupsRequest>,
    ) -> Result<Response<DescribeGroupsReply>, Status> {
        refused_per_group!(
            request,
            bounds::describe_groups,
            DescribeGroupsReply,
            groups,
            |group_id, error| DescribedGroup {
                error,
                group_id,
                ..Default::default()
            }
        );
        if let Some(error) = self.group_denied(&request, Operation::Describe) {
            let groups = request
                .get_ref()
                .group_ids
                .iter()
                .map(|id| DescribedGroup {
                    error: Some(error.clone()),
                    group_id: keel_proto::limits::clip(id).to_string(),
                    ..Default::default()
                })
                .collect();
            return Ok(Response::new(DescribeGroupsReply { groups }));
        }
        Ok(Response::new(crate::group::admin::describe_groups(
            &self.groups,
            request.get_ref(),
        )))
    }

    async fn offset_fetch(
        &self,
        request: Request<OffsetFetchRequest>,
    ) -> Result<Response<OffsetFetchReply>, Status> {
        check_access!(self, request, access::offset_fetch, OffsetFetchReply);
        check_bounds!(request, bounds::offset_fetch, OffsetFetchReply);
        let mut reply = crate::group::admin::offset_fetch(&self.groups, request.get_ref());
        let caller = self.authz.caller_of(&request);
        let image = self.images.borrow().clone();
        access::filter_offsets(&self.authz, &caller, &image, &mut reply);
        Ok(Response::new(reply))
    }

    async fn offset_commit(
        &self,
        request: Request<OffsetCommitRequest>,
    ) -> Result<Response<OffsetCommitReply>, Status> {
        check_access!(self, request, access::offset_commit, OffsetCommitReply);
        check_bounds!(request, bounds::offset_commit, OffsetCommitReply);
        Ok(Response::new(
            crate::group::admin::offset_commit(&self.groups, request.into_inner()).await,
        ))
    }

    async fn delete_groups(
        &self,
        request: Request<DeleteGroupsRequest>,
    ) -> Result<Response<DeleteGroupsReply>, Status> {
        refused_per_group!(
            request,
            bounds::delete_groups,
            DeleteGroupsReply,
            results,
            |group_id, error| DeletedGroup { group_id, error }
        );
        if let Some(error) = self.group_denied(&request, Operation::Delete) {
            let results = request
                .get_ref()
                .group_ids
                .iter()
                .map(|id| DeletedGroup {
                    group_id: keel_proto::limits::clip(id).to_string(),
                    error: Some(error.clone()),
                })
                .collect();
            return Ok(Response::new(DeleteGroupsReply { results }));
        }
        Ok(Response::new(
            crate::group::admin::delete_groups(&self.groups, request.get_ref()).await,
        ))
    }

    async fn join_group(
        &self,
        request: Request<JoinGroupRequest>,
    ) -> Result<Response<JoinGroupReply>, Status> {
        check_bounds!(request, bounds::join_group, JoinGroupReply);
        if self.authz.enabled() {
            let caller = self.authz.caller_of(&request);
            let image = self.images.borrow().clone();
            let group = &request.get_ref().group_id;
            if let Err(d) = access::group(&self.authz, &caller, &image, Operation::Read, group) {
                return Ok(Response::new(JoinGroupReply::default_with(Some(
                    d.to_proto(),
                ))));
            }
        }
        let peer = keel_runtime::tls::peer_info(&request).and_then(|p| p.remote_addr);
        Ok(Response::new(
            crate::group::member::join_group(&self.groups, request.into_inner(), peer).await,
        ))
    }

    async fn sync_group(
        &self,
        request: Request<SyncGroupRequest>,
    ) -> Result<Response<SyncGroupReply>, Status> {
        check_bounds!(request, bounds::sync_group, SyncGroupReply);
        if self.authz.enabled() {
            let caller = self.authz.caller_of(&request);
            let image = self.images.borrow().clone();
            let group = &request.get_ref().group_id;
            if let Err(d) = access::group(&self.authz, &caller, &image, Operation::Read, group) {
                return Ok(Response::new(SyncGroupReply::default_with(Some(
                    d.to_proto(),
                ))));
            }
        }
        Ok(Response::new(
            crate::group::member::sync_group(&self.groups, request.into_inner()).await,
        ))
    }

    async fn heartbeat(
        &self,
        request: Request<HeartbeatRequest>,
    ) -> Result<Response<HeartbeatReply>, Status> {
        check_bounds!(request, bounds::heartbeat, HeartbeatReply);
        if self.authz.enabled() {
            let caller = self.authz.caller_of(&request);
            let image = self.images.borrow().clone();
            let group = &request.get_ref().group_id;
            if let Err(d) = access::group(&self.authz, &caller, &image, Operation::Read, group) {
                return Ok(Response::new(HeartbeatReply::default_with(Some(
                    d.to_proto(),
                ))));
            }
        }
        Ok(Response::new(crate::group::member::heartbeat(
            &self.groups,
            request.get_ref(),
        )))
    }

    async fn leave_group(
        &self,
        request: Request<LeaveGroupRequest>,
    ) -> Result<Response<LeaveGroupReply>, Status> {
        check_bounds!(request, bounds::leave_group, LeaveGroupReply);
        if self.authz.enabled() {
            let caller = self.authz.caller_of(&request);
            let image = self.images.borrow().clone();
            let group = &request.get_ref().group_id;
            if let Err(d) = access::group(&self.authz, &caller, &image, Operation::Read, group) {
                return Ok(Response::new(LeaveGroupReply::default_with(Some(
                    d.to_proto(),
                ))));
            }
        }
        Ok(Response::new(
            crate::group::member::leave_group(&self.groups, request.into_inner()).await,
        ))
    }
}

#[cfg(test)]
mod tests {
    use keel_proto::common::Error as WireError;

    use super::*;

    #[test]
    fn a_cluster_id_is_reported_only_by_a_reply_without_error_that_has_one() {
        let reply = |code: Option<i32>, id: &str| DescribeClusterReply {
            error: code.map(|code| WireError {
                code,
                ..Default::default()
            }),
            cluster_id: id.into(),
            ..Default::default()
        };
        assert_eq!(reported_cluster_id(&reply(None, "c1")), Some("c1"));
        assert_eq!(reported_cluster_id(&reply(Some(0), "c1")), Some("c1"));
        assert_eq!(reported_cluster_id(&reply(None, "")), None);
        assert_eq!(reported_cluster_id(&reply(Some(41), "c1")), None);
    }
}
