//! High-watermark rules (DESIGN §5; Kafka `Partition.maybeIncrementLeaderHW`, KIP-497,
//! KAFKA-15583, KAFKA-14704). Pure functions; the partition state applies them.
//!
//! The HW is exclusive: consumers read offsets `< HW`.

/// Leader rule: the new HW given the current one.
///
/// - The candidate is the minimum LEO over the *maximal* ISR (committed ISR plus a pending
///   expansion, KIP-497), the leader's own `leader_leo` included. A member whose LEO is
///   unknown (it has not fetched since this leader epoch began) blocks any advance.
/// - No advance while the *committed* ISR is smaller than `min_insync` (KAFKA-15583): data
///   is not exposed as committed while the durability promise is not met.
/// - Never decreases on a leader (seed 004: "HW 只进不退").
pub fn leader_high_watermark(
    current_hw: i64,
    leader_leo: i64,
    maximal_isr_follower_leos: impl IntoIterator<Item = Option<i64>>,
    committed_isr_len: usize,
    min_insync: usize,
) -> i64 {
    if committed_isr_len < min_insync.max(1) {
        return current_hw;
    }
    let mut candidate = leader_leo;
    for leo in maximal_isr_follower_leos {
        match leo {
            Some(leo) => candidate = candidate.min(leo),
            None => return current_hw,
        }
    }
    current_hw.max(candidate)
}

/// Follower rule: `min(leader HW, own LEO)`, at least the log start offset (Kafka
/// `UnifiedLog.updateHighWatermark`). May go down (a new leader's HW can lag). Apply it only
/// after any truncation the same response asked for (KAFKA-14704): see
/// [`crate::replica::follower_fetch`].
pub fn follower_high_watermark(leader_hw: i64, local_leo: i64, log_start_offset: i64) -> i64 {
    leader_hw.min(local_leo).max(log_start_offset)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leader_hw_table() {
        // (current hw, leader leo, follower leos in maximal ISR, committed ISR size, min) -> hw
        type Case = (i64, i64, Vec<Option<i64>>, usize, usize, i64, &'static str);
        let cases: Vec<Case> = vec![
            (
                0,
                11,
                vec![Some(10), Some(8)],
                3,
                1,
                8,
                "min over ISR (seed 004 figure)",
            ),
            (0, 11, vec![Some(10)], 2, 2, 10, "min over ISR of 2"),
            (5, 11, vec![], 1, 1, 11, "leader alone"),
            (
                5,
                11,
                vec![],
                1,
                2,
                5,
                "KAFKA-15583: ISR below min.insync, no advance",
            ),
            (9, 11, vec![Some(8)], 2, 1, 9, "never decreases"),
            (
                3,
                11,
                vec![Some(10), None],
                3,
                1,
                3,
                "unknown member LEO blocks",
            ),
            (3, 3, vec![Some(10)], 2, 1, 3, "bounded by leader LEO"),
            (
                0,
                7,
                vec![Some(7), Some(6)],
                2,
                2,
                6,
                "pending expansion counts (maximal ISR)",
            ),
        ];
        for (hw, leo, leos, isr, min, want, why) in cases {
            assert_eq!(
                leader_high_watermark(hw, leo, leos, isr, min),
                want,
                "{why}"
            );
        }
    }

    #[test]
    fn follower_hw_table() {
        let cases = [
            (10, 7, 0, 7, "own LEO bounds"),
            (5, 7, 0, 5, "leader HW bounds"),
            (2, 7, 4, 4, "never below log start"),
        ];
        for (leader_hw, leo, start, want, why) in cases {
            assert_eq!(
                follower_high_watermark(leader_hw, leo, start),
                want,
                "{why}"
            );
        }
    }
}
