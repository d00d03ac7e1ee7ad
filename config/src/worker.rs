//! `[worker]`: the HTTP workers that serve the cell API (`mezzanine
//! worker`), and who may call them.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;

use crate::validate::Problem;

/// `[worker]`: how a worker listens and whom it answers.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Worker {
    /// `worker.listen`: the address to listen on. Default
    /// `127.0.0.1:9500`; port 0 picks a free one (the worker prints it).
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    /// `worker.max_in_flight`: the most requests one worker handles at
    /// once; the next gets 503 with `Retry-After`, so a client tries
    /// another worker instead of queueing. 1–100000. Default 256.
    #[serde(default = "default_max_in_flight")]
    pub max_in_flight: usize,
    /// `worker.request_timeout_ms`: the longest one request may take; past
    /// it the answer is 503 with `Retry-After` (a put that timed out may
    /// have landed, and is safe to send again). 10–600000. Default 10000.
    #[serde(default = "default_request_timeout_ms")]
    pub request_timeout_ms: u64,
    /// `worker.header_read_timeout_ms`: how long a connection may take to
    /// send a request's headers, so slow clients (slowloris) cannot hold
    /// connections open. hyper starts the wait when the previous answer
    /// is sent, so this is also how long an idle keep-alive connection
    /// stays open. 100–600000. Default 5000.
    #[serde(default = "default_header_read_timeout_ms")]
    pub header_read_timeout_ms: u64,
    /// `worker.max_header_bytes`: the most bytes of request headers
    /// accepted; more gets 431. 1024–1048576. Default 16384.
    #[serde(default = "default_max_header_bytes")]
    pub max_header_bytes: usize,
    /// `worker.tls_cert`: a PEM certificate chain; with `tls_key`, the
    /// worker serves HTTPS only. Relative paths are read from the working
    /// directory.
    pub tls_cert: Option<PathBuf>,
    /// `worker.tls_key`: the PEM private key of `tls_cert`.
    pub tls_key: Option<PathBuf>,
    /// `[[worker.tokens]]`: the bearer tokens requests may carry. A worker
    /// with none refuses to start unless given `--insecure-no-auth`.
    #[serde(default)]
    pub tokens: Vec<Token>,
}

/// `[[worker.tokens]]`: one bearer token. The secret itself is never in
/// the file: it is read from an environment variable when the worker
/// starts.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Token {
    /// `name`: who holds it; metrics and logs name the token by this,
    /// never by its secret.
    pub name: String,
    /// `scope`: what it may do. `read` reads cells and queries indexes;
    /// `write` also puts cells; `admin` also reads shard change logs and
    /// `/metrics`.
    pub scope: Scope,
    /// `secret_env`: the environment variable holding the secret (at
    /// least 16 bytes).
    pub secret_env: String,
}

/// What a token may do; each scope includes the ones before it.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// Cell reads and index queries.
    Read,
    /// Reads, and cell writes.
    Write,
    /// Everything: also shard change logs and `/metrics`.
    Admin,
}

impl Scope {
    /// `read`, `write` or `admin`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Write => "write",
            Scope::Admin => "admin",
        }
    }
}

fn default_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 9500))
}

fn default_max_in_flight() -> usize {
    256
}

fn default_request_timeout_ms() -> u64 {
    10_000
}

fn default_header_read_timeout_ms() -> u64 {
    5_000
}

fn default_max_header_bytes() -> usize {
    16 * 1024
}

impl Default for Worker {
    fn default() -> Self {
        Worker {
            listen: default_listen(),
            max_in_flight: default_max_in_flight(),
            request_timeout_ms: default_request_timeout_ms(),
            header_read_timeout_ms: default_header_read_timeout_ms(),
            max_header_bytes: default_max_header_bytes(),
            tls_cert: None,
            tls_key: None,
            tokens: Vec::new(),
        }
    }
}

fn problem(key: impl Into<String>, message: impl Into<String>) -> Problem {
    Problem {
        key: key.into(),
        message: message.into(),
    }
}

fn within(key: &str, value: u64, low: u64, high: u64) -> Result<(), Problem> {
    if value < low || value > high {
        return Err(problem(
            key,
            format!("must be between {low} and {high}, got {value}"),
        ));
    }
    Ok(())
}

/// Checks `[worker]`.
pub(crate) fn validate(worker: &Worker) -> Result<(), Problem> {
    within(
        "worker.max_in_flight",
        worker.max_in_flight as u64,
        1,
        100_000,
    )?;
    within(
        "worker.request_timeout_ms",
        worker.request_timeout_ms,
        10,
        600_000,
    )?;
    within(
        "worker.header_read_timeout_ms",
        worker.header_read_timeout_ms,
        100,
        600_000,
    )?;
    within(
        "worker.max_header_bytes",
        worker.max_header_bytes as u64,
        1024,
        1024 * 1024,
    )?;
    match (&worker.tls_cert, &worker.tls_key) {
        (Some(_), None) => {
            return Err(problem("worker.tls_key", "tls_cert is set without tls_key"))
        }
        (None, Some(_)) => {
            return Err(problem(
                "worker.tls_cert",
                "tls_key is set without tls_cert",
            ))
        }
        _ => {}
    }
    for (i, token) in worker.tokens.iter().enumerate() {
        let valid_name = !token.name.is_empty()
            && token.name.len() <= 64
            && token
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !valid_name {
            return Err(problem(
                format!("worker.tokens[{i}].name"),
                format!(
                    "{:?} is not a valid token name: use 1-64 characters of [A-Za-z0-9_-]",
                    token.name
                ),
            ));
        }
        if worker.tokens[..i].iter().any(|t| t.name == token.name) {
            return Err(problem(
                format!("worker.tokens[{i}].name"),
                format!("token {:?} is declared twice", token.name),
            ));
        }
        let valid_env = !token.secret_env.is_empty()
            && !token.secret_env.starts_with(|c: char| c.is_ascii_digit())
            && token
                .secret_env
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid_env {
            return Err(problem(
                format!("worker.tokens[{i}].secret_env"),
                format!(
                    "{:?} is not an environment variable name: use [A-Za-z0-9_], not starting with a digit",
                    token.secret_env
                ),
            ));
        }
    }
    Ok(())
}
