//! Single message transforms (Kafka Connect's `Transformation`, KIP-66) and predicates
//! (KIP-585) an author adds to an executor beside the built-in ones, and the sink's
//! errant record reporter (Connect's `ErrantRecordReporter`, KIP-610).
//!
//! A connector config names a transform by its class (`transforms.<alias>.type`); the
//! executor looks the name up among its built-in transforms (Connect's class names,
//! `org.apache.kafka.connect.transforms.MaskField$Value`, ...) and the
//! [`TransformPlugin`]s it was built with, and gives the transform the keys under
//! `transforms.<alias>.` without that prefix. docs/pipeline.md shows a record's way.

mod builtin_defs;

use std::sync::Arc;

pub use self::builtin_defs::{builtin_predicate_config_def, builtin_transform_config_def};

use crate::data::{Data, HeaderValue};
use crate::{ConfigDef, ConfigMap, PluginError, SinkRecord};

/// The transforms every executor has built in, under Kafka Connect 3.9's class names
/// (docs/pipeline.md); the control plane lists them in `GET
/// /connector-plugins?connectorsOnly=false` as Connect lists its transformation plugins.
/// Each one's keys: [`builtin_transform_config_def`].
pub const BUILTIN_TRANSFORMS: &[&str] = &[
    "org.apache.kafka.connect.transforms.Cast$Key",
    "org.apache.kafka.connect.transforms.Cast$Value",
    "org.apache.kafka.connect.transforms.DropHeaders",
    "org.apache.kafka.connect.transforms.ExtractField$Key",
    "org.apache.kafka.connect.transforms.ExtractField$Value",
    "org.apache.kafka.connect.transforms.Filter",
    "org.apache.kafka.connect.transforms.Flatten$Key",
    "org.apache.kafka.connect.transforms.Flatten$Value",
    "org.apache.kafka.connect.transforms.HeaderFrom$Key",
    "org.apache.kafka.connect.transforms.HeaderFrom$Value",
    "org.apache.kafka.connect.transforms.HoistField$Key",
    "org.apache.kafka.connect.transforms.HoistField$Value",
    "org.apache.kafka.connect.transforms.InsertField$Key",
    "org.apache.kafka.connect.transforms.InsertField$Value",
    "org.apache.kafka.connect.transforms.InsertHeader",
    "org.apache.kafka.connect.transforms.MaskField$Key",
    "org.apache.kafka.connect.transforms.MaskField$Value",
    "org.apache.kafka.connect.transforms.RegexRouter",
    "org.apache.kafka.connect.transforms.ReplaceField$Key",
    "org.apache.kafka.connect.transforms.ReplaceField$Value",
    "org.apache.kafka.connect.transforms.SetSchemaMetadata$Key",
    "org.apache.kafka.connect.transforms.SetSchemaMetadata$Value",
    "org.apache.kafka.connect.transforms.TimestampConverter$Key",
    "org.apache.kafka.connect.transforms.TimestampConverter$Value",
    "org.apache.kafka.connect.transforms.TimestampRouter",
    "org.apache.kafka.connect.transforms.ValueToKey",
];

/// The predicates every executor has built in (Kafka Connect 3.9's class names); each
/// one's keys: [`builtin_predicate_config_def`].
pub const BUILTIN_PREDICATES: &[&str] = &[
    "org.apache.kafka.connect.transforms.predicates.HasHeaderKey",
    "org.apache.kafka.connect.transforms.predicates.RecordIsTombstone",
    "org.apache.kafka.connect.transforms.predicates.TopicNameMatches",
];

/// The converters every executor has built in (Kafka Connect 3.9's class names); each
/// also converts headers.
pub const BUILTIN_CONVERTERS: &[&str] = &[
    "org.apache.kafka.connect.json.JsonConverter",
    "org.apache.kafka.connect.storage.StringConverter",
    "org.apache.kafka.connect.converters.ByteArrayConverter",
];

/// The header-only converter every executor has built in.
pub const BUILTIN_HEADER_CONVERTERS: &[&str] =
    &["org.apache.kafka.connect.storage.SimpleHeaderConverter"];

/// A record as transforms see it (Connect's `ConnectRecord`): read by the connector's
/// converters, written back by them after the last transform.
#[derive(Debug, Clone, PartialEq)]
pub struct ConnectRecord {
    /// The topic (a router changes it).
    pub topic: String,
    /// The partition when known (a sink record's), else `None`.
    pub partition: Option<i32>,
    /// The key and its schema (`Data::NULL` for none).
    pub key: Data,
    /// The value and its schema (`Data::NULL` for a tombstone).
    pub value: Data,
    /// Headers, in order; names may repeat.
    pub headers: Vec<(String, HeaderValue)>,
    /// Record time, Unix milliseconds.
    pub timestamp_ms: Option<i64>,
    /// A sink record's position in its topic; `None` for a source record.
    pub offset: Option<u64>,
}

/// Why a transform failed on one record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransformError {
    /// What failed, for the operator (no secrets).
    pub message: String,
    /// Whether trying the same record again may succeed (Connect's
    /// `RetriableException`): retried within `errors.retry.timeout`.
    pub retriable: bool,
}

impl TransformError {
    /// A failure that the same record would meet again (Connect's `DataException`).
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            retriable: false,
        }
    }

    /// A failure worth retrying (Connect's `RetriableException`).
    pub fn retriable(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            retriable: true,
        }
    }
}

impl std::fmt::Display for TransformError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for TransformError {}

/// A single message transform: one record in, one or none out (none drops it; a dropped
/// source record's offset is still committed, a dropped sink record still acknowledged).
/// Called from one task at a time, in record order; it may keep state (a schema cache).
pub trait Transformation: Send {
    /// Transforms `record`; `Ok(None)` drops it.
    ///
    /// # Errors
    /// A [`TransformError`]: the task fails, or with `errors.tolerance=all` the record is
    /// skipped (and sent to a sink's dead letter queue).
    fn apply(&mut self, record: ConnectRecord) -> Result<Option<ConnectRecord>, TransformError>;
}

/// A condition on a record that decides whether a transform applies (KIP-585).
pub trait Predicate: Send {
    /// True when the record matches.
    fn test(&self, record: &ConnectRecord) -> bool;
}

/// Builds a configured transform from its keys (those under `transforms.<alias>.`,
/// without the prefix); an error names the key that is wrong.
pub type TransformFactory =
    Arc<dyn Fn(&ConfigMap) -> Result<Box<dyn Transformation>, (String, String)> + Send + Sync>;

/// Builds a configured predicate from its keys (under `predicates.<alias>.`).
pub type PredicateFactory =
    Arc<dyn Fn(&ConfigMap) -> Result<Box<dyn Predicate>, (String, String)> + Send + Sync>;

/// What a [`TransformPlugin`] makes.
#[derive(Clone)]
pub enum TransformKind {
    /// A transformation.
    Transformation(TransformFactory),
    /// A predicate.
    Predicate(PredicateFactory),
}

/// A custom transform or predicate an executor offers beside the built-in ones
/// (`ExecutorBuilder::transforms`), named by the class name a config gives in
/// `transforms.<alias>.type` or `predicates.<alias>.type`.
#[derive(Clone)]
pub struct TransformPlugin {
    /// The name a config uses (for example `com.example.Redact`).
    pub name: String,
    /// Version.
    pub version: String,
    /// Its keys (for `GET /connector-plugins?connectorsOnly=false` and validate).
    pub config_def: ConfigDef,
    /// The factory.
    pub kind: TransformKind,
}

impl std::fmt::Debug for TransformPlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.kind {
            TransformKind::Transformation(_) => "transformation",
            TransformKind::Predicate(_) => "predicate",
        };
        f.debug_struct("TransformPlugin")
            .field("name", &self.name)
            .field("version", &self.version)
            .field("kind", &kind)
            .finish_non_exhaustive()
    }
}

/// Sends one record a sink task cannot write to the connector's error handling (Connect's
/// `ErrantRecordReporter`, KIP-610): with `errors.tolerance=all` the record goes to the
/// dead letter queue (`errors.deadletterqueue.topic.name`) and is logged as
/// `errors.log.enable` says, before the records put with it are acknowledged; with
/// `none` (the default), [`report`](Self::report) returns an error the task should
/// return from `put`, which fails it. Given in [`TaskContext::errant_reporter`](crate::TaskContext::errant_reporter) to sink tasks.
#[derive(Clone)]
pub struct ErrantRecordReporter {
    report: ReportFn,
}

/// What an [`ErrantRecordReporter`] calls: the record and the error's text; an `Err`
/// tells the plugin to fail (`errors.tolerance=none`).
pub type ReportFn = Arc<dyn Fn(&SinkRecord, &str) -> Result<(), String> + Send + Sync>;

impl ErrantRecordReporter {
    /// A reporter that calls `report` (the runtime builds it).
    pub fn new(report: ReportFn) -> Self {
        Self { report }
    }

    /// Reports `record` as failed with `error` (its text goes to the dead letter queue's
    /// `__connect.errors.exception.message` header and the log; no secrets).
    ///
    /// # Errors
    /// With `errors.tolerance=none`: return it from `put`, the task fails.
    pub fn report(
        &self,
        record: &SinkRecord,
        error: &dyn std::fmt::Display,
    ) -> Result<(), PluginError> {
        (self.report)(record, &error.to_string()).map_err(Into::into)
    }
}

impl std::fmt::Debug for ErrantRecordReporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ErrantRecordReporter")
            .finish_non_exhaustive()
    }
}
