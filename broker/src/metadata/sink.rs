//! [`LocalChangesSink`]: where the tailer hands local changes to the replica manager.
//!
//! A bounded channel: when the replica manager falls behind, the tailer's publisher waits (and
//! stops reporting a higher applied offset in heartbeats) and folds the images built meanwhile
//! into one, instead of queueing without limit.

use keel_metadata_log::MetadataImage;
use tokio::sync::mpsc;

use super::local_changes::LocalChanges;

/// Capacity of the default channel (events, not partitions).
pub const DEFAULT_CAPACITY: usize = 64;

/// One published image and what it changed for this broker.
#[derive(Debug)]
pub struct LocalChangesEvent {
    /// The image the changes lead to (the replica manager reads configs and brokers from it).
    pub image: MetadataImage,
    /// Deleted / became leader / became follower, to apply in that order (may be empty: every
    /// image is sent, since broker states and configs matter to the replica manager too).
    pub changes: LocalChanges,
    /// Signalled (or dropped) once the receiver applied the event; the tailer waits for it
    /// before it reports the image's offset as applied (heartbeats), like Kafka's publishers.
    pub applied: Option<tokio::sync::oneshot::Sender<()>>,
}

/// The sending half; the replica manager owns the receiver.
#[derive(Debug, Clone)]
pub struct LocalChangesSink {
    tx: mpsc::Sender<LocalChangesEvent>,
}

impl LocalChangesSink {
    /// A sink and the receiver the replica manager consumes.
    pub fn channel(capacity: usize) -> (Self, mpsc::Receiver<LocalChangesEvent>) {
        let (tx, rx) = mpsc::channel(capacity);
        (Self { tx }, rx)
    }

    /// A sink whose events are only logged (the broker before the replica manager exists).
    /// Spawns the logging task on the current runtime; it ends when the sink is dropped.
    pub fn logging() -> Self {
        let (sink, mut rx) = Self::channel(DEFAULT_CAPACITY);
        tokio::spawn(async move {
            while let Some(ev) = rx.recv().await {
                if !ev.changes.is_empty() {
                    log_changes(&ev);
                }
            }
        });
        sink
    }

    /// Sends one event, waiting for room. Returns false when the receiver is gone.
    pub async fn send(&self, event: LocalChangesEvent) -> bool {
        self.tx.send(event).await.is_ok()
    }
}

/// Logs each change on one line (Kafka's "Transitioning ... partition(s) to local leaders").
pub fn log_changes(ev: &LocalChangesEvent) {
    let offset = ev.image.provenance().offset;
    for tp in &ev.changes.deleted {
        tracing::info!(metadata_offset = offset, "local replica {tp}: deleted");
    }
    for (tp, reg) in &ev.changes.became_leader {
        tracing::info!(
            metadata_offset = offset,
            leader_epoch = reg.leader_epoch,
            partition_epoch = reg.partition_epoch,
            isr = ?reg.isr,
            "local replica {tp}: leader"
        );
    }
    for (tp, reg) in &ev.changes.became_follower {
        tracing::info!(
            metadata_offset = offset,
            leader = reg.leader,
            leader_epoch = reg.leader_epoch,
            partition_epoch = reg.partition_epoch,
            "local replica {tp}: follower"
        );
    }
}
