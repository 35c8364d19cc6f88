//! SASL/SCRAM (#23): users' credentials as metadata records and the exchange that checks them
//! (RFC 5802, RFC 7677; Kafka: KIP-84 for the mechanism, KIP-554 for credentials in the
//! metadata log and `AlterUserScramCredentials`).
//!
//! This module owns, all pure (randomness comes in as arguments, no I/O, no clock):
//! - [`Mechanism`]: SCRAM-SHA-256 and SCRAM-SHA-512, with their hash, HMAC and PBKDF2;
//! - [`ScramCredential`]: what the cluster stores per user and mechanism: salt, iterations,
//!   `StoredKey` and `ServerKey`; never the password or the salted password;
//! - [`salted_password`] (the client's side of a credential change: it sends only
//!   `Hi(password, salt, i)`) and [`ScramCredential::from_salted_password`] (the controller's);
//! - [`ScramCredentialsImage`]: the credentials of an image, by user and mechanism;
//! - [`ServerExchange`]: the broker's side of one authentication (client-first ->
//!   server-first -> client-final -> server-final), as Kafka's `ScramSaslServer`;
//! - [`ClientExchange`]: the client's side, for Keel's own tests and tools.
//!
//! Rules taken from Kafka: the user name in `n=` is a saslname (`=2C` is `,`, `=3D` is `=`);
//! only the `n` GS2 header (no channel binding) is accepted; an authorization id, if sent,
//! must equal the user name; the client-final nonce must end with the exchange's (Kafka's
//! check, which librdkafka relies on); the `tokenauth` extension (delegation tokens, KIP-48) is
//! refused;
//! an unknown user and a wrong password get the same error. Iterations are 4096..=16384
//! (Kafka's `ScramMechanism` bounds). Passwords are used as their UTF-8 bytes (Kafka applies no
//! SASLprep either).

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use keel_proto::metadata::{
    RemoveUserScramCredentialRecord, ScramMechanism as WireMechanism, UserScramCredentialRecord,
};
use ring::{digest, hmac, pbkdf2};

/// Fewest PBKDF2 iterations of a credential (Kafka: `ScramMechanism.minIterations`, 4096).
pub const MIN_ITERATIONS: u32 = 4096;
/// Most PBKDF2 iterations of a credential (Kafka: 16384).
pub const MAX_ITERATIONS: u32 = 16384;
/// The iterations keelctl uses unless told otherwise (Kafka's `kafka-configs` default, 4096).
pub const DEFAULT_ITERATIONS: u32 = 4096;
/// Longest user name, bytes of UTF-8 (Kafka has no bound; Keel keeps `User:<name>` within an
/// ACL principal's 1024 bytes).
pub const MAX_USER_BYTES: usize = 256;
/// Salt length bounds, bytes.
pub const SALT_BYTES: std::ops::RangeInclusive<usize> = 1..=256;
/// Most users (with any mechanism) a cluster holds.
pub const MAX_SCRAM_USERS: usize = 100_000;
/// Longest SCRAM message a client may send, bytes (client-first and client-final are a few
/// hundred bytes; the bound keeps a hostile one small).
pub const MAX_CLIENT_MESSAGE_BYTES: usize = 4096;

/// A SCRAM mechanism (Kafka: `ScramMechanism`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mechanism {
    /// SCRAM-SHA-256 (RFC 7677): 32-byte keys.
    Sha256,
    /// SCRAM-SHA-512: 64-byte keys.
    Sha512,
}

impl Mechanism {
    /// Both mechanisms, SHA-256 first.
    pub const ALL: [Mechanism; 2] = [Mechanism::Sha256, Mechanism::Sha512];

    /// The SASL name: `SCRAM-SHA-256` or `SCRAM-SHA-512`.
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Sha256 => "SCRAM-SHA-256",
            Mechanism::Sha512 => "SCRAM-SHA-512",
        }
    }

    /// The mechanism named `name` (case-sensitive, as SASL names are).
    pub fn from_name(name: &str) -> Option<Mechanism> {
        Mechanism::ALL.into_iter().find(|m| m.name() == name)
    }

    /// The mechanism of a wire enum value (`None` for UNKNOWN or an unknown value).
    pub fn from_proto(v: i32) -> Option<Mechanism> {
        match WireMechanism::try_from(v).ok()? {
            WireMechanism::ScramSha256 => Some(Mechanism::Sha256),
            WireMechanism::ScramSha512 => Some(Mechanism::Sha512),
            WireMechanism::Unknown => None,
        }
    }

    /// The wire enum value.
    pub fn to_proto(self) -> WireMechanism {
        match self {
            Mechanism::Sha256 => WireMechanism::ScramSha256,
            Mechanism::Sha512 => WireMechanism::ScramSha512,
        }
    }

    /// Length of the hash, of every key and of the salted password, bytes.
    pub fn hash_len(self) -> usize {
        match self {
            Mechanism::Sha256 => 32,
            Mechanism::Sha512 => 64,
        }
    }

    fn hmac_alg(self) -> hmac::Algorithm {
        match self {
            Mechanism::Sha256 => hmac::HMAC_SHA256,
            Mechanism::Sha512 => hmac::HMAC_SHA512,
        }
    }

    fn hash(self, data: &[u8]) -> Vec<u8> {
        let alg = match self {
            Mechanism::Sha256 => &digest::SHA256,
            Mechanism::Sha512 => &digest::SHA512,
        };
        digest::digest(alg, data).as_ref().to_vec()
    }

    fn hmac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        hmac::sign(&hmac::Key::new(self.hmac_alg(), key), data)
            .as_ref()
            .to_vec()
    }
}

impl std::fmt::Display for Mechanism {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a credential or a SCRAM message was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScramError {
    /// A credential field out of bounds (UNACCEPTABLE_CREDENTIAL).
    #[error("{0}")]
    Unacceptable(String),
    /// The client's message is malformed or out of order (the exchange fails).
    #[error("invalid SCRAM message: {0}")]
    Protocol(String),
    /// Unknown user or wrong password: one error for both, so a client cannot tell which
    /// (the text is Kafka's).
    #[error(
        "Authentication failed during authentication due to invalid credentials with SASL mechanism {0}"
    )]
    BadCredentials(Mechanism),
}

/// Checks a user name: 1..=[`MAX_USER_BYTES`] bytes, no control characters.
pub fn validate_user(name: &str) -> Result<(), ScramError> {
    if name.is_empty() {
        return Err(ScramError::Unacceptable("the user name is empty".into()));
    }
    if name.len() > MAX_USER_BYTES {
        return Err(ScramError::Unacceptable(format!(
            "the user name is {} bytes, over the {MAX_USER_BYTES} allowed",
            name.len()
        )));
    }
    if name.chars().any(char::is_control) {
        return Err(ScramError::Unacceptable(format!(
            "the user name {name:?} has a control character"
        )));
    }
    Ok(())
}

/// Checks an iteration count against [`MIN_ITERATIONS`]..=[`MAX_ITERATIONS`].
pub fn validate_iterations(iterations: i64) -> Result<u32, ScramError> {
    u32::try_from(iterations)
        .ok()
        .filter(|i| (MIN_ITERATIONS..=MAX_ITERATIONS).contains(i))
        .ok_or_else(|| {
            ScramError::Unacceptable(format!(
                "iterations {iterations} is outside {MIN_ITERATIONS}..={MAX_ITERATIONS}"
            ))
        })
}

/// `Hi(password, salt, iterations)` of RFC 5802: PBKDF2 with the mechanism's HMAC, one block
/// of [`Mechanism::hash_len`] bytes. What a client sends to set a credential.
pub fn salted_password(
    mechanism: Mechanism,
    password: &[u8],
    salt: &[u8],
    iterations: NonZeroU32,
) -> Vec<u8> {
    let alg = match mechanism {
        Mechanism::Sha256 => pbkdf2::PBKDF2_HMAC_SHA256,
        Mechanism::Sha512 => pbkdf2::PBKDF2_HMAC_SHA512,
    };
    let mut out = vec![0; mechanism.hash_len()];
    pbkdf2::derive(alg, iterations, salt, password, &mut out);
    out
}

/// One user's credential for one mechanism (Kafka: `ScramCredential`).
///
/// Invariant: `salt` is within [`SALT_BYTES`], `iterations` within
/// [`MIN_ITERATIONS`]..=[`MAX_ITERATIONS`], both keys are [`Mechanism::hash_len`] bytes of
/// `mechanism` (checked by every constructor).
#[derive(Clone, PartialEq, Eq)]
pub struct ScramCredential {
    /// The mechanism the keys belong to.
    pub mechanism: Mechanism,
    /// The salt.
    pub salt: Vec<u8>,
    /// `H(HMAC(SaltedPassword, "Client Key"))`.
    pub stored_key: Vec<u8>,
    /// `HMAC(SaltedPassword, "Server Key")`.
    pub server_key: Vec<u8>,
    /// PBKDF2 iterations.
    pub iterations: u32,
}

impl std::fmt::Debug for ScramCredential {
    /// Keys are not printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScramCredential")
            .field("mechanism", &self.mechanism)
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}

impl ScramCredential {
    /// The credential of `salted_password` (see [`salted_password`]). Errors
    /// (UNACCEPTABLE_CREDENTIAL): iterations out of bounds, a salt outside [`SALT_BYTES`], a
    /// salted password that is not [`Mechanism::hash_len`] bytes.
    pub fn from_salted_password(
        mechanism: Mechanism,
        salted_password: &[u8],
        salt: &[u8],
        iterations: i64,
    ) -> Result<ScramCredential, ScramError> {
        let iterations = validate_iterations(iterations)?;
        check_salt(salt)?;
        if salted_password.len() != mechanism.hash_len() {
            return Err(ScramError::Unacceptable(format!(
                "the salted password is {} bytes; {mechanism} needs {}",
                salted_password.len(),
                mechanism.hash_len()
            )));
        }
        let client_key = mechanism.hmac(salted_password, b"Client Key");
        Ok(ScramCredential {
            mechanism,
            salt: salt.to_vec(),
            stored_key: mechanism.hash(&client_key),
            server_key: mechanism.hmac(salted_password, b"Server Key"),
            iterations,
        })
    }

    /// The credential of a record, validated (replay refuses a bad one).
    pub fn from_record(r: &UserScramCredentialRecord) -> Result<ScramCredential, ScramError> {
        let mechanism = Mechanism::from_proto(r.mechanism).ok_or_else(|| {
            ScramError::Unacceptable(format!(
                "mechanism {} is not a SCRAM mechanism",
                r.mechanism
            ))
        })?;
        validate_user(&r.name)?;
        let iterations = validate_iterations(i64::from(r.iterations))?;
        check_salt(&r.salt)?;
        for (field, key) in [("stored_key", &r.stored_key), ("server_key", &r.server_key)] {
            if key.len() != mechanism.hash_len() {
                return Err(ScramError::Unacceptable(format!(
                    "{field} is {} bytes; {mechanism} needs {}",
                    key.len(),
                    mechanism.hash_len()
                )));
            }
        }
        Ok(ScramCredential {
            mechanism,
            salt: r.salt.to_vec(),
            stored_key: r.stored_key.to_vec(),
            server_key: r.server_key.to_vec(),
            iterations,
        })
    }

    /// This credential as the record of `user`.
    pub fn to_record(&self, user: &str) -> UserScramCredentialRecord {
        UserScramCredentialRecord {
            name: user.to_owned(),
            mechanism: self.mechanism.to_proto() as i32,
            salt: self.salt.clone().into(),
            stored_key: self.stored_key.clone().into(),
            server_key: self.server_key.clone().into(),
            iterations: i32::try_from(self.iterations).unwrap_or(i32::MAX),
        }
    }
}

fn check_salt(salt: &[u8]) -> Result<(), ScramError> {
    if !SALT_BYTES.contains(&salt.len()) {
        return Err(ScramError::Unacceptable(format!(
            "the salt is {} bytes; it must be {}..={}",
            salt.len(),
            SALT_BYTES.start(),
            SALT_BYTES.end()
        )));
    }
    Ok(())
}

/// The removal record of `user`'s `mechanism` credential.
pub fn removal_record(user: &str, mechanism: Mechanism) -> RemoveUserScramCredentialRecord {
    RemoveUserScramCredentialRecord {
        name: user.to_owned(),
        mechanism: mechanism.to_proto() as i32,
    }
}

/// The credentials of an image by (user, mechanism) (Kafka: `ScramImage`).
pub type ScramCredentialsImage = BTreeMap<(String, Mechanism), Arc<ScramCredential>>;

/// The users of `image` (sorted) with their mechanisms and iterations.
pub fn users(image: &ScramCredentialsImage) -> BTreeMap<&str, Vec<(Mechanism, u32)>> {
    let mut out: BTreeMap<&str, Vec<(Mechanism, u32)>> = BTreeMap::new();
    for ((user, mech), c) in image {
        out.entry(user.as_str())
            .or_default()
            .push((*mech, c.iterations));
    }
    out
}

/// A saslname of RFC 5802 decoded: `=2C` -> `,`, `=3D` -> `=`; any other `=` is an error.
fn decode_saslname(s: &str) -> Result<String, ScramError> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('=') {
        out.push_str(&rest[..i]);
        match rest.get(i..i + 3) {
            Some("=2C") => out.push(','),
            Some("=3D") => out.push('='),
            _ => {
                return Err(ScramError::Protocol(format!(
                    "the user name {s:?} has a '=' that is not =2C or =3D"
                )));
            }
        }
        rest = &rest[i + 3..];
    }
    out.push_str(rest);
    Ok(out)
}

/// A user name as a saslname (the inverse of [`decode_saslname`]).
fn encode_saslname(s: &str) -> String {
    s.replace('=', "=3D").replace(',', "=2C")
}

/// A printable nonce: ASCII 0x21..=0x7e except `,` (RFC 5802).
fn valid_nonce(n: &str) -> bool {
    !n.is_empty() && n.bytes().all(|b| (0x21..=0x7e).contains(&b) && b != b',')
}

fn b64_decode(field: &str, v: &str) -> Result<Vec<u8>, ScramError> {
    B64.decode(v)
        .map_err(|e| ScramError::Protocol(format!("{field} is not base64: {e}")))
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn xor(a: &[u8], b: &[u8]) -> Vec<u8> {
    a.iter().zip(b).map(|(x, y)| x ^ y).collect()
}

/// The server's side of one SCRAM authentication (Kafka: `ScramSaslServer`). Feed it the
/// client's two messages in order; any error ends the exchange (the listener answers
/// SASL_AUTHENTICATION_FAILED and closes the connection).
#[derive(Debug)]
pub struct ServerExchange {
    mechanism: Mechanism,
    state: ServerState,
}

#[derive(Debug)]
enum ServerState {
    ClientFirst,
    ClientFinal {
        user: String,
        credential: Arc<ScramCredential>,
        /// `client-first-message-bare` + "," + `server-first-message`.
        auth_prefix: String,
        /// The GS2 header the client's `c=` must carry.
        gs2_header: String,
        nonce: String,
    },
    Done,
}

impl ServerExchange {
    /// A new exchange for `mechanism`.
    pub fn new(mechanism: Mechanism) -> ServerExchange {
        ServerExchange {
            mechanism,
            state: ServerState::ClientFirst,
        }
    }

    /// The client-first message: answers the server-first message. `lookup` finds the
    /// credential of a user for this mechanism; `server_nonce` is fresh randomness of valid
    /// nonce characters (at least 16 of them). Errors: a malformed message, an authorization
    /// id other than the user, the `tokenauth` extension, an unknown user.
    pub fn client_first(
        &mut self,
        message: &[u8],
        lookup: impl FnOnce(&str) -> Option<Arc<ScramCredential>>,
        server_nonce: &str,
    ) -> Result<Vec<u8>, ScramError> {
        debug_assert!(valid_nonce(server_nonce));
        if !matches!(self.state, ServerState::ClientFirst) {
            return Err(ScramError::Protocol(
                "client-first message sent twice".into(),
            ));
        }
        self.state = ServerState::Done;
        let msg = message_text(message)?;
        // gs2-header: "n," [ "a=" authzid ] ","
        let rest = msg.strip_prefix("n,").ok_or_else(|| {
            ScramError::Protocol(
                "client-first must start with the GS2 header \"n,\" (channel binding is not \
                 supported)"
                    .into(),
            )
        })?;
        let comma = rest
            .find(',')
            .ok_or_else(|| ScramError::Protocol("client-first has no GS2 header end".into()))?;
        let authzid = match &rest[..comma] {
            "" => None,
            a => Some(decode_saslname(a.strip_prefix("a=").ok_or_else(|| {
                ScramError::Protocol(format!("bad authorization id field {a:?}"))
            })?)?),
        };
        let gs2_header = format!("n,{},", &rest[..comma]);
        let bare = &rest[comma + 1..];
        let mut fields = bare.split(',');
        let user = match fields.next() {
            Some(f) if f.starts_with("n=") => decode_saslname(&f[2..])?,
            Some(f) if f.starts_with("m=") => {
                return Err(ScramError::Protocol(
                    "mandatory extensions (m=) are not supported".into(),
                ));
            }
            _ => return Err(ScramError::Protocol("client-first has no user (n=)".into())),
        };
        let client_nonce = match fields.next() {
            Some(f) if f.starts_with("r=") && valid_nonce(&f[2..]) => &f[2..],
            _ => {
                return Err(ScramError::Protocol(
                    "client-first has no valid nonce (r=)".into(),
                ));
            }
        };
        for ext in fields {
            if ext.starts_with("tokenauth=") {
                return Err(ScramError::Protocol(
                    "delegation tokens (tokenauth) are not supported".into(),
                ));
            }
        }
        if let Some(a) = authzid
            && a != user
        {
            return Err(ScramError::Protocol(format!(
                "authorization id {a:?} is not the user name {user:?}"
            )));
        }
        validate_user(&user).map_err(|e| ScramError::Protocol(e.to_string()))?;
        let credential = lookup(&user).ok_or(ScramError::BadCredentials(self.mechanism))?;
        let nonce = format!("{client_nonce}{server_nonce}");
        let server_first = format!(
            "r={nonce},s={},i={}",
            B64.encode(&credential.salt),
            credential.iterations
        );
        self.state = ServerState::ClientFinal {
            user,
            credential,
            auth_prefix: format!("{bare},{server_first}"),
            gs2_header,
            nonce,
        };
        Ok(server_first.into_bytes())
    }

    /// The client-final message: on a valid proof, the authenticated user and the
    /// server-final message (`v=` ServerSignature). Errors: a malformed message, a channel
    /// binding or nonce other than the exchange's, a wrong proof.
    pub fn client_final(&mut self, message: &[u8]) -> Result<(String, Vec<u8>), ScramError> {
        let ServerState::ClientFinal {
            user,
            credential,
            auth_prefix,
            gs2_header,
            nonce,
        } = std::mem::replace(&mut self.state, ServerState::Done)
        else {
            return Err(ScramError::Protocol(
                "client-final message out of order".into(),
            ));
        };
        let msg = message_text(message)?;
        let (without_proof, proof) = msg
            .rsplit_once(",p=")
            .ok_or_else(|| ScramError::Protocol("client-final has no proof (p=)".into()))?;
        let mut fields = without_proof.split(',');
        let binding = match fields.next() {
            Some(f) if f.starts_with("c=") => b64_decode("the channel binding", &f[2..])?,
            _ => {
                return Err(ScramError::Protocol(
                    "client-final has no channel binding (c=)".into(),
                ));
            }
        };
        if binding != gs2_header.as_bytes() {
            return Err(ScramError::Protocol(
                "the channel binding is not the client-first GS2 header".into(),
            ));
        }
        // The nonce must END with the exchange's, as Kafka's ScramSaslServer checks
        // (`endsWith`): librdkafka puts its client nonce in front of the server-first nonce
        // again. The proof covers the message as sent, so this weakens nothing.
        match fields.next() {
            Some(f)
                if f.strip_prefix("r=")
                    .is_some_and(|r| r.ends_with(nonce.as_str())) => {}
            _ => {
                return Err(ScramError::Protocol(
                    "client-final nonce is not the exchange's".into(),
                ));
            }
        }
        let proof = b64_decode("the proof", proof)?;
        let m = self.mechanism;
        let auth_message = format!("{auth_prefix},{without_proof}");
        let client_signature = m.hmac(&credential.stored_key, auth_message.as_bytes());
        if proof.len() != client_signature.len() {
            return Err(ScramError::BadCredentials(m));
        }
        let client_key = xor(&proof, &client_signature);
        if !constant_time_eq(&m.hash(&client_key), &credential.stored_key) {
            return Err(ScramError::BadCredentials(m));
        }
        let server_signature = m.hmac(&credential.server_key, auth_message.as_bytes());
        Ok((
            user,
            format!("v={}", B64.encode(server_signature)).into_bytes(),
        ))
    }
}

fn message_text(message: &[u8]) -> Result<&str, ScramError> {
    if message.len() > MAX_CLIENT_MESSAGE_BYTES {
        return Err(ScramError::Protocol(format!(
            "a message of {} bytes is over the {MAX_CLIENT_MESSAGE_BYTES} allowed",
            message.len()
        )));
    }
    std::str::from_utf8(message)
        .map_err(|_| ScramError::Protocol("the message is not UTF-8".into()))
}

/// The client's side of one SCRAM authentication (RFC 5802 §3), for Keel's tests and tools.
#[derive(Debug)]
pub struct ClientExchange {
    mechanism: Mechanism,
    password: Vec<u8>,
    client_first_bare: String,
    client_nonce: String,
    /// The expected `v=` once client-final is built.
    server_signature: Option<Vec<u8>>,
}

impl ClientExchange {
    /// Starts an exchange for `user` with `client_nonce` (valid nonce characters); returns it
    /// and the client-first message.
    pub fn start(
        mechanism: Mechanism,
        user: &str,
        password: &str,
        client_nonce: &str,
    ) -> (ClientExchange, Vec<u8>) {
        let client_first_bare = format!("n={},r={client_nonce}", encode_saslname(user));
        let first = format!("n,,{client_first_bare}").into_bytes();
        (
            ClientExchange {
                mechanism,
                password: password.as_bytes().to_vec(),
                client_first_bare,
                client_nonce: client_nonce.to_owned(),
                server_signature: None,
            },
            first,
        )
    }

    /// The server-first message: answers the client-final message. Errors: a malformed
    /// message, a nonce that does not extend the client's, iterations out of bounds.
    pub fn server_first(&mut self, message: &[u8]) -> Result<Vec<u8>, ScramError> {
        let msg = std::str::from_utf8(message)
            .map_err(|_| ScramError::Protocol("server-first is not UTF-8".into()))?;
        let mut nonce = None;
        let mut salt = None;
        let mut iterations = None;
        for f in msg.split(',') {
            if let Some(v) = f.strip_prefix("r=") {
                nonce = Some(v);
            } else if let Some(v) = f.strip_prefix("s=") {
                salt = Some(b64_decode("the salt", v)?);
            } else if let Some(v) = f.strip_prefix("i=") {
                iterations = v.parse::<i64>().ok();
            }
        }
        let (Some(nonce), Some(salt), Some(iterations)) = (nonce, salt, iterations) else {
            return Err(ScramError::Protocol(format!(
                "server-first {msg:?} lacks r=, s= or i="
            )));
        };
        if !nonce.starts_with(&self.client_nonce) || nonce.len() == self.client_nonce.len() {
            return Err(ScramError::Protocol(
                "the server nonce does not extend the client's".into(),
            ));
        }
        let iterations = NonZeroU32::new(validate_iterations(iterations)?)
            .ok_or_else(|| ScramError::Protocol("iterations 0".into()))?;
        let m = self.mechanism;
        let salted = salted_password(m, &self.password, &salt, iterations);
        let client_key = m.hmac(&salted, b"Client Key");
        let stored_key = m.hash(&client_key);
        let without_proof = format!("c={},r={nonce}", B64.encode("n,,"));
        let auth_message = format!("{},{msg},{without_proof}", self.client_first_bare);
        let client_signature = m.hmac(&stored_key, auth_message.as_bytes());
        let proof = xor(&client_key, &client_signature);
        let server_key = m.hmac(&salted, b"Server Key");
        self.server_signature = Some(m.hmac(&server_key, auth_message.as_bytes()));
        Ok(format!("{without_proof},p={}", B64.encode(proof)).into_bytes())
    }

    /// The server-final message: `Ok` when its signature proves the server knows the
    /// credential.
    pub fn server_final(&self, message: &[u8]) -> Result<(), ScramError> {
        let expected = self
            .server_signature
            .as_ref()
            .ok_or_else(|| ScramError::Protocol("server-final before server-first".into()))?;
        let msg = std::str::from_utf8(message)
            .map_err(|_| ScramError::Protocol("server-final is not UTF-8".into()))?;
        let v = msg.strip_prefix("v=").ok_or_else(|| {
            ScramError::Protocol(format!("server-final {msg:?} has no signature"))
        })?;
        if constant_time_eq(&b64_decode("the server signature", v)?, expected) {
            Ok(())
        } else {
            Err(ScramError::Protocol(
                "the server's signature is wrong".into(),
            ))
        }
    }
}

/// How long a session token of [`mint_token`] is valid, ms (24 h, Kafka's default
/// `delegation.token.expiry.time.ms`).
pub const TOKEN_LIFETIME_MS: u64 = 24 * 3600 * 1000;
/// How long the second step of a [`grpc_step1`] exchange may come after the first, ms.
pub const EXCHANGE_LIFETIME_MS: u64 = 60_000;
/// Prefix of a session token.
const TOKEN_PREFIX: &str = "keel1";

fn token_payload(user: &str, m: Mechanism, expires_ms: u64) -> String {
    format!("keel-token|{user}|{}|{expires_ms}", m.name())
}

/// A session token for `user` (#23, the gRPC path of SASL/SCRAM): `keel1.<user, base64url>.
/// <mechanism>.<expiry ms>.<HMAC(ServerKey, payload), base64url>`. Any node holding the
/// user's credential can check it without shared state; changing or deleting the credential
/// revokes it (its ServerKey is gone). Like Kafka's delegation tokens (KIP-48), HMACs keyed
/// by a secret only the cluster holds.
pub fn mint_token(user: &str, credential: &ScramCredential, expires_ms: u64) -> String {
    use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64URL;
    let m = credential.mechanism;
    let mac = m.hmac(
        &credential.server_key,
        token_payload(user, m, expires_ms).as_bytes(),
    );
    format!(
        "{TOKEN_PREFIX}.{}.{}.{expires_ms}.{}",
        B64URL.encode(user),
        m.to_proto() as i32,
        B64URL.encode(mac)
    )
}

/// Checks a session token at `now_ms`: the user it names, or why it is refused (malformed,
/// expired, unknown user or a credential changed since: one error for the last two).
pub fn verify_token(
    token: &str,
    lookup: impl FnOnce(&str, Mechanism) -> Option<Arc<ScramCredential>>,
    now_ms: u64,
) -> Result<String, ScramError> {
    use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64URL;
    let bad = |why: &str| ScramError::Protocol(format!("session token refused: {why}"));
    if token.len() > MAX_CLIENT_MESSAGE_BYTES {
        return Err(bad("too long"));
    }
    let parts: Vec<&str> = token.split('.').collect();
    let [prefix, user, mech, expires, mac] = parts[..] else {
        return Err(bad("not a Keel session token"));
    };
    if prefix != TOKEN_PREFIX {
        return Err(bad("not a Keel session token"));
    }
    let user = B64URL
        .decode(user)
        .ok()
        .and_then(|u| String::from_utf8(u).ok())
        .ok_or_else(|| bad("bad user field"))?;
    let m = mech
        .parse::<i32>()
        .ok()
        .and_then(Mechanism::from_proto)
        .ok_or_else(|| bad("bad mechanism field"))?;
    let expires_ms: u64 = expires.parse().map_err(|_| bad("bad expiry field"))?;
    let mac = B64URL.decode(mac).map_err(|_| bad("bad signature field"))?;
    if now_ms >= expires_ms {
        return Err(bad("expired; authenticate again"));
    }
    let credential = lookup(&user, m).ok_or(ScramError::BadCredentials(m))?;
    let expected = m.hmac(
        &credential.server_key,
        token_payload(&user, m, expires_ms).as_bytes(),
    );
    if !constant_time_eq(&mac, &expected) {
        return Err(ScramError::BadCredentials(m));
    }
    Ok(user)
}

/// The MAC binding a stateless exchange's first step to its second: HMAC(ServerKey,
/// client-first | server nonce).
fn exchange_mac(credential: &ScramCredential, client_first: &[u8], server_nonce: &str) -> Vec<u8> {
    let mut data = b"keel-scram|".to_vec();
    data.extend_from_slice(client_first);
    data.push(b'|');
    data.extend_from_slice(server_nonce.as_bytes());
    credential.mechanism.hmac(&credential.server_key, &data)
}

/// The first answer of a stateless SCRAM exchange over unary RPCs (#23): the server-first
/// message, the server nonce (`random` then the exchange's expiry) and the MAC the second step
/// must bring back. `random` is fresh, printable and without `,` or `.`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrpcStep1 {
    /// The server-first message.
    pub server_first: Vec<u8>,
    /// The server's part of the nonce, to send back.
    pub server_nonce: String,
    /// To send back.
    pub exchange_mac: Vec<u8>,
}

/// Step 1 of the gRPC exchange (see [`GrpcStep1`]).
pub fn grpc_step1(
    mechanism: Mechanism,
    client_first: &[u8],
    lookup: impl Fn(&str) -> Option<Arc<ScramCredential>>,
    random: &str,
    now_ms: u64,
) -> Result<GrpcStep1, ScramError> {
    debug_assert!(valid_nonce(random) && !random.contains('.'));
    let server_nonce = format!("{random}.{}", now_ms + EXCHANGE_LIFETIME_MS);
    let mut found = None;
    let server_first = ServerExchange::new(mechanism).client_first(
        client_first,
        |u| {
            let c = lookup(u);
            found.clone_from(&c);
            c
        },
        &server_nonce,
    )?;
    let credential = found.ok_or(ScramError::BadCredentials(mechanism))?;
    Ok(GrpcStep1 {
        server_first,
        exchange_mac: exchange_mac(&credential, client_first, &server_nonce),
        server_nonce,
    })
}

/// Step 2 of the gRPC exchange: replays step 1 from what the client brought back (checking
/// the MAC and the expiry), then checks the client-final message. Returns the user, the
/// server-final message and a session token valid until `now_ms +` [`TOKEN_LIFETIME_MS`].
pub fn grpc_step2(
    mechanism: Mechanism,
    client_first: &[u8],
    server_nonce: &str,
    mac: &[u8],
    client_final: &[u8],
    lookup: impl Fn(&str) -> Option<Arc<ScramCredential>>,
    now_ms: u64,
) -> Result<(String, Vec<u8>, String), ScramError> {
    let expires: u64 = server_nonce
        .rsplit_once('.')
        .and_then(|(_, e)| e.parse().ok())
        .ok_or_else(|| ScramError::Protocol("bad server nonce".into()))?;
    if now_ms >= expires {
        return Err(ScramError::Protocol(
            "the exchange expired; start again".into(),
        ));
    }
    if !valid_nonce(server_nonce) {
        return Err(ScramError::Protocol("bad server nonce".into()));
    }
    let mut found = None;
    let mut exchange = ServerExchange::new(mechanism);
    exchange.client_first(
        client_first,
        |u| {
            let c = lookup(u);
            found.clone_from(&c);
            c
        },
        server_nonce,
    )?;
    let credential = found.ok_or(ScramError::BadCredentials(mechanism))?;
    if !constant_time_eq(mac, &exchange_mac(&credential, client_first, server_nonce)) {
        return Err(ScramError::Protocol(
            "the exchange was not started by this cluster".into(),
        ));
    }
    let (user, server_final) = exchange.client_final(client_final)?;
    let token = mint_token(&user, &credential, now_ms + TOKEN_LIFETIME_MS);
    Ok((user, server_final, token))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cred(m: Mechanism, password: &str) -> Arc<ScramCredential> {
        let salt = b"0123456789abcdef";
        let it = NonZeroU32::new(4096).unwrap();
        let sp = salted_password(m, password.as_bytes(), salt, it);
        Arc::new(ScramCredential::from_salted_password(m, &sp, salt, 4096).unwrap())
    }

    fn run(
        m: Mechanism,
        stored: &Arc<ScramCredential>,
        user: &str,
        password: &str,
    ) -> Result<String, ScramError> {
        let (mut client, first) = ClientExchange::start(m, user, password, "clientNONCE123");
        let mut server = ServerExchange::new(m);
        let sfirst = server.client_first(
            &first,
            |u| (u == "al,i=ce").then(|| stored.clone()),
            "serverNONCE4567890",
        )?;
        let cfinal = client.server_first(&sfirst)?;
        let (u, sfinal) = server.client_final(&cfinal)?;
        client.server_final(&sfinal)?;
        Ok(u)
    }

    #[test]
    fn both_mechanisms_authenticate_the_right_password_only() {
        for m in Mechanism::ALL {
            let c = cred(m, "s3cret");
            assert_eq!(c.stored_key.len(), m.hash_len());
            assert_eq!(run(m, &c, "al,i=ce", "s3cret").unwrap(), "al,i=ce");
            assert_eq!(
                run(m, &c, "al,i=ce", "wrong"),
                Err(ScramError::BadCredentials(m))
            );
            assert_eq!(
                run(m, &c, "bob", "s3cret"),
                Err(ScramError::BadCredentials(m))
            );
        }
    }

    /// RFC 7677 §3's SCRAM-SHA-256 example: user "user", password "pencil".
    #[test]
    fn rfc_7677_test_vector() {
        let m = Mechanism::Sha256;
        let salt = B64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let sp = salted_password(m, b"pencil", &salt, NonZeroU32::new(4096).unwrap());
        let c = Arc::new(ScramCredential::from_salted_password(m, &sp, &salt, 4096).unwrap());
        let mut server = ServerExchange::new(m);
        let first = server
            .client_first(
                b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO",
                |u| (u == "user").then(|| c.clone()),
                "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
            )
            .unwrap();
        assert_eq!(
            first,
            b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
        );
        let (user, fin) = server
            .client_final(
                b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
            )
            .unwrap();
        assert_eq!(user, "user");
        assert_eq!(fin, b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=");
    }

    #[test]
    fn malformed_and_out_of_order_messages_are_refused() {
        let m = Mechanism::Sha256;
        let c = cred(m, "pw");
        let lookup = |_: &str| Some(c.clone());
        for bad in [
            &b"y,,n=alice,r=abc"[..],
            b"p=tls-unique,,n=alice,r=abc",
            b"n,,r=abc",
            b"n,,n=alice",
            b"n,,n=al=ice,r=abc",
            b"n,a=bob,n=alice,r=abc",
            b"n,,n=alice,r=abc,tokenauth=true",
            b"n,,n=alice,r=a\x01bc",
            b"\xff\xfe",
        ] {
            let mut s = ServerExchange::new(m);
            assert!(
                matches!(
                    s.client_first(bad, lookup, "srvnonce0123456789"),
                    Err(ScramError::Protocol(_))
                ),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        let mut s = ServerExchange::new(m);
        assert!(s.client_final(b"c=biws,r=x,p=AAAA").is_err());
        let mut s = ServerExchange::new(m);
        s.client_first(b"n,,n=alice,r=abc", lookup, "srvnonce0123456789")
            .unwrap();
        // Wrong nonce, wrong channel binding, no proof.
        for bad in [
            &b"c=biws,r=abcX,p=AAAA"[..],
            b"c=eSws,r=abcsrvnonce0123456789,p=AAAA",
            b"c=biws,r=abcsrvnonce0123456789",
        ] {
            let mut s = ServerExchange::new(m);
            s.client_first(b"n,,n=alice,r=abc", lookup, "srvnonce0123456789")
                .unwrap();
            assert!(s.client_final(bad).is_err());
        }
        // Over-long message.
        let mut s = ServerExchange::new(m);
        let long = vec![b'a'; MAX_CLIENT_MESSAGE_BYTES + 1];
        assert!(s.client_first(&long, lookup, "srvnonce0123456789").is_err());
    }

    #[test]
    fn stateless_grpc_exchange_mints_a_token_any_node_can_check() {
        let m = Mechanism::Sha256;
        let c = cred(m, "pw");
        let lookup = |u: &str| (u == "al,i=ce").then(|| c.clone());
        let (mut client, first) = ClientExchange::start(m, "al,i=ce", "pw", "cnonce");
        let s1 = grpc_step1(m, &first, lookup, "r4nd0m", 1_000).unwrap();
        let fin = client.server_first(&s1.server_first).unwrap();
        let step2 =
            |mac: &[u8], now| grpc_step2(m, &first, &s1.server_nonce, mac, &fin, lookup, now);
        // A forged MAC, or too late.
        assert!(step2(b"forged", 2_000).is_err());
        assert!(step2(&s1.exchange_mac, 1_000 + EXCHANGE_LIFETIME_MS).is_err());
        let (user, server_final, token) = step2(&s1.exchange_mac, 2_000).unwrap();
        assert_eq!(user, "al,i=ce");
        client.server_final(&server_final).unwrap();
        let check = |t: &str, now| verify_token(t, |u, mm| lookup(u).filter(|_| mm == m), now);
        assert_eq!(check(&token, 3_000).unwrap(), "al,i=ce");
        assert!(check(&token, 2_000 + TOKEN_LIFETIME_MS).is_err());
        // Tampered, or the credential changed (another ServerKey).
        assert!(check(&token.replace("keel1", "keel2"), 3_000).is_err());
        let forged = mint_token("al,i=ce", &cred(m, "other"), 2_000 + TOKEN_LIFETIME_MS);
        assert_eq!(check(&forged, 3_000), Err(ScramError::BadCredentials(m)));
        // A wrong password fails at step 2.
        let (mut bad, first) = ClientExchange::start(m, "al,i=ce", "nope", "cnonce");
        let s1 = grpc_step1(m, &first, lookup, "r4nd0m", 1_000).unwrap();
        let fin = bad.server_first(&s1.server_first).unwrap();
        assert_eq!(
            grpc_step2(
                m,
                &first,
                &s1.server_nonce,
                &s1.exchange_mac,
                &fin,
                lookup,
                2_000
            ),
            Err(ScramError::BadCredentials(m))
        );
    }

    #[test]
    fn credential_bounds() {
        let m = Mechanism::Sha512;
        let sp = vec![0; 64];
        assert!(ScramCredential::from_salted_password(m, &sp, b"salt", 4095).is_err());
        assert!(ScramCredential::from_salted_password(m, &sp, b"salt", 16385).is_err());
        assert!(ScramCredential::from_salted_password(m, &sp, b"", 4096).is_err());
        assert!(ScramCredential::from_salted_password(m, &sp[..32], b"salt", 4096).is_err());
        let c = ScramCredential::from_salted_password(m, &sp, b"salt", 16384).unwrap();
        let r = c.to_record("u");
        assert_eq!(ScramCredential::from_record(&r).unwrap(), c);
        assert!(validate_user("").is_err());
        assert!(validate_user(&"x".repeat(MAX_USER_BYTES + 1)).is_err());
        assert!(validate_user("a\nb").is_err());
        assert_eq!(decode_saslname("a=2Cb=3Dc").unwrap(), "a,b=c");
        assert_eq!(encode_saslname("a,b=c"), "a=2Cb=3Dc");
        // Keys are not printed.
        assert!(!format!("{c:?}").contains("stored_key"));
    }
}
