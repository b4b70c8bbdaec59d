//! A cleanup slower than `cleanup.timeout.ms` (docs/contract.md points 6, 5): each stop(true) is
//! cut at the timeout and counts as an attempt; it is retried with backoff on a fresh
//! cleanup-only instance up to `cleanup.max.attempts`; then the connector stays DELETING
//! with attempts and the timeout error visible in GetConnectorStatus and WatchConnector,
//! RetryCleanup runs once more, and `force` finishes and names the skipped task. Every
//! cleanup step is one tracing event with connector, task, generation, executor, outcome.
//!
//! Failing (not slow) cleanup to max attempts, RetryCleanup and force are also
//! `control_plane_cleanup::exhausted_cleanup_stays_deleting_until_retried_or_forced`.
//!
//! A forced deletion frees the name only once the cleanup stop it skipped, still in
//! flight, has ended: a connector created again under that name must not have what it
//! provisions removed by its predecessor's late stop(true).
//!
//! Build first: `cargo build -p wharf-control-plane -p wharf-executor-stock`.

use serde_json::{Value, json};
use wharf_harness::cluster::{CONVERGE, FAILED_PRECONDITION};
use wharf_harness::fault::{admin_forgot, create_running, gone, start_mtls_cluster};
use wharf_harness::lifecycle::Lifecycle;
use wharf_harness::wait_until;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_cleanup_times_out_is_retried_to_the_limit_stays_visible_and_can_be_forced() {
    let c = start_mtls_cluster(1, &[]).await;
    let name = "sluggish";
    let mut cfg = c.source_config(name, 1);
    cfg["test.stop.delay.ms"] = json!("3000");
    cfg["cleanup.timeout.ms"] = json!("300");
    cfg["cleanup.max.attempts"] = json!("2");
    create_running(&c, name, cfg, 1).await;
    let watch = c.watch(name);

    let r = c.call("DeleteConnector", json!({ "name": name }));
    assert_eq!(r.code, 0, "{}", r.err);
    let step = wait_until(
        "task step FAILED after 2 timed-out attempts",
        CONVERGE,
        || async {
            let s = c.status(name)?;
            let step = s["deletion"]["steps"][0].clone();
            (s["connector"]["state"] == "STATE_DELETING"
                && step["state"] == "CLEANUP_STATE_FAILED"
                && step["attempts"] == 2)
                .then_some(step)
        },
    )
    .await;
    let err = step["lastError"].as_str().unwrap_or_default();
    assert!(err.contains("timed out"), "{step}");
    assert_eq!(step["executorId"], "exec-1", "{step}");
    assert_eq!(
        step["rehosted"], true,
        "the second attempt ran cleanup-only: {step}"
    );
    // It stays so: no third attempt on its own.
    let again = c.status(name).expect("status");
    assert_eq!(again["deletion"]["steps"][0]["attempts"], 2, "{again}");
    assert_eq!(
        again["deletion"]["steps"][1]["state"], "CLEANUP_STATE_PENDING",
        "connector waits for its tasks: {again}"
    );

    // RetryCleanup: exactly one more attempt, which times out too.
    assert_eq!(c.call("RetryCleanup", json!({ "name": name })).code, 0);
    wait_until("a third attempt", CONVERGE, || async {
        let s = c.status(name)?;
        let st = &s["deletion"]["steps"][0];
        (st["attempts"] == 3 && st["state"] == "CLEANUP_STATE_FAILED").then_some(())
    })
    .await;

    let r = c.call("DeleteConnector", json!({ "name": name, "force": true }));
    assert_eq!(r.code, 0, "{}", r.err);
    assert_eq!(r.body["skippedTasks"], json!([0]), "{}", r.body);
    assert_eq!(r.body["connectorCleanupSkipped"], true, "{}", r.body);
    gone(&c, name).await;
    admin_forgot(&c, name);

    // Each attempt cut at the timeout reached the plugin: three stop(true) began.
    let lc = Lifecycle::read(&c.lifecycle_path(name));
    let trues = lc
        .stops(name, Some(0))
        .into_iter()
        .filter(|s| s.connector_deleted)
        .count();
    assert_eq!(trues, 3, "{:?}", lc.calls(name, Some(0)));

    // WatchConnector showed DELETING with the step's attempts and error, then the end.
    let events = match watch.wait() {
        Ok(events) => events,
        Err(failed) => panic!("the watch ended with an error: {}", failed.err),
    };
    let text = Value::Array(events.clone()).to_string();
    assert!(
        events.iter().any(|e| {
            let st = &e["status"]["deletion"]["steps"][0];
            e["status"]["connector"]["state"] == "STATE_DELETING"
                && st["attempts"] == 2
                && st["state"] == "CLEANUP_STATE_FAILED"
                && st["lastError"]
                    .as_str()
                    .is_some_and(|s| s.contains("timed out"))
                && st["executorId"] == "exec-1"
        }),
        "watch showed the failed step: {text}"
    );
    assert_eq!(
        events.last().map(|e| e["type"].clone()),
        Some(json!("CONNECTOR_EVENT_TYPE_DELETED")),
        "{text}"
    );
    // The DELETED event shows how the steps ended: both skipped by the force, task 0
    // after its 3 attempts on exec-1.
    let end = &events.last().expect("events")["status"]["deletion"]["steps"];
    assert_eq!(end[0]["state"], "CLEANUP_STATE_SKIPPED", "{text}");
    assert_eq!(end[0]["attempts"], 3, "{text}");
    assert_eq!(end[0]["executorId"], "exec-1", "{text}");
    assert_eq!(end[1]["state"], "CLEANUP_STATE_SKIPPED", "{text}");

    // One tracing event per cleanup step outcome, with every field.
    let log = c.cp_log();
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| {
            // The audit trail's events (target wharf::audit) carry an outcome too.
            l.contains(&format!("connector={name} "))
                && l.contains("outcome=")
                && !l.contains("wharf::audit")
        })
        .collect();
    assert!(lines.len() >= 3, "{lines:?}");
    for l in &lines {
        for field in ["task=", "generation=", "executor=", "outcome="] {
            assert!(l.contains(field), "{field} missing in {l}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_freed_by_force_is_taken_again_only_after_the_skipped_stop_ended() {
    let c = start_mtls_cluster(1, &[]).await;
    let name = "forced";
    let mut cfg = c.source_config(name, 1);
    cfg["test.stop.delay.ms"] = json!("4000");
    cfg["cleanup.timeout.ms"] = json!("20000");
    create_running(&c, name, cfg.clone(), 1).await;

    let r = c.call("DeleteConnector", json!({ "name": name }));
    assert_eq!(r.code, 0, "{}", r.err);
    let path = c.lifecycle_path(name);
    wait_until("the task's stop(true) to begin", CONVERGE, || async {
        Lifecycle::read(&path)
            .events
            .iter()
            .any(|e| e.call == "stop" && e.task == Some(0) && e.connector_deleted == Some(true))
            .then_some(())
    })
    .await;
    let r = c.call("DeleteConnector", json!({ "name": name, "force": true }));
    assert_eq!(r.code, 0, "{}", r.err);
    assert_eq!(r.body["deleted"], true, "{}", r.body);

    // The skipped stop still runs (4 s): the name is not taken again meanwhile.
    let r = c.call("CreateConnector", json!({ "name": name, "config": cfg }));
    assert_eq!(r.code, FAILED_PRECONDITION, "{} {}", r.err, r.body);
    assert!(r.err.contains("being deleted"), "{}", r.err);
    wait_until("the name to be free again", CONVERGE, || async {
        (c.call(
            "CreateConnector",
            json!({ "name": name, "config": cfg.clone() }),
        )
        .code
            == 0)
            .then_some(())
    })
    .await;
    let lc = wait_until("the new task to start", CONVERGE, || async {
        let lc = Lifecycle::read(&path);
        let starts = lc
            .events
            .iter()
            .filter(|e| e.call == "start" && e.task == Some(0))
            .count();
        (starts >= 2).then_some(lc)
    })
    .await;
    let ended = lc
        .events
        .iter()
        .find(|e| e.call == "stopped" && e.task == Some(0) && e.connector_deleted == Some(true))
        .map(|e| e.ts_ms)
        .expect("the skipped stop(true) ended");
    let started_again = lc
        .events
        .iter()
        .filter(|e| e.call == "start" && e.task == Some(0))
        .nth(1)
        .map(|e| e.ts_ms)
        .expect("second start");
    assert!(
        ended <= started_again,
        "the new task started at {started_again} before the old stop(true) ended at {ended}"
    );
}
