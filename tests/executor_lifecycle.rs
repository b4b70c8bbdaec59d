//! Component tests of a real `wharf-executor` process driven over gRPC, against a scripted
//! fake control plane (an in-process `ExecutorRegistry` that grants epochs and records
//! reports and commits). Each test proves its outcome from the test plugin's lifecycle
//! file: which instance saw `stop(false)` or `stop(true)`, and how many times.
//!
//! Build the binary first: `cargo build -p wharf-executor-stock`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tonic::transport::Channel;
use tonic::{Code, Request, Response, Status};
use wharf::pb::v1 as pb;
use wharf::pb::v1::executor_client::ExecutorClient;
use wharf::pb::v1::executor_registry_server::{ExecutorRegistry, ExecutorRegistryServer};
use wharf_harness::lifecycle::Lifecycle;
use wharf_harness::{KeepOnFailure, Proc, WAIT_DEADLINE, wait_until};

/// Graceful timeout given to the executors under test, in milliseconds.
const GRACEFUL_TIMEOUT_MS: u64 = 3_000;
/// Heartbeat interval the fake control plane asks for, in milliseconds.
const HEARTBEAT_INTERVAL_MS: u32 = 100;
/// Lease the fake control plane grants, in milliseconds.
const LEASE_MS: u32 = 10_000;

// ---------------------------------------------------------------------------------------
// The fake control plane.

#[derive(Default)]
struct Recorded {
    registrations: Mutex<Vec<pb::RegisterExecutorRequest>>,
    reports: Mutex<Vec<pb::ReportStatusRequest>>,
    commits: Mutex<Vec<pb::CommitOffsetsRequest>>,
    /// Last epoch granted (to any executor).
    epoch: AtomicU64,
    /// Current epoch of each executor id.
    current: Mutex<HashMap<String, u64>>,
    /// Calls from an epoch at or below this are refused (fenced).
    fenced_up_to: AtomicU64,
}

impl Recorded {
    fn task_reports(&self, connector: &str, task: u32) -> Vec<pb::TaskStatusReport> {
        self.reports
            .lock()
            .unwrap()
            .iter()
            .flat_map(|r| r.tasks.clone())
            .filter(|t| {
                t.task
                    .as_ref()
                    .is_some_and(|id| id.connector == connector && id.task == task)
            })
            .collect()
    }
}

struct FakeRegistry(Arc<Recorded>);

impl FakeRegistry {
    fn check_epoch(&self, executor_id: &str, epoch: u64) -> Result<(), Status> {
        let current = self.0.current.lock().unwrap().get(executor_id).copied();
        if epoch <= self.0.fenced_up_to.load(Ordering::SeqCst) || current != Some(epoch) {
            return Err(Status::failed_precondition(format!(
                "epoch {epoch} of {executor_id} is fenced"
            )));
        }
        Ok(())
    }
}

#[tonic::async_trait]
impl ExecutorRegistry for FakeRegistry {
    async fn register_executor(
        &self,
        request: Request<pb::RegisterExecutorRequest>,
    ) -> Result<Response<pb::RegisterExecutorResponse>, Status> {
        let req = request.into_inner();
        let epoch = self.0.epoch.fetch_add(1, Ordering::SeqCst) + 1;
        self.0
            .current
            .lock()
            .unwrap()
            .insert(req.executor_id.clone(), epoch);
        self.0.registrations.lock().unwrap().push(req);
        Ok(Response::new(pb::RegisterExecutorResponse {
            epoch,
            lease_ms: LEASE_MS,
            heartbeat_interval_ms: HEARTBEAT_INTERVAL_MS,
            ..Default::default()
        }))
    }

    async fn heartbeat(
        &self,
        request: Request<pb::HeartbeatRequest>,
    ) -> Result<Response<pb::HeartbeatResponse>, Status> {
        self.check_epoch(&request.get_ref().executor_id, request.get_ref().epoch)?;
        Ok(Response::new(pb::HeartbeatResponse { lease_ms: LEASE_MS }))
    }

    async fn report_status(
        &self,
        request: Request<pb::ReportStatusRequest>,
    ) -> Result<Response<pb::ReportStatusResponse>, Status> {
        self.check_epoch(&request.get_ref().executor_id, request.get_ref().epoch)?;
        self.0.reports.lock().unwrap().push(request.into_inner());
        Ok(Response::new(pb::ReportStatusResponse {}))
    }

    async fn commit_offsets(
        &self,
        request: Request<pb::CommitOffsetsRequest>,
    ) -> Result<Response<pb::CommitOffsetsResponse>, Status> {
        self.check_epoch(&request.get_ref().executor_id, request.get_ref().epoch)?;
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

/// Serves the fake registry on 127.0.0.1:0; returns its URL and what it records.
async fn fake_control_plane() -> (String, Arc<Recorded>) {
    let (url, recorded, _stop) = fake_control_plane_at("127.0.0.1:0").await;
    std::mem::forget(_stop);
    (url, recorded)
}

/// Serves a fresh fake registry on `addr` until the returned sender is used or dropped.
async fn fake_control_plane_at(
    addr: &str,
) -> (String, Arc<Recorded>, tokio::sync::oneshot::Sender<()>) {
    let recorded = Arc::new(Recorded::default());
    let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let service = ExecutorRegistryServer::new(FakeRegistry(recorded.clone()));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming_shutdown(
                tonic::transport::server::TcpIncoming::from(listener),
                async {
                    let _ = stopped.await;
                },
            )
            .await
            .unwrap();
    });
    (format!("http://{addr}"), recorded, stop)
}

// ---------------------------------------------------------------------------------------
// One executor under test.

struct Executor {
    proc: Proc,
    client: ExecutorClient<Channel>,
    id: String,
}

async fn start_executor(
    dir: &Path,
    name: &str,
    control_plane: &str,
    recorded: &Recorded,
) -> Executor {
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
        "--graceful-timeout-ms".into(),
        GRACEFUL_TIMEOUT_MS.to_string(),
    ];
    let mut proc = Proc::spawn(wharf_harness::bin("wharf-executor"), args, &data_dir);
    let addr = proc.listen_addr().await;
    let client = ExecutorClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    // Registered: the fake granted an epoch and the executor holds it.
    wait_until("the executor to register", WAIT_DEADLINE, || {
        let granted = recorded.current.lock().unwrap().get(&id).copied();
        let mut client = client.clone();
        async move {
            let granted = granted?;
            let listed = client
                .list_assignments(pb::ListAssignmentsRequest {})
                .await
                .ok()?;
            (listed.into_inner().epoch == granted).then_some(())
        }
    })
    .await;
    Executor { proc, client, id }
}

struct Setup {
    dir: KeepOnFailure,
    recorded: Arc<Recorded>,
    control_plane: String,
    lifecycle: PathBuf,
}

impl Setup {
    async fn new() -> Self {
        let dir = KeepOnFailure::new();
        let (control_plane, recorded) = fake_control_plane().await;
        let lifecycle = dir.path().join("lifecycle.jsonl");
        Self {
            dir,
            recorded,
            control_plane,
            lifecycle,
        }
    }

    async fn executor(&self, name: &str) -> Executor {
        start_executor(self.dir.path(), name, &self.control_plane, &self.recorded).await
    }

    fn lifecycle(&self) -> Lifecycle {
        Lifecycle::read(&self.lifecycle)
    }

    /// A `test-source` connector config with the given knobs.
    fn config(&self, extra: &[(&str, &str)]) -> HashMap<String, String> {
        let mut c: HashMap<String, String> = [
            ("connector.class", "test-source"),
            ("tasks.max", "1"),
            ("lifecycle.path", self.lifecycle.to_str().unwrap()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        c.extend(
            extra
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
        );
        c
    }

    /// Waits until `pred` holds for the lifecycle file.
    async fn wait_lifecycle(&self, what: &str, pred: impl Fn(&Lifecycle) -> bool) -> Lifecycle {
        wait_until(what, WAIT_DEADLINE, || {
            let l = self.lifecycle();
            let ok = pred(&l);
            async move { ok.then_some(l) }
        })
        .await
    }
}

fn task_id(connector: &str, task: u32) -> Option<pb::TaskId> {
    Some(pb::TaskId {
        connector: connector.into(),
        task,
    })
}

async fn start_task(
    ex: &mut Executor,
    connector: &str,
    task: u32,
    generation: u64,
    config: &HashMap<String, String>,
    cleanup_only: bool,
) -> Result<pb::StartTaskResponse, Status> {
    ex.client
        .start_task(pb::StartTaskRequest {
            task: task_id(connector, task),
            connector_config: config.clone(),
            task_config: config.clone(),
            generation,
            target_state: pb::TargetState::Started as i32,
            cleanup_only,
            incarnation: format!("inc-{connector}"),
            ..Default::default()
        })
        .await
        .map(Response::into_inner)
}

async fn stop_task(
    ex: &mut Executor,
    connector: &str,
    task: u32,
    generation: u64,
    connector_deleted: bool,
    timeout_ms: u32,
) -> Result<pb::StopTaskResponse, Status> {
    let req = pb::StopTaskRequest {
        task: task_id(connector, task),
        connector_deleted,
        generation,
        timeout_ms,
        ..Default::default()
    };
    ex.client.stop_task(req).await.map(Response::into_inner)
}

async fn start_connector(
    ex: &mut Executor,
    connector: &str,
    generation: u64,
    config: &HashMap<String, String>,
    cleanup_only: bool,
) -> pb::StartConnectorResponse {
    ex.client
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

async fn stop_connector(
    ex: &mut Executor,
    connector: &str,
    generation: u64,
    connector_deleted: bool,
) -> pb::ExecutorStopConnectorResponse {
    ex.client
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

fn running(r: &pb::StartTaskResponse) -> bool {
    r.state == pb::State::Running as i32
}

/// Waits until the task's instance number `n` (0-based) polled.
async fn wait_polled(s: &Setup, connector: &str, task: u32, n: usize) -> Lifecycle {
    s.wait_lifecycle(
        &format!("instance {n} of {connector}-{task} to poll"),
        |l| {
            l.instances(connector, Some(task))
                .get(n)
                .is_some_and(|i| l.of_instance(i).iter().any(|e| e.call == "poll"))
        },
    )
    .await
}

fn stopped_once(l: &Lifecycle, connector: &str, task: u32, executor: &str, deleted: bool) {
    assert_eq!(
        l.stops_for(connector, task),
        vec![(executor.to_owned(), deleted, true)],
        "stops of {connector}-{task}; calls: {:?}",
        l.calls(connector, Some(task))
    );
}

// ---------------------------------------------------------------------------------------
// Stops that are not deletions pass false, exactly once.

#[tokio::test]
async fn restart_stops_the_task_once_with_false_and_starts_a_new_generation() {
    let s = Setup::new().await;
    let mut ex = s.executor("a").await;
    let config = s.config(&[]);
    assert!(running(
        &start_task(&mut ex, "orders", 0, 1, &config, false)
            .await
            .unwrap()
    ));
    wait_polled(&s, "orders", 0, 0).await;

    let stop = stop_task(&mut ex, "orders", 0, 1, false, 0).await.unwrap();
    assert_eq!(stop.outcome, pb::StopOutcome::Stopped as i32);
    assert!(!stop.connector_deleted && !stop.replayed);
    assert!(running(
        &start_task(&mut ex, "orders", 0, 2, &config, false)
            .await
            .unwrap()
    ));

    let l = wait_polled(&s, "orders", 0, 1).await;
    stopped_once(&l, "orders", 0, &ex.id, false);
    let first = &l.instances("orders", Some(0))[0];
    let calls: Vec<_> = l
        .of_instance(first)
        .iter()
        .map(|e| e.call.clone())
        .collect();
    assert_eq!(calls, ["start", "poll", "stop", "stopped"]);
}

#[tokio::test]
async fn reconfiguration_stops_connector_and_task_once_with_false() {
    let s = Setup::new().await;
    let mut ex = s.executor("a").await;
    let config = s.config(&[("tasks.max", "2"), ("test.tasks", "1")]);
    assert_eq!(
        start_connector(&mut ex, "cfg", 1, &config, false)
            .await
            .state,
        pb::State::Running as i32
    );
    let configs = ex
        .client
        .compute_task_configs(pb::ComputeTaskConfigsRequest {
            connector: "cfg".into(),
            max_tasks: 2,
            generation: 1,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(configs.task_configs.len(), 1);
    assert!(running(
        &start_task(&mut ex, "cfg", 0, 1, &config, false)
            .await
            .unwrap()
    ));
    wait_polled(&s, "cfg", 0, 0).await;

    // New config: the control plane stops the tasks and the connector instance with false,
    // then starts everything again with a new generation.
    let updated = s.config(&[("tasks.max", "2"), ("test.tasks", "2")]);
    stop_task(&mut ex, "cfg", 0, 1, false, 0).await.unwrap();
    assert_eq!(
        stop_connector(&mut ex, "cfg", 1, false).await.outcome,
        pb::StopOutcome::Stopped as i32
    );
    assert_eq!(
        start_connector(&mut ex, "cfg", 2, &updated, false)
            .await
            .state,
        pb::State::Running as i32
    );
    let configs = ex
        .client
        .compute_task_configs(pb::ComputeTaskConfigsRequest {
            connector: "cfg".into(),
            max_tasks: 2,
            generation: 2,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(configs.task_configs.len(), 2);
    for task in 0..2 {
        assert!(running(
            &start_task(&mut ex, "cfg", task, 2, &updated, false)
                .await
                .unwrap()
        ));
    }
    let l = wait_polled(&s, "cfg", 1, 0).await;
    stopped_once(&l, "cfg", 0, &ex.id, false);
    assert!(l.stops("cfg", Some(1)).is_empty());
    let connector_stops = l.stops("cfg", None);
    assert_eq!(connector_stops.len(), 1);
    assert!(!connector_stops[0].connector_deleted && connector_stops[0].ok);
}

#[tokio::test]
async fn a_newer_generation_supersedes_the_running_instance_with_stop_false() {
    let s = Setup::new().await;
    let mut ex = s.executor("a").await;
    let config = s.config(&[]);
    start_task(&mut ex, "sup", 0, 1, &config, false)
        .await
        .unwrap();
    wait_polled(&s, "sup", 0, 0).await;
    // No StopTask: the start of generation 2 itself stops generation 1 first.
    assert!(running(
        &start_task(&mut ex, "sup", 0, 2, &config, false)
            .await
            .unwrap()
    ));
    let l = wait_polled(&s, "sup", 0, 1).await;
    stopped_once(&l, "sup", 0, &ex.id, false);
    let stop_ts = l
        .of("sup", Some(0))
        .iter()
        .find(|e| e.call == "stopped")
        .unwrap()
        .ts_ms;
    let second_start = l
        .of("sup", Some(0))
        .iter()
        .filter(|e| e.call == "start")
        .nth(1)
        .unwrap()
        .ts_ms;
    assert!(
        stop_ts <= second_start,
        "the new instance started before the old one stopped"
    );
}

#[tokio::test]
async fn move_to_another_executor_stops_the_old_instance_once_with_false() {
    let s = Setup::new().await;
    let mut a = s.executor("a").await;
    let mut b = s.executor("b").await;
    let config = s.config(&[]);
    start_task(&mut a, "moving", 0, 1, &config, false)
        .await
        .unwrap();
    wait_polled(&s, "moving", 0, 0).await;

    stop_task(&mut a, "moving", 0, 1, false, 0).await.unwrap();
    assert!(running(
        &start_task(&mut b, "moving", 0, 2, &config, false)
            .await
            .unwrap()
    ));
    let l = wait_polled(&s, "moving", 0, 1).await;
    stopped_once(&l, "moving", 0, &a.id, false);
    let second = &l.instances("moving", Some(0))[1];
    assert_eq!(l.of_instance(second)[0].executor, b.id);
}

#[tokio::test]
async fn pause_stops_the_tasks_with_false_and_leaves_the_connector_instance_running() {
    let s = Setup::new().await;
    let mut ex = s.executor("a").await;
    let config = s.config(&[]);
    start_connector(&mut ex, "paused", 1, &config, false).await;
    start_task(&mut ex, "paused", 0, 1, &config, false)
        .await
        .unwrap();
    wait_polled(&s, "paused", 0, 0).await;

    stop_task(&mut ex, "paused", 0, 1, false, 0).await.unwrap();
    let listed = ex
        .client
        .list_assignments(pb::ListAssignmentsRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(listed.tasks.is_empty());
    assert_eq!(listed.connectors.len(), 1);
    // Resume: a new generation.
    start_task(&mut ex, "paused", 0, 2, &config, false)
        .await
        .unwrap();
    let l = wait_polled(&s, "paused", 0, 1).await;
    stopped_once(&l, "paused", 0, &ex.id, false);
    assert!(
        l.stops("paused", None).is_empty(),
        "the connector instance must not be stopped by a pause"
    );
}

#[tokio::test]
async fn stopped_state_stops_connector_and_tasks_once_with_false() {
    let s = Setup::new().await;
    let mut ex = s.executor("a").await;
    let config = s.config(&[("tasks.max", "2")]);
    start_connector(&mut ex, "halt", 1, &config, false).await;
    for t in 0..2 {
        start_task(&mut ex, "halt", t, 1, &config, false)
            .await
            .unwrap();
    }
    wait_polled(&s, "halt", 1, 0).await;
    for t in 0..2 {
        stop_task(&mut ex, "halt", t, 1, false, 0).await.unwrap();
    }
    stop_connector(&mut ex, "halt", 1, false).await;
    let l = s.lifecycle();
    for t in 0..2 {
        stopped_once(&l, "halt", t, &ex.id, false);
    }
    let c = l.stops("halt", None);
    assert_eq!(c.len(), 1);
    assert!(!c[0].connector_deleted);
    let listed = ex
        .client
        .list_assignments(pb::ListAssignmentsRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(listed.tasks.is_empty() && listed.connectors.is_empty());
}

#[tokio::test]
async fn sigterm_stops_everything_once_with_false_and_exits_zero() {
    let s = Setup::new().await;
    let mut ex = s.executor("a").await;
    let config = s.config(&[("tasks.max", "2"), ("test.stop.delay.ms", "200")]);
    start_connector(&mut ex, "term", 1, &config, false).await;
    for t in 0..2 {
        start_task(&mut ex, "term", t, 1, &config, false)
            .await
            .unwrap();
    }
    wait_polled(&s, "term", 1, 0).await;

    let started = Instant::now();
    let code = ex
        .proc
        .terminate(Duration::from_millis(GRACEFUL_TIMEOUT_MS + 5_000))
        .await;
    assert_eq!(code, Some(0));
    assert!(started.elapsed() < Duration::from_millis(GRACEFUL_TIMEOUT_MS + 2_000));
    let l = s.lifecycle();
    for t in 0..2 {
        stopped_once(&l, "term", t, &ex.id, false);
    }
    let c = l.stops("term", None);
    assert_eq!(c.len(), 1);
    assert!(!c[0].connector_deleted && c[0].ok);
    // Tasks first, then the connector instance.
    let last_task_stop = l
        .events
        .iter()
        .filter(|e| e.task.is_some() && e.call == "stopped")
        .map(|e| e.ts_ms)
        .max()
        .unwrap();
    let connector_stop = l
        .events
        .iter()
        .find(|e| e.task.is_none() && e.call == "stop")
        .unwrap()
        .ts_ms;
    assert!(last_task_stop <= connector_stop);
}

// ---------------------------------------------------------------------------------------
// Deletion passes true, exactly once.

#[tokio::test]
async fn deletion_stops_every_task_then_the_connector_once_with_true() {
    let s = Setup::new().await;
    let mut ex = s.executor("a").await;
    let config = s.config(&[("tasks.max", "2")]);
    start_connector(&mut ex, "gone", 1, &config, false).await;
    for t in 0..2 {
        start_task(&mut ex, "gone", t, 1, &config, false)
            .await
            .unwrap();
    }
    wait_polled(&s, "gone", 1, 0).await;
    for t in 0..2 {
        let r = stop_task(&mut ex, "gone", t, 1, true, 0).await.unwrap();
        assert_eq!(r.outcome, pb::StopOutcome::Stopped as i32);
        assert!(r.connector_deleted);
    }
    let r = stop_connector(&mut ex, "gone", 1, true).await;
    assert!(r.connector_deleted && r.outcome == pb::StopOutcome::Stopped as i32);
    let l = s.lifecycle();
    for t in 0..2 {
        stopped_once(&l, "gone", t, &ex.id, true);
    }
    let c = l.stops("gone", None);
    assert_eq!(c.len(), 1);
    assert!(c[0].connector_deleted && c[0].ok);
}

#[tokio::test]
async fn slow_cleanup_is_cut_at_the_timeout_and_reported_timed_out() {
    let s = Setup::new().await;
    let mut ex = s.executor("a").await;
    let config = s.config(&[("test.stop.delay.ms", "60000")]);
    start_task(&mut ex, "slow", 0, 1, &config, false)
        .await
        .unwrap();
    wait_polled(&s, "slow", 0, 0).await;

    let started = Instant::now();
    let r = stop_task(&mut ex, "slow", 0, 1, true, 300).await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(r.outcome, pb::StopOutcome::TimedOut as i32);
    assert!(
        r.connector_deleted && r.error.contains("timed out"),
        "{}",
        r.error
    );
    // Reported FAILED to the control plane, no longer hosted.
    wait_until("a FAILED report", WAIT_DEADLINE, || {
        let failed = s
            .recorded
            .task_reports("slow", 0)
            .iter()
            .any(|t| t.state == pb::State::Failed as i32 && t.error.contains("timed out"));
        async move { failed.then_some(()) }
    })
    .await;
    let listed = ex
        .client
        .list_assignments(pb::ListAssignmentsRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(listed.tasks.is_empty());
    // The stop began once and never completed.
    let l = s.lifecycle();
    assert_eq!(l.stops_for("slow", 0), vec![(ex.id.clone(), true, false)]);
    // A retry of the same generation runs nothing: it replays the timeout.
    let again = stop_task(&mut ex, "slow", 0, 1, true, 300).await.unwrap();
    assert!(again.replayed);
    assert_eq!(again.outcome, pb::StopOutcome::TimedOut as i32);
    assert_eq!(s.lifecycle().count("slow", Some(0), "stop"), 1);
}

// ---------------------------------------------------------------------------------------
// Generations, replays and unknown tasks.

#[tokio::test]
async fn stale_generation_and_foreign_epoch_are_refused_with_failed_precondition() {
    let s = Setup::new().await;
    let mut ex = s.executor("a").await;
    let config = s.config(&[]);
    start_task(&mut ex, "gen", 0, 5, &config, false)
        .await
        .unwrap();

    let start_old = start_task(&mut ex, "gen", 0, 4, &config, false)
        .await
        .unwrap_err();
    assert_eq!(start_old.code(), Code::FailedPrecondition, "{start_old:?}");
    assert!(
        start_old.message().contains("generation"),
        "{}",
        start_old.message()
    );
    let stop_old = stop_task(&mut ex, "gen", 0, 4, true, 0).await.unwrap_err();
    assert_eq!(stop_old.code(), Code::FailedPrecondition);

    let foreign_epoch = ex
        .client
        .start_task(pb::StartTaskRequest {
            task: task_id("gen", 1),
            connector_config: config.clone(),
            task_config: config.clone(),
            generation: 1,
            executor_epoch: 999,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(foreign_epoch.code(), Code::FailedPrecondition);
    assert!(foreign_epoch.message().contains("epoch"));

    // Nothing ran for the refused requests.
    let l = s.lifecycle();
    assert_eq!(l.instances("gen", Some(0)).len(), 1);
    assert!(l.stops_for("gen", 0).is_empty());
    assert!(l.of("gen", Some(1)).is_empty());
}

/// Issue 14, defence in depth: a destructive stop for a generation this executor was never
/// assigned ("current + 1000", read from the open ListAssignments) is refused, whether it
/// names no incarnation or another one, for a task and for a connector instance; nothing
/// runs, the refusal is logged, and the instances keep running until a stop of their own
/// assignment arrives.
#[tokio::test]
async fn stops_for_generations_never_assigned_here_are_refused_and_run_nothing() {
    let s = Setup::new().await;
    let mut ex = s.executor("a").await;
    let config = s.config(&[]);
    start_connector(&mut ex, "owned", 3, &config, false).await;
    start_task(&mut ex, "owned", 0, 3, &config, false)
        .await
        .unwrap();
    wait_polled(&s, "owned", 0, 0).await;

    for incarnation in ["", "inc-someone-else"] {
        let task = ex
            .client
            .stop_task(pb::StopTaskRequest {
                task: task_id("owned", 0),
                connector_deleted: true,
                generation: 1003,
                incarnation: incarnation.into(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(task.code(), Code::FailedPrecondition, "{task:?}");
        assert!(
            task.message().contains("never assigned"),
            "{}",
            task.message()
        );
        let connector = ex
            .client
            .stop_connector(pb::ExecutorStopConnectorRequest {
                connector: "owned".into(),
                connector_deleted: true,
                generation: 1003,
                incarnation: incarnation.into(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(connector.code(), Code::FailedPrecondition, "{connector:?}");
    }

    // Nothing ran: no stop reached either plugin, both are still hosted and running.
    let l = s.lifecycle();
    assert!(
        l.stops("owned", None).is_empty(),
        "{:?}",
        l.stops("owned", None)
    );
    assert!(l.stops_for("owned", 0).is_empty());
    let listed = ex
        .client
        .list_assignments(pb::ListAssignmentsRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(listed.connectors.len(), 1, "{listed:?}");
    assert_eq!(listed.tasks.len(), 1, "{listed:?}");
    assert_eq!(listed.tasks[0].generation, 3);
    assert_eq!(listed.tasks[0].state, pb::State::Running as i32);
    assert!(
        ex.proc.log().contains("stop refused; nothing ran"),
        "the refusals are logged"
    );

    // The stop of the assignment itself still runs, once, with its flag.
    let r = ex
        .client
        .stop_task(pb::StopTaskRequest {
            task: task_id("owned", 0),
            connector_deleted: true,
            generation: 3,
            incarnation: "inc-owned".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.outcome, pb::StopOutcome::Stopped as i32);
    stopped_once(&s.lifecycle(), "owned", 0, &ex.id, true);
}

#[tokio::test]
async fn duplicated_stop_task_is_replayed_and_runs_the_stop_once() {
    let s = Setup::new().await;
    let mut ex = s.executor("a").await;
    let config = s.config(&[("test.stop.delay.ms", "300")]);
    start_task(&mut ex, "dup", 0, 1, &config, false)
        .await
        .unwrap();
    wait_polled(&s, "dup", 0, 0).await;

    // Two concurrent requests, then a late repeat (with the other flag).
    let (mut c1, mut c2) = (ex.client.clone(), ex.client.clone());
    let req = pb::StopTaskRequest {
        task: task_id("dup", 0),
        connector_deleted: true,
        generation: 1,
        timeout_ms: 0,
        ..Default::default()
    };
    let (r1, r2) = tokio::join!(c1.stop_task(req.clone()), c2.stop_task(req.clone()));
    let (r1, r2) = (r1.unwrap().into_inner(), r2.unwrap().into_inner());
    assert!(
        r1.replayed != r2.replayed,
        "exactly one of two concurrent stops runs: {r1:?} {r2:?}"
    );
    let late = stop_task(&mut ex, "dup", 0, 1, false, 0).await.unwrap();
    assert!(
        late.replayed && late.connector_deleted,
        "a replay reports the first stop's flag"
    );
    for r in [&r1, &r2, &late] {
        assert_eq!(r.outcome, pb::StopOutcome::Stopped as i32);
        assert_eq!(r.generation, 1);
    }
    stopped_once(&s.lifecycle(), "dup", 0, &ex.id, true);
}

#[tokio::test]
async fn stop_task_for_a_task_never_hosted_is_not_found() {
    let s = Setup::new().await;
    let mut ex = s.executor("a").await;
    let err = stop_task(&mut ex, "nobody", 3, 1, true, 0)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    let err = ex
        .client
        .stop_connector(pb::ExecutorStopConnectorRequest {
            connector: "nobody".into(),
            connector_deleted: true,
            generation: 1,
            timeout_ms: 0,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    let bad = ex
        .client
        .stop_task(pb::StopTaskRequest {
            task: None,
            connector_deleted: true,
            generation: 1,
            timeout_ms: 0,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(bad.code(), Code::InvalidArgument);
    assert!(bad.message().contains("task"));
}

#[tokio::test]
async fn cleanup_only_start_then_stop_true_runs_no_poll() {
    let s = Setup::new().await;
    let mut ex = s.executor("a").await;
    let config = s.config(&[]);
    let started = start_task(&mut ex, "clean", 0, 7, &config, true)
        .await
        .unwrap();
    assert!(running(&started));
    let listed = ex
        .client
        .list_assignments(pb::ListAssignmentsRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(listed.tasks[0].cleanup_only);
    let r = stop_task(&mut ex, "clean", 0, 7, true, 0).await.unwrap();
    assert_eq!(r.outcome, pb::StopOutcome::Stopped as i32);

    assert_eq!(
        start_connector(&mut ex, "clean", 7, &config, true)
            .await
            .state,
        pb::State::Running as i32
    );
    assert_eq!(
        stop_connector(&mut ex, "clean", 7, true).await.outcome,
        pb::StopOutcome::Stopped as i32
    );

    let l = s.lifecycle();
    assert_eq!(l.calls("clean", Some(0)), ["start", "stop", "stopped"]);
    assert!(l.of("clean", Some(0)).iter().all(|e| e.cleanup_only));
    stopped_once(&l, "clean", 0, &ex.id, true);
    assert_eq!(l.calls("clean", None), ["start", "stop", "stopped"]);
}

// ---------------------------------------------------------------------------------------
// Blocked polls, panics and fencing.

#[tokio::test]
async fn a_poll_blocked_for_ten_minutes_is_cancelled_and_stop_true_arrives_within_the_graceful_timeout()
 {
    let s = Setup::new().await;
    let mut ex = s.executor("a").await;
    let config = s.config(&[("test.poll.block.ms", "600000")]);
    start_task(&mut ex, "blocked", 0, 1, &config, false)
        .await
        .unwrap();
    wait_polled(&s, "blocked", 0, 0).await;

    let started = Instant::now();
    let r = stop_task(&mut ex, "blocked", 0, 1, true, 0).await.unwrap();
    assert!(started.elapsed() < Duration::from_millis(GRACEFUL_TIMEOUT_MS));
    assert_eq!(r.outcome, pb::StopOutcome::Stopped as i32, "{}", r.error);
    stopped_once(&s.lifecycle(), "blocked", 0, &ex.id, true);
}

#[tokio::test]
async fn a_poll_that_ignores_cancellation_is_abandoned_at_the_timeout_and_the_executor_keeps_answering()
 {
    let s = Setup::new().await;
    let mut ex = s.executor("a").await;
    let config = s.config(&[
        ("test.poll.block.ms", "600000"),
        ("test.ignore.cancel", "true"),
    ]);
    start_task(&mut ex, "stuck", 0, 1, &config, false)
        .await
        .unwrap();
    wait_polled(&s, "stuck", 0, 0).await;

    let r = stop_task(&mut ex, "stuck", 0, 1, true, 500).await.unwrap();
    assert_eq!(r.outcome, pb::StopOutcome::TimedOut as i32);
    assert!(r.error.contains("poll"), "{}", r.error);
    // Another connector still works on this executor.
    let other = s.config(&[]);
    assert!(running(
        &start_task(&mut ex, "other", 0, 1, &other, false)
            .await
            .unwrap()
    ));
    wait_polled(&s, "other", 0, 0).await;
    // The stuck instance never saw a stop (it was abandoned, not called concurrently).
    assert!(s.lifecycle().stops_for("stuck", 0).is_empty());
}

#[tokio::test]
async fn a_plugin_panic_fails_that_task_only() {
    let s = Setup::new().await;
    let mut ex = s.executor("a").await;
    let healthy = s.config(&[]);
    let panicking = s.config(&[("test.poll.panic", "true")]);
    start_task(&mut ex, "healthy", 0, 1, &healthy, false)
        .await
        .unwrap();
    start_task(&mut ex, "boom", 0, 1, &panicking, false)
        .await
        .unwrap();

    wait_until("boom to be reported FAILED", WAIT_DEADLINE, || {
        let failed = s
            .recorded
            .task_reports("boom", 0)
            .iter()
            .any(|t| t.state == pb::State::Failed as i32 && t.error.contains("panicked"));
        async move { failed.then_some(()) }
    })
    .await;
    let listed = ex
        .client
        .list_assignments(pb::ListAssignmentsRequest {})
        .await
        .unwrap()
        .into_inner();
    let state_of = |c: &str| {
        listed
            .tasks
            .iter()
            .find(|t| t.task.as_ref().unwrap().connector == c)
            .unwrap()
            .state
    };
    assert_eq!(state_of("boom"), pb::State::Failed as i32);
    assert_eq!(state_of("healthy"), pb::State::Running as i32);
    // The healthy task keeps committing offsets after the panic.
    let commits_before = s.recorded.commits.lock().unwrap().len();
    wait_until("more commits from the healthy task", WAIT_DEADLINE, || {
        let n = s.recorded.commits.lock().unwrap().len();
        async move { (n > commits_before + 2).then_some(()) }
    })
    .await;
    // The failed task can still be stopped (cleanup runs).
    let r = stop_task(&mut ex, "boom", 0, 1, true, 0).await.unwrap();
    assert_eq!(r.outcome, pb::StopOutcome::Stopped as i32);
    stopped_once(&s.lifecycle(), "boom", 0, &ex.id, true);
}

#[tokio::test]
async fn a_fenced_heartbeat_stops_everything_with_false_and_registers_again() {
    let s = Setup::new().await;
    let mut ex = s.executor("a").await;
    let config = s.config(&[]);
    start_connector(&mut ex, "fenced", 1, &config, false).await;
    start_task(&mut ex, "fenced", 0, 1, &config, false)
        .await
        .unwrap();
    wait_polled(&s, "fenced", 0, 0).await;

    let old_epoch = s.recorded.epoch.load(Ordering::SeqCst);
    s.recorded.fenced_up_to.store(old_epoch, Ordering::SeqCst);
    wait_until("the executor to register again", WAIT_DEADLINE, || {
        let n = s.recorded.registrations.lock().unwrap().len();
        async move { (n >= 2).then_some(()) }
    })
    .await;
    let l = s
        .wait_lifecycle("the connector instance to stop", |l| {
            !l.stops("fenced", None).is_empty()
        })
        .await;
    stopped_once(&l, "fenced", 0, &ex.id, false);
    let c = l.stops("fenced", None);
    assert_eq!(c.len(), 1);
    assert!(!c[0].connector_deleted);
    // The fake control plane records the registration before the executor has the
    // answer: wait for the executor to hold the new epoch.
    let client = ex.client.clone();
    let listed = wait_until("the executor to hold a new epoch", WAIT_DEADLINE, || {
        let mut client = client.clone();
        async move {
            let l = client
                .list_assignments(pb::ListAssignmentsRequest {})
                .await
                .ok()?
                .into_inner();
            (l.epoch > old_epoch).then_some(l)
        }
    })
    .await;
    assert!(listed.tasks.is_empty() && listed.connectors.is_empty());
}

/// A stop the control plane retries after this executor fenced itself and registered
/// again (a control-plane failover with a lease shorter than it) names the old epoch: it
/// is answered from the record of the stop that ran, before any epoch or lease check, and
/// runs nothing. The one stop(true) that completed stays the only one; the instance that
/// fencing stopped with `false` answers that, so the control plane re-hosts its cleanup.
#[tokio::test]
async fn a_stop_retried_after_the_executor_registered_again_is_answered_from_its_record() {
    let s = Setup::new().await;
    let mut ex = s.executor("a").await;
    let config = s.config(&[]);
    let old_epoch = s.recorded.epoch.load(Ordering::SeqCst);
    let stop_req = |task: Option<u32>| pb::StopTaskRequest {
        task: task_id("replayed", task.unwrap_or(0)),
        connector_deleted: true,
        generation: 1,
        incarnation: "inc-replayed".into(),
        executor_epoch: old_epoch,
        ..Default::default()
    };
    start_connector(&mut ex, "replayed", 1, &config, false).await;
    start_task(&mut ex, "replayed", 0, 1, &config, false)
        .await
        .unwrap();
    wait_polled(&s, "replayed", 0, 0).await;
    let first = ex
        .client
        .stop_task(stop_req(Some(0)))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(first.outcome, pb::StopOutcome::Stopped as i32, "{first:?}");
    assert!(first.connector_deleted && !first.replayed, "{first:?}");

    // The control plane fences the executor: it stops the connector instance with false
    // and registers again under a new epoch.
    s.recorded.fenced_up_to.store(old_epoch, Ordering::SeqCst);
    let client = ex.client.clone();
    wait_until("the executor to hold a new epoch", WAIT_DEADLINE, || {
        let mut client = client.clone();
        async move {
            let l = client
                .list_assignments(pb::ListAssignmentsRequest {})
                .await
                .ok()?
                .into_inner();
            (l.epoch > old_epoch).then_some(())
        }
    })
    .await;

    let again = ex
        .client
        .stop_task(stop_req(Some(0)))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(again.outcome, pb::StopOutcome::Stopped as i32, "{again:?}");
    assert!(again.connector_deleted && again.replayed, "{again:?}");
    let connector = ex
        .client
        .stop_connector(pb::ExecutorStopConnectorRequest {
            connector: "replayed".into(),
            connector_deleted: true,
            generation: 1,
            incarnation: "inc-replayed".into(),
            executor_epoch: old_epoch,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(
        connector.replayed && !connector.connector_deleted,
        "fencing stopped it with false, and the answer says so: {connector:?}"
    );

    // Another incarnation's stop never gets this record, and is refused (old epoch).
    let mut foreign = stop_req(Some(0));
    foreign.incarnation = "inc-other".into();
    let refused = ex.client.stop_task(foreign).await.unwrap_err();
    assert_eq!(refused.code(), Code::FailedPrecondition, "{refused:?}");

    let l = s.lifecycle();
    stopped_once(&l, "replayed", 0, &ex.id, true);
    let c = l.stops("replayed", None);
    assert_eq!(c.len(), 1, "{c:?}");
    assert!(!c[0].connector_deleted, "{c:?}");
}

#[tokio::test]
async fn source_offsets_are_committed_and_a_restarted_task_resumes_after_them() {
    let s = Setup::new().await;
    let mut ex = s.executor("a").await;
    let config = s.config(&[("test.poll.block.ms", "20")]);
    start_task(&mut ex, "offsets", 0, 1, &config, false)
        .await
        .unwrap();
    let committed = wait_until("three committed offsets", WAIT_DEADLINE, || {
        let last = s.recorded.commits.lock().unwrap().last().cloned();
        async move {
            last.filter(|c| {
                c.offsets
                    .first()
                    .is_some_and(|o| o.offset != r#"{"seq":0}"#)
            })
        }
    })
    .await;
    assert_eq!(committed.generation, 1);
    assert_eq!(committed.offsets[0].partition, r#"{"task":0}"#);
    stop_task(&mut ex, "offsets", 0, 1, false, 0).await.unwrap();
    let last = s.recorded.commits.lock().unwrap().last().cloned().unwrap();
    let seq: serde_json::Value = serde_json::from_str(&last.offsets[0].offset).unwrap();
    let seq = seq["seq"].as_u64().unwrap();

    // Restart with the committed offsets: the new instance continues after them.
    let restarted = ex
        .client
        .start_task(pb::StartTaskRequest {
            task: task_id("offsets", 0),
            connector_config: config.clone(),
            task_config: config.clone(),
            generation: 2,
            offsets: last.offsets.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(restarted.state, pb::State::Running as i32);
    let first_commit = wait_until("a commit of generation 2", WAIT_DEADLINE, || {
        let c = s
            .recorded
            .commits
            .lock()
            .unwrap()
            .iter()
            .find(|c| c.generation == 2)
            .cloned();
        async move { c }
    })
    .await;
    let next: serde_json::Value = serde_json::from_str(&first_commit.offsets[0].offset).unwrap();
    assert!(next["seq"].as_u64().unwrap() > seq);
}

#[tokio::test]
async fn a_stop_during_start_waits_for_the_start_and_runs_after_it() {
    let s = Setup::new().await;
    let mut ex = s.executor("a").await;
    let config = s.config(&[("test.start.delay.ms", "1000")]);
    let mut starter = ex.client.clone();
    let start = tokio::spawn(async move {
        starter
            .start_task(pb::StartTaskRequest {
                task: task_id("late", 0),
                connector_config: config.clone(),
                task_config: config,
                generation: 1,
                ..Default::default()
            })
            .await
    });
    let mut lister = ex.client.clone();
    wait_until("the task to be starting", WAIT_DEADLINE, || {
        let mut lister = lister.clone();
        async move {
            let listed = lister
                .list_assignments(pb::ListAssignmentsRequest {})
                .await
                .ok()?
                .into_inner();
            (!listed.tasks.is_empty()).then_some(())
        }
    })
    .await;
    let _ = lister.list_assignments(pb::ListAssignmentsRequest {}).await;
    let r = stop_task(&mut ex, "late", 0, 1, false, 0).await.unwrap();
    assert_eq!(r.outcome, pb::StopOutcome::Stopped as i32);
    start.await.unwrap().unwrap();
    let l = s.lifecycle();
    assert_eq!(
        l.calls("late", Some(0)),
        ["start", "stop", "stopped"],
        "the stop ran after start returned, and no poll"
    );
}

#[tokio::test]
async fn sink_tasks_deliver_source_records_and_a_deleted_sink_connector_forgets_its_consumer() {
    let s = Setup::new().await;
    let mut ex = s.executor("a").await;
    let input = s.dir.path().join("in.txt");
    std::fs::write(&input, "alpha\nbeta\n{\"n\":3}\n").unwrap();
    let cfg = |pairs: &[(&str, String)]| -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect()
    };
    let source = cfg(&[
        ("connector.class", "file-source".into()),
        ("file", input.display().to_string()),
        ("topic", "lines".into()),
    ]);
    assert!(running(
        &start_task(&mut ex, "src", 0, 1, &source, false)
            .await
            .unwrap()
    ));

    let sink = |out: &Path| {
        cfg(&[
            ("connector.class", "file-sink".into()),
            ("file", out.display().to_string()),
            ("topics", "lines".into()),
        ])
    };
    let lines_of = |path: &Path| -> Vec<String> {
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    };
    let first = s.dir.path().join("out-1.jsonl");
    assert_eq!(
        start_connector(&mut ex, "dst", 1, &sink(&first), false)
            .await
            .state,
        pb::State::Running as i32
    );
    assert!(running(
        &start_task(&mut ex, "dst", 0, 1, &sink(&first), false)
            .await
            .unwrap()
    ));
    let expected = vec![
        r#""alpha""#.to_owned(),
        r#""beta""#.to_owned(),
        r#"{"n":3}"#.to_owned(),
    ];
    wait_until("the sink to write three lines", WAIT_DEADLINE, || {
        let got = lines_of(&first);
        let done = got == expected;
        async move { done.then_some(()) }
    })
    .await;
    // The source committed the byte position after its last line.
    let commit = wait_until("the source's offset commit", WAIT_DEADLINE, || {
        let last = s.recorded.commits.lock().unwrap().last().cloned();
        async move { last }
    })
    .await;
    let partition: serde_json::Value = serde_json::from_str(&commit.offsets[0].partition).unwrap();
    assert_eq!(
        partition,
        serde_json::json!({ "file": input.display().to_string() })
    );
    assert_eq!(commit.offsets[0].offset, r#"{"position":19}"#);

    // Deleting the sink connector removes its consumer: the same name starts from the
    // beginning again.
    assert_eq!(
        stop_task(&mut ex, "dst", 0, 1, true, 0)
            .await
            .unwrap()
            .outcome,
        pb::StopOutcome::Stopped as i32
    );
    assert_eq!(
        stop_connector(&mut ex, "dst", 1, true).await.outcome,
        pb::StopOutcome::Stopped as i32
    );
    let second = s.dir.path().join("out-2.jsonl");
    start_connector(&mut ex, "dst", 2, &sink(&second), false).await;
    assert!(running(
        &start_task(&mut ex, "dst", 0, 2, &sink(&second), false)
            .await
            .unwrap()
    ));
    wait_until(
        "the re-created sink to read from the start",
        WAIT_DEADLINE,
        || {
            let done = lines_of(&second) == expected;
            async move { done.then_some(()) }
        },
    )
    .await;
    assert_eq!(
        lines_of(&first),
        expected,
        "nothing more reached the deleted sink's file"
    );
}

#[tokio::test]
async fn an_unreachable_control_plane_does_not_stop_the_tasks_and_a_lost_lease_stops_them_with_false()
 {
    let dir = KeepOnFailure::new();
    let (url, recorded, stop_cp) = fake_control_plane_at("127.0.0.1:0").await;
    let lifecycle = dir.path().join("lifecycle.jsonl");
    let s = Setup {
        dir,
        recorded,
        control_plane: url.clone(),
        lifecycle,
    };
    let mut ex = s.executor("a").await;
    let config = s.config(&[]);
    start_task(&mut ex, "steady", 0, 1, &config, false)
        .await
        .unwrap();
    wait_polled(&s, "steady", 0, 0).await;

    // The control plane goes away: heartbeats fail, the task keeps running.
    stop_cp.send(()).unwrap();
    wait_until("three failed heartbeats", WAIT_DEADLINE, || {
        let n = ex.proc.log().matches("heartbeat failed").count();
        async move { (n >= 3).then_some(()) }
    })
    .await;
    let listed = ex
        .client
        .list_assignments(pb::ListAssignmentsRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(listed.tasks.len(), 1);
    assert_eq!(listed.tasks[0].state, pb::State::Running as i32);
    assert!(s.lifecycle().stops_for("steady", 0).is_empty());

    // It comes back without the executor's lease (a new epoch history): the old epoch is
    // fenced, so the executor stops its task with false and registers again.
    let addr = url.trim_start_matches("http://").to_owned();
    let (_, again, _keep) = fake_control_plane_at(&addr).await;
    wait_until("the executor to register again", WAIT_DEADLINE, || {
        let n = again.registrations.lock().unwrap().len();
        async move { (n >= 1).then_some(()) }
    })
    .await;
    let l = s
        .wait_lifecycle("the task to stop", |l| !l.stops_for("steady", 0).is_empty())
        .await;
    stopped_once(&l, "steady", 0, &ex.id, false);
}

#[tokio::test]
async fn sigterm_with_the_control_plane_unreachable_still_stops_with_false_and_exits_zero() {
    let dir = KeepOnFailure::new();
    let (url, recorded, stop_cp) = fake_control_plane_at("127.0.0.1:0").await;
    let lifecycle = dir.path().join("lifecycle.jsonl");
    let s = Setup {
        dir,
        recorded,
        control_plane: url,
        lifecycle,
    };
    let mut ex = s.executor("a").await;
    start_task(&mut ex, "alone", 0, 1, &s.config(&[]), false)
        .await
        .unwrap();
    wait_polled(&s, "alone", 0, 0).await;
    stop_cp.send(()).unwrap();
    wait_until("a failed heartbeat", WAIT_DEADLINE, || {
        let failed = ex.proc.log().contains("heartbeat failed");
        async move { failed.then_some(()) }
    })
    .await;

    let started = Instant::now();
    let code = ex
        .proc
        .terminate(Duration::from_millis(GRACEFUL_TIMEOUT_MS + 5_000))
        .await;
    assert_eq!(code, Some(0));
    assert!(
        started.elapsed() < Duration::from_millis(GRACEFUL_TIMEOUT_MS + 2_000),
        "took {:?}",
        started.elapsed()
    );
    stopped_once(&s.lifecycle(), "alone", 0, &ex.id, false);
}

#[tokio::test]
async fn a_plugin_start_failure_is_a_failed_state_with_its_text_not_a_grpc_error() {
    let s = Setup::new().await;
    let mut ex = s.executor("a").await;
    let config = s.config(&[("test.start.fail", "true")]);
    let task = start_task(&mut ex, "broken", 0, 1, &config, false)
        .await
        .unwrap();
    assert_eq!(task.state, pb::State::Failed as i32);
    assert!(
        task.error.contains("injected start failure"),
        "{}",
        task.error
    );
    let connector = start_connector(&mut ex, "broken", 1, &config, false).await;
    assert_eq!(connector.state, pb::State::Failed as i32);
    assert!(
        connector.error.contains("injected start failure"),
        "{}",
        connector.error
    );
    wait_until("a FAILED report for the task", WAIT_DEADLINE, || {
        let failed = s.recorded.task_reports("broken", 0).iter().any(|t| {
            t.state == pb::State::Failed as i32 && t.generation == 1 && t.error.contains("injected")
        });
        async move { failed.then_some(()) }
    })
    .await;
    // Cleanup still reaches a half-started instance, once.
    let r = stop_task(&mut ex, "broken", 0, 1, true, 0).await.unwrap();
    assert_eq!(r.outcome, pb::StopOutcome::Stopped as i32);
    assert_eq!(
        stop_connector(&mut ex, "broken", 1, true).await.outcome,
        pb::StopOutcome::Stopped as i32
    );
    let l = s.lifecycle();
    assert_eq!(l.calls("broken", Some(0)), ["start", "stop", "stopped"]);
    assert!(!l.of("broken", Some(0))[0].ok);
    stopped_once(&l, "broken", 0, &ex.id, true);
}

#[tokio::test]
async fn sigterm_exits_zero_in_time_even_when_a_plugin_holds_its_thread() {
    let s = Setup::new().await;
    let mut ex = s.executor("a").await;
    let stuck = s.config(&[
        ("test.poll.block.ms", "600000"),
        ("test.ignore.cancel", "true"),
    ]);
    start_task(&mut ex, "hog", 0, 1, &stuck, false)
        .await
        .unwrap();
    start_task(&mut ex, "fine", 0, 1, &s.config(&[]), false)
        .await
        .unwrap();
    wait_polled(&s, "hog", 0, 0).await;
    wait_polled(&s, "fine", 0, 0).await;

    let started = Instant::now();
    let code = ex
        .proc
        .terminate(Duration::from_millis(GRACEFUL_TIMEOUT_MS + 5_000))
        .await;
    assert_eq!(code, Some(0));
    assert!(
        started.elapsed() < Duration::from_millis(GRACEFUL_TIMEOUT_MS + 2_000),
        "took {:?}",
        started.elapsed()
    );
    let l = s.lifecycle();
    stopped_once(&l, "fine", 0, &ex.id, false);
    assert!(
        l.stops_for("hog", 0).is_empty(),
        "the hog was abandoned, never called concurrently"
    );
}
