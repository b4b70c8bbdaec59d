//! A hosted task: its plugin instance, its work loop (poll → append → commit for a source,
//! fetch → put → flush → ack for a sink) and its one stop.
//!
//! The loops overlap their steps instead of waiting on one durable write at a time: a
//! source polls its next batch while the last one is appended, and commits offsets in the
//! background, coalesced (the latest per source partition wins); a sink fetches its next
//! batch while `put` runs and flushes once per several batches. What they never reorder:
//! an offset is committed only after the log acknowledged its record, and the log is
//! acknowledged only after the sink's `flush` returned (at least once,
//! docs/architecture.md "Data plane"). A graceful stop drains both (bounded by [`STOP_DRAIN_TIMEOUT_MS`]), so it
//! causes no duplicates.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};
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
use super::{Shared, StartTask, lock, panic_text};
use crate::log::{AckToken, Delivered, LogConsumer, LogRecord, StartPosition};
use wharf::task::{TaskKind, spawn};

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

/// Shortest time between the starts of two offset commits of one source task, in
/// milliseconds (Kafka Connect's `offset.flush.interval.ms`, 60 s there). Polls and appends
/// go on meanwhile; offsets the log acknowledged in between are coalesced (the latest per
/// source partition wins) into the next commit, so a busy task commits at most this often
/// and an idle one right after its records reached the log. A graceful stop commits at
/// once; after a crash at most this much more is polled again.
pub const OFFSET_COMMIT_INTERVAL_MS: u64 = 100;

/// Wait before retrying an offset commit the control plane refused or did not answer, in
/// milliseconds. A refusal for a fenced epoch also makes the executor heartbeat at once,
/// which stops the task (`registry_client`).
pub const OFFSET_COMMIT_RETRY_BACKOFF_MS: u64 = 500;

/// A sink task flushes (and then acknowledges the log) once it holds this many records
/// put but not flushed. Kept well below the log's
/// [`DEFAULT_MAX_IN_FLIGHT_RECORDS`](crate::log::DEFAULT_MAX_IN_FLIGHT_RECORDS) minus one
/// batch, since unflushed records are unacknowledged and count against that bound.
pub const SINK_FLUSH_MAX_RECORDS: usize = 2_000;

/// A sink task flushes once this long passed since it put the oldest unflushed record, or
/// when no new record came for this long, in milliseconds. Kafka Connect flushes sinks on
/// its offset commit interval (60 s by default).
pub const SINK_FLUSH_INTERVAL_MS: u64 = 100;

/// Config key listing the topics of a sink connector (comma-separated).
pub const TOPICS: &str = "topics";

type SourceCell = Arc<AsyncMutex<Box<dyn SourceTask>>>;
type SinkCell = Arc<AsyncMutex<Box<dyn SinkTask>>>;
/// A spawned `poll`: its records, or `None` when the stop began before it ran.
type PollHandle = JoinHandle<Result<Option<Vec<SourceRecord>>, String>>;

/// Why a source work loop ended.
enum SourceExit {
    /// The stop began: commit what the log acknowledged (bounded), then end.
    Stopped,
    /// The task failed: commit what the log acknowledged (bounded), then report it.
    Failed(String),
    /// The drain bound passed during the stop: end now.
    Abandoned,
}

/// Result of one offset commit (and the plugin's `commit` after it).
enum CommitOutcome {
    Committed,
    /// The control plane refused the commit or did not answer: these offsets are retried.
    Refused(BTreeMap<String, String>, String),
    /// The plugin's `commit` failed or panicked.
    PluginFailed(String),
}

/// Offset commits of a source task: at most one in flight, the rest coalesced.
struct SourceCommits {
    /// Source partition -> offset (both as JSON text) of records the log acknowledged and
    /// no commit took yet.
    pending: BTreeMap<String, String>,
    in_flight: Option<JoinHandle<CommitOutcome>>,
    /// Earliest start of the next commit.
    next_at: Instant,
}

impl SourceCommits {
    fn new() -> Self {
        Self {
            pending: BTreeMap::new(),
            in_flight: None,
            next_at: Instant::now(),
        }
    }

    /// Takes the offset after the last record of each source partition in `records`
    /// (which the log acknowledged).
    fn record(&mut self, records: &[SourceRecord]) {
        let mut seen: Vec<&serde_json::Value> = Vec::new();
        for r in records.iter().rev() {
            if seen.contains(&&r.source_partition) {
                continue;
            }
            seen.push(&r.source_partition);
            self.pending
                .insert(r.source_partition.to_string(), r.source_offset.to_string());
        }
    }

    /// Puts back the offsets of a commit that did not land, unless newer ones are pending.
    fn restore(&mut self, offsets: BTreeMap<String, String>) {
        for (partition, offset) in offsets {
            self.pending.entry(partition).or_insert(offset);
        }
    }

    /// When the next commit should start: some time when offsets are pending and no
    /// commit is in flight, else never.
    fn due(&self) -> Option<Instant> {
        (self.in_flight.is_none() && !self.pending.is_empty()).then_some(self.next_at)
    }
}

/// Records a sink task put and did not flush yet.
#[derive(Default)]
struct Unflushed {
    tokens: Vec<AckToken>,
    /// Per topic, the offset after the last record put.
    offsets: BTreeMap<String, u64>,
    /// When the oldest of them was put.
    since: Option<Instant>,
}

impl Unflushed {
    fn add(&mut self, tokens: Vec<AckToken>, offsets: BTreeMap<String, u64>) {
        self.tokens.extend(tokens);
        for (topic, next) in offsets {
            let at = self.offsets.entry(topic).or_insert(0);
            *at = (*at).max(next);
        }
        self.since.get_or_insert_with(Instant::now);
    }
}

/// The output of a spawned task, or never when there is none.
async fn join_some<T>(handle: &mut Option<JoinHandle<T>>) -> Result<T, tokio::task::JoinError> {
    match handle {
        Some(h) => h.await,
        None => std::future::pending().await,
    }
}

/// Sleeps until `at`, or forever when `None`.
async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Offsets as the control plane takes them.
fn to_wire(offsets: &BTreeMap<String, String>) -> Vec<pb::SourceOffset> {
    offsets
        .iter()
        .map(|(partition, offset)| pb::SourceOffset {
            partition: partition.clone(),
            offset: offset.clone(),
        })
        .collect()
}

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
    /// When the stop began and whether it is for a deletion (set just before `cancel`
    /// fires); bounds the drain.
    stop_began: OnceLock<(Instant, bool)>,
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
            stop_began: OnceLock::new(),
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
            (Some(StartGuard::Source(mut g)), _) => {
                spawn(TaskKind::Awaited, "task start", async move {
                    g.start(ctx, config).await.map_err(|e| e.to_string())
                })
            }
            (Some(StartGuard::Sink(mut g)), _) => {
                spawn(TaskKind::Awaited, "task start", async move {
                    g.start(ctx, config).await.map_err(|e| e.to_string())
                })
            }
            (None, TaskPlugin::Source(cell)) => {
                let cell = cell.clone();
                spawn(TaskKind::Awaited, "task start", async move {
                    cell.lock()
                        .await
                        .start(ctx, config)
                        .await
                        .map_err(|e| e.to_string())
                })
            }
            (None, TaskPlugin::Sink(cell)) => {
                let cell = cell.clone();
                spawn(TaskKind::Awaited, "task start", async move {
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
                    TaskPlugin::Source(cell) => spawn(
                        TaskKind::Awaited,
                        "source task loop",
                        me.source_loop(cell.clone()),
                    ),
                    TaskPlugin::Sink(cell) => {
                        let topics = topics_of(&req);
                        spawn(
                            TaskKind::Awaited,
                            "sink task loop",
                            me.sink_loop(cell.clone(), topics),
                        )
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

    /// When draining after the stop began ends: [`STOP_DRAIN_TIMEOUT_MS`] after it began.
    fn stop_drain_deadline(&self) -> Instant {
        let began = self
            .stop_began
            .get()
            .map_or_else(Instant::now, |(began, _)| *began);
        began + Duration::from_millis(STOP_DRAIN_TIMEOUT_MS)
    }

    /// Resolves [`STOP_DRAIN_TIMEOUT_MS`] after the stop began.
    async fn drain_deadline(&self) {
        self.cancel.cancelled().await;
        tokio::time::sleep_until(self.stop_drain_deadline()).await;
    }

    /// Waits `LOG_RETRY_BACKOFF_MS` unless cancelled first; false when cancelled.
    async fn backoff(&self) -> bool {
        tokio::select! {
            () = self.cancel.cancelled() => false,
            () = tokio::time::sleep(Duration::from_millis(LOG_RETRY_BACKOFF_MS)) => true,
        }
    }

    /// The source work loop. Three things overlap: the next `poll` runs while the records
    /// of the previous one are appended, and an offset commit (with the plugin's `commit`
    /// after it) runs while both go on. Offsets enter a commit only after the log
    /// acknowledged their records (at least once); commits are coalesced.
    async fn source_loop(self: Arc<Self>, cell: SourceCell) {
        let mut poll = None;
        let mut commits = SourceCommits::new();
        let exit = self.source_work(&cell, &mut poll, &mut commits).await;
        if let Some(poll) = poll {
            // Cancel the pending poll before the stop runs (a cancel-safe poll is dropped
            // at its await point); what it returned would be polled again.
            poll.abort();
        }
        match exit {
            SourceExit::Stopped => {
                // Drained on stop (bounded): records in the log whose offsets were not
                // committed would be polled again by the next instance, a duplicate
                // without a crash. Not for a deletion: it removes the offsets (and the
                // control plane refuses commits meanwhile).
                let deleted = self.stop_began.get().is_some_and(|(_, deleted)| *deleted);
                if !deleted {
                    let deadline = self.stop_drain_deadline();
                    self.commit_remaining(&mut commits, deadline).await;
                }
            }
            SourceExit::Failed(error) => {
                let deadline = Instant::now() + Duration::from_millis(STOP_DRAIN_TIMEOUT_MS);
                self.commit_remaining(&mut commits, deadline).await;
                self.fail(error);
            }
            SourceExit::Abandoned => {}
        }
    }

    fn spawn_poll(&self, cell: &SourceCell) -> PollHandle {
        let (p, cancel) = (cell.clone(), self.cancel.clone());
        spawn(TaskKind::Awaited, "source poll", async move {
            let mut g = p.lock_owned().await;
            if cancel.is_cancelled() {
                return Ok(None);
            }
            g.poll().await.map(Some).map_err(|e| e.to_string())
        })
    }

    async fn source_work(
        self: &Arc<Self>,
        cell: &SourceCell,
        poll: &mut Option<PollHandle>,
        commits: &mut SourceCommits,
    ) -> SourceExit {
        loop {
            if self.cancel.is_cancelled() {
                return SourceExit::Stopped;
            }
            if poll.is_none() {
                *poll = Some(self.spawn_poll(cell));
            }
            let due = commits.due();
            if due.is_some_and(|at| at <= Instant::now()) {
                let offsets = std::mem::take(&mut commits.pending);
                commits.in_flight = Some(self.spawn_commit(cell, offsets, true));
                commits.next_at = Instant::now() + Duration::from_millis(OFFSET_COMMIT_INTERVAL_MS);
                continue;
            }
            tokio::select! {
                biased;
                () = self.cancel.cancelled() => return SourceExit::Stopped,
                done = join_some(&mut commits.in_flight) => {
                    commits.in_flight = None;
                    match done.unwrap_or_else(|e| CommitOutcome::PluginFailed(panic_text(e))) {
                        CommitOutcome::Committed => {}
                        CommitOutcome::Refused(offsets, error) => {
                            tracing::warn!(connector = %self.key.connector, task = self.key.task, error = %error,
                                "offset commit failed; kept for the next commit");
                            commits.restore(offsets);
                            commits.next_at =
                                Instant::now() + Duration::from_millis(OFFSET_COMMIT_RETRY_BACKOFF_MS);
                        }
                        CommitOutcome::PluginFailed(e) => {
                            return SourceExit::Failed(format!("commit failed: {e}"));
                        }
                    }
                }
                () = sleep_until_some(due) => {}
                polled = join_some(poll) => {
                    *poll = None;
                    let records = match polled {
                        Ok(Ok(Some(records))) => records,
                        Ok(Ok(None)) => continue,
                        Ok(Err(e)) => return SourceExit::Failed(format!("poll failed: {e}")),
                        Err(join) => return SourceExit::Failed(panic_text(join)),
                    };
                    if records.is_empty() {
                        continue;
                    }
                    // Fenced: nothing polled after the stop began reaches the log.
                    if self.cancel.is_cancelled() {
                        return SourceExit::Stopped;
                    }
                    // The next poll runs while these records are appended.
                    *poll = Some(self.spawn_poll(cell));
                    if let Err(exit) = self.append_all(&records).await {
                        return exit;
                    }
                    commits.record(&records);
                }
            }
        }
    }

    /// Appends `records` to their topics, retrying failures; records polled before the
    /// stop began are drained into the log, bounded by [`STOP_DRAIN_TIMEOUT_MS`].
    async fn append_all(&self, records: &[SourceRecord]) -> Result<(), SourceExit> {
        for (topic, batch) in by_topic(records) {
            loop {
                let appended = tokio::select! {
                    biased;
                    () = self.drain_deadline() => return Err(SourceExit::Abandoned),
                    r = self.shared.log.append(&topic, batch.clone()) => r,
                };
                match appended {
                    Ok(_) => break,
                    Err(e) => {
                        tracing::warn!(connector = %self.key.connector, task = self.key.task, topic = %topic,
                            error = %e, "append to the record log failed; retrying");
                        if !self.backoff().await {
                            return Err(SourceExit::Stopped);
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Commits `offsets` to the control plane and, when that landed and `plugin_commit`,
    /// runs the plugin's `commit` (skipped once the stop began).
    fn spawn_commit(
        self: &Arc<Self>,
        cell: &SourceCell,
        offsets: BTreeMap<String, String>,
        plugin_commit: bool,
    ) -> JoinHandle<CommitOutcome> {
        let (me, cell) = (self.clone(), cell.clone());
        spawn(TaskKind::Awaited, "source offset commit", async move {
            let wire = to_wire(&offsets);
            if let Err(e) = me
                .shared
                .registry
                .commit_offsets(&me.key, me.life.generation, wire)
                .await
            {
                return CommitOutcome::Refused(offsets, e.to_string());
            }
            if !plugin_commit {
                return CommitOutcome::Committed;
            }
            let p = cell.clone();
            let cancel = me.cancel.clone();
            let committed = spawn(TaskKind::Awaited, "source commit", async move {
                let mut g = p.lock_owned().await;
                if cancel.is_cancelled() {
                    return Ok(());
                }
                g.commit().await.map_err(|e| e.to_string())
            })
            .await
            .unwrap_or_else(|e| Err(panic_text(e)));
            match committed {
                Ok(()) => CommitOutcome::Committed,
                Err(e) => CommitOutcome::PluginFailed(e),
            }
        })
    }

    /// Waits for the commit in flight and commits what is still pending, both by
    /// `deadline`; the plugin's `commit` is not called.
    async fn commit_remaining(self: &Arc<Self>, commits: &mut SourceCommits, deadline: Instant) {
        if let Some(in_flight) = commits.in_flight.take() {
            match tokio::time::timeout_at(deadline, in_flight).await {
                Err(_) => return,
                Ok(Ok(CommitOutcome::Refused(offsets, _))) => commits.restore(offsets),
                Ok(_) => {}
            }
        }
        if commits.pending.is_empty() {
            return;
        }
        let wire = to_wire(&std::mem::take(&mut commits.pending));
        let committed = tokio::time::timeout_at(
            deadline,
            self.shared
                .registry
                .commit_offsets(&self.key, self.life.generation, wire),
        )
        .await;
        match committed {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::warn!(connector = %self.key.connector, task = self.key.task, error = %e,
                    "offset commit at the end of the task failed; its records will be polled again");
            }
            Err(_) => {
                tracing::warn!(connector = %self.key.connector, task = self.key.task,
                    "offset commit at the end of the task did not finish in time; its records will be polled again");
            }
        }
    }

    /// The sink work loop: the next batch is fetched while the plugin's `put` runs, and
    /// `flush` (then the log's ack) runs once [`SINK_FLUSH_MAX_RECORDS`] records were put
    /// or [`SINK_FLUSH_INTERVAL_MS`] after the oldest of them was, or when no new record
    /// came for that long. The log is acknowledged only after `flush` returned.
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
        let mut unflushed = Unflushed::default();
        let mut next: Vec<Delivered> = Vec::new();
        loop {
            // Records put but not flushed: wait one flush interval for more, then flush. Not
            // less: a JetStream pull that expires before the server reads it is never
            // answered, and the client gives up only seconds later.
            let wait = Duration::from_millis(if unflushed.tokens.is_empty() {
                SINK_FETCH_WAIT_MS
            } else {
                SINK_FLUSH_INTERVAL_MS
            });
            let delivered = if next.is_empty() {
                let fetched = tokio::select! {
                    biased;
                    () = self.cancel.cancelled() => break,
                    r = consumer.fetch(SINK_BATCH_MAX_RECORDS, wait) => r,
                };
                match fetched {
                    Ok(d) => d,
                    Err(e) => {
                        tracing::warn!(consumer = %name, error = %e, "fetch failed; retrying");
                        if let Err(e) = self
                            .flush_and_ack(&cell, &mut consumer, &mut unflushed, &name)
                            .await
                        {
                            return self.fail(e);
                        }
                        if !self.backoff().await {
                            break;
                        }
                        continue;
                    }
                }
            } else {
                std::mem::take(&mut next)
            };
            if delivered.is_empty() {
                // Nothing more came in time: flush what was put.
                if let Err(e) = self
                    .flush_and_ack(&cell, &mut consumer, &mut unflushed, &name)
                    .await
                {
                    return self.fail(e);
                }
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
            // put is not cancelled: the stop waits for it (bounded).
            let put = spawn(TaskKind::Awaited, "sink put", async move {
                let mut g = p.lock_owned().await;
                if cancel.is_cancelled() {
                    return Ok(false);
                }
                g.put(records)
                    .await
                    .map_err(|e| format!("put failed: {e}"))?;
                Ok(true)
            });
            let prefetch = async {
                if self.cancel.is_cancelled() {
                    return Ok(Vec::new());
                }
                consumer.fetch(SINK_BATCH_MAX_RECORDS, Duration::ZERO).await
            };
            let (written, prefetched) = tokio::join!(put, prefetch);
            match written.unwrap_or_else(|e| Err(panic_text(e))) {
                Ok(true) => unflushed.add(tokens, offsets),
                // The stop began before put: these records go to the next instance.
                Ok(false) => {}
                Err(e) => return self.fail(e),
            }
            match prefetched {
                Ok(d) => next = d,
                Err(e) => {
                    tracing::warn!(consumer = %name, error = %e, "fetch failed; retrying");
                }
            }
            let due = self.cancel.is_cancelled()
                || unflushed.tokens.len() >= SINK_FLUSH_MAX_RECORDS
                || unflushed.since.is_some_and(|since| {
                    since.elapsed() >= Duration::from_millis(SINK_FLUSH_INTERVAL_MS)
                });
            if due
                && let Err(e) = self
                    .flush_and_ack(&cell, &mut consumer, &mut unflushed, &name)
                    .await
            {
                return self.fail(e);
            }
            if self.cancel.is_cancelled() {
                return;
            }
        }
        // The stop began while waiting for records: flush and acknowledge what was put, so
        // that the next instance does not write it again.
        if let Err(e) = self
            .flush_and_ack(&cell, &mut consumer, &mut unflushed, &name)
            .await
        {
            self.fail(e);
        }
    }

    /// Flushes the plugin, then acknowledges the records put since the last flush. An ack
    /// that fails is logged (the records come again: at least once); a flush that fails
    /// is the task's failure.
    async fn flush_and_ack(
        &self,
        cell: &SinkCell,
        consumer: &mut Box<dyn LogConsumer>,
        unflushed: &mut Unflushed,
        name: &str,
    ) -> Result<(), String> {
        if unflushed.tokens.is_empty() {
            return Ok(());
        }
        let offsets = std::mem::take(&mut unflushed.offsets);
        let p = cell.clone();
        // flush is not cancelled: the stop waits for it (bounded).
        spawn(TaskKind::Awaited, "sink flush", async move {
            let mut g = p.lock_owned().await;
            g.flush(&offsets)
                .await
                .map_err(|e| format!("flush failed: {e}"))
        })
        .await
        .unwrap_or_else(|e| Err(panic_text(e)))?;
        let tokens = std::mem::take(&mut unflushed.tokens);
        unflushed.since = None;
        let acked = tokio::select! {
            biased;
            () = self.drain_deadline() => return Ok(()),
            r = consumer.ack(&tokens) => r,
        };
        if let Err(e) = acked {
            tracing::warn!(consumer = %name, error = %e, "ack failed; records may be delivered again");
        }
        Ok(())
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
        let _ = self.stop_began.set((started, connector_deleted));
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
                    spawn(TaskKind::Awaited, "task stop", async move {
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
                    spawn(TaskKind::Awaited, "task stop", async move {
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    use async_trait::async_trait;
    use serde_json::json;
    use wharf::sdk::{ConfigDef, ConfigMap, Connector, ConnectorContext, PluginResult, SinkRecord};

    use super::*;
    use crate::log::{EmbeddedLog, RecordLog};
    use crate::registry_client::Registry;

    /// Bound on each wait of the sink tests.
    const WAIT: Duration = Duration::from_secs(20);

    /// What a [`ProbeSink`] saw.
    #[derive(Default)]
    struct Probe {
        put: AtomicUsize,
        flushed: AtomicUsize,
        flush_attempts: AtomicUsize,
        fail_flush: AtomicBool,
    }

    /// A sink that counts records put and flushed, and whose flush fails on demand.
    struct ProbeSink {
        probe: Arc<Probe>,
        unflushed: usize,
    }

    #[async_trait]
    impl SinkTask for ProbeSink {
        async fn start(&mut self, _ctx: TaskContext, _config: ConfigMap) -> PluginResult<()> {
            Ok(())
        }

        async fn put(&mut self, records: Vec<SinkRecord>) -> PluginResult<()> {
            self.unflushed += records.len();
            self.probe.put.fetch_add(records.len(), Ordering::SeqCst);
            Ok(())
        }

        async fn flush(&mut self, _offsets: &BTreeMap<String, u64>) -> PluginResult<()> {
            self.probe.flush_attempts.fetch_add(1, Ordering::SeqCst);
            if self.probe.fail_flush.load(Ordering::SeqCst) {
                return Err("disk full".into());
            }
            self.probe
                .flushed
                .fetch_add(std::mem::take(&mut self.unflushed), Ordering::SeqCst);
            Ok(())
        }
    }

    struct NoConnector;

    #[async_trait]
    impl Connector for NoConnector {
        async fn start(&mut self, _ctx: ConnectorContext, _config: ConfigMap) -> PluginResult<()> {
            Ok(())
        }

        async fn task_configs(&mut self, _max_tasks: u32) -> PluginResult<Vec<ConfigMap>> {
            Ok(Vec::new())
        }
    }

    async fn wait_for(what: &str, mut condition: impl FnMut() -> bool) {
        let deadline = Instant::now() + WAIT;
        while !condition() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Runs a probe sink task on `records` records of topic `t` until it flushed them all
    /// or failed, stops it, and returns what a new reader of its consumer gets.
    async fn run_probe_sink(records: usize, fail_flush: bool) -> (Arc<Probe>, Vec<Delivered>) {
        let dir = tempfile::tempdir().expect("temp dir");
        let log = Arc::new(EmbeddedLog::open(dir.path()).await.expect("log"));
        let batch = (0..records)
            .map(|i| LogRecord {
                key: None,
                value: i.to_string().into_bytes(),
                headers: Vec::new(),
                timestamp_ms: None,
            })
            .collect();
        log.append("t", batch).await.expect("append");
        let registry = Registry::new(
            "http://127.0.0.1:9",
            "e".into(),
            "http://127.0.0.1:9".into(),
            Vec::new(),
        )
        .expect("registry");
        let shared = Arc::new(Shared {
            executor_id: "e".into(),
            registry: Arc::new(registry),
            log: log.clone(),
        });
        let probe = Arc::new(Probe::default());
        probe.fail_flush.store(fail_flush, Ordering::SeqCst);
        let task_probe = probe.clone();
        let plugin = Plugin {
            name: "probe-sink".into(),
            version: "0".into(),
            config_def: ConfigDef::new(),
            connector: Arc::new(|| Box::new(NoConnector)),
            task: TaskFactory::Sink(Arc::new(move || {
                Box::new(ProbeSink {
                    probe: task_probe.clone(),
                    unflushed: 0,
                })
            })),
        };
        let req = StartTask {
            task: TaskKey {
                connector: "c".into(),
                task: 0,
            },
            connector_config: ConfigMap::new(),
            task_config: ConfigMap::from([(TOPICS.to_string(), "t".to_string())]),
            generation: 1,
            paused: false,
            cleanup_only: false,
            offsets: BTreeMap::new(),
            incarnation: "i".into(),
            executor_epoch: 0,
        };
        let task = Arc::new(TaskInstance::new(&plugin, &req, shared));
        assert_eq!(task.clone().start(req).await, InstanceState::Running);
        if fail_flush {
            wait_for("the failed flush", || {
                matches!(task.life.state(), InstanceState::Failed(_))
            })
            .await;
        } else {
            wait_for("every record flushed", || {
                probe.flushed.load(Ordering::SeqCst) >= records
            })
            .await;
        }
        let _ = task.stop(false, WAIT, false).await;
        let mut reader = log
            .consumer(
                &sink_consumer_name("c"),
                &["t".to_string()],
                StartPosition::Earliest,
            )
            .await
            .expect("consumer");
        let again = reader
            .fetch(records, Duration::from_millis(200))
            .await
            .expect("fetch");
        (probe, again)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_sink_acknowledges_every_record_it_flushed() {
        let records = 3 * SINK_FLUSH_MAX_RECORDS;
        let (probe, again) = run_probe_sink(records, false).await;
        assert_eq!(probe.put.load(Ordering::SeqCst), records);
        assert!(again.is_empty(), "acknowledged records came again");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn records_put_but_not_flushed_are_not_acknowledged() {
        let (probe, again) = run_probe_sink(SINK_BATCH_MAX_RECORDS * 2, true).await;
        assert!(probe.put.load(Ordering::SeqCst) > 0);
        assert_eq!(probe.flushed.load(Ordering::SeqCst), 0);
        let first = again.first().map(|d| d.record.offset);
        assert_eq!(
            first,
            Some(0),
            "the unflushed records come again from the start"
        );
    }

    fn record(partition: serde_json::Value, position: u64) -> SourceRecord {
        SourceRecord {
            topic: "t".into(),
            key: None,
            value: Vec::new(),
            headers: Vec::new(),
            timestamp_ms: None,
            source_partition: partition,
            source_offset: json!({ "position": position }),
        }
    }

    #[test]
    fn commits_keep_the_last_offset_of_each_partition() {
        let mut commits = SourceCommits::new();
        let (a, b) = (json!({ "file": "a" }), json!({ "file": "b" }));
        commits.record(&[
            record(a.clone(), 1),
            record(b.clone(), 7),
            record(a.clone(), 2),
        ]);
        commits.record(&[record(a.clone(), 3)]);
        let expected = BTreeMap::from([
            (a.to_string(), json!({ "position": 3 }).to_string()),
            (b.to_string(), json!({ "position": 7 }).to_string()),
        ]);
        assert_eq!(commits.pending, expected);
    }

    #[test]
    fn a_refused_commit_does_not_overwrite_newer_offsets() {
        let mut commits = SourceCommits::new();
        let (a, b) = (json!({ "file": "a" }), json!({ "file": "b" }));
        commits.record(&[record(a.clone(), 5), record(b.clone(), 5)]);
        let refused = std::mem::take(&mut commits.pending);
        commits.record(&[record(a.clone(), 9)]);
        commits.restore(refused);
        assert_eq!(
            commits.pending.get(&a.to_string()),
            Some(&json!({ "position": 9 }).to_string())
        );
        assert_eq!(
            commits.pending.get(&b.to_string()),
            Some(&json!({ "position": 5 }).to_string())
        );
    }

    #[test]
    fn a_commit_is_due_only_with_pending_offsets_and_none_in_flight() {
        let mut commits = SourceCommits::new();
        assert_eq!(commits.due(), None);
        commits.record(&[record(json!({ "file": "a" }), 1)]);
        assert_eq!(commits.due(), Some(commits.next_at));
    }

    #[tokio::test]
    async fn no_second_commit_starts_while_one_is_in_flight() {
        let mut commits = SourceCommits::new();
        commits.record(&[record(json!({ "file": "a" }), 1)]);
        commits.in_flight = Some(tokio::spawn(async { CommitOutcome::Committed }));
        assert_eq!(commits.due(), None);
    }

    #[test]
    fn unflushed_records_keep_the_highest_next_offset_per_topic_and_the_oldest_put_time() {
        let token = |position| AckToken {
            topic: "t".into(),
            position,
            handle: String::new(),
        };
        let mut unflushed = Unflushed::default();
        unflushed.add(vec![token(0), token(1)], BTreeMap::from([("t".into(), 2)]));
        let first = unflushed.since;
        unflushed.add(vec![token(2)], BTreeMap::from([("t".into(), 3)]));
        assert_eq!(unflushed.tokens.len(), 3);
        assert_eq!(unflushed.offsets, BTreeMap::from([("t".into(), 3)]));
        assert!(first.is_some());
        assert_eq!(unflushed.since, first);
    }
}
