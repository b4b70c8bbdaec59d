//! The Kafka backend's settings (`--record-log kafka://HOST:PORT[,HOST:PORT...]`) and the
//! topic names Kafka accepts.

use super::super::{LogError, LogLimits};

/// Default timeout of one request to the brokers (metadata, offsets, topic creation,
/// group deletion), in milliseconds.
pub const DEFAULT_KAFKA_REQUEST_TIMEOUT_MS: u64 = 10_000;
/// Partitions of a topic the log creates (the first append to a topic that is absent).
pub const DEFAULT_TOPIC_PARTITIONS: i32 = 1;
/// Longest topic name Kafka accepts.
pub const MAX_TOPIC_NAME_CHARS: usize = 249;

/// Which kind of Kafka client a setting is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    /// The producer of appends.
    Producer,
    /// A sink's consumer.
    Consumer,
    /// The admin client (topics, groups).
    Admin,
}

/// Settings of the Kafka record log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaConfig {
    /// Bootstrap brokers, `HOST:PORT` each.
    pub brokers: Vec<String>,
    /// Milliseconds one request to the brokers may take.
    pub request_timeout_ms: u64,
    /// Partitions of the topics the log creates.
    pub topic_partitions: i32,
    /// Fetch and in-flight bounds.
    pub limits: LogLimits,
}

impl KafkaConfig {
    /// `brokers` with the default settings.
    pub fn new(brokers: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Self {
            brokers: brokers.into_iter().map(Into::into).collect(),
            request_timeout_ms: DEFAULT_KAFKA_REQUEST_TIMEOUT_MS,
            topic_partitions: DEFAULT_TOPIC_PARTITIONS,
            limits: LogLimits::default(),
        }
    }

    /// Reads the Kafka form of a record-log spec: `kafka://` then brokers separated by
    /// commas, each `HOST:PORT` (a later one may repeat `kafka://`).
    ///
    /// # Errors
    /// [`LogError::InvalidConfig`] naming the broker that is wrong, or an option (none is
    /// accepted yet).
    pub(in crate::log) fn from_spec(spec: &str) -> Result<Self, LogError> {
        let brokers = spec.strip_prefix("kafka://").unwrap_or(spec);
        if let Some((_, query)) = brokers.split_once('?') {
            return Err(LogError::InvalidConfig(format!(
                "unknown record log option {query:?} (a kafka:// log takes none)"
            )));
        }
        let config = Self::new(
            brokers
                .split(',')
                .map(str::trim)
                .map(|b| b.strip_prefix("kafka://").unwrap_or(b)),
        );
        config.validate()?;
        Ok(config)
    }

    /// Checks the limits, the topic partitions and that every broker is `HOST:PORT`.
    ///
    /// # Errors
    /// [`LogError::InvalidConfig`] naming what is wrong.
    pub(super) fn validate(&self) -> Result<(), LogError> {
        self.limits.validate()?;
        if self.topic_partitions < 1 {
            return Err(LogError::InvalidConfig(format!(
                "topic_partitions must be at least 1, got {}",
                self.topic_partitions
            )));
        }
        if self.brokers.is_empty() {
            return Err(LogError::InvalidConfig("no Kafka broker given".into()));
        }
        for broker in &self.brokers {
            let port_ok = broker
                .rsplit_once(':')
                .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
            if !port_ok || broker.contains('/') {
                return Err(LogError::InvalidConfig(format!(
                    "Kafka broker {broker:?} is not HOST:PORT"
                )));
            }
        }
        Ok(())
    }

    /// The brokers as librdkafka's `bootstrap.servers` takes them.
    pub(super) fn bootstrap_servers(&self) -> String {
        self.brokers.join(",")
    }

    /// The librdkafka settings every client of `role` starts from: the brokers.
    pub(super) fn client_config(&self, role: Role) -> rdkafka::ClientConfig {
        let _ = role;
        let mut config = rdkafka::ClientConfig::new();
        config.set("bootstrap.servers", self.bootstrap_servers());
        config
    }
}

impl std::fmt::Display for KafkaConfig {
    /// The spec form: `kafka://a:9092,b:9092`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "kafka://{}", self.brokers.join(","))
    }
}

/// Checks that `topic` is a name Kafka accepts: 1 to [`MAX_TOPIC_NAME_CHARS`] ASCII
/// letters, digits, `.`, `_` and `-`, and not `.` or `..`. Wharf's topics are the
/// brokers' topics, so a name Kafka refuses is refused, not rewritten.
///
/// # Errors
/// [`LogError::InvalidConfig`] naming the topic and the rule.
pub fn check_topic_name(topic: &str) -> Result<(), LogError> {
    let legal_chars = topic
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    let ok = !topic.is_empty()
        && topic.len() <= MAX_TOPIC_NAME_CHARS
        && legal_chars
        && topic != "."
        && topic != "..";
    if ok {
        Ok(())
    } else {
        Err(LogError::InvalidConfig(format!(
            "topic {topic:?} is not a Kafka topic name (1 to {MAX_TOPIC_NAME_CHARS} of A-Z a-z 0-9 . _ -, not . or ..)"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(spec: &str) -> String {
        match KafkaConfig::from_spec(spec) {
            Err(LogError::InvalidConfig(msg)) => msg,
            other => panic!("{spec:?} was not refused: {other:?}"),
        }
    }

    #[test]
    fn a_single_broker_gets_the_default_settings() {
        let config = KafkaConfig::from_spec("kafka://127.0.0.1:9092").expect("spec");
        assert_eq!(config, KafkaConfig::new(["127.0.0.1:9092"]));
        assert_eq!(config.to_string(), "kafka://127.0.0.1:9092");
    }

    #[test]
    fn several_brokers_are_trimmed_and_may_repeat_the_scheme() {
        let config = KafkaConfig::from_spec("kafka://a:9092, kafka://b:9093,c:9094").expect("spec");
        assert_eq!(config.brokers, ["a:9092", "b:9093", "c:9094"]);
        assert_eq!(config.bootstrap_servers(), "a:9092,b:9093,c:9094");
        assert_eq!(config.to_string(), "kafka://a:9092,b:9093,c:9094");
    }

    #[test]
    fn a_broker_without_a_port_or_with_a_path_is_refused_naming_it() {
        for (spec, broker) in [
            ("kafka://a", "a"),
            ("kafka://a:9092,", ""),
            ("kafka://a:notaport", "a:notaport"),
            ("kafka://:9092", ":9092"),
            ("kafka://a:9092/x", "a:9092/x"),
        ] {
            let msg = refusal(spec);
            assert!(
                msg.contains("HOST:PORT") && msg.contains(&format!("{broker:?}")),
                "{spec}: {msg}"
            );
        }
    }

    #[test]
    fn an_option_is_refused_naming_it() {
        let msg = refusal("kafka://a:9092?partitions=3");
        assert!(msg.contains("partitions=3"), "{msg}");
    }

    #[test]
    fn zero_topic_partitions_or_limits_are_refused() {
        let config = KafkaConfig {
            topic_partitions: 0,
            ..KafkaConfig::new(["a:9092"])
        };
        assert!(
            matches!(config.validate(), Err(LogError::InvalidConfig(m)) if m.contains("topic_partitions"))
        );
        let config = KafkaConfig {
            limits: LogLimits {
                max_fetch_bytes: 0,
                ..LogLimits::default()
            },
            ..KafkaConfig::new(["a:9092"])
        };
        assert!(
            matches!(config.validate(), Err(LogError::InvalidConfig(m)) if m.contains("max_fetch_bytes"))
        );
    }

    #[test]
    fn kafka_topic_names_are_accepted() {
        for topic in [
            "t",
            "orders.v1",
            "orders_v1",
            "A-z.0_9",
            &"x".repeat(249),
            "...",
        ] {
            assert!(check_topic_name(topic).is_ok(), "{topic}");
        }
    }

    #[test]
    fn names_kafka_refuses_are_refused_naming_the_rule() {
        for topic in ["", ".", "..", "a b", "a/b", "ü", "a*", &"x".repeat(250)] {
            let Err(LogError::InvalidConfig(msg)) = check_topic_name(topic) else {
                panic!("{topic:?} accepted");
            };
            assert!(
                msg.contains(&format!("{topic:?}")) && msg.contains("A-Z a-z 0-9"),
                "{msg}"
            );
        }
    }
}
