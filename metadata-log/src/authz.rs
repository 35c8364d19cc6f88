//! A node's request authorization (#23): who the caller is ([`Caller`], from its TLS client
//! certificate through `ssl_principal_mapping_rules`) and whether it may do what it asks
//! ([`Authz::check`] over the image's ACLs, [`Authz::check_node`] for broker and controller
//! RPCs). Both controllers and brokers use it; the decision itself is [`crate::acl::authorize`].
//!
//! With `authorizer = "none"` (the default) every check passes and nothing is logged. With
//! `"standard"`, a denial returns [`Denied`] (the Kafka code the reply carries and a message
//! naming principal, operation and resource) and is logged at INFO, at most once per second
//! with a count of the denials in between (Kafka's authorizer log).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use keel_proto::ErrorCode;
use keel_runtime::principal::{self, NodeRole, PrincipalMapper};
use keel_runtime::settings::{ConfigError, Settings};
use keel_runtime::tls::PeerInfo;

use crate::acl::{self, AclsImage, Action, AuthorizerConfig, Operation, ResourceType};

/// The gRPC metadata key of a session token (`Bearer <token>`).
pub const AUTHORIZATION: &str = "authorization";

/// The gRPC metadata key (binary) of the principal a broker forwards a client's request for
/// (Kafka's EnvelopeRequest principal, KIP-590): the client's `User:<name>`, UTF-8.
pub const FORWARDED_PRINCIPAL: &str = "keel-forwarded-principal-bin";

/// The gRPC metadata key (binary) of the forwarded client's IP address (Kafka's
/// EnvelopeRequest ClientHostAddress), UTF-8; may be absent.
pub const FORWARDED_HOST: &str = "keel-forwarded-host-bin";

/// Longest forwarded principal or host accepted, bytes (an ACL's principal is at most 1,024).
const MAX_FORWARDED_BYTES: usize = 1024;

/// `User:<name>` of a `Bearer` session token, or why it is refused.
fn token_principal(inner: &Inner, value: &str) -> Result<String, String> {
    let token = value
        .strip_prefix("Bearer ")
        .ok_or_else(|| "the authorization metadata is not `Bearer <session token>`".to_string())?;
    let images = inner
        .images
        .get()
        .ok_or_else(|| "this node cannot check session tokens yet".to_string())?;
    let image = images.borrow().clone();
    let now = u64::try_from(keel_runtime::clock::wall_clock_ms()).unwrap_or(0);
    crate::scram::verify_token(token, |u, m| image.scram_credential(u, m), now)
        .map(|user| format!("User:{user}"))
        .map_err(|e| e.to_string())
}

/// A forwarded principal or host: UTF-8 of at most [`MAX_FORWARDED_BYTES`] without control
/// characters.
fn forwarded_text(bytes: Option<&[u8]>) -> Option<String> {
    let text = std::str::from_utf8(bytes?).ok()?;
    (text.len() <= MAX_FORWARDED_BYTES && !text.chars().any(char::is_control))
        .then(|| text.to_string())
}

/// Who sent a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// `User:<name>`, or why the certificate gives no principal.
    pub principal: Result<String, String>,
    /// The client's IP address (canonical form), or empty when unknown.
    pub host: String,
    /// The request carried a session token this node refused (expired, revoked by a
    /// changed or deleted credential, forged): refusals are SASL_AUTHENTICATION_FAILED, not
    /// the resource's *_AUTHORIZATION_FAILED, as Kafka answers a client whose credential is
    /// no longer valid (KIP-152, KIP-368).
    pub token_refused: bool,
}

/// Why a request was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denied {
    /// TOPIC_, GROUP_ or CLUSTER_AUTHORIZATION_FAILED, or SASL_AUTHENTICATION_FAILED for a
    /// refused session token ([`Caller::token_refused`]).
    pub code: ErrorCode,
    /// Names the principal, the operation and the resource.
    pub message: String,
}

impl Denied {
    /// The error for a reply.
    pub fn to_proto(&self) -> keel_proto::common::Error {
        self.code.to_proto(self.message.clone())
    }
}

#[derive(Debug)]
struct Inner {
    config: AuthorizerConfig,
    node_format: String,
    /// Denial log: second of the last line, denials since.
    last_log_s: AtomicU64,
    suppressed: AtomicU64,
    /// The node's images, for the SCRAM credentials session tokens are checked against
    /// ([`Authz::attach_images`]); unset until the node has one.
    images: std::sync::OnceLock<tokio::sync::watch::Receiver<crate::MetadataImage>>,
}

impl PartialEq for Inner {
    fn eq(&self, other: &Self) -> bool {
        self.config == other.config && self.node_format == other.node_format
    }
}

impl Eq for Inner {}

/// A node's authorizer: off, or Kafka's StandardAuthorizer with its settings. Cheap to clone;
/// equal when configured alike.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Authz {
    inner: Option<Arc<Inner>>,
    mapper: PrincipalMapper,
}

impl Authz {
    /// Everything allowed (`authorizer = "none"`).
    pub fn disabled() -> Authz {
        Authz::default()
    }

    /// The standard authorizer with these settings (tests and [`Authz::from_settings`]).
    pub fn standard(
        config: AuthorizerConfig,
        mapper: PrincipalMapper,
        node_format: &str,
    ) -> Result<Authz, String> {
        principal::validate_node_principal_format(node_format)?;
        Ok(Authz {
            inner: Some(Arc::new(Inner {
                config,
                node_format: node_format.to_string(),
                last_log_s: AtomicU64::new(0),
                suppressed: AtomicU64::new(0),
                images: std::sync::OnceLock::new(),
            })),
            mapper,
        })
    }

    /// From a node's settings (`authorizer`, `super_users`, `allow_everyone_if_no_acl_found`,
    /// `ssl_principal_mapping_rules`, `node_principal_format`); errors name the key.
    pub fn from_settings(s: &Settings) -> Result<Authz, ConfigError> {
        let invalid =
            |key: &'static str| move |reason: String| ConfigError::Invalid { key, reason };
        // Every key is checked, also when no authorizer uses them yet.
        let mapper = PrincipalMapper::parse(&s.require::<String>("ssl_principal_mapping_rules"))
            .map_err(|e| invalid("ssl_principal_mapping_rules")(e.0))?;
        let super_users = AuthorizerConfig::parse_super_users(
            &s.get::<String>("super_users").unwrap_or_default(),
        )
        .map_err(|e| invalid("super_users")(e.0))?;
        let allow_everyone = s.require::<bool>("allow_everyone_if_no_acl_found");
        let node_format = s.require::<String>("node_principal_format");
        let standard = Authz::standard(
            AuthorizerConfig {
                super_users,
                allow_everyone_if_no_acl_found: allow_everyone,
            },
            mapper.clone(),
            &node_format,
        )
        .map_err(invalid("node_principal_format"))?;
        if s.require::<String>("authorizer") == "standard" {
            Ok(standard)
        } else {
            Ok(Authz {
                inner: None,
                mapper,
            })
        }
    }

    /// Whether an authorizer is configured (ACL RPCs answer SECURITY_DISABLED otherwise).
    pub fn enabled(&self) -> bool {
        self.inner.is_some()
    }

    /// The caller of a request served by `keel_runtime::tls::incoming`.
    pub fn caller(&self, peer: Option<&PeerInfo>) -> Caller {
        Caller {
            principal: self.mapper.principal_of(peer),
            host: peer
                .and_then(|p| p.remote_addr)
                .map(|a| a.ip().to_canonical().to_string())
                .unwrap_or_default(),
            token_refused: false,
        }
    }

    /// Gives the authorizer the node's images, whose SCRAM credentials session tokens are
    /// checked against (the first call wins; every clone shares it). Without it a token is
    /// refused.
    pub fn attach_images(&self, images: tokio::sync::watch::Receiver<crate::MetadataImage>) {
        if let Some(inner) = &self.inner {
            let _ = inner.images.set(images);
        }
    }

    /// The caller of a gRPC request: with the metadata `authorization: Bearer <token>` (a
    /// session token of `ScramAuthenticate`, #23) `User:<its user>`, or why the token is
    /// refused; with [`FORWARDED_PRINCIPAL`] (a broker forwarding a client's admin request to
    /// the controllers) that client, if the sender holds CLUSTER_ACTION on the cluster (Kafka:
    /// an EnvelopeRequest needs CLUSTER_ACTION, and the request inside is authorized as the
    /// client, KIP-590), else why the sender may not forward; else the principal of the
    /// client certificate.
    pub fn caller_of<T>(&self, request: &tonic::Request<T>) -> Caller {
        let mut caller = self.caller(keel_runtime::tls::peer_info(request));
        let Some(inner) = &self.inner else {
            return caller;
        };
        if let Some(v) = request.metadata().get_bin(FORWARDED_PRINCIPAL) {
            let host = request.metadata().get_bin(FORWARDED_HOST);
            let claimed = forwarded_text(v.to_bytes().ok().as_deref())
                .filter(|p| p.starts_with("User:"))
                .ok_or_else(|| "the forwarded principal is not `User:<name>`".to_string());
            let host = match host {
                None => Ok(String::new()),
                Some(h) => forwarded_text(h.to_bytes().ok().as_deref())
                    .ok_or_else(|| "the forwarded client host is not text".to_string()),
            };
            let sender = match inner.images.get() {
                None => Err("this node cannot check forwarded requests yet".to_string()),
                Some(images) => {
                    let image = images.borrow().clone();
                    self.check(
                        image.acls(),
                        &caller,
                        Action::cluster(Operation::ClusterAction),
                    )
                    .map_err(|d| format!("a forwarded request needs ClusterAction: {}", d.message))
                }
            };
            return match (sender, claimed, host) {
                (Ok(()), Ok(principal), Ok(host)) => Caller {
                    principal: Ok(principal),
                    host,
                    token_refused: false,
                },
                (Err(why), _, _) | (_, Err(why), _) | (_, _, Err(why)) => Caller {
                    principal: Err(why),
                    ..caller
                },
            };
        }
        if let Some(v) = request.metadata().get(AUTHORIZATION) {
            caller.principal = token_principal(inner, v.to_str().unwrap_or(""));
            caller.token_refused = caller.principal.is_err();
        }
        caller
    }

    /// Whether `caller` may perform `action` under `acls`.
    pub fn check(
        &self,
        acls: &AclsImage,
        caller: &Caller,
        action: Action<'_>,
    ) -> Result<(), Denied> {
        let Some(inner) = &self.inner else {
            return Ok(());
        };
        let code = match action.resource_type {
            ResourceType::Topic => ErrorCode::TopicAuthorizationFailed,
            ResourceType::Group => ErrorCode::GroupAuthorizationFailed,
            ResourceType::Cluster | ResourceType::TransactionalId => {
                ErrorCode::ClusterAuthorizationFailed
            }
        };
        let principal = match &caller.principal {
            Ok(p) => p,
            Err(why) if caller.token_refused => {
                return Err(self.deny(inner, ErrorCode::SaslAuthenticationFailed, why.clone()));
            }
            Err(why) => return Err(self.deny(inner, code, why.clone())),
        };
        let d = acl::authorize(acls, &inner.config, principal, &caller.host, action);
        if d.allowed() {
            return Ok(());
        }
        Err(self.deny(
            inner,
            code,
            format!(
                "{principal} may not {} {} {:?} ({})",
                action.operation,
                action.resource_type,
                action.resource_name,
                d.reason()
            ),
        ))
    }

    /// Whether `caller` may act as node `id` of `role`: it must be the principal
    /// `node_principal_format` gives for that id, and hold ClusterAction on the cluster.
    /// Failures are CLUSTER_AUTHORIZATION_FAILED.
    pub fn check_node(
        &self,
        acls: &AclsImage,
        caller: &Caller,
        role: NodeRole,
        id: i64,
    ) -> Result<(), Denied> {
        let Some(inner) = &self.inner else {
            return Ok(());
        };
        let expected = principal::node_principal(&inner.node_format, role, id);
        match &caller.principal {
            Ok(p) if *p == expected => {}
            Ok(p) => {
                return Err(self.deny(
                    inner,
                    ErrorCode::ClusterAuthorizationFailed,
                    format!(
                        "{p} may not act as {} {id}: only {expected} may (node_principal_format)",
                        match role {
                            NodeRole::Broker => "broker",
                            NodeRole::Controller => "controller",
                        }
                    ),
                ));
            }
            Err(why) => {
                return Err(self.deny(inner, ErrorCode::ClusterAuthorizationFailed, why.clone()));
            }
        }
        self.check(acls, caller, Action::cluster(Operation::ClusterAction))
    }

    /// Whether `caller` is some controller of `voters` (Raft RPCs).
    pub fn check_controller(
        &self,
        acls: &AclsImage,
        caller: &Caller,
        voters: impl IntoIterator<Item = u64>,
    ) -> Result<(), Denied> {
        let Some(inner) = &self.inner else {
            return Ok(());
        };
        let id = voters.into_iter().find(|id| {
            caller.principal.as_deref().ok()
                == Some(
                    principal::node_principal(&inner.node_format, NodeRole::Controller, *id as i64)
                        .as_str(),
                )
        });
        match id {
            Some(id) => self.check_node(acls, caller, NodeRole::Controller, id as i64),
            None => Err(self.deny(
                inner,
                ErrorCode::ClusterAuthorizationFailed,
                format!(
                    "{} is not a controller of this quorum (node_principal_format)",
                    caller
                        .principal
                        .as_deref()
                        .unwrap_or("an unmapped certificate")
                ),
            )),
        }
    }

    /// An idempotent producer may get a producer id with IDEMPOTENT_WRITE on the cluster or
    /// WRITE on some topic (KIP-679).
    pub fn check_idempotent_write(&self, acls: &AclsImage, caller: &Caller) -> Result<(), Denied> {
        let Some(inner) = &self.inner else {
            return Ok(());
        };
        if self
            .check(acls, caller, Action::cluster(Operation::IdempotentWrite))
            .is_ok()
        {
            return Ok(());
        }
        if let Ok(p) = &caller.principal
            && acl::authorize_any_of_type(
                acls,
                &inner.config,
                p,
                &caller.host,
                ResourceType::Topic,
                Operation::Write,
            )
        {
            return Ok(());
        }
        Err(self.deny(
            inner,
            ErrorCode::ClusterAuthorizationFailed,
            format!(
                "{} may not IDEMPOTENT_WRITE CLUSTER and may WRITE no topic",
                caller
                    .principal
                    .as_deref()
                    .unwrap_or("an unmapped certificate")
            ),
        ))
    }

    fn deny(&self, inner: &Inner, code: ErrorCode, message: String) -> Denied {
        let now_s = keel_runtime::clock::monotonic_ms() / 1000;
        let last = inner.last_log_s.load(Ordering::Relaxed);
        if now_s != last
            && inner
                .last_log_s
                .compare_exchange(last, now_s, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            let before = inner.suppressed.swap(0, Ordering::Relaxed);
            tracing::info!(
                code = code.name(),
                suppressed = before,
                "authorizer: denied: {message}"
            );
        } else {
            inner.suppressed.fetch_add(1, Ordering::Relaxed);
        }
        Denied { code, message }
    }
}

/// CreateTopics: CREATE on the cluster, or on every topic named (Kafka:
/// `ControllerApis.createTopics`).
pub fn check_create_topics<'a>(
    a: &Authz,
    c: &Caller,
    acls: &AclsImage,
    names: impl IntoIterator<Item = &'a str>,
) -> Result<(), Denied> {
    if !a.enabled() || a.check(acls, c, Action::cluster(Operation::Create)).is_ok() {
        return Ok(());
    }
    names
        .into_iter()
        .try_for_each(|t| a.check(acls, c, Action::topic(Operation::Create, t)))
}

/// DescribeConfigs / AlterConfigs: `op` (DESCRIBE_CONFIGS or ALTER_CONFIGS) on each
/// `(resource_type, resource_name)` of the request: the topic, or the cluster for broker and
/// cluster resources (Kafka: `AuthHelper.authorizeConfigResources` callers in `KafkaApis` and
/// `ControllerApis`).
pub fn check_config_resources<'a>(
    a: &Authz,
    c: &Caller,
    acls: &AclsImage,
    op: Operation,
    resources: impl IntoIterator<Item = (i32, &'a str)>,
) -> Result<(), Denied> {
    resources
        .into_iter()
        .try_for_each(|(ty, name)| a.check(acls, c, Action::config_resource(ty, name, op)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::acl::{AclBinding, PatternType, Permission};

    fn caller(p: &str) -> Caller {
        Caller {
            principal: Ok(p.into()),
            host: "127.0.0.1".into(),
            token_refused: false,
        }
    }

    #[test]
    fn disabled_allows_everything() {
        let a = Authz::disabled();
        let acls = AclsImage::default();
        assert!(
            a.check(&acls, &caller("User:x"), Action::cluster(Operation::Alter))
                .is_ok()
        );
        assert!(
            a.check_node(&acls, &caller("User:x"), NodeRole::Broker, 1)
                .is_ok()
        );
    }

    #[test]
    fn nodes_must_be_who_they_claim() {
        let cfg = AuthorizerConfig {
            super_users: ["User:broker-1", "User:broker-2", "User:controller-1"]
                .into_iter()
                .map(String::from)
                .collect(),
            allow_everyone_if_no_acl_found: false,
        };
        let a = Authz::standard(cfg, PrincipalMapper::default(), "User:{role}-{id}").unwrap();
        let acls = AclsImage::default();
        assert!(
            a.check_node(&acls, &caller("User:broker-1"), NodeRole::Broker, 1)
                .is_ok()
        );
        let e = a
            .check_node(&acls, &caller("User:broker-2"), NodeRole::Broker, 1)
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::ClusterAuthorizationFailed);
        assert!(e.message.contains("only User:broker-1"), "{}", e.message);
        // The right name without ClusterAction (not a super user, no ACL) is refused too.
        assert!(
            a.check_node(&acls, &caller("User:broker-3"), NodeRole::Broker, 3)
                .is_err()
        );
        assert!(
            a.check_controller(&acls, &caller("User:controller-1"), [1, 2, 3])
                .is_ok()
        );
        assert!(
            a.check_controller(&acls, &caller("User:broker-1"), [1, 2, 3])
                .is_err()
        );
        let unmapped = Caller {
            principal: Err("no rule maps CN=x".into()),
            host: String::new(),
            token_refused: false,
        };
        assert!(a.check_node(&acls, &unmapped, NodeRole::Broker, 1).is_err());
        // A refused session token is an authentication failure whatever the resource.
        let revoked = Caller {
            principal: Err("the session token was revoked".into()),
            host: String::new(),
            token_refused: true,
        };
        let topic = Action {
            operation: Operation::Read,
            resource_type: ResourceType::Topic,
            resource_name: "t",
        };
        assert_eq!(
            a.check(&acls, &revoked, topic).unwrap_err().code,
            ErrorCode::SaslAuthenticationFailed
        );
    }

    #[test]
    fn a_forwarded_request_is_the_clients_if_the_sender_may_forward() {
        let authz = |super_users: &[&str]| {
            let cfg = AuthorizerConfig {
                super_users: super_users.iter().map(|s| s.to_string()).collect(),
                allow_everyone_if_no_acl_found: false,
            };
            let a = Authz::standard(cfg, PrincipalMapper::default(), "User:{role}-{id}").unwrap();
            let (_tx, rx) = tokio::sync::watch::channel(crate::MetadataImage::default());
            a.attach_images(rx);
            a
        };
        let request = |principal: &[u8], host: Option<&[u8]>| {
            let mut r = tonic::Request::new(());
            let m = r.metadata_mut();
            m.insert_bin(
                FORWARDED_PRINCIPAL,
                tonic::metadata::MetadataValue::from_bytes(principal),
            );
            if let Some(h) = host {
                m.insert_bin(
                    FORWARDED_HOST,
                    tonic::metadata::MetadataValue::from_bytes(h),
                );
            }
            r
        };
        // Without TLS the sender is User:ANONYMOUS: a super user here, so it holds ClusterAction.
        let node = authz(&["User:ANONYMOUS"]);
        let c = node.caller_of(&request("User:älice".as_bytes(), Some(b"10.0.0.7")));
        assert_eq!(c.principal, Ok("User:älice".to_string()));
        assert_eq!(c.host, "10.0.0.7");
        for bad in [&b"alice"[..], b"User:a\nb", b"\xff"] {
            let c = node.caller_of(&request(bad, None));
            assert!(c.principal.is_err(), "{bad:?}: {c:?}");
        }
        // A sender without ClusterAction cannot speak for anyone.
        let c = authz(&["User:admin"]).caller_of(&request(b"User:admin", None));
        let why = c.principal.unwrap_err();
        assert!(
            why.contains("a forwarded request needs ClusterAction"),
            "{why}"
        );
        assert!(
            why.contains("User:ANONYMOUS may not CLUSTER_ACTION"),
            "{why}"
        );
        // Without an authorizer the metadata means nothing.
        let c = Authz::disabled().caller_of(&request(b"User:admin", None));
        assert_eq!(c.principal, Ok("User:ANONYMOUS".to_string()));
    }

    #[test]
    fn idempotent_write_from_any_topic_write() {
        let a = Authz::standard(
            AuthorizerConfig::default(),
            PrincipalMapper::default(),
            "User:{role}-{id}",
        )
        .unwrap();
        let b = AclBinding::new(
            ResourceType::Topic,
            "t",
            PatternType::Literal,
            "User:alice",
            "*",
            Operation::Write,
            Permission::Allow,
        )
        .unwrap();
        let acls = AclsImage::from_map([(uuid::Uuid::from_u128(1), Arc::new(b))].into());
        assert!(
            a.check_idempotent_write(&acls, &caller("User:alice"))
                .is_ok()
        );
        let e = a
            .check_idempotent_write(&acls, &caller("User:bob"))
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::ClusterAuthorizationFailed);
        let e = a
            .check(
                &acls,
                &caller("User:bob"),
                Action::topic(Operation::Write, "t"),
            )
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::TopicAuthorizationFailed);
        assert!(
            e.message.contains("User:bob may not WRITE TOPIC \"t\""),
            "{}",
            e.message
        );
    }
}
