//! Every kind of bad input, through the typed admin client against a real control plane
//! with a real executor: INVALID_ARGUMENT (or the documented code) naming the field,
//! and the store unchanged (same answers, same offsets) but for the audit trail, which
//! records each refused mutating call with its code.
//!
//! Build first: `cargo build -p wharf-control-plane -p wharf-executor-stock`.

use serde_json::{Value, json};
use wharf_harness::cluster::{
    ALREADY_EXISTS, FAILED_PRECONDITION, INVALID_ARGUMENT, NOT_FOUND, TestCluster,
};

/// The listing with status and the kept connector's offsets (it is STOPPED, so no
/// offsets are committed meanwhile). The store file itself changes on every refused
/// mutating call: the audit trail records it.
fn snapshot(c: &TestCluster) -> (String, String) {
    let list = c.call("ListConnectors", json!({ "expand_status": true }));
    let offsets = c.call("GetOffsets", json!({ "name": "kept" }));
    (list.body.to_string(), offsets.body.to_string())
}

/// Every audit trail entry, oldest first.
fn audit(c: &TestCluster) -> Vec<Value> {
    let r = c.call("ListAuditEntries", json!({ "page_size": 1000 }));
    assert_eq!(r.code, 0, "{}", r.err);
    r.body["entries"].as_array().cloned().unwrap_or_default()
}

/// gRPC's name of a status code, as the audit trail writes it.
fn code_name(code: i32) -> &'static str {
    match code {
        INVALID_ARGUMENT => "INVALID_ARGUMENT",
        NOT_FOUND => "NOT_FOUND",
        ALREADY_EXISTS => "ALREADY_EXISTS",
        FAILED_PRECONDITION => "FAILED_PRECONDITION",
        other => panic!("code {other} is not used here"),
    }
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
            json!({ "name": "x", "config": with(&[("", json!("v"))]) }),
            INVALID_ARGUMENT,
            "invalid config[\"\"]: the key is empty",
        ),
        (
            "CreateConnector",
            json!({ "name": "x", "config": with(&[("tasks.max\n", json!("1"))]) }),
            INVALID_ARGUMENT,
            "control character",
        ),
        (
            "PutConnectorConfig",
            json!({ "name": name, "config": with(&[("", json!("v"))]) }),
            INVALID_ARGUMENT,
            "invalid config[\"\"]: the key is empty",
        ),
        (
            "PutConnectorConfig",
            json!({ "name": "new-one", "config": with(&[(" tasks.max", json!("1"))]) }),
            INVALID_ARGUMENT,
            "invalid config[\" tasks.max\"]: the key has leading or trailing whitespace",
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
        let recorded = audit(&c).len();
        let r = c.call(method, body.clone());
        let shown: String = body.to_string().chars().take(160).collect();
        assert_eq!(r.code, code, "{method} {shown}: {}", r.err);
        assert!(
            r.err.contains(needle),
            "{method} {shown}: message {:?} should contain {needle:?}",
            r.err
        );
        assert_eq!(snapshot(&c), before, "{method} {shown} changed the store");
        let trail = audit(&c);
        if method == "GetConnector" {
            assert_eq!(trail.len(), recorded, "a read is not audited: {trail:?}");
        } else {
            assert_eq!(trail.len(), recorded + 1, "{method} {shown}: {trail:?}");
            let last = &trail[recorded];
            assert_eq!(last["rpc"], method, "{last}");
            assert_eq!(last["outcome"], code_name(code), "{last}");
            assert_eq!(last["principal"], "anonymous", "{last}");
        }
    }

    // Validate reports an empty key as an error on that key, and stores nothing.
    let r = c.call(
        "ValidateConnectorConfig",
        json!({ "config": with(&[("", json!("v"))]) }),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    let entry = r.body["configs"]
        .as_array()
        .and_then(|cs| cs.iter().find(|e| e["name"] == "").cloned())
        .unwrap_or_else(|| panic!("no entry for the empty key: {}", r.body));
    assert!(
        entry["errors"].to_string().contains("the key is empty"),
        "{entry}"
    );
    assert!(r.body["errorCount"].as_u64() >= Some(1), "{}", r.body);
    assert_eq!(snapshot(&c), before, "validate changed the store");
}
