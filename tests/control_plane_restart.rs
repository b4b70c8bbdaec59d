//! A control plane killed (kill -9) in the middle of a deletion resumes it from its store
//! after a restart on the same data dir, and the deletion completes with exactly one
//! completed stop(true) per task.
//!
//! Build first: `cargo build -p wharf-control-plane -p wharf-executor`.

use serde_json::json;
use wharf_harness::cluster::{CONVERGE, NOT_FOUND, TestCluster};
use wharf_harness::lifecycle::Lifecycle;
use wharf_harness::wait_until;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deletion_interrupted_by_a_control_plane_crash_resumes_after_restart() {
    let mut c = TestCluster::start(2).await;
    let name = "survivor";
    let mut cfg = c.source_config(name, 2);
    cfg["test.stop.delay.ms"] = json!("1500");
    assert_eq!(
        c.call("CreateConnector", json!({ "name": name, "config": cfg }))
            .code,
        0
    );
    let s = c
        .wait_state(name, "STATE_RUNNING", "STATE_RUNNING", 2)
        .await;
    let hosts = TestCluster::hosts(&s);

    let r = c.call("DeleteConnector", json!({ "name": name }));
    assert_eq!(r.code, 0, "{}", r.err);
    wait_until("a stop(true) to have begun", CONVERGE, || async {
        let lc = Lifecycle::read(&c.lifecycle_path(name));
        lc.events
            .iter()
            .any(|e| e.call == "stop" && e.connector_deleted == Some(true))
            .then_some(())
    })
    .await;
    c.restart_control_plane().await;

    let s = c.status(name).expect("still known after restart");
    assert_eq!(s["connector"]["state"], "STATE_DELETING", "{s}");
    wait_until("the deletion to finish after restart", CONVERGE, || async {
        (c.call("GetConnectorStatus", json!({ "name": name })).code == NOT_FOUND).then_some(())
    })
    .await;
    let lc = Lifecycle::read(&c.lifecycle_path(name));
    for (t, host) in hosts.iter().enumerate() {
        let done: Vec<_> = lc
            .stops(name, Some(t as u32))
            .into_iter()
            .filter(|s| s.connector_deleted && s.ok)
            .collect();
        assert_eq!(
            done.len(),
            1,
            "task {t}: one completed stop(true): {done:?}"
        );
        assert_eq!(&done[0].executor, host);
    }
    let conn: Vec<_> = lc
        .stops(name, None)
        .into_iter()
        .filter(|s| s.connector_deleted && s.ok)
        .collect();
    assert_eq!(
        conn.len(),
        1,
        "connector: one completed stop(true): {conn:?}"
    );
}
