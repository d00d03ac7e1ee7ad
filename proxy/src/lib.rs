//! `mezzanine proxy`: apps point their PostgreSQL connection string here
//! instead of at PostgreSQL, and need no other change.
//!
//! The proxy speaks PostgreSQL's wire protocol (messages decoded and
//! encoded with `pgwire`) and forwards each app connection to a
//! PostgreSQL connection of its own, message by message
//! ([`session`]). Every `Query` and `Parse` is read by the translator
//! and judged by the mode ([`route`]): what the mode lets through goes to
//! PostgreSQL byte for byte; what it refuses reaches the app as SQLSTATE
//! `0A000` with the translator's reason. Translatable reads are sampled
//! for the verifier in the modes whose facade samples (`sample`), and in
//! `shadow` they are answered from
//! Schemaless at the read share: PostgreSQL renders the rows Schemaless
//! gave in the app's session, so every byte is one PostgreSQL would have
//! sent (`query::run::render_from`). Counts and metrics in [`stats`].
//!
//! Its rooms: `frame` (whole messages off a byte stream, and the proxy's
//! own messages), `route` (the mode's rules), `session` (one connection's
//! opening and its PostgreSQL connection), `relay` (both directions of a
//! session, each statement judged), `sample` (translatable reads handed
//! to the verifier), `stats` (what `proxy status` shows), `heartbeat`
//! (that status published in the legacy database for the dashboard).

mod answers;
mod frame;
mod fresh;
pub mod heartbeat;
mod params;
mod relay;
pub mod route;
mod sample;
mod session;
pub mod stats;
pub mod upstream;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tripstore::{Mode, TripStore};

pub use route::{Decision, Router, Verdict};
pub use stats::{Stats, Status};

/// Why the proxy cannot start.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("{0}")]
    Config(String),
    #[error("listening on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// What every session shares.
pub(crate) struct Shared {
    settings: config::proxy::Proxy,
    /// The legacy PostgreSQL server, and how to reach it.
    upstream: upstream::Upstream,
    /// The legacy database (`legacy.url`'s): the layout's tables are in
    /// it, and statements of sessions on other databases are not read.
    database: String,
    router: Router,
    stats: Arc<Stats>,
    sampling: sample::Sampling,
    /// One permit per app connection (`proxy.max_clients`).
    clients: Arc<Semaphore>,
    /// One permit per PostgreSQL connection (`proxy.pool_size`).
    pool: Arc<Semaphore>,
    facade: Arc<TripStore>,
    /// The OIDs of extensions' types in the legacy database, for their
    /// binary parameters.
    extensions: params::Extensions,
    /// TLS towards apps (`proxy.tls_cert`), required when set.
    tls: Option<tokio_rustls::TlsAcceptor>,
}

impl Shared {
    fn mode(&self) -> Mode {
        self.facade.mode()
    }

    fn status(&self, listen: SocketAddr) -> Status {
        self.stats.status(
            listen,
            self.mode(),
            &self.settings,
            self.facade.sampler().totals(),
        )
    }
}

/// A proxy for the legacy database of `config`, following the mode of
/// `facade`.
pub struct Proxy {
    shared: Arc<Shared>,
}

impl Proxy {
    /// `tls`: the acceptor of `proxy.tls_cert` and `proxy.tls_key`, if set.
    pub async fn new(
        config: &config::Config,
        facade: Arc<TripStore>,
        tls: Option<tokio_rustls::TlsAcceptor>,
    ) -> Result<Proxy, ProxyError> {
        let legacy = config.legacy.as_ref().ok_or_else(|| {
            ProxyError::Config("no [legacy] section: the proxy forwards to legacy.url".into())
        })?;
        let upstream = upstream::Upstream::from_url(&legacy.url).await?;
        let database = url::Url::parse(&legacy.url)
            .ok()
            .and_then(|u| {
                let path = u.path().trim_start_matches('/');
                let name = if path.is_empty() { u.username() } else { path };
                percent_decode(name)
            })
            .unwrap_or_default();
        let settings = config.proxy.clone();
        let mut model = query::Model::from_config(config);
        // Read once, as the columns' types are: the target columns of an
        // INSERT that lists none.
        if let Some(m) = model.take() {
            model = Some(
                match query::run::column_orders(facade.legacy().pool(), &m).await {
                    Ok(orders) => m.with_column_orders(orders),
                    Err(e) => {
                        tracing::warn!(
                            "proxy: the layout tables' column order not read ({e}): an INSERT \
                             that lists no columns is untranslatable"
                        );
                        m
                    }
                },
            );
        }
        let model = model.map(Arc::new);
        // Read once: a layout column of an extension's type exists when
        // the facade connects, and so does the type.
        let extensions = params::Extensions::read(facade.legacy().pool())
            .await
            .unwrap_or_else(|e| {
                tracing::warn!(
                    "proxy: extensions' types not read ({e}): their binary parameters are not read"
                );
                params::Extensions::default()
            });
        Ok(Proxy {
            shared: Arc::new(Shared {
                clients: Arc::new(Semaphore::new(settings.max_clients)),
                pool: Arc::new(Semaphore::new(settings.pool_size)),
                settings,
                upstream,
                database,
                router: Router::new(model.clone()),
                stats: Arc::default(),
                sampling: sample::Sampling::new(facade.clone(), model, config.limits.clone()),
                facade,
                extensions,
                tls,
            }),
        })
    }

    /// The PostgreSQL server apps are forwarded to.
    pub fn backend(&self) -> SocketAddr {
        self.shared.upstream.addr
    }

    /// How the proxy's connections to PostgreSQL are encrypted
    /// (`legacy.url`'s `sslmode`).
    pub fn backend_sslmode(&self) -> &'static str {
        self.shared.upstream.mode.as_str()
    }

    /// What the proxy has done so far.
    pub fn status(&self, listen: SocketAddr) -> Status {
        self.shared.status(listen)
    }

    /// Listens on `addr` and serves apps until `shutdown`; then takes no
    /// new connection and waits up to `drain` for open ones to end.
    pub async fn serve(
        &self,
        addr: SocketAddr,
        shutdown: CancellationToken,
        drain: Duration,
    ) -> Result<Served, ProxyError> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| ProxyError::Bind { addr, source })?;
        let addr = listener
            .local_addr()
            .map_err(|source| ProxyError::Bind { addr, source })?;
        let listener = listener
            .into_std()
            .map_err(|source| ProxyError::Bind { addr, source })?;
        // Sessions run on `proxy.threads` single-threaded runtimes of
        // their own, each on its own OS thread: a session's reads, writes
        // and wake-ups stay on one thread (the profile of `bench proxy`
        // showed cross-thread wake-ups costing more than the relaying),
        // and the proxy's CPU is bounded by its thread count, whatever the
        // process's main runtime does.
        let threads = self.shared.settings.threads.max(1);
        let stop_helpers = CancellationToken::new();
        let mut handles = Vec::with_capacity(threads);
        let mut helpers = Vec::new();
        for i in 1..threads {
            let (tx, rx) = std::sync::mpsc::channel();
            let stop = stop_helpers.clone();
            let thread = std::thread::Builder::new()
                .name(format!("mz-proxy-{i}"))
                .spawn(move || {
                    let Ok(runtime) = single_threaded() else {
                        return;
                    };
                    let _ = tx.send(runtime.handle().clone());
                    runtime.block_on(stop.cancelled());
                })
                .map_err(|source| ProxyError::Bind { addr, source })?;
            helpers.push(thread);
            if let Ok(handle) = rx.recv() {
                handles.push(handle);
            }
        }
        let heartbeat = tokio::spawn(heartbeat(self.shared.clone(), addr, shutdown.clone()));
        let shared = self.shared.clone();
        let relaying = tokio::task::spawn_blocking(move || {
            match single_threaded() {
                Ok(runtime) => {
                    handles.insert(0, runtime.handle().clone());
                    runtime.block_on(accept_loop(listener, shared, shutdown, drain, handles));
                }
                Err(e) => tracing::error!("starting the proxy's runtime: {e}"),
            }
            stop_helpers.cancel();
            for thread in helpers {
                let _ = thread.join();
            }
        });
        let done = tokio::spawn(async move {
            let _ = relaying.await;
            let _ = heartbeat.await;
        });
        Ok(Served { addr, done })
    }
}

/// Publishes the proxy's status every [`heartbeat::EVERY`] until
/// `shutdown`, then removes its row. A failure is logged and retried at
/// the next beat: the dashboard misses a figure, apps miss nothing.
async fn heartbeat(shared: Arc<Shared>, listen: SocketAddr, shutdown: CancellationToken) {
    let pool = shared.facade.legacy().pool().clone();
    let name = heartbeat::name(listen);
    let mut ensured = false;
    loop {
        if !ensured {
            ensured = heartbeat::ensure(&pool)
                .await
                .map_err(|e| tracing::warn!("proxy: creating mezzanine.proxies: {e}"))
                .is_ok();
        }
        if ensured {
            if let Err(e) = heartbeat::publish(&pool, &name, &shared.status(listen)).await {
                tracing::warn!("proxy: the status for the dashboard was not written: {e}");
            }
        }
        record_forwarded(&pool, &shared).await;
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tokio::time::sleep(heartbeat::EVERY) => {}
        }
    }
    record_forwarded(&pool, &shared).await;
    heartbeat::retire(&pool, &name).await;
}

/// Records the translatable writes forwarded since the last beat for the
/// `primary` gate (`tripstore::direct_writes`); kept for the next beat if
/// that fails. Counts a `kill -9` loses are calls the gate then counts as
/// direct: it refuses a step it could have taken, never the other way.
async fn record_forwarded(pool: &sqlx::PgPool, shared: &Shared) {
    let counts = shared.stats.take_forwarded();
    if counts.is_empty() {
        return;
    }
    if let Err(e) = tripstore::direct_writes::record_proxied(pool, &counts).await {
        tracing::warn!("proxy: the forwarded writes were not recorded for the primary gate: {e}");
        shared.stats.untake_forwarded(counts);
    }
}

fn single_threaded() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
}

/// A listening proxy.
pub struct Served {
    pub addr: SocketAddr,
    /// Ends when the proxy has stopped.
    pub done: JoinHandle<()>,
}

async fn accept_loop(
    listener: std::net::TcpListener,
    shared: Arc<Shared>,
    shutdown: CancellationToken,
    drain: Duration,
    runtimes: Vec<tokio::runtime::Handle>,
) {
    let listener = match TcpListener::from_std(listener) {
        Ok(listener) => listener,
        Err(e) => {
            tracing::error!("listening: {e}");
            return;
        }
    };
    let sessions = TaskTracker::new();
    let mut next = 0usize;
    let mut pause = Duration::from_millis(5);
    loop {
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, _)) => {
                pause = Duration::from_millis(5);
                // Round robin over the runtimes.
                let runtime = &runtimes[next % runtimes.len()];
                next = next.wrapping_add(1);
                match stream.into_std() {
                    Ok(stream) => {
                        let shared = shared.clone();
                        runtime.spawn(sessions.track_future(async move {
                            match TcpStream::from_std(stream) {
                                Ok(stream) => session::serve(shared, stream).await,
                                Err(e) => tracing::warn!("taking a connection: {e}"),
                            }
                        }));
                    }
                    Err(e) => tracing::warn!("taking a connection: {e}"),
                }
            }
            Err(e) => {
                // Out of file descriptors, say: wait rather than spin.
                tracing::warn!("accepting a connection: {e}");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
        }
    }
    drop(listener);
    sessions.close();
    if tokio::time::timeout(drain, sessions.wait()).await.is_err() {
        tracing::warn!(
            "{} app connections still open {drain:?} after shutdown began; closing them",
            sessions.len()
        );
    }
}

/// `%XX` escapes of a URL's part decoded (`None`: not UTF-8).
fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        let hex = bytes
            .get(at + 1..at + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[at], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                at += 3;
            }
            (b, _) => {
                out.push(b);
                at += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::percent_decode;

    #[test]
    fn url_escapes_are_decoded_and_bad_ones_kept() {
        assert_eq!(percent_decode("my%20db").as_deref(), Some("my db"));
        assert_eq!(percent_decode("caf%C3%A9").as_deref(), Some("café"));
        assert_eq!(percent_decode("50%").as_deref(), Some("50%"));
        assert_eq!(percent_decode("%zz").as_deref(), Some("%zz"));
        assert_eq!(percent_decode("%ff"), None, "not UTF-8");
    }
}
