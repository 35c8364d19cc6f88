//! Kafka's consumer protocol bytes and the client-side assignors, pure.
//!
//! In the classic group protocol the coordinator only relays: each member sends its
//! subscription as protocol metadata in JoinGroup, the leader computes every member's
//! assignment and sends it in SyncGroup. The bytes are Kafka's (`ConsumerProtocolSubscription`
//! and `ConsumerProtocolAssignment`, `clients/src/main/resources/common/message/`), so Keel's
//! consumers and Kafka clients (librdkafka, the Java client, kafka-python) understand each
//! other's metadata and can lead each other's groups.
//!
//! - Subscription: int16 version, int32 topic count, int16-length topic names, int32-length
//!   user data (-1 = null); v1+ owned partitions, v2+ generation, v3+ rack follow. Keel
//!   writes version 0 and reads the topics of any version (later fields are ignored, as the
//!   Java client reads newer versions).
//! - Assignment: int16 version, int32 topic count, per topic an int16-length name and an
//!   int32 count of int32 partitions, then int32-length user data. Keel writes version 0.
//! - Assignors: `range` (Kafka's `RangeAssignor`, the Java client's first default) and
//!   `roundrobin` (`RoundRobinAssignor`), both eager. Members are ordered by static
//!   instance id when they have one, else member id, as Kafka's `MemberInfo` orders them.

use std::collections::{BTreeMap, BTreeSet};

use bytes::{Buf, BufMut, Bytes};

/// The protocol type of consumer groups.
pub const CONSUMER_PROTOCOL_TYPE: &str = "consumer";

/// A client-side partition assignor (Kafka's `partition.assignment.strategy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Assignor {
    /// Per topic, consecutive ranges of partitions to the subscribed members in order; the
    /// first `partitions % members` get one more (Kafka's `RangeAssignor`, name `range`).
    Range,
    /// All subscribed partitions sorted by topic and partition, dealt to the members in turn,
    /// skipping members not subscribed to a partition's topic (Kafka's
    /// `RoundRobinAssignor`, name `roundrobin`).
    RoundRobin,
}

impl Assignor {
    /// The protocol name in JoinGroup, as Kafka's.
    pub fn name(self) -> &'static str {
        match self {
            Assignor::Range => "range",
            Assignor::RoundRobin => "roundrobin",
        }
    }

    /// The assignor called `name`, if Keel has it.
    pub fn from_name(name: &str) -> Option<Assignor> {
        match name {
            "range" => Some(Assignor::Range),
            "roundrobin" => Some(Assignor::RoundRobin),
            _ => None,
        }
    }

    /// The assignment of every member: `members` are (member id, static instance id,
    /// subscribed topics), `partitions` the partition count of each topic (a topic missing
    /// there, e.g. not created yet, gets nothing). Every member of `members` has an entry,
    /// perhaps empty; every partition of a subscribed, known topic goes to exactly one
    /// subscribed member.
    pub fn assign(
        self,
        members: &[(String, Option<String>, Vec<String>)],
        partitions: &BTreeMap<String, i32>,
    ) -> BTreeMap<String, BTreeMap<String, Vec<i32>>> {
        let mut ordered: Vec<&(String, Option<String>, Vec<String>)> = members.iter().collect();
        ordered.sort_by(|a, b| match (&a.1, &b.1) {
            (Some(x), Some(y)) => x.cmp(y).then_with(|| a.0.cmp(&b.0)),
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (None, None) => a.0.cmp(&b.0),
        });
        let mut out: BTreeMap<String, BTreeMap<String, Vec<i32>>> = members
            .iter()
            .map(|(m, _, _)| (m.clone(), BTreeMap::new()))
            .collect();
        let topics: BTreeSet<&String> = members.iter().flat_map(|(_, _, t)| t).collect();
        let subscribed = |topic: &str| -> Vec<&String> {
            ordered
                .iter()
                .filter(|(_, _, t)| t.iter().any(|x| x == topic))
                .map(|(m, _, _)| m)
                .collect()
        };
        match self {
            Assignor::Range => {
                for topic in topics {
                    let n = partitions.get(topic).copied().unwrap_or(0).max(0);
                    let consumers = subscribed(topic);
                    let c = consumers.len() as i32;
                    if c == 0 {
                        continue;
                    }
                    let (per, extra) = (n / c, n % c);
                    for (i, m) in consumers.into_iter().enumerate() {
                        let i = i as i32;
                        let start = i * per + i.min(extra);
                        let len = per + i32::from(i < extra);
                        if len > 0 {
                            out.get_mut(m.as_str())
                                .expect("every member has an entry")
                                .insert(topic.clone(), (start..start + len).collect());
                        }
                    }
                }
            }
            Assignor::RoundRobin => {
                let mut next = 0usize;
                for topic in topics {
                    let n = partitions.get(topic).copied().unwrap_or(0).max(0);
                    let consumers = subscribed(topic);
                    for p in 0..n {
                        // Deal in member order, skipping those not subscribed to `topic`
                        // (at least one is: `topic` came from a subscription).
                        loop {
                            let (m, _, t) = ordered[next % ordered.len()];
                            next += 1;
                            if t.iter().any(|x| x == topic) {
                                out.get_mut(m.as_str())
                                    .expect("every member has an entry")
                                    .entry(topic.clone())
                                    .or_default()
                                    .push(p);
                                break;
                            }
                        }
                    }
                    debug_assert!(n == 0 || !consumers.is_empty());
                }
            }
        }
        out
    }
}

fn put_string(b: &mut Vec<u8>, s: &str) {
    // Topic names are at most 249 bytes; longer strings cannot be encoded as int16.
    let len = i16::try_from(s.len()).expect("a topic name fits an int16 length");
    b.put_i16(len);
    b.put_slice(s.as_bytes());
}

/// A version 0 `ConsumerProtocolSubscription` of `topics` with null user data.
pub fn encode_subscription(topics: &[String]) -> Bytes {
    let mut b = Vec::with_capacity(10 + topics.iter().map(|t| 2 + t.len()).sum::<usize>());
    b.put_i16(0);
    b.put_i32(topics.len() as i32);
    for t in topics {
        put_string(&mut b, t);
    }
    b.put_i32(-1);
    Bytes::from(b)
}

fn get_string(b: &mut &[u8]) -> Option<String> {
    if b.remaining() < 2 {
        return None;
    }
    let len = usize::try_from(b.get_i16()).ok()?;
    if b.remaining() < len {
        return None;
    }
    let s = String::from_utf8(b[..len].to_vec()).ok()?;
    b.advance(len);
    Some(s)
}

/// The topics of a `ConsumerProtocolSubscription` of any version (later fields ignored).
/// `None` if the bytes are not one.
pub fn decode_subscription(mut b: &[u8]) -> Option<Vec<String>> {
    if b.remaining() < 6 {
        return None;
    }
    let _version = b.get_i16();
    let n = b.get_i32();
    if n < 0 || n as usize > b.remaining() / 2 {
        return None;
    }
    (0..n).map(|_| get_string(&mut b)).collect()
}

/// A version 0 `ConsumerProtocolAssignment` of `topics` (topic -> partitions) with null user
/// data.
pub fn encode_assignment(topics: &BTreeMap<String, Vec<i32>>) -> Bytes {
    let mut b = Vec::new();
    b.put_i16(0);
    b.put_i32(topics.len() as i32);
    for (t, ps) in topics {
        put_string(&mut b, t);
        b.put_i32(ps.len() as i32);
        for p in ps {
            b.put_i32(*p);
        }
    }
    b.put_i32(-1);
    Bytes::from(b)
}

/// The partitions of a `ConsumerProtocolAssignment` of any version (user data and later
/// fields ignored). `None` if the bytes are not one (another protocol type, or damage).
pub fn decode_assignment(mut b: &[u8]) -> Option<Vec<(String, Vec<i32>)>> {
    if b.remaining() < 6 {
        return None;
    }
    let _version = b.get_i16();
    let topics = b.get_i32();
    if topics < 0 || topics as usize > b.remaining() / 6 {
        return None;
    }
    let mut out = Vec::with_capacity(topics as usize);
    for _ in 0..topics {
        let name = get_string(&mut b)?;
        if b.remaining() < 4 {
            return None;
        }
        let n = b.get_i32();
        if n < 0 || n as usize > b.remaining() / 4 {
            return None;
        }
        let parts = (0..n).map(|_| b.get_i32()).collect();
        out.push((name, parts));
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members(spec: &[(&str, &[&str])]) -> Vec<(String, Option<String>, Vec<String>)> {
        spec.iter()
            .map(|(m, ts)| {
                (
                    m.to_string(),
                    None,
                    ts.iter().map(|t| t.to_string()).collect(),
                )
            })
            .collect()
    }

    fn counts(spec: &[(&str, i32)]) -> BTreeMap<String, i32> {
        spec.iter().map(|(t, n)| (t.to_string(), *n)).collect()
    }

    fn of(a: &BTreeMap<String, BTreeMap<String, Vec<i32>>>, m: &str, t: &str) -> Vec<i32> {
        a[m].get(t).cloned().unwrap_or_default()
    }

    #[test]
    fn range_gives_consecutive_ranges_and_the_first_members_the_remainder() {
        // Kafka's RangeAssignor javadoc example: 2 consumers, 2 topics of 3 partitions.
        let m = members(&[("c1", &["t0", "t1"]), ("c0", &["t0", "t1"])]);
        let a = Assignor::Range.assign(&m, &counts(&[("t0", 3), ("t1", 3)]));
        assert_eq!(of(&a, "c0", "t0"), vec![0, 1]);
        assert_eq!(of(&a, "c0", "t1"), vec![0, 1]);
        assert_eq!(of(&a, "c1", "t0"), vec![2]);
        assert_eq!(of(&a, "c1", "t1"), vec![2]);
        // 6 partitions over 2 members: 3 each; over 1: all 6.
        let a = Assignor::Range.assign(
            &members(&[("a", &["t"]), ("b", &["t"])]),
            &counts(&[("t", 6)]),
        );
        assert_eq!(
            (of(&a, "a", "t"), of(&a, "b", "t")),
            (vec![0, 1, 2], vec![3, 4, 5])
        );
        let a = Assignor::Range.assign(&members(&[("a", &["t"])]), &counts(&[("t", 6)]));
        assert_eq!(of(&a, "a", "t"), (0..6).collect::<Vec<_>>());
    }

    #[test]
    fn roundrobin_deals_in_turn_and_skips_unsubscribed_members() {
        // Kafka's RoundRobinAssignor javadoc example: c0 {t0}, c1 {t0, t1}, c2 {t0, t1, t2};
        // t0 has 1 partition, t1 2, t2 3.
        let m = members(&[
            ("c0", &["t0"]),
            ("c1", &["t0", "t1"]),
            ("c2", &["t0", "t1", "t2"]),
        ]);
        let a = Assignor::RoundRobin.assign(&m, &counts(&[("t0", 1), ("t1", 2), ("t2", 3)]));
        assert_eq!(of(&a, "c0", "t0"), vec![0]);
        assert_eq!(of(&a, "c1", "t1"), vec![0]);
        assert_eq!(of(&a, "c2", "t1"), vec![1]);
        assert_eq!(of(&a, "c2", "t2"), vec![0, 1, 2]);
    }

    #[test]
    fn every_partition_goes_to_exactly_one_subscribed_member() {
        let m = members(&[
            ("a", &["x", "y"]),
            ("b", &["y"]),
            ("c", &["x", "z"]),
            ("d", &[]),
        ]);
        let n = counts(&[("x", 7), ("y", 5), ("z", 1), ("unused", 4)]);
        for assignor in [Assignor::Range, Assignor::RoundRobin] {
            let a = assignor.assign(&m, &n);
            assert_eq!(a.len(), 4, "{assignor:?}: an entry per member");
            let mut seen = BTreeSet::new();
            for (member, topics) in &a {
                let subs = &m.iter().find(|x| &x.0 == member).unwrap().2;
                for (t, ps) in topics {
                    assert!(
                        subs.contains(t),
                        "{assignor:?}: {member} got unsubscribed {t}"
                    );
                    for p in ps {
                        assert!(seen.insert((t.clone(), *p)), "{assignor:?}: {t}-{p} twice");
                    }
                }
            }
            assert_eq!(seen.len(), 13, "{assignor:?}: x 7 + y 5 + z 1");
        }
        // A topic without a partition count (not created yet) is not assigned.
        let a = Assignor::Range.assign(&members(&[("a", &["nope"])]), &BTreeMap::new());
        assert!(a["a"].is_empty());
    }

    #[test]
    fn static_members_order_by_instance_id() {
        let m = vec![
            (
                "z-member".to_string(),
                Some("i-1".to_string()),
                vec!["t".to_string()],
            ),
            (
                "a-member".to_string(),
                Some("i-2".to_string()),
                vec!["t".to_string()],
            ),
        ];
        let a = Assignor::Range.assign(&m, &counts(&[("t", 2)]));
        assert_eq!(of(&a, "z-member", "t"), vec![0]);
        assert_eq!(of(&a, "a-member", "t"), vec![1]);
    }

    #[test]
    fn subscriptions_and_assignments_round_trip_and_damage_is_none() {
        let topics = vec!["a".to_string(), "bb".to_string()];
        let s = encode_subscription(&topics);
        assert_eq!(decode_subscription(&s), Some(topics));
        // A v1 subscription from a Java client: owned partitions follow, ignored.
        let mut v1 = s.to_vec();
        v1[1] = 1;
        v1.extend_from_slice(&[0, 0, 0, 0]);
        assert_eq!(decode_subscription(&v1).unwrap().len(), 2);
        for cut in 0..s.len() - 4 {
            assert_eq!(decode_subscription(&s[..cut]), None, "cut at {cut}");
        }

        let mut parts = BTreeMap::new();
        parts.insert("a".to_string(), vec![0, 2]);
        parts.insert("bb".to_string(), vec![1]);
        let b = encode_assignment(&parts);
        assert_eq!(
            decode_assignment(&b),
            Some(vec![("a".into(), vec![0, 2]), ("bb".into(), vec![1])])
        );
        for cut in 0..b.len() - 4 {
            assert_eq!(decode_assignment(&b[..cut]), None, "cut at {cut}");
        }
        assert_eq!(decode_assignment(&[0, 0, 0x7f, 0xff, 0xff, 0xff]), None);
        assert_eq!(decode_subscription(&[0, 0, 0x7f, 0xff, 0xff, 0xff]), None);
    }
}
