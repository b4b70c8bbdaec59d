//! A reader of the JetStream log: one durable pull consumer per topic.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, consumer};
use async_trait::async_trait;
use futures::StreamExt;

use super::super::{AckToken, Delivered, LogConsumer, LogError, LogLimits, codec};
use super::{JetStreamLog, conn::Conn, unavailable};

/// Longest wait on one topic before trying the next, for readers of several topics.
pub const MULTI_TOPIC_WAIT_SLICE_MS: u64 = 200;
/// Least time between two rewinds by one reader after failures (see "Redelivery").
pub const MIN_REWIND_INTERVAL_MS: u64 = 10_000;
/// Double acks sent before waiting for their confirmations.
pub const ACK_IN_FLIGHT: usize = 256;

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
    /// A reader of `name` bound on `conn` to the durable consumer of each topic.
    pub(super) fn new(
        log: JetStreamLog,
        conn: Arc<Conn>,
        name: &str,
        topics: Vec<(String, consumer::PullConsumer)>,
    ) -> Self {
        let limits = log.options().limits;
        Self {
            log,
            conn,
            name: name.to_owned(),
            topics,
            next_topic: 0,
            limits,
            in_flight: HashSet::new(),
            rebind: false,
            last_rewind: None,
        }
    }

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
