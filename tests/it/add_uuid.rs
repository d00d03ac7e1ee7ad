//! `mezzanine legacy add-uuid` on a live table: writers keep inserting and
//! updating throughout, the command is killed (-9) halfway and rerun, and
//! every row, old and new, ends with its own UUID.

use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::harness::{example_layout, LegacyDb};

const TRIPS: u64 = 20_000;

/// Inserts and updates trips until told to stop; counts what it did.
async fn writer(pool: sqlx::PgPool, stop: Arc<AtomicBool>, done: Arc<AtomicU64>, n: u64) {
    let mut i = n;
    while !stop.load(Ordering::Relaxed) {
        i += 7919;
        // Written by code that knows nothing of UUIDs: no uuid column.
        sqlx::query(
            "INSERT INTO trips (driver_uuid, rider_uuid, city_id, status, currency, requested_at)
             VALUES (gen_random_uuid(), gen_random_uuid(), 1, 'requested', 'EUR', now())",
        )
        .execute(&pool)
        .await
        .expect("inserts keep working");
        sqlx::query("UPDATE trips SET status = 'touched', version = version + 1 WHERE id = $1")
            .bind((i % TRIPS) as i64 + 1)
            .execute(&pool)
            .await
            .expect("updates keep working");
        done.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

fn add_uuid(config: &std::path::Path, pause_ms: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_mezzanine"));
    command.args([
        "--config",
        config.to_str().unwrap(),
        "legacy",
        "add-uuid",
        "--batch",
        "100",
        "--pause-ms",
        pause_ms,
    ]);
    command
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_uuid_survives_a_kill_and_concurrent_writers() {
    let db = LegacyDb::new(&legacy::trips::ddl("public", None), &example_layout()).await;
    legacy::trips::seed(&db.pool, "public", "uuid", TRIPS, 3, |_| {})
        .await
        .unwrap();
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), &db.config_text).unwrap();
    // Before add-uuid the layout is refused, naming the fix.
    let err = legacy::LegacyStore::connect(&db.config)
        .await
        .err()
        .unwrap();
    assert!(err.to_string().contains("legacy add-uuid"), "{err}");

    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let writers: Vec<_> = (0..3)
        .map(|n| tokio::spawn(writer(db.pool.clone(), stop.clone(), done.clone(), n)))
        .collect();

    // The first run, killed once it has filled part of the table.
    let mut first = add_uuid(file.path(), "5").spawn().unwrap();
    let mut filled = 0;
    for _ in 0..3000 {
        filled = sqlx::query_scalar::<_, i64>(
            "SELECT filled FROM mezzanine.add_uuid_progress WHERE table_name = 'public.trips'",
        )
        .fetch_optional(&db.pool)
        .await
        .unwrap_or(None)
        .unwrap_or(0);
        if filled >= 3000 {
            break;
        }
        assert!(
            first.try_wait().unwrap().is_none(),
            "add-uuid ended before it could be killed"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(filled >= 3000, "add-uuid made no progress");
    first.kill().unwrap();
    first.wait().unwrap();
    let missing = db
        .count("SELECT count(*) FROM trips WHERE uuid IS NULL")
        .await;
    assert!(missing > 0, "the kill came too late to test a resume");

    // The rerun resumes from the recorded position, writers still going.
    let out = tokio::task::spawn_blocking({
        let path = file.path().to_path_buf();
        move || add_uuid(&path, "0").output().unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("column present") && stdout.contains("NOT NULL set"),
        "{stdout}"
    );
    let resumed_from: i64 = sqlx::query_scalar(
        "SELECT filled FROM mezzanine.add_uuid_progress WHERE table_name = 'public.trips' AND finished_at IS NOT NULL",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert!(resumed_from >= filled);

    // A few more writes after the end (rows inserted once the column is
    // NOT NULL must get their UUID from the default), then stop.
    let at_end = done.load(Ordering::Relaxed);
    for _ in 0..500 {
        if done.load(Ordering::Relaxed) >= at_end + 5 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        done.load(Ordering::Relaxed) >= at_end + 5,
        "the writers stopped writing after add-uuid"
    );
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.await.unwrap();
    }
    assert!(done.load(Ordering::Relaxed) > 10, "the writers barely ran");

    let rows = db.count("SELECT count(*) FROM trips").await;
    assert!(rows > TRIPS as i64, "no concurrent inserts landed");
    assert_eq!(
        db.count("SELECT count(*) FROM trips WHERE uuid IS NULL")
            .await,
        0
    );
    assert_eq!(
        db.count("SELECT count(DISTINCT uuid) FROM trips").await,
        rows
    );
    assert_eq!(
        db.count(
            "SELECT count(*) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
             WHERE c.relname = 'trips_uuid_key' AND i.indisunique AND i.indisvalid"
        )
        .await,
        1
    );
    assert_eq!(
        db.count(
            "SELECT count(*) FROM pg_attribute WHERE attrelid = 'trips'::regclass AND attname = 'uuid' AND attnotnull"
        )
        .await,
        1
    );
    assert_eq!(
        db.count("SELECT count(*) FROM pg_trigger WHERE tgname = 'mezzanine_fill_uuid'")
            .await,
        0
    );
    // The layout is now accepted, and a third run has nothing to do.
    legacy::LegacyStore::connect(&db.config)
        .await
        .unwrap()
        .close()
        .await;
    let again = add_uuid(file.path(), "0").output().unwrap();
    let again = String::from_utf8_lossy(&again.stdout);
    assert!(
        again.contains("0 rows filled")
            && again.contains("index present")
            && again.contains("already set"),
        "{again}"
    );
}
