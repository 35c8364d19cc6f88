//! Group membership of a [`Consumer`](super::Consumer): Kafka's classic consumer group
//! protocol from the member's side (the Java client's `ConsumerCoordinator` and
//! `AbstractCoordinator`, eager rebalancing).
//!
//! What it owns: the member id and generation, the coordinator's address, the heartbeat
//! task, and the calls of the protocol (FindCoordinator, JoinGroup, SyncGroup, Heartbeat,
//! LeaveGroup, OffsetCommit, OffsetFetch). The consumer's poll drives it: a poll that finds
//! [`Membership::needs_join`] commits (with auto commit), joins, and takes the new
//! assignment with the group's committed offsets; then it fetches as an assigned consumer.
//!
//! - **Heartbeats** run in a background task every `heartbeat_interval_ms` while the member
//!   is in a generation. A reply that means "rebalance" (REBALANCE_IN_PROGRESS,
//!   ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID) makes the next poll rejoin; coordinator errors
//!   and transport errors make it find the coordinator again at once (backoff, not the
//!   heartbeat interval), so a coordinator failover costs about the time the cluster needs
//!   to elect a new leader of the group's `__consumer_offsets` partition.
//! - **Poll timeout**: when the application has not polled for `max_poll_interval_ms`, the
//!   task leaves the group (LeaveGroup) so the others get its partitions, as Kafka's
//!   heartbeat thread does; the next poll joins again.
//! - **Leader**: the member the coordinator names leader computes the assignment with the
//!   chosen assignor ([`super::assignor`]) over the partition counts of the subscribed
//!   topics (from the metadata) and sends it in SyncGroup.
//! - **Retries**: every protocol call is retried with jittered backoff across coordinator
//!   changes for up to `default_api_timeout_ms` (JoinGroup: plus the rebalance timeout);
//!   errors that no retry can fix (FENCED_INSTANCE_ID, INVALID_SESSION_TIMEOUT,
//!   GROUP_MAX_SIZE_REACHED, INCONSISTENT_GROUP_PROTOCOL, INVALID_GROUP_ID, ...) are reported
//!   as [`ConsumeError::Group`].
//!
//! Invariant: `generation >= 0` only between a successful SyncGroup and the next rejoin
//! (heartbeats and member commits use it); the heartbeat task changes the state only for the
//! generation it sent, so a late reply never undoes a newer join.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use keel_proto::ErrorCode;
use keel_proto::broker::{
    FindCoordinatorRequest, HeartbeatRequest, JoinGroupProtocol, JoinGroupRequest,
    LeaveGroupRequest, LeavingMember, OffsetCommitEntry, OffsetCommitRequest, OffsetFetchRequest,
    OffsetFetchTopic, SyncGroupAssignment, SyncGroupRequest,
};

use super::assignor::{
    Assignor, CONSUMER_PROTOCOL_TYPE, decode_assignment, decode_subscription, encode_assignment,
    encode_subscription,
};
use super::{ConsumeError, TopicPartition};
use crate::brokers::Brokers;

/// The group settings of a consumer, from [`super::ConsumerConfig`].
#[derive(Debug, Clone)]
pub(super) struct GroupSettings {
    pub group_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub session_timeout_ms: i32,
    pub heartbeat_interval: Duration,
    pub rebalance_timeout_ms: i32,
    pub assignors: Vec<Assignor>,
    pub request_timeout: Duration,
    pub api_timeout: Duration,
    pub backoff: keel_runtime::Backoff,
    pub bootstrap: Vec<String>,
}

type Client = crate::grpc::BrokerClient;

/// The coordinator as last found.
#[derive(Debug, Clone)]
struct Coordinator {
    id: i32,
    client: Client,
}

/// What the poll and the heartbeat task share.
#[derive(Debug)]
struct MemberState {
    /// Empty until the first JoinGroup answers MEMBER_ID_REQUIRED; reset after
    /// UNKNOWN_MEMBER_ID or a poll timeout.
    member_id: String,
    /// -1 outside a generation (see the module invariant).
    generation: i32,
    coordinator: Option<Coordinator>,
    /// Set when the group rebalances or this member was removed: the next poll rejoins.
    rejoin: bool,
    /// When the application last polled (the poll timeout).
    last_poll: Instant,
}

/// How a group error code is handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Handling {
    /// Find the coordinator again and retry.
    Rediscover,
    /// Join again; `true` = with an empty member id.
    Rejoin(bool),
    /// Report it.
    Fatal,
}

fn handling(code: ErrorCode) -> Handling {
    match code {
        ErrorCode::NotCoordinator
        | ErrorCode::CoordinatorNotAvailable
        | ErrorCode::CoordinatorLoadInProgress
        | ErrorCode::RequestTimedOut => Handling::Rediscover,
        ErrorCode::RebalanceInProgress | ErrorCode::IllegalGeneration => Handling::Rejoin(false),
        ErrorCode::UnknownMemberId => Handling::Rejoin(true),
        _ => Handling::Fatal,
    }
}

fn code_of(e: Option<&keel_proto::common::Error>) -> ErrorCode {
    ErrorCode::from_proto(e).unwrap_or(ErrorCode::UnknownServerError)
}

/// A consumer's membership in one group.
#[derive(Debug)]
pub(super) struct Membership {
    settings: Arc<GroupSettings>,
    topics: Vec<String>,
    state: Arc<Mutex<MemberState>>,
    brokers: Arc<Brokers>,
    heartbeat: tokio::task::JoinHandle<()>,
    /// When offsets were last auto-committed.
    pub last_commit: Instant,
}

impl Drop for Membership {
    fn drop(&mut self) {
        self.heartbeat.abort();
    }
}

impl Membership {
    /// A member of `settings.group_id` subscribed to `topics`, not joined yet (the next poll
    /// joins). Starts the heartbeat task.
    pub fn new(settings: GroupSettings, topics: Vec<String>, brokers: Arc<Brokers>) -> Self {
        let settings = Arc::new(settings);
        let state = Arc::new(Mutex::new(MemberState {
            member_id: String::new(),
            generation: -1,
            coordinator: None,
            rejoin: true,
            last_poll: Instant::now(),
        }));
        let heartbeat = tokio::spawn(heartbeat_loop(
            settings.clone(),
            state.clone(),
            brokers.clone(),
        ));
        Self {
            settings,
            topics,
            state,
            brokers,
            heartbeat,
            last_commit: Instant::now(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, MemberState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The group id.
    pub fn group_id(&self) -> &str {
        &self.settings.group_id
    }

    /// Records a poll (the poll timeout restarts).
    pub fn polled(&self) {
        self.lock().last_poll = Instant::now();
    }

    /// Whether the next poll must (re)join.
    pub fn needs_join(&self) -> bool {
        let st = self.lock();
        st.rejoin || st.generation < 0
    }

    /// (member id, generation) while in a generation.
    pub fn generation(&self) -> Option<(String, i32)> {
        let st = self.lock();
        (st.generation >= 0).then(|| (st.member_id.clone(), st.generation))
    }

    fn backoff(&self, attempt: u32) -> Duration {
        self.settings.backoff.next(attempt)
    }

    /// The coordinator, found again if unknown. A refusal no retry can fix (the group id
    /// out of bounds) is [`Step::Fatal`].
    async fn coordinator(&self) -> Result<Client, Step> {
        if let Some(c) = self.lock().coordinator.clone() {
            return Ok(c.client);
        }
        let c = find_coordinator(&self.settings, &self.brokers)
            .await
            .map_err(|e| match e {
                Found::Retry(why) => Step::Retry(why),
                Found::Refused(code, message) => Step::Fatal(ConsumeError::Group {
                    group: self.settings.group_id.clone(),
                    code,
                    message: format!("FindCoordinator: {message}"),
                }),
            })?;
        self.lock().coordinator = Some(c.clone());
        Ok(c.client)
    }

    fn forget_coordinator(&self) {
        self.lock().coordinator = None;
    }

    /// Joins the group (JoinGroup, SyncGroup; the assignment computed here when this member
    /// leads) and returns this member's partitions. Retries as the module doc says.
    pub async fn join(&self) -> Result<Vec<TopicPartition>, ConsumeError> {
        self.lock().generation = -1;
        let s = &self.settings;
        let budget = s.api_timeout + Duration::from_millis(s.rebalance_timeout_ms.max(0) as u64);
        let subscription = encode_subscription(&self.topics);
        self.retrying("could not join", budget, || self.try_join(&subscription))
            .await
    }

    /// Runs `op` until it succeeds or fails for good, as the module doc says: after
    /// [`Step::Retry`] with jittered backoff, after [`Step::Again`] at once (MEMBER_ID_REQUIRED,
    /// a rebalance), both only within `budget`; then [`ConsumeError::Unreachable`] saying
    /// `what` and the last failure.
    async fn retrying<T, F, Fut>(
        &self,
        what: &str,
        budget: Duration,
        op: F,
    ) -> Result<T, ConsumeError>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<T, Step>>,
    {
        let deadline = tokio::time::Instant::now() + budget;
        let mut last = String::from("no attempt");
        for attempt in 0u32.. {
            let pause = match op().await {
                Ok(v) => return Ok(v),
                Err(Step::Fatal(e)) => return Err(e),
                Err(Step::Again) => {
                    last = "the group kept rebalancing".into();
                    Duration::ZERO
                }
                Err(Step::Retry(why)) => {
                    last = why;
                    self.backoff(attempt)
                }
            };
            let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
            let Some(pause) = keel_runtime::backoff::pause_within(pause, remaining) else {
                break;
            };
            tokio::time::sleep(pause).await;
        }
        Err(ConsumeError::Unreachable(format!(
            "group {}: {what} within {} ms: {last}",
            self.settings.group_id,
            budget.as_millis()
        )))
    }

    async fn try_join(&self, subscription: &bytes::Bytes) -> Result<Vec<TopicPartition>, Step> {
        let s = &self.settings;
        let mut client = self.coordinator().await?;
        let member_id = self.lock().member_id.clone();
        let reply = client
            .join_group(JoinGroupRequest {
                group_id: s.group_id.clone(),
                member_id: member_id.clone(),
                group_instance_id: s.instance_id.clone(),
                protocol_type: CONSUMER_PROTOCOL_TYPE.into(),
                protocols: s
                    .assignors
                    .iter()
                    .map(|a| JoinGroupProtocol {
                        name: a.name().into(),
                        metadata: subscription.clone(),
                    })
                    .collect(),
                session_timeout_ms: s.session_timeout_ms,
                rebalance_timeout_ms: s.rebalance_timeout_ms,
                client_id: s.client_id.clone(),
            })
            .await
            .map_err(|st| self.transport("JoinGroup", &st))?
            .into_inner();
        let code = code_of(reply.error.as_ref());
        if code == ErrorCode::MemberIdRequired {
            self.lock().member_id = reply.member_id;
            return Err(Step::Again);
        }
        self.react("JoinGroup", code, reply.error.as_ref())?;
        self.lock().member_id = reply.member_id.clone();
        let assignments = if reply.leader == reply.member_id {
            self.assign(&reply.protocol_name, &reply.members).await?
        } else {
            Vec::new()
        };
        let sync = client
            .sync_group(SyncGroupRequest {
                group_id: s.group_id.clone(),
                generation_id: reply.generation_id,
                member_id: reply.member_id.clone(),
                group_instance_id: s.instance_id.clone(),
                protocol_type: Some(CONSUMER_PROTOCOL_TYPE.into()),
                protocol_name: Some(reply.protocol_name.clone()),
                assignments,
            })
            .await
            .map_err(|st| self.transport("SyncGroup", &st))?
            .into_inner();
        let code = code_of(sync.error.as_ref());
        self.react("SyncGroup", code, sync.error.as_ref())?;
        let parts = if sync.assignment.is_empty() {
            Vec::new()
        } else {
            decode_assignment(&sync.assignment).ok_or_else(|| {
                Step::Fatal(ConsumeError::Protocol(format!(
                    "group {}: the leader's assignment is not a consumer assignment",
                    s.group_id
                )))
            })?
        };
        let mut st = self.lock();
        st.generation = reply.generation_id;
        st.rejoin = false;
        drop(st);
        tracing::info!(
            "group {}: joined generation {} as {} ({}), assigned {:?}",
            s.group_id,
            reply.generation_id,
            reply.member_id,
            reply.protocol_name,
            parts
        );
        Ok(parts
            .into_iter()
            .flat_map(|(t, ps)| ps.into_iter().map(move |p| (t.clone(), p)))
            .collect())
    }

    /// The leader's SyncGroup assignments for `members` with assignor `protocol`.
    async fn assign(
        &self,
        protocol: &str,
        members: &[keel_proto::broker::JoinGroupMember],
    ) -> Result<Vec<SyncGroupAssignment>, Step> {
        let assignor = Assignor::from_name(protocol).ok_or_else(|| {
            Step::Fatal(ConsumeError::Group {
                group: self.settings.group_id.clone(),
                code: ErrorCode::InconsistentGroupProtocol,
                message: format!("the group chose assignor {protocol:?}, which Keel lacks"),
            })
        })?;
        let subs: Vec<(String, Option<String>, Vec<String>)> = members
            .iter()
            .map(|m| {
                let topics = decode_subscription(&m.metadata).unwrap_or_else(|| {
                    tracing::warn!(
                        "group {}: member {} sent a subscription that does not decode; it gets nothing",
                        self.settings.group_id,
                        m.member_id
                    );
                    Vec::new()
                });
                (m.member_id.clone(), m.group_instance_id.clone(), topics)
            })
            .collect();
        let topics: BTreeSet<&String> = subs.iter().flat_map(|(_, _, t)| t).collect();
        let mut counts = BTreeMap::new();
        for t in topics {
            match self.brokers.refresh(t).await {
                Ok(meta) => {
                    counts.insert(t.clone(), meta.partitions.len() as i32);
                }
                // Kafka's leader assigns only the topics its metadata knows; a missing topic
                // gets partitions at a later rebalance.
                Err(e) => tracing::info!(
                    "group {}: topic {t} not assigned: {e}",
                    self.settings.group_id
                ),
            }
        }
        Ok(assignor
            .assign(&subs, &counts)
            .into_iter()
            .map(|(member_id, parts)| SyncGroupAssignment {
                member_id,
                assignment: encode_assignment(&parts),
            })
            .collect())
    }

    /// Turns a group error code into the step to take (and the state change it implies).
    fn react(
        &self,
        call: &str,
        code: ErrorCode,
        e: Option<&keel_proto::common::Error>,
    ) -> Result<(), Step> {
        if code == ErrorCode::None {
            return Ok(());
        }
        let message = e.map_or_else(String::new, |e| e.message.clone());
        match handling(code) {
            Handling::Rediscover => {
                self.forget_coordinator();
                Err(Step::Retry(format!("{call}: {code}")))
            }
            Handling::Rejoin(reset) => {
                if reset {
                    self.lock().member_id.clear();
                }
                Err(Step::Again)
            }
            Handling::Fatal => Err(Step::Fatal(ConsumeError::Group {
                group: self.settings.group_id.clone(),
                code,
                message: format!("{call}: {message}"),
            })),
        }
    }

    fn transport(&self, call: &str, status: &tonic::Status) -> Step {
        self.forget_coordinator();
        Step::Retry(format!("{call}: {}", status.message()))
    }

    /// Commits `offsets` ((partition, next offset to read, leader epoch of the last record
    /// read or -1)) as this member of its generation. A group that rebalanced meanwhile
    /// refuses it: [`ConsumeError::CommitFailed`], and the next poll rejoins (Kafka's
    /// `CommitFailedException`).
    pub async fn commit(&self, offsets: &[(TopicPartition, i64, i32)]) -> Result<(), ConsumeError> {
        if offsets.is_empty() {
            return Ok(());
        }
        let s = &self.settings;
        self.retrying("commit not acknowledged", s.api_timeout, || async {
            let Some((member_id, generation)) = self.generation() else {
                return Err(Step::Fatal(ConsumeError::CommitFailed(format!(
                    "group {}: this member is not in a generation (a rebalance is due); the next poll rejoins",
                    s.group_id
                ))));
            };
            match self.try_commit(offsets, &member_id, generation).await {
                Err(Step::Again) => {
                    self.lock().rejoin = true;
                    Err(Step::Fatal(ConsumeError::CommitFailed(format!(
                        "group {}: the group rebalanced since generation {generation}; the partitions may be another member's now",
                        s.group_id
                    ))))
                }
                other => other,
            }
        })
        .await
    }

    async fn try_commit(
        &self,
        offsets: &[(TopicPartition, i64, i32)],
        member_id: &str,
        generation: i32,
    ) -> Result<(), Step> {
        let s = &self.settings;
        let mut client = self.coordinator().await?;
        let reply = tokio::time::timeout(
            s.request_timeout,
            client.offset_commit(OffsetCommitRequest {
                group_id: s.group_id.clone(),
                generation_id: generation,
                member_id: member_id.to_string(),
                group_instance_id: s.instance_id.clone(),
                offsets: offsets
                    .iter()
                    .map(|((topic, partition), offset, epoch)| OffsetCommitEntry {
                        topic: topic.clone(),
                        partition: *partition,
                        offset: *offset,
                        leader_epoch: *epoch,
                        metadata: None,
                    })
                    .collect(),
            }),
        )
        .await
        .map_err(|_| {
            self.forget_coordinator();
            Step::Retry("OffsetCommit: no answer in time".into())
        })?
        .map_err(|st| self.transport("OffsetCommit", &st))?
        .into_inner();
        self.react(
            "OffsetCommit",
            code_of(reply.error.as_ref()),
            reply.error.as_ref(),
        )?;
        for r in &reply.results {
            let code = code_of(r.error.as_ref());
            if code == ErrorCode::None {
                continue;
            }
            return match handling(code) {
                Handling::Rediscover => {
                    self.forget_coordinator();
                    Err(Step::Retry(format!(
                        "OffsetCommit {}-{}: {code}",
                        r.topic, r.partition
                    )))
                }
                _ => Err(Step::Fatal(ConsumeError::Kafka {
                    topic: r.topic.clone(),
                    partition: r.partition,
                    code,
                })),
            };
        }
        Ok(())
    }

    /// The group's committed offsets of `tps`: (next offset, leader epoch or -1) per
    /// partition that has one.
    pub async fn committed(
        &self,
        tps: &[TopicPartition],
    ) -> Result<BTreeMap<TopicPartition, (i64, i32)>, ConsumeError> {
        let s = &self.settings;
        let mut topics: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
        for (t, p) in tps {
            topics.entry(t).or_default().push(*p);
        }
        let request = OffsetFetchRequest {
            group_id: s.group_id.clone(),
            topics: topics
                .into_iter()
                .map(|(name, partitions)| OffsetFetchTopic {
                    name: name.to_string(),
                    partitions,
                })
                .collect(),
        };
        self.retrying("committed offsets not read", s.api_timeout, || async {
            let mut client = self.coordinator().await?;
            let reply =
                tokio::time::timeout(s.request_timeout, client.offset_fetch(request.clone()))
                    .await
                    .map_err(|_| {
                        self.forget_coordinator();
                        Step::Retry("OffsetFetch: no answer in time".into())
                    })?
                    .map_err(|st| self.transport("OffsetFetch", &st))?
                    .into_inner();
            self.react(
                "OffsetFetch",
                code_of(reply.error.as_ref()),
                reply.error.as_ref(),
            )
            .map_err(|e| match e {
                // Not about membership: wait before asking again.
                Step::Again => Step::Retry("OffsetFetch: refused during a rebalance".into()),
                e => e,
            })?;
            Ok(reply
                .offsets
                .into_iter()
                .filter(|o| o.offset >= 0)
                .map(|o| ((o.topic, o.partition), (o.offset, o.leader_epoch)))
                .collect())
        })
        .await
    }

    /// Leaves the group (LeaveGroup, one attempt bounded by the request timeout) so the
    /// others take this member's partitions at once. A static member does not leave: it
    /// keeps its place for `session_timeout_ms`, so a restart does not rebalance (KIP-345).
    pub async fn leave(&self) {
        stop_member(&self.settings, &self.state, &self.brokers, "closing").await;
    }
}

/// One protocol step's failure.
#[derive(Debug)]
enum Step {
    /// Retry after a backoff (coordinator or transport trouble).
    Retry(String),
    /// Retry now (MEMBER_ID_REQUIRED, or a rebalance: join again).
    Again,
    /// Report.
    Fatal(ConsumeError),
}

/// FindCoordinator asked of the bootstrap brokers in turn; the answer's address gets its own
/// connection whose deadline covers a JoinGroup (rebalance timeout + 5 s, as Kafka's
/// consumer gives its JoinGroup request).
async fn find_coordinator(s: &GroupSettings, brokers: &Brokers) -> Result<Coordinator, Found> {
    let mut errors = Vec::new();
    for addr in &s.bootstrap {
        let mut c = match brokers.client_for(addr) {
            Ok(c) => c,
            Err(e) => {
                errors.push(e);
                continue;
            }
        };
        let reply = match c
            .find_coordinator(FindCoordinatorRequest {
                group_id: s.group_id.clone(),
            })
            .await
        {
            Ok(r) => r.into_inner(),
            Err(st) => {
                errors.push(format!("{addr}: {}", st.message()));
                continue;
            }
        };
        if let Some(e) = reply.error.as_ref().filter(|e| e.code != 0) {
            let code = code_of(Some(e));
            // COORDINATOR_NOT_AVAILABLE while `__consumer_offsets` is created or elects.
            return Err(if handling(code) == Handling::Rediscover {
                Found::Retry(format!("FindCoordinator: {} ({})", e.message, e.code))
            } else {
                Found::Refused(code, e.message.clone())
            });
        }
        let target = format!("{}:{}", reply.host, reply.port);
        let join_deadline = s.request_timeout.max(
            Duration::from_millis(s.rebalance_timeout_ms.max(0) as u64) + Duration::from_secs(5),
        );
        let endpoint = keel_runtime::tls::Dialer::broker_endpoint(&target)
            .map_err(|e| Found::Retry(format!("coordinator {target}: bad address: {e}")))?
            .connect_timeout(s.request_timeout.min(Duration::from_secs(2)))
            .timeout(join_deadline);
        let channel = brokers.dialer().connect_lazy(&endpoint);
        return Ok(Coordinator {
            id: reply.node_id,
            client: crate::grpc::broker(brokers.dialer(), channel),
        });
    }
    Err(Found::Retry(format!(
        "no broker answered FindCoordinator: {}",
        errors.join("; ")
    )))
}

/// Why no coordinator was found.
#[derive(Debug)]
enum Found {
    /// Retry (no broker answered, the coordinator is being created or elected).
    Retry(String),
    /// Refused for good (e.g. INVALID_REQUEST for a group id over 32,767 bytes).
    Refused(ErrorCode, String),
}

impl std::fmt::Display for Found {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Found::Retry(why) => f.write_str(why),
            Found::Refused(code, message) => write!(f, "{code}: {message}"),
        }
    }
}

/// Sends LeaveGroup for a dynamic member (see [`Membership::leave`]) and takes it out of its
/// generation: the next poll joins as a new member.
async fn stop_member(s: &GroupSettings, state: &Mutex<MemberState>, brokers: &Brokers, why: &str) {
    let (member_id, coordinator) = {
        let mut st = state.lock().unwrap_or_else(|e| e.into_inner());
        let member_id = std::mem::take(&mut st.member_id);
        st.generation = -1;
        st.rejoin = true;
        (member_id, st.coordinator.clone())
    };
    if member_id.is_empty() || s.instance_id.is_some() {
        return;
    }
    let coordinator = match coordinator {
        Some(c) => c,
        None => match find_coordinator(s, brokers).await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("group {}: could not leave ({why}): {e}", s.group_id);
                return;
            }
        },
    };
    let mut client = coordinator.client;
    let sent = tokio::time::timeout(
        s.request_timeout,
        client.leave_group(LeaveGroupRequest {
            group_id: s.group_id.clone(),
            members: vec![LeavingMember {
                member_id: member_id.clone(),
                group_instance_id: None,
            }],
        }),
    )
    .await;
    match sent {
        Ok(Ok(_)) => tracing::info!(
            "group {}: member {member_id} left ({why}; coordinator {})",
            s.group_id,
            coordinator.id
        ),
        Ok(Err(st)) => tracing::warn!(
            "group {}: LeaveGroup failed ({why}): {}",
            s.group_id,
            st.message()
        ),
        Err(_) => tracing::warn!("group {}: LeaveGroup unanswered ({why})", s.group_id),
    }
}

/// The heartbeat task (see the module doc). Runs until the membership is dropped.
async fn heartbeat_loop(
    s: Arc<GroupSettings>,
    state: Arc<Mutex<MemberState>>,
    brokers: Arc<Brokers>,
) {
    let max_poll = Duration::from_millis(s.rebalance_timeout_ms.max(0) as u64);
    let mut failures = 0u32;
    loop {
        let pause = if failures == 0 {
            s.heartbeat_interval
        } else {
            s.heartbeat_interval.min(s.backoff.next(failures - 1))
        };
        tokio::time::sleep(pause).await;
        let (member_id, generation, coordinator, last_poll) = {
            let st = state.lock().unwrap_or_else(|e| e.into_inner());
            if st.generation < 0 || st.rejoin {
                failures = 0;
                continue;
            }
            (
                st.member_id.clone(),
                st.generation,
                st.coordinator.clone(),
                st.last_poll,
            )
        };
        if last_poll.elapsed() > max_poll {
            tracing::warn!(
                "group {}: no poll for over max_poll_interval_ms ({} ms): leaving the group so its partitions go to the others; the next poll joins again",
                s.group_id,
                max_poll.as_millis()
            );
            stop_member(&s, &state, &brokers, "poll timeout").await;
            continue;
        }
        let coordinator = match coordinator {
            Some(c) => c,
            None => match find_coordinator(&s, &brokers).await {
                Ok(c) => {
                    let mut st = state.lock().unwrap_or_else(|e| e.into_inner());
                    st.coordinator = Some(c.clone());
                    c
                }
                Err(e) => {
                    tracing::debug!("group {}: heartbeat: {e}", s.group_id);
                    failures = failures.saturating_add(1);
                    continue;
                }
            },
        };
        let mut client = coordinator.client;
        let reply = tokio::time::timeout(
            s.request_timeout,
            client.heartbeat(HeartbeatRequest {
                group_id: s.group_id.clone(),
                generation_id: generation,
                member_id: member_id.clone(),
                group_instance_id: s.instance_id.clone(),
            }),
        )
        .await;
        let code = match reply {
            Ok(Ok(r)) => code_of(r.into_inner().error.as_ref()),
            Ok(Err(_)) | Err(_) => ErrorCode::NotCoordinator,
        };
        let mut st = state.lock().unwrap_or_else(|e| e.into_inner());
        if st.generation != generation {
            // A rejoin happened meanwhile: this reply is about an older generation.
            failures = 0;
            continue;
        }
        match (code, handling(code)) {
            (ErrorCode::None, _) => failures = 0,
            (_, Handling::Rediscover) => {
                st.coordinator = None;
                failures = failures.saturating_add(1);
            }
            (_, Handling::Rejoin(reset)) => {
                tracing::info!(
                    "group {}: heartbeat: {code}: rejoining at the next poll",
                    s.group_id
                );
                st.rejoin = true;
                if reset {
                    st.member_id.clear();
                    st.generation = -1;
                }
                failures = 0;
            }
            (_, Handling::Fatal) => {
                tracing::warn!("group {}: heartbeat: {code}", s.group_id);
                st.rejoin = true;
                failures = 0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_errors_are_handled_as_kafkas_consumer_does() {
        assert_eq!(handling(ErrorCode::NotCoordinator), Handling::Rediscover);
        assert_eq!(
            handling(ErrorCode::CoordinatorLoadInProgress),
            Handling::Rediscover
        );
        assert_eq!(
            handling(ErrorCode::RebalanceInProgress),
            Handling::Rejoin(false)
        );
        assert_eq!(
            handling(ErrorCode::IllegalGeneration),
            Handling::Rejoin(false)
        );
        assert_eq!(handling(ErrorCode::UnknownMemberId), Handling::Rejoin(true));
        assert_eq!(handling(ErrorCode::FencedInstanceId), Handling::Fatal);
        assert_eq!(handling(ErrorCode::InvalidSessionTimeout), Handling::Fatal);
        assert_eq!(handling(ErrorCode::GroupMaxSizeReached), Handling::Fatal);
    }
}
