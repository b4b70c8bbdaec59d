//! The audit sources through the whole system: a real control plane, three real executors
//! sharing a test-owned NATS JetStream record log, a `file-sink` reading the audit topic,
//! real PostgreSQL and a real SQLite file. The same matrix runs for both plugins:
//!
//! - after create, the catalog shows the audit table, the trigger function (PostgreSQL)
//!   and the triggers;
//! - inserts, updates and deletes arrive at the sink once each, in audit-id order per
//!   table, across a task restart and a move of a task to another executor (SIGTERM of
//!   its host); the objects stay through both;
//! - a config update, pause and STOPPED keep every object; changes made while paused
//!   arrive after the resume;
//! - the executor hosting task 0 is killed (kill -9) and the connector deleted: the
//!   control plane re-hosts the cleanup and afterwards `pg_trigger`, `pg_proc` and
//!   `pg_class` (or `sqlite_master`) hold nothing the connector created.
//!
//! Build first: `cargo build -p wharf-control-plane -p wharf-executor-stock`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use wharf_harness::audit::{Cluster, GRACEFUL_TIMEOUT_MS, PgDb, executor_index, pg, task_host};
use wharf_harness::cluster::CONVERGE;
use wharf_harness::tokio_postgres::Client;
use wharf_harness::wait_until;

const SOURCE: &str = "audited";
const SINK: &str = "audited-sink";
const TOPIC: &str = "audited-changes";
/// Upper bound on the sink catching up with the audit table.
const CATCH_UP: Duration = Duration::from_secs(60);

/// The database under audit.
enum Backend {
    Postgres { db: PgDb, sql: Client },
    Sqlite { path: PathBuf },
}

/// What an audit connector made: audit tables, trigger functions, triggers.
#[derive(Debug, PartialEq, Eq)]
struct Counts {
    audit_tables: i64,
    functions: i64,
    triggers: i64,
}

impl Backend {
    async fn postgres() -> Backend {
        let db = PgDb::create(format!("wharf_audit_e2e_{}", std::process::id())).await;
        let sql = pg(&db.name).await;
        sql.batch_execute(
            "CREATE TABLE t1 (id serial PRIMARY KEY, v text);
             CREATE TABLE t2 (id serial PRIMARY KEY, v text);",
        )
        .await
        .unwrap();
        Backend::Postgres { db, sql }
    }

    fn sqlite(dir: &Path) -> Backend {
        let path = dir.join("app.db");
        let b = Backend::Sqlite { path };
        b.sqlite_exec(
            "CREATE TABLE t1 (id INTEGER PRIMARY KEY, v TEXT);
             CREATE TABLE t2 (id INTEGER PRIMARY KEY, v TEXT);",
        );
        b
    }

    fn sqlite_exec(&self, sql: &str) {
        if let Backend::Sqlite { path } = self {
            let conn = wharf_harness::rusqlite::Connection::open(path).unwrap();
            conn.busy_timeout(Duration::from_secs(5)).unwrap();
            conn.execute_batch(sql).unwrap();
        }
    }

    async fn exec(&self, sql: &str) {
        match self {
            Backend::Postgres { sql: client, .. } => client.batch_execute(sql).await.unwrap(),
            Backend::Sqlite { .. } => self.sqlite_exec(sql),
        }
    }

    fn source_config(&self) -> Value {
        match self {
            Backend::Postgres { db, .. } => json!({
                "connector.class": "postgres-audit",
                "tasks.max": "2",
                "connection.host": "127.0.0.1",
                "connection.user": "postgres",
                "connection.database": db.name,
                "tables": "public.t1,public.t2",
                "topic": TOPIC,
                "poll.interval.ms": "50",
            }),
            Backend::Sqlite { path } => json!({
                "connector.class": "sqlite-audit",
                "tasks.max": "2",
                "database.path": path.display().to_string(),
                "tables": "t1,t2",
                "topic": TOPIC,
                "poll.interval.ms": "50",
            }),
        }
    }

    /// What the connector should have made after create.
    fn provisioned(&self) -> Counts {
        match self {
            Backend::Postgres { .. } => Counts {
                audit_tables: 1,
                functions: 1,
                triggers: 2,
            },
            // No trigger functions in SQLite; three triggers per table.
            Backend::Sqlite { .. } => Counts {
                audit_tables: 1,
                functions: 0,
                triggers: 6,
            },
        }
    }

    async fn counts(&self) -> Counts {
        match self {
            Backend::Postgres { sql, .. } => {
                let row = sql
                    .query_one(
                        "SELECT (SELECT count(*) FROM pg_class WHERE relname LIKE 'wharf\\_audit%' AND relkind = 'r'),
                                (SELECT count(*) FROM pg_proc WHERE proname LIKE 'wharf\\_audit%'),
                                (SELECT count(*) FROM pg_trigger WHERE NOT tgisinternal)",
                        &[],
                    )
                    .await
                    .unwrap();
                Counts {
                    audit_tables: row.get(0),
                    functions: row.get(1),
                    triggers: row.get(2),
                }
            }
            Backend::Sqlite { path } => {
                let conn = wharf_harness::rusqlite::Connection::open(path).unwrap();
                let (audit_tables, triggers) = conn
                    .query_row(
                        "SELECT (SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name LIKE 'wharf\\_audit%' ESCAPE '\\'),
                                (SELECT count(*) FROM sqlite_master WHERE type = 'trigger')",
                        [],
                        |r| Ok((r.get(0)?, r.get(1)?)),
                    )
                    .unwrap();
                Counts {
                    audit_tables,
                    functions: 0,
                    triggers,
                }
            }
        }
    }

    /// `(table as in records, audit id)` of every audit row, in id order.
    async fn audit_rows(&self) -> Vec<(String, i64)> {
        match self {
            Backend::Postgres { sql, .. } => {
                let name: String = sql
                    .query_one(
                        "SELECT relname::text FROM pg_class WHERE relname LIKE 'wharf\\_audit%' AND relkind = 'r'",
                        &[],
                    )
                    .await
                    .unwrap()
                    .get(0);
                sql.query(
                    &format!(
                        "SELECT table_schema || '.' || table_name, id FROM \"{name}\" ORDER BY id"
                    ),
                    &[],
                )
                .await
                .unwrap()
                .iter()
                .map(|r| (r.get(0), r.get(1)))
                .collect()
            }
            Backend::Sqlite { path } => {
                let conn = wharf_harness::rusqlite::Connection::open(path).unwrap();
                let name: String = conn
                    .query_row(
                        "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'wharf\\_audit%' ESCAPE '\\'",
                        [],
                        |r| r.get(0),
                    )
                    .unwrap();
                let mut stmt = conn
                    .prepare(&format!(
                        "SELECT 'main.' || table_name, id FROM \"{name}\" ORDER BY id"
                    ))
                    .unwrap();
                stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
                    .unwrap()
                    .collect::<Result<Vec<_>, _>>()
                    .unwrap()
            }
        }
    }
}

/// The text without ANSI colour sequences (`ESC [ ... m`), which the executors' logs
/// carry.
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for n in chars.by_ref() {
                if n.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// One round of changes on both tables: inserts, an update, a delete.
async fn write_round(b: &Backend, round: u32) {
    b.exec(&format!(
        "INSERT INTO t1 (v) VALUES ('r{round}a'); INSERT INTO t1 (v) VALUES ('r{round}b');
         INSERT INTO t2 (v) VALUES ('r{round}a');
         UPDATE t1 SET v = 'r{round}u' WHERE id = (SELECT max(id) FROM t1);
         DELETE FROM t2 WHERE id = (SELECT min(id) FROM t2);"
    ))
    .await;
}

/// `(table, audit id)` of every record in the sink file, in file order.
fn sink_records(path: &Path) -> Vec<(String, i64)> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| Some((v["table"].as_str()?.to_owned(), v["id"].as_i64()?)))
        .collect()
}

/// Waits until the sink holds every audit row, then checks each arrived exactly once and
/// in audit-id order per table.
async fn assert_delivered_once_in_order(b: &Backend, sink: &Path, after: &str) {
    let audit = b.audit_rows().await;
    let got = wait_until(
        &format!("the sink to hold all {} audit rows ({after})", audit.len()),
        CATCH_UP,
        || {
            let got = sink_records(sink);
            let all = audit.iter().all(|r| got.contains(r));
            async move { all.then_some(got) }
        },
    )
    .await;
    let mut per_table: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
    for (table, id) in &got {
        per_table.entry(table.as_str()).or_default().push(*id);
    }
    for (table, ids) in &per_table {
        assert!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "{after}: {table} records are not once each in id order: {ids:?}"
        );
    }
    assert_eq!(
        got.len(),
        audit.len(),
        "{after}: sink {got:?} audit {audit:?}"
    );
}

async fn run_matrix(c: &mut Cluster, b: &Backend) {
    let sink_file = c.dir.path().join("sink.jsonl");
    c.call(
        "CreateConnector",
        json!({ "name": SOURCE, "config": b.source_config() }),
    );
    c.call(
        "CreateConnector",
        json!({ "name": SINK, "config": {
            "connector.class": "file-sink", "tasks.max": "1",
            "file": sink_file.display().to_string(), "topics": TOPIC,
        }}),
    );
    let s = c
        .wait_state(SOURCE, "STATE_RUNNING", "STATE_RUNNING", 2, None)
        .await;
    c.wait_state(SINK, "STATE_RUNNING", "STATE_RUNNING", 1, None)
        .await;
    let created = b.provisioned();
    assert_eq!(b.counts().await, created, "after create");

    write_round(b, 1).await;
    assert_delivered_once_in_order(b, &sink_file, "the first changes").await;

    // Task restart.
    c.call("RestartTask", json!({ "name": SOURCE, "task": 0 }));
    let before = s.clone();
    let s = wait_until("task 0 to run a new generation", CONVERGE, || async {
        let now = c.try_status(SOURCE)?;
        let old = wharf_harness::audit::generations(&before);
        let new = wharf_harness::audit::generations(&now);
        let running = now["tasks"]
            .as_array()?
            .iter()
            .all(|t| t["status"]["state"] == "STATE_RUNNING");
        (running && new.get(&0) > old.get(&0)).then_some(now)
    })
    .await;
    assert_eq!(b.counts().await, created, "after a task restart");
    write_round(b, 2).await;
    assert_delivered_once_in_order(b, &sink_file, "a task restart").await;

    // Move: SIGTERM task 0's host; the task runs elsewhere.
    let host = task_host(&s, 0).expect("task 0 has a host");
    let idx = executor_index(&host);
    let code = c.executors[idx]
        .terminate(Duration::from_millis(GRACEFUL_TIMEOUT_MS * 3))
        .await;
    assert_eq!(code, Some(0));
    let s = wait_until("task 0 to move off its stopped host", CONVERGE, || async {
        let now = c.try_status(SOURCE)?;
        let running = now["tasks"]
            .as_array()?
            .iter()
            .all(|t| t["status"]["state"] == "STATE_RUNNING");
        let moved = task_host(&now, 0).is_some_and(|h| h != host);
        (running && moved).then_some(now)
    })
    .await;
    assert_eq!(b.counts().await, created, "after a move");
    write_round(b, 3).await;
    assert_delivered_once_in_order(b, &sink_file, "a move to another executor").await;

    // Config update, pause, STOPPED: stops with false only; everything stays.
    let mut updated = b.source_config();
    updated["poll.interval.ms"] = json!("70");
    c.call(
        "PutConnectorConfig",
        json!({ "name": SOURCE, "config": updated }),
    );
    c.wait_state(SOURCE, "STATE_RUNNING", "STATE_RUNNING", 2, Some(&s))
        .await;
    assert_eq!(b.counts().await, created, "after a config update");
    c.call("PauseConnector", json!({ "name": SOURCE }));
    c.wait_state(SOURCE, "STATE_PAUSED", "STATE_PAUSED", 2, None)
        .await;
    assert_eq!(b.counts().await, created, "after pause");
    write_round(b, 4).await;
    c.call("StopConnector", json!({ "name": SOURCE }));
    c.wait_state(SOURCE, "STATE_STOPPED", "STATE_STOPPED", 2, None)
        .await;
    assert_eq!(b.counts().await, created, "after StopConnector");
    c.call("ResumeConnector", json!({ "name": SOURCE }));
    let s = c
        .wait_state(SOURCE, "STATE_RUNNING", "STATE_RUNNING", 2, None)
        .await;
    assert_delivered_once_in_order(b, &sink_file, "pause, STOPPED and resume").await;

    // Kill -9 task 0's new host, then delete: cleanup is re-hosted on a live executor.
    let host = task_host(&s, 0).expect("task 0 has a host");
    let killed = executor_index(&host);
    c.executors[killed].kill9();
    assert_eq!(b.counts().await, created, "a crash is not a deletion");
    let r = c.call(
        "DeleteConnector",
        json!({ "name": SOURCE, "wait": true, "wait_timeout_ms": 60000 }),
    );
    assert_eq!(r["deleted"], true, "{r}");
    // Task 0's cleanup ran on a live executor, in a fresh cleanup-only instance.
    let rehosted = c.executors.iter().enumerate().any(|(i, e)| {
        i != killed
            && strip_ansi(&e.log()).lines().any(|l| {
                l.contains("task started")
                    && l.contains(&format!("connector={SOURCE}"))
                    && l.contains("task=0")
                    && l.contains("cleanup_only=true")
            })
    });
    assert!(
        rehosted,
        "no live executor logged a cleanup-only start of task 0"
    );
    assert_eq!(
        b.counts().await,
        Counts {
            audit_tables: 0,
            functions: 0,
            triggers: 0
        },
        "nothing the connector created remains"
    );
    c.call("DeleteConnector", json!({ "name": SINK, "wait": true }));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_audit_delivers_once_in_order_and_deletion_cleans_up_after_a_killed_host() {
    let b = Backend::postgres().await;
    let mut c = Cluster::start(3).await;
    run_matrix(&mut c, &b).await;
    // The watched tables themselves remain.
    b.exec("SELECT count(*) FROM t1; SELECT count(*) FROM t2;")
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_audit_delivers_once_in_order_and_deletion_cleans_up_after_a_killed_host() {
    let mut c = Cluster::start(3).await;
    let b = Backend::sqlite(c.dir.path());
    run_matrix(&mut c, &b).await;
    b.exec("SELECT count(*) FROM t1; SELECT count(*) FROM t2;")
        .await;
}
