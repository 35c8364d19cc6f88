//! Who a connection is (#23): the principal of a TLS client certificate, mapped as Kafka's
//! `ssl.principal.mapping.rules` (KIP-371, `SslPrincipalMapper`), and the identity rule that
//! binds a node's principal to the node id it claims.
//!
//! - A client without a certificate (plaintext, or TLS without a client certificate) is
//!   `User:ANONYMOUS`, as Kafka's `DefaultKafkaPrincipalBuilder`.
//! - With a certificate, the leaf's subject distinguished name in RFC 2253 form (most specific
//!   RDN first, `CN=broker-1,O=Keel`, as Java's `X500Principal.getName()`) goes through the
//!   rules in order: `DEFAULT` keeps the DN; `RULE:pattern/replacement/[LU]` applies when the
//!   regex matches the whole DN, replacing (`$1` for the first group) and lower- (`L`) or
//!   upper-casing (`U`) the result. No matching rule: the connection has no usable principal
//!   and its requests are refused (Kafka closes it).
//! - Node identity ([`node_principal`]): a broker or controller claiming id N must be the
//!   principal `node_principal_format` gives for N (default `User:{role}-{id}`, so broker 2 is
//!   `User:broker-2`, controller 1 `User:controller-1`).

use std::sync::Arc;

use regex::Regex;

use crate::tls::PeerInfo;

/// Principal of an unauthenticated connection (Kafka: `KafkaPrincipal.ANONYMOUS`).
pub const ANONYMOUS: &str = "User:ANONYMOUS";

/// Default `node_principal_format`.
pub const DEFAULT_NODE_PRINCIPAL_FORMAT: &str = "User:{role}-{id}";

/// One mapping rule.
#[derive(Debug, Clone)]
enum Rule {
    /// Keep the DN.
    Default,
    /// Replace when the pattern matches the whole DN.
    Replace {
        pattern: Regex,
        replacement: String,
        case: Case,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Case {
    Keep,
    Lower,
    Upper,
}

/// Why the rules could not be parsed (the node does not start).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("ssl_principal_mapping_rules: {0}")]
pub struct RulesError(pub String);

/// Parsed `ssl_principal_mapping_rules` (equal when parsed from the same text).
#[derive(Debug, Clone)]
pub struct PrincipalMapper {
    rules: Arc<Vec<Rule>>,
    source: Arc<str>,
}

impl Default for PrincipalMapper {
    fn default() -> Self {
        PrincipalMapper {
            rules: Arc::new(vec![Rule::Default]),
            source: "DEFAULT".into(),
        }
    }
}

impl PartialEq for PrincipalMapper {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

impl Eq for PrincipalMapper {}

/// Reads up to the next unescaped `/` (a `\/` stands for `/`); returns the text and the rest
/// after the slash.
fn until_slash(s: &str) -> Option<(String, &str)> {
    let mut out = String::new();
    let mut chars = s.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some((_, '/')) => out.push('/'),
                Some((_, other)) => {
                    out.push('\\');
                    out.push(other);
                }
                None => out.push('\\'),
            },
            '/' => return Some((out, &s[i + 1..])),
            c => out.push(c),
        }
    }
    None
}

/// Java's `$1` in a replacement is the group 1 even when letters follow; the regex crate
/// would read `$1abc` as a group named `1abc`, so groups are braced: `${1}`.
fn java_replacement(r: &str) -> String {
    let mut out = String::with_capacity(r.len() + 4);
    let mut chars = r.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '$' && chars.peek().is_some_and(char::is_ascii_digit) {
            out.push_str("${");
            while let Some(d) = chars.peek().copied().filter(char::is_ascii_digit) {
                out.push(d);
                chars.next();
            }
            out.push('}');
        } else if c == '\\' && chars.peek() == Some(&'$') {
            out.push_str("$$");
            chars.next();
        } else {
            out.push(c);
        }
    }
    out
}

impl PrincipalMapper {
    /// Parses Kafka's syntax: rules separated by commas (spaces allowed after a comma), each
    /// `DEFAULT` or `RULE:pattern/replacement/` with an optional `L` or `U` after the last
    /// slash; `/` inside a pattern or replacement is written `\/`. Errors name the rule.
    pub fn parse(s: &str) -> Result<PrincipalMapper, RulesError> {
        let mut rules = Vec::new();
        let mut rest = s.trim();
        if rest.is_empty() {
            return Err(RulesError("empty (use DEFAULT to keep the DN)".into()));
        }
        while !rest.is_empty() {
            if let Some(r) = rest.strip_prefix("DEFAULT") {
                rules.push(Rule::Default);
                rest = r;
            } else if let Some(r) = rest.strip_prefix("RULE:") {
                let bad = |why: &str| RulesError(format!("rule {:?}: {why}", clip(rest)));
                let (pattern, r) = until_slash(r).ok_or_else(|| bad("no / after the pattern"))?;
                let (replacement, r) =
                    until_slash(r).ok_or_else(|| bad("no / after the replacement"))?;
                let (case, r) = match r.chars().next() {
                    Some('L') => (Case::Lower, &r[1..]),
                    Some('U') => (Case::Upper, &r[1..]),
                    _ => (Case::Keep, r),
                };
                let pattern = Regex::new(&format!("^(?:{pattern})$"))
                    .map_err(|e| bad(&format!("invalid pattern: {e}")))?;
                rules.push(Rule::Replace {
                    pattern,
                    replacement: java_replacement(&replacement),
                    case,
                });
                rest = r;
            } else {
                return Err(RulesError(format!(
                    "{:?} is neither DEFAULT nor RULE:pattern/replacement/[LU]",
                    clip(rest)
                )));
            }
            rest = rest.trim_start();
            if let Some(r) = rest.strip_prefix(',') {
                rest = r.trim_start();
                if rest.is_empty() {
                    return Err(RulesError("a comma ends the rules".into()));
                }
            } else if !rest.is_empty() {
                return Err(RulesError(format!(
                    "expected a comma before {:?}",
                    clip(rest)
                )));
            }
        }
        Ok(PrincipalMapper {
            rules: Arc::new(rules),
            source: s.trim().into(),
        })
    }

    /// The principal name for a distinguished name, or `None` when no rule matches.
    pub fn map(&self, dn: &str) -> Option<String> {
        for rule in self.rules.iter() {
            match rule {
                Rule::Default => return Some(dn.to_string()),
                Rule::Replace {
                    pattern,
                    replacement,
                    case,
                } => {
                    if pattern.is_match(dn) {
                        let out = pattern.replace_all(dn, replacement.as_str()).into_owned();
                        return Some(match case {
                            Case::Keep => out,
                            Case::Lower => out.to_lowercase(),
                            Case::Upper => out.to_uppercase(),
                        });
                    }
                }
            }
        }
        None
    }

    /// The principal (`User:<name>`) of a connection: [`ANONYMOUS`] without a client
    /// certificate; `Err` with the DN when the certificate cannot be read or no rule maps its
    /// subject.
    pub fn principal_of(&self, peer: Option<&PeerInfo>) -> Result<String, String> {
        let Some(leaf) = peer
            .and_then(|p| p.peer_certs.as_ref())
            .and_then(|c| c.first())
        else {
            return Ok(ANONYMOUS.to_string());
        };
        let dn = subject_dn(leaf.as_ref())?;
        match self.map(&dn) {
            Some(name) if !name.is_empty() => Ok(format!("User:{name}")),
            _ => Err(format!(
                "no ssl_principal_mapping_rules rule maps the certificate subject {dn:?}"
            )),
        }
    }
}

fn clip(s: &str) -> &str {
    let mut end = s.len().min(80);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// The subject DN of a DER certificate in RFC 2253 form: RDNs most specific first, `,`
/// between RDNs, `+` inside a multi-valued one, short names for the usual attributes and the
/// dotted OID otherwise, `,+"\<>;` and a leading `#` or space escaped with `\`.
pub fn subject_dn(der: &[u8]) -> Result<String, String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der)
        .map_err(|e| format!("the client certificate cannot be parsed: {e}"))?;
    let mut rdns = Vec::new();
    for rdn in cert.subject().iter() {
        let mut parts = Vec::new();
        for attr in rdn.iter() {
            let oid = attr.attr_type().to_id_string();
            let key = match oid.as_str() {
                "2.5.4.3" => "CN".to_string(),
                "2.5.4.6" => "C".to_string(),
                "2.5.4.7" => "L".to_string(),
                "2.5.4.8" => "ST".to_string(),
                "2.5.4.9" => "STREET".to_string(),
                "2.5.4.10" => "O".to_string(),
                "2.5.4.11" => "OU".to_string(),
                "0.9.2342.19200300.100.1.25" => "DC".to_string(),
                "0.9.2342.19200300.100.1.1" => "UID".to_string(),
                other => other.to_string(),
            };
            let value = attr
                .as_str()
                .map_err(|e| format!("certificate subject attribute {key} is not text: {e}"))?;
            parts.push(format!("{key}={}", escape_rdn_value(value)));
        }
        rdns.push(parts.join("+"));
    }
    rdns.reverse();
    Ok(rdns.join(","))
}

fn escape_rdn_value(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for (i, c) in v.chars().enumerate() {
        let leading = i == 0 && (c == '#' || c == ' ');
        let trailing = i + 1 == v.chars().count() && c == ' ';
        if matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';') || leading || trailing {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// A node's role for [`node_principal`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeRole {
    /// A broker.
    Broker,
    /// A controller.
    Controller,
}

/// Checks `node_principal_format`: it must contain `{id}` (or every node would share one
/// principal) and give a `User:` principal.
pub fn validate_node_principal_format(format: &str) -> Result<(), String> {
    if !format.contains("{id}") {
        return Err(format!(
            "node_principal_format {format:?} has no {{id}}: every node would have the same principal"
        ));
    }
    if !format.starts_with("User:") || format.len() <= "User:".len() {
        return Err(format!(
            "node_principal_format {format:?} must start with User: and name the node"
        ));
    }
    Ok(())
}

/// The principal node `id` of `role` must have: `format` with `{role}` replaced by `broker`
/// or `controller` and `{id}` by the id.
pub fn node_principal(format: &str, role: NodeRole, id: i64) -> String {
    let role = match role {
        NodeRole::Broker => "broker",
        NodeRole::Controller => "controller",
    };
    format
        .replace("{role}", role)
        .replace("{id}", &id.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_keeps_the_dn_and_rules_apply_in_order() {
        let m = PrincipalMapper::default();
        assert_eq!(
            m.map("CN=broker-1,O=Keel").as_deref(),
            Some("CN=broker-1,O=Keel")
        );
        let m = PrincipalMapper::parse(
            r"RULE:^CN=([A-Za-z0-9.-]+),OU=ops$/$1-admin/L, RULE:^CN=(.*?)(,.*)?$/$1/U,DEFAULT",
        )
        .unwrap();
        assert_eq!(m.map("CN=Alice,OU=ops").as_deref(), Some("alice-admin"));
        assert_eq!(m.map("CN=bob,O=x").as_deref(), Some("BOB"));
        let m = PrincipalMapper::parse(r"RULE:^CN=([^,]+)$/$1/").unwrap();
        assert_eq!(m.map("CN=broker-2").as_deref(), Some("broker-2"));
        assert_eq!(m.map("CN=broker-2,O=x"), None);
        // `\/` is a slash inside a pattern or replacement.
        let m = PrincipalMapper::parse(r"RULE:^CN=(.*)$/svc\/$1/").unwrap();
        assert_eq!(m.map("CN=a").as_deref(), Some("svc/a"));
    }

    #[test]
    fn bad_rules_are_named() {
        for (rules, says) in [
            ("", "empty"),
            ("RULE:^CN=(.*)$", "no / after the pattern"),
            ("RULE:^CN=(.*)$/$1", "no / after the replacement"),
            ("RULE:(/x/", "invalid pattern"),
            ("DEFALT", "neither DEFAULT"),
            ("DEFAULT,", "comma ends"),
            ("DEFAULT DEFAULT", "expected a comma"),
        ] {
            let e = PrincipalMapper::parse(rules).unwrap_err().to_string();
            assert!(e.contains(says), "{rules:?}: {e}");
        }
    }

    #[test]
    fn certificate_subjects_become_principals() {
        let mut params = rcgen::CertificateParams::new(vec!["broker-1".into()]).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "Keel, Inc");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "broker-1");
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        let der = cert.der().to_vec();
        assert_eq!(subject_dn(&der).unwrap(), r"CN=broker-1,O=Keel\, Inc");
        let peer = PeerInfo {
            remote_addr: None,
            peer_certs: Some(Arc::new(vec![cert.der().clone()])),
        };
        let m = PrincipalMapper::parse(r"RULE:^CN=([^,]+),.*$/$1/").unwrap();
        assert_eq!(m.principal_of(Some(&peer)).unwrap(), "User:broker-1");
        assert_eq!(m.principal_of(None).unwrap(), ANONYMOUS);
        let strict = PrincipalMapper::parse(r"RULE:^CN=x$/x/").unwrap();
        assert!(
            strict
                .principal_of(Some(&peer))
                .unwrap_err()
                .contains("CN=broker-1")
        );
    }

    #[test]
    fn node_principals() {
        let f = DEFAULT_NODE_PRINCIPAL_FORMAT;
        assert_eq!(node_principal(f, NodeRole::Broker, 2), "User:broker-2");
        assert_eq!(
            node_principal(f, NodeRole::Controller, 1),
            "User:controller-1"
        );
        assert!(validate_node_principal_format("User:node").is_err());
        assert!(validate_node_principal_format("broker-{id}").is_err());
        assert!(validate_node_principal_format("User:n{id}").is_ok());
    }
}
