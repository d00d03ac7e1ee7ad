use super::*;

#[test]
fn civil_round_trip() {
    for days in [-719_162, -1, 0, 1, 10_957, 16_000, 2_932_896] {
        let (y, m, d) = civil_from_days(days);
        assert_eq!(days_from_civil(y, m, d), days, "{y}-{m}-{d}");
    }
    assert_eq!(civil_from_days(0), (1970, 1, 1));
    assert_eq!(days_from_civil(2000, 3, 1), 11_017);
}

#[test]
fn offsets_become_utc() {
    let utc = parse_timestamp("2015-03-08T07:30:00Z", true).unwrap();
    for text in [
        "2015-03-08T02:30:00-05:00",
        "2015-03-08 02:30:00-0500",
        "2015-03-08T13:00:00.000000+05:30",
        "2015-03-08T07:30:00.000000000z",
    ] {
        assert_eq!(parse_timestamp(text, true).unwrap(), utc, "{text}");
    }
    assert_eq!(
        format_timestamp(utc, true).unwrap(),
        "2015-03-08T07:30:00.000000Z"
    );
    let early = parse_timestamp("1969-12-31T23:59:59.5Z", true).unwrap();
    assert_eq!(early, -500_000);
    assert_eq!(
        format_timestamp(early, true).unwrap(),
        "1969-12-31T23:59:59.500000Z"
    );
}

#[test]
fn bad_timestamps_name_the_problem() {
    for (text, zone, needle) in [
        ("2015-02-29T00:00:00Z", true, "no day 29"),
        ("2016-02-29T24:00:00Z", true, "time of day"),
        ("2015-03-08T07:30:00", true, "offset is required"),
        ("2015-03-08T07:30:00Z", false, "no time zone"),
        (
            "2015-03-08T07:30:00.1234567Z",
            true,
            "finer than a microsecond",
        ),
        ("294276-12-31T23:00:00-02:00", true, "outside the range"),
        ("-4713-01-01T00:00:00Z", true, "outside PostgreSQL's range"),
        ("123-01-01T00:00:00Z", true, "4 digits of the year"),
        ("yesterday", true, "digits of the year"),
    ] {
        let err = parse_timestamp(text, zone).unwrap_err();
        assert!(err.contains(needle), "{text}: {err}");
    }
    assert!(canonical_date("2015-13-01")
        .unwrap_err()
        .contains("month 13"));
    assert_eq!(canonical_date("2016-02-29").unwrap(), "2016-02-29");
}

#[test]
fn postgresql_s_whole_range_is_kept() {
    for (pg, canonical) in [
        ("5874897-12-31", "+5874897-12-31"),
        ("4713-01-01 BC", "-4712-01-01"),
        ("0001-01-01 BC", "0000-01-01"),
        ("0001-01-01", "0001-01-01"),
        ("10000-01-01", "+10000-01-01"),
    ] {
        assert_eq!(canonical_date(pg).unwrap(), canonical, "{pg}");
        assert_eq!(canonical_date(canonical).unwrap(), canonical, "{canonical}");
        assert_eq!(postgres_text(canonical), pg, "{canonical}");
    }
    let far = parse_timestamp("+294276-12-31T23:59:59.999999Z", true).unwrap();
    assert_eq!(
        format_timestamp(far, true).unwrap(),
        "+294276-12-31T23:59:59.999999Z"
    );
    let early = parse_timestamp("-4712-01-01T00:00:00", false).unwrap();
    let text = format_timestamp(early, false).unwrap();
    assert_eq!(text, "-4712-01-01T00:00:00.000000");
    assert_eq!(postgres_text(&text), "4713-01-01 00:00:00.000000 BC");
    assert_eq!(
        postgres_text("0000-03-01T12:00:00.000000Z"),
        "0001-03-01 12:00:00.000000Z BC"
    );
    assert!(canonical_date("0000-01-01 BC").is_err());
    assert!(canonical_date("5874898-01-01").is_err());
}

/// The digit-pushing text is the text `format!` writes, across the
/// whole range of timestamps (every year sign and width, every field
/// padded), and parses back to the same instant.
#[test]
fn timestamps_are_written_as_format_would() {
    let reference = |micros: i128, with_zone: bool| {
        let seconds = micros.div_euclid(1_000_000) as i64;
        let fraction = micros.rem_euclid(1_000_000);
        let (days, of_day) = (seconds.div_euclid(86_400), seconds.rem_euclid(86_400));
        let (year, month, day) = civil_from_days(days);
        let date = match year {
            0..=9999 => format!("{year:04}-{month:02}-{day:02}"),
            10_000.. => format!("+{year}-{month:02}-{day:02}"),
            _ => format!("-{:04}-{month:02}-{day:02}", -year),
        };
        format!(
            "{date}T{:02}:{:02}:{:02}.{fraction:06}{}",
            of_day / 3600,
            of_day % 3600 / 60,
            of_day % 60,
            if with_zone { "Z" } else { "" }
        )
    };
    let first = parse_timestamp("-4712-01-01T00:00:00Z", true).unwrap();
    let last = parse_timestamp("+294276-12-31T23:59:59.999999Z", true).unwrap();
    // A stride that is no round number of seconds or days lands on
    // every digit of every field somewhere in the range.
    let stride = (last - first) / 200_003;
    let mut micros = first;
    while micros <= last {
        for with_zone in [true, false] {
            let text = format_timestamp(micros, with_zone).unwrap();
            assert_eq!(text, reference(micros, with_zone));
            assert_eq!(parse_timestamp(&text, with_zone).unwrap(), micros, "{text}");
        }
        micros += stride;
    }
    for edge in [first, last, 0, -1, 1, 999_999, -999_999] {
        assert_eq!(format_timestamp(edge, true).unwrap(), reference(edge, true));
    }
    assert!(format_timestamp(last + 1, true).is_err());
    assert!(format_timestamp(first - 1, true).is_err());
}
