//! Entry point shared by the cargo-fuzz target `request_validation` (`fuzz/`, libFuzzer) and
//! its short proptest version in the normal test run (`controller/tests/fuzz_props.rs`):
//! arbitrary bytes decoded as a ControllerService request, checked by [`crate::bounds`] and,
//! when within bounds, decided by [`crate::logic`] against a small live cluster (three
//! unfenced brokers, one topic of three partitions).
//!
//! Properties (a failed assertion is a finding, like a panic): no request makes the bounds or
//! the logic panic; bounds messages and DescribeConfigs errors are at most
//! [`MAX_ERROR_MESSAGE_BYTES`](keel_proto::limits::MAX_ERROR_MESSAGE_BYTES); and whatever
//! records the logic returns replay on the image it decided on (the write path treats
//! records that do not replay as a bug and refuses them).

use std::sync::OnceLock;

use keel_metadata_log::{MetadataImage, Provenance};
use keel_proto::common;
use keel_proto::controller::*;
use keel_proto::limits::MAX_ERROR_MESSAGE_BYTES;
use keel_proto::metadata::{BrokerEndpoint, MetadataRecord};
use prost::Message;

use crate::bounds;
use crate::logic::{self, BrokerHeartbeatManager, ControllerResult, TopicDefaults};

/// Clock of the fixture's heartbeat sessions, ms.
const NOW_MS: u64 = 1_000;

/// The cluster the requests are decided against, built once with the logic functions.
fn cluster() -> &'static (MetadataImage, BrokerHeartbeatManager) {
    static CLUSTER: OnceLock<(MetadataImage, BrokerHeartbeatManager)> = OnceLock::new();
    CLUSTER.get_or_init(|| {
        let mut image = MetadataImage::empty();
        let mut sessions = BrokerHeartbeatManager::new();
        let apply = |image: &mut MetadataImage, records: &[MetadataRecord]| {
            let at = Provenance {
                offset: image.provenance().offset + 1,
                term: 1,
            };
            *image = image.with_records(at, records).expect("fixture replays");
        };
        for id in 1..=3 {
            let req = RegisterBrokerRequest {
                broker_id: id,
                incarnation_id: bytes::Bytes::copy_from_slice(&[id as u8; 16]),
                listeners: vec![BrokerEndpoint {
                    name: "PLAINTEXT".into(),
                    host: "127.0.0.1".into(),
                    port: 9092,
                    security_protocol: "PLAINTEXT".into(),
                }],
                ..Default::default()
            };
            let r = logic::register_broker(&image, &req, "", |_| false);
            apply(&mut image, &r.records);
        }
        for id in 1..=3 {
            let offset = image.provenance().offset;
            let req = BrokerHeartbeatRequest {
                broker_id: id,
                broker_epoch: image.broker(id).expect("registered").epoch,
                current_metadata_offset: offset as i64,
                ..Default::default()
            };
            let r = logic::heartbeat(&image, &req, &mut sessions, NOW_MS, offset);
            apply(&mut image, &r.records);
        }
        let req = CreateTopicsRequest {
            topics: vec![CreatableTopic {
                name: "t".into(),
                num_partitions: 3,
                replication_factor: 3,
                ..Default::default()
            }],
            validate_only: false,
        };
        let r = logic::create_topics(
            &image,
            &req,
            &TopicDefaults::default(),
            &mut || uuid::Uuid::from_u128(7),
            0,
        );
        apply(&mut image, &r.records);
        (image, sessions)
    })
}

/// Decodes `data[1..]` as the request kind `data[0]` names, then checks and decides it (see
/// the module doc).
pub fn request(data: &[u8]) {
    let Some((&kind, body)) = data.split_first() else {
        return;
    };
    let (image, sessions) = cluster();
    match kind % 11 {
        0 => decide(body, bounds::register_broker, |r| {
            logic::register_broker(image, r, "", |_| true)
        }),
        1 => decide(body, bounds::broker_heartbeat, |r| {
            let mut sessions = sessions.clone();
            let end = image.provenance().offset;
            logic::heartbeat(image, r, &mut sessions, NOW_MS + 1, end)
        }),
        2 => decide(body, bounds::unregister_broker, |r| {
            logic::unregister_broker(image, r)
        }),
        3 => decide(body, bounds::create_topics, |r| {
            let mut n = 100u128;
            let mut ids = || {
                n += 1;
                uuid::Uuid::from_u128(n)
            };
            logic::create_topics(image, r, &TopicDefaults::default(), &mut ids, 0)
        }),
        4 => decide(body, bounds::delete_topics, |r| {
            logic::delete_topics(image, r)
        }),
        5 => decide(body, bounds::alter_partition, |r| {
            logic::alter_partition(image, r)
        }),
        6 => decide(body, bounds::elect_leaders, |r| {
            logic::elect_leaders(image, r)
        }),
        7 => decide(body, bounds::alter_configs, |r| {
            logic::alter_configs(image, r)
        }),
        8 => decide(body, bounds::allocate_producer_ids, |r| {
            logic::allocate_producer_ids(image, r)
        }),
        9 => {
            if let Ok(r) = DescribeConfigsRequest::decode(body)
                && bounds::describe_configs(&r).is_ok()
            {
                let reply = logic::describe_configs(image, &r);
                check_error(&reply.error);
                for res in &reply.results {
                    check_error(&res.error);
                }
            }
        }
        _ => {
            if let Ok(r) = ReadMetadataLogRequest::decode(body) {
                let _ = bounds::read_metadata_log(&r);
            }
            if let Ok(r) = FetchMetadataRequest::decode(body) {
                let _ = bounds::fetch_metadata(&r);
            }
        }
    }
}

/// Decodes `body` as `Req`; within bounds, decides it and checks the properties.
fn decide<Req: Message + Default, Rep>(
    body: &[u8],
    check: fn(&Req) -> Result<(), keel_proto::limits::FieldError>,
    logic: impl FnOnce(&Req) -> ControllerResult<Rep>,
) {
    let Ok(req) = Req::decode(body) else { return };
    if let Err(e) = check(&req) {
        assert!(
            e.to_string().len() <= MAX_ERROR_MESSAGE_BYTES,
            "bounds message over the limit"
        );
        return;
    }
    let (image, _) = cluster();
    let result = logic(&req);
    if !result.records.is_empty() {
        let at = Provenance {
            offset: image.provenance().offset + 1,
            term: 1,
        };
        if let Err((i, e)) = image.with_records(at, &result.records) {
            panic!("record {i} returned by the logic does not replay: {e}");
        }
    }
}

fn check_error(e: &Option<common::Error>) {
    if let Some(e) = e {
        assert!(e.message.len() <= MAX_ERROR_MESSAGE_BYTES);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fixture_is_a_live_cluster_and_valid_requests_pass() {
        let (image, _) = cluster();
        assert_eq!(image.brokers().values().filter(|b| !b.fenced).count(), 3);
        let create = CreateTopicsRequest {
            topics: vec![CreatableTopic {
                name: "u".into(),
                num_partitions: 2,
                replication_factor: 2,
                ..Default::default()
            }],
            validate_only: false,
        };
        let mut data = vec![3u8];
        data.extend(create.encode_to_vec());
        request(&data);
        request(&[]);
        request(&[0, 0xff, 0xff]);
    }
}
