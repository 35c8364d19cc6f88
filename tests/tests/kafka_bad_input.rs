//! Bad input on a broker's Kafka listener (#21, "Acceptance: Bad input"), over raw TCP:
//! ApiVersions v99, Produce v2, a truncated frame, a body declaring a 2^31-1 element array,
//! frame sizes of 2 GiB and negative, a gzip bomb, a batch with a wrong CRC, `acks=0`
//! produces (good and bad) and a pipelined burst; and the consumer-group calls with bad
//! input (#22): Kafka's error codes and nothing committed. Each case gets Kafka's error code or a
//! closed connection (with the broker's own reason, read from its debug log), the broker
//! keeps serving (ApiVersions and Metadata on a new connection answer) and nothing is
//! appended (the partition's log end offset is unchanged), except where a case appends on
//! purpose (`acks=0` of a good batch, the burst's produces), which is checked exactly.
//!
//! Why: the listener faces whatever a network peer sends; a Kafka client never sends most
//! of this, so only hand-made bytes show that each path ends in an answer or a close and
//! never in a crash, a hang, an allocation sized by the peer, or a partial append. One
//! controller and one broker suffice: nothing here is about replication.

use std::io::Write;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::api_versions_response::ApiVersionsResponse;
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::{
    OffsetFetchRequestGroup, OffsetFetchRequestTopics,
};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, DeleteGroupsRequest, DeleteGroupsResponse, DeleteTopicsRequest,
    DeleteTopicsResponse, FindCoordinatorRequest, FindCoordinatorResponse, GroupId,
    HeartbeatRequest, HeartbeatResponse, JoinGroupRequest, JoinGroupResponse, LeaveGroupRequest,
    LeaveGroupResponse, MetadataRequest, MetadataResponse, OffsetCommitRequest,
    OffsetCommitResponse, OffsetDeleteRequest, OffsetDeleteResponse, OffsetFetchRequest,
    OffsetFetchResponse, ProduceRequest, ProduceResponse, RequestHeader, ResponseHeader,
    SyncGroupRequest, SyncGroupResponse, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use keel_proto::ErrorCode;
use keel_tests::data::{assigned_topic, batch, code, gzip_bomb, values};
use keel_tests::{Endpoints, InProcessCluster};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const WAIT: Duration = Duration::from_secs(20);
/// Longest wait for a response or for the broker to close a connection.
const IO_DEADLINE: Duration = Duration::from_secs(10);
const TOPIC: &str = "bad";
/// Records in the topic before any case runs.
const BASELINE: i64 = 2;

// ---------------------------------------------------------------------------------------
// The broker's reasons for closing a connection: its `kafka connection closed: ...` debug
// lines, captured from the process-wide log (the in-process broker logs into this process).
// ---------------------------------------------------------------------------------------

#[derive(Clone)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn log() -> &'static Arc<Mutex<Vec<u8>>> {
    static LOG: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOG.get_or_init(|| {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let writer = Capture(buf.clone());
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(
                "keel_broker::kafka=debug",
            ))
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .try_init();
        buf
    })
}

/// The broker's reason for closing the connection from `peer`, waited for (it is logged
/// just after the close).
async fn close_reason(peer: SocketAddr) -> String {
    let needle = format!("peer={peer}");
    let deadline = Instant::now() + IO_DEADLINE;
    loop {
        let text = String::from_utf8_lossy(&log().lock().unwrap()).into_owned();
        if let Some(line) = text
            .lines()
            .find(|l| l.contains("kafka connection closed") && l.ends_with(&needle))
        {
            let reason = line
                .split_once("kafka connection closed: ")
                .map_or(line, |(_, r)| r);
            return reason.trim_end_matches(&needle).trim().to_string();
        }
        assert!(
            Instant::now() < deadline,
            "the broker logged no close reason for {peer}; its Kafka log:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

// ---------------------------------------------------------------------------------------
// Raw Kafka requests and responses.
// ---------------------------------------------------------------------------------------

/// A framed request: size, request header (its version from the API and version), body.
fn frame(key: ApiKey, version: i16, correlation_id: i32, body: &[u8]) -> Vec<u8> {
    let mut out = BytesMut::new();
    out.put_i32(0);
    RequestHeader::default()
        .with_request_api_key(key as i16)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_static_str("keel-bad-input")))
        .encode(&mut out, key.request_header_version(version))
        .expect("encode a request header");
    out.extend_from_slice(body);
    let size = (out.len() - 4) as i32;
    out[..4].copy_from_slice(&size.to_be_bytes());
    out.to_vec()
}

/// `msg` encoded at `version`.
fn body<M: Encodable>(msg: &M, version: i16) -> Vec<u8> {
    let mut out = BytesMut::new();
    msg.encode(&mut out, version)
        .expect("encode a request body");
    out.to_vec()
}

fn api_versions(correlation_id: i32) -> Vec<u8> {
    let req = ApiVersionsRequest::default()
        .with_client_software_name(StrBytes::from_static_str("keel-tests"))
        .with_client_software_version(StrBytes::from_static_str("1"));
    frame(ApiKey::ApiVersions, 3, correlation_id, &body(&req, 3))
}

fn metadata(version: i16, correlation_id: i32) -> Vec<u8> {
    let req = MetadataRequest::default().with_topics(Some(vec![
        MetadataRequestTopic::default().with_name(Some(topic_name(TOPIC))),
    ]));
    frame(
        ApiKey::Metadata,
        version,
        correlation_id,
        &body(&req, version),
    )
}

fn topic_name(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_string()))
}

/// A Produce v9 of `records` to `TOPIC`-0.
fn produce(acks: i16, correlation_id: i32, records: Bytes) -> Vec<u8> {
    let req = ProduceRequest::default()
        .with_acks(acks)
        .with_timeout_ms(5000)
        .with_topic_data(vec![
            TopicProduceData::default()
                .with_name(topic_name(TOPIC))
                .with_partition_data(vec![
                    PartitionProduceData::default()
                        .with_index(0)
                        .with_records(Some(records)),
                ]),
        ]);
    frame(ApiKey::Produce, 9, correlation_id, &body(&req, 9))
}

/// Reads one response frame within [`IO_DEADLINE`]; `None` if the broker closed the
/// connection (end of stream or reset) first.
async fn read_frame(s: &mut TcpStream) -> Option<Bytes> {
    let read = async {
        let mut size = [0u8; 4];
        s.read_exact(&mut size).await?;
        let size = i32::from_be_bytes(size);
        assert!(
            (0..=64 << 20).contains(&size),
            "response size {size} out of range"
        );
        let mut buf = vec![0u8; size as usize];
        s.read_exact(&mut buf).await?;
        Ok::<_, std::io::Error>(Bytes::from(buf))
    };
    match tokio::time::timeout(IO_DEADLINE, read).await {
        Err(_) => panic!("no response and no close within {IO_DEADLINE:?}"),
        Ok(Ok(b)) => Some(b),
        Ok(Err(e)) => {
            assert!(
                matches!(
                    e.kind(),
                    std::io::ErrorKind::UnexpectedEof
                        | std::io::ErrorKind::ConnectionReset
                        | std::io::ErrorKind::ConnectionAborted
                ),
                "reading a response: {e}"
            );
            None
        }
    }
}

/// The response to the request with `correlation_id`: checks the header, returns the body.
fn response(mut frame: Bytes, key: ApiKey, version: i16, correlation_id: i32) -> Bytes {
    let header = ResponseHeader::decode(&mut frame, key.response_header_version(version))
        .expect("a response header");
    assert_eq!(header.correlation_id, correlation_id, "{key:?} v{version}");
    frame
}

/// Reads the broker's response to `key` v`version` with `correlation_id` and decodes it,
/// checking that it uses the whole frame.
async fn read_response<M: Decodable>(
    s: &mut TcpStream,
    key: ApiKey,
    version: i16,
    correlation_id: i32,
) -> M {
    let frame = read_frame(s)
        .await
        .unwrap_or_else(|| panic!("{key:?} v{version}: connection closed, no response"));
    let mut b = response(frame, key, version, correlation_id);
    let msg = M::decode(&mut b, version)
        .unwrap_or_else(|e| panic!("{key:?} v{version}: bad response body: {e}"));
    assert_eq!(b.remaining(), 0, "{key:?} v{version}: bytes after the body");
    msg
}

/// Asserts the broker closes `s` without a response and returns its logged reason.
async fn assert_closed(s: &mut TcpStream, what: &str) -> String {
    let peer = s.local_addr().expect("a local address");
    if let Some(frame) = read_frame(s).await {
        panic!("{what}: a response instead of a close: {frame:02x?}");
    }
    let reason = close_reason(peer).await;
    eprintln!("{what}: closed by the broker: {reason}");
    reason
}

async fn connect(c: &InProcessCluster) -> TcpStream {
    let s = TcpStream::connect(c.kafka_addr(1))
        .await
        .expect("connect to the Kafka listener");
    s.set_nodelay(true).unwrap();
    s
}

async fn send(s: &mut TcpStream, bytes: &[u8]) {
    s.write_all(bytes).await.expect("write a request");
}

/// The broker still serves Kafka clients: ApiVersions v3 and Metadata v1 on a new
/// connection answer without error, Metadata with this broker at its Kafka address.
async fn assert_serving(c: &InProcessCluster, after: &str) {
    let mut s = connect(c).await;
    send(&mut s, &api_versions(1)).await;
    let v: ApiVersionsResponse = read_response(&mut s, ApiKey::ApiVersions, 3, 1).await;
    assert_eq!(v.error_code, 0, "after {after}: ApiVersions");
    send(&mut s, &metadata(1, 2)).await;
    let m: MetadataResponse = read_response(&mut s, ApiKey::Metadata, 1, 2).await;
    let brokers: Vec<(i32, i32)> = m.brokers.iter().map(|b| (b.node_id.0, b.port)).collect();
    assert_eq!(
        brokers,
        [(1, i32::from(c.kafka_addr(1).port()))],
        "after {after}: Metadata brokers"
    );
    assert_eq!(m.topics.len(), 1, "after {after}: {m:?}");
    assert_eq!(m.topics[0].error_code, 0, "after {after}: {m:?}");
}

async fn leo(c: &InProcessCluster) -> i64 {
    c.replica(1, TOPIC, 0)
        .await
        .expect("the broker describes its replica")
        .log_end_offset
}

/// A 1-controller, 1-broker cluster with `TOPIC` (one partition) holding [`BASELINE`]
/// records.
async fn cluster() -> InProcessCluster {
    log();
    let c = InProcessCluster::start(1, 1);
    c.wait_unfenced(&[1], WAIT).await;
    c.create_topic(assigned_topic(TOPIC, &[&[1]]), WAIT).await;
    c.wait_leader_isr(1, TOPIC, &[1], WAIT).await;
    let r = c.produce(1, TOPIC, -1, &values("before", 0..2)).await;
    assert_eq!(code(&r), ErrorCode::None);
    assert_eq!(leo(&c).await, BASELINE);
    c
}

// ---------------------------------------------------------------------------------------
// The cases.
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_unsupported_versions_get_kafka_errors() {
    let c = cluster().await;

    // ApiVersions v99 (request header v2, as a client of a future version sends it):
    // answered at v0 (response header v0) with UNSUPPORTED_VERSION and our ranges (KIP-511).
    let mut s = connect(&c).await;
    let future = ApiVersionsRequest::default()
        .with_client_software_name(StrBytes::from_static_str("keel-tests"))
        .with_client_software_version(StrBytes::from_static_str("99"));
    send(
        &mut s,
        &frame(ApiKey::ApiVersions, 99, 7, &body(&future, 3)),
    )
    .await;
    let v: ApiVersionsResponse = read_response(&mut s, ApiKey::ApiVersions, 0, 7).await;
    assert_eq!(v.error_code, ErrorCode::UnsupportedVersion.code(), "{v:?}");
    let ranges: Vec<(i16, i16, i16)> = v
        .api_keys
        .iter()
        .map(|k| (k.api_key, k.min_version, k.max_version))
        .collect();
    assert_eq!(
        ranges,
        [
            (ApiKey::Produce as i16, 0, 11),
            (ApiKey::Fetch as i16, 4, 12),
            (ApiKey::ListOffsets as i16, 1, 10),
            (ApiKey::Metadata as i16, 0, 12),
            (ApiKey::OffsetCommit as i16, 2, 8),
            (ApiKey::OffsetFetch as i16, 1, 8),
            (ApiKey::FindCoordinator as i16, 0, 4),
            (ApiKey::JoinGroup as i16, 0, 9),
            (ApiKey::Heartbeat as i16, 0, 4),
            (ApiKey::LeaveGroup as i16, 0, 5),
            (ApiKey::SyncGroup as i16, 0, 5),
            (ApiKey::DescribeGroups as i16, 0, 5),
            (ApiKey::ListGroups as i16, 0, 5),
            (ApiKey::SaslHandshake as i16, 0, 1),
            (ApiKey::ApiVersions as i16, 0, 4),
            (ApiKey::CreateTopics as i16, 2, 7),
            (ApiKey::DeleteTopics as i16, 1, 6),
            (ApiKey::DeleteRecords as i16, 0, 2),
            (ApiKey::InitProducerId as i16, 0, 5),
            (ApiKey::OffsetForLeaderEpoch as i16, 2, 4),
            (ApiKey::DescribeAcls as i16, 1, 3),
            (ApiKey::CreateAcls as i16, 1, 3),
            (ApiKey::DeleteAcls as i16, 1, 3),
            (ApiKey::DescribeConfigs as i16, 1, 4),
            (ApiKey::AlterConfigs as i16, 0, 2),
            (ApiKey::DescribeLogDirs as i16, 1, 4),
            (ApiKey::SaslAuthenticate as i16, 0, 2),
            (ApiKey::CreatePartitions as i16, 0, 3),
            (ApiKey::DeleteGroups as i16, 0, 2),
            (ApiKey::ElectLeaders as i16, 0, 2),
            (ApiKey::IncrementalAlterConfigs as i16, 0, 1),
            (ApiKey::AlterPartitionReassignments as i16, 0, 0),
            (ApiKey::ListPartitionReassignments as i16, 0, 0),
            (ApiKey::OffsetDelete as i16, 0, 0),
            (ApiKey::DescribeUserScramCredentials as i16, 0, 0),
            (ApiKey::AlterUserScramCredentials as i16, 0, 0),
            (ApiKey::DescribeCluster as i16, 0, 2),
        ],
        "the advertised ranges"
    );
    // The client retries with a version it shares, on the same connection.
    send(&mut s, &api_versions(8)).await;
    let v: ApiVersionsResponse = read_response(&mut s, ApiKey::ApiVersions, 3, 8).await;
    assert_eq!(v.error_code, 0);
    drop(s);
    assert_serving(&c, "ApiVersions v99").await;

    // Produce v2, acks=1, of a valid v2 batch: every partition (even of an unknown topic
    // and partition: nothing is looked up) UNSUPPORTED_VERSION in the v0-2 layout.
    let mut b = BytesMut::new();
    b.put_i16(1); // acks
    b.put_i32(5000); // timeout_ms
    let records = batch(&values("v2", 0..3));
    let topics: [(&str, &[i32]); 2] = [(TOPIC, &[0, 1]), ("no-such-topic", &[0])];
    b.put_i32(topics.len() as i32);
    for (name, partitions) in topics {
        b.put_i16(name.len() as i16);
        b.put_slice(name.as_bytes());
        b.put_i32(partitions.len() as i32);
        for p in partitions {
            b.put_i32(*p);
            b.put_i32(records.len() as i32);
            b.put_slice(&records);
        }
    }
    let mut s = connect(&c).await;
    send(&mut s, &frame(ApiKey::Produce, 2, 21, &b)).await;
    let mut r = read_frame(&mut s).await.expect("a Produce v2 response");
    assert_eq!(r.get_i32(), 21, "correlation id (response header v0)");
    assert_eq!(r.get_i32(), topics.len() as i32, "topics");
    for (name, partitions) in topics {
        let len = r.get_i16() as usize;
        assert_eq!(&r.split_to(len)[..], name.as_bytes());
        assert_eq!(r.get_i32(), partitions.len() as i32, "{name}: partitions");
        for p in partitions {
            assert_eq!(r.get_i32(), *p, "{name}: partition index");
            assert_eq!(
                r.get_i16(),
                ErrorCode::UnsupportedVersion.code(),
                "{name}-{p}: error code"
            );
            assert_eq!(r.get_i64(), -1, "{name}-{p}: base_offset");
            assert_eq!(r.get_i64(), -1, "{name}-{p}: log_append_time_ms (v2)");
        }
    }
    assert_eq!(r.get_i32(), 0, "throttle_time_ms (v1+)");
    assert_eq!(r.remaining(), 0, "bytes after the v2 response");
    // The connection stays usable.
    send(&mut s, &api_versions(22)).await;
    let v: ApiVersionsResponse = read_response(&mut s, ApiKey::ApiVersions, 3, 22).await;
    assert_eq!(v.error_code, 0);
    assert_eq!(leo(&c).await, BASELINE, "Produce v2 appended nothing");

    // Produce v2 with acks=0: no response can carry the error, so the connection closes.
    b[..2].copy_from_slice(&0i16.to_be_bytes());
    send(&mut s, &frame(ApiKey::Produce, 2, 23, &b)).await;
    let why = assert_closed(&mut s, "Produce v2 acks=0").await;
    assert!(why.contains("Produce v2 is not supported"), "{why}");
    assert_eq!(
        leo(&c).await,
        BASELINE,
        "Produce v2 acks=0 appended nothing"
    );
    assert_serving(&c, "Produce v2").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_bad_frames_close_the_connection() {
    let c = cluster().await;

    // A truncated frame: the size says 100, 20 bytes (prefix included) come, then EOF.
    let mut s = connect(&c).await;
    let mut truncated = 100i32.to_be_bytes().to_vec();
    truncated.extend_from_slice(&metadata(1, 1)[4..20]);
    send(&mut s, &truncated).await;
    s.shutdown().await.expect("half-close");
    let why = assert_closed(&mut s, "truncated frame").await;
    assert!(why.contains("after 16 of 100 bytes"), "{why}");
    assert_serving(&c, "a truncated frame").await;

    // Metadata v1 whose topics array declares 2^31-1 elements: refused by the guard before
    // anything is allocated for it (the process would abort on a 2^31-element allocation).
    let mut s = connect(&c).await;
    let mut huge = 0x7fff_ffffi32.to_be_bytes().to_vec();
    huge.extend_from_slice(&[0, 1, b'x']); // what could be the start of a first topic
    send(&mut s, &frame(ApiKey::Metadata, 1, 2, &huge)).await;
    let why = assert_closed(&mut s, "2^31-1 element array").await;
    assert!(
        why.contains("Metadata v1") && why.contains("2147483647 elements declared"),
        "{why}"
    );
    assert_serving(&c, "a 2^31-1 element array").await;

    // Frame sizes of 2 GiB - 1, 2 GiB (as an i32: negative) and -1: closed before any body
    // byte is read or buffered.
    for size in [i32::MAX, i32::MIN, -1] {
        let mut s = connect(&c).await;
        let mut bytes = size.to_be_bytes().to_vec();
        bytes.extend_from_slice(&api_versions(3)[4..]);
        send(&mut s, &bytes).await;
        let why = assert_closed(&mut s, &format!("frame size {size}")).await;
        assert!(
            why.contains(&format!("request size {size} is not in")),
            "{why}"
        );
        assert_serving(&c, &format!("frame size {size}")).await;
    }
    assert_eq!(leo(&c).await, BASELINE, "nothing appended");
}

/// A valid batch of `n` records whose CRC field is off by one.
fn wrong_crc(n: usize) -> Bytes {
    let mut b = batch(&values("crc", 0..n)).to_vec();
    let crc = u32::from_be_bytes(b[17..21].try_into().unwrap()).wrapping_add(1);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    Bytes::from(b)
}

/// The single partition response of a Produce v9 response.
fn partition_response(
    r: &ProduceResponse,
) -> &kafka_protocol::messages::produce_response::PartitionProduceResponse {
    assert_eq!(r.responses.len(), 1, "{r:?}");
    assert_eq!(r.responses[0].partition_responses.len(), 1, "{r:?}");
    &r.responses[0].partition_responses[0]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_bad_batches_are_refused_with_kafka_codes() {
    let c = cluster().await;
    let mut s = connect(&c).await;

    // A gzip bomb in a Produce v9, acks=-1.
    send(&mut s, &produce(-1, 1, gzip_bomb())).await;
    let r: ProduceResponse = read_response(&mut s, ApiKey::Produce, 9, 1).await;
    let p = partition_response(&r);
    let message = p.error_message.as_deref().unwrap_or_default().to_string();
    eprintln!(
        "gzip bomb: error {} ({message}); record_errors {:?}",
        p.error_code, p.record_errors
    );
    // INVALID_RECORD: the batch's bytes are intact (CRC), what they decompress to is not
    // acceptable (Kafka's LogValidator); a damaged batch is CORRUPT_MESSAGE (below).
    assert_eq!(
        p.error_code,
        ErrorCode::InvalidRecord.code(),
        "gzip bomb: {p:?}"
    );
    assert!(message.contains("decompressed size exceeds"), "{message}");
    assert_eq!(p.base_offset, -1, "{p:?}");
    assert_eq!(leo(&c).await, BASELINE, "the bomb appended nothing");

    // A batch with a wrong CRC, on the same connection.
    send(&mut s, &produce(-1, 2, wrong_crc(3))).await;
    let r: ProduceResponse = read_response(&mut s, ApiKey::Produce, 9, 2).await;
    let p = partition_response(&r);
    eprintln!(
        "wrong CRC: error {} ({:?})",
        p.error_code,
        p.error_message.as_deref()
    );
    assert_eq!(p.error_code, ErrorCode::CorruptMessage.code(), "{p:?}");
    assert_eq!(
        leo(&c).await,
        BASELINE,
        "the corrupt batch appended nothing"
    );

    // The same connection still produces.
    send(&mut s, &produce(-1, 3, batch(&values("good", 0..2)))).await;
    let r: ProduceResponse = read_response(&mut s, ApiKey::Produce, 9, 3).await;
    let p = partition_response(&r);
    assert_eq!((p.error_code, p.base_offset), (0, BASELINE), "{p:?}");
    assert_eq!(leo(&c).await, BASELINE + 2);
    assert_serving(&c, "a gzip bomb and a wrong CRC").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_acks_0_gets_no_response_and_a_bad_batch_closes() {
    let c = cluster().await;
    let mut s = connect(&c).await;

    // acks=0 of a valid batch: no response; the next response on the connection is the
    // next request's, and the records are appended.
    send(
        &mut s,
        &produce(0, 10, batch(&values("fire-and-forget", 0..3))),
    )
    .await;
    send(&mut s, &api_versions(11)).await;
    let frame = read_frame(&mut s).await.expect("a response");
    let correlation_id = i32::from_be_bytes(frame[..4].try_into().unwrap());
    assert_eq!(
        correlation_id, 11,
        "the first response is the ApiVersions one"
    );
    let mut b = response(frame, ApiKey::ApiVersions, 3, 11);
    let v = ApiVersionsResponse::decode(&mut b, 3).expect("an ApiVersions response");
    assert_eq!(v.error_code, 0);
    assert_eq!(leo(&c).await, BASELINE + 3, "the acks=0 batch is appended");

    // acks=0 of a bad batch (wrong CRC): the broker closes the connection, appends nothing.
    send(&mut s, &produce(0, 12, wrong_crc(2))).await;
    let why = assert_closed(&mut s, "acks=0 bad batch").await;
    assert!(why.contains("acks=0 produce failed with error 2"), "{why}");
    assert_eq!(
        leo(&c).await,
        BASELINE + 3,
        "the bad acks=0 batch appended nothing"
    );
    assert_serving(&c, "acks=0").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_pipelined_requests_are_answered_in_order() {
    const REQUESTS: i32 = 50;
    let c = cluster().await;
    let mut s = connect(&c).await;

    // Produce (acks=-1, one record), Metadata v12, ApiVersions v3, ... written back to back.
    let kind = |i: i32| match i % 3 {
        0 => (ApiKey::Produce, 9),
        1 => (ApiKey::Metadata, 12),
        _ => (ApiKey::ApiVersions, 3),
    };
    let mut burst = Vec::new();
    for i in 0..REQUESTS {
        let correlation_id = 1000 + i;
        burst.extend(match kind(i).0 {
            ApiKey::Produce => produce(-1, correlation_id, batch(&[format!("burst-{i}")])),
            ApiKey::Metadata => metadata(12, correlation_id),
            _ => api_versions(correlation_id),
        });
    }
    send(&mut s, &burst).await;

    let mut produced = Vec::new();
    for i in 0..REQUESTS {
        let frame = read_frame(&mut s)
            .await
            .unwrap_or_else(|| panic!("closed after {i} responses"));
        let correlation_id = i32::from_be_bytes(frame[..4].try_into().unwrap());
        assert_eq!(correlation_id, 1000 + i, "response {i}: in request order");
        let (key, version) = kind(i);
        let mut b = response(frame, key, version, correlation_id);
        match key {
            ApiKey::Produce => {
                let r = ProduceResponse::decode(&mut b, version).expect("a Produce response");
                let p = partition_response(&r);
                assert_eq!(p.error_code, 0, "response {i}: {p:?}");
                produced.push(p.base_offset);
            }
            ApiKey::Metadata => {
                let r = MetadataResponse::decode(&mut b, version).expect("a Metadata response");
                assert_eq!(r.topics.len(), 1, "response {i}");
                assert_eq!(r.topics[0].error_code, 0, "response {i}: {r:?}");
            }
            _ => {
                let r = ApiVersionsResponse::decode(&mut b, version).expect("ApiVersions");
                assert_eq!(r.error_code, 0, "response {i}");
            }
        }
        assert_eq!(b.remaining(), 0, "response {i}: bytes after the body");
    }
    let produces = (0..REQUESTS).filter(|i| i % 3 == 0).count() as i64;
    assert_eq!(
        produced,
        (BASELINE..BASELINE + produces).collect::<Vec<_>>(),
        "each produce appended in request order"
    );
    assert_eq!(leo(&c).await, BASELINE + produces);
}

/// A Metadata request naming a topic over Kafka's 249 characters answers that name
/// INVALID_TOPIC_EXCEPTION (17) and the others as usual (Keel's own bounds would refuse the
/// whole request; found by a fresh user's trial).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_an_overlong_topic_name_fails_alone_in_metadata() {
    let c = cluster().await;
    let mut s = connect(&c).await;
    let long = "a".repeat(300);
    let req = MetadataRequest::default().with_topics(Some(vec![
        MetadataRequestTopic::default().with_name(Some(topic_name(TOPIC))),
        MetadataRequestTopic::default().with_name(Some(topic_name(&long))),
    ]));
    send(&mut s, &frame(ApiKey::Metadata, 1, 5, &body(&req, 1))).await;
    let r: MetadataResponse = read_response(&mut s, ApiKey::Metadata, 1, 5).await;
    let topics: Vec<(String, i16, usize)> = r
        .topics
        .iter()
        .map(|t| {
            (
                t.name.as_ref().map(|n| n.0.to_string()).unwrap_or_default(),
                t.error_code,
                t.partitions.len(),
            )
        })
        .collect();
    assert_eq!(topics.len(), 2, "{topics:?}");
    assert_eq!(
        (topics[0].0.as_str(), topics[0].1),
        (TOPIC, 0),
        "{topics:?}"
    );
    assert!(topics[0].2 >= 1, "{topics:?}");
    assert_eq!(
        topics[1].1,
        ErrorCode::InvalidTopicException.code(),
        "{topics:?}"
    );
    // Only the overlong name: answered alone, not as "every topic".
    let req = MetadataRequest::default().with_topics(Some(vec![
        MetadataRequestTopic::default().with_name(Some(topic_name(&long))),
    ]));
    send(&mut s, &frame(ApiKey::Metadata, 1, 6, &body(&req, 1))).await;
    let r: MetadataResponse = read_response(&mut s, ApiKey::Metadata, 1, 6).await;
    assert_eq!(r.topics.len(), 1, "{:?}", r.topics);
    assert_eq!(
        r.topics[0].error_code,
        ErrorCode::InvalidTopicException.code()
    );
}

// ---------------------------------------------------------------------------------------
// Consumer groups (#22, "Acceptance: Bad input").
// ---------------------------------------------------------------------------------------

/// Sends `req` as `key` v`version` and reads its response.
async fn call<Q: Encodable, R: Decodable>(
    s: &mut TcpStream,
    key: ApiKey,
    version: i16,
    correlation_id: i32,
    req: &Q,
) -> R {
    send(s, &frame(key, version, correlation_id, &body(req, version))).await;
    read_response(s, key, version, correlation_id).await
}

fn join(
    group: &str,
    member: &str,
    protocol_type: &str,
    metadata: Bytes,
    session_ms: i32,
) -> JoinGroupRequest {
    JoinGroupRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(group.into())))
        .with_session_timeout_ms(session_ms)
        .with_rebalance_timeout_ms(10_000)
        .with_member_id(StrBytes::from_string(member.into()))
        .with_protocol_type(StrBytes::from_string(protocol_type.into()))
        .with_protocols(vec![
            JoinGroupRequestProtocol::default()
                .with_name(StrBytes::from_static_str("range"))
                .with_metadata(metadata),
        ])
}

fn commit(group: &str, member: &str, generation: i32, offset: i64) -> OffsetCommitRequest {
    commit_to(TOPIC, group, member, generation, offset)
}

fn commit_to(
    topic: &str,
    group: &str,
    member: &str,
    generation: i32,
    offset: i64,
) -> OffsetCommitRequest {
    OffsetCommitRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(group.into())))
        .with_generation_id_or_member_epoch(generation)
        .with_member_id(StrBytes::from_string(member.into()))
        .with_topics(vec![
            OffsetCommitRequestTopic::default()
                .with_name(topic_name(topic))
                .with_partitions(vec![
                    OffsetCommitRequestPartition::default()
                        .with_partition_index(0)
                        .with_committed_offset(offset),
                ]),
        ])
}

fn commit_code(r: &OffsetCommitResponse) -> i16 {
    r.topics[0].partitions[0].error_code
}

/// The committed offset of `group` for `TOPIC`-0 (-1: none), by OffsetFetch v8.
/// OffsetDelete of `group`'s commit of `topic`-0.
fn offset_delete(group: &str, topic: &str) -> OffsetDeleteRequest {
    use kafka_protocol::messages::offset_delete_request::{
        OffsetDeleteRequestPartition, OffsetDeleteRequestTopic,
    };
    OffsetDeleteRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(group.into())))
        .with_topics(vec![
            OffsetDeleteRequestTopic::default()
                .with_name(topic_name(topic))
                .with_partitions(vec![OffsetDeleteRequestPartition::default()]),
        ])
}

async fn committed(s: &mut TcpStream, cid: i32, group: &str) -> i64 {
    committed_in(s, cid, TOPIC, group).await
}

/// The committed offset of `group` for `topic`-0 (-1: none).
async fn committed_in(s: &mut TcpStream, cid: i32, topic: &str, group: &str) -> i64 {
    let req = OffsetFetchRequest::default().with_groups(vec![
        OffsetFetchRequestGroup::default()
            .with_group_id(GroupId(StrBytes::from_string(group.into())))
            .with_topics(Some(vec![
                OffsetFetchRequestTopics::default()
                    .with_name(topic_name(topic))
                    .with_partition_indexes(vec![0]),
            ])),
    ]);
    let r: OffsetFetchResponse = call(s, ApiKey::OffsetFetch, 8, cid, &req).await;
    let g = &r.groups[0];
    assert_eq!(g.error_code, 0, "{r:?}");
    g.topics[0].partitions[0].committed_offset
}

/// Asks FindCoordinator for `group` until it is answered (the first one creates
/// `__consumer_offsets`: COORDINATOR_NOT_AVAILABLE meanwhile); returns the next free
/// correlation id.
async fn await_coordinator(s: &mut TcpStream, group: &str) -> i32 {
    let find = FindCoordinatorRequest::default().with_key(StrBytes::from_string(group.into()));
    let deadline = Instant::now() + WAIT;
    let mut cid = 1;
    loop {
        cid += 1;
        let r: FindCoordinatorResponse = call(s, ApiKey::FindCoordinator, 3, cid, &find).await;
        if r.error_code == 0 {
            assert_eq!(r.node_id.0, 1);
            return cid + 1;
        }
        assert_eq!(
            r.error_code,
            ErrorCode::CoordinatorNotAvailable.code(),
            "{r:?}"
        );
        assert!(Instant::now() < deadline, "no coordinator: {r:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_offsets_of_a_deleted_topic_are_forgotten() {
    let c = cluster().await;
    c.create_topic(assigned_topic("gone", &[&[1]]), WAIT).await;
    c.wait_leader_isr(1, "gone", &[1], WAIT).await;
    let group = "g-gone";
    let mut s = connect(&c).await;
    let mut cid = await_coordinator(&mut s, group).await;
    // An administrator's commit (the coordinator may still be loading its partition).
    let deadline = Instant::now() + WAIT;
    loop {
        cid += 1;
        let r: OffsetCommitResponse = call(
            &mut s,
            ApiKey::OffsetCommit,
            8,
            cid,
            &commit_to("gone", group, "", -1, 5),
        )
        .await;
        if commit_code(&r) == 0 {
            break;
        }
        assert_eq!(
            commit_code(&r),
            ErrorCode::CoordinatorLoadInProgress.code(),
            "{r:?}"
        );
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    cid += 1;
    assert_eq!(committed_in(&mut s, cid, "gone", group).await, 5);
    cid += 1;
    let del = DeleteTopicsRequest::default()
        .with_timeout_ms(10_000)
        .with_topics(vec![
            DeleteTopicState::default().with_name(Some(topic_name("gone"))),
        ]);
    let r: DeleteTopicsResponse = call(&mut s, ApiKey::DeleteTopics, 6, cid, &del).await;
    assert_eq!(r.responses[0].error_code, 0, "{r:?}");
    // Kafka's GroupCoordinator.onPartitionsDeleted: the offsets go with the topic, so a topic
    // created again under the name starts without them.
    let deadline = Instant::now() + WAIT;
    loop {
        cid += 1;
        if committed_in(&mut s, cid, "gone", group).await == -1 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the deleted topic's offset stayed committed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_group_bad_input_gets_kafka_codes_and_commits_nothing() {
    let c = cluster().await;
    let group = "g-bad";
    let mut s = connect(&c).await;
    let mut cid = await_coordinator(&mut s, group).await;
    // A member joins (KIP-394 round trip) and syncs: a Stable generation 1. The
    // coordinator may still be loading its partition: COORDINATOR_LOAD_IN_PROGRESS is retried.
    let meta = Bytes::from_static(b"subscription");
    let mut r: JoinGroupResponse;
    let deadline = Instant::now() + WAIT;
    loop {
        cid += 1;
        r = call(
            &mut s,
            ApiKey::JoinGroup,
            5,
            cid,
            &join(group, "", "consumer", meta.clone(), 10_000),
        )
        .await;
        if r.error_code != ErrorCode::CoordinatorLoadInProgress.code() {
            break;
        }
        assert!(Instant::now() < deadline, "still loading");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(r.error_code, ErrorCode::MemberIdRequired.code(), "{r:?}");
    let member = r.member_id.as_str().to_string();
    cid += 1;
    let r: JoinGroupResponse = call(
        &mut s,
        ApiKey::JoinGroup,
        5,
        cid,
        &join(group, &member, "consumer", meta.clone(), 10_000),
    )
    .await;
    assert_eq!((r.error_code, r.generation_id), (0, 1), "{r:?}");
    assert_eq!(r.leader.as_str(), member);
    cid += 1;
    let sync = SyncGroupRequest::default()
        .with_group_id(GroupId(StrBytes::from_static_str(group)))
        .with_generation_id(1)
        .with_member_id(StrBytes::from_string(member.clone()))
        .with_assignments(vec![
            SyncGroupRequestAssignment::default()
                .with_member_id(StrBytes::from_string(member.clone()))
                .with_assignment(Bytes::from_static(b"all of it")),
        ]);
    let r: SyncGroupResponse = call(&mut s, ApiKey::SyncGroup, 3, cid, &sync).await;
    assert_eq!(r.error_code, 0, "{r:?}");
    assert_eq!(r.assignment, Bytes::from_static(b"all of it"));

    // Bad requests, each with Kafka's code.
    let mut expect_join =
        async |req: JoinGroupRequest, version: i16, want: ErrorCode, what: &str| {
            cid += 1;
            let r: JoinGroupResponse = call(&mut s, ApiKey::JoinGroup, version, cid, &req).await;
            assert_eq!(r.error_code, want.code(), "{what}: {r:?}");
        };
    expect_join(
        join(group, "", "connect", meta.clone(), 10_000),
        3,
        ErrorCode::InconsistentGroupProtocol,
        "another protocol type",
    )
    .await;
    expect_join(
        join(group, "", "consumer", meta.clone(), 1_000),
        5,
        ErrorCode::InvalidSessionTimeout,
        "session timeout below 6 s",
    )
    .await;
    expect_join(
        join("", "", "consumer", meta.clone(), 10_000),
        5,
        ErrorCode::InvalidGroupId,
        "empty group id",
    )
    .await;
    expect_join(
        join(
            group,
            "",
            "consumer",
            Bytes::from(vec![7u8; 2 << 20]),
            10_000,
        ),
        5,
        ErrorCode::InvalidRequest,
        "2 MiB of member metadata",
    )
    .await;
    expect_join(
        join(group, "not-a-member", "consumer", meta.clone(), 10_000),
        5,
        ErrorCode::UnknownMemberId,
        "unknown member id",
    )
    .await;
    cid += 100;
    let stale = sync.clone().with_generation_id(0);
    let r: SyncGroupResponse = call(&mut s, ApiKey::SyncGroup, 3, cid, &stale).await;
    assert_eq!(
        r.error_code,
        ErrorCode::IllegalGeneration.code(),
        "stale SyncGroup: {r:?}"
    );
    cid += 1;
    let hb = HeartbeatRequest::default()
        .with_group_id(GroupId(StrBytes::from_static_str(group)))
        .with_generation_id(1)
        .with_member_id(StrBytes::from_static_str("nobody"));
    let r: HeartbeatResponse = call(&mut s, ApiKey::Heartbeat, 3, cid, &hb).await;
    assert_eq!(r.error_code, ErrorCode::UnknownMemberId.code());
    for (req, want, what) in [
        (
            commit(group, "nobody", 1, 1),
            ErrorCode::UnknownMemberId,
            "commit from a non-member",
        ),
        (
            commit(group, &member, 0, 1),
            ErrorCode::IllegalGeneration,
            "commit from a stale generation",
        ),
        // An admin commit (Kafka's AdminClient.alterConsumerGroupOffsets, what
        // `kafka-consumer-groups --reset-offsets` sends) into an active group.
        (
            commit(group, "", -1, 1),
            ErrorCode::UnknownMemberId,
            "reset of an active group",
        ),
    ] {
        cid += 1;
        let r: OffsetCommitResponse = call(&mut s, ApiKey::OffsetCommit, 8, cid, &req).await;
        assert_eq!(commit_code(&r), want.code(), "{what}: {r:?}");
    }
    cid += 1;
    let del = DeleteGroupsRequest::default()
        .with_groups_names(vec![GroupId(StrBytes::from_static_str(group))]);
    let r: DeleteGroupsResponse = call(&mut s, ApiKey::DeleteGroups, 2, cid, &del).await;
    assert_eq!(r.results[0].error_code, ErrorCode::NonEmptyGroup.code());
    cid += 1;
    assert_eq!(
        committed(&mut s, cid, group).await,
        -1,
        "nothing was committed"
    );

    // The member's own commit works; after it leaves, an admin reset does too, then delete.
    cid += 1;
    let r: OffsetCommitResponse = call(
        &mut s,
        ApiKey::OffsetCommit,
        8,
        cid,
        &commit(group, &member, 1, 2),
    )
    .await;
    assert_eq!(commit_code(&r), 0, "{r:?}");
    cid += 1;
    assert_eq!(committed(&mut s, cid, group).await, 2);
    // OffsetDelete (KIP-496) while the member is in: its metadata is not a subscription
    // ("subscription" read as one claims 1.6 billion topics; kafka-protocol's decoder once
    // aborted the process on such a count), so every topic counts as subscribed.
    for (group, topic, top, part, what) in [
        (
            group,
            TOPIC,
            ErrorCode::None,
            ErrorCode::GroupSubscribedToTopic,
            "a subscribed topic",
        ),
        (
            group,
            "no-such-topic",
            ErrorCode::None,
            ErrorCode::UnknownTopicOrPartition,
            "an unknown topic",
        ),
        (
            "",
            TOPIC,
            ErrorCode::InvalidGroupId,
            ErrorCode::None,
            "an empty group id",
        ),
        (
            "g-nobody",
            TOPIC,
            ErrorCode::GroupIdNotFound,
            ErrorCode::None,
            "an unknown group",
        ),
    ] {
        cid += 1;
        let r: OffsetDeleteResponse = call(
            &mut s,
            ApiKey::OffsetDelete,
            0,
            cid,
            &offset_delete(group, topic),
        )
        .await;
        assert_eq!(r.error_code, top.code(), "{what}: {r:?}");
        let codes: Vec<i16> = r
            .topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| p.error_code))
            .collect();
        if top == ErrorCode::None {
            assert_eq!(codes, [part.code()], "{what}: {r:?}");
        } else {
            assert!(
                codes.is_empty(),
                "{what}: no topics with a group error: {r:?}"
            );
        }
    }
    cid += 1;
    assert_eq!(committed(&mut s, cid, group).await, 2, "still committed");
    cid += 1;
    let leave = LeaveGroupRequest::default()
        .with_group_id(GroupId(StrBytes::from_static_str(group)))
        .with_members(vec![
            MemberIdentity::default().with_member_id(StrBytes::from_string(member.clone())),
        ]);
    let r: LeaveGroupResponse = call(&mut s, ApiKey::LeaveGroup, 3, cid, &leave).await;
    assert_eq!((r.error_code, r.members[0].error_code), (0, 0), "{r:?}");
    cid += 1;
    let r: OffsetCommitResponse = call(
        &mut s,
        ApiKey::OffsetCommit,
        8,
        cid,
        &commit(group, "", -1, 1),
    )
    .await;
    assert_eq!(commit_code(&r), 0, "admin reset of the empty group: {r:?}");
    cid += 1;
    assert_eq!(committed(&mut s, cid, group).await, 1);
    cid += 1;
    let r: DeleteGroupsResponse = call(&mut s, ApiKey::DeleteGroups, 2, cid, &del).await;
    assert_eq!(r.results[0].error_code, 0);
    cid += 1;
    assert_eq!(
        committed(&mut s, cid, group).await,
        -1,
        "deleted with its offsets"
    );
    // OffsetDelete of an empty group's commit (an admin commit makes the group again).
    cid += 1;
    let r: OffsetCommitResponse = call(
        &mut s,
        ApiKey::OffsetCommit,
        8,
        cid,
        &commit(group, "", -1, 3),
    )
    .await;
    assert_eq!(commit_code(&r), 0, "{r:?}");
    cid += 1;
    let r: OffsetDeleteResponse = call(
        &mut s,
        ApiKey::OffsetDelete,
        0,
        cid,
        &offset_delete(group, TOPIC),
    )
    .await;
    assert_eq!(
        (r.error_code, r.topics[0].partitions[0].error_code),
        (0, 0),
        "{r:?}"
    );
    cid += 1;
    assert_eq!(committed(&mut s, cid, group).await, -1, "offset deleted");
    assert_serving(&c, "the group cases").await;
}
