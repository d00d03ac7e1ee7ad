//! Trips as cells, for workloads that write through the cell API: a new
//! trip's cells, then its completion.

use super::generate::{cents, mix, uuid_of, CITIES, CURRENCIES, EPOCH_2014, NOTES};
use super::*;

/// Cells of new and changing trips in the sample layout's shape (BASE and
/// NOTES of `config/examples/local.toml`), for load through the facade:
/// `mezzanine mirror load`, `mezzanine bench mirror`, the demo and tests.
pub struct TripCells {
    rng: SmallRng,
    base: schemaless::Column,
    notes: schemaless::Column,
}

impl TripCells {
    /// A seeded source.
    pub fn new(seed: u64) -> TripCells {
        TripCells {
            rng: SmallRng::seed_from_u64(mix(seed)),
            base: schemaless::Column::new("BASE").expect("a valid column"),
            notes: schemaless::Column::new("NOTES").expect("a valid column"),
        }
    }

    /// A new trip: its BASE cell at version 1 and, for about half the
    /// trips, a NOTES cell (written in one batch, the parent row first).
    pub fn new_trip(&mut self) -> Vec<schemaless::Cell> {
        let rng = &mut self.rng;
        let row_key =
            schemaless::RowKey::from(uuid::Builder::from_random_bytes(rng.random()).into_uuid());
        let requested = EPOCH_2014 + rng.random_range(0..400_000_000_000_000i64);
        let at =
            crate::time::format_timestamp(requested.into(), true).expect("a timestamp in range");
        let body = serde_json::json!({
            // 2000 drivers, so an index by driver has several trips each.
            "driver_uuid": uuid_of(7, 2, rng.random_range(0..2000)).to_string(),
            "rider_uuid": uuid::Builder::from_random_bytes(rng.random()).into_uuid().to_string(),
            "city_id": rng.random_range(1..=CITIES),
            "status": "requested",
            "fare": null,
            "currency": CURRENCIES[rng.random_range(0..CURRENCIES.len())],
            "distance_km": null,
            "requested_at": at,
            "completed_at": null,
        });
        let mut cells = vec![schemaless::Cell::new(
            row_key,
            self.base.clone(),
            schemaless::RefKey::new(1).expect("a valid ref key"),
            schemaless::Body::from_value(body).expect("an object"),
        )];
        if rng.random_bool(0.5) {
            let note = serde_json::json!({
                "author": "rider",
                "text": NOTES[rng.random_range(0..NOTES.len())],
                "at": at,
            });
            cells.push(schemaless::Cell::new(
                row_key,
                self.notes.clone(),
                schemaless::RefKey::new(1).expect("a valid ref key"),
                schemaless::Body::from_value(note).expect("an object"),
            ));
        }
        cells
    }

    /// The next version of a trip's BASE cell: completed, with a fare and
    /// a distance.
    pub fn complete(&mut self, base: &schemaless::Cell) -> schemaless::Cell {
        let rng = &mut self.rng;
        let mut fields = base.body.fields().clone();
        fields.insert("status".into(), "completed".into());
        // In the canonical form of `numeric`: no trailing fraction zeros.
        let fare = schemaless::decimal::canonical_decimal(&cents(rng.random_range(400..12_000)))
            .expect("a decimal");
        fields.insert("fare".into(), fare.into());
        fields.insert(
            "distance_km".into(),
            ((rng.random_range(0.5..60.0f64) * 1000.0).round() / 1000.0).into(),
        );
        let mut cell = base.clone();
        cell.key.ref_key =
            schemaless::RefKey::new(base.key.ref_key.get() + 1).expect("a valid ref key");
        cell.body = schemaless::Body::from(fields);
        cell
    }
}
