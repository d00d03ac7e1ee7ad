//! One app connection: the startup packet, a PostgreSQL connection of its
//! own, and the two directions relayed message by message.
//!
//! Session pooling: an app connection holds one PostgreSQL connection for
//! its whole life, so everything a session carries (prepared statements,
//! `SET`, `LISTEN`, temporary tables, transactions) stays where the app
//! left it, and authentication, `BackendKeyData`, cancel requests,
//! notices, notifications and `COPY` pass through untouched: the proxy
//! forwards the bytes it reads and changes only a statement it refuses.

use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use pgwire::messages::startup::Startup;
use pgwire::messages::{DecodeContext, Message, ProtocolVersion};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
use tokio_util::either::Either;

use crate::frame;
use crate::relay::Fatal;
use crate::stats::Outcome;
use crate::Shared;

const SSL_REQUEST: i32 = 80_877_103;
const GSS_REQUEST: i32 = 80_877_104;
const CANCEL_REQUEST: i32 = 80_877_102;
/// PostgreSQL's own limit on a startup packet.
const MAX_STARTUP: usize = 10_000;

/// How a connection opened.
enum Opening {
    /// A startup packet, as sent, the database it names and the user.
    Start(BytesMut, String, String),
    /// A cancel request, as sent.
    Cancel(BytesMut),
}

/// Serves one app connection to its end. Never panics on what the app
/// sends; every failure ends this connection only.
pub async fn serve(shared: Arc<Shared>, client: TcpStream) {
    let _ = client.set_nodelay(true);
    let mut buf = BytesMut::with_capacity(8192);
    let settings = &shared.settings;
    let connect_timeout = Duration::from_millis(settings.connect_timeout_ms);
    let opening = async {
        let mut client = Some(Opened::Left(client));
        let opening = open(&mut client, &mut buf, shared.tls.as_ref()).await;
        (client, opening)
    };
    let (mut client, opening) = match tokio::time::timeout(connect_timeout, opening).await {
        Ok((Some(client), Ok(opening))) => (client, opening),
        Ok((client, Err(e))) => {
            shared.stats.connection(Outcome::BadStartup);
            tracing::debug!("startup: {e}");
            if let Some(mut client) = client {
                fatal(&mut client, e.sqlstate(), &e.to_string()).await;
            }
            return;
        }
        Ok((None, Ok(_))) => return,
        Err(_) => {
            // The stream went with the abandoned opening: it is closed.
            shared.stats.connection(Outcome::BadStartup);
            return;
        }
    };
    let startup = match opening {
        Opening::Cancel(packet) => {
            shared.stats.connection(Outcome::Cancel);
            // BackendKeyData reached the app unchanged, so PostgreSQL
            // knows the key: the request goes to it as it came.
            // PostgreSQL reads a cancel request before any TLS or
            // authentication: it goes plain, as libpq sends it.
            if let Ok(Ok(mut pg)) =
                tokio::time::timeout(connect_timeout, TcpStream::connect(shared.upstream.addr))
                    .await
            {
                let _ = pg.write_all(&packet).await;
                let _ = pg.shutdown().await;
            }
            return;
        }
        Opening::Start(packet, database, user) => (packet, database, user),
    };
    let (startup, database, user) = startup;
    let Ok(_slot) = shared.clients.clone().try_acquire_owned() else {
        shared.stats.connection(Outcome::RefusedFull);
        fatal(
            &mut client,
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
        let pg = shared.upstream.connect().await?;
        Ok::<_, String>((permit, pg))
    };
    let (_permit, mut pg) = match tokio::time::timeout(connect_timeout, backend).await {
        Ok(Ok(connected)) => connected,
        Ok(Err(why)) => {
            shared.stats.connection(Outcome::NoBackend);
            fatal(&mut client, "08006", &why).await;
            return;
        }
        Err(_) => {
            shared.stats.connection(Outcome::NoBackend);
            fatal(
                &mut client,
                "53300",
                "no PostgreSQL connection free within proxy.connect_timeout_ms (proxy.pool_size are in use)",
            )
            .await;
            return;
        }
    };
    let _backend = shared.stats.backend();
    shared.stats.connection(Outcome::Served);
    if pg.write_all(&startup).await.is_err() {
        fatal(
            &mut client,
            "08006",
            "PostgreSQL closed the connection at startup",
        )
        .await;
        return;
    }
    // Only the legacy database holds the layout's tables: a session on
    // another one is relayed without a look at its statements.
    let layout = database == shared.database;
    if let Err(e) = crate::relay::relay(&shared, &mut client, &mut pg, buf, (layout, &user)).await {
        tracing::debug!("session: {e}");
        if !matches!(e, Fatal::Io(_)) {
            let _ = client
                .write_all(&frame::error("FATAL", e.sqlstate(), &e.to_string(), None))
                .await;
        }
    }
    let _ = client.shutdown().await;
}

/// An app's connection: plain TCP, or TLS when `proxy.tls_cert` is set
/// and the app asked for it.
pub type Opened = Either<TcpStream, TlsStream<TcpStream>>;

/// Reads the opening packets: an SSL request is answered with TLS when
/// the proxy has a certificate (then the rest is read encrypted), `N`
/// otherwise, as is a GSS request; then a startup packet or a cancel
/// request. `client` is `None` after a failed handshake.
async fn open(
    client: &mut Option<Opened>,
    buf: &mut BytesMut,
    tls: Option<&TlsAcceptor>,
) -> Result<Opening, Fatal> {
    let closed = || Fatal::Protocol("the client closed during startup".into());
    for _ in 0..3 {
        let Some(stream) = client.as_mut() else {
            return Err(closed());
        };
        while buf.len() < 8 {
            if stream.read_buf(buf).await? == 0 {
                return Err(closed());
            }
        }
        let len = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
        if !(8..=MAX_STARTUP).contains(&len) {
            return Err(Fatal::Protocol(format!(
                "invalid length of startup packet: {len}"
            )));
        }
        while buf.len() < len {
            if stream.read_buf(buf).await? == 0 {
                return Err(closed());
            }
        }
        let code = i32::from_be_bytes([buf[4], buf[5], buf[6], buf[7]]);
        match code {
            SSL_REQUEST if len == 8 && tls.is_some() && matches!(stream, Either::Left(_)) => {
                let _ = buf.split_to(len);
                if !buf.is_empty() {
                    // Bytes sent before the handshake would be taken as
                    // if they came encrypted (CVE-2021-23214).
                    return Err(Fatal::Protocol(
                        "data arrived after the SSL request, before the handshake".into(),
                    ));
                }
                stream.write_all(b"S").await?;
                let Some(Either::Left(tcp)) = client.take() else {
                    return Err(closed());
                };
                let acceptor = tls.ok_or_else(closed)?;
                let encrypted = acceptor
                    .accept(tcp)
                    .await
                    .map_err(|e| Fatal::Protocol(format!("TLS handshake: {e}")))?;
                *client = Some(Either::Right(encrypted));
            }
            SSL_REQUEST | GSS_REQUEST if len == 8 => {
                let _ = buf.split_to(len);
                stream.write_all(b"N").await?;
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
                    Some(_) if tls.is_some() && matches!(stream, Either::Left(_)) => {
                        return Err(Fatal::Refused(
                            "the proxy accepts TLS connections only (proxy.tls_cert is set): \
                             connect with sslmode=require or stricter"
                                .into(),
                        ))
                    }
                    Some(s) if s.parameters.contains_key("user") => {
                        // PostgreSQL's default: the database named as the user.
                        let database = s
                            .parameters
                            .get("database")
                            .or_else(|| s.parameters.get("user"))
                            .cloned()
                            .unwrap_or_default();
                        let user = s.parameters.get("user").cloned().unwrap_or_default();
                        return Ok(Opening::Start(packet, database, user));
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
async fn fatal(client: &mut Opened, sqlstate: &str, message: &str) {
    let _ = client
        .write_all(&frame::error("FATAL", sqlstate, message, None))
        .await;
    let _ = client.shutdown().await;
}
