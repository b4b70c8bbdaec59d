//! Every kind of bad input, through real grpcurl against a real control plane with a real
//! executor: INVALID_ARGUMENT (or the documented code) naming the field, and the store
//! unchanged (same file bytes, same answers).
//!
//! Build first: `cargo build -p wharf-control-plane -p wharf-executor`.

use serde_json::{Value, json};
use wharf_harness::cluster::{
    ALREADY_EXISTS, FAILED_PRECONDITION, INVALID_ARGUMENT, NOT_FOUND, TestCluster, bytes_of,
};

/// A digest of the store file and the listing (the file only changes on a write: the
/// kept connector is STOPPED, so no offsets are committed meanwhile).
fn snapshot(c: &TestCluster) -> (u64, String) {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    bytes_of(&c.store_file()).hash(&mut h);
    let list = c.call("ListConnectors", json!({ "expand_status": true }));
    (h.finish(), list.body.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_are_refused_naming_the_field_and_change_nothing() {
    let c = TestCluster::start(1).await;
    let name = "kept";
    let good = c.source_config(name, 1);
    let r = c.call(
        "CreateConnector",
        json!({ "name": name, "config": good, "initial_state": "TARGET_STATE_STOPPED" }),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    c.wait_state(name, "STATE_STOPPED", "STATE_STOPPED", 0)
        .await;
    let before = snapshot(&c);

    let with = |pairs: &[(&str, Value)]| {
        let mut cfg = c.source_config("x", 1);
        for (k, v) in pairs {
            if v.is_null() {
                cfg.as_object_mut().unwrap().remove(*k);
            } else {
                cfg[*k] = v.clone();
            }
        }
        cfg
    };
    let long_name = "n".repeat(300);
    let cases: Vec<(&str, Value, i32, &str)> = vec![
        (
            "CreateConnector",
            json!({ "name": "", "config": with(&[]) }),
            INVALID_ARGUMENT,
            "invalid name",
        ),
        (
            "CreateConnector",
            json!({ "name": "a/b", "config": with(&[]) }),
            INVALID_ARGUMENT,
            "invalid name",
        ),
        (
            "CreateConnector",
            json!({ "name": "a%2Fb", "config": with(&[]) }),
            INVALID_ARGUMENT,
            "invalid name",
        ),
        (
            "CreateConnector",
            json!({ "name": "  spaced  ", "config": with(&[]) }),
            INVALID_ARGUMENT,
            "invalid name",
        ),
        (
            "CreateConnector",
            json!({ "name": long_name, "config": with(&[]) }),
            INVALID_ARGUMENT,
            "invalid name",
        ),
        (
            "CreateConnector",
            json!({ "name": "rtl\u{202e}x", "config": with(&[]) }),
            INVALID_ARGUMENT,
            "invalid name",
        ),
        (
            "CreateConnector",
            json!({ "name": "x", "config": with(&[("connector.class", json!("no-such-plugin"))]) }),
            INVALID_ARGUMENT,
            "config[connector.class]",
        ),
        (
            "CreateConnector",
            json!({ "name": "x", "config": with(&[("connector.class", Value::Null)]) }),
            INVALID_ARGUMENT,
            "config[connector.class]",
        ),
        (
            "CreateConnector",
            json!({ "name": "x", "config": with(&[("tasks.max", json!("0"))]) }),
            INVALID_ARGUMENT,
            "config[tasks.max]",
        ),
        (
            "CreateConnector",
            json!({ "name": "x", "config": with(&[("tasks.max", json!("-2"))]) }),
            INVALID_ARGUMENT,
            "config[tasks.max]",
        ),
        (
            "CreateConnector",
            json!({ "name": "x", "config": with(&[("tasks.max", json!("many"))]) }),
            INVALID_ARGUMENT,
            "config[tasks.max]",
        ),
        (
            "CreateConnector",
            json!({ "name": "x", "config": with(&[("lifecycle.path", Value::Null)]) }),
            INVALID_ARGUMENT,
            "config[lifecycle.path]",
        ),
        (
            "CreateConnector",
            json!({ "name": "x", "config": with(&[("test.tasks", json!("lots"))]) }),
            INVALID_ARGUMENT,
            "config[test.tasks]",
        ),
        (
            "CreateConnector",
            json!({ "name": "x", "config": with(&[("big", json!("v".repeat(70_000)))]) }),
            INVALID_ARGUMENT,
            "config[big]",
        ),
        (
            "CreateConnector",
            json!({ "name": "x", "config": with(&[("a", json!("v".repeat(60_000))), ("b", json!("v".repeat(60_000))), ("c", json!("v".repeat(60_000))), ("d", json!("v".repeat(60_000))), ("e", json!("v".repeat(60_000)))]) }),
            INVALID_ARGUMENT,
            "invalid config",
        ),
        (
            "CreateConnector",
            json!({ "name": "x", "config": with(&[]), "initial_state": 42 }),
            INVALID_ARGUMENT,
            "initial_state",
        ),
        (
            "CreateConnector",
            json!({ "name": name, "config": good }),
            ALREADY_EXISTS,
            "already exists",
        ),
        (
            "PutConnectorConfig",
            json!({ "name": name, "config": with(&[("tasks.max", json!("0"))]) }),
            INVALID_ARGUMENT,
            "config[tasks.max]",
        ),
        (
            "PutConnectorConfig",
            json!({ "name": "a/b", "config": with(&[]) }),
            INVALID_ARGUMENT,
            "invalid name",
        ),
        (
            "GetConnector",
            json!({ "name": "missing" }),
            NOT_FOUND,
            "not found",
        ),
        (
            "GetConnector",
            json!({ "name": "a b" }),
            INVALID_ARGUMENT,
            "invalid name",
        ),
        (
            "PauseConnector",
            json!({ "name": "missing" }),
            NOT_FOUND,
            "not found",
        ),
        (
            "RestartTask",
            json!({ "name": name, "task": 7 }),
            FAILED_PRECONDITION,
            "STOPPED",
        ),
        (
            "AlterOffsets",
            json!({ "name": name, "offsets": [{ "partition": "not json", "offset": "{}" }] }),
            INVALID_ARGUMENT,
            "offsets[0].partition",
        ),
        (
            "AlterOffsets",
            json!({ "name": name, "offsets": [{ "partition": "{}", "offset": "[1]" }] }),
            INVALID_ARGUMENT,
            "offsets[0].offset",
        ),
        (
            "ResetOffsets",
            json!({ "name": "missing" }),
            NOT_FOUND,
            "not found",
        ),
        (
            "RetryCleanup",
            json!({ "name": name }),
            FAILED_PRECONDITION,
            "not being deleted",
        ),
        (
            "DeleteConnector",
            json!({ "name": "missing" }),
            NOT_FOUND,
            "not found",
        ),
        (
            "DeleteConnector",
            json!({ "name": "" }),
            INVALID_ARGUMENT,
            "invalid name",
        ),
    ];
    for (method, body, code, needle) in cases {
        let r = c.call(method, body.clone());
        let shown: String = body.to_string().chars().take(160).collect();
        assert_eq!(r.code, code, "{method} {shown}: {}", r.err);
        assert!(
            r.err.contains(needle),
            "{method} {shown}: message {:?} should contain {needle:?}",
            r.err
        );
        assert_eq!(snapshot(&c), before, "{method} {shown} changed the store");
    }
}
