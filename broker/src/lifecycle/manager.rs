//! The lifecycle loop (Kafka: `BrokerLifecycleManager`): register, heartbeat, controlled
//! shutdown. Thin: every decision is in [`super::decision`]; this file does the I/O and the
//! waiting (tokio time, so tests can pause it).

use std::time::Duration;

use keel_metadata_log::MetadataImage;
use keel_proto::controller::{BrokerHeartbeatReply, BrokerHeartbeatRequest, RegisterBrokerRequest};
use keel_proto::metadata::BrokerEndpoint;
use tokio::sync::watch;
use tokio::time::Instant;
use uuid::Uuid;

use super::controllers::{ActiveControllerClient, NoActiveController};
use keel_runtime::Backoff;

use super::decision::{HeartbeatDecision, RegisterDecision, on_heartbeat_reply, on_register_reply};

/// Settings of the lifecycle loop.
#[derive(Debug, Clone)]
pub struct LifecycleConfig {
    /// This broker's id.
    pub broker_id: i32,
    /// New on every process start (Kafka: `incarnationId`).
    pub incarnation_id: Uuid,
    /// The advertised listeners, gRPC first (Keel's clients and replicas use a broker's first
    /// endpoint; Kafka clients the one named like the listener their request came in on).
    pub endpoints: Vec<BrokerEndpoint>,
    /// Rack, empty for none.
    pub rack: String,
    /// Cluster id this broker saw before (from its local metadata snapshot); empty = any.
    pub cluster_id: String,
    /// `broker_heartbeat_interval_ms`.
    pub heartbeat_interval: Duration,
    /// Bound of the controlled shutdown (`broker_session_timeout_ms`, as Kafka's
    /// `BrokerServer.shutdown` does).
    pub controlled_shutdown_timeout: Duration,
    /// Retry backoff for registration and failed heartbeats.
    pub backoff: Backoff,
}

/// What the rest of the broker may read about its registration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LifecycleStatus {
    /// The current broker epoch; -1 while not registered.
    pub broker_epoch: i64,
    /// Fenced as last reported by the controller (true until the first unfencing reply).
    pub fenced: bool,
    /// A controlled shutdown is in progress.
    pub in_controlled_shutdown: bool,
    /// Node id of the controller that last answered a heartbeat; -1 if none.
    pub controller_id: i32,
}

impl Default for LifecycleStatus {
    fn default() -> Self {
        Self {
            broker_epoch: -1,
            fenced: true,
            in_controlled_shutdown: false,
            controller_id: -1,
        }
    }
}

/// How the lifecycle ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShutdownOutcome {
    /// The controller answered `should_shut_down`: leadership moved away first.
    Granted,
    /// The controller did not grant the shutdown within the bound.
    TimedOut,
    /// Shutdown was asked before the broker ever registered (or its registration was gone).
    NotRegistered,
}

/// The broker cannot run (one line, printed at exit).
#[derive(Debug, thiserror::Error)]
#[error("broker registration refused: {0}")]
pub struct LifecycleError(pub String);

/// Runs the lifecycle until `shutdown` turns true and the controlled shutdown ends.
/// `images` is the tailer's output: its offset is the applied metadata offset sent in every
/// heartbeat. `status` receives every state change.
pub async fn run(
    cfg: LifecycleConfig,
    mut client: ActiveControllerClient,
    mut images: watch::Receiver<MetadataImage>,
    status: watch::Sender<LifecycleStatus>,
    mut shutdown: watch::Receiver<bool>,
) -> Result<ShutdownOutcome, LifecycleError> {
    let id = cfg.broker_id;
    // Re-registrations since the last accepted heartbeat: each waits a growing backoff so a
    // controller that keeps refusing our epoch is not flooded with registrations.
    let mut reregistrations = 0u32;
    loop {
        if reregistrations > 0 {
            let delay = cfg.backoff.next(reregistrations.saturating_sub(1));
            if shutdown_during(&mut shutdown, delay).await {
                return Ok(ShutdownOutcome::NotRegistered);
            }
        }
        // Register (until it works, the controller refuses for good, or shutdown).
        let Some(epoch) = register(&cfg, &mut client, &mut shutdown).await? else {
            return Ok(ShutdownOutcome::NotRegistered);
        };
        status.send_modify(|s| {
            s.broker_epoch = epoch;
            s.fenced = true;
            s.controller_id = client.active_id;
        });
        tracing::info!(
            broker_id = id,
            broker_epoch = epoch,
            "broker {id} registered with broker epoch {epoch} (fenced until caught up)"
        );
        match heartbeat_session(
            &cfg,
            &mut client,
            &mut images,
            &status,
            &mut shutdown,
            epoch,
        )
        .await
        {
            SessionEnd::ShutdownRequested => {
                return Ok(controlled_shutdown(&cfg, &mut client, &images, &status, epoch).await);
            }
            SessionEnd::Reregister { accepted } => {
                if accepted {
                    reregistrations = 0;
                }
                reregistrations = reregistrations.saturating_add(1);
            }
        }
    }
}

/// How the heartbeats of one registration ended.
enum SessionEnd {
    /// Shutdown was asked: the controlled shutdown follows.
    ShutdownRequested,
    /// The controller dropped the registration: register again. `accepted`: a heartbeat was
    /// accepted before (the re-registration backoff starts over).
    Reregister { accepted: bool },
}

/// Heartbeats the registration at `epoch` every `heartbeat_interval` (sooner while fenced,
/// see [`heartbeat_due`]; failures back off), keeping `status` current, until shutdown is
/// asked or the controller asks the broker to register again.
async fn heartbeat_session(
    cfg: &LifecycleConfig,
    client: &mut ActiveControllerClient,
    images: &mut watch::Receiver<MetadataImage>,
    status: &watch::Sender<LifecycleStatus>,
    shutdown: &mut watch::Receiver<bool>,
    epoch: i64,
) -> SessionEnd {
    let id = cfg.broker_id;
    let mut accepted = false;
    let mut failures = 0u32;
    let mut next_due = Instant::now();
    let mut reported_offset = -1i64;
    loop {
        let want_early = status.borrow().fenced && reported_offset < epoch;
        if heartbeat_due(shutdown, images, next_due, want_early, epoch).await {
            return SessionEnd::ShutdownRequested;
        }
        let offset = applied_offset(images);
        let reply = heartbeat(client, heartbeat_request(id, epoch, offset, false)).await;
        next_due = Instant::now() + cfg.heartbeat_interval;
        let reply = match reply {
            Ok(r) => r,
            Err(e) => {
                failures += 1;
                if heartbeat_failure_is_warning(failures) {
                    tracing::warn!(
                        broker_id = id,
                        failures,
                        "heartbeat failed {failures} time(s) in a row: {e}"
                    );
                } else {
                    tracing::debug!(broker_id = id, failures, "heartbeat failed: {e}");
                }
                next_due = Instant::now() + retry_delay(cfg, failures);
                continue;
            }
        };
        if failures > 0 {
            tracing::info!(
                broker_id = id,
                failures,
                "heartbeat accepted again after {failures} failed attempt(s)"
            );
        }
        failures = 0;
        reported_offset = offset;
        match on_heartbeat_reply(&reply) {
            HeartbeatDecision::Continue { fenced, caught_up } => {
                accepted = true;
                let was = status.borrow().fenced;
                log_fencing_change(id, epoch, offset, was, fenced, caught_up);
                status.send_modify(|s| {
                    s.fenced = fenced;
                    s.controller_id = client.active_id;
                });
            }
            HeartbeatDecision::ShutDown => {
                // Not asked for: the controller only grants what the broker requested.
                tracing::warn!(broker_id = id, "unrequested should_shut_down ignored");
            }
            HeartbeatDecision::Reregister { reason } => {
                tracing::warn!(
                    broker_id = id,
                    broker_epoch = epoch,
                    "{reason}: registering again"
                );
                status.send_modify(|s| {
                    s.broker_epoch = -1;
                    s.fenced = true;
                });
                return SessionEnd::Reregister { accepted };
            }
            HeartbeatDecision::Retry { reason } => {
                tracing::warn!(broker_id = id, "heartbeat refused: {reason}");
            }
        }
    }
}

/// Waits for the next heartbeat: `next_due`, or (`want_early`: fenced and not yet reported
/// caught up) the moment the image reaches the registration offset `epoch`, so unfencing
/// does not wait a whole interval. True when shutdown was asked first.
async fn heartbeat_due(
    shutdown: &mut watch::Receiver<bool>,
    images: &mut watch::Receiver<MetadataImage>,
    next_due: Instant,
    want_early: bool,
    epoch: i64,
) -> bool {
    // (`wait_for` returns a read guard: drop it before doing anything else.)
    tokio::select! {
        r = shutdown.wait_for(|s| *s) => { drop(r); true }
        _ = tokio::time::sleep_until(next_due) => false,
        r = images.wait_for(|i| i.provenance().offset as i64 >= epoch), if want_early => {
            drop(r);
            false
        }
    }
}

/// Logs a fencing change the controller reported in a heartbeat reply (`was`: fenced before).
fn log_fencing_change(id: i32, epoch: i64, offset: i64, was: bool, fenced: bool, caught_up: bool) {
    if was && !fenced {
        tracing::info!(
            broker_id = id,
            broker_epoch = epoch,
            metadata_offset = offset,
            "broker {id} unfenced"
        );
    } else if !was && fenced {
        tracing::warn!(
            broker_id = id,
            broker_epoch = epoch,
            caught_up,
            "broker {id} fenced"
        );
    }
}

/// Sleeps `delay` unless shutdown is asked first; true when it was.
async fn shutdown_during(shutdown: &mut watch::Receiver<bool>, delay: Duration) -> bool {
    tokio::select! {
        r = shutdown.wait_for(|s| *s) => { drop(r); true }
        _ = tokio::time::sleep(delay) => false,
    }
}

/// The metadata offset the broker has applied (the latest image's).
fn applied_offset(images: &watch::Receiver<MetadataImage>) -> i64 {
    images.borrow().provenance().offset as i64
}

/// A BrokerHeartbeat reporting `offset` as applied; `want_shut_down` asks for the controlled
/// shutdown (KIP-631).
fn heartbeat_request(
    id: i32,
    epoch: i64,
    offset: i64,
    want_shut_down: bool,
) -> BrokerHeartbeatRequest {
    BrokerHeartbeatRequest {
        broker_id: id,
        broker_epoch: epoch,
        current_metadata_offset: offset,
        want_fence: false,
        want_shut_down,
    }
}

/// Sends `req` to the active controller.
async fn heartbeat(
    client: &mut ActiveControllerClient,
    req: BrokerHeartbeatRequest,
) -> Result<BrokerHeartbeatReply, NoActiveController> {
    client
        .call(|mut c| async move { c.broker_heartbeat(req).await })
        .await
}

/// The wait after the `failures`-th failed heartbeat in a row: the backoff, at most one
/// heartbeat interval.
fn retry_delay(cfg: &LifecycleConfig, failures: u32) -> Duration {
    cfg.backoff
        .next(failures.saturating_sub(1))
        .min(cfg.heartbeat_interval)
}

/// Registers; `Ok(None)` when shutdown was asked first.
async fn register(
    cfg: &LifecycleConfig,
    client: &mut ActiveControllerClient,
    shutdown: &mut watch::Receiver<bool>,
) -> Result<Option<i64>, LifecycleError> {
    let req = RegisterBrokerRequest {
        broker_id: cfg.broker_id,
        cluster_id: cfg.cluster_id.clone(),
        incarnation_id: bytes::Bytes::copy_from_slice(cfg.incarnation_id.as_bytes()),
        listeners: cfg.endpoints.clone(),
        rack: cfg.rack.clone(),
        previous_broker_epoch: -1,
        features: Vec::new(),
    };
    let mut failures = 0u32;
    loop {
        if *shutdown.borrow() {
            return Ok(None);
        }
        let outcome = tokio::select! {
            _ = shutdown.wait_for(|s| *s) => return Ok(None),
            r = client.call(|mut c| {
                let req = req.clone();
                async move { c.register_broker(req).await }
            }) => r,
        };
        let (reason, duplicate_id) = match outcome {
            Ok(reply) => match on_register_reply(&reply) {
                RegisterDecision::Registered { broker_epoch } => return Ok(Some(broker_epoch)),
                RegisterDecision::Fatal { reason } => return Err(LifecycleError(reason)),
                RegisterDecision::Retry {
                    reason,
                    duplicate_id,
                } => (reason, duplicate_id),
            },
            Err(e) => (e.to_string(), false),
        };
        failures += 1;
        let delay = cfg.backoff.next(failures.saturating_sub(1));
        if registration_refusal_is_warning(failures) {
            tracing::warn!(
                broker_id = cfg.broker_id,
                failures,
                "registration refused {failures} times ({reason}); retrying in {delay:?}. {}",
                registration_hint(duplicate_id, cfg.broker_id)
            );
        } else {
            tracing::info!(
                broker_id = cfg.broker_id,
                failures,
                "registration not accepted yet ({reason}); retrying in {delay:?}"
            );
        }
        if shutdown_during(shutdown, delay).await {
            return Ok(None);
        }
    }
}

/// What an operator should check when registrations keep failing: with `duplicate_id` (the
/// controller answered DUPLICATE_BROKER_REGISTRATION) another process holding `broker_id`;
/// otherwise (no active controller answered: connect errors, timeouts, NOT_CONTROLLER
/// everywhere) the controllers' addresses and the quorum.
pub fn registration_hint(duplicate_id: bool, broker_id: i32) -> String {
    if duplicate_id {
        format!(
            "If another broker runs with node_id {broker_id}, stop one of them: node ids are \
             unique across brokers and controllers"
        )
    } else {
        CONTROLLERS_UNREACHABLE_HINT.to_string()
    }
}

/// What to check when no controller answers a broker (start-up or registration).
pub const CONTROLLERS_UNREACHABLE_HINT: &str = "Check that controller_quorum_voters (or \
     controller_quorum_bootstrap_servers) names the controllers' listeners and that a quorum \
     of them is up: keelctl quorum status";

/// Whether the `failures`-th failed heartbeat in a row is logged at WARN: the first, then
/// every 10th (about every 10 s while no controller answers: the quorum down or out of
/// reach), so an outage is visible without a line per retry; the others are DEBUG, and the
/// first accepted heartbeat after them says how many failed (INFO).
pub fn heartbeat_failure_is_warning(failures: u32) -> bool {
    failures == 1 || failures.is_multiple_of(10)
}

/// Whether the `failures`-th refused registration in a row is logged at WARN: the first
/// [`QUIET_REGISTRATION_REFUSALS`] are expected (controllers still starting, the old session of
/// a restarted broker not expired yet: DUPLICATE_BROKER_REGISTRATION until the session
/// timeout), then the 1st and every 10th after that say that someone should look.
pub fn registration_refusal_is_warning(failures: u32) -> bool {
    failures > QUIET_REGISTRATION_REFUSALS
        && (failures - QUIET_REGISTRATION_REFUSALS - 1).is_multiple_of(10)
}

/// Refused registrations in a row logged at INFO before the first WARN (with the default
/// backoff, 50 ms doubling to the 2 s heartbeat interval, about 15 s: past the default 9 s
/// broker session timeout).
pub const QUIET_REGISTRATION_REFUSALS: u32 = 12;

/// Heartbeats with `want_shut_down` until the controller grants it or the bound passes
/// (Kafka: `BrokerLifecycleManager.beginControlledShutdown`). The metadata tailer keeps
/// running meanwhile: the controller grants only once this broker reported the offset of the
/// records that moved its leadership away.
async fn controlled_shutdown(
    cfg: &LifecycleConfig,
    client: &mut ActiveControllerClient,
    images: &watch::Receiver<MetadataImage>,
    status: &watch::Sender<LifecycleStatus>,
    epoch: i64,
) -> ShutdownOutcome {
    let id = cfg.broker_id;
    let deadline = Instant::now() + cfg.controlled_shutdown_timeout;
    status.send_modify(|s| s.in_controlled_shutdown = true);
    tracing::info!(
        broker_id = id,
        broker_epoch = epoch,
        timeout = ?cfg.controlled_shutdown_timeout,
        "broker {id}: controlled shutdown requested"
    );
    let mut failures = 0u32;
    loop {
        let req = heartbeat_request(id, epoch, applied_offset(images), true);
        let wait = match tokio::time::timeout_at(deadline, heartbeat(client, req)).await {
            Err(_) => break,
            Ok(Ok(reply)) => match on_heartbeat_reply(&reply) {
                HeartbeatDecision::ShutDown => {
                    tracing::info!(
                        broker_id = id,
                        broker_epoch = epoch,
                        "broker {id}: controlled shutdown granted"
                    );
                    status.send_modify(|s| s.fenced = true);
                    return ShutdownOutcome::Granted;
                }
                HeartbeatDecision::Reregister { reason } => {
                    // The registration is gone: nothing is led by this epoch any more.
                    tracing::info!(broker_id = id, "controlled shutdown: {reason}; stopping");
                    return ShutdownOutcome::NotRegistered;
                }
                HeartbeatDecision::Continue { .. } | HeartbeatDecision::Retry { .. } => {
                    failures = 0;
                    cfg.heartbeat_interval
                }
            },
            Ok(Err(e)) => {
                failures += 1;
                tracing::warn!(broker_id = id, "controlled shutdown heartbeat failed: {e}");
                retry_delay(cfg, failures)
            }
        };
        if Instant::now() + wait >= deadline {
            break;
        }
        tokio::time::sleep(wait).await;
    }
    tracing::warn!(
        broker_id = id,
        timeout = ?cfg.controlled_shutdown_timeout,
        "broker {id}: controlled shutdown not granted in time; stopping anyway"
    );
    ShutdownOutcome::TimedOut
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refused_registrations_warn_after_the_expected_ones_then_every_tenth() {
        let warned: Vec<u32> = (1..=40)
            .filter(|f| registration_refusal_is_warning(*f))
            .collect();
        let q = QUIET_REGISTRATION_REFUSALS;
        assert_eq!(warned, [q + 1, q + 11, q + 21]);
    }

    #[test]
    fn only_a_duplicate_registration_names_another_broker_with_the_same_id() {
        let dup = registration_hint(true, 7);
        assert!(dup.contains("node_id 7"), "{dup}");
        let unreachable = registration_hint(false, 7);
        assert!(
            !unreachable.contains("node_id 7") && unreachable.contains("controller_quorum_voters"),
            "{unreachable}"
        );
    }

    #[test]
    fn failed_heartbeats_warn_on_the_first_then_every_tenth() {
        let warned: Vec<u32> = (1..=35)
            .filter(|f| heartbeat_failure_is_warning(*f))
            .collect();
        assert_eq!(warned, [1, 10, 20, 30]);
    }
}
