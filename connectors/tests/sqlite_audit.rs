//! sqlite-audit driven through the SDK traits as an executor would, against real SQLite
//! files in temp dirs; the catalog checks read `sqlite_master`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rusqlite::Connection;
use tokio_util::sync::CancellationToken;
use wharf_connectors::sqlite_audit::{SqliteAuditConnector, SqliteAuditTask, keys};
use wharf_sdk::{ConfigMap, Connector, ConnectorContext, SourceRecord, SourceTask, TaskContext};

/// How long a test waits for records to show up, in seconds.
const RECORDS_DEADLINE_SECS: u64 = 20;
/// Poll interval the tests configure, in milliseconds.
const TEST_POLL_INTERVAL_MS: &str = "20";

struct TestDb {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl TestDb {
    fn new(setup: &str) -> TestDb {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("app.db");
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(setup).unwrap();
        TestDb { _dir: dir, path }
    }

    fn exec(&self, sql: &str) {
        let conn = Connection::open(&self.path).unwrap();
        conn.busy_timeout(Duration::from_secs(5)).unwrap();
        conn.execute_batch(sql)
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    /// Every object in `sqlite_master` that is not one of `keep` (the test's own tables).
    fn objects(&self) -> Vec<(String, String, String)> {
        let conn = Connection::open(&self.path).unwrap();
        let mut stmt = conn
            .prepare("SELECT type, name, tbl_name FROM sqlite_master ORDER BY type, name")
            .unwrap();
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap()
    }

    /// What an audit connector made: tables named wharf_audit* and all triggers.
    fn catalog(&self) -> Catalog {
        let objs = self.objects();
        Catalog {
            audit_tables: objs
                .iter()
                .filter(|(ty, name, _)| ty == "table" && name.starts_with("wharf_audit"))
                .map(|(_, n, _)| n.clone())
                .collect(),
            triggers: objs
                .iter()
                .filter(|(ty, _, _)| ty == "trigger")
                .map(|(_, n, t)| (t.clone(), n.clone()))
                .collect(),
        }
    }

    fn count(&self, sql: &str) -> i64 {
        let conn = Connection::open(&self.path).unwrap();
        conn.query_row(sql, [], |r| r.get(0)).unwrap()
    }
}

#[derive(Debug, PartialEq, Eq)]
struct Catalog {
    audit_tables: Vec<String>,
    /// `(table, trigger)`.
    triggers: Vec<(String, String)>,
}

impl Catalog {
    fn is_empty(&self) -> bool {
        self.audit_tables.is_empty() && self.triggers.is_empty()
    }
    fn trigger_tables(&self) -> Vec<String> {
        let mut t: Vec<String> = self.triggers.iter().map(|(t, _)| t.clone()).collect();
        t.sort();
        t.dedup();
        t
    }
}

fn config(path: &Path, tables: &str) -> ConfigMap {
    [
        ("connector.class", "sqlite-audit"),
        (keys::DATABASE_PATH, path.to_str().unwrap()),
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

async fn start_all(
    name: &str,
    cfg: &ConfigMap,
    max_tasks: u32,
    cleanup_only: bool,
) -> (SqliteAuditConnector, Vec<SqliteAuditTask>) {
    let mut connector = SqliteAuditConnector::default();
    connector
        .start(connector_ctx(name, cleanup_only), cfg.clone())
        .await
        .expect("connector start");
    let task_configs = connector.task_configs(max_tasks).await.unwrap();
    let mut tasks = Vec::new();
    for (i, tc) in task_configs.into_iter().enumerate() {
        let mut task = SqliteAuditTask::default();
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

async fn delete_all(mut connector: SqliteAuditConnector, tasks: Vec<SqliteAuditTask>) {
    for mut t in tasks {
        t.stop_with(true).await.expect("task stop(true)");
    }
    connector
        .stop_with(true)
        .await
        .expect("connector stop(true)");
}

async fn stop_all_plain(mut connector: SqliteAuditConnector, tasks: Vec<SqliteAuditTask>) {
    for mut t in tasks {
        t.stop_with(false).await.expect("task stop(false)");
    }
    connector
        .stop_with(false)
        .await
        .expect("connector stop(false)");
}

async fn poll_records(task: &mut SqliteAuditTask, n: usize) -> Vec<SourceRecord> {
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
    let db = TestDb::new(
        r#"CREATE TABLE orders (id INTEGER PRIMARY KEY, note TEXT);
           CREATE TABLE "Order Items" (id INTEGER PRIMARY KEY, qty INTEGER);
           CREATE TABLE "we""ird.na-me" (id INTEGER, data BLOB);"#,
    );
    let before = db.objects();
    let cfg = config(
        &db.path,
        r#"main.orders, Order Items, main."we""ird.na-me""#,
    );
    let (connector, tasks) = start_all("orders-audit", &cfg, 2, false).await;
    assert_eq!(tasks.len(), 2);
    let after_create = db.catalog();
    assert_eq!(after_create.audit_tables.len(), 1, "{after_create:?}");
    assert_eq!(
        after_create.triggers.len(),
        9,
        "three per table: {after_create:?}"
    );
    assert_eq!(
        after_create.trigger_tables(),
        vec!["Order Items", "orders", "we\"ird.na-me"]
    );

    stop_all_plain(connector, tasks).await;
    assert_eq!(db.catalog(), after_create);

    let (connector, tasks) = start_all("orders-audit", &cfg, 2, false).await;
    assert_eq!(db.catalog(), after_create, "a second start is idempotent");

    let mut tasks = tasks.into_iter();
    let mut t0 = tasks.next().unwrap();
    let mut t1 = tasks.next().unwrap();
    t0.stop_with(true).await.unwrap();
    assert_eq!(db.catalog().trigger_tables(), vec!["we\"ird.na-me"]);
    t1.stop_with(true).await.unwrap();
    assert!(db.catalog().triggers.is_empty());
    assert_eq!(
        db.catalog().audit_tables.len(),
        1,
        "the connector's table stays until it stops"
    );
    let mut connector = connector;
    connector.stop_with(true).await.unwrap();
    assert_eq!(db.objects(), before, "only the watched tables remain");

    let (connector, tasks) = start_all("orders-audit", &cfg, 2, true).await;
    assert_eq!(
        db.objects(),
        before,
        "cleanup-only start provisioned something"
    );
    delete_all(connector, tasks).await;
    assert_eq!(db.objects(), before);
}

#[tokio::test]
async fn changes_arrive_once_in_order_and_a_restarted_task_resumes_after_its_offset() {
    let db = TestDb::new(
        "CREATE TABLE a (id INTEGER PRIMARY KEY, v TEXT, b BLOB);
         CREATE TABLE b (id INTEGER PRIMARY KEY, v TEXT);",
    );
    let cfg = config(&db.path, "a,b");
    let (connector, mut tasks) = start_all("ab", &cfg, 1, false).await;
    let mut task = tasks.remove(0);
    db.exec(
        "INSERT INTO a VALUES (1, 'one', x'00ff'); INSERT INTO b VALUES (1, 'uno');
         UPDATE a SET v = 'ONE' WHERE id = 1; DELETE FROM b WHERE id = 1;
         INSERT INTO a VALUES (2, 'two', NULL);",
    );
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
            ("main.a".into(), "INSERT".into()),
            ("main.b".into(), "INSERT".into()),
            ("main.a".into(), "UPDATE".into()),
            ("main.b".into(), "DELETE".into()),
            ("main.a".into(), "INSERT".into()),
        ]
    );
    assert_eq!(value(&records[0])["new"]["b"], "00FF", "BLOBs as hex");
    let update = value(&records[2]);
    assert_eq!(update["old"]["v"], "one");
    assert_eq!(update["new"]["v"], "ONE");
    let delete = value(&records[3]);
    assert_eq!(delete["old"]["v"], "uno");
    assert!(delete["new"].is_null());
    assert!(update["commit_time_ms"].as_i64().unwrap() > 1_600_000_000_000);
    assert_eq!(
        records[0].source_partition,
        serde_json::json!({"table": "main.a"})
    );

    let mut offsets = BTreeMap::new();
    for r in &records[1..3] {
        offsets.insert(r.source_partition.to_string(), r.source_offset.clone());
    }
    task.stop_with(false).await.unwrap();
    db.exec("INSERT INTO b VALUES (2, 'dos');");
    let mut restarted = SqliteAuditTask::default();
    restarted
        .start(task_ctx("ab", 0, false, &cfg, offsets), cfg.clone())
        .await
        .unwrap();
    let rest = poll_records(&mut restarted, 3).await;
    let ids = |rs: &[SourceRecord]| -> Vec<i64> {
        rs.iter()
            .map(|r| value(r)["id"].as_i64().unwrap())
            .collect()
    };
    assert_eq!(rest.len(), 3, "{:?}", ids(&rest));
    assert_eq!(ids(&rest[..2]), ids(&records[3..]));
    assert_eq!(value(&rest[2])["new"]["v"], "dos");
    delete_all(connector, vec![restarted]).await;
    assert!(db.catalog().is_empty());
}

#[tokio::test]
async fn cleanup_only_instances_remove_everything_a_previous_instance_provisioned() {
    let db = TestDb::new("CREATE TABLE t1 (id INTEGER); CREATE TABLE t2 (id INTEGER);");
    let cfg = config(&db.path, "t1,t2");
    let (connector, tasks) = start_all("never-started", &cfg, 2, true).await;
    delete_all(connector, tasks).await;
    assert!(db.catalog().is_empty());

    let (connector, tasks) = start_all("moved", &cfg, 2, false).await;
    let provisioned = db.catalog();
    assert_eq!(provisioned.triggers.len(), 6);
    stop_all_plain(connector, tasks).await;

    let (connector, tasks) = start_all("moved", &cfg, 2, true).await;
    assert_eq!(db.catalog(), provisioned);
    delete_all(connector, tasks).await;
    assert!(db.catalog().is_empty(), "{:?}", db.catalog());
}

#[tokio::test]
async fn cleanup_is_idempotent_and_tolerates_objects_dropped_by_hand() {
    let db = TestDb::new(
        "CREATE TABLE t1 (id INTEGER); CREATE TABLE t2 (id INTEGER); CREATE TABLE t3 (id INTEGER);",
    );
    let cfg = config(&db.path, "t1,t2,t3");
    let (connector, tasks) = start_all("by-hand", &cfg, 3, false).await;
    let c = db.catalog();
    let t1_trigger = c
        .triggers
        .iter()
        .find(|(t, _)| t == "t1")
        .unwrap()
        .1
        .clone();
    db.exec(&format!(
        r#"DROP TRIGGER "{t1_trigger}"; DROP TABLE t2; DROP TABLE "{}";"#,
        c.audit_tables[0]
    ));
    delete_all(connector, tasks).await;
    assert!(db.catalog().is_empty(), "{:?}", db.catalog());

    let (connector, tasks) = start_all("by-hand", &config(&db.path, "t1,t3"), 3, true).await;
    delete_all(connector, tasks).await;
    assert!(db.catalog().is_empty());

    // Even the database file gone: cleanup has nothing to do and succeeds.
    let (connector, tasks) = start_all("by-hand", &config(&db.path, "t1,t3"), 3, true).await;
    std::fs::remove_file(&db.path).unwrap();
    delete_all(connector, tasks).await;
    assert!(!db.path.exists(), "cleanup must not create the file");
}

#[tokio::test]
async fn a_config_update_creates_and_drops_triggers_but_keeps_the_audit_rows() {
    let db = TestDb::new(
        "CREATE TABLE a (id INTEGER); CREATE TABLE b (id INTEGER); CREATE TABLE c (id INTEGER);",
    );
    let (connector, tasks) = start_all("upd", &config(&db.path, "a,b"), 2, false).await;
    db.exec("INSERT INTO a VALUES (1);");
    assert_eq!(db.catalog().trigger_tables(), vec!["a", "b"]);
    stop_all_plain(connector, tasks).await;

    let (connector, mut tasks) = start_all("upd", &config(&db.path, "b,c"), 1, false).await;
    let after = db.catalog();
    assert_eq!(after.trigger_tables(), vec!["b", "c"]);
    assert_eq!(
        db.count(&format!(
            "SELECT count(*) FROM \"{}\"",
            after.audit_tables[0]
        )),
        1,
        "the audit table was kept across the update"
    );
    db.exec("INSERT INTO a VALUES (2); INSERT INTO c VALUES (3);");
    let records = poll_records(&mut tasks[0], 1).await;
    assert_eq!(records.len(), 1);
    assert_eq!(value(&records[0])["table"], "main.c");

    // A column added to a watched table: the next start re-creates its triggers.
    stop_all_plain(connector, tasks).await;
    db.exec("ALTER TABLE c ADD COLUMN extra TEXT;");
    let (connector, mut tasks) = start_all("upd", &config(&db.path, "b,c"), 1, false).await;
    db.exec("INSERT INTO c VALUES (4, 'x');");
    let records = poll_records(&mut tasks[0], 2).await;
    assert_eq!(value(records.last().unwrap())["new"]["extra"], "x");
    delete_all(connector, tasks).await;
    assert!(db.catalog().is_empty());
}

#[tokio::test]
async fn a_malicious_table_name_cannot_inject_sql() {
    let db = TestDb::new("CREATE TABLE victim (id INTEGER); INSERT INTO victim VALUES (1);");
    let evil = r#""x""; DROP TABLE victim; --""#;
    let mut connector = SqliteAuditConnector::default();
    let err = connector
        .start(connector_ctx("evil", false), config(&db.path, evil))
        .await
        .expect_err("a missing table fails the start");
    assert!(err.to_string().contains("does not exist"), "{err}");
    assert_eq!(db.count("SELECT count(*) FROM victim"), 1);
    connector.stop_with(true).await.unwrap();

    db.exec(r#"CREATE TABLE "x""; DROP TABLE victim; --" (id INTEGER, "it's" TEXT);"#);
    let (connector, mut tasks) = start_all("evil", &config(&db.path, evil), 1, false).await;
    db.exec(r#"INSERT INTO "x""; DROP TABLE victim; --" VALUES (7, 'q''uote');"#);
    let records = poll_records(&mut tasks[0], 1).await;
    assert_eq!(records.len(), 1);
    assert_eq!(value(&records[0])["name"], r#"x"; DROP TABLE victim; --"#);
    assert_eq!(value(&records[0])["new"]["it's"], "q'uote");
    delete_all(connector, tasks).await;
    assert!(db.catalog().is_empty());
    assert_eq!(db.count("SELECT count(*) FROM victim"), 1);
}

#[tokio::test]
async fn two_connectors_on_one_table_do_not_collide() {
    let db = TestDb::new("CREATE TABLE shared (id INTEGER);");
    let cfg = config(&db.path, "shared");
    let (c1, mut t1) = start_all("first", &cfg, 1, false).await;
    let (c2, mut t2) = start_all("first_", &cfg, 1, false).await;
    let both = db.catalog();
    assert_eq!(both.audit_tables.len(), 2);
    assert_eq!(both.triggers.len(), 6);
    db.exec("INSERT INTO shared VALUES (1);");
    assert_eq!(poll_records(&mut t1[0], 1).await.len(), 1);
    assert_eq!(poll_records(&mut t2[0], 1).await.len(), 1);
    delete_all(c1, t1).await;
    let left = db.catalog();
    assert_eq!(left.audit_tables.len(), 1);
    assert_eq!(left.triggers.len(), 3);
    db.exec("INSERT INTO shared VALUES (2);");
    assert_eq!(poll_records(&mut t2[0], 1).await.len(), 1);
    delete_all(c2, t2).await;
    assert!(db.catalog().is_empty());
}

#[tokio::test]
async fn zero_tables_make_zero_tasks_and_schemas_other_than_main_are_refused() {
    let db = TestDb::new("CREATE TABLE t (id INTEGER);");
    let (connector, tasks) = start_all("empty", &config(&db.path, ""), 4, false).await;
    assert!(tasks.is_empty());
    assert_eq!(db.catalog().audit_tables.len(), 1);
    delete_all(connector, tasks).await;
    assert!(db.catalog().is_empty());

    let mut connector = SqliteAuditConnector::default();
    let err = connector
        .start(connector_ctx("other", false), config(&db.path, "aux.t"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("tables"), "{err}");
    assert!(db.catalog().is_empty());
}

#[tokio::test]
async fn changing_audit_table_leaves_nothing_behind() {
    let db = TestDb::new("CREATE TABLE t (id INTEGER);");
    let before = db.objects();
    let cfg = config(&db.path, "t");
    let (connector, tasks) = start_all("mover", &cfg, 1, false).await;
    stop_all_plain(connector, tasks).await;

    let mut moved = cfg.clone();
    moved.insert(
        keys::AUDIT_TABLE.to_owned(),
        "wharf_audit \"moved\"".to_owned(),
    );
    let (connector, mut tasks) = start_all("mover", &moved, 1, false).await;
    let after = db.catalog();
    assert_eq!(
        after.audit_tables,
        vec!["wharf_audit \"moved\""],
        "{after:?}"
    );
    assert_eq!(after.triggers.len(), 3);
    db.exec("INSERT INTO t VALUES (5);");
    let records = poll_records(&mut tasks[0], 1).await;
    assert_eq!(records.len(), 1);
    assert_eq!(value(&records[0])["new"]["id"], 5);
    delete_all(connector, tasks).await;
    assert_eq!(db.objects(), before);
}

/// Starts the connector and its tasks as incarnation `incarnation`; the start's error
/// when the connector refuses.
async fn start_as(
    name: &str,
    incarnation: &str,
    cfg: &ConfigMap,
) -> Result<(SqliteAuditConnector, Vec<SqliteAuditTask>), String> {
    let mut connector = SqliteAuditConnector::default();
    let ctx = ConnectorContext::new(name, incarnation, false, "executor-a", Arc::new(|| {}));
    if let Err(e) = connector.start(ctx, cfg.clone()).await {
        // What the runtime does after a failed start of a connector being deleted.
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
        let mut task = SqliteAuditTask::default();
        task.start(ctx, tc).await.expect("task start");
        tasks.push(task);
    }
    Ok((connector, tasks))
}

#[tokio::test]
async fn a_second_connector_naming_the_same_audit_table_is_refused_and_its_deletion_keeps_the_first()
 {
    let db = TestDb::new("CREATE TABLE a (id INTEGER); CREATE TABLE b (id INTEGER);");
    let mut first = config(&db.path, "a");
    first.insert(keys::AUDIT_TABLE.to_owned(), "shared_audit".to_owned());
    let mut second = config(&db.path, "b");
    second.insert(keys::AUDIT_TABLE.to_owned(), "shared_audit".to_owned());
    let (c1, mut t1) = start_as("first", "i1", &first).await.unwrap();
    let before = db.catalog();

    let err = start_as("second", "i1", &second).await.unwrap_err();
    assert!(
        err.contains("already claimed by connector \"first\""),
        "{err}"
    );
    // The refused connector's stop(true) ran: the first one's objects are all there.
    assert_eq!(db.catalog(), before);
    assert_eq!(
        db.count("SELECT count(*) FROM sqlite_master WHERE name = 'shared_audit'"),
        1
    );
    db.exec("INSERT INTO a VALUES (1);");
    assert_eq!(poll_records(&mut t1[0], 1).await.len(), 1);
    delete_all(c1, t1).await;
    assert_eq!(
        db.count(
            "SELECT count(*) FROM sqlite_master WHERE name LIKE 'wharf%' OR name = 'shared_audit'"
        ),
        0
    );
}

#[tokio::test]
async fn a_locked_database_delays_provisioning_and_polls_instead_of_failing_them() {
    let db = TestDb::new("CREATE TABLE orders (id INTEGER);");
    let mut cfg = config(&db.path, "orders");
    // Each statement gives up on the lock quickly, so the retries are what carries it.
    cfg.insert(keys::BUSY_TIMEOUT_MS.to_owned(), "20".to_owned());

    let lock = Connection::open(&db.path).unwrap();
    lock.execute_batch("BEGIN EXCLUSIVE").unwrap();
    let path = db.path.clone();
    let start = tokio::spawn({
        let cfg = cfg.clone();
        async move { start_as("locked", "i1", &cfg).await }
    });
    // The start is stuck behind the lock (and not failed) while the lock is held.
    let deadline = Instant::now() + Duration::from_millis(500);
    while Instant::now() < deadline {
        assert!(
            !start.is_finished(),
            "start finished while the database was locked"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    lock.execute_batch("COMMIT").unwrap();
    let (connector, mut tasks) = start.await.unwrap().expect("start after the lock went");

    db.exec("INSERT INTO orders VALUES (1);");
    let lock = Connection::open(&path).unwrap();
    lock.execute_batch("BEGIN EXCLUSIVE").unwrap();
    let mut task = tasks.remove(0);
    let poll = tokio::spawn(async move {
        let records = poll_records(&mut task, 1).await;
        (task, records)
    });
    let deadline = Instant::now() + Duration::from_millis(500);
    while Instant::now() < deadline {
        assert!(
            !poll.is_finished(),
            "poll returned while the database was locked"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    lock.execute_batch("COMMIT").unwrap();
    let (task, records) = poll.await.expect("poll did not fail");
    assert_eq!(records.len(), 1);
    delete_all(connector, vec![task]).await;
    assert!(db.catalog().is_empty());
}

#[tokio::test]
async fn a_recreated_connector_refuses_or_adopts_a_kept_audit_table_as_audit_adopt_says() {
    let db = TestDb::new("CREATE TABLE orders (id INTEGER);");
    let cfg = config(&db.path, "orders");
    // Incarnation 1 is deleted with keep_resources: every stop passes false.
    let (c1, t1) = start_as("orders", "i1", &cfg).await.unwrap();
    stop_all_plain(c1, t1).await;
    db.exec("INSERT INTO orders VALUES (1);");
    let kept = db.catalog();
    assert_eq!(kept.audit_tables.len(), 1);

    // Incarnation 2, default audit.adopt=never: refused, its cleanup drops nothing.
    let err = start_as("orders", "i2", &cfg).await.unwrap_err();
    assert!(
        err.contains("earlier incarnation (i1)") && err.contains("audit.adopt"),
        "{err}"
    );
    assert_eq!(db.catalog(), kept);

    // Incarnation 3 adopts from the end: the kept row is skipped, new ones arrive.
    let mut from_end = cfg.clone();
    from_end.insert(keys::ADOPT.to_owned(), "from-end".to_owned());
    let (c3, mut t3) = start_as("orders", "i3", &from_end).await.unwrap();
    db.exec("INSERT INTO orders VALUES (2);");
    let records = poll_records(&mut t3[0], 1).await;
    let ids: Vec<_> = records
        .iter()
        .map(|r| value(r)["new"]["id"].clone())
        .collect();
    assert_eq!(ids, [serde_json::json!(2)]);
    // A late stop(true) of incarnation 1 leaves what incarnation 3 now owns.
    let mut late = SqliteAuditConnector::default();
    late.start(connector_ctx_as("orders", "i1", true), cfg.clone())
        .await
        .unwrap();
    late.stop_with(true).await.unwrap();
    assert_eq!(db.catalog(), kept);
    stop_all_plain(c3, t3).await;

    // Incarnation 4 adopts from the start: every kept row is emitted.
    let mut from_start = cfg.clone();
    from_start.insert(keys::ADOPT.to_owned(), "from-start".to_owned());
    let (c4, mut t4) = start_as("orders", "i4", &from_start).await.unwrap();
    let records = poll_records(&mut t4[0], 2).await;
    let ids: Vec<_> = records
        .iter()
        .map(|r| value(r)["new"]["id"].clone())
        .collect();
    assert_eq!(ids, [serde_json::json!(1), serde_json::json!(2)]);
    delete_all(c4, t4).await;
    assert!(db.catalog().is_empty());
    assert_eq!(
        db.count("SELECT count(*) FROM sqlite_master WHERE name = 'wharf_owners'"),
        0
    );
}

fn connector_ctx_as(name: &str, incarnation: &str, cleanup_only: bool) -> ConnectorContext {
    ConnectorContext::new(
        name,
        incarnation,
        cleanup_only,
        "executor-a",
        Arc::new(|| {}),
    )
}
