//! The billing flow of the trips data set, as a trigger: when a trip's
//! BASE cell says it is completed, charge its fare (a simulated payment
//! processor) and record the outcome in the trip's STATUS column.
//!
//! Triggers deliver at least once, so the handler is idempotent: the
//! STATUS cell it writes has the ref key of the BASE version it billed and
//! a body that depends only on that version. A redelivered cell writes the
//! same STATUS cell again, which the store answers `AlreadyPresent`; a trip
//! is never charged twice for one version.

use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use schemaless::mysql::trigger::{Handler, HandlerResult};
use schemaless::{Body, Cell, CellStore, Column, Error, MySqlStore, StoredCell, WriteOutcome};
use serde_json::json;

/// The billing trigger's handler.
pub struct Billing {
    pub store: MySqlStore,
    pub status: Column,
    /// Trips charged (new STATUS cells written).
    pub charged: AtomicU64,
    /// Trips the processor declined.
    pub declined: AtomicU64,
    /// Deliveries that found their STATUS cell already written.
    pub replays: AtomicU64,
}

impl Billing {
    pub fn new(store: MySqlStore) -> Billing {
        Billing {
            store,
            status: Column::new("STATUS").expect("a valid column name"),
            charged: AtomicU64::new(0),
            declined: AtomicU64::new(0),
            replays: AtomicU64::new(0),
        }
    }
}

/// The simulated processor: declines a fare whose cents are a multiple of
/// 17, approves the rest. Deterministic, so a retry gets the same answer.
fn processor(cents: i64) -> &'static str {
    if cents % 17 == 0 {
        "declined"
    } else {
        "approved"
    }
}

/// Whole cents of a non-negative amount with at most two decimals
/// (`"12.5"` is 1250); anything else is not an amount to charge.
fn cents(fare: &str) -> Option<i64> {
    let (whole, frac) = fare.split_once('.').unwrap_or((fare, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() || !digits(whole) || frac.len() > 2 || !digits(frac) {
        return None;
    }
    let frac = format!("{frac:0<2}");
    whole
        .parse::<i64>()
        .ok()?
        .checked_mul(100)?
        .checked_add(frac.parse().ok()?)
}

#[async_trait]
impl Handler for Billing {
    async fn handle(&self, cell: &StoredCell) -> HandlerResult {
        let body = cell.cell.body.fields();
        if body.get("status").and_then(|s| s.as_str()) != Some("completed") {
            return Ok(());
        }
        let fare = body.get("fare").and_then(|f| f.as_str()).unwrap_or("");
        let Some(amount) = cents(fare) else {
            // Retrying cannot fix it: park it for a person to look at.
            return Err(format!("fare {fare:?} is not an amount"));
        };
        let outcome = processor(amount);
        let status = Cell::new(
            cell.cell.key.row_key,
            self.status.clone(),
            cell.cell.key.ref_key,
            Body::from_value(json!({
                "billing": outcome,
                "amount_cents": amount,
                "currency": body.get("currency").cloned().unwrap_or(json!(null)),
                "base_ref": cell.cell.key.ref_key.get(),
            }))
            .map_err(|e| e.to_string())?,
        );
        match self.store.put_cell(status).await {
            Ok(WriteOutcome::AlreadyPresent) => {
                self.replays.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Ok(_) => {
                let counter = if outcome == "approved" {
                    &self.charged
                } else {
                    &self.declined
                };
                counter.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            // Something else billed this version differently: leave it to
            // a person, do not overwrite (cells never are).
            Err(Error::Conflict { key }) => {
                Err(format!("STATUS {key} already holds another outcome"))
            }
            Err(e) => Err(e.to_string()),
        }
    }
}
