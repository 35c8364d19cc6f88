//! Writing zig-zag LEB128 varints and length-prefixed nullable byte strings (Kafka
//! `ByteUtils`); the reader side is the record cursor in [`crate::records`].

use bytes::{BufMut, BytesMut};

pub(crate) fn varlong_size(v: i64) -> usize {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    let mut n = 1;
    // At most 10 iterations: z shrinks by 7 bits each time.
    while z >= 0x80 {
        z >>= 7;
        n += 1;
    }
    n
}

pub(crate) fn put_varlong(buf: &mut BytesMut, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    // At most 10 iterations: z shrinks by 7 bits each time.
    while z >= 0x80 {
        buf.put_u8((z as u8 & 0x7f) | 0x80);
        z >>= 7;
    }
    buf.put_u8(z as u8);
}

pub(crate) fn nullable_size(b: Option<&[u8]>) -> usize {
    match b {
        None => varlong_size(-1),
        Some(b) => varlong_size(b.len() as i64) + b.len(),
    }
}

pub(crate) fn put_nullable(buf: &mut BytesMut, b: Option<&[u8]>) {
    match b {
        None => put_varlong(buf, -1),
        Some(b) => {
            put_varlong(buf, b.len() as i64);
            buf.put_slice(b);
        }
    }
}
