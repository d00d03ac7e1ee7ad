//! Bad layouts and bad input to the legacy model: each a clear error naming
//! the thing, and nothing written.

use schemaless::{
    Body, Cell, CellKey, CellStore, Column, Error, Filter, FilterOp, IndexQuery, ReadFrom, RefKey,
    WriteOutcome,
};
use serde_json::{json, Value};

use crate::harness::LegacyDb;
use crate::legacy_conversions::{kind, LAYOUT, SETUP};

async fn layout_error(setup: &str, layout: &str) -> String {
    let db = LegacyDb::new(setup, layout).await;
    match legacy::LegacyStore::connect(&db.config).await {
        Ok(_) => panic!("the layout was accepted:\n{layout}"),
        Err(e) => e.to_string(),
    }
}

#[tokio::test]
async fn layouts_that_disagree_with_the_live_schema_are_refused_by_name() {
    let cases: [(&str, &str, &str); 8] = [
        (
            "table = \"kinds\"",
            "table = \"nope\"",
            "table public.nope does not exist",
        ),
        (
            "\"ba\"]",
            "\"ba\", \"missing\"]",
            "field \"missing\": table public.kinds has no column \"missing\"",
        ),
        (
            "ref_key = \"version\"",
            "ref_key = \"label\"",
            "public.kinds.label is text, but must be an integer",
        ),
        (
            "uuid = \"uuid\"",
            "uuid = \"spare\"",
            "public.kinds.spare has no valid unique index yet",
        ),
        (
            "uuid = \"uuid\"",
            "uuid = \"row_key\"",
            "has no column \"row_key\"; run `mezzanine legacy add-uuid`",
        ),
        (
            "parent = \"kind_id\"",
            "parent = \"seq\"",
            "needs a primary key or unique index on exactly (seq, seq)",
        ),
        (
            "fields = { note = \"note\"",
            "fields = { note = \"bad_type\"",
            "pg_lsn, which no conversion takes",
        ),
        // It has an element type, but is no array of it: not `int2[]`.
        (
            "fields = { note = \"note\"",
            "fields = { note = \"bad_vector\"",
            "int2vector, which no conversion takes",
        ),
    ];
    let setup = format!(
        "{SETUP}\nALTER TABLE kinds ADD COLUMN spare uuid, ADD COLUMN label text;
         ALTER TABLE kind_children ADD COLUMN bad_type pg_lsn, ADD COLUMN bad_vector int2vector;"
    );
    for (from, to, expected) in cases {
        assert!(LAYOUT.contains(from), "{from}");
        let err = layout_error(&setup, &LAYOUT.replacen(from, to, 1)).await;
        assert!(err.contains(expected), "{to}: {err}");
    }
    // A child table whose (parent, ref key) is not unique.
    let err = layout_error(
        &SETUP.replace("PRIMARY KEY (kind_id, seq)", "UNIQUE (kind_id, seq, note)"),
        LAYOUT,
    )
    .await;
    assert!(
        err.contains(
            "public.kind_children needs a primary key or unique index on exactly (kind_id, seq)"
        ),
        "{err}"
    );
}

#[test]
fn layout_config_errors_name_file_line_and_key() {
    let base = format!(
        "[instance]\nname = \"t\"\nshard_count = 1\n[[cluster]]\nname = \"a\"\nmaster = \"mysql://root@127.0.0.1:1\"\nshards = \"0\"\n[legacy]\nurl = \"postgres://postgres@127.0.0.1:1/x\"\n{LAYOUT}"
    );
    assert!(config::Config::parse(&base, "ok.toml").is_ok());
    for (from, to, expected) in [
        (
            "kind = \"child\"",
            "kind = \"children\"",
            "unknown variant `children`",
        ),
        (
            "table = \"kind_children\"\n",
            "",
            "layout.column[1].table: a child column needs its child table",
        ),
        (
            "shard_field = \"b\"",
            "shard_field = \"nope\"",
            "index[0].shard_field: column ALL has no field \"nope\"",
        ),
        (
            "fields = [\"num\"",
            "fields = [\"zz\"",
            "index[0].fields[0]: column ALL has no field \"zz\"",
        ),
        (
            "name = \"NOTES\"",
            "name = \"ALL\"",
            "layout.column[1].name: column \"ALL\" is already declared",
        ),
        (
            "ref_key = \"seq\"",
            "ref_key = \"seq\"\ncolour = 1",
            "unknown field `colour`",
        ),
        (
            "uuid = \"uuid\"",
            "uuid = \"bad name\"",
            "layout.uuid: \"bad name\" is not a valid SQL name",
        ),
        (
            "fields = { note = \"note\"",
            "fields = { note = \"kind_id\"",
            "already uses as a key column",
        ),
    ] {
        assert!(base.contains(from), "{from}");
        let err = config::Config::parse(&base.replacen(from, to, 1), "bad.toml")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("bad.toml:"), "{err}");
        assert!(err.contains(expected), "{to}: {err}");
    }
    let err = config::Config::parse(
        &base.replace(
            "postgres://postgres@127.0.0.1:1/x",
            "postgres://postgres@127.0.0.1:1",
        ),
        "bad.toml",
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("legacy.url") && err.contains("names no database"),
        "{err}"
    );
}

fn field_of(err: Error) -> String {
    match err {
        Error::InvalidInput { field, message, .. } => format!("{field}: {message}"),
        other => panic!("not an input error: {other}"),
    }
}

fn all_cell(n: u128, ref_key: i64, body: Value) -> Cell {
    Cell::new(
        kind(n),
        Column::new("ALL").unwrap(),
        RefKey::new(ref_key).unwrap(),
        Body::from_value(body).unwrap(),
    )
}

#[tokio::test]
async fn bad_input_is_a_clear_error_and_writes_nothing() {
    let db = LegacyDb::new(SETUP, LAYOUT).await;
    let store = db.store().await;
    let before = |db: &LegacyDb| {
        let pool = db.pool.clone();
        async move {
            let (a, b): (String, String) = sqlx::query_as(
                "SELECT (SELECT string_agg(k::text, '|' ORDER BY id) FROM kinds k),
                        (SELECT string_agg(c::text, '|' ORDER BY kind_id, seq) FROM kind_children c)",
            )
            .fetch_one(&pool)
            .await
            .unwrap();
            a + &b
        }
    };
    let snapshot = before(&db).await;

    for (body, expected) in [
        (
            json!({"num2": "12.555"}),
            "body.num2: 12.555 has more digits than numeric(10,2) keeps",
        ),
        (json!({"num2": "12.555"}), "PostgreSQL would round it"),
        (
            json!({"vc": "much too long"}),
            "body.vc: is 13 characters, over the 8 it holds (for kinds.vc, character varying(8))",
        ),
        (
            json!({"f4": 1.123456789}),
            "body.f4: 1.123456789 is not exactly representable as a real",
        ),
        (
            json!({"i2": 40000}),
            "body.i2: 40000 is out of range for smallint",
        ),
        (
            json!({"i4": "7"}),
            "body.i4: expected an integer (integer), got a string",
        ),
        (
            json!({"tz": "2015-03-08T02:30:00"}),
            "body.tz: \"2015-03-08T02:30:00\" is not a timestamp",
        ),
        (json!({"ts": "2015-03-08T02:30:00Z"}), "body.ts:"),
        (
            json!({"d": "2015-02-29"}),
            "body.d: \"2015-02-29\": 2015-02 has no day 29",
        ),
        (
            json!({"u": "not-a-uuid"}),
            "body.u: \"not-a-uuid\" is not a UUID",
        ),
        (
            json!({"t": "nul\u{0}"}),
            "body.t: text cannot contain the NUL character",
        ),
        (
            json!({"ia": [1, "2"]}),
            "body.ia: element 1: expected an integer",
        ),
        (json!({"ta": "x"}), "body.ta: expected an array"),
        (
            json!({"zzz": 1}),
            "body.zzz: column ALL has no field \"zzz\"",
        ),
        (json!({"t": "x".repeat(2 * 1024 * 1024)}), "body: is 2097"),
    ] {
        // Over an existing row (an update) and as a new row (an insert).
        for (row, ref_key) in [(101, 2), (777, 1)] {
            let err = store
                .put_cell(all_cell(row, ref_key, body.clone()))
                .await
                .unwrap_err();
            let text = field_of(err);
            assert!(text.contains(expected), "{body:.80}: {text}");
        }
    }

    // A batch with one bad cell writes none of its good ones.
    let good = all_cell(778, 1, json!({"i2": 1}));
    let bad = all_cell(779, 1, json!({"i2": "x"}));
    let err = store.put_cells(vec![good, bad]).await.unwrap_err();
    assert!(field_of(err).starts_with("cells[1].body.i2"));

    // Unknown columns, and a child whose parent row does not exist.
    let mut unknown = all_cell(101, 9, json!({}));
    unknown.key.column = Column::new("NOPE").unwrap();
    assert!(field_of(store.put_cell(unknown).await.unwrap_err())
        .contains("column: NOPE is not a column of the layout (its columns are ALL, NOTES)"));
    let orphan = Cell::new(
        kind(555),
        Column::new("NOTES").unwrap(),
        RefKey::new(1).unwrap(),
        Body::from_value(json!({"note": "x"})).unwrap(),
    );
    assert!(field_of(store.put_cell(orphan).await.unwrap_err())
        .contains("has no row in kinds: column NOTES is kept in the child table kind_children"));
    assert_eq!(
        before(&db).await,
        snapshot,
        "a refused write changed the tables"
    );

    // What the legacy model cannot do is said so.
    let err = store
        .get_cells_for_shard(0, 0, 10, ReadFrom::Master)
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Unsupported { .. })
            && err.to_string().contains("unsupported by the legacy model"),
        "{err}"
    );
    assert_eq!(
        store
            .put_cell(all_cell(101, 5, json!({"i2": 2})))
            .await
            .unwrap(),
        WriteOutcome::Written
    );
    let old = CellKey {
        row_key: kind(101),
        column: Column::new("ALL").unwrap(),
        ref_key: RefKey::new(1).unwrap(),
    };
    let err = store.get_cell(&old, ReadFrom::Master).await.unwrap_err();
    assert!(
        err.to_string()
            .contains("keeps only the latest cell of row column ALL (ref key 5)"),
        "{err}"
    );
    store.close().await;
}

#[tokio::test]
async fn bad_index_queries_are_clear_errors() {
    let db = LegacyDb::new(SETUP, LAYOUT).await;
    let store = db.store().await;
    let query = |f: &dyn Fn(&mut IndexQuery)| {
        let mut q = IndexQuery {
            index: "kinds_by_b".into(),
            shard_value: json!(true),
            filters: vec![],
            order_by: None,
            descending: false,
            limit: 10,
        };
        f(&mut q);
        q
    };
    for (q, expected) in [
        (
            query(&|q| q.index = "nope".into()),
            "index: no index is called \"nope\" (declared: kinds_by_b)",
        ),
        (
            query(&|q| q.shard_value = json!("yes")),
            "shard_value: expected true or false",
        ),
        (
            query(&|q| q.shard_value = Value::Null),
            "shard_value: null matches nothing",
        ),
        (
            query(&|q| {
                q.filters = vec![Filter {
                    field: "t".into(),
                    op: FilterOp::Eq,
                    value: json!("x"),
                }]
            }),
            "filters[0].field: index kinds_by_b holds no field \"t\" (it holds b, num, tz, i4)",
        ),
        (
            query(&|q| {
                q.filters = vec![Filter {
                    field: "tz".into(),
                    op: FilterOp::Ge,
                    value: json!(5),
                }]
            }),
            "filters[0].value: expected a timestamp string",
        ),
        (
            query(&|q| {
                q.filters = vec![Filter {
                    field: "i4".into(),
                    op: FilterOp::In,
                    value: json!(5),
                }]
            }),
            "filters[0].value: IN takes an array",
        ),
        (
            query(&|q| q.order_by = Some("t".into())),
            "order_by: index kinds_by_b holds no field \"t\"",
        ),
        (
            query(&|q| q.limit = 0),
            "limit: must be between 1 and 10000",
        ),
    ] {
        let err = store.query_index(&q, ReadFrom::Master).await.unwrap_err();
        assert!(field_of(err).contains(expected), "{q:?}");
    }
    // A good one, typed as SQL: numeric compares as a number, not as text.
    let q = query(&|q| {
        q.shard_value = json!(true);
        q.filters = vec![Filter {
            field: "num".into(),
            op: FilterOp::Gt,
            value: json!("9"),
        }];
    });
    let entries = store.query_index(&q, ReadFrom::Master).await.unwrap();
    let rows: Vec<_> = entries.iter().map(|e| e.row_key).collect();
    assert_eq!(rows, vec![kind(101)], "{entries:?}");
    store.close().await;
}
