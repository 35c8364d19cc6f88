//! ACLs and the authorizer (#23): Kafka's `StandardAuthorizer` (KIP-801) over the ACLs of a
//! [`MetadataImage`](crate::MetadataImage).
//!
//! ACLs are metadata records (`AccessControlEntryRecord` adds one under a UUID,
//! `RemoveAccessControlEntryRecord` removes it), so every controller and broker authorizes from
//! the same replicated set. This module owns:
//! - [`AclBinding`]: one validated ACL (resource pattern + principal, host, operation,
//!   permission), parsed from and written to its record;
//! - [`AclFilter`]: the filters of DescribeAcls / DeleteAcls (Kafka's `AclBindingFilter`);
//! - [`AclsImage`]: the ACLs of an image, indexed by resource for the authorizer;
//! - [`authorize`]: the decision, pure (no I/O, no clock).
//!
//! Rules (Kafka's `StandardAuthorizerData.authorize`):
//! 1. a super user (`super_users`) is allowed everything;
//! 2. the ACLs that apply are those of the action's resource type whose pattern matches the
//!    resource name (LITERAL equal, LITERAL `*`, or PREFIXED with a prefix of the name), whose
//!    principal is the caller's or `User:*`, and whose host is the caller's IP or `*`;
//! 3. a DENY of the operation (or of ALL) wins over everything;
//! 4. an ALLOW of the operation, of ALL, or of an operation implying it (READ, WRITE, DELETE,
//!    ALTER imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS) allows;
//! 5. otherwise the action is denied, unless no ACL at all names the resource and
//!    `allow_everyone_if_no_acl_found` is set.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;

use keel_proto::metadata::{
    AccessControlEntryRecord, AclOperation, AclPatternType, AclPermissionType, AclResourceType,
};
use uuid::Uuid;

/// The one resource name of the CLUSTER resource (Kafka: `kafka-cluster`).
pub const CLUSTER_RESOURCE_NAME: &str = "kafka-cluster";
/// A LITERAL resource name matching every resource of its type, and the host matching every
/// host.
pub const WILDCARD: &str = "*";
/// The principal matching every principal.
pub const WILDCARD_PRINCIPAL: &str = "User:*";
/// The principal of a connection that did not authenticate (Kafka: `User:ANONYMOUS`).
pub const ANONYMOUS: &str = "User:ANONYMOUS";
/// Longest resource name, principal or host of an ACL, bytes.
pub const MAX_ACL_FIELD_BYTES: usize = 1024;
/// Most ACLs a cluster holds (CreateAcls beyond it is refused; Kafka has no bound).
pub const MAX_ACLS: usize = 100_000;

/// A resource type an ACL can protect (Kafka's `ResourceType`, without ANY/UNKNOWN).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ResourceType {
    /// A topic.
    Topic,
    /// A consumer group.
    Group,
    /// The cluster (`kafka-cluster`).
    Cluster,
    /// A transactional id.
    TransactionalId,
}

/// How an ACL's resource name matches (Kafka's `PatternType` LITERAL / PREFIXED).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PatternType {
    /// The name, or `*` for every resource of the type.
    Literal,
    /// A prefix of the names.
    Prefixed,
}

/// An operation (Kafka's `AclOperation`, without ANY/UNKNOWN).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[allow(missing_docs)]
pub enum Operation {
    All,
    Read,
    Write,
    Create,
    Delete,
    Alter,
    Describe,
    ClusterAction,
    DescribeConfigs,
    AlterConfigs,
    IdempotentWrite,
}

/// ALLOW or DENY.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Permission {
    /// Denies (wins over any ALLOW).
    Deny,
    /// Allows.
    Allow,
}

macro_rules! proto_enum {
    ($rust:ident, $proto:ident, [$($v:ident = $p:ident, $name:literal;)*]) => {
        impl $rust {
            /// Every value.
            pub const ALL_VALUES: &'static [$rust] = &[$($rust::$v),*];

            /// The value of the record's enum field; `None` for UNKNOWN, ANY, MATCH or a code
            /// this build does not know.
            pub fn from_proto(v: i32) -> Option<$rust> {
                match $proto::try_from(v).ok()? {
                    $($proto::$p => Some($rust::$v),)*
                    #[allow(unreachable_patterns)]
                    _ => None,
                }
            }

            /// The record's enum field value.
            pub fn to_proto(self) -> $proto {
                match self {
                    $($rust::$v => $proto::$p,)*
                }
            }

            /// Kafka's upper-case name, e.g. `CLUSTER_ACTION`.
            pub fn name(self) -> &'static str {
                match self {
                    $($rust::$v => $name,)*
                }
            }

            /// Parses Kafka's name in any case, with `-` or `_` between words
            /// (`cluster-action`, `ClusterAction`, `CLUSTER_ACTION`).
            pub fn parse(s: &str) -> Option<$rust> {
                let norm: String = s.chars().filter(|c| *c != '_' && *c != '-').collect::<String>().to_ascii_uppercase();
                Self::ALL_VALUES.iter().copied().find(|v| v.name().replace('_', "") == norm)
            }
        }

        impl std::fmt::Display for $rust {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

proto_enum!(ResourceType, AclResourceType, [
    Topic = Topic, "TOPIC";
    Group = Group, "GROUP";
    Cluster = Cluster, "CLUSTER";
    TransactionalId = TransactionalId, "TRANSACTIONAL_ID";
]);
proto_enum!(PatternType, AclPatternType, [
    Literal = Literal, "LITERAL";
    Prefixed = Prefixed, "PREFIXED";
]);
proto_enum!(Operation, AclOperation, [
    All = All, "ALL";
    Read = Read, "READ";
    Write = Write, "WRITE";
    Create = Create, "CREATE";
    Delete = Delete, "DELETE";
    Alter = Alter, "ALTER";
    Describe = Describe, "DESCRIBE";
    ClusterAction = ClusterAction, "CLUSTER_ACTION";
    DescribeConfigs = DescribeConfigs, "DESCRIBE_CONFIGS";
    AlterConfigs = AlterConfigs, "ALTER_CONFIGS";
    IdempotentWrite = IdempotentWrite, "IDEMPOTENT_WRITE";
]);
proto_enum!(Permission, AclPermissionType, [
    Deny = Deny, "DENY";
    Allow = Allow, "ALLOW";
]);

impl ResourceType {
    /// The operations an ACL on this resource type may name (Kafka's `AclEntry
    /// .supportedOperations`, which `kafka-acls` enforces).
    pub fn operations(self) -> &'static [Operation] {
        use Operation::*;
        match self {
            ResourceType::Topic => &[
                All,
                Read,
                Write,
                Create,
                Describe,
                Delete,
                Alter,
                DescribeConfigs,
                AlterConfigs,
            ],
            ResourceType::Group => &[All, Read, Describe, Delete],
            ResourceType::Cluster => &[
                All,
                Create,
                ClusterAction,
                DescribeConfigs,
                AlterConfigs,
                IdempotentWrite,
                Alter,
                Describe,
            ],
            ResourceType::TransactionalId => &[All, Describe, Write],
        }
    }
}

impl Operation {
    /// Whether an ALLOW of `self` allows `wanted` (equal, ALL, or an implication).
    fn allows(self, wanted: Operation) -> bool {
        use Operation::*;
        self == wanted
            || self == All
            || (wanted == Describe && matches!(self, Read | Write | Delete | Alter))
            || (wanted == DescribeConfigs && self == AlterConfigs)
    }
}

/// Why an ACL or a filter was refused (CreateAcls / DescribeAcls / DeleteAcls answer
/// INVALID_REQUEST with this text).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct AclError(pub String);

fn err<T>(msg: impl Into<String>) -> Result<T, AclError> {
    Err(AclError(msg.into()))
}

/// One ACL binding, validated. Invariants (checked by [`AclBinding::new`]): the resource name,
/// principal and host are non-empty and at most [`MAX_ACL_FIELD_BYTES`]; the principal is
/// `User:<name>`; the host is `*` or an IP address in canonical form; a CLUSTER binding names
/// `kafka-cluster` literally; `*` is LITERAL; the operation is one the resource type supports.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AclBinding {
    /// The resource type.
    pub resource_type: ResourceType,
    /// The resource name or prefix.
    pub resource_name: String,
    /// LITERAL or PREFIXED.
    pub pattern_type: PatternType,
    /// `User:<name>` or `User:*`.
    pub principal: String,
    /// An IP address or `*`.
    pub host: String,
    /// The operation.
    pub operation: Operation,
    /// ALLOW or DENY.
    pub permission: Permission,
}

/// Checks a principal: `User:<name>`, name 1.. bytes, whole at most [`MAX_ACL_FIELD_BYTES`].
pub fn validate_principal(p: &str) -> Result<(), AclError> {
    if p.len() > MAX_ACL_FIELD_BYTES {
        return err(format!(
            "principal is {} bytes; at most {MAX_ACL_FIELD_BYTES}",
            p.len()
        ));
    }
    match p.split_once(':') {
        Some(("User", name)) if !name.is_empty() => Ok(()),
        Some((ty, _)) if ty != "User" => err(format!(
            "principal {:?} has type {:?}; only User principals exist (User:<name>)",
            clip(p),
            clip(ty)
        )),
        _ => err(format!("principal {:?} is not User:<name>", clip(p))),
    }
}

/// The canonical form of an ACL host: `*`, or the IP address as Rust prints it (an
/// IPv4-mapped IPv6 address becomes IPv4).
pub fn canonical_host(h: &str) -> Result<String, AclError> {
    if h == WILDCARD {
        return Ok(h.to_string());
    }
    match h.parse::<IpAddr>() {
        Ok(ip) => Ok(ip.to_canonical().to_string()),
        Err(_) => err(format!(
            "host {:?} is not an IP address or * (ACLs match the client's IP address)",
            clip(h)
        )),
    }
}

fn clip(s: &str) -> &str {
    let mut end = s.len().min(64);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

impl AclBinding {
    /// A validated binding (see the type's invariants); the host is canonicalised.
    pub fn new(
        resource_type: ResourceType,
        resource_name: &str,
        pattern_type: PatternType,
        principal: &str,
        host: &str,
        operation: Operation,
        permission: Permission,
    ) -> Result<AclBinding, AclError> {
        if resource_name.is_empty() {
            return err("resource name must not be empty");
        }
        if resource_name.len() > MAX_ACL_FIELD_BYTES {
            return err(format!(
                "resource name is {} bytes; at most {MAX_ACL_FIELD_BYTES}",
                resource_name.len()
            ));
        }
        if resource_type == ResourceType::Cluster
            && (resource_name != CLUSTER_RESOURCE_NAME || pattern_type != PatternType::Literal)
        {
            return err(format!(
                "the CLUSTER resource is named {CLUSTER_RESOURCE_NAME} (LITERAL), not {:?} ({pattern_type})",
                clip(resource_name)
            ));
        }
        if resource_name == WILDCARD && pattern_type == PatternType::Prefixed {
            return err("* is a LITERAL resource name (every resource); PREFIXED * is refused");
        }
        validate_principal(principal)?;
        let host = canonical_host(host)?;
        if !resource_type.operations().contains(&operation) {
            let names: Vec<&str> = resource_type
                .operations()
                .iter()
                .map(|o| o.name())
                .collect();
            return err(format!(
                "operation {operation} does not apply to a {resource_type}; it takes {}",
                names.join(", ")
            ));
        }
        Ok(AclBinding {
            resource_type,
            resource_name: resource_name.to_string(),
            pattern_type,
            principal: principal.to_string(),
            host,
            operation,
            permission,
        })
    }

    /// Parses and validates a record's binding (its id is separate: [`acl_id`]).
    pub fn from_record(r: &AccessControlEntryRecord) -> Result<AclBinding, AclError> {
        let field = |name: &str, v: i32| AclError(format!("{name} {v} is not a concrete value"));
        AclBinding::new(
            ResourceType::from_proto(r.resource_type)
                .ok_or_else(|| field("resource_type", r.resource_type))?,
            &r.resource_name,
            PatternType::from_proto(r.pattern_type)
                .ok_or_else(|| field("pattern_type", r.pattern_type))?,
            &r.principal,
            &r.host,
            Operation::from_proto(r.operation).ok_or_else(|| field("operation", r.operation))?,
            Permission::from_proto(r.permission_type)
                .ok_or_else(|| field("permission_type", r.permission_type))?,
        )
    }

    /// The record adding this binding under `id`.
    pub fn to_record(&self, id: Uuid) -> AccessControlEntryRecord {
        AccessControlEntryRecord {
            id: id.as_bytes().to_vec().into(),
            resource_type: self.resource_type.to_proto() as i32,
            resource_name: self.resource_name.clone(),
            pattern_type: self.pattern_type.to_proto() as i32,
            principal: self.principal.clone(),
            host: self.host.clone(),
            operation: self.operation.to_proto() as i32,
            permission_type: self.permission.to_proto() as i32,
        }
    }

    /// Whether the binding's pattern covers resource `name` of `ty`.
    fn covers(&self, ty: ResourceType, name: &str) -> bool {
        self.resource_type == ty
            && match self.pattern_type {
                PatternType::Literal => {
                    self.resource_name == name || self.resource_name == WILDCARD
                }
                PatternType::Prefixed => name.starts_with(&self.resource_name),
            }
    }
}

/// The id of an ACL record (16 bytes).
pub fn acl_id(bytes: &[u8]) -> Option<Uuid> {
    Uuid::from_slice(bytes).ok()
}

/// How a filter matches pattern types (Kafka's `PatternType` in a filter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatternFilter {
    /// Any pattern type, names compared exactly.
    Any,
    /// Every binding that would apply to the (literal) name: LITERAL equal, LITERAL `*`,
    /// PREFIXED a prefix of it.
    Match,
    /// Only this pattern type, names compared exactly.
    Exactly(PatternType),
}

/// A filter over bindings (Kafka's `AclBindingFilter`): `None` fields match anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclFilter {
    /// Resource type (`None` = ANY).
    pub resource_type: Option<ResourceType>,
    /// Resource name (`None` = any name).
    pub resource_name: Option<String>,
    /// Pattern matching.
    pub pattern: PatternFilter,
    /// Principal (`None` = any).
    pub principal: Option<String>,
    /// Host (`None` = any).
    pub host: Option<String>,
    /// Operation (`None` = ANY).
    pub operation: Option<Operation>,
    /// Permission (`None` = ANY).
    pub permission: Option<Permission>,
}

impl AclFilter {
    /// The filter matching every binding.
    pub fn any() -> AclFilter {
        AclFilter {
            resource_type: None,
            resource_name: None,
            pattern: PatternFilter::Any,
            principal: None,
            host: None,
            operation: None,
            permission: None,
        }
    }

    /// A filter from its wire form (proto enums as i32; empty strings = any). Errors name a
    /// field holding UNKNOWN or a value this build does not know, and a MATCH filter without a
    /// resource name or type.
    #[allow(clippy::too_many_arguments)]
    pub fn from_wire(
        resource_type: i32,
        resource_name: &str,
        pattern_type: i32,
        principal: &str,
        host: &str,
        operation: i32,
        permission: i32,
    ) -> Result<AclFilter, AclError> {
        fn any_or<T>(
            field: &str,
            v: i32,
            any: i32,
            parse: fn(i32) -> Option<T>,
        ) -> Result<Option<T>, AclError> {
            if v == any {
                return Ok(None);
            }
            parse(v)
                .map(Some)
                .ok_or_else(|| AclError(format!("{field} {v} is not a known value (ANY is {any})")))
        }
        let pattern = match AclPatternType::try_from(pattern_type) {
            Ok(AclPatternType::Any) => PatternFilter::Any,
            Ok(AclPatternType::Match) => PatternFilter::Match,
            Ok(AclPatternType::Literal) => PatternFilter::Exactly(PatternType::Literal),
            Ok(AclPatternType::Prefixed) => PatternFilter::Exactly(PatternType::Prefixed),
            _ => return err(format!("pattern_type {pattern_type} is not a known value")),
        };
        let f = AclFilter {
            resource_type: any_or(
                "resource_type",
                resource_type,
                AclResourceType::Any as i32,
                ResourceType::from_proto,
            )?,
            resource_name: (!resource_name.is_empty()).then(|| resource_name.to_string()),
            pattern,
            principal: (!principal.is_empty()).then(|| principal.to_string()),
            host: if host.is_empty() {
                None
            } else {
                Some(canonical_host(host)?)
            },
            operation: any_or(
                "operation",
                operation,
                AclOperation::Any as i32,
                Operation::from_proto,
            )?,
            permission: any_or(
                "permission_type",
                permission,
                AclPermissionType::Any as i32,
                Permission::from_proto,
            )?,
        };
        if f.pattern == PatternFilter::Match
            && (f.resource_name.is_none() || f.resource_type.is_none())
        {
            return err("a MATCH filter needs a resource type and name");
        }
        for s in [&f.resource_name, &f.principal].into_iter().flatten() {
            if s.len() > MAX_ACL_FIELD_BYTES {
                return err(format!(
                    "a filter field is {} bytes; at most {MAX_ACL_FIELD_BYTES}",
                    s.len()
                ));
            }
        }
        Ok(f)
    }

    /// Whether `b` matches.
    pub fn matches(&self, b: &AclBinding) -> bool {
        if self.resource_type.is_some_and(|t| t != b.resource_type)
            || self.principal.as_ref().is_some_and(|p| *p != b.principal)
            || self.host.as_ref().is_some_and(|h| *h != b.host)
            || self.operation.is_some_and(|o| o != b.operation)
            || self.permission.is_some_and(|p| p != b.permission)
        {
            return false;
        }
        match (&self.pattern, &self.resource_name) {
            (PatternFilter::Match, Some(name)) => b.covers(b.resource_type, name),
            (PatternFilter::Match, None) => true,
            (PatternFilter::Any, name) => name.as_ref().is_none_or(|n| *n == b.resource_name),
            (PatternFilter::Exactly(p), name) => {
                *p == b.pattern_type && name.as_ref().is_none_or(|n| *n == b.resource_name)
            }
        }
    }
}

/// The ACLs of an image: by id, and indexed by resource pattern for [`authorize`].
/// Invariant: `by_pattern` holds exactly the ids of `by_id`, each under its binding's
/// (type, pattern type, name).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AclsImage {
    by_id: BTreeMap<Uuid, Arc<AclBinding>>,
    by_pattern: BTreeMap<(ResourceType, PatternType, String), BTreeSet<Uuid>>,
}

impl AclsImage {
    /// The ACLs with these ids.
    pub fn from_map(by_id: BTreeMap<Uuid, Arc<AclBinding>>) -> AclsImage {
        let mut by_pattern: BTreeMap<_, BTreeSet<Uuid>> = BTreeMap::new();
        for (id, b) in &by_id {
            by_pattern
                .entry((b.resource_type, b.pattern_type, b.resource_name.clone()))
                .or_default()
                .insert(*id);
        }
        AclsImage { by_id, by_pattern }
    }

    /// Every ACL by id.
    pub fn by_id(&self) -> &BTreeMap<Uuid, Arc<AclBinding>> {
        &self.by_id
    }

    /// Number of ACLs.
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// True without ACLs.
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    /// The id of a binding equal to `b`, if one exists (CreateAcls of an existing binding is
    /// a no-op, as in Kafka's `AclControlManager`).
    pub fn find(&self, b: &AclBinding) -> Option<Uuid> {
        self.by_pattern
            .get(&(b.resource_type, b.pattern_type, b.resource_name.clone()))?
            .iter()
            .copied()
            .find(|id| self.by_id[id].as_ref() == b)
    }

    /// The ACLs whose pattern covers resource `name` of `ty`, with their ids.
    fn covering<'a>(
        &'a self,
        ty: ResourceType,
        name: &'a str,
    ) -> impl Iterator<Item = &'a AclBinding> + 'a {
        let wildcard = (name != WILDCARD).then_some(WILDCARD);
        let literal = std::iter::once(name).chain(wildcard).filter_map(move |n| {
            self.by_pattern
                .get(&(ty, PatternType::Literal, n.to_string()))
        });
        let prefixed = (1..=name.len())
            .filter(move |i| name.is_char_boundary(*i))
            .filter_map(move |i| {
                self.by_pattern
                    .get(&(ty, PatternType::Prefixed, name[..i].to_string()))
            });
        literal
            .chain(prefixed)
            .flat_map(|ids| ids.iter())
            .map(|id| self.by_id[id].as_ref())
    }
}

/// The authorizer's settings (Kafka: `super.users`, `allow.everyone.if.no.acl.found`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuthorizerConfig {
    /// Principals allowed everything, e.g. `User:admin`.
    pub super_users: BTreeSet<String>,
    /// Allow an action on a resource no ACL names (default false).
    pub allow_everyone_if_no_acl_found: bool,
}

impl AuthorizerConfig {
    /// Parses Kafka's `super.users`: principals separated by `;` (spaces around them are
    /// ignored; empty parts skipped). Each must be `User:<name>`.
    pub fn parse_super_users(s: &str) -> Result<BTreeSet<String>, AclError> {
        s.split(';')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(|p| validate_principal(p).map(|()| p.to_string()))
            .collect()
    }
}

/// What the caller wants to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Action<'a> {
    /// The operation.
    pub operation: Operation,
    /// On what type of resource.
    pub resource_type: ResourceType,
    /// The resource's name (`kafka-cluster` for the cluster).
    pub resource_name: &'a str,
}

impl<'a> Action<'a> {
    /// `operation` on the cluster.
    pub fn cluster(operation: Operation) -> Action<'static> {
        Action {
            operation,
            resource_type: ResourceType::Cluster,
            resource_name: CLUSTER_RESOURCE_NAME,
        }
    }

    /// `operation` on topic `name`.
    pub fn topic(operation: Operation, name: &'a str) -> Action<'a> {
        Action {
            operation,
            resource_type: ResourceType::Topic,
            resource_name: name,
        }
    }

    /// `operation` on a config resource of `keel.metadata.ConfigResourceType` `ty`: the topic
    /// for a topic resource, the cluster for broker and cluster-wide resources (Kafka:
    /// `ControllerApis.handleIncrementalAlterConfigs`).
    pub fn config_resource(ty: i32, name: &'a str, operation: Operation) -> Action<'a> {
        if ty == keel_proto::metadata::ConfigResourceType::Topic as i32 {
            Action::topic(operation, name)
        } else {
            Action::cluster(operation)
        }
    }

    /// `operation` on group `name`.
    pub fn group(operation: Operation, name: &'a str) -> Action<'a> {
        Action {
            operation,
            resource_type: ResourceType::Group,
            resource_name: name,
        }
    }
}

/// The authorizer's answer and why (for the denial log).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Allowed: a super user.
    SuperUser,
    /// Allowed by an ALLOW ACL.
    AllowedByAcl,
    /// Allowed: no ACL names the resource and `allow_everyone_if_no_acl_found` is set.
    NoAclFound,
    /// Denied by a DENY ACL.
    DeniedByAcl,
    /// Denied: no ALLOW ACL applies.
    NoAllowAcl,
}

impl Decision {
    /// Whether the action may proceed.
    pub fn allowed(self) -> bool {
        matches!(
            self,
            Decision::SuperUser | Decision::AllowedByAcl | Decision::NoAclFound
        )
    }

    /// Why, in words.
    pub fn reason(self) -> &'static str {
        match self {
            Decision::SuperUser => "super user",
            Decision::AllowedByAcl => "an ALLOW ACL",
            Decision::NoAclFound => "no ACL names the resource (allow_everyone_if_no_acl_found)",
            Decision::DeniedByAcl => "a DENY ACL",
            Decision::NoAllowAcl => "no ALLOW ACL matches",
        }
    }
}

/// Decides whether `principal` connecting from `host` (an IP address in canonical form, or
/// empty when unknown) may perform `action` (the module doc's rules).
pub fn authorize(
    acls: &AclsImage,
    config: &AuthorizerConfig,
    principal: &str,
    host: &str,
    action: Action<'_>,
) -> Decision {
    if config.super_users.contains(principal) {
        return Decision::SuperUser;
    }
    let mut any_acl = false;
    let mut allowed = false;
    for b in acls.covering(action.resource_type, action.resource_name) {
        any_acl = true;
        if (b.principal != principal && b.principal != WILDCARD_PRINCIPAL)
            || (b.host != WILDCARD && b.host != host)
        {
            continue;
        }
        match b.permission {
            Permission::Deny => {
                if b.operation == Operation::All || b.operation == action.operation {
                    return Decision::DeniedByAcl;
                }
            }
            Permission::Allow => allowed |= b.operation.allows(action.operation),
        }
    }
    if allowed {
        Decision::AllowedByAcl
    } else if !any_acl && config.allow_everyone_if_no_acl_found {
        Decision::NoAclFound
    } else {
        Decision::NoAllowAcl
    }
}

/// Whether `principal` from `host` holds an ALLOW of `operation` on some resource of type `ty`
/// and no DENY of it on every such resource (Kafka's `authorizeByResourceType`, KIP-679: an
/// idempotent producer needs WRITE on any topic, or IDEMPOTENT_WRITE on the cluster).
/// Simplified: any applicable ALLOW whose own pattern is not also denied by a DENY of the same
/// pattern allows.
pub fn authorize_any_of_type(
    acls: &AclsImage,
    config: &AuthorizerConfig,
    principal: &str,
    host: &str,
    ty: ResourceType,
    operation: Operation,
) -> bool {
    if config.super_users.contains(principal) {
        return true;
    }
    let applies = |b: &AclBinding| {
        b.resource_type == ty
            && (b.principal == principal || b.principal == WILDCARD_PRINCIPAL)
            && (b.host == WILDCARD || b.host == host)
    };
    acls.by_id.values().any(|b| {
        applies(b)
            && b.permission == Permission::Allow
            && b.operation.allows(operation)
            && authorize(
                acls,
                config,
                principal,
                host,
                Action {
                    operation,
                    resource_type: ty,
                    resource_name: &b.resource_name,
                },
            )
            .allowed()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bind(
        ty: ResourceType,
        name: &str,
        pat: PatternType,
        principal: &str,
        op: Operation,
        perm: Permission,
    ) -> AclBinding {
        AclBinding::new(ty, name, pat, principal, "*", op, perm).unwrap()
    }

    fn image(bs: &[AclBinding]) -> AclsImage {
        AclsImage::from_map(
            bs.iter()
                .enumerate()
                .map(|(i, b)| (Uuid::from_u128(i as u128 + 1), Arc::new(b.clone())))
                .collect(),
        )
    }

    const ALICE: &str = "User:alice";

    fn topic(op: Operation, n: &str) -> Action<'_> {
        Action::topic(op, n)
    }

    #[test]
    fn no_acl_denies_unless_allow_everyone() {
        let acls = image(&[]);
        let mut cfg = AuthorizerConfig::default();
        assert_eq!(
            authorize(&acls, &cfg, ALICE, "", topic(Operation::Read, "t")),
            Decision::NoAllowAcl
        );
        cfg.allow_everyone_if_no_acl_found = true;
        assert!(authorize(&acls, &cfg, ALICE, "", topic(Operation::Read, "t")).allowed());
        // An ACL naming the resource (for someone else) turns the fallback off for it.
        let acls = image(&[bind(
            ResourceType::Topic,
            "t",
            PatternType::Literal,
            "User:bob",
            Operation::Read,
            Permission::Allow,
        )]);
        assert!(!authorize(&acls, &cfg, ALICE, "", topic(Operation::Read, "t")).allowed());
        assert!(authorize(&acls, &cfg, ALICE, "", topic(Operation::Read, "u")).allowed());
    }

    #[test]
    fn literal_wildcard_and_prefixed_patterns() {
        let cfg = AuthorizerConfig::default();
        let acls = image(&[
            bind(
                ResourceType::Topic,
                "orders",
                PatternType::Literal,
                ALICE,
                Operation::Write,
                Permission::Allow,
            ),
            bind(
                ResourceType::Topic,
                "logs-",
                PatternType::Prefixed,
                ALICE,
                Operation::Read,
                Permission::Allow,
            ),
            bind(
                ResourceType::Group,
                "*",
                PatternType::Literal,
                "User:*",
                Operation::Read,
                Permission::Allow,
            ),
        ]);
        let ok = |a| authorize(&acls, &cfg, ALICE, "10.0.0.1", a).allowed();
        assert!(ok(topic(Operation::Write, "orders")));
        assert!(!ok(topic(Operation::Write, "orders2")));
        assert!(!ok(topic(Operation::Read, "orders")));
        assert!(ok(topic(Operation::Read, "logs-app")));
        assert!(!ok(topic(Operation::Read, "log")));
        assert!(ok(Action::group(Operation::Read, "any-group")));
        assert!(
            authorize(
                &acls,
                &cfg,
                "User:bob",
                "",
                Action::group(Operation::Read, "g")
            )
            .allowed()
        );
        assert!(!ok(Action::cluster(Operation::Alter)));
    }

    #[test]
    fn deny_wins_and_implied_describe() {
        let cfg = AuthorizerConfig::default();
        let acls = image(&[
            bind(
                ResourceType::Topic,
                "*",
                PatternType::Literal,
                ALICE,
                Operation::All,
                Permission::Allow,
            ),
            bind(
                ResourceType::Topic,
                "secret",
                PatternType::Literal,
                ALICE,
                Operation::Read,
                Permission::Deny,
            ),
        ]);
        let d = |op, t| authorize(&acls, &cfg, ALICE, "", topic(op, t));
        assert_eq!(d(Operation::Read, "secret"), Decision::DeniedByAcl);
        // The DENY of READ does not deny DESCRIBE (Kafka: denials are not implied).
        assert!(d(Operation::Describe, "secret").allowed());
        assert!(d(Operation::Write, "secret").allowed());
        let acls = image(&[
            bind(
                ResourceType::Topic,
                "t",
                PatternType::Literal,
                ALICE,
                Operation::Write,
                Permission::Allow,
            ),
            bind(
                ResourceType::Topic,
                "t",
                PatternType::Literal,
                ALICE,
                Operation::AlterConfigs,
                Permission::Allow,
            ),
        ]);
        let d = |op| authorize(&acls, &cfg, ALICE, "", topic(op, "t"));
        assert!(d(Operation::Describe).allowed());
        assert!(d(Operation::DescribeConfigs).allowed());
        assert!(!d(Operation::Read).allowed());
        assert!(!d(Operation::Delete).allowed());
    }

    #[test]
    fn host_and_super_users() {
        let acls = image(&[AclBinding::new(
            ResourceType::Topic,
            "t",
            PatternType::Literal,
            ALICE,
            "::ffff:10.0.0.1",
            Operation::Read,
            Permission::Allow,
        )
        .unwrap()]);
        let mut cfg = AuthorizerConfig::default();
        let d = |cfg: &AuthorizerConfig, who, host| {
            authorize(&acls, cfg, who, host, topic(Operation::Read, "t")).allowed()
        };
        assert!(d(&cfg, ALICE, "10.0.0.1"));
        assert!(!d(&cfg, ALICE, "10.0.0.2"));
        cfg.super_users = AuthorizerConfig::parse_super_users(" User:root ; ;User:ops").unwrap();
        assert!(d(&cfg, "User:root", "10.9.9.9"));
        assert!(!d(&cfg, "User:nobody", "10.0.0.1"));
        assert!(AuthorizerConfig::parse_super_users("root").is_err());
    }

    #[test]
    fn bindings_are_validated() {
        use Operation::*;
        let b = |ty, name, pat, p: &str, host: &str, op| {
            AclBinding::new(ty, name, pat, p, host, op, Permission::Allow)
                .map_err(|e| e.0)
                .unwrap_err()
        };
        let l = PatternType::Literal;
        assert!(b(ResourceType::Topic, "", l, ALICE, "*", Read).contains("empty"));
        assert!(b(ResourceType::Cluster, "c", l, ALICE, "*", Alter).contains("kafka-cluster"));
        assert!(
            b(
                ResourceType::Topic,
                "*",
                PatternType::Prefixed,
                ALICE,
                "*",
                Read
            )
            .contains("LITERAL")
        );
        assert!(b(ResourceType::Topic, "t", l, "alice", "*", Read).contains("User:<name>"));
        assert!(b(ResourceType::Topic, "t", l, "Group:x", "*", Read).contains("only User"));
        assert!(b(ResourceType::Topic, "t", l, ALICE, "example.com", Read).contains("IP address"));
        assert!(b(ResourceType::Group, "g", l, ALICE, "*", Write).contains("GROUP"));
        assert!(b(ResourceType::Topic, &"x".repeat(1025), l, ALICE, "*", Read).contains("1024"));
        let ok = AclBinding::new(
            ResourceType::Topic,
            "t",
            l,
            ALICE,
            "*",
            Read,
            Permission::Deny,
        )
        .unwrap();
        let id = Uuid::from_u128(7);
        assert_eq!(AclBinding::from_record(&ok.to_record(id)).unwrap(), ok);
    }

    #[test]
    fn filters_match_like_kafka() {
        let lit = bind(
            ResourceType::Topic,
            "orders",
            PatternType::Literal,
            ALICE,
            Operation::Read,
            Permission::Allow,
        );
        let pre = bind(
            ResourceType::Topic,
            "ord",
            PatternType::Prefixed,
            "User:bob",
            Operation::Write,
            Permission::Deny,
        );
        let any = AclFilter::any();
        assert!(any.matches(&lit) && any.matches(&pre));
        let f = |name: &str, pat: i32| {
            AclFilter::from_wire(
                AclResourceType::Topic as i32,
                name,
                pat,
                "",
                "",
                AclOperation::Any as i32,
                AclPermissionType::Any as i32,
            )
            .unwrap()
        };
        let m = f("orders", AclPatternType::Match as i32);
        assert!(m.matches(&lit) && m.matches(&pre));
        let exact = f("orders", AclPatternType::Any as i32);
        assert!(exact.matches(&lit) && !exact.matches(&pre));
        let p = f("", AclPatternType::Prefixed as i32);
        assert!(!p.matches(&lit) && p.matches(&pre));
        assert!(AclFilter::from_wire(0, "", 1, "", "", 1, 1).is_err());
        assert!(AclFilter::from_wire(1, "", 2, "", "", 1, 1).is_err());
    }

    #[test]
    fn names_parse_in_kafka_spellings() {
        assert_eq!(
            Operation::parse("cluster-action"),
            Some(Operation::ClusterAction)
        );
        assert_eq!(
            Operation::parse("ClusterAction"),
            Some(Operation::ClusterAction)
        );
        assert_eq!(
            Operation::parse("DESCRIBE_CONFIGS"),
            Some(Operation::DescribeConfigs)
        );
        assert_eq!(
            ResourceType::parse("transactional-id"),
            Some(ResourceType::TransactionalId)
        );
        assert_eq!(Operation::parse("any"), None);
    }
}
