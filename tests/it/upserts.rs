//! An upsert (`INSERT ... ON CONFLICT (key) DO UPDATE`) through the
//! proxy in `primary`, with a `WHERE` on the DO UPDATE and a RETURNING
//! of the integer id: Prisma's own upsert is both (`... DO UPDATE SET ...
//! WHERE ("public"."t"."key" = $n AND 1=1) RETURNING "public"."t"."id",
//! ...`). Before, both were refused (`0A000`), so a Prisma app broke at
//! its first upsert once in `primary`. Now the WHERE is evaluated as
//! PostgreSQL evaluates it, over the existing row's latest cells with
//! `EXCLUDED` the proposed row (a row where it does not hold is left,
//! neither counted nor returned), and the id is the existing row's own,
//! or the one reserved for a row inserted. Each answer is PostgreSQL's
//! to the same statement, byte for byte.

use crate::harness::LegacyDb;
use crate::proxy::{psql, raw_session, ProxyProcess};
use crate::proxy_modes::raw_answer;
use crate::proxy_writes::{latest, primary_without_reverse, proxy_in, trip, version};
use crate::returning_ids::{first_row, numbered_trip, through_the_cell_api};

/// The messages of a simple Query's answer that are the statement's
/// own: its row description, rows, command tag and error code, without
/// the `BEGIN`/`ROLLBACK` it may be wrapped in, or ReadyForQuery.
fn statements_own(answer: Vec<(u8, Vec<u8>)>) -> Vec<(u8, Vec<u8>)> {
    answer
        .into_iter()
        .filter(|(kind, body)| match kind {
            b'C' => !body.starts_with(b"BEGIN") && !body.starts_with(b"ROLLBACK"),
            b'T' | b'D' => true,
            _ => false,
        })
        .collect()
}

/// `statement` through the proxy, and on PostgreSQL's own rows (rolled
/// back there): the whole answer, byte for byte.
fn answered_as_postgresql(db: &LegacyDb, proxy: &ProxyProcess, statement: &str) {
    let port = crate::harness::cluster().spec().postgres_port;
    let own = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let through = raw_answer(&mut raw_session(proxy.addr, db), statement);
    assert!(
        !through.iter().any(|(kind, _)| *kind == b'E'),
        "{statement}: {through:?}"
    );
    let own = raw_answer(
        &mut raw_session(own, db),
        &format!("BEGIN; {statement}; ROLLBACK"),
    );
    assert_eq!(statements_own(through), statements_own(own), "{statement}");
}

/// The id `mezzanine.row_ids` reserves for row `k`, if any.
async fn reservation(db: &LegacyDb, k: uuid::Uuid) -> Option<i64> {
    let pool = sqlx::PgPool::connect(&crate::harness::cluster().postgres_url(&db.name))
        .await
        .unwrap();
    let id = sqlx::query_scalar("SELECT id FROM mezzanine.row_ids WHERE row_key = $1")
        .bind(k)
        .fetch_optional(&pool)
        .await
        .unwrap();
    pool.close().await;
    id
}

/// Prisma's upsert of row `k`: the statement, every column named by the
/// table's schema-qualified name.
fn prisma_upsert(k: uuid::Uuid, status: &str) -> String {
    format!(
        "{} ON CONFLICT (\"uuid\") DO UPDATE SET \"status\" = '{status}', \"version\" = \
         (\"public\".\"trips\".\"version\" + 1) WHERE (\"public\".\"trips\".\"uuid\" = '{k}' \
         AND 1=1) RETURNING \"public\".\"trips\".\"id\", \"public\".\"trips\".\"uuid\", \
         \"public\".\"trips\".\"status\", \"public\".\"trips\".\"version\"",
        trip(k).replace("INSERT INTO trips", "INSERT INTO \"public\".\"trips\"")
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upserts_where_and_returning_id_answer_as_postgresql() {
    let (db, facade, file) = primary_without_reverse().await;
    let (k, id, read) = numbered_trip(&db).await;
    let proxy = ProxyProcess::start(file.path(), "127.0.0.1:0");
    proxy_in(&proxy, "primary");

    // A DO UPDATE whose WHERE does not hold on the existing row: left as
    // it is, `INSERT 0 0`, no row returned.
    answered_as_postgresql(
        &db,
        &proxy,
        &format!(
            "{} ON CONFLICT (uuid) DO UPDATE SET status = EXCLUDED.status || '!', \
             version = trips.version + 1 WHERE trips.status <> EXCLUDED.status \
             RETURNING id, status, version",
            trip(k)
        ),
    );
    // A SET that would fail is not evaluated where the WHERE does not
    // hold, an upsert's or an UPDATE's (before: `division by zero`).
    answered_as_postgresql(
        &db,
        &proxy,
        &format!(
            "{} ON CONFLICT (uuid) DO UPDATE SET fare = trips.fare / 0, \
             version = trips.version + 1 WHERE trips.status = 'cancelled'",
            trip(k)
        ),
    );
    answered_as_postgresql(
        &db,
        &proxy,
        &format!(
            "UPDATE trips SET fare = fare / 0, version = version + 1 \
             WHERE uuid = '{k}' AND status = 'cancelled' RETURNING fare"
        ),
    );
    assert_eq!(version(&facade, k).await, 1);

    // Prisma's upsert of the existing row: the WHERE holds; its own id.
    answered_as_postgresql(&db, &proxy, &prisma_upsert(k, "accepted"));
    assert_eq!(version(&facade, k).await, 2);
    assert_eq!(
        reservation(&db, k).await,
        None,
        "an existing row keeps its id"
    );

    // Prisma's upsert of a new row: the id drawn and reserved for it;
    // again, now existing (only in Schemaless), the same id.
    let url = proxy.url(&db);
    let returned = |sql: String| first_row(&url, &sql);
    let a = uuid::Uuid::new_v4();
    let first = returned(prisma_upsert(a, "accepted"));
    let id_a: i64 = first.split('|').next().unwrap().parse().unwrap();
    assert!(id_a > id, "{first}");
    assert_eq!(first, format!("{id_a}|{a}|requested|1"));
    assert_eq!(reservation(&db, a).await, Some(id_a));
    assert_eq!(
        returned(prisma_upsert(a, "accepted")),
        format!("{id_a}|{a}|accepted|2")
    );
    assert_eq!(reservation(&db, a).await, Some(id_a));
    // Its WHERE not holding: nothing written, nothing returned.
    let (ok, out, err) = psql(
        &url,
        &format!(
            "\\set ON_ERROR_STOP 1\n{} ON CONFLICT (uuid) DO UPDATE SET status = 'x', \
             version = trips.version + 1 WHERE trips.version > 5 RETURNING id;\n",
            trip(a)
        ),
    );
    assert!(
        ok && out.contains("(0 rows)") && out.contains("INSERT 0 0"),
        "{out}{err}"
    );
    assert_eq!(version(&facade, a).await, 2);

    // A row written through the cell API alone has no id yet: refused,
    // naming it, nothing written.
    let z = through_the_cell_api(&facade, &read).await;
    let (ok, _, err) = psql(
        &url,
        &format!("\\set ON_ERROR_STOP 1\n{};\n", prisma_upsert(z, "x")),
    );
    assert!(
        !ok && err.contains(&z.to_string()) && err.contains("which has none yet"),
        "{err}"
    );
    assert_eq!(version(&facade, z).await, 1);

    // A WHERE that reads what no cell holds, or a table: refused with
    // the reason, nothing written.
    for (condition, reason) in [
        ("trips.id > 0", "the integer id, which no cell holds"),
        (
            "trips.status IN (SELECT status FROM trips)",
            "reads the tables",
        ),
    ] {
        let (ok, _, err) = psql(
            &url,
            &format!(
                "\\set ON_ERROR_STOP 1\n\\set VERBOSITY verbose\n{} ON CONFLICT (uuid) DO UPDATE SET status = 'y', \
                 version = trips.version + 1 WHERE {condition};\n",
                trip(k)
            ),
        );
        assert!(
            !ok && err.contains("0A000") && err.contains(reason),
            "{err}"
        );
    }
    assert_eq!(version(&facade, k).await, 2);

    // A column assigned or listed twice: PostgreSQL's own error (the
    // proxy forwards it), nothing written. Before, one of the two values
    // was written and the other dropped.
    let n = uuid::Uuid::new_v4();
    for (statement, sqlstate) in [
        (
            format!(
                "UPDATE trips SET status = 'a', status = 'b', version = version + 1 \
                 WHERE uuid = '{k}'"
            ),
            "42601",
        ),
        (
            format!(
                "{} ON CONFLICT (uuid) DO UPDATE SET status = 'a', \"status\" = 'b', \
                 version = trips.version + 1",
                trip(k)
            ),
            "42601",
        ),
        (
            trip(n)
                .replace("status, fare", "status, status, fare")
                .replace("'requested', 12.5", "'requested', 'x', 12.5"),
            "42701",
        ),
    ] {
        let (ok, _, err) = psql(
            &url,
            &format!("\\set ON_ERROR_STOP 1\n\\set VERBOSITY verbose\n{statement};\n"),
        );
        assert!(!ok && err.contains(sqlstate), "{statement}: {err}");
    }
    assert_eq!(version(&facade, k).await, 2);
    assert!(latest(&facade, n, "BASE").await.is_none());
    facade.close().await;
}
