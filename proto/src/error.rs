//! Kafka error codes as Keel uses them (DESIGN §5: "Errors travel as Kafka error codes
//! (numeric + name) inside gRPC responses").
//!
//! [`ErrorCode`] lists every code a Keel component may put into a [`common::Error`]. Numbers,
//! names and retriability are Kafka's (`org.apache.kafka.common.protocol.Errors`); a code is
//! [retriable](ErrorCode::retriable) exactly when Kafka's exception class for it extends
//! `RetriableException` (directly or, e.g., through `InvalidMetadataException`).
//!
//! The table in the `error_codes!` invocation below is the single source of truth: the enum,
//! [`ErrorCode::code`], [`ErrorCode::name`], [`ErrorCode::retriable`],
//! [`ErrorCode::from_code`] and [`ErrorCode::ALL`] are all generated from it.

use std::fmt;
use std::str::FromStr;

use crate::common;

/// A numeric error code that is not in [`ErrorCode`] (a newer peer, or a corrupt reply).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
#[error("unknown Kafka error code {code}")]
pub struct UnknownErrorCode {
    /// The code received.
    pub code: i32,
}

/// An error name that is not in [`ErrorCode`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, thiserror::Error)]
#[error("unknown Kafka error name {name:?}")]
pub struct UnknownErrorName {
    /// The name received.
    pub name: String,
}

macro_rules! error_codes {
    ($(
        $(#[doc = $doc:literal])*
        $variant:ident = ($code:literal, $name:literal, $retriable:literal);
    )*) => {
        /// A Kafka error code: Kafka's number (`code()`, int16 on Kafka's wire) and upper-case
        /// name (`name()`), with Kafka's retriability (`retriable()`).
        ///
        /// Displayed as its name, e.g. `NOT_LEADER_OR_FOLLOWER`; parsed from it with
        /// [`FromStr`].
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(i16)]
        pub enum ErrorCode {
            $(
                $(#[doc = $doc])*
                $variant = $code,
            )*
        }

        impl ErrorCode {
            /// Every code, in table order (NONE, UNKNOWN_SERVER_ERROR, then ascending numbers).
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$variant),*];

            /// Kafka's numeric code.
            pub const fn code(self) -> i16 {
                self as i16
            }

            /// Kafka's upper-case name, e.g. `"NOT_LEADER_OR_FOLLOWER"`.
            pub const fn name(self) -> &'static str {
                match self {
                    $(ErrorCode::$variant => $name,)*
                }
            }

            /// Whether Kafka classifies the error as retriable (its exception extends
            /// `RetriableException`): the same request may succeed if sent again, possibly
            /// after refreshing metadata. `NONE` is not retriable.
            pub const fn retriable(self) -> bool {
                match self {
                    $(ErrorCode::$variant => $retriable,)*
                }
            }

            /// The code with Kafka number `code`, or `None` if Keel does not know it.
            pub const fn from_code(code: i16) -> Option<ErrorCode> {
                match code {
                    $($code => Some(ErrorCode::$variant),)*
                    _ => None,
                }
            }
        }
    };
}

error_codes! {
    /// No error (success).
    None = (0, "NONE", false);
    /// An unexpected server-side failure that no other code describes (a bug, or an internal
    /// invariant violated). Keel uses it sparingly: every expected failure has its own code.
    UnknownServerError = (-1, "UNKNOWN_SERVER_ERROR", false);
    /// Fetch: `fetch_offset` is outside [log start offset, HW] for a consumer (or outside the
    /// log for a follower). ReadMetadataLog: `from_offset` is below the metadata log start.
    OffsetOutOfRange = (1, "OFFSET_OUT_OF_RANGE", false);
    /// Produce: a record batch fails its CRC32C check, its framing, or its length.
    CorruptMessage = (2, "CORRUPT_MESSAGE", true);
    /// The topic or partition does not exist, or (broker APIs) this broker does not host it.
    UnknownTopicOrPartition = (3, "UNKNOWN_TOPIC_OR_PARTITION", true);
    /// The partition has no leader right now (leader = -1, e.g. offline after its only ISR
    /// member was fenced).
    LeaderNotAvailable = (5, "LEADER_NOT_AVAILABLE", true);
    /// Produce / Fetch / ListOffsets / OffsetsForLeaderEpoch sent to a broker that is not the
    /// partition's leader (or, for follower fetches, not its leader either); also fails
    /// acks=all waiters when leadership is lost.
    NotLeaderOrFollower = (6, "NOT_LEADER_OR_FOLLOWER", true);
    /// acks=all: the HW did not reach the batch within `timeout_ms` (the data may still be
    /// committed later). Also any request that timed out waiting for the controller.
    RequestTimedOut = (7, "REQUEST_TIMED_OUT", true);
    /// A broker needed for the request is not registered or is fenced.
    BrokerNotAvailable = (8, "BROKER_NOT_AVAILABLE", false);
    /// A replica of the partition is not available on this broker (e.g. its log is still
    /// loading).
    ReplicaNotAvailable = (9, "REPLICA_NOT_AVAILABLE", true);
    /// Produce: a batch is larger than the topic's maximum message size.
    MessageTooLarge = (10, "MESSAGE_TOO_LARGE", false);
    /// OffsetCommit: the metadata string is longer than `offset_metadata_max_bytes` (Kafka
    /// `offset.metadata.max.bytes`, 4096).
    OffsetMetadataTooLarge = (12, "OFFSET_METADATA_TOO_LARGE", false);
    /// A connection failed before a reply arrived (client-side classification of transport
    /// errors).
    NetworkException = (13, "NETWORK_EXCEPTION", true);
    /// Group APIs: the coordinator is still loading the group's `__consumer_offsets` partition.
    CoordinatorLoadInProgress = (14, "COORDINATOR_LOAD_IN_PROGRESS", true);
    /// FindCoordinator and group APIs: no coordinator now (`__consumer_offsets` is being
    /// created, has no leader, or a write to it failed for lack of replicas).
    CoordinatorNotAvailable = (15, "COORDINATOR_NOT_AVAILABLE", true);
    /// Group APIs: this broker does not coordinate the group (find it again).
    NotCoordinator = (16, "NOT_COORDINATOR", true);
    /// CreateTopics / Metadata: an illegal topic name (empty, ".", "..", longer than 249
    /// characters, or characters outside `[a-zA-Z0-9._-]`).
    InvalidTopicException = (17, "INVALID_TOPIC_EXCEPTION", false);
    /// Produce: a batch is larger than the topic's segment size.
    RecordListTooLarge = (18, "RECORD_LIST_TOO_LARGE", false);
    /// Produce with acks=all: the ISR is smaller than `min.insync.replicas` before the append;
    /// nothing was appended.
    NotEnoughReplicas = (19, "NOT_ENOUGH_REPLICAS", true);
    /// Produce with acks=all: the batch was appended on the leader but the ISR fell below
    /// `min.insync.replicas` while waiting for the HW; the outcome is unknown.
    NotEnoughReplicasAfterAppend = (20, "NOT_ENOUGH_REPLICAS_AFTER_APPEND", true);
    /// Produce: `acks` is not 0, 1 or -1.
    InvalidRequiredAcks = (21, "INVALID_REQUIRED_ACKS", false);
    /// SyncGroup, Heartbeat, OffsetCommit: the generation is not the group's current one.
    IllegalGeneration = (22, "ILLEGAL_GENERATION", false);
    /// JoinGroup: empty protocol type or list, another type than the group's, or no protocol
    /// shared with the members; SyncGroup v5+: type or name differ from the group's.
    InconsistentGroupProtocol = (23, "INCONSISTENT_GROUP_PROTOCOL", false);
    /// Group APIs: the group id is empty.
    InvalidGroupId = (24, "INVALID_GROUP_ID", false);
    /// Group APIs: the member id is not a member of the group.
    UnknownMemberId = (25, "UNKNOWN_MEMBER_ID", false);
    /// JoinGroup: the session timeout is outside `group_min_session_timeout_ms` ..
    /// `group_max_session_timeout_ms`.
    InvalidSessionTimeout = (26, "INVALID_SESSION_TIMEOUT", false);
    /// Heartbeat, SyncGroup, OffsetCommit: the group is rebalancing; rejoin.
    RebalanceInProgress = (27, "REBALANCE_IN_PROGRESS", false);
    /// OffsetCommit: the commit is too large to be written.
    InvalidCommitOffsetSize = (28, "INVALID_COMMIT_OFFSET_SIZE", false);
    /// The principal may not perform the operation on the topic (no ALLOW ACL, or a DENY
    /// ACL; Kafka's StandardAuthorizer). Nothing was changed for that topic.
    TopicAuthorizationFailed = (29, "TOPIC_AUTHORIZATION_FAILED", false);
    /// The principal may not perform the operation on the consumer group.
    GroupAuthorizationFailed = (30, "GROUP_AUTHORIZATION_FAILED", false);
    /// The principal may not perform the operation on the cluster (e.g. ClusterAction for a
    /// broker RPC, Alter for an operator ISR change or election, or a node principal that does
    /// not match the node id the request claims).
    ClusterAuthorizationFailed = (31, "CLUSTER_AUTHORIZATION_FAILED", false);
    /// Produce: a record timestamp is outside the accepted range.
    InvalidTimestamp = (32, "INVALID_TIMESTAMP", false);
    /// SaslHandshake: the client asked for a SASL mechanism the listener does not enable
    /// (`sasl_enabled_mechanisms`); the response lists the enabled ones (KIP-43).
    UnsupportedSaslMechanism = (33, "UNSUPPORTED_SASL_MECHANISM", false);
    /// A SASL request out of order on a `SASL_*` listener (SaslAuthenticate before
    /// SaslHandshake, a second handshake, another request before authentication).
    IllegalSaslState = (34, "ILLEGAL_SASL_STATE", false);
    /// A request or format version this node does not support (e.g. an unknown snapshot or
    /// Raft payload version).
    UnsupportedVersion = (35, "UNSUPPORTED_VERSION", false);
    /// CreateTopics: a topic with this name exists.
    TopicAlreadyExists = (36, "TOPIC_ALREADY_EXISTS", false);
    /// CreateTopics: the partition count is 0 or below -1.
    InvalidPartitions = (37, "INVALID_PARTITIONS", false);
    /// CreateTopics: the replication factor is 0, below -1, or larger than the number of
    /// unfenced brokers.
    InvalidReplicationFactor = (38, "INVALID_REPLICATION_FACTOR", false);
    /// CreateTopics: explicit assignments with gaps, duplicates, unequal lengths or unknown
    /// brokers.
    InvalidReplicaAssignment = (39, "INVALID_REPLICA_ASSIGNMENT", false);
    /// CreateTopics / AlterConfigs: unknown config key or invalid value.
    InvalidConfig = (40, "INVALID_CONFIG", false);
    /// A controller write (or DescribeQuorum) reached a controller that is not the active one,
    /// or leadership was lost before the write committed. The reply names the active
    /// controller when known; retry there.
    NotController = (41, "NOT_CONTROLLER", true);
    /// A malformed or contradictory request, e.g. AlterPartition from a broker that is not
    /// the leader, or a new ISR that is not a subset of the replicas or lacks the leader.
    InvalidRequest = (42, "INVALID_REQUEST", false);
    /// A request refused by a configured policy.
    PolicyViolation = (44, "POLICY_VIOLATION", false);
    /// Idempotent produce: a sequence gap for the producer id (a batch is missing).
    OutOfOrderSequenceNumber = (45, "OUT_OF_ORDER_SEQUENCE_NUMBER", false);
    /// Idempotent produce: a duplicate that is no longer among the retained batches, so its
    /// original offsets cannot be returned.
    DuplicateSequenceNumber = (46, "DUPLICATE_SEQUENCE_NUMBER", false);
    /// Idempotent produce / InitProducerId: the producer epoch is older than the one the
    /// partition has seen for this producer id.
    InvalidProducerEpoch = (47, "INVALID_PRODUCER_EPOCH", false);
    /// FindCoordinator for a transactional id (key type 1) on the Kafka listener: Keel has no
    /// transaction coordinator. Kafka's answer when the principal may not use the id; the one
    /// non-retriable code both librdkafka and the Java producer treat as fatal at that step,
    /// so `init_transactions()` fails at once instead of retrying until its timeout.
    TransactionalIdAuthorizationFailed = (53, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", false);
    /// An ACL request reached a node without an authorizer configured
    /// (`authorizer = "standard"`).
    SecurityDisabled = (54, "SECURITY_DISABLED", false);
    /// An I/O error in a partition's log directory.
    KafkaStorageError = (56, "KAFKA_STORAGE_ERROR", true);
    /// SaslAuthenticate: the credentials were refused (unknown user, wrong password, or a
    /// malformed SCRAM message); the connection is closed after the response (KIP-152).
    SaslAuthenticationFailed = (58, "SASL_AUTHENTICATION_FAILED", false);
    /// Idempotent produce: the partition has no state for the producer id (e.g. it expired
    /// or was removed by retention) and the batch does not start a new sequence.
    UnknownProducerId = (59, "UNKNOWN_PRODUCER_ID", false);
    /// DeleteGroups, offset reset: the group still has members.
    NonEmptyGroup = (68, "NON_EMPTY_GROUP", false);
    /// DeleteGroups, DescribeGroups v6: the group does not exist.
    GroupIdNotFound = (69, "GROUP_ID_NOT_FOUND", false);
    /// Kafka Fetch (KIP-227): the request names a fetch session this broker does not have
    /// (Keel creates none; clients then fall back to full fetches).
    FetchSessionIdNotFound = (70, "FETCH_SESSION_ID_NOT_FOUND", true);
    /// Kafka Fetch (KIP-227): an incremental fetch-session epoch without a session.
    InvalidFetchSessionEpoch = (71, "INVALID_FETCH_SESSION_EPOCH", true);
    /// The request's leader epoch is older than the partition's (Produce, Fetch, ListOffsets,
    /// OffsetsForLeaderEpoch with `current_leader_epoch`; AlterPartition's `leader_epoch`).
    FencedLeaderEpoch = (74, "FENCED_LEADER_EPOCH", true);
    /// The request's leader epoch is newer than the partition's (this broker's metadata is
    /// behind).
    UnknownLeaderEpoch = (75, "UNKNOWN_LEADER_EPOCH", true);
    /// BrokerHeartbeat / AlterPartition / AllocateProducerIds / follower Fetch carry an
    /// older broker epoch than the broker's current registration.
    StaleBrokerEpoch = (77, "STALE_BROKER_EPOCH", false);
    /// ListOffsets, or a consumer Fetch above the HW: a new leader's HW has not yet caught up
    /// to the start offset of its epoch, so it may trail the previous leader's (KIP-207).
    OffsetNotAvailable = (78, "OFFSET_NOT_AVAILABLE", true);
    /// JoinGroup v4+: a new member must rejoin with the member id in the answer (KIP-394).
    MemberIdRequired = (79, "MEMBER_ID_REQUIRED", false);
    /// ElectLeaders PREFERRED: the preferred replica is not in the ISR or not eligible.
    PreferredLeaderNotAvailable = (80, "PREFERRED_LEADER_NOT_AVAILABLE", true);
    /// JoinGroup: the group has `group_max_size` members.
    GroupMaxSizeReached = (81, "GROUP_MAX_SIZE_REACHED", false);
    /// Group APIs: another member took this static instance id (KIP-345).
    FencedInstanceId = (82, "FENCED_INSTANCE_ID", false);
    /// ElectLeaders (or automatic election): no replica may become leader.
    EligibleLeadersNotAvailable = (83, "ELIGIBLE_LEADERS_NOT_AVAILABLE", true);
    /// ElectLeaders: the partition already has the leader the election would choose.
    ElectionNotNeeded = (84, "ELECTION_NOT_NEEDED", true);
    /// AlterPartitionReassignments: a cancellation of a partition that has no reassignment in
    /// progress (KIP-455).
    NoReassignmentInProgress = (85, "NO_REASSIGNMENT_IN_PROGRESS", false);
    /// OffsetDelete: the group has members subscribed to the partition's topic, whose
    /// offsets are in use (KIP-496).
    GroupSubscribedToTopic = (86, "GROUP_SUBSCRIBED_TO_TOPIC", false);
    /// Produce: a record inside an otherwise well-formed batch is invalid.
    InvalidRecord = (87, "INVALID_RECORD", false);
    /// DescribeUserScramCredentials / AlterUserScramCredentials: the user has no credential
    /// (for that mechanism, on a deletion) (KIP-554).
    ResourceNotFound = (91, "RESOURCE_NOT_FOUND", false);
    /// AlterUserScramCredentials: the same user and mechanism appear more than once in one
    /// request; DescribeUserScramCredentials: a user named twice (KIP-554).
    DuplicateResource = (92, "DUPLICATE_RESOURCE", false);
    /// AlterUserScramCredentials: an empty user name, iterations outside 4096..=16384, or a
    /// salt or salted password of the wrong size (KIP-554).
    UnacceptableCredential = (93, "UNACCEPTABLE_CREDENTIAL", false);
    /// AlterPartition: the request's partition epoch (or operator's
    /// `expected_partition_epoch`) is older than the partition's (KIP-497).
    InvalidUpdateVersion = (95, "INVALID_UPDATE_VERSION", false);
    /// A feature-level update (`metadata.version`) could not be applied.
    FeatureUpdateFailed = (96, "FEATURE_UPDATE_FAILED", false);
    /// A topic id that this node does not know.
    UnknownTopicId = (100, "UNKNOWN_TOPIC_ID", true);
    /// RegisterBroker: another incarnation of this broker id is still registered and live.
    DuplicateBrokerRegistration = (101, "DUPLICATE_BROKER_REGISTRATION", false);
    /// BrokerHeartbeat / AllocateProducerIds / UnregisterBroker: the broker id has no
    /// registration.
    BrokerIdNotRegistered = (102, "BROKER_ID_NOT_REGISTERED", false);
    /// Fetch / Produce: the topic id in the request differs from the one this broker has for
    /// that name (the topic was deleted and re-created).
    InconsistentTopicId = (103, "INCONSISTENT_TOPIC_ID", true);
    /// RegisterBroker: the broker's cluster id is not the quorum's.
    InconsistentClusterId = (104, "INCONSISTENT_CLUSTER_ID", false);
    /// AlterPartition: a member of the new ISR is fenced, in controlled shutdown,
    /// unregistered, or named with a broker epoch other than its current one (KIP-841,
    /// KIP-903).
    IneligibleReplica = (107, "INELIGIBLE_REPLICA", false);
    /// AlterPartition: the ISR change was committed but the controller also elected a
    /// different leader (the sender is no longer leader).
    NewLeaderElected = (108, "NEW_LEADER_ELECTED", false);
    /// Fetch: the offset is only in tiered storage (KIP-405; Keel has none yet).
    OffsetMovedToTieredStorage = (109, "OFFSET_MOVED_TO_TIERED_STORAGE", false);
    /// A Raft request whose voter key (node id + directory id, KIP-853) does not match the
    /// receiving or sending controller's: its metadata log directory was replaced.
    InvalidVoterKey = (125, "INVALID_VOTER_KEY", false);
    /// AddRaftVoter: the node id or the directory id is already a voter (KIP-853).
    DuplicateVoter = (126, "DUPLICATE_VOTER", false);
    /// RemoveRaftVoter: no voter has this node id and directory id (KIP-853).
    VoterNotFound = (127, "VOTER_NOT_FOUND", false);
}

impl ErrorCode {
    /// True for every code except [`ErrorCode::None`].
    pub const fn is_error(self) -> bool {
        !matches!(self, ErrorCode::None)
    }

    /// The code with name `name` (Kafka's upper-case name), or `None`.
    pub fn from_name(name: &str) -> Option<ErrorCode> {
        ErrorCode::ALL.iter().copied().find(|c| c.name() == name)
    }

    /// This code as a wire error with an optional human-readable `message`.
    pub fn to_proto(self, message: impl Into<String>) -> common::Error {
        common::Error {
            code: i32::from(self.code()),
            name: self.name().to_owned(),
            message: crate::limits::cap_message(message.into()),
        }
    }

    /// The code carried by an optional wire error field: absent means success
    /// ([`ErrorCode::None`]), as in every Keel reply.
    ///
    /// ```
    /// use keel_proto::ErrorCode;
    ///
    /// assert_eq!(ErrorCode::from_proto(None), Ok(ErrorCode::None));
    /// let wire = ErrorCode::NotLeaderOrFollower.to_proto("leader is broker 2");
    /// let code = ErrorCode::from_proto(Some(&wire)).unwrap();
    /// assert_eq!((code.code(), code.name()), (6, "NOT_LEADER_OR_FOLLOWER"));
    /// assert!(code.retriable());
    /// assert_eq!("OFFSET_NOT_AVAILABLE".parse(), Ok(ErrorCode::OffsetNotAvailable));
    /// ```
    pub fn from_proto(error: Option<&common::Error>) -> Result<ErrorCode, UnknownErrorCode> {
        error.map_or(Ok(ErrorCode::None), common::Error::error_code)
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::error::Error for ErrorCode {}

impl FromStr for ErrorCode {
    type Err = UnknownErrorName;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ErrorCode::from_name(s).ok_or_else(|| UnknownErrorName { name: s.to_owned() })
    }
}

impl From<ErrorCode> for i16 {
    fn from(code: ErrorCode) -> i16 {
        code.code()
    }
}

impl TryFrom<i16> for ErrorCode {
    type Error = UnknownErrorCode;

    fn try_from(code: i16) -> Result<Self, Self::Error> {
        ErrorCode::from_code(code).ok_or(UnknownErrorCode {
            code: i32::from(code),
        })
    }
}

impl TryFrom<i32> for ErrorCode {
    type Error = UnknownErrorCode;

    fn try_from(code: i32) -> Result<Self, Self::Error> {
        i16::try_from(code)
            .ok()
            .and_then(ErrorCode::from_code)
            .ok_or(UnknownErrorCode { code })
    }
}

impl From<ErrorCode> for common::Error {
    /// The wire error for `code` with an empty message.
    fn from(code: ErrorCode) -> common::Error {
        code.to_proto(String::new())
    }
}

impl common::Error {
    /// The [`ErrorCode`] of this wire error. The numeric `code` is authoritative; `name` is
    /// informational and not checked.
    pub fn error_code(&self) -> Result<ErrorCode, UnknownErrorCode> {
        ErrorCode::try_from(self.code)
    }

    /// True when the error is NONE (code 0).
    pub fn is_none(&self) -> bool {
        self.code == 0
    }
}

impl fmt::Display for common::Error {
    /// `NAME (code)` or `NAME (code): message`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = if self.name.is_empty() {
            ErrorCode::try_from(self.code).map_or("UNKNOWN", ErrorCode::name)
        } else {
            self.name.as_str()
        };
        write!(f, "{name} ({})", self.code)?;
        if !self.message.is_empty() {
            write!(f, ": {}", self.message)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn every_code_round_trips_through_number_and_name() {
        for &c in ErrorCode::ALL {
            assert_eq!(ErrorCode::from_code(c.code()), Some(c), "{c}");
            assert_eq!(ErrorCode::try_from(c.code()), Ok(c));
            assert_eq!(ErrorCode::try_from(i32::from(c.code())), Ok(c));
            assert_eq!(c.name().parse::<ErrorCode>(), Ok(c));
            assert_eq!(c.to_string(), c.name());
            let wire = c.to_proto("detail");
            assert_eq!(wire.code, i32::from(c.code()));
            assert_eq!(wire.name, c.name());
            assert_eq!(wire.error_code(), Ok(c));
        }
    }

    #[test]
    fn numbers_and_names_are_unique_and_sorted() {
        let codes: HashSet<i16> = ErrorCode::ALL.iter().map(|c| c.code()).collect();
        let names: HashSet<&str> = ErrorCode::ALL.iter().map(|c| c.name()).collect();
        assert_eq!(codes.len(), ErrorCode::ALL.len());
        assert_eq!(names.len(), ErrorCode::ALL.len());
        // The table lists NONE first, then UNKNOWN_SERVER_ERROR (-1), then ascending numbers.
        assert_eq!(ErrorCode::ALL[0], ErrorCode::None);
        assert_eq!(ErrorCode::ALL[1], ErrorCode::UnknownServerError);
        assert!(
            ErrorCode::ALL[2..]
                .windows(2)
                .all(|w| w[0].code() < w[1].code())
        );
    }

    #[test]
    fn names_are_upper_snake_case() {
        for &c in ErrorCode::ALL {
            assert!(
                c.name()
                    .chars()
                    .all(|ch| ch.is_ascii_uppercase() || ch == '_'),
                "{c:?}"
            );
        }
    }

    #[test]
    fn kafka_numbers_spot_checks() {
        let expect = [
            (ErrorCode::None, 0),
            (ErrorCode::UnknownServerError, -1),
            (ErrorCode::NotLeaderOrFollower, 6),
            (ErrorCode::RequestTimedOut, 7),
            (ErrorCode::NotEnoughReplicas, 19),
            (ErrorCode::NotEnoughReplicasAfterAppend, 20),
            (ErrorCode::InvalidRequiredAcks, 21),
            (ErrorCode::NotController, 41),
            (ErrorCode::OutOfOrderSequenceNumber, 45),
            (ErrorCode::DuplicateSequenceNumber, 46),
            (ErrorCode::InvalidProducerEpoch, 47),
            (ErrorCode::FencedLeaderEpoch, 74),
            (ErrorCode::UnknownLeaderEpoch, 75),
            (ErrorCode::StaleBrokerEpoch, 77),
            (ErrorCode::InvalidUpdateVersion, 95),
            (ErrorCode::IneligibleReplica, 107),
            (ErrorCode::NewLeaderElected, 108),
        ];
        for (c, n) in expect {
            assert_eq!(c.code(), n, "{c}");
        }
    }

    #[test]
    fn retriable_matches_kafka() {
        let retriable = [
            ErrorCode::CorruptMessage,
            ErrorCode::UnknownTopicOrPartition,
            ErrorCode::LeaderNotAvailable,
            ErrorCode::NotLeaderOrFollower,
            ErrorCode::RequestTimedOut,
            ErrorCode::NotEnoughReplicas,
            ErrorCode::NotEnoughReplicasAfterAppend,
            ErrorCode::NotController,
            ErrorCode::KafkaStorageError,
            ErrorCode::FencedLeaderEpoch,
            ErrorCode::UnknownLeaderEpoch,
            ErrorCode::OffsetNotAvailable,
            ErrorCode::UnknownTopicId,
            ErrorCode::InconsistentTopicId,
        ];
        let not_retriable = [
            ErrorCode::None,
            ErrorCode::UnknownServerError,
            ErrorCode::OffsetOutOfRange,
            ErrorCode::BrokerNotAvailable,
            ErrorCode::InvalidRequiredAcks,
            ErrorCode::InvalidRequest,
            ErrorCode::TopicAlreadyExists,
            ErrorCode::OutOfOrderSequenceNumber,
            ErrorCode::InvalidProducerEpoch,
            ErrorCode::UnknownProducerId,
            ErrorCode::StaleBrokerEpoch,
            ErrorCode::InvalidUpdateVersion,
            ErrorCode::IneligibleReplica,
            ErrorCode::NewLeaderElected,
            ErrorCode::DuplicateBrokerRegistration,
        ];
        for c in retriable {
            assert!(c.retriable(), "{c} is retriable in Kafka");
        }
        for c in not_retriable {
            assert!(!c.retriable(), "{c} is not retriable in Kafka");
        }
    }

    #[test]
    fn unknown_codes_and_names_are_typed_errors() {
        assert_eq!(ErrorCode::from_code(4), None);
        assert_eq!(
            ErrorCode::try_from(9999_i16),
            Err(UnknownErrorCode { code: 9999 })
        );
        assert_eq!(
            ErrorCode::try_from(70_000_i32),
            Err(UnknownErrorCode { code: 70_000 })
        );
        assert_eq!(
            "NOT_A_CODE".parse::<ErrorCode>(),
            Err(UnknownErrorName {
                name: "NOT_A_CODE".to_owned()
            })
        );
        let wire = common::Error {
            code: 12345,
            name: "FROM_THE_FUTURE".to_owned(),
            message: String::new(),
        };
        assert_eq!(wire.error_code(), Err(UnknownErrorCode { code: 12345 }));
        assert_eq!(
            UnknownErrorCode { code: 12345 }.to_string(),
            "unknown Kafka error code 12345"
        );
    }

    #[test]
    fn absent_wire_error_is_none() {
        assert_eq!(ErrorCode::from_proto(None), Ok(ErrorCode::None));
        let e = ErrorCode::StaleBrokerEpoch.to_proto("epoch 5 < 9");
        assert_eq!(
            ErrorCode::from_proto(Some(&e)),
            Ok(ErrorCode::StaleBrokerEpoch)
        );
        assert!(!e.is_none());
        assert!(common::Error::from(ErrorCode::None).is_none());
        assert!(!ErrorCode::None.is_error());
        assert!(ErrorCode::NotController.is_error());
    }

    #[test]
    fn wire_error_display() {
        assert_eq!(
            ErrorCode::NotController.to_proto("leader is 2").to_string(),
            "NOT_CONTROLLER (41): leader is 2"
        );
        assert_eq!(
            common::Error::from(ErrorCode::FencedLeaderEpoch).to_string(),
            "FENCED_LEADER_EPOCH (74)"
        );
        let bare = common::Error {
            code: 19,
            name: String::new(),
            message: String::new(),
        };
        assert_eq!(bare.to_string(), "NOT_ENOUGH_REPLICAS (19)");
    }
}
