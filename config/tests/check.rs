//! Every kind of bad configuration is an error naming the file, line and key.

use config::{Config, Error};

const GOOD: &str = r#"[instance]
name = "trips"
shard_count = 8

[[cluster]]
name = "a"
master = "mysql://root@127.0.0.1:33061"
minions = ["mysql://root@127.0.0.1:33062"]
shards = "0-3"

[[cluster]]
name = "b"
master = "mysql://root@127.0.0.1:33071"
shards = "4-7"
"#;

/// Parses `text` expecting an error; returns (line, key, message).
fn invalid(text: &str) -> (usize, String, String) {
    match Config::parse(text, "test.toml") {
        Err(Error::Invalid {
            file,
            line,
            key,
            message,
        }) => {
            assert_eq!(file, "test.toml");
            (line, key, message)
        }
        Err(other) => panic!("unexpected error {other}"),
        Ok(_) => panic!("accepted:\n{text}"),
    }
}

#[test]
fn the_shipped_example_is_valid() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/local.toml");
    let config = Config::load(path).unwrap();
    assert_eq!(config.instance.name, "trips");
    assert_eq!(config.instance.shard_count, 64);
    assert_eq!(config.clusters.len(), 2);
    assert_eq!(config.cluster_for_shard(40).unwrap().name, "b");
}

#[test]
fn defaults_fill_optional_sections() {
    let config = Config::parse(GOOD, "good.toml").unwrap();
    assert_eq!(config.limits.max_body_bytes, 1 << 20);
    assert_eq!(config.limits.max_batch_cells, 1000);
    assert_eq!(config.storage.max_connections_per_node, 16);
    assert!(config.clusters[1].minions.is_empty());
    assert!(config.mirror.relay_in_app && config.mirror.reverse_in_app);
    assert_eq!(config.mirror.relay_batch, 500);
}

#[test]
fn unknown_keys_name_their_line() {
    let text = GOOD.replace("shards = \"4-7\"", "shards = \"4-7\"\nreplicas = 3");
    let (line, key, message) = invalid(&text);
    assert_eq!((line, key.as_str()), (15, "cluster[1].replicas"));
    assert!(message.contains("unknown field"), "{message}");

    let text = format!("{GOOD}\n[limits]\nmax_body = 5\n");
    let (line, key, _) = invalid(&text);
    assert_eq!((line, key.as_str()), (17, "limits.max_body"));
}

#[test]
fn overlapping_ranges_are_rejected() {
    let text = GOOD.replace("\"4-7\"", "\"3-7\"");
    let (line, key, message) = invalid(&text);
    assert_eq!((line, key.as_str()), (14, "cluster[1].shards"));
    assert!(message.contains("overlaps cluster[0]"), "{message}");
    assert!(message.contains("at shard 3"), "{message}");
}

#[test]
fn gaps_are_rejected_naming_the_missing_shard() {
    let text = GOOD.replace("\"4-7\"", "\"5-7\"");
    let (_, key, message) = invalid(&text);
    assert_eq!(key, "cluster");
    assert!(message.contains("leave shard 4 uncovered"), "{message}");
}

#[test]
fn a_cluster_without_shards_is_one_added_for_a_split() {
    let text =
        format!("{GOOD}\n[[cluster]]\nname = \"c\"\nmaster = \"mysql://root@127.0.0.1:33081\"\n");
    let config = Config::parse(&text, "split.toml").unwrap();
    assert_eq!(config.clusters[2].shards, None);
    assert_eq!(config.cluster_for_shard(5).unwrap().name, "b");
    // It holds nothing: the others must still cover every shard.
    let text = text.replace("shards = \"4-7\"\n", "");
    let (_, key, message) = invalid(&text);
    assert_eq!(key, "cluster");
    assert!(message.contains("leave shard 4 uncovered"), "{message}");
}

#[test]
fn ranges_past_the_shard_count_are_rejected() {
    let text = GOOD.replace("\"4-7\"", "\"4-8\"");
    let (line, key, message) = invalid(&text);
    assert_eq!((line, key.as_str()), (14, "cluster[1].shards"));
    assert!(message.contains("past the last shard 7"), "{message}");
}

#[test]
fn bad_urls_are_rejected() {
    let text = GOOD.replace("mysql://root@127.0.0.1:33062", "postgres://x@127.0.0.1:1");
    let (line, key, message) = invalid(&text);
    assert_eq!((line, key.as_str()), (8, "cluster[0].minions[0]"));
    assert!(message.contains("mysql://"), "{message}");

    let text = GOOD.replace("mysql://root@127.0.0.1:33071", "not a url");
    let (line, key, _) = invalid(&text);
    assert_eq!((line, key.as_str()), (13, "cluster[1].master"));

    let text = GOOD.replace("127.0.0.1:33071", "127.0.0.1:33071/trips");
    let (_, key, message) = invalid(&text);
    assert_eq!(key, "cluster[1].master");
    assert!(message.contains("names a database"), "{message}");
}

#[test]
fn malformed_values_name_the_key() {
    let (line, key, _) = invalid(&GOOD.replace("shard_count = 8", "shard_count = \"eight\""));
    assert_eq!((line, key.as_str()), (3, "instance.shard_count"));

    let (line, key, message) = invalid(&GOOD.replace("\"0-3\"", "\"3-0\""));
    assert_eq!((line, key.as_str()), (9, "cluster[0].shards"));
    assert!(message.contains("backwards"), "{message}");

    let (_, key, _) = invalid(&GOOD.replace("name = \"trips\"", "name = \"Trips!\""));
    assert_eq!(key, "instance.name");

    let (_, key, _) = invalid(&GOOD.replace("name = \"b\"", "name = \"a\""));
    assert_eq!(key, "cluster[1].name");

    let (line, key, _) = invalid(&format!("{GOOD}\n[limits]\nmax_batch_cells = 0\n"));
    assert_eq!((line, key.as_str()), (17, "limits.max_batch_cells"));

    let (line, key, message) = invalid(&GOOD.replace("shard_count = 8", "shard_count = 0"));
    assert_eq!((line, key.as_str()), (3, "instance.shard_count"));
    assert_eq!(message, "must be between 1 and 10000, got 0");

    let (_, key, message) = invalid(&format!("{GOOD}\n[storage]\nrequest_timeout_ms = 0\n"));
    assert_eq!(key, "storage.request_timeout_ms");
    assert_eq!(message, "must be between 1 and 3600000, got 0");

    let (line, key, message) = invalid(&format!(
        "{GOOD}\n[mirror]\nretry_backoff_ms = 500\nmax_backoff_ms = 100\n"
    ));
    assert_eq!((line, key.as_str()), (18, "mirror.max_backoff_ms"));
    assert_eq!(message, "must be between 500 and 3600000, got 100");
    let (_, key, _) = invalid(&format!("{GOOD}\n[mirror]\nrelay_batch = 0\n"));
    assert_eq!(key, "mirror.relay_batch");
    let (line, key, _) = invalid(&format!("{GOOD}\n[mirror]\nrelay = true\n"));
    assert_eq!((line, key.as_str()), (17, "mirror.relay"));
}

#[test]
fn missing_sections_and_syntax_errors_are_located() {
    let (_, key, message) =
        invalid("[[cluster]]\nname = \"a\"\nmaster = \"mysql://h\"\nshards = \"0\"\n");
    assert!(message.contains("instance"), "{key}: {message}");

    let (line, key, _) = invalid("[instance]\nname = \"t\"\nshard_count = = 3\n");
    assert_eq!((line, key.as_str()), (3, "(syntax)"));

    // A wrong type deep inside an array of tables, found while parsing.
    let (line, key, message) = invalid(&GOOD.replace(
        "minions = [\"mysql://root@127.0.0.1:33062\"]",
        "minions = [\"mysql://root@127.0.0.1:33062\", 7]",
    ));
    assert_eq!((line, key.as_str()), (8, "cluster[0].minions[1]"));
    assert!(message.contains("string"), "{message}");

    // A missing key is reported at its table.
    let (line, key, message) =
        invalid(&GOOD.replace("master = \"mysql://root@127.0.0.1:33071\"\n", ""));
    assert_eq!((line, key.as_str()), (11, "cluster[1]"));
    assert!(message.contains("master"), "{message}");
}

#[test]
fn unreadable_files_say_which_path() {
    let err = Config::load("does/not/exist.toml").unwrap_err();
    assert!(matches!(err, Error::Read { .. }));
    assert!(err.to_string().contains("does/not/exist.toml"));
}

#[test]
fn verifier_and_gate_keys_are_checked() {
    let config = Config::parse(GOOD, "good.toml").unwrap();
    assert_eq!(config.verify.sample_rate, 0.01);
    assert_eq!(config.verify.max_samples_per_sec, 500);
    assert_eq!(config.gates.min_samples, 10_000);
    assert_eq!(config.gates.max_mismatch_upper_bound, 0.0001);

    let (line, key, message) = invalid(&format!("{GOOD}\n[verify]\nsample_rate = 1.5\n"));
    assert_eq!((line, key.as_str()), (17, "verify.sample_rate"));
    assert_eq!(message, "must be between 0.0 and 1.0, got 1.5");
    let (_, key, message) = invalid(&format!(
        "{GOOD}\n[gates]\nmax_mismatch_upper_bound = -0.5\n"
    ));
    assert_eq!(key, "gates.max_mismatch_upper_bound");
    assert_eq!(message, "must be between 0.0 and 1.0, got -0.5");
    let (_, key, message) = invalid(&format!("{GOOD}\n[verify]\nignore = [\"BASE.\"]\n"));
    assert_eq!(key, "verify.ignore[0]");
    assert!(message.contains("\"BASE.\" is not"), "{message}");
    let (_, key, message) = invalid(&format!(
        "{GOOD}\n[verify]\ntolerance = {{ \"BASE.fare\" = -1.0 }}\n"
    ));
    assert_eq!(key, "verify.tolerance.BASE.fare");
    assert!(message.contains(">= 0"), "{message}");
    let (_, key, _) = invalid(&format!("{GOOD}\n[verify]\ntolerance = {{ BASE = 1.0 }}\n"));
    assert_eq!(key, "verify.tolerance.BASE");
    let (_, key, _) = invalid(&format!("{GOOD}\n[verify]\nstale_after_ms = 5\n"));
    assert_eq!(key, "verify.stale_after_ms");

    let config = Config::parse(
        &format!("{GOOD}\n[verify]\nignore = [\"NOTES\", \"BASE.status\"]\ntolerance = {{ \"BASE.fare\" = 0.01 }}\n"),
        "good.toml",
    )
    .unwrap();
    assert_eq!(config.verify.ignore, ["NOTES", "BASE.status"]);
    assert_eq!(config.verify.tolerance["BASE.fare"], 0.01);
}

#[test]
fn capture_keys_have_defaults_and_are_checked() {
    let config = Config::parse(GOOD, "good.toml").unwrap();
    assert!(config.capture.enabled && config.capture.required);
    assert!(!config.capture.bump_version);
    assert_eq!(config.capture.tombstone_column, "DELETED");
    assert_eq!(config.capture.lock_timeout_ms, 500);
    assert_eq!(config.capture.method, config::CaptureMethod::Triggers);
    let logical = Config::parse(
        &format!("{GOOD}\n[capture]\nmethod = \"logical\"\n"),
        "good.toml",
    )
    .unwrap();
    assert_eq!(logical.capture.method, config::CaptureMethod::Logical);
    let (line, key, message) = invalid(&format!("{GOOD}\n[capture]\nmethod = \"wal\"\n"));
    assert_eq!((line, key.as_str()), (17, "capture.method"));
    assert!(
        message.contains("triggers") && message.contains("logical"),
        "{message}"
    );

    let config = Config::parse(
        &format!("{GOOD}\n[capture]\nenabled = false\nbump_version = true\nrequired = false\ntombstone_column = \"GONE\"\n"),
        "good.toml",
    )
    .unwrap();
    assert!(!config.capture.enabled && !config.capture.required);
    assert!(config.capture.bump_version);
    assert_eq!(config.capture.tombstone_column, "GONE");

    let (line, key, message) = invalid(&format!("{GOOD}\n[capture]\nbump = true\n"));
    assert_eq!((line, key.as_str()), (17, "capture.bump"));
    assert!(message.contains("unknown field"), "{message}");
    let (line, key, message) = invalid(&format!("{GOOD}\n[capture]\nlock_timeout_ms = 5\n"));
    assert_eq!((line, key.as_str()), (17, "capture.lock_timeout_ms"));
    assert_eq!(message, "must be between 10 and 60000, got 5");
    let (_, key, message) = invalid(&format!(
        "{GOOD}\n[capture]\ntombstone_column = \"no such name\"\n"
    ));
    assert_eq!(key, "capture.tombstone_column");
    assert!(message.contains("not a valid column name"), "{message}");

    // The tombstones cannot share a column with the layout.
    let layout = "\n[legacy]\nurl = \"postgres://u@127.0.0.1:5432/db\"\n\n[layout]\ntable = \"trips\"\nid = \"id\"\nuuid = \"uuid\"\n\n[[layout.column]]\nname = \"DELETED\"\nkind = \"row\"\nref_key = \"version\"\nfields = [\"status\"]\n";
    let (line, key, message) = invalid(&format!("{GOOD}{layout}"));
    assert_eq!(key, "capture.tombstone_column");
    assert!(message.contains("is a layout column"), "{message}");
    assert_eq!(line, 1, "a default value has no line of its own");
    let (line, key, _) = invalid(&format!(
        "{GOOD}{layout}\n[capture]\ntombstone_column = \"DELETED\"\n"
    ));
    assert_eq!((line, key.as_str()), (31, "capture.tombstone_column"));
    Config::parse(
        &format!("{GOOD}{layout}\n[capture]\ntombstone_column = \"GONE\"\n"),
        "good.toml",
    )
    .unwrap();
}

#[test]
fn layout_json_null_defaults_to_refuse_and_names_its_choices() {
    let layout = "\n[legacy]\nurl = \"postgres://u@127.0.0.1:5432/db\"\n\n[layout]\ntable = \"forms\"\nid = \"id\"\nuuid = \"uuid\"\n";
    let column = "\n[[layout.column]]\nname = \"ALL\"\nkind = \"row\"\nref_key = \"rev\"\nfields = [\"meta\"]\n";
    let config = Config::parse(&format!("{GOOD}{layout}{column}"), "good.toml").unwrap();
    let json_null = |c: &Config| c.layout.as_ref().unwrap().json_null;
    assert_eq!(json_null(&config), config::JsonNull::Refuse);
    let config = Config::parse(
        &format!("{GOOD}{layout}json_null = \"sql_null\"\n{column}"),
        "good.toml",
    )
    .unwrap();
    assert_eq!(json_null(&config), config::JsonNull::SqlNull);
    let (line, key, message) = invalid(&format!("{GOOD}{layout}json_null = \"null\"\n{column}"));
    assert_eq!((line, key.as_str()), (23, "layout.json_null"));
    assert!(
        message.contains("refuse") && message.contains("sql_null"),
        "{message}"
    );
}
