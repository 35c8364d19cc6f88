//! `keelctl acl add|list|remove`, like `kafka-acls --add|--list|--remove` (same flags and
//! the same text output), over the controller's CreateAcls / DescribeAcls / DeleteAcls.

use clap::Subcommand;
use keel_metadata_log::acl::{
    CLUSTER_RESOURCE_NAME, Operation, PatternType, Permission, ResourceType,
};
use keel_proto::controller::AclBinding;
use keel_proto::metadata::{AclOperation, AclPatternType, AclPermissionType, AclResourceType};
use serde::Serialize;

use super::{CliError, CliResult, Ctx};

/// `keelctl acl ...`
#[derive(Debug, Subcommand)]
pub enum AclCommand {
    /// Add ACLs: every principal x host x operation x resource given (kafka-acls --add).
    Add(AclArgs),
    /// List ACLs, all or those of the resources / principal given (kafka-acls --list).
    List(AclArgs),
    /// Remove the ACLs matching the resources and, if given, principals, hosts and
    /// operations (kafka-acls --remove).
    Remove(AclArgs),
}

/// Flags of `acl add|list|remove` (kafka-acls' names).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct AclArgs {
    /// Principal to allow, `User:<name>` or `User:*` (repeatable).
    #[arg(long)]
    pub allow_principal: Vec<String>,
    /// Principal to deny (repeatable).
    #[arg(long)]
    pub deny_principal: Vec<String>,
    /// Client IP address the allow ACLs apply to (repeatable; add: default `*`, every host;
    /// list and remove: default any host). Needs --allow-principal.
    #[arg(long)]
    pub allow_host: Vec<String>,
    /// Client IP address the deny ACLs apply to (repeatable; add: default `*`; list and
    /// remove: any host). Needs --deny-principal.
    #[arg(long)]
    pub deny_host: Vec<String>,
    /// Operation (repeatable): All, Read, Write, Create, Delete, Alter, Describe,
    /// ClusterAction, DescribeConfigs, AlterConfigs, IdempotentWrite. Default for add: All;
    /// for list and remove: any.
    #[arg(long)]
    pub operation: Vec<String>,
    /// Topic (repeatable; `*` = every topic).
    #[arg(long)]
    pub topic: Vec<String>,
    /// Consumer group (repeatable; `*` = every group).
    #[arg(long)]
    pub group: Vec<String>,
    /// The cluster resource.
    #[arg(long)]
    pub cluster: bool,
    /// Transactional id (repeatable).
    #[arg(long)]
    pub transactional_id: Vec<String>,
    /// literal or prefixed (add); also any or match for list and remove (default literal;
    /// list without a resource lists every pattern type).
    #[arg(long)]
    pub resource_pattern_type: Option<String>,
    /// Producer ACLs: Write, Describe and Create on the topics (with --idempotent also
    /// IdempotentWrite on the cluster).
    #[arg(long)]
    pub producer: bool,
    /// With --producer: IdempotentWrite on the cluster too.
    #[arg(long, requires = "producer")]
    pub idempotent: bool,
    /// Consumer ACLs: Read and Describe on the topics, Read on the groups.
    #[arg(long)]
    pub consumer: bool,
    /// list: only the ACLs of this principal (repeatable).
    #[arg(long)]
    pub principal: Vec<String>,
    /// Accepted for kafka-acls compatibility: keelctl never asks for confirmation (remove
    /// removes every ACL its filters match at once).
    #[arg(long)]
    pub force: bool,
}

/// One resource named by the flags.
type Resource = (ResourceType, String);

impl AclArgs {
    fn resources(&self) -> Vec<Resource> {
        let mut out: Vec<Resource> = Vec::new();
        out.extend(self.topic.iter().map(|t| (ResourceType::Topic, t.clone())));
        out.extend(self.group.iter().map(|g| (ResourceType::Group, g.clone())));
        if self.cluster {
            out.push((ResourceType::Cluster, CLUSTER_RESOURCE_NAME.to_string()));
        }
        out.extend(
            self.transactional_id
                .iter()
                .map(|t| (ResourceType::TransactionalId, t.clone())),
        );
        out
    }

    fn pattern(&self, for_filter: bool) -> Result<AclPatternType, CliError> {
        let Some(p) = &self.resource_pattern_type else {
            return Ok(AclPatternType::Literal);
        };
        match p.to_ascii_lowercase().as_str() {
            "literal" => Ok(AclPatternType::Literal),
            "prefixed" => Ok(AclPatternType::Prefixed),
            "any" if for_filter => Ok(AclPatternType::Any),
            "match" if for_filter => Ok(AclPatternType::Match),
            other => Err(CliError::usage(format!(
                "--resource-pattern-type {other:?}: {}",
                if for_filter {
                    "one of literal, prefixed, any, match"
                } else {
                    "adding takes literal or prefixed"
                }
            ))),
        }
    }

    fn operations(&self) -> Result<Vec<Operation>, CliError> {
        self.operation
            .iter()
            .map(|o| {
                Operation::parse(o).ok_or_else(|| {
                    let names: Vec<&str> = Operation::ALL_VALUES.iter().map(|o| o.name()).collect();
                    CliError::usage(format!(
                        "--operation {o:?} is not one of {}",
                        names.join(", ")
                    ))
                })
            })
            .collect()
    }

    /// Usage errors every subcommand shares (before anything is sent): a principal that is
    /// not `User:<name>` (also for list's --principal), a host flag without its principal
    /// flag (kafka-acls ignores it silently; here it would match nothing the user meant).
    fn check_common(&self) -> Result<(), CliError> {
        for (flag, list) in [
            ("--allow-principal", &self.allow_principal),
            ("--deny-principal", &self.deny_principal),
            ("--principal", &self.principal),
        ] {
            for p in list {
                keel_metadata_log::acl::validate_principal(p)
                    .map_err(|e| CliError::usage(format!("{flag}: {e}")))?;
                // `User: alice` is a principal nobody authenticates as (Kafka keeps the
                // space, and it never matches): a typo, refused here.
                if p.split_once(':').is_some_and(|(_, n)| n.trim() != n) {
                    return Err(CliError::usage(format!(
                        "{flag}: principal {:?} has white space around its name (User:<name>)",
                        clip(p)
                    )));
                }
            }
        }
        if !self.allow_host.is_empty() && self.allow_principal.is_empty() {
            return Err(CliError::usage("--allow-host needs --allow-principal"));
        }
        if !self.deny_host.is_empty() && self.deny_principal.is_empty() {
            return Err(CliError::usage("--deny-host needs --deny-principal"));
        }
        Ok(())
    }

    /// (principal, host, permission) triples of add/remove.
    fn principals(&self, default_host: &str) -> Vec<(String, String, Permission)> {
        let hosts = |h: &[String]| {
            if h.is_empty() {
                vec![default_host.to_string()]
            } else {
                h.to_vec()
            }
        };
        let mut out = Vec::new();
        for p in &self.allow_principal {
            for h in hosts(&self.allow_host) {
                out.push((p.clone(), h, Permission::Allow));
            }
        }
        for p in &self.deny_principal {
            for h in hosts(&self.deny_host) {
                out.push((p.clone(), h, Permission::Deny));
            }
        }
        out
    }
}

fn wire(
    ty: ResourceType,
    name: &str,
    pattern: AclPatternType,
    principal: &str,
    host: &str,
    op: AclOperation,
    perm: AclPermissionType,
) -> AclBinding {
    AclBinding {
        resource_type: ty.to_proto() as i32,
        resource_name: name.to_string(),
        pattern_type: pattern as i32,
        principal: principal.to_string(),
        host: host.to_string(),
        operation: op as i32,
        permission_type: perm as i32,
    }
}

/// The bindings `acl add` creates (pure).
pub fn bindings_to_add(a: &AclArgs) -> Result<Vec<AclBinding>, CliError> {
    a.check_common()?;
    let pattern = a.pattern(false)?;
    let principals = a.principals("*");
    if principals.is_empty() {
        return Err(CliError::usage(
            "acl add needs --allow-principal or --deny-principal",
        ));
    }
    let resources = a.resources();
    if resources.is_empty() {
        return Err(CliError::usage(
            "acl add needs a resource: --topic, --group, --cluster or --transactional-id",
        ));
    }
    // (resource, operations) pairs: explicit, or from --producer / --consumer.
    let mut plan: Vec<(Resource, Vec<Operation>)> = Vec::new();
    // kafka-acls: "With --producer you must specify a --topic"; --consumer needs both.
    if a.producer && a.topic.is_empty() {
        return Err(CliError::usage("--producer needs --topic"));
    }
    if a.consumer && (a.topic.is_empty() || a.group.is_empty()) {
        return Err(CliError::usage("--consumer needs --topic and --group"));
    }
    if a.producer || a.consumer {
        if !a.operation.is_empty() {
            return Err(CliError::usage(
                "--producer and --consumer choose the operations; leave out --operation",
            ));
        }
        for (ty, name) in &resources {
            match ty {
                ResourceType::Topic if a.producer => plan.push((
                    (*ty, name.clone()),
                    vec![Operation::Write, Operation::Describe, Operation::Create],
                )),
                _ => {}
            }
            match ty {
                ResourceType::Topic if a.consumer => plan.push((
                    (*ty, name.clone()),
                    vec![Operation::Read, Operation::Describe],
                )),
                ResourceType::Group if a.consumer => {
                    plan.push(((*ty, name.clone()), vec![Operation::Read]))
                }
                _ => {}
            }
        }
        if a.consumer && a.group.is_empty() {
            return Err(CliError::usage("--consumer needs --group"));
        }
        if a.idempotent {
            plan.push((
                (ResourceType::Cluster, CLUSTER_RESOURCE_NAME.to_string()),
                vec![Operation::IdempotentWrite],
            ));
        }
    } else {
        let ops = a.operations()?;
        let ops = if ops.is_empty() {
            vec![Operation::All]
        } else {
            ops
        };
        for r in resources {
            plan.push((r, ops.clone()));
        }
    }
    let mut out: Vec<AclBinding> = Vec::new();
    for ((ty, name), ops) in plan {
        let pattern = if ty == ResourceType::Cluster {
            AclPatternType::Literal
        } else {
            pattern
        };
        for (principal, host, perm) in &principals {
            for op in &ops {
                // Every binding is checked as the controller will, before anything is sent:
                // one bad binding refuses the command and nothing is added.
                let typed = PatternType::from_proto(pattern as i32).unwrap_or(PatternType::Literal);
                keel_metadata_log::acl::AclBinding::new(
                    ty, &name, typed, principal, host, *op, *perm,
                )
                .map_err(|e| CliError::usage(format!("{ty} {}: {e}", clip(&name))))?;
                let b = wire(
                    ty,
                    &name,
                    pattern,
                    principal,
                    host,
                    op.to_proto(),
                    perm.to_proto(),
                );
                // --producer --consumer both name DESCRIBE on a topic: once.
                if !out.contains(&b) {
                    out.push(b);
                }
            }
        }
    }
    Ok(out)
}

/// A user-given name clipped for an error line: at most 200 bytes, then its length.
fn clip(s: &str) -> String {
    if s.len() <= 200 {
        return s.to_string();
    }
    let mut end = 200;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes)", &s[..end], s.len())
}

/// The filters of `acl list` / `acl remove` (pure). `remove` needs a resource.
pub fn filters(a: &AclArgs, remove: bool) -> Result<Vec<AclBinding>, CliError> {
    a.check_common()?;
    let resources = a.resources();
    if remove && resources.is_empty() {
        return Err(CliError::usage(
            "acl remove needs a resource: --topic, --group, --cluster or --transactional-id",
        ));
    }
    let pattern = a.pattern(true)?;
    let typed_ops = a.operations()?;
    // An operation a resource type does not take matches nothing: say so, as add does.
    for (ty, _) in &resources {
        if let Some(op) = typed_ops.iter().find(|o| !ty.operations().contains(o)) {
            return Err(CliError::usage(format!("{op} does not apply to a {ty}")));
        }
    }
    let ops: Vec<AclOperation> = match typed_ops {
        o if o.is_empty() => vec![AclOperation::Any],
        o => o.into_iter().map(Operation::to_proto).collect(),
    };
    // (principal, host, permission); empty strings and ANY match anything.
    let mut who: Vec<(String, String, AclPermissionType)> = a
        .principals("")
        .into_iter()
        .map(|(p, h, perm)| (p, h, perm.to_proto()))
        .collect();
    who.extend(
        a.principal
            .iter()
            .map(|p| (p.clone(), String::new(), AclPermissionType::Any)),
    );
    if who.is_empty() {
        who.push((String::new(), String::new(), AclPermissionType::Any));
    }
    let resources: Vec<(AclResourceType, String, AclPatternType)> = if resources.is_empty() {
        vec![(AclResourceType::Any, String::new(), AclPatternType::Any)]
    } else {
        resources
            .into_iter()
            .map(|(ty, name)| (ty.to_proto(), name, pattern))
            .collect()
    };
    let mut out = Vec::new();
    for (ty, name, pattern) in &resources {
        for (principal, host, perm) in &who {
            for op in &ops {
                out.push(AclBinding {
                    resource_type: *ty as i32,
                    resource_name: name.clone(),
                    pattern_type: *pattern as i32,
                    principal: principal.clone(),
                    host: host.clone(),
                    operation: *op as i32,
                    permission_type: *perm as i32,
                });
            }
        }
    }
    Ok(out)
}

/// One ACL as printed with --json.
#[derive(Debug, Serialize, PartialEq, Eq, PartialOrd, Ord)]
struct AclRow {
    resource_type: String,
    resource_name: String,
    pattern_type: String,
    principal: String,
    host: String,
    operation: String,
    permission_type: String,
}

fn row(b: &AclBinding) -> AclRow {
    let name = |v: Option<&'static str>, raw: i32| v.map_or_else(|| raw.to_string(), String::from);
    AclRow {
        resource_type: name(
            ResourceType::from_proto(b.resource_type).map(ResourceType::name),
            b.resource_type,
        ),
        resource_name: b.resource_name.clone(),
        pattern_type: name(
            PatternType::from_proto(b.pattern_type).map(PatternType::name),
            b.pattern_type,
        ),
        principal: b.principal.clone(),
        host: b.host.clone(),
        operation: name(
            Operation::from_proto(b.operation).map(Operation::name),
            b.operation,
        ),
        permission_type: name(
            Permission::from_proto(b.permission_type).map(Permission::name),
            b.permission_type,
        ),
    }
}

/// kafka-acls' text: per resource pattern a header, then one line per ACL (pure).
fn text(header: &str, rows: &[AclRow]) -> String {
    let mut out = String::new();
    let mut last: Option<(&str, &str, &str)> = None;
    for r in rows {
        let key = (
            r.resource_type.as_str(),
            r.resource_name.as_str(),
            r.pattern_type.as_str(),
        );
        if last != Some(key) {
            if last.is_some() {
                out.push('\n');
            }
            out.push_str(&format!(
                "{header} `ResourcePattern(resourceType={}, name={}, patternType={})`:\n",
                key.0, key.1, key.2
            ));
            last = Some(key);
        }
        out.push_str(&format!(
            " \t(principal={}, host={}, operation={}, permissionType={})\n",
            r.principal, r.host, r.operation, r.permission_type
        ));
    }
    out
}

pub(super) async fn run(c: AclCommand, ctx: &Ctx) -> CliResult {
    match c {
        AclCommand::Add(a) => {
            let bindings = bindings_to_add(&a)?;
            let results = ctx.admin()?.create_acls(bindings.clone()).await?;
            let refused: Vec<String> = bindings
                .iter()
                .zip(&results)
                .filter_map(|(b, e)| {
                    e.as_ref().map(|e| {
                        let r = row(b);
                        format!(
                            "{} {} {} {}: {} ({})",
                            r.principal,
                            r.operation,
                            r.resource_type,
                            r.resource_name,
                            e.name,
                            e.message
                        )
                    })
                })
                .collect();
            let mut rows: Vec<AclRow> = bindings
                .iter()
                .zip(&results)
                .filter(|(_, e)| e.is_none())
                .map(|(b, _)| row(b))
                .collect();
            rows.sort();
            if ctx.json {
                ctx.print_json(&rows)?;
            } else if !rows.is_empty() {
                out!("{}", text("Adding ACLs for resource", &rows));
            }
            if !refused.is_empty() {
                return Err(CliError::new(format!(
                    "{} ACL(s) refused: {}",
                    refused.len(),
                    refused.join("; ")
                )));
            }
            Ok(())
        }
        AclCommand::List(a) => {
            let admin = ctx.admin()?;
            let mut rows = Vec::new();
            for f in filters(&a, false)? {
                rows.extend(admin.describe_acls(Some(f)).await?.iter().map(row));
            }
            rows.sort();
            rows.dedup();
            if ctx.json {
                return ctx.print_json(&rows);
            }
            if rows.is_empty() {
                outln!("no ACLs match");
            } else {
                out!("{}", text("Current ACLs for resource", &rows));
            }
            Ok(())
        }
        AclCommand::Remove(a) => {
            let removed = ctx.admin()?.delete_acls(filters(&a, true)?).await?;
            let mut rows: Vec<AclRow> = removed.iter().flatten().map(row).collect();
            rows.sort();
            if ctx.json {
                return ctx.print_json(&rows);
            }
            if rows.is_empty() {
                outln!("no ACLs matched; nothing removed");
            } else {
                out!("{}", text("Removed ACLs for resource", &rows));
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args() -> AclArgs {
        AclArgs::default()
    }

    /// From a fresh-user trial: each of these was sent (and partly saved), matched nothing
    /// silently, or leaked an internal error; now each is a usage error before anything is
    /// sent.
    #[test]
    fn bad_flags_are_refused_before_anything_is_sent() {
        let msg = |r: Result<Vec<AclBinding>, CliError>| {
            let e = r.unwrap_err();
            assert!(e.usage, "{}", e.message);
            e.message
        };
        // One bad host among good bindings: nothing is sent.
        let mixed = AclArgs {
            allow_principal: vec!["User:alice".into()],
            allow_host: vec!["10.0.0.1".into(), "not-an-ip".into()],
            topic: vec!["t".into()],
            ..args()
        };
        assert!(msg(bindings_to_add(&mixed)).contains("\"not-an-ip\" is not an IP address"));
        // A principal without User: (or with spaces) for add, list and remove alike.
        for principal in ["alice", "User: alice"] {
            let add = AclArgs {
                allow_principal: vec![principal.into()],
                topic: vec!["t".into()],
                ..args()
            };
            assert!(msg(bindings_to_add(&add)).contains("--allow-principal"));
            let list = AclArgs {
                principal: vec![principal.into()],
                ..args()
            };
            assert!(msg(filters(&list, false)).contains("--principal"));
            assert!(msg(filters(&add, true)).contains("--allow-principal"));
        }
        // An operation the resource type does not take.
        let read_cluster = AclArgs {
            operation: vec!["Read".into()],
            cluster: true,
            ..args()
        };
        assert_eq!(
            msg(filters(&read_cluster, true)),
            "READ does not apply to a CLUSTER"
        );
        // --producer / --consumer without their resources.
        let producer = AclArgs {
            allow_principal: vec!["User:p".into()],
            group: vec!["g1".into()],
            producer: true,
            ..args()
        };
        assert_eq!(msg(bindings_to_add(&producer)), "--producer needs --topic");
        // A host flag without its principal flag.
        let host = AclArgs {
            allow_principal: vec!["User:p".into()],
            deny_host: vec!["10.0.0.1".into()],
            topic: vec!["t".into()],
            ..args()
        };
        assert_eq!(
            msg(bindings_to_add(&host)),
            "--deny-host needs --deny-principal"
        );
        // A huge name is clipped in the error.
        let huge = AclArgs {
            allow_principal: vec!["User:p".into()],
            topic: vec!["x".repeat(100_000)],
            ..args()
        };
        let m = msg(bindings_to_add(&huge));
        assert!(m.len() < 600 && m.contains("(100000 bytes)"), "{}", m.len());
    }

    #[test]
    fn producer_and_consumer_together_name_each_binding_once() {
        let a = AclArgs {
            allow_principal: vec!["User:pc".into()],
            topic: vec!["t".into()],
            group: vec!["g".into()],
            producer: true,
            consumer: true,
            ..args()
        };
        let b = bindings_to_add(&a).unwrap();
        let describes = b
            .iter()
            .filter(|x| x.operation == AclOperation::Describe as i32)
            .count();
        assert_eq!(describes, 1);
        // Write, Describe, Create, Read on the topic; Read on the group.
        assert_eq!(b.len(), 5);
    }

    #[test]
    fn add_is_the_product_of_principals_hosts_operations_resources() {
        let a = AclArgs {
            allow_principal: vec!["User:alice".into(), "User:bob".into()],
            operation: vec!["read".into(), "Describe".into()],
            topic: vec!["t".into()],
            group: vec!["g".into()],
            ..args()
        };
        // Describe on a group is fine, the server judges Read on a group too.
        let b = bindings_to_add(&a).unwrap();
        assert_eq!(b.len(), 2 * 2 * 2);
        assert!(b.iter().all(|x| x.host == "*"));
        let producer = AclArgs {
            allow_principal: vec!["User:p".into()],
            topic: vec!["t".into()],
            producer: true,
            idempotent: true,
            ..args()
        };
        let ops: Vec<i32> = bindings_to_add(&producer)
            .unwrap()
            .iter()
            .map(|b| b.operation)
            .collect();
        assert_eq!(
            ops,
            vec![
                AclOperation::Write as i32,
                AclOperation::Describe as i32,
                AclOperation::Create as i32,
                AclOperation::IdempotentWrite as i32
            ]
        );
    }

    #[test]
    fn bad_add_flags_are_named() {
        let e = |a: AclArgs| bindings_to_add(&a).unwrap_err().message;
        assert!(
            e(AclArgs {
                topic: vec!["t".into()],
                ..args()
            })
            .contains("--allow-principal")
        );
        assert!(
            e(AclArgs {
                allow_principal: vec!["User:a".into()],
                ..args()
            })
            .contains("resource")
        );
        assert!(
            e(AclArgs {
                allow_principal: vec!["User:a".into()],
                topic: vec!["t".into()],
                operation: vec!["fly".into()],
                ..args()
            })
            .contains("--operation \"fly\"")
        );
        assert!(
            e(AclArgs {
                allow_principal: vec!["User:a".into()],
                topic: vec!["t".into()],
                resource_pattern_type: Some("match".into()),
                ..args()
            })
            .contains("literal or prefixed")
        );
        assert!(
            filters(&args(), true)
                .unwrap_err()
                .message
                .contains("resource")
        );
    }

    #[test]
    fn list_without_flags_is_one_match_all_filter_and_text_is_kafkas() {
        let f = filters(&args(), false).unwrap();
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].resource_type, AclResourceType::Any as i32);
        let rows = vec![row(&wire(
            ResourceType::Topic,
            "t",
            AclPatternType::Literal,
            "User:a",
            "*",
            AclOperation::Read,
            AclPermissionType::Allow,
        ))];
        assert_eq!(
            text("Current ACLs for resource", &rows),
            "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=t, patternType=LITERAL)`:\n \t(principal=User:a, host=*, operation=READ, permissionType=ALLOW)\n"
        );
    }
}
