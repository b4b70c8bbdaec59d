//! A hosted task: its plugin instance, its work loop (poll → append → commit for a source,
//! fetch → put → flush → ack for a sink) and its one stop.
//!
//! The loops overlap their steps instead of waiting on one durable write at a time: a
//! source polls its next batch while the last one is appended, and commits offsets in the
//! background, coalesced (the latest per source partition wins); a sink fetches its next
//! batch while `put` runs and flushes once per several batches. What they never reorder:
//! an offset is committed only after the log acknowledged its record, and the log is
//! acknowledged only after the sink's `flush` returned (at least once, docs/architecture.md "Data
//! plane"). A graceful stop drains both (bounded by [`STOP_DRAIN_TIMEOUT_MS`]), so it
//! causes no duplicates.
//!
//! The loops live apart: [`source`] and [`sink`]. Every plugin call runs on the plugin
//! runtime, through the instance's slot (`crate::runtime::PluginSlot`); the loops, which
//! only await those calls and the record log, run on the executor's runtime.

mod active_topics;
mod records;
mod sink;
mod source;

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use wharf::ids::TaskKey;
use wharf::sdk::{Plugin, SinkTask, SourceTask, TaskContext, TaskFactory};

use super::instance::{Instance, InstanceId, InstanceState, Lifecycle, StartFacts, report_state};
use super::plugin::{CellStop, PluginCell};
use super::stop::StopCause;
use super::{Shared, StartTask, lock};
use crate::runtime::PluginSlot;
use wharf::task::{TaskKind, spawn};

pub use active_topics::ACTIVE_TOPIC_REPORT_INTERVAL;
pub use sink::{
    SINK_BATCH_MAX_RECORDS, SINK_FETCH_WAIT_MS, SINK_FLUSH_INTERVAL_MS, SINK_FLUSH_MAX_RECORDS,
};
pub use source::{OFFSET_COMMIT_INTERVAL_MS, OFFSET_COMMIT_RETRY_BACKOFF_MS};

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

/// The plugin instance of a task, by kind.
enum TaskPlugin {
    Source(PluginCell<Box<dyn SourceTask>>),
    Sink(PluginCell<Box<dyn SinkTask>>),
}

/// A task on this executor.
pub(crate) struct TaskInstance {
    key: TaskKey,
    life: Lifecycle,
    /// Incarnation of the connector this task runs for.
    incarnation: String,
    plugin: TaskPlugin,
    /// Runs every plugin call of this instance on the plugin runtime (the work loop runs
    /// on the executor's runtime).
    slot: PluginSlot,
    /// Cancelled when the stop begins: ends the work loop and any pending poll; the
    /// plugin sees it as `TaskContext::cancel`.
    cancel: CancellationToken,
    /// When the stop began and whether it is for a deletion (set just before `cancel`
    /// fires); bounds the drain.
    stop_began: OnceLock<(Instant, bool)>,
    work: Mutex<Option<JoinHandle<()>>>,
    shared: Arc<Shared>,
    /// The record log its loops use: the executor's, or (a Kafka connector with client
    /// overrides, KIP-458) one with this task's own clients.
    log: Arc<dyn crate::log::RecordLog>,
    /// Record counts of the work loop, for the metrics listener.
    pub stats: crate::counters::RecordStats,
    /// The connector's record pipeline (converters, transforms, `errors.*`), taken by
    /// the work loop when it starts.
    pipeline: Mutex<Option<crate::pipeline::Pipeline>>,
    /// What a sink reported through its errant record reporter, for the work loop.
    errant: records::Errant,
    /// Consumer positions a sink asked for ([`wharf::sdk::SinkSeek`]), for the work loop.
    seeks: sink::Seeks,
    /// The plugin's name (the class of a sink's reported records).
    plugin_name: String,
    /// A source's topic creation rules (KIP-158), from the connector config; `None`: the
    /// log creates an absent topic as it does by default.
    topic_creation: Option<wharf::topic_creation::TopicCreation>,
    /// Topics this source task already prepared (created or found).
    topics_prepared: Mutex<std::collections::HashSet<String>>,
    /// KIP-558: when each topic it used was last reported.
    active_topics: Mutex<active_topics::ActiveTopics>,
    /// A deletion's stop: the topics this task created that the ledger still holds
    /// (`StopTaskRequest.created_topics`).
    created_topics: Mutex<Vec<String>>,
    /// `cleanup.delete.created.topics` of the connector config.
    delete_created_topics: bool,
}

impl TaskInstance {
    /// This task's handle on its connector's ledger, for what the runtime records itself
    /// (the topics a source creates through topic creation).
    fn runtime_resources(&self) -> wharf::sdk::Resources {
        crate::host::ledger::RegistryLedger::resources(
            self.shared.registry.clone(),
            &self.key.connector,
            wharf::sdk::ResourceOwner::Task(self.key.task),
            self.life.generation,
            &self.incarnation,
        )
    }

    /// The ledger entry of `topic` created through topic creation, when the log records
    /// resources (Kafka).
    fn created_topic(&self, topic: &str) -> Option<wharf::sdk::Resource> {
        self.log.resource_locator().map(|locator| {
            wharf::sdk::Resource::created(wharf::sdk::ResourceKind::Topic, topic, locator)
        })
    }

    /// After a deletion's stop: removes (under `cleanup.delete.created.topics=true`) or
    /// records as kept (adopted) each topic the control plane named as created by this
    /// task, so that the deletion accounts for every one. A topic that existed before
    /// was never recorded as created, so it is never named here.
    async fn clean_up_created_topics(&self) -> Result<(), String> {
        let topics = std::mem::take(&mut *lock(&self.created_topics));
        if topics.is_empty() {
            return Ok(());
        }
        let resources = self.runtime_resources();
        for topic in topics {
            let Some(entry) = self.created_topic(&topic) else {
                return Ok(());
            };
            if self.delete_created_topics {
                self.log
                    .delete_topic(&topic)
                    .await
                    .map_err(|e| format!("cannot delete created topic {topic}: {e}"))?;
                resources.release(&entry).await.map_err(|e| e.to_string())?;
                tracing::info!(connector = %self.key.connector, task = self.key.task, topic = %topic,
                    "deleted the topic the connector created (cleanup.delete.created.topics=true)");
            } else {
                // Kept by the config's choice: recorded as adopted, which no deletion
                // removes and which the deletion's accounting does not wait for.
                let kept = entry.with_origin(wharf::sdk::Origin::Adopted);
                resources.intend(&kept).await.map_err(|e| e.to_string())?;
            }
        }
        Ok(())
    }

    /// Reports the topics of `used` that are due ([`active_topics::ActiveTopics::due`])
    /// as the connector's active topics (KIP-558).
    fn note_active_topics<'a>(&self, used: impl IntoIterator<Item = &'a str>) {
        let due = lock(&self.active_topics).due(used, Instant::now());
        if !due.is_empty() {
            self.shared
                .registry
                .report_active_topics(&self.key.connector, due);
        }
    }
}

impl Instance for TaskInstance {
    type Start = StartTask;
    type Key = TaskKey;
    const START: &'static str = "start task";

    fn start_facts(req: &StartTask) -> StartFacts<'_, TaskKey> {
        StartFacts {
            key: &req.task,
            assignment: &req.assignment,
            config: (&req.connector_config, "connector_config"),
        }
    }

    fn id_of(key: &TaskKey) -> InstanceId<'_> {
        InstanceId::Task(key)
    }

    fn new(plugin: &Plugin, req: &StartTask, shared: Arc<Shared>) -> Result<Self, String> {
        let kind = plugin.kind();
        let pipeline = crate::pipeline::Pipeline::new(
            &req.connector_config,
            kind,
            &shared.converter_defaults,
            &shared.transforms,
        )
        .map_err(|problems| {
            let named: Vec<String> = problems
                .iter()
                .map(|(k, why)| format!("{k}: {why}"))
                .collect();
            format!("invalid record pipeline config: {}", named.join("; "))
        })?;
        let plugin_name = plugin.name.clone();
        let log = shared
            .log
            .with_client_overrides(&req.connector_config)
            .map_err(|e| e.to_string())?
            .unwrap_or_else(|| shared.log.clone());
        let slot = shared.plugin_slot()?;
        let plugin = match &plugin.task {
            TaskFactory::Source(make) => TaskPlugin::Source(PluginCell::new(make())),
            TaskFactory::Sink(make) => TaskPlugin::Sink(PluginCell::new(make())),
        };
        Ok(Self {
            key: req.task.clone(),
            life: Lifecycle::new(&req.assignment),
            incarnation: req.assignment.incarnation.clone(),
            plugin,
            slot,
            cancel: CancellationToken::new(),
            stop_began: OnceLock::new(),
            work: Mutex::new(None),
            shared,
            log,
            stats: crate::counters::RecordStats::default(),
            pipeline: Mutex::new(Some(pipeline)),
            errant: records::Errant::default(),
            seeks: sink::Seeks::default(),
            plugin_name,
            topic_creation: topic_creation_of(req),
            topics_prepared: Mutex::default(),
            active_topics: Mutex::default(),
            created_topics: Mutex::default(),
            delete_created_topics: req
                .connector_config
                .get(wharf::sdk::CLEANUP_DELETE_CREATED_TOPICS)
                .is_some_and(|v| v.trim().eq_ignore_ascii_case("true")),
        })
    }

    fn id(&self) -> InstanceId<'_> {
        InstanceId::Task(&self.key)
    }

    fn life(&self) -> &Lifecycle {
        &self.life
    }

    fn incarnation(&self) -> &str {
        &self.incarnation
    }

    fn slot(&self) -> &PluginSlot {
        &self.slot
    }

    fn shared(&self) -> &Shared {
        &self.shared
    }

    fn resolve_references(
        req: &mut StartTask,
        providers: &crate::providers::ConfigProviders,
        hidden: &mut Vec<String>,
    ) -> Result<(), String> {
        req.connector_config = providers
            .resolve_config_hiding(&req.connector_config, hidden)?
            .0;
        req.task_config = providers.resolve_config_hiding(&req.task_config, hidden)?.0;
        Ok(())
    }

    fn configs(req: &StartTask) -> Vec<&wharf::sdk::ConfigMap> {
        vec![&req.connector_config, &req.task_config]
    }

    fn spawn_start(&self, req: &StartTask) -> JoinHandle<Result<(), String>> {
        let ctx = TaskContext {
            connector: req.task.connector.clone(),
            task: req.task.task,
            incarnation: req.assignment.incarnation.clone(),
            cleanup_only: req.assignment.cleanup_only,
            executor_id: self.shared.executor_id.clone(),
            // A plugin process converts records itself: it gets the executor's
            // converters where the connector names none, as a Connect worker's.
            connector_config: if self.shared.process_plugins.contains(&self.plugin_name) {
                self.shared.converter_defaults.fill(&req.connector_config)
            } else {
                req.connector_config.clone()
            },
            offsets: req.offsets.clone(),
            cancel: self.cancel.clone(),
            errant_reporter: match &self.plugin {
                TaskPlugin::Source(_) => None,
                TaskPlugin::Sink(_) => Some(records::errant_reporter(
                    lock(&self.pipeline)
                        .as_ref()
                        .map_or(crate::pipeline::Tolerance::None, |p| p.errors().tolerance),
                    self.errant.clone(),
                    self.plugin_name.clone(),
                )),
            },
            sink_seek: match &self.plugin {
                TaskPlugin::Source(_) => None,
                TaskPlugin::Sink(_) => Some(sink::seek(self.seeks.clone())),
            },
            resources: crate::host::ledger::RegistryLedger::resources(
                self.shared.registry.clone(),
                &req.task.connector,
                wharf::sdk::ResourceOwner::Task(req.task.task),
                req.assignment.generation,
                &req.assignment.incarnation,
            ),
        };
        let config = req.task_config.clone();
        match &self.plugin {
            TaskPlugin::Source(p) => p.spawn_start(&self.slot, ctx, config),
            TaskPlugin::Sink(p) => p.spawn_start(&self.slot, ctx, config),
        }
    }

    /// A running task that is not cleanup-only gets its work loop.
    fn after_start(task: &Arc<Self>, state: &InstanceState, req: &StartTask) {
        if *state != InstanceState::Running || task.life.cleanup_only {
            return;
        }
        let mut work = lock(&task.work);
        if task.cancel.is_cancelled() {
            return;
        }
        let me = task.clone();
        // The loop itself runs on the executor's runtime: it only awaits the plugin
        // calls it spawns on the plugin runtime, so it still sees the stop (and
        // fences the output) while a plugin call blocks its plugin worker.
        *work = Some(match &task.plugin {
            TaskPlugin::Source(p) => spawn(
                TaskKind::Awaited,
                "source task loop",
                me.source_loop(p.cell.clone()),
            ),
            TaskPlugin::Sink(p) => spawn(
                TaskKind::Awaited,
                "sink task loop",
                me.sink_loop(p.cell.clone(), topics_of(req), req.partition_share),
            ),
        });
    }

    /// Ends the work loop (and any pending poll): the loop drains what it may, bounded
    /// by [`STOP_DRAIN_TIMEOUT_MS`], and the stop waits for it.
    fn begin_stop(&self, cause: StopCause, started: Instant) -> Option<JoinHandle<()>> {
        let _ = self.stop_began.set((started, cause.connector_deleted()));
        self.cancel.cancel();
        lock(&self.work).take()
    }

    fn note_stop_request(&self, req: &super::StopRequest) {
        if req.cause.connector_deleted() {
            lock(&self.created_topics).clone_from(&req.created_topics);
        }
    }

    fn runtime_cleanup(&self) -> futures::future::BoxFuture<'_, Result<(), String>> {
        Box::pin(self.clean_up_created_topics())
    }

    fn plugin_stop(&self) -> (&dyn CellStop, &'static str) {
        match &self.plugin {
            TaskPlugin::Source(p) => (p, "start or poll to return"),
            TaskPlugin::Sink(p) => (p, "start, put or flush to return"),
        }
    }
}

impl TaskInstance {
    /// True for a source task, false for a sink task.
    pub fn is_source(&self) -> bool {
        match self.plugin {
            TaskPlugin::Source(_) => true,
            TaskPlugin::Sink(_) => false,
        }
    }

    fn fail(&self, error: String) {
        let error = self.life.redact(error);
        tracing::warn!(connector = %self.key.connector, task = self.key.task, generation = self.life.generation,
            error = %error, "task failed");
        let state = InstanceState::Failed(error);
        if self.life.set_state_unless_stopping(state.clone()) {
            report_state(self, &state);
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
}

/// The topic creation rules of the connector config. The control plane refused a config
/// whose rules are wrong; one that reaches an executor anyway is logged and ignored.
fn topic_creation_of(req: &StartTask) -> Option<wharf::topic_creation::TopicCreation> {
    match wharf::topic_creation::TopicCreation::from_config(&req.connector_config) {
        Ok(rules) => rules,
        Err((field, reason)) => {
            tracing::warn!(connector = %req.task.connector, task = req.task.task, field = %field,
                reason = %reason, "topic creation settings ignored");
            None
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
    if let Some(why) = super::validate::duplicate_topic(raw) {
        return Err(format!("configuration {TOPICS:?}: {why}"));
    }
    Ok(topics)
}
