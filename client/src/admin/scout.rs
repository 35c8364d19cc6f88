//! Telling a silent controller from a slow one while an attempt waits on it.
//!
//! A controller process that is paused (SIGSTOP, a frozen VM) or starved of CPU keeps its
//! listening socket: the kernel completes TCP connections and buffers the requests, so an
//! attempt at it waits out the whole request timeout (10 s by default) instead of failing at
//! once as at a dead controller, which refuses the connection. Meanwhile the other
//! controllers elect a new active one within about 1.5 s. Without this, every `keelctl`
//! command whose first bootstrap controller is paused took the full request timeout, for as
//! long as the pause lasted.
//!
//! While an attempt waits, [`Admin::scout`] asks every known controller, the awaited one
//! included, DescribeQuorum (cheap: a controller that is not active answers NOT_CONTROLLER
//! with the leader hint) every [`interval`] (from half an interval on), each probe bounded by
//! that interval. When the
//! awaited controller answers nothing and another controller names a different active
//! controller ([`verdict`]), the attempt is given up and the named controller asked instead.
//! A controller that answers its probe is only slow (a large request, a long commit): the
//! attempt keeps waiting up to the request timeout, as Kafka's admin client does
//! (`request.timeout.ms`). Kafka itself has no such probe; its `socket.connection.setup.timeout.ms`
//! (KIP-601) covers connection setup, which a paused process completes.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use keel_proto::controller::DescribeQuorumRequest;
use keel_runtime::tls::Dialer;
use tokio::task::JoinSet;
use tonic::transport::Channel;

use super::{Admin, hint_address, secs};
use crate::rpc_error;

/// What one probe of one controller found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Probe {
    /// No answer within the probe's time (paused, starved, or unreachable).
    Silent,
    /// An answer; `leader` is the active controller's address when it named one.
    Answered { leader: Option<String> },
}

/// Time between the probe rounds while an attempt waits, and the bound of each probe: a
/// quarter of the request timeout, in 50 ms ..= 1 s. One second is a few hundred times a
/// DescribeQuorum's round trip on a healthy controller, and keeps the wait on a paused
/// controller near the election's 1.5 s.
pub(super) fn interval(request_timeout: Duration) -> Duration {
    (request_timeout / 4).clamp(Duration::from_millis(50), Duration::from_secs(1))
}

/// What a round of probes says about `awaited`, the controller an attempt waits on:
/// `Some((by, leader))` when `awaited` answered nothing and controller `by` answered naming
/// `leader`, a controller other than `awaited`, as the active one (the first such answer in
/// `probes`' order). `None` while `awaited` answers (it is slow, not silent), when no other
/// controller names an active one (an election), or when they all name `awaited`.
pub(super) fn verdict(awaited: &str, probes: &[(String, Probe)]) -> Option<(String, String)> {
    let silent = probes
        .iter()
        .any(|(addr, p)| addr == awaited && *p == Probe::Silent);
    if !silent {
        return None;
    }
    probes.iter().find_map(|(by, p)| match p {
        Probe::Answered {
            leader: Some(leader),
        } if by != awaited && leader != awaited => Some((by.clone(), leader.clone())),
        _ => None,
    })
}

impl Admin {
    /// Resolves, with `(by, leader)` as [`verdict`] gives them, once `awaited` has answered
    /// nothing to a probe while another controller names a different active controller;
    /// never otherwise. Probes every bootstrap controller and the known active one, the
    /// awaited one included, over the cached channels (or new ones), in rounds starting
    /// `interval` apart (with ±20 % jitter), the first half an `interval` after the call; each
    /// answer is judged as it arrives, with the awaited controller's last finished probe. The
    /// caller bounds it (it races the attempt's own timeout). `seen` holds the other
    /// controllers' last probe results, in target order, for the caller's error when the
    /// attempt times out anyway ([`no_leader_note`]).
    pub(super) async fn scout(
        &self,
        awaited: &str,
        interval: Duration,
        seen: &Mutex<Vec<(String, Probe)>>,
    ) -> (String, String) {
        let mut targets: Vec<String> = vec![awaited.to_string()];
        for a in self
            .config
            .bootstrap_controllers
            .iter()
            .cloned()
            .chain(self.active_controller())
        {
            if !targets.contains(&a) {
                targets.push(a);
            }
        }
        let pace = keel_runtime::Backoff::new(interval, interval);
        // Channels the probes opened, reused by later rounds (the admin's cache is left to
        // the attempts).
        let mut opened: Vec<(String, Channel)> = Vec::new();
        let mut round: u32 = 0;
        // What the awaited controller's last finished probe found (`None` before the first):
        // a later round decides as soon as another controller names a new active one, without
        // waiting for the awaited one's probe of that round to time out again (a paused
        // active controller's successor is named about 1.2 s after the pause; waiting for
        // each round's own timeout cost a second, seen by the fresh-user trial).
        let mut awaited_last: Option<Probe> = None;
        // Rounds start `interval` apart (with jitter), however long the previous one took;
        // the first after half an interval.
        let mut next_round = Instant::now() + pace.next(round) / 2;
        loop {
            tokio::time::sleep_until(next_round.into()).await;
            round = round.saturating_add(1);
            next_round = Instant::now() + pace.next(round);
            let mut probes = JoinSet::new();
            for (i, addr) in targets.iter().enumerate() {
                let channel = self
                    .state
                    .lock()
                    .unwrap()
                    .channels
                    .get(addr)
                    .cloned()
                    .or_else(|| {
                        opened
                            .iter()
                            .find(|(a, _)| a == addr)
                            .map(|(_, c)| c.clone())
                    });
                let dialer = self.config.dialer.clone();
                let addr = addr.clone();
                probes.spawn(async move {
                    let (probe, channel) = probe(&dialer, &addr, channel, interval).await;
                    (i, addr, probe, channel)
                });
            }
            let mut others: Vec<(usize, String, Probe)> = Vec::with_capacity(targets.len());
            while let Some(done) = probes.join_next().await {
                let Ok((i, addr, probe, channel)) = done else {
                    continue;
                };
                if let Some(c) = channel
                    && !opened.iter().any(|(a, _)| *a == addr)
                {
                    opened.push((addr.clone(), c));
                }
                if addr == awaited {
                    awaited_last = Some(probe);
                } else {
                    others.retain(|(_, a, _)| *a != addr);
                    others.push((i, addr, probe));
                    others.sort_by_key(|(i, _, _)| *i);
                    *seen.lock().unwrap() = others
                        .iter()
                        .map(|(_, a, p)| (a.clone(), p.clone()))
                        .collect();
                }
                let Some(awaited_probe) = &awaited_last else {
                    continue;
                };
                let known: Vec<(String, Probe)> =
                    std::iter::once((awaited.to_string(), awaited_probe.clone()))
                        .chain(others.iter().map(|(_, a, p)| (a.clone(), p.clone())))
                        .collect();
                if let Some(v) = verdict(awaited, &known) {
                    return v;
                }
            }
        }
    }
}

/// One DescribeQuorum probe of `addr` within `within` (connecting first when `channel` is
/// `None`); the channel it used when it got one. Any answer from the controller counts, a
/// refusal included (e.g. CLUSTER_AUTHORIZATION_FAILED without a hint): it shows the
/// process runs. A transport failure or no answer in time is [`Probe::Silent`].
async fn probe(
    dialer: &Dialer,
    addr: &str,
    channel: Option<Channel>,
    within: Duration,
) -> (Probe, Option<Channel>) {
    let deadline = Instant::now() + within;
    let ask = async {
        let channel = match channel {
            Some(c) => c,
            None => {
                let endpoint = Dialer::endpoint(addr).ok()?.connect_timeout(within);
                dialer.connect(&endpoint).await.ok()?
            }
        };
        let mut client = crate::grpc::controller(dialer, channel.clone());
        let probe = match client.describe_quorum(DescribeQuorumRequest {}).await {
            Ok(reply) => Probe::Answered {
                leader: hint_address(reply.get_ref()),
            },
            Err(status) if !rpc_error::retriable(&status) => Probe::Answered { leader: None },
            Err(_) => return None,
        };
        Some((probe, channel))
    };
    match tokio::time::timeout_at(deadline.into(), ask).await {
        Ok(Some((probe, channel))) => (probe, Some(channel)),
        _ => (Probe::Silent, None),
    }
}

/// What the probes of the other controllers (`seen`: address and last probe) add to an
/// attempt that timed out: when some answered and none named an active controller, the
/// cluster has no quorum (or is electing), which the timeout alone does not say (the
/// fresh-user trial of session 41 got "cannot reach any controller" with 2 of 3 paused while
/// the third answered every probe). `None` when no other controller answered, or one named
/// an active controller.
pub(super) fn no_leader_note(seen: &[(String, Probe)]) -> Option<String> {
    let mut answering = Vec::new();
    for (addr, probe) in seen {
        match probe {
            Probe::Answered { leader: Some(_) } => return None,
            Probe::Answered { leader: None } => answering.push(addr.as_str()),
            Probe::Silent => {}
        }
    }
    if answering.is_empty() {
        return None;
    }
    Some(format!(
        "{} {} quorum probes but {} no active controller (no quorum: are most controllers \
         down or paused?)",
        answering.join(", "),
        if answering.len() == 1 {
            "answers"
        } else {
            "answer"
        },
        if answering.len() == 1 {
            "knows"
        } else {
            "know"
        },
    ))
}

/// The detail of an attempt given up on a silent controller, for errors and the warning.
pub(super) fn silent_detail(awaited: &str, waited: Duration, by: &str, leader: &str) -> String {
    format!(
        "{awaited}: no answer after {}, not even to a quorum probe (paused, or starved of \
         CPU?), while {by} names {leader} as the active controller",
        secs(waited)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answered(leader: Option<&str>) -> Probe {
        Probe::Answered {
            leader: leader.map(str::to_string),
        }
    }

    #[test]
    fn a_silent_controller_is_left_for_the_one_another_names() {
        let probes = vec![
            ("a".to_string(), Probe::Silent),
            ("b".to_string(), answered(None)),
            ("c".to_string(), answered(Some("c"))),
        ];
        assert_eq!(
            verdict("a", &probes),
            Some(("c".to_string(), "c".to_string()))
        );
    }

    #[test]
    fn a_controller_that_answers_its_probe_is_waited_for() {
        let probes = vec![
            ("a".to_string(), answered(None)),
            ("b".to_string(), answered(Some("b"))),
        ];
        assert_eq!(verdict("a", &probes), None);
    }

    #[test]
    fn no_verdict_during_an_election_or_while_the_others_name_the_silent_one() {
        let election = vec![
            ("a".to_string(), Probe::Silent),
            ("b".to_string(), answered(None)),
            ("c".to_string(), Probe::Silent),
        ];
        assert_eq!(verdict("a", &election), None);
        // The awaited controller is the paused active one, not yet replaced.
        let not_yet = vec![
            ("a".to_string(), Probe::Silent),
            ("b".to_string(), answered(Some("a"))),
        ];
        assert_eq!(verdict("a", &not_yet), None);
    }

    #[test]
    fn a_timeout_names_the_controllers_that_answer_without_a_leader() {
        let seen = vec![
            ("b".to_string(), answered(None)),
            ("c".to_string(), Probe::Silent),
        ];
        assert_eq!(
            no_leader_note(&seen).as_deref(),
            Some(
                "b answers quorum probes but knows no active controller (no quorum: are most \
                 controllers down or paused?)"
            )
        );
        let two = vec![
            ("b".to_string(), answered(None)),
            ("c".to_string(), answered(None)),
        ];
        assert!(
            no_leader_note(&two)
                .unwrap()
                .starts_with("b, c answer quorum probes but know")
        );
        // Nobody answered, or somebody names a leader: nothing to add.
        assert_eq!(no_leader_note(&[("b".to_string(), Probe::Silent)]), None);
        assert_eq!(
            no_leader_note(&[
                ("b".to_string(), answered(None)),
                ("c".to_string(), answered(Some("a"))),
            ]),
            None
        );
    }

    #[test]
    fn the_interval_is_a_quarter_of_the_request_timeout_within_bounds() {
        assert_eq!(interval(Duration::from_secs(10)), Duration::from_secs(1));
        assert_eq!(
            interval(Duration::from_millis(500)),
            Duration::from_millis(125)
        );
        assert_eq!(
            interval(Duration::from_millis(20)),
            Duration::from_millis(50)
        );
    }
}
