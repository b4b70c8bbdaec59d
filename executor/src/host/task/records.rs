//! The record pipeline in a task's loop (`crate::pipeline` decides, this acts): each
//! record through the connector's converters and transforms, retriable failures retried
//! (`errors.retry.*`), failing records skipped, logged and sent to a sink's dead letter
//! queue under `errors.tolerance=all`, or the task failed with the stage named under
//! `none`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use wharf::sdk::{ErrantRecordReporter, SinkRecord, SourceRecord};

use super::TaskInstance;
use crate::log::LogRecord;
use crate::pipeline::errors::{ErrantContext, dlq_record};
use crate::pipeline::{ErrorPolicy, Pipeline, Stage, StageError, Tolerance};

/// Records a sink task reported through its [`ErrantRecordReporter`] and the error of
/// each, kept until the loop writes them to the dead letter queue.
pub(crate) type Errant = Arc<Mutex<Vec<(SinkRecord, String)>>>;

/// A sink task's reporter: under `errors.tolerance=all` it keeps the record for the
/// loop; under `none` it refuses, so that the task fails from `put`.
pub(crate) fn errant_reporter(
    tolerance: Tolerance,
    errant: Errant,
    plugin: String,
) -> ErrantRecordReporter {
    ErrantRecordReporter::new(Arc::new(
        move |record: &SinkRecord, error: &str| match tolerance {
            Tolerance::None => Err(format!(
                "Tolerance exceeded in error handler: stage {} ({plugin}) reported the record at offset {} of topic {}: {error}",
                Stage::TaskPut.name(),
                record.offset,
                record.topic
            )),
            Tolerance::All => {
                errant
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push((record.clone(), error.to_owned()));
                Ok(())
            }
        },
    ))
}

/// The task failure text for a record that failed under `errors.tolerance=none`.
fn tolerance_exceeded(error: &StageError, topic: &str, offset: Option<u64>) -> String {
    match offset {
        Some(o) => format!(
            "Tolerance exceeded in error handler: {error} (record at offset {o} of topic {topic})"
        ),
        None => format!("Tolerance exceeded in error handler: {error} (record for topic {topic})"),
    }
}

impl TaskInstance {
    /// Logs a failing record when `errors.log.enable`, with its key, value and headers
    /// when `errors.log.include.messages`.
    fn log_error(
        &self,
        policy: &ErrorPolicy,
        error: &StageError,
        topic: &str,
        offset: Option<u64>,
        original: Option<&LogRecord>,
    ) {
        crate::counters::record_error(error.stage.name());
        if !policy.log {
            return;
        }
        match original.filter(|_| policy.log_messages) {
            Some(r) => {
                tracing::warn!(connector = %self.key.connector, task = self.key.task, stage = error.stage.name(),
                class = %error.class, topic = %topic, offset = ?offset,
                key = ?r.key.as_deref().map(String::from_utf8_lossy), value = %String::from_utf8_lossy(&r.value),
                headers = ?r.headers.iter().map(|(k, v)| (k.as_str(), String::from_utf8_lossy(v))).collect::<Vec<_>>(),
                error = %error.message, "error encountered in task: record skipped")
            }
            None => {
                tracing::warn!(connector = %self.key.connector, task = self.key.task, stage = error.stage.name(),
                class = %error.class, topic = %topic, offset = ?offset, error = %error.message,
                "error encountered in task: record skipped")
            }
        }
    }

    /// Runs `apply` on a record, retrying a retriable failure as `errors.retry.*` say.
    async fn with_retries<T, R: Clone>(
        &self,
        policy: &ErrorPolicy,
        record: R,
        mut apply: impl FnMut(R) -> Result<T, StageError>,
    ) -> Result<T, StageError> {
        if policy.retry_timeout_ms == 0 {
            return apply(record);
        }
        let started = Instant::now();
        let mut attempt = 0;
        loop {
            match apply(record.clone()) {
                Err(e) if e.retriable => {
                    attempt += 1;
                    let elapsed = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
                    let Some(wait) = policy.retry_delay_ms(attempt, elapsed) else {
                        return Err(e);
                    };
                    tokio::select! {
                        () = self.cancel.cancelled() => return Err(e),
                        () = tokio::time::sleep(Duration::from_millis(wait)) => {}
                    }
                }
                other => return other,
            }
        }
    }

    /// A poll's records through the pipeline: what to append. A dropped or skipped
    /// record's offset is committed all the same (the loop took the offsets before).
    ///
    /// # Errors
    /// The task's failure text under `errors.tolerance=none`.
    pub(super) async fn source_pipeline(
        &self,
        pipeline: &mut Pipeline,
        records: Vec<SourceRecord>,
    ) -> Result<Vec<SourceRecord>, String> {
        if pipeline.is_identity() && records.iter().all(|r| r.data.is_none()) {
            return Ok(records);
        }
        let policy = pipeline.errors().clone();
        let mut out = Vec::with_capacity(records.len());
        for record in records {
            let topic = record.topic.clone();
            let original = policy.log_messages.then(|| LogRecord::from(&record));
            match self
                .with_retries(&policy, record, |r| pipeline.source(r))
                .await
            {
                Ok(Some(r)) => out.push(r),
                Ok(None) => {}
                Err(e) => match policy.tolerance {
                    Tolerance::None => return Err(tolerance_exceeded(&e, &topic, None)),
                    Tolerance::All => {
                        crate::counters::record_skipped();
                        self.log_error(&policy, &e, &topic, None, original.as_ref());
                    }
                },
            }
        }
        Ok(out)
    }

    /// A fetched batch through the pipeline: what to put. Failing records go to the dead
    /// letter queue (appended before this returns, so before their acknowledgement).
    ///
    /// # Errors
    /// The task's failure text under `errors.tolerance=none`, or when the dead letter
    /// queue cannot be written before the stop's drain bound.
    pub(super) async fn sink_pipeline(
        &self,
        pipeline: &mut Pipeline,
        records: Vec<SinkRecord>,
    ) -> Result<Vec<SinkRecord>, String> {
        if pipeline.is_identity() {
            return Ok(records);
        }
        let policy = pipeline.errors().clone();
        let mut out = Vec::with_capacity(records.len());
        let mut dead = Vec::new();
        for record in records {
            let (topic, partition, offset) =
                (record.topic.clone(), record.partition, record.offset);
            let original = (policy.dlq_topic.is_some() || policy.log_messages)
                .then(|| sink_log_record(&record));
            match self
                .with_retries(&policy, record, |r| pipeline.sink(r))
                .await
            {
                Ok(Some(r)) => out.push(r),
                Ok(None) => {}
                Err(e) => match policy.tolerance {
                    Tolerance::None => return Err(tolerance_exceeded(&e, &topic, Some(offset))),
                    Tolerance::All => {
                        crate::counters::record_skipped();
                        self.log_error(&policy, &e, &topic, Some(offset), original.as_ref());
                        if let (Some(_), Some(original)) = (&policy.dlq_topic, original) {
                            let ctx = ErrantContext {
                                topic: &topic,
                                partition: i32::try_from(partition).unwrap_or(i32::MAX),
                                offset,
                                connector: &self.key.connector,
                                task: self.key.task,
                            };
                            dead.push(dlq_record(&original, &ctx, &e, policy.dlq_context_headers));
                        }
                    }
                },
            }
        }
        self.append_dead(&policy, dead).await?;
        Ok(out)
    }

    /// Writes what the sink reported through its errant record reporter to the dead
    /// letter queue (and the log), before the records put with them are acknowledged.
    ///
    /// # Errors
    /// The dead letter queue could not be written before the stop's drain bound.
    pub(super) async fn write_errant(
        &self,
        policy: &ErrorPolicy,
        errant: &Errant,
        plugin: &str,
    ) -> Result<(), String> {
        let reported = std::mem::take(
            &mut *errant
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        if reported.is_empty() {
            return Ok(());
        }
        let mut dead = Vec::new();
        for (record, message) in reported {
            let error = StageError {
                stage: Stage::TaskPut,
                class: plugin.to_owned(),
                message,
                retriable: false,
            };
            let original = sink_log_record(&record);
            crate::counters::record_skipped();
            self.log_error(
                policy,
                &error,
                &record.topic,
                Some(record.offset),
                Some(&original),
            );
            if policy.dlq_topic.is_some() {
                let ctx = ErrantContext {
                    topic: &record.topic,
                    partition: i32::try_from(record.partition).unwrap_or(i32::MAX),
                    offset: record.offset,
                    connector: &self.key.connector,
                    task: self.key.task,
                };
                dead.push(dlq_record(
                    &original,
                    &ctx,
                    &error,
                    policy.dlq_context_headers,
                ));
            }
        }
        self.append_dead(policy, dead).await
    }

    /// Appends `dead` to the dead letter queue topic, retrying failures until the stop's
    /// drain bound.
    async fn append_dead(&self, policy: &ErrorPolicy, dead: Vec<LogRecord>) -> Result<(), String> {
        let Some(topic) = policy.dlq_topic.as_deref() else {
            return Ok(());
        };
        if dead.is_empty() {
            return Ok(());
        }
        let n = dead.len();
        loop {
            let appended = tokio::select! {
                biased;
                () = self.drain_deadline() => {
                    return Err(format!("writing {n} records to the dead letter queue {topic} did not finish before the stop"));
                }
                r = self.log.append(topic, dead.clone()) => r,
            };
            match appended {
                Ok(_) => {
                    crate::counters::dead_letters(n);
                    return Ok(());
                }
                Err(e) => {
                    tracing::warn!(connector = %self.key.connector, task = self.key.task, topic = %topic, error = %e,
                        "append to the dead letter queue failed; retrying");
                    if !self.backoff().await {
                        return Err(format!(
                            "writing {n} records to the dead letter queue {topic} was cut short by the stop"
                        ));
                    }
                }
            }
        }
    }
}

/// A sink record's bytes as the log held them.
fn sink_log_record(r: &SinkRecord) -> LogRecord {
    LogRecord {
        // The dead letter queue's partition is the log's choice (by key).
        partition: None,
        key: r.key.clone(),
        value: r.value.clone(),
        headers: r.headers.clone(),
        timestamp_ms: r.timestamp_ms,
    }
}
