//! The audit sources hosted by real `wharf-executor` processes, driven over gRPC the way
//! the control plane's deletion finalizer drives them, against real PostgreSQL and real
//! SQLite files. The control plane is stood in for by a small in-process registry that
//! grants epochs and records offset commits (what the executors acknowledged through
//! their record logs).
//!
//! Build the binary first: `cargo build -p wharf-executor-stock`.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tonic::transport::Channel;
use tonic::{Request, Response, Status};
use wharf::pb::v1 as pb;
use wharf::pb::v1::executor_client::ExecutorClient;
use wharf::pb::v1::executor_registry_server::{ExecutorRegistry, ExecutorRegistryServer};
use wharf_harness::audit::{PgDb, pg};
use wharf_harness::tokio_postgres::Client;
use wharf_harness::{KeepOnFailure, Proc, WAIT_DEADLINE, wait_until};

/// Heartbeat interval the stand-in registry asks for, in milliseconds.
const HEARTBEAT_INTERVAL_MS: u32 = 200;
/// Lease the stand-in registry grants, in milliseconds.
const LEASE_MS: u32 = 30_000;
/// Poll interval of the audit tasks, in milliseconds.
const AUDIT_POLL_INTERVAL_MS: &str = "50";

/// Password given to postgres-audit (trust auth ignores it); must never be logged.
const PASSWORD: &str = "not-needed-with-trust-but-secret";

static DB_COUNTER: AtomicU32 = AtomicU32::new(0);

// ---------------------------------------------------------------------------------------
// Stand-in registry: registration, heartbeats, status and offset commits.

#[derive(Default)]
struct Recorded {
    registered: Mutex<Vec<String>>,
    commits: Mutex<Vec<pb::CommitOffsetsRequest>>,
    epoch: AtomicU64,
}

impl Recorded {
    /// Latest committed offset id per partition for `(connector, task)`.
    fn committed(&self, connector: &str, task: u32) -> HashMap<String, i64> {
        let mut out = HashMap::new();
        for c in self.commits.lock().unwrap().iter() {
            if c.task
                .as_ref()
                .is_some_and(|t| t.connector == connector && t.task == task)
            {
                for o in &c.offsets {
                    let id = serde_json::from_str::<serde_json::Value>(&o.offset)
                        .ok()
                        .and_then(|v| v["id"].as_i64())
                        .unwrap_or(-1);
                    let partition: serde_json::Value = serde_json::from_str(&o.partition).unwrap();
                    out.insert(partition["table"].as_str().unwrap().to_owned(), id);
                }
            }
        }
        out
    }

    /// Every committed id, in commit order, for one table of `connector`.
    fn committed_ids(&self, connector: &str, table: &str) -> Vec<i64> {
        let mut out = Vec::new();
        for c in self.commits.lock().unwrap().iter() {
            if c.task.as_ref().is_some_and(|t| t.connector == connector) {
                for o in &c.offsets {
                    let partition: serde_json::Value = serde_json::from_str(&o.partition).unwrap();
                    if partition["table"] == table {
                        let offset: serde_json::Value = serde_json::from_str(&o.offset).unwrap();
                        out.push(offset["id"].as_i64().unwrap());
                    }
                }
            }
        }
        out
    }
}

struct Registry(Arc<Recorded>);

#[tonic::async_trait]
impl ExecutorRegistry for Registry {
    async fn register_executor(
        &self,
        request: Request<pb::RegisterExecutorRequest>,
    ) -> Result<Response<pb::RegisterExecutorResponse>, Status> {
        self.0
            .registered
            .lock()
            .unwrap()
            .push(request.into_inner().executor_id);
        let epoch = self.0.epoch.fetch_add(1, Ordering::SeqCst) + 1;
        Ok(Response::new(pb::RegisterExecutorResponse {
            epoch,
            lease_ms: LEASE_MS,
            heartbeat_interval_ms: HEARTBEAT_INTERVAL_MS,
            ..Default::default()
        }))
    }

    async fn heartbeat(
        &self,
        _request: Request<pb::HeartbeatRequest>,
    ) -> Result<Response<pb::HeartbeatResponse>, Status> {
        Ok(Response::new(pb::HeartbeatResponse { lease_ms: LEASE_MS }))
    }

    async fn report_status(
        &self,
        _request: Request<pb::ReportStatusRequest>,
    ) -> Result<Response<pb::ReportStatusResponse>, Status> {
        Ok(Response::new(pb::ReportStatusResponse {}))
    }

    async fn commit_offsets(
        &self,
        request: Request<pb::CommitOffsetsRequest>,
    ) -> Result<Response<pb::CommitOffsetsResponse>, Status> {
        self.0.commits.lock().unwrap().push(request.into_inner());
        Ok(Response::new(pb::CommitOffsetsResponse {}))
    }

    async fn request_task_reconfiguration(
        &self,
        _request: Request<pb::RequestTaskReconfigurationRequest>,
    ) -> Result<Response<pb::RequestTaskReconfigurationResponse>, Status> {
        Ok(Response::new(pb::RequestTaskReconfigurationResponse {}))
    }

    async fn record_resources(
        &self,
        _request: Request<pb::RecordResourcesRequest>,
    ) -> Result<Response<pb::RecordResourcesResponse>, Status> {
        Ok(Response::new(pb::RecordResourcesResponse {}))
    }
}

async fn registry() -> (String, Arc<Recorded>) {
    let recorded = Arc::new(Recorded::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let service = ExecutorRegistryServer::new(Registry(recorded.clone()));
    tokio::spawn(async move {
        let _ = tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener))
            .await;
    });
    (format!("http://{addr}"), recorded)
}

// ---------------------------------------------------------------------------------------
// Executors.

struct Executor {
    proc: Proc,
    client: ExecutorClient<Channel>,
}

async fn executor(dir: &Path, name: &str, control_plane: &str, recorded: &Recorded) -> Executor {
    let data_dir = dir.join(name);
    let id = format!("executor-{name}");
    let args = vec![
        "--listen".into(),
        "127.0.0.1:0".into(),
        "--control-plane".into(),
        control_plane.to_owned(),
        "--data-dir".into(),
        data_dir.display().to_string(),
        "--executor-id".into(),
        id.clone(),
    ];
    let mut proc = Proc::spawn(wharf_harness::bin("wharf-executor"), args, &data_dir);
    let addr = proc.listen_addr().await;
    let client = ExecutorClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    wait_until("the executor to register", WAIT_DEADLINE, || {
        let done = recorded.registered.lock().unwrap().contains(&id);
        async move { done.then_some(()) }
    })
    .await;
    Executor { proc, client }
}

impl Executor {
    async fn start_connector(
        &mut self,
        connector: &str,
        generation: u64,
        config: &HashMap<String, String>,
        cleanup_only: bool,
    ) -> pb::StartConnectorResponse {
        self.client
            .start_connector(pb::StartConnectorRequest {
                connector: connector.into(),
                config: config.clone(),
                generation,
                target_state: pb::TargetState::Started as i32,
                cleanup_only,
                incarnation: format!("inc-{connector}"),
                executor_epoch: 0,
            })
            .await
            .unwrap()
            .into_inner()
    }

    async fn task_configs(
        &mut self,
        connector: &str,
        generation: u64,
        max_tasks: u32,
    ) -> Vec<HashMap<String, String>> {
        self.client
            .compute_task_configs(pb::ComputeTaskConfigsRequest {
                connector: connector.into(),
                max_tasks,
                generation,
            })
            .await
            .unwrap()
            .into_inner()
            .task_configs
            .into_iter()
            .map(|t| t.config)
            .collect()
    }

    #[allow(clippy::too_many_arguments)]
    async fn start_task(
        &mut self,
        connector: &str,
        task: u32,
        generation: u64,
        connector_config: &HashMap<String, String>,
        task_config: &HashMap<String, String>,
        cleanup_only: bool,
        offsets: &HashMap<String, i64>,
    ) -> pb::StartTaskResponse {
        self.client
            .start_task(pb::StartTaskRequest {
                task: Some(pb::TaskId {
                    connector: connector.into(),
                    task,
                }),
                connector_config: connector_config.clone(),
                task_config: task_config.clone(),
                generation,
                target_state: pb::TargetState::Started as i32,
                cleanup_only,
                offsets: offsets
                    .iter()
                    .map(|(table, id)| pb::SourceOffset {
                        partition: serde_json::json!({ "table": table }).to_string(),
                        offset: serde_json::json!({ "id": id }).to_string(),
                    })
                    .collect(),
                incarnation: format!("inc-{connector}"),
                executor_epoch: 0,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
    }

    async fn stop_task(
        &mut self,
        connector: &str,
        task: u32,
        generation: u64,
        connector_deleted: bool,
    ) -> pb::StopTaskResponse {
        self.client
            .stop_task(pb::StopTaskRequest {
                task: Some(pb::TaskId {
                    connector: connector.into(),
                    task,
                }),
                connector_deleted,
                generation,
                timeout_ms: 0,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
    }

    async fn stop_connector(
        &mut self,
        connector: &str,
        generation: u64,
        connector_deleted: bool,
    ) -> pb::ExecutorStopConnectorResponse {
        self.client
            .stop_connector(pb::ExecutorStopConnectorRequest {
                connector: connector.into(),
                connector_deleted,
                generation,
                timeout_ms: 0,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
    }
}

fn assert_running(state: i32, error: &str, what: &str) {
    assert_eq!(state, pb::State::Running as i32, "{what}: {error}");
}

fn assert_stopped(outcome: i32, deleted: bool, error: &str, want_deleted: bool, what: &str) {
    assert_eq!(outcome, pb::StopOutcome::Stopped as i32, "{what}: {error}");
    assert_eq!(deleted, want_deleted, "{what}");
}

/// Waits until `(connector, task)` committed offsets reaching `want` for every table.
async fn wait_committed(
    recorded: &Recorded,
    connector: &str,
    task: u32,
    want: &HashMap<String, i64>,
) -> HashMap<String, i64> {
    wait_until(
        &format!("{connector}-{task} to commit {want:?}"),
        WAIT_DEADLINE,
        || {
            let got = recorded.committed(connector, task);
            let done = want.iter().all(|(t, id)| got.get(t) == Some(id));
            async move { done.then_some(got) }
        },
    )
    .await
}

// ---------------------------------------------------------------------------------------
// PostgreSQL.

/// `(audit tables, functions, triggers)` any audit connector made in the database.
async fn pg_catalog(client: &Client) -> (i64, i64, i64) {
    let row = client
        .query_one(
            "SELECT (SELECT count(*) FROM pg_class WHERE relname LIKE 'wharf\\_audit%' AND relkind = 'r'),
                    (SELECT count(*) FROM pg_proc WHERE proname LIKE 'wharf\\_audit%'),
                    (SELECT count(*) FROM pg_trigger WHERE NOT tgisinternal)",
            &[],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1), row.get(2))
}

#[tokio::test]
async fn postgres_audit_cleanup_runs_wherever_the_task_lives_even_after_its_first_host_was_killed()
{
    let dir = KeepOnFailure::new();
    let (control_plane, recorded) = registry().await;
    let db = PgDb {
        name: format!(
            "wharf_audit_exec_{}_{}",
            std::process::id(),
            DB_COUNTER.fetch_add(1, Ordering::SeqCst)
        ),
    };
    pg("postgres")
        .await
        .batch_execute(&format!("CREATE DATABASE {}", db.name))
        .await
        .unwrap();
    let sql = pg(&db.name).await;
    sql.batch_execute("CREATE TABLE t1 (id int); CREATE TABLE t2 (id int);")
        .await
        .unwrap();

    let mut a = executor(dir.path(), "a", &control_plane, &recorded).await;
    let mut b = executor(dir.path(), "b", &control_plane, &recorded).await;
    let config: HashMap<String, String> = [
        ("connector.class", "postgres-audit"),
        ("tasks.max", "2"),
        ("connection.host", "127.0.0.1"),
        ("connection.user", "postgres"),
        ("connection.password", PASSWORD),
        ("connection.database", db.name.as_str()),
        ("tables", "public.t1,public.t2"),
        ("topic", "audit"),
        ("poll.interval.ms", AUDIT_POLL_INTERVAL_MS),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();

    let started = a.start_connector("pga", 1, &config, false).await;
    assert_running(started.state, &started.error, "connector on a");
    assert_eq!(pg_catalog(&sql).await, (1, 1, 2));
    let task_configs = a.task_configs("pga", 1, 2).await;
    assert_eq!(task_configs.len(), 2);
    for (i, tc) in task_configs.iter().enumerate() {
        let r = a
            .start_task("pga", i as u32, 1, &config, tc, false, &HashMap::new())
            .await;
        assert_running(r.state, &r.error, "task on a");
    }

    sql.batch_execute(
        "INSERT INTO t1 SELECT generate_series(1, 5); INSERT INTO t2 VALUES (1);
         UPDATE t1 SET id = id + 100 WHERE id <= 2; DELETE FROM t2;",
    )
    .await
    .unwrap();
    let audit_max = |table: &'static str| {
        let sql = &sql;
        async move {
            let row = sql
                .query_one(
                    &format!(
                        "SELECT max(id) FROM \"{}\" WHERE table_name = $1",
                        audit_table_name(sql).await
                    ),
                    &[&table],
                )
                .await
                .unwrap();
            row.get::<_, i64>(0)
        }
    };
    let t1_max = audit_max("t1").await;
    let t2_max = audit_max("t2").await;
    wait_committed(
        &recorded,
        "pga",
        0,
        &HashMap::from([("public.t1".to_owned(), t1_max)]),
    )
    .await;
    let task1_offsets = wait_committed(
        &recorded,
        "pga",
        1,
        &HashMap::from([("public.t2".to_owned(), t2_max)]),
    )
    .await;

    // Move task 0 to executor b: stop(false) on a, start on b from its committed offset.
    let s = a.stop_task("pga", 0, 1, false).await;
    assert_stopped(
        s.outcome,
        s.connector_deleted,
        &s.error,
        false,
        "task 0 leaves a",
    );
    assert_eq!(pg_catalog(&sql).await, (1, 1, 2), "a move keeps everything");
    let committed = recorded.committed("pga", 0);
    let r = b
        .start_task("pga", 0, 2, &config, &task_configs[0], false, &committed)
        .await;
    assert_running(r.state, &r.error, "task 0 on b");
    sql.batch_execute("INSERT INTO t1 VALUES (42);")
        .await
        .unwrap();
    let t1_new_max = audit_max("t1").await;
    wait_committed(
        &recorded,
        "pga",
        0,
        &HashMap::from([("public.t1".to_owned(), t1_new_max)]),
    )
    .await;
    let ids = recorded.committed_ids("pga", "public.t1");
    assert!(
        ids.windows(2).all(|w| w[0] <= w[1]),
        "committed offsets never go back across the move: {ids:?}"
    );

    // Executor a (connector instance and task 1) dies during the delete.
    a.proc.kill9();
    assert_eq!(
        pg_catalog(&sql).await,
        (1, 1, 2),
        "a crash is not a deletion"
    );

    // The finalizer's sequence: task 0 where it lives; task 1 and the connector
    // re-hosted on b in cleanup-only mode; tasks first, then the connector.
    let s = b.stop_task("pga", 0, 2, true).await;
    assert_stopped(
        s.outcome,
        s.connector_deleted,
        &s.error,
        true,
        "task 0 deleted on b",
    );
    assert_eq!(pg_catalog(&sql).await, (1, 1, 1));
    let r = b
        .start_task("pga", 1, 2, &config, &task_configs[1], true, &task1_offsets)
        .await;
    assert_ne!(r.state, pb::State::Failed as i32, "{}", r.error);
    let s = b.stop_task("pga", 1, 2, true).await;
    assert_stopped(
        s.outcome,
        s.connector_deleted,
        &s.error,
        true,
        "task 1 re-hosted on b",
    );
    assert_eq!(pg_catalog(&sql).await, (1, 1, 0));
    let r = b.start_connector("pga", 2, &config, true).await;
    assert_ne!(r.state, pb::State::Failed as i32, "{}", r.error);
    let s = b.stop_connector("pga", 2, true).await;
    assert_stopped(
        s.outcome,
        s.connector_deleted,
        &s.error,
        true,
        "connector re-hosted on b",
    );
    assert_eq!(
        pg_catalog(&sql).await,
        (0, 0, 0),
        "nothing the connector made remains"
    );

    // A replayed stop runs nothing and reports the recorded outcome.
    let again = b.stop_connector("pga", 2, true).await;
    assert!(again.replayed);
    assert_eq!(again.outcome, pb::StopOutcome::Stopped as i32);
    for ex in [&a, &b] {
        assert!(
            !ex.proc.log().contains(PASSWORD),
            "the password leaked into an executor log"
        );
    }
    b.proc.kill9();
}

async fn audit_table_name(sql: &Client) -> String {
    sql.query_one(
        "SELECT relname::text FROM pg_class WHERE relname LIKE 'wharf\\_audit\\_%' AND relkind = 'r'",
        &[],
    )
    .await
    .unwrap()
    .get(0)
}

// ---------------------------------------------------------------------------------------
// SQLite.

fn sqlite_catalog(path: &Path) -> (i64, i64) {
    let conn = wharf_harness::rusqlite::Connection::open(path).unwrap();
    conn.query_row(
        "SELECT (SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name LIKE 'wharf\\_audit%' ESCAPE '\\'),
                (SELECT count(*) FROM sqlite_master WHERE type = 'trigger')",
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
    .unwrap()
}

fn sqlite_exec(path: &Path, sql: &str) {
    let conn = wharf_harness::rusqlite::Connection::open(path).unwrap();
    conn.busy_timeout(std::time::Duration::from_secs(5))
        .unwrap();
    conn.execute_batch(sql).unwrap();
}

fn sqlite_max(path: &Path, table: &str) -> i64 {
    let conn = wharf_harness::rusqlite::Connection::open(path).unwrap();
    let audit: String = conn
        .query_row(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'wharf\\_audit%' ESCAPE '\\'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    conn.query_row(
        &format!("SELECT max(id) FROM \"{audit}\" WHERE table_name = ?1"),
        [table],
        |r| r.get(0),
    )
    .unwrap()
}

#[tokio::test]
async fn sqlite_audit_cleanup_runs_wherever_the_task_lives_even_after_its_first_host_was_killed() {
    let dir = KeepOnFailure::new();
    let (control_plane, recorded) = registry().await;
    let path = dir.path().join("app.db");
    sqlite_exec(
        &path,
        "CREATE TABLE t1 (id INTEGER); CREATE TABLE t2 (id INTEGER);",
    );
    let mut a = executor(dir.path(), "a", &control_plane, &recorded).await;
    let mut b = executor(dir.path(), "b", &control_plane, &recorded).await;
    let config: HashMap<String, String> = [
        ("connector.class", "sqlite-audit"),
        ("tasks.max", "2"),
        ("database.path", path.to_str().unwrap()),
        ("tables", "t1,t2"),
        ("topic", "audit"),
        ("poll.interval.ms", AUDIT_POLL_INTERVAL_MS),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();

    let started = a.start_connector("sqa", 1, &config, false).await;
    assert_running(started.state, &started.error, "connector on a");
    assert_eq!(sqlite_catalog(&path), (1, 6));
    let task_configs = a.task_configs("sqa", 1, 2).await;
    assert_eq!(task_configs.len(), 2);
    for (i, tc) in task_configs.iter().enumerate() {
        let r = a
            .start_task("sqa", i as u32, 1, &config, tc, false, &HashMap::new())
            .await;
        assert_running(r.state, &r.error, "task on a");
    }
    sqlite_exec(
        &path,
        "INSERT INTO t1 VALUES (1), (2), (3); INSERT INTO t2 VALUES (1);
         UPDATE t1 SET id = 10 WHERE id = 1; DELETE FROM t2;",
    );
    wait_committed(
        &recorded,
        "sqa",
        0,
        &HashMap::from([("main.t1".to_owned(), sqlite_max(&path, "t1"))]),
    )
    .await;
    let task1_offsets = wait_committed(
        &recorded,
        "sqa",
        1,
        &HashMap::from([("main.t2".to_owned(), sqlite_max(&path, "t2"))]),
    )
    .await;

    let s = a.stop_task("sqa", 0, 1, false).await;
    assert_stopped(
        s.outcome,
        s.connector_deleted,
        &s.error,
        false,
        "task 0 leaves a",
    );
    assert_eq!(sqlite_catalog(&path), (1, 6));
    let committed = recorded.committed("sqa", 0);
    let r = b
        .start_task("sqa", 0, 2, &config, &task_configs[0], false, &committed)
        .await;
    assert_running(r.state, &r.error, "task 0 on b");
    sqlite_exec(&path, "INSERT INTO t1 VALUES (42);");
    wait_committed(
        &recorded,
        "sqa",
        0,
        &HashMap::from([("main.t1".to_owned(), sqlite_max(&path, "t1"))]),
    )
    .await;

    a.proc.kill9();
    assert_eq!(sqlite_catalog(&path), (1, 6), "a crash is not a deletion");

    let s = b.stop_task("sqa", 0, 2, true).await;
    assert_stopped(
        s.outcome,
        s.connector_deleted,
        &s.error,
        true,
        "task 0 deleted on b",
    );
    assert_eq!(sqlite_catalog(&path), (1, 3));
    let r = b
        .start_task("sqa", 1, 2, &config, &task_configs[1], true, &task1_offsets)
        .await;
    assert_ne!(r.state, pb::State::Failed as i32, "{}", r.error);
    let s = b.stop_task("sqa", 1, 2, true).await;
    assert_stopped(
        s.outcome,
        s.connector_deleted,
        &s.error,
        true,
        "task 1 re-hosted on b",
    );
    let r = b.start_connector("sqa", 2, &config, true).await;
    assert_ne!(r.state, pb::State::Failed as i32, "{}", r.error);
    let s = b.stop_connector("sqa", 2, true).await;
    assert_stopped(
        s.outcome,
        s.connector_deleted,
        &s.error,
        true,
        "connector re-hosted on b",
    );
    assert_eq!(
        sqlite_catalog(&path),
        (0, 0),
        "nothing the connector made remains"
    );
    b.proc.kill9();
}
