//! The controller process: bind, start Raft, start the write task, serve gRPC until the
//! shutdown future resolves, then stop Raft.

use std::future::Future;

use keel_proto::controller::controller_service_server::ControllerServiceServer;
use tonic::transport::server::TcpIncoming;

use crate::config::ControllerConfig;
use crate::node::{self, StartError};
use crate::raft_network::MAX_RAFT_MESSAGE_BYTES;
use crate::service::{ControllerGrpc, QuorumState};
use crate::write_path::{self, WritePathConfig};

/// Runs a controller until `shutdown` resolves. Errors are start-up failures, or
/// [`StartError::RaftStopped`] when openraft stops on a fatal error while serving (one line
/// each); a clean shutdown returns `Ok`.
pub async fn run(
    config: ControllerConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), StartError> {
    // Bind first: a taken port fails before anything touches the log directory.
    let listener = node::bind(&config).await?;
    let raft_node = node::start_raft(&config).await?;
    let state = QuorumState::new(config.broker_session_timeout_ms);
    let session_views = state.session_views();
    let (writer, write_task) = write_path::spawn(
        raft_node.raft.clone(),
        raft_node.images.clone(),
        raft_node.quorum_confirmed.clone(),
        state,
        WritePathConfig {
            node_id: config.node_id,
            noop_interval_ms: config.metadata_max_idle_interval_ms,
            // Check sessions at the heartbeat interval: a dead broker is fenced within
            // session timeout + one heartbeat interval.
            tick_interval_ms: config.broker_heartbeat_interval_ms,
        },
    );
    let grpc = ControllerGrpc::new(
        raft_node.clone(),
        writer,
        session_views,
        config.metadata_log_dir.join("snapshots"),
    );
    tracing::info!(
        node_id = config.node_id,
        listeners = %config.listeners,
        voters = ?config.controller_quorum_voters,
        "controller started"
    );
    let record_cluster_id =
        node::spawn_record_cluster_id(config.metadata_log_dir.clone(), raft_node.images.clone());
    let serve = tonic::transport::Server::builder()
        .add_service(node::raft_service(&raft_node))
        .add_service(
            ControllerServiceServer::new(grpc)
                .max_decoding_message_size(MAX_RAFT_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_RAFT_MESSAGE_BYTES),
        )
        // TCP_NODELAY on every accepted connection (tonic's builder option only applies to
        // listeners it binds): without it small replies (AppendEntries acks, write answers)
        // wait for delayed ACKs of up to ~40 ms.
        .serve_with_incoming_shutdown(
            TcpIncoming::from(listener).with_nodelay(Some(true)),
            shutdown,
        );
    // A Raft node that stopped on a fatal error would keep answering reads from its last
    // image and NOT_CONTROLLER to writes forever: stop the process instead (exit non-zero)
    // so a supervisor restarts it or an operator looks.
    let served = tokio::select! {
        served = serve => served,
        cause = node::raft_stopped(raft_node.raft.clone()) => {
            write_task.abort();
            record_cluster_id.abort();
            return Err(StartError::RaftStopped(cause));
        }
    };
    if let Err(e) = raft_node.raft.shutdown().await {
        tracing::warn!(error = %e, "raft shutdown");
    }
    write_task.abort();
    record_cluster_id.abort();
    served.map_err(|e| StartError::Raft(format!("gRPC server: {e}")))?;
    tracing::info!(node_id = config.node_id, "controller stopped");
    Ok(())
}
