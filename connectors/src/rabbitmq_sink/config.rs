//! The connector's and tasks' settings: the config definition, the checks of each key,
//! and [`Settings`] parsed from a config.

use std::str::FromStr;
use std::time::Duration;

use lapin::uri::{AMQPUri, AMQPUserInfo};
use lapin::{Connection, ConnectionProperties, ExchangeKind};
use wharf_sdk::{ConfigDef, ConfigKey, ConfigMap, ConfigType, Importance};

use super::{
    DEFAULT_RETRY_TIMEOUT_MS, DEFAULT_URI, EXCHANGE_TYPES, OWNER_QUEUE_PREFIX, RabbitError,
    default_queue, keys,
};

/// The parsed config of a connector or task.
#[derive(Clone)]
pub struct Settings {
    uri: AMQPUri,
    /// Queue the records go to.
    pub queue: String,
    /// Exchange, `None` for the default exchange.
    pub exchange: Option<String>,
    /// Type of the exchange when this connector declares it.
    pub exchange_type: String,
    /// Routing key of the messages and binding key.
    pub routing_key: String,
    /// How long a flush retries a lost connection.
    pub retry_timeout: Duration,
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settings")
            .field("broker", &self.target())
            .field("queue", &self.queue)
            .field("exchange", &self.exchange)
            .field("routing_key", &self.routing_key)
            .finish_non_exhaustive()
    }
}

pub(crate) fn invalid(key: &'static str, reason: impl Into<String>) -> RabbitError {
    RabbitError::InvalidConfig {
        key,
        reason: reason.into(),
    }
}

/// `rabbitmq.uri`: an `amqp://` or `amqps://` URI without user or password.
pub(crate) fn check_uri(value: &str) -> Result<(), String> {
    // The value is not echoed: a mistyped URI may hold a password.
    let uri = AMQPUri::from_str(value)
        .map_err(|_| "is not an AMQP URI (amqp://host:port/vhost)".to_owned())?;
    let default = AMQPUserInfo::default();
    if value.contains('@') || uri.authority.userinfo != default {
        return Err(
            "must not hold credentials: set rabbitmq.username and rabbitmq.password instead"
                .to_owned(),
        );
    }
    Ok(())
}

/// A queue or exchange name: at most 255 bytes, not `amq.`-reserved, not an owner record.
pub(crate) fn check_name(value: &str) -> Result<(), String> {
    if value.len() > 255 {
        Err(format!(
            "value is {} bytes long; RabbitMQ allows at most 255",
            value.len()
        ))
    } else if value.starts_with("amq.") {
        Err("value starts with \"amq.\", which RabbitMQ reserves".to_owned())
    } else if value.starts_with(OWNER_QUEUE_PREFIX) {
        Err(format!(
            "value starts with {OWNER_QUEUE_PREFIX:?}, which rabbitmq-sink uses for owner records"
        ))
    } else {
        Ok(())
    }
}

pub(crate) fn check_routing_key(value: &str) -> Result<(), String> {
    if value.len() > 255 {
        Err(format!(
            "value is {} bytes long; RabbitMQ allows at most 255",
            value.len()
        ))
    } else {
        Ok(())
    }
}

pub(crate) fn positive_ms(value: &str) -> Result<(), String> {
    match value.parse::<u64>() {
        Ok(n) if n > 0 => Ok(()),
        _ => Err("value must be a positive number of milliseconds".to_owned()),
    }
}

pub(crate) fn non_empty_list(value: &str) -> Result<(), String> {
    if value.split(',').any(|t| !t.trim().is_empty()) {
        Ok(())
    } else {
        Err("must name at least one topic".to_owned())
    }
}

/// The plugin's config keys.
pub fn config_def() -> ConfigDef {
    ConfigDef::new()
        .define(
            ConfigKey::new(keys::TOPICS, ConfigType::List, Importance::High, "Comma-separated topics whose records are published.")
                .required()
                .validator(non_empty_list),
        )
        .define(
            ConfigKey::new(keys::URI, ConfigType::String, Importance::High, "AMQP URI of the broker (amqp://host:port/vhost, vhost %2f for /), without credentials (a URI with them is refused). Shown redacted, in case one was pasted in.")
                .default_value(DEFAULT_URI)
                .validator(check_uri)
                // Redacted in responses and logs: a pasted URI may carry user:password@.
                .secret()
                .immutable(),
        )
        .define(
            ConfigKey::new(keys::USERNAME, ConfigType::String, Importance::High, "RabbitMQ user.")
                .default_value("guest"),
        )
        .define(
            ConfigKey::new(keys::PASSWORD, ConfigType::Password, Importance::High, "Password of rabbitmq.username; never shown.")
                .default_value("guest"),
        )
        .define(
            ConfigKey::new(keys::QUEUE, ConfigType::String, Importance::High, "Queue the records go to; default wharf.<connector>. Declared (durable) and owned by the connector when absent at start, deleted with the connector; a queue that already exists is used and never deleted.")
                .validator(check_name)
                .immutable(),
        )
        .define(
            ConfigKey::new(keys::EXCHANGE, ConfigType::String, Importance::Medium, "Exchange to publish through, bound to the queue with routing.key; empty: the default exchange. Declared and owned like the queue when absent.")
                .default_value("")
                .validator(|v| if v.is_empty() { Ok(()) } else { check_name(v) })
                .immutable(),
        )
        .define(
            ConfigKey::new(keys::EXCHANGE_TYPE, ConfigType::String, Importance::Low, "Type of the exchange when the connector declares it.")
                .default_value("direct")
                .one_of(&EXCHANGE_TYPES)
                .immutable(),
        )
        .define(
            ConfigKey::new(keys::ROUTING_KEY, ConfigType::String, Importance::Low, "Routing key of every message and binding key of the queue; default the queue name.")
                .validator(check_routing_key)
                .immutable(),
        )
        .define(
            ConfigKey::new(keys::RETRY_TIMEOUT_MS, ConfigType::Long, Importance::Low, "How long a flush keeps reconnecting and publishing again after the connection was lost (a broker restart), in milliseconds, before the task fails.")
                .default_value(&DEFAULT_RETRY_TIMEOUT_MS.to_string())
                .validator(positive_ms),
        )
}

impl Settings {
    /// Parses `config` of connector `connector`, every value checked as
    /// [`config_def`] does.
    ///
    /// # Errors
    /// [`RabbitError::InvalidConfig`] naming the key.
    pub fn parse(connector: &str, config: &ConfigMap) -> Result<Settings, RabbitError> {
        let get = |key: &str| config.get(key).map(|v| v.trim()).filter(|v| !v.is_empty());
        let checked = |key: &'static str, check: fn(&str) -> Result<(), String>| {
            get(key)
                .map(|v| check(v).map(|()| v.to_owned()).map_err(|r| invalid(key, r)))
                .transpose()
        };
        let uri = Self::broker_uri(config)?;
        match get(keys::TOPICS) {
            Some(t) => non_empty_list(t).map_err(|r| invalid(keys::TOPICS, r))?,
            None => return Err(invalid(keys::TOPICS, "missing required value")),
        }
        let queue = checked(keys::QUEUE, check_name)?.unwrap_or_else(|| default_queue(connector));
        check_name(&queue).map_err(|r| {
            invalid(
                keys::QUEUE,
                format!("the default queue name from the connector name: {r}"),
            )
        })?;
        let exchange = checked(keys::EXCHANGE, check_name)?;
        let exchange_type = get(keys::EXCHANGE_TYPE).unwrap_or("direct").to_owned();
        if !EXCHANGE_TYPES.contains(&exchange_type.as_str()) {
            return Err(invalid(
                keys::EXCHANGE_TYPE,
                format!("value is not one of: {}", EXCHANGE_TYPES.join(", ")),
            ));
        }
        let routing_key =
            checked(keys::ROUTING_KEY, check_routing_key)?.unwrap_or_else(|| queue.clone());
        let retry_ms = checked(keys::RETRY_TIMEOUT_MS, positive_ms)?
            .map(|v| v.parse::<u64>().unwrap_or(DEFAULT_RETRY_TIMEOUT_MS))
            .unwrap_or(DEFAULT_RETRY_TIMEOUT_MS);
        Ok(Settings {
            uri,
            queue,
            exchange,
            exchange_type,
            routing_key,
            retry_timeout: Duration::from_millis(retry_ms),
        })
    }

    /// The broker URI with the credentials, from `rabbitmq.uri`, `rabbitmq.username`
    /// and `rabbitmq.password`.
    ///
    /// # Errors
    /// [`RabbitError::InvalidConfig`] naming `rabbitmq.uri`.
    fn broker_uri(config: &ConfigMap) -> Result<AMQPUri, RabbitError> {
        let get = |key: &str| config.get(key).map(|v| v.trim()).filter(|v| !v.is_empty());
        let text = get(keys::URI).unwrap_or(DEFAULT_URI);
        check_uri(text).map_err(|r| invalid(keys::URI, r))?;
        let mut uri = AMQPUri::from_str(text).map_err(|e| invalid(keys::URI, e))?;
        uri.authority.userinfo = AMQPUserInfo {
            username: get(keys::USERNAME).unwrap_or("guest").to_owned(),
            password: config
                .get(keys::PASSWORD)
                .cloned()
                .unwrap_or_else(|| "guest".to_owned()),
        };
        Ok(uri)
    }

    /// What a deletion's cleanup needs when the full config does not parse (a value the
    /// control plane could not check at create, such as `queue`): only where the broker
    /// is. The owner record names what to delete, so the other keys do not matter.
    ///
    /// # Errors
    /// [`RabbitError::InvalidConfig`] naming `rabbitmq.uri`.
    pub fn for_cleanup(connector: &str, config: &ConfigMap) -> Result<Settings, RabbitError> {
        Ok(Settings {
            uri: Self::broker_uri(config)?,
            queue: default_queue(connector),
            exchange: None,
            exchange_type: "direct".to_owned(),
            routing_key: default_queue(connector),
            retry_timeout: Duration::from_millis(DEFAULT_RETRY_TIMEOUT_MS),
        })
    }

    /// Where the broker is, for the resource ledger: `host:port` and the vhost (never
    /// the credentials).
    pub fn locator(&self) -> wharf_sdk::Locator {
        wharf_sdk::Locator::default()
            .host(format!(
                "{}:{}",
                self.uri.authority.host, self.uri.authority.port
            ))
            .vhost(self.uri.vhost.clone())
    }

    /// Host, port and vhost, for messages (never the credentials).
    pub fn target(&self) -> String {
        format!(
            "{}:{} vhost {:?}",
            self.uri.authority.host, self.uri.authority.port, self.uri.vhost
        )
    }

    pub(crate) fn exchange_kind(&self) -> ExchangeKind {
        match self.exchange_type.as_str() {
            "fanout" => ExchangeKind::Fanout,
            "topic" => ExchangeKind::Topic,
            "headers" => ExchangeKind::Headers,
            _ => ExchangeKind::Direct,
        }
    }

    /// Opens a connection.
    ///
    /// # Errors
    /// [`RabbitError::Connect`].
    pub async fn connect(&self) -> Result<Connection, RabbitError> {
        Connection::connect_uri(self.uri.clone(), ConnectionProperties::default())
            .await
            .map_err(|e| RabbitError::Connect {
                target: self.target(),
                detail: e.to_string(),
            })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn config(pairs: &[(&str, &str)]) -> ConfigMap {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn defaults_name_the_queue_from_the_connector() {
        let s = Settings::parse("orders", &config(&[("topics", "t")])).unwrap();
        assert_eq!(s.queue, "wharf.orders");
        assert_eq!(s.routing_key, "wharf.orders");
        assert_eq!(s.exchange, None);
        assert_eq!(
            s.retry_timeout,
            Duration::from_millis(DEFAULT_RETRY_TIMEOUT_MS)
        );
    }

    #[test]
    fn bad_values_name_their_key() {
        let cases: [(&[(&str, &str)], &str); 6] = [
            (&[], keys::TOPICS),
            (&[("topics", "t"), ("queue", "amq.x")], keys::QUEUE),
            (&[("topics", "t"), ("queue", "wharf.owner.x")], keys::QUEUE),
            (
                &[("topics", "t"), ("rabbitmq.uri", "amqp://u:p@h/")],
                keys::URI,
            ),
            (
                &[("topics", "t"), ("exchange.type", "round-robin")],
                keys::EXCHANGE_TYPE,
            ),
            (
                &[("topics", "t"), ("retry.timeout.ms", "0")],
                keys::RETRY_TIMEOUT_MS,
            ),
        ];
        for (pairs, key) in cases {
            match Settings::parse("c", &config(pairs)) {
                Err(RabbitError::InvalidConfig { key: k, .. }) => assert_eq!(k, key, "{pairs:?}"),
                other => panic!("{pairs:?}: expected an error on {key}, got {other:?}"),
            }
        }
        let long = "q".repeat(300);
        assert!(matches!(
            Settings::parse(&long, &config(&[("topics", "t")])),
            Err(RabbitError::InvalidConfig {
                key: keys::QUEUE,
                ..
            })
        ));
    }

    #[test]
    fn a_uri_with_credentials_is_refused_without_echoing_them() {
        let values = config_def().validate(&config(&[
            ("topics", "t"),
            ("rabbitmq.uri", "amqp://bob:s3cret@h:5672/%2f"),
        ]));
        let uri = values.iter().find(|v| v.name == keys::URI).unwrap();
        assert_eq!(uri.errors.len(), 1);
        assert_eq!(uri.value.as_deref(), Some(wharf_sdk::REDACTED));
        assert!(!uri.errors[0].contains("s3cret"), "{:?}", uri.errors);
        let s = Settings::parse(
            "c",
            &config(&[("topics", "t"), ("rabbitmq.password", "s3cret")]),
        )
        .unwrap();
        assert!(!format!("{s:?}").contains("s3cret"));
    }

    #[test]
    fn a_cleanup_needs_only_the_broker_address() {
        // A value only the plugin checks (queue) is wrong: the full parse fails, the
        // cleanup still knows where to look for the owner record.
        let c = config(&[
            ("topics", "t"),
            ("queue", "amq.x"),
            ("rabbitmq.uri", "amqp://h:5673/v"),
        ]);
        assert!(Settings::parse("c", &c).is_err());
        let s = Settings::for_cleanup("c", &c).unwrap();
        assert_eq!(s.target(), "h:5673 vhost \"v\"");
        let creds = config(&[("rabbitmq.uri", "amqp://u:p@h/")]);
        assert!(matches!(
            Settings::for_cleanup("c", &creds),
            Err(RabbitError::InvalidConfig { key: keys::URI, .. })
        ));
    }
}
