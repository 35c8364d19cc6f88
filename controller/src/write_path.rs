//! The active controller's write path: ONE task that decides, batches, proposes and answers
//! (DESIGN §4; Kafka: `QuorumController`'s event queue).
//!
//! Every write RPC becomes an [`Operation`]: a closure run on this task against the *working
//! image* (the latest committed image plus every record this task proposed that is not yet
//! applied). It returns a [`Proposal`]: the records to write and a completion that sends the
//! reply. The task concatenates the records of all operations waiting in the queue into one
//! Raft entry (group commit), proposes it with `client_write_ff` (so entries enter the Raft log
//! in the order they were decided) and keeps up to [`MAX_INFLIGHT_BATCHES`] entries in flight.
//! A completion runs only after its entry is committed and applied:
//! - committed -> `Ok(Committed { offset })` (offset = Raft index = metadata offset);
//! - leadership lost, entry rejected, or Raft stopped -> `Err(NOT_CONTROLLER)` (or
//!   `UNKNOWN_SERVER_ERROR` for a rejected batch); never a silent success.
//!
//! An operation that writes nothing (a refusal, or a no-change heartbeat) is answered once
//! every entry proposed before it has committed, so no reply reflects uncommitted state.
//!
//! On a node that is not the active controller, operations are not run: they complete with
//! `NOT_CONTROLLER` at once. When this node becomes leader it first waits until its state
//! machine has applied everything committed by earlier terms (a quorum-confirmed read index,
//! `get_read_log_id`, then a wait bounded by leadership), then
//! calls [`ControllerState::on_become_leader`] (fresh broker session grace, DESIGN §4). An
//! attempt that fails (leadership not confirmed, or lost while applying) is retried every
//! [`LEADERSHIP_RETRY`] while Raft keeps this node leader.
//!
//! Bounds: the request queue holds [`QUEUE_CAPACITY`] operations (senders wait when full);
//! one entry takes at most [`MAX_OPS_PER_BATCH`] operations, [`MAX_RECORDS_PER_ENTRY`]
//! records and [`MAX_PROPOSED_ENTRY_BYTES`] bytes. An atomic operation above
//! [`MAX_RECORDS_PER_OPERATION`] records or `MAX_PROPOSED_ENTRY_BYTES` bytes, or any operation
//! with a record above [`MAX_PROPOSED_RECORD_BYTES`], is refused with POLICY_VIOLATION before
//! anything is proposed, so every committed record fits every later stage (Raft log,
//! snapshots, brokers; [`keel_metadata_log::limits`]).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use keel_metadata_log::limits::{
    MAX_PROPOSED_ENTRY_BYTES, MAX_PROPOSED_RECORD_BYTES, record_entry_bytes,
};
use keel_metadata_log::raft_types::{ApplyOutcome, MetadataRecords, TypeConfig};
use keel_metadata_log::records::{MetadataRecord, NoOpRecord, metadata_record::Record};
use keel_metadata_log::{MetadataImage, Provenance};
use keel_proto::ErrorCode;
use openraft::Raft;
use openraft::raft::ClientWriteResponse;
use tokio::sync::{mpsc, oneshot, watch};

use crate::logic::result::{ControllerResult, MAX_RECORDS_PER_OPERATION, operation_bytes};

/// Operations waiting to be decided (bounded; senders wait).
pub const QUEUE_CAPACITY: usize = 4096;
/// Operations decided into one Raft entry at most.
pub const MAX_OPS_PER_BATCH: usize = 1024;
/// Records one Raft entry carries at most: operations beyond it go into the next entry.
pub const MAX_RECORDS_PER_ENTRY: usize = MAX_RECORDS_PER_OPERATION;
/// Records per entry when the records of one non-atomic result are cut into several entries
/// (session expiry, non-atomic operations). Each entry must reach a follower, be fsynced and
/// be answered within one Raft heartbeat interval (100 ms), and an entry is never split: a
/// broker failure at 100,000 partitions fenced in entries of 10,000 records (~300 KB each)
/// that followers on a busy 2-core machine kept missing that deadline with, retried whole,
/// for seconds. At 2,000 records (~60 KB) the AppendEntries byte budget
/// ([`crate::append_budget`]) can shrink a request to what the follower manages.
pub const MAX_RECORDS_PER_PIECE: usize = 2_000;
/// How often a node that Raft made leader, with a confirmed quorum, tries again to become the
/// active controller after a failed attempt (its leadership could not be confirmed, e.g. a
/// follower busy installing a snapshot missed the confirming heartbeat round). Without the
/// retry nothing changed in Raft's leadership or the quorum flag to trigger another attempt,
/// and the node refused every write with NOT_CONTROLLER while Raft kept it leader.
pub const LEADERSHIP_RETRY: Duration = Duration::from_millis(100);
/// Raft entries proposed and not yet applied, at most. Small on purpose: while entries are in
/// flight new operations accumulate into the next, larger entry (group commit). Measured with
/// `cargo bench -p keel-controller --bench quorum` at 64 clients on 2 cores: 16 in flight gave
/// ~5,500 records/s (many tiny entries), 2 gave ~10,000-12,600, 1 gave ~10,900.
pub const MAX_INFLIGHT_BATCHES: usize = 2;

/// What a committed proposal reports to its completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Committed {
    /// Metadata offset (Raft index) of the entry holding the records; for operations that
    /// wrote nothing, the offset of the last entry they waited for (0 if none).
    pub offset: u64,
}

/// The records an operation wants written and how to answer once they are committed.
pub struct Proposal {
    /// Records to append; empty = nothing to write.
    pub records: Vec<MetadataRecord>,
    /// Whether the records must go into one entry (see [`ControllerResult::atomic`]).
    pub atomic: bool,
    /// Called exactly once with the outcome.
    pub complete: Box<dyn FnOnce(Result<Committed, ErrorCode>) + Send>,
}

impl std::fmt::Debug for Proposal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proposal")
            .field("records", &self.records.len())
            .finish_non_exhaustive()
    }
}

impl Proposal {
    /// A proposal that writes nothing and answers with `reply` (after earlier entries commit).
    pub fn reply_only(
        complete: impl FnOnce(Result<Committed, ErrorCode>) + Send + 'static,
    ) -> Self {
        Self {
            records: Vec::new(),
            atomic: true,
            complete: Box::new(complete),
        }
    }
}

/// Mutable state owned by the write task besides the image (broker sessions, ...), injected
/// so the task stays generic. Runs only on the write task.
pub trait ControllerState: Send + 'static {
    /// This node just became the active controller and `image` is current. Returns records
    /// to propose before any operation is decided (bootstrap records).
    fn on_become_leader(&mut self, image: &MetadataImage, now_ms: u64) -> Vec<MetadataRecord>;
    /// Periodic work of the active controller (session expiry, ...): records to write.
    fn tick(&mut self, image: &MetadataImage, now_ms: u64) -> Vec<MetadataRecord>;
}

/// What an operation sees when it runs.
pub struct WriteContext<'a, S> {
    /// The working image (committed + proposed-but-unapplied records).
    pub image: &'a MetadataImage,
    /// Monotonic time, ms ([`monotonic_ms`](keel_runtime::clock::monotonic_ms)).
    pub now_ms: u64,
    /// The controller's in-memory state.
    pub state: &'a mut S,
    /// Hooks run on the write task with the committed offset once this operation's records
    /// are committed (dropped if they are not), e.g. to remember at which offset a broker's
    /// controlled shutdown was written.
    pub after_commit: &'a mut Vec<StateHook<S>>,
}

impl<S: std::fmt::Debug> std::fmt::Debug for WriteContext<'_, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteContext")
            .field("offset", &self.image.provenance().offset)
            .field("now_ms", &self.now_ms)
            .field("state", &self.state)
            .field("after_commit", &self.after_commit.len())
            .finish()
    }
}

/// A state update to run once a proposal is committed, with its offset.
pub type StateHook<S> = Box<dyn FnOnce(&mut S, u64) + Send>;

/// An operation: runs once on the write task. See the module doc.
pub type Operation<S> = Box<dyn for<'a> FnOnce(WriteContext<'a, S>) -> Proposal + Send>;

/// Handle to submit operations. Cheap to clone.
#[derive(Debug)]
pub struct WriteHandle<S> {
    tx: mpsc::Sender<Operation<S>>,
    membership_tx: mpsc::Sender<MembershipChange>,
}

impl<S> Clone for WriteHandle<S> {
    fn clone(&self) -> Self {
        Self {
            tx: self.tx.clone(),
            membership_tx: self.membership_tx.clone(),
        }
    }
}

/// Longest a membership change may take on the write task (its entries must commit).
pub const MEMBERSHIP_CHANGE_TIMEOUT: Duration = Duration::from_secs(30);

/// The outcome of a membership change: openraft's answer, or `None` when it did not commit
/// within [`MEMBERSHIP_CHANGE_TIMEOUT`], this node is no longer a leader that is a voter, or
/// the write task is gone.
pub type MembershipResult = Option<
    Result<
        ClientWriteResponse<TypeConfig>,
        openraft::error::RaftError<
            u64,
            openraft::error::ClientWriteError<u64, keel_metadata_log::raft_types::ControllerNode>,
        >,
    >,
>;

/// A change of the Raft membership (KIP-853), run by the write task between its own entries:
/// the task is the only proposer, so the offsets it derives for its records (broker epochs)
/// stay right.
struct MembershipChange {
    changes: openraft::ChangeMembers<u64, keel_metadata_log::raft_types::ControllerNode>,
    reply: oneshot::Sender<MembershipResult>,
}

impl<S: ControllerState> WriteHandle<S> {
    /// Changes the Raft membership on the write task (openraft `change_membership` with
    /// `retain = false`), after every entry it has in flight, and waits for the outcome.
    /// Operations submitted meanwhile wait in the queue.
    pub async fn change_membership(
        &self,
        changes: openraft::ChangeMembers<u64, keel_metadata_log::raft_types::ControllerNode>,
    ) -> MembershipResult {
        let (reply, rx) = oneshot::channel();
        self.membership_tx
            .send(MembershipChange { changes, reply })
            .await
            .ok()?;
        rx.await.ok().flatten()
    }

    /// Submits `op` and waits for its answer. If the write task is gone (shutting down), the
    /// answer is `Err(NOT_CONTROLLER)`.
    pub async fn submit<T: Send + 'static>(
        &self,
        op: impl for<'a> FnOnce(WriteContext<'a, S>) -> ControllerResult<T> + Send + 'static,
    ) -> Result<(T, Committed), ErrorCode> {
        let (tx, rx) = oneshot::channel();
        let enqueued = Instant::now();
        let op: Operation<S> = Box::new(move |ctx| {
            let started = Instant::now();
            metrics::histogram!(crate::metrics::EVENT_QUEUE_TIME)
                .record(started.duration_since(enqueued));
            let ControllerResult {
                records,
                response: value,
                atomic,
            } = op(ctx);
            metrics::histogram!(crate::metrics::EVENT_QUEUE_PROCESSING_TIME)
                .record(started.elapsed());
            Proposal {
                records,
                atomic,
                complete: Box::new(move |res| {
                    let _ = tx.send(res.map(|c| (value, c)));
                }),
            }
        });
        self.tx
            .send(op)
            .await
            .map_err(|_| ErrorCode::NotController)?;
        rx.await.unwrap_or(Err(ErrorCode::NotController))
    }
}

type Completion = Box<dyn FnOnce(Result<Committed, ErrorCode>) + Send>;
type WriteResult = Result<
    ClientWriteResponse<TypeConfig>,
    openraft::error::ClientWriteError<u64, keel_metadata_log::raft_types::ControllerNode>,
>;

struct InFlight<S> {
    rx: oneshot::Receiver<WriteResult>,
    /// The Raft index this entry is expected to get.
    expected_offset: u64,
    completions: Vec<Completion>,
    hooks: Vec<StateHook<S>>,
    /// Unclean leader elections among the entry's records (counted once committed).
    unclean_elections: u64,
    /// When the entry was handed to Raft (its append), for [`crate::metrics::COMMIT_LATENCY`].
    proposed_at: Instant,
}

/// Settings of the write task.
#[derive(Debug, Clone)]
pub struct WritePathConfig {
    /// This node's id.
    pub node_id: u64,
    /// Interval of NoOpRecords while active, ms (Kafka `metadata.max.idle.interval.ms`).
    pub noop_interval_ms: u64,
    /// Interval of `ControllerState::tick` while active, ms.
    pub tick_interval_ms: u64,
}

/// Starts the write task; returns the handle used by the RPC layer. The task ends when every
/// handle is dropped or Raft shuts down.
pub fn spawn<S: ControllerState>(
    raft: Raft<TypeConfig>,
    images: watch::Receiver<MetadataImage>,
    quorum_confirmed: watch::Receiver<bool>,
    state: S,
    config: WritePathConfig,
) -> (WriteHandle<S>, tokio::task::JoinHandle<()>) {
    let (tx, rx) = mpsc::channel(QUEUE_CAPACITY);
    // Membership changes are rare and serialized by the controller service.
    let (membership_tx, membership_rx) = mpsc::channel(4);
    let task = WriteTask {
        membership_rx,
        raft,
        images,
        quorum_confirmed,
        state,
        config,
        rx,
        leader: false,
        confirm_failed: false,
        working: MetadataImage::empty(),
        working_offset: 0,
        inflight: VecDeque::new(),
        last_proposed_offset: 0,
    };
    (WriteHandle { tx, membership_tx }, tokio::spawn(task.run()))
}

struct WriteTask<S> {
    raft: Raft<TypeConfig>,
    images: watch::Receiver<MetadataImage>,
    /// Check-quorum result (see `node::spawn_check_quorum`): leading needs it true.
    quorum_confirmed: watch::Receiver<bool>,
    state: S,
    config: WritePathConfig,
    rx: mpsc::Receiver<Operation<S>>,
    /// Membership changes to run between entries.
    membership_rx: mpsc::Receiver<MembershipChange>,
    /// True while this node is the active controller and its working image is current.
    leader: bool,
    /// The last attempt to become the active controller could not confirm leadership (logged
    /// once per run of failures).
    confirm_failed: bool,
    /// Committed image + records of `inflight` (valid only while `leader`).
    working: MetadataImage,
    /// Raft index of the last entry this task proposed (or of the committed image after a
    /// resync). The next proposal gets `working_offset + 1`: one entry per proposal, so the
    /// working image derives the same broker epochs (RegisterBrokerRecord offsets) as the
    /// state machine will. Checked against the committed index in `finish`.
    working_offset: u64,
    /// Proposed entries, oldest first (commits complete in order).
    inflight: VecDeque<InFlight<S>>,
    /// Offset of the last committed entry this task saw.
    last_proposed_offset: u64,
}

impl<S: ControllerState> WriteTask<S> {
    fn now_ms(&self) -> u64 {
        keel_runtime::clock::monotonic_ms()
    }

    async fn run(mut self) {
        // Leadership only: `server_metrics` changes with the vote, state, leader or membership,
        // not with every append and apply as `metrics` does (a wake-up of this task per
        // entry on a busy controller).
        let mut metrics = self.raft.server_metrics();
        let mut noop = tokio::time::interval(Duration::from_millis(self.config.noop_interval_ms));
        let mut tick = tokio::time::interval(Duration::from_millis(self.config.tick_interval_ms));
        let mut retry = tokio::time::interval(LEADERSHIP_RETRY);
        noop.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        retry.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let can_take = self.inflight.len() < MAX_INFLIGHT_BATCHES;
            tokio::select! {
                changed = metrics.changed() => {
                    if changed.is_err() {
                        break; // Raft stopped.
                    }
                    self.on_leadership_signal(&mut metrics).await;
                }
                changed = self.quorum_confirmed.changed() => {
                    if changed.is_err() {
                        break;
                    }
                    self.on_leadership_signal(&mut metrics).await;
                }
                _ = retry.tick(), if !self.leader => {
                    // Cheap when Raft does not make this node leader; otherwise another
                    // attempt after a failed one (see LEADERSHIP_RETRY).
                    self.on_leadership_signal(&mut metrics).await;
                }
                res = Self::front(&mut self.inflight), if !self.inflight.is_empty() => {
                    self.complete_front(res).await;
                }
                change = self.membership_rx.recv() => {
                    let Some(change) = change else { break };
                    self.change_membership(change).await;
                }
                op = self.rx.recv(), if can_take => {
                    let Some(op) = op else { break };
                    let mut ops = vec![op];
                    while ops.len() < MAX_OPS_PER_BATCH {
                        match self.rx.try_recv() {
                            Ok(op) => ops.push(op),
                            Err(_) => break,
                        }
                    }
                    self.decide_and_propose(ops).await;
                }
                _ = noop.tick(), if can_take && self.leader => {
                    let rec = MetadataRecord { record: Some(Record::NoOp(NoOpRecord {})) };
                    self.propose_internal(vec![rec]).await;
                }
                _ = tick.tick(), if can_take && self.leader => {
                    // select! picks among ready branches at random: after a long pause the
                    // check-quorum step-down may be pending here. No session check then (it
                    // logged "while it stays active, the sessions are extended" in the same
                    // millisecond as "no longer acting as the active controller").
                    if !*self.quorum_confirmed.borrow() {
                        continue;
                    }
                    let now = self.now_ms();
                    let records = self.state.tick(&self.working, now);
                    if !records.is_empty() {
                        self.propose_internal(records).await;
                    }
                }
            }
        }
        // Answer whatever is left.
        for f in self.inflight.drain(..) {
            for c in f.completions {
                c(Err(ErrorCode::NotController));
            }
        }
    }

    /// Answers the oldest entry in flight with its outcome `res`; resynchronizes when it
    /// landed at another index than expected.
    async fn complete_front(&mut self, res: Option<WriteResult>) {
        let done = self.inflight.pop_front().expect("front exists");
        let expected = done.expected_offset;
        let unclean_elections = done.unclean_elections;
        let committed = self.finish(res, done.completions, done.hooks);
        if committed.is_some() {
            metrics::histogram!(crate::metrics::COMMIT_LATENCY)
                .record(done.proposed_at.elapsed().as_secs_f64());
        }
        if committed.is_some() && unclean_elections > 0 {
            metrics::counter!(crate::metrics::UNCLEAN_LEADER_ELECTIONS)
                .increment(unclean_elections);
        }
        if let Some(actual) = committed
            && actual != expected
        {
            // Some other entry took an index (should not happen: only this task proposes,
            // membership changes included): the working image's derived epochs are off.
            // Start over from the committed state.
            tracing::error!(
                expected,
                actual,
                "entry landed at an unexpected index: resynchronizing"
            );
            self.step_down_locally();
            self.become_leader().await;
        }
    }

    /// Runs one membership change after every entry in flight, then rebases the working
    /// image on the applied one (the change's entries took log indexes).
    async fn change_membership(&mut self, change: MembershipChange) {
        // Bounded by leadership: entries of a leader cut off from its quorum never commit, and
        // waiting for them here kept this task from seeing the lost quorum, so every request
        // hung instead of getting NOT_CONTROLLER (a leader isolated while it recorded its
        // voters' directory ids).
        while !self.inflight.is_empty() {
            let front = tokio::select! {
                res = Self::front(&mut self.inflight) => Some(res),
                // Err: the check-quorum task ended (shutting down); lost as well.
                _ = self.quorum_confirmed.wait_for(|confirmed| !*confirmed) => None,
            };
            let lost = match front {
                Some(res) => {
                    self.complete_front(res).await;
                    false
                }
                None => true,
            };
            if lost {
                tracing::info!(
                    node_id = self.config.node_id,
                    "lost the quorum before a membership change: no longer the active controller"
                );
                self.step_down_locally();
                // The caller gets `None` (not committed).
                drop(change);
                return;
            }
        }
        // Only a leader that is still a voter (see ControllerGrpc::require_active); checked
        // again here, after the entries in flight, as late as this task can.
        let voter = {
            let m = self.raft.metrics();
            let m = m.borrow();
            m.state.is_leader()
                && m.membership_config
                    .membership()
                    .voter_ids()
                    .any(|v| v == self.config.node_id)
        };
        if !voter {
            // The caller gets `None` (not committed).
            drop(change);
            return;
        }
        let result = tokio::time::timeout(
            MEMBERSHIP_CHANGE_TIMEOUT,
            self.raft.change_membership(change.changes, false),
        )
        .await
        .ok();
        let _ = change.reply.send(result);
        if self.leader {
            // As in become_leader: wait until the log (the change's entries) is applied,
            // bounded by leadership.
            let target = self.raft.metrics().borrow().last_log_index.unwrap_or(0);
            while self.images.borrow().provenance().offset < target {
                let m = self.raft.metrics().borrow().clone();
                if m.current_leader != Some(self.config.node_id) || !*self.quorum_confirmed.borrow()
                {
                    self.step_down_locally();
                    return;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            self.working = self.images.borrow().clone();
            self.working_offset = self.working.provenance().offset;
        }
    }

    /// Re-evaluates leadership: Raft leader with a confirmed quorum.
    async fn on_leadership_signal(
        &mut self,
        metrics: &mut watch::Receiver<
            openraft::metrics::RaftServerMetrics<
                u64,
                keel_metadata_log::raft_types::ControllerNode,
            >,
        >,
    ) {
        let is_leader = {
            let m = metrics.borrow_and_update();
            m.current_leader == Some(self.config.node_id) && m.state.is_leader()
        } && *self.quorum_confirmed.borrow_and_update();
        if is_leader && !self.leader {
            self.become_leader().await;
        } else if !is_leader && self.leader {
            tracing::info!(
                node_id = self.config.node_id,
                "no longer the active controller"
            );
            self.step_down_locally();
        }
    }

    /// Stops deciding as leader and fails every in-flight entry's callers with
    /// NOT_CONTROLLER: their outcome is unknown (a new leader may still commit them), so
    /// they must retry, never see success.
    fn step_down_locally(&mut self) {
        self.leader = false;
        for f in self.inflight.drain(..) {
            for c in f.completions {
                c(Err(ErrorCode::NotController));
            }
        }
    }

    async fn front(inflight: &mut VecDeque<InFlight<S>>) -> Option<WriteResult> {
        let f = inflight.front_mut().expect("guarded by !is_empty");
        (&mut f.rx).await.ok()
    }

    async fn become_leader(&mut self) {
        // Confirm the leadership with a quorum (one heartbeat round, bounded by openraft's
        // per-request deadline). openraft's `ensure_linearizable` would then wait for the
        // read index to apply with no bound, which never happens on a leader cut off right
        // after its election; the wait below is bounded by leadership instead.
        let read_index = match self.raft.get_read_log_id().await {
            Ok((read_log_id, _applied)) => read_log_id.map_or(0, |l| l.index),
            Err(e) => {
                // Retried every LEADERSHIP_RETRY while Raft keeps this node leader: log once.
                if !self.confirm_failed {
                    tracing::warn!(error = %e, "could not confirm leadership; retrying");
                } else {
                    tracing::debug!(error = %e, "could not confirm leadership");
                }
                self.confirm_failed = true;
                return;
            }
        };
        self.confirm_failed = false;
        // And every entry already in this leader's log: requests are validated against the
        // applied image, so deciding before those entries are applied could commit a record
        // that contradicts one of them (a duplicate TopicRecord was seen in a break-it run).
        // They commit with this term's first entry; bounded by leadership: give up when
        // this node stops being the leader with a confirmed quorum.
        let target = self
            .raft
            .metrics()
            .borrow()
            .last_log_index
            .unwrap_or(0)
            .max(read_index);
        while self.images.borrow().provenance().offset < target {
            let m = self.raft.metrics().borrow().clone();
            if m.current_leader != Some(self.config.node_id) || !*self.quorum_confirmed.borrow() {
                tracing::info!(
                    node_id = self.config.node_id,
                    "lost leadership while applying the log"
                );
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        self.working = self.images.borrow().clone();
        self.working_offset = self.working.provenance().offset;
        self.leader = true;
        let now = self.now_ms();
        let records = self.state.on_become_leader(&self.working, now);
        if !records.is_empty() {
            self.propose_internal(records).await;
        }
        tracing::info!(
            node_id = self.config.node_id,
            offset = self.working_offset,
            "became active controller"
        );
    }

    /// Answers the completions of one finished entry; returns the committed index on success.
    fn finish(
        &mut self,
        res: Option<WriteResult>,
        completions: Vec<Completion>,
        hooks: Vec<StateHook<S>>,
    ) -> Option<u64> {
        let outcome = match res {
            Some(Ok(resp)) => match resp.data {
                ApplyOutcome {
                    rejected: None,
                    offset,
                } => {
                    self.last_proposed_offset = offset;
                    for hook in hooks {
                        hook(&mut self.state, offset);
                    }
                    Ok(Committed { offset })
                }
                ApplyOutcome {
                    rejected: Some(why),
                    offset,
                } => {
                    tracing::error!(offset, reason = %why, "state machine rejected our batch");
                    self.resync();
                    Err(ErrorCode::UnknownServerError)
                }
            },
            Some(Err(e)) => {
                tracing::info!(error = %e, "proposal failed");
                self.resync();
                Err(ErrorCode::NotController)
            }
            None => {
                self.resync();
                Err(ErrorCode::NotController)
            }
        };
        for c in completions {
            c(outcome);
        }
        outcome.ok().map(|c| c.offset)
    }

    /// After a failed proposal the working image may hold records that will never apply:
    /// start again from the committed image (later in-flight entries fail the same way).
    fn resync(&mut self) {
        self.working = self.images.borrow().clone();
        self.working_offset = self.working.provenance().offset;
    }

    async fn decide_and_propose(&mut self, ops: Vec<Operation<S>>) {
        if !self.leader {
            for op in ops {
                // Not run: a follower decides nothing.
                drop(op);
            }
            return;
        }
        let now = self.now_ms();
        let mut records = Vec::new();
        // Encoded bytes of `records`, at most MAX_PROPOSED_ENTRY_BYTES.
        let mut entry_bytes = 0usize;
        let mut completions: Vec<Completion> = Vec::with_capacity(ops.len());
        let mut hooks: Vec<StateHook<S>> = Vec::new();
        for op in ops {
            let hooks_before = hooks.len();
            let p = op(WriteContext {
                image: &self.working,
                now_ms: now,
                state: &mut self.state,
                after_commit: &mut hooks,
            });
            if p.records.is_empty() {
                completions.push(p.complete);
                continue;
            }
            let op_bytes = match operation_bytes(&p.records) {
                Ok(bytes) => bytes,
                Err(record_bytes) => {
                    // Defence in depth: request bounds keep every field far below this.
                    tracing::warn!(
                        record_bytes,
                        limit = MAX_PROPOSED_RECORD_BYTES,
                        "refusing an operation with a record above the size limit"
                    );
                    hooks.truncate(hooks_before);
                    (p.complete)(Err(ErrorCode::PolicyViolation));
                    continue;
                }
            };
            let too_big =
                p.records.len() > MAX_RECORDS_PER_OPERATION || op_bytes > MAX_PROPOSED_ENTRY_BYTES;
            if too_big && !p.atomic {
                // Its own entries, after the ones of the operations before it.
                let full = std::mem::take(&mut records);
                let done = std::mem::take(&mut completions);
                let done_hooks: Vec<StateHook<S>> = hooks.drain(..hooks_before).collect();
                self.propose(full, done, done_hooks).await;
                let own_hooks = std::mem::take(&mut hooks);
                self.propose_in_pieces(p.records, p.complete, own_hooks)
                    .await;
                continue;
            }
            if too_big {
                tracing::warn!(
                    records = p.records.len(),
                    bytes = op_bytes,
                    "refusing an operation above the record or byte limit"
                );
                hooks.truncate(hooks_before);
                (p.complete)(Err(ErrorCode::PolicyViolation));
                continue;
            }
            if records.len() + p.records.len() > MAX_RECORDS_PER_ENTRY
                || entry_bytes + op_bytes > MAX_PROPOSED_ENTRY_BYTES
            {
                // Close this entry; the operation starts the next one (same working image,
                // whose next index is then one further).
                let full = std::mem::take(&mut records);
                let done = std::mem::take(&mut completions);
                let done_hooks: Vec<StateHook<S>> = hooks.drain(..hooks_before).collect();
                self.propose(full, done, done_hooks).await;
                entry_bytes = 0;
            }
            // Every operation of this batch lands in the same entry, at the next index.
            let at = Provenance {
                offset: self.working_offset + 1,
                term: 0,
            };
            match self.working.with_records(at, &p.records) {
                Ok(next) => {
                    log_changes(&self.working, &next, &p.records);
                    self.working = next;
                    entry_bytes += op_bytes;
                    records.extend(p.records);
                    completions.push(p.complete);
                }
                Err((i, e)) => {
                    // The operation produced records that do not replay: a logic bug. Refuse
                    // it alone; the batch goes on without it.
                    tracing::error!(record = i, error = %e, "operation produced invalid records");
                    hooks.truncate(hooks_before);
                    (p.complete)(Err(ErrorCode::UnknownServerError));
                }
            }
        }
        self.propose(records, completions, hooks).await;
    }

    /// Proposes the records of one non-atomic operation as entries of at most
    /// [`MAX_RECORDS_PER_PIECE`] records, each replayed on the working image at its own
    /// offset; `complete` and `hooks` go with the last entry. Earlier entries stay when a later
    /// one fails (a non-atomic result: every prefix is a valid state).
    async fn propose_in_pieces(
        &mut self,
        records: Vec<MetadataRecord>,
        complete: Completion,
        hooks: Vec<StateHook<S>>,
    ) {
        let mut pieces = chunks(records, MAX_RECORDS_PER_PIECE);
        let last = pieces.pop();
        for piece in pieces {
            if !self.replay_on_working(&piece) {
                complete(Err(ErrorCode::UnknownServerError));
                return;
            }
            self.propose(piece, Vec::new(), Vec::new()).await;
        }
        match last {
            Some(piece) if self.replay_on_working(&piece) => {
                self.propose(piece, vec![complete], hooks).await;
            }
            Some(_) => complete(Err(ErrorCode::UnknownServerError)),
            None => self.propose(Vec::new(), vec![complete], hooks).await,
        }
    }

    /// Replays `records` on the working image at the next offset and logs the changes;
    /// false (logged as a bug) when they do not replay.
    fn replay_on_working(&mut self, records: &[MetadataRecord]) -> bool {
        let at = Provenance {
            offset: self.working_offset + 1,
            term: 0,
        };
        match self.working.with_records(at, records) {
            Ok(next) => {
                log_changes(&self.working, &next, records);
                self.working = next;
                true
            }
            Err((i, e)) => {
                tracing::error!(record = i, error = %e, "records do not replay");
                false
            }
        }
    }

    /// Proposes the controller's own records (bootstrap, session expiry). They are not atomic
    /// (Kafka's non-atomic `ControllerResult`): beyond [`MAX_RECORDS_PER_PIECE`] they go into
    /// several entries, each replayed on the working image at its own offset. Fencing a
    /// broker that leads 66,000 partitions used to be one entry of 66,000 records, which the
    /// followers could not take within the RPC timeout.
    async fn propose_internal(&mut self, records: Vec<MetadataRecord>) {
        for chunk in chunks(records, MAX_RECORDS_PER_PIECE) {
            if !self.replay_on_working(&chunk) {
                return;
            }
            self.propose(chunk, Vec::new(), Vec::new()).await;
        }
    }

    async fn propose(
        &mut self,
        records: Vec<MetadataRecord>,
        mut completions: Vec<Completion>,
        hooks: Vec<StateHook<S>>,
    ) {
        if records.is_empty() {
            // Nothing to write (so no hooks): answer after the entries already in flight.
            debug_assert!(hooks.is_empty(), "state hooks without records");
            match self.inflight.back_mut() {
                Some(last) => last.completions.append(&mut completions),
                None => {
                    let offset = self.last_proposed_offset;
                    for c in completions {
                        c(Ok(Committed { offset }));
                    }
                }
            }
            return;
        }
        let unclean_elections = count_unclean_elections(&records);
        let batch = MetadataRecords {
            records,
            append_timestamp_ms: keel_runtime::clock::wall_clock_ms(),
        };
        let proposed_at = Instant::now();
        match self.raft.client_write_ff(batch).await {
            Ok(rx) => {
                self.working_offset += 1;
                let expected_offset = self.working_offset;
                self.inflight.push_back(InFlight {
                    rx,
                    expected_offset,
                    hooks,
                    completions,
                    unclean_elections,
                    proposed_at,
                });
            }
            Err(fatal) => {
                tracing::error!(error = %fatal, "raft stopped");
                self.leader = false;
                for c in completions {
                    c(Err(ErrorCode::NotController));
                }
            }
        }
    }
}

/// Unclean leader elections in `records`: partition changes that set a leader and mark it
/// RECOVERING (the election rule writes that state only for a leader from outside the ISR).
fn count_unclean_elections(records: &[MetadataRecord]) -> u64 {
    let recovering = keel_proto::metadata::LeaderRecoveryState::Recovering as i32;
    records
        .iter()
        .filter(|r| {
            matches!(&r.record, Some(Record::PartitionChange(c))
                if c.leader.is_some_and(|l| l >= 0) && c.leader_recovery_state == Some(recovering))
        })
        .count() as u64
}

/// Logs the state changes an operator cares about (leader elections with old and new leader,
/// fencing at INFO; ISR changes at DEBUG), one line each, as the active controller decides
/// them ([`crate::logic::change_log`]).
fn log_changes(before: &MetadataImage, after: &MetadataImage, records: &[MetadataRecord]) {
    use crate::logic::change_log::{ChangeLevel, describe_changes};
    let with_debug = tracing::enabled!(tracing::Level::DEBUG);
    let mut info_lines = 0usize;
    let mut warn_lines = 0usize;
    for (level, line) in describe_changes(before, after, records, with_debug) {
        match level {
            ChangeLevel::Warn if warn_lines < MAX_INFO_CHANGE_LINES => {
                warn_lines += 1;
                tracing::warn!("{line}");
            }
            ChangeLevel::Warn => {
                warn_lines += 1;
                tracing::debug!("{line}");
            }
            ChangeLevel::Info if info_lines < MAX_INFO_CHANGE_LINES => {
                info_lines += 1;
                tracing::info!("{line}");
            }
            ChangeLevel::Info => {
                info_lines += 1;
                tracing::debug!("{line}");
            }
            ChangeLevel::Debug => tracing::debug!("{line}"),
        }
    }
    if warn_lines > MAX_INFO_CHANGE_LINES {
        tracing::warn!(
            "... and {} more offline partitions or unclean elections in this entry (each at \
             DEBUG)",
            warn_lines - MAX_INFO_CHANGE_LINES
        );
    }
    if info_lines > MAX_INFO_CHANGE_LINES {
        tracing::info!(
            "... and {} more changes in this entry (each at DEBUG)",
            info_lines - MAX_INFO_CHANGE_LINES
        );
    }
}

/// INFO (and, separately, WARN) lines [`log_changes`] writes for one entry at most; the rest
/// go to DEBUG (fencing a broker that leads 66,000 partitions wrote 66,000 INFO lines).
const MAX_INFO_CHANGE_LINES: usize = 100;

/// `records` in order, in pieces of at most `max` records and at most
/// [`MAX_PROPOSED_ENTRY_BYTES`] encoded bytes (at least one piece when not empty; a record
/// above the byte bound goes alone; `max` must be positive).
fn chunks(records: Vec<MetadataRecord>, max: usize) -> Vec<Vec<MetadataRecord>> {
    assert!(max > 0, "pieces of 0 records");
    let mut out = Vec::with_capacity(records.len().div_ceil(max));
    let mut piece = Vec::new();
    let mut bytes = 0usize;
    for r in records {
        let len = record_entry_bytes(&r);
        if !piece.is_empty() && (piece.len() == max || bytes + len > MAX_PROPOSED_ENTRY_BYTES) {
            out.push(std::mem::take(&mut piece));
            bytes = 0;
        }
        bytes += len;
        piece.push(r);
    }
    if !piece.is_empty() {
        out.push(piece);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_proto::metadata::{LeaderRecoveryState, PartitionChangeRecord};

    fn change(leader: Option<i32>, recovery: Option<LeaderRecoveryState>) -> MetadataRecord {
        MetadataRecord {
            record: Some(Record::PartitionChange(PartitionChangeRecord {
                leader,
                leader_recovery_state: recovery.map(|r| r as i32),
                ..Default::default()
            })),
        }
    }

    #[test]
    fn internal_records_are_cut_into_entries_in_order() {
        let recs: Vec<MetadataRecord> = (0..7).map(|l| change(Some(l), None)).collect();
        let sizes = |max| {
            chunks(recs.clone(), max)
                .iter()
                .map(Vec::len)
                .collect::<Vec<_>>()
        };
        assert_eq!(sizes(3), [3, 3, 1]);
        assert_eq!(sizes(7), [7]);
        assert_eq!(sizes(100), [7]);
        assert!(chunks(Vec::new(), 3).is_empty());
        assert_eq!(chunks(recs.clone(), 2).concat(), recs);
    }

    #[test]
    fn counts_only_new_leaders_marked_recovering_as_unclean_elections() {
        use LeaderRecoveryState::{Recovered, Recovering};
        let records = [
            change(Some(2), Some(Recovering)),  // unclean election
            change(Some(3), None),              // clean election
            change(Some(3), Some(Recovered)),   // recovery finished
            change(None, Some(Recovering)),     // no leader change
            change(Some(-1), Some(Recovering)), // offline, nobody elected
            MetadataRecord {
                record: Some(Record::NoOp(NoOpRecord {})),
            },
            change(Some(1), Some(Recovering)), // unclean election
        ];
        assert_eq!(count_unclean_elections(&records), 2);
        assert_eq!(count_unclean_elections(&[]), 0);
    }
}
