//! The `mezzanine` command line, as a user runs it.

use std::process::{Command, Output};

use crate::harness::cluster;

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
    for command in ["cluster", "config", "schema", "demo", "bench"] {
        assert!(help.contains(command), "--help lacks {command}:\n{help}");
    }
    for sub in [
        &["cluster", "--help"][..],
        &["schema", "apply", "--help"],
        &["bench", "cells", "--help"],
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
