//! A config change must not orphan what the old config provisioned: PutConnectorConfig
//! refuses a new `connector.class` and a new value of a key the plugin marks immutable
//! (sqlite-audit's `database.path`) with FAILED_PRECONDITION naming `config[<key>]`, the
//! stored config stays as it was, and the later delete removes the audit table and
//! triggers from the database the connector provisioned. Real control plane, real
//! executor, the typed admin client, a real SQLite file.
//!
//! Build first: `cargo build -p wharf-control-plane -p wharf-executor-stock`.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use wharf_harness::cluster::{CONVERGE, FAILED_PRECONDITION, TestCluster};
use wharf_harness::wait_until;

/// (audit tables, triggers) in the SQLite file at `path`.
fn audit_objects(path: &Path) -> (i64, i64) {
    let conn = wharf_harness::rusqlite::Connection::open(path).unwrap();
    conn.busy_timeout(Duration::from_secs(5)).unwrap();
    conn.query_row(
        "SELECT (SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name LIKE 'wharf\\_audit%' ESCAPE '\\'),
                (SELECT count(*) FROM sqlite_master WHERE type = 'trigger')",
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
    .unwrap()
}

fn new_db(path: &Path) {
    let conn = wharf_harness::rusqlite::Connection::open(path).unwrap();
    conn.execute_batch("CREATE TABLE orders (id INTEGER PRIMARY KEY, v TEXT);")
        .unwrap();
}

fn stored_config(c: &TestCluster, name: &str) -> Value {
    let r = c.call("GetConnector", json!({ "name": name }));
    assert_eq!(r.code, 0, "{}", r.err);
    r.body["connector"]["config"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changing_the_plugin_or_an_immutable_key_is_refused_and_delete_cleans_the_original() {
    let c = TestCluster::start(1).await;
    let name = "sq";
    let db = c.dir.path().join("app.db");
    let other_db = c.dir.path().join("other.db");
    new_db(&db);
    new_db(&other_db);
    let cfg = json!({
        "connector.class": "sqlite-audit",
        "tasks.max": "1",
        "database.path": db.display().to_string(),
        "tables": "orders",
        "topic": "orders-changes",
        "poll.interval.ms": "50",
    });

    // The wire carries the plugin's immutable marks.
    let plugins = c.call("ListConnectorPlugins", json!({}));
    assert_eq!(plugins.code, 0, "{}", plugins.err);
    let defs = plugins.body["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["plugin"]["name"] == "sqlite-audit")
        .expect("sqlite-audit offered")["plugin"]["configDefs"]
        .clone();
    let immutable = |key: &str| {
        defs.as_array()
            .unwrap()
            .iter()
            .find(|d| d["name"] == key)
            .unwrap()["immutable"]
            .clone()
    };
    assert_eq!(immutable("database.path"), json!(true));
    assert_eq!(immutable("tables"), json!(false));

    let r = c.call("CreateConnector", json!({ "name": name, "config": cfg }));
    assert_eq!(r.code, 0, "{}", r.err);
    c.wait_state(name, "STATE_RUNNING", "STATE_RUNNING", 1)
        .await;
    wait_until("audit table and triggers provisioned", CONVERGE, || async {
        (audit_objects(&db) == (1, 3)).then_some(())
    })
    .await;
    let before = stored_config(&c, name);

    // 1. Another plugin, with a config valid for it.
    let file_sink = json!({
        "connector.class": "file-sink",
        "tasks.max": "1",
        "file": c.dir.path().join("out.jsonl").display().to_string(),
        "topics": "orders-changes",
    });
    let r = c.call(
        "PutConnectorConfig",
        json!({ "name": name, "config": file_sink }),
    );
    assert_eq!(r.code, FAILED_PRECONDITION, "{r:?}");
    assert!(r.err.contains("config[connector.class]"), "{}", r.err);
    assert!(
        r.err.contains("delete the connector and create it again"),
        "{}",
        r.err
    );
    assert_eq!(stored_config(&c, name), before, "store unchanged");

    // 2. The same plugin pointed at another database file.
    let mut moved = cfg.clone();
    moved["database.path"] = json!(other_db.display().to_string());
    let r = c.call(
        "PutConnectorConfig",
        json!({ "name": name, "config": moved }),
    );
    assert_eq!(r.code, FAILED_PRECONDITION, "{r:?}");
    assert!(r.err.contains("config[database.path]"), "{}", r.err);
    assert!(
        r.err.contains("delete the connector and create it again"),
        "{}",
        r.err
    );
    assert_eq!(stored_config(&c, name), before, "store unchanged");

    // 3. A mutable key still changes.
    let mut tuned = cfg.clone();
    tuned["poll.interval.ms"] = json!("75");
    let r = c.call(
        "PutConnectorConfig",
        json!({ "name": name, "config": tuned }),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    assert_eq!(stored_config(&c, name)["poll.interval.ms"], json!("75"));
    c.wait_state(name, "STATE_RUNNING", "STATE_RUNNING", 1)
        .await;

    // The deletion cleans the database the connector provisioned; the other one was
    // never touched.
    let r = c.call("DeleteConnector", json!({ "name": name, "wait": true }));
    assert_eq!(r.code, 0, "{}", r.err);
    assert_eq!(r.body["deleted"], json!(true));
    assert_eq!(audit_objects(&db), (0, 0), "nothing of the connector left");
    assert_eq!(audit_objects(&other_db), (0, 0));
}
