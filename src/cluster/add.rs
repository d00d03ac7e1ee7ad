//! `mezzanine cluster add`: a cluster appended to the config file with no
//! shards, and the instance's metadata created on its master.

use std::path::Path;

use clap::Args;
use schemaless::mysql::{schema, Topology};

use crate::UsageError;

#[derive(Args)]
pub struct AddArgs {
    /// The new cluster's name (unique; `[a-z0-9_-]`).
    name: String,
    /// Its master's URL, `mysql://USER[:PASS]@HOST:PORT`.
    #[arg(long)]
    master: String,
    /// A minion's URL (repeat for each).
    #[arg(long = "minion")]
    minions: Vec<String>,
    /// Check the new config and the master, writing nothing.
    #[arg(long)]
    dry_run: bool,
}

/// The config text with a `[[cluster]]` table for `args` after the
/// others (comments and layout of the rest kept).
fn with_cluster(text: &str, args: &AddArgs) -> Result<String, UsageError> {
    let mut doc: toml_edit::DocumentMut = text
        .parse()
        .map_err(|e| UsageError(format!("the config is not TOML: {e}")))?;
    let clusters = doc
        .get_mut("cluster")
        .and_then(|c| c.as_array_of_tables_mut())
        .ok_or_else(|| UsageError("the config has no [[cluster]] tables".into()))?;
    let mut table = toml_edit::Table::new();
    table.decor_mut().set_prefix(
        "\n# Added by `mezzanine cluster add`: holds no shard until `shard move` gives it some.\n",
    );
    table["name"] = toml_edit::value(args.name.as_str());
    table["master"] = toml_edit::value(args.master.as_str());
    let mut minions = toml_edit::Array::new();
    for m in &args.minions {
        minions.push(m.as_str());
    }
    table["minions"] = toml_edit::value(minions);
    clusters.push(table);
    Ok(doc.to_string())
}

pub async fn add(args: AddArgs, path: &Path) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| UsageError(format!("{}: {e}", path.display())))?;
    let old = crate::load_config(path)?;
    if old.clusters.iter().any(|c| c.name == args.name) {
        return Err(UsageError(format!(
            "the config has a cluster named {:?} already",
            args.name
        ))
        .into());
    }
    let new_text = with_cluster(&text, &args)?;
    let config = config::Config::parse(&new_text, &path.display().to_string()).map_err(|e| {
        UsageError(format!(
            "the config with the new cluster would be invalid: {e}"
        ))
    })?;
    let topology = Topology::from_config(&config)?;
    let index = topology
        .cluster_named(&args.name)
        .expect("the new config has the new cluster");
    let master = topology.clusters[index].master();
    master.probe().await.map_err(|e| {
        UsageError(format!(
            "the new cluster's master does not answer, nothing changed: {e}"
        ))
    })?;
    if args.dry_run {
        println!(
            "would add cluster {:?} (master {}, {} minions) to {}",
            args.name,
            master.label,
            args.minions.len(),
            path.display()
        );
        topology.close().await;
        return Ok(());
    }
    // The schema first: a config naming a cluster without the instance's
    // metadata would fail every process that loads it.
    let report = schema::apply(&topology).await;
    topology.close().await;
    report?;
    // Written whole then renamed, so the file is never half written.
    let temporary = path.with_extension("toml.adding");
    std::fs::write(&temporary, &new_text)
        .and_then(|()| std::fs::rename(&temporary, path))
        .map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))?;
    println!(
        "cluster {:?} added to {} with no shards. Next: give every process the new config, then `mezzanine shard move SHARDS --to {}`.",
        args.name,
        path.display(),
        args.name
    );
    Ok(())
}
