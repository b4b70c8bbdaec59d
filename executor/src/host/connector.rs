//! A hosted connector instance: start, task_configs and its one stop. A sink connector
//! stopped with `connector_deleted = true` also deletes its log consumer.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use wharf::pb::v1 as pb;
use wharf::sdk::{ConfigMap, Connector, ConnectorContext, Plugin, PluginKind};

use super::instance::{
    InstanceState, Lifecycle, PluginCell, StopOutcome, StopRecord, StopResult, await_plugin_stop,
    timed_out_text,
};
use super::task::sink_consumer_name;
use super::{HostError, Shared, StartConnector, panic_text};
use crate::runtime::PluginSlot;

pub(crate) struct ConnectorInstance {
    name: String,
    kind: PluginKind,
    pub life: Lifecycle,
    /// Incarnation of the connector this instance runs for.
    pub incarnation: String,
    plugin: PluginCell<Box<dyn Connector>>,
    /// Runs every plugin call of this instance on the plugin runtime.
    slot: PluginSlot,
    shared: Arc<Shared>,
}

impl ConnectorInstance {
    /// # Errors
    /// No plugin runtime could take it (text of the cause).
    pub fn new(plugin: &Plugin, req: &StartConnector, shared: Arc<Shared>) -> Result<Self, String> {
        let slot = shared
            .pool
            .slot()
            .map_err(|e| format!("cannot start a fresh plugin runtime: {e}"))?;
        Ok(Self {
            name: req.connector.clone(),
            kind: plugin.kind(),
            life: Lifecycle::new(req.generation, req.cleanup_only),
            incarnation: req.incarnation.clone(),
            plugin: PluginCell::new((plugin.connector)()),
            slot,
            shared,
        })
    }

    /// True while abandoned: the stop timed out and the plugin's call has not returned.
    pub fn abandoned(&self) -> bool {
        self.life.abandoned() && !self.slot.exited()
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
        let result = self
            .plugin
            .spawn_start(&self.slot, ctx, req.config.clone())
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
        let cell = self.plugin.cell.clone();
        self.slot
            .spawn("connector task_configs", async move {
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
        let what = format!("connector {}", self.name);
        let mut flag = connector_deleted;
        let (mut outcome, mut error) = match self
            .plugin
            .spawn_stop(
                &self.slot,
                || self.shared.confirm_deleted(connector_deleted, &what),
                deadline,
            )
            .await
        {
            None => (
                StopOutcome::TimedOut,
                Some(timed_out_text(timeout, "start or task_configs to return")),
            ),
            Some((confirmed, handle)) => {
                flag = confirmed;
                await_plugin_stop(handle, deadline, timeout).await
            }
        };
        let connector_deleted = flag;
        self.plugin.end_calls(&self.slot, outcome);
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
            outcome = ?outcome, elapsed_ms = elapsed.as_millis() as u64, error = error.as_deref(), "connector stopped");
        match super::instance::after_stop(outcome, self_initiated) {
            super::instance::AfterStop::ReportUnassigned => {
                self.shared.registry.report_connector(
                    &self.name,
                    self.life.generation,
                    pb::State::Unassigned,
                    String::new(),
                );
            }
            super::instance::AfterStop::Nothing => {}
            super::instance::AfterStop::ReportState => self.report(&self.life.state()),
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
