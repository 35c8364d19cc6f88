//! The quorum's membership as the metadata log records it (KIP-853, dynamic controller
//! quorum): who votes, who observes (openraft learners), and each member's replica key (node
//! id + metadata log directory id). Pure rules; the controller's service and Raft transport
//! call them.
//!
//! - A Raft request names the node it is for and the directory id the sender's membership
//!   records for it ([`voter_key_mismatch`]): a node whose directory was replaced (a new
//!   directory id) refuses every request meant for the voter that was, so an emptied disk
//!   can never vote, or acknowledge entries, with a log it no longer has. The sender's own
//!   directory id is not checked against the receiver's membership: a receiver whose log is
//!   behind holds an older membership, and refusing the current leader (a replaced node
//!   added back with its new id) would keep it behind for good (seen in a trial: a new
//!   observer stuck at its first 512 entries); a candidate with an emptied log cannot win an
//!   election anyway (Raft's up-to-date rule), and the voters refuse to be counted for it by
//!   the target check.
//! - AddRaftVoter ([`check_add`]) and RemoveRaftVoter ([`check_remove`]) are validated
//!   against the current membership before anything changes, with Kafka's codes
//!   (DUPLICATE_VOTER, VOTER_NOT_FOUND, INVALID_REQUEST).
//!
//! - `--initial-controllers` lists ([`parse_initial_controllers`]), the first voters of a
//!   formatted quorum (`keel-controller format`, `meta.properties`).
//!
//! Invariant of every membership this module accepts: voters are non-empty, and no two
//! members share a directory id.

use std::collections::{BTreeMap, BTreeSet};

use keel_metadata_log::raft_types::{
    ControllerNode, Membership, directory_id_text, parse_directory_id,
};
use keel_proto::error::ErrorCode;

/// Largest node id a controller may have (Kafka's int32 node ids).
pub const MAX_NODE_ID: u64 = i32::MAX as u64;

/// The members of a membership config, split into voters and observers, by node id.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Members {
    /// Voters (openraft's voter ids of the last config; during a joint change, the union).
    pub voters: BTreeMap<u64, ControllerNode>,
    /// Members that receive the log without voting (openraft learners).
    pub observers: BTreeMap<u64, ControllerNode>,
    /// True while a change is not committed yet, or the config is joint.
    pub changing: bool,
}

impl Members {
    /// The members of `membership`; `changing` as the caller knows it (the config's log id
    /// above the committed index, or a joint config).
    pub fn of(membership: &Membership, changing: bool) -> Self {
        let voter_ids: BTreeSet<u64> = membership.voter_ids().collect();
        let mut voters = BTreeMap::new();
        let mut observers = BTreeMap::new();
        for (id, node) in membership.nodes() {
            if voter_ids.contains(id) {
                voters.insert(*id, node.clone());
            } else {
                observers.insert(*id, node.clone());
            }
        }
        Self {
            voters,
            observers,
            changing: changing || membership.get_joint_config().len() > 1,
        }
    }

    /// The directory id recorded for node `id` (voter or observer), if any.
    pub fn directory_of(&self, id: u64) -> Option<uuid::Uuid> {
        self.voters
            .get(&id)
            .or_else(|| self.observers.get(&id))
            .and_then(|n| n.directory_id)
    }
}

/// Most initial voters accepted (a quorum of more than a few voters only slows commits).
pub const MAX_INITIAL_CONTROLLERS: usize = 64;

/// One initial voter: `id@host:port:directory-id` (Kafka's `--initial-controllers` entry).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitialController {
    /// Node id, 1..=2147483647.
    pub id: u64,
    /// `host:port` of its gRPC listener.
    pub endpoint: String,
    /// Its metadata log directory id.
    pub directory_id: uuid::Uuid,
}

/// Parses `id@host:port:directory-id,...`.
///
/// Errors: an empty list, more than [`MAX_INITIAL_CONTROLLERS`] entries, an entry without
/// `@` or the directory id after the last `:`, an id outside 1..=2147483647, a bad endpoint
/// ([`ControllerNode::new`]) or directory id, or a node id or directory id twice.
pub fn parse_initial_controllers(s: &str) -> Result<Vec<InitialController>, String> {
    let entries: Vec<&str> = s.split(',').map(str::trim).collect();
    if entries.len() > MAX_INITIAL_CONTROLLERS {
        return Err(format!(
            "{} entries, at most {MAX_INITIAL_CONTROLLERS}",
            entries.len()
        ));
    }
    let mut out: Vec<InitialController> = Vec::with_capacity(entries.len());
    for e in entries {
        let clipped = keel_proto::limits::clip(e);
        let (id, rest) = e
            .split_once('@')
            .ok_or_else(|| format!("{clipped:?} is not id@host:port:directory-id"))?;
        let (endpoint, dir) = rest
            .rsplit_once(':')
            .ok_or_else(|| format!("{clipped:?} is not id@host:port:directory-id"))?;
        let id: u64 = id
            .parse()
            .ok()
            .filter(|id| (1..=MAX_NODE_ID).contains(id))
            .ok_or_else(|| format!("{clipped:?}: the id is not in 1..=2147483647"))?;
        let node = endpoint_node(endpoint, None).map_err(|e| format!("{clipped:?}: {e}"))?;
        let directory_id = parse_directory_id(dir).map_err(|e| format!("{clipped:?}: {e}"))?;
        if let Some(dup) = out
            .iter()
            .find(|c| c.id == id || c.directory_id == directory_id)
        {
            return Err(format!(
                "{clipped:?} repeats the node id or directory id of controller {}",
                dup.id
            ));
        }
        out.push(InitialController {
            id,
            endpoint: node.addr,
            directory_id,
        });
    }
    Ok(out)
}

/// The text form [`parse_initial_controllers`] reads (directory ids in Kafka's base64 form).
pub fn render_initial_controllers(list: &[InitialController]) -> String {
    list.iter()
        .map(|c| {
            format!(
                "{}@{}:{}",
                c.id,
                c.endpoint,
                directory_id_text(c.directory_id)
            )
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// The member at `endpoint` with `dir`, after checking that `endpoint` is `host:port`: a
/// host of letters, digits, `.`, `-`, `_` or `:` (an IPv6 literal in brackets too), and a port
/// in 1..=65535. A URL (`http://...`), a missing or zero port, a port above 65535 are refused
/// before anything changes.
///
/// Errors: the endpoint's problem in words.
pub fn endpoint_node(endpoint: &str, dir: Option<uuid::Uuid>) -> Result<ControllerNode, String> {
    let node = ControllerNode::new(endpoint, dir)?;
    let clipped = keel_proto::limits::clip(endpoint);
    let bad = || format!("endpoint {clipped:?} is not host:port (a port in 1..=65535)");
    let (host, port) = endpoint.rsplit_once(':').ok_or_else(bad)?;
    if port.parse::<u16>().map_or(true, |p| p == 0) {
        return Err(bad());
    }
    let host_ok = !host.is_empty()
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | ':' | '[' | ']'));
    if !host_ok {
        return Err(bad());
    }
    Ok(node)
}

/// A refusal of an AddRaftVoter or RemoveRaftVoter request: Kafka's code and a message.
pub type Refusal = (ErrorCode, String);

/// Validates AddRaftVoter for node `id` with directory `dir` at `endpoint` against `members`;
/// returns the member to add.
///
/// Errors: INVALID_REQUEST for an id outside 1..=[`MAX_NODE_ID`], a bad endpoint, or a
/// change in progress; DUPLICATE_VOTER when `id` is a voter, or another member (voter or
/// observer) has `dir`.
pub fn check_add(
    members: &Members,
    id: u64,
    dir: uuid::Uuid,
    endpoint: &str,
    leader: u64,
    in_contact: impl Fn(u64) -> bool,
) -> Result<ControllerNode, Refusal> {
    if id == 0 || id > MAX_NODE_ID {
        return Err((
            ErrorCode::InvalidRequest,
            format!("voter id {id} is outside 1..={MAX_NODE_ID}"),
        ));
    }
    let node = endpoint_node(endpoint, Some(dir)).map_err(|e| (ErrorCode::InvalidRequest, e))?;
    if members.voters.contains_key(&id) {
        return Err((
            ErrorCode::DuplicateVoter,
            format!("controller {id} is already a voter"),
        ));
    }
    if let Some((other, _)) = members
        .voters
        .iter()
        .chain(members.observers.iter())
        .find(|(other, n)| **other != id && n.directory_id == Some(dir))
    {
        return Err((
            ErrorCode::DuplicateVoter,
            format!(
                "directory id {} is already controller {other}'s",
                directory_id_text(dir)
            ),
        ));
    }
    majority_in_contact(members.voters.keys().copied(), leader, &in_contact)?;
    if members.changing {
        return Err((
            ErrorCode::InvalidRequest,
            "another membership change is in progress; retry when it has committed".into(),
        ));
    }
    Ok(node)
}

/// INVALID_REQUEST unless a majority of `voters` (the active controller `leader` counts as
/// in contact) is in contact: a voter change commits through a joint configuration, which
/// needs a majority of the current voters as well as of the new ones (Raft §6), so without
/// it the change could never commit and would hold the write path until it timed out.
fn majority_in_contact(
    voters: impl Iterator<Item = u64>,
    leader: u64,
    in_contact: &impl Fn(u64) -> bool,
) -> Result<(), Refusal> {
    let (mut total, mut live) = (0usize, 0usize);
    for v in voters {
        total += 1;
        live += usize::from(v == leader || in_contact(v));
    }
    if 2 * live <= total {
        return Err((
            ErrorCode::InvalidRequest,
            format!(
                "only {live} of the {total} voters are in contact with the active controller: \
                 not a majority, so no voter change can commit (bring voters back first)"
            ),
        ));
    }
    Ok(())
}

/// Validates RemoveRaftVoter for node `id` with directory `dir` (`None`: the request named
/// none) against `members`; `in_contact(peer)` says whether the active controller `leader`
/// heard from a voter within the check-quorum window.
///
/// Errors: VOTER_NOT_FOUND when `id` is not a voter or its recorded directory id is not
/// `dir` (a request without a directory id matches only a voter without one);
/// INVALID_REQUEST for the last voter, when the voters left that are in contact would not be
/// a majority of the new voter set, or while a change is in progress.
pub fn check_remove(
    members: &Members,
    id: u64,
    dir: Option<uuid::Uuid>,
    leader: u64,
    in_contact: impl Fn(u64) -> bool,
) -> Result<(), Refusal> {
    let Some(node) = members.voters.get(&id) else {
        return Err((
            ErrorCode::VoterNotFound,
            format!("controller {id} is not a voter"),
        ));
    };
    if node.directory_id != dir {
        let show = |d: Option<uuid::Uuid>| d.map_or("none".to_string(), directory_id_text);
        return Err((
            ErrorCode::VoterNotFound,
            format!(
                "voter {id} has directory id {}, not {}",
                show(node.directory_id),
                show(dir)
            ),
        ));
    }
    if members.voters.len() == 1 {
        return Err((
            ErrorCode::InvalidRequest,
            format!("controller {id} is the last voter; a quorum needs one"),
        ));
    }
    majority_in_contact(members.voters.keys().copied(), leader, &in_contact)?;
    let remaining: Vec<u64> = members
        .voters
        .keys()
        .copied()
        .filter(|v| *v != id)
        .collect();
    let live = remaining
        .iter()
        .filter(|v| **v == leader || in_contact(**v))
        .count();
    if 2 * live <= remaining.len() {
        return Err((
            ErrorCode::InvalidRequest,
            format!(
                "removing controller {id} would leave {} voters of which only {live} are in \
                 contact with the active controller: not a majority, the quorum would stop",
                remaining.len()
            ),
        ));
    }
    if members.changing {
        return Err((
            ErrorCode::InvalidRequest,
            "another membership change is in progress; retry when it has committed".into(),
        ));
    }
    Ok(())
}

/// Why a controller with node id `own_id` and directory `own_dir` refuses a Raft request from
/// controller `sender_id` meant for directory `target_dir` (the one the sender's membership
/// records for this node; `None`: it records none, or the sender is an earlier build);
/// `None` when it accepts. INVALID_VOTER_KEY in Kafka's terms (KIP-853).
pub fn voter_key_mismatch(
    own_id: u64,
    own_dir: uuid::Uuid,
    target_dir: Option<uuid::Uuid>,
    sender_id: u64,
) -> Option<String> {
    let t = target_dir.filter(|t| *t != own_dir)?;
    Some(format!(
        "INVALID_VOTER_KEY: raft request from controller {sender_id} for controller {own_id} \
         with directory id {} reached directory id {} (this node's metadata log directory was \
         replaced: remove the old voter and add this one with keelctl quorum remove-controller \
         / add-controller)",
        directory_id_text(t),
        directory_id_text(own_dir)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(n: u128) -> uuid::Uuid {
        uuid::Uuid::from_u128(n)
    }

    fn members(voters: &[(u64, Option<u128>)], observers: &[(u64, u128)]) -> Members {
        let node =
            |id: u64, d: Option<u128>| ControllerNode::new(&format!("h:{id}"), d.map(dir)).unwrap();
        Members {
            voters: voters.iter().map(|(id, d)| (*id, node(*id, *d))).collect(),
            observers: observers
                .iter()
                .map(|(id, d)| (*id, node(*id, Some(*d))))
                .collect(),
            changing: false,
        }
    }

    #[test]
    fn initial_controllers_parse_render_and_refuse_bad_lists() {
        let text = format!(
            "1@h1:9093:{},2@10.0.0.2:9093:{}",
            directory_id_text(dir(1)),
            dir(2)
        );
        let l = parse_initial_controllers(&text).unwrap();
        assert_eq!(l.len(), 2);
        assert_eq!(l[1].endpoint, "10.0.0.2:9093");
        assert_eq!(l[1].directory_id, dir(2));
        assert_eq!(
            parse_initial_controllers(&render_initial_controllers(&l)),
            Ok(l)
        );
        let d = directory_id_text(dir(3));
        for (bad, why) in [
            ("".to_string(), "is not id@"),
            (format!("1h:9093:{d}"), "is not id@"),
            (format!("0@h:9093:{d}"), "not in 1..="),
            (format!("2147483648@h:9093:{d}"), "not in 1..="),
            (format!("1@h:{d}"), "is not host:port"),
            (format!("1@http://h:1:{d}"), "is not host:port"),
            ("1@h:9093:zzz".to_string(), "directory id"),
            (
                format!("1@h:9093:{d},1@g:9093:{}", directory_id_text(dir(4))),
                "repeats",
            ),
            (format!("1@h:9093:{d},2@g:9093:{d}"), "repeats"),
            (format!("1@h#x:9093:{d}"), "'#'"),
        ] {
            let e = parse_initial_controllers(&bad).unwrap_err();
            assert!(e.contains(why), "{bad:?}: {e}");
        }
        let many: Vec<String> = (1..=65)
            .map(|i| format!("{i}@h:1:{}", directory_id_text(dir(i as u128))))
            .collect();
        assert!(parse_initial_controllers(&many.join(",")).is_err());
    }

    #[test]
    fn add_refuses_duplicates_bad_input_and_concurrent_changes() {
        let m = members(&[(1, Some(11)), (2, None)], &[(4, 44)]);
        assert!(check_add(&m, 3, dir(33), "h:3", 1, |_| true).is_ok());
        // The observer being promoted keeps its own directory id.
        assert!(check_add(&m, 4, dir(44), "h:4", 1, |_| true).is_ok());
        let code = |r: Result<ControllerNode, Refusal>| r.unwrap_err().0;
        assert_eq!(
            code(check_add(&m, 1, dir(99), "h:1", 1, |_| true)),
            ErrorCode::DuplicateVoter
        );
        assert_eq!(
            code(check_add(&m, 3, dir(11), "h:3", 1, |_| true)),
            ErrorCode::DuplicateVoter
        );
        assert_eq!(
            code(check_add(&m, 3, dir(44), "h:3", 1, |_| true)),
            ErrorCode::DuplicateVoter
        );
        assert_eq!(
            code(check_add(&m, 0, dir(33), "h:3", 1, |_| true)),
            ErrorCode::InvalidRequest
        );
        assert_eq!(
            code(check_add(&m, MAX_NODE_ID + 1, dir(33), "h:3", 1, |_| true)),
            ErrorCode::InvalidRequest
        );
        assert_eq!(
            code(check_add(&m, 3, dir(33), "", 1, |_| true)),
            ErrorCode::InvalidRequest
        );
        assert_eq!(
            code(check_add(&m, 3, dir(33), "h 3", 1, |_| true)),
            ErrorCode::InvalidRequest
        );
        for bad in ["bogus", "h:0", "h:99999", "http://h:1", ":1", "h:", "h/x:1"] {
            assert_eq!(
                code(check_add(&m, 3, dir(33), bad, 1, |_| true)),
                ErrorCode::InvalidRequest,
                "{bad}"
            );
        }
        assert!(check_add(&m, 3, dir(33), "[::1]:9093", 1, |_| true).is_ok());
        let busy = Members {
            changing: true,
            ..m
        };
        assert_eq!(
            code(check_add(&busy, 3, dir(33), "h:3", 1, |_| true)),
            ErrorCode::InvalidRequest
        );
    }

    #[test]
    fn remove_needs_the_exact_key_and_must_keep_a_quorum() {
        let m = members(&[(1, Some(11)), (2, Some(22)), (3, None)], &[]);
        let all = |_: u64| true;
        assert!(check_remove(&m, 2, Some(dir(22)), 1, all).is_ok());
        assert!(check_remove(&m, 3, None, 1, all).is_ok());
        let code = |r: Result<(), Refusal>| r.unwrap_err().0;
        assert_eq!(
            code(check_remove(&m, 4, None, 1, all)),
            ErrorCode::VoterNotFound
        );
        assert_eq!(
            code(check_remove(&m, 2, Some(dir(99)), 1, all)),
            ErrorCode::VoterNotFound
        );
        assert_eq!(
            code(check_remove(&m, 2, None, 1, all)),
            ErrorCode::VoterNotFound
        );
        assert_eq!(
            code(check_remove(&m, 3, Some(dir(1)), 1, all)),
            ErrorCode::VoterNotFound
        );
        // 3 is down: removing 2 leaves {1, 3} with only the leader live.
        let no3 = |p: u64| p != 3;
        let e = check_remove(&m, 2, Some(dir(22)), 1, no3).unwrap_err();
        assert_eq!(e.0, ErrorCode::InvalidRequest);
        assert!(e.1.contains("only 1 are in contact"), "{}", e.1);
        // Removing the dead one is fine.
        assert!(check_remove(&m, 3, None, 1, no3).is_ok());
        let one = members(&[(1, Some(11))], &[]);
        // Two voters with one down: no change can commit, not even removing the dead one.
        let two = members(&[(1, Some(11)), (2, Some(22))], &[]);
        let e = check_remove(&two, 2, Some(dir(22)), 1, |_| false).unwrap_err();
        assert!(e.1.contains("only 1 of the 2 voters"), "{}", e.1);
        let e = check_add(&two, 3, dir(33), "h:3", 1, |_| false).unwrap_err();
        assert!(e.1.contains("only 1 of the 2 voters"), "{}", e.1);
        let e = check_remove(&one, 1, Some(dir(11)), 1, all).unwrap_err();
        assert_eq!(e.0, ErrorCode::InvalidRequest);
        assert!(e.1.contains("last voter"), "{}", e.1);
    }

    #[test]
    fn a_request_meant_for_another_directory_is_refused() {
        let own = dir(2);
        assert_eq!(voter_key_mismatch(2, own, None, 1), None);
        assert_eq!(voter_key_mismatch(2, own, Some(own), 1), None);
        let e = voter_key_mismatch(2, own, Some(dir(9)), 1).unwrap();
        assert!(e.starts_with("INVALID_VOTER_KEY"), "{e}");
    }
}
