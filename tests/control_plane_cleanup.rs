//! Bounded, retried cleanup (docs/contract.md points 3, 6, 12) with real executors and the test
//! plugin's injected stop failures: retries until a stop(true) completes; after
//! `cleanup.max.attempts` the connector stays DELETING with attempts and error visible;
//! RetryCleanup tries again; `force` finishes and names what it skipped; `keep_resources`
//! stops everything with `false`; a deletion whose host executor died runs the cleanup
//! on a live executor in cleanup-only mode once the lease expired; deleting again in the
//! other mode is refused and the first mode is what runs.
//!
//! Build first: `cargo build -p wharf-control-plane -p wharf-executor-stock`.

use serde_json::json;
use wharf_harness::cluster::{CONVERGE, FAILED_PRECONDITION, NOT_FOUND, TestCluster};
use wharf_harness::fault::create_running;
use wharf_harness::lifecycle::Lifecycle;
use wharf_harness::wait_until;

async fn gone(c: &TestCluster, name: &str) {
    wait_until(&format!("{name} deleted"), CONVERGE, || async {
        (c.call("GetConnectorStatus", json!({ "name": name })).code == NOT_FOUND).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_cleanup_is_retried_until_a_stop_true_completes() {
    let c = TestCluster::start(1).await;
    let name = "flaky";
    let mut cfg = c.source_config(name, 1);
    cfg["test.stop.fail.times"] = json!("2");
    assert_eq!(
        c.call("CreateConnector", json!({ "name": name, "config": cfg }))
            .code,
        0
    );
    c.wait_state(name, "STATE_RUNNING", "STATE_RUNNING", 1)
        .await;
    assert_eq!(c.call("DeleteConnector", json!({ "name": name })).code, 0);
    gone(&c, name).await;
    let lc = Lifecycle::read(&c.lifecycle_path(name));
    let trues: Vec<_> = lc
        .stops(name, Some(0))
        .into_iter()
        .filter(|s| s.connector_deleted)
        .collect();
    assert_eq!(
        trues.iter().filter(|s| s.ok).count(),
        1,
        "one completed stop(true): {trues:?}"
    );
    assert!(trues.len() >= 2, "failed attempts were retried: {trues:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exhausted_cleanup_stays_deleting_until_retried_or_forced() {
    let c = TestCluster::start(1).await;
    let name = "stubborn";
    let mut cfg = c.source_config(name, 1);
    cfg["test.stop.fail.times"] = json!("100");
    cfg["cleanup.max.attempts"] = json!("2");
    assert_eq!(
        c.call("CreateConnector", json!({ "name": name, "config": cfg }))
            .code,
        0
    );
    c.wait_state(name, "STATE_RUNNING", "STATE_RUNNING", 1)
        .await;
    assert_eq!(c.call("DeleteConnector", json!({ "name": name })).code, 0);
    let step = wait_until("task cleanup FAILED after 2 attempts", CONVERGE, || async {
        let s = c.status(name)?;
        let step = s["deletion"]["steps"][0].clone();
        (step["state"] == "CLEANUP_STATE_FAILED" && step["attempts"] == 2).then_some(step)
    })
    .await;
    assert!(
        step["lastError"].as_str().is_some_and(|e| !e.is_empty()),
        "{step}"
    );
    assert_eq!(
        c.status(name).expect("status")["connector"]["state"],
        "STATE_DELETING"
    );

    // RetryCleanup: one more attempt.
    assert_eq!(c.call("RetryCleanup", json!({ "name": name })).code, 0);
    wait_until("a third attempt", CONVERGE, || async {
        let s = c.status(name)?;
        (s["deletion"]["steps"][0]["attempts"] == 3
            && s["deletion"]["steps"][0]["state"] == "CLEANUP_STATE_FAILED")
            .then_some(())
    })
    .await;

    // Create of the same name is refused while it is deleting.
    let r = c.call(
        "CreateConnector",
        json!({ "name": name, "config": c.source_config(name, 1) }),
    );
    assert_eq!(
        r.code,
        wharf_harness::cluster::FAILED_PRECONDITION,
        "{}",
        r.err
    );

    // Force: finished, and the answer names the skipped task.
    let r = c.call("DeleteConnector", json!({ "name": name, "force": true }));
    assert_eq!(r.code, 0, "{}", r.err);
    assert_eq!(r.body["deleted"], true, "{}", r.body);
    assert_eq!(r.body["skippedTasks"], json!([0]), "{}", r.body);
    assert_eq!(r.body["connectorCleanupSkipped"], true, "{}", r.body);
    gone(&c, name).await;
    assert!(c.cp_log().contains("deletion forced"), "the log says so");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_resources_stops_everything_with_false() {
    let c = TestCluster::start(2).await;
    let name = "keeper";
    assert_eq!(
        c.call(
            "CreateConnector",
            json!({ "name": name, "config": c.source_config(name, 2) })
        )
        .code,
        0
    );
    c.wait_state(name, "STATE_RUNNING", "STATE_RUNNING", 2)
        .await;
    let r = c.call(
        "DeleteConnector",
        json!({ "name": name, "keep_resources": true, "wait": true }),
    );
    assert_eq!(r.body["deleted"], true, "{} {}", r.body, r.err);
    // Kept on purpose: nothing was given up, and nothing says it may have leaked.
    assert_eq!(r.body["givenUpTasks"], json!([]), "{}", r.body);
    assert_eq!(r.body["connectorCleanupGivenUp"], false, "{}", r.body);
    let log = c.cp_log();
    assert!(!log.contains("given up"), "{log}");
    let lc = Lifecycle::read(&c.lifecycle_path(name));
    assert!(
        lc.events.iter().all(|e| e.connector_deleted != Some(true)),
        "no stop(true) at all"
    );
    for t in [Some(0), Some(1), None] {
        assert!(
            lc.stops(name, t)
                .iter()
                .any(|s| !s.connector_deleted && s.ok),
            "{t:?} stopped with false"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cleanup_of_a_dead_executors_tasks_runs_cleanup_only_elsewhere_after_its_lease() {
    let mut c = TestCluster::start(2).await;
    let name = "orphaned";
    assert_eq!(
        c.call(
            "CreateConnector",
            json!({ "name": name, "config": c.source_config(name, 2) })
        )
        .code,
        0
    );
    let s = c
        .wait_state(name, "STATE_RUNNING", "STATE_RUNNING", 2)
        .await;
    let hosts = TestCluster::hosts(&s);
    let dead = hosts
        .iter()
        .position(|h| h == "exec-2")
        .expect("a task on exec-2");
    c.executors[1].kill9();
    assert_eq!(c.call("DeleteConnector", json!({ "name": name })).code, 0);
    gone(&c, name).await;
    let lc = Lifecycle::read(&c.lifecycle_path(name));
    let trues: Vec<_> = lc
        .stops(name, Some(dead as u32))
        .into_iter()
        .filter(|s| s.connector_deleted && s.ok)
        .collect();
    assert_eq!(trues.len(), 1, "{trues:?}");
    assert_eq!(
        trues[0].executor, "exec-1",
        "re-hosted on the live executor"
    );
    assert!(trues[0].cleanup_only, "in cleanup-only mode");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_an_unassigned_connector_waits_for_a_capable_executor() {
    let mut c = TestCluster::start(1).await;
    c.executors[0].kill9();
    wait_until("exec-1 LOST", CONVERGE, || async {
        let r = c.call("ListExecutors", json!({}));
        (r.body["executors"][0]["state"] == "EXECUTOR_STATE_LOST").then_some(())
    })
    .await;
    let name = "homeless";
    let r = c.call(
        "CreateConnector",
        json!({ "name": name, "config": c.source_config(name, 2) }),
    );
    assert_eq!(
        r.code, 0,
        "plugin known from a lost executor is accepted: {}",
        r.err
    );
    c.wait_state(name, "STATE_UNASSIGNED", "STATE_UNASSIGNED", 0)
        .await;

    let r = c.call("DeleteConnector", json!({ "name": name }));
    assert_eq!(r.code, 0, "{}", r.err);
    wait_until("cleanup waiting for an executor", CONVERGE, || async {
        let s = c.status(name)?;
        let err = s["deletion"]["steps"][0]["lastError"].as_str()?.to_owned();
        (s["connector"]["state"] == "STATE_DELETING" && err.contains("no live executor"))
            .then_some(())
    })
    .await;

    c.executors[0].restart();
    gone(&c, name).await;
    let lc = Lifecycle::read(&c.lifecycle_path(name));
    let trues: Vec<_> = lc
        .stops(name, None)
        .into_iter()
        .filter(|s| s.connector_deleted && s.ok)
        .collect();
    assert_eq!(trues.len(), 1, "{trues:?}");
    assert!(trues[0].cleanup_only);
}

/// A second DeleteConnector while a slow cleanup runs (it acts as RetryCleanup) leaves the
/// status telling the truth: once the task's stop(true) completed, its step shows DONE
/// while the connector instance's stop runs and shows RUNNING, and each stop(true) runs
/// once. The retry used to rewrite the record under the running round, whose marks and
/// outcomes were then dropped until the round had ended (a newcomer saw the task RUNNING
/// and the connector PENDING while the connector's stop ran).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_during_a_slow_cleanup_leaves_the_status_current() {
    let c = TestCluster::start(1).await;
    let name = "slow-stop";
    let mut cfg = c.source_config(name, 1);
    cfg["test.stop.delay.ms"] = json!("3000");
    create_running(&c, name, cfg, 1).await;
    assert_eq!(c.call("DeleteConnector", json!({ "name": name })).code, 0);
    let step = |s: &serde_json::Value, task: bool| -> serde_json::Value {
        s["deletion"]["steps"]
            .as_array()
            .and_then(|steps| steps.iter().find(|st| st.get("task").is_some() == task))
            .cloned()
            .unwrap_or_default()
    };
    wait_until("the task's stop shown RUNNING", CONVERGE, || async {
        let s = c.status(name)?;
        (step(&s, true)["state"] == "CLEANUP_STATE_RUNNING").then_some(())
    })
    .await;
    assert_eq!(c.call("DeleteConnector", json!({ "name": name })).code, 0);
    wait_until(
        "the task's step DONE while the connector's stop is shown RUNNING",
        CONVERGE,
        || async {
            let Some(s) = c.status(name) else {
                panic!("the deletion ended and the status never showed the connector's stop running after the task's")
            };
            (step(&s, true)["state"] == "CLEANUP_STATE_DONE"
                && step(&s, false)["state"] == "CLEANUP_STATE_RUNNING")
                .then_some(())
        },
    )
    .await;
    gone(&c, name).await;
    let lc = Lifecycle::read(&c.lifecycle_path(name));
    for unit in [Some(0), None] {
        let trues = lc.cleanups(name, unit);
        assert_eq!(trues.len(), 1, "{unit:?}: one stop(true): {trues:?}");
    }
}

/// A force while a task's stop(true) runs: that stop is not recalled and completes, but
/// the connector instance's step, still PENDING behind it, stays skipped as the answer
/// says: its stop(true) is never sent; the instance is stopped with false. The round in flight used to go on to the
/// connector instance after the force (a review saw its cleanup run 3 s after a force
/// that reported it skipped).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_force_during_a_tasks_stop_sends_no_further_stop() {
    let c = TestCluster::start(1).await;
    let name = "forced-mid-round";
    let mut cfg = c.source_config(name, 1);
    cfg["test.stop.delay.ms"] = json!("2000");
    create_running(&c, name, cfg, 1).await;
    assert_eq!(c.call("DeleteConnector", json!({ "name": name })).code, 0);
    let lifecycle = c.lifecycle_path(name);
    wait_until("the task's stop(true) to have begun", CONVERGE, || async {
        Lifecycle::read(&lifecycle)
            .a_stop_true_began()
            .then_some(())
    })
    .await;
    let r = c.call("DeleteConnector", json!({ "name": name, "force": true }));
    assert_eq!(r.code, 0, "{}", r.err);
    assert_eq!(r.body["connectorCleanupSkipped"], true, "{}", r.body);
    // A force skips the cleanup, not the stop: the connector instance is stopped with
    // false rather than left running on its executor (before, nothing stopped it until a
    // connector of the same name was created).
    wait_until(
        "the connector instance stopped with false",
        CONVERGE,
        || async {
            Lifecycle::read(&lifecycle)
                .stops(name, None)
                .into_iter()
                .any(|s| !s.connector_deleted && s.ok)
                .then_some(())
        },
    )
    .await;
    // The name is free once the stop in flight has ended (the finalizer's task for it is
    // over): nothing of this deletion runs any more.
    let again = c.source_config(name, 1);
    wait_until("the name to be free again", CONVERGE, || {
        let r = c.call("CreateConnector", json!({ "name": name, "config": again }));
        async move { (r.code == 0).then_some(()) }
    })
    .await;
    let lc = Lifecycle::read(&lifecycle);
    let task: Vec<_> = lc
        .stops(name, Some(0))
        .into_iter()
        .filter(|s| s.connector_deleted)
        .collect();
    assert_eq!(
        task.len(),
        1,
        "the task's stop in flight completed: {task:?}"
    );
    let connector = lc.cleanups(name, None);
    assert!(
        connector.is_empty(),
        "the connector instance was reported skipped, and its stop(true) ran: {connector:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_again_in_the_other_mode_is_refused_and_the_first_mode_runs() {
    let c = TestCluster::start(1).await;
    // (connector, keep_resources of the first delete)
    for (name, keep_first) in [("cleans-first", false), ("keeps-first", true)] {
        let mut cfg = c.source_config(name, 1);
        cfg["test.stop.delay.ms"] = json!("2000");
        create_running(&c, name, cfg, 1).await;
        let first = c.call(
            "DeleteConnector",
            json!({ "name": name, "keep_resources": keep_first }),
        );
        assert_eq!(first.code, 0, "{}", first.err);
        // The same mode again is a retry; the other one is refused while the first runs.
        let same = c.call(
            "DeleteConnector",
            json!({ "name": name, "keep_resources": keep_first }),
        );
        assert_eq!(same.code, 0, "{}", same.err);
        let other = c.call(
            "DeleteConnector",
            json!({ "name": name, "keep_resources": !keep_first }),
        );
        assert_eq!(other.code, FAILED_PRECONDITION, "{name}: {}", other.err);
        let recorded = if keep_first {
            "keep_resources"
        } else {
            "cleanup"
        };
        assert!(
            other
                .err
                .contains(&format!("already being deleted with {recorded}")),
            "{name}: {}",
            other.err
        );
        gone(&c, name).await;
        // What ran is the first mode, on every unit.
        let lc = Lifecycle::read(&c.lifecycle_path(name));
        for unit in [Some(0), None] {
            let stops = lc.stops(name, unit);
            assert!(!stops.is_empty(), "{name} {unit:?} stopped");
            assert!(
                stops.iter().all(|s| s.connector_deleted != keep_first),
                "{name} {unit:?}: {stops:?}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_delete_names_what_give_up_left_behind() {
    let c = TestCluster::start(1).await;
    let name = "leaky";
    let mut cfg = c.source_config(name, 1);
    cfg["test.stop.fail.times"] = json!("100");
    cfg["cleanup.max.attempts"] = json!("1");
    cfg["cleanup.policy"] = json!("give-up");
    create_running(&c, name, cfg, 1).await;
    // A wait bound without wait is refused and deletes nothing.
    let r = c.call(
        "DeleteConnector",
        json!({ "name": name, "wait_timeout_ms": 5000 }),
    );
    assert_eq!(
        r.code,
        wharf_harness::cluster::INVALID_ARGUMENT,
        "{}",
        r.err
    );
    assert!(r.err.contains("wait_timeout_ms"), "{}", r.err);
    c.wait_state(name, "STATE_RUNNING", "STATE_RUNNING", 1)
        .await;
    let r = c.call("DeleteConnector", json!({ "name": name, "wait": true }));
    assert_eq!(r.code, 0, "{}", r.err);
    // Gone, as the policy says, and the answer says what may have leaked.
    assert_eq!(r.body["deleted"], true, "{}", r.body);
    assert_eq!(r.body["givenUpTasks"], json!([0]), "{}", r.body);
    assert_eq!(r.body["connectorCleanupGivenUp"], true, "{}", r.body);
    assert_eq!(
        r.body["skippedTasks"],
        json!([]),
        "nothing forced: {}",
        r.body
    );
    assert_eq!(r.body["connectorCleanupSkipped"], false, "{}", r.body);
    let log = c.cp_log();
    assert!(
        log.lines()
            .any(|l| l.contains("deletion finished with cleanup given up")
                && l.contains("given_up=task 0, connector")),
        "{log}"
    );
    // Every unit failed its one stop(true); none was tried again.
    let lc = Lifecycle::read(&c.lifecycle_path(name));
    for unit in [Some(0), None] {
        let trues = lc.cleanups(name, unit);
        assert_eq!(trues.len(), 1, "{unit:?}: {trues:?}");
        assert!(!trues[0].ok, "{unit:?} failed: {trues:?}");
    }
}
