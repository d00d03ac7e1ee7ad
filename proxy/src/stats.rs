//! What the proxy has done: counts for `proxy status` and the same figures
//! as metrics.
//!
//! | metric | kind | what |
//! |---|---|---|
//! | `mezzanine_proxy_clients` | gauge | app connections open |
//! | `mezzanine_proxy_backends` | gauge | PostgreSQL connections open |
//! | `mezzanine_proxy_connections_total{outcome}` | counter | app connections by how they began: `served`, `cancel`, `refused_full`, `no_backend`, `bad_startup` |
//! | `mezzanine_proxy_statements_total{class,mode,route}` | counter | statements by translator class, mode, and `forwarded` or `refused` |
//! | `mezzanine_proxy_served_total{store}` | counter | translatable reads in `shadow`, `primary` and `schemaless` outside a transaction block, by the store that answered: `schemaless`, `postgresql` (the read share, or a plan not served), or `refused` (in `schemaless`, a plan not served) |
//! | `mezzanine_proxy_writes_total{outcome}` | counter | translatable writes in `primary` and `schemaless` outside a transaction block, run through the facade: `written`, or `failed` with the error PostgreSQL would have raised (a duplicate key, a concurrent update, a value that does not evaluate, Schemaless unavailable) |
//! | `mezzanine_proxy_write_cells_total` | counter | cells those writes put |
//! | `mezzanine_proxy_read_your_writes_total{outcome}` | counter | statements forwarded to PostgreSQL in `primary` after the session's writes through the facade, by whether the reverse mirror had `applied` them first or the wait `timed_out` (`proxy.read_your_writes_ms`) |
//! | `mezzanine_proxy_samples_total{outcome}` | counter | translatable reads sampled: `drawn`, then `offered` to the verifier or `failed` (values that did not evaluate, PostgreSQL unreachable); `params_not_read` drawn but not sampled (a NULL or binary parameter not read) |
//!
//! What the verifier made of the samples is in its own metrics
//! (`mezzanine_verify_*`) and in `proxy status` as `sampling.verifier`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use query::Class;
use serde::Serialize;
use tripstore::Mode;

/// Where a statement went.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Route {
    /// To PostgreSQL.
    Forwarded,
    /// Refused with SQLSTATE `0A000`.
    Refused,
}

impl Route {
    fn as_str(self) -> &'static str {
        match self {
            Route::Forwarded => "forwarded",
            Route::Refused => "refused",
        }
    }
}

/// Which store answered a translatable read the proxy could serve (in
/// `shadow`, `primary` and `schemaless`).
#[derive(Clone, Copy, Debug)]
pub enum Store {
    Schemaless,
    /// Forwarded: the read share, or a plan Schemaless does not serve.
    Postgresql,
    /// Neither: in `schemaless`, a read Schemaless does not serve is
    /// refused (`0A000`), PostgreSQL being no longer current.
    Refused,
}

impl Store {
    fn as_str(self) -> &'static str {
        match self {
            Store::Schemaless => "schemaless",
            Store::Postgresql => "postgresql",
            Store::Refused => "refused",
        }
    }
}

/// What became of a sampled statement.
#[derive(Clone, Copy, Debug)]
pub enum SampleOutcome {
    /// Drawn by the sampler.
    Drawn,
    /// Its cell reads handed to the verifier.
    Offered,
    /// Not replayed: its values did not evaluate, or PostgreSQL failed.
    Failed,
    /// Drawn, but a parameter was NULL or in a binary form not read here.
    ParamsNotRead,
}

impl SampleOutcome {
    fn as_str(self) -> &'static str {
        match self {
            SampleOutcome::Drawn => "drawn",
            SampleOutcome::Offered => "offered",
            SampleOutcome::Failed => "failed",
            SampleOutcome::ParamsNotRead => "params_not_read",
        }
    }
}

/// How an app connection began.
#[derive(Clone, Copy, Debug)]
pub enum Outcome {
    Served,
    Cancel,
    RefusedFull,
    NoBackend,
    BadStartup,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Outcome::Served => "served",
            Outcome::Cancel => "cancel",
            Outcome::RefusedFull => "refused_full",
            Outcome::NoBackend => "no_backend",
            Outcome::BadStartup => "bad_startup",
        }
    }
}

/// The running counts.
#[derive(Default)]
pub struct Stats {
    clients: AtomicU64,
    backends: AtomicU64,
    connections: Mutex<BTreeMap<&'static str, u64>>,
    statements: Mutex<BTreeMap<(Class, Mode, Route), u64>>,
    samples: Mutex<BTreeMap<&'static str, u64>>,
    sample_reads: AtomicU64,
    served: Mutex<BTreeMap<&'static str, u64>>,
    writes: Mutex<BTreeMap<&'static str, u64>>,
    write_cells: AtomicU64,
    read_your_writes: Mutex<BTreeMap<&'static str, u64>>,
    /// Translatable writes forwarded to PostgreSQL before `primary`, by
    /// mode; and by (mode, shape) those not yet recorded for the
    /// `primary` gate ([`Stats::take_forwarded`]).
    forwarded_writes: Mutex<BTreeMap<&'static str, u64>>,
    unrecorded: Mutex<std::collections::HashMap<(Mode, String), u64>>,
}

/// The sampling of translatable reads, in `proxy status`.
#[derive(Clone, Debug, Serialize)]
pub struct Sampling {
    /// Statements by outcome (`drawn`, `offered`, `failed`,
    /// `params_not_read`).
    pub statements: BTreeMap<&'static str, u64>,
    /// Cell reads handed to the verifier.
    pub cell_reads: u64,
    /// What the verifier made of them, since the proxy started.
    pub verifier: verifier::store::Counts,
}

/// One row of the statement counts.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct StatementCount {
    pub class: Class,
    pub mode: Mode,
    pub route: Route,
    pub count: u64,
}

/// `proxy status`, as the proxy serves it on `/status`.
#[derive(Clone, Debug, Serialize)]
pub struct Status {
    pub listen: SocketAddr,
    pub mode: Mode,
    pub clients: u64,
    pub max_clients: usize,
    pub backends: u64,
    pub pool_size: usize,
    /// App connections by how they began.
    pub connections: BTreeMap<&'static str, u64>,
    pub statements: Vec<StatementCount>,
    /// Translatable reads considered for serving from Schemaless (in
    /// `shadow`), by the store that answered.
    pub served: BTreeMap<&'static str, u64>,
    /// Translatable writes run through the facade (in `primary` and
    /// `schemaless`): `written` or `failed`, and the cells put.
    pub writes: BTreeMap<&'static str, u64>,
    pub write_cells: u64,
    /// Statements forwarded to PostgreSQL after the session's writes
    /// through the facade (in `primary`), by whether those were `applied`
    /// there first or the wait `timed_out`.
    pub read_your_writes: BTreeMap<&'static str, u64>,
    /// Translatable writes forwarded to PostgreSQL (before `primary`,
    /// outside transaction blocks), by mode: the facade runs them from
    /// `primary` on, so the `primary` gate does not count them as direct
    /// writes.
    pub forwarded_writes: BTreeMap<&'static str, u64>,
    pub sampling: Sampling,
}

impl Stats {
    pub fn connection(&self, outcome: Outcome) {
        metrics::counter!("mezzanine_proxy_connections_total", "outcome" => outcome.as_str())
            .increment(1);
        *lock(&self.connections).entry(outcome.as_str()).or_default() += 1;
    }

    pub fn statement(&self, class: Class, mode: Mode, route: Route) {
        metrics::counter!(
            "mezzanine_proxy_statements_total",
            "class" => class.as_str(),
            "mode" => mode.as_str(),
            "route" => route.as_str()
        )
        .increment(1);
        *lock(&self.statements)
            .entry((class, mode, route))
            .or_default() += 1;
    }

    pub fn sample(&self, outcome: SampleOutcome) {
        metrics::counter!("mezzanine_proxy_samples_total", "outcome" => outcome.as_str())
            .increment(1);
        *lock(&self.samples).entry(outcome.as_str()).or_default() += 1;
    }

    pub fn served(&self, store: Store) {
        metrics::counter!("mezzanine_proxy_served_total", "store" => store.as_str()).increment(1);
        *lock(&self.served).entry(store.as_str()).or_default() += 1;
    }

    /// A write run through the facade: the cells it put, or `None` when
    /// it failed.
    pub fn write(&self, cells: Option<usize>) {
        let outcome = if cells.is_some() { "written" } else { "failed" };
        metrics::counter!("mezzanine_proxy_writes_total", "outcome" => outcome).increment(1);
        *lock(&self.writes).entry(outcome).or_default() += 1;
        if let Some(n) = cells {
            metrics::counter!("mezzanine_proxy_write_cells_total").increment(n as u64);
            self.write_cells.fetch_add(n as u64, Ordering::Relaxed);
        }
    }

    /// A statement forwarded after the session's writes were awaited:
    /// `applied` in PostgreSQL, `parked` by the reverse mirror,
    /// `timed_out`, or `failed` (PostgreSQL not asked).
    pub fn read_your_writes(&self, outcome: &'static str) {
        metrics::counter!("mezzanine_proxy_read_your_writes_total", "outcome" => outcome)
            .increment(1);
        *lock(&self.read_your_writes).entry(outcome).or_default() += 1;
    }

    /// A translatable write of `shape` forwarded to PostgreSQL in `mode`
    /// (before `primary`, outside a transaction block).
    pub fn forwarded_write(&self, mode: Mode, shape: &str) {
        metrics::counter!("mezzanine_proxy_forwarded_writes_total", "mode" => mode.as_str())
            .increment(1);
        *lock(&self.forwarded_writes)
            .entry(mode.as_str())
            .or_default() += 1;
        *lock(&self.unrecorded)
            .entry((mode, shape.to_string()))
            .or_default() += 1;
    }

    /// The forwarded writes not yet recorded for the gate, taken; given
    /// back with [`Stats::untake_forwarded`] if recording them failed.
    pub fn take_forwarded(&self) -> Vec<(Mode, String, u64)> {
        std::mem::take(&mut *lock(&self.unrecorded))
            .into_iter()
            .map(|((mode, shape), n)| (mode, shape, n))
            .collect()
    }

    pub fn untake_forwarded(&self, counts: Vec<(Mode, String, u64)>) {
        let mut unrecorded = lock(&self.unrecorded);
        for (mode, shape, n) in counts {
            *unrecorded.entry((mode, shape)).or_default() += n;
        }
    }

    pub fn sample_reads(&self, n: u64) {
        self.sample_reads.fetch_add(n, Ordering::Relaxed);
    }

    /// Counts an open app connection until the guard is dropped.
    pub fn client(&self) -> Open<'_> {
        Open::new(&self.clients, "mezzanine_proxy_clients")
    }

    /// Counts an open PostgreSQL connection until the guard is dropped.
    pub fn backend(&self) -> Open<'_> {
        Open::new(&self.backends, "mezzanine_proxy_backends")
    }

    pub fn status(
        &self,
        listen: SocketAddr,
        mode: Mode,
        settings: &config::proxy::Proxy,
        verifier: verifier::store::Counts,
    ) -> Status {
        Status {
            listen,
            mode,
            clients: self.clients.load(Ordering::Relaxed),
            max_clients: settings.max_clients,
            backends: self.backends.load(Ordering::Relaxed),
            pool_size: settings.pool_size,
            connections: lock(&self.connections).clone(),
            statements: lock(&self.statements)
                .iter()
                .map(|(&(class, mode, route), &count)| StatementCount {
                    class,
                    mode,
                    route,
                    count,
                })
                .collect(),
            served: lock(&self.served).clone(),
            writes: lock(&self.writes).clone(),
            write_cells: self.write_cells.load(Ordering::Relaxed),
            read_your_writes: lock(&self.read_your_writes).clone(),
            forwarded_writes: lock(&self.forwarded_writes).clone(),
            sampling: Sampling {
                statements: lock(&self.samples).clone(),
                cell_reads: self.sample_reads.load(Ordering::Relaxed),
                verifier,
            },
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// An open connection, counted in a gauge while it lives.
pub struct Open<'a> {
    count: &'a AtomicU64,
    gauge: &'static str,
}

impl<'a> Open<'a> {
    fn new(count: &'a AtomicU64, gauge: &'static str) -> Open<'a> {
        count.fetch_add(1, Ordering::Relaxed);
        metrics::gauge!(gauge).increment(1.0);
        Open { count, gauge }
    }
}

impl Drop for Open<'_> {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::Relaxed);
        metrics::gauge!(self.gauge).decrement(1.0);
    }
}
