use async_trait::async_trait;

use crate::{ConfigMap, ConnectorContext, PluginResult};

/// A connector instance: validates config, provisions what its tasks share and splits the
/// work into task configs (Kafka Connect's `Connector`). One instance per connector runs
/// on one executor at a time; see the [crate docs](crate) for the lifecycle guarantees.
#[async_trait]
pub trait Connector: Send {
    /// Starts the instance with the connector's config (every key the operator set,
    /// secrets in clear). Called once, first. It SHOULD provision what the tasks share
    /// here, idempotently (a restart calls it again on a fresh instance). In cleanup-only
    /// mode ([`ConnectorContext::cleanup_only`]) it MUST only prepare what the following
    /// `stop_with(true)` needs, and provision nothing.
    ///
    /// # Errors
    /// Any error fails the connector (status FAILED with the error's text); a
    /// deletion still reaches this instance or a fresh cleanup-only one with
    /// `stop_with(true)`, so a half-done provisioning is cleaned up.
    async fn start(&mut self, ctx: ConnectorContext, config: ConfigMap) -> PluginResult<()>;

    /// Returns at most `max_tasks` task configs (possibly none), one per task to run;
    /// task `i` is started with element `i`. Called after `start`, again whenever the
    /// runtime reconfigures (a config update, a lower `tasks.max`,
    /// [`ConnectorContext::request_task_reconfiguration`]). The configs are stored and
    /// kept with a deletion, so a re-hosted cleanup gets the same ones.
    ///
    /// # Errors
    /// Fails the connector.
    async fn task_configs(&mut self, max_tasks: u32) -> PluginResult<Vec<ConfigMap>>;

    /// The plain stop: release connections and in-memory state, keep external resources.
    /// A plugin that provisions nothing outside implements only this.
    async fn stop(&mut self) -> PluginResult<()> {
        Ok(())
    }

    /// The deletion-aware stop of KIP-883. `connector_deleted` is `true` only when the
    /// operator deleted the connector: then it MUST remove what this incarnation
    /// provisioned (every task has already run its own `stop_with(true)`), succeed when
    /// it is already gone, and leave everything else. With `false` it MUST leave every
    /// external resource. The default calls [`Connector::stop`], so a plugin that does
    /// not care about deletion ignores it.
    ///
    /// # Errors
    /// With `true`, an error marks this cleanup step failed; the runtime retries it (on
    /// a fresh cleanup-only instance) up to `cleanup.max.attempts`.
    async fn stop_with(&mut self, connector_deleted: bool) -> PluginResult<()> {
        let _ = connector_deleted;
        self.stop().await
    }

    /// The external resources this connector (its instance and its tasks) would
    /// provision with `config`, found from the config alone (no I/O: called on a fresh
    /// instance, before `start`, when a connector is created or its config changes).
    /// The control plane refuses the create when another live connector already holds
    /// one of them (same kind, name and locator), naming that connector. List only what
    /// the connector provisions or takes for itself (its queue, its audit table), not
    /// what it merely reads and others may read too (a watched table). The origin is
    /// not used here. The default declares nothing.
    ///
    /// # Errors
    /// A config the declaration cannot be made from; the create is then refused with
    /// the text (the config checks usually find the same first).
    fn declared_resources(&self, config: &ConfigMap) -> PluginResult<Vec<crate::Resource>> {
        let _ = config;
        Ok(Vec::new())
    }
}
