//! `mezzanine backup` and `restore` on real servers: a backup taken under
//! write load restored into a fresh cluster and compared with the source
//! as of each shard's position, a point-in-time restore, a restore cut
//! short and continued, and bad input changing nothing.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use devcluster::{DevCluster, Spec};
use schemaless::mysql::backup::dump::missing_ranges;
use schemaless::mysql::backup::format::{ContentDigest, Record};
use schemaless::mysql::backup::Manifest;
use schemaless::{CellStore, MySqlStore};
use sqlx::Row;

use crate::harness::{cell, cluster, config_file, mezzanine, wait_past};

const SHARDS: u32 = 8;

/// A fresh instance on the shared cluster (shards over clusters a and b),
/// with its config file.
async fn source(name: &str) -> (MySqlStore, tempfile::NamedTempFile) {
    let name = format!("{name}{}", std::process::id() % 100_000);
    let text = cluster().config_toml(&name, SHARDS);
    let file = config_file(&text);
    let config = config::Config::parse(&text, "backup.toml").unwrap();
    let topology = schemaless::mysql::Topology::from_config(&config).unwrap();
    schemaless::mysql::schema::apply(&topology).await.unwrap();
    topology.close().await;
    (MySqlStore::connect(&config).unwrap(), file)
}

/// Every entity row of `shard` on its master, as stored, in added_id order.
async fn rows(store: &MySqlStore, shard: u32) -> Vec<Record> {
    let topology = store.topology();
    let node = topology.cluster(shard).unwrap().master();
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "SELECT added_id, row_key, column_name, ref_key, body, created_at FROM `{}`.`entity` ORDER BY added_id",
        topology.database(shard)
    )))
    .fetch_all(&node.pool)
    .await
    .unwrap()
    .iter()
    .map(|row| Record {
        added_id: row.get(0),
        row_key: row.get::<Vec<u8>, _>(1).try_into().unwrap(),
        column: row.get(2),
        ref_key: row.get(3),
        body: row.get(4),
        created_at: row.get(5),
    })
    .collect()
}

fn run(config: &Path, args: &[&str]) -> std::process::Output {
    mezzanine(config, args).output().unwrap()
}

fn ok(config: &Path, args: &[&str]) -> String {
    let output = run(config, args);
    assert!(
        output.status.success(),
        "mezzanine {args:?} failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// What the source held of `shard` as of the backup: every row up to the
/// position that the snapshot saw, i.e. not among its missing ids.
fn as_of(source: &[Record], position: u64, missing: &str, until: Option<u64>) -> Vec<Record> {
    let missing = missing_ranges(missing);
    let last = until.map_or(position, |u| u.min(position));
    source
        .iter()
        .filter(|r| r.added_id <= last)
        .filter(|r| !missing.iter().any(|(a, b)| (*a..=*b).contains(&r.added_id)))
        .cloned()
        .collect()
}

/// A config of `instance` on `cluster`, a single server: its writes are
/// on one host only, which the config must say.
fn restore_config(cluster: &DevCluster, instance: &str) -> tempfile::NamedTempFile {
    config_file(&format!(
        "{}\n[storage]\ndurability = \"one_host\"\n",
        cluster.config_toml(instance, SHARDS)
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_under_writes_restores_exactly_into_a_fresh_cluster() {
    let (store, source_config) = source("bk").await;
    let body = |n: u128| serde_json::json!({ "n": n as u64, "pad": "x".repeat((n % 300) as usize), "f": 0.1 });
    let first: Vec<_> = (0..1500u128)
        .map(|n| {
            cell(
                n,
                if n % 3 == 0 { "BASE" } else { "STATUS" },
                (n % 5) as i64,
                body(n),
            )
        })
        .collect();
    for batch in first.chunks(100) {
        for r in store.put_cells(batch.to_vec()).await.unwrap() {
            r.unwrap();
        }
    }

    // Writers keep going while the backup runs.
    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(AtomicU64::new(0));
    let writers: Vec<_> = (0..2u128)
        .map(|w| {
            let store = store.clone();
            let stop = stop.clone();
            let acked = acked.clone();
            tokio::spawn(async move {
                let mut n = 100_000 * (w + 1);
                let mut written = 0;
                while !stop.load(Ordering::Relaxed) {
                    let batch: Vec<_> = (n..n + 10).map(|m| cell(m, "LIVE", 1, body(m))).collect();
                    n += 10;
                    for r in store.put_cells(batch).await.unwrap() {
                        r.unwrap();
                    }
                    written += 10;
                    acked.fetch_add(10, Ordering::Relaxed);
                }
                written
            })
        })
        .collect();
    wait_past(&acked, 0, "the writers' first cells").await;
    let dir = tempfile::tempdir().unwrap();
    let backup_dir = dir.path().join("b1");
    let backup_path = backup_dir.to_str().unwrap().to_string();
    let out = ok(
        source_config.path(),
        &["backup", "--to", &backup_path, "--parallel", "3", "--plain"],
    );
    assert!(out.contains("8 shards"), "{out}");
    stop.store(true, Ordering::Relaxed);
    let mut live = 0;
    for w in writers {
        live += w.await.unwrap();
    }
    assert!(live > 0, "the writers wrote nothing during the backup");
    let manifest = Manifest::load(&backup_dir).unwrap();
    assert_eq!(manifest.shards.len(), SHARDS as usize);
    // Every cell acknowledged before the backup began is in it.
    let backed_up: u64 = manifest.shards.iter().map(|e| e.cells).sum();
    assert!(backed_up >= 1500, "{backed_up} cells backed up");
    // Snapshots are taken on minions, sparing the masters.
    let masters: Vec<String> = store
        .topology()
        .clusters
        .iter()
        .map(|c| c.master().label.clone())
        .collect();
    assert!(
        manifest.shards.iter().all(|e| !masters.contains(&e.source)),
        "shards read from a master: {:?}",
        manifest
            .shards
            .iter()
            .map(|e| &e.source)
            .collect::<Vec<_>>()
    );
    let verified = ok(source_config.path(), &["backup", "verify", &backup_path]);
    assert!(verified.contains("0 damaged"), "{verified}");

    // A fresh cluster of one master holds the restore.
    let fresh = DevCluster::private(Spec::free_ports(&["r"], 0).unwrap())
        .await
        .unwrap();
    let target_config = restore_config(&fresh, "restored");
    let out = ok(
        source_config.path(),
        &[
            "restore",
            "--from",
            &backup_path,
            "--to-config",
            target_config.path().to_str().unwrap(),
            "--plain",
        ],
    );
    assert!(out.contains("each read back and matching"), "{out}");
    let target = MySqlStore::connect(&config::Config::load(target_config.path()).unwrap()).unwrap();
    let mut late = 0;
    for entry in &manifest.shards {
        let source_rows = rows(&store, entry.shard).await;
        let expected = as_of(&source_rows, entry.position, &entry.missing, None);
        late += source_rows
            .iter()
            .filter(|r| r.added_id <= entry.position)
            .count()
            - expected.len();
        let restored = rows(&target, entry.shard).await;
        assert_eq!(restored.len(), expected.len(), "shard {}", entry.shard);
        assert!(
            restored == expected,
            "shard {} differs from the source as of {}",
            entry.shard,
            entry.position
        );
        let mut digest = ContentDigest::default();
        expected.iter().for_each(|r| digest.add(r));
        assert_eq!(
            digest.finish(),
            entry.content_sha256,
            "shard {}",
            entry.shard
        );
    }
    // Only writes in flight as a snapshot was taken can be after it
    // despite a lower id: a handful, never the bulk.
    assert!(
        late <= 40,
        "{late} cells below a position missing from the backup"
    );
    // Cells read through the API come back equal, and the restored
    // instance takes new writes after the restored ids.
    // Every cell acknowledged before the backup began is in it (a minion
    // is read only once it has applied what its master had then).
    for c in &first {
        let got = target
            .get_cell(&c.key, schemaless::ReadFrom::Master)
            .await
            .unwrap()
            .expect("a restored cell");
        assert_eq!(got.cell, *c);
    }
    let new = cell(999_999, "AFTER", 1, serde_json::json!({"after": true}));
    let shard = schemaless::routing::shard_of(&new.key.row_key, SHARDS);
    target.put_cells(vec![new.clone()]).await.unwrap()[0]
        .clone()
        .unwrap();
    let after = rows(&target, shard).await;
    let entry = manifest.shard(shard).unwrap();
    assert!(after.last().unwrap().added_id > entry.position);

    // Restoring again into the now non-empty instance is refused and
    // changes nothing.
    let again = run(
        source_config.path(),
        &[
            "restore",
            "--from",
            &backup_path,
            "--to-config",
            target_config.path().to_str().unwrap(),
            "--until-added-id",
            "5",
        ],
    );
    assert_eq!(again.status.code(), Some(2), "{again:?}");
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert!(stderr.contains("is not empty"), "{stderr}");
    assert_eq!(rows(&target, shard).await, after);

    // Point in time: each shard up to a third of its position.
    let pit_config = restore_config(&fresh, "earlier");
    let mut until = BTreeMap::new();
    let mut spec = Vec::new();
    for entry in &manifest.shards {
        let u = entry.position / 3;
        until.insert(entry.shard, u);
        spec.push(format!("{}:{u}", entry.shard));
    }
    let spec = spec.join(",");
    let out = ok(
        source_config.path(),
        &[
            "restore",
            "--from",
            &backup_path,
            "--to-config",
            pit_config.path().to_str().unwrap(),
            "--until-added-id",
            &spec,
            "--json",
        ],
    );
    let report: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    let pit = MySqlStore::connect(&config::Config::load(pit_config.path()).unwrap()).unwrap();
    for entry in &manifest.shards {
        let expected = as_of(
            &rows(&store, entry.shard).await,
            entry.position,
            &entry.missing,
            Some(until[&entry.shard]),
        );
        assert!(
            !expected.is_empty(),
            "shard {} would restore nothing",
            entry.shard
        );
        assert!(
            rows(&pit, entry.shard).await == expected,
            "shard {}",
            entry.shard
        );
        let reported = &report["shards"][entry.shard as usize];
        assert_eq!(reported["whole"], false);
        assert_eq!(reported["cells"], expected.len() as u64);
    }
    store.close().await;
    target.close().await;
    pit.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_cut_short_continues_and_bad_input_changes_nothing() {
    let (store, source_config) = source("bkbad").await;
    let cells: Vec<_> = (0..400u128)
        .map(|n| cell(n, "BASE", 1, serde_json::json!({ "n": n as u64 })))
        .collect();
    store.put_cells(cells).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    let backup_dir = path("b");
    ok(
        source_config.path(),
        &["backup", "--to", &backup_dir, "--shards", "0-3"],
    );
    let manifest = Manifest::load(Path::new(&backup_dir)).unwrap();
    assert_eq!(
        manifest.shards.iter().map(|e| e.shard).collect::<Vec<_>>(),
        vec![0, 1, 2, 3]
    );

    // Into a directory that is not empty: refused.
    let refused = run(source_config.path(), &["backup", "--to", &backup_dir]);
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    assert!(String::from_utf8_lossy(&refused.stderr).contains("not empty"));

    // A restore of a shard count other than the backup's: refused.
    let other_count = config_file(&cluster().config_toml("bkcount", 16));
    let refused = run(
        source_config.path(),
        &[
            "restore",
            "--from",
            &backup_dir,
            "--to-config",
            other_count.path().to_str().unwrap(),
        ],
    );
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    assert!(String::from_utf8_lossy(&refused.stderr).contains("8 shards"));

    // A point in time naming a shard the backup does not hold: refused.
    let target_name = format!("bkres{}", std::process::id() % 100_000);
    let target_config = config_file(&cluster().config_toml(&target_name, SHARDS));
    let target_path = target_config.path().to_str().unwrap().to_string();
    let refused = run(
        source_config.path(),
        &[
            "restore",
            "--from",
            &backup_dir,
            "--to-config",
            &target_path,
            "--until-added-id",
            "6:1",
        ],
    );
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    let refused = run(
        source_config.path(),
        &[
            "restore",
            "--from",
            &backup_dir,
            "--to-config",
            &target_path,
            "--until-added-id",
            "x",
        ],
    );
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");

    // A damaged copy: one byte of one file changed.
    let damaged_dir = path("damaged");
    std::fs::create_dir(&damaged_dir).unwrap();
    for entry in std::fs::read_dir(&backup_dir).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(
            entry.path(),
            Path::new(&damaged_dir).join(entry.file_name()),
        )
        .unwrap();
    }
    let victim = Path::new(&damaged_dir).join(&manifest.shards[2].file);
    let mut bytes = std::fs::read(&victim).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x40;
    std::fs::write(&victim, bytes).unwrap();
    let verify = run(
        source_config.path(),
        &["backup", "verify", &damaged_dir, "--quick"],
    );
    assert_eq!(verify.status.code(), Some(1));
    let out = String::from_utf8_lossy(&verify.stdout);
    assert!(
        out.contains("checksum mismatch") && out.contains("1 damaged"),
        "{out}"
    );
    let refused = run(
        source_config.path(),
        &[
            "restore",
            "--from",
            &damaged_dir,
            "--to-config",
            &target_path,
        ],
    );
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
    assert!(String::from_utf8_lossy(&refused.stderr).contains("is damaged"));
    // Nothing was created for the target: not even its databases.
    let node = store.topology().clusters[0].master();
    let created: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name LIKE CONCAT(?, '\\_%')",
    )
    .bind(&target_name)
    .fetch_one(&node.pool)
    .await
    .unwrap();
    assert_eq!(created, 0, "a refused restore created databases");
    // The manifest gone: a clear error.
    std::fs::remove_file(Path::new(&damaged_dir).join("manifest.json")).unwrap();
    let missing = run(source_config.path(), &["backup", "verify", &damaged_dir]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("not found"));

    // A restore cut short: the target keeps the first rows of shard 1
    // only, as if the process died mid-shard; the same restore again
    // continues and ends exact, another one is refused.
    ok(
        source_config.path(),
        &[
            "restore",
            "--from",
            &backup_dir,
            "--to-config",
            &target_path,
        ],
    );
    let target = MySqlStore::connect(&config::Config::load(target_config.path()).unwrap()).unwrap();
    let full = rows(&target, 1).await;
    assert!(full.len() > 10, "{} cells on shard 1", full.len());
    let keep = full[full.len() / 2].added_id;
    let node = target.topology().cluster(1).unwrap().master();
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "DELETE FROM `{}`.`entity` WHERE added_id > {keep}",
        target.topology().database(1)
    )))
    .execute(&node.pool)
    .await
    .unwrap();
    let other = run(
        source_config.path(),
        &[
            "restore",
            "--from",
            &backup_dir,
            "--to-config",
            &target_path,
            "--until-added-id",
            "3",
        ],
    );
    assert_eq!(other.status.code(), Some(2), "{other:?}");
    let out = ok(
        source_config.path(),
        &[
            "restore",
            "--from",
            &backup_dir,
            "--to-config",
            &target_path,
        ],
    );
    assert!(out.contains("continuing an earlier run"), "{out}");
    assert!(rows(&target, 1).await == full);
    for shard in 0..4 {
        assert!(
            rows(&target, shard).await == rows(&store, shard).await,
            "shard {shard}"
        );
    }
    store.close().await;
    target.close().await;
}

/// kill -9 of a restore at a moment it is writing cells: the same
/// command continues, and the target ends equal to the source.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_killed_mid_copy_is_continued_by_the_same_command() {
    let (store, source_config) = source("bkkill").await;
    // Bodies of random hex (little for gzip to take), so the restore has
    // megabytes to write and is caught in the middle.
    for round in 0..12u128 {
        let cells: Vec<_> = (0..1000u128)
            .map(|i| {
                let n = round * 1000 + i;
                let text: String = (0..48)
                    .map(|_| format!("{:016x}", rand::random::<u64>()))
                    .collect();
                cell(
                    n,
                    "BASE",
                    1,
                    serde_json::json!({ "n": n as u64, "text": text }),
                )
            })
            .collect();
        for r in store.put_cells(cells).await.unwrap() {
            r.unwrap();
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let backup_dir = dir.path().join("b").to_str().unwrap().to_string();
    ok(source_config.path(), &["backup", "--to", &backup_dir]);

    let target_name = format!("bkkilled{}", std::process::id() % 100_000);
    let target_config = config_file(&cluster().config_toml(&target_name, SHARDS));
    let target_path = target_config.path().to_str().unwrap().to_string();
    let mut child = mezzanine(
        source_config.path(),
        &[
            "restore",
            "--from",
            &backup_dir,
            "--to-config",
            &target_path,
            "--parallel",
            "1",
        ],
    )
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::null())
    .spawn()
    .unwrap();
    // Killed once the first shard has some cells and before it has all.
    let master = store.topology().cluster(0).unwrap().master();
    let database = format!("{target_name}_0000");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let count: Result<i64, _> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT COUNT(*) FROM `{database}`.`entity`"
        )))
        .fetch_one(&master.pool)
        .await;
        if count.is_ok_and(|n| n > 0) {
            break;
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "the restore ended before it was killed"
        );
        assert!(
            std::time::Instant::now() < deadline,
            "the restore never wrote"
        );
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    assert!(
        child.try_wait().unwrap().is_none(),
        "the restore ended before it was killed"
    );
    child.kill().unwrap();
    child.wait().unwrap();
    let target = MySqlStore::connect(&config::Config::load(target_config.path()).unwrap()).unwrap();
    let partial: usize = {
        let mut n = 0;
        for shard in 0..SHARDS {
            n += rows(&target, shard).await.len();
        }
        n
    };
    assert!(
        partial < 12_000,
        "the kill came after the restore had written everything"
    );

    let out = ok(
        source_config.path(),
        &[
            "restore",
            "--from",
            &backup_dir,
            "--to-config",
            &target_path,
        ],
    );
    assert!(out.contains("each read back and matching"), "{out}");
    for shard in 0..SHARDS {
        assert!(
            rows(&target, shard).await == rows(&store, shard).await,
            "shard {shard}"
        );
    }
    store.close().await;
    target.close().await;
}
