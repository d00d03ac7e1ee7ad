//! `mezzanine`: the command line of the Mezzanine migration toolkit.
//!
//! One subcommand per runbook step. Exit codes: 0 success, 1 failure,
//! 2 bad usage or bad configuration.
//!
//! # Layout
//!
//! - [`cluster`]: `cluster up|down|status|promote`, the dev servers and
//!   the storage nodes;
//! - [`buffer`]: `buffer reconcile|status`, the buffers of buffered writes;
//! - [`check`]: `config check`;
//! - [`schema`]: `schema apply`;
//! - [`shard`]: `shard status`, where each shard is now;
//! - [`legacy`]: `legacy init|seed|add-uuid`, the PostgreSQL side;
//! - [`mode`]: `mode show|set|reads|history`, where the facade sends
//!   calls;
//! - [`status`]: `status`, where the migration stands on one screen;
//! - [`guard`]: `guard`, the automatic step back;
//! - [`mirror`]: `mirror relay|reverse|status|retry|load`, both directions
//!   of the mirror;
//! - [`capture`]: `capture install|uninstall|status|retry`, plain SQL
//!   writes recorded by PostgreSQL and delivered by the relays;
//! - [`backfill`]: `backfill plan|run|status|pause|resume|retry`;
//! - [`verify`]: `verify sample|full|repair|report`;
//! - [`serve`]: `serve`, the verification dashboard and `/metrics`;
//! - [`metrics`]: the Prometheus metrics and their endpoint;
//! - [`trigger`]: `trigger status|retry`;
//! - [`index`]: `index create|backfill|switch|run|status`;
//! - [`demo`]: the end-to-end demo;
//! - [`backup`]: `backup`, `backup verify` and `restore`;
//! - [`bench`]: `bench cells`, figures against the raw limit of the same
//!   servers;
//! - [`query`]: `query audit|translate|run`, the app's SQL against the
//!   layout;
//! - [`worker`]: `worker`, the facade over HTTP;
//! - [`cell`]: `cell get|row|put|index`, cells through the facade.

mod backfill;
mod backup;
mod bench;
mod buffer;
mod capture;
mod cell;
mod check;
mod clock;
mod cluster;
mod demo;
mod guard;
mod index;
mod legacy;
mod metrics;
mod mirror;
mod mode;
mod progress;
mod proxy;
mod query;
mod schema;
mod serve;
mod shard;
mod shutdown;
mod status;
mod table;
mod trigger;
mod verify;
mod worker;
mod workload;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Move a live PostgreSQL data set into Schemaless, a sharded append-only
/// cell store on MariaDB, without downtime and without losing a write.
#[derive(Parser)]
#[command(name = "mezzanine", version, propagate_version = true)]
struct Cli {
    /// The configuration file.
    #[arg(
        long,
        global = true,
        default_value = "config/examples/local.toml",
        env = "MEZZANINE_CONFIG"
    )]
    config: PathBuf,
    /// Where the dev cluster's servers keep their data and logs.
    #[arg(
        long,
        global = true,
        default_value = ".devcluster",
        env = "MEZZANINE_CLUSTER_DIR"
    )]
    cluster_dir: PathBuf,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Start, stop and inspect the dev cluster (PostgreSQL and MariaDB
    /// servers on loopback).
    #[command(subcommand)]
    Cluster(cluster::ClusterCommand),
    /// The buffers of buffered writes: run the reconciler, show backlogs.
    #[command(subcommand)]
    Buffer(buffer::BufferCommand),
    /// Validate configuration files.
    #[command(subcommand)]
    Config(check::ConfigCommand),
    /// Create the Schemaless instance's shard databases.
    #[command(subcommand)]
    Schema(schema::SchemaCommand),
    /// Where each shard is now: the clusters' shards against config, and
    /// the placements recorded since.
    #[command(subcommand)]
    Shard(shard::ShardCommand),
    /// The legacy PostgreSQL tables: the sample data set and the online
    /// UUID column.
    #[command(subcommand)]
    Legacy(legacy::LegacyCommand),
    /// Show or change the mode every facade routes by, the share of reads
    /// Schemaless serves in shadow, and their history.
    #[command(subcommand)]
    Mode(mode::ModeCommand),
    /// Where the migration stands, on one screen: the mode, the gates of
    /// the next step, backfill progress, every lag, the verifier's figures,
    /// the storage nodes.
    Status(status::StatusArgs),
    /// Watch what facades report and the shared state shows, and step the
    /// cutover back (never forward) when a threshold of [guard] stays
    /// breached: reads of shadow to 0%, or primary back to shadow.
    Guard(guard::GuardArgs),
    /// The backfill: the history copied into Schemaless, planned, parallel,
    /// resumable and throttled.
    #[command(subcommand)]
    Backfill(backfill::BackfillCommand),
    /// The mirror: the outbox relay, the reverse mirror, their status.
    #[command(subcommand)]
    Mirror(mirror::MirrorCommand),
    /// Capture: writes that bypass the facade (plain SQL), recorded by
    /// PostgreSQL triggers and delivered by the relays.
    #[command(subcommand)]
    Capture(capture::CaptureCommand),
    /// The verifier: sampled reads replayed on the other store, the full
    /// diff, repair, and the figures the gates use.
    #[command(subcommand)]
    Verify(verify::VerifyCommand),
    /// Serve the verification dashboard (`/`) and Prometheus metrics
    /// (`/metrics`) until interrupted.
    Serve(serve::ServeArgs),
    /// Sharded secondary indexes: versions, backfill, switch, maintenance.
    #[command(subcommand)]
    Index(index::IndexCommand),
    /// Inspect triggers and re-drive their parked cells.
    #[command(subcommand)]
    Trigger(trigger::TriggerCommand),
    /// Run the end-to-end demo on the dev cluster (starting it if needed).
    Demo(demo::DemoArgs),
    /// Back up every shard's cells (consistent per shard, while writes go
    /// on) into a directory with a checksummed manifest; `backup verify
    /// DIR` checks one.
    Backup(backup::BackupArgs),
    /// Restore a backup into an instance with no cells, whole or up to an
    /// added_id of each shard's change log; every shard is read back and
    /// compared.
    Restore(backup::RestoreArgs),
    /// Benchmarks, each against the raw limit of the same servers.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// The app's SQL: which statements the cell API answers, and the calls
    /// each becomes.
    #[command(subcommand)]
    Query(query::QueryCommand),
    /// Serve the facade over HTTP/JSON to apps in any language, until
    /// SIGTERM (in-flight requests are drained).
    Worker(worker::WorkerArgs),
    /// Speak PostgreSQL's wire protocol to apps: forward to the legacy
    /// database, judging each statement by the mode (reads sampled or
    /// served from Schemaless, writes run through the facade in primary
    /// and schemaless); `proxy status` asks a running one what it has
    /// done.
    Proxy(proxy::ProxyArgs),
    /// Read and write cells through the facade, for ad-hoc work during a
    /// cutover.
    #[command(subcommand)]
    Cell(cell::CellCommand),
}

/// An error that means "bad usage or configuration" (exit code 2).
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// Command-line flags that override configuration keys, checked by the
/// same rules as the file, so that a flag cannot reach a value the key
/// refuses (a chunk size that wraps to -1, a stale limit of 0).
pub(crate) struct Overrides {
    config: config::Config,
    /// (flag, key) of each flag given.
    given: Vec<(&'static str, &'static str)>,
}

impl Overrides {
    pub(crate) fn new(config: &config::Config) -> Overrides {
        Overrides {
            config: config.clone(),
            given: Vec::new(),
        }
    }

    /// Sets `key` through `put` when the flag was given.
    pub(crate) fn set<T>(
        mut self,
        flag: &'static str,
        key: &'static str,
        value: Option<T>,
        put: impl FnOnce(&mut config::Config, T),
    ) -> Overrides {
        if let Some(value) = value {
            put(&mut self.config, value);
            self.given.push((flag, key));
        }
        self
    }

    /// The configuration with the flags applied, or a usage error naming
    /// the flag whose value the key's rule refuses.
    pub(crate) fn check(self) -> Result<config::Config, UsageError> {
        match self.config.check() {
            Ok(()) => Ok(self.config),
            Err(problem) => Err(UsageError(
                match self.given.iter().find(|(_, key)| *key == problem.key) {
                    Some((flag, key)) => format!("--{flag}: {} (as {key})", problem.message),
                    None => format!("{}: {}", problem.key, problem.message),
                },
            )),
        }
    }
}

/// Loads the configuration; its errors are usage errors.
pub fn load_config(path: &std::path::Path) -> anyhow::Result<config::Config> {
    let config = config::Config::load(path).map_err(|e| UsageError(e.to_string()))?;
    if config.storage.durability == config::Durability::OneHost {
        eprintln!("warning: {}", config::ONE_HOST_WARNING);
    }
    Ok(config)
}

/// mimalloc instead of the system's allocator: glibc hands the large,
/// short-lived buffers of bulk writes (statement texts of hundreds of
/// kilobytes, per batch) back to the kernel and faults fresh, zeroed pages
/// in for the next batch, which was a quarter of `put_cells`' client CPU;
/// its small allocations and frees (every cell body is a tree of them) are
/// slower too.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // Die quietly on a closed pipe (`mezzanine cluster status | head`), as
    // command-line tools do, instead of panicking on the next print.
    // Changing a disposition is unsafe in nix as well (a handler could
    // break async-signal safety); SIG_DFL installs none.
    // SAFETY: called before any thread exists; SIG_DFL is always valid.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("MEZZANINE_LOG")
                // sqlx's slow-statement warnings are noise for a command
                // line whose bulk statements are slow by design.
                .unwrap_or_else(|_| "warn,sqlx::query=error".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    // One recorder for the whole process, so that breakers, buffers,
    // relays and the verifier record into what `/metrics` renders.
    ::worker::metrics::install();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: starting the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    // The command runs as a task on the runtime's workers, not on this
    // thread: a future polled by `block_on` is woken from a worker thread
    // for every socket event (a futex wake-up and a context switch each),
    // which cost a bulk write about a microsecond of CPU per cell.
    let result = runtime.block_on(async move {
        match tokio::spawn(run(cli)).await {
            Ok(result) => result,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => Err(anyhow::anyhow!("the command's task ended: {e}")),
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", message(&e));
            if e.downcast_ref::<UsageError>().is_some() {
                ExitCode::from(2)
            } else {
                ExitCode::from(1)
            }
        }
    }
}

/// The error and its causes, joined by ": ", leaving out a cause whose
/// text its parent already shows (many errors print their source).
fn message(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if !out.contains(&text) {
            if !out.is_empty() {
                out.push_str(": ");
            }
            out.push_str(&text);
        }
    }
    out
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Cluster(c) => cluster::run(c, &cli.config, &cli.cluster_dir).await,
        Command::Buffer(c) => buffer::run(c, &cli.config).await,
        Command::Config(c) => check::run(c),
        Command::Schema(c) => schema::run(c, &cli.config).await,
        Command::Shard(c) => shard::run(c, &cli.config).await,
        Command::Legacy(c) => legacy::run(c, &cli.config).await,
        Command::Mode(c) => mode::run(c, &cli.config).await,
        Command::Status(args) => status::run(args, &cli.config).await,
        Command::Guard(args) => guard::run(args, &cli.config).await,
        Command::Mirror(c) => mirror::run(c, &cli.config).await,
        Command::Capture(c) => capture::run(c, &cli.config).await,
        Command::Verify(c) => verify::run(c, &cli.config).await,
        Command::Serve(args) => serve::run(args, &cli.config).await,
        Command::Backfill(c) => backfill::run(c, &cli.config).await,
        Command::Index(c) => index::run(c, &cli.config).await,
        Command::Trigger(c) => trigger::run(c, &cli.config).await,
        Command::Demo(args) => demo::run(args, &cli.config, &cli.cluster_dir).await,
        Command::Backup(args) => backup::run(args, &cli.config).await,
        Command::Restore(args) => backup::restore(args).await,
        Command::Bench(c) => bench::run(c, &cli.config, &cli.cluster_dir).await,
        Command::Query(c) => query::run(c, &cli.config).await,
        Command::Worker(args) => worker::run(args, &cli.config).await,
        Command::Proxy(args) => proxy::run(args, &cli.config).await,
        Command::Cell(c) => cell::run(c, &cli.config).await,
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// clap checks the whole command tree (names, flags, conflicts) only
    /// when a command is used in a debug build; check every one at once.
    #[test]
    fn every_command_and_flag_is_well_formed() {
        super::Cli::command().debug_assert();
    }
}
