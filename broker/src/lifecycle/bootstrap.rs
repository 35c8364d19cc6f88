//! Finding the controller voters from `controller_quorum_bootstrap_servers` (KIP-853).
//!
//! A broker of a dynamic quorum is given a few controller addresses without node ids. Before
//! it opens its controller channels it asks them, in turn, for the quorum (`DescribeQuorum`,
//! which only the active controller answers; another controller replies NOT_CONTROLLER with
//! the active one's address, which is asked next, at most [`MAX_HINT_HOPS`] times per
//! bootstrap server). The voters in the answer (id -> `host:port`) then serve exactly as
//! `controller_quorum_voters` would; a voter added later is followed through NOT_CONTROLLER
//! hints ([`super::controllers`]). Kafka's brokers do the same discovery with Fetch requests
//! to the bootstrap servers.
//!
//! [`judge`] is the pure decision on one reply; [`discover_voters`] is the bounded-per-round,
//! backed-off loop that runs until an answer or shutdown. Once running, every broker (whatever
//! its configuration) keeps the voter set current with [`spawn_voter_refresh`].

use std::collections::BTreeMap;
use std::time::Duration;

use keel_proto::ErrorCode;
use keel_proto::controller::{DescribeQuorumReply, DescribeQuorumRequest};
use keel_runtime::Backoff;
use keel_runtime::tls::Dialer;
use tokio::sync::watch;

use super::controllers::{
    ActiveControllerClient, ControllerChannels, VOTER_REFRESH, controller_client,
};

/// NOT_CONTROLLER hints followed from one bootstrap server before the next one is asked.
pub const MAX_HINT_HOPS: usize = 2;
/// A round without an answer is logged at most this often.
const LOG_EVERY: Duration = Duration::from_secs(10);

/// What one DescribeQuorum reply means for the discovery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The voters, id -> `host:port`.
    Voters(BTreeMap<u64, String>),
    /// Not the active controller: ask the one at this address.
    AskLeader(String),
    /// No usable answer from this controller (why, for the log).
    Retry(String),
}

/// Judges one DescribeQuorum reply (pure). A reply without error must list at least one voter
/// with an address; a voter without an address (it has not been recorded yet) is left out.
pub fn judge(reply: &DescribeQuorumReply) -> Answer {
    match &reply.error {
        Some(e) if e.code == i32::from(ErrorCode::NotController.code()) => {
            match reply.leader.as_ref().map(|l| l.leader_address.as_str()) {
                Some(addr) if !addr.is_empty() => Answer::AskLeader(addr.to_string()),
                _ => Answer::Retry("NOT_CONTROLLER, no active controller known".into()),
            }
        }
        Some(e) if e.code != 0 => {
            let name = i16::try_from(e.code)
                .ok()
                .and_then(ErrorCode::from_code)
                .map_or("UNKNOWN", ErrorCode::name);
            Answer::Retry(format!("{name} ({}): {}", e.code, e.message))
        }
        _ => {
            let voters: BTreeMap<u64, String> = reply
                .voters
                .iter()
                .filter(|v| v.replica_id >= 0 && !v.address.is_empty())
                .map(|v| (v.replica_id as u64, v.address.clone()))
                .collect();
            if voters.is_empty() {
                Answer::Retry("the reply lists no voter with an address".into())
            } else {
                Answer::Voters(voters)
            }
        }
    }
}

/// Asks `servers` in turn (following NOT_CONTROLLER hints) until one answers with the voters;
/// after a round without an answer waits `backoff` (with jitter) and starts over. Each request
/// is bounded by `request_timeout`. Returns `None` when `shutdown` turns true first. Logs a
/// round without an answer at most every 10 s, naming the last reason.
pub async fn discover_voters(
    servers: &[String],
    dialer: &Dialer,
    backoff: Backoff,
    request_timeout: Duration,
    shutdown: &mut watch::Receiver<bool>,
) -> Option<BTreeMap<u64, String>> {
    let mut failures = 0u32;
    let mut last_log: Option<std::time::Instant> = None;
    loop {
        let mut why = String::new();
        for server in servers {
            let mut target = server.clone();
            for _ in 0..=MAX_HINT_HOPS {
                let answer = tokio::select! {
                    _ = shutdown.wait_for(|s| *s) => return None,
                    a = ask(&target, dialer, request_timeout) => a,
                };
                match answer {
                    Answer::Voters(voters) => {
                        tracing::info!(
                            bootstrap_server = %server,
                            answered_by = %target,
                            voters = ?voters,
                            "learned the controller voters from controller_quorum_bootstrap_servers"
                        );
                        return Some(voters);
                    }
                    Answer::AskLeader(addr) => target = addr,
                    Answer::Retry(reason) => {
                        why = format!("{target}: {reason}");
                        break;
                    }
                }
            }
        }
        if last_log.is_none_or(|t| t.elapsed() >= LOG_EVERY) {
            tracing::info!(
                bootstrap_servers = ?servers,
                "waiting for a controller of controller_quorum_bootstrap_servers to name the \
                 voters (last: {why})"
            );
            last_log = Some(std::time::Instant::now());
        }
        failures = failures.saturating_add(1);
        let delay = backoff.next(failures.saturating_sub(1));
        tokio::select! {
            _ = shutdown.wait_for(|s| *s) => return None,
            _ = tokio::time::sleep(delay) => {}
        }
    }
}

/// One DescribeQuorum to the controller at `addr`, judged.
async fn ask(addr: &str, dialer: &Dialer, request_timeout: Duration) -> Answer {
    let mut client = match controller_client(addr, dialer) {
        Ok(c) => c,
        Err(e) => return Answer::Retry(format!("not a usable address: {e}")),
    };
    match tokio::time::timeout(
        request_timeout,
        client.describe_quorum(DescribeQuorumRequest {}),
    )
    .await
    {
        Err(_) => Answer::Retry(format!("no answer in {request_timeout:?}")),
        Ok(Err(status)) if status.code() == tonic::Code::Unimplemented => Answer::Retry(
            "does not serve the controller API (is it a broker? list controllers in \
             controller_quorum_bootstrap_servers)"
                .into(),
        ),
        Ok(Err(status)) => Answer::Retry(format!(
            "{}: {}",
            status.code(),
            keel_runtime::status::status_line(&status)
        )),
        Ok(Ok(reply)) => judge(reply.get_ref()),
    }
}

/// Asks the active controller for the voter set every [`VOTER_REFRESH`] (jittered) and
/// publishes it on `voters` when it changed, until `stop` turns true. `channels` should follow
/// `voters` themselves. A failed round is retried at the next interval (logged at DEBUG: the
/// heartbeat and metadata paths report unreachable controllers already).
pub fn spawn_voter_refresh(
    channels: ControllerChannels,
    voters: watch::Sender<BTreeMap<u64, String>>,
    request_timeout: Duration,
    mut stop: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut client = ActiveControllerClient::new(channels, request_timeout);
        loop {
            let pause = VOTER_REFRESH.mul_f64(1.0 + 0.2 * keel_runtime::backoff::jitter());
            tokio::select! {
                _ = stop.wait_for(|s| *s) => return,
                _ = tokio::time::sleep(pause) => {}
            }
            let reply = client
                .call(|mut c| async move { c.describe_quorum(DescribeQuorumRequest {}).await })
                .await;
            match reply.as_ref().map(judge) {
                Ok(Answer::Voters(newest)) => {
                    voters.send_if_modified(|v| {
                        let changed = *v != newest;
                        if changed {
                            tracing::info!(voters = ?newest, "the controller voters changed");
                            for (id, was, now) in moved_voters(v, &newest) {
                                tracing::warn!(
                                    controller = id,
                                    "the quorum has controller {id} at {now}, not at {was} as \
                                     this broker's controller list had it: following the \
                                     quorum's address; correct controller_quorum_voters (or \
                                     the bootstrap servers) so that a restart does not start \
                                     from the wrong one"
                                );
                            }
                            *v = newest;
                        }
                        changed
                    });
                }
                Ok(other) => tracing::debug!(?other, "voter refresh: no voter set"),
                Err(e) => tracing::debug!(error = %e, "voter refresh failed"),
            }
        }
    })
}

/// Controllers in both voter sets whose address differs: `(id, old address, new address)`,
/// in id order (pure). A broker whose list names a controller at a wrong address is told
/// once the quorum's own set arrives, instead of being corrected silently.
fn moved_voters<'a>(
    old: &'a BTreeMap<u64, String>,
    new: &'a BTreeMap<u64, String>,
) -> Vec<(u64, &'a str, &'a str)> {
    old.iter()
        .filter_map(|(id, was)| {
            new.get(id)
                .filter(|now| *now != was)
                .map(|now| (*id, was.as_str(), now.as_str()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use keel_proto::common::Error as WireError;
    use keel_proto::controller::{ControllerLeader, QuorumReplicaState};

    use super::*;

    fn voter(id: i32, address: &str) -> QuorumReplicaState {
        QuorumReplicaState {
            replica_id: id,
            address: address.into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_voter_at_another_address_is_named_and_added_or_removed_ones_are_not() {
        let set = |v: &[(u64, &str)]| -> BTreeMap<u64, String> {
            v.iter().map(|(i, a)| (*i, a.to_string())).collect()
        };
        let configured = set(&[(1, "c1:9093"), (2, "wrong:9999"), (4, "gone:9093")]);
        let quorum = set(&[(1, "c1:9093"), (2, "c2:9093"), (3, "c3:9093")]);
        assert_eq!(
            moved_voters(&configured, &quorum),
            vec![(2, "wrong:9999", "c2:9093")]
        );
        assert!(moved_voters(&quorum, &quorum).is_empty());
    }

    #[test]
    fn the_active_controllers_voters_are_taken_and_hints_followed() {
        let ok = DescribeQuorumReply {
            voters: vec![voter(1, "c1:9093"), voter(2, ""), voter(3, "c3:9093")],
            ..Default::default()
        };
        assert_eq!(
            judge(&ok),
            Answer::Voters(BTreeMap::from([
                (1, "c1:9093".to_string()),
                (3, "c3:9093".to_string())
            ]))
        );
        let not = |leader: Option<&str>| DescribeQuorumReply {
            error: Some(WireError {
                code: ErrorCode::NotController.code().into(),
                message: "not the active controller".into(),
                ..Default::default()
            }),
            leader: leader.map(|a| ControllerLeader {
                leader_id: 2,
                leader_address: a.into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            judge(&not(Some("c2:9093"))),
            Answer::AskLeader("c2:9093".into())
        );
        assert!(matches!(judge(&not(Some(""))), Answer::Retry(_)));
        assert!(matches!(judge(&not(None)), Answer::Retry(_)));
        let denied = DescribeQuorumReply {
            error: Some(WireError {
                code: ErrorCode::ClusterAuthorizationFailed.code().into(),
                message: "User:x may not DESCRIBE".into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        match judge(&denied) {
            Answer::Retry(why) => assert!(
                why.starts_with("CLUSTER_AUTHORIZATION_FAILED (31)"),
                "{why}"
            ),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            judge(&DescribeQuorumReply::default()),
            Answer::Retry(_)
        ));
    }
}
