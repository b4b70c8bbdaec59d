//! The `RecordLog` contract: one body per promise, run against every backend through
//! `wharf_executor::log::open` (the one place that opens a log). A new backend is a
//! variant of [`Backend`] and a line in the `contract!` invocation at the end.
//!
//! Where backends may differ, [`Backend`] says how (`keeps_acks_above_the_floor`,
//! `shares_records_across_handles`, `takes_any_topic_name`); every other assertion holds
//! for all of them.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use wharf_executor::log::jetstream::DEFAULT_ACK_WAIT_MS;
use wharf_executor::log::{
    ConsumerPosition, Delivered, EmbeddedConfig, JetStreamOptions, KafkaConfig, LogConfig,
    LogConsumer, LogError, LogLimits, NatsConfig, PartitionShare, PositionChange, RecordLog,
    StartPosition,
};

use crate::common::{
    DEADLINE, EMPTY_FETCH_WAIT, FETCH_WAIT, assert_nothing_more, fetch_held, nats_url,
    read_and_ack, rec, recs, remove_streams, topics, unique_prefix,
};
use crate::tansu::TestKafka;

/// A backend under test, with the storage it owns for one test.
pub enum Backend {
    /// The embedded log in a temp dir.
    Embedded {
        /// Holds the log's files.
        dir: tempfile::TempDir,
    },
    /// NATS JetStream on the shared server, under a stream prefix of its own.
    JetStream {
        /// The server.
        url: String,
        /// The streams' prefix, removed at the end.
        prefix: String,
    },
    /// Kafka: a tansu broker of the test's own (a Kafka-protocol stand-in, see
    /// `tansu.rs` for where it deviates from Apache Kafka).
    Kafka {
        /// The broker, killed at the end.
        broker: TestKafka,
    },
}

impl Backend {
    /// Whether the backend reads and moves a consumer's positions (KIP-875's sink
    /// offsets); the others refuse with [`LogError::Unsupported`].
    pub fn moves_positions(&self) -> bool {
        match self {
            Backend::Embedded { .. } | Backend::JetStream { .. } => true,
            Backend::Kafka { .. } => false,
        }
    }

    /// The embedded log in a fresh temp dir.
    pub fn embedded() -> Self {
        Self::Embedded {
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    /// JetStream on the shared server with a fresh prefix.
    pub fn jetstream() -> Self {
        Self::JetStream {
            url: nats_url(),
            prefix: unique_prefix(),
        }
    }

    /// Kafka on a broker of its own.
    pub fn kafka() -> Self {
        Self::Kafka {
            broker: TestKafka::start(),
        }
    }

    /// The log's config with `limits`.
    fn config(&self, limits: LogLimits) -> LogConfig {
        match self {
            Backend::Embedded { dir } => LogConfig::Embedded(EmbeddedConfig {
                dir: dir.path().join("log"),
                limits,
            }),
            Backend::JetStream { url, prefix } => LogConfig::Nats(NatsConfig {
                options: JetStreamOptions {
                    prefix: prefix.clone(),
                    limits,
                    ..JetStreamOptions::default()
                },
                ..NatsConfig::new([url.as_str()])
            }),
            Backend::Kafka { broker } => LogConfig::Kafka(KafkaConfig {
                limits,
                ..KafkaConfig::new([broker.broker.as_str()])
            }),
        }
    }

    /// Opens the log, as an executor starting (again) does.
    async fn open(&self) -> Arc<dyn RecordLog> {
        self.open_with(LogLimits::default()).await
    }

    async fn open_with(&self, limits: LogLimits) -> Arc<dyn RecordLog> {
        match wharf_executor::log::open(&self.config(limits)).await {
            Ok(log) => log,
            Err(err) => panic!("open the record log: {err}"),
        }
    }

    /// Another executor's handle on the same log: its own connection to NATS; the same
    /// handle for the embedded log, which one process alone opens.
    async fn peer(&self, log: &Arc<dyn RecordLog>) -> Arc<dyn RecordLog> {
        match self {
            Backend::Embedded { .. } => log.clone(),
            Backend::JetStream { .. } | Backend::Kafka { .. } => self.open().await,
        }
    }

    /// Whether readers of one consumer on two handles of the log (two executors) share
    /// its records one by one. Kafka gives a partition to one reader at a time; the Kafka
    /// log shares records among the readers of one handle, and dividing partitions among
    /// executors is not done yet, so the test shares them within one handle there.
    fn shares_records_across_handles(&self) -> bool {
        match self {
            Backend::Embedded { .. } | Backend::JetStream { .. } => true,
            Backend::Kafka { .. } => false,
        }
    }

    /// Whether any topic name is kept apart from every other: Wharf's topics are Kafka's
    /// own, so the Kafka log takes only names Kafka accepts (letters, digits, `.`, `_`,
    /// `-`; and Apache Kafka refuses a name that differs from an existing one only by `.`
    /// against `_`).
    fn takes_any_topic_name(&self) -> bool {
        match self {
            Backend::Embedded { .. } | Backend::JetStream { .. } => true,
            Backend::Kafka { .. } => false,
        }
    }

    /// Whether acknowledgements above a consumer's floor (readers sharing a consumer
    /// acknowledge out of order) survive a restart: the embedded log keeps each one;
    /// JetStream keeps the floor only, so the records above it come again.
    fn keeps_acks_above_the_floor(&self) -> bool {
        match self {
            Backend::Embedded { .. } => true,
            Backend::JetStream { .. } | Backend::Kafka { .. } => false,
        }
    }

    /// Whether the backend reports the end of a topic after the last record of the last
    /// append, as Apache Kafka does. tansu 0.6.0, the Kafka-protocol broker these tests run
    /// against, answers ListOffsets(latest) with the last batch's base offset + 1, so a
    /// consumer starting at the end after a many-record append would start inside it; the
    /// Kafka log itself relies on the protocol's answer, as on Apache Kafka. Where this is
    /// false, the records a `Latest` consumer must not see are appended one per call.
    fn reports_the_end_after_every_record(&self) -> bool {
        match self {
            Backend::Embedded { .. } | Backend::JetStream { .. } => true,
            Backend::Kafka { .. } => false,
        }
    }

    /// Appends `records` to `topic` before a `Latest` consumer is made: in one call, or one
    /// per call where the broker's end offset counts batches (see
    /// [`Backend::reports_the_end_after_every_record`]).
    async fn append_before_latest(
        &self,
        log: &Arc<dyn RecordLog>,
        topic: &str,
        records: Vec<wharf_executor::log::LogRecord>,
    ) {
        if self.reports_the_end_after_every_record() {
            log.append(topic, records).await.expect("append");
        } else {
            for record in records {
                log.append(topic, vec![record]).await.expect("append");
            }
        }
    }

    /// Removes what the test left on a shared server.
    pub async fn finish(self) {
        match self {
            Backend::Embedded { .. } | Backend::Kafka { .. } => {}
            Backend::JetStream { url, prefix } => remove_streams(&url, &prefix).await,
        }
    }
}

fn positions(batch: &[Delivered]) -> BTreeSet<u64> {
    batch.iter().map(|d| d.ack.position).collect()
}

async fn appended_records_come_back_once_in_order_with_their_contents(b: &Backend) {
    let log = b.open().await;
    assert_eq!(
        log.append("t", recs("a", 0..3)).await.expect("append"),
        vec![0, 1, 2]
    );
    assert_eq!(
        log.append("t", recs("a", 3..5)).await.expect("append"),
        vec![3, 4]
    );
    let mut reader = log
        .consumer("c", &topics(&["t"]), StartPosition::Earliest)
        .await
        .expect("consumer");
    let batch = fetch_held(reader.as_mut(), 5).await;
    assert_eq!(batch.len(), 5);
    for (i, d) in batch.iter().enumerate() {
        let expected = rec(&format!("a{i}"));
        assert_eq!(d.record.topic, "t");
        assert_eq!(d.record.offset, i as u64);
        assert_eq!(d.ack.position, i as u64);
        assert_eq!(d.record.value, expected.value);
        assert_eq!(d.record.key, expected.key);
        assert_eq!(
            d.record.headers, expected.headers,
            "header bytes kept exactly"
        );
        assert_eq!(d.record.timestamp_ms, expected.timestamp_ms);
    }
    let tokens: Vec<_> = batch.iter().map(|d| d.ack.clone()).collect();
    reader.ack(&tokens).await.expect("ack");
    assert_nothing_more(reader.as_mut()).await;
}

async fn order_is_kept_per_topic_when_one_reader_reads_several(b: &Backend) {
    let log = b.open().await;
    for i in 0..20u64 {
        log.append("x", recs("x", i * 5..i * 5 + 5))
            .await
            .expect("append x");
        log.append("y", recs("y", i * 3..i * 3 + 3))
            .await
            .expect("append y");
    }
    let mut reader = log
        .consumer("c", &topics(&["x", "y"]), StartPosition::Earliest)
        .await
        .expect("consumer");
    let got = read_and_ack(reader.as_mut(), 160).await;
    for (topic, prefix, n) in [("x", "x", 100u64), ("y", "y", 60u64)] {
        let seen: Vec<_> = got.iter().filter(|(t, _, _)| t == topic).collect();
        let expected: Vec<_> = (0..n).map(|i| (i, format!("{prefix}{i}"))).collect();
        let actual: Vec<_> = seen.iter().map(|(_, o, v)| (*o, v.clone())).collect();
        assert_eq!(actual, expected, "topic {topic} in order, once each");
    }
    assert_nothing_more(reader.as_mut()).await;
}

async fn odd_topic_and_consumer_names_keep_their_records_apart(b: &Backend) {
    let log = b.open().await;
    // These would collide (or be invalid) if names were only cleaned of bad characters.
    let long = "long-".repeat(40);
    let odd = if b.takes_any_topic_name() {
        ["orders.v1", "orders_v1", "a b/*>ü", &long]
    } else {
        ["orders.v1", "orders-v1", "ORDERS.v1", &long]
    };
    for (i, topic) in odd.iter().enumerate() {
        log.append(topic, recs(&format!("{i}-"), 0..10))
            .await
            .expect("append odd topic");
    }
    let all_topics: Vec<String> = odd.iter().map(|t| t.to_string()).collect();
    let mut reader = log
        .consumer(
            "wharf-sink-odd name.*",
            &all_topics,
            StartPosition::Earliest,
        )
        .await
        .expect("consumer");
    let got = read_and_ack(reader.as_mut(), 40).await;
    for (i, topic) in odd.iter().enumerate() {
        let seen: Vec<_> = got
            .iter()
            .filter(|(t, _, _)| t == topic)
            .map(|(_, o, v)| (*o, v.clone()))
            .collect();
        let expected: Vec<_> = (0..10u64).map(|n| (n, format!("{i}-{n}"))).collect();
        assert_eq!(seen, expected, "topic {topic:?} in order, once each");
    }
    assert_nothing_more(reader.as_mut()).await;
}

async fn two_readers_of_one_consumer_share_the_records_without_duplicates(b: &Backend) {
    let log = b.open().await;
    log.append("t", recs("v", 0..1_000)).await.expect("append");
    let mut a = log
        .consumer("shared", &topics(&["t"]), StartPosition::Earliest)
        .await
        .expect("a");
    // A second executor's reader where the backend has several: same consumer name.
    let other = if b.shares_records_across_handles() {
        b.peer(&log).await
    } else {
        log.clone()
    };
    let mut r = other
        .consumer("shared", &topics(&["t"]), StartPosition::Earliest)
        .await
        .expect("b");

    // Interleaved, unacknowledged: b must not get what a holds.
    let first_a = a.fetch(10, FETCH_WAIT).await.expect("fetch a");
    let first_b = r.fetch(10, FETCH_WAIT).await.expect("fetch b");
    assert_eq!(positions(&first_a), (0..10).collect());
    assert_eq!(positions(&first_b), (10..20).collect());
    a.ack(&first_a.iter().map(|d| d.ack.clone()).collect::<Vec<_>>())
        .await
        .expect("ack a");
    r.ack(&first_b.iter().map(|d| d.ack.clone()).collect::<Vec<_>>())
        .await
        .expect("ack b");

    // Then both concurrently until everything is read.
    let reader = |mut r: Box<dyn LogConsumer>| async move {
        let mut seen = Vec::new();
        loop {
            let batch = r.fetch(7, EMPTY_FETCH_WAIT).await.expect("fetch");
            if batch.is_empty() {
                return seen;
            }
            let tokens: Vec<_> = batch.iter().map(|d| d.ack.clone()).collect();
            seen.extend(tokens.iter().map(|t| t.position));
            r.ack(&tokens).await.expect("ack");
        }
    };
    let (sa, sb) = tokio::join!(tokio::spawn(reader(a)), tokio::spawn(reader(r)));
    let (sa, sb) = (sa.expect("reader a"), sb.expect("reader b"));
    let mut all: Vec<u64> = sa.iter().chain(sb.iter()).copied().collect();
    all.sort_unstable();
    assert_eq!(
        all,
        (20..1_000).collect::<Vec<_>>(),
        "each record exactly once"
    );
}

async fn records_of_a_dropped_reader_go_to_another_reader(b: &Backend) {
    let log = b.open().await;
    log.append("t", recs("v", 0..10)).await.expect("append");
    let mut a = log
        .consumer("c", &topics(&["t"]), StartPosition::Earliest)
        .await
        .expect("a");
    let held = fetch_held(a.as_mut(), 4).await;
    assert_eq!(held.len(), 4);
    let mut r = log
        .consumer("c", &topics(&["t"]), StartPosition::Earliest)
        .await
        .expect("b");
    drop(a);
    let got = read_and_ack(r.as_mut(), 10).await;
    let mut offsets: Vec<u64> = got.iter().map(|(_, o, _)| *o).collect();
    offsets.sort_unstable();
    assert_eq!(offsets, (0..10).collect::<Vec<_>>());
    assert_nothing_more(r.as_mut()).await;
}

async fn records_held_by_a_gone_reader_come_again_at_once_and_in_order(b: &Backend) {
    // Default ack_wait: redelivery must not wait for it.
    let log = b.open().await;
    log.append("t", recs("v", 0..20)).await.expect("append");
    {
        let gone = b.peer(&log).await;
        let mut reader = gone
            .consumer("c", &topics(&["t"]), StartPosition::Earliest)
            .await
            .expect("consumer");
        let held = fetch_held(reader.as_mut(), 10).await;
        let first: Vec<_> = held[..3].iter().map(|d| d.ack.clone()).collect();
        reader.ack(&first).await.expect("ack");
    }
    let started = tokio::time::Instant::now();
    let mut reader = log
        .consumer("c", &topics(&["t"]), StartPosition::Earliest)
        .await
        .expect("consumer");
    let got = read_and_ack(reader.as_mut(), 17).await;
    let offsets: Vec<u64> = got.iter().map(|(_, o, _)| *o).collect();
    assert_eq!(
        offsets,
        (3..20).collect::<Vec<_>>(),
        "in order, nothing acked again"
    );
    assert!(
        started.elapsed() < Duration::from_millis(DEFAULT_ACK_WAIT_MS),
        "before ack_wait ran out"
    );
    assert_nothing_more(reader.as_mut()).await;
}

async fn a_fetch_cancelled_midway_leaves_its_records_for_the_next_fetch(b: &Backend) {
    let log = b.open().await;
    log.append("t", recs("v", 0..10)).await.expect("append");
    let mut reader = log
        .consumer("c", &topics(&["t"]), StartPosition::Earliest)
        .await
        .expect("consumer");
    // A zero timeout polls the fetch once (it claims records and starts reading) and
    // then drops it, as a `select!` on a stop signal does.
    let first = tokio::time::timeout(Duration::ZERO, reader.fetch(10, FETCH_WAIT)).await;
    let mut seen: Vec<u64> = match first {
        Ok(batch) => batch
            .expect("fetch")
            .iter()
            .map(|d| d.ack.position)
            .collect(),
        Err(_elapsed) => Vec::new(),
    };
    let rest = 10 - seen.len();
    let got = read_and_ack(reader.as_mut(), rest).await;
    seen.extend(got.iter().map(|(_, o, _)| *o));
    seen.sort_unstable();
    assert_eq!(seen, (0..10).collect::<Vec<_>>());
}

async fn a_fetch_dropped_while_waiting_does_not_strand_the_next_record(b: &Backend) {
    let log = b.open().await;
    let mut reader = log
        .consumer("c", &topics(&["t"]), StartPosition::Earliest)
        .await
        .expect("consumer");
    // Dropped while it waits (on the server, for JetStream), as a `select!` on a stop does.
    let waited = tokio::time::timeout(EMPTY_FETCH_WAIT, reader.fetch(10, DEADLINE)).await;
    assert!(waited.is_err(), "the fetch was still waiting");
    // This record may go to the abandoned wait.
    log.append("t", recs("v", 0..1)).await.expect("append");
    let started = tokio::time::Instant::now();
    let got = read_and_ack(reader.as_mut(), 1).await;
    assert_eq!(got, vec![("t".to_string(), 0, "v0".to_string())]);
    assert!(
        started.elapsed() < Duration::from_millis(DEFAULT_ACK_WAIT_MS),
        "not left for ack_wait"
    );
}

async fn a_waiting_fetch_returns_as_soon_as_a_record_is_appended(b: &Backend) {
    let log = b.open().await;
    let mut reader = log
        .consumer("c", &topics(&["t"]), StartPosition::Earliest)
        .await
        .expect("consumer");
    let started = tokio::time::Instant::now();
    let fetch = tokio::spawn(async move { reader.fetch(10, DEADLINE).await });
    log.append("t", recs("v", 0..1)).await.expect("append");
    let batch = fetch.await.expect("join").expect("fetch");
    assert_eq!(batch.len(), 1);
    assert!(started.elapsed() < DEADLINE, "woken by the append");
}

async fn after_a_restart_unacknowledged_records_come_again_and_acknowledged_never(b: &Backend) {
    {
        let log = b.open().await;
        log.append("t", recs("v", 0..10)).await.expect("append");
        let mut reader = log
            .consumer("c", &topics(&["t"]), StartPosition::Earliest)
            .await
            .expect("consumer");
        let batch = fetch_held(reader.as_mut(), 10).await;
        assert_eq!(batch.len(), 10);
        // Out of order, with gaps, as readers sharing a consumer do.
        let acked: Vec<_> = batch
            .iter()
            .filter(|d| [7, 0, 2, 1, 5].contains(&d.ack.position))
            .map(|d| d.ack.clone())
            .collect();
        reader.ack(&acked).await.expect("ack");
    }
    // Opened again, as after an executor restart.
    let log = b.open().await;
    let mut reader = log
        .consumer("c", &topics(&["t"]), StartPosition::Earliest)
        .await
        .expect("consumer");
    // The floor is 3 (0, 1, 2 acknowledged); 5 and 7, acknowledged above it, come again
    // where the backend keeps only the floor.
    let expected: Vec<u64> = if b.keeps_acks_above_the_floor() {
        vec![3, 4, 6, 8, 9]
    } else {
        (3..10).collect()
    };
    let got = read_and_ack(reader.as_mut(), expected.len()).await;
    let offsets: Vec<u64> = got.iter().map(|(_, o, _)| *o).collect();
    assert_eq!(offsets, expected);
    assert_nothing_more(reader.as_mut()).await;
    assert_eq!(
        log.append("t", recs("v", 10..11)).await.expect("append"),
        vec![10],
        "positions continue after a restart"
    );
    drop(reader);
    drop(log);

    let log = b.open().await;
    let mut reader = log
        .consumer("c", &topics(&["t"]), StartPosition::Earliest)
        .await
        .expect("consumer");
    let got = read_and_ack(reader.as_mut(), 1).await;
    assert_eq!(got, vec![("t".to_string(), 10, "v10".to_string())]);
    assert_nothing_more(reader.as_mut()).await;
}

async fn a_deleted_consumer_created_again_starts_from_its_configured_position(b: &Backend) {
    let log = b.open().await;
    b.append_before_latest(&log, "t", recs("v", 0..5)).await;
    let mut reader = log
        .consumer("wharf-sink-s", &topics(&["t"]), StartPosition::Earliest)
        .await
        .expect("consumer");
    read_and_ack(reader.as_mut(), 5).await;
    assert_nothing_more(reader.as_mut()).await;
    drop(reader);

    log.delete_consumer("wharf-sink-s").await.expect("delete");
    log.delete_consumer("never-existed")
        .await
        .expect("missing is fine");
    let mut again = log
        .consumer("wharf-sink-s", &topics(&["t"]), StartPosition::Earliest)
        .await
        .expect("consumer again");
    let got = read_and_ack(again.as_mut(), 5).await;
    assert_eq!(
        got.iter().map(|(_, o, _)| *o).collect::<Vec<_>>(),
        vec![0, 1, 2, 3, 4]
    );
    drop(again);

    // Survives a restart too: the old positions are gone.
    log.delete_consumer("wharf-sink-s").await.expect("delete");
    drop(log);
    let log = b.open().await;
    let mut latest = log
        .consumer("wharf-sink-s", &topics(&["t"]), StartPosition::Latest)
        .await
        .expect("latest");
    assert_nothing_more(latest.as_mut()).await;
    log.append("t", recs("v", 5..6)).await.expect("append");
    let got = read_and_ack(latest.as_mut(), 1).await;
    assert_eq!(got, vec![("t".to_string(), 5, "v5".to_string())]);
}

async fn consumer_positions_follow_acknowledgements_and_move_where_supported(b: &Backend) {
    let log = b.open().await;
    log.append("t", recs("v", 0..3)).await.expect("append");
    if !b.moves_positions() {
        // Refused with the reason, never answered as done.
        let read = log.consumer_positions("wharf-sink-p").await;
        assert!(matches!(read, Err(LogError::Unsupported(_))), "{read:?}");
        let change = PositionChange {
            topic: "t".into(),
            partition: 0,
            next: Some(1),
        };
        let moved = log.set_consumer_positions("wharf-sink-p", &[change]).await;
        assert!(matches!(moved, Err(LogError::Unsupported(_))), "{moved:?}");
        return;
    }
    let at = |next: u64| {
        vec![ConsumerPosition {
            topic: "t".into(),
            partition: 0,
            next,
        }]
    };
    let to = |next: Option<u64>| {
        [PositionChange {
            topic: "t".into(),
            partition: 0,
            next,
        }]
    };
    assert_eq!(
        log.consumer_positions("wharf-sink-p").await.expect("read"),
        Vec::new(),
        "a consumer that never read has no position"
    );
    let mut reader = log
        .consumer("wharf-sink-p", &topics(&["t"]), StartPosition::Earliest)
        .await
        .expect("consumer");
    read_and_ack(reader.as_mut(), 3).await;
    drop(reader);
    assert_eq!(
        log.consumer_positions("wharf-sink-p").await.expect("read"),
        at(3)
    );
    log.append("t", recs("v", 3..5)).await.expect("append");

    // Moved back: the next reader starts there.
    log.set_consumer_positions("wharf-sink-p", &to(Some(1)))
        .await
        .expect("move");
    assert_eq!(
        log.consumer_positions("wharf-sink-p").await.expect("read"),
        at(1)
    );
    let mut reader = log
        .consumer("wharf-sink-p", &topics(&["t"]), StartPosition::Earliest)
        .await
        .expect("consumer");
    let got = read_and_ack(reader.as_mut(), 4).await;
    assert_eq!(
        got.iter().map(|(_, o, _)| *o).collect::<Vec<_>>(),
        vec![1, 2, 3, 4]
    );
    drop(reader);

    // A partition the topic lacks, an offset past its end: refused, nothing moved.
    let other = [PositionChange {
        topic: "t".into(),
        partition: 1,
        next: Some(0),
    }];
    let r = log.set_consumer_positions("wharf-sink-p", &other).await;
    assert!(matches!(r, Err(LogError::InvalidConfig(_))), "{r:?}");
    let r = log
        .set_consumer_positions("wharf-sink-p", &to(Some(99)))
        .await;
    assert!(matches!(r, Err(LogError::InvalidConfig(_))), "{r:?}");
    assert_eq!(
        log.consumer_positions("wharf-sink-p").await.expect("read"),
        at(5)
    );

    // Forgotten: a new reader starts as a new consumer does.
    log.set_consumer_positions("wharf-sink-p", &to(None))
        .await
        .expect("reset");
    assert_eq!(
        log.consumer_positions("wharf-sink-p").await.expect("read"),
        Vec::new()
    );
    let mut reader = log
        .consumer("wharf-sink-p", &topics(&["t"]), StartPosition::Earliest)
        .await
        .expect("consumer");
    let got = read_and_ack(reader.as_mut(), 5).await;
    assert_eq!(got[0].1, 0);
}

async fn a_latest_consumer_keeps_its_start_across_a_restart(b: &Backend) {
    {
        let log = b.open().await;
        b.append_before_latest(&log, "t", recs("old", 0..3)).await;
        let mut reader = log
            .consumer("c", &topics(&["t"]), StartPosition::Latest)
            .await
            .expect("consumer");
        assert_nothing_more(reader.as_mut()).await;
        log.append("t", recs("new", 3..4)).await.expect("append");
    }
    let log = b.open().await;
    let mut reader = log
        .consumer("c", &topics(&["t"]), StartPosition::Latest)
        .await
        .expect("consumer");
    let got = read_and_ack(reader.as_mut(), 1).await;
    assert_eq!(got, vec![("t".to_string(), 3, "new3".to_string())]);
}

async fn unacknowledged_records_per_reader_and_fetch_sizes_are_bounded(b: &Backend) {
    let log = b
        .open_with(LogLimits {
            max_fetch_records: 10,
            max_in_flight_records: 25,
            ..LogLimits::default()
        })
        .await;
    log.append("t", recs("v", 0..100)).await.expect("append");
    let mut reader = log
        .consumer("c", &topics(&["t"]), StartPosition::Earliest)
        .await
        .expect("consumer");
    let mut held = Vec::new();
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while held.len() < 25 {
        assert!(tokio::time::Instant::now() < deadline, "25 records held");
        let batch = reader.fetch(1_000, FETCH_WAIT).await.expect("fetch");
        assert!(batch.len() <= 10, "fetch returned {}", batch.len());
        held.extend(batch.into_iter().map(|d| d.ack));
    }
    assert_eq!(held.len(), 25);
    assert_nothing_more(reader.as_mut()).await;
    reader.ack(&held[..5]).await.expect("ack");
    let batch = reader.fetch(1_000, FETCH_WAIT).await.expect("fetch");
    assert!(
        !batch.is_empty() && batch.len() <= 5,
        "room for 5 more, got {}",
        batch.len()
    );
}

async fn zero_limits_are_refused_naming_the_field(b: &Backend) {
    let bad = LogLimits {
        max_fetch_records: 0,
        ..LogLimits::default()
    };
    match wharf_executor::log::open(&b.config(bad)).await {
        Err(LogError::InvalidConfig(msg)) => assert!(msg.contains("max_fetch_records"), "{msg}"),
        Err(other) => panic!("unexpected error {other}"),
        Ok(_) => panic!("zero limit accepted"),
    }
}

/// Runs each named contract test on every backend: `contract::<backend>::<test>`.
/// The readers of a sink's tasks, each in its partition share, together read every
/// record once; a record of a topic the log created (one partition) is read from
/// partition 0, which the one-partition logs give every record.
async fn the_readers_of_every_share_together_read_each_record_once(b: &Backend) {
    let log = b.open().await;
    log.append("t", recs("v", 0..200)).await.expect("append");
    let readers: Vec<Box<dyn LogConsumer>> = futures::future::join_all((0..2).map(|i| {
        let log = log.clone();
        async move {
            let share = PartitionShare::new(i, 2).expect("share");
            log.consumer_in_share("shared", &topics(&["t"]), StartPosition::Earliest, share)
                .await
                .expect("consumer")
        }
    }))
    .await;
    let read = |mut r: Box<dyn LogConsumer>| async move {
        let mut seen = Vec::new();
        loop {
            let batch = r.fetch(13, EMPTY_FETCH_WAIT).await.expect("fetch");
            if batch.is_empty() {
                return seen;
            }
            for d in &batch {
                assert_eq!(d.record.partition, 0, "one partition");
            }
            let tokens: Vec<_> = batch.iter().map(|d| d.ack.clone()).collect();
            seen.extend(tokens.iter().map(|t| t.position));
            r.ack(&tokens).await.expect("ack");
        }
    };
    let mut all: Vec<u64> = futures::future::join_all(readers.into_iter().map(read))
        .await
        .into_iter()
        .flatten()
        .collect();
    all.sort_unstable();
    assert_eq!(all, (0..200).collect::<Vec<_>>(), "every record once");
}

macro_rules! contract {
    ($($test:ident),* $(,)?) => {
        contract!(@backend embedded: $($test),*);
        contract!(@backend jetstream: $($test),*);
        contract!(@backend kafka: $($test),*);
    };
    (@backend $backend:ident: $($test:ident),*) => {
        mod $backend {
            $(
                #[tokio::test]
                async fn $test() {
                    let backend = super::Backend::$backend();
                    super::$test(&backend).await;
                    backend.finish().await;
                }
            )*
        }
    };
}

contract!(
    appended_records_come_back_once_in_order_with_their_contents,
    order_is_kept_per_topic_when_one_reader_reads_several,
    odd_topic_and_consumer_names_keep_their_records_apart,
    two_readers_of_one_consumer_share_the_records_without_duplicates,
    records_of_a_dropped_reader_go_to_another_reader,
    records_held_by_a_gone_reader_come_again_at_once_and_in_order,
    a_fetch_cancelled_midway_leaves_its_records_for_the_next_fetch,
    a_fetch_dropped_while_waiting_does_not_strand_the_next_record,
    a_waiting_fetch_returns_as_soon_as_a_record_is_appended,
    after_a_restart_unacknowledged_records_come_again_and_acknowledged_never,
    a_deleted_consumer_created_again_starts_from_its_configured_position,
    a_latest_consumer_keeps_its_start_across_a_restart,
    unacknowledged_records_per_reader_and_fetch_sizes_are_bounded,
    zero_limits_are_refused_naming_the_field,
    consumer_positions_follow_acknowledgements_and_move_where_supported,
    the_readers_of_every_share_together_read_each_record_once,
);
