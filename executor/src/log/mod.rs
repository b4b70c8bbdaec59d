//! The record log between source and sink tasks (DESIGN.md, "Data plane").
//!
//! A source task's records are appended to a topic; only after [`RecordLog::append`]
//! returned (the log acknowledged them) does the executor commit the records' source
//! offsets to the control plane. Sink tasks read through a named consumer shared by all
//! tasks of one sink connector and acknowledge only after the plugin's `flush` returned.
//! Delivery is therefore at least once.

use std::time::Duration;

use async_trait::async_trait;
use wharf::sdk::SinkRecord;

/// A record as stored in the log (the topic is given separately).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LogRecord {
    /// Optional key bytes.
    pub key: Option<Vec<u8>>,
    /// Value bytes.
    pub value: Vec<u8>,
    /// Headers, in order.
    pub headers: Vec<(String, Vec<u8>)>,
    /// Event time, Unix milliseconds.
    pub timestamp_ms: Option<i64>,
}

/// Where a new consumer starts when it has no acknowledged position yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartPosition {
    /// From the first record still in the log.
    Earliest,
    /// Only records appended after the consumer was created.
    Latest,
}

/// Identifies a delivered record for acknowledgement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AckToken {
    /// Topic.
    pub topic: String,
    /// Position (or backend sequence) of the record.
    pub position: u64,
    /// Backend-specific reply handle (JetStream's ack subject); empty when unused.
    pub handle: String,
}

/// A record handed to a sink task, with what acknowledges it.
#[derive(Debug, Clone)]
pub struct Delivered {
    /// The record.
    pub record: SinkRecord,
    /// Token for [`LogConsumer::ack`].
    pub ack: AckToken,
}

/// Errors of the record log.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// The backend could not be reached or refused the operation.
    #[error("record log unavailable: {0}")]
    Unavailable(String),
    /// Local storage failed.
    #[error("record log storage failed")]
    Storage(#[source] std::io::Error),
    /// A stored record could not be decoded.
    #[error("record log holds a corrupt record: {0}")]
    Corrupt(String),
}

/// A durable, append-only log of topics.
#[async_trait]
pub trait RecordLog: Send + Sync {
    /// Appends `records` to `topic` and returns once the log acknowledged them durably,
    /// with the position given to each, in order.
    async fn append(&self, topic: &str, records: Vec<LogRecord>) -> Result<Vec<u64>, LogError>;

    /// Opens the consumer called `consumer` on `topics`. Consumers with the same name
    /// share the work (each record goes to one of them) and resume after the last
    /// acknowledged record; `start` applies only when the consumer is new.
    async fn consumer(
        &self,
        consumer: &str,
        topics: &[String],
        start: StartPosition,
    ) -> Result<Box<dyn LogConsumer>, LogError>;

    /// Forgets the consumer's acknowledged positions, so that a consumer created again
    /// under the same name starts from its configured position. Missing is not an error.
    async fn delete_consumer(&self, consumer: &str) -> Result<(), LogError>;
}

/// One reader of a named consumer.
#[async_trait]
pub trait LogConsumer: Send {
    /// Up to `max` records, waiting at most `wait` for the first one; empty on timeout.
    async fn fetch(&mut self, max: usize, wait: Duration) -> Result<Vec<Delivered>, LogError>;

    /// Acknowledges the given records: they will not be delivered again.
    async fn ack(&mut self, tokens: &[AckToken]) -> Result<(), LogError>;
}
