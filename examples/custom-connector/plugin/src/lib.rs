//! `spool-sink`: a small third-party sink that provisions something outside Wharf, as
//! KIP-883's examples do, and cleans it up only when its connector is deleted.
//!
//! - Connector start: creates the spool directory `<spool.root>/<spool.dir>` (default
//!   `spool-<connector>-<hash>`, derived from the connector name so cleanup can find it)
//!   with an owner file naming the connector and its incarnation. A directory owned by
//!   anyone else is refused, never adopted.
//! - Task start: opens its own file `task-<n>.jsonl` in it (a per-task resource);
//!   `put` buffers, `flush` appends and syncs (records are acknowledged after flush).
//! - `stop(false)`: closes the file, keeps everything.
//! - Task `stop(true)`: removes its file. Connector `stop(true)`: removes the directory.
//!   Both check the owner file first (a late cleanup of an earlier incarnation must not
//!   touch its successor's data), and succeed when things are already gone.
//!
//! The file work is synchronous (`std::fs`, `fsync`), so every call runs it with
//! `tokio::task::spawn_blocking` ([`blocking`]): a plugin call runs on the executor's
//! shared plugin threads and must await, not block (docs/connector-guide.md, "Where your
//! code runs").

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use wharf_sdk::{
    ConfigDef, ConfigKey, ConfigMap, ConfigType, Connector, ConnectorContext, Importance, Plugin,
    PluginResult, SinkRecord, SinkTask, TaskContext, TaskFactory, TopicPartition,
};

/// Name of the plugin, used as `connector.class`.
pub const PLUGIN_NAME: &str = "spool-sink";

/// Name of the owner file inside a spool directory.
pub const OWNER_FILE: &str = ".wharf-owner";

/// Config keys.
pub mod keys {
    /// Existing directory under which the spool directory is made.
    pub const ROOT: &str = "spool.root";
    /// Name of the spool directory under the root.
    pub const DIR: &str = "spool.dir";
    /// Topics to read (a runtime key every sink takes).
    pub const TOPICS: &str = "topics";
}

/// Errors of spool-sink.
#[derive(Debug, thiserror::Error)]
pub enum SpoolError {
    /// A required key is missing.
    #[error("missing required configuration {0:?}")]
    Missing(&'static str),
    /// The spool directory belongs to someone else.
    #[error("spool directory {path} is owned by {owner:?}, not by this connector incarnation")]
    NotOurs {
        /// The directory.
        path: String,
        /// What its owner file says (empty when there is none).
        owner: String,
    },
    /// A file operation failed.
    #[error("{step} {path}: {source}")]
    Io {
        /// What was being done.
        step: &'static str,
        /// The path.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// A call came before a successful start.
    #[error("{0} called before a successful start")]
    NotStarted(&'static str),
    /// The blocking file work did not complete (it panicked or was cancelled).
    #[error("the file work of {step} did not complete: {reason}")]
    Blocking {
        /// The call whose work it was.
        step: &'static str,
        /// The task's error.
        reason: String,
    },
}

/// Runs the synchronous file work `work` of call `step` on tokio's blocking threads, so
/// that the plugin call awaits instead of holding a plugin thread.
///
/// # Errors
/// `work`'s own error, or [`SpoolError::Blocking`] when it did not complete.
pub async fn blocking<T: Send + 'static>(
    step: &'static str,
    work: impl FnOnce() -> Result<T, SpoolError> + Send + 'static,
) -> Result<T, SpoolError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| SpoolError::Blocking {
            step,
            reason: e.to_string(),
        })?
}

fn io(step: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> SpoolError {
    let path = path.display().to_string();
    move |source| SpoolError::Io { step, path, source }
}

/// The plugin: name, version, config keys and factories.
pub fn plugin() -> Plugin {
    Plugin {
        name: PLUGIN_NAME.to_owned(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        config_def: ConfigDef::new()
            .define(
                ConfigKey::new(keys::ROOT, ConfigType::String, Importance::High, "Existing directory on the executor's host under which the spool directory is made. Immutable: cleanup looks there.")
                    .required()
                    .immutable(),
            )
            .define(
                ConfigKey::new(keys::DIR, ConfigType::String, Importance::Low, "Name of the spool directory. Default: spool-<connector>-<hash>. Immutable.")
                    .immutable(),
            )
            .define(
                ConfigKey::new(keys::TOPICS, ConfigType::List, Importance::High, "Topics to read, comma-separated.")
                    .required(),
            ),
        connector: Arc::new(|| Box::new(SpoolConnector::default()) as Box<dyn Connector>),
        task: TaskFactory::Sink(Arc::new(|| Box::new(SpoolTask::default()) as Box<dyn SinkTask>)),
    }
}

/// FNV-1a, stable across builds, so every executor derives the same name.
fn stable_hash(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The spool directory of `connector` under `config`.
pub fn spool_dir(connector: &str, config: &ConfigMap) -> Result<PathBuf, SpoolError> {
    let root = config
        .get(keys::ROOT)
        .ok_or(SpoolError::Missing(keys::ROOT))?;
    let name = match config.get(keys::DIR) {
        Some(d) if !d.trim().is_empty() => d.trim().to_owned(),
        _ => {
            let clean: String = connector
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
                .take(32)
                .collect();
            format!("spool-{clean}-{:016x}", stable_hash(connector))
        }
    };
    Ok(Path::new(root).join(name))
}

/// What the owner file of a connector incarnation holds.
fn owner_text(ctx_connector: &str, incarnation: &str) -> String {
    serde_json::json!({ "connector": ctx_connector, "incarnation": incarnation }).to_string()
}

/// Whether `dir` is ours: `Some(true)` ours, `Some(false)` someone else's, `None` gone.
fn owned(dir: &Path, me: &str) -> Result<Option<bool>, SpoolError> {
    if !dir.exists() {
        return Ok(None);
    }
    match std::fs::read_to_string(dir.join(OWNER_FILE)) {
        Ok(text) => Ok(Some(text == me)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Some(false)),
        Err(e) => Err(io("reading the owner file of", dir)(e)),
    }
}

/// The connector instance: owns the spool directory.
#[derive(Debug, Default)]
pub struct SpoolConnector {
    config: ConfigMap,
    dir: Option<PathBuf>,
    owner: String,
    /// Where the spool directory is recorded (docs/resources.md).
    resources: Option<wharf_sdk::Resources>,
}

/// The spool directory as a resource-ledger entry.
fn spool_resource(dir: &Path) -> wharf_sdk::Resource {
    wharf_sdk::Resource::created(
        wharf_sdk::ResourceKind::File,
        dir.display().to_string(),
        wharf_sdk::Locator::default().path(dir.display().to_string()),
    )
}

#[async_trait]
impl Connector for SpoolConnector {
    async fn start(&mut self, ctx: ConnectorContext, config: ConfigMap) -> PluginResult<()> {
        let dir = spool_dir(&ctx.connector, &config)?;
        self.owner = owner_text(&ctx.connector, &ctx.incarnation);
        self.dir = Some(dir.clone());
        self.config = config;
        self.resources = Some(ctx.resources().clone());
        if ctx.cleanup_only {
            // Only what the following stop(true) needs: provision nothing.
            return Ok(());
        }
        // In the ledger before the directory exists, confirmed once it does.
        let entry = spool_resource(&dir);
        ctx.resources().intend(&entry).await?;
        let me = self.owner.clone();
        blocking("start", move || provision(&dir, &me)).await?;
        ctx.resources().confirm(&entry).await?;
        Ok(())
    }

    async fn task_configs(&mut self, max_tasks: u32) -> PluginResult<Vec<ConfigMap>> {
        // Each task gets the full config; the runtime shares the topics out among them.
        Ok((0..max_tasks).map(|_| self.config.clone()).collect())
    }

    async fn stop_with(&mut self, connector_deleted: bool) -> PluginResult<()> {
        if !connector_deleted {
            return Ok(());
        }
        let dir = self
            .dir
            .clone()
            .ok_or(SpoolError::NotStarted("stop_with(true)"))?;
        let me = self.owner.clone();
        let removed = dir.clone();
        blocking("stop_with(true)", move || remove_spool(&removed, &me)).await?;
        // Gone now (removed, or never made): accounted for. A directory someone else
        // owns stays, and so does its entry.
        if !dir.exists()
            && let Some(ledger) = &self.resources
        {
            ledger.release(&spool_resource(&dir)).await?;
        }
        Ok(())
    }
}

/// Makes spool directory `dir` owned by `me`, or refuses one someone else owns.
fn provision(dir: &Path, me: &str) -> Result<(), SpoolError> {
    match owned(dir, me)? {
        Some(true) => Ok(()),
        Some(false) => {
            let owner = std::fs::read_to_string(dir.join(OWNER_FILE)).unwrap_or_default();
            Err(SpoolError::NotOurs {
                path: dir.display().to_string(),
                owner,
            })
        }
        None => {
            // Write the owner file under a temporary name first, so that a start that
            // fails halfway leaves either nothing or an owned directory.
            let staging = dir.with_extension("staging");
            std::fs::create_dir_all(&staging).map_err(io("creating", &staging))?;
            std::fs::write(staging.join(OWNER_FILE), me)
                .map_err(io("writing the owner file in", &staging))?;
            std::fs::rename(&staging, dir).map_err(io("creating", dir))
        }
    }
}

/// Removes spool directory `dir` if `me` owns it, and the staging directory of a start
/// that failed halfway; nothing there is no error.
fn remove_spool(dir: &Path, me: &str) -> Result<(), SpoolError> {
    // A half-made directory of a failed start is ours too.
    let staging = dir.with_extension("staging");
    if staging.exists() {
        std::fs::remove_dir_all(&staging).map_err(io("removing", &staging))?;
    }
    match owned(dir, me)? {
        Some(true) => std::fs::remove_dir_all(dir).map_err(io("removing", dir))?,
        Some(false) => {
            tracing::warn!(dir = %dir.display(), "spool-sink leaves a directory it does not own")
        }
        None => {}
    }
    Ok(())
}

/// Appends `data` to `path` and syncs it to disk.
fn append_synced(path: &Path, data: &[u8]) -> Result<(), SpoolError> {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(io("opening", path))?;
    f.write_all(data).map_err(io("appending to", path))?;
    f.sync_data().map_err(io("syncing", path))
}

/// Removes task file `file` if `me` owns its spool directory `dir`; a missing file is no
/// error.
fn remove_task_file(dir: &Path, file: &Path, me: &str) -> Result<(), SpoolError> {
    if owned(dir, me)? == Some(true) {
        match std::fs::remove_file(file) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io("removing", file)(e)),
        }
    }
    Ok(())
}

/// A task: appends the records it is given to its own file.
#[derive(Debug, Default)]
pub struct SpoolTask {
    dir: Option<PathBuf>,
    file: Option<PathBuf>,
    owner: String,
    buffered: Vec<u8>,
}

#[async_trait]
impl SinkTask for SpoolTask {
    async fn start(&mut self, ctx: TaskContext, config: ConfigMap) -> PluginResult<()> {
        let dir = spool_dir(&ctx.connector, &config)?;
        self.file = Some(dir.join(format!("task-{}.jsonl", ctx.task)));
        self.dir = Some(dir);
        self.owner = owner_text(&ctx.connector, &ctx.incarnation);
        Ok(())
    }

    async fn put(&mut self, records: Vec<SinkRecord>) -> PluginResult<()> {
        for r in records {
            let line = serde_json::json!({
                "topic": r.topic,
                "offset": r.offset,
                "value": String::from_utf8_lossy(&r.value),
            });
            self.buffered.extend_from_slice(line.to_string().as_bytes());
            self.buffered.push(b'\n');
        }
        Ok(())
    }

    async fn flush(&mut self, _offsets: &BTreeMap<TopicPartition, u64>) -> PluginResult<()> {
        let path = self.file.clone().ok_or(SpoolError::NotStarted("flush"))?;
        if self.buffered.is_empty() {
            return Ok(());
        }
        let data = std::mem::take(&mut self.buffered);
        // The buffer comes back on failure: a failed flush acknowledges nothing.
        let (data, written) = blocking("flush", move || {
            let written = append_synced(&path, &data);
            Ok((data, written))
        })
        .await?;
        if let Err(e) = written {
            self.buffered = data;
            return Err(e.into());
        }
        Ok(())
    }

    async fn stop_with(&mut self, connector_deleted: bool) -> PluginResult<()> {
        if !connector_deleted {
            return Ok(());
        }
        let (Some(dir), Some(file)) = (self.dir.clone(), self.file.clone()) else {
            return Err(SpoolError::NotStarted("stop_with(true)").into());
        };
        let me = self.owner.clone();
        blocking("stop_with(true)", move || {
            remove_task_file(&dir, &file, &me)
        })
        .await?;
        Ok(())
    }
}

/// Name of the example's custom transform (`transforms.<alias>.type`): upper-cases a
/// string value (read by `value.converter=string`).
pub const UPPER_CASE: &str = "com.example.spool.UpperCase";

/// Name of the example's custom predicate (`predicates.<alias>.type`): true when the
/// string value contains its `text` key.
pub const VALUE_CONTAINS: &str = "com.example.spool.ValueContains";

/// The custom transform an executor registers with `ExecutorBuilder::transform`, beside
/// its plugins (Kafka Connect's transformation plugins).
pub fn upper_case_transform() -> wharf_sdk::TransformPlugin {
    wharf_sdk::TransformPlugin {
        name: UPPER_CASE.to_owned(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        config_def: ConfigDef::new(),
        kind: wharf_sdk::TransformKind::Transformation(Arc::new(|_config: &ConfigMap| {
            Ok(Box::new(UpperCase) as Box<dyn wharf_sdk::Transformation>)
        })),
    }
}

/// The custom predicate an executor registers with `ExecutorBuilder::transform`.
pub fn value_contains_predicate() -> wharf_sdk::TransformPlugin {
    wharf_sdk::TransformPlugin {
        name: VALUE_CONTAINS.to_owned(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        config_def: ConfigDef::new().define(
            ConfigKey::new(
                "text",
                ConfigType::String,
                Importance::High,
                "The text the record's string value must contain.",
            )
            .required(),
        ),
        kind: wharf_sdk::TransformKind::Predicate(Arc::new(|config: &ConfigMap| {
            let text = config.get("text").cloned().ok_or_else(|| {
                (
                    "text".to_owned(),
                    "Missing required configuration \"text\" which has no default value."
                        .to_owned(),
                )
            })?;
            Ok(Box::new(ValueContains(text)) as Box<dyn wharf_sdk::Predicate>)
        })),
    }
}

/// Upper-cases a string value; other values pass unchanged.
struct UpperCase;

impl wharf_sdk::Transformation for UpperCase {
    fn apply(
        &mut self,
        mut record: wharf_sdk::ConnectRecord,
    ) -> Result<Option<wharf_sdk::ConnectRecord>, wharf_sdk::TransformError> {
        if let wharf_sdk::data::Value::String(s) = &mut record.value.value {
            *s = s.to_uppercase();
        }
        Ok(Some(record))
    }
}

/// True when the string value contains the text.
struct ValueContains(String);

impl wharf_sdk::Predicate for ValueContains {
    fn test(&self, record: &wharf_sdk::ConnectRecord) -> bool {
        matches!(&record.value.value, wharf_sdk::data::Value::String(s) if s.contains(&self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn file_work_runs_off_the_calling_thread() {
        let caller = std::thread::current().id();
        let worker = blocking("test", || Ok(std::thread::current().id()))
            .await
            .unwrap();
        assert_ne!(
            worker, caller,
            "the file work blocked the plugin call's thread"
        );
    }

    #[tokio::test]
    async fn file_work_that_panics_is_an_error_naming_the_call() {
        let e = blocking::<()>("flush", || panic!("disk gone"))
            .await
            .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("the file work of flush did not complete"),
            "{e}"
        );
    }
}
