//! One app connection: the startup packet, a PostgreSQL connection of its
//! own, and the two directions relayed message by message.
//!
//! Session pooling: an app connection holds one PostgreSQL connection for
//! its whole life, so everything a session carries (prepared statements,
//! `SET`, `LISTEN`, temporary tables, transactions) stays where the app
//! left it, and authentication, `BackendKeyData`, cancel requests,
//! notices, notifications and `COPY` pass through untouched: the proxy
//! forwards the bytes it reads and changes only a statement it refuses.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use pgwire::messages::extendedquery::{Bind, Close, Parse};
use pgwire::messages::simplequery::Query;
use pgwire::messages::startup::Startup;
use pgwire::messages::{DecodeContext, Message, ProtocolVersion};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::Mutex;

use crate::frame::{self, Frame, FrameError};
use crate::route::{refusing_statement, Verdict};
use crate::stats::{Outcome, Route};
use crate::Shared;

const SSL_REQUEST: i32 = 80_877_103;
const GSS_REQUEST: i32 = 80_877_104;
const CANCEL_REQUEST: i32 = 80_877_102;
/// PostgreSQL's own limit on a startup packet.
const MAX_STARTUP: usize = 10_000;

/// How a connection opened.
enum Opening {
    /// A startup packet, as sent.
    Start(BytesMut),
    /// A cancel request, as sent.
    Cancel(BytesMut),
}

/// Why a connection ends early; each is sent to the app as a `FATAL`
/// error when it can still be.
#[derive(Debug, thiserror::Error)]
enum Fatal {
    #[error("{0}")]
    Protocol(String),
    #[error(transparent)]
    Frame(#[from] FrameError),
    #[error("the client sent nothing for {0:?}")]
    Idle(Duration),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

impl Fatal {
    fn sqlstate(&self) -> &'static str {
        match self {
            Fatal::Protocol(_) => "08P01",
            Fatal::Frame(FrameError::TooLarge { .. }) => "54000",
            Fatal::Frame(FrameError::BadLength(_)) => "08P01",
            Fatal::Idle(_) => "57P05",
            Fatal::Io(_) => "08006",
        }
    }
}

/// Serves one app connection to its end. Never panics on what the app
/// sends; every failure ends this connection only.
pub async fn serve(shared: Arc<Shared>, client: TcpStream) {
    let _ = client.set_nodelay(true);
    let (mut rd, mut wr) = client.into_split();
    let mut buf = BytesMut::with_capacity(8192);
    let settings = &shared.settings;
    let connect_timeout = Duration::from_millis(settings.connect_timeout_ms);
    let opening =
        match tokio::time::timeout(connect_timeout, open(&mut rd, &mut wr, &mut buf)).await {
            Ok(Ok(opening)) => opening,
            Ok(Err(e)) => {
                shared.stats.connection(Outcome::BadStartup);
                tracing::debug!("startup: {e}");
                fatal(&mut wr, e.sqlstate(), &e.to_string()).await;
                return;
            }
            Err(_) => {
                shared.stats.connection(Outcome::BadStartup);
                fatal(
                    &mut wr,
                    "08P01",
                    "no startup packet within proxy.connect_timeout_ms",
                )
                .await;
                return;
            }
        };
    let startup = match opening {
        Opening::Cancel(packet) => {
            shared.stats.connection(Outcome::Cancel);
            // BackendKeyData reached the app unchanged, so PostgreSQL
            // knows the key: the request goes to it as it came.
            if let Ok(Ok(mut pg)) =
                tokio::time::timeout(connect_timeout, TcpStream::connect(shared.backend)).await
            {
                let _ = pg.write_all(&packet).await;
                let _ = pg.shutdown().await;
            }
            return;
        }
        Opening::Start(packet) => packet,
    };
    let Ok(_slot) = shared.clients.clone().try_acquire_owned() else {
        shared.stats.connection(Outcome::RefusedFull);
        fatal(
            &mut wr,
            "53300",
            "sorry, too many clients already (proxy.max_clients)",
        )
        .await;
        return;
    };
    let _client = shared.stats.client();
    let backend = async {
        let permit = shared
            .pool
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| "the proxy is stopping".to_string())?;
        let pg = TcpStream::connect(shared.backend)
            .await
            .map_err(|e| format!("could not connect to PostgreSQL at {}: {e}", shared.backend))?;
        Ok::<_, String>((permit, pg))
    };
    let (_permit, mut pg) = match tokio::time::timeout(connect_timeout, backend).await {
        Ok(Ok(connected)) => connected,
        Ok(Err(why)) => {
            shared.stats.connection(Outcome::NoBackend);
            fatal(&mut wr, "08006", &why).await;
            return;
        }
        Err(_) => {
            shared.stats.connection(Outcome::NoBackend);
            fatal(
                &mut wr,
                "53300",
                "no PostgreSQL connection free within proxy.connect_timeout_ms (proxy.pool_size are in use)",
            )
            .await;
            return;
        }
    };
    let _backend = shared.stats.backend();
    shared.stats.connection(Outcome::Served);
    let _ = pg.set_nodelay(true);
    if pg.write_all(&startup).await.is_err() {
        fatal(
            &mut wr,
            "08006",
            "PostgreSQL closed the connection at startup",
        )
        .await;
        return;
    }
    let (pg_rd, pg_wr) = pg.into_split();
    let state = Arc::new(State::default());
    let wr = Arc::new(Mutex::new(wr));
    let mut down = tokio::spawn(downstream(pg_rd, wr.clone(), state.clone()));
    let up = Upstream {
        shared: &shared,
        state: &state,
        refused: HashSet::new(),
    }
    .run(rd, pg_wr, buf);
    tokio::select! {
        ended = up => {
            if let Err(e) = ended {
                tracing::debug!("client connection: {e}");
                let mut wr = wr.lock().await;
                if !matches!(e, Fatal::Io(_)) {
                    fatal(&mut wr, e.sqlstate(), &e.to_string()).await;
                }
            }
            down.abort();
        }
        _ = &mut down => {}
    }
}

/// Reads the opening packets: SSL and GSS requests are answered `N`
/// (the proxy speaks plain TCP to apps), then a startup packet or a
/// cancel request.
async fn open(
    rd: &mut OwnedReadHalf,
    wr: &mut OwnedWriteHalf,
    buf: &mut BytesMut,
) -> Result<Opening, Fatal> {
    for _ in 0..3 {
        while buf.len() < 8 {
            if rd.read_buf(buf).await? == 0 {
                return Err(Fatal::Protocol("the client closed during startup".into()));
            }
        }
        let len = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
        if !(8..=MAX_STARTUP).contains(&len) {
            return Err(Fatal::Protocol(format!(
                "invalid length of startup packet: {len}"
            )));
        }
        while buf.len() < len {
            if rd.read_buf(buf).await? == 0 {
                return Err(Fatal::Protocol("the client closed during startup".into()));
            }
        }
        let code = i32::from_be_bytes([buf[4], buf[5], buf[6], buf[7]]);
        match code {
            SSL_REQUEST | GSS_REQUEST if len == 8 => {
                let _ = buf.split_to(len);
                let mut answer = BytesMut::new();
                frame::refuse_encryption(&mut answer);
                wr.write_all(&answer).await?;
            }
            CANCEL_REQUEST if len == 16 => return Ok(Opening::Cancel(buf.split_to(len))),
            _ if code >> 16 == 3 => {
                let packet = buf.split_to(len);
                let mut copy = packet.clone();
                let mut ctx = DecodeContext::new(ProtocolVersion::default());
                ctx.awaiting_frontend_ssl = false;
                let startup = Startup::decode(&mut copy, &ctx)
                    .map_err(|e| Fatal::Protocol(format!("malformed startup packet: {e}")))?;
                match startup {
                    Some(s) if s.parameters.contains_key("user") => {
                        return Ok(Opening::Start(packet))
                    }
                    _ => {
                        return Err(Fatal::Protocol(
                            "no PostgreSQL user name specified in startup packet".into(),
                        ))
                    }
                }
            }
            _ => {
                return Err(Fatal::Protocol(format!(
                    "unsupported frontend protocol {}.{}",
                    code >> 16,
                    code & 0xffff
                )))
            }
        }
    }
    Err(Fatal::Protocol(
        "too many encryption requests before the startup packet".into(),
    ))
}

/// Sends a `FATAL` error, best effort: the connection ends after it.
async fn fatal(wr: &mut OwnedWriteHalf, sqlstate: &str, message: &str) {
    let _ = wr
        .write_all(&frame::error("FATAL", sqlstate, message, None))
        .await;
    let _ = wr.shutdown().await;
}

/// What both directions know of the session.
#[derive(Default)]
struct State {
    /// The status byte of the last `ReadyForQuery`: `I` idle, `T` in a
    /// transaction block, `E` in a failed one.
    status: AtomicU8,
    /// `Query` and `Sync` messages sent that PostgreSQL has not yet
    /// answered with `ReadyForQuery`.
    unanswered: AtomicUsize,
    /// A `BEGIN` was sent since PostgreSQL was last seen idle with
    /// nothing unanswered: a client that pipelines its next statement
    /// behind it is in the block before PostgreSQL says so.
    begun: AtomicU8,
}

impl State {
    fn in_transaction(&self) -> bool {
        let status = self.status.load(Ordering::Acquire);
        (status != 0 && status != b'I') || self.begun.load(Ordering::Acquire) != 0
    }

    fn idle(&self) -> bool {
        !self.in_transaction() && self.unanswered.load(Ordering::Acquire) == 0
    }
}

/// PostgreSQL to the app: whole messages, in big writes, noting each
/// `ReadyForQuery`'s status before the app can see it.
async fn downstream(
    mut pg: OwnedReadHalf,
    client: Arc<Mutex<OwnedWriteHalf>>,
    state: Arc<State>,
) -> std::io::Result<()> {
    let mut buf = BytesMut::with_capacity(64 * 1024);
    loop {
        if pg.read_buf(&mut buf).await? == 0 {
            let _ = client.lock().await.shutdown().await;
            return Ok(());
        }
        let mut complete = 0;
        while buf.len() - complete >= 5 {
            let at = complete;
            let len =
                u32::from_be_bytes([buf[at + 1], buf[at + 2], buf[at + 3], buf[at + 4]]) as usize;
            if buf.len() - at < len + 1 {
                break;
            }
            if buf[at] == b'Z' && len == 5 {
                state.status.store(buf[at + 5], Ordering::Release);
                let before = state.unanswered.fetch_sub(1, Ordering::AcqRel);
                if before <= 1 {
                    state.unanswered.store(0, Ordering::Release);
                    state.begun.store(0, Ordering::Release);
                }
            }
            complete += len + 1;
        }
        if complete > 0 {
            let out = buf.split_to(complete);
            client.lock().await.write_all(&out).await?;
        }
    }
}

/// The app to PostgreSQL.
struct Upstream<'a> {
    shared: &'a Shared,
    state: &'a State,
    /// Prepared statements whose `Parse` was refused (`""` the unnamed
    /// one): their `Bind`s lose their parameters, so PostgreSQL reaches
    /// the refusal at `Execute` instead of a parameter count mismatch.
    refused: HashSet<String>,
}

impl Upstream<'_> {
    async fn run(
        mut self,
        mut rd: OwnedReadHalf,
        mut pg: OwnedWriteHalf,
        mut buf: BytesMut,
    ) -> Result<(), Fatal> {
        let max = self.shared.settings.max_message_bytes;
        let idle_timeout = Duration::from_millis(self.shared.settings.idle_timeout_ms);
        let mut out = BytesMut::with_capacity(8192);
        loop {
            while let Some(frame) = frame::next(&mut buf, max)? {
                let terminate = frame.kind == b'X';
                self.message(frame, &mut out);
                if terminate {
                    pg.write_all(&out).await?;
                    return Ok(());
                }
            }
            if !out.is_empty() {
                pg.write_all(&out).await?;
                out.clear();
            }
            let read = rd.read_buf(&mut buf);
            let n = if idle_timeout.is_zero() || !self.state.idle() {
                read.await?
            } else {
                match tokio::time::timeout(idle_timeout, read).await {
                    Ok(n) => n?,
                    Err(_) => {
                        // PostgreSQL's session ends as the app's does.
                        let _ = pg.write_all(b"X\0\0\0\x04").await;
                        return Err(Fatal::Idle(idle_timeout));
                    }
                }
            };
            if n == 0 {
                // The app went away (mid-statement, say): PostgreSQL ends
                // the session and rolls back what was open.
                let _ = pg.shutdown().await;
                return Ok(());
            }
        }
    }

    /// Appends what PostgreSQL is to get for `frame`.
    fn message(&mut self, frame: Frame, out: &mut BytesMut) {
        match frame.kind {
            b'Q' => {
                self.state.unanswered.fetch_add(1, Ordering::AcqRel);
                let Some(query) = frame::decode::<Query>(&frame) else {
                    // PostgreSQL names what is wrong with it.
                    out.extend_from_slice(&frame.bytes);
                    return;
                };
                match self.route(&query.query) {
                    Verdict::Forward => out.extend_from_slice(&frame.bytes),
                    Verdict::Refuse(reason) => {
                        frame::encode(&Query::new(refusing_statement(&reason)), out)
                    }
                }
            }
            b'P' => {
                let Some(parse) = frame::decode::<Parse>(&frame) else {
                    out.extend_from_slice(&frame.bytes);
                    return;
                };
                let name = parse.name.clone().unwrap_or_default();
                match self.route(&parse.query) {
                    Verdict::Forward => {
                        self.refused.remove(&name);
                        out.extend_from_slice(&frame.bytes);
                    }
                    Verdict::Refuse(reason) => {
                        self.refused.insert(name);
                        frame::encode(
                            &Parse::new(parse.name, refusing_statement(&reason), Vec::new()),
                            out,
                        );
                    }
                }
            }
            b'B' if !self.refused.is_empty() => match frame::decode::<Bind>(&frame) {
                Some(bind)
                    if self
                        .refused
                        .contains(bind.statement_name.as_deref().unwrap_or_default()) =>
                {
                    frame::encode(
                        &Bind::new(
                            bind.portal_name,
                            bind.statement_name,
                            Vec::new(),
                            Vec::new(),
                            Vec::new(),
                        ),
                        out,
                    )
                }
                _ => out.extend_from_slice(&frame.bytes),
            },
            b'C' if !self.refused.is_empty() => {
                if let Some(close) = frame::decode::<Close>(&frame) {
                    if close.target_type == b'S' {
                        self.refused
                            .remove(close.name.as_deref().unwrap_or_default());
                    }
                }
                out.extend_from_slice(&frame.bytes);
            }
            b'S' => {
                self.state.unanswered.fetch_add(1, Ordering::AcqRel);
                out.extend_from_slice(&frame.bytes);
            }
            _ => out.extend_from_slice(&frame.bytes),
        }
    }

    /// The verdict on `sql`, counted.
    fn route(&mut self, sql: &str) -> Verdict {
        let mode = self.shared.mode();
        let decision = self
            .shared
            .router
            .decide(sql, mode, self.state.in_transaction());
        let route = match decision.verdict {
            Verdict::Forward => Route::Forwarded,
            Verdict::Refuse(_) => Route::Refused,
        };
        self.shared.stats.statement(decision.class, mode, route);
        if opens_transaction(sql) {
            self.state.begun.store(1, Ordering::Release);
        }
        decision.verdict
    }
}

/// Whether `sql` begins with `BEGIN` or `START TRANSACTION` (after
/// spaces and comments).
fn opens_transaction(sql: &str) -> bool {
    let mut rest = sql.trim_start();
    loop {
        if let Some(after) = rest.strip_prefix("--") {
            rest = after.split_once('\n').map_or("", |(_, r)| r).trim_start();
        } else if let Some(after) = rest.strip_prefix("/*") {
            rest = after.split_once("*/").map_or("", |(_, r)| r).trim_start();
        } else {
            break;
        }
    }
    let word: String = rest
        .chars()
        .take_while(|c| c.is_ascii_alphabetic())
        .collect::<String>()
        .to_ascii_lowercase();
    word == "begin" || word == "start"
}

#[cfg(test)]
mod tests {
    use super::opens_transaction;

    #[test]
    fn transaction_openers_are_seen_past_comments() {
        assert!(opens_transaction("BEGIN"));
        assert!(opens_transaction("  begin isolation level serializable"));
        assert!(opens_transaction("/* app */ -- x\n START TRANSACTION"));
        assert!(!opens_transaction("SELECT 'begin'"));
        assert!(
            !opens_transaction("beginning"),
            "a longer word is not BEGIN"
        );
    }
}
