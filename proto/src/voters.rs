//! The controller quorum's address list, `1@host:port,2@host:port,3@host:port` (Kafka:
//! `controller.quorum.voters`): the one format every Keel process (controllers, brokers,
//! tools) uses to find the quorum.

use std::collections::BTreeMap;

/// Parses a voters string into node id -> `host:port`.
///
/// Errors (a human-readable reason, for the caller to attach to its config key): an entry
/// that is not `id@host:port`, a non-numeric id, a missing or invalid port, an empty host, a
/// repeated id, or no entries at all.
///
/// ```
/// use keel_proto::voters::parse_voters;
///
/// let voters = parse_voters("1@10.0.0.1:9093,2@10.0.0.2:9093,3@ctl-3:9093").unwrap();
/// assert_eq!(voters.len(), 3);
/// assert_eq!(voters[&3], "ctl-3:9093");
/// assert!(parse_voters("1@10.0.0.1:9093,1@10.0.0.2:9093").unwrap_err().contains("twice"));
/// assert!(parse_voters("1@nohost").is_err());
/// ```
pub fn parse_voters(s: &str) -> Result<BTreeMap<u64, String>, String> {
    let mut out = BTreeMap::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (id, addr) = part
            .split_once('@')
            .ok_or_else(|| format!("{part:?} is not id@host:port"))?;
        let id: u64 = id
            .parse()
            .map_err(|_| format!("{id:?} in {part:?} is not a node id"))?;
        let (host, port) = addr
            .rsplit_once(':')
            .ok_or_else(|| format!("{addr:?} in {part:?} has no :port"))?;
        if host.is_empty() || port.parse::<u16>().is_err() {
            return Err(format!("{addr:?} in {part:?} is not host:port"));
        }
        if out.insert(id, addr.to_string()).is_some() {
            return Err(format!("node id {id} appears twice"));
        }
    }
    if out.is_empty() {
        return Err("no voters given".into());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_names_what_is_wrong() {
        let v = parse_voters("1@127.0.0.1:9093, 2@host-b:9094,3@[::1]:9095").unwrap();
        assert_eq!(v[&1], "127.0.0.1:9093");
        assert_eq!(v[&2], "host-b:9094");
        assert_eq!(v[&3], "[::1]:9095");
        for (bad, needle) in [
            ("1@host", "has no :port"),
            ("x@h:1", "is not a node id"),
            ("1@h:99999", "is not host:port"),
            ("1@:9", "is not host:port"),
            ("1@h:1,1@h:2", "appears twice"),
            ("", "no voters"),
            ("h:1", "is not id@host:port"),
        ] {
            let e = parse_voters(bad).unwrap_err();
            assert!(e.contains(needle), "{bad:?}: {e}");
        }
    }
}
