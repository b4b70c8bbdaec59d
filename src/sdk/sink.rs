use std::collections::BTreeMap;

use async_trait::async_trait;

use super::{ConfigMap, PluginResult, SinkRecord, TaskContext};

/// A sink task: writes records to an external system (Kafka Connect's `SinkTask`).
#[async_trait]
pub trait SinkTask: Send {
    /// Starts the task with its task config. Called once, first. In cleanup-only mode
    /// `put` and `flush` are never called.
    async fn start(&mut self, ctx: TaskContext, config: ConfigMap) -> PluginResult<()>;

    /// Writes a batch. The runtime acknowledges the records only after a later `flush`
    /// returned, so `put` may buffer.
    async fn put(&mut self, records: Vec<SinkRecord>) -> PluginResult<()>;

    /// Makes everything given to `put` so far durable. `offsets` maps each topic to the
    /// next position to read (one past the last record given).
    async fn flush(&mut self, offsets: &BTreeMap<String, u64>) -> PluginResult<()> {
        let _ = offsets;
        Ok(())
    }

    /// The plain stop: release connections, keep external resources.
    async fn stop(&mut self) -> PluginResult<()> {
        Ok(())
    }

    /// The deletion-aware stop of KIP-901. `connector_deleted` is `true` only when the
    /// operator deleted the connector: then remove what this task provisioned. The
    /// default calls [`SinkTask::stop`].
    async fn stop_with(&mut self, connector_deleted: bool) -> PluginResult<()> {
        let _ = connector_deleted;
        self.stop().await
    }
}
