//! The connector SDK: what a plugin implements, in the shape of Kafka Connect's API with
//! the deletion-aware stops of KIP-883 (connector) and KIP-901 (tasks).
//!
//! Guarantees the runtime gives every plugin instance:
//! - `start` is called once, before anything else;
//! - `stop` (one of [`Connector::stop_with`], [`SourceTask::stop_with`],
//!   [`SinkTask::stop_with`]) is called at most once, after `start` returned, and never
//!   while `poll`, `put` or `flush` runs: a pending `poll` is cancelled (its future
//!   dropped) before the stop begins;
//! - `connector_deleted` is `true` exactly when the operator deleted the connector;
//!   restart, reconfiguration, rebalance, pause, the STOPPED state, executor shutdown and
//!   control-plane failover all pass `false`;
//! - a stop is bounded by a timeout; an instance that overruns it is abandoned (never
//!   called again) and its output fenced;
//! - after stop the instance is dropped.
//!
//! Cleanup code must be idempotent and must tolerate a `start` that never ran or half ran:
//! cleanup is at least once, and may run on a fresh instance started in cleanup-only mode
//! on another executor ([`ConnectorContext::cleanup_only`], [`TaskContext::cleanup_only`]).

mod config_def;
mod connector;
mod context;
mod plugin;
mod record;
mod sink;
mod source;

pub use config_def::{
    CLEANUP_MAX_ATTEMPTS, CLEANUP_POLICY, CLEANUP_TIMEOUT_MS, CONNECTOR_CLASS, ConfigDef,
    ConfigKey, ConfigType, ConfigValue, DEFAULT_CLEANUP_MAX_ATTEMPTS, DEFAULT_CLEANUP_TIMEOUT_MS,
    Importance, REDACTED, TASKS_MAX, runtime_config_def,
};
pub use connector::Connector;
pub use context::{ConnectorContext, TaskContext};
pub use plugin::{Plugin, PluginKind, TaskFactory};
pub use record::{SinkRecord, SourceRecord};
pub use sink::SinkTask;
pub use source::SourceTask;

/// Config as given by the operator or produced by a connector: key to value, both text.
pub type ConfigMap = std::collections::BTreeMap<String, String>;

/// An error from plugin code; its text is reported to the operator as is.
pub type PluginError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Result of a plugin call.
pub type PluginResult<T> = Result<T, PluginError>;
