//! Is this address a Kafka listener? Asked only after a gRPC connection to it failed in a way
//! a Kafka listener causes: it reads HTTP/2's connection preface (`PRI * HTTP/2.0...`) as a
//! request of about 1.3 GB and closes the connection, which the gRPC client sees as
//! "connection reset by peer" and would retry until its budget is spent. One Kafka
//! ApiVersions v0 request on a fresh TCP connection tells the two apart: a Kafka listener
//! answers with the same correlation id (Kafka `ApiVersionsRequest`, which every Kafka
//! listener serves before authentication, KIP-35/KIP-511), so the caller can say at once that
//! the address is of the wrong kind.
//!
//! The framing is pure ([`api_versions_request`], [`is_api_versions_reply`]); [`speaks_kafka`]
//! is the bounded I/O around it.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Correlation id of the probe ("KEEL"), checked in the reply.
const CORRELATION_ID: i32 = 0x4b45_454c;

/// Client id sent in the probe's request header (brokers log it).
const CLIENT_ID: &str = "keelctl-probe";

/// Most bytes of a reply read: its 4-byte size and the correlation id are all the probe needs.
const REPLY_PREFIX: usize = 8;

/// How long the probe waits for the connection and the reply together, at most.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// The probe: a size-prefixed ApiVersions v0 request (api key 18, request header v1: api
/// key, version, correlation id, client id as a length-prefixed string, no body).
pub fn api_versions_request() -> Vec<u8> {
    let mut body = Vec::with_capacity(10 + CLIENT_ID.len());
    body.extend_from_slice(&18i16.to_be_bytes());
    body.extend_from_slice(&0i16.to_be_bytes());
    body.extend_from_slice(&CORRELATION_ID.to_be_bytes());
    body.extend_from_slice(&(CLIENT_ID.len() as i16).to_be_bytes());
    body.extend_from_slice(CLIENT_ID.as_bytes());
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&(body.len() as i32).to_be_bytes());
    frame.extend_from_slice(&body);
    frame
}

/// Whether `prefix` (the first [`REPLY_PREFIX`] bytes read) starts a Kafka reply to
/// [`api_versions_request`]: a positive size that covers at least the correlation id, then
/// that id. An HTTP/2 server's first bytes (a SETTINGS frame) never match.
pub fn is_api_versions_reply(prefix: &[u8]) -> bool {
    let Some((size, rest)) = prefix.split_first_chunk::<4>() else {
        return false;
    };
    let Some(id) = rest.first_chunk::<4>() else {
        return false;
    };
    i32::from_be_bytes(*size) >= 4 && i32::from_be_bytes(*id) == CORRELATION_ID
}

/// Whether `addr` (`host:port`) answers a Kafka ApiVersions request, within
/// [`PROBE_TIMEOUT`]. Any failure (refused, closed, silent, TLS listener, garbage) is `false`.
pub async fn speaks_kafka(addr: &str) -> bool {
    let probe = async {
        let mut s = TcpStream::connect(addr).await.ok()?;
        s.write_all(&api_versions_request()).await.ok()?;
        let mut prefix = [0u8; REPLY_PREFIX];
        s.read_exact(&mut prefix).await.ok()?;
        Some(is_api_versions_reply(&prefix))
    };
    matches!(
        tokio::time::timeout(PROBE_TIMEOUT, probe).await,
        Ok(Some(true))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_is_a_size_prefixed_api_versions_v0() {
        let r = api_versions_request();
        let size = i32::from_be_bytes(r[..4].try_into().unwrap()) as usize;
        assert_eq!(size, r.len() - 4);
        assert_eq!(&r[4..6], &18i16.to_be_bytes());
        assert_eq!(&r[6..8], &0i16.to_be_bytes());
        assert_eq!(&r[8..12], &CORRELATION_ID.to_be_bytes());
        assert_eq!(&r[14..], CLIENT_ID.as_bytes());
    }

    #[test]
    fn only_a_reply_with_our_correlation_id_counts() {
        let mut reply = 10i32.to_be_bytes().to_vec();
        reply.extend_from_slice(&CORRELATION_ID.to_be_bytes());
        assert!(is_api_versions_reply(&reply));
        // Another id, a bad size, too few bytes.
        let mut other = 10i32.to_be_bytes().to_vec();
        other.extend_from_slice(&7i32.to_be_bytes());
        assert!(!is_api_versions_reply(&other));
        let mut small = 3i32.to_be_bytes().to_vec();
        small.extend_from_slice(&CORRELATION_ID.to_be_bytes());
        assert!(!is_api_versions_reply(&small));
        assert!(!is_api_versions_reply(&reply[..7]));
        // An HTTP/2 server's first frame: SETTINGS (length 0x000012, type 4, flags 0, stream 0).
        let settings = [0, 0, 0x12, 4, 0, 0, 0, 0];
        assert!(!is_api_versions_reply(&settings));
    }
}
