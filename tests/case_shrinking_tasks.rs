//! Operator scenario 05: lowering tasks.max stops the surplus
//! tasks with stop(false) and forgets them; zero task configs leave the connector RUNNING
//! with no task; raising tasks.max again starts the new tasks. At no moment do more tasks
//! run than tasks.max allows. Real control plane, two real executors, the typed admin
//! client.
//!
//! Build first: `cargo build -p wharf-control-plane -p wharf-executor-stock`.

use serde_json::json;
use wharf_harness::cluster::TestCluster;
use wharf_harness::lifecycle::Lifecycle;

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Task instances running right after each task start, checked against the limit in
/// force when that start happened (`limits`: (from_ms, limit), ascending).
fn assert_never_above_limit(lc: &Lifecycle, name: &str, limits: &[(i64, usize)]) {
    let mut events: Vec<_> = lc
        .events
        .iter()
        .filter(|e| {
            e.connector == name && e.task.is_some() && (e.call == "start" || e.call == "stopped")
        })
        .collect();
    events.sort_by_key(|e| e.ts_ms);
    let mut running = std::collections::BTreeSet::new();
    for e in events {
        if e.call == "start" {
            running.insert(e.instance.clone());
            let limit = limits
                .iter()
                .rev()
                .find(|(from, _)| e.ts_ms >= *from)
                .map_or(usize::MAX, |(_, l)| *l);
            assert!(
                running.len() <= limit,
                "{} task instances ran at {} (limit {limit}): {running:?}",
                running.len(),
                e.ts_ms
            );
        } else {
            running.remove(&e.instance);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lowering_the_task_count_stops_the_surplus_tasks_and_forgets_them() {
    let c = TestCluster::start(2).await;
    let name = "shrink";
    let r = c.call(
        "CreateConnector",
        json!({ "name": name, "config": c.source_config(name, 4) }),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    let s = c
        .wait_state(name, "STATE_RUNNING", "STATE_RUNNING", 4)
        .await;
    let hosts: std::collections::BTreeSet<_> = TestCluster::hosts(&s).into_iter().collect();
    assert_eq!(hosts.len(), 2, "four tasks on two executors: {s}");

    // tasks.max 4 -> 1.
    let t1 = now_ms();
    let r = c.call(
        "PutConnectorConfig",
        json!({ "name": name, "config": c.source_config(name, 1) }),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    // Task 0 restarts with the new config: wait for its new generation, not the old
    // instance still reported RUNNING before the change reached it.
    let s = c
        .wait_state_newer(name, "STATE_RUNNING", "STATE_RUNNING", 1, &s)
        .await;
    assert_eq!(
        s["tasks"].as_array().map(Vec::len),
        Some(1),
        "removed tasks' status is gone: {s}"
    );
    let lc = Lifecycle::read(&c.lifecycle_path(name));
    for t in 1..4 {
        let stops = lc.stops_for(name, t);
        assert!(!stops.is_empty(), "removed task {t} was stopped");
        assert!(
            stops.iter().all(|(_, deleted, ok)| !deleted && *ok),
            "removed task {t}: only stop(false): {stops:?}"
        );
    }

    // Zero task configs: no task, connector still RUNNING.
    let t2 = now_ms();
    let mut zero = c.source_config(name, 1);
    zero["test.tasks"] = json!("0");
    let r = c.call(
        "PutConnectorConfig",
        json!({ "name": name, "config": zero }),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    c.wait_state(name, "STATE_RUNNING", "STATE_RUNNING", 0)
        .await;

    // tasks.max 1 -> 3.
    let t3 = now_ms();
    let r = c.call(
        "PutConnectorConfig",
        json!({ "name": name, "config": c.source_config(name, 3) }),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    c.wait_state(name, "STATE_RUNNING", "STATE_RUNNING", 3)
        .await;

    let lc = Lifecycle::read(&c.lifecycle_path(name));
    assert_never_above_limit(&lc, name, &[(0, 4), (t1, 1), (t2, 0), (t3, 3)]);
    assert!(
        lc.events.iter().all(|e| e.connector_deleted != Some(true)),
        "nothing was deleted, so no instance saw stop(true)"
    );
}
