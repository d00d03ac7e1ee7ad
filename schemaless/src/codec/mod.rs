//! The stored form of a body: MessagePack with field names, then zlib.
//!
//! Numbers keep their exact text: [`pack`] says how each is stored.
//!
//! MessagePack keeps the body self-describing (field names kept, so any
//! reader can decode a cell without a schema); zlib shrinks the repeated
//! field names of small bodies. Bodies up to [`small::MAX_INPUT`] bytes of
//! MessagePack are compressed by [`small`], larger ones by zlib-rs: both
//! write standard zlib streams. Decoding never trusts its input: inflation
//! stops at a cap, so a damaged or hostile blob cannot exhaust memory, and
//! every failure is an error, never a panic.

use std::cell::RefCell;

use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};

use crate::cell::Body;

pub mod pack;
pub mod small;

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
    PACKED.with(|packed| {
        let mut fresh = Vec::new();
        let mut kept = packed.try_borrow_mut();
        let packed = match kept.as_deref_mut() {
            Ok(buffer) => buffer,
            Err(_) => &mut fresh,
        };
        packed.clear();
        pack::encode_map(body.fields(), packed);
        if packed.len() > cap {
            return Err(CodecError::TooLarge { cap });
        }
        if packed.len() <= small::MAX_INPUT {
            let mut out = Vec::with_capacity(packed.len() + packed.len() / 8 + 16);
            small::compress(packed, &mut out);
            return Ok(out);
        }
        let out = deflate(packed);
        // A large body's buffer is not kept.
        if packed.capacity() > 4 * small::MAX_INPUT {
            *packed = Vec::new();
        }
        out
    })
}

thread_local! {
    // The MessagePack of the body being encoded, reused.
    static PACKED: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    // One compressor and one decompressor per thread, reset between
    // bodies: setting up zlib state costs more than compressing a body.
    // The compressor only sees bodies larger than `small::MAX_INPUT`, so
    // it keeps zlib's full window; level 1 keeps most of zlib's gain on
    // JSON-like bodies at a fraction of the CPU.
    static DEFLATE: RefCell<Compress> = RefCell::new(Compress::new(Compression::fast(), true));
    static INFLATE: RefCell<Decompress> = RefCell::new(Decompress::new(true));
}

fn deflate(input: &[u8]) -> Result<Vec<u8>, CodecError> {
    DEFLATE.with(|cell| {
        let mut z = cell.borrow_mut();
        z.reset();
        let mut out = Vec::with_capacity(input.len() + input.len() / 8 + 64);
        loop {
            let consumed = z.total_in() as usize;
            let status = z
                .compress_vec(&input[consumed..], &mut out, FlushCompress::Finish)
                .map_err(|e| CodecError::Zlib(std::io::Error::other(e)))?;
            match status {
                Status::StreamEnd => return Ok(out),
                Status::Ok | Status::BufError => out.reserve(out.capacity().max(64)),
            }
        }
    })
}

/// Inflates at most `cap` bytes; more is [`CodecError::TooLarge`], a
/// stream that ends early or is damaged is [`CodecError::Zlib`].
fn inflate(input: &[u8], cap: usize) -> Result<Vec<u8>, CodecError> {
    INFLATE.with(|cell| {
        let mut z = cell.borrow_mut();
        z.reset(true);
        let limit = cap.saturating_add(1);
        let mut out =
            Vec::with_capacity(input.len().saturating_mul(3).saturating_add(64).min(limit));
        loop {
            let (in_before, out_before) = (z.total_in(), out.len());
            let consumed = (in_before as usize).min(input.len());
            let status = z
                .decompress_vec(&input[consumed..], &mut out, FlushDecompress::Finish)
                .map_err(|e| {
                    CodecError::Zlib(std::io::Error::new(std::io::ErrorKind::InvalidData, e))
                })?;
            if out.len() > cap {
                return Err(CodecError::TooLarge { cap });
            }
            match status {
                Status::StreamEnd if (z.total_in() as usize) < input.len() => {
                    return Err(CodecError::Zlib(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        "bytes follow the end of the zlib stream",
                    )));
                }
                Status::StreamEnd => return Ok(out),
                _ if out.len() == out.capacity() => {
                    let grow = out.capacity().max(64).min(limit - out.len());
                    out.reserve_exact(grow);
                }
                _ if z.total_in() == in_before && out.len() == out_before => {
                    return Err(CodecError::Zlib(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        "the zlib stream ends early",
                    )));
                }
                _ => {}
            }
        }
    })
}

/// Decodes a stored body, inflating at most `cap` bytes.
pub fn decode(stored: &[u8], cap: usize) -> Result<Body, CodecError> {
    let packed = inflate(stored, cap)?;
    let value = pack::decode(&packed).map_err(CodecError::MessagePack)?;
    Body::from_value(value).map_err(|_| CodecError::NotAnObject)
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::read::ZlibDecoder;
    use flate2::write::ZlibEncoder;
    use proptest::prelude::*;
    use serde_json::json;
    use std::io::{Read, Write};

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
        ZlibDecoder::new(&stored[..])
            .read_to_end(&mut packed)
            .unwrap();
        assert!(
            packed.windows(6).any(|w| w == b"driver"),
            "field names are kept"
        );
    }

    #[test]
    fn damaged_input_is_an_error_not_a_panic() {
        let stored = encode(&Body::from_value(json!({"a": 1})).unwrap(), CAP).unwrap();
        assert!(matches!(decode(b"not zlib", CAP), Err(CodecError::Zlib(_))));
        assert!(decode(&stored[..stored.len() - 3], CAP).is_err());
        let mut flipped = stored.clone();
        flipped[4] ^= 0xff;
        assert!(decode(&flipped, CAP).is_err());
        let mut trailing = stored.clone();
        trailing.extend_from_slice(b"junk");
        assert!(matches!(decode(&trailing, CAP), Err(CodecError::Zlib(_))));
        // valid zlib of something that is not MessagePack of an object
        let mut e = ZlibEncoder::new(Vec::new(), Compression::fast());
        e.write_all(&rmp_serde::to_vec(&json!([1, 2])).unwrap())
            .unwrap();
        assert!(matches!(
            decode(&e.finish().unwrap(), CAP),
            Err(CodecError::NotAnObject)
        ));
    }

    #[test]
    fn inflation_is_capped() {
        let body = Body::from_value(json!({"pad": "z".repeat(100_000)})).unwrap();
        let stored = encode(&body, CAP).unwrap();
        assert!(stored.len() < 2_000, "compresses well");
        assert!(matches!(
            decode(&stored, 10_000),
            Err(CodecError::TooLarge { cap: 10_000 })
        ));
        assert!(matches!(
            encode(&body, 10_000),
            Err(CodecError::TooLarge { .. })
        ));
    }

    #[test]
    fn the_stored_form_is_standard_zlib() {
        // Any zlib implementation must read what we write, and we must
        // read what any writes: the format outlives this code.
        let body = Body::from_value(json!({"a": "b".repeat(5000), "n": 1})).unwrap();
        let mut e = ZlibEncoder::new(Vec::new(), Compression::best());
        #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
        struct Plain {
            a: String,
            n: i64,
        }
        let plain = Plain {
            a: "b".repeat(5000),
            n: 1,
        };
        e.write_all(&rmp_serde::to_vec_named(&plain).unwrap())
            .unwrap();
        assert_eq!(decode(&e.finish().unwrap(), CAP).unwrap(), body);
        let mut back = Vec::new();
        ZlibDecoder::new(&encode(&body, CAP).unwrap()[..])
            .read_to_end(&mut back)
            .unwrap();
        assert_eq!(rmp_serde::from_slice::<Plain>(&back).unwrap(), plain);
    }

    #[test]
    fn reused_state_does_not_leak_between_bodies() {
        let bodies: Vec<Body> = (0..50)
            .map(|i| Body::from_value(json!({"i": i, "pad": "q".repeat(i * 97)})).unwrap())
            .collect();
        let stored: Vec<Vec<u8>> = bodies.iter().map(|b| encode(b, CAP).unwrap()).collect();
        let _ = decode(b"garbage in the middle", CAP);
        for (b, s) in bodies.iter().zip(&stored) {
            assert_eq!(&decode(s, CAP).unwrap(), b);
        }
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
