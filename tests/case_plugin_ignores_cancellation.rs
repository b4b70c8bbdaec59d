//! Issue 15, point 5: plugins that block their thread and ignore cancellation cannot
//! starve the executor. A real control plane and one real executor; a connector whose ten
//! tasks block in `poll` (std::thread::sleep, cancellation ignored) next to a bystander
//! connector. The stuck tasks are abandoned at the cleanup timeout of a deletion; the
//! executor keeps answering and keeps its lease (same epoch, ALIVE), the bystander keeps
//! committing offsets, ListAssignments shows the abandoned instances until their calls
//! return, and the deletion's final steps name them.
//!
//! Build first: `cargo build -p wharf-control-plane -p wharf-executor-stock`.

use std::time::{Duration, Instant};

use serde_json::json;
use wharf::pb::v1 as pb;
use wharf::pb::v1::executor_client::ExecutorClient;
use wharf_harness::cluster::{CONVERGE, TestCluster};
use wharf_harness::wait_until;

/// Stuck tasks: more than the executor's own runtime has worker threads.
const STUCK_TASKS: u32 = 10;
/// How long each stuck poll holds its thread, in milliseconds.
const POLL_BLOCK_MS: u64 = 15_000;
/// Longest an executor or admin call may take meanwhile.
const CALL_BOUND: Duration = Duration::from_secs(2);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugins_that_ignore_cancellation_are_abandoned_shown_and_do_not_starve_the_executor() {
    let c = TestCluster::start(1).await;
    let bystander = "bystander";
    let r = c.call(
        "CreateConnector",
        json!({ "name": bystander, "config": c.source_config(bystander, 1) }),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    c.wait_state(bystander, "STATE_RUNNING", "STATE_RUNNING", 1)
        .await;

    let stuck = "stuck";
    let mut config = c.source_config(stuck, STUCK_TASKS);
    config["test.tasks"] = json!(STUCK_TASKS.to_string());
    config["test.poll.block.ms"] = json!(POLL_BLOCK_MS.to_string());
    config["test.ignore.cancel"] = json!("true");
    config["cleanup.timeout.ms"] = json!("500");
    let r = c.call(
        "CreateConnector",
        json!({ "name": stuck, "config": config }),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    c.wait_state(
        stuck,
        "STATE_RUNNING",
        "STATE_RUNNING",
        STUCK_TASKS as usize,
    )
    .await;
    let (epoch, state) = c.first_executor_epoch_and_state();
    assert_eq!(state, "EXECUTOR_STATE_ALIVE");

    let addr =
        std::fs::read_to_string(c.executors[0].data_dir.join("listen.addr")).expect("listen.addr");
    let mut executor = ExecutorClient::connect(format!("http://{}", addr.trim()))
        .await
        .expect("connect to the executor");

    let r = c.call("DeleteConnector", json!({ "name": stuck }));
    assert_eq!(r.code, 0, "{}", r.err);
    // Every stuck task is abandoned, and shown so, while the executor answers promptly.
    let abandoned = wait_until("the stuck tasks to be shown abandoned", CONVERGE, || {
        let mut executor = executor.clone();
        async move {
            let started = Instant::now();
            let r = executor
                .list_assignments(pb::ListAssignmentsRequest {})
                .await
                .expect("ListAssignments answers")
                .into_inner();
            assert!(
                started.elapsed() < CALL_BOUND,
                "took {:?}",
                started.elapsed()
            );
            // Listed all along: while their stops wait on the blocked polls, and then
            // abandoned (a stop under way is not a stopped task).
            let listed = r
                .tasks
                .iter()
                .filter(|t| t.task.as_ref().is_some_and(|id| id.connector == stuck))
                .count();
            assert_eq!(
                listed, STUCK_TASKS as usize,
                "a stuck task vanished from ListAssignments while its stop ran"
            );
            let shown = r
                .tasks
                .iter()
                .filter(|t| t.abandoned && t.task.as_ref().is_some_and(|id| id.connector == stuck))
                .count();
            (r.abandoned >= STUCK_TASKS && shown == STUCK_TASKS as usize).then_some(r)
        }
    })
    .await;
    assert!(!abandoned.lease_expired);

    // The deletion ends, and its steps name the abandoned instances (in the status while
    // it runs, and in the control plane's step log).
    let mut named_in_status = false;
    wait_until("the deletion to end", CONVERGE, || {
        let r = c.call("GetConnectorStatus", json!({ "name": stuck }));
        let named = r.body["status"]["deletion"]["steps"]
            .as_array()
            .is_some_and(|steps| {
                steps
                    .iter()
                    .any(|s| s["abandoned"].as_array().is_some_and(|a| !a.is_empty()))
            });
        named_in_status |= named;
        async move { (r.code != 0).then_some(()) }
    })
    .await;
    let log = c.cp_log();
    assert!(
        named_in_status || log.contains("abandoned=[\"generation"),
        "no deletion step named an abandoned instance"
    );
    assert!(
        log.contains("abandoned=[\"generation"),
        "the control plane's step log names no abandoned instance"
    );

    // The bystander kept working all along; the executor kept its lease.
    let before = c.committed_seq(bystander).unwrap_or(0);
    wait_until("the bystander to commit more offsets", CONVERGE, || async {
        (c.committed_seq(bystander).unwrap_or(0) > before).then_some(())
    })
    .await;
    assert_eq!(
        c.first_executor_epoch_and_state(),
        (epoch.clone(), "EXECUTOR_STATE_ALIVE".to_owned())
    );

    // Once the stuck calls return, the abandoned instances are gone.
    wait_until(
        "the abandoned instances to go once their calls returned",
        Duration::from_millis(POLL_BLOCK_MS) + CONVERGE,
        || {
            let mut executor = executor.clone();
            async move {
                let r = executor
                    .list_assignments(pb::ListAssignmentsRequest {})
                    .await
                    .ok()?
                    .into_inner();
                (r.abandoned == 0).then_some(())
            }
        },
    )
    .await;
    executor
        .list_assignments(pb::ListAssignmentsRequest {})
        .await
        .expect("still answering");
    assert_eq!(
        c.first_executor_epoch_and_state(),
        (epoch, "EXECUTOR_STATE_ALIVE".to_owned())
    );
}
