//! Handed case 01: config updates and restarts never tear down what the connector
//! provisioned.
//!
//! A real control plane, two real executors sharing a test-owned NATS JetStream record
//! log, a `postgres-audit` connector watching two tables (tasks.max 2) on the real
//! PostgreSQL, and a `file-sink` reading its topic. A writer inserts a row into each
//! table every 50 ms for the whole test. Steps: poll interval changed (config update);
//! RestartConnector with tasks; tasks.max 3, then 1; pause and resume; STOPPED and
//! resume; SIGTERM of the executor hosting task 0 and its start again; kill -9 of the
//! control plane and its start again on the same data dir.
//!
//! After every step the audit table, the trigger function and both triggers exist, with
//! the same OIDs as after the create: nothing was dropped and made again, so no stop with
//! `connector_deleted = true` reached the plugin (it would have dropped them). When the
//! writer stops every inserted row reaches the sink at least once, and the rows written
//! before the first crash step exactly once.
//!
//! Build first: `cargo build -p wharf-control-plane -p wharf-executor-stock`.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use wharf_harness::audit::{Cluster, GRACEFUL_TIMEOUT_MS, PgDb, executor_index, pg, task_host};
use wharf_harness::tokio_postgres::Client;
use wharf_harness::wait_until;

/// The writer inserts one row into each watched table this often, in milliseconds.
const WRITE_INTERVAL_MS: u64 = 50;
/// Upper bound on the sink catching up with the writer.
const CATCH_UP: Duration = Duration::from_secs(60);

const SOURCE: &str = "case01";
const SINK: &str = "case01-sink";

/// OIDs of what the connector provisioned: audit tables, trigger functions, triggers.
#[derive(Debug, PartialEq, Eq)]
struct Provisioned {
    tables: Vec<i64>,
    functions: Vec<i64>,
    triggers: Vec<(String, i64)>,
}

async fn provisioned(sql: &Client) -> Provisioned {
    let ids = |rows: Vec<wharf_harness::tokio_postgres::Row>| -> Vec<i64> {
        rows.iter().map(|r| r.get(0)).collect()
    };
    let tables = sql
        .query(
            "SELECT oid::bigint FROM pg_class WHERE relname LIKE 'wharf\\_audit%' AND relkind = 'r' ORDER BY 1",
            &[],
        )
        .await
        .unwrap();
    let functions = sql
        .query(
            "SELECT oid::bigint FROM pg_proc WHERE proname LIKE 'wharf\\_audit%' ORDER BY 1",
            &[],
        )
        .await
        .unwrap();
    let triggers = sql
        .query(
            "SELECT c.relname::text, t.oid::bigint FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
              WHERE NOT t.tgisinternal ORDER BY 1",
            &[],
        )
        .await
        .unwrap();
    Provisioned {
        tables: ids(tables),
        functions: ids(functions),
        triggers: triggers.iter().map(|r| (r.get(0), r.get(1))).collect(),
    }
}

// ---------------------------------------------------------------------------------------
// Writer and sink.

/// What the writer inserted: `(table, row id)` in order, and any error it met.
#[derive(Default)]
struct Written {
    rows: Vec<(String, i64)>,
    errors: Vec<String>,
}

fn start_writer(
    sql: Client,
    stop: CancellationToken,
) -> (Arc<Mutex<Written>>, tokio::task::JoinHandle<()>) {
    let written = Arc::new(Mutex::new(Written::default()));
    let out = written.clone();
    let handle = tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(WRITE_INTERVAL_MS));
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tick.tick() => {}
            }
            for table in ["t1", "t2"] {
                let r = sql
                    .query_one(
                        &format!("INSERT INTO {table} (note) VALUES ('w') RETURNING id"),
                        &[],
                    )
                    .await;
                let mut w = out.lock().unwrap();
                match r {
                    Ok(row) => w
                        .rows
                        .push((format!("public.{table}"), i64::from(row.get::<_, i32>(0)))),
                    Err(e) => w.errors.push(e.to_string()),
                }
            }
        }
    });
    (written, handle)
}

/// `(table, row id)` of every INSERT record in the sink file, with how often it came.
fn sink_inserts(path: &Path) -> HashMap<(String, i64), usize> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut out = HashMap::new();
    for line in text.lines() {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if v["operation"] == "INSERT"
            && let (Some(t), Some(id)) = (v["table"].as_str(), v["new"]["id"].as_i64())
        {
            *out.entry((t.to_owned(), id)).or_insert(0) += 1;
        }
    }
    out
}

async fn wait_sink_has(path: &Path, rows: &[(String, i64)]) -> HashMap<(String, i64), usize> {
    wait_until(
        &format!("the sink to hold {} rows", rows.len()),
        CATCH_UP,
        || {
            let got = sink_inserts(path);
            let all = rows.iter().all(|r| got.contains_key(r));
            async move { all.then_some(got) }
        },
    )
    .await
}

// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_updates_restarts_and_crashes_never_tear_down_the_audit_objects() {
    let db = PgDb::create(format!("wharf_case01_{}", std::process::id())).await;
    let sql = pg(&db.name).await;
    sql.batch_execute(
        "CREATE TABLE t1 (id serial PRIMARY KEY, note text);
         CREATE TABLE t2 (id serial PRIMARY KEY, note text);",
    )
    .await
    .unwrap();

    let mut c = Cluster::start(2).await;
    let sink_file = c.dir.path().join("sink.jsonl");
    let source_config = |poll_ms: &str, tasks_max: &str| {
        json!({
            "connector.class": "postgres-audit",
            "tasks.max": tasks_max,
            "connection.host": "127.0.0.1",
            "connection.user": "postgres",
            "connection.database": db.name,
            "tables": "public.t1,public.t2",
            "topic": "case01-audit",
            "poll.interval.ms": poll_ms,
        })
    };
    c.call(
        "CreateConnector",
        json!({ "name": SOURCE, "config": source_config("100", "2") }),
    );
    c.call(
        "CreateConnector",
        json!({ "name": SINK, "config": {
            "connector.class": "file-sink", "tasks.max": "1",
            "file": sink_file.display().to_string(), "topics": "case01-audit",
        }}),
    );
    let mut s = c
        .wait_state(SOURCE, "STATE_RUNNING", "STATE_RUNNING", 2, None)
        .await;
    c.wait_state(SINK, "STATE_RUNNING", "STATE_RUNNING", 1, None)
        .await;
    let created = provisioned(&sql).await;
    assert_eq!(created.tables.len(), 1, "{created:?}");
    assert_eq!(created.functions.len(), 1, "{created:?}");
    assert_eq!(created.triggers.len(), 2, "{created:?}");

    let stop_writer = CancellationToken::new();
    let (written, writer) = start_writer(pg(&db.name).await, stop_writer.clone());
    let kept = |step: &'static str| {
        let sql = &sql;
        let created = &created;
        async move {
            assert_eq!(
                &provisioned(sql).await,
                created,
                "after {step}: the audit objects changed"
            );
        }
    };

    // 1. Config update: the poll interval.
    c.call(
        "PutConnectorConfig",
        json!({ "name": SOURCE, "config": source_config("60", "2") }),
    );
    s = c
        .wait_state(SOURCE, "STATE_RUNNING", "STATE_RUNNING", 2, Some(&s))
        .await;
    kept("a config update").await;

    // 2. Restart with tasks.
    c.call(
        "RestartConnector",
        json!({ "name": SOURCE, "include_tasks": true }),
    );
    s = c
        .wait_state(SOURCE, "STATE_RUNNING", "STATE_RUNNING", 2, Some(&s))
        .await;
    kept("RestartConnector").await;

    // 3. tasks.max 3 (two tables: still two tasks), then 1.
    c.call(
        "PutConnectorConfig",
        json!({ "name": SOURCE, "config": source_config("60", "3") }),
    );
    s = c
        .wait_state(SOURCE, "STATE_RUNNING", "STATE_RUNNING", 2, Some(&s))
        .await;
    kept("tasks.max 3").await;
    c.call(
        "PutConnectorConfig",
        json!({ "name": SOURCE, "config": source_config("60", "1") }),
    );
    s = c
        .wait_state(SOURCE, "STATE_RUNNING", "STATE_RUNNING", 1, Some(&s))
        .await;
    kept("tasks.max 1").await;

    // 4. Pause, resume.
    c.call("PauseConnector", json!({ "name": SOURCE }));
    c.wait_state(SOURCE, "STATE_PAUSED", "STATE_PAUSED", 1, None)
        .await;
    kept("pause").await;
    c.call("ResumeConnector", json!({ "name": SOURCE }));
    s = c
        .wait_state(SOURCE, "STATE_RUNNING", "STATE_RUNNING", 1, Some(&s))
        .await;
    kept("resume").await;

    // 5. STOPPED, resume.
    c.call("StopConnector", json!({ "name": SOURCE }));
    c.wait_state(SOURCE, "STATE_STOPPED", "STATE_STOPPED", 1, None)
        .await;
    kept("StopConnector").await;
    c.call("ResumeConnector", json!({ "name": SOURCE }));
    s = c
        .wait_state(SOURCE, "STATE_RUNNING", "STATE_RUNNING", 1, Some(&s))
        .await;
    kept("resume after STOPPED").await;

    // Checkpoint before the crash steps: every row so far arrived exactly once.
    let before_crashes = written.lock().unwrap().rows.clone();
    assert!(!before_crashes.is_empty());
    let got = wait_sink_has(&sink_file, &before_crashes).await;
    let repeated: Vec<_> = before_crashes
        .iter()
        .filter(|r| got.get(*r).copied().unwrap_or(0) != 1)
        .collect();
    assert!(
        repeated.is_empty(),
        "rows delivered more than once without a crash: {repeated:?}"
    );

    // 6. SIGTERM the executor hosting task 0, then start it again.
    let idx = executor_index(&task_host(&s, 0).expect("task 0 has a host"));
    let code = c.executors[idx]
        .terminate(Duration::from_millis(GRACEFUL_TIMEOUT_MS * 3))
        .await;
    assert_eq!(code, Some(0), "executor exits cleanly on SIGTERM");
    kept("SIGTERM of an executor").await;
    c.executors[idx].restart();
    c.wait_alive(2).await;
    c.wait_state(SOURCE, "STATE_RUNNING", "STATE_RUNNING", 1, None)
        .await;
    kept("the executor's start again").await;

    // 7. kill -9 the control plane, start it again on the same data dir and address.
    c.cp.kill9();
    kept("kill -9 of the control plane").await;
    c.cp.restart();
    c.cp.listen_addr().await;
    c.wait_alive(2).await;
    c.wait_state(SOURCE, "STATE_RUNNING", "STATE_RUNNING", 1, None)
        .await;
    kept("the control plane's start again").await;

    // The writer stops; the connector catches up: every row at least once.
    stop_writer.cancel();
    writer.await.unwrap();
    let w = std::mem::take(&mut *written.lock().unwrap());
    assert!(w.errors.is_empty(), "writer errors: {:?}", w.errors);
    let got = wait_sink_has(&sink_file, &w.rows).await;
    assert!(w.rows.iter().all(|r| got.contains_key(r)));
    let duplicates = got.values().filter(|n| **n > 1).count();
    eprintln!(
        "{} rows written ({} before the crash steps), {} delivered more than once",
        w.rows.len(),
        before_crashes.len(),
        duplicates
    );
    kept("catching up").await;

    // Deleting it now removes everything (the contrast that makes the steps above count).
    let r = c.call(
        "DeleteConnector",
        json!({ "name": SOURCE, "wait": true, "wait_timeout_ms": 30000 }),
    );
    assert_eq!(r["deleted"], true, "{r}");
    let gone = provisioned(&sql).await;
    assert!(
        gone.tables.is_empty() && gone.functions.is_empty() && gone.triggers.is_empty(),
        "{gone:?}"
    );
    c.call("DeleteConnector", json!({ "name": SINK, "wait": true }));
}
