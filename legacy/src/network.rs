//! Network addresses in their one canonical form: PostgreSQL's own text.
//!
//! An `inet` is the address and, unless it covers one host (`/32`,
//! `/128`), its mask length: `192.168.0.1`, `10.1.2.3/8`. A `cidr` always
//! carries its mask length, and has no bit set past it: `10.0.0.0/8`.
//! IPv6 addresses are printed as PostgreSQL prints them (the longest run
//! of two or more zero groups as `::`, lowercase hex, an IPv4 tail where
//! PostgreSQL writes one: `::ffff:1.2.3.4`). A `macaddr` is six bytes as
//! lowercase hex pairs, `08:00:2b:01:02:03`; a `macaddr8` eight (a
//! six-byte one given is widened as PostgreSQL widens it, with `ff:fe` in
//! the middle).
//!
//! PostgreSQL's own text means its output function's: a cast to `text` is
//! the function `text(inet)`, which always adds the mask length
//! (`10.0.0.1/32`); the reading takes that and prints it canonical.
//!
//! Input takes an IPv4 address as four decimal octets, an IPv6 address in
//! any form RFC 4291 allows, and a MAC address as hex pairs separated by
//! `:` or `-`, or the bare hex digits. PostgreSQL reads more spellings
//! (`10/8` for a `cidr`, `0800.2b01.0203`); a value is refused here
//! rather than stored in a form PostgreSQL would print otherwise.

use std::net::{Ipv4Addr, Ipv6Addr};

/// An address and its mask length, as PostgreSQL keeps an `inet`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Inet {
    /// Four bytes (IPv4) or sixteen (IPv6), in the first `len` bytes.
    bytes: [u8; 16],
    v6: bool,
    bits: u8,
}

impl Inet {
    /// From its parts (as PostgreSQL's binary form gives them).
    pub fn new(address: &[u8], bits: u8) -> Option<Inet> {
        let v6 = match address.len() {
            4 => false,
            16 => true,
            _ => return None,
        };
        if bits > if v6 { 128 } else { 32 } {
            return None;
        }
        let mut bytes = [0; 16];
        bytes[..address.len()].copy_from_slice(address);
        Some(Inet { bytes, v6, bits })
    }

    /// `address[/bits]`.
    pub fn parse(text: &str) -> Result<Inet, String> {
        let (address, bits) = match text.split_once('/') {
            Some((address, bits)) => (address, Some(bits)),
            None => (text, None),
        };
        let (bytes, v6) = if let Ok(v4) = address.parse::<Ipv4Addr>() {
            let mut bytes = [0; 16];
            bytes[..4].copy_from_slice(&v4.octets());
            (bytes, false)
        } else if let Ok(v6) = address.parse::<Ipv6Addr>() {
            (v6.octets(), true)
        } else {
            return Err(format!(
                "{text:?} is not a network address (four decimal octets, or IPv6, and an optional /mask)"
            ));
        };
        let max = if v6 { 128 } else { 32 };
        let bits = match bits {
            None => max,
            Some(b) if !b.is_empty() && b.bytes().all(|c| c.is_ascii_digit()) => b
                .parse::<u8>()
                .ok()
                .filter(|b| *b <= max)
                .ok_or_else(|| format!("{text:?}: the mask length is over {max}"))?,
            Some(_) => return Err(format!("{text:?}: the mask length is not a number")),
        };
        Ok(Inet { bytes, v6, bits })
    }

    fn address(&self) -> &[u8] {
        &self.bytes[..if self.v6 { 16 } else { 4 }]
    }

    /// Whether a bit past the mask is set (a `cidr` refuses that).
    fn host_bits(&self) -> bool {
        self.address().iter().enumerate().any(|(i, byte)| {
            let kept = usize::from(self.bits).saturating_sub(i * 8).min(8);
            let mask = if kept == 8 { 0xff } else { !(0xffu8 >> kept) };
            byte & !mask != 0
        })
    }

    /// PostgreSQL's text of it as an `inet` (`cidr`: with the mask
    /// length always).
    pub fn format(&self, cidr: bool) -> String {
        let mut text = if self.v6 {
            ipv6_text(&self.bytes)
        } else {
            let b = &self.bytes;
            format!("{}.{}.{}.{}", b[0], b[1], b[2], b[3])
        };
        let max = if self.v6 { 128 } else { 32 };
        if cidr || self.bits != max {
            text.push_str(&format!("/{}", self.bits));
        }
        text
    }
}

/// An IPv6 address as PostgreSQL's `inet_net_ntop_ipv6` writes it.
fn ipv6_text(bytes: &[u8; 16]) -> String {
    let words: Vec<u16> = bytes
        .chunks(2)
        .map(|pair| u16::from_be_bytes([pair[0], pair[1]]))
        .collect();
    // The first longest run of zero groups, if two or longer, as (first
    // group, length): each run ends at a non-zero group or at the end.
    let mut best: Option<(usize, usize)> = None;
    let mut current = None;
    for (i, word) in words.iter().chain([&1]).enumerate() {
        if *word == 0 {
            current = Some(current.map_or((i, 1), |(base, len)| (base, len + 1)));
        } else if let Some(run) = current.take() {
            if best.is_none_or(|b| run.1 > b.1) {
                best = Some(run);
            }
        }
    }
    let best = best.filter(|(_, len)| *len >= 2);
    let mut text = String::new();
    for (i, word) in words.iter().enumerate() {
        if let Some((base, len)) = best {
            if i >= base && i < base + len {
                if i == base {
                    text.push(':');
                }
                continue;
            }
        }
        if i != 0 {
            text.push(':');
        }
        let ipv4_tail = i == 6
            && matches!(best, Some((0, len)) if len == 6
                || (len == 7 && words[7] != 1)
                || (len == 5 && words[5] == 0xffff));
        if ipv4_tail {
            text.push_str(&format!(
                "{}.{}.{}.{}",
                bytes[12], bytes[13], bytes[14], bytes[15]
            ));
            return text;
        }
        text.push_str(&format!("{word:x}"));
    }
    if matches!(best, Some((base, len)) if base + len == 8) {
        text.push(':');
    }
    text
}

/// The canonical text of an `inet` (`cidr` when `cidr`), refusing a
/// `cidr` with bits set past its mask as PostgreSQL does.
pub fn canonical_inet(text: &str, cidr: bool) -> Result<String, String> {
    let inet = Inet::parse(text)?;
    if cidr && inet.host_bits() {
        return Err(format!(
            "{text:?} is not a cidr: it has bits set to the right of its mask"
        ));
    }
    Ok(inet.format(cidr))
}

/// The canonical text of a MAC address of `len` bytes (6: `macaddr`, 8:
/// `macaddr8`, which also takes six, widened with `ff:fe`).
pub fn canonical_mac(text: &str, len: usize) -> Result<String, String> {
    let bad = || {
        format!("{text:?} is not a MAC address of {len} bytes (hex pairs separated by ':' or '-')")
    };
    let digits: String = if text.contains(':') || text.contains('-') {
        let separator = if text.contains(':') { ':' } else { '-' };
        let pairs: Vec<&str> = text.split(separator).collect();
        if pairs.iter().any(|p| p.len() != 2) {
            return Err(bad());
        }
        pairs.concat()
    } else {
        text.to_string()
    };
    if !digits.len().is_multiple_of(2) || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(bad());
    }
    let mut bytes: Vec<String> = (0..digits.len() / 2)
        .map(|i| digits[2 * i..2 * i + 2].to_ascii_lowercase())
        .collect();
    if len == 8 && bytes.len() == 6 {
        bytes.splice(3..3, ["ff".to_string(), "fe".to_string()]);
    }
    if bytes.len() != len {
        return Err(bad());
    }
    Ok(bytes.join(":"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_print_as_postgresql_prints_them() {
        for (text, inet, cidr) in [
            ("192.168.0.1", "192.168.0.1", "192.168.0.1/32"),
            ("10.0.0.0/8", "10.0.0.0/8", "10.0.0.0/8"),
            ("0.0.0.0/0", "0.0.0.0/0", "0.0.0.0/0"),
            ("2001:DB8::1", "2001:db8::1", "2001:db8::1/128"),
            (
                "2001:db8:0:0:1:0:0:1",
                "2001:db8::1:0:0:1",
                "2001:db8::1:0:0:1/128",
            ),
            (
                "2001:db8:0:1:1:1:1:1",
                "2001:db8:0:1:1:1:1:1",
                "2001:db8:0:1:1:1:1:1/128",
            ),
            ("::", "::", "::/128"),
            ("::1", "::1", "::1/128"),
            ("::ffff:1.2.3.4", "::ffff:1.2.3.4", "::ffff:1.2.3.4/128"),
            ("::1.2.3.4", "::1.2.3.4", "::1.2.3.4/128"),
            ("fe80::/10", "fe80::/10", "fe80::/10"),
            ("1::", "1::", "1::/128"),
        ] {
            assert_eq!(canonical_inet(text, false).unwrap(), inet, "{text}");
            assert_eq!(canonical_inet(text, true).unwrap(), cidr, "{text}");
        }
        for bad in [
            "10.1",
            "10.0.0.256",
            "10.0.0.1/33",
            "::/129",
            "10.0.0.1/",
            "host",
            "10.0.0.1/x",
        ] {
            assert!(canonical_inet(bad, false).is_err(), "{bad:?}");
        }
        assert!(canonical_inet("10.0.0.1/8", true).is_err(), "host bits");
        assert!(canonical_inet("10.0.0.1/8", false).is_ok());
        assert!(canonical_inet("fe80::1/10", true).is_err());
    }

    #[test]
    fn mac_addresses_are_lowercase_pairs() {
        assert_eq!(
            canonical_mac("08:00:2B:01:02:03", 6).unwrap(),
            "08:00:2b:01:02:03"
        );
        assert_eq!(
            canonical_mac("08-00-2b-01-02-03", 6).unwrap(),
            "08:00:2b:01:02:03"
        );
        assert_eq!(
            canonical_mac("08002b010203", 6).unwrap(),
            "08:00:2b:01:02:03"
        );
        assert_eq!(
            canonical_mac("08:00:2b:01:02:03", 8).unwrap(),
            "08:00:2b:ff:fe:01:02:03"
        );
        assert_eq!(
            canonical_mac("08:00:2b:01:02:03:04:05", 8).unwrap(),
            "08:00:2b:01:02:03:04:05"
        );
        for bad in [
            "08:00:2b:01:02",
            "08:00:2b:01:02:0g",
            "0800.2b01.0203",
            "8:0:2b:1:2:3",
            "",
        ] {
            assert!(canonical_mac(bad, 6).is_err(), "{bad:?}");
        }
    }
}
