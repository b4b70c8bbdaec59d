//! Handed case 07: stopping an executor is not deleting its connectors.
//!
//! A real control plane, two real executors (127.0.0.2, 127.0.0.3) sharing a test-owned
//! NATS JetStream record log, a `sqlite-audit` connector with one task watching a table of
//! a real SQLite file, and a `file-sink` writing its topic to a file. The executor hosting
//! the audit task gets SIGTERM, rows are written while it is down, then it starts again.
//!
//! Right outcome: the executor exits 0 after stopping the task with
//! `connector_deleted = false`; the audit table and triggers are untouched (same SQL, no
//! audit row lost: a stop(true) would have dropped them); the task runs on the other
//! executor, resumes after its last committed offset, and every audit row reaches the
//! sink; starting instances where the objects already exist succeeds.
//!
//! Build first: `cargo build -p wharf-control-plane -p wharf-executor-stock`.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use wharf_harness::audit::{Cluster, GRACEFUL_TIMEOUT_MS};
use wharf_harness::cluster::CONVERGE;
use wharf_harness::wait_until;

const SOURCE: &str = "audit07";
const SINK: &str = "audit07-sink";
const TOPIC: &str = "orders-audit";

// ---------------------------------------------------------------------------------------
// Processes: the harness's NATS-backed cluster (wharf_harness::audit), two executors.

/// Waits until `name` and its one task are RUNNING, the task on an executor accepted by
/// `host_ok`; returns the task's executor id.
async fn wait_running(c: &Cluster, name: &str, host_ok: impl Fn(&str) -> bool) -> String {
    wait_until(&format!("{name} running"), CONVERGE, || {
        let found = c.try_status(name).and_then(|s| {
            let task = &s["tasks"][0]["status"];
            let host = task["executorId"].as_str().unwrap_or_default().to_owned();
            (s["connector"]["state"] == "STATE_RUNNING"
                && s["tasks"].as_array().is_some_and(|t| t.len() == 1)
                && task["state"] == "STATE_RUNNING"
                && host_ok(&host))
            .then_some(host)
        });
        async move { found }
    })
    .await
}

// ---------------------------------------------------------------------------------------
// SQLite and the sink file.

fn open_db(path: &Path) -> wharf_harness::rusqlite::Connection {
    let db = wharf_harness::rusqlite::Connection::open(path).unwrap();
    db.busy_timeout(Duration::from_secs(5)).unwrap();
    db
}

fn insert_orders(db: &wharf_harness::rusqlite::Connection, from: i64, to: i64) {
    for id in from..=to {
        db.execute(
            "INSERT INTO orders (id, item) VALUES (?1, ?2)",
            wharf_harness::rusqlite::params![id, format!("item-{id}")],
        )
        .unwrap();
    }
}

/// Every trigger and table the connector provisioned, with its SQL text.
fn provisioned(db: &wharf_harness::rusqlite::Connection) -> Vec<(String, String, String)> {
    let mut stmt = db
        .prepare("SELECT type, name, sql FROM sqlite_master WHERE type IN ('table', 'trigger') AND name != 'orders' ORDER BY name")
        .unwrap();
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

fn audit_rows(db: &wharf_harness::rusqlite::Connection, audit_table: &str) -> i64 {
    db.query_row(
        &format!("SELECT COUNT(*) FROM \"{audit_table}\""),
        [],
        |r| r.get(0),
    )
    .unwrap()
}

/// Audit ids the sink wrote (each line is a record value with an `id`).
fn sunk_ids(path: &Path) -> BTreeSet<i64> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| v["id"].as_i64())
        .collect()
}

async fn wait_sunk(path: &Path, upto: i64) {
    let want: BTreeSet<i64> = (1..=upto).collect();
    wait_until(
        &format!("audit rows 1..={upto} in the sink"),
        CONVERGE,
        || {
            let got = sunk_ids(path);
            let done = want.is_subset(&got);
            async move { done.then_some(()) }
        },
    )
    .await;
}

fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for n in chars.by_ref() {
                if n == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_is_not_delete_sigterm_stops_the_audit_task_with_false_and_it_resumes_elsewhere() {
    let mut c = Cluster::start(2).await;
    let db_path = c.dir.path().join("shop.db");
    let sink_path = c.dir.path().join("orders-audit.jsonl");
    let db = open_db(&db_path);
    db.execute_batch("CREATE TABLE orders (id INTEGER PRIMARY KEY, item TEXT NOT NULL)")
        .unwrap();

    c.call(
        "CreateConnector",
        json!({ "name": SOURCE, "config": {
            "connector.class": "sqlite-audit",
            "tasks.max": "1",
            "database.path": db_path.display().to_string(),
            "tables": "orders",
            "topic": TOPIC,
            "poll.interval.ms": "100",
        }}),
    );
    c.call(
        "CreateConnector",
        json!({ "name": SINK, "config": {
            "connector.class": "file-sink",
            "tasks.max": "1",
            "file": sink_path.display().to_string(),
            "topics": TOPIC,
        }}),
    );
    let host = wait_running(&c, SOURCE, |h| !h.is_empty()).await;
    wait_running(&c, SINK, |h| !h.is_empty()).await;
    let objects = provisioned(&db);
    let audit_table = objects
        .iter()
        .find(|(ty, _, _)| ty == "table")
        .map(|(_, name, _)| name.clone())
        .expect("the connector created its audit table");
    assert!(
        objects.iter().filter(|(ty, _, _)| ty == "trigger").count() >= 3,
        "{objects:?}"
    );

    insert_orders(&db, 1, 5);
    wait_sunk(&sink_path, 5).await;
    wait_until("offset of audit row 5 committed", CONVERGE, || {
        let r = c.call("GetOffsets", json!({ "name": SOURCE }));
        let committed = r["offsets"].as_array().is_some_and(|o| {
            o.iter().any(|o| {
                serde_json::from_str::<Value>(o["offset"].as_str().unwrap_or("{}")).ok()
                    == Some(json!({ "id": 5 }))
            })
        });
        async move { committed.then_some(()) }
    })
    .await;

    // SIGTERM the executor hosting the audit task.
    let a = c
        .executors
        .iter()
        .position(|p| p.data_dir.ends_with(&host))
        .expect("host is one of ours");
    let code = c.executors[a]
        .terminate(Duration::from_millis(GRACEFUL_TIMEOUT_MS + 5_000))
        .await;
    assert_eq!(code, Some(0), "executor {host} must exit 0 on SIGTERM");
    let log = strip_ansi(&c.executors[a].log());
    let stopped: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("task stopped") && l.contains(&format!("connector={SOURCE} ")))
        .collect();
    assert_eq!(
        stopped.len(),
        1,
        "one stop of the audit task on {host}: {stopped:?}"
    );
    assert!(
        stopped[0].contains("connector_deleted=false") && stopped[0].contains("outcome=Stopped"),
        "{}",
        stopped[0]
    );
    assert!(
        !log.contains("connector_deleted=true"),
        "nothing on {host} was stopped as deleted"
    );
    assert_eq!(
        provisioned(&db),
        objects,
        "the audit table and triggers are untouched"
    );
    assert_eq!(audit_rows(&db, &audit_table), 5);

    // Rows written while the task moves are not skipped.
    insert_orders(&db, 6, 10);
    let other = wait_running(&c, SOURCE, |h| !h.is_empty() && h != host).await;
    assert_ne!(other, host);
    wait_sunk(&sink_path, 10).await;

    // The stopped executor comes back; provisioning where the objects exist succeeds.
    c.executors[a].restart();
    c.executors[a].listen_addr().await;
    c.wait_alive(2).await;
    insert_orders(&db, 11, 12);
    wait_sunk(&sink_path, 12).await;
    wait_running(&c, SOURCE, |h| !h.is_empty()).await;
    assert_eq!(
        provisioned(&db),
        objects,
        "still untouched after the move and the restart"
    );
    assert_eq!(audit_rows(&db, &audit_table), 12);
    assert_eq!(sunk_ids(&sink_path), (1..=12).collect::<BTreeSet<i64>>());
}
