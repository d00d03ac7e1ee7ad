//! Shared setup: the test cluster and per-test Schemaless instances.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use devcluster::{DevCluster, Spec};
use schemaless::mysql::{schema, Topology};
use schemaless::MySqlStore;

static CLUSTER: OnceLock<DevCluster> = OnceLock::new();
static NEXT_INSTANCE: AtomicU32 = AtomicU32::new(0);

/// The servers every test shares: PostgreSQL and two MariaDB clusters of a
/// master and two minions, started once per test run, killed at exit.
pub fn cluster() -> &'static DevCluster {
    CLUSTER.get_or_init(|| {
        // Warnings of the code under test show with a failing test's
        // output (MEZZANINE_LOG=debug for more).
        let _ = tracing_subscriber::fmt()
            .with_test_writer()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_env("MEZZANINE_LOG")
                    .unwrap_or_else(|_| "warn".into()),
            )
            .try_init();
        // Servers are started from a runtime of their own: each test has
        // its own runtime, and this one must not belong to any of them.
        let cluster = std::thread::spawn(|| {
            let runtime = tokio::runtime::Runtime::new().expect("a runtime for the servers");
            runtime.block_on(async {
                let spec = Spec::free_ports(&["a", "b"], 2).expect("free ports");
                DevCluster::private(spec).await
            })
        })
        .join()
        .expect("the server thread")
        .unwrap_or_else(|e| panic!("starting the test cluster: {e}"));
        // nix has no atexit; a test binary has no other hook that runs
        // after every test without a panic skipping it.
        // SAFETY: registering a plain extern "C" function.
        unsafe {
            libc::atexit(stop_cluster_at_exit);
        }
        cluster
    })
}

extern "C" fn stop_cluster_at_exit() {
    if let Some(cluster) = CLUSTER.get() {
        for node in cluster.nodes() {
            node.kill();
        }
        let _ = cluster.purge();
    }
}

/// A fresh, uniquely named instance on the shared cluster, schema applied.
pub struct Instance {
    pub config: config::Config,
    /// The config's text, for a file the CLI reads.
    pub text: String,
    pub store: MySqlStore,
}

impl Instance {
    pub async fn new(shard_count: u32) -> Instance {
        Instance::with_limits(shard_count, "").await
    }

    /// `extra` is appended to the config text (e.g. a `[limits]` table).
    pub async fn with_limits(shard_count: u32, extra: &str) -> Instance {
        let name = format!(
            "t{}_{}",
            std::process::id() % 100_000,
            NEXT_INSTANCE.fetch_add(1, Ordering::Relaxed)
        );
        let text = format!("{}\n{extra}", cluster().config_toml(&name, shard_count));
        let config = config::Config::parse(&text, "test.toml").expect("the test config is valid");
        let topology = Topology::from_config(&config).expect("topology");
        schema::apply(&topology).await.expect("schema apply");
        topology.close().await;
        let store = MySqlStore::connect(&config).expect("store");
        Instance {
            config,
            text,
            store,
        }
    }

    /// Runs SQL on the master holding `shard` (to tamper with stored data).
    pub async fn execute_on_master(&self, shard: u32, sql: String) {
        let node = &self.store.topology().cluster(shard).unwrap().master();
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
            .execute(&node.pool)
            .await
            .unwrap();
    }

    /// Waits until every minion has everything its master has.
    pub async fn wait_for_minions(&self) {
        cluster()
            .wait_all_caught_up(Duration::from_secs(30))
            .await
            .expect("minions catch up");
    }
}

/// Waits until `counter` passes `above`, failing the test after a minute.
pub async fn wait_past(counter: &std::sync::atomic::AtomicU64, above: u64, what: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while counter.load(Ordering::Relaxed) <= above {
        assert!(
            std::time::Instant::now() < deadline,
            "waited a minute for {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

const ROW_BASE: u128 = 0x6f1c_1a0e_8a3b_4a55_9d1e_0000_0000_0000;

/// A deterministic row key from a number (for readable tests).
pub fn row(n: u128) -> schemaless::RowKey {
    schemaless::RowKey::from(uuid::Uuid::from_u128(ROW_BASE + n))
}

/// The number [`row`] made a row key of.
pub fn row_number(key: &schemaless::RowKey) -> u128 {
    u128::from_be_bytes(*key.as_bytes()) - ROW_BASE
}

pub fn column(name: &str) -> schemaless::Column {
    schemaless::Column::new(name).unwrap()
}

pub fn cell(row_n: u128, col: &str, ref_key: i64, body: serde_json::Value) -> schemaless::Cell {
    schemaless::Cell::new(
        row(row_n),
        column(col),
        schemaless::RefKey::new(ref_key).unwrap(),
        schemaless::Body::from_value(body).unwrap(),
    )
}

/// A fresh PostgreSQL database on the shared cluster, with a config whose
/// `[legacy]` points at it (and a Schemaless instance of the same name,
/// whose schema is not applied unless a test asks).
/// The gates of test configs: tests that walk the modes read far too
/// little for the default sample checks (10000 samples, a bound of
/// 0.0001), so those are off; an open mismatch still closes the gates.
pub const TEST_GATES: &str = "[gates]\nmin_samples = 0\nmax_mismatch_upper_bound = 1.0\n";

/// Capture in test configs: not required by the gates. Tests of the other
/// parts plant divergence with plain SQL, which capture would deliver;
/// capture's own tests install it and require it (`capture.rs`).
pub const TEST_CAPTURE: &str = "[capture]\nrequired = false\n";

pub struct LegacyDb {
    pub name: String,
    pub config: config::Config,
    /// The config's text (for tests that run the CLI on it).
    pub config_text: String,
    pub pool: sqlx::PgPool,
}

/// The trips layout of the example config: everything from `[layout]` on.
pub fn example_layout() -> String {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/config/examples/local.toml"
    ))
    .expect("the example config");
    let at = text.find("\n[layout]").expect("the example has a [layout]");
    text[at..].to_string()
}

impl LegacyDb {
    /// A database prepared by `setup` (SQL), described by `layout` (TOML
    /// from `[layout]` on).
    pub async fn new(setup: &str, layout: &str) -> LegacyDb {
        let name = format!(
            "l{}_{}",
            std::process::id() % 100_000,
            NEXT_INSTANCE.fetch_add(1, Ordering::Relaxed)
        );
        let admin = sqlx::PgPool::connect(&cluster().postgres_url("postgres"))
            .await
            .expect("PostgreSQL");
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&admin)
            .await
            .expect("create database");
        admin.close().await;
        let url = cluster().postgres_url(&name);
        let config_text = format!(
            "{}\n{TEST_GATES}{TEST_CAPTURE}[legacy]\nurl = \"{url}\"\nmode_poll_ms = 200\n{layout}",
            cluster().config_toml(&name, 8)
        );
        let config =
            config::Config::parse(&config_text, "legacy-test.toml").expect("the test config");
        let pool = legacy::connection::pool(config.legacy.as_ref().unwrap()).unwrap();
        if !setup.is_empty() {
            sqlx::raw_sql(sqlx::AssertSqlSafe(setup.to_string()))
                .execute(&pool)
                .await
                .expect("setup SQL");
        }
        LegacyDb {
            name,
            config,
            config_text,
            pool,
        }
    }

    /// The sample trips tables (with their UUID column) and the example
    /// layout.
    pub async fn trips() -> LegacyDb {
        LegacyDb::new(
            &legacy::trips::ddl("public", Some("uuid")),
            &example_layout(),
        )
        .await
    }

    pub async fn store(&self) -> legacy::LegacyStore {
        legacy::LegacyStore::connect(&self.config)
            .await
            .expect("the legacy store connects")
    }

    /// Applies the Schemaless schema of the config's instance.
    pub async fn apply_schemaless(&self) {
        let topology = Topology::from_config(&self.config).expect("topology");
        schema::apply(&topology).await.expect("schema apply");
        topology.close().await;
    }

    /// One number from SQL.
    pub async fn count(&self, sql: &str) -> i64 {
        sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_string()))
            .fetch_one(&self.pool)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }
}

/// The latest cell of `row` in `column` on `store`: its ref key and body.
pub async fn latest_body(
    store: &dyn schemaless::CellStore,
    row: schemaless::RowKey,
    column: &schemaless::Column,
) -> Option<(i64, schemaless::Body)> {
    store
        .get_cell_latest(&row, column, schemaless::ReadFrom::Master)
        .await
        .unwrap()
        .map(|s| (s.cell.key.ref_key.get(), s.cell.body))
}

/// Puts `fields` as `row`'s cell of `column` at ref key 1 through the
/// legacy store; its error as text.
pub async fn put_fields(
    legacy: &legacy::LegacyStore,
    row: schemaless::RowKey,
    column: schemaless::Column,
    fields: serde_json::Value,
) -> Result<(), String> {
    use schemaless::CellStore as _;
    let body = schemaless::Body::from_value(fields).map_err(|e| e.to_string())?;
    let key = schemaless::RefKey::new(1).unwrap();
    legacy
        .put_cell(schemaless::Cell::new(row, column, key, body))
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// The strict full diff of the parent rows with ids `ids` (triage's
/// waits off): what it compared, and whether PostgreSQL's own reading ran.
pub async fn strict_full_diff(
    db: &LegacyDb,
    legacy: &legacy::LegacyStore,
    schemaless: &MySqlStore,
    ids: std::ops::Range<i64>,
) -> verifier::full::Checked {
    verifier::store::ensure(&db.pool).await.unwrap();
    let mut config = db.config.clone();
    config.verify.strict = true;
    config.verify.triage_delay_ms = 0;
    config.verify.triage_wait_ms = 0;
    let checked = tripstore::triage::full_diff(legacy, schemaless, &config)
        .check(ids)
        .await
        .unwrap();
    assert!(checked.strict, "the strict check ran");
    checked
}

/// `mezzanine --config CONFIG ARGS…` (the binary under test).
pub fn mezzanine(config: &std::path::Path, args: &[&str]) -> std::process::Command {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_mezzanine"));
    command.arg("--config").arg(config).args(args);
    command
}

/// A temporary file holding `text` (a config for the command line).
pub fn config_file(text: &str) -> tempfile::NamedTempFile {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), text).unwrap();
    file
}

/// On a private cluster (for tests that stop or delay servers): a fresh
/// PostgreSQL database `name` with the sample trips tables, a config
/// ending with the `extra` TOML tables, and the Schemaless schema of
/// instance `name` applied.
pub async fn private_trips(
    cluster: &DevCluster,
    name: &str,
    extra: &str,
) -> (config::Config, sqlx::PgPool) {
    let admin = sqlx::PgPool::connect(&cluster.postgres_url("postgres"))
        .await
        .expect("PostgreSQL");
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&admin)
        .await
        .expect("create database");
    admin.close().await;
    let text = format!(
        "{}\n{TEST_GATES}{TEST_CAPTURE}[legacy]\nurl = \"{}\"\nmode_poll_ms = 200\n{}\n{extra}\n",
        cluster.config_toml(name, 8),
        cluster.postgres_url(name),
        example_layout()
    );
    let config = config::Config::parse(&text, "private.toml").expect("the test config");
    let pool = legacy::connection::pool(config.legacy.as_ref().unwrap()).unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(legacy::trips::ddl(
        "public",
        Some("uuid"),
    )))
    .execute(&pool)
    .await
    .expect("the trips tables");
    let topology = Topology::from_config(&config).expect("topology");
    schema::apply(&topology).await.expect("schema apply");
    topology.close().await;
    (config, pool)
}
