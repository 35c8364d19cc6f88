//! [`IsrEligibility`]: may a broker join an ISR? (KIP-841, KIP-903.)
//!
//! The leader asks before it proposes an expansion. The answer comes from the broker's
//! local metadata image: the broker must be registered, unfenced, not in controlled
//! shutdown, and the broker epoch the follower sent in its fetches must equal the registered
//! one (a restarted broker that lost its log has a new epoch: KIP-903).

use std::collections::BTreeMap;

use keel_metadata_log::MetadataImage;

/// Source of ISR eligibility (the metadata image in production, a map in tests).
pub trait IsrEligibility {
    /// Whether `broker_id`, which fetched with `broker_epoch` (`None` = not seen yet), may
    /// be added to an ISR.
    fn is_isr_eligible(&self, broker_id: i32, broker_epoch: Option<i64>) -> bool;
}

impl IsrEligibility for MetadataImage {
    fn is_isr_eligible(&self, broker_id: i32, broker_epoch: Option<i64>) -> bool {
        match (self.broker(broker_id), broker_epoch) {
            (Some(reg), Some(epoch)) => reg.is_eligible() && reg.epoch == epoch,
            _ => false,
        }
    }
}

/// Test and simulation helper: broker id -> registered broker epoch of eligible brokers
/// (absent = fenced, shutting down or unregistered).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EligibleBrokers(pub BTreeMap<i32, i64>);

impl EligibleBrokers {
    /// Every broker in `ids` eligible with broker epoch `epoch`.
    pub fn all(ids: &[i32], epoch: i64) -> Self {
        Self(ids.iter().map(|id| (*id, epoch)).collect())
    }
}

impl IsrEligibility for EligibleBrokers {
    fn is_isr_eligible(&self, broker_id: i32, broker_epoch: Option<i64>) -> bool {
        broker_epoch.is_some() && self.0.get(&broker_id).copied() == broker_epoch
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
        assert!(!MetadataImage::empty().is_isr_eligible(1, Some(1)));
    }
}
