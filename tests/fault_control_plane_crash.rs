//! The control plane dies (abort, as kill -9) at three points of a deletion: before the
//! fan-out, in the middle of it, and before the final removal. Restarted on the same data
//! dir, it resumes the deletion from its store and completes it: every task and the
//! connector instance saw exactly one completed stop(true), and neither the admin API nor
//! the store file holds anything of the connector afterwards (docs/contract.md points 2, 4, 7).
//!
//! The crash points are the test-only `WHARF_FAULT_CRASH_AT` hook of
//! `control-plane/src/reconcile/fault.rs`; a crash "during StopTask" with a real kill -9 is
//! `control_plane_restart.rs`.
//!
//! Build first: `cargo build -p wharf-control-plane -p wharf-executor-stock`.

use serde_json::json;
use wharf_harness::cluster::{CONVERGE, TestCluster};
use wharf_harness::fault::{
    CRASH_AT_ENV, admin_forgot, create_running, exactly_one_completed_true, gone,
    start_mtls_cluster, store_keys_of, units, wait_exit,
};
use wharf_harness::lifecycle::Lifecycle;
use wharf_harness::wait_until;

/// Completed stop(true) calls of `name` so far, over all its units.
fn trues_so_far(c: &TestCluster, name: &str) -> usize {
    let lc = Lifecycle::read(&c.lifecycle_path(name));
    units(2)
        .into_iter()
        .map(|u| wharf_harness::fault::completed_trues(&lc, name, u).len())
        .sum()
}

async fn crash_during_deletion_and_resume(point: &str, trues_before_restart: &[usize]) {
    let mut c = start_mtls_cluster(2, &[(CRASH_AT_ENV, point)]).await;
    let name = "crashy";
    let mut cfg = c.source_config(name, 2);
    cfg["test.records.per.poll"] = json!("5");
    create_running(&c, name, cfg, 2).await;
    wait_until("committed source offsets", CONVERGE, || async {
        let r = c.call("GetOffsets", json!({ "name": name }));
        r.body["offsets"]
            .as_array()
            .is_some_and(|a| !a.is_empty())
            .then_some(())
    })
    .await;

    // The answer may or may not make it out before the crash: recorded before answered.
    // Without an answer the client sees UNAVAILABLE (no connection) or, when the process
    // died with the call on the wire, tonic's UNKNOWN "transport error" or, when it died
    // while the answer's body was on its way, UNKNOWN "h2 protocol error".
    let r = c.call("DeleteConnector", json!({ "name": name }));
    let lost_answer = r.code == 14
        || (r.code == 2
            && (r.err.contains("transport error") || r.err.contains("h2 protocol error")));
    assert!(r.code == 0 || lost_answer, "{} {}", r.code, r.err);
    wait_exit(&mut c.cp, &format!("control plane to abort at {point}")).await;
    assert!(
        c.cp_log().contains(&format!("{CRASH_AT_ENV}={point}")),
        "aborted at {point}"
    );
    let n = trues_so_far(&c, name);
    assert!(
        trues_before_restart.contains(&n),
        "{point}: {n} completed stop(true) before the restart, expected one of {trues_before_restart:?}"
    );

    // Nothing half-deleted while it is down: the connector and its deletion record are
    // both still in the store (the final removal is one write).
    let held = store_keys_of(&c.store_file(), name);
    assert!(
        held.contains(&format!("connectors/{name}")) && held.contains(&format!("deletions/{name}")),
        "{point}: store holds {held:?}"
    );
    assert!(
        held.iter().any(|k| k.starts_with("offsets/")),
        "{point}: offsets kept until the end: {held:?}"
    );

    c.restart_control_plane().await;
    gone(&c, name).await;

    let lc = Lifecycle::read(&c.lifecycle_path(name));
    exactly_one_completed_true(&lc, name, &units(2));
    admin_forgot(&c, name);
    c.cp.kill9();
    let left = store_keys_of(&c.store_file(), name);
    assert!(left.is_empty(), "store still holds {left:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_plane_crash_before_the_fan_out_resumes_the_deletion() {
    crash_during_deletion_and_resume("before_fanout", &[0]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_plane_crash_in_the_middle_of_the_fan_out_resumes_the_deletion() {
    // The other task's stop was sent in the same parallel fan-out: it may complete before
    // the abort. Either way the resumed deletion must not run any cleanup twice.
    crash_during_deletion_and_resume("mid_fanout", &[1, 2]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_plane_crash_before_the_final_removal_resumes_the_deletion() {
    crash_during_deletion_and_resume("before_final_removal", &[3]).await;
}
