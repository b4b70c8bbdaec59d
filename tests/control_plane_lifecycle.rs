//! End to end: a real control plane and three real executors on 127.0.0.2-4, driven through
//! the typed admin client; outcomes read from the test plugin's lifecycle file.
//!
//! Build first: `cargo build -p wharf-control-plane -p wharf-executor-stock`.

use std::collections::BTreeSet;

use serde_json::json;
use wharf_harness::cluster::{CONVERGE, NOT_FOUND, TestCluster};
use wharf_harness::lifecycle::Lifecycle;
use wharf_harness::wait_until;

fn task_gens(status: &serde_json::Value) -> Vec<u64> {
    status["tasks"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|t| {
                    t["status"]["generation"]
                        .as_str()
                        .and_then(|g| g.parse().ok())
                        .unwrap_or(0)
                })
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connector_lives_through_pause_resume_stop_restart_reconfigure_and_delete() {
    let c = TestCluster::start(3).await;
    let name = "life";
    let r = c.call(
        "CreateConnector",
        json!({ "name": name, "config": c.source_config(name, 3) }),
    );
    assert_eq!(r.code, 0, "{}", r.err);

    // RUNNING, one task per executor.
    let s = c
        .wait_state(name, "STATE_RUNNING", "STATE_RUNNING", 3)
        .await;
    let hosts: BTreeSet<String> = TestCluster::hosts(&s).into_iter().collect();
    assert_eq!(hosts.len(), 3, "tasks spread over the three executors: {s}");

    // Pause: tasks stop with false, stay assigned as PAUSED.
    assert_eq!(c.call("PauseConnector", json!({ "name": name })).code, 0);
    c.wait_state(name, "STATE_PAUSED", "STATE_PAUSED", 3).await;
    // The status can say PAUSED before a task's stop returned: wait for the plugin's record.
    let lc = wait_until("every task's stop recorded", CONVERGE, || async {
        let lc = Lifecycle::read(&c.lifecycle_path(name));
        (0..3)
            .all(|t| !lc.stops_for(name, t).is_empty())
            .then_some(lc)
    })
    .await;
    for t in 0..3 {
        let stops = lc.stops_for(name, t);
        assert!(
            !stops.is_empty() && stops.iter().all(|(_, deleted, _)| !deleted),
            "task {t}: {stops:?}"
        );
    }

    // Resume.
    assert_eq!(c.call("ResumeConnector", json!({ "name": name })).code, 0);
    c.wait_state(name, "STATE_RUNNING", "STATE_RUNNING", 3)
        .await;

    // Stop (KIP-875) and resume again.
    assert_eq!(c.call("StopConnector", json!({ "name": name })).code, 0);
    c.wait_state(name, "STATE_STOPPED", "STATE_STOPPED", 3)
        .await;
    let lc = Lifecycle::read(&c.lifecycle_path(name));
    assert!(lc.stops(name, None).iter().all(|s| !s.connector_deleted));
    assert_eq!(c.call("ResumeConnector", json!({ "name": name })).code, 0);
    let before = c
        .wait_state(name, "STATE_RUNNING", "STATE_RUNNING", 3)
        .await;

    // Restart with tasks: new generations, RUNNING again.
    let r = c.call(
        "RestartConnector",
        json!({ "name": name, "include_tasks": true }),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    let old = task_gens(&before);
    wait_until(
        "restart to give every task a new generation",
        CONVERGE,
        || async {
            let s = c.status(name)?;
            let g = task_gens(&s);
            let running = s["tasks"]
                .as_array()?
                .iter()
                .all(|t| t["status"]["state"] == "STATE_RUNNING");
            (running && g.len() == 3 && g.iter().zip(&old).all(|(n, o)| n > o)).then_some(())
        },
    )
    .await;

    // Reconfigure: tasks.max up, then down.
    let r = c.call(
        "PutConnectorConfig",
        json!({ "name": name, "config": c.source_config(name, 5) }),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    let five = c
        .wait_state(name, "STATE_RUNNING", "STATE_RUNNING", 5)
        .await;
    let r = c.call(
        "PutConnectorConfig",
        json!({ "name": name, "config": c.source_config(name, 2) }),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    // The kept tasks restart with the new config: wait for their new generations, not
    // the old instances still reported before the change reached them.
    let s = c
        .wait_state_newer(name, "STATE_RUNNING", "STATE_RUNNING", 2, &five)
        .await;
    let final_hosts = TestCluster::hosts(&s);
    let lc = Lifecycle::read(&c.lifecycle_path(name));
    for t in 2..5 {
        assert!(
            lc.stops_for(name, t).iter().all(|(_, deleted, _)| !deleted),
            "removed task {t} got stop(false) only"
        );
    }

    // Delete and wait: every task's live instance got stop(true) exactly once, on its host.
    let r = c.call(
        "DeleteConnector",
        json!({ "name": name, "wait": true, "wait_timeout_ms": 30000 }),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    assert_eq!(r.body["deleted"], true, "{}", r.body);
    let lc = Lifecycle::read(&c.lifecycle_path(name));
    for (t, host) in final_hosts.iter().enumerate() {
        let trues: Vec<_> = lc
            .stops(name, Some(t as u32))
            .into_iter()
            .filter(|s| s.connector_deleted)
            .collect();
        assert_eq!(
            trues.len(),
            1,
            "task {t}: exactly one stop(true): {trues:?}"
        );
        assert_eq!(&trues[0].executor, host, "task {t}: stop(true) on its host");
        assert!(trues[0].ok && !trues[0].cleanup_only);
    }
    for t in 2..5 {
        assert!(
            lc.stops(name, Some(t)).iter().all(|s| !s.connector_deleted),
            "removed task {t} never saw stop(true)"
        );
    }
    let conn_trues = lc.cleanups(name, None);
    assert_eq!(
        conn_trues.len(),
        1,
        "connector instance: one stop(true): {conn_trues:?}"
    );

    // Gone from list, status and offsets.
    let list = c.call("ListConnectors", json!({}));
    assert!(
        !list.body.to_string().contains(&format!("\"{name}\"")),
        "{}",
        list.body
    );
    assert_eq!(
        c.call("GetConnectorStatus", json!({ "name": name })).code,
        NOT_FOUND
    );
    assert_eq!(
        c.call("GetOffsets", json!({ "name": name })).code,
        NOT_FOUND
    );

    // The name can be reused; the new incarnation starts fresh.
    let r = c.call(
        "CreateConnector",
        json!({ "name": name, "config": c.source_config(name, 1) }),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    c.wait_state(name, "STATE_RUNNING", "STATE_RUNNING", 1)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_executor_loses_its_tasks_to_the_others_and_delete_reaches_the_new_hosts() {
    let mut c = TestCluster::start(3).await;
    let name = "moving";
    let r = c.call(
        "CreateConnector",
        json!({ "name": name, "config": c.source_config(name, 3) }),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    let s = c
        .wait_state(name, "STATE_RUNNING", "STATE_RUNNING", 3)
        .await;
    let before = TestCluster::hosts(&s);

    c.executors[2].kill9();
    let s = wait_until("tasks of exec-3 to move", CONVERGE, || async {
        let s = c.status(name)?;
        let hosts = TestCluster::hosts(&s);
        let running = s["tasks"]
            .as_array()?
            .iter()
            .all(|t| t["status"]["state"] == "STATE_RUNNING");
        (running && hosts.len() == 3 && hosts.iter().all(|h| h != "exec-3")).then_some(s)
    })
    .await;
    let after = TestCluster::hosts(&s);
    let execs = c.call("ListExecutors", json!({}));
    let lost = execs.body["executors"]
        .as_array()
        .and_then(|a| a.iter().find(|e| e["id"] == "exec-3").cloned())
        .expect("exec-3 listed");
    assert_eq!(lost["state"], "EXECUTOR_STATE_LOST", "{lost}");
    for (b, a) in before.iter().zip(&after) {
        if b != "exec-3" {
            assert_eq!(
                a, b,
                "tasks on live executors stay put: {before:?} -> {after:?}"
            );
        }
    }

    let r = c.call("DeleteConnector", json!({ "name": name, "wait": true }));
    assert_eq!(r.body["deleted"], true, "{} {}", r.body, r.err);
    let lc = Lifecycle::read(&c.lifecycle_path(name));
    for (t, host) in after.iter().enumerate() {
        let trues: Vec<_> = lc
            .stops(name, Some(t as u32))
            .into_iter()
            .filter(|s| s.connector_deleted)
            .collect();
        assert_eq!(trues.len(), 1, "task {t}: {trues:?}");
        assert_eq!(&trues[0].executor, host);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_executor_takes_only_enough_tasks_to_even_out_and_moved_tasks_stop_with_false() {
    let mut c = TestCluster::start(2).await;
    let name = "rebalanced";
    let r = c.call(
        "CreateConnector",
        json!({ "name": name, "config": c.source_config(name, 5) }),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    let s = c
        .wait_state(name, "STATE_RUNNING", "STATE_RUNNING", 5)
        .await;
    let before = TestCluster::hosts(&s);

    c.add_executor(2).await;
    c.wait_alive(3).await;
    let s = wait_until("exec-3 to take work", CONVERGE, || async {
        let s = c.status(name)?;
        let running = s["tasks"]
            .as_array()?
            .iter()
            .all(|t| t["status"]["state"] == "STATE_RUNNING");
        let hosts = TestCluster::hosts(&s);
        (running && hosts.iter().any(|h| h == "exec-3")).then_some(s)
    })
    .await;
    let after = TestCluster::hosts(&s);
    let moved: Vec<usize> = (0..5).filter(|&t| before[t] != after[t]).collect();
    // 5 tasks + 1 connector instance over 3 executors: 2 each; at most 2 units move.
    assert!(
        !moved.is_empty() && moved.len() <= 2,
        "{before:?} -> {after:?}"
    );
    let lc = Lifecycle::read(&c.lifecycle_path(name));
    for t in moved {
        let stops = lc.stops_for(name, t as u32);
        assert!(
            stops
                .iter()
                .any(|(e, deleted, ok)| e == &before[t] && !deleted && *ok),
            "moved task {t} got stop(false) on its old host {}: {stops:?}",
            before[t]
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_that_fails_is_reported_failed_and_restart_task_starts_a_new_instance() {
    let c = TestCluster::start(1).await;
    let name = "crashy";
    let mut cfg = c.source_config(name, 1);
    cfg["test.poll.panic"] = json!("true");
    assert_eq!(
        c.call("CreateConnector", json!({ "name": name, "config": cfg }))
            .code,
        0
    );
    let failed = wait_until("the task FAILED with its error", CONVERGE, || async {
        let s = c.status(name)?;
        let t = s["tasks"][0]["status"].clone();
        (t["state"] == "STATE_FAILED" && !t["error"].as_str()?.is_empty()).then_some(t)
    })
    .await;
    assert_eq!(
        c.status(name).expect("status")["connector"]["state"],
        "STATE_RUNNING",
        "only the task failed"
    );
    let old_gen: u64 = failed["generation"]
        .as_str()
        .and_then(|g| g.parse().ok())
        .expect("generation");

    let r = c.call("RestartTask", json!({ "name": name, "task": 0 }));
    assert_eq!(r.code, 0, "{}", r.err);
    wait_until(
        "a new instance with a newer generation",
        CONVERGE,
        || async {
            let s = c.status(name)?;
            let g: u64 = s["tasks"][0]["status"]["generation"]
                .as_str()?
                .parse()
                .ok()?;
            let lc = Lifecycle::read(&c.lifecycle_path(name));
            (g > old_gen && lc.instances(name, Some(0)).len() >= 2).then_some(())
        },
    )
    .await;
    let lc = Lifecycle::read(&c.lifecycle_path(name));
    assert!(
        lc.events.iter().all(|e| e.connector_deleted != Some(true)),
        "a restart never passes true"
    );
}
