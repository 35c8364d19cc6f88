//! Client settings from a properties file (#23): what Kafka's tools take with
//! `--command-config client.properties`, for keelctl and any program built on this library.
//!
//! The file is Java-properties style: `key=value` (or `key: value`) per line, `#` and `!`
//! comments, blank lines ignored; keys are Kafka's (Java client) or librdkafka's names:
//!
//! | key | meaning here |
//! | --- | --- |
//! | `security.protocol` | `PLAINTEXT` or `SSL` (the gRPC connections use TLS with `SSL`) |
//! | `ssl.ca.location`, `ssl.truststore.location` (`ssl.truststore.type=PEM`) | CA certificates (PEM) |
//! | `ssl.certificate.location` | client certificate chain (PEM) |
//! | `ssl.key.location` | its private key (PEM, unencrypted) |
//! | `ssl.keystore.location` (`ssl.keystore.type=PEM`) | one PEM file with the key and the chain |
//! | `ssl.endpoint.identification.algorithm` | `https` (the default); hostname checks cannot be turned off |
//! | `security.protocol` `SASL_SSL` / `SASL_PLAINTEXT` | TLS or not, and SASL/SCRAM: the client gets a session token from the controllers' `ScramAuthenticate` and sends it on every RPC |
//! | `sasl.mechanism` | `SCRAM-SHA-256` (default) or `SCRAM-SHA-512` |
//! | `sasl.username`, `sasl.password` (librdkafka) or `sasl.jaas.config` (Java: `ScramLoginModule required username="..." password="...";`) | the SCRAM user |
//!
//! Refused with an error naming the key and line: a malformed line, a key given twice,
//! another SASL mechanism (PLAIN, GSSAPI, OAUTHBEARER), SASL settings without a `SASL_*`
//! protocol or the reverse, a user without a password, encrypted keys (`ssl.key.password`,
//! `ssl.keystore.password`), JKS/PKCS12 stores, `SSL` / `SASL_SSL` without a CA.
//! Any other key (`client.id`, `bootstrap.servers`, ...) is ignored and returned in
//! [`ClientProperties::ignored`] so the caller can say so. Pure: parsing does not open the
//! files it names.

use std::collections::BTreeMap;
use std::path::PathBuf;

/// Longest properties file read, bytes.
pub const MAX_PROPERTIES_BYTES: usize = 1 << 20;

/// The TLS settings of a properties file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientProperties {
    /// CA certificates (PEM); `Some` exactly when `security.protocol` is `SSL` or a CA is
    /// given.
    pub tls_ca_file: Option<PathBuf>,
    /// Client certificate chain (PEM).
    pub tls_cert_file: Option<PathBuf>,
    /// Its private key (PEM).
    pub tls_key_file: Option<PathBuf>,
    /// SASL/SCRAM credentials (`SASL_SSL` / `SASL_PLAINTEXT`).
    pub sasl: Option<SaslSettings>,
    /// Keys this library does not use, in file order.
    pub ignored: Vec<String>,
}

/// A SASL/SCRAM user for Keel's gRPC connections.
#[derive(Clone, PartialEq, Eq)]
pub struct SaslSettings {
    /// The mechanism.
    pub mechanism: keel_metadata_log::scram::Mechanism,
    /// The user name.
    pub username: String,
    /// The password.
    pub password: String,
}

impl std::fmt::Debug for SaslSettings {
    /// The password is not printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SaslSettings")
            .field("mechanism", &self.mechanism)
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

/// `username="..."` and `password="..."` of a Java `sasl.jaas.config` for the SCRAM login
/// module.
fn jaas_credentials(jaas: &str) -> Result<(String, String), String> {
    if !jaas.contains("ScramLoginModule") {
        return Err("only org.apache.kafka.common.security.scram.ScramLoginModule is read".into());
    }
    let field = |name: &str| {
        let start = jaas.find(&format!("{name}=\""))? + name.len() + 2;
        let len = jaas[start..].find('"')?;
        Some(jaas[start..start + len].to_owned())
    };
    match (field("username"), field("password")) {
        (Some(u), Some(p)) => Ok((u, p)),
        _ => Err("needs username=\"...\" and password=\"...\"".into()),
    }
}

impl ClientProperties {
    /// The dialer of these settings: TLS with the CA (and the client certificate, if given),
    /// else plaintext. For SASL, authenticate with
    /// [`Admin::scram_authenticate`](crate::admin::Admin::scram_authenticate) over it and
    /// make clients send the token with
    /// [`Dialer::with_bearer`](keel_runtime::tls::Dialer::with_bearer), as keelctl does.
    ///
    /// Errors: a file that cannot be read or parsed (named).
    pub fn dialer(&self) -> Result<keel_runtime::tls::Dialer, keel_runtime::tls::TlsError> {
        use keel_runtime::tls::{ClientAuth, Dialer, TlsContext, TlsFiles};
        let Some(ca) = self.tls_ca_file.clone() else {
            return Ok(Dialer::default());
        };
        let identity = self.tls_cert_file.clone().zip(self.tls_key_file.clone());
        let ctx = TlsContext::load(TlsFiles { ca, identity }, ClientAuth::None)?;
        Ok(Dialer::new(Some(ctx)))
    }
}

/// Parses a properties file's text (module doc). Errors name the line and the key.
pub fn parse(text: &str) -> Result<ClientProperties, String> {
    if text.len() > MAX_PROPERTIES_BYTES {
        return Err(format!(
            "{} bytes, over the {MAX_PROPERTIES_BYTES} read",
            text.len()
        ));
    }
    let mut kv: BTreeMap<String, (usize, String)> = BTreeMap::new();
    let mut order = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line_no = i + 1;
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
            continue;
        }
        let split = line
            .find(['=', ':'])
            .ok_or_else(|| format!("line {line_no}: {line:?} is not key=value"))?;
        let key = line[..split].trim().to_owned();
        let value = line[split + 1..].trim().to_owned();
        if key.is_empty() {
            return Err(format!("line {line_no}: empty key"));
        }
        if let Some((first, _)) = kv.get(&key) {
            return Err(format!("line {line_no}: {key} is also set on line {first}"));
        }
        order.push(key.clone());
        kv.insert(key, (line_no, value));
    }
    let get = |k: &str| kv.get(k).map(|(_, v)| v.as_str());
    let bad = |k: &str, why: String| {
        let line = kv.get(k).map_or(0, |(l, _)| *l);
        format!("line {line}: {k}: {why}")
    };
    let mut out = ClientProperties::default();
    for k in ["ssl.key.password", "ssl.keystore.password"] {
        if get(k).is_some() {
            return Err(bad(
                k,
                "encrypted private keys are not supported; give an unencrypted PEM key".into(),
            ));
        }
    }
    for (k, type_key) in [
        ("ssl.truststore.location", "ssl.truststore.type"),
        ("ssl.keystore.location", "ssl.keystore.type"),
    ] {
        if get(k).is_some() {
            match get(type_key) {
                Some(t) if t.eq_ignore_ascii_case("PEM") => {}
                other => {
                    return Err(bad(
                        k,
                        format!(
                            "only PEM files are read: set {type_key}=PEM (it is {})",
                            other.unwrap_or("unset, JKS for Kafka's Java client")
                        ),
                    ));
                }
            }
        }
    }
    if let Some(a) = get("ssl.endpoint.identification.algorithm")
        && !a.eq_ignore_ascii_case("https")
    {
        return Err(bad(
            "ssl.endpoint.identification.algorithm",
            format!("{a:?}: server hostname verification cannot be turned off (use https)"),
        ));
    }
    let ca = match (get("ssl.ca.location"), get("ssl.truststore.location")) {
        (Some(_), Some(_)) => {
            return Err(bad(
                "ssl.truststore.location",
                "give ssl.ca.location or ssl.truststore.location, not both".into(),
            ));
        }
        (a, b) => a.or(b).map(PathBuf::from),
    };
    let (cert, key) = match (
        get("ssl.keystore.location"),
        get("ssl.certificate.location"),
        get("ssl.key.location"),
    ) {
        (Some(store), None, None) => (Some(PathBuf::from(store)), Some(PathBuf::from(store))),
        (Some(_), _, _) => {
            return Err(bad(
                "ssl.keystore.location",
                "give ssl.keystore.location or ssl.certificate.location with ssl.key.location, \
                 not both"
                    .into(),
            ));
        }
        (None, Some(c), Some(k)) => (Some(PathBuf::from(c)), Some(PathBuf::from(k))),
        (None, Some(_), None) => {
            return Err(bad(
                "ssl.certificate.location",
                "needs ssl.key.location".into(),
            ));
        }
        (None, None, Some(_)) => {
            return Err(bad(
                "ssl.key.location",
                "needs ssl.certificate.location".into(),
            ));
        }
        (None, None, None) => (None, None),
    };
    let protocol = get("security.protocol").map(str::to_ascii_uppercase);
    let sasl_protocol = matches!(protocol.as_deref(), Some("SASL_SSL" | "SASL_PLAINTEXT"));
    let sasl_key = [
        "sasl.mechanism",
        "sasl.username",
        "sasl.password",
        "sasl.jaas.config",
    ]
    .into_iter()
    .find(|k| get(k).is_some());
    if let Some(k) = sasl_key
        && !sasl_protocol
    {
        return Err(bad(
            k,
            "SASL settings need security.protocol=SASL_SSL (or SASL_PLAINTEXT)".into(),
        ));
    }
    if sasl_protocol {
        let mechanism = match get("sasl.mechanism") {
            None => keel_metadata_log::scram::Mechanism::Sha256,
            Some(m) => keel_metadata_log::scram::Mechanism::from_name(&m.to_ascii_uppercase())
                .ok_or_else(|| {
                    bad(
                        "sasl.mechanism",
                        format!("{m:?}: Keel supports SCRAM-SHA-256 and SCRAM-SHA-512"),
                    )
                })?,
        };
        let (username, password) = match (
            get("sasl.username"),
            get("sasl.password"),
            get("sasl.jaas.config"),
        ) {
            (Some(u), Some(p), None) => (u.to_owned(), p.to_owned()),
            (None, None, Some(j)) => jaas_credentials(j).map_err(|e| bad("sasl.jaas.config", e))?,
            (Some(_), None, None) => {
                return Err(bad("sasl.username", "needs sasl.password".into()));
            }
            (None, Some(_), None) => {
                return Err(bad("sasl.password", "needs sasl.username".into()));
            }
            (None, None, None) => {
                return Err(bad(
                    "security.protocol",
                    "SASL needs sasl.username and sasl.password (or sasl.jaas.config)".into(),
                ));
            }
            _ => {
                return Err(bad(
                    "sasl.jaas.config",
                    "give sasl.jaas.config or sasl.username with sasl.password, not both".into(),
                ));
            }
        };
        out.sasl = Some(SaslSettings {
            mechanism,
            username,
            password,
        });
    }
    match protocol.as_deref() {
        None | Some("SSL" | "SASL_SSL") if ca.is_some() => {}
        Some(p @ ("SSL" | "SASL_SSL")) => {
            return Err(bad(
                "security.protocol",
                format!("{p} needs ssl.ca.location (or ssl.truststore.location)"),
            ));
        }
        Some("SASL_PLAINTEXT") if cert.is_none() && ca.is_none() => {}
        None | Some("PLAINTEXT") if cert.is_none() && ca.is_none() => {}
        Some("PLAINTEXT") | None => {
            return Err(bad(
                "security.protocol",
                "TLS settings are given without SSL: set security.protocol=SSL and \
                 ssl.ca.location"
                    .into(),
            ));
        }
        Some("SASL_PLAINTEXT") => {
            return Err(bad(
                "security.protocol",
                "TLS settings are given with SASL_PLAINTEXT: set security.protocol=SASL_SSL".into(),
            ));
        }
        Some(other) => {
            return Err(bad(
                "security.protocol",
                format!("{other:?} is not PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL"),
            ));
        }
    }
    const USED: [&str; 13] = [
        "sasl.mechanism",
        "sasl.username",
        "sasl.password",
        "sasl.jaas.config",
        "security.protocol",
        "ssl.ca.location",
        "ssl.truststore.location",
        "ssl.truststore.type",
        "ssl.certificate.location",
        "ssl.key.location",
        "ssl.keystore.location",
        "ssl.keystore.type",
        "ssl.endpoint.identification.algorithm",
    ];
    out.ignored = order
        .into_iter()
        .filter(|k| !USED.contains(&k.as_str()))
        .collect();
    out.tls_ca_file = ca;
    out.tls_cert_file = cert;
    out.tls_key_file = key;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn librdkafka_and_java_names_give_the_same_settings() {
        let a = parse(
            "# keelctl\nsecurity.protocol=SSL\nssl.ca.location = /t/ca.pem\n\
             ssl.certificate.location=/t/a.pem\nssl.key.location=/t/a-key.pem\n\
             client.id=ops\n",
        )
        .unwrap();
        assert_eq!(a.tls_ca_file, Some(PathBuf::from("/t/ca.pem")));
        assert_eq!(a.tls_cert_file, Some(PathBuf::from("/t/a.pem")));
        assert_eq!(a.tls_key_file, Some(PathBuf::from("/t/a-key.pem")));
        assert_eq!(a.ignored, vec!["client.id"]);
        let j = parse(
            "security.protocol: SSL\nssl.truststore.type=PEM\nssl.truststore.location=/t/ca.pem\n\
             ssl.keystore.type=PEM\nssl.keystore.location=/t/a.pem\n",
        )
        .unwrap();
        assert_eq!(j.tls_ca_file, Some(PathBuf::from("/t/ca.pem")));
        assert_eq!(j.tls_cert_file, j.tls_key_file);
        assert_eq!(parse("").unwrap(), ClientProperties::default());
        assert_eq!(
            parse("security.protocol=PLAINTEXT\n").unwrap(),
            ClientProperties::default()
        );
    }

    #[test]
    fn the_dialer_uses_tls_exactly_when_a_ca_is_given() {
        assert!(!ClientProperties::default().dialer().unwrap().is_tls());
        let missing = parse("security.protocol=SSL\nssl.ca.location=/nonexistent/ca.pem\n")
            .unwrap()
            .dialer()
            .unwrap_err()
            .to_string();
        assert!(missing.contains("/nonexistent/ca.pem"), "{missing}");
    }

    #[test]
    fn sasl_users_from_librdkafka_or_java_names() {
        use keel_metadata_log::scram::Mechanism;
        let a = parse(
            "security.protocol=SASL_SSL\nssl.ca.location=/t/ca.pem\nsasl.mechanism=SCRAM-SHA-512\n\
             sasl.username=alice\nsasl.password=s3cret\n",
        )
        .unwrap();
        let s = a.sasl.unwrap();
        assert_eq!(
            (s.mechanism, s.username.as_str(), s.password.as_str()),
            (Mechanism::Sha512, "alice", "s3cret")
        );
        let j = parse(
            "security.protocol=SASL_PLAINTEXT\nsasl.jaas.config=org.apache.kafka.common.security.\
             scram.ScramLoginModule required username=\"bob\" password=\"pw\";\n",
        )
        .unwrap();
        let s = j.sasl.unwrap();
        assert_eq!(
            (s.mechanism, s.username.as_str(), s.password.as_str()),
            (Mechanism::Sha256, "bob", "pw")
        );
        assert_eq!(j.tls_ca_file, None);
        assert!(!format!("{s:?}").contains("pw"));
    }

    #[test]
    fn what_cannot_work_is_refused_naming_line_and_key() {
        for (text, needle) in [
            (
                "security.protocol=SSL\n",
                "line 1: security.protocol: SSL needs ssl.ca.location",
            ),
            (
                "security.protocol=SASL_SSL\nssl.ca.location=x\n",
                "line 1: security.protocol: SASL needs sasl.username",
            ),
            (
                "ssl.ca.location=x\nsasl.mechanism=SCRAM-SHA-256\n",
                "line 2: sasl.mechanism: SASL settings need security.protocol=SASL_SSL",
            ),
            (
                "security.protocol=SASL_SSL\nssl.ca.location=x\nsasl.mechanism=PLAIN\nsasl.username=a\nsasl.password=b\n",
                "line 3: sasl.mechanism: \"PLAIN\": Keel supports SCRAM-SHA-256",
            ),
            (
                "security.protocol=SASL_PLAINTEXT\nsasl.username=a\n",
                "line 2: sasl.username: needs sasl.password",
            ),
            (
                "security.protocol=SASL_SSL\nsasl.username=a\nsasl.password=b\n",
                "SASL_SSL needs ssl.ca.location",
            ),
            (
                "security.protocol=SASL_PLAINTEXT\nsasl.jaas.config=PlainLoginModule required;\n",
                "line 2: sasl.jaas.config: only org.apache.kafka.common.security.scram.ScramLoginModule",
            ),
            (
                "ssl.ca.location=x\nssl.ca.location=y\n",
                "line 2: ssl.ca.location is also set on line 1",
            ),
            ("just a line\n", "line 1: \"just a line\" is not key=value"),
            (
                "ssl.ca.location=x\nssl.truststore.location=y\nssl.truststore.type=PEM\n",
                "give ssl.ca.location or ssl.truststore.location",
            ),
            (
                "ssl.truststore.location=/t/ts.jks\n",
                "line 1: ssl.truststore.location: only PEM files are read: set ssl.truststore.type=PEM (it is unset",
            ),
            (
                "ssl.ca.location=x\nssl.certificate.location=c\n",
                "line 2: ssl.certificate.location: needs ssl.key.location",
            ),
            (
                "ssl.ca.location=x\nssl.key.password=p\n",
                "line 2: ssl.key.password: encrypted private keys",
            ),
            (
                "ssl.ca.location=x\nssl.endpoint.identification.algorithm=\n",
                "hostname verification cannot be turned off",
            ),
            (
                "security.protocol=PLAINTEXT\nssl.ca.location=x\n",
                "set security.protocol=SSL",
            ),
            (
                "security.protocol=TLS\nssl.ca.location=x\n",
                "\"TLS\" is not PLAINTEXT, SSL",
            ),
        ] {
            let e = parse(text).unwrap_err();
            assert!(e.contains(needle), "{text:?}: {e}");
        }
    }
}
