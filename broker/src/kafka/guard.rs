//! A pre-decode guard for Kafka request bodies (issue #21, "Codec"): walks the bytes of a
//! request body against the Kafka message schema of its api key and version and refuses it
//! before the `kafka-protocol` decoder sees it.
//!
//! Why: `kafka-protocol` 0.18 sizes its vectors from the wire (`Vec::with_capacity(n)` for
//! classic and compact arrays, `vec![0; n]` for some strings and bytes), so a 20-byte frame
//! declaring a 2^31 element array makes it allocate hundreds of GB and abort the process.
//! Kafka's own generated readers refuse an array whose count exceeds the bytes remaining
//! (`MessageDataGenerator.generateVariableLengthReader`: "Tried to allocate a collection of
//! size ..."); this guard applies the same rule, tighter, before any allocation.
//!
//! What is checked, for every field present at the version (the schemas of
//! `clients/src/main/resources/common/message/<Name>Request.json` in apache/kafka, held as
//! data in [`APIS`]):
//! - arrays (classic: int32 count, -1 = null; compact: unsigned varint count + 1, 0 = null):
//!   `count * minimum encoded size of one element <= bytes remaining` before stepping in
//!   (a minimum of at least 1 byte, so the walk is linear in the body size);
//! - strings (classic int16 length / compact varint length + 1) and bytes (classic int32 /
//!   compact): length <= bytes remaining; strings at most 32767 bytes (Kafka's readers refuse
//!   longer compact strings) and valid UTF-8 (`kafka-protocol` refuses invalid UTF-8; Kafka
//!   would replace it);
//! - null (-1, or compact 0) only where the schema's `nullableVersions` contain the version;
//!   a classic length below -1 is refused (`kafka-protocol` refuses it, Kafka reads it as null);
//! - unsigned varints at most 5 bytes (`ByteUtils.readUnsignedVarint`);
//! - tagged-field sections (flexible versions, KIP-482): count * 2 <= bytes remaining, each
//!   tag's size <= bytes remaining; unknown tags are skipped; a tag the schema defines for
//!   other versions only is refused ("Tag N is not valid for version V", as Kafka's and
//!   `kafka-protocol`'s readers do); a known tag's value is walked with the same rules inside
//!   its declared size and must fill it exactly (both decoders read known tags inline, not
//!   bounded by the size, so a size that disagrees with the value would make them read the
//!   following bytes differently than this walk did);
//! - nesting depth at most [`MAX_DEPTH`] (the schemas are fixed and nest 3 deep at most).
//!
//! Trailing bytes after the last field are NOT an error: Kafka's
//! `RequestContext.parseRequest` -> `AbstractRequest.parseRequest` reads the message with
//! `new <Name>Data(readable, version)` and never checks what is left in the buffer, and
//! `kafka-protocol`'s `Decodable::decode` does not either. The frame size itself is bounded
//! by the listener (`socket.request.max.bytes`), not here.
//!
//! The guard is pure (no I/O, no clock) and allocates only its path stack (depth-bounded)
//! and, on error, the error's path text.

use thiserror::Error;

/// Deepest struct nesting the walker steps into (the top-level message is depth 0). The
/// deepest schemas here, CreateTopics `topics[].assignments[].broker_ids[]`, OffsetCommit
/// `topics[].partitions[]` and OffsetFetch v8+ `groups[].topics[].partition_indexes[]`, reach
/// 2; a tagged struct adds 1.
pub const MAX_DEPTH: usize = 8;

/// Longest string Kafka's generated readers accept, in bytes (`length > 0x7fff` is refused
/// for classic and compact strings alike).
pub const MAX_STRING_BYTES: u32 = 0x7fff;

/// Why a request body was refused. `path` names the field as `kafka-protocol` names it,
/// with array indexes, e.g. `topics[0].partitions`; the top-level tagged fields are
/// `_tagged_fields`, those of an element `topics[0]._tagged_fields`; `body` is the body
/// itself.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum GuardError {
    /// The api key or version is not one this broker decodes (see [`APIS`]).
    #[error("unsupported api/version: api key {api_key} version {version}")]
    Unsupported {
        /// The request header's api key.
        api_key: i16,
        /// The request header's api version.
        version: i16,
    },
    /// The body ends inside a field.
    #[error("truncated at {path}")]
    Truncated {
        /// The field being read.
        path: String,
    },
    /// An array declares more elements than the bytes left could hold.
    #[error(
        "{path}: array of {count} elements declared, {min_element_bytes} bytes at least \
         each, {remaining} bytes left"
    )]
    ArrayTooLong {
        /// The array field.
        path: String,
        /// Declared element count.
        count: u64,
        /// Minimum encoded size of one element at this version, in bytes (at least 1).
        min_element_bytes: u64,
        /// Bytes left after the count (inside a tagged field: left in that field).
        remaining: usize,
    },
    /// A string, bytes or tagged field declares more bytes than are left.
    #[error("{path}: {what} of {len} bytes declared, {remaining} bytes left")]
    LengthTooLong {
        /// The field.
        path: String,
        /// `string`, `bytes` or `tagged field N`.
        what: String,
        /// Declared length in bytes.
        len: u64,
        /// Bytes left after the length.
        remaining: usize,
    },
    /// A classic length or count below -1.
    #[error("{path}: negative length {len}")]
    NegativeLength {
        /// The field.
        path: String,
        /// The length read.
        len: i32,
    },
    /// Null where the schema does not allow it at this version.
    #[error("{path}: null, but the field is not nullable at version {version}")]
    UnexpectedNull {
        /// The field.
        path: String,
        /// The request's version.
        version: i16,
    },
    /// A string longer than [`MAX_STRING_BYTES`].
    #[error("{path}: string of {len} bytes declared, more than {MAX_STRING_BYTES}")]
    StringTooLong {
        /// The field.
        path: String,
        /// Declared length in bytes.
        len: u64,
    },
    /// A string that is not UTF-8.
    #[error("{path}: string is not valid UTF-8")]
    InvalidUtf8 {
        /// The field.
        path: String,
    },
    /// An unsigned varint whose fifth byte still has its continuation bit.
    #[error("{path}: unsigned varint longer than 5 bytes")]
    VarintTooLong {
        /// The field whose length, count, tag or size was being read.
        path: String,
    },
    /// More tagged fields declared than the bytes left could hold (2 bytes at least each).
    #[error("{path}: {count} tagged fields declared, {remaining} bytes left")]
    TooManyTags {
        /// The tagged-field section.
        path: String,
        /// Declared number of tagged fields.
        count: u32,
        /// Bytes left after the count.
        remaining: usize,
    },
    /// A tag the schema defines, but not at this version.
    #[error("{path}: tag {tag} is not valid for version {version}")]
    TagNotValid {
        /// The tagged-field section.
        path: String,
        /// The tag.
        tag: u32,
        /// The request's version.
        version: i16,
    },
    /// A known tagged field whose value does not fill exactly its declared size.
    #[error("{path}: tagged field {tag} declares {declared} bytes, its value takes {used}")]
    TagSizeMismatch {
        /// The tagged field.
        path: String,
        /// The tag.
        tag: u32,
        /// Declared size in bytes.
        declared: u32,
        /// Bytes the value took.
        used: usize,
    },
    /// Structs nested deeper than [`MAX_DEPTH`] (cannot happen with the fixed schemas).
    #[error("{path}: nested deeper than {MAX_DEPTH}")]
    TooDeep {
        /// The struct being entered.
        path: String,
    },
}

/// Checks a request body (the bytes after the request header) of `api_key` at `version`.
///
/// `Ok` means: every field of the schema is present and within the body, every array count
/// and length fits the bytes left, nulls only where allowed, strings UTF-8 and at most
/// [`MAX_STRING_BYTES`], varints at most 5 bytes, tags valid. Then `kafka-protocol`'s
/// decoder allocates in proportion to `body.len()`: an array's capacity is at most
/// `body.len() / minimum element size` elements, which for the structs of these requests
/// (64-120 bytes in memory, 1-3 bytes at least on the wire in flexible versions) is about
/// 40 bytes of memory per body byte at worst (OffsetFetch v8 `groups` and LeaveGroup v4
/// `members` whose strings and arrays are empty or null: 120 bytes for 3; Metadata v9+
/// topics of empty names: 72 for 2; strings are slices of the input when decoding from
/// `bytes::Bytes`, copies from `&[u8]`). The frame size limit of the listener bounds the
/// rest. Bytes after the last field are allowed (Kafka ignores them). Supported api keys
/// and versions: [`APIS`]; any other is [`GuardError::Unsupported`]. Runs in time linear in
/// `body.len()`.
pub fn check_request_body(api_key: i16, version: i16, body: &[u8]) -> Result<(), GuardError> {
    walk_request(api_key, version, body).map(|_| ())
}

/// Walks the body and returns how many bytes the message took (the rest is trailing).
fn walk_request(api_key: i16, version: i16, body: &[u8]) -> Result<usize, GuardError> {
    let api = schema(api_key, version).ok_or(GuardError::Unsupported { api_key, version })?;
    let mut walker = Walker {
        body,
        pos: 0,
        end: body.len(),
        version,
        flexible: version >= api.flexible_from,
        path: Vec::with_capacity(2 * MAX_DEPTH + 4),
    };
    walker.walk_struct(api.fields, 0)?;
    Ok(walker.pos)
}

/// The schema of `api_key` at `version`, if the guard covers it.
fn schema(api_key: i16, version: i16) -> Option<&'static Api> {
    APIS.iter()
        .find(|api| api.key == api_key && api.versions.contains(version))
}

// ---------------------------------------------------------------------------------------
// The schema table.
// ---------------------------------------------------------------------------------------

/// An inclusive range of versions; empty when `lo > hi`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Versions {
    /// Lowest version in the range.
    pub lo: i16,
    /// Highest version in the range.
    pub hi: i16,
}

impl Versions {
    /// Whether `version` is in the range.
    pub const fn contains(self, version: i16) -> bool {
        self.lo <= version && version <= self.hi
    }
}

const fn range(lo: i16, hi: i16) -> Versions {
    Versions { lo, hi }
}

const fn from(lo: i16) -> Versions {
    Versions { lo, hi: i16::MAX }
}

const ALL: Versions = from(0);
const NONE: Versions = range(1, 0);

/// The wire type of a field (Kafka's message-schema types).
#[derive(Debug, Clone, Copy)]
enum Ty {
    Bool,
    Int8,
    Int16,
    Int32,
    Int64,
    Uuid,
    /// `string`: classic int16 length, compact varint length + 1.
    String,
    /// `bytes` and `records`: classic int32 length, compact varint length + 1.
    Bytes,
    /// `[]T` of a primitive `T`: classic int32 count, compact varint count + 1. Elements
    /// are never null.
    Array(&'static Ty),
    /// `[]T` of a struct `T` with these fields (encoded as [`Ty::Array`]).
    Structs(&'static [Field]),
    /// A struct: its fields, then (flexible versions) its tagged fields.
    Struct(&'static [Field]),
}

/// One field of a message schema: its wire type, the versions it is present in, the
/// versions it may be null in, and its tag if it is a tagged field (then `versions` are the
/// versions it is a valid tag in, Kafka's `versions` ∩ `taggedVersions`).
#[derive(Debug, Clone, Copy)]
struct Field {
    name: &'static str,
    ty: Ty,
    versions: Versions,
    nullable: Versions,
    tag: Option<u32>,
}

const fn f(name: &'static str, ty: Ty, versions: Versions) -> Field {
    Field {
        name,
        ty,
        versions,
        nullable: NONE,
        tag: None,
    }
}

impl Field {
    const fn nullable(self, nullable: Versions) -> Field {
        Field { nullable, ..self }
    }
    const fn tagged(self, tag: u32) -> Field {
        Field {
            tag: Some(tag),
            ..self
        }
    }
}

/// The request schema of one api: its key, the versions the guard covers, and the first
/// flexible version (KIP-482: compact lengths and tagged fields from that version on).
#[derive(Debug)]
pub struct Api {
    /// Kafka api key.
    pub key: i16,
    /// Kafka's name of the request message.
    pub name: &'static str,
    /// Versions covered.
    pub versions: Versions,
    /// First flexible version (`flexibleVersions` of the JSON schema).
    pub flexible_from: i16,
    fields: &'static [Field],
}

use Ty::{Bool, Bytes, Int8, Int16, Int32, Int64, String as Str, Struct, Structs, Uuid};

const STRINGS: Ty = Ty::Array(&Str);
const INT32S: Ty = Ty::Array(&Int32);

// ApiVersionsRequest.json.
const API_VERSIONS: &[Field] = &[
    f("client_software_name", Str, from(3)),
    f("client_software_version", Str, from(3)),
];

// MetadataRequest.json.
const METADATA_TOPIC: &[Field] = &[
    f("topic_id", Uuid, from(10)),
    f("name", Str, ALL).nullable(from(10)),
];
const METADATA: &[Field] = &[
    f("topics", Structs(METADATA_TOPIC), ALL).nullable(from(1)),
    f("allow_auto_topic_creation", Bool, from(4)),
    f("include_cluster_authorized_operations", Bool, range(8, 10)),
    f("include_topic_authorized_operations", Bool, from(8)),
];

// ProduceRequest.json (`records` is of type records: bytes on the wire). The topic name
// gives way to a topic id at v13 (KIP-516), past the covered range.
const PRODUCE_PARTITION: &[Field] = &[
    f("index", Int32, ALL),
    f("records", Bytes, ALL).nullable(ALL),
];
const PRODUCE_TOPIC: &[Field] = &[
    f("name", Str, range(0, 12)),
    f("topic_id", Uuid, from(13)),
    f("partition_data", Structs(PRODUCE_PARTITION), ALL),
];
const PRODUCE: &[Field] = &[
    f("transactional_id", Str, from(3)).nullable(from(3)),
    f("acks", Int16, ALL),
    f("timeout_ms", Int32, ALL),
    f("topic_data", Structs(PRODUCE_TOPIC), ALL),
];

// FetchRequest.json. Tags of later versions are listed so that they are refused as
// "not valid for version" like Kafka's reader does, not skipped as unknown.
const FETCH_REPLICA_STATE: &[Field] = &[
    f("replica_id", Int32, from(15)),
    f("replica_epoch", Int64, from(15)),
];
const FETCH_PARTITION: &[Field] = &[
    f("partition", Int32, ALL),
    f("current_leader_epoch", Int32, from(9)),
    f("fetch_offset", Int64, ALL),
    f("last_fetched_epoch", Int32, from(12)),
    f("log_start_offset", Int64, from(5)),
    f("partition_max_bytes", Int32, ALL),
    f("replica_directory_id", Uuid, from(17)).tagged(0),
    f("high_watermark", Int64, from(18)).tagged(1),
];
const FETCH_TOPIC: &[Field] = &[
    f("topic", Str, range(0, 12)),
    f("topic_id", Uuid, from(13)),
    f("partitions", Structs(FETCH_PARTITION), ALL),
];
const FETCH_FORGOTTEN: &[Field] = &[
    f("topic", Str, range(7, 12)),
    f("topic_id", Uuid, from(13)),
    f("partitions", INT32S, from(7)),
];
const FETCH: &[Field] = &[
    f("cluster_id", Str, from(12)).nullable(from(12)).tagged(0),
    f("replica_id", Int32, range(0, 14)),
    f("replica_state", Struct(FETCH_REPLICA_STATE), from(15)).tagged(1),
    f("max_wait_ms", Int32, ALL),
    f("min_bytes", Int32, ALL),
    f("max_bytes", Int32, from(3)),
    f("isolation_level", Int8, from(4)),
    f("session_id", Int32, from(7)),
    f("session_epoch", Int32, from(7)),
    f("topics", Structs(FETCH_TOPIC), ALL),
    f("forgotten_topics_data", Structs(FETCH_FORGOTTEN), from(7)),
    f("rack_id", Str, from(11)),
];

// ListOffsetsRequest.json.
const LIST_OFFSETS_PARTITION: &[Field] = &[
    f("partition_index", Int32, ALL),
    f("current_leader_epoch", Int32, from(4)),
    f("timestamp", Int64, ALL),
    f("max_num_offsets", Int32, range(0, 0)),
];
const LIST_OFFSETS_TOPIC: &[Field] = &[
    f("name", Str, ALL),
    f("partitions", Structs(LIST_OFFSETS_PARTITION), ALL),
];
const LIST_OFFSETS: &[Field] = &[
    f("replica_id", Int32, ALL),
    f("isolation_level", Int8, from(2)),
    f("topics", Structs(LIST_OFFSETS_TOPIC), ALL),
    f("timeout_ms", Int32, from(10)),
];

// OffsetForLeaderEpochRequest.json.
const OFFSET_FOR_LEADER_PARTITION: &[Field] = &[
    f("partition", Int32, ALL),
    f("current_leader_epoch", Int32, from(2)),
    f("leader_epoch", Int32, ALL),
];
const OFFSET_FOR_LEADER_TOPIC: &[Field] = &[
    f("topic", Str, ALL),
    f("partitions", Structs(OFFSET_FOR_LEADER_PARTITION), ALL),
];
const OFFSET_FOR_LEADER_EPOCH: &[Field] = &[
    f("replica_id", Int32, from(3)),
    f("topics", Structs(OFFSET_FOR_LEADER_TOPIC), ALL),
];

// InitProducerIdRequest.json (v6, KIP-939's Enable2Pc/KeepPreparedTxn, is not covered).
const INIT_PRODUCER_ID: &[Field] = &[
    f("transactional_id", Str, ALL).nullable(ALL),
    f("transaction_timeout_ms", Int32, ALL),
    f("producer_id", Int64, from(3)),
    f("producer_epoch", Int16, from(3)),
];

// CreateTopicsRequest.json.
const CREATABLE_ASSIGNMENT: &[Field] = &[
    f("partition_index", Int32, ALL),
    f("broker_ids", INT32S, ALL),
];
const CREATABLE_CONFIG: &[Field] = &[f("name", Str, ALL), f("value", Str, ALL).nullable(ALL)];
const CREATABLE_TOPIC: &[Field] = &[
    f("name", Str, ALL),
    f("num_partitions", Int32, ALL),
    f("replication_factor", Int16, ALL),
    f("assignments", Structs(CREATABLE_ASSIGNMENT), ALL),
    f("configs", Structs(CREATABLE_CONFIG), ALL),
];
const CREATE_TOPICS: &[Field] = &[
    f("topics", Structs(CREATABLE_TOPIC), ALL),
    f("timeout_ms", Int32, ALL),
    f("validate_only", Bool, from(1)),
];

// DeleteTopicsRequest.json.
const DELETE_TOPIC_STATE: &[Field] = &[
    f("name", Str, from(6)).nullable(from(6)),
    f("topic_id", Uuid, from(6)),
];
const DELETE_TOPICS: &[Field] = &[
    f("topics", Structs(DELETE_TOPIC_STATE), from(6)),
    f("topic_names", STRINGS, range(0, 5)),
    f("timeout_ms", Int32, ALL),
];

// DescribeConfigsRequest.json.
const DESCRIBE_CONFIGS_RESOURCE: &[Field] = &[
    f("resource_type", Int8, ALL),
    f("resource_name", Str, ALL),
    f("configuration_keys", STRINGS, ALL).nullable(ALL),
];
const DESCRIBE_CONFIGS: &[Field] = &[
    f("resources", Structs(DESCRIBE_CONFIGS_RESOURCE), ALL),
    f("include_synonyms", Bool, from(1)),
    f("include_documentation", Bool, from(3)),
];

// CreatePartitionsRequest.json (KIP-195): v2 is the first flexible version.
const CREATE_PARTITIONS_ASSIGNMENT: &[Field] = &[f("broker_ids", INT32S, ALL)];
const CREATE_PARTITIONS_TOPIC: &[Field] = &[
    f("name", Str, ALL),
    f("count", Int32, ALL),
    f("assignments", Structs(CREATE_PARTITIONS_ASSIGNMENT), ALL).nullable(ALL),
];
const CREATE_PARTITIONS: &[Field] = &[
    f("topics", Structs(CREATE_PARTITIONS_TOPIC), ALL),
    f("timeout_ms", Int32, ALL),
    f("validate_only", Bool, ALL),
];

// IncrementalAlterConfigsRequest.json (KIP-339): v1 is the first flexible version.
const INCREMENTAL_ALTERABLE_CONFIG: &[Field] = &[
    f("name", Str, ALL),
    f("config_operation", Int8, ALL),
    f("value", Str, ALL).nullable(ALL),
];
const INCREMENTAL_ALTER_CONFIGS_RESOURCE: &[Field] = &[
    f("resource_type", Int8, ALL),
    f("resource_name", Str, ALL),
    f("configs", Structs(INCREMENTAL_ALTERABLE_CONFIG), ALL),
];
const INCREMENTAL_ALTER_CONFIGS: &[Field] = &[
    f(
        "resources",
        Structs(INCREMENTAL_ALTER_CONFIGS_RESOURCE),
        ALL,
    ),
    f("validate_only", Bool, ALL),
];

// AlterConfigsRequest.json (the legacy whole-set replace): v2 is the first flexible version.
const LEGACY_ALTERABLE_CONFIG: &[Field] =
    &[f("name", Str, ALL), f("value", Str, ALL).nullable(ALL)];
const LEGACY_ALTER_CONFIGS_RESOURCE: &[Field] = &[
    f("resource_type", Int8, ALL),
    f("resource_name", Str, ALL),
    f("configs", Structs(LEGACY_ALTERABLE_CONFIG), ALL),
];
const LEGACY_ALTER_CONFIGS: &[Field] = &[
    f("resources", Structs(LEGACY_ALTER_CONFIGS_RESOURCE), ALL),
    f("validate_only", Bool, ALL),
];

// ElectLeadersRequest.json (KIP-183, KIP-460): v1 adds ElectionType, v2 is the first flexible
// version.
const ELECT_TOPIC_PARTITIONS: &[Field] = &[f("topic", Str, ALL), f("partitions", INT32S, ALL)];
const ELECT_LEADERS: &[Field] = &[
    f("election_type", Int8, from(1)),
    f("topic_partitions", Structs(ELECT_TOPIC_PARTITIONS), ALL).nullable(ALL),
    f("timeout_ms", Int32, ALL),
];

// AlterPartitionReassignmentsRequest.json (KIP-455): flexible from v0 (v1's
// AllowReplicationFactorChange, KIP-860, is not served).
const REASSIGNABLE_PARTITION: &[Field] = &[
    f("partition_index", Int32, ALL),
    f("replicas", INT32S, ALL).nullable(ALL),
];
const REASSIGNABLE_TOPIC: &[Field] = &[
    f("name", Str, ALL),
    f("partitions", Structs(REASSIGNABLE_PARTITION), ALL),
];
const ALTER_PARTITION_REASSIGNMENTS: &[Field] = &[
    f("timeout_ms", Int32, ALL),
    f("allow_replication_factor_change", Bool, from(1)),
    f("topics", Structs(REASSIGNABLE_TOPIC), ALL),
];

// ListPartitionReassignmentsRequest.json (KIP-455): flexible from v0.
const LIST_REASSIGNMENTS_TOPIC: &[Field] =
    &[f("name", Str, ALL), f("partition_indexes", INT32S, ALL)];
const LIST_PARTITION_REASSIGNMENTS: &[Field] = &[
    f("timeout_ms", Int32, ALL),
    f("topics", Structs(LIST_REASSIGNMENTS_TOPIC), ALL).nullable(ALL),
];

// CreateAclsRequest.json, DescribeAclsRequest.json, DeleteAclsRequest.json (KIP-140; the
// pattern type of v1 is KIP-290's): v2 is the first flexible version of each.
const ACL_CREATION: &[Field] = &[
    f("resource_type", Int8, ALL),
    f("resource_name", Str, ALL),
    f("resource_pattern_type", Int8, from(1)),
    f("principal", Str, ALL),
    f("host", Str, ALL),
    f("operation", Int8, ALL),
    f("permission_type", Int8, ALL),
];
const CREATE_ACLS: &[Field] = &[f("creations", Structs(ACL_CREATION), ALL)];
const ACL_FILTER: &[Field] = &[
    f("resource_type_filter", Int8, ALL),
    f("resource_name_filter", Str, ALL).nullable(ALL),
    f("pattern_type_filter", Int8, from(1)),
    f("principal_filter", Str, ALL).nullable(ALL),
    f("host_filter", Str, ALL).nullable(ALL),
    f("operation", Int8, ALL),
    f("permission_type", Int8, ALL),
];
const DELETE_ACLS: &[Field] = &[f("filters", Structs(ACL_FILTER), ALL)];

// DescribeUserScramCredentialsRequest.json, AlterUserScramCredentialsRequest.json (KIP-554):
// v0 only, flexible.
const SCRAM_USER: &[Field] = &[f("name", Str, ALL)];
const DESCRIBE_USER_SCRAM_CREDENTIALS: &[Field] =
    &[f("users", Structs(SCRAM_USER), ALL).nullable(ALL)];
const SCRAM_DELETION: &[Field] = &[f("name", Str, ALL), f("mechanism", Int8, ALL)];
const SCRAM_UPSERTION: &[Field] = &[
    f("name", Str, ALL),
    f("mechanism", Int8, ALL),
    f("iterations", Int32, ALL),
    f("salt", Bytes, ALL),
    f("salted_password", Bytes, ALL),
];
const ALTER_USER_SCRAM_CREDENTIALS: &[Field] = &[
    f("deletions", Structs(SCRAM_DELETION), ALL),
    f("upsertions", Structs(SCRAM_UPSERTION), ALL),
];

// DescribeLogDirsRequest.json (KIP-113; v0 is not served, as in Kafka 4): v2 is the first
// flexible version.
const DESCRIBABLE_LOG_DIR_TOPIC: &[Field] = &[f("topic", Str, ALL), f("partitions", INT32S, ALL)];
const DESCRIBE_LOG_DIRS: &[Field] =
    &[f("topics", Structs(DESCRIBABLE_LOG_DIR_TOPIC), ALL).nullable(ALL)];

// FindCoordinatorRequest.json: v1 adds KeyType, v3 is the first flexible version, v4
// replaces Key by CoordinatorKeys (KIP-699, batched lookups).
const FIND_COORDINATOR: &[Field] = &[
    f("key", Str, range(0, 3)),
    f("key_type", Int8, from(1)),
    f("coordinator_keys", STRINGS, from(4)),
];

// DescribeClusterRequest.json; v2 adds IncludeFencedBrokers (KIP-1073).
const DESCRIBE_CLUSTER: &[Field] = &[
    f("include_cluster_authorized_operations", Bool, ALL),
    f("endpoint_type", Int8, from(1)),
    f("include_fenced_brokers", Bool, from(2)),
];

// The consumer-group APIs (the classic group protocol and its offsets). None has a tagged
// field in the covered versions, only the tagged-field sections of the flexible ones.

// OffsetCommitRequest.json (v0-1 are not covered, `kafka-protocol` decodes v2+; v1's
// CommitTimestamp is listed all the same). v9 (KIP-848, v8's schema) is not covered.
const OFFSET_COMMIT_PARTITION: &[Field] = &[
    f("partition_index", Int32, ALL),
    f("committed_offset", Int64, ALL),
    f("committed_leader_epoch", Int32, from(6)),
    f("commit_timestamp", Int64, range(1, 1)),
    f("committed_metadata", Str, ALL).nullable(ALL),
];
const OFFSET_COMMIT_TOPIC: &[Field] = &[
    f("name", Str, ALL),
    f("partitions", Structs(OFFSET_COMMIT_PARTITION), ALL),
];
const OFFSET_COMMIT: &[Field] = &[
    f("group_id", Str, ALL),
    f("generation_id_or_member_epoch", Int32, from(1)),
    f("member_id", Str, from(1)),
    f("group_instance_id", Str, from(7)).nullable(from(7)),
    f("retention_time_ms", Int64, range(2, 4)),
    f("topics", Structs(OFFSET_COMMIT_TOPIC), ALL),
];

// OffsetFetchRequest.json: a null Topics (all topics) from v2 on; v8 batches groups, each
// with its own nullable Topics; v9 (KIP-848, not covered) adds MemberId and MemberEpoch.
const OFFSET_FETCH_TOPIC: &[Field] = &[
    f("name", Str, range(0, 7)),
    f("partition_indexes", INT32S, range(0, 7)),
];
const OFFSET_FETCH_GROUP_TOPIC: &[Field] = &[
    f("name", Str, from(8)),
    f("partition_indexes", INT32S, from(8)),
];
const OFFSET_FETCH_GROUP: &[Field] = &[
    f("group_id", Str, from(8)),
    f("member_id", Str, from(9)).nullable(from(9)),
    f("member_epoch", Int32, from(9)),
    f("topics", Structs(OFFSET_FETCH_GROUP_TOPIC), from(8)).nullable(from(8)),
];
const OFFSET_FETCH: &[Field] = &[
    f("group_id", Str, range(0, 7)),
    f("topics", Structs(OFFSET_FETCH_TOPIC), range(0, 7)).nullable(range(2, 7)),
    f("groups", Structs(OFFSET_FETCH_GROUP), from(8)),
    f("require_stable", Bool, from(7)),
];

// JoinGroupRequest.json: v1 adds RebalanceTimeoutMs, v5 GroupInstanceId (KIP-345), v8
// Reason (KIP-800).
const JOIN_GROUP_PROTOCOL: &[Field] = &[f("name", Str, ALL), f("metadata", Bytes, ALL)];
const JOIN_GROUP: &[Field] = &[
    f("group_id", Str, ALL),
    f("session_timeout_ms", Int32, ALL),
    f("rebalance_timeout_ms", Int32, from(1)),
    f("member_id", Str, ALL),
    f("group_instance_id", Str, from(5)).nullable(from(5)),
    f("protocol_type", Str, ALL),
    f("protocols", Structs(JOIN_GROUP_PROTOCOL), ALL),
    f("reason", Str, from(8)).nullable(from(8)),
];

// HeartbeatRequest.json.
const HEARTBEAT: &[Field] = &[
    f("group_id", Str, ALL),
    f("generation_id", Int32, ALL),
    f("member_id", Str, ALL),
    f("group_instance_id", Str, from(3)).nullable(from(3)),
];

// LeaveGroupRequest.json: v3 replaces MemberId by a batch of Members (KIP-345), v5 adds
// their Reason (KIP-800).
const LEAVE_GROUP_MEMBER: &[Field] = &[
    f("member_id", Str, from(3)),
    f("group_instance_id", Str, from(3)).nullable(from(3)),
    f("reason", Str, from(5)).nullable(from(5)),
];
const LEAVE_GROUP: &[Field] = &[
    f("group_id", Str, ALL),
    f("member_id", Str, range(0, 2)),
    f("members", Structs(LEAVE_GROUP_MEMBER), from(3)),
];

// SyncGroupRequest.json: v3 adds GroupInstanceId, v5 ProtocolType and ProtocolName
// (KIP-559).
const SYNC_GROUP_ASSIGNMENT: &[Field] = &[f("member_id", Str, ALL), f("assignment", Bytes, ALL)];
const SYNC_GROUP: &[Field] = &[
    f("group_id", Str, ALL),
    f("generation_id", Int32, ALL),
    f("member_id", Str, ALL),
    f("group_instance_id", Str, from(3)).nullable(from(3)),
    f("protocol_type", Str, from(5)).nullable(from(5)),
    f("protocol_name", Str, from(5)).nullable(from(5)),
    f("assignments", Structs(SYNC_GROUP_ASSIGNMENT), ALL),
];

// DescribeGroupsRequest.json.
const DESCRIBE_GROUPS: &[Field] = &[
    f("groups", STRINGS, ALL),
    f("include_authorized_operations", Bool, from(3)),
];

// ListGroupsRequest.json: no fields before v4 (StatesFilter, KIP-518); v5 adds TypesFilter
// (KIP-848).
const LIST_GROUPS: &[Field] = &[
    f("states_filter", STRINGS, from(4)),
    f("types_filter", STRINGS, from(5)),
];

// DeleteGroupsRequest.json.
const DELETE_GROUPS: &[Field] = &[f("groups_names", STRINGS, ALL)];

// DeleteRecordsRequest.json (KIP-107): v2 is the first flexible version.
const DELETE_RECORDS_PARTITION: &[Field] =
    &[f("partition_index", Int32, ALL), f("offset", Int64, ALL)];
const DELETE_RECORDS_TOPIC: &[Field] = &[
    f("name", Str, ALL),
    f("partitions", Structs(DELETE_RECORDS_PARTITION), ALL),
];
const DELETE_RECORDS: &[Field] = &[
    f("topics", Structs(DELETE_RECORDS_TOPIC), ALL),
    f("timeout_ms", Int32, ALL),
];

// OffsetDeleteRequest.json (KIP-496): v0 only, never flexible.
const OFFSET_DELETE_PARTITION: &[Field] = &[f("partition_index", Int32, ALL)];
const OFFSET_DELETE_TOPIC: &[Field] = &[
    f("name", Str, ALL),
    f("partitions", Structs(OFFSET_DELETE_PARTITION), ALL),
];
const OFFSET_DELETE: &[Field] = &[
    f("group_id", Str, ALL),
    f("topics", Structs(OFFSET_DELETE_TOPIC), ALL),
];

// SaslHandshakeRequest.json (KIP-43; v1 is KIP-152's): never flexible; v0 and v1 have the
// same fields.
const SASL_HANDSHAKE: &[Field] = &[f("mechanism", Str, ALL)];

// SaslAuthenticateRequest.json (KIP-152): v2 is the first flexible version.
const SASL_AUTHENTICATE: &[Field] = &[f("auth_bytes", Bytes, ALL)];

/// Every request schema the guard covers: the api keys and version ranges Keel's Kafka
/// listener serves (issue #21, [`super::versions::SERVED`]) and those of the consumer-group
/// APIs, which the guard covers ahead of the listener serving them (it may serve a subset:
/// a request is walked here only after its version was found served). Field names are
/// `kafka-protocol`'s (snake case of Kafka's).
pub static APIS: &[Api] = &[
    api(18, "ApiVersionsRequest", range(0, 4), 3, API_VERSIONS),
    api(3, "MetadataRequest", range(0, 12), 9, METADATA),
    api(0, "ProduceRequest", range(3, 11), 9, PRODUCE),
    api(1, "FetchRequest", range(4, 12), 12, FETCH),
    api(2, "ListOffsetsRequest", range(1, 10), 6, LIST_OFFSETS),
    api(
        23,
        "OffsetForLeaderEpochRequest",
        range(2, 4),
        4,
        OFFSET_FOR_LEADER_EPOCH,
    ),
    api(
        22,
        "InitProducerIdRequest",
        range(0, 5),
        2,
        INIT_PRODUCER_ID,
    ),
    api(
        10,
        "FindCoordinatorRequest",
        range(0, 4),
        3,
        FIND_COORDINATOR,
    ),
    api(19, "CreateTopicsRequest", range(2, 7), 5, CREATE_TOPICS),
    api(20, "DeleteTopicsRequest", range(1, 6), 4, DELETE_TOPICS),
    api(
        32,
        "DescribeConfigsRequest",
        range(1, 4),
        4,
        DESCRIBE_CONFIGS,
    ),
    api(
        60,
        "DescribeClusterRequest",
        range(0, 2),
        0,
        DESCRIBE_CLUSTER,
    ),
    api(
        37,
        "CreatePartitionsRequest",
        range(0, 3),
        2,
        CREATE_PARTITIONS,
    ),
    api(43, "ElectLeadersRequest", range(0, 2), 2, ELECT_LEADERS),
    api(29, "DescribeAclsRequest", range(1, 3), 2, ACL_FILTER),
    api(
        35,
        "DescribeLogDirsRequest",
        range(1, 4),
        2,
        DESCRIBE_LOG_DIRS,
    ),
    api(
        50,
        "DescribeUserScramCredentialsRequest",
        range(0, 0),
        0,
        DESCRIBE_USER_SCRAM_CREDENTIALS,
    ),
    api(
        51,
        "AlterUserScramCredentialsRequest",
        range(0, 0),
        0,
        ALTER_USER_SCRAM_CREDENTIALS,
    ),
    api(30, "CreateAclsRequest", range(1, 3), 2, CREATE_ACLS),
    api(31, "DeleteAclsRequest", range(1, 3), 2, DELETE_ACLS),
    api(
        45,
        "AlterPartitionReassignmentsRequest",
        range(0, 0),
        0,
        ALTER_PARTITION_REASSIGNMENTS,
    ),
    api(
        46,
        "ListPartitionReassignmentsRequest",
        range(0, 0),
        0,
        LIST_PARTITION_REASSIGNMENTS,
    ),
    api(
        44,
        "IncrementalAlterConfigsRequest",
        range(0, 1),
        1,
        INCREMENTAL_ALTER_CONFIGS,
    ),
    api(8, "OffsetCommitRequest", range(2, 8), 8, OFFSET_COMMIT),
    api(9, "OffsetFetchRequest", range(1, 8), 6, OFFSET_FETCH),
    api(11, "JoinGroupRequest", range(0, 9), 6, JOIN_GROUP),
    api(12, "HeartbeatRequest", range(0, 4), 4, HEARTBEAT),
    api(13, "LeaveGroupRequest", range(0, 5), 4, LEAVE_GROUP),
    api(14, "SyncGroupRequest", range(0, 5), 4, SYNC_GROUP),
    api(15, "DescribeGroupsRequest", range(0, 5), 5, DESCRIBE_GROUPS),
    api(16, "ListGroupsRequest", range(0, 5), 3, LIST_GROUPS),
    api(42, "DeleteGroupsRequest", range(0, 2), 2, DELETE_GROUPS),
    api(47, "OffsetDeleteRequest", range(0, 0), 1, OFFSET_DELETE),
    api(21, "DeleteRecordsRequest", range(0, 2), 2, DELETE_RECORDS),
    api(
        33,
        "AlterConfigsRequest",
        range(0, 2),
        2,
        LEGACY_ALTER_CONFIGS,
    ),
    api(17, "SaslHandshakeRequest", range(0, 1), 2, SASL_HANDSHAKE),
    api(
        36,
        "SaslAuthenticateRequest",
        range(0, 2),
        2,
        SASL_AUTHENTICATE,
    ),
];

const fn api(
    key: i16,
    name: &'static str,
    versions: Versions,
    flexible_from: i16,
    fields: &'static [Field],
) -> Api {
    Api {
        key,
        name,
        versions,
        flexible_from,
        fields,
    }
}

// ---------------------------------------------------------------------------------------
// The walker.
// ---------------------------------------------------------------------------------------

/// One step of the path to the field being read.
#[derive(Debug, Clone, Copy)]
enum Seg {
    Field(&'static str),
    Index(u64),
    Tags,
    Tag(u32),
}

#[derive(Debug)]
struct Walker<'a> {
    body: &'a [u8],
    pos: usize,
    /// End of the bytes the current field may use: the body's end, or a tagged field's.
    end: usize,
    version: i16,
    flexible: bool,
    path: Vec<Seg>,
}

/// Which kind of length-prefixed value is being read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Prefixed {
    String,
    Bytes,
    Array,
}

impl<'a> Walker<'a> {
    fn path(&self) -> String {
        let mut out = String::new();
        for seg in &self.path {
            match seg {
                Seg::Field(name) => {
                    if !out.is_empty() {
                        out.push('.');
                    }
                    out.push_str(name);
                }
                Seg::Index(i) => out.push_str(&format!("[{i}]")),
                Seg::Tags => {
                    if !out.is_empty() {
                        out.push('.');
                    }
                    out.push_str("_tagged_fields");
                }
                Seg::Tag(tag) => out.push_str(&format!("[tag {tag}]")),
            }
        }
        if out.is_empty() {
            out.push_str("body");
        }
        out
    }

    fn remaining(&self) -> usize {
        self.end - self.pos
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], GuardError> {
        if n > self.remaining() {
            return Err(GuardError::Truncated { path: self.path() });
        }
        let bytes = &self.body[self.pos..self.pos + n];
        self.pos += n;
        Ok(bytes)
    }

    fn read_i16(&mut self) -> Result<i16, GuardError> {
        let b = self.take(2)?;
        Ok(i16::from_be_bytes([b[0], b[1]]))
    }

    fn read_i32(&mut self) -> Result<i32, GuardError> {
        let b = self.take(4)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// Kafka's unsigned varint: 7 bits a byte, low first, at most 5 bytes. Bits of the fifth
    /// byte above 2^32 are dropped, as `kafka-protocol` and Kafka's `ByteUtils` drop them.
    fn read_uvarint(&mut self) -> Result<u32, GuardError> {
        let mut value = 0u32;
        for i in 0..5 {
            let b = self.take(1)?[0];
            value |= u32::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(GuardError::VarintTooLong { path: self.path() })
    }

    /// Reads a length or count prefix; `None` is null (allowed only if `nullable`).
    fn read_len(&mut self, kind: Prefixed, nullable: bool) -> Result<Option<u32>, GuardError> {
        let len = if self.flexible {
            match self.read_uvarint()? {
                0 => None,
                n => Some(n - 1),
            }
        } else {
            let n = match kind {
                Prefixed::String => i32::from(self.read_i16()?),
                Prefixed::Bytes | Prefixed::Array => self.read_i32()?,
            };
            match n {
                -1 => None,
                n if n < -1 => {
                    return Err(GuardError::NegativeLength {
                        path: self.path(),
                        len: n,
                    });
                }
                n => Some(n.unsigned_abs()),
            }
        };
        if len.is_none() && !nullable {
            return Err(GuardError::UnexpectedNull {
                path: self.path(),
                version: self.version,
            });
        }
        Ok(len)
    }

    /// Minimum encoded size of a value of `ty` at this version, in bytes.
    fn min_size(&self, ty: Ty) -> u64 {
        match ty {
            Bool | Int8 => 1,
            Int16 => 2,
            Int32 => 4,
            Int64 => 8,
            Uuid => 16,
            Str if !self.flexible => 2,
            Bytes | Ty::Array(_) | Structs(_) if !self.flexible => 4,
            Str | Bytes | Ty::Array(_) | Structs(_) => 1,
            Struct(fields) => {
                let own: u64 = fields
                    .iter()
                    .filter(|field| field.tag.is_none() && field.versions.contains(self.version))
                    .map(|field| self.min_size(field.ty))
                    .sum();
                own + u64::from(self.flexible)
            }
        }
    }

    /// Walks the fields of a struct present at this version, then its tagged fields.
    fn walk_struct(&mut self, fields: &'static [Field], depth: usize) -> Result<(), GuardError> {
        if depth > MAX_DEPTH {
            return Err(GuardError::TooDeep { path: self.path() });
        }
        for field in fields {
            if field.tag.is_some() || !field.versions.contains(self.version) {
                continue;
            }
            self.path.push(Seg::Field(field.name));
            self.walk_value(field.ty, field.nullable.contains(self.version), depth)?;
            self.path.pop();
        }
        if self.flexible {
            self.path.push(Seg::Tags);
            self.walk_tags(fields, depth)?;
            self.path.pop();
        }
        Ok(())
    }

    fn walk_value(&mut self, ty: Ty, nullable: bool, depth: usize) -> Result<(), GuardError> {
        match ty {
            Bool | Int8 => self.take(1).map(drop),
            Int16 => self.take(2).map(drop),
            Int32 => self.take(4).map(drop),
            Int64 => self.take(8).map(drop),
            Uuid => self.take(16).map(drop),
            Str => {
                let Some(len) = self.read_len(Prefixed::String, nullable)? else {
                    return Ok(());
                };
                if len > MAX_STRING_BYTES {
                    return Err(GuardError::StringTooLong {
                        path: self.path(),
                        len: u64::from(len),
                    });
                }
                let bytes = self.take_declared(len, "string")?;
                if std::str::from_utf8(bytes).is_err() {
                    return Err(GuardError::InvalidUtf8 { path: self.path() });
                }
                Ok(())
            }
            Bytes => match self.read_len(Prefixed::Bytes, nullable)? {
                Some(len) => self.take_declared(len, "bytes").map(drop),
                None => Ok(()),
            },
            Ty::Array(&element) => self.walk_array(element, nullable, depth),
            Structs(fields) => self.walk_array(Struct(fields), nullable, depth),
            Struct(fields) => self.walk_struct(fields, depth + 1),
        }
    }

    /// Walks an array of `element`s: the count is checked against the bytes left (count *
    /// minimum element size, at least 1 byte each) before the first element is read.
    fn walk_array(&mut self, element: Ty, nullable: bool, depth: usize) -> Result<(), GuardError> {
        let Some(count) = self.read_len(Prefixed::Array, nullable)? else {
            return Ok(());
        };
        let min_element_bytes = self.min_size(element).max(1);
        let remaining = self.remaining();
        if u64::from(count) * min_element_bytes > remaining as u64 {
            return Err(GuardError::ArrayTooLong {
                path: self.path(),
                count: u64::from(count),
                min_element_bytes,
                remaining,
            });
        }
        for i in 0..u64::from(count) {
            self.path.push(Seg::Index(i));
            self.walk_value(element, false, depth)?;
            self.path.pop();
        }
        Ok(())
    }

    fn take_declared(&mut self, len: u32, what: &str) -> Result<&'a [u8], GuardError> {
        let remaining = self.remaining();
        if len as usize > remaining {
            return Err(GuardError::LengthTooLong {
                path: self.path(),
                what: what.to_owned(),
                len: u64::from(len),
                remaining,
            });
        }
        self.take(len as usize)
    }

    /// Walks a tagged-field section (KIP-482): count, then (tag, size, value) each.
    fn walk_tags(&mut self, fields: &'static [Field], depth: usize) -> Result<(), GuardError> {
        let count = self.read_uvarint()?;
        let remaining = self.remaining();
        if u64::from(count) * 2 > remaining as u64 {
            return Err(GuardError::TooManyTags {
                path: self.path(),
                count,
                remaining,
            });
        }
        for _ in 0..count {
            let tag = self.read_uvarint()?;
            self.path.push(Seg::Tag(tag));
            let size = self.read_uvarint()?;
            let remaining = self.remaining();
            if size as usize > remaining {
                return Err(GuardError::LengthTooLong {
                    path: self.path(),
                    what: format!("tagged field {tag}"),
                    len: u64::from(size),
                    remaining,
                });
            }
            self.path.pop();
            match fields.iter().find(|field| field.tag == Some(tag)) {
                None => {
                    self.take(size as usize)?;
                }
                Some(field) if !field.versions.contains(self.version) => {
                    return Err(GuardError::TagNotValid {
                        path: self.path(),
                        tag,
                        version: self.version,
                    });
                }
                Some(field) => {
                    let (start, outer_end) = (self.pos, self.end);
                    self.end = start + size as usize;
                    self.path.push(Seg::Field(field.name));
                    self.walk_value(field.ty, field.nullable.contains(self.version), depth)?;
                    if self.pos != self.end {
                        return Err(GuardError::TagSizeMismatch {
                            path: self.path(),
                            tag,
                            declared: size,
                            used: self.pos - start,
                        });
                    }
                    self.path.pop();
                    self.end = outer_end;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::{Buf, Bytes as Blob};
    use kafka_protocol::messages::DescribeLogDirsRequest;
    use kafka_protocol::messages::alter_partition_reassignments_request::{
        ReassignablePartition, ReassignableTopic,
    };
    use kafka_protocol::messages::alter_user_scram_credentials_request::{
        ScramCredentialDeletion, ScramCredentialUpsertion,
    };
    use kafka_protocol::messages::create_acls_request::AclCreation;
    use kafka_protocol::messages::create_partitions_request::{
        CreatePartitionsAssignment, CreatePartitionsTopic,
    };
    use kafka_protocol::messages::create_topics_request::{
        CreatableReplicaAssignment, CreatableTopic, CreatableTopicConfig,
    };
    use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
    use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
    use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
    use kafka_protocol::messages::describe_log_dirs_request::DescribableLogDirTopic;
    use kafka_protocol::messages::describe_user_scram_credentials_request::UserName as ScramUserName;
    use kafka_protocol::messages::elect_leaders_request::TopicPartitions as ElectTopicPartitions;
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ForgottenTopic};
    use kafka_protocol::messages::incremental_alter_configs_request::{
        AlterConfigsResource as IncrementalAlterConfigsResource, AlterableConfig,
    };
    use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
    use kafka_protocol::messages::leave_group_request::MemberIdentity;
    use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
    use kafka_protocol::messages::list_partition_reassignments_request::ListPartitionReassignmentsTopics;
    use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
    use kafka_protocol::messages::offset_commit_request::{
        OffsetCommitRequestPartition, OffsetCommitRequestTopic,
    };
    use kafka_protocol::messages::offset_fetch_request::{
        OffsetFetchRequestGroup, OffsetFetchRequestTopic, OffsetFetchRequestTopics,
    };
    use kafka_protocol::messages::offset_for_leader_epoch_request::{
        OffsetForLeaderPartition, OffsetForLeaderTopic,
    };
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
    use kafka_protocol::messages::{
        AlterConfigsRequest, ApiKey, ApiVersionsRequest, BrokerId, CreatePartitionsRequest,
        CreateTopicsRequest, DeleteGroupsRequest, DeleteRecordsRequest, DeleteTopicsRequest,
        DescribeClusterRequest, DescribeConfigsRequest, DescribeGroupsRequest, FetchRequest,
        FindCoordinatorRequest, GroupId, HeartbeatRequest, IncrementalAlterConfigsRequest,
        InitProducerIdRequest, JoinGroupRequest, LeaveGroupRequest, ListGroupsRequest,
        ListOffsetsRequest, MetadataRequest, OffsetCommitRequest, OffsetDeleteRequest,
        OffsetFetchRequest, OffsetForLeaderEpochRequest, ProduceRequest, ProducerId,
        SaslAuthenticateRequest, SaslHandshakeRequest, SyncGroupRequest, TopicName,
        TransactionalId,
    };
    use kafka_protocol::messages::{
        AlterPartitionReassignmentsRequest, ElectLeadersRequest, ListPartitionReassignmentsRequest,
    };
    use kafka_protocol::messages::{
        AlterUserScramCredentialsRequest, DescribeUserScramCredentialsRequest,
    };
    use kafka_protocol::messages::{CreateAclsRequest, DeleteAclsRequest, DescribeAclsRequest};
    use kafka_protocol::protocol::{
        Decodable, Encodable, HeaderVersion, Message, StrBytes, VersionRange,
    };
    use proptest::prelude::*;
    use std::sync::OnceLock;

    fn s(x: &'static str) -> StrBytes {
        StrBytes::from_static_str(x)
    }

    fn topic(x: &'static str) -> TopicName {
        TopicName(s(x))
    }

    fn group(x: &'static str) -> GroupId {
        GroupId(s(x))
    }

    fn blob() -> Blob {
        Blob::from_static(b"\x01\x02\x03")
    }

    fn id(n: u128) -> uuid::Uuid {
        uuid::Uuid::from_u128(n)
    }

    fn encode<T: Encodable>(req: &T, version: i16) -> Vec<u8> {
        let mut buf = Vec::new();
        req.encode(&mut buf, version)
            .unwrap_or_else(|e| panic!("encode at v{version}: {e}"));
        buf
    }

    // ---- Requests built with kafka-protocol's structs, per api, version and variant. ----
    // `rich`: non-empty and nested arrays, set optional fields, unknown tagged fields at
    // several levels (flexible versions); otherwise: nulls where the version allows them,
    // empty arrays and empty strings.

    fn api_versions(v: i16, rich: bool) -> ApiVersionsRequest {
        let mut req = ApiVersionsRequest::default();
        if v >= 3 && rich {
            req = req
                .with_client_software_name(s("keel-guard-test"))
                .with_client_software_version(s("0.1.0"))
                .with_unknown_tagged_field(7, blob());
        }
        req
    }

    fn metadata(v: i16, rich: bool) -> MetadataRequest {
        let mut topics = vec![
            MetadataRequestTopic::default().with_name(Some(topic("orders"))),
            MetadataRequestTopic::default().with_name(Some(topic(""))),
        ];
        if v >= 9 {
            topics[0] = topics[0].clone().with_unknown_tagged_field(3, blob());
        }
        if v >= 10 {
            topics[0] = topics[0].clone().with_topic_id(id(0xfeed));
            topics.push(
                MetadataRequestTopic::default()
                    .with_topic_id(id(42))
                    .with_name(None),
            );
        }
        let mut req = MetadataRequest::default().with_topics(match (rich, v) {
            (true, _) => Some(topics),
            (false, 0) => Some(vec![]),
            (false, _) => None,
        });
        if v >= 4 {
            req = req.with_allow_auto_topic_creation(!rich);
        }
        if (8..=10).contains(&v) {
            req = req.with_include_cluster_authorized_operations(rich);
        }
        if v >= 8 {
            req = req.with_include_topic_authorized_operations(rich);
        }
        if v >= 9 && rich {
            req = req.with_unknown_tagged_field(9, blob());
        }
        req
    }

    fn produce(v: i16, rich: bool) -> ProduceRequest {
        let flexible = v >= 9;
        let batch: Vec<u8> = (0..70u8).collect();
        let mut p0 = PartitionProduceData::default()
            .with_index(0)
            .with_records(rich.then(|| Blob::from(batch)));
        if flexible && rich {
            p0 = p0.with_unknown_tagged_field(7, blob());
        }
        let p1 = PartitionProduceData::default()
            .with_index(3)
            .with_records(Some(Blob::new()));
        let t0 = TopicProduceData::default()
            .with_name(topic("orders"))
            .with_partition_data(vec![p0, p1]);
        let t1 = TopicProduceData::default()
            .with_name(topic(""))
            .with_partition_data(vec![
                PartitionProduceData::default()
                    .with_index(1)
                    .with_records(None),
            ]);
        let mut req = ProduceRequest::default()
            .with_transactional_id(rich.then(|| TransactionalId(s("txn-1"))))
            .with_acks(-1)
            .with_timeout_ms(30_000)
            .with_topic_data(if rich { vec![t0, t1] } else { vec![t1] });
        if flexible && rich {
            req = req.with_unknown_tagged_field(9, blob());
        }
        req
    }

    fn fetch(v: i16, rich: bool) -> FetchRequest {
        let flexible = v >= 12;
        let partition = |p: i32| {
            let mut x = FetchPartition::default()
                .with_partition(p)
                .with_fetch_offset(1234 + i64::from(p))
                .with_partition_max_bytes(1 << 20);
            if v >= 9 {
                x = x.with_current_leader_epoch(5);
            }
            if v >= 12 {
                x = x.with_last_fetched_epoch(4);
            }
            if v >= 5 {
                x = x.with_log_start_offset(7);
            }
            if flexible && p == 1 {
                x = x.with_unknown_tagged_field(5, blob());
            }
            x
        };
        let mut t0 = FetchTopic::default()
            .with_topic(topic("orders"))
            .with_partitions(vec![partition(0), partition(1)]);
        if flexible {
            t0 = t0.with_unknown_tagged_field(2, blob());
        }
        let t1 = FetchTopic::default().with_topic(topic("b"));
        let mut req = FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(500)
            .with_min_bytes(1)
            .with_topics(if rich { vec![t0, t1] } else { vec![] });
        if v >= 3 {
            req = req.with_max_bytes(50 << 20);
        }
        if v >= 4 {
            req = req.with_isolation_level(1);
        }
        if v >= 7 {
            req = req.with_session_id(0).with_session_epoch(-1);
            if rich {
                req = req.with_forgotten_topics_data(vec![
                    ForgottenTopic::default()
                        .with_topic(topic("gone"))
                        .with_partitions(vec![1, 2, 3]),
                    ForgottenTopic::default().with_topic(topic("empty")),
                ]);
            }
        }
        if v >= 11 && rich {
            req = req.with_rack_id(s("rack-a"));
        }
        if flexible && rich {
            req = req
                .with_cluster_id(Some(s("keel-cluster")))
                .with_unknown_tagged_field(7, blob());
        }
        req
    }

    fn list_offsets(v: i16, rich: bool) -> ListOffsetsRequest {
        let partition = |p: i32, ts: i64| {
            let mut x = ListOffsetsPartition::default()
                .with_partition_index(p)
                .with_timestamp(ts);
            if v >= 4 {
                x = x.with_current_leader_epoch(9);
            }
            x
        };
        let mut t0 = ListOffsetsTopic::default()
            .with_name(topic("orders"))
            .with_partitions(vec![
                partition(0, -1),
                partition(1, -2),
                partition(2, 1_700_000_000_000),
            ]);
        if v >= 6 {
            t0 = t0.with_unknown_tagged_field(4, blob());
        }
        let t1 = ListOffsetsTopic::default().with_name(topic(""));
        let mut req = ListOffsetsRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_topics(if rich { vec![t0, t1] } else { vec![] });
        if v >= 2 {
            req = req.with_isolation_level(1);
        }
        if v >= 10 {
            req = req.with_timeout_ms(1_000);
        }
        req
    }

    fn offset_for_leader_epoch(v: i16, rich: bool) -> OffsetForLeaderEpochRequest {
        let partition = |p: i32| {
            OffsetForLeaderPartition::default()
                .with_partition(p)
                .with_current_leader_epoch(6)
                .with_leader_epoch(5)
        };
        let t0 = OffsetForLeaderTopic::default()
            .with_topic(topic("orders"))
            .with_partitions(vec![partition(0), partition(1)]);
        let t1 = OffsetForLeaderTopic::default().with_topic(topic("x"));
        let mut req = OffsetForLeaderEpochRequest::default().with_topics(if rich {
            vec![t0, t1]
        } else {
            vec![]
        });
        if v >= 3 {
            req = req.with_replica_id(BrokerId(-1));
        }
        req
    }

    fn init_producer_id(v: i16, rich: bool) -> InitProducerIdRequest {
        let mut req = InitProducerIdRequest::default()
            .with_transactional_id(rich.then(|| TransactionalId(s("txn-1"))))
            .with_transaction_timeout_ms(60_000);
        if v >= 3 && rich {
            req = req.with_producer_id(ProducerId(42)).with_producer_epoch(3);
        }
        req
    }

    fn create_topics(v: i16, rich: bool) -> CreateTopicsRequest {
        let full = CreatableTopic::default()
            .with_name(topic("new"))
            .with_num_partitions(-1)
            .with_replication_factor(-1)
            .with_assignments(vec![
                CreatableReplicaAssignment::default()
                    .with_partition_index(0)
                    .with_broker_ids(vec![BrokerId(1), BrokerId(2), BrokerId(3)]),
                CreatableReplicaAssignment::default().with_partition_index(1),
            ])
            .with_configs(vec![
                CreatableTopicConfig::default()
                    .with_name(s("cleanup.policy"))
                    .with_value(Some(s("compact"))),
                CreatableTopicConfig::default().with_name(s("retention.ms")),
            ]);
        let plain = CreatableTopic::default()
            .with_name(topic("plain"))
            .with_num_partitions(3)
            .with_replication_factor(2);
        let mut req = CreateTopicsRequest::default()
            .with_topics(if rich { vec![full, plain] } else { vec![plain] })
            .with_timeout_ms(30_000);
        if v >= 1 {
            req = req.with_validate_only(rich);
        }
        req
    }

    fn delete_topics(v: i16, rich: bool) -> DeleteTopicsRequest {
        let mut req = DeleteTopicsRequest::default().with_timeout_ms(15_000);
        if rich && v >= 6 {
            req = req.with_topics(vec![
                DeleteTopicState::default().with_name(Some(topic("a"))),
                DeleteTopicState::default()
                    .with_name(None)
                    .with_topic_id(id(7)),
            ]);
        } else if rich {
            req = req.with_topic_names(vec![topic("a"), topic("bb"), topic("")]);
        }
        req
    }

    fn describe_configs(v: i16, rich: bool) -> DescribeConfigsRequest {
        let resources = vec![
            DescribeConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(s("orders"))
                .with_configuration_keys(Some(vec![s("cleanup.policy"), s("")])),
            DescribeConfigsResource::default()
                .with_resource_type(4)
                .with_resource_name(s("1"))
                .with_configuration_keys(None),
            DescribeConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(s(""))
                .with_configuration_keys(Some(vec![])),
        ];
        let mut req = DescribeConfigsRequest::default()
            .with_resources(if rich { resources } else { vec![] })
            .with_include_synonyms(rich);
        if v >= 3 {
            req = req.with_include_documentation(rich);
        }
        req
    }

    fn create_partitions(v: i16, rich: bool) -> CreatePartitionsRequest {
        let placed = CreatePartitionsTopic::default()
            .with_name(topic("orders"))
            .with_count(5)
            .with_assignments(Some(vec![
                CreatePartitionsAssignment::default()
                    .with_broker_ids(vec![BrokerId(1), BrokerId(2)]),
                CreatePartitionsAssignment::default(),
            ]));
        let auto = CreatePartitionsTopic::default()
            .with_name(topic("x"))
            .with_count(2)
            .with_assignments(None);
        let mut req = CreatePartitionsRequest::default()
            .with_topics(if rich { vec![placed, auto] } else { vec![] })
            .with_timeout_ms(30_000)
            .with_validate_only(rich);
        if v >= 2 && rich {
            req = req.with_unknown_tagged_field(5, blob());
        }
        req
    }

    fn legacy_alter_configs(v: i16, rich: bool) -> AlterConfigsRequest {
        use kafka_protocol::messages::alter_configs_request::{
            AlterConfigsResource, AlterableConfig,
        };
        let topic_resource = AlterConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(s("orders"))
            .with_configs(vec![
                AlterableConfig::default()
                    .with_name(s("retention.ms"))
                    .with_value(Some(s("60000"))),
                AlterableConfig::default()
                    .with_name(s("cleanup.policy"))
                    .with_value(None),
            ]);
        let cluster = AlterConfigsResource::default()
            .with_resource_type(4)
            .with_resource_name(s(""));
        let mut req = AlterConfigsRequest::default()
            .with_resources(if rich {
                vec![topic_resource, cluster]
            } else {
                vec![]
            })
            .with_validate_only(rich);
        if v >= 2 && rich {
            req = req.with_unknown_tagged_field(3, blob());
        }
        req
    }

    fn delete_records(v: i16, rich: bool) -> DeleteRecordsRequest {
        use kafka_protocol::messages::delete_records_request::{
            DeleteRecordsPartition, DeleteRecordsTopic,
        };
        let mut req = DeleteRecordsRequest::default()
            .with_timeout_ms(if rich { 30_000 } else { 0 })
            .with_topics(if rich {
                vec![
                    DeleteRecordsTopic::default()
                        .with_name(topic("orders"))
                        .with_partitions(vec![
                            DeleteRecordsPartition::default()
                                .with_partition_index(0)
                                .with_offset(-1),
                            DeleteRecordsPartition::default()
                                .with_partition_index(2)
                                .with_offset(1_000),
                        ]),
                ]
            } else {
                vec![]
            });
        if v >= 2 && rich {
            req = req.with_unknown_tagged_field(3, blob());
        }
        req
    }

    fn offset_delete(rich: bool) -> OffsetDeleteRequest {
        use kafka_protocol::messages::offset_delete_request::{
            OffsetDeleteRequestPartition, OffsetDeleteRequestTopic,
        };
        OffsetDeleteRequest::default()
            .with_group_id(GroupId(s(if rich { "readers" } else { "" })))
            .with_topics(if rich {
                vec![
                    OffsetDeleteRequestTopic::default()
                        .with_name(topic("orders"))
                        .with_partitions(vec![
                            OffsetDeleteRequestPartition::default().with_partition_index(0),
                            OffsetDeleteRequestPartition::default().with_partition_index(2),
                        ]),
                ]
            } else {
                vec![]
            })
    }

    fn incremental_alter_configs(v: i16, rich: bool) -> IncrementalAlterConfigsRequest {
        let topic_resource = IncrementalAlterConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(s("orders"))
            .with_configs(vec![
                AlterableConfig::default()
                    .with_name(s("retention.ms"))
                    .with_config_operation(0)
                    .with_value(Some(s("60000"))),
                AlterableConfig::default()
                    .with_name(s("cleanup.policy"))
                    .with_config_operation(1)
                    .with_value(None),
            ]);
        let cluster = IncrementalAlterConfigsResource::default()
            .with_resource_type(4)
            .with_resource_name(s(""));
        let mut req = IncrementalAlterConfigsRequest::default()
            .with_resources(if rich {
                vec![topic_resource, cluster]
            } else {
                vec![]
            })
            .with_validate_only(rich);
        if v >= 1 && rich {
            req = req.with_unknown_tagged_field(3, blob());
        }
        req
    }

    fn elect_leaders(v: i16, rich: bool) -> ElectLeadersRequest {
        let mut req = ElectLeadersRequest::default()
            .with_topic_partitions(rich.then(|| {
                vec![
                    ElectTopicPartitions::default()
                        .with_topic(topic("orders"))
                        .with_partitions(vec![0, 2]),
                    ElectTopicPartitions::default().with_topic(topic("x")),
                ]
            }))
            .with_timeout_ms(60_000);
        if v >= 1 && rich {
            req = req.with_election_type(1);
        }
        if v >= 2 && rich {
            req = req.with_unknown_tagged_field(4, blob());
        }
        req
    }

    fn alter_partition_reassignments(rich: bool) -> AlterPartitionReassignmentsRequest {
        let moved = ReassignableTopic::default()
            .with_name(topic("orders"))
            .with_partitions(vec![
                ReassignablePartition::default()
                    .with_partition_index(0)
                    .with_replicas(Some(vec![BrokerId(3), BrokerId(1)])),
                ReassignablePartition::default()
                    .with_partition_index(1)
                    .with_replicas(None),
            ]);
        let mut req = AlterPartitionReassignmentsRequest::default()
            .with_timeout_ms(60_000)
            .with_topics(if rich { vec![moved] } else { vec![] });
        if rich {
            req = req.with_unknown_tagged_field(2, blob());
        }
        req
    }

    fn list_partition_reassignments(rich: bool) -> ListPartitionReassignmentsRequest {
        ListPartitionReassignmentsRequest::default()
            .with_timeout_ms(60_000)
            .with_topics(rich.then(|| {
                vec![
                    ListPartitionReassignmentsTopics::default()
                        .with_name(topic("orders"))
                        .with_partition_indexes(vec![0, 1]),
                ]
            }))
    }

    fn describe_acls(v: i16, rich: bool) -> DescribeAclsRequest {
        let mut req = DescribeAclsRequest::default()
            .with_resource_type_filter(if rich { 2 } else { 1 })
            .with_resource_name_filter(rich.then(|| s("orders")))
            .with_pattern_type_filter(if rich { 2 } else { 1 })
            .with_principal_filter(rich.then(|| s("User:alice")))
            .with_host_filter(None)
            .with_operation(1)
            .with_permission_type(1);
        if v >= 2 && rich {
            req = req.with_unknown_tagged_field(1, blob());
        }
        req
    }

    fn create_acls(v: i16, rich: bool) -> CreateAclsRequest {
        let acl = AclCreation::default()
            .with_resource_type(2)
            .with_resource_name(s("orders"))
            .with_resource_pattern_type(3)
            .with_principal(s("User:alice"))
            .with_host(s("*"))
            .with_operation(3)
            .with_permission_type(3);
        let mut req =
            CreateAclsRequest::default().with_creations(if rich { vec![acl] } else { vec![] });
        if v >= 2 && rich {
            req = req.with_unknown_tagged_field(1, blob());
        }
        req
    }

    fn delete_acls(v: i16, rich: bool) -> DeleteAclsRequest {
        let filter = DeleteAclsFilter::default()
            .with_resource_type_filter(2)
            .with_resource_name_filter(Some(s("orders")))
            .with_pattern_type_filter(3)
            .with_principal_filter(None)
            .with_host_filter(Some(s("*")))
            .with_operation(1)
            .with_permission_type(1);
        let mut req =
            DeleteAclsRequest::default().with_filters(if rich { vec![filter] } else { vec![] });
        if v >= 2 && rich {
            req = req.with_unknown_tagged_field(1, blob());
        }
        req
    }

    fn describe_user_scram_credentials(rich: bool) -> DescribeUserScramCredentialsRequest {
        DescribeUserScramCredentialsRequest::default()
            .with_users(rich.then(|| vec![ScramUserName::default().with_name(s("alice"))]))
    }

    fn alter_user_scram_credentials(rich: bool) -> AlterUserScramCredentialsRequest {
        let mut req = AlterUserScramCredentialsRequest::default();
        if rich {
            req = req
                .with_deletions(vec![
                    ScramCredentialDeletion::default()
                        .with_name(s("bob"))
                        .with_mechanism(2),
                ])
                .with_upsertions(vec![
                    ScramCredentialUpsertion::default()
                        .with_name(s("alice"))
                        .with_mechanism(1)
                        .with_iterations(8192)
                        .with_salt(Blob::from_static(b"0123456789abcdef"))
                        .with_salted_password(Blob::from_static(&[7; 32])),
                ])
                .with_unknown_tagged_field(3, blob());
        }
        req
    }

    fn describe_log_dirs(v: i16, rich: bool) -> DescribeLogDirsRequest {
        let mut req = DescribeLogDirsRequest::default().with_topics(rich.then(|| {
            vec![
                DescribableLogDirTopic::default()
                    .with_topic(topic("orders"))
                    .with_partitions(vec![0, 1]),
            ]
        }));
        if v >= 2 && rich {
            req = req.with_unknown_tagged_field(2, blob());
        }
        req
    }

    fn describe_cluster(v: i16, rich: bool) -> DescribeClusterRequest {
        let mut req =
            DescribeClusterRequest::default().with_include_cluster_authorized_operations(rich);
        if v >= 1 && rich {
            req = req.with_endpoint_type(2);
        }
        if v >= 2 {
            req = req.with_include_fenced_brokers(rich);
        }
        if rich {
            req = req.with_unknown_tagged_field(11, blob());
        }
        req
    }

    fn find_coordinator(v: i16, rich: bool) -> FindCoordinatorRequest {
        let mut req = FindCoordinatorRequest::default();
        if v <= 3 {
            req = req.with_key(s(if rich { "orders-app" } else { "" }));
        }
        if v >= 1 && rich {
            req = req.with_key_type(1);
        }
        if v >= 4 && rich {
            req = req.with_coordinator_keys(vec![s("orders-app"), s(""), s("txn-1")]);
        }
        if v >= 3 && rich {
            req = req.with_unknown_tagged_field(5, blob());
        }
        req
    }

    // ---- The consumer-group APIs. ----

    fn offset_commit(v: i16, rich: bool) -> OffsetCommitRequest {
        let flexible = v >= 8;
        let partition = |p: i32, metadata: Option<&'static str>| {
            let mut x = OffsetCommitRequestPartition::default()
                .with_partition_index(p)
                .with_committed_offset(100 * i64::from(p))
                .with_committed_metadata(metadata.map(s));
            if v >= 6 {
                x = x.with_committed_leader_epoch(3);
            }
            if flexible && p == 1 {
                x = x.with_unknown_tagged_field(4, blob());
            }
            x
        };
        let mut t0 = OffsetCommitRequestTopic::default()
            .with_name(topic("orders"))
            .with_partitions(vec![
                partition(0, Some("meta")),
                partition(1, None),
                partition(2, Some("")),
            ]);
        if flexible {
            t0 = t0.with_unknown_tagged_field(2, blob());
        }
        let t1 = OffsetCommitRequestTopic::default().with_name(topic(""));
        let mut req = OffsetCommitRequest::default()
            .with_group_id(group(if rich { "orders-app" } else { "" }))
            .with_generation_id_or_member_epoch(if rich { 7 } else { -1 })
            .with_member_id(s(if rich { "consumer-1-4f2c" } else { "" }))
            .with_topics(if rich { vec![t0, t1] } else { vec![] });
        if v >= 7 && rich {
            req = req.with_group_instance_id(Some(s("instance-1")));
        }
        if v <= 4 && rich {
            req = req.with_retention_time_ms(86_400_000);
        }
        if flexible && rich {
            req = req.with_unknown_tagged_field(9, blob());
        }
        req
    }

    fn offset_fetch(v: i16, rich: bool) -> OffsetFetchRequest {
        let flexible = v >= 6;
        let mut req = OffsetFetchRequest::default();
        if v <= 7 {
            let mut t0 = OffsetFetchRequestTopic::default()
                .with_name(topic("orders"))
                .with_partition_indexes(vec![0, 1, 2]);
            if flexible {
                t0 = t0.with_unknown_tagged_field(3, blob());
            }
            let t1 = OffsetFetchRequestTopic::default().with_name(topic(""));
            req = req
                .with_group_id(group(if rich { "orders-app" } else { "" }))
                .with_topics(match (rich, v) {
                    (true, _) => Some(vec![t0, t1]),
                    (false, 1) => Some(vec![]),
                    (false, _) => None,
                });
        } else if rich {
            let t0 = OffsetFetchRequestTopics::default()
                .with_name(topic("orders"))
                .with_partition_indexes(vec![0, 5])
                .with_unknown_tagged_field(3, blob());
            let t1 = OffsetFetchRequestTopics::default().with_name(topic(""));
            req = req.with_groups(vec![
                OffsetFetchRequestGroup::default()
                    .with_group_id(group("orders-app"))
                    .with_topics(Some(vec![t0, t1]))
                    .with_unknown_tagged_field(6, blob()),
                OffsetFetchRequestGroup::default()
                    .with_group_id(group(""))
                    .with_topics(None),
                OffsetFetchRequestGroup::default()
                    .with_group_id(group("g"))
                    .with_topics(Some(vec![])),
            ]);
        }
        if v >= 7 {
            req = req.with_require_stable(rich);
        }
        if flexible && rich {
            req = req.with_unknown_tagged_field(9, blob());
        }
        req
    }

    fn join_group(v: i16, rich: bool) -> JoinGroupRequest {
        let flexible = v >= 6;
        let mut range = JoinGroupRequestProtocol::default()
            .with_name(s("range"))
            .with_metadata(blob());
        if flexible {
            range = range.with_unknown_tagged_field(2, blob());
        }
        let sticky = JoinGroupRequestProtocol::default().with_name(s("cooperative-sticky"));
        let mut req = JoinGroupRequest::default()
            .with_group_id(group(if rich { "orders-app" } else { "" }))
            .with_session_timeout_ms(45_000)
            .with_member_id(s(if rich { "consumer-1-4f2c" } else { "" }))
            .with_protocol_type(s(if rich { "consumer" } else { "" }))
            .with_protocols(if rich { vec![range, sticky] } else { vec![] });
        if v >= 1 {
            req = req.with_rebalance_timeout_ms(300_000);
        }
        if v >= 5 && rich {
            req = req.with_group_instance_id(Some(s("instance-1")));
        }
        if v >= 8 && rich {
            req = req.with_reason(Some(s("rebalance requested")));
        }
        if flexible && rich {
            req = req.with_unknown_tagged_field(9, blob());
        }
        req
    }

    fn heartbeat(v: i16, rich: bool) -> HeartbeatRequest {
        let mut req = HeartbeatRequest::default()
            .with_group_id(group(if rich { "orders-app" } else { "" }))
            .with_generation_id(if rich { 7 } else { -1 })
            .with_member_id(s(if rich { "consumer-1-4f2c" } else { "" }));
        if v >= 3 && rich {
            req = req.with_group_instance_id(Some(s("instance-1")));
        }
        if v >= 4 && rich {
            req = req.with_unknown_tagged_field(9, blob());
        }
        req
    }

    fn leave_group(v: i16, rich: bool) -> LeaveGroupRequest {
        let flexible = v >= 4;
        let mut req =
            LeaveGroupRequest::default().with_group_id(group(if rich { "orders-app" } else { "" }));
        if v <= 2 && rich {
            req = req.with_member_id(s("consumer-1-4f2c"));
        }
        if v >= 3 && rich {
            let mut m0 = MemberIdentity::default()
                .with_member_id(s("consumer-1-4f2c"))
                .with_group_instance_id(Some(s("instance-1")));
            if v >= 5 {
                m0 = m0.with_reason(Some(s("shutting down")));
            }
            if flexible {
                m0 = m0.with_unknown_tagged_field(2, blob());
            }
            let m1 = MemberIdentity::default().with_member_id(s(""));
            req = req.with_members(vec![m0, m1]);
        }
        if flexible && rich {
            req = req.with_unknown_tagged_field(9, blob());
        }
        req
    }

    fn sync_group(v: i16, rich: bool) -> SyncGroupRequest {
        let flexible = v >= 4;
        let mut a0 = SyncGroupRequestAssignment::default()
            .with_member_id(s("consumer-1-4f2c"))
            .with_assignment(blob());
        if flexible {
            a0 = a0.with_unknown_tagged_field(2, blob());
        }
        let a1 = SyncGroupRequestAssignment::default().with_member_id(s(""));
        let mut req = SyncGroupRequest::default()
            .with_group_id(group(if rich { "orders-app" } else { "" }))
            .with_generation_id(if rich { 7 } else { -1 })
            .with_member_id(s(if rich { "consumer-1-4f2c" } else { "" }))
            .with_assignments(if rich { vec![a0, a1] } else { vec![] });
        if v >= 3 && rich {
            req = req.with_group_instance_id(Some(s("instance-1")));
        }
        if v >= 5 && rich {
            req = req
                .with_protocol_type(Some(s("consumer")))
                .with_protocol_name(Some(s("range")));
        }
        if flexible && rich {
            req = req.with_unknown_tagged_field(9, blob());
        }
        req
    }

    fn describe_groups(v: i16, rich: bool) -> DescribeGroupsRequest {
        let mut req = DescribeGroupsRequest::default().with_groups(if rich {
            vec![group("orders-app"), group("")]
        } else {
            vec![]
        });
        if v >= 3 {
            req = req.with_include_authorized_operations(rich);
        }
        if v >= 5 && rich {
            req = req.with_unknown_tagged_field(9, blob());
        }
        req
    }

    fn list_groups(v: i16, rich: bool) -> ListGroupsRequest {
        let mut req = ListGroupsRequest::default();
        if v >= 4 && rich {
            req = req.with_states_filter(vec![s("Stable"), s("")]);
        }
        if v >= 5 && rich {
            req = req.with_types_filter(vec![s("classic"), s("consumer")]);
        }
        if v >= 3 && rich {
            req = req.with_unknown_tagged_field(9, blob());
        }
        req
    }

    fn delete_groups(v: i16, rich: bool) -> DeleteGroupsRequest {
        let mut req = DeleteGroupsRequest::default().with_groups_names(if rich {
            vec![group("orders-app"), group("")]
        } else {
            vec![]
        });
        if v >= 2 && rich {
            req = req.with_unknown_tagged_field(9, blob());
        }
        req
    }

    fn sasl_handshake(rich: bool) -> SaslHandshakeRequest {
        SaslHandshakeRequest::default().with_mechanism(if rich {
            StrBytes::from_static_str("SCRAM-SHA-512")
        } else {
            StrBytes::default()
        })
    }

    fn sasl_authenticate(v: i16, rich: bool) -> SaslAuthenticateRequest {
        let mut req = SaslAuthenticateRequest::default().with_auth_bytes(if rich {
            Blob::from_static(b"n,,n=alice,r=fyko+d2lbbFgONRv9qkxdawL")
        } else {
            Blob::new()
        });
        if v >= 2 && rich {
            req = req.with_unknown_tagged_field(7, blob());
        }
        req
    }

    /// The encoded body of a sample request.
    fn sample(key: i16, v: i16, rich: bool) -> Vec<u8> {
        match key {
            18 => encode(&api_versions(v, rich), v),
            3 => encode(&metadata(v, rich), v),
            0 => encode(&produce(v, rich), v),
            1 => encode(&fetch(v, rich), v),
            2 => encode(&list_offsets(v, rich), v),
            23 => encode(&offset_for_leader_epoch(v, rich), v),
            22 => encode(&init_producer_id(v, rich), v),
            10 => encode(&find_coordinator(v, rich), v),
            19 => encode(&create_topics(v, rich), v),
            20 => encode(&delete_topics(v, rich), v),
            32 => encode(&describe_configs(v, rich), v),
            60 => encode(&describe_cluster(v, rich), v),
            37 => encode(&create_partitions(v, rich), v),
            44 => encode(&incremental_alter_configs(v, rich), v),
            43 => encode(&elect_leaders(v, rich), v),
            29 => encode(&describe_acls(v, rich), v),
            35 => encode(&describe_log_dirs(v, rich), v),
            50 => encode(&describe_user_scram_credentials(rich), v),
            51 => encode(&alter_user_scram_credentials(rich), v),
            30 => encode(&create_acls(v, rich), v),
            31 => encode(&delete_acls(v, rich), v),
            45 => encode(&alter_partition_reassignments(rich), v),
            46 => encode(&list_partition_reassignments(rich), v),
            8 => encode(&offset_commit(v, rich), v),
            9 => encode(&offset_fetch(v, rich), v),
            11 => encode(&join_group(v, rich), v),
            12 => encode(&heartbeat(v, rich), v),
            13 => encode(&leave_group(v, rich), v),
            14 => encode(&sync_group(v, rich), v),
            15 => encode(&describe_groups(v, rich), v),
            16 => encode(&list_groups(v, rich), v),
            42 => encode(&delete_groups(v, rich), v),
            47 => encode(&offset_delete(rich), v),
            21 => encode(&delete_records(v, rich), v),
            33 => encode(&legacy_alter_configs(v, rich), v),
            17 => encode(&sasl_handshake(rich), v),
            36 => encode(&sasl_authenticate(v, rich), v),
            _ => unreachable!("no sample for api key {key}"),
        }
    }

    /// Decodes with kafka-protocol: bytes consumed, and the decoded message re-encoded.
    type Decoded = Result<(usize, Result<Vec<u8>, std::string::String>), std::string::String>;

    fn decode_as<T: Decodable + Encodable>(v: i16, body: &[u8]) -> Decoded {
        let mut buf = Blob::copy_from_slice(body);
        let msg = T::decode(&mut buf, v).map_err(|e| format!("{e:#}"))?;
        let consumed = body.len() - buf.remaining();
        let mut again = Vec::new();
        let again = msg
            .encode(&mut again, v)
            .map(|()| again)
            .map_err(|e| format!("{e:#}"));
        Ok((consumed, again))
    }

    fn crate_decode(key: i16, v: i16, body: &[u8]) -> Decoded {
        match key {
            18 => decode_as::<ApiVersionsRequest>(v, body),
            3 => decode_as::<MetadataRequest>(v, body),
            0 => decode_as::<ProduceRequest>(v, body),
            1 => decode_as::<FetchRequest>(v, body),
            2 => decode_as::<ListOffsetsRequest>(v, body),
            23 => decode_as::<OffsetForLeaderEpochRequest>(v, body),
            22 => decode_as::<InitProducerIdRequest>(v, body),
            10 => decode_as::<FindCoordinatorRequest>(v, body),
            19 => decode_as::<CreateTopicsRequest>(v, body),
            20 => decode_as::<DeleteTopicsRequest>(v, body),
            32 => decode_as::<DescribeConfigsRequest>(v, body),
            60 => decode_as::<DescribeClusterRequest>(v, body),
            37 => decode_as::<CreatePartitionsRequest>(v, body),
            44 => decode_as::<IncrementalAlterConfigsRequest>(v, body),
            43 => decode_as::<ElectLeadersRequest>(v, body),
            29 => decode_as::<DescribeAclsRequest>(v, body),
            35 => decode_as::<DescribeLogDirsRequest>(v, body),
            50 => decode_as::<DescribeUserScramCredentialsRequest>(v, body),
            51 => decode_as::<AlterUserScramCredentialsRequest>(v, body),
            30 => decode_as::<CreateAclsRequest>(v, body),
            31 => decode_as::<DeleteAclsRequest>(v, body),
            45 => decode_as::<AlterPartitionReassignmentsRequest>(v, body),
            46 => decode_as::<ListPartitionReassignmentsRequest>(v, body),
            8 => decode_as::<OffsetCommitRequest>(v, body),
            9 => decode_as::<OffsetFetchRequest>(v, body),
            11 => decode_as::<JoinGroupRequest>(v, body),
            12 => decode_as::<HeartbeatRequest>(v, body),
            13 => decode_as::<LeaveGroupRequest>(v, body),
            14 => decode_as::<SyncGroupRequest>(v, body),
            15 => decode_as::<DescribeGroupsRequest>(v, body),
            16 => decode_as::<ListGroupsRequest>(v, body),
            42 => decode_as::<DeleteGroupsRequest>(v, body),
            47 => decode_as::<OffsetDeleteRequest>(v, body),
            21 => decode_as::<DeleteRecordsRequest>(v, body),
            33 => decode_as::<AlterConfigsRequest>(v, body),
            17 => decode_as::<SaslHandshakeRequest>(v, body),
            36 => decode_as::<SaslAuthenticateRequest>(v, body),
            _ => unreachable!("no decoder for api key {key}"),
        }
    }

    /// The crate's struct version range and request header version function of an api.
    fn crate_meta(key: i16) -> (VersionRange, fn(i16) -> i16) {
        fn m<T: Message + HeaderVersion>() -> (VersionRange, fn(i16) -> i16) {
            (T::VERSIONS, T::header_version)
        }
        match key {
            18 => m::<ApiVersionsRequest>(),
            3 => m::<MetadataRequest>(),
            0 => m::<ProduceRequest>(),
            1 => m::<FetchRequest>(),
            2 => m::<ListOffsetsRequest>(),
            23 => m::<OffsetForLeaderEpochRequest>(),
            22 => m::<InitProducerIdRequest>(),
            10 => m::<FindCoordinatorRequest>(),
            19 => m::<CreateTopicsRequest>(),
            20 => m::<DeleteTopicsRequest>(),
            32 => m::<DescribeConfigsRequest>(),
            60 => m::<DescribeClusterRequest>(),
            37 => m::<CreatePartitionsRequest>(),
            44 => m::<IncrementalAlterConfigsRequest>(),
            43 => m::<ElectLeadersRequest>(),
            29 => m::<DescribeAclsRequest>(),
            35 => m::<DescribeLogDirsRequest>(),
            50 => m::<DescribeUserScramCredentialsRequest>(),
            51 => m::<AlterUserScramCredentialsRequest>(),
            30 => m::<CreateAclsRequest>(),
            31 => m::<DeleteAclsRequest>(),
            45 => m::<AlterPartitionReassignmentsRequest>(),
            46 => m::<ListPartitionReassignmentsRequest>(),
            8 => m::<OffsetCommitRequest>(),
            9 => m::<OffsetFetchRequest>(),
            11 => m::<JoinGroupRequest>(),
            12 => m::<HeartbeatRequest>(),
            13 => m::<LeaveGroupRequest>(),
            14 => m::<SyncGroupRequest>(),
            15 => m::<DescribeGroupsRequest>(),
            16 => m::<ListGroupsRequest>(),
            42 => m::<DeleteGroupsRequest>(),
            47 => m::<OffsetDeleteRequest>(),
            21 => m::<DeleteRecordsRequest>(),
            33 => m::<AlterConfigsRequest>(),
            17 => m::<SaslHandshakeRequest>(),
            36 => m::<SaslAuthenticateRequest>(),
            _ => unreachable!("no struct for api key {key}"),
        }
    }

    #[derive(Debug)]
    struct Sample {
        key: i16,
        version: i16,
        rich: bool,
        body: Vec<u8>,
    }

    /// Every covered api x version, rich and sparse.
    fn samples() -> &'static [Sample] {
        static SAMPLES: OnceLock<Vec<Sample>> = OnceLock::new();
        SAMPLES.get_or_init(|| {
            let mut out = Vec::new();
            for api in APIS {
                for version in api.versions.lo..=api.versions.hi {
                    for rich in [true, false] {
                        let body = sample(api.key, version, rich);
                        out.push(Sample {
                            key: api.key,
                            version,
                            rich,
                            body,
                        });
                    }
                }
            }
            out
        })
    }

    /// Whenever the guard passes a body, kafka-protocol decodes it without error (and
    /// without panicking) and stops exactly where the guard's walk stopped.
    fn assert_guard_implies_decode(key: i16, v: i16, body: &[u8]) -> Result<(), GuardError> {
        let walked = walk_request(key, v, body)?;
        assert!(walked <= body.len());
        let decoded = std::panic::catch_unwind(|| crate_decode(key, v, body))
            .unwrap_or_else(|_| panic!("kafka-protocol panicked: api {key} v{v} {body:02x?}"));
        match decoded {
            Ok((consumed, _)) => assert_eq!(
                consumed, walked,
                "api {key} v{v}: guard and decoder disagree on the end: {body:02x?}"
            ),
            Err(e) => panic!("api {key} v{v}: guard passed, decode failed ({e}): {body:02x?}"),
        }
        Ok(())
    }

    #[test]
    fn kafka_guard_table_lists_the_covered_ranges_within_the_crate() {
        let expected: &[(i16, i16, i16)] = &[
            (18, 0, 4),
            (3, 0, 12),
            (0, 3, 11),
            (1, 4, 12),
            (2, 1, 10),
            (23, 2, 4),
            (22, 0, 5),
            (10, 0, 4),
            (19, 2, 7),
            (20, 1, 6),
            (32, 1, 4),
            (60, 0, 2),
            (37, 0, 3),
            (43, 0, 2),
            (29, 1, 3),
            (35, 1, 4),
            (50, 0, 0),
            (51, 0, 0),
            (30, 1, 3),
            (31, 1, 3),
            (45, 0, 0),
            (46, 0, 0),
            (44, 0, 1),
            (8, 2, 8),
            (9, 1, 8),
            (11, 0, 9),
            (12, 0, 4),
            (13, 0, 5),
            (14, 0, 5),
            (15, 0, 5),
            (16, 0, 5),
            (42, 0, 2),
            (47, 0, 0),
            (21, 0, 2),
            (33, 0, 2),
            (17, 0, 1),
            (36, 0, 2),
        ];
        let table: Vec<_> = APIS
            .iter()
            .map(|api| (api.key, api.versions.lo, api.versions.hi))
            .collect();
        assert_eq!(table, expected);
        for api in APIS {
            let key = ApiKey::try_from(api.key).expect("known api key");
            let advertised = key.valid_versions();
            let (structs, header_version) = crate_meta(api.key);
            for v in api.versions.lo..=api.versions.hi {
                assert!(
                    advertised.min <= v && v <= advertised.max,
                    "{} v{v}",
                    api.name
                );
                assert!(structs.min <= v && v <= structs.max, "{} v{v}", api.name);
                // Flexible request versions use request header v2 (KIP-482).
                assert_eq!(
                    v >= api.flexible_from,
                    header_version(v) >= 2,
                    "{} v{v}: flexible threshold",
                    api.name
                );
            }
        }
    }

    #[test]
    fn kafka_guard_passes_every_api_and_version_and_the_crate_decodes_it() {
        let mut count = 0;
        for s in samples() {
            let what = format!("api {} v{} rich={}", s.key, s.version, s.rich);
            assert_eq!(
                walk_request(s.key, s.version, &s.body),
                Ok(s.body.len()),
                "{what}"
            );
            let (consumed, again) = crate_decode(s.key, s.version, &s.body)
                .unwrap_or_else(|e| panic!("{what}: decode: {e}"));
            assert_eq!(consumed, s.body.len(), "{what}: decoder left bytes");
            assert_eq!(again.as_ref(), Ok(&s.body), "{what}: re-encoding differs");
            count += 1;
        }
        // 167 api versions (75 + 61 of the consumer-group APIs + 5 of SASL + 4 of
        // CreatePartitions + 3 of ElectLeaders + 2 of IncrementalAlterConfigs + 1 each of
        // Alter/ListPartitionReassignments + 3 each of Describe/Create/DeleteAcls + 1 each of
        // Describe/AlterUserScramCredentials + 4 of DescribeLogDirs + 3 of AlterConfigs + 1 of
        // OffsetDelete + 3 of DeleteRecords), rich and sparse.
        assert_eq!(count, 2 * 174);
    }

    #[test]
    fn kafka_guard_rejects_every_truncation_prefix() {
        for s in samples() {
            for len in 0..s.body.len() {
                let prefix = &s.body[..len];
                assert!(
                    check_request_body(s.key, s.version, prefix).is_err(),
                    "api {} v{} rich={}: prefix of {len} bytes passed",
                    s.key,
                    s.version,
                    s.rich
                );
            }
        }
    }

    #[test]
    fn kafka_guard_names_the_truncated_field() {
        // Metadata v1: topics ["a", "bc"], cut inside the length of the second name.
        let mut body = vec![0, 0, 0, 2, 0, 1, b'a', 0, 2, b'b', b'c'];
        assert_eq!(check_request_body(3, 1, &body), Ok(()));
        body.truncate(8);
        let err = check_request_body(3, 1, &body).unwrap_err();
        assert_eq!(err.to_string(), "truncated at topics[1].name");
    }

    #[test]
    fn kafka_guard_rejects_huge_classic_array_with_its_path() {
        // A 20-byte Metadata v1 body declaring i32::MAX topics.
        let mut body = vec![0x7f, 0xff, 0xff, 0xff];
        body.resize(20, 0);
        let err = check_request_body(3, 1, &body).unwrap_err();
        assert_eq!(
            err.to_string(),
            "topics: array of 2147483647 elements declared, 2 bytes at least each, \
             16 bytes left"
        );
        // Fetch v4, nested: topics[0].partitions declares i32::MAX partitions.
        let mut body = Vec::new();
        body.extend_from_slice(&(-1i32).to_be_bytes()); // replica_id
        body.extend_from_slice(&500i32.to_be_bytes()); // max_wait_ms
        body.extend_from_slice(&1i32.to_be_bytes()); // min_bytes
        body.extend_from_slice(&1024i32.to_be_bytes()); // max_bytes
        body.push(0); // isolation_level
        body.extend_from_slice(&1i32.to_be_bytes()); // topics: 1
        body.extend_from_slice(&[0, 1, b't']); // topics[0].topic
        body.extend_from_slice(&i32::MAX.to_be_bytes()); // topics[0].partitions
        body.extend_from_slice(&[0; 12]);
        let err = check_request_body(1, 4, &body).unwrap_err();
        assert_eq!(
            err,
            GuardError::ArrayTooLong {
                path: "topics[0].partitions".into(),
                count: i32::MAX as u64,
                min_element_bytes: 16,
                remaining: 12,
            }
        );
        assert!(
            err.to_string()
                .starts_with("topics[0].partitions: array of 2147483647 elements declared")
        );
        // Fewer elements than bytes left, but more than the bytes could hold (a partition
        // takes at least 16 bytes at v4): refused before the first element is read.
        let at = body.len() - 16;
        body[at..at + 4].copy_from_slice(&3i32.to_be_bytes());
        assert_eq!(
            check_request_body(1, 4, &body),
            Err(GuardError::ArrayTooLong {
                path: "topics[0].partitions".into(),
                count: 3,
                min_element_bytes: 16,
                remaining: 12,
            })
        );
        // Bytes: Produce v3 records declaring i32::MAX bytes.
        let mut body = Vec::new();
        body.extend_from_slice(&[0xff, 0xff]); // transactional_id: null
        body.extend_from_slice(&1i16.to_be_bytes()); // acks
        body.extend_from_slice(&1000i32.to_be_bytes()); // timeout_ms
        body.extend_from_slice(&1i32.to_be_bytes()); // topic_data: 1
        body.extend_from_slice(&[0, 1, b't']); // name
        body.extend_from_slice(&1i32.to_be_bytes()); // partition_data: 1
        body.extend_from_slice(&0i32.to_be_bytes()); // index
        body.extend_from_slice(&i32::MAX.to_be_bytes()); // records
        body.extend_from_slice(&[0; 8]);
        let err = check_request_body(0, 3, &body).unwrap_err();
        assert_eq!(
            err.to_string(),
            "topic_data[0].partition_data[0].records: bytes of 2147483647 bytes declared, \
             8 bytes left"
        );
    }

    #[test]
    fn kafka_guard_rejects_huge_compact_array_with_its_path() {
        // Metadata v9: compact topics count + 1 = 2^31, i.e. 2^31 - 1 topics.
        let mut body = vec![0x80, 0x80, 0x80, 0x80, 0x08];
        body.resize(20, 0);
        let err = check_request_body(3, 9, &body).unwrap_err();
        assert_eq!(
            err,
            GuardError::ArrayTooLong {
                path: "topics".into(),
                count: i32::MAX as u64,
                min_element_bytes: 2,
                remaining: 15,
            }
        );
        // u32::MAX as a compact count (Kafka reads it as -2, null; the crate as 2^32 - 2).
        let mut body = vec![0xff, 0xff, 0xff, 0xff, 0x0f];
        body.resize(20, 0);
        assert!(matches!(
            check_request_body(3, 9, &body),
            Err(GuardError::ArrayTooLong {
                count: 0xffff_fffe,
                ..
            })
        ));
        // CreateTopics v5, nested: topics[0].assignments[0].broker_ids of 2^31 - 1 ids.
        let mut body = vec![2, 2, b't']; // topics: 1; name "t"
        body.extend_from_slice(&1i32.to_be_bytes()); // num_partitions
        body.extend_from_slice(&1i16.to_be_bytes()); // replication_factor
        body.push(2); // assignments: 1
        body.extend_from_slice(&0i32.to_be_bytes()); // partition_index
        body.extend_from_slice(&[0x80, 0x80, 0x80, 0x80, 0x08]); // broker_ids
        body.extend_from_slice(&[0; 16]);
        let err = check_request_body(19, 5, &body).unwrap_err();
        assert_eq!(
            err.to_string(),
            "topics[0].assignments[0].broker_ids: array of 2147483647 elements declared, \
             4 bytes at least each, 16 bytes left"
        );
    }

    #[test]
    fn kafka_guard_rejects_null_where_not_nullable() {
        // Metadata v0: a null topics array is v1+ only.
        let err = check_request_body(3, 0, &[0xff, 0xff, 0xff, 0xff]).unwrap_err();
        assert_eq!(
            err,
            GuardError::UnexpectedNull {
                path: "topics".into(),
                version: 0
            }
        );
        assert_eq!(check_request_body(3, 1, &[0xff, 0xff, 0xff, 0xff]), Ok(()));
        // Metadata v9: a null topic name is v10+ only.
        let body = [2, 0, 0, 0];
        assert!(matches!(
            check_request_body(3, 9, &body),
            Err(GuardError::UnexpectedNull { ref path, .. }) if path == "topics[0].name"
        ));
        let mut body = vec![2];
        body.extend_from_slice(&[0; 16]); // topic_id
        body.extend_from_slice(&[0, 0]); // name null, the topic's tags
        body.extend_from_slice(&[1, 0, 0, 0]); // allow_auto, include_cluster, include_topic, tags
        assert_eq!(check_request_body(3, 10, &body), Ok(()));
        // Produce v9: a null topic name; a null records is fine.
        let mut body = vec![0]; // transactional_id: null
        body.extend_from_slice(&[0, 1, 0, 0, 0, 0]); // acks, timeout_ms
        body.extend_from_slice(&[2, 5, b'o', b'r', b'd', b's']); // topic_data: 1, name
        body.extend_from_slice(&[2, 0, 0, 0, 0, 0, 0, 0, 0]); // 1 partition, records null
        assert_eq!(check_request_body(0, 9, &body), Ok(()));
        body[8] = 0; // name null
        assert!(matches!(
            check_request_body(0, 9, &body),
            Err(GuardError::UnexpectedNull { ref path, .. }) if path == "topic_data[0].name"
        ));
        // A classic length below -1.
        assert!(matches!(
            check_request_body(3, 1, &[0xff, 0xff, 0xff, 0xfe]),
            Err(GuardError::NegativeLength { len: -2, .. })
        ));
    }

    #[test]
    fn kafka_guard_strings_are_bounded_and_utf8() {
        // ApiVersions v3: a compact string of 32768 bytes (Kafka's readers refuse > 0x7fff).
        let mut body = vec![0x81, 0x80, 0x02]; // 32769 = length 32768 + 1
        body.resize(3 + 32768, b'a');
        body.extend_from_slice(&[1, 0]);
        assert_eq!(
            check_request_body(18, 3, &body),
            Err(GuardError::StringTooLong {
                path: "client_software_name".into(),
                len: 32768
            })
        );
        let body = [3, 0xc3, 0x28, 1, 0];
        assert_eq!(
            check_request_body(18, 3, &body),
            Err(GuardError::InvalidUtf8 {
                path: "client_software_name".into()
            })
        );
        assert_eq!(check_request_body(18, 3, &[3, 0xc3, 0xa9, 1, 0]), Ok(()));
    }

    #[test]
    fn kafka_guard_rejects_varints_longer_than_5_bytes() {
        let body = [0x80, 0x80, 0x80, 0x80, 0x80, 0x00, 0, 0];
        assert_eq!(
            check_request_body(3, 9, &body),
            Err(GuardError::VarintTooLong {
                path: "topics".into()
            })
        );
        // Five bytes are fine (here: count 0 spelled long, then the rest).
        let body = [0x81, 0x80, 0x80, 0x80, 0x00, 1, 0, 0, 0];
        assert_eq!(check_request_body(3, 9, &body), Ok(()));
    }

    /// Fetch v12 with no topics and the given top-level tagged-field section.
    fn fetch_v12_with_tags(tags: &[u8]) -> Vec<u8> {
        let mut body = Vec::new();
        body.extend_from_slice(&(-1i32).to_be_bytes()); // replica_id
        body.extend_from_slice(&[0, 0, 1, 0xf4, 0, 0, 0, 1, 0, 0, 4, 0]); // max_wait, min, max
        body.push(0); // isolation_level
        body.extend_from_slice(&[0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff]); // session id, epoch
        body.extend_from_slice(&[1, 1, 1]); // topics [], forgotten [], rack_id ""
        body.extend_from_slice(tags);
        body
    }

    #[test]
    fn kafka_guard_walks_tagged_fields() {
        // No tags; unknown tag 9 skipped; cluster_id (tag 0) walked; null cluster_id.
        for tags in [
            &[0][..],
            &[1, 9, 3, 0xff, 0xff, 0xff],
            &[1, 0, 3, 3, b'k', b'c'],
            &[2, 0, 1, 0, 9, 0],
        ] {
            let body = fetch_v12_with_tags(tags);
            assert_eq!(
                assert_guard_implies_decode(1, 12, &body),
                Ok(()),
                "{tags:?}"
            );
        }
        let err = |tags: &[u8]| check_request_body(1, 12, &fetch_v12_with_tags(tags));
        // Tag 1 (ReplicaState) exists from v15 only.
        assert_eq!(
            err(&[1, 1, 0]),
            Err(GuardError::TagNotValid {
                path: "_tagged_fields".into(),
                tag: 1,
                version: 12
            })
        );
        // cluster_id's value longer than its declared size.
        assert_eq!(
            err(&[1, 0, 2, 3, b'k', b'c']),
            Err(GuardError::LengthTooLong {
                path: "_tagged_fields.cluster_id".into(),
                what: "string".into(),
                len: 2,
                remaining: 1
            })
        );
        // cluster_id's value shorter than its declared size.
        assert_eq!(
            err(&[1, 0, 4, 3, b'k', b'c', 0]),
            Err(GuardError::TagSizeMismatch {
                path: "_tagged_fields.cluster_id".into(),
                tag: 0,
                declared: 4,
                used: 3
            })
        );
        // A tag's size beyond the body.
        assert_eq!(
            err(&[1, 9, 0xff, 0xff, 0xff, 0xff, 0x07, 1, 2])
                .unwrap_err()
                .to_string(),
            "_tagged_fields[tag 9]: tagged field 9 of 2147483647 bytes declared, 2 bytes left"
        );
        // More tags than bytes.
        assert_eq!(
            err(&[0xff, 0xff, 0xff, 0xff, 0x0f, 0, 0]),
            Err(GuardError::TooManyTags {
                path: "_tagged_fields".into(),
                count: u32::MAX,
                remaining: 2
            })
        );
        // Partition-level tags 0 and 1 exist from v17 and v18 only.
        let mut body = sample(1, 12, false);
        let tail = body.split_off(body.len() - 3); // forgotten [], rack_id "", tags 0
        assert_eq!(body.pop(), Some(1)); // topics []
        body.extend_from_slice(&[2, 2, b't', 2]); // 1 topic "t", 1 partition
        body.extend_from_slice(&[0; 32]); // partition .. partition_max_bytes
        body.extend_from_slice(&[1, 0, 16]); // tag 0, 16 bytes
        body.extend_from_slice(&[0; 16]);
        body.extend_from_slice(&[0]); // the topic's tags
        body.extend_from_slice(&tail);
        assert!(matches!(
            check_request_body(1, 12, &body),
            Err(GuardError::TagNotValid { ref path, tag: 0, version: 12 })
                if path == "topics[0].partitions[0]._tagged_fields"
        ));
    }

    #[test]
    fn kafka_guard_rejects_unsupported_api_and_version() {
        for (key, v) in [
            (18, 5),
            (18, -1),
            (0, 2),
            (0, 12),
            (1, 3),
            (1, 13),
            (3, 13),
            (22, 6),
            (60, 3),
            (8, 0),
            (8, 1),
            (8, 9),
            (9, 0),
            (9, 9),
            (10, 5),
            (11, 10),
            (15, 6),
            (16, 6),
            (42, 3),
            (99, 0),
            (-1, 0),
        ] {
            assert_eq!(
                check_request_body(key, v, &[0; 64]),
                Err(GuardError::Unsupported {
                    api_key: key,
                    version: v
                })
            );
        }
        assert_eq!(
            check_request_body(99, 0, &[]).unwrap_err().to_string(),
            "unsupported api/version: api key 99 version 0"
        );
    }

    /// Every version the listener serves and decodes (not the refused Produce v0-2) has a
    /// schema here; the table may cover more (the consumer-group APIs ahead of the listener).
    #[test]
    fn kafka_guard_covers_every_served_version() {
        for served in super::super::versions::SERVED {
            for v in served.served_min..=served.max {
                assert!(
                    schema(served.key as i16, v).is_some(),
                    "{:?} v{v} is served but has no guard schema",
                    served.key
                );
            }
        }
    }

    #[test]
    fn kafka_guard_group_apis_nulls_follow_nullable_versions() {
        // OffsetFetch: a null topics (all topics) is v2+ only.
        let body = [0, 0, 0xff, 0xff, 0xff, 0xff]; // group_id "", topics null
        assert_eq!(
            check_request_body(9, 1, &body),
            Err(GuardError::UnexpectedNull {
                path: "topics".into(),
                version: 1
            })
        );
        assert_eq!(assert_guard_implies_decode(9, 2, &body), Ok(()));
        // OffsetFetch v8: a group's null topics; a null group_id is refused.
        let body = [2, 1, 0, 0, 0, 0]; // 1 group: "", topics null, tags; require_stable; tags
        assert_eq!(assert_guard_implies_decode(9, 8, &body), Ok(()));
        assert!(matches!(
            check_request_body(9, 8, &[2, 0, 0, 0, 0, 0]),
            Err(GuardError::UnexpectedNull { ref path, .. }) if path == "groups[0].group_id"
        ));
        // JoinGroup v6: group_instance_id may be null, protocol_type may not.
        let mut body = vec![1]; // group_id ""
        body.extend_from_slice(&[0, 0, 0xaf, 0xc8, 0, 4, 0x93, 0xe0]); // timeouts
        body.extend_from_slice(&[1, 0, 0, 1, 0]); // member_id, instance null, type null, [], tags
        assert_eq!(
            check_request_body(11, 6, &body),
            Err(GuardError::UnexpectedNull {
                path: "protocol_type".into(),
                version: 6
            })
        );
        body[11] = 1; // protocol_type ""
        assert_eq!(assert_guard_implies_decode(11, 6, &body), Ok(()));
        // SyncGroup v5: protocol_type and protocol_name may be null; v4 has neither, so the
        // same bytes make a null assignments array there.
        let body = [1, 0, 0, 0, 7, 1, 0, 0, 0, 1, 0];
        assert_eq!(assert_guard_implies_decode(14, 5, &body), Ok(()));
        assert!(matches!(
            check_request_body(14, 4, &body),
            Err(GuardError::UnexpectedNull { ref path, version: 4 }) if path == "assignments"
        ));
        // OffsetCommit v2: committed_metadata is nullable at every version.
        let mut body = vec![0, 1, b'g']; // group_id "g"
        body.extend_from_slice(&[0xff; 4]); // generation_id_or_member_epoch -1
        body.extend_from_slice(&[0, 0]); // member_id ""
        body.extend_from_slice(&(-1i64).to_be_bytes()); // retention_time_ms
        body.extend_from_slice(&[0, 0, 0, 1, 0, 1, b't', 0, 0, 0, 1]); // 1 topic "t", 1 partition
        body.extend_from_slice(&[0; 12]); // partition_index, committed_offset
        body.extend_from_slice(&[0xff, 0xff]); // committed_metadata null
        assert_eq!(assert_guard_implies_decode(8, 2, &body), Ok(()));
    }

    #[test]
    fn kafka_guard_group_apis_bound_their_arrays() {
        // FindCoordinator v4 (KIP-699): coordinator_keys of 2^31 - 1 keys.
        let mut body = vec![0, 0x80, 0x80, 0x80, 0x80, 0x08]; // key_type, coordinator_keys
        body.resize(16, 0);
        assert_eq!(
            check_request_body(10, 4, &body),
            Err(GuardError::ArrayTooLong {
                path: "coordinator_keys".into(),
                count: i32::MAX as u64,
                min_element_bytes: 1,
                remaining: 10,
            })
        );
        // OffsetFetch v8, nested: groups[0].topics[0].partition_indexes.
        let mut body = vec![2, 2, b'g', 2, 2, b't']; // 1 group "g", 1 topic "t"
        body.extend_from_slice(&[0x80, 0x80, 0x80, 0x80, 0x08]);
        body.extend_from_slice(&[0; 16]);
        assert_eq!(
            check_request_body(9, 8, &body).unwrap_err().to_string(),
            "groups[0].topics[0].partition_indexes: array of 2147483647 elements declared, \
             4 bytes at least each, 16 bytes left"
        );
        // LeaveGroup v3: a member takes 4 bytes at least (two empty classic strings).
        let mut body = vec![0, 1, b'g'];
        body.extend_from_slice(&3i32.to_be_bytes());
        body.extend_from_slice(&[0; 11]);
        assert_eq!(
            check_request_body(13, 3, &body),
            Err(GuardError::ArrayTooLong {
                path: "members".into(),
                count: 3,
                min_element_bytes: 4,
                remaining: 11,
            })
        );
        body.push(0);
        assert_eq!(assert_guard_implies_decode(13, 3, &body), Ok(()));
        // ListGroups v0-2 have an empty body; v3+ need at least the tagged-field count.
        for v in 0..=2 {
            assert_eq!(assert_guard_implies_decode(16, v, &[]), Ok(()));
        }
        assert_eq!(
            check_request_body(16, 3, &[]),
            Err(GuardError::Truncated {
                path: "_tagged_fields".into()
            })
        );
    }

    #[test]
    fn kafka_guard_allows_trailing_bytes_like_kafka() {
        for s in samples().iter().filter(|s| s.rich) {
            let mut body = s.body.clone();
            body.extend_from_slice(&[0xff; 9]);
            assert_eq!(walk_request(s.key, s.version, &body), Ok(s.body.len()));
            assert_eq!(assert_guard_implies_decode(s.key, s.version, &body), Ok(()));
        }
    }

    #[test]
    fn kafka_guard_single_byte_mutations_agree_with_decoder() {
        for s in samples() {
            for at in 0..s.body.len() {
                for byte in [0x00, 0x01, 0x7f, 0x80, 0xfe, 0xff] {
                    let mut body = s.body.clone();
                    body[at] = byte;
                    let _ = assert_guard_implies_decode(s.key, s.version, &body);
                }
            }
        }
    }

    #[derive(Debug, Clone)]
    enum Mutation {
        Flip { at: usize, bit: u8 },
        Insert { at: usize, bytes: Vec<u8> },
        Remove { at: usize, len: usize },
        Overwrite { at: usize, bytes: Vec<u8> },
    }

    fn mutation() -> impl Strategy<Value = Mutation> {
        let huge = prop_oneof![
            Just(vec![0x7f, 0xff, 0xff, 0xff]),
            Just(vec![0x80, 0x00, 0x00, 0x00]),
            Just(vec![0xff, 0xff, 0xff, 0xff]),
            Just(vec![0x80, 0x80, 0x80, 0x80, 0x08]),
            Just(vec![0xff, 0xff, 0xff, 0xff, 0x0f]),
            Just(vec![0xff, 0xff, 0xff, 0xff, 0xff, 0x01]),
            Just(vec![0x7f, 0xff]),
            proptest::collection::vec(any::<u8>(), 1..6),
        ];
        prop_oneof![
            (any::<usize>(), 0u8..8).prop_map(|(at, bit)| Mutation::Flip { at, bit }),
            (any::<usize>(), huge.clone()).prop_map(|(at, bytes)| Mutation::Insert { at, bytes }),
            (any::<usize>(), 1usize..6).prop_map(|(at, len)| Mutation::Remove { at, len }),
            (any::<usize>(), huge).prop_map(|(at, bytes)| Mutation::Overwrite { at, bytes }),
        ]
    }

    fn apply(body: &mut Vec<u8>, mutation: &Mutation) {
        match mutation {
            Mutation::Flip { at, bit } => {
                if !body.is_empty() {
                    let at = at % body.len();
                    body[at] ^= 1 << bit;
                }
            }
            Mutation::Insert { at, bytes } => {
                let at = at % (body.len() + 1);
                body.splice(at..at, bytes.iter().copied());
            }
            Mutation::Remove { at, len } => {
                if !body.is_empty() {
                    let at = at % body.len();
                    let end = (at + len).min(body.len());
                    body.drain(at..end);
                }
            }
            Mutation::Overwrite { at, bytes } => {
                if !body.is_empty() {
                    let at = at % body.len();
                    for (i, b) in bytes.iter().enumerate() {
                        if let Some(slot) = body.get_mut(at + i) {
                            *slot = *b;
                        }
                    }
                }
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1024))]

        /// Mutated valid encodings: the guard never panics, and whatever it passes
        /// kafka-protocol decodes without error, ending where the guard's walk ended.
        #[test]
        fn kafka_guard_mutations_never_panic_and_agree_with_decoder(
            which in any::<prop::sample::Index>(),
            mutations in proptest::collection::vec(mutation(), 1..4),
        ) {
            let s = which.get(samples());
            let mut body = s.body.clone();
            for m in &mutations {
                apply(&mut body, m);
            }
            let _ = assert_guard_implies_decode(s.key, s.version, &body);
        }
    }
}
