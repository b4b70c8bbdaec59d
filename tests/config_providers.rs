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

/// What a failed start may show. The plugin's start error quotes the value a reference
/// resolved to and a PASSWORD-typed value (`test.start.fail.message`, `test.secret`);
/// the executor hides both before the error becomes a status, a log line or a stored
/// record. A reference to one of the executor's own variables (`${env:WHARF_*}`) is
/// refused at create and by validate, naming the key. A start that failed on an
/// unresolvable reference leaves an instance whose stop completes at once: the
/// connector is stopped (`false`) and deleted without `force` (`true`), promptly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_start_shows_no_resolved_or_secret_value_and_its_stops_complete_promptly() {
    const RESOLVED: &str = "res0lved-Pr0vider-Val-93a1";
    const SECRET: &str = "typed-S3cret-Val-52be";
    let mut c = TestCluster::start(0).await;
    let secrets = c.dir.path().join("secrets");
    std::fs::create_dir_all(&secrets).expect("secrets dir");
    std::fs::write(
        secrets.join("s.properties"),
        format!("password={RESOLVED}\n"),
    )
    .expect("properties file");
    c.add_executor_with(
        0,
        vec![
            "--config-providers".into(),
            "file,env".into(),
            "--config-provider-root".into(),
            secrets.display().to_string(),
        ],
    )
    .await;
    c.wait_alive(1).await;
    let mut outputs: Vec<String> = Vec::new();

    // The executor's own variables: refused before anything is stored, naming the key.
    let mut envy = c.source_config("envy", 1);
    envy["test.topic"] = json!("${env:WHARF_NATS_PASSWORD}");
    let r = c.call("CreateConnector", json!({ "name": "envy", "config": envy }));
    assert_eq!(r.code, INVALID_ARGUMENT, "{}", r.err);
    assert!(
        r.err.contains("config[test.topic]") && r.err.contains("own settings"),
        "{}",
        r.err
    );
    let v = c.call("ValidateConnectorConfig", json!({ "config": envy }));
    assert_eq!(v.code, 0, "{}", v.err);
    assert!(
        v.body["errorCount"].as_u64().unwrap_or(0) >= 1
            && v.body.to_string().contains("own settings"),
        "{}",
        v.body
    );
    assert_eq!(
        c.call("GetConnector", json!({ "name": "envy" })).code,
        wharf_harness::cluster::NOT_FOUND
    );

    // A plugin whose start error quotes what it was given.
    let name = "leaky";
    let mut cfg = c.source_config(name, 1);
    cfg["test.start.fail.message"] = json!("login with ${file:s.properties:password} refused");
    cfg["test.secret"] = json!(SECRET);
    let r = c.call("CreateConnector", json!({ "name": name, "config": cfg }));
    assert_eq!(r.code, 0, "{}", r.err);
    let s = c.wait_state(name, "STATE_FAILED", "STATE_FAILED", 0).await;
    let error = s["connector"]["error"].as_str().unwrap_or_default();
    // The whole value that held the reference is hidden too (a URL around a password).
    assert!(
        error.contains("injected start failure: [hidden] (secret [hidden])"),
        "{error}"
    );
    for (method, body) in [
        ("GetConnectorStatus", json!({ "name": name })),
        ("GetConnector", json!({ "name": name })),
        ("ListConnectors", json!({ "expand_status": true })),
        ("ListAuditEntries", json!({})),
    ] {
        let r = c.call(method, body);
        assert_eq!(r.code, 0, "{method}: {}", r.err);
        outputs.push(r.body.to_string());
    }

    // A start that failed on an unresolvable reference: a stop(false) completes at once
    // (the target STOPPED), then the deletion's stop(true), without force.
    let name = "unresolvable";
    let mut cfg = c.source_config(name, 1);
    cfg["test.topic"] = json!("${file:s.properties:nope}");
    let r = c.call("CreateConnector", json!({ "name": name, "config": cfg }));
    assert_eq!(r.code, 0, "{}", r.err);
    let s = c.wait_state(name, "STATE_FAILED", "STATE_FAILED", 0).await;
    let error = s["connector"]["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("config[test.topic]: ${file:s.properties:nope} cannot be resolved"),
        "{error}"
    );
    assert_eq!(c.call("StopConnector", json!({ "name": name })).code, 0);
    let s = c
        .wait_state(name, "STATE_STOPPED", "STATE_STOPPED", 0)
        .await;
    assert!(
        !s.to_string().contains("timed out"),
        "the stop(false) of a never-started instance waited: {s}"
    );
    let began = std::time::Instant::now();
    let del = c.call("DeleteConnector", json!({ "name": name, "wait": true }));
    assert_eq!(del.code, 0, "{}", del.err);
    assert_eq!(del.body["deleted"], true, "{}", del.body);
    assert!(
        began.elapsed() < std::time::Duration::from_secs(10),
        "the deletion took {:?}",
        began.elapsed()
    );
    // Deleted while FAILED, straight from the failed start (a cleanup-only instance
    // fails to resolve the same reference and its stop(true) completes at once).
    let name = "unresolvable-2";
    let mut cfg = c.source_config(name, 1);
    cfg["test.topic"] = json!("${file:s.properties:nope}");
    assert_eq!(
        c.call("CreateConnector", json!({ "name": name, "config": cfg }))
            .code,
        0
    );
    c.wait_state(name, "STATE_FAILED", "STATE_FAILED", 0).await;
    let began = std::time::Instant::now();
    let del = c.call("DeleteConnector", json!({ "name": name, "wait": true }));
    assert_eq!(del.body["deleted"], true, "{} {}", del.body, del.err);
    assert!(
        began.elapsed() < std::time::Duration::from_secs(10),
        "the deletion took {:?}",
        began.elapsed()
    );

    let store = bytes_of(&c.store_file());
    for value in [RESOLVED, SECRET] {
        for out in &outputs {
            assert!(!out.contains(value), "{value} in an admin answer: {out}");
        }
        let needle = value.as_bytes();
        assert!(
            !store.windows(needle.len()).any(|w| w == needle),
            "{value} in the store file"
        );
        let mut logs = vec![c.cp_log()];
        logs.extend(c.executors.iter().map(|e| e.log()));
        for log in logs {
            assert!(!log.contains(value), "{value} in a process log");
        }
    }
    let executor_log = c.executors[0].log();
    assert!(
        executor_log.contains("connector start failed") && executor_log.contains("WARN"),
        "a failed start is a warning"
    );
}
