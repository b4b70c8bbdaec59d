//! The sink work loop of a task: fetch → put → flush → ack. The next batch is fetched
//! while the plugin's `put` runs, and `flush` (then the log's ack) runs once per several
//! batches. The log is acknowledged only after `flush` returned (at least once).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Mutex as AsyncMutex;
use tokio::time::Instant;
use wharf::sdk::{SinkSeek, SinkTask, TopicPartition};

use super::TaskInstance;
use crate::host::panic_text;
use crate::log::{AckToken, Delivered, LogConsumer, PartitionShare, PositionChange, StartPosition};

/// Most records a sink task gets in one `put`.
pub const SINK_BATCH_MAX_RECORDS: usize = 500;

/// How long one fetch of a sink task waits for a first record, in milliseconds.
pub const SINK_FETCH_WAIT_MS: u64 = 500;

/// A sink task flushes (and then acknowledges the log) once it holds this many records
/// put but not flushed. Kept well below the log's
/// [`DEFAULT_MAX_IN_FLIGHT_RECORDS`](crate::log::DEFAULT_MAX_IN_FLIGHT_RECORDS) minus one
/// batch, since unflushed records are unacknowledged and count against that bound.
pub const SINK_FLUSH_MAX_RECORDS: usize = 2_000;

/// A sink task flushes once this long passed since it put the oldest unflushed record, or
/// when no new record came for this long, in milliseconds. Kafka Connect flushes sinks on
/// its offset commit interval (60 s by default).
pub const SINK_FLUSH_INTERVAL_MS: u64 = 100;

/// The plugin instance of a sink task (see `PluginCell`).
pub(super) type SinkCell = Arc<AsyncMutex<Box<dyn SinkTask>>>;

/// Consumer positions a sink task asked for and the loop did not apply yet: per
/// topic-partition, the next offset to deliver (the latest request wins).
pub(crate) type Seeks = Arc<Mutex<BTreeMap<TopicPartition, u64>>>;

/// A sink task's [`SinkSeek`]: keeps the requests for the loop.
pub(crate) fn seek(seeks: Seeks) -> SinkSeek {
    SinkSeek::new(Arc::new(move |offsets: BTreeMap<TopicPartition, u64>| {
        seeks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .extend(offsets);
    }))
}

/// The log's position changes for the requested `seeks`.
fn position_changes(seeks: BTreeMap<TopicPartition, u64>) -> Vec<PositionChange> {
    seeks
        .into_iter()
        .map(|(tp, next)| PositionChange {
            topic: tp.topic,
            partition: tp.partition,
            next: Some(next),
        })
        .collect()
}

/// Records a sink task put and did not flush yet.
#[derive(Default)]
struct Unflushed {
    tokens: Vec<AckToken>,
    /// Per topic-partition, the offset after the last record put.
    offsets: BTreeMap<TopicPartition, u64>,
    /// When the oldest of them was put.
    since: Option<Instant>,
}

impl Unflushed {
    fn add(&mut self, tokens: Vec<AckToken>, offsets: BTreeMap<TopicPartition, u64>) {
        self.tokens.extend(tokens);
        for (partition, next) in offsets {
            let at = self.offsets.entry(partition).or_insert(0);
            *at = (*at).max(next);
        }
        self.since.get_or_insert_with(Instant::now);
    }
}

impl TaskInstance {
    /// The sink work loop: the next batch is fetched while the plugin's `put` runs, and
    /// `flush` (then the log's ack) runs once [`SINK_FLUSH_MAX_RECORDS`] records were put
    /// or [`SINK_FLUSH_INTERVAL_MS`] after the oldest of them was, or when no new record
    /// came for that long. The log is acknowledged only after `flush` returned.
    pub(super) async fn sink_loop(
        self: Arc<Self>,
        cell: SinkCell,
        topics: Result<Vec<String>, String>,
        share: Option<PartitionShare>,
    ) {
        let topics = match topics {
            Ok(t) => t,
            Err(e) => return self.fail(e),
        };
        let name = self.log.sink_consumer_name(&self.key.connector);
        let Some(mut consumer) = self.open_consumer(&name, &topics, share).await else {
            return;
        };
        let Some(mut pipeline) = super::lock(&self.pipeline).take() else {
            return self.fail("the record pipeline was already taken by a work loop".into());
        };
        let mut unflushed = Unflushed::default();
        let mut next: Vec<Delivered> = Vec::new();
        loop {
            // A turn of the loop: topics used meanwhile are reported when due.
            self.note_active_topics([]);
            let seeks = self.take_seeks();
            if !seeks.is_empty() {
                // What was put is flushed and acknowledged first; what was fetched and not
                // put comes again from the moved positions (or its acknowledged ones).
                if let Err(e) = self
                    .flush_and_ack(&cell, &mut consumer, &mut unflushed, &name)
                    .await
                {
                    return self.fail(e);
                }
                next.clear();
                drop(consumer);
                self.move_positions(&name, seeks).await;
                consumer = match self.open_consumer(&name, &topics, share).await {
                    Some(c) => c,
                    None => return,
                };
            }
            // Records put but not flushed: wait one flush interval for more, then flush. Not
            // less: a JetStream pull that expires before the server reads it is never
            // answered, and the client gives up only seconds later.
            let wait = Duration::from_millis(if unflushed.tokens.is_empty() {
                SINK_FETCH_WAIT_MS
            } else {
                SINK_FLUSH_INTERVAL_MS
            });
            let delivered = if next.is_empty() {
                let fetched = tokio::select! {
                    biased;
                    () = self.cancel.cancelled() => break,
                    r = consumer.fetch(SINK_BATCH_MAX_RECORDS, wait) => r,
                };
                match fetched {
                    Ok(d) => d,
                    Err(e) => {
                        tracing::warn!(consumer = %name, error = %e, "fetch failed; retrying");
                        if let Err(e) = self
                            .flush_and_ack(&cell, &mut consumer, &mut unflushed, &name)
                            .await
                        {
                            return self.fail(e);
                        }
                        if !self.backoff().await {
                            break;
                        }
                        continue;
                    }
                }
            } else {
                std::mem::take(&mut next)
            };
            if delivered.is_empty() {
                // Nothing more came in time: flush what was put.
                if let Err(e) = self
                    .flush_and_ack(&cell, &mut consumer, &mut unflushed, &name)
                    .await
                {
                    return self.fail(e);
                }
                continue;
            }
            self.note_active_topics(delivered.iter().map(|d| d.record.topic.as_str()));
            let mut offsets: BTreeMap<TopicPartition, u64> = BTreeMap::new();
            let mut tokens = Vec::with_capacity(delivered.len());
            let mut records = Vec::with_capacity(delivered.len());
            for d in delivered {
                let next = offsets.entry(d.record.topic_partition()).or_insert(0);
                *next = (*next).max(d.record.offset + 1);
                tokens.push(d.ack);
                records.push(d.record);
            }
            let (count, bytes) = (
                records.len(),
                records
                    .iter()
                    .map(|r| crate::counters::record_bytes(r.key.as_ref(), &r.value))
                    .sum::<usize>(),
            );
            // Converters and transforms before put; a dropped or dead-lettered record is
            // still acknowledged with the batch after the flush.
            let records = match self.sink_pipeline(&mut pipeline, records).await {
                Ok(r) => r,
                Err(e) => return self.fail(e),
            };
            let (p, cancel) = (cell.clone(), self.cancel.clone());
            // put is not cancelled: the stop waits for it (bounded).
            let put = self.slot.spawn("sink put", async move {
                let mut g = p.lock_owned().await;
                if cancel.is_cancelled() {
                    return Ok(false);
                }
                let started = std::time::Instant::now();
                g.put(records)
                    .await
                    .map_err(|e| format!("put failed: {e}"))?;
                crate::counters::took(crate::counters::SINK_PUT_SECONDS, started);
                Ok(true)
            });
            let prefetch = async {
                if self.cancel.is_cancelled() {
                    return Ok(Vec::new());
                }
                consumer.fetch(SINK_BATCH_MAX_RECORDS, Duration::ZERO).await
            };
            let (written, prefetched) = tokio::join!(put, prefetch);
            match written.unwrap_or_else(|e| Err(panic_text(e))) {
                Ok(true) => {
                    // Records the plugin reported errant reach the dead letter queue
                    // before the batch can be acknowledged.
                    if let Err(e) = self
                        .write_errant(pipeline.errors(), &self.errant, &self.plugin_name)
                        .await
                    {
                        return self.fail(e);
                    }
                    self.stats.add_records(count, bytes);
                    unflushed.add(tokens, offsets);
                }
                // The stop began before put: these records go to the next instance.
                Ok(false) => {}
                Err(e) => return self.fail(e),
            }
            match prefetched {
                Ok(d) => next = d,
                Err(e) => {
                    tracing::warn!(consumer = %name, error = %e, "fetch failed; retrying");
                }
            }
            let due = self.cancel.is_cancelled()
                || unflushed.tokens.len() >= SINK_FLUSH_MAX_RECORDS
                || unflushed.since.is_some_and(|since| {
                    since.elapsed() >= Duration::from_millis(SINK_FLUSH_INTERVAL_MS)
                });
            if due
                && let Err(e) = self
                    .flush_and_ack(&cell, &mut consumer, &mut unflushed, &name)
                    .await
            {
                return self.fail(e);
            }
            if self.cancel.is_cancelled() {
                drop(consumer);
                self.move_positions_asked(&name).await;
                return;
            }
        }
        // The stop began while waiting for records: flush and acknowledge what was put, so
        // that the next instance does not write it again.
        if let Err(e) = self
            .flush_and_ack(&cell, &mut consumer, &mut unflushed, &name)
            .await
        {
            self.fail(e);
        }
        drop(consumer);
        self.move_positions_asked(&name).await;
    }

    /// At the loop's end (its reader closed): positions asked during the last flush (a
    /// sink holding back records of a paused partition asks for them again) are moved, so
    /// that the next instance gets those records.
    async fn move_positions_asked(&self, name: &str) {
        let seeks = self.take_seeks();
        if !seeks.is_empty() {
            self.move_positions(name, seeks).await;
        }
    }

    fn take_seeks(&self) -> BTreeMap<TopicPartition, u64> {
        std::mem::take(
            &mut *self
                .seeks
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    /// Opens the sink's consumer, retrying with the task's backoff; `None` once the task
    /// is cancelled.
    async fn open_consumer(
        &self,
        name: &str,
        topics: &[String],
        share: Option<PartitionShare>,
    ) -> Option<Box<dyn LogConsumer>> {
        let log = &self.log;
        loop {
            let open = async {
                match share {
                    Some(share) => {
                        log.consumer_in_share(name, topics, StartPosition::Earliest, share)
                            .await
                    }
                    None => log.consumer(name, topics, StartPosition::Earliest).await,
                }
            };
            let opened = tokio::select! {
                () = self.cancel.cancelled() => return None,
                r = open => r,
            };
            match opened {
                Ok(c) => return Some(c),
                Err(e) => {
                    tracing::warn!(consumer = %name, error = %e, "cannot open the log consumer; retrying");
                    if !self.backoff().await {
                        return None;
                    }
                }
            }
        }
    }

    /// Moves the consumer's positions as the sink asked (its reader is closed). A log
    /// that cannot move them leaves them: the request is logged and dropped.
    async fn move_positions(&self, name: &str, seeks: BTreeMap<TopicPartition, u64>) {
        let changes = position_changes(seeks);
        match self.log.set_consumer_positions(name, &changes).await {
            Ok(()) => {
                tracing::info!(connector = %self.key.connector, task = self.key.task, consumer = %name,
                    positions = ?changes.iter().map(|c| (c.topic.as_str(), c.partition, c.next)).collect::<Vec<_>>(),
                    "sink consumer positions moved as the task asked");
            }
            Err(e) => {
                tracing::warn!(connector = %self.key.connector, task = self.key.task, consumer = %name,
                    error = %e, "the sink task asked to move its consumer positions; the record log cannot: ignored");
            }
        }
    }

    /// Flushes the plugin, then acknowledges the records put since the last flush. An ack
    /// that fails is logged (the records come again: at least once); a flush that fails
    /// is the task's failure.
    async fn flush_and_ack(
        &self,
        cell: &SinkCell,
        consumer: &mut Box<dyn LogConsumer>,
        unflushed: &mut Unflushed,
        name: &str,
    ) -> Result<(), String> {
        if unflushed.tokens.is_empty() {
            return Ok(());
        }
        let offsets = std::mem::take(&mut unflushed.offsets);
        let p = cell.clone();
        // flush is not cancelled: the stop waits for it (bounded).
        self.slot
            .spawn("sink flush", async move {
                let mut g = p.lock_owned().await;
                let started = std::time::Instant::now();
                let flushed = g
                    .flush(&offsets)
                    .await
                    .map_err(|e| format!("flush failed: {e}"));
                crate::counters::took(crate::counters::SINK_FLUSH_SECONDS, started);
                flushed
            })
            .await
            .unwrap_or_else(|e| Err(panic_text(e)))?;
        let tokens = std::mem::take(&mut unflushed.tokens);
        unflushed.since = None;
        let acked = tokio::select! {
            biased;
            () = self.drain_deadline() => return Ok(()),
            r = consumer.ack(&tokens) => r,
        };
        match acked {
            Ok(()) => self.stats.add_committed(tokens.len() as u64),
            Err(e) => {
                tracing::warn!(consumer = %name, error = %e, "ack failed; records may be delivered again");
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    use async_trait::async_trait;
    use wharf::ids::TaskKey;
    use wharf::sdk::{
        ConfigDef, ConfigMap, Connector, ConnectorContext, Plugin, PluginResult, SinkRecord,
        TaskContext, TaskFactory,
    };

    use super::super::TOPICS;
    use super::*;
    use crate::host::instance::{Instance, start};
    use crate::host::stop::{StopCause, stop};
    use crate::host::{Assignment, InstanceState, Shared, StartTask};
    use crate::log::{EmbeddedLog, LogRecord, RecordLog};
    use crate::registry_client::Registry;

    /// Bound on each wait of the sink tests.
    const WAIT: Duration = Duration::from_secs(20);

    /// What a [`ProbeSink`] saw.
    #[derive(Default)]
    struct Probe {
        put: AtomicUsize,
        flushed: AtomicUsize,
        flush_attempts: AtomicUsize,
        fail_flush: AtomicBool,
    }

    /// A sink that counts records put and flushed, and whose flush fails on demand.
    struct ProbeSink {
        probe: Arc<Probe>,
        unflushed: usize,
    }

    #[async_trait]
    impl SinkTask for ProbeSink {
        async fn start(&mut self, _ctx: TaskContext, _config: ConfigMap) -> PluginResult<()> {
            Ok(())
        }

        async fn put(&mut self, records: Vec<SinkRecord>) -> PluginResult<()> {
            self.unflushed += records.len();
            self.probe.put.fetch_add(records.len(), Ordering::SeqCst);
            Ok(())
        }

        async fn flush(&mut self, _offsets: &BTreeMap<TopicPartition, u64>) -> PluginResult<()> {
            self.probe.flush_attempts.fetch_add(1, Ordering::SeqCst);
            if self.probe.fail_flush.load(Ordering::SeqCst) {
                return Err("disk full".into());
            }
            self.probe
                .flushed
                .fetch_add(std::mem::take(&mut self.unflushed), Ordering::SeqCst);
            Ok(())
        }
    }

    struct NoConnector;

    #[async_trait]
    impl Connector for NoConnector {
        async fn start(&mut self, _ctx: ConnectorContext, _config: ConfigMap) -> PluginResult<()> {
            Ok(())
        }

        async fn task_configs(&mut self, _max_tasks: u32) -> PluginResult<Vec<ConfigMap>> {
            Ok(Vec::new())
        }
    }

    async fn wait_for(what: &str, mut condition: impl FnMut() -> bool) {
        let deadline = Instant::now() + WAIT;
        while !condition() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Runs a probe sink task on `records` records of topic `t` until it flushed them all
    /// or failed, stops it, and returns what a new reader of its consumer gets.
    async fn run_probe_sink(records: usize, fail_flush: bool) -> (Arc<Probe>, Vec<Delivered>) {
        let dir = tempfile::tempdir().expect("temp dir");
        let log = Arc::new(EmbeddedLog::open(dir.path()).await.expect("log"));
        let batch = (0..records)
            .map(|i| LogRecord {
                key: None,
                value: i.to_string().into_bytes(),
                headers: Vec::new(),
                timestamp_ms: None,
                partition: None,
            })
            .collect();
        log.append("t", batch).await.expect("append");
        let registry = Registry::new(
            "http://127.0.0.1:9",
            "e".into(),
            "http://127.0.0.1:9".into(),
            Vec::new(),
        )
        .expect("registry");
        let shared = Arc::new(Shared {
            executor_id: "e".into(),
            registry: Arc::new(registry),
            log: log.clone(),
            pool: crate::runtime::PluginPool::start(
                std::num::NonZeroUsize::new(2).expect("non-zero"),
            )
            .expect("plugin runtime"),
            providers: Default::default(),
            transforms: Vec::new(),
            converter_defaults: Default::default(),
            process_plugins: Default::default(),
        });
        let probe = Arc::new(Probe::default());
        probe.fail_flush.store(fail_flush, Ordering::SeqCst);
        let task_probe = probe.clone();
        let plugin = Plugin {
            name: "probe-sink".into(),
            version: "0".into(),
            config_def: ConfigDef::new(),
            connector: Arc::new(|| Box::new(NoConnector)),
            task: TaskFactory::Sink(Arc::new(move || {
                Box::new(ProbeSink {
                    probe: task_probe.clone(),
                    unflushed: 0,
                })
            })),
        };
        let req = StartTask {
            task: TaskKey {
                connector: "c".into(),
                task: 0,
            },
            connector_config: ConfigMap::new(),
            task_config: ConfigMap::from([(TOPICS.to_string(), "t".to_string())]),
            offsets: BTreeMap::new(),
            assignment: Assignment {
                generation: 1,
                paused: false,
                cleanup_only: false,
                incarnation: "i".into(),
                executor_epoch: 0,
            },
            partition_share: None,
        };
        let task = Arc::new(TaskInstance::new(&plugin, &req, shared).expect("plugin slot"));
        assert_eq!(
            start(task.clone(), req, &plugin.config_def).await,
            InstanceState::Running
        );
        if fail_flush {
            wait_for("the failed flush", || {
                matches!(task.life.state(), InstanceState::Failed(_))
            })
            .await;
        } else {
            wait_for("every record flushed", || {
                probe.flushed.load(Ordering::SeqCst) >= records
            })
            .await;
        }
        let _ = stop(&task, StopCause::Requested, WAIT).await;
        let mut reader = log
            .consumer(
                &log.sink_consumer_name("c"),
                &["t".to_string()],
                StartPosition::Earliest,
            )
            .await
            .expect("consumer");
        let again = reader
            .fetch(records, Duration::from_millis(200))
            .await
            .expect("fetch");
        (probe, again)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_sink_acknowledges_every_record_it_flushed() {
        let records = 3 * SINK_FLUSH_MAX_RECORDS;
        let (probe, again) = run_probe_sink(records, false).await;
        assert_eq!(probe.put.load(Ordering::SeqCst), records);
        assert!(again.is_empty(), "acknowledged records came again");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn records_put_but_not_flushed_are_not_acknowledged() {
        let (probe, again) = run_probe_sink(SINK_BATCH_MAX_RECORDS * 2, true).await;
        assert!(probe.put.load(Ordering::SeqCst) > 0);
        assert_eq!(probe.flushed.load(Ordering::SeqCst), 0);
        let first = again.first().map(|d| d.record.offset);
        assert_eq!(
            first,
            Some(0),
            "the unflushed records come again from the start"
        );
    }
    #[test]
    fn a_seek_becomes_one_position_change_per_partition_with_the_latest_offset() {
        let seeks: Seeks = Seeks::default();
        let sink_seek = seek(seeks.clone());
        sink_seek.seek(BTreeMap::from([(TopicPartition::new("t", 0), 5)]));
        sink_seek.seek(BTreeMap::from([
            (TopicPartition::new("t", 0), 0),
            (TopicPartition::new("u", 1), 7),
        ]));
        let taken = std::mem::take(&mut *seeks.lock().unwrap());
        assert_eq!(
            position_changes(taken),
            vec![
                PositionChange {
                    topic: "t".into(),
                    partition: 0,
                    next: Some(0)
                },
                PositionChange {
                    topic: "u".into(),
                    partition: 1,
                    next: Some(7)
                },
            ]
        );
    }

    #[test]
    fn unflushed_records_keep_the_highest_next_offset_per_topic_partition_and_the_oldest_put_time()
    {
        let token = |position| AckToken {
            topic: "t".into(),
            position,
            handle: String::new(),
        };
        let mut unflushed = Unflushed::default();
        let (p0, p1) = (TopicPartition::new("t", 0), TopicPartition::new("t", 1));
        unflushed.add(
            vec![token(0), token(1)],
            BTreeMap::from([(p0.clone(), 2), (p1.clone(), 9)]),
        );
        let first = unflushed.since;
        unflushed.add(vec![token(2)], BTreeMap::from([(p0.clone(), 3)]));
        assert_eq!(unflushed.tokens.len(), 3);
        assert_eq!(unflushed.offsets, BTreeMap::from([(p0, 3), (p1, 9)]));
        assert!(first.is_some());
        assert_eq!(unflushed.since, first);
    }
}
