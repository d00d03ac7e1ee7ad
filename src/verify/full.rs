//! `verify full`: the full diff run chunk by chunk, with progress.

use super::*;

pub(super) async fn full(
    config: &config::Config,
    pool: &sqlx::PgPool,
    args: FullArgs,
) -> anyhow::Result<()> {
    let mut flags = crate::Overrides::new(config)
        .set(
            "chunk-size",
            "verify.chunk_size",
            args.chunk_size,
            |c, v| c.verify.chunk_size = v,
        )
        .set("workers", "verify.workers", args.workers, |c, v| {
            c.verify.workers = v
        })
        .check()?;
    flags.verify.strict |= args.strict;
    let (chunk_size, workers) = (flags.verify.chunk_size, flags.verify.workers);
    let legacy = legacy::LegacyStore::connect(config).await?;
    let schemaless = MySqlStore::connect(config)?;
    if !backfill::status::read(pool).await?.complete() {
        eprintln!(
            "warning: the backfill is not complete: rows it has not copied yet are recorded as missing from Schemaless"
        );
    }
    take_lost_writes(pool, &schemaless).await;
    let scope = verifier::full::Scope {
        columns: args.columns.clone(),
        ids: args.ids,
    };
    let id = verifier::full::plan_scoped(
        pool,
        &legacy,
        schemaless.topology().shard_count,
        chunk_size,
        args.restart,
        &scope,
    )
    .await
    .map_err(|e| match e {
        verifier::Error::Usage(_) => crate::UsageError(e.to_string()).into(),
        other => anyhow::Error::from(other),
    })?;
    let before = verifier::full::status(pool, id).await?;
    eprintln!(
        "full diff run {id}: {} of {} chunks done before, {workers} workers{}",
        before.done,
        before.chunks,
        if flags.verify.strict {
            ", strict (every matching value read again through PostgreSQL's casts)"
        } else {
            ""
        }
    );
    let diff = Arc::new(tripstore::triage::full_diff(&legacy, &schemaless, &flags));
    let progress = Arc::new(Progress::default());
    let cancel = CancellationToken::new();
    let started = Instant::now();
    let mut task = {
        let (diff, progress, cancel) = (diff.clone(), progress.clone(), cancel.clone());
        tokio::spawn(async move { diff.run(id, workers, &progress, &cancel).await })
    };
    let mut bar = crate::progress::Bar::new(args.plain);
    let mut tick = tokio::time::interval(bar.tick());
    tick.tick().await;
    let status = loop {
        tokio::select! {
            result = &mut task => break result??,
            _ = crate::shutdown::stopped() => {
                cancel.cancel();
                bar.println("stopping: `verify full` again continues this run");
            }
            _ = tick.tick() => {
                let secs = started.elapsed().as_secs_f64().max(1e-3);
                let chunks = progress.chunks.load(Ordering::Relaxed) + before.done;
                let parents = progress.parents.load(Ordering::Relaxed);
                let eta = if chunks > before.done {
                    crate::clock::eta(
                        (before.chunks - chunks.min(before.chunks)) as f64 * secs
                            / (chunks - before.done) as f64,
                    )
                } else {
                    "--".into()
                };
                bar.show(
                    chunks,
                    before.chunks,
                    format!(
                        "chunks, {parents} parents ({:.0}/s), {} row keys swept, {} mismatches, ETA {eta}",
                        parents as f64 / secs,
                        progress.swept.load(Ordering::Relaxed),
                        progress.mismatches.load(Ordering::Relaxed)
                    ),
                );
            }
        }
    };
    bar.finish();
    let secs = started.elapsed().as_secs_f64().max(1e-3);
    let parents = progress.parents.load(Ordering::Relaxed);
    let found = progress.mismatches.load(Ordering::Relaxed);
    println!(
        "run {}: {} of {} chunks{}, {} parents, {} cells compared, {} Schemaless row keys swept, {} mismatches{}",
        status.id,
        status.done,
        status.chunks,
        sweep_count(status.strict_chunks, status.sweeps),
        status.parents,
        status.cells,
        status.swept_rows,
        status.mismatches,
        if status.sample_row_keys.is_empty() {
            String::new()
        } else {
            format!(" (e.g. {})", status.sample_row_keys.join(", "))
        }
    );
    println!(
        "this process: {parents} parents in {secs:.1}s ({:.0} parents/s), {found} mismatches",
        parents as f64 / secs
    );
    if args.json {
        /// `verify full --json`: the run's figures and this process's rate.
        #[derive(serde::Serialize)]
        struct FullJson<'a> {
            run: i64,
            chunks: u64,
            done: u64,
            parents: u64,
            cells: u64,
            mismatches: u64,
            sample_row_keys: &'a [String],
            strict_chunks: u64,
            sweeps: u64,
            swept_rows: u64,
            parents_per_s: f64,
        }
        let json = FullJson {
            run: status.id,
            chunks: status.chunks,
            done: status.done,
            parents: status.parents,
            cells: status.cells,
            mismatches: status.mismatches,
            sample_row_keys: &status.sample_row_keys,
            strict_chunks: status.strict_chunks,
            sweeps: status.sweeps,
            swept_rows: status.swept_rows,
            parents_per_s: parents as f64 / secs,
        };
        println!("{}", serde_json::to_string(&json)?);
    }
    legacy.close().await;
    schemaless.close().await;
    if status.mismatches > 0 {
        anyhow::bail!(
            "the stores differ in {} (row, column)s: `mezzanine verify report` lists them, `mezzanine verify repair --all` rewrites them",
            status.mismatches
        );
    }
    Ok(())
}

/// What a run's chunks were, after their count: ` (N strict, M shard
/// sweeps)`; the sweeps look for rows only Schemaless has.
pub(super) fn sweep_count(strict: u64, sweeps: u64) -> String {
    let mut parts = Vec::new();
    if strict > 0 {
        parts.push(format!("{strict} strict"));
    }
    if sweeps > 0 {
        parts.push(format!("{sweeps} shard sweeps"));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!(" ({})", parts.join(", "))
    }
}
