//! A delete racing with another admin call on the same connector, both sent at the same
//! moment from two threads (typed admin client, real processes): create of the same name, a
//! restart, a config update, and a second delete. One call wins clearly, the state is
//! consistent, and cleanup is exactly as the contract says: a deleted connector's every
//! unit that ever ran got exactly one completed stop(true), every instance that started
//! was stopped, and a connector that survived never saw stop(true). A create (or a put,
//! which creates) that lands after the deletion already finished is a legitimate winner
//! too: it makes a new incarnation that starts only after the old one's cleanup ended.
//!
//! Build first: `cargo build -p wharf-control-plane -p wharf-executor-stock`.

use std::sync::{Arc, Barrier};

use serde_json::{Value, json};
use wharf_harness::cluster::{
    ALREADY_EXISTS, CONVERGE, Call, FAILED_PRECONDITION, NOT_FOUND, TestCluster, call_at,
};
use wharf_harness::fault::{
    admin_forgot, completed_trues, create_running, gone, start_mtls_cluster,
};
use wharf_harness::lifecycle::Lifecycle;
use wharf_harness::wait_until;

/// Sends both calls at the same moment; returns their results in order.
fn at_once(c: &TestCluster, a: (&str, Value), b: (&str, Value)) -> (Call, Call) {
    let barrier = Arc::new(Barrier::new(2));
    let spawn = |(method, body): (&str, Value)| {
        let (addr, barrier) = (c.addr.clone(), barrier.clone());
        let method = format!("wharf.v1.ConnectorAdmin/{method}");
        std::thread::spawn(move || {
            barrier.wait();
            call_at(&addr, &method, &body)
        })
    };
    let (ta, tb) = (spawn(a), spawn(b));
    (ta.join().expect("thread"), tb.join().expect("thread"))
}

/// Units (task index or None) that appear in the lifecycle file.
fn seen_units(lc: &Lifecycle, name: &str) -> Vec<Option<u32>> {
    let mut u: Vec<Option<u32>> = lc
        .events
        .iter()
        .filter(|e| e.connector == name)
        .map(|e| e.task)
        .collect();
    u.sort();
    u.dedup();
    u
}

/// The events of one incarnation.
fn of_incarnation(lc: &Lifecycle, inc: &str) -> Lifecycle {
    Lifecycle {
        events: lc
            .events
            .iter()
            .filter(|e| e.incarnation == inc)
            .cloned()
            .collect(),
    }
}

/// Incarnations in the order they first appear.
fn incarnations(lc: &Lifecycle) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for e in &lc.events {
        if !out.contains(&e.incarnation) {
            out.push(e.incarnation.clone());
        }
    }
    out
}

/// The deleted connector (every incarnation of the name) was cleaned up exactly as the
/// contract says.
async fn cleaned_up(c: &TestCluster, name: &str) {
    gone(c, name).await;
    admin_forgot(c, name);
    let lc = wait_until(
        &format!("{name}: every started instance stopped"),
        CONVERGE,
        || async {
            let lc = Lifecycle::read(&c.lifecycle_path(name));
            let started: Vec<_> = lc
                .events
                .iter()
                .filter(|e| e.connector == name && e.call == "start" && e.ok)
                .collect();
            started
                .iter()
                .all(|s| {
                    lc.events
                        .iter()
                        .any(|e| e.instance == s.instance && e.call == "stopped")
                })
                .then_some(lc)
        },
    )
    .await;
    for inc in incarnations(&lc) {
        let lc = of_incarnation(&lc, &inc);
        let units = seen_units(&lc, name);
        assert!(
            units.contains(&None),
            "{name} {inc}: the connector instance ran: {units:?}"
        );
        for u in units {
            let done = completed_trues(&lc, name, u);
            assert_eq!(done.len(), 1, "{name} {inc} {u:?}: {:?}", lc.calls(name, u));
        }
    }
    wharf_harness::fault::no_instance_stopped_twice(&lc, name);
}

/// The other call (create or put) landed after the deletion had finished and made the name
/// live again: a new incarnation, started only after the old one's cleanup completed, and
/// never stopped with true. Then it is deleted too.
async fn recreated_after_the_deletion(c: &TestCluster, name: &str, first: &str) {
    let lc = wait_until(
        &format!("{name}: a new incarnation runs"),
        CONVERGE,
        || async {
            let s = c.status(name)?;
            let lc = Lifecycle::read(&c.lifecycle_path(name));
            (s["connector"]["state"] == "STATE_RUNNING" && incarnations(&lc).len() == 2)
                .then_some(lc)
        },
    )
    .await;
    let incs = incarnations(&lc);
    assert_eq!(incs[0], first, "{incs:?}");
    let old = of_incarnation(&lc, first);
    let new = of_incarnation(&lc, &incs[1]);
    let old_done = old
        .events
        .iter()
        .filter(|e| e.call == "stopped" && e.ok && e.connector_deleted == Some(true))
        .map(|e| e.ts_ms)
        .max()
        .unwrap_or(i64::MAX);
    let new_start = new.events.iter().map(|e| e.ts_ms).min().unwrap_or(0);
    assert!(
        old_done <= new_start,
        "{name}: the new incarnation started before the old one's cleanup ended"
    );
    assert!(
        new.events.iter().all(|e| e.connector_deleted != Some(true)),
        "{name}: the new incarnation saw stop(true)"
    );
    assert_eq!(c.call("DeleteConnector", json!({ "name": name })).code, 0);
    cleaned_up(c, name).await;
}

/// Waits until `name` is either gone or live again under a new incarnation; true for the
/// latter.
async fn gone_or_recreated(c: &TestCluster, name: &str) -> bool {
    wait_until(&format!("{name} gone or re-created"), CONVERGE, || async {
        let r = c.call("GetConnectorStatus", json!({ "name": name }));
        if r.code == NOT_FOUND {
            return Some(false);
        }
        let s = &r.body["status"];
        let lc = Lifecycle::read(&c.lifecycle_path(name));
        (s["connector"]["state"] == "STATE_RUNNING"
            && s["deletion"].is_null()
            && incarnations(&lc).len() == 2)
            .then_some(true)
    })
    .await
}

/// Incarnation of the running connector `name`.
fn incarnation_of(c: &TestCluster, name: &str) -> String {
    Lifecycle::read(&c.lifecycle_path(name))
        .events
        .first()
        .map(|e| e.incarnation.clone())
        .expect("a lifecycle line")
}

/// A connector that survived never saw stop(true).
fn never_saw_true(c: &TestCluster, name: &str) {
    let lc = Lifecycle::read(&c.lifecycle_path(name));
    assert!(
        lc.events
            .iter()
            .filter(|e| e.connector == name)
            .all(|e| e.connector_deleted != Some(true)),
        "{name} saw stop(true): {:?}",
        lc.events
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_racing_with_create_of_the_same_name() {
    let c = start_mtls_cluster(2, &[]).await;
    // The connector exists: the create loses, whatever the order.
    let name = "race-create-existing";
    create_running(&c, name, c.source_config(name, 2), 2).await;
    let first = incarnation_of(&c, name);
    let (d, cr) = at_once(
        &c,
        ("DeleteConnector", json!({ "name": name })),
        (
            "CreateConnector",
            json!({ "name": name, "config": c.source_config(name, 2) }),
        ),
    );
    assert_eq!(d.code, 0, "{}", d.err);
    match cr.code {
        ALREADY_EXISTS | FAILED_PRECONDITION => cleaned_up(&c, name).await,
        0 => recreated_after_the_deletion(&c, name, &first).await,
        other => panic!("create of an existing or deleting name: {other} {}", cr.err),
    }

    // The name is new: either the delete finds nothing, or it deletes what was created.
    for round in 0..3 {
        let name = format!("race-create-new-{round}");
        let (cr, d) = at_once(
            &c,
            (
                "CreateConnector",
                json!({ "name": name, "config": c.source_config(&name, 2) }),
            ),
            ("DeleteConnector", json!({ "name": name })),
        );
        assert_eq!(cr.code, 0, "{}", cr.err);
        match d.code {
            NOT_FOUND => {
                c.wait_state(&name, "STATE_RUNNING", "STATE_RUNNING", 2)
                    .await;
                never_saw_true(&c, &name);
            }
            0 => cleaned_up(&c, &name).await,
            other => panic!("delete of a new name: {other} {}", d.err),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_racing_with_restart_and_config_update() {
    let c = start_mtls_cluster(2, &[]).await;
    for round in 0..2 {
        let name = format!("race-restart-{round}");
        create_running(&c, &name, c.source_config(&name, 2), 2).await;
        let (d, r) = at_once(
            &c,
            ("DeleteConnector", json!({ "name": name })),
            (
                "RestartConnector",
                json!({ "name": name, "include_tasks": true }),
            ),
        );
        assert_eq!(d.code, 0, "{}", d.err);
        assert!(
            r.code == 0 || r.code == FAILED_PRECONDITION || r.code == NOT_FOUND,
            "restart: {} {}",
            r.code,
            r.err
        );
        cleaned_up(&c, &name).await;

        let name = format!("race-update-{round}");
        create_running(&c, &name, c.source_config(&name, 2), 2).await;
        let first = incarnation_of(&c, &name);
        let (u, d) = at_once(
            &c,
            (
                "PutConnectorConfig",
                json!({ "name": name, "config": c.source_config(&name, 3) }),
            ),
            ("DeleteConnector", json!({ "name": name })),
        );
        assert_eq!(d.code, 0, "{}", d.err);
        match u.code {
            FAILED_PRECONDITION => cleaned_up(&c, &name).await,
            // Applied before the delete, or (a put creates) after it finished.
            0 => {
                if gone_or_recreated(&c, &name).await {
                    recreated_after_the_deletion(&c, &name, &first).await;
                } else {
                    cleaned_up(&c, &name).await;
                }
            }
            other => panic!("update: {other} {}", u.err),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_deletes_at_once_record_one_deletion_and_clean_up_once() {
    let c = start_mtls_cluster(2, &[]).await;
    for round in 0..3 {
        let name = format!("race-delete-{round}");
        create_running(&c, &name, c.source_config(&name, 2), 2).await;
        let (a, b) = at_once(
            &c,
            ("DeleteConnector", json!({ "name": name })),
            ("DeleteConnector", json!({ "name": name })),
        );
        for r in [&a, &b] {
            assert!(r.code == 0 || r.code == NOT_FOUND, "{} {}", r.code, r.err);
        }
        assert!(a.code == 0 || b.code == 0, "one of them deleted");
        cleaned_up(&c, &name).await;
        let recorded = c
            .cp_log()
            .lines()
            .filter(|l| {
                l.contains("deletion recorded") && l.contains(&format!("connector={name} "))
            })
            .count();
        assert_eq!(recorded, 1, "{name}: one deletion recorded");
    }
}
