//! `[proxy]`: the PostgreSQL wire-protocol proxy apps connect to instead
//! of PostgreSQL.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;

use crate::validate::{in_range, Problem};

/// `[proxy]`: how the proxy listens and how much it holds open.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Proxy {
    /// `proxy.listen`: the address apps connect to. Default
    /// `127.0.0.1:6432`; port 0 picks a free one (the proxy prints it).
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    /// `proxy.max_clients`: the most app connections served at once; the
    /// next is refused with SQLSTATE `53300` (too many connections), as
    /// PostgreSQL refuses past `max_connections`. 1–100000. Default 200.
    #[serde(default = "default_max_clients")]
    pub max_clients: usize,
    /// `proxy.pool_size`: the most PostgreSQL connections the proxy opens
    /// at once. Each app connection holds one for its whole session
    /// (session pooling: prepared statements, `SET`, `LISTEN` and
    /// transactions stay where the app left them); a client past the
    /// limit waits up to `connect_timeout_ms` for one to be released.
    /// 1–100000. Default 100.
    #[serde(default = "default_pool_size")]
    pub pool_size: usize,
    /// `proxy.idle_timeout_ms`: an app connection sending nothing for this
    /// long outside a transaction is closed with SQLSTATE `57P05`, as
    /// PostgreSQL's `idle_session_timeout` does. 0 keeps idle sessions
    /// open. 0–86400000. Default 0.
    #[serde(default)]
    pub idle_timeout_ms: u64,
    /// `proxy.connect_timeout_ms`: how long a client waits for a
    /// PostgreSQL connection (the pool, then the connect). 100–600000.
    /// Default 10000.
    #[serde(default = "default_connect_timeout_ms")]
    pub connect_timeout_ms: u64,
    /// `proxy.max_message_bytes`: the largest protocol message accepted
    /// from an app; a larger one is answered with SQLSTATE `54000`
    /// (program limit exceeded) and the connection is closed, since the
    /// rest of the stream cannot be read safely. 1024–1073741823.
    /// Default 67108864 (64 MiB).
    #[serde(default = "default_max_message_bytes")]
    pub max_message_bytes: usize,
    /// `proxy.threads`: the OS threads relaying sessions, each running its
    /// sessions on one single-threaded event loop (a session stays on one
    /// thread). One suits a machine whose cores PostgreSQL keeps busy;
    /// add threads when the proxy's own thread is at 100%. 1–256.
    /// Default 1.
    #[serde(default = "default_threads")]
    pub threads: usize,
    /// `proxy.read_your_writes_ms`: in `primary`, after a session's write
    /// through the facade, the longest its next statement forwarded to
    /// PostgreSQL waits for the reverse mirror to have applied that write
    /// there, so the session reads what it wrote (a `count(*)` after an
    /// INSERT, a transaction after an UPDATE). Past it the statement is
    /// forwarded anyway, with a warning and
    /// `mezzanine_proxy_unapplied_forwards_total`. 0 never waits.
    /// 0–600000. Default 5000.
    #[serde(default = "default_read_your_writes_ms")]
    pub read_your_writes_ms: u64,
    /// `proxy.tls_cert`: a PEM certificate chain; with `tls_key`, the
    /// proxy answers an app's SSL request with TLS and refuses apps that
    /// do not ask for it (`sslmode=require` or stricter). The connection
    /// to PostgreSQL is unchanged. Relative paths are read from the
    /// working directory.
    pub tls_cert: Option<PathBuf>,
    /// `proxy.tls_key`: the PEM private key of `tls_cert`.
    pub tls_key: Option<PathBuf>,
}

fn default_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 6432))
}

fn default_max_clients() -> usize {
    200
}

fn default_pool_size() -> usize {
    100
}

fn default_connect_timeout_ms() -> u64 {
    10_000
}

fn default_read_your_writes_ms() -> u64 {
    5_000
}

fn default_threads() -> usize {
    1
}

fn default_max_message_bytes() -> usize {
    64 * 1024 * 1024
}

impl Default for Proxy {
    fn default() -> Self {
        Proxy {
            listen: default_listen(),
            max_clients: default_max_clients(),
            pool_size: default_pool_size(),
            idle_timeout_ms: 0,
            connect_timeout_ms: default_connect_timeout_ms(),
            max_message_bytes: default_max_message_bytes(),
            threads: default_threads(),
            read_your_writes_ms: default_read_your_writes_ms(),
            tls_cert: None,
            tls_key: None,
        }
    }
}

/// Checks `[proxy]`.
pub(crate) fn validate(proxy: &Proxy) -> Result<(), Problem> {
    in_range("proxy.max_clients", proxy.max_clients as u64, 1, 100_000)?;
    in_range("proxy.pool_size", proxy.pool_size as u64, 1, 100_000)?;
    in_range(
        "proxy.idle_timeout_ms",
        proxy.idle_timeout_ms,
        0,
        86_400_000,
    )?;
    in_range(
        "proxy.connect_timeout_ms",
        proxy.connect_timeout_ms,
        100,
        600_000,
    )?;
    in_range("proxy.threads", proxy.threads as u64, 1, 256)?;
    in_range(
        "proxy.read_your_writes_ms",
        proxy.read_your_writes_ms,
        0,
        600_000,
    )?;
    match (&proxy.tls_cert, &proxy.tls_key) {
        (Some(_), None) => {
            return Err(Problem {
                key: "proxy.tls_key".into(),
                message: "tls_cert is set without tls_key".into(),
            })
        }
        (None, Some(_)) => {
            return Err(Problem {
                key: "proxy.tls_cert".into(),
                message: "tls_key is set without tls_cert".into(),
            })
        }
        _ => {}
    }
    in_range(
        "proxy.max_message_bytes",
        proxy.max_message_bytes as u64,
        1024,
        0x3fff_ffff,
    )
}
