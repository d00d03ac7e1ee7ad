//! Shard ranges: the part of an instance's shards that one cluster holds.
//!
//! Written in config as `"FIRST-LAST"` (both inclusive) or a single shard
//! number. Ranges are checked against each other in [`crate::validate`].

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer};

/// An inclusive range of shard numbers, `first..=last`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ShardRange {
    /// The first shard of the range.
    pub first: u32,
    /// The last shard of the range (inclusive).
    pub last: u32,
}

impl ShardRange {
    /// Whether `shard` lies in this range.
    pub fn contains(&self, shard: u32) -> bool {
        self.first <= shard && shard <= self.last
    }

    /// The shards of the range, in order.
    pub fn iter(&self) -> impl Iterator<Item = u32> {
        self.first..=self.last
    }

    /// How many shards the range holds.
    pub fn len(&self) -> u32 {
        self.last - self.first + 1
    }

    /// Always false: a range holds at least one shard.
    pub fn is_empty(&self) -> bool {
        false
    }
}

impl fmt::Display for ShardRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.first == self.last {
            write!(f, "{}", self.first)
        } else {
            write!(f, "{}-{}", self.first, self.last)
        }
    }
}

impl FromStr for ShardRange {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let number = |part: &str| {
            part.trim()
                .parse::<u32>()
                .map_err(|_| format!("expected a shard range like \"0-31\" or \"7\", got {s:?}"))
        };
        let (first, last) = match s.split_once('-') {
            Some((a, b)) => (number(a)?, number(b)?),
            None => {
                let n = number(s)?;
                (n, n)
            }
        };
        if first > last {
            return Err(format!(
                "shard range {s:?} is backwards: its first shard is after its last"
            ));
        }
        Ok(ShardRange { first, last })
    }
}

impl<'de> Deserialize<'de> for ShardRange {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ranges_and_single_shards() {
        assert_eq!(
            "0-31".parse::<ShardRange>().unwrap(),
            ShardRange { first: 0, last: 31 }
        );
        assert_eq!(
            "7".parse::<ShardRange>().unwrap(),
            ShardRange { first: 7, last: 7 }
        );
        assert_eq!("3-9".parse::<ShardRange>().unwrap().len(), 7);
    }

    #[test]
    fn rejects_malformed_ranges() {
        for bad in ["", "a-b", "5-2", "-3", "1-", "1-2-3"] {
            assert!(bad.parse::<ShardRange>().is_err(), "{bad:?} accepted");
        }
    }
}
