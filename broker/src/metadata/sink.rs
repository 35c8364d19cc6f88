//! [`LocalChangesSink`]: where the tailer hands the images it built to the replica manager.
//!
//! A bounded channel: when the replica manager falls behind, the tailer's publisher waits (and
//! stops reporting a higher applied offset in heartbeats) and folds the images built meanwhile
//! into one, instead of queueing without limit.

use keel_metadata_log::MetadataImage;
use tokio::sync::mpsc;

/// Capacity of the default channel (events, not partitions).
pub const DEFAULT_CAPACITY: usize = 64;

/// One published image for the replica manager, which computes what it changes for this
/// broker against the last image it acted on ([`super::local_changes`]: a diff of two images,
/// so images folded by the tailer need no visit).
#[derive(Debug)]
pub struct LocalChangesEvent {
    /// The image to act on (configs, brokers and partitions; every image is sent, since
    /// broker states and configs matter to the replica manager too).
    pub image: MetadataImage,
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

    /// Sends one event, waiting for room. Returns false when the receiver is gone.
    pub async fn send(&self, event: LocalChangesEvent) -> bool {
        self.tx.send(event).await.is_ok()
    }
}
