//! The change-log ids a follower has moved past but still waits for, as
//! ranges.
//!
//! A rolled-back multi-row insert leaves a run of consecutive ids that
//! will never be filled; a backfill racing mirrored writes leaves
//! thousands. Kept one id at a time, their saved form outgrew its column
//! and the save failed for ever. As ranges, a run is one entry; the set is
//! also bounded ([`MAX_RANGES`]): past it the ranges given up on first are
//! dropped (counted in `mezzanine_schemaless_follower_awaited_dropped_total`), since
//! a hole minutes old is all but certainly a rollback.
//!
//! Saved as text: `first-last` or `id`, comma-separated (the older form,
//! ids only, reads the same).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// The most ranges kept.
pub const MAX_RANGES: usize = 100_000;

/// How many ranges one recheck looks up.
pub const RECHECK_RANGES: usize = 1000;

/// Awaited ids: `first -> (last, since)`, ranges disjoint.
#[derive(Clone, Debug, Default)]
pub struct Awaited {
    ranges: BTreeMap<u64, (u64, Instant)>,
    /// `(since, first)` of every range: the oldest is dropped first.
    by_age: BTreeSet<(Instant, u64)>,
    /// Where the next recheck page starts.
    cursor: u64,
    /// Ranges dropped to stay within [`MAX_RANGES`].
    dropped: u64,
    /// Bumped by every change, so that "anything to save?" is cheap.
    generation: u64,
}

impl Awaited {
    /// The saved form read back (unreadable entries are skipped: a
    /// position is a hint, the log is the truth).
    pub fn parse(text: &str) -> Awaited {
        let now = Instant::now();
        let mut awaited = Awaited::default();
        for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let range = match entry.split_once('-') {
                Some((a, b)) => a.parse().ok().zip(b.parse().ok()),
                None => entry.parse().ok().map(|id| (id, id)),
            };
            if let Some((first, last)) = range.filter(|(a, b)| a <= b) {
                awaited.insert(first, last, now);
            }
        }
        awaited
    }

    /// The saved form.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        for (first, (last, _)) in &self.ranges {
            if !out.is_empty() {
                out.push(',');
            }
            if first == last {
                out.push_str(&first.to_string());
            } else {
                out.push_str(&format!("{first}-{last}"));
            }
        }
        out
    }

    /// A number that changes whenever the set does.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Whether nothing is awaited.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// How many ranges are kept.
    pub fn ranges(&self) -> usize {
        self.ranges.len()
    }

    /// Ranges dropped so far to stay within the bound.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Every awaited id, lowest first (for tests and small sets).
    pub fn ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.ranges
            .iter()
            .flat_map(|(first, (last, _))| *first..=*last)
    }

    /// Awaits `first..=last` from `since`, joined to a range it touches
    /// that was given up on at the same moment.
    pub fn insert(&mut self, first: u64, last: u64, since: Instant) {
        let mut first = first;
        if let Some((&before, &(end, at))) = self.ranges.range(..first).next_back() {
            if end.checked_add(1) == Some(first) && at == since {
                self.take(before);
                first = before;
            }
        }
        self.put(first, last, since);
        while self.ranges.len() > MAX_RANGES {
            let &(_, oldest) = self.by_age.first().expect("more than MAX_RANGES ranges");
            self.take(oldest);
            self.dropped += 1;
            metrics::counter!("mezzanine_schemaless_follower_awaited_dropped_total").increment(1);
        }
    }

    fn put(&mut self, first: u64, last: u64, since: Instant) {
        self.generation += 1;
        if let Some((_, old)) = self.ranges.insert(first, (last, since)) {
            self.by_age.remove(&(old, first));
        }
        self.by_age.insert((since, first));
    }

    fn take(&mut self, first: u64) -> Option<(u64, Instant)> {
        let (last, since) = self.ranges.remove(&first)?;
        self.generation += 1;
        self.by_age.remove(&(since, first));
        Some((last, since))
    }

    /// Forgets ranges awaited longer than `horizon`.
    pub fn expire(&mut self, horizon: Duration) {
        while let Some(&(since, first)) = self.by_age.first() {
            if since.elapsed() < horizon {
                break;
            }
            self.take(first);
        }
    }

    /// The next ranges to look up (at most [`RECHECK_RANGES`]), going
    /// round the whole set over successive calls.
    pub fn next_page(&mut self) -> Vec<(u64, u64)> {
        let mut page: Vec<(u64, u64)> = self
            .ranges
            .range(self.cursor..)
            .take(RECHECK_RANGES)
            .map(|(first, (last, _))| (*first, *last))
            .collect();
        if page.len() < RECHECK_RANGES {
            let more = RECHECK_RANGES - page.len();
            page.extend(
                self.ranges
                    .range(..self.cursor)
                    .take(more)
                    .map(|(first, (last, _))| (*first, *last)),
            );
            self.cursor = 0;
        }
        if let Some(&(_, last)) = page.last() {
            self.cursor = last.saturating_add(1);
        }
        page
    }

    /// Stops awaiting `id` (its cell turned up).
    pub fn remove(&mut self, id: u64) {
        let Some((&first, &(last, _))) = self.ranges.range(..=id).next_back() else {
            return;
        };
        if id > last {
            return;
        }
        let (_, since) = self.take(first).expect("the range just found");
        if first < id {
            self.put(first, id - 1, since);
        }
        if id < last {
            self.put(id + 1, last, since);
        }
    }
}

impl PartialEq for Awaited {
    /// The same ids, whenever they were given up on.
    fn eq(&self, other: &Awaited) -> bool {
        self.to_text() == other.to_text()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_are_one_range_and_read_back() {
        let now = Instant::now();
        let mut a = Awaited::default();
        a.insert(10, 19, now);
        a.insert(20, 20, now);
        a.insert(30, 30, now);
        assert_eq!(a.to_text(), "10-20,30");
        assert_eq!(Awaited::parse("10-20,30").to_text(), "10-20,30");
        assert_eq!(
            Awaited::parse("1,2,3,9").ids().collect::<Vec<_>>(),
            [1, 2, 3, 9]
        );
        assert!(Awaited::parse("x,5-3,").is_empty());
        a.remove(15);
        a.remove(10);
        a.remove(30);
        a.remove(31);
        assert_eq!(a.to_text(), "11-14,16-20");
    }

    #[test]
    fn a_hundred_thousand_gaps_stay_bounded_and_small() {
        let now = Instant::now();
        let mut a = Awaited::default();
        for i in 0..(MAX_RANGES as u64 + 5) {
            a.insert(i * 2, i * 2, now + Duration::from_nanos(i));
        }
        assert_eq!(a.ranges(), MAX_RANGES);
        assert_eq!(a.dropped(), 5);
        // The first given up on went first.
        assert_eq!(a.ids().next(), Some(10));
        let text = a.to_text();
        assert!(text.len() < 16 << 20, "{} bytes", text.len());
        // Pages go round the whole set.
        let mut seen = 0;
        for _ in 0..(MAX_RANGES / RECHECK_RANGES) {
            seen += a.next_page().len();
        }
        assert_eq!(seen, MAX_RANGES);
        assert_eq!(a.next_page()[0], (10, 10));
    }
}
