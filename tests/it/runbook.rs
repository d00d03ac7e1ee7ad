//! The rehearsal of `docs/runbook.md`: its commands, in its order, on real
//! servers, with writers running throughout.

use std::collections::BTreeMap;
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use legacy::trips::TripCells;
use schemaless::{Cell, CellStore, ReadFrom, WriteOutcome};
use tripstore::{Mode, TripStore};

use crate::harness::{config_file, mezzanine, LegacyDb};

/// One line of a runbook block the rehearsal runs.
#[derive(Debug)]
struct Line {
    /// The block's mark: `""`, `background` or `stepback`.
    kind: String,
    /// The words, quotes removed.
    words: Vec<String>,
}

/// The lines of every `sh` block not marked `manual`, in order.
fn runbook_lines(text: &str) -> Vec<Line> {
    let mut lines = Vec::new();
    let mut block: Option<String> = None;
    for raw in text.lines() {
        let line = raw.trim();
        match &block {
            None => {
                if let Some(info) = line.strip_prefix("```sh") {
                    block = Some(info.trim().to_string());
                }
            }
            Some(kind) => {
                if line.starts_with("```") {
                    block = None;
                } else if kind != "manual" && !line.is_empty() {
                    lines.push(Line {
                        kind: kind.clone(),
                        words: shell_words(line),
                    });
                }
            }
        }
    }
    lines
}

/// Splits a command line as a shell does for words and double quotes.
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quoted = false;
    let mut started = false;
    for c in line.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                started = true;
            }
            c if c.is_whitespace() && !quoted => {
                if started {
                    words.push(std::mem::take(&mut word));
                    started = false;
                }
            }
            c => {
                word.push(c);
                started = true;
            }
        }
    }
    assert!(!quoted, "an unclosed quote in the runbook: {line}");
    if started {
        words.push(word);
    }
    words
}

/// What the facade writers had acknowledged, in order.
#[derive(Default)]
struct Acked {
    cells: Mutex<Vec<Cell>>,
    failures: AtomicU64,
    failure: Mutex<Option<String>>,
}

/// Writes new trips through the facade (and completes some), reading each
/// back through it so that reads are sampled, until `stop`.
async fn facade_writer(
    facade: Arc<TripStore>,
    acked: Arc<Acked>,
    stop: Arc<AtomicBool>,
    seed: u64,
) {
    let mut source = TripCells::new(seed);
    let mut open: Vec<Cell> = Vec::new();
    let base = schemaless::Column::new("BASE").unwrap();
    while !stop.load(Ordering::Relaxed) {
        let cells = if open.len() > 5 {
            let trip = open.swap_remove(0);
            vec![source.complete(&trip)]
        } else {
            source.new_trip()
        };
        match facade.put_cells(cells.clone()).await {
            Ok(results)
                if results.iter().all(|r| {
                    matches!(r, Ok(WriteOutcome::Written | WriteOutcome::AlreadyPresent))
                }) =>
            {
                if cells[0].key.ref_key.get() == 1 {
                    open.push(cells[0].clone());
                }
                let row = cells[0].key.row_key;
                acked.cells.lock().unwrap().extend(cells);
                let _ = facade.get_cell_latest(&row, &base, ReadFrom::Master).await;
            }
            other => {
                acked.failures.fetch_add(1, Ordering::Relaxed);
                *acked.failure.lock().unwrap() = Some(format!("{other:?}"));
            }
        }
        tokio::time::sleep(Duration::from_millis(15)).await;
    }
}

/// Plain SQL writes, as an app not yet moved to the facade makes them: new
/// trips and changes to existing ones, until `stop`.
async fn sql_writer(pool: sqlx::PgPool, stop: Arc<AtomicBool>, written: Arc<AtomicU64>) {
    let mut i = 0u64;
    while !stop.load(Ordering::Relaxed) {
        i += 1;
        let statement = if i.is_multiple_of(2) {
            "INSERT INTO trips (driver_uuid, rider_uuid, city_id, status, currency, requested_at)
             VALUES (gen_random_uuid(), gen_random_uuid(), 7, 'requested', 'EUR', now())"
                .to_string()
        } else {
            format!(
                "UPDATE trips SET status = 'edited {i}', version = version + 1
                 WHERE id = (SELECT id FROM trips ORDER BY id LIMIT 1 OFFSET {})",
                i % 50
            )
        };
        if sqlx::raw_sql(sqlx::AssertSqlSafe(statement))
            .execute(&pool)
            .await
            .is_ok()
        {
            written.fetch_add(1, Ordering::Relaxed);
        }
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
}

/// Where every acknowledged write must be in `mode`, once the mirror in
/// either direction has moved it: `(legacy, schemaless)`.
fn must_hold(mode: Mode) -> (bool, bool) {
    match mode {
        Mode::Legacy => (true, false),
        Mode::Schemaless => (false, true),
        _ => (true, true),
    }
}

/// The acknowledged writes `store` lacks (a row cell counts as held when
/// the row is at its version or later: the legacy tables keep only the
/// latest).
async fn missing(store: &dyn CellStore, cells: &[Cell]) -> Vec<String> {
    let mut latest: BTreeMap<(schemaless::RowKey, String), i64> = BTreeMap::new();
    for cell in cells {
        let slot = latest
            .entry((cell.key.row_key, cell.key.column.to_string()))
            .or_insert(0);
        *slot = (*slot).max(cell.key.ref_key.get());
    }
    let mut out = Vec::new();
    for ((row, column), ref_key) in latest {
        let column = schemaless::Column::new(&column).unwrap();
        let held = store
            .get_cell_latest(&row, &column, ReadFrom::Master)
            .await
            .ok()
            .flatten()
            .map(|c| c.cell.key.ref_key.get());
        if held.is_none_or(|h| h < ref_key) {
            out.push(format!("{row} {column} v{ref_key} (holds {held:?})"));
        }
    }
    out
}

/// After a change of the mode or the share: every write acknowledged so
/// far reaches where the mode needs it, and no mismatch is open.
async fn checkpoint(db: &LegacyDb, facade: &TripStore, acked: &Acked, after: &str) {
    let mode = tripstore::mode::read(&db.pool).await.unwrap().mode;
    let cells: Vec<Cell> = acked.cells.lock().unwrap().clone();
    let (legacy, schemaless) = must_hold(mode);
    let started = Instant::now();
    loop {
        let mut lacking = Vec::new();
        if legacy {
            lacking.extend(
                missing(facade.legacy(), &cells)
                    .await
                    .into_iter()
                    .map(|m| format!("legacy: {m}")),
            );
        }
        if schemaless {
            lacking.extend(
                missing(facade.schemaless(), &cells)
                    .await
                    .into_iter()
                    .map(|m| format!("schemaless: {m}")),
            );
        }
        if lacking.is_empty() {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "after `{after}` in {mode}: {} of {} acknowledged writes lost, e.g. {:?}",
            lacking.len(),
            cells.len(),
            &lacking[..lacking.len().min(5)]
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let report = verifier::report::read(&db.pool, None, None).await.unwrap();
    assert_eq!(
        report.open_mismatches, 0,
        "after `{after}` in {mode}: open mismatches {:?}",
        report.open_by_column
    );
    assert_eq!(
        acked.failures.load(Ordering::Relaxed),
        0,
        "after `{after}` in {mode}: a facade write failed: {:?}",
        acked.failure.lock().unwrap()
    );
}

#[tokio::test]
async fn the_runbook_rehearses_from_legacy_to_schemaless_and_back() {
    let runbook = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/runbook.md"))
        .expect("docs/runbook.md");
    let lines = runbook_lines(&runbook);
    assert!(lines.len() > 20, "the runbook's blocks: {lines:?}");

    let db = LegacyDb::trips().await;
    legacy::trips::seed(&db.pool, "public", "uuid", 300, 21, |_| {})
        .await
        .unwrap();
    let text = format!(
        "{}\n[verify]\nsample_rate = 0.5\ntriage_delay_ms = 50\ntriage_wait_ms = 3000\n\
         [guard]\nmax_p99_ms = 5000\n",
        db.config_text
    );
    let file = config_file(&text);
    let config = config::Config::parse(&text, "runbook.toml").unwrap();

    // The app: a facade writing and reading throughout, and a writer with
    // plain SQL until the runbook says to move it (step 4).
    let facade = Arc::new(TripStore::connect(&config).await.unwrap());
    let acked = Arc::new(Acked::default());
    let stop = Arc::new(AtomicBool::new(false));
    let start_writers = |seed: u64| -> Vec<tokio::task::JoinHandle<()>> {
        (0..2)
            .map(|w| {
                tokio::spawn(facade_writer(
                    facade.clone(),
                    acked.clone(),
                    stop.clone(),
                    seed + w,
                ))
            })
            .collect()
    };
    let mut writers = start_writers(900);
    let sql_stop = Arc::new(AtomicBool::new(false));
    let sql_written = Arc::new(AtomicU64::new(0));
    let mut sql = Some(tokio::spawn(sql_writer(
        db.pool.clone(),
        sql_stop.clone(),
        sql_written.clone(),
    )));

    let mut background: Vec<Child> = Vec::new();
    let mut compared = false;
    for line in &lines {
        let words: Vec<&str> = line.words.iter().map(String::as_str).collect();
        let shown = words.join(" ");
        match words.as_slice() {
            ["sleep", secs] => {
                tokio::time::sleep(Duration::from_secs_f64(secs.parse().unwrap())).await;
                continue;
            }
            ["mezzanine", args @ ..] => {
                if args.starts_with(&["mode", "set", "shadow"]) {
                    if let Some(writer) = sql.take() {
                        // Step 4: plain SQL writers are moved to the
                        // facade before shadow begins.
                        sql_stop.store(true, Ordering::Relaxed);
                        writer.await.unwrap();
                        assert!(
                            sql_written.load(Ordering::Relaxed) > 0,
                            "the SQL writer wrote"
                        );
                    }
                }
                if line.kind == "background" {
                    let child = mezzanine(file.path(), args)
                        .stdout(Stdio::null())
                        .stderr(Stdio::null())
                        .spawn()
                        .unwrap();
                    background.push(child);
                    continue;
                }
                let dry_run = args.contains(&"--dry-run");
                let started = Instant::now();
                loop {
                    let out = mezzanine(file.path(), args).output().unwrap();
                    if out.status.success() {
                        break;
                    }
                    let said = format!(
                        "{}{}",
                        String::from_utf8_lossy(&out.stdout),
                        String::from_utf8_lossy(&out.stderr)
                    );
                    assert!(
                        dry_run
                            && out.status.code() == Some(1)
                            && started.elapsed() < Duration::from_secs(90),
                        "`{shown}` failed ({:?}):\n{said}",
                        out.status.code()
                    );
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                let changes = !dry_run
                    && (args.starts_with(&["mode", "set"]) || args.starts_with(&["mode", "reads"]));
                if changes {
                    checkpoint(&db, &facade, &acked, &shown).await;
                }
                // Once every read is on Schemaless, with the writers
                // paused and the mirror drained, the stores hold the same
                // trips, including those written with plain SQL.
                if changes && args.starts_with(&["mode", "reads", "100"]) {
                    stop.store(true, Ordering::Relaxed);
                    for writer in writers.drain(..) {
                        writer.await.unwrap();
                    }
                    facade.relay().drain().await.unwrap();
                    let trips =
                        crate::mirror::assert_stores_equal(facade.legacy(), facade.schemaless())
                            .await;
                    assert!(trips > 300, "{trips} trips compared");
                    compared = true;
                    stop.store(false, Ordering::Relaxed);
                    writers = start_writers(1900);
                }
            }
            other => panic!("the runbook has a line the rehearsal cannot run: {other:?}"),
        }
    }
    assert!(compared, "the runbook moves every read to Schemaless");
    for child in &mut background {
        child.kill().unwrap();
        child.wait().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    assert!(sql.is_none(), "the SQL writer was stopped at step 4");
    for writer in writers {
        writer.await.unwrap();
    }
    // Walked back to legacy: every acknowledged write of every mode is in
    // the legacy tables, and the history has every step.
    let state = tripstore::mode::read(&db.pool).await.unwrap();
    assert_eq!(state.mode, Mode::Legacy);
    checkpoint(&db, &facade, &acked, "the end").await;
    let written = acked.cells.lock().unwrap().len();
    assert!(written > 100, "only {written} acknowledged writes");
    let report = verifier::report::read(&db.pool, None, None).await.unwrap();
    assert!(
        report.totals.samples > 50,
        "{} reads were verified",
        report.totals.samples
    );
    eprintln!(
        "rehearsed: {written} acknowledged facade writes, {} plain SQL writes, {} sampled reads, 0 lost, 0 open mismatches",
        sql_written.load(Ordering::Relaxed),
        report.totals.samples
    );
    let history = tripstore::mode::history(&db.pool, 100).await.unwrap();
    let modes: Vec<String> = history
        .iter()
        .rev()
        .filter(|h| h.kind == "mode")
        .map(|h| h.to.clone())
        .collect();
    assert_eq!(
        modes,
        [
            "mirror",
            "shadow",
            "primary",
            "schemaless",
            "primary",
            "shadow",
            "mirror",
            "legacy"
        ]
    );
    assert!(history.iter().all(|h| !h.forced), "no step was forced");
    assert!(
        history.iter().all(|h| !h.by.starts_with("guard@")),
        "the guard stepped back: {history:?}"
    );
    facade.close().await;
}

#[test]
fn shell_words_keep_quoted_reasons_whole() {
    assert_eq!(
        shell_words(r#"mezzanine mode set mirror --reason "runbook step 1: go""#),
        [
            "mezzanine",
            "mode",
            "set",
            "mirror",
            "--reason",
            "runbook step 1: go"
        ]
    );
}
