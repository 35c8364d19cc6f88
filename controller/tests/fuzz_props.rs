//! Short proptest version of the request-validation fuzz target
//! (`fuzz/fuzz_targets/request_validation.rs`; entry point `keel_controller::fuzz::request`),
//! run in the normal test suite: every committed seed of `fuzz/corpus/request_validation/`,
//! then random bytes and random mutations of valid encoded requests.

use keel_controller::fuzz;
use keel_proto::controller::*;
use keel_proto::metadata::BrokerEndpoint;
use keel_record::fuzz::corpus_seeds;
use proptest::prelude::*;
use prost::Message;

/// Valid requests of several kinds, each prefixed with its kind byte.
pub fn valid_requests() -> Vec<Vec<u8>> {
    let with_kind = |kind: u8, body: Vec<u8>| {
        let mut v = vec![kind];
        v.extend(body);
        v
    };
    vec![
        with_kind(
            0,
            RegisterBrokerRequest {
                broker_id: 4,
                incarnation_id: vec![4; 16].into(),
                listeners: vec![BrokerEndpoint {
                    name: "PLAINTEXT".into(),
                    host: "h".into(),
                    port: 1,
                    security_protocol: "PLAINTEXT".into(),
                }],
                rack: "r".into(),
                ..Default::default()
            }
            .encode_to_vec(),
        ),
        with_kind(
            3,
            CreateTopicsRequest {
                topics: vec![CreatableTopic {
                    name: "new".into(),
                    num_partitions: 2,
                    replication_factor: 2,
                    configs: vec![ConfigEntry {
                        name: "min.insync.replicas".into(),
                        value: Some("2".into()),
                    }],
                    ..Default::default()
                }],
                validate_only: false,
            }
            .encode_to_vec(),
        ),
        with_kind(
            5,
            AlterPartitionRequest {
                broker_id: -1,
                broker_epoch: -1,
                topics: vec![AlterPartitionTopic {
                    topic_name: "t".into(),
                    partitions: vec![AlterPartitionPartition {
                        partition_index: 0,
                        leader_epoch: -1,
                        partition_epoch: -1,
                        new_isr_with_epochs: vec![BrokerState {
                            broker_id: 1,
                            broker_epoch: -1,
                        }],
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
            }
            .encode_to_vec(),
        ),
        with_kind(
            6,
            ElectLeadersRequest {
                election_type: 1,
                all_partitions: true,
                ..Default::default()
            }
            .encode_to_vec(),
        ),
        with_kind(
            7,
            AlterConfigsRequest {
                resources: vec![AlterConfigsResource {
                    resource_type: 2,
                    resource_name: "t".into(),
                    configs: vec![AlterableConfig {
                        name: "retention.ms".into(),
                        op: 0,
                        value: Some("5".into()),
                    }],
                    replace_unlisted: false,
                }],
                validate_only: false,
            }
            .encode_to_vec(),
        ),
    ]
}

#[test]
fn committed_seeds_pass() {
    for seed in corpus_seeds("request_validation") {
        fuzz::request(&seed);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn any_bytes_are_refused_or_decided(data in proptest::collection::vec(any::<u8>(), 0..300)) {
        fuzz::request(&data);
    }

    #[test]
    fn mutated_requests_are_refused_or_decided(
        which in 0usize..5,
        changes in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..4),
    ) {
        let mut data = valid_requests().swap_remove(which);
        for (at, byte) in changes {
            let at = 1 + at % (data.len() - 1);
            data[at] = byte;
        }
        fuzz::request(&data);
    }
}
