//! Produce (DESIGN §5 "Produce"; Kafka `ReplicaManager.appendRecords` + `DelayedProduce`).
//!
//! Per partition, under its lock: [`Acks::from_wire`] (whole request), topic-id check,
//! [`crate::replica::PartitionState::check_produce`], the append
//! ([`crate::log::Log::append_as_leader`], batch by batch), then
//! [`crate::replica::PartitionState::on_produce_appended`]. acks=all answers arrive through
//! a oneshot registered under the waiter token; the handler awaits them after releasing
//! every lock. A deadline backstop (the request timeout plus [`WAIT_GRACE_MS`]) guarantees an
//! answer even if a completion were lost.

use std::time::Duration;

use keel_metadata_log::image::uuid_from_bytes;
use keel_proto::ErrorCode;
use keel_proto::broker::{
    LeaderIdAndEpoch, ProducePartitionResponse, ProduceReply as WireReply, ProduceRequest,
    ProduceTopicResponse,
};
use keel_proto::limits::{cap_message, clip};
use tokio::sync::oneshot;

use super::{PartitionInner, ReplicaManager};
use crate::log::LogError;
use crate::replica::{Acks, ProduceReply, epoch_from_wire};
use keel_record::BatchIter;

/// Compressed batches validated at once by all produce handlers of a broker. Validating one
/// decompresses it whole, up to [`keel_record::MAX_DECOMPRESSED_BYTES`] (64 MiB), so this
/// bounds that memory to 4 x 64 MiB however many clients send compressed batches (Kafka's
/// `LogValidator` decompresses record by record instead); further compressed batches wait
/// for a permit. Uncompressed batches need none.
pub const MAX_CONCURRENT_DECOMPRESSIONS: usize = 4;

/// Whether `records` starts with a batch header whose codec bits say compressed.
fn is_compressed(records: &[u8]) -> bool {
    records.len() >= keel_record::HEADER_SIZE
        && i16::from_be_bytes([records[21], records[22]]) & keel_record::COMPRESSION_CODEC_MASK != 0
}

/// Extra time the handler waits beyond the request timeout for the ticker to expire a
/// waiter, ms.
pub const WAIT_GRACE_MS: u64 = 1_000;

/// The Kafka error code a log error travels as.
pub fn log_error_code(e: &LogError) -> ErrorCode {
    ErrorCode::try_from(e.kafka_code()).unwrap_or(ErrorCode::UnknownServerError)
}

/// A per-partition outcome before the wire conversion.
enum Pending {
    Done(ProducePartitionResponse),
    Wait(ProducePartitionResponse, oneshot::Receiver<ErrorCode>),
}

fn failed(index: i32, code: ErrorCode, message: String) -> ProducePartitionResponse {
    ProducePartitionResponse {
        index,
        error: Some(code.to_proto(message)),
        base_offset: -1,
        log_append_time_ms: -1,
        log_start_offset: -1,
        current_leader: None,
    }
}

/// Kafka's internal topic of the group coordinator (`Topic.GROUP_METADATA_TOPIC_NAME`): only
/// the coordinator appends to it ([`ReplicaManager::append_internal`]); a client's produce
/// to it is INVALID_TOPIC_EXCEPTION for each of its partitions, as Kafka's
/// `ReplicaManager.appendToLocalLog` answers ("Cannot append to internal topic").
pub const OFFSETS_TOPIC: &str = "__consumer_offsets";

impl ReplicaManager {
    /// Serves a Produce request (see the module doc). Never fails as a whole except for
    /// INVALID_REQUIRED_ACKS, which is reported for every partition with nothing appended.
    pub async fn produce(&self, req: ProduceRequest) -> WireReply {
        self.produce_checked(req, false).await
    }

    /// A produce that may append to internal topics ([`OFFSETS_TOPIC`]): the group
    /// coordinator's writes.
    pub async fn append_internal(&self, req: ProduceRequest) -> WireReply {
        self.produce_checked(req, true).await
    }

    async fn produce_checked(&self, req: ProduceRequest, internal: bool) -> WireReply {
        let started = std::time::Instant::now();
        let mut bytes_in = 0u64;
        let reply = self.produce_inner(req, internal, &mut bytes_in).await;
        super::metrics::record_produce(started.elapsed(), bytes_in);
        reply
    }

    async fn produce_inner(
        &self,
        req: ProduceRequest,
        internal: bool,
        bytes_in: &mut u64,
    ) -> WireReply {
        let acks = if req.transactional_id.is_empty() {
            Acks::from_wire(req.acks)
                .map_err(|code| (code, format!("acks must be 0, 1 or -1, got {}", req.acks)))
        } else {
            // Nothing is appended for a transactional producer (see
            // `bounds::UNSUPPORTED_TRANSACTIONS` for the code).
            Err((
                ErrorCode::UnsupportedVersion,
                crate::bounds::UNSUPPORTED_TRANSACTIONS.to_string(),
            ))
        };
        // Negative timeouts were refused by `bounds::produce` before anything was appended.
        let timeout_ms = u64::try_from(req.timeout_ms).unwrap_or(0);
        let mut topics = Vec::with_capacity(req.topics.len());
        for t in req.topics {
            let mut parts = Vec::with_capacity(t.partitions.len());
            for p in t.partitions {
                let _permit = match (&acks, is_compressed(&p.records)) {
                    (Ok(_), true) => self.shared.decompressions.acquire().await.ok(),
                    _ => None,
                };
                let outcome = match &acks {
                    Err((code, message)) => Pending::Done(failed(p.index, *code, message.clone())),
                    Ok(_) if !internal && t.name == OFFSETS_TOPIC => Pending::Done(failed(
                        p.index,
                        ErrorCode::InvalidTopicException,
                        format!("cannot append to internal topic {OFFSETS_TOPIC}"),
                    )),
                    Ok(acks) => self.produce_partition(
                        &t.name,
                        &t.topic_id,
                        p.index,
                        p.records,
                        p.current_leader_epoch,
                        *acks,
                        timeout_ms,
                        bytes_in,
                    ),
                };
                parts.push(outcome);
            }
            topics.push((t.name, t.topic_id, parts));
        }
        let deadline = tokio::time::Instant::now()
            + Duration::from_millis(timeout_ms.saturating_add(WAIT_GRACE_MS));
        let mut responses = Vec::with_capacity(topics.len());
        for (name, topic_id, parts) in topics {
            let mut out = Vec::with_capacity(parts.len());
            for p in parts {
                out.push(match p {
                    Pending::Done(r) => r,
                    Pending::Wait(mut r, rx) => {
                        let code = match tokio::time::timeout_at(deadline, rx).await {
                            Ok(Ok(code)) => code,
                            // The partition was dropped with the waiter: leadership is gone.
                            Ok(Err(_)) => ErrorCode::NotLeaderOrFollower,
                            Err(_) => ErrorCode::RequestTimedOut,
                        };
                        if code != ErrorCode::None {
                            r.error = Some(code.to_proto(cap_message(format!(
                                "acks=all for {}-{}: {code} after timeout_ms {timeout_ms}: {}",
                                clip(&name),
                                r.index,
                                appended_note(r.base_offset)
                            ))));
                        }
                        r
                    }
                });
            }
            responses.push(ProduceTopicResponse {
                name,
                topic_id,
                partitions: out,
            });
        }
        WireReply {
            error: None,
            responses,
            node_endpoints: Vec::new(),
        }
    }

    /// Appends one partition's batch as its leader and answers it, or (acks=all) registers
    /// the waiter the handler awaits. `bytes_in` grows by the batch's bytes unless it was a
    /// duplicate (idempotent retry). Nothing is written when any check fails.
    #[allow(clippy::too_many_arguments)]
    fn produce_partition(
        &self,
        topic: &str,
        topic_id: &[u8],
        index: i32,
        records: bytes::Bytes,
        current_leader_epoch: Option<i32>,
        acks: Acks,
        timeout_ms: u64,
        bytes_in: &mut u64,
    ) -> Pending {
        let shown = clip(topic);
        let Some(hp) = self.partition(topic, index) else {
            return Pending::Done(failed(
                index,
                ErrorCode::UnknownTopicOrPartition,
                format!(
                    "{shown}-{index} is not hosted on broker {}",
                    self.broker_id()
                ),
            ));
        };
        if let Some(code) = check_topic_id(topic_id, hp.topic_id()) {
            return Pending::Done(failed(index, code, format!("topic id of {shown}")));
        }
        if records.len() > keel_proto::limits::MAX_BATCH_BYTES {
            return Pending::Done(failed(
                index,
                ErrorCode::MessageTooLarge,
                format!(
                    "a record batch of {} bytes for {shown}-{index} is over the {} bytes a \
                     batch may have so that replication can carry it",
                    records.len(),
                    keel_proto::limits::MAX_BATCH_BYTES
                ),
            ));
        }
        // Parse the batches before taking the lock; nothing is written unless all parse.
        let batch = match single_batch(records, &shown, index) {
            Ok(batch) => batch,
            Err(refused) => return Pending::Done(refused),
        };
        let now = self.now_ms();
        let mut inner = hp.lock();
        let inner = &mut *inner;
        if let Err(code) = inner
            .state
            .check_produce(acks, current_leader_epoch.and_then(epoch_from_wire))
        {
            return Pending::Done(produce_refused(inner, index, &shown, code));
        }
        let leader_epoch = inner.state.leader_epoch().unwrap_or(-1);
        let size = batch.len() as u64;
        let info = match inner.log.append_as_leader(batch, leader_epoch) {
            Ok(info) => info,
            Err(e) => return Pending::Done(failed(index, log_error_code(&e), e.to_string())),
        };
        if !info.duplicate {
            *bytes_in += size;
        }
        let token = self.next_token();
        let leo = inner.log.log_end_offset();
        let (reply, effects) = inner.state.on_produce_appended(
            acks,
            info.last_offset,
            leo,
            token,
            now.saturating_add(timeout_ms),
            now,
        );
        let rx = (reply == ProduceReply::Wait).then(|| Self::add_waiter(inner, token));
        self.execute(&hp, inner, effects);
        // Every append wakes fetch long polls (followers wait for new data).
        self.shared.data_changed.notify_waiters();
        let ok = ProducePartitionResponse {
            index,
            error: None,
            base_offset: info.first_offset,
            log_append_time_ms: info.log_append_time_ms,
            log_start_offset: inner.log.log_start_offset(),
            current_leader: None,
        };
        appended_outcome(ok, reply, rx, &shown)
    }
}

/// The one record batch in a partition's `records`, or the refusal: the parse error's code,
/// CORRUPT_MESSAGE for no batch, INVALID_RECORD for several (Kafka
/// `ProduceRequest.validateRecords`, v3+).
fn single_batch(
    records: bytes::Bytes,
    shown: &str,
    index: i32,
) -> Result<bytes::Bytes, ProducePartitionResponse> {
    let mut batches = Vec::new();
    for b in BatchIter::new(records) {
        match b {
            Ok(b) => batches.push(b.as_bytes().clone()),
            Err(e) => {
                let e = LogError::from(e);
                return Err(failed(index, log_error_code(&e), e.to_string()));
            }
        }
    }
    if batches.is_empty() {
        return Err(failed(
            index,
            ErrorCode::CorruptMessage,
            format!("no record batch for {shown}-{index}"),
        ));
    }
    if batches.len() > 1 {
        // Kafka `ProduceRequest.validateRecords` (v3+): exactly one batch per partition,
        // so a request is appended whole or not at all.
        return Err(failed(
            index,
            ErrorCode::InvalidRecord,
            format!(
                "{} record batches for {shown}-{index}: a produce request carries exactly one \
                 batch per partition",
                batches.len()
            ),
        ));
    }
    Ok(batches.pop().expect("exactly one batch"))
}

/// The answer to a produce [`crate::replica::PartitionState::check_produce`] refused (nothing
/// appended); NOT_LEADER_OR_FOLLOWER and FENCED_LEADER_EPOCH carry the leader and epoch this
/// replica knows.
fn produce_refused(
    inner: &PartitionInner,
    index: i32,
    shown: &str,
    code: ErrorCode,
) -> ProducePartitionResponse {
    let (_, leader, epoch) = ReplicaManager::role_of(inner);
    let mut r = failed(index, code, format!("{shown}-{index}: {code}"));
    if matches!(
        code,
        ErrorCode::NotLeaderOrFollower | ErrorCode::FencedLeaderEpoch
    ) {
        r.current_leader = Some(LeaderIdAndEpoch {
            leader_id: leader,
            leader_epoch: epoch,
        });
    }
    r
}

/// The answer to an appended batch per the rules' [`ProduceReply`]: `ok` (acks=1, or acks=all
/// already satisfied), `ok` without its offset (acks=0), `ok` with the error and
/// [`appended_note`], or the acks=all wait on `rx` (UNKNOWN_SERVER_ERROR without one).
fn appended_outcome(
    ok: ProducePartitionResponse,
    reply: ProduceReply,
    rx: Option<oneshot::Receiver<ErrorCode>>,
    shown: &str,
) -> Pending {
    let index = ok.index;
    match (reply, rx) {
        (ProduceReply::Wait, Some(rx)) => Pending::Wait(ok, rx),
        (ProduceReply::NoResponse, _) => Pending::Done(ProducePartitionResponse {
            base_offset: -1,
            ..ok
        }),
        (ProduceReply::Respond(ErrorCode::None), _) => Pending::Done(ok),
        (ProduceReply::Respond(code), _) => Pending::Done(ProducePartitionResponse {
            error: Some(code.to_proto(format!(
                "{shown}-{index}: {code}: {}",
                appended_note(ok.base_offset)
            ))),
            ..ok
        }),
        (ProduceReply::Wait, None) => {
            let code = ErrorCode::UnknownServerError;
            Pending::Done(ProducePartitionResponse {
                error: Some(code.to_proto(format!("{shown}-{index}: {code}"))),
                ..ok
            })
        }
    }
}

/// What an acks=all error after the append must tell the producer: the batch is in the
/// leader's log and may still be committed, so a retry without idempotence may duplicate it
/// (Kafka's REQUEST_TIMED_OUT / NOT_ENOUGH_REPLICAS_AFTER_APPEND have the same meaning; the
/// reply keeps `base_offset` so the producer knows where).
fn appended_note(base_offset: i64) -> String {
    format!(
        "the batch was appended to the leader's log at offset {base_offset} and may still be \
         committed; a retry without idempotence may duplicate it"
    )
}

/// UNKNOWN_TOPIC_ID / INCONSISTENT_TOPIC_ID when the request names a topic id that does not
/// match the hosted partition's (empty = not sent).
pub fn check_topic_id(sent: &[u8], hosted: uuid::Uuid) -> Option<ErrorCode> {
    if sent.is_empty() {
        return None;
    }
    match uuid_from_bytes(sent) {
        None => Some(ErrorCode::UnknownTopicId),
        Some(id) if id == hosted => None,
        Some(_) => Some(ErrorCode::InconsistentTopicId),
    }
}

#[cfg(test)]
mod tests {
    use keel_record::{CompressionType, RecordBatchBuilder};

    use super::is_compressed;

    #[test]
    fn only_batches_with_codec_bits_take_a_decompression_permit() {
        let batch = |codec| {
            let mut b = RecordBatchBuilder::new(0).compression(codec);
            b.append(1, None, Some(b"value"), &[]);
            b.build().into_bytes()
        };
        assert!(!is_compressed(&batch(CompressionType::None)));
        for codec in CompressionType::ALL
            .into_iter()
            .filter(|c| *c != CompressionType::None)
        {
            assert!(is_compressed(&batch(codec)), "{codec}");
        }
        assert!(!is_compressed(&batch(CompressionType::Gzip)[..20]));
        assert!(!is_compressed(&[]));
    }
}
