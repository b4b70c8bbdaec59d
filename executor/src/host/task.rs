//! A hosted task: its plugin instance, its work loop (poll → append → commit for a source,
//! fetch → put → flush → ack for a sink) and its one stop.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Mutex as AsyncMutex, OwnedMutexGuard};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use wharf::ids::TaskKey;
use wharf::pb::v1 as pb;
use wharf::sdk::{Plugin, SinkTask, SourceRecord, SourceTask, TaskContext, TaskFactory};

use super::instance::{
    Dropped, InstanceState, Lifecycle, StopOutcome, StopRecord, StopResult, await_plugin_stop,
    timed_out_text,
};
use super::{Shared, StartTask, lock, panic_text, spawn_named};
use crate::log::{LogRecord, StartPosition};

/// Most records a sink task gets in one `put`.
pub const SINK_BATCH_MAX_RECORDS: usize = 500;

/// How long one fetch of a sink task waits for a first record, in milliseconds.
pub const SINK_FETCH_WAIT_MS: u64 = 500;

/// Wait before retrying a record-log call that failed, in milliseconds.
pub const LOG_RETRY_BACKOFF_MS: u64 = 500;

/// How long a stop lets records that poll already returned reach the log and their
/// offsets commit, in milliseconds. A graceful stop (restart, pause, reconfiguration)
/// thereby causes no duplicates; past this bound the records are polled again by the
/// next instance (at least once), so an unreachable log or control plane cannot hold a
/// stop for long.
pub const STOP_DRAIN_TIMEOUT_MS: u64 = 2_000;

/// Config key listing the topics of a sink connector (comma-separated).
pub const TOPICS: &str = "topics";

type SourceCell = Arc<AsyncMutex<Box<dyn SourceTask>>>;
type SinkCell = Arc<AsyncMutex<Box<dyn SinkTask>>>;

/// The plugin instance, behind an async mutex: whoever holds it is the one call in
/// progress (start, poll, put/flush or stop), which is how calls never overlap.
enum TaskPlugin {
    Source(SourceCell),
    Sink(SinkCell),
}

/// The plugin lock taken when the instance is created and released by `start`, so that a
/// stop arriving during start waits for it.
enum StartGuard {
    Source(OwnedMutexGuard<Box<dyn SourceTask>>),
    Sink(OwnedMutexGuard<Box<dyn SinkTask>>),
}

/// Name of the log consumer shared by the tasks of a sink connector.
pub fn sink_consumer_name(connector: &str) -> String {
    format!("wharf-sink-{connector}")
}

pub(crate) struct TaskInstance {
    key: TaskKey,
    pub life: Lifecycle,
    plugin: TaskPlugin,
    start_guard: Mutex<Option<StartGuard>>,
    /// Cancelled when the stop begins: ends the work loop and any pending poll; the
    /// plugin sees it as `TaskContext::cancel`.
    cancel: CancellationToken,
    work: Mutex<Option<JoinHandle<()>>>,
    shared: Arc<Shared>,
}

impl TaskInstance {
    pub fn new(plugin: &Plugin, req: &StartTask, shared: Arc<Shared>) -> Self {
        let (cell, guard) = match &plugin.task {
            TaskFactory::Source(make) => {
                let cell: SourceCell = Arc::new(AsyncMutex::new(make()));
                let guard = cell.clone().try_lock_owned().ok().map(StartGuard::Source);
                (TaskPlugin::Source(cell), guard)
            }
            TaskFactory::Sink(make) => {
                let cell: SinkCell = Arc::new(AsyncMutex::new(make()));
                let guard = cell.clone().try_lock_owned().ok().map(StartGuard::Sink);
                (TaskPlugin::Sink(cell), guard)
            }
        };
        Self {
            key: req.task.clone(),
            life: Lifecycle::new(req.generation, req.cleanup_only),
            plugin: cell,
            start_guard: Mutex::new(guard),
            cancel: CancellationToken::new(),
            work: Mutex::new(None),
            shared,
        }
    }

    fn report(&self, state: &InstanceState) {
        let (state, error) = state.to_wire();
        self.shared
            .registry
            .report_task(&self.key, self.life.generation, state, error);
    }

    /// Runs the plugin's start once and, when it succeeded and the task is neither paused
    /// nor cleanup-only, its work loop.
    pub async fn start(self: Arc<Self>, req: StartTask) -> InstanceState {
        let ctx = TaskContext {
            connector: req.task.connector.clone(),
            task: req.task.task,
            incarnation: req.incarnation.clone(),
            cleanup_only: req.cleanup_only,
            executor_id: self.shared.executor_id.clone(),
            connector_config: req.connector_config.clone(),
            offsets: req.offsets.clone(),
            cancel: self.cancel.clone(),
        };
        let config = req.task_config.clone();
        let guard = lock(&self.start_guard).take();
        let handle = match (guard, &self.plugin) {
            (Some(StartGuard::Source(mut g)), _) => spawn_named("task start", async move {
                g.start(ctx, config).await.map_err(|e| e.to_string())
            }),
            (Some(StartGuard::Sink(mut g)), _) => spawn_named("task start", async move {
                g.start(ctx, config).await.map_err(|e| e.to_string())
            }),
            (None, TaskPlugin::Source(cell)) => {
                let cell = cell.clone();
                spawn_named("task start", async move {
                    cell.lock()
                        .await
                        .start(ctx, config)
                        .await
                        .map_err(|e| e.to_string())
                })
            }
            (None, TaskPlugin::Sink(cell)) => {
                let cell = cell.clone();
                spawn_named("task start", async move {
                    cell.lock()
                        .await
                        .start(ctx, config)
                        .await
                        .map_err(|e| e.to_string())
                })
            }
        };
        let result = handle.await.unwrap_or_else(|e| Err(panic_text(e)));
        let state = match result {
            Ok(()) if req.paused => InstanceState::Paused,
            Ok(()) => InstanceState::Running,
            Err(e) => InstanceState::Failed(e),
        };
        tracing::info!(connector = %self.key.connector, task = self.key.task, generation = self.life.generation,
            cleanup_only = self.life.cleanup_only, state = ?state, "task started");
        if !self.life.set_state_unless_stopping(state.clone()) {
            return self.life.state();
        }
        self.report(&state);
        if state == InstanceState::Running && !self.life.cleanup_only {
            let mut work = lock(&self.work);
            if !self.cancel.is_cancelled() {
                let me = self.clone();
                *work = Some(match &self.plugin {
                    TaskPlugin::Source(cell) => {
                        spawn_named("source task loop", me.source_loop(cell.clone()))
                    }
                    TaskPlugin::Sink(cell) => {
                        let topics = topics_of(&req);
                        spawn_named("sink task loop", me.sink_loop(cell.clone(), topics))
                    }
                });
            }
        }
        state
    }

    fn fail(&self, error: String) {
        tracing::warn!(connector = %self.key.connector, task = self.key.task, generation = self.life.generation,
            error = %error, "task failed");
        let state = InstanceState::Failed(error);
        if self.life.set_state_unless_stopping(state.clone()) {
            self.report(&state);
        }
    }

    /// Waits `LOG_RETRY_BACKOFF_MS` unless cancelled first; false when cancelled.
    /// Resolves [`STOP_DRAIN_TIMEOUT_MS`] after the stop began.
    async fn drain_deadline(&self) {
        self.cancel.cancelled().await;
        tokio::time::sleep(Duration::from_millis(STOP_DRAIN_TIMEOUT_MS)).await;
    }

    async fn backoff(&self) -> bool {
        tokio::select! {
            () = self.cancel.cancelled() => false,
            () = tokio::time::sleep(Duration::from_millis(LOG_RETRY_BACKOFF_MS)) => true,
        }
    }

    async fn source_loop(self: Arc<Self>, cell: SourceCell) {
        // Offsets whose records the log acknowledged but whose commit did not land yet.
        let mut pending: BTreeMap<String, (serde_json::Value, serde_json::Value)> = BTreeMap::new();
        loop {
            if self.cancel.is_cancelled() {
                return;
            }
            let (p, cancel) = (cell.clone(), self.cancel.clone());
            let mut poll = spawn_named("source poll", async move {
                let mut g = p.lock_owned().await;
                if cancel.is_cancelled() {
                    return Ok(None);
                }
                g.poll().await.map(Some).map_err(|e| e.to_string())
            });
            let polled = tokio::select! {
                biased;
                () = self.cancel.cancelled() => {
                    // Cancel the pending poll before the stop runs (a cancel-safe poll is
                    // dropped at its await point).
                    poll.abort();
                    return;
                }
                r = &mut poll => r,
            };
            let records = match polled {
                Ok(Ok(Some(records))) => records,
                Ok(Ok(None)) => return,
                Ok(Err(e)) => return self.fail(format!("poll failed: {e}")),
                Err(join) => return self.fail(panic_text(join)),
            };
            // An empty poll still retries a commit that did not land.
            if records.is_empty() && pending.is_empty() {
                continue;
            }
            // Fenced: nothing polled after the stop began reaches the log.
            if self.cancel.is_cancelled() {
                return;
            }
            for (topic, batch) in by_topic(&records) {
                loop {
                    // Drained on stop (bounded): records appended but not committed would
                    // be polled again by the next instance, a duplicate without a crash.
                    let appended = tokio::select! {
                        biased;
                        () = self.drain_deadline() => return,
                        r = self.shared.log.append(&topic, batch.clone()) => r,
                    };
                    match appended {
                        Ok(_) => break,
                        Err(e) => {
                            tracing::warn!(connector = %self.key.connector, task = self.key.task, topic = %topic,
                                error = %e, "append to the record log failed; retrying");
                            if !self.backoff().await {
                                return;
                            }
                        }
                    }
                }
            }
            for r in &records {
                pending.insert(
                    r.source_partition.to_string(),
                    (r.source_partition.clone(), r.source_offset.clone()),
                );
            }
            let offsets: Vec<pb::SourceOffset> = pending
                .values()
                .map(|(partition, offset)| pb::SourceOffset {
                    partition: partition.to_string(),
                    offset: offset.to_string(),
                })
                .collect();
            // Drained on stop too, but bounded: a stop must not wait for an unreachable
            // control plane.
            let committed = tokio::select! {
                biased;
                () = self.drain_deadline() => return,
                r = self.shared.registry.commit_offsets(&self.key, self.life.generation, offsets) => r,
            };
            match committed {
                Ok(()) => {
                    pending.clear();
                    let p = cell.clone();
                    let cancel = self.cancel.clone();
                    let committed = spawn_named("source commit", async move {
                        let mut g = p.lock_owned().await;
                        if cancel.is_cancelled() {
                            return Ok(());
                        }
                        g.commit().await.map_err(|e| e.to_string())
                    })
                    .await
                    .unwrap_or_else(|e| Err(panic_text(e)));
                    if let Err(e) = committed {
                        return self.fail(format!("commit failed: {e}"));
                    }
                }
                Err(e) => {
                    tracing::warn!(connector = %self.key.connector, task = self.key.task, error = %e,
                        "offset commit failed; kept for the next commit");
                }
            }
        }
    }

    async fn sink_loop(self: Arc<Self>, cell: SinkCell, topics: Result<Vec<String>, String>) {
        let topics = match topics {
            Ok(t) => t,
            Err(e) => return self.fail(e),
        };
        let name = sink_consumer_name(&self.key.connector);
        let mut consumer = loop {
            let opened = tokio::select! {
                () = self.cancel.cancelled() => return,
                r = self.shared.log.consumer(&name, &topics, StartPosition::Earliest) => r,
            };
            match opened {
                Ok(c) => break c,
                Err(e) => {
                    tracing::warn!(consumer = %name, error = %e, "cannot open the log consumer; retrying");
                    if !self.backoff().await {
                        return;
                    }
                }
            }
        };
        loop {
            let fetched = tokio::select! {
                biased;
                () = self.cancel.cancelled() => return,
                r = consumer.fetch(SINK_BATCH_MAX_RECORDS, Duration::from_millis(SINK_FETCH_WAIT_MS)) => r,
            };
            let delivered = match fetched {
                Ok(d) => d,
                Err(e) => {
                    tracing::warn!(consumer = %name, error = %e, "fetch failed; retrying");
                    if !self.backoff().await {
                        return;
                    }
                    continue;
                }
            };
            if delivered.is_empty() {
                continue;
            }
            let mut offsets: BTreeMap<String, u64> = BTreeMap::new();
            let mut tokens = Vec::with_capacity(delivered.len());
            let mut records = Vec::with_capacity(delivered.len());
            for d in delivered {
                let next = offsets.entry(d.record.topic.clone()).or_insert(0);
                *next = (*next).max(d.record.offset + 1);
                tokens.push(d.ack);
                records.push(d.record);
            }
            let (p, cancel) = (cell.clone(), self.cancel.clone());
            // put and flush are not cancelled: the stop waits for them (bounded).
            let written = spawn_named("sink put", async move {
                let mut g = p.lock_owned().await;
                if cancel.is_cancelled() {
                    return Ok(false);
                }
                g.put(records)
                    .await
                    .map_err(|e| format!("put failed: {e}"))?;
                g.flush(&offsets)
                    .await
                    .map_err(|e| format!("flush failed: {e}"))?;
                Ok(true)
            })
            .await
            .unwrap_or_else(|e| Err(panic_text(e)));
            match written {
                Ok(true) => {
                    if let Err(e) = consumer.ack(&tokens).await {
                        tracing::warn!(consumer = %name, error = %e, "ack failed; records may be delivered again");
                    }
                }
                Ok(false) => return,
                Err(e) => return self.fail(e),
            }
        }
    }

    /// Stops the instance once (see `Lifecycle::stop_once`). `self_initiated` marks a stop
    /// the executor decided (shutdown, fencing, a newer generation).
    pub async fn stop(
        self: &Arc<Self>,
        connector_deleted: bool,
        timeout: Duration,
        self_initiated: bool,
    ) -> StopResult {
        let me = self.clone();
        self.life
            .stop_once(move || async move {
                me.run_stop(connector_deleted, timeout, self_initiated)
                    .await
            })
            .await
    }

    async fn run_stop(
        &self,
        connector_deleted: bool,
        timeout: Duration,
        self_initiated: bool,
    ) -> StopRecord {
        let started = Instant::now();
        let deadline = started + timeout;
        self.cancel.cancel();
        let work = lock(&self.work).take();
        let (outcome, error) = 'stop: {
            if let Some(h) = work
                && tokio::time::timeout_at(deadline, h).await.is_err()
            {
                break 'stop (
                    StopOutcome::TimedOut,
                    Some(timed_out_text(timeout, "the work loop")),
                );
            }
            let handle = match &self.plugin {
                TaskPlugin::Source(cell) => {
                    let Ok(mut g) =
                        tokio::time::timeout_at(deadline, cell.clone().lock_owned()).await
                    else {
                        break 'stop (
                            StopOutcome::TimedOut,
                            Some(timed_out_text(timeout, "start or poll to return")),
                        );
                    };
                    spawn_named("task stop", async move {
                        let result = g
                            .stop_with(connector_deleted)
                            .await
                            .map_err(|e| e.to_string());
                        // After stop the instance is dropped (SDK guarantee).
                        *g = Box::new(Dropped);
                        result
                    })
                }
                TaskPlugin::Sink(cell) => {
                    let Ok(mut g) =
                        tokio::time::timeout_at(deadline, cell.clone().lock_owned()).await
                    else {
                        break 'stop (
                            StopOutcome::TimedOut,
                            Some(timed_out_text(timeout, "start, put or flush to return")),
                        );
                    };
                    spawn_named("task stop", async move {
                        let result = g
                            .stop_with(connector_deleted)
                            .await
                            .map_err(|e| e.to_string());
                        // After stop the instance is dropped (SDK guarantee).
                        *g = Box::new(Dropped);
                        result
                    })
                }
            };
            await_plugin_stop(handle, deadline, timeout).await
        };
        let elapsed = started.elapsed();
        self.life.finish(outcome, &error);
        tracing::info!(connector = %self.key.connector, task = self.key.task, generation = self.life.generation,
            connector_deleted, outcome = ?outcome, elapsed_ms = elapsed.as_millis() as u64, error = ?error, "task stopped");
        match outcome {
            StopOutcome::Stopped if self_initiated => {
                self.shared.registry.report_task(
                    &self.key,
                    self.life.generation,
                    pb::State::Unassigned,
                    String::new(),
                );
            }
            StopOutcome::Stopped => {}
            StopOutcome::Failed | StopOutcome::TimedOut => self.report(&self.life.state()),
        }
        StopRecord {
            outcome,
            connector_deleted,
            error,
            generation: self.life.generation,
            elapsed,
        }
    }
}

/// Topics of a sink task: `topics` from the task config, else from the connector config.
fn topics_of(req: &StartTask) -> Result<Vec<String>, String> {
    let raw = req
        .task_config
        .get(TOPICS)
        .or_else(|| req.connector_config.get(TOPICS))
        .ok_or_else(|| format!("missing required configuration {TOPICS:?}"))?;
    let topics: Vec<String> = raw
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(str::to_owned)
        .collect();
    if topics.is_empty() {
        return Err(format!("configuration {TOPICS:?} names no topic"));
    }
    Ok(topics)
}

/// Records grouped by topic, in first-seen topic order, each group in poll order.
fn by_topic(records: &[SourceRecord]) -> Vec<(String, Vec<LogRecord>)> {
    let mut groups: Vec<(String, Vec<LogRecord>)> = Vec::new();
    for r in records {
        let record = LogRecord {
            key: r.key.clone(),
            value: r.value.clone(),
            headers: r.headers.clone(),
            timestamp_ms: r.timestamp_ms,
        };
        match groups.iter_mut().find(|(t, _)| *t == r.topic) {
            Some((_, batch)) => batch.push(record),
            None => groups.push((r.topic.clone(), vec![record])),
        }
    }
    groups
}
