//! The write path's load: plain SQL transactions of an app's kind, timed
//! one by one, for one round.

use super::*;

/// What one round measured.
#[derive(Default)]
pub(super) struct Round {
    latencies: Vec<Duration>,
    elapsed: Duration,
}

impl Round {
    pub(super) fn add(&mut self, other: Round) {
        self.latencies.extend(other.latencies);
        self.elapsed += other.elapsed;
    }

    pub(super) fn figures(&self) -> (f64, f64, f64, usize) {
        let l = Latencies::new(self.latencies.clone());
        (
            l.percentile_us(50.0),
            l.percentile_us(99.0),
            l.len() as f64 / self.elapsed.as_secs_f64(),
            l.len(),
        )
    }
}

/// One app transaction of the mix; its latency.
pub(super) async fn write_one(
    pool: &PgPool,
    rng: &mut SmallRng,
    trips: u64,
) -> anyhow::Result<Duration> {
    let id = rng.random_range(1..=trips) as i64;
    let started = Instant::now();
    match rng.random_range(0..10) {
        0..=3 => {
            sqlx::query("UPDATE trips SET status = $1, version = version + 1 WHERE id = $2")
                .bind(["requested", "accepted", "completed", "disputed"][rng.random_range(0..4)])
                .bind(id)
                .execute(pool)
                .await?;
        }
        4..=6 => {
            sqlx::query(
                "INSERT INTO trip_notes (trip_id, seq, author, body, created_at)
                 VALUES ($1, nextval('mzbench_note_seq'), 'bench', $2, now())",
            )
            .bind(id)
            .bind(format!("note {}", rng.random::<u32>()))
            .execute(pool)
            .await?;
        }
        _ => {
            let mut tx = pool.begin().await?;
            let (trip,): (i64,) = sqlx::query_as(
                "INSERT INTO trips (driver_uuid, rider_uuid, city_id, status, fare, currency, distance_km, requested_at)
                 VALUES (gen_random_uuid(), gen_random_uuid(), $1, 'requested', 12.50, 'EUR', 4.2, now())
                 RETURNING id",
            )
            .bind(rng.random_range(1..40))
            .fetch_one(&mut *tx)
            .await?;
            sqlx::query(
                "INSERT INTO trip_notes (trip_id, seq, author, body, created_at)
                 VALUES ($1, nextval('mzbench_note_seq'), 'rider', 'first note', now())",
            )
            .bind(trip)
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
        }
    }
    Ok(started.elapsed())
}

/// `writers` writers run the mix for `length`.
pub(super) async fn write_for(
    pool: &PgPool,
    writers: u64,
    trips: u64,
    seed: u64,
    length: Duration,
) -> anyhow::Result<Round> {
    let stop = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = (0..writers)
        .map(|w| {
            let (pool, stop) = (pool.clone(), stop.clone());
            tokio::spawn(async move {
                let mut rng = SmallRng::seed_from_u64(seed.wrapping_mul(7919).wrapping_add(w));
                let mut latencies = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    latencies.push(write_one(&pool, &mut rng, trips).await?);
                }
                Ok::<_, anyhow::Error>(latencies)
            })
        })
        .collect();
    let started = Instant::now();
    tokio::time::sleep(length).await;
    stop.store(true, Ordering::Relaxed);
    let mut round = Round::default();
    for task in tasks {
        round.latencies.extend(task.await??);
    }
    round.elapsed = started.elapsed();
    Ok(round)
}
