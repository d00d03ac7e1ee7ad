use super::*;

#[test]
fn a_refusal_quotes_any_text_safely() {
    let sql = refusing_statement("it's $mezzanine$ odd");
    assert!(sql.contains("it''s $ mezzanine $ odd"), "{sql}");
    assert_eq!(sql.matches("$mezzanine$").count(), 2);
    assert!(sql.contains("ERRCODE = '0A000'"), "{sql}");
}

#[test]
fn a_raised_error_keeps_a_well_formed_sqlstate_only() {
    assert!(raising_statement("23505", "dup", None).contains("ERRCODE = '23505'"));
    assert!(raising_statement("40001", "x", None).contains("ERRCODE = '40001'"));
    for bad in ["2350", "23505'", "abcde", ""] {
        let sql = raising_statement(bad, "m", None);
        assert!(sql.contains("ERRCODE = 'XX000'"), "{bad}: {sql}");
    }
}

#[test]
fn without_a_layout_everything_is_forwarded_unparsed() {
    let router = Router::new(None);
    for mode in Mode::ALL {
        let d = router.decide("DELETE FROM anything", mode, false);
        assert_eq!(d.verdict, Verdict::Forward);
        assert_eq!(d.class, Class::Other);
    }
}

fn example() -> Router {
    let config = config::Config::load(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../config/examples/local.toml"
    ))
    .expect("the example config loads");
    Router::new(query::Model::from_config(&config).map(Arc::new))
}

#[test]
fn a_text_is_parsed_once_and_the_analyses_kept_stay_bounded() {
    let router = example();
    let sql = "SELECT uuid, status FROM trips WHERE uuid = $1";
    let first = router.analyze(sql);
    assert_eq!(first[0].class, Class::Row);
    assert!(Arc::ptr_eq(&first, &router.analyze(sql)), "parsed again");
    for i in 0..RECENT + 10 {
        router.analyze(&format!("SELECT uuid FROM trips WHERE uuid = '{i}'"));
    }
    assert!(router.recent().0.len() <= RECENT);
    let long = format!(
        "SELECT uuid FROM trips WHERE uuid = $1 /* {} */",
        "x".repeat(RECENT_TEXT)
    );
    assert!(!Arc::ptr_eq(&router.analyze(&long), &router.analyze(&long)));
}

#[test]
fn bare_names_are_the_layouts_only_where_the_session_finds_them_so() {
    let router = example();
    let bare = "SELECT uuid, status FROM trips WHERE uuid = $1";
    let full = "SELECT uuid, status FROM public.trips WHERE uuid = $1";
    let layout = router.decide_in(bare, Mode::Shadow, false, Resolution::Layout);
    assert!(layout.samplable && layout.class == Class::Row, "{layout:?}");
    // Another schema first on the path: `trips` is another table.
    let other = router.decide_in(bare, Mode::Schemaless, false, Resolution::Elsewhere);
    assert_eq!(other.class, Class::Other);
    assert_eq!(other.verdict, Verdict::Forward);
    assert!(!other.samplable && !other.writable);
    let qualified = router.decide_in(full, Mode::Shadow, false, Resolution::Elsewhere);
    assert!(qualified.samplable, "{qualified:?}");
    let write = "INSERT INTO trips (uuid, version, status) VALUES ($1, 1, 'requested')";
    let layout = router.decide_in(write, Mode::Primary, false, Resolution::Layout);
    assert!(layout.writable, "{layout:?}");
    let elsewhere = router.decide_in(write, Mode::Primary, false, Resolution::Elsewhere);
    assert!(!elsewhere.writable && elsewhere.verdict == Verdict::Forward);
}

#[test]
fn an_unknown_resolution_serves_nothing_and_refuses_what_would_run_on_schemaless() {
    let router = example();
    let read = "SELECT uuid, status FROM trips WHERE uuid = $1";
    let write = "INSERT INTO trips (uuid, version, status) VALUES ($1, 1, 'requested')";
    let shadow = router.decide_in(read, Mode::Shadow, false, Resolution::Unknown);
    assert!(!shadow.samplable && shadow.verdict == Verdict::Forward);
    let mirror = router.decide_in(write, Mode::Mirror, false, Resolution::Unknown);
    assert_eq!(mirror.verdict, Verdict::Forward);
    for (sql, mode) in [(write, Mode::Primary), (read, Mode::Schemaless)] {
        let d = router.decide_in(sql, mode, false, Resolution::Unknown);
        assert!(!d.writable && !d.samplable);
        match d.verdict {
            Verdict::Refuse(why) => assert!(why.contains("search_path"), "{why}"),
            Verdict::Forward => panic!("{sql} in {mode} was forwarded"),
        }
    }
    let primary = router.decide_in(read, Mode::Primary, false, Resolution::Unknown);
    assert_eq!(primary.verdict, Verdict::Forward);
}

#[test]
fn the_probe_checks_every_layout_table_and_quotes_the_names() {
    let router = example();
    let probe = router.probe().expect("a layout has a probe");
    assert!(probe.starts_with("SELECT current_user::text"), "{probe}");
    for table in ["trips", "trip_notes"] {
        assert!(
            probe.contains(&format!(
                "to_regclass('\"{table}\"') = to_regclass('\"public\".\"{table}\"')"
            )),
            "{probe}"
        );
    }
    assert!(Router::new(None).probe().is_none());
}

#[test]
fn a_query_of_writes_alone_runs_through_the_facade_and_is_counted_before_it() {
    let router = example();
    let writes = "INSERT INTO trips (uuid, version, status) VALUES ($1, 1, 'requested'); \
                  UPDATE trips SET status = 'x', version = version + 1 WHERE uuid = '6f1c1a0e-0000-4000-8000-000000000001'";
    let primary = router.decide(writes, Mode::Primary, false);
    assert!(
        primary.writable && primary.verdict == Verdict::Forward,
        "{primary:?}"
    );
    assert!(
        !router.decide(writes, Mode::Primary, true).writable,
        "in a block"
    );
    // Before `primary`, forwarded and counted under each write's shape.
    let shadow = router.decide(writes, Mode::Shadow, false);
    assert!(!shadow.writable && shadow.verdict == Verdict::Forward);
    assert_eq!(shadow.shapes.len(), 2, "{shadow:?}");
    // With a statement that is not a translatable write: refused in
    // `primary`, and, since it would stay refused, not counted before.
    let mixed = format!("{writes}; SELECT 1");
    match router.decide(&mixed, Mode::Primary, false).verdict {
        Verdict::Refuse(why) => assert!(why.contains("send it alone"), "{why}"),
        Verdict::Forward => panic!("{mixed} forwarded in primary"),
    }
    assert!(router.decide(&mixed, Mode::Shadow, false).shapes.is_empty());
}
