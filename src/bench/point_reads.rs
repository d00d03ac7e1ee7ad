//! The point reads of `mezzanine bench cells`: `get_cell_latest` against
//! two raw statements on held connections (a primary-key read, and the
//! latest-cell read the layout needs), timed in rotation, then each kind's
//! client CPU in runs of its own.

use std::time::{Duration, Instant};

use anyhow::Context;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use schemaless::mysql::Topology;
use schemaless::{routing, Cell, CellStore, MySqlStore, ReadFrom};
use sqlx::{AssertSqlSafe, Row};

use super::cpu::process_cpu;
use super::stats::Latencies;

/// The timed reads of one run.
pub(super) struct Reads {
    /// `get_cell_latest`.
    pub ours: Latencies,
    /// A raw primary-key SELECT of the same cell.
    pub raw_pk: Latencies,
    /// A raw SELECT of the latest cell of (row, column): the statement
    /// the layout needs for this read, without the store around it.
    pub raw_latest: Latencies,
    /// Client CPU per read of each kind, µs, in the same order.
    pub cpu: [f64; 3],
}

/// Times `get_cell_latest`, a raw primary-key SELECT and a raw
/// latest-cell SELECT of the same random cells, rotating which goes first.
pub(super) async fn time_reads(
    store: &MySqlStore,
    topology: &Topology,
    cells: &[Cell],
    reads: usize,
) -> anyhow::Result<Reads> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut sample: Vec<&Cell> = cells.iter().collect();
    sample.shuffle(&mut rng);
    sample.truncate(reads);
    // The primary-key side needs each cell's primary key.
    let mut targets = Vec::with_capacity(sample.len());
    for cell in &sample {
        let found = store
            .get_cell(&cell.key, ReadFrom::Master)
            .await?
            .context("a written cell is missing")?;
        targets.push((
            *cell,
            routing::shard_of(&cell.key.row_key, topology.shard_count),
            found.added_id,
        ));
    }
    let statements = |shape: &str| -> Vec<String> {
        (0..topology.shard_count)
            .map(|s| {
                format!(
                    "SELECT added_id, row_key, column_name, ref_key, body, created_at FROM `{}`.`entity` WHERE {shape}",
                    topology.database(s)
                )
            })
            .collect()
    };
    let pk_sql = statements("added_id = ?");
    let latest_sql = statements("row_key = ? AND column_name = ? ORDER BY ref_key DESC LIMIT 1");
    // The raw sides hold one connection per cluster for the whole run:
    // one statement is one round trip, with none of a pool's bookkeeping
    // (sqlx pings a connection on its way back into its pool).
    let mut held = Vec::with_capacity(topology.clusters.len());
    for cluster in &topology.clusters {
        held.push(cluster.master().pool.acquire().await?);
    }
    let held = tokio::sync::Mutex::new(held);
    let cluster_index = |shard: u32| {
        topology
            .cluster_index(shard)
            .context("a shard of no cluster")
    };
    let raw = RawReads {
        held: &held,
        pk_sql: &pk_sql,
        latest_sql: &latest_sql,
        cluster_of: &cluster_index,
    };
    let warmup = targets.len().min(1000);
    let mut timed: [Vec<Duration>; 3] = Default::default();
    for (i, (cell, shard, added_id)) in targets.iter().enumerate() {
        for k in 0..3 {
            let kind = (i + k) % 3;
            let elapsed = raw.read(store, kind, cell, *shard, *added_id).await?;
            if i >= warmup || targets.len() <= warmup {
                timed[kind].push(elapsed);
            }
        }
    }
    // The client's CPU per read of each kind, in runs of one kind (CPU
    // cannot be told apart when they interleave).
    let mut cpu = [0.0; 3];
    for (kind, slot) in cpu.iter_mut().enumerate() {
        let started = process_cpu();
        for (cell, shard, added_id) in &targets {
            raw.read(store, kind, cell, *shard, *added_id).await?;
        }
        *slot = process_cpu().saturating_sub(started).as_secs_f64() * 1e6 / targets.len() as f64;
    }
    let [ours, raw_pk, raw_latest] = timed.map(Latencies::new);
    Ok(Reads {
        ours,
        raw_pk,
        raw_latest,
        cpu,
    })
}

/// What the raw reads of [`time_reads`] need.
struct RawReads<'a, F> {
    held: &'a tokio::sync::Mutex<Vec<sqlx::pool::PoolConnection<sqlx::MySql>>>,
    pk_sql: &'a [String],
    latest_sql: &'a [String],
    cluster_of: &'a F,
}

impl<F: Fn(u32) -> anyhow::Result<usize>> RawReads<'_, F> {
    /// One read of `kind` (0 ours, 1 raw by primary key, 2 raw latest),
    /// timed.
    async fn read(
        &self,
        store: &MySqlStore,
        kind: usize,
        cell: &Cell,
        shard: u32,
        added_id: u64,
    ) -> anyhow::Result<Duration> {
        if kind == 0 {
            let t = Instant::now();
            let got = store
                .get_cell_latest(&cell.key.row_key, &cell.key.column, ReadFrom::Master)
                .await?;
            let elapsed = t.elapsed();
            anyhow::ensure!(
                got.is_some_and(|g| g.cell == *cell),
                "get_cell_latest returned another cell"
            );
            return Ok(elapsed);
        }
        let mut held = self.held.lock().await;
        let connection = &mut *held[(self.cluster_of)(shard)?];
        let t = Instant::now();
        let row = if kind == 1 {
            sqlx::query(AssertSqlSafe(self.pk_sql[shard as usize].clone()))
                .bind(added_id)
                .fetch_one(connection)
                .await?
        } else {
            sqlx::query(AssertSqlSafe(self.latest_sql[shard as usize].clone()))
                .bind(cell.key.row_key.as_bytes().to_vec())
                .bind(cell.key.column.as_str().to_string())
                .fetch_one(connection)
                .await?
        };
        let elapsed = t.elapsed();
        let found: u64 = row.try_get(0)?;
        anyhow::ensure!(found == added_id, "a raw read found another cell");
        let _body: Vec<u8> = row.try_get(4)?;
        Ok(elapsed)
    }
}
