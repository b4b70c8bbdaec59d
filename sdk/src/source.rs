use async_trait::async_trait;

use crate::{ConfigMap, PluginResult, SourceRecord, TaskContext};

/// A source task: reads from an external system and returns records (Kafka Connect's
/// `SourceTask`).
#[async_trait]
pub trait SourceTask: Send {
    /// Starts the task with its task config (an element of
    /// [`Connector::task_configs`](crate::Connector::task_configs)). Called once, first.
    /// It SHOULD resume from [`TaskContext::offset`]. In cleanup-only mode `poll` is never
    /// called and it MUST provision nothing.
    ///
    /// # Errors
    /// Fails the task (status FAILED with the text); a deletion still stops it.
    async fn start(&mut self, ctx: TaskContext, config: ConfigMap) -> PluginResult<()>;

    /// Returns the next batch of records, possibly empty, waiting for data if needed
    /// (it SHOULD wait rather than return empty batches in a busy loop). It MUST be
    /// cancel-safe: when a stop arrives the runtime drops this future at an await point
    /// and then calls the stop, so state changes belong after the last await.
    ///
    /// # Errors
    /// Fails the task.
    async fn poll(&mut self) -> PluginResult<Vec<SourceRecord>>;

    /// Called after the record log acknowledged records and their offsets were
    /// committed (delivery is at least once: records after the last commit may be
    /// polled again after a restart).
    async fn commit(&mut self) -> PluginResult<()> {
        Ok(())
    }

    /// The plain stop: release connections, keep external resources.
    async fn stop(&mut self) -> PluginResult<()> {
        Ok(())
    }

    /// The deletion-aware stop of KIP-901. `connector_deleted` is `true` only when the
    /// operator deleted the connector: then it MUST remove what this task provisioned
    /// (per-task resources; shared ones belong to the connector), succeed when they are
    /// gone, and leave everything else. Runs before the connector instance's own
    /// `stop_with(true)`. With `false` it MUST leave every external resource. The default
    /// calls [`SourceTask::stop`].
    ///
    /// # Errors
    /// With `true`, marks this cleanup step failed; the runtime retries it.
    async fn stop_with(&mut self, connector_deleted: bool) -> PluginResult<()> {
        let _ = connector_deleted;
        self.stop().await
    }
}
