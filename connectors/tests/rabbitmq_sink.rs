//! `rabbitmq-sink` passes the conformance kit (`wharf-testkit`) against the real RabbitMQ
//! on 127.0.0.1:5672 (guest/guest, scripts/setup-services), each check its own test. The
//! probe sees the broker the management-less way: passive declares for what exists,
//! `basic.get` without acknowledgement (the messages go back) for what a queue holds.
//!
//! Every kit connector publishes through an exchange the test declared first (the
//! user's, never to be removed); the connector of `pre_existing_resources_survive` is
//! also pointed at a queue the test declared, which it must use and never delete.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU32, Ordering};

use async_trait::async_trait;
use lapin::options::{
    BasicGetOptions, ExchangeDeclareOptions, ExchangeDeleteOptions, QueueDeclareOptions,
    QueueDeleteOptions,
};
use lapin::types::FieldTable;
use lapin::{Connection, ConnectionProperties, ExchangeKind};
use wharf_connectors::rabbitmq_sink::{self, default_queue, keys, owner_queue};
use wharf_sdk::ConfigMap;
use wharf_testkit::{Kit, Probe};

const BROKER: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";

static COUNTER: AtomicU32 = AtomicU32::new(0);

async fn connect() -> Result<Connection, String> {
    Connection::connect(BROKER, ConnectionProperties::default())
        .await
        .map_err(|e| format!("RabbitMQ on 127.0.0.1:5672 (scripts/setup-services): {e}"))
}

/// The broker as the kit sees it, with the names the user made for this test.
struct RabbitProbe {
    conn: Connection,
    /// The user's exchange every connector publishes through.
    user_exchange: String,
    /// The user's queue the `user` connector writes to.
    user_queue: String,
}

impl RabbitProbe {
    async fn queue_exists(&self, name: &str) -> Result<bool, String> {
        let ch = self
            .conn
            .create_channel()
            .await
            .map_err(|e| e.to_string())?;
        let r = ch
            .queue_declare(
                name.into(),
                QueueDeclareOptions::default().passive(),
                FieldTable::default(),
            )
            .await;
        Ok(r.is_ok())
    }

    async fn exchange_exists(&self, name: &str) -> Result<bool, String> {
        let ch = self
            .conn
            .create_channel()
            .await
            .map_err(|e| e.to_string())?;
        let r = ch
            .exchange_declare(
                name.into(),
                ExchangeKind::Direct,
                ExchangeDeclareOptions {
                    passive: true,
                    ..ExchangeDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await;
        Ok(r.is_ok())
    }

    fn queue_of(connector: &str, config: &ConfigMap) -> String {
        config
            .get(keys::QUEUE)
            .cloned()
            .unwrap_or_else(|| default_queue(connector))
    }
}

#[async_trait]
impl Probe for RabbitProbe {
    async fn owned(&self, connector: &str, config: &ConfigMap) -> Result<BTreeSet<String>, String> {
        let mut out = BTreeSet::new();
        let queue = Self::queue_of(connector, config);
        if queue != self.user_queue && self.queue_exists(&queue).await? {
            out.insert(format!("queue {queue}"));
        }
        let record = owner_queue(connector);
        if self.queue_exists(&record).await? {
            out.insert(format!("record {record}"));
        }
        Ok(out)
    }

    async fn pre_existing(&self, _config: &ConfigMap) -> Result<BTreeSet<String>, String> {
        let mut out = BTreeSet::new();
        if self.exchange_exists(&self.user_exchange).await? {
            out.insert(format!("exchange {}", self.user_exchange));
        }
        if self.queue_exists(&self.user_queue).await? {
            out.insert(format!("queue {}", self.user_queue));
        }
        Ok(out)
    }

    async fn remove(&self, resource: &str) -> Result<bool, String> {
        let Some((_, name)) = resource.split_once(' ') else {
            return Ok(false);
        };
        let ch = self
            .conn
            .create_channel()
            .await
            .map_err(|e| e.to_string())?;
        ch.queue_delete(name.into(), QueueDeleteOptions::default())
            .await
            .map_err(|e| e.to_string())?;
        Ok(true)
    }

    async fn delivered(
        &self,
        connector: &str,
        config: &ConfigMap,
    ) -> Result<Option<Vec<Vec<u8>>>, String> {
        let queue = Self::queue_of(connector, config);
        let ch = self
            .conn
            .create_channel()
            .await
            .map_err(|e| e.to_string())?;
        let mut values = Vec::new();
        // Taken unacknowledged: closing the channel puts every message back.
        while let Some(m) = ch
            .basic_get(queue.as_str().into(), BasicGetOptions { no_ack: false })
            .await
            .map_err(|e| e.to_string())?
        {
            values.push(m.delivery.data.clone());
        }
        ch.close(200, "probe done".into())
            .await
            .map_err(|e| e.to_string())?;
        Ok(Some(values))
    }
}

/// Removes the user's exchange and queue at the end (also on panic, from a thread).
struct UserObjects {
    exchange: String,
    queue: String,
}

impl Drop for UserObjects {
    fn drop(&mut self) {
        let (exchange, queue) = (self.exchange.clone(), self.queue.clone());
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            rt.block_on(async {
                let conn = connect().await.ok()?;
                let ch = conn.create_channel().await.ok()?;
                let _ = ch
                    .exchange_delete(exchange.as_str().into(), ExchangeDeleteOptions::default())
                    .await;
                let _ = ch
                    .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
                    .await;
                conn.close(200, "done".into()).await.ok()
            })
        })
        .join();
    }
}

async fn kit() -> (UserObjects, Kit<RabbitProbe>) {
    let id = format!(
        "{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::SeqCst)
    );
    let user_exchange = format!("kit-user-exchange-{id}");
    let user_queue = format!("kit-user-queue-{id}");
    let conn = connect().await.unwrap();
    let ch = conn.create_channel().await.unwrap();
    ch.exchange_declare(
        user_exchange.as_str().into(),
        ExchangeKind::Direct,
        ExchangeDeclareOptions {
            durable: true,
            ..ExchangeDeclareOptions::default()
        },
        FieldTable::default(),
    )
    .await
    .unwrap();
    ch.queue_declare(
        user_queue.as_str().into(),
        QueueDeclareOptions::durable(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    let guard = UserObjects {
        exchange: user_exchange.clone(),
        queue: user_queue.clone(),
    };
    let (x, q) = (user_exchange.clone(), user_queue.clone());
    let kit = Kit::new(
        rabbitmq_sink::plugin(),
        move |name| {
            let mut c: ConfigMap = [
                (keys::TOPICS, "kit-topic"),
                (keys::EXCHANGE, x.as_str()),
                (keys::RETRY_TIMEOUT_MS, "5000"),
            ]
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
            // The connector of pre_existing_resources_survive writes to the user's queue.
            if name.ends_with("-user-a") {
                c.insert(keys::QUEUE.to_owned(), q.clone());
            }
            c
        },
        RabbitProbe {
            conn,
            user_exchange,
            user_queue,
        },
    )
    .name_prefix(format!("kit-rmq-{id}"))
    .ledger_required();
    (guard, kit)
}

#[tokio::test]
async fn rabbitmq_sink_declares_its_resources_before_creating_them() {
    kit()
        .await
        .1
        .ledger_declares_before_creating()
        .await
        .unwrap();
}

#[tokio::test]
async fn rabbitmq_sink_plain_stop_releases_nothing() {
    kit().await.1.plain_stop_releases_nothing().await.unwrap();
}

#[tokio::test]
async fn rabbitmq_sink_delete_releases_every_created_entry() {
    kit()
        .await
        .1
        .delete_releases_every_created_entry()
        .await
        .unwrap();
}

#[tokio::test]
async fn rabbitmq_sink_plain_stops_keep_resources() {
    kit().await.1.plain_stops_keep_resources().await.unwrap();
}

#[tokio::test]
async fn rabbitmq_sink_lower_tasks_max_keeps_resources() {
    kit()
        .await
        .1
        .lower_tasks_max_keeps_resources()
        .await
        .unwrap();
}

#[tokio::test]
async fn rabbitmq_sink_delete_removes_everything() {
    kit().await.1.delete_removes_everything().await.unwrap();
}

#[tokio::test]
async fn rabbitmq_sink_repeated_cleanup_is_a_no_op() {
    kit().await.1.repeated_cleanup_is_a_no_op().await.unwrap();
}

#[tokio::test]
async fn rabbitmq_sink_cleanup_without_start_succeeds() {
    kit()
        .await
        .1
        .cleanup_without_start_succeeds()
        .await
        .unwrap();
}

#[tokio::test]
async fn rabbitmq_sink_cleanup_after_half_start_succeeds() {
    kit()
        .await
        .1
        .cleanup_after_half_start_succeeds()
        .await
        .unwrap();
}

#[tokio::test]
async fn rabbitmq_sink_deleting_one_connector_leaves_another() {
    kit()
        .await
        .1
        .deleting_one_connector_leaves_another()
        .await
        .unwrap();
}

#[tokio::test]
async fn rabbitmq_sink_pre_existing_resources_survive() {
    kit()
        .await
        .1
        .pre_existing_resources_survive()
        .await
        .unwrap();
}

#[tokio::test]
async fn rabbitmq_sink_acknowledges_only_flushed_records() {
    kit()
        .await
        .1
        .sink_acknowledges_only_flushed_records()
        .await
        .unwrap();
}

#[tokio::test]
async fn rabbitmq_sink_late_cleanup_leaves_a_re_created_connector() {
    kit()
        .await
        .1
        .late_cleanup_leaves_a_re_created_connector()
        .await
        .unwrap();
}

#[tokio::test]
async fn rabbitmq_sink_start_refuses_what_another_incarnation_kept() {
    kit()
        .await
        .1
        .start_refuses_what_another_incarnation_kept()
        .await
        .unwrap();
}

/// A queue owned by another incarnation of the same connector (kept by a deletion with
/// keep_resources) is refused at start and left by a stale cleanup.
#[tokio::test]
async fn another_incarnations_queue_is_refused_and_left() {
    use wharf_sdk::ConnectorContext;
    let (_user, _kit) = kit().await;
    let name = format!("kit-rmq-{}-incarnations", std::process::id());
    let config: ConfigMap = [(keys::TOPICS.to_owned(), "t".to_owned())].into();
    let ctx = |inc: &str, cleanup_only| {
        ConnectorContext::new(
            name.as_str(),
            inc,
            cleanup_only,
            "test",
            std::sync::Arc::new(|| {}),
        )
    };
    let plugin = rabbitmq_sink::plugin();
    let mut first = (plugin.connector)();
    first.start(ctx("i1", false), config.clone()).await.unwrap();
    first.stop_with(false).await.unwrap();

    let mut second = (plugin.connector)();
    let err = second
        .start(ctx("i2", false), config.clone())
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("earlier incarnation (i1)"), "{err}");
    // A late cleanup of incarnation i2 must not delete what i1 owns.
    second.stop_with(true).await.unwrap();
    let probe = RabbitProbe {
        conn: connect().await.unwrap(),
        user_exchange: String::new(),
        user_queue: String::new(),
    };
    let owned = probe.owned(&name, &config).await.unwrap();
    assert_eq!(owned.len(), 2, "{owned:?}");

    let mut cleanup = (plugin.connector)();
    cleanup
        .start(ctx("i1", true), config.clone())
        .await
        .unwrap();
    cleanup.stop_with(true).await.unwrap();
    assert!(probe.owned(&name, &config).await.unwrap().is_empty());
}
