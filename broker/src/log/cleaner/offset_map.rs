//! The cleaner's offset map (Kafka `SkimpyOffsetMap`): key digest -> latest offset, with a
//! fixed bound on entries; see the module doc of [`super`] for the digest and its collision
//! policy.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};

/// Hasher for keys that already are uniform digests: takes their low 64 bits.
#[derive(Default)]
struct DigestHasher(u64);

impl Hasher for DigestHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // Only u128 digests are hashed; fold anything else.
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }
    fn write_u128(&mut self, i: u128) {
        self.0 = i as u64;
    }
}

/// 128-bit digest of a record key (see the module doc).
pub fn key_digest(key: &[u8]) -> u128 {
    let half = |prefix: u8| {
        let mut h = std::hash::DefaultHasher::new();
        prefix.hash(&mut h);
        key.hash(&mut h);
        h.finish()
    };
    (u128::from(half(0)) << 64) | u128::from(half(1))
}

/// Key digest -> latest offset, bounded (Kafka `SkimpyOffsetMap`).
#[derive(Debug)]
pub struct OffsetMap {
    entries: HashMap<u128, i64, BuildHasherDefault<DigestHasher>>,
    max_entries: usize,
}

impl OffsetMap {
    /// An empty map holding at most `max_entries` keys (>= 1).
    pub fn new(max_entries: usize) -> Self {
        Self {
            entries: HashMap::default(),
            max_entries: max_entries.max(1),
        }
    }

    /// Records `offset` as the latest for `key`. `false` (and no change) when the key is new
    /// and the map is full.
    pub fn put(&mut self, key: &[u8], offset: i64) -> bool {
        let d = key_digest(key);
        if let Some(o) = self.entries.get_mut(&d) {
            *o = offset;
            return true;
        }
        if self.entries.len() >= self.max_entries {
            return false;
        }
        self.entries.insert(d, offset);
        true
    }

    /// The latest offset of `key`, if mapped.
    pub fn get(&self, key: &[u8]) -> Option<i64> {
        self.entries.get(&key_digest(key)).copied()
    }

    /// Keys mapped.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// No key mapped.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}
