//! An UPDATE's or DELETE's RETURNING that reads the parent's integer id
//! (Prisma ends its updates and deletes so: `RETURNING` the id, or
//! every column) in `primary`, where the proxy runs them through the
//! facade and no cell holds the id. Each row's own id is answered: the
//! legacy table's, or the reservation of a row the proxy inserted and
//! the reverse mirror has not yet, as PostgreSQL answers the same
//! statement, byte for byte. Before, both were refused (`0A000`), so
//! such an app broke at the step to `primary`. A row that has no id yet
//! (written through the cell API, not yet mirrored) is refused, and
//! nothing is written.

use schemaless::{Cell, CellStore, Column, MySqlStore, ReadFrom, RefKey, RowKey, StoredCell};

use crate::harness::LegacyDb;

use crate::proxy::{psql, raw_session, ProxyProcess};
use crate::proxy_modes::raw_answer;
use crate::proxy_writes::{latest, primary_without_reverse, proxy_in, trip, version};

/// The row description and the first data row of a simple Query's
/// answer (the statement's own, where the Query is wrapped in
/// `BEGIN`/`ROLLBACK`).
fn described_row(answer: &[(u8, Vec<u8>)]) -> (Vec<u8>, Vec<u8>) {
    let first = |kind: u8| {
        answer
            .iter()
            .find(|(k, _)| *k == kind)
            .map(|(_, body)| body.clone())
            .unwrap_or_else(|| panic!("no {} in {answer:?}", kind as char))
    };
    (first(b'T'), first(b'D'))
}

/// A trip PostgreSQL numbered, copied into Schemaless as the backfill
/// copies it: its key, its id and its cell.
pub(crate) async fn numbered_trip(db: &LegacyDb) -> (uuid::Uuid, i64, StoredCell) {
    let legacy = db.store().await;
    let schemaless = MySqlStore::connect(&db.config).unwrap();
    let direct = crate::harness::cluster().postgres_url(&db.name);
    let k = uuid::Uuid::new_v4();
    let (ok, out, err) = psql(
        &direct,
        &format!(
            "\\set ON_ERROR_STOP 1\n\\pset tuples_only on\n{} RETURNING id;\n",
            trip(k)
        ),
    );
    assert!(ok, "{err}");
    let id: i64 = out
        .lines()
        .next()
        .unwrap_or_default()
        .trim()
        .parse()
        .unwrap();
    let read = legacy
        .get_cell_latest(
            &RowKey::from(k),
            &Column::new("BASE").unwrap(),
            ReadFrom::Master,
        )
        .await
        .unwrap()
        .unwrap();
    schemaless.put_cells(vec![read.cell.clone()]).await.unwrap();
    (k, id, read)
}

/// The first row `sql` answers at `url`, its values joined by `|`.
pub(crate) fn first_row(url: &str, sql: &str) -> String {
    let (ok, out, err) = psql(
        url,
        &format!(
            "\\set QUIET 1\n\\set ON_ERROR_STOP 1\n\\pset tuples_only on\n\\pset format unaligned\n{sql};\n"
        ),
    );
    assert!(ok, "{sql}: {out}{err}");
    out.lines().next().unwrap_or_default().to_string()
}

/// A new row written through the cell API alone (a copy of `read`'s
/// body at version 1): it has no integer id until the reverse mirror
/// inserts it.
pub(crate) async fn through_the_cell_api(facade: &impl CellStore, read: &StoredCell) -> uuid::Uuid {
    let z = uuid::Uuid::new_v4();
    let cell = Cell::new(
        RowKey::from(z),
        read.cell.key.column.clone(),
        RefKey::new(1).unwrap(),
        read.cell.body.clone(),
    );
    facade.put_cell(cell).await.unwrap();
    z
}

/// `statement` through the proxy and on PostgreSQL's own row (rolled
/// back): the same description and first row, byte for byte.
pub(crate) fn same_as_postgresql(db: &LegacyDb, proxy: &ProxyProcess, statement: &str) {
    let port = crate::harness::cluster().spec().postgres_port;
    let own = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let through = raw_answer(&mut raw_session(proxy.addr, db), statement);
    let own = raw_answer(
        &mut raw_session(own, db),
        &format!("BEGIN; {statement}; ROLLBACK"),
    );
    assert_eq!(described_row(&through), described_row(&own), "{statement}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_or_delete_returning_the_integer_id_answers_the_rows_own() {
    let (db, facade, file) = primary_without_reverse().await;

    let (k, id, read) = numbered_trip(&db).await;

    let proxy = ProxyProcess::start(file.path(), "127.0.0.1:0");
    proxy_in(&proxy, "primary");
    let same = |statement: String| same_as_postgresql(&db, &proxy, &statement);
    same(format!(
        "UPDATE trips SET status = 'accepted', version = version + 1 WHERE uuid = '{k}' RETURNING *"
    ));
    assert_eq!(version(&facade, k).await, 2);
    same(format!(
        "UPDATE trips t SET fare = t.fare * 2, version = t.version + 1 WHERE t.uuid = '{k}' \
         RETURNING t.id, t.id * 10 AS tenfold, t.uuid"
    ));
    same(format!(
        "DELETE FROM trips WHERE uuid = '{k}' RETURNING id, uuid"
    ));
    assert!(latest(&facade, k, "BASE").await.is_none(), "deleted");

    // A row the proxy inserted, which no reverse mirror has put in
    // PostgreSQL: its reserved id.
    let url = proxy.url(&db);
    let a = uuid::Uuid::new_v4();
    let returned = |sql: String| first_row(&url, &sql);
    let id_a = returned(format!("{} RETURNING id", trip(a)));
    assert!(id_a.parse::<i64>().unwrap() > id, "{id_a}");
    assert_eq!(
        returned(format!(
            "UPDATE trips SET status = 'accepted', version = version + 1 WHERE uuid = '{a}' \
             RETURNING id, status, version"
        )),
        format!("{id_a}|accepted|2")
    );

    // A row written through the cell API alone has no id until the
    // reverse mirror inserts it: refused, naming it, nothing written.
    let z = through_the_cell_api(&facade, &read).await;
    let (ok, _, err) = psql(
        &url,
        &format!(
            "\\set ON_ERROR_STOP 1\nUPDATE trips SET status = 'x', version = version + 1 \
             WHERE uuid = '{z}' RETURNING id;\n"
        ),
    );
    assert!(
        !ok && err.contains(&z.to_string()) && err.contains("which has none yet"),
        "{err}"
    );
    assert_eq!(version(&facade, z).await, 1);

    // The audit says where the id comes from; a child's parent key is
    // still refused (an upsert's id is answered: tests/it/upserts.rs).
    let out = crate::harness::mezzanine(
        file.path(),
        &[
            "query",
            "translate",
            "DELETE FROM trips WHERE uuid = $1 RETURNING id",
        ],
    )
    .output()
    .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && said.contains("read each row's integer id"),
        "{said}"
    );
    facade.close().await;
}

/// A child row's key to its parent, which Prisma's `create` of a child
/// row returns with every column: the parent's own id (the legacy
/// table's, or its reservation), as PostgreSQL answers it. Before, a
/// child INSERT's or DELETE's RETURNING of it was refused (`0A000`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_rows_returning_reads_its_parents_id() {
    let (db, facade, file) = primary_without_reverse().await;
    let (k, id, read) = numbered_trip(&db).await;
    let proxy = ProxyProcess::start(file.path(), "127.0.0.1:0");
    proxy_in(&proxy, "primary");
    let note = |parent: &str, seq: i64| {
        format!(
            "INSERT INTO trip_notes (trip_id, seq, author, body, created_at) VALUES \
             ({parent}, {seq}, 'ops', 'n', '2026-12-03 10:00:00Z')"
        )
    };
    let by_uuid = |k: uuid::Uuid| format!("(SELECT id FROM trips WHERE uuid = '{k}')");
    same_as_postgresql(
        &db,
        &proxy,
        &format!("{} RETURNING *", note(&by_uuid(k), 1)),
    );
    same_as_postgresql(
        &db,
        &proxy,
        &format!(
            "{} RETURNING \"public\".\"trip_notes\".\"trip_id\", seq, trip_id * 10 AS tenfold",
            note(&id.to_string(), 2).replace(
                "INSERT INTO trip_notes",
                "INSERT INTO \"public\".\"trip_notes\""
            )
        ),
    );
    let url = proxy.url(&db);
    assert_eq!(
        first_row(
            &url,
            &format!(
                "DELETE FROM trip_notes n WHERE n.trip_id = {} AND n.seq = 1 \
                 RETURNING n.trip_id, n.seq",
                by_uuid(k)
            )
        ),
        format!("{id}|1")
    );

    // A parent the proxy inserted, which PostgreSQL does not have yet:
    // its reserved id.
    let a = uuid::Uuid::new_v4();
    let id_a = first_row(&url, &format!("{} RETURNING id", trip(a)));
    assert_eq!(
        first_row(&url, &format!("{} RETURNING trip_id", note(&by_uuid(a), 1))),
        id_a
    );

    // A parent written through the cell API alone has no id yet: refused,
    // nothing written.
    let z = through_the_cell_api(&facade, &read).await;
    let (ok, _, err) = psql(
        &url,
        &format!(
            "\\set ON_ERROR_STOP 1\n{} RETURNING trip_id;\n",
            note(&by_uuid(z), 1)
        ),
    );
    assert!(!ok && err.contains("which has none yet"), "{err}");
    assert!(latest(&facade, z, "NOTES").await.is_none());
    facade.close().await;
}

/// Prisma names every column by its table's schema-qualified name
/// (`"public"."trips"."id"`), in SET, WHERE and RETURNING: answered as
/// PostgreSQL answers them. Before, the answer failed once the cells
/// were put, so the app was told that a write it made had failed. And a
/// RETURNING that PostgreSQL cannot evaluate over the row fails before
/// anything is written, as PostgreSQL fails the statement.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_naming_columns_by_schema_or_returning_what_fails_answers_as_postgresql() {
    let (db, facade, file) = primary_without_reverse().await;
    let (k, _, _) = numbered_trip(&db).await;
    let proxy = ProxyProcess::start(file.path(), "127.0.0.1:0");
    proxy_in(&proxy, "primary");
    same_as_postgresql(
        &db,
        &proxy,
        &format!(
            "UPDATE \"public\".\"trips\" SET \"status\" = 'accepted', \"version\" = \
             (\"public\".\"trips\".\"version\" + 1) WHERE (\"public\".\"trips\".\"uuid\" = '{k}' \
             AND 1=1) RETURNING \"public\".\"trips\".\"id\", \"public\".\"trips\".\"status\", \
             \"public\".\"trips\".\"version\""
        ),
    );
    assert_eq!(version(&facade, k).await, 2);
    let url = proxy.url(&db);
    let a = uuid::Uuid::new_v4();
    let (ok, out, err) = psql(
        &url,
        &format!(
            "\\set ON_ERROR_STOP 1\n{} RETURNING \"public\".\"trips\".\"id\", \"public\".\"trips\".\"uuid\";\n",
            trip(a).replace("INSERT INTO trips", "INSERT INTO \"public\".\"trips\"")
        ),
    );
    assert!(
        ok && out.contains(&a.to_string()) && out.contains("(1 row)"),
        "{out}{err}"
    );
    let (ok, out, err) = psql(
        &url,
        &format!(
            "\\set ON_ERROR_STOP 1\nDELETE FROM public.trips WHERE public.trips.uuid = '{a}' \
             RETURNING public.trips.uuid;\n"
        ),
    );
    assert!(ok && out.contains("DELETE 1"), "{out}{err}");
    assert!(latest(&facade, a, "BASE").await.is_none());

    // A RETURNING that fails on the row's values: PostgreSQL's error,
    // and nothing written (before: written, then the error).
    let failing = format!(
        "\\set ON_ERROR_STOP 1\nUPDATE trips SET version = version + 1 WHERE uuid = '{k}' \
         RETURNING uuid, 1 / (fare - fare) AS ratio;\n"
    );
    let (ok, _, err) = psql(&url, &failing);
    let direct = crate::harness::cluster().postgres_url(&db.name);
    let (direct_ok, _, direct_err) = psql(&direct, &failing);
    assert!(!ok && !direct_ok, "{err} / {direct_err}");
    assert!(
        err.contains("division by zero") && direct_err.contains("division by zero"),
        "{err}"
    );
    assert_eq!(version(&facade, k).await, 2);
    facade.close().await;
}

/// A parent row the repair inserts into PostgreSQL (Schemaless the source
/// of truth, in `primary`: `verify repair` of a row PostgreSQL lacks)
/// takes the integer id reserved for it, as the reverse mirror's row
/// would, and ends the reservation; before, it took the sequence's next,
/// another id than the app was answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_the_repair_inserts_takes_the_id_reserved_for_it() {
    let (db, facade, _file) = primary_without_reverse().await;
    let (_, _, read) = numbered_trip(&db).await;
    let z = through_the_cell_api(&facade, &read).await;
    sqlx::query(
        "INSERT INTO mezzanine.row_ids (parent, row_key, id) VALUES ('trips'::regclass, $1, 6161)",
    )
    .bind(z)
    .execute(&db.pool)
    .await
    .unwrap();
    let cell = latest(&facade, z, "BASE").await.unwrap().cell;
    facade
        .legacy()
        .replace_column(&RowKey::from(z), &cell.key.column.clone(), vec![cell])
        .await
        .unwrap();
    let id: i64 = sqlx::query_scalar("SELECT id FROM trips WHERE uuid = $1")
        .bind(z)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(id, 6161);
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM mezzanine.row_ids WHERE row_key = $1")
        .bind(z)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(left, 0, "the reservation ends with the row's insert");
    facade.close().await;
}
