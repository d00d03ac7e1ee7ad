//! A zlib stream writer for small bodies: greedy LZ77 over a small hash
//! table, then deflate's fixed Huffman codes (RFC 1950 and 1951).
//!
//! Hand-written, because general zlib encoders pay for their size on every
//! stream: zlib-rs clears a 65,536-entry hash table (128 KiB) at each reset,
//! whatever the window, and with a cell of about 300 bytes that memset and
//! the cold table it leaves cost more than compressing the body. This
//! writer sizes its table to the input (at most 4,096 entries, cleared per
//! body) and keeps nothing between bodies. What it writes is the same class
//! of stream as zlib's fastest level (deflate_quick: one match candidate,
//! fixed codes), so bodies are as small as before, and any zlib reader
//! decodes them. Inputs larger than [`MAX_INPUT`] go to zlib-rs, whose
//! setup cost is small beside theirs.
//!
//! It must never write a stream that decodes to anything but its input:
//! the tests inflate what it writes with an independent reader, over
//! random, repetitive and edge-length inputs.

/// The largest input this writer takes: every back-reference then lies
/// within deflate's 32 KiB window.
pub const MAX_INPUT: usize = 32 * 1024;

const MIN_MATCH: usize = 4;
const MAX_MATCH: usize = 258;
const MAX_HASH_BITS: u32 = 12;
const MIN_HASH_BITS: u32 = 8;

/// Appends the zlib stream of `input` (at most [`MAX_INPUT`] bytes) to
/// `out`.
pub fn compress(input: &[u8], out: &mut Vec<u8>) {
    debug_assert!(input.len() <= MAX_INPUT);
    let start = out.len();
    out.reserve(input.len() + input.len() / 8 + 16);
    zlib_header(input.len(), out);
    let mut bits = BitWriter::new(out);
    // BFINAL = 1, BTYPE = 01 (fixed Huffman codes).
    bits.put(0b011, 3);
    lz77(input, &mut bits);
    bits.put(LITERAL_CODES[256].0 as u64, LITERAL_CODES[256].1);
    bits.finish();
    // Text that does not compress (random keys, short bodies) would grow
    // by up to an eighth under fixed codes: store it instead.
    if out.len() - start > input.len() + 7 {
        out.truncate(start);
        zlib_header(input.len(), out);
        stored_block(input, out);
    }
    out.extend_from_slice(&adler32(input).to_be_bytes());
}

/// CMF and FLG: deflate with the smallest window (>= 512 bytes) that
/// covers the input, and the fastest level's flag.
fn zlib_header(len: usize, out: &mut Vec<u8>) {
    let window_bits = (usize::BITS - len.max(1).saturating_sub(1).leading_zeros()).clamp(9, 15);
    let cmf = ((window_bits - 8) << 4 | 8) as u8;
    // FLEVEL 0, no dictionary; FCHECK makes CMF*256 + FLG a multiple of 31.
    let check = 31 - ((u32::from(cmf) << 8) % 31);
    out.push(cmf);
    out.push(check as u8);
}

/// One stored block (BFINAL = 1, BTYPE = 00) holding all of `input`.
fn stored_block(input: &[u8], out: &mut Vec<u8>) {
    let len = input.len() as u16;
    out.push(0b001);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&(!len).to_le_bytes());
    out.extend_from_slice(input);
}

thread_local! {
    // The hash table, kept per thread so that a call clears only the part
    // its input uses (a fresh array would be zeroed whole every time).
    static TABLE: std::cell::RefCell<Vec<u16>> = std::cell::RefCell::new(vec![0; 1 << MAX_HASH_BITS]);
}

fn lz77(input: &[u8], bits: &mut BitWriter<'_>) {
    TABLE.with(|table| match table.try_borrow_mut() {
        Ok(mut table) => lz77_with(input, bits, &mut table),
        // Only reachable by reentry, which nothing here does; stay correct
        // anyway.
        Err(_) => lz77_with(input, bits, &mut vec![0; 1 << MAX_HASH_BITS]),
    })
}

fn lz77_with(input: &[u8], bits: &mut BitWriter<'_>, table: &mut [u16]) {
    let n = input.len();
    let hash_bits = (usize::BITS - n.max(1).leading_zeros()).clamp(MIN_HASH_BITS, MAX_HASH_BITS);
    // Positions plus one; 0 is empty.
    let table = &mut table[..1 << hash_bits];
    table.fill(0);
    let hash =
        |word: u32| -> usize { (word.wrapping_mul(0x9E37_79B1) >> (32 - hash_bits)) as usize };
    let mut i = 0;
    // Where the literals not yet written start, and how many positions
    // have been looked up since the last match: in a long run without
    // matches (random keys, text seen nowhere before) lookups thin out,
    // one in two after 32 misses, one in three after 64, as LZ4 does.
    let mut literals = 0;
    let mut misses = 0usize;
    while i + MIN_MATCH <= n {
        let here = word(input, i);
        let h = hash(here);
        let candidate = table[h] as usize;
        table[h] = (i + 1) as u16;
        if candidate != 0 && word(input, candidate - 1) == here {
            for &b in &input[literals..i] {
                bits.put_literal(b);
            }
            misses = 0;
            let from = candidate - 1;
            let len = MIN_MATCH
                + common_prefix(
                    &input[from + MIN_MATCH..],
                    &input[i + MIN_MATCH..],
                    MAX_MATCH - MIN_MATCH,
                );
            bits.put_match(len, i - from);
            // Later matches may start inside this one.
            let last = (i + len).min(n + 1 - MIN_MATCH);
            for at in i + 1..last {
                table[hash(word(input, at))] = (at + 1) as u16;
            }
            i += len;
            literals = i;
            continue;
        }
        misses += 1;
        i += 1 + (misses >> 5);
    }
    for &b in &input[literals..] {
        bits.put_literal(b);
    }
}

/// How many leading bytes `a` and `b` share, at most `limit`.
fn common_prefix(a: &[u8], b: &[u8], limit: usize) -> usize {
    let limit = limit.min(a.len()).min(b.len());
    let mut len = 0;
    while len + 8 <= limit {
        let x = u64::from_le_bytes(a[len..len + 8].try_into().expect("8 bytes"));
        let y = u64::from_le_bytes(b[len..len + 8].try_into().expect("8 bytes"));
        let diff = x ^ y;
        if diff != 0 {
            return len + (diff.trailing_zeros() / 8) as usize;
        }
        len += 8;
    }
    while len < limit && a[len] == b[len] {
        len += 1;
    }
    len
}

fn word(input: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(input[at..at + 4].try_into().expect("4 bytes"))
}

/// Bits packed from the least significant end, as deflate reads them.
struct BitWriter<'a> {
    out: &'a mut Vec<u8>,
    acc: u64,
    len: u32,
}

impl<'a> BitWriter<'a> {
    fn new(out: &'a mut Vec<u8>) -> BitWriter<'a> {
        BitWriter {
            out,
            acc: 0,
            len: 0,
        }
    }

    /// Appends the low `n` bits of `value` (n <= 32).
    fn put(&mut self, value: u64, n: u32) {
        self.acc |= value << self.len;
        self.len += n;
        if self.len >= 32 {
            self.out.extend_from_slice(&(self.acc as u32).to_le_bytes());
            self.acc >>= 32;
            self.len -= 32;
        }
    }

    fn put_literal(&mut self, byte: u8) {
        let (code, n) = LITERAL_CODES[byte as usize];
        self.put(u64::from(code), n);
    }

    fn put_match(&mut self, len: usize, distance: usize) {
        let (code, n) = LENGTH_CODES[len - 3];
        self.put(u64::from(code), n);
        let (code, n) = distance_code(distance);
        self.put(u64::from(code), n);
    }

    /// Writes out the last bits, padded to a byte.
    fn finish(mut self) {
        while self.len > 0 {
            self.out.push(self.acc as u8);
            self.acc >>= 8;
            self.len = self.len.saturating_sub(8);
        }
    }
}

/// `code` with its lowest `n` bits in reverse order: Huffman codes are
/// sent most significant bit first.
const fn reverse(code: u32, n: u32) -> u32 {
    code.reverse_bits() >> (32 - n)
}

/// The fixed code of each literal/length symbol 0..=287, bits reversed.
const LITERAL_CODES: [(u32, u32); 288] = {
    let mut table = [(0, 0); 288];
    let mut s = 0;
    while s < 288 {
        let (code, n) = match s {
            0..=143 => (0x30 + s, 8),
            144..=255 => (0x190 + s - 144, 9),
            256..=279 => (s - 256, 7),
            _ => (0xc0 + s - 280, 8),
        };
        table[s as usize] = (reverse(code, n), n);
        s += 1;
    }
    table
};

/// The symbol and extra bits of each match length 3..=258, as one run of
/// bits: the symbol's code, then the extra bits.
const LENGTH_CODES: [(u32, u32); 256] = {
    let mut table = [(0, 0); 256];
    let mut l = 0u32;
    while l < 256 {
        let (symbol, extra_bits, extra) = if l < 8 {
            (257 + l, 0, 0)
        } else if l == 255 {
            // 258 has a symbol of its own (284 with all extra bits set is
            // not a valid length).
            (285, 0, 0)
        } else {
            let log = 31 - l.leading_zeros();
            (
                257 + 4 * (log - 1) + ((l >> (log - 2)) & 3),
                log - 2,
                l & ((1 << (log - 2)) - 1),
            )
        };
        let (code, n) = LITERAL_CODES[symbol as usize];
        table[l as usize] = (code | extra << n, n + extra_bits);
        l += 1;
    }
    table
};

/// The fixed 5-bit code of a distance 1..=32768 and its extra bits, as one
/// run of bits.
fn distance_code(distance: usize) -> (u32, u32) {
    let d = distance as u32 - 1;
    if d < 4 {
        return (reverse(d, 5), 5);
    }
    let log = 31 - d.leading_zeros();
    let symbol = 2 * log + ((d >> (log - 1)) & 1);
    let extra_bits = log - 1;
    let extra = d & ((1 << extra_bits) - 1);
    (reverse(symbol, 5) | extra << 5, 5 + extra_bits)
}

/// RFC 1950's checksum.
fn adler32(data: &[u8]) -> u32 {
    const MOD: u32 = 65_521;
    // The most bytes summed before the sums can overflow a u32.
    const RUN: usize = 5_552;
    let (mut a, mut b) = (1u32, 0u32);
    for run in data.chunks(RUN) {
        for &byte in run {
            a += u32::from(byte);
            b += a;
        }
        a %= MOD;
        b %= MOD;
    }
    b << 16 | a
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::read::ZlibDecoder;
    use proptest::prelude::*;
    use std::io::Read;

    fn inflate(stream: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        ZlibDecoder::new(stream)
            .read_to_end(&mut out)
            .expect("a valid zlib stream");
        out
    }

    fn round_trip(input: &[u8]) -> Vec<u8> {
        let mut out = vec![0xAA];
        compress(input, &mut out);
        assert_eq!(out[0], 0xAA, "appends, keeping what was there");
        assert_eq!(inflate(&out[1..]), input, "input of {} bytes", input.len());
        out.split_off(1)
    }

    #[test]
    fn every_length_of_text_and_noise_round_trips() {
        let text: Vec<u8> =
            b"{\"driver_uuid\":\"6f1c1a0e\",\"status\":\"completed\",\"fare\":\"12.50\"}"
                .iter()
                .copied()
                .cycle()
                .take(3000)
                .collect();
        let mut state = 0x1234_5678u32;
        let noise: Vec<u8> = (0..3000)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 17;
                state ^= state << 5;
                state as u8
            })
            .collect();
        for len in 0..1200 {
            round_trip(&text[..len]);
            round_trip(&noise[..len]);
        }
    }

    #[test]
    fn runs_longer_than_a_match_and_the_far_end_of_the_window() {
        round_trip(&[0u8; MAX_INPUT]);
        round_trip(&[7u8; 259]);
        round_trip(&[7u8; 258 * 3 + 1]);
        // The same 64 bytes at both ends of a 32 KiB input: a match at
        // distance 32 KiB - 64.
        let mut input: Vec<u8> = (0..MAX_INPUT).map(|i| (i * 7 % 251) as u8).collect();
        let head: Vec<u8> = input[..64].to_vec();
        let tail = input.len() - 64;
        input[tail..].copy_from_slice(&head);
        round_trip(&input);
    }

    #[test]
    fn repetitive_bodies_shrink_and_noise_is_stored_not_grown() {
        let text = b"{\"status\":\"completed\",\"status2\":\"completed\"}".repeat(8);
        assert!(round_trip(&text).len() < text.len() / 3);
        let noise: Vec<u8> = (0..1000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        assert!(round_trip(&noise).len() <= noise.len() + 11);
    }

    #[test]
    fn headers_are_valid_for_every_window() {
        for len in [0, 1, 511, 512, 513, 4096, 20_000, MAX_INPUT] {
            let mut out = Vec::new();
            zlib_header(len, &mut out);
            assert_eq!((u32::from(out[0]) << 8 | u32::from(out[1])) % 31, 0);
            assert_eq!(out[0] & 0x0f, 8, "deflate");
            let window = 1usize << ((out[0] >> 4) + 8);
            assert!(
                window >= len.min(1 << 15),
                "a {len}-byte input fits its window"
            );
        }
    }

    #[test]
    fn distance_and_length_codes_match_the_rfc_tables() {
        // (distance, symbol, extra bits) from RFC 1951 section 3.2.5.
        for (distance, symbol, extra) in [
            (1, 0, 0),
            (4, 3, 0),
            (5, 4, 1),
            (6, 4, 1),
            (7, 5, 1),
            (9, 6, 2),
            (24577, 29, 13),
            (32768, 29, 13),
        ] {
            let (code, n) = distance_code(distance);
            assert_eq!(n, 5 + extra, "distance {distance}");
            assert_eq!(code & 31, reverse(symbol, 5), "distance {distance}");
        }
        // (length, symbol, extra bits).
        for (len, symbol, extra) in [
            (3, 257, 0),
            (10, 264, 0),
            (11, 265, 1),
            (227, 284, 5),
            (257, 284, 5),
            (258, 285, 0),
        ] {
            let (code, n) = LENGTH_CODES[len - 3];
            let (sym_code, sym_n) = LITERAL_CODES[symbol];
            assert_eq!(n, sym_n + extra, "length {len}");
            assert_eq!(code & ((1 << sym_n) - 1), sym_code, "length {len}");
        }
    }

    #[test]
    fn adler32_matches_known_values() {
        assert_eq!(adler32(b""), 1);
        assert_eq!(adler32(b"Wikipedia"), 0x11E6_0398);
        let long = vec![0xffu8; 100_000];
        let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut e, &long).unwrap();
        let stream = e.finish().unwrap();
        assert_eq!(stream[stream.len() - 4..], adler32(&long).to_be_bytes());
    }

    proptest! {
        #[test]
        fn any_bytes_round_trip(bytes in proptest::collection::vec(any::<u8>(), 0..4096)) {
            let mut out = Vec::new();
            compress(&bytes, &mut out);
            prop_assert_eq!(inflate(&out), bytes);
        }

        #[test]
        fn few_distinct_bytes_round_trip(bytes in proptest::collection::vec(0u8..4, 0..8192)) {
            let mut out = Vec::new();
            compress(&bytes, &mut out);
            prop_assert_eq!(inflate(&out), bytes);
        }
    }
}
