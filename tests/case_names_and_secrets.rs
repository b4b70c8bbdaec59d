//! Operator scenario 06: a name is either refused with
//! INVALID_ARGUMENT stating the rule, or accepted and then found by GetConnector,
//! GetConnectorStatus and DeleteConnector (also as a property over generated names); a
//! `postgres-audit` password never comes back out of any admin response, any process log,
//! or the control plane's store file (encrypted at rest, see docs/lifecycle.md).
//!
//! Needs PostgreSQL on 127.0.0.1:5432 (trust auth, database `test`). Build first:
//! `cargo build -p wharf-control-plane -p wharf-executor-stock`.

use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, TestRunner};
use serde_json::json;
use wharf_harness::cluster::{INVALID_ARGUMENT, NOT_FOUND, TestCluster, bytes_of};

const PASSWORD: &str = "s3cr3t-pa55";
/// Text of the naming rule every refusal must carry.
const RULE: &str = "names are 1 to 200 characters from A-Z a-z 0-9 . _ -";

/// Creates `name` (STOPPED, so nothing runs) and checks the round trip; returns whether
/// it was accepted.
fn round_trip(c: &TestCluster, name: &str) -> Result<bool, String> {
    let r = c.call(
        "CreateConnector",
        json!({ "name": name, "config": c.source_config("props", 1), "initial_state": "TARGET_STATE_STOPPED" }),
    );
    if r.code == INVALID_ARGUMENT {
        if !r.err.contains(RULE) || !r.err.contains("invalid name") {
            return Err(format!(
                "{name:?} refused without naming the rule: {}",
                r.err
            ));
        }
        return Ok(false);
    }
    if r.code != 0 {
        return Err(format!("{name:?}: create answered {} {}", r.code, r.err));
    }
    let got = c.call("GetConnector", json!({ "name": name }));
    if got.code != 0 || got.body["connector"]["name"] != name {
        return Err(format!("{name:?}: get {} {}", got.code, got.err));
    }
    if c.call("GetConnectorStatus", json!({ "name": name })).code != 0 {
        return Err(format!("{name:?}: status not found"));
    }
    let del = c.call("DeleteConnector", json!({ "name": name, "wait": true }));
    if del.code != 0 || del.body["deleted"] != true {
        return Err(format!(
            "{name:?}: delete {} {} {}",
            del.code, del.body, del.err
        ));
    }
    if c.call("GetConnector", json!({ "name": name })).code != NOT_FOUND {
        return Err(format!("{name:?}: still found after delete"));
    }
    Ok(true)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_that_can_be_created_can_be_deleted() {
    let c = TestCluster::start(1).await;
    let long = "x".repeat(300);
    for (name, accepted) in [
        ("a/b", false),
        ("a%2Fb", false),
        ("  spaced  ", false),
        ("", false),
        (long.as_str(), false),
        ("rtl\u{202e}gnp.exe", false),
        ("Orders", true),
    ] {
        assert_eq!(round_trip(&c, name), Ok(accepted), "{name:?}");
    }
    // One that differs from an existing name only by letter case is another connector.
    let r = c.call("CreateConnector", json!({ "name": "orders", "config": c.source_config("o", 1), "initial_state": "TARGET_STATE_STOPPED" }));
    assert_eq!(r.code, 0, "{}", r.err);
    assert_eq!(round_trip(&c, "ORDERS"), Ok(true));
    assert_eq!(
        c.call("GetConnector", json!({ "name": "orders" })).code,
        0,
        "orders untouched by ORDERS"
    );

    // Property: any generated name either is refused with the rule or round-trips.
    let mut runner = TestRunner::new(ProptestConfig {
        cases: 24,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    let names = prop_oneof![
        "[A-Za-z0-9][A-Za-z0-9._-]{0,20}",
        "[ -~]{0,12}",
        "\\PC{0,6}",
        "[A-Za-z0-9._-]{195,205}",
    ];
    runner
        .run(&names, |name| {
            let accepted = round_trip(&c, &name).map_err(TestCaseError::fail)?;
            prop_assert_eq!(
                accepted,
                wharf::ids::ConnectorName::parse(&name).is_ok(),
                "{:?}",
                name
            );
            Ok(())
        })
        .expect("every generated name refused with the rule or round-tripped");
}

async fn psql(sql: &str) {
    let (client, conn) = wharf_harness::tokio_postgres::connect(
        "host=127.0.0.1 user=postgres dbname=test",
        wharf_harness::tokio_postgres::NoTls,
    )
    .await
    .expect("PostgreSQL on 127.0.0.1:5432");
    tokio::spawn(conn);
    client.batch_execute(sql).await.expect("sql");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_never_comes_back_out() {
    psql("CREATE TABLE IF NOT EXISTS case06_orders (id serial primary key, note text)").await;
    let c = TestCluster::start(2).await;
    let name = "secret-audit";
    let config = json!({
        "connector.class": "postgres-audit",
        "tasks.max": "1",
        "connection.host": "127.0.0.1",
        "connection.port": "5432",
        "connection.user": "postgres",
        "connection.password": PASSWORD,
        "connection.database": "test",
        "tables": "case06_orders",
        "topic": "case06",
    });
    let mut outputs = Vec::new();
    let v = c.call("ValidateConnectorConfig", json!({ "config": config }));
    assert_eq!(v.code, 0, "{}", v.err);
    outputs.push(v.body.to_string());
    let r = c.call("CreateConnector", json!({ "name": name, "config": config }));
    assert_eq!(r.code, 0, "{}", r.err);
    outputs.push(r.body.to_string());
    assert_eq!(
        r.body["connector"]["config"]["connection.password"],
        "[hidden]"
    );
    let watch = c.watch(name);
    c.wait_state(name, "STATE_RUNNING", "STATE_RUNNING", 1)
        .await;
    for (method, body) in [
        ("GetConnector", json!({ "name": name })),
        ("ListConnectors", json!({ "expand_status": true })),
        ("GetConnectorStatus", json!({ "name": name })),
        (
            "PutConnectorConfig",
            json!({ "name": name, "config": config }),
        ),
    ] {
        let r = c.call(method, body);
        assert_eq!(r.code, 0, "{method}: {}", r.err);
        outputs.push(r.body.to_string());
    }
    let store = bytes_of(&c.store_file());
    let del = c.call("DeleteConnector", json!({ "name": name, "wait": true }));
    assert_eq!(del.body["deleted"], true, "{} {}", del.body, del.err);
    outputs.push(del.body.to_string());
    let watched = match watch.wait() {
        Ok(events) => serde_json::Value::Array(events).to_string(),
        Err(failed) => panic!("watch ended with an error: {}", failed.err),
    };
    assert!(
        watched.contains("CONNECTOR_EVENT_TYPE_DELETED"),
        "watch ended with DELETED: {watched}"
    );
    outputs.push(watched);

    for out in &outputs {
        assert!(
            !out.contains(PASSWORD),
            "password in an admin response: {out}"
        );
    }
    let needle = PASSWORD.as_bytes();
    assert!(
        !store.windows(needle.len()).any(|w| w == needle),
        "password in clear text in the store file"
    );
    let mut logs = vec![c.cp_log()];
    logs.extend(c.executors.iter().map(|e| e.log()));
    for log in logs {
        assert!(!log.contains(PASSWORD), "password in a process log");
    }
}
