//! Reaching the controller quorum: one lazily connected gRPC channel per voter
//! ([`ControllerChannels`]), a pure [`ControllerRouter`] that picks which voter to ask next,
//! and [`ActiveControllerClient`], which follows the active controller for write RPCs
//! (RegisterBroker, BrokerHeartbeat): NOT_CONTROLLER with a hint -> the hinted voter; without a
//! hint or on a transport error -> the next voter; a bounded number of attempts per call.
//!
//! A hint may name a controller this broker's controller list does not have (one added with
//! `keelctl quorum add-controller`, KIP-853): the client then opens a channel to the hint's
//! `leader_address` and follows it, as a Kafka broker follows the leader endpoint a controller
//! returns; at most [`MAX_LEARNED_CONTROLLERS`] such controllers per client.
//!
//! The voter set itself follows the quorum: [`super::bootstrap::spawn_voter_refresh`] asks
//! the active controller for it (DescribeQuorum) every [`VOTER_REFRESH`] and publishes changes on a watch;
//! channels made [`following`](ControllerChannels::following) it rebuild themselves on their
//! next use ([`ControllerChannels::refresh`]), keeping the connections of unchanged voters. So a
//! broker reaches controllers added after it started, and stops asking removed ones, before
//! the controllers it started with are gone (Kafka's brokers learn the voters from the
//! metadata log's VotersRecord).

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use keel_proto::ErrorCode;
use keel_proto::common::Error as WireError;
use keel_proto::controller::controller_service_client::ControllerServiceClient;
use keel_proto::controller::{
    AllocateProducerIdsReply, AlterConfigsReply, AlterPartitionReply, BrokerHeartbeatReply,
    ControllerLeader, CreatePartitionsReply, CreateTopicsReply, DeleteTopicsReply,
    DescribeClusterReply, DescribeConfigsReply, DescribeQuorumReply, ElectLeadersReply,
    RegisterBrokerReply,
};
use keel_runtime::tls::Dialer;
use tokio::sync::watch;
use tonic::transport::Channel;

/// Connect timeout of a controller channel.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(1000);
/// Controllers a client learns from hints beyond the configured voters, at most.
pub const MAX_LEARNED_CONTROLLERS: usize = 8;
/// Largest message accepted from a controller (snapshot chunks are about 1 MiB).
pub const MAX_CONTROLLER_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

/// A lazily connecting client of the controller at `addr` (`host:port`), opened by `dialer`.
///
/// Errors: `addr` is not a valid URI authority.
pub fn controller_client(
    addr: &str,
    dialer: &Dialer,
) -> Result<ControllerServiceClient<Channel>, String> {
    let endpoint = Dialer::endpoint(addr)
        .map_err(|e| e.to_string())?
        .connect_timeout(CONNECT_TIMEOUT)
        .tcp_nodelay(true);
    Ok(ControllerServiceClient::new(dialer.connect_lazy(&endpoint))
        .max_decoding_message_size(MAX_CONTROLLER_MESSAGE_BYTES))
}

/// How often [`super::bootstrap::spawn_voter_refresh`] asks for the voter set (with up to 20%
/// jitter).
pub const VOTER_REFRESH: Duration = Duration::from_secs(5);

/// One client per voter, in voter-id order. Cloning shares the channels.
#[derive(Debug, Clone)]
pub struct ControllerChannels {
    voters: Arc<Vec<(u64, String, ControllerServiceClient<Channel>)>>,
    dialer: Dialer,
    /// The newest voter set, when these channels follow one ([`Self::following`]).
    updates: Option<watch::Receiver<BTreeMap<u64, String>>>,
}

impl ControllerChannels {
    /// Lazily connecting channels to every voter (`id -> host:port`), opened by `dialer`
    /// (TLS or not). Fails on an address that is not a valid URI authority (the config has
    /// checked `host:port` already).
    pub fn new(voters: &BTreeMap<u64, String>, dialer: &Dialer) -> Result<Self, String> {
        let mut out = Vec::with_capacity(voters.len());
        for (id, addr) in voters {
            out.push((*id, addr.clone(), Self::client_for(*id, addr, dialer)?));
        }
        assert!(!out.is_empty(), "config guarantees at least one voter");
        Ok(Self {
            voters: Arc::new(out),
            dialer: dialer.clone(),
            updates: None,
        })
    }

    /// These channels, rebuilt from `updates`' voter set on use whenever it differs
    /// ([`Self::refresh`]).
    pub fn following(mut self, updates: watch::Receiver<BTreeMap<u64, String>>) -> Self {
        self.updates = Some(updates);
        self
    }

    /// Rebuilds the channels from the newest voter set when it differs from the one they
    /// serve (an empty set is ignored); connections to voters at an unchanged address are
    /// kept, controllers learned from hints are dropped (the set is the quorum's own). Returns
    /// whether anything changed.
    pub fn refresh(&mut self) -> bool {
        let Some(newest) = self.newer_voters() else {
            return false;
        };
        let mut out = Vec::with_capacity(newest.len());
        for (id, addr) in &newest {
            let kept = self
                .voters
                .iter()
                .find(|(i, a, _)| i == id && a == addr)
                .map(|v| v.2.clone());
            match kept.map_or_else(|| Self::client_for(*id, addr, &self.dialer), Ok) {
                Ok(client) => out.push((*id, addr.clone(), client)),
                Err(e) => tracing::warn!("cannot reach controller {id} at {addr}: {e}"),
            }
        }
        if out.is_empty() {
            return false;
        }
        self.voters = Arc::new(out);
        true
    }

    /// Whether the voter set these channels follow differs from the one they serve, so that
    /// [`Self::refresh`] would rebuild them.
    pub fn is_stale(&self) -> bool {
        self.newer_voters().is_some()
    }

    /// The newest voter set when it is not empty and differs from the one served.
    fn newer_voters(&self) -> Option<BTreeMap<u64, String>> {
        let updates = self.updates.as_ref()?;
        let newest = updates.borrow();
        let same = newest.len() == self.voters.len()
            && self
                .voters
                .iter()
                .all(|(id, addr, _)| newest.get(id) == Some(addr));
        (!newest.is_empty() && !same).then(|| newest.clone())
    }

    fn client_for(
        id: u64,
        addr: &str,
        dialer: &Dialer,
    ) -> Result<ControllerServiceClient<Channel>, String> {
        controller_client(addr, dialer).map_err(|e| format!("controller {id}: {e}"))
    }

    /// These channels plus one to controller `id` at `addr` (learned from a leader hint);
    /// `None` when `id` is known already or `addr` is not a valid `host:port`.
    pub fn with_learned(&self, id: u64, addr: &str) -> Option<Self> {
        if self.voters.iter().any(|v| v.0 == id) {
            return None;
        }
        let client = Self::client_for(id, addr, &self.dialer).ok()?;
        let mut voters = self.voters.as_ref().clone();
        voters.push((id, addr.to_string(), client));
        Some(Self {
            voters: Arc::new(voters),
            dialer: self.dialer.clone(),
            updates: self.updates.clone(),
        })
    }

    /// Number of voters.
    pub fn len(&self) -> usize {
        self.voters.len()
    }

    /// Always false (there is at least one voter).
    pub fn is_empty(&self) -> bool {
        self.voters.is_empty()
    }

    /// The client of voter number `index` (in id order).
    pub fn client(&self, index: usize) -> ControllerServiceClient<Channel> {
        self.voters[index % self.voters.len()].2.clone()
    }

    /// `(node id, address)` of voter number `index`.
    pub fn voter(&self, index: usize) -> (u64, &str) {
        let v = &self.voters[index % self.voters.len()];
        (v.0, &v.1)
    }

    /// Voter ids in order.
    pub fn ids(&self) -> Vec<u64> {
        self.voters.iter().map(|v| v.0).collect()
    }
}

/// Which voter to ask next (pure). See the module doc.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerRouter {
    ids: Vec<u64>,
    current: usize,
}

impl ControllerRouter {
    /// Starts at the first voter.
    pub fn new(ids: Vec<u64>) -> Self {
        assert!(!ids.is_empty(), "at least one voter");
        Self { ids, current: 0 }
    }

    /// Index of the voter to ask now.
    pub fn current(&self) -> usize {
        self.current
    }

    /// The voter did not answer (transport error, timeout): try the next one.
    pub fn on_transport_error(&mut self) {
        self.current = (self.current + 1) % self.ids.len();
    }

    /// The voter answered NOT_CONTROLLER naming `leader_id` (-1 = unknown): go to that voter
    /// when it is a known voter other than the current one, else to the next voter.
    pub fn on_not_controller(&mut self, leader_id: i32) {
        let hinted = u64::try_from(leader_id)
            .ok()
            .and_then(|id| self.ids.iter().position(|v| *v == id))
            .filter(|i| *i != self.current);
        match hinted {
            Some(i) => self.current = i,
            None => self.on_transport_error(),
        }
    }

    /// Adds controller `id` (learned from a hint) as the last one; a known id changes nothing.
    pub fn add(&mut self, id: u64) {
        if !self.ids.contains(&id) {
            self.ids.push(id);
        }
    }

    /// The voter `leader_id` is known to be active (from any reply's hint): ask it next.
    pub fn prefer(&mut self, leader_id: i32) {
        if let Some(i) = u64::try_from(leader_id)
            .ok()
            .and_then(|id| self.ids.iter().position(|v| *v == id))
        {
            self.current = i;
        }
    }
}

/// Replies of write RPCs: an error and a leader hint.
pub trait ControllerReply {
    /// The whole-request error.
    fn error(&self) -> Option<&WireError>;
    /// The active controller as the replying node sees it.
    fn leader(&self) -> Option<&ControllerLeader>;
}

macro_rules! controller_reply {
    ($($t:ty),*) => {$(
        impl ControllerReply for $t {
            fn error(&self) -> Option<&WireError> {
                self.error.as_ref()
            }
            fn leader(&self) -> Option<&ControllerLeader> {
                self.leader.as_ref()
            }
        }
    )*};
}

controller_reply!(
    DescribeQuorumReply,
    RegisterBrokerReply,
    BrokerHeartbeatReply,
    AlterPartitionReply,
    AllocateProducerIdsReply,
    CreateTopicsReply,
    DeleteTopicsReply,
    DescribeConfigsReply,
    DescribeClusterReply,
    CreatePartitionsReply,
    AlterConfigsReply,
    ElectLeadersReply,
    keel_proto::controller::AlterPartitionReassignmentsReply,
    keel_proto::controller::ListPartitionReassignmentsReply,
    keel_proto::controller::CreateAclsReply,
    keel_proto::controller::DescribeAclsReply,
    keel_proto::controller::DeleteAclsReply,
    keel_proto::controller::DescribeUserScramCredentialsReply,
    keel_proto::controller::AlterUserScramCredentialsReply
);

/// Whether hinted controller `id` at `addr` is announced for the first time in this process
/// (then recorded). The broker's several clients (registration and heartbeats, AlterPartition,
/// producer ids, the lifecycle thread's own channels) learn the same hint, and the line is
/// worth reading once. At most [`MAX_LEARNED_CONTROLLERS`] entries are kept; past them
/// nothing is new (logged at DEBUG).
fn first_announcement(id: u64, addr: &str) -> bool {
    static ANNOUNCED: std::sync::Mutex<BTreeSet<(u64, String)>> =
        std::sync::Mutex::new(BTreeSet::new());
    let mut seen = ANNOUNCED.lock().unwrap_or_else(|e| e.into_inner());
    seen.len() < MAX_LEARNED_CONTROLLERS && seen.insert((id, addr.to_string()))
}

/// No voter answered as the active controller within the attempts of one call.
#[derive(Debug, thiserror::Error)]
#[error("no active controller answered after {attempts} attempts (last: {last})")]
pub struct NoActiveController {
    /// Attempts made.
    pub attempts: usize,
    /// What the last attempt saw.
    pub last: String,
}

/// Sends write RPCs to the active controller. See the module doc.
#[derive(Debug)]
pub struct ActiveControllerClient {
    channels: ControllerChannels,
    router: ControllerRouter,
    /// Controllers learned from hints so far (bounded by [`MAX_LEARNED_CONTROLLERS`]).
    learned: usize,
    request_timeout: Duration,
    /// Node id of the controller that last answered a write (the active one), -1 if none yet.
    pub active_id: i32,
}

impl ActiveControllerClient {
    /// A client over `channels`; each attempt is bounded by `request_timeout`.
    pub fn new(channels: ControllerChannels, request_timeout: Duration) -> Self {
        let router = ControllerRouter::new(channels.ids());
        Self {
            channels,
            router,
            learned: 0,
            request_timeout,
            active_id: -1,
        }
    }

    /// Asks voter `leader_id` first on the next call (a hint learned earlier, e.g. the
    /// previous call's [`Self::active_id`]); an id that is not a voter (-1) changes nothing.
    pub fn prefer(&mut self, leader_id: i32) {
        self.router.prefer(leader_id);
    }

    /// Opens a channel to a hinted active controller that is not among the known ones.
    fn learn(&mut self, leader: &ControllerLeader) {
        let Ok(id) = u64::try_from(leader.leader_id) else {
            return;
        };
        if self.learned >= MAX_LEARNED_CONTROLLERS || leader.leader_address.is_empty() {
            return;
        }
        if let Some(channels) = self.channels.with_learned(id, &leader.leader_address) {
            if first_announcement(id, &leader.leader_address) {
                tracing::info!(
                    controller = id,
                    address = %leader.leader_address,
                    "following active controller {id} at {}, which this broker's controller \
                     list does not have: the list (controller_quorum_voters) is incomplete or \
                     out of date, or the controller was added since (keelctl quorum \
                     add-controller); the broker takes the quorum's own voter set at its next \
                     voter refresh (every {} s)",
                    leader.leader_address,
                    VOTER_REFRESH.as_secs()
                );
            } else {
                tracing::debug!(
                    controller = id,
                    address = %leader.leader_address,
                    "following a hinted active controller outside the controller list"
                );
            }
            self.channels = channels;
            self.router.add(id);
            self.learned += 1;
        }
    }

    /// Calls `f` on voters until one answers with something other than NOT_CONTROLLER; at
    /// most two rounds over the voters.
    pub async fn call<R, F, Fut>(&mut self, mut f: F) -> Result<R, NoActiveController>
    where
        R: ControllerReply,
        F: FnMut(ControllerServiceClient<Channel>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<R>, tonic::Status>>,
    {
        if self.channels.refresh() {
            self.router = ControllerRouter::new(self.channels.ids());
            self.learned = 0;
        }
        let attempts = 2 * self.channels.len();
        let mut last = String::from("nothing");
        for _ in 0..attempts {
            let index = self.router.current();
            let (id, addr) = self.channels.voter(index);
            match tokio::time::timeout(self.request_timeout, f(self.channels.client(index))).await {
                Err(_) => {
                    last = format!(
                        "controller {id} at {addr}: no answer in {:?}",
                        self.request_timeout
                    );
                    self.router.on_transport_error();
                }
                Ok(Err(status)) => {
                    last = format!(
                        "controller {id} at {addr}: {}",
                        keel_runtime::status::status_line(&status)
                    );
                    self.router.on_transport_error();
                }
                Ok(Ok(resp)) => {
                    let reply = resp.into_inner();
                    let not_controller = reply
                        .error()
                        .is_some_and(|e| e.code == i32::from(ErrorCode::NotController.code()));
                    if not_controller {
                        let hint = reply.leader().map_or(-1, |l| l.leader_id);
                        last = format!("controller {id}: NOT_CONTROLLER (hint: {hint})");
                        if let Some(l) = reply.leader() {
                            self.learn(l);
                        }
                        self.router.on_not_controller(hint);
                        continue;
                    }
                    self.active_id = id as i32;
                    return Ok(reply);
                }
            }
        }
        Err(NoActiveController { attempts, last })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn channels_are_stale_until_refreshed_from_a_changed_voter_set() {
        let one: BTreeMap<u64, String> = [(1, "127.0.0.1:1".to_string())].into();
        let (tx, rx) = watch::channel(one.clone());
        let mut channels = ControllerChannels::new(&one, &Dialer::new(None))
            .unwrap()
            .following(rx);
        assert!(!channels.is_stale());
        assert!(!channels.refresh());
        // A controller added (KIP-853): stale until refreshed.
        let mut two = one.clone();
        two.insert(3, "127.0.0.1:3".to_string());
        tx.send_replace(two);
        assert!(channels.is_stale());
        assert!(channels.refresh());
        assert!(!channels.is_stale());
        assert_eq!(channels.ids(), vec![1, 3]);
        // An empty set is ignored.
        tx.send_replace(BTreeMap::new());
        assert!(!channels.is_stale());
    }

    #[test]
    fn a_hinted_controller_is_announced_once_per_process() {
        // Addresses no other test uses (TEST-NET-1): the record is process-wide.
        // Every client of the broker learning the same hint: one announcement between them.
        assert!(first_announcement(3, "192.0.2.1:3"));
        assert!(!first_announcement(3, "192.0.2.1:3"));
        // Another address for the same id is news.
        assert!(first_announcement(3, "192.0.2.1:4"));
        // Bounded: past MAX_LEARNED_CONTROLLERS entries nothing is new.
        for id in 10..10 + MAX_LEARNED_CONTROLLERS as u64 {
            first_announcement(id, "192.0.2.1:5");
        }
        assert!(!first_announcement(99, "192.0.2.1:5"));
    }

    #[test]
    fn router_follows_hints_and_rotates_on_errors() {
        let mut r = ControllerRouter::new(vec![1, 2, 3]);
        assert_eq!(r.current(), 0);
        r.on_transport_error();
        assert_eq!(r.current(), 1);
        r.on_not_controller(3);
        assert_eq!(r.current(), 2);
        // A hint naming the node itself, an unknown id or no leader: next voter.
        r.on_not_controller(3);
        assert_eq!(r.current(), 0);
        r.on_not_controller(9);
        assert_eq!(r.current(), 1);
        r.on_not_controller(-1);
        assert_eq!(r.current(), 2);
        r.on_transport_error();
        assert_eq!(r.current(), 0, "wraps around");
        r.prefer(2);
        assert_eq!(r.current(), 1);
        r.prefer(-1);
        assert_eq!(r.current(), 1);
        // A controller learned from a hint is followed like a configured one.
        r.add(7);
        r.add(7);
        r.on_not_controller(7);
        assert_eq!(r.current(), 3);
        r.on_transport_error();
        assert_eq!(r.current(), 0, "four controllers now");
    }
}
