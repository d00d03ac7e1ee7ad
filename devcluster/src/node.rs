//! One server of a dev cluster: initialising its data folder, starting it
//! detached, finding it again, stopping, killing and pausing it.

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

/// How long a server may take to accept its first query.
const START_TIMEOUT: Duration = Duration::from_secs(90);
/// How long a clean shutdown may take before it becomes a kill.
const STOP_TIMEOUT: Duration = Duration::from_secs(60);

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
            let process = Process::spawn(self.command()?, &self.log)?;
            *self.process.lock().unwrap_or_else(|p| p.into_inner()) = Some(process);
        }
        self.wait_ready().await
    }

    fn initialize(&self, mariadb_template: &Path) -> Result<(), Error> {
        match self.spec.role {
            Role::Postgres => self.initialize_postgres(),
            _ => copy_dir(mariadb_template, &self.dir),
        }
    }

    /// The real path of the data folder (PostgreSQL's may be a symlink to
    /// a folder its user can reach, see [`Node::initialize_postgres`]).
    fn data_dir(&self) -> PathBuf {
        self.dir.canonicalize().unwrap_or_else(|_| self.dir.clone())
    }

    fn initialize_postgres(&self) -> Result<(), Error> {
        // As root, PostgreSQL runs as the postgres user, who may not be
        // able to pass through the folders above ours (a checkout under
        // /root, say). Then its data goes to a folder of its own under the
        // temporary directory, linked from ours.
        if running_as_root() && !traversable_by_others(self.dir.parent().unwrap_or(&self.dir)) {
            let elsewhere = std::env::temp_dir().join(format!(
                "mezzanine-postgres-{:016x}",
                fnv1a64(self.dir.display().to_string().as_bytes())
            ));
            let _ = std::fs::remove_dir_all(&elsewhere);
            std::fs::create_dir_all(&elsewhere)
                .map_err(|e| Error::io(format!("creating {}", elsewhere.display()), e))?;
            let _ = std::fs::remove_file(&self.dir);
            std::os::unix::fs::symlink(&elsewhere, &self.dir)
                .map_err(|e| Error::io(format!("linking {}", self.dir.display()), e))?;
        }
        let data = self.data_dir();
        std::fs::create_dir_all(&data)
            .map_err(|e| Error::io(format!("creating {}", data.display()), e))?;
        let mut command = Command::new(&self.binaries.initdb);
        command.args(["-D"]).arg(&data).args([
            "-U",
            "postgres",
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C",
            "--no-sync",
        ]);
        as_postgres_user(&mut command, &data)?;
        let output = command
            .output()
            .map_err(|e| Error::io("running initdb", e))?;
        if !output.status.success() {
            return Err(Error::Server(format!(
                "initdb failed for {}: {}{}",
                data.display(),
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            )));
        }
        Ok(())
    }

    fn command(&self) -> Result<Command, Error> {
        let port = self.spec.port.to_string();
        match &self.spec.role {
            Role::Postgres => {
                let data = self.data_dir();
                let mut command = Command::new(&self.binaries.postgres);
                command.arg("-D").arg(&data).args([
                    "-p",
                    &port,
                    "-c",
                    "listen_addresses=127.0.0.1",
                    "-c",
                    "unix_socket_directories=",
                    "-c",
                    "max_connections=300",
                    "-c",
                    "shared_buffers=256MB",
                    // Capture by logical decoding (`capture.method =
                    // "logical"`) needs it; one slot per database.
                    "-c",
                    "wal_level=logical",
                    "-c",
                    "max_replication_slots=64",
                    "-c",
                    "max_wal_senders=16",
                ]);
                // The live inventory of the app's SQL (`query audit
                // --from-pg-stat-statements`) and the primary gate's count
                // of direct writes. Preloaded only where the server has
                // the module: a missing library would stop it starting.
                if self.binaries.has_pg_module("pg_stat_statements") {
                    command.args([
                        "-c",
                        "shared_preload_libraries=pg_stat_statements",
                        "-c",
                        "pg_stat_statements.track=top",
                    ]);
                } else {
                    tracing::warn!(
                        "this PostgreSQL has no pg_stat_statements module: the dev cluster starts without it"
                    );
                }
                if self.has_tls() {
                    let tls = self.tls_dir();
                    command
                        .args(["-c", "ssl=on", "-c"])
                        .arg(format!(
                            "ssl_cert_file={}",
                            tls.join("server.crt").display()
                        ))
                        .arg("-c")
                        .arg(format!("ssl_key_file={}", tls.join("server.key").display()))
                        .arg("-c")
                        .arg(format!("ssl_ca_file={}", tls.join("ca.crt").display()));
                }
                as_postgres_user(&mut command, &data)?;
                Ok(command)
            }
            role => {
                let mut command = Command::new(&self.binaries.mariadbd);
                let dir = self.dir.display().to_string();
                // Unix socket paths are limited to 107 bytes; TCP is what
                // everything uses, the socket only has to exist somewhere.
                let socket = if dir.len() < 80 {
                    format!("{dir}/mariadbd.sock")
                } else {
                    format!("/tmp/mezzanine-mariadbd-{port}.sock")
                };
                let tmp = format!("{dir}.tmp");
                std::fs::create_dir_all(&tmp)
                    .map_err(|e| Error::io(format!("creating {tmp}"), e))?;
                let files = self.files_dir();
                std::fs::create_dir_all(&files)
                    .map_err(|e| Error::io(format!("creating {}", files.display()), e))?;
                command.args([
                    "--no-defaults".to_string(),
                    format!("--datadir={dir}"),
                    format!("--tmpdir={tmp}"),
                    format!("--secure-file-priv={}", files.display()),
                    format!("--port={port}"),
                    "--bind-address=127.0.0.1".into(),
                    format!("--socket={socket}"),
                    format!("--pid-file={dir}/mariadbd.pid"),
                    format!("--log-error={}", self.log.display()),
                    "--user=root".into(),
                    format!("--server-id={}", self.spec.server_id),
                    format!("--log-bin={dir}/binlog"),
                    "--binlog-format=ROW".into(),
                    "--log-slave-updates".into(),
                    "--skip-name-resolve".into(),
                    "--max-connections=1000".into(),
                    "--innodb-buffer-pool-size=256M".into(),
                    "--character-set-server=utf8mb4".into(),
                    "--collation-server=utf8mb4_bin".into(),
                    // Semi-synchronous replication: a master's commit
                    // returns once a minion has received it (AFTER_SYNC: no
                    // other session sees it before), so an acknowledged
                    // write is on two hosts. The timeout is a day, far
                    // longer than any request: with no minion answering,
                    // writes wait and time out rather than fall back to
                    // asynchronous. Every node acknowledges as a minion
                    // and has the master's settings ready (`cluster
                    // promote` turns them on), but only the master waits:
                    // a minion that did would wait for minions of its own
                    // while applying, and never get an answer.
                    "--rpl-semi-sync-slave-enabled=1".into(),
                    "--rpl-semi-sync-master-wait-point=AFTER_SYNC".into(),
                    "--rpl-semi-sync-master-timeout=86400000".into(),
                ]);
                if matches!(role, Role::Minion { .. }) {
                    command.args(["--read-only=1", "--slave-parallel-threads=4"]);
                } else {
                    command.arg("--rpl-semi-sync-master-enabled=1");
                }
                if self.has_tls() {
                    let tls = self.tls_dir();
                    command.args([
                        format!("--ssl-cert={}", tls.join("server.crt").display()),
                        format!("--ssl-key={}", tls.join("server.key").display()),
                        format!("--ssl-ca={}", tls.join("ca.crt").display()),
                    ]);
                }
                Ok(command)
            }
        }
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
    pub async fn ping(&self) -> Result<(), sqlx::Error> {
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

/// Runs `mariadb-install-db` once into `template`; nodes copy it.
pub(crate) fn install_mariadb_template(binaries: &Binaries, template: &Path) -> Result<(), Error> {
    let staging = template.with_extension("tmp");
    let _ = std::fs::remove_dir_all(&staging);
    // A private temporary folder: servers name their temporary tables by
    // pid, and a pid reused after a kill -9 must not meet a stale file.
    let tmp = template.with_extension("tmpdir");
    std::fs::create_dir_all(&tmp)
        .map_err(|e| Error::io(format!("creating {}", tmp.display()), e))?;
    let output = Command::new(&binaries.mariadb_install_db)
        .env("TMPDIR", &tmp)
        .arg("--no-defaults")
        .arg(format!("--datadir={}", staging.display()))
        .args([
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
            "--user=root",
        ])
        .output()
        .map_err(|e| Error::io("running mariadb-install-db", e))?;
    if !output.status.success() {
        return Err(Error::Server(format!(
            "mariadb-install-db failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )));
    }
    std::fs::rename(&staging, template).map_err(|e| Error::io("moving the MariaDB template", e))
}

fn copy_dir(from: &Path, to: &Path) -> Result<(), Error> {
    let status = Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .map_err(|e| Error::io("copying the MariaDB template", e))?;
    if !status.success() {
        return Err(Error::Server(format!(
            "copying {} to {} failed",
            from.display(),
            to.display()
        )));
    }
    Ok(())
}

fn running_as_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// Whether any user may pass through `dir` and every folder above it.
fn traversable_by_others(dir: &Path) -> bool {
    dir.ancestors()
        .all(|d| std::fs::metadata(d).is_ok_and(|m| m.permissions().mode() & 0o001 != 0))
}

fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// PostgreSQL refuses to run as root: when we are root, run it as the
/// `postgres` user, which must own its data folder.
fn as_postgres_user(command: &mut Command, data: &Path) -> Result<(), Error> {
    if !running_as_root() {
        return Ok(());
    }
    let (uid, gid) = postgres_user()?;
    chown_tree(data, uid, gid)?;
    command.uid(uid).gid(gid);
    Ok(())
}

fn postgres_user() -> Result<(u32, u32), Error> {
    match nix::unistd::User::from_name("postgres") {
        Ok(Some(user)) => Ok((user.uid.as_raw(), user.gid.as_raw())),
        Ok(None) => Err(Error::MissingBinaries(
            "the postgres system user does not exist (PostgreSQL refuses to run as root): apt-get install -y postgresql-15".into(),
        )),
        Err(e) => Err(Error::Server(format!(
            "reading the postgres user from the password database: {e}"
        ))),
    }
}

fn chown_tree(path: &Path, uid: u32, gid: u32) -> Result<(), Error> {
    std::os::unix::fs::chown(path, Some(uid), Some(gid))
        .map_err(|e| Error::io(format!("giving {} to postgres", path.display()), e))?;
    if path.is_dir() {
        for entry in std::fs::read_dir(path)
            .map_err(|e| Error::io(format!("reading {}", path.display()), e))?
        {
            let entry = entry.map_err(|e| Error::io("reading a folder entry", e))?;
            if !entry.file_type().is_ok_and(|t| t.is_symlink()) {
                chown_tree(&entry.path(), uid, gid)?;
            }
        }
    }
    Ok(())
}

/// Lets other users (PostgreSQL's) pass through `dir` and its ancestors'
/// permission checks where we own them: a private temporary folder is
/// created 0700.
pub(crate) fn make_traversable(dir: &Path) -> Result<(), Error> {
    let meta =
        std::fs::metadata(dir).map_err(|e| Error::io(format!("reading {}", dir.display()), e))?;
    let mut perms = meta.permissions();
    perms.set_mode(perms.mode() | 0o755);
    std::fs::set_permissions(dir, perms)
        .map_err(|e| Error::io(format!("opening up {}", dir.display()), e))
}
