//! The Kafka record log (`--record-log kafka://HOST:PORT,...`): Wharf's topics are Kafka
//! topics, laid out as Kafka Connect lays them out (docs/kafka.md).
//!
//! # Mapping
//! - **Topics** are the brokers' topics under the same name; a name Kafka refuses is
//!   refused ([`check_topic_name`]). The first append to a topic absent from the brokers
//!   creates it ([`KafkaConfig::topic_partitions`] partitions, the brokers' default
//!   replication factor).
//! - **Records** map one to one onto Kafka records (`layout.rs`). A record goes to the
//!   partition librdkafka's `murmur2_random` partitioner picks for its key, which is the
//!   Java client's default partitioner: per-key order holds and a Kafka Connect producer
//!   would have picked the same partition. A record's position is its Kafka offset.
//! - **Appends** use an idempotent producer (`enable.idempotence`, `acks=all`): `append`
//!   returns after every record's delivery report succeeded, so a source's offsets are
//!   committed only after the brokers acknowledged its records (at least once).
//! - **A named consumer** is the Kafka consumer group of that name, which holds its
//!   committed offsets (see `reader.rs`: partitions are assigned by the log, not by the
//!   group protocol; acknowledgements commit each partition's contiguous acknowledged
//!   prefix). A sink connector's is named as Kafka Connect names it ([`group_name`]). An
//!   acknowledgement's token carries the record's partition in its handle.
//! - **A sink task's reader** ([`RecordLog::consumer_in_share`]) reads only the partitions
//!   of its [`PartitionShare`], which the control plane gave the task, and finds partitions
//!   added to its topics later.
//! - **Deleting a consumer** deletes its group (DeleteGroups), so a consumer made again
//!   under that name starts from its configured position.
//! - **Checks** ([`RecordLog::check`]) ask the brokers for metadata: the executor's health
//!   names the bootstrap brokers that are unreachable, and the answer's cluster id goes to
//!   the control plane.
//! - **A connector's client overrides** (KIP-458, `producer.override.*`, ...) are checked
//!   under the log's policy ([`override_refusal`]) and give its tasks a log with clients
//!   of their own ([`RecordLog::with_client_overrides`]).

mod layout;
mod reader;
mod settings;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use async_trait::async_trait;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{DeliveryFuture, FutureProducer, Producer};

use super::{LogCheck, LogConsumer, LogError, LogRecord, PartitionShare, RecordLog, StartPosition};
use reader::Group;
pub use reader::{KafkaReader, PARTITION_RECHECK_INTERVAL, TOPIC_RECHECK_INTERVAL};
use settings::Role;
pub use settings::{
    DEFAULT_KAFKA_REQUEST_TIMEOUT_MS, DEFAULT_TOPIC_PARTITIONS, KafkaConfig, MAX_TOPIC_NAME_CHARS,
    check_topic_name,
};
pub use settings::{OverridePolicy, client_override, librdkafka_refusal, override_refusal};

/// How long librdkafka keeps trying to deliver a record before its append fails
/// (`delivery.timeout.ms`): Kafka Connect's producer default, two minutes.
const DELIVERY_TIMEOUT_MS: &str = "120000";
/// Wait before sending again when librdkafka's send queue is full and this append has
/// nothing of its own in flight to wait for.
const QUEUE_FULL_BACKOFF: Duration = Duration::from_millis(10);
/// Longest a broker check's metadata request may take, in milliseconds (the request
/// timeout when that is shorter).
pub const BROKER_CHECK_TIMEOUT_MS: u64 = 5_000;
/// Longest a broker check waits for a TCP connection to one bootstrap broker, in
/// milliseconds (only after the metadata request failed, to name the brokers that are
/// unreachable).
pub const BROKER_CONNECT_TIMEOUT_MS: u64 = 1_000;

fn unavailable(what: &str, err: impl std::fmt::Display) -> LogError {
    LogError::Unavailable(format!("{what}: {err}"))
}

/// Named consumers of one handle, by (name, topics, share): readers share them.
type Groups = tokio::sync::Mutex<HashMap<GroupKey, Weak<Group>>>;
/// (consumer name, topics, partition share).
type GroupKey = (String, Vec<String>, Option<PartitionShare>);

/// The consumer group of sink connector `connector`, named as Kafka Connect names it
/// (`connect-<name>`, Connect's `SinkUtils.consumerGroupId`), so that Kafka's tools and
/// lag exporters find a Wharf sink where they find a Connect one. The one place that
/// names it.
pub fn group_name(connector: &str) -> String {
    format!("connect-{connector}")
}

/// The Kafka backend. Cheap to clone.
#[derive(Clone)]
pub struct KafkaLog {
    inner: Arc<Inner>,
}

struct Inner {
    config: KafkaConfig,
    producer: FutureProducer,
    admin: AdminClient<DefaultClientContext>,
    /// Topics known to exist (created or found by this process).
    topics: Mutex<HashSet<String>>,
    groups: Groups,
}

impl KafkaLog {
    /// Makes the producer and admin client of `config`'s brokers. They connect on first
    /// use; calls made while no broker answers fail with [`LogError::Unavailable`] (or,
    /// for an append, wait for librdkafka's delivery timeout).
    ///
    /// # Errors
    /// [`LogError::InvalidConfig`] when a setting is wrong, [`LogError::Unavailable`] when
    /// librdkafka refuses the client configuration.
    pub async fn connect(config: KafkaConfig) -> Result<Self, LogError> {
        Self::connect_now(config)
    }

    /// As [`KafkaLog::connect`], without awaiting: making the clients does not wait for
    /// the brokers.
    ///
    /// # Errors
    /// As [`KafkaLog::connect`].
    pub fn connect_now(config: KafkaConfig) -> Result<Self, LogError> {
        config.validate()?;
        let producer: FutureProducer = config
            .client_config(Role::Producer)?
            .set("enable.idempotence", "true")
            .set("acks", "all")
            .set("partitioner", "murmur2_random")
            .set("delivery.timeout.ms", DELIVERY_TIMEOUT_MS)
            .set("allow.auto.create.topics", "false")
            .create()
            .map_err(|e| unavailable("create Kafka producer", e))?;
        let admin: AdminClient<DefaultClientContext> = config
            .client_config(Role::Admin)?
            .create()
            .map_err(|e| unavailable("create Kafka admin client", e))?;
        Ok(Self {
            inner: Arc::new(Inner {
                config,
                producer,
                admin,
                topics: Mutex::default(),
                groups: Groups::default(),
            }),
        })
    }

    fn admin_options(&self) -> AdminOptions {
        let timeout = Duration::from_millis(self.inner.config.request_timeout_ms);
        AdminOptions::new()
            .request_timeout(Some(timeout))
            .operation_timeout(Some(timeout))
    }

    fn known_topics(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.inner
            .topics
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Creates `topic` unless this process already knows it exists (an existing topic
    /// is used as it is): with [`KafkaConfig::topic_partitions`] partitions and the
    /// brokers' default replication factor.
    async fn ensure_topic(&self, topic: &str) -> Result<(), LogError> {
        let settings = wharf::topic_creation::TopicSettings {
            partitions: self.inner.config.topic_partitions,
            replication_factor: -1,
            configs: std::collections::BTreeMap::new(),
        };
        self.create_topic(topic, &settings).await.map(|_| ())
    }

    /// Creates `topic` with `settings` unless this process already knows it exists; a
    /// topic the brokers already hold is used as it is.
    async fn create_topic(
        &self,
        topic: &str,
        settings: &wharf::topic_creation::TopicSettings,
    ) -> Result<super::TopicPrepared, LogError> {
        if self.known_topics().contains(topic) {
            return Ok(super::TopicPrepared::Existed);
        }
        check_topic_name(topic)?;
        let mut new = NewTopic::new(
            topic,
            settings.partitions,
            TopicReplication::Fixed(settings.replication_factor),
        );
        for (name, value) in &settings.configs {
            new = new.set(name, value);
        }
        let results = self
            .inner
            .admin
            .create_topics([&new], &self.admin_options())
            .await
            .map_err(|e| unavailable(&format!("create topic {topic:?}"), e))?;
        let existed = results
            .iter()
            .any(|r| matches!(r, Err((_, RDKafkaErrorCode::TopicAlreadyExists))));
        admin_outcome(results, RDKafkaErrorCode::TopicAlreadyExists, || {
            format!("create topic {topic:?}")
        })?;
        self.known_topics().insert(topic.to_string());
        Ok(if existed {
            super::TopicPrepared::Existed
        } else {
            super::TopicPrepared::Created
        })
    }

    /// Whether the brokers hold `topic` (a metadata request through the producer, which
    /// never asks the brokers to create a topic).
    async fn topic_exists(&self, topic: &str) -> Result<bool, LogError> {
        if self.known_topics().contains(topic) {
            return Ok(true);
        }
        check_topic_name(topic)?;
        let log = self.clone();
        let name = topic.to_owned();
        let timeout = Duration::from_millis(self.inner.config.request_timeout_ms);
        tokio::task::spawn_blocking(move || {
            let metadata = log
                .inner
                .producer
                .client()
                .fetch_metadata(Some(&name), timeout)
                .map_err(|e| unavailable(&format!("metadata of topic {name:?}"), e))?;
            Ok(metadata
                .topics()
                .first()
                .is_some_and(|t| t.error().is_none() && !t.partitions().is_empty()))
        })
        .await
        .map_err(|e| unavailable("metadata", e))?
    }

    /// Sends `record` to `topic`, waiting for this append's deliveries in flight while
    /// librdkafka's queue is full.
    async fn send(
        &self,
        topic: &str,
        record: &LogRecord,
        in_flight: &mut Vec<DeliveryFuture>,
        positions: &mut Vec<u64>,
    ) -> Result<(), LogError> {
        loop {
            match self
                .inner
                .producer
                .send_result(layout::to_kafka(topic, record)?)
            {
                Ok(delivery) => {
                    in_flight.push(delivery);
                    return Ok(());
                }
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                    if in_flight.is_empty() {
                        tokio::time::sleep(QUEUE_FULL_BACKOFF).await;
                    } else {
                        await_deliveries(topic, in_flight, positions).await?;
                    }
                }
                Err((e, _)) => return Err(unavailable(&format!("produce to {topic:?}"), e)),
            }
        }
    }
}

impl KafkaLog {
    /// A reader of the group `consumer` on `topics`, in `share` (`None`: every partition);
    /// readers of one (name, topics, share) on this handle share one Kafka consumer.
    async fn reader(
        &self,
        consumer: &str,
        topics: &[String],
        start: StartPosition,
        share: Option<PartitionShare>,
    ) -> Result<Box<dyn LogConsumer>, LogError> {
        for topic in topics {
            check_topic_name(topic)?;
        }
        let key = (consumer.to_string(), topics.to_vec(), share);
        let mut groups = self.inner.groups.lock().await;
        groups.retain(|_, group| group.strong_count() > 0);
        let group = match groups.get(&key).and_then(Weak::upgrade) {
            Some(group) => group,
            None => {
                let group = Group::open(&self.inner.config, consumer, topics, start, share).await?;
                groups.insert(key, Arc::downgrade(&group));
                group
            }
        };
        Ok(Box::new(KafkaReader::new(group)))
    }
}

impl KafkaLog {
    /// The bootstrap brokers that refuse a TCP connection (or time out), each with why.
    async fn unreachable_brokers(&self) -> Vec<(String, String)> {
        let probes = self.inner.config.brokers.iter().map(|broker| async move {
            let connect = tokio::net::TcpStream::connect(broker.as_str());
            let limit = Duration::from_millis(BROKER_CONNECT_TIMEOUT_MS);
            match tokio::time::timeout(limit, connect).await {
                Ok(Ok(_)) => None,
                Ok(Err(e)) => Some((broker.clone(), e.to_string())),
                Err(_) => Some((
                    broker.clone(),
                    format!("no connection within {BROKER_CONNECT_TIMEOUT_MS} ms"),
                )),
            }
        });
        futures::future::join_all(probes)
            .await
            .into_iter()
            .flatten()
            .collect()
    }
}

/// The health text of a failed broker check: the bootstrap brokers that are unreachable
/// (`unreachable`: broker and why), or, when every one accepts connections, that they
/// did not answer; with the metadata request's `error`. Pure.
fn broker_problem(brokers: &[String], unreachable: &[(String, String)], error: &str) -> String {
    if unreachable.is_empty() {
        format!(
            "Kafka brokers {} accept connections but did not answer a metadata request: {error}",
            brokers.join(", ")
        )
    } else {
        let named: Vec<String> = unreachable
            .iter()
            .map(|(broker, why)| format!("{broker} ({why})"))
            .collect();
        format!(
            "Kafka broker{} unreachable: {}; metadata request: {error}",
            if unreachable.len() == 1 { "" } else { "s" },
            named.join(", ")
        )
    }
}

/// The outcome of an admin request: every result succeeded or failed with `done` (the
/// topic exists already, the group is gone already), else the first other error.
fn admin_outcome(
    results: Vec<Result<String, (String, RDKafkaErrorCode)>>,
    done: RDKafkaErrorCode,
    what: impl Fn() -> String,
) -> Result<(), LogError> {
    match results
        .into_iter()
        .find_map(|r| r.err().filter(|(_, code)| *code != done))
    {
        Some((_, code)) => Err(unavailable(&what(), code)),
        None => Ok(()),
    }
}

/// Waits for the delivery reports of `in_flight`, in order, adding each offset to
/// `positions`.
async fn await_deliveries(
    topic: &str,
    in_flight: &mut Vec<DeliveryFuture>,
    positions: &mut Vec<u64>,
) -> Result<(), LogError> {
    for delivery in in_flight.drain(..) {
        match delivery.await {
            Ok(Ok(d)) => positions.push(u64::try_from(d.offset).unwrap_or_default()),
            Ok(Err((e, _))) => return Err(unavailable(&format!("deliver to {topic:?}"), e)),
            Err(_canceled) => {
                return Err(LogError::Unavailable(format!(
                    "deliver to {topic:?}: the producer was closed"
                )));
            }
        }
    }
    Ok(())
}

#[async_trait]
impl RecordLog for KafkaLog {
    async fn append(&self, topic: &str, records: Vec<LogRecord>) -> Result<Vec<u64>, LogError> {
        self.ensure_topic(topic).await?;
        let per_round = self.inner.config.limits.max_append_in_flight_records;
        let mut positions = Vec::with_capacity(records.len());
        let mut in_flight = Vec::with_capacity(per_round.min(records.len()));
        for chunk in records.chunks(per_round) {
            for record in chunk {
                self.send(topic, record, &mut in_flight, &mut positions)
                    .await?;
            }
            await_deliveries(topic, &mut in_flight, &mut positions).await?;
        }
        Ok(positions)
    }

    async fn consumer(
        &self,
        consumer: &str,
        topics: &[String],
        start: StartPosition,
    ) -> Result<Box<dyn LogConsumer>, LogError> {
        self.reader(consumer, topics, start, None).await
    }

    async fn consumer_in_share(
        &self,
        consumer: &str,
        topics: &[String],
        start: StartPosition,
        share: PartitionShare,
    ) -> Result<Box<dyn LogConsumer>, LogError> {
        self.reader(consumer, topics, start, Some(share)).await
    }

    fn sink_consumer_name(&self, connector: &str) -> String {
        group_name(connector)
    }

    async fn prepare_topic(
        &self,
        topic: &str,
        settings: &wharf::topic_creation::TopicSettings,
    ) -> Result<super::TopicPrepared, LogError> {
        if !self.inner.config.topic_creation_enable {
            // The worker's switch is off (Connect's `topic.creation.enable=false`): the
            // connector's settings are ignored and the first append creates the topic as
            // any other.
            return Ok(super::TopicPrepared::NotCreated);
        }
        self.create_topic(topic, settings).await
    }

    async fn will_create_topic(&self, topic: &str) -> Result<bool, LogError> {
        Ok(self.inner.config.topic_creation_enable && !self.topic_exists(topic).await?)
    }

    async fn delete_topic(&self, topic: &str) -> Result<(), LogError> {
        check_topic_name(topic)?;
        let results = self
            .inner
            .admin
            .delete_topics(&[topic], &self.admin_options())
            .await
            .map_err(|e| unavailable(&format!("delete topic {topic:?}"), e))?;
        admin_outcome(results, RDKafkaErrorCode::UnknownTopicOrPartition, || {
            format!("delete topic {topic:?}")
        })?;
        self.known_topics().remove(topic);
        Ok(())
    }

    fn config_problems(&self, config: &wharf::sdk::ConfigMap) -> Vec<(String, String)> {
        let mut problems = self.inner.config.override_problems(config);
        // Topic names the brokers would refuse: found here, at create, instead of at the
        // first append (a dead letter queue's topic would hold its sink's partition).
        for key in ["topics", "errors.deadletterqueue.topic.name"] {
            let Some(value) = config.get(key) else {
                continue;
            };
            let refused = value
                .split(',')
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .find_map(|t| check_topic_name(t).err());
            if let Some(e) = refused {
                let why = match e {
                    LogError::InvalidConfig(why) => why,
                    other => other.to_string(),
                };
                problems.push((key.to_owned(), why));
            }
        }
        problems
    }

    fn with_client_overrides(
        &self,
        config: &wharf::sdk::ConfigMap,
    ) -> Result<Option<Arc<dyn RecordLog>>, LogError> {
        match self.inner.config.with_overrides(config)? {
            Some(own) => Ok(Some(Arc::new(KafkaLog::connect_now(own)?))),
            None => Ok(None),
        }
    }

    fn resource_locator(&self) -> Option<wharf::sdk::Locator> {
        Some(wharf::sdk::Locator::default().host(self.inner.config.canonical_brokers()))
    }

    async fn check(&self) -> LogCheck {
        let log = self.clone();
        let timeout = Duration::from_millis(
            self.inner
                .config
                .request_timeout_ms
                .min(BROKER_CHECK_TIMEOUT_MS),
        );
        let answered = tokio::task::spawn_blocking(move || {
            let client = log.inner.admin.inner();
            client
                .fetch_metadata(None, timeout)
                .map(|_| client.fetch_cluster_id(timeout))
        })
        .await;
        let error = match answered {
            Ok(Ok(cluster_id)) => {
                return LogCheck {
                    problem: None,
                    cluster_id,
                };
            }
            Ok(Err(e)) => e.to_string(),
            Err(join) => format!("the check did not finish: {join}"),
        };
        let unreachable = self.unreachable_brokers().await;
        LogCheck {
            problem: Some(broker_problem(
                &self.inner.config.brokers,
                &unreachable,
                &error,
            )),
            cluster_id: None,
        }
    }

    async fn delete_consumer(&self, consumer: &str) -> Result<(), LogError> {
        self.inner
            .groups
            .lock()
            .await
            .retain(|(name, _, _), group| {
                if name == consumer
                    && let Some(group) = group.upgrade()
                {
                    group.mark_deleted();
                }
                name != consumer
            });
        let results = self
            .inner
            .admin
            .delete_groups(&[consumer], &self.admin_options())
            .await
            .map_err(|e| unavailable(&format!("delete consumer group {consumer:?}"), e))?;
        admin_outcome(results, RDKafkaErrorCode::GroupIdNotFound, || {
            format!("delete consumer group {consumer:?}")
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(results: Vec<Result<String, (String, RDKafkaErrorCode)>>) -> Result<(), LogError> {
        admin_outcome(results, RDKafkaErrorCode::TopicAlreadyExists, || {
            "create topic \"t\"".to_string()
        })
    }

    #[test]
    fn a_broker_check_names_the_unreachable_brokers() {
        let brokers = ["a:9092".to_string(), "b:9092".to_string()];
        let text = broker_problem(
            &brokers,
            &[("b:9092".into(), "Connection refused".into())],
            "timed out",
        );
        assert_eq!(
            text,
            "Kafka broker unreachable: b:9092 (Connection refused); metadata request: timed out"
        );
        let both = broker_problem(
            &brokers,
            &[("a:9092".into(), "x".into()), ("b:9092".into(), "y".into())],
            "e",
        );
        assert!(
            both.starts_with("Kafka brokers unreachable: a:9092 (x), b:9092 (y)"),
            "{both}"
        );
    }

    #[test]
    fn a_broker_check_says_when_every_broker_accepts_connections() {
        let text = broker_problem(&["a:9092".to_string()], &[], "timed out");
        assert_eq!(
            text,
            "Kafka brokers a:9092 accept connections but did not answer a metadata request: timed out"
        );
    }

    #[test]
    fn every_result_succeeding_is_success() {
        assert!(outcome(vec![Ok("t".into()), Ok("u".into())]).is_ok());
    }

    #[test]
    fn the_error_that_means_done_already_is_success() {
        let exists = Err(("t".into(), RDKafkaErrorCode::TopicAlreadyExists));
        assert!(outcome(vec![exists, Ok("u".into())]).is_ok());
    }

    #[test]
    fn another_error_is_unavailable_naming_the_request() {
        let refused = Err(("t".into(), RDKafkaErrorCode::TopicAuthorizationFailed));
        match outcome(vec![Ok("u".into()), refused]) {
            Err(LogError::Unavailable(msg)) => {
                assert!(msg.starts_with("create topic \"t\": "), "{msg}");
            }
            other => panic!("{other:?}"),
        }
    }
}
