//! The guard: steps the cutover back, never forward, when the new store
//! misbehaves.
//!
//! Every `guard.check_ms` the guard reads, over the sliding window of
//! `guard.window_ms`, what facades reported ([`tripstore::report`]): the
//! error rate and p99 latency of their Schemaless calls, and the
//! storage-node breakers open in their latest report; and from the shared
//! state: mismatches opened in the window, and the age of the oldest
//! outbox entry and captured change. A threshold of `[guard]` breached
//! without a break for `guard.for_ms` makes it act:
//!
//! | mode | the guard |
//! |---|---|
//! | `shadow`, some reads on Schemaless | sets the read share to 0%: every read back on PostgreSQL |
//! | `primary` | steps back to `shadow`: writes land in PostgreSQL first again |
//! | `legacy`, `mirror`, `shadow` at 0% | nothing to undo: PostgreSQL serves everything the app sees |
//! | `schemaless` | nothing: PostgreSQL is no longer kept in step, so no step back is safe without a person |
//!
//! Each action is a change of the mode or the share like any other,
//! recorded in `mezzanine.mode_history` by `guard@host` with the cause as
//! its reason. After acting, the guard waits one window before it judges
//! again, so that figures from before its action do not make it step back
//! twice. Its own state (watching, the breaches it sees, its last action)
//! is kept in `mezzanine.guard` for `status`, and in its metrics.
//!
//! The guard is a library type, run by `mezzanine guard` or inside an app
//! ([`Guard::run`]). Several guards may run: each action is a transaction
//! on the mode row, and a second guard finds nothing left to lower.

use std::time::{Duration, Instant};

use schemaless::MySqlStore;
use serde::Serialize;
use sqlx::{PgPool, Row};
use tokio_util::sync::CancellationToken;
use tripstore::gates::MigrationGate;
use tripstore::mode::{self, Mode, ModeRequest, ReadsRequest};
use tripstore::report::{self, Served};

/// A threshold breached now.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Breach {
    /// A stable name: `error_rate`, `p99`, `new_mismatches`,
    /// `outbox_lag`, `capture_lag`, `breakers`.
    pub cause: &'static str,
    /// The figure and the threshold, in words.
    pub why: String,
}

/// What the guard sees at one check.
#[derive(Clone, Debug, Serialize)]
pub struct Observation {
    /// The facades' reports over the window.
    pub window: report::Window,
    /// Mismatches opened or reopened within the window.
    pub new_mismatches: u64,
    /// Age of the oldest outbox entry, ms.
    pub outbox_lag_ms: f64,
    /// Age of the oldest captured change, ms.
    pub capture_lag_ms: f64,
    /// The thresholds breached.
    pub breaches: Vec<Breach>,
}

/// What the guard did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum Action {
    /// Lowered the read share of `shadow` to 0%.
    ReadsToZero,
    /// Stepped the mode back.
    StepBack {
        /// From.
        from: Mode,
        /// To.
        to: Mode,
    },
}

impl std::fmt::Display for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Action::ReadsToZero => f.write_str("read share of shadow set to 0%"),
            Action::StepBack { from, to } => write!(f, "mode stepped back {from} -> {to}"),
        }
    }
}

/// The guard.
pub struct Guard {
    pool: PgPool,
    schemaless: MySqlStore,
    config: config::Config,
    /// `guard@host:pid`, in the history.
    name: String,
}

impl Guard {
    /// A guard over the legacy database `pool` and `schemaless`, with the
    /// thresholds of `config.guard`.
    pub fn new(pool: PgPool, schemaless: MySqlStore, config: &config::Config) -> Guard {
        let name = format!("guard@{}:{}", host::name(), std::process::id());
        Guard {
            pool,
            schemaless,
            config: config.clone(),
            name,
        }
    }

    /// Who the guard is in the history.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Creates the tables the guard reads and writes.
    pub async fn ensure(&self) -> Result<(), tripstore::Error> {
        mode::ensure_control(&self.pool).await?;
        report::ensure(&self.pool).await?;
        mirror::schema::ensure(&self.pool).await?;
        verifier::store::ensure(&self.pool).await?;
        ensure(&self.pool).await
    }

    /// Reads the window and judges it against the thresholds.
    pub async fn observe(&self) -> Result<Observation, tripstore::Error> {
        let settings = &self.config.guard;
        let span = Duration::from_millis(settings.window_ms);
        let window = report::window(&self.pool, span).await?;
        let new_mismatches = verifier::store::open_seen_within(&self.pool, span).await?;
        let (_, outbox_oldest, _) = mirror::status::outbox(&self.pool).await?;
        let capture_oldest = if self.config.capture.enabled {
            mirror::capture::status::queue(&self.pool)
                .await?
                .oldest_secs
        } else {
            None
        };
        let mut observation = Observation {
            window,
            new_mismatches: new_mismatches.max(0) as u64,
            outbox_lag_ms: outbox_oldest.unwrap_or(0.0) * 1000.0,
            capture_lag_ms: capture_oldest.unwrap_or(0.0) * 1000.0,
            breaches: Vec::new(),
        };
        observation.breaches = judge(&observation, settings);
        Ok(observation)
    }

    /// Takes the step back the mode allows, if any, for `breaches`.
    pub async fn act(&self, breaches: &[Breach]) -> Result<Option<Action>, tripstore::Error> {
        let state = mode::read(&self.pool).await?;
        let reason = format!(
            "guard: {}",
            breaches
                .iter()
                .map(|b| b.why.as_str())
                .collect::<Vec<_>>()
                .join("; ")
        );
        let action = match state.mode {
            Mode::Shadow
                if state.reads.default_bp > 0 || state.reads.columns.values().any(|&bp| bp > 0) =>
            {
                mode::set_reads(
                    &self.pool,
                    &ReadsRequest {
                        bp: 0,
                        column: None,
                        by: self.name.clone(),
                        reason: Some(reason.clone()),
                    },
                )
                .await?;
                Some(Action::ReadsToZero)
            }
            Mode::Primary => {
                let gate =
                    MigrationGate::new(self.pool.clone(), self.schemaless.clone(), &self.config);
                let change = mode::set(
                    &self.pool,
                    &ModeRequest {
                        target: Mode::Shadow,
                        force: false,
                        by: self.name.clone(),
                        reason: Some(reason.clone()),
                    },
                    &gate,
                )
                .await?;
                (change.from != change.to).then_some(Action::StepBack {
                    from: change.from,
                    to: change.to,
                })
            }
            _ => None,
        };
        if let Some(action) = &action {
            tracing::warn!("{action}: {reason}");
            metrics::counter!("mezzanine_guard_actions_total", "action" => match action {
                Action::ReadsToZero => "reads_to_zero",
                Action::StepBack { .. } => "step_back",
            })
            .increment(1);
            sqlx::query(
                "/* mezzanine */ UPDATE mezzanine.guard SET last_action = $2, last_action_at = now() WHERE name = $1",
            )
            .bind(&self.name)
            .bind(format!("{action}: {reason}"))
            .execute(&self.pool)
            .await
            .map_err(|e| tripstore::Error::Gate(format!("recording the guard's action: {e}")))?;
        }
        Ok(action)
    }

    /// Watches until cancelled, acting on every breach that lasts
    /// `guard.for_ms`. Returns the actions taken.
    pub async fn run(&self, cancel: CancellationToken) -> Result<Vec<Action>, tripstore::Error> {
        self.ensure().await?;
        let settings = self.config.guard.clone();
        let mut tick = tokio::time::interval(Duration::from_millis(settings.check_ms));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut breached_since: Option<Instant> = None;
        let mut quiet_until: Option<Instant> = None;
        let mut actions = Vec::new();
        loop {
            tokio::select! {
                _ = cancel.cancelled() => break,
                _ = tick.tick() => {}
            }
            let observation = match self.observe().await {
                Ok(o) => o,
                Err(e) => {
                    // Not knowing is no reason to step back: the shared
                    // state's database is PostgreSQL, which every mode
                    // before `schemaless` depends on anyway.
                    tracing::warn!("the guard cannot read the shared state: {e}");
                    continue;
                }
            };
            publish(&observation);
            let now = Instant::now();
            let quiet = quiet_until.is_some_and(|until| now < until);
            let state = if observation.breaches.is_empty() {
                breached_since = None;
                "watching"
            } else if quiet {
                "waiting one window after its action"
            } else {
                let since = *breached_since.get_or_insert(now);
                if now.duration_since(since) >= Duration::from_millis(settings.for_ms) {
                    match self.act(&observation.breaches).await {
                        Ok(Some(action)) => {
                            actions.push(action);
                            breached_since = None;
                            quiet_until = Some(now + Duration::from_millis(settings.window_ms));
                        }
                        Ok(None) => {}
                        Err(e) => tracing::warn!("the guard could not step back: {e}"),
                    }
                }
                "breach"
            };
            let _ = self.heartbeat(state, &observation).await;
        }
        let _ = sqlx::query("/* mezzanine */ UPDATE mezzanine.guard SET state = 'stopped', seen_at = now() WHERE name = $1")
            .bind(&self.name)
            .execute(&self.pool)
            .await;
        Ok(actions)
    }

    async fn heartbeat(&self, state: &str, observation: &Observation) -> Result<(), sqlx::Error> {
        let breaches = serde_json::to_string(&observation.breaches).expect("breaches serialize");
        sqlx::query(
            "/* mezzanine */ INSERT INTO mezzanine.guard (name, state, breaches, seen_at)
             VALUES ($1, $2, $3::jsonb, now())
             ON CONFLICT (name) DO UPDATE SET state = excluded.state, breaches = excluded.breaches, seen_at = now()",
        )
        .bind(&self.name)
        .bind(state)
        .bind(breaches)
        .execute(&self.pool)
        .await?;
        Ok(())
    }
}

/// The thresholds `observation` breaches.
pub fn judge(observation: &Observation, settings: &config::Guard) -> Vec<Breach> {
    let mut breaches = Vec::new();
    let window_s = settings.window_ms as f64 / 1000.0;
    if let Some(s) = observation.window.store(Served::Schemaless) {
        if s.calls >= settings.min_calls {
            if s.error_rate > settings.max_error_rate {
                breaches.push(Breach {
                    cause: "error_rate",
                    why: format!(
                        "{} of {} Schemaless calls failed in the last {window_s}s ({:.2}% > guard.max_error_rate = {}%)",
                        s.errors,
                        s.calls,
                        s.error_rate * 100.0,
                        settings.max_error_rate * 100.0
                    ),
                });
            }
            if let Some(p99) = s.p99_ms.filter(|p| *p > settings.max_p99_ms as f64) {
                breaches.push(Breach {
                    cause: "p99",
                    why: format!(
                        "Schemaless calls' p99 over the last {window_s}s is above {} ms (at most {p99:.1} ms; guard.max_p99_ms = {})",
                        settings.max_p99_ms, settings.max_p99_ms
                    ),
                });
            }
        }
    }
    if observation.new_mismatches > settings.max_new_mismatches {
        breaches.push(Breach {
            cause: "new_mismatches",
            why: format!(
                "{} mismatches opened in the last {window_s}s (guard.max_new_mismatches = {})",
                observation.new_mismatches, settings.max_new_mismatches
            ),
        });
    }
    let max_lag = settings.max_outbox_lag_ms as f64;
    if observation.outbox_lag_ms > max_lag {
        breaches.push(Breach {
            cause: "outbox_lag",
            why: format!(
                "the oldest outbox entry is {:.1}s old (guard.max_outbox_lag_ms = {})",
                observation.outbox_lag_ms / 1000.0,
                settings.max_outbox_lag_ms
            ),
        });
    }
    if observation.capture_lag_ms > max_lag {
        breaches.push(Breach {
            cause: "capture_lag",
            why: format!(
                "the oldest captured change is {:.1}s old (guard.max_outbox_lag_ms = {})",
                observation.capture_lag_ms / 1000.0,
                settings.max_outbox_lag_ms
            ),
        });
    }
    if observation.window.open_breakers > settings.max_open_breakers {
        breaches.push(Breach {
            cause: "breakers",
            why: format!(
                "a facade has {} storage-node breakers open (guard.max_open_breakers = {})",
                observation.window.open_breakers, settings.max_open_breakers
            ),
        });
    }
    breaches
}

/// Sets the guard's gauges.
fn publish(observation: &Observation) {
    for store in &observation.window.stores {
        let label = store.store.clone();
        metrics::gauge!("mezzanine_guard_error_rate", "store" => label.clone())
            .set(store.error_rate);
        metrics::gauge!("mezzanine_guard_calls", "store" => label.clone()).set(store.calls as f64);
        metrics::gauge!("mezzanine_guard_p99_ms", "store" => label)
            .set(store.p99_ms.filter(|p| p.is_finite()).unwrap_or(0.0));
    }
    metrics::gauge!("mezzanine_guard_facades").set(observation.window.facades as f64);
    metrics::gauge!("mezzanine_guard_new_mismatches").set(observation.new_mismatches as f64);
    metrics::gauge!("mezzanine_guard_breaches").set(observation.breaches.len() as f64);
}

/// Creates `mezzanine.guard` if it is missing.
pub async fn ensure(pool: &PgPool) -> Result<(), tripstore::Error> {
    sqlx::raw_sql(
        "/* mezzanine */ CREATE SCHEMA IF NOT EXISTS mezzanine;
         CREATE TABLE IF NOT EXISTS mezzanine.guard (
             name text PRIMARY KEY,
             state text NOT NULL,
             breaches jsonb NOT NULL DEFAULT '[]',
             seen_at timestamptz NOT NULL DEFAULT now(),
             last_action text,
             last_action_at timestamptz);",
    )
    .execute(pool)
    .await
    .map_err(|e| tripstore::Error::Gate(format!("creating mezzanine.guard: {e}")))?;
    Ok(())
}

/// A guard as `status` shows it.
#[derive(Clone, Debug, Serialize)]
pub struct GuardState {
    /// `guard@host:pid`.
    pub name: String,
    /// `watching`, `breach`, `waiting one window after its action`, or
    /// `stopped`.
    pub state: String,
    /// Seconds since its last check.
    pub silent_secs: f64,
    /// The breaches of its last check.
    pub breaches: Vec<Breach>,
    /// Its last action and why.
    pub last_action: Option<String>,
    /// When (UTC).
    pub last_action_at: Option<String>,
}

/// Guards seen in the last hour, the latest first.
pub async fn states(pool: &PgPool) -> Result<Vec<GuardState>, tripstore::Error> {
    ensure(pool).await?;
    let context = |e: sqlx::Error| tripstore::Error::Gate(format!("reading mezzanine.guard: {e}"));
    let rows = sqlx::query(
        "/* mezzanine */ SELECT name, state, breaches::text, extract(epoch FROM now() - seen_at)::float8,
                last_action, to_char(last_action_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')
         FROM mezzanine.guard WHERE seen_at > now() - interval '1 hour' ORDER BY seen_at DESC",
    )
    .fetch_all(pool)
    .await
    .map_err(context)?;
    rows.iter()
        .map(|row| {
            let breaches: String = row.try_get(2).map_err(context)?;
            let breaches: Vec<serde_json::Value> =
                serde_json::from_str(&breaches).unwrap_or_default();
            Ok(GuardState {
                name: row.try_get(0).map_err(context)?,
                state: row.try_get(1).map_err(context)?,
                silent_secs: row.try_get(3).map_err(context)?,
                breaches: breaches
                    .iter()
                    .map(|b| Breach {
                        cause: cause_name(b["cause"].as_str().unwrap_or("")),
                        why: b["why"].as_str().unwrap_or("").to_string(),
                    })
                    .collect(),
                last_action: row.try_get(4).map_err(context)?,
                last_action_at: row.try_get(5).map_err(context)?,
            })
        })
        .collect()
}

/// The stable cause names, as `&'static str`.
fn cause_name(text: &str) -> &'static str {
    [
        "error_rate",
        "p99",
        "new_mismatches",
        "outbox_lag",
        "capture_lag",
        "breakers",
    ]
    .into_iter()
    .find(|c| *c == text)
    .unwrap_or("unknown")
}

#[cfg(test)]
mod tests {
    use super::*;
    use tripstore::report::{StoreWindow, Window};

    fn observed(calls: u64, errors: u64, p99_ms: f64) -> Observation {
        Observation {
            window: Window {
                facades: 2,
                stores: vec![StoreWindow {
                    store: "schemaless".into(),
                    calls,
                    errors,
                    error_rate: errors as f64 / calls.max(1) as f64,
                    p99_ms: Some(p99_ms),
                }],
                open_breakers: 0,
            },
            new_mismatches: 0,
            outbox_lag_ms: 0.0,
            capture_lag_ms: 0.0,
            breaches: Vec::new(),
        }
    }

    fn causes(o: &Observation, settings: &config::Guard) -> Vec<&'static str> {
        judge(o, settings).into_iter().map(|b| b.cause).collect()
    }

    #[test]
    fn each_threshold_is_judged_and_named() {
        let settings = config::Guard::default();
        assert!(causes(&observed(1000, 5, 20.0), &settings).is_empty());
        assert_eq!(causes(&observed(1000, 11, 20.0), &settings), ["error_rate"]);
        assert_eq!(causes(&observed(1000, 0, 600.0), &settings), ["p99"]);
        // Too few calls to judge a rate or a p99.
        assert!(causes(&observed(19, 19, 9000.0), &settings).is_empty());
        let mut o = observed(0, 0, 0.0);
        o.new_mismatches = 1;
        o.outbox_lag_ms = 30_001.0;
        o.capture_lag_ms = 30_001.0;
        o.window.open_breakers = 1;
        assert_eq!(
            causes(&o, &settings),
            ["new_mismatches", "outbox_lag", "capture_lag", "breakers"]
        );
        let lenient = config::Guard {
            max_new_mismatches: 1,
            max_open_breakers: 1,
            max_outbox_lag_ms: 60_000,
            ..config::Guard::default()
        };
        assert!(causes(&o, &lenient).is_empty());
    }
}
