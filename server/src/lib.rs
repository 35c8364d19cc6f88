//! `keel-server`: Kafka's combined mode (KIP-500, KIP-833; Kafka's
//! `process.roles=broker,controller`): one process running a controller and a broker on the
//! same tokio runtime, each with its own listeners, data directory and config table
//! ([`config`]). `process_roles = ["broker"]` or `["controller"]` runs just that role.
//!
//! **For development only**, as Kafka advises ("KRaft: combined mode is not recommended for
//! critical deployments", Kafka's operations docs; KIP-833): the controller shares CPU,
//! memory, disk and failures with the broker, so a busy or stuck broker (a full disk, a GC or
//! allocator stall, a flood of produce requests) delays the controller's Raft heartbeats and
//! elections and can stall the metadata quorum for the whole cluster; a crash takes a voter
//! and a broker down together; and the two roles cannot be scaled, upgraded or restarted
//! separately. Run `keel-controller` and `keel-broker` processes in production.
//!
//! How the roles share the process ([`serve`]):
//! - They talk to each other over gRPC like separate processes (the broker never calls the
//!   controller's code: DESIGN §1), through their own listeners.
//! - Shutdown (SIGTERM/SIGINT): the broker's controlled shutdown first (it needs the active
//!   controller, possibly this one), then the controller, Kafka's order
//!   (`KafkaRaftServer.shutdown`: broker, then controller).
//! - A fatal error of either role (a start-up failure, Raft stopping, a refused registration)
//!   stops the process with exit 1 and one line naming the role: `keel-server: controller:
//!   ...`. The other role is not kept running alone: a supervisor restarts the whole node.
//! - Metrics: the `metrics` recorder is process-wide (one global recorder per process,
//!   [`keel_runtime::install_prometheus_recorder`]), so two listeners would serve the same
//!   text twice. The process has one `metrics_listener` (a top-level key): `/metrics` holds
//!   both roles' metrics (`keel_controller_*` and `keel_broker_*`), `/health/ready` is 200
//!   only when every role is ready (its body has one clause per role).

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use keel_runtime::{EndpointError, MetricsServer, Readiness};
use tokio::sync::{oneshot, watch};

pub mod config;

pub use config::{ProcessRole, ServerConfig};

/// Why the process stopped with an error. `Display` is the one line printed after
/// `keel-server: `.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The metrics listener could not be bound or the recorder installed (names
    /// `metrics_listener`).
    #[error(transparent)]
    Metrics(#[from] EndpointError),
    /// A role failed: at start-up, or fatally while running.
    #[error("{}: {message}", .role.name())]
    Role {
        /// The role that failed.
        role: ProcessRole,
        /// Its error.
        message: String,
    },
}

/// How often the process's readiness is recomputed from the roles' (each role samples its
/// own every 500 ms).
pub const READINESS_INTERVAL: Duration = Duration::from_millis(250);

type RoleRun = Pin<Box<dyn Future<Output = Result<(), String>>>>;

/// Runs the roles of `config` until `shutdown` resolves, then stops them in Kafka's order
/// (broker, then controller); see the crate doc. Returns `Ok` after a clean stop.
///
/// Errors: [`ServeError::Metrics`] before any role starts; [`ServeError::Role`] when a role
/// fails, or ends without being asked to.
pub async fn serve(
    config: ServerConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let node_id = config.node_id;
    // Bound first: a taken port fails the start before any role touches its directory.
    let metrics = match config.metrics_listener {
        Some(addr) => Some((
            MetricsServer::bind(addr).await?,
            keel_runtime::install_prometheus_recorder()?,
        )),
        None => None,
    };
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        stop_tx.send_replace(true);
    });
    let stop_requested = || *stop_rx.borrow();

    let mut broker_readiness = None;
    let mut broker_done = None;
    let mut broker: Option<RoleRun> = None;
    let controller_stop: Pin<Box<dyn Future<Output = ()> + Send>> = match config.broker {
        Some(b) => {
            if metrics.is_some() {
                broker_readiness = Some(
                    keel_broker::observe::start_sampling(node_id)
                        .map_err(|e| role_error(ProcessRole::Broker, e))?,
                );
            }
            let stop = until_true(stop_rx.clone());
            broker = Some(Box::pin(async move {
                keel_broker::server::run(b, stop)
                    .await
                    .map_err(|e| e.to_string())
            }));
            let (done_tx, done_rx) = oneshot::channel::<()>();
            broker_done = Some(done_tx);
            // The controller stops once the broker has (its controlled shutdown needs the
            // quorum), or at once when the broker failed (the process is exiting).
            Box::pin(async move {
                let _ = done_rx.await;
            })
        }
        None => Box::pin(until_true(stop_rx.clone())),
    };
    let mut controller_readiness = None;
    let mut controller: Option<RoleRun> = config.controller.map(|c| -> RoleRun {
        if metrics.is_some() {
            let (tx, rx) = oneshot::channel();
            controller_readiness = Some(rx);
            Box::pin(async move {
                keel_controller::server::run_reporting_readiness(c, controller_stop, tx)
                    .await
                    .map_err(|e| e.to_string())
            })
        } else {
            Box::pin(async move {
                keel_controller::server::run(c, controller_stop)
                    .await
                    .map_err(|e| e.to_string())
            })
        }
    });
    if let Some((server, handle)) = metrics {
        let (ready_tx, ready_rx) = watch::channel(Readiness::not_ready("starting"));
        tokio::spawn(combine_readiness(
            broker_readiness,
            controller_readiness,
            ready_tx,
        ));
        if let Ok(addr) = server.local_addr() {
            tracing::info!(metrics_listener = %addr, "serving /metrics and /health");
        }
        server.spawn(handle, ready_rx, std::future::pending());
    }
    tracing::info!(node_id, roles = ?config_roles(&broker, &controller), "keel-server started");

    while broker.is_some() || controller.is_some() {
        tokio::select! {
            r = run_of(&mut broker) => {
                broker = None;
                r.map_err(|e| role_error(ProcessRole::Broker, e))?;
                if !stop_requested() {
                    return Err(role_error(ProcessRole::Broker, "stopped without a shutdown request"));
                }
                tracing::info!("broker stopped; stopping the controller");
                drop(broker_done.take());
            }
            r = run_of(&mut controller) => {
                controller = None;
                r.map_err(|e| role_error(ProcessRole::Controller, e))?;
                if broker.is_some() || !stop_requested() {
                    return Err(role_error(
                        ProcessRole::Controller,
                        "stopped without a shutdown request",
                    ));
                }
            }
        }
    }
    tracing::info!(node_id, "keel-server stopped");
    Ok(())
}

fn role_error(role: ProcessRole, e: impl std::fmt::Display) -> ServeError {
    ServeError::Role {
        role,
        message: e.to_string(),
    }
}

fn config_roles(broker: &Option<RoleRun>, controller: &Option<RoleRun>) -> Vec<&'static str> {
    let mut roles = Vec::new();
    if broker.is_some() {
        roles.push(ProcessRole::Broker.name());
    }
    if controller.is_some() {
        roles.push(ProcessRole::Controller.name());
    }
    roles
}

/// The role's run, or never when it is not running.
async fn run_of(role: &mut Option<RoleRun>) -> Result<(), String> {
    match role {
        Some(run) => run.await,
        None => std::future::pending().await,
    }
}

/// Resolves once `rx` holds `true` (or its sender is gone).
async fn until_true(mut rx: watch::Receiver<bool>) {
    let _ = rx.wait_for(|v| *v).await;
}

/// The process's readiness: ready when every role is ([`combined`]), refreshed every
/// [`READINESS_INTERVAL`].
async fn combine_readiness(
    broker: Option<watch::Receiver<Readiness>>,
    mut controller: Option<oneshot::Receiver<watch::Receiver<Readiness>>>,
    out: watch::Sender<Readiness>,
) {
    let mut controller_rx: Option<watch::Receiver<Readiness>> = None;
    let has_controller = controller.is_some();
    let mut tick = tokio::time::interval(READINESS_INTERVAL);
    loop {
        tick.tick().await;
        if let Some(rx) = controller.as_mut()
            && let Ok(r) = rx.try_recv()
        {
            controller_rx = Some(r);
            controller = None;
        }
        let mut parts = Vec::new();
        if has_controller {
            let r = controller_rx.as_ref().map_or_else(
                || Readiness::not_ready("starting"),
                |rx| rx.borrow().clone(),
            );
            parts.push((ProcessRole::Controller, r));
        }
        if let Some(rx) = &broker {
            parts.push((ProcessRole::Broker, rx.borrow().clone()));
        }
        let next = combined(&parts);
        out.send_if_modified(|r| {
            let changed = *r != next;
            *r = next;
            changed
        });
    }
}

/// Ready when every part is; the detail is `role: detail` per part, joined by `; `.
pub fn combined(parts: &[(ProcessRole, Readiness)]) -> Readiness {
    let detail = parts
        .iter()
        .map(|(role, r)| format!("{}: {}", role.name(), r.detail))
        .collect::<Vec<_>>()
        .join("; ");
    Readiness {
        ready: !parts.is_empty() && parts.iter().all(|(_, r)| r.ready),
        detail,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_only_when_every_role_is() {
        let c = (ProcessRole::Controller, Readiness::ready("voter"));
        let b = (ProcessRole::Broker, Readiness::not_ready("fenced"));
        let r = combined(&[c.clone(), b]);
        assert!(!r.ready);
        assert_eq!(r.detail, "controller: voter; broker: fenced");
        let r = combined(&[
            c.clone(),
            (ProcessRole::Broker, Readiness::ready("unfenced")),
        ]);
        assert!(r.ready, "{r:?}");
        assert!(combined(&[c]).ready);
        assert!(!combined(&[]).ready);
    }
}
