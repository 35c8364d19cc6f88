//! Named listeners, Kafka's `listeners` / `advertised.listeners` syntax: a comma-separated
//! list of `NAME://host:port` (Kafka: `SocketServerConfigs.LISTENERS_CONFIG`), or one bare
//! `host:port`, which is the gRPC listener (the form every Keel config used before named
//! listeners).
//!
//! Names Keel serves: [`GRPC`] (Keel's own protocol: the client library, `keelctl`, the
//! replication between brokers and the controller API), [`PLAINTEXT`] (Kafka's wire
//! protocol without TLS or SASL, brokers only), [`SSL`] (Kafka's wire protocol over TLS,
//! brokers only, #23), [`SASL_PLAINTEXT`] and [`SASL_SSL`] (the same with SASL/SCRAM
//! authentication first, #23). Kafka maps custom names to security protocols with
//! `listener.security.protocol.map`; in Keel a name is its protocol and any other name is
//! refused at start.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use super::parse_host_port;

/// Listener name of Keel's gRPC protocol.
pub const GRPC: &str = "GRPC";
/// Listener name of Kafka's wire protocol without TLS or SASL (Kafka's `PLAINTEXT`).
pub const PLAINTEXT: &str = "PLAINTEXT";
/// Listener name of Kafka's wire protocol over TLS (Kafka's `SSL`): the node's
/// `tls_cert_file`/`tls_key_file`/`tls_ca_file` and `ssl_client_auth`.
pub const SSL: &str = "SSL";
/// Listener name of Kafka's wire protocol with SASL/SCRAM authentication and no TLS (Kafka's
/// `SASL_PLAINTEXT`): credentials from `keelctl user scram set`.
pub const SASL_PLAINTEXT: &str = "SASL_PLAINTEXT";
/// Listener name of Kafka's wire protocol over TLS with SASL/SCRAM authentication (Kafka's
/// `SASL_SSL`): the TLS of [`SSL`], then SASL; the principal is the SASL user's.
pub const SASL_SSL: &str = "SASL_SSL";
/// The listener names Keel knows, in the order a broker registers them ([`GRPC`] first: Keel's
/// own clients use a broker's first registered endpoint).
pub const KNOWN: [&str; 5] = [GRPC, PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL];
/// The names of Kafka-protocol listeners (a broker has at most one of them).
pub const KAFKA: [&str; 4] = [PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL];
/// Most listeners in one list (one per known name).
pub const MAX_LISTENERS: usize = KNOWN.len();

/// One entry of a listener list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listener {
    /// One of [`KNOWN`].
    pub name: String,
    /// Host without brackets; empty in a bind list means every interface (Kafka's
    /// `PLAINTEXT://:9092`).
    pub host: String,
    /// 1..=65535; 0 in a bind list (the OS picks a free port).
    pub port: u16,
}

impl Listener {
    /// The address to bind: the host must be an IP address (or empty = `0.0.0.0`).
    pub fn bind_addr(&self) -> Result<SocketAddr, String> {
        if self.host.is_empty() {
            return Ok(SocketAddr::from((Ipv4Addr::UNSPECIFIED, self.port)));
        }
        let ip: IpAddr = self.host.parse().map_err(|_| {
            format!(
                "{}: {:?} is not an IP address (a listener binds an ip:port; host names go in \
                 advertised_listeners)",
                self.name, self.host
            )
        })?;
        Ok(SocketAddr::from((ip, self.port)))
    }

    /// `host:port` (IPv6 hosts bracketed).
    pub fn host_port(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

impl std::fmt::Display for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}://{}", self.name, self.host_port())
    }
}

/// Parses a listener list. `bind`: the entries are addresses to bind (an empty host is
/// allowed and means every interface; a non-empty host must be an IP address); otherwise they
/// are addresses others connect to (`host:port` with a non-empty host).
///
/// Errors name the entry: an unknown name (with the known ones), a name given twice, a
/// malformed address, an empty list, more than [`MAX_LISTENERS`] entries.
pub fn parse_listeners(s: &str, bind: bool) -> Result<Vec<Listener>, String> {
    let s = s.trim();
    if s.is_empty() {
        return Err("no listener given".into());
    }
    if !s.contains("://") {
        // The bare form: the gRPC listener.
        return Ok(vec![parse_address(GRPC, s, bind)?]);
    }
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for entry in s.split(',').map(str::trim) {
        let Some((name, addr)) = entry.split_once("://") else {
            return Err(format!(
                "{entry:?} is not NAME://host:port (every entry of a list needs its name)"
            ));
        };
        if !KNOWN.contains(&name) {
            return Err(format!(
                "unknown listener name {:?} in {entry:?}: Keel serves {}",
                keel_proto::limits::clip(name),
                KNOWN.join(", ")
            ));
        }
        if !seen.insert(name) {
            return Err(format!("listener name {name} is given twice"));
        }
        out.push(parse_address(name, addr, bind)?);
    }
    if out.len() > MAX_LISTENERS {
        return Err(format!("at most {MAX_LISTENERS} listeners"));
    }
    Ok(out)
}

fn parse_address(name: &str, addr: &str, bind: bool) -> Result<Listener, String> {
    let (host, port) = if bind {
        // A bind address: the host may be empty (every interface) and port 0 asks the OS for
        // a free port.
        let (host, port) = addr
            .rsplit_once(':')
            .ok_or_else(|| format!("{name}: {addr:?} has no :port"))?;
        let port: u16 = port
            .parse()
            .map_err(|_| format!("{name}: {addr:?} is not ip:port"))?;
        (host.trim_matches(['[', ']']).to_string(), port)
    } else {
        parse_host_port(addr).map_err(|e| format!("{name}: {e}"))?
    };
    let listener = Listener {
        name: name.to_string(),
        host,
        port,
    };
    if bind {
        listener.bind_addr()?;
    }
    Ok(listener)
}

/// The one gRPC listener of a list that may hold only that (the controller's): `Err` names
/// what else the list has.
pub fn grpc_only(s: &str, bind: bool) -> Result<Listener, String> {
    let mut list = parse_listeners(s, bind)?;
    match list.as_slice() {
        [one] if one.name == GRPC => Ok(list.remove(0)),
        _ => Err(format!(
            "{s:?}: the controller serves only Keel's gRPC protocol: give ip:port or \
             GRPC://ip:port"
        )),
    }
}

/// The listener named `name`, if the list has one.
pub fn find<'a>(listeners: &'a [Listener], name: &str) -> Option<&'a Listener> {
    listeners.iter().find(|l| l.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bare_form_is_the_grpc_listener() {
        let l = parse_listeners("127.0.0.1:9092", true).unwrap();
        assert_eq!(l.len(), 1);
        assert_eq!(l[0].name, GRPC);
        assert_eq!(l[0].bind_addr().unwrap().to_string(), "127.0.0.1:9092");
        let l = parse_listeners("broker-1:9092", false).unwrap();
        assert_eq!(l[0].host_port(), "broker-1:9092");
        assert!(parse_listeners("broker-1:9092", true).is_err());
    }

    #[test]
    fn named_lists_parse_in_order_and_bind_every_interface_without_a_host() {
        let l = parse_listeners("GRPC://0.0.0.0:9192, PLAINTEXT://:9092", true).unwrap();
        assert_eq!(
            l.iter().map(ToString::to_string).collect::<Vec<_>>(),
            ["GRPC://0.0.0.0:9192", "PLAINTEXT://:9092"]
        );
        assert_eq!(l[1].bind_addr().unwrap().to_string(), "0.0.0.0:9092");
        let l = parse_listeners("PLAINTEXT://[::1]:9092", true).unwrap();
        assert_eq!(l[0].host_port(), "[::1]:9092");
        assert!(parse_listeners("PLAINTEXT://:9092", false).is_err());
    }

    #[test]
    fn bad_lists_are_refused_with_what_is_wrong() {
        let e = parse_listeners("SASL_GSSAPI://:9093", true).unwrap_err();
        assert!(
            e.contains("unknown listener name \"SASL_GSSAPI\"") && e.contains("GRPC"),
            "{e}"
        );
        let e = parse_listeners("GRPC://:1,GRPC://:2", true).unwrap_err();
        assert!(e.contains("twice"), "{e}");
        let e = parse_listeners("GRPC://:1,:2", true).unwrap_err();
        assert!(e.contains("NAME://host:port"), "{e}");
        let e = parse_listeners("PLAINTEXT://:x", true).unwrap_err();
        assert!(e.contains("PLAINTEXT"), "{e}");
        assert_eq!(parse_listeners("127.0.0.1:0", true).unwrap()[0].port, 0);
        assert!(parse_listeners("h:0", false).is_err());
        assert!(parse_listeners(" ", true).is_err());
        assert!(parse_listeners("GRPC://h:99999", false).is_err());
    }
}
