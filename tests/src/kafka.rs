//! One Kafka request over a fresh TCP connection, encoded and decoded with `kafka-protocol`:
//! for the scenarios that check the brokers' Kafka listener request by request.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long [`call`] waits for the response.
pub const RESPONSE_WAIT: Duration = Duration::from_secs(20);

/// Sends `req` as `key` v`version` on a fresh connection to `addr` and returns the decoded
/// response. Panics (naming the API and version) when the connection fails or closes, no
/// response comes within [`RESPONSE_WAIT`], the correlation id differs, the body does not
/// decode, or bytes are left after it.
pub async fn call<Req: Encodable, Resp: Decodable>(
    addr: SocketAddr,
    key: ApiKey,
    version: i16,
    req: &Req,
) -> Resp {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let mut buf = BytesMut::new();
    buf.put_i32(0);
    RequestHeader::default()
        .with_request_api_key(key as i16)
        .with_request_api_version(version)
        .with_correlation_id(41)
        .with_client_id(Some(StrBytes::from_static_str("keel-tests")))
        .encode(&mut buf, key.request_header_version(version))
        .expect("encode the header");
    req.encode(&mut buf, version).expect("encode the request");
    let size = (buf.len() - 4) as i32;
    buf[..4].copy_from_slice(&size.to_be_bytes());
    stream.write_all(&buf).await.expect("send");
    let size = tokio::time::timeout(RESPONSE_WAIT, stream.read_i32())
        .await
        .unwrap_or_else(|_| panic!("{key:?} v{version}: no response in {RESPONSE_WAIT:?}"))
        .unwrap_or_else(|e| panic!("{key:?} v{version}: connection closed: {e}"));
    let mut body = vec![0; size as usize];
    stream.read_exact(&mut body).await.expect("read the body");
    let mut body = Bytes::from(body);
    let header = ResponseHeader::decode(&mut body, key.response_header_version(version))
        .expect("decode the response header");
    assert_eq!(header.correlation_id, 41);
    let resp = Resp::decode(&mut body, version)
        .unwrap_or_else(|e| panic!("{key:?} v{version}: cannot decode: {e}"));
    assert_eq!(body.remaining(), 0, "{key:?} v{version}: trailing bytes");
    resp
}
