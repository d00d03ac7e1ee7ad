//! One storage node: its lazy connection pool, its circuit breaker, its
//! semi-sync settings and packet budget, and every statement run on it
//! within `storage.request_timeout_ms`.

use super::*;

/// One MySQL/MariaDB server and its connection pool.
#[derive(Clone, Debug)]
pub struct Node {
    /// The node's URL without its password, for errors and status output.
    pub label: String,
    /// Connections to it; created lazily, so a node that is down does not
    /// stop the others from serving.
    pub pool: MySqlPool,
    /// How long one statement may take before the call fails with
    /// [`Error::Timeout`]: a frozen server must not hang its callers.
    pub request_timeout: Duration,
    /// Its circuit breaker.
    pub breaker: Arc<Breaker>,
    /// The server's `@@max_allowed_packet`, read on every new connection
    /// (0 until the first).
    max_packet: Arc<std::sync::atomic::AtomicUsize>,
    /// Its semi-synchronous replication settings, read on every new
    /// connection (`None` until the first).
    semi_sync: Arc<std::sync::Mutex<Option<SemiSync>>>,
    /// Connections whose last call finished, kept for the next caller
    /// (see [`crate::mysql::conn`]), at most `max_connections_per_node`.
    spares: Arc<Spares>,
    keep_spares: usize,
}

/// A master's semi-synchronous replication, as its variables say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SemiSync {
    /// `@@rpl_semi_sync_master_enabled` (false where the variable does not
    /// exist: MySQL without the plugin).
    pub enabled: bool,
    /// `@@rpl_semi_sync_master_timeout`, in milliseconds: after it a commit
    /// no minion acknowledged goes ahead asynchronously.
    pub timeout_ms: u64,
    /// `@@rpl_semi_sync_master_wait_point`.
    pub wait_point: String,
}

impl SemiSync {
    /// The query of the settings, in [`SemiSync::of`]'s order.
    const SQL: &'static str = "SELECT CAST(@@rpl_semi_sync_master_enabled AS SIGNED), \
                               CAST(@@rpl_semi_sync_master_timeout AS UNSIGNED), \
                               CAST(@@rpl_semi_sync_master_wait_point AS CHAR)";

    /// No semi-synchronous replication (or none that can be read).
    pub fn off() -> SemiSync {
        SemiSync {
            enabled: false,
            timeout_ms: 0,
            wait_point: String::new(),
        }
    }

    /// The settings from a row of [`SemiSync::SQL`].
    fn of(row: &MySqlRow) -> SemiSync {
        use sqlx::Row;
        SemiSync {
            enabled: row.try_get::<i64, _>(0).is_ok_and(|e| e != 0),
            timeout_ms: row.try_get::<u64, _>(1).unwrap_or(0),
            wait_point: row.try_get::<String, _>(2).unwrap_or_default(),
        }
    }

    /// Why a commit on this master may be acknowledged while only it holds
    /// the write, for calls that give up after `request_timeout`; `None`
    /// when it cannot.
    pub fn gap(&self, request_timeout: Duration) -> Option<String> {
        if !self.enabled {
            return Some(
                "rpl_semi_sync_master_enabled is off (turn it on, with rpl_semi_sync_slave_enabled on its minions, \
                 or turn buffered writes on: storage.buffer_secondaries >= 1)"
                    .into(),
            );
        }
        if u128::from(self.timeout_ms) <= request_timeout.as_millis() {
            return Some(format!(
                "rpl_semi_sync_master_timeout ({} ms) is not longer than storage.request_timeout_ms ({} ms): \
                 a commit no minion acknowledged would go ahead asynchronously before the call gives up",
                self.timeout_ms,
                request_timeout.as_millis()
            ));
        }
        None
    }
}

/// The statement size assumed before a node's `@@max_allowed_packet` is
/// known: MySQL's smallest default (4 MiB).
const ASSUMED_MAX_PACKET: usize = 4 << 20;

/// The largest text sent in one packet: half the server's
/// `max_allowed_packet`, leaving room for the protocol and for rows
/// larger than the average.
pub fn packet_budget(max_allowed_packet: usize) -> usize {
    (max_allowed_packet / 2).max(64 * 1024)
}

impl Node {
    pub(super) fn connect_lazy(
        url: &str,
        storage: &config::Storage,
        statement_cache: usize,
    ) -> Result<Node> {
        let label = redact(url);
        let max_packet = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let seen_packet = max_packet.clone();
        let semi_sync: Arc<std::sync::Mutex<Option<SemiSync>>> = Arc::default();
        let seen_semi_sync = semi_sync.clone();
        let options = MySqlConnectOptions::from_str(url)
            .map_err(|source| crate::mysql::storage_error(label.clone(), source))?
            .statement_cache_capacity(statement_cache.max(1));
        // Only a connection idle for a while is pinged on acquire (see
        // crate::pool).
        let pool = crate::pool::ping_if_idle(
            MySqlPoolOptions::new()
                .max_connections(storage.max_connections_per_node)
                .acquire_timeout(Duration::from_millis(storage.connect_timeout_ms)),
        )
        .after_connect(move |conn, _| {
            let seen_packet = seen_packet.clone();
            let seen_semi_sync = seen_semi_sync.clone();
            Box::pin(async move {
                // Whether an acknowledged write is on a second host.
                let settings = sqlx::query(SemiSync::SQL)
                    .fetch_one(&mut *conn)
                    .await
                    .map_or_else(|_| SemiSync::off(), |row| SemiSync::of(&row));
                *seen_semi_sync.lock().unwrap_or_else(|p| p.into_inner()) = Some(settings);
                // Statements are cut to fit the server's packet limit.
                if let Ok(limit) = sqlx::query_scalar::<_, u64>("SELECT @@max_allowed_packet")
                    .fetch_one(&mut *conn)
                    .await
                {
                    seen_packet.store(limit as usize, std::sync::atomic::Ordering::Relaxed);
                }
                // MariaDB copies the text of every row-changing
                // statement into the binlog as an annotation, by
                // default. Our inserts carry their bodies as hex, so
                // that would write every body three times over (twice
                // as text) on the master and again on every minion:
                // it cost a third of the write throughput. The row
                // events themselves are unaffected. MySQL has no such
                // variable, and a server that refuses it keeps its
                // default; neither is an error.
                let _ = sqlx::raw_sql("SET SESSION binlog_annotate_row_events = OFF")
                    .execute(&mut *conn)
                    .await;
                Ok(())
            })
        })
        .connect_lazy_with(options);
        Ok(Node {
            breaker: Arc::new(Breaker::new(
                &label,
                storage.breaker_failures,
                Duration::from_millis(storage.breaker_open_ms),
            )),
            label,
            pool,
            request_timeout: Duration::from_millis(storage.request_timeout_ms),
            max_packet,
            semi_sync,
            spares: Arc::default(),
            keep_spares: storage.max_connections_per_node as usize,
        })
    }

    /// Reads its semi-synchronous replication settings now (a promotion
    /// changes them on a node whose pooled connections read them before).
    pub async fn refresh_semi_sync(&self) -> Result<SemiSync> {
        let settings = match self.fetch_all(SemiSync::SQL.into()).await {
            Ok(rows) => rows.first().map_or_else(SemiSync::off, SemiSync::of),
            // The variables do not exist (MySQL without the plugin).
            Err(e @ Error::Storage { .. }) if !e.is_unavailable() => SemiSync::off(),
            Err(e) => return Err(e),
        };
        *self.semi_sync.lock().unwrap_or_else(|p| p.into_inner()) = Some(settings.clone());
        Ok(settings)
    }

    /// Its semi-synchronous replication as read on its newest connection;
    /// `None` before the first.
    pub fn semi_sync(&self) -> Option<SemiSync> {
        self.semi_sync
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// How many bytes of SQL text one packet to this node may carry
    /// ([`packet_budget`] of its `max_allowed_packet`).
    pub fn packet_budget(&self) -> usize {
        match self.max_packet.load(std::sync::atomic::Ordering::Relaxed) {
            0 => packet_budget(ASSUMED_MAX_PACKET),
            known => packet_budget(known),
        }
    }

    /// Wraps a driver error with this node's name.
    pub fn error(&self, source: sqlx::Error) -> Error {
        crate::mysql::storage_error(self.label.clone(), source)
    }

    /// A connection from the pool (waiting at most
    /// `storage.connect_timeout_ms`), unless the node's breaker is open.
    pub async fn acquire(&self) -> Result<NodeConnection> {
        if let Admission::Refused { reason } = self.breaker.admit() {
            return Err(Error::Unavailable {
                node: self.label.clone(),
                reason,
            });
        }
        self.acquire_unguarded().await
    }

    /// A connection whatever the breaker says: for its probes.
    async fn acquire_unguarded(&self) -> Result<NodeConnection> {
        let waiting = match self.spares.take_or_wait() {
            Ok(conn) => {
                return Ok(NodeConnection::new(
                    conn,
                    self.spares.clone(),
                    self.keep_spares,
                ))
            }
            Err(waiting) => waiting,
        };
        let result = self.pool.acquire().await.map_err(|e| self.error(e));
        drop(waiting);
        match result {
            Ok(conn) => Ok(NodeConnection::new(
                conn,
                self.spares.clone(),
                self.keep_spares,
            )),
            Err(e) => {
                self.judge(&e);
                Err(e)
            }
        }
    }

    /// How many connections rest on its stack of settled ones (see
    /// [`crate::mysql::conn`]); the pool's own idle ones are `pool.num_idle()`.
    pub fn spare_connections(&self) -> usize {
        self.spares.len()
    }

    /// Hands the connections it kept back to its pool and closes the pool.
    pub async fn close(&self) {
        self.spares.close();
        self.pool.close().await;
    }

    /// Feeds a failure of the node (not an error answer) to its breaker.
    fn judge(&self, e: &Error) {
        if e.is_unavailable() {
            self.breaker.failure(&e.to_string());
        }
    }

    /// Sends `SELECT 1` past the breaker and reports the outcome to it: the
    /// probe of a half-open breaker, and the check of `cluster status`.
    pub async fn probe(&self) -> Result<Duration> {
        let started = std::time::Instant::now();
        let mut conn = self.acquire_unguarded().await?;
        self.run(&mut conn, |c| {
            Box::pin(async move { sqlx::raw_sql("SELECT 1").execute(c).await.map(|_| ()) })
        })
        .await?;
        Ok(started.elapsed())
    }

    /// Runs one call on `conn` within the request timeout. After a timeout
    /// the connection is closed rather than reused: the statement may still
    /// be running on it (and the server rolls back what it had not
    /// committed). A call that completed, with rows or an error answer,
    /// settles the connection for reuse without a ping.
    pub async fn run<T>(
        &self,
        conn: &mut NodeConnection,
        call: impl for<'c> FnOnce(
            &'c mut sqlx::MySqlConnection,
        )
            -> futures::future::BoxFuture<'c, std::result::Result<T, sqlx::Error>>,
    ) -> Result<T> {
        let outcome = tokio::time::timeout(self.request_timeout, call(conn)).await;
        let result = match outcome {
            Ok(result) => result.map_err(|e| self.error(e)),
            Err(_) => {
                conn.close_on_drop();
                Err(Error::Timeout {
                    node: self.label.clone(),
                    after: self.request_timeout,
                })
            }
        };
        match &result {
            Ok(_) => {
                self.breaker.success();
                conn.settle();
            }
            Err(e) if e.is_unavailable() => {
                // A connection that failed mid-call is not reused.
                conn.close_on_drop();
                self.judge(e);
            }
            // An error answer: the node is up, and the answer was read.
            Err(_) => {
                self.breaker.success();
                conn.settle();
            }
        }
        result
    }

    /// The node's `@@gtid_binlog_pos`: on a master, every transaction it
    /// has committed, for a minion to wait for (`MASTER_GTID_WAIT`).
    pub async fn gtid_binlog_pos(&self) -> Result<String> {
        let rows = self
            .fetch_all("SELECT CAST(@@gtid_binlog_pos AS CHAR)".into())
            .await?;
        Ok(rows
            .first()
            .and_then(|r| sqlx::Row::try_get(r, 0).ok())
            .unwrap_or_default())
    }

    /// Runs text SQL (one or more statements) and returns its rows.
    pub async fn fetch_all(&self, sql: String) -> Result<Vec<MySqlRow>> {
        let mut conn = self.acquire().await?;
        self.run(&mut conn, |c| {
            Box::pin(sqlx::raw_sql(AssertSqlSafe(sql)).fetch_all(c))
        })
        .await
    }

    /// Runs text SQL (one or more statements) for its effect.
    pub async fn execute(&self, sql: String) -> Result<()> {
        let mut conn = self.acquire().await?;
        self.run(&mut conn, |c| {
            Box::pin(async move {
                sqlx::raw_sql(AssertSqlSafe(sql)).execute(c).await?;
                Ok(())
            })
        })
        .await
    }

    /// Runs a prepared statement for its effect.
    pub async fn execute_prepared(
        &self,
        query: sqlx::query::Query<'static, MySql, MySqlArguments>,
    ) -> Result<()> {
        let mut conn = self.acquire().await?;
        self.run(&mut conn, |c| {
            Box::pin(async move {
                query.execute(c).await?;
                Ok(())
            })
        })
        .await
    }

    /// Runs a prepared statement returning at most one row.
    pub async fn fetch_optional(
        &self,
        query: sqlx::query::Query<'static, MySql, MySqlArguments>,
    ) -> Result<Option<MySqlRow>> {
        let mut conn = self.acquire().await?;
        self.run(&mut conn, |c| Box::pin(query.fetch_optional(c)))
            .await
    }
}
