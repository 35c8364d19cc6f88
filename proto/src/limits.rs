//! Bounds on request fields, shared by every service that validates requests (controller and
//! broker) and by clients that want to check before sending.
//!
//! Every request is checked against these bounds in one validation place per service
//! (`keel_controller::bounds`, `keel_broker::bounds`) before anything is decided or written;
//! a field outside its bound is refused with INVALID_REQUEST (42), or Kafka's specific code
//! where Kafka has one (INVALID_TOPIC_EXCEPTION for topic names), and a message naming the
//! field and its limit. Input quoted back in an error message is cut to
//! [`MAX_ECHO_CHARS`] characters ([`clip`]), and every message to [`MAX_ERROR_MESSAGE_BYTES`].
//!
//! Where Kafka has a limit, it is Kafka's (named on each constant); where it has none, the
//! bound is far above any legitimate use and far below what could harm the quorum: every
//! record the controller can commit must fit the metadata log's per-record bound
//! (`keel_metadata_log::limits`), and a request must never make a controller allocate more
//! than its transport limit.

use std::borrow::Cow;

/// Longest topic name, characters (Kafka: `Topic.MAX_NAME_LENGTH`). Legal characters are
/// `[a-zA-Z0-9._-]`, and the name is not `.` or `..` ([`validate_topic_name`]).
pub const MAX_TOPIC_NAME_LEN: usize = 249;
/// Longest host name in a broker endpoint, bytes (RFC 1035 §2.3.4: 255 octets).
pub const MAX_HOST_LEN: usize = 255;
/// Longest listener name, bytes (Kafka's listener names are short identifiers such as
/// `PLAINTEXT`; characters `[A-Za-z0-9_-]`).
pub const MAX_LISTENER_NAME_LEN: usize = 255;
/// Longest rack id, bytes (Kafka: `broker.rack`, no explicit limit; DNS-label sized here).
pub const MAX_RACK_LEN: usize = 255;
/// Most endpoints one broker registers (Kafka has no explicit limit; one per listener).
pub const MAX_LISTENERS: usize = 16;
/// Most supported-feature ranges in one registration.
pub const MAX_FEATURES: usize = 64;
/// Longest feature name, bytes.
pub const MAX_FEATURE_NAME_LEN: usize = 255;
/// Longest cluster id, bytes (Kafka's are 22-character base64 UUIDs; Keel's 36-character
/// UUID strings).
pub const MAX_CLUSTER_ID_LEN: usize = 64;
/// Longest config key, bytes.
pub const MAX_CONFIG_NAME_LEN: usize = 255;
/// Longest config value, bytes (Kafka's protocol STRING: int16 length, 32,767).
pub const MAX_CONFIG_VALUE_LEN: usize = 32_767;
/// Most config entries for one resource in one request (Keel knows fewer than 30 keys).
pub const MAX_CONFIGS_PER_RESOURCE: usize = 1_000;
/// Most resources in one AlterConfigs or DescribeConfigs request.
pub const MAX_CONFIG_RESOURCES: usize = 1_000;
/// Most topics named in one request (CreateTopics, DeleteTopics, AlterPartition,
/// ElectLeaders, Produce, Fetch, ListOffsets, OffsetsForLeaderEpoch, Metadata,
/// DescribeReplicas).
pub const MAX_TOPICS_PER_REQUEST: usize = 10_000;
/// Most partitions named in one request, over all its topics. A CreateTopics with explicit
/// assignments is also held to it.
pub const MAX_PARTITIONS_PER_REQUEST: usize = 100_000;
/// Most replicas (brokers) in one replica list or ISR (Kafka has no explicit limit; a
/// partition's replication factor is at most the number of brokers).
pub const MAX_REPLICAS: usize = 256;
/// Longest transactional id, bytes (Kafka's protocol STRING). Keel has no transactions yet:
/// the broker's InitProducerId documents how a non-empty one is answered.
pub const MAX_TRANSACTIONAL_ID_LEN: usize = 32_767;
/// Characters of client input quoted back in an error message, at most.
pub const MAX_ECHO_CHARS: usize = 64;
/// Bytes of one error message, at most (longer messages are cut at a character boundary).
pub const MAX_ERROR_MESSAGE_BYTES: usize = 1_024;
/// Largest ControllerService request the controller decodes, bytes. The largest legitimate
/// one, a CreateTopics of 9,982 explicitly assigned partitions, is far smaller.
pub const MAX_CONTROLLER_REQUEST_BYTES: usize = 8 << 20;

/// Largest gRPC message a broker decodes or sends, and the largest Keel's broker clients
/// accept, bytes (64 MiB). Kafka's `socket.request.max.bytes` is 100 MiB; Keel keeps 64 MiB
/// because nothing legitimate needs more: a Produce carries one batch per partition, each at
/// most the topic's `max.message.bytes` (default 1 MiB + 12), and fetch replies are capped at
/// 32 MiB of records. A larger request is refused by tonic with gRPC OUT_OF_RANGE before it
/// is decoded; a topic whose `max.message.bytes` exceeds this limit cannot receive batches
/// that large over gRPC.
pub const MAX_BROKER_MESSAGE_BYTES: usize = 64 << 20;

/// Largest record batch a leader accepts, bytes (48 MiB), whatever the topic's
/// `max.message.bytes`: replication carries batches in gRPC fetch replies of at most
/// [`MAX_BROKER_MESSAGE_BYTES`], and a reply always holds its first batch whole (KIP-74), so a
/// larger batch could never reach the followers and would stall every partition fetched from
/// that leader. 48 MiB leaves room for a reply's other partitions. A larger batch is
/// MESSAGE_TOO_LARGE (10). Kafka has no such bound (its replication uses its own framing).
pub const MAX_BATCH_BYTES: usize = 48 << 20;

/// HTTP/2 flow-control window per stream on BrokerService connections (server and clients),
/// bytes. h2's default (64 KiB) makes every larger produce request or fetch reply wait for
/// window updates; batches are up to `max.message.bytes` and fetch replies several MiB.
pub const BROKER_STREAM_WINDOW_BYTES: u32 = 8 << 20;

/// HTTP/2 flow-control window per BrokerService connection, bytes (many requests share a
/// connection).
pub const BROKER_CONNECTION_WINDOW_BYTES: u32 = 64 << 20;

/// Largest HTTP/2 frame a BrokerService server or client accepts (its SETTINGS_MAX_FRAME_SIZE,
/// RFC 9113 §6.5.2: 16,384 to 16,777,215), bytes. h2's default, 16 KiB, cuts a 64 KiB produce
/// request or fetch reply into four DATA frames, each sent with its own `writev` and read in
/// as many `recvfrom`s: measured on a broker at 100 MiB/s (strace), about 15 `writev` and 24
/// `recvfrom` per batch led. With 1 MiB a batch up to `max.message.bytes`' default travels in
/// one frame; a larger message is still split, and other streams of the connection wait at
/// most one frame's write.
pub const BROKER_MAX_FRAME_BYTES: u32 = 1 << 20;

/// `s` cut to [`MAX_ECHO_CHARS`] characters, with `...(N bytes)` appended when cut, for
/// quoting client input in error messages.
///
/// ```
/// use keel_proto::limits::clip;
/// assert_eq!(clip("short"), "short");
/// let long = "x".repeat(1000);
/// assert!(clip(&long).len() < 100);
/// assert!(clip(&long).ends_with("...(1000 bytes)"));
/// ```
pub fn clip(s: &str) -> Cow<'_, str> {
    match s.char_indices().nth(MAX_ECHO_CHARS) {
        None => Cow::Borrowed(s),
        Some((cut, _)) => Cow::Owned(format!("{}...({} bytes)", &s[..cut], s.len())),
    }
}

/// `message` cut to at most [`MAX_ERROR_MESSAGE_BYTES`] bytes at a character boundary.
pub fn cap_message(mut message: String) -> String {
    if message.len() > MAX_ERROR_MESSAGE_BYTES {
        let mut cut = MAX_ERROR_MESSAGE_BYTES - 3;
        while !message.is_char_boundary(cut) {
            cut -= 1;
        }
        message.truncate(cut);
        message.push_str("...");
    }
    message
}

/// A request field outside its bound: `field` is its path in the request (e.g.
/// `listeners[0].host`), `problem` what is wrong. `Display`: `field: problem`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {problem}")]
pub struct FieldError {
    /// Path of the field in the request.
    pub field: String,
    /// What is wrong, with the limit.
    pub problem: String,
}

impl FieldError {
    /// A field error.
    pub fn new(field: impl Into<String>, problem: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            problem: problem.into(),
        }
    }
}

/// `s` (the field `field`) is at most `max` bytes.
pub fn check_len(field: impl FnOnce() -> String, s: &str, max: usize) -> Result<(), FieldError> {
    if s.len() > max {
        return Err(FieldError::new(
            field(),
            format!("{} bytes, the limit is {max} ({})", s.len(), clip(s)),
        ));
    }
    Ok(())
}

/// The list `field` has at most `max` items.
pub fn check_count(field: impl FnOnce() -> String, n: usize, max: usize) -> Result<(), FieldError> {
    if n > max {
        return Err(FieldError::new(
            field(),
            format!("{n} items, the limit is {max}"),
        ));
    }
    Ok(())
}

/// `v` (the field `field`) lies in `range`.
pub fn check_range<T: PartialOrd + std::fmt::Display + Copy>(
    field: impl FnOnce() -> String,
    v: T,
    range: std::ops::RangeInclusive<T>,
) -> Result<(), FieldError> {
    if !range.contains(&v) {
        return Err(FieldError::new(
            field(),
            format!("{v} is outside {}..={}", range.start(), range.end()),
        ));
    }
    Ok(())
}

/// A topic id field: empty (absent) or 16 bytes.
pub fn check_topic_id(field: impl FnOnce() -> String, id: &[u8]) -> Result<(), FieldError> {
    if !id.is_empty() && id.len() != 16 {
        return Err(FieldError::new(
            field(),
            format!("{} bytes, a topic id is 16 bytes (or empty)", id.len()),
        ));
    }
    Ok(())
}

/// Kafka's topic name rule (`Topic.validate`): 1..=249 characters of `[a-zA-Z0-9._-]`, and
/// not `.` or `..`. `Err` says why (the name quoted with [`clip`]).
pub fn validate_topic_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("topic name is empty".into());
    }
    if name == "." || name == ".." {
        return Err(format!("topic name cannot be {name:?}"));
    }
    if name.len() > MAX_TOPIC_NAME_LEN {
        return Err(format!(
            "topic name is {} characters, the limit is {MAX_TOPIC_NAME_LEN} ({})",
            name.len(),
            clip(name)
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(format!(
            "topic name {:?} contains {c:?}; legal characters are [a-zA-Z0-9._-]",
            clip(name)
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clip_cuts_at_a_character_boundary_and_says_the_length() {
        let s = "é".repeat(100);
        let c = clip(&s);
        assert!(c.starts_with(&"é".repeat(MAX_ECHO_CHARS)));
        assert!(c.ends_with("...(200 bytes)"), "{c}");
        assert_eq!(clip("abc"), "abc");
    }

    #[test]
    fn cap_message_keeps_short_messages_and_cuts_long_ones() {
        assert_eq!(cap_message("x".into()), "x");
        let long = "ü".repeat(2_000);
        let capped = cap_message(long);
        assert!(capped.len() <= MAX_ERROR_MESSAGE_BYTES);
        assert!(capped.ends_with("..."));
    }

    #[test]
    fn checks_name_the_field_and_the_limit() {
        let e = check_len(
            || "listeners[0].host".into(),
            &"h".repeat(300),
            MAX_HOST_LEN,
        )
        .unwrap_err();
        assert_eq!(e.field, "listeners[0].host");
        assert!(e.problem.contains("300 bytes, the limit is 255"), "{e}");
        assert!(check_len(|| "x".into(), "ok", 2).is_ok());
        assert!(check_count(|| "topics".into(), 3, 2).is_err());
        assert!(check_range(|| "epoch".into(), 40_000, 0..=i16::MAX as i32).is_err());
        assert!(check_range(|| "epoch".into(), 5, 0..=i16::MAX as i32).is_ok());
        assert!(check_topic_id(|| "topic_id".into(), &[0; 15]).is_err());
        assert!(check_topic_id(|| "topic_id".into(), &[]).is_ok());
    }

    #[test]
    fn topic_names_follow_kafka() {
        assert!(validate_topic_name("a.b_c-9").is_ok());
        assert!(validate_topic_name(&"a".repeat(249)).is_ok());
        let long = validate_topic_name(&"a".repeat(1 << 20)).unwrap_err();
        assert!(long.len() < 200, "{long}");
        assert!(validate_topic_name("").is_err());
        assert!(validate_topic_name("..").is_err());
        assert!(validate_topic_name("a b").is_err());
    }
}
