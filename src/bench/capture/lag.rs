//! The lag: how long a captured change takes to be readable in
//! Schemaless, probed write by write.

use super::*;

/// `rate` trip updates per second for `length`, paced; one in ten probed
/// until its new version is readable in Schemaless. Returns the lags, the
/// writes made, the time taken, and the probes that timed out.
pub(super) async fn measure_lag(
    pool: &PgPool,
    schemaless: &MySqlStore,
    rate: u64,
    length: Duration,
    trips: u64,
) -> anyhow::Result<(Vec<Duration>, u64, Duration, u64)> {
    let writers = rate.div_ceil(100).clamp(1, 16);
    let written = Arc::new(AtomicU64::new(0));
    let timeouts = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..writers)
        .map(|w| {
            let (pool, schemaless, written, timeouts) = (
                pool.clone(),
                schemaless.clone(),
                written.clone(),
                timeouts.clone(),
            );
            let every = Duration::from_secs_f64(writers as f64 / rate as f64);
            tokio::spawn(async move {
                let mut rng = SmallRng::seed_from_u64(77 + w);
                let mut tick = tokio::time::interval(every);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
                let mut probes = Vec::new();
                let mut n = 0u64;
                while started.elapsed() < length {
                    tick.tick().await;
                    let id = rng.random_range(1..=trips) as i64;
                    let (uuid, version): (uuid::Uuid, i64) = sqlx::query_as(
                        "UPDATE trips SET status = 'moving', version = version + 1 WHERE id = $1 RETURNING uuid, version",
                    )
                    .bind(id)
                    .fetch_one(&pool)
                    .await?;
                    let committed = Instant::now();
                    written.fetch_add(1, Ordering::Relaxed);
                    n += 1;
                    if n.is_multiple_of(10) {
                        let (schemaless, timeouts) = (schemaless.clone(), timeouts.clone());
                        probes.push(tokio::spawn(async move {
                            probe(&schemaless, RowKey::from(uuid), version, committed, &timeouts)
                                .await
                        }));
                    }
                }
                let mut lags = Vec::new();
                for p in probes {
                    lags.extend(p.await??);
                }
                Ok::<_, anyhow::Error>(lags)
            })
        })
        .collect();
    let mut lags = Vec::new();
    for task in tasks {
        lags.extend(task.await??);
    }
    Ok((
        lags,
        written.load(Ordering::Relaxed),
        started.elapsed(),
        timeouts.load(Ordering::Relaxed),
    ))
}

/// Reads `row`'s BASE from the master every 2 ms until its ref key
/// reaches `version`: the time since `committed`, or `None` after 10 s.
pub(super) async fn probe(
    schemaless: &MySqlStore,
    row: RowKey,
    version: i64,
    committed: Instant,
    timeouts: &AtomicU64,
) -> anyhow::Result<Option<Duration>> {
    let base = Column::new("BASE")?;
    while committed.elapsed() < Duration::from_secs(10) {
        if let Some(cell) = schemaless
            .get_cell_latest(&row, &base, ReadFrom::Master)
            .await?
        {
            if cell.cell.key.ref_key.get() >= version {
                return Ok(Some(committed.elapsed()));
            }
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    timeouts.fetch_add(1, Ordering::Relaxed);
    Ok(None)
}
