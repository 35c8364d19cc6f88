//! Broker lifecycle: registration, heartbeats and the in-memory session state, fencing on
//! session expiry, controlled shutdown, unregistration (DESIGN §4; Kafka:
//! `ClusterControlManager.registerBroker`, `BrokerHeartbeatManager`,
//! `ReplicationControlManager.processBrokerHeartbeat` / `handleBrokerFenced` /
//! `handleBrokerUnfenced` / `handleBrokerInControlledShutdown` / `handleBrokerUnregistered`).
//!
//! A broker moves through these states; the registration flags in the image are the truth,
//! the [`BrokerHeartbeatManager`] only keeps liveness (last contact, reported metadata offset)
//! in the active controller's memory:
//!
//! ```text
//! register (fenced) --caught up, !want_fence--> unfenced --want_shut_down--> controlled shutdown
//!      ^                                           |                             |
//!      |                 session expiry / want_fence                     leads nothing, in no
//!      |                                           v                     multi-member ISR
//!      +------------------ re-register ------- fenced <---- granted: should_shut_down + fence
//! ```
//!
//! Each transition writes a `BrokerRegistrationChangeRecord` plus the partition changes it
//! implies (see [`election`](super::election)): fencing, entering controlled shutdown and
//! unregistering take the broker out of every ISR and off every leadership (a sole ISR member
//! stays, with leader -1); unfencing elects leaders for leaderless partitions it replicates.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use keel_metadata_log::MetadataImage;
use keel_metadata_log::image::uuid_from_bytes;
use keel_proto::ErrorCode;
use keel_proto::controller::{
    BrokerHeartbeatReply, BrokerHeartbeatRequest, RegisterBrokerReply, RegisterBrokerRequest,
    UnregisterBrokerReply, UnregisterBrokerRequest,
};
use keel_proto::metadata::{
    BrokerRegistrationChangeRecord, FencingChange, MetadataRecord, RegisterBrokerRecord,
    ShutdownChange, UnregisterBrokerRecord, metadata_record::Record,
};

use super::election::{elect_leaderless_with, remove_broker_from_partitions};
use super::{ControllerResult, error, record};

/// The liveness the active controller knows about one broker (Kafka:
/// `BrokerHeartbeatManager.BrokerHeartbeatState`). Not replicated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerSession {
    /// The broker epoch the session belongs to; a new registration starts a new session.
    pub broker_epoch: i64,
    /// Controller-local time of the last valid heartbeat (or of the session's creation), ms.
    pub last_contact_ms: u64,
    /// Last `current_metadata_offset` the broker reported; -1 = none yet.
    pub metadata_offset: i64,
    /// Fenced as far as this controller decided; fenced sessions never expire.
    pub fenced: bool,
    /// In controlled shutdown as far as this controller decided.
    pub in_controlled_shutdown: bool,
    /// Offset of the batch that moved leadership away for a controlled shutdown, once the
    /// caller knows it ([`BrokerHeartbeatManager::set_controlled_shutdown_offset`]).
    pub controlled_shutdown_offset: Option<u64>,
}

/// The last heartbeat arrival per broker, recorded by the RPC handler as each heartbeat
/// arrives, before it waits in the write task's queue (Kafka: `BrokerHeartbeatTracker`, "so
/// that the heartbeats always get through, even if the main controller thread is busy").
///
/// Without it a busy write task (entries in flight, a long queue) decides heartbeats late and
/// its session-expiry check, which runs between operations, can fence a broker whose
/// heartbeats are waiting in the queue; the fencing (one record per partition the broker
/// leads or follows) then makes the task busier still.
///
/// Shared between threads (cheap to clone). Holds one entry per registered broker id: only a
/// heartbeat whose `(broker_id, broker_epoch)` matches the committed registration is
/// recorded, and [`take_contacts`](Self::take_contacts) drops ids no longer registered.
/// Times are the caller's monotonic ms.
#[derive(Debug, Clone, Default)]
pub struct HeartbeatTracker {
    /// broker id -> (broker epoch, arrival ms).
    contacts: Arc<Mutex<BTreeMap<i32, (i64, u64)>>>,
}

impl HeartbeatTracker {
    /// Records a heartbeat of `broker_id` at `broker_epoch` arriving at `now_ms`, if `image`
    /// (the committed image) registers that broker at that epoch. Returns whether it counted.
    pub fn update_contact(
        &self,
        image: &MetadataImage,
        broker_id: i32,
        broker_epoch: i64,
        now_ms: u64,
    ) -> bool {
        if image
            .broker(broker_id)
            .is_none_or(|b| b.epoch != broker_epoch)
        {
            return false;
        }
        let mut contacts = self.contacts.lock().unwrap_or_else(|e| e.into_inner());
        let e = contacts.entry(broker_id).or_insert((broker_epoch, now_ms));
        if e.0 != broker_epoch {
            *e = (broker_epoch, now_ms);
        }
        e.1 = e.1.max(now_ms);
        true
    }

    /// The recorded contacts as `(broker_id, broker_epoch, at_ms)`, for
    /// [`BrokerHeartbeatManager::note_contacts`]; forgets brokers `image` no longer registers
    /// at the recorded epoch.
    pub fn take_contacts(&self, image: &MetadataImage) -> Vec<(i32, i64, u64)> {
        let mut contacts = self.contacts.lock().unwrap_or_else(|e| e.into_inner());
        contacts.retain(|id, (epoch, _)| image.broker(*id).is_some_and(|b| b.epoch == *epoch));
        contacts
            .iter()
            .map(|(id, (epoch, at))| (*id, *epoch, *at))
            .collect()
    }
}

/// In-memory heartbeat sessions of the active controller (Kafka: `BrokerHeartbeatManager`).
///
/// Pure: time is the `now_ms` argument (a controller-local monotonic clock in ms). At most one
/// session per broker id, created only for brokers the image has registered, so its size is
/// bounded by the number of registered brokers. A controller that becomes active calls
/// [`reset_all`](Self::reset_all) so every broker gets a fresh grace period (DESIGN §4).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BrokerHeartbeatManager {
    sessions: BTreeMap<i32, BrokerSession>,
}

impl BrokerHeartbeatManager {
    /// No sessions.
    pub fn new() -> Self {
        Self::default()
    }

    /// Replaces every session with a fresh one (last contact `now_ms`) for each broker the
    /// image has registered, carrying its fenced / shutdown flags. Call when this controller
    /// becomes active.
    pub fn reset_all(&mut self, image: &MetadataImage, now_ms: u64) {
        self.sessions = image
            .brokers()
            .values()
            .map(|b| {
                let s = BrokerSession {
                    broker_epoch: b.epoch,
                    last_contact_ms: now_ms,
                    metadata_offset: -1,
                    fenced: b.fenced,
                    in_controlled_shutdown: b.in_controlled_shutdown,
                    controlled_shutdown_offset: None,
                };
                (b.id, s)
            })
            .collect();
    }

    /// Records a valid heartbeat of `broker_id` at `broker_epoch`. A different epoch than the
    /// session's starts a new session (fenced, no offset).
    pub fn touch(&mut self, broker_id: i32, broker_epoch: i64, now_ms: u64) {
        let s = self
            .sessions
            .entry(broker_id)
            .or_insert_with(|| fresh_session(broker_epoch, now_ms));
        if s.broker_epoch != broker_epoch {
            *s = fresh_session(broker_epoch, now_ms);
        }
        s.last_contact_ms = s.last_contact_ms.max(now_ms);
    }

    /// Takes in heartbeat contacts recorded outside the write task ([`HeartbeatTracker`]):
    /// `(broker_id, broker_epoch, at_ms)`. A contact counts only for the session of that
    /// epoch, and only moves its last contact forward; it starts no session (a heartbeat that
    /// starts one goes through [`heartbeat`] on the write task).
    pub fn note_contacts(&mut self, contacts: impl IntoIterator<Item = (i32, i64, u64)>) {
        for (id, epoch, at_ms) in contacts {
            if let Some(s) = self.sessions.get_mut(&id)
                && s.broker_epoch == epoch
            {
                s.last_contact_ms = s.last_contact_ms.max(at_ms);
            }
        }
    }

    /// Moves every session's last contact `stall_ms` later (at most to `now_ms`): this
    /// controller did not run for that long (paused, starved of CPU), so it could not have
    /// received the brokers' heartbeats, and that time must not count towards their session
    /// timeout. Sessions that were still live before the stall stay live after it.
    pub fn forgive_stall(&mut self, stall_ms: u64, now_ms: u64) {
        for s in self.sessions.values_mut() {
            s.last_contact_ms = s
                .last_contact_ms
                .saturating_add(stall_ms)
                .min(now_ms)
                .max(s.last_contact_ms);
        }
    }

    /// Sets the metadata offset `broker_id` reported. No-op without a session.
    pub fn set_metadata_offset(&mut self, broker_id: i32, offset: i64) {
        if let Some(s) = self.sessions.get_mut(&broker_id) {
            s.metadata_offset = offset;
        }
    }

    /// Sets the fenced / controlled-shutdown flags after a decision. No-op without a session.
    pub fn set_state(&mut self, broker_id: i32, fenced: bool, in_controlled_shutdown: bool) {
        if let Some(s) = self.sessions.get_mut(&broker_id) {
            s.fenced = fenced;
            s.in_controlled_shutdown = in_controlled_shutdown;
        }
    }

    /// Records the metadata offset of the batch that put `broker_id` into controlled shutdown
    /// (Kafka: `maybeUpdateControlledShutdownOffset`). The shutdown is granted only once every
    /// active broker has reported at least this offset, so the new leaders know they lead
    /// before the old one stops. Without it the grant does not wait.
    pub fn set_controlled_shutdown_offset(&mut self, broker_id: i32, offset: u64) {
        if let Some(s) = self.sessions.get_mut(&broker_id)
            && s.controlled_shutdown_offset.is_none()
        {
            s.controlled_shutdown_offset = Some(offset);
        }
    }

    /// Forgets `broker_id` (it unregistered).
    pub fn remove(&mut self, broker_id: i32) {
        self.sessions.remove(&broker_id);
    }

    /// The session of `broker_id`.
    pub fn session(&self, broker_id: i32) -> Option<&BrokerSession> {
        self.sessions.get(&broker_id)
    }

    /// Number of sessions.
    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    /// True without sessions.
    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }

    /// True when `broker_id` is unfenced and heard from within `session_timeout_ms` of
    /// `now_ms` (Kafka: `hasValidSession`). Fenced brokers never have a valid session, so a
    /// new incarnation may take over their id.
    pub fn has_valid_session(&self, broker_id: i32, now_ms: u64, session_timeout_ms: u64) -> bool {
        self.sessions.get(&broker_id).is_some_and(|s| {
            !s.fenced && now_ms <= s.last_contact_ms.saturating_add(session_timeout_ms)
        })
    }

    /// Unfenced brokers not heard from for more than `session_timeout_ms`, in id order. The
    /// caller fences each with [`fence_broker`] and then marks the session fenced with
    /// [`set_state`](Self::set_state) so it is not reported again.
    pub fn expired(&self, now_ms: u64, session_timeout_ms: u64) -> Vec<i32> {
        self.sessions
            .iter()
            .filter(|(_, s)| {
                !s.fenced && now_ms > s.last_contact_ms.saturating_add(session_timeout_ms)
            })
            .map(|(&id, _)| id)
            .collect()
    }

    /// The smallest metadata offset reported by an active broker (unfenced, not shutting
    /// down) other than `except`; `None` when there is none (Kafka: `lowestActiveOffset`).
    pub fn lowest_active_offset(&self, except: i32) -> Option<i64> {
        self.sessions
            .iter()
            .filter(|(id, s)| **id != except && !s.fenced && !s.in_controlled_shutdown)
            .map(|(_, s)| s.metadata_offset)
            .min()
    }

    /// True when a controlled shutdown of `broker_id` may be granted as far as the other
    /// brokers' progress goes (see [`set_controlled_shutdown_offset`]).
    ///
    /// [`set_controlled_shutdown_offset`]: Self::set_controlled_shutdown_offset
    fn shutdown_offset_reached(&self, broker_id: i32) -> bool {
        let Some(off) = self
            .sessions
            .get(&broker_id)
            .and_then(|s| s.controlled_shutdown_offset)
        else {
            return true;
        };
        self.lowest_active_offset(broker_id)
            .is_none_or(|low| low >= off as i64)
    }
}

fn fresh_session(broker_epoch: i64, now_ms: u64) -> BrokerSession {
    BrokerSession {
        broker_epoch,
        last_contact_ms: now_ms,
        metadata_offset: -1,
        fenced: true,
        in_controlled_shutdown: false,
        controlled_shutdown_offset: None,
    }
}

/// RegisterBroker (Kafka: BrokerRegistration v4, `ClusterControlManager.registerBroker`).
///
/// - `cluster_id` is the quorum's; a non-empty different one in the request ->
///   INCONSISTENT_CLUSTER_ID;
/// - negative broker id, an incarnation id that is not 16 bytes or is the nil uuid, no
///   listener, a listener with an empty host or a port outside 1..=65535, or a feature range
///   with min > max -> INVALID_REQUEST (Kafka's schema cannot carry a port above 65535 and
///   it has no more specific code for a malformed registration; an empty range would only
///   surface there as UNSUPPORTED_VERSION, which wrongly blames the cluster's level);
/// - a `metadata.version` feature range that excludes the cluster's level ->
///   UNSUPPORTED_VERSION;
/// - an existing registration with another incarnation id that is unfenced and whose session
///   is alive (`session_alive(broker_id)`, usually [`BrokerHeartbeatManager::has_valid_session`])
///   -> DUPLICATE_BROKER_REGISTRATION;
/// - otherwise (new broker, same incarnation retrying, or a restart after the old session
///   died) a `RegisterBrokerRecord` with `broker_epoch = 0` (replay assigns the record's
///   offset) and `fenced = true`. A re-registration always gets a new epoch, as in Kafka, so
///   the reply's epoch is the offset of a committed record. If the old registration was
///   unfenced, the same batch first takes the broker out of every ISR and leadership (the new
///   process may have lost unflushed data).
///
/// The reply's `broker_epoch` is -1: the caller sets it to the offset of the committed entry
/// holding the records. `previous_broker_epoch` is not used until ELR (KIP-966) is built.
pub fn register_broker(
    image: &MetadataImage,
    req: &RegisterBrokerRequest,
    cluster_id: &str,
    session_alive: impl Fn(i32) -> bool,
) -> ControllerResult<RegisterBrokerReply> {
    let refuse = |code: ErrorCode, msg: String| {
        ControllerResult::response_only(RegisterBrokerReply {
            error: error(code, msg),
            broker_epoch: -1,
            cluster_id: cluster_id.to_string(),
            ..Default::default()
        })
    };
    let incarnation = match check_registration(image, req, cluster_id) {
        Ok(incarnation) => incarnation,
        Err((code, msg)) => return refuse(code, msg),
    };
    let mut records = Vec::new();
    if let Some(existing) = image.broker(req.broker_id) {
        if existing.incarnation_id != incarnation
            && !existing.fenced
            && session_alive(req.broker_id)
        {
            return refuse(
                ErrorCode::DuplicateBrokerRegistration,
                format!(
                    "broker {} is registered with incarnation {} and its session is alive",
                    req.broker_id, existing.incarnation_id
                ),
            );
        }
        if !existing.fenced {
            remove_broker_from_partitions(image, req.broker_id, &mut records);
        }
    }
    records.push(record(Record::RegisterBroker(RegisterBrokerRecord {
        broker_id: req.broker_id,
        incarnation_id: req.incarnation_id.clone(),
        broker_epoch: 0,
        endpoints: req.listeners.clone(),
        rack: req.rack.clone(),
        fenced: true,
        in_controlled_shutdown: false,
    })));
    ControllerResult::new(
        records,
        RegisterBrokerReply {
            error: None,
            broker_epoch: -1,
            cluster_id: cluster_id.to_string(),
            leader: None,
        },
    )
}

/// The checks of a RegisterBroker request that need no session state: the cluster id, the
/// broker id, a non-nil 16-byte incarnation id, at least one well-formed listener, feature
/// ranges, and the cluster's `metadata.version` inside the broker's range (KIP-631,
/// `ClusterControlManager.registerBroker`). Returns the incarnation id.
fn check_registration(
    image: &MetadataImage,
    req: &RegisterBrokerRequest,
    cluster_id: &str,
) -> Result<uuid::Uuid, (ErrorCode, String)> {
    if !req.cluster_id.is_empty() && req.cluster_id != cluster_id {
        return Err((
            ErrorCode::InconsistentClusterId,
            format!(
                "broker has cluster id {:?}, the quorum has {cluster_id:?}",
                req.cluster_id
            ),
        ));
    }
    if req.broker_id < 0 {
        return Err((
            ErrorCode::InvalidRequest,
            format!("invalid broker id {}", req.broker_id),
        ));
    }
    let Some(incarnation) = uuid_from_bytes(&req.incarnation_id) else {
        return Err((
            ErrorCode::InvalidRequest,
            format!(
                "incarnation id must be 16 bytes, got {}",
                req.incarnation_id.len()
            ),
        ));
    };
    if incarnation.is_nil() {
        return Err((
            ErrorCode::InvalidRequest,
            "incarnation id must not be the nil uuid".into(),
        ));
    }
    if req.listeners.is_empty() {
        return Err((ErrorCode::InvalidRequest, "no listener".into()));
    }
    if let Some(problem) = req.listeners.iter().find_map(listener_problem) {
        return Err((ErrorCode::InvalidRequest, problem));
    }
    if let Some(f) = req
        .features
        .iter()
        .find(|f| f.min_supported_version > f.max_supported_version)
    {
        return Err((
            ErrorCode::InvalidRequest,
            format!(
                "feature {} has min_supported_version {} > max_supported_version {}",
                keel_proto::limits::clip(&f.name),
                f.min_supported_version,
                f.max_supported_version
            ),
        ));
    }
    if let Some(&level) = image.features().get("metadata.version")
        && let Some(f) = req.features.iter().find(|f| f.name == "metadata.version")
        && !(f.min_supported_version..=f.max_supported_version).contains(&level)
    {
        return Err((
            ErrorCode::UnsupportedVersion,
            format!(
                "metadata.version {level} is outside the broker's range {}..={}",
                f.min_supported_version, f.max_supported_version
            ),
        ));
    }
    Ok(incarnation)
}

/// What is wrong with a registered listener, if anything: an empty host, or a port outside
/// 1..=65535 (Kafka's schema carries the port as uint16, so it cannot express more; port 0
/// is not connectable).
fn listener_problem(l: &keel_proto::metadata::BrokerEndpoint) -> Option<String> {
    if l.host.trim().is_empty() {
        return Some(format!(
            "listener {:?} has an empty host",
            keel_proto::limits::clip(&l.name)
        ));
    }
    if l.port == 0 || l.port > u32::from(u16::MAX) {
        return Some(format!(
            "listener {:?} has port {}, expected 1..=65535",
            keel_proto::limits::clip(&l.name),
            l.port
        ));
    }
    None
}

/// BrokerHeartbeat (Kafka: BrokerHeartbeat v1; `BrokerHeartbeatManager.calculateNextBrokerState`
/// and `ReplicationControlManager.processBrokerHeartbeat`).
///
/// Errors (no records, `is_fenced = true`, session not refreshed): unknown broker ->
/// BROKER_ID_NOT_REGISTERED; `broker_epoch` other than the registration's ->
/// STALE_BROKER_EPOCH; `current_metadata_offset` below -1 or above `log_end_offset` (the last
/// index of the active controller's Raft log: a broker can only have applied committed
/// entries, which all are in it) -> INVALID_REQUEST, so a broken or hostile broker cannot
/// claim to be caught up and get unfenced. A valid heartbeat
/// refreshes the broker's session in `sessions` at `now_ms` (in memory, before any record
/// commits, as Kafka does) and then, by the broker's current registration:
/// - fenced: `want_shut_down` -> `should_shut_down` at once (it leads nothing); else, when
///   not `want_fence`, caught up (`current_metadata_offset >= broker_epoch`, i.e. it has
///   applied its own registration) and not in controlled shutdown -> UNFENCE record plus
///   leader elections for leaderless partitions it replicates;
/// - unfenced: `want_fence` -> fenced like [`fence_broker`] (and `should_shut_down` if it
///   also wants to shut down); `want_shut_down` -> an IN_CONTROLLED_SHUTDOWN record plus the
///   partition changes that move leadership and ISR membership away (`should_shut_down`
///   stays false on this heartbeat);
/// - in controlled shutdown: the move-away changes are recomputed (normally none); once
///   there are none, the broker leads nothing and is in no ISR with other members, and every
///   active broker has applied the controlled-shutdown batch (when its offset was recorded
///   with [`BrokerHeartbeatManager::set_controlled_shutdown_offset`]), the shutdown is
///   granted: `should_shut_down = true` and the broker is fenced (Kafka: SHUTDOWN_NOW).
///
/// `is_caught_up` and `is_fenced` describe the state after the returned records.
pub fn heartbeat(
    image: &MetadataImage,
    req: &BrokerHeartbeatRequest,
    sessions: &mut BrokerHeartbeatManager,
    now_ms: u64,
    log_end_offset: u64,
) -> ControllerResult<BrokerHeartbeatReply> {
    let refuse = |code: ErrorCode, msg: String| {
        ControllerResult::response_only(BrokerHeartbeatReply {
            error: error(code, msg),
            is_fenced: true,
            ..Default::default()
        })
    };
    let Some(reg) = image.broker(req.broker_id) else {
        return refuse(
            ErrorCode::BrokerIdNotRegistered,
            format!("broker {} is not registered", req.broker_id),
        );
    };
    if reg.epoch != req.broker_epoch {
        return refuse(
            ErrorCode::StaleBrokerEpoch,
            format!(
                "broker {} has epoch {}, heartbeat carries {}",
                req.broker_id, reg.epoch, req.broker_epoch
            ),
        );
    }
    if req.current_metadata_offset < -1
        || req.current_metadata_offset > i64::try_from(log_end_offset).unwrap_or(i64::MAX)
    {
        return refuse(
            ErrorCode::InvalidRequest,
            format!(
                "broker {} reports metadata offset {}, outside -1..={log_end_offset} (the \
                 controller's log end)",
                req.broker_id, req.current_metadata_offset
            ),
        );
    }
    let id = req.broker_id;
    sessions.touch(id, reg.epoch, now_ms);
    sessions.set_metadata_offset(id, req.current_metadata_offset);
    let caught_up = req.current_metadata_offset >= reg.epoch;
    let mut records = Vec::new();
    let mut fenced = reg.fenced;
    let mut shutting_down = reg.in_controlled_shutdown;
    let mut should_shut_down = false;
    if reg.fenced {
        if req.want_shut_down {
            should_shut_down = true;
        } else if !req.want_fence && caught_up && !reg.in_controlled_shutdown {
            records.push(change_record(reg.epoch, id, FencingChange::Unfence, false));
            elect_leaderless_with(image, id, &mut records);
            fenced = false;
        }
    } else if req.want_fence {
        records = fence_broker(image, id).records;
        fenced = true;
        should_shut_down = req.want_shut_down;
    } else if !reg.in_controlled_shutdown {
        if req.want_shut_down {
            records.push(change_record(reg.epoch, id, FencingChange::None, true));
            remove_broker_from_partitions(image, id, &mut records);
            shutting_down = true;
        }
    } else {
        // In controlled shutdown (the flag cannot be cleared: the broker must re-register).
        remove_broker_from_partitions(image, id, &mut records);
        if records.is_empty()
            && req.want_shut_down
            && leads_nothing_shared(image, id)
            && sessions.shutdown_offset_reached(id)
        {
            records = fence_broker(image, id).records;
            fenced = true;
            should_shut_down = true;
        }
    }
    sessions.set_state(id, fenced, shutting_down);
    // Fencing, unfencing and controlled shutdown move leaders partition by partition: every
    // prefix is a valid state, and a broker may lead more than one entry can carry.
    ControllerResult::non_atomic(
        records,
        BrokerHeartbeatReply {
            error: None,
            is_caught_up: caught_up,
            is_fenced: fenced,
            should_shut_down,
            leader: None,
        },
    )
}

/// True when `broker` leads no partition and is in no ISR that has other members: what a
/// controlled shutdown waits for.
pub fn leads_nothing_shared(image: &MetadataImage, broker: i32) -> bool {
    image.topics().by_id.values().all(|t| {
        t.partitions
            .values()
            .all(|p| p.leader != broker && !(p.isr.len() > 1 && p.isr.contains(&broker)))
    })
}

fn change_record(
    epoch: i64,
    broker_id: i32,
    fencing: FencingChange,
    controlled_shutdown: bool,
) -> MetadataRecord {
    record(Record::BrokerRegistrationChange(
        BrokerRegistrationChangeRecord {
            broker_id,
            broker_epoch: epoch,
            fenced: fencing as i32,
            in_controlled_shutdown: if controlled_shutdown {
                ShutdownChange::InControlledShutdown
            } else {
                ShutdownChange::None
            } as i32,
        },
    ))
}

/// Fences `broker_id` (session expiry, `want_fence`, or a granted controlled shutdown; Kafka:
/// `handleBrokerFenced`): partition changes that remove it from every ISR and elect new
/// leaders where it led (leader epoch + 1 through the leader change; leader -1 with the ISR
/// kept as `[broker_id]` when no other eligible ISR member exists, unless the topic's
/// `unclean.leader.election.enable` is true, then the first other live replica leads with
/// ISR = `[it]` and RECOVERING), then a FENCE `BrokerRegistrationChangeRecord`.
///
/// Idempotent: an unknown or already fenced broker gives no records.
pub fn fence_broker(image: &MetadataImage, broker_id: i32) -> ControllerResult<()> {
    let Some(reg) = image.broker(broker_id) else {
        return ControllerResult::response_only(());
    };
    if reg.fenced {
        return ControllerResult::response_only(());
    }
    let mut records = Vec::new();
    remove_broker_from_partitions(image, broker_id, &mut records);
    records.push(change_record(
        reg.epoch,
        broker_id,
        FencingChange::Fence,
        false,
    ));
    ControllerResult::new(records, ())
}

/// UnregisterBroker (Kafka: UnregisterBroker v0, `handleBrokerUnregistered`): partition
/// changes removing the broker from every ISR and leadership (as [`fence_broker`]), then an
/// `UnregisterBrokerRecord` carrying its epoch. Unknown broker -> BROKER_ID_NOT_REGISTERED.
/// The caller also drops the broker's session ([`BrokerHeartbeatManager::remove`]).
pub fn unregister_broker(
    image: &MetadataImage,
    req: &UnregisterBrokerRequest,
) -> ControllerResult<UnregisterBrokerReply> {
    let Some(reg) = image.broker(req.broker_id) else {
        return ControllerResult::response_only(UnregisterBrokerReply {
            error: error(
                ErrorCode::BrokerIdNotRegistered,
                format!("broker {} is not registered", req.broker_id),
            ),
            leader: None,
        });
    };
    let mut records = Vec::new();
    remove_broker_from_partitions(image, req.broker_id, &mut records);
    records.push(record(Record::UnregisterBroker(UnregisterBrokerRecord {
        broker_id: req.broker_id,
        broker_epoch: reg.epoch,
    })));
    ControllerResult::new(records, UnregisterBrokerReply::default())
}
