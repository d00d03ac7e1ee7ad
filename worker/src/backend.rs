//! What a worker serves: a cell store that can also say its mode and
//! whether it is ready. A worker in production serves a
//! [`tripstore::TripStore`], so the mode, mirroring, capture, sampling
//! and gates apply exactly as in a linked app.

use async_trait::async_trait;
use schemaless::CellStore;

use crate::api::{CheckOut, Ready};

/// A store a worker can serve.
#[async_trait]
pub trait Backend: CellStore + 'static {
    /// The mode calls are routed by (for `/v1/info` and `/readyz`).
    fn mode(&self) -> String;

    /// Whether every store the mode uses answers now.
    async fn ready(&self) -> Ready;
}

#[async_trait]
impl Backend for tripstore::TripStore {
    fn mode(&self) -> String {
        tripstore::TripStore::mode(self).to_string()
    }

    async fn ready(&self) -> Ready {
        let readiness = self.readiness().await;
        Ready {
            ready: readiness.ready,
            mode: readiness.mode.to_string(),
            checks: readiness
                .checks
                .into_iter()
                .map(|c| CheckOut {
                    store: c.store,
                    ok: c.ok,
                    detail: c.detail,
                })
                .collect(),
        }
    }
}

/// The in-memory model: for tests of the HTTP layer alone.
#[async_trait]
impl Backend for schemaless::MemoryStore {
    fn mode(&self) -> String {
        "memory".to_string()
    }

    async fn ready(&self) -> Ready {
        Ready {
            ready: true,
            mode: "memory".to_string(),
            checks: Vec::new(),
        }
    }
}
