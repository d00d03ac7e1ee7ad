//! Synthetic trip cells for the demo and the benchmarks: bodies shaped like
//! a trip's BASE column (UUIDs, a city, a status, money as a string,
//! timestamps, free text with non-ASCII), about 300 bytes of JSON each.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use schemaless::{Body, Cell, Column, RefKey, RowKey};
use serde_json::json;

const STATUSES: [&str; 5] = [
    "requested",
    "accepted",
    "en_route",
    "completed",
    "cancelled",
];
const NOTES: [&str; 6] = [
    "pickup at the north entrance",
    "rider asked for quiet ride",
    "Größe: 2 Koffer, bitte Kofferraum",
    "aeropuerto — terminal 2, puerta 5",
    "乗車位置は駅の東口です",
    "no notes",
];

/// A seeded source of trip cells.
pub struct Trips {
    rng: StdRng,
    base: Column,
}

impl Trips {
    pub fn new(seed: u64) -> Trips {
        Trips {
            rng: StdRng::seed_from_u64(seed),
            base: Column::new("BASE").expect("a valid column name"),
        }
    }

    /// A fresh trip's row key.
    pub fn row_key(&mut self) -> RowKey {
        RowKey::from(uuid::Uuid::from_u128(self.rng.random()))
    }

    /// A BASE cell of `row_key` at version `ref_key`.
    pub fn base_cell(&mut self, row_key: RowKey, ref_key: i64) -> Cell {
        let rng = &mut self.rng;
        let requested = 1_700_000_000_000_000_i64 + rng.random_range(0..31_536_000_000_000_i64);
        let body = json!({
            "driver_uuid": uuid::Uuid::from_u128(rng.random()).to_string(),
            "rider_uuid": uuid::Uuid::from_u128(rng.random()).to_string(),
            "city_id": rng.random_range(1..400),
            "status": STATUSES[rng.random_range(0..STATUSES.len())],
            "fare": format!("{}.{:02}", rng.random_range(3..180), rng.random_range(0..100)),
            "currency": "EUR",
            "distance_km": (rng.random_range(5..4000) as f64) / 100.0,
            "requested_at": requested,
            "completed_at": requested + rng.random_range(120_000_000..5_400_000_000_i64),
            "note": NOTES[rng.random_range(0..NOTES.len())],
        });
        Cell::new(
            row_key,
            self.base.clone(),
            RefKey::new(ref_key).expect("ref keys here are non-negative"),
            Body::from_value(body).expect("a JSON object"),
        )
    }
}
