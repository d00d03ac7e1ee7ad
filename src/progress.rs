//! The progress line of long copies (the backfill, the demo's backfill):
//! a bar on a terminal, a line every few seconds otherwise.

use std::io::Write;
use std::time::{Duration, Instant};

use backfill::Progress;

/// Draws progress until the run ends; returns whether the plan finished.
pub(crate) async fn show(
    pool: &sqlx::PgPool,
    plan: &str,
    progress: &Progress,
    plain: bool,
    mut task: tokio::task::JoinHandle<Result<bool, backfill::Error>>,
) -> anyhow::Result<bool> {
    let started = Instant::now();
    let every = if plain {
        Duration::from_secs(5)
    } else {
        Duration::from_millis(250)
    };
    let mut tick = tokio::time::interval(every);
    tick.tick().await;
    let (mut total, mut done_at_start) = (0u64, None);
    let mut last_read = Instant::now() - Duration::from_secs(10);
    let mut done = 0u64;
    loop {
        tokio::select! {
            result = &mut task => {
                if !plain {
                    eprintln!();
                }
                return Ok(result??);
            }
            _ = tick.tick() => {}
        }
        if last_read.elapsed() >= Duration::from_secs(1) {
            if let Ok(status) = backfill::status::read_plan(pool, plan).await {
                total = status.total();
                done = status.done + status.failed;
                done_at_start.get_or_insert(done);
            }
            last_read = Instant::now();
        }
        let secs = started.elapsed().as_secs_f64().max(1e-3);
        let rows = Progress::get(&progress.rows);
        let cells = Progress::get(&progress.cells);
        let mine = done.saturating_sub(done_at_start.unwrap_or(done));
        let eta = if mine > 0 {
            let per_chunk = secs / mine as f64;
            crate::clock::eta(total.saturating_sub(done) as f64 * per_chunk)
        } else {
            "--".into()
        };
        let state = if progress.paused.load(std::sync::atomic::Ordering::Relaxed) {
            " PAUSED"
        } else if progress.lagging.load(std::sync::atomic::Ordering::Relaxed) {
            " WAITING FOR REPLICATION"
        } else {
            ""
        };
        let line = format!(
            "{done}/{total} chunks, {rows} rows ({:.0}/s), {cells} cells ({:.0}/s), ETA {eta}{state}",
            rows as f64 / secs,
            cells as f64 / secs,
        );
        if plain {
            eprintln!("{line}");
        } else {
            let width = 30usize;
            let filled = if total == 0 {
                width
            } else {
                (done as usize * width / total as usize).min(width)
            };
            eprint!(
                "\r[{}{}] {line}\x1b[K",
                "#".repeat(filled),
                "-".repeat(width - filled)
            );
            let _ = std::io::stderr().flush();
        }
    }
}
