//! `mezzanine status`: where the migration stands, on one screen.
//!
//! Every section is read on its own: a section whose store does not answer
//! says why (`{"error": "..."}` in JSON) and the others are still shown,
//! since the screen matters most when something is down. Only the mode
//! itself is required: without the control row there is nothing to show.
//!
//! The JSON keys are stable (documented in `docs/commands.md`): scripts
//! and dashboards read `mode`, `next_step.pass` and `next_step.gates`.
//!
//! One file per section with its reader: `backfill_section`,
//! `mirror_section`, `verify_section`, `storage` (nodes, triggers,
//! indexes); this file holds the screen, the mode and the next step.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::future::join_all;
use schemaless::mysql::{index, trigger};
use schemaless::MySqlStore;
use serde::Serialize;
use sqlx::PgPool;
use tripstore::gates::MigrationGate;
use tripstore::mode::{self, Check, Mode, ReadShare};

mod backfill_section;
mod mirror_section;
mod storage;
mod verify_section;

pub use backfill_section::{Backfill, BackfillPlan};
pub use mirror_section::{Mirror, MirrorWorker};
pub use storage::{IndexState, NodeState, TriggerLag};
pub use verify_section::{Coverage, Verify};

/// How long one storage node may take to answer its probe.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// What the status reads from.
pub struct Sources {
    /// The legacy database (the control tables live there).
    pub pool: PgPool,
    /// The Schemaless store.
    pub schemaless: MySqlStore,
    /// The legacy model, for coverage and capture's triggers; `None` when
    /// the config has no layout or the layout does not connect.
    pub legacy: Option<legacy::LegacyStore>,
    /// Why the legacy model is missing, when the config has a layout.
    pub legacy_error: Option<String>,
    /// The configuration (gates, capture, indexes).
    pub config: config::Config,
}

/// A section that could not be read says why; the rest of the screen
/// stands.
#[derive(Clone, Debug, Serialize)]
#[serde(untagged)]
pub enum Section<T> {
    /// Read.
    Ok(T),
    /// Not read, and why.
    Unavailable {
        /// The error.
        error: String,
    },
}

impl<T> Section<T> {
    fn of<E: std::fmt::Display>(result: Result<T, E>) -> Section<T> {
        match result {
            Ok(value) => Section::Ok(value),
            Err(e) => Section::Unavailable {
                error: e.to_string(),
            },
        }
    }

    /// The value, if it was read.
    pub fn get(&self) -> Option<&T> {
        match self {
            Section::Ok(value) => Some(value),
            Section::Unavailable { .. } => None,
        }
    }
}

/// The whole screen.
#[derive(Clone, Debug, Serialize)]
pub struct Status {
    /// When it was read, seconds since the epoch.
    pub generated_at: f64,
    /// The mode, since when, by whom.
    pub mode: ModeSection,
    /// The share of `shadow`'s reads Schemaless serves.
    pub reads: ReadsSection,
    /// The next step forward and its gates; `null` in `schemaless`.
    pub next_step: Section<Option<NextStep>>,
    /// The backfill's progress.
    pub backfill: Section<Backfill>,
    /// The outbox, capture queue and reverse mirror.
    pub mirror: Section<Mirror>,
    /// The verifier's figures over the gates' window.
    pub verify: Section<Verify>,
    /// Every storage node, as this process finds it now.
    pub nodes: Vec<NodeState>,
    /// Every trigger that saved a position, with its lag.
    pub triggers: Section<Vec<TriggerLag>>,
    /// Every configured index's versions, with their maintainers' lag.
    pub indexes: Section<Vec<IndexState>>,
    /// What facades (apps and workers) reported over the guard's window:
    /// how many, and their calls, failures and p99 per store.
    pub facades: Section<tripstore::report::Window>,
    /// The guards seen in the last hour: their state, breaches and last
    /// step back.
    pub guards: Section<Vec<crate::guard::GuardState>>,
    /// What the screen could not read at all (the layout not matching the
    /// tables, say): checks that need it say so too.
    pub problems: Vec<String>,
}

/// The mode.
#[derive(Clone, Debug, Serialize)]
pub struct ModeSection {
    /// The mode's name (`legacy` ... `schemaless`).
    pub mode: Mode,
    /// When it was set (UTC).
    pub since: String,
    /// Who set it.
    pub by: String,
    /// Whether that change was forced.
    pub forced: bool,
    /// The reason given.
    pub reason: Option<String>,
}

/// The read share.
#[derive(Clone, Debug, Serialize)]
pub struct ReadsSection {
    /// In basis points, for all columns and per column.
    pub share: ReadShare,
    /// The same in words (`"50% (NOTES: 100%)"`).
    pub describe: String,
    /// Whether it routes reads now (only in `shadow`).
    pub applies: bool,
}

/// The next step forward.
#[derive(Clone, Debug, Serialize)]
pub struct NextStep {
    /// The mode it enters.
    pub to: Mode,
    /// Whether `mode set` would take it now.
    pub pass: bool,
    /// Every condition, passed or not.
    pub gates: Vec<Check>,
}

fn now_secs() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Reads the whole screen. Fails only when the mode cannot be read.
pub async fn read(sources: &Sources) -> Result<Status, tripstore::Error> {
    let state = mode::read(&sources.pool).await?;
    let window = Duration::from_millis(sources.config.guard.window_ms);
    let (facades, guards) = tokio::join!(
        async {
            tripstore::report::ensure(&sources.pool).await?;
            tripstore::report::window(&sources.pool, window).await
        },
        crate::guard::states(&sources.pool),
    );
    let (next_step, backfill, mirror, verify, nodes, triggers, indexes) = tokio::join!(
        next_step(sources, state.mode),
        backfill_section::backfill(&sources.pool),
        mirror_section::mirror(sources),
        verify_section::verify(sources),
        storage::nodes(&sources.schemaless),
        storage::triggers(&sources.schemaless),
        storage::indexes(sources),
    );
    Ok(Status {
        generated_at: now_secs(),
        reads: ReadsSection {
            describe: state.reads.describe(),
            applies: state.mode == Mode::Shadow,
            share: state.reads,
        },
        mode: ModeSection {
            mode: state.mode,
            since: state.changed_at,
            by: state.changed_by,
            forced: state.forced,
            reason: state.reason,
        },
        next_step,
        backfill,
        mirror,
        verify,
        nodes,
        triggers,
        indexes,
        facades: Section::of(facades),
        guards: Section::of(guards),
        problems: sources.legacy_error.iter().cloned().collect(),
    })
}

async fn next_step(sources: &Sources, from: Mode) -> Section<Option<NextStep>> {
    let Some(to) = from.next() else {
        return Section::Ok(None);
    };
    let mut gate = MigrationGate::new(
        sources.pool.clone(),
        sources.schemaless.clone(),
        &sources.config,
    );
    if let Some(legacy) = &sources.legacy {
        gate = gate.with_legacy(legacy.clone());
    }
    Section::of(mode::evaluate(from, to, &gate).await.map(|plan| {
        Some(NextStep {
            to,
            pass: plan.passes(),
            gates: plan.checks,
        })
    }))
}
