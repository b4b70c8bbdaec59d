//! Shared by the fault tests (`tests/fault_*.rs`): a cluster whose control plane can be
//! started with a test-only crash point, checks over lifecycle files, and a look into the
//! control plane's store file once the process is gone.

use std::path::Path;

use redb::{ReadableDatabase, ReadableTable, TableDefinition};
use serde_json::{Value, json};

use crate::cluster::{CONVERGE, NOT_FOUND, TestCluster};
use crate::lifecycle::{Lifecycle, Stop};
use crate::{Proc, wait_until};

/// Env var the control plane reads for its test-only crash point (compiled in by the
/// `fault-injection` feature this crate enables).
pub use wharf_control_plane::reconcile::fault::CRASH_AT_ENV;

/// Starts a control plane (with `cp_env` added to its environment, first start only: a
/// `restart_control_plane` runs it without) and `n` executors, and waits until all are ALIVE.
pub async fn start_cluster(n: usize, cp_env: &[(&str, &str)]) -> TestCluster {
    start_cluster_secured(n, cp_env, false).await
}

/// As [`start_cluster`], with mutual TLS between every process and the clients presenting an
/// admin client certificate (see [`TestCluster::start_mtls`]): the fault suites run so,
/// as a production cluster does.
pub async fn start_mtls_cluster(n: usize, cp_env: &[(&str, &str)]) -> TestCluster {
    start_cluster_secured(n, cp_env, true).await
}

async fn start_cluster_secured(n: usize, cp_env: &[(&str, &str)], mtls: bool) -> TestCluster {
    TestCluster::start_secured_with_env(n, Vec::new(), mtls, cp_env).await
}

/// Creates `name` with `config` and waits until it and `tasks` tasks run; returns status.
pub async fn create_running(c: &TestCluster, name: &str, config: Value, tasks: usize) -> Value {
    let r = c.call("CreateConnector", json!({ "name": name, "config": config }));
    assert_eq!(r.code, 0, "create {name}: {}", r.err);
    c.wait_state(name, "STATE_RUNNING", "STATE_RUNNING", tasks)
        .await
}

/// Waits until GetConnectorStatus says NOT_FOUND.
pub async fn gone(c: &TestCluster, name: &str) {
    wait_until(&format!("{name} deleted"), CONVERGE, || async {
        (c.call("GetConnectorStatus", json!({ "name": name })).code == NOT_FOUND).then_some(())
    })
    .await;
}

/// Waits until executor `id` shows `state` (e.g. "EXECUTOR_STATE_LOST"); returns its entry.
pub async fn wait_executor(c: &TestCluster, id: &str, state: &str) -> Value {
    wait_until(&format!("{id} {state}"), CONVERGE, || async {
        let r = c.call("ListExecutors", json!({}));
        r.body["executors"]
            .as_array()?
            .iter()
            .find(|e| e["id"] == id && e["state"] == state)
            .cloned()
    })
    .await
}

/// Completed stop(true) calls of one unit (task `Some(i)` or the connector `None`).
pub fn completed_trues(lc: &Lifecycle, name: &str, unit: Option<u32>) -> Vec<Stop> {
    lc.stops(name, unit)
        .into_iter()
        .filter(|s| s.connector_deleted && s.ok)
        .collect()
}

/// Asserts every unit in `units` saw exactly one completed stop(true), and no instance
/// began two stops.
pub fn exactly_one_completed_true(lc: &Lifecycle, name: &str, units: &[Option<u32>]) {
    for u in units {
        let done = completed_trues(lc, name, *u);
        assert_eq!(
            done.len(),
            1,
            "{name} {u:?}: exactly one completed stop(true): {done:?}\n{:?}",
            lc.calls(name, *u)
        );
    }
    no_instance_stopped_twice(lc, name);
}

/// The runtime's guarantee: stop at most once per instance.
pub fn no_instance_stopped_twice(lc: &Lifecycle, name: &str) {
    let mut seen = std::collections::BTreeMap::new();
    for e in lc
        .events
        .iter()
        .filter(|e| e.connector == name && e.call == "stop")
    {
        *seen.entry(e.instance.clone()).or_insert(0) += 1;
    }
    for (i, n) in seen {
        assert_eq!(n, 1, "{name}: instance {i} began {n} stops");
    }
}

/// Task units `0..tasks` plus the connector instance.
pub fn units(tasks: u32) -> Vec<Option<u32>> {
    (0..tasks).map(Some).chain([None]).collect()
}

/// Keys the stopped control plane's store still holds for `name`: every key of the
/// `connectors` and `deletions` tables equal to it and every `offsets` key of it.
/// The control plane must not run (the file is locked while it does).
pub fn store_keys_of(store: &Path, name: &str) -> Vec<String> {
    const CONNECTORS: TableDefinition<&str, &[u8]> = TableDefinition::new("connectors");
    const DELETIONS: TableDefinition<&str, &[u8]> = TableDefinition::new("deletions");
    const OFFSETS: TableDefinition<&str, &str> = TableDefinition::new("offsets");
    let db = redb::Database::open(store).expect("open the stopped control plane's store");
    let tx = db.begin_read().expect("read tx");
    let mut out = Vec::new();
    for (table, def) in [("connectors", CONNECTORS), ("deletions", DELETIONS)] {
        let t = tx.open_table(def).expect("table");
        for entry in t.iter().expect("iter") {
            let (k, _) = entry.expect("entry");
            if k.value() == name {
                out.push(format!("{table}/{}", k.value()));
            }
        }
    }
    let t = tx.open_table(OFFSETS).expect("offsets table");
    let prefix = format!("{name}\0");
    for entry in t.iter().expect("iter") {
        let (k, _) = entry.expect("entry");
        if k.value().starts_with(&prefix) {
            out.push(format!("offsets/{}", k.value().replace('\0', "/")));
        }
    }
    out
}

/// Every key of the `connectors` and `deletions` tables, and the connector part of every
/// `offsets` key, of a stopped control plane's store.
pub fn store_names(store: &Path) -> (Vec<String>, Vec<String>, Vec<String>) {
    const CONNECTORS: TableDefinition<&str, &[u8]> = TableDefinition::new("connectors");
    const DELETIONS: TableDefinition<&str, &[u8]> = TableDefinition::new("deletions");
    const OFFSETS: TableDefinition<&str, &str> = TableDefinition::new("offsets");
    let db = redb::Database::open(store).expect("open the stopped control plane's store");
    let tx = db.begin_read().expect("read tx");
    let keys = |def: TableDefinition<&str, &[u8]>| -> Vec<String> {
        let t = tx.open_table(def).expect("table");
        t.iter()
            .expect("iter")
            .map(|e| e.expect("entry").0.value().to_owned())
            .collect()
    };
    let connectors = keys(CONNECTORS);
    let deletions = keys(DELETIONS);
    let t = tx.open_table(OFFSETS).expect("offsets table");
    let mut offsets: Vec<String> = t
        .iter()
        .expect("iter")
        .map(|e| {
            let k = e.expect("entry").0.value().to_owned();
            k.split('\0').next().unwrap_or_default().to_owned()
        })
        .collect();
    offsets.dedup();
    (connectors, deletions, offsets)
}

/// Checks through the admin API that nothing of `name` remains: status, config and
/// offsets are NOT_FOUND and the list does not name it.
pub fn admin_forgot(c: &TestCluster, name: &str) {
    for m in ["GetConnectorStatus", "GetConnector", "GetOffsets"] {
        let r = c.call(m, json!({ "name": name }));
        assert_eq!(r.code, NOT_FOUND, "{m} {name}: {} {}", r.body, r.err);
    }
    let r = c.call("ListConnectors", json!({}));
    assert!(
        !r.body.to_string().contains(&format!("\"{name}\"")),
        "ListConnectors still names {name}: {}",
        r.body
    );
}

/// `(task, generation, executor)` of every `cleanup step ... outcome="done"` log line of
/// the control plane for `name` (task None = the connector instance).
pub fn done_steps_in_log(log: &str, name: &str) -> Vec<(Option<u32>, u64, String)> {
    let conn = format!("connector={name} ");
    log.lines()
        .filter(|l| {
            l.contains("cleanup step") && l.contains(&conn) && l.contains("outcome=\"done\"")
        })
        .map(|l| {
            let field = |k: &str| {
                l.split(&format!("{k}="))
                    .nth(1)
                    .map(|r| r.split(' ').next().unwrap_or_default().to_owned())
                    .unwrap_or_default()
            };
            // The connector instance's step has no task field.
            let task = field("task").parse().ok();
            (
                task,
                field("generation").parse().unwrap_or(0),
                field("executor"),
            )
        })
        .collect()
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Kills `p` with SIGKILL if it still runs and waits for its exit; returns true when it
/// had already exited on its own.
pub fn reap(p: &mut Proc) -> bool {
    match p.child.as_mut().map(|c| c.try_wait()) {
        Some(Ok(Some(_))) => {
            p.child = None;
            true
        }
        _ => {
            p.kill9();
            false
        }
    }
}

/// Waits until `p` exited by itself (for a crash point).
pub async fn wait_exit(p: &mut Proc, what: &str) {
    let mut child = p.child.take().expect("running");
    wait_until(what, CONVERGE, || {
        let r = child.try_wait().ok().flatten();
        async move { r }
    })
    .await;
}
