//! `verify report`: the figures the gates read, and the open
//! mismatches.

use super::full::sweep_count;
use super::*;

pub(super) async fn report(
    config: &config::Config,
    pool: &sqlx::PgPool,
    args: ReportArgs,
) -> anyhow::Result<()> {
    let since = if args.all_time {
        None
    } else {
        tripstore::gates::verification_window(pool).await?
    };
    let legacy = legacy::LegacyStore::connect(config).await?;
    let schemaless = MySqlStore::connect(config)?;
    take_lost_writes(pool, &schemaless).await;
    schemaless.close().await;
    let report = verifier::report::read(pool, Some(&legacy), since).await?;
    let mismatches = verifier::store::mismatches(pool, true, None, args.limit).await?;
    let last_run = verifier::full::latest(pool).await?;
    let gates = &config.gates;
    let passes = report.open_mismatches == 0
        && report.totals.samples >= gates.min_samples
        && report.upper_bound <= gates.max_mismatch_upper_bound
        && report
            .coverage
            .iter()
            .all(|c| c.share() >= gates.min_coverage);
    legacy.close().await;
    if args.json {
        /// `verify report --json`.
        #[derive(serde::Serialize)]
        struct ReportJson<'a> {
            report: &'a verifier::report::Report,
            open: &'a [verifier::store::Mismatch],
            full_diff: Option<&'a verifier::full::RunStatus>,
            gates_pass: bool,
        }
        let json = ReportJson {
            report: &report,
            open: &mismatches,
            full_diff: last_run.as_ref(),
            gates_pass: passes,
        };
        println!("{}", serde_json::to_string(&json)?);
        return Ok(());
    }
    let t = &report.totals;
    println!(
        "window: {}",
        match since {
            Some(s) => format!("samples since {} (the gates' window)", crate::clock::utc(s)),
            None => "all samples".into(),
        }
    );
    println!(
        "samples {}  matches {}  mismatches {}  (transient {}, unsettled {}, not yet backfilled {}, replay errors {}, dropped {})",
        t.samples, t.matches, t.mismatches, t.transient, t.unsettled, t.pending_backfill, t.replay_errors, t.dropped
    );
    println!(
        "mismatch rate {:.6}, 95% upper bound {:.6} (gates.max_mismatch_upper_bound {})",
        report.mismatch_rate, report.upper_bound, gates.max_mismatch_upper_bound
    );
    let mut table =
        crate::table::Table::new(&["COLUMN", "SAMPLES", "MATCHES", "MISMATCHES"]).right(&[1, 2, 3]);
    for c in &report.by_column {
        table.row([
            c.column.to_string(),
            c.counts.samples.to_string(),
            c.counts.matches.to_string(),
            c.counts.mismatches.to_string(),
        ]);
    }
    table.print("");
    println!("coverage (parent rows verified since their last write):");
    for c in &report.coverage {
        println!(
            "  {:<18} {} of {} ({:.2}%)",
            c.column,
            c.verified,
            c.rows,
            c.share() * 100.0
        );
    }
    if let Some(run) = &last_run {
        println!(
            "full diff run {}: {} of {} chunks{}, {} parents, {} Schemaless row keys swept, {} mismatches{}",
            run.id,
            run.done,
            run.chunks,
            sweep_count(run.strict_chunks, run.sweeps),
            run.parents,
            run.swept_rows,
            run.mismatches,
            if run.finished_at.is_some() {
                ", finished"
            } else {
                ", unfinished"
            }
        );
    }
    println!("open mismatches: {}", report.open_mismatches);
    for m in &mismatches {
        println!(
            "  {} {} ({} {}, seen {}x, last {}): legacy {} | schemaless {}",
            m.row_key,
            m.column,
            m.source,
            m.read_kind,
            m.occurrences,
            crate::clock::utc(m.last_seen),
            m.legacy,
            m.schemaless
        );
    }
    println!(
        "gates (samples >= {}, upper bound <= {}, no open mismatch, coverage >= {}): {}",
        gates.min_samples,
        gates.max_mismatch_upper_bound,
        gates.min_coverage,
        if passes { "PASS" } else { "NOT YET" }
    );
    Ok(())
}
