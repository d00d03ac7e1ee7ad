//! Encrypted connections: both drivers are built with rustls, and the
//! toolkit reaches PostgreSQL and MariaDB with verify-full, through a CA
//! the test makes, on a private dev cluster whose servers have TLS on.

use devcluster::{DevCluster, Spec};
use schemaless::mysql::schema;
use schemaless::{CellStore, MySqlStore, ReadFrom};
use serde_json::json;
use sqlx::{Connection, Row};

use crate::harness::{cell, column, row};

/// (CA certificate, server certificate for 127.0.0.1 and localhost, its
/// key), in PEM.
pub(crate) fn certificates() -> (String, String, String) {
    let (ca, server, _) = certificates_with_client();
    (ca, server.0, server.1)
}

/// The CA's certificate, a server's certificate and key (127.0.0.1 and
/// localhost) and a client's (CN `mezzanine proxy`), in PEM, all signed
/// by that CA.
fn certificates_with_client() -> (String, (String, String), (String, String)) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, "mezzanine test CA");
    ca.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca, ca_key);
    let signed = |names: Vec<String>, cn: &str, usage: rcgen::ExtendedKeyUsagePurpose| {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(names).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        params.extended_key_usages = vec![usage];
        let cert = params.signed_by(&key, &issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    };
    let server = signed(
        vec!["127.0.0.1".to_string(), "localhost".into()],
        "127.0.0.1",
        rcgen::ExtendedKeyUsagePurpose::ServerAuth,
    );
    let client = signed(
        Vec::new(),
        "mezzanine proxy",
        rcgen::ExtendedKeyUsagePurpose::ClientAuth,
    );
    (ca_cert.pem(), server, client)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_full_reaches_both_servers_and_a_wrong_ca_is_refused() {
    let cluster = DevCluster::private(Spec::free_ports(&["t"], 1).unwrap())
        .await
        .unwrap();
    let (ca, cert, key) = certificates();
    cluster.enable_tls(&cert, &key, &ca).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("ca.crt");
    std::fs::write(&ca_file, &ca).unwrap();
    let (other_ca, _, _) = certificates();
    let other_ca_file = dir.path().join("other-ca.crt");
    std::fs::write(&other_ca_file, &other_ca).unwrap();
    let (ca_file, other_ca_file) = (
        ca_file.to_str().unwrap().to_string(),
        other_ca_file.to_str().unwrap().to_string(),
    );

    // PostgreSQL: the session is encrypted, verified against the CA.
    let pg = |ca: &str| {
        format!(
            "{}?sslmode=verify-full&sslrootcert={ca}",
            cluster.postgres_url("postgres")
        )
    };
    let mut conn = sqlx::PgConnection::connect(&pg(&ca_file)).await.unwrap();
    let ssl: bool = sqlx::query_scalar("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert!(ssl, "the PostgreSQL session is not encrypted");
    conn.close().await.unwrap();
    let refused = sqlx::PgConnection::connect(&pg(&other_ca_file)).await;
    assert!(refused.is_err(), "a certificate of another CA was accepted");

    // MariaDB likewise.
    let master = cluster.mysql_url("t-master").unwrap();
    let my = |ca: &str| format!("{master}?ssl-mode=VERIFY_IDENTITY&ssl-ca={ca}");
    let mut conn = sqlx::MySqlConnection::connect(&my(&ca_file)).await.unwrap();
    let cipher: String = sqlx::query("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
        .fetch_one(&mut conn)
        .await
        .unwrap()
        .try_get::<String, _>(1)
        .unwrap();
    assert!(!cipher.is_empty(), "the MariaDB session is not encrypted");
    conn.close().await.unwrap();
    let refused = sqlx::MySqlConnection::connect(&my(&other_ca_file)).await;
    assert!(refused.is_err(), "a certificate of another CA was accepted");

    // The store through a config whose URLs ask for TLS: written, read
    // back from the master and the minion, and the config is valid.
    let minion = cluster.mysql_url("t-minion1").unwrap();
    let text = format!(
        "[instance]\nname = \"tls\"\nshard_count = 2\n\n[[cluster]]\nname = \"t\"\n\
         master = \"{}\"\nminions = [\"{minion}?ssl-mode=VERIFY_IDENTITY&ssl-ca={ca_file}\"]\n\
         shards = \"0-1\"\n\n[legacy]\nurl = \"{}\"\n",
        my(&ca_file),
        pg(&ca_file)
    );
    let config = config::Config::parse(&text, "tls.toml").unwrap();
    let topology = schemaless::mysql::Topology::from_config(&config).unwrap();
    schema::apply(&topology).await.unwrap();
    topology.close().await;
    let store = MySqlStore::connect(&config).unwrap();
    store
        .put_cells(vec![cell(7, "BASE", 1, json!({"secret": "over TLS"}))])
        .await
        .unwrap();
    cluster
        .wait_all_caught_up(std::time::Duration::from_secs(30))
        .await
        .unwrap();
    for from in [ReadFrom::Master, ReadFrom::Minion] {
        let got = store
            .get_cell_latest(&row(7), &column("BASE"), from)
            .await
            .unwrap()
            .expect("the cell");
        assert_eq!(got.cell.body.fields()["secret"], json!("over TLS"));
    }
    let legacy = legacy::connection::pool(config.legacy.as_ref().unwrap()).unwrap();
    let ssl: bool = sqlx::query_scalar("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
        .fetch_one(&legacy)
        .await
        .unwrap();
    assert!(ssl, "the legacy pool is not encrypted");
}

/// The proxy's hop to PostgreSQL is encrypted as `legacy.url`'s
/// `sslmode` asks, the certificate checked against `sslrootcert`: apps
/// connecting in plain text to the proxy reach a PostgreSQL session that
/// is TLS, and a server signed by another CA is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_reaches_postgresql_over_tls_as_sslmode_asks() {
    use proxy::upstream::Upstream;
    use tokio_util::either::Either;

    let cluster = DevCluster::private(Spec::free_ports(&["u"], 1).unwrap())
        .await
        .unwrap();
    let (ca, (cert, key), (client_cert, client_key)) = certificates_with_client();
    cluster.enable_tls(&cert, &key, &ca).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("ca.crt");
    std::fs::write(&ca_file, &ca).unwrap();
    let (client_cert_file, client_key_file) =
        (dir.path().join("proxy.crt"), dir.path().join("proxy.key"));
    std::fs::write(&client_cert_file, &client_cert).unwrap();
    std::fs::write(&client_key_file, &client_key).unwrap();
    let other_ca_file = dir.path().join("other-ca.crt");
    std::fs::write(&other_ca_file, certificates().0).unwrap();
    let (ca_file, other_ca_file) = (
        ca_file.to_str().unwrap().to_string(),
        other_ca_file.to_str().unwrap().to_string(),
    );
    let base = cluster.postgres_url("postgres");

    // Each mode's connection, as libpq would make it.
    for (query, tls) in [
        (String::new(), true),
        ("?sslmode=disable".to_string(), false),
        ("?sslmode=require".to_string(), true),
        (format!("?sslmode=require&sslrootcert={ca_file}"), true),
        (format!("?sslmode=verify-ca&sslrootcert={ca_file}"), true),
        (format!("?sslmode=verify-full&sslrootcert={ca_file}"), true),
    ] {
        let up = Upstream::from_url(&format!("{base}{query}")).await.unwrap();
        let backend = up
            .connect()
            .await
            .unwrap_or_else(|e| panic!("{query}: {e}"));
        assert_eq!(matches!(backend, Either::Right(_)), tls, "{query}");
    }
    for query in [
        format!("?sslmode=verify-full&sslrootcert={other_ca_file}"),
        format!("?sslmode=verify-ca&sslrootcert={other_ca_file}"),
        format!("?sslmode=require&sslrootcert={other_ca_file}"),
    ] {
        let up = Upstream::from_url(&format!("{base}{query}")).await.unwrap();
        let err = up.connect().await.expect_err("another CA's server");
        assert!(
            err.contains("TLS handshake") && err.contains("certificate"),
            "{query}: {err}"
        );
    }

    // The proxy, its facade and its hop all on verify-full, with a
    // client certificate: an app's plain session through it is a TLS
    // session in PostgreSQL, which saw the proxy's certificate.
    let legacy_url = format!(
        "{base}?sslmode=verify-full&sslrootcert={ca_file}&sslcert={}&sslkey={}",
        client_cert_file.display(),
        client_key_file.display()
    );
    let pool = sqlx::PgPool::connect(&legacy_url).await.unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(legacy::trips::ddl(
        "public",
        Some("uuid"),
    )))
    .execute(&pool)
    .await
    .unwrap();
    let text = format!(
        "{}\n{}{}[legacy]\nurl = \"{legacy_url}\"\n{}\n[proxy]\n",
        cluster.config_toml("tlsproxy", 2),
        crate::harness::TEST_GATES,
        crate::harness::TEST_CAPTURE,
        crate::harness::example_layout()
    );
    let config = config::Config::parse(&text, "tls-proxy.toml").unwrap();
    let topology = schemaless::mysql::Topology::from_config(&config).unwrap();
    schema::apply(&topology).await.unwrap();
    topology.close().await;
    let file = crate::harness::config_file(&text);
    let proxy = crate::proxy::ProxyProcess::start(file.path(), "127.0.0.1:0");
    let through = format!("postgres://postgres@{}/postgres", proxy.addr);
    let (ok, out, err) = crate::proxy::psql(
        &through,
        "\\set ON_ERROR_STOP 1\n\\pset tuples_only on\n\\pset format unaligned\n\
         SELECT ssl, client_dn FROM pg_stat_ssl WHERE pid = pg_backend_pid();\n\
         SELECT count(*) FROM trips;\n",
    );
    assert!(ok, "{out}{err}");
    let lines: Vec<&str> = out
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("Output format"))
        .collect();
    assert_eq!(lines, ["t|/CN=mezzanine proxy", "0"], "{out}");
    pool.close().await;
}
