//! Executors failing during a deletion, with real processes: kill -9 right after the
//! delete while its stop(true) runs, then the same executor id coming back; SIGSTOP while
//! it runs StopTask, then SIGCONT (docs/contract.md points 3, 8, 9, 10).
//!
//! A kill -9 just *before* the delete is
//! `control_plane_cleanup::cleanup_of_a_dead_executors_tasks_runs_cleanup_only_elsewhere_after_its_lease`.
//!
//! Build first: `cargo build -p wharf-control-plane -p wharf-executor-stock`.

use serde_json::{Value, json};
use wharf_harness::cluster::{CONVERGE, TEST_LEASE_MS, TestCluster};
use wharf_harness::fault::{
    admin_forgot, completed_trues, create_running, done_steps_in_log, gone, now_ms,
    start_mtls_cluster, units, wait_executor,
};
use wharf_harness::lifecycle::Lifecycle;
use wharf_harness::wait_until;

/// Generation of each task (by index) and of the connector instance, from a status body.
fn generations(s: &Value) -> (Vec<u64>, u64) {
    let g = |v: &Value| {
        v["generation"]
            .as_str()
            .and_then(|g| g.parse().ok())
            .or(v["generation"].as_u64())
            .unwrap_or(0)
    };
    let tasks = s["tasks"]
        .as_array()
        .map(|a| a.iter().map(|t| g(&t["status"])).collect())
        .unwrap_or_default();
    (tasks, g(&s["connector"]))
}

/// Waits until an instance on `executor` that is not cleanup-only began stop(true).
async fn wait_stop_true_begun(c: &TestCluster, name: &str, executor: &str) -> i64 {
    wait_until(
        &format!("stop(true) begun on {executor}"),
        CONVERGE,
        || async {
            let lc = Lifecycle::read(&c.lifecycle_path(name));
            lc.events
                .iter()
                .find(|e| {
                    e.connector == name
                        && e.executor == executor
                        && e.call == "stop"
                        && e.connector_deleted == Some(true)
                        && !e.cleanup_only
                })
                .map(|e| e.ts_ms)
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn executor_killed_just_after_the_delete_gets_its_cleanup_rehosted_and_comes_back_clean() {
    let mut c = start_mtls_cluster(2, &[]).await;
    let name = "killed-after";
    let mut cfg = c.source_config(name, 2);
    // The stop(true) is still running when the executor dies.
    cfg["test.stop.delay.ms"] = json!("1500");
    let s = create_running(&c, name, cfg, 2).await;
    let hosts = TestCluster::hosts(&s);
    let victim = hosts
        .iter()
        .position(|h| h == "exec-2")
        .expect("a task on exec-2") as u32;

    assert_eq!(c.call("DeleteConnector", json!({ "name": name })).code, 0);
    wait_stop_true_begun(&c, name, "exec-2").await;
    let killed_at = now_ms();
    c.executors[1].kill9();

    // Retried while the lease holds: DELETING, the step not done.
    let st = c.status(name).expect("still deleting");
    assert_eq!(st["connector"]["state"], "STATE_DELETING", "{st}");
    gone(&c, name).await;

    let lc = Lifecycle::read(&c.lifecycle_path(name));
    let victim_stops = lc.stops(name, Some(victim));
    assert!(
        victim_stops
            .iter()
            .any(|s| s.executor == "exec-2" && s.connector_deleted && !s.ok),
        "the stop(true) on exec-2 never completed: {victim_stops:?}"
    );
    let done = completed_trues(&lc, name, Some(victim));
    assert_eq!(done.len(), 1, "{done:?}");
    assert_eq!(done[0].executor, "exec-1", "re-hosted on the live executor");
    assert!(done[0].cleanup_only, "in cleanup-only mode");
    let rehosted_start = lc
        .of_instance(&done[0].instance)
        .iter()
        .find(|e| e.call == "start")
        .map(|e| e.ts_ms)
        .expect("start line");
    // Leases are renewed every heartbeat interval: it ran out at least a lease minus one
    // interval after the kill.
    assert!(
        rehosted_start >= killed_at + i64::from(TEST_LEASE_MS) / 2,
        "cleanup-only instance started {} ms after the kill, before the lease could expire",
        rehosted_start - killed_at
    );
    for u in units(2) {
        assert_eq!(
            completed_trues(&lc, name, u).len(),
            1,
            "{u:?}: {:?}",
            lc.calls(name, u)
        );
    }
    assert!(
        c.cp_log().contains("host executor not reachable yet")
            || c.cp_log().contains("unreachable"),
        "the step waited for the lost host"
    );
    admin_forgot(&c, name);

    // The same id comes back on the same data dir: new epoch, nothing of the deleted
    // connector starts there.
    let before = lc.events.len();
    c.add_executor(1).await;
    c.wait_alive(2).await;
    let other = "after-comeback";
    create_running(&c, other, c.source_config(other, 2), 2).await;
    let lc = Lifecycle::read(&c.lifecycle_path(name));
    assert_eq!(
        lc.events.len(),
        before,
        "nothing more of {name}: {:?}",
        &lc.events[before..]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn executor_frozen_during_stop_task_times_out_is_rehosted_and_fenced_once_resumed() {
    let c = start_mtls_cluster(2, &[]).await;
    let name = "frozen";
    let mut cfg = c.source_config(name, 2);
    cfg["test.stop.delay.ms"] = json!("1000");
    cfg["cleanup.timeout.ms"] = json!("1500");
    let s = create_running(&c, name, cfg, 2).await;
    let hosts = TestCluster::hosts(&s);
    let (gens, _) = generations(&s);
    let victim = hosts
        .iter()
        .position(|h| h == "exec-2")
        .expect("a task on exec-2") as u32;
    // A bystander with instances on exec-2: once resumed and fenced, they get stop(false).
    let by = "bystander";
    let bs = create_running(&c, by, c.source_config(by, 2), 2).await;
    let by_on_2 = TestCluster::hosts(&bs)
        .iter()
        .filter(|h| *h == "exec-2")
        .count()
        + usize::from(bs["connector"]["executorId"] == "exec-2");
    let epoch_before = wait_executor(&c, "exec-2", "EXECUTOR_STATE_ALIVE").await["epoch"].clone();

    assert_eq!(c.call("DeleteConnector", json!({ "name": name })).code, 0);
    wait_stop_true_begun(&c, name, "exec-2").await;
    c.executors[1].freeze().await;

    // The call to the frozen process times out; its lease runs out; the cleanup moves.
    wait_executor(&c, "exec-2", "EXECUTOR_STATE_LOST").await;
    let seen = wait_until(
        "victim step RUNNING or re-hosted while frozen",
        CONVERGE,
        || async {
            let s = c.status(name)?;
            let steps = s["deletion"]["steps"].as_array()?.clone();
            steps.iter().find(|st| st["task"] == victim).cloned()
        },
    )
    .await;
    assert_eq!(seen["connectorDeleted"], true, "{seen}");
    gone(&c, name).await;

    c.executors[1].thaw();
    let alive = wait_executor(&c, "exec-2", "EXECUTOR_STATE_ALIVE").await;
    assert_ne!(
        alive["epoch"], epoch_before,
        "registered again with a new epoch"
    );
    let exec_log = std::fs::read_to_string(c.dir.path().join("exec-2").join("process.log"))
        .unwrap_or_default();
    // Resumed past its lease, it fences itself before anything else (docs/contract.md,
    // "Executor self-fencing"), whether it noticed the lease ran out or a heartbeat was
    // refused first.
    assert!(exec_log.contains("fencing myself"), "exec-2 was fenced");

    let lc = Lifecycle::read(&c.lifecycle_path(name));
    let done = completed_trues(&lc, name, Some(victim));
    let rehosted: Vec<_> = done.iter().filter(|s| s.cleanup_only).collect();
    assert_eq!(rehosted.len(), 1, "one re-hosted cleanup: {done:?}");
    assert_eq!(rehosted[0].executor, "exec-1");
    // At least once: the frozen stop may still complete once resumed, but at another
    // generation than the re-hosted one; no generation completes stop(true) twice.
    assert!(done.len() <= 2, "{done:?}");
    // The pending StopTask was abandoned once the frozen host's lease ran out, rather
    // than holding the deletion until the call's own deadline.
    assert!(
        c.cp_log()
            .lines()
            .any(|l| l.contains(&format!("connector={name} "))
                && l.contains("outcome=\"waiting\"")
                && l.contains("call abandoned")),
        "the stop to the frozen host was abandoned when its lease expired"
    );
    let steps = done_steps_in_log(&c.cp_log(), name);
    let victim_done: Vec<_> = steps
        .iter()
        .filter(|(t, _, _)| *t == Some(victim))
        .collect();
    assert_eq!(
        victim_done.len(),
        1,
        "one DONE record for the task: {steps:?}"
    );
    assert!(
        victim_done[0].1 > gens[victim as usize],
        "re-hosted generation {} above the frozen instance's {}",
        victim_done[0].1,
        gens[victim as usize]
    );
    for u in units(2) {
        assert!(
            !completed_trues(&lc, name, u).is_empty(),
            "{u:?}: {:?}",
            lc.calls(name, u)
        );
    }

    // The fenced process stopped its stale bystander instances with false, never true.
    assert!(
        by_on_2 > 0,
        "the planner put some bystander instance on exec-2: {bs}"
    );
    wait_until(
        "stale bystander instances on exec-2 stopped with false",
        CONVERGE,
        || async {
            let lc = Lifecycle::read(&c.lifecycle_path(by));
            let n = lc
                .events
                .iter()
                .filter(|e| e.executor == "exec-2" && e.call == "stopped" && e.ok)
                .count();
            (n >= by_on_2).then_some(())
        },
    )
    .await;
    let blc = Lifecycle::read(&c.lifecycle_path(by));
    assert!(
        blc.events.iter().all(|e| e.connector_deleted != Some(true)),
        "the bystander never saw stop(true)"
    );
    assert!(
        blc.events
            .iter()
            .filter(|e| e.executor == "exec-2" && e.call == "stop")
            .all(|e| e.connector_deleted == Some(false)),
        "stale instances got stop(false)"
    );
    c.wait_state(by, "STATE_RUNNING", "STATE_RUNNING", 2).await;
    admin_forgot(&c, name);
}
