//! postgres-audit against a PostgreSQL that admits TCP clients only over TLS
//! (docs/security.md): a test-owned cluster (`wharf_harness::postgres_tls`, certificate for
//! `localhost` only, signed by a CA made here), a real control plane and a real executor.
//!
//! - `verify-full` with the CA: the audit table, function and trigger are in
//!   `pg_catalog`, a row's change is read (its offset is committed), and deletion drops
//!   them again;
//! - `disable` (plaintext): the server refuses; the connector is FAILED with the server's
//!   reason and the hint naming `connection.sslmode`; nothing was created;
//! - `verify-full` to `127.0.0.1`, a name the certificate does not carry: FAILED, the
//!   error says the certificate is not valid for that name;
//! - `verify-full` with the CA of another cluster: FAILED, unknown issuer; `require` with
//!   that CA too (libpq's verify-ca); `require` without a CA, and with the right CA but a
//!   name the certificate lacks, connect (encryption only / chain only) and clean up;
//! - a bad `connection.sslmode` value is refused at create, naming the key, and so is
//!   `verify-full` without `connection.sslrootcert` (ValidateConnectorConfig says why).
//!
//! Build first: `cargo build -p wharf-control-plane -p wharf-executor-stock`.

use serde_json::{Value, json};
use wharf_harness::cluster::{CONVERGE, INVALID_ARGUMENT, NOT_FOUND, TestCluster};
use wharf_harness::postgres_tls::{TlsPostgres, write_ca_and_server_cert};
use wharf_harness::tokio_postgres::Client;
use wharf_harness::wait_until;

/// The only name in the server's certificate.
const CERT_HOST: &str = "localhost";
const DB: &str = "wharf_tls";

/// `(audit tables, trigger functions, triggers)` in the database.
async fn objects(sql: &Client) -> (i64, i64, i64) {
    let row = sql
        .query_one(
            "SELECT (SELECT count(*) FROM pg_class WHERE relname LIKE 'wharf\\_audit%' AND relkind = 'r'),
                    (SELECT count(*) FROM pg_proc WHERE proname LIKE 'wharf\\_audit%'),
                    (SELECT count(*) FROM pg_trigger WHERE NOT tgisinternal)",
            &[],
        )
        .await
        .expect("catalog query");
    (row.get(0), row.get(1), row.get(2))
}

fn config(pg: &TlsPostgres, host: &str, sslmode: &str, ca: &str) -> Value {
    json!({
        "connector.class": "postgres-audit",
        "tasks.max": "1",
        "connection.host": host,
        "connection.port": pg.port.to_string(),
        "connection.user": "postgres",
        "connection.database": DB,
        "connection.sslmode": sslmode,
        "connection.sslrootcert": ca,
        "tables": "public.t1",
        "topic": "tls-changes",
        "poll.interval.ms": "50",
    })
}

/// Creates `name`, waits until it is FAILED, returns its error text, and deletes it
/// with force (its cleanup could not reach the database either).
async fn failed_start(c: &TestCluster, name: &str, config: Value) -> String {
    let r = c.call("CreateConnector", json!({ "name": name, "config": config }));
    assert_eq!(r.code, 0, "create {name}: {}", r.err);
    let s = c.wait_state(name, "STATE_FAILED", "STATE_FAILED", 0).await;
    let error = s["connector"]["error"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let r = c.call(
        "DeleteConnector",
        json!({ "name": name, "force": true, "wait": true }),
    );
    assert_eq!(r.code, 0, "delete {name}: {}", r.err);
    error
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_audit_speaks_tls_to_a_server_that_requires_it_and_refuses_what_it_must() {
    let pg = TlsPostgres::start(&[CERT_HOST]).await;
    let sql = pg.create_db(CERT_HOST, DB).await;
    sql.batch_execute("CREATE TABLE t1 (id serial PRIMARY KEY, v text)")
        .await
        .expect("create t1");
    let ca = pg.certs.ca.display().to_string();
    let c = TestCluster::start(1).await;

    // A bad mode is refused at create, naming the key; nothing is created.
    let r = c.call(
        "CreateConnector",
        json!({ "name": "bad-mode", "config": config(&pg, CERT_HOST, "verify-ca", &ca) }),
    );
    assert_eq!(r.code, INVALID_ARGUMENT, "{}", r.err);
    assert!(r.err.contains("connection.sslmode"), "{}", r.err);
    assert_eq!(
        c.call("GetConnectorStatus", json!({ "name": "bad-mode" }))
            .code,
        NOT_FOUND
    );

    // verify-full without a CA file is refused at create, naming the file's key: it used to
    // pass, fail at start and leave a deletion that could not clean up (no parsed config)
    // stuck until forced.
    let r = c.call(
        "CreateConnector",
        json!({ "name": "no-root", "config": config(&pg, CERT_HOST, "verify-full", "") }),
    );
    assert_eq!(r.code, INVALID_ARGUMENT, "{}", r.err);
    assert!(
        r.err.contains("config[connection.sslrootcert]") && r.err.contains("verify-full"),
        "{}",
        r.err
    );
    assert_eq!(
        c.call("GetConnectorStatus", json!({ "name": "no-root" }))
            .code,
        NOT_FOUND
    );
    let mut no_root = config(&pg, CERT_HOST, "verify-full", "");
    no_root
        .as_object_mut()
        .expect("object")
        .remove("connection.sslrootcert");
    let r = c.call("ValidateConnectorConfig", json!({ "config": no_root }));
    assert_eq!(r.code, 0, "{}", r.err);
    let root = r.body["configs"]
        .as_array()
        .and_then(|a| a.iter().find(|v| v["name"] == "connection.sslrootcert"))
        .cloned()
        .unwrap_or_default();
    assert!(
        root["errors"][0]
            .as_str()
            .is_some_and(|e| e.contains("required when connection.sslmode")),
        "{root}"
    );

    // Plaintext: the server's pg_hba.conf has hostssl lines only.
    let error = failed_start(&c, "plain", config(&pg, CERT_HOST, "disable", &ca)).await;
    assert!(
        error.contains("no encryption") && error.contains("connection.sslmode"),
        "{error}"
    );
    // A name the certificate does not carry.
    let error = failed_start(
        &c,
        "wrong-name",
        config(&pg, "127.0.0.1", "verify-full", &ca),
    )
    .await;
    assert!(
        error.contains("TLS") && error.contains("not valid for name"),
        "{error}"
    );
    // The CA of another cluster.
    let other = tempfile::tempdir().expect("temp dir");
    let other_ca = write_ca_and_server_cert(other.path(), &[CERT_HOST])
        .ca
        .display()
        .to_string();
    let error = failed_start(
        &c,
        "wrong-ca",
        config(&pg, CERT_HOST, "verify-full", &other_ca),
    )
    .await;
    assert!(
        error.contains("UnknownIssuer") || error.contains("unknown issuer"),
        "{error}"
    );
    assert_eq!(
        objects(&sql).await,
        (0, 0, 0),
        "the refused starts created nothing"
    );

    // require with a root file checks the chain (libpq's verify-ca): another CA fails.
    let error = failed_start(
        &c,
        "require-wrong-ca",
        config(&pg, CERT_HOST, "require", &other_ca),
    )
    .await;
    assert!(
        error.contains("UnknownIssuer") || error.contains("unknown issuer"),
        "{error}"
    );

    // require: encrypted, the name is not checked (with the CA: the chain is), so
    // 127.0.0.1 works; each provisions, then its deletion drops what it made.
    for (name, ca) in [("require-any", ""), ("require-ca", ca.as_str())] {
        let r = c.call(
            "CreateConnector",
            json!({ "name": name, "config": config(&pg, "127.0.0.1", "require", ca) }),
        );
        assert_eq!(r.code, 0, "{name}: {}", r.err);
        c.wait_state(name, "STATE_RUNNING", "STATE_RUNNING", 1)
            .await;
        assert_eq!(objects(&sql).await, (1, 1, 1), "{name} provisioned");
        let r = c.call(
            "DeleteConnector",
            json!({ "name": name, "wait": true, "wait_timeout_ms": 30000 }),
        );
        assert_eq!(r.code, 0, "{name}: {}", r.err);
        assert_eq!(objects(&sql).await, (0, 0, 0), "{name} cleaned up");
    }

    // verify-full with the cluster's CA and the certificate's name.
    let r = c.call(
        "CreateConnector",
        json!({ "name": "audited", "config": config(&pg, CERT_HOST, "verify-full", &ca) }),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    c.wait_state("audited", "STATE_RUNNING", "STATE_RUNNING", 1)
        .await;
    assert_eq!(
        objects(&sql).await,
        (1, 1, 1),
        "audit table, function, trigger"
    );

    sql.batch_execute("INSERT INTO t1 (v) VALUES ('over tls')")
        .await
        .expect("insert");
    wait_until(
        "the audited row's offset to be committed",
        CONVERGE,
        || async {
            let r = c.call("GetOffsets", json!({ "name": "audited" }));
            let offsets = r.body["offsets"].as_array().cloned().unwrap_or_default();
            offsets
                .iter()
                .any(|o| {
                    o["partition"].as_str().is_some_and(|p| p.contains("t1"))
                        && o["offset"].as_str().is_some_and(|v| v.contains("\"id\":1"))
                })
                .then_some(())
        },
    )
    .await;

    let r = c.call(
        "DeleteConnector",
        json!({ "name": "audited", "wait": true, "wait_timeout_ms": 30000 }),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    assert_eq!(r.body["deleted"], true, "{}", r.body);
    assert_eq!(
        objects(&sql).await,
        (0, 0, 0),
        "the deletion's cleanup (over TLS) dropped everything"
    );
}
