//! Which table a bare name is, in the app's session: the proxy serves or
//! writes through the facade only a statement whose names find the
//! layout's tables there, as PostgreSQL would resolve them. A session
//! whose `search_path` finds another `trips` first, or that made a
//! temporary one, gets its own table's answer; `SET ROLE` changes whom
//! values are evaluated as, and the path where their functions are found;
//! a change pipelined with the statement it
//! affects gets that statement refused rather than guessed at.

use crate::harness::LegacyDb;
use crate::proxy::{psql, raw_session, ProxyProcess};
use crate::proxy_modes::{cstr, execute_and_sync, message};
use crate::proxy_writes::{latest, primary, proxy_in, trip};

/// Schemaless reads the proxy answered so far.
fn served(proxy: &ProxyProcess) -> u64 {
    proxy.status()["served"]["schemaless"]
        .as_u64()
        .unwrap_or_default()
}

/// psql's output of `script`, which must succeed.
fn ok(url: &str, script: &str) -> String {
    let (ok, out, err) = psql(url, &format!("\\set ON_ERROR_STOP 1\n{script}"));
    assert!(ok, "{script}\n{out}{err}");
    out
}

/// Rows of `trips` (the parent) with row key `k` in `schema` on
/// PostgreSQL.
async fn rows_in(db: &LegacyDb, schema: &str, k: uuid::Uuid) -> i64 {
    db.count(&format!(
        "SELECT count(*) FROM {schema}.trips WHERE uuid = '{k}'"
    ))
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bare_name_is_the_layouts_only_where_the_apps_session_finds_it() {
    let (db, facade, file) = primary().await;
    sqlx::raw_sql(
        "CREATE SCHEMA archive; \
         CREATE TABLE archive.trips (LIKE public.trips INCLUDING ALL)",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let proxy = ProxyProcess::start(file.path(), "127.0.0.1:0");
    proxy_in(&proxy, "primary");
    let url = proxy.url(&db);

    // A trip written through the facade: only Schemaless has it, and a
    // bare read of it is served from there.
    let k = uuid::Uuid::new_v4();
    assert_eq!(ok(&url, &format!("{};\n", trip(k))).trim(), "INSERT 0 1");
    assert!(latest(&facade, k, "BASE").await.is_some());
    let read = format!("SELECT uuid, status FROM trips WHERE uuid = '{k}';\n");
    let before = served(&proxy);
    assert!(ok(&url, &read).contains("(1 row)"));
    assert_eq!(served(&proxy), before + 1);

    // archive first on the path: `trips` is archive.trips. The write goes
    // to it on PostgreSQL, not to Schemaless, and the read is its answer;
    // a qualified name is still the layout's, and served.
    let a = uuid::Uuid::new_v4();
    let out = ok(
        &url,
        &format!(
            "SET search_path = archive, public;\n{};\n{read}\
             SELECT uuid, status FROM public.trips WHERE uuid = '{k}';\n",
            trip(a)
        ),
    );
    let answers: Vec<&str> = out.lines().filter(|l| l.starts_with('(')).collect();
    assert_eq!(answers, ["(0 rows)", "(1 row)"], "{out}");
    assert!(out.contains("INSERT 0 1"), "{out}");
    assert_eq!(rows_in(&db, "archive", a).await, 1);
    assert_eq!(rows_in(&db, "public", a).await, 0);
    assert!(
        latest(&facade, a, "BASE").await.is_none(),
        "not the layout's"
    );
    assert_eq!(served(&proxy), before + 2, "the qualified read only");

    // Back to the default path in the same session: served again.
    let out = ok(
        &url,
        &format!("SET search_path = archive;\nRESET search_path;\n{read}"),
    );
    assert!(out.contains("(1 row)"), "{out}");
    assert_eq!(served(&proxy), before + 3);

    // A temporary table of the same name comes first on any path.
    let out = ok(
        &url,
        &format!("CREATE TEMP TABLE trips (uuid uuid, status text);\n{read}"),
    );
    assert!(
        out.contains("(0 rows)"),
        "the temporary table's answer: {out}"
    );
    assert_eq!(served(&proxy), before + 3);

    // A path without the layout's schema: PostgreSQL's own error.
    let (_, out, err) = psql(&url, &format!("SET search_path = archive_nothing;\n{read}"));
    assert!(err.contains("42P01"), "{out}{err}");

    // The session's path finds the functions its values name bare.
    sqlx::raw_sql(
        "CREATE SCHEMA fares; \
         CREATE FUNCTION fares.doubled(numeric) RETURNS numeric IMMUTABLE \
         LANGUAGE sql AS 'SELECT $1 * 2'",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let f = uuid::Uuid::new_v4();
    let priced = trip(f).replace("12.5,", "doubled(3.1),");
    assert_ne!(priced, trip(f));
    ok(
        &url,
        &format!("SET search_path = public, fares;\n{priced};\n"),
    );
    let cell = latest(&facade, f, "BASE")
        .await
        .expect("written through the facade");
    assert_eq!(cell.cell.body.fields()["fare"], "6.2");

    // SET ROLE: values are evaluated as the role the session is now.
    let app = format!("app_{}", db.name);
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "CREATE ROLE {app}; GRANT SELECT, INSERT, UPDATE ON trips TO {app}"
    )))
    .execute(&db.pool)
    .await
    .unwrap();
    let r = uuid::Uuid::new_v4();
    let as_role = trip(r).replace("'requested'", "current_user");
    ok(&url, &format!("SET ROLE {app};\n{as_role};\n"));
    let cell = latest(&facade, r, "BASE")
        .await
        .expect("written as the role");
    assert_eq!(cell.cell.body.fields()["status"], app.as_str());

    // A SET pipelined with the write it changes, in one flight: the
    // write is refused (nothing written), not run on a guess.
    let p = uuid::Uuid::new_v4();
    let mut stream = raw_session(proxy.addr, &db);
    let mut out = Vec::new();
    for sql in ["SET search_path = archive, public".to_string(), trip(p)] {
        out.extend(message(b'P', &[cstr(""), cstr(&sql), vec![0, 0]].concat()));
        out.extend(message(
            b'B',
            &[cstr(""), cstr(""), vec![0, 0, 0, 0, 0, 0]].concat(),
        ));
        if sql.starts_with("SET") {
            out.extend(message(b'E', &[cstr(""), vec![0, 0, 0, 0]].concat()));
        }
    }
    let answer = execute_and_sync(&mut stream, out);
    let error = answer
        .iter()
        .find(|(kind, _)| *kind == b'E')
        .map(|(_, body)| String::from_utf8_lossy(body).into_owned())
        .expect("the write is refused");
    assert!(
        error.contains("0A000") && error.contains("search_path"),
        "{error}"
    );
    assert!(latest(&facade, p, "BASE").await.is_none());
    assert_eq!(rows_in(&db, "archive", p).await, 0);
    assert_eq!(rows_in(&db, "public", p).await, 0);
    // The session goes on; its next write, on its own, runs as before
    // (the SET was rolled back with the refused write).
    let mut next = Vec::new();
    next.extend(message(
        b'P',
        &[cstr(""), cstr(&trip(p)), vec![0, 0]].concat(),
    ));
    next.extend(message(
        b'B',
        &[cstr(""), cstr(""), vec![0, 0, 0, 0, 0, 0]].concat(),
    ));
    let answer = execute_and_sync(&mut stream, next);
    assert!(answer.iter().all(|(kind, _)| *kind != b'E'), "{answer:?}");
    assert!(latest(&facade, p, "BASE").await.is_some());
    facade.close().await;
}
