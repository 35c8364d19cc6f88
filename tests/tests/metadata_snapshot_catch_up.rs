//! Multi-process: a broker restarted after the controllers purged the log past its local
//! snapshot catches up through a controller snapshot (FetchMetadata sends the snapshot, the
//! tailer replaces its image), ends with the controllers' digest, and reports the topic
//! deleted while it was down as a local deletion.

use std::time::Duration;

use keel_proto::controller::{DeleteTopicState, DeleteTopicsRequest, DescribeQuorumRequest};
use keel_tests::Endpoints;
use keel_tests::data::*;
use keel_tests::process::*;

const STEP: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarted_broker_catches_up_through_a_controller_snapshot() {
    // Small snapshot interval so a few dozen writes purge the log.
    let mut c = Cluster::start_with(3, 2, &["--metadata-snapshot-max-entries", "20"]);
    c.wait_unfenced(&[1, 2], STEP).await;
    c.create_topic(assigned_topic("keep", &[&[1, 2]]), STEP)
        .await;
    c.create_topic(assigned_topic("gone", &[&[1]]), STEP).await;
    let snap = c
        .broker_data_dir(1)
        .join("__cluster_metadata")
        .join("metadata.snap");
    let local_offset = c
        .wait_for(
            "broker 1's local snapshot with both topics",
            STEP,
            || async {
                let s = keel_metadata_log::snapshot::read_file(&snap).ok()?;
                let img = s.to_image(&snap).ok()?;
                (img.topics().get_by_name("keep").is_some()
                    && img.topics().get_by_name("gone").is_some())
                .then_some(img.provenance().offset)
            },
        )
        .await;
    c.kill_broker(1);

    // While broker 1 is down: delete one of its topics and write enough to purge the log.
    let mut client = c.controller_client(c.active_controller(STEP).await);
    let r = client
        .delete_topics(DeleteTopicsRequest {
            topics: vec![DeleteTopicState {
                name: "gone".into(),
                topic_id: Default::default(),
            }],
        })
        .await
        .unwrap()
        .into_inner();
    assert!(ok(&r.error) && ok(&r.topics[0].error), "{r:?}");
    for i in 0..40 {
        c.create_topic(assigned_topic(&format!("t{i}"), &[&[2]]), STEP)
            .await;
    }
    for id in c.controller_ids() {
        c.wait_for(
            &format!("controller {id} purged past {local_offset}"),
            STEP,
            || async {
                let mut cc = c.controller_client(id);
                let q = cc
                    .describe_quorum(DescribeQuorumRequest {})
                    .await
                    .ok()?
                    .into_inner();
                (q.log_start_offset as u64 > local_offset + 1).then_some(())
            },
        )
        .await;
    }

    c.start_broker(1);
    c.wait_unfenced(&[1, 2], STEP).await;
    c.wait_for("broker 1 received a snapshot", STEP, || async {
        c.broker_log(1)
            .contains("receiving a metadata snapshot at offset")
            .then_some(())
    })
    .await;
    c.assert_digest_matches(1, STEP).await;
    let m = c.try_metadata(1, &[]).await.unwrap();
    let names: Vec<&str> = m.topics.iter().map(|t| t.name.as_str()).collect();
    assert!(
        names.contains(&"keep") && names.contains(&"t39"),
        "{names:?}"
    );
    assert!(!names.contains(&"gone"), "{names:?}");
    // The replica manager acts on metadata once the restarted broker has re-registered and
    // caught up (its previous session must expire first), then deletes the stray log.
    c.wait_for("the deletion is a local change", STEP, || async {
        c.broker_log(1)
            .contains("local replica gone-0: deleted")
            .then_some(())
    })
    .await;
    // Renamed to `gone-0.<id>-delete` at once (Kafka `LogManager.asyncDelete`), then deleted
    // with its files by the broker's deletion service.
    c.wait_for("gone-0's directory removed", STEP, || async {
        let dir = c.broker_data_dir(1);
        let renamed = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(Result::ok)
            .any(|e| e.file_name().to_string_lossy().starts_with("gone-0."));
        (!dir.join("gone-0").exists() && !renamed).then_some(())
    })
    .await;
}
