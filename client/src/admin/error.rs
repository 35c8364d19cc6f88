//! Errors of the admin client: a Kafka error code the controller answered with, or a transport
//! problem reaching the controllers.

use std::time::Duration;

use keel_proto::ErrorCode;

/// What went wrong with an admin request.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// The controller refused the request (or one item of it) with a Kafka error code.
    #[error("{context}: {code} ({}){}", .code.code(), message_suffix(.message))]
    Kafka {
        /// The Kafka error code.
        code: ErrorCode,
        /// The controller's human-readable detail (may be empty).
        message: String,
        /// What was asked, e.g. `topic "orders"`.
        context: String,
    },
    /// No controller could be reached within the retry budget (`api_timeout` or
    /// `max_attempts`); `errors` names the last failure of each controller tried.
    #[error("cannot reach any controller (gave up after {} in {:.1} s): {errors}", attempts_text(*.attempts), .elapsed.as_secs_f64())]
    Unreachable {
        /// Attempts made.
        attempts: u32,
        /// Time spent, backoffs included.
        elapsed: Duration,
        /// `addr: last error` of each controller tried, `; ` separated.
        errors: String,
    },
    /// Controllers answered, but none was the active controller within the retry budget
    /// (an election that does not finish, the others unreachable).
    #[error("no active controller answered (gave up after {} in {:.1} s): {errors}", attempts_text(*.attempts), .elapsed.as_secs_f64())]
    NoActiveController {
        /// Attempts made.
        attempts: u32,
        /// Time spent, backoffs included.
        elapsed: Duration,
        /// `addr: last error` of each controller tried, `; ` separated.
        errors: String,
    },
    /// None of the bootstrap addresses serves the controller API (a broker's address, ...).
    #[error("no controller at the bootstrap addresses: {errors}")]
    NotAController {
        /// What each address answered.
        errors: String,
    },
    /// An RPC failed in a way retrying cannot fix (e.g. a reply above the size limit).
    #[error("controller RPC failed: {0}")]
    Rpc(String),
    /// The TLS handshake failed for a reason retrying cannot fix (a CA or certificate that
    /// does not match, TLS on one side only): reported at once, as Kafka's clients stop on an
    /// `SslAuthenticationException`. The text names the address, the cause and what to do.
    #[error("TLS handshake failed: {0}")]
    Tls(String),
    /// A reply that breaks the API contract (unknown error code, missing item, ...).
    #[error("unexpected reply from the controller: {0}")]
    Protocol(String),
    /// A bad argument, found before anything was sent.
    #[error("{0}")]
    InvalidArgument(String),
}

/// "1 attempt", "2 attempts".
fn attempts_text(attempts: u32) -> String {
    if attempts == 1 {
        "1 attempt".to_string()
    } else {
        format!("{attempts} attempts")
    }
}

fn message_suffix(message: &str) -> String {
    if message.is_empty() {
        String::new()
    } else {
        format!(": {message}")
    }
}

impl AdminError {
    /// The Kafka error code, for errors the controller answered with.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            AdminError::Kafka { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// Builds [`AdminError::Kafka`] from a wire error, or `Ok` when it is absent/NONE.
    pub(crate) fn check(
        error: Option<&keel_proto::common::Error>,
        context: impl FnOnce() -> String,
    ) -> Result<(), AdminError> {
        match ErrorCode::from_proto(error) {
            Ok(ErrorCode::None) => Ok(()),
            Ok(code) => Err(AdminError::Kafka {
                code,
                message: error.map(|e| e.message.clone()).unwrap_or_default(),
                context: context(),
            }),
            Err(unknown) => Err(AdminError::Protocol(format!("{}: {unknown}", context()))),
        }
    }
}

/// Result of admin calls.
pub type Result<T, E = AdminError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kafka_error_names_code_number_and_detail() {
        let e = AdminError::check(
            Some(&ErrorCode::InvalidUpdateVersion.to_proto("partition epoch is 3, expected 7")),
            || "orders-0".to_string(),
        )
        .unwrap_err();
        assert_eq!(e.code(), Some(ErrorCode::InvalidUpdateVersion));
        assert_eq!(
            e.to_string(),
            "orders-0: INVALID_UPDATE_VERSION (95): partition epoch is 3, expected 7"
        );
        assert!(AdminError::check(None, || unreachable!()).is_ok());
        assert!(AdminError::check(Some(&ErrorCode::None.into()), || unreachable!()).is_ok());
    }
}
