//! SASL on the Kafka listener (#23): a `SASL_PLAINTEXT` or `SASL_SSL` listener authenticates
//! every connection with SCRAM-SHA-256 or SCRAM-SHA-512 before serving anything else
//! (Kafka: `SaslServerAuthenticator`, KIP-43 SaslHandshake, KIP-152 SaslAuthenticate, KIP-84
//! SCRAM). The credentials are the users' `UserScramCredentialRecord`s of the broker's image
//! (`keelctl user scram set`), and the connection's principal becomes `User:<name>`.
//!
//! Per connection, in order: any number of ApiVersions; one SaslHandshake naming an enabled
//! mechanism; SaslAuthenticate with the client-first message, then with the client-final
//! one; then every other API. Anything else before authentication closes the connection, as
//! do a refused mechanism and a failed authentication (each after its response, which says
//! why). On a listener without SASL, and after authentication (Keel offers no
//! re-authentication, KIP-368's `session_lifetime_ms` is 0), SaslHandshake and
//! SaslAuthenticate are answered ILLEGAL_SASL_STATE (Kafka's `KafkaApis` does the same).
//!
//! Pure: the credentials come in through a lookup and the server nonce as an argument.

use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::messages::{
    ApiKey, SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
    SaslHandshakeResponse,
};
use kafka_protocol::protocol::StrBytes;
use keel_metadata_log::scram::{Mechanism, ScramCredential, ScramError, ServerExchange};
use keel_proto::ErrorCode;

/// The mechanisms a SASL listener offers, in the order SaslHandshake lists them.
pub const ENABLED_MECHANISMS: [Mechanism; 2] = Mechanism::ALL;

/// Where one connection stands.
#[derive(Debug)]
pub enum SaslState {
    /// A listener without SASL: every API is served; the SASL APIs are refused.
    Off,
    /// Before SaslHandshake.
    Handshake,
    /// After SaslHandshake: the exchange and how many client messages it has had (0 or 1).
    Authenticate(ServerExchange, Mechanism, u8),
    /// Authenticated; every API is served.
    Done,
    /// Refused: the connection is closed after the response that says why.
    Failed,
}

impl SaslState {
    /// The state of a new connection: [`SaslState::Handshake`] on a SASL listener.
    pub fn new(sasl_listener: bool) -> SaslState {
        if sasl_listener {
            SaslState::Handshake
        } else {
            SaslState::Off
        }
    }

    /// Whether a request of `key` may be served now.
    pub fn allows(&self, key: ApiKey) -> bool {
        match self {
            SaslState::Off | SaslState::Done => true,
            SaslState::Handshake => matches!(key, ApiKey::ApiVersions | ApiKey::SaslHandshake),
            SaslState::Authenticate(..) => key == ApiKey::SaslAuthenticate,
            SaslState::Failed => false,
        }
    }

    /// Whether every API may be served: no SASL on this listener, or authenticated.
    pub fn authenticated(&self) -> bool {
        matches!(self, SaslState::Off | SaslState::Done)
    }

    /// Whether the connection must be closed once the last response is written.
    pub fn failed(&self) -> bool {
        matches!(self, SaslState::Failed)
    }

    /// Answers a SaslHandshake of `version`. Version 0 (raw SASL tokens without
    /// SaslAuthenticate, removed by KIP-896) is refused with UNSUPPORTED_VERSION and the
    /// connection closed; it is advertised only for librdkafka's feature check.
    pub fn handshake(&mut self, req: &SaslHandshakeRequest, version: i16) -> SaslHandshakeResponse {
        let mechanisms = ENABLED_MECHANISMS
            .iter()
            .map(|m| StrBytes::from_static_str(m.name()))
            .collect();
        let code = match self {
            SaslState::Handshake if version < 1 => {
                *self = SaslState::Failed;
                ErrorCode::UnsupportedVersion
            }
            SaslState::Handshake => match Mechanism::from_name(req.mechanism.as_str()) {
                Some(m) => {
                    *self = SaslState::Authenticate(ServerExchange::new(m), m, 0);
                    ErrorCode::None
                }
                None => {
                    *self = SaslState::Failed;
                    ErrorCode::UnsupportedSaslMechanism
                }
            },
            SaslState::Off => ErrorCode::IllegalSaslState,
            _ => {
                *self = SaslState::Failed;
                ErrorCode::IllegalSaslState
            }
        };
        SaslHandshakeResponse::default()
            .with_error_code(code.code())
            .with_mechanisms(mechanisms)
    }

    /// Answers a SaslAuthenticate. `lookup` finds a user's credential for the mechanism of
    /// the handshake; `server_nonce` is fresh randomness (printable, no `,`). Returns the
    /// response and, when this message completed the exchange, the authenticated user.
    pub fn authenticate(
        &mut self,
        req: &SaslAuthenticateRequest,
        lookup: impl FnOnce(&str, Mechanism) -> Option<Arc<ScramCredential>>,
        server_nonce: &str,
    ) -> (SaslAuthenticateResponse, Option<String>) {
        let fail = |code: ErrorCode, message: String| {
            SaslAuthenticateResponse::default()
                .with_error_code(code.code())
                .with_error_message(Some(StrBytes::from_string(message)))
        };
        let state = std::mem::replace(self, SaslState::Failed);
        let (mut exchange, m, step) = match state {
            SaslState::Authenticate(e, m, step) => (e, m, step),
            SaslState::Off => {
                *self = SaslState::Off;
                return (
                    fail(
                        ErrorCode::IllegalSaslState,
                        "this listener does not use SASL".into(),
                    ),
                    None,
                );
            }
            _ => {
                return (
                    fail(
                        ErrorCode::IllegalSaslState,
                        "SaslAuthenticate without a SaslHandshake first".into(),
                    ),
                    None,
                );
            }
        };
        let reply = if step == 0 {
            exchange
                .client_first(&req.auth_bytes, |user| lookup(user, m), server_nonce)
                .map(|b| (b, None))
        } else {
            exchange
                .client_final(&req.auth_bytes)
                .map(|(user, b)| (b, Some(user)))
        };
        match reply {
            Ok((bytes, user)) => {
                *self = if user.is_some() {
                    SaslState::Done
                } else {
                    SaslState::Authenticate(exchange, m, step + 1)
                };
                (
                    SaslAuthenticateResponse::default()
                        .with_auth_bytes(Bytes::from(bytes))
                        .with_session_lifetime_ms(0),
                    user,
                )
            }
            Err(e) => {
                let message = match e {
                    ScramError::BadCredentials(_) => e.to_string(),
                    other => format!("Authentication failed: {other}"),
                };
                (fail(ErrorCode::SaslAuthenticationFailed, message), None)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU32;

    use keel_metadata_log::scram::{self, ClientExchange};

    use super::*;

    fn credential(m: Mechanism) -> Arc<ScramCredential> {
        let salt = b"salty";
        let sp = scram::salted_password(m, b"pw", salt, NonZeroU32::new(4096).unwrap());
        Arc::new(ScramCredential::from_salted_password(m, &sp, salt, 4096).unwrap())
    }

    fn authenticate(
        s: &mut SaslState,
        bytes: Vec<u8>,
    ) -> (SaslAuthenticateResponse, Option<String>) {
        let c = credential(Mechanism::Sha512);
        s.authenticate(
            &SaslAuthenticateRequest::default().with_auth_bytes(bytes.into()),
            |u, m| (u == "alice" && m == Mechanism::Sha512).then(|| c.clone()),
            "servernonce1234567890",
        )
    }

    fn handshake(s: &mut SaslState, mech: &'static str) -> i16 {
        s.handshake(
            &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str(mech)),
            1,
        )
        .error_code
    }

    #[test]
    fn a_connection_is_served_only_after_a_successful_exchange() {
        let mut s = SaslState::new(true);
        assert!(s.allows(ApiKey::ApiVersions) && !s.allows(ApiKey::Produce));
        assert_eq!(handshake(&mut s, "SCRAM-SHA-512"), 0);
        assert!(!s.allows(ApiKey::Metadata) && s.allows(ApiKey::SaslAuthenticate));
        let (mut client, first) =
            ClientExchange::start(Mechanism::Sha512, "alice", "pw", "clientnonce");
        let (r, user) = authenticate(&mut s, first);
        assert_eq!((r.error_code, user), (0, None));
        let last = client.server_first(&r.auth_bytes).unwrap();
        let (r, user) = authenticate(&mut s, last);
        assert_eq!((r.error_code, user.as_deref()), (0, Some("alice")));
        client.server_final(&r.auth_bytes).unwrap();
        assert!(s.allows(ApiKey::Produce) && !s.failed());
        // No re-authentication.
        assert_eq!(handshake(&mut s, "SCRAM-SHA-512"), 34);
        assert!(s.failed());
    }

    #[test]
    fn refusals_say_why_and_close() {
        // Unknown mechanism: the enabled ones are listed.
        let mut s = SaslState::new(true);
        let r = s.handshake(
            &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("PLAIN")),
            1,
        );
        assert_eq!(r.error_code, 33);
        assert_eq!(r.mechanisms.len(), 2);
        assert!(s.failed());

        // Version 0 (raw tokens) is advertised, not served.
        let mut s = SaslState::new(true);
        let r = s.handshake(
            &SaslHandshakeRequest::default()
                .with_mechanism(StrBytes::from_static_str("SCRAM-SHA-256")),
            0,
        );
        assert_eq!(r.error_code, 35);
        assert!(s.failed());

        // Wrong password: Kafka's words, then closed.
        let mut s = SaslState::new(true);
        handshake(&mut s, "SCRAM-SHA-512");
        let (mut client, first) =
            ClientExchange::start(Mechanism::Sha512, "alice", "wrong", "clientnonce");
        let (r, _) = authenticate(&mut s, first);
        let (r, user) = authenticate(&mut s, client.server_first(&r.auth_bytes).unwrap());
        assert_eq!((r.error_code, user), (58, None));
        assert_eq!(
            r.error_message.as_deref(),
            Some(
                "Authentication failed during authentication due to invalid credentials with \
                 SASL mechanism SCRAM-SHA-512"
            )
        );
        assert!(s.failed());

        // Unknown user: the same words at the first message.
        let mut s = SaslState::new(true);
        handshake(&mut s, "SCRAM-SHA-512");
        let (_, first) = ClientExchange::start(Mechanism::Sha512, "mallory", "pw", "n");
        let (r, _) = authenticate(&mut s, first);
        assert_eq!(r.error_code, 58);
        assert!(s.failed());

        // Authenticate before the handshake.
        let mut s = SaslState::new(true);
        let (r, _) = authenticate(&mut s, b"n,,n=alice,r=x".to_vec());
        assert_eq!(r.error_code, 34);
        assert!(s.failed());

        // A listener without SASL refuses both APIs and stays usable.
        let mut s = SaslState::new(false);
        assert_eq!(handshake(&mut s, "SCRAM-SHA-256"), 34);
        let (r, _) = authenticate(&mut s, b"x".to_vec());
        assert_eq!(r.error_code, 34);
        assert!(!s.failed() && s.allows(ApiKey::Produce));
    }
}
