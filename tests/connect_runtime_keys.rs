//! A Kafka Connect config is never half-applied: a Kafka Connect runtime key Wharf does
//! not implement (exactly-once support, client overrides, ...) or a
//! reference to a config provider Wharf does not implement (`${vault:...}`) is refused
//! naming the key, over gRPC and REST, with nothing stored; validate reports each as an
//! error on its key; a config of the plugin's keys and the runtime keys Wharf implements
//! is still accepted.
//! And a refused value is named by its key and rule only: it is in none of the answer,
//! the audit trail, or the control plane's log. Real control plane with `--rest-listen`,
//! a real executor.
//!
//! Build first: `cargo build -p wharf-control-plane -p wharf-executor-stock`.

use serde_json::{Value, json};
use wharf_harness::cluster::{INVALID_ARGUMENT, NOT_FOUND, TestCluster};
use wharf_harness::rest::start_with_rest;

/// Kafka Connect runtime keys Wharf does not implement (exactly-once support, a
/// connector's own offsets topic), each with a value
/// Connect would accept. (Converters, transforms, predicates and `errors.*` are
/// implemented: tests/pipeline.rs.)
const CONNECT_ONLY: &[(&str, &str)] = &[
    ("exactly.once.support", "required"),
    ("transaction.boundary", "poll"),
    ("offsets.storage.topic", "kc-offsets"),
];

/// A config-provider reference (KIP-297) to a provider Wharf does not implement, in a
/// key the plugin defines (`file`, `directory` and `env` are implemented:
/// tests/config_providers.rs).
const PROVIDER_KEY: &str = "test.topic";
const PROVIDER_VALUE: &str = "${vault:secret/s:topic}";

/// `base` with `pairs` set.
fn with(base: &Value, pairs: &[(&str, &str)]) -> Value {
    let mut cfg = base.clone();
    for (k, v) in pairs {
        cfg[*k] = json!(v);
    }
    cfg
}

/// Every audit trail entry, oldest first.
fn audit(c: &TestCluster) -> Vec<Value> {
    let r = c.call("ListAuditEntries", json!({ "page_size": 1000 }));
    assert_eq!(r.code, 0, "{}", r.err);
    r.body["entries"].as_array().cloned().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_runtime_keys_wharf_does_not_implement_are_refused_not_ignored() {
    let (c, rest) = start_with_rest(1, &[]).await;
    let name = "kc-src";
    let base = c.source_config(name, 1);
    let mut issue = with(&base, CONNECT_ONLY);
    issue[PROVIDER_KEY] = json!(PROVIDER_VALUE);

    // The issue's config: 400 naming a key, and nothing created.
    let a = rest
        .json("PUT", &format!("/connectors/{name}/config"), &issue)
        .await;
    assert_eq!(a.status, 400, "{a:?}");
    let msg = a.body["message"].as_str().unwrap_or_default().to_owned();
    assert!(msg.contains("config["), "{msg}");
    assert!(msg.contains("Wharf does not implement"), "{msg}");
    assert_eq!(rest.get(&format!("/connectors/{name}")).await.status, 404);

    // Each key alone, over REST (PUT and POST) and gRPC: refused naming that very key.
    let mut each: Vec<(&str, &str)> = CONNECT_ONLY.to_vec();
    each.push((PROVIDER_KEY, PROVIDER_VALUE));
    for (k, v) in &each {
        let cfg = with(&base, &[(k, v)]);
        let field = format!("config[{k}]");
        let a = rest
            .json("PUT", &format!("/connectors/{name}/config"), &cfg)
            .await;
        assert_eq!(a.status, 400, "{k}: {a:?}");
        let msg = a.body["message"].as_str().unwrap_or_default();
        assert!(msg.contains(&field), "{k}: {msg}");
        let a = rest
            .json(
                "POST",
                "/connectors",
                &json!({ "name": name, "config": cfg }),
            )
            .await;
        assert_eq!(a.status, 400, "{k}: {a:?}");
        let r = c.call("CreateConnector", json!({ "name": name, "config": cfg }));
        assert_eq!(r.code, INVALID_ARGUMENT, "{k}: {}", r.err);
        assert!(r.err.contains(&field), "{k}: {}", r.err);
    }
    let r = c.call("GetConnector", json!({ "name": name }));
    assert_eq!(r.code, NOT_FOUND, "{}", r.err);
    assert_eq!(rest.get(&format!("/connectors/{name}")).await.status, 404);
    let claimed: Vec<Value> = audit(&c)
        .into_iter()
        .filter(|e| e["connector"] == name && e["outcome"] == "OK")
        .collect();
    assert!(
        claimed.is_empty(),
        "no refused call is audited as OK: {claimed:?}"
    );

    // Validate: each of those keys is an error on its own entry.
    let a = rest
        .json(
            "PUT",
            "/connector-plugins/test-source/config/validate",
            &issue,
        )
        .await;
    assert_eq!(a.status, 200, "{a:?}");
    let configs = a.body["configs"].as_array().cloned().unwrap_or_default();
    for (k, _) in &each {
        let entry = configs
            .iter()
            .find(|e| e["value"]["name"] == *k)
            .unwrap_or_else(|| panic!("{k} has an entry: {}", a.body));
        let errors = entry["value"]["errors"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert!(!errors.is_empty(), "{k} is an error: {entry}");
    }
    assert!(
        a.body["error_count"].as_u64().unwrap_or(0) >= each.len() as u64,
        "{}",
        a.body
    );
    let r = c.call("ValidateConnectorConfig", json!({ "config": issue }));
    assert_eq!(r.code, 0, "{}", r.err);
    assert!(
        r.body["errorCount"].as_u64().unwrap_or(0) >= each.len() as u64,
        "{}",
        r.body
    );

    // The plugin's keys, the runtime keys Wharf implements and a key nobody defines
    // (today's warning) are still accepted.
    let fine = with(
        &base,
        &[
            ("cleanup.policy", "keep-trying"),
            ("cleanup.timeout.ms", "30000"),
            ("my.own.setting", "x"),
        ],
    );
    let a = rest
        .json("PUT", &format!("/connectors/{name}/config"), &fine)
        .await;
    assert_eq!(a.status, 201, "{a:?}");
    c.wait_state(name, "STATE_RUNNING", "STATE_RUNNING", 1)
        .await;

    // An update of the running connector is refused the same way and changes nothing:
    // PUT, PATCH and gRPC's PutConnectorConfig.
    let stored = rest.get(&format!("/connectors/{name}/config")).await.body;
    let a = rest
        .json("PUT", &format!("/connectors/{name}/config"), &issue)
        .await;
    assert_eq!(a.status, 400, "{a:?}");
    let a = rest
        .json(
            "PATCH",
            &format!("/connectors/{name}/config"),
            &json!({ "exactly.once.support": "required" }),
        )
        .await;
    assert_eq!(a.status, 400, "{a:?}");
    assert!(
        a.body["message"]
            .as_str()
            .unwrap_or_default()
            .contains("config[exactly.once.support]"),
        "{a:?}"
    );
    let r = c.call(
        "PutConnectorConfig",
        json!({ "name": name, "config": with(&fine, &[("producer.override.linger.ms", "5")]) }),
    );
    assert_eq!(r.code, INVALID_ARGUMENT, "{}", r.err);
    assert!(
        r.err.contains("config[producer.override.linger.ms]"),
        "{}",
        r.err
    );
    let after = rest.get(&format!("/connectors/{name}/config")).await.body;
    assert_eq!(after, stored, "the stored config is unchanged");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_value_is_in_no_answer_audit_entry_or_log_line() {
    let (c, rest) = start_with_rest(1, &[]).await;
    let marker = "MARKER-7f3a password=s3cr3t";
    let base = c.source_config("mk", 1);
    // A plugin key of type Long, a runtime Int, a runtime key with allowed values.
    let bad: &[(&str, String)] = &[
        ("test.poll.block.ms", format!("50 {marker}")),
        ("tasks.max", format!("1 {marker}")),
        ("cleanup.policy", marker.to_owned()),
        ("cleanup.timeout.ms", format!("5 {marker}")),
    ];
    for (k, v) in bad {
        let cfg = with(&base, &[(k, v)]);
        let field = format!("config[{k}]");
        let r = c.call("CreateConnector", json!({ "name": "mk", "config": cfg }));
        assert_eq!(r.code, INVALID_ARGUMENT, "{k}: {}", r.err);
        assert!(r.err.contains(&field), "{k}: {}", r.err);
        assert!(!r.err.contains("MARKER"), "{k}: the gRPC error: {}", r.err);
        let a = rest
            .json(
                "POST",
                "/connectors",
                &json!({ "name": "mk", "config": cfg }),
            )
            .await;
        assert_eq!(a.status, 400, "{k}: {a:?}");
        let body = a.body.to_string();
        assert!(body.contains(&field), "{k}: {body}");
        assert!(!body.contains("MARKER"), "{k}: the REST body: {body}");
        let a = rest.json("PUT", "/connectors/mk/config", &cfg).await;
        assert_eq!(a.status, 400, "{k}: {a:?}");
        assert!(!a.body.to_string().contains("MARKER"), "{k}: {}", a.body);
    }
    let trail = serde_json::to_string(&audit(&c)).expect("json");
    assert!(trail.contains("config[tasks.max]"), "{trail}");
    assert!(!trail.contains("MARKER"), "the audit trail: {trail}");
    let log = c.cp_log();
    assert!(
        log.contains("config[tasks.max]"),
        "the log records the refusals (so their absence of the value means something)"
    );
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("MARKER")).collect();
    assert!(lines.is_empty(), "the control plane's log: {lines:?}");
}
