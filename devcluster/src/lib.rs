//! Real PostgreSQL and MariaDB servers on loopback, for the quickstart,
//! the tests and the benchmarks.
//!
//! A dev cluster is one PostgreSQL server and one or more MariaDB clusters
//! of a master and its minions, replicating by GTID. Everything lives under
//! one folder (`.devcluster/` of the working directory for `mezzanine
//! cluster up`, a temporary folder for tests), binds to 127.0.0.1 only, and
//! can be found again by a later command through the pid files and the
//! recorded [`Spec`]. Tests get private clusters on free ports that are torn
//! down when dropped, and can stop, kill -9, restart and pause any node.
//!
//! This crate depends on nothing else of Mezzanine's, and no library crate
//! depends on it: only the CLI, the tests and the benchmarks use it.
//!
//! # Layout
//!
//! - [`spec`]: which servers, on which ports;
//! - [`binaries`]: finding `mariadbd`, `initdb`…, or naming the package;
//! - [`process`]: detached server processes, pid files, signals;
//! - [`node`]: one server: initialise, start, stop, kill, pause;
//! - [`replication`]: wiring minions to masters, lag and catch-up by GTID.
//!
//! # Example
//!
//! ```no_run
//! # async fn run() -> Result<(), devcluster::Error> {
//! let cluster = devcluster::DevCluster::private(devcluster::Spec::free_ports(&["a", "b"], 2)?).await?;
//! let master = cluster.mysql_url("a-master")?;
//! cluster.kill("a-master")?;          // kill -9
//! cluster.start("a-master").await?;   // and back
//! cluster.wait_caught_up("a-minion1", std::time::Duration::from_secs(10)).await?;
//! # let _ = master; Ok(()) }
//! ```

pub mod binaries;
pub mod node;
pub mod process;
pub mod replication;
pub mod spec;

use std::path::{Path, PathBuf};
use std::time::Duration;

pub use binaries::Binaries;
pub use node::{Node, NodeState};
pub use process::Signal;
pub use replication::MinionStatus;
pub use spec::{ClusterSpec, NodeSpec, Role, Spec};

/// Everything that can go wrong bringing servers up or down.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Server programs are not installed; the text names the packages.
    #[error("missing server programs: {0}")]
    MissingBinaries(String),
    /// A file or process operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// What the operating system said.
        source: std::io::Error,
    },
    /// A server did not start or did not become ready; the text says which
    /// and where its log is.
    #[error("{0}")]
    Server(String),
    /// A SQL command to a server failed.
    #[error("{node}: {source}")]
    Sql {
        /// Which node.
        node: String,
        /// The driver's error.
        source: sqlx::Error,
    },
    /// No node has that name.
    #[error("no node named {0:?} in this cluster")]
    NoSuchNode(String),
    /// The folder holds no cluster (nothing was brought up there).
    #[error("no dev cluster in {0}: run `mezzanine cluster up` first")]
    NotFound(PathBuf),
}

impl Error {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Error {
        Error::Io {
            context: context.into(),
            source,
        }
    }
}

/// What happens to the servers when the [`DevCluster`] value is dropped.
enum Teardown {
    /// Nothing: they keep running (`mezzanine cluster up`).
    Keep,
    /// kill -9 every server and delete the folder (private test clusters).
    Destroy(#[allow(dead_code)] tempfile::TempDir),
}

/// A set of running servers.
pub struct DevCluster {
    root: PathBuf,
    spec: Spec,
    nodes: Vec<Node>,
    teardown: Teardown,
}

const SPEC_FILE: &str = "cluster.json";

impl DevCluster {
    /// Brings the servers of `spec` up under `root`, reusing any that are
    /// already running and initialising any that never were. Idempotent.
    pub async fn up(root: &Path, spec: Spec) -> Result<DevCluster, Error> {
        std::fs::create_dir_all(root)
            .map_err(|e| Error::io(format!("creating {}", root.display()), e))?;
        let root = root
            .canonicalize()
            .map_err(|e| Error::io(format!("resolving {}", root.display()), e))?;
        let mut spec = spec;
        if let Ok(recorded) = Spec::read(&root.join(SPEC_FILE)) {
            // Promotions made since are part of the record, not of the
            // config the spec came from.
            spec = spec.with_roles_of(&recorded);
            if recorded != spec {
                return Err(Error::Server(format!(
                    "{} already holds a dev cluster with other ports or nodes; run `mezzanine cluster down --purge` first",
                    root.display()
                )));
            }
        }
        spec.write(&root.join(SPEC_FILE))?;
        let cluster = DevCluster::assemble(root, spec, Teardown::Keep)?;
        cluster.start_all().await?;
        Ok(cluster)
    }

    /// A private cluster in a fresh temporary folder, torn down (kill -9,
    /// folder deleted) when the value is dropped.
    pub async fn private(spec: Spec) -> Result<DevCluster, Error> {
        let dir = tempfile::Builder::new()
            .prefix("mezzanine-devcluster-")
            .tempdir()
            .map_err(|e| Error::io("creating a temporary folder", e))?;
        // PostgreSQL runs as its own user when we are root: it must be able
        // to reach its data folder.
        node::make_traversable(dir.path())?;
        let root = dir.path().to_path_buf();
        spec.write(&root.join(SPEC_FILE))?;
        let cluster = DevCluster::assemble(root, spec, Teardown::Destroy(dir))?;
        cluster.start_all().await?;
        Ok(cluster)
    }

    /// The cluster recorded under `root` by an earlier `up`, with whatever
    /// of it is running now; nothing is started.
    pub fn open(root: &Path) -> Result<DevCluster, Error> {
        let spec =
            Spec::read(&root.join(SPEC_FILE)).map_err(|_| Error::NotFound(root.to_path_buf()))?;
        let root = root
            .canonicalize()
            .map_err(|e| Error::io(format!("resolving {}", root.display()), e))?;
        DevCluster::assemble(root, spec, Teardown::Keep)
    }

    fn assemble(root: PathBuf, spec: Spec, teardown: Teardown) -> Result<DevCluster, Error> {
        let binaries = Binaries::find()?;
        let nodes = spec
            .nodes()
            .into_iter()
            .map(|n| Node::new(n, &root, binaries.clone()))
            .collect();
        Ok(DevCluster {
            root,
            spec,
            nodes,
            teardown,
        })
    }

    async fn start_all(&self) -> Result<(), Error> {
        // Initialise MariaDB data folders from one template: one
        // install-db run instead of one per node.
        let template = self.root.join(".mariadb-template");
        let mariadb: Vec<&Node> = self
            .nodes
            .iter()
            .filter(|n| n.spec.role.is_mariadb())
            .collect();
        if mariadb.iter().any(|n| !n.initialized()) && !template.join("mysql").exists() {
            node::install_mariadb_template(&mariadb[0].binaries, &template)?;
        }
        // Start them together: servers take a second or two each to boot.
        futures::future::try_join_all(self.nodes.iter().map(|n| n.ensure_running(&template)))
            .await?;
        for node in &self.nodes {
            if let Role::Minion { master_port, .. } = node.spec.role {
                replication::ensure_replicating(node, master_port).await?;
            }
        }
        Ok(())
    }

    /// Stops every server cleanly (SIGTERM, then SIGKILL after a grace
    /// period).
    pub async fn down(&self) -> Result<(), Error> {
        for node in &self.nodes {
            node.stop().await?;
        }
        Ok(())
    }

    /// Deletes the cluster's folder (after `down`).
    pub fn purge(&self) -> Result<(), Error> {
        std::fs::remove_dir_all(&self.root)
            .map_err(|e| Error::io(format!("deleting {}", self.root.display()), e))
    }

    /// The folder everything lives in.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Which servers, on which ports.
    pub fn spec(&self) -> &Spec {
        &self.spec
    }

    /// Every node, PostgreSQL first, then each cluster's master and minions.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// The node called `name` (`postgres`, `a-master`, `a-minion1`, …).
    pub fn node(&self, name: &str) -> Result<&Node, Error> {
        self.nodes
            .iter()
            .find(|n| n.spec.name == name)
            .ok_or_else(|| Error::NoSuchNode(name.to_string()))
    }

    /// `mysql://root@127.0.0.1:PORT` of a MariaDB node.
    pub fn mysql_url(&self, name: &str) -> Result<String, Error> {
        Ok(self.node(name)?.url())
    }

    /// `postgres://postgres@127.0.0.1:PORT/DATABASE`.
    pub fn postgres_url(&self, database: &str) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/{database}",
            self.spec.postgres_port
        )
    }

    /// Stops a node cleanly.
    pub async fn stop(&self, name: &str) -> Result<(), Error> {
        self.node(name)?.stop().await
    }

    /// kill -9 a node: no shutdown, no flush.
    pub fn kill(&self, name: &str) -> Result<(), Error> {
        self.node(name)?.kill();
        Ok(())
    }

    /// Freezes a node (SIGSTOP): it keeps its connections but answers
    /// nothing.
    pub fn pause(&self, name: &str) -> Result<(), Error> {
        let node = self.node(name)?;
        node.signal(Signal::SIGSTOP);
        wait_for_state(node, NodeState::Paused)
    }

    /// Thaws a paused node (SIGCONT).
    pub fn resume(&self, name: &str) -> Result<(), Error> {
        let node = self.node(name)?;
        node.signal(Signal::SIGCONT);
        wait_for_state(node, NodeState::Running)
    }

    /// Starts a stopped or killed node again and waits until it serves; a
    /// minion resumes replication by itself.
    pub async fn start(&self, name: &str) -> Result<(), Error> {
        let node = self.node(name)?;
        node.ensure_running(&self.root.join(".mariadb-template"))
            .await?;
        if let Role::Minion { master_port, .. } = node.spec.role {
            replication::ensure_replicating(node, master_port).await?;
        }
        Ok(())
    }

    /// Turns TLS on for every server: each gets `cert` and `key` (PEM, a
    /// certificate for 127.0.0.1 signed by `ca`) and is restarted with
    /// them. Plain connections still work; clients choose with
    /// `sslmode` / `ssl-mode`.
    pub async fn enable_tls(&self, cert: &str, key: &str, ca: &str) -> Result<(), Error> {
        for node in &self.nodes {
            node.install_tls(cert, key, ca)?;
            node.stop().await?;
            self.start(&node.spec.name).await?;
        }
        Ok(())
    }

    /// Records that `node` is now the master of `cluster` (after
    /// `mezzanine cluster promote` re-pointed replication): later starts
    /// give every node its new role, so the old master comes back as a
    /// minion of the new one.
    pub fn record_promotion(&mut self, cluster: &str, node: &str) -> Result<(), Error> {
        let spec = self
            .spec
            .clusters
            .iter_mut()
            .find(|c| c.name == cluster)
            .ok_or_else(|| Error::NoSuchNode(format!("{cluster} (cluster)")))?;
        if !spec.members().iter().any(|(name, _)| name == node) {
            return Err(Error::NoSuchNode(node.to_string()));
        }
        spec.master = Some(node.to_string());
        self.spec.write(&self.root.join(SPEC_FILE))?;
        let roles: Vec<NodeSpec> = self.spec.nodes();
        for n in &mut self.nodes {
            if let Some(s) = roles.iter().find(|s| s.name == n.spec.name) {
                n.spec.role = s.role.clone();
            }
        }
        Ok(())
    }

    /// The dev node listening on `port`.
    pub fn node_on_port(&self, port: u16) -> Option<&Node> {
        self.nodes.iter().find(|n| n.spec.port == port)
    }

    /// Waits until the minion has applied everything its master had
    /// written when the call began (by GTID). `stall` is how long the
    /// minion may apply nothing before this fails; a minion working
    /// through a backlog is waited for while it moves (up to ten stalls).
    pub async fn wait_caught_up(&self, minion: &str, stall: Duration) -> Result<(), Error> {
        let node = self.node(minion)?;
        let Role::Minion { master_port, .. } = node.spec.role else {
            return Err(Error::Server(format!("{minion} is not a minion")));
        };
        replication::wait_caught_up(node, master_port, stall).await
    }

    /// Waits until every minion has caught up with its master (`stall` as
    /// in [`DevCluster::wait_caught_up`]).
    pub async fn wait_all_caught_up(&self, stall: Duration) -> Result<(), Error> {
        for node in &self.nodes {
            if matches!(node.spec.role, Role::Minion { .. }) {
                self.wait_caught_up(&node.spec.name, stall).await?;
            }
        }
        Ok(())
    }

    /// Deletes every MariaDB node's binary logs but the one it is writing,
    /// once every minion has caught up (`stall` as in
    /// [`DevCluster::wait_all_caught_up`]); a minion that is down or
    /// behind is an error and nothing is deleted. The servers never expire
    /// their binary logs, and a few benchmark runs write tens of
    /// gigabytes of them; the benchmarks call this when they are done.
    pub async fn purge_binary_logs(&self, stall: Duration) -> Result<(), Error> {
        self.wait_all_caught_up(stall).await?;
        for node in &self.nodes {
            if node.spec.role == Role::Postgres || node.state() != NodeState::Running {
                continue;
            }
            let mut conn = node
                .mysql()
                .await
                .map_err(|e| Error::Server(format!("{}: {e}", node.spec.name)))?;
            let failed = |e: sqlx::Error| {
                Error::Server(format!("{}: purging binary logs: {e}", node.spec.name))
            };
            let Some(status) = sqlx::raw_sql("SHOW MASTER STATUS")
                .fetch_optional(&mut conn)
                .await
                .map_err(failed)?
            else {
                continue; // it keeps no binary log
            };
            let current: String = sqlx::Row::try_get(&status, "File").map_err(failed)?;
            // Every log before the one being written. A minion still
            // reading a log keeps it: MariaDB deletes none that a connected
            // replica reads, nor any after it.
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                "PURGE BINARY LOGS TO '{}'",
                current.replace('\\', "\\\\").replace('\'', "''")
            )))
            .execute(&mut conn)
            .await
            .map_err(failed)?;
        }
        Ok(())
    }

    /// Replication state of every minion.
    pub async fn minion_status(&self, name: &str) -> Result<MinionStatus, Error> {
        let node = self.node(name)?;
        let Role::Minion { master_port, .. } = node.spec.role else {
            return Err(Error::Server(format!("{name} is not a minion")));
        };
        replication::status(node, master_port).await
    }

    /// A Mezzanine config file's text for this cluster: the instance name
    /// and shard count given, shards split evenly over the clusters.
    pub fn config_toml(&self, instance: &str, shard_count: u32) -> String {
        let mut text = format!("[instance]\nname = \"{instance}\"\nshard_count = {shard_count}\n");
        let clusters = self.spec.clusters.len() as u32;
        for (i, cluster) in self.spec.clusters.iter().enumerate() {
            let i = i as u32;
            let first = shard_count * i / clusters;
            let last = shard_count * (i + 1) / clusters - 1;
            let minions: Vec<String> = cluster
                .minion_ports
                .iter()
                .map(|p| format!("\"mysql://root@127.0.0.1:{p}\""))
                .collect();
            text.push_str(&format!(
                "\n[[cluster]]\nname = \"{}\"\nmaster = \"mysql://root@127.0.0.1:{}\"\nminions = [{}]\nshards = \"{first}-{last}\"\n",
                cluster.name,
                cluster.master_port,
                minions.join(", ")
            ));
        }
        text
    }
}

/// Signals are delivered asynchronously: wait until the kernel shows the
/// node in the state asked for.
fn wait_for_state(node: &Node, state: NodeState) -> Result<(), Error> {
    for _ in 0..200 {
        if node.state() == state {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Err(Error::Server(format!(
        "{} did not become {state} (it is {})",
        node.spec.name,
        node.state()
    )))
}

impl Drop for DevCluster {
    fn drop(&mut self) {
        if let Teardown::Destroy(_) = self.teardown {
            for node in &self.nodes {
                node.kill();
            }
        }
    }
}
