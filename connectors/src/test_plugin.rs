//! `test-source` and `test-sink`: plugins that record every lifecycle call they receive, one
//! JSON line per call, to the file named by `lifecycle.path`, so that tests can assert the
//! exact sequence an instance saw (start, poll, stop(true)...) across executors.
//!
//! Line shape: `{"ts_ms","executor","connector","task","instance","incarnation","call",
//! "connector_deleted","cleanup_only","ok","error"}` where `call` is one of `start`,
//! `task_configs`, `stop` (stop_with began), `stopped` (stop_with returned), `poll` and
//! `put` (these two only for the first call of an instance). Each line is written with one
//! `write` on a file opened in append mode, so lines from several processes do not mix.
//!
//! Knobs (config keys, read by the connector and by its tasks; task configs copy the
//! connector config): `test.tasks`, `test.poll.block.ms`, `test.ignore.cancel`,
//! `test.stop.delay.ms`, `test.stop.block.ms`, `test.stop.fail.times`, `test.start.fail`,
//! `test.start.fail.message` (the start fails quoting it and the PASSWORD `test.secret`),
//! `test.records.per.poll`, `test.topic`, `test.poll.panic` (poll panics),
//! `test.start.delay.ms` (a task's start sleeps first) and `test.records.path` (the sink
//! appends one JSON line per record it is given, `{"instance","task","executor","topic",
//! "partition","offset","value"}`, one `write` per `put`).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::json;
use wharf_sdk::{
    ConfigDef, ConfigKey, ConfigMap, ConfigType, Connector, ConnectorContext, Importance, Plugin,
    PluginResult, SinkRecord, SinkTask, SourceRecord, SourceTask, TaskContext, TaskFactory,
};

use crate::{parse_opt, required};

/// How long a poll waits when `test.poll.block.ms` is not set, in milliseconds; keeps an
/// idle test task from spinning.
pub const DEFAULT_POLL_INTERVAL_MS: u64 = 100;

/// Config key naming the lifecycle file.
pub const LIFECYCLE_PATH: &str = "lifecycle.path";

/// Config key carrying the task index in task configs.
pub const TASK_INDEX: &str = "test.task.index";

static INSTANCE_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Knobs parsed from the config.
#[derive(Debug, Clone, Default)]
struct Knobs {
    lifecycle: PathBuf,
    tasks: Option<u32>,
    poll_block_ms: Option<u64>,
    ignore_cancel: bool,
    stop_delay_ms: u64,
    stop_block_ms: u64,
    stop_fail_times: u32,
    start_fail: bool,
    /// `test.start.fail.message`: the start fails quoting it (and `test.secret`).
    start_fail_message: Option<String>,
    /// `test.secret`: a PASSWORD-typed value a failing start quotes.
    secret: Option<String>,
    records_per_poll: u32,
    topic: Option<String>,
    poll_panic: bool,
}

impl Knobs {
    /// The start's injected failure, if any: a plugin that quotes what it was given in
    /// its error (as a database driver quotes a user or a URL), so that tests can check
    /// the executor hides it.
    fn start_failure(&self) -> Option<String> {
        match (&self.start_fail_message, self.start_fail) {
            (Some(message), _) => Some(format!(
                "test.start.fail: injected start failure: {message} (secret {})",
                self.secret.as_deref().unwrap_or("none")
            )),
            (None, true) => Some("test.start.fail: injected start failure".to_owned()),
            (None, false) => None,
        }
    }

    fn parse(config: &ConfigMap) -> Result<Self, String> {
        Ok(Self {
            lifecycle: PathBuf::from(required(config, LIFECYCLE_PATH)?),
            tasks: parse_opt(config, "test.tasks")?,
            poll_block_ms: parse_opt(config, "test.poll.block.ms")?,
            ignore_cancel: parse_opt(config, "test.ignore.cancel")?.unwrap_or(false),
            stop_delay_ms: parse_opt(config, "test.stop.delay.ms")?.unwrap_or(0),
            stop_block_ms: parse_opt(config, "test.stop.block.ms")?.unwrap_or(0),
            stop_fail_times: parse_opt(config, "test.stop.fail.times")?.unwrap_or(0),
            start_fail: parse_opt(config, "test.start.fail")?.unwrap_or(false),
            start_fail_message: config.get("test.start.fail.message").cloned(),
            secret: config.get("test.secret").cloned(),
            records_per_poll: parse_opt(config, "test.records.per.poll")?.unwrap_or(1),
            topic: config.get("test.topic").cloned(),
            poll_panic: parse_opt(config, "test.poll.panic")?.unwrap_or(false),
        })
    }
}

/// Who is writing lifecycle lines.
#[derive(Debug, Clone, Default)]
struct Recorder {
    path: Option<PathBuf>,
    executor: String,
    connector: String,
    task: Option<u32>,
    instance: String,
    incarnation: String,
    cleanup_only: bool,
}

impl Recorder {
    fn new_instance() -> String {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        format!(
            "{}-{}-{nanos}",
            std::process::id(),
            INSTANCE_COUNTER.fetch_add(1, Ordering::Relaxed)
        )
    }

    fn record(&self, call: &str, connector_deleted: Option<bool>, result: Result<(), &str>) {
        let Some(path) = &self.path else { return };
        let ts_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        let line = json!({
            "ts_ms": ts_ms,
            "executor": self.executor,
            "connector": self.connector,
            "task": self.task,
            "instance": self.instance,
            "incarnation": self.incarnation,
            "call": call,
            "connector_deleted": connector_deleted,
            "cleanup_only": self.cleanup_only,
            "ok": result.is_ok(),
            "error": result.err(),
        });
        let mut text = line.to_string();
        text.push('\n');
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .and_then(|mut f| f.write_all(text.as_bytes()));
        if let Err(e) = written {
            tracing::warn!(path = %path.display(), error = %e, "cannot write lifecycle line");
        }
    }
}

/// Counts `stop_with(true)` failures of one connector in a file beside the lifecycle file,
/// so that the count holds across instances and executors. Returns true when this stop
/// must fail.
fn take_stop_failure(lifecycle: &Path, connector: &str, fail_times: u32) -> bool {
    if fail_times == 0 {
        return false;
    }
    let mut name = lifecycle.as_os_str().to_owned();
    name.push(format!(".stop-failures.{connector}"));
    let counter = PathBuf::from(name);
    let done: u32 = std::fs::read_to_string(&counter)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    if done >= fail_times {
        return false;
    }
    let _ = std::fs::write(&counter, (done + 1).to_string());
    true
}

/// The shared stop: record `stop`, block, sleep, maybe fail, record `stopped`.
async fn run_stop(recorder: &Recorder, knobs: &Knobs, connector_deleted: bool) -> PluginResult<()> {
    recorder.record("stop", Some(connector_deleted), Ok(()));
    if knobs.stop_block_ms > 0 {
        // Deliberately misbehaving: holds the thread and cannot be cancelled.
        std::thread::sleep(Duration::from_millis(knobs.stop_block_ms));
    }
    if knobs.stop_delay_ms > 0 {
        tokio::time::sleep(Duration::from_millis(knobs.stop_delay_ms)).await;
    }
    if connector_deleted
        && take_stop_failure(&knobs.lifecycle, &recorder.connector, knobs.stop_fail_times)
    {
        let error = "test.stop.fail.times: injected cleanup failure";
        recorder.record("stopped", Some(connector_deleted), Err(error));
        return Err(error.into());
    }
    recorder.record("stopped", Some(connector_deleted), Ok(()));
    Ok(())
}

fn config_def() -> ConfigDef {
    ConfigDef::new()
        .define(
            ConfigKey::new(LIFECYCLE_PATH, ConfigType::String, Importance::High, "File to which every lifecycle call is appended as one JSON line.")
                .required(),
        )
        .define(ConfigKey::new("test.tasks", ConfigType::Int, Importance::Low, "Number of task configs produced (at most tasks.max); default tasks.max, 0 allowed."))
        .define(ConfigKey::new("test.poll.block.ms", ConfigType::Long, Importance::Low, "How long each poll waits before returning, in milliseconds (cancel-safe)."))
        .define(ConfigKey::new("test.ignore.cancel", ConfigType::Boolean, Importance::Low, "When true, poll blocks its thread and ignores cancellation."))
        .define(ConfigKey::new("test.stop.delay.ms", ConfigType::Long, Importance::Low, "How long stop_with sleeps before returning, in milliseconds."))
        .define(ConfigKey::new("test.stop.block.ms", ConfigType::Long, Importance::Low, "How long stop_with blocks its thread (ignoring cancellation) before returning, in milliseconds."))
        .define(ConfigKey::new("test.stop.fail.times", ConfigType::Int, Importance::Low, "The first N stop_with(true) calls of this connector fail (counted across instances and executors)."))
        .define(ConfigKey::new("test.start.fail", ConfigType::Boolean, Importance::Low, "When true, start fails."))
        .define(ConfigKey::new("test.start.fail.message", ConfigType::String, Importance::Low, "When set, start fails with an error quoting it and test.secret (a plugin that quotes its config in errors)."))
        .define(ConfigKey::new("test.secret", ConfigType::Password, Importance::Low, "A secret value, quoted by the error of test.start.fail.message."))
        .define(ConfigKey::new("test.records.per.poll", ConfigType::Int, Importance::Low, "Records returned by each poll; default 1."))
        .define(ConfigKey::new("test.poll.panic", ConfigType::Boolean, Importance::Low, "When true, poll panics (to show that a panic fails only that task)."))
        .define(ConfigKey::new("test.start.delay.ms", ConfigType::Long, Importance::Low, "How long a task's start sleeps before returning, in milliseconds."))
        .define(ConfigKey::new("test.topic", ConfigType::String, Importance::Low, "Topic of the records; default test-<connector>."))
        .define(ConfigKey::new(RECORDS_PATH, ConfigType::String, Importance::Low, "test-sink: a file to which each record put is appended as a JSON line (instance, task, executor, topic, partition, offset, key, value, headers; bytes as UTF-8 text)."))
        .define(ConfigKey::new(REPORT_ERRANT, ConfigType::String, Importance::Low, "test-sink: a record whose value contains this text is reported through the task's errant record reporter instead of written."))
}

/// The `test-source` plugin.
pub fn source_plugin() -> Plugin {
    Plugin {
        name: "test-source".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        config_def: config_def(),
        connector: Arc::new(|| Box::new(TestConnector::default())),
        task: TaskFactory::Source(Arc::new(|| Box::new(TestSourceTask::default()))),
    }
}

/// The `test-sink` plugin.
pub fn sink_plugin() -> Plugin {
    Plugin {
        name: "test-sink".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        config_def: config_def(),
        connector: Arc::new(|| Box::new(TestConnector::default())),
        task: TaskFactory::Sink(Arc::new(|| Box::new(TestSinkTask::default()))),
    }
}

/// Connector instance of both test plugins.
#[derive(Debug, Default)]
struct TestConnector {
    recorder: Recorder,
    knobs: Knobs,
    config: ConfigMap,
}

#[async_trait]
impl Connector for TestConnector {
    async fn start(&mut self, ctx: ConnectorContext, config: ConfigMap) -> PluginResult<()> {
        self.recorder = Recorder {
            path: config.get(LIFECYCLE_PATH).map(PathBuf::from),
            executor: ctx.executor_id.clone(),
            connector: ctx.connector.clone(),
            task: None,
            instance: Recorder::new_instance(),
            incarnation: ctx.incarnation.clone(),
            cleanup_only: ctx.cleanup_only,
        };
        let knobs = Knobs::parse(&config);
        let result = match &knobs {
            Ok(k) => k.start_failure().map_or(Ok(()), Err),
            Err(e) => Err(e.clone()),
        };
        self.recorder.record(
            "start",
            None,
            result.as_ref().map(|_| ()).map_err(String::as_str),
        );
        self.knobs = knobs.unwrap_or_default();
        self.config = config;
        result.map_err(Into::into)
    }

    async fn task_configs(&mut self, max_tasks: u32) -> PluginResult<Vec<ConfigMap>> {
        let n = self.knobs.tasks.unwrap_or(max_tasks).min(max_tasks);
        self.recorder.record("task_configs", None, Ok(()));
        Ok((0..n)
            .map(|i| {
                let mut c = self.config.clone();
                c.insert(TASK_INDEX.into(), i.to_string());
                c
            })
            .collect())
    }

    async fn stop_with(&mut self, connector_deleted: bool) -> PluginResult<()> {
        run_stop(&self.recorder, &self.knobs, connector_deleted).await
    }
}

fn task_recorder(ctx: &TaskContext, config: &ConfigMap) -> Recorder {
    Recorder {
        path: config
            .get(LIFECYCLE_PATH)
            .or_else(|| ctx.connector_config.get(LIFECYCLE_PATH))
            .map(PathBuf::from),
        executor: ctx.executor_id.clone(),
        connector: ctx.connector.clone(),
        task: Some(ctx.task),
        instance: Recorder::new_instance(),
        incarnation: ctx.incarnation.clone(),
        cleanup_only: ctx.cleanup_only,
    }
}

/// Parses the knobs, waits `test.start.delay.ms` and applies `test.start.fail`, recording
/// the `start` line when it returns.
async fn start_task(recorder: &Recorder, config: &ConfigMap) -> Result<Knobs, String> {
    if let Ok(Some(ms)) = parse_opt::<u64>(config, "test.start.delay.ms") {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    let knobs = Knobs::parse(config).and_then(|k| k.start_failure().map_or(Ok(k), Err));
    recorder.record(
        "start",
        None,
        knobs.as_ref().map(|_| ()).map_err(String::as_str),
    );
    knobs
}

/// Source task of `test-source`: each poll returns `test.records.per.poll` records whose
/// source partition is `{"task":n}` and offset `{"seq":k}`, resuming after the committed
/// offset.
#[derive(Debug, Default)]
struct TestSourceTask {
    recorder: Recorder,
    knobs: Knobs,
    task: u32,
    next_seq: u64,
    polled: bool,
}

#[async_trait]
impl SourceTask for TestSourceTask {
    async fn start(&mut self, ctx: TaskContext, config: ConfigMap) -> PluginResult<()> {
        self.recorder = task_recorder(&ctx, &config);
        self.task = ctx.task;
        self.next_seq = ctx
            .offset(&json!({ "task": ctx.task }))
            .and_then(|o| o.get("seq"))
            .and_then(serde_json::Value::as_u64)
            .map_or(0, |s| s + 1);
        self.knobs = start_task(&self.recorder, &config).await?;
        Ok(())
    }

    async fn poll(&mut self) -> PluginResult<Vec<SourceRecord>> {
        if !self.polled {
            self.polled = true;
            self.recorder.record("poll", None, Ok(()));
        }
        if self.knobs.poll_panic {
            panic!("test.poll.panic: injected panic in poll");
        }
        let wait =
            Duration::from_millis(self.knobs.poll_block_ms.unwrap_or(DEFAULT_POLL_INTERVAL_MS));
        if self.knobs.ignore_cancel {
            // Deliberately misbehaving: holds the thread and cannot be cancelled.
            std::thread::sleep(wait);
        } else {
            tokio::time::sleep(wait).await;
        }
        let topic = self
            .knobs
            .topic
            .clone()
            .unwrap_or_else(|| format!("test-{}", self.recorder.connector));
        let records = (0..self.knobs.records_per_poll)
            .map(|_| {
                let seq = self.next_seq;
                self.next_seq += 1;
                SourceRecord {
                    topic: topic.clone(),
                    key: None,
                    value: json!({ "task": self.task, "seq": seq })
                        .to_string()
                        .into_bytes(),
                    headers: Vec::new(),
                    timestamp_ms: None,
                    partition: None,
                    source_partition: json!({ "task": self.task }),
                    source_offset: json!({ "seq": seq }),
                    data: None,
                }
            })
            .collect();
        Ok(records)
    }

    async fn stop_with(&mut self, connector_deleted: bool) -> PluginResult<()> {
        run_stop(&self.recorder, &self.knobs, connector_deleted).await
    }
}

/// Config key of `test-sink`: the file each record put is appended to, one JSON line.
pub const RECORDS_PATH: &str = "test.records.path";
/// Config key of `test-sink`: a value containing this text is reported errant.
pub const REPORT_ERRANT: &str = "test.report.errant.containing";

/// Sink task of `test-sink`: accepts every record (and writes it to
/// [`RECORDS_PATH`] when set), or reports it errant ([`REPORT_ERRANT`]).
#[derive(Debug, Default)]
struct TestSinkTask {
    recorder: Recorder,
    knobs: Knobs,
    put_seen: bool,
    records_path: Option<PathBuf>,
    report_errant: Option<String>,
    errant: Option<wharf_sdk::ErrantRecordReporter>,
}

/// A sink record as one JSON line of [`RECORDS_PATH`].
fn record_line(r: &SinkRecord, recorder: &Recorder) -> String {
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    serde_json::json!({
        "instance": recorder.instance,
        "task": recorder.task,
        "executor": recorder.executor,
        "topic": r.topic,
        "partition": r.partition,
        "offset": r.offset,
        "key": r.key.as_deref().map(text),
        "value": text(&r.value),
        "headers": r.headers.iter().map(|(k, v)| serde_json::json!([k, text(v)])).collect::<Vec<_>>(),
    })
    .to_string()
}

#[async_trait]
impl SinkTask for TestSinkTask {
    async fn start(&mut self, ctx: TaskContext, config: ConfigMap) -> PluginResult<()> {
        self.recorder = task_recorder(&ctx, &config);
        self.records_path = ctx
            .connector_config
            .get(RECORDS_PATH)
            .or_else(|| config.get(RECORDS_PATH))
            .map(PathBuf::from);
        self.report_errant = ctx
            .connector_config
            .get(REPORT_ERRANT)
            .or_else(|| config.get(REPORT_ERRANT))
            .cloned();
        self.errant = ctx.errant_reporter.clone();
        self.knobs = start_task(&self.recorder, &config).await?;
        Ok(())
    }

    async fn put(&mut self, records: Vec<SinkRecord>) -> PluginResult<()> {
        if !self.put_seen {
            self.put_seen = true;
            self.recorder.record("put", None, Ok(()));
        }
        let mut lines = String::new();
        for r in &records {
            let errant = self
                .report_errant
                .as_deref()
                .is_some_and(|t| String::from_utf8_lossy(&r.value).contains(t));
            match (&self.errant, errant) {
                (Some(reporter), true) => {
                    reporter.report(r, &"test.report.errant.containing matched")?
                }
                _ => {
                    lines.push_str(&record_line(r, &self.recorder));
                    lines.push('\n');
                }
            }
        }
        if let Some(path) = &self.records_path
            && !lines.is_empty()
        {
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
            f.write_all(lines.as_bytes())
                .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        }
        Ok(())
    }

    async fn stop_with(&mut self, connector_deleted: bool) -> PluginResult<()> {
        run_stop(&self.recorder, &self.knobs, connector_deleted).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(path: &Path) -> Vec<serde_json::Value> {
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    #[tokio::test]
    async fn stop_failures_are_counted_across_instances() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("life.jsonl");
        let mut config = ConfigMap::new();
        config.insert(LIFECYCLE_PATH.into(), path.display().to_string());
        config.insert("test.stop.fail.times".into(), "1".into());
        let ctx = || ConnectorContext::new("c", "inc", false, "ex", Arc::new(|| {}));
        let mut first = TestConnector::default();
        first.start(ctx(), config.clone()).await.unwrap();
        assert!(first.stop_with(true).await.is_err());
        let mut second = TestConnector::default();
        second.start(ctx(), config).await.unwrap();
        assert!(second.stop_with(true).await.is_ok());
        let calls: Vec<_> = lines(&path)
            .iter()
            .map(|l| {
                (
                    l["call"].as_str().unwrap().to_owned(),
                    l["ok"].as_bool().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            calls.iter().filter(|(c, ok)| c == "stopped" && !ok).count(),
            1
        );
        assert_eq!(
            calls.iter().filter(|(c, ok)| c == "stopped" && *ok).count(),
            1
        );
    }
}
