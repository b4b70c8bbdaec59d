//! Deleting a connector that is PAUSED, STOPPED or FAILED while no executor with its
//! plugin is alive (every executor killed with kill -9 and its lease expired): the
//! deletion is recorded, shows DELETING with each step waiting for a capable executor,
//! and runs once one registers: every task and the connector instance get exactly one
//! completed stop(true), on cleanup-only instances (docs/contract.md points 3, 5).
//!
//! UNASSIGNED (created while no executor was alive) is
//! `control_plane_cleanup::deleting_an_unassigned_connector_waits_for_a_capable_executor`.
//!
//! Build first: `cargo build -p wharf-control-plane -p wharf-executor-stock`.

use serde_json::json;
use wharf_harness::cluster::CONVERGE;
use wharf_harness::fault::{
    admin_forgot, completed_trues, create_running, exactly_one_completed_true, gone,
    start_mtls_cluster, units, wait_executor,
};
use wharf_harness::lifecycle::Lifecycle;
use wharf_harness::wait_until;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_stopped_and_failed_connectors_deleted_with_no_executor_alive_are_cleaned_up_when_one_registers()
 {
    let mut c = start_mtls_cluster(1, &[]).await;

    create_running(&c, "parked-paused", c.source_config("parked-paused", 2), 2).await;
    assert_eq!(
        c.call("PauseConnector", json!({ "name": "parked-paused" }))
            .code,
        0
    );
    c.wait_state("parked-paused", "STATE_PAUSED", "STATE_PAUSED", 2)
        .await;

    create_running(
        &c,
        "parked-stopped",
        c.source_config("parked-stopped", 2),
        2,
    )
    .await;
    assert_eq!(
        c.call("StopConnector", json!({ "name": "parked-stopped" }))
            .code,
        0
    );
    c.wait_state("parked-stopped", "STATE_STOPPED", "STATE_STOPPED", 2)
        .await;

    let mut cfg = c.source_config("parked-failed", 1);
    cfg["test.start.fail"] = json!("true");
    let r = c.call(
        "CreateConnector",
        json!({ "name": "parked-failed", "config": cfg }),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    wait_until("connector FAILED", CONVERGE, || async {
        (c.status("parked-failed")?["connector"]["state"] == "STATE_FAILED").then_some(())
    })
    .await;

    c.executors[0].kill9();
    wait_executor(&c, "exec-1", "EXECUTOR_STATE_LOST").await;

    let names = ["parked-paused", "parked-stopped", "parked-failed"];
    for name in names {
        let r = c.call("DeleteConnector", json!({ "name": name }));
        assert_eq!(r.code, 0, "{name}: {}", r.err);
        assert_eq!(r.body["deleted"], false, "{}", r.body);
        assert_eq!(
            r.body["status"]["connector"]["state"], "STATE_DELETING",
            "{}",
            r.body
        );
    }
    for name in names {
        wait_until(
            &format!("{name} waiting for a capable executor"),
            CONVERGE,
            || async {
                let s = c.status(name)?;
                let first = &s["deletion"]["steps"][0];
                (s["connector"]["state"] == "STATE_DELETING"
                    && first["lastError"]
                        .as_str()
                        .is_some_and(|e| e.contains("no live executor"))
                    && first["attempts"] == 0)
                    .then_some(())
            },
        )
        .await;
        let r = c.call(
            "CreateConnector",
            json!({ "name": name, "config": c.source_config(name, 1) }),
        );
        assert_eq!(
            r.code,
            wharf_harness::cluster::FAILED_PRECONDITION,
            "{name}: {}",
            r.err
        );
    }

    c.executors[0].restart();
    for name in names {
        gone(&c, name).await;
        admin_forgot(&c, name);
    }

    for name in ["parked-paused", "parked-stopped"] {
        let lc = Lifecycle::read(&c.lifecycle_path(name));
        exactly_one_completed_true(&lc, name, &units(2));
        for u in units(2) {
            let done = completed_trues(&lc, name, u);
            assert!(done[0].cleanup_only, "{name} {u:?}: cleanup-only: {done:?}");
        }
    }
    let lc = Lifecycle::read(&c.lifecycle_path("parked-failed"));
    let done = completed_trues(&lc, "parked-failed", None);
    assert_eq!(done.len(), 1, "{:?}", lc.calls("parked-failed", None));
    assert!(done[0].cleanup_only);
}
