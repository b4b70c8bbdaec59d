//! Config providers (KIP-297) end to end, with a real control plane, a real executor and a
//! test-owned PostgreSQL that asks the connector's role for its password
//! (`scram-sha-256`): the password lives in a properties file under the executor's
//! `--config-provider-root`, the connector's config says `${file:db.properties:password}`,
//! and the connector provisions its audit objects, so the password reached the plugin;
//! the password then never comes back out of an admin answer, the audit trail, a process
//! log or the store file. A reference that cannot be resolved fails the start naming
//! the reference; one to a provider Wharf does not implement, or one this executor does
//! not offer, is refused at create naming it.
//!
//! Build first: `cargo build -p wharf-control-plane -p wharf-executor-stock`.

use serde_json::{Value, json};
use wharf_harness::cluster::{INVALID_ARGUMENT, TestCluster, bytes_of};
use wharf_harness::postgres_tls::TlsPostgres;
use wharf_harness::tokio_postgres::Client;

/// The role the connector logs in as, and its password: what must never come back out.
const ROLE: &str = "wharf_provided";
const PASSWORD: &str = "pr0vided-S3cret-7c1f";
const DB: &str = "wharf_providers";

/// Audit tables in the database (the connector's start creates one).
async fn audit_tables(sql: &Client) -> i64 {
    sql.query_one(
        "SELECT count(*) FROM pg_class WHERE relname LIKE 'wharf\\_audit%' AND relkind = 'r'",
        &[],
    )
    .await
    .expect("catalog query")
    .get(0)
}

/// Makes PostgreSQL ask `ROLE` for its password over TCP (the test cluster trusts every
/// other role): a line for it before the trust lines of `pg_hba.conf`, then a reload.
async fn require_password(sql: &Client) {
    let hba: String = sql
        .query_one("SHOW hba_file", &[])
        .await
        .expect("hba_file")
        .get(0);
    let old = std::fs::read_to_string(&hba).expect("read pg_hba.conf");
    std::fs::write(
        &hba,
        format!(
            "hostssl all {ROLE} 127.0.0.1/32 scram-sha-256\nhostssl all {ROLE} ::1/128 scram-sha-256\n{old}"
        ),
    )
    .expect("write pg_hba.conf");
    sql.batch_execute(&format!(
        "CREATE ROLE {ROLE} LOGIN SUPERUSER PASSWORD '{PASSWORD}'; SELECT pg_reload_conf();"
    ))
    .await
    .expect("role and reload");
}

fn config(pg: &TlsPostgres, user: &str, password: &str) -> Value {
    json!({
        "connector.class": "postgres-audit",
        "tasks.max": "1",
        "connection.host": "127.0.0.1",
        "connection.port": pg.port.to_string(),
        "connection.user": user,
        "connection.password": password,
        "connection.database": DB,
        "connection.sslmode": "require",
        "tables": "public.t1",
        "topic": "provided",
        "poll.interval.ms": "50",
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_from_a_file_provider_reaches_the_plugin_and_never_comes_back_out() {
    let pg = TlsPostgres::start(&["localhost"]).await;
    let sql = pg.create_db("localhost", DB).await;
    sql.batch_execute("CREATE TABLE t1 (id serial PRIMARY KEY, v text)")
        .await
        .expect("create t1");
    require_password(&sql).await;

    let mut c = TestCluster::start(0).await;
    let secrets = c.dir.path().join("secrets");
    std::fs::create_dir_all(&secrets).expect("secrets dir");
    std::fs::write(
        secrets.join("db.properties"),
        format!("# the database login\nuser = {ROLE}\npassword={PASSWORD}\n"),
    )
    .expect("properties file");
    c.add_executor_with(
        0,
        vec![
            "--config-providers".into(),
            "file".into(),
            "--config-provider-root".into(),
            secrets.display().to_string(),
        ],
    )
    .await;
    c.wait_alive(1).await;
    let mut outputs: Vec<String> = Vec::new();

    // A provider Wharf does not implement is refused at create, naming it.
    let r = c.call(
        "CreateConnector",
        json!({ "name": "vaulted", "config": config(&pg, ROLE, "${vault:secret/db:password}") }),
    );
    assert_eq!(r.code, INVALID_ARGUMENT, "{}", r.err);
    assert!(
        r.err.contains("config[connection.password]") && r.err.contains("\"vault\""),
        "{}",
        r.err
    );
    // A reference in a key the control plane reads itself, which never resolves one.
    let mut policy = config(&pg, ROLE, "${file:db.properties:password}");
    policy["cleanup.policy"] = json!("${file:db.properties:policy}");
    let r = c.call(
        "CreateConnector",
        json!({ "name": "policy-ref", "config": policy }),
    );
    assert_eq!(r.code, INVALID_ARGUMENT, "{}", r.err);
    assert!(
        r.err.contains("config[cleanup.policy]") && r.err.contains("runtime key"),
        "{}",
        r.err
    );
    // One Wharf implements but this executor does not offer: the executor's checks say
    // so at create (the control plane asks it, as for a plugin's validators).
    let r = c.call(
        "CreateConnector",
        json!({ "name": "from-env", "config": config(&pg, ROLE, "${env:PGPASSWORD}") }),
    );
    assert_eq!(r.code, INVALID_ARGUMENT, "{}", r.err);
    assert!(
        r.err.contains("config[connection.password]")
            && r.err.contains("\"env\" is not configured"),
        "{}",
        r.err
    );
    // A path outside the root: refused by the executor's checks too.
    let r = c.call(
        "CreateConnector",
        json!({ "name": "outside", "config": config(&pg, ROLE, "${file:/etc/db.properties:password}") }),
    );
    assert_eq!(r.code, INVALID_ARGUMENT, "{}", r.err);
    assert!(r.err.contains("--config-provider-root"), "{}", r.err);

    // A key the file does not have: accepted (only the start reads the file), and the
    // start fails naming the reference, never a value.
    let r = c.call(
        "CreateConnector",
        json!({ "name": "no-such-key", "config": config(&pg, ROLE, "${file:db.properties:nope}") }),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    let s = c
        .wait_state("no-such-key", "STATE_FAILED", "STATE_FAILED", 0)
        .await;
    let error = s["connector"]["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("config[connection.password]")
            && error.contains("${file:db.properties:nope} cannot be resolved")
            && error.contains("no key \"nope\""),
        "{error}"
    );
    outputs.push(s.to_string());
    assert_eq!(
        audit_tables(&sql).await,
        0,
        "the failed start reached nothing"
    );
    let r = c.call(
        "DeleteConnector",
        json!({ "name": "no-such-key", "force": true, "wait": true }),
    );
    assert_eq!(r.code, 0, "{}", r.err);

    // The server does check the password: a wrong one fails the start.
    let r = c.call(
        "CreateConnector",
        json!({ "name": "wrong-password", "config": config(&pg, ROLE, "not-the-password") }),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    let s = c
        .wait_state("wrong-password", "STATE_FAILED", "STATE_FAILED", 0)
        .await;
    let error = s["connector"]["error"].as_str().unwrap_or_default();
    assert!(error.contains("password authentication failed"), "{error}");
    let r = c.call(
        "DeleteConnector",
        json!({ "name": "wrong-password", "force": true, "wait": true }),
    );
    assert_eq!(r.code, 0, "{}", r.err);

    // The password (and the user, a key that is not secret) from the file: the
    // connector logs in and provisions its audit table.
    let name = "provided";
    let cfg = config(
        &pg,
        "${file:db.properties:user}",
        "${file:db.properties:password}",
    );
    let v = c.call("ValidateConnectorConfig", json!({ "config": cfg }));
    assert_eq!(v.code, 0, "{}", v.err);
    assert_eq!(v.body["errorCount"].as_u64().unwrap_or(0), 0, "{}", v.body);
    outputs.push(v.body.to_string());
    let r = c.call("CreateConnector", json!({ "name": name, "config": cfg }));
    assert_eq!(r.code, 0, "{}", r.err);
    outputs.push(r.body.to_string());
    let s = c
        .wait_state(name, "STATE_RUNNING", "STATE_RUNNING", 1)
        .await;
    outputs.push(s.to_string());
    assert_eq!(
        audit_tables(&sql).await,
        1,
        "the connector logged in with the provided password"
    );
    let got = c.call("GetConnector", json!({ "name": name }));
    assert_eq!(got.code, 0, "{}", got.err);
    // Stored and shown as written: the reference, not the user it stands for; the task
    // config the connector made from the resolved config got its references back.
    assert_eq!(
        got.body["connector"]["config"]["connection.user"], "${file:db.properties:user}",
        "{}",
        got.body
    );
    let tasks = c
        .call("GetConnector", json!({ "name": name }))
        .body
        .to_string();
    assert!(
        !tasks.contains(&format!("\"{ROLE}\"")),
        "a task config carries the resolved user: {tasks}"
    );
    for (method, body) in [
        ("GetConnector", json!({ "name": name })),
        ("ListConnectors", json!({ "expand_status": true })),
        ("GetConnectorStatus", json!({ "name": name })),
        ("ListAuditEntries", json!({})),
    ] {
        let r = c.call(method, body);
        assert_eq!(r.code, 0, "{method}: {}", r.err);
        outputs.push(r.body.to_string());
    }
    // A change reaches the log through the plugin (its offset is committed).
    sql.batch_execute("INSERT INTO t1 (v) VALUES ('row')")
        .await
        .expect("insert");
    wharf_harness::wait_until(
        "the change's offset committed",
        wharf_harness::cluster::CONVERGE,
        || async {
            let r = c.call("GetOffsets", json!({ "name": name }));
            r.body["offsets"]
                .as_array()
                .is_some_and(|a| !a.is_empty())
                .then_some(())
        },
    )
    .await;
    let store = bytes_of(&c.store_file());
    let del = c.call("DeleteConnector", json!({ "name": name, "wait": true }));
    assert_eq!(del.body["deleted"], true, "{} {}", del.body, del.err);
    assert_eq!(
        audit_tables(&sql).await,
        0,
        "the deletion's cleanup logged in with the provided password too"
    );
    outputs.push(c.call("ListAuditEntries", json!({})).body.to_string());

    for out in &outputs {
        assert!(
            !out.contains(PASSWORD),
            "password in an admin answer: {out}"
        );
    }
    let needle = PASSWORD.as_bytes();
    assert!(
        !store.windows(needle.len()).any(|w| w == needle),
        "password in the store file"
    );
    let mut logs = vec![c.cp_log()];
    logs.extend(c.executors.iter().map(|e| e.log()));
    for log in logs {
        assert!(!log.contains(PASSWORD), "password in a process log");
    }
}
