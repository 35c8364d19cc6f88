//! Random operation sequences through every logic function: whatever the logic returns must
//! replay cleanly and keep the invariants (checked by `Cluster::apply` after each batch).
//! One seed drives a run; a failure names it.

use super::common::{CLUSTER_ID, Cluster, SESSION_TIMEOUT_MS};
use crate::logic::{
    TopicDefaults, alter_configs, alter_partition, create_topics, delete_topics, elect_leaders,
    fence_broker, register_broker, unregister_broker,
};
use keel_proto::controller::{
    AlterConfigsRequest, AlterConfigsResource, AlterPartitionPartition, AlterPartitionRequest,
    AlterPartitionTopic, AlterableConfig, BrokerState, CreatableTopic, CreateTopicsRequest,
    DeleteTopicState, DeleteTopicsRequest, ElectLeadersRequest, ElectionType,
    UnregisterBrokerRequest,
};
use keel_proto::metadata::ConfigResourceType;

/// SplitMix64: reproducible from one seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn chance(&mut self, pct: u64) -> bool {
        self.below(100) < pct
    }
}

const SEEDS: u64 = 24;
const STEPS: usize = 300;
const BROKERS: i32 = 5;

#[test]
fn random_operations_keep_invariants() {
    let mut batches = 0;
    let mut led = 0;
    for seed in 0..SEEDS {
        let result = std::panic::catch_unwind(|| run(seed));
        let (b, l) = result.unwrap_or_else(|_| panic!("failed with seed {seed}"));
        batches += b;
        led += l;
    }
    // The runs must exercise something: many batches, partitions with leaders at the end.
    assert!(batches > SEEDS * 50, "only {batches} batches");
    assert!(led > 0, "no partition had a leader at the end of any run");
}

/// Returns (batches applied, partitions with a leader at the end).
fn run(seed: u64) -> (u64, usize) {
    let mut rng = Rng(seed);
    let mut c = Cluster::new();
    let mut generation = 1u32;
    let mut next_topic = 0u128;
    for _ in 0..STEPS {
        c.now_ms += rng.below(3000);
        let b = 1 + rng.below(BROKERS as u64) as i32;
        match rng.below(12) {
            0 => {
                generation += 1;
                let req = c.register_request(
                    b,
                    [None, Some("r1"), Some("r2")][rng.below(3) as usize],
                    generation,
                );
                let (s, now) = (&c.sessions, c.now_ms);
                let r = register_broker(&c.image, &req, CLUSTER_ID, |id| {
                    s.has_valid_session(id, now, SESSION_TIMEOUT_MS)
                });
                c.commit(r);
            }
            1..=3 if c.image.broker(b).is_some() => {
                let (fence, shut) = (rng.chance(10), rng.chance(10));
                c.heartbeat(b, fence, shut);
            }
            4 => {
                for id in c.sessions.expired(c.now_ms, SESSION_TIMEOUT_MS) {
                    let r = fence_broker(&c.image, id);
                    c.commit(r);
                    c.sessions.set_state(id, true, false);
                }
            }
            5 => {
                next_topic += 1;
                let id = super::common::topic_uuid(next_topic);
                let req = CreateTopicsRequest {
                    topics: vec![CreatableTopic {
                        name: format!("t{}", rng.below(8)),
                        num_partitions: 1 + rng.below(4) as i32,
                        replication_factor: 1 + rng.below(3) as i32,
                        assignments: vec![],
                        configs: vec![],
                    }],
                    validate_only: false,
                };
                let start = rng.below(100) as usize;
                let r = create_topics(&c.image, &req, &TopicDefaults::default(), &mut || id, start);
                c.commit(r);
            }
            6 | 7 => alter_random_isr(&mut c, &mut rng),
            8 => {
                let ty = if rng.chance(50) {
                    ElectionType::Preferred
                } else {
                    ElectionType::Unclean
                };
                let r = elect_leaders(
                    &c.image,
                    &ElectLeadersRequest {
                        election_type: ty as i32,
                        all_partitions: true,
                        topic_partitions: vec![],
                    },
                );
                c.commit(r);
            }
            9 if rng.chance(30) => {
                let r = delete_topics(
                    &c.image,
                    &DeleteTopicsRequest {
                        topics: vec![DeleteTopicState {
                            name: format!("t{}", rng.below(8)),
                            topic_id: bytes::Bytes::new(),
                        }],
                    },
                );
                c.commit(r);
            }
            10 => {
                let r = alter_configs(
                    &c.image,
                    &AlterConfigsRequest {
                        resources: vec![AlterConfigsResource {
                            resource_type: ConfigResourceType::Topic as i32,
                            resource_name: format!("t{}", rng.below(8)),
                            configs: vec![AlterableConfig {
                                name: "unclean.leader.election.enable".into(),
                                op: 0,
                                value: Some(rng.chance(50).to_string()),
                            }],
                            replace_unlisted: false,
                        }],
                        validate_only: false,
                    },
                );
                c.commit(r);
            }
            11 if rng.chance(10) => {
                let r = unregister_broker(&c.image, &UnregisterBrokerRequest { broker_id: b });
                c.commit(r);
                c.sessions.remove(b);
            }
            _ => {}
        }
    }
    let led = c
        .image
        .topics()
        .by_id
        .values()
        .flat_map(|t| t.partitions.values())
        .filter(|p| p.leader != -1)
        .count();
    (c.offset, led)
}

/// A partition leader proposes a random ISR (always containing itself) with the members'
/// current epochs, or occasionally a stale one.
fn alter_random_isr(c: &mut Cluster, rng: &mut Rng) {
    let topics: Vec<_> = c.image.topics().by_id.values().cloned().collect();
    if topics.is_empty() {
        return;
    }
    let t = &topics[rng.below(topics.len() as u64) as usize];
    let (&p, reg) = t
        .partitions
        .iter()
        .nth(rng.below(t.partitions.len() as u64) as usize)
        .unwrap();
    if reg.leader == -1 {
        return;
    }
    let mut isr: Vec<i32> = reg
        .replicas
        .iter()
        .copied()
        .filter(|&b| b == reg.leader || rng.chance(60))
        .collect();
    if rng.chance(20) {
        isr.retain(|&b| b == reg.leader);
    }
    let states = isr
        .iter()
        .map(|&b| BrokerState {
            broker_id: b,
            broker_epoch: c
                .image
                .broker(b)
                .map_or(-1, |r| r.epoch - i64::from(rng.chance(5))),
        })
        .collect();
    let req = AlterPartitionRequest {
        broker_id: reg.leader,
        broker_epoch: c.epoch(reg.leader),
        topics: vec![AlterPartitionTopic {
            topic_id: bytes::Bytes::copy_from_slice(t.id.as_bytes()),
            topic_name: String::new(),
            partitions: vec![AlterPartitionPartition {
                partition_index: p,
                leader_epoch: reg.leader_epoch,
                new_isr_with_epochs: states,
                leader_recovery_state: 0,
                partition_epoch: reg.partition_epoch - i32::from(rng.chance(5)),
                expected_partition_epoch: None,
            }],
        }],
    };
    let r = alter_partition(&c.image, &req);
    c.commit(r);
}
