//! A hosted connector instance: start, task_configs and its one stop. A sink connector
//! stopped with `connector_deleted = true` also deletes its log consumer.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Mutex as AsyncMutex, OwnedMutexGuard};
use tokio::time::Instant;
use wharf::pb::v1 as pb;
use wharf::sdk::{ConfigMap, Connector, ConnectorContext, Plugin, PluginKind};

use super::instance::{
    Dropped, InstanceState, Lifecycle, StopOutcome, StopRecord, StopResult, await_plugin_stop,
    timed_out_text,
};
use super::task::sink_consumer_name;
use super::{HostError, Shared, StartConnector, lock, panic_text};
use wharf::task::{TaskKind, spawn};

type ConnectorCell = Arc<AsyncMutex<Box<dyn Connector>>>;

pub(crate) struct ConnectorInstance {
    name: String,
    kind: PluginKind,
    pub life: Lifecycle,
    plugin: ConnectorCell,
    /// Plugin lock held from creation until `start` ran, so a stop waits for the start.
    start_guard: Mutex<Option<OwnedMutexGuard<Box<dyn Connector>>>>,
    shared: Arc<Shared>,
}

impl ConnectorInstance {
    pub fn new(plugin: &Plugin, req: &StartConnector, shared: Arc<Shared>) -> Self {
        let cell: ConnectorCell = Arc::new(AsyncMutex::new((plugin.connector)()));
        let guard = cell.clone().try_lock_owned().ok();
        Self {
            name: req.connector.clone(),
            kind: plugin.kind(),
            life: Lifecycle::new(req.generation, req.cleanup_only),
            plugin: cell,
            start_guard: Mutex::new(guard),
            shared,
        }
    }

    fn report(&self, state: &InstanceState) {
        let (state, error) = state.to_wire();
        self.shared
            .registry
            .report_connector(&self.name, self.life.generation, state, error);
    }

    pub async fn start(self: Arc<Self>, req: StartConnector) -> InstanceState {
        let registry = self.shared.registry.clone();
        let (name, generation) = (req.connector.clone(), req.generation);
        let reconfigure: Arc<dyn Fn() + Send + Sync> =
            Arc::new(move || registry.request_task_reconfiguration(&name, generation));
        let ctx = ConnectorContext::new(
            req.connector.clone(),
            req.incarnation.clone(),
            req.cleanup_only,
            self.shared.executor_id.clone(),
            reconfigure,
        );
        let guard = lock(&self.start_guard).take();
        let cell = self.plugin.clone();
        let config = req.config.clone();
        let result = spawn(TaskKind::Awaited, "connector start", async move {
            let mut g = match guard {
                Some(g) => g,
                None => cell.lock_owned().await,
            };
            g.start(ctx, config).await.map_err(|e| e.to_string())
        })
        .await
        .unwrap_or_else(|e| Err(panic_text(e)));
        let state = match result {
            Ok(()) if req.paused => InstanceState::Paused,
            Ok(()) => InstanceState::Running,
            Err(e) => InstanceState::Failed(e),
        };
        tracing::info!(connector = %self.name, generation = self.life.generation,
            cleanup_only = self.life.cleanup_only, state = ?state, "connector started");
        if !self.life.set_state_unless_stopping(state.clone()) {
            return self.life.state();
        }
        self.report(&state);
        state
    }

    /// Runs the plugin's `task_configs`.
    pub async fn task_configs(&self, max_tasks: u32) -> Result<Vec<ConfigMap>, HostError> {
        let state = self.life.state();
        if !matches!(state, InstanceState::Running | InstanceState::Paused)
            || self.life.stop_claimed()
        {
            return Err(HostError::NotRunning {
                what: format!("connector {}", self.name),
                state: format!("{state:?}"),
            });
        }
        let cell = self.plugin.clone();
        spawn(TaskKind::Awaited, "connector task_configs", async move {
            cell.lock_owned()
                .await
                .task_configs(max_tasks)
                .await
                .map_err(|e| e.to_string())
        })
        .await
        .unwrap_or_else(|e| Err(panic_text(e)))
        .map(|mut configs| {
            configs.truncate(max_tasks as usize);
            configs
        })
        .map_err(|error| HostError::TaskConfigsFailed {
            connector: self.name.clone(),
            error,
        })
    }

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
        let (mut outcome, mut error) =
            match tokio::time::timeout_at(deadline, self.plugin.clone().lock_owned()).await {
                Err(_) => (
                    StopOutcome::TimedOut,
                    Some(timed_out_text(timeout, "start or task_configs to return")),
                ),
                Ok(mut g) => {
                    let handle = spawn(TaskKind::Awaited, "connector stop", async move {
                        let result = g
                            .stop_with(connector_deleted)
                            .await
                            .map_err(|e| e.to_string());
                        // After stop the instance is dropped (SDK guarantee).
                        *g = Box::new(Dropped);
                        result
                    });
                    await_plugin_stop(handle, deadline, timeout).await
                }
            };
        if connector_deleted && outcome == StopOutcome::Stopped && self.kind == PluginKind::Sink {
            let consumer = sink_consumer_name(&self.name);
            if let Err(e) = self.shared.log.delete_consumer(&consumer).await {
                outcome = StopOutcome::Failed;
                error = Some(format!("cannot delete log consumer {consumer}: {e}"));
            }
        }
        let elapsed = started.elapsed();
        self.life.finish(outcome, &error);
        tracing::info!(connector = %self.name, generation = self.life.generation, connector_deleted,
            outcome = ?outcome, elapsed_ms = elapsed.as_millis() as u64, error = ?error, "connector stopped");
        match outcome {
            StopOutcome::Stopped if self_initiated => {
                self.shared.registry.report_connector(
                    &self.name,
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
