//! Component tests: the real control plane in-process on port 0 against a scripted fake
//! executor, for executor answers that real processes cannot be made to give on cue
//! (NOT_FOUND for a task the record says runs there; a replayed stop(false)). Each case
//! checks which calls the finalizer made and that the deletion completed.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tonic::{Request, Response, Status};
use wharf::pb::v1 as pb;
use wharf::pb::v1::connector_admin_client::ConnectorAdminClient;
use wharf::pb::v1::executor_registry_client::ExecutorRegistryClient;
use wharf::pb::v1::executor_server::{Executor, ExecutorServer};
use wharf_control_plane::app::{App, Config};
use wharf_control_plane::reconcile::LeaseConfig;

/// Upper bound on each wait, in milliseconds.
const WAIT_MS: u64 = 20_000;
/// Lease given by the control plane under test, in milliseconds.
const LEASE_MS: u32 = 3_000;
/// Heartbeat interval, in milliseconds.
const HEARTBEAT_MS: u32 = 200;

/// What the fake executor answers to the next StopTask(true) calls, in order; afterwards
/// every stop succeeds with the flag it was given.
#[derive(Clone, Debug)]
enum StopAnswer {
    NotFound,
    ReplayedFalse,
    Unavailable,
}

#[derive(Default)]
struct Script {
    calls: Mutex<Vec<String>>,
    stop_true: Mutex<VecDeque<StopAnswer>>,
}

struct FakeExecutor(Arc<Script>);

impl FakeExecutor {
    fn log(&self, s: String) {
        self.0.calls.lock().unwrap().push(s);
    }
}

#[tonic::async_trait]
impl Executor for FakeExecutor {
    async fn start_connector(
        &self,
        r: Request<pb::StartConnectorRequest>,
    ) -> Result<Response<pb::StartConnectorResponse>, Status> {
        let r = r.into_inner();
        self.log(format!(
            "start_connector gen={} cleanup_only={}",
            r.generation, r.cleanup_only
        ));
        Ok(Response::new(pb::StartConnectorResponse {
            state: pb::State::Running as i32,
            error: String::new(),
        }))
    }

    async fn stop_connector(
        &self,
        r: Request<pb::ExecutorStopConnectorRequest>,
    ) -> Result<Response<pb::ExecutorStopConnectorResponse>, Status> {
        let r = r.into_inner();
        self.log(format!(
            "stop_connector gen={} deleted={}",
            r.generation, r.connector_deleted
        ));
        Ok(Response::new(pb::ExecutorStopConnectorResponse {
            outcome: pb::StopOutcome::Stopped as i32,
            connector_deleted: r.connector_deleted,
            generation: r.generation,
            ..Default::default()
        }))
    }

    async fn compute_task_configs(
        &self,
        r: Request<pb::ComputeTaskConfigsRequest>,
    ) -> Result<Response<pb::ComputeTaskConfigsResponse>, Status> {
        let r = r.into_inner();
        let task_configs = (0..r.max_tasks)
            .map(|i| pb::TaskConfig {
                config: [("i".to_owned(), i.to_string())].into_iter().collect(),
            })
            .collect();
        Ok(Response::new(pb::ComputeTaskConfigsResponse {
            task_configs,
        }))
    }

    async fn start_task(
        &self,
        r: Request<pb::StartTaskRequest>,
    ) -> Result<Response<pb::StartTaskResponse>, Status> {
        let r = r.into_inner();
        self.log(format!(
            "start_task gen={} cleanup_only={}",
            r.generation, r.cleanup_only
        ));
        Ok(Response::new(pb::StartTaskResponse {
            state: pb::State::Running as i32,
            error: String::new(),
        }))
    }

    async fn stop_task(
        &self,
        r: Request<pb::StopTaskRequest>,
    ) -> Result<Response<pb::StopTaskResponse>, Status> {
        let r = r.into_inner();
        self.log(format!(
            "stop_task gen={} deleted={}",
            r.generation, r.connector_deleted
        ));
        if r.connector_deleted {
            let next = self.0.stop_true.lock().unwrap().pop_front();
            match next {
                Some(StopAnswer::NotFound) => {
                    return Err(Status::not_found("task not hosted here"));
                }
                Some(StopAnswer::Unavailable) => {
                    return Err(Status::unavailable("connection reset"));
                }
                Some(StopAnswer::ReplayedFalse) => {
                    return Ok(Response::new(pb::StopTaskResponse {
                        outcome: pb::StopOutcome::Stopped as i32,
                        connector_deleted: false,
                        replayed: true,
                        generation: r.generation,
                        ..Default::default()
                    }));
                }
                None => {}
            }
        }
        Ok(Response::new(pb::StopTaskResponse {
            outcome: pb::StopOutcome::Stopped as i32,
            connector_deleted: r.connector_deleted,
            generation: r.generation,
            ..Default::default()
        }))
    }

    async fn list_assignments(
        &self,
        _r: Request<pb::ListAssignmentsRequest>,
    ) -> Result<Response<pb::ListAssignmentsResponse>, Status> {
        // The control plane probes a new executor's address: it must answer as itself.
        Ok(Response::new(pb::ListAssignmentsResponse {
            executor_id: "fake-1".into(),
            ..Default::default()
        }))
    }

    async fn validate_config(
        &self,
        r: Request<pb::ValidateConfigRequest>,
    ) -> Result<Response<pb::ValidateConfigResponse>, Status> {
        self.log(format!("validate_config plugin={}", r.into_inner().plugin));
        Ok(Response::new(pb::ValidateConfigResponse::default()))
    }

    async fn get_sink_offsets(
        &self,
        _r: Request<pb::GetSinkOffsetsRequest>,
    ) -> Result<Response<pb::GetSinkOffsetsResponse>, Status> {
        Err(Status::unimplemented("not scripted"))
    }

    async fn alter_sink_offsets(
        &self,
        _r: Request<pb::AlterSinkOffsetsRequest>,
    ) -> Result<Response<pb::AlterSinkOffsetsResponse>, Status> {
        Err(Status::unimplemented("not scripted"))
    }
}

async fn wait_for<T, F: FnMut() -> Fut, Fut: std::future::Future<Output = Option<T>>>(
    what: &str,
    mut f: F,
) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            start.elapsed() < Duration::from_millis(WAIT_MS),
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Starts the control plane and a fake executor registered with it (heartbeating).
async fn setup(
    script: Arc<Script>,
) -> (
    ConnectorAdminClient<tonic::transport::Channel>,
    tempfile::TempDir,
) {
    let dir = tempfile::tempdir().unwrap();
    let app = App::build(Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        data_dir: dir.path().to_path_buf(),
        lease: LeaseConfig {
            lease_ms: LEASE_MS,
            heartbeat_interval_ms: HEARTBEAT_MS,
        },
        auth: Default::default(),
        tls: None,
        rest_listen: None,
        rest_optional: false,
        separate_embedded_logs: false,
    })
    .await
    .unwrap();
    let cp = format!("http://{}", app.local_addr());
    tokio::spawn(app.run(std::future::pending()));

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let exec_addr = listener.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(ExecutorServer::new(FakeExecutor(script)))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    let mut registry = ExecutorRegistryClient::connect(cp.clone()).await.unwrap();
    let plugin = pb::PluginInfo {
        name: "fake".into(),
        version: "1".into(),
        kind: pb::PluginKind::Source as i32,
        config_defs: vec![],
        ..Default::default()
    };
    let epoch = registry
        .register_executor(pb::RegisterExecutorRequest {
            executor_id: "fake-1".into(),
            advertised_address: format!("http://{exec_addr}"),
            plugins: vec![plugin],
            version: "test".into(),
            record_log: String::new(),
            transforms: Vec::new(),
        })
        .await
        .unwrap()
        .into_inner()
        .epoch;
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(u64::from(HEARTBEAT_MS))).await;
            if registry
                .heartbeat(pb::HeartbeatRequest {
                    executor_id: "fake-1".into(),
                    epoch,
                    ..Default::default()
                })
                .await
                .is_err()
            {
                return;
            }
        }
    });
    (ConnectorAdminClient::connect(cp).await.unwrap(), dir)
}

async fn run_and_delete(
    script: &Arc<Script>,
    admin: &mut ConnectorAdminClient<tonic::transport::Channel>,
) {
    admin
        .create_connector(pb::CreateConnectorRequest {
            name: "c".into(),
            config: [
                ("connector.class".to_owned(), "fake".to_owned()),
                ("tasks.max".to_owned(), "1".to_owned()),
            ]
            .into_iter()
            .collect(),
            initial_state: 0,
        })
        .await
        .unwrap();
    wait_for("task started", || {
        let started = script
            .calls
            .lock()
            .unwrap()
            .iter()
            .any(|c| c.starts_with("start_task"));
        async move { started.then_some(()) }
    })
    .await;
    let r = admin
        .delete_connector(pb::DeleteConnectorRequest {
            name: "c".into(),
            wait: true,
            wait_timeout_ms: WAIT_MS as u32,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(r.deleted, "{r:?}");
}

fn calls_after_delete(script: &Script) -> Vec<String> {
    let calls = script.calls.lock().unwrap().clone();
    let first = calls
        .iter()
        .position(|c| c.contains("deleted=true"))
        .unwrap_or(calls.len());
    calls[first..].to_vec()
}

#[tokio::test]
async fn a_task_its_executor_does_not_host_is_cleaned_up_on_a_cleanup_only_instance() {
    let script = Arc::new(Script::default());
    script
        .stop_true
        .lock()
        .unwrap()
        .push_back(StopAnswer::NotFound);
    let (mut admin, _dir) = setup(script.clone()).await;
    run_and_delete(&script, &mut admin).await;
    let calls = calls_after_delete(&script);
    assert!(
        calls[0].starts_with("stop_task") && calls[0].ends_with("deleted=true"),
        "{calls:?}"
    );
    assert!(
        calls[1].starts_with("start_task") && calls[1].ends_with("cleanup_only=true"),
        "{calls:?}"
    );
    assert!(
        calls[2].starts_with("stop_task") && calls[2].ends_with("deleted=true"),
        "{calls:?}"
    );
    assert!(
        calls
            .iter()
            .any(|c| c.starts_with("stop_connector") && c.ends_with("deleted=true")),
        "{calls:?}"
    );
}

#[tokio::test]
async fn a_task_already_stopped_with_false_still_gets_its_cleanup() {
    let script = Arc::new(Script::default());
    script
        .stop_true
        .lock()
        .unwrap()
        .push_back(StopAnswer::ReplayedFalse);
    let (mut admin, _dir) = setup(script.clone()).await;
    run_and_delete(&script, &mut admin).await;
    let calls = calls_after_delete(&script);
    let cleanup_start = calls
        .iter()
        .position(|c| c.starts_with("start_task") && c.ends_with("cleanup_only=true"));
    let cleanup_start = cleanup_start
        .unwrap_or_else(|| panic!("cleanup-only start after the replayed stop(false): {calls:?}"));
    assert!(
        calls[cleanup_start + 1].ends_with("deleted=true"),
        "{calls:?}"
    );
}

#[tokio::test]
async fn an_unconfirmed_cleanup_only_stop_is_retried_on_the_same_instance() {
    let script = Arc::new(Script::default());
    script
        .stop_true
        .lock()
        .unwrap()
        .extend([StopAnswer::NotFound, StopAnswer::Unavailable]);
    let (mut admin, _dir) = setup(script.clone()).await;
    run_and_delete(&script, &mut admin).await;
    let calls = calls_after_delete(&script);
    let task_calls: Vec<&String> = calls.iter().filter(|c| c.contains("_task")).collect();
    let cleanup_starts = task_calls
        .iter()
        .filter(|c| c.ends_with("cleanup_only=true"))
        .count();
    assert_eq!(cleanup_starts, 1, "one cleanup-only instance: {calls:?}");
    let stops: Vec<&&String> = task_calls
        .iter()
        .filter(|c| c.starts_with("stop_task"))
        .collect();
    assert_eq!(
        stops.len(),
        3,
        "original, unconfirmed, confirmed: {calls:?}"
    );
    assert_eq!(
        stops[1], stops[2],
        "the retry stops the same generation: {calls:?}"
    );
}
