use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;

use crate::{ConfigMap, PluginResult, SinkRecord, TaskContext, TopicPartition};

/// A sink task: writes records to an external system (Kafka Connect's `SinkTask`).
#[async_trait]
pub trait SinkTask: Send {
    /// Starts the task with its task config. Called once, first. In cleanup-only mode
    /// `put` and `flush` are never called and it MUST provision nothing.
    ///
    /// # Errors
    /// Fails the task (status FAILED with the text); a deletion still stops it.
    async fn start(&mut self, ctx: TaskContext, config: ConfigMap) -> PluginResult<()>;

    /// Writes a batch. The runtime acknowledges the records only after a later `flush`
    /// returned, so `put` may buffer.
    ///
    /// # Errors
    /// Fails the task; the records of the batch are not acknowledged.
    async fn put(&mut self, records: Vec<SinkRecord>) -> PluginResult<()>;

    /// Makes everything given to `put` so far durable: it MUST return only once the
    /// external system holds it (a broker confirm, a commit, an fsync), because the
    /// runtime then acknowledges those records and never delivers them again. `offsets`
    /// maps each topic-partition to the next offset to read (one past the last record
    /// given), as Kafka Connect's `SinkTask.flush(Map<TopicPartition, OffsetAndMetadata>)`.
    ///
    /// # Errors
    /// Fails the task; nothing since the last successful flush is acknowledged, so it is
    /// delivered again (at least once).
    async fn flush(&mut self, offsets: &BTreeMap<TopicPartition, u64>) -> PluginResult<()> {
        let _ = offsets;
        Ok(())
    }

    /// The plain stop: release connections, keep external resources.
    async fn stop(&mut self) -> PluginResult<()> {
        Ok(())
    }

    /// The deletion-aware stop of KIP-901. `connector_deleted` is `true` only when the
    /// operator deleted the connector: then it MUST remove what this task provisioned,
    /// succeed when it is gone, and leave everything else; with `false` it MUST leave
    /// every external resource. The default calls [`SinkTask::stop`].
    ///
    /// # Errors
    /// With `true`, marks this cleanup step failed; the runtime retries it.
    async fn stop_with(&mut self, connector_deleted: bool) -> PluginResult<()> {
        let _ = connector_deleted;
        self.stop().await
    }
}

/// Moves a sink task's consumer positions (Kafka Connect's `SinkTaskContext.offset`):
/// each topic-partition named is delivered again from the offset given, a rewind, or from
/// further on. The runtime applies it before the task's next `put`, after flushing and
/// acknowledging what was put. Given in [`TaskContext::sink_seek`](crate::TaskContext::sink_seek)
/// to sink tasks.
#[derive(Clone)]
pub struct SinkSeek {
    seek: SeekFn,
}

/// What a [`SinkSeek`] calls: per topic-partition, the next offset to deliver.
pub type SeekFn = Arc<dyn Fn(BTreeMap<TopicPartition, u64>) + Send + Sync>;

impl SinkSeek {
    /// A seek that calls `seek` (the runtime builds it).
    pub fn new(seek: SeekFn) -> Self {
        Self { seek }
    }

    /// Asks for each topic-partition of `offsets` to be delivered from its offset on.
    /// Later requests for the same partition replace earlier ones.
    pub fn seek(&self, offsets: BTreeMap<TopicPartition, u64>) {
        (self.seek)(offsets);
    }
}

impl std::fmt::Debug for SinkSeek {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SinkSeek").finish_non_exhaustive()
    }
}
