//! Kafka's framing: every request and response is a 4-byte big-endian size followed by that
//! many bytes (Kafka's `NetworkReceive`/`NetworkSend`).

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt};

/// Largest request accepted, bytes: Kafka's `socket.request.max.bytes` default (100 MiB). A
/// larger (or negative) size closes the connection before anything is read
/// (`InvalidReceiveException` in Kafka).
pub const MAX_REQUEST_BYTES: usize = 100 * 1024 * 1024;

/// Largest request of any API but Produce, bytes. Kafka has one limit for all; Keel's is
/// lower for requests that carry no records because the decoder's structs take up to ~36
/// bytes of memory per wire byte (a Metadata request of empty topic names, see
/// [`super::guard`]): 8 MiB still holds 10,000 topic names of 249 characters or a Fetch of
/// 100,000 partitions.
pub const MAX_NON_PRODUCE_REQUEST_BYTES: usize = 8 * 1024 * 1024;

/// Largest request accepted before a connection of a SASL listener authenticated, bytes
/// (Kafka: `sasl.server.max.receive.size`, 512 KiB): an unauthenticated client may send only
/// ApiVersions, SaslHandshake and SaslAuthenticate, all small.
pub const MAX_UNAUTHENTICATED_REQUEST_BYTES: usize = 512 * 1024;

/// Smallest request that can hold a request header's fixed part: api key (2), api version
/// (2), correlation id (4) and the client id's length (2).
pub const MIN_REQUEST_BYTES: usize = 10;

/// Bytes read into a request buffer at a time: a peer that declares a large size is given
/// memory as its bytes arrive, not up front.
const READ_CHUNK_BYTES: usize = 64 * 1024;

/// Why a frame could not be read; each closes the connection.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The size prefix is outside `MIN_REQUEST_BYTES..=max`.
    #[error("request size {size} is not in {MIN_REQUEST_BYTES}..={max} bytes")]
    Size {
        /// The declared size.
        size: i64,
        /// The largest allowed on this connection now.
        max: usize,
    },
    /// The peer closed the connection in the middle of a frame.
    #[error("connection closed after {read} of {size} bytes of a request")]
    Truncated {
        /// Bytes received.
        read: usize,
        /// Bytes declared.
        size: usize,
    },
    /// A socket error.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Checks a size prefix against `MIN_REQUEST_BYTES..=max` (pure): the body length to read.
pub fn body_len(prefix: [u8; 4], max: usize) -> Result<usize, FrameError> {
    debug_assert!(max <= MAX_REQUEST_BYTES);
    let size = i32::from_be_bytes(prefix);
    match usize::try_from(size) {
        Ok(n) if (MIN_REQUEST_BYTES..=max).contains(&n) => Ok(n),
        _ => Err(FrameError::Size {
            size: i64::from(size),
            max,
        }),
    }
}

/// Reads one request frame of at most `max` bytes ([`MAX_REQUEST_BYTES`], or
/// [`MAX_UNAUTHENTICATED_REQUEST_BYTES`] before SASL authentication). `Ok(None)`: the peer
/// closed the connection between requests.
pub async fn read_request<R: AsyncRead + Unpin>(
    r: &mut R,
    max: usize,
) -> Result<Option<Bytes>, FrameError> {
    let mut prefix = [0u8; 4];
    let mut got = 0;
    while got < prefix.len() {
        let n = r.read(&mut prefix[got..]).await?;
        if n == 0 {
            return if got == 0 {
                Ok(None)
            } else {
                Err(FrameError::Truncated { read: got, size: 4 })
            };
        }
        got += n;
    }
    let size = body_len(prefix, max)?;
    let mut body = BytesMut::with_capacity(size.min(READ_CHUNK_BYTES));
    while body.len() < size {
        body.reserve((size - body.len()).min(READ_CHUNK_BYTES));
        let want = (size - body.len()).min(body.capacity() - body.len());
        let n = (&mut *r).take(want as u64).read_buf(&mut body).await?;
        if n == 0 {
            return Err(FrameError::Truncated {
                read: body.len(),
                size,
            });
        }
    }
    Ok(Some(body.freeze()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_outside_the_bounds_are_refused() {
        let max = MAX_REQUEST_BYTES;
        assert_eq!(body_len(10i32.to_be_bytes(), max).unwrap(), 10);
        assert_eq!(body_len((max as i32).to_be_bytes(), max).unwrap(), max);
        for bad in [-1i32, 0, 9, max as i32 + 1, i32::MAX] {
            assert!(body_len(bad.to_be_bytes(), max).is_err(), "{bad}");
        }
        let small = MAX_UNAUTHENTICATED_REQUEST_BYTES;
        assert!(body_len((small as i32).to_be_bytes(), small).is_ok());
        let e = body_len((small as i32 + 1).to_be_bytes(), small).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("request size {} is not in 10..={small} bytes", small + 1)
        );
    }

    #[tokio::test]
    async fn frames_are_read_whole_or_the_truncation_is_reported() {
        let mut data = Vec::new();
        data.extend_from_slice(&12i32.to_be_bytes());
        data.extend_from_slice(&[7u8; 12]);
        data.extend_from_slice(&200_000i32.to_be_bytes());
        data.extend_from_slice(&[1u8; 150_000]);
        let mut r = data.as_slice();
        assert_eq!(
            read_request(&mut r, MAX_REQUEST_BYTES)
                .await
                .unwrap()
                .unwrap(),
            vec![7u8; 12]
        );
        match read_request(&mut r, MAX_REQUEST_BYTES).await {
            Err(FrameError::Truncated { read, size }) => {
                assert_eq!((read, size), (150_000, 200_000));
            }
            other => panic!("{other:?}"),
        }
        assert!(
            read_request(&mut r, MAX_REQUEST_BYTES)
                .await
                .unwrap()
                .is_none()
        );
        let mut half: &[u8] = &[0, 0];
        assert!(matches!(
            read_request(&mut half, MAX_REQUEST_BYTES).await,
            Err(FrameError::Truncated { read: 2, size: 4 })
        ));
    }
}
