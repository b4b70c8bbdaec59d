//! The kit's checks catch the defects they are about: a correct directory-provisioning
//! plugin passes every check, and deliberately wrong ones each fail the check for their
//! defect (real files in a temp dir are the external system).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use wharf_sdk::{
    ConfigDef, ConfigMap, Connector, ConnectorContext, Plugin, PluginResult, SourceRecord,
    SourceTask, TaskContext, TaskFactory,
};
use wharf_testkit::{Kit, Probe};

/// What is wrong with the plugin on purpose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Defect {
    None,
    /// Removes its directory on every stop, deletion or not.
    DropsOnPlainStop,
    /// Its stop(true) fails when the directory is already gone.
    SecondDeleteErrors,
    /// Its deletion also removes the user's file next to its directory.
    DropsPreExisting,
    /// Ignores incarnations: its start takes over a directory another incarnation owns
    /// and its cleanups (connector and tasks) remove whatever is there.
    IgnoresIncarnation,
    /// Only its tasks' cleanup ignores incarnations: a task's stop(true) removes its
    /// file whoever owns the directory.
    TaskIgnoresIncarnation,
    /// Its connector's stop(false) blocks its thread for [`BLOCK`] (std::thread::sleep),
    /// then succeeds.
    BlocksPlainStop,
    /// Its connector's stop(true) panics.
    PanicsOnDelete,
    /// Its connector's stop(true) always fails.
    CleanupFails,
    /// The first two stop(true) calls of its connector instances (of one plugin) fail,
    /// then they succeed: a transient failure the runtime's retries ride out.
    CleanupFailsTwice,
    /// Records nothing in its resource ledger.
    SkipsLedger,
    /// Confirms its directory without recording the intent first.
    ConfirmsWithoutIntent,
    /// Its connector's stop(false) releases its directory in the ledger.
    ReleasesOnPlainStop,
    /// Its connector's stop(true) removes the directory but never releases it.
    KeepsLedgerAfterDelete,
}

/// The directory of a connector as a ledger resource.
fn dir_resource(dir: &Path) -> wharf_sdk::Resource {
    wharf_sdk::Resource::created(
        wharf_sdk::ResourceKind::File,
        dir.display().to_string(),
        wharf_sdk::Locator::default().host("localhost"),
    )
}

/// How long [`Defect::BlocksPlainStop`] blocks.
const BLOCK: Duration = Duration::from_secs(5);

/// Config key: the root directory.
const ROOT: &str = "root";
/// The user's own file under the root, which the plugin reads but must never remove.
const USER_FILE: &str = "user-data.txt";
/// The file in a connector's directory naming the incarnation that made it.
const OWNER_FILE: &str = "owner";

fn dir_of(name: &str, config: &ConfigMap) -> PathBuf {
    Path::new(&config[ROOT]).join(format!("dir-{name}"))
}

/// The incarnation `dir`'s owner file names; `None` when there is none.
fn owner_of(dir: &Path) -> std::io::Result<Option<String>> {
    match std::fs::read_to_string(dir.join(OWNER_FILE)) {
        Ok(owner) => Ok(Some(owner)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

struct DirConnector {
    defect: Defect,
    /// stop(true) calls so far, shared by every connector instance of the plugin.
    deletes: Arc<AtomicUsize>,
    dir: Option<PathBuf>,
    root: Option<PathBuf>,
    incarnation: String,
    resources: Option<wharf_sdk::Resources>,
}

impl DirConnector {
    /// Records `change` of the directory, unless the defect skips the ledger.
    async fn record(&self, change: wharf_sdk::LedgerChange) -> PluginResult<()> {
        let (Some(ledger), Some(dir)) = (&self.resources, &self.dir) else {
            return Ok(());
        };
        if self.defect == Defect::SkipsLedger {
            return Ok(());
        }
        let r = dir_resource(dir);
        match change {
            wharf_sdk::LedgerChange::Intent => ledger.intend(&r).await,
            wharf_sdk::LedgerChange::Confirm => ledger.confirm(&r).await,
            wharf_sdk::LedgerChange::Release => ledger.release(&r).await,
            wharf_sdk::LedgerChange::Absent => ledger.absent(&r).await,
        }
    }
}

#[async_trait]
impl Connector for DirConnector {
    async fn start(&mut self, ctx: ConnectorContext, config: ConfigMap) -> PluginResult<()> {
        let dir = dir_of(&ctx.connector, &config);
        self.root = Some(PathBuf::from(&config[ROOT]));
        self.dir = Some(dir.clone());
        self.incarnation = ctx.incarnation.clone();
        self.resources = Some(ctx.resources().clone());
        if !ctx.cleanup_only {
            if let Some(owner) = owner_of(&dir)?
                && owner != ctx.incarnation
                && self.defect != Defect::IgnoresIncarnation
            {
                return Err(format!("{} is owned by {owner}", dir.display()).into());
            }
            if self.defect != Defect::ConfirmsWithoutIntent {
                self.record(wharf_sdk::LedgerChange::Intent).await?;
            }
            std::fs::create_dir_all(&dir)?;
            std::fs::write(dir.join(OWNER_FILE), &ctx.incarnation)?;
            std::fs::write(dir.join("shared"), b"")?;
            self.record(wharf_sdk::LedgerChange::Confirm).await?;
        }
        Ok(())
    }

    async fn task_configs(&mut self, max_tasks: u32) -> PluginResult<Vec<ConfigMap>> {
        Ok((0..max_tasks).map(|_| ConfigMap::new()).collect())
    }

    async fn stop_with(&mut self, deleted: bool) -> PluginResult<()> {
        let dir = self.dir.clone().ok_or("not started")?;
        if deleted
            && self.defect == Defect::CleanupFailsTwice
            && self.deletes.fetch_add(1, Ordering::SeqCst) < 2
        {
            return Err("the directory is locked by a backup; try again".into());
        }
        if deleted && self.defect == Defect::CleanupFails {
            return Err(format!("cannot remove {}: permission denied", dir.display()).into());
        }
        if deleted && self.defect == Defect::PanicsOnDelete {
            panic!("cleanup of {} went wrong", dir.display());
        }
        if !deleted && self.defect == Defect::BlocksPlainStop {
            std::thread::sleep(BLOCK);
            return Ok(());
        }
        if !deleted && self.defect == Defect::ReleasesOnPlainStop {
            return self.record(wharf_sdk::LedgerChange::Release).await;
        }
        if !deleted && self.defect != Defect::DropsOnPlainStop {
            return Ok(());
        }
        let keeps = self.defect == Defect::KeepsLedgerAfterDelete;
        match owner_of(&dir)? {
            Some(owner)
                if owner == self.incarnation || self.defect == Defect::IgnoresIncarnation =>
            {
                std::fs::remove_dir_all(&dir)?;
                if deleted && !keeps {
                    self.record(wharf_sdk::LedgerChange::Release).await?;
                }
            }
            // Another incarnation's directory: leave it.
            Some(_) => {}
            None if !dir.exists() && self.defect == Defect::SecondDeleteErrors => {
                return Err(format!("{} is gone", dir.display()).into());
            }
            None if !dir.exists() && deleted && !keeps => {
                self.record(wharf_sdk::LedgerChange::Absent).await?;
            }
            None => {}
        }
        if deleted && self.defect == Defect::DropsPreExisting {
            let root = self.root.clone().ok_or("not started")?;
            let _ = std::fs::remove_file(root.join(USER_FILE));
        }
        Ok(())
    }
}

/// Tasks provision a per-task file in the connector's directory.
struct DirTask {
    defect: Defect,
    file: Option<PathBuf>,
    incarnation: String,
}

#[async_trait]
impl SourceTask for DirTask {
    async fn start(&mut self, ctx: TaskContext, _config: ConfigMap) -> PluginResult<()> {
        let file = dir_of(&ctx.connector, &ctx.connector_config).join(format!("task-{}", ctx.task));
        if !ctx.cleanup_only {
            std::fs::write(&file, b"")?;
        }
        self.file = Some(file);
        self.incarnation = ctx.incarnation.clone();
        Ok(())
    }

    async fn poll(&mut self) -> PluginResult<Vec<SourceRecord>> {
        Ok(Vec::new())
    }

    async fn stop_with(&mut self, deleted: bool) -> PluginResult<()> {
        if deleted {
            let file = self.file.clone().ok_or("not started")?;
            let ignores = matches!(
                self.defect,
                Defect::IgnoresIncarnation | Defect::TaskIgnoresIncarnation
            );
            let dir = file.parent().ok_or("no directory")?;
            if !ignores && owner_of(dir)?.is_some_and(|o| o != self.incarnation) {
                // The directory is another incarnation's: so is the file.
                return Ok(());
            }
            match std::fs::remove_file(&file) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }
}

fn plugin(defect: Defect) -> Plugin {
    plugin_counting(defect, Arc::default())
}

/// [`plugin`] whose connector instances count their stop(true) calls in `deletes`.
fn plugin_counting(defect: Defect, deletes: Arc<AtomicUsize>) -> Plugin {
    Plugin {
        name: "dir-source".to_owned(),
        version: "0".to_owned(),
        config_def: ConfigDef::new(),
        connector: Arc::new(move || {
            Box::new(DirConnector {
                defect,
                deletes: deletes.clone(),
                dir: None,
                root: None,
                incarnation: String::new(),
                resources: None,
            }) as Box<dyn Connector>
        }),
        task: TaskFactory::Source(Arc::new(move || {
            Box::new(DirTask {
                defect,
                file: None,
                incarnation: String::new(),
            }) as Box<dyn SourceTask>
        })),
    }
}

struct DirProbe {
    root: PathBuf,
}

fn listing(dir: &Path) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    if dir.exists() {
        out.insert(dir.display().to_string());
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            out.insert(e.path().display().to_string());
        }
    }
    out
}

#[async_trait]
impl Probe for DirProbe {
    async fn owned(&self, connector: &str, config: &ConfigMap) -> Result<BTreeSet<String>, String> {
        Ok(listing(&dir_of(connector, config)))
    }

    async fn pre_existing(&self, _config: &ConfigMap) -> Result<BTreeSet<String>, String> {
        let user = self.root.join(USER_FILE);
        Ok(user
            .exists()
            .then(|| user.display().to_string())
            .into_iter()
            .collect())
    }

    async fn remove(&self, resource: &str) -> Result<bool, String> {
        let path = Path::new(resource);
        // Remove one file (or the directory's content) to leave a half-made state.
        let r = if path.is_dir() {
            std::fs::remove_file(path.join("shared"))
        } else {
            std::fs::remove_file(path)
        };
        r.map(|()| true).map_err(|e| e.to_string())
    }
}

fn kit(defect: Defect) -> (tempfile::TempDir, Kit<DirProbe>) {
    kit_of(plugin(defect))
}

fn kit_of(plugin: Plugin) -> (tempfile::TempDir, Kit<DirProbe>) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_path_buf();
    std::fs::write(root.join(USER_FILE), b"the user's").unwrap();
    let r = root.display().to_string();
    let kit = Kit::new(
        plugin,
        move |_name| [(ROOT.to_owned(), r.clone())].into(),
        DirProbe { root },
    );
    (tmp, kit)
}

#[tokio::test]
async fn a_correct_plugin_passes_every_check() {
    let (_tmp, kit) = kit(Defect::None);
    let report = kit.all().await.unwrap();
    assert!(report.skipped.is_empty(), "{report}");
    assert_eq!(report.passed, &wharf_testkit::CHECKS[..13]);
}

#[tokio::test]
async fn a_plugin_that_skips_the_ledger_fails_every_ledger_check_when_it_is_required() {
    let (_tmp, kit) = kit(Defect::SkipsLedger);
    let kit = kit.ledger_required();
    for (check, outcome) in [
        (
            "ledger_declares_before_creating",
            kit.ledger_declares_before_creating().await,
        ),
        (
            "plain_stop_releases_nothing",
            kit.plain_stop_releases_nothing().await,
        ),
        (
            "delete_releases_every_created_entry",
            kit.delete_releases_every_created_entry().await,
        ),
    ] {
        let err = outcome.unwrap_err();
        assert_eq!(err.check, check);
        assert!(!err.checked_nothing, "{err}");
        assert!(
            err.message
                .contains("recorded nothing in its resource ledger"),
            "{err}"
        );
    }
}

#[tokio::test]
async fn a_plugin_that_skips_the_ledger_is_skipped_by_default_and_said_so() {
    let (_tmp, kit) = kit(Defect::SkipsLedger);
    let err = kit.ledger_declares_before_creating().await.unwrap_err();
    assert!(err.checked_nothing, "{err}");
}

#[tokio::test]
async fn a_confirmation_without_an_intent_fails_ledger_declares_before_creating() {
    let (_tmp, kit) = kit(Defect::ConfirmsWithoutIntent);
    let err = kit.ledger_declares_before_creating().await.unwrap_err();
    assert_eq!(err.check, "ledger_declares_before_creating");
    assert!(
        err.message.contains("without an intent recorded before it"),
        "{err}"
    );
}

#[tokio::test]
async fn a_release_on_stop_false_fails_plain_stop_releases_nothing() {
    let (_tmp, kit) = kit(Defect::ReleasesOnPlainStop);
    let err = kit.plain_stop_releases_nothing().await.unwrap_err();
    assert_eq!(err.check, "plain_stop_releases_nothing");
    assert!(
        err.message.contains("stop(false) recorded release of file"),
        "{err}"
    );
}

/// A plain stop that removes a resource without a word in the ledger: the ledger looks
/// right, the probe shows it gone.
#[tokio::test]
async fn a_removal_on_stop_false_without_a_release_fails_plain_stop_releases_nothing() {
    let (_tmp, kit) = kit(Defect::DropsOnPlainStop);
    let err = kit.plain_stop_releases_nothing().await.unwrap_err();
    assert_eq!(err.check, "plain_stop_releases_nothing");
    assert!(
        err.message
            .starts_with("stop(false) on every task and the connector removed")
            && err
                .message
                .contains("only a deletion (stop(true)) may remove resources"),
        "{err}"
    );
}

#[tokio::test]
async fn a_delete_that_never_releases_fails_delete_releases_every_created_entry() {
    let (_tmp, kit) = kit(Defect::KeepsLedgerAfterDelete);
    let err = kit.delete_releases_every_created_entry().await.unwrap_err();
    assert_eq!(err.check, "delete_releases_every_created_entry");
    assert!(
        err.message
            .contains("is still confirmed after the deletion"),
        "{err}"
    );
}

#[tokio::test]
async fn a_plugin_that_drops_on_stop_false_fails_plain_stops_keep_resources() {
    let (_tmp, kit) = kit(Defect::DropsOnPlainStop);
    let err = kit.plain_stops_keep_resources().await.unwrap_err();
    assert_eq!(err.check, "plain_stops_keep_resources");
    assert!(
        err.message.contains("stop(false)") && err.message.contains("removed"),
        "{err}"
    );
}

#[tokio::test]
async fn a_plugin_whose_second_stop_true_errors_fails_repeated_cleanup_is_a_no_op() {
    let (_tmp, kit) = kit(Defect::SecondDeleteErrors);
    kit.delete_removes_everything().await.unwrap();
    let err = kit.repeated_cleanup_is_a_no_op().await.unwrap_err();
    assert_eq!(err.check, "repeated_cleanup_is_a_no_op");
    assert!(
        err.message.contains("a second stop(true)") && err.message.contains("is gone"),
        "{err}"
    );
}

#[tokio::test]
async fn a_plugin_that_drops_a_pre_existing_resource_fails_pre_existing_resources_survive() {
    let (_tmp, kit) = kit(Defect::DropsPreExisting);
    let err = kit.pre_existing_resources_survive().await.unwrap_err();
    assert_eq!(err.check, "pre_existing_resources_survive");
    assert!(err.message.contains(USER_FILE), "{err}");
}

#[tokio::test]
async fn a_plugin_that_ignores_incarnations_fails_both_incarnation_checks() {
    let (_tmp, kit) = kit(Defect::IgnoresIncarnation);
    let err = kit
        .late_cleanup_leaves_a_re_created_connector()
        .await
        .unwrap_err();
    assert_eq!(err.check, "late_cleanup_leaves_a_re_created_connector");
    assert!(
        err.message.contains("late stop(true) of incarnation-1")
            && err.message.contains("which incarnation-2")
            && err.message.contains("step 3"),
        "{err}"
    );
    let err = kit
        .start_refuses_what_another_incarnation_kept()
        .await
        .unwrap_err();
    assert_eq!(err.check, "start_refuses_what_another_incarnation_kept");
    assert!(
        err.message.contains("started over") && err.message.contains("step 3"),
        "{err}"
    );
}

#[tokio::test]
async fn a_task_cleanup_that_ignores_incarnations_fails_late_cleanup_leaves_a_re_created_connector()
{
    let (_tmp, kit) = kit(Defect::TaskIgnoresIncarnation);
    let err = kit
        .late_cleanup_leaves_a_re_created_connector()
        .await
        .unwrap_err();
    assert_eq!(err.check, "late_cleanup_leaves_a_re_created_connector");
    assert!(
        err.message.contains("incarnation-1's task") && err.message.contains("task-0"),
        "{err}"
    );
    // Its start refuses, which is all the other check asks.
    kit.start_refuses_what_another_incarnation_kept()
        .await
        .unwrap();
}

// A current-thread runtime, as in the guide: before, the kit's timer ran on the thread
// the plugin blocked, so it could not fire (a 35 s stop passed a 30 s bound).
#[tokio::test]
async fn a_stop_false_that_blocks_its_thread_fails_at_the_stop_bound() {
    let (_tmp, kit) = kit(Defect::BlocksPlainStop);
    let kit = kit.stop_timeout(Duration::from_millis(500));
    let began = Instant::now();
    let err = kit.plain_stops_keep_resources().await.unwrap_err();
    assert!(
        began.elapsed() < BLOCK,
        "the check waited for the blocked stop ({:?}): {err}",
        began.elapsed()
    );
    assert_eq!(err.check, "plain_stops_keep_resources");
    assert!(
        err.message
            .contains("connector kit-dir-source-plain-a stop(false) did not return within 500 ms")
            && err.message.contains("--graceful-timeout-ms")
            && err.message.contains("spawn_blocking"),
        "{err}"
    );
}

// Before, the panic unwound through the kit and the test died with a backtrace through
// Kit::stop instead of a named check.
#[tokio::test]
async fn a_plugin_that_panics_fails_the_check_naming_the_call_and_the_panic() {
    let (_tmp, kit) = kit(Defect::PanicsOnDelete);
    let err = kit.delete_removes_everything().await.unwrap_err();
    assert_eq!(err.check, "delete_removes_everything");
    assert!(
        err.message.contains(
            "connector kit-dir-source-delete-a stop(true) failed: plugin panicked: cleanup of "
        ) && err.message.contains("went wrong"),
        "{err}"
    );
}

#[test]
fn the_default_bounds_are_the_runtimes() {
    let (_tmp, kit) = kit(Defect::None);
    let b = kit.bounds();
    assert_eq!(
        b.stop,
        Duration::from_secs(10),
        "--graceful-timeout-ms default"
    );
    assert_eq!(
        b.cleanup,
        Duration::from_secs(30),
        "cleanup.timeout.ms default"
    );
    assert_eq!(
        b.call,
        Duration::from_secs(wharf_testkit::CALL_TIMEOUT_SECS)
    );
}

// ---- a sink: records move through put and flush ---------------------------------

/// A sink writing one line per record to `dir-<connector>/records`; with `acks_early`
/// its `flush` returns before writing (the lines would only be written at stop), which
/// is a sink acknowledging records the external system does not hold.
struct DirSink {
    acks_early: bool,
    file: Option<PathBuf>,
    buffer: Vec<Vec<u8>>,
}

impl DirSink {
    fn write(&mut self) -> std::io::Result<()> {
        use std::io::Write;
        let Some(path) = &self.file else {
            return Ok(());
        };
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        for v in self.buffer.drain(..) {
            f.write_all(&v)?;
            f.write_all(b"\n")?;
        }
        f.sync_all()
    }
}

#[async_trait]
impl wharf_sdk::SinkTask for DirSink {
    async fn start(&mut self, ctx: TaskContext, _config: ConfigMap) -> PluginResult<()> {
        self.file = Some(dir_of(&ctx.connector, &ctx.connector_config).join("records"));
        Ok(())
    }

    async fn put(&mut self, records: Vec<wharf_sdk::SinkRecord>) -> PluginResult<()> {
        self.buffer.extend(records.into_iter().map(|r| r.value));
        Ok(())
    }

    async fn flush(
        &mut self,
        _offsets: &std::collections::BTreeMap<wharf_sdk::TopicPartition, u64>,
    ) -> PluginResult<()> {
        if !self.acks_early {
            self.write()?;
        }
        Ok(())
    }

    async fn stop_with(&mut self, deleted: bool) -> PluginResult<()> {
        if !deleted {
            self.write()?;
        }
        Ok(())
    }
}

fn sink_plugin(acks_early: bool, defect: Defect) -> Plugin {
    let deletes = Arc::new(AtomicUsize::new(0));
    Plugin {
        name: "dir-sink".to_owned(),
        version: "0".to_owned(),
        config_def: ConfigDef::new(),
        connector: Arc::new(move || {
            Box::new(DirConnector {
                defect,
                deletes: deletes.clone(),
                dir: None,
                root: None,
                incarnation: String::new(),
                resources: None,
            }) as Box<dyn Connector>
        }),
        task: TaskFactory::Sink(Arc::new(move || {
            Box::new(DirSink {
                acks_early,
                file: None,
                buffer: Vec::new(),
            }) as Box<dyn wharf_sdk::SinkTask>
        })),
    }
}

/// [`DirProbe`] that also reads the records file.
struct DirSinkProbe(DirProbe);

#[async_trait]
impl Probe for DirSinkProbe {
    async fn owned(&self, connector: &str, config: &ConfigMap) -> Result<BTreeSet<String>, String> {
        self.0.owned(connector, config).await
    }

    async fn pre_existing(&self, config: &ConfigMap) -> Result<BTreeSet<String>, String> {
        self.0.pre_existing(config).await
    }

    async fn remove(&self, resource: &str) -> Result<bool, String> {
        self.0.remove(resource).await
    }

    async fn delivered(
        &self,
        connector: &str,
        config: &ConfigMap,
    ) -> Result<Option<Vec<Vec<u8>>>, String> {
        let text = match std::fs::read(dir_of(connector, config).join("records")) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e.to_string()),
        };
        Ok(Some(
            text.split(|b| *b == b'\n')
                .filter(|l| !l.is_empty())
                .map(<[u8]>::to_vec)
                .collect(),
        ))
    }
}

fn sink_kit(acks_early: bool) -> (tempfile::TempDir, Kit<DirSinkProbe>) {
    sink_kit_with(acks_early, Defect::None)
}

fn sink_kit_with(acks_early: bool, defect: Defect) -> (tempfile::TempDir, Kit<DirSinkProbe>) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_path_buf();
    std::fs::write(root.join(USER_FILE), b"the user's").unwrap();
    let r = root.display().to_string();
    let kit = Kit::new(
        sink_plugin(acks_early, defect),
        move |_name| [(ROOT.to_owned(), r.clone())].into(),
        DirSinkProbe(DirProbe { root }),
    );
    (tmp, kit)
}

#[tokio::test]
async fn a_correct_sink_passes_every_check_including_put_and_flush() {
    let (_tmp, kit) = sink_kit(false);
    let report = kit.all().await.unwrap();
    assert!(report.skipped.is_empty(), "{report}");
    assert_eq!(report.passed, wharf_testkit::CHECKS);
}

#[tokio::test]
async fn a_sink_that_acknowledges_before_writing_fails_sink_acknowledges_only_flushed_records() {
    let (_tmp, kit) = sink_kit(true);
    let err = kit
        .sink_acknowledges_only_flushed_records()
        .await
        .unwrap_err();
    assert_eq!(err.check, "sink_acknowledges_only_flushed_records");
    assert!(
        err.message.contains("flush returned") && err.message.contains("record-0"),
        "{err}"
    );
}

#[tokio::test]
async fn the_put_and_flush_check_refuses_a_source_plugin() {
    let (_tmp, kit) = kit(Defect::None);
    let err = kit
        .sink_acknowledges_only_flushed_records()
        .await
        .unwrap_err();
    assert!(err.message.contains("not a sink"), "{err}");
}

// Before, Kit::all ran the sink check first, which ends with a deletion: every cleanup bug
// of a sink read as [sink_acknowledges_only_flushed_records].
#[tokio::test]
async fn a_sink_whose_cleanup_fails_is_reported_by_the_cleanup_check() {
    let (_tmp, kit) = sink_kit_with(false, Defect::CleanupFails);
    let err = kit.all().await.unwrap_err();
    assert_eq!(err.check, "delete_removes_everything", "{err}");
    assert!(err.message.contains("permission denied"), "{err}");
    let err = kit
        .sink_acknowledges_only_flushed_records()
        .await
        .unwrap_err();
    assert_eq!(err.check, "sink_acknowledges_only_flushed_records");
    assert!(
        err.message
            .starts_with("the deletion at the end of this check failed: ")
            && err.message.contains("see check delete_removes_everything")
            && err.message.contains("permission denied"),
        "{err}"
    );
}

// The runtime retries a failed cleanup on fresh cleanup-only instances (cleanup.max.attempts,
// docs/lifecycle.md "Deletion"): a cleanup that fails twice then succeeds deletes the
// connector there, so the kit passes it too (before, it failed at the first error).
#[tokio::test]
async fn a_cleanup_that_fails_twice_then_succeeds_passes_as_the_runtime_retries_it() {
    let deletes = Arc::new(AtomicUsize::new(0));
    let (_tmp, kit) = kit_of(plugin_counting(Defect::CleanupFailsTwice, deletes.clone()));
    kit.delete_removes_everything().await.unwrap();
    assert_eq!(
        deletes.load(Ordering::SeqCst),
        3,
        "two failed attempts, then one on a fresh cleanup-only instance that succeeded"
    );
}

#[tokio::test]
async fn with_one_cleanup_attempt_a_transient_failure_fails_the_check() {
    let (_tmp, kit) = kit(Defect::CleanupFailsTwice);
    let err = kit
        .cleanup_attempts(1)
        .delete_removes_everything()
        .await
        .unwrap_err();
    assert_eq!(err.check, "delete_removes_everything");
    assert_eq!(
        err.message,
        "connector kit-dir-source-delete-a stop(true) failed: the directory is locked by a backup; try again"
    );
}

#[tokio::test]
async fn a_cleanup_that_always_fails_fails_after_every_attempt() {
    let (_tmp, kit) = kit(Defect::CleanupFails);
    let err = kit
        .cleanup_attempts(3)
        .delete_removes_everything()
        .await
        .unwrap_err();
    assert!(
        err.message
            .starts_with("connector kit-dir-source-delete-a stop(true) failed: cannot remove")
            && err.message.contains("every one of 3 attempts failed"),
        "{err}"
    );
}

/// [`DirProbe`] with only `owned`: no pre-existing resource, a `remove` that removes
/// nothing (the trait's defaults).
struct BareProbe(DirProbe);

#[async_trait]
impl Probe for BareProbe {
    async fn owned(&self, connector: &str, config: &ConfigMap) -> Result<BTreeSet<String>, String> {
        self.0.owned(connector, config).await
    }
}

fn bare_kit() -> (tempfile::TempDir, Kit<BareProbe>) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_path_buf();
    let r = root.display().to_string();
    let kit = Kit::new(
        plugin(Defect::None),
        move |_name| [(ROOT.to_owned(), r.clone())].into(),
        BareProbe(DirProbe { root }),
    );
    (tmp, kit)
}

// Before, both passed while comparing an empty set with an empty set, or cleaning up a
// state that was not half-made.
#[tokio::test]
async fn checks_that_cannot_check_anything_say_so_and_all_reports_them_skipped() {
    let (tmp, kit) = bare_kit();
    let err = kit.pre_existing_resources_survive().await.unwrap_err();
    assert!(err.checked_nothing, "{err}");
    assert!(
        err.message
            .starts_with("checked nothing: Probe::pre_existing lists no resource"),
        "{err}"
    );
    let err = kit.cleanup_after_half_start_succeeds().await.unwrap_err();
    assert!(err.checked_nothing, "{err}");
    assert!(
        err.message
            .starts_with("checked nothing: Probe::remove removed none of")
            && err.message.contains("implement Probe::remove"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_dir(tmp.path()).unwrap().count(),
        0,
        "the skipped check deleted its connector"
    );
    let report = kit.all().await.unwrap();
    let skipped: Vec<_> = report.skipped.iter().map(|s| s.check).collect();
    assert_eq!(
        skipped,
        [
            "cleanup_after_half_start_succeeds",
            "pre_existing_resources_survive"
        ]
    );
    assert_eq!(report.passed.len(), 11, "{report}");
}
