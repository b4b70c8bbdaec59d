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
//!
//! Files: `config.rs` (the settings and their checks), `ownership.rs` (the owner record
//! and the two decisions), `broker.rs` (the declares, probes and deletes of a start or a
//! cleanup); this file holds the plugin, its connector and its task.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{BasicProperties, Channel, Connection, PublisherConfirm};
use tokio_util::sync::CancellationToken;
use wharf_sdk::{
    ConfigMap, Connector, ConnectorContext, Plugin, PluginResult, SinkRecord, SinkTask,
    TaskContext, TaskFactory, TopicPartition,
};

mod broker;
mod config;
pub mod ledger;
mod ownership;

pub use broker::Broker;
use broker::broker_error;
pub use config::{Settings, config_def};
pub use ownership::{
    Claim, CleanupPlan, Existing, Marker, OwnerRecord, StartPlan, decide_cleanup, decide_start,
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
    /// The instance's ledger handle (from its context).
    resources: Option<wharf_sdk::Resources>,
}

#[async_trait]
impl Connector for RabbitConnector {
    async fn start(&mut self, ctx: ConnectorContext, config: ConfigMap) -> PluginResult<()> {
        // Kept before anything can fail: a start that fails (even on its config) is still
        // followed by a cleanup that must find the owner record.
        self.config = config;
        let resources = self.resources.insert(ctx.resources().clone()).clone();
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
            let plan = decide_start(&marker, claim, existing, settings);
            // In the ledger before anything is declared (a second claim is refused
            // here, naming the connector that holds the queue), confirmed after.
            let owned = match &plan {
                StartPlan::Create(record) | StartPlan::Reuse(record) => {
                    ledger::resources(&claim.connector, settings, Some(record))
                }
                StartPlan::Refuse(_) => Vec::new(),
            };
            for r in &owned {
                resources.intend(r).await.map_err(ledger_error)?;
            }
            match plan {
                StartPlan::Create(record) => {
                    b.write_marker(&record).await?;
                    b.declare(&record, settings, claim).await?;
                }
                StartPlan::Reuse(record) => b.declare(&record, settings, claim).await?,
                StartPlan::Refuse(why) => return Err(RabbitError::Refused(why)),
            }
            for r in &owned {
                resources.confirm(r).await.map_err(ledger_error)?;
            }
            Ok(())
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
        let resources = self.resources.clone();
        let result = async {
            match decide_cleanup(&b.marker(&claim.connector).await?, claim) {
                CleanupPlan::Delete(record) => {
                    if record.queue.is_none()
                        && record.exchange.is_none()
                        && let Some(x) = &settings.exchange
                    {
                        // Neither end is ours: the binding this connector made is
                        // removed on its own.
                        b.unbind(&settings.queue, x, &settings.routing_key).await?;
                    }
                    b.delete_owned(&record).await?;
                    tracing::info!(connector = %claim.connector, queue = ?record.queue, exchange = ?record.exchange, "rabbitmq-sink objects deleted");
                    if let Some(ledger) = &resources {
                        for r in ledger::resources(&claim.connector, &settings, Some(&record))
                            .iter()
                            .filter(|r| r.origin == wharf_sdk::Origin::Created)
                        {
                            ledger.release(r).await.map_err(ledger_error)?;
                        }
                    }
                }
                CleanupPlan::Nothing => {
                    // No owner record: what is not there is accounted for as absent;
                    // a queue or exchange that exists under the configured name was not
                    // declared by this incarnation, and stays unaccounted.
                    if let Some(ledger) = &resources {
                        for r in ledger::resources(&claim.connector, &settings, None) {
                            let gone = match r.kind {
                                wharf_sdk::ResourceKind::Queue => !b.queue_exists(&r.name).await?,
                                wharf_sdk::ResourceKind::Exchange => {
                                    !b.exchange_exists(&r.name).await?
                                }
                                _ => false,
                            };
                            if gone {
                                ledger.absent(&r).await.map_err(ledger_error)?;
                            }
                        }
                    }
                }
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

    fn declared_resources(&self, config: &ConfigMap) -> PluginResult<Vec<wharf_sdk::Resource>> {
        // The connector's name is not in its config: what is named after it (the
        // owner-record queue, the default queue) is unique already; the configured
        // queue and exchange are what two connectors could both name.
        let settings = Settings::parse("declared", config)?;
        let named = |key: &str| config.get(key).is_some_and(|v| !v.trim().is_empty());
        Ok(ledger::resources("declared", &settings, None)
            .into_iter()
            .filter(|r| match r.kind {
                wharf_sdk::ResourceKind::Queue => named(keys::QUEUE) && r.name == settings.queue,
                wharf_sdk::ResourceKind::Exchange => true,
                _ => false,
            })
            .collect())
    }
}

/// A ledger call that failed, as this plugin's error (the text names the resource and,
/// for a second claim, the connector holding it).
fn ledger_error(e: wharf_sdk::PluginError) -> RabbitError {
    RabbitError::Refused(e.to_string())
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
            .map_err(broker_error("opening a channel"))?;
        ch.confirm_select(ConfirmSelectOptions::default())
            .await
            .map_err(broker_error("enabling publisher confirms"))?;
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

    async fn flush(&mut self, _offsets: &BTreeMap<TopicPartition, u64>) -> PluginResult<()> {
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

    #[test]
    fn messages_are_persistent_and_carry_topic_and_offset() {
        let r = SinkRecord {
            topic: "t".to_owned(),
            key: Some(b"k".to_vec()),
            value: b"v".to_vec(),
            headers: vec![("h".to_owned(), b"1".to_vec())],
            timestamp_ms: Some(5_000),
            partition: 0,
            offset: 7,
            data: None,
        };
        let p = properties(&r);
        assert_eq!(p.delivery_mode(), &Some(2));
        assert_eq!(p.message_id().as_ref().map(|m| m.as_str()), Some("t/7"));
        let h = p.headers().as_ref().unwrap().inner();
        assert!(h.contains_key("wharf.key") && h.contains_key("h"));
    }
}
