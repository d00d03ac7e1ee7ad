//! The answers owed, followed message by message as PostgreSQL sends them.

use super::*;

fn ours(awaits: Awaits) -> Owed {
    Owed::ours(awaits)
}

/// The answers the app sees, of those given.
fn seen(answers: &mut Answers, kinds: &[u8]) -> Vec<u8> {
    kinds
        .iter()
        .copied()
        .filter(|&k| answers.answer(k, &mut []) != Seen::Kept)
        .collect()
}

#[test]
fn the_answers_to_the_proxys_own_messages_are_kept_from_the_app() {
    let mut answers = Answers::starting();
    assert_eq!(seen(&mut answers, b"RSKZ"), b"RSKZ");
    // The app: Parse; the proxy: Close, Parse; the app: Bind,
    // Describe (portal), Execute, Sync.
    answers.push(Owed::app(Awaits::Parse));
    answers.push(ours(Awaits::Close));
    answers.push(ours(Awaits::Parse));
    for a in [
        Awaits::Bind,
        Awaits::Describe,
        Awaits::Execute,
        Awaits::Sync,
    ] {
        answers.push(Owed::app(a));
    }
    assert_eq!(answers.readies(), 1);
    assert_eq!(seen(&mut answers, b"13N12TDDCZ"), b"1N2TDDCZ");
    assert!(!answers.lost() && answers.readies() == 0);
}

#[test]
fn after_an_error_what_is_skipped_to_sync_is_owed_nothing() {
    let mut answers = Answers::starting();
    seen(&mut answers, b"Z");
    // The app's Parse fails; the proxy's Close and Parse, the Bind,
    // the Execute and a pipelined Query are skipped to the Sync.
    answers.push(Owed::app(Awaits::Parse));
    answers.push(ours(Awaits::Close));
    answers.push(ours(Awaits::Parse));
    answers.push(Owed::app(Awaits::Bind));
    answers.push(Owed::app(Awaits::Query));
    answers.push(Owed::app(Awaits::Sync));
    answers.push(Owed::app(Awaits::Query));
    assert_eq!(answers.readies(), 3);
    assert_eq!(seen(&mut answers, b"EZ"), b"EZ");
    assert_eq!(answers.readies(), 1);
    // An error inside a Query is the query's.
    assert_eq!(seen(&mut answers, b"TDEZ"), b"TDEZ");
    assert!(!answers.lost() && answers.readies() == 0);
}

#[test]
fn what_is_sent_after_an_error_and_skipped_to_sync_is_owed_nothing() {
    // A `Parse` fails while the `Bind` behind it is held; the held
    // messages and the `Sync` are sent after the error came, and
    // PostgreSQL skips them all to the `Sync`.
    let mut answers = Answers::starting();
    answers.answer(b'Z', &mut [b'I']);
    answers.push(Owed::app(Awaits::Parse));
    assert_eq!(answers.answer(b'E', &mut []), Seen::Relay);
    answers.push(ours(Awaits::Close));
    answers.push(ours(Awaits::Parse));
    for awaits in [
        Awaits::Bind,
        Awaits::Describe,
        Awaits::Execute,
        Awaits::Sync,
    ] {
        answers.push(Owed::app(awaits));
    }
    assert_eq!(answers.answer(b'Z', &mut [b'I']), Seen::Relay);
    assert!(answers.settled());
    assert!(!answers.lost(), "the skip is PostgreSQL's rule");
    // Without an error, a skipped answer still loses the count.
    answers.push(Owed::app(Awaits::Bind));
    answers.push(Owed::app(Awaits::Sync));
    answers.answer(b'Z', &mut [b'I']);
    assert!(answers.lost());
}

#[test]
fn an_answer_that_fits_nothing_owed_loses_the_count() {
    let mut answers = Answers::starting();
    seen(&mut answers, b"Z");
    answers.push(Owed::app(Awaits::Bind));
    assert_eq!(seen(&mut answers, b"1"), b"1", "relayed all the same");
    assert!(answers.lost());
}

#[test]
fn a_served_reads_row_description_names_its_columns_origins() {
    let origins = vec![
        Origin {
            table: 16384,
            attnum: 3,
        },
        Origin::default(),
    ];
    // Two fields: "fare" and "?column?", each with table 0, attnum 0.
    let field = |name: &str, table: u32, attnum: i16| {
        let mut f = name.as_bytes().to_vec();
        f.push(0);
        f.extend_from_slice(&table.to_be_bytes());
        f.extend_from_slice(&attnum.to_be_bytes());
        f.extend_from_slice(&[0, 0, 0, 25, 255, 255, 255, 255, 255, 255, 0, 0]);
        f
    };
    let body = |a: Vec<u8>, b: Vec<u8>| [vec![0, 2], a, b].concat();
    let mut answers = Answers::starting();
    answers.answer(b'Z', &mut []);
    answers.push(Owed {
        origins: Some(origins),
        ..Owed::app(Awaits::Query)
    });
    answers.push(Owed::app(Awaits::Query));
    let mut served = body(field("fare", 0, 0), field("?column?", 0, 0));
    assert_eq!(answers.answer(b'T', &mut served), Seen::Relay);
    assert_eq!(
        served,
        body(field("fare", 16384, 3), field("?column?", 0, 0))
    );
    answers.answer(b'Z', &mut []);
    let mut forwarded = body(field("x", 0, 0), field("y", 0, 0));
    answers.answer(b'T', &mut forwarded);
    assert_eq!(forwarded, body(field("x", 0, 0), field("y", 0, 0)));
}

#[test]
fn a_described_statements_parameter_types_are_taken_for_it_alone() {
    let mut answers = Answers::starting();
    answers.answer(b'Z', &mut [b'I']);
    answers.push(Owed::app(Awaits::Parse));
    answers.push(Owed {
        describes: Some(("s1".into(), "SELECT $1, $2".into())),
        ..Owed::app(Awaits::Describe)
    });
    answers.push(Owed::app(Awaits::Describe));
    answers.push(Owed::app(Awaits::Sync));
    let mut types = vec![0, 2];
    types.extend_from_slice(&2950_u32.to_be_bytes());
    types.extend_from_slice(&1266_u32.to_be_bytes());
    assert_eq!(answers.answer(b'1', &mut []), Seen::Relay);
    assert_eq!(answers.answer(b't', &mut types.clone()), Seen::Relay);
    assert_eq!(
        answers.described(),
        Some(Described {
            name: "s1".into(),
            sql: "SELECT $1, $2".into(),
            types: vec![2950, 1266],
        })
    );
    assert_eq!(answers.described(), None, "taken once");
    assert_eq!(answers.answer(b'n', &mut []), Seen::Relay);
    // The next Describe was not asked about; a short body is no answer.
    assert_eq!(answers.answer(b't', &mut types), Seen::Relay);
    assert_eq!(answers.described(), None);
    let mut short = Answers::starting();
    short.push(Owed {
        describes: Some(("".into(), "SELECT $1".into())),
        ..Owed::app(Awaits::Describe)
    });
    short.owed.pop_front();
    short.answer(b't', &mut [0, 1, 0, 0]);
    assert_eq!(short.described(), None);
    assert!(!answers.lost());
}

#[test]
fn a_write_run_through_the_facade_answers_with_its_own_tag() {
    let mut answers = Answers::starting();
    answers.answer(b'Z', &mut []);
    let tagged = |awaits| Owed {
        tag: Some("INSERT 0 2".into()),
        ..Owed::app(awaits)
    };
    // Simple protocol: the Query's CommandComplete.
    answers.push(tagged(Awaits::Query));
    assert_eq!(
        answers.answer(b'C', &mut []),
        Seen::Retag("INSERT 0 2".into())
    );
    assert_eq!(answers.answer(b'Z', &mut []), Seen::Relay);
    // Extended: the Execute's, and not the next one's.
    answers.push(Owed::app(Awaits::Bind));
    answers.push(tagged(Awaits::Execute));
    answers.push(Owed::app(Awaits::Execute));
    answers.push(Owed::app(Awaits::Sync));
    assert_eq!(answers.answer(b'2', &mut []), Seen::Relay);
    assert_eq!(
        answers.answer(b'C', &mut []),
        Seen::Retag("INSERT 0 2".into())
    );
    assert_eq!(answers.answer(b'C', &mut []), Seen::Relay);
    assert_eq!(answers.answer(b'Z', &mut []), Seen::Relay);
    assert!(!answers.lost());
    let mut out = bytes::BytesMut::new();
    command_complete("UPDATE 1", &mut out);
    assert_eq!(&out[..], b"C\0\0\0\x0dUPDATE 1\0");
}

#[test]
fn a_query_of_several_writes_answers_each_with_its_own_origins_and_tag() {
    let field = |table: u32, attnum: i16| {
        let mut f = b"id\0".to_vec();
        f.extend_from_slice(&table.to_be_bytes());
        f.extend_from_slice(&attnum.to_be_bytes());
        f.extend_from_slice(&[0, 0, 0, 20, 0, 8, 255, 255, 255, 255, 0, 0]);
        [vec![0, 1], f].concat()
    };
    let origin = |attnum| Origin {
        table: 16384,
        attnum,
    };
    let mut answers = Answers::starting();
    answers.answer(b'Z', &mut []);
    answers.push(Owed {
        origins: Some(vec![origin(1)]),
        tag: Some("INSERT 0 2".into()),
        then: VecDeque::from([
            (Some(Vec::new()), Some("UPDATE 1".into())),
            (Some(vec![origin(4)]), Some("DELETE 1".into())),
        ]),
        ..Owed::app(Awaits::Query)
    });
    let mut first = field(0, 0);
    assert_eq!(answers.answer(b'T', &mut first), Seen::Relay);
    assert_eq!(first, field(16384, 1));
    assert_eq!(answers.answer(b'D', &mut []), Seen::Relay);
    assert_eq!(
        answers.answer(b'C', &mut []),
        Seen::Retag("INSERT 0 2".into())
    );
    assert_eq!(
        answers.answer(b'C', &mut []),
        Seen::Retag("UPDATE 1".into())
    );
    let mut third = field(0, 0);
    answers.answer(b'T', &mut third);
    assert_eq!(third, field(16384, 4));
    assert_eq!(
        answers.answer(b'C', &mut []),
        Seen::Retag("DELETE 1".into())
    );
    // Nothing more to retag, and the count holds.
    assert_eq!(answers.answer(b'C', &mut []), Seen::Relay);
    assert_eq!(answers.answer(b'Z', &mut []), Seen::Relay);
    assert!(!answers.lost() && answers.readies() == 0);
}

fn probing(answers: &mut Answers) {
    for awaits in Owed::PROBE {
        answers.push(Owed::probe(awaits));
    }
}

#[test]
fn the_probes_answers_are_kept_and_its_row_taken() {
    let mut answers = Answers::starting();
    assert_eq!(seen(&mut answers, b"Z"), b"Z");
    assert!(answers.settled());
    probing(&mut answers);
    answers.push(Owed::app(Awaits::Query));
    assert!(!answers.settled());
    let mut row = vec![0, 2, 0, 0, 0, 1, b'a', 0, 0, 0, 1, b't'];
    assert_eq!(answers.answer(b'1', &mut []), Seen::Kept);
    assert_eq!(answers.answer(b'2', &mut []), Seen::Kept);
    assert_eq!(answers.answer(b'D', &mut row), Seen::Kept);
    // A notice during it is the app's to see.
    assert_eq!(answers.answer(b'N', &mut []), Seen::Relay);
    assert_eq!(answers.answer(b'C', &mut []), Seen::Kept);
    assert_eq!(answers.answer(b'3', &mut []), Seen::Kept);
    assert_eq!(answers.probed(), None, "not over before its ReadyForQuery");
    assert_eq!(answers.answer(b'Z', &mut []), Seen::Kept);
    assert_eq!(answers.probed(), Some(Probed::Row(row)));
    assert_eq!(answers.probed(), None, "taken once");
    // The app's own answers after it are relayed.
    assert_eq!(seen(&mut answers, b"TDCZ"), b"TDCZ");
    assert!(!answers.lost() && answers.settled());
}

#[test]
fn a_failed_probe_is_kept_from_the_app_and_says_so() {
    let mut answers = Answers::starting();
    answers.answer(b'Z', &mut []);
    probing(&mut answers);
    assert_eq!(seen(&mut answers, b"1EZ"), b"");
    assert_eq!(answers.probed(), Some(Probed::Failed));
    assert!(!answers.lost());
    // The next probe starts clean.
    probing(&mut answers);
    let mut row = vec![0, 0];
    answers.answer(b'1', &mut []);
    answers.answer(b'2', &mut []);
    answers.answer(b'D', &mut row);
    assert_eq!(seen(&mut answers, b"C3Z"), b"");
    assert_eq!(answers.probed(), Some(Probed::Row(vec![0, 0])));
}
