//! The Kafka backend's settings (`--record-log kafka://HOST:PORT[,HOST:PORT...]`) and the
//! topic names Kafka accepts.

use std::collections::BTreeMap;

use super::super::{LogError, LogLimits};

/// Default timeout of one request to the brokers (metadata, offsets, topic creation,
/// group deletion), in milliseconds.
pub const DEFAULT_KAFKA_REQUEST_TIMEOUT_MS: u64 = 10_000;
/// Partitions of a topic the log creates (the first append to a topic that is absent).
pub const DEFAULT_TOPIC_PARTITIONS: i32 = 1;
/// Longest topic name Kafka accepts.
pub const MAX_TOPIC_NAME_CHARS: usize = 249;

/// Which kind of Kafka client a setting is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// The producer of appends.
    Producer,
    /// A sink's consumer.
    Consumer,
    /// The admin client (topics, groups).
    Admin,
}

impl Role {
    /// Its prefix in option and config keys: `producer`, `consumer`, `admin`.
    pub fn prefix(self) -> &'static str {
        match self {
            Role::Producer => "producer",
            Role::Consumer => "consumer",
            Role::Admin => "admin",
        }
    }

    /// The role and property of a passthrough option (`producer.linger.ms` ->
    /// (Producer, `linger.ms`)), as Kafka Connect's worker keys name them.
    fn of_passthrough(option: &str) -> Option<(Self, &str)> {
        [
            ("producer.", Role::Producer),
            ("consumer.", Role::Consumer),
            ("admin.", Role::Admin),
        ]
        .into_iter()
        .find_map(|(prefix, role)| {
            option
                .strip_prefix(prefix)
                .filter(|p| !p.is_empty())
                .map(|p| (role, p))
        })
    }
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
    /// Whether source connectors' topic creation settings (KIP-158) apply: Kafka
    /// Connect's worker setting `topic.creation.enable` (default true), given as the
    /// record log's option `?topic.creation.enable=false`.
    pub topic_creation_enable: bool,
    /// librdkafka settings of the connection to the brokers (TLS, SASL), from the record
    /// log's options: `security.protocol`, `ssl.*` file locations, `sasl.mechanism`,
    /// `sasl.username` and `sasl.password.file` (the password is read from that file when
    /// the clients are made, never given on the command line).
    pub security: BTreeMap<String, String>,
    /// librdkafka properties passed through to one kind of client (Kafka Connect's worker
    /// keys `producer.*`, `consumer.*`, `admin.*`), allowed by `passthrough_refusal`.
    pub passthrough: BTreeMap<(Role, String), String>,
    /// Which per-connector client overrides (`producer.override.*`,
    /// `consumer.override.*`, `admin.override.*`, KIP-458) a connector config may carry:
    /// Kafka Connect's worker setting `connector.client.config.override.policy`, given as
    /// the record log's option of that name (default `All`, Connect's since 3.0).
    pub override_policy: OverridePolicy,
}

/// Kafka Connect's `connector.client.config.override.policy` (KIP-458; its default became
/// `All` in Apache Kafka 3.0, KIP-732).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OverridePolicy {
    /// No override is allowed.
    None,
    /// Only the client's principal: `security.protocol`, `sasl.mechanism`,
    /// `sasl.username`, `sasl.password` (librdkafka's counterparts of Connect's
    /// `security.protocol`, `sasl.mechanism` and `sasl.jaas.config`).
    Principal,
    /// Every property a passthrough may set (those `passthrough_refusal` allows), and the
    /// principal's.
    #[default]
    All,
}

impl OverridePolicy {
    /// The policy named `name` (Connect's aliases `None`, `Principal`, `All`).
    fn parse(name: &str) -> Option<Self> {
        match name {
            "None" => Some(OverridePolicy::None),
            "Principal" => Some(OverridePolicy::Principal),
            "All" => Some(OverridePolicy::All),
            _ => None,
        }
    }

    /// Its name, as the option takes it.
    pub fn as_str(self) -> &'static str {
        match self {
            OverridePolicy::None => "None",
            OverridePolicy::Principal => "Principal",
            OverridePolicy::All => "All",
        }
    }
}

/// The librdkafka properties of a client's principal, which the `Principal` policy lets a
/// connector override.
const PRINCIPAL_PROPERTIES: [&str; 4] = [
    "security.protocol",
    "sasl.mechanism",
    "sasl.username",
    "sasl.password",
];

/// The role and property of a per-connector override key (`producer.override.linger.ms`
/// -> (Producer, `linger.ms`)); `None` for any other key. Pure.
pub fn client_override(key: &str) -> Option<(Role, &str)> {
    [
        ("producer.override.", Role::Producer),
        ("consumer.override.", Role::Consumer),
        ("admin.override.", Role::Admin),
    ]
    .into_iter()
    .find_map(|(prefix, role)| {
        key.strip_prefix(prefix)
            .filter(|p| !p.is_empty())
            .map(|p| (role, p))
    })
}

/// Why `policy` refuses a connector's override of librdkafka property `property`, or
/// `None` when it allows it. Pure.
pub fn override_refusal(policy: OverridePolicy, property: &str) -> Option<String> {
    let principal = PRINCIPAL_PROPERTIES.contains(&property);
    match policy {
        OverridePolicy::None => Some(
            "the executors' connector.client.config.override.policy is None: no client override is allowed".to_owned(),
        ),
        OverridePolicy::Principal if principal => None,
        OverridePolicy::Principal => Some(format!(
            "the executors' connector.client.config.override.policy is Principal: only {} may be overridden",
            PRINCIPAL_PROPERTIES.join(", ")
        )),
        OverridePolicy::All if principal => None,
        OverridePolicy::All => passthrough_refusal(property),
    }
}

/// The record log options that set the connection's security, and whether each names a
/// file that must exist.
const SECURITY_OPTIONS: [(&str, bool); 7] = [
    ("security.protocol", false),
    ("ssl.ca.location", true),
    ("ssl.certificate.location", true),
    ("ssl.key.location", true),
    ("sasl.mechanism", false),
    ("sasl.username", false),
    ("sasl.password.file", true),
];

/// librdkafka properties Wharf sets itself for its guarantees, which a passthrough may
/// not change: the brokers and security (set by the options above), the idempotent
/// producer with `acks=all` and Connect's partitioner (at least once, per-key order), the
/// consumer's group, manual commits and start position (offsets committed only after
/// `flush`), topic auto-creation (topics are created by the log).
const RESERVED: [&str; 14] = [
    "bootstrap.servers",
    "metadata.broker.list",
    "enable.idempotence",
    "acks",
    "request.required.acks",
    "partitioner",
    "delivery.timeout.ms",
    "group.id",
    "enable.auto.commit",
    "enable.auto.offset.store",
    "auto.offset.reset",
    "allow.auto.create.topics",
    "transactional.id",
    "isolation.level",
];

/// Why librdkafka property `name` may not be passed through, or `None` when it may: the
/// reserved properties, anything of the connection's security (its own options, so that
/// secrets stay out of the passthrough), and callbacks or plugins (code librdkafka would
/// load).
pub fn passthrough_refusal(name: &str) -> Option<String> {
    if RESERVED.contains(&name) {
        return Some(format!(
            "{name} is set by Wharf's Kafka log for its delivery guarantees"
        ));
    }
    if name.starts_with("security.")
        || name.starts_with("ssl.")
        || name.starts_with("ssl_")
        || name.starts_with("sasl.")
    {
        return Some(format!(
            "{name} is a security setting: use the record log's security options (docs/kafka.md)"
        ));
    }
    if name.starts_with("plugin.") || name.contains("_cb") || name == "opaque" {
        return Some(format!("{name} loads code or sets a callback"));
    }
    None
}

impl KafkaConfig {
    /// `brokers` with the default settings.
    pub fn new(brokers: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Self {
            brokers: brokers.into_iter().map(Into::into).collect(),
            request_timeout_ms: DEFAULT_KAFKA_REQUEST_TIMEOUT_MS,
            topic_partitions: DEFAULT_TOPIC_PARTITIONS,
            limits: LogLimits::default(),
            topic_creation_enable: true,
            security: BTreeMap::new(),
            passthrough: BTreeMap::new(),
            override_policy: OverridePolicy::default(),
        }
    }

    /// Reads the Kafka form of a record-log spec: `kafka://` then brokers separated by
    /// commas, each `HOST:PORT` (a later one may repeat `kafka://`), then options after
    /// `?`, `&`-separated: `topic.creation.enable=true|false`.
    ///
    /// # Errors
    /// [`LogError::InvalidConfig`] naming the broker or the option that is wrong.
    pub(in crate::log) fn from_spec(spec: &str) -> Result<Self, LogError> {
        let rest = spec.strip_prefix("kafka://").unwrap_or(spec);
        let (brokers, query) = rest.split_once('?').unwrap_or((rest, ""));
        let mut config = Self::new(
            brokers
                .split(',')
                .map(str::trim)
                .map(|b| b.strip_prefix("kafka://").unwrap_or(b)),
        );
        for option in query.split('&').filter(|o| !o.is_empty()) {
            match option.split_once('=') {
                Some(("topic.creation.enable", value)) => {
                    config.topic_creation_enable = match value {
                        "true" => true,
                        "false" => false,
                        _ => {
                            return Err(LogError::InvalidConfig(format!(
                                "record log option topic.creation.enable must be true or false, got {value:?}"
                            )));
                        }
                    };
                }
                Some(("connector.client.config.override.policy", value)) => {
                    config.override_policy = OverridePolicy::parse(value).ok_or_else(|| {
                        LogError::InvalidConfig(format!(
                            "record log option connector.client.config.override.policy must be None, Principal or All, got {value:?}"
                        ))
                    })?;
                }
                Some((name, value)) if SECURITY_OPTIONS.iter().any(|(o, _)| *o == name) => {
                    config
                        .security
                        .insert(name.to_owned(), security_value(name, value));
                }
                Some((name, value)) if Role::of_passthrough(name).is_some() => {
                    let Some((role, property)) = Role::of_passthrough(name) else {
                        continue;
                    };
                    if let Some(why) = passthrough_refusal(property) {
                        return Err(LogError::InvalidConfig(format!(
                            "record log option {name}: {why}"
                        )));
                    }
                    config
                        .passthrough
                        .insert((role, property.to_owned()), value.to_owned());
                }
                _ => {
                    let name = option.split_once('=').map_or(option, |(n, _)| n);
                    return Err(LogError::InvalidConfig(format!(
                        "unknown record log option {name:?} (a kafka:// log takes topic.creation.enable, connector.client.config.override.policy, security.protocol, ssl.ca.location, ssl.certificate.location, ssl.key.location, sasl.mechanism, sasl.username, sasl.password.file, and producer.*, consumer.*, admin.* librdkafka properties)"
                    )));
                }
            }
        }
        config.validate()?;
        Ok(config)
    }

    /// Checks the limits, the topic partitions, that every broker is `HOST:PORT`, the
    /// security options' values and that the files they name exist.
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
        for (name, value) in &self.security {
            let names_a_file = SECURITY_OPTIONS.iter().any(|(o, file)| o == name && *file);
            if names_a_file && !std::path::Path::new(value).is_file() {
                return Err(LogError::InvalidConfig(format!(
                    "record log option {name}: no file at {value:?}"
                )));
            }
            let known = match name.as_str() {
                "security.protocol" => {
                    ["plaintext", "ssl", "sasl_plaintext", "sasl_ssl"].contains(&value.as_str())
                }
                "sasl.mechanism" => {
                    ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"].contains(&value.as_str())
                }
                _ => true,
            };
            if !known {
                return Err(LogError::InvalidConfig(format!(
                    "record log option {name} does not take {value:?} (security.protocol: plaintext, ssl, sasl_plaintext, sasl_ssl; sasl.mechanism: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)"
                )));
            }
        }
        // librdkafka's own check of every passthrough property and value, at start
        // rather than when the first client of that role is made (a sink's consumer).
        for ((role, name), value) in &self.passthrough {
            librdkafka_refusal(name, value).map_or(Ok(()), |why| {
                Err(LogError::InvalidConfig(format!(
                    "record log option {}.{name}: {why}",
                    role.prefix()
                )))
            })?;
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

    /// The brokers lowercased, sorted, without repeats, joined by commas: where the
    /// ledger says a Kafka resource lives (the same on every executor of the cluster).
    pub fn canonical_brokers(&self) -> String {
        let mut brokers: Vec<String> = self
            .brokers
            .iter()
            .map(|b| b.to_ascii_lowercase())
            .collect();
        brokers.sort();
        brokers.dedup();
        brokers.join(",")
    }

    /// The librdkafka settings every client of `role` starts from: the brokers, the
    /// connection's security (the SASL password read from its file) and the role's
    /// passthrough properties.
    ///
    /// # Errors
    /// [`LogError::InvalidConfig`] when the password file cannot be read (naming the
    /// option, never the content).
    pub(super) fn client_config(&self, role: Role) -> Result<rdkafka::ClientConfig, LogError> {
        let mut config = rdkafka::ClientConfig::new();
        config.set("bootstrap.servers", self.bootstrap_servers());
        for (name, value) in &self.security {
            if name == "sasl.password.file" {
                let password = std::fs::read_to_string(value).map_err(|e| {
                    LogError::InvalidConfig(format!(
                        "record log option sasl.password.file {value:?}: {e}"
                    ))
                })?;
                config.set("sasl.password", password.trim_end_matches(['\r', '\n']));
            } else {
                config.set(name, value);
            }
        }
        for ((r, name), value) in &self.passthrough {
            if *r == role {
                config.set(name, value);
            }
        }
        Ok(config)
    }
}

impl std::fmt::Display for KafkaConfig {
    /// The spec form: `kafka://a:9092,b:9092` (and `?topic.creation.enable=false` when
    /// off).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "kafka://{}", self.brokers.join(","))?;
        let mut options: Vec<String> = Vec::new();
        if !self.topic_creation_enable {
            options.push("topic.creation.enable=false".into());
        }
        // No secret is ever an option's value: the password is in a file.
        options.extend(self.security.iter().map(|(k, v)| format!("{k}={v}")));
        if self.override_policy != OverridePolicy::default() {
            options.push(format!(
                "connector.client.config.override.policy={}",
                self.override_policy.as_str()
            ));
        }
        options.extend(
            self.passthrough
                .iter()
                .map(|((role, k), v)| format!("{}.{k}={v}", role.prefix())),
        );
        if !options.is_empty() {
            write!(f, "?{}", options.join("&"))?;
        }
        Ok(())
    }
}

/// Why librdkafka refuses property `name` set to `value` (an unknown property, a value
/// out of its range), or `None` when it takes it. Makes no client.
pub fn librdkafka_refusal(name: &str, value: &str) -> Option<String> {
    rdkafka::ClientConfig::new()
        .set(name, value)
        .create_native_config()
        .err()
        .map(|e| format!("librdkafka refuses it: {e}"))
}

impl KafkaConfig {
    /// The problems of a connector config's client overrides under this log's policy
    /// and librdkafka's checks, as `(key, why)`, by key; none for a config without
    /// overrides. Names no value.
    pub fn override_problems<'a>(
        &self,
        config: impl IntoIterator<Item = (&'a String, &'a String)>,
    ) -> Vec<(String, String)> {
        let mut problems: Vec<(String, String)> = config
            .into_iter()
            .filter_map(|(key, value)| {
                let (_, property) = client_override(key)?;
                override_refusal(self.override_policy, property)
                    .or_else(|| librdkafka_refusal(property, value))
                    .map(|why| (key.clone(), why))
            })
            .collect();
        problems.sort();
        problems
    }

    /// This log's settings with a connector's client overrides added to the passthrough
    /// (they win over the executor's); `None` when the config has none.
    ///
    /// # Errors
    /// [`LogError::InvalidConfig`] naming the first refused override key.
    pub fn with_overrides<'a>(
        &self,
        config: impl IntoIterator<Item = (&'a String, &'a String)> + Clone,
    ) -> Result<Option<Self>, LogError> {
        if let Some((key, why)) = self.override_problems(config.clone()).into_iter().next() {
            return Err(LogError::InvalidConfig(format!("{key}: {why}")));
        }
        let mut out = self.clone();
        let mut any = false;
        for (key, value) in config {
            if let Some((role, property)) = client_override(key) {
                out.passthrough
                    .insert((role, property.to_owned()), value.clone());
                any = true;
            }
        }
        Ok(any.then_some(out))
    }
}

/// The value of security option `name` as Wharf keeps it: `security.protocol` in lower
/// case (librdkafka reads its values case-insensitively, and Kafka's Java clients write
/// them upper case: `SASL_SSL`), every other value as given. Pure.
fn security_value(name: &str, value: &str) -> String {
    if name == "security.protocol" {
        value.to_ascii_lowercase()
    } else {
        value.to_owned()
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
        assert!(msg.contains("\"partitions\""), "{msg}");
    }

    #[test]
    fn topic_creation_can_be_switched_off_and_a_wrong_value_is_refused() {
        let config =
            KafkaConfig::from_spec("kafka://a:9092?topic.creation.enable=false").expect("spec");
        assert!(!config.topic_creation_enable);
        assert_eq!(
            config.to_string(),
            "kafka://a:9092?topic.creation.enable=false"
        );
        assert!(
            KafkaConfig::from_spec("kafka://a:9092?topic.creation.enable=true")
                .expect("spec")
                .topic_creation_enable
        );
        let msg = refusal("kafka://a:9092?topic.creation.enable=yes");
        assert!(
            msg.contains("topic.creation.enable") && msg.contains("yes"),
            "{msg}"
        );
    }

    #[test]
    fn security_options_are_taken_and_a_wrong_value_or_missing_file_is_refused() {
        let dir = tempfile::tempdir().expect("dir");
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, "x").expect("ca");
        let spec = format!(
            "kafka://a:9093?security.protocol=sasl_ssl&ssl.ca.location={}&sasl.mechanism=SCRAM-SHA-512&sasl.username=u",
            ca.display()
        );
        let config = KafkaConfig::from_spec(&spec).expect("spec");
        assert_eq!(
            config.security.get("sasl.mechanism").map(String::as_str),
            Some("SCRAM-SHA-512")
        );
        assert!(config.to_string().contains("security.protocol=sasl_ssl"));
        let msg = refusal("kafka://a:9093?security.protocol=tls");
        assert!(
            msg.contains("security.protocol") && msg.contains("\"tls\""),
            "{msg}"
        );
        let msg = refusal("kafka://a:9093?ssl.ca.location=/nonexistent/ca.pem");
        assert!(
            msg.contains("ssl.ca.location") && msg.contains("no file"),
            "{msg}"
        );
        let msg = refusal("kafka://a:9093?sasl.password=secret");
        assert!(
            msg.contains("\"sasl.password\"") && !msg.contains("secret"),
            "{msg}"
        );
    }

    #[test]
    fn the_security_protocol_is_taken_in_any_case() {
        for given in ["PLAINTEXT", "Sasl_Ssl", "ssl"] {
            let config =
                KafkaConfig::from_spec(&format!("kafka://a:9093?security.protocol={given}"))
                    .expect("spec");
            assert_eq!(
                config.security.get("security.protocol").map(String::as_str),
                Some(given.to_ascii_lowercase().as_str())
            );
        }
    }

    #[test]
    fn the_sasl_password_is_read_from_its_file_into_the_client_only() {
        let dir = tempfile::tempdir().expect("dir");
        let file = dir.path().join("password");
        std::fs::write(&file, "s3cret\n").expect("password");
        let spec = format!(
            "kafka://a:9093?security.protocol=sasl_plaintext&sasl.mechanism=PLAIN&sasl.username=u&sasl.password.file={}",
            file.display()
        );
        let config = KafkaConfig::from_spec(&spec).expect("spec");
        assert!(!config.to_string().contains("s3cret"));
        assert!(!format!("{config:?}").contains("s3cret"));
        let client = config.client_config(Role::Producer).expect("client");
        assert_eq!(client.get("sasl.password"), Some("s3cret"));
        assert_eq!(client.get("sasl.username"), Some("u"));
    }

    #[test]
    fn passthrough_properties_go_to_their_client_and_reserved_ones_are_refused() {
        let config = KafkaConfig::from_spec(
            "kafka://a:9092?producer.linger.ms=5&consumer.fetch.min.bytes=1024&admin.request.timeout.ms=3000",
        )
        .expect("spec");
        let producer = config.client_config(Role::Producer).expect("producer");
        assert_eq!(producer.get("linger.ms"), Some("5"));
        assert_eq!(producer.get("fetch.min.bytes"), None);
        let consumer = config.client_config(Role::Consumer).expect("consumer");
        assert_eq!(consumer.get("fetch.min.bytes"), Some("1024"));
        for (option, what) in [
            ("producer.acks=1", "delivery guarantees"),
            ("producer.enable.idempotence=false", "delivery guarantees"),
            ("consumer.enable.auto.commit=true", "delivery guarantees"),
            ("consumer.group.id=x", "delivery guarantees"),
            ("producer.sasl.password=x", "security setting"),
            ("admin.ssl.key.password=x", "security setting"),
            ("producer.plugin.library.paths=/x", "loads code"),
        ] {
            let msg = refusal(&format!("kafka://a:9092?{option}"));
            assert!(msg.contains(what), "{option}: {msg}");
        }
    }

    #[test]
    fn the_override_policy_none_refuses_every_override() {
        let why = override_refusal(OverridePolicy::None, "linger.ms").expect("refused");
        assert!(why.contains("None"), "{why}");
    }

    #[test]
    fn the_override_policy_principal_allows_only_the_principal() {
        assert_eq!(
            override_refusal(OverridePolicy::Principal, "sasl.username"),
            None
        );
        let why = override_refusal(OverridePolicy::Principal, "linger.ms").expect("refused");
        assert!(
            why.contains("Principal") && why.contains("sasl.username"),
            "{why}"
        );
    }

    #[test]
    fn the_override_policy_all_allows_what_a_passthrough_may_set_and_the_principal() {
        assert_eq!(override_refusal(OverridePolicy::All, "linger.ms"), None);
        assert_eq!(override_refusal(OverridePolicy::All, "sasl.password"), None);
        let why = override_refusal(OverridePolicy::All, "acks").expect("refused");
        assert!(why.contains("delivery guarantees"), "{why}");
        assert!(override_refusal(OverridePolicy::All, "ssl.key.location").is_some());
    }

    #[test]
    fn override_keys_name_their_client() {
        assert_eq!(
            client_override("producer.override.linger.ms"),
            Some((Role::Producer, "linger.ms"))
        );
        assert_eq!(
            client_override("consumer.override.fetch.min.bytes"),
            Some((Role::Consumer, "fetch.min.bytes"))
        );
        assert_eq!(
            client_override("admin.override.request.timeout.ms"),
            Some((Role::Admin, "request.timeout.ms"))
        );
        assert_eq!(client_override("producer.override."), None);
        assert_eq!(client_override("producer.linger.ms"), None);
    }

    #[test]
    fn a_connectors_overrides_are_checked_by_policy_then_by_librdkafka() {
        let config = KafkaConfig::new(["a:9092"]);
        let connector: BTreeMap<String, String> = [
            ("producer.override.linger.ms", "5"),
            ("producer.override.no.such.property", "1"),
            ("consumer.override.enable.auto.commit", "true"),
            ("topics", "t"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let problems = config.override_problems(&connector);
        let keys: Vec<&str> = problems.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            keys,
            [
                "consumer.override.enable.auto.commit",
                "producer.override.no.such.property"
            ]
        );
        assert!(problems[1].1.contains("librdkafka"), "{:?}", problems[1]);
        let refused = config.with_overrides(&connector).expect_err("refused");
        assert!(
            refused
                .to_string()
                .contains("consumer.override.enable.auto.commit")
        );
        let fine: BTreeMap<String, String> =
            [("producer.override.linger.ms".to_owned(), "5".to_owned())].into();
        let with = config
            .with_overrides(&fine)
            .expect("ok")
            .expect("overrides");
        let producer = with.client_config(Role::Producer).expect("producer");
        assert_eq!(producer.get("linger.ms"), Some("5"));
        assert!(
            config
                .with_overrides(&BTreeMap::new())
                .expect("ok")
                .is_none()
        );
    }

    #[test]
    fn the_override_policy_is_an_option_and_a_wrong_one_is_refused() {
        let config = KafkaConfig::from_spec(
            "kafka://a:9092?connector.client.config.override.policy=Principal",
        )
        .expect("spec");
        assert_eq!(config.override_policy, OverridePolicy::Principal);
        assert!(config.to_string().contains("override.policy=Principal"));
        let msg = refusal("kafka://a:9092?connector.client.config.override.policy=some");
        assert!(msg.contains("None, Principal or All"), "{msg}");
    }

    #[test]
    fn a_passthrough_property_librdkafka_does_not_know_is_refused_at_start() {
        let msg = refusal("kafka://a:9092?consumer.no.such.property=1");
        assert!(
            msg.contains("consumer.no.such.property") && msg.contains("librdkafka"),
            "{msg}"
        );
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
