//! Handed case 04: a task blocked inside poll still stops, promptly, with the right flag.
//!
//! A real control plane and two real executors (127.0.0.2, 127.0.0.3), driven through the
//! harness's typed admin client; the `test-source` plugin's poll waits ten minutes for
//! data that never comes.
//! The outcome is read from its lifecycle file: the delete reaches every blocked task as
//! `stop(true)`, a restart and a pause as `stop(false)`, each within the executors'
//! graceful timeout; a plugin that ignores cancellation is abandoned at the cleanup
//! timeout and its cleanup re-runs on a fresh cleanup-only instance, while other
//! connectors' admin calls are answered normally.
//!
//! Build first: `cargo build -p wharf-control-plane -p wharf-executor-stock`.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use wharf::pb::v1 as pb;
use wharf_harness::cluster::{CONVERGE, NOT_FOUND, TestCluster};
use wharf_harness::lifecycle::Lifecycle;
use wharf_harness::wait_until;

/// The executors' graceful timeout in `TestCluster`, in milliseconds: the bound on a stop
/// reaching a task blocked in poll, counted from when the admin call that causes it
/// returned. Not from before the call: the client's cost is not the stop's (a client
/// process start, about 1 s on a loaded 2-core machine, once made this bound flaky).
const GRACEFUL_TIMEOUT_MS: i64 = 3_000;
/// How long the blocked poll waits, in milliseconds (ten minutes).
const POLL_BLOCK_MS: &str = "600000";
/// Longest an admin call may take while a deletion is pending.
const ADMIN_CALL_BOUND: Duration = Duration::from_secs(2);
/// `cleanup.timeout.ms` of the connector whose plugin ignores cancellation: how long its
/// deletion waits out the stuck stop. Two admin call bounds, so that the deletion is
/// certainly still pending when the first status call after DeleteConnector arrives (with
/// 1 s it was sometimes gone before that call when each call cost about 1 s).
const STUCK_CLEANUP_TIMEOUT_MS: u128 = 2 * ADMIN_CALL_BOUND.as_millis();

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// A test-source config whose poll blocks for ten minutes.
fn blocking_config(c: &TestCluster, name: &str, tasks: u32, extra: &[(&str, &str)]) -> Value {
    let mut config = c.source_config(name, tasks);
    config["test.poll.block.ms"] = json!(POLL_BLOCK_MS);
    for (k, v) in extra {
        config[*k] = json!(v);
    }
    config
}

/// Waits until instance number `n` of every task of `name` is blocked in its first poll.
async fn wait_blocked_in_poll(c: &TestCluster, name: &str, tasks: u32, n: usize) {
    let path = c.lifecycle_path(name);
    wait_until(
        &format!("{name}: instance {n} of each task in poll"),
        CONVERGE,
        || {
            let l = Lifecycle::read(&path);
            let all = (0..tasks).all(|t| {
                l.instances(name, Some(t))
                    .get(n)
                    .is_some_and(|i| l.of_instance(i).iter().any(|e| e.call == "poll"))
            });
            async move { all.then_some(()) }
        },
    )
    .await;
}

/// When (wall clock, ms) the `stopped` line of instance `instance` was written.
fn stopped_at(l: &Lifecycle, instance: &str) -> Option<i64> {
    l.of_instance(instance)
        .iter()
        .find(|e| e.call == "stopped" && e.ok)
        .map(|e| e.ts_ms)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_while_poll_blocks_delete_reaches_every_blocked_task_with_stop_true() {
    let c = TestCluster::start(2).await;
    let name = "blocked";
    let r = c.call(
        "CreateConnector",
        json!({ "name": name, "config": blocking_config(&c, name, 2, &[]) }),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    c.wait_state(name, "STATE_RUNNING", "STATE_RUNNING", 2)
        .await;
    wait_blocked_in_poll(&c, name, 2, 0).await;

    let r = c.call("DeleteConnector", json!({ "name": name }));
    let returned = now_ms();
    assert_eq!(r.code, 0, "{}", r.err);
    wait_until(&format!("{name} deleted"), CONVERGE, || async {
        (c.call("GetConnector", json!({ "name": name })).code == NOT_FOUND).then_some(())
    })
    .await;

    let l = Lifecycle::read(&c.lifecycle_path(name));
    for t in 0..2 {
        let stops = l.stops(name, Some(t));
        assert_eq!(stops.len(), 1, "task {t}: {stops:?}");
        assert!(
            stops[0].connector_deleted && stops[0].ok,
            "task {t}: {stops:?}"
        );
        let at = stopped_at(&l, &stops[0].instance).unwrap();
        assert!(
            at - returned < GRACEFUL_TIMEOUT_MS,
            "task {t} stopped {} ms after the delete returned",
            at - returned
        );
    }
    let connector = l.stops(name, None);
    assert_eq!(connector.len(), 1, "{connector:?}");
    assert!(connector[0].connector_deleted && connector[0].ok);
    assert_eq!(
        c.call("GetConnector", json!({ "name": name })).code,
        NOT_FOUND
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_while_poll_blocks_restart_and_pause_stop_the_blocked_task_with_false() {
    let c = TestCluster::start(2).await;
    let name = "blocked-again";
    let r = c.call(
        "CreateConnector",
        json!({ "name": name, "config": blocking_config(&c, name, 1, &[]) }),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    c.wait_state(name, "STATE_RUNNING", "STATE_RUNNING", 1)
        .await;
    wait_blocked_in_poll(&c, name, 1, 0).await;

    // Restart: the blocked instance gets stop(false); a new instance starts and blocks.
    let r = c.call(
        "RestartConnector",
        json!({ "name": name, "include_tasks": true }),
    );
    let returned = now_ms();
    assert_eq!(r.code, 0, "{}", r.err);
    wait_blocked_in_poll(&c, name, 1, 1).await;
    let l = Lifecycle::read(&c.lifecycle_path(name));
    let first = &l.instances(name, Some(0))[0];
    let stops = l.stops(name, Some(0));
    assert_eq!(stops.len(), 1, "{stops:?}");
    assert_eq!(&stops[0].instance, first);
    assert!(!stops[0].connector_deleted && stops[0].ok);
    let after = stopped_at(&l, first).unwrap() - returned;
    assert!(
        after < GRACEFUL_TIMEOUT_MS,
        "restart: stopped {after} ms after the call returned"
    );

    // Pause: the second blocked instance gets stop(false).
    assert_eq!(c.call("PauseConnector", json!({ "name": name })).code, 0);
    let returned = now_ms();
    c.wait_state(name, "STATE_PAUSED", "STATE_PAUSED", 1).await;
    let l = Lifecycle::read(&c.lifecycle_path(name));
    let second = &l.instances(name, Some(0))[1];
    let stops = l.stops(name, Some(0));
    assert_eq!(stops.len(), 2, "{stops:?}");
    assert_eq!(&stops[1].instance, second);
    assert!(!stops[1].connector_deleted && stops[1].ok);
    let after = stopped_at(&l, second).unwrap() - returned;
    assert!(
        after < GRACEFUL_TIMEOUT_MS,
        "pause: stopped {after} ms after the call returned"
    );
    assert!(
        l.events.iter().all(|e| e.connector_deleted != Some(true)),
        "no stop(true) without a delete"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_while_poll_blocks_a_plugin_ignoring_cancellation_is_abandoned_and_cleanup_reruns_cleanup_only()
 {
    let c = TestCluster::start(2).await;
    let name = "stuck";
    let config = blocking_config(
        &c,
        name,
        1,
        &[
            ("test.ignore.cancel", "true"),
            ("cleanup.timeout.ms", &STUCK_CLEANUP_TIMEOUT_MS.to_string()),
        ],
    );
    let r = c.call("CreateConnector", json!({ "name": name, "config": config }));
    assert_eq!(r.code, 0, "{}", r.err);
    let bystander = "bystander";
    let r = c.call(
        "CreateConnector",
        json!({ "name": bystander, "config": c.source_config(bystander, 1) }),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    c.wait_state(name, "STATE_RUNNING", "STATE_RUNNING", 1)
        .await;
    c.wait_state(bystander, "STATE_RUNNING", "STATE_RUNNING", 1)
        .await;
    wait_blocked_in_poll(&c, name, 1, 0).await;

    // Timed calls go through one client held open, so that the bound measures the control
    // plane, not a new connection.
    let mut admin = c.admin();
    let status = |name: &str| pb::GetConnectorStatusRequest {
        name: name.to_owned(),
    };
    let r = c.call("DeleteConnector", json!({ "name": name }));
    assert_eq!(r.code, 0, "{}", r.err);
    // While the deletion waits out the stuck stop, other connectors are served normally.
    let mut answered = 0;
    let mut pace = tokio::time::interval(Duration::from_millis(20));
    while admin.get_connector_status(status(name)).await.is_ok() {
        pace.tick().await;
        let started = Instant::now();
        let s = admin
            .get_connector_status(status(bystander))
            .await
            .expect("bystander status")
            .into_inner()
            .status
            .and_then(|s| s.connector)
            .expect("bystander connector status");
        assert_eq!(s.state(), pb::State::Running, "{s:?}");
        assert!(
            started.elapsed() < ADMIN_CALL_BOUND,
            "admin call took {:?}",
            started.elapsed()
        );
        answered += 1;
        assert!(answered < 100_000, "the deletion did not finish");
    }
    assert!(answered > 0);
    assert_eq!(
        c.call("GetConnector", json!({ "name": name })).code,
        NOT_FOUND
    );

    let l = Lifecycle::read(&c.lifecycle_path(name));
    let instances = l.instances(name, Some(0));
    // The stuck instance never saw a stop: it was abandoned, not called concurrently.
    assert!(
        l.of_instance(&instances[0])
            .iter()
            .all(|e| e.call != "stop")
    );
    // The cleanup ran once, on a fresh cleanup-only instance, with true.
    let stops = l.stops(name, Some(0));
    assert_eq!(stops.len(), 1, "{stops:?}");
    assert!(
        stops[0].cleanup_only && stops[0].connector_deleted && stops[0].ok,
        "{stops:?}"
    );
    assert!(
        l.of_instance(&stops[0].instance)
            .iter()
            .all(|e| e.call != "poll")
    );
    // The timeout was reported by the executor that abandoned the instance.
    let logs: String = c.executors.iter().map(wharf_harness::Proc::log).collect();
    assert!(
        logs.contains("TimedOut"),
        "no executor reported the abandoned stop"
    );
    let connector = l.stops(name, None);
    assert_eq!(connector.len(), 1);
    assert!(connector[0].connector_deleted && connector[0].ok);
}
