//! Operator scenario 02: deleting a connector that has no
//! running instance still cleans up: cleanup-only instances are started and stopped with
//! connector_deleted = true; the status shows DELETING until then. First with the test
//! plugin (STOPPED, PAUSED, FAILED), then with `postgres-audit` (STOPPED, PAUSED) against
//! the real PostgreSQL catalog.
//!
//! Needs PostgreSQL on 127.0.0.1:5432 (trust auth, database `test`). Build first:
//! `cargo build -p wharf-control-plane -p wharf-executor-stock`.

use serde_json::{Value, json};
use wharf_harness::cluster::{CONVERGE, NOT_FOUND, TestCluster};
use wharf_harness::lifecycle::Lifecycle;
use wharf_harness::wait_until;

/// Deletes without waiting, checks the answer says DELETING, then waits until it is gone.
async fn delete_and_see_deleting(c: &TestCluster, name: &str) -> Value {
    let r = c.call("DeleteConnector", json!({ "name": name }));
    assert_eq!(r.code, 0, "{}", r.err);
    let answered = r.body.clone();
    if answered["deleted"] != true {
        assert_eq!(
            answered["status"]["connector"]["state"], "STATE_DELETING",
            "{answered}"
        );
        assert!(
            answered["status"]["deletion"]["steps"].is_array(),
            "{answered}"
        );
    }
    wait_until(&format!("{name} to be deleted"), CONVERGE, || async {
        (c.call("GetConnectorStatus", json!({ "name": name })).code == NOT_FOUND).then_some(())
    })
    .await;
    answered
}

fn one_completed_cleanup_stop(lc: &Lifecycle, name: &str, task: Option<u32>, cleanup_only: bool) {
    let trues = lc.cleanups(name, task);
    assert_eq!(
        trues.len(),
        1,
        "{name} {task:?}: exactly one stop(true): {trues:?}"
    );
    assert!(trues[0].ok, "{name} {task:?}: stop(true) completed");
    assert_eq!(
        trues[0].cleanup_only, cleanup_only,
        "{name} {task:?}: cleanup-only instance: {trues:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_stopped_paused_or_failed_test_connector_still_cleans_up() {
    let c = TestCluster::start(2).await;

    // STOPPED: nothing runs, so every instance is a cleanup-only one.
    let name = "from-stopped";
    assert_eq!(
        c.call(
            "CreateConnector",
            json!({ "name": name, "config": c.source_config(name, 2) })
        )
        .code,
        0
    );
    c.wait_state(name, "STATE_RUNNING", "STATE_RUNNING", 2)
        .await;
    assert_eq!(c.call("StopConnector", json!({ "name": name })).code, 0);
    c.wait_state(name, "STATE_STOPPED", "STATE_STOPPED", 2)
        .await;
    delete_and_see_deleting(&c, name).await;
    let lc = Lifecycle::read(&c.lifecycle_path(name));
    for t in [Some(0), Some(1), None] {
        one_completed_cleanup_stop(&lc, name, t, true);
    }

    // PAUSED: tasks are gone (cleanup-only), the connector instance still runs (stopped
    // where it lives).
    let name = "from-paused";
    assert_eq!(
        c.call(
            "CreateConnector",
            json!({ "name": name, "config": c.source_config(name, 2) })
        )
        .code,
        0
    );
    c.wait_state(name, "STATE_RUNNING", "STATE_RUNNING", 2)
        .await;
    assert_eq!(c.call("PauseConnector", json!({ "name": name })).code, 0);
    c.wait_state(name, "STATE_PAUSED", "STATE_PAUSED", 2).await;
    delete_and_see_deleting(&c, name).await;
    let lc = Lifecycle::read(&c.lifecycle_path(name));
    one_completed_cleanup_stop(&lc, name, Some(0), true);
    one_completed_cleanup_stop(&lc, name, Some(1), true);
    one_completed_cleanup_stop(&lc, name, None, false);

    // FAILED in start: the connector instance's cleanup runs on a cleanup-only instance.
    let name = "from-failed";
    let mut cfg = c.source_config(name, 1);
    cfg["test.start.fail"] = json!("true");
    assert_eq!(
        c.call("CreateConnector", json!({ "name": name, "config": cfg }))
            .code,
        0
    );
    wait_until("connector FAILED", CONVERGE, || async {
        let s = c.status(name)?;
        (s["connector"]["state"] == "STATE_FAILED").then_some(())
    })
    .await;
    delete_and_see_deleting(&c, name).await;
    let lc = Lifecycle::read(&c.lifecycle_path(name));
    let trues = lc.cleanups(name, None);
    assert!(
        !trues.is_empty(),
        "the failed connector still got stop(true): {:?}",
        lc.calls(name, None)
    );
}

async fn pg() -> wharf_harness::tokio_postgres::Client {
    let (client, conn) = wharf_harness::tokio_postgres::connect(
        "host=127.0.0.1 user=postgres dbname=test",
        wharf_harness::tokio_postgres::NoTls,
    )
    .await
    .expect("PostgreSQL on 127.0.0.1:5432");
    tokio::spawn(conn);
    client
}

/// Audit objects of `connector` in the catalog: (tables, functions, triggers).
async fn audit_objects(
    client: &wharf_harness::tokio_postgres::Client,
    connector: &str,
) -> (i64, i64, i64) {
    let pattern = format!("wharf_audit%{connector}%");
    let one = |sql: &'static str| {
        let pattern = pattern.clone();
        async move {
            client
                .query_one(sql, &[&pattern])
                .await
                .expect("catalog query")
                .get::<_, i64>(0)
        }
    };
    (
        one("SELECT count(*) FROM pg_class WHERE relname LIKE $1 AND relkind = 'r'").await,
        one("SELECT count(*) FROM pg_proc WHERE proname LIKE $1").await,
        one("SELECT count(*) FROM pg_trigger WHERE tgname LIKE $1").await,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_stopped_or_paused_postgres_audit_connector_drops_its_catalog_objects() {
    let client = pg().await;
    client
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS case02_orders (id serial primary key, note text)",
        )
        .await
        .expect("table");
    let c = TestCluster::start(2).await;
    for (name, park) in [
        ("case02stopped", "StopConnector"),
        ("case02paused", "PauseConnector"),
    ] {
        let config = json!({
            "connector.class": "postgres-audit",
            "tasks.max": "1",
            "connection.host": "127.0.0.1",
            "connection.port": "5432",
            "connection.user": "postgres",
            "connection.database": "test",
            "tables": "case02_orders",
            "topic": name,
        });
        let r = c.call("CreateConnector", json!({ "name": name, "config": config }));
        assert_eq!(r.code, 0, "{}", r.err);
        c.wait_state(name, "STATE_RUNNING", "STATE_RUNNING", 1)
            .await;
        let client = &client;
        wait_until(
            "audit table, function and trigger provisioned",
            CONVERGE,
            || async move {
                let (t, f, g) = audit_objects(client, name).await;
                (t >= 1 && f >= 1 && g >= 1).then_some(())
            },
        )
        .await;
        assert_eq!(c.call(park, json!({ "name": name })).code, 0);
        let parked = if park == "StopConnector" {
            "STATE_STOPPED"
        } else {
            "STATE_PAUSED"
        };
        c.wait_state(name, parked, parked, 1).await;
        assert!(
            audit_objects(client, name).await.0 >= 1,
            "{park} keeps the audit table"
        );
        delete_and_see_deleting(&c, name).await;
        assert_eq!(
            audit_objects(client, name).await,
            (0, 0, 0),
            "{name}: catalog holds nothing of it"
        );
    }
}
