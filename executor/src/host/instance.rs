//! What connector instances and tasks share: their state, and the stop that runs at most
//! once and is replayed to every later caller.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::{lock, panic_text};
use wharf::pb::v1 as pb;
use wharf::task::{TaskKind, spawn};

/// State of one instance on this executor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InstanceState {
    /// `start` is running.
    Starting,
    /// Started; the work loop runs (or, in cleanup-only mode, waits for the stop).
    Running,
    /// Started with target state PAUSED: no poll or put.
    Paused,
    /// Start or the work loop failed, or the stop failed or timed out; the text says why.
    Failed(String),
    /// The stop is under way.
    Stopping,
    /// Stopped without error.
    Stopped,
}

impl InstanceState {
    /// Wire state and error text.
    pub fn to_wire(&self) -> (pb::State, String) {
        match self {
            InstanceState::Starting => (pb::State::Unassigned, String::new()),
            InstanceState::Running | InstanceState::Stopping => (pb::State::Running, String::new()),
            InstanceState::Paused => (pb::State::Paused, String::new()),
            InstanceState::Failed(e) => (pb::State::Failed, e.clone()),
            InstanceState::Stopped => (pb::State::Stopped, String::new()),
        }
    }
}

/// How a stop ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopOutcome {
    /// The plugin's stop returned Ok.
    Stopped,
    /// The plugin's stop returned an error or panicked.
    Failed,
    /// The stop overran its timeout: the instance was abandoned and its output fenced.
    TimedOut,
}

/// What happened when an instance was stopped; kept so that a repeated stop reports it.
#[derive(Debug, Clone)]
pub struct StopRecord {
    /// How it ended.
    pub outcome: StopOutcome,
    /// The flag the stop ran with.
    pub connector_deleted: bool,
    /// The plugin's error text, or why the stop timed out.
    pub error: Option<String>,
    /// Generation of the stopped instance.
    pub generation: u64,
    /// Time the stop took.
    pub elapsed: Duration,
}

/// A stop's record and whether this caller only replayed it.
#[derive(Debug, Clone)]
pub struct StopResult {
    /// The record of the one stop that ran.
    pub record: StopRecord,
    /// True when this request found the stop already claimed: nothing ran for it.
    pub replayed: bool,
}

/// State and stop bookkeeping of one instance.
pub(crate) struct Lifecycle {
    /// Generation of the assignment.
    pub generation: u64,
    /// Started for cleanup only.
    pub cleanup_only: bool,
    state: Mutex<InstanceState>,
    claimed: AtomicBool,
    done: Arc<watch::Sender<Option<StopRecord>>>,
}

impl Lifecycle {
    pub fn new(generation: u64, cleanup_only: bool) -> Self {
        Self {
            generation,
            cleanup_only,
            state: Mutex::new(InstanceState::Starting),
            claimed: AtomicBool::new(false),
            done: Arc::new(watch::channel(None).0),
        }
    }

    pub fn state(&self) -> InstanceState {
        lock(&self.state).clone()
    }

    pub fn set_state(&self, state: InstanceState) {
        *lock(&self.state) = state;
    }

    /// Sets `state` unless a stop already began (a late work-loop failure must not hide
    /// the stop's own outcome).
    pub fn set_state_unless_stopping(&self, state: InstanceState) -> bool {
        if self.stop_claimed() {
            return false;
        }
        self.set_state(state);
        true
    }

    /// True once a stop was asked for.
    pub fn stop_claimed(&self) -> bool {
        self.claimed.load(Ordering::SeqCst)
    }

    /// Runs the stop made by `body` exactly once, in a spawned task (a cancelled request
    /// cannot cut it in half); every caller gets its record, later ones with
    /// `replayed = true`.
    pub async fn stop_once<F>(&self, body: impl FnOnce() -> F) -> StopResult
    where
        F: std::future::Future<Output = StopRecord> + Send + 'static,
    {
        let mut rx = self.done.subscribe();
        let replayed = self.claimed.swap(true, Ordering::SeqCst);
        if !replayed {
            self.set_state(InstanceState::Stopping);
            let tx = self.done.clone();
            let fut = body();
            spawn(TaskKind::Awaited, "stop instance", async move {
                let record = fut.await;
                tx.send_replace(Some(record));
            });
        }
        let record = match rx.wait_for(Option::is_some).await {
            Ok(r) => r.clone(),
            Err(_) => None,
        };
        StopResult {
            record: record.unwrap_or_else(|| StopRecord {
                outcome: StopOutcome::Failed,
                connector_deleted: false,
                error: Some("the stop ended without a record".into()),
                generation: self.generation,
                elapsed: Duration::ZERO,
            }),
            replayed,
        }
    }

    /// Records the final state of a stop.
    pub fn finish(&self, outcome: StopOutcome, error: &Option<String>) {
        self.set_state(match outcome {
            StopOutcome::Stopped => InstanceState::Stopped,
            StopOutcome::Failed | StopOutcome::TimedOut => {
                InstanceState::Failed(error.clone().unwrap_or_default())
            }
        });
    }
}

/// Awaits a spawned plugin stop until `deadline`; on overrun the call is aborted (it may
/// still hold its thread: the instance is abandoned either way).
pub(crate) async fn await_plugin_stop(
    handle: JoinHandle<Result<(), String>>,
    deadline: Instant,
    timeout: Duration,
) -> (StopOutcome, Option<String>) {
    let abort = handle.abort_handle();
    match tokio::time::timeout_at(deadline, handle).await {
        Ok(Ok(Ok(()))) => (StopOutcome::Stopped, None),
        Ok(Ok(Err(e))) => (StopOutcome::Failed, Some(e)),
        Ok(Err(join)) => (StopOutcome::Failed, Some(panic_text(join))),
        Err(_) => {
            abort.abort();
            (StopOutcome::TimedOut, Some(timed_out_text(timeout, "stop")))
        }
    }
}

/// Why a stop timed out.
pub(crate) fn timed_out_text(timeout: Duration, waiting_for: &str) -> String {
    format!(
        "stop timed out after {} ms waiting for {waiting_for}; instance abandoned and its output fenced",
        timeout.as_millis()
    )
}

/// What stays in an instance's place once its stop returned: the plugin itself is
/// dropped then (its connections closed), and nothing calls this placeholder.
pub(crate) struct Dropped;

const DROPPED: &str = "the instance was stopped and dropped";

#[async_trait::async_trait]
impl wharf::sdk::SourceTask for Dropped {
    async fn start(
        &mut self,
        _ctx: wharf::sdk::TaskContext,
        _config: wharf::sdk::ConfigMap,
    ) -> wharf::sdk::PluginResult<()> {
        Err(DROPPED.into())
    }

    async fn poll(&mut self) -> wharf::sdk::PluginResult<Vec<wharf::sdk::SourceRecord>> {
        Err(DROPPED.into())
    }
}

#[async_trait::async_trait]
impl wharf::sdk::SinkTask for Dropped {
    async fn start(
        &mut self,
        _ctx: wharf::sdk::TaskContext,
        _config: wharf::sdk::ConfigMap,
    ) -> wharf::sdk::PluginResult<()> {
        Err(DROPPED.into())
    }

    async fn put(&mut self, _records: Vec<wharf::sdk::SinkRecord>) -> wharf::sdk::PluginResult<()> {
        Err(DROPPED.into())
    }
}

#[async_trait::async_trait]
impl wharf::sdk::Connector for Dropped {
    async fn start(
        &mut self,
        _ctx: wharf::sdk::ConnectorContext,
        _config: wharf::sdk::ConfigMap,
    ) -> wharf::sdk::PluginResult<()> {
        Err(DROPPED.into())
    }

    async fn task_configs(
        &mut self,
        _max_tasks: u32,
    ) -> wharf::sdk::PluginResult<Vec<wharf::sdk::ConfigMap>> {
        Err(DROPPED.into())
    }
}
