//! `file-source` and `file-sink`, for the quickstart.
//!
//! `file-source` reads the lines of `file` into `topic`; its source partition is
//! `{"file":<path>}` and its offset `{"position":<byte offset of the next line>}`, so a
//! restarted task resumes after the last committed line. A trailing line without a newline
//! is read once its newline arrives. `file-sink` appends each record's value to `file` as
//! one JSON line (the value itself when it is JSON, otherwise a JSON string); its flush is
//! an fsync (the runtime calls it once per several batches, and acknowledges the records
//! only after it returned).
//!
//! `file-sink`'s file is in its connector's resource ledger (docs/resources.md) as
//! **adopted**, whether the sink created it or it was there before: it holds the records
//! the sink delivered, the output the user asked for, so a deletion keeps it (as it
//! always did) and stop(true) never removes it. The connector declares it, so a second
//! `file-sink` on the same file is refused at create (two appenders would interleave
//! their lines).
//!
//! Both touch only paths under the executor's `--file-root` ([`FileRoot`]): a relative
//! `file` is taken under it, an absolute one must lie under it, `..` is refused, and a
//! symbolic link that leads outside is refused (docs/security.md). An executor without a
//! root does not offer the file plugins at all.

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::json;
use wharf_sdk::{
    ConfigDef, ConfigKey, ConfigMap, ConfigType, Connector, ConnectorContext, Importance, Plugin,
    PluginResult, SinkRecord, SinkTask, SourceRecord, SourceTask, TaskContext, TaskFactory,
    TopicPartition,
};

use crate::required;

/// How long a poll waits when the file has no new complete line, in milliseconds. It is
/// most of a line's end-to-end latency when lines come one by one (a line waits 0 to this
/// long before it is read); an idle poll costs one open and read of the file.
pub const IDLE_POLL_WAIT_MS: u64 = 50;

/// Most bytes read by one poll.
pub const MAX_READ_BYTES: usize = 64 * 1024;

/// The root directory the file plugins are confined to (the executor's `--file-root`),
/// canonical: symbolic links in the root itself are resolved once, at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileRoot {
    /// Canonical: what every resolved path must lie under.
    canonical: PathBuf,
    /// As configured (made absolute): absolute `file` values may be written with it.
    given: PathBuf,
}

impl FileRoot {
    /// The root at `dir`, which must exist and be a directory.
    ///
    /// # Errors
    /// A message naming `--file-root` when it does not exist or is not a directory.
    pub fn new(dir: &Path) -> Result<Self, String> {
        let canonical = std::fs::canonicalize(dir)
            .map_err(|e| format!("--file-root {}: {e}", dir.display()))?;
        if !canonical.is_dir() {
            return Err(format!("--file-root {}: not a directory", dir.display()));
        }
        let given =
            std::path::absolute(dir).map_err(|e| format!("--file-root {}: {e}", dir.display()))?;
        Ok(Self { canonical, given })
    }

    /// The canonical root.
    pub fn path(&self) -> &Path {
        &self.canonical
    }

    /// Where `requested` (a `file` config value) lies under the root by the lexical
    /// decision alone ([`place_under`], against the canonical root, then the root as
    /// configured). No file system access.
    ///
    /// # Errors
    /// The [`PathRefusal`].
    pub fn place(&self, requested: &str) -> Result<PathBuf, PathRefusal> {
        match place_under(&self.canonical, requested) {
            Err(PathRefusal::OutsideRoot) if self.given != self.canonical => {
                place_under(&self.given, requested)
            }
            decided => decided,
        }
    }

    /// Where `requested` (a `file` config value) lies under the root: the lexical
    /// decision ([`FileRoot::place`]), then every existing part of the path resolved, so
    /// that a symbolic link leading outside the root is refused too.
    ///
    /// # Errors
    /// A message naming the `file` field and the root.
    pub fn resolve(&self, requested: &str) -> Result<PathBuf, String> {
        let explain = |refusal: PathRefusal| {
            format!(
                "config \"file\": {requested:?} {refusal}; file plugins only touch paths under the executor's --file-root {}",
                self.canonical.display()
            )
        };
        let path = self.place(requested).map_err(explain)?;
        // The deepest part that exists, a dangling link included (a sink's file may not
        // exist yet, but opening a dangling link would create its target).
        let mut existing = path.as_path();
        while std::fs::symlink_metadata(existing).is_err() {
            match existing.parent() {
                Some(parent) => existing = parent,
                None => return Err(explain(PathRefusal::EscapesRoot)),
            }
        }
        let resolved =
            std::fs::canonicalize(existing).map_err(|_| explain(PathRefusal::EscapesRoot))?;
        if resolved.starts_with(&self.canonical) {
            Ok(path)
        } else {
            Err(explain(PathRefusal::EscapesRoot))
        }
    }
}

/// Why a `file` value is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathRefusal {
    /// The value is empty.
    Empty,
    /// It has a `..` component.
    ParentDir,
    /// An absolute path outside the root.
    OutsideRoot,
    /// Resolved through a symbolic link, it leads outside the root.
    EscapesRoot,
}

impl std::fmt::Display for PathRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PathRefusal::Empty => "is empty",
            PathRefusal::ParentDir => "contains \"..\"",
            PathRefusal::OutsideRoot => "is outside the root",
            PathRefusal::EscapesRoot => {
                "leads outside the root through a symbolic link (or a dangling one)"
            }
        })
    }
}

/// The lexical decision for a `file` value under `root` (no file system access):
/// relative values are joined to `root`, absolute ones must start with it, `.` parts
/// are dropped and `..` parts refused (never normalised away: `a/../b` is refused).
///
/// # Errors
/// [`PathRefusal`] except `EscapesRoot`, which only the file system can tell.
pub fn place_under(root: &Path, requested: &str) -> Result<PathBuf, PathRefusal> {
    if requested.is_empty() {
        return Err(PathRefusal::Empty);
    }
    let requested = Path::new(requested);
    let mut out = if requested.is_absolute() {
        PathBuf::new()
    } else {
        root.to_path_buf()
    };
    for part in requested.components() {
        match part {
            Component::ParentDir => return Err(PathRefusal::ParentDir),
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) | Component::Normal(_) => out.push(part),
        }
    }
    if out.starts_with(root) && out != root {
        Ok(out)
    } else {
        Err(PathRefusal::OutsideRoot)
    }
}

/// The `file` key's validator: the part of [`place_under`]'s decision that needs no
/// root, so that validate reports it and create refuses it (`config[file]`) instead of
/// the connector failing at start. The root is only known on the host: an absolute
/// path outside it, or a symbolic link leading out, is still refused at start
/// ([`FileRoot::resolve`]).
///
/// # Errors
/// The value quoted with the [`PathRefusal`] (`contains ".."`, `is empty`).
pub fn check_file_value(value: &str) -> Result<(), String> {
    let refusal = if value.is_empty() {
        PathRefusal::Empty
    } else if Path::new(value)
        .components()
        .any(|c| c == Component::ParentDir)
    {
        PathRefusal::ParentDir
    } else {
        return Ok(());
    };
    Err(format!(
        "value {refusal}; file plugins only touch paths under the executor's --file-root, and \"..\" is refused whatever the root"
    ))
}

/// The `topic` key's validator: a topic has a name (Kafka Connect's `FileStreamSource`
/// declares its `topic` a non-empty string too), so that create refuses `config[topic]`
/// rather than records going to a topic named "".
///
/// # Errors
/// When `value` is empty.
pub fn check_topic_value(value: &str) -> Result<(), String> {
    if value.is_empty() {
        return Err("value \"\" is empty; name the topic the lines are written to".into());
    }
    Ok(())
}

/// The `file-source` plugin, confined to `root`.
pub fn source_plugin(root: FileRoot) -> Plugin {
    Plugin {
        name: "file-source".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        config_def: ConfigDef::new()
            .define(
                ConfigKey::new(
                    "file",
                    ConfigType::String,
                    Importance::High,
                    "Path of the file whose lines are read: relative to the executor's --file-root, or absolute under it.",
                )
                .required()
                .validator(check_file_value),
            )
            .define(
                ConfigKey::new(
                    "topic",
                    ConfigType::String,
                    Importance::High,
                    "Topic the lines are written to.",
                )
                .required()
                .validator(check_topic_value),
            ),
        connector: {
            let root = root.clone();
            Arc::new(move || Box::new(FileConnector::new(root.clone())))
        },
        task: TaskFactory::Source(Arc::new(move || Box::new(FileSourceTask::new(root.clone())))),
    }
}

/// The `file-sink` plugin, confined to `root`.
pub fn sink_plugin(root: FileRoot) -> Plugin {
    Plugin {
        name: "file-sink".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        config_def: ConfigDef::new()
            .define(
                ConfigKey::new(
                    "file",
                    ConfigType::String,
                    Importance::High,
                    "Path of the file records are appended to, one JSON line each: relative to the executor's --file-root, or absolute under it.",
                )
                .required()
                .validator(check_file_value),
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
        connector: {
            let root = root.clone();
            Arc::new(move || Box::new(FileConnector::sink(root.clone())))
        },
        task: TaskFactory::Sink(Arc::new(move || Box::new(FileSinkTask::new(root.clone())))),
    }
}

/// Connector of both file plugins: one task with the connector's config.
#[derive(Debug)]
struct FileConnector {
    root: FileRoot,
    config: ConfigMap,
    /// `file-sink`'s: it declares its file (a second sink on it is refused).
    sink: bool,
}

impl FileConnector {
    fn new(root: FileRoot) -> Self {
        Self {
            root,
            config: ConfigMap::new(),
            sink: false,
        }
    }

    fn sink(root: FileRoot) -> Self {
        Self {
            sink: true,
            ..Self::new(root)
        }
    }
}

/// The ledger entry of a sink's file at `path`: adopted (a deletion keeps it; see the
/// module's doc). Pure.
pub fn sink_file_resource(path: &Path) -> wharf_sdk::Resource {
    wharf_sdk::Resource::adopted(
        wharf_sdk::ResourceKind::File,
        path.display().to_string(),
        wharf_sdk::Locator::default().path(path.display().to_string()),
    )
}

#[async_trait]
impl Connector for FileConnector {
    async fn start(&mut self, _ctx: ConnectorContext, config: ConfigMap) -> PluginResult<()> {
        self.root.resolve(required(&config, "file")?)?;
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

    fn declared_resources(&self, config: &ConfigMap) -> PluginResult<Vec<wharf_sdk::Resource>> {
        if !self.sink {
            return Ok(Vec::new());
        }
        // The lexical place only (no I/O); a value the root refuses declares nothing
        // here and fails the start, naming `config "file"`.
        Ok(config
            .get("file")
            .and_then(|f| self.root.place(f).ok())
            .map(|p| vec![sink_file_resource(&p)])
            .unwrap_or_default())
    }
}

/// Reads lines from a byte position.
#[derive(Debug)]
struct FileSourceTask {
    root: FileRoot,
    /// The `file` value as configured (the source partition names it).
    file: String,
    path: PathBuf,
    topic: String,
    position: u64,
}

impl FileSourceTask {
    fn new(root: FileRoot) -> Self {
        Self {
            root,
            file: String::new(),
            path: PathBuf::new(),
            topic: String::new(),
            position: 0,
        }
    }

    fn partition(&self) -> serde_json::Value {
        json!({ "file": self.path.display().to_string() })
    }

    /// Complete lines from the current position, with the offset after each. The path
    /// is checked again before each open: a link swapped in later cannot lead outside.
    fn read_lines(&self) -> PluginResult<Vec<(Vec<u8>, u64)>> {
        self.root.resolve(&self.file)?;
        let mut file = match std::fs::File::open(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e.into()),
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
        self.file = required(&config, "file")?.to_owned();
        self.path = self.root.resolve(&self.file)?;
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
                    partition: None,
                    source_partition: partition.clone(),
                    source_offset: json!({ "position": next }),
                    data: None,
                }
            })
            .collect();
        Ok(records)
    }
}

/// Appends JSON lines.
#[derive(Debug)]
struct FileSinkTask {
    root: FileRoot,
    file: Option<std::fs::File>,
}

impl FileSinkTask {
    fn new(root: FileRoot) -> Self {
        Self { root, file: None }
    }
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
    async fn start(&mut self, ctx: TaskContext, config: ConfigMap) -> PluginResult<()> {
        let path = self.root.resolve(required(&config, "file")?)?;
        // In the ledger before the open that may create it; adopted either way.
        let resource = sink_file_resource(&path);
        if ctx.cleanup_only {
            return Ok(());
        }
        ctx.resources.intend(&resource).await?;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        self.file = Some(file);
        ctx.resources.confirm(&resource).await?;
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

    async fn flush(&mut self, _offsets: &BTreeMap<TopicPartition, u64>) -> PluginResult<()> {
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
    use wharf_sdk::LedgerChange;

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
            errant_reporter: None,
            sink_seek: None,
            resources: wharf_sdk::Resources::detached(wharf_sdk::ResourceOwner::Task(0)),
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
        let root = FileRoot::new(dir.path()).unwrap();
        let mut task = FileSourceTask::new(root.clone());
        task.start(ctx(BTreeMap::new()), config.clone())
            .await
            .unwrap();
        let records = task.poll().await.unwrap();
        assert_eq!(records.len(), 2);
        assert_eq!(records[1].source_offset, json!({ "position": 5 }));

        let partition = json!({ "file": root_path(&path).display().to_string() });
        let offsets = BTreeMap::from([(partition.to_string(), json!({ "position": 2 }))]);
        let mut resumed = FileSourceTask::new(root);
        resumed.start(ctx(offsets), config).await.unwrap();
        let again = resumed.poll().await.unwrap();
        assert_eq!(again.len(), 1);
        assert_eq!(again[0].value, b"bb");
    }

    fn root_path(p: &Path) -> PathBuf {
        std::fs::canonicalize(p.parent().unwrap())
            .unwrap()
            .join(p.file_name().unwrap())
    }

    #[test]
    fn a_relative_path_is_taken_under_the_root() {
        let root = Path::new("/srv/wharf");
        assert_eq!(
            place_under(root, "out/a.txt"),
            Ok(PathBuf::from("/srv/wharf/out/a.txt"))
        );
        assert_eq!(
            place_under(root, "./a.txt"),
            Ok(PathBuf::from("/srv/wharf/a.txt"))
        );
    }

    #[test]
    fn an_absolute_path_under_the_root_is_kept() {
        let root = Path::new("/srv/wharf");
        assert_eq!(
            place_under(root, "/srv/wharf/a.txt"),
            Ok(PathBuf::from("/srv/wharf/a.txt"))
        );
    }

    #[test]
    fn an_absolute_path_outside_the_root_is_refused() {
        let root = Path::new("/srv/wharf");
        assert_eq!(
            place_under(root, "/etc/passwd"),
            Err(PathRefusal::OutsideRoot)
        );
        // A sibling sharing the prefix is not under the root.
        assert_eq!(
            place_under(root, "/srv/wharfx/a"),
            Err(PathRefusal::OutsideRoot)
        );
        // The root itself is a directory, not a file.
        assert_eq!(
            place_under(root, "/srv/wharf"),
            Err(PathRefusal::OutsideRoot)
        );
        assert_eq!(place_under(root, "."), Err(PathRefusal::OutsideRoot));
    }

    #[test]
    fn parent_dir_is_refused_even_when_it_stays_inside() {
        let root = Path::new("/srv/wharf");
        for v in ["../etc/passwd", "a/../b", "/srv/wharf/../wharf/a", ".."] {
            assert_eq!(place_under(root, v), Err(PathRefusal::ParentDir), "{v}");
        }
    }

    #[test]
    fn the_file_validator_refuses_dot_dot_anywhere_without_a_root() {
        for bad in ["../../etc/evil", "a/../b", "/srv/wharf/../x", ".."] {
            let e = check_file_value(bad).expect_err(bad);
            assert!(
                (bad == ".." || !e.contains(bad)) && e.contains("value contains \"..\""),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn the_topic_validator_refuses_only_an_empty_value() {
        let e = check_topic_value("").expect_err("empty");
        assert!(e.contains("empty"), "{e}");
        assert_eq!(check_topic_value("audit.customers"), Ok(()));
    }

    #[test]
    fn the_file_validator_refuses_an_empty_value() {
        assert!(
            check_file_value("")
                .expect_err("empty")
                .contains("is empty")
        );
    }

    #[test]
    fn the_file_validator_leaves_root_dependent_checks_to_the_start() {
        // Absolute paths may lie under the root; only the host knows.
        for good in [
            "out.jsonl",
            "a/./b.jsonl",
            "/etc/passwd",
            "x..y",
            "...",
            "a/..b",
        ] {
            assert_eq!(check_file_value(good), Ok(()), "{good}");
        }
    }

    #[test]
    fn both_file_plugins_check_file_in_their_definition() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = FileRoot::new(dir.path()).expect("root");
        for plugin in [source_plugin(root.clone()), sink_plugin(root)] {
            let key = plugin.config_def.key("file").expect("file key");
            assert!(key.validator.is_some(), "{}", plugin.name);
            let config: ConfigMap = [("file".to_owned(), "../x".to_owned())]
                .into_iter()
                .collect();
            let errors: Vec<String> = plugin
                .config_def
                .validate(&config)
                .into_iter()
                .filter(|v| v.name == "file")
                .flat_map(|v| v.errors)
                .collect();
            assert!(
                errors.iter().any(|e| e.contains("contains \"..\"")),
                "{}: {errors:?}",
                plugin.name
            );
        }
    }

    #[test]
    fn an_empty_value_is_refused() {
        assert_eq!(
            place_under(Path::new("/srv/wharf"), ""),
            Err(PathRefusal::Empty)
        );
    }

    #[test]
    fn a_symlink_leading_outside_is_refused_and_one_inside_is_followed() {
        let outside = tempfile::tempdir().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let root = FileRoot::new(dir.path()).unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("out")).unwrap();
        std::os::unix::fs::symlink(
            outside.path().join("secret"),
            dir.path().join("secret-link"),
        )
        .unwrap();
        std::fs::create_dir(dir.path().join("in")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("in"), dir.path().join("in-link")).unwrap();
        for v in ["out/new.txt", "secret-link"] {
            let err = root.resolve(v).expect_err(v);
            assert!(
                err.contains("config \"file\"") && err.contains("symbolic link"),
                "{err}"
            );
        }
        assert_eq!(
            root.resolve("in-link/a.txt").unwrap(),
            root.path().join("in-link/a.txt")
        );
        let err = root.resolve("../x").expect_err("..");
        assert!(
            err.contains("config \"file\"") && err.contains("--file-root"),
            "{err}"
        );
    }

    #[test]
    fn a_root_given_through_a_symlink_accepts_paths_written_either_way() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        std::fs::create_dir(&real).unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let root = FileRoot::new(&link).unwrap();
        for v in [link.join("a.txt"), real.join("a.txt")] {
            let v = v.display().to_string();
            assert!(root.resolve(&v).is_ok(), "{v}");
        }
        let outside = dir.path().join("other.txt").display().to_string();
        assert!(root.resolve(&outside).is_err());
    }

    #[tokio::test]
    async fn the_sink_refuses_a_path_outside_the_root_and_creates_nothing() {
        let outside = tempfile::tempdir().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let target = outside.path().join("x.txt");
        let mut config = ConfigMap::new();
        config.insert("file".into(), target.display().to_string());
        let mut sink = FileSinkTask::new(FileRoot::new(dir.path()).unwrap());
        let err = sink
            .start(ctx(BTreeMap::new()), config)
            .await
            .expect_err("outside");
        assert!(err.to_string().contains("config \"file\""), "{err}");
        assert!(!target.exists(), "nothing written outside the root");
    }

    #[tokio::test]
    async fn the_sink_records_its_file_as_adopted_before_opening_it_and_declares_it() {
        let dir = tempfile::tempdir().unwrap();
        let root = FileRoot::new(dir.path()).unwrap();
        let ledger = Arc::new(wharf_sdk::MemoryLedger::default());
        let mut c = ctx(BTreeMap::new());
        c.resources = wharf_sdk::Resources::new(ledger.clone(), wharf_sdk::ResourceOwner::Task(0));
        let mut config = ConfigMap::new();
        config.insert("file".into(), "out.jsonl".into());
        config.insert("topics".into(), "t".into());
        let mut sink = FileSinkTask::new(root.clone());
        sink.start(c, config.clone()).await.unwrap();
        let path = root.path().join("out.jsonl");
        let changes: Vec<LedgerChange> =
            ledger.changes().into_iter().map(|(_, _, ch)| ch).collect();
        assert_eq!(changes, [LedgerChange::Intent, LedgerChange::Confirm]);
        let entry = &ledger.entries()[0];
        assert_eq!(entry.resource.origin, wharf_sdk::Origin::Adopted);
        assert_eq!(entry.resource.locator.path, path.display().to_string());
        // stop(true) keeps the file and releases nothing.
        SinkTask::stop_with(&mut sink, true).await.unwrap();
        assert!(path.exists());
        assert_eq!(ledger.changes().len(), 2);
        let declared = FileConnector::sink(root.clone())
            .declared_resources(&config)
            .unwrap();
        assert!(declared[0].same_as(&entry.resource), "{declared:?}");
        assert!(
            FileConnector::new(root)
                .declared_resources(&config)
                .unwrap()
                .is_empty(),
            "a source declares nothing"
        );
    }

    #[test]
    fn sink_lines_are_json_whatever_the_value() {
        assert_eq!(json_line(br#"{"a":1}"#), r#"{"a":1}"#);
        assert_eq!(json_line(b"plain"), r#""plain""#);
    }
}
