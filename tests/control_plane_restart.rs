//! A control plane killed (kill -9) in the middle of a deletion resumes it from its store
//! after a restart on the same data dir, and the deletion completes with exactly one
//! completed stop(true) per task. A restarted control plane catches up with what runs
//! without stopping or starting any of it again, and says when it did.
//!
//! Build first: `cargo build -p wharf-control-plane -p wharf-executor-stock`.

use serde_json::json;
use wharf_harness::cluster::{CONVERGE, NOT_FOUND, TestCluster};
use wharf_harness::lifecycle::Lifecycle;
use wharf_harness::prometheus::{free_addr, http_get};
use wharf_harness::{KeepOnFailure, Proc, WAIT_DEADLINE, wait_until};

/// The INFO line of a herder that caught up (docs/lifecycle.md, "After a restart").
const CAUGHT_UP: &str = "herder caught up";

/// Plugin calls that start or stop an instance, as the test plugin's lifecycle file
/// records them.
fn starts_and_stops(lc: &Lifecycle) -> usize {
    lc.events
        .iter()
        .filter(|e| matches!(e.call.as_str(), "start" | "stop" | "stopped"))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_control_plane_catches_up_without_stopping_or_starting_what_runs() {
    let metrics = free_addr("127.0.0.1");
    let mut c = TestCluster::start_with(2, vec!["--metrics-listen".into(), metrics.clone()]).await;
    let name = "steady";
    let cfg = c.source_config(name, 3);
    let r = c.call("CreateConnector", json!({ "name": name, "config": cfg }));
    assert_eq!(r.code, 0, "{}", r.err);
    let before = c
        .wait_state(name, "STATE_RUNNING", "STATE_RUNNING", 3)
        .await;
    wait_until("the first herder to catch up", CONVERGE, || async {
        c.cp_log().contains(CAUGHT_UP).then_some(())
    })
    .await;
    let calls_before = starts_and_stops(&Lifecycle::read(&c.lifecycle_path(name)));

    c.restart_control_plane().await;
    wait_until("the restarted herder to catch up", CONVERGE, || async {
        (c.cp_log().matches(CAUGHT_UP).count() >= 2).then_some(())
    })
    .await;

    let (code, body) = http_get(&metrics, "/metrics");
    assert_eq!(code, 200, "{body}");
    let gauge = body
        .lines()
        .find_map(|l| l.strip_prefix("wharf_herder_catch_up_seconds "))
        .and_then(|v| v.trim().parse::<f64>().ok());
    assert!(
        gauge.is_some_and(|s| s > 0.0 && s < CONVERGE.as_secs_f64()),
        "the catch-up gauge after the restart: {gauge:?}"
    );
    let after = c.status(name).expect("still known after restart");
    assert_eq!(
        TestCluster::hosts(&after),
        TestCluster::hosts(&before),
        "every task where it ran: {after}"
    );
    assert_eq!(after["connector"]["state"], "STATE_RUNNING", "{after}");
    assert_eq!(
        starts_and_stops(&Lifecycle::read(&c.lifecycle_path(name))),
        calls_before,
        "the restart stopped or started nothing"
    );
}

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
        Lifecycle::read(&c.lifecycle_path(name))
            .a_stop_true_began()
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

/// Restarts `cp` and waits for it to exit by itself with code 1; its log.
async fn restart_refused(cp: &mut Proc) -> String {
    cp.restart();
    let mut child = cp.child.take().expect("spawned");
    let status = wait_until("the control plane to exit by itself", WAIT_DEADLINE, || {
        let r = child.try_wait().ok().flatten();
        async move { r }
    })
    .await;
    let log = cp.log();
    assert_eq!(status.code(), Some(1), "{log}");
    log
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_key_missing_beside_a_store_refuses_the_start_and_makes_no_new_key() {
    let root = KeepOnFailure::new();
    let dir = root.path().join("cp");
    let args = vec![
        "--listen".into(),
        "127.0.0.1:0".into(),
        "--data-dir".into(),
        dir.display().to_string(),
    ];
    // A first start makes the key and the store.
    let mut cp = Proc::spawn(wharf_harness::bin("wharf-control-plane"), args, &dir);
    cp.listen_addr().await;
    cp.terminate(WAIT_DEADLINE).await;
    let key = dir.join("store.key");
    assert!(key.exists() && dir.join("state.redb").exists());
    std::fs::remove_file(&key).expect("lose store.key");

    let log = restart_refused(&mut cp).await;
    let want = format!("store.key is missing from {}", dir.display());
    assert!(log.contains(&want), "{want}: {log}");
    assert!(log.contains("restore store.key"), "{log}");
    assert!(!key.exists(), "a new key was written");

    // A link to a key that is not there (an unmounted secret) is missing too, and stays.
    let nowhere = root.path().join("unmounted").join("store.key");
    std::os::unix::fs::symlink(&nowhere, &key).expect("dangling link");
    let log = restart_refused(&mut cp).await;
    assert!(log.contains(&want), "{want}: {log}");
    assert!(
        std::fs::symlink_metadata(&key).is_ok_and(|m| m.file_type().is_symlink()),
        "the link was replaced"
    );
    assert!(!nowhere.exists(), "a new key was written through the link");
}
