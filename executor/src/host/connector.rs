//! A hosted connector instance: start, task_configs and its one stop. A sink connector
//! stopped with `connector_deleted = true` also deletes its log consumer.

use std::sync::Arc;

use wharf::sdk::{ConfigMap, Connector, ConnectorContext, Plugin, PluginKind};

use super::instance::{Instance, InstanceId, InstanceState, Lifecycle, StartFacts};
use super::plugin::{CellStop, PluginCell};
use super::{HostError, Shared, StartConnector, panic_text};
use crate::runtime::PluginSlot;

/// A connector instance on this executor.
pub(crate) struct ConnectorInstance {
    name: String,
    kind: PluginKind,
    life: Lifecycle,
    /// Incarnation of the connector this instance runs for.
    incarnation: String,
    plugin: PluginCell<Box<dyn Connector>>,
    /// Runs every plugin call of this instance on the plugin runtime.
    slot: PluginSlot,
    shared: Arc<Shared>,
}

impl Instance for ConnectorInstance {
    type Start = StartConnector;
    type Key = String;
    const START: &'static str = "start connector";

    fn start_facts(req: &StartConnector) -> StartFacts<'_, String> {
        StartFacts {
            key: &req.connector,
            assignment: &req.assignment,
            config: (&req.config, "config"),
        }
    }

    fn id_of(key: &String) -> InstanceId<'_> {
        InstanceId::Connector(key)
    }

    fn new(plugin: &Plugin, req: &StartConnector, shared: Arc<Shared>) -> Result<Self, String> {
        let slot = shared.plugin_slot()?;
        Ok(Self {
            name: req.connector.clone(),
            kind: plugin.kind(),
            life: Lifecycle::new(&req.assignment),
            incarnation: req.assignment.incarnation.clone(),
            plugin: PluginCell::new((plugin.connector)()),
            slot,
            shared,
        })
    }

    fn id(&self) -> InstanceId<'_> {
        InstanceId::Connector(&self.name)
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

    fn spawn_start(&self, req: &StartConnector) -> tokio::task::JoinHandle<Result<(), String>> {
        let registry = self.shared.registry.clone();
        let (name, generation) = (req.connector.clone(), req.assignment.generation);
        let reconfigure: Arc<dyn Fn() + Send + Sync> =
            Arc::new(move || registry.request_task_reconfiguration(&name, generation));
        let ctx = ConnectorContext::new(
            req.connector.clone(),
            req.assignment.incarnation.clone(),
            req.assignment.cleanup_only,
            self.shared.executor_id.clone(),
            reconfigure,
        );
        self.plugin.spawn_start(&self.slot, ctx, req.config.clone())
    }

    fn plugin_stop(&self) -> (&dyn CellStop, &'static str) {
        (&self.plugin, "start or task_configs to return")
    }

    fn consumer_deleted_with_it(&self) -> Option<String> {
        (self.kind == PluginKind::Sink).then(|| self.shared.log.sink_consumer_name(&self.name))
    }
}

impl ConnectorInstance {
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
}
