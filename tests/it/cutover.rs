//! The cutover as a team runs it: reads moved over by share, dry runs,
//! the history, and the status screen.

use std::collections::BTreeSet;
use std::time::Duration;

use schemaless::{Body, Cell, CellStore, Column, ReadFrom, RefKey, RowKey};
use serde_json::{json, Value};
use tripstore::mode::{Gate, ReadShare, ReadsRequest};
use tripstore::{Mode, TripStore};

use crate::harness::{config_file, mezzanine, LegacyDb};

fn base(row: RowKey) -> Cell {
    Cell::new(
        row,
        Column::new("BASE").unwrap(),
        RefKey::new(1).unwrap(),
        Body::from_value(json!({
            "driver_uuid": "00000000-0000-4000-8000-000000000001",
            "rider_uuid": "00000000-0000-4000-8000-000000000002",
            "city_id": 3,
            "status": "completed",
            "currency": "EUR",
            "requested_at": "2015-03-08T07:30:00.000000Z",
        }))
        .unwrap(),
    )
}

fn reads(percent: &str, column: Option<&str>) -> ReadsRequest {
    ReadsRequest {
        bp: ReadShare::parse_percent(percent).unwrap(),
        column: column.map(str::to_string),
        by: "cutover test".into(),
        reason: Some(format!("reads at {percent}")),
    }
}

/// Waits until `facade` routes by `share` (it learns as it learns the mode).
async fn sees_share(facade: &TripStore, share: &ReadShare) {
    let mut changes = facade.read_share_changes();
    tokio::time::timeout(Duration::from_secs(10), changes.wait_for(|s| **s == *share))
        .await
        .unwrap_or_else(|_| {
            panic!(
                "the facade never saw {share:?}; it has {:?}",
                facade.read_share()
            )
        })
        .unwrap();
}

/// The rows `facade` answers from Schemaless: only Schemaless holds them.
async fn served_by_schemaless(facade: &TripStore, rows: &[RowKey]) -> BTreeSet<RowKey> {
    let column = Column::new("BASE").unwrap();
    let mut found = BTreeSet::new();
    for row in rows {
        if facade
            .get_cell_latest(row, &column, ReadFrom::Master)
            .await
            .unwrap()
            .is_some()
        {
            found.insert(*row);
        }
    }
    found
}

#[tokio::test]
async fn in_shadow_a_share_of_reads_goes_to_schemaless_by_row_key_on_every_facade() {
    let db = LegacyDb::trips().await;
    db.apply_schemaless().await;
    // The second facade polls every ten minutes: only the notification can
    // tell it of a new share.
    let notify_only = config::Config::parse(
        &db.config_text
            .replace("mode_poll_ms = 200", "mode_poll_ms = 600000"),
        "notify-only.toml",
    )
    .unwrap();
    let a = TripStore::connect(&db.config).await.unwrap();
    let b = TripStore::connect(&notify_only).await.unwrap();
    assert_eq!(*a.read_share(), ReadShare::default(), "100% until set");

    // 300 trips that only Schemaless holds: a read finds one exactly when
    // Schemaless serves it.
    let rows: Vec<RowKey> = (0..300).map(|_| RowKey::random()).collect();
    a.schemaless()
        .put_cells(rows.iter().map(|r| base(*r)).collect())
        .await
        .unwrap();

    // Set before shadow, it is stored and routes nothing yet.
    let half = a.set_reads(&reads("50", None)).await.unwrap();
    sees_share(&b, &half).await;
    assert!(
        served_by_schemaless(&b, &rows).await.is_empty(),
        "mirror reads PostgreSQL"
    );

    a.set_mode(&tripstore::ModeRequest {
        target: Mode::Shadow,
        force: true,
        by: "cutover test".into(),
        reason: None,
    })
    .await
    .unwrap();
    for facade in [&a, &b] {
        let mut changes = facade.mode_changes();
        tokio::time::timeout(
            Duration::from_secs(10),
            changes.wait_for(|m| *m == Mode::Shadow),
        )
        .await
        .unwrap()
        .unwrap();
    }
    // Each row is served by the store its bucket says, on both facades,
    // every time.
    let expected: BTreeSet<RowKey> = rows
        .iter()
        .filter(|r| ReadShare::bucket(r) < 5000)
        .copied()
        .collect();
    assert!(
        (90..=210).contains(&expected.len()),
        "the buckets of 300 random keys spread: {} below half",
        expected.len()
    );
    assert_eq!(served_by_schemaless(&a, &rows).await, expected);
    assert_eq!(served_by_schemaless(&b, &rows).await, expected);

    // A higher share keeps every row already on Schemaless there.
    let more = a.set_reads(&reads("75.5", None)).await.unwrap();
    sees_share(&b, &more).await;
    let at_more = served_by_schemaless(&b, &rows).await;
    assert!(at_more.is_superset(&expected));
    assert_eq!(
        at_more.len(),
        rows.iter().filter(|r| ReadShare::bucket(r) < 7550).count()
    );

    // One column of its own: BASE at 100% while the default is 0%. A read
    // of the whole row (no column) goes by the default.
    a.set_reads(&reads("0", None)).await.unwrap();
    let split = a.set_reads(&reads("100", Some("BASE"))).await.unwrap();
    assert_eq!(split.share(Some("BASE")), 10_000);
    assert_eq!(split.share(Some("NOTES")), 0);
    sees_share(&b, &split).await;
    assert_eq!(served_by_schemaless(&b, &rows).await.len(), rows.len());
    for row in rows.iter().take(20) {
        assert!(b
            .get_cells_for_row(row, ReadFrom::Master)
            .await
            .unwrap()
            .is_empty());
    }

    // The primary gate needs every share at 100%.
    let gate =
        tripstore::gates::MigrationGate::new(db.pool.clone(), a.schemaless().clone(), &db.config);
    let check =
        |checks: Vec<tripstore::Check>| checks.into_iter().find(|c| c.name == "reads").unwrap();
    let waiting = check(gate.checks(Mode::Shadow, Mode::Primary).await.unwrap());
    assert!(
        !waiting.pass && waiting.why.contains("0% (BASE: 100%)"),
        "{waiting:?}"
    );
    a.set_reads(&reads("100", None)).await.unwrap();
    let ready = check(gate.checks(Mode::Shadow, Mode::Primary).await.unwrap());
    assert!(ready.pass, "{ready:?}");

    // Every change is in the history, newest first, with who and why.
    let history = tripstore::mode::history(&db.pool, 100).await.unwrap();
    let shares: Vec<String> = history
        .iter()
        .filter(|h| h.kind == "reads")
        .map(|h| h.reads.as_ref().unwrap().describe())
        .collect();
    assert_eq!(
        shares,
        ["100%", "0% (BASE: 100%)", "0%", "75.5%", "50%"],
        "{history:?}"
    );
    assert!(history
        .iter()
        .filter(|h| h.kind == "reads")
        .all(|h| h.by == "cutover test" && h.reason.as_deref().unwrap().starts_with("reads at")));
    a.close().await;
    b.close().await;
}

#[test]
fn shares_parse_as_percentages_and_buckets_spread() {
    assert_eq!(ReadShare::parse_percent("0").unwrap(), 0);
    assert_eq!(ReadShare::parse_percent("1").unwrap(), 100);
    assert_eq!(ReadShare::parse_percent("0.5").unwrap(), 50);
    assert_eq!(ReadShare::parse_percent("12.34%").unwrap(), 1234);
    assert_eq!(ReadShare::parse_percent("100").unwrap(), 10_000);
    for bad in [
        "", "-1", "100.01", "101", "1e2", "0.123", "abc", ".5", "5.", "NaN",
    ] {
        assert!(ReadShare::parse_percent(bad).is_err(), "{bad:?}");
    }
    assert_eq!(ReadShare::percent(50), "0.5%");
    assert_eq!(ReadShare::percent(10_000), "100%");
    // Keys that differ in one byte land far apart: a share is spread over
    // every part of the key space, not a prefix of it.
    let mut seen = BTreeSet::new();
    for n in 0..1000u128 {
        seen.insert(ReadShare::bucket(&crate::harness::row(n)) / 1000);
    }
    assert_eq!(
        seen.len(),
        10,
        "every tenth of the buckets is used: {seen:?}"
    );
}

fn run(config: &std::path::Path, args: &[&str]) -> (Option<i32>, String, String) {
    let out = mezzanine(config, args).output().expect("the binary runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn dry_runs_change_nothing_and_status_shows_the_gates_of_the_next_step() {
    let db = LegacyDb::trips().await;
    db.apply_schemaless().await;
    let file = config_file(&db.config_text);
    let config = file.path();
    let mode = || async { tripstore::mode::read(&db.pool).await.unwrap() };

    // The step to mirror would pass: exit 0, and nothing changes.
    let (code, out, err) = run(config, &["mode", "set", "mirror", "--dry-run"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.contains("mode legacy -> mirror would be taken"),
        "{out}"
    );
    assert!(out.contains("PASS     schema"), "{out}");
    assert!(out.contains("nothing was changed"), "{out}");
    assert_eq!(mode().await.mode, Mode::Legacy);

    // A jump would be refused: exit 1, with the ladder's reason.
    let (code, out, err) = run(config, &["mode", "set", "shadow", "--dry-run", "--json"]);
    assert_eq!(code, Some(1), "{out}{err}");
    let plan: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(plan["pass"], json!(false));
    assert_eq!(plan["gates"][0]["name"], json!("ladder"));
    assert!(err.contains("would be refused (ladder)"), "{err}");

    // Bad input: exit 2, nothing changed.
    let before = mode().await;
    for args in [
        &["mode", "reads", "101"][..],
        &["mode", "reads", "-5"],
        &["mode", "reads", "half"],
        &["mode", "reads", "50", "--column", "NO_SUCH_COLUMN"],
        &["mode", "set", "sideways", "--dry-run"],
        &["mode", "set", "mirror", "--dry-run", "--force"],
        &["status", "--interval", "0"],
    ] {
        let (code, out, err) = run(config, args);
        assert_eq!(code, Some(2), "{args:?}: {out}{err}");
    }
    assert_eq!(mode().await, before);
    assert!(tripstore::mode::history(&db.pool, 10)
        .await
        .unwrap()
        .is_empty());

    // Take the step, set a share for shadow, and read the screen.
    let (code, out, err) = run(
        config,
        &["mode", "set", "mirror", "--reason", "runbook step 1"],
    );
    assert_eq!(code, Some(0), "{out}{err}");
    let (code, out, err) = run(config, &["mode", "reads", "1"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.contains("100% -> 1%") && out.contains("takes effect when it is"),
        "{out}"
    );

    let (code, out, err) = run(config, &["status", "--json"]);
    assert_eq!(code, Some(0), "{out}{err}");
    let status: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(status["mode"]["mode"], json!("mirror"));
    assert_eq!(status["reads"]["share"]["default_bp"], json!(100));
    assert_eq!(status["reads"]["applies"], json!(false));
    let next = &status["next_step"];
    assert_eq!(next["to"], json!("shadow"));
    assert_eq!(next["pass"], json!(false), "nothing is backfilled");
    let gates = next["gates"].as_array().unwrap();
    let names: Vec<&str> = gates.iter().map(|g| g["name"].as_str().unwrap()).collect();
    for name in [
        "ladder",
        "backfill",
        "outbox",
        "capture",
        "mismatches",
        "samples",
        "mismatch_rate",
    ] {
        assert!(names.contains(&name), "{name} missing from {names:?}");
    }
    let backfill = gates.iter().find(|g| g["name"] == "backfill").unwrap();
    assert_eq!(backfill["pass"], json!(false));
    assert!(
        backfill["why"]
            .as_str()
            .unwrap()
            .contains("no backfill plan"),
        "{backfill}"
    );
    assert_eq!(status["backfill"]["planned"], json!(false));
    assert_eq!(status["mirror"]["outbox_depth"], json!(0));
    let nodes = status["nodes"].as_array().unwrap();
    assert!(
        !nodes.is_empty() && nodes.iter().all(|n| n["answers"] == json!(true)),
        "{nodes:?}"
    );
    assert!(status["verify"]["samples"].is_u64(), "{}", status["verify"]);

    let (code, out, err) = run(config, &["status"]);
    assert_eq!(code, Some(0), "{out}{err}");
    for line in [
        "mode       mirror",
        "reads      1% of shadow's reads to Schemaless (applies in shadow)",
        "next step  mirror -> shadow: NOT YET",
        "NOT YET  backfill: the history is not backfilled",
        "backfill   not planned",
        "outbox     0 entries",
    ] {
        assert!(out.contains(line), "{line:?} not in:\n{out}");
    }

    // The history has both changes, with the gate's checks of the step.
    let (code, out, err) = run(config, &["mode", "history", "--json"]);
    assert_eq!(code, Some(0), "{out}{err}");
    let history: Value = serde_json::from_str(&out).unwrap();
    let history = history.as_array().unwrap();
    assert_eq!(history.len(), 2, "{history:?}");
    assert_eq!(history[0]["kind"], json!("reads"));
    assert_eq!(history[0]["reads"]["default_bp"], json!(100));
    assert_eq!(history[1]["kind"], json!("mode"));
    assert_eq!(
        (history[1]["from"].as_str(), history[1]["to"].as_str()),
        (Some("legacy"), Some("mirror"))
    );
    assert_eq!(history[1]["reason"], json!("runbook step 1"));
    assert_eq!(history[1]["forced"], json!(false));
    assert!(
        history[1]["by"].as_str().unwrap().contains('@'),
        "user@host"
    );
    let checks: Vec<&str> = history[1]["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(checks, ["ladder", "schema", "capture"]);
    let (code, out, _) = run(config, &["mode", "history"]);
    assert_eq!(code, Some(0));
    assert!(
        out.contains("legacy -> mirror  by ") && out.contains("(runbook step 1)"),
        "{out}"
    );
    assert!(out.contains("reads in mirror -> 1%"), "{out}");
}

/// A guard that judges within a second, facades that report five times a
/// second.
const QUICK_GUARD: &str =
    "[guard]\nwindow_ms = 4000\nfor_ms = 400\ncheck_ms = 100\nreport_ms = 200\n";

/// Waits until the guard has looked more than `ms` after the instant
/// `at` (SQL) gives.
async fn guard_looked_after(pool: &sqlx::PgPool, at: &str, ms: u64) {
    let since: f64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT extract(epoch FROM {at})::float8"
    )))
    .fetch_one(pool)
    .await
    .unwrap();
    let started = std::time::Instant::now();
    loop {
        let looked: bool = sqlx::query_scalar(
            "SELECT coalesce(bool_or(extract(epoch FROM seen_at) > $1 + $2 / 1000.0), false) FROM mezzanine.guard",
        )
        .bind(since)
        .bind(ms as f64)
        .fetch_one(pool)
        .await
        .unwrap();
        if looked {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the guard stopped looking"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn the_guard_moves_reads_back_to_postgres_when_a_divergence_appears_in_shadow() {
    let (db, config, text, facade) = crate::verify::mirrored(120, 5, QUICK_GUARD).await;
    crate::mirror::walk_to(&facade, &config, Mode::Shadow).await;
    facade.set_reads(&reads("50", None)).await.unwrap();
    let rows: Vec<RowKey> =
        sqlx::query_scalar::<_, uuid::Uuid>("SELECT uuid FROM trips ORDER BY id")
            .fetch_all(&db.pool)
            .await
            .unwrap()
            .into_iter()
            .map(RowKey::from)
            .collect();
    let column = Column::new("BASE").unwrap();
    let read_all = || async {
        for row in &rows {
            facade
                .get_cell_latest(row, &column, ReadFrom::Master)
                .await
                .unwrap();
        }
    };

    let cancel = tokio_util::sync::CancellationToken::new();
    let guard = cutover::Guard::new(db.pool.clone(), facade.schemaless().clone(), &config);
    let watching = {
        let cancel = cancel.clone();
        tokio::spawn(async move { guard.run(cancel).await })
    };
    // Clean reads on both stores, sampled and compared: nothing to act on,
    // checked by a guard that looked again more than its for_ms after.
    for _ in 0..3 {
        read_all().await;
    }
    guard_looked_after(&db.pool, "now()", 600).await;
    assert_eq!(
        facade.read_share().default_bp,
        5000,
        "the guard acted on clean reads"
    );
    let (state, breaches): (String, String) =
        sqlx::query_as("SELECT state, breaches::text FROM mezzanine.guard")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!((state.as_str(), breaches.as_str()), ("watching", "[]"));

    // The status sees the facade's reports of both stores.
    let file = config_file(&text);
    let (code, out, err) = run(file.path(), &["status", "--json"]);
    assert_eq!(code, Some(0), "{out}{err}");
    let status: Value = serde_json::from_str(&out).unwrap();
    assert!(
        status["facades"]["facades"].as_u64().unwrap() >= 1,
        "{}",
        status["facades"]
    );
    for store in status["facades"]["stores"].as_array().unwrap() {
        assert!(store["calls"].as_u64().unwrap() > 0, "{store}");
    }
    assert_eq!(status["guards"][0]["state"], json!("watching"));

    // Plant a divergence: trips changed in PostgreSQL behind the facade's
    // back (capture is not installed). Sampled reads find them.
    sqlx::query("UPDATE trips SET city_id = city_id + 1000 WHERE id IN (SELECT id FROM trips ORDER BY id LIMIT 10)")
        .execute(&db.pool)
        .await
        .unwrap();
    let started = std::time::Instant::now();
    while facade.read_share().default_bp != 0 {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the guard never stepped back"
        );
        read_all().await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let history = tripstore::mode::history(&db.pool, 1).await.unwrap();
    let step = &history[0];
    assert_eq!(step.kind, "reads");
    assert_eq!(step.reads.as_ref().unwrap().default_bp, 0);
    assert!(step.by.starts_with("guard@"), "{step:?}");
    let reason = step.reason.as_deref().unwrap();
    assert!(reason.contains("mismatches opened"), "{reason}");
    // The guard never steps forward, and now waits: stopping it reports
    // its one action.
    guard_looked_after(
        &db.pool,
        "(SELECT max(last_action_at) FROM mezzanine.guard)",
        500,
    )
    .await;
    assert_eq!(
        tripstore::mode::read(&db.pool).await.unwrap().mode,
        Mode::Shadow
    );
    cancel.cancel();
    let actions = watching.await.unwrap().unwrap();
    assert_eq!(actions, [cutover::guard::Action::ReadsToZero]);
    let (code, out, err) = run(file.path(), &["status"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.contains("last action at") && out.contains("read share of shadow set to 0%"),
        "{out}"
    );
    facade.close().await;
}

#[tokio::test]
async fn a_guard_with_thresholds_that_cannot_hold_is_refused() {
    let db = LegacyDb::trips().await;
    for (guard, key) in [
        ("[guard]\nmax_p99_ms = 0\n", "guard.max_p99_ms"),
        (
            "[guard]\nmax_outbox_lag_ms = 0\n",
            "guard.max_outbox_lag_ms",
        ),
        ("[guard]\nmax_error_rate = 1.5\n", "guard.max_error_rate"),
        (
            "[guard]\nwindow_ms = 1000\nreport_ms = 5000\n",
            "guard.report_ms",
        ),
        ("[guard]\nno_such_key = 1\n", "no_such_key"),
    ] {
        let file = config_file(&format!("{}\n{guard}", db.config_text));
        let (code, out, err) = run(file.path(), &["guard", "--check"]);
        assert_eq!(code, Some(2), "{guard}: {out}{err}");
        assert!(err.contains(key), "{guard}: {err}");
    }
    // Nothing was created by the refused runs.
    let tables: i64 = db
        .count(
            "SELECT count(*) FROM pg_tables WHERE schemaname = 'mezzanine' AND tablename = 'guard'",
        )
        .await;
    assert_eq!(tables, 0);
    // A sound one looks, finds nothing breached, and exits 0.
    let file = config_file(&format!("{}\n{QUICK_GUARD}", db.config_text));
    let (code, out, err) = run(file.path(), &["guard", "--check"]);
    assert_eq!(code, Some(0), "{out}{err}");
    let seen: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(seen["breaches"], json!([]));

    // Run, it serves its figures on /metrics and stops on SIGTERM.
    let mut guard = mezzanine(file.path(), &["guard", "--listen", "127.0.0.1:0"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Kept open until the guard exits: its last line would otherwise meet
    // a closed pipe.
    let mut output = std::io::BufReader::new(guard.stdout.take().unwrap());
    let mut first = String::new();
    std::io::BufRead::read_line(&mut output, &mut first).unwrap();
    let url = first
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no metrics address in {first:?}"))
        .trim_end_matches(')')
        .to_string();
    let started = std::time::Instant::now();
    let metrics = loop {
        let addr = url
            .trim_start_matches("http://")
            .trim_end_matches("/metrics")
            .to_string();
        let text = tokio::task::spawn_blocking(move || crate::verify::http_get(&addr, "/metrics"))
            .await
            .unwrap();
        if text.contains("mezzanine_guard_breaches") {
            break text;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "{text}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(metrics.contains("mezzanine_guard_facades"), "{metrics}");
    let pid = nix::unistd::Pid::from_raw(guard.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("signalling the guard");
    assert!(guard.wait().unwrap().success());
    let mut last = String::new();
    std::io::Read::read_to_string(&mut output, &mut last).unwrap();
    assert!(last.contains("the guard stopped after 0 actions"), "{last}");
    let (state,): (String,) = sqlx::query_as("SELECT state FROM mezzanine.guard")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(state, "stopped");
}

/// The FARE_ADJUSTMENTS column of the example layout, as it appears in it.
const FARES_COLUMN: &str = "[[layout.column]]\nname = \"FARE_ADJUSTMENTS\"\nkind = \"child\"\ntable = \"fare_adjustments\"\nparent = \"trip_id\"\nref_key = \"seq\"\nfields = [\"amount\", \"reason\", \"codes\", \"created_at\"]\n";

async fn schemaless_cells_of(store: &schemaless::MySqlStore, column: &str) -> usize {
    crate::mirror::all_schemaless_cells(store)
        .await
        .iter()
        .filter(|c| c.cell.key.column.as_str() == column)
        .count()
}

#[tokio::test]
async fn partial_backfills_copy_a_new_column_some_ids_or_the_rows_a_predicate_admits() {
    let db = LegacyDb::trips().await;
    legacy::trips::seed(&db.pool, "public", "uuid", 300, 8, |_| {})
        .await
        .unwrap();
    db.apply_schemaless().await;
    assert!(
        db.config_text.contains(FARES_COLUMN),
        "the example layout has the column"
    );
    // The layout as it was before FARE_ADJUSTMENTS was added to it.
    let before = config_file(&db.config_text.replace(FARES_COLUMN, ""));
    let after = config_file(&db.config_text);
    let ok = |config: &std::path::Path, args: &[&str]| {
        let (code, out, err) = run(config, args);
        assert_eq!(code, Some(0), "{args:?}: {out}{err}");
        out
    };
    ok(before.path(), &["backfill", "plan"]);
    ok(before.path(), &["backfill", "run", "--plain"]);
    let schemaless = schemaless::MySqlStore::connect(&db.config).unwrap();
    assert_eq!(
        schemaless_cells_of(&schemaless, "FARE_ADJUSTMENTS").await,
        0
    );
    let fares = db.count("SELECT count(*) FROM fare_adjustments").await as usize;
    assert!(fares > 20, "the seed has fare adjustments: {fares}");

    // The column joins the layout: a plan of just that column copies it,
    // and nothing else.
    let out = ok(
        after.path(),
        &[
            "backfill",
            "plan",
            "--name",
            "fares",
            "--columns",
            "FARE_ADJUSTMENTS",
        ],
    );
    assert!(
        out.contains("planned fares") && out.contains("columns FARE_ADJUSTMENTS"),
        "{out}"
    );
    ok(
        after.path(),
        &["backfill", "run", "--plan", "fares", "--plain"],
    );
    assert_eq!(
        schemaless_cells_of(&schemaless, "FARE_ADJUSTMENTS").await,
        fares
    );
    let fares_plan = backfill::status::read_plan(&db.pool, "fares")
        .await
        .unwrap();
    assert!(fares_plan.complete());
    assert_eq!(
        fares_plan.cells_done as usize, fares,
        "only the column's cells"
    );
    assert_eq!(fares_plan.cells_written as usize, fares);
    // And the full diff of that column finds the stores equal.
    let out = ok(
        after.path(),
        &[
            "verify",
            "full",
            "--columns",
            "FARE_ADJUSTMENTS",
            "--plain",
            "--json",
        ],
    );
    let last: Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert_eq!(last["mismatches"], json!(0), "{out}");
    assert_eq!(last["cells"].as_u64().unwrap() as usize, fares, "{out}");

    // Some ids, and the parents a predicate admits.
    ok(
        after.path(),
        &["backfill", "plan", "--name", "early", "--ids", "1..=40"],
    );
    ok(
        after.path(),
        &[
            "backfill",
            "plan",
            "--name",
            "city-3",
            "--where",
            "city_id = 3 AND status <> 'x'",
        ],
    );
    // The shadow gate needs every plan complete.
    let waiting = backfill::status::refusal(&db.pool, None)
        .await
        .unwrap()
        .unwrap();
    assert!(
        waiting.contains("backfill plan city-3 is not complete"),
        "{waiting}"
    );
    ok(
        after.path(),
        &["backfill", "run", "--plan", "early", "--plain"],
    );
    ok(
        after.path(),
        &["backfill", "run", "--plan", "city-3", "--plain"],
    );
    assert_eq!(
        backfill::status::refusal(&db.pool, None).await.unwrap(),
        None
    );
    let early = backfill::status::read_plan(&db.pool, "early")
        .await
        .unwrap();
    assert_eq!(early.parents_done, 40);
    let city = backfill::status::read_plan(&db.pool, "city-3")
        .await
        .unwrap();
    let in_city = db
        .count("SELECT count(*) FROM trips WHERE city_id = 3")
        .await;
    assert!(in_city > 0);
    assert_eq!(city.parents_done as i64, in_city);

    // Every plan has its own status.
    let out = ok(after.path(), &["backfill", "status", "--json"]);
    let status: Value = serde_json::from_str(&out).unwrap();
    let names: Vec<&str> = status["plans"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["city-3", "early", "fares", "main"]);
    assert!(status["plans"]
        .as_array()
        .unwrap()
        .iter()
        .all(|p| p["complete"] == json!(true)));
    // And the status screen lists them.
    let out = ok(after.path(), &["status", "--json"]);
    let screen: Value = serde_json::from_str(&out).unwrap();
    let listed: Vec<&str> = screen["backfill"]["plans"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(listed, ["city-3", "early", "fares", "main"]);
    let out = ok(after.path(), &["status"]);
    assert!(
        out.contains("plan fares (columns FARE_ADJUSTMENTS): "),
        "{out}"
    );

    // Bad input: exit 2, and no plan is made or changed.
    for args in [
        &[
            "backfill",
            "plan",
            "--name",
            "sub",
            "--where",
            "id IN (SELECT trip_id FROM trip_notes)",
        ][..],
        &[
            "backfill",
            "plan",
            "--name",
            "sleep",
            "--where",
            "pg_sleep(1) IS NULL",
        ],
        &[
            "backfill",
            "plan",
            "--name",
            "seq",
            "--where",
            "nextval('x') > 0",
        ],
        &[
            "backfill",
            "plan",
            "--name",
            "other",
            "--where",
            "trip_notes.author = 'x'",
        ],
        &[
            "backfill",
            "plan",
            "--name",
            "typo",
            "--where",
            "no_such_column = 1",
        ],
        &[
            "backfill",
            "plan",
            "--name",
            "types",
            "--where",
            "city_id = 'three'",
        ],
        &["backfill", "plan", "--name", "Bad Name"],
        &["backfill", "plan", "--name", "cols", "--columns", "NO_SUCH"],
        &["backfill", "plan", "--name", "empty", "--ids", "5..5"],
        &["backfill", "plan", "--name", "fares", "--columns", "BASE"],
        &["backfill", "plan", "--name", "early", "--extend"],
        &["backfill", "run", "--plan", "nope"],
        &["backfill", "status", "--plan", "nope"],
        &["backfill", "retry", "--plan", "nope"],
        &["verify", "full", "--columns", "NO_SUCH"],
    ] {
        let (code, out, err) = run(after.path(), args);
        assert_eq!(code, Some(2), "{args:?}: {out}{err}");
    }
    let (_, _, err) = run(after.path(), &["backfill", "run", "--plan", "nope"]);
    assert!(
        err.contains("no backfill plan named \"nope\"")
            && err.contains("city-3, early, fares, main"),
        "{err}"
    );
    let plans = backfill::plan::list(&db.pool).await.unwrap();
    assert_eq!(plans.len(), 4);
    let fares_again = plans.iter().find(|p| p.name == "fares").unwrap();
    assert_eq!(
        fares_again.columns,
        Some(vec!["FARE_ADJUSTMENTS".to_string()])
    );
    schemaless.close().await;
}

/// The backfill tables as the single-plan version made them, with a plan
/// half copied.
const SINGLE_PLAN_TABLES: &str = "CREATE SCHEMA mezzanine;
CREATE TABLE mezzanine.backfill_plan (
    id boolean PRIMARY KEY DEFAULT true CHECK (id), table_name text NOT NULL,
    chunk_size bigint NOT NULL, low_id bigint NOT NULL, high_id bigint NOT NULL,
    planned_at timestamptz NOT NULL DEFAULT now(), extended_at timestamptz NOT NULL DEFAULT now(),
    planned_by text NOT NULL, paused boolean NOT NULL DEFAULT false);
CREATE TABLE mezzanine.backfill_chunks (
    id bigserial PRIMARY KEY, start_id bigint NOT NULL, end_id bigint NOT NULL,
    state text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'running', 'done', 'failed')),
    owner text, heartbeat_at timestamptz, attempts integer NOT NULL DEFAULT 0,
    parents bigint NOT NULL DEFAULT 0, cells bigint NOT NULL DEFAULT 0, written bigint NOT NULL DEFAULT 0,
    error text, done_at timestamptz);
CREATE INDEX backfill_chunks_state ON mezzanine.backfill_chunks (state, start_id);
INSERT INTO mezzanine.backfill_plan (table_name, chunk_size, low_id, high_id, planned_by)
    VALUES ('trips', 100, 1, 201, 'an earlier version');
INSERT INTO mezzanine.backfill_chunks (start_id, end_id, state, parents, cells)
    VALUES (1, 101, 'done', 100, 250), (101, 201, 'pending', 0, 0);";

#[tokio::test]
async fn the_plan_of_the_single_plan_version_becomes_plan_main() {
    let db = LegacyDb::new(SINGLE_PLAN_TABLES, &crate::harness::example_layout()).await;
    let status = backfill::status::read(&db.pool).await.unwrap();
    let plan = status.plan.as_ref().expect("the plan is kept");
    assert_eq!(
        (plan.name.as_str(), plan.low_id, plan.high_id),
        ("main", 1, 201)
    );
    assert!(plan.is_full());
    assert_eq!(
        (status.done, status.pending, status.cells_done),
        (1, 1, 250)
    );
    // A second plan of the same name is refused; another name is not
    // confused with it.
    assert_eq!(backfill::plan::list(&db.pool).await.unwrap().len(), 1);
    let other = backfill::status::read_plan(&db.pool, "fares")
        .await
        .unwrap();
    assert!(other.plan.is_none() && other.total() == 0);
    let refusal = backfill::status::refusal(&db.pool, None)
        .await
        .unwrap()
        .unwrap();
    assert!(
        refusal.contains("backfill plan main is not complete: 1 of 2 chunks done"),
        "{refusal}"
    );
}

/// Writes acknowledged in `primary` land in Schemaless first. Stepping
/// back to `mirror`, where reads come from the legacy tables and the
/// reverse mirror stops, first applies what it has not: no write made in
/// `primary` goes missing from what `mirror` reads.
#[tokio::test]
async fn the_step_back_to_mirror_first_applies_what_primary_wrote() {
    let db = LegacyDb::trips().await;
    legacy::trips::seed(&db.pool, "public", "uuid", 50, 3, |_| {})
        .await
        .unwrap();
    db.apply_schemaless().await;
    // No facade runs the reverse mirror: only the step back can apply.
    let text = format!("{}\n[mirror]\nreverse_in_app = false\n", db.config_text);
    let config = config::Config::parse(&text, "no-reverse.toml").unwrap();
    let facade = TripStore::connect(&config).await.unwrap();
    crate::mirror::walk_to(&facade, &config, Mode::Primary).await;
    let mut source = legacy::trips::TripCells::new(77);
    let mut written = Vec::new();
    for _ in 0..20 {
        let cells = source.new_trip();
        facade.put_cells(cells.clone()).await.unwrap();
        written.push(cells[0].key.row_key);
    }
    let base = Column::new("BASE").unwrap();
    let in_legacy = |rows: Vec<RowKey>| {
        let legacy = facade.legacy().clone();
        let base = base.clone();
        async move {
            let mut n = 0;
            for row in rows {
                if legacy
                    .get_cell_latest(&row, &base, ReadFrom::Master)
                    .await
                    .unwrap()
                    .is_some()
                {
                    n += 1;
                }
            }
            n
        }
    };
    assert_eq!(
        in_legacy(written.clone()).await,
        0,
        "nothing applied them yet"
    );
    let back = |target| tripstore::ModeRequest {
        target,
        force: false,
        by: "cutover test".into(),
        reason: Some("stepping back".into()),
    };
    facade.set_mode(&back(Mode::Shadow)).await.unwrap();
    assert_eq!(
        in_legacy(written.clone()).await,
        0,
        "shadow reads them from Schemaless"
    );
    facade.set_mode(&back(Mode::Mirror)).await.unwrap();
    assert_eq!(in_legacy(written.clone()).await, written.len());
    // And the facade, now reading the legacy tables, answers every one.
    for row in &written {
        assert!(facade
            .get_cell_latest(row, &base, ReadFrom::Master)
            .await
            .unwrap()
            .is_some());
    }
    facade.close().await;
}
