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
//!   redelivers records of a reader that died. [`LogLimits::max_in_flight_records`] bounds
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

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::{self, consumer, stream};
use async_trait::async_trait;
use futures::StreamExt;

use super::{
    AckToken, Delivered, LogConsumer, LogError, LogLimits, LogRecord, RecordLog, StartPosition,
    codec,
};

/// Default prefix of stream names and subjects.
pub const DEFAULT_PREFIX: &str = "wharf";
/// Default time a delivered record may stay unacknowledged before JetStream redelivers it.
/// Records of a reader that died come again sooner, when its replacement opens the
/// consumer (see "Redelivery"); this timeout catches a reader that hangs while alive and
/// deliveries or acks that a killed nats-server lost (2.9 loses consumer acks on SIGKILL,
/// which otherwise stalls a consumer at `max_ack_pending` for the whole wait). A sink whose
/// put and flush of one batch take longer than this sees that batch again (at least once).
pub const DEFAULT_ACK_WAIT_MS: u64 = 20_000;
/// Default timeout of one JetStream API request (publish ack, create, double ack).
pub const DEFAULT_REQUEST_TIMEOUT_MS: u64 = 5_000;
/// Longest wait on one topic before trying the next, for readers of several topics.
pub const MULTI_TOPIC_WAIT_SLICE_MS: u64 = 200;
/// Least time between two rewinds by one reader after failures (see "Redelivery").
pub const MIN_REWIND_INTERVAL_MS: u64 = 10_000;
/// Double acks sent before waiting for their confirmations.
pub const ACK_IN_FLIGHT: usize = 256;
/// Longest time between two checks of a connection's state while waiting on it (the
/// disconnect event normally ends the wait sooner).
const CONNECTION_CHECK_MS: u64 = 250;
/// Longest name token kept before a hash replaces the rest.
const MAX_TOKEN_CHARS: usize = 48;

/// Options of the JetStream backend.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct JetStreamOptions {
    /// Replicas of each stream (1 for a single server, 3 or 5 in a cluster).
    pub replicas: usize,
    /// Prefix of stream names (upper-cased) and subjects (as given); letters, digits, `-`, `_`.
    pub prefix: String,
    /// Milliseconds a delivered record may stay unacknowledged before redelivery.
    pub ack_wait_ms: u64,
    /// Milliseconds one JetStream request may take.
    pub request_timeout_ms: u64,
    /// Fetch and in-flight bounds.
    pub limits: LogLimits,
    /// TLS and credentials of the connection (docs/security.md); never serialized.
    #[serde(skip)]
    pub security: NatsSecurity,
}

/// TLS and credentials of the NATS connection (`--nats-cacert`, `--nats-cert`,
/// `--nats-key`, `--nats-creds`, `--nats-user`). Files are read at each connect.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NatsSecurity {
    /// PEM CA of the server's certificate; set, the client requires TLS whatever the
    /// URL's scheme.
    pub ca: Option<PathBuf>,
    /// PEM client certificate and key, for a server with `verify: true`.
    pub client_cert: Option<(PathBuf, PathBuf)>,
    /// How the client authenticates, if at all.
    pub credentials: Option<NatsCredentials>,
}

/// NATS authentication.
#[derive(Clone, PartialEq, Eq)]
pub enum NatsCredentials {
    /// A `.creds` file (JWT and NKey seed, as `nsc` writes it).
    CredsFile(PathBuf),
    /// A user and its password (never shown: Debug prints a placeholder).
    UserPassword {
        /// User name.
        user: String,
        /// Its password.
        password: String,
    },
}

impl std::fmt::Debug for NatsCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NatsCredentials::CredsFile(path) => f.debug_tuple("CredsFile").field(path).finish(),
            NatsCredentials::UserPassword { user, .. } => f
                .debug_struct("UserPassword")
                .field("user", user)
                .field("password", &wharf::sdk::REDACTED)
                .finish(),
        }
    }
}

impl NatsSecurity {
    /// Whether any TLS material is configured.
    pub fn tls(&self) -> bool {
        self.ca.is_some() || self.client_cert.is_some()
    }

    /// `options` with TLS and credentials applied.
    ///
    /// # Errors
    /// [`LogError::InvalidConfig`] naming `--nats-creds` when the file cannot be read.
    async fn apply(
        &self,
        mut options: async_nats::ConnectOptions,
    ) -> Result<async_nats::ConnectOptions, LogError> {
        if let Some(ca) = &self.ca {
            options = options.add_root_certificates(ca.clone()).require_tls(true);
        }
        if let Some((cert, key)) = &self.client_cert {
            options = options
                .add_client_certificate(cert.clone(), key.clone())
                .require_tls(true);
        }
        match &self.credentials {
            None => Ok(options),
            Some(NatsCredentials::UserPassword { user, password }) => {
                Ok(options.user_and_password(user.clone(), password.clone()))
            }
            Some(NatsCredentials::CredsFile(path)) => {
                options.credentials_file(path).await.map_err(|e| {
                    LogError::InvalidConfig(format!("--nats-creds {}: {e}", path.display()))
                })
            }
        }
    }
}

/// What to add to a failed connect's message: a server that requires TLS reached
/// without any TLS setting fails its handshake against the system roots.
fn connect_hint(security: &NatsSecurity) -> &'static str {
    if security.tls() {
        ""
    } else {
        " (if the NATS server requires TLS, give its CA with --nats-cacert, and --nats-cert/--nats-key when it verifies clients)"
    }
}

impl Default for JetStreamOptions {
    fn default() -> Self {
        Self {
            replicas: 1,
            prefix: DEFAULT_PREFIX.to_string(),
            ack_wait_ms: DEFAULT_ACK_WAIT_MS,
            request_timeout_ms: DEFAULT_REQUEST_TIMEOUT_MS,
            limits: LogLimits::default(),
            security: NatsSecurity::default(),
        }
    }
}

impl JetStreamOptions {
    fn validate(&self) -> Result<(), LogError> {
        self.limits.validate()?;
        if !(1..=5).contains(&self.replicas) {
            return Err(LogError::InvalidConfig(format!(
                "replicas must be 1..=5, got {}",
                self.replicas
            )));
        }
        if self.prefix.is_empty()
            || !self
                .prefix
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(LogError::InvalidConfig(format!(
                "prefix must be letters, digits, '-' or '_', got {:?}",
                self.prefix
            )));
        }
        if self.ack_wait_ms == 0 || self.request_timeout_ms == 0 {
            return Err(LogError::InvalidConfig(
                "ack_wait_ms and request_timeout_ms must be at least 1".into(),
            ));
        }
        Ok(())
    }
}

/// A name usable as a NATS stream/consumer name and subject token, whatever `name` is:
/// ASCII letters, digits, `-` and `_` are kept, anything else becomes `_`; when that
/// changed the name or it is longer than 48 characters, the kept part is cut to 48 and
/// `-` plus 16 hex digits of a stable 64-bit FNV-1a hash of the original are appended,
/// so distinct names never share a token in practice. Empty names hash too.
pub fn name_token(name: &str) -> String {
    let cleaned: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if cleaned == name && !name.is_empty() && name.len() <= MAX_TOKEN_CHARS {
        return cleaned;
    }
    let kept: String = cleaned.chars().take(MAX_TOKEN_CHARS).collect();
    format!("{kept}-{:016x}", fnv1a64(name.as_bytes()))
}

fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

fn unavailable(what: &str, err: impl std::fmt::Display) -> LogError {
    LogError::Unavailable(format!("{what}: {err}"))
}

/// One NATS connection of the log; it never reconnects (see "Connections").
struct Conn {
    client: async_nats::Client,
    js: jetstream::Context,
    /// Becomes true when async-nats reports the connection lost.
    lost: tokio::sync::watch::Receiver<bool>,
}

impl Conn {
    fn alive(&self) -> bool {
        !*self.lost.borrow()
            && self.client.connection_state() == async_nats::connection::State::Connected
    }

    /// Resolves once the connection is lost.
    async fn lost(&self) {
        let mut lost = self.lost.clone();
        while self.alive() {
            // The state is polled too: an event may be dropped when the event queue is full.
            let check = Duration::from_millis(CONNECTION_CHECK_MS);
            if let Ok(Err(_)) = tokio::time::timeout(check, lost.changed()).await {
                tokio::time::sleep(check).await;
            }
        }
    }

    /// Runs `fut` for at most `limit`, and not past the loss of this connection (a lost
    /// connection's calls would otherwise wait for nothing). The error says which ended it.
    async fn within<F: Future>(&self, limit: Duration, fut: F) -> Result<F::Output, String> {
        tokio::select! {
            r = tokio::time::timeout(limit, fut) => {
                r.map_err(|_| format!("no answer within {} ms", limit.as_millis()))
            }
            () = self.lost() => Err("connection to NATS lost".to_string()),
        }
    }
}

/// Where a consumer being rewound starts again: (stream, durable) -> stream sequence.
type PendingRewinds = Mutex<HashMap<(String, String), u64>>;

/// The JetStream backend. Cheap to clone.
#[derive(Clone)]
pub struct JetStreamLog {
    inner: Arc<Inner>,
}

struct Inner {
    url: String,
    options: JetStreamOptions,
    /// The current connection; replaced by a new one once it is lost.
    conn: tokio::sync::Mutex<Option<Arc<Conn>>>,
    /// Streams known to exist (created or checked by this process).
    streams: Mutex<HashSet<String>>,
    /// Rewinds whose consumer was deleted but not yet created again.
    rewinds: PendingRewinds,
}

impl JetStreamLog {
    /// Connects to `url` (comma-separated server URLs). When no server answers yet, the
    /// log connects on first use instead. A lost connection is replaced by a new one on the
    /// next call (see "Connections"); calls made while no server answers fail with
    /// [`LogError::Unavailable`].
    pub async fn connect(url: &str, options: JetStreamOptions) -> Result<Self, LogError> {
        options.validate()?;
        for server in url.split(',') {
            server
                .trim()
                .parse::<async_nats::ServerAddr>()
                .map_err(|err| LogError::InvalidConfig(format!("NATS URL {server:?}: {err}")))?;
        }
        let log = Self {
            inner: Arc::new(Inner {
                url: url.to_string(),
                options,
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
        &self.inner.options
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
        let security = &self.options().security;
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
            .connect(self.inner.url.as_str())
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
                description: Some(format!("wharf topic {topic}")),
                storage: stream::StorageType::File,
                retention: stream::RetentionPolicy::Limits,
                num_replicas: self.options().replicas,
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
        Ok(Box::new(JetStreamConsumer {
            log: self.clone(),
            conn,
            name: consumer.to_string(),
            topics: bound,
            next_topic: 0,
            limits: self.options().limits,
            in_flight: HashSet::new(),
            rebind: false,
            last_rewind: None,
        }))
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
}

/// One reader of a JetStream consumer (bound to the durable consumer of each topic).
pub struct JetStreamConsumer {
    log: JetStreamLog,
    /// The connection the reader is bound on; fetches and acks use it.
    conn: Arc<Conn>,
    name: String,
    topics: Vec<(String, consumer::PullConsumer)>,
    next_topic: usize,
    limits: LogLimits,
    /// (topic, position) delivered to this reader and not yet acknowledged by it.
    in_flight: HashSet<(String, u64)>,
    /// Set when a call failed or was dropped midway: before the next fetch the reader binds
    /// again, rewinding deliveries that may have been lost.
    rebind: bool,
    /// When this reader last rewound the consumer.
    last_rewind: Option<tokio::time::Instant>,
}

impl JetStreamConsumer {
    /// Binds again when a call failed or the connection was lost. A lost connection always
    /// rewinds; a failure on a live one at most once per [`MIN_REWIND_INTERVAL_MS`], so
    /// that readers sharing a consumer cannot keep rewinding it in turns.
    async fn rebind_if_needed(&mut self) -> Result<(), LogError> {
        let lost = !self.conn.alive();
        if !self.rebind && !lost {
            return Ok(());
        }
        let now = tokio::time::Instant::now();
        let may_rewind = lost
            || self.last_rewind.is_none_or(|at| {
                now.duration_since(at) >= Duration::from_millis(MIN_REWIND_INTERVAL_MS)
            });
        let conn = self.log.conn().await?;
        for (topic, pull) in self.topics.iter_mut() {
            // An existing consumer keeps its start; the policy only matters if it vanished.
            *pull = self
                .log
                .bind(
                    &conn,
                    &self.name,
                    topic,
                    consumer::DeliverPolicy::All,
                    may_rewind,
                )
                .await?;
        }
        // Only now: a bind that failed midway on a new connection rewinds again next time.
        self.conn = conn;
        if may_rewind {
            self.last_rewind = Some(now);
        }
        self.in_flight.clear();
        self.rebind = false;
        Ok(())
    }

    fn convert(topic: &str, msg: jetstream::Message) -> Result<Delivered, LogError> {
        let info = msg
            .info()
            .map_err(|err| LogError::Corrupt(format!("message without JetStream info: {err}")))?;
        let position = info.stream_sequence.saturating_sub(1);
        let handle = msg
            .reply
            .as_ref()
            .map(|s| s.to_string())
            .unwrap_or_default();
        let record = codec::decode(&msg.payload)?;
        Ok(Delivered {
            record: record.into_sink_record(topic, position),
            ack: AckToken {
                topic: topic.to_string(),
                position,
                handle,
            },
        })
    }

    /// Drains a batch into `out`, for at most `limit` and not past the connection's loss.
    /// A 409 (max ack pending reached) ends the batch quietly: that is back-pressure, not a
    /// failure.
    async fn drain(
        conn: &Conn,
        limit: Duration,
        topic: &str,
        mut batch: consumer::pull::Batch,
        out: &mut Vec<Delivered>,
    ) -> Result<(), LogError> {
        let what = format!("fetch from topic {topic}");
        conn.within(limit, async {
            while let Some(msg) = batch.next().await {
                match msg {
                    Ok(msg) => out.push(Self::convert(topic, msg)?),
                    Err(err) => {
                        let text = err.to_string();
                        if text.contains("409") {
                            return Ok(());
                        }
                        return Err(unavailable(&what, text));
                    }
                }
            }
            Ok(())
        })
        .await
        .map_err(|err| unavailable(&what, err))?
    }

    fn track(&mut self, delivered: &[Delivered]) {
        for d in delivered {
            self.in_flight.insert((d.ack.topic.clone(), d.ack.position));
        }
    }

    /// Whatever is available now, up to `max`, without waiting.
    async fn fetch_now(&mut self, max: usize) -> Result<Vec<Delivered>, LogError> {
        let timeout = self.log.request_timeout();
        let mut out = Vec::new();
        let n = self.topics.len();
        for i in 0..n {
            let want = max - out.len();
            if want == 0 {
                break;
            }
            let (topic, pull) = &self.topics[(self.next_topic + i) % n];
            let what = format!("fetch from topic {topic}");
            let batch = self
                .conn
                .within(
                    timeout,
                    pull.fetch()
                        .max_messages(want)
                        .max_bytes(self.limits.max_fetch_bytes)
                        .messages(),
                )
                .await
                .map_err(|err| unavailable(&what, err))?
                .map_err(|err| unavailable(&what, err))?;
            Self::drain(&self.conn, timeout, topic, batch, &mut out).await?;
        }
        self.next_topic = (self.next_topic + 1) % n.max(1);
        Ok(out)
    }
}

#[async_trait]
impl LogConsumer for JetStreamConsumer {
    async fn fetch(&mut self, max: usize, wait: Duration) -> Result<Vec<Delivered>, LogError> {
        self.rebind_if_needed()
            .await
            .inspect_err(|_| self.rebind = true)?;
        // Stays set when this call fails or is dropped midway (a `select!`): a pull request
        // may then have taken a record no one will see, so the next fetch binds again.
        self.rebind = true;
        let result = self.fetch_inner(max, wait).await;
        self.rebind = result.is_err();
        result
    }

    async fn ack(&mut self, tokens: &[AckToken]) -> Result<(), LogError> {
        let pending_rebind = self.rebind;
        self.rebind = true;
        let result = self.ack_inner(tokens).await;
        // Acknowledged or not, the caller let go of these records; if the ack was lost they
        // come again after a rebind.
        for token in tokens {
            self.in_flight
                .remove(&(token.topic.clone(), token.position));
        }
        self.rebind = pending_rebind || result.is_err();
        result
    }
}

impl JetStreamConsumer {
    async fn fetch_inner(
        &mut self,
        max: usize,
        wait: Duration,
    ) -> Result<Vec<Delivered>, LogError> {
        let room = self
            .limits
            .max_in_flight_records
            .saturating_sub(self.in_flight.len());
        if self.topics.is_empty() || room == 0 {
            // Nothing may be delivered until this reader acknowledges: wait like an empty log.
            tokio::time::sleep(wait).await;
            return Ok(Vec::new());
        }
        let max = max.clamp(1, self.limits.max_fetch_records).min(room);
        let out = self.fetch_now(max).await?;
        if !out.is_empty() {
            self.track(&out);
            return Ok(out);
        }
        let timeout = self.log.request_timeout();
        let deadline = tokio::time::Instant::now() + wait;
        let slice = if self.topics.len() == 1 {
            wait
        } else {
            Duration::from_millis(MULTI_TOPIC_WAIT_SLICE_MS)
        };
        loop {
            let now = tokio::time::Instant::now();
            // JetStream rejects pull expiries under a millisecond.
            let left = deadline.saturating_duration_since(now);
            if left < Duration::from_millis(10) {
                return Ok(Vec::new());
            }
            let i = self.next_topic % self.topics.len();
            self.next_topic = (self.next_topic + 1) % self.topics.len();
            let (topic, pull) = &self.topics[i];
            let what = format!("fetch from topic {topic}");
            let expires = left.min(slice);
            // Wait for one record only, so the request ends as soon as one arrives and no
            // pending pull request outlives this call.
            let batch = self
                .conn
                .within(
                    timeout,
                    pull.batch().max_messages(1).expires(expires).messages(),
                )
                .await
                .map_err(|err| unavailable(&what, err))?
                .map_err(|err| unavailable(&what, err))?;
            let topic = topic.clone();
            let mut got = Vec::new();
            Self::drain(&self.conn, expires + timeout, &topic, batch, &mut got).await?;
            if !got.is_empty() {
                self.next_topic = i;
                let more = self.fetch_now(max - got.len()).await?;
                got.extend(more);
                self.track(&got);
                return Ok(got);
            }
        }
    }

    async fn ack_inner(&mut self, tokens: &[AckToken]) -> Result<(), LogError> {
        if let Some(t) = tokens.iter().find(|t| t.handle.is_empty()) {
            return Err(LogError::InvalidConfig(format!(
                "ack token for {}@{} has no JetStream reply subject",
                t.topic, t.position
            )));
        }
        let timeout = self.log.request_timeout();
        let conn = &self.conn;
        let requests: Vec<_> = tokens
            .iter()
            .map(|token| {
                let handle = token.handle.clone();
                let what = format!(
                    "ack {}@{} for consumer {}",
                    token.topic, token.position, self.name
                );
                async move {
                    conn.within(timeout, conn.client.request(handle, "+ACK".into()))
                        .await
                        .map_err(|err| unavailable(&what, err))?
                        .map(|_| ())
                        .map_err(|err| unavailable(&what, err))
                }
            })
            .collect();
        let results: Vec<Result<(), LogError>> = futures::stream::iter(requests)
            .buffer_unordered(ACK_IN_FLIGHT)
            .collect()
            .await;
        results.into_iter().collect()
    }
}
