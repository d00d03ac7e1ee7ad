//! A server's data folder: PostgreSQL's initdb, MariaDB's from a shared
//! template, and, when running as root, handing it to the postgres user.

use super::*;

impl Node {
    pub(super) fn initialize(&self, mariadb_template: &Path) -> Result<(), Error> {
        match self.spec.role {
            Role::Postgres => self.initialize_postgres(),
            _ => copy_dir(mariadb_template, &self.dir),
        }
    }

    /// The real path of the data folder (PostgreSQL's may be a symlink to
    /// a folder its user can reach, see [`Node::initialize_postgres`]).
    pub(super) fn data_dir(&self) -> PathBuf {
        self.dir.canonicalize().unwrap_or_else(|_| self.dir.clone())
    }

    pub(super) fn initialize_postgres(&self) -> Result<(), Error> {
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

pub(super) fn copy_dir(from: &Path, to: &Path) -> Result<(), Error> {
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

pub(super) fn running_as_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// Whether any user may pass through `dir` and every folder above it.
pub(super) fn traversable_by_others(dir: &Path) -> bool {
    dir.ancestors()
        .all(|d| std::fs::metadata(d).is_ok_and(|m| m.permissions().mode() & 0o001 != 0))
}

/// PostgreSQL refuses to run as root: when we are root, run it as the
/// `postgres` user, which must own its data folder.
pub(super) fn as_postgres_user(command: &mut Command, data: &Path) -> Result<(), Error> {
    if !running_as_root() {
        return Ok(());
    }
    let (uid, gid) = postgres_user()?;
    chown_tree(data, uid, gid)?;
    command.uid(uid).gid(gid);
    Ok(())
}

pub(super) fn postgres_user() -> Result<(u32, u32), Error> {
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

pub(super) fn chown_tree(path: &Path, uid: u32, gid: u32) -> Result<(), Error> {
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
