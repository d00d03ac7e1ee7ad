//! Each driver's one error classifier, fed errors the real servers send:
//! MariaDB's numbers through `schemaless::mysql::classify`, PostgreSQL's
//! SQLSTATEs through `legacy::classify`. A code either server changes, or
//! a case a classifier forgets, fails here rather than as a retry that
//! never ends or a conflict retried as if it were an outage.

use std::time::Duration;

use schemaless::Failure;
use sqlx::Connection;

use crate::harness::{Instance, LegacyDb};

/// The failure of `sql`, which must fail, run on a connection of its own
/// to `url` (its session settings and any transaction it leaves open go
/// with it).
async fn mysql_failure(url: &str, sql: &str) -> Failure {
    let e = match sqlx::MySqlConnection::connect(url).await {
        Ok(mut conn) => sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_string()))
            .execute(&mut conn)
            .await
            .expect_err(sql),
        Err(e) => e,
    };
    schemaless::mysql::classify(&e)
}

async fn pg_failure(url: &str, sql: &str) -> Failure {
    let e = match sqlx::PgConnection::connect(url).await {
        Ok(mut conn) => sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_string()))
            .execute(&mut conn)
            .await
            .expect_err(sql),
        Err(e) => e,
    };
    legacy::classify(&e)
}

#[tokio::test]
async fn mariadb_errors_are_classified_by_kind() {
    let t = Instance::new(2).await;
    let master = t.store.topology().cluster(0).unwrap().master();
    let pool = &master.pool;
    let url = t.config.clusters[0].master.clone();
    let db = t.store.topology().database(0);
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "CREATE TABLE {db}.classify (id INT PRIMARY KEY, short VARCHAR(2) NOT NULL, n TINYINT);
         INSERT INTO {db}.classify VALUES (1, 'a', 1);"
    )))
    .execute(pool)
    .await
    .unwrap();
    let strict = "SET SESSION sql_mode = 'STRICT_ALL_TABLES';";

    let cases = [
        (
            format!("INSERT INTO {db}.classify VALUES (1, 'b', 1)"),
            Failure::UniqueViolation,
        ),
        (
            format!("SELECT * FROM {db}.no_such_table"),
            Failure::MissingTable,
        ),
        (
            "SELECT * FROM no_such_database.t".into(),
            Failure::MissingTable,
        ),
        (
            format!("{strict} INSERT INTO {db}.classify VALUES (2, 'too long', 1)"),
            Failure::BadValue,
        ),
        (
            format!("{strict} INSERT INTO {db}.classify VALUES (3, 'c', 1000)"),
            Failure::BadValue,
        ),
        (
            format!("{strict} INSERT INTO {db}.classify VALUES (4, NULL, 1)"),
            Failure::ConstraintViolation,
        ),
        ("SELECT * FROM nowhere WHERE".into(), Failure::Other),
    ];
    for (sql, want) in cases {
        let got = mysql_failure(&url, &sql).await;
        assert_eq!(got, want, "{sql}");
    }

    // A lock wait that times out: one transaction holds the row, another
    // asks for it with a one-second timeout.
    let mut holder = pool.begin().await.unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "SELECT * FROM {db}.classify WHERE id = 1 FOR UPDATE"
    )))
    .execute(&mut *holder)
    .await
    .unwrap();
    let waiter = mysql_failure(
        &url,
        &format!(
            "SET SESSION innodb_lock_wait_timeout = 1; UPDATE {db}.classify SET n = 2 WHERE id = 1"
        ),
    )
    .await;
    assert_eq!(waiter, Failure::Conflict);
    assert!(waiter.is_retryable());
    holder.rollback().await.unwrap();

    // A server that is not there (nothing listens on port 1): the node
    // is unavailable.
    let unreachable = mysql_failure("mysql://root@127.0.0.1:1/x", "SELECT 1").await;
    assert_eq!(unreachable, Failure::Unavailable);

    // A store error carries its class: the API's predicates read it.
    let err = schemaless::mysql::storage_error(
        "test",
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("SELECT * FROM {db}.absent")))
            .execute(pool)
            .await
            .unwrap_err(),
    );
    assert!(err.is_missing_table() && !err.is_retryable(), "{err}");
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("DROP TABLE {db}.classify")))
        .execute(pool)
        .await
        .unwrap();
}

#[tokio::test]
async fn postgres_errors_are_classified_by_kind() {
    let db = LegacyDb::trips().await;
    sqlx::raw_sql(
        "CREATE TABLE classify (id int PRIMARY KEY, short varchar(2) NOT NULL,
                                n smallint CHECK (n >= 0));
         CREATE TABLE classify_ref (id int REFERENCES classify);
         CREATE TABLE classify_slots (slot int4range, EXCLUDE USING gist (slot WITH &&));
         INSERT INTO classify_slots VALUES ('[1,5)');
         CREATE FUNCTION classify_refuse() RETURNS trigger LANGUAGE plpgsql AS
           $$ BEGIN RAISE EXCEPTION 'refused by the app'; END $$;
         CREATE TABLE classify_guarded (id int);
         CREATE TRIGGER guard BEFORE INSERT ON classify_guarded
           FOR EACH ROW EXECUTE FUNCTION classify_refuse();
         INSERT INTO classify VALUES (1, 'a', 1);",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let pool = &db.pool;
    let url = db.config.legacy.as_ref().unwrap().url.clone();
    let cases = [
        (
            "INSERT INTO classify VALUES (1, 'b', 1)",
            Failure::UniqueViolation,
        ),
        ("SELECT * FROM no_such_table", Failure::MissingTable),
        ("SELECT * FROM no_such_schema.t", Failure::MissingTable),
        (
            "INSERT INTO classify VALUES (2, 'too long', 1)",
            Failure::BadValue,
        ),
        (
            "INSERT INTO classify VALUES (3, 'c', 100000)",
            Failure::BadValue,
        ),
        ("SELECT 1 / 0", Failure::BadValue),
        (
            "INSERT INTO classify VALUES (4, NULL, 1)",
            Failure::ConstraintViolation,
        ),
        (
            "INSERT INTO classify VALUES (5, 'e', -1)",
            Failure::ConstraintViolation,
        ),
        (
            "INSERT INTO classify_ref VALUES (9)",
            Failure::ConstraintViolation,
        ),
        (
            "INSERT INTO classify_slots VALUES ('[3,8)')",
            Failure::ConstraintViolation,
        ),
        (
            "INSERT INTO classify_guarded VALUES (1)",
            Failure::ConstraintViolation,
        ),
        (
            "SET statement_timeout = '50ms'; SELECT pg_sleep(2)",
            Failure::Busy,
        ),
        ("SELECT FROM WHERE", Failure::Other),
    ];
    for (sql, want) in cases {
        assert_eq!(pg_failure(&url, sql).await, want, "{sql}");
    }

    // A lock not granted within lock_timeout: what `legacy::connection::ddl`
    // retries.
    let mut holder = pool.begin().await.unwrap();
    sqlx::raw_sql("SELECT * FROM classify WHERE id = 1 FOR UPDATE")
        .execute(&mut *holder)
        .await
        .unwrap();
    let waiter = pg_failure(
        &url,
        "BEGIN; SET LOCAL lock_timeout = '100ms'; UPDATE classify SET n = 2 WHERE id = 1; COMMIT",
    )
    .await;
    assert_eq!(waiter, Failure::Conflict);
    // A statement cancelled at its timeout while it waited: the holder is
    // named among the transactions open longer than the timeout.
    let mut waiter = sqlx::PgConnection::connect(&url).await.unwrap();
    let timed_out =
        sqlx::raw_sql("SET statement_timeout = '200ms'; UPDATE classify SET n = 3 WHERE id = 1")
            .execute(&mut waiter)
            .await
            .unwrap_err();
    assert!(legacy::connection::timed_out(&timed_out), "{timed_out}");
    let holder_pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut *holder)
        .await
        .unwrap();
    let held = legacy::connection::long_transactions(pool, Duration::from_millis(200)).await;
    assert_eq!(held.len(), 1, "{held:?}");
    assert!(
        held[0].starts_with(&format!("pid {holder_pid} "))
            && held[0].contains("idle in transaction")
            && held[0].contains("SELECT pg_backend_pid()"),
        "{held:?}"
    );
    holder.rollback().await.unwrap();
    assert_eq!(
        legacy::connection::long_transactions(pool, Duration::from_millis(200)).await,
        Vec::<String>::new()
    );

    assert_eq!(
        pg_failure("postgres://postgres@127.0.0.1:1/x", "SELECT 1").await,
        Failure::Unavailable
    );
}
