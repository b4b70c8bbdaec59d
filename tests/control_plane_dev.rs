//! `wharf-dev`: one process with an in-process executor, the embedded
//! store and the embedded record log runs a connector end to end and deletes it with
//! stop(true); SIGTERM stops it cleanly.
//!
//! Build first: `cargo build -p wharf-dev`.

use std::time::Duration;

use serde_json::json;
use wharf_harness::cluster::{CONVERGE, call_at};
use wharf_harness::lifecycle::Lifecycle;
use wharf_harness::{KeepOnFailure, Proc, wait_until};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_mode_runs_and_deletes_a_connector_in_one_process() {
    let dir = KeepOnFailure::new();
    let data = dir.path().join("dev");
    let mut cp = Proc::spawn(
        wharf_harness::bin("wharf-dev"),
        vec![
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--data-dir".into(),
            data.display().to_string(),
        ],
        &data,
    );
    let addr = cp.listen_addr().await;
    let call =
        |m: &str, b: serde_json::Value| call_at(&addr, &format!("wharf.v1.ConnectorAdmin/{m}"), &b);
    wait_until("the in-process executor to register", CONVERGE, || async {
        let r = call("ListExecutors", json!({}));
        (r.body["executors"][0]["state"] == "EXECUTOR_STATE_ALIVE").then_some(())
    })
    .await;
    let plugins = call("ListConnectorPlugins", json!({})).body.to_string();
    for p in [
        "file-source",
        "file-sink",
        "postgres-audit",
        "sqlite-audit",
        "rabbitmq-sink",
    ] {
        assert!(plugins.contains(p), "{p} offered in dev mode");
    }

    let lifecycle = dir.path().join("lifecycle.jsonl");
    let config = json!({
        "connector.class": "test-source",
        "tasks.max": "2",
        "lifecycle.path": lifecycle.display().to_string(),
        "test.poll.block.ms": "50",
    });
    assert_eq!(
        call(
            "CreateConnector",
            json!({ "name": "dev1", "config": config })
        )
        .code,
        0
    );
    wait_until("dev1 RUNNING with two tasks", CONVERGE, || async {
        let s = call("GetConnectorStatus", json!({ "name": "dev1" })).body["status"].clone();
        let tasks = s["tasks"].as_array()?.clone();
        (s["connector"]["state"] == "STATE_RUNNING"
            && tasks.len() == 2
            && tasks
                .iter()
                .all(|t| t["status"]["state"] == "STATE_RUNNING"))
        .then_some(())
    })
    .await;
    let r = call("DeleteConnector", json!({ "name": "dev1", "wait": true }));
    assert_eq!(r.body["deleted"], true, "{} {}", r.body, r.err);
    let lc = Lifecycle::read(&lifecycle);
    for t in [Some(0), Some(1), None] {
        let trues: Vec<_> = lc
            .stops("dev1", t)
            .into_iter()
            .filter(|s| s.connector_deleted && s.ok)
            .collect();
        assert_eq!(trues.len(), 1, "{t:?}: {trues:?}");
    }
    assert_eq!(
        cp.terminate(Duration::from_secs(20)).await,
        Some(0),
        "clean exit on SIGTERM"
    );
}
