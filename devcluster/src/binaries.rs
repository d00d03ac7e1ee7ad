//! Finding the server programs, and saying which Debian package to install
//! when one is missing.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use crate::Error;

/// The programs a dev cluster runs.
#[derive(Clone, Debug)]
pub struct Binaries {
    /// `mariadbd` (or `mysqld`).
    pub mariadbd: PathBuf,
    /// `mariadb-install-db` (or `mysql_install_db`).
    pub mariadb_install_db: PathBuf,
    /// PostgreSQL's `initdb`.
    pub initdb: PathBuf,
    /// PostgreSQL's `postgres`.
    pub postgres: PathBuf,
    /// PostgreSQL's `psql`, the client the demo and the tests write with
    /// when a writer must not be Mezzanine (it ships with the server).
    pub psql: PathBuf,
    /// PostgreSQL's `pgbench` (it ships with the server): the proxy's
    /// tests and benchmark.
    pub pgbench: PathBuf,
}

impl Binaries {
    /// Whether the PostgreSQL server has the loadable module `name`
    /// (`lib/NAME.so` beside its `bin/`, as Debian lays it out, or
    /// `lib/postgresql/NAME.so` under a prefix install).
    pub fn has_pg_module(&self, name: &str) -> bool {
        let Some(prefix) = self.postgres.parent().and_then(|bin| bin.parent()) else {
            return false;
        };
        let file = format!("{name}.so");
        [
            prefix.join("lib").join(&file),
            prefix.join("lib/postgresql").join(&file),
        ]
        .iter()
        .any(|p| p.exists())
    }

    /// Looks for every program; the error names each missing one and the
    /// package that provides it.
    pub fn find() -> Result<Binaries, Error> {
        Binaries::find_with(|name| std::env::var_os(name))
    }

    /// [`Binaries::find`] with the environment read through `env`.
    fn find_with(env: impl Fn(&str) -> Option<OsString>) -> Result<Binaries, Error> {
        let mut missing = Vec::new();
        let path = env("PATH").unwrap_or_default();
        let mariadbd = find_in_path(
            &path,
            &["mariadbd", "mysqld"],
            &["/usr/sbin", "/usr/libexec"],
        );
        let install_db = find_in_path(
            &path,
            &["mariadb-install-db", "mysql_install_db"],
            &["/usr/bin", "/usr/scripts"],
        );
        if mariadbd.is_none() || install_db.is_none() {
            missing.push(("mariadbd, mariadb-install-db", "mariadb-server"));
        }
        let pg_bin = postgres_bin_dir(env("MEZZANINE_PG_BIN"));
        if pg_bin.is_none() {
            missing.push((
                "postgres, initdb (PostgreSQL 15)",
                "postgresql-15 (or postgresql)",
            ));
        }
        match (mariadbd, install_db, pg_bin) {
            (Some(mariadbd), Some(mariadb_install_db), Some(pg)) => Ok(Binaries {
                mariadbd,
                mariadb_install_db,
                initdb: pg.join("initdb"),
                postgres: pg.join("postgres"),
                psql: pg.join("psql"),
                pgbench: pg.join("pgbench"),
            }),
            _ => Err(Error::MissingBinaries(
                missing
                    .iter()
                    .map(|(what, package)| format!("{what}: apt-get install -y {package}"))
                    .collect::<Vec<_>>()
                    .join("; "),
            )),
        }
    }
}

fn find_in_path(path: &OsStr, names: &[&str], extra_dirs: &[&str]) -> Option<PathBuf> {
    let dirs: Vec<PathBuf> = std::env::split_paths(path)
        .chain(extra_dirs.iter().map(PathBuf::from))
        .collect();
    names
        .iter()
        .flat_map(|name| dirs.iter().map(move |d| d.join(name)))
        .find(|candidate| is_executable(candidate))
}

/// PostgreSQL's server programs live outside PATH on Debian, one folder per
/// major version. 15 is preferred; any other installed version is used if
/// 15 is absent. `MEZZANINE_PG_BIN` overrides the search.
fn postgres_bin_dir(overridden: Option<OsString>) -> Option<PathBuf> {
    if let Some(dir) = overridden {
        let dir = PathBuf::from(dir);
        return is_executable(&dir.join("postgres")).then_some(dir);
    }
    let preferred = Path::new("/usr/lib/postgresql/15/bin");
    if is_executable(&preferred.join("postgres")) {
        return Some(preferred.to_path_buf());
    }
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|bin| is_executable(&bin.join("postgres")))
        .collect();
    versions.sort();
    versions.pop()
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_server_names_the_package_to_install() {
        let empty = tempfile::tempdir().unwrap();
        let result = Binaries::find_with(|name| match name {
            "MEZZANINE_PG_BIN" => Some(empty.path().into()),
            other => std::env::var_os(other),
        });
        match result {
            Err(Error::MissingBinaries(text)) => {
                assert!(text.contains("apt-get install -y postgresql"), "{text}");
            }
            other => panic!("expected a missing-binaries error, got {other:?}"),
        }
    }

    #[test]
    fn a_module_is_found_beside_the_server_or_not_at_all() {
        let prefix = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(prefix.path().join("bin")).unwrap();
        std::fs::create_dir_all(prefix.path().join("lib")).unwrap();
        std::fs::write(prefix.path().join("lib/pg_stat_statements.so"), b"").unwrap();
        let bin = |name: &str| prefix.path().join("bin").join(name);
        let binaries = Binaries {
            mariadbd: bin("mariadbd"),
            mariadb_install_db: bin("mariadb-install-db"),
            initdb: bin("initdb"),
            postgres: bin("postgres"),
            psql: bin("psql"),
            pgbench: bin("pgbench"),
        };
        assert!(binaries.has_pg_module("pg_stat_statements"));
        assert!(!binaries.has_pg_module("no_such_module"));
    }
}
