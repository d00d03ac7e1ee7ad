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

#[path = "data/trips_corpus.rs"]
mod trips_corpus;
use trips_corpus::{Case, TRIPS};

const SHOP: &[Case] = &[
    ("SELECT o.public_id, o.state, o.total_cents FROM sales.orders o WHERE o.public_id = $1", Class::Row, "get_cell_latest(row = $1, HEADER)"),
    ("SELECT l.sku, l.qty FROM order_lines l JOIN orders o ON l.order_no = o.order_no WHERE o.public_id = ANY($1)", Class::Row, "get_column_cells(rows in $1, LINES)"),
    ("SELECT public_id, placed_at FROM orders WHERE customer_ref = $1 AND placed_at > $2 ORDER BY placed_at DESC LIMIT 10", Class::Index, "query_index(orders_by_customer, customer = $1, placed > $2, order by placed desc, limit 10)"),
    ("SELECT public_id, total_cents FROM orders WHERE customer_ref = $1 AND state IN ('open', 'paid')", Class::Index, "get_cell_latest(row, HEADER) per entry"),
    ("SELECT public_id FROM orders WHERE customer_ref = $1 AND total_cents > 1000", Class::None, "add \"total\" to its fields"),
    ("SELECT * FROM orders WHERE order_no = $1", Class::None, "rewrite it to the UUID orders.public_id"),
    ("SELECT * FROM order_lines WHERE order_no = $1", Class::None, "join orders ON order_lines.order_no = orders.order_no"),
    ("SELECT public_id FROM orders WHERE state = 'open'", Class::None, "shard_field = \"state\""),
    ("INSERT INTO sales.orders (public_id, rev, customer_ref, state) VALUES ($1, 1, $2, 'open')", Class::Write, "put_cell(row = $1, HEADER, ref_key = 1, {customer: $2, placed: default, state: 'open', total: default})"),
    ("UPDATE orders SET state = 'paid', rev = rev + 1 WHERE public_id = $1", Class::Write, "latest body with {state: 'paid'}"),
    ("UPDATE orders SET state = 'paid' WHERE public_id = $1", Class::None, "also set rev (e.g. rev = rev + 1)"),
    ("INSERT INTO order_lines (order_no, line_no, sku, qty, price) VALUES ((SELECT order_no FROM orders WHERE public_id = $1), $2, $3, $4, $5)", Class::Write, "put_cell(row = $1, LINES, ref_key = $2, {price: $5, qty: $4, sku: $3})"),
    ("INSERT INTO order_lines (order_no, line_no, sku) VALUES ($1, 1, $2)", Class::Write, "put_cell(row = COALESCE((SELECT \"public_id\" FROM \"sales\".\"orders\" WHERE \"order_no\" = $1), (SELECT row_key FROM mezzanine.row_ids WHERE parent = '\"sales\".\"orders\"'::REGCLASS AND id = $1)), LINES, ref_key = 1"),
    ("INSERT INTO order_lines (order_no, line_no, sku) VALUES (order_no + 1, 1, $2)", Class::None, "name it by its integer id, or by UUID"),
    ("DELETE FROM orders WHERE public_id = $1", Class::Write, "put_cell(row = $1, DELETED, ref_key = 0, {row: true})"),
    ("DELETE FROM order_lines WHERE line_no = $1", Class::None, "without naming their parent by UUID"),
    ("DELETE FROM order_lines WHERE order_no = (SELECT order_no FROM orders WHERE public_id = $1) AND line_no = $2", Class::Write, "get_column_cells(row = $1, LINES)"),
    // Tables named where sqlparser's relation visitor does not look, and
    // reads PostgreSQL answers otherwise than a cell read would.
    ("COPY orders FROM STDIN", Class::None, "COPY FROM into a layout table"),
    ("COPY sales.orders (public_id, state) FROM STDIN WITH (FORMAT csv)", Class::None, "write them with INSERTs"),
    ("COPY orders TO STDOUT", Class::None, "COPY on a layout table"),
    ("DROP TABLE IF EXISTS sales.orders", Class::None, "DROP on a layout table"),
    ("SELECT state FROM orders TABLESAMPLE SYSTEM (10) WHERE public_id = $1", Class::None, "TABLESAMPLE on orders"),
    ("SELECT state FROM orders AS o(n) WHERE public_id = $1", Class::None, "gives the table's columns other names"),
    ("PREPARE p AS SELECT state FROM orders WHERE public_id = $1", Class::None, "prepare it through the protocol"),
    // A cast column is another value, not the column.
    ("SELECT placed_at::date FROM orders WHERE public_id = $1", Class::None, "selects the expression placed_at::DATE"),
    ("SELECT state FROM orders WHERE public_id::text = $1", Class::None, "without its UUID public_id"),
    ("SELECT state FROM orders WHERE (public_id) = $1::uuid", Class::Row, "get_cell_latest(row = $1, HEADER)"),
    // A named argument is a word of the call, not a column.
    ("INSERT INTO orders (public_id, rev, customer_ref, state, placed_at) VALUES ($1, 1, $2, 'open', now() - make_interval(hours => 2))", Class::Write, "placed: now() - make_interval(hours => 2)"),
    ("SELECT public_id FROM orders WHERE customer_ref = $1 AND placed_at > now() - make_interval(days => 7)", Class::Index, "placed > now() - make_interval(days => 7)"),
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
fn only_statements_that_cannot_change_what_they_name_are_reads() {
    let model = shop();
    for (sql, reads) in [
        ("SELECT state FROM orders WHERE public_id = $1", true),
        ("COPY orders TO STDOUT", true),
        ("COPY (SELECT state FROM orders) TO STDOUT", true),
        (
            "PREPARE p AS SELECT state FROM orders WHERE public_id = $1",
            true,
        ),
        ("COPY orders FROM STDIN", false),
        (
            "WITH u AS (UPDATE orders SET state = 'x' RETURNING public_id) SELECT * FROM u",
            false,
        ),
        (
            "WITH d AS (DELETE FROM orders RETURNING 1) SELECT count(*) FROM d",
            false,
        ),
        ("WITH r AS (SELECT state FROM orders) SELECT * FROM r", true),
        (
            "PREPARE p AS UPDATE orders SET state = 'x' WHERE public_id = $1",
            false,
        ),
        ("DROP TABLE orders", false),
        ("EXPLAIN ANALYZE UPDATE orders SET state = 'x'", false),
    ] {
        assert_eq!(analyze(&model, sql).reads, reads, "{sql}");
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

#[test]
fn a_session_finding_other_tables_first_reaches_the_layout_by_qualified_names_only() {
    let model = shop();
    let qualified = model.qualified_only();
    assert_eq!(model.table_names(), vec!["orders", "order_lines"]);
    let bare = "SELECT o.state FROM orders o WHERE o.public_id = $1";
    let full = "SELECT o.state FROM sales.orders o WHERE o.public_id = $1";
    assert_eq!(analyze(&model, bare).class, Class::Row);
    assert_eq!(analyze(&qualified, bare).class, Class::Other);
    assert_eq!(analyze(&qualified, full).class, Class::Row);
    let write = "INSERT INTO order_lines (order_no, sku, qty) VALUES (1, 'a', 2)";
    assert_eq!(analyze(&qualified, write).class, Class::Other);
    assert_ne!(analyze(&model, write).class, Class::Other);
}

#[test]
fn a_temporary_table_of_a_layout_tables_name_is_not_the_layouts() {
    let model = trips();
    for sql in [
        "CREATE TEMP TABLE trips (uuid uuid, status text)",
        "CREATE TEMPORARY TABLE trip_notes (body text)",
    ] {
        assert_eq!(analyze(&model, sql).class, Class::Other, "{sql}");
    }
    // Reading the layout's table into it does touch the layout.
    let copy = "CREATE TEMP TABLE t AS SELECT * FROM trips";
    assert_ne!(analyze(&model, copy).class, Class::Other);
    // A table that is not temporary is the layout's.
    let create = "CREATE TABLE trips (uuid uuid)";
    assert_eq!(analyze(&model, create).class, Class::None);
}

#[test]
fn conditions_besides_the_row_key_become_one_filter_over_the_columns_they_read() {
    let model = shop();
    let filtered = |sql: &str| match analyze(&model, sql).plan {
        Some(query::plan::Plan::Rows(read)) => *read,
        other => panic!("{sql}: not a row read: {other:?}"),
    };
    // Each column a condition reads is a placeholder, numbered across the
    // conditions, the casts and functions around it kept.
    let read = filtered(
        "SELECT o.state FROM orders o JOIN order_lines l ON l.order_no = o.order_no AND l.qty > 1 \
         WHERE o.public_id = $1 AND (o.state = 'open' OR lower(l.sku) LIKE 'a%') AND o.rev::text <> ''",
    );
    let columns: Vec<String> = read.filter_columns.iter().map(|p| p.expr.clone()).collect();
    assert_eq!(columns, ["l.qty", "o.state", "l.sku", "o.rev"]);
    let filled = query::expr::fill_columns(read.filter.as_ref().expect("a filter"), |k| {
        sqlparser::ast::Expr::Identifier(sqlparser::ast::Ident::new(format!("v{k}")))
    });
    assert_eq!(
        filled.to_string(),
        "(v0 > 1) AND (v1 = 'open' OR lower(v2) LIKE 'a%') AND (v3::TEXT <> '')"
    );
    assert!(read.outer_condition.is_none());
    // A subscripted column named with its table (`o.sku_tags[1]`, which
    // sqlparser reads as `o`, `.sku_tags`, `[1]`) is that column,
    // subscripted; before, `o` was taken for a column ("uses o.o").
    let read = filtered(
        "SELECT o.state FROM orders o WHERE o.public_id = $1 AND o.customer_ref[2:3] = '{}'",
    );
    let columns: Vec<String> = read.filter_columns.iter().map(|p| p.expr.clone()).collect();
    assert_eq!(columns, ["o.customer_ref"]);
    let read = filtered(
        "SELECT state FROM sales.orders WHERE public_id = $1 AND sales.orders.state[1] IS NULL",
    );
    let columns: Vec<String> = read.filter_columns.iter().map(|p| p.expr.clone()).collect();
    assert_eq!(columns, ["orders.state"]);
    // The key alone: nothing to filter.
    let read = filtered("SELECT state FROM orders WHERE public_id = $1");
    assert!(read.filter.is_none() && read.filter_columns.is_empty());
    // A LEFT JOIN's ON picks the child rows joined, not the result's
    // rows: no filter of the joined rows is it.
    let read = filtered(
        "SELECT o.state, l.sku FROM orders o LEFT JOIN order_lines l \
         ON l.order_no = o.order_no AND l.qty > 1 WHERE o.public_id = $1 AND l.sku IS NULL",
    );
    assert_eq!(read.outer_condition.as_deref(), Some("l.qty > 1"));
    let filled = query::expr::fill_columns(read.filter.as_ref().expect("the WHERE's"), |k| {
        sqlparser::ast::Expr::Identifier(sqlparser::ast::Ident::new(format!("v{k}")))
    });
    assert_eq!(filled.to_string(), "(v0 IS NULL)");
}

#[test]
fn a_left_joins_on_names_no_rows_of_the_result() {
    let model = shop();
    // The UUID or the shard field in a LEFT JOIN's ON joins children to
    // those parents only: every order is still a row of the result.
    for sql in [
        "SELECT o.state, l.sku FROM orders o LEFT JOIN order_lines l \
         ON l.order_no = o.order_no AND o.public_id = $1",
        "SELECT o.state, l.sku FROM orders o LEFT JOIN order_lines l \
         ON l.order_no = o.order_no AND o.customer_ref = $1",
    ] {
        let analysis = analyze(&model, sql);
        assert_eq!(analysis.class, Class::None, "{sql}");
    }
    // In an inner join's ON it is the WHERE's.
    let inner = "SELECT o.state, l.sku FROM orders o JOIN order_lines l \
                 ON l.order_no = o.order_no AND o.public_id = $1";
    assert_eq!(analyze(&model, inner).class, Class::Row);
}

#[test]
fn an_insert_listing_no_columns_takes_the_tables_first_columns_in_the_catalogs_order() {
    let order = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
    let model = shop().with_column_orders(
        [
            (
                "orders".to_string(),
                order(&[
                    "order_no",
                    "public_id",
                    "rev",
                    "state",
                    "customer_ref",
                    "total_cents",
                    "note",
                ]),
            ),
            (
                "order_lines".to_string(),
                order(&["order_no", "line_no", "sku", "qty", "price"]),
            ),
        ]
        .into(),
    );
    check(
        &model,
        &[
            // The first columns, as many as the row has values: total and
            // the unmapped note left to their defaults.
            ("INSERT INTO orders VALUES (DEFAULT, $1, 1, 'open', $2)", Class::Write, "put_cell(row = $1, HEADER, ref_key = 1, {customer: $2, placed: default, state: 'open', total: default})"),
            ("INSERT INTO sales.orders VALUES (DEFAULT, $1, 2, 'paid', $2, 500), (DEFAULT, $3, 1, 'open', $4, 7)", Class::Write, "put_cell(row = $3, HEADER, ref_key = 1, {customer: $4, placed: default, state: 'open', total: 7})"),
            ("INSERT INTO order_lines VALUES ((SELECT order_no FROM orders WHERE public_id = $1), $2, $3, $4, $5)", Class::Write, "put_cell(row = $1, LINES, ref_key = $2, {price: $5, qty: $4, sku: $3})"),
            ("INSERT INTO orders VALUES (DEFAULT, $1, 1, 'open', $2, 5, 'a note')", Class::None, "writes orders.note, which the layout does not map"),
            ("INSERT INTO orders VALUES (DEFAULT, $1, 1, 'open', $2, 5, DEFAULT, 8)", Class::None, "PostgreSQL refuses it (42601): INSERT has more expressions than target columns (8 values for the 7 columns of orders)"),
            ("INSERT INTO orders VALUES (41, $1, 1)", Class::Write, "reserve each row's integer id (the one given"),
            // `RETURNING *` is every column in the catalog's order: here
            // one the layout does not map.
            ("INSERT INTO orders (public_id, rev) VALUES ($1, 1) RETURNING *", Class::None, "RETURNING * includes orders.note, which the layout does not map"),
            ("INSERT INTO orders VALUES (DEFAULT, $1, 1), (DEFAULT, $2)", Class::None, "PostgreSQL refuses it (42601): VALUES lists must all be the same length (rows of 2 and 3 values)"),
        ],
    );
    // Without the catalog's order, the same INSERT says how to make it
    // translatable.
    check(
        &shop(),
        &[
            ("INSERT INTO orders VALUES (DEFAULT, $1, 1, 'open', $2)", Class::None, "which only the database's catalog says (the proxy reads it when it starts): list the columns"),
            ("INSERT INTO orders (public_id, rev) VALUES ($1, 1) RETURNING *", Class::None, "RETURNING * returns the columns of orders in the order of the database's catalog"),
        ],
    );
}

/// With `capture.bump_version`, an UPDATE that sets a row column's fields
/// and not its ref key (as an ORM writes it) is the next version, as
/// capture's trigger makes it in PostgreSQL; one setting the ref key is
/// left as written, and so is everything `bump_version` off refuses.
#[test]
fn with_bump_version_an_update_leaving_the_version_is_the_next_version() {
    let bumping = Model {
        bump_version: true,
        ..shop()
    };
    check(
        &bumping,
        &[
            (
                "UPDATE orders SET state = 'paid' WHERE public_id = $1",
                Class::Write,
                "ref_key = rev + 1 (of the latest cell, as capture.bump_version raises it; no \
                 new version when its fields come out unchanged)",
            ),
            (
                "UPDATE orders SET state = 'paid', rev = rev + 5 WHERE public_id = $1",
                Class::Write,
                "ref_key = rev + 5 (of the latest cell)",
            ),
            (
                "UPDATE orders SET public_id = $2 WHERE public_id = $1",
                Class::None,
                "the row key",
            ),
            (
                "INSERT INTO orders (public_id, rev, state) VALUES ($1, 1, $2) \
                 ON CONFLICT (public_id) DO UPDATE SET state = EXCLUDED.state",
                Class::Write,
                "otherwise (a cell exists):\nput_cell(row = $1, HEADER, ref_key = rev + 1 (of \
                 the latest cell, as capture.bump_version raises it",
            ),
        ],
    );
    // Off, the first is refused as before.
    let found = analyze(
        &shop(),
        "UPDATE orders SET state = 'paid' WHERE public_id = $1",
    );
    assert_eq!(found.class, Class::None);
}
