//! Which shard a row lives in.
//!
//! `shard = fnv1a64(row key's 16 bytes) % shard_count`. The function and
//! the shard count are fixed for the life of an instance: changing either
//! would strand every existing cell on the wrong shard, so the tests pin
//! both the hash and the resulting shards with fixed vectors.

use crate::cell::RowKey;

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// 64-bit FNV-1a of `bytes`.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(FNV_OFFSET, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(FNV_PRIME)
    })
}

/// The shard of a row key.
pub fn shard_of(row_key: &RowKey, shard_count: u32) -> u32 {
    shard_of_bytes(row_key.as_bytes(), shard_count)
}

/// The shard of any routing value (index entries route by the bytes of
/// their shard-field value).
pub fn shard_of_bytes(bytes: &[u8], shard_count: u32) -> u32 {
    (fnv1a64(bytes) % u64::from(shard_count)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a64_matches_the_reference_vectors() {
        // From the FNV reference test suite (draft-eastlake-fnv).
        assert_eq!(fnv1a64(b""), 0xcbf29ce484222325);
        assert_eq!(fnv1a64(b"a"), 0xaf63dc4c8601ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x85944171f73967e8);
    }

    #[test]
    fn row_keys_route_to_pinned_shards() {
        // Pinned forever: these are the shards of real data. Computed
        // independently (Python, from the FNV-1a definition) when pinned.
        let cases = [
            (
                "00000000-0000-0000-0000-000000000000",
                0x8820_1fb9_60ff_6465,
                37,
                1125,
            ),
            (
                "6f1c1a0e-8a3b-4a55-9d1e-3c2b1a0f9e8d",
                0x7465_edc5_f56a_1714,
                20,
                1812,
            ),
            (
                "ffffffff-ffff-ffff-ffff-ffffffffffff",
                0xd660_7508_f5a1_e855,
                21,
                2133,
            ),
            (
                "123e4567-e89b-12d3-a456-426614174000",
                0x7f0c_9ad0_1399_33e0,
                32,
                992,
            ),
        ];
        for (text, hash, of_64, of_4096) in cases {
            let key = RowKey::parse(text).unwrap();
            assert_eq!(fnv1a64(key.as_bytes()), hash, "{text}");
            assert_eq!(shard_of(&key, 64), of_64, "{text}");
            assert_eq!(shard_of(&key, 4096), of_4096, "{text}");
        }
    }
}
