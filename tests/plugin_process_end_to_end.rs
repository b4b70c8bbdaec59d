//! Plugins out of process, end to end (docs/plugins-out-of-process.md): a real control
//! plane and a real `wharf-executor` started with `--plugin-processes`, running the
//! Python plugin of examples/python-plugin (no library beside Python's own) as its
//! child process. Records flow from its source through the record log to its sink; the
//! plugin hears `stop(connector_deleted = true)` exactly on deletion; a kill -9 of one
//! plugin process fails only that process's instances; a plugin whose poll never returns
//! is killed at the stop timeout while the executor stays healthy.
//!
//! Build first: `cargo build -p wharf-control-plane -p wharf-executor-stock`.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use wharf_harness::cluster::{CONVERGE, NOT_FOUND, TestCluster};
use wharf_harness::wait_until;

fn plugin_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/python-plugin/dir_plugin.py")
}

/// Writes a `--plugin-processes` file with one Python process per prefix (its plugins are
/// `<prefix>dir-source` and `<prefix>dir-sink`) and returns the executor flags.
fn plugin_flags(dir: &Path, prefixes: &[&str]) -> Vec<String> {
    let mut text = String::new();
    for p in prefixes {
        text.push_str(&format!(
            "[[process]]\nname = \"python-{p}\"\ncommand = \"python3\"\nargs = [{:?}]\nenv = {{ DIR_PLUGIN_PREFIX = \"{p}\" }}\n\n",
            plugin_script().display().to_string()
        ));
    }
    let path = dir.join("plugin-processes.toml");
    std::fs::write(&path, text).unwrap();
    vec!["--plugin-processes".into(), path.display().to_string()]
}

/// A cluster of one executor offering the Python plugins of `prefixes`, and the plugins'
/// root directory.
async fn cluster(prefixes: &[&str]) -> (TestCluster, PathBuf) {
    let mut c = TestCluster::start(0).await;
    let root = c.dir.path().join("plugin-root");
    std::fs::create_dir_all(&root).unwrap();
    let flags = plugin_flags(c.dir.path(), prefixes);
    c.add_executor_with(0, flags).await;
    c.wait_alive(1).await;
    (c, root)
}

fn create(c: &TestCluster, name: &str, config: Value) {
    let r = c.call("CreateConnector", json!({ "name": name, "config": config }));
    assert_eq!(r.code, 0, "{name}: {}", r.err);
}

/// The events log lines (`<pid> <call> <name> ...`) about `name`.
fn events(root: &Path, name: &str) -> Vec<Vec<String>> {
    std::fs::read_to_string(root.join("events.log"))
        .unwrap_or_default()
        .lines()
        .map(|l| l.split(' ').map(str::to_owned).collect::<Vec<_>>())
        .filter(|w| w.get(2).is_some_and(|n| n == name))
        .collect()
}

/// Waits for an event `call` about `name`; returns the pid that wrote it.
async fn wait_event(root: &Path, call: &str, name: &str) -> i32 {
    wait_until(
        &format!("{call} {name} in the events log"),
        CONVERGE,
        || {
            let found = events(root, name)
                .into_iter()
                .find(|w| w[1] == call)
                .map(|w| w[0].parse::<i32>().unwrap());
            async move { found }
        },
    )
    .await
}

fn stops(root: &Path, name: &str, call: &str) -> Vec<String> {
    events(root, name)
        .into_iter()
        .filter(|w| w[1] == call)
        .map(|w| w[3].clone())
        .collect()
}

fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| !s.contains(") Z "))
        .unwrap_or(false)
}

/// The highest committed `n` of connector `name`'s offsets.
fn committed_n(c: &TestCluster, name: &str) -> Option<u64> {
    let r = c.call("GetOffsets", json!({ "name": name }));
    r.body["offsets"]
        .as_array()?
        .iter()
        .filter_map(|o| {
            let offset: Value = serde_json::from_str(o["offset"].as_str()?).ok()?;
            offset["n"].as_u64()
        })
        .max()
}

async fn wait_deleted(c: &TestCluster, name: &str) {
    wait_until(&format!("{name} deleted"), CONVERGE, || async {
        (c.call("GetConnector", json!({ "name": name })).code == NOT_FOUND).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_plugin_moves_records_and_hears_stop_true_exactly_on_deletion() {
    let (c, root) = cluster(&[""]).await;
    let rs = root.display().to_string();
    // The plugin's own check (its validate, run in its process) refuses a bad root.
    let r = c.call(
        "CreateConnector",
        json!({ "name": "bad", "config": { "connector.class": "dir-source", "tasks.max": "1", "root": root.join("missing").display().to_string() } }),
    );
    assert_eq!(r.code, 3, "INVALID_ARGUMENT: {}", r.err);
    assert!(
        r.err.contains("root") && r.err.contains("is not an existing directory"),
        "{}",
        r.err
    );
    create(
        &c,
        "py",
        json!({ "connector.class": "dir-source", "tasks.max": "1", "root": rs, "emit": "5", "topic": "py-topic" }),
    );
    create(
        &c,
        "py-sink",
        json!({ "connector.class": "dir-sink", "tasks.max": "1", "root": rs, "topics": "py-topic" }),
    );
    c.wait_state("py", "STATE_RUNNING", "STATE_RUNNING", 1)
        .await;
    c.wait_state("py-sink", "STATE_RUNNING", "STATE_RUNNING", 1)
        .await;

    // Python source -> record log -> Python sink.
    let out = root.join("dir-py-sink/sink-0.out");
    wait_until("the sink wrote the five records", CONVERGE, || {
        let text = std::fs::read_to_string(&out).unwrap_or_default();
        async move { (text.lines().count() >= 5).then_some(text) }
    })
    .await;
    let text = std::fs::read_to_string(&out).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines.sort_unstable();
    lines.dedup();
    assert_eq!(lines, ["py-0", "py-1", "py-2", "py-3", "py-4"]);
    wait_until("offset 4 committed", CONVERGE, || {
        let n = committed_n(&c, "py");
        async move { (n == Some(4)).then_some(()) }
    })
    .await;

    // Pause and resume: stop(false), the directory stays.
    let r = c.call("PauseConnector", json!({ "name": "py" }));
    assert_eq!(r.code, 0, "{}", r.err);
    c.wait_state("py", "STATE_PAUSED", "STATE_PAUSED", 1).await;
    let r = c.call("ResumeConnector", json!({ "name": "py" }));
    assert_eq!(r.code, 0, "{}", r.err);
    c.wait_state("py", "STATE_RUNNING", "STATE_RUNNING", 1)
        .await;
    let r = c.call(
        "RestartConnector",
        json!({ "name": "py", "include_tasks": true }),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    wait_until("the restart's stops", CONVERGE, || {
        let n = stops(&root, "py/0", "task-stop").len();
        async move { (n >= 1).then_some(()) }
    })
    .await;
    c.wait_state("py", "STATE_RUNNING", "STATE_RUNNING", 1)
        .await;
    assert!(root.join("dir-py").exists());
    assert!(
        stops(&root, "py/0", "task-stop")
            .iter()
            .chain(&stops(&root, "py", "connector-stop"))
            .all(|s| s == "deleted=false")
    );

    // The plugin recorded its resources over the protocol: the control plane's ledger
    // holds the directory and the task's file, created and confirmed.
    let r = c.call("GetConnectorResources", json!({ "name": "py" }));
    assert_eq!(r.code, 0, "{}", r.err);
    let ledger: Vec<(String, String, String)> = r.body["entries"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|e| {
            let res = &e["resource"];
            (
                res["kind"].as_str().unwrap_or_default().to_owned(),
                res["name"].as_str().unwrap_or_default().to_owned(),
                e["state"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    for (kind, name) in [("directory", "dir-py"), ("file", "task-0")] {
        assert!(
            ledger.contains(&(kind.to_owned(), name.to_owned(), "confirmed".to_owned())),
            "{ledger:?}"
        );
    }

    // Delete: exactly one stop(true) for the task and the connector, the last ones (the
    // deletion finishes only once the plugin released what it recorded).
    let r = c.call("DeleteConnector", json!({ "name": "py" }));
    assert_eq!(r.code, 0, "{}", r.err);
    wait_deleted(&c, "py").await;
    for (name, call) in [("py/0", "task-stop"), ("py", "connector-stop")] {
        let s = stops(&root, name, call);
        assert_eq!(
            s.iter().filter(|s| *s == "deleted=true").count(),
            1,
            "{name}: {s:?}"
        );
        assert_eq!(
            s.last().map(String::as_str),
            Some("deleted=true"),
            "{name}: {s:?}"
        );
    }
    assert!(!root.join("dir-py").exists(), "the deletion removed it");
    // The sink was not deleted: it heard no stop(true).
    assert!(
        stops(&root, "py-sink", "connector-stop")
            .iter()
            .all(|s| s == "deleted=false")
    );
    assert!(root.join("dir-py-sink").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_plugin_process_fails_only_its_instances() {
    let (c, root) = cluster(&["a-", "b-"]).await;
    let rs = root.display().to_string();
    for (name, class) in [("ka", "a-dir-source"), ("kb", "b-dir-source")] {
        create(
            &c,
            name,
            json!({ "connector.class": class, "tasks.max": "1", "root": rs, "emit": "100000000" }),
        );
        c.wait_state(name, "STATE_RUNNING", "STATE_RUNNING", 1)
            .await;
    }
    let pid_a = wait_event(&root, "task-start", "ka/0").await;
    let pid_b = wait_event(&root, "task-start", "kb/0").await;
    assert_ne!(pid_a, pid_b);

    // SAFETY: a signal to a plugin process this test's executor started.
    assert_eq!(unsafe { libc::kill(pid_a, libc::SIGKILL) }, 0);
    let failed = wait_until("ka's task FAILED", CONVERGE, || {
        let s = c.status("ka");
        async move {
            let t = s?["tasks"][0]["status"].clone();
            (t["state"] == "STATE_FAILED").then_some(t)
        }
    })
    .await;
    let error = failed["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("plugin process python-a-")
            && error.contains(&format!("pid {pid_a}"))
            && error.contains("signal: 9 (SIGKILL)")
            && error.contains("dir_plugin: pid"),
        "{error}"
    );
    // Its connector instance, idle in the same process, fails at once too.
    let connector = wait_until("ka's connector FAILED", CONVERGE, || {
        let s = c.status("ka");
        async move {
            let s = s?["connector"].clone();
            (s["state"] == "STATE_FAILED").then_some(s)
        }
    })
    .await;
    let error = connector["error"].as_str().unwrap_or_default();
    assert!(
        error.contains(&format!("pid {pid_a}")) && error.contains("signal: 9 (SIGKILL)"),
        "{error}"
    );
    // The other process's connector keeps running and committing.
    assert!(alive(pid_b));
    let before = committed_n(&c, "kb").unwrap_or(0);
    wait_until("kb keeps committing", CONVERGE, || {
        let n = committed_n(&c, "kb").unwrap_or(0);
        async move { (n > before + 5).then_some(()) }
    })
    .await;
    let s = c.status("kb").unwrap();
    assert_eq!(s["tasks"][0]["status"]["state"], "STATE_RUNNING");
    assert_eq!(s["connector"]["state"], "STATE_RUNNING");
    c.wait_alive(1).await;

    // A restart runs ka in a fresh process.
    let r = c.call(
        "RestartConnector",
        json!({ "name": "ka", "include_tasks": true }),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    wait_until("ka runs in a fresh process", CONVERGE, || {
        let fresh = events(&root, "ka/0")
            .into_iter()
            .filter(|w| w[1] == "task-start")
            .any(|w| w[0] != pid_a.to_string());
        let running = c.status("ka").is_some_and(|s| {
            s["tasks"][0]["status"]["state"] == "STATE_RUNNING"
                && s["connector"]["state"] == "STATE_RUNNING"
        });
        async move { (fresh && running).then_some(()) }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_whose_poll_never_returns_is_killed_at_the_stop_timeout_and_the_executor_stays_healthy()
 {
    let (c, root) = cluster(&["c-"]).await;
    let rs = root.display().to_string();
    create(
        &c,
        "stuck",
        json!({
            "connector.class": "c-dir-source", "tasks.max": "1", "root": rs,
            "poll.blocks": "true", "cleanup.timeout.ms": "2000",
        }),
    );
    c.wait_state("stuck", "STATE_RUNNING", "STATE_RUNNING", 1)
        .await;
    let pid = wait_event(&root, "poll-blocking", "stuck/0").await;

    let r = c.call("DeleteConnector", json!({ "name": "stuck" }));
    assert_eq!(r.code, 0, "{}", r.err);
    // The task's stop(true) waits behind the poll and is abandoned at the timeout; once
    // the connector instance, the process's last, is gone, the process is killed.
    wait_until("the stuck plugin process is killed", CONVERGE, || {
        let dead = !alive(pid);
        async move { dead.then_some(()) }
    })
    .await;
    // The cleanup is retried on a fresh cleanup-only instance (a fresh process) and the
    // deletion finishes.
    wait_deleted(&c, "stuck").await;
    let task_events = events(&root, "stuck/0");
    assert!(
        task_events
            .iter()
            .any(|w| w[1] == "task-stop" && w[3] == "deleted=true" && w[0] != pid.to_string()),
        "{task_events:?}"
    );

    // The executor is healthy: alive, and it runs a new connector of the same plugin.
    c.wait_alive(1).await;
    create(
        &c,
        "after",
        json!({ "connector.class": "c-dir-source", "tasks.max": "1", "root": rs, "emit": "3" }),
    );
    c.wait_state("after", "STATE_RUNNING", "STATE_RUNNING", 1)
        .await;
    wait_until("after commits its records", CONVERGE, || {
        let n = committed_n(&c, "after");
        async move { (n == Some(2)).then_some(()) }
    })
    .await;
}
