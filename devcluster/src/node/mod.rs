//! One server of a dev cluster: initialising its data folder, starting it
//! detached, finding it again, stopping, killing and pausing it.
//!
//! Its rooms: `init` (the data folder and its owner), `command` (the
//! command line per role) and `port` (whether its port can be bound);
//! this file holds the node and its lifecycle.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::str::FromStr;
use std::sync::Mutex;
use std::time::Duration;

use sqlx::ConnectOptions;

use crate::binaries::Binaries;
use crate::process::{pid_alive, read_pid_file, Process, Signal};
use crate::spec::{NodeSpec, Role};
use crate::Error;

mod command;
mod init;
mod port;

use init::{as_postgres_user, chown_tree, postgres_user, running_as_root};
pub(crate) use init::{install_mariadb_template, make_traversable};

/// How long a server may take to accept its first query.
const START_TIMEOUT: Duration = Duration::from_secs(90);
/// How long a clean shutdown may take before it becomes a kill.
const STOP_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a readiness ping may take.
const PING_TIMEOUT: Duration = Duration::from_secs(5);

/// Whether a node is serving.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeState {
    /// Its process runs.
    Running,
    /// Its process is frozen by SIGSTOP.
    Paused,
    /// No process.
    Stopped,
}

impl std::fmt::Display for NodeState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            NodeState::Running => "running",
            NodeState::Paused => "paused",
            NodeState::Stopped => "stopped",
        })
    }
}

/// One server.
pub struct Node {
    /// Name, role, port.
    pub spec: NodeSpec,
    /// Its data folder.
    pub dir: PathBuf,
    /// Where its output goes.
    pub log: PathBuf,
    pub(crate) binaries: Binaries,
    process: Mutex<Option<Process>>,
}

impl Node {
    pub(crate) fn new(spec: NodeSpec, root: &Path, binaries: Binaries) -> Node {
        Node {
            dir: root.join(&spec.name),
            log: root.join(format!("{}.log", spec.name)),
            spec,
            binaries,
            process: Mutex::new(None),
        }
    }

    /// `mysql://root@127.0.0.1:PORT` (MariaDB) or
    /// `postgres://postgres@127.0.0.1:PORT/postgres`.
    pub fn url(&self) -> String {
        match self.spec.role {
            Role::Postgres => format!("postgres://postgres@127.0.0.1:{}/postgres", self.spec.port),
            _ => format!("mysql://root@127.0.0.1:{}", self.spec.port),
        }
    }

    /// Where the server's TLS certificate, key and CA are, when it has
    /// them: `server.crt`, `server.key`, `ca.crt` (see
    /// [`crate::DevCluster::enable_tls`]). Inside the data folder, which
    /// PostgreSQL's user can reach.
    pub fn tls_dir(&self) -> PathBuf {
        self.data_dir().join("tls")
    }

    /// Whether the server starts with TLS.
    pub fn has_tls(&self) -> bool {
        self.tls_dir().join("server.crt").is_file()
    }

    /// Gives the server a certificate (PEM) signed by `ca`, used from its
    /// next start on.
    pub(crate) fn install_tls(&self, cert: &str, key: &str, ca: &str) -> Result<(), Error> {
        let dir = self.tls_dir();
        std::fs::create_dir_all(&dir)
            .map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
        for (name, text) in [("server.crt", cert), ("server.key", key), ("ca.crt", ca)] {
            let path = dir.join(name);
            std::fs::write(&path, text)
                .map_err(|e| Error::io(format!("writing {}", path.display()), e))?;
            // PostgreSQL refuses a key others can read.
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
                .map_err(|e| Error::io(format!("protecting {}", path.display()), e))?;
        }
        if self.spec.role == Role::Postgres && running_as_root() {
            let (uid, gid) = postgres_user()?;
            chown_tree(&dir, uid, gid)?;
        }
        Ok(())
    }

    fn pid_file(&self) -> PathBuf {
        match self.spec.role {
            Role::Postgres => self.dir.join("postmaster.pid"),
            _ => self.dir.join("mariadbd.pid"),
        }
    }

    /// The folder MariaDB may read `LOAD DATA INFILE` files from (its
    /// `secure_file_priv`), shared by the cluster's nodes.
    pub fn files_dir(&self) -> PathBuf {
        self.dir
            .parent()
            .map_or_else(|| PathBuf::from("files"), |root| root.join("files"))
    }

    pub(crate) fn initialized(&self) -> bool {
        match self.spec.role {
            Role::Postgres => self.dir.join("PG_VERSION").exists(),
            _ => self.dir.join("mysql").exists(),
        }
    }

    /// The pid of the running server, if any (ours or an earlier
    /// command's).
    pub fn pid(&self) -> Option<i32> {
        let mut guard = self.process.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = guard.as_ref() {
            if p.alive() {
                return Some(p.pid);
            }
            *guard = None;
        }
        let pid = read_pid_file(&self.pid_file())?;
        pid_alive(pid).then_some(pid)
    }

    /// Running, paused or stopped.
    pub fn state(&self) -> NodeState {
        match self.pid() {
            None => NodeState::Stopped,
            Some(pid) if Process::adopt(pid).paused() => NodeState::Paused,
            Some(_) => NodeState::Running,
        }
    }

    /// Sends a signal to the server process, if it runs.
    pub fn signal(&self, signal: Signal) {
        if let Some(pid) = self.pid() {
            Process::adopt(pid).signal(signal);
        }
    }

    /// kill -9, and reap it if it is ours.
    pub fn kill(&self) {
        let Some(pid) = self.pid() else { return };
        // PostgreSQL's backends outlive a killed postmaster for a moment,
        // holding its shared memory, and a restart meanwhile fails
        // ("pre-existing shared memory block is still in use"): the whole
        // server is killed, and waited for, not only its first process.
        let children = crate::process::children_of(pid);
        let process = Process::adopt(pid);
        process.signal(Signal::SIGKILL);
        for &child in &children {
            Process::adopt(child).signal(Signal::SIGKILL);
        }
        for _ in 0..500 {
            if !children.iter().any(|&c| pid_alive(c)) {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let guard = self.process.lock().unwrap_or_else(|p| p.into_inner());
        // Our own child must be reaped (`alive` does) or its pid keeps
        // looking alive; anyone else's is reaped by init. Up to 5 s.
        let gone = || {
            guard
                .as_ref()
                .map_or_else(|| !pid_alive(pid), |ours| !ours.alive())
        };
        for _ in 0..500 {
            if gone() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Stops the server cleanly, or kills it if it will not stop.
    pub async fn stop(&self) -> Result<(), Error> {
        let Some(pid) = self.pid() else { return Ok(()) };
        let process = Process::adopt(pid);
        process.signal(Signal::SIGCONT);
        // SIGINT is PostgreSQL's fast shutdown; SIGTERM MariaDB's normal one.
        process.signal(match self.spec.role {
            Role::Postgres => Signal::SIGINT,
            _ => Signal::SIGTERM,
        });
        let ours = self
            .process
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        let waiter = ours.unwrap_or(process);
        if !waiter.wait_exit(STOP_TIMEOUT).await {
            waiter.signal(Signal::SIGKILL);
            waiter.wait_exit(Duration::from_secs(10)).await;
        }
        Ok(())
    }

    /// Starts the server unless it runs, initialising its data folder
    /// first if needed, and waits until it answers queries.
    pub(crate) async fn ensure_running(&self, mariadb_template: &Path) -> Result<(), Error> {
        if self.pid().is_none() {
            if !self.initialized() {
                self.initialize(mariadb_template)?;
            }
            port::wait_free(&self.spec.name, self.spec.port).await?;
            let process = Process::spawn(self.command()?, &self.log)?;
            *self.process.lock().unwrap_or_else(|p| p.into_inner()) = Some(process);
        }
        self.wait_ready().await
    }

    async fn wait_ready(&self) -> Result<(), Error> {
        let deadline = tokio::time::Instant::now() + START_TIMEOUT;
        loop {
            if self.pid().is_none() {
                return Err(self.failed_to_start("the process exited"));
            }
            let last_error = match self.ping().await {
                Ok(()) => return Ok(()),
                Err(e) => e.to_string(),
            };
            if tokio::time::Instant::now() >= deadline {
                return Err(self
                    .failed_to_start(&format!("not ready after {START_TIMEOUT:?}: {last_error}")));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn failed_to_start(&self, why: &str) -> Error {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(15).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        Error::Server(format!(
            "{} ({}, port {}) did not start: {why}\n--- last lines of {} ---\n{}",
            self.spec.name,
            self.spec.role,
            self.spec.port,
            self.log.display(),
            tail.join("\n")
        ))
    }

    /// Runs `SELECT 1` on the node.
    ///
    /// Bounded by `PING_TIMEOUT` (5 s): a connection that never gets a
    /// greeting (a socket that connected to itself because a client held
    /// the port, a frozen server) fails the ping instead of hanging it.
    pub async fn ping(&self) -> Result<(), sqlx::Error> {
        match tokio::time::timeout(PING_TIMEOUT, self.ping_unbounded()).await {
            Ok(result) => result,
            Err(_) => Err(sqlx::Error::Io(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("{} did not answer within {PING_TIMEOUT:?}", self.spec.name),
            ))),
        }
    }

    async fn ping_unbounded(&self) -> Result<(), sqlx::Error> {
        match self.spec.role {
            Role::Postgres => {
                let mut conn = sqlx::postgres::PgConnectOptions::from_str(&self.url())?
                    .connect()
                    .await?;
                sqlx::query("SELECT 1").execute(&mut conn).await?;
            }
            _ => {
                let mut conn = self.mysql().await?;
                sqlx::query("SELECT 1").execute(&mut conn).await?;
            }
        }
        Ok(())
    }

    /// A fresh connection to a MariaDB node.
    pub async fn mysql(&self) -> Result<sqlx::MySqlConnection, sqlx::Error> {
        sqlx::mysql::MySqlConnectOptions::from_str(&self.url())?
            .connect()
            .await
    }
}

fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}
