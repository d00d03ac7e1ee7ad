//! Statements prepared in SQL (`PREPARE name AS ...`) and run by name
//! (`EXECUTE name(...)`): an `EXECUTE` names no table, so the proxy
//! judges it as the `PREPARE` it runs would be judged now. A write
//! prepared in `shadow` and executed in `primary` is refused, not
//! forwarded to change PostgreSQL behind the facade; a read prepared in
//! `primary` and executed in `schemaless` is refused, not answered from
//! PostgreSQL's stale rows.

use sqlx::{Connection, PgConnection};
use tripstore::Mode;

use crate::harness::LegacyDb;
use crate::proxy::sqlstate;
use crate::proxy_writes::proxy_in;

/// The status PostgreSQL itself holds for trip `k`.
async fn status_in_postgres(db: &LegacyDb, k: uuid::Uuid) -> String {
    sqlx::query_scalar("SELECT status FROM trips WHERE uuid = $1")
        .bind(k)
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

/// `sql` run on `conn` by the simple protocol: its error's SQLSTATE and
/// message, or `None` when it succeeded.
async fn fails(conn: &mut PgConnection, sql: &str) -> Option<(String, String)> {
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_string()))
        .execute(&mut *conn)
        .await
        .err()
        .map(|e| (sqlstate(&e).unwrap_or_default(), e.to_string()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_prepared_in_sql_is_judged_as_its_prepare_would_be_when_executed() {
    let (db, facade, proxy, k) = crate::proxy_writes::shadow_with_a_trip().await;

    // In shadow, every one is forwarded, and runs on PostgreSQL.
    let mut conn = PgConnection::connect(&proxy.url(&db)).await.unwrap();
    for prepare in [
        "PREPARE put (text, uuid) AS UPDATE trips SET status = $1 WHERE uuid = $2",
        "PREPARE \"Put\" (text, uuid) AS UPDATE public.trips SET status = $1 WHERE uuid = $2",
        "PREPARE look (uuid) AS SELECT status FROM trips WHERE uuid = $1",
        "PREPARE other AS SELECT 41 + 1",
    ] {
        assert_eq!(fails(&mut conn, prepare).await, None, "{prepare}");
    }
    let execute = format!("EXECUTE put('in shadow', '{k}')");
    assert_eq!(fails(&mut conn, &execute).await, None);
    assert_eq!(status_in_postgres(&db, k).await, "in shadow");

    // In primary, the writes prepared in shadow are refused by name, in
    // any case PostgreSQL folds it to, alone or among other statements,
    // and PostgreSQL's row is unchanged; the read is forwarded, as an
    // untranslatable read is there.
    crate::worker::forced(&facade, Mode::Primary).await;
    proxy_in(&proxy, "primary");
    for execute in [
        format!("EXECUTE put('in primary', '{k}')"),
        format!("execute PUT ('in primary', '{k}')"),
        format!("EXECUTE \"Put\"('in primary', '{k}')"),
        format!("SELECT 1; EXECUTE put('in primary', '{k}')"),
    ] {
        let (code, message) = fails(&mut conn, &execute)
            .await
            .unwrap_or_else(|| panic!("{execute} ran"));
        assert_eq!(code, "0A000", "{execute}: {message}");
        assert!(message.contains("prepared in SQL"), "{message}");
    }
    assert_eq!(status_in_postgres(&db, k).await, "in shadow");
    let looked: String = sqlx::query_scalar(sqlx::AssertSqlSafe(format!("EXECUTE look('{k}')")))
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(looked, "in shadow");
    assert_eq!(fails(&mut conn, "EXECUTE other").await, None);

    // A name deallocated and prepared again as a statement on no layout
    // table runs that statement.
    for sql in [
        "DEALLOCATE put",
        "PREPARE put (text, uuid) AS SELECT $1, $2",
    ] {
        assert_eq!(fails(&mut conn, sql).await, None, "{sql}");
    }
    assert_eq!(
        fails(&mut conn, &format!("EXECUTE put('x', '{k}')")).await,
        None
    );

    // In schemaless, PostgreSQL is not kept current: the read is refused
    // too, until DISCARD ALL forgets every name (PostgreSQL's as well).
    crate::worker::forced(&facade, Mode::Schemaless).await;
    proxy_in(&proxy, "schemaless");
    let (code, message) = fails(&mut conn, &format!("EXECUTE look('{k}')"))
        .await
        .expect("refused");
    assert_eq!(code, "0A000", "{message}");
    assert_eq!(fails(&mut conn, "DISCARD ALL").await, None);
    let (code, message) = fails(&mut conn, &format!("EXECUTE look('{k}')"))
        .await
        .expect("no such statement");
    assert_eq!(code, "26000", "PostgreSQL's own answer: {message}");
    assert_eq!(
        fails(&mut conn, "SELECT 1").await,
        None,
        "the session goes on"
    );
    conn.close().await.unwrap();
    facade.close().await;
}
