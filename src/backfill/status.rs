//! `backfill status`: a plan's status as text for people and as JSON
//! (the full backfill's figures at the top level, every plan in `plans`).

pub(super) fn print_status(status: &backfill::PlanStatus) {
    let Some(plan) = &status.plan else {
        println!("no backfill plan (`mezzanine backfill plan`)");
        return;
    };
    println!(
        "plan {}: {} of {} ids {}..{} in {} chunks of {}, range set {}{}",
        plan.name,
        plan.scope(),
        plan.table,
        plan.low_id,
        plan.high_id,
        status.total(),
        plan.chunk_size,
        plan.extended_at,
        if plan.paused { ", PAUSED" } else { "" }
    );
    println!(
        "chunks: {} done, {} running, {} pending, {} failed{}",
        status.done,
        status.running,
        status.pending,
        status.failed,
        if status.complete() { " (complete)" } else { "" }
    );
    println!(
        "copied: {} parents, {} cells ({} new to Schemaless); {:.0} cells/s over the last minute",
        status.parents_done, status.cells_done, status.cells_written, status.recent_cells_per_sec
    );
    for c in &status.in_progress {
        println!(
            "  running chunk {} (ids {}..{}) by {}, heartbeat {:.1}s ago, attempt {}",
            c.id,
            c.start_id,
            c.end_id,
            c.owner.as_deref().unwrap_or("?"),
            c.silent_secs.unwrap_or(0.0),
            c.attempts
        );
    }
    for c in &status.failures {
        println!(
            "  FAILED chunk {} (ids {}..{}): {}",
            c.id,
            c.start_id,
            c.end_id,
            c.error.as_deref().unwrap_or("?")
        );
    }
}

/// `backfill status --json`: the main plan's figures at the top level, as
/// before plans had names, and every plan in `plans`.
#[derive(serde::Serialize)]
pub(super) struct StatusJson<'a> {
    #[serde(flatten)]
    pub(super) main: PlanJson<'a>,
    pub(super) plans: Vec<PlanJson<'a>>,
}

/// One plan's figures.
#[derive(serde::Serialize)]
pub(super) struct PlanJson<'a> {
    name: Option<&'a str>,
    scope: Option<String>,
    columns: Option<&'a [String]>,
    predicate: Option<&'a str>,
    planned: bool,
    complete: bool,
    paused: bool,
    chunks: u64,
    pending: u64,
    running: u64,
    done: u64,
    failed: u64,
    parents_done: u64,
    cells_done: u64,
    cells_written: u64,
    recent_cells_per_sec: f64,
    failures: Vec<FailedChunkJson<'a>>,
}

#[derive(serde::Serialize)]
struct FailedChunkJson<'a> {
    id: i64,
    start_id: i64,
    end_id: i64,
    error: Option<&'a str>,
}

impl<'a> PlanJson<'a> {
    pub(super) fn of(status: &'a backfill::PlanStatus) -> PlanJson<'a> {
        let plan = status.plan.as_ref();
        PlanJson {
            name: plan.map(|p| p.name.as_str()),
            scope: plan.map(|p| p.scope()),
            columns: plan.and_then(|p| p.columns.as_deref()),
            predicate: plan.and_then(|p| p.predicate.as_deref()),
            planned: plan.is_some(),
            complete: status.complete(),
            paused: plan.is_some_and(|p| p.paused),
            chunks: status.total(),
            pending: status.pending,
            running: status.running,
            done: status.done,
            failed: status.failed,
            parents_done: status.parents_done,
            cells_done: status.cells_done,
            cells_written: status.cells_written,
            recent_cells_per_sec: status.recent_cells_per_sec,
            failures: status
                .failures
                .iter()
                .map(|c| FailedChunkJson {
                    id: c.id,
                    start_id: c.start_id,
                    end_id: c.end_id,
                    error: c.error.as_deref(),
                })
                .collect(),
        }
    }
}
