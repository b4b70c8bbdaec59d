//! `rabbitmq-sink`: the queue-provisioning sink of KIP-883's motivation. It writes every
//! record to a RabbitMQ queue, which it declares itself at connector start and deletes
//! when (and only when) the connector is deleted.
//!
//! Lifecycle (KIP-883/KIP-901, docs/contract.md):
//! - the connector's start declares the queue (`queue`, default `wharf.<connector>`),
//!   and the exchange and binding when `exchange` is set, all durable; a cleanup-only
//!   start declares nothing;
//! - a task publishes each record as a persistent message with publisher confirms, and
//!   its `flush` returns only once the broker confirmed every message put since the last
//!   flush, so Wharf acknowledges records only after RabbitMQ holds them. A lost
//!   connection (a broker restart) is retried inside `flush` until `retry.timeout.ms`:
//!   unconfirmed records are published again (at least once);
//! - `stop_with(false)` closes connections and leaves every queue, exchange and message;
//! - the connector's `stop_with(true)` deletes what this incarnation declared, and
//!   never a queue or exchange that existed before (the user's) or that another
//!   incarnation declared.
//!
//! Ownership: RabbitMQ has no comment or owner field a client can read back without the
//! management plugin, so the connector keeps an owner record in the broker itself: a
//! durable queue [`owner_queue`] (`wharf.owner.<connector>`) holding one persistent
//! message, the JSON [`OwnerRecord`] (plugin, connector, incarnation, and which queue and
//! exchange it declared). It is written before anything is declared and deleted last, so
//! a start that failed halfway and a cleanup that failed halfway both leave it for the
//! retried cleanup. [`decide_start`] and [`decide_cleanup`] are the one place ownership is
//! decided. The declared queue also carries the arguments `x-wharf-connector` and
//! `x-wharf-incarnation`, so `rabbitmqctl list_queues name arguments` shows who made it.

use std::collections::BTreeMap;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lapin::options::{
    BasicGetOptions, BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions,
    ExchangeDeleteOptions, QueueBindOptions, QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::protocol::{AMQPErrorKind, AMQPSoftError};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::uri::{AMQPUri, AMQPUserInfo};
use lapin::{
    BasicProperties, Channel, Connection, ConnectionProperties, ErrorKind, ExchangeKind,
    PublisherConfirm,
};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;
use wharf_sdk::{
    ConfigDef, ConfigKey, ConfigMap, ConfigType, Connector, ConnectorContext, Importance, Plugin,
    PluginResult, SinkRecord, SinkTask, TaskContext, TaskFactory,
};

/// Plugin name, used as `connector.class` and in owner records.
pub const PLUGIN_NAME: &str = "rabbitmq-sink";

/// Prefix of the owner-record queue names (see [`owner_queue`]).
pub const OWNER_QUEUE_PREFIX: &str = "wharf.owner.";

/// Default of `rabbitmq.uri`: the broker on loopback, default vhost.
pub const DEFAULT_URI: &str = "amqp://127.0.0.1:5672/%2f";

/// Default of `retry.timeout.ms`: how long a flush keeps reconnecting, in milliseconds.
pub const DEFAULT_RETRY_TIMEOUT_MS: u64 = 60_000;

/// Longest wait between two reconnection attempts, in milliseconds.
const MAX_BACKOFF_MS: u64 = 2_000;

/// Config keys.
pub mod keys {
    /// AMQP URI of the broker, without credentials.
    pub const URI: &str = "rabbitmq.uri";
    /// User name.
    pub const USERNAME: &str = "rabbitmq.username";
    /// Password (secret).
    pub const PASSWORD: &str = "rabbitmq.password";
    /// Topics to read, comma-separated.
    pub const TOPICS: &str = "topics";
    /// Queue the records go to; default `wharf.<connector>`.
    pub const QUEUE: &str = "queue";
    /// Exchange to publish through; empty: the default exchange, straight to the queue.
    pub const EXCHANGE: &str = "exchange";
    /// Type of a declared exchange.
    pub const EXCHANGE_TYPE: &str = "exchange.type";
    /// Routing key of every message and binding key of the queue; default the queue name.
    pub const ROUTING_KEY: &str = "routing.key";
    /// How long a flush keeps reconnecting after a lost connection, in milliseconds.
    pub const RETRY_TIMEOUT_MS: &str = "retry.timeout.ms";
}

/// Exchange types accepted by `exchange.type`.
pub const EXCHANGE_TYPES: [&str; 4] = ["direct", "fanout", "topic", "headers"];

/// The queue a connector declares when `queue` is not set.
pub fn default_queue(connector: &str) -> String {
    format!("wharf.{connector}")
}

/// The queue holding connector `connector`'s owner record.
pub fn owner_queue(connector: &str) -> String {
    format!("{OWNER_QUEUE_PREFIX}{connector}")
}

/// Errors of `rabbitmq-sink`. Messages never hold the password.
#[derive(Debug, thiserror::Error)]
pub enum RabbitError {
    /// A config value is missing or wrong.
    #[error("invalid config {key}: {reason}")]
    InvalidConfig {
        /// Offending key.
        key: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// The broker could not be reached or refused the login.
    #[error("cannot connect to RabbitMQ at {target}: {detail}")]
    Connect {
        /// Host, port and vhost (no credentials).
        target: String,
        /// Client error text.
        detail: String,
    },
    /// A broker operation failed.
    #[error("RabbitMQ refused {step}: {detail}")]
    Broker {
        /// What was being done.
        step: String,
        /// Broker or client error text.
        detail: String,
    },
    /// The connector may not start on what the broker holds.
    #[error("{0}")]
    Refused(String),
    /// Messages were not confirmed in time (the broker stayed unreachable).
    #[error(
        "{count} records not confirmed by RabbitMQ after retrying for {waited_ms} ms: {detail}"
    )]
    Unconfirmed {
        /// Records still unconfirmed.
        count: usize,
        /// How long the flush retried, in milliseconds.
        waited_ms: u64,
        /// Last error.
        detail: String,
    },
    /// The broker returned a message as unroutable: the queue or binding is gone.
    #[error(
        "RabbitMQ returned a record as unroutable ({reply}): queue {queue:?} or its binding is gone"
    )]
    Unroutable {
        /// The queue the records go to.
        queue: String,
        /// Reply code and text.
        reply: String,
    },
    /// A call came before a successful start.
    #[error("{call} called before a successful start")]
    NotStarted {
        /// The call.
        call: &'static str,
    },
}

// ---- config ----------------------------------------------------------------------

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

fn invalid(key: &'static str, reason: impl Into<String>) -> RabbitError {
    RabbitError::InvalidConfig {
        key,
        reason: reason.into(),
    }
}

/// `rabbitmq.uri`: an `amqp://` or `amqps://` URI without user or password.
fn check_uri(value: &str) -> Result<(), String> {
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
fn check_name(value: &str) -> Result<(), String> {
    if value.len() > 255 {
        Err(format!(
            "value is {} bytes long; RabbitMQ allows at most 255",
            value.len()
        ))
    } else if value.starts_with("amq.") {
        Err(format!(
            "value {value:?} starts with \"amq.\", which RabbitMQ reserves"
        ))
    } else if value.starts_with(OWNER_QUEUE_PREFIX) {
        Err(format!(
            "value {value:?} starts with {OWNER_QUEUE_PREFIX:?}, which rabbitmq-sink uses for owner records"
        ))
    } else {
        Ok(())
    }
}

fn check_routing_key(value: &str) -> Result<(), String> {
    if value.len() > 255 {
        Err(format!(
            "value is {} bytes long; RabbitMQ allows at most 255",
            value.len()
        ))
    } else {
        Ok(())
    }
}

fn positive_ms(value: &str) -> Result<(), String> {
    match value.parse::<u64>() {
        Ok(n) if n > 0 => Ok(()),
        _ => Err(format!(
            "value {value:?} must be a positive number of milliseconds"
        )),
    }
}

fn non_empty_list(value: &str) -> Result<(), String> {
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
                format!(
                    "value {exchange_type:?} is not one of: {}",
                    EXCHANGE_TYPES.join(", ")
                ),
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

    /// Host, port and vhost, for messages (never the credentials).
    pub fn target(&self) -> String {
        format!(
            "{}:{} vhost {:?}",
            self.uri.authority.host, self.uri.authority.port, self.uri.vhost
        )
    }

    fn exchange_kind(&self) -> ExchangeKind {
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

// ---- ownership -------------------------------------------------------------------

/// The owner record kept in [`owner_queue`], as JSON.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnerRecord {
    /// Plugin that wrote it (`rabbitmq-sink`).
    pub wharf: String,
    /// Connector that owns the objects.
    pub connector: String,
    /// Incarnation of that connector.
    pub incarnation: String,
    /// The queue it declared, `None` when the queue existed before (the user's).
    pub queue: Option<String>,
    /// The exchange it declared, `None` when none is used or it existed before.
    pub exchange: Option<String>,
}

/// Who asks: this incarnation of this connector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// Connector name.
    pub connector: String,
    /// Connector incarnation ([`ConnectorContext::incarnation`]).
    pub incarnation: String,
}

/// What the broker holds at [`owner_queue`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Marker {
    /// No owner-record queue.
    Absent,
    /// The queue exists but holds no readable owner record (somebody else's queue).
    Unreadable,
    /// The queue holds this record.
    Owned(OwnerRecord),
}

/// What the broker holds at the configured names, when the connector starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Existing {
    /// The queue exists.
    pub queue: bool,
    /// An exchange is configured and exists.
    pub exchange: bool,
}

/// What a connector start does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartPlan {
    /// First start of this incarnation: write this record, then declare what it names.
    Create(OwnerRecord),
    /// Ours already (a restart, a reconfiguration): declare again what the record names
    /// (idempotent), use the rest as it is.
    Reuse(OwnerRecord),
    /// Declare nothing and fail the start with this text.
    Refuse(String),
}

/// The ownership decision at connector start.
pub fn decide_start(
    marker: &Marker,
    claim: &Claim,
    existing: Existing,
    settings: &Settings,
) -> StartPlan {
    let owner_queue = owner_queue(&claim.connector);
    match marker {
        Marker::Absent => StartPlan::Create(OwnerRecord {
            wharf: PLUGIN_NAME.to_owned(),
            connector: claim.connector.clone(),
            incarnation: claim.incarnation.clone(),
            queue: (!existing.queue).then(|| settings.queue.clone()),
            exchange: settings.exchange.clone().filter(|_| !existing.exchange),
        }),
        Marker::Unreadable => StartPlan::Refuse(format!(
            "queue {owner_queue:?} exists but holds no rabbitmq-sink owner record: it is not this connector's; delete it or rename the connector"
        )),
        Marker::Owned(r) if r.wharf != PLUGIN_NAME || r.connector != claim.connector => {
            StartPlan::Refuse(format!(
                "queue {owner_queue:?} holds the owner record of {} connector {:?}",
                r.wharf, r.connector
            ))
        }
        Marker::Owned(r) if r.incarnation == claim.incarnation => StartPlan::Reuse(r.clone()),
        Marker::Owned(r) => StartPlan::Refuse(format!(
            "the RabbitMQ objects of connector {:?} are owned by an earlier incarnation ({}) that was deleted with keep_resources (or whose cleanup has not finished): delete queue {owner_queue:?} (and the queue it names) to start afresh",
            claim.connector, r.incarnation
        )),
    }
}

/// What a deletion's cleanup does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CleanupPlan {
    /// Ours: delete the queue and exchange the record names, then the record.
    Delete(OwnerRecord),
    /// No owner record: nothing was declared (or the cleanup already ran).
    Nothing,
    /// Not this incarnation's: delete nothing, say why.
    Leave(String),
}

/// The ownership decision at `stop_with(true)`.
pub fn decide_cleanup(marker: &Marker, claim: &Claim) -> CleanupPlan {
    match marker {
        Marker::Absent => CleanupPlan::Nothing,
        Marker::Unreadable => CleanupPlan::Leave(format!(
            "queue {:?} holds no rabbitmq-sink owner record",
            owner_queue(&claim.connector)
        )),
        Marker::Owned(r) if r.wharf != PLUGIN_NAME || r.connector != claim.connector => {
            CleanupPlan::Leave(format!("owned by {} connector {:?}", r.wharf, r.connector))
        }
        Marker::Owned(r) if r.incarnation == claim.incarnation => CleanupPlan::Delete(r.clone()),
        Marker::Owned(r) => CleanupPlan::Leave(format!(
            "owned by another incarnation ({}) of this connector",
            r.incarnation
        )),
    }
}

// ---- broker operations -----------------------------------------------------------

fn is_not_found(e: &lapin::Error) -> bool {
    matches!(e.kind(), ErrorKind::ProtocolError(p)
        if matches!(p.kind(), AMQPErrorKind::Soft(AMQPSoftError::NOTFOUND)))
}

fn broker(step: impl Into<String>) -> impl FnOnce(lapin::Error) -> RabbitError {
    let step = step.into();
    move |e| RabbitError::Broker {
        step,
        detail: e.to_string(),
    }
}

/// One broker connection for a connector's start or cleanup. A failed passive declare
/// closes its channel, so every probe gets a channel of its own.
pub struct Broker {
    conn: Connection,
}

impl Broker {
    /// Connects.
    ///
    /// # Errors
    /// [`RabbitError::Connect`].
    pub async fn open(settings: &Settings) -> Result<Broker, RabbitError> {
        Ok(Broker {
            conn: settings.connect().await?,
        })
    }

    async fn channel(&self) -> Result<Channel, RabbitError> {
        self.conn
            .create_channel()
            .await
            .map_err(broker("opening a channel"))
    }

    /// Whether queue `name` exists (a passive declare).
    ///
    /// # Errors
    /// [`RabbitError::Broker`] on anything but NOT_FOUND.
    pub async fn queue_exists(&self, name: &str) -> Result<bool, RabbitError> {
        let ch = self.channel().await?;
        match ch
            .queue_declare(
                name.into(),
                QueueDeclareOptions::default().passive(),
                FieldTable::default(),
            )
            .await
        {
            Ok(_) => {
                let _ = ch.close(200, "done".into()).await;
                Ok(true)
            }
            Err(e) if is_not_found(&e) => Ok(false),
            Err(e) => Err(broker(format!("checking queue {name:?}"))(e)),
        }
    }

    /// Whether exchange `name` exists (a passive declare).
    ///
    /// # Errors
    /// [`RabbitError::Broker`] on anything but NOT_FOUND.
    pub async fn exchange_exists(&self, name: &str) -> Result<bool, RabbitError> {
        let ch = self.channel().await?;
        let options = ExchangeDeclareOptions {
            passive: true,
            ..ExchangeDeclareOptions::default()
        };
        match ch
            .exchange_declare(
                name.into(),
                ExchangeKind::Direct,
                options,
                FieldTable::default(),
            )
            .await
        {
            Ok(()) => {
                let _ = ch.close(200, "done".into()).await;
                Ok(true)
            }
            Err(e) if is_not_found(&e) => Ok(false),
            Err(e) => Err(broker(format!("checking exchange {name:?}"))(e)),
        }
    }

    /// Reads the owner record of `connector` without removing it (the message is taken
    /// unacknowledged and goes back when the channel closes).
    ///
    /// # Errors
    /// [`RabbitError::Broker`].
    pub async fn marker(&self, connector: &str) -> Result<Marker, RabbitError> {
        let name = owner_queue(connector);
        if !self.queue_exists(&name).await? {
            return Ok(Marker::Absent);
        }
        // A concurrent reader holds the message unacknowledged for a moment: look again
        // a few times before calling the queue unreadable.
        for attempt in 0..5u64 {
            let ch = self.channel().await?;
            let got = ch
                .basic_get(name.as_str().into(), BasicGetOptions { no_ack: false })
                .await;
            let found = match got {
                Ok(Some(m)) => Some(m.delivery.data.clone()),
                Ok(None) => None,
                Err(e) if is_not_found(&e) => return Ok(Marker::Absent),
                Err(e) => return Err(broker(format!("reading owner record {name:?}"))(e)),
            };
            // Closing the channel returns the unacknowledged message to the queue.
            let _ = ch.close(200, "done".into()).await;
            if let Some(data) = found {
                return Ok(serde_json::from_slice::<OwnerRecord>(&data)
                    .map(Marker::Owned)
                    .unwrap_or(Marker::Unreadable));
            }
            tokio::time::sleep(Duration::from_millis(50 * (attempt + 1))).await;
        }
        Ok(Marker::Unreadable)
    }

    /// Declares the owner-record queue and publishes `record` into it, confirmed.
    async fn write_marker(&self, record: &OwnerRecord) -> Result<(), RabbitError> {
        let name = owner_queue(&record.connector);
        let ch = self.channel().await?;
        ch.confirm_select(ConfirmSelectOptions::default())
            .await
            .map_err(broker("enabling publisher confirms"))?;
        ch.queue_declare(
            name.as_str().into(),
            QueueDeclareOptions::durable(),
            FieldTable::default(),
        )
        .await
        .map_err(broker(format!("declaring owner record queue {name:?}")))?;
        let body = serde_json::to_vec(record).unwrap_or_default();
        let confirm = ch
            .basic_publish(
                "".into(),
                name.as_str().into(),
                BasicPublishOptions {
                    mandatory: true,
                    ..BasicPublishOptions::default()
                },
                &body,
                BasicProperties::default().with_delivery_mode(2),
            )
            .await
            .map_err(broker("writing the owner record"))?
            .await
            .map_err(broker("writing the owner record"))?;
        let _ = ch.close(200, "done".into()).await;
        if confirm.is_ack() && confirm.take_message().is_none() {
            Ok(())
        } else {
            Err(RabbitError::Broker {
                step: "writing the owner record".to_owned(),
                detail: "the broker did not confirm it".to_owned(),
            })
        }
    }

    /// Declares (idempotently) what `record` says this connector owns, and the binding.
    async fn declare(
        &self,
        record: &OwnerRecord,
        settings: &Settings,
        claim: &Claim,
    ) -> Result<(), RabbitError> {
        let ch = self.channel().await?;
        if let Some(exchange) = &record.exchange {
            ch.exchange_declare(
                exchange.as_str().into(),
                settings.exchange_kind(),
                ExchangeDeclareOptions {
                    durable: true,
                    ..ExchangeDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await
            .map_err(broker(format!("declaring exchange {exchange:?}")))?;
        }
        if let Some(queue) = &record.queue {
            let mut args = FieldTable::default();
            args.insert(
                "x-wharf-connector".into(),
                AMQPValue::LongString(LongString::from(claim.connector.as_bytes().to_vec())),
            );
            args.insert(
                "x-wharf-incarnation".into(),
                AMQPValue::LongString(LongString::from(claim.incarnation.as_bytes().to_vec())),
            );
            ch.queue_declare(queue.as_str().into(), QueueDeclareOptions::durable(), args)
                .await
                .map_err(broker(format!("declaring queue {queue:?}")))?;
        } else if !self.queue_exists(&settings.queue).await? {
            return Err(RabbitError::Refused(format!(
                "queue {:?} existed when this connector was created and was not declared by it, and it is gone now: declare it again, or delete and re-create the connector",
                settings.queue
            )));
        }
        if let Some(exchange) = &settings.exchange {
            ch.queue_bind(
                settings.queue.as_str().into(),
                exchange.as_str().into(),
                settings.routing_key.as_str().into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
            .map_err(broker(format!(
                "binding queue {:?} to exchange {exchange:?}",
                settings.queue
            )))?;
        }
        let _ = ch.close(200, "done".into()).await;
        Ok(())
    }

    /// Deletes what `record` names, then the record itself. Each step tolerates an
    /// object already gone.
    async fn delete_owned(&self, record: &OwnerRecord) -> Result<(), RabbitError> {
        if let Some(queue) = &record.queue {
            self.delete_queue(queue).await?;
        }
        if let Some(exchange) = &record.exchange {
            let ch = self.channel().await?;
            match ch
                .exchange_delete(exchange.as_str().into(), ExchangeDeleteOptions::default())
                .await
            {
                Ok(()) => {
                    let _ = ch.close(200, "done".into()).await;
                }
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(broker(format!("deleting exchange {exchange:?}"))(e)),
            }
        }
        // Last: while it exists, a retried cleanup still knows what is ours.
        self.delete_queue(&owner_queue(&record.connector)).await
    }

    async fn delete_queue(&self, name: &str) -> Result<(), RabbitError> {
        let ch = self.channel().await?;
        match ch
            .queue_delete(name.into(), QueueDeleteOptions::default())
            .await
        {
            Ok(_) => {
                let _ = ch.close(200, "done".into()).await;
                Ok(())
            }
            Err(e) if is_not_found(&e) => Ok(()),
            Err(e) => Err(broker(format!("deleting queue {name:?}"))(e)),
        }
    }

    /// Closes the connection.
    pub async fn close(self) {
        let _ = self.conn.close(200, "done".into()).await;
    }
}

// ---- the plugin ------------------------------------------------------------------

/// The `rabbitmq-sink` plugin.
pub fn plugin() -> Plugin {
    Plugin {
        name: PLUGIN_NAME.to_owned(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        config_def: config_def(),
        connector: Arc::new(|| Box::new(RabbitConnector::default()) as Box<dyn Connector>),
        task: TaskFactory::Sink(Arc::new(|| {
            Box::new(RabbitSinkTask::default()) as Box<dyn SinkTask>
        })),
    }
}

/// The connector instance: declares at start, deletes at `stop_with(true)`.
#[derive(Debug, Default)]
pub struct RabbitConnector {
    settings: Option<Settings>,
    claim: Option<Claim>,
    config: ConfigMap,
}

#[async_trait]
impl Connector for RabbitConnector {
    async fn start(&mut self, ctx: ConnectorContext, config: ConfigMap) -> PluginResult<()> {
        // Kept before anything can fail: a start that fails (even on its config) is still
        // followed by a cleanup that must find the owner record.
        self.config = config;
        let claim = self.claim.insert(Claim {
            connector: ctx.connector.clone(),
            incarnation: ctx.incarnation.clone(),
        });
        let settings = self
            .settings
            .insert(Settings::parse(&ctx.connector, &self.config)?);
        if ctx.cleanup_only {
            return Ok(());
        }
        let b = Broker::open(settings).await?;
        let result = async {
            let marker = b.marker(&claim.connector).await?;
            let existing = Existing {
                queue: b.queue_exists(&settings.queue).await?,
                exchange: match &settings.exchange {
                    Some(x) => b.exchange_exists(x).await?,
                    None => false,
                },
            };
            match decide_start(&marker, claim, existing, settings) {
                StartPlan::Create(record) => {
                    b.write_marker(&record).await?;
                    b.declare(&record, settings, claim).await
                }
                StartPlan::Reuse(record) => b.declare(&record, settings, claim).await,
                StartPlan::Refuse(why) => Err(RabbitError::Refused(why)),
            }
        }
        .await;
        b.close().await;
        result?;
        tracing::info!(connector = %claim.connector, queue = %settings.queue, "rabbitmq-sink objects declared");
        Ok(())
    }

    async fn task_configs(&mut self, max_tasks: u32) -> PluginResult<Vec<ConfigMap>> {
        if self.settings.is_none() {
            return Err(RabbitError::NotStarted {
                call: "task_configs",
            }
            .into());
        }
        Ok((0..max_tasks).map(|_| self.config.clone()).collect())
    }

    async fn stop_with(&mut self, connector_deleted: bool) -> PluginResult<()> {
        if !connector_deleted {
            // No connection is held between calls; every object stays.
            return Ok(());
        }
        let Some(claim) = &self.claim else {
            return Err(RabbitError::NotStarted {
                call: "stop_with(true)",
            }
            .into());
        };
        let settings = match &self.settings {
            Some(s) => s.clone(),
            None => match Settings::for_cleanup(&claim.connector, &self.config) {
                Ok(s) => s,
                Err(e) => {
                    // No broker address ever parsed: nothing was declared anywhere.
                    tracing::warn!(connector = %claim.connector, error = %e, "rabbitmq-sink cleanup: no usable broker address, nothing to delete");
                    return Ok(());
                }
            },
        };
        let b = Broker::open(&settings).await?;
        let result = async {
            match decide_cleanup(&b.marker(&claim.connector).await?, claim) {
                CleanupPlan::Delete(record) => {
                    b.delete_owned(&record).await?;
                    tracing::info!(connector = %claim.connector, queue = ?record.queue, exchange = ?record.exchange, "rabbitmq-sink objects deleted");
                }
                CleanupPlan::Nothing => {}
                CleanupPlan::Leave(why) => {
                    tracing::warn!(connector = %claim.connector, reason = %why, "rabbitmq-sink cleanup left the broker's objects");
                }
            }
            Ok::<(), RabbitError>(())
        }
        .await;
        b.close().await;
        Ok(result?)
    }
}

/// A sink task: publishes with confirms, acknowledges only confirmed records.
#[derive(Default)]
pub struct RabbitSinkTask {
    settings: Option<Settings>,
    cancel: CancellationToken,
    link: Option<(Connection, Channel)>,
    /// Records put since the last successful flush, to publish again after a lost
    /// connection.
    pending: Vec<SinkRecord>,
    /// Confirms of the records of `pending` published on the current channel.
    inflight: Vec<PublisherConfirm>,
}

impl std::fmt::Debug for RabbitSinkTask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RabbitSinkTask")
            .field("settings", &self.settings)
            .field("pending", &self.pending.len())
            .finish_non_exhaustive()
    }
}

/// The message properties of a record: persistent, with its headers, key, topic and
/// offset as AMQP headers, and `message_id` `<topic>/<offset>` (consumers can drop
/// the duplicates an at-least-once redelivery makes).
fn properties(r: &SinkRecord) -> BasicProperties {
    let mut headers = FieldTable::default();
    for (name, value) in &r.headers {
        headers.insert(
            ShortString::from(name.as_str()),
            AMQPValue::LongString(LongString::from(value.clone())),
        );
    }
    headers.insert(
        "wharf.topic".into(),
        AMQPValue::LongString(LongString::from(r.topic.as_bytes().to_vec())),
    );
    headers.insert(
        "wharf.offset".into(),
        AMQPValue::LongLongInt(r.offset as i64),
    );
    if let Some(key) = &r.key {
        headers.insert(
            "wharf.key".into(),
            AMQPValue::LongString(LongString::from(key.clone())),
        );
    }
    let mut p = BasicProperties::default()
        .with_delivery_mode(2)
        .with_message_id(format!("{}/{}", r.topic, r.offset).into())
        .with_headers(headers);
    if let Some(ms) = r.timestamp_ms.filter(|ms| *ms >= 0) {
        p = p.with_timestamp(ms as u64 / 1000);
    }
    p
}

/// How a round of confirms ended.
enum Confirmed {
    /// Every message acknowledged.
    All,
    /// The connection or channel failed, or the broker nacked: publish again.
    Retry(String),
}

impl RabbitSinkTask {
    fn settings(&self, call: &'static str) -> Result<&Settings, RabbitError> {
        self.settings
            .as_ref()
            .ok_or(RabbitError::NotStarted { call })
    }

    async fn connect(&mut self) -> Result<(), RabbitError> {
        let settings = self.settings("connect")?.clone();
        let conn = settings.connect().await?;
        let ch = conn
            .create_channel()
            .await
            .map_err(broker("opening a channel"))?;
        ch.confirm_select(ConfirmSelectOptions::default())
            .await
            .map_err(broker("enabling publisher confirms"))?;
        self.link = Some((conn, ch));
        Ok(())
    }

    /// Publishes `records` on the current channel, keeping their confirms. On a failed
    /// publish the link is dropped (the flush reconnects).
    async fn publish(&mut self, records: &[SinkRecord]) -> Result<(), RabbitError> {
        let settings = self.settings("put")?.clone();
        let Some((_, ch)) = &self.link else {
            return Ok(());
        };
        let exchange = settings.exchange.clone().unwrap_or_default();
        for r in records {
            match ch
                .basic_publish(
                    exchange.as_str().into(),
                    settings.routing_key.as_str().into(),
                    BasicPublishOptions {
                        mandatory: true,
                        ..BasicPublishOptions::default()
                    },
                    &r.value,
                    properties(r),
                )
                .await
            {
                Ok(confirm) => self.inflight.push(confirm),
                Err(e) => {
                    tracing::warn!(queue = %settings.queue, error = %e, "rabbitmq-sink publish failed; the flush reconnects");
                    self.link = None;
                    self.inflight.clear();
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    /// Waits for every confirm of the current round.
    async fn confirms(&mut self) -> Result<Confirmed, RabbitError> {
        let queue = self.settings("flush")?.queue.clone();
        if self.link.is_none() {
            return Ok(Confirmed::Retry("not connected".to_owned()));
        }
        let mut result = Confirmed::All;
        for confirm in std::mem::take(&mut self.inflight) {
            match confirm.await {
                Ok(c) if c.is_ack() => {
                    if let Some(returned) = c.take_message() {
                        return Err(RabbitError::Unroutable {
                            queue,
                            reply: format!("{} {}", returned.reply_code, returned.reply_text),
                        });
                    }
                }
                Ok(_) => result = Confirmed::Retry("the broker nacked a record".to_owned()),
                Err(e) => result = Confirmed::Retry(e.to_string()),
            }
        }
        if let Confirmed::Retry(_) = result {
            self.link = None;
        }
        Ok(result)
    }
}

#[async_trait]
impl SinkTask for RabbitSinkTask {
    async fn start(&mut self, ctx: TaskContext, config: ConfigMap) -> PluginResult<()> {
        self.settings = Some(Settings::parse(&ctx.connector, &config)?);
        self.cancel = ctx.cancel.clone();
        if !ctx.cleanup_only {
            self.connect().await?;
        }
        Ok(())
    }

    async fn put(&mut self, records: Vec<SinkRecord>) -> PluginResult<()> {
        self.publish(&records).await?;
        self.pending.extend(records);
        Ok(())
    }

    async fn flush(&mut self, _offsets: &BTreeMap<String, u64>) -> PluginResult<()> {
        let timeout = self.settings("flush")?.retry_timeout;
        let started = tokio::time::Instant::now();
        let mut backoff = Duration::from_millis(100);
        loop {
            let detail = match self.confirms().await? {
                Confirmed::All => {
                    self.pending.clear();
                    return Ok(());
                }
                Confirmed::Retry(detail) => detail,
            };
            if started.elapsed() >= timeout {
                return Err(RabbitError::Unconfirmed {
                    count: self.pending.len(),
                    waited_ms: started.elapsed().as_millis() as u64,
                    detail,
                }
                .into());
            }
            tokio::select! {
                () = self.cancel.cancelled() => return Err("rabbitmq-sink flush cancelled by the task's stop".into()),
                () = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(Duration::from_millis(MAX_BACKOFF_MS));
            match self.connect().await {
                Ok(()) => {
                    tracing::info!(
                        records = self.pending.len(),
                        "rabbitmq-sink reconnected; publishing unconfirmed records again"
                    );
                    let pending = self.pending.clone();
                    self.publish(&pending).await?;
                }
                Err(e) => tracing::warn!(error = %e, "rabbitmq-sink reconnect failed; retrying"),
            }
        }
    }

    async fn stop_with(&mut self, _connector_deleted: bool) -> PluginResult<()> {
        // The queue is the connector's (shared by every task): a task removes nothing.
        if let Some((conn, _)) = self.link.take() {
            let _ = conn.close(200, "task stopped".into()).await;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(pairs: &[(&str, &str)]) -> ConfigMap {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn settings() -> Settings {
        Settings::parse("c", &config(&[("topics", "t"), ("exchange", "x")])).unwrap()
    }

    fn claim(incarnation: &str) -> Claim {
        Claim {
            connector: "c".to_owned(),
            incarnation: incarnation.to_owned(),
        }
    }

    fn record(incarnation: &str) -> OwnerRecord {
        OwnerRecord {
            wharf: PLUGIN_NAME.to_owned(),
            connector: "c".to_owned(),
            incarnation: incarnation.to_owned(),
            queue: Some("wharf.c".to_owned()),
            exchange: None,
        }
    }

    const NONE: Existing = Existing {
        queue: false,
        exchange: false,
    };

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

    #[test]
    fn first_start_owns_only_what_is_absent() {
        let s = settings();
        let StartPlan::Create(r) = decide_start(&Marker::Absent, &claim("i1"), NONE, &s) else {
            panic!("expected Create");
        };
        assert_eq!(
            (r.queue.as_deref(), r.exchange.as_deref()),
            (Some("wharf.c"), Some("x"))
        );
        let both = Existing {
            queue: true,
            exchange: true,
        };
        let StartPlan::Create(r) = decide_start(&Marker::Absent, &claim("i1"), both, &s) else {
            panic!("expected Create");
        };
        assert_eq!((r.queue, r.exchange), (None, None));
        assert_eq!(r.incarnation, "i1");
    }

    #[test]
    fn the_same_incarnation_reuses_its_record() {
        let plan = decide_start(
            &Marker::Owned(record("i1")),
            &claim("i1"),
            NONE,
            &settings(),
        );
        assert_eq!(plan, StartPlan::Reuse(record("i1")));
    }

    #[test]
    fn another_incarnation_or_connector_or_an_unreadable_record_is_refused() {
        for marker in [
            Marker::Owned(record("i0")),
            Marker::Owned(OwnerRecord {
                connector: "other".to_owned(),
                ..record("i1")
            }),
            Marker::Owned(OwnerRecord {
                wharf: "something-else".to_owned(),
                ..record("i1")
            }),
            Marker::Unreadable,
        ] {
            assert!(
                matches!(
                    decide_start(&marker, &claim("i1"), NONE, &settings()),
                    StartPlan::Refuse(_)
                ),
                "{marker:?}"
            );
        }
    }

    #[test]
    fn cleanup_deletes_only_for_the_owning_incarnation() {
        assert_eq!(
            decide_cleanup(&Marker::Owned(record("i1")), &claim("i1")),
            CleanupPlan::Delete(record("i1"))
        );
        assert_eq!(
            decide_cleanup(&Marker::Absent, &claim("i1")),
            CleanupPlan::Nothing
        );
        for marker in [
            Marker::Owned(record("i2")),
            Marker::Owned(OwnerRecord {
                connector: "other".to_owned(),
                ..record("i1")
            }),
            Marker::Unreadable,
        ] {
            assert!(
                matches!(decide_cleanup(&marker, &claim("i1")), CleanupPlan::Leave(_)),
                "{marker:?}"
            );
        }
    }

    #[test]
    fn owner_records_round_trip() {
        let r = record("i1");
        let text = serde_json::to_vec(&r).unwrap();
        assert_eq!(serde_json::from_slice::<OwnerRecord>(&text).unwrap(), r);
    }

    #[test]
    fn messages_are_persistent_and_carry_topic_and_offset() {
        let r = SinkRecord {
            topic: "t".to_owned(),
            key: Some(b"k".to_vec()),
            value: b"v".to_vec(),
            headers: vec![("h".to_owned(), b"1".to_vec())],
            timestamp_ms: Some(5_000),
            offset: 7,
        };
        let p = properties(&r);
        assert_eq!(p.delivery_mode(), &Some(2));
        assert_eq!(p.message_id().as_ref().map(|m| m.as_str()), Some("t/7"));
        let h = p.headers().as_ref().unwrap().inner();
        assert!(h.contains_key("wharf.key") && h.contains_key("h"));
    }
}
