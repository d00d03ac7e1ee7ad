//! The command line each server role starts with: ports, sockets,
//! replication, TLS and the settings a dev cluster needs.

use super::*;

impl Node {
    pub(super) fn command(&self) -> Result<Command, Error> {
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
                // Its entries are per database: with the default 5000, a
                // dev cluster holding many databases (the test suite
                // makes one per test) evicts a statement called once
                // before anyone reads it.
                if self.binaries.has_pg_module("pg_stat_statements") {
                    command.args([
                        "-c",
                        "shared_preload_libraries=pg_stat_statements",
                        "-c",
                        "pg_stat_statements.track=top",
                        "-c",
                        "pg_stat_statements.max=25000",
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
                match role {
                    Role::Minion { .. } => {
                        command.args(["--read-only=1", "--slave-parallel-threads=4"]);
                    }
                    // A master without minions (a one-server cluster)
                    // would wait a day for an acknowledgement on every
                    // commit.
                    Role::Master { minions: 0, .. } => {}
                    _ => {
                        command.arg("--rpl-semi-sync-master-enabled=1");
                    }
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
}
