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
//!
//! Refused with an error naming the key and line: a malformed line, a key given twice,
//! `security.protocol` `SASL_SSL`/`SASL_PLAINTEXT` and `sasl.*` (Keel's own gRPC clients
//! authenticate with certificates; SASL/SCRAM is for the Kafka listeners), encrypted keys
//! (`ssl.key.password`, `ssl.keystore.password`), JKS/PKCS12 stores, `SSL` without a CA.
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
    /// Keys this library does not use, in file order.
    pub ignored: Vec<String>,
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
    for key in &order {
        if key.starts_with("sasl.") {
            return Err(bad(
                key,
                "SASL is for the Kafka listeners; Keel's gRPC clients authenticate with a TLS \
                 client certificate (ssl.certificate.location, ssl.key.location)"
                    .into(),
            ));
        }
    }
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
    match get("security.protocol")
        .map(str::to_ascii_uppercase)
        .as_deref()
    {
        None | Some("SSL") if ca.is_some() => {}
        Some("SSL") => {
            return Err(bad(
                "security.protocol",
                "SSL needs ssl.ca.location (or ssl.truststore.location)".into(),
            ));
        }
        None | Some("PLAINTEXT") if cert.is_none() && ca.is_none() => {}
        Some("PLAINTEXT") | None => {
            return Err(bad(
                "security.protocol",
                "TLS settings are given without SSL: set security.protocol=SSL and \
                 ssl.ca.location"
                    .into(),
            ));
        }
        Some(p @ ("SASL_SSL" | "SASL_PLAINTEXT")) => {
            return Err(bad(
                "security.protocol",
                format!(
                    "{p}: Keel's gRPC clients authenticate with TLS client certificates; SASL is \
                     for the Kafka listeners"
                ),
            ));
        }
        Some(other) => {
            return Err(bad(
                "security.protocol",
                format!("{other:?} is not PLAINTEXT or SSL"),
            ));
        }
    }
    const USED: [&str; 9] = [
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
    fn what_cannot_work_is_refused_naming_line_and_key() {
        for (text, needle) in [
            (
                "security.protocol=SSL\n",
                "line 1: security.protocol: SSL needs ssl.ca.location",
            ),
            (
                "security.protocol=SASL_SSL\nssl.ca.location=x\n",
                "line 1: security.protocol: SASL_SSL",
            ),
            (
                "ssl.ca.location=x\nsasl.mechanism=SCRAM-SHA-256\n",
                "line 2: sasl.mechanism: SASL is for the Kafka listeners",
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
                "\"TLS\" is not PLAINTEXT or SSL",
            ),
        ] {
            let e = parse(text).unwrap_err();
            assert!(e.contains(needle), "{text:?}: {e}");
        }
    }
}
