//! One log line per state change an operator cares about (issue #7 "Logs"), decided on the
//! active controller: leader elections with the old and new leader and epochs, broker fencing
//! / unfencing / controlled shutdown, and ISR changes, each comparing the image before and
//! after one operation's records. Pure: the write path logs what this returns.
//!
//! Levels: a partition going offline and an unclean election are [`ChangeLevel::Warn`] (issue
//! #20: a person may need to act); other elections, fencing and controlled shutdown are
//! [`ChangeLevel::Info`]. ISR changes
//! without a leader change are [`ChangeLevel::Debug`], as in Kafka
//! (`PartitionRegistration.maybeLogPartitionChange` logs clean partition changes at DEBUG):
//! the partition leader that asked for one logs it with its reason ("Shrinking ISR for
//! partition ..."), an operator's comes back to keelctl, and every one is a record in the
//! metadata log. They are the bulk of metadata writes under load; formatting and writing one
//! INFO line each was ~10% of the active controller's CPU in `--bench quorum`.

use keel_metadata_log::MetadataImage;
use keel_metadata_log::image::uuid_from_bytes;
use keel_metadata_log::records::MetadataRecord;
use keel_metadata_log::records::metadata_record::Record;

/// How important a change line is (the log level it is written at).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeLevel {
    /// What may need a person: a partition going offline (no leader), an unclean leader
    /// election (a leader from outside the ISR: acknowledged records may be lost).
    Warn,
    /// Leader elections, fencing, controlled shutdown.
    Info,
    /// ISR changes that keep the leader.
    Debug,
}

/// The change lines for `records`, which take `before` to `after`, in record order, each with
/// its level. [`ChangeLevel::Debug`] lines are left out (not formatted) unless `with_debug`.
pub fn describe_changes(
    before: &MetadataImage,
    after: &MetadataImage,
    records: &[MetadataRecord],
    with_debug: bool,
) -> Vec<(ChangeLevel, String)> {
    let mut out = Vec::new();
    for r in records {
        match &r.record {
            Some(Record::PartitionChange(c)) => {
                partition_change_lines(before, after, c, with_debug, &mut out)
            }
            Some(Record::BrokerRegistrationChange(c)) => {
                broker_change_lines(before, after, c, &mut out)
            }
            _ => {}
        }
    }
    out
}

/// The line of one PartitionChangeRecord: offline (WARN), unclean election (WARN), leader
/// change (INFO), or an ISR change that keeps the leader (DEBUG, only `with_debug`).
fn partition_change_lines(
    before: &MetadataImage,
    after: &MetadataImage,
    c: &keel_metadata_log::records::PartitionChangeRecord,
    with_debug: bool,
    out: &mut Vec<(ChangeLevel, String)>,
) {
    let Some(id) = uuid_from_bytes(&c.topic_id) else {
        return;
    };
    let (Some(old), Some(new)) = (
        before.partition(id, c.partition_id),
        after.partition(id, c.partition_id),
    ) else {
        return;
    };
    let leader_changed = old.leader != new.leader;
    if !leader_changed && (old.isr == new.isr || !with_debug) {
        return;
    }
    let name = after
        .topics()
        .by_id
        .get(&id)
        .map_or_else(|| id.to_string(), |t| t.name.clone());
    let tp = format!("{name}-{}", c.partition_id);
    let recovering = keel_proto::metadata::LeaderRecoveryState::Recovering as i32;
    if leader_changed && new.leader < 0 {
        out.push((
            ChangeLevel::Warn,
            format!(
                "Partition {tp} is offline: no eligible replica in ISR {:?} to lead \
                     it (leader was {}, leader epoch {}); it takes no writes until one \
                     returns (or an unclean election)",
                new.isr, old.leader, new.leader_epoch
            ),
        ));
    } else if leader_changed && c.leader_recovery_state == Some(recovering) {
        out.push((
            ChangeLevel::Warn,
            format!(
                "Unclean leader election for {tp}: {} -> {} (leader epoch {} -> {}), \
                     the new leader was not in the ISR {:?}; records acknowledged only by \
                     the old ISR may be lost",
                old.leader, new.leader, old.leader_epoch, new.leader_epoch, old.isr
            ),
        ));
    } else if leader_changed {
        out.push((
            ChangeLevel::Info,
            format!(
                "Leader of {tp}: {} -> {} (leader epoch {} -> {}, partition epoch {}, \
                 ISR {:?} -> {:?})",
                old.leader,
                new.leader,
                old.leader_epoch,
                new.leader_epoch,
                new.partition_epoch,
                old.isr,
                new.isr
            ),
        ));
    } else {
        out.push((
            ChangeLevel::Debug,
            format!(
                "ISR of {tp}: {:?} -> {:?} (leader {}, leader epoch {}, partition epoch \
                 {} -> {})",
                old.isr,
                new.isr,
                new.leader,
                new.leader_epoch,
                old.partition_epoch,
                new.partition_epoch
            ),
        ));
    }
}

/// The lines of one BrokerRegistrationChangeRecord: fenced or unfenced, and entering
/// controlled shutdown (INFO).
fn broker_change_lines(
    before: &MetadataImage,
    after: &MetadataImage,
    c: &keel_metadata_log::records::BrokerRegistrationChangeRecord,
    out: &mut Vec<(ChangeLevel, String)>,
) {
    let (Some(old), Some(new)) = (before.broker(c.broker_id), after.broker(c.broker_id)) else {
        return;
    };
    if old.fenced != new.fenced {
        out.push((
            ChangeLevel::Info,
            format!(
                "Broker {} {} (broker epoch {})",
                c.broker_id,
                if new.fenced { "fenced" } else { "unfenced" },
                new.epoch
            ),
        ));
    }
    if !old.in_controlled_shutdown && new.in_controlled_shutdown {
        out.push((
            ChangeLevel::Info,
            format!(
                "Broker {} in controlled shutdown (broker epoch {})",
                c.broker_id, new.epoch
            ),
        ));
    }
}
