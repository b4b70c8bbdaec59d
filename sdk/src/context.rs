use std::collections::BTreeMap;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

/// What the runtime gives a connector instance at start.
#[derive(Clone)]
pub struct ConnectorContext {
    /// Connector name.
    pub connector: String,
    /// Identifies this incarnation: an opaque, non-empty text, the same on every executor
    /// and for the cleanup-only instances of a deletion; a connector deleted and created
    /// again under the same name gets a new one. A plugin SHOULD record it with what it
    /// provisions and check it before removing anything, so that a late cleanup of a
    /// deleted incarnation never removes what its successor made.
    pub incarnation: String,
    /// True when started only to run cleanup: the next call is `stop_with(true)`.
    pub cleanup_only: bool,
    /// Id of the executor hosting this instance.
    pub executor_id: String,
    reconfigure: Arc<dyn Fn() + Send + Sync>,
    raise: Option<Arc<dyn Fn(String) + Send + Sync>>,
    resources: crate::Resources,
}

impl ConnectorContext {
    /// Builds a context; `reconfigure` is called by
    /// [`ConnectorContext::request_task_reconfiguration`].
    pub fn new(
        connector: impl Into<String>,
        incarnation: impl Into<String>,
        cleanup_only: bool,
        executor_id: impl Into<String>,
        reconfigure: Arc<dyn Fn() + Send + Sync>,
    ) -> Self {
        Self {
            connector: connector.into(),
            incarnation: incarnation.into(),
            cleanup_only,
            executor_id: executor_id.into(),
            reconfigure,
            raise: None,
            resources: crate::Resources::detached(crate::ResourceOwner::Connector),
        }
    }

    /// Sets what [`ConnectorContext::raise_error`] calls (the runtime's side).
    pub fn with_raise_error(mut self, raise: Arc<dyn Fn(String) + Send + Sync>) -> Self {
        self.raise = Some(raise);
        self
    }

    /// Fails the connector instance outside a call, as Kafka Connect's
    /// `ConnectorContext.raiseError`: its status becomes FAILED with `error`'s text
    /// (never a secret), unless a stop already began. For a failure found by a background
    /// reader or a connection's callback, when no call is coming to return it from. A
    /// context built without a runtime's hook (a test's) ignores it.
    pub fn raise_error(&self, error: impl std::fmt::Display) {
        if let Some(raise) = &self.raise {
            raise(error.to_string());
        }
    }

    /// The same context recording its resources into `resources` (the executor gives
    /// every instance a handle on its connector's ledger; [`ConnectorContext::new`]
    /// starts with a detached in-memory one).
    #[must_use]
    pub fn with_resources(mut self, resources: crate::Resources) -> Self {
        self.resources = resources;
        self
    }

    /// This instance's handle on the connector's resource ledger: declare each external
    /// resource before creating it, release it once a deletion-aware stop removed it
    /// (docs/resources.md).
    pub fn resources(&self) -> &crate::Resources {
        &self.resources
    }

    /// Asks the control plane to call `task_configs` again (for example because the
    /// watched tables changed), as Kafka Connect's `requestTaskReconfiguration`.
    pub fn request_task_reconfiguration(&self) {
        (self.reconfigure)();
    }
}

impl std::fmt::Debug for ConnectorContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectorContext")
            .field("connector", &self.connector)
            .field("incarnation", &self.incarnation)
            .field("cleanup_only", &self.cleanup_only)
            .field("executor_id", &self.executor_id)
            .finish_non_exhaustive()
    }
}

/// What the runtime gives a task at start.
#[derive(Debug, Clone)]
pub struct TaskContext {
    /// Connector name.
    pub connector: String,
    /// Task index, from 0: the position of this task's config in
    /// [`Connector::task_configs`](crate::Connector::task_configs). Name per-task
    /// resources with it.
    pub task: u32,
    /// Identifies the connector's incarnation (see [`ConnectorContext::incarnation`]):
    /// check it before removing a per-task resource.
    pub incarnation: String,
    /// True when started only to run cleanup: no poll or put follows, only
    /// `stop_with(true)`.
    pub cleanup_only: bool,
    /// Id of the executor hosting this task.
    pub executor_id: String,
    /// The connector's full config (the task config holds only the task's share).
    pub connector_config: crate::ConfigMap,
    /// Last committed source offsets, keyed by the canonical JSON text of the partition.
    pub offsets: BTreeMap<String, serde_json::Value>,
    /// Cancelled when the task is being stopped; long waits inside the plugin can select
    /// on it.
    pub cancel: CancellationToken,
    /// A sink task's errant record reporter (Kafka Connect's
    /// `SinkTaskContext.errantRecordReporter`, KIP-610); `None` for a source task.
    pub errant_reporter: Option<crate::ErrantRecordReporter>,
    /// A sink task's way to move its consumer positions (Kafka Connect's
    /// `SinkTaskContext.offset`); `None` for a source task.
    pub sink_seek: Option<crate::SinkSeek>,
    /// This task's handle on the connector's resource ledger (owner: this task): declare
    /// each per-task resource before creating it, release it once `stop_with(true)`
    /// removed it (docs/resources.md).
    pub resources: crate::Resources,
}

impl TaskContext {
    /// Last committed offset of a source partition (Kafka Connect's
    /// `OffsetStorageReader.offset`), or `None` before the first commit.
    pub fn offset(&self, partition: &serde_json::Value) -> Option<&serde_json::Value> {
        self.offsets.get(&partition.to_string())
    }
}
