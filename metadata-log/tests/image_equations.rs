//! Image equations (Kafka's `MetadataImageTest` style): image1 + records == image2, image ->
//! records -> image at every prefix, deterministic replay, snapshot round trips, and replay
//! errors that leave the delta unchanged.

mod common;

use common::*;
use keel_metadata_log::records::metadata_record::Record;
use keel_metadata_log::records::{
    LeaderRecoveryState, MetadataRecord, PartitionChangeRecord, ReplicaList,
};
use keel_metadata_log::{
    ConfigResource, MetadataDelta, MetadataImage, Provenance, ReplayError, snapshot,
};
use proptest::prelude::*;

/// Applies batches one entry at a time (entry i at offset i + 1, term 1) and returns every
/// intermediate image, starting with the empty one.
fn images(batches: &[Vec<MetadataRecord>]) -> Vec<MetadataImage> {
    let mut out = vec![MetadataImage::empty()];
    for (i, b) in batches.iter().enumerate() {
        let prev = out.last().unwrap();
        let next = prev
            .with_records(
                Provenance {
                    offset: i as u64 + 1,
                    term: 1,
                },
                b,
            )
            .unwrap_or_else(|(k, e)| {
                panic!("batch {i} record {k} failed: {e}");
            });
        next.check_invariants().unwrap();
        out.push(next);
    }
    out
}

/// Replays batches[from..] on `image`, one delta for all of them.
fn replay_rest(
    image: &MetadataImage,
    batches: &[Vec<MetadataRecord>],
    from: usize,
) -> MetadataImage {
    let mut delta = MetadataDelta::new(image.clone());
    for (i, b) in batches.iter().enumerate().skip(from) {
        delta.set_provenance(Provenance {
            offset: i as u64 + 1,
            term: 1,
        });
        for r in b {
            delta.replay(r).unwrap();
        }
    }
    delta.apply()
}

fn round_trip(image: &MetadataImage) -> MetadataImage {
    MetadataImage::empty()
        .with_records(image.provenance(), &image.to_records())
        .unwrap()
}

/// A scripted history: brokers register, unfence, fence, re-register; topics are created
/// with configs, ISRs shrink and expand, leaders change and go offline, a topic is deleted.
fn scripted() -> Vec<Vec<MetadataRecord>> {
    let orders = topic_id(1);
    let logs = topic_id(2);
    vec![
        vec![
            cluster_id("k7IYI4cNQRCwBqsbjTzOQw"),
            feature("metadata.version", 7),
        ], // 1
        vec![register(1), register(2)], // 2
        vec![register(3)],              // 3
        vec![fence(1, 2, false), fence(2, 2, false), fence(3, 3, false)], // 4
        vec![
            topic("orders", orders),
            topic_config("orders", "min.insync.replicas", Some("2")),
            partition(orders, 0, &[1, 2, 3], &[1, 2, 3], 1),
            partition(orders, 1, &[2, 3, 1], &[2, 3, 1], 2),
        ], // 5
        vec![topic("logs", logs), partition(logs, 0, &[3, 1], &[3, 1], 3)], // 6
        vec![change_isr(orders, 0, &[1, 2])], // 7: shrink
        vec![fence(1, 2, true), change_leader(orders, 0, 2, Some(&[2]))], // 8: fence 1, leader 2
        vec![change_isr(orders, 0, &[2, 3])], // 9: expand
        vec![register(1)],              // 10: restart, epoch 10
        vec![fence(1, 10, false), change_isr(orders, 0, &[2, 3, 1])], // 11
        vec![change_leader(orders, 1, -1, None)], // 12: offline
        vec![change_leader(orders, 1, 3, Some(&[3]))], // 13
        vec![
            producer_ids(2, 2, 1000),
            cluster_config("unclean.leader.election.enable", "false"),
        ], // 14
        vec![
            topic_config("logs", "retention.ms", Some("60000")),
            remove_topic(logs),
        ], // 15
        vec![topic_config("orders", "min.insync.replicas", None)], // 16
        vec![rec(Record::NoOp(Default::default()))], // 17
        vec![
            acl(1, "orders", "User:alice", true),
            acl(2, "orders", "User:bob", false),
        ], // 18
        vec![remove_acl(2), acl(3, "*", "User:*", true)], // 19
        vec![
            scram("alice", false),
            scram("bob", true),
            scram("bob", false),
        ], // 20
        vec![scram("alice", false), remove_scram("bob", true)], // 21: replace, remove
    ]
}

#[test]
fn scripted_history_derives_epochs_and_applies_like_one_delta() {
    let batches = scripted();
    let imgs = images(&batches);
    let last = imgs.last().unwrap();
    let orders = topic_id(1);

    // Broker epochs are the offsets of the registrations.
    assert_eq!(last.broker(1).unwrap().epoch, 10);
    assert_eq!(last.broker(2).unwrap().epoch, 2);
    assert_eq!(last.broker(3).unwrap().epoch, 3);
    assert!(!last.broker(1).unwrap().fenced);

    // orders-0: shrink (pe 1), leader change (le 1, pe 2), expand (pe 3), expand (pe 4).
    let p0 = last.partition(orders, 0).unwrap();
    assert_eq!((p0.leader, p0.leader_epoch, p0.partition_epoch), (2, 1, 4));
    assert_eq!(p0.isr, vec![2, 3, 1]);
    // orders-1: offline (le 1, pe 1) then leader 3 (le 2, pe 2).
    let p1 = last.partition(orders, 1).unwrap();
    assert_eq!((p1.leader, p1.leader_epoch, p1.partition_epoch), (3, 2, 2));
    let offline = imgs[12].partition(orders, 1).unwrap();
    assert_eq!((offline.leader, offline.isr.clone()), (-1, vec![2, 3, 1]));

    // Topic deletion dropped the topic and its configs; the config delete emptied orders'.
    assert!(last.topics().get_by_name("logs").is_none());
    assert!(
        last.configs()
            .get(&ConfigResource::Topic("logs".into()))
            .is_none()
    );
    assert!(
        last.configs()
            .get(&ConfigResource::Topic("orders".into()))
            .is_none()
    );
    assert_eq!(
        imgs[15].config(
            &ConfigResource::Topic("orders".into()),
            "min.insync.replicas"
        ),
        Some("2")
    );
    assert_eq!(last.next_producer_id(), 1000);
    assert_eq!(last.cluster_id(), Some("k7IYI4cNQRCwBqsbjTzOQw"));
    let acl_ids: Vec<u128> = last.acls().by_id().keys().map(|id| id.as_u128()).collect();
    assert_eq!(acl_ids, vec![1, 3]);
    assert_eq!(imgs[18].acls().len(), 2);
    let users = |img: &MetadataImage| {
        keel_metadata_log::scram::users(img.scram_credentials())
            .into_iter()
            .map(|(u, ms)| (u.to_owned(), ms.len()))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        users(&imgs[20]),
        vec![("alice".into(), 1), ("bob".into(), 2)]
    );
    assert_eq!(users(last), vec![("alice".into(), 1), ("bob".into(), 1)]);
    assert_eq!(
        last.provenance(),
        Provenance {
            offset: 21,
            term: 1
        }
    );

    // image_k + records[k..] == image_n, for every k.
    for (k, img) in imgs.iter().enumerate() {
        assert_eq!(&replay_rest(img, &batches, k), last, "split at {k}");
    }
    // image -> records -> image at every prefix.
    for (k, img) in imgs.iter().enumerate() {
        assert_eq!(&round_trip(img), img, "round trip of prefix {k}");
        assert_eq!(round_trip(img).digest(), img.digest());
    }
    // Unchanged parts are shared, not copied.
    assert!(std::ptr::eq(imgs[16].brokers(), imgs[15].brokers()));
}

#[test]
fn replay_errors_are_typed_and_leave_the_delta_unchanged() {
    let batches = scripted();
    let base = images(&batches[..6]).pop().unwrap();
    let base = base
        .with_records(base.provenance(), &[acl(1, "orders", "User:alice", true)])
        .unwrap();
    let orders = topic_id(1);
    let unknown = topic_id(99);
    type Expect = fn(&ReplayError) -> bool;
    let cases: Vec<(MetadataRecord, Expect)> = vec![
        (change_isr(unknown, 0, &[1]), |e| {
            matches!(e, ReplayError::UnknownTopicId { .. })
        }),
        (change_isr(orders, 0, &[1, 4]), |e| {
            matches!(e, ReplayError::InvalidPartition { .. })
        }),
        (change_isr(orders, 0, &[2, 3]), |e| {
            matches!(e, ReplayError::InvalidPartition { .. })
        }), // drops leader 1
        (change_isr(orders, 0, &[]), |e| {
            matches!(e, ReplayError::InvalidPartition { .. })
        }),
        (change_isr(orders, 7, &[1]), |e| {
            matches!(e, ReplayError::UnknownPartition { partition: 7, .. })
        }),
        (partition(orders, 2, &[1, 2], &[3], 3), |e| {
            matches!(e, ReplayError::InvalidPartition { .. })
        }),
        (topic("orders", topic_id(50)), |e| {
            matches!(e, ReplayError::DuplicateTopicName { .. })
        }),
        (topic("fresh", orders), |e| {
            matches!(e, ReplayError::DuplicateTopicId { .. })
        }),
        (fence(1, 99, true), |e| {
            matches!(
                e,
                ReplayError::BrokerEpochMismatch {
                    current: 2,
                    record: 99,
                    ..
                }
            )
        }),
        (fence(42, 1, true), |e| {
            matches!(e, ReplayError::UnknownBroker { broker_id: 42 })
        }),
        (topic_config("nope", "retention.ms", Some("1")), |e| {
            matches!(e, ReplayError::UnknownTopicName { .. })
        }),
        (producer_ids(1, 2, 0), |e| {
            matches!(e, ReplayError::ProducerIdNotIncreasing { .. })
        }),
        (MetadataRecord { record: None }, |e| {
            matches!(e, ReplayError::EmptyRecord)
        }),
        (
            partition(orders, 0, &[1, 2, 3], &[1, 2, 3], 1),
            |e| matches!(e, ReplayError::InvalidPartition { reason, .. } if reason == "partition already exists"),
        ),
        (
            partition(orders, -1, &[1], &[1], 1),
            |e| matches!(e, ReplayError::InvalidPartition { reason, .. } if reason == "negative partition id"),
        ),
        (partition(orders, 5, &[1, -2], &[1], 1), |e| {
            matches!(e, ReplayError::InvalidPartition { .. })
        }),
        (topic("", topic_id(77)), |e| {
            matches!(e, ReplayError::InvalidTopic { .. })
        }),
        (topic("nil", uuid::Uuid::nil()), |e| {
            matches!(e, ReplayError::InvalidTopic { .. })
        }),
        (
            rec(Record::RegisterBroker(
                keel_metadata_log::records::RegisterBrokerRecord {
                    broker_id: 4,
                    incarnation_id: id_bytes(topic_id(5)),
                    broker_epoch: -3,
                    ..Default::default()
                },
            )),
            |e| matches!(e, ReplayError::InvalidRegistration { .. }),
        ),
        (
            rec(Record::PartitionChange(PartitionChangeRecord {
                topic_id: id_bytes(orders),
                partition_id: 0,
                removing_replicas: Some(ReplicaList { ids: vec![9] }),
                ..Default::default()
            })),
            |e| matches!(e, ReplayError::InvalidPartition { .. }),
        ),
        (
            acl(1, "orders", "User:carol", true),
            |e| matches!(e, ReplayError::InvalidAcl { reason } if reason.contains("in use")),
        ),
        (
            remove_acl(99),
            |e| matches!(e, ReplayError::InvalidAcl { reason } if reason.contains("no ACL")),
        ),
        (
            remove_scram("nobody", false),
            |e| matches!(e, ReplayError::InvalidScramCredential { reason } if reason.contains("no SCRAM-SHA-256")),
        ),
        (
            rec(Record::UserScramCredential(
                keel_metadata_log::records::UserScramCredentialRecord {
                    name: "eve".into(),
                    mechanism: 1,
                    salt: vec![1].into(),
                    stored_key: vec![0; 32].into(),
                    server_key: vec![0; 32].into(),
                    iterations: 100,
                },
            )),
            |e| matches!(e, ReplayError::InvalidScramCredential { reason } if reason.contains("iterations 100")),
        ),
        (
            rec(Record::AccessControlEntry(
                keel_metadata_log::records::AccessControlEntryRecord {
                    id: uuid::Uuid::from_u128(50).as_bytes().to_vec().into(),
                    resource_type: 2,
                    resource_name: "t".into(),
                    pattern_type: 3,
                    principal: "alice".into(),
                    host: "*".into(),
                    operation: 3,
                    permission_type: 3,
                },
            )),
            |e| matches!(e, ReplayError::InvalidAcl { reason } if reason.contains("User:<name>")),
        ),
        (cluster_id("other"), |e| {
            matches!(e, ReplayError::ClusterIdChange { .. })
        }),
        (cluster_id(""), |e| {
            matches!(e, ReplayError::ClusterIdChange { .. })
        }),
        (
            rec(Record::PartitionChange(PartitionChangeRecord {
                topic_id: id_bytes(orders),
                partition_id: 0,
                leader_recovery_state: Some(9),
                ..Default::default()
            })),
            |e| matches!(e, ReplayError::UnknownEnumValue { .. }),
        ),
        (
            rec(Record::PartitionChange(PartitionChangeRecord {
                topic_id: bytes::Bytes::from_static(b"short"),
                partition_id: 0,
                isr: Some(ReplicaList { ids: vec![1] }),
                ..Default::default()
            })),
            |e| matches!(e, ReplayError::InvalidUuid { len: 5, .. }),
        ),
    ];
    for (i, (record, expected)) in cases.iter().enumerate() {
        // A delta with an earlier, valid change in it: the failed record must not disturb it.
        let mut delta = MetadataDelta::new(base.clone());
        delta.set_provenance(Provenance { offset: 7, term: 2 });
        delta.replay(&change_isr(orders, 1, &[2, 3])).unwrap();
        let before = delta.clone().apply();
        let err = delta
            .replay(record)
            .expect_err(&format!("case {i} must fail"));
        assert!(expected(&err), "case {i}: unexpected error {err:?}");
        assert!(!err.to_string().is_empty());
        assert_eq!(delta.apply(), before, "case {i} changed the delta");
    }
}

#[test]
fn epoch_overflow_is_a_typed_error_not_a_panic() {
    let t = topic_id(1);
    let base = MetadataImage::empty()
        .with_records(
            Provenance { offset: 1, term: 1 },
            &[register(1), topic("x", t), {
                let mut p = partition(t, 0, &[1], &[1], 1);
                if let Some(Record::Partition(r)) = &mut p.record {
                    r.leader_epoch = i32::MAX;
                    r.partition_epoch = i32::MAX - 1;
                }
                p
            }],
        )
        .unwrap();
    let mut delta = MetadataDelta::new(base.clone());
    // partition epoch reaches i32::MAX: fine.
    delta.replay(&change_isr(t, 0, &[1])).unwrap();
    // The next change would overflow the partition epoch.
    let err = delta.replay(&change_isr(t, 0, &[1])).unwrap_err();
    assert!(
        matches!(&err, ReplayError::InvalidPartition { reason, .. } if reason.contains("overflow")),
        "{err:?}"
    );
    // A leader change would overflow the leader epoch.
    let mut delta = MetadataDelta::new(base);
    let err = delta.replay(&change_leader(t, 0, 1, None)).unwrap_err();
    assert!(
        matches!(&err, ReplayError::InvalidPartition { reason, .. } if reason.contains("leader epoch")),
        "{err:?}"
    );
}

#[test]
fn unclean_recovery_state_round_trips() {
    let batches = scripted();
    let base = images(&batches).pop().unwrap();
    let orders = topic_id(1);
    let unclean = rec(Record::PartitionChange(PartitionChangeRecord {
        topic_id: id_bytes(orders),
        partition_id: 0,
        leader: Some(3),
        isr: Some(ReplicaList { ids: vec![3] }),
        leader_recovery_state: Some(LeaderRecoveryState::Recovering as i32),
        ..Default::default()
    }));
    let img = base
        .with_records(
            Provenance {
                offset: 22,
                term: 2,
            },
            [&unclean],
        )
        .unwrap();
    let p = img.partition(orders, 0).unwrap();
    assert_eq!(p.leader_recovery_state, LeaderRecoveryState::Recovering);
    assert_eq!(
        p.leader_epoch,
        base.partition(orders, 0).unwrap().leader_epoch + 1
    );
    assert_eq!(round_trip(&img), img);
}

fn random_history(seed: u64, len: usize) -> Vec<Vec<MetadataRecord>> {
    let mut rng = Rng(seed);
    let mut image = MetadataImage::empty();
    let mut next_topic = 0;
    let mut out = Vec::with_capacity(len);
    for i in 0..len {
        let offset = i as u64 + 1;
        let batch = random_batch(&mut rng, &image, offset, &mut next_topic);
        image = image
            .with_records(Provenance { offset, term: 1 }, &batch)
            .unwrap_or_else(|(k, e)| {
                panic!("seed {seed}: generated invalid batch {i} record {k}: {e}")
            });
        out.push(batch);
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Replay is deterministic, and snapshots (to_records + file format) preserve the digest,
    /// for random valid histories.
    #[test]
    fn replay_is_deterministic_and_snapshots_preserve_digest(seed in any::<u64>(), len in 1usize..120) {
        let batches = random_history(seed, len);
        let a = images(&batches);
        let b = images(&batches);
        prop_assert_eq!(a.last().unwrap().digest(), b.last().unwrap().digest());
        for (k, img) in a.iter().enumerate() {
            img.check_invariants().map_err(|e| TestCaseError::fail(format!("prefix {k}: {e}")))?;
            let bytes = snapshot::encode(img, b"meta");
            let snap = snapshot::decode(std::path::Path::new("mem"), &bytes).unwrap();
            prop_assert_eq!(&snap.header.raft_meta[..], b"meta");
            let back = snap.to_image(std::path::Path::new("mem")).unwrap();
            prop_assert_eq!(back.digest(), img.digest());
            prop_assert_eq!(&back, img);
        }
        // One delta over the whole history gives the same image as entry-by-entry.
        prop_assert_eq!(&replay_rest(&MetadataImage::empty(), &batches, 0), a.last().unwrap());
    }
}

#[test]
fn digest_differs_when_content_differs() {
    let imgs = images(&scripted());
    let digests: std::collections::HashSet<_> = imgs.iter().skip(1).map(|i| i.digest()).collect();
    // Batch 17 is a no-op: images 16 and 17 have equal content; all others differ.
    assert_eq!(digests.len(), imgs.len() - 2);
    assert_eq!(imgs[16].digest(), imgs[17].digest());
}
