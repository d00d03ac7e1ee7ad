//! Sessions to the legacy PostgreSQL database, all configured alike.
//!
//! Every session runs in UTC with ISO dates and a statement timeout, so
//! that what a value reads as never depends on the server's defaults, and a
//! stuck statement fails instead of hanging its caller.

use std::str::FromStr;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::PgPool;

use crate::error::Error;

/// The `[legacy]` section, or an error saying it is needed.
pub fn legacy_config(config: &config::Config) -> Result<&config::Legacy, Error> {
    config.legacy.as_ref().ok_or_else(|| {
        Error::Config("no [legacy] section: the legacy PostgreSQL database's url is needed".into())
    })
}

/// The `[layout]` section, or an error saying it is needed.
pub fn layout_config(config: &config::Config) -> Result<&config::Layout, Error> {
    config.layout.as_ref().ok_or_else(|| {
        Error::Config("no [layout] section: the legacy tables' mapping to columns is needed".into())
    })
}

/// Connection options for `url` with the toolkit's session settings.
pub fn options(url: &str, statement_timeout_ms: u64) -> Result<PgConnectOptions, Error> {
    let options = PgConnectOptions::from_str(url)
        .map_err(|e| Error::Config(format!("legacy.url {url:?}: {e}")))?;
    let timeout = statement_timeout_ms.to_string();
    Ok(options.application_name("mezzanine").options([
        ("TimeZone", "UTC"),
        ("DateStyle", "ISO, YMD"),
        ("IntervalStyle", "iso_8601"),
        ("extra_float_digits", "1"),
        ("statement_timeout", timeout.as_str()),
    ]))
}

/// A pool to the legacy database (connections are opened lazily; the first
/// query says whether the server is there).
pub fn pool(legacy: &config::Legacy) -> Result<PgPool, Error> {
    Ok(PgPoolOptions::new()
        .max_connections(legacy.max_connections)
        .acquire_timeout(Duration::from_millis(legacy.statement_timeout_ms.max(1000)))
        .connect_lazy_with(options(&legacy.url, legacy.statement_timeout_ms)?))
}

/// `host:port/database` of a URL, without user or password, for messages.
pub fn label(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(u) => format!(
            "postgres {}:{}{}",
            u.host_str().unwrap_or("?"),
            u.port().unwrap_or(5432),
            u.path()
        ),
        Err(_) => "postgres".to_string(),
    }
}
