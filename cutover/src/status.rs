//! `mezzanine status`: where the migration stands, on one screen.
//!
//! Every section is read on its own: a section whose store does not answer
//! says why (`{"error": "..."}` in JSON) and the others are still shown,
//! since the screen matters most when something is down. Only the mode
//! itself is required: without the control row there is nothing to show.
//!
//! The JSON keys are stable (documented in `docs/commands.md`): scripts
//! and dashboards read `mode`, `next_step.pass` and `next_step.gates`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::future::join_all;
use schemaless::mysql::{index, trigger};
use schemaless::MySqlStore;
use serde::Serialize;
use sqlx::PgPool;
use tripstore::gates::MigrationGate;
use tripstore::mode::{self, Check, Mode, ReadShare};

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

/// Both directions of the mirror.
#[derive(Clone, Debug, Serialize)]
pub struct Mirror {
    /// Entries waiting in the outbox.
    pub outbox_depth: u64,
    /// Age of the oldest, seconds.
    pub outbox_oldest_secs: Option<f64>,
    /// Parked outbox entries.
    pub outbox_parked: u64,
    /// Whether capture is enabled.
    pub capture_enabled: bool,
    /// Changes waiting in the capture queue.
    pub capture_depth: u64,
    /// Age of the oldest, seconds.
    pub capture_oldest_secs: Option<f64>,
    /// Parked captured changes.
    pub capture_parked: u64,
    /// Change-log cells the reverse mirror has not applied, all shards.
    pub reverse_lag_cells: u64,
    /// Shards with a reverse offset.
    pub reverse_shards: usize,
    /// Cells the reverse mirror parked.
    pub reverse_parked: u64,
    /// Why the reverse lag could not be measured.
    pub reverse_error: Option<String>,
    /// Relays and reverse mirrors that wrote a heartbeat within a minute.
    pub workers: Vec<MirrorWorker>,
    /// Distinct processes among them (`host:pid`): the facades and workers
    /// running the mirror.
    pub processes: usize,
}

/// A relay or reverse mirror.
#[derive(Clone, Debug, Serialize)]
pub struct MirrorWorker {
    /// `kind:host:pid:suffix`.
    pub name: String,
    /// `relay` or `reverse`.
    pub kind: String,
    /// Seconds since its heartbeat.
    pub silent_secs: f64,
    /// Cells a second over its last interval.
    pub rate: f64,
    /// Its last failure.
    pub last_error: Option<String>,
}

/// The verifier's figures.
#[derive(Clone, Debug, Serialize)]
pub struct Verify {
    /// Where the window starts (seconds since the epoch): the later of the
    /// mode's start and the backfill's last chunk.
    pub since: Option<f64>,
    /// Samples in the window.
    pub samples: u64,
    /// Mismatches in the window.
    pub mismatches: u64,
    /// mismatches / samples.
    pub mismatch_rate: f64,
    /// Its 95% upper bound.
    pub upper_bound: f64,
    /// Mismatches not resolved.
    pub open_mismatches: u64,
    /// Per layout column: rows verified since their last write.
    pub coverage: Vec<Coverage>,
}

/// One column's coverage.
#[derive(Clone, Debug, Serialize)]
pub struct Coverage {
    /// The column.
    pub column: String,
    /// Rows verified since their last write.
    pub verified: u64,
    /// Rows.
    pub rows: u64,
    /// verified / rows.
    pub share: f64,
}

/// A storage node.
#[derive(Clone, Debug, Serialize)]
pub struct NodeState {
    /// Its cluster.
    pub cluster: String,
    /// Its URL without password.
    pub node: String,
    /// `master` or `minion`, as this process's topology has it.
    pub role: &'static str,
    /// Whether it answered the probe.
    pub answers: bool,
    /// How long the probe took, milliseconds.
    pub probe_ms: Option<f64>,
    /// What failed.
    pub error: Option<String>,
}

/// A trigger's progress.
#[derive(Clone, Debug, Serialize)]
pub struct TriggerLag {
    /// Its name.
    pub name: String,
    /// Change-log cells not handled yet, all shards.
    pub lag_cells: u64,
    /// Parked cells.
    pub parked: u64,
    /// Runners holding shards.
    pub runners: usize,
    /// Shards no runner holds.
    pub unowned_shards: usize,
}

/// An index version.
#[derive(Clone, Debug, Serialize)]
pub struct IndexState {
    /// The index.
    pub name: String,
    /// The version.
    pub version: u32,
    /// `building`, `active` or `retired`.
    pub state: &'static str,
    /// Change-log cells its maintainer has not applied; `null` for a
    /// retired version.
    pub lag_cells: Option<u64>,
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
        backfill(&sources.pool),
        mirror(sources),
        verify(sources),
        nodes(&sources.schemaless),
        triggers(&sources.schemaless),
        indexes(sources),
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

async fn backfill(pool: &PgPool) -> Section<Backfill> {
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

async fn mirror(sources: &Sources) -> Section<Mirror> {
    let result = async {
        mirror::schema::ensure(&sources.pool).await?;
        mirror::status::read(&sources.pool, &sources.schemaless).await
    }
    .await;
    Section::of(result.map(|s| {
        let live: Vec<MirrorWorker> = s
            .workers
            .iter()
            .filter(|w| w.silent_secs < 60.0)
            .map(|w| MirrorWorker {
                name: w.name.clone(),
                kind: w.kind.clone(),
                silent_secs: w.silent_secs,
                rate: w.rate,
                last_error: w.last_error.clone(),
            })
            .collect();
        // `kind:host:pid:suffix`: one process runs one relay and one
        // reverse mirror at most.
        let processes: std::collections::BTreeSet<String> = live
            .iter()
            .map(|w| {
                w.name
                    .split(':')
                    .skip(1)
                    .take(2)
                    .collect::<Vec<_>>()
                    .join(":")
            })
            .collect();
        Mirror {
            outbox_depth: s.outbox_depth,
            outbox_oldest_secs: s.outbox_oldest_secs,
            outbox_parked: s.outbox_parked,
            capture_enabled: sources.config.capture.enabled,
            capture_depth: s.capture.depth,
            capture_oldest_secs: s.capture.oldest_secs,
            capture_parked: s.capture.parked,
            reverse_lag_cells: s.reverse_lag(),
            reverse_shards: s.reverse.len(),
            reverse_parked: s.reverse_parked,
            reverse_error: s.reverse_error.clone(),
            processes: processes.len(),
            workers: live,
        }
    }))
}

async fn verify(sources: &Sources) -> Section<Verify> {
    let pool = &sources.pool;
    let result = async {
        verifier::store::ensure(pool).await?;
        backfill::plan::ensure_tables(pool)
            .await
            .map_err(|e| tripstore::Error::Gate(e.to_string()))?;
        let since = tripstore::gates::verification_window(pool).await?;
        let report = verifier::report::read(pool, sources.legacy.as_ref(), since).await?;
        Ok::<_, tripstore::Error>(Verify {
            since,
            samples: report.totals.samples,
            mismatches: report.totals.mismatches,
            mismatch_rate: report.mismatch_rate,
            upper_bound: report.upper_bound,
            open_mismatches: report.open_mismatches,
            coverage: report
                .coverage
                .iter()
                .map(|c| Coverage {
                    column: c.column.clone(),
                    verified: c.verified,
                    rows: c.rows,
                    share: c.share(),
                })
                .collect(),
        })
    }
    .await;
    Section::of(result)
}

async fn nodes(store: &MySqlStore) -> Vec<NodeState> {
    let topology = store.topology();
    let mut probes = Vec::new();
    for cluster in &topology.clusters {
        let master = cluster.master();
        for node in &cluster.members {
            let role = if std::sync::Arc::ptr_eq(node, &master) {
                "master"
            } else {
                "minion"
            };
            let cluster = cluster.name.clone();
            let node = node.clone();
            probes.push(async move {
                let answer = tokio::time::timeout(PROBE_TIMEOUT, node.probe()).await;
                let (answers, probe_ms, error) = match answer {
                    Ok(Ok(took)) => (true, Some(took.as_secs_f64() * 1000.0), None),
                    Ok(Err(e)) => (false, None, Some(e.to_string())),
                    Err(_) => (
                        false,
                        None,
                        Some(format!("no answer within {PROBE_TIMEOUT:?}")),
                    ),
                };
                NodeState {
                    cluster,
                    node: node.label.clone(),
                    role,
                    answers,
                    probe_ms,
                    error,
                }
            });
        }
    }
    join_all(probes).await
}

async fn triggers(store: &MySqlStore) -> Section<Vec<TriggerLag>> {
    let result = async {
        let mut out = Vec::new();
        for name in trigger::names(store).await? {
            let shards = trigger::status(store, &name).await?;
            let runners: std::collections::BTreeSet<&str> =
                shards.iter().filter_map(|s| s.owner.as_deref()).collect();
            out.push(TriggerLag {
                lag_cells: shards.iter().map(|s| s.lag).sum(),
                parked: shards.iter().map(|s| s.parked).sum(),
                runners: runners.len(),
                unowned_shards: shards.iter().filter(|s| s.owner.is_none()).count(),
                name,
            });
        }
        Ok::<_, schemaless::Error>(out)
    }
    .await;
    Section::of(result)
}

async fn indexes(sources: &Sources) -> Section<Vec<IndexState>> {
    let store = &sources.schemaless;
    let result = async {
        let mut out = Vec::new();
        for spec in &sources.config.indexes {
            for (version, state) in index::versions(store, &spec.name).await? {
                let lag_cells = match state {
                    index::VersionState::Retired => None,
                    _ => {
                        Some(trigger::lag(store, &index::trigger_name(&spec.name, version)).await?)
                    }
                };
                out.push(IndexState {
                    name: spec.name.clone(),
                    version,
                    state: state.as_str(),
                    lag_cells,
                });
            }
        }
        Ok::<_, schemaless::Error>(out)
    }
    .await;
    Section::of(result)
}
