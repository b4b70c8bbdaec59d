//! KIP-875 offsets through the typed admin client (get while running; alter and reset
//! only when STOPPED; a resumed task continues from the altered offset) and
//! WatchConnector streaming a snapshot, state changes and the final DELETED event.
//!
//! Build first: `cargo build -p wharf-control-plane -p wharf-executor-stock`.

use serde_json::json;
use wharf_harness::cluster::{CONVERGE, FAILED_PRECONDITION, NOT_FOUND, TestCluster};
use wharf_harness::wait_until;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offsets_are_readable_and_change_only_while_stopped() {
    let c = TestCluster::start(1).await;
    let name = "offs";
    assert_eq!(
        c.call(
            "CreateConnector",
            json!({ "name": name, "config": c.source_config(name, 1) })
        )
        .code,
        0
    );
    c.wait_state(name, "STATE_RUNNING", "STATE_RUNNING", 1)
        .await;
    let committed = wait_until("a committed offset", CONVERGE, || async {
        let r = c.call("GetOffsets", json!({ "name": name }));
        let offsets = r.body["offsets"].as_array()?.clone();
        (!offsets.is_empty()).then_some(offsets)
    })
    .await;
    let partition = committed[0]["partition"]
        .as_str()
        .expect("partition")
        .to_owned();

    let alter = json!({ "name": name, "offsets": [{ "partition": partition, "offset": "{\"seq\":1000000}" }] });
    let r = c.call("AlterOffsets", alter.clone());
    assert_eq!(
        r.code, FAILED_PRECONDITION,
        "running connector refuses: {}",
        r.err
    );
    assert_eq!(
        c.call("ResetOffsets", json!({ "name": name })).code,
        FAILED_PRECONDITION
    );

    assert_eq!(c.call("StopConnector", json!({ "name": name })).code, 0);
    c.wait_state(name, "STATE_STOPPED", "STATE_STOPPED", 1)
        .await;
    assert_eq!(c.call("ResetOffsets", json!({ "name": name })).code, 0);
    let r = c.call("GetOffsets", json!({ "name": name }));
    assert_eq!(
        r.body["offsets"].as_array().map(Vec::len),
        Some(0),
        "{}",
        r.body
    );
    let r = c.call("AlterOffsets", alter);
    assert_eq!(r.code, 0, "{}", r.err);
    let r = c.call("GetOffsets", json!({ "name": name }));
    assert_eq!(
        r.body["offsets"][0]["offset"], "{\"seq\":1000000}",
        "{}",
        r.body
    );

    // Resumed, the task continues after the altered offset.
    assert_eq!(c.call("ResumeConnector", json!({ "name": name })).code, 0);
    wait_until("commits beyond the altered offset", CONVERGE, || async {
        let r = c.call("GetOffsets", json!({ "name": name }));
        let o = r.body["offsets"][0]["offset"].as_str()?.to_owned();
        let seq = serde_json::from_str::<serde_json::Value>(&o).ok()?["seq"].as_u64()?;
        (seq > 1_000_000).then_some(())
    })
    .await;

    // Deleted: offsets are gone with it.
    let r = c.call("DeleteConnector", json!({ "name": name, "wait": true }));
    assert_eq!(r.body["deleted"], true, "{}", r.err);
    assert_eq!(
        c.call("GetOffsets", json!({ "name": name })).code,
        NOT_FOUND
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_streams_a_snapshot_the_changes_and_the_deletion() {
    let c = TestCluster::start(1).await;
    let name = "watched";
    assert_eq!(
        c.call(
            "CreateConnector",
            json!({ "name": name, "config": c.source_config(name, 1) })
        )
        .code,
        0
    );
    let watch = c.watch(name);
    c.wait_state(name, "STATE_RUNNING", "STATE_RUNNING", 1)
        .await;
    assert_eq!(c.call("PauseConnector", json!({ "name": name })).code, 0);
    c.wait_state(name, "STATE_PAUSED", "STATE_PAUSED", 1).await;
    let r = c.call("DeleteConnector", json!({ "name": name, "wait": true }));
    assert_eq!(r.body["deleted"], true, "{}", r.err);
    let events = match watch.wait() {
        Ok(events) => events,
        Err(failed) => panic!("the watch ended with an error: {}", failed.err),
    };
    let types: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
    assert_eq!(
        types.first(),
        Some(&"CONNECTOR_EVENT_TYPE_SNAPSHOT"),
        "{types:?}"
    );
    assert_eq!(
        types.last(),
        Some(&"CONNECTOR_EVENT_TYPE_DELETED"),
        "{types:?}"
    );
    let states: Vec<&str> = events
        .iter()
        .filter_map(|e| e["status"]["connector"]["state"].as_str())
        .collect();
    for wanted in ["STATE_RUNNING", "STATE_PAUSED", "STATE_DELETING"] {
        assert!(states.contains(&wanted), "watch saw {wanted}: {states:?}");
    }
}
