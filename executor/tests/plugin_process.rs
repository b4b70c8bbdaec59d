//! Plugins out of process (docs/plugins-out-of-process.md): a plugin written in Python
//! (examples/python-plugin/dir_plugin.py, no library beside the standard one) runs as a
//! child process speaking the plugin protocol, and the executor's proxies make it an
//! ordinary plugin: the conformance kit passes it with the same checks as the Rust plugin
//! it mirrors (testkit/tests/catches_defects.rs), its defect variants still fail their
//! checks through the protocol, a killed process fails only its instances, and an
//! abandoned instance's process is killed.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use wharf_executor::process::{ProcessSpec, start_all};
use wharf_sdk::{
    CancellationToken, ConfigMap, ConnectorContext, Plugin, PluginKind, SinkRecord, TaskContext,
    TaskFactory, TopicPartition,
};
use wharf_testkit::{Kit, Probe};

/// How long a test waits for what a plugin process does.
const WAIT: Duration = Duration::from_secs(20);

fn plugin_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/python-plugin/dir_plugin.py")
}

fn spec(defect: &str) -> ProcessSpec {
    ProcessSpec {
        name: format!("python-dir-{defect}"),
        command: "python3".into(),
        args: vec![plugin_script().display().to_string()],
        working_dir: None,
        env: [("DIR_PLUGIN_DEFECT".to_owned(), defect.to_owned())].into(),
        describe_timeout: Duration::from_secs(20),
        max_memory_mb: None,
    }
}

fn plugins(defect: &str) -> Vec<Plugin> {
    start_all(vec![spec(defect)]).expect("the python plugin starts and describes itself")
}

fn the(plugins: &[Plugin], name: &str) -> Plugin {
    plugins
        .iter()
        .find(|p| p.name == name)
        .cloned()
        .unwrap_or_else(|| panic!("{name} is offered"))
}

struct DirProbe {
    root: PathBuf,
}

fn dir_of(name: &str, config: &ConfigMap) -> PathBuf {
    Path::new(&config["root"]).join(format!("dir-{name}"))
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
        Ok(listing(&dir_of(connector, config))
            .into_iter()
            .filter(|p| !p.ends_with(".out"))
            .collect())
    }

    async fn pre_existing(&self, _config: &ConfigMap) -> Result<BTreeSet<String>, String> {
        let user = self.root.join("user-data.txt");
        Ok(user
            .exists()
            .then(|| user.display().to_string())
            .into_iter()
            .collect())
    }

    async fn remove(&self, resource: &str) -> Result<bool, String> {
        let path = Path::new(resource);
        let r = if path.is_dir() {
            std::fs::remove_file(path.join("shared"))
        } else {
            std::fs::remove_file(path)
        };
        r.map(|()| true).map_err(|e| e.to_string())
    }

    async fn delivered(
        &self,
        connector: &str,
        config: &ConfigMap,
    ) -> Result<Option<Vec<Vec<u8>>>, String> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(dir_of(connector, config))
            .into_iter()
            .flatten()
            .flatten()
        {
            if e.path().extension().is_some_and(|x| x == "out") {
                let text = std::fs::read(e.path()).map_err(|e| e.to_string())?;
                out.extend(
                    text.split(|b| *b == b'\n')
                        .filter(|l| !l.is_empty())
                        .map(<[u8]>::to_vec),
                );
            }
        }
        Ok(Some(out))
    }
}

fn kit_of(plugin: Plugin) -> (tempfile::TempDir, Kit<DirProbe>) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_path_buf();
    std::fs::write(root.join("user-data.txt"), b"the user's").unwrap();
    let r = root.display().to_string();
    // The plugin records its resources over the protocol (record_resources): the kit
    // fails, rather than skips, a ledger check it could not run.
    let kit = Kit::new(
        plugin,
        move |_name| [("root".to_owned(), r.clone())].into(),
        DirProbe { root },
    )
    .ledger_required();
    (tmp, kit)
}

/// The kit's resource-ledger checks, which a plugin process passes through the
/// protocol's `record_resources` (docs/plugins-out-of-process.md).
const LEDGER_CHECKS: [&str; 3] = [
    "ledger_declares_before_creating",
    "plain_stop_releases_nothing",
    "delete_releases_every_created_entry",
];

fn skipped(report: &wharf_testkit::Report) -> Vec<&'static str> {
    report.skipped.iter().map(|s| s.check).collect()
}

#[tokio::test]
async fn a_python_source_passes_every_check_of_the_kit() {
    let (_tmp, kit) = kit_of(the(&plugins("none"), "dir-source"));
    let report = kit.all().await.unwrap();
    assert!(skipped(&report).is_empty(), "{report}");
    assert_eq!(report.passed, &wharf_testkit::CHECKS[..13], "{report}");
    for check in LEDGER_CHECKS {
        assert!(report.passed.contains(&check), "{report}");
    }
}

/// A plugin process whose ledger is wrong fails the ledger checks through the protocol:
/// one that records nothing, and one that removes its directory without releasing it.
#[tokio::test]
async fn the_ledger_checks_catch_a_plugin_process_that_skips_its_ledger() {
    let (_tmp, kit) = kit_of(the(&plugins("skips-ledger"), "dir-source"));
    let err = kit.ledger_declares_before_creating().await.unwrap_err();
    assert!(err.message.contains("recorded nothing"), "{err}");

    let (_tmp, kit) = kit_of(the(&plugins("releases-nothing"), "dir-source"));
    kit.ledger_declares_before_creating().await.unwrap();
    kit.plain_stop_releases_nothing().await.unwrap();
    let err = kit.delete_releases_every_created_entry().await.unwrap_err();
    assert!(
        err.message.contains("still confirmed after the deletion"),
        "{err}"
    );
}

#[tokio::test]
async fn a_python_sink_passes_every_check_of_the_kit_records_included() {
    let found = plugins("none");
    let sink = the(&found, "dir-sink");
    assert_eq!(sink.kind(), PluginKind::Sink);
    let (_tmp, kit) = kit_of(sink);
    let report = kit.all().await.unwrap();
    assert!(skipped(&report).is_empty(), "{report}");
    assert!(
        report
            .passed
            .contains(&"sink_acknowledges_only_flushed_records"),
        "{report}"
    );
    for check in LEDGER_CHECKS {
        assert!(report.passed.contains(&check), "{report}");
    }
}

#[tokio::test]
async fn the_kits_defect_checks_still_catch_their_defects_through_the_protocol() {
    let (_tmp, kit) = kit_of(the(&plugins("drops-on-plain-stop"), "dir-source"));
    let err = kit.plain_stops_keep_resources().await.unwrap_err();
    assert!(
        err.message.contains("stop(false)") && err.message.contains("removed"),
        "{err}"
    );

    let (_tmp, kit) = kit_of(the(&plugins("second-delete-errors"), "dir-source"));
    kit.delete_removes_everything().await.unwrap();
    let err = kit.repeated_cleanup_is_a_no_op().await.unwrap_err();
    assert!(
        err.message.contains("a second stop(true)") && err.message.contains("is gone"),
        "{err}"
    );

    let (_tmp, kit) = kit_of(the(&plugins("drops-pre-existing"), "dir-source"));
    let err = kit.pre_existing_resources_survive().await.unwrap_err();
    assert!(err.message.contains("user-data.txt"), "{err}");

    let (_tmp, kit) = kit_of(the(&plugins("ignores-incarnation"), "dir-source"));
    let err = kit
        .late_cleanup_leaves_a_re_created_connector()
        .await
        .unwrap_err();
    assert!(
        err.message.contains("late stop(true) of incarnation-1"),
        "{err}"
    );
}

// ---- process failures --------------------------------------------------------------

/// A config under `root`, whose connector directories for the tasks started without a
/// connector instance exist already.
fn config(root: &Path, extra: &[(&str, &str)]) -> ConfigMap {
    for name in ["b", "c", "n", "s"] {
        std::fs::create_dir_all(root.join(format!("dir-{name}"))).unwrap();
    }
    let mut c: ConfigMap = [("root".to_owned(), root.display().to_string())].into();
    c.extend(
        extra
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
    );
    c
}

fn task_ctx(connector: &str, task: u32, connector_config: &ConfigMap) -> TaskContext {
    TaskContext {
        connector: connector.to_owned(),
        task,
        incarnation: "i1".to_owned(),
        cleanup_only: false,
        executor_id: "test".to_owned(),
        connector_config: connector_config.clone(),
        offsets: Default::default(),
        cancel: CancellationToken::new(),
        errant_reporter: None,
        sink_seek: None,
        resources: wharf_sdk::Resources::detached(wharf_sdk::ResourceOwner::Task(0)),
    }
}

fn connector_ctx(connector: &str) -> ConnectorContext {
    ConnectorContext::new(connector, "i1", false, "test", Arc::new(|| {}))
}

/// The pid that wrote `word` for `name` in the events log, once it did.
async fn pid_of(root: &Path, word: &str, name: &str) -> i32 {
    let began = Instant::now();
    loop {
        let log = std::fs::read_to_string(root.join("events.log")).unwrap_or_default();
        if let Some(line) = log
            .lines()
            .find(|l| l.split(' ').nth(1) == Some(word) && l.split(' ').nth(2) == Some(name))
        {
            return line.split(' ').next().unwrap().parse().unwrap();
        }
        assert!(
            began.elapsed() < WAIT,
            "no {word} {name} in the events log:\n{log}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn alive(pid: i32) -> bool {
    // A reaped process has no /proc entry; a zombie is not alive either.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| !s.contains(") Z "))
        .unwrap_or(false)
}

async fn wait_dead(pid: i32) {
    let began = Instant::now();
    while alive(pid) {
        assert!(began.elapsed() < WAIT, "process {pid} is still alive");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn source_task(p: &Plugin) -> Box<dyn wharf_sdk::SourceTask> {
    match &p.task {
        TaskFactory::Source(f) => f(),
        TaskFactory::Sink(_) => panic!("a source"),
    }
}

#[tokio::test]
async fn a_killed_process_fails_its_instances_with_its_exit_status_and_the_next_instance_gets_a_fresh_one()
 {
    let tmp = tempfile::tempdir().unwrap();
    let plugin = the(&plugins("none"), "dir-source");
    let cfg = config(tmp.path(), &[("emit", "1000000")]);
    let mut connector = (plugin.connector)();
    connector
        .start(connector_ctx("k"), cfg.clone())
        .await
        .unwrap();
    let mut task = source_task(&plugin);
    task.start(task_ctx("k", 0, &cfg), ConfigMap::new())
        .await
        .unwrap();
    let records = task.poll().await.unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].value, b"k-0");
    assert_eq!(records[0].source_offset, serde_json::json!({"n": 0}));
    let pid = pid_of(tmp.path(), "task-start", "k/0").await;

    // SAFETY: a signal to the test's own child process.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    let began = Instant::now();
    let err = loop {
        match task.poll().await {
            Ok(_) => {
                assert!(began.elapsed() < WAIT, "poll still answers after SIGKILL");
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Err(e) => break e.to_string(),
        }
    };
    assert!(
        err.contains("plugin process python-dir-none")
            && err.contains(&format!("pid {pid}"))
            && err.contains("signal: 9 (SIGKILL)")
            && err.contains("dir_plugin: pid"),
        "{err}"
    );
    let err = connector.task_configs(1).await.unwrap_err().to_string();
    assert!(err.contains("signal: 9"), "{err}");
    assert!(task.stop_with(false).await.is_err(), "its process is gone");
    drop(task);
    drop(connector);

    let mut fresh = (plugin.connector)();
    fresh.start(connector_ctx("k2"), cfg.clone()).await.unwrap();
    let pid2 = pid_of(tmp.path(), "connector-start", "k2").await;
    assert_ne!(pid, pid2, "a fresh process");
    assert_eq!(fresh.task_configs(2).await.unwrap().len(), 2);
    fresh.stop_with(false).await.unwrap();
}

#[tokio::test]
async fn an_abandoned_instance_whose_poll_never_returns_gets_its_process_killed_and_the_next_one_runs()
 {
    let tmp = tempfile::tempdir().unwrap();
    let plugin = the(&plugins("none"), "dir-source");
    let cfg = config(tmp.path(), &[("poll.blocks", "true")]);
    let mut task = source_task(&plugin);
    task.start(task_ctx("b", 0, &cfg), ConfigMap::new())
        .await
        .unwrap();
    // The host cancels the pending poll (drops its future) before the stop, bounded by
    // the stop timeout; the stop waits behind the poll in the plugin and overruns it.
    let poll = tokio::time::timeout(Duration::from_millis(300), task.poll()).await;
    assert!(poll.is_err(), "the poll never returns");
    let pid = pid_of(tmp.path(), "poll-blocking", "b/0").await;
    let stop = tokio::time::timeout(Duration::from_millis(300), task.stop_with(true)).await;
    assert!(stop.is_err(), "the stop waits behind the blocked poll");
    assert!(alive(pid));
    // The host drops an abandoned instance: its process, with no other instance, dies.
    drop(task);
    wait_dead(pid).await;

    let healthy = config(tmp.path(), &[("emit", "3")]);
    let mut next = source_task(&plugin);
    next.start(task_ctx("c", 0, &healthy), ConfigMap::new())
        .await
        .unwrap();
    assert_eq!(next.poll().await.unwrap().len(), 1);
    next.stop_with(false).await.unwrap();
}

#[tokio::test]
async fn an_abandoned_instance_leaves_its_neighbours_running_until_they_stop() {
    let tmp = tempfile::tempdir().unwrap();
    let plugin = the(&plugins("none"), "dir-source");
    let blocked = config(tmp.path(), &[("poll.blocks", "true")]);
    let healthy = config(tmp.path(), &[("emit", "100")]);
    let mut neighbour = source_task(&plugin);
    neighbour
        .start(task_ctx("n", 0, &healthy), ConfigMap::new())
        .await
        .unwrap();
    let mut stuck = source_task(&plugin);
    stuck
        .start(task_ctx("s", 0, &blocked), ConfigMap::new())
        .await
        .unwrap();
    assert!(
        tokio::time::timeout(Duration::from_millis(300), stuck.poll())
            .await
            .is_err()
    );
    let pid = pid_of(tmp.path(), "poll-blocking", "s/0").await;
    drop(stuck);
    // The neighbour's calls still run in the same process, its stop included.
    assert_eq!(neighbour.poll().await.unwrap().len(), 1);
    assert!(alive(pid));
    neighbour.stop_with(false).await.unwrap();
    drop(neighbour);
    wait_dead(pid).await;
}

#[tokio::test]
async fn a_sink_gets_its_records_through_put_and_flush() {
    let tmp = tempfile::tempdir().unwrap();
    let plugin = the(&plugins("none"), "dir-sink");
    let cfg = config(tmp.path(), &[]);
    let mut connector = (plugin.connector)();
    connector
        .start(connector_ctx("w"), cfg.clone())
        .await
        .unwrap();
    let TaskFactory::Sink(make) = &plugin.task else {
        panic!("a sink")
    };
    let mut task = make();
    task.start(task_ctx("w", 0, &cfg), ConfigMap::new())
        .await
        .unwrap();
    let records = (0..3)
        .map(|i| SinkRecord {
            partition: 0,
            topic: "t".to_owned(),
            key: None,
            value: format!("v{i}").into_bytes(),
            headers: vec![("h".to_owned(), b"x".to_vec())],
            timestamp_ms: Some(1),
            offset: i,
            data: None,
        })
        .collect();
    task.put(records).await.unwrap();
    task.flush(&[(TopicPartition::new("t", 0), 3)].into())
        .await
        .unwrap();
    let out = std::fs::read_to_string(tmp.path().join("dir-w/sink-0.out")).unwrap();
    assert_eq!(out, "v0\nv1\nv2\n");
    task.stop_with(false).await.unwrap();
    connector.stop_with(false).await.unwrap();
}

#[test]
fn a_process_that_cannot_start_or_describe_is_refused_naming_it() {
    let mut missing = spec("none");
    missing.command = "/nonexistent/python".into();
    let err = start_all(vec![missing]).unwrap_err();
    assert!(
        err.contains("plugin process python-dir-none: cannot start /nonexistent/python"),
        "{err}"
    );
    let mut chatty = spec("none");
    chatty.command = "sh".into();
    chatty.args = vec!["-c".into(), "echo hello from a plugin; sleep 5".into()];
    let err = start_all(vec![chatty]).unwrap_err();
    assert!(err.contains("log to stderr"), "{err}");
    let mut silent = spec("none");
    silent.command = "sleep".into();
    silent.args = vec!["5".into()];
    silent.describe_timeout = Duration::from_millis(300);
    let err = start_all(vec![silent]).unwrap_err();
    assert!(err.contains("did not answer within 300 ms"), "{err}");
}

#[test]
fn a_process_over_its_memory_limit_fails_naming_the_error() {
    let mut greedy = spec("none");
    greedy.args = vec!["-c".into(), "x = bytearray(512 * 1024 * 1024)".into()];
    greedy.max_memory_mb = Some(128);
    let err = start_all(vec![greedy]).unwrap_err();
    assert!(
        err.contains("exited (exit status: 1)") && err.contains("MemoryError"),
        "{err}"
    );
}
