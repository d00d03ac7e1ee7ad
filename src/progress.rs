//! Progress of long work (the backfill, the full diff, seeding, filling
//! the UUID column): an `indicatif` bar on a terminal, a plain line every
//! few seconds otherwise (a log, CI), so a run that is piped still shows it
//! is alive.

use std::time::{Duration, Instant};

use backfill::Progress;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A progress display: `position/total` plus a message the caller words.
pub(crate) struct Bar {
    /// The bar, on a terminal; `None` prints plain lines.
    bar: Option<ProgressBar>,
    /// When the last plain line went out.
    printed: Option<Instant>,
    every: Duration,
}

impl Bar {
    /// A bar on stderr, or plain lines every five seconds when `plain`
    /// (asked for, or stderr is not a terminal).
    pub(crate) fn new(plain: bool) -> Bar {
        let plain = plain || !std::io::IsTerminal::is_terminal(&std::io::stderr());
        let bar = (!plain).then(|| {
            let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr());
            bar.set_style(
                ProgressStyle::with_template("[{bar:30}] {pos}/{len} {msg}")
                    .expect("the template is valid")
                    .progress_chars("#>-"),
            );
            bar
        });
        Bar {
            bar,
            printed: None,
            every: Duration::from_secs(5),
        }
    }

    /// How often a caller need update: a terminal bar redraws smoothly, a
    /// plain line goes out every few seconds.
    pub(crate) fn tick(&self) -> Duration {
        match self.bar {
            Some(_) => Duration::from_millis(250),
            None => self.every,
        }
    }

    /// Shows `position` of `total` with `message`.
    pub(crate) fn show(&mut self, position: u64, total: u64, message: String) {
        match &self.bar {
            Some(bar) => {
                bar.set_length(total);
                bar.set_position(position.min(total));
                bar.set_message(message);
            }
            None if self.printed.is_none_or(|at| at.elapsed() >= self.every) => {
                self.printed = Some(Instant::now());
                eprintln!("{position}/{total} {message}");
            }
            None => {}
        }
    }

    /// Prints a line above the bar without breaking it.
    pub(crate) fn println(&self, line: &str) {
        match &self.bar {
            Some(bar) => bar.suspend(|| eprintln!("{line}")),
            None => eprintln!("{line}"),
        }
    }

    /// Leaves the last state on screen and moves below it.
    pub(crate) fn finish(self) {
        if let Some(bar) = self.bar {
            bar.abandon();
        }
    }
}

/// Draws progress until the run ends; returns whether the plan finished.
pub(crate) async fn show(
    pool: &sqlx::PgPool,
    plan: &str,
    progress: &Progress,
    plain: bool,
    mut task: tokio::task::JoinHandle<Result<bool, backfill::Error>>,
) -> anyhow::Result<bool> {
    let started = Instant::now();
    let mut bar = Bar::new(plain);
    let mut tick = tokio::time::interval(bar.tick().min(Duration::from_secs(1)));
    tick.tick().await;
    let (mut total, mut done_at_start) = (0u64, None);
    let mut last_read = Instant::now() - Duration::from_secs(10);
    let mut done = 0u64;
    loop {
        tokio::select! {
            result = &mut task => {
                bar.finish();
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
        bar.show(
            done,
            total,
            format!(
                "chunks, {rows} rows ({:.0}/s), {cells} cells ({:.0}/s), ETA {eta}{state}",
                rows as f64 / secs,
                cells as f64 / secs,
            ),
        );
    }
}
