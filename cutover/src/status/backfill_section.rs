//! The backfill's section: every plan's progress and its ETA.

use super::*;

/// The backfill.
#[derive(Clone, Debug, Serialize)]
pub struct Backfill {
    /// Whether there is a plan.
    pub planned: bool,
    /// Chunks in all.
    pub chunks: u64,
    /// Chunks copied.
    pub done: u64,
    /// Chunks being copied.
    pub running: u64,
    /// Chunks not started.
    pub pending: u64,
    /// Chunks that failed.
    pub failed: u64,
    /// Parent rows copied.
    pub parents_done: u64,
    /// Cells copied.
    pub cells_done: u64,
    /// Cells a second over the last minute.
    pub cells_per_sec: f64,
    /// Seconds to go at that rate (the chunks left times the mean cells
    /// of a done chunk); `null` when nothing is moving.
    pub eta_secs: Option<f64>,
    /// Every chunk done.
    pub complete: bool,
    /// Every plan, the full one (`main`) and partial ones.
    pub plans: Vec<BackfillPlan>,
}

/// One backfill plan, in short.
#[derive(Clone, Debug, Serialize)]
pub struct BackfillPlan {
    /// Its name.
    pub name: String,
    /// What it covers, in words.
    pub scope: String,
    /// Chunks in all.
    pub chunks: u64,
    /// Chunks copied.
    pub done: u64,
    /// Chunks that failed.
    pub failed: u64,
    /// Every chunk done.
    pub complete: bool,
}

pub(super) async fn backfill(pool: &PgPool) -> Section<Backfill> {
    let result = async {
        backfill::plan::ensure_tables(pool).await?;
        backfill::status::all(pool).await
    }
    .await;
    Section::of(result.map(|all| {
        // The full backfill's figures; without its plan, none.
        let s = all
            .iter()
            .find(|p| {
                p.plan
                    .as_ref()
                    .is_some_and(|p| p.name == backfill::plan::MAIN)
            })
            .cloned()
            .unwrap_or_default();
        let left = s.pending + s.running;
        let per_chunk = (s.done > 0).then(|| s.cells_done as f64 / s.done as f64);
        let eta_secs = match per_chunk {
            Some(per_chunk) if left > 0 && s.recent_cells_per_sec > 0.0 => {
                Some(left as f64 * per_chunk / s.recent_cells_per_sec)
            }
            _ if left == 0 && s.plan.is_some() => Some(0.0),
            _ => None,
        };
        Backfill {
            planned: s.plan.is_some(),
            chunks: s.total(),
            done: s.done,
            running: s.running,
            pending: s.pending,
            failed: s.failed,
            parents_done: s.parents_done,
            cells_done: s.cells_done,
            cells_per_sec: s.recent_cells_per_sec,
            eta_secs,
            complete: s.complete(),
            plans: all
                .iter()
                .filter_map(|p| {
                    let plan = p.plan.as_ref()?;
                    Some(BackfillPlan {
                        name: plan.name.clone(),
                        scope: plan.scope(),
                        chunks: p.total(),
                        done: p.done,
                        failed: p.failed,
                        complete: p.complete(),
                    })
                })
                .collect(),
        }
    }))
}
