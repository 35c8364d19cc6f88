//! Pure decisions of the broker lifecycle (Kafka: `BrokerLifecycleManager`): what a
//! RegisterBroker or BrokerHeartbeat reply means, and the retry backoff. No I/O, no clock.

use keel_proto::ErrorCode;
use keel_proto::common::Error as WireError;
use keel_proto::controller::{BrokerHeartbeatReply, RegisterBrokerReply};

/// What to do after a RegisterBroker reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegisterDecision {
    /// Registered: heartbeat with this broker epoch (the broker starts fenced).
    Registered {
        /// Offset of the committed RegisterBrokerRecord.
        broker_epoch: i64,
    },
    /// Try again after a backoff, e.g. DUPLICATE_BROKER_REGISTRATION while the previous
    /// incarnation's session has not expired yet (restart after kill -9).
    Retry {
        /// The error, for the log.
        reason: String,
        /// The refusal was DUPLICATE_BROKER_REGISTRATION: a live registration holds this node
        /// id (another process with the same id, or this broker's previous incarnation until
        /// its session expires).
        duplicate_id: bool,
    },
    /// The controller will never accept this broker as configured (wrong cluster id, invalid
    /// request, unsupported version): stop the process.
    Fatal {
        /// The error, for the one-line exit message.
        reason: String,
    },
}

/// Interprets a RegisterBroker reply (NOT_CONTROLLER is handled by the client before this).
pub fn on_register_reply(reply: &RegisterBrokerReply) -> RegisterDecision {
    match code(reply.error.as_ref()) {
        Ok(ErrorCode::None) if reply.broker_epoch > 0 => RegisterDecision::Registered {
            broker_epoch: reply.broker_epoch,
        },
        Ok(ErrorCode::None) => RegisterDecision::Retry {
            reason: format!("no broker epoch in the reply ({})", reply.broker_epoch),
            duplicate_id: false,
        },
        Ok(
            c @ (ErrorCode::InconsistentClusterId
            | ErrorCode::InvalidRequest
            | ErrorCode::UnsupportedVersion),
        ) => RegisterDecision::Fatal {
            reason: describe(c, reply.error.as_ref()),
        },
        Ok(c) => RegisterDecision::Retry {
            reason: describe(c, reply.error.as_ref()),
            duplicate_id: c == ErrorCode::DuplicateBrokerRegistration,
        },
        Err(raw) => RegisterDecision::Retry {
            reason: format!("unknown error code {raw}"),
            duplicate_id: false,
        },
    }
}

/// What to do after a BrokerHeartbeat reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeartbeatDecision {
    /// Keep heartbeating; the controller reports these states.
    Continue {
        /// The broker is fenced (leads nothing, joins no ISR).
        fenced: bool,
        /// The broker's applied offset reached its registration offset.
        caught_up: bool,
    },
    /// The controlled shutdown completed on the controller: the broker may stop.
    ShutDown,
    /// The registration is gone or replaced (STALE_BROKER_EPOCH, BROKER_ID_NOT_REGISTERED):
    /// register again (same incarnation).
    Reregister {
        /// The error, for the log.
        reason: String,
    },
    /// Some other error: keep the current state and try at the next interval.
    Retry {
        /// The error, for the log.
        reason: String,
    },
}

/// Interprets a BrokerHeartbeat reply (NOT_CONTROLLER is handled by the client before this).
pub fn on_heartbeat_reply(reply: &BrokerHeartbeatReply) -> HeartbeatDecision {
    match code(reply.error.as_ref()) {
        Ok(ErrorCode::None) if reply.should_shut_down => HeartbeatDecision::ShutDown,
        Ok(ErrorCode::None) => HeartbeatDecision::Continue {
            fenced: reply.is_fenced,
            caught_up: reply.is_caught_up,
        },
        Ok(c @ (ErrorCode::StaleBrokerEpoch | ErrorCode::BrokerIdNotRegistered)) => {
            HeartbeatDecision::Reregister {
                reason: describe(c, reply.error.as_ref()),
            }
        }
        Ok(c) => HeartbeatDecision::Retry {
            reason: describe(c, reply.error.as_ref()),
        },
        Err(raw) => HeartbeatDecision::Retry {
            reason: format!("unknown error code {raw}"),
        },
    }
}

fn code(e: Option<&WireError>) -> Result<ErrorCode, i32> {
    match e {
        None => Ok(ErrorCode::None),
        Some(e) => i16::try_from(e.code)
            .ok()
            .and_then(ErrorCode::from_code)
            .ok_or(e.code),
    }
}

fn describe(c: ErrorCode, e: Option<&WireError>) -> String {
    match e.map(|e| e.message.as_str()).filter(|m| !m.is_empty()) {
        Some(m) => format!("{c}: {m}"),
        None => c.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(c: ErrorCode) -> Option<WireError> {
        Some(c.to_proto("why"))
    }

    #[test]
    fn register_replies() {
        let ok = RegisterBrokerReply {
            broker_epoch: 17,
            ..Default::default()
        };
        assert_eq!(
            on_register_reply(&ok),
            RegisterDecision::Registered { broker_epoch: 17 }
        );
        let table = [
            (ErrorCode::DuplicateBrokerRegistration, "retry"),
            (ErrorCode::RequestTimedOut, "retry"),
            (ErrorCode::InconsistentClusterId, "fatal"),
            (ErrorCode::InvalidRequest, "fatal"),
            (ErrorCode::UnsupportedVersion, "fatal"),
        ];
        for (c, want) in table {
            let r = RegisterBrokerReply {
                error: err(c),
                broker_epoch: -1,
                ..Default::default()
            };
            let got = match on_register_reply(&r) {
                RegisterDecision::Retry {
                    reason,
                    duplicate_id,
                } => {
                    assert!(
                        reason.contains(c.name()) && reason.contains("why"),
                        "{reason}"
                    );
                    assert_eq!(
                        duplicate_id,
                        c == ErrorCode::DuplicateBrokerRegistration,
                        "{c}"
                    );
                    "retry"
                }
                RegisterDecision::Fatal { .. } => "fatal",
                RegisterDecision::Registered { .. } => "registered",
            };
            assert_eq!(got, want, "{c}");
        }
    }

    #[test]
    fn heartbeat_replies() {
        let reply = |error, fenced, caught_up, shut| BrokerHeartbeatReply {
            error,
            is_fenced: fenced,
            is_caught_up: caught_up,
            should_shut_down: shut,
            leader: None,
        };
        assert_eq!(
            on_heartbeat_reply(&reply(None, true, false, false)),
            HeartbeatDecision::Continue {
                fenced: true,
                caught_up: false
            }
        );
        assert_eq!(
            on_heartbeat_reply(&reply(None, false, true, false)),
            HeartbeatDecision::Continue {
                fenced: false,
                caught_up: true
            }
        );
        assert_eq!(
            on_heartbeat_reply(&reply(None, true, true, true)),
            HeartbeatDecision::ShutDown
        );
        for c in [
            ErrorCode::StaleBrokerEpoch,
            ErrorCode::BrokerIdNotRegistered,
        ] {
            assert!(matches!(
                on_heartbeat_reply(&reply(err(c), true, false, false)),
                HeartbeatDecision::Reregister { .. }
            ));
        }
        // An error never means "shut down", even with the flag set.
        assert!(matches!(
            on_heartbeat_reply(&reply(err(ErrorCode::RequestTimedOut), true, false, true)),
            HeartbeatDecision::Retry { .. }
        ));
        let unknown = Some(WireError {
            code: 9999,
            ..Default::default()
        });
        assert!(matches!(
            on_heartbeat_reply(&reply(unknown, true, false, false)),
            HeartbeatDecision::Retry { .. }
        ));
    }
}
