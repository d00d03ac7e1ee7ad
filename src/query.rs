//! `mezzanine query audit|translate|run`: which of the app's SQL the cell
//! API can answer, the calls each statement becomes, and the proof that a
//! translated read returns the same rows ([`run`]).

use std::io::Read as _;
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use query::audit::{self, Entry, Summary};
use query::{Class, Model};

#[derive(Subcommand)]
pub enum QueryCommand {
    /// Classify statements: from files (`-` for stdin; statements
    /// separated by `;`), or from pg_stat_statements on the legacy
    /// database. Each is `row`, `index`, `write` (with the cell API calls
    /// it becomes), `none` (with the reason and the fix), `other` (no
    /// layout table) or `unparsed`.
    Audit(AuditArgs),
    /// Classify one statement and print the calls it becomes. Exit 0 when
    /// the cell API answers it, 2 when it does not.
    Translate(TranslateArgs),
    /// Run a `row` or `index` read both ways, as SQL on PostgreSQL and as
    /// its cell API calls on Schemaless, rebuild the rows through the
    /// layout and compare them. Exit 0 when equal, 1 on a difference, 2
    /// when the statement cannot be run this way.
    Run(RunArgs),
}

#[derive(Args)]
pub struct RunArgs {
    /// The statement (`$1`, `$2`, ... are the --param values in order).
    sql: String,
    /// A parameter's value, as PostgreSQL would read it from text.
    #[arg(long = "param")]
    params: Vec<String>,
    /// The verdict as one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct AuditArgs {
    /// Files of SQL statements (`-` reads stdin).
    files: Vec<PathBuf>,
    /// Read the statements the legacy database has run from
    /// pg_stat_statements, most called first.
    #[arg(long)]
    from_pg_stat_statements: bool,
    /// With --from-pg-stat-statements: leave out statements called fewer
    /// times.
    #[arg(long, default_value_t = 1)]
    min_calls: u64,
    /// Also list Mezzanine's own statements (those starting with
    /// `/* mezzanine */`), left out by default.
    #[arg(long)]
    include_own: bool,
    /// One JSON object per statement per line, then a `{"summary": ...}`
    /// line.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct TranslateArgs {
    /// The statement.
    sql: String,
    /// Print the verdict as one JSON object.
    #[arg(long)]
    json: bool,
}

pub async fn run(command: QueryCommand, config_path: &Path) -> anyhow::Result<()> {
    let config = crate::load_config(config_path)?;
    let model = Model::from_config(&config).ok_or_else(|| {
        crate::UsageError(
            "the config has no [layout]: statements are classified by the layout's tables and \
             the declared indexes"
                .into(),
        )
    })?;
    match command {
        QueryCommand::Audit(args) => audit(&config, &model, args).await,
        QueryCommand::Run(args) => {
            let verdict = match query::run::run(&config, &model, &args.sql, &args.params).await {
                Ok(verdict) => verdict,
                Err(query::run::RunError::Untranslatable(why)) => {
                    return Err(crate::UsageError(format!("query run cannot run it: {why}")).into())
                }
                Err(query::run::RunError::Failed(e)) => return Err(e),
            };
            if args.json {
                println!("{}", query::run::json(&verdict));
            } else {
                print!("{}", query::run::text(&verdict));
            }
            if verdict.differences.is_empty() {
                Ok(())
            } else {
                anyhow::bail!("the two answers differ")
            }
        }
        QueryCommand::Translate(args) => {
            let entry = Entry::new(query::analyze(&model, &args.sql));
            if args.json {
                println!("{}", entry.json());
            } else {
                print!("{}", describe(&entry));
            }
            if entry.analysis.class.translatable() {
                Ok(())
            } else {
                Err(crate::UsageError(format!(
                    "the cell API does not answer this statement (class {})",
                    entry.analysis.class
                ))
                .into())
            }
        }
    }
}

async fn audit(config: &config::Config, model: &Model, args: AuditArgs) -> anyhow::Result<()> {
    if args.files.is_empty() && !args.from_pg_stat_statements {
        return Err(crate::UsageError(
            "name files of SQL (or `-` for stdin), or give --from-pg-stat-statements".into(),
        )
        .into());
    }
    let mut entries = Vec::new();
    for path in &args.files {
        let text = if path.as_os_str() == "-" {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .map_err(|e| crate::UsageError(format!("reading stdin: {e}")))?;
            text
        } else {
            std::fs::read_to_string(path)
                .map_err(|e| crate::UsageError(format!("reading {}: {e}", path.display())))?
        };
        entries.extend(
            query::analyze_text(model, &text)
                .into_iter()
                .filter(|a| args.include_own || !audit::is_own(&a.sql))
                .map(Entry::new),
        );
    }
    if args.from_pg_stat_statements {
        let legacy = legacy::connection::legacy_config(config)
            .map_err(|e| crate::UsageError(e.to_string()))?;
        let pool = legacy::connection::pool(legacy)?;
        let statements = legacy::statements::read(&pool, args.min_calls).await;
        // The database at hand says where an INSERT's values go when it
        // lists no columns.
        let known = query::run::column_orders(&pool, model)
            .await
            .map(|orders| model.clone().with_column_orders(orders));
        pool.close().await;
        let model = known.as_ref().unwrap_or(model);
        for s in statements? {
            if !args.include_own && audit::is_own(&s.query) {
                continue;
            }
            entries.push(Entry {
                analysis: query::analyze(model, &s.query),
                calls_count: Some(s.calls),
                total_ms: Some(s.total_ms),
            });
        }
    }
    if args.json {
        for entry in &entries {
            println!("{}", entry.json());
        }
        println!("{}", Summary::of(&entries).json());
    } else {
        print!("{}", audit::report(&entries));
    }
    Ok(())
}

/// One statement's verdict, for `translate`.
fn describe(entry: &Entry) -> String {
    let a = &entry.analysis;
    let mut out = format!("class: {}\n", a.class);
    if !a.tables.is_empty() {
        out.push_str(&format!("tables: {}\n", a.tables.join(", ")));
    }
    let calls = a.calls();
    if !calls.is_empty() {
        out.push_str("calls:\n");
        for call in calls {
            out.push_str(&format!("  {call}\n"));
        }
    }
    if let Some(reason) = &a.reason {
        out.push_str(&format!("why: {reason}\n"));
    }
    if a.class == Class::Other {
        out.push_str("why: it touches no layout table\n");
    }
    out
}
