//! The NATS JetStream record log, for executors on several hosts.
//!
//! # Mapping
//! - **One stream per topic.** Topic `t` is stream `<PREFIX>_T_<token>` holding subject
//!   `<prefix>.t.<token>`, where `<token>` is [`name_token`]`(t)`. A stream per topic keeps
//!   positions dense (the stream sequence minus one is the record's position, as in the
//!   embedded log), lets replication and retention differ per topic later, and keeps a
//!   consumer from scanning other topics' records. The cost is one stream (one Raft group
//!   when replicated) per topic; Wharf deployments have few topics.
//! - **A durable pull consumer per (stream, consumer name)**, named [`name_token`] of the
//!   consumer name (`wharf-sink-<connector>` for sinks). All tasks of one sink connector bind
//!   to it, so JetStream hands each record to one of them. Explicit acks; `ack_wait`
//!   redelivers records of a reader that died. `LogLimits::max_in_flight_records` bounds
//!   each reader's unacknowledged records exactly (client side) and is also the consumer's
//!   `max_ack_pending`, the server's bound shared by all readers (nats-server may overshoot
//!   it by up to one fetch).
//! - Record payload: [`super::codec`] (headers may hold any bytes, NATS headers cannot).
//! - `append` returns after JetStream's publish acknowledgement of every record (stored on
//!   the stream's replicas). `ack` uses double acks (waits for the server's confirmation).
//!
//! # Connections
//! A connection of the log never reconnects: once it breaks, the log opens a new one on
//! the next call, and every reader bound on the old one binds again. async-nats cannot turn
//! reconnection off (`max_reconnects(0)` means unlimited), so the log's clients get an
//! endless reconnect delay once connected. The reason is order: a reconnected client sends
//! the publishes still queued from before the disconnect on the new connection, after
//! records the killed server lost, and the append's retry then stores those lost records
//! behind later ones. Without reconnection, what one connection stored of an append is a
//! prefix of it (the server handles a connection's messages in order), so a retried append
//! keeps first arrivals in order. A broken connection's client (a parked task and its
//! unsent buffers) is left behind; the log makes one per connection loss.
//!
//! # Redelivery
//! When a reader opens a consumer that has unacknowledged deliveries (its previous reader
//! crashed or stopped with records in hand), the consumer is recreated at its
//! acknowledgement floor, so those records come again at once and in order, instead of after
//! `ack_wait` behind newer ones. Sink tasks start only after the previous instance of their
//! task stopped or its executor's lease ran out, so for a one-task sink nothing else holds
//! records then. Other live readers of a shared consumer see the records they hold again
//! (duplicates, never loss). A reader whose connection broke binds again on a new one and
//! always rewinds this way: deliveries in transit were lost, and a restarted server may
//! have lost acknowledgements. A reader whose fetch or ack failed otherwise, or whose fetch
//! was dropped midway, binds again before its next fetch and rewinds at most once per
//! [`MIN_REWIND_INTERVAL_MS`] (so that readers sharing a consumer cannot keep rewinding it
//! in turns). A rewind whose consumer was deleted but not yet created again is remembered
//! by the log, so the next bind creates it at the same sequence, never from the start.
//! Every wait on the server is bounded (request timeout, or the fetch's wait plus it) and
//! ends as soon as the connection breaks.
//!
//! # Caveats
//! - nats-server's file store syncs to disk every two minutes by default: a killed server
//!   loses nothing (the page cache survives), a power loss of a single R1 server may; use
//!   `replicas = 3` on a cluster for machine-loss durability.
//! - Consumer positions are kept by the server; after a server crash a few acknowledged
//!   records may be delivered again (at least once).
//! - Order of first arrivals relies on a failed publish ending its connection's part of an
//!   append. A publish refused on a live connection while later ones of the same append are
//!   stored (a stream leader change in a cluster) can still put records behind later ones.
//! - An unfinished rewind is remembered by the executor's log only. Another executor that
//!   binds meanwhile creates the consumer from the start (duplicates); a connector deleted
//!   and created again under its name before the rewind finished would start its sink at
//!   the remembered sequence on this executor.
//! - A reader of several topics waits on them in turns of [`MULTI_TOPIC_WAIT_SLICE_MS`].
//! - An existing stream or consumer is used as it is (its replicas and start are not changed).

mod conn;
mod reader;
mod settings;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::{self, consumer, stream};
use async_trait::async_trait;
use futures::StreamExt;

use super::{
    ConsumerPosition, LogConsumer, LogError, LogRecord, PositionChange, RecordLog, StartPosition,
    codec,
};
use conn::Conn;
pub use reader::{
    ACK_IN_FLIGHT, JetStreamConsumer, MIN_REWIND_INTERVAL_MS, MULTI_TOPIC_WAIT_SLICE_MS,
};
use settings::connect_hint;
pub use settings::{
    DEFAULT_ACK_WAIT_MS, DEFAULT_PREFIX, DEFAULT_REQUEST_TIMEOUT_MS, JetStreamOptions, NatsConfig,
    NatsCredentials, NatsSecurity, name_token,
};

fn unavailable(what: &str, err: impl std::fmt::Display) -> LogError {
    LogError::Unavailable(format!("{what}: {err}"))
}

/// Where a consumer being rewound starts again: (stream, durable) -> stream sequence.
type PendingRewinds = Mutex<HashMap<(String, String), u64>>;

/// The JetStream backend. Cheap to clone.
#[derive(Clone)]
pub struct JetStreamLog {
    inner: Arc<Inner>,
}

struct Inner {
    config: NatsConfig,
    /// The current connection; replaced by a new one once it is lost.
    conn: tokio::sync::Mutex<Option<Arc<Conn>>>,
    /// Streams known to exist (created or checked by this process).
    streams: Mutex<HashSet<String>>,
    /// Rewinds whose consumer was deleted but not yet created again.
    rewinds: PendingRewinds,
}

impl JetStreamLog {
    /// Connects to the servers of `config`. When no server answers yet, the log connects
    /// on first use instead. A lost connection is replaced by a new one on the next call
    /// (see "Connections"); calls made while no server answers fail with
    /// [`LogError::Unavailable`].
    ///
    /// # Errors
    /// [`LogError::InvalidConfig`] when an option or a server URL is wrong.
    pub async fn connect(config: NatsConfig) -> Result<Self, LogError> {
        config.validate()?;
        let log = Self {
            inner: Arc::new(Inner {
                config,
                conn: tokio::sync::Mutex::new(None),
                streams: Mutex::default(),
                rewinds: Mutex::default(),
            }),
        };
        if let Err(err) = log.conn().await {
            tracing::warn!(error = %err, "NATS not reachable yet; the record log connects on first use");
        }
        Ok(log)
    }

    fn options(&self) -> &JetStreamOptions {
        &self.inner.config.options
    }

    fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.options().request_timeout_ms)
    }

    /// The current connection, or a new one when it was lost (or never made).
    async fn conn(&self) -> Result<Arc<Conn>, LogError> {
        let mut current = self.inner.conn.lock().await;
        if let Some(conn) = current.as_ref()
            && conn.alive()
        {
            return Ok(conn.clone());
        }
        let conn = Arc::new(self.open_connection().await?);
        *current = Some(conn.clone());
        Ok(conn)
    }

    async fn open_connection(&self) -> Result<Conn, LogError> {
        let timeout = self.request_timeout();
        // Until connected, attempts go on at once; after that a reconnect never happens
        // (tokio caps the sleep at 30 years).
        let connected = Arc::new(AtomicBool::new(false));
        let delay_connected = connected.clone();
        let (lost_tx, lost) = tokio::sync::watch::channel(false);
        let lost_tx = Arc::new(lost_tx);
        let security = &self.inner.config.security;
        let client = security
            .apply(async_nats::ConnectOptions::new())
            .await?
            .name("wharf-record-log")
            .request_timeout(Some(timeout))
            .connection_timeout(timeout)
            .reconnect_delay_callback(move |_| {
                if delay_connected.load(Ordering::SeqCst) {
                    Duration::MAX
                } else {
                    Duration::ZERO
                }
            })
            .event_callback(move |event| {
                let lost_tx = lost_tx.clone();
                async move {
                    if matches!(
                        event,
                        async_nats::Event::Disconnected | async_nats::Event::Closed
                    ) {
                        lost_tx.send_replace(true);
                    }
                }
            })
            .connect(self.inner.config.servers.join(",").as_str())
            .await
            .map_err(|err| {
                LogError::Unavailable(format!(
                    "connect to NATS: {}{}",
                    wharf::tls::error_chain(&err),
                    connect_hint(security)
                ))
            })?;
        // Before anything was sent on it: a reconnect until here resends nothing.
        connected.store(true, Ordering::SeqCst);
        let js = jetstream::ContextBuilder::new()
            .timeout(timeout)
            .build(client.clone());
        Ok(Conn { client, js, lost })
    }

    /// Stream name of `topic`.
    pub fn stream_name(&self, topic: &str) -> String {
        format!(
            "{}_T_{}",
            self.options().prefix.to_ascii_uppercase(),
            name_token(topic)
        )
    }

    /// Subject the records of `topic` are published on.
    pub fn subject(&self, topic: &str) -> String {
        format!("{}.t.{}", self.options().prefix, name_token(topic))
    }

    async fn ensure_stream(&self, conn: &Conn, topic: &str) -> Result<String, LogError> {
        let name = self.stream_name(topic);
        if self.known(&name) {
            return Ok(name);
        }
        let what = format!("create stream {name} for topic {topic}");
        conn.within(
            self.request_timeout(),
            conn.js.get_or_create_stream(stream::Config {
                name: name.clone(),
                subjects: vec![self.subject(topic)],
                description: Some(format!("{STREAM_DESCRIPTION_PREFIX}{topic}")),
                storage: stream::StorageType::File,
                retention: stream::RetentionPolicy::Limits,
                num_replicas: self.options().replicas,
                max_age: std::time::Duration::from_secs(self.options().max_age_s),
                max_bytes: self.options().max_bytes,
                ..Default::default()
            }),
        )
        .await
        .map_err(|err| unavailable(&what, err))?
        .map_err(|err| unavailable(&what, err))?;
        self.inner
            .streams
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.clone());
        Ok(name)
    }

    /// Binds to the durable consumer `consumer` of `topic`'s stream on `conn`, creating it
    /// with `deliver_policy` when new (or at the sequence of an unfinished rewind). When
    /// `may_rewind` and it has unacknowledged deliveries (its previous reader crashed,
    /// stopped or lost its connection with records in hand), it is rewound to its
    /// acknowledgement floor, so they come again now and in order, not after ack_wait
    /// behind newer ones.
    async fn bind(
        &self,
        conn: &Conn,
        consumer: &str,
        topic: &str,
        deliver_policy: consumer::DeliverPolicy,
        may_rewind: bool,
    ) -> Result<consumer::PullConsumer, LogError> {
        let durable = name_token(consumer);
        let stream_name = self.ensure_stream(conn, topic).await?;
        let key = (stream_name.clone(), durable.clone());
        let unfinished = self.pending_rewind(&key, None);
        let policy = unfinished.map_or(deliver_policy, |start_sequence| {
            consumer::DeliverPolicy::ByStartSequence { start_sequence }
        });
        let pull = self
            .open_durable(conn, &durable, consumer, &stream_name, policy)
            .await?;
        // It exists again (created here, or by another reader): the rewind is over.
        self.take_pending_rewind(&key);
        let info = pull.cached_info();
        if info.num_ack_pending == 0 || !may_rewind {
            return Ok(pull);
        }
        let start_sequence = info.ack_floor.stream_sequence + 1;
        tracing::info!(
            consumer = %durable,
            stream = %stream_name,
            unacknowledged = info.num_ack_pending,
            start_sequence,
            "rewinding the consumer to its acknowledgement floor"
        );
        self.pending_rewind(&key, Some(start_sequence));
        self.delete_durable(conn, &durable, &stream_name).await?;
        let pull = self
            .open_durable(
                conn,
                &durable,
                consumer,
                &stream_name,
                consumer::DeliverPolicy::ByStartSequence { start_sequence },
            )
            .await?;
        self.take_pending_rewind(&key);
        Ok(pull)
    }

    /// Records `start` (when given) as the start of an unfinished rewind of `key`; returns
    /// the one recorded.
    fn pending_rewind(&self, key: &(String, String), start: Option<u64>) -> Option<u64> {
        let mut rewinds = self.inner.rewinds.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(start) = start {
            rewinds.insert(key.clone(), start);
        }
        rewinds.get(key).copied()
    }

    fn take_pending_rewind(&self, key: &(String, String)) {
        self.inner
            .rewinds
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
    }

    /// Creates the durable pull consumer, or binds to it as it is when it exists with
    /// another start.
    async fn open_durable(
        &self,
        conn: &Conn,
        durable: &str,
        consumer: &str,
        stream_name: &str,
        deliver_policy: consumer::DeliverPolicy,
    ) -> Result<consumer::PullConsumer, LogError> {
        let max_ack_pending =
            i64::try_from(self.options().limits.max_in_flight_records).unwrap_or(i64::MAX);
        let what = format!("consumer {durable} on stream {stream_name}");
        let created = conn
            .within(
                self.request_timeout(),
                conn.js.create_consumer_on_stream(
                    consumer::pull::Config {
                        durable_name: Some(durable.to_string()),
                        description: Some(format!("wharf consumer {consumer}")),
                        ack_policy: consumer::AckPolicy::Explicit,
                        deliver_policy,
                        ack_wait: Duration::from_millis(self.options().ack_wait_ms),
                        max_ack_pending,
                        ..Default::default()
                    },
                    stream_name,
                ),
            )
            .await
            .map_err(|err| unavailable(&what, err))?;
        match created {
            Ok(pull) => Ok(pull),
            // Exists with another config (e.g. another start): use it as it is.
            Err(_) => conn
                .within(
                    self.request_timeout(),
                    conn.js.get_consumer_from_stream(durable, stream_name),
                )
                .await
                .map_err(|err| unavailable(&what, err))?
                .map_err(|err| unavailable(&what, err)),
        }
    }

    /// Deletes a durable consumer; a missing one (or stream) is not an error.
    async fn delete_durable(
        &self,
        conn: &Conn,
        durable: &str,
        stream_name: &str,
    ) -> Result<(), LogError> {
        let what = format!("delete consumer {durable} on {stream_name}");
        let deleted = conn
            .within(
                self.request_timeout(),
                conn.js.delete_consumer_from_stream(durable, stream_name),
            )
            .await
            .map_err(|err| unavailable(&what, err))?;
        match deleted {
            Ok(_) => Ok(()),
            Err(err) => {
                let missing = matches!(
                    err.kind(),
                    stream::ConsumerErrorKind::JetStream(e)
                        if e.error_code() == jetstream::ErrorCode::CONSUMER_NOT_FOUND
                            || e.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND
                );
                if missing {
                    Ok(())
                } else {
                    Err(unavailable(&what, err))
                }
            }
        }
    }

    /// Publishes `records` to `topic`'s subject on `conn`, at most
    /// [`LogLimits::max_append_in_flight_records`] awaiting their acknowledgement at once.
    /// The next part is sent only once the server stored the previous one.
    async fn publish_all(
        &self,
        conn: &Conn,
        topic: &str,
        stream: &str,
        records: &[LogRecord],
    ) -> Result<Vec<u64>, LogError> {
        let subject = self.subject(topic);
        let timeout = self.request_timeout();
        let what = format!("publish to {stream}");
        let mut positions = Vec::with_capacity(records.len());
        for batch in records.chunks(self.options().limits.max_append_in_flight_records) {
            let acks = conn
                .within(timeout, async {
                    let mut acks = Vec::with_capacity(batch.len());
                    for record in batch {
                        let payload = codec::encode(record).into();
                        acks.push(conn.js.publish(subject.clone(), payload).await?);
                    }
                    Ok::<_, jetstream::context::PublishError>(acks)
                })
                .await
                .map_err(|err| unavailable(&what, err))?
                .map_err(|err| unavailable(&what, err))?;
            let acks = conn
                .within(timeout, async {
                    let mut stored = Vec::with_capacity(acks.len());
                    for ack in acks {
                        stored.push(ack.await);
                    }
                    stored
                })
                .await
                .map_err(|err| unavailable(&format!("publish ack from {stream}"), err))?;
            for ack in acks {
                let ack =
                    ack.map_err(|err| unavailable(&format!("publish ack from {stream}"), err))?;
                if ack.stream != stream {
                    return Err(LogError::Unavailable(format!(
                        "subject {subject} is stored by stream {} instead of {stream}",
                        ack.stream
                    )));
                }
                positions.push(ack.sequence.saturating_sub(1));
            }
        }
        Ok(positions)
    }

    fn forget(&self, stream: &str) {
        self.inner
            .streams
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(stream);
    }

    fn known(&self, stream: &str) -> bool {
        self.inner
            .streams
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(stream)
    }
}

#[async_trait]
impl RecordLog for JetStreamLog {
    async fn append(&self, topic: &str, records: Vec<LogRecord>) -> Result<Vec<u64>, LogError> {
        // One connection for the whole append (see "Connections").
        let conn = self.conn().await?;
        let stream = self.ensure_stream(&conn, topic).await?;
        let result = self.publish_all(&conn, topic, &stream, &records).await;
        if result.is_err() {
            // The stream may be gone (deleted, or a server that lost its store): check again
            // on the next append.
            self.forget(&stream);
        }
        result
    }

    async fn consumer(
        &self,
        consumer: &str,
        topics: &[String],
        start: StartPosition,
    ) -> Result<Box<dyn LogConsumer>, LogError> {
        let deliver_policy = match start {
            StartPosition::Earliest => consumer::DeliverPolicy::All,
            StartPosition::Latest => consumer::DeliverPolicy::New,
        };
        let conn = self.conn().await?;
        let mut bound = Vec::with_capacity(topics.len());
        for topic in topics {
            let pull = self
                .bind(&conn, consumer, topic, deliver_policy, true)
                .await?;
            bound.push((topic.clone(), pull));
        }
        Ok(Box::new(JetStreamConsumer::new(
            self.clone(),
            conn,
            consumer,
            bound,
        )))
    }

    async fn delete_consumer(&self, consumer: &str) -> Result<(), LogError> {
        let conn = self.conn().await?;
        let durable = name_token(consumer);
        let prefix = format!("{}_T_", self.options().prefix.to_ascii_uppercase());
        let streams = conn
            .within(self.request_timeout(), async {
                let mut names = conn.js.stream_names();
                let mut streams = Vec::new();
                while let Some(name) = names.next().await {
                    let name = name.map_err(|err| unavailable("list streams", err))?;
                    if name.starts_with(&prefix) {
                        streams.push(name);
                    }
                }
                Ok::<_, LogError>(streams)
            })
            .await
            .map_err(|err| unavailable("list streams", err))??;
        for stream_name in streams {
            self.take_pending_rewind(&(stream_name.clone(), durable.clone()));
            self.delete_durable(&conn, &durable, &stream_name).await?;
        }
        Ok(())
    }

    /// The durable's acknowledgement floor on each topic's stream: every record up to
    /// that stream sequence is acknowledged, so the next position (sequence minus one)
    /// is the floor's sequence. The topic is read from the stream's description.
    async fn consumer_positions(&self, consumer: &str) -> Result<Vec<ConsumerPosition>, LogError> {
        let conn = self.conn().await?;
        let durable = name_token(consumer);
        let prefix = format!("{}_T_", self.options().prefix.to_ascii_uppercase());
        let streams = conn
            .within(self.request_timeout(), async {
                let mut infos = conn.js.streams();
                let mut out = Vec::new();
                while let Some(info) = infos.next().await {
                    let info = info.map_err(|err| unavailable("list streams", err))?;
                    if info.config.name.starts_with(&prefix) {
                        out.push(info);
                    }
                }
                Ok::<_, LogError>(out)
            })
            .await
            .map_err(|err| unavailable("list streams", err))??;
        let mut out = Vec::new();
        for info in streams {
            let Some(topic) = info
                .config
                .description
                .as_deref()
                .and_then(|d| d.strip_prefix(STREAM_DESCRIPTION_PREFIX))
            else {
                continue;
            };
            let what = format!("consumer {durable} on stream {}", info.config.name);
            let asked = conn
                .within(self.request_timeout(), async {
                    let stream = conn
                        .js
                        .get_stream(&info.config.name)
                        .await
                        .map_err(|e| e.to_string())?;
                    Ok::<_, String>(stream.consumer_info(&durable).await)
                })
                .await
                .map_err(|err| unavailable(&what, err))?
                .map_err(|err| unavailable(&what, err))?;
            match asked {
                Ok(ci) => out.push(ConsumerPosition {
                    topic: topic.to_owned(),
                    partition: 0,
                    next: next_position(
                        ci.ack_floor.stream_sequence,
                        info.state.last_sequence,
                        ci.num_pending + ci.num_ack_pending as u64,
                    ),
                }),
                Err(err) if consumer_absent(&err.kind()) => {}
                Err(err) => return Err(unavailable(&what, err)),
            }
        }
        out.sort_by(|a, b| a.topic.cmp(&b.topic));
        Ok(out)
    }

    /// Each change deletes the topic's durable and, for a position, creates it again
    /// starting at that record (stream sequence = position + 1).
    async fn set_consumer_positions(
        &self,
        consumer: &str,
        changes: &[PositionChange],
    ) -> Result<(), LogError> {
        super::single_partition(changes)?;
        let conn = self.conn().await?;
        let durable = name_token(consumer);
        for c in changes {
            let stream_name = self.stream_name(&c.topic);
            if let Some(next) = c.next {
                let head = self.head(&conn, &stream_name).await?;
                if next > head {
                    return Err(LogError::InvalidConfig(format!(
                        "offset {next} of topic {:?} is beyond its end ({head} records)",
                        c.topic
                    )));
                }
            }
        }
        for c in changes {
            let stream_name = self.stream_name(&c.topic);
            self.take_pending_rewind(&(stream_name.clone(), durable.clone()));
            self.delete_durable(&conn, &durable, &stream_name).await?;
            if let Some(next) = c.next {
                self.ensure_stream(&conn, &c.topic).await?;
                self.open_durable(
                    &conn,
                    &durable,
                    consumer,
                    &stream_name,
                    consumer::DeliverPolicy::ByStartSequence {
                        start_sequence: next + 1,
                    },
                )
                .await?;
            }
        }
        Ok(())
    }
}

/// The next position of a consumer whose acknowledgement floor is stream sequence
/// `ack_floor` on a stream whose last sequence is `last`, with `unread` records not yet
/// acknowledged (pending and delivered): the floor once something was acknowledged (every
/// record up to it is); before that (nats-server keeps the floor at 0 for a consumer
/// created at a start sequence), the first record not yet acknowledged. Pure.
fn next_position(ack_floor: u64, last: u64, unread: u64) -> u64 {
    if ack_floor > 0 {
        ack_floor
    } else {
        last.saturating_sub(unread)
    }
}

/// What a topic's stream description starts with (`ensure_stream`); the topic follows.
const STREAM_DESCRIPTION_PREFIX: &str = "wharf topic ";

/// Whether a consumer-info error means the consumer (or its stream) is absent.
fn consumer_absent(kind: &async_nats::jetstream::context::ConsumerInfoErrorKind) -> bool {
    use async_nats::jetstream::context::ConsumerInfoErrorKind as K;
    match kind {
        K::NotFound | K::StreamNotFound => true,
        K::JetStream(e) => {
            e.error_code() == jetstream::ErrorCode::CONSUMER_NOT_FOUND
                || e.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND
        }
        K::InvalidName | K::Offline | K::Request | K::TimedOut | K::NoResponders => false,
    }
}

impl JetStreamLog {
    /// Records in `stream_name` (its last sequence; 0 when it does not exist).
    async fn head(&self, conn: &Conn, stream_name: &str) -> Result<u64, LogError> {
        let what = format!("stream {stream_name}");
        let got = conn
            .within(self.request_timeout(), conn.js.get_stream(stream_name))
            .await
            .map_err(|err| unavailable(&what, err))?;
        match got {
            Ok(mut stream) => {
                let info = stream.info().await.map_err(|err| unavailable(&what, err))?;
                Ok(info.state.last_sequence)
            }
            Err(err)
                if matches!(
                    err.kind(),
                    async_nats::jetstream::context::GetStreamErrorKind::JetStream(e)
                        if e.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND
                ) =>
            {
                Ok(0)
            }
            Err(err) => Err(unavailable(&what, err)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::next_position;

    #[test]
    fn a_consumer_that_acknowledged_is_at_its_floor() {
        assert_eq!(next_position(5, 9, 0), 5);
    }

    #[test]
    fn a_consumer_created_at_a_start_sequence_is_at_its_first_unread_record() {
        // Stream of 5 records, consumer starting at sequence 3: 3 records unread.
        assert_eq!(next_position(0, 5, 3), 2);
        assert_eq!(next_position(0, 5, 5), 0);
        assert_eq!(next_position(0, 0, 0), 0);
    }
}
