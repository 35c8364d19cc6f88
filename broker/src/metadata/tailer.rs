//! The metadata tailer task (Kafka: `MetadataLoader` fed by the Raft client): one
//! `FetchMetadata` stream from any live controller, replayed by [`Replayer`]; every new image
//! is published on a `watch` channel and its [`local_changes`] go to the
//! [`LocalChangesSink`]. A broken or silent stream moves to the next voter and resumes from
//! the next offset. A second task writes the local snapshot every
//! `metadata_snapshot_interval_ms` when the image moved, and once more on stop.

use std::path::PathBuf;
use std::time::Duration;

use keel_metadata_log::MetadataImage;
use keel_proto::controller::FetchMetadataRequest;
use keel_proto::controller::fetch_metadata_item::Item;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::local_changes::local_changes;
use super::local_snapshot;
use super::replayer::Replayer;
use super::sink::{LocalChangesEvent, LocalChangesSink};
use crate::lifecycle::ControllerChannels;
use keel_runtime::Backoff;

/// Settings of the tailer.
#[derive(Debug, Clone)]
pub struct TailerConfig {
    /// This broker's id (for local changes and the request).
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
    saver: JoinHandle<()>,
}

impl TailerHandle {
    /// Every published image (the latest is always readable with `borrow`).
    pub fn images(&self) -> watch::Receiver<MetadataImage> {
        self.images.clone()
    }

    /// Stops tailing, then writes the final local snapshot.
    pub async fn stop(self) {
        self.stop_tail.send_replace(true);
        let _ = self.tail.await;
        self.stop_saver.send_replace(true);
        let _ = self.saver.await;
    }
}

/// Starts tailing from `initial` (empty or the local snapshot). Must run inside a runtime.
pub fn spawn(
    cfg: TailerConfig,
    channels: ControllerChannels,
    initial: MetadataImage,
    sink: LocalChangesSink,
) -> TailerHandle {
    let (images_tx, images) = watch::channel(MetadataImage::empty());
    let (stop_tail, stop_rx) = watch::channel(false);
    let (stop_saver, saver_stop_rx) = watch::channel(false);
    let saved_offset = initial.provenance().offset;
    let publisher = Publisher {
        broker_id: cfg.broker_id,
        published: MetadataImage::empty(),
        images: images_tx,
        sink,
        sink_alive: true,
    };
    let tail = tokio::spawn(tail_loop(
        cfg.clone(),
        channels,
        initial,
        publisher,
        stop_rx,
    ));
    let saver = tokio::spawn(save_loop(cfg, images.clone(), saved_offset, saver_stop_rx));
    TailerHandle {
        images,
        stop_tail,
        stop_saver,
        tail,
        saver,
    }
}

/// Publishes images: local changes first (bounded: waits for the replica manager), then the
/// watch (whose offset the heartbeats report).
#[derive(Debug)]
struct Publisher {
    broker_id: i32,
    published: MetadataImage,
    images: watch::Sender<MetadataImage>,
    sink: LocalChangesSink,
    sink_alive: bool,
}

impl Publisher {
    async fn publish(&mut self, image: MetadataImage) {
        let changes = local_changes(&self.published, &image, self.broker_id);
        if self.sink_alive {
            let (applied, done) = tokio::sync::oneshot::channel();
            let ev = LocalChangesEvent {
                image: image.clone(),
                changes,
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
        self.published = image.clone();
        self.images.send_replace(image);
    }
}

async fn tail_loop(
    cfg: TailerConfig,
    mut channels: ControllerChannels,
    initial: MetadataImage,
    mut publisher: Publisher,
    mut stop: watch::Receiver<bool>,
) {
    let mut replayer = Replayer::new(initial.clone());
    publisher.publish(initial).await;
    let mut index = 0usize;
    let mut failures = 0u32;
    loop {
        // The voter set may have changed (a controller added or removed, KIP-853).
        if channels.refresh() {
            index = 0;
        }
        let (voter, addr) = channels.voter(index);
        let addr = addr.to_string();
        let from = replayer.next_offset();
        let mut progressed = false;
        let result = tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            r = follow(&cfg, &channels, index, &mut replayer, &mut publisher, &mut progressed) => r,
        };
        if let Some(image) = replayer.flush() {
            publisher.publish(image).await;
        }
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

/// Follows one stream until it fails; returns why it ended.
async fn follow(
    cfg: &TailerConfig,
    channels: &ControllerChannels,
    index: usize,
    replayer: &mut Replayer,
    publisher: &mut Publisher,
    progressed: &mut bool,
) -> String {
    let req = FetchMetadataRequest {
        from_offset: replayer.next_offset() as i64,
        broker_id: Some(cfg.broker_id),
        max_bytes_per_item: 0,
    };
    let mut client = channels.client(index);
    let mut stream = match tokio::time::timeout(cfg.idle_timeout, client.fetch_metadata(req)).await
    {
        Err(_) => return format!("no answer in {:?}", cfg.idle_timeout),
        Ok(Err(status)) => return format!("{}: {}", status.code(), status.message()),
        Ok(Ok(r)) => r.into_inner(),
    };
    let (voter, addr) = channels.voter(index);
    tracing::info!(
        controller = voter,
        address = %addr,
        "following the metadata log from controller {voter} at offset {}",
        replayer.next_offset()
    );
    loop {
        let item = match tokio::time::timeout(cfg.idle_timeout, stream.message()).await {
            Err(_) => return format!("nothing received for {:?}", cfg.idle_timeout),
            Ok(Err(status)) => return format!("{}: {}", status.code(), status.message()),
            Ok(Ok(None)) => return "closed by the controller".to_string(),
            Ok(Ok(Some(item))) => item,
        };
        *progressed = true;
        if let Some(Item::SnapshotHeader(h)) = &item.item {
            tracing::info!(
                controller = voter,
                records = h.record_count,
                "receiving a metadata snapshot at offset {} (our log position was purged)",
                h.last_included_offset
            );
        }
        match replayer.apply(item) {
            Ok(Some(image)) => {
                let appended = replayer.live_append_timestamp_ms();
                publisher.publish(image).await;
                if let Some(at) = appended {
                    crate::observe::record_metadata_apply_lag(at);
                }
            }
            Ok(None) => {}
            Err(e) => {
                tracing::error!("{e}");
                return e.to_string();
            }
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
