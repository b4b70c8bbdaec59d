//! The connector SDK: what a plugin implements, in the shape of Kafka Connect's API with
//! the deletion-aware stops of KIP-883 (connector) and KIP-901 (tasks). This crate is
//! the one a connector author depends on (semver-relevant changes are listed in
//! CHANGELOG.md): the traits, the records, the config definitions and the runtime's own
//! config keys ([`CONNECTOR_CLASS`], ...), the contexts an instance is started with, the
//! [`Plugin`] an executor registers, and the shared [`ids`]. It links no server code (no
//! TLS, gRPC, HTTP or telemetry crates); an executor that offers a plugin is built with
//! `wharf_executor::Executor::builder()`. docs/connector-guide.md walks through writing a
//! source and a sink, and `wharf-testkit` checks a plugin against the contract below.
//!
//! # Guarantees the runtime gives every plugin instance
//! - `start` is called once, before anything else;
//! - `stop` (one of [`Connector::stop_with`], [`SourceTask::stop_with`],
//!   [`SinkTask::stop_with`]) is called at most once per instance, after `start`
//!   returned (also when `start` failed), and never while `poll`, `put` or `flush` runs:
//!   a pending `poll` is cancelled (its future dropped) before the stop begins;
//! - `connector_deleted` is `true` exactly when the operator deleted the connector;
//!   restart, reconfiguration, rebalance, pause, the STOPPED state, executor shutdown,
//!   control-plane failover and a delete with `keep_resources` all pass `false`;
//! - on deletion every task gets its `stop_with(true)` before the connector instance
//!   gets its own, so the connector removes what the tasks shared;
//! - a stop is bounded by a timeout (`cleanup.timeout.ms` for deletions); an instance
//!   that overruns it is abandoned (never called again) and its output fenced;
//! - after stop the instance is dropped.
//!
//! # What a plugin MUST do
//! - remove external resources only in `stop_with(true)`, and only those this connector
//!   incarnation provisioned ([`ConnectorContext::incarnation`]): never a resource the
//!   user made, never one of another connector or of a later incarnation with the same
//!   name;
//! - make cleanup idempotent and tolerant of a `start` that never ran or half ran:
//!   cleanup is at least once, and may run on a fresh instance started in cleanup-only
//!   mode on another executor ([`ConnectorContext::cleanup_only`],
//!   [`TaskContext::cleanup_only`]), with the last config;
//! - provision nothing in a cleanup-only start;
//! - name external resources from the connector name (and config) so that a fresh
//!   instance on any executor finds them again;
//! - record each external resource in the connector's resource ledger
//!   ([`ConnectorContext::resources`], [`TaskContext::resources`]): the intent before
//!   creating it, the confirmation after, the release in `stop_with(true)` once it is
//!   removed; a deletion finishes as cleaned only when every created entry is released
//!   or found absent (docs/resources.md). What a second connector must not take is
//!   declared from the config ([`Connector::declared_resources`]).
//!
//! # Reporting a failure
//! A plugin reports a failure by returning it: every call returns a [`PluginResult`],
//! and an `Err` is the one way to say "this instance has failed". The runtime then
//! - marks the instance FAILED: the connector for an error of [`Connector::start`] or
//!   [`Connector::task_configs`], the task for an error of `start`, `poll`, `commit`,
//!   `put` or `flush` (its other tasks and the connector keep running);
//! - shows the error's `Display` text verbatim as the instance's status: in
//!   `GetConnectorStatus`, `connector.error` or `tasks[i].status.error`; in the Kafka
//!   Connect REST gateway, the `trace` field of `GET /connectors/{name}/status` (Kafka
//!   Connect puts a Java stack trace there; Wharf puts the message);
//! - for a sink, acknowledges nothing since the last successful `flush` (those records
//!   are delivered again after a restart); for a source, commits no offset of records
//!   not yet acknowledged;
//! - for a failed `stop_with(true)`, marks that cleanup step failed and retries it (on a
//!   fresh cleanup-only instance) up to `cleanup.max.attempts`.
//!
//! The text MUST name what failed and where (`invalid config queue: ...`, `RabbitMQ
//! returned a record as unroutable ...`), and MUST NOT contain secrets. A failure found
//! outside a call (a background reader, a connection's error callback) SHOULD be kept
//! by the plugin and returned from its next call (`poll` is called continuously; a sink
//! gets its next `put` or `flush` when records arrive). A failure the plugin can ride out
//! (a broker restart) SHOULD be retried inside the call, within a bound the operator can
//! configure, rather than reported. A plugin SHOULD NOT panic: a panic is treated as a
//! failed call with the panic message as the text. `rabbitmq-sink`
//! (`wharf_connectors::rabbitmq_sink`) shows both paths: a lost connection is retried
//! in `flush`, a deleted queue fails it.

mod config_def;
mod connector;
mod context;
pub mod data;
pub mod ids;
mod plugin;
mod record;
mod resources;
mod sink;
mod source;
mod transform;

pub use config_def::{
    CLEANUP_DELETE_CREATED_TOPICS, CLEANUP_MAX_ATTEMPTS, CLEANUP_POLICY, CLEANUP_TIMEOUT_MS,
    CONNECTOR_CLASS, ConfigDef, ConfigKey, ConfigType, ConfigValue, DEFAULT_CLEANUP_MAX_ATTEMPTS,
    DEFAULT_CLEANUP_TIMEOUT_MS, DEFAULT_STOP_TIMEOUT_MS, Importance, REDACTED, RequiredWhen,
    TASKS_MAX, runtime_config_def,
};
pub use connector::Connector;
pub use context::{ConnectorContext, TaskContext};
pub use plugin::{Plugin, PluginKind, TaskFactory};
pub use record::{SinkRecord, SourceRecord, TopicPartition};
pub use resources::{
    EntryState, LedgerChange, LedgerEntry, Locator, MemoryLedger, Origin, Resource, ResourceKind,
    ResourceLedger, ResourceOwner, Resources,
};
pub use sink::{SinkSeek, SinkTask};
pub use source::SourceTask;
/// The token in [`TaskContext::cancel`]: a plugin selects on its `cancelled()` in a long
/// wait, without a dependency of its own on `tokio-util`.
pub use tokio_util::sync::CancellationToken;
pub use transform::{
    BUILTIN_CONVERTERS, BUILTIN_HEADER_CONVERTERS, BUILTIN_PREDICATES, BUILTIN_TRANSFORMS,
    ConnectRecord, ErrantRecordReporter, Predicate, PredicateFactory, TransformError,
    TransformFactory, TransformKind, TransformPlugin, Transformation, builtin_predicate_config_def,
    builtin_transform_config_def,
};

/// Config as given by the operator or produced by a connector: key to value, both text.
pub type ConfigMap = std::collections::BTreeMap<String, String>;

/// An error from plugin code; its text is reported to the operator as is.
pub type PluginError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Result of a plugin call.
pub type PluginResult<T> = Result<T, PluginError>;
