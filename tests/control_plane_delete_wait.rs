//! `DeleteConnector` with `wait = true` answers OK only when the deletion finished; when
//! it did not finish in time the call fails with DEADLINE_EXCEEDED, naming the first
//! failing cleanup step and what the operator can do, and the deletion stays recorded
//! (DELETING). A deletion that waits for an executor retries with backoff and logs its
//! waiting state once per change instead of twice per pass. Real control plane, real
//! executors, the typed admin client.
//!
//! Build first: `cargo build -p wharf-control-plane -p wharf-executor-stock`.

use serde_json::json;
use wharf_harness::cluster::{CONVERGE, NOT_FOUND, TestCluster};
use wharf_harness::wait_until;

/// gRPC DEADLINE_EXCEEDED.
const DEADLINE_EXCEEDED: i32 = 4;
/// Wait bound given to the deletions that cannot finish, in milliseconds.
const SHORT_WAIT_MS: u32 = 4_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_delete_that_does_not_finish_fails_with_deadline_exceeded() {
    let c = TestCluster::start(1).await;
    let name = "stuck";
    let mut cfg = c.source_config(name, 1);
    cfg["test.stop.fail.times"] = json!("100");
    cfg["cleanup.max.attempts"] = json!("1");
    let r = c.call("CreateConnector", json!({ "name": name, "config": cfg }));
    assert_eq!(r.code, 0, "{}", r.err);
    c.wait_state(name, "STATE_RUNNING", "STATE_RUNNING", 1)
        .await;

    // What a script running `DeleteConnector && echo deleted` sees: a failed call, not OK.
    let r = c.call(
        "DeleteConnector",
        json!({ "name": name, "wait": true, "wait_timeout_ms": SHORT_WAIT_MS }),
    );
    assert_eq!(r.code, DEADLINE_EXCEEDED, "{r:?}");
    for part in [
        "is recorded but did not finish within 4000 ms",
        "still in progress",
        "task 0 FAILED after 1 attempts",
        "injected",
        "GetConnectorStatus",
        "RetryCleanup",
        "force=true",
    ] {
        assert!(r.err.contains(part), "{part:?} missing in: {}", r.err);
    }
    let s = c.status(name).expect("still there");
    assert_eq!(s["connector"]["state"], "STATE_DELETING", "{s}");

    // force finishes it; the OK answer says deleted.
    let r = c.call(
        "DeleteConnector",
        json!({ "name": name, "wait": true, "force": true }),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    assert_eq!(r.body["deleted"], json!(true));
    assert_eq!(
        c.call("GetConnectorStatus", json!({ "name": name })).code,
        NOT_FOUND
    );
}

/// INFO lines of the control plane about the cleanup steps of `name`.
fn cleanup_info_lines(c: &TestCluster, name: &str) -> Vec<String> {
    let needle = format!("connector={name} ");
    c.cp_log()
        .lines()
        .filter(|l| l.contains(" INFO ") && l.contains(&needle) && l.contains("cleanup"))
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deletion_waiting_for_an_executor_backs_off_and_logs_once_per_change() {
    let mut c = TestCluster::start(1).await;
    let name = "flood";
    let r = c.call(
        "CreateConnector",
        json!({ "name": name, "config": c.source_config(name, 2) }),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    c.wait_state(name, "STATE_RUNNING", "STATE_RUNNING", 2)
        .await;

    // The only executor dies: the deletion first waits for its host, then (lease gone)
    // for any live executor offering the plugin.
    c.executors[0].kill9();
    let r = c.call("DeleteConnector", json!({ "name": name }));
    assert_eq!(r.code, 0, "{}", r.err);
    wait_until("cleanup waits for a live executor", CONVERGE, || async {
        let s = c.status(name)?;
        s.to_string()
            .contains("no live executor offers plugin test-source")
            .then_some(())
    })
    .await;

    // A waiting delete over a window of several seconds: it times out naming the wait.
    let r = c.call(
        "DeleteConnector",
        json!({ "name": name, "wait": true, "wait_timeout_ms": 6_000 }),
    );
    assert_eq!(r.code, DEADLINE_EXCEEDED, "{r:?}");
    assert!(
        r.err.contains("no live executor offers plugin test-source"),
        "{}",
        r.err
    );

    // Before: two INFO lines per step about every 300 ms (dozens in this window). Now:
    // one per step and change of waiting state (host unreachable, host not reachable yet,
    // no executor, the retry asked by the second delete), however long the wait: at most
    // the "deletion recorded" line plus four per step for the two steps, and one of slack
    // per step for a state seen again after a lease flip.
    let lines = cleanup_info_lines(&c, name);
    assert!(
        lines.len() <= 11,
        "{} INFO cleanup lines:\n{}",
        lines.len(),
        lines.join("\n")
    );

    // An executor offering the plugin comes back: the deletion finishes without help.
    c.add_executor(0).await;
    wait_until("deletion finished", CONVERGE, || async {
        (c.call("GetConnectorStatus", json!({ "name": name })).code == NOT_FOUND).then_some(())
    })
    .await;
}
