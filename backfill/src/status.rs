//! The whole plan's state, from any machine, and the gate it sets.

use sqlx::{PgPool, Row};

use crate::error::Error;
use crate::plan::Plan;

/// The plan and its chunks' states.
#[derive(Clone, Debug, Default)]
pub struct PlanStatus {
    /// The plan, if there is one.
    pub plan: Option<Plan>,
    /// Chunks not started.
    pub pending: u64,
    /// Chunks being copied.
    pub running: u64,
    /// Chunks copied.
    pub done: u64,
    /// Chunks that could not be copied.
    pub failed: u64,
    /// Parent rows in done chunks.
    pub parents_done: u64,
    /// Cells of done chunks.
    pub cells_done: u64,
    /// Of those, cells that were new to Schemaless.
    pub cells_written: u64,
    /// Cells per second over the chunks finished in the last minute.
    pub recent_cells_per_sec: f64,
    /// Failed chunks, the first 20 by id range.
    pub failures: Vec<ChunkInfo>,
    /// Running chunks.
    pub in_progress: Vec<ChunkInfo>,
}

/// One chunk, for the status.
#[derive(Clone, Debug)]
pub struct ChunkInfo {
    /// The chunk's id.
    pub id: i64,
    /// Its first parent id.
    pub start_id: i64,
    /// One past its last parent id.
    pub end_id: i64,
    /// Who holds (or last held) it.
    pub owner: Option<String>,
    /// Seconds since its owner's last heartbeat.
    pub silent_secs: Option<f64>,
    /// Times it was claimed.
    pub attempts: i32,
    /// Why it failed.
    pub error: Option<String>,
}

impl PlanStatus {
    /// Chunks in the plan.
    pub fn total(&self) -> u64 {
        self.pending + self.running + self.done + self.failed
    }

    /// Whether every chunk is done.
    pub fn complete(&self) -> bool {
        self.plan.is_some() && self.done == self.total()
    }
}

/// The state of the full backfill's plan ([`crate::plan::MAIN`]).
pub async fn read(pool: &PgPool) -> Result<PlanStatus, Error> {
    read_plan(pool, crate::plan::MAIN).await
}

/// The state of every plan, by name.
pub async fn all(pool: &PgPool) -> Result<Vec<PlanStatus>, Error> {
    let mut out = Vec::new();
    for plan in crate::plan::list(pool).await? {
        out.push(read_plan(pool, &plan.name).await?);
    }
    Ok(out)
}

/// The state of plan `name` (without a plan of that name: no plan and no
/// chunks).
pub async fn read_plan(pool: &PgPool, name: &str) -> Result<PlanStatus, Error> {
    let plan = crate::plan::read_plan(pool, name).await?;
    let context = "reading the backfill's state";
    let row = sqlx::query(
        "/* mezzanine */ SELECT count(*) FILTER (WHERE state = 'pending'),
                count(*) FILTER (WHERE state = 'running'),
                count(*) FILTER (WHERE state = 'done'),
                count(*) FILTER (WHERE state = 'failed'),
                coalesce(sum(parents) FILTER (WHERE state = 'done'), 0)::int8,
                coalesce(sum(cells) FILTER (WHERE state = 'done'), 0)::int8,
                coalesce(sum(written) FILTER (WHERE state = 'done'), 0)::int8,
                coalesce(sum(cells) FILTER (WHERE state = 'done' AND done_at > now() - interval '1 minute'), 0)::int8,
                extract(epoch FROM now() - min(done_at) FILTER (WHERE state = 'done' AND done_at > now() - interval '1 minute'))::float8
         FROM mezzanine.backfill_chunks WHERE plan = $1",
    )
    .bind(name)
    .fetch_one(pool)
    .await
    .map_err(Error::postgres(context))?;
    let n = |i: usize| -> Result<u64, Error> {
        row.try_get::<i64, _>(i)
            .map(|v| v.max(0) as u64)
            .map_err(Error::postgres(context))
    };
    let recent = n(7)? as f64;
    let window: Option<f64> = row.try_get(8).map_err(Error::postgres(context))?;
    let mut status = PlanStatus {
        plan,
        pending: n(0)?,
        running: n(1)?,
        done: n(2)?,
        failed: n(3)?,
        parents_done: n(4)?,
        cells_done: n(5)?,
        cells_written: n(6)?,
        recent_cells_per_sec: window.filter(|w| *w > 0.5).map_or(0.0, |w| recent / w),
        ..PlanStatus::default()
    };
    let rows = sqlx::query(
        "/* mezzanine */ (SELECT id, start_id, end_id, owner, extract(epoch FROM now() - heartbeat_at)::float8, attempts, error, state
          FROM mezzanine.backfill_chunks WHERE plan = $1 AND state = 'failed' ORDER BY start_id LIMIT 20)
         UNION ALL
         (SELECT id, start_id, end_id, owner, extract(epoch FROM now() - heartbeat_at)::float8, attempts, error, state
          FROM mezzanine.backfill_chunks WHERE plan = $1 AND state = 'running' ORDER BY start_id LIMIT 100)",
    )
    .bind(name)
    .fetch_all(pool)
    .await
    .map_err(Error::postgres(context))?;
    for row in rows {
        let get = |e| Error::Postgres {
            context: context.into(),
            source: e,
        };
        let info = ChunkInfo {
            id: row.try_get(0).map_err(get)?,
            start_id: row.try_get(1).map_err(get)?,
            end_id: row.try_get(2).map_err(get)?,
            owner: row.try_get(3).map_err(get)?,
            silent_secs: row.try_get(4).map_err(get)?,
            attempts: row.try_get(5).map_err(get)?,
            error: row.try_get(6).map_err(get)?,
        };
        let state: String = row.try_get(7).map_err(get)?;
        if state == "failed" {
            status.failures.push(info);
        } else {
            status.in_progress.push(info);
        }
    }
    Ok(status)
}

/// Why `mode set shadow` must wait for the backfills, if it must: no full
/// plan ([`crate::plan::Plan::is_full`]), a plan with chunks not done or
/// failed (every plan, full or partial, must be complete), or a full plan
/// whose range was set before `mirror_since` (epoch seconds: when the
/// mode entered `mirror`, plus the time facades take to see it; rows
/// created in between were neither mirrored nor planned).
pub async fn refusal(pool: &PgPool, mirror_since: Option<f64>) -> Result<Option<String>, Error> {
    let plans = all(pool).await?;
    let full: Vec<&PlanStatus> = plans
        .iter()
        .filter(|s| s.plan.as_ref().is_some_and(|p| p.is_full()))
        .collect();
    if full.is_empty() {
        return Ok(Some(
            "the history is not backfilled: there is no backfill plan of every column and parent (`mezzanine backfill plan`, then `backfill run`)".into(),
        ));
    }
    for status in &plans {
        let name = status.plan.as_ref().map_or("?", |p| p.name.as_str());
        if status.failed > 0 {
            return Ok(Some(format!(
                "{} chunks of backfill plan {name} failed (`mezzanine backfill status --plan {name}` shows why; fix the data, then `backfill retry --plan {name}` and `backfill run --plan {name}`)",
                status.failed
            )));
        }
        if status.pending + status.running > 0 {
            return Ok(Some(format!(
                "backfill plan {name} is not complete: {} of {} chunks done (`mezzanine backfill run --plan {name}`)",
                status.done,
                status.total()
            )));
        }
    }
    if let Some(since) = mirror_since {
        let after = full
            .iter()
            .find_map(|s| s.plan.as_ref())
            .map(|p| p.name.clone());
        let (current, since_text): (bool, String) = sqlx::query_as(
            "/* mezzanine */ SELECT coalesce(bool_or(extended_at > to_timestamp($1)), false),
                    to_char(to_timestamp($1) AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')
             FROM mezzanine.backfill_plan
             WHERE columns IS NULL AND predicate IS NULL AND NOT ids_fixed",
        )
        .bind(since)
        .fetch_one(pool)
        .await
        .map_err(Error::postgres("reading the backfill plans"))?;
        if !current {
            let plan = full
                .iter()
                .find_map(|s| s.plan.as_ref())
                .expect("a full plan");
            return Ok(Some(format!(
                "the backfill plan {}'s range was set at {}, before every facade had seen the mode mirror (at {since_text}: when it was entered, and `legacy.mode_poll_ms` after): rows created in between may be in no chunk; run `mezzanine backfill plan --extend{}` and `backfill run`",
                plan.name,
                plan.extended_at,
                after
                    .filter(|n| n != crate::plan::MAIN)
                    .map(|n| format!(" --name {n}"))
                    .unwrap_or_default()
            )));
        }
    }
    Ok(None)
}

/// When the backfill's last chunk finished (seconds since the epoch),
/// over every plan; None before any chunk has. The gates count samples
/// from then on: samples before it find rows not copied yet.
pub async fn last_done_at(pool: &PgPool) -> Result<Option<f64>, Error> {
    sqlx::query_scalar(
        "/* mezzanine */ SELECT extract(epoch FROM max(done_at))::float8 FROM mezzanine.backfill_chunks",
    )
    .fetch_one(pool)
    .await
    .map_err(Error::postgres("reading when the backfill's last chunk finished"))
}
