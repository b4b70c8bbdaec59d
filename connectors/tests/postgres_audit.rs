//! postgres-audit driven through the SDK traits as an executor would, against the real
//! PostgreSQL on 127.0.0.1:5432 (user postgres, trust auth). Each test makes its own
//! database and drops it at the end.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use tokio_postgres::{Client, NoTls};
use tokio_util::sync::CancellationToken;
use wharf_connectors::audit_names::TableName;
use wharf_connectors::postgres_audit::{self, PgAuditConnector, PgAuditTask, keys};
use wharf_sdk::{ConfigMap, Connector, ConnectorContext, SourceRecord, SourceTask, TaskContext};

const PG_HOST: &str = "127.0.0.1";
const PG_PORT: u16 = 5432;
const PG_USER: &str = "postgres";
/// How long a test waits for records to show up, in seconds.
const RECORDS_DEADLINE_SECS: u64 = 20;
/// Poll interval the tests configure, in milliseconds.
const TEST_POLL_INTERVAL_MS: &str = "20";
/// Pause between two checks of a condition being waited for, in milliseconds.
const CONDITION_CHECK_INTERVAL_MS: u64 = 10;

static COUNTER: AtomicU32 = AtomicU32::new(0);

async fn connect(db: &str) -> Client {
    let (client, conn) = tokio_postgres::Config::new()
        .host(PG_HOST)
        .port(PG_PORT)
        .user(PG_USER)
        .dbname(db)
        .connect(NoTls)
        .await
        .expect("connect to the test PostgreSQL");
    tokio::spawn(async move {
        let _ = conn.await;
    });
    client
}

/// A database owned by one test; dropped (with FORCE) when the guard goes, even on panic.
struct TestDb {
    name: String,
    client: Client,
}

impl TestDb {
    async fn new() -> TestDb {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let name = format!(
            "wharf_pgaudit_{}_{}_{}",
            std::process::id(),
            nanos,
            COUNTER.fetch_add(1, Ordering::SeqCst)
        );
        let admin = connect("postgres").await;
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .expect("create test database");
        let client = connect(&name).await;
        TestDb { name, client }
    }

    async fn exec(&self, sql: &str) {
        self.client
            .batch_execute(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
    }

    /// Objects of any audit connector in this database: audit tables, trigger
    /// functions, triggers `(table, trigger)`.
    async fn catalog(&self) -> Catalog {
        let tables = self
            .client
            .query(
                "SELECT n.nspname || '.' || c.relname FROM pg_class c
                   JOIN pg_namespace n ON n.oid = c.relnamespace
                  WHERE c.relname LIKE 'wharf\\_audit%' AND c.relkind = 'r' ORDER BY 1",
                &[],
            )
            .await
            .unwrap();
        let functions = self
            .client
            .query(
                "SELECT proname::text FROM pg_proc WHERE proname LIKE 'wharf\\_audit%' ORDER BY 1",
                &[],
            )
            .await
            .unwrap();
        let triggers = self
            .client
            .query(
                "SELECT n.nspname || '.' || c.relname, t.tgname::text FROM pg_trigger t
                   JOIN pg_class c ON c.oid = t.tgrelid
                   JOIN pg_namespace n ON n.oid = c.relnamespace
                  WHERE NOT t.tgisinternal ORDER BY 1, 2",
                &[],
            )
            .await
            .unwrap();
        Catalog {
            audit_tables: tables.iter().map(|r| r.get(0)).collect(),
            functions: functions.iter().map(|r| r.get(0)).collect(),
            triggers: triggers.iter().map(|r| (r.get(0), r.get(1))).collect(),
        }
    }

    async fn table_exists(&self, schema: &str, table: &str) -> bool {
        self.client
            .query_one(
                "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                  WHERE n.nspname = $1 AND c.relname = $2",
                &[&schema, &table],
            )
            .await
            .unwrap()
            .get::<_, i64>(0)
            == 1
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let name = self.name.clone();
        // A fresh runtime on its own thread: Drop cannot await.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime for dropping the test database");
            rt.block_on(async {
                let admin = connect("postgres").await;
                let _ = admin
                    .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                    .await;
            });
        })
        .join();
    }
}

#[derive(Debug, PartialEq, Eq)]
struct Catalog {
    audit_tables: Vec<String>,
    functions: Vec<String>,
    triggers: Vec<(String, String)>,
}

impl Catalog {
    fn is_empty(&self) -> bool {
        self.audit_tables.is_empty() && self.functions.is_empty() && self.triggers.is_empty()
    }
    fn trigger_tables(&self) -> Vec<&str> {
        self.triggers.iter().map(|(t, _)| t.as_str()).collect()
    }
}

fn config(db: &TestDb, tables: &str) -> ConfigMap {
    [
        ("connector.class", "postgres-audit"),
        (keys::HOST, PG_HOST),
        (keys::PORT, "5432"),
        (keys::USER, PG_USER),
        (keys::DATABASE, db.name.as_str()),
        (keys::TABLES, tables),
        (keys::TOPIC, "audit-events"),
        (keys::POLL_INTERVAL_MS, TEST_POLL_INTERVAL_MS),
        (keys::BATCH_SIZE, "3"),
    ]
    .iter()
    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
    .collect()
}

fn connector_ctx(name: &str, cleanup_only: bool) -> ConnectorContext {
    ConnectorContext::new(
        name,
        "incarnation-1",
        cleanup_only,
        "executor-a",
        Arc::new(|| {}),
    )
}

fn task_ctx(
    name: &str,
    task: u32,
    cleanup_only: bool,
    connector_config: &ConfigMap,
    offsets: BTreeMap<String, serde_json::Value>,
) -> TaskContext {
    TaskContext {
        connector: name.to_owned(),
        task,
        incarnation: "incarnation-1".to_owned(),
        cleanup_only,
        executor_id: "executor-a".to_owned(),
        connector_config: connector_config.clone(),
        offsets,
        cancel: CancellationToken::new(),
        errant_reporter: None,
        sink_seek: None,
        resources: wharf_sdk::Resources::detached(wharf_sdk::ResourceOwner::Task(task)),
    }
}

/// Starts a connector and its tasks as the executor would; returns them running.
async fn start_all(
    name: &str,
    cfg: &ConfigMap,
    max_tasks: u32,
    cleanup_only: bool,
) -> (PgAuditConnector, Vec<PgAuditTask>) {
    let mut connector = PgAuditConnector::default();
    connector
        .start(connector_ctx(name, cleanup_only), cfg.clone())
        .await
        .expect("connector start");
    let task_configs = connector.task_configs(max_tasks).await.unwrap();
    let mut tasks = Vec::new();
    for (i, tc) in task_configs.into_iter().enumerate() {
        let mut task = PgAuditTask::default();
        task.start(
            task_ctx(name, i as u32, cleanup_only, cfg, BTreeMap::new()),
            tc,
        )
        .await
        .expect("task start");
        tasks.push(task);
    }
    (connector, tasks)
}

/// The deletion sequence: every task stop(true), then the connector.
async fn delete_all(mut connector: PgAuditConnector, tasks: Vec<PgAuditTask>) {
    for mut t in tasks {
        t.stop_with(true).await.expect("task stop(true)");
    }
    connector
        .stop_with(true)
        .await
        .expect("connector stop(true)");
}

async fn stop_all_plain(mut connector: PgAuditConnector, tasks: Vec<PgAuditTask>) {
    for mut t in tasks {
        t.stop_with(false).await.expect("task stop(false)");
    }
    connector
        .stop_with(false)
        .await
        .expect("connector stop(false)");
}

/// Polls until `n` records arrived (or the deadline passed), then once more to show
/// nothing else comes.
async fn poll_records(task: &mut PgAuditTask, n: usize) -> Vec<SourceRecord> {
    let deadline = Instant::now() + Duration::from_secs(RECORDS_DEADLINE_SECS);
    let mut out = Vec::new();
    while out.len() < n && Instant::now() < deadline {
        out.extend(task.poll().await.expect("poll"));
    }
    out.extend(task.poll().await.expect("poll"));
    out
}

fn value(r: &SourceRecord) -> serde_json::Value {
    serde_json::from_slice(&r.value).expect("record value is JSON")
}

#[tokio::test]
async fn provisioning_survives_plain_stops_and_deletion_removes_everything() {
    let db = TestDb::new().await;
    db.exec(
        r#"CREATE TABLE public.orders (id int PRIMARY KEY, note text);
           CREATE TABLE public."Order Items" (id int PRIMARY KEY, qty int);
           CREATE SCHEMA "weird"; CREATE TABLE "weird"."na-me" (id int);"#,
    )
    .await;
    let cfg = config(&db, r#"public.orders, public.Order Items, "weird"."na-me""#);

    let (connector, tasks) = start_all("orders-audit", &cfg, 2, false).await;
    assert_eq!(tasks.len(), 2);
    let after_create = db.catalog().await;
    assert_eq!(after_create.audit_tables.len(), 1, "{after_create:?}");
    assert_eq!(after_create.functions.len(), 1, "{after_create:?}");
    assert_eq!(
        after_create.trigger_tables(),
        vec!["public.Order Items", "public.orders", "weird.na-me"]
    );

    // Restart, pause, STOPPED, shutdown: all are stop(false); nothing goes.
    stop_all_plain(connector, tasks).await;
    assert_eq!(db.catalog().await, after_create);

    // Starting again (a restart elsewhere) is idempotent: no duplicates.
    let (connector, tasks) = start_all("orders-audit", &cfg, 2, false).await;
    assert_eq!(db.catalog().await, after_create);

    // Deletion: tasks first drop their triggers, the connector the rest.
    let mut tasks = tasks.into_iter();
    let mut t0 = tasks.next().unwrap();
    let mut t1 = tasks.next().unwrap();
    t0.stop_with(true).await.unwrap();
    let mid = db.catalog().await;
    assert_eq!(
        mid.trigger_tables(),
        vec!["weird.na-me"],
        "task 0 watched two tables"
    );
    assert_eq!(mid.functions.len(), 1);
    t1.stop_with(true).await.unwrap();
    assert!(db.catalog().await.triggers.is_empty());
    let mut connector = connector;
    connector.stop_with(true).await.unwrap();
    assert!(db.catalog().await.is_empty(), "{:?}", db.catalog().await);

    // Cleanup again on fresh cleanup-only instances (at-least-once): still fine.
    let (connector, tasks) = start_all("orders-audit", &cfg, 2, true).await;
    assert!(
        db.catalog().await.is_empty(),
        "cleanup-only start provisioned something"
    );
    delete_all(connector, tasks).await;
    assert!(db.catalog().await.is_empty());
    // The watched tables themselves are untouched.
    assert!(db.table_exists("public", "Order Items").await);
    assert!(db.table_exists("weird", "na-me").await);
}

#[tokio::test]
async fn changes_arrive_once_in_order_and_a_restarted_task_resumes_after_its_offset() {
    let db = TestDb::new().await;
    db.exec(
        r#"CREATE TABLE public.a (id int PRIMARY KEY, v text);
           CREATE TABLE public.b (id int PRIMARY KEY, v text);"#,
    )
    .await;
    let cfg = config(&db, "public.a,public.b");
    let (connector, mut tasks) = start_all("ab", &cfg, 1, false).await;
    let mut task = tasks.remove(0);
    db.exec(
        "INSERT INTO a VALUES (1, 'one'); INSERT INTO b VALUES (1, 'uno');
         UPDATE a SET v = 'ONE' WHERE id = 1; DELETE FROM b WHERE id = 1;
         INSERT INTO a VALUES (2, 'two');",
    )
    .await;
    let records = poll_records(&mut task, 5).await;
    let seen: Vec<(String, String)> = records
        .iter()
        .map(|r| {
            let v = value(r);
            (
                v["table"].as_str().unwrap().to_owned(),
                v["operation"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        vec![
            ("public.a".into(), "INSERT".into()),
            ("public.b".into(), "INSERT".into()),
            ("public.a".into(), "UPDATE".into()),
            ("public.b".into(), "DELETE".into()),
            ("public.a".into(), "INSERT".into()),
        ]
    );
    let update = value(&records[2]);
    assert_eq!(update["old"]["v"], "one");
    assert_eq!(update["new"]["v"], "ONE");
    let delete = value(&records[3]);
    assert_eq!(delete["old"]["v"], "uno");
    assert!(delete["new"].is_null());
    assert!(update["commit_time"].as_str().unwrap().ends_with('Z'));
    assert_eq!(
        records[0].source_partition,
        serde_json::json!({"table": "public.a"})
    );
    assert_eq!(records[0].topic, "audit-events");

    // Commit only up to the UPDATE of a (record 2) and the INSERT of b (record 1), then
    // restart: exactly the rest arrives, once.
    let mut offsets = BTreeMap::new();
    for r in &records[1..3] {
        offsets.insert(r.source_partition.to_string(), r.source_offset.clone());
    }
    task.stop_with(false).await.unwrap();
    db.exec("INSERT INTO b VALUES (2, 'dos');").await;
    let mut restarted = PgAuditTask::default();
    let tc = cfg.clone();
    restarted
        .start(task_ctx("ab", 0, false, &cfg, offsets), tc)
        .await
        .unwrap();
    let rest = poll_records(&mut restarted, 3).await;
    let rest_ids: Vec<i64> = rest
        .iter()
        .map(|r| value(r)["id"].as_i64().unwrap())
        .collect();
    let expected: Vec<i64> = records[3..]
        .iter()
        .map(|r| value(r)["id"].as_i64().unwrap())
        .collect();
    assert_eq!(&rest_ids[..2], expected.as_slice());
    assert_eq!(rest.len(), 3, "{rest_ids:?}");
    assert_eq!(value(&rest[2])["new"]["v"], "dos");
    delete_all(connector, vec![restarted]).await;
    assert!(db.catalog().await.is_empty());
}

#[tokio::test]
async fn cleanup_only_instances_remove_everything_a_previous_instance_provisioned() {
    let db = TestDb::new().await;
    db.exec("CREATE TABLE t1 (id int); CREATE TABLE t2 (id int);")
        .await;
    let cfg = config(&db, "t1,t2");

    // Cleanup of a connector whose start never ran: nothing there, nothing made.
    let (connector, tasks) = start_all("never-started", &cfg, 2, true).await;
    delete_all(connector, tasks).await;
    assert!(db.catalog().await.is_empty());

    let (connector, tasks) = start_all("moved", &cfg, 2, false).await;
    let provisioned = db.catalog().await;
    assert_eq!(provisioned.triggers.len(), 2);
    // The executor hosting it vanished: its instances just go away (plain stop).
    stop_all_plain(connector, tasks).await;

    // Re-hosted cleanup on fresh instances in cleanup-only mode.
    let (connector, tasks) = start_all("moved", &cfg, 2, true).await;
    assert_eq!(
        db.catalog().await,
        provisioned,
        "cleanup-only start changed something"
    );
    delete_all(connector, tasks).await;
    assert!(db.catalog().await.is_empty(), "{:?}", db.catalog().await);
}

#[tokio::test]
async fn cleanup_is_idempotent_and_tolerates_objects_dropped_by_hand() {
    let db = TestDb::new().await;
    db.exec("CREATE TABLE t1 (id int); CREATE TABLE t2 (id int); CREATE TABLE t3 (id int);")
        .await;
    let cfg = config(&db, "t1,t2,t3");
    let (connector, tasks) = start_all("by-hand", &cfg, 3, false).await;
    let c = db.catalog().await;
    let (_, trigger) = &c.triggers[0];
    // An operator removes a trigger, a watched table and the audit table by hand.
    db.exec(&format!(
        r#"DROP TRIGGER "{trigger}" ON t1; DROP TABLE t2;"#
    ))
    .await;
    db.exec(&format!("DROP TABLE {}", c.audit_tables[0])).await;
    delete_all(connector, tasks).await;
    assert!(db.catalog().await.is_empty(), "{:?}", db.catalog().await);

    // And a second full cleanup run succeeds.
    let mut cfg2 = cfg.clone();
    cfg2.insert(keys::TABLES.to_owned(), "t1,t3".to_owned());
    let (connector, tasks) = start_all("by-hand", &cfg2, 3, true).await;
    delete_all(connector, tasks).await;
    assert!(db.catalog().await.is_empty());
}

#[tokio::test]
async fn a_config_update_creates_and_drops_triggers_but_keeps_the_audit_rows() {
    let db = TestDb::new().await;
    db.exec("CREATE TABLE a (id int); CREATE TABLE b (id int); CREATE TABLE c (id int);")
        .await;
    let (connector, tasks) = start_all("upd", &config(&db, "a,b"), 2, false).await;
    db.exec("INSERT INTO a VALUES (1);").await;
    assert_eq!(
        db.catalog().await.trigger_tables(),
        vec!["public.a", "public.b"]
    );
    stop_all_plain(connector, tasks).await;

    let (connector, mut tasks) = start_all("upd", &config(&db, "b,c"), 1, false).await;
    let after = db.catalog().await;
    assert_eq!(after.trigger_tables(), vec!["public.b", "public.c"]);
    assert_eq!(after.audit_tables.len(), 1);
    let audit_rows: i64 = db
        .client
        .query_one(
            &format!("SELECT count(*) FROM {}", after.audit_tables[0]),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(audit_rows, 1, "the audit table was kept across the update");
    db.exec("INSERT INTO a VALUES (2); INSERT INTO c VALUES (3);")
        .await;
    let records = poll_records(&mut tasks[0], 1).await;
    assert_eq!(records.len(), 1);
    assert_eq!(value(&records[0])["table"], "public.c");
    delete_all(connector, tasks).await;
    assert!(db.catalog().await.is_empty());
}

#[tokio::test]
async fn a_malicious_table_name_cannot_inject_sql() {
    let db = TestDb::new().await;
    db.exec("CREATE TABLE victim (id int); INSERT INTO victim VALUES (1);")
        .await;
    let evil = r#"public."x""; DROP TABLE victim; --""#;
    let mut connector = PgAuditConnector::default();
    let err = connector
        .start(connector_ctx("evil", false), config(&db, evil))
        .await
        .expect_err("a missing table fails the start");
    assert!(err.to_string().contains("does not exist"), "{err}");
    assert!(db.table_exists("public", "victim").await);
    connector.stop_with(true).await.unwrap();

    // A table really called that is watched like any other.
    db.exec(r#"CREATE TABLE "x""; DROP TABLE victim; --" (id int);"#)
        .await;
    let (connector, mut tasks) = start_all("evil", &config(&db, evil), 1, false).await;
    db.exec(r#"INSERT INTO "x""; DROP TABLE victim; --" VALUES (7);"#)
        .await;
    let records = poll_records(&mut tasks[0], 1).await;
    assert_eq!(records.len(), 1);
    assert_eq!(value(&records[0])["name"], r#"x"; DROP TABLE victim; --"#);
    assert_eq!(value(&records[0])["new"]["id"], 7);
    delete_all(connector, tasks).await;
    assert!(db.catalog().await.is_empty());
    assert!(db.table_exists("public", "victim").await);
}

#[tokio::test]
async fn two_connectors_on_one_table_do_not_collide() {
    let db = TestDb::new().await;
    db.exec("CREATE TABLE shared (id int);").await;
    let cfg = config(&db, "shared");
    let (c1, mut t1) = start_all("first", &cfg, 1, false).await;
    let (c2, mut t2) = start_all("first-2", &cfg, 1, false).await;
    let both = db.catalog().await;
    assert_eq!(both.audit_tables.len(), 2);
    assert_eq!(both.functions.len(), 2);
    assert_eq!(both.triggers.len(), 2);
    db.exec("INSERT INTO shared VALUES (1);").await;
    assert_eq!(poll_records(&mut t1[0], 1).await.len(), 1);
    assert_eq!(poll_records(&mut t2[0], 1).await.len(), 1);
    delete_all(c1, t1).await;
    let left = db.catalog().await;
    assert_eq!(left.audit_tables.len(), 1);
    assert_eq!(left.functions.len(), 1);
    assert_eq!(left.triggers.len(), 1);
    db.exec("INSERT INTO shared VALUES (2);").await;
    assert_eq!(poll_records(&mut t2[0], 1).await.len(), 1);
    delete_all(c2, t2).await;
    assert!(db.catalog().await.is_empty());
}

#[tokio::test]
async fn zero_tables_make_zero_tasks() {
    let db = TestDb::new().await;
    let (connector, tasks) = start_all("empty", &config(&db, ""), 4, false).await;
    assert!(tasks.is_empty());
    let c = db.catalog().await;
    assert_eq!(c.audit_tables.len(), 1);
    assert!(c.triggers.is_empty());
    delete_all(connector, tasks).await;
    assert!(db.catalog().await.is_empty());
}

#[tokio::test]
async fn the_password_never_appears_in_debug_output_or_errors() {
    let db = TestDb::new().await;
    let secret = "Pa55-w0rd-that-must-not-leak";
    let mut cfg = config(&db, "no_such_table");
    cfg.insert(keys::PASSWORD.to_owned(), secret.to_owned());

    // Fails at provisioning (the table is missing).
    let mut connector = PgAuditConnector::default();
    let err = connector
        .start(connector_ctx("pw", false), cfg.clone())
        .await
        .unwrap_err();
    assert!(!err.to_string().contains(secret), "{err}");
    assert!(!format!("{err:?}").contains(secret));
    assert!(!format!("{connector:?}").contains(secret), "{connector:?}");

    // Fails at connect (no such database).
    cfg.insert(
        keys::DATABASE.to_owned(),
        "wharf_no_such_database".to_owned(),
    );
    let mut connector = PgAuditConnector::default();
    let err = connector
        .start(connector_ctx("pw", false), cfg.clone())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("wharf_no_such_database"), "{err}");
    assert!(!err.to_string().contains(secret), "{err}");
    let mut task = PgAuditTask::default();
    let err = task
        .start(task_ctx("pw", 0, false, &cfg, BTreeMap::new()), cfg.clone())
        .await
        .unwrap_err();
    assert!(!err.to_string().contains(secret));
    assert!(!format!("{task:?}").contains(secret));

    // ConfigDef validation shows it redacted.
    let def = postgres_audit::config_def();
    let shown = def
        .validate(&cfg)
        .into_iter()
        .find(|v| v.name == keys::PASSWORD)
        .unwrap();
    assert_eq!(shown.value.as_deref(), Some(wharf_sdk::REDACTED));
    assert!(def.key(keys::PASSWORD).unwrap().secret);
}

#[test]
fn table_names_in_list_form_round_trip() {
    let t = TableName {
        schema: Some("weird".into()),
        name: "na-me".into(),
    };
    assert_eq!(t.to_string(), "weird.na-me");
}

#[tokio::test]
async fn a_configured_audit_table_is_used_and_a_foreign_one_is_never_adopted_or_dropped() {
    let db = TestDb::new().await;
    db.exec(
        "CREATE SCHEMA audit_s; CREATE TABLE t (id int);
         CREATE TABLE public.precious (id int); INSERT INTO precious VALUES (1);",
    )
    .await;
    let mut cfg = config(&db, "t");
    cfg.insert(keys::AUDIT_TABLE.to_owned(), "audit_s.events".to_owned());
    let (connector, tasks) = start_all("custom", &cfg, 1, false).await;
    assert!(db.table_exists("audit_s", "events").await);
    // An operator drops the whole schema (table and function) by hand: cleanup copes.
    db.exec("DROP SCHEMA audit_s CASCADE;").await;
    delete_all(connector, tasks).await;
    assert!(db.catalog().await.is_empty(), "{:?}", db.catalog().await);

    // audit.table naming somebody else's table: start refuses, cleanup leaves it alone.
    cfg.insert(keys::AUDIT_TABLE.to_owned(), "public.precious".to_owned());
    let mut connector = PgAuditConnector::default();
    let err = connector
        .start(connector_ctx("custom", false), cfg.clone())
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("not created by this connector"),
        "{err}"
    );
    connector.stop_with(true).await.unwrap();
    assert!(db.table_exists("public", "precious").await);
    assert!(db.catalog().await.triggers.is_empty());
}

#[tokio::test]
async fn concurrent_writers_never_make_a_resumed_task_skip_a_row() {
    let db = TestDb::new().await;
    db.exec("CREATE TABLE w (id int, writer int);").await;
    let cfg = config(&db, "w");
    let (connector, mut tasks) = start_all("conc", &cfg, 1, false).await;
    // Transactions commit in the opposite order of their first write: without the
    // ordering lock the later id would commit first and a reader could pass it.
    let first = connect(&db.name).await;
    let second = connect(&db.name).await;
    first
        .batch_execute("BEGIN; INSERT INTO w VALUES (1, 1);")
        .await
        .unwrap();
    let second_write = tokio::spawn(async move {
        second
            .batch_execute("BEGIN; INSERT INTO w VALUES (2, 2); COMMIT;")
            .await
            .map(|_| second)
    });
    // The second writer waits on the ordering lock (seen in pg_locks), so nothing is
    // visible yet.
    let deadline = Instant::now() + Duration::from_secs(RECORDS_DEADLINE_SECS);
    loop {
        let waiting: i64 = db
            .client
            .query_one(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if waiting == 1 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the second writer never waited for the lock"
        );
        tokio::time::sleep(Duration::from_millis(CONDITION_CHECK_INTERVAL_MS)).await;
    }
    assert!(tasks[0].poll().await.unwrap().is_empty());
    first.batch_execute("COMMIT;").await.unwrap();
    let _second = second_write.await.unwrap().unwrap();
    let records = poll_records(&mut tasks[0], 2).await;
    let writers: Vec<i64> = records
        .iter()
        .map(|r| value(r)["new"]["writer"].as_i64().unwrap())
        .collect();
    assert_eq!(writers, vec![1, 2], "audit ids follow commit order");
    delete_all(connector, tasks).await;
    assert!(db.catalog().await.is_empty());
}

#[tokio::test]
async fn changing_audit_table_moves_everything_and_leaves_nothing_behind() {
    let db = TestDb::new().await;
    db.exec("CREATE SCHEMA other; CREATE TABLE t (id int);")
        .await;
    let cfg = config(&db, "t");
    let (connector, tasks) = start_all("mover", &cfg, 1, false).await;
    let before = db.catalog().await;
    assert_eq!(before.audit_tables.len(), 1);
    stop_all_plain(connector, tasks).await;

    // Config update: the audit table moves to another schema.
    let mut moved = cfg.clone();
    moved.insert(
        keys::AUDIT_TABLE.to_owned(),
        "other.wharf_audit_moved".to_owned(),
    );
    let (connector, mut tasks) = start_all("mover", &moved, 1, false).await;
    let after = db.catalog().await;
    assert_eq!(
        after.audit_tables,
        vec!["other.wharf_audit_moved"],
        "{after:?}"
    );
    assert_eq!(after.functions.len(), 1, "the old function went: {after:?}");
    assert_eq!(
        after.triggers.len(),
        1,
        "one trigger, on the new function: {after:?}"
    );
    db.exec("INSERT INTO t VALUES (5);").await;
    let records = poll_records(&mut tasks[0], 1).await;
    assert_eq!(records.len(), 1);
    assert_eq!(value(&records[0])["new"]["id"], 5);
    delete_all(connector, tasks).await;
    assert!(db.catalog().await.is_empty(), "{:?}", db.catalog().await);
}

/// Starts the connector and its tasks as incarnation `incarnation`; the start's error
/// (after the stop(true) a deletion would run) when the connector refuses.
async fn start_as(
    name: &str,
    incarnation: &str,
    cfg: &ConfigMap,
) -> Result<(PgAuditConnector, Vec<PgAuditTask>), String> {
    let mut connector = PgAuditConnector::default();
    let ctx = ConnectorContext::new(name, incarnation, false, "executor-a", Arc::new(|| {}));
    if let Err(e) = connector.start(ctx, cfg.clone()).await {
        connector
            .stop_with(true)
            .await
            .expect("stop(true) after a refused start");
        return Err(e.to_string());
    }
    let mut tasks = Vec::new();
    for (i, tc) in connector
        .task_configs(1)
        .await
        .unwrap()
        .into_iter()
        .enumerate()
    {
        let mut ctx = task_ctx(name, i as u32, false, cfg, BTreeMap::new());
        ctx.incarnation = incarnation.to_owned();
        let mut task = PgAuditTask::default();
        task.start(ctx, tc).await.expect("task start");
        tasks.push(task);
    }
    Ok((connector, tasks))
}

#[tokio::test]
async fn a_stale_incarnations_cleanup_never_drops_what_its_successor_adopted() {
    let db = TestDb::new().await;
    db.exec("CREATE TABLE orders (id int);").await;
    let cfg = config(&db, "orders");
    // Incarnation 1 is deleted with keep_resources: every stop passes false.
    let (c1, t1) = start_as("orders", "i1", &cfg).await.unwrap();
    stop_all_plain(c1, t1).await;
    db.exec("INSERT INTO orders VALUES (1);").await;
    let kept = db.catalog().await;
    assert!(!kept.is_empty());

    let err = start_as("orders", "i2", &cfg).await.unwrap_err();
    assert!(
        err.contains("earlier incarnation (i1)") && err.contains("audit.adopt"),
        "{err}"
    );
    assert_eq!(
        db.catalog().await,
        kept,
        "a refused incarnation's cleanup drops nothing"
    );

    let mut from_end = cfg.clone();
    from_end.insert(keys::ADOPT.to_owned(), "from-end".to_owned());
    let (c3, mut t3) = start_as("orders", "i3", &from_end).await.unwrap();
    db.exec("INSERT INTO orders VALUES (2);").await;
    let records = poll_records(&mut t3[0], 1).await;
    let ids: Vec<_> = records
        .iter()
        .map(|r| value(r)["new"]["id"].clone())
        .collect();
    assert_eq!(
        ids,
        [serde_json::json!(2)],
        "rows kept before the takeover are skipped"
    );

    // A late cleanup-only stop(true) of incarnation 1 (its task and connector).
    let mut late_task = PgAuditTask::default();
    let mut ctx = task_ctx("orders", 0, true, &cfg, BTreeMap::new());
    ctx.incarnation = "i1".to_owned();
    late_task.start(ctx, cfg.clone()).await.unwrap();
    late_task.stop_with(true).await.unwrap();
    let mut late = PgAuditConnector::default();
    let ctx = ConnectorContext::new("orders", "i1", true, "executor-a", Arc::new(|| {}));
    late.start(ctx, cfg.clone()).await.unwrap();
    late.stop_with(true).await.unwrap();
    assert_eq!(db.catalog().await, kept, "incarnation 3's objects survive");

    delete_all(c3, t3).await;
    assert!(db.catalog().await.is_empty());
}
