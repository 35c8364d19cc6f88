//! [`IsrEligibility`]: may a broker join an ISR? (KIP-841, KIP-903.)
//!
//! The leader asks before it proposes an expansion. The answer comes from the broker's
//! local metadata image: the broker must be registered, unfenced, not in controlled
//! shutdown, and the broker epoch the follower sent in its fetches must equal the registered
//! one (a restarted broker that lost its log has a new epoch: KIP-903).
//!
//! The same source says which broker epoch a replica is registered with
//! ([`IsrEligibility::registered_epoch`], fenced or not): a follower fetch must carry exactly
//! that epoch to be served ([`crate::replica::PartitionState::handle_follower_fetch`]).

use std::collections::BTreeMap;

use keel_metadata_log::MetadataImage;

/// Source of ISR eligibility (the metadata image in production, a map in tests).
pub trait IsrEligibility {
    /// Whether `broker_id`, which fetched with `broker_epoch` (`None` = not seen yet), may
    /// be added to an ISR.
    fn is_isr_eligible(&self, broker_id: i32, broker_epoch: Option<i64>) -> bool;

    /// The broker epoch `broker_id` is registered with, fenced or not (`None` = not
    /// registered).
    fn registered_epoch(&self, broker_id: i32) -> Option<i64>;
}

impl IsrEligibility for MetadataImage {
    fn is_isr_eligible(&self, broker_id: i32, broker_epoch: Option<i64>) -> bool {
        match (self.broker(broker_id), broker_epoch) {
            (Some(reg), Some(epoch)) => reg.is_eligible() && reg.epoch == epoch,
            _ => false,
        }
    }

    fn registered_epoch(&self, broker_id: i32) -> Option<i64> {
        self.broker(broker_id).map(|reg| reg.epoch)
    }
}

/// The metadata image with one broker's registration looked up in advance: a leader serving
/// a follower's fetch asks for that broker's epoch and eligibility once per partition, and
/// at 30,000 partitions per fetch the image lookups were ~5% of a leader's CPU
/// (`perf`, partitions bench). Other brokers are looked up in the image.
#[derive(Debug, Clone, Copy)]
pub struct OneBroker<'a> {
    image: &'a MetadataImage,
    broker_id: i32,
    /// `broker_id`'s registered epoch and whether it may join an ISR; `None`: unregistered.
    registration: Option<(i64, bool)>,
}

impl<'a> OneBroker<'a> {
    /// `image` with `broker_id`'s registration looked up now.
    pub fn new(image: &'a MetadataImage, broker_id: i32) -> Self {
        let registration = image
            .broker(broker_id)
            .map(|reg| (reg.epoch, reg.is_eligible()));
        Self {
            image,
            broker_id,
            registration,
        }
    }
}

impl IsrEligibility for OneBroker<'_> {
    fn is_isr_eligible(&self, broker_id: i32, broker_epoch: Option<i64>) -> bool {
        if broker_id != self.broker_id {
            return self.image.is_isr_eligible(broker_id, broker_epoch);
        }
        match (self.registration, broker_epoch) {
            (Some((epoch, eligible)), Some(fetched)) => eligible && epoch == fetched,
            _ => false,
        }
    }

    fn registered_epoch(&self, broker_id: i32) -> Option<i64> {
        if broker_id != self.broker_id {
            return self.image.registered_epoch(broker_id);
        }
        self.registration.map(|(epoch, _)| epoch)
    }
}

/// Test and simulation helper: broker id -> registered broker epoch of eligible brokers,
/// and of registered but ineligible ones (fenced or shutting down); absent from both =
/// unregistered.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EligibleBrokers {
    /// Eligible brokers and their registered epochs.
    pub eligible: BTreeMap<i32, i64>,
    /// Registered brokers that may not join an ISR (fenced / shutting down), and their epochs.
    pub ineligible: BTreeMap<i32, i64>,
}

impl EligibleBrokers {
    /// Every broker in `ids` eligible with broker epoch `epoch`.
    pub fn all(ids: &[i32], epoch: i64) -> Self {
        Self {
            eligible: ids.iter().map(|id| (*id, epoch)).collect(),
            ineligible: BTreeMap::new(),
        }
    }

    /// `self` with the brokers `ids` registered with `epoch` but ineligible (fenced).
    pub fn with_ineligible(mut self, ids: &[i32], epoch: i64) -> Self {
        for id in ids {
            self.eligible.remove(id);
            self.ineligible.insert(*id, epoch);
        }
        self
    }
}

impl IsrEligibility for EligibleBrokers {
    fn is_isr_eligible(&self, broker_id: i32, broker_epoch: Option<i64>) -> bool {
        broker_epoch.is_some() && self.eligible.get(&broker_id).copied() == broker_epoch
    }

    fn registered_epoch(&self, broker_id: i32) -> Option<i64> {
        self.eligible
            .get(&broker_id)
            .or_else(|| self.ineligible.get(&broker_id))
            .copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eligibility_requires_matching_epoch() {
        let e = EligibleBrokers::all(&[1, 2], 10);
        assert!(e.is_isr_eligible(2, Some(10)));
        assert!(!e.is_isr_eligible(2, Some(9)), "stale broker epoch");
        assert!(!e.is_isr_eligible(2, None), "never fetched");
        assert!(!e.is_isr_eligible(3, Some(10)), "fenced or unknown");
        let e = e.with_ineligible(&[2], 10);
        assert!(!e.is_isr_eligible(2, Some(10)), "fenced");
        assert_eq!(e.registered_epoch(2), Some(10), "fenced but registered");
        assert_eq!(e.registered_epoch(3), None);
        assert!(!MetadataImage::empty().is_isr_eligible(1, Some(1)));
    }

    #[test]
    fn one_broker_answers_as_the_image_does() {
        use keel_metadata_log::Provenance;
        use keel_metadata_log::records::metadata_record::Record;
        use keel_metadata_log::records::{MetadataRecord, RegisterBrokerRecord};
        let broker = |id: i32, epoch: i64, fenced: bool| MetadataRecord {
            record: Some(Record::RegisterBroker(RegisterBrokerRecord {
                broker_id: id,
                incarnation_id: bytes::Bytes::copy_from_slice(&[id as u8; 16]),
                broker_epoch: epoch,
                fenced,
                ..Default::default()
            })),
        };
        let image = MetadataImage::empty()
            .with_records(
                Provenance { offset: 5, term: 1 },
                &[broker(1, 7, false), broker(2, 8, true)],
            )
            .unwrap();
        for cached in [1, 2, 3] {
            let one = OneBroker::new(&image, cached);
            for id in [1, 2, 3] {
                assert_eq!(one.registered_epoch(id), image.registered_epoch(id));
                for epoch in [None, Some(7), Some(8), Some(9)] {
                    assert_eq!(
                        one.is_isr_eligible(id, epoch),
                        image.is_isr_eligible(id, epoch),
                        "cached {cached}, broker {id}, epoch {epoch:?}"
                    );
                }
            }
        }
        assert!(OneBroker::new(&image, 1).is_isr_eligible(1, Some(7)));
        assert!(
            !OneBroker::new(&image, 2).is_isr_eligible(2, Some(8)),
            "fenced"
        );
    }
}
