//! Database URLs: what may be shown of them, which server they name, and
//! whether their connection is encrypted.
//!
//! Every message, label and log line that names a server goes through
//! [`redact`], which reads the URL with the same parser the drivers use,
//! so a password with `@`, `:` or `%40` in it never leaks a part of itself.

/// The URL with its password replaced by `***`. Text that is not a URL is
/// shown up to its scheme only: where its password would be is unknown.
pub fn redact(text: &str) -> String {
    match url::Url::parse(text) {
        // `user:secret@host` parses too, as scheme `user` and path
        // `secret@host`: only a URL with a host is shown.
        Ok(mut url) if url.has_host() => {
            if url.password().is_some() {
                // Only a URL that cannot have a host refuses a password,
                // and it has none to hide then.
                let _ = url.set_password(Some("***"));
            }
            url.to_string()
        }
        _ => match text.split_once("://") {
            Some((scheme, _)) if !scheme.contains(['@', ':', '/']) => {
                format!("{scheme}://<not a URL>")
            }
            _ => "<not a URL>".to_string(),
        },
    }
}

/// The percent-decoded user and password of a URL, as the drivers decode
/// them (`+` stays a plus sign; it is not form encoding).
pub fn credentials(url: &url::Url) -> (String, String) {
    let decode = percent_decode;
    (decode(url.username()), decode(url.password().unwrap_or("")))
}

/// `%XX` sequences as bytes, the rest as is; invalid UTF-8 is replaced.
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The server a URL names: lowercased host and port (with the scheme's
/// default), so that two spellings of one server compare equal.
pub fn server(text: &str, default_port: u16) -> Option<(String, u16)> {
    let url = url::Url::parse(text).ok()?;
    let host = url.host_str()?.to_ascii_lowercase();
    let host = match host.as_str() {
        "localhost" | "[::1]" | "::1" => "127.0.0.1".to_string(),
        _ => host,
    };
    Some((host, url.port().unwrap_or(default_port)))
}

/// Whether a URL's host is this machine's loopback.
pub fn is_loopback(text: &str) -> bool {
    server(text, 0)
        .is_some_and(|(host, _)| host == "127.0.0.1" || host.starts_with("127.") || host == "[::1]")
}

/// The TLS mode a URL asks for, `None` when it asks for none.
pub fn tls_mode(text: &str) -> Option<String> {
    let url = url::Url::parse(text).ok()?;
    let key = match url.scheme() {
        "postgres" | "postgresql" => "sslmode",
        _ => "ssl-mode",
    };
    url.query_pairs()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.into_owned())
}

/// Whether a URL's connection is encrypted for certain: a TLS mode that
/// refuses plain text (`prefer` falls back to it silently).
pub fn requires_tls(text: &str) -> bool {
    tls_mode(text).is_some_and(|mode| {
        matches!(
            mode.to_ascii_lowercase().as_str(),
            "require" | "verify-ca" | "verify-full" | "required" | "verify_ca" | "verify_identity"
        )
    })
}

/// Checks the TLS options of a URL: a known mode, and a CA file that
/// exists where one is named. The drivers' own errors would otherwise
/// come at the first connection, long after `config check` said yes.
pub(crate) fn check_tls(text: &str) -> Result<(), String> {
    let Ok(url) = url::Url::parse(text) else {
        return Ok(());
    };
    let postgres = matches!(url.scheme(), "postgres" | "postgresql");
    const PG_MODES: [&str; 6] = [
        "disable",
        "allow",
        "prefer",
        "require",
        "verify-ca",
        "verify-full",
    ];
    const MY_MODES: [&str; 5] = [
        "DISABLED",
        "PREFERRED",
        "REQUIRED",
        "VERIFY_CA",
        "VERIFY_IDENTITY",
    ];
    for (key, value) in url.query_pairs() {
        let problem = match (postgres, key.as_ref()) {
            (true, "sslmode") if !PG_MODES.contains(&value.as_ref()) => {
                format!("sslmode {value:?} is not one of {}", PG_MODES.join(", "))
            }
            (false, "ssl-mode") if !MY_MODES.contains(&value.to_ascii_uppercase().as_str()) => {
                format!("ssl-mode {value:?} is not one of {}", MY_MODES.join(", "))
            }
            (true, "sslrootcert" | "sslcert" | "sslkey")
            | (false, "ssl-ca" | "ssl-cert" | "ssl-key")
                if !std::path::Path::new(value.as_ref()).is_file() =>
            {
                format!("{key} {value:?} is not a readable file")
            }
            _ => continue,
        };
        return Err(format!("{}: {problem}", redact(text)));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_show_however_they_are_spelled() {
        for (url, shown) in [
            ("mysql://root:s3cret@db:3306", "mysql://root:***@db:3306"),
            ("mysql://root:p@ss@db:3306", "mysql://root:***@db:3306"),
            ("mysql://root:p%40ss@db:3306", "mysql://root:***@db:3306"),
            (
                "postgres://app:a:b@db/trips?sslmode=require",
                "postgres://app:***@db/trips?sslmode=require",
            ),
            ("mysql://root@db:3306", "mysql://root@db:3306"),
        ] {
            assert_eq!(redact(url), shown, "{url}");
        }
        assert_eq!(
            redact("mysql://root:s3cret@db:99999"),
            "mysql://<not a URL>"
        );
        assert_eq!(redact("root:s3cret@db"), "<not a URL>");
    }

    #[test]
    fn credentials_decode_as_the_drivers_do() {
        let url = url::Url::parse("mysql://re%70l:a+b%2Bc%40d@h:1").unwrap();
        assert_eq!(credentials(&url), ("repl".into(), "a+b+c@d".into()));
        let url = url::Url::parse("mysql://root@h:1").unwrap();
        assert_eq!(credentials(&url), ("root".into(), String::new()));
        assert_eq!(percent_decode("50%"), "50%");
        assert_eq!(percent_decode("%4"), "%4");
        assert_eq!(percent_decode("%41%"), "A%");
    }

    #[test]
    fn one_server_two_spellings() {
        assert_eq!(
            server("mysql://root@LOCALHOST:3306", 3306),
            server("mysql://other:pw@127.0.0.1", 3306)
        );
        assert_ne!(
            server("mysql://root@127.0.0.1:3307", 3306),
            server("mysql://root@127.0.0.1", 3306)
        );
    }

    #[test]
    fn tls_modes() {
        assert!(requires_tls("postgres://u@h/d?sslmode=verify-full"));
        assert!(requires_tls("mysql://u@h?ssl-mode=REQUIRED"));
        assert!(!requires_tls("postgres://u@h/d?sslmode=prefer"));
        assert!(!requires_tls("mysql://u@h"));
        assert!(check_tls("postgres://u:pw@h/d?sslmode=bogus")
            .unwrap_err()
            .contains("postgres://u:***@h/d"));
        assert!(check_tls("mysql://u@h?ssl-mode=verify_identity").is_ok());
        assert!(check_tls("mysql://u@h?ssl-ca=/no/such/ca.pem").is_err());
    }
}
