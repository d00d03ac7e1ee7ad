//! Shards that move while the store works: a write that meets a move's
//! fence waits for it, a call that meets the old copy follows the new
//! placement (see [`crate::mysql::moves`]).
//!
//! The placements are re-read at once when that happens, not at the next
//! maintenance tick: a fence is up for well under a second, and a writer
//! should land on the new home as soon as it is recorded.

use std::time::{Duration, Instant};

use super::MySqlStore;
use crate::error::Error;
use crate::mysql::topology::placement;

/// How long a write waits for a moving shard before it fails (with a
/// retryable error). A move's fence lifts itself after its deadline (10
/// seconds by default) if the mover dies under it.
pub(super) const MOVE_WAIT: Duration = Duration::from_secs(30);

impl MySqlStore {
    /// After `error` from a call to `shards` on `clusters[cluster]`:
    /// whether to try the call again. It is, if the error says a shard
    /// moved or is moving and the placements, read again now, put one of
    /// them elsewhere; or (for a fence, while `waited` is short of
    /// [`MOVE_WAIT`]) after a short wait for the move to finish.
    pub(super) async fn follows_move(
        &self,
        error: &Error,
        shards: &[u32],
        cluster: usize,
        waited: Instant,
    ) -> bool {
        if !error.is_moving() && !error.is_missing_table() {
            return false;
        }
        let topology = &self.inner.topology;
        placement::refresh(topology).await;
        if shards.iter().any(|&shard| {
            topology
                .cluster_index(shard)
                .is_ok_and(|now| now != cluster)
        }) {
            metrics::counter!("mezzanine_schemaless_moves_followed_total").increment(1);
            return true;
        }
        if !error.is_moving() || waited.elapsed() >= MOVE_WAIT {
            return false;
        }
        metrics::counter!("mezzanine_schemaless_fence_waits_total").increment(1);
        tokio::time::sleep(Duration::from_millis(10)).await;
        true
    }
}
