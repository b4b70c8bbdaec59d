use async_trait::async_trait;

use super::{ConfigMap, ConnectorContext, PluginResult};

/// A connector instance: validates config, provisions what its tasks share and splits the
/// work into task configs (Kafka Connect's `Connector`).
#[async_trait]
pub trait Connector: Send {
    /// Starts the instance with the connector's config. Called once, first. In
    /// cleanup-only mode ([`ConnectorContext::cleanup_only`]) it should only prepare what
    /// the following `stop_with(true)` needs, not provision anything new.
    async fn start(&mut self, ctx: ConnectorContext, config: ConfigMap) -> PluginResult<()>;

    /// Returns at most `max_tasks` task configs (possibly none), one per task to run.
    async fn task_configs(&mut self, max_tasks: u32) -> PluginResult<Vec<ConfigMap>>;

    /// The plain stop: release connections and in-memory state, keep external resources.
    /// A plugin that provisions nothing outside implements only this.
    async fn stop(&mut self) -> PluginResult<()> {
        Ok(())
    }

    /// The deletion-aware stop of KIP-883. `connector_deleted` is `true` only when the
    /// operator deleted the connector: then remove what the connector provisioned (after
    /// every task has already run its own `stop_with(true)`). The default calls
    /// [`Connector::stop`], so a plugin that does not care about deletion ignores it.
    async fn stop_with(&mut self, connector_deleted: bool) -> PluginResult<()> {
        let _ = connector_deleted;
        self.stop().await
    }
}
