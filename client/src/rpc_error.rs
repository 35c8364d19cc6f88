//! One human line for a failed gRPC call or connection, shared by the admin client, the
//! producer and the consumer.
//!
//! tonic's `Status` and `transport::Error` print their `Debug`-like internals through
//! `Display` (`code: 'The service is currently unavailable', message: "tcp connect error",
//! source: tonic::transport::Error(Transport, ConnectError(...))`). Users get
//! `127.0.0.1:1: connection refused` instead: the innermost `std::io::Error` of the source
//! chain when there is one, else the status message and the distinct texts of its causes.

use std::error::Error;
use std::io;

use tonic::{Code, Status};

/// The gRPC service a caller expected at an address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// `proto/controller.proto` (`keel-controller`).
    Controller,
    /// `proto/broker.proto` (`keel-broker`).
    Broker,
}

impl Api {
    fn name(self) -> &'static str {
        match self {
            Api::Controller => "controller",
            Api::Broker => "broker",
        }
    }

    fn other(self) -> &'static str {
        match self {
            Api::Controller => "broker",
            Api::Broker => "controller",
        }
    }
}

/// `addr: what went wrong` for a failed RPC (UNIMPLEMENTED: `addr does not serve the
/// controller API (is it a broker?)`; from a server that answered plain HTTP, such as a
/// metrics listener: `... (it answered HTTP 404, not gRPC: is it a metrics port?)`).
pub fn status_line(addr: &str, api: Api, status: &Status) -> String {
    if status.code() == Code::Unimplemented {
        // tonic's text when the reply had no grpc-status (Status::from_header_map).
        if let Some(http) = status
            .message()
            .strip_prefix("grpc-status header missing, mapped from HTTP status code ")
        {
            return format!(
                "{addr} does not serve the {} API (it answered HTTP {http}, not gRPC: is it a metrics port?)",
                api.name()
            );
        }
        return format!(
            "{addr} does not serve the {} API (is it a {}?)",
            api.name(),
            api.other()
        );
    }
    format!("{addr}: {}", status_detail(status))
}

/// `addr is a Kafka listener, not the controller API (is it a broker's Kafka port?)`: what
/// to say once [`crate::kafka_probe::speaks_kafka`] found one where `api` was expected.
pub fn kafka_listener_line(addr: &str, api: Api) -> String {
    format!(
        "{addr} is a Kafka listener, not the {} API (is it a broker's Kafka port?)",
        api.name()
    )
}

/// `addr: what went wrong` for a failed connection (e.g. `tonic::transport::Error`).
pub fn error_line(addr: &str, err: &(dyn Error + 'static)) -> String {
    format!("{addr}: {}", error_detail(err))
}

/// What went wrong with an RPC, without the address: `connection refused`, `dns error:
/// failed to lookup address information: ...`, `no answer within the request timeout`, ...
/// TLS failures get what to do appended ([`explain_tls`]).
pub fn status_detail(status: &Status) -> String {
    explain_tls(status_text(status))
}

/// The causes of TLS failures users meet, as rustls and h2 word them, and what each means:
/// a plaintext client on a TLS listener reads the TLS alert as an HTTP/2 frame; a TLS
/// client on a plaintext listener reads HTTP/2 bytes as a TLS record.
const TLS_HINTS: &[(&str, &str)] = &[
    (
        "frame with invalid size",
        "the server speaks TLS and this client does not: give the CA with --tls-ca-file \
         (KEEL_TLS_CA_FILE)",
    ),
    (
        "InvalidContentType",
        "the server does not speak TLS: drop --tls-ca-file, or enable TLS on the server",
    ),
    (
        "UnknownIssuer",
        "the server's certificate is not signed by the CA of --tls-ca-file",
    ),
    (
        "BadSignature",
        "the server's certificate is not signed by the CA of --tls-ca-file",
    ),
    (
        "alert: DecryptError",
        "the server does not trust the client certificate's CA",
    ),
    (
        "NotValidForName",
        "the server's certificate does not name the host dialed (its DNS or IP SANs)",
    ),
    (
        "CertificateRequired",
        "the server requires a client certificate: give --tls-cert-file and --tls-key-file",
    ),
    (
        "alert: UnknownCA",
        "the server does not trust the client certificate's CA",
    ),
    (
        "alert: BadCertificate",
        "the server refused the client certificate",
    ),
    ("Expired", "a certificate has expired"),
];

/// Whether `text` (an error line) names a TLS failure of [`TLS_HINTS`]: a configuration
/// mismatch that retrying cannot fix.
pub fn is_tls_failure(text: &str) -> bool {
    TLS_HINTS.iter().any(|(needle, _)| text.contains(needle))
}

/// `text` with the meaning of a TLS failure it names appended, if any ([`TLS_HINTS`]).
pub fn explain_tls(text: String) -> String {
    match TLS_HINTS.iter().find(|(needle, _)| text.contains(needle)) {
        Some((_, hint)) => format!("{text} ({hint})"),
        None => text,
    }
}

fn status_text(status: &Status) -> String {
    if let Some(io) = innermost_io(status) {
        return io_detail(status.message(), io);
    }
    let timed_out = matches!(status.code(), Code::Cancelled | Code::DeadlineExceeded)
        && (status.message() == tonic::TimeoutExpired(()).to_string()
            || status.code() == Code::DeadlineExceeded);
    if timed_out {
        return "no answer within the request timeout".into();
    }
    let mut parts = Vec::new();
    push_distinct(&mut parts, status.message());
    let mut source = status.source();
    while let Some(cause) = source {
        push_distinct(&mut parts, &cause_text(cause));
        source = cause.source();
    }
    let code = status.code();
    let text = parts.join(": ");
    match code {
        _ if text.is_empty() => format!("gRPC status {}", code_name(code)),
        Code::Unknown | Code::Unavailable => text,
        _ => format!("{text} (gRPC {})", code_name(code)),
    }
}

/// What went wrong, for any error whose chain may hold a `Status` or an `io::Error`.
pub fn error_detail(err: &(dyn Error + 'static)) -> String {
    explain_tls(error_text(err))
}

fn error_text(err: &(dyn Error + 'static)) -> String {
    if let Some(status) = err.downcast_ref::<Status>() {
        return status_detail(status);
    }
    if let Some(io) = innermost_io(err) {
        return io_detail(&cause_text(err), io);
    }
    let mut parts = Vec::new();
    let mut source = Some(err);
    while let Some(cause) = source {
        push_distinct(&mut parts, &cause_text(cause));
        source = cause.source();
    }
    if parts.is_empty() {
        "unknown error".into()
    } else {
        parts.join(": ")
    }
}

/// True when the RPC certainly never reached the server (the connection could not be
/// made), so a write cannot have been applied.
pub fn never_sent(err: &(dyn Error + 'static)) -> bool {
    let mut source = Some(err);
    while let Some(cause) = source {
        if cause.downcast_ref::<tonic::ConnectError>().is_some() {
            return true;
        }
        if let Some(io) = cause.downcast_ref::<io::Error>()
            && io.kind() == io::ErrorKind::ConnectionRefused
        {
            return true;
        }
        source = cause.source();
    }
    false
}

/// Whether a one-line failure (from [`status_line`] or [`error_line`]) says the server end
/// dropped a connection it had accepted: reset, aborted, broken pipe, or closed (hyper's
/// "connection closed before message completed"). What a non-gRPC listener that reads the
/// HTTP/2 preface as garbage does; refused connections and timeouts are not this.
pub fn connection_dropped(line: &str) -> bool {
    [
        "connection reset",
        "connection aborted",
        "broken pipe",
        "connection closed",
    ]
    .iter()
    .any(|p| line.contains(p))
}

/// Whether a failed RPC is worth retrying (elsewhere or later): transport failures,
/// timeouts and server-side hiccups, not refusals that would repeat (UNIMPLEMENTED,
/// INVALID_ARGUMENT, message too large, ...).
pub fn retriable(status: &Status) -> bool {
    matches!(
        status.code(),
        Code::Unavailable
            | Code::Cancelled
            | Code::DeadlineExceeded
            | Code::Unknown
            | Code::Aborted
            | Code::Internal
    )
}

fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

/// The text of one cause: a nested `Status` by its message (its `Display` is the noisy one).
fn cause_text(cause: &(dyn Error + 'static)) -> String {
    match cause.downcast_ref::<Status>() {
        Some(s) => s.message().to_string(),
        None => cause.to_string(),
    }
}

/// Appends `text` unless it is empty, says nothing (`transport error`), or repeats a part.
fn push_distinct(parts: &mut Vec<String>, text: &str) {
    let text = strip_os_error(text.trim());
    if text.is_empty() || text == "transport error" || text == "error trying to connect" {
        return;
    }
    if parts.iter().any(|p| p.contains(text)) {
        return;
    }
    parts.push(text.to_string());
}

/// The last `io::Error` of the source chain (the root cause the OS reported).
fn innermost_io<'a>(err: &'a (dyn Error + 'static)) -> Option<&'a io::Error> {
    let mut found = None;
    let mut source = Some(err);
    while let Some(cause) = source {
        if let Some(io) = cause.downcast_ref::<io::Error>() {
            found = Some(io);
        }
        source = cause.source();
    }
    found
}

/// A short phrase for common socket errors; else `context: io message` without the
/// `(os error N)` suffix.
fn io_detail(context: &str, io: &io::Error) -> String {
    use io::ErrorKind as K;
    let phrase = match io.kind() {
        K::ConnectionRefused => Some("connection refused"),
        K::ConnectionReset => Some("connection reset by peer"),
        K::ConnectionAborted => Some("connection aborted"),
        K::TimedOut => Some("connection timed out"),
        K::BrokenPipe => Some("connection closed by the peer (broken pipe)"),
        K::NotConnected => Some("not connected"),
        K::AddrNotAvailable => Some("address not available"),
        K::HostUnreachable => Some("host unreachable"),
        K::NetworkUnreachable => Some("network unreachable"),
        K::NetworkDown => Some("network down"),
        _ => None,
    };
    if let Some(p) = phrase {
        return p.to_string();
    }
    let mut parts = Vec::new();
    push_distinct(&mut parts, context);
    let text = strip_os_error(&io.to_string()).to_string();
    if parts.iter().any(|p| text.contains(p.as_str())) {
        parts.clear();
    }
    push_distinct(&mut parts, &text);
    if parts.is_empty() {
        format!("{:?}", io.kind()).to_lowercase()
    } else {
        parts.join(": ")
    }
}

/// `Connection refused (os error 111)` -> `Connection refused`.
fn strip_os_error(text: &str) -> &str {
    match text.rfind(" (os error ") {
        Some(i) if text.ends_with(')') => &text[..i],
        _ => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use keel_proto::broker::MetadataRequest;
    use keel_proto::broker::broker_service_client::BrokerServiceClient;
    use keel_proto::controller::DescribeQuorumRequest;
    use keel_proto::controller::controller_service_client::ControllerServiceClient;
    use tonic::transport::Endpoint;

    /// A loopback port nothing listens on.
    fn closed_port() -> u16 {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    }

    fn assert_one_clean_line(s: &str) {
        assert_eq!(s.lines().count(), 1, "{s}");
        for noise in [
            "code: '",
            "source:",
            "Os {",
            "ConnectError(",
            "os error",
            "kind:",
        ] {
            assert!(!s.contains(noise), "{noise:?} in {s:?}");
        }
    }

    #[tokio::test]
    async fn refused_rpc_is_one_plain_line() {
        let addr = format!("127.0.0.1:{}", closed_port());
        let channel = Endpoint::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect_lazy();
        let status = BrokerServiceClient::new(channel)
            .metadata(MetadataRequest { topics: vec![] })
            .await
            .unwrap_err();
        // What the CLI printed before: the Status Display with Debug internals.
        assert!(status.to_string().contains("code: '"), "{status}");
        let line = status_line(&addr, Api::Broker, &status);
        assert_eq!(line, format!("{addr}: connection refused"));
        assert_one_clean_line(&line);
        assert!(never_sent(&status));
        assert!(retriable(&status));
    }

    #[tokio::test]
    async fn refused_connect_is_one_plain_line() {
        let addr = format!("127.0.0.1:{}", closed_port());
        let err = Endpoint::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
            .unwrap_err();
        let line = error_line(&addr, &err);
        assert_eq!(line, format!("{addr}: connection refused"));
        assert!(never_sent(&err));
    }

    #[tokio::test]
    async fn dns_failure_names_the_resolver_error() {
        let addr = "no-such-host.invalid:9";
        let channel = Endpoint::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect_lazy();
        let status = ControllerServiceClient::new(channel)
            .describe_quorum(DescribeQuorumRequest {})
            .await
            .unwrap_err();
        let line = status_line(addr, Api::Controller, &status);
        assert!(
            line.starts_with("no-such-host.invalid:9: dns error: "),
            "{line}"
        );
        assert_one_clean_line(&line);
        assert!(never_sent(&status));
    }

    #[test]
    fn unimplemented_names_the_wrong_kind_of_server() {
        // What a broker answers to a controller RPC: UNIMPLEMENTED with an empty message.
        let s = Status::unimplemented("");
        assert_eq!(
            status_line("127.0.0.1:41600", Api::Controller, &s),
            "127.0.0.1:41600 does not serve the controller API (is it a broker?)"
        );
        assert_eq!(
            status_line("127.0.0.1:41501", Api::Broker, &s),
            "127.0.0.1:41501 does not serve the broker API (is it a controller?)"
        );
        assert!(!retriable(&s));
        // A plain HTTP server (a metrics listener) answering 404 without grpc-status.
        let http =
            Status::unimplemented("grpc-status header missing, mapped from HTTP status code 404");
        assert_eq!(
            status_line("127.0.0.1:41301", Api::Controller, &http),
            "127.0.0.1:41301 does not serve the controller API (it answered HTTP 404, not gRPC: is it a metrics port?)"
        );
    }

    #[test]
    fn timeouts_and_other_codes() {
        let s = Status::cancelled(tonic::TimeoutExpired(()).to_string());
        assert_eq!(
            status_line("h:1", Api::Broker, &s),
            "h:1: no answer within the request timeout"
        );
        assert!(retriable(&s));
        assert!(!never_sent(&s));
        assert_eq!(
            status_detail(&Status::deadline_exceeded("")),
            "no answer within the request timeout"
        );
        assert_eq!(
            status_detail(&Status::resource_exhausted("message too large")),
            "message too large (gRPC RESOURCE_EXHAUSTED)"
        );
        assert_eq!(status_detail(&Status::internal("")), "gRPC status INTERNAL");
        assert_eq!(
            status_detail(&Status::unavailable("connection closed")),
            "connection closed"
        );
        assert!(!retriable(&Status::invalid_argument("x")));
    }

    #[test]
    fn io_errors_in_the_chain() {
        #[derive(Debug)]
        struct Wrap(io::Error);
        impl std::fmt::Display for Wrap {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("h2 protocol error")
            }
        }
        impl Error for Wrap {
            fn source(&self) -> Option<&(dyn Error + 'static)> {
                Some(&self.0)
            }
        }
        let reset = Wrap(io::Error::from_raw_os_error(104));
        assert_eq!(error_detail(&reset), "connection reset by peer");
        assert!(!never_sent(&reset));
        let other = Wrap(io::Error::other("something odd"));
        assert_eq!(error_detail(&other), "h2 protocol error: something odd");
        let plain = io::Error::from_raw_os_error(2);
        assert_eq!(error_detail(&plain), "No such file or directory");
        assert_eq!(
            strip_os_error("Connection refused (os error 111)"),
            "Connection refused"
        );
    }
}
