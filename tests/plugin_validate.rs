//! A plugin's own config checks (`ConfigKey::validator`, code only an executor hosting
//! the plugin has) run before a config is reported valid or stored: validate reports
//! them on the right key over gRPC and REST, create and config put with such an error
//! are refused naming `config[<key>]` and store nothing, a secret value appears in no
//! answer, log or audit entry; with no executor live, validate answers with the
//! declarative checks and a warning that the plugin's did not run, and a create is
//! accepted as before. Real control plane (gRPC and REST) and a real executor; the
//! plugin is rabbitmq-sink, whose `rabbitmq.uri` validator refuses credentials (no
//! RabbitMQ is needed: validating connects to nothing).
//!
//! Build first: `cargo build --workspace --bins`.

use serde_json::{Value, json};
use wharf_harness::cluster::{CONVERGE, INVALID_ARGUMENT, NOT_FOUND, call_at};
use wharf_harness::rest::start_with_rest;
use wharf_harness::wait_until;

/// The password inside the refused URI: it must appear in no answer.
const SECRET: &str = "S3cr3t";
/// The key whose validator refuses credentials.
const URI: &str = "rabbitmq.uri";

/// A rabbitmq-sink config whose URI holds credentials (refused by the plugin's validator
/// only: the declarative checks pass it).
fn bad_config() -> Value {
    json!({
        "connector.class": "rabbitmq-sink",
        "topics": "orders",
        URI: format!("amqp://u:{SECRET}@127.0.0.1:5672/%2f"),
    })
}

/// The entry of `key` in a gRPC ValidateConnectorConfig body.
fn entry<'a>(body: &'a Value, key: &str) -> &'a Value {
    body["configs"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["name"] == key))
        .unwrap_or_else(|| panic!("no entry for {key} in {body}"))
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn assert_no_secret(what: &str, text: &str) {
    assert!(!text.contains(SECRET), "{what} shows the secret: {text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_validator_refusal_is_reported_and_refused_before_anything_is_stored() {
    let (mut c, rest) = start_with_rest(1, &[]).await;

    // gRPC validate: the validator's error on rabbitmq.uri, once the executor may be
    // asked (its identity probe follows its registration).
    let body = wait_until("validate reports the plugin's check", CONVERGE, || async {
        let r = c.call("ValidateConnectorConfig", json!({ "config": bad_config() }));
        assert_eq!(r.code, 0, "{}", r.err);
        (r.body["errorCount"] != 0).then_some(r.body)
    })
    .await;
    assert_no_secret("ValidateConnectorConfig", &body.to_string());
    assert_eq!(body["errorCount"], 1, "{body}");
    let uri = entry(&body, URI);
    assert!(
        strings(&uri["errors"])
            .iter()
            .any(|e| e.contains("must not hold credentials")),
        "{body}"
    );
    assert!(
        strings(&entry(&body, "connector.class")["warnings"]).is_empty(),
        "{body}"
    );

    // A config the validator accepts: no error, and no warning that checks were skipped.
    let mut good = bad_config();
    good[URI] = json!("amqp://127.0.0.1:5672/%2f");
    let r = c.call("ValidateConnectorConfig", json!({ "config": good }));
    assert_eq!(r.code, 0, "{}", r.err);
    assert_eq!(r.body["errorCount"], 0, "{}", r.body);
    assert_eq!(r.body["warningCount"], 0, "{}", r.body);

    // The executor itself: key names and messages only; NOT_FOUND for a plugin it lacks.
    let executors = c.call("ListExecutors", json!({}));
    let exec_addr = executors.body["executors"][0]["address"]
        .as_str()
        .expect("executor address")
        .to_owned();
    let r = call_at(
        &exec_addr,
        "wharf.v1.Executor/ValidateConfig",
        &json!({ "plugin": "rabbitmq-sink", "config": bad_config() }),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    assert_no_secret("Executor.ValidateConfig", &r.body.to_string());
    assert_eq!(r.body["keys"][0]["name"], URI, "{}", r.body);
    let r = call_at(
        &exec_addr,
        "wharf.v1.Executor/ValidateConfig",
        &json!({ "plugin": "no-such-plugin", "config": {} }),
    );
    assert_eq!(r.code, NOT_FOUND, "{}", r.err);

    // REST validate: the same error on the same key.
    let a = rest
        .json(
            "PUT",
            "/connector-plugins/rabbitmq-sink/config/validate",
            &bad_config(),
        )
        .await;
    assert_eq!(a.status, 200, "{a:?}");
    assert_no_secret("REST validate", &a.body.to_string());
    assert_eq!(a.body["error_count"], 1, "{a:?}");
    let uri = a.body["configs"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["value"]["name"] == URI))
        .expect("rabbitmq.uri in the REST answer");
    assert!(
        strings(&uri["value"]["errors"])
            .iter()
            .any(|e| e.contains("must not hold credentials")),
        "{a:?}"
    );

    // Create and config put over gRPC: INVALID_ARGUMENT naming the key; nothing stored.
    let r = c.call(
        "CreateConnector",
        json!({ "name": "creds", "config": bad_config() }),
    );
    assert_eq!(r.code, INVALID_ARGUMENT, "{}", r.err);
    assert!(r.err.contains(&format!("config[{URI}]")), "{}", r.err);
    assert!(r.err.contains("must not hold credentials"), "{}", r.err);
    assert_no_secret("CreateConnector", &r.err);
    let r = c.call(
        "PutConnectorConfig",
        json!({ "name": "creds", "config": bad_config() }),
    );
    assert_eq!(r.code, INVALID_ARGUMENT, "{}", r.err);
    assert!(r.err.contains(&format!("config[{URI}]")), "{}", r.err);
    assert_no_secret("PutConnectorConfig", &r.err);
    // Over REST: Kafka Connect's 400, naming the key.
    let a = rest
        .json(
            "POST",
            "/connectors",
            &json!({ "name": "creds", "config": bad_config() }),
        )
        .await;
    assert_eq!(a.status, 400, "{a:?}");
    assert_eq!(a.body["error_code"], 400, "{a:?}");
    let msg = a.body["message"].as_str().unwrap_or_default();
    assert!(msg.contains(&format!("config[{URI}]")), "{a:?}");
    assert_no_secret("POST /connectors", msg);
    let a = rest
        .json("PUT", "/connectors/creds/config", &bad_config())
        .await;
    assert_eq!(a.status, 400, "{a:?}");
    assert_no_secret("PUT /connectors/creds/config", &a.body.to_string());

    let r = c.call("GetConnectorStatus", json!({ "name": "creds" }));
    assert_eq!(r.code, NOT_FOUND, "{}", r.err);
    let r = c.call("ListConnectors", json!({}));
    assert_eq!(r.code, 0, "{}", r.err);
    assert_eq!(r.body["connectors"], json!([]), "{}", r.body);
    assert_eq!(rest.get("/connectors/creds").await.status, 404);
    let audit = c.call("ListAuditEntries", json!({ "page_size": 1000 }));
    assert_eq!(audit.code, 0, "{}", audit.err);
    assert_no_secret("the audit trail", &audit.body.to_string());

    // No executor live: validate answers with the declarative checks and says the
    // plugin's did not run; a create is accepted on them, as before, logged at WARN.
    c.executors[0].kill9();
    // (Until its lease runs out the call to it fails, which is a warning too.)
    let body = wait_until(
        "validate says no live executor could check",
        CONVERGE,
        || async {
            let r = c.call("ValidateConnectorConfig", json!({ "config": bad_config() }));
            assert_eq!(r.code, 0, "{}", r.err);
            let warned = strings(&entry(&r.body, "connector.class")["warnings"])
                .iter()
                .any(|w| {
                    w.contains("did not run: no live executor offers plugin \"rabbitmq-sink\"")
                });
            warned.then_some(r.body)
        },
    )
    .await;
    assert_eq!(body["errorCount"], 0, "{body}");
    assert_eq!(body["warningCount"], 1, "{body}");
    assert_no_secret(
        "ValidateConnectorConfig without executors",
        &body.to_string(),
    );
    let r = c.call(
        "CreateConnector",
        json!({ "name": "unchecked", "config": bad_config(), "initial_state": "TARGET_STATE_STOPPED" }),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    let log = c.cp_log();
    assert!(
        log.contains("did not run"),
        "no WARN about the skipped checks"
    );
    assert_no_secret("the control plane's log", &log);
}

/// With two executors offering the plugin and one of them just killed (still leased, so
/// still a candidate), every validate reports the plugin's error: a call that fails at
/// once moves on to the other executor instead of leaving the checks undone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_executor_is_passed_over_for_one_that_answers() {
    let (mut c, _rest) = start_with_rest(2, &[]).await;
    c.executors[0].kill9();
    for round in 0..5 {
        let r = c.call("ValidateConnectorConfig", json!({ "config": bad_config() }));
        assert_eq!(r.code, 0, "{}", r.err);
        assert!(
            !strings(&entry(&r.body, URI)["errors"]).is_empty(),
            "round {round}: the plugin's check did not run: {}",
            r.body
        );
        assert_no_secret("ValidateConnectorConfig", &r.body.to_string());
    }
}
