//! Each running proxy's status, published in `mezzanine.proxies` of the
//! legacy database every [`EVERY`], for the dashboard (`mezzanine serve`),
//! which runs in another process, often on another machine, and may see
//! several proxies (one beside each app): it reads the rows instead of
//! asking each proxy's `--status-listen`, which it would have to be told.
//!
//! One row per proxy process: its name (host, process, listen address),
//! when it started, its last heartbeat, and its `/status` as JSON. A proxy
//! that stops cleanly removes its row; one killed leaves it, and readers
//! tell it by the heartbeat's age ([`LIVE`]). Rows silent for an hour are
//! deleted by the next proxy that starts.

use std::net::SocketAddr;
use std::time::Duration;

use serde::Serialize;
use sqlx::PgPool;

use crate::stats::Status;

/// How often a proxy writes its row.
pub const EVERY: Duration = Duration::from_secs(2);

/// A row whose heartbeat is younger than this is a live proxy.
pub const LIVE: Duration = Duration::from_secs(10);

/// The proxy's name in its row: host, process, and where apps connect.
pub fn name(listen: SocketAddr) -> String {
    format!("{}:{}:{listen}", host::name(), std::process::id())
}

/// Creates the table if it is missing (and the `mezzanine` schema), and
/// forgets rows silent for an hour.
pub async fn ensure(pool: &PgPool) -> Result<(), sqlx::Error> {
    sqlx::raw_sql(
        "/* mezzanine */ CREATE SCHEMA IF NOT EXISTS mezzanine;
         CREATE TABLE IF NOT EXISTS mezzanine.proxies (
             name text PRIMARY KEY,
             started_at timestamptz NOT NULL DEFAULT now(),
             heartbeat_at timestamptz NOT NULL DEFAULT now(),
             status jsonb NOT NULL);
         DELETE FROM mezzanine.proxies WHERE heartbeat_at < now() - interval '1 hour';",
    )
    .execute(pool)
    .await
    .map(|_| ())
}

/// Writes `status` as the row of `name`.
pub async fn publish(pool: &PgPool, name: &str, status: &Status) -> Result<(), sqlx::Error> {
    let status = serde_json::to_string(status).unwrap_or_else(|_| "{}".into());
    sqlx::query(
        "/* mezzanine */ INSERT INTO mezzanine.proxies (name, status) VALUES ($1, $2::jsonb)
         ON CONFLICT (name) DO UPDATE SET heartbeat_at = now(), status = EXCLUDED.status",
    )
    .bind(name)
    .bind(status)
    .execute(pool)
    .await
    .map(|_| ())
}

/// Removes the row of a proxy that stops cleanly.
pub async fn retire(pool: &PgPool, name: &str) {
    let _ = sqlx::query("/* mezzanine */ DELETE FROM mezzanine.proxies WHERE name = $1")
        .bind(name)
        .execute(pool)
        .await;
}

/// One proxy's row, as readers see it.
#[derive(Clone, Debug, Serialize)]
pub struct Reported {
    pub name: String,
    /// Seconds since the epoch.
    pub started_at: f64,
    /// Seconds since its last heartbeat.
    pub age_secs: f64,
    /// Its heartbeat is younger than [`LIVE`].
    pub live: bool,
    /// Its `/status` at that heartbeat.
    pub status: serde_json::Value,
}

/// Every proxy's row, live ones first, newest heartbeat first; none
/// before any proxy has run (no table).
pub async fn read(pool: &PgPool) -> Result<Vec<Reported>, sqlx::Error> {
    let exists: bool =
        sqlx::query_scalar("/* mezzanine */ SELECT to_regclass('mezzanine.proxies') IS NOT NULL")
            .fetch_one(pool)
            .await?;
    if !exists {
        return Ok(Vec::new());
    }
    let rows: Vec<(String, f64, f64, String)> = sqlx::query_as(
        "/* mezzanine */ SELECT name, extract(epoch FROM started_at)::float8,
                extract(epoch FROM now() - heartbeat_at)::float8, status::text
         FROM mezzanine.proxies ORDER BY heartbeat_at DESC, name",
    )
    .fetch_all(pool)
    .await?;
    let mut reported: Vec<Reported> = rows
        .into_iter()
        .map(|(name, started_at, age_secs, status)| Reported {
            name,
            started_at,
            age_secs,
            live: age_secs < LIVE.as_secs_f64(),
            // Written by `publish` from a `Status`; a row edited by hand
            // into something else is shown as it is.
            status: serde_json::from_str(&status).unwrap_or(serde_json::Value::String(status)),
        })
        .collect();
    reported.sort_by_key(|r| !r.live);
    Ok(reported)
}
