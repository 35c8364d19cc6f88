//! [`DigestMemo`]: image digests for request handlers at a bounded cost (the async side of
//! [`MetadataImage::digest`], which stays pure in `image.rs`).

use crate::image::{ImageDigest, MetadataImage, Provenance};

/// Serves image digests to request handlers (DescribeCluster, DescribeReplicas) at a bounded
/// cost: one computation at a time per memo, on tokio's blocking pool (a digest of ~150,000
/// partitions took most of a controller's CPU when computed on its async workers on every
/// DescribeCluster, and its Raft heartbeats missed their deadlines), and the last result reused
/// while the image stays at the same [`Provenance`] (images at equal provenance on one node
/// have equal content).
#[derive(Debug, Default)]
pub struct DigestMemo {
    last: tokio::sync::Mutex<Option<(Provenance, ImageDigest)>>,
}

impl DigestMemo {
    /// The digest of `image` ([`MetadataImage::digest`]); waits for a computation in progress.
    pub async fn digest(&self, image: &MetadataImage) -> ImageDigest {
        let mut last = self.last.lock().await;
        if let Some((at, d)) = *last
            && at == image.provenance()
        {
            return d;
        }
        let owned = image.clone();
        let d = match tokio::task::spawn_blocking(move || owned.digest()).await {
            Ok(d) => d,
            // The blocking pool is shutting down (or the task panicked): compute here.
            Err(_) => image.digest(),
        };
        *last = Some((image.provenance(), d));
        d
    }
}
