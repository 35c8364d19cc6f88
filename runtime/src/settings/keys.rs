//! The declaration: every configuration key of `keel-controller` and `keel-broker`.

use super::{DefaultValue, IntType, Kind, Setting, TimeUnit, UsedBy};

/// A duration setting in ms with a default (the common case).
pub(super) const fn ms(
    name: &'static str,
    kafka: &'static str,
    default: i128,
    doc: &'static str,
    used_by: UsedBy,
) -> Setting {
    Setting {
        name,
        kafka,
        kind: Kind::Duration(TimeUnit::Ms),
        default: DefaultValue::Int(default),
        doc,
        used_by,
    }
}

/// An integer kind.
pub(super) const fn int(ty: IntType, min: i128, max: i128, unit: &'static str) -> Kind {
    Kind::Int { ty, min, max, unit }
}

/// Every configuration key of both binaries. README's configuration tables are rendered from
/// this table ([`super::markdown_table`]) and a test keeps them equal.
pub const SETTINGS: &[Setting] = &[
    Setting {
        name: "node_id",
        kafka: "node.id",
        kind: int(IntType::I32, 0, i32::MAX as i128, ""),
        default: DefaultValue::Required,
        doc: "this node's id; a controller's must be one of the voters",
        used_by: UsedBy::Both,
    },
    Setting {
        name: "controller_quorum_voters",
        kafka: "controller.quorum.voters",
        kind: Kind::Voters,
        default: DefaultValue::Unset("set this or `controller_quorum_bootstrap_servers`"),
        doc: "`1@host:port,2@host:port,3@host:port`: the static voters and how to reach each",
        used_by: UsedBy::Both,
    },
    Setting {
        name: "controller_quorum_bootstrap_servers",
        kafka: "controller.quorum.bootstrap.servers",
        kind: Kind::HostPortList,
        default: DefaultValue::Unset("set this or `controller_quorum_voters`"),
        doc: "`host:port,host:port`: controllers to ask for the quorum, for a dynamic quorum \
              (KIP-853) whose voters live in the metadata log. A broker asks them for the \
              voters (DescribeQuorum, following NOT_CONTROLLER hints) at start and then reaches \
              the controllers as with `controller_quorum_voters`; a controller with it must have \
              a formatted `metadata_log_dir` (`keel-controller format`) and `listeners` and \
              `advertised_listeners`, and learns its peers from the membership in its log. \
              Exactly one of the two keys may be set",
        used_by: UsedBy::Both,
    },
    Setting {
        name: "listeners",
        kafka: "listeners",
        kind: Kind::Listeners,
        default: DefaultValue::Derived {
            controller: "`0.0.0.0:<own voter port>`",
            broker: "`0.0.0.0:9092`",
        },
        doc: "Addresses to bind: one `ip:port` (the gRPC listener), or Kafka's form \
              `GRPC://ip:port,PLAINTEXT://ip:port` (brokers: `PLAINTEXT` is the Kafka-protocol \
              listener, `SSL` instead the same over TLS with the `tls_*` files, \
              `SASL_PLAINTEXT` / `SASL_SSL` the same with SASL/SCRAM first; one Kafka listener \
              per broker; an empty host binds every interface). The controller serves gRPC only",
        used_by: UsedBy::Both,
    },
    Setting {
        name: "advertised_listeners",
        kafka: "advertised.listeners",
        kind: Kind::AdvertisedListeners,
        default: DefaultValue::Derived {
            controller: "own voter address",
            broker: "each listener's bind address (required for one that binds every interface)",
        },
        doc: "Addresses given to clients (and, for brokers, to other brokers) to reach this \
              node: `host:port` or `NAME://host:port,...` per listener of `listeners`",
        used_by: UsedBy::Both,
    },
    Setting {
        name: "metadata_log_dir",
        kafka: "metadata.log.dir",
        kind: Kind::Text,
        default: DefaultValue::Required,
        doc: "Raft log segments, snapshot files and `meta.properties`",
        used_by: UsedBy::Controller,
    },
    Setting {
        name: "log_dirs",
        kafka: "log.dirs",
        kind: Kind::Text,
        default: DefaultValue::Required,
        doc: "the data directory: every partition, the local metadata snapshot and \
              `meta.properties`; exactly one (several, Kafka's JBOD, are refused at start); \
              locked while the broker runs (see \"Run a controller quorum\")",
        used_by: UsedBy::Broker,
    },
    Setting {
        name: "auto_create_topics_enable",
        kafka: "auto.create.topics.enable",
        kind: Kind::Bool,
        default: DefaultValue::Bool(false),
        doc: "a Kafka client's Metadata request for an unknown topic creates it with the \
              controllers' defaults (`num_partitions`, `default_replication_factor`) when the \
              client allows it; off by default (Kafka's default is on)",
        used_by: UsedBy::Broker,
    },
    Setting {
        name: "rack",
        kafka: "broker.rack",
        kind: Kind::Text,
        default: DefaultValue::Unset("none"),
        doc: "rack for rack-aware placement",
        used_by: UsedBy::Broker,
    },
    ms(
        "broker_heartbeat_interval_ms",
        "broker.heartbeat.interval.ms",
        2000,
        "interval of broker heartbeats; the controllers check sessions this often",
        UsedBy::Both,
    ),
    ms(
        "broker_session_timeout_ms",
        "broker.session.timeout.ms",
        9000,
        "the controllers fence a broker without heartbeat this long; a broker bounds its \
         controlled shutdown by it",
        UsedBy::Both,
    ),
    ms(
        "election_timeout_min_ms",
        "controller.quorum.election.timeout.ms",
        300,
        "lower end of the Raft election timeout range",
        UsedBy::Controller,
    ),
    ms(
        "election_timeout_max_ms",
        "controller.quorum.election.timeout.ms",
        600,
        "upper end of the Raft election timeout range; failover takes about this + a random \
         timeout in the range (~1.2 s)",
        UsedBy::Controller,
    ),
    ms(
        "raft_heartbeat_interval_ms",
        "",
        100,
        "Raft leader heartbeat interval",
        UsedBy::Controller,
    ),
    Setting {
        name: "metadata_snapshot_max_entries",
        kafka: "metadata.log.max.record.bytes.between.snapshots",
        kind: int(IntType::U64, 1, u64::MAX as i128, "entries"),
        default: DefaultValue::Int(20_000),
        doc: "snapshot after this many entries (counted in entries, not bytes)",
        used_by: UsedBy::Controller,
    },
    Setting {
        name: "metadata_log_engine",
        kafka: "",
        kind: Kind::Choice(&["segments", "sled"]),
        default: DefaultValue::Text("segments"),
        doc: "where the Raft log and vote are stored: `segments` (Keel's own segment files) or \
              `sled` (a sled 0.34 database); each refuses a directory the other wrote (no \
              converter). The README's controller bench compares them",
        used_by: UsedBy::Controller,
    },
    Setting {
        name: "metadata_log_segment_bytes",
        kafka: "metadata.log.segment.bytes",
        kind: int(IntType::U64, 4096, 1 << 30, "bytes"),
        default: DefaultValue::Int(16 << 20),
        doc: "Raft log segment size (`segments` engine); whole segments below the last \
              snapshot are deleted",
        used_by: UsedBy::Controller,
    },
    ms(
        "metadata_max_idle_interval_ms",
        "metadata.max.idle.interval.ms",
        500,
        "NoOpRecord interval of the active controller",
        UsedBy::Controller,
    ),
    Setting {
        name: "auto_leader_rebalance_enable",
        kafka: "auto.leader.rebalance.enable",
        kind: Kind::Bool,
        default: DefaultValue::Bool(true),
        doc: "move leadership back to each partition's preferred (first) replica once it is in \
              the ISR and eligible again",
        used_by: UsedBy::Controller,
    },
    Setting {
        name: "leader_imbalance_check_interval_seconds",
        kafka: "leader.imbalance.check.interval.seconds",
        kind: Kind::Duration(TimeUnit::Seconds),
        default: DefaultValue::Int(300),
        doc: "how often the active controller runs that rebalance (at most 1,000 elections per \
              run; the first run is one interval after it becomes active)",
        used_by: UsedBy::Controller,
    },
    Setting {
        name: "num_partitions",
        kafka: "num.partitions",
        kind: int(IntType::I32, 1, 9982, "partitions"),
        default: DefaultValue::Int(1),
        doc: "partitions of a topic created without a count (`keelctl topic create` without \
              `--partitions`, or -1; a topic's records must fit in one 10,000-record \
              operation)",
        used_by: UsedBy::Controller,
    },
    Setting {
        name: "default_replication_factor",
        kafka: "default.replication.factor",
        kind: int(IntType::I32, 1, i16::MAX as i128, "replicas"),
        default: DefaultValue::Int(1),
        doc: "replication factor of a topic created without one (or -1); more than the unfenced \
              brokers fails that creation with INVALID_REPLICATION_FACTOR",
        used_by: UsedBy::Controller,
    },
    ms(
        "replica_lag_time_max_ms",
        "replica.lag.time.max.ms",
        30_000,
        "a follower not caught up this long leaves the ISR (checked every half of it)",
        UsedBy::Broker,
    ),
    Setting {
        name: "replica_lag_max_messages",
        kafka: "",
        kind: int(IntType::U64, 0, u64::MAX as i128, "offsets"),
        default: DefaultValue::Unset("off"),
        doc: "optional offset-lag bound of ISR membership, for deterministic experiments \
              (Kafka's `replica.lag.max.messages`, removed in 0.9)",
        used_by: UsedBy::Broker,
    },
    ms(
        "replica_fetch_wait_max_ms",
        "replica.fetch.wait.max.ms",
        500,
        "follower fetch long-poll wait; below `replica_lag_time_max_ms`",
        UsedBy::Broker,
    ),
    Setting {
        name: "max_incremental_fetch_session_cache_slots",
        kafka: "max.incremental.fetch.session.cache.slots",
        kind: int(IntType::U32, 0, 100_000, "sessions"),
        default: DefaultValue::Int(1_000),
        doc: "incremental fetch sessions (KIP-227) a leader keeps for the brokers following it \
              (at most 4 per follower): a session's fetch lists and answers only the \
              partitions that changed; 0 = none, every follower fetch lists and answers all \
              its partitions",
        used_by: UsedBy::Broker,
    },
    Setting {
        name: "offsets_topic_num_partitions",
        kafka: "offsets.topic.num.partitions",
        kind: int(IntType::I32, 1, 10_000, "partitions"),
        default: DefaultValue::Int(50),
        doc: "partitions of `__consumer_offsets` when a broker creates it (on the first \
              FindCoordinator); a group's coordinator is the leader of partition \
              hash(group) % partitions; the existing topic's count wins once it exists",
        used_by: UsedBy::Broker,
    },
    Setting {
        name: "offsets_topic_replication_factor",
        kafka: "offsets.topic.replication.factor",
        kind: int(IntType::I32, 1, i16::MAX as i128, "replicas"),
        default: DefaultValue::Int(3),
        doc: "replication factor of `__consumer_offsets` (its `min.insync.replicas` is \
              min(2, this)); creation fails, and groups wait, until that many brokers are \
              registered",
        used_by: UsedBy::Broker,
    },
    Setting {
        name: "offsets_topic_segment_bytes",
        kafka: "offsets.topic.segment.bytes",
        kind: int(IntType::U64, 1024, i32::MAX as i128 - 1, "bytes"),
        default: DefaultValue::Int(104_857_600),
        doc: "`segment.bytes` of `__consumer_offsets` when a broker creates it; the log \
              cleaner compacts closed segments only, so smaller segments keep the topic \
              smaller under many commits",
        used_by: UsedBy::Broker,
    },
    Setting {
        name: "offsets_retention_minutes",
        kafka: "offsets.retention.minutes",
        kind: int(IntType::I32, 1, i32::MAX as i128, "minutes"),
        default: DefaultValue::Int(10_080),
        doc: "committed offsets of a group without members are deleted this long after it \
              became empty (7 days; a group that only commits: after each offset's commit)",
        used_by: UsedBy::Broker,
    },
    ms(
        "offsets_retention_check_interval_ms",
        "offsets.retention.check.interval.ms",
        600_000,
        "how often expired committed offsets are looked for",
        UsedBy::Broker,
    ),
    Setting {
        name: "group_initial_rebalance_delay_ms",
        kafka: "group.initial.rebalance.delay.ms",
        kind: int(IntType::I32, 0, i32::MAX as i128, "ms"),
        default: DefaultValue::Int(3000),
        doc: "how long the first rebalance of an empty group waits for more members \
              (extended by the same while members keep joining, up to the rebalance timeout)",
        used_by: UsedBy::Broker,
    },
    Setting {
        name: "group_min_session_timeout_ms",
        kafka: "group.min.session.timeout.ms",
        kind: int(IntType::I32, 1, i32::MAX as i128, "ms"),
        default: DefaultValue::Int(6000),
        doc: "shortest session timeout a JoinGroup may ask for (else INVALID_SESSION_TIMEOUT)",
        used_by: UsedBy::Broker,
    },
    Setting {
        name: "group_max_session_timeout_ms",
        kafka: "group.max.session.timeout.ms",
        kind: int(IntType::I32, 1, i32::MAX as i128, "ms"),
        default: DefaultValue::Int(1_800_000),
        doc: "longest session timeout a JoinGroup may ask for (else INVALID_SESSION_TIMEOUT)",
        used_by: UsedBy::Broker,
    },
    Setting {
        name: "group_max_size",
        kafka: "group.max.size",
        kind: int(IntType::I32, 1, i32::MAX as i128, "members"),
        default: DefaultValue::Int(1000),
        doc: "most members of one group (else GROUP_MAX_SIZE_REACHED); Kafka's default is \
              unbounded",
        used_by: UsedBy::Broker,
    },
    Setting {
        name: "offset_metadata_max_bytes",
        kafka: "offset.metadata.max.bytes",
        kind: int(IntType::I32, 0, 1 << 20, "bytes"),
        default: DefaultValue::Int(4096),
        doc: "longest metadata string of a committed offset (else OFFSET_METADATA_TOO_LARGE)",
        used_by: UsedBy::Broker,
    },
    Setting {
        name: "min_insync_replicas",
        kafka: "min.insync.replicas",
        kind: int(IntType::U32, 1, u32::MAX as i128, "replicas"),
        default: DefaultValue::Int(1),
        doc: "cluster default; the topic config overrides it",
        used_by: UsedBy::Broker,
    },
    Setting {
        name: "log_segment_bytes",
        kafka: "log.segment.bytes",
        kind: int(IntType::U64, 1024, i32::MAX as i128 - 1, "bytes"),
        default: DefaultValue::Int(1 << 30),
        doc: "segment size; topic `segment.bytes` overrides it",
        used_by: UsedBy::Broker,
    },
    Setting {
        name: "log_retention_ms",
        kafka: "log.retention.ms",
        kind: int(IntType::I64, -1, i64::MAX as i128, "ms"),
        default: DefaultValue::Int(7 * 86_400_000),
        doc: "how long data is kept; -1 keeps forever; topic `retention.ms` overrides it",
        used_by: UsedBy::Broker,
    },
    Setting {
        name: "log_retention_bytes",
        kafka: "log.retention.bytes",
        kind: int(IntType::I64, -1, i64::MAX as i128, "bytes"),
        default: DefaultValue::Int(-1),
        doc: "per-partition size bound; -1 = unbounded; topic `retention.bytes` overrides it",
        used_by: UsedBy::Broker,
    },
    Setting {
        name: "compression_type",
        kafka: "compression.type",
        kind: Kind::Choice(&["producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"]),
        default: DefaultValue::Text("producer"),
        doc: "the codec leaders store batches with: `producer` keeps each batch's codec, any \
              other recompresses a batch sent with another (Kafka's `LogValidator`); the \
              dynamic cluster default and topic `compression.type` override it",
        used_by: UsedBy::Broker,
    },
    Setting {
        name: "log_message_timestamp_type",
        kafka: "log.message.timestamp.type",
        kind: Kind::Choice(&["CreateTime", "LogAppendTime"]),
        default: DefaultValue::Text("CreateTime"),
        doc: "`CreateTime` keeps the producers' record timestamps, `LogAppendTime` stamps each \
              batch with the leader's clock; the dynamic cluster default and topic \
              `message.timestamp.type` override it",
        used_by: UsedBy::Broker,
    },
    Setting {
        name: "log_flush_interval_messages",
        kafka: "log.flush.interval.messages",
        kind: int(IntType::U64, 1, u64::MAX as i128, "records"),
        default: DefaultValue::Unset("never force"),
        doc: "fdatasync after this many records; 1 = before every acknowledgement",
        used_by: UsedBy::Broker,
    },
    Setting {
        name: "log_flush_interval_ms",
        kafka: "log.flush.interval.ms",
        kind: Kind::Duration(TimeUnit::Ms),
        default: DefaultValue::Unset("never"),
        doc: "fdatasync a partition log whose last flush is this old (the periodic flusher, \
              every 10 ms, outside the partition lock so produce and fetch go on; \
              `keel_broker_log_flush_duration_seconds`). Unset or not, a roll flushes the log \
              at the flusher's next pass (Kafka flushes up to the new segment after every \
              roll), so the recovery point follows the rolls and a restart after a crash \
              CRC-scans about one segment per partition; a rolled segment's index files are \
              fsynced by that flush, not on the append path",
        used_by: UsedBy::Broker,
    },
    Setting {
        name: "log_drop_cache_behind_bytes",
        kafka: "",
        kind: int(IntType::U64, 0, u64::MAX as i128, "bytes"),
        default: DefaultValue::Int(32 << 20),
        doc: "keep each partition's newest this-many bytes in the page cache and drop older \
              written data from it as the log grows (its write-back starts then too), and keep \
              up to this many bytes allocated ahead of the active segment's end; at least \
              1 MiB; 0 keeps every written page and allocates nothing ahead, as Kafka does \
              (HDFS: `dfs.datanode.drop.cache.behind.writes`). See below",
        used_by: UsedBy::Broker,
    },
    ms(
        "log_cleaner_backoff_ms",
        "log.cleaner.backoff.ms",
        15_000,
        "how often the log cleaner looks for a compacted partition (`cleanup.policy=compact`) \
         whose dirty ratio or lags call for a pass; one pass at a time, \
         `keel_broker_log_cleaner_*` metrics",
        UsedBy::Broker,
    ),
    Setting {
        name: "num_recovery_threads_per_data_dir",
        kafka: "num.recovery.threads.per.data.dir",
        kind: int(IntType::U32, 1, 256, "threads"),
        default: DefaultValue::Int(2),
        doc: "threads that open (and, after an unclean stop, recover) the partition logs at \
              start; more shortens the start of a broker with many partitions",
        used_by: UsedBy::Broker,
    },
    Setting {
        name: "log_cleaner_dedupe_buffer_size",
        kafka: "log.cleaner.dedupe.buffer.size",
        kind: int(IntType::U64, 1024, u64::MAX as i128, "bytes"),
        default: DefaultValue::Int(128 << 20),
        doc: "memory of the log cleaner's offset map (24 bytes per key, 90% full at most); a \
              pass whose dirty section has more keys cleans up to where the map filled",
        used_by: UsedBy::Broker,
    },
    ms(
        "metadata_snapshot_interval_ms",
        "",
        60_000,
        "how often the local metadata snapshot is rewritten (when it changed)",
        UsedBy::Broker,
    ),
    Setting {
        name: "metrics_listener",
        kafka: "",
        kind: Kind::Address,
        default: DefaultValue::Unset("off"),
        doc: "`ip:port` of the HTTP listener serving `/metrics`, `/health/live`, \
              `/health/ready` (see \"Metrics and health\"; Kafka exposes JMX instead); a taken \
              port stops the start with one line naming `metrics_listener`",
        used_by: UsedBy::Both,
    },
    Setting {
        name: "tls_cert_file",
        kafka: "ssl.keystore.certificate.chain",
        kind: Kind::Text,
        default: DefaultValue::Unset("off: plaintext"),
        doc: "PEM certificate chain (leaf first) of this node. With `tls_key_file` and \
              `tls_ca_file` (all three or none) the gRPC listener serves TLS only and every \
              connection this node opens (Raft, broker to controller, replication) uses TLS \
              with this certificate as its client certificate; re-read on SIGHUP or when a \
              file changes, for new connections",
        used_by: UsedBy::Both,
    },
    Setting {
        name: "tls_key_file",
        kafka: "ssl.keystore.key",
        kind: Kind::Text,
        default: DefaultValue::Unset("off"),
        doc: "PEM private key (PKCS#8, PKCS#1 or SEC1) of `tls_cert_file`",
        used_by: UsedBy::Both,
    },
    Setting {
        name: "tls_ca_file",
        kafka: "ssl.truststore.certificates",
        kind: Kind::Text,
        default: DefaultValue::Unset("off"),
        doc: "PEM CA certificates that peers' and clients' certificates must chain to; a \
              server's certificate must also name the host it is reached by (DNS or IP SAN)",
        used_by: UsedBy::Both,
    },
    Setting {
        name: "ssl_client_auth",
        kafka: "ssl.client.auth",
        kind: Kind::Choice(&["none", "requested", "required"]),
        default: DefaultValue::Text("none"),
        doc: "whether the TLS listener asks clients for a certificate chaining to \
              `tls_ca_file`: `required` refuses a client without one, `requested` accepts it, \
              `none` does not ask (Kafka's default). Nodes always present theirs",
        used_by: UsedBy::Both,
    },
    Setting {
        name: "ssl_principal_mapping_rules",
        kafka: "ssl.principal.mapping.rules",
        kind: Kind::Text,
        default: DefaultValue::Text("DEFAULT"),
        doc: "how a client certificate's subject DN (RFC 2253, `CN=broker-1,O=Keel`) becomes \
              the principal `User:<name>`: comma-separated rules tried in order, \
              `RULE:pattern/replacement/[LU]` (the regex must match the whole DN; `$1` is its \
              first group; `L`/`U` lower- or upper-case) or `DEFAULT` (the DN itself). A \
              client without a certificate is `User:ANONYMOUS`",
        used_by: UsedBy::Both,
    },
    Setting {
        name: "authorizer",
        kafka: "authorizer.class.name",
        kind: Kind::Choice(&["none", "standard"]),
        default: DefaultValue::Text("none"),
        doc: "`standard` checks every request against the ACLs of the metadata log (Kafka's \
              StandardAuthorizer; `keelctl acl`), `super_users` and \
              `allow_everyone_if_no_acl_found`, and checks that a node's principal is the one \
              `node_principal_format` gives for the id it claims; `none` allows everything",
        used_by: UsedBy::Both,
    },
    Setting {
        name: "super_users",
        kafka: "super.users",
        kind: Kind::Text,
        default: DefaultValue::Unset("none"),
        doc: "principals allowed every operation, separated by `;` \
              (`User:admin;User:broker-1`); nodes need ClusterAction, so list them here or \
              grant it with an ACL",
        used_by: UsedBy::Both,
    },
    Setting {
        name: "allow_everyone_if_no_acl_found",
        kafka: "allow.everyone.if.no.acl.found",
        kind: Kind::Bool,
        default: DefaultValue::Bool(false),
        doc: "with `authorizer = \"standard\"`: allow an operation on a resource that no ACL \
              names (off: only ACLs and super users allow)",
        used_by: UsedBy::Both,
    },
    Setting {
        name: "node_principal_format",
        kafka: "",
        kind: Kind::Text,
        default: DefaultValue::Text("User:{role}-{id}"),
        doc: "with `authorizer = \"standard\"`: the principal a node must authenticate as to \
              act as broker or controller `{id}` (`{role}` is `broker` or `controller`), so a \
              broker's certificate cannot register, heartbeat or replicate as another broker",
        used_by: UsedBy::Both,
    },
    Setting {
        name: "log_format",
        kafka: "",
        kind: Kind::Choice(&["text", "json"]),
        default: DefaultValue::Text("text"),
        doc: "`text` or `json` (one JSON object per line); the filter is the `KEEL_LOG` \
              environment variable (`EnvFilter` syntax; default `info,openraft=off` for the \
              controller, whose own lines say when a peer stops and starts answering, `info` \
              for the broker; an invalid filter stops the start); no ANSI \
              colours unless stdout is a terminal",
        used_by: UsedBy::Both,
    },
];
