//! The translator against ORM-shaped SQL: the shapes SQLAlchemy,
//! ActiveRecord and Django emit (qualified columns, aliases, quoted
//! identifiers, `$n` and literal parameters, IN lists, ANY, casts, LIMIT
//! $n, RETURNING), for the trips layout of `config/examples/local.toml`
//! and for a second layout with other names, so that the rules are seen
//! to come from the config.

use query::{analyze, analyze_text, Class, Model};

fn trips() -> Model {
    let config = config::Config::load(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../config/examples/local.toml"
    ))
    .expect("the example config loads");
    Model::from_config(&config).expect("it has a layout")
}

/// A second layout: other schema, table, key and column names, JSON field
/// names that differ from the SQL columns, and its own index.
fn shop() -> Model {
    let text = r#"
[instance]
name = "shop"
shard_count = 8

[[cluster]]
name = "a"
master = "mysql://root@127.0.0.1:33061"
shards = "0-7"

[storage]
durability = "one_host"

[legacy]
url = "postgres://postgres@127.0.0.1:55432/shop"

[layout]
schema = "sales"
table = "orders"
id = "order_no"
uuid = "public_id"

[[layout.column]]
name = "HEADER"
kind = "row"
ref_key = "rev"
fields = { customer = "customer_ref", state = "state", total = "total_cents", placed = "placed_at" }

[[layout.column]]
name = "LINES"
kind = "child"
table = "order_lines"
parent = "order_no"
ref_key = "line_no"
fields = ["sku", "qty", "price"]

[[index]]
name = "orders_by_customer"
column = "HEADER"
shard_field = "customer"
fields = ["placed", "state"]
"#;
    let config = config::Config::parse(text, "shop.toml").expect("the shop config is valid");
    Model::from_config(&config).expect("it has a layout")
}

/// (statement, class, a piece of its calls or reason that must appear)
type Case = (&'static str, Class, &'static str);

const TRIPS: &[Case] = &[
    // --- row: reads by row key ---
    ("SELECT * FROM trips WHERE uuid = $1", Class::Row, "get_cell_latest(row = $1, BASE)"),
    ("SELECT trips.uuid, trips.driver_uuid, trips.status, trips.fare FROM trips WHERE trips.uuid = $1::uuid", Class::Row, "get_cell_latest(row = $1, BASE)"),
    ("SELECT t.status AS trip_status FROM public.trips AS t WHERE t.uuid = $1 LIMIT 1", Class::Row, "limit in the app: 1"),
    (r#"SELECT "trips"."uuid", "trips"."fare" FROM "trips" WHERE "trips"."uuid" = $1 LIMIT $2"#, Class::Row, "get_cell_latest(row = $1, BASE)"),
    ("SELECT trips.status FROM trips WHERE trips.uuid IN ($1, $2, $3)", Class::Row, "rows in ($1, $2, $3)"),
    ("SELECT status FROM trips WHERE uuid = ANY($1)", Class::Row, "rows in $1"),
    ("SELECT status FROM trips WHERE uuid = ANY($1::uuid[])", Class::Row, "rows in $1"),
    ("SELECT fare, currency FROM trips WHERE uuid = '6f1c1a0e-8a3b-4a55-9d1e-000000000001'", Class::Row, "row = '6f1c1a0e-8a3b-4a55-9d1e-000000000001'"),
    ("SELECT version, status FROM trips WHERE uuid = $1", Class::Row, "get_cell_latest(row = $1, BASE)"),
    ("SELECT status FROM trips WHERE uuid = $1 AND status = 'completed'", Class::Row, "filter in the app: status = 'completed'"),
    ("SELECT uuid FROM trips WHERE uuid = $1", Class::Row, "get_cell_latest(row = $1, BASE)"),
    ("SELECT n.author, n.body, n.created_at FROM trip_notes n JOIN trips t ON n.trip_id = t.id WHERE t.uuid = $1 ORDER BY n.seq", Class::Row, "get_column_cells(row = $1, NOTES)"),
    ("SELECT trip_notes.* FROM trip_notes INNER JOIN trips ON trips.id = trip_notes.trip_id WHERE trips.uuid = $1", Class::Row, "get_column_cells(row = $1, NOTES)"),
    ("SELECT t.status, b.amount, b.succeeded FROM trips t LEFT JOIN billing_attempts b ON b.trip_id = t.id WHERE t.uuid = $1", Class::Row, "get_column_cells(row = $1, BILLING)"),
    ("SELECT b.amount FROM billing_attempts b, trips t WHERE b.trip_id = t.id AND t.uuid IN ($1, $2) AND b.succeeded", Class::Row, "filter in the app: b.succeeded"),
    ("SELECT fa.amount, fa.reason, fa.codes FROM fare_adjustments fa JOIN trips ON trips.id = fa.trip_id WHERE trips.uuid = $1 ORDER BY fa.created_at DESC", Class::Row, "sort in the app: fa.created_at desc"),
    ("SELECT 1 AS one FROM trips WHERE uuid = $1", Class::Row, "get_cell_latest(row = $1, BASE)"),
    ("  -- Django: Trip.objects.get(uuid=...)\n SELECT \"trips\".\"uuid\", \"trips\".\"status\" FROM \"trips\" WHERE \"trips\".\"uuid\" = 'a1b2c3d4-0000-0000-0000-000000000000'::uuid LIMIT 21", Class::Row, "limit in the app: 21"),
    // --- index: trips_by_driver (driver_uuid; requested_at, city_id, status) ---
    ("SELECT uuid, requested_at FROM trips WHERE driver_uuid = $1 AND requested_at >= $2 ORDER BY requested_at DESC LIMIT 20", Class::Index, "query_index(trips_by_driver, driver_uuid = $1, requested_at >= $2, order by requested_at desc, limit 20)"),
    ("SELECT trips.uuid, trips.status FROM trips WHERE trips.driver_uuid = $1 ORDER BY trips.requested_at LIMIT $2", Class::Index, "order by requested_at, limit $2"),
    ("SELECT * FROM trips WHERE driver_uuid = $1 ORDER BY requested_at DESC LIMIT 20", Class::Index, "get_cell_latest(row, BASE) per entry"),
    ("SELECT t.uuid, t.fare FROM trips t WHERE t.driver_uuid = $1::uuid AND t.city_id IN (1, 2, 3)", Class::Index, "city_id in (1, 2, 3)"),
    ("SELECT uuid FROM trips WHERE driver_uuid = $1 AND status = ANY($2)", Class::Index, "status in $2"),
    ("SELECT uuid FROM trips WHERE driver_uuid = $1 AND requested_at BETWEEN $2 AND $3", Class::Index, "requested_at >= $2, requested_at <= $3"),
    ("SELECT uuid FROM trips WHERE $1 = driver_uuid AND $2 < requested_at", Class::Index, "requested_at > $2"),
    ("SELECT uuid, city_id FROM trips WHERE driver_uuid = $1 AND status = 'completed' ORDER BY requested_at DESC, uuid DESC LIMIT 50", Class::Index, "status = 'completed', order by requested_at desc, limit 50"),
    ("SELECT uuid FROM trips WHERE driver_uuid = 'd7a0a5e8-1111-2222-3333-444455556666'", Class::Index, "limit 10000 (no LIMIT"),
    ("SELECT t.uuid, n.body FROM trips t JOIN trip_notes n ON n.trip_id = t.id WHERE t.driver_uuid = $1 ORDER BY t.requested_at", Class::Index, "get_column_cells(the entries' rows, NOTES)"),
    ("SELECT t.uuid, n.body FROM trips t JOIN trip_notes n ON n.trip_id = t.id WHERE t.driver_uuid = $1 LIMIT 10", Class::None, "query_index limits parents, not joined rows"),
    // --- write ---
    ("INSERT INTO trips (uuid, version, driver_uuid, rider_uuid, city_id, status, fare, currency, requested_at) VALUES ($1, 1, $2, $3, $4, 'requested', $5, 'USD', now())", Class::Write, "put_cell(row = $1, BASE, ref_key = 1, {city_id: $4"),
    (r#"INSERT INTO "trips" ("uuid", "version", "status") VALUES ($1::uuid, $2, $3) RETURNING "trips"."uuid""#, Class::Write, "put_cell(row = $1, BASE, ref_key = $2"),
    ("INSERT INTO trips (uuid, version, status) VALUES ($1, 1, 'a'), ($2, 1, 'b')", Class::Write, "put_cell(row = $2, BASE, ref_key = 1"),
    ("INSERT INTO trips (uuid, version, status) VALUES ($1, 1, $2) ON CONFLICT DO NOTHING", Class::Write, "put_cell(row = $1"),
    ("UPDATE trips SET status = $1, version = version + 1 WHERE uuid = $2", Class::Write, "put_cell(row = $2, BASE, ref_key = version + 1 (of the latest cell), latest body with {status: $1})"),
    ("UPDATE trips SET status = $1, version = $2 WHERE uuid = $3 AND version = $4", Class::Write, "check in the app: version = $4"),
    (r#"UPDATE "trips" SET "fare" = $1, "version" = ("trips"."version" + 1) WHERE "trips"."uuid" = $2::uuid"#, Class::Write, "get_cell_latest(row = $2, BASE)"),
    ("UPDATE trips SET completed_at = now(), status = 'completed', version = version + 1 WHERE uuid IN ($1, $2)", Class::Write, "rows in ($1, $2)"),
    ("INSERT INTO trip_notes (trip_id, seq, author, body, created_at) VALUES ((SELECT id FROM trips WHERE uuid = $1), $2, $3, $4, now())", Class::Write, "put_cell(row = $1, NOTES, ref_key = $2, {at: now(), author: $3, text: $4})"),
    ("INSERT INTO billing_attempts (trip_id, seq, amount, currency, succeeded) SELECT trips.id, $2, $3, 'USD', false FROM trips WHERE trips.uuid = $1", Class::Write, "put_cell(row = $1, BILLING, ref_key = $2"),
    // --- none: each with the construct and the fix ---
    ("SELECT * FROM trips WHERE id = $1", Class::None, "integer id: rewrite it to the UUID t"),
    ("SELECT trips.status FROM trips WHERE trips.id IN (1, 2, 3)", Class::None, "integer id"),
    ("SELECT id, status FROM trips WHERE uuid = $1", Class::None, "reads trips.id, the integer id"),
    ("SELECT count(*) FROM trips WHERE driver_uuid = $1", Class::None, "aggregate count(*)"),
    ("SELECT driver_uuid, sum(fare) FROM trips GROUP BY driver_uuid", Class::None, "GROUP BY"),
    ("SELECT t.status, c.name FROM trips t JOIN cities c ON c.id = t.city_id WHERE t.uuid = $1", Class::None, "joins cities, a table outside the layout"),
    ("SELECT uuid FROM trips WHERE driver_uuid = $1 AND fare > 10", Class::None, "add \"fare\" to its fields"),
    ("SELECT uuid FROM trips WHERE driver_uuid = $1 ORDER BY fare DESC LIMIT 5", Class::None, "orders by trips.fare"),
    ("SELECT uuid FROM trips WHERE status = 'requested' LIMIT 100", Class::None, "shard_field = \"status\""),
    ("SELECT uuid FROM trips WHERE rider_uuid = $1", Class::None, "declare an [[index]] on column BASE with shard_field = \"rider_uuid\""),
    ("SELECT * FROM trips ORDER BY requested_at DESC LIMIT 10", Class::None, "without its UUID uuid or an equality on an index's shard field"),
    ("SELECT * FROM trips WHERE uuid = $1 FOR UPDATE", Class::None, "row lock (FOR UPDATE)"),
    ("DELETE FROM trips WHERE uuid = $1", Class::None, "DELETE: cells are append-only"),
    ("DELETE FROM trip_notes WHERE trip_id = $1", Class::None, "tombstone cell (column DELETED)"),
    ("UPDATE trips SET status = $1 WHERE uuid = $2", Class::None, "without a new ref key"),
    ("UPDATE trips SET status = 'expired', version = version + 1 WHERE requested_at < $1", Class::None, "a write by a non-key predicate"),
    ("UPDATE trips SET status = $1, version = version + 1 WHERE id = $2", Class::None, "writes by trips.id, the integer id"),
    ("INSERT INTO trips (uuid, version, status) VALUES ($1, 1, $2) ON CONFLICT (uuid) DO UPDATE SET status = EXCLUDED.status", Class::None, "upsert (ON CONFLICT DO UPDATE) that changes a row of trips without a new ref key"),
    ("INSERT INTO trips (driver_uuid, status, version) VALUES ($1, $2, 1) RETURNING id", Class::None, "RETURNING trips.id"),
    ("INSERT INTO trips (uuid, status, fare) VALUES ($1, $2, $3)", Class::None, "without the ref key version of column BASE"),
    ("INSERT INTO trips (uuid, version, status, promo_code) VALUES ($1, 1, $2, $3)", Class::None, "writes trips.promo_code, which the layout does not map"),
    ("INSERT INTO trip_notes (trip_id, seq, author, body) VALUES ($1, $2, $3, $4)", Class::None, "names its parent by the integer id trip_notes.trip_id"),
    ("UPDATE trip_notes SET body = $1 WHERE trip_id = $2 AND seq = $3", Class::None, "a child row is one cell of column NOTES"),
    ("SELECT * FROM trip_notes WHERE trip_id = $1 ORDER BY seq", Class::None, "filters trip_notes by trip_notes.trip_id, the parent's integer id"),
    ("SELECT DISTINCT status FROM trips WHERE driver_uuid = $1", Class::None, "DISTINCT"),
    ("SELECT uuid FROM trips WHERE driver_uuid = $1 ORDER BY requested_at LIMIT 20 OFFSET 40", Class::None, "OFFSET 40: query_index has no offset"),
    ("SELECT uuid FROM trips WHERE driver_uuid = $1 OR rider_uuid = $1", Class::None, "without its UUID"),
    ("SELECT lower(status) FROM trips WHERE uuid = $1", Class::None, "selects the expression lower(status)"),
    ("SELECT uuid FROM trips WHERE uuid IN (SELECT trip_uuid FROM favourites WHERE user_id = $1)", Class::None, "subquery"),
    ("SELECT t.uuid FROM trips t WHERE t.uuid = $1 UNION SELECT t2.uuid FROM trips t2 WHERE t2.uuid = $2", Class::None, "UNION"),
    ("WITH recent AS (SELECT * FROM trips WHERE driver_uuid = $1) SELECT * FROM recent", Class::None, "WITH"),
    ("SELECT promo_code FROM trips WHERE uuid = $1", Class::None, "reads trips.promo_code, which the layout does not map"),
    ("TRUNCATE trips", Class::None, "TRUNCATE on a layout table"),
    ("ALTER TABLE trips ADD COLUMN promo_code text", Class::None, "ALTER on a layout table"),
    ("SELECT uuid FROM trips WHERE driver_uuid = $1 AND status LIKE 'compl%'", Class::None, "is not a comparison"),
    ("SELECT t1.uuid FROM trips t1 JOIN trips t2 ON t1.driver_uuid = t2.rider_uuid WHERE t1.uuid = $1", Class::None, "joins trips to itself"),
    // --- other: no layout table ---
    ("SELECT id, name FROM cities WHERE id = $1", Class::Other, ""),
    ("UPDATE users SET last_seen = now() WHERE id = $1", Class::Other, ""),
    ("SELECT 1", Class::Other, ""),
    ("BEGIN", Class::Other, ""),
    ("SET statement_timeout = 5000", Class::Other, ""),
    ("SELECT * FROM archive.trips WHERE uuid = $1", Class::Other, ""),
];

const SHOP: &[Case] = &[
    ("SELECT o.public_id, o.state, o.total_cents FROM sales.orders o WHERE o.public_id = $1", Class::Row, "get_cell_latest(row = $1, HEADER)"),
    ("SELECT l.sku, l.qty FROM order_lines l JOIN orders o ON l.order_no = o.order_no WHERE o.public_id = ANY($1)", Class::Row, "get_column_cells(rows in $1, LINES)"),
    ("SELECT public_id, placed_at FROM orders WHERE customer_ref = $1 AND placed_at > $2 ORDER BY placed_at DESC LIMIT 10", Class::Index, "query_index(orders_by_customer, customer = $1, placed > $2, order by placed desc, limit 10)"),
    ("SELECT public_id, total_cents FROM orders WHERE customer_ref = $1 AND state IN ('open', 'paid')", Class::Index, "get_cell_latest(row, HEADER) per entry"),
    ("SELECT public_id FROM orders WHERE customer_ref = $1 AND total_cents > 1000", Class::None, "add \"total\" to its fields"),
    ("SELECT * FROM orders WHERE order_no = $1", Class::None, "rewrite it to the UUID orders.public_id"),
    ("SELECT * FROM order_lines WHERE order_no = $1", Class::None, "join orders ON order_lines.order_no = orders.order_no"),
    ("SELECT public_id FROM orders WHERE state = 'open'", Class::None, "shard_field = \"state\""),
    ("INSERT INTO sales.orders (public_id, rev, customer_ref, state) VALUES ($1, 1, $2, 'open')", Class::Write, "put_cell(row = $1, HEADER, ref_key = 1, {customer: $2, placed: null, state: 'open', total: null})"),
    ("UPDATE orders SET state = 'paid', rev = rev + 1 WHERE public_id = $1", Class::Write, "latest body with {state: 'paid'}"),
    ("UPDATE orders SET state = 'paid' WHERE public_id = $1", Class::None, "also set rev (e.g. rev = rev + 1)"),
    ("INSERT INTO order_lines (order_no, line_no, sku, qty, price) VALUES ((SELECT order_no FROM orders WHERE public_id = $1), $2, $3, $4, $5)", Class::Write, "put_cell(row = $1, LINES, ref_key = $2, {price: $5, qty: $4, sku: $3})"),
    ("INSERT INTO order_lines (order_no, line_no, sku) VALUES ($1, 1, $2)", Class::None, "names its parent by the integer id order_lines.order_no"),
    ("DELETE FROM orders WHERE public_id = $1", Class::None, "DELETE"),
    ("SELECT count(*) FROM order_lines l JOIN orders o ON l.order_no = o.order_no WHERE o.public_id = $1", Class::None, "aggregate count(*)"),
    // The trips names mean nothing to this layout.
    ("SELECT * FROM trips WHERE uuid = $1", Class::Other, ""),
    ("SELECT * FROM public.orders WHERE public_id = $1", Class::Other, ""),
    ("SELECT * FROM orders WHERE uuid = $1", Class::None, "reads orders.uuid, which the layout does not map"),
];

fn check(model: &Model, cases: &[Case]) {
    let mut failures = Vec::new();
    for (sql, class, piece) in cases {
        let a = analyze(model, sql);
        let text = format!(
            "{}\n{}",
            a.calls().join("\n"),
            a.reason.clone().unwrap_or_default()
        );
        if a.class != *class || !text.contains(piece) {
            failures.push(format!(
                "{sql}\n  expected {class} with {piece:?}\n  got {} with\n    {}",
                a.class,
                text.replace('\n', "\n    ")
            ));
        }
        match a.class {
            Class::Row | Class::Index | Class::Write => {
                assert!(a.reason.is_none() && !a.calls().is_empty(), "{sql}")
            }
            Class::None => assert!(a.calls().is_empty() && a.reason.is_some(), "{sql}"),
            Class::Other | Class::Unparsed => assert!(a.calls().is_empty(), "{sql}"),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

#[test]
fn the_trips_corpus_is_classified_with_its_calls_and_reasons() {
    assert!(
        TRIPS.len() >= 60,
        "the corpus has {} statements",
        TRIPS.len()
    );
    check(&trips(), TRIPS);
}

#[test]
fn a_second_layout_with_other_names_is_classified_by_its_config() {
    check(&shop(), SHOP);
}

#[test]
fn every_class_appears_in_the_corpus() {
    for class in [
        Class::Row,
        Class::Index,
        Class::Write,
        Class::None,
        Class::Other,
    ] {
        assert!(TRIPS.iter().any(|c| c.1 == class), "{class}");
    }
}

#[test]
fn unparseable_statements_are_reported_not_dropped() {
    let model = trips();
    let found = analyze_text(
        &model,
        "SELECT status FROM trips WHERE uuid = $1;\nSELEC oops FROM trips;\n\
         SELECT * FROM trips WHERE (uuid = $1;\nSELECT 1",
    );
    let classes: Vec<Class> = found.iter().map(|a| a.class).collect();
    assert_eq!(
        classes,
        vec![Class::Row, Class::Unparsed, Class::Unparsed, Class::Other]
    );
    assert!(
        found[1].reason.as_deref().unwrap().contains("SELEC"),
        "{:?}",
        found[1].reason
    );
    assert_eq!(found[1].sql, "SELEC oops FROM trips");
}

#[test]
fn two_statements_given_as_one_are_unparsed_with_a_reason() {
    let a = analyze(&trips(), "SELECT 1; SELECT 2");
    assert_eq!(a.class, Class::Unparsed);
    assert!(a.reason.unwrap().contains("2 statements"));
}

#[test]
fn deep_nesting_is_an_error_not_a_stack_overflow() {
    let sql = format!(
        "SELECT * FROM trips WHERE uuid = {}$1{}",
        "(".repeat(5000),
        ")".repeat(5000)
    );
    let a = analyze(&trips(), &sql);
    assert_eq!(a.class, Class::Unparsed);
    assert!(a.reason.unwrap().to_lowercase().contains("recursion"));
}

#[test]
fn a_statement_of_a_megabyte_is_classified() {
    let list: Vec<String> = (1..=90_000).map(|i| format!("${i}")).collect();
    let sql = format!(
        "SELECT status FROM trips WHERE uuid IN ({})",
        list.join(", ")
    );
    assert!(sql.len() > 700_000);
    let a = analyze(&trips(), &sql);
    assert_eq!(a.class, Class::Row);
}

#[test]
fn direct_writes_are_writes_to_layout_tables_not_sent_by_mezzanine() {
    use query::audit::direct_write;
    let model = trips();
    for (sql, table) in [
        ("UPDATE trips SET status = $1 WHERE id = $2", Some("trips")),
        ("INSERT INTO public.trip_notes (trip_id, seq, body) VALUES ($1, $2, $3)", Some("trip_notes")),
        ("DELETE FROM billing_attempts WHERE trip_id = $1", Some("billing_attempts")),
        ("TRUNCATE fare_adjustments", Some("fare_adjustments")),
        ("COPY trips (id) FROM STDIN", Some("trips")),
        ("MERGE INTO trips t USING staging s ON t.id = s.id WHEN MATCHED THEN UPDATE SET status = s.status", Some("trips")),
        ("/* mezzanine */ UPDATE trips SET status = $1 WHERE uuid = $2", None),
        ("SELECT * FROM trips WHERE id = $1", None),
        ("COPY trips TO STDOUT", None),
        ("UPDATE cities SET name = $1", None),
        ("INSERT INTO archive.trips (id) VALUES (1)", None),
        ("UPDATE trips SET oops", None),
    ] {
        assert_eq!(direct_write(&model, sql).as_deref(), table, "{sql}");
    }
}
