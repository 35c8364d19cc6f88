//! The metadata tailer (Kafka: `MetadataLoader` fed by the Raft client), three tasks:
//!
//! - the tail task follows one `FetchMetadata` stream from any live controller and replays it
//!   with [`Replayer`]; every image built goes to a latest-wins [`Handoff`]. A broken or
//!   silent stream moves to the next voter and resumes from the next offset, unless this
//!   broker itself did not run for part of the silence (the stall meter): then the same
//!   controller is asked again. A stream from a
//!   follower controller that names another voter as active moves to the active one
//!   ([`LeaderPreference`]): as Kafka's brokers fetch the metadata log from the Raft leader
//!   (KIP-595 observers), it then gets each entry as the leader commits it, where a follower
//!   learns of a commit a replication round later, and the entries carry their commit time
//!   (`keel_broker_metadata_commit_lag_seconds`). It also moves when the broker's heartbeats
//!   are accepted by a controller other than the one it streams from: when the active
//!   controller stops (paused, cut off), the stream from it only goes silent, and waiting for
//!   the idle timeout (the session timeout) would stall every broker's metadata that long,
//!   while the heartbeats find the new active controller within an election (Kafka's
//!   observers likewise give up on a fetch after `controller.quorum.fetch.timeout.ms` and
//!   ask the leader the quorum names). It never waits for the replica manager, so
//!   entries committed while the replica manager applies an image are read and replayed
//!   meanwhile.
//! - the publisher takes the newest image from the hand-off, sends it to the
//!   [`LocalChangesSink`], waits until the replica manager applied it (the replica manager
//!   computes its local changes against the last image it acted on), then publishes the image
//!   on a `watch` channel (whose offset the heartbeats report as applied). Images built while an apply was running are folded into one: a
//!   broker failure at 100,000 partitions is tens of metadata entries, and applying them one
//!   by one cost one pass (and one file-system sync of the new leaders' epoch checkpoints)
//!   per entry; Kafka's `MetadataLoader` likewise publishes one delta for all the batches
//!   loaded since its publishers last ran. Local changes are a diff of two images, so skipping
//!   intermediate images changes nothing (a partition appears when its partition epoch
//!   increased, whatever happened between).
//! - the saver writes the local snapshot every `metadata_snapshot_interval_ms` when the
//!   published image moved, and once more on stop.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use keel_metadata_log::MetadataImage;
use keel_proto::controller::FetchMetadataRequest;
use keel_proto::controller::fetch_metadata_item::Item;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

use super::local_snapshot;
use super::replayer::{LiveTimes, Replayer};
use super::sink::{LocalChangesEvent, LocalChangesSink};
use crate::lifecycle::{ControllerChannels, LifecycleStatus};
use keel_runtime::Backoff;

/// Settings of the tailer.
#[derive(Debug, Clone)]
pub struct TailerConfig {
    /// This broker's id (sent in the FetchMetadata request).
    pub broker_id: i32,
    /// Where the local snapshot is written.
    pub snapshot_path: PathBuf,
    /// How often the local snapshot is written when the image changed.
    pub snapshot_interval: Duration,
    /// A stream that delivers nothing for this long is abandoned for the next voter (the
    /// active controller commits a NoOpRecord every 500 ms, so a healthy stream is never
    /// silent that long).
    pub idle_timeout: Duration,
    /// Backoff between reconnects after consecutive failures.
    pub backoff: Backoff,
}

/// A running tailer.
#[derive(Debug)]
pub struct TailerHandle {
    images: watch::Receiver<MetadataImage>,
    stop_tail: watch::Sender<bool>,
    stop_saver: watch::Sender<bool>,
    tail: JoinHandle<()>,
    publish: JoinHandle<()>,
    saver: JoinHandle<()>,
}

impl TailerHandle {
    /// Every published image (the latest is always readable with `borrow`).
    pub fn images(&self) -> watch::Receiver<MetadataImage> {
        self.images.clone()
    }

    /// Stops tailing and publishing (an image not yet published is dropped), then writes the
    /// final local snapshot of the last published image.
    pub async fn stop(self) {
        self.stop_tail.send_replace(true);
        let _ = self.tail.await;
        let _ = self.publish.await;
        self.stop_saver.send_replace(true);
        let _ = self.saver.await;
    }
}

/// Starts tailing from `initial` (empty or the local snapshot). `heartbeats` is the broker
/// lifecycle's status: its `controller_id` (the controller that last accepted a heartbeat,
/// that is the active one) is where the stream moves when it differs from the controller
/// streamed from. Must run inside a runtime.
pub fn spawn(
    cfg: TailerConfig,
    channels: ControllerChannels,
    initial: MetadataImage,
    sink: LocalChangesSink,
    heartbeats: watch::Receiver<LifecycleStatus>,
) -> TailerHandle {
    let (images_tx, images) = watch::channel(MetadataImage::empty());
    let (stop_tail, stop_rx) = watch::channel(false);
    let (stop_saver, saver_stop_rx) = watch::channel(false);
    let saved_offset = initial.provenance().offset;
    let publisher = Publisher {
        images: images_tx,
        sink,
        sink_alive: true,
    };
    let handoff = Arc::new(Handoff::default());
    let tail = tokio::spawn(tail_loop(
        cfg.clone(),
        channels,
        initial,
        handoff.clone(),
        heartbeats,
        stop_rx.clone(),
    ));
    let publish = tokio::spawn(publish_loop(publisher, handoff, stop_rx));
    let saver = tokio::spawn(save_loop(cfg, images.clone(), saved_offset, saver_stop_rx));
    TailerHandle {
        images,
        stop_tail,
        stop_saver,
        tail,
        publish,
        saver,
    }
}

/// Most lag samples ([`LiveTimes`]) one publication records: the live entries folded into
/// one image beyond this many are not sampled (the oldest are kept, so the samples never
/// understate the lag).
const MAX_LAG_SAMPLES: usize = 1024;

/// An image built by the tail task and not yet taken by the publisher.
#[derive(Debug)]
struct Built {
    image: MetadataImage,
    /// The times of the live entries folded into `image` since the publisher last took one,
    /// oldest first, none empty; at most [`MAX_LAG_SAMPLES`].
    live: Vec<LiveTimes>,
}

/// The latest-wins hand-off from the tail task to the publisher: one slot (memory bounded
/// to one unpublished image) and a wake-up.
#[derive(Debug, Default)]
struct Handoff {
    slot: Mutex<Option<Built>>,
    ready: Notify,
}

impl Handoff {
    /// Puts `image` in the slot, replacing an image the publisher has not taken (images only
    /// move forward: `image` contains every change of the one it replaces).
    fn put(&self, image: MetadataImage, live: LiveTimes) {
        {
            let mut slot = self.slot.lock().unwrap_or_else(|e| e.into_inner());
            match slot.as_mut() {
                Some(b) => {
                    debug_assert!(
                        image.provenance().offset >= b.image.provenance().offset,
                        "images only move forward"
                    );
                    b.image = image;
                    if !live.is_empty() && b.live.len() < MAX_LAG_SAMPLES {
                        b.live.push(live);
                    }
                }
                None => {
                    *slot = Some(Built {
                        image,
                        live: Some(live).filter(|l| !l.is_empty()).into_iter().collect(),
                    })
                }
            }
        }
        // A permit is stored when the publisher is not waiting yet.
        self.ready.notify_one();
    }

    /// Waits for an image and takes it.
    async fn take(&self) -> Built {
        loop {
            if let Some(b) = self.slot.lock().unwrap_or_else(|e| e.into_inner()).take() {
                return b;
            }
            self.ready.notified().await;
        }
    }
}

/// The publisher task: takes the newest built image and publishes it (see the module doc).
async fn publish_loop(
    mut publisher: Publisher,
    handoff: Arc<Handoff>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            () = async {
                let built = handoff.take().await;
                publisher.publish(built.image).await;
                for times in built.live {
                    crate::observe::record_metadata_lags(times.appended_ms, times.committed_ms);
                }
            } => {}
        }
    }
}

/// Publishes images: to the replica manager first (bounded: waits until it applied the
/// image), then on the watch (whose offset the heartbeats report).
#[derive(Debug)]
struct Publisher {
    images: watch::Sender<MetadataImage>,
    sink: LocalChangesSink,
    sink_alive: bool,
}

impl Publisher {
    async fn publish(&mut self, image: MetadataImage) {
        if self.sink_alive {
            let (applied, done) = tokio::sync::oneshot::channel();
            let ev = LocalChangesEvent {
                image: image.clone(),
                applied: Some(applied),
            };
            if self.sink.send(ev).await {
                // Dropped without a signal also means "done" (e.g. the receiver stopped).
                let _ = done.await;
            } else {
                tracing::error!("the local changes receiver is gone; changes are dropped");
                self.sink_alive = false;
            }
        }
        self.images.send_replace(image);
    }
}

async fn tail_loop(
    cfg: TailerConfig,
    mut channels: ControllerChannels,
    initial: MetadataImage,
    handoff: Arc<Handoff>,
    mut heartbeats: watch::Receiver<LifecycleStatus>,
    mut stop: watch::Receiver<bool>,
) {
    let mut replayer = Replayer::new(initial.clone());
    handoff.put(initial, LiveTimes::default());
    let mut index = 0usize;
    let mut failures = 0u32;
    let mut preference = LeaderPreference::default();
    // Whether the current stream was opened to follow the active controller's hint.
    let mut to_leader = false;
    loop {
        // The voter set may have changed (a controller added or removed, KIP-853).
        if channels.refresh() {
            index = 0;
        }
        let (voter, addr) = channels.voter(index);
        let addr = addr.to_string();
        let from = replayer.next_offset();
        let mut progressed = false;
        let end = tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            r = follow(
                &cfg,
                &channels,
                index,
                &mut preference,
                &mut heartbeats,
                &mut replayer,
                &handoff,
                &mut progressed,
            ) => r,
        };
        if let Some(image) = replayer.flush() {
            handoff.put(image, LiveTimes::default());
        }
        let result = match end {
            StreamEnd::ToActive {
                index: active,
                id,
                hint,
            } => {
                tracing::info!(
                    leaving = voter,
                    from_offset = from,
                    applied_offset = replayer.image().provenance().offset,
                    "controller {id} is the active controller ({}); following the metadata log \
                     from it",
                    hint.describe()
                );
                index = active;
                to_leader = true;
                failures = 0;
                continue;
            }
            StreamEnd::VotersChanged { leader } => {
                // The active controller is one these channels do not have yet (added with
                // `quorum add-controller`, or missing from this broker's list).
                channels.refresh();
                let ids = channels.ids();
                index = ids.iter().position(|&id| id == leader).unwrap_or(0);
                tracing::info!(
                    leaving = voter,
                    from_offset = from,
                    applied_offset = replayer.image().provenance().offset,
                    "the controller voters changed; moving the metadata stream to controller {}",
                    ids[index]
                );
                to_leader = ids[index] == leader;
                failures = 0;
                continue;
            }
            StreamEnd::Stalled(why) => {
                // The silence was this broker's own pause: the controller is as good as
                // before, and moving to another one would move straight back to the active
                // controller (found by a fresh-user trial).
                tracing::info!(
                    controller = voter,
                    address = %addr,
                    from_offset = from,
                    applied_offset = replayer.image().provenance().offset,
                    "metadata stream ended ({why}); reconnecting to the same controller"
                );
                continue;
            }
            StreamEnd::Failed(why) => why,
        };
        if to_leader && !progressed {
            preference.leader_failed(Instant::now());
        }
        to_leader = false;
        failures = if progressed { 1 } else { failures + 1 };
        let delay = cfg.backoff.next(failures.saturating_sub(1));
        tracing::info!(
            controller = voter,
            address = %addr,
            from_offset = from,
            applied_offset = replayer.image().provenance().offset,
            "metadata stream ended ({result}); switching controller in {delay:?}"
        );
        index = (index + 1) % channels.len();
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            _ = tokio::time::sleep(delay) => {}
        }
    }
}

/// Why a stream ended.
#[derive(Debug, PartialEq, Eq)]
enum StreamEnd {
    /// It failed, was closed or went silent (why).
    Failed(String),
    /// It went silent while this process itself did not run (paused, or starved of CPU):
    /// the silence says nothing of the controller, which is asked again (why).
    Stalled(String),
    /// Another voter is the active controller: voter number `index`, node `id`, as `hint`
    /// says.
    ToActive {
        index: usize,
        id: u64,
        hint: ActiveHint,
    },
    /// It named as active controller node `leader`, which these channels do not have, and the
    /// voter set they follow changed since they were built.
    VotersChanged { leader: u64 },
}

/// Who named the active controller a stream moves to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ActiveHint {
    /// An item of the stream (the serving controller's view of the leader).
    Stream,
    /// The broker's heartbeats: that controller accepted the last one.
    Heartbeat,
}

impl ActiveHint {
    /// For the move's log line.
    fn describe(self) -> &'static str {
        match self {
            ActiveHint::Stream => "named by the controller streamed from",
            ActiveHint::Heartbeat => "it accepts this broker's heartbeats",
        }
    }
}

/// Least time between two moves to the controller a stream named active, so controllers
/// naming each other during an election cannot make the broker hop on every item.
const LEADER_SWITCH_SPACING: Duration = Duration::from_secs(1);
/// How long the tailer stays with the other controllers after the named active controller
/// gave no stream (down, or cut off from this broker but not from the quorum: its followers
/// still serve the committed log).
const LEADER_RETRY_AFTER: Duration = Duration::from_secs(30);

/// When the tail task moves to the controller its stream names active (pure; see the module
/// doc). Moves are spaced by [`LEADER_SWITCH_SPACING`]; after a move that gave no stream,
/// none for [`LEADER_RETRY_AFTER`].
#[derive(Debug, Default)]
struct LeaderPreference {
    /// No move before this instant.
    not_before: Option<Instant>,
}

impl LeaderPreference {
    /// The voter number to move to when the stream from node `serving` names `leader_id`
    /// (-1 unknown) active at `now`: a voter among `ids` (in voter order) other than
    /// `serving`, when no move happened within the spacing. Records the move.
    fn move_to(
        &mut self,
        serving: u64,
        leader_id: i32,
        ids: &[u64],
        now: Instant,
    ) -> Option<usize> {
        let leader = u64::try_from(leader_id).ok().filter(|&l| l != serving)?;
        if self.not_before.is_some_and(|t| now < t) {
            return None;
        }
        let index = ids.iter().position(|&id| id == leader)?;
        self.not_before = Some(now + LEADER_SWITCH_SPACING);
        Some(index)
    }

    /// The controller moved to gave no stream: stay with the others for a while.
    fn leader_failed(&mut self, now: Instant) {
        self.not_before = Some(now + LEADER_RETRY_AFTER);
    }
}

/// Follows one stream until it fails, or names another voter as the active controller, or
/// the broker's heartbeats are accepted by another voter (see the module doc).
#[allow(clippy::too_many_arguments)]
async fn follow(
    cfg: &TailerConfig,
    channels: &ControllerChannels,
    index: usize,
    preference: &mut LeaderPreference,
    heartbeats: &mut watch::Receiver<LifecycleStatus>,
    replayer: &mut Replayer,
    handoff: &Handoff,
    progressed: &mut bool,
) -> StreamEnd {
    let req = FetchMetadataRequest {
        from_offset: replayer.next_offset() as i64,
        broker_id: Some(cfg.broker_id),
        max_bytes_per_item: 0,
    };
    let ids = channels.ids();
    let (voter, addr) = channels.voter(index);
    // Only heartbeats accepted from now on count: the one that named this voter, or a stale
    // one from before a failed stream, must not move the stream back at once.
    heartbeats.borrow_and_update();
    let to_heartbeat_leader = |index: usize| StreamEnd::ToActive {
        index,
        id: ids[index],
        hint: ActiveHint::Heartbeat,
    };
    let mut client = channels.client(index);
    let mut stream = tokio::select! {
        r = tokio::time::timeout(cfg.idle_timeout, client.fetch_metadata(req)) => match r {
            Err(_) => return StreamEnd::Failed(format!("no answer in {:?}", cfg.idle_timeout)),
            Ok(Err(status)) => {
                return StreamEnd::Failed(format!("{}: {}", status.code(), keel_runtime::status::status_line(&status)));
            }
            Ok(Ok(r)) => r.into_inner(),
        },
        i = heartbeat_leader(heartbeats, voter, &ids, preference) => return to_heartbeat_leader(i),
    };
    tracing::info!(
        controller = voter,
        address = %addr,
        "following the metadata log from controller {voter} at offset {}",
        replayer.next_offset()
    );
    // Names this broker's own pause when the stream goes quiet (a resumed SIGSTOPped broker).
    let meter = keel_runtime::clock::StallMeter::process();
    loop {
        // Between items only when no snapshot is being received (it would start over).
        let may_move = !replayer.loading_snapshot();
        let stalled_before = meter.stalled_ms();
        let next = tokio::select! {
            r = tokio::time::timeout(cfg.idle_timeout, stream.message()) => r,
            i = heartbeat_leader(heartbeats, voter, &ids, preference), if may_move => {
                return to_heartbeat_leader(i);
            }
        };
        let item = match next {
            Err(_) => {
                let stall = meter.stalled_ms().saturating_sub(stalled_before);
                let why = format!(
                    "nothing received for {:?}{}",
                    cfg.idle_timeout,
                    keel_runtime::clock::stall_note(stall)
                );
                return if stall > 0 {
                    StreamEnd::Stalled(why)
                } else {
                    StreamEnd::Failed(why)
                };
            }
            Ok(Err(status)) => {
                return StreamEnd::Failed(format!(
                    "{}: {}",
                    status.code(),
                    keel_runtime::status::status_line(&status)
                ));
            }
            Ok(Ok(None)) => return StreamEnd::Failed("closed by the controller".to_string()),
            Ok(Ok(Some(item))) => item,
        };
        *progressed = true;
        let leader_id = item.leader.as_ref().map_or(-1, |l| l.leader_id);
        if let Some(Item::SnapshotHeader(h)) = &item.item {
            tracing::info!(
                controller = voter,
                records = h.record_count,
                "receiving a metadata snapshot at offset {} (our log position was purged)",
                h.last_included_offset
            );
        }
        match replayer.apply(item) {
            Ok(Some(image)) => handoff.put(image, replayer.live_times()),
            Ok(None) => {}
            Err(e) => {
                tracing::error!("{e}");
                return StreamEnd::Failed(e.to_string());
            }
        }
        // Moves only between items: the item just received is replayed, and the next
        // stream starts after it.
        if replayer.loading_snapshot() {
            continue;
        }
        if let Some(index) = preference.move_to(voter, leader_id, &ids, Instant::now()) {
            return StreamEnd::ToActive {
                index,
                id: ids[index],
                hint: ActiveHint::Stream,
            };
        }
        if let Ok(leader) = u64::try_from(leader_id)
            && !ids.contains(&leader)
            && channels.is_stale()
        {
            return StreamEnd::VotersChanged { leader };
        }
    }
}

/// Resolves with the voter number (in `ids`) of the controller that accepts the broker's
/// heartbeats, once a heartbeat is accepted by a voter other than `serving` and `preference`
/// allows the move (it records it). Never resolves once the lifecycle is gone.
async fn heartbeat_leader(
    heartbeats: &mut watch::Receiver<LifecycleStatus>,
    serving: u64,
    ids: &[u64],
    preference: &mut LeaderPreference,
) -> usize {
    loop {
        if heartbeats.changed().await.is_err() {
            return std::future::pending().await;
        }
        let active = heartbeats.borrow_and_update().controller_id;
        if let Some(index) = preference.move_to(serving, active, ids, Instant::now()) {
            return index;
        }
    }
}

async fn save_loop(
    cfg: TailerConfig,
    images: watch::Receiver<MetadataImage>,
    mut saved_offset: u64,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let stopping = tokio::select! {
            _ = stop.wait_for(|s| *s) => true,
            _ = tokio::time::sleep(cfg.snapshot_interval) => false,
        };
        let image = images.borrow().clone();
        let offset = image.provenance().offset;
        if offset > saved_offset {
            let path = cfg.snapshot_path.clone();
            let res =
                tokio::task::spawn_blocking(move || local_snapshot::save(&path, &image)).await;
            match res {
                Ok(Ok(())) => {
                    saved_offset = offset;
                    tracing::info!(
                        path = %cfg.snapshot_path.display(),
                        metadata_offset = offset,
                        "wrote local metadata snapshot"
                    );
                }
                Ok(Err(e)) => tracing::warn!("cannot write the local metadata snapshot: {e}"),
                Err(e) => tracing::warn!("local metadata snapshot task failed: {e}"),
            }
        }
        if stopping {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_metadata_log::{MetadataDelta, Provenance};

    fn appended(ms: i64) -> LiveTimes {
        LiveTimes {
            appended_ms: Some(ms),
            committed_ms: None,
        }
    }

    fn image_at(offset: u64) -> MetadataImage {
        let mut delta = MetadataDelta::new(MetadataImage::empty());
        delta.set_provenance(Provenance { offset, term: 1 });
        delta.apply()
    }

    #[tokio::test]
    async fn images_built_during_an_apply_are_published_as_one() {
        let (sink, mut rx) = LocalChangesSink::channel(4);
        let (images_tx, images) = watch::channel(MetadataImage::empty());
        let publisher = Publisher {
            images: images_tx,
            sink,
            sink_alive: true,
        };
        let handoff = Arc::new(Handoff::default());
        let (stop_tx, stop_rx) = watch::channel(false);
        let task = tokio::spawn(publish_loop(publisher, handoff.clone(), stop_rx));

        handoff.put(image_at(1), appended(10));
        let first = rx.recv().await.expect("first event");
        assert_eq!(first.image.provenance().offset, 1);
        // While offset 1 is being applied, three more images are built.
        handoff.put(image_at(2), appended(20));
        handoff.put(image_at(3), LiveTimes::default());
        handoff.put(image_at(4), appended(40));
        assert_eq!(
            images.borrow().provenance().offset,
            0,
            "published only once applied"
        );
        drop(first.applied); // applied
        let folded = rx.recv().await.expect("second event");
        assert_eq!(folded.image.provenance().offset, 4, "2 and 3 folded into 4");
        let mut seen = images.clone();
        seen.wait_for(|i| i.provenance().offset == 1).await.unwrap();
        drop(folded.applied);
        seen.wait_for(|i| i.provenance().offset == 4).await.unwrap();
        assert!(rx.try_recv().is_err(), "nothing else was published");

        stop_tx.send_replace(true);
        task.await.unwrap();
    }

    #[test]
    fn a_stream_moves_to_the_named_active_controller_spaced_and_not_back_after_a_failure() {
        let ids = [1, 2, 3];
        let t0 = Instant::now();
        let mut p = LeaderPreference::default();
        // Unknown leader, the serving controller itself, or one not among the voters: stay.
        assert_eq!(p.move_to(1, -1, &ids, t0), None);
        assert_eq!(p.move_to(1, 1, &ids, t0), None);
        assert_eq!(p.move_to(1, 7, &ids, t0), None);
        // A follower names voter 3 (index 2).
        assert_eq!(p.move_to(1, 3, &ids, t0), Some(2));
        // Hints naming each other (an election) move at most once per spacing.
        assert_eq!(p.move_to(3, 2, &ids, t0 + Duration::from_millis(10)), None);
        let later = t0 + LEADER_SWITCH_SPACING;
        assert_eq!(p.move_to(3, 2, &ids, later), Some(1));
        // The controller moved to gave no stream: the others serve for a while.
        p.leader_failed(later);
        assert_eq!(p.move_to(1, 2, &ids, later + LEADER_SWITCH_SPACING), None);
        assert_eq!(p.move_to(1, 2, &ids, later + LEADER_RETRY_AFTER), Some(1));
    }

    #[test]
    fn the_slot_keeps_the_oldest_lag_samples_up_to_the_bound() {
        let handoff = Handoff::default();
        for o in 1..=(MAX_LAG_SAMPLES as u64 + 10) {
            handoff.put(image_at(o), appended(o as i64));
        }
        let built = handoff.slot.lock().unwrap().take().unwrap();
        assert_eq!(built.image.provenance().offset, MAX_LAG_SAMPLES as u64 + 10);
        assert_eq!(built.live.len(), MAX_LAG_SAMPLES);
        assert_eq!(built.live[0], appended(1));
        assert_eq!(
            *built.live.last().unwrap(),
            appended(MAX_LAG_SAMPLES as i64)
        );
    }
}
