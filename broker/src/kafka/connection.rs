//! The listener's async layer: accept connections (at most [`MAX_CONNECTIONS`] at once),
//! read one request at a time per connection, answer it through the replica manager, write
//! the response, repeat. Everything that decides something is in [`super::versions`],
//! [`super::guard`], [`super::convert`] and [`crate::bounds`]; this file moves bytes.

use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, CreatePartitionsRequest, CreateTopicsRequest, DeleteGroupsRequest,
    DeleteTopicsRequest, DescribeClusterRequest, DescribeConfigsRequest, DescribeGroupsRequest,
    FetchRequest, FindCoordinatorRequest, HeartbeatRequest, IncrementalAlterConfigsRequest,
    InitProducerIdRequest, JoinGroupRequest, LeaveGroupRequest, ListGroupsRequest,
    ListOffsetsRequest, MetadataRequest, OffsetCommitRequest, OffsetFetchRequest,
    OffsetForLeaderEpochRequest, ProduceRequest, RequestHeader, ResponseHeader, ResponseKind,
    SaslAuthenticateRequest, SaslHandshakeRequest, SyncGroupRequest,
};
use kafka_protocol::protocol::{Decodable, Encodable};
use keel_proto::ErrorCode;
use keel_runtime::tls::ServerIo;
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;
use tokio_stream::StreamExt;
use tonic::transport::server::Connected;

use super::context::KafkaContext;
use super::sasl::SaslState;
use super::{admin, convert, frame, groups, guard, versions};
use crate::{access, bounds};

/// Most connections served at once per Kafka listener; a connection beyond it is closed as
/// soon as it is accepted (Kafka's `max.connections` is unbounded by default; Keel bounds
/// the tasks and buffers a flood of connections could pin).
pub const MAX_CONNECTIONS: usize = 4096;

/// A connection with no request for this long is closed (Kafka: `connections.max.idle.ms`,
/// 10 minutes).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(600);

/// Serves Kafka clients on `listener` until `stop` turns true; then stops accepting and
/// drops every open connection (a request in flight is abandoned; its client retries
/// elsewhere, as after Kafka's `SocketServer` shutdown). With `tls` (an `SSL` listener, #23)
/// every connection completes a TLS handshake first ([`keel_runtime::tls::incoming`]: bounded,
/// timed out and logged there); its client certificate, if any, is the caller's principal
/// (`ssl_principal_mapping_rules`); without one, or on a `PLAINTEXT` listener, the caller is
/// `User:ANONYMOUS`. With `sasl` (a `SASL_PLAINTEXT` or `SASL_SSL` listener) every connection
/// authenticates with SASL/SCRAM before anything else is served ([`super::sasl`]) and its
/// caller is `User:<name>`.
pub async fn serve(
    listener: TcpListener,
    tls: Option<Arc<keel_runtime::tls::TlsContext>>,
    sasl: bool,
    ctx: KafkaContext,
    mut stop: watch::Receiver<bool>,
) {
    let ctx = Arc::new(ctx);
    let permits = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut connections = JoinSet::new();
    let mut incoming = keel_runtime::tls::incoming(listener, tls);
    let stopped = async move {
        let _ = stop.wait_for(|s| *s).await;
    };
    tokio::pin!(stopped);
    loop {
        tokio::select! {
            () = &mut stopped => break,
            accepted = incoming.next() => {
                // `incoming` never yields an error and ends only when its task does.
                let Some(Ok(stream)) = accepted else { break };
                let info = stream.connect_info();
                let Some(peer) = info.remote_addr else { continue };
                let Ok(permit) = permits.clone().try_acquire_owned() else {
                    tracing::warn!(%peer, "kafka listener: {MAX_CONNECTIONS} connections open; closing a new one");
                    continue;
                };
                let ctx = ctx.for_peer(&info);
                connections.spawn(async move {
                    if let Err(why) = connection(stream, peer, ctx, sasl).await {
                        tracing::debug!(%peer, "kafka connection closed: {why}");
                    }
                    drop(permit);
                });
            }
            // Reap finished connections so the set does not grow.
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    connections.abort_all();
}

/// Why a connection was closed by the broker.
#[derive(Debug, thiserror::Error)]
enum Close {
    #[error("{0}")]
    Frame(#[from] frame::FrameError),
    #[error("no request for {0:?}")]
    Idle(Duration),
    #[error("{0}")]
    Protocol(String),
    #[error("writing the response: {0}")]
    Write(std::io::Error),
    #[error("SASL authentication failed or out of order")]
    Sasl,
}

/// Serves one connection until the peer closes it or a request cannot be parsed.
async fn connection(
    stream: ServerIo,
    peer: std::net::SocketAddr,
    mut ctx: KafkaContext,
    sasl: bool,
) -> Result<(), Close> {
    let mut sasl = SaslState::new(sasl);
    // TCP_NODELAY is set by `incoming`.
    let (read, mut write) = tokio::io::split(stream);
    let mut read = BufReader::new(read);
    loop {
        let max = if sasl.authenticated() {
            frame::MAX_REQUEST_BYTES
        } else {
            frame::MAX_UNAUTHENTICATED_REQUEST_BYTES
        };
        let request =
            match tokio::time::timeout(IDLE_TIMEOUT, frame::read_request(&mut read, max)).await {
                Err(_) => return Err(Close::Idle(IDLE_TIMEOUT)),
                Ok(Ok(Some(r))) => r,
                Ok(Ok(None)) => return Ok(()),
                Ok(Err(e)) => return Err(e.into()),
            };
        if let Some(response) = handle(&mut ctx, &mut sasl, peer, request)
            .await
            .map_err(Close::Protocol)?
        {
            write.write_all(&response).await.map_err(Close::Write)?;
        }
        if sasl.failed() {
            return Err(Close::Sasl);
        }
    }
}

/// One request to its framed response (`None`: no response, an `acks=0` Produce), or why the
/// connection must be closed.
async fn handle(
    ctx: &mut KafkaContext,
    sasl: &mut SaslState,
    peer: std::net::SocketAddr,
    mut body: Bytes,
) -> Result<Option<Bytes>, String> {
    // frame::MIN_REQUEST_BYTES guarantees the fixed header fields are there.
    let raw_key = i16::from_be_bytes([body[0], body[1]]);
    let version = i16::from_be_bytes([body[2], body[3]]);
    let key = ApiKey::try_from(raw_key).map_err(|_| format!("unknown api key {raw_key}"))?;
    let served =
        versions::served(key).ok_or_else(|| format!("{key:?} is not served on this listener"))?;
    if !sasl.allows(key) {
        // Kafka's SaslServerAuthenticator: a request other than the SASL ones before
        // authentication is an InvalidRequestException; the connection is closed.
        return Err(format!(
            "{key:?} before SASL authentication completed (ApiVersions, SaslHandshake and \
             SaslAuthenticate come first on this listener)"
        ));
    }
    if key != ApiKey::Produce && body.len() > frame::MAX_NON_PRODUCE_REQUEST_BYTES {
        return Err(format!(
            "{key:?} request of {} bytes is over the {} bytes allowed for it",
            body.len(),
            frame::MAX_NON_PRODUCE_REQUEST_BYTES
        ));
    }
    let header = RequestHeader::decode(&mut body, key.request_header_version(version))
        .map_err(|e| format!("{key:?} v{version}: bad request header: {e}"))?;
    let correlation_id = header.correlation_id;
    if !(served.min..=served.max).contains(&version) {
        if key == ApiKey::ApiVersions {
            // KIP-511: an unknown ApiVersions version is answered at v0, with our ranges.
            let response = versions::api_versions_response(ErrorCode::UnsupportedVersion.code());
            return encode(key, 0, correlation_id, ResponseKind::ApiVersions(response)).map(Some);
        }
        return Err(format!(
            "{key:?} v{version} is not supported (this listener serves v{}..=v{})",
            served.min, served.max
        ));
    }
    if version < served.served_min {
        return old_produce(body, version, correlation_id);
    }
    guard::check_request_body(raw_key, version, &body)
        .map_err(|e| format!("{key:?} v{version}: {e}"))?;
    let response = match key {
        ApiKey::ApiVersions => {
            decode::<ApiVersionsRequest>(&mut body, key, version)?;
            ResponseKind::ApiVersions(versions::api_versions_response(0))
        }
        ApiKey::SaslHandshake => {
            let req = decode::<SaslHandshakeRequest>(&mut body, key, version)?;
            let response = sasl.handshake(&req, version);
            if response.error_code != 0 {
                tracing::info!(%peer, mechanism = %req.mechanism.as_str(), code = response.error_code, "kafka listener: SASL handshake refused");
            }
            ResponseKind::SaslHandshake(response)
        }
        ApiKey::SaslAuthenticate => {
            let req = decode::<SaslAuthenticateRequest>(&mut body, key, version)?;
            let image = ctx.images.borrow().clone();
            let nonce = server_nonce()?;
            let (response, user) =
                sasl.authenticate(&req, |u, m| image.scram_credential(u, m), &nonce);
            if let Some(user) = user {
                ctx.caller.principal = Ok(format!("User:{user}"));
                tracing::debug!(%peer, %user, "kafka listener: SASL/SCRAM authenticated");
            } else if response.error_code != 0 {
                // Kafka logs failed authentications at INFO (`Selector`); connections are
                // bounded by MAX_CONNECTIONS and each gets one try.
                tracing::info!(
                    %peer,
                    "kafka listener: failed authentication: {}",
                    response.error_message.as_deref().unwrap_or("")
                );
            }
            ResponseKind::SaslAuthenticate(response)
        }
        ApiKey::Metadata => {
            let req = decode::<MetadataRequest>(&mut body, key, version)?;
            ResponseKind::Metadata(metadata(ctx, &req, version).await)
        }
        ApiKey::Produce => {
            let req = decode::<ProduceRequest>(&mut body, key, version)?;
            let acks = req.acks;
            let response = produce(ctx, req).await;
            if acks == 0 {
                // Kafka (`KafkaApis.handleProduceRequest`): no response for acks=0; an error
                // closes the connection so the client notices (it learns which from Metadata).
                let failed = response
                    .responses
                    .iter()
                    .flat_map(|t| &t.partition_responses)
                    .find(|p| p.error_code != 0);
                return match failed {
                    Some(p) => Err(format!(
                        "acks=0 produce failed with error {} for partition {}",
                        p.error_code, p.index
                    )),
                    None => Ok(None),
                };
            }
            ResponseKind::Produce(response)
        }
        ApiKey::Fetch => {
            let req = decode::<FetchRequest>(&mut body, key, version)?;
            ResponseKind::Fetch(fetch(ctx, req).await)
        }
        ApiKey::ListOffsets => {
            let req = decode::<ListOffsetsRequest>(&mut body, key, version)?;
            let keel_req = convert::list_offsets_request(req.clone());
            let allowed = ctx.check(|a, c, img| access::list_offsets(a, c, img, &keel_req));
            let reply = match bounds::list_offsets(&keel_req) {
                Ok(()) if allowed.is_err() => keel_proto::broker::ListOffsetsReply {
                    error: allowed.err().map(|d| d.to_proto()),
                    topics: Vec::new(),
                },
                Ok(()) => ctx.replicas.list_offsets(keel_req),
                Err(e) => keel_proto::broker::ListOffsetsReply {
                    error: Some(invalid_request(&e)),
                    topics: Vec::new(),
                },
            };
            ResponseKind::ListOffsets(convert::list_offsets_response(reply, &req, version))
        }
        ApiKey::OffsetForLeaderEpoch => {
            let req = decode::<OffsetForLeaderEpochRequest>(&mut body, key, version)?;
            let keel_req = convert::offsets_for_leader_epoch_request(req.clone());
            let allowed =
                ctx.check(|a, c, img| access::offsets_for_leader_epoch(a, c, img, &keel_req));
            let reply = match bounds::offsets_for_leader_epoch(&keel_req) {
                Ok(()) if allowed.is_err() => keel_proto::broker::OffsetsForLeaderEpochReply {
                    error: allowed.err().map(|d| d.to_proto()),
                    topics: Vec::new(),
                },
                Ok(()) => ctx.replicas.offsets_for_leader_epoch(keel_req),
                Err(e) => keel_proto::broker::OffsetsForLeaderEpochReply {
                    error: Some(invalid_request(&e)),
                    topics: Vec::new(),
                },
            };
            ResponseKind::OffsetForLeaderEpoch(convert::offsets_for_leader_epoch_response(
                reply, &req,
            ))
        }
        ApiKey::InitProducerId => {
            let req = decode::<InitProducerIdRequest>(&mut body, key, version)?;
            let keel_req = convert::init_producer_id_request(req);
            let allowed = ctx.check(|a, c, img| access::init_producer_id(a, c, img, &keel_req));
            let reply = match bounds::init_producer_id(&keel_req) {
                Ok(()) if allowed.is_err() => keel_proto::broker::InitProducerIdReply {
                    error: allowed.err().map(|d| d.to_proto()),
                    producer_id: -1,
                    producer_epoch: -1,
                },
                Ok(()) => {
                    let epoch = ctx.status.borrow().broker_epoch;
                    ctx.replicas.init_producer_id(&keel_req, epoch).await
                }
                Err(e) => keel_proto::broker::InitProducerIdReply {
                    error: Some(invalid_request(&e)),
                    producer_id: -1,
                    producer_epoch: -1,
                },
            };
            ResponseKind::InitProducerId(convert::init_producer_id_response(reply))
        }
        ApiKey::FindCoordinator => {
            let req = decode::<FindCoordinatorRequest>(&mut body, key, version)?;
            ResponseKind::FindCoordinator(groups::find_coordinator(ctx, &req, version).await)
        }
        ApiKey::JoinGroup => {
            let req = decode::<JoinGroupRequest>(&mut body, key, version)?;
            let client_id = header.client_id.as_ref().map_or("", |c| c.as_str());
            ResponseKind::JoinGroup(groups::join_group(ctx, &req, version, client_id, peer).await)
        }
        ApiKey::SyncGroup => {
            let req = decode::<SyncGroupRequest>(&mut body, key, version)?;
            ResponseKind::SyncGroup(groups::sync_group(ctx, &req, version).await)
        }
        ApiKey::Heartbeat => {
            let req = decode::<HeartbeatRequest>(&mut body, key, version)?;
            ResponseKind::Heartbeat(groups::heartbeat(ctx, &req))
        }
        ApiKey::LeaveGroup => {
            let req = decode::<LeaveGroupRequest>(&mut body, key, version)?;
            ResponseKind::LeaveGroup(groups::leave_group(ctx, &req, version).await)
        }
        ApiKey::OffsetCommit => {
            let req = decode::<OffsetCommitRequest>(&mut body, key, version)?;
            ResponseKind::OffsetCommit(groups::offset_commit(ctx, &req, version).await)
        }
        ApiKey::OffsetFetch => {
            let req = decode::<OffsetFetchRequest>(&mut body, key, version)?;
            ResponseKind::OffsetFetch(groups::offset_fetch(ctx, &req, version))
        }
        ApiKey::DescribeGroups => {
            let req = decode::<DescribeGroupsRequest>(&mut body, key, version)?;
            ResponseKind::DescribeGroups(groups::describe_groups(ctx, &req, version))
        }
        ApiKey::ListGroups => {
            let req = decode::<ListGroupsRequest>(&mut body, key, version)?;
            ResponseKind::ListGroups(groups::list_groups(ctx, &req, version))
        }
        ApiKey::DeleteGroups => {
            let req = decode::<DeleteGroupsRequest>(&mut body, key, version)?;
            ResponseKind::DeleteGroups(groups::delete_groups(ctx, &req).await)
        }
        ApiKey::DeleteRecords => {
            let req =
                decode::<kafka_protocol::messages::DeleteRecordsRequest>(&mut body, key, version)?;
            ResponseKind::DeleteRecords(super::delete_records::delete_records(ctx, &req).await)
        }
        ApiKey::OffsetDelete => {
            let req =
                decode::<kafka_protocol::messages::OffsetDeleteRequest>(&mut body, key, version)?;
            ResponseKind::OffsetDelete(groups::offset_delete(ctx, &req).await)
        }
        ApiKey::CreateTopics => {
            let req = decode::<CreateTopicsRequest>(&mut body, key, version)?;
            ResponseKind::CreateTopics(admin::create_topics(ctx, &req, version).await)
        }
        ApiKey::DeleteTopics => {
            let req = decode::<DeleteTopicsRequest>(&mut body, key, version)?;
            ResponseKind::DeleteTopics(admin::delete_topics(ctx, &req, version).await)
        }
        ApiKey::DescribeConfigs => {
            let req = decode::<DescribeConfigsRequest>(&mut body, key, version)?;
            ResponseKind::DescribeConfigs(admin::describe_configs(ctx, &req, version).await)
        }
        ApiKey::DescribeCluster => {
            let req = decode::<DescribeClusterRequest>(&mut body, key, version)?;
            ResponseKind::DescribeCluster(admin::describe_cluster(ctx, &req, version).await)
        }
        ApiKey::CreatePartitions => {
            let req = decode::<CreatePartitionsRequest>(&mut body, key, version)?;
            ResponseKind::CreatePartitions(admin::create_partitions(ctx, &req).await)
        }
        ApiKey::ElectLeaders => {
            let req =
                decode::<kafka_protocol::messages::ElectLeadersRequest>(&mut body, key, version)?;
            ResponseKind::ElectLeaders(admin::elect_leaders(ctx, &req, version).await)
        }
        ApiKey::AlterPartitionReassignments => {
            let req = decode::<kafka_protocol::messages::AlterPartitionReassignmentsRequest>(
                &mut body, key, version,
            )?;
            ResponseKind::AlterPartitionReassignments(
                admin::alter_partition_reassignments(ctx, &req).await,
            )
        }
        ApiKey::ListPartitionReassignments => {
            let req = decode::<kafka_protocol::messages::ListPartitionReassignmentsRequest>(
                &mut body, key, version,
            )?;
            ResponseKind::ListPartitionReassignments(
                admin::list_partition_reassignments(ctx, &req).await,
            )
        }
        ApiKey::DescribeAcls => {
            let req =
                decode::<kafka_protocol::messages::DescribeAclsRequest>(&mut body, key, version)?;
            ResponseKind::DescribeAcls(admin::describe_acls(ctx, &req).await)
        }
        ApiKey::CreateAcls => {
            let req =
                decode::<kafka_protocol::messages::CreateAclsRequest>(&mut body, key, version)?;
            ResponseKind::CreateAcls(admin::create_acls(ctx, &req).await)
        }
        ApiKey::DeleteAcls => {
            let req =
                decode::<kafka_protocol::messages::DeleteAclsRequest>(&mut body, key, version)?;
            ResponseKind::DeleteAcls(admin::delete_acls(ctx, &req).await)
        }
        ApiKey::DescribeUserScramCredentials => {
            let req = decode::<kafka_protocol::messages::DescribeUserScramCredentialsRequest>(
                &mut body, key, version,
            )?;
            ResponseKind::DescribeUserScramCredentials(
                admin::describe_user_scram_credentials(ctx, &req).await,
            )
        }
        ApiKey::AlterUserScramCredentials => {
            let req = decode::<kafka_protocol::messages::AlterUserScramCredentialsRequest>(
                &mut body, key, version,
            )?;
            ResponseKind::AlterUserScramCredentials(
                admin::alter_user_scram_credentials(ctx, &req).await,
            )
        }
        ApiKey::DescribeLogDirs => {
            let req = decode::<kafka_protocol::messages::DescribeLogDirsRequest>(
                &mut body, key, version,
            )?;
            ResponseKind::DescribeLogDirs(admin::describe_log_dirs(ctx, &req, version))
        }
        ApiKey::IncrementalAlterConfigs => {
            let req = decode::<IncrementalAlterConfigsRequest>(&mut body, key, version)?;
            ResponseKind::IncrementalAlterConfigs(admin::incremental_alter_configs(ctx, &req).await)
        }
        ApiKey::AlterConfigs => {
            let req =
                decode::<kafka_protocol::messages::AlterConfigsRequest>(&mut body, key, version)?;
            ResponseKind::AlterConfigs(admin::legacy_alter_configs(ctx, &req).await)
        }
        other => return Err(format!("{other:?} has no handler")),
    };
    encode(key, version, correlation_id, response).map(Some)
}

/// A fresh SCRAM server nonce: 16 random bytes as 32 hex digits (RFC 5802 wants printable
/// characters without `,`). Errors when the OS has no randomness to give (the connection is
/// then closed rather than served with a guessable nonce).
fn server_nonce() -> Result<String, String> {
    let mut b = [0u8; 16];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut b)
        .map_err(|_| "no randomness for a SCRAM nonce".to_owned())?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// INVALID_REQUEST (42) carrying the bound violation.
fn invalid_request(e: &keel_proto::limits::FieldError) -> keel_proto::common::Error {
    ErrorCode::InvalidRequest.to_proto(keel_proto::limits::cap_message(e.to_string()))
}

fn decode<T: Decodable>(body: &mut Bytes, key: ApiKey, version: i16) -> Result<T, String> {
    T::decode(body, version).map_err(|e| format!("{key:?} v{version}: cannot decode: {e}"))
}

/// The framed response: size, response header (its version from the API and version), body.
fn encode(
    key: ApiKey,
    version: i16,
    correlation_id: i32,
    response: ResponseKind,
) -> Result<Bytes, String> {
    let mut out = BytesMut::new();
    out.put_i32(0);
    ResponseHeader::default()
        .with_correlation_id(correlation_id)
        .encode(&mut out, key.response_header_version(version))
        .and_then(|()| response.encode(&mut out, version))
        .map_err(|e| format!("{key:?} v{version}: cannot encode the response: {e}"))?;
    let size = i32::try_from(out.len() - 4).map_err(|_| "response over 2 GiB".to_string())?;
    out[..4].copy_from_slice(&size.to_be_bytes());
    Ok(out.freeze())
}

async fn metadata(
    ctx: &KafkaContext,
    req: &MetadataRequest,
    version: i16,
) -> kafka_protocol::messages::MetadataResponse {
    let image = ctx.images.borrow().clone();
    let mut keel_req = convert::metadata_request(req, version, &image);
    // A name over Kafka's 249 characters is INVALID_TOPIC_EXCEPTION for that topic alone (as
    // Kafka answers it); Keel's bounds would refuse the whole request.
    let overlong: Vec<String> = keel_req.as_mut().map_or_else(Vec::new, |r| {
        let (long, ok): (Vec<String>, Vec<String>) = std::mem::take(&mut r.topics)
            .into_iter()
            .partition(|t| t.len() > keel_proto::limits::MAX_TOPIC_NAME_LEN);
        r.topics = ok;
        long
    });
    if !overlong.is_empty() && keel_req.as_ref().is_some_and(|r| r.topics.is_empty()) {
        // Only overlong names were asked: ask for none (an empty list means every topic).
        keel_req = None;
    }
    let reply = keel_req.map(|r| match bounds::metadata(&r) {
        Ok(()) => {
            let mut reply = crate::metadata::describe::metadata_reply(&image, &r, -1);
            let named = !r.topics.is_empty();
            access::authorize_metadata(&ctx.authz, &ctx.caller, &image, named, &mut reply);
            reply
        }
        Err(e) => keel_proto::broker::MetadataReply {
            topics: r
                .topics
                .iter()
                .map(|name| keel_proto::broker::MetadataTopic {
                    error: Some(invalid_request(&e)),
                    name: keel_proto::limits::clip(name).to_string(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        },
    });
    let reply = if overlong.is_empty() {
        reply
    } else {
        let mut reply = reply.unwrap_or_default();
        reply.topics.extend(
            overlong
                .iter()
                .map(|name| keel_proto::broker::MetadataTopic {
                    error: Some(ErrorCode::InvalidTopicException.to_proto(format!(
                        "topic name of {} characters is over the 249 allowed",
                        name.chars().count()
                    ))),
                    name: keel_proto::limits::clip(name).to_string(),
                    ..Default::default()
                }),
        );
        Some(reply)
    };
    let mut response = convert::metadata_response(reply, req, &image, &ctx.listener, ctx.broker_id);
    // Kafka (`KafkaApis.getTopicMetadata`, `AutoTopicCreationManager`): with
    // auto.create.topics.enable and the client's consent (v4+ `allow_auto_topic_creation`;
    // always before v4), unknown topics named in the request are created with the
    // controllers' defaults and answered LEADER_NOT_AVAILABLE (retriable: the client asks
    // again once the brokers know the topic); a creation the controller refuses is answered
    // with its error.
    let allowed = version < 4 || req.allow_auto_topic_creation;
    if ctx.auto_create_topics && allowed {
        let unknown: Vec<usize> = response
            .topics
            .iter()
            .enumerate()
            .filter(|(_, t)| {
                t.error_code == ErrorCode::UnknownTopicOrPartition.code() && t.name.is_some()
            })
            .map(|(i, _)| i)
            .collect();
        if !unknown.is_empty() {
            let names: Vec<_> = unknown
                .iter()
                .filter_map(|i| response.topics[*i].name.clone())
                .collect();
            let created =
                admin::create_topics(ctx, &convert::admin::auto_create_request(names), 7).await;
            for i in unknown {
                let t = &mut response.topics[i];
                let result = created
                    .topics
                    .iter()
                    .find(|r| Some(&r.name) == t.name.as_ref());
                t.error_code = match result.map(|r| r.error_code) {
                    Some(0) | Some(36) => ErrorCode::LeaderNotAvailable.code(),
                    Some(code) => code,
                    None => ErrorCode::LeaderNotAvailable.code(),
                };
            }
        }
    }
    response
}

async fn produce(
    ctx: &KafkaContext,
    req: ProduceRequest,
) -> kafka_protocol::messages::ProduceResponse {
    let shape = convert::produce_shape(&req);
    let keel_req = convert::produce_request(req);
    if let Err(e) = bounds::produce(&keel_req) {
        let error = invalid_request(&e);
        return convert::produce_error_response(&shape, error.code as i16, Some(&error.message));
    }
    if let Err(d) = ctx.check(|a, c, img| access::produce(a, c, img, &keel_req)) {
        return convert::produce_error_response(&shape, d.code.code(), Some(&d.message));
    }
    let reply = ctx.replicas.produce(keel_req).await;
    let image = ctx.images.borrow().clone();
    convert::produce_response(reply, &shape, &image, &ctx.listener)
}

async fn fetch(ctx: &KafkaContext, req: FetchRequest) -> kafka_protocol::messages::FetchResponse {
    let keel_req = match convert::fetch_request(req.clone()) {
        Ok(r) => r,
        Err(refusal) => return convert::fetch_error_response(&req, refusal.code()),
    };
    if bounds::fetch(&keel_req).is_err() {
        return convert::fetch_error_response(&req, ErrorCode::InvalidRequest.code());
    }
    if let Err(d) = ctx.check(|a, c, img| access::fetch(a, c, img, &keel_req)) {
        return convert::fetch_error_response(&req, d.code.code());
    }
    let reply = ctx.replicas.fetch(keel_req).await;
    convert::fetch_response(reply, &req)
}

/// Produce v0-2 (advertised, not served: see [`versions::Served`]): the body is v3's without
/// the leading transactional id, so it is checked and decoded as v3 with a null one, and
/// every partition is answered UNSUPPORTED_VERSION in the v0-2 layout (v1 adds
/// `throttle_time_ms` after the topics, v2 `log_append_time_ms` per partition). `acks=0`
/// closes the connection instead, as any failed `acks=0` produce does.
fn old_produce(body: Bytes, version: i16, correlation_id: i32) -> Result<Option<Bytes>, String> {
    let mut as_v3 = BytesMut::with_capacity(body.len() + 2);
    as_v3.put_i16(-1);
    as_v3.extend_from_slice(&body);
    let mut as_v3 = as_v3.freeze();
    guard::check_request_body(ApiKey::Produce as i16, 3, &as_v3)
        .map_err(|e| format!("Produce v{version}: {e}"))?;
    let req = decode::<ProduceRequest>(&mut as_v3, ApiKey::Produce, 3)?;
    if req.acks == 0 {
        return Err(format!(
            "Produce v{version} is not supported (v3 or later is; acks=0, so no response)"
        ));
    }
    let unsupported = ErrorCode::UnsupportedVersion.code();
    let mut out = BytesMut::new();
    out.put_i32(0);
    out.put_i32(correlation_id); // response header v0
    out.put_i32(req.topic_data.len() as i32);
    for t in &req.topic_data {
        let name = t.name.0.as_str().as_bytes();
        out.put_i16(name.len() as i16);
        out.extend_from_slice(name);
        out.put_i32(t.partition_data.len() as i32);
        for p in &t.partition_data {
            out.put_i32(p.index);
            out.put_i16(unsupported);
            out.put_i64(-1); // base_offset
            if version >= 2 {
                out.put_i64(-1); // log_append_time_ms
            }
        }
    }
    if version >= 1 {
        out.put_i32(0); // throttle_time_ms
    }
    let size = (out.len() - 4) as i32;
    out[..4].copy_from_slice(&size.to_be_bytes());
    Ok(Some(out.freeze()))
}
