//! A hosted connector instance: start, task_configs and its one stop. A sink connector
//! stopped with `connector_deleted = true` also deletes its log consumer.

use std::sync::{Arc, Mutex, OnceLock, Weak};

use wharf::sdk::{ConfigMap, Connector, ConnectorContext, Plugin, PluginKind};

use super::instance::{Instance, InstanceId, InstanceState, Lifecycle, StartFacts, report_state};
use super::plugin::{CellStop, PluginCell};
use super::{HostError, Shared, StartConnector, lock, panic_text};
use crate::runtime::PluginSlot;

/// A connector instance on this executor.
pub(crate) struct ConnectorInstance {
    name: String,
    kind: PluginKind,
    life: Lifecycle,
    /// Incarnation of the connector this instance runs for.
    incarnation: String,
    plugin: PluginCell<Box<dyn Connector>>,
    /// The config as the control plane sent it, references unresolved: what task
    /// configs get back in place of resolved values.
    raw_config: ConfigMap,
    /// Runs every plugin call of this instance on the plugin runtime.
    slot: PluginSlot,
    shared: Arc<Shared>,
    /// Where the plugin's `ConnectorContext::raise_error` lands.
    raised: Arc<RaiseTarget>,
}

/// Where a connector's `raise_error` lands: its instance once its start returned, before
/// that a slot the start's end reads.
#[derive(Default)]
struct RaiseTarget {
    instance: OnceLock<Weak<ConnectorInstance>>,
    early: Mutex<Option<String>>,
}

impl RaiseTarget {
    fn raise(&self, error: String) {
        match self.instance.get().and_then(Weak::upgrade) {
            Some(instance) => instance.fail_raised(error),
            None => *lock(&self.early) = Some(error),
        }
    }
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
            raw_config: req.config.clone(),
            slot,
            shared,
            raised: Arc::default(),
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

    fn resolve_references(
        req: &mut StartConnector,
        providers: &crate::providers::ConfigProviders,
        hidden: &mut Vec<String>,
    ) -> Result<(), String> {
        req.config = providers.resolve_config_hiding(&req.config, hidden)?.0;
        Ok(())
    }

    fn configs(req: &StartConnector) -> Vec<&ConfigMap> {
        vec![&req.config]
    }

    fn spawn_start(&self, req: &StartConnector) -> tokio::task::JoinHandle<Result<(), String>> {
        let registry = self.shared.registry.clone();
        let (name, generation) = (req.connector.clone(), req.assignment.generation);
        let reconfigure: Arc<dyn Fn() + Send + Sync> =
            Arc::new(move || registry.request_task_reconfiguration(&name, generation));
        let target = self.raised.clone();
        let ctx = ConnectorContext::new(
            req.connector.clone(),
            req.assignment.incarnation.clone(),
            req.assignment.cleanup_only,
            self.shared.executor_id.clone(),
            reconfigure,
        )
        .with_raise_error(Arc::new(move |error| target.raise(error)))
        .with_resources(super::ledger::RegistryLedger::resources(
            self.shared.registry.clone(),
            &req.connector,
            wharf::sdk::ResourceOwner::Connector,
            req.assignment.generation,
            &req.assignment.incarnation,
        ));
        let started = self.plugin.spawn_start(&self.slot, ctx, req.config.clone());
        let Some(group) = self.consumer_group() else {
            return started;
        };
        // The sink's consumer group is a created resource of the connector instance: its
        // deletion deletes it (below), keep_resources and force leave it as an orphan.
        let resources = self.runtime_resources();
        tokio::spawn(async move {
            let recorded = async {
                resources.intend(&group).await?;
                resources.confirm(&group).await
            }
            .await;
            let started = started.await.map_err(panic_text)?;
            recorded.map_err(|e| e.to_string())?;
            started
        })
    }

    fn after_start(instance: &Arc<Self>, _state: &InstanceState, _req: &StartConnector) {
        let _ = instance.raised.instance.set(Arc::downgrade(instance));
        let early = lock(&instance.raised.early).take();
        if let Some(error) = early {
            instance.fail_raised(error);
        }
    }

    fn plugin_stop(&self) -> (&dyn CellStop, &'static str) {
        (&self.plugin, "start or task_configs to return")
    }

    fn consumer_deleted_with_it(&self) -> Option<String> {
        (self.kind == PluginKind::Sink).then(|| self.shared.log.sink_consumer_name(&self.name))
    }

    fn runtime_cleanup(&self) -> futures::future::BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            // Deleted by the stop already (`consumer_deleted_with_it`): released here.
            let Some(group) = self.consumer_group() else {
                return Ok(());
            };
            self.runtime_resources()
                .release(&group)
                .await
                .map_err(|e| e.to_string())
        })
    }
}

impl ConnectorInstance {
    /// A sink's consumer group as a ledger entry, when the log records its resources
    /// (Kafka: `connect-<name>` at the cluster's brokers).
    fn consumer_group(&self) -> Option<wharf::sdk::Resource> {
        let name = self.consumer_deleted_with_it()?;
        let locator = self.shared.log.resource_locator()?;
        Some(wharf::sdk::Resource::created(
            wharf::sdk::ResourceKind::ConsumerGroup,
            name,
            locator,
        ))
    }

    /// This instance's handle on its connector's ledger, for what the runtime records.
    fn runtime_resources(&self) -> wharf::sdk::Resources {
        super::ledger::RegistryLedger::resources(
            self.shared.registry.clone(),
            &self.name,
            wharf::sdk::ResourceOwner::Connector,
            self.life.generation,
            &self.incarnation,
        )
    }
}

impl ConnectorInstance {
    /// Fails a running or paused instance with an error its plugin raised outside a call
    /// (`ConnectorContext::raise_error`), and reports it; a stop that began wins.
    fn fail_raised(&self, error: String) {
        if !matches!(
            self.life.state(),
            InstanceState::Running | InstanceState::Paused
        ) {
            return;
        }
        let state = InstanceState::Failed(self.life.redact(error));
        if self.life.set_state_unless_stopping(state.clone()) {
            tracing::warn!(connector = %self.name, generation = self.life.generation,
                state = ?state, "connector failed: its plugin raised an error");
            report_state(self, &state);
        }
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
                    .into_iter()
                    .map(|c| crate::providers::reverse_task_config(&self.raw_config, c))
                    .collect()
            })
            .map_err(|error| HostError::TaskConfigsFailed {
                connector: self.name.clone(),
                error,
            })
    }
}
