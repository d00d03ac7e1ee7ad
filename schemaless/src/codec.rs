//! The stored form of a body: MessagePack with field names, then zlib.
//!
//! MessagePack keeps the body self-describing (field names kept, so any
//! reader can decode a cell without a schema); zlib shrinks the repeated
//! field names of small bodies. Decoding never trusts its input: inflation
//! stops at a cap, so a damaged or hostile blob cannot exhaust memory, and
//! every failure is an error, never a panic.

use std::io::{Read, Write};

use flate2::read::ZlibDecoder;
use flate2::write::ZlibEncoder;
use flate2::Compression;
use serde_json::Value;

use crate::cell::Body;

/// The inflated (MessagePack) size a body may reach, for a given JSON
/// limit. MessagePack can be larger than JSON (`1.5` is 3 bytes of JSON and
/// 9 of MessagePack), so the cap leaves room for that, and a body that
/// would exceed it is refused at write time: nothing is written that could
/// not be read back.
pub fn inflated_cap(max_body_bytes: usize) -> usize {
    max_body_bytes.saturating_mul(4).saturating_add(1024)
}

/// Why a body could not be encoded or decoded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CodecError {
    /// The MessagePack form is larger than the cap.
    #[error("inflated body exceeds {cap} bytes")]
    TooLarge {
        /// The cap in force.
        cap: usize,
    },
    /// The zlib stream is damaged.
    #[error("zlib: {0}")]
    Zlib(std::io::Error),
    /// The inflated bytes are not MessagePack of a JSON value.
    #[error("msgpack: {0}")]
    MessagePack(String),
    /// The value decoded but is not a JSON object.
    #[error("decoded value is not a JSON object")]
    NotAnObject,
}

/// Encodes a body for storage. Fails only if the MessagePack form exceeds
/// `cap` (see [`inflated_cap`]).
pub fn encode(body: &Body, cap: usize) -> Result<Vec<u8>, CodecError> {
    let packed = rmp_serde::to_vec_named(body.fields())
        .map_err(|e| CodecError::MessagePack(e.to_string()))?;
    if packed.len() > cap {
        return Err(CodecError::TooLarge { cap });
    }
    // Level 1: most of zlib's gain on small JSON-like bodies at a fraction
    // of the CPU; the write path is CPU-bound on the client.
    let mut encoder = ZlibEncoder::new(Vec::with_capacity(packed.len() / 2 + 16), Compression::fast());
    encoder.write_all(&packed).map_err(CodecError::Zlib)?;
    encoder.finish().map_err(CodecError::Zlib)
}

/// Decodes a stored body, inflating at most `cap` bytes.
pub fn decode(stored: &[u8], cap: usize) -> Result<Body, CodecError> {
    let mut packed = Vec::new();
    let limit = u64::try_from(cap).unwrap_or(u64::MAX).saturating_add(1);
    ZlibDecoder::new(stored)
        .take(limit)
        .read_to_end(&mut packed)
        .map_err(CodecError::Zlib)?;
    if packed.len() > cap {
        return Err(CodecError::TooLarge { cap });
    }
    let value: Value =
        rmp_serde::from_slice(&packed).map_err(|e| CodecError::MessagePack(e.to_string()))?;
    Body::from_value(value).map_err(|_| CodecError::NotAnObject)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    const CAP: usize = 1 << 20;

    #[test]
    fn round_trips_and_keeps_field_names() {
        let body = Body::from_value(json!({
            "driver": "ümlaut ✓", "fare": 12.5, "n": -3, "big": u64::MAX,
            "tags": ["a", null, true], "nested": {"x": {}}
        }))
        .unwrap();
        let stored = encode(&body, CAP).unwrap();
        assert_eq!(decode(&stored, CAP).unwrap(), body);
        let mut packed = Vec::new();
        ZlibDecoder::new(&stored[..]).read_to_end(&mut packed).unwrap();
        assert!(packed.windows(6).any(|w| w == b"driver"), "field names are kept");
    }

    #[test]
    fn damaged_input_is_an_error_not_a_panic() {
        let stored = encode(&Body::from_value(json!({"a": 1})).unwrap(), CAP).unwrap();
        assert!(matches!(decode(b"not zlib", CAP), Err(CodecError::Zlib(_))));
        assert!(decode(&stored[..stored.len() - 3], CAP).is_err());
        let mut flipped = stored.clone();
        flipped[4] ^= 0xff;
        assert!(decode(&flipped, CAP).is_err());
        // valid zlib of something that is not MessagePack of an object
        let mut e = ZlibEncoder::new(Vec::new(), Compression::fast());
        e.write_all(&rmp_serde::to_vec(&json!([1, 2])).unwrap()).unwrap();
        assert!(matches!(decode(&e.finish().unwrap(), CAP), Err(CodecError::NotAnObject)));
    }

    #[test]
    fn inflation_is_capped() {
        let body = Body::from_value(json!({"pad": "z".repeat(100_000)})).unwrap();
        let stored = encode(&body, CAP).unwrap();
        assert!(stored.len() < 2_000, "compresses well");
        assert!(matches!(decode(&stored, 10_000), Err(CodecError::TooLarge { cap: 10_000 })));
        assert!(matches!(encode(&body, 10_000), Err(CodecError::TooLarge { .. })));
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = decode(&bytes, 4096);
        }

        #[test]
        fn any_object_round_trips(map in proptest::collection::btree_map("[a-z]{1,8}", any::<i64>(), 0..20)) {
            let body = Body::from_value(serde_json::to_value(&map).unwrap()).unwrap();
            prop_assert_eq!(decode(&encode(&body, CAP).unwrap(), CAP).unwrap(), body);
        }
    }
}
