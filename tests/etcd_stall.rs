//! An etcd that stops answering for a while (frozen: its port accepts, no call is
//! answered; a disk stall or a long defragmentation looks the same) makes the control
//! plane's store calls wait up to their 5 s timeout. Executor heartbeats must still be
//! answered at once: the lease lives in the control plane's memory, and an executor
//! whose heartbeats time out fences itself and stops every task. Before, a heartbeat's
//! status correction read the store before the answer, so a stall longer than an
//! executor's lease stopped every task of the cluster (with `connector_deleted =
//! false`) and started them again once etcd answered.
//!
//! Needs the `etcd` binary (Debian `etcd-server`, see scripts/setup-services). Build
//! first: `cargo build -p wharf-control-plane -p wharf-executor-stock`.

use serde_json::json;
use wharf_harness::cluster::{CONVERGE, TEST_LEASE_MS, TestCluster};
use wharf_harness::etcd::TestEtcd;
use wharf_harness::lifecycle::Lifecycle;
use wharf_harness::wait_until;

/// Election TTL of the control plane, in seconds: the leader keeps leading through the
/// stall (it steps down between a third and two thirds of the TTL into one, docs/state.md;
/// past that a stall is a failover, tests/etcd_failover.rs).
const ELECTION_TTL_SECS: u32 = 60;

/// The control plane's log line of a herder pass that failed (its store read timed out
/// while etcd was frozen).
const PASS_FAILED: &str = "herder pass failed";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_etcd_stops_no_task_while_the_leader_holds_the_leases() {
    let etcd = TestEtcd::start();
    let c = TestCluster::start_with(1, etcd.store_flags(ELECTION_TTL_SECS)).await;
    let name = "steady";
    let r = c.call(
        "CreateConnector",
        json!({ "name": name, "config": c.source_config(name, 2) }),
    );
    assert_eq!(r.code, 0, "create: {}", r.err);
    let before = c
        .wait_state(name, "STATE_RUNNING", "STATE_RUNNING", 2)
        .await;
    let (epoch, state) = c.first_executor_epoch_and_state();
    assert_eq!(state, "EXECUTOR_STATE_ALIVE");

    // Frozen until two herder passes gave up on the store: each waited its 5 s call
    // timeout, so the stall lasts several times the executor's lease.
    let failed_before = c.cp_log().matches(PASS_FAILED).count();
    etcd.freeze().await;
    wait_until(
        "two herder passes timed out on the frozen etcd",
        CONVERGE,
        || async { (c.cp_log().matches(PASS_FAILED).count() >= failed_before + 2).then_some(()) },
    )
    .await;
    etcd.thaw();

    // The executor kept its registration, and no instance was stopped or started again.
    let after = c
        .wait_state(name, "STATE_RUNNING", "STATE_RUNNING", 2)
        .await;
    assert_eq!(
        wharf_harness::audit::generations(&after),
        wharf_harness::audit::generations(&before),
        "the tasks were not restarted: {after}"
    );
    assert_eq!(
        c.first_executor_epoch_and_state(),
        (epoch, state),
        "the executor kept its epoch (it did not fence itself and register again)"
    );
    let lc = Lifecycle::read(&c.lifecycle_path(name));
    for task in [None, Some(0), Some(1)] {
        assert_eq!(
            lc.stops(name, task),
            Vec::new(),
            "no stop of {name} {task:?} in {} ms leases",
            TEST_LEASE_MS
        );
    }
}
