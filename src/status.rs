//! `mezzanine status`: where the migration stands, on one screen (see
//! [`cutover::status`]).

use std::io::IsTerminal;
use std::path::Path;
use std::time::Duration;

use clap::Args;
use cutover::status::{Section, Status};
use cutover::Sources;

#[derive(Args)]
pub struct StatusArgs {
    /// Print JSON (stable keys: see docs/commands.md) instead of text.
    #[arg(long)]
    json: bool,
    /// Read again every --interval seconds until interrupted.
    #[arg(long)]
    watch: bool,
    /// Seconds between two reads with --watch.
    #[arg(long, default_value_t = 2.0, requires = "watch", value_parser = interval)]
    interval: f64,
}

fn interval(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(s) if (0.1..=3600.0).contains(&s) => Ok(s),
        _ => Err(format!(
            "{text:?} is not a number of seconds from 0.1 to 3600"
        )),
    }
}

pub async fn run(args: StatusArgs, config_path: &Path) -> anyhow::Result<()> {
    let config = crate::load_config(config_path)?;
    let legacy_config =
        legacy::connection::legacy_config(&config).map_err(|e| crate::UsageError(e.to_string()))?;
    let pool = legacy::connection::pool(legacy_config)?;
    tripstore::mode::ensure_control(&pool).await?;
    // A layout that does not match the tables is something to show, not a
    // reason to show nothing.
    let (legacy, legacy_error) = match &config.layout {
        Some(_) => match legacy::LegacyStore::connect(&config).await {
            Ok(store) => (Some(store), None),
            Err(e) => (None, Some(e.to_string())),
        },
        None => (None, None),
    };
    let sources = Sources {
        pool,
        schemaless: schemaless::MySqlStore::connect(&config)?,
        legacy,
        legacy_error,
        config,
    };
    let terminal = std::io::stdout().is_terminal();
    let result = loop {
        let status = match cutover::status::read(&sources).await {
            Ok(status) => status,
            Err(e) => break Err(e.into()),
        };
        if args.json {
            println!("{}", serde_json::to_string_pretty(&status)?);
        } else {
            if args.watch && terminal {
                // Clear the screen and go home, as `watch` does.
                print!("\x1b[2J\x1b[H");
            }
            print!("{}", render(&status));
        }
        if !args.watch {
            break Ok(());
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs_f64(args.interval)) => {}
            _ = crate::shutdown::stopped() => break Ok(()),
        }
        if !terminal && !args.json {
            println!("---");
        }
    };
    if let Some(legacy) = &sources.legacy {
        legacy.close().await;
    }
    sources.schemaless.close().await;
    sources.pool.close().await;
    result
}

fn unavailable<T>(section: &Section<T>) -> Option<&str> {
    match section {
        Section::Ok(_) => None,
        Section::Unavailable { error } => Some(error),
    }
}

/// The screen as text.
pub fn render(s: &Status) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    for problem in &s.problems {
        let _ = writeln!(out, "PROBLEM    {problem}");
    }
    let m = &s.mode;
    let _ = writeln!(
        out,
        "mode       {}  since {} by {}{}{}",
        m.mode,
        m.since,
        m.by,
        if m.forced { " (FORCED)" } else { "" },
        m.reason
            .as_ref()
            .map(|r| format!(": {r}"))
            .unwrap_or_default()
    );
    let _ = writeln!(
        out,
        "reads      {} of shadow's reads to Schemaless{}",
        s.reads.describe,
        if s.reads.applies {
            ""
        } else {
            " (applies in shadow)"
        }
    );
    match &s.next_step {
        Section::Ok(None) => {
            let _ = writeln!(out, "next step  none: schemaless is the last mode");
        }
        Section::Ok(Some(next)) => {
            let _ = writeln!(
                out,
                "next step  {} -> {}: {}",
                m.mode,
                next.to,
                if next.pass {
                    "READY (`mezzanine mode set {}`)".replace("{}", next.to.as_str())
                } else {
                    "NOT YET".into()
                }
            );
            for gate in &next.gates {
                let _ = writeln!(
                    out,
                    "  {:<8} {}: {}",
                    if gate.pass { "PASS" } else { "NOT YET" },
                    gate.name,
                    gate.why
                );
            }
        }
        Section::Unavailable { error } => {
            let _ = writeln!(out, "next step  cannot be checked: {error}");
        }
    }
    match &s.backfill {
        Section::Ok(b) => {
            if b.planned {
                let share = if b.chunks > 0 {
                    b.done as f64 * 100.0 / b.chunks as f64
                } else {
                    100.0
                };
                let _ = writeln!(
                    out,
                    "backfill   {share:.1}% ({} of {} chunks, {} running, {} failed), {} cells, {:.0} cells/s, ETA {}{}",
                    b.done,
                    b.chunks,
                    b.running,
                    b.failed,
                    b.cells_done,
                    b.cells_per_sec,
                    crate::clock::duration(b.eta_secs),
                    if b.complete { ", complete" } else { "" }
                );
            } else {
                let _ = writeln!(out, "backfill   not planned");
            }
            for p in b.plans.iter().filter(|p| p.name != backfill::plan::MAIN) {
                let _ = writeln!(
                    out,
                    "  plan {} ({}): {} of {} chunks, {} failed{}",
                    p.name,
                    p.scope,
                    p.done,
                    p.chunks,
                    p.failed,
                    if p.complete { ", complete" } else { "" }
                );
            }
        }
        Section::Unavailable { error } => {
            let _ = writeln!(out, "backfill   unavailable: {error}");
        }
    }
    match &s.mirror {
        Section::Ok(x) => {
            let _ = writeln!(
                out,
                "outbox     {} entries, oldest {}, {} parked",
                x.outbox_depth,
                crate::clock::duration(x.outbox_oldest_secs),
                x.outbox_parked
            );
            if x.capture_enabled {
                let _ = writeln!(
                    out,
                    "capture    {} changes, oldest {}, {} parked",
                    x.capture_depth,
                    crate::clock::duration(x.capture_oldest_secs),
                    x.capture_parked
                );
            } else {
                let _ = writeln!(out, "capture    not enabled");
            }
            let _ = writeln!(
                out,
                "reverse    {}",
                match &x.reverse_error {
                    Some(e) => format!("lag unknown: {e}"),
                    None if x.reverse_shards == 0 => "not started".into(),
                    None => format!(
                        "{} cells behind over {} shards, {} parked",
                        x.reverse_lag_cells, x.reverse_shards, x.reverse_parked
                    ),
                }
            );
            let relays = x.workers.iter().filter(|w| w.kind == "relay").count();
            let reverses = x.workers.len() - relays;
            let _ = writeln!(
                out,
                "workers    {} processes run the mirror ({relays} relays, {reverses} reverse mirrors){}",
                x.processes,
                x.workers
                    .iter()
                    .find_map(|w| w.last_error.as_ref().map(|e| format!("; last error of {}: {e}", w.name)))
                    .unwrap_or_default()
            );
        }
        Section::Unavailable { error } => {
            let _ = writeln!(out, "mirror     unavailable: {error}");
        }
    }
    match &s.verify {
        Section::Ok(v) => {
            let _ = writeln!(
                out,
                "verify     {} samples, {} mismatches (rate {:.6}, 95% upper bound {:.6}), {} open",
                v.samples, v.mismatches, v.mismatch_rate, v.upper_bound, v.open_mismatches
            );
            if !v.coverage.is_empty() {
                let each: Vec<String> = v
                    .coverage
                    .iter()
                    .map(|c| format!("{} {:.1}%", c.column, c.share * 100.0))
                    .collect();
                let _ = writeln!(out, "coverage   {}", each.join(", "));
            }
        }
        Section::Unavailable { error } => {
            let _ = writeln!(out, "verify     unavailable: {error}");
        }
    }
    let down: Vec<String> = s
        .nodes
        .iter()
        .filter(|n| !n.answers)
        .map(|n| {
            format!(
                "{} {} {} ({})",
                n.cluster,
                n.role,
                n.node,
                n.error.as_deref().unwrap_or("down")
            )
        })
        .collect();
    let _ = writeln!(
        out,
        "nodes      {} of {} answer{}",
        s.nodes.len() - down.len(),
        s.nodes.len(),
        if down.is_empty() {
            String::new()
        } else {
            format!("; DOWN: {}", down.join("; "))
        }
    );
    match &s.facades {
        Section::Ok(w) => {
            let each: Vec<String> = w
                .stores
                .iter()
                .filter(|st| st.calls > 0)
                .map(|st| {
                    format!(
                        "{} {} calls, {:.2}% failed, p99 {}",
                        st.store,
                        st.calls,
                        st.error_rate * 100.0,
                        st.p99_ms
                            .filter(|p| p.is_finite())
                            .map_or("-".into(), |p| format!("<= {p:.1} ms"))
                    )
                })
                .collect();
            let _ = writeln!(
                out,
                "facades    {} reporting{}{}",
                w.facades,
                if each.is_empty() {
                    String::new()
                } else {
                    format!(": {}", each.join("; "))
                },
                if w.open_breakers > 0 {
                    format!("; {} breakers OPEN", w.open_breakers)
                } else {
                    String::new()
                }
            );
        }
        Section::Unavailable { error } => {
            let _ = writeln!(out, "facades    unavailable: {error}");
        }
    }
    match &s.guards {
        Section::Ok(g) if g.is_empty() => {
            let _ = writeln!(out, "guard      none running");
        }
        Section::Ok(g) => {
            for g in g {
                let _ = writeln!(
                    out,
                    "guard      {} {} ({:.0}s ago){}{}",
                    g.name,
                    g.state,
                    g.silent_secs,
                    g.breaches
                        .iter()
                        .map(|b| format!("; BREACH {}: {}", b.cause, b.why))
                        .collect::<String>(),
                    match (&g.last_action, &g.last_action_at) {
                        (Some(a), Some(at)) => format!("; last action at {at}: {a}"),
                        _ => String::new(),
                    }
                );
            }
        }
        Section::Unavailable { error } => {
            let _ = writeln!(out, "guard      unavailable: {error}");
        }
    }
    match &s.triggers {
        Section::Ok(t) if t.is_empty() => {
            let _ = writeln!(out, "triggers   none");
        }
        Section::Ok(t) => {
            for t in t {
                let _ = writeln!(
                    out,
                    "trigger    {}: {} cells behind, {} parked, {} runners, {} shards unowned",
                    t.name, t.lag_cells, t.parked, t.runners, t.unowned_shards
                );
            }
        }
        Section::Unavailable { error } => {
            let _ = writeln!(out, "triggers   unavailable: {error}");
        }
    }
    if let Some(error) = unavailable(&s.indexes) {
        let _ = writeln!(out, "indexes    unavailable: {error}");
    }
    if let Some(indexes) = s.indexes.get() {
        for i in indexes {
            let _ = writeln!(
                out,
                "index      {} v{} {}{}",
                i.name,
                i.version,
                i.state,
                i.lag_cells
                    .map(|l| format!(", {l} cells behind"))
                    .unwrap_or_default()
            );
        }
    }
    out
}
