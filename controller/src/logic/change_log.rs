//! One log line per state change an operator cares about (issue #7 "Logs"), decided on the
//! active controller: leader elections with the old and new leader and epochs, ISR changes,
//! and broker fencing / unfencing / controlled shutdown, each comparing the image before and
//! after one operation's records. Pure: the write path logs what this returns.

use keel_metadata_log::MetadataImage;
use keel_metadata_log::image::uuid_from_bytes;
use keel_metadata_log::records::MetadataRecord;
use keel_metadata_log::records::metadata_record::Record;

/// The change lines for `records`, which take `before` to `after`.
pub fn describe_changes(
    before: &MetadataImage,
    after: &MetadataImage,
    records: &[MetadataRecord],
) -> Vec<String> {
    let mut out = Vec::new();
    for r in records {
        match &r.record {
            Some(Record::PartitionChange(c)) => {
                let Some(id) = uuid_from_bytes(&c.topic_id) else {
                    continue;
                };
                let (Some(old), Some(new)) = (
                    before.partition(id, c.partition_id),
                    after.partition(id, c.partition_id),
                ) else {
                    continue;
                };
                let name = after
                    .topics()
                    .by_id
                    .get(&id)
                    .map_or_else(|| id.to_string(), |t| t.name.clone());
                let tp = format!("{name}-{}", c.partition_id);
                if old.leader != new.leader {
                    out.push(format!(
                        "Leader of {tp}: {} -> {} (leader epoch {} -> {}, partition epoch {}, \
                         ISR {:?} -> {:?})",
                        old.leader,
                        new.leader,
                        old.leader_epoch,
                        new.leader_epoch,
                        new.partition_epoch,
                        old.isr,
                        new.isr
                    ));
                } else if old.isr != new.isr {
                    out.push(format!(
                        "ISR of {tp}: {:?} -> {:?} (leader {}, leader epoch {}, partition epoch \
                         {} -> {})",
                        old.isr,
                        new.isr,
                        new.leader,
                        new.leader_epoch,
                        old.partition_epoch,
                        new.partition_epoch
                    ));
                }
            }
            Some(Record::BrokerRegistrationChange(c)) => {
                let (Some(old), Some(new)) =
                    (before.broker(c.broker_id), after.broker(c.broker_id))
                else {
                    continue;
                };
                if old.fenced != new.fenced {
                    out.push(format!(
                        "Broker {} {} (broker epoch {})",
                        c.broker_id,
                        if new.fenced { "fenced" } else { "unfenced" },
                        new.epoch
                    ));
                }
                if !old.in_controlled_shutdown && new.in_controlled_shutdown {
                    out.push(format!(
                        "Broker {} in controlled shutdown (broker epoch {})",
                        c.broker_id, new.epoch
                    ));
                }
            }
            _ => {}
        }
    }
    out
}
