use async_trait::async_trait;

use super::{ConfigMap, PluginResult, SourceRecord, TaskContext};

/// A source task: reads from an external system and returns records (Kafka Connect's
/// `SourceTask`).
#[async_trait]
pub trait SourceTask: Send {
    /// Starts the task with its task config. Called once, first. Resume from
    /// [`TaskContext::offset`]. In cleanup-only mode `poll` is never called.
    async fn start(&mut self, ctx: TaskContext, config: ConfigMap) -> PluginResult<()>;

    /// Returns the next batch of records, possibly empty, waiting for data if needed.
    /// Must be cancel-safe: when a stop arrives the runtime drops this future at an await
    /// point and then calls the stop.
    async fn poll(&mut self) -> PluginResult<Vec<SourceRecord>>;

    /// Called after the record log acknowledged records and their offsets were committed.
    async fn commit(&mut self) -> PluginResult<()> {
        Ok(())
    }

    /// The plain stop: release connections, keep external resources.
    async fn stop(&mut self) -> PluginResult<()> {
        Ok(())
    }

    /// The deletion-aware stop of KIP-901. `connector_deleted` is `true` only when the
    /// operator deleted the connector: then remove what this task provisioned. Runs before
    /// the connector instance's own `stop_with(true)`. The default calls
    /// [`SourceTask::stop`].
    async fn stop_with(&mut self, connector_deleted: bool) -> PluginResult<()> {
        let _ = connector_deleted;
        self.stop().await
    }
}
