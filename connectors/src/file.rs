//! `file-source` and `file-sink`, for the quickstart.
//!
//! `file-source` reads the lines of `file` into `topic`; its source partition is
//! `{"file":<path>}` and its offset `{"position":<byte offset of the next line>}`, so a
//! restarted task resumes after the last committed line. A trailing line without a newline
//! is read once its newline arrives. `file-sink` appends each record's value to `file` as
//! one JSON line (the value itself when it is JSON, otherwise a JSON string); its flush is
//! an fsync (the runtime calls it once per several batches, and acknowledges the records
//! only after it returned).

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::json;
use wharf::sdk::{
    ConfigDef, ConfigKey, ConfigMap, ConfigType, Connector, ConnectorContext, Importance, Plugin,
    PluginResult, SinkRecord, SinkTask, SourceRecord, SourceTask, TaskContext, TaskFactory,
};

use crate::required;

/// How long a poll waits when the file has no new complete line, in milliseconds. It is
/// most of a line's end-to-end latency when lines come one by one (a line waits 0 to this
/// long before it is read); an idle poll costs one open and read of the file.
pub const IDLE_POLL_WAIT_MS: u64 = 50;

/// Most bytes read by one poll.
pub const MAX_READ_BYTES: usize = 64 * 1024;

/// The `file-source` plugin.
pub fn source_plugin() -> Plugin {
    Plugin {
        name: "file-source".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        config_def: ConfigDef::new()
            .define(
                ConfigKey::new(
                    "file",
                    ConfigType::String,
                    Importance::High,
                    "Path of the file whose lines are read.",
                )
                .required(),
            )
            .define(
                ConfigKey::new(
                    "topic",
                    ConfigType::String,
                    Importance::High,
                    "Topic the lines are written to.",
                )
                .required(),
            ),
        connector: Arc::new(|| Box::new(FileConnector::default())),
        task: TaskFactory::Source(Arc::new(|| Box::new(FileSourceTask::default()))),
    }
}

/// The `file-sink` plugin.
pub fn sink_plugin() -> Plugin {
    Plugin {
        name: "file-sink".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        config_def: ConfigDef::new()
            .define(
                ConfigKey::new(
                    "file",
                    ConfigType::String,
                    Importance::High,
                    "Path of the file records are appended to, one JSON line each.",
                )
                .required(),
            )
            .define(
                ConfigKey::new(
                    "topics",
                    ConfigType::List,
                    Importance::High,
                    "Comma-separated topics to read.",
                )
                .required(),
            ),
        connector: Arc::new(|| Box::new(FileConnector::default())),
        task: TaskFactory::Sink(Arc::new(|| Box::new(FileSinkTask::default()))),
    }
}

/// Connector of both file plugins: one task with the connector's config.
#[derive(Debug, Default)]
struct FileConnector {
    config: ConfigMap,
}

#[async_trait]
impl Connector for FileConnector {
    async fn start(&mut self, _ctx: ConnectorContext, config: ConfigMap) -> PluginResult<()> {
        required(&config, "file")?;
        self.config = config;
        Ok(())
    }

    async fn task_configs(&mut self, max_tasks: u32) -> PluginResult<Vec<ConfigMap>> {
        Ok(if max_tasks == 0 {
            Vec::new()
        } else {
            vec![self.config.clone()]
        })
    }
}

/// Reads lines from a byte position.
#[derive(Debug, Default)]
struct FileSourceTask {
    path: PathBuf,
    topic: String,
    position: u64,
}

impl FileSourceTask {
    fn partition(&self) -> serde_json::Value {
        json!({ "file": self.path.display().to_string() })
    }

    /// Complete lines from the current position, with the offset after each.
    fn read_lines(&self) -> std::io::Result<Vec<(Vec<u8>, u64)>> {
        let mut file = match std::fs::File::open(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        file.seek(SeekFrom::Start(self.position))?;
        let mut buf = Vec::new();
        file.take(MAX_READ_BYTES as u64).read_to_end(&mut buf)?;
        let mut lines = Vec::new();
        let mut start = 0;
        while let Some(nl) = buf[start..].iter().position(|b| *b == b'\n') {
            let end = start + nl;
            let mut line = buf[start..end].to_vec();
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            lines.push((line, self.position + end as u64 + 1));
            start = end + 1;
        }
        Ok(lines)
    }
}

#[async_trait]
impl SourceTask for FileSourceTask {
    async fn start(&mut self, ctx: TaskContext, config: ConfigMap) -> PluginResult<()> {
        self.path = PathBuf::from(required(&config, "file")?);
        self.topic = required(&config, "topic")?.to_owned();
        self.position = ctx
            .offset(&self.partition())
            .and_then(|o| o.get("position"))
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(0);
        Ok(())
    }

    async fn poll(&mut self) -> PluginResult<Vec<SourceRecord>> {
        let lines = self.read_lines()?;
        if lines.is_empty() {
            tokio::time::sleep(Duration::from_millis(IDLE_POLL_WAIT_MS)).await;
            return Ok(Vec::new());
        }
        let partition = self.partition();
        let records = lines
            .into_iter()
            .map(|(value, next)| {
                self.position = next;
                SourceRecord {
                    topic: self.topic.clone(),
                    key: None,
                    value,
                    headers: Vec::new(),
                    timestamp_ms: None,
                    source_partition: partition.clone(),
                    source_offset: json!({ "position": next }),
                }
            })
            .collect();
        Ok(records)
    }
}

/// Appends JSON lines.
#[derive(Debug, Default)]
struct FileSinkTask {
    file: Option<std::fs::File>,
}

/// A record value as one JSON line: the value itself when it is JSON, else a JSON string.
fn json_line(value: &[u8]) -> String {
    match serde_json::from_slice::<serde_json::Value>(value) {
        Ok(v) => v.to_string(),
        Err(_) => {
            serde_json::Value::String(String::from_utf8_lossy(value).into_owned()).to_string()
        }
    }
}

#[async_trait]
impl SinkTask for FileSinkTask {
    async fn start(&mut self, _ctx: TaskContext, config: ConfigMap) -> PluginResult<()> {
        let path = required(&config, "file")?;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| format!("cannot open {path:?}: {e}"))?;
        self.file = Some(file);
        Ok(())
    }

    async fn put(&mut self, records: Vec<SinkRecord>) -> PluginResult<()> {
        let file = self.file.as_mut().ok_or("file-sink was not started")?;
        let mut text = String::new();
        for r in &records {
            text.push_str(&json_line(&r.value));
            text.push('\n');
        }
        file.write_all(text.as_bytes())?;
        Ok(())
    }

    async fn flush(&mut self, _offsets: &BTreeMap<String, u64>) -> PluginResult<()> {
        if let Some(file) = &self.file {
            file.sync_all()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use tokio_util::sync::CancellationToken;

    fn ctx(offsets: BTreeMap<String, serde_json::Value>) -> TaskContext {
        TaskContext {
            connector: "f".into(),
            task: 0,
            incarnation: "i".into(),
            cleanup_only: false,
            executor_id: "e".into(),
            connector_config: ConfigMap::new(),
            offsets,
            cancel: CancellationToken::new(),
        }
    }

    #[tokio::test]
    async fn source_reads_complete_lines_and_resumes_after_committed_position() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("in.txt");
        std::fs::write(&path, "a\nbb\npartial").unwrap();
        let mut config = ConfigMap::new();
        config.insert("file".into(), path.display().to_string());
        config.insert("topic".into(), "t".into());
        let mut task = FileSourceTask::default();
        task.start(ctx(BTreeMap::new()), config.clone())
            .await
            .unwrap();
        let records = task.poll().await.unwrap();
        assert_eq!(records.len(), 2);
        assert_eq!(records[1].source_offset, json!({ "position": 5 }));

        let partition = json!({ "file": path.display().to_string() });
        let offsets = BTreeMap::from([(partition.to_string(), json!({ "position": 2 }))]);
        let mut resumed = FileSourceTask::default();
        resumed.start(ctx(offsets), config).await.unwrap();
        let again = resumed.poll().await.unwrap();
        assert_eq!(again.len(), 1);
        assert_eq!(again[0].value, b"bb");
    }

    #[test]
    fn sink_lines_are_json_whatever_the_value() {
        assert_eq!(json_line(br#"{"a":1}"#), r#"{"a":1}"#);
        assert_eq!(json_line(b"plain"), r#""plain""#);
    }
}
