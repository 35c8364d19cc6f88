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
/// deepest schema here, CreateTopics `topics[].assignments[].broker_ids[]`, reaches 2; a
/// tagged struct adds 1.
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
/// (64-112 bytes in memory, 1-3 bytes at least on the wire in flexible versions) is about
/// 36 bytes of memory per body byte at worst (Metadata v9+ topics of empty names; strings
/// are slices of the input when decoding from `bytes::Bytes`, copies from `&[u8]`). The
/// frame size limit of the listener bounds the rest. Bytes after the last field are
/// allowed (Kafka ignores them). Supported api keys and versions: [`APIS`]; any other is
/// [`GuardError::Unsupported`]. Runs in time linear in `body.len()`.
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

// FindCoordinatorRequest.json (only v0 is covered: see versions::SERVED).
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

/// Every request schema the guard covers: the api keys and version ranges Keel's Kafka
/// listener serves (issue #21). Field names are `kafka-protocol`'s (snake case of Kafka's).
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
        range(0, 0),
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
    use kafka_protocol::messages::create_topics_request::{
        CreatableReplicaAssignment, CreatableTopic, CreatableTopicConfig,
    };
    use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
    use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ForgottenTopic};
    use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
    use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
    use kafka_protocol::messages::offset_for_leader_epoch_request::{
        OffsetForLeaderPartition, OffsetForLeaderTopic,
    };
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_protocol::messages::{
        ApiKey, ApiVersionsRequest, BrokerId, CreateTopicsRequest, DeleteTopicsRequest,
        DescribeClusterRequest, DescribeConfigsRequest, FetchRequest, FindCoordinatorRequest,
        InitProducerIdRequest, ListOffsetsRequest, MetadataRequest, OffsetForLeaderEpochRequest,
        ProduceRequest, ProducerId, TopicName, TransactionalId,
    };
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

    fn find_coordinator(_v: i16, rich: bool) -> FindCoordinatorRequest {
        FindCoordinatorRequest::default().with_key(s(if rich { "orders-app" } else { "" }))
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
    fn kafka_guard_table_covers_issue_21_ranges_within_the_crate() {
        let expected: &[(i16, i16, i16)] = &[
            (18, 0, 4),
            (3, 0, 12),
            (0, 3, 11),
            (1, 4, 12),
            (2, 1, 10),
            (23, 2, 4),
            (22, 0, 5),
            (10, 0, 0),
            (19, 2, 7),
            (20, 1, 6),
            (32, 1, 4),
            (60, 0, 2),
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
        // 75 api versions, rich and sparse.
        assert_eq!(count, 2 * 75);
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
