//! The seeded generator: trip `id` of seed `S` is always the same trip,
//! drawn from its own random stream, rendered as COPY text.

use super::*;

/// COPY text of one chunk, per table.
#[derive(Default)]
pub(super) struct ChunkText {
    pub(super) trips: String,
    pub(super) notes: String,
    pub(super) billing: String,
    pub(super) adjustments: String,
    pub(super) counts: SeedCounts,
}

/// The generator: how trip `id` of a seed looks.
#[derive(Clone, Copy, Debug)]
pub struct Generator {
    seed: u64,
    drivers: u64,
    riders: u64,
    with_uuid: bool,
}

pub(super) const CITIES: u64 = 50;

pub(super) const CURRENCIES: [&str; 5] = ["USD", "EUR", "GBP", "BRL", "INR"];

pub(super) const NOTES: [&str; 12] = [
    "Rider waiting at the north entrance",
    "Café près de la gare, côté rue",
    "乘客在门口等",
    "Straße gesperrt, bitte über die Brücke",
    "Водитель опоздал на 5 минут",
    "Left a phone 📱 in the back seat",
    "Two stops:\tfirst the pharmacy, then home",
    "Gate code 4711\nring twice",
    "Path was C:\\Users\\rider\\maps",
    "\"Quiet ride\" requested",
    "Ünïcödé everywhere — ça marche?",
    "🚕 ride shared with a colleague",
];

pub(super) const AUTHORS: [&str; 3] = ["rider", "driver", "support"];

pub(super) const REASONS: [&str; 5] = [
    "promo code",
    "wait time",
    "route deviation",
    "toll",
    "support goodwill",
];

pub(super) const CODES: [&str; 6] = ["PROMO", "WAIT", "ROUTE", "TOLL", "GOODWILL", "SURGE"];

/// 2014-01-01T00:00:00Z in microseconds.
pub(super) const EPOCH_2014: i64 = 1_388_534_400_000_000;

/// splitmix64: decorrelates neighbouring seeds.
pub(super) fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

pub(super) fn uuid_of(seed: u64, kind: u64, n: u64) -> Uuid {
    let high = mix(seed ^ mix(kind) ^ n.rotate_left(17));
    let low = mix(high ^ n);
    uuid::Builder::from_random_bytes(((u128::from(high) << 64) | u128::from(low)).to_be_bytes())
        .into_uuid()
}

/// COPY text escaping.
pub(super) fn escape(out: &mut String, text: &str) {
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c => out.push(c),
        }
    }
}

pub(super) fn timestamp(micros: i64) -> String {
    crate::time::format_timestamp(micros.into(), true).expect("seed times are within 0001-9999")
}

pub(super) fn cents(c: i64) -> String {
    let sign = if c < 0 { "-" } else { "" };
    format!("{sign}{}.{:02}", c.abs() / 100, c.abs() % 100)
}

impl Generator {
    /// A generator for a data set of about `trips` trips (which sizes the
    /// driver and rider pools).
    pub fn new(seed: u64, trips: u64, with_uuid: bool) -> Generator {
        Generator {
            seed,
            drivers: 200 + trips / 40,
            riders: 1000 + trips / 4,
            with_uuid,
        }
    }

    /// Appends trip `id` and its children to `out`.
    pub(super) fn trip(&self, id: u64, out: &mut ChunkText) {
        let mut rng = SmallRng::seed_from_u64(mix(self.seed ^ mix(id)));
        // Skewed: u^3 piles up near 0, so low-numbered drivers and cities
        // take most trips.
        let driver = (self.drivers as f64 * rng.random::<f64>().powi(3)) as u64;
        let rider = rng.random_range(0..self.riders);
        let city = 1 + (CITIES as f64 * rng.random::<f64>().powi(2)) as u64;
        let currency = CURRENCIES[(city % CURRENCIES.len() as u64) as usize];
        let roll: f64 = rng.random();
        let status = if roll < 0.82 {
            "completed"
        } else if roll < 0.92 {
            "canceled"
        } else if roll < 0.97 {
            "in_progress"
        } else {
            "requested"
        };
        let requested = EPOCH_2014 + id as i64 * 30_000_000 + rng.random_range(0..600_000_000);
        let (fare, distance, completed, version) = match status {
            "completed" => {
                let fare = 400 + (rng.random::<f64>().powi(2) * 11_600.0) as i64;
                let km = (rng.random_range(0.5..60.0f64) * 1000.0).round() / 1000.0;
                let minutes = rng.random_range(4..90);
                (
                    Some(fare),
                    Some(km),
                    Some(requested + minutes * 60_000_000 + rng.random_range(0..1_000_000)),
                    3,
                )
            }
            "canceled" if rng.random_bool(0.5) => (Some(500), None, None, 2),
            "canceled" | "in_progress" => (None, None, None, 2),
            _ => (None, None, None, 1),
        };

        let t = &mut out.trips;
        let _ = write!(t, "{id}\t");
        if self.with_uuid {
            let _ = write!(t, "{}\t", uuid_of(self.seed, 1, id));
        }
        let _ = writeln!(
            t,
            "{}\t{}\t{city}\t{status}\t{}\t{currency}\t{}\t{}\t{}\t{version}",
            uuid_of(self.seed, 2, driver),
            uuid_of(self.seed, 3, rider),
            fare.map_or("\\N".into(), cents),
            distance.map_or("\\N".into(), |d| d.to_string()),
            timestamp(requested),
            completed.map_or("\\N".into(), timestamp),
        );
        out.counts.trips += 1;

        let notes = match rng.random_range(0..100) {
            0..60 => 0,
            60..85 => 1,
            85..95 => 2,
            _ => rng.random_range(3..=5),
        };
        for seq in 1..=notes {
            let n = &mut out.notes;
            let _ = write!(
                n,
                "{id}\t{seq}\t{}\t",
                AUTHORS[rng.random_range(0..AUTHORS.len())]
            );
            escape(n, NOTES[rng.random_range(0..NOTES.len())]);
            let _ = writeln!(n, "\t{}", timestamp(requested + seq * 45_000_000));
            out.counts.notes += 1;
        }

        if let Some(amount) = fare {
            let attempts = if status == "completed" {
                match rng.random_range(0..100) {
                    0..85 => 1,
                    85..97 => 2,
                    _ => 3,
                }
            } else {
                1
            };
            let at = completed.unwrap_or(requested);
            for seq in 1..=attempts {
                let succeeded = seq == attempts && rng.random_bool(0.97);
                let response = if rng.random_bool(0.1) {
                    "\\N".to_string()
                } else {
                    let code = if succeeded { "approved" } else { "declined" };
                    format!(
                        "{{\"code\": \"{code}\", \"auth\": \"{:08x}\", \"latency_ms\": {}, \"retryable\": {}}}",
                        rng.random::<u32>(),
                        rng.random_range(40..900),
                        !succeeded
                    )
                };
                let _ = writeln!(
                    out.billing,
                    "{id}\t{seq}\t{}\t{currency}\t{}\t{response}\t{}",
                    cents(amount),
                    if succeeded { "t" } else { "f" },
                    timestamp(at + seq * 2_000_000 + rng.random_range(0..1_000_000)),
                );
                out.counts.billing_attempts += 1;
            }
            if status == "completed" && rng.random_bool(0.15) {
                for seq in 1..=rng.random_range(1..=2i64) {
                    let amount = rng.random_range(-1500..=800i64);
                    let codes: Vec<&str> = (0..rng.random_range(0..=2))
                        .map(|_| CODES[rng.random_range(0..CODES.len())])
                        .collect();
                    let _ = writeln!(
                        out.adjustments,
                        "{id}\t{seq}\t{}\t{}\t{{{}}}\t{}",
                        cents(amount),
                        REASONS[rng.random_range(0..REASONS.len())],
                        codes.join(","),
                        timestamp(at + 3_600_000_000 * seq),
                    );
                    out.counts.fare_adjustments += 1;
                }
            }
        }
    }

    pub(super) fn chunk(&self, ids: std::ops::Range<u64>) -> ChunkText {
        let mut out = ChunkText::default();
        for id in ids {
            self.trip(id, &mut out);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trip_is_the_same_whatever_the_chunking() {
        let g = Generator::new(7, 1000, true);
        let whole = g.chunk(1..101);
        let mut parts = g.chunk(1..50);
        let rest = g.chunk(50..101);
        parts.trips.push_str(&rest.trips);
        parts.notes.push_str(&rest.notes);
        assert_eq!(whole.trips, parts.trips);
        assert_eq!(whole.notes, parts.notes);
        assert_ne!(
            Generator::new(8, 1000, true).chunk(1..101).trips,
            whole.trips
        );
    }

    #[test]
    fn copy_text_is_escaped() {
        let mut out = String::new();
        escape(&mut out, "a\tb\nc\\d");
        assert_eq!(out, "a\\tb\\nc\\\\d");
    }
}
