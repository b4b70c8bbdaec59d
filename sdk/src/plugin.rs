use std::sync::Arc;

use crate::{ConfigDef, Connector, SinkTask, SourceTask};

/// Whether a plugin is a source or a sink.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PluginKind {
    /// Reads an external system into topics.
    Source,
    /// Writes topics into an external system.
    Sink,
}

/// Makes task instances of a plugin.
#[derive(Clone)]
pub enum TaskFactory {
    /// Source tasks.
    Source(Arc<dyn Fn() -> Box<dyn SourceTask> + Send + Sync>),
    /// Sink tasks.
    Sink(Arc<dyn Fn() -> Box<dyn SinkTask> + Send + Sync>),
}

/// A connector plugin: its identity, its config keys and factories for fresh instances.
/// An executor advertises its plugins (name, version, kind, config keys) when it
/// registers.
#[derive(Clone)]
pub struct Plugin {
    /// Name used as `connector.class`, for example `file-source`.
    pub name: String,
    /// Plugin version.
    pub version: String,
    /// The plugin's own config keys (the runtime's are in
    /// [`runtime_config_def`](crate::runtime_config_def)).
    pub config_def: ConfigDef,
    /// Makes a fresh connector instance.
    pub connector: Arc<dyn Fn() -> Box<dyn Connector> + Send + Sync>,
    /// Makes fresh task instances.
    pub task: TaskFactory,
}

impl Plugin {
    /// Source or sink, from the task factory.
    pub fn kind(&self) -> PluginKind {
        match self.task {
            TaskFactory::Source(_) => PluginKind::Source,
            TaskFactory::Sink(_) => PluginKind::Sink,
        }
    }
}

impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plugin")
            .field("name", &self.name)
            .field("version", &self.version)
            .field("kind", &self.kind())
            .finish_non_exhaustive()
    }
}
