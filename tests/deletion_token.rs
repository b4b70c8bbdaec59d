//! A stop with `connector_deleted = true` runs only when it comes from the control plane
//! the executor registered with: a plaintext executor port on loopback is reachable by
//! every process of the host, and such a stop makes a plugin drop its resources. The
//! control plane makes a deletion token per registration (RegisterExecutorResponse) and
//! sends it with its destructive stops; the executor refuses one without it
//! (PERMISSION_DENIED), so a stranger's StopTask or StopConnector changes nothing: the
//! audit table is still there and the connector still RUNNING. The control plane's own
//! deletion still drops it.
//!
//! Build first: `cargo build -p wharf-control-plane -p wharf-executor-stock`.

use serde_json::json;
use tonic::Code;
use wharf::pb::v1 as pb;
use wharf::pb::v1::executor_client::ExecutorClient;
use wharf_harness::cluster::TestCluster;
use wharf_harness::postgres_tls::TlsPostgres;
use wharf_harness::tokio_postgres::Client;

const DB: &str = "wharf_token";

async fn audit_tables(sql: &Client) -> i64 {
    sql.query_one(
        "SELECT count(*) FROM pg_class WHERE relname LIKE 'wharf\\_audit%' AND relkind = 'r'",
        &[],
    )
    .await
    .expect("catalog query")
    .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_strangers_destructive_stop_on_a_loopback_executor_changes_nothing() {
    let pg = TlsPostgres::start(&["localhost"]).await;
    let sql = pg.create_db("localhost", DB).await;
    sql.batch_execute("CREATE TABLE t1 (id serial PRIMARY KEY, v text)")
        .await
        .expect("create t1");
    let mut c = TestCluster::start(1).await;
    let name = "guarded";
    let r = c.call(
        "CreateConnector",
        json!({ "name": name, "config": {
            "connector.class": "postgres-audit",
            "tasks.max": "1",
            "connection.host": "127.0.0.1",
            "connection.port": pg.port.to_string(),
            "connection.user": "postgres",
            "connection.database": DB,
            "connection.sslmode": "require",
            "tables": "public.t1",
            "topic": "guarded",
            "poll.interval.ms": "50",
        } }),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    c.wait_state(name, "STATE_RUNNING", "STATE_RUNNING", 1)
        .await;
    assert_eq!(audit_tables(&sql).await, 1, "provisioned");

    // The stranger: any process of the host, reading what the executor hosts (its
    // ListAssignments answers anyone) and asking for the destructive stops.
    let addr = c.executors[0].listen_addr().await;
    let mut stranger = ExecutorClient::connect(format!("http://{addr}"))
        .await
        .expect("connect to the executor");
    let hosted = stranger
        .list_assignments(pb::ListAssignmentsRequest::default())
        .await
        .expect("list assignments")
        .into_inner();
    let task = hosted.tasks.first().expect("a hosted task").clone();
    let connector = hosted
        .connectors
        .first()
        .expect("a hosted connector")
        .clone();
    let e = stranger
        .stop_task(pb::StopTaskRequest {
            task: task.task.clone(),
            connector_deleted: true,
            generation: task.generation,
            incarnation: task.incarnation.clone(),
            executor_epoch: hosted.epoch,
            ..Default::default()
        })
        .await
        .expect_err("a stranger's StopTask(connector_deleted = true) is refused");
    assert_eq!(e.code(), Code::PermissionDenied, "{e}");
    assert!(e.message().contains("deletion token"), "{e}");
    // A wrong token is no better than none.
    let mut wrong = tonic::Request::new(pb::ExecutorStopConnectorRequest {
        connector: connector.connector.clone(),
        connector_deleted: true,
        generation: connector.generation,
        incarnation: connector.incarnation.clone(),
        executor_epoch: hosted.epoch,
        ..Default::default()
    });
    wrong.metadata_mut().insert(
        wharf::identity::DELETION_TOKEN_HEADER,
        "0".repeat(64).parse().expect("metadata"),
    );
    let e = stranger
        .stop_connector(wrong)
        .await
        .expect_err("a StopConnector(connector_deleted = true) with a wrong token is refused");
    assert_eq!(e.code(), Code::PermissionDenied, "{e}");

    // Nothing changed: the table is there, the instances run (the same generations).
    assert_eq!(audit_tables(&sql).await, 1, "the audit table survived");
    let after = stranger
        .list_assignments(pb::ListAssignmentsRequest::default())
        .await
        .expect("list assignments")
        .into_inner();
    assert_eq!(after.tasks.len(), 1, "{after:?}");
    assert_eq!(after.tasks[0].generation, task.generation, "{after:?}");
    assert_eq!(after.tasks[0].state, pb::State::Running as i32, "{after:?}");
    assert_eq!(after.connectors.len(), 1, "{after:?}");
    let s = c.status(name).expect("status");
    assert_eq!(s["connector"]["state"], "STATE_RUNNING", "{s}");
    assert!(
        c.executors[0]
            .log()
            .contains("deletion token missing or wrong"),
        "the refusal is logged"
    );

    // The control plane's deletion carries the token: the cleanup runs.
    let del = c.call("DeleteConnector", json!({ "name": name, "wait": true }));
    assert_eq!(del.body["deleted"], true, "{} {}", del.body, del.err);
    assert_eq!(audit_tables(&sql).await, 0, "the deletion's cleanup ran");
}
