//! Gates: the checks a step forward must pass, each answered with its
//! figure, and the plan `mode set --dry-run` shows.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use sqlx::PgPool;

use super::*;
use crate::error::Error;

/// One condition of a step, as `mode set --dry-run` and `status` show
/// it: what was checked, and the figure that passed or why it waits.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Check {
    /// A stable name (`ladder`, `backfill`, `outbox`, ...).
    pub name: String,
    /// Whether it holds now.
    pub pass: bool,
    /// What holds, or why the step must wait and what to do.
    pub why: String,
}

impl Check {
    /// A condition that holds.
    pub fn pass(name: &str, why: impl Into<String>) -> Check {
        Check {
            name: name.into(),
            pass: true,
            why: why.into(),
        }
    }

    /// A condition the step must wait for.
    pub fn wait(name: &str, why: impl Into<String>) -> Check {
        Check {
            name: name.into(),
            pass: false,
            why: why.into(),
        }
    }

    /// `pass` with `why` when `refusal` is `None`, else a wait for it.
    pub fn unless(name: &str, refusal: Option<String>, why: impl Into<String>) -> Check {
        match refusal {
            Some(reason) => Check::wait(name, reason),
            None => Check::pass(name, why),
        }
    }
}

/// What a step forward must wait for, beyond the ladder's one-step rule,
/// and what must happen before facades see a new mode.
#[async_trait]
pub trait Gate: Send + Sync {
    /// Every condition of entering `to` from `from`, passed or not, in the
    /// order they are told. Asked only for steps forward.
    async fn checks(&self, from: Mode, to: Mode) -> Result<Vec<Check>, Error>;

    /// Why entering `to` from `from` must wait, if it must: the first
    /// check that did not pass.
    async fn refusal(&self, from: Mode, to: Mode) -> Result<Option<String>, Error> {
        let checks = self.checks(from, to).await?;
        Ok(checks.into_iter().find(|c| !c.pass).map(|c| c.why))
    }

    /// Runs before the mode row changes, forced or not; an error stops the
    /// change.
    async fn prepare(&self, from: Mode, to: Mode) -> Result<(), Error>;
}

/// The gate that lets everything through: for control-table tests and
/// tools without the stores.
pub struct Open;

#[async_trait]
impl Gate for Open {
    async fn checks(&self, _: Mode, _: Mode) -> Result<Vec<Check>, Error> {
        Ok(Vec::new())
    }

    async fn prepare(&self, _: Mode, _: Mode) -> Result<(), Error> {
        Ok(())
    }
}

/// What a change of the mode would do, found without changing anything.
#[derive(Clone, Debug, Serialize)]
pub struct Plan {
    /// The mode now.
    pub from: Mode,
    /// The mode asked for.
    pub to: Mode,
    /// Every condition, passed or not: the ladder's, then the gate's
    /// (asked only for a step forward the ladder allows).
    pub checks: Vec<Check>,
}

impl Plan {
    /// The first condition that did not pass.
    pub fn refusal(&self) -> Option<&Check> {
        self.checks.iter().find(|c| !c.pass)
    }

    /// Whether the step would be taken without `--force`.
    pub fn passes(&self) -> bool {
        self.refusal().is_none()
    }
}

/// Every condition of moving from `from` to `to`.
pub async fn evaluate(from: Mode, to: Mode, gate: &dyn Gate) -> Result<Plan, Error> {
    let mut checks = Vec::new();
    if from != to {
        let direction = if to > from { "forward" } else { "back" };
        checks.push(Check::unless(
            "ladder",
            refusal(from, to),
            format!("{from} -> {to} is one step {direction}"),
        ));
        if to > from && checks[0].pass {
            checks.extend(gate.checks(from, to).await?);
        }
    }
    Ok(Plan { from, to, checks })
}

/// `mode set --dry-run`: what [`set`] would find now, changing nothing.
pub async fn dry_run(pool: &PgPool, to: Mode, gate: &dyn Gate) -> Result<Plan, Error> {
    let from = read(pool).await?.mode;
    evaluate(from, to, gate).await
}
