//! `mezzanine config check FILE…`: validate without connecting.

use std::path::PathBuf;

use clap::Subcommand;

use crate::UsageError;

#[derive(Subcommand)]
pub enum ConfigCommand {
    /// Validate configuration files without connecting to anything; every
    /// error names the file, line and key. Exit code 2 if any is invalid.
    Check {
        /// The files to check.
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
}

pub fn run(command: ConfigCommand) -> anyhow::Result<()> {
    let ConfigCommand::Check { files } = command;
    let mut failed = 0;
    for file in &files {
        match config::Config::load(file) {
            Ok(c) => {
                let minions: usize = c.clusters.iter().map(|c| c.minions.len()).sum();
                println!(
                    "{}: ok (instance {:?}, {} shards on {} clusters, {} minions)",
                    file.display(),
                    c.instance.name,
                    c.instance.shard_count,
                    c.clusters.len(),
                    minions
                );
                for warning in plain_text_warnings(&c) {
                    eprintln!("{}: warning: {warning}", file.display());
                }
                if c.storage.durability == config::Durability::OneHost {
                    eprintln!("{}: warning: {}", file.display(), config::ONE_HOST_WARNING);
                }
            }
            Err(e) => {
                eprintln!("{e}");
                failed += 1;
            }
        }
    }
    if failed > 0 {
        return Err(UsageError(format!(
            "{failed} of {} config files are invalid",
            files.len()
        ))
        .into());
    }
    Ok(())
}

/// A warning for each server off this machine that the config reaches in
/// plain text (no TLS mode that refuses it: `prefer` falls back silently).
pub(crate) fn plain_text_warnings(config: &config::Config) -> Vec<String> {
    use config::urls::{is_loopback, redact, requires_tls};
    let mut urls: Vec<(String, &str)> = Vec::new();
    for (i, cluster) in config.clusters.iter().enumerate() {
        urls.push((format!("cluster[{i}].master"), &cluster.master));
        for (k, minion) in cluster.minions.iter().enumerate() {
            urls.push((format!("cluster[{i}].minions[{k}]"), minion));
        }
    }
    if let Some(legacy) = &config.legacy {
        urls.push(("legacy.url".into(), &legacy.url));
    }
    urls.into_iter()
        .filter(|(_, url)| !is_loopback(url) && !requires_tls(url))
        .map(|(key, url)| {
            let hint = if url.starts_with("postgres") {
                "sslmode=verify-full&sslrootcert=CA.pem"
            } else {
                "ssl-mode=VERIFY_IDENTITY&ssl-ca=CA.pem"
            };
            format!(
                "{key} ({}) is not on this machine and is reached in plain text: add ?{hint}",
                redact(url)
            )
        })
        .collect()
}
