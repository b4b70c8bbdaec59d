//! The record log between source and sink tasks (docs/architecture.md, "Data plane").
//!
//! A source task's records are appended to a topic; only after [`RecordLog::append`]
//! returned (the log acknowledged them) does the executor commit the records' source
//! offsets to the control plane. Sink tasks read through a named consumer shared by all
//! tasks of one sink connector and acknowledge only after the plugin's `flush` returned.
//! Delivery is therefore at least once.
//!
//! Backends: [`EmbeddedLog`] (redb files under the data dir, one process),
//! [`JetStreamLog`] (NATS JetStream, several hosts) and [`KafkaLog`] (Kafka brokers). [`LogConfig::parse`] reads
//! `--record-log` into a [`LogConfig`] holding the chosen backend's settings, and [`open`]
//! opens it; every backend passes one contract suite (`executor/tests/log/contract.rs`).

pub mod codec;
pub mod config;
pub mod embedded;
pub mod jetstream;
pub mod kafka;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use wharf::sdk::{SinkRecord, SourceRecord};

pub use config::{EmbeddedConfig, LogConfig, RECORD_LOG_FORMS};

/// How often the executor checks its record log ([`RecordLog::check`]), in
/// milliseconds.
pub const LOG_CHECK_INTERVAL_MS: u64 = 2_000;
pub use embedded::EmbeddedLog;
pub use jetstream::{JetStreamLog, JetStreamOptions, NatsConfig, NatsCredentials, NatsSecurity};
pub use kafka::{KafkaConfig, KafkaLog};

/// Default for [`LogLimits::max_fetch_records`]: records one fetch returns at most.
pub const DEFAULT_MAX_FETCH_RECORDS: usize = 500;
/// Default for [`LogLimits::max_fetch_bytes`]: encoded bytes one fetch returns at most
/// (a single larger record is still delivered alone).
pub const DEFAULT_MAX_FETCH_BYTES: usize = 4 * 1024 * 1024;
/// Default for [`LogLimits::max_in_flight_records`]: delivered, unacknowledged records.
pub const DEFAULT_MAX_IN_FLIGHT_RECORDS: usize = 5_000;
/// Default for [`LogLimits::max_append_in_flight_records`]: records of one append sent
/// before waiting for their acknowledgements (JetStream), or written per transaction
/// (embedded).
pub const DEFAULT_MAX_APPEND_IN_FLIGHT_RECORDS: usize = 1_000;

/// Bounds that keep a slow reader or a large batch from growing memory without bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogLimits {
    /// Records one [`LogConsumer::fetch`] returns at most, whatever `max` asks.
    pub max_fetch_records: usize,
    /// Encoded bytes one fetch returns at most (at least one record is always returned).
    pub max_fetch_bytes: usize,
    /// Delivered but unacknowledged records: per reader for the embedded log (a reader at
    /// the limit gets nothing until it acknowledges), per consumer for JetStream (the
    /// consumer's `max_ack_pending`, shared by its readers).
    pub max_in_flight_records: usize,
    /// Records of one [`RecordLog::append`] in flight at once.
    pub max_append_in_flight_records: usize,
}

impl Default for LogLimits {
    fn default() -> Self {
        Self {
            max_fetch_records: DEFAULT_MAX_FETCH_RECORDS,
            max_fetch_bytes: DEFAULT_MAX_FETCH_BYTES,
            max_in_flight_records: DEFAULT_MAX_IN_FLIGHT_RECORDS,
            max_append_in_flight_records: DEFAULT_MAX_APPEND_IN_FLIGHT_RECORDS,
        }
    }
}

impl LogLimits {
    /// Rejects zero limits, naming the field.
    pub fn validate(&self) -> Result<(), LogError> {
        let fields = [
            ("max_fetch_records", self.max_fetch_records),
            ("max_fetch_bytes", self.max_fetch_bytes),
            ("max_in_flight_records", self.max_in_flight_records),
            (
                "max_append_in_flight_records",
                self.max_append_in_flight_records,
            ),
        ];
        match fields.iter().find(|(_, v)| *v == 0) {
            Some((name, _)) => Err(LogError::InvalidConfig(format!(
                "{name} must be at least 1"
            ))),
            None => Ok(()),
        }
    }
}

/// Opens the configured backend: the one place that turns a [`LogConfig`] into a log.
///
/// # Errors
/// The backend's [`LogError`].
pub async fn open(config: &LogConfig) -> Result<Arc<dyn RecordLog>, LogError> {
    match config {
        LogConfig::Embedded(c) => Ok(Arc::new(EmbeddedLog::open_with(&c.dir, c.limits).await?)),
        LogConfig::Nats(c) => Ok(Arc::new(JetStreamLog::connect(c.clone()).await?)),
        LogConfig::Kafka(c) => Ok(Arc::new(KafkaLog::connect(c.clone()).await?)),
    }
}

/// Which partitions of a sink connector's topics one of its tasks reads: the control
/// plane gives task `index` of `count` its share with the task's assignment (the
/// generation), so the tasks of a sink read disjoint sets of partitions that together
/// cover every partition, whichever executor runs them.
///
/// Partition `p` of topic `t` belongs to task `(fnv1a32(t) + p) mod count`: every topic
/// spreads over the tasks from its own starting task, and a partition added to a topic has
/// its owner at once, without the control plane knowing the topic's partitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PartitionShare {
    /// The task's place among the sink's tasks, from 0.
    pub index: u32,
    /// How many tasks the sink has (at least 1, more than `index`).
    pub count: u32,
}

impl PartitionShare {
    /// The share of task `index` of `count`.
    ///
    /// # Errors
    /// [`LogError::InvalidConfig`] when `count` is 0 or `index` is not below it.
    pub fn new(index: u32, count: u32) -> Result<Self, LogError> {
        if index < count {
            Ok(Self { index, count })
        } else {
            Err(LogError::InvalidConfig(format!(
                "partition share {index} of {count}: the index must be below the task count"
            )))
        }
    }

    /// Whether partition `partition` of `topic` belongs to this share.
    pub fn owns(&self, topic: &str, partition: u32) -> bool {
        let start = u64::from(fnv1a32(topic.as_bytes()));
        (start + u64::from(partition)) % u64::from(self.count) == u64::from(self.index)
    }
}

/// 32-bit FNV-1a: a fixed, documented hash, so that every executor (of any version)
/// agrees on which task owns a partition.
fn fnv1a32(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5_u32, |hash, b| {
        (hash ^ u32::from(*b)).wrapping_mul(0x0100_0193)
    })
}

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
    /// Partition to append to (`SourceRecord::partition`); `None` lets the log pick it.
    /// Only the Kafka log has several partitions: the one-partition logs ignore it (and
    /// read it back as `None`).
    #[serde(default)]
    pub partition: Option<u32>,
}

impl From<&SourceRecord> for LogRecord {
    fn from(record: &SourceRecord) -> Self {
        Self {
            key: record.key.clone(),
            value: record.value.clone(),
            headers: record.headers.clone(),
            timestamp_ms: record.timestamp_ms,
            partition: record.partition,
        }
    }
}

impl LogRecord {
    /// The record as a sink task sees it, read from partition 0 of `topic` at `offset`
    /// (the one-partition logs).
    pub fn into_sink_record(self, topic: &str, offset: u64) -> SinkRecord {
        self.into_sink_record_at(topic, 0, offset)
    }

    /// The record as a sink task sees it, read from `partition` of `topic` at `offset`.
    pub fn into_sink_record_at(self, topic: &str, partition: u32, offset: u64) -> SinkRecord {
        SinkRecord {
            topic: topic.to_string(),
            key: self.key,
            value: self.value,
            headers: self.headers,
            timestamp_ms: self.timestamp_ms,
            partition,
            offset,
            data: None,
        }
    }
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
    /// The log's configuration is invalid (the message names the field).
    #[error("invalid record log config: {0}")]
    InvalidConfig(String),
    /// The consumer was deleted while this reader still used it.
    #[error("record log consumer {0} was deleted")]
    ConsumerDeleted(String),
    /// The backend cannot do what was asked (the message says what and what to do).
    #[error("{0}")]
    Unsupported(String),
}

/// A consumer's position on one partition of a topic: the next record it reads, as
/// Kafka Connect shows a sink's offsets (KIP-875: `kafka_topic`, `kafka_partition`,
/// `kafka_offset`, the committed offset being the next record's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerPosition {
    /// Topic.
    pub topic: String,
    /// Partition; the embedded and JetStream logs have one per topic, 0.
    pub partition: u32,
    /// Position of the next record the consumer reads.
    pub next: u64,
}

/// A change of a consumer's position on one partition (KIP-875's alter of a sink's
/// offsets): `next: None` forgets the position, so the consumer starts there as a new
/// one does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PositionChange {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: u32,
    /// The next record to read; `None` resets the partition.
    pub next: Option<u64>,
}

/// What a check of the log's backend found ([`RecordLog::check`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogCheck {
    /// Why the log cannot serve now, naming what is unreachable; `None` when it answered.
    pub problem: Option<String>,
    /// The Kafka cluster id, from a Kafka log that answered; `None` otherwise.
    pub cluster_id: Option<String>,
}

/// What [`RecordLog::prepare_topic`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopicPrepared {
    /// It created the topic with the settings.
    Created,
    /// The topic existed: used as it is.
    Existed,
    /// Nothing: the log creates no topic from settings (topic creation is off, or the
    /// log has no partitions); the first append creates an absent topic as any other.
    NotCreated,
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

    /// Creates `topic` with `settings` (a source connector's topic creation rules, KIP-158)
    /// unless it exists; an existing topic is used as it is. The one-partition logs have
    /// no such settings: their default does nothing ([`TopicPrepared::NotCreated`]).
    async fn prepare_topic(
        &self,
        topic: &str,
        settings: &wharf::topic_creation::TopicSettings,
    ) -> Result<TopicPrepared, LogError> {
        let _ = (topic, settings);
        Ok(TopicPrepared::NotCreated)
    }

    /// Whether [`RecordLog::prepare_topic`] would create `topic` now (topic creation is
    /// on and the topic is absent): a source records its intent in the ledger first. The
    /// default (logs that create nothing from settings) is false.
    async fn will_create_topic(&self, topic: &str) -> Result<bool, LogError> {
        let _ = topic;
        Ok(false)
    }

    /// Deletes `topic` (a deleted connector's created topic, under
    /// `cleanup.delete.created.topics`); a topic that is gone already is no error.
    ///
    /// # Errors
    /// [`LogError::Unsupported`] from a log that creates no topics (the default).
    async fn delete_topic(&self, topic: &str) -> Result<(), LogError> {
        Err(LogError::Unsupported(format!(
            "this record log does not delete topics ({topic})"
        )))
    }

    /// The problems of connector config `config` that only the log can see, as `(key,
    /// why)`: Kafka's per-connector client overrides under its policy (KIP-458) and topic
    /// names Kafka refuses (a sink's `topics`, its dead letter queue's topic). Checked by
    /// ValidateConfig, so that a create is refused naming the key. The default refuses
    /// every client override: only a Kafka log has clients to override.
    fn config_problems(&self, config: &wharf::sdk::ConfigMap) -> Vec<(String, String)> {
        config
            .keys()
            .filter(|k| kafka::client_override(k).is_some())
            .map(|k| {
                (
                    k.clone(),
                    "a Kafka client override (KIP-458) needs a kafka:// record log".to_owned(),
                )
            })
            .collect()
    }

    /// The log a task of a connector with `config` uses: this one, or (a Kafka config
    /// with client overrides) one with the connector's own clients. `None`: this one.
    ///
    /// # Errors
    /// [`LogError::InvalidConfig`] naming a refused override;
    /// [`LogError::Unavailable`] when a client cannot be made.
    fn with_client_overrides(
        &self,
        config: &wharf::sdk::ConfigMap,
    ) -> Result<Option<Arc<dyn RecordLog>>, LogError> {
        match self.config_problems(config).into_iter().next() {
            Some((key, why)) => Err(LogError::InvalidConfig(format!("{key}: {why}"))),
            None => Ok(None),
        }
    }

    /// Where the resources the runtime records for this log live (a Kafka cluster's
    /// brokers): the ledger's locator of a sink's consumer group and of created topics.
    /// `None` (the default): the runtime records no resource of this log.
    fn resource_locator(&self) -> Option<wharf::sdk::Locator> {
        None
    }

    /// Opens one sink task's reader of the consumer called `consumer`: as
    /// [`RecordLog::consumer`], reading only the partitions `share` gives the task. The
    /// one-partition logs (embedded, JetStream) share their records among the readers of
    /// one consumer whatever the share, so their default ignores it.
    async fn consumer_in_share(
        &self,
        consumer: &str,
        topics: &[String],
        start: StartPosition,
        share: PartitionShare,
    ) -> Result<Box<dyn LogConsumer>, LogError> {
        let _ = share;
        self.consumer(consumer, topics, start).await
    }

    /// The name of the consumer through which the tasks of sink connector `connector`
    /// read (and which its deletion deletes). Kafka's is the connector's consumer group
    /// as Kafka Connect names it (`connect-<name>`).
    fn sink_consumer_name(&self, connector: &str) -> String {
        format!("wharf-sink-{connector}")
    }

    /// Checks that the backend answers (the executor's health follows it, every
    /// `LOG_CHECK_INTERVAL`). The embedded log has nothing to reach and JetStream's
    /// client reconnects on its own: their default finds no problem.
    async fn check(&self) -> LogCheck {
        LogCheck::default()
    }

    /// Forgets the consumer's acknowledged positions, so that a consumer created again
    /// under the same name starts from its configured position. Missing is not an error.
    async fn delete_consumer(&self, consumer: &str) -> Result<(), LogError>;

    /// The consumer's positions, one per partition it has one on, sorted by topic and
    /// partition; empty for a consumer that never read. Only while none of its readers
    /// runs is the answer stable.
    ///
    /// # Errors
    /// [`LogError::Unsupported`] from a backend that cannot read them (the default).
    async fn consumer_positions(&self, consumer: &str) -> Result<Vec<ConsumerPosition>, LogError> {
        Err(LogError::Unsupported(format!(
            "this record log cannot read the positions of consumer {consumer}"
        )))
    }

    /// Moves (or with `next: None` forgets) the consumer's position on each partition
    /// named; the others stay. Only while none of its readers runs (a sink connector is
    /// STOPPED); readers opened afterwards start at the new positions.
    ///
    /// # Errors
    /// [`LogError::InvalidConfig`] naming a partition the topic does not have;
    /// [`LogError::Unsupported`] from a backend that cannot move them (the default).
    async fn set_consumer_positions(
        &self,
        consumer: &str,
        changes: &[PositionChange],
    ) -> Result<(), LogError> {
        let _ = changes;
        Err(LogError::Unsupported(format!(
            "this record log cannot move the positions of consumer {consumer}"
        )))
    }
}

/// Refuses a change on a partition other than 0 of a log with one partition per topic.
///
/// # Errors
/// [`LogError::InvalidConfig`] naming the topic and partition.
pub fn single_partition(changes: &[PositionChange]) -> Result<(), LogError> {
    match changes.iter().find(|c| c.partition != 0) {
        Some(c) => Err(LogError::InvalidConfig(format!(
            "topic {:?} has one partition, 0, on this record log; partition {} does not exist",
            c.topic, c.partition
        ))),
        None => Ok(()),
    }
}

/// One reader of a named consumer.
#[async_trait]
pub trait LogConsumer: Send {
    /// Up to `max` records, waiting at most `wait` for the first one; empty on timeout.
    async fn fetch(&mut self, max: usize, wait: Duration) -> Result<Vec<Delivered>, LogError>;

    /// Acknowledges the given records: they will not be delivered again.
    async fn ack(&mut self, tokens: &[AckToken]) -> Result<(), LogError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a32_matches_its_published_test_vectors() {
        assert_eq!(fnv1a32(b""), 0x811c_9dc5);
        assert_eq!(fnv1a32(b"a"), 0xe40c_292c);
        assert_eq!(fnv1a32(b"foobar"), 0xbf9c_f968);
    }

    #[test]
    fn every_partition_belongs_to_exactly_one_task_of_a_sink() {
        for count in 1..=9 {
            let shares: Vec<PartitionShare> = (0..count)
                .map(|i| PartitionShare::new(i, count).expect("share"))
                .collect();
            for topic in ["orders", "t", "a.b-c_d"] {
                for partition in 0..40 {
                    let owners = shares.iter().filter(|s| s.owns(topic, partition)).count();
                    assert_eq!(owners, 1, "{topic}/{partition} of {count} tasks");
                }
            }
        }
    }

    #[test]
    fn the_partitions_of_a_topic_spread_evenly_over_the_tasks() {
        let per_task: Vec<usize> = (0..4)
            .map(|i| {
                let share = PartitionShare::new(i, 4).expect("share");
                (0..8).filter(|p| share.owns("orders", *p)).count()
            })
            .collect();
        assert_eq!(per_task, [2, 2, 2, 2]);
    }

    #[test]
    fn one_task_owns_every_partition() {
        let share = PartitionShare::new(0, 1).expect("share");
        assert!((0..100).all(|p| share.owns("t", p)));
    }

    #[test]
    fn a_share_whose_index_is_not_below_its_count_is_refused() {
        for (index, count) in [(0, 0), (4, 4), (5, 4)] {
            match PartitionShare::new(index, count) {
                Err(LogError::InvalidConfig(msg)) => assert!(msg.contains("below"), "{msg}"),
                other => panic!("{index}/{count}: {other:?}"),
            }
        }
    }
}
