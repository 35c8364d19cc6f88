//! [`Admin`]: the operator client of the controller API (`proto/controller.proto`).
//!
//! Writes are served by the active controller only; any other controller answers
//! NOT_CONTROLLER with a hint naming the active one. Like Kafka's admin client, `Admin`
//! retries every retriable failure (a controller unreachable or timing out, NOT_CONTROLLER,
//! no active controller during an election) until the operation's budget
//! ([`AdminConfig::api_timeout`], Kafka's `default.api.timeout.ms`) runs out: it follows
//! hints, tries every bootstrap controller, and backs off between rounds; an attempt at a
//! controller that answers nothing, not even a probe, is given up early once another
//! controller names the active one (`scout.rs`: a paused controller). Errors that would
//! repeat are not retried. Kafka-level refusals come back as [`AdminError::Kafka`] carrying
//! the [`ErrorCode`].

mod error;
mod reply;
mod scout;
#[cfg(test)]
mod tests;

use keel_runtime::backoff::pause_within;
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use keel_metadata_log::{MetadataDelta, MetadataImage, Provenance};
use keel_proto::ErrorCode;
use keel_proto::controller::fetch_metadata_item::Item;
use keel_proto::controller::*;
use keel_proto::metadata::ConfigResourceType;
use keel_runtime::tls::Dialer;
use tonic::transport::Channel;

use crate::rpc_error::{self, Api};

pub use error::{AdminError, Result};
pub use reply::{ControllerReply, out_of_contact};

/// Largest reply the admin client accepts (metadata log pages and image streams).
const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

/// How [`Admin`] reaches the controllers.
#[derive(Debug, Clone)]
pub struct AdminConfig {
    /// `host:port` of one or more controllers; any of them will do.
    pub bootstrap_controllers: Vec<String>,
    /// Deadline of one attempt at one controller, connect included (Kafka:
    /// `request.timeout.ms`).
    pub request_timeout: Duration,
    /// Budget of one operation, retries included (Kafka: `default.api.timeout.ms`). While the
    /// failure is retriable (a controller unreachable or timing out, NOT_CONTROLLER, no
    /// active controller during an election) the operation is retried until it runs out.
    pub api_timeout: Duration,
    /// Cap on the attempts of one operation, redirects included; `u32::MAX` (the default)
    /// leaves the bound to `api_timeout`.
    pub max_attempts: u32,
    /// Backoff after a round in which every controller failed; doubled each round up to
    /// `backoff_max`, with ±20% jitter (Kafka: `retry.backoff.ms`, KIP-580).
    pub backoff_initial: Duration,
    /// Longest backoff (Kafka: `retry.backoff.max.ms`).
    pub backoff_max: Duration,
    /// Accept a read (DescribeCluster, DescribeConfigs, ReadMetadataLog, the metadata image)
    /// from any controller. By default these reads are served by the active controller (a
    /// follower's reply naming it sends the read there), so that a read sees every change
    /// acknowledged before it, also to another process: a follower learns of a commit only
    /// with the leader's next append, and a follower that was not part of the commit's
    /// majority may not hold the entry yet. A controller in contact with no active controller
    /// (cut off, or restarted and not yet caught up) may serve state that is out of date, so
    /// by default its read is refused like a NOT_CONTROLLER and the next controller is asked;
    /// with this set it is used, with a warning naming it (`tracing::warn`).
    pub allow_stale: bool,
    /// Opens the channels to the controllers: plaintext (the default) or TLS
    /// (`Dialer::new(Some(context))`).
    pub dialer: Dialer,
}

impl AdminConfig {
    /// Defaults for `addresses`, Kafka's admin client defaults where Keel has the knob:
    /// 10 s per attempt, 60 s per operation, backoff 100 ms .. 1 s.
    pub fn new(addresses: Vec<String>) -> Self {
        AdminConfig {
            bootstrap_controllers: addresses,
            request_timeout: Duration::from_secs(10),
            api_timeout: Duration::from_secs(60),
            max_attempts: u32::MAX,
            backoff_initial: Duration::from_millis(100),
            backoff_max: Duration::from_secs(1),
            allow_stale: false,
            dialer: Dialer::default(),
        }
    }
}

/// The DescribeConfigs request for `targets` and `keys` (empty: every key), as the
/// controllers and (`BrokerService.DescribeConfigs`) the brokers take it.
pub fn describe_configs_request(
    targets: &[ConfigTarget],
    keys: &[String],
) -> DescribeConfigsRequest {
    DescribeConfigsRequest {
        resources: targets
            .iter()
            .map(|t| {
                let (ty, name) = t.wire();
                DescribeConfigsResource {
                    resource_type: ty as i32,
                    resource_name: name,
                    configuration_keys: keys.to_vec(),
                }
            })
            .collect(),
        include_synonyms: false,
        include_documentation: false,
        answering_broker: None,
    }
}

/// A topic to create.
#[derive(Debug, Clone, Default)]
pub struct NewTopic {
    /// Topic name.
    pub name: String,
    /// Number of partitions; `None` = the cluster default.
    pub partitions: Option<i32>,
    /// Replication factor; `None` = the cluster default.
    pub replication_factor: Option<i32>,
    /// Topic config overrides (Kafka names).
    pub configs: Vec<(String, String)>,
    /// Explicit replicas of partitions 0, 1, ... (the preferred leader first); empty =
    /// placed by the controller. With it, `partitions` and `replication_factor` must be
    /// `None` (Kafka: `kafka-topics --create --replica-assignment`).
    pub assignments: Vec<Vec<i32>>,
}

/// The resource a config change applies to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigTarget {
    /// A topic, by name.
    Topic(String),
    /// One broker, by id.
    Broker(i32),
    /// Cluster-wide defaults.
    Cluster,
}

impl ConfigTarget {
    fn wire(&self) -> (ConfigResourceType, String) {
        match self {
            ConfigTarget::Topic(t) => (ConfigResourceType::Topic, t.clone()),
            ConfigTarget::Broker(b) => (ConfigResourceType::Broker, b.to_string()),
            ConfigTarget::Cluster => (ConfigResourceType::Cluster, String::new()),
        }
    }

    /// `topic "t"`, `broker 1`, `cluster`.
    pub fn describe(&self) -> String {
        match self {
            ConfigTarget::Topic(t) => format!("topic {t:?}"),
            ConfigTarget::Broker(b) => format!("broker {b}"),
            ConfigTarget::Cluster => "cluster".to_string(),
        }
    }
}

/// Operator client of the controller quorum. Cheap to share by reference; remembers the
/// active controller between calls.
#[derive(Debug)]
pub struct Admin {
    config: AdminConfig,
    state: Mutex<State>,
    /// Whether the `--allow-stale` warning was given (once per client: `keelctl broker list`
    /// reads twice and printed it twice, found by a fresh-user trial).
    stale_warned: std::sync::atomic::AtomicBool,
}

#[derive(Debug, Default)]
struct State {
    /// Address of the active controller, as last hinted or seen serving.
    active: Option<String>,
    channels: HashMap<String, Channel>,
}

/// What one attempt at one controller came to.
enum Step<T> {
    /// An answer for the caller: a success, or a refusal it reports (TOPIC_ALREADY_EXISTS, ...).
    Done(T),
    /// The controller is not the active one (NOT_CONTROLLER, or a reply naming another
    /// controller as active); `hint` is the active controller's address when it named one.
    NotActive {
        hint: Option<String>,
        detail: String,
        maybe_applied: bool,
    },
    /// A retriable failure: unreachable, timed out, connection lost.
    Retry { detail: String, maybe_applied: bool },
    /// The controller answered nothing, not even a probe, while another one named `leader`
    /// as the active controller ([`scout`]): `leader` is asked next. The request may have
    /// been applied (it was sent).
    Silent { detail: String, leader: String },
    /// The address does not serve the controller API: skipped for the rest of the operation.
    Unusable(String),
    /// A failure that retrying cannot fix.
    Fatal(AdminError),
}

impl<T> Step<T> {
    fn from_status(addr: &str, status: &tonic::Status) -> Step<T> {
        let detail = rpc_error::status_line(addr, Api::Controller, status);
        if status.code() == tonic::Code::Unimplemented {
            Step::Unusable(detail)
        } else if rpc_error::is_tls_failure(&detail) {
            Step::Fatal(AdminError::Tls(detail))
        } else if rpc_error::retriable(status) {
            Step::Retry {
                detail,
                maybe_applied: !rpc_error::never_sent(status),
            }
        } else {
            Step::Fatal(AdminError::Rpc(detail))
        }
    }

    /// [`from_status`](Self::from_status) for a FetchMetadata stream read from offset 0:
    /// OUT_OF_RANGE there means the controller took a snapshot and purged the log while the
    /// stream was between its snapshot and the log after it, so reading again from 0 (the new
    /// snapshot) succeeds. A retry, not an error (seen: 13 of 30 `keelctl topic list` under
    /// write load with a snapshot every 100 entries).
    fn from_fetch_status(addr: &str, status: &tonic::Status) -> Step<T> {
        if status.code() == tonic::Code::OutOfRange {
            return Step::Retry {
                detail: rpc_error::status_line(addr, Api::Controller, status),
                maybe_applied: false,
            };
        }
        Self::from_status(addr, status)
    }
}

/// A successful operation.
struct Answered<T> {
    value: T,
    /// Set when an earlier attempt ended without a definite answer (the connection broke or
    /// timed out after the request was sent, or the leader stepped down before the commit):
    /// that attempt may have been applied.
    uncertain: Option<String>,
}

/// `Err` for a Kafka refusal of a write, with a note when an earlier attempt may have done
/// the change itself (e.g. TOPIC_ALREADY_EXISTS after a retry: Kafka's admin client reports
/// it too, without the note).
fn check_write(
    uncertain: &Option<String>,
    error: Option<&keel_proto::common::Error>,
    context: impl FnOnce() -> String,
) -> Result<()> {
    AdminError::check(error, context).map_err(|e| match (e, uncertain) {
        (
            AdminError::Kafka {
                code,
                message,
                context,
            },
            Some(why),
        ) => AdminError::Kafka {
            code,
            message: format!(
                "{message}{}[an earlier attempt of this request got no definite answer ({why}); it may have been applied]",
                if message.is_empty() { "" } else { " " }
            ),
            context,
        },
        (e, _) => e,
    })
}

/// The last error of each controller tried, in the order they were first tried.
#[derive(Default)]
struct LastErrors(Vec<(String, String)>);

impl LastErrors {
    fn note(&mut self, addr: &str, detail: String) {
        match self.0.iter_mut().find(|(a, _)| a == addr) {
            Some(e) => e.1 = detail,
            None => self.0.push((addr.to_string(), detail)),
        }
    }

    /// Notes `detail` only when `addr` has no error yet: an attempt the API deadline cut
    /// short says less than the answer an earlier attempt got.
    fn note_if_first(&mut self, addr: &str, detail: String) {
        if !self.0.iter().any(|(a, _)| a == addr) {
            self.0.push((addr.to_string(), detail));
        }
    }

    fn text(&self) -> String {
        if self.0.is_empty() {
            return "no attempt was made".into();
        }
        self.0
            .iter()
            .map(|(_, d)| d.as_str())
            .collect::<Vec<_>>()
            .join("; ")
    }
}

impl Admin {
    /// An admin client for `config`. Connects lazily on first use.
    pub fn new(config: AdminConfig) -> Result<Self> {
        if config.bootstrap_controllers.is_empty() {
            return Err(AdminError::InvalidArgument(
                "no bootstrap controller addresses given".into(),
            ));
        }
        if config.max_attempts == 0 {
            return Err(AdminError::InvalidArgument(
                "max_attempts must be at least 1".into(),
            ));
        }
        Ok(Admin {
            config,
            state: Mutex::new(State::default()),
            stale_warned: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// How reads from a controller out of contact with the quorum are taken: refused
    /// (`None`), or with `--allow-stale` used, warning once per client (the flag).
    fn stale_policy(&self) -> Option<&std::sync::atomic::AtomicBool> {
        self.config.allow_stale.then_some(&self.stale_warned)
    }

    /// The active controller's address, once a reply has named it.
    pub fn active_controller(&self) -> Option<String> {
        self.state.lock().unwrap().active.clone()
    }

    fn set_active(&self, addr: Option<String>) {
        self.state.lock().unwrap().active = addr;
    }

    fn forget(&self, addr: &str) {
        let mut s = self.state.lock().unwrap();
        s.channels.remove(addr);
        if s.active.as_deref() == Some(addr) {
            s.active = None;
        }
    }

    /// A client for `addr`, connecting within `budget` when there is no channel yet. The
    /// error is one line naming the address.
    async fn client(
        &self,
        addr: &str,
        budget: Duration,
    ) -> Result<crate::grpc::ControllerClient, String> {
        let cached = self.state.lock().unwrap().channels.get(addr).cloned();
        let channel = match cached {
            Some(c) => c,
            None => {
                let endpoint = Dialer::endpoint(addr)
                    .map_err(|e| format!("{addr}: bad address: {e}"))?
                    .connect_timeout(budget.min(Duration::from_secs(2)));
                // No per-request timeout on the channel: every attempt is bounded by one
                // `tokio::time::timeout(budget)` below, the only timer, so a silent
                // controller is always reported as "no answer within <budget>" (two timers of
                // the same length raced, and the report depended on which fired first).
                let c = match tokio::time::timeout(budget, self.config.dialer.connect(&endpoint))
                    .await
                {
                    Ok(Ok(c)) => c,
                    Ok(Err(e)) => return Err(rpc_error::error_line(addr, &e)),
                    Err(_) => {
                        return Err(format!("{addr}: no connection within {}", secs(budget)));
                    }
                };
                self.state
                    .lock()
                    .unwrap()
                    .channels
                    .insert(addr.to_string(), c.clone());
                c
            }
        };
        Ok(crate::grpc::controller(&self.config.dialer, channel)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES))
    }

    /// Runs `attempt` against one controller after another until one gives an answer, like
    /// Kafka's admin client: the active controller first when known, a hinted controller
    /// right after the hint, else the bootstrap controllers in order. When every controller
    /// of a round failed, it backs off (`backoff_initial` doubling to `backoff_max`) and
    /// starts another round, until `api_timeout` (or `max_attempts`) runs out; the error then
    /// names the last failure of each controller.
    async fn attempt_each<T, F, Fut>(&self, mut attempt: F) -> Result<Answered<T>>
    where
        F: FnMut(String, crate::grpc::ControllerClient) -> Fut,
        Fut: Future<Output = Step<T>>,
    {
        let started = Instant::now();
        let deadline = started + self.config.api_timeout;
        let bootstrap = &self.config.bootstrap_controllers;
        let backoff =
            keel_runtime::Backoff::new(self.config.backoff_initial, self.config.backoff_max);
        let mut attempts: u32 = 0;
        // Rounds in which every controller failed so far: the backoff's exponent.
        let mut failed_rounds: u32 = 0;
        let mut errors = LastErrors::default();
        // Whether any controller answered (NOT_CONTROLLER): then the failure is not
        // "unreachable".
        let mut answered = false;
        let mut unusable: HashSet<String> = HashSet::new();
        // This round: addresses asked, and those that could not be reached.
        let mut tried: HashSet<String> = HashSet::new();
        let mut down: HashSet<String> = HashSet::new();
        // Addresses already asked whether they are a Kafka listener (once per operation).
        let mut probed: HashSet<String> = HashSet::new();
        // A hint to an address already asked this round: where the next round starts.
        let mut next_round: Option<String> = None;
        let mut uncertain: Option<String> = None;
        let mut next = self.active_controller();
        loop {
            let hinted = next
                .take()
                .filter(|a| !unusable.contains(a) && !down.contains(a));
            let addr = match hinted {
                Some(a) if !tried.contains(&a) => Some(a),
                other => {
                    if other.is_some() {
                        next_round = other;
                    }
                    bootstrap
                        .iter()
                        .find(|a| !tried.contains(*a) && !unusable.contains(*a))
                        .cloned()
                }
            };
            let give_up = |errors: &LastErrors, attempts| {
                let elapsed = started.elapsed();
                let errors = errors.text();
                if answered {
                    AdminError::NoActiveController {
                        attempts,
                        elapsed,
                        errors,
                    }
                } else {
                    AdminError::Unreachable {
                        attempts,
                        elapsed,
                        errors,
                    }
                }
            };
            let Some(addr) = addr else {
                // Every controller failed in this round.
                if bootstrap.iter().all(|a| unusable.contains(a)) {
                    return Err(AdminError::NotAController {
                        errors: errors.text(),
                    });
                }
                let now = Instant::now();
                if attempts >= self.config.max_attempts || now >= deadline {
                    return Err(give_up(&errors, attempts));
                }
                if failed_rounds == 0 {
                    // Say so after the first round instead of going quiet for the whole
                    // budget (keelctl prints it on stderr).
                    // With an attempt budget (keelctl cluster status has one), it may end first.
                    let attempts_left = match self.config.max_attempts {
                        u32::MAX => String::new(),
                        max => format!(" and {} more attempts", max.saturating_sub(attempts)),
                    };
                    tracing::warn!(
                        "{}: {}; retrying for up to {:.1} s (api timeout){attempts_left}",
                        if answered {
                            "no active controller yet"
                        } else {
                            "no controller answers"
                        },
                        errors.text(),
                        (deadline - now).as_secs_f64()
                    );
                }
                // The last round may be short: the budget is used up, not rounded down.
                let remaining = deadline.saturating_duration_since(now);
                let Some(pause) = pause_within(backoff.next(failed_rounds), remaining) else {
                    return Err(give_up(&errors, attempts));
                };
                failed_rounds = failed_rounds.saturating_add(1);
                tokio::time::sleep(pause).await;
                tried.clear();
                down.clear();
                next = next_round.take().or_else(|| self.active_controller());
                continue;
            };
            let now = Instant::now();
            if attempts >= self.config.max_attempts || now >= deadline {
                return Err(give_up(&errors, attempts));
            }
            attempts += 1;
            tried.insert(addr.clone());
            let budget = self.config.request_timeout.min(deadline - now);
            let mut cut_short_timeout = false;
            let asked = Instant::now();
            let work = async {
                match self.client(&addr, budget).await {
                    Err(detail) if rpc_error::is_tls_failure(&detail) => {
                        Step::Fatal(AdminError::Tls(detail))
                    }
                    Err(detail) => Step::Retry {
                        detail,
                        maybe_applied: false,
                    },
                    Ok(client) => {
                        match tokio::time::timeout(budget, attempt(addr.clone(), client)).await {
                            Ok(step) => step,
                            Err(_) => {
                                cut_short_timeout = budget < self.config.request_timeout;
                                Step::Retry {
                                    detail: format!("{addr}: no answer within {}", secs(budget)),
                                    maybe_applied: true,
                                }
                            }
                        }
                    }
                }
            };
            // A paused controller accepts connections and requests and answers nothing: the
            // scout gives the attempt up once another controller names a different active
            // one (scout.rs).
            let seen = std::sync::Mutex::new(Vec::new());
            let step = tokio::select! {
                step = work => step,
                (by, leader) = self.scout(
                    &addr,
                    scout::interval(self.config.request_timeout),
                    &seen,
                ) => {
                    Step::Silent {
                        detail: scout::silent_detail(&addr, asked.elapsed(), &by, &leader),
                        leader,
                    }
                }
            };
            // A timeout while the others answer their probes without naming an active
            // controller: no quorum, which the error should say (not "cannot reach").
            let step = match step {
                Step::Retry {
                    detail,
                    maybe_applied,
                } => match scout::no_leader_note(&seen.lock().unwrap()) {
                    Some(note) => {
                        answered = true;
                        Step::Retry {
                            detail: format!("{detail}; {note}"),
                            maybe_applied,
                        }
                    }
                    None => Step::Retry {
                        detail,
                        maybe_applied,
                    },
                },
                other => other,
            };
            let step = self.unless_kafka_listener(&addr, step, &mut probed).await;
            match step {
                Step::Done(value) => return Ok(Answered { value, uncertain }),
                Step::NotActive {
                    hint,
                    detail,
                    maybe_applied,
                } => {
                    answered = true;
                    if maybe_applied {
                        uncertain = Some(detail.clone());
                    }
                    errors.note(&addr, detail);
                    let hint = hint.filter(|h| *h != addr);
                    self.set_active(hint.clone());
                    next = hint;
                }
                Step::Retry {
                    detail,
                    maybe_applied,
                } => {
                    self.forget(&addr);
                    down.insert(addr.clone());
                    if maybe_applied {
                        uncertain = Some(detail.clone());
                    }
                    if cut_short_timeout {
                        errors.note_if_first(&addr, detail);
                    } else {
                        errors.note(&addr, detail);
                    }
                }
                Step::Silent { detail, leader } => {
                    tracing::warn!("{detail}: asking {leader}");
                    answered = true;
                    self.forget(&addr);
                    down.insert(addr.clone());
                    uncertain = Some(detail.clone());
                    errors.note(&addr, detail);
                    self.set_active(Some(leader.clone()));
                    // Named active just now by a probe: asked at once even when it was asked
                    // earlier in this round (then it was not active yet). Each such step
                    // waited on a silent controller for a probe interval at least.
                    tried.remove(&leader);
                    down.remove(&leader);
                    next = Some(leader);
                }
                Step::Unusable(detail) => {
                    self.forget(&addr);
                    unusable.insert(addr.clone());
                    errors.note(&addr, detail);
                }
                Step::Fatal(e) => return Err(e),
            }
        }
    }

    /// `step`, or [`Step::Unusable`] when it is a dropped plaintext connection and `addr`
    /// turns out to be a Kafka listener ([`crate::kafka_probe`]): a broker's Kafka port given
    /// as a controller resets every gRPC connection, and retrying it for the whole API
    /// timeout would end in "connection reset by peer" instead of naming the mistake. Probes
    /// each address at most once per operation (`probed`).
    async fn unless_kafka_listener<T>(
        &self,
        addr: &str,
        step: Step<T>,
        probed: &mut HashSet<String>,
    ) -> Step<T> {
        let Step::Retry { detail, .. } = &step else {
            return step;
        };
        if self.config.dialer.is_tls()
            || !rpc_error::connection_dropped(detail)
            || !probed.insert(addr.to_string())
            || !crate::kafka_probe::speaks_kafka(addr).await
        {
            return step;
        }
        Step::Unusable(rpc_error::kafka_listener_line(addr, Api::Controller))
    }

    /// Runs `rpc` against the active controller (or any controller for reads when
    /// `need_active` is false) through [`Admin::attempt_each`], following NOT_CONTROLLER
    /// hints.
    async fn call<R, F, Fut>(&self, need_active: bool, mut rpc: F) -> Result<Answered<R>>
    where
        R: ControllerReply,
        F: FnMut(crate::grpc::ControllerClient) -> Fut,
        Fut: Future<Output = std::result::Result<tonic::Response<R>, tonic::Status>>,
    {
        let answered = self
            .attempt_each(|addr, client| {
                let reply = rpc(client);
                async move {
                    match reply.await {
                        Err(status) => Step::from_status(&addr, &status),
                        Ok(reply) => {
                            classify(reply.into_inner(), addr, need_active, self.stale_policy())
                        }
                    }
                }
            })
            .await?;
        if let Some(h) = hint_address(&answered.value) {
            self.set_active(Some(h));
        }
        Ok(answered)
    }

    /// Creates one topic; returns the controller's result (id, effective partitions,
    /// replication factor and configs).
    pub async fn create_topic(&self, topic: NewTopic) -> Result<CreatableTopicResult> {
        let req = CreateTopicsRequest {
            topics: vec![CreatableTopic {
                name: topic.name.clone(),
                num_partitions: topic.partitions.unwrap_or(-1),
                replication_factor: topic.replication_factor.unwrap_or(-1),
                assignments: topic
                    .assignments
                    .iter()
                    .enumerate()
                    .map(|(p, brokers)| CreatableReplicaAssignment {
                        partition_index: p as i32,
                        broker_ids: brokers.clone(),
                    })
                    .collect(),
                configs: topic
                    .configs
                    .iter()
                    .map(|(k, v)| ConfigEntry {
                        name: k.clone(),
                        value: Some(v.clone()),
                    })
                    .collect(),
            }],
            validate_only: false,
        };
        let Answered {
            value: reply,
            uncertain,
        } = self
            .call(true, |mut c| {
                let req = req.clone();
                async move { c.create_topics(req).await }
            })
            .await?;
        let ctx = || format!("create topic {:?}", topic.name);
        check_write(&uncertain, reply.error.as_ref(), ctx)?;
        let result = reply
            .topics
            .into_iter()
            .find(|t| t.name == topic.name)
            .ok_or_else(|| AdminError::Protocol(format!("{}: no result for the topic", ctx())))?;
        check_write(&uncertain, result.error.as_ref(), ctx)?;
        Ok(result)
    }

    /// Grows topic `name` to `count` partitions (Kafka `Admin.createPartitions`, KIP-195).
    /// `assignments` gives the replicas of each new partition in order (empty: placed by the
    /// controller); `validate_only` checks without adding. Errors: the controller's per-topic
    /// code (INVALID_PARTITIONS when `count` is not above the current count,
    /// UNKNOWN_TOPIC_OR_PARTITION, INVALID_REPLICA_ASSIGNMENT, ...).
    pub async fn create_partitions(
        &self,
        name: &str,
        count: i32,
        assignments: &[Vec<i32>],
        validate_only: bool,
    ) -> Result<CreatePartitionsTopicResult> {
        let req = CreatePartitionsRequest {
            topics: vec![CreatePartitionsTopic {
                name: name.to_string(),
                count,
                assignments: assignments
                    .iter()
                    .map(|b| CreatePartitionsAssignment {
                        broker_ids: b.clone(),
                    })
                    .collect(),
            }],
            validate_only,
        };
        let Answered {
            value: reply,
            uncertain,
        } = self
            .call(true, |mut c| {
                let req = req.clone();
                async move { c.create_partitions(req).await }
            })
            .await?;
        let ctx = || format!("add partitions to topic {name:?}");
        check_write(&uncertain, reply.error.as_ref(), ctx)?;
        let result = reply
            .results
            .into_iter()
            .next()
            .ok_or_else(|| AdminError::Protocol(format!("{}: no result", ctx())))?;
        check_write(&uncertain, result.error.as_ref(), ctx)?;
        Ok(result)
    }

    /// Deletes one topic by name.
    pub async fn delete_topic(&self, name: &str) -> Result<DeletableTopicResult> {
        let req = DeleteTopicsRequest {
            topics: vec![DeleteTopicState {
                name: name.to_string(),
                topic_id: Default::default(),
            }],
        };
        let Answered {
            value: reply,
            uncertain,
        } = self
            .call(true, |mut c| {
                let req = req.clone();
                async move { c.delete_topics(req).await }
            })
            .await?;
        let ctx = || format!("delete topic {name:?}");
        check_write(&uncertain, reply.error.as_ref(), ctx)?;
        let result = reply
            .topics
            .into_iter()
            .next()
            .ok_or_else(|| AdminError::Protocol(format!("{}: no result", ctx())))?;
        check_write(&uncertain, result.error.as_ref(), ctx)?;
        Ok(result)
    }

    /// Sets and deletes config keys of one resource (IncrementalAlterConfigs semantics).
    pub async fn alter_configs(
        &self,
        target: &ConfigTarget,
        set: &[(String, String)],
        delete: &[String],
        validate_only: bool,
    ) -> Result<()> {
        let (resource_type, resource_name) = target.wire();
        let configs = set
            .iter()
            .map(|(k, v)| AlterableConfig {
                name: k.clone(),
                op: AlterConfigOp::Set as i32,
                value: Some(v.clone()),
            })
            .chain(delete.iter().map(|k| AlterableConfig {
                name: k.clone(),
                op: AlterConfigOp::Delete as i32,
                value: None,
            }))
            .collect();
        let req = AlterConfigsRequest {
            resources: vec![AlterConfigsResource {
                resource_type: resource_type as i32,
                resource_name,
                configs,
                replace_unlisted: false,
            }],
            validate_only,
        };
        let Answered {
            value: reply,
            uncertain,
        } = self
            .call(true, |mut c| {
                let req = req.clone();
                async move { c.alter_configs(req).await }
            })
            .await?;
        let ctx = || format!("alter configs of {}", target.describe());
        check_write(&uncertain, reply.error.as_ref(), ctx)?;
        for r in &reply.results {
            check_write(&uncertain, r.error.as_ref(), ctx)?;
        }
        Ok(())
    }

    /// Effective configs of resources (all keys when `keys` is empty), from the active
    /// controller (any controller with `allow_stale`: see [`AdminConfig::allow_stale`]).
    /// Fails on the first resource the controller refused (e.g. an unknown topic).
    pub async fn describe_configs(
        &self,
        targets: &[ConfigTarget],
        keys: &[String],
    ) -> Result<Vec<DescribeConfigsResult>> {
        let req = describe_configs_request(targets, keys);
        let reply = self
            .call(!self.config.allow_stale, |mut c| {
                let req = req.clone();
                async move { c.describe_configs(req).await }
            })
            .await?
            .value;
        AdminError::check(reply.error.as_ref(), || "describe configs".into())?;
        for (r, t) in reply.results.iter().zip(targets) {
            AdminError::check(r.error.as_ref(), || {
                format!("describe configs of {}", t.describe())
            })?;
        }
        Ok(reply.results)
    }

    /// Operator ISR change of one partition (AlterPartition with broker id -1). With
    /// `expected_partition_epoch` the change is a compare-and-set on the partition epoch
    /// (INVALID_UPDATE_VERSION when it differs).
    pub async fn alter_isr(
        &self,
        topic: &str,
        partition: i32,
        isr: &[i32],
        expected_partition_epoch: Option<i32>,
    ) -> Result<AlterPartitionPartitionResult> {
        let req = AlterPartitionRequest {
            broker_id: -1,
            broker_epoch: -1,
            topics: vec![AlterPartitionTopic {
                topic_id: Default::default(),
                topic_name: topic.to_string(),
                partitions: vec![AlterPartitionPartition {
                    partition_index: partition,
                    leader_epoch: -1,
                    new_isr_with_epochs: isr
                        .iter()
                        .map(|b| BrokerState {
                            broker_id: *b,
                            broker_epoch: -1,
                        })
                        .collect(),
                    leader_recovery_state: 0,
                    partition_epoch: -1,
                    expected_partition_epoch,
                }],
            }],
        };
        let Answered {
            value: reply,
            uncertain,
        } = self
            .call(true, |mut c| {
                let req = req.clone();
                async move { c.alter_partition(req).await }
            })
            .await?;
        let ctx = || format!("alter ISR of {topic}-{partition}");
        check_write(&uncertain, reply.error.as_ref(), ctx)?;
        let result = reply
            .topics
            .into_iter()
            .flat_map(|t| t.partitions)
            .find(|p| p.partition_index == partition)
            .ok_or_else(|| AdminError::Protocol(format!("{}: no result", ctx())))?;
        match ErrorCode::from_proto(result.error.as_ref()) {
            // The change committed but also moved leadership: still a success for operators.
            Ok(ErrorCode::NewLeaderElected) => Ok(result),
            _ => {
                check_write(&uncertain, result.error.as_ref(), ctx)?;
                Ok(result)
            }
        }
    }

    /// Leader election for `topic`'s partitions (all of them when `partitions` is empty), or,
    /// with `topic` None, for every partition of every topic (Kafka's
    /// `kafka-leader-election --all-topic-partitions`; the controller then leaves out the
    /// partitions that need no election, as Kafka's does). Returns `(topic, result)` per
    /// partition; per-partition errors (ELECTION_NOT_NEEDED, ...) are left in the results
    /// for the caller to show.
    pub async fn elect_leaders(
        &self,
        election_type: ElectionType,
        topic: Option<&str>,
        partitions: &[i32],
    ) -> Result<Vec<(String, ElectPartitionResult)>> {
        let req = ElectLeadersRequest {
            election_type: election_type as i32,
            all_partitions: topic.is_none(),
            topic_partitions: topic
                .map(|t| ElectTopicPartitions {
                    topic: t.to_string(),
                    partitions: partitions.to_vec(),
                })
                .into_iter()
                .collect(),
        };
        let Answered {
            value: reply,
            uncertain,
        } = self
            .call(true, |mut c| {
                let req = req.clone();
                async move { c.elect_leaders(req).await }
            })
            .await?;
        check_write(&uncertain, reply.error.as_ref(), || match topic {
            Some(t) => format!("elect leaders of {t:?}"),
            None => "elect leaders of every partition".into(),
        })?;
        Ok(reply
            .results
            .into_iter()
            .filter(|r| topic.is_none_or(|t| r.topic == t))
            .flat_map(|r| {
                let name = r.topic;
                r.partitions.into_iter().map(move |p| (name.clone(), p))
            })
            .collect())
    }

    /// Adds ACLs (CreateAcls). Returns one result per binding, in order: `None` when added (or
    /// already present), or the controller's refusal of that binding (INVALID_REQUEST).
    /// Errors: the whole request refused (SECURITY_DISABLED without an authorizer,
    /// CLUSTER_AUTHORIZATION_FAILED without ALTER on the cluster, ...).
    pub async fn create_acls(
        &self,
        bindings: Vec<AclBinding>,
    ) -> Result<Vec<Option<keel_proto::common::Error>>> {
        let req = CreateAclsRequest {
            creations: bindings,
        };
        let Answered {
            value: reply,
            uncertain,
        } = self
            .call(true, |mut c| {
                let req = req.clone();
                async move { c.create_acls(req).await }
            })
            .await?;
        check_write(&uncertain, reply.error.as_ref(), || "create ACLs".into())?;
        Ok(reply.results.into_iter().map(|r| r.error).collect())
    }

    /// The ACLs matching `filter` (DescribeAcls; `None` = all), sorted.
    /// Starts, changes or cancels reassignments (AlterPartitionReassignments, KIP-455):
    /// `moves` are `(topic, partition, target)` with `None` = cancel. Returns per partition
    /// its result (`None` = accepted), in request order.
    ///
    /// Errors: the whole request refused (not authorized, beyond the bounds), or no active
    /// controller answered.
    pub async fn alter_partition_reassignments(
        &self,
        moves: &[(String, i32, Option<Vec<i32>>)],
    ) -> Result<Vec<(String, i32, Option<keel_proto::common::Error>)>> {
        let mut topics: Vec<ReassignableTopic> = Vec::new();
        for (topic, p, target) in moves {
            let part = ReassignablePartition {
                partition_index: *p,
                replicas: target
                    .as_ref()
                    .map(|ids| keel_proto::metadata::ReplicaList { ids: ids.clone() }),
            };
            match topics.iter_mut().find(|t| &t.name == topic) {
                Some(t) => t.partitions.push(part),
                None => topics.push(ReassignableTopic {
                    name: topic.clone(),
                    partitions: vec![part],
                }),
            }
        }
        let req = AlterPartitionReassignmentsRequest { topics };
        let Answered {
            value: reply,
            uncertain,
        } = self
            .call(true, |mut c| {
                let req = req.clone();
                async move { c.alter_partition_reassignments(req).await }
            })
            .await?;
        check_write(&uncertain, reply.error.as_ref(), || {
            "alter partition reassignments".into()
        })?;
        Ok(reply
            .responses
            .into_iter()
            .flat_map(|t| {
                let name = t.name;
                t.partitions
                    .into_iter()
                    .map(move |p| (name.clone(), p.partition_index, p.error))
            })
            .collect())
    }

    /// The reassignments in progress (ListPartitionReassignments, KIP-455), of `topics` (all
    /// when empty), from the active controller.
    ///
    /// Errors: refused (not authorized), or no controller answered.
    pub async fn list_partition_reassignments(
        &self,
        topics: &[String],
    ) -> Result<Vec<OngoingTopicReassignment>> {
        let req = ListPartitionReassignmentsRequest {
            topics: topics
                .iter()
                .map(|t| ListPartitionReassignmentsTopics {
                    name: t.clone(),
                    partition_indexes: Vec::new(),
                })
                .collect(),
        };
        let reply = self
            .call(true, |mut c| {
                let req = req.clone();
                async move { c.list_partition_reassignments(req).await }
            })
            .await?
            .value;
        AdminError::check(reply.error.as_ref(), || {
            "list partition reassignments".into()
        })?;
        Ok(reply.topics)
    }

    pub async fn describe_acls(&self, filter: Option<AclBinding>) -> Result<Vec<AclBinding>> {
        let req = DescribeAclsRequest { filter };
        let reply = self
            .call(true, |mut c| {
                let req = req.clone();
                async move { c.describe_acls(req).await }
            })
            .await?
            .value;
        AdminError::check(reply.error.as_ref(), || "describe ACLs".into())?;
        Ok(reply.acls)
    }

    /// Removes the ACLs matching each filter (DeleteAcls); returns per filter the ACLs it
    /// removed. Errors: the whole request refused, or a filter refused (INVALID_REQUEST).
    pub async fn delete_acls(&self, filters: Vec<AclBinding>) -> Result<Vec<Vec<AclBinding>>> {
        let req = DeleteAclsRequest { filters };
        let Answered {
            value: reply,
            uncertain,
        } = self
            .call(true, |mut c| {
                let req = req.clone();
                async move { c.delete_acls(req).await }
            })
            .await?;
        check_write(&uncertain, reply.error.as_ref(), || "delete ACLs".into())?;
        let mut out = Vec::with_capacity(reply.results.len());
        for r in reply.results {
            check_write(&uncertain, r.error.as_ref(), || "delete ACLs".into())?;
            out.push(r.matching_acls);
        }
        Ok(out)
    }

    /// Sets and deletes SASL/SCRAM credentials (AlterUserScramCredentials, KIP-554). Returns
    /// one result per user named, in order of first appearance: `None` when all its changes
    /// were written, or the controller's refusal of that user (then none of its changes
    /// were). Errors: the whole request refused (CLUSTER_AUTHORIZATION_FAILED, bounds, ...).
    pub async fn alter_user_scram_credentials(
        &self,
        deletions: Vec<ScramCredentialDeletion>,
        upsertions: Vec<ScramCredentialUpsertion>,
    ) -> Result<Vec<(String, Option<keel_proto::common::Error>)>> {
        let req = AlterUserScramCredentialsRequest {
            deletions,
            upsertions,
        };
        let Answered {
            value: reply,
            uncertain,
        } = self
            .call(true, |mut c| {
                let req = req.clone();
                async move { c.alter_user_scram_credentials(req).await }
            })
            .await?;
        check_write(&uncertain, reply.error.as_ref(), || {
            "alter SCRAM credentials".into()
        })?;
        Ok(reply
            .results
            .into_iter()
            .map(|r| (r.user, r.error))
            .collect())
    }

    /// Authenticates `user` with SASL/SCRAM over gRPC (#23, the controller's
    /// ScramAuthenticate): the two-step exchange of RFC 5802 (the password never leaves this
    /// process; the server's final signature is checked, so a controller that does not hold
    /// the credential cannot pose as one). Returns the session token and its expiry (ms since
    /// the Unix epoch); [`keel_runtime::tls::Dialer::with_bearer`] makes every client of a
    /// dialer send it. Errors: SASL_AUTHENTICATION_FAILED (unknown user or wrong password),
    /// UNSUPPORTED_SASL_MECHANISM, unreachable controllers.
    pub async fn scram_authenticate(
        &self,
        mechanism: keel_metadata_log::scram::Mechanism,
        user: &str,
        password: &str,
    ) -> Result<(String, i64)> {
        use keel_metadata_log::scram::ClientExchange;
        let context = || format!("SASL/SCRAM authentication of user {user:?} ({mechanism})");
        let mut nonce = [0u8; 18];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut nonce)
            .map_err(|_| AdminError::Rpc("no randomness for a SCRAM nonce".into()))?;
        let nonce: String = nonce.iter().map(|b| format!("{b:02x}")).collect();
        let (mut exchange, first) = ClientExchange::start(mechanism, user, password, &nonce);
        let step1 = ScramAuthenticateRequest {
            mechanism: mechanism.to_proto() as i32,
            client_first: first.into(),
            ..Default::default()
        };
        let r1 = self
            .call(false, |mut c| {
                let req = step1.clone();
                async move { c.scram_authenticate(req).await }
            })
            .await?
            .value;
        AdminError::check(r1.error.as_ref(), context)?;
        let protocol = |e: keel_metadata_log::scram::ScramError| AdminError::Kafka {
            code: ErrorCode::SaslAuthenticationFailed,
            message: e.to_string(),
            context: context(),
        };
        let last = exchange.server_first(&r1.server_first).map_err(protocol)?;
        let step2 = ScramAuthenticateRequest {
            server_nonce: r1.server_nonce,
            exchange_mac: r1.exchange_mac,
            client_final: last.into(),
            ..step1
        };
        let r2 = self
            .call(false, |mut c| {
                let req = step2.clone();
                async move { c.scram_authenticate(req).await }
            })
            .await?
            .value;
        AdminError::check(r2.error.as_ref(), context)?;
        exchange.server_final(&r2.server_final).map_err(protocol)?;
        Ok((r2.token, r2.token_expires_ms))
    }

    /// Users' SASL/SCRAM mechanisms and iterations (DescribeUserScramCredentials; `users`
    /// empty = every user with a credential). Per user: its credentials or its error
    /// (RESOURCE_NOT_FOUND without one).
    pub async fn describe_user_scram_credentials(
        &self,
        users: Vec<String>,
    ) -> Result<Vec<DescribeUserScramCredentialsResult>> {
        let req = DescribeUserScramCredentialsRequest { users };
        let reply = self
            .call(true, |mut c| {
                let req = req.clone();
                async move { c.describe_user_scram_credentials(req).await }
            })
            .await?
            .value;
        AdminError::check(reply.error.as_ref(), || "describe SCRAM credentials".into())?;
        Ok(reply.results)
    }

    /// Brokers and their state, from the active controller (heartbeat-derived fields such as
    /// the metadata lag are known only there).
    pub async fn describe_cluster(&self) -> Result<DescribeClusterReply> {
        let reply = self
            .call(true, |mut c| async move {
                c.describe_cluster(DescribeClusterRequest {
                    include_fenced_brokers: true,
                    ..Default::default()
                })
                .await
            })
            .await?
            .value;
        AdminError::check(reply.error.as_ref(), || "describe cluster".into())?;
        Ok(reply)
    }

    /// Adds controller `voter_id` with metadata log directory `directory_id` (Kafka's base64
    /// form or a UUID) at `endpoint` (`host:port`) to the voters (AddRaftVoter, KIP-853). The
    /// active controller waits up to `timeout` (1..=600 s) for the node to catch up as an
    /// observer before it commits the new voter set; `AdminConfig::request_timeout` must be
    /// longer, or an attempt is cut short and retried (a retry of an add that went through is
    /// DUPLICATE_VOTER, and the error says the earlier attempt may have been applied).
    ///
    /// Errors: DUPLICATE_VOTER, INVALID_REQUEST, REQUEST_TIMED_OUT (the node did not catch
    /// up), CLUSTER_AUTHORIZATION_FAILED, or no active controller within the budget.
    pub async fn add_raft_voter(
        &self,
        voter_id: i32,
        directory_id: &str,
        endpoint: &str,
        timeout: Duration,
    ) -> Result<()> {
        let req = AddRaftVoterRequest {
            voter_id,
            voter_directory_id: directory_id.to_string(),
            endpoint: endpoint.to_string(),
            timeout_ms: i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX),
        };
        let Answered {
            value: reply,
            uncertain,
        } = self
            .call(true, |mut c| {
                let req = req.clone();
                async move { c.add_raft_voter(req).await }
            })
            .await?;
        check_write(&uncertain, reply.error.as_ref(), || {
            format!("add controller {voter_id}")
        })
    }

    /// Removes controller `voter_id` whose directory id is `directory_id` (as `describe_quorum`
    /// shows it; empty when the quorum records none) from the voters (RemoveRaftVoter,
    /// KIP-853).
    ///
    /// Errors: VOTER_NOT_FOUND, INVALID_REQUEST (the last voter, or the quorum would stop),
    /// CLUSTER_AUTHORIZATION_FAILED, or no active controller within the budget.
    pub async fn remove_raft_voter(&self, voter_id: i32, directory_id: &str) -> Result<()> {
        let req = RemoveRaftVoterRequest {
            voter_id,
            voter_directory_id: directory_id.to_string(),
        };
        let Answered {
            value: reply,
            uncertain,
        } = self
            .call(true, |mut c| {
                let req = req.clone();
                async move { c.remove_raft_voter(req).await }
            })
            .await?;
        check_write(&uncertain, reply.error.as_ref(), || {
            format!("remove controller {voter_id}")
        })
    }

    /// Removes broker `broker_id`'s registration (UnregisterBroker, KIP-631): it leaves every
    /// ISR and leadership first. A broker process still running registers again.
    ///
    /// Errors: BROKER_ID_NOT_REGISTERED (102), not authorized, no active controller.
    pub async fn unregister_broker(&self, broker_id: i32) -> Result<()> {
        let req = UnregisterBrokerRequest { broker_id };
        let Answered {
            value: reply,
            uncertain,
        } = self
            .call(true, |mut c| async move { c.unregister_broker(req).await })
            .await?;
        check_write(&uncertain, reply.error.as_ref(), || {
            format!("unregister broker {broker_id}")
        })
    }

    /// Raft quorum state and replication progress, from the active controller.
    pub async fn describe_quorum(&self) -> Result<DescribeQuorumReply> {
        let reply = self
            .call(true, |mut c| async move {
                c.describe_quorum(DescribeQuorumRequest {}).await
            })
            .await?
            .value;
        AdminError::check(reply.error.as_ref(), || "describe quorum".into())?;
        Ok(reply)
    }

    /// One page of decoded committed records, from the active controller: a follower learns
    /// of a commit only with the leader's next append or heartbeat, so a change that another
    /// process (`keelctl partition alter-isr`) just had acknowledged could be missing from
    /// its log (seen under load). With `allow_stale`, any controller may answer.
    pub async fn read_metadata_log(
        &self,
        req: ReadMetadataLogRequest,
    ) -> Result<ReadMetadataLogReply> {
        let reply = self
            .call(!self.config.allow_stale, |mut c| {
                let req = req.clone();
                async move { c.read_metadata_log(req).await }
            })
            .await?
            .value;
        AdminError::check(reply.error.as_ref(), || "read metadata log".into())?;
        Ok(reply)
    }

    /// The newest metadata snapshot of a controller, as `(last included offset, records)`, or
    /// `None` when the log was never compacted (it still starts at its first entry).
    pub async fn latest_snapshot(
        &self,
    ) -> Result<Option<(i64, Vec<keel_proto::metadata::MetadataRecord>)>> {
        let answered = self
            .attempt_each(|addr, mut client| async move {
                match read_latest_snapshot(&mut client).await {
                    Ok(snapshot) => Step::Done(snapshot),
                    Err(status) => Step::from_fetch_status(&addr, &status),
                }
            })
            .await?;
        Ok(answered.value)
    }

    /// The current metadata image: the newest snapshot plus every committed batch up to the
    /// serving controller's commit index, replayed locally (like a broker's metadata tailer).
    /// Served by the active controller, so that the image holds every change acknowledged
    /// before the call (a `keelctl topic create` just before a `topic describe` in another
    /// process: a follower that was not in the commit's majority answered without the topic,
    /// seen in CI); any controller with `allow_stale` ([`AdminConfig::allow_stale`]).
    pub async fn metadata_image(&self) -> Result<MetadataImage> {
        let need_active = !self.config.allow_stale;
        let answered = self
            .attempt_each(|addr, mut client| async move {
                match fetch_image(&mut client, &addr, need_active).await {
                    Ok((image, stale)) => match stale_read(stale, &addr, self.stale_policy()) {
                        Some(step) => step,
                        None => Step::Done(image),
                    },
                    Err(FetchError::NotActive(active)) => Step::NotActive {
                        detail: format!("{addr}: not the active controller (it names {active})"),
                        hint: Some(active),
                        maybe_applied: false,
                    },
                    Err(FetchError::Status(status)) => Step::from_fetch_status(&addr, &status),
                    Err(FetchError::Ended(detail)) => Step::Retry {
                        detail,
                        maybe_applied: false,
                    },
                    Err(FetchError::Fatal(e)) => Step::Fatal(e),
                }
            })
            .await?;
        Ok(answered.value)
    }
}

/// What one attempt with a controller reply makes: NOT_CONTROLLER (or, for a request only
/// the active controller serves, a reply naming another controller as active) sends the
/// request on; anything else is the caller's answer.
fn classify<R: ControllerReply>(
    reply: R,
    addr: String,
    need_active: bool,
    allow_stale: Option<&std::sync::atomic::AtomicBool>,
) -> Step<R> {
    let hint = hint_address(&reply);
    if ErrorCode::from_proto(reply.error()) == Ok(ErrorCode::NotController) {
        let message = reply
            .error()
            .map(|e| e.message.as_str())
            .filter(|m| !m.is_empty())
            .map(|m| format!(": {m}"))
            .unwrap_or_default();
        // A controller naming itself was the leader when asked and lost leadership before
        // the commit: a new leader may still commit the request.
        let maybe_applied = hint.as_deref() == Some(addr.as_str());
        return Step::NotActive {
            hint,
            detail: format!(
                "{addr}: {} ({}){message}",
                ErrorCode::NotController,
                ErrorCode::NotController.code()
            ),
            maybe_applied,
        };
    }
    if need_active && let Some(h) = hint.as_deref().filter(|h| **h != *addr) {
        return Step::NotActive {
            detail: format!("{addr}: not the active controller (it names {h})"),
            hint: Some(h.to_string()),
            maybe_applied: false,
        };
    }
    if reply.error().is_none()
        && reply.refuse_when_stale()
        && let Some(step) = stale_read(
            out_of_contact(reply.source(), reply.leader()),
            &addr,
            allow_stale,
        )
    {
        return step;
    }
    Step::Done(reply)
}

/// For a read answered by `addr`: when the controller knows no active controller (`stale`,
/// from [`out_of_contact`]: cut off from the quorum, restarted and not caught up, or an
/// election), the step that sends the read on to another controller, unless `allow_stale`
/// is given (then the read is used, with a warning the first time the flag is still false).
/// `None` for a fresh read.
fn stale_read<T>(
    stale: bool,
    addr: &str,
    allow_stale: Option<&std::sync::atomic::AtomicBool>,
) -> Option<Step<T>> {
    if !stale {
        return None;
    }
    if let Some(warned) = allow_stale {
        if warned.swap(true, std::sync::atomic::Ordering::Relaxed) {
            return None;
        }
        tracing::warn!(
            "reading from {addr}, which is in contact with no active controller: its state may \
             be out of date (--allow-stale)"
        );
        return None;
    }
    Some(Step::NotActive {
        hint: None,
        detail: format!(
            "{addr}: in contact with no active controller, so its state may be out of date \
             (--allow-stale reads it anyway)"
        ),
        maybe_applied: false,
    })
}

/// The active controller's address, when the reply names one.
fn hint_address<R: ControllerReply>(reply: &R) -> Option<String> {
    reply
        .leader()
        .filter(|h| h.leader_id >= 0 && !h.leader_address.is_empty())
        .map(|h| h.leader_address.clone())
}

/// `1.5 s`, `250 ms`.
fn secs(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{} ms", d.as_millis())
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

/// Reads the metadata stream from offset 0 up to the end of its snapshot, if it starts with
/// one.
async fn read_latest_snapshot(
    client: &mut crate::grpc::ControllerClient,
) -> std::result::Result<Option<(i64, Vec<keel_proto::metadata::MetadataRecord>)>, tonic::Status> {
    let mut stream = client
        .fetch_metadata(FetchMetadataRequest {
            from_offset: 0,
            broker_id: None,
            max_bytes_per_item: 0,
        })
        .await?
        .into_inner();
    let mut snapshot: Option<(i64, Vec<_>)> = None;
    while let Some(item) = stream.message().await? {
        match item.item {
            Some(Item::SnapshotHeader(h)) => {
                snapshot = Some((h.last_included_offset, Vec::new()));
            }
            Some(Item::SnapshotChunk(c)) => {
                if let Some((_, records)) = snapshot.as_mut() {
                    records.extend(c.records);
                }
                if c.last {
                    return Ok(snapshot);
                }
            }
            // Batches before any snapshot header: there is no snapshot.
            Some(Item::Batch(_)) => return Ok(None),
            None => {}
        }
    }
    Ok(None)
}

enum FetchError {
    /// The RPC or the stream failed.
    Status(tonic::Status),
    /// The stream ended before the image was complete.
    Ended(String),
    /// The records do not replay.
    Fatal(AdminError),
    /// The stream's first item names another controller, at this address, as the active one
    /// (only when the active controller was asked for).
    NotActive(String),
}

/// Reads the whole image from the stream of `addr`; returns it with whether the controller
/// was out of contact with the quorum when it sent the stream's last item
/// ([`out_of_contact`]). With `need_active`, a stream whose first item names another
/// controller as the active one is dropped: [`FetchError::NotActive`].
async fn fetch_image(
    client: &mut crate::grpc::ControllerClient,
    addr: &str,
    need_active: bool,
) -> std::result::Result<(MetadataImage, bool), FetchError> {
    let replay_failed =
        |e: keel_metadata_log::ReplayError| FetchError::Fatal(AdminError::Protocol(e.to_string()));
    let mut stream = client
        .fetch_metadata(FetchMetadataRequest {
            from_offset: 0,
            broker_id: None,
            max_bytes_per_item: 0,
        })
        .await
        .map_err(FetchError::Status)?
        .into_inner();
    let mut delta = MetadataDelta::new(MetadataImage::empty());
    // The commit index when the stream started: the image is complete once it is applied.
    let mut target: Option<i64> = None;
    let mut applied: i64 = 0;
    // Offset of a snapshot whose chunks are still arriving.
    let mut snapshot_at: Option<i64> = None;
    let mut stale = false;
    loop {
        if let Some(t) = target
            && snapshot_at.is_none()
            && applied >= t
        {
            return Ok((delta.apply(), stale));
        }
        let Some(item) = stream.message().await.map_err(FetchError::Status)? else {
            return Err(FetchError::Ended(format!(
                "{addr}: metadata stream ended at offset {applied}"
            )));
        };
        if target.is_none()
            && need_active
            && let Some(active) = item
                .leader
                .as_ref()
                .filter(|l| l.leader_id >= 0 && !l.leader_address.is_empty())
                .map(|l| &l.leader_address)
                .filter(|a| **a != *addr)
        {
            return Err(FetchError::NotActive(active.clone()));
        }
        target.get_or_insert(item.commit_index);
        stale = out_of_contact(item.source.as_ref(), item.leader.as_ref());
        match item.item {
            Some(Item::SnapshotHeader(h)) => {
                delta = MetadataDelta::new(MetadataImage::empty());
                delta.set_provenance(Provenance {
                    offset: h.last_included_offset.max(0) as u64,
                    term: h.last_included_term.max(0) as u64,
                });
                snapshot_at = Some(h.last_included_offset);
            }
            Some(Item::SnapshotChunk(c)) => {
                for r in &c.records {
                    delta.replay(r).map_err(replay_failed)?;
                }
                if c.last
                    && let Some(at) = snapshot_at.take()
                {
                    applied = at;
                }
            }
            Some(Item::Batch(b)) => {
                delta.set_provenance(Provenance {
                    offset: b.offset.max(0) as u64,
                    term: b.term.max(0) as u64,
                });
                if let Some(batch) = &b.batch {
                    for r in &batch.records {
                        delta.replay(r).map_err(replay_failed)?;
                    }
                }
                applied = b.offset;
            }
            None => {}
        }
    }
}
