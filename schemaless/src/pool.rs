//! How every pool of the workspace checks a connection before lending it,
//! whichever database it is for.
//!
//! sqlx pings every idle connection before handing it out: a round trip
//! for each statement of the hot paths, measured at a third of a point
//! read's cost. A connection back from work within the last second is as
//! alive as the ping would say; one idle for longer is pinged, and a dead
//! one replaced, as sqlx would. The Schemaless nodes' pools and the legacy
//! database's pool both use it.

use std::time::Duration;

use sqlx::pool::PoolOptions;

/// How long a pooled connection may sit idle before it is pinged on its
/// way out of the pool.
pub const PING_IDLE_AFTER: Duration = Duration::from_secs(1);

/// `options` with the ping on acquire limited to connections idle for
/// [`PING_IDLE_AFTER`] or longer.
pub fn ping_if_idle<DB: sqlx::Database>(options: PoolOptions<DB>) -> PoolOptions<DB> {
    options
        .test_before_acquire(false)
        .before_acquire(|conn, meta| {
            Box::pin(async move {
                if meta.idle_for >= PING_IDLE_AFTER {
                    sqlx::Connection::ping(conn).await?;
                }
                Ok(true)
            })
        })
}
