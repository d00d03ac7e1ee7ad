//! The `mezzanine` command line, as a user runs it.

use std::process::{Command, Output};

use crate::harness::{cluster, example_layout, LegacyDb};

fn mezzanine(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mezzanine"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("the binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn help_lists_every_command() {
    let out = mezzanine(&["--help"]);
    assert!(out.status.success());
    let help = text(&out.stdout);
    for command in [
        "cluster", "config", "schema", "legacy", "mode", "mirror", "capture", "demo", "bench",
    ] {
        assert!(help.contains(command), "--help lacks {command}:\n{help}");
    }
    for sub in [
        &["cluster", "--help"][..],
        &["schema", "apply", "--help"],
        &["bench", "cells", "--help"],
        &["legacy", "seed", "--help"],
        &["legacy", "add-uuid", "--help"],
        &["mode", "set", "--help"],
        &["mirror", "relay", "--help"],
        &["mirror", "status", "--help"],
        &["bench", "mirror", "--help"],
        &["capture", "install", "--help"],
        &["capture", "status", "--help"],
        &["bench", "capture", "--help"],
    ] {
        assert!(mezzanine(sub).status.success(), "{sub:?}");
    }
}

#[test]
fn config_check_accepts_the_example_and_rejects_bad_files_with_exit_2() {
    let out = mezzanine(&["config", "check", "config/examples/local.toml"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("64 shards on 2 clusters"));

    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    let example = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/config/examples/local.toml"
    ))
    .unwrap();
    std::fs::write(
        &bad,
        example.replace("shards = \"32-63\"", "shards = \"30-63\""),
    )
    .unwrap();
    let out = mezzanine(&["config", "check", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.contains("bad.toml:19: cluster[1].shards"), "{err}");

    let out = mezzanine(&["config", "check", "no/such/file.toml"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(mezzanine(&["no-such-command"]).status.code(), Some(2));
}

#[test]
fn schema_apply_creates_then_reports_everything_present() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cli.toml");
    let name = format!("cli{}", std::process::id() % 100_000);
    std::fs::write(&path, cluster().config_toml(&name, 16)).unwrap();
    let config = path.to_str().unwrap();

    let out = mezzanine(&["schema", "apply", "--config", config]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("16 created, 0 already present"),
        "{}",
        text(&out.stdout)
    );
    let out = mezzanine(&["schema", "apply", "--config", config]);
    assert!(
        text(&out.stdout).contains("0 created, 16 already present"),
        "{}",
        text(&out.stdout)
    );
    let out = mezzanine(&["schema", "verify", "--config", config]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

/// A config file for `db`, with the database name replaced by `database`.
fn config_for(dir: &std::path::Path, db: &LegacyDb, database: &str) -> String {
    let path = dir.join(format!("{database}.toml"));
    std::fs::write(&path, db.config_text.replace(&db.name, database)).unwrap();
    path.to_str().unwrap().to_string()
}

async fn checksum(url: &str) -> String {
    let pool = sqlx::PgPool::connect(url).await.unwrap();
    let sum: String = sqlx::query_scalar(
        "SELECT md5((SELECT string_agg(t::text, '|' ORDER BY id) FROM trips t)
                 || (SELECT string_agg(n::text, '|' ORDER BY trip_id, seq) FROM trip_notes n)
                 || (SELECT string_agg(b::text, '|' ORDER BY trip_id, seq) FROM billing_attempts b)
                 || (SELECT string_agg(f::text, '|' ORDER BY trip_id, seq) FROM fare_adjustments f))",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    pool.close().await;
    sum
}

#[tokio::test]
async fn legacy_init_and_seed_are_reproducible() {
    let db = LegacyDb::new("", &example_layout()).await;
    let dir = tempfile::tempdir().unwrap();
    let mut sums = Vec::new();
    // Databases that do not exist yet: init creates them.
    for (database, seed) in [("a", "9"), ("b", "9"), ("c", "10")] {
        let database = format!("{}{database}", db.name);
        let config = config_for(dir.path(), &db, &database);
        let out = mezzanine(&["--config", &config, "legacy", "init", "--with-uuid"]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        for _ in 0..2 {
            let out = mezzanine(&[
                "--config", &config, "legacy", "seed", "--trips", "300", "--seed", seed,
            ]);
            assert!(out.status.success(), "{}", text(&out.stderr));
            assert!(
                text(&out.stdout).contains("seeded 300 trips"),
                "{}",
                text(&out.stdout)
            );
        }
        sums.push(checksum(&cluster().postgres_url(&database)).await);
    }
    assert_eq!(sums[0], sums[1], "the same seed gave different data");
    assert_ne!(sums[0], sums[2], "different seeds gave the same data");
}

#[tokio::test]
async fn mode_commands_refuse_with_the_reason_and_exit_codes() {
    let db = LegacyDb::new("", &example_layout()).await;
    let dir = tempfile::tempdir().unwrap();
    let config = config_for(dir.path(), &db, &db.name);
    let out = mezzanine(&["--config", &config, "mode", "show"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("mode: legacy"),
        "{}",
        text(&out.stdout)
    );

    let out = mezzanine(&["--config", &config, "mode", "set", "bogus"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("unknown mode \"bogus\""));

    let out = mezzanine(&["--config", &config, "mode", "set", "schemaless"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("refused: the mode moves forward one step at a time"),
        "{}",
        text(&out.stderr)
    );
    let out = mezzanine(&[
        "--config",
        &config,
        "mode",
        "set",
        "schemaless",
        "--force",
        "--reason",
        "drill",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("mode legacy -> schemaless (FORCED over:"));
    let out = mezzanine(&["--config", &config, "mode", "show"]);
    let shown = text(&out.stdout);
    assert!(
        shown.contains("mode: schemaless") && shown.contains("(forced): drill"),
        "{shown}"
    );
    assert!(
        shown.contains("legacy -> schemaless") && shown.contains("FORCED over"),
        "{shown}"
    );

    let out = mezzanine(&["--config", &config, "legacy", "add-uuid", "--batch", "0"]);
    assert_eq!(out.status.code(), Some(2));
}

/// Every flag that overrides a config key obeys the key's range: a usage
/// error (exit 2) naming the flag, and nothing planned or started.
#[tokio::test]
async fn flags_that_override_keys_are_checked_like_the_keys() {
    let db = LegacyDb::new("", &example_layout()).await;
    let dir = tempfile::tempdir().unwrap();
    let config = config_for(dir.path(), &db, &db.name);
    let cases: &[(&[&str], &str)] = &[
        (
            &["backfill", "plan", "--chunk-size", "18446744073709551615"],
            "--chunk-size",
        ),
        (&["backfill", "plan", "--chunk-size", "0"], "--chunk-size"),
        (
            &["backfill", "run", "--stale-after-ms", "0"],
            "--stale-after-ms",
        ),
        (&["backfill", "run", "--workers", "100000"], "--workers"),
        (
            &["backfill", "run", "--max-replication-lag-ms", "99999999999"],
            "--max-replication-lag-ms",
        ),
        (
            &["verify", "full", "--chunk-size", "18446744073709551615"],
            "--chunk-size",
        ),
        (&["verify", "full", "--workers", "0"], "--workers"),
        (&["verify", "sample", "--rate", "1.5"], "--rate"),
        (&["verify", "sample", "--max-per-sec", "0"], "--max-per-sec"),
    ];
    for (args, flag) in cases {
        let mut all = vec!["--config", config.as_str()];
        all.extend_from_slice(args);
        let out = mezzanine(&all);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(&format!("{flag}: must be")), "{args:?}: {err}");
    }
    let out = mezzanine(&["--config", &config, "backfill", "status", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        status["planned"], false,
        "a refused plan was made: {status}"
    );
    let out = mezzanine(&["--config", &config, "verify", "sample"]);
    assert!(
        text(&out.stdout).contains("([verify] of the config)"),
        "a refused setting was stored: {}",
        text(&out.stdout)
    );
}

/// `buffer status` exits 1 when a master's buffer cannot be read: it may
/// hold cells, and a runbook must not read "empty" from it.
#[test]
fn buffer_status_fails_when_a_master_does_not_answer() {
    let example = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/config/examples/local.toml"
    ))
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("down.toml");
    // Port 9 (discard) is closed on loopback.
    let down = example.replace("127.0.0.1:33061", "127.0.0.1:9");
    std::fs::write(&path, down).unwrap();
    let out = mezzanine(&["--config", path.to_str().unwrap(), "buffer", "status"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    assert!(
        text(&out.stderr).contains("buffers could not be read"),
        "{}",
        text(&out.stderr)
    );
}

/// No error shows a password, however the URL spells it; a server named
/// twice in the topology is refused.
#[test]
fn config_errors_never_show_passwords_and_one_server_is_one_node() {
    let example = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/config/examples/local.toml"
    ))
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let check = |name: &str, text: String| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        let out = mezzanine(&["config", "check", path.to_str().unwrap()]);
        (out.status.code(), text_of(&out))
    };
    let leaks = [
        (
            "master.toml",
            "\"mysql://root@127.0.0.1:33061\"",
            "\"mysql://root:p@ss@127.0.0.1:33061/db\"",
        ),
        (
            "minion.toml",
            "\"mysql://root@127.0.0.1:33062\"",
            "\"mysql://root:p@ss@127.0.0.1:33062?ssl-mode=SOMETIMES\"",
        ),
        (
            "legacy.toml",
            "\"postgres://postgres@127.0.0.1:55432/trips\"",
            "\"postgres://app:p@ss@127.0.0.1:55432/trips?sslmode=bogus\"",
        ),
        (
            "plain.toml",
            "\"postgres://postgres@127.0.0.1:55432/trips\"",
            "\"postgres://app:p@ss@127.0.0.1:55432\"",
        ),
    ];
    for (name, from, to) in leaks {
        assert!(example.contains(from), "{from}");
        let (code, out) = check(name, example.replace(from, to));
        assert_eq!(code, Some(2), "{name}: {out}");
        assert!(
            out.contains("app:***@") || out.contains("root:***@"),
            "{name}: {out}"
        );
        assert!(
            !out.contains("p@ss") && !out.contains("ss@127"),
            "{name}: {out}"
        );
    }

    for (name, from, to, key) in [
        (
            "two-masters.toml",
            "\"mysql://root@127.0.0.1:33071\"",
            "\"mysql://other@localhost:33061\"",
            "cluster[1].master",
        ),
        (
            "own-minion.toml",
            "\"mysql://root@127.0.0.1:33062\"",
            "\"mysql://root@127.0.0.1:33061\"",
            "cluster[0].minions[0]",
        ),
        (
            "shared-minion.toml",
            "\"mysql://root@127.0.0.1:33072\"",
            "\"mysql://root@127.0.0.1:33063\"",
            "cluster[1].minions[0]",
        ),
    ] {
        let (code, out) = check(name, example.replace(from, to));
        assert_eq!(code, Some(2), "{name}: {out}");
        assert!(
            out.contains(key) && out.contains("is the server of cluster["),
            "{name}: {out}"
        );
    }
}

fn text_of(out: &Output) -> String {
    format!("{}{}", text(&out.stdout), text(&out.stderr))
}

/// `config check` warns of a server off this machine reached in plain
/// text, and not of one whose URL requires TLS.
#[test]
fn config_check_warns_of_plain_text_to_other_hosts() {
    let example = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/config/examples/local.toml"
    ))
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("remote.toml");
    let remote = example
        .replace("root@127.0.0.1:33061", "root:pw@db1.example:3306")
        .replace(
            "postgres@127.0.0.1:55432/trips\"",
            "postgres@pg.example:5432/trips?sslmode=verify-full\"",
        );
    std::fs::write(&path, remote).unwrap();
    let out = mezzanine(&["config", "check", path.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text_of(&out));
    let err = text(&out.stderr);
    assert!(
        err.contains("warning: cluster[0].master (mysql://root:***@db1.example:3306) is not on this machine and is reached in plain text"),
        "{err}"
    );
    assert_eq!(err.matches("warning:").count(), 1, "{err}");
}

/// `cluster status` shows each node's semi-synchronous replication (the
/// dev cluster's masters wait for their two minions) and the durability.
#[test]
fn cluster_status_shows_semi_sync_and_durability() {
    let file = crate::harness::config_file(&cluster().config_toml("status", 4));
    let out = crate::harness::mezzanine(file.path(), &["cluster", "status", "--cluster-dir"])
        .arg(cluster().root())
        .output()
        .unwrap();
    let shown = text(&out.stdout);
    assert!(out.status.success(), "{shown}{}", text(&out.stderr));
    assert_eq!(shown.matches("on, 2 acking").count(), 2, "{shown}");
    // The four minions' SEMI-SYNC cell (the last filled one on a line
    // with no error).
    let acks = shown
        .lines()
        .filter(|line| line.split_whitespace().any(|w| w == "acks"))
        .count();
    assert_eq!(acks, 4, "{shown}");
    assert!(shown.contains("durability: two_hosts"), "{shown}");
}
