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
