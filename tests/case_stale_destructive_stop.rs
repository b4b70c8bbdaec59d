//! Issue 15, point 4: a destructive stop that reached a frozen executor must not run once
//! the executor's lease may have expired, and above all not after the connector's name
//! was reused (docs/contract.md, "Executor self-fencing").
//!
//! A real control plane and two real executors. The executor hosting the connector's task
//! is frozen with SIGSTOP; the connector is deleted. The deletion's stop(true) waits at the
//! frozen host, the lease expires, the cleanup is re-hosted on the live executor and the
//! deletion finishes; the name is created again (a new incarnation, placed on the live
//! executor). A second stop(true) with the fields the control plane fills (generation,
//! incarnation, epoch) was sent on an HTTP/2 connection opened before the freeze, so it
//! sits in the frozen process's socket the way the deletion's own stop did. Then SIGCONT:
//! the frozen executor must fence itself (its old instance gets stop(false), it registers
//! again) and run no stop(true); no instance of the new connector gets a stop(true).
//!
//! Build first: `cargo build -p wharf-control-plane -p wharf-executor-stock`.

use std::time::Duration;

use serde_json::json;
use tonic::Code;
use wharf::pb::v1 as pb;
use wharf::pb::v1::executor_client::ExecutorClient;
use wharf_harness::cluster::{CONVERGE, NOT_FOUND, TestCluster};
use wharf_harness::lifecycle::Lifecycle;
use wharf_harness::wait_until;

/// Bound on the queued stop's answer once the executor runs again.
const QUEUED_ANSWER: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_destructive_stop_queued_at_a_frozen_executor_does_not_run_after_the_name_was_reused() {
    let c = TestCluster::start(2).await;
    let name = "reused";
    let r = c.call(
        "CreateConnector",
        json!({ "name": name, "config": c.source_config(name, 1) }),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    let s = c
        .wait_state(name, "STATE_RUNNING", "STATE_RUNNING", 1)
        .await;
    let host = s["tasks"][0]["status"]["executorId"]
        .as_str()
        .expect("task host")
        .to_owned();
    let generation: u64 = s["tasks"][0]["status"]["generation"]
        .as_str()
        .and_then(|g| g.parse().ok())
        .expect("task generation");
    let idx: usize = host
        .strip_prefix("exec-")
        .and_then(|n| n.parse::<usize>().ok())
        .expect("exec-N")
        - 1;
    let old_incarnation = wait_until("the task's start line", CONVERGE, || {
        let l = Lifecycle::read(&c.lifecycle_path(name));
        let inc = l
            .of(name, Some(0))
            .iter()
            .find(|e| e.call == "start")
            .map(|e| e.incarnation.clone());
        async move { inc }
    })
    .await;
    let executors = c.call("ListExecutors", json!({}));
    let epoch: u64 = executors.body["executors"]
        .as_array()
        .and_then(|a| a.iter().find(|e| e["id"] == host.as_str()))
        .and_then(|e| e["epoch"].as_str())
        .and_then(|e| e.parse().ok())
        .expect("epoch of the host");

    // A connection to the host opened (and used) before the freeze.
    let addr = std::fs::read_to_string(c.executors[idx].data_dir.join("listen.addr"))
        .expect("listen.addr");
    let mut client = ExecutorClient::connect(format!("http://{}", addr.trim()))
        .await
        .expect("connect to the executor");
    client
        .list_assignments(pb::ListAssignmentsRequest {})
        .await
        .expect("executor answers before the freeze");

    c.executors[idx].freeze().await;
    let queued = tokio::spawn(async move {
        client
            .stop_task(pb::StopTaskRequest {
                task: Some(pb::TaskId {
                    connector: name.into(),
                    task: 0,
                }),
                connector_deleted: true,
                generation,
                timeout_ms: 0,
                incarnation: old_incarnation,
                executor_epoch: epoch,
                created_topics: Vec::new(),
            })
            .await
    });

    // The deletion's stop waits at the frozen host; after the lease it is re-hosted.
    let r = c.call("DeleteConnector", json!({ "name": name, "wait": true }));
    assert_eq!(r.code, 0, "{}", r.err);
    assert_eq!(r.body["deleted"], true, "{}", r.body);
    assert_eq!(
        c.call("GetConnector", json!({ "name": name })).code,
        NOT_FOUND
    );

    // The name is taken again: a new incarnation on the live executor.
    let r = c.call(
        "CreateConnector",
        json!({ "name": name, "config": c.source_config(name, 1) }),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    c.wait_state(name, "STATE_RUNNING", "STATE_RUNNING", 1)
        .await;
    let new_incarnation = wait_until("the new incarnation's task start", CONVERGE, || {
        let l = Lifecycle::read(&c.lifecycle_path(name));
        let old = l.of(name, Some(0)).first().map(|e| e.incarnation.clone());
        let inc = l
            .of(name, Some(0))
            .iter()
            .filter(|e| e.call == "start" && Some(&e.incarnation) != old.as_ref())
            .map(|e| e.incarnation.clone())
            .next();
        async move { inc }
    })
    .await;

    c.executors[idx].thaw();
    let answer = tokio::time::timeout(QUEUED_ANSWER, queued)
        .await
        .expect("the queued stop is answered after SIGCONT")
        .expect("join");
    match &answer {
        Err(status) => assert_eq!(status.code(), Code::FailedPrecondition, "{status:?}"),
        Ok(r) => assert!(
            !r.get_ref().connector_deleted,
            "the queued stop(true) ran: {r:?}"
        ),
    }
    // The resumed executor fenced itself: its old instance got stop(false), and it is
    // registered again.
    wait_until("the frozen host's old instance stopped", CONVERGE, || {
        let l = Lifecycle::read(&c.lifecycle_path(name));
        let stopped = l
            .stops(name, Some(0))
            .iter()
            .any(|s| s.executor == host && !s.connector_deleted);
        async move { stopped.then_some(()) }
    })
    .await;
    c.wait_alive(2).await;

    let l = Lifecycle::read(&c.lifecycle_path(name));
    let on_frozen: Vec<_> = l
        .events
        .iter()
        .filter(|e| e.executor == host && e.call == "stop" && e.connector_deleted == Some(true))
        .collect();
    assert!(
        on_frozen.is_empty(),
        "a stop(true) ran on the frozen executor after it resumed: {on_frozen:?}"
    );
    let new_stops: Vec<_> = l
        .events
        .iter()
        .filter(|e| {
            e.incarnation == new_incarnation
                && e.call == "stop"
                && e.connector_deleted == Some(true)
        })
        .collect();
    // (A stop(false) is allowed: the returning executor may take the task back.)
    assert!(
        new_stops.is_empty(),
        "a re-created connector's instance got stop(true): {new_stops:?}"
    );
    // The old incarnation's cleanup ran exactly once, re-hosted, with true.
    let old_trues: Vec<_> = l
        .events
        .iter()
        .filter(|e| {
            e.incarnation != new_incarnation
                && e.call == "stopped"
                && e.ok
                && e.connector_deleted == Some(true)
                && e.task == Some(0)
        })
        .collect();
    assert_eq!(old_trues.len(), 1, "{old_trues:?}");
    assert_ne!(old_trues[0].executor, host);
    // The re-created connector runs (its task may be moving back to the returning
    // executor, RESTARTING for a moment: wait for RUNNING rather than read once).
    c.wait_state(name, "STATE_RUNNING", "STATE_RUNNING", 1)
        .await;
}
