//! `--file-root` through a real control plane and executors (docs/security.md): the file
//! plugins write under the root, and a `file` outside it, with `..`, or through a
//! symbolic link leading out fails the connector with an error naming the field and
//! writes nothing outside; an executor started without a root does not offer them, and
//! validation says why.
//!
//! Build first: `cargo build -p wharf-control-plane -p wharf-executor-stock`.

use std::process::{Command, Stdio};

use serde_json::{Value, json};
use wharf_harness::cluster::{CONVERGE, INVALID_ARGUMENT, TestCluster};
use wharf_harness::{FILE_ROOT_ENV, Proc, wait_until};

/// A file-sink config writing `file` from topic `t`.
fn sink(file: &str) -> Value {
    json!({ "connector.class": "file-sink", "tasks.max": "1", "file": file, "topics": "t" })
}

/// Waits until connector `name` is FAILED; its error text.
async fn failed_error(c: &TestCluster, name: &str) -> String {
    wait_until(&format!("{name} FAILED"), CONVERGE, || async {
        let s = c.status(name)?;
        (s["connector"]["state"] == "STATE_FAILED").then(|| {
            s["connector"]["error"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_plugins_touch_only_paths_under_the_executors_root() {
    // The harness gives every executor the test's temp dir as its root.
    let c = TestCluster::start(1).await;
    let root = c.dir.path();
    let outside = tempfile::tempdir().expect("outside dir");

    // Inside (relative to the root): runs, and the file appears under the root.
    let r = c.call(
        "CreateConnector",
        json!({ "name": "inside", "config": sink("out/inside.jsonl") }),
    );
    assert_eq!(r.code, 0, "{r:?}");
    std::fs::create_dir_all(root.join("out")).expect("out dir");
    c.wait_state("inside", "STATE_RUNNING", "STATE_RUNNING", 1)
        .await;
    wait_until("the sink's file under the root", CONVERGE, || async {
        root.join("out/inside.jsonl").exists().then_some(())
    })
    .await;

    // Outside: an absolute path and a link inside the root leading out, which only the
    // host can tell (a `..` is refused at create: see below).
    std::os::unix::fs::symlink(outside.path(), root.join("escape")).expect("symlink");
    let absolute = outside.path().join("abs.jsonl").display().to_string();
    let cases = [
        ("absolute", absolute.as_str(), "is outside the root"),
        ("symlink", "escape/link.jsonl", "symbolic link"),
    ];
    for (name, file, why) in cases {
        let r = c.call(
            "CreateConnector",
            json!({ "name": name, "config": sink(file) }),
        );
        assert_eq!(r.code, 0, "{name}: {r:?}");
        let err = failed_error(&c, name).await;
        assert!(
            err.contains("config \"file\"") && err.contains(why) && err.contains("--file-root"),
            "{name}: {err}"
        );
    }
    let written: Vec<_> = std::fs::read_dir(outside.path())
        .expect("outside dir")
        .collect();
    assert!(written.is_empty(), "written outside the root: {written:?}");
    // The connector inside is untouched by its neighbours' failures.
    c.wait_state("inside", "STATE_RUNNING", "STATE_RUNNING", 1)
        .await;
}

/// A file-source config reading `file` into topic `t`.
fn source(file: &str) -> Value {
    json!({ "connector.class": "file-source", "tasks.max": "1", "file": file, "topic": "t" })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dot_dot_file_is_reported_by_validate_and_refused_at_create_naming_config_file() {
    // The `file` key's validator runs on the live executor offering the plugin: no root
    // is needed to refuse a `..`, so it is no longer a FAILED start.
    let c = TestCluster::start(1).await;
    for (plugin, config) in [
        ("file-sink", sink("../../etc/evil")),
        ("file-source", source("logs/../../evil")),
    ] {
        let body = wait_until(
            &format!("validate reports {plugin}'s check on file"),
            CONVERGE,
            || async {
                let r = c.call("ValidateConnectorConfig", json!({ "config": config }));
                assert_eq!(r.code, 0, "{plugin}: {}", r.err);
                (r.body["errorCount"] != 0).then_some(r.body)
            },
        )
        .await;
        let file = body["configs"]
            .as_array()
            .and_then(|cs| cs.iter().find(|k| k["name"] == "file").cloned())
            .unwrap_or_else(|| panic!("{plugin}: no file entry: {body}"));
        assert!(
            file["errors"].to_string().contains("contains \\\"..\\\""),
            "{plugin}: {file}"
        );
        let r = c.call(
            "CreateConnector",
            json!({ "name": "evil", "config": config }),
        );
        assert_eq!(r.code, INVALID_ARGUMENT, "{plugin}: {r:?}");
        assert!(
            r.err.contains("config[file]") && r.err.contains("contains \"..\""),
            "{plugin}: {}",
            r.err
        );
        assert_eq!(
            c.call("ListConnectors", json!({})).body["connectors"],
            json!([]),
            "{plugin}: nothing created"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_executor_without_a_root_does_not_offer_the_file_plugins() {
    let mut c = TestCluster::start(0).await;
    let d = c.dir.path().join("no-root");
    std::fs::create_dir_all(&d).expect("data dir");
    let log = std::fs::File::create(d.join("process.log")).expect("log");
    let program = wharf_harness::bin("wharf-executor");
    let args: Vec<String> = vec![
        "--listen".into(),
        "127.0.0.2:0".into(),
        "--control-plane".into(),
        format!("http://{}", c.addr),
        "--data-dir".into(),
        d.display().to_string(),
        "--executor-id".into(),
        "no-root".into(),
    ];
    let child = Command::new(&program)
        .args(&args)
        .env_remove(FILE_ROOT_ENV)
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .spawn()
        .expect("spawn executor");
    c.executors.push(Proc {
        child: Some(child),
        data_dir: d,
        program,
        args,
    });
    c.wait_alive(1).await;

    let plugins = c.call("ListConnectorPlugins", json!({}));
    let names: Vec<&str> = plugins.body["plugins"]
        .as_array()
        .expect("plugins")
        .iter()
        .filter_map(|p| p["plugin"]["name"].as_str())
        .collect();
    assert!(names.contains(&"sqlite-audit"), "{names:?}");
    assert!(
        !names.contains(&"file-sink") && !names.contains(&"file-source"),
        "{names:?}"
    );
    let v = c.call(
        "ValidateConnectorConfig",
        json!({ "config": sink("x.jsonl") }),
    );
    assert_eq!(v.code, 0, "{v:?}");
    let class = v.body["configs"]
        .as_array()
        .expect("configs")
        .iter()
        .find(|k| k["name"] == "connector.class")
        .expect("connector.class entry")
        .clone();
    assert!(
        class["errors"].to_string().contains("--file-root"),
        "{class}"
    );
    let r = c.call(
        "CreateConnector",
        json!({ "name": "s", "config": sink("x.jsonl") }),
    );
    assert_ne!(r.code, 0, "created a file-sink nobody offers");
    assert!(r.err.contains("--file-root"), "{}", r.err);
    assert_eq!(
        c.call("ListConnectors", json!({})).body["connectors"],
        json!([]),
        "nothing created"
    );
}
